/* config.c: the INI configuration and logging (see config.h). */
#include "common/config.h"
#include "common/config_int.h"
#include "common/cmdline.h"
#include "common/id.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <jansson.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SEC 1000
#define MAP_MIN ((size_t)64 << 10) /* smaller maps cannot hold LMDB's own pages */
#define MAX_MAP_DEFAULT ((size_t)64 << 30) /* the store's default max_map_size */
#define CAP_MAX ((size_t)1 << 30) /* line and output caps: a larger one is a typo, not a plan */
static struct model_cfg echo_model = { .name = "echo", .iso = { .uid = -1, .gid = -1 } };

int config_init(struct config *c)
{
	memset(c, 0, sizeof *c);
	c->data = strdup("./agentd-data");
	c->idle_timeout_ms = 300 * SEC;
	c->sync = SYNC_FULL;
	c->audit_ttl_ms = 7LL * 24 * 3600 * SEC;
	c->retention_interval_ms = 600 * SEC;
	c->socket_gid = -1;
	c->max_line = 1 << 20;
	c->max_reply_bytes = 4u << 20;
	c->max_workers = 256;
	c->restart_limit = 5;
	c->restart_window_ms = 60 * SEC;
	c->shutdown_timeout_ms = 10 * SEC;
	c->compact_events = 400;
	c->compact_keep = 20;
	c->max_tool_rounds = 25;
	c->model_out_cap = 4 << 20;
	c->log_level = LOG_INFO;
	c->budget.max_tokens = c->budget.max_turns = -1;
	c->budget.max_cost = -1;
	c->batch_max_events = 100;
	c->batch_max_bytes = 1 << 20;
	c->lease_ms = 10 * SEC;
	c->notify_poll_ms = 2 * SEC;
	c->store_connections = 64;
	return c->data ? 0 : -ENOMEM;
}

static void words_free(char **w)
{
	for (size_t k = 0; w && w[k]; k++)
		free(w[k]);
	free(w);
}

static void iso_free(struct isolate_cfg *i)
{
	words_free(i->hide);
	for (size_t k = 0; i->env && i->env[k]; k++)
		free(i->env[k]);
	free(i->env);
	free(i->user);
	free(i->group);
}

static void mcp_free(struct mcp_cfg *m)
{
	if (!m)
		return;
	free(m->command);
	free(m->url);
	free(m->headers_conf);
	for (size_t i = 0; m->headers && m->headers[i]; i++)
		free(m->headers[i]);
	free(m->headers);
	free(m->args);
	free(m->prefix);
	free(m->idempotent_tools);
	free(m->non_idempotent_tools);
	free(m);
}

static void model_free(struct model_cfg *m)
{
	iso_free(&m->iso);
	free(m->name);
	free(m->command);
	free(m->base_url);
	free(m->model);
	free(m->api_key_env);
	free(m->params);
	free(m->headers_conf);
	for (size_t k = 0; m->headers && m->headers[k]; k++)
		free(m->headers[k]);
	free(m->headers);
}

static void tool_free(struct tool_cfg *t)
{
	iso_free(&t->iso);
	mcp_free(t->mcp);
	free(t->name);
	free(t->command);
	free(t->prompt);
	free(t->description);
	free(t->reconcile);
	free(t->escalate_to);
}

static const char *const on_expiry_names[] = { "expire", "deny", "approve", "escalate" };

const char *config_on_expiry_name(int policy)
{
	return policy >= 0 && policy <= ON_EXPIRY_ESCALATE ? on_expiry_names[policy] : "expire";
}

static const char *const on_user_message_names[] = { "keep", "reject" };

const char *config_on_user_message_name(int policy)
{
	return policy == ON_USER_MESSAGE_REJECT ? "reject" : "keep";
}

void config_free(struct config *c)
{
	for (size_t i = 0; i < c->nmodels; i++)
		model_free(&c->models[i]);
	for (size_t i = 0; i < c->ntools; i++)
		tool_free(&c->tools[i]);
	free(c->models);
	free(c->tools);
	free(c->node_id);
	free(c->retention_export);
	free(c->socket_group);
	free(c->path);
	free(c->data);
	free(c->socket);
	free(c->worker);
	free(c->store);
	free(c->run_dir);
	words_free(c->hide);
	memset(c, 0, sizeof *c);
}

const struct model_cfg *config_model(const struct config *c, const char *name)
{
	for (size_t i = 0; i < c->nmodels; i++)
		if (strcmp(c->models[i].name, name) == 0)
			return &c->models[i];
	return strcmp(name, "echo") == 0 ? &echo_model : NULL;
}

/* Whether the list (names separated by commas or spaces) names tool. */
static int list_has(const char *list, const char *tool)
{
	size_t n = strlen(tool);
	for (const char *p = list; p && *p;) {
		p += strspn(p, ", \t");
		size_t len = strcspn(p, ", \t");
		if (len == n && !strncmp(p, tool, n))
			return 1;
		p += len;
	}
	return 0;
}

int config_mcp_idempotent(const struct tool_cfg *tc, const char *tool, int read_only, int idempotent_hint)
{
	if (tc->mcp && list_has(tc->mcp->non_idempotent_tools, tool))
		return 0;
	if (tc->mcp && list_has(tc->mcp->idempotent_tools, tool))
		return 1;
	if (tc->idempotent >= 0)
		return tc->idempotent;
	return read_only == 1 || idempotent_hint == 1;
}

const struct tool_cfg *config_tool(const struct config *c, const char *name)
{
	for (size_t i = 0; i < c->ntools; i++)
		if (strcmp(c->tools[i].name, name) == 0)
			return &c->tools[i];
	return NULL;
}

