/* request.c: a command line into its request (agentctl.h): the table's
 * params applied to a JSON object, checked, and written as one line. */
#include "agentctl/agentctl.h"

#include <errno.h>
#include <math.h> /* isfinite: a macro, no libm */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/jsonmp.h"

/* Read all of stdin (for TEXT or JSON given as "-"). */
static char *read_stdin(size_t *lenp)
{
	size_t len = 0, cap = 4096;
	char *buf = held.input = must(malloc(cap));
	for (;;) {
		if (cap - len < 2)
			buf = held.input = must(realloc(buf, cap *= 2));
		size_t n = fread(buf + len, 1, cap - len - 1, stdin);
		len += n;
		if (n == 0) {
			if (ferror(stdin))
				fail("cannot read stdin: %s", strerror(errno));
			break;
		}
	}
	buf[len] = '\0';
	*lenp = len;
	return buf;
}

/* ------------------------------------------------------------------------ */
/* Building the request                                                     */

/* A string field; jansson refuses invalid UTF-8, which we report as the
 * argument's fault rather than send something agentd would reject anyway. */
static json_t *arg_string(const struct param *p, const char *v, size_t len)
{
	json_t *s = json_stringn(v, len);
	if (!s)
		usage_error("%s: not valid UTF-8", p->name);
	return s;
}

static json_int_t parse_uint(const struct param *p, const char *v)
{
	const char *c = v;
	json_int_t n = 0;
	if (!*c)
		usage_error("%s: expected a non-negative integer, got ''", p->name);
	for (; *c; c++) {
		if (*c < '0' || *c > '9')
			usage_error("%s: expected a non-negative integer, got '%s'", p->name, v);
		if (n > (INT64_MAX - (*c - '0')) / 10)
			usage_error("%s: %s is too large (the limit is %lld)", p->name, v, (long long)INT64_MAX);
		n = n * 10 + (*c - '0');
	}
	return n;
}

static json_t *parse_json_arg(const struct param *p, const char *v, size_t flags)
{
	json_error_t e;
	json_t *j = json_loads(v, JSON_DECODE_ANY | flags, &e);
	if (!j)
		usage_error("%s: invalid JSON: %s (line %d, column %d)", p->name, e.text, e.line, e.column);
	return j;
}

static const char *pick_choice(const struct param *p, const char *v)
{
	static char buf[64];
	/* Also take a signal name with its SIG prefix (SIGTERM). */
	for (int pass = 0; pass < 2; pass++) {
		const char *want = v;
		if (pass == 1) {
			if (strncasecmp(v, "SIG", 3) != 0)
				break;
			want = v + 3;
		}
		const char *c = p->choices;
		while (*c) {
			size_t n = strcspn(c, "|");
			if (strlen(want) == n && strncasecmp(want, c, n) == 0 && n < sizeof buf) {
				memcpy(buf, c, n);
				buf[n] = '\0';
				return buf;
			}
			c += n + (c[n] == '|');
		}
	}
	usage_error("%s: expected one of %s, got '%s'", p->name, p->choices, v);
}

static json_t *child(json_t *parent, const char *key, json_t *(*make)(void))
{
	json_t *v = json_object_get(parent, key);
	if (!v) {
		v = must(make());
		put(parent, key, v);
	}
	return v;
}

static json_t *settings_of(json_t *req)
{
	return child(req, "settings", json_object);
}

/* --param K=V: V is JSON when it parses, so numbers and booleans keep their
 * type; anything else ("gpt-4o", "hello world") is a string. */
static void add_kv(const struct param *p, const char *v, json_t *obj)
{
	const char *eq = strchr(v, '=');
	if (!eq || eq == v)
		usage_error("%s: expected KEY=VALUE, got '%s'", p->name, v);
	char *key = held.key = must(strndup(v, (size_t)(eq - v)));
	json_t *val = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
	if (!val)
		val = arg_string(p, eq + 1, strlen(eq + 1));
	if (json_object_set_new(obj, key, val) < 0)
		usage_error("%s: key '%s' is not valid UTF-8", p->name, key);
	free(key);
	held.key = NULL;
}

static void add_content(const struct param *p, const char *v, json_t *req, bool json_content)
{
	size_t len = strlen(v);
	char *in = NULL;
	if (strcmp(v, "-") == 0) {
		v = in = read_stdin(&len);
		/* `echo hi | agentctl send c -` means "hi", not "hi\n". */
		if (!json_content && len > 0 && in[len - 1] == '\n')
			in[--len] = '\0';
	}
	json_t *content;
	if (json_content) {
		content = parse_json_arg(p, v, 0);
		if (!json_is_object(content)) {
			json_decref(content);
			usage_error("%s: --json-content needs a JSON object", p->name);
		}
	} else {
		content = arg_string(p, v, len);
	}
	put(req, p->field, content);
	free(in);
	held.input = NULL;
}

