/*
 * transfer.c: `agentd export` and `agentd import` (see transfer.h).
 */
#include "supervisor/transfer.h"
#include "common/config.h"
#include "common/jsonmp.h"
#include "store/store.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Version 2 adds every summary (not only the latest), runs, expiry
 * warnings (a tool call's warn_at) and the conversation's turn count;
 * version 3 scheduled wakeups (schedule lines). Older streams still
 * import: what they lack is absent (no runs, no warnings, turns 0; no
 * schedules). */
#define FORMAT_VERSION 3
#define FORMAT_OLDEST 1
#define PROGRESS_EVERY 1000

/* ---- base64 (RFC 4648, with padding) --------------------------------- */

static const char b64c[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *p, size_t n)
{
	char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
		*o++ = b64c[v >> 18 & 63];
		*o++ = b64c[v >> 12 & 63];
		*o++ = i + 1 < n ? b64c[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? b64c[v & 63] : '=';
	}
	*o = 0;
	return out;
}

static int b64_val(char c)
{
	const char *p = c ? strchr(b64c, c) : NULL;
	return p ? (int)(p - b64c) : -1;
}

/* Decode s into a malloc'd buffer; -1 when s is not base64. */
static int b64_decode(const char *s, size_t len, unsigned char **out, size_t *outlen)
{
	if (len % 4)
		return -1;
	unsigned char *buf = malloc(len / 4 * 3 + 1), *o = buf;
	if (!buf)
		return -1;
	for (size_t i = 0; i < len; i += 4) {
		int v[4];
		for (int k = 0; k < 4; k++) {
			v[k] = s[i + k] == '=' && i + 4 == len && k >= 2 ? 0 : b64_val(s[i + k]);
			if (v[k] < 0 || (k == 2 && s[i + 2] == '=' && s[i + 3] != '=')) {
				free(buf);
				return -1;
			}
		}
		uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
		*o++ = (unsigned char)(x >> 16);
		if (s[i + 2] != '=')
			*o++ = (unsigned char)(x >> 8);
		if (s[i + 3] != '=')
			*o++ = (unsigned char)x;
	}
	*out = buf;
	*outlen = (size_t)(o - buf);
	return 0;
}

/* ---- export ---------------------------------------------------------- */

/* An expiry warning: the store lists them by time, across conversations;
 * export looks each tool call's up by its id. */
struct warn {
	char id[STORE_ID_MAX + 1];
	int64_t at;
};

struct xp {
	FILE *out;
	int err;             /* a write or memory failure */
	unsigned long long nev, ntc, nsum, nmc, nrun, nsched;
	const char *conv;
	struct warn *warn;   /* sorted by id */
	size_t nwarn, warncap;
};

static json_t *jbytes(store_bytes b)
{
	if (!b.len)
		return json_null();
	char *s = b64_encode(b.ptr, b.len);
	json_t *j = s ? json_string(s) : NULL;
	free(s);
	return j;
}

static json_t *jstr(store_bytes b)
{
	return b.len ? json_stringn(b.ptr, b.len) : json_null();
}

static void emit(struct xp *x, json_t *j)
{
	if (!j) {
		x->err = x->err ? x->err : -ENOMEM;
		return;
	}
	char *s = jsonmp_dumps(j, JSON_COMPACT, 0, NULL); /* json_dumps can leave a key out when memory runs out */
	json_decref(j);
	if (!s || fputs(s, x->out) == EOF || fputc('\n', x->out) == EOF)
		x->err = x->err ? x->err : s ? -EIO : -ENOMEM;
	free(s);
}

static int on_event(void *arg, const struct store_event *e)
{
	struct xp *x = arg;
	x->nev++;
	emit(x, json_pack("{sssssIsososIso}", "kind", "event", "conv", x->conv, "seq", (json_int_t)e->seq, "type",
			  jstr(e->type), "event_id", jstr(e->event_id), "inserted_at", (json_int_t)e->inserted_at,
			  "content", jbytes(e->content)));
	return x->err;
}

static int warn_cmp(const void *a, const void *b)
{
	return strcmp(((const struct warn *)a)->id, ((const struct warn *)b)->id);
}

static int on_warning(void *arg, const struct store_expiry *e)
{
	struct xp *x = arg;
	if (e->tool_call_id.len > STORE_ID_MAX)
		return STORE_E_CORRUPT;
	if (x->nwarn == x->warncap) {
		size_t cap = x->warncap ? x->warncap * 2 : 64;
		void *p = realloc(x->warn, cap * sizeof *x->warn);
		if (!p)
			return -ENOMEM;
		x->warn = p;
		x->warncap = cap;
	}
	struct warn *w = &x->warn[x->nwarn++];
	memcpy(w->id, e->tool_call_id.ptr, e->tool_call_id.len);
	w->id[e->tool_call_id.len] = 0;
	w->at = e->deadline;
	return 0;
}

/* The call's warning time; 0: none. Only a pending call has one. */
static int64_t warn_at(struct xp *x, const struct store_tool_call *t)
{
	struct warn key;
	if (t->status != STORE_TC_PENDING || !x->nwarn || t->id.len > STORE_ID_MAX)
		return 0;
	memcpy(key.id, t->id.ptr, t->id.len);
	key.id[t->id.len] = 0;
	const struct warn *w = bsearch(&key, x->warn, x->nwarn, sizeof *x->warn, warn_cmp);
	return w ? w->at : 0;
}

static int on_tool_call(void *arg, const struct store_tool_call *t)
{
	struct xp *x = arg;
	x->ntc++;
	emit(x, json_pack("{sssssososssssIsIsIsIsIsososo}", "kind", "tool_call", "conv", x->conv, "id",
			  jstr(t->id), "name", jstr(t->name), "executor",
			  t->executor == STORE_EXEC_HUMAN ? "human" : "server", "status",
			  store_tc_status_name(t->status), "inserted_at", (json_int_t)t->inserted_at, "resolved_at",
			  (json_int_t)t->resolved_at, "deadline", (json_int_t)t->deadline, "warn_at",
			  (json_int_t)warn_at(x, t), "attempts", (json_int_t)t->attempts, "args", jbytes(t->args),
			  "prompt", jbytes(t->prompt), "result", jbytes(t->result)));
	return x->err;
}

static int on_summary(void *arg, const struct store_summary *s)
{
	struct xp *x = arg;
	x->nsum++;
	emit(x, json_pack("{sssssIsIsIsIso}", "kind", "summary", "conv", x->conv, "from_seq", (json_int_t)s->from_seq,
			  "to_seq", (json_int_t)s->to_seq, "version", (json_int_t)s->version, "inserted_at",
			  (json_int_t)s->inserted_at, "content", jbytes(s->content)));
	return x->err;
}

static int on_run(void *arg, const struct store_run *r)
{
	struct xp *x = arg;
	const char *status = store_run_status_name(r->status);
	if (!status)
		return STORE_E_CORRUPT;
	x->nrun++;
	emit(x, json_pack("{sssssIsssIsIsIsIsIsosIsIsfsIsI}", "kind", "run", "conv", x->conv, "id", (json_int_t)r->id,
			  "status", status, "attempt", (json_int_t)r->attempt, "from_seq", (json_int_t)r->from_seq,
			  "to_seq", (json_int_t)r->to_seq, "first_seq", (json_int_t)r->first_seq, "last_seq",
			  (json_int_t)r->last_seq, "model", json_stringn(r->model.len ? r->model.ptr : "", r->model.len),
			  "input_tokens",
			  (json_int_t)r->usage.input_tokens, "output_tokens", (json_int_t)r->usage.output_tokens, "cost",
			  r->usage.cost, "started_at", (json_int_t)r->started_at, "ended_at", (json_int_t)r->ended_at));
	return x->err;
}

static int on_schedule(void *arg, const struct store_schedule *sc)
{
	struct xp *x = arg;
	x->nsched++;
	emit(x, json_pack("{ssssss#sIsoso}", "kind", "schedule", "conv", x->conv, "id", (const char *)sc->id.ptr,
			  (int)sc->id.len, "due", (json_int_t)sc->due, "cron",
			  sc->cron.len ? json_stringn((const char *)sc->cron.ptr, sc->cron.len) : json_null(), "text",
			  jbytes(sc->text)));
	return x->err;
}

static int on_model_call(void *arg, const struct store_model_call *m)
{
	struct xp *x = arg;
	x->nmc++;
	emit(x, json_pack("{sssssIsosIsIsfsIsIsIso}", "kind", "model_call", "conv", x->conv, "turn_ref",
			  (json_int_t)m->turn_ref, "model", jstr(m->model), "input_tokens",
			  (json_int_t)m->usage.input_tokens, "output_tokens", (json_int_t)m->usage.output_tokens, "cost",
			  m->usage.cost, "latency_ms", (json_int_t)m->latency_ms, "summary_version",
			  (json_int_t)m->summary_version, "inserted_at", (json_int_t)m->inserted_at, "rendered",
			  jbytes(m->rendered)));
	return x->err;
}

struct idlist {
	char (*id)[STORE_ID_MAX + 1];
	size_t n, cap;
};

static int collect(void *arg, const char *id, size_t len)
{
	struct idlist *l = arg;
	if (len > STORE_ID_MAX)
		return STORE_E_CORRUPT;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		void *p = realloc(l->id, cap * sizeof *l->id);
		if (!p)
			return -ENOMEM;
		l->id = p;
		l->cap = cap;
	}
	memcpy(l->id[l->n], id, len);
	l->id[l->n++][len] = 0;
	return 0;
}