int config_duration(const char *s, int64_t *ms)
{
	char *end;
	errno = 0;
	/* Decimal digits and a point only: strtod alone would also take
	 * "nan", "0x10" and "1e3". */
	size_t n = s ? strspn(s, "0123456789.") : 0;
	if (n == 0)
		return -EINVAL;
	double v = strtod(s, &end);
	if (errno || end != s + n || !(v >= 0))
		return -EINVAL;
	double mul;
	if (!*end || strcmp(end, "s") == 0)
		mul = 1000;
	else if (strcmp(end, "ms") == 0)
		mul = 1;
	else if (strcmp(end, "m") == 0)
		mul = 60e3;
	else if (strcmp(end, "h") == 0)
		mul = 3600e3;
	else if (strcmp(end, "d") == 0)
		mul = 86400e3;
	else
		return -EINVAL;
	if (v * mul > 9e15)
		return -EINVAL;
	*ms = (int64_t)(v * mul + 0.5);
	if (*ms == 0 && v > 0)
		*ms = 1; /* a positive duration is never 0, which means "never" or "at once" to some keys */
	return 0;
}

int config_size(const char *s, size_t *bytes)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s == '-')
		return -EINVAL;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	int shift = 0;
	if (*end == 'k' || *end == 'K')
		shift = 10;
	else if (*end == 'm' || *end == 'M')
		shift = 20;
	else if (*end == 'g' || *end == 'G')
		shift = 30;
	else if (*end)
		return -EINVAL;
	if (shift && end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "b") && strcmp(end + 1, "B"))
		return -EINVAL;
	if (v > (SIZE_MAX >> shift))
		return -EINVAL;
	*bytes = (size_t)(v << shift);
	return 0;
}

int config_log_level(const char *s)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -EINVAL;
}

static int onoff(const char *v)
{
	if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
		return 1;
	if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
		return 0;
	return -1;
}

int config_set_str(char **dst, const char *v)
{
	char *s = strdup(v);
	if (!s)
		return -1;
	free(*dst);
	*dst = s;
	return 0;
}

/* A path: never empty (an empty socket path would bind an abstract socket,
 * an empty data path means nothing). */
static int set_path(char **dst, const char *v)
{
	return *v ? config_set_str(dst, v) : -1;
}

int config_set_int(int *dst, const char *v, int min, int max)
{
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < min || n > max)
		return -1;
	*dst = (int)n;
	return 0;
}

struct loader {
	struct config *c;
	char *err;
	size_t errlen;
	int failed;
	char **seen; /* "section\x1fkey" of every key set so far */
	size_t nseen;
	int nkeys;     /* keys handed to on_key up to the first that failed (its number then) */
};

/* Whether section's key was set before (a second value would silently win:
 * two values for one key are a mistake, refused like a typo). -1: no memory. */
static int seen_before(struct loader *l, const char *section, const char *k)
{
	char *sk;
	if (asprintf(&sk, "%s\x1f%s", section, k) < 0)
		return -1;
	for (size_t i = 0; i < l->nseen; i++) {
		if (!strcmp(l->seen[i], sk)) {
			free(sk);
			return 1;
		}
	}
	char **p = realloc(l->seen, (l->nseen + 1) * sizeof *p);
	if (!p) {
		free(sk);
		return -1;
	}
	l->seen = p;
	l->seen[l->nseen++] = sk;
	return 0;
}

/* Decimal digits with an optional point, as durations: no exponent, no
 * sign, no nan or inf. */
int config_set_decimal(double *dst, const char *v)
{
	char *end;
	if (!*v || strspn(v, "0123456789.") != strlen(v) || strchr(v, '.') != strrchr(v, '.') || !strcmp(v, "."))
		return -1;
	*dst = strtod(v, &end);
	return *end ? -1 : 0;
}

/* [agentd] budget_*: the default limits of every conversation's budget. */
static int budget_key(struct config_budget *b, const char *k, const char *v)
{
	char *end;
	if (!strcmp(k, "budget_max_tokens") || !strcmp(k, "budget_max_turns")) {
		errno = 0;
		long long n = strtoll(v, &end, 10);
		if (errno || end == v || *end || n < 0)
			return -1;
		*(!strcmp(k, "budget_max_tokens") ? &b->max_tokens : &b->max_turns) = n;
		return 0;
	}
	if (!strcmp(k, "budget_max_cost"))
		return config_set_decimal(&b->max_cost, v);
	return -2;
}

static int set_hide(char ***dst, const char *v);