/* send --batch FILE: a JSON array whose strings become {"content": S}; the
 * rest is sent as it is, for agentd to check (it names the event at fault). */
static void add_batch(const struct param *p, const char *v, json_t *req)
{
	size_t len = 0;
	json_error_t e;
	json_t *a;
	if (strcmp(v, "-") == 0) {
		char *in = read_stdin(&len);
		a = json_loadb(in, len, 0, &e);
		free(in);
		held.input = NULL;
	} else {
		a = json_load_file(v, 0, &e);
	}
	if (!a)
		usage_error("%s %s: invalid JSON: %s (line %d, column %d)", p->name, v, e.text, e.line, e.column);
	if (!json_is_array(a)) {
		json_decref(a);
		usage_error("%s %s: expected a JSON array of events (strings or {\"content\": ...} objects)", p->name, v);
	}
	size_t i;
	json_t *ev;
	json_array_foreach(a, i, ev)
		if (json_is_string(ev))
			json_array_set_new(a, i, must(json_pack("{sO}", "content", ev)));
	json_object_set_new(req, p->field, a);
}

/* raw: check the line is JSON and make it one line. A raw CR or LF can only be
 * whitespace between tokens in valid JSON (inside strings they must be
 * escaped), so turning them into spaces keeps the request the same. Integers
 * past 64 bits are accepted: raw exists to send what agentctl would not. */