static void say_open_failure(const char *what, const char *target, int e)
{
	char *shown = config_store_shown(target);
	fprintf(stderr, "agentd %s: cannot open the store %s: %s\n", what, shown ? shown : target,
		*store_open_error() ? store_open_error() : store_strerror(e));
	free(shown);
}

/* One conversation, in a read transaction of its own. */
static int export_conv(store *st, struct xp *x, const char *id)
{
	store_txn *t;
	int e = store_txn_begin(st, STORE_READ, &t);
	if (e)
		return e;
	struct store_conv c;
	x->conv = id;
	if ((e = store_conv_get(t, id, &c)))
		goto out;
	/* A log that begins after seq 1 (a fork's, after its summary): its
	 * conv line says where (first_seq), so the import makes it begin there
	 * too. Left out for a log that begins at 1, as older streams have it. */
	uint64_t first = 1;
	if ((e = store_event_first_seq(t, id, &first)))
		goto out;
	json_t *head = json_pack("{sssssssIsIsIsIsfsIsososo}", "kind", "conv", "id", id, "status",
				 store_status_name(c.status), "created_at", (json_int_t)c.created_at, "updated_at",
				 (json_int_t)c.updated_at, "input_tokens", (json_int_t)c.usage.input_tokens,
				 "output_tokens", (json_int_t)c.usage.output_tokens, "cost", c.usage.cost, "turns",
				 (json_int_t)c.turns, "settings", jbytes(c.settings), "fsm", jbytes(c.fsm_state), "metadata",
				 jbytes(c.metadata));
	if (head && first > 1 && json_object_set_new(head, "first_seq", json_integer((json_int_t)first))) {
		json_decref(head);
		head = NULL;
	}
	emit(x, head);
	struct store_range all = { 0 };
	if (x->err || (e = store_events_stream(t, id, &all, on_event, x)) ||
	    (e = store_summaries_list(t, id, on_summary, x)) || (e = store_tool_calls_list(t, id, 0, on_tool_call, x)) ||
	    (e = store_model_calls_list(t, id, on_model_call, x)) ||
	    (e = store_runs_list(t, id, 0, 0, on_run, x, NULL)) || (e = store_schedules_list(t, id, on_schedule, x)))
		goto out;
	e = x->err;
out:
	store_txn_abort(t);
	return e;
}