static int agentd_key(struct config *c, const char *k, const char *v)
{
	int b;
	if (!strncmp(k, "budget_", 7))
		return budget_key(&c->budget, k, v);
	if (!strcmp(k, "data"))
		return c->data_given = 1, set_path(&c->data, v);
	if (!strcmp(k, "run_dir"))
		return set_path(&c->run_dir, v);
	if (!strcmp(k, "socket"))
		return set_path(&c->socket, v);
	if (!strcmp(k, "worker"))
		return set_path(&c->worker, v);
	if (!strcmp(k, "idle_timeout"))
		return config_duration(v, &c->idle_timeout_ms);
	if (!strcmp(k, "sync")) {
		if (!strcmp(v, "full"))
			c->sync = SYNC_FULL;
		else if (!strcmp(v, "none"))
			c->sync = SYNC_NONE;
		else
			return -1;
		return 0;
	}
	if (!strcmp(k, "audit"))
		return (b = onoff(v)) < 0 ? -1 : (c->audit = b, 0);
	if (!strcmp(k, "audit_ttl"))
		return config_duration(v, &c->audit_ttl_ms);
	if (!strcmp(k, "end_idle_after"))
		return config_duration(v, &c->end_idle_after_ms);
	if (!strcmp(k, "remove_ended_after"))
		return config_duration(v, &c->remove_ended_after_ms);
	if (!strcmp(k, "retention_export"))
		return *v == '/' ? set_path(&c->retention_export, v) : -1;
	if (!strcmp(k, "retention_interval"))
		return config_duration(v, &c->retention_interval_ms) || c->retention_interval_ms < SEC ? -1 : 0;
	if (!strcmp(k, "max_line"))
		return config_size(v, &c->max_line) || c->max_line < 1024 || c->max_line > CAP_MAX ? -1 : 0;
	if (!strcmp(k, "max_reply_bytes"))
		return config_size(v, &c->max_reply_bytes) || c->max_reply_bytes < 1024 ||
			       c->max_reply_bytes > CAP_MAX ? -1 : 0;
	if (!strcmp(k, "max_workers"))
		return config_set_int(&c->max_workers, v, 1, 1000000);
	if (!strcmp(k, "restart_limit")) /* crash times are kept for the last 16 (sup.h) */
		return config_set_int(&c->restart_limit, v, 1, 16);
	if (!strcmp(k, "restart_window")) /* 0 would count no crash as recent */
		return config_duration(v, &c->restart_window_ms) || c->restart_window_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "shutdown_timeout"))
		return config_duration(v, &c->shutdown_timeout_ms);
	if (!strcmp(k, "map_size"))
		return config_size(v, &c->map_size) || c->map_size < MAP_MIN ? -1 : 0;
	if (!strcmp(k, "max_map_size"))
		return config_size(v, &c->max_map_size) || c->max_map_size < MAP_MIN ? -1 : 0;
	if (!strcmp(k, "compact_events"))
		return config_set_int(&c->compact_events, v, 0, 100000000);
	if (!strcmp(k, "compact_keep"))
		return config_set_int(&c->compact_keep, v, 1, 100000000);
	if (!strcmp(k, "max_tool_rounds"))
		return config_set_int(&c->max_tool_rounds, v, 1, 1000000);
	if (!strcmp(k, "model_output_cap")) /* under 1k no final line fits: every attempt would fail */
		return config_size(v, &c->model_out_cap) || c->model_out_cap < 1024 || c->model_out_cap > CAP_MAX ? -1 : 0;
	if (!strcmp(k, "socket_group"))
		return *v ? config_set_str(&c->socket_group, v) : -1;
	if (!strcmp(k, "allow_any_uid"))
		return (b = onoff(v)) < 0 ? -1 : (c->allow_any_uid = b, 0);
	if (!strcmp(k, "hide"))
		return set_hide(&c->hide, v);
	if (!strcmp(k, "log_level"))
		return (b = config_log_level(v)) < 0 ? -1 : (c->log_level = b, 0);
	if (!strcmp(k, "batch_max_events")) { /* a batch is one transaction: keep it short */
		int n;
		return config_set_int(&n, v, 1, 10000) ? -1 : (c->batch_max_events = (size_t)n, 0);
	}
	if (!strcmp(k, "batch_max_bytes"))
		return config_size(v, &c->batch_max_bytes) || c->batch_max_bytes < 1024 ||
			       c->batch_max_bytes > CAP_MAX ? -1 : 0;
	if (!strcmp(k, "node_id")) { /* the conversation id alphabet, 1-128 bytes */
		size_t n = strlen(v);
		if (n == 0 || n > 128 || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-") != n)
			return -1;
		free(c->node_id);
		return (c->node_id = strdup(v)) ? 0 : -1;
	}
	if (!strcmp(k, "lease_time")) /* under a second a pause of the loop would lose it */
		return config_duration(v, &c->lease_ms) || c->lease_ms < SEC ? -1 : 0;
	if (!strcmp(k, "heartbeat"))
		return config_duration(v, &c->heartbeat_ms) || c->heartbeat_ms < 100 ? -1 : 0;
	if (!strcmp(k, "notify_poll"))
		return config_duration(v, &c->notify_poll_ms) || c->notify_poll_ms < 100 ? -1 : 0;
	return -2;
}

