/* show.c: agentctl's readable output (agentctl.h): key: value lines,
 * tables, events; --json bypasses it. */
#include "agentctl/agentctl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/jsonmp.h"

/* ------------------------------------------------------------------------ */
/* Readable output                                                          */

/* stdout failing is not agentd's fault but the user must know: exit 2. A
 * reader that went away (agentctl watch c | head) is not an error. */
void check_stdout(int code_if_gone)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return;
	if (errno == EPIPE)
		exit(code_if_gone);
	fail("cannot write to stdout: %s", strerror(errno));
}

char *dump(const json_t *v)
{
	return must(jsonmp_dumps(v, SHOW_FLAGS, 0, NULL));
}

/* A string shows as itself unless it would not read as one token on one line
 * (empty, or holding control characters): then as a JSON string. */
static bool plain_string(const json_t *v)
{
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (n == 0 || strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* Times in the store are milliseconds since the epoch: show them in UTC. */
static bool format_time(const json_t *v, char *buf, size_t n)
{
	if (!json_is_integer(v))
		return false;
	json_int_t ms = json_integer_value(v);
	if (ms < 100000000000LL || ms > 32503680000000LL) /* 1973..3000: not a time otherwise */
		return false;
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	if (!gmtime_r(&secs, &tm))
		return false;
	size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
	if (k == 0)
		return false;
	snprintf(buf + k, n - k, ".%03dZ", (int)(ms % 1000));
	return true;
}

static bool is_time_key(const char *key)
{
	size_t n = strlen(key);
	return (n > 3 && strcmp(key + n - 3, "_at") == 0) || strcmp(key, "deadline") == 0;
}

/* How a value reads in a table cell or after "key: ". */
char *text_of(const json_t *v, const char *null_text)
{
	if (!v || json_is_null(v))
		return xstrdup(null_text);
	if (json_is_string(v) && plain_string(v))
		return xstrdup(json_string_value(v));
	return dump(v);
}

/* Display width of UTF-8 text: code points, close enough for aligning. */
static size_t width_of(const char *s)
{
	size_t w = 0;
	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

struct kvlist {
	char **key, **val;
	size_t n, cap;
};

static void kv_add(struct kvlist *l, const char *prefix, const char *key, char *val)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->key = must(realloc(l->key, l->cap * sizeof *l->key));
		l->val = must(realloc(l->val, l->cap * sizeof *l->val));
	}
	size_t n = (prefix ? strlen(prefix) + 1 : 0) + strlen(key) + 1;
	l->key[l->n] = must(malloc(n));
	snprintf(l->key[l->n], n, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", key);
	l->val[l->n++] = val;
}

static void kv_add_json(struct kvlist *l, const char *prefix, const char *key, const json_t *v)
{
	char *text = text_of(v, "null");
	char when[64];
	if (is_time_key(key) && format_time(v, when, sizeof when)) {
		size_t n = strlen(text) + strlen(when) + 4;
		char *both = must(malloc(n));
		snprintf(both, n, "%s (%s)", text, when);
		free(text);
		text = both;
	}
	kv_add(l, prefix, key, text);
}

/* Collect an object's members; objects one level down are flattened
 * (settings.model), deeper ones shown as compact JSON. `envelope` skips the
 * reply's own id and ok. */
static void kv_collect(struct kvlist *l, const json_t *obj, const char *prefix, bool envelope, const char *skip)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)obj, k, v) {
		if (envelope && (strcmp(k, "id") == 0 || strcmp(k, "ok") == 0))
			continue;
		if (skip && strcmp(k, skip) == 0)
			continue;
		if (!prefix && json_is_object(v) && json_object_size(v) > 0)
			kv_collect(l, v, k, false, NULL);
		else
			kv_add_json(l, prefix, k, v);
	}
}

static void kv_print(struct kvlist *l)
{
	size_t w = 0;
	for (size_t i = 0; i < l->n; i++)
		if (strlen(l->key[i]) > w)
			w = strlen(l->key[i]);
	for (size_t i = 0; i < l->n; i++) {
		printf("%s:%*s %s\n", l->key[i], (int)(w - strlen(l->key[i])), "", l->val[i]);
		free(l->key[i]);
		free(l->val[i]);
	}
	free(l->key);
	free(l->val);
	memset(l, 0, sizeof *l);
}

static void show_object(const json_t *obj)
{
	struct kvlist l = {0};
	kv_collect(&l, obj, NULL, false, NULL);
	kv_print(&l);
}

/* Any reply: its fields as key: value, or "ok" when it has none. */
void show_fields(const json_t *reply)
{
	struct kvlist l = {0};
	kv_collect(&l, reply, NULL, true, NULL);
	if (l.n == 0)
		puts("ok");
	kv_print(&l);
}

struct column {
	const char *header;
	const char *path; /* dotted path into the row; "a|b": the first present */
	bool time;
};

