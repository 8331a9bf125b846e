/*
 * check_alloc.c: every allocation checked, proved by failing each one in turn.
 *
 * This runner is linked with -Wl,--wrap for malloc, calloc, realloc, free,
 * strdup, strndup and asprintf (and glibc's fortified __asprintf_chk), so
 * every call the modules under test make goes through the injector below;
 * jansson's own allocations come through jsonmp_alloc_init's counter, whose
 * malloc is wrapped too. For each
 * operation, run n = 1, 2, ... fails the n-th allocation it makes, until a
 * run makes fewer than n (it then must succeed, with the result a run
 * without failures gives). Each failed run must report the failure the
 * module's contract names (NULL, -1, -ENOMEM, PERR_INTERNAL), never a
 * success and never a wrong answer, and must leave nothing allocated once
 * the caller has freed what the contract says it owns: every block allocated
 * during the run and not freed is a leak, found here without a leak checker
 * (ASan's runs it too, in the sanitizer build).
 *
 * The modules: JSON <-> msgpack (common/jsonmp.c), the control codec
 * (ipc/proto.c, a batch send too, and the out-of-memory reply line), the tail decision, event and run JSON,
 * forking a conversation and settling a call of an ended one (conv/, in a
 * write transaction of a real store, aborted after each run), command
 * lines and the configuration (common/); in the worker, the model's request
 * (agent/render.c, and the HTTP APIs' bodies in agent/model*.c), the
 * echo model, and the model's reply (an exec model's output, agent/protocol.c;
 * an HTTP model's streamed events).
 */

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/model.h"
#include "agent/protocol.h"
#include "agent/render.h"
#include "common/cmdline.h"
#include "common/config.h"
#include "common/jsonmp.h"
#include "conv/conv.h"
#include "ipc/proto.h"
#include "store/store.h"

/* ---- the injector ----------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_asprintf(char **out, const char *fmt, ...);
int __wrap___asprintf_chk(char **out, int flag, const char *fmt, ...);

#define LIVE_MAX 65536

static struct {
	int armed;          /* count, fail and track only inside run() */
	long n, fail_at;    /* allocations made in this run; the one to fail (0: none) */
	int failed;         /* the fail_at-th came and was failed */
	void *live[LIVE_MAX]; /* blocks allocated in this run and not freed yet */
	size_t nlive;
} I;

static int inject(void)
{
	if (!I.armed)
		return 0;
	if (++I.n != I.fail_at)
		return 0;
	I.failed = 1;
	errno = ENOMEM;
	return 1;
}

static void track(void *p)
{
	if (!I.armed || !p)
		return;
	if (I.nlive == LIVE_MAX) {
		fprintf(stderr, "check_alloc: too many live blocks to track\n");
		abort();
	}
	I.live[I.nlive++] = p;
}

/* Check is linked in statically, so its own allocations (an assertion
 * records where it was) come through the wrappers too: inside an operation,
 * assert with the injector paused. */
#define PAUSED(stmt)                        \
	do {                                \
		int armed_ = I.armed;       \
		I.armed = 0;                \
		stmt;                       \
		I.armed = armed_;           \
	} while (0)

/* Forget p (a block from before the run is not ours: ignored). 1: it was tracked. */
static int untrack(void *p)
{
	for (size_t i = I.nlive; p && i-- > 0;)
		if (I.live[i] == p) {
			I.live[i] = I.live[--I.nlive];
			return 1;
		}
	return 0;
}

void *__wrap_malloc(size_t n)
{
	if (inject())
		return NULL;
	void *p = __real_malloc(n);
	track(p);
	return p;
}

void *__wrap_calloc(size_t k, size_t n)
{
	if (inject())
		return NULL;
	void *p = __real_calloc(k, n);
	track(p);
	return p;
}

void *__wrap_realloc(void *p, size_t n)
{
	if (inject())
		return NULL; /* p stays the caller's, as realloc leaves it */
	int ours = untrack(p);
	void *q = __real_realloc(p, n);
	if (!q && ours)
		track(p);
	else if (q && (ours || !p))
		track(q);
	return q;
}

void __wrap_free(void *p)
{
	untrack(p);
	__real_free(p);
}

char *__wrap_strdup(const char *s)
{
	if (inject())
		return NULL;
	char *p = __real_strdup(s);
	track(p);
	return p;
}

char *__wrap_strndup(const char *s, size_t n)
{
	if (inject())
		return NULL;
	char *p = __real_strndup(s, n);
	track(p);
	return p;
}

static int vasprintf_tracked(char **out, const char *fmt, va_list ap)
{
	if (inject())
		return -1; /* *out undefined, as glibc documents */
	int r = vasprintf(out, fmt, ap);
	if (r >= 0)
		track(*out);
	return r;
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf_tracked(out, fmt, ap);
	va_end(ap);
	return r;
}

int __wrap___asprintf_chk(char **out, int flag, const char *fmt, ...)
{
	(void)flag;
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf_tracked(out, fmt, ap);
	va_end(ap);
	return r;
}

/* One operation under injection: returns 0 when it reported success. */
typedef int op_fn(void *arg);

/* Run op with the fail_at-th allocation failed (0: none). Returns op's result;
 * *failed says whether an allocation was failed. Anything the run left
 * allocated fails the test. */
static int run(op_fn *op, void *arg, long fail_at, int *failed, const char *name)
{
	I.n = 0;
	I.fail_at = fail_at;
	I.failed = 0;
	I.nlive = 0;
	I.armed = 1;
	int r = op(arg);
	I.armed = 0;
	*failed = I.failed;
	ck_assert_msg(I.nlive == 0, "%s: %zu block(s) leaked with allocation %ld failed", name, I.nlive, fail_at);
	return r;
}

/* Fail each allocation of op in turn: each such run must fail; the first
 * run that makes fewer allocations must succeed. Returns how many
 * allocations a whole run makes. */