/* An environment variable's name: what a shell would take. */
int config_env_name_ok(const char *s, size_t n)
{
	if (!n || isdigit((unsigned char)s[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return 0;
	return 1;
}

/* env = KEY KEY=VALUE ...: words split as a command line (quotes for a value
 * with spaces). */
static int set_env(struct isolate_cfg *i, const char *v)
{
	char **w = NULL;
	if (cmdline_split(v, &w))
		return -1;
	for (size_t k = 0; w[k]; k++) {
		const char *eq = strchr(w[k], '=');
		if (!config_env_name_ok(w[k], eq ? (size_t)(eq - w[k]) : strlen(w[k]))) {
			cmdline_free(w);
			return -1;
		}
	}
	/* cmdline_split's array is one allocation: copy into ours. */
	size_t n = 0;
	while (w[n])
		n++;
	char **e = calloc(n + 1, sizeof *e);
	for (size_t k = 0; e && k < n; k++)
		if (!(e[k] = strdup(w[k]))) {
			for (size_t j = 0; j < k; j++)
				free(e[j]);
			free(e);
			e = NULL;
		}
	cmdline_free(w);
	if (!e)
		return -1;
	i->env = e;
	return 0;
}

/* hide = PATH ...: words split as a command line, at most
 * CONFIG_HIDE_MAX (-3 beyond: load says so). */
static int set_hide(char ***dst, const char *v)
{
	char **w = NULL;
	if (cmdline_split(v, &w))
		return -1;
	size_t n = 0;
	while (w[n])
		n++;
	if (n > CONFIG_HIDE_MAX) {
		cmdline_free(w);
		return -3;
	}
	char **e = calloc(n + 1, sizeof *e);
	for (size_t k = 0; e && k < n; k++)
		if (!(e[k] = strdup(w[k]))) {
			words_free(e);
			e = NULL;
		}
	cmdline_free(w);
	if (!e)
		return -1;
	words_free(*dst);
	*dst = e;
	return 0;
}

static int set_long(long *dst, const char *v, long min, long max)
{
	int n;
	if (config_set_int(&n, v, (int)min, (int)max))
		return -1;
	*dst = n;
	return 0;
}

/* The isolation keys, in [model.NAME], [tool.NAME] and [mcp.NAME]. */
static int iso_key(struct isolate_cfg *i, const char *k, const char *v)
{
	int64_t ms;
	if (!strcmp(k, "env"))
		return set_env(i, v);
	if (!strcmp(k, "user"))
		return *v ? config_set_str(&i->user, v) : -1;
	if (!strcmp(k, "group"))
		return *v ? config_set_str(&i->group, v) : -1;
	if (!strcmp(k, "rlimit_as")) /* under 1 MiB not even a shell starts */
		return config_size(v, &i->rlimit_as) || i->rlimit_as < ((size_t)1 << 20) ? -1 : 0;
	if (!strcmp(k, "rlimit_cpu")) { /* the kernel counts whole seconds: round up */
		if (config_duration(v, &ms) || ms <= 0 || ms > 365LL * 86400 * SEC)
			return -1;
		i->rlimit_cpu = (long)((ms + SEC - 1) / SEC);
		return 0;
	}
	if (!strcmp(k, "rlimit_nofile")) /* 0, 1 and 2 at least, and a few for the program itself */
		return set_long(&i->rlimit_nofile, v, 8, 1 << 20);
	if (!strcmp(k, "network")) {
		if (strcmp(v, "none") && strcmp(v, "host"))
			return -1;
		i->network_none = !strcmp(v, "none");
		return 0;
	}
	if (!strcmp(k, "sandbox")) {
		if (strcmp(v, "yes") && strcmp(v, "no"))
			return -1;
		i->sandbox_off = !strcmp(v, "no");
		return 0;
	}
	if (!strcmp(k, "hide"))
		return set_hide(&i->hide, v);
	return -2;
}

static int model_key(struct model_cfg *m, const char *k, const char *v)
{
	if (!strcmp(k, "command"))
		return config_set_str(&m->command, v);
	if (!strcmp(k, "timeout"))
		return config_duration(v, &m->timeout_ms) || m->timeout_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "retries"))
		return config_set_int(&m->retries, v, 0, 100);
	int rc = config_model_http_key(m, k, v);
	return rc == -2 ? iso_key(&m->iso, k, v) : rc;
}

static int name_ok(const char *n);

static int tool_key(struct tool_cfg *t, const char *k, const char *v)
{
	if (!strcmp(k, "executor")) {
		if (!strcmp(v, "server"))
			t->executor = EXEC_SERVER;
		else if (!strcmp(v, "human"))
			t->executor = EXEC_HUMAN;
		else
			return -1;
		return 0;
	}
	if (!strcmp(k, "command"))
		return config_set_str(&t->command, v);
	if (!strcmp(k, "timeout"))
		return config_duration(v, &t->timeout_ms) || t->timeout_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "prompt"))
		return config_set_str(&t->prompt, v);
	if (!strcmp(k, "expires"))
		return config_duration(v, &t->expires_ms);
	if (!strcmp(k, "warn_before"))
		return config_duration(v, &t->warn_before_ms) || t->warn_before_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "on_expiry")) {
		for (int i = 0; i <= ON_EXPIRY_ESCALATE; i++)
			if (!strcmp(v, on_expiry_names[i]))
				return t->on_expiry = i, 0;
		return -1;
	}
	if (!strcmp(k, "escalate_to"))
		return name_ok(v) ? config_set_str(&t->escalate_to, v) : -1;
	if (!strcmp(k, "on_user_message")) {
		for (int i = 0; i <= ON_USER_MESSAGE_REJECT; i++)
			if (!strcmp(v, on_user_message_names[i]))
				return t->on_user_message = i, 0;
		return -1;
	}
	if (!strcmp(k, "approvers"))
		return config_set_int(&t->approvers, v, 1, CONFIG_APPROVERS_MAX);
	if (!strcmp(k, "description"))
		return config_set_str(&t->description, v);
	if (!strcmp(k, "max_attempts"))
		return config_set_int(&t->max_attempts, v, 1, 1000);
	if (!strcmp(k, "output_cap"))
		return config_size(v, &t->out_cap) || t->out_cap < 1024 || t->out_cap > CAP_MAX ? -1 : 0;
	if (!strcmp(k, "idempotent"))
		return (t->idempotent = onoff(v)) < 0 ? -1 : 0;
	if (!strcmp(k, "reconcile"))
		return *v ? config_set_str(&t->reconcile, v) : -1;
	return iso_key(&t->iso, k, v);
}

static int url_ok(const char *v)
{
	if ((strncmp(v, "http://", 7) || !v[7]) && (strncmp(v, "https://", 8) || !v[8]))
		return 0;
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p <= ' ' || *p == 0x7f || p - (const unsigned char *)v > 2048)
			return 0;
	return 1;
}