static const json_t *lookup(const json_t *row, const char *path)
{
	char buf[128];
	const char *alt = path;
	while (*alt) {
		size_t n = strcspn(alt, "|");
		if (n >= sizeof buf)
			return NULL;
		memcpy(buf, alt, n);
		buf[n] = '\0';
		const json_t *v = row;
		for (char *save = NULL, *part = strtok_r(buf, ".", &save); part && v;
		     part = strtok_r(NULL, ".", &save))
			v = json_is_object(v) ? json_object_get(v, part) : NULL;
		if (v)
			return v;
		alt += n + (alt[n] == '|');
	}
	return NULL;
}

/* A table: a header row, columns padded to their widest cell, two spaces
 * apart, the last column unpadded. */
static void show_table(const json_t *rows, const struct column *cols, size_t ncols)
{
	size_t nrows = json_array_size(rows) + 1;
	char **cell = must(calloc(nrows * ncols, sizeof *cell));
	size_t *w = must(calloc(ncols, sizeof *w));

	for (size_t c = 0; c < ncols; c++)
		cell[c] = xstrdup(cols[c].header);
	for (size_t r = 1; r < nrows; r++) {
		const json_t *row = json_array_get(rows, r - 1);
		for (size_t c = 0; c < ncols; c++) {
			const json_t *v = json_is_object(row) ? lookup(row, cols[c].path) : NULL;
			char when[64];
			if (cols[c].time && format_time(v, when, sizeof when))
				cell[r * ncols + c] = xstrdup(when);
			else
				cell[r * ncols + c] = text_of(v, "-");
		}
	}
	for (size_t i = 0; i < nrows * ncols; i++)
		if (width_of(cell[i]) > w[i % ncols])
			w[i % ncols] = width_of(cell[i]);
	for (size_t r = 0; r < nrows; r++) {
		for (size_t c = 0; c < ncols; c++) {
			const char *s = cell[r * ncols + c];
			if (c + 1 < ncols)
				printf("%s%*s  ", s, (int)(w[c] - width_of(s)), "");
			else
				printf("%s\n", s);
		}
	}
	for (size_t i = 0; i < nrows * ncols; i++)
		free(cell[i]);
	free(cell);
	free(w);
}

#define TABLE(rows, cols) show_table(rows, cols, sizeof cols / sizeof cols[0])

void show_ping(const json_t *reply)
{
	const char *v = json_string_value(json_object_get(reply, "version"));
	printf("pong (agentd %s)\n", v ? v : "?");
}

void show_create(const json_t *reply)
{
	const json_t *c = json_object_get(reply, "conversation");
	if (json_is_object(c)) /* tolerate a server that returns the record */
		c = json_object_get(c, "id");
	if (json_is_string(c))
		printf("%s\n", json_string_value(c));
	else
		show_fields(reply);
}

static void show_member(const json_t *reply, const char *key)
{
	const json_t *v = json_object_get(reply, key);
	if (json_is_object(v))
		show_object(v);
	else
		show_fields(reply);
}

void show_get(const json_t *reply)
{
	show_member(reply, "conversation");
}

void show_tool_call(const json_t *reply)
{
	show_member(reply, "tool_call");
}

void show_summary(const json_t *reply)
{
	const json_t *v = json_object_get(reply, "summary");
	if (json_is_null(v))
		puts("no summary");
	else
		show_member(reply, "summary");
}

/* A page's last line when more remain: `next: CURSOR`. */
static void print_next(const json_t *reply)
{
	const json_t *next = json_object_get(reply, "next");
	if (next && !json_is_null(next)) {
		char *t = text_of(next, "null");
		printf("next: %s\n", t);
		free(t);
	}
}

void show_list(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id", false},	       {"STATUS", "status", false},  {"MODEL", "settings.model", false},
		{"LAST_SEQ", "last_seq", false}, {"WORKER", "worker.pid", false}, {"UPDATED", "updated_at", true},
	};
	const json_t *rows = json_object_get(reply, "conversations");
	if (!json_is_array(rows)) {
		show_fields(reply);
		return;
	}
	TABLE(rows, cols);
	print_next(reply);
}

void show_tool_calls(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id|tool_call_id", false}, {"NAME", "name", false},	    {"EXECUTOR", "executor", false},
		{"STATUS", "status", false},	  {"INSERTED", "inserted_at", true}, {"ARGS", "args", false},
	};
	const json_t *rows = json_object_get(reply, "tool_calls");
	if (json_is_array(rows))
		TABLE(rows, cols);
	else
		show_fields(reply);
}

void show_schedules(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "schedule", false}, {"CONVERSATION", "conversation", false}, {"DUE", "due", true},
		{"CRON", "cron", false},   {"TEXT", "text", false},
	};
	const json_t *rows = json_object_get(reply, "schedules");
	if (json_is_array(rows))
		TABLE(rows, cols);
	else
		show_fields(reply);
}

void show_runs(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id", false},	       {"STATUS", "status", false},	  {"ATTEMPT", "attempt", false},
		{"MODEL", "model", false},     {"FROM", "from_seq", false},	  {"TO", "to_seq", false},
		{"FIRST", "first_seq", false}, {"LAST", "last_seq", false},	  {"STARTED", "started_at", true},
		{"ENDED", "ended_at", true},
	};
	const json_t *rows = json_object_get(reply, "runs");
	if (!json_is_array(rows)) {
		show_fields(reply);
		return;
	}
	TABLE(rows, cols);
	print_next(reply);
}

