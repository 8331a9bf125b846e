/* convs.c: acting on a conversation and searching them (see convs.h). */
#include "web/convs.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- acts ---- */

/* A person's act in agentd-web's log (stderr): who did what to which
 * conversation. Names and ids hold no control characters (auth_name_ok,
 * and agentd accepted the id). */
static void act_log(const char *who, const char *what, const char *conv, const char *more)
{
	fprintf(stderr, "agentd-web: %s by %s: %s%s%s\n", what, who, conv, more ? " " : "", more ? more : "");
}

/* The person's name into the conversation's metadata under key (update
 * merges it): the protocol's cancel, resume and send take no `by`. Sets
 * "recorded" in reply, and "record_error" when agentd refused it (the act
 * itself stands). */
static void record_by(json_t *reply, const char *conv, const char *key, const char *name)
{
	json_t *r = NULL;
	ctl_conn *cc = NULL;
	json_t *req = json_pack("{sssss{ss}}", "op", "update", "conversation", conv, "metadata", key, name);
	int e = !req ? -ENOMEM : api_connect(&cc);
	if (!e)
		e = ctl_request(cc, req, &r);
	ctl_close(cc);
	json_decref(req);
	int ok = !e && json_is_true(json_object_get(r, "ok"));
	json_object_set_new(reply, "recorded", json_boolean(ok));
	if (!ok)
		json_object_set_new(reply, "record_error",
				    e ? json_string(ctl_strerror(e)) : json_incref(json_object_get(r, "message")));
	json_decref(r);
}

/* The body of an act: {"conversation"} and, for send, "text" and
 * "event_id"?, for fork "seq"? and "new_conversation"?. */
static int act_body(struct MHD_Connection *c, struct api_req *rq, enum convs_act a, json_t **b, enum MHD_Result *ret)
{
	static const char *const plain[] = { "conversation", NULL };
	static const char *const send[] = { "conversation", "text", "event_id", NULL };
	static const char *const fork[] = { "conversation", "seq", "new_conversation", NULL };
	if (api_body(c, rq, a == CONVS_SEND ? send : a == CONVS_FORK ? fork : plain, b, ret))
		return 1;
	json_t *text = json_object_get(*b, "text"), *eid = json_object_get(*b, "event_id");
	json_t *seq = json_object_get(*b, "seq"), *nc = json_object_get(*b, "new_conversation");
	const char *why = NULL;
	if (!json_is_string(json_object_get(*b, "conversation")))
		why = "expected conversation (an id)";
	else if (a == CONVS_SEND && (!json_is_string(text) || !json_string_length(text)))
		why = "expected text: the message, not empty";
	else if (eid && !json_is_string(eid))
		why = "event_id must be a string";
	else if (seq && (!json_is_integer(seq) || json_integer_value(seq) < 1))
		why = "seq must be a whole number from 1 (the fork keeps events 1 to seq)";
	else if (nc && !json_is_string(nc))
		why = "new_conversation must be an id";
	if (!why)
		return 0;
	json_decref(*b);
	*ret = api_send_error(c, 400, "bad_request", why);
	return 1;
}

/* fork's request: the source's metadata with forked_by added (a fork's
 * metadata is given whole) and without ended_by (a fork of an ended
 * conversation is not ended), at seq (default: the source's last). NULL
 * with the request answered when the source cannot be read. */
static json_t *fork_req(struct MHD_Connection *c, json_t *b, const char *name, enum MHD_Result *ret)
{
	json_t *src = api_ask(c, json_pack("{sssO}", "op", "get", "conversation", json_object_get(b, "conversation")), ret);
	if (!src)
		return NULL;
	json_t *conv = json_object_get(src, "conversation");
	json_t *meta = json_deep_copy(json_object_get(conv, "metadata"));
	json_t *seq = json_object_get(b, "seq") ?: json_object_get(conv, "last_seq");
	json_t *req = json_pack("{sssOsO}", "op", "fork", "conversation", json_object_get(b, "conversation"), "seq", seq);
	json_object_del(meta, "ended_by");
	if (!meta || !req || json_object_set_new(meta, "forked_by", json_string(name)) ||
	    json_object_set(req, "metadata", meta) ||
	    (json_object_get(b, "new_conversation") &&
	     json_object_set(req, "new_conversation", json_object_get(b, "new_conversation")))) {
		json_decref(req);
		req = NULL;
		*ret = api_send_error(c, 500, "internal", "out of memory");
	}
	json_decref(meta);
	json_decref(src);
	return req;
}

/* An act of a person on a conversation, as agentctl's send, cancel,
 * resume, fork and end do it; logged with the person's name and recorded
 * in the conversation (docs/web.md, "Acting on a conversation"). */