static long each_failure(op_fn *op, void *arg, const char *name)
{
	int failed;
	ck_assert_msg(run(op, arg, 0, &failed, name) == 0, "%s fails without any failed allocation", name);
	long total = I.n;
	ck_assert_msg(total > 0, "%s allocates nothing: the injector does not reach it", name);
	for (long k = 1; k <= total; k++) {
		int r = run(op, arg, k, &failed, name);
		ck_assert_msg(failed, "%s: run %ld made only %ld allocations", name, k, I.n);
		ck_assert_msg(r != 0, "%s reported success with allocation %ld of %ld failed", name, k, total);
	}
	return total;
}

/* ---- the operations ----------------------------------------------------- */

static const char *const sample =
	"{\"text\": \"hello\", \"n\": [1, 2.5, -3, true, false, null, {\"deep\": [\"x\", {\"y\": \"z\"}]}],"
	" \"empty\": {}, \"none\": [], \"k\": \"\\u00e9t\\u00e9\"}";

static json_t *sample_json(void)
{
	json_t *v = json_loads(sample, 0, NULL);
	ck_assert_ptr_nonnull(v);
	return v;
}

struct pack_arg {
	json_t *v;
	unsigned char want[512]; /* the bytes a run without failures packs */
	size_t wantlen;
};

/* The packing must report a failed append: a header or key lost would
 * leave bytes that decode as something else. */
static int op_pack(void *arg)
{
	struct pack_arg *a = arg;
	struct jsonmp_buf b;
	jsonmp_buf_init(&b);
	int r = jsonmp_pack(&b.pk, a->v);
	if (r)
		PAUSED(ck_assert_int_eq(r, -ENOMEM)); /* not "too deep": the client's fault */
	if (r == 0 && a->wantlen)
		PAUSED(ck_assert_msg(b.sb.size == a->wantlen && !memcmp(b.sb.data, a->want, a->wantlen),
			      "jsonmp_pack: other bytes than a run without failures"));
	if (r == 0 && !a->wantlen && b.sb.size <= sizeof a->want) {
		memcpy(a->want, b.sb.data, b.sb.size);
		a->wantlen = b.sb.size;
	}
	jsonmp_buf_destroy(&b);
	return r;
}

START_TEST(jsonmp_pack_each_failure)
{
	struct pack_arg a = { .v = sample_json() };
	each_failure(op_pack, &a, "jsonmp_pack");
	ck_assert_uint_gt(a.wantlen, 0);
	json_decref(a.v);
	/* Too deep is the other error. */
	json_t *deep = json_array();
	for (int i = 0; i < JSONMP_MAX_DEPTH + 1; i++)
		deep = json_pack("[o]", deep);
	struct jsonmp_buf b;
	jsonmp_buf_init(&b);
	ck_assert_int_eq(jsonmp_pack(&b.pk, deep), -EINVAL);
	jsonmp_buf_destroy(&b);
	json_decref(deep);
}
END_TEST

static int op_unpack(void *arg)
{
	struct pack_arg *a = arg;
	json_t *v = jsonmp_unpack(a->want, a->wantlen);
	if (!v)
		return -1;
	PAUSED(ck_assert_msg(json_equal(v, a->v), "jsonmp_unpack: another value than was packed (allocation %ld failed)",
			     I.fail_at));
	json_decref(v);
	return 0;
}

START_TEST(jsonmp_unpack_each_failure)
{
	struct pack_arg a = { .v = sample_json() };
	ck_assert_int_eq(op_pack(&a), 0);
	each_failure(op_unpack, &a, "jsonmp_unpack");
	json_decref(a.v);
}
END_TEST

static int names_any(void *arg, const char *n)
{
	(void)arg;
	(void)n;
	return 1;
}

/* A request that cannot be parsed for want of memory is agentd's fault
 * (internal), never the client's (bad_request), and never a request read
 * with a byte left out (jansson's lexer drops one when its buffer cannot
 * grow: jsonmp_loadb sees it). */
static int op_parse(void *arg)
{
	const char *line = arg;
	struct proto_names names = { .model_ok = names_any, .tool_ok = names_any };
	struct request rq;
	char msg[200];
	int e = proto_parse(line, strlen(line), &names, &rq, msg, sizeof msg);
	if (e) {
		PAUSED(ck_assert_msg(e == PERR_INTERNAL && !strcmp(msg, "out of memory"),
				     "proto_parse with allocation %ld failed answered %s: %s", I.fail_at,
				     proto_err_code(e), msg));
	} else {
		PAUSED(ck_assert_msg(json_is_string(json_object_get(rq.content, "text")) &&
				     !strcmp(json_string_value(json_object_get(rq.content, "text")),
					     "hi there, a text past sixteen bytes"),
				     "proto_parse with allocation %ld failed: content %s", I.fail_at,
				     json_dumps(rq.content, 0)));
	}
	proto_request_free(&rq);
	return e;
}

START_TEST(proto_parse_each_failure)
{
	char line[] = "{\"op\":\"send\",\"id\":[1,{\"a\":\"b\"}],\"conversation\":\"c-1\","
		      "\"content\":\"hi there, a text past sixteen bytes\",\"event_id\":\"e-1\"}";
	each_failure(op_parse, line, "proto_parse");
}
END_TEST

static int op_lines(void *arg)
{
	(void)arg;
	size_t len = 0;
	json_t *id = json_pack("[is]", 7, "x");
	if (!id)
		return -1;
	char *e = proto_error_line(id, PERR_NOT_FOUND, "conversation 'x' not found", &len);
	json_t *fields = e ? json_pack("{sI}", "seq", (json_int_t)3) : NULL; /* NULL would mean {} */
	char *o = fields ? proto_ok_line(id, fields, &len) : NULL;
	json_decref(id);
	if (e)
		PAUSED(ck_assert_str_eq(e, "{\"id\":[7,\"x\"],\"ok\":false,\"error\":\"not_found\","
				    "\"message\":\"conversation 'x' not found\"}\n"));
	if (o)
		PAUSED(ck_assert_str_eq(o, "{\"seq\":3,\"id\":[7,\"x\"],\"ok\":true}\n"));
	int r = e && o ? 0 : -1;
	free(e);
	free(o);
	return r;
}