/* The stream of the conversations in ids, from st (a store of kind from),
 * onto out: the header, each conversation, the trailer. 0, or after printing
 * why on stderr: the store's error, or the -errno of writing out. */
static int export_stream(store *st, const struct idlist *ids, const char *from, FILE *out, FILE *progress)
{
	struct xp x = { .out = out };
	store_txn *t;
	int e = store_txn_begin(st, STORE_READ, &t);
	if (e == 0) {
		e = store_warnings_due(t, INT64_MAX, on_warning, &x);
		store_txn_abort(t);
	}
	if (e) {
		fprintf(stderr, "agentd export: listing the expiry warnings: %s\n", store_strerror(e));
		goto out;
	}
	if (x.nwarn)
		qsort(x.warn, x.nwarn, sizeof *x.warn, warn_cmp);
	emit(&x, json_pack("{sisssssI}", "agentd_export", FORMAT_VERSION, "agentd", AGENTD_VERSION, "from", from,
			   "conversations", (json_int_t)ids->n));
	for (size_t i = 0; i < ids->n && !x.err; i++) {
		if ((e = export_conv(st, &x, ids->id[i]))) {
			if (x.err)
				break;
			fprintf(stderr, "agentd export: conversation %s: %s%s\n", ids->id[i], store_strerror(e),
				e == STORE_E_CORRUPT ? " (agentd check lists what is damaged)" : "");
			goto out;
		}
		if (progress && (i + 1) % PROGRESS_EVERY == 0)
			fprintf(progress, "agentd export: %zu of %zu conversations\n", i + 1, ids->n);
	}
	emit(&x, json_pack("{s{sIsIsIsIsIsIsI}}", "end", "conversations", (json_int_t)ids->n, "events",
			   (json_int_t)x.nev, "summaries", (json_int_t)x.nsum, "tool_calls", (json_int_t)x.ntc,
			   "model_calls", (json_int_t)x.nmc, "runs", (json_int_t)x.nrun, "schedules",
			   (json_int_t)x.nsched));
	if (!x.err && fflush(out))
		x.err = -errno;
	if (x.err) {
		fprintf(stderr, "agentd export: writing the stream: %s\n", strerror(-x.err));
		e = x.err;
		goto out;
	}
	if (progress)
		fprintf(progress, "agentd export: %zu conversations, %llu events, %llu tool calls, %llu summaries, %llu "
			"audit rows, %llu runs, %llu schedules\n", ids->n, x.nev, x.ntc, x.nsum, x.nmc, x.nrun, x.nsched);
out:
	free(x.warn);
	return e;
}

int transfer_export(const char *target, FILE *out, FILE *progress)
{
	store *st;
	struct store_opts so = { .read_only = 1, .audit = 1 };
	int e = store_open(&st, target, &so);
	if (e) {
		say_open_failure("export", target, e);
		return e;
	}
	struct idlist ids = { 0 };
	store_txn *t;
	if ((e = store_txn_begin(st, STORE_READ, &t)) == 0) {
		e = store_conv_ids(t, collect, &ids);
		store_txn_abort(t);
	}
	if (e)
		fprintf(stderr, "agentd export: listing the conversations: %s\n", store_strerror(e));
	else
		e = export_stream(st, &ids, config_store_is_pg(target) ? "postgresql" : "lmdb", out, progress);
	free(ids.id);
	store_close(st);
	return e;
}

int transfer_export_conv(store *st, const char *id, const char *from, FILE *out)
{
	struct idlist one = { 0 };
	int e = collect(&one, id, strlen(id));
	if (!e)
		e = export_stream(st, &one, from, out, NULL);
	free(one.id);
	return e;
}

/* ---- import ---------------------------------------------------------- */

/* The clock import's transactions stamp records with: each record's own
 * time, set before its transaction begins. */
static int64_t import_now;
static int64_t import_clock(void *arg)
{
	(void)arg;
	return import_now;
}

struct line {
	json_t *j;
	const char *kind;
	unsigned long no;
};

/* Read the next line of in as JSON. 1 at the end, 0, -1 (err set). */
static int next_line(FILE *in, struct line *l, char **buf, size_t *cap, char *err, size_t errlen)
{
	ssize_t n = getline(buf, cap, in);
	if (n < 0)
		return 1;
	l->no++;
	json_error_t je;
	json_decref(l->j);
	/* jsonmp_loadb: json_loadb can drop a byte when memory runs out. */
	if (jsonmp_loadb(*buf, (size_t)n, 0, &l->j, &je) == -ENOMEM) {
		snprintf(err, errlen, "line %lu: out of memory", l->no);
		return -1;
	}
	if (!l->j || !json_is_object(l->j)) {
		snprintf(err, errlen, "line %lu: not a JSON object%s%s", l->no, l->j ? "" : ": ", l->j ? "" : je.text);
		return -1;
	}
	l->kind = json_string_value(json_object_get(l->j, "kind"));
	return 0;
}

static const char *g_str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static int g_int(json_t *o, const char *k, int64_t *v)
{
	json_t *j = json_object_get(o, k);
	if (!json_is_integer(j))
		return -1;
	*v = json_integer_value(j);
	return 0;
}

/* A field version `since` added: required in a stream of that version
 * or later, 0 when an older stream lacks it. A present one is a
 * non-negative integer. */