/* [mcp.NAME]: its own keys, then those it shares with a server tool. */
static int mcp_key(struct tool_cfg *t, const char *k, const char *v)
{
	struct mcp_cfg *m = t->mcp;
	if (!strcmp(k, "command"))
		return config_set_str(&m->command, v);
	if (!strcmp(k, "args"))
		return config_set_str(&m->args, v);
	if (!strcmp(k, "prefix")) /* what models may call: no space, no quote */
		return strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-") != strlen(v) ||
		       strlen(v) > 64 ? -1 : config_set_str(&m->prefix, v);
	if (!strcmp(k, "start_timeout"))
		return config_duration(v, &m->start_timeout_ms) || m->start_timeout_ms <= 0 ? -1 : 0;
	if (!strcmp(k, "url")) /* http(s), no space or control character: it goes on a command line */
		return url_ok(v) ? config_set_str(&m->url, v) : -1;
	if (!strcmp(k, "headers")) /* checked and resolved with the whole section (mcp_validate) */
		return config_set_str(&m->headers_conf, v);
	if (!strcmp(k, "idempotent_tools"))
		return config_set_str(&m->idempotent_tools, v);
	if (!strcmp(k, "non_idempotent_tools"))
		return config_set_str(&m->non_idempotent_tools, v);
	/* A server tool's keys that mean nothing here: each tool has the
	 * server's own description, and a server is no human. */
	static const char *const not_here[] = { "executor", "prompt", "expires", "description", "warn_before",
						 "on_expiry", "escalate_to", "on_user_message",
						 "approvers" };
	for (size_t i = 0; i < sizeof not_here / sizeof *not_here; i++)
		if (!strcmp(k, not_here[i]))
			return -2;
	return tool_key(t, k, v);
}

static int name_ok(const char *n)
{
	return *n && id_valid(n, strlen(n));
}

static struct model_cfg *model_get(struct config *c, const char *name)
{
	for (size_t i = 0; i < c->nmodels; i++)
		if (!strcmp(c->models[i].name, name))
			return &c->models[i];
	struct model_cfg *m = realloc(c->models, (c->nmodels + 1) * sizeof *m);
	if (!m)
		return NULL;
	c->models = m;
	m = &c->models[c->nmodels++];
	memset(m, 0, sizeof *m);
	m->name = strdup(name);
	m->timeout_ms = 120 * SEC;
	m->retries = 2;
	m->connect_timeout_ms = 10 * SEC;
	m->backoff_ms = 500;
	m->backoff_max_ms = 30 * SEC;
	m->iso.uid = m->iso.gid = -1;
	if (!m->name) { /* out of memory: no entry without a name (lookups strcmp it) */
		c->nmodels--;
		return NULL;
	}
	return m;
}

static struct tool_cfg *tool_get(struct config *c, const char *name)
{
	for (size_t i = 0; i < c->ntools; i++)
		if (!strcmp(c->tools[i].name, name))
			return &c->tools[i];
	struct tool_cfg *t = realloc(c->tools, (c->ntools + 1) * sizeof *t);
	if (!t)
		return NULL;
	c->tools = t;
	t = &c->tools[c->ntools++];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	t->timeout_ms = 30 * SEC;
	t->expires_ms = 3600 * SEC;
	t->max_attempts = 3;
	t->idempotent = -1;
	t->out_cap = 1 << 20;
	t->iso.uid = t->iso.gid = -1;
	if (!t->name) { /* as model_get */
		c->ntools--;
		return NULL;
	}
	return t;
}

static int on_key(void *arg, const char *section, const char *k, const char *v)
{
	struct loader *l = arg;
	int rc;
	if (l->failed)
		return 1; /* the first error is the one reported */
	l->nkeys++;
	int dup = seen_before(l, section, k);
	if (dup) {
		if (dup > 0)
			snprintf(l->err, l->errlen, "%s: '%s' is set twice in [%s]", l->c->path, k, section);
		else
			snprintf(l->err, l->errlen, "%s: out of memory", l->c->path);
		l->failed = 1;
		return 0;
	}
	if (!strcmp(section, "agentd")) {
		rc = agentd_key(l->c, k, v);
	} else if (!strcmp(section, "store")) {
		rc = config_store_key(l->c, k, v);
	} else if (!strncmp(section, "model.", 6) && name_ok(section + 6)) {
		if (!strcmp(section + 6, "echo")) {
			snprintf(l->err, l->errlen, "%s: [model.echo] is built in and cannot be configured",
				 l->c->path);
			l->failed = 1;
			return 0;
		}
		struct model_cfg *m = model_get(l->c, section + 6);
		rc = m ? model_key(m, k, v) : -1;
	} else if ((!strncmp(section, "tool.", 5) && name_ok(section + 5)) ||
		   (!strncmp(section, "mcp.", 4) && name_ok(section + 4))) {
		int is_mcp = section[0] == 'm';
		const char *name = section + (is_mcp ? 4 : 5);
		const struct tool_cfg *old = config_tool(l->c, name);
		if (old && !old->mcp != !is_mcp) {
			/* One name, one tool: a conversation names either. */
			snprintf(l->err, l->errlen, "%s: [%s] and [%s.%s] share a name: a tool's name is unique", l->c->path,
				 section, is_mcp ? "tool" : "mcp", name);
			l->failed = 1;
			return 0;
		}
		struct tool_cfg *t = tool_get(l->c, name);
		if (t && is_mcp && !t->mcp && (t->mcp = calloc(1, sizeof *t->mcp)))
			t->mcp->start_timeout_ms = 20 * SEC;
		rc = !t || (is_mcp && !t->mcp) ? -1 : is_mcp ? mcp_key(t, k, v) : tool_key(t, k, v);
	} else {
		snprintf(l->err, l->errlen, "%s: unknown section [%s] (expected [agentd], [store], [model.NAME], [tool.NAME] or "
			 "[mcp.NAME], NAME of [A-Za-z0-9._:-])", l->c->path, section);
		l->failed = 1;
		return 0;
	}
	if (rc == -2)
		snprintf(l->err, l->errlen, "%s: unknown key '%s' in [%s]", l->c->path, k, section);
	else if (rc == -3)
		snprintf(l->err, l->errlen, "%s: '%s' in [%s] names more than %d paths", l->c->path, k, section,
			 CONFIG_HIDE_MAX);
	else if (rc)
		snprintf(l->err, l->errlen, "%s: bad value '%s' for '%s' in [%s]", l->c->path,
			 strcmp(k, "headers") ? v : "(not shown)", k, section); /* a header may hold a secret */
	if (rc)
		l->failed = 1;
	return !rc; /* inih: nonzero means the line was fine */
}