START_TEST(proto_lines_each_failure)
{
	each_failure(op_lines, NULL, "proto_error_line/proto_ok_line");
}
END_TEST

/* The out-of-memory line is made when the request is parsed (control.c's
 * slot_new): its failures are the parse's, -ENOMEM and nothing made; once
 * made, it is proto_error_line's "out of memory" reply byte for byte, the
 * id in it, whether it fits the caller's buffer or not. */
struct oom_arg {
	json_t *id;
	size_t cap;   /* the caller's buffer: 128, as a slot's, or too small */
	char want[512];
};

static int op_oom_line(void *arg)
{
	struct oom_arg *a = arg;
	char buf[128], *line = NULL;
	size_t len = 7;
	int r = proto_oom_line(a->id, buf, a->cap, &line, &len);
	if (r) {
		PAUSED(ck_assert_int_eq(r, -ENOMEM));
		PAUSED(ck_assert_ptr_null(line));
		return r;
	}
	PAUSED(ck_assert_uint_eq(len, strlen(a->want)));
	PAUSED(ck_assert_msg(!memcmp(line, a->want, len), "proto_oom_line: %.*s", (int)len, line));
	PAUSED(ck_assert_msg((line == buf) == (len <= a->cap), "proto_oom_line: buffer used %d for %zu bytes",
			     line == buf, len));
	if (line != buf)
		free(line);
	return 0;
}

START_TEST(proto_oom_line_each_failure)
{
	const char *ids[] = { "7", "\"r-1\"", "[7,{\"a\":\"b\\u00e9\"}]",
			      "\"a long id, past what a slot keeps in place: 0123456789abcdef0123456789abcdef\"" };
	for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
		for (size_t cap = 16; cap <= 128; cap += 112) {
			struct oom_arg a = { json_loads(ids[i], JSON_DECODE_ANY, NULL), cap, { 0 } };
			ck_assert_ptr_nonnull(a.id);
			size_t len;
			char *e = proto_error_line(a.id, PERR_INTERNAL, "out of memory", &len);
			ck_assert_ptr_nonnull(e);
			ck_assert_uint_lt(len, sizeof a.want);
			memcpy(a.want, e, len + 1);
			free(e);
			each_failure(op_oom_line, &a, "proto_oom_line");
			json_decref(a.id);
		}
	/* No id: nothing to render, nothing allocated. */
	char buf[128], *line;
	size_t len;
	ck_assert_int_eq(proto_oom_line(NULL, buf, sizeof buf, &line, &len), 0);
	ck_assert_ptr_eq(line, buf);
	ck_assert_uint_eq(len, strlen("{\"ok\":false,\"error\":\"internal\",\"message\":\"out of memory\"}\n"));
	ck_assert(!memcmp(line, "{\"ok\":false,\"error\":\"internal\",\"message\":\"out of memory\"}\n", len));
}
END_TEST

/* Ten calls (past jansson's first array growth), nine settled. */
static int op_tail(void *arg)
{
	struct tail t;
	int e = tail_decide(arg, 0, &t);
	if (e) {
		PAUSED(ck_assert_int_eq(e, -ENOMEM)); /* never taken for a malformed record */
		return -1;
	}
	PAUSED(ck_assert_int_eq(t.action, TAIL_TOOLS));
	PAUSED(ck_assert_uint_eq(json_array_size(t.calls), 10));
	PAUSED(ck_assert_uint_eq(json_array_size(t.settled), 9));
	PAUSED(ck_assert_uint_eq(json_array_size(t.unsettled), 1));
	PAUSED(ck_assert_str_eq(json_string_value(json_object_get(json_array_get(t.unsettled, 0), "tool_call_id")),
				"k10"));
	tail_free(&t);
	return 0;
}

START_TEST(tail_decide_each_failure)
{
	json_t *events = json_pack("[{sIsss{ss}}{sIsss{sssI}}]", "seq", (json_int_t)1, "type", "user_msg", "content",
				   "text", "go", "seq", (json_int_t)2, "type", "assistant_msg", "content", "text", "",
				   "context_seq", (json_int_t)1);
	ck_assert_ptr_nonnull(events);
	json_int_t seq = 3;
	for (int k = 1; k <= 10; k++) {
		char id[8];
		snprintf(id, sizeof id, "k%d", k);
		ck_assert_int_eq(json_array_append_new(events, json_pack("{sIsss{ssss}}", "seq", seq++, "type", "tool_call",
									 "content", "tool_call_id", id, "name", "a")),
				 0);
	}
	for (int k = 1; k <= 9; k++) {
		char id[8];
		snprintf(id, sizeof id, "k%d", k);
		ck_assert_int_eq(json_array_append_new(events, json_pack("{sIsss{sssi}}", "seq", seq++, "type",
									 "tool_result", "content", "tool_call_id", id,
									 "result", k)),
				 0);
	}
	each_failure(op_tail, events, "tail_decide");
	json_decref(events);
}
END_TEST

static int op_event_json(void *arg)
{
	const struct store_event *ev = arg;
	json_t *o = conv_event_json(ev);
	if (!o)
		return -1;
	PAUSED(ck_assert_str_eq(json_string_value(json_object_get(o, "event_id")), "e-9"));
	PAUSED(ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "content"), "text")), "hello"));
	json_decref(o);
	return 0;
}

START_TEST(conv_event_json_each_failure)
{
	struct pack_arg a = { .v = sample_json() };
	ck_assert_int_eq(op_pack(&a), 0);
	struct store_event ev = { 9, { "user_msg", 8 }, { a.want, a.wantlen }, { "e-9", 3 }, 1700000000000 };
	each_failure(op_event_json, &ev, "conv_event_json");
	json_decref(a.v);
}
END_TEST