enum MHD_Result convs_act(struct MHD_Connection *c, struct api_req *rq, const struct api_who *w, enum convs_act a)
{
	static const char *const what[] = { "sent a message", "cancelled the turn", "resumed", "ended", "forked" };
	enum MHD_Result ret;
	json_t *b = NULL, *req = NULL;
	char name[AUTH_NAME_MAX + 1], more[160] = "";
	if (act_body(c, rq, a, &b, &ret))
		return ret;
	api_by_name(c, w, name, sizeof name);
	json_t *conv = json_object_get(b, "conversation");
	switch (a) {
	case CONVS_SEND:
		req = json_pack("{sssOs{sO}}", "op", "send", "conversation", conv, "content", "text", json_object_get(b, "text"));
		if (req && json_object_get(b, "event_id") && json_object_set(req, "event_id", json_object_get(b, "event_id"))) {
			json_decref(req);
			req = NULL;
		}
		break;
	case CONVS_CANCEL: req = json_pack("{sssO}", "op", "cancel", "conversation", conv); break;
	case CONVS_RESUME: req = json_pack("{sssO}", "op", "resume", "conversation", conv); break;
	case CONVS_END: /* one update: ended and by whom, together or not at all */
		req = json_pack("{sssOsss{ss}}", "op", "update", "conversation", conv, "status", "ended", "metadata",
				"ended_by", name);
		break;
	case CONVS_FORK:
		if (!(req = fork_req(c, b, name, &ret))) {
			json_decref(b);
			return ret;
		}
		break;
	}
	json_t *r = api_ask(c, req, &ret);
	if (!r) {
		json_decref(b);
		return ret;
	}
	const char *id = json_string_value(conv);
	if (a == CONVS_SEND && !json_is_true(json_object_get(r, "duplicate"))) {
		snprintf(more, sizeof more, "(seq %lld)", (long long)json_integer_value(json_object_get(r, "seq")));
		record_by(r, id, "sent_by", name);
	} else if (a == CONVS_CANCEL && json_is_true(json_object_get(r, "cancelled"))) {
		record_by(r, id, "cancelled_by", name);
	} else if (a == CONVS_RESUME && json_is_true(json_object_get(r, "resumed"))) {
		record_by(r, id, "resumed_by", name);
	} else if (a == CONVS_FORK) {
		snprintf(more, sizeof more, "as %s at seq %lld", json_string_value(json_object_get(r, "conversation")) ?: "?",
			 (long long)json_integer_value(json_object_get(json_object_get(r, "forked_from"), "seq")));
	}
	/* an act that did nothing (a send seen before, nothing to cancel or resume) is not logged */
	if ((a != CONVS_SEND || !json_is_true(json_object_get(r, "duplicate"))) &&
	    (a != CONVS_CANCEL || json_is_true(json_object_get(r, "cancelled"))) &&
	    (a != CONVS_RESUME || json_is_true(json_object_get(r, "resumed"))))
		act_log(name, what[a], id, more[0] ? more : NULL);
	json_decref(b);
	return api_send_json(c, 200, r);
}

/* ---- search ---- */

#define SEARCH_SCAN_MAX 1000  /* conversations read by one search */
#define SEARCH_EVENTS 20      /* the last events of each searched */
#define SEARCH_MATCHES_MAX 100
#define SEARCH_CHUNK 100      /* conversations whose events one pipelined connection asks for */
#define SEARCH_Q_MAX 256
#define SNIPPET_MAX 200

/* Where q (ASCII letters in any case) is in s, or -1. */
static long find_text(const char *s, size_t n, const char *q, size_t ql)
{
	for (size_t i = 0; ql <= n && i <= n - ql; i++) {
		size_t k = 0;
		while (k < ql && tolower((unsigned char)s[i + k]) == tolower((unsigned char)q[k]))
			k++;
		if (k == ql)
			return (long)i;
	}
	return -1;
}

/* The first string in v (its values, at any depth) holding q: *at its offset. */
static json_t *json_find_text(json_t *v, const char *q, size_t ql, long *at, int depth)
{
	const char *k;
	size_t i;
	json_t *x, *hit;
	if (json_is_string(v))
		return (*at = find_text(json_string_value(v), json_string_length(v), q, ql)) >= 0 ? v : NULL;
	if (depth > 70)
		return NULL;
	json_object_foreach(v, k, x)
		if ((hit = json_find_text(x, q, ql, at, depth + 1)))
			return hit;
	json_array_foreach(v, i, x)
		if ((hit = json_find_text(x, q, ql, at, depth + 1)))
			return hit;
	return NULL;
}

/* Up to SNIPPET_MAX bytes of s around at, cut at UTF-8 boundaries. */
static json_t *snippet(json_t *s, long at)
{
	const char *t = json_string_value(s);
	size_t n = json_string_length(s), from = at > 60 ? (size_t)at - 60 : 0, to;
	while (from > 0 && ((unsigned char)t[from] & 0xc0) == 0x80)
		from--;
	to = n - from > SNIPPET_MAX ? from + SNIPPET_MAX : n;
	while (to < n && to > from && ((unsigned char)t[to] & 0xc0) == 0x80)
		to--;
	return json_stringn(t + from, to - from);
}