static char *raw_line(const struct param *p, const char *v)
{
	size_t len = strlen(v);
	char *line = held.input = strcmp(v, "-") == 0 ? read_stdin(&len) : xstrdup(v);
	json_error_t e;
	json_t *j = json_loads(line, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &e);
	/* A number even a double cannot hold stops the check there: pass it on
	 * (agentd answers it), as the integers past 64 bits. */
	if (!j && json_error_code(&e) != json_error_numeric_overflow)
		usage_error("%s: invalid JSON: %s (line %d, column %d)", p->name, e.text, e.line, e.column);
	json_decref(j);
	for (size_t i = 0; i < len; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	held.input = NULL;
	return line;
}

static void apply(const struct param *p, const char *v, json_t *req)
{
	switch (p->kind) {
	case K_STR:
		put(req, p->field, arg_string(p, v, strlen(v)));
		break;
	case K_UINT:
		put(req, p->field, must(json_integer(parse_uint(p, v))));
		break;
	case K_JSON:
		put(req, p->field, parse_json_arg(p, v, 0));
		break;
	case K_ENUM:
		put(req, p->field, must(json_string(pick_choice(p, v))));
		break;
	case K_CONST:
		put(req, p->field, must(json_string(p->choices)));
		break;
	case K_TRUE:
		json_object_set_new(req, p->field, json_true());
		break;
	case K_SET_STR:
		put(settings_of(req), p->field, arg_string(p, v, strlen(v)));
		break;
	case K_SET_LIST:
		if (json_array_append_new(child(settings_of(req), p->field, json_array), arg_string(p, v, strlen(v))))
			fail("out of memory");
		break;
	case K_SET_KV:
		add_kv(p, v, child(settings_of(req), p->field, json_object));
		break;
	case K_RES_STR:
		put(child(req, "result", json_object), p->field, arg_string(p, v, strlen(v)));
		break;
	case K_SET_JSON:
		json_object_set_new(settings_of(req), p->field, parse_json_arg(p, v, 0));
		break;
	case K_BATCH:
		add_batch(p, v, req);
		break;
	case K_META_KV: {
		const char *eq = strchr(v, '=');
		if (!eq || eq == v)
			usage_error("%s: expected KEY=VALUE, got '%s'", p->name, v);
		char *key = held.key = must(strndup(v, (size_t)(eq - v)));
		if (json_object_set_new(child(req, p->field, json_object), key, arg_string(p, eq + 1, strlen(eq + 1))) < 0)
			usage_error("%s: key '%s' is not valid UTF-8", p->name, key);
		free(key);
		held.key = NULL;
		break;
	}
	case K_META_DEL:
		if (!*v || json_object_set_new(child(req, p->field, json_object), v, json_null()) < 0)
			usage_error("%s: expected a key (non-empty UTF-8), got '%s'", p->name, v);
		break;
	case K_PATH: {
		/* agentd resolves nothing against its own working directory. */
		char cwd[4096];
		if (v[0] == '/' || !getcwd(cwd, sizeof cwd)) {
			json_object_set_new(req, p->field, arg_string(p, v, strlen(v)));
			break;
		}
		size_t n = strlen(cwd) + strlen(v) + 2;
		char *abs = held.key = must(malloc(n));
		snprintf(abs, n, "%s/%s", cwd, v);
		json_object_set_new(req, p->field, arg_string(p, abs, strlen(abs)));
		free(abs);
		held.key = NULL;
		break;
	}
	case K_CONTENT:
	case K_RAW:
	case K_LOCAL:
		break; /* handled by build_request */
	}
}

/* Global options may come before the command or among its arguments. Returns
 * true when argv[*i] was one (and advances *i past it and its value). */
bool global_option(int argc, char **argv, int *i, struct options *o)
{
	const char *a = argv[*i];
	const char *val = NULL;
	const char *name = a;
	size_t nlen = strcspn(a, "=");

	if (strcmp(a, "--json") == 0) {
		o->json = true;
		(*i)++;
		return true;
	}
	if (strncmp(a, "--json=", 7) == 0)
		usage_error("option --json takes no value");
	if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
		o->quiet = true;
		(*i)++;
		return true;
	}
	if (strcmp(a, "-s") == 0 || strcmp(a, "--socket") == 0 || strcmp(a, "--timeout") == 0) {
		if (*i + 1 >= argc)
			usage_error("option %s needs an argument", a);
		val = argv[*i + 1];
		*i += 2;
	} else if ((nlen == 8 && strncmp(a, "--socket", 8) == 0) || (nlen == 9 && strncmp(a, "--timeout", 9) == 0)) {
		val = a + nlen + 1;
		name = a[2] == 's' ? "--socket" : "--timeout";
		(*i)++;
	} else if (strncmp(a, "-s", 2) == 0 && a[2] != '\0' && a[2] != '-') {
		val = a + 2; /* -sPATH */
		name = "-s";
		(*i)++;
	} else {
		return false;
	}

	if (strncmp(name, "--timeout", 9) == 0) {
		char *end;
		errno = 0;
		double secs = strtod(val, &end);
		if (!*val || *end || errno || !isfinite(secs) || secs < 0 || secs > 1e9)
			usage_error("--timeout: expected a number of seconds (0: no limit), got '%s'", val);
		/* Round up by hand: ceil() would pull in libm for one call. */
		o->timeout_ms = (int64_t)(secs * 1000.0);
		if ((double)o->timeout_ms < secs * 1000.0)
			o->timeout_ms++;
		o->timeout_set = true;
	} else {
		if (!*val)
			usage_error("%s: the socket path is empty", name);
		o->socket = val;
	}
	return true;
}

static const struct param *find_option(const struct param *opts, const char *name, size_t len)
{
	for (const struct param *p = opts; p->name; p++)
		if (strlen(p->name) == len && strncmp(p->name, name, len) == 0)
			return p;
	return NULL;
}


/* What a command line held besides the options already applied to the
 * request. */
struct cmdline {
	const char **pos;  /* positional arguments, in order (held.pos) */
	int npos;
	int nopts;         /* the command's own options given (not the global ones) */
	bool json_content; /* --json-content: TEXT is JSON */
};

/* The request before its arguments: id and op, and for approve and deny
 * what the verb means, before the options add to it. */
static json_t *request_start(const struct command *cmd)
{
	json_t *req = held.req = must(json_object());
	if (cmd->op) {
		put(req, "id", must(json_integer(1)));
		put(req, "op", must(json_string(cmd->op)));
	}
	if (cmd->fixed) {
		json_t *f = must(json_loads(cmd->fixed, 0, NULL));
		json_object_update(req, f);
		json_decref(f);
	}
	return req;
}

/* -h/--help and --version answer at once wherever they stand among a
 * command's arguments: the rest need not be valid. */
static void exit_if_info(const struct command *cmd, const char *a)
{
	if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
		print_command_help(cmd, stdout);
		check_stdout(EXIT_OK);
		exit(EXIT_OK);
	}
	if (strcmp(a, "--version") == 0) {
		printf("agentctl %s\n", AGENTD_VERSION);
		check_stdout(EXIT_OK);
		exit(EXIT_OK);
	}
}

/* Option p's value: "--opt=V", or "--opt V" (then *i moves onto V); NULL
 * for a flag. */