static int op_cmdline(void *arg)
{
	char **v = NULL;
	int e = cmdline_split(arg, &v);
	if (e) {
		PAUSED(ck_assert_int_eq(e, -ENOMEM));
		PAUSED(ck_assert_ptr_null(v));
		return e;
	}
	PAUSED(ck_assert_str_eq(v[0], "python3"));
	PAUSED(ck_assert_str_eq(v[2], "a b"));
	PAUSED(ck_assert_ptr_null(v[9]));
	cmdline_free(v);
	return 0;
}

START_TEST(cmdline_each_failure)
{
	char line[] = "python3 -c 'a b' 1 2 3 4 5 6";
	each_failure(op_cmdline, line, "cmdline_split");
}
END_TEST

/* A configuration that cannot be loaded for want of memory is refused
 * (never one with a model or a key quietly missing), and config_free
 * frees whatever it holds. */
static int op_config(void *arg)
{
	struct config c;
	char err[300] = "";
	int r = config_init(&c);
	if (!r)
		r = config_load(&c, arg, err, sizeof err);
	if (!r) {
		PAUSED(ck_assert_ptr_nonnull(config_model(&c, "m1")));
		PAUSED(ck_assert_ptr_nonnull(config_model(&c, "m2")));
		const struct tool_cfg *t = config_tool(&c, "approve");
		PAUSED(ck_assert_ptr_nonnull(t));
		PAUSED(ck_assert_str_eq(t->prompt, "Approve?"));
		PAUSED(ck_assert_ptr_nonnull(config_tool(&c, "add")));
	}
	config_free(&c);
	return r;
}

START_TEST(config_each_failure)
{
	char path[] = "/tmp/agentd-check-alloc-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	static const char text[] = "[agentd]\nidle_timeout = 30s\n"
				   "[model.m1]\ncommand = python3 m1.py --flag 'two words'\n"
				   "[model.m2]\ncommand = /bin/true\nenv = HOME LANG\n"
				   "[tool.approve]\nexecutor = human\n"
				   "[tool.add]\nexecutor = server\ncommand = python3 add.py\n";
	ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
	close(fd);
	each_failure(op_config, path, "config_load");
	unlink(path);
}
END_TEST

/* A batch send: each event's content and event_id, or internal "out of
 * memory" (never an empty message, never the client's fault). */
static int op_parse_batch(void *arg)
{
	const char *line = arg;
	struct proto_names names = { .model_ok = names_any, .tool_ok = names_any };
	struct request rq;
	char msg[200];
	int e = proto_parse(line, strlen(line), &names, &rq, msg, sizeof msg);
	if (e) {
		PAUSED(ck_assert_msg(e == PERR_INTERNAL && !strcmp(msg, "out of memory"),
				     "proto_parse (batch) with allocation %ld failed answered %s: '%s'", I.fail_at,
				     proto_err_code(e), msg));
	} else {
		PAUSED(ck_assert_uint_eq(json_array_size(rq.events), 3));
		PAUSED(ck_assert_str_eq(json_string_value(json_object_get(json_array_get(rq.events, 2), "event_id")),
					"e-3"));
		PAUSED(ck_assert_str_eq(json_string_value(json_object_get(
						json_object_get(json_array_get(rq.events, 0), "content"), "text")),
					"hi there, a text past sixteen bytes"));
	}
	proto_request_free(&rq);
	return e;
}

START_TEST(proto_parse_batch_each_failure)
{
	char line[] = "{\"op\":\"send\",\"id\":2,\"conversation\":\"c-1\",\"events\":["
		      "{\"content\":\"hi there, a text past sixteen bytes\",\"event_id\":\"e-1\"},"
		      "{\"content\":{\"text\":\"two\"},\"event_id\":\"e-2\"},"
		      "{\"content\":\"three\",\"event_id\":\"e-3\"}]}";
	each_failure(op_parse_batch, line, "proto_parse (batch)");
}
END_TEST

/* A run as the protocol shows it: every field, or NULL. */
static int op_run_json(void *arg)
{
	json_t *o = conv_run_json(arg);
	if (!o)
		return -1;
	PAUSED(ck_assert_int_eq(json_integer_value(json_object_get(o, "first_seq")), 3));
	PAUSED(ck_assert_int_eq(json_integer_value(json_object_get(o, "last_seq")), 5));
	PAUSED(ck_assert_int_eq(json_integer_value(json_object_get(o, "ended_at")), 1700000000500));
	PAUSED(ck_assert_str_eq(json_string_value(json_object_get(o, "model")), "m"));
	json_decref(o);
	return 0;
}

START_TEST(conv_run_json_each_failure)
{
	struct store_run r = { .id = 1, .status = STORE_RUN_COMPLETED, .attempt = 1, .from_seq = 1, .to_seq = 2,
			       .first_seq = 3, .last_seq = 5, .model = { "m", 1 }, .started_at = 1700000000000,
			       .ended_at = 1700000000500 };
	each_failure(op_run_json, &r, "conv_run_json");
}
END_TEST

/* ---- conversation rules in a store's write transaction ------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* A store in a fresh directory, with conversation src: a message, a turn
 * that called a server tool (settled) and a human one (awaiting, with its
 * prompt), and a message queued after it, two of them with event_ids. */
struct in_store {
	char dir[64];
	store *st;
};

static void append_ev(store_txn *t, const char *conv, const char *type, json_t *content, const char *eid)
{
	struct jsonmp_buf b;
	ck_assert_ptr_nonnull(content);
	ck_assert_int_eq(conv_pack(&b, content), 0);
	struct store_event_in ev = { type, { b.sb.data, b.sb.size }, eid };
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, conv, &ev, &seq, NULL), 0);
	jsonmp_buf_destroy(&b);
	json_decref(content);
}

