/* http.c: agentd-web's routes (see http.h; docs/web.md). */
#include "web/http.h"
#include "web/api.h"
#include "web/assets.h"
#include "web/auth.h"
#include "web/users.h"
#include "web/convs.h"
#include "client/ctl.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#define BODY_MAX (256u << 10)   /* a POST body: a decision with its result */
#define KEEPALIVE_MS 15000       /* an SSE comment this often keeps proxies from closing the stream */
#define COOKIE "agentd_web"
#define PENDING_CONVS_MAX 2000   /* suspended conversations scanned for the pending list */


struct http_server {
	struct MHD_Daemon *d;
	const struct http_config *cfg;
};

static const struct http_config *CFG;

/* ---- responses ---- */

/* The login form (static login.html) with one of our fixed messages (never
 * anything from the request: no markup can get in). */
static enum MHD_Result send_login(struct MHD_Connection *c, unsigned status, const char *msg)
{
	/* With --users the form asks for a name and a password instead of the token. */
	const struct web_asset *a = web_asset_find(users_enabled() ? "/login-users.html" : "/login.html");
	const char *mark = "{{MESSAGE}}";
	if (!a)
		return MHD_NO;
	const char *t = (const char *)a->data;
	const char *at = memmem(t, a->len, mark, strlen(mark));
	if (!at)
		return api_send_buf(c, status, "text/html; charset=utf-8", a->data, a->len, MHD_RESPMEM_PERSISTENT, NULL);
	size_t pre = (size_t)(at - t), ml = strlen(mark), n = a->len - ml + strlen(msg);
	char *out = malloc(n);
	if (!out)
		return MHD_NO;
	memcpy(out, t, pre);
	memcpy(out + pre, msg, strlen(msg));
	memcpy(out + pre + strlen(msg), at + ml, a->len - pre - ml);
	return api_send_buf(c, status, "text/html; charset=utf-8", out, n, MHD_RESPMEM_MUST_FREE, NULL);
}

static enum MHD_Result send_asset(struct MHD_Connection *c, const char *path)
{
	const struct web_asset *a = web_asset_find(path);
	if (!a)
		return api_send_error(c, 404, "not_found", "no such page");
	return api_send_buf(c, 200, a->type, a->data, a->len, MHD_RESPMEM_PERSISTENT, NULL);
}

static void cookie_line(char *out, size_t n, const char *value, int clear)
{
	snprintf(out, n, "%s=%s; Path=/; HttpOnly; SameSite=Strict%s%s", COOKIE, value,
		 CFG->secure_cookie ? "; Secure" : "", clear ? "; Max-Age=0" : "");
}

/* ---- agentd ---- */