/* A command that cannot be split (an unterminated quote, a trailing
 * backslash, no word) would fail every call: refuse it at start. */
static int command_ok(const struct config *c, const char *kind, const char *name, const char *cmd, char *err,
		      size_t errlen)
{
	char **argv;
	int e = cmdline_split(cmd, &argv);
	cmdline_free(argv);
	if (e == -EINVAL)
		snprintf(err, errlen, "%s: [%s.%s] command: an unterminated quote, a trailing backslash or no word: %s",
			 c->path, kind, name, cmd);
	return e == 0;
}

/* A name in /etc/passwd or /etc/group, read as files (fgetpwent): NSS
 * would need glibc's shared modules in the statically linked worker.
 * Returns 0 with *id (and the user's group in *gid), -1 if not found. */
static int lookup_id(const char *file, const char *name, long *id, long *gid)
{
	FILE *f = fopen(file, "re");
	int rc = -1;
	if (!f)
		return -1;
	if (gid) {
		struct passwd *pw;
		while (rc && (pw = fgetpwent(f)))
			if (!strcmp(pw->pw_name, name))
				*id = (long)pw->pw_uid, *gid = (long)pw->pw_gid, rc = 0;
	} else {
		struct group *gr;
		while (rc && (gr = fgetgrent(f)))
			if (!strcmp(gr->gr_name, name))
				*id = (long)gr->gr_gid, rc = 0;
	}
	fclose(f);
	return rc;
}

/* user and group names to ids, once at load: a name that does not resolve
 * would fail every call. A user alone runs in that user's group. */
static int iso_resolve(const struct config *c, const char *kind, const char *name, struct isolate_cfg *i, char *err,
		       size_t errlen)
{
	i->uid = i->gid = -1;
	if (i->user) {
		if (lookup_id("/etc/passwd", i->user, &i->uid, &i->gid)) {
			snprintf(err, errlen, "%s: [%s.%s] user: no user named '%s' in /etc/passwd", c->path, kind, name,
				 i->user);
			return -1;
		}
	}
	if (i->group && lookup_id("/etc/group", i->group, &i->gid, NULL)) {
		snprintf(err, errlen, "%s: [%s.%s] group: no group named '%s' in /etc/group", c->path, kind, name,
			 i->group);
		return -1;
	}
	return 0;
}

static int mcp_validate(const struct config *c, struct tool_cfg *t, char *err, size_t errlen)
{
	struct mcp_cfg *m = t->mcp;
	if (!m->command == !m->url) {
		snprintf(err, errlen, "%s: [mcp.%s] needs %s", c->path, t->name,
			 m->url ? "a command or a url, not both" : "a command (stdio) or a url (streamable HTTP)");
		return -1;
	}
	if (m->headers_conf && !m->url) {
		snprintf(err, errlen, "%s: [mcp.%s] headers are for a url server (streamable HTTP)", c->path, t->name);
		return -1;
	}
	if (m->url && (m->args || t->iso.network_none)) {
		snprintf(err, errlen, "%s: [mcp.%s] %s", c->path, t->name,
			 m->args ? "args is for a command: a url server has none"
				 : "network = none leaves a url server unreachable");
		return -1;
	}
	if (m->command && !command_ok(c, "mcp", t->name, m->command, err, errlen))
		return -1;
	if (m->args && !command_ok(c, "mcp", t->name, m->args, err, errlen))
		return -1;
	if (t->reconcile && !command_ok(c, "mcp", t->name, t->reconcile, err, errlen))
		return -1;
	char section[200];
	snprintf(section, sizeof section, "mcp.%s", t->name);
	if (m->headers_conf && config_headers(c->path, section, m->headers_conf, &t->iso, config_mcp_header_owned, NULL,
					      &m->headers, err, errlen))
		return -1;
	if (!m->prefix && asprintf(&m->prefix, "%s__", t->name) < 0) {
		m->prefix = NULL;
		snprintf(err, errlen, "%s: out of memory", c->path);
		return -1;
	}
	return iso_resolve(c, "mcp", t->name, &t->iso, err, errlen);
}

/* Checks that need the whole file: a server tool and a configured model
 * need a command that splits; map_size within max_map_size. */
/* warn_before: a human tool's, and shorter than its expires (else the
 * warning would come at or before the call itself). */
static int warn_before_validate(const struct config *c, const struct tool_cfg *t, char *err, size_t errlen)
{
	if (!t->warn_before_ms)
		return 0;
	if (t->executor != EXEC_HUMAN)
		snprintf(err, errlen, "%s: [tool.%s] warn_before is for human tools (executor = human)", c->path,
			 t->name);
	else if (t->expires_ms == 0)
		snprintf(err, errlen, "%s: [tool.%s] warn_before needs an expiry: expires is 0 (never)", c->path,
			 t->name);
	else if (t->warn_before_ms >= t->expires_ms)
		snprintf(err, errlen, "%s: [tool.%s] warn_before (%lld ms) must be shorter than expires (%lld ms)",
			 c->path, t->name, (long long)t->warn_before_ms, (long long)t->expires_ms);
	else
		return 0;
	return -1;
}