static int g_int_since(json_t *o, const char *k, int ver, int since, int64_t *v)
{
	if (!json_object_get(o, k) && ver < since) {
		*v = 0;
		return 0;
	}
	return g_int(o, k, v) || *v < 0 ? -1 : 0;
}

static int g_int_v2(json_t *o, const char *k, int ver, int64_t *v)
{
	return g_int_since(o, k, ver, 2, v);
}

/* A run status by name; -1 when it is none. */
static int run_status_parse(const char *name)
{
	for (int i = 0; name && store_run_status_name(i); i++)
		if (!strcmp(store_run_status_name(i), name))
			return i;
	return -1;
}

/* A base64 field (null: empty when nullable). Malloc'd into *b. */
static int g_bytes(json_t *o, const char *k, int nullable, store_bytes *b, unsigned char **mem)
{
	json_t *j = json_object_get(o, k);
	*mem = NULL;
	*b = (store_bytes){ NULL, 0 };
	if (json_is_null(j) && nullable)
		return 0;
	if (!json_is_string(j))
		return -1;
	size_t n;
	if (b64_decode(json_string_value(j), json_string_length(j), mem, &n))
		return -1;
	*b = (store_bytes){ *mem, n };
	return 0;
}

/* A base64 field is well formed (the decoded copy is freed at once). */
static int check_bytes(json_t *o, const char *k, int nullable)
{
	store_bytes b;
	unsigned char *m;
	int r = g_bytes(o, k, nullable, &b, &m);
	free(m);
	return r;
}

/* The header line: an agentd export of a version this agentd reads. 0 or
 * -1 (err set). */
static int check_header(FILE *in, struct line *l, char **buf, size_t *cap, int *version, char *err, size_t errlen)
{
	int r = next_line(in, l, buf, cap, err, errlen);
	if (r) {
		if (r > 0)
			snprintf(err, errlen, "an empty stream (no header line)");
		return -1;
	}
	json_t *ver = json_object_get(l->j, "agentd_export");
	if (!json_is_integer(ver)) {
		snprintf(err, errlen, "line 1: not an agentd export (no agentd_export version)");
		return -1;
	}
	if (json_integer_value(ver) < FORMAT_OLDEST || json_integer_value(ver) > FORMAT_VERSION) {
		snprintf(err, errlen, "line 1: export format version %lld; this agentd reads versions %d to %d",
			 (long long)json_integer_value(ver), FORMAT_OLDEST, FORMAT_VERSION);
		return -1;
	}
	*version = (int)json_integer_value(ver);
	return 0;
}

/* Each record check below: 1 when a field is missing or bad. */
static int check_conv(json_t *j, int fv)
{
	int64_t v;
	const char *id = g_str(j, "id"), *st = g_str(j, "status");
	json_t *fs = json_object_get(j, "first_seq"); /* optional: where the log begins */
	return !id || !store_id_valid(id, strlen(id)) || !st || store_status_parse(st, strlen(st)) < 0 ||
	       g_int(j, "created_at", &v) || g_int(j, "updated_at", &v) || g_int(j, "input_tokens", &v) ||
	       g_int(j, "output_tokens", &v) || !json_is_number(json_object_get(j, "cost")) ||
	       g_int_v2(j, "turns", fv, &v) || check_bytes(j, "settings", 0) || check_bytes(j, "fsm", 1) ||
	       check_bytes(j, "metadata", 1) || (fs && (!json_is_integer(fs) || json_integer_value(fs) < 1));
}

static int check_event(json_t *j, int fv)
{
	int64_t v;
	(void)fv;
	return g_int(j, "seq", &v) || !g_str(j, "type") || g_int(j, "inserted_at", &v) ||
	       check_bytes(j, "content", 0) || !(json_is_null(json_object_get(j, "event_id")) || g_str(j, "event_id"));
}

static int check_summary(json_t *j, int fv)
{
	int64_t v;
	(void)fv;
	return g_int(j, "from_seq", &v) || g_int(j, "to_seq", &v) || g_int(j, "version", &v) || v < 1 ||
	       g_int(j, "inserted_at", &v) || check_bytes(j, "content", 0);
}

static int check_tool_call(json_t *j, int fv)
{
	int64_t v;
	const char *st = g_str(j, "status"), *ex = g_str(j, "executor");
	return !g_str(j, "id") || !g_str(j, "name") || !st || store_tc_status_parse(st, strlen(st)) < 0 || !ex ||
	       (strcmp(ex, "server") && strcmp(ex, "human")) || g_int(j, "inserted_at", &v) ||
	       g_int(j, "resolved_at", &v) || g_int(j, "deadline", &v) || g_int_v2(j, "warn_at", fv, &v) ||
	       g_int(j, "attempts", &v) || v < 0 || v > 1000000 || check_bytes(j, "args", 0) ||
	       check_bytes(j, "prompt", 1) || check_bytes(j, "result", 1);
}

static int check_model_call(json_t *j, int fv)
{
	int64_t v;
	(void)fv;
	return g_int(j, "turn_ref", &v) || !g_str(j, "model") || g_int(j, "input_tokens", &v) ||
	       g_int(j, "output_tokens", &v) || !json_is_number(json_object_get(j, "cost")) ||
	       g_int(j, "latency_ms", &v) || g_int(j, "summary_version", &v) || g_int(j, "inserted_at", &v) ||
	       check_bytes(j, "rendered", 0);
}

static int check_run(json_t *j, int fv)
{
	int64_t v;
	(void)fv;
	return g_int(j, "id", &v) || v < 1 || run_status_parse(g_str(j, "status")) < 0 || g_int(j, "attempt", &v) ||
	       v < 1 || v > UINT32_MAX || g_int(j, "from_seq", &v) || g_int(j, "to_seq", &v) ||
	       g_int(j, "first_seq", &v) || g_int(j, "last_seq", &v) || !g_str(j, "model") ||
	       g_int(j, "input_tokens", &v) || g_int(j, "output_tokens", &v) ||
	       !json_is_number(json_object_get(j, "cost")) || g_int(j, "started_at", &v) || g_int(j, "ended_at", &v);
}