static void store_with_src(struct in_store *s)
{
	snprintf(s->dir, sizeof s->dir, "/tmp/agentd-check-alloc-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(s->dir));
	ck_assert_int_eq(store_open(&s->st, s->dir, NULL), 0);
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(s->st, STORE_WRITE, &t), 0);
	struct jsonmp_buf b;
	json_t *settings = json_pack("{sss{si}}", "model", "m", "budget", "max_turns", 10);
	ck_assert_int_eq(conv_pack(&b, settings), 0);
	ck_assert_int_eq(store_conv_create(t, "src", (store_bytes){ b.sb.data, b.sb.size }), 0);
	jsonmp_buf_destroy(&b);
	json_decref(settings);
	append_ev(t, "src", "user_msg", json_pack("{ss}", "text", "go"), "e-1");
	append_ev(t, "src", "assistant_msg", json_pack("{sssI}", "text", "calling", "context_seq", (json_int_t)1), NULL);
	append_ev(t, "src", "tool_call",
		  json_pack("{sssssss{si}}", "tool_call_id", "k1", "name", "add", "executor", "server", "args", "a", 1),
		  NULL);
	append_ev(t, "src", "tool_call",
		  json_pack("{sssssss{}}", "tool_call_id", "k2", "name", "approve", "executor", "human", "args"), NULL);
	append_ev(t, "src", "suspension", json_pack("{ssss}", "tool_call_id", "k2", "prompt", "ok?"), NULL);
	append_ev(t, "src", "tool_result",
		  json_pack("{sssss{si}}", "tool_call_id", "k1", "status", "resolved", "result", "sum", 1), NULL);
	append_ev(t, "src", "user_msg", json_pack("{ss}", "text", "more"), "e-2");
	ck_assert_int_eq(store_txn_commit(t), 0);
}

static void store_gone(struct in_store *s)
{
	store_close(s->st);
	nftw(s->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static int fork_row(void *arg, const struct store_tool_call *tc)
{
	json_t *v;
	ck_assert_int_eq(jsonmp_decode(tc->prompt.ptr, tc->prompt.len, &v), 0);
	json_t *r = json_pack("{ss#sisisoso}", "name", (const char *)tc->name.ptr, (int)tc->name.len, "status",
			      tc->status, "executor", tc->executor, "prompt", v, "result",
			      tc->result.len ? jsonmp_unpack(tc->result.ptr, tc->result.len) : json_null());
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(json_array_append_new(arg, r), 0);
	return 0;
}

static int fork_event(void *arg, const struct store_event *ev)
{
	json_t *o = conv_event_json(ev);
	ck_assert_ptr_nonnull(o);
	json_t *c = json_object_get(o, "content");
	json_object_del(c, "tool_call_id"); /* new, random ids in each fork */
	json_object_del(o, "inserted_at");
	ck_assert_int_eq(json_array_append_new(arg, o), 0);
	return 0;
}

/* What a fork made, read back in its transaction (nothing allocated in it
 * is counted: the injector is paused). */
static json_t *fork_made(store_txn *t, const struct conv_fork_out *out)
{
	json_t *evs = json_array(), *rows = json_array(), *settings;
	struct store_conv c;
	struct store_range all = { 0 };
	ck_assert_int_eq(store_events_stream(t, "fork", &all, fork_event, evs), 0);
	ck_assert_int_eq(store_tool_calls_list(t, "fork", 0, fork_row, rows), 0);
	ck_assert_int_eq(store_conv_get(t, "fork", &c), 0);
	ck_assert_int_eq(jsonmp_decode(c.settings.ptr, c.settings.len, &settings), 0);
	json_t *fsm = c.fsm_state.len ? jsonmp_unpack(c.fsm_state.ptr, c.fsm_state.len) : json_null();
	/* in id order, and the ids are random: by name */
	if (json_array_size(rows) == 2 &&
	    strcmp(json_string_value(json_object_get(json_array_get(rows, 0), "name")), "add")) {
		json_t *first = json_incref(json_array_get(rows, 0));
		json_array_remove(rows, 0);
		json_array_append_new(rows, first);
	}
	json_t *r = json_pack("{sososososisisIsI}", "events", evs, "rows", rows, "settings", settings, "fsm", fsm,
			      "status", c.status, "out_status", out->status, "copied", (json_int_t)out->copied,
			      "cancelled", (json_int_t)out->cancelled);
	ck_assert_ptr_nonnull(r);
	return r;
}

struct forking {
	store *st;
	json_t *settings, *want;
};

static void fork_same(struct forking *f, store_txn *t, const struct conv_fork_out *out)
{
	json_t *got = fork_made(t, out);
	char *g = json_dumps(got, JSON_SORT_KEYS), *w = json_dumps(f->want, JSON_SORT_KEYS);
	ck_assert_msg(json_equal(got, f->want), "a fork other than a run without failures makes, with allocation %ld "
		      "failed:\n%s\nnot\n%s", I.fail_at, g, w);
	free(g);
	free(w);
	json_decref(got);
}

/* Each run forks src at its last seq in a write transaction, reads back
 * what it made, and aborts: every run starts from the same store. */
static int op_fork(void *arg)
{
	struct forking *f = arg;
	store_txn *t;
	PAUSED(ck_assert_int_eq(store_txn_begin(f->st, STORE_WRITE, &t), 0));
	struct conv_fork_in in = { "src", 7, "fork", f->settings, NULL };
	struct conv_fork_out out;
	int e = conv_fork(t, &in, &out);
	if (e)
		PAUSED(ck_assert_msg(e == -ENOMEM, "conv_fork with allocation %ld failed: %s, not out of memory",
				     I.fail_at, store_strerror(e)));
	else if (!f->want)
		PAUSED(f->want = fork_made(t, &out));
	else
		PAUSED(fork_same(f, t, &out));
	PAUSED(store_txn_abort(t));
	return e;
}

START_TEST(conv_fork_each_failure)
{
	struct in_store s;
	store_with_src(&s);
	struct forking f = { s.st, json_pack("{ss}", "system", "be brief"), NULL };
	ck_assert_ptr_nonnull(f.settings);
	/* Once unwatched: the store's caches of a process's first write. */
	ck_assert_int_eq(op_fork(&f), 0);
	json_decref(f.want);
	f.want = NULL;
	each_failure(op_fork, &f, "conv_fork");
	/* The run without failures made what a fork must: both calls' rows (the
	 * server one resolved, the human one cancelled with its prompt), the
	 * event_ids, the caller's settings beside the source's. */
	json_t *rows = json_object_get(f.want, "rows");
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(rows, 0), "status")), STORE_TC_RESOLVED);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(rows, 1), "status")), STORE_TC_CANCELLED);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(rows, 1), "prompt")), "ok?");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(f.want, "events"), 6),
							   "event_id")),
			 "e-2");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(f.want, "settings"), "system")), "be brief");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(f.want, "settings"), "model")), "m");
	json_decref(f.want);
	json_decref(f.settings);
	store_gone(&s);
}
END_TEST