/* on_expiry: a human tool's, with an expiry to act at; escalate names
 * another human tool (escalate_to), and only with it. */
static int on_expiry_validate(const struct config *c, const struct tool_cfg *t, char *err, size_t errlen)
{
	const char *n = t->name, *p = c->path;
	if (t->escalate_to && t->on_expiry != ON_EXPIRY_ESCALATE) {
		snprintf(err, errlen, "%s: [tool.%s] escalate_to is for on_expiry = escalate", p, n);
		return -1;
	}
	if (t->on_expiry == ON_EXPIRY_EXPIRE)
		return 0;
	if (t->executor != EXEC_HUMAN)
		snprintf(err, errlen, "%s: [tool.%s] on_expiry is for human tools (executor = human)", p, n);
	else if (t->expires_ms == 0)
		snprintf(err, errlen, "%s: [tool.%s] on_expiry = %s needs an expiry: expires is 0 (never)", p, n,
			 config_on_expiry_name(t->on_expiry));
	else if (t->on_expiry == ON_EXPIRY_ESCALATE && !t->escalate_to)
		snprintf(err, errlen, "%s: [tool.%s] on_expiry = escalate needs escalate_to (a human tool)", p, n);
	else if (t->on_expiry != ON_EXPIRY_ESCALATE)
		return 0;
	else if (!config_tool(c, t->escalate_to) || config_tool(c, t->escalate_to)->executor != EXEC_HUMAN ||
		 config_tool(c, t->escalate_to)->mcp)
		snprintf(err, errlen, "%s: [tool.%s] escalate_to = %s names no human tool of the configuration", p, n,
			 t->escalate_to);
	else if (!strcmp(t->escalate_to, n))
		snprintf(err, errlen, "%s: [tool.%s] escalate_to names the tool itself", p, n);
	else
		return 0;
	return -1;
}

/* A [tool.NAME] read whole: what its executor takes, its isolation, its
 * human keys. 0, or -1 with err set. */
static int tool_validate(const struct config *c, struct tool_cfg *t, char *err, size_t errlen)
{
	if (iso_resolve(c, "tool", t->name, &t->iso, err, errlen))
		return -1;
	if (t->executor == EXEC_HUMAN && (t->iso.env || t->iso.user || t->iso.group || t->iso.rlimit_as ||
					  t->iso.rlimit_cpu || t->iso.rlimit_nofile || t->iso.network_none ||
					  t->iso.sandbox_off || t->iso.hide)) {
		snprintf(err, errlen, "%s: [tool.%s] is a human tool: no process runs, so env, user, group, "
			 "network, sandbox, hide and rlimit_* do not apply", c->path, t->name);
		return -1;
	}
	if (t->executor == EXEC_SERVER && !t->command) {
		snprintf(err, errlen, "%s: [tool.%s] is a server tool and needs a command", c->path, t->name);
		return -1;
	}
	if (t->command && !command_ok(c, "tool", t->name, t->command, err, errlen))
		return -1;
	if (t->executor == EXEC_HUMAN && t->command) {
		snprintf(err, errlen, "%s: [tool.%s] is a human tool: it takes no command", c->path, t->name);
		return -1;
	}
	if (t->executor == EXEC_HUMAN && (t->idempotent >= 0 || t->reconcile)) {
		snprintf(err, errlen, "%s: [tool.%s] is a human tool: idempotent and reconcile are for tools that run",
			 c->path, t->name);
		return -1;
	}
	if (t->reconcile && !command_ok(c, "tool", t->name, t->reconcile, err, errlen))
		return -1;
	if (!t->prompt && (t->prompt = strdup("Approve?")) == NULL)
		return -1;
	if (warn_before_validate(c, t, err, errlen) || on_expiry_validate(c, t, err, errlen))
		return -1;
	if (t->on_user_message == ON_USER_MESSAGE_REJECT && t->executor != EXEC_HUMAN) {
		/* A server call is running, not waiting: cancel or on_busy = interrupt stops it. */
		snprintf(err, errlen, "%s: [tool.%s] on_user_message is for human tools (executor = human)",
			 c->path, t->name);
		return -1;
	}
	if (t->approvers && t->executor != EXEC_HUMAN) {
		snprintf(err, errlen, "%s: [tool.%s] approvers is for human tools (executor = human): a server "
			 "tool's call is approved by nobody", c->path, t->name);
		return -1;
	}
	return 0;
}