/* A schedule: its id, a due time, a cron spec that fits (the store's
 * limit) or null, and its text. */
static int check_schedule(json_t *j, int fv)
{
	int64_t v;
	json_t *cron = json_object_get(j, "cron");
	(void)fv;
	return !g_str(j, "id") || g_int(j, "due", &v) || v < 1 ||
	       !(json_is_null(cron) || (g_str(j, "cron") && json_string_length(cron) <= STORE_CRON_MAX)) ||
	       check_bytes(j, "text", 0);
}

/* The kinds of record line, in the order of the end line's counts; a kind
 * is known only in streams of the version that added it or later. */
#define CHECK_KINDS 7
static const struct {
	const char *kind;
	const char *count; /* its key in the end line */
	int since;
	int (*check)(json_t *j, int fv);
} check_kinds[CHECK_KINDS] = {
	{ "conv", "conversations", 1, check_conv },	    { "event", "events", 1, check_event },
	{ "summary", "summaries", 1, check_summary },	    { "tool_call", "tool_calls", 1, check_tool_call },
	{ "model_call", "model_calls", 1, check_model_call }, { "run", "runs", 2, check_run },
	{ "schedule", "schedules", 3, check_schedule },
};

/* The end line: each count is that of the lines before it (a count of a
 * kind added after version 1 may be absent from a version 1 end line). 0 or
 * -1 (err set). */
static int check_end(json_t *end, const long long n[CHECK_KINDS], int fv, unsigned long no, char *err, size_t errlen)
{
	for (int i = 0; i < CHECK_KINDS; i++) {
		const char *key = check_kinds[i].count;
		int64_t v;
		int since = check_kinds[i].since;
		if ((since > 1 ? g_int_since(end, key, fv, since, &v) : g_int(end, key, &v)) || v != n[i]) {
			snprintf(err, errlen, "line %lu: the end line's count of %s is not the %lld the stream holds", no,
				 key, n[i]);
			return -1;
		}
	}
	return 0;
}

/* One record line, counted into n; every kind but conv needs a conv line
 * before it. 0 or -1 (err set). */
static int check_record(const struct line *l, int fv, int *in_conv, long long n[CHECK_KINDS], char *err,
			size_t errlen)
{
	const char *k = l->kind;
	int bad = 1;
	if (k) {
		int i = 0;
		while (i < CHECK_KINDS && (strcmp(k, check_kinds[i].kind) || fv < check_kinds[i].since))
			i++;
		if (i == CHECK_KINDS) {
			snprintf(err, errlen, "line %lu: an unknown kind of record '%s'", l->no, k);
			return -1;
		}
		if (i == 0)
			*in_conv = 1;
		bad = !*in_conv || check_kinds[i].check(l->j, fv);
		n[i]++;
	}
	if (bad) {
		snprintf(err, errlen, "line %lu: a %s record with a missing or bad field%s", l->no, k ? k : "kindless",
			 *in_conv ? "" : " (or before any conversation)");
		return -1;
	}
	return 0;
}

/* Pass 1: every line well formed, in order, and the counts of the trailer
 * those of the lines. nconv gets the conversations. 0 or -1 (err set). */
static int check_stream(FILE *in, size_t *nconv, int *version, char *err, size_t errlen)
{
	struct line l = { 0 };
	char *buf = NULL;
	size_t cap = 0;
	int rc = -1, r;
	long long n[CHECK_KINDS] = { 0 };
	int ended = 0, in_conv = 0;
	if (check_header(in, &l, &buf, &cap, version, err, errlen))
		goto out;
	while ((r = next_line(in, &l, &buf, &cap, err, errlen)) == 0) {
		if (ended) {
			snprintf(err, errlen, "line %lu: a line after the end", l.no);
			goto out;
		}
		json_t *end = json_object_get(l.j, "end");
		if (end) {
			if (check_end(end, n, *version, l.no, err, errlen))
				goto out;
			ended = 1;
		} else if (check_record(&l, *version, &in_conv, n, err, errlen)) {
			goto out;
		}
	}
	if (r < 0)
		goto out;
	if (!ended) {
		snprintf(err, errlen, "the stream ends without its end line (truncated after line %lu)", l.no);
		goto out;
	}
	*nconv = (size_t)n[0];
	rc = 0;
out:
	json_decref(l.j);
	free(buf);
	return rc;
}

/* Pass 2 state: the conversation being written and what it gets last. */
struct imp {
	store *st;
	struct idlist done;  /* conversations written, for the rollback */
	char conv[STORE_ID_MAX + 1];
	json_t *head;        /* its conv line, applied last (status, usage, updated_at, fsm) */
	/* events sharing one inserted_at, appended in one transaction */
	struct store_event_in *ev;
	unsigned char **evmem;
	uint64_t *seq, *got;
	size_t nev, evcap;
	int64_t ev_at;
	char err[512];
};

static int begin(struct imp *im, int64_t at, store_txn **t)
{
	import_now = at;
	return store_txn_begin(im->st, STORE_WRITE, t);
}

static int commit_or_abort(store_txn *t, int e)
{
	if (e) {
		store_txn_abort(t);
		return e;
	}
	return store_txn_commit(t);
}

static void events_clear(struct imp *im)
{
	for (size_t i = 0; i < im->nev; i++) {
		free(im->evmem[i]);
		free((char *)im->ev[i].type);
		free((char *)im->ev[i].event_id);
	}
	im->nev = 0;
}