/* A person's answer to the last pending call of an ended conversation:
 * its fsm_state is pruned here (no worker runs for it), to idle, or the
 * settlement fails whole; never a state stored short of a key. */
struct settling {
	store *st;
	json_t *want;
};

static json_t *fsm_of(store_txn *t, const char *conv)
{
	struct store_conv c;
	json_t *fsm;
	ck_assert_int_eq(store_conv_get(t, conv, &c), 0);
	ck_assert_int_eq(jsonmp_decode(c.fsm_state.ptr, c.fsm_state.len, &fsm), 0);
	return fsm;
}

static void fsm_same(struct settling *s, store_txn *t)
{
	json_t *got = fsm_of(t, "src");
	if (!s->want) {
		s->want = got;
		return;
	}
	char *g = json_dumps(got, JSON_SORT_KEYS);
	ck_assert_msg(json_equal(got, s->want), "fsm_state %s with allocation %ld failed", g, I.fail_at);
	free(g);
	json_decref(got);
}

static int op_settle_ended(void *arg)
{
	struct settling *s = arg;
	store_txn *t;
	char conv[STORE_ID_MAX + 1];
	uint64_t seq;
	int ended = 0;
	PAUSED(ck_assert_int_eq(store_txn_begin(s->st, STORE_WRITE, &t), 0));
	json_t *res = json_pack("{sb}", "approved", 1);
	int e = res ? conv_settle(t, "h1", STORE_TC_RESOLVED, "resolution", res, conv, &seq) : -ENOMEM;
	json_decref(res);
	if (!e)
		e = conv_after_resolution(t, conv, &ended);
	if (e)
		PAUSED(ck_assert_msg(e == -ENOMEM, "settling with allocation %ld failed: %s", I.fail_at,
				     store_strerror(e)));
	else
		PAUSED(fsm_same(s, t));
	PAUSED(store_txn_abort(t));
	return e;
}

START_TEST(conv_settle_ended_each_failure)
{
	struct in_store s;
	store_with_src(&s);
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(s.st, STORE_WRITE, &t), 0);
	struct jsonmp_buf pb, fb;
	json_t *prompt = json_string("approve?"), *fsm = json_pack("{sss{s{}}sI}", "state", "awaiting_input",
								  "pending", "h1", "last_seq", (json_int_t)7);
	ck_assert_int_eq(conv_pack(&pb, prompt), 0);
	ck_assert_int_eq(conv_pack(&fb, fsm), 0);
	struct store_tool_call_in in = { "h1", "approve", STORE_EXEC_HUMAN, { "\x80", 1 }, { pb.sb.data, pb.sb.size } };
	ck_assert_int_eq(store_tool_call_upsert(t, "src", &in), 0);
	struct store_conv_patch p = { .set = STORE_SET_STATUS | STORE_SET_FSM, .status = STORE_ENDED,
				      .fsm_state = { fb.sb.data, fb.sb.size } };
	ck_assert_int_eq(store_conv_put(t, "src", &p), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	jsonmp_buf_destroy(&pb);
	jsonmp_buf_destroy(&fb);
	json_decref(prompt);
	json_decref(fsm);
	struct settling st = { s.st, NULL };
	ck_assert_int_eq(op_settle_ended(&st), 0); /* once unwatched, as conv_fork's */
	ck_assert_str_eq(json_string_value(json_object_get(st.want, "state")), "idle");
	ck_assert_int_eq(json_integer_value(json_object_get(st.want, "last_seq")), 8);
	ck_assert_uint_eq(json_object_size(json_object_get(st.want, "pending")), 0);
	each_failure(op_settle_ended, &st, "conv_settle + conv_after_resolution (ended)");
	json_decref(st.want);
	store_gone(&s);
}
END_TEST

/* ---- the worker: the model's request, its reply ------------------------ */

/* The working set a turn renders: a message, a turn that called two tools
 * (one settled, one awaiting a person), a message queued meanwhile, the
 * settlement, a message that is no text alone. */
static json_t *worker_events(void)
{
	json_t *ev = json_pack(
		"[{sIsss{ss}} {sIsss{sssI}} {sIsss{sssss{si}}} {sIsss{sssss{}}} {sIsss{ss}}"
		" {sIsss{sssss{si}}} {sIsss{ssss}}]",
		"seq", (json_int_t)1, "type", "user_msg", "content", "text", "add two numbers",
		"seq", (json_int_t)2, "type", "assistant_msg", "content", "text", "calling", "context_seq", (json_int_t)1,
		"seq", (json_int_t)3, "type", "tool_call", "content", "tool_call_id", "c1", "name", "add", "args", "a", 1,
		"seq", (json_int_t)4, "type", "tool_call", "content", "tool_call_id", "c2", "name", "approve", "args",
		"seq", (json_int_t)5, "type", "user_msg", "content", "text", "/tool add {\"a\": 2}",
		"seq", (json_int_t)6, "type", "tool_result", "content", "tool_call_id", "c1", "status", "resolved", "result",
		"sum", 3,
		"seq", (json_int_t)7, "type", "user_msg", "content", "text", "again", "lang", "en");
	ck_assert_ptr_nonnull(ev);
	return ev;
}