static int64_t now_ms(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Sort key: soonest deadline first (none last), then oldest. */
static int pending_cmp(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	json_t *dx = json_object_get(x, "deadline"), *dy = json_object_get(y, "deadline");
	long long ix = json_is_integer(dx) ? json_integer_value(dx) : INT64_MAX;
	long long iy = json_is_integer(dy) ? json_integer_value(dy) : INT64_MAX;
	if (ix != iy)
		return ix < iy ? -1 : 1;
	ix = json_integer_value(json_object_get(x, "inserted_at"));
	iy = json_integer_value(json_object_get(y, "inserted_at"));
	return ix < iy ? -1 : ix > iy;
}

/* What a listed call waits for: "approval" (a person's pending call),
 * "unknown" (a call whose outcome is unknown, docs/tools.md), or NULL
 * (a server call pending in a mixed turn: nobody is asked). */
static const char *pending_kind(const json_t *tc)
{
	const char *st = json_string_value(json_object_get(tc, "status")) ?: "";
	if (!strcmp(st, "unknown"))
		return "unknown";
	return !strcmp(st, "pending") && !strcmp(json_string_value(json_object_get(tc, "executor")) ?: "", "human")
		       ? "approval" : NULL;
}

/* Every pending human call and every unknown call: the protocol lists them per conversation, and
 * only suspended conversations have any (a person's pending call, or an
 * unknown call, is what suspends one), so this pages through those, then
 * asks for their pending and unknown calls all at once (pipelined on one connection). */
static enum MHD_Result api_pending(struct MHD_Connection *c)
{
	enum MHD_Result ret;
	json_t *reqs = json_array(), *after = NULL, *replies = NULL;
	int truncated = 0;
	if (!reqs)
		return MHD_NO;
	for (;;) {
		json_t *req = json_pack("{sssssi}", "op", "list", "status", "suspended", "limit", 1000);
		if (req && after)
			json_object_set(req, "after", after);
		json_t *page = api_ask(c, req, &ret);
		json_decref(after);
		after = NULL;
		if (!page) {
			json_decref(reqs);
			return ret;
		}
		size_t i;
		json_t *conv;
		/* Two asks a conversation: its pending calls and its unknown ones. */
		json_array_foreach(json_object_get(page, "conversations"), i, conv) {
			json_array_append_new(reqs, json_pack("{sssOss}", "op", "tool_calls", "conversation",
							      json_object_get(conv, "id"), "status", "pending"));
			json_array_append_new(reqs, json_pack("{sssOss}", "op", "tool_calls", "conversation",
							      json_object_get(conv, "id"), "status", "unknown"));
		}
		after = json_incref(json_object_get(page, "next"));
		json_decref(page);
		if (!after)
			break;
		if (json_array_size(reqs) >= 2 * PENDING_CONVS_MAX) {
			truncated = 1;
			json_decref(after);
			break;
		}
	}
	ctl_conn *cc = NULL;
	int e = api_connect(&cc);
	if (!e)
		e = ctl_pipeline(cc, reqs, &replies);
	ctl_close(cc);
	json_decref(reqs);
	if (e)
		return api_send_error(c, 502, "agentd_unreachable", ctl_strerror(e));
	size_t n = 0, i, k;
	json_t *r, *tc;
	json_array_foreach(replies, i, r) /* a conversation deleted meanwhile (not_found) is simply not listed */
		json_array_foreach(json_object_get(r, "tool_calls"), k, tc)
			n += pending_kind(tc) != NULL;
	json_t **v = n ? malloc(n * sizeof *v) : NULL;
	if (n && !v) {
		json_decref(replies);
		return MHD_NO;
	}
	n = 0;
	json_array_foreach(replies, i, r)
		json_array_foreach(json_object_get(r, "tool_calls"), k, tc)
			if (pending_kind(tc) && !json_object_set_new(tc, "kind", json_string(pending_kind(tc))))
				v[n++] = tc; /* never a row without its kind */
	if (n) /* qsort(NULL, 0, ...) is undefined */
		qsort(v, n, sizeof *v, pending_cmp);
	json_t *sorted = json_array();
	for (size_t j = 0; sorted && j < n; j++)
		json_array_append(sorted, v[j]);
	free(v);
	json_decref(replies);
	return api_send_json(c, 200, json_pack("{sosIsb}", "pending", sorted, "now", (json_int_t)now_ms(), "truncated",
					   truncated));
}

/* list's metadata filter from the query: each meta.KEY=VALUE is one pair
 * (repeatable; all must hold). The key is the parameter's name after "meta.",
 * so any key can be given exactly; agentd checks the bounds. */
struct meta_query {
	json_t *m;
	const char *bad; /* the first problem, or NULL */
};

static enum MHD_Result meta_arg(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
				const char *value, size_t value_size)
{
	struct meta_query *q = cls;
	(void)kind;
	if (q->bad || key_size < 5 || memcmp(key, "meta.", 5))
		return MHD_YES;
	const char *k = key + 5;
	size_t kl = key_size - 5;
	if (!value) /* "?meta.K" without "=": the empty value */
		value = "", value_size = 0;
	json_t *v;
	if (memchr(k, 0, kl) || memchr(value, 0, value_size))
		q->bad = "a metadata key or value must not contain a NUL character";
	else if (json_object_getn(q->m, k, kl))
		q->bad = "a metadata key is given twice: each key filters by one value";
	else if (!(v = json_stringn(value, value_size)) || json_object_setn_new(q->m, k, kl, v))
		q->bad = "a metadata key or value is not valid UTF-8";
	return MHD_YES;
}

/* The list op with its filters: status, model, metadata (meta.KEY=VALUE),
 * updated_after/updated_before (ms), limit and the cursor after. */
static enum MHD_Result api_conversations(struct MHD_Connection *c)
{
	int bad = 0;
	long long limit = 100, t;
	api_arg_num(c, "limit", 1000, &limit, &bad);
	if (bad || limit < 1)
		return api_send_error(c, 400, "bad_request", "'limit' must be a number from 1 to 1000");
	json_t *req = json_pack("{sssI}", "op", "list", "limit", (json_int_t)limit);
	if (!req)
		return MHD_NO;
	static const char *const strs[] = { "status", "after", "model" };
	for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
		if (api_arg(c, strs[i]) && json_object_set_new(req, strs[i], json_string(api_arg(c, strs[i])))) {
			json_decref(req);
			return api_send_error(c, 400, "bad_request", "a filter is not valid UTF-8");
		}
	static const char *const times[] = { "updated_after", "updated_before" };
	for (size_t i = 0; i < 2; i++)
		if (api_arg_num(c, times[i], INT64_MAX, &t, &bad))
			json_object_set_new(req, times[i], json_integer((json_int_t)t));
	if (bad) {
		json_decref(req);
		return api_send_error(c, 400, "bad_request",
				  "'updated_after' and 'updated_before' are times in milliseconds since 1970 (whole numbers)");
	}
	struct meta_query q = { json_object(), NULL };
	MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, meta_arg, &q);
	if (!q.m || q.bad) {
		json_decref(q.m);
		json_decref(req);
		return q.m ? api_send_error(c, 400, "bad_request", q.bad) : MHD_NO;
	}
	if (json_object_size(q.m))
		json_object_set(req, "metadata", q.m);
	json_decref(q.m);
	return api_proxy(c, req);
}

/* ?NAME=ID into {"op": op, field: ID}; agentd validates the id. */
static enum MHD_Result api_by_id(struct MHD_Connection *c, const char *op, const char *q, const char *field)
{
	const char *id;
	enum MHD_Result ret;
	if (!api_id_arg(c, q, &id, &ret))
		return ret;
	return api_proxy(c, json_pack("{ssss}", "op", op, field, id));
}