static int events_flush(struct imp *im)
{
	if (!im->nev)
		return 0;
	store_txn *t;
	int e = begin(im, im->ev_at, &t);
	if (!e) {
		e = store_events_append(t, im->conv, im->ev, im->nev, im->got, NULL);
		for (size_t i = 0; !e && i < im->nev; i++)
			if (im->got[i] != im->seq[i]) {
				snprintf(im->err, sizeof im->err, "conversation %s: event seq %llu in the stream is seq %llu "
					 "in the store (a gap or a repeated event_id)", im->conv,
					 (unsigned long long)im->seq[i], (unsigned long long)im->got[i]);
				e = STORE_E_INVAL;
			}
		e = commit_or_abort(t, e);
	}
	events_clear(im);
	return e;
}

static int event_add(struct imp *im, json_t *j)
{
	int64_t at = 0, seq = 0;
	g_int(j, "inserted_at", &at);
	g_int(j, "seq", &seq);
	if (im->nev && at != im->ev_at) {
		int e = events_flush(im);
		if (e)
			return e;
	}
	if (im->nev == im->evcap) {
		size_t cap = im->evcap ? im->evcap * 2 : 64;
		void *a = realloc(im->ev, cap * sizeof *im->ev), *b = realloc(im->evmem, cap * sizeof *im->evmem);
		if (a)
			im->ev = a;
		if (b)
			im->evmem = b;
		void *c = realloc(im->seq, cap * sizeof *im->seq), *d = realloc(im->got, cap * sizeof *im->got);
		if (c)
			im->seq = c;
		if (d)
			im->got = d;
		if (!a || !b || !c || !d)
			return -ENOMEM;
		im->evcap = cap;
	}
	size_t i = im->nev;
	store_bytes content;
	/* Checked in the first pass: a failure now is out of memory. */
	if (g_bytes(j, "content", 0, &content, &im->evmem[i]))
		return -ENOMEM;
	const char *eid = g_str(j, "event_id");
	im->ev[i] = (struct store_event_in){ strdup(g_str(j, "type")), content, eid ? strdup(eid) : NULL };
	im->seq[i] = (uint64_t)seq;
	im->ev_at = at;
	im->nev++;
	return im->ev[i].type && (!eid || im->ev[i].event_id) ? 0 : -ENOMEM;
}

/* The conversation's record as the stream has it: status, usage, fsm, at
 * its updated_at. */
static int conv_finish(struct imp *im)
{
	int e = events_flush(im);
	if (e || !im->head)
		return e;
	json_t *h = im->head;
	int64_t at = 0, in_tok = 0, out_tok = 0, turns = 0;
	g_int(h, "turns", &turns); /* absent from a version 1 stream: 0 */
	g_int(h, "updated_at", &at);
	g_int(h, "input_tokens", &in_tok);
	g_int(h, "output_tokens", &out_tok);
	struct store_usage u = { (uint64_t)in_tok, (uint64_t)out_tok, json_number_value(json_object_get(h, "cost")) };
	const char *status = g_str(h, "status");
	store_bytes fsm, meta;
	unsigned char *mem, *meta_mem;
	/* Checked in the first pass: a failure now is out of memory. */
	if (g_bytes(h, "fsm", 1, &fsm, &mem) | g_bytes(h, "metadata", 1, &meta, &meta_mem)) {
		free(mem);
		free(meta_mem);
		return -ENOMEM;
	}
	struct store_conv_patch p = { .set = STORE_SET_STATUS | (fsm.len ? STORE_SET_FSM : 0) |
					     (meta.len ? STORE_SET_METADATA : 0),
				      .status = store_status_parse(status, strlen(status)), .fsm_state = fsm,
				      .metadata = meta };
	store_txn *t;
	if (!(e = begin(im, at, &t))) {
		if (u.input_tokens || u.output_tokens || u.cost != 0)
			e = store_usage_add(t, im->conv, &u);
		if (!e && turns > 0)
			e = store_turns_add(t, im->conv, (uint64_t)turns);
		e = commit_or_abort(t, e ? e : store_conv_put(t, im->conv, &p));
	}
	free(mem);
	free(meta_mem);
	json_decref(im->head);
	im->head = NULL;
	return e;
}

static int conv_start(struct imp *im, json_t *j)
{
	int e = conv_finish(im);
	if (e)
		return e;
	snprintf(im->conv, sizeof im->conv, "%s", g_str(j, "id"));
	int64_t at = 0;
	g_int(j, "created_at", &at);
	store_bytes settings;
	unsigned char *mem;
	if (g_bytes(j, "settings", 0, &settings, &mem))
		return -ENOMEM; /* checked in the first pass */
	int64_t first = 1;
	g_int(j, "first_seq", &first); /* absent: the log begins at 1 */
	store_txn *t;
	if (!(e = begin(im, at, &t)))
		e = commit_or_abort(t, store_conv_create_at(t, im->conv, settings, (uint64_t)first));
	free(mem);
	if (e == STORE_E_CONFLICT)
		snprintf(im->err, sizeof im->err, "conversation %s is in the stream twice", im->conv);
	if (!e) {
		if ((e = collect(&im->done, im->conv, strlen(im->conv))))
			return e;
		im->head = json_incref(j);
	}
	return e;
}

static int summary_put(struct imp *im, json_t *j)
{
	int64_t from = 0, to = 0, version = 0, at = 0;
	g_int(j, "from_seq", &from);
	g_int(j, "to_seq", &to);
	g_int(j, "version", &version);
	g_int(j, "inserted_at", &at);
	store_bytes content;
	unsigned char *mem;
	if (g_bytes(j, "content", 0, &content, &mem))
		return -ENOMEM; /* checked in the first pass */
	store_txn *t;
	struct store_summary sm = { (uint64_t)from, (uint64_t)to, content, (uint64_t)version, at };
	int e = events_flush(im);
	if (!e && !(e = begin(im, at, &t)))
		e = commit_or_abort(t, store_summary_restore(t, im->conv, &sm));
	if (e == STORE_E_CONFLICT)
		snprintf(im->err, sizeof im->err, "conversation %s: summary version %lld is in the stream twice",
			 im->conv, (long long)version);
	free(mem);
	return e;
}

