/* config_model.c: the keys of a model of the built-in HTTP kinds (openai,
 * anthropic: docs/models.md) and their check once the section is read:
 * base_url, model, api_key_env, headers, prices, backoff (see config.h;
 * config.c reads the file and hands these keys here, config_int.h). */
#include "common/config.h"
#include "common/config_int.h"
#include "common/cmdline.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* VAR passed from the worker to the process (env's "VAR"), unless env
 * names it already. 0 or -ENOMEM. */
static int iso_env_pass(struct isolate_cfg *i, const char *var)
{
	size_t n = 0, vl = strlen(var);
	for (; i->env && i->env[n]; n++)
		if (!strncmp(i->env[n], var, vl) && (!i->env[n][vl] || i->env[n][vl] == '='))
			return 0;
	char **e = realloc(i->env, (n + 2) * sizeof *e);
	if (!e)
		return -ENOMEM;
	i->env = e;
	e[n + 1] = NULL;
	return (e[n] = strdup(var)) ? 0 : -ENOMEM;
}

const char *config_model_kind_name(int kind)
{
	return kind == MODEL_OPENAI ? "openai" : kind == MODEL_ANTHROPIC ? "anthropic" : "exec";
}

int config_model_http_key(struct model_cfg *m, const char *k, const char *v)
{
	if (!strcmp(k, "kind")) {
		if (!strcmp(v, "exec"))
			m->kind = MODEL_EXEC;
		else if (!strcmp(v, "openai"))
			m->kind = MODEL_OPENAI;
		else if (!strcmp(v, "anthropic"))
			m->kind = MODEL_ANTHROPIC;
		else
			return -1;
		return 0;
	}
	if (!strcmp(k, "base_url")) {
		/* libcurl would take other schemes (file://, ftp://) too. */
		if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
			return -1;
		return config_set_str(&m->base_url, v);
	}
	if (!strcmp(k, "model"))
		return *v ? config_set_str(&m->model, v) : -1;
	if (!strcmp(k, "api_key_env")) {
		for (const char *p = v; *p; p++)
			if (!isalnum((unsigned char)*p) && *p != '_')
				return -1;
		return *v ? config_set_str(&m->api_key_env, v) : -1;
	}
	if (!strcmp(k, "connect_timeout"))
		return config_duration(v, &m->connect_timeout_ms) || m->connect_timeout_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "max_tokens"))
		return config_set_int(&m->max_tokens, v, 1, 100000000);
	if (!strcmp(k, "params")) {
		json_t *o = json_loads(v, JSON_REJECT_DUPLICATES, NULL);
		int ok = json_is_object(o);
		json_decref(o);
		return ok ? config_set_str(&m->params, v) : -1;
	}
	if (!strcmp(k, "backoff"))
		return config_duration(v, &m->backoff_ms) || m->backoff_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "backoff_max"))
		return config_duration(v, &m->backoff_max_ms) || m->backoff_max_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "headers")) /* checked and resolved with the whole section (model_headers) */
		return config_set_str(&m->headers_conf, v);
	if (!strcmp(k, "price_input"))
		return config_set_decimal(&m->price_input, v);
	if (!strcmp(k, "price_output"))
		return config_set_decimal(&m->price_output, v);
	return -2;
}