void show_audit(const json_t *reply)
{
	static const struct column cols[] = {
		{"TURN", "turn_ref|turn", false},
		{"TASK", "task", false},
		{"MODEL", "model", false},
		{"LATENCY_MS", "latency_ms", false},
		{"SUMMARY_V", "summary_version", false},
		{"USAGE", "usage", false},
		{"INSERTED", "inserted_at", true},
	};
	const json_t *rows = json_object_get(reply, "model_calls");
	if (json_is_array(rows))
		TABLE(rows, cols);
	else
		show_fields(reply);
}

void show_status(const json_t *reply)
{
	static const struct column cols[] = {
		{"CONVERSATION", "conversation", false},
		{"PID", "pid", false},
		{"STATE", "state", false},
		{"SINCE_MS", "since_ms", false},
	};
	const json_t *workers = json_object_get(reply, "workers");
	struct kvlist l = {0};
	kv_collect(&l, reply, NULL, true, json_is_array(workers) ? "workers" : NULL);
	if (json_is_array(workers)) {
		char n[32];
		snprintf(n, sizeof n, "%zu", json_array_size(workers));
		kv_add(&l, NULL, "workers", xstrdup(n));
	}
	kv_print(&l);
	if (json_array_size(workers) > 0) {
		putchar('\n');
		TABLE(workers, cols);
	}
}

void show_nodes(const json_t *reply)
{
	static const struct column cols[] = {
		{"NODE", "node", false},	   {"LIVE", "live", false},	     {"LEASES", "leases", false},
		{"BEAT_AT", "beat_at", true}, {"EXPIRES_AT", "expires_at", true}, {"STARTED_AT", "started_at", true},
	};
	const json_t *rows = json_object_get(reply, "nodes");
	const json_t *self = json_object_get(reply, "node");
	if (!json_is_array(rows) || !json_is_string(self)) {
		show_fields(reply);
		return;
	}
	printf("node: %s\n", json_string_value(self));
	TABLE(rows, cols);
}

void show_metrics(const json_t *reply)
{
	const json_t *t = json_object_get(reply, "text");
	if (!json_is_string(t)) {
		show_fields(reply);
		return;
	}
	size_t n = json_string_length(t);
	fwrite(json_string_value(t), 1, n, stdout);
	if (n > 0 && json_string_value(t)[n - 1] != '\n')
		putchar('\n');
}

/* APPROVALS: "1/2:alice" (approvals counted, of approvers, by whom) for a
 * pending approval, "-" for an unknown call. */
static json_t *approvals_cell(const json_t *row)
{
	const json_t *need = json_object_get(row, "approvers"), *names = json_object_get(row, "approved_by"), *v;
	if (!json_is_integer(need) || !json_is_array(names))
		return NULL;
	size_t i, len = 48;
	json_array_foreach(names, i, v) len += json_string_length(v) + 1;
	char *cell = must(malloc(len));
	size_t at = (size_t)snprintf(cell, len, "%zu/%lld", json_array_size(names), (long long)json_integer_value(need));
	json_array_foreach(names, i, v) at += (size_t)snprintf(cell + at, len - at, "%s%s", i ? "," : ":",
							       json_string_value(v) ? json_string_value(v) : "");
	json_t *o = must(json_string(cell));
	free(cell);
	return o;
}

void show_pending(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id", false},	       {"CONVERSATION", "conversation", false}, {"KIND", "kind", false},
		{"NAME", "name", false},
		{"DEADLINE", "deadline", true}, {"PROMPT", "prompt", false},		 {"ARGS", "args", false},
		{"ARGS_DIGEST", "args_digest", false}, {"APPROVALS", "approvals_cell", false},
	};
	const json_t *rows = json_object_get(reply, "tool_calls"), *row;
	json_t *shown = must(json_array());
	size_t i;
	json_array_foreach(rows, i, row)
	{
		json_t *r = must(json_copy((json_t *)row)), *cell = approvals_cell(row);
		if (cell)
			must(json_object_set_new(r, "approvals_cell", cell) ? NULL : r);
		must(json_array_append_new(shown, r) ? NULL : shown);
	}
	if (json_array_size(shown) == 0)
		puts("no pending approvals or unknown calls");
	else
		TABLE(shown, cols);
	json_decref(shown);
}

/* SEQ TYPE CONTENT: the line format of events and watch. */
void print_event(const json_t *ev)
{
	const json_t *c = json_object_get(ev, "content");
	char *seq = text_of(json_object_get(ev, "seq"), "-");
	char *type = text_of(json_object_get(ev, "type"), "-");
	char *content = c ? dump(c) : xstrdup("null"); /* always JSON here, strings quoted */
	printf("%s %s %s\n", seq, type, content);
	free(seq);
	free(type);
	free(content);
}

void show_events(const json_t *reply)
{
	const json_t *evs = json_object_get(reply, "events");
	size_t i;
	json_t *ev;
	if (!json_is_array(evs)) {
		show_fields(reply);
		return;
	}
	json_array_foreach(evs, i, ev)
		print_event(ev);
}