static void worker_config(struct config *c)
{
	char path[] = "/tmp/agentd-check-alloc-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	static const char text[] = "[model.m]\ncommand = /bin/true\n"
				   "[tool.add]\nexecutor = server\ncommand = python3 add.py\ndescription = adds\n"
				   "[tool.approve]\nexecutor = human\n";
	ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
	close(fd);
	char err[300] = "";
	ck_assert_int_eq(config_init(c), 0);
	ck_assert_msg(config_load(c, path, err, sizeof err) == 0, "%s", err);
	unlink(path);
}

/* An operation whose result must be the same JSON as a run without
 * failures gives (the first run keeps it), or NULL. */
struct built {
	json_t *(*make)(struct built *b);
	json_t *want;
	struct config cfg;
	const struct model_api *api;
	struct model_cfg mc;
	json_t *req, *settings, *events;
};

static int op_built(void *arg)
{
	struct built *b = arg;
	json_t *v = b->make(b);
	if (!v)
		return -1;
	if (!b->want)
		PAUSED(b->want = json_deep_copy(v));
	else
		PAUSED(ck_assert_msg(json_equal(v, b->want), "a value other than a run without failures gives, with "
					"allocation %ld failed", I.fail_at));
	json_decref(v);
	return 0;
}

static void built_each_failure(struct built *b, const char *name)
{
	b->want = NULL;
	each_failure(op_built, b, name);
	ck_assert_ptr_nonnull(b->want);
	json_decref(b->want);
	b->want = NULL;
}

static json_t *make_turn(struct built *b)
{
	json_t *sum = json_pack("{sIs{ss}}", "to_seq", (json_int_t)0, "content", "text", "earlier");
	if (!sum)
		return NULL;
	json_t *r = render_turn("c-1", 6, b->settings, &b->cfg, sum, b->events);
	json_decref(sum);
	return r;
}

static json_t *make_summarize(struct built *b)
{
	return render_summarize("c-1", b->settings, NULL, b->events);
}

START_TEST(render_each_failure)
{
	struct built b = { .make = make_turn };
	worker_config(&b.cfg);
	b.events = worker_events();
	b.settings = json_pack("{sssss[sss]s{sf}}", "model", "m", "system", "be brief", "tools", "add", "approve",
			       "gone", "params", "temperature", 0.5);
	ck_assert_ptr_nonnull(b.settings);
	built_each_failure(&b, "render_turn");
	b.make = make_summarize;
	built_each_failure(&b, "render_summarize");
	json_decref(b.settings);
	json_decref(b.events);
	config_free(&b.cfg);
}
END_TEST

static json_t *make_echo(struct built *b)
{
	return echo_model(b->req);
}

START_TEST(echo_model_each_failure)
{
	struct built b = { .make = make_echo };
	/* The turn after seq 2 answered: the queued /tool message asks for a
	 * call, the result of c1 and the message with two keys are echoed. */
	b.req = json_pack("{ssso}", "task", "turn", "messages", worker_events());
	ck_assert_ptr_nonnull(b.req);
	built_each_failure(&b, "echo_model");
	json_t *out = echo_model(b.req);
	ck_assert_uint_eq(json_array_size(json_object_get(out, "tool_calls")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_array_get(
				 json_object_get(out, "tool_calls"), 0), "args"), "a")), 2);
	json_decref(out);
	json_object_set_new(b.req, "task", json_string("summarize"));
	built_each_failure(&b, "echo_model (summarize)");
	json_decref(b.req);
}
END_TEST

static json_t *make_body(struct built *b)
{
	return b->api->body(&b->mc, b->req);
}

/* What an HTTP model is sent, for both APIs: with tools (the calls and
 * results as tool blocks), without (told as text), and a summary. */
static void bodies_each_failure(const struct model_api *api, const char *name)
{
	struct built b = { .make = make_body, .api = api };
	worker_config(&b.cfg);
	b.events = worker_events();
	b.settings = json_pack("{sss[ss]s{sf}}", "model", "m", "tools", "add", "approve", "params", "top_p", 0.9);
	ck_assert_ptr_nonnull(b.settings);
	b.mc = (struct model_cfg){ .name = "m", .kind = api == &model_api_openai ? MODEL_OPENAI : MODEL_ANTHROPIC,
				   .model = "the-model", .max_tokens = 100, .params = "{\"temperature\": 0.5}" };
	json_t *sum = json_pack("{sIs{ss}}", "to_seq", (json_int_t)0, "content", "text", "earlier");
	b.req = render_turn("c-1", 6, b.settings, &b.cfg, sum, b.events);
	ck_assert_ptr_nonnull(b.req);
	/* An MCP tool's schema, as mcp_offer gives it. */
	ck_assert_int_eq(json_object_set_new(json_array_get(json_object_get(b.req, "tools"), 0), "input_schema",
					     json_pack("{sss{s{ss}}}", "type", "object", "properties", "a", "type",
						       "number")),
			 0);
	char what[80];
	snprintf(what, sizeof what, "%s body", name);
	built_each_failure(&b, what);
	json_object_set_new(b.req, "tools", json_array());
	snprintf(what, sizeof what, "%s body without tools", name);
	built_each_failure(&b, what);
	json_decref(b.req);
	b.req = render_summarize("c-1", b.settings, sum, b.events);
	ck_assert_ptr_nonnull(b.req);
	snprintf(what, sizeof what, "%s summary body", name);
	built_each_failure(&b, what);
	json_decref(b.req);
	json_decref(sum);
	json_decref(b.settings);
	json_decref(b.events);
	config_free(&b.cfg);
}

START_TEST(openai_body_each_failure)
{
	bodies_each_failure(&model_api_openai, "openai");
}
END_TEST

START_TEST(anthropic_body_each_failure)
{
	bodies_each_failure(&model_api_anthropic, "anthropic");
}
END_TEST