static const char *option_value(const struct param *p, const char *a, size_t nlen, int argc, char **argv, int *i)
{
	if (p->meta) {
		if (a[nlen] == '=')
			return a + nlen + 1;
		if (*i + 1 < argc)
			return argv[++*i];
		usage_error("option %s needs an argument (%s)", p->name, p->meta);
	}
	if (a[nlen] == '=')
		usage_error("option %s takes no argument", p->name);
	return NULL;
}

/* Sort argv: positionals into cl, global options into o, the command's
 * options applied to req as they come. */
static void parse_command_line(const struct command *cmd, int argc, char **argv, struct options *o, json_t *req,
			       struct cmdline *cl)
{
	bool only_pos = false;
	for (int i = 0; i < argc;) {
		const char *a = argv[i];
		if (only_pos || a[0] != '-' || a[1] == '\0') {
			cl->pos[cl->npos++] = a;
			i++;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_pos = true;
			i++;
			continue;
		}
		exit_if_info(cmd, a);
		if (global_option(argc, argv, &i, o))
			continue;
		size_t nlen = strcspn(a, "=");
		const struct param *p = find_option(cmd->opt, a, nlen);
		if (!p)
			usage_error("unknown option '%.*s'%s", (int)nlen, a,
				    a[1] != '-' ? " (a value starting with '-' goes after --)" : "");
		const char *val = option_value(p, a, nlen, argc, argv, &i);
		i++;
		cl->nopts++;
		if (p->kind == K_LOCAL)
			cl->json_content = true;
		else
			apply(p, val, req);
	}
}

/* Usage errors for arguments missing, extra or clashing, before the
 * positionals are applied. */
static void check_command_line(const struct command *cmd, json_t *req, const struct cmdline *cl)
{
	int want = 0;
	const struct param *p;
	for (p = cmd->pos; p->name; p++)
		want++;
	if (json_object_get(req, "events")) { /* send --batch: it replaces TEXT */
		if (cl->npos == want)
			usage_error("--batch replaces TEXT: give one or the other");
		if (cl->json_content || json_object_get(req, "event_id"))
			usage_error("--batch: each event carries its own content and event_id (no --json-content, --event-id)");
		want--;
	}
	if (cl->npos < want)
		usage_error("missing %s", cmd->pos[cl->npos].name);
	if (cl->npos > want)
		usage_error("unexpected argument '%s'", cl->pos[want]);
	for (p = cmd->opt; p->name; p++) {
		bool in_settings = p->kind == K_SET_STR || p->kind == K_SET_LIST || p->kind == K_SET_KV;
		if (p->required && !json_object_get(in_settings ? json_object_get(req, "settings") : req, p->field))
			usage_error("%s %s is required", p->name, p->meta);
	}
	if ((cmd->flags & CMD_NEED_OPT) && cl->nopts == 0)
		usage_error("nothing to do: give at least one option");
}

/* The positionals into req, then the line to send: raw's is the user's
 * own line, every other command's is req. */
static char *request_line(const struct command *cmd, json_t *req, const struct cmdline *cl)
{
	char *line = NULL;
	for (int k = 0; k < cl->npos; k++) {
		const struct param *p = &cmd->pos[k];
		if (p->kind == K_RAW)
			line = raw_line(p, cl->pos[k]);
		else if (p->kind == K_CONTENT)
			add_content(p, cl->pos[k], req, cl->json_content);
		else
			apply(p, cl->pos[k], req);
	}
	return line ? line : must(jsonmp_dumps(req, SEND_FLAGS, 0, NULL));
}

/* Parse a command's arguments into its request: a JSON object, or for raw the
 * user's line. Exits on usage errors and on --help. */
char *build_request(const struct command *cmd, int argc, char **argv, struct options *o,
			   int64_t *extra_ms)
{
	struct cmdline cl = { .pos = held.pos = must(calloc((size_t)argc + 1, sizeof *cl.pos)) };
	json_t *req = request_start(cmd);
	parse_command_line(cmd, argc, argv, o, req, &cl);
	check_command_line(cmd, req, &cl);
	char *line = request_line(cmd, req, &cl);

	/* A long-poll legitimately takes up to wait_ms: the reply deadline grows by it. */
	json_t *w = json_object_get(req, "wait_ms");
	*extra_ms = w ? (int64_t)json_integer_value(w) : 0;
	json_decref(req);
	free(cl.pos);
	held.req = NULL;
	held.pos = NULL;
	return line;
}