/* The events op: `limit` (1-10000) most recent in the range after..before
 * (both exclusive), of one `type` when given. Without `limit` and `after`,
 * the 500 most recent; with `after` alone, agentd's page forward from it
 * (at most 10,000, `next_after` when more remain). agentd checks the
 * type's name (bad_request lists the types). */
static enum MHD_Result api_events(struct MHD_Connection *c)
{
	int bad = 0, has_limit, has_after, has_before;
	long long limit = 500, after = 0, before = 0;
	const char *conv, *type = api_arg(c, "type");
	enum MHD_Result ret;
	if (!api_id_arg(c, "conversation", &conv, &ret))
		return ret;
	has_limit = api_arg_num(c, "limit", 10000, &limit, &bad);
	if (bad || limit < 1)
		return api_send_error(c, 400, "bad_request", "'limit' is 1 to 10000");
	has_after = api_arg_num(c, "after", INT64_MAX, &after, &bad);
	if (bad)
		return api_send_error(c, 400, "bad_request", "'after' is a seq (a whole number)");
	has_before = api_arg_num(c, "before", INT64_MAX, &before, &bad);
	if (bad)
		return api_send_error(c, 400, "bad_request", "'before' is a seq (a whole number)");
	json_t *req = json_pack("{ssss}", "op", "events", "conversation", conv), *t = type ? json_string(type) : NULL;
	if (type && !t) {
		json_decref(req);
		return api_send_error(c, 400, "bad_request", "'type' is not valid UTF-8");
	}
	if (req && (has_limit || !has_after))
		json_object_set_new(req, "limit", json_integer((json_int_t)limit));
	if (req && has_after)
		json_object_set_new(req, "after", json_integer((json_int_t)after));
	if (req && has_before)
		json_object_set_new(req, "before", json_integer((json_int_t)before));
	if (req && t)
		json_object_set(req, "type", t);
	json_decref(t);
	return api_proxy(c, req);
}

/* The runs op: a conversation's runs newest first, `limit` (1-1000) at a
 * time, `before` the cursor (the `next` of the page before: a run id). */
static enum MHD_Result api_runs(struct MHD_Connection *c)
{
	int bad = 0, has_before;
	long long limit = 100, before = 0;
	const char *conv;
	enum MHD_Result ret;
	if (!api_id_arg(c, "conversation", &conv, &ret))
		return ret;
	api_arg_num(c, "limit", 1000, &limit, &bad);
	if (bad || limit < 1)
		return api_send_error(c, 400, "bad_request", "'limit' must be a number from 1 to 1000");
	has_before = api_arg_num(c, "before", INT64_MAX, &before, &bad);
	if (bad || (has_before && before < 1))
		return api_send_error(c, 400, "bad_request",
				  "'before' must be a run id (a whole number from 1: the 'next' of the page before)");
	json_t *req = json_pack("{sssssI}", "op", "runs", "conversation", conv, "limit", (json_int_t)limit);
	if (req && has_before)
		json_object_set_new(req, "before", json_integer((json_int_t)before));
	return api_proxy(c, req);
}

/* The nodes op, with agentd-web's clock (`now`, ms) for "how long ago". */
static enum MHD_Result api_nodes(struct MHD_Connection *c)
{
	enum MHD_Result ret;
	json_t *r = api_ask(c, json_pack("{ss}", "op", "nodes"), &ret);
	if (!r)
		return ret;
	json_object_set_new(r, "now", json_integer((json_int_t)now_ms()));
	return api_send_json(c, 200, r);
}

/* ---- server-sent events over watch ---- */

struct sse {
	ctl_conn *w; /* the watch's connection */
	int client_fd;
	int ended;
	char *out;
	size_t out_len, out_off, out_cap;
};

static int sse_put(struct sse *s, const char *a, size_t n)
{
	if (s->out_len + n > s->out_cap) {
		size_t cap = s->out_cap ? s->out_cap : 4096;
		while (cap < s->out_len + n)
			cap *= 2;
		char *b = realloc(s->out, cap);
		if (!b)
			return -1;
		s->out = b;
		s->out_cap = cap;
	}
	memcpy(s->out + s->out_len, a, n);
	s->out_len += n;
	return 0;
}

static int sse_puts(struct sse *s, const char *a)
{
	return sse_put(s, a, strlen(a));
}

/* One line of agentd's watch as one SSE message (JSON lines hold no raw
 * newline, so each fits one data: field). A run has no id: Last-Event-ID
 * stays the seq of the last event. */