static int validate(struct config *c, char *err, size_t errlen)
{
	if (c->socket_group && lookup_id("/etc/group", c->socket_group, &c->socket_gid, NULL)) {
		snprintf(err, errlen, "%s: socket_group: no group named '%s' in /etc/group in [agentd]", c->path,
			 c->socket_group);
		return -1;
	}
	if (c->store && c->data_given) {
		snprintf(err, errlen, "%s: both data in [agentd] and target in [store] are set: one store, either an "
			 "LMDB data directory or a PostgreSQL target", c->path);
		return -1;
	}
	size_t max = c->max_map_size ? c->max_map_size : MAX_MAP_DEFAULT;
	if (c->map_size && c->map_size > max) {
		snprintf(err, errlen, "%s: map_size (%zu bytes) is larger than max_map_size (%zu bytes%s) in [agentd]",
			 c->path, c->map_size, max, c->max_map_size ? "" : ", its default");
		return -1;
	}
	if (c->heartbeat_ms && c->heartbeat_ms * 2 > c->lease_ms) {
		/* One late beat would let the leases lapse. */
		snprintf(err, errlen, "%s: heartbeat (%lld ms) must be at most half of lease_time (%lld ms) in [agentd]",
			 c->path, (long long)c->heartbeat_ms, (long long)c->lease_ms);
		return -1;
	}
	if (c->retention_export && !c->remove_ended_after_ms) {
		snprintf(err, errlen, "%s: retention_export is set but remove_ended_after is not: nothing would be "
			 "exported in [agentd]", c->path);
		return -1;
	}
	if (c->compact_events > 0 && c->compact_keep >= c->compact_events) {
		/* Each compaction would leave as many events as start the next:
		 * a summary call after every turn. */
		snprintf(err, errlen, "%s: compact_keep (%d) must be under compact_events (%d) in [agentd]", c->path,
			 c->compact_keep, c->compact_events);
		return -1;
	}
	for (size_t i = 0; i < c->nmodels; i++) {
		if (config_model_http_validate(c->path, &c->models[i], err, errlen))
			return -1;
		if (c->models[i].kind != MODEL_EXEC)
			continue;
		if (!c->models[i].command) {
			snprintf(err, errlen, "%s: [model.%s] needs a command (or kind = openai or anthropic)", c->path,
				 c->models[i].name);
			return -1;
		}
		if (!command_ok(c, "model", c->models[i].name, c->models[i].command, err, errlen))
			return -1;
		if (iso_resolve(c, "model", c->models[i].name, &c->models[i].iso, err, errlen))
			return -1;
	}
	for (size_t i = 0; i < c->ntools; i++) {
		struct tool_cfg *t = &c->tools[i];
		if (t->mcp ? mcp_validate(c, t, err, errlen) : tool_validate(c, t, err, errlen))
			return -1;
	}
	return 0;
}

static int sections_ok(const struct config *c, const struct prescan *p, const char *path, char *err,
		       size_t errlen)
{
	for (int i = 0; i < p->nsect; i++) {
		const char *n = p->sect[i];
		if (!strcmp(n, "model.echo")) {
			snprintf(err, errlen, "%s:%d: [model.echo] is built in and cannot be configured", path,
				 p->sectline[i]);
			return -1;
		}
		if (!strcmp(n, "agentd") || !strcmp(n, "store") || (!strncmp(n, "model.", 6) && config_model(c, n + 6)) ||
		    (!strncmp(n, "tool.", 5) && config_tool(c, n + 5)) ||
		    (!strncmp(n, "mcp.", 4) && config_tool(c, n + 4)))
			continue;
		if ((!strncmp(n, "model.", 6) && name_ok(n + 6)) ||
		    (!strncmp(n, "tool.", 5) && name_ok(n + 5)) || (!strncmp(n, "mcp.", 4) && name_ok(n + 4)))
			snprintf(err, errlen, "%s:%d: [%s] is empty: a%s needs a command%s", path, p->sectline[i], n,
				 n[0] == 't' ? " server tool" : n[1] == 'o' ? " model" : "n MCP server",
				 n[0] == 't' ? " (or executor = human)" : n[0] == 'm' && n[1] == 'c' ? " or a url" : "");
		else
			snprintf(err, errlen, "%s:%d: unknown section [%s] (expected [agentd], [store], [model.NAME], [tool.NAME] or "
				 "[mcp.NAME], NAME of [A-Za-z0-9._:-])", path, p->sectline[i], n);
		return -1;
	}
	return 0;
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
	struct loader l = { c, err, errlen, 0, NULL, 0, 0 };
	struct prescan p = { 0 };
	struct stat sb;
	int rc = -EINVAL;
	if (config_set_str(&c->path, path))
		return -ENOMEM;
	FILE *f = fopen(path, "re");
	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	/* Read twice (the pass below, then the parser) and copied for the
	 * workers: a pipe or a device would give each reader something else. */
	if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file (agentd reads it twice and copies it for its workers)",
			 path);
		goto out;
	}
	if (config_prescan(f, path, &p, err, errlen))
		goto out;
	rewind(f);
	errno = 0;
	int prc = ini_parse_file(f, on_key, &l);
	/* A read that fails (a directory: EISDIR; an I/O error) looks like the
	 * end of the file to the parser: the settings so far are not all. */
	int rerr = ferror(f) ? (errno ? errno : EIO) : 0;
	int fail_line = l.failed && l.nkeys > 0 && l.nkeys <= p.nkey ? p.keyline[l.nkeys - 1] : 0;
	if (l.failed && prc > 0 && fail_line && prc < fail_line) {
		snprintf(err, errlen, "%s:%d: syntax error", path, prc); /* the first fault comes first */
	} else if (l.failed) {
		/* "PATH: message" becomes "PATH:LINE: message". */
		size_t pl = strlen(path);
		if (fail_line && !strncmp(err, path, pl) && err[pl] == ':') {
			char *rest = strdup(err + pl);
			if (rest) {
				snprintf(err, errlen, "%s:%d%s", path, fail_line, rest);
				free(rest);
			}
		}
	} else if (rerr) {
		snprintf(err, errlen, "%s: cannot be read: %s", path, strerror(rerr));
		rc = -rerr;
	} else if (prc) {
		snprintf(err, errlen, "%s:%d: syntax error", path, prc);
	} else if (!sections_ok(c, &p, path, err, errlen)) {
		rc = validate(c, err, errlen) ? -EINVAL : 0;
	}
out:
	fclose(f);
	for (size_t i = 0; i < l.nseen; i++)
		free(l.seen[i]);
	free(l.seen);
	config_prescan_free(&p);
	return rc;
}