/* A conversation found by its id or metadata: the match, else NULL. */
static json_t *match_conv(json_t *conv, const char *q, size_t ql)
{
	const char *k;
	json_t *v, *id = json_object_get(conv, "id");
	if (find_text(json_string_value(id), json_string_length(id), q, ql) >= 0)
		return json_pack("{sOss}", "conversation", conv, "match", "id");
	json_object_foreach(json_object_get(conv, "metadata"), k, v)
		if (find_text(k, strlen(k), q, ql) >= 0 || find_text(json_string_value(v), json_string_length(v), q, ql) >= 0)
			return json_pack("{sOsss{ss}}", "conversation", conv, "match", "metadata", "pair", k,
					 json_string_value(v));
	return NULL;
}

/* A conversation found by the text of its last events (the newest first). */
static json_t *match_events(json_t *conv, json_t *reply, const char *q, size_t ql)
{
	json_t *evs = json_object_get(reply, "events");
	long at;
	for (size_t i = json_array_size(evs); i-- > 0;) {
		json_t *ev = json_array_get(evs, i), *hit = json_find_text(json_object_get(ev, "content"), q, ql, &at, 0);
		if (hit)
			return json_pack("{sOsssOsOso}", "conversation", conv, "match", "event", "seq", json_object_get(ev, "seq"),
					 "type", json_object_get(ev, "type"), "text", snippet(hit, at));
	}
	return NULL;
}

/* Conversations whose id, metadata or last events' text hold q: one page
 * of the list (at most SEARCH_SCAN_MAX, in id order, after the cursor),
 * the events of those not found by id or metadata asked for in pipelined
 * chunks, at most SEARCH_MATCHES_MAX found; `next` goes on after the last
 * conversation looked at. */
enum MHD_Result convs_search(struct MHD_Connection *c)
{
	const char *q, *after = api_arg(c, "after");
	enum MHD_Result ret;
	if (!api_id_arg(c, "q", &q, &ret))
		return ret;
	size_t ql = strlen(q);
	if (ql > SEARCH_Q_MAX)
		return api_send_error(c, 400, "bad_request", "'q' is at most 256 bytes");
	json_t *req = json_pack("{sssi}", "op", "list", "limit", SEARCH_SCAN_MAX);
	if (req && after && json_object_set_new(req, "after", json_string(after))) {
		json_decref(req);
		return api_send_error(c, 400, "bad_request", "'after' is not valid UTF-8");
	}
	json_t *page = api_ask(c, req, &ret);
	if (!page)
		return ret;
	json_t *convs = json_object_get(page, "conversations"), *matches = json_array(), *next = NULL;
	size_t n = json_array_size(convs), scanned = 0;
	int e = !matches;
	for (size_t start = 0; !e && start < n && !next; start += SEARCH_CHUNK) {
		size_t end = start + SEARCH_CHUNK < n ? start + SEARCH_CHUNK : n;
		json_t *found[SEARCH_CHUNK] = { 0 }, *reqs = json_array(), *replies = NULL;
		for (size_t i = start; reqs && i < end; i++)
			if (!(found[i - start] = match_conv(json_array_get(convs, i), q, ql)))
				json_array_append_new(reqs, json_pack("{sssOsi}", "op", "events", "conversation",
								      json_object_get(json_array_get(convs, i), "id"), "limit",
								      SEARCH_EVENTS));
		ctl_conn *cc = NULL;
		e = !reqs ? -ENOMEM : json_array_size(reqs) ? api_connect(&cc) : 0;
		if (!e && json_array_size(reqs))
			e = ctl_pipeline(cc, reqs, &replies);
		ctl_close(cc);
		json_decref(reqs);
		for (size_t i = start, k = 0; i < end; i++) {
			json_t *conv = json_array_get(convs, i), *m = found[i - start];
			if (!m && !e) /* a conversation deleted meanwhile has no events: not found */
				m = match_events(conv, json_array_get(replies, k++), q, ql);
			if (next || e) {
				json_decref(m);
				continue;
			}
			scanned++;
			if (m)
				json_array_append_new(matches, m);
			if (json_array_size(matches) == SEARCH_MATCHES_MAX && (i + 1 < n || json_object_get(page, "next")))
				next = json_incref(json_object_get(conv, "id"));
		}
		json_decref(replies);
	}
	if (e) {
		json_decref(matches);
		json_decref(page);
		return api_send_error(c, 502, "agentd_unreachable", ctl_strerror(e));
	}
	if (!next)
		next = json_incref(json_object_get(page, "next"));
	json_t *out = json_pack("{sosI}", "matches", matches, "scanned", (json_int_t)scanned);
	if (out && next)
		json_object_set(out, "next", next);
	json_decref(next);
	json_decref(page);
	return api_send_json(c, 200, out);
}