static int tool_call_put(struct imp *im, json_t *j)
{
	int64_t at = 0, resolved_at = 0, deadline = 0, attempts = 0, warn = 0;
	g_int(j, "warn_at", &warn); /* absent from a version 1 stream: none */
	g_int(j, "inserted_at", &at);
	g_int(j, "resolved_at", &resolved_at);
	g_int(j, "deadline", &deadline);
	g_int(j, "attempts", &attempts);
	const char *id = g_str(j, "id"), *st = g_str(j, "status");
	int status = store_tc_status_parse(st, strlen(st));
	store_bytes args, prompt, result;
	unsigned char *m1, *m2 = NULL, *m3 = NULL;
	/* Checked in the first pass: a failure now is out of memory. */
	if (g_bytes(j, "args", 0, &args, &m1) | g_bytes(j, "prompt", 1, &prompt, &m2) |
	    g_bytes(j, "result", 1, &result, &m3)) {
		free(m1);
		free(m2);
		free(m3);
		return -ENOMEM;
	}
	struct store_tool_call_in in = { id, g_str(j, "name"),
					 strcmp(g_str(j, "executor"), "human") ? STORE_EXEC_SERVER : STORE_EXEC_HUMAN, args,
					 prompt };
	store_txn *t;
	int e = events_flush(im);
	if (!e && !(e = begin(im, at, &t))) {
		e = store_tool_call_upsert(t, im->conv, &in);
		uint32_t n;
		for (int64_t i = 0; !e && i < attempts; i++)
			e = store_tool_call_attempt(t, id, &n);
		if (!e && status == STORE_TC_PENDING && deadline)
			e = store_expiry_schedule(t, id, deadline);
		if (!e && status == STORE_TC_PENDING && warn > 0)
			e = store_warning_schedule(t, id, warn);
		e = commit_or_abort(t, e);
	}
	if (!e && status == STORE_TC_UNKNOWN && !(e = begin(im, at, &t)))
		e = commit_or_abort(t, store_tool_call_unknown(t, id, 1));
	else if (!e && status != STORE_TC_PENDING && !(e = begin(im, resolved_at, &t)))
		e = commit_or_abort(t, store_tool_call_resolve(t, id, status, result, NULL));
	if (e == STORE_E_CONFLICT)
		snprintf(im->err, sizeof im->err, "tool call %s is in the stream twice", id);
	free(m1);
	free(m2);
	free(m3);
	return e;
}

static int model_call_put(struct imp *im, json_t *j)
{
	int64_t ref = 0, in_tok = 0, out_tok = 0, latency = 0, sv = 0, at = 0;
	g_int(j, "turn_ref", &ref);
	g_int(j, "input_tokens", &in_tok);
	g_int(j, "output_tokens", &out_tok);
	g_int(j, "latency_ms", &latency);
	g_int(j, "summary_version", &sv);
	g_int(j, "inserted_at", &at);
	store_bytes rendered;
	unsigned char *mem;
	if (g_bytes(j, "rendered", 0, &rendered, &mem))
		return -ENOMEM; /* checked in the first pass */
	struct store_model_call_in mc = { (uint64_t)ref, rendered, g_str(j, "model"),
					  { (uint64_t)in_tok, (uint64_t)out_tok,
					    json_number_value(json_object_get(j, "cost")) },
					  (uint64_t)latency, (uint64_t)sv };
	store_txn *t;
	int e = events_flush(im);
	if (!e && !(e = begin(im, at, &t)))
		e = commit_or_abort(t, store_model_call_put(t, im->conv, &mc));
	free(mem);
	return e;
}

static int run_put(struct imp *im, json_t *j)
{
	int64_t id = 0, attempt = 0, from = 0, to = 0, first = 0, last = 0, in_tok = 0, out_tok = 0, started = 0,
		ended = 0;
	g_int(j, "id", &id);
	g_int(j, "attempt", &attempt);
	g_int(j, "from_seq", &from);
	g_int(j, "to_seq", &to);
	g_int(j, "first_seq", &first);
	g_int(j, "last_seq", &last);
	g_int(j, "input_tokens", &in_tok);
	g_int(j, "output_tokens", &out_tok);
	g_int(j, "started_at", &started);
	g_int(j, "ended_at", &ended);
	const char *model = g_str(j, "model");
	struct store_run r = { (uint64_t)id, run_status_parse(g_str(j, "status")), (uint32_t)attempt, (uint64_t)from,
			       (uint64_t)to, (uint64_t)first, (uint64_t)last, { model, strlen(model) },
			       { (uint64_t)in_tok, (uint64_t)out_tok, json_number_value(json_object_get(j, "cost")) },
			       started, ended };
	store_txn *t;
	int e = events_flush(im);
	if (!e && !(e = begin(im, started, &t)))
		e = commit_or_abort(t, store_run_put(t, im->conv, &r));
	return e;
}

static int schedule_put(struct imp *im, json_t *j)
{
	int64_t due = 0;
	g_int(j, "due", &due);
	store_bytes text;
	unsigned char *mem;
	if (g_bytes(j, "text", 0, &text, &mem))
		return -ENOMEM; /* checked in the first pass */
	store_txn *t;
	int e = events_flush(im);
	if (!e && !(e = begin(im, due, &t)))
		e = commit_or_abort(t, store_schedule_put(t, g_str(j, "id"), im->conv, due, g_str(j, "cron"), text));
	free(mem);
	return e;
}