static int sse_line(struct sse *s, const char *line, size_t len)
{
	json_t *o = json_loadb(line, len, 0, NULL);
	json_t *ev = json_object_get(o, "event"), *delta = json_object_get(o, "delta"), *run = json_object_get(o, "run");
	int e = 0;
	char head[64];
	if (ev) {
		snprintf(head, sizeof head, "id: %lld\nevent: event\ndata: ",
			 (long long)json_integer_value(json_object_get(ev, "seq")));
		char *d = json_dumps(ev, JSON_COMPACT);
		e = !d || sse_puts(s, head) || sse_puts(s, d) || sse_puts(s, "\n\n");
		free(d);
	} else if (delta) {
		char *d = json_dumps(delta, JSON_COMPACT);
		e = !d || sse_puts(s, "event: delta\ndata: ") || sse_puts(s, d) || sse_puts(s, "\n\n");
		free(d);
	} else if (run) {
		char *d = json_dumps(run, JSON_COMPACT);
		e = !d || sse_puts(s, "event: run\ndata: ") || sse_puts(s, d) || sse_puts(s, "\n\n");
		free(d);
	}
	json_decref(o);
	return e;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sse *s = cls;
	while (s->out_off == s->out_len) {
		const char *line;
		size_t len;
		s->out_off = s->out_len = 0;
		if (s->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		int e = ctl_watch_next(s->w, KEEPALIVE_MS, s->client_fd, &line, &len);
		if (e == -ETIMEDOUT && sse_puts(s, ": keepalive\n\n"))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (e == -ECONNRESET) {
			/* agentd closed the watch: the conversation was deleted,
			 * or agentd stops. Say so, so the page does not retry. */
			s->ended = 1;
			if (sse_puts(s, "event: end\ndata: {}\n\n"))
				return MHD_CONTENT_READER_END_WITH_ERROR;
		} else if (e < 0 && e != -ETIMEDOUT) {
			return MHD_CONTENT_READER_END_WITH_ERROR;
		} else if (e == 0 && sse_line(s, line, len)) {
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
	size_t n = s->out_len - s->out_off < max ? s->out_len - s->out_off : max;
	memcpy(buf, s->out + s->out_off, n);
	s->out_off += n;
	return (ssize_t)n;
}

static void sse_free(void *cls)
{
	struct sse *s = cls;
	ctl_close(s->w);
	free(s->out);
	free(s);
}

static enum MHD_Result api_watch(struct MHD_Connection *c)
{
	int bad = 0, bad_runs = 0;
	long long after = -1, runs = 0;
	const char *conv;
	const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
	enum MHD_Result refused;
	if (!api_id_arg(c, "conversation", &conv, &refused))
		return refused;
	api_arg_num(c, "after", INT64_MAX, &after, &bad);
	if (api_arg_num(c, "runs", 1, &runs, &bad_runs), bad_runs)
		return api_send_error(c, 400, "bad_request", "'runs' is 1 (stream run starts and ends too) or 0");
	if (last && *last) { /* EventSource reconnecting: go on after what it saw */
		char *end;
		long long l = strtoll(last, &end, 10);
		if (!*end && l >= 0)
			after = l;
	}
	if (bad)
		return api_send_error(c, 400, "bad_request", "'after' is a seq (a whole number)");
	struct sse *s = calloc(1, sizeof *s);
	json_t *reply = NULL;
	if (!s)
		return MHD_NO;
	int e = api_connect(&s->w);
	if (!e)
		e = ctl_watch_open(s->w, conv, after, (int)runs, &reply);
	if (e || !json_is_true(json_object_get(reply, "ok"))) {
		ctl_close(s->w);
		free(s);
		if (e) {
			json_decref(reply);
			return api_send_error(c, 502, "agentd_unreachable", ctl_strerror(e));
		}
		const char *code = json_string_value(json_object_get(reply, "error"));
		enum MHD_Result ret = api_send_json(c, api_status_of(code), json_pack("{s:s,s:O?}", "error", code ?: "internal",
									      "message", json_object_get(reply, "message")));
		json_decref(reply);
		return ret;
	}
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	s->client_fd = ci ? ci->connect_fd : -1;
	char first[128];
	snprintf(first, sizeof first, "retry: 2000\nevent: ready\ndata: {\"last_seq\":%lld}\n\n",
		 (long long)json_integer_value(json_object_get(reply, "last_seq")));
	json_decref(reply);
	if (sse_puts(s, first)) {
		sse_free(s);
		return MHD_NO;
	}
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, s, sse_free);
	if (!r) {
		sse_free(s);
		return MHD_NO;
	}
	api_headers(r);
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* nginx: stream, do not buffer */
	enum MHD_Result ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- decisions ---- */

/* {"tool_call_id", "decision": "approve"|"deny", "comment"?, "result"?,
 * "args_digest"?}: settled resolved (as agentctl approve and deny do: a
 * denial is an answer, not a failure) with the result given, or
 * {"approved": true|false, "comment"?}; args_digest (the page always sends
 * the digest of the args it showed) goes to agentd, which refuses args that
 * are not those (conflict). */
static enum MHD_Result api_resolve(struct MHD_Connection *c, struct api_req *rq, const struct api_who *w)
{
	static const char *const fields[] = { "tool_call_id", "decision", "comment", "result", "args_digest", NULL };
	enum MHD_Result ret;
	json_t *b = NULL;
	if (api_body(c, rq, fields, &b, &ret))
		return ret;
	const char *tc = json_string_value(json_object_get(b, "tool_call_id"));
	const char *d = json_string_value(json_object_get(b, "decision"));
	json_t *comment = json_object_get(b, "comment"), *result = json_object_get(b, "result");
	json_t *digest = json_object_get(b, "args_digest");
	int approve = d && !strcmp(d, "approve");
	if (!tc || !d || (!approve && strcmp(d, "deny")) || (comment && !json_is_string(comment)) ||
	    (comment && result) || (digest && !json_is_string(digest))) {
		json_decref(b);
		return api_send_error(c, 400, "bad_request",
				  "expected tool_call_id, decision (approve or deny), and a comment (text) or a result, not both");
	}
	if (!result) {
		result = json_pack("{sb}", "approved", approve);
		if (result && comment && json_string_length(comment))
			json_object_set(result, "comment", comment);
	} else {
		json_incref(result);
	}
	char name[AUTH_NAME_MAX + 1];
	api_by_name(c, w, name, sizeof name);
	json_t *req = json_pack("{sssssssoss}", "op", "resolve", "tool_call_id", tc, "status", "resolved", "result",
				result, "by", name);
	if (req && digest && json_object_set(req, "args_digest", digest)) {
		json_decref(req);
		req = NULL; /* never a resolve short of the digest: api_ask() answers out of memory */
	}
	json_decref(b);
	json_t *r = api_ask(c, req, &ret);
	if (!r)
		return ret;
	return api_send_json(c, 200, r);
}

/* {"conversation", "tool_call_id", "outcome": "retry"|"done"|"failed",
 * "result"?}: a decision on a call whose outcome is unknown, as agentctl
 * settle sends it, by the page's user. */
static enum MHD_Result api_settle(struct MHD_Connection *c, struct api_req *rq, const struct api_who *w)
{
	static const char *const fields[] = { "conversation", "tool_call_id", "outcome", "result", NULL };
	enum MHD_Result ret;
	json_t *b = NULL;
	if (api_body(c, rq, fields, &b, &ret))
		return ret;
	if (!json_is_string(json_object_get(b, "conversation")) || !json_is_string(json_object_get(b, "tool_call_id")) ||
	    !json_is_string(json_object_get(b, "outcome"))) {
		json_decref(b);
		return api_send_error(c, 400, "bad_request", "expected conversation, tool_call_id and outcome (retry, done or failed)");
	}
	char name[AUTH_NAME_MAX + 1];
	api_by_name(c, w, name, sizeof name);
	/* agentd checks the outcome and the result (bad_request names what is wrong). */
	json_t *req = json_pack("{sssOsOsOss}", "op", "settle", "conversation", json_object_get(b, "conversation"),
				"tool_call_id", json_object_get(b, "tool_call_id"), "outcome", json_object_get(b, "outcome"),
				"by", name);
	if (req && json_object_get(b, "result") && json_object_set(req, "result", json_object_get(b, "result"))) {
		json_decref(req);
		req = NULL;
	}
	json_decref(b);
	json_t *r = api_ask(c, req, &ret);
	if (!r)
		return ret;
	return api_send_json(c, 200, r);
}

/* ---- login ---- */

static int hexval(int ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
		: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* The value of key in an application/x-www-form-urlencoded body, decoded
 * into out. Returns 1 when found and it fits, else 0. */
static int form_value(const char *body, size_t len, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);
	for (size_t i = 0; i < len;) {
		size_t end = i;
		while (end < len && body[end] != '&')
			end++;
		if (end - i > kl && !memcmp(body + i, key, kl) && body[i + kl] == '=') {
			size_t o = 0;
			for (size_t p = i + kl + 1; p < end; p++) {
				int ch = body[p];
				if (ch == '+')
					ch = ' ';
				else if (ch == '%' && p + 2 < end && hexval(body[p + 1]) >= 0 && hexval(body[p + 2]) >= 0) {
					ch = hexval(body[p + 1]) * 16 + hexval(body[p + 2]);
					p += 2;
				}
				if (o + 1 >= n)
					return 0;
				out[o++] = (char)ch;
			}
			out[o] = 0;
			return 1;
		}
		i = end + 1;
	}
	if (n)
		out[0] = 0;
	return 0;
}

static enum MHD_Result start_session(struct MHD_Connection *c, const char *name, int role, int via_link)
{
	char id[AUTH_ID_LEN + 1], csrf[AUTH_ID_LEN + 1], cookie[256];
	auth_session_new(name, role, id, csrf);
	cookie_line(cookie, sizeof cookie, id, 0);
	if (via_link) {
		/* A page that moves on by itself: the link may have been opened
		 * from another site, and a SameSite=Strict cookie is not sent on
		 * a redirect that started there. */
		static const char page[] = "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=\"0;url=/\">"
					   "<title>agentd</title><p>Signed in. <a href=\"/\">Continue</a>.</p>\n";
		return api_send_buf(c, 200, "text/html; charset=utf-8", page, sizeof page - 1, MHD_RESPMEM_PERSISTENT, cookie);
	}
	struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	api_headers(r);
	MHD_add_response_header(r, "Set-Cookie", cookie);
	MHD_add_response_header(r, "Location", "/");
	enum MHD_Result ret = MHD_queue_response(c, 303, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- checks ---- */

/* The host[:port] of an origin ("http://127.0.0.1:8080" -> "127.0.0.1:8080"). */
static const char *origin_host(const char *o)
{
	const char *p = strstr(o, "://");
	return p ? p + 3 : o;
}

/* Host must name us: a page on another name that resolves here (DNS
 * rebinding) is refused before anything else. */
static int host_ok(struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	for (size_t i = 0; h && i < CFG->norigins; i++)
		if (!strcasecmp(h, origin_host(CFG->origins[i])))
			return 1;
	return 0;
}

static int origin_ok(struct MHD_Connection *c)
{
	const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	for (size_t i = 0; o && i < CFG->norigins; i++)
		if (!strcasecmp(o, CFG->origins[i]))
			return 1;
	return 0;
}

/* 1 and w filled when the request carries a session cookie or the token. */
static int authenticate(struct MHD_Connection *c, struct api_who *w)
{
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	const char *ck = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, COOKIE);
	memset(w, 0, sizeof *w);
	if (auth && !strncasecmp(auth, "Bearer ", 7)) {
		w->role = USERS_OPERATOR; /* the token is agentd-web's own secret: a program holding it may do all */
		return auth_token_ok(auth + 7, strlen(auth + 7));
	}
	if (ck && auth_session_get(ck, w->csrf, w->name, sizeof w->name, &w->role)) {
		w->session = 1;
		snprintf(w->id, sizeof w->id, "%s", ck);
		return 1;
	}
	return 0;
}

/* ---- routes ---- */

static int is_page(const char *url)
{
	return !strcmp(url, "/") || !strcmp(url, "/index.html");
}

/* A route's handler. w is who asked: zeroed on the open routes. */
typedef enum MHD_Result route_fn(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w);

static enum MHD_Result route_asset(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w)
{
	return send_asset(c, url);
}

static enum MHD_Result route_page(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w)
{
	return send_asset(c, "/index.html");
}

static enum MHD_Result route_login_form(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w)
{
	const char *once = api_arg(c, "once");
	if (users_enabled()) /* no login links: each person signs in as themselves */
		return once ? send_login(c, 403, "Login links are off (--users): sign in with your name and password.")
			    : send_login(c, 200, "Sign in with your name and password.");
	if (!once)
		return send_login(c, 200, "Enter the access token (from the token file) to sign in.");
	if (!auth_link_use(once))
		return send_login(c, 403, "This login link was used already or has expired: ask for a new one, or use the token.");
	return start_session(c, "", USERS_OPERATOR, 1);
}

/* With --users: a name and its password from the users file. */
static enum MHD_Result login_user(struct MHD_Connection *c, struct api_req *rq)
{
	char name[AUTH_NAME_MAX + 8], password[1024];
	enum users_role role = USERS_NONE;
	if (form_value(rq->body, rq->len, "name", name, sizeof name) &&
	    form_value(rq->body, rq->len, "password", password, sizeof password))
		role = users_check(name, password);
	explicit_bzero(password, sizeof password);
	if (!role)
		return send_login(c, 403, "Wrong name or password.");
	fprintf(stderr, "agentd-web: signed in: %s (%s)\n", name, users_role_name(role));
	return start_session(c, name, role, 0);
}

static enum MHD_Result route_login(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w)
{
	char token[300], name[AUTH_NAME_MAX + 8];
	if (users_enabled())
		return login_user(c, rq);
	form_value(rq->body, rq->len, "name", name, sizeof name);
	if (!form_value(rq->body, rq->len, "token", token, sizeof token) || !auth_token_ok(token, strlen(token)))
		return send_login(c, 403, "Wrong token.");
	if (!auth_name_ok(name))
		return send_login(c, 400, "The name must be at most 100 bytes of printable text.");
	return start_session(c, name, USERS_OPERATOR, 0);
}

static enum MHD_Result route_metrics(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w)
{
	enum MHD_Result ret;
	json_t *r = api_ask(c, json_pack("{ss}", "op", "metrics"), &ret);
	if (!r)
		return ret;
	const char *t = json_string_value(json_object_get(r, "text"));
	char *copy = strdup(t ? t : "");
	json_decref(r);
	if (!copy)
		return MHD_NO;
	return api_send_buf(c, 200, "text/plain; version=0.0.4; charset=utf-8", copy, strlen(copy), MHD_RESPMEM_MUST_FREE,
			NULL);
}

static enum MHD_Result route_session(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w)
{
	char name[AUTH_NAME_MAX + 1];
	api_by_name(c, w, name, sizeof name);
	return api_send_json(c, 200, json_pack("{sssssbsisbsssssb}", "name", w->name, "csrf", w->session ? w->csrf : "",
					   "session", w->session, "poll_ms", CFG->poll_ms, "name_from_proxy",
					   CFG->user_header && MHD_lookup_connection_value(c, MHD_HEADER_KIND, CFG->user_header),
					   "by", name, "role", users_role_name((enum users_role)w->role), "accounts",
					   users_enabled()));
}

static enum MHD_Result route_session_name(struct MHD_Connection *c, const char *url, struct api_req *rq,
					  const struct api_who *w)
{
	json_t *b = json_loadb(rq->body ? rq->body : "", rq->len, 0, NULL);
	const char *name = json_string_value(json_object_get(b, "name"));
	if (users_enabled()) { /* the name is the account's */
		json_decref(b);
		return api_send_error(c, 403, "forbidden", "signed in with an account (--users): the name is the account's");
	}
	int e = !w->session ? -EPERM : !name ? -EINVAL : auth_session_name(w->id, name);
	json_decref(b);
	if (e)
		return api_send_error(c, 400, "bad_request", "expected {\"name\": at most 100 bytes of printable text}");
	return api_send_json(c, 200, json_pack("{sb}", "ok", 1));
}

static enum MHD_Result route_logout(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w)
{
	char cookie[256];
	if (w->session)
		auth_session_end(w->id);
	cookie_line(cookie, sizeof cookie, "", 1);
	return api_send_buf(c, 200, "application/json", "{\"ok\":true}", 11, MHD_RESPMEM_PERSISTENT, cookie);
}

/* The API routes: each passes on to its api_* function. */
#define ROUTE_API(fname, call)                                                                                  \
	static enum MHD_Result fname(struct MHD_Connection *c, const char *url, struct api_req *rq, const struct api_who *w) \
	{                                                                                                        \
		return call;                                                                                     \
	}
ROUTE_API(route_pending, api_pending(c))
ROUTE_API(route_conversations, api_conversations(c))
ROUTE_API(route_conversation, api_by_id(c, "get", "id", "conversation"))
ROUTE_API(route_tool_calls, api_by_id(c, "tool_calls", "conversation", "conversation"))
ROUTE_API(route_tool_call, api_by_id(c, "tool_call", "id", "tool_call_id"))
ROUTE_API(route_audit, api_by_id(c, "audit", "conversation", "conversation"))
ROUTE_API(route_events, api_events(c))
ROUTE_API(route_watch, api_watch(c))
ROUTE_API(route_status, api_proxy(c, json_pack("{ss}", "op", "status")))
ROUTE_API(route_runs, api_runs(c))
ROUTE_API(route_nodes, api_nodes(c))
ROUTE_API(route_resolve, api_resolve(c, rq, w))
ROUTE_API(route_settle, api_settle(c, rq, w))
ROUTE_API(route_send, convs_act(c, rq, w, CONVS_SEND))
ROUTE_API(route_cancel, convs_act(c, rq, w, CONVS_CANCEL))
ROUTE_API(route_resume, convs_act(c, rq, w, CONVS_RESUME))
ROUTE_API(route_end, convs_act(c, rq, w, CONVS_END))
ROUTE_API(route_fork, convs_act(c, rq, w, CONVS_FORK))
ROUTE_API(route_search, convs_search(c))
#undef ROUTE_API

enum {
	ROUTE_OPEN = 1,   /* served without credentials: the login form and what signs in */
	ROUTE_ORIGIN = 2, /* an open POST that must still come from our page (Origin) */
};

/* One row per method and path; "GET" answers HEAD too. Every row without
 * ROUTE_OPEN needs a session or the token, and a session's POST also passes
 * the Origin and CSRF checks, then the role the row needs (every
 * signed-in person is a viewer at least: reads). A path known under the other
 * method only is answered 404, like an unknown path. */
#define VIEWER USERS_VIEWER
#define APPROVER USERS_APPROVER
#define OPERATOR USERS_OPERATOR
static const struct route {
	const char *method, *path;
	int flags;
	route_fn *fn;
	enum users_role need;
} ROUTES[] = {
	{"GET", "/login.css", ROUTE_OPEN, route_asset, USERS_NONE},
	{"GET", "/favicon.svg", ROUTE_OPEN, route_asset, USERS_NONE},
	{"GET", "/login", ROUTE_OPEN, route_login_form, USERS_NONE},
	{"POST", "/login", ROUTE_OPEN | ROUTE_ORIGIN, route_login, USERS_NONE},
	{"GET", "/", 0, route_page, VIEWER},
	{"GET", "/index.html", 0, route_page, VIEWER},
	{"GET", "/app.js", 0, route_asset, VIEWER},
	{"GET", "/app.css", 0, route_asset, VIEWER},
	{"GET", "/metrics", 0, route_metrics, VIEWER},
	{"GET", "/api/session", 0, route_session, VIEWER},
	{"POST", "/api/session", 0, route_session_name, VIEWER},
	{"POST", "/logout", 0, route_logout, VIEWER},
	{"GET", "/api/pending", 0, route_pending, VIEWER},
	{"GET", "/api/conversations", 0, route_conversations, VIEWER},
	{"GET", "/api/conversation", 0, route_conversation, VIEWER},
	{"GET", "/api/tool_calls", 0, route_tool_calls, VIEWER},
	{"GET", "/api/tool_call", 0, route_tool_call, VIEWER},
	{"GET", "/api/audit", 0, route_audit, VIEWER},
	{"GET", "/api/events", 0, route_events, VIEWER},
	{"GET", "/api/watch", 0, route_watch, VIEWER},
	{"GET", "/api/status", 0, route_status, VIEWER},
	{"GET", "/api/runs", 0, route_runs, VIEWER},
	{"GET", "/api/nodes", 0, route_nodes, VIEWER},
	{"POST", "/api/resolve", 0, route_resolve, APPROVER},
	{"POST", "/api/settle", 0, route_settle, APPROVER},
	{"POST", "/api/send", 0, route_send, OPERATOR},
	{"POST", "/api/cancel", 0, route_cancel, OPERATOR},
	{"POST", "/api/resume", 0, route_resume, OPERATOR},
	{"POST", "/api/end", 0, route_end, OPERATOR},
	{"POST", "/api/fork", 0, route_fork, OPERATOR},
	{"GET", "/api/search", 0, route_search, VIEWER},
};
#undef VIEWER
#undef APPROVER
#undef OPERATOR

/* 403 for a person whose role does not cover the route: nothing done. */
static enum MHD_Result send_refused(struct MHD_Connection *c, const struct route *rt, const struct api_who *w)
{
	char msg[AUTH_NAME_MAX + 200];
	snprintf(msg, sizeof msg, "%s is %s %s: %s needs the %s role%s", w->name,
		 w->role == USERS_VIEWER ? "a" : "an", users_role_name((enum users_role)w->role), rt->path,
		 users_role_name(rt->need), rt->need == USERS_APPROVER ? " or operator" : "");
	return api_send_error(c, 403, "forbidden", msg);
}

static const struct route *route_find(const char *url, int post)
{
	for (size_t i = 0; i < sizeof ROUTES / sizeof *ROUTES; i++)
		if (!strcmp(ROUTES[i].method, post ? "POST" : "GET") && !strcmp(ROUTES[i].path, url))
			return &ROUTES[i];
	return NULL;
}

/* 401 in the form the asker reads: the sign-in page for the page, text for
 * a metrics scraper, JSON for the API. */
static enum MHD_Result send_unauthorized(struct MHD_Connection *c, const char *url, int get)
{
	if (is_page(url) && get)
		return send_login(c, 401, users_enabled() ? "Sign in first: your name and password."
							   : "Sign in first: enter the access token (from the token file).");
	if (!strcmp(url, "/metrics"))
		return api_send_buf(c, 401, "text/plain; charset=utf-8", "401 unauthorized: send Authorization: Bearer TOKEN\n", 51,
				MHD_RESPMEM_PERSISTENT, NULL);
	return api_send_error(c, 401, "unauthorized", "sign in, or send Authorization: Bearer TOKEN");
}

static enum MHD_Result route(struct MHD_Connection *c, const char *url, const char *method, struct api_req *rq)
{
	int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
	struct api_who w;
	if (!host_ok(c))
		return api_send_error(c, 403, "forbidden", "unexpected Host header (see --origin)");
	if (!get && !post)
		return api_send_error(c, 405, "method_not_allowed", "only GET and POST");
	if (rq->too_large)
		return api_send_error(c, 413, "too_large", "the request body is too large");

	const struct route *rt = route_find(url, post);
	if (rt && (rt->flags & ROUTE_OPEN)) {
		if ((rt->flags & ROUTE_ORIGIN) && !origin_ok(c))
			return api_send_error(c, 403, "forbidden", "cross-origin request refused");
		memset(&w, 0, sizeof w);
		return rt->fn(c, url, rq, &w);
	}
	if (!authenticate(c, &w))
		return send_unauthorized(c, url, get);
	if (post && w.session) {
		/* A cookie goes along with any request the browser makes,
		 * whoever's page asks: a POST must come from our page (Origin)
		 * and prove it read our session (the CSRF token). Checked
		 * before the lookup, so an unknown path tells nothing more. */
		const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-CSRF-Token");
		if (!origin_ok(c))
			return api_send_error(c, 403, "forbidden", "cross-origin request refused (Origin)");
		if (!t || strlen(t) != AUTH_ID_LEN || strcmp(t, w.csrf))
			return api_send_error(c, 403, "forbidden", "missing or wrong CSRF token");
	}
	if (!rt)
		return api_send_error(c, 404, "not_found", "no such page");
	if (w.role < (int)rt->need)
		return send_refused(c, rt, &w);
	return rt->fn(c, url, rq, &w);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *data, size_t *size, void **con_cls)
{
	struct api_req *rq = *con_cls;
	if (!rq) { /* headers are in; the body (if any) comes next */
		if (!(rq = calloc(1, sizeof *rq)))
			return MHD_NO;
		*con_cls = rq;
		return MHD_YES;
	}
	if (*size) {
		if (rq->len + *size > BODY_MAX) {
			rq->too_large = 1;
		} else if (!rq->too_large) {
			char *b = realloc(rq->body, rq->len + *size + 1);
			if (!b)
				return MHD_NO;
			memcpy(b + rq->len, data, *size);
			rq->body = b;
			rq->len += *size;
			b[rq->len] = 0;
		}
		*size = 0;
		return MHD_YES;
	}
	return route(c, url, method, rq);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct api_req *rq = *con_cls;
	if (rq) {
		free(rq->body);
		free(rq);
	}
	*con_cls = NULL;
}

int http_start(const struct http_config *cfg, int listen_fd, struct http_server **out, char *msg, size_t msglen)
{
	struct http_server *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	CFG = cfg;
	api_init(cfg->socket, cfg->user_header);
	s->cfg = cfg;
	s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
				MHD_USE_ERROR_LOG, 0, NULL, NULL, handle, s,
				MHD_OPTION_LISTEN_SOCKET, listen_fd,
				MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
				MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
				MHD_OPTION_END);
	if (!s->d) {
		free(s);
		snprintf(msg, msglen, "libmicrohttpd could not start");
		return -EIO;
	}
	*out = s;
	return 0;
}

void http_stop(struct http_server *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);
	free(s);
}