/* A header's name: an HTTP token (RFC 9110). */
static int header_name_ok(const char *s, size_t n)
{
	if (!n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
			return 0;
	return 1;
}

/* v with $VAR, ${VAR} and $$ replaced, into *out (malloc'd); each VAR
 * passed to agentd-model (iso.env). 0, -ENOMEM, or -EINVAL with why (which
 * names a variable, never a value). */
static int header_expand(struct isolate_cfg *iso, const char *v, char **out, char *why, size_t whylen)
{
	size_t cap = strlen(v) + 1, len = 0;
	char *o = malloc(cap);
	for (const char *p = v; o && *p;) {
		const char *add = p, *next = p + 1;
		size_t n = 1;
		char var[128];
		if (*p == '$' && p[1] == '$') {
			next = p + 2;
		} else if (*p == '$') {
			int br = p[1] == '{';
			const char *nm = p + 1 + br;
			size_t nl = strspn(nm, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
			if (!config_env_name_ok(nm, nl) || nl >= sizeof var || (br && nm[nl] != '}')) {
				snprintf(why, whylen, "a '$' that starts no variable ($NAME, ${NAME}; $$ for a '$')");
				free(o);
				return -EINVAL;
			}
			snprintf(var, sizeof var, "%.*s", (int)nl, nm);
			next = nm + nl + br;
			if (!(add = getenv(var))) {
				snprintf(why, whylen, "the variable %s is not set", var);
				free(o);
				return -EINVAL;
			}
			n = strlen(add);
			if (iso_env_pass(iso, var)) {
				free(o);
				return -ENOMEM;
			}
		}
		if (len + n + 1 > cap) {
			char *b = realloc(o, (cap = 2 * (len + n + 1)));
			if (!b)
				free(o);
			o = b;
		}
		if (o) {
			memcpy(o + len, add, n);
			len += n;
		}
		p = next;
	}
	if (!o)
		return -ENOMEM;
	o[len] = 0;
	*out = o;
	return 0;
}

static const char *header_set_by_us(const char *name, size_t n, const char *const *list)
{
	for (const char *const *h = list; *h; h++)
		if (strlen(*h) == n && !strncasecmp(name, *h, n))
			return "agentd sets it";
	return NULL;
}

/* The headers agentd sets itself on a model's request: none may be configured over them. */
static const char *header_owned(const void *arg, const char *name, size_t n)
{
	static const char *const any[] = { "Content-Type", "Content-Length", "Host", "Transfer-Encoding",
					   "Connection", "Expect", NULL };
	const struct model_cfg *m = arg;
	const char *why = header_set_by_us(name, n, any);
	if (why)
		return why;
	int anth = m->kind == MODEL_ANTHROPIC;
	const char *key = getenv(m->api_key_env);
	const char *auth = anth ? "x-api-key" : "Authorization";
	if (key && *key && strlen(auth) == n && !strncasecmp(name, auth, n))
		return "agentd sends the key api_key_env names, which is set";
	if (anth && n == 17 && !strncasecmp(name, "anthropic-version", n))
		return "agentd sends the version its requests are written for";
	return NULL;
}

/* ... and on an MCP server's (agent/mcp_http.c). */
const char *config_mcp_header_owned(const void *arg, const char *name, size_t n)
{
	static const char *const any[] = { "Content-Type", "Content-Length", "Host", "Transfer-Encoding",
					   "Connection", "Expect", "Accept", "Mcp-Session-Id",
					   "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", NULL };
	(void)arg;
	return header_set_by_us(name, n, any);
}

int config_headers(const char *path, const char *section, const char *conf, struct isolate_cfg *iso,
		   const char *(*owned)(const void *, const char *, size_t), const void *arg, char ***out,
		   char *err, size_t errlen)
{
	char **w = NULL, **hs = NULL, why[200] = "";
	int e = cmdline_split(conf, &w);
	size_t n = 0;
	while (!e && w[n])
		n++;
	if (!e && !(hs = calloc(n + 1, sizeof *hs)))
		e = -ENOMEM;
	for (size_t k = 0; !e && k < n; k++) {
		const char *colon = strchr(w[k], ':'), *v = colon ? colon + 1 : NULL;
		size_t nl = colon ? (size_t)(colon - w[k]) : 0;
		if (!colon || !header_name_ok(w[k], nl)) {
			snprintf(why, sizeof why, "header %zu is not 'Name: value' with Name an HTTP token", k + 1);
			e = -EINVAL;
			break;
		}
		const char *taken = owned(arg, w[k], nl);
		for (size_t j = 0; !taken && j < k; j++)
			if (!strncasecmp(hs[j], w[k], nl) && hs[j][nl] == ':')
				taken = "it is given twice";
		if (taken) {
			snprintf(why, sizeof why, "%.*s cannot be configured: %s", (int)nl, w[k], taken);
			e = -EINVAL;
			break;
		}
		v += strspn(v, " \t");
		char *val = NULL;
		size_t vl;
		if ((e = header_expand(iso, v, &val, why, sizeof why)))
			break;
		for (vl = strlen(val); vl && (val[vl - 1] == ' ' || val[vl - 1] == '\t');)
			val[--vl] = 0;
		for (size_t i = 0; !e && i < vl; i++)
			if (((unsigned char)val[i] < 0x20 && val[i] != '\t') || val[i] == 0x7f)
				e = -EINVAL;
		if (e || !vl)
			snprintf(why, sizeof why, "%.*s's value %s", (int)nl, w[k],
				 e ? "has a control character (CR, LF, ...)" : "is empty");
		if (!e && !vl)
			e = -EINVAL;
		if (!e && asprintf(&hs[k], "%.*s: %s", (int)nl, w[k], val) < 0) {
			hs[k] = NULL;
			e = -ENOMEM;
		}
		free(val);
	}
	cmdline_free(w);
	if (e == -ENOMEM)
		snprintf(err, errlen, "%s: out of memory", path);
	else if (e)
		snprintf(err, errlen, "%s: [%s] headers: %s", path, section,
			 why[0] ? why : "an unterminated quote, a trailing backslash or no header");
	if (e) {
		for (size_t k = 0; hs && hs[k]; k++)
			free(hs[k]);
		free(hs);
		return -1;
	}
	*out = hs;
	return 0;
}

static int model_headers(const char *path, struct model_cfg *m, char *err, size_t errlen)
{
	char section[200];
	snprintf(section, sizeof section, "model.%s", m->name);
	return config_headers(path, section, m->headers_conf, &m->iso, header_owned, m, &m->headers, err, errlen);
}

/* The whole section read: an HTTP kind needs its model and takes no
 * command; defaults that depend on the kind. */
int config_model_http_validate(const char *path, struct model_cfg *m, char *err, size_t errlen)
{
	if (m->kind == MODEL_EXEC && (m->headers_conf || m->price_input || m->price_output)) {
		snprintf(err, errlen, "%s: [model.%s] is kind exec: headers, price_input and price_output are for kinds "
			 "openai and anthropic (a command reports its own usage.cost)", path, m->name);
		return -1;
	}
	if (m->kind == MODEL_EXEC)
		return 0;
	const char *kind = config_model_kind_name(m->kind);
	if (m->command) {
		snprintf(err, errlen, "%s: [model.%s] is kind %s: it takes no command", path, m->name, kind);
		return -1;
	}
	if (!m->model) {
		snprintf(err, errlen, "%s: [model.%s] is kind %s and needs model (the API's model name)", path, m->name,
			 kind);
		return -1;
	}
	if (m->backoff_max_ms < m->backoff_ms) {
		snprintf(err, errlen, "%s: [model.%s] backoff_max is shorter than backoff", path, m->name);
		return -1;
	}
	int anth = m->kind == MODEL_ANTHROPIC;
	if (!m->base_url && config_set_str(&m->base_url, anth ? "https://api.anthropic.com/v1" : "https://api.openai.com/v1"))
		return -1;
	if (!m->api_key_env && config_set_str(&m->api_key_env, anth ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY"))
		return -1;
	if (anth && !m->max_tokens)
		m->max_tokens = 4096; /* the Messages API requires it */
	return m->headers_conf ? model_headers(path, m, err, errlen) : 0;
}