/* A streamed reply: its events fed to the API's parser, then the reply. */
struct streamed {
	const struct model_api *api;
	const char *const *events; /* NULL-terminated */
	const char *text;          /* the reply's text */
	size_t ncalls;
};

static int op_stream(void *arg)
{
	struct streamed *a = arg;
	struct stream s = { 0 };
	struct model_reply r;
	char err[300];
	int e = 0;
	for (const char *const *ev = a->events; !e && *ev; ev++) {
		e = a->api->event(&s, "", *ev, strlen(*ev));
		if (e)
			PAUSED(ck_assert_str_eq(s.err, "out of memory reading the stream"));
		if (!e && s.failed) {
			/* a line jansson could not read for want of memory reads as not one */
			PAUSED(ck_assert_msg(I.failed, "the stream failed with no allocation failed: %s", s.err));
			e = -1;
		}
	}
	if (!e)
		e = stream_reply(&s, &r, err, sizeof err);
	stream_free(&s);
	if (e)
		return -1;
	PAUSED(ck_assert_str_eq(r.text, a->text));
	PAUSED(ck_assert_uint_eq(r.ncalls, a->ncalls));
	PAUSED(ck_assert_str_eq(r.calls[0].id, "call_1"));
	PAUSED(ck_assert_str_eq(r.calls[0].name, "add"));
	PAUSED(ck_assert_int_eq(json_integer_value(json_object_get(r.calls[0].args, "a")), 1));
	PAUSED(ck_assert_str_eq(json_string_value(json_object_get(r.calls[1].args, "raw")), "not json"));
	PAUSED(ck_assert_uint_eq(r.input_tokens, 10));
	model_reply_free(&r);
	return 0;
}

START_TEST(openai_stream_each_failure)
{
	static const char *const evs[] = {
		"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}",
		"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
		"\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":\"}}]}}]}",
		"{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}},"
		"{\"index\":1,\"id\":\"call_2\",\"function\":{\"name\":\"add\",\"arguments\":\"not json\"}}]}}]}",
		"{\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5}}",
		"[DONE]",
		NULL,
	};
	struct streamed a = { &model_api_openai, evs, "Hello", 2 };
	each_failure(op_stream, &a, "openai stream");
}
END_TEST

START_TEST(anthropic_stream_each_failure)
{
	static const char *const evs[] = {
		"{\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}",
		"{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"Hel\"}}",
		"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}",
		"{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"call_1\","
		"\"name\":\"add\",\"input\":{}}}",
		"{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
		"\"partial_json\":\"{\\\"a\\\": 1}\"}}",
		"{\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"call_2\","
		"\"name\":\"add\",\"input\":{}}}",
		"{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\","
		"\"partial_json\":\"not json\"}}",
		"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}",
		"{\"type\":\"message_stop\"}",
		NULL,
	};
	struct streamed a = { &model_api_anthropic, evs, "Hello", 2 };
	each_failure(op_stream, &a, "anthropic stream");
}
END_TEST

/* An exec model's output: a delta, then the final line with two calls. */
static int op_model_output(void *arg)
{
	const char *out = arg;
	struct model_reply r;
	char err[320];
	if (model_output_parse(out, strlen(out), &r, err, sizeof err)) {
		/* A failure inside jansson's lexer may read as a syntax error
		 * (see proto_parse_each_failure): an error either way. */
		PAUSED(ck_assert_msg(strstr(err, "out of memory") || strstr(err, ": not JSON"),
				     "model_output_parse with allocation %ld failed: %s", I.fail_at, err));
		return -1;
	}
	PAUSED(ck_assert_str_eq(r.text, "done"));
	PAUSED(ck_assert_uint_eq(r.ncalls, 2));
	PAUSED(ck_assert_str_eq(r.calls[1].id, "k2"));
	PAUSED(ck_assert_int_eq(json_integer_value(json_object_get(r.calls[1].args, "b")), 2));
	model_reply_free(&r);
	return 0;
}

START_TEST(model_output_each_failure)
{
	char out[] = "{\"delta\":\"do\"}\n{\"text\":\"done\",\"tool_calls\":[{\"name\":\"add\",\"id\":\"k1\",\"args\":{\"a\":1}},"
		     "{\"name\":\"add\",\"id\":\"k2\",\"args\":{\"b\":2}}],\"usage\":{\"input_tokens\":3}}\n";
	each_failure(op_model_output, out, "model_output_parse");
}
END_TEST

static Suite *make_alloc_suite(void)
{
	Suite *s = suite_create("alloc");
	TCase *tc = tcase_create("each allocation failed in turn");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, jsonmp_pack_each_failure);
	tcase_add_test(tc, jsonmp_unpack_each_failure);
	tcase_add_test(tc, proto_parse_each_failure);
	tcase_add_test(tc, proto_lines_each_failure);
	tcase_add_test(tc, proto_oom_line_each_failure);
	tcase_add_test(tc, proto_parse_batch_each_failure);
	tcase_add_test(tc, conv_run_json_each_failure);
	tcase_add_test(tc, conv_fork_each_failure);
	tcase_add_test(tc, conv_settle_ended_each_failure);
	tcase_add_test(tc, tail_decide_each_failure);
	tcase_add_test(tc, conv_event_json_each_failure);
	tcase_add_test(tc, cmdline_each_failure);
	tcase_add_test(tc, config_each_failure);
	tcase_add_test(tc, render_each_failure);
	tcase_add_test(tc, echo_model_each_failure);
	tcase_add_test(tc, openai_body_each_failure);
	tcase_add_test(tc, anthropic_body_each_failure);
	tcase_add_test(tc, openai_stream_each_failure);
	tcase_add_test(tc, anthropic_stream_each_failure);
	tcase_add_test(tc, model_output_each_failure);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	jsonmp_alloc_init(); /* jansson allocates through it, and so through the wrappers */
	SRunner *sr = srunner_create(make_alloc_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