static int count_any(void *arg, const char *id, size_t len)
{
	(void)id;
	(void)len;
	++*(size_t *)arg;
	return 1; /* one is enough */
}

static int count_tc(void *arg, const struct store_tool_call *tc)
{
	(void)tc;
	++*(size_t *)arg;
	return 1;
}

/* Remove every conversation written: the store is empty again. */
static void rollback(struct imp *im)
{
	for (size_t i = 0; i < im->done.n; i++) {
		store_txn *t;
		if (store_txn_begin(im->st, STORE_WRITE, &t) == 0)
			commit_or_abort(t, store_conv_delete(t, im->done.id[i]));
	}
}

/* Import loads into an empty store only: 0 when it is, else 1 (not empty)
 * or -1 (cannot read), said on stderr. */
static int import_check_empty(store *st, const char *shown)
{
	store_txn *t;
	size_t nc = 0, ntc = 0;
	int e;
	if ((e = store_txn_begin(st, STORE_READ, &t)) == 0) {
		if ((e = store_conv_ids(t, count_any, &nc)) == 1)
			e = 0;
		if (!e && (e = store_tool_calls_each(t, count_tc, &ntc)) == 1)
			e = 0;
		store_txn_abort(t);
	}
	if (e) {
		fprintf(stderr, "agentd import: reading %s: %s\n", shown, store_strerror(e));
		return e;
	}
	if (nc || ntc) {
		fprintf(stderr, "agentd import: the store %s is not empty: import loads into an empty store only; "
			"nothing was written\n", shown);
		return -ENOTEMPTY;
	}
	return 0;
}

/* Pass 2: write the checked stream, record by record, then flush the
 * store. 0, or an error with im->err set. */
static int import_records(struct imp *im, FILE *in, size_t nconv, FILE *progress)
{
	char err[512];
	struct line l = { 0 };
	char *buf = NULL;
	size_t cap = 0, done = 0;
	int e = 0, r = 0;
	rewind(in);
	next_line(in, &l, &buf, &cap, err, sizeof err); /* the header, checked */
	while (!e && (r = next_line(in, &l, &buf, &cap, err, sizeof err)) == 0) {
		if (json_object_get(l.j, "end"))
			break;
		const char *k = l.kind;
		if (!strcmp(k, "conv")) {
			e = conv_start(im, l.j);
			if (!e && progress && ++done % PROGRESS_EVERY == 0)
				fprintf(progress, "agentd import: %zu of %zu conversations\n", done, nconv);
		} else if (!strcmp(k, "event")) {
			e = event_add(im, l.j);
		} else if (!strcmp(k, "summary")) {
			e = summary_put(im, l.j);
		} else if (!strcmp(k, "tool_call")) {
			e = tool_call_put(im, l.j);
		} else if (!strcmp(k, "run")) {
			e = run_put(im, l.j);
		} else if (!strcmp(k, "schedule")) {
			e = schedule_put(im, l.j);
		} else {
			e = model_call_put(im, l.j);
		}
		if (e && !im->err[0])
			snprintf(im->err, sizeof im->err, "line %lu (%s of conversation %s): %s", l.no, k, im->conv,
				 store_strerror(e));
	}
	/* A line checked in the first pass that cannot be read now (out of
	 * memory): never taken for the end of the stream. */
	if (!e && r < 0) {
		e = -EIO;
		snprintf(im->err, sizeof im->err, "%s", err);
	}
	if (!e && (e = conv_finish(im)) && !im->err[0])
		snprintf(im->err, sizeof im->err, "conversation %s: %s", im->conv, store_strerror(e));
	if (!e && (e = store_sync(im->st)))
		snprintf(im->err, sizeof im->err, "flushing the store: %s", store_strerror(e));
	json_decref(l.j);
	free(buf);
	events_clear(im);
	json_decref(im->head);
	im->head = NULL;
	return e;
}

int transfer_import(const char *target, FILE *in, const char *in_name, FILE *progress)
{
	char err[512];
	size_t nconv = 0;
	int version = 0;
	struct stat sb;
	if (fstat(fileno(in), &sb) || !S_ISREG(sb.st_mode)) {
		fprintf(stderr, "agentd import: %s is not a regular file (it is read twice: checked whole first)\n",
			in_name);
		return -EINVAL;
	}
	if (check_stream(in, &nconv, &version, err, sizeof err)) {
		fprintf(stderr, "agentd import: %s: %s; nothing was written\n", in_name, err);
		return -EINVAL;
	}
	if (!config_store_is_pg(target) && mkdir(target, 0700) < 0 && errno != EEXIST) {
		int me = -errno;
		fprintf(stderr, "agentd import: cannot create %s: %s\n", target, strerror(-me));
		return me;
	}
	struct imp im = { 0 };
	struct store_opts so = { .sync = STORE_SYNC_NONE, .audit = 1, .clock = import_clock };
	int e = store_open(&im.st, target, &so);
	if (e) {
		say_open_failure("import", target, e);
		return e;
	}
	char *shown = config_store_shown(target);
	int rc = import_check_empty(im.st, shown);
	if (rc)
		goto out;
	if ((rc = import_records(&im, in, nconv, progress)) != 0) {
		fprintf(stderr, "agentd import: %s: %s; removing the %zu conversation(s) written\n", in_name, im.err,
			im.done.n);
		rollback(&im);
		store_sync(im.st);
		goto out;
	}
	if (progress)
		fprintf(progress, "agentd import: %zu conversations into %s\n", nconv, shown);
	rc = 0;
out:
	free(im.ev);
	free(im.evmem);
	free(im.seq);
	free(im.got);
	free(im.done.id);
	free(shown);
	store_close(im.st);
	return rc;
}
