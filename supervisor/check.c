/*
 * check.c: `agentd check`, the store's consistency check.
 *
 * The log is the truth; everything else is derived from it or caches it. This
 * reads a store (read-only, safe while agentd runs) and reports every place
 * where a derived row disagrees with the log: seqs not 1..N (or F..N for a
 * log that begins at F after a summary standing in for 1..F-1), a tool call row
 * without its tool_call event or the other way round, a call settled twice, a
 * row's status against its settlement, an expiry without its pending row (or
 * the reverse), an event_id the idempotency index does not send back to its
 * event or an index row that leads to no such event, a tool call row that no
 * conversation's index reaches, fsm_state or status against what the
 * log's tail owes; runs (each of an existing conversation, a turn's
 * attempts 1..n without a gap, at most one running per conversation and
 * none in an ended one) and expiry warnings (each of an existing pending
 * call with a deadline).
 */
#include "supervisor/check.h"
#include "conv/conv.h"
#include "common/config.h"
#include "common/cron.h"
#include "common/jsonmp.h"
#include "store/store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct ck {
	FILE *out;
	store_txn *t;
	const char *conv;
	int problems;
	uint64_t nevents, ncalls;
	/* per conversation */
	uint64_t prev_seq;
	uint64_t last_ctx;
	json_t *calls;    /* tool_call_id -> {"executor", "settled": n, "status"} */
	json_t *events;   /* the working set (after the latest summary), for tail_decide */
	uint64_t after;   /* the latest summary's to_seq */
	uint64_t first;   /* where the log begins: 1, or after a summary (a fork's) */
	json_t *outside;  /* tool_call_id -> settlements, of calls whose tool_call lies before first */
	json_t *expiries; /* tool_call_id -> {"deadline", "conversation"} (all conversations) */
	json_t *eids;     /* event_id -> seq, of the conversation's events */
	json_t *rows;     /* tool_call_id -> true: rows reached through their conversation's index */
	int oom;          /* a record of the above could not be kept: the check is incomplete */
};

/* What the checks above remember must be whole: one entry lost (out of
 * memory) could turn a problem into "consistent". rc is jansson's 0 or -1. */
static void kept(struct ck *c, int rc)
{
	if (rc)
		c->oom = 1;
}

static const char *str_or(const char *s, const char *d)
{
	return s ? s : d;
}

static void problem(struct ck *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct ck *c, const char *fmt, ...)
{
	va_list ap;
	c->problems++;
	fprintf(c->out, "%s: ", c->conv ? c->conv : "store");
	va_start(ap, fmt);
	vfprintf(c->out, fmt, ap);
	va_end(ap);
	fputc('\n', c->out);
}

/* The seq follows the one before it, from where the log begins. */
static void event_seq_check(struct ck *c, const struct store_event *ev)
{
	if (ev->seq != c->prev_seq + 1 && c->first > 1)
		problem(c, "seq %llu follows %llu: the log must be %llu..N without a gap", (unsigned long long)ev->seq,
			(unsigned long long)c->prev_seq, (unsigned long long)c->first);
	else if (ev->seq != c->prev_seq + 1)
		problem(c, "seq %llu follows %llu: the log must be 1..N without a gap", (unsigned long long)ev->seq,
			(unsigned long long)c->prev_seq);
	c->prev_seq = ev->seq;
}

/* The idempotency index must send a repeated event_id to this event:
 * anything else would append a retried send twice. */
static void event_id_check(struct ck *c, const struct store_event *ev)
{
	uint64_t at = 0;
	int e = store_event_id_seq(c->t, c->conv, (const char *)ev->event_id.ptr, ev->event_id.len, &at);
	if (e)
		problem(c, "seq %llu: its event_id %.*s is not in the idempotency index (%s)", (unsigned long long)ev->seq,
			(int)ev->event_id.len, (const char *)ev->event_id.ptr, store_strerror(e));
	else if (at != ev->seq)
		problem(c, "seq %llu: its event_id %.*s is indexed to seq %llu", (unsigned long long)ev->seq,
			(int)ev->event_id.len, (const char *)ev->event_id.ptr, (unsigned long long)at);
	char eid[STORE_EVENT_ID_MAX + 1];
	snprintf(eid, sizeof eid, "%.*s", (int)ev->event_id.len, (const char *)ev->event_id.ptr);
	kept(c, json_object_set_new_nocheck(c->eids, eid, json_integer((json_int_t)ev->seq))); /* any bytes */
}

/* A tool_result or resolution settles a call once. */
static void event_settles(struct ck *c, const struct store_event *ev, const char *type, const char *id,
			  json_t *content)
{
	json_t *call = id ? json_object_get(c->calls, id) : NULL;
	if (!call && id && c->first > 1) {
		/* Its tool_call may be in what the summary stands in for:
		 * only settling it twice is wrong. */
		json_int_t n = json_integer_value(json_object_get(c->outside, id)) + 1;
		kept(c, json_object_set_new(c->outside, id, json_integer(n)));
		if (n > 1)
			problem(c, "tool call %s settled %lld times (seq %llu)", id, (long long)n,
				(unsigned long long)ev->seq);
	} else if (!call) {
		problem(c, "seq %llu: %s for tool call %s that has no tool_call event", (unsigned long long)ev->seq, type,
			id ? id : "(none)");
	} else {
		json_int_t n = json_integer_value(json_object_get(call, "settled")) + 1;
		kept(c, json_object_set_new(call, "settled", json_integer(n)));
		kept(c, json_object_set(call, "status", json_object_get(content, "status")));
		if (n > 1)
			problem(c, "tool call %s settled %lld times (seq %llu)", id, (long long)n,
				(unsigned long long)ev->seq);
	}
}

/* What each type of event must say: a tool_call once, a settlement of a
 * known call once, one model answer per turn context. */
static void event_content_check(struct ck *c, const struct store_event *ev, const char *type, json_t *content)
{
	const char *id = json_string_value(json_object_get(content, "tool_call_id"));
	if (!strcmp(type, "tool_call")) {
		if (!id)
			problem(c, "seq %llu: tool_call without tool_call_id", (unsigned long long)ev->seq);
		else if (json_object_get(c->calls, id))
			problem(c, "seq %llu: tool_call %s appears twice", (unsigned long long)ev->seq, id);
		else
			kept(c, json_object_set_new(c->calls, id, json_pack("{s:O, s:i, s:s}", "executor",
						    json_object_get(content, "executor"), "settled", 0, "status", "")));
	} else if (!strcmp(type, "tool_result") || !strcmp(type, "resolution")) {
		event_settles(c, ev, type, id, content);
	} else if (!strcmp(type, "assistant_msg")) {
		json_t *cs = json_object_get(content, "context_seq");
		uint64_t ctx = json_is_integer(cs) ? (uint64_t)json_integer_value(cs) : 0;
		if (!json_is_integer(cs) || ctx >= ev->seq)
			problem(c, "seq %llu: assistant_msg with a bad context_seq", (unsigned long long)ev->seq);
		else if (c->last_ctx && ctx <= c->last_ctx)
			problem(c, "seq %llu: a second model answer for context_seq %llu (the turn after %llu)",
				(unsigned long long)ev->seq, (unsigned long long)ctx, (unsigned long long)c->last_ctx);
		c->last_ctx = ctx;
	}
}

static int on_event(void *arg, const struct store_event *ev)
{
	struct ck *c = arg;
	char type[40];
	c->nevents++;
	event_seq_check(c, ev);
	snprintf(type, sizeof type, "%.*s", (int)ev->type.len, (const char *)ev->type.ptr);
	if (ev->event_id.len)
		event_id_check(c, ev);
	json_t *content;
	if (jsonmp_decode(ev->content.ptr, ev->content.len, &content) == -ENOMEM) {
		kept(c, -1); /* not the record's fault */
		return 0;
	}
	if (!json_is_object(content)) {
		problem(c, "seq %llu (%s): content is not a JSON object", (unsigned long long)ev->seq, type);
		json_decref(content);
		return 0;
	}
	event_content_check(c, ev, type, content);
	if (ev->seq > c->after)
		kept(c, json_array_append_new(c->events, json_pack("{s:I, s:s, s:o}", "seq", (json_int_t)ev->seq, "type",
								   type, "content", content)));
	else
		json_decref(content);
	return 0;
}

static int on_row(void *arg, const struct store_tool_call *tc)
{
	struct ck *c = arg;
	char id[STORE_ID_MAX + 1];
	snprintf(id, sizeof id, "%.*s", (int)tc->id.len, (const char *)tc->id.ptr);
	c->ncalls++;
	kept(c, json_object_set_new_nocheck(c->rows, id, json_true()));
	if (tc->conversation.len != strlen(c->conv) || memcmp(tc->conversation.ptr, c->conv, tc->conversation.len))
		problem(c, "tool call row %s names conversation %.*s", id, (int)tc->conversation.len,
			(const char *)tc->conversation.ptr);
	json_t *call = json_object_get(c->calls, id);
	if (!call) {
		problem(c, "tool call row %s has no tool_call event in the log", id);
		return 0;
	}
	kept(c, json_object_set_new(call, "row", json_true()));
	const char *ex = json_string_value(json_object_get(call, "executor"));
	const char *want = tc->executor == STORE_EXEC_HUMAN ? "human" : "server";
	if (ex && strcmp(ex, want))
		problem(c, "tool call %s: row executor %s, log says %s", id, want, ex);
	int settled = (int)json_integer_value(json_object_get(call, "settled"));
	const char *st = store_tc_status_name(tc->status);
	int unsettled = tc->status == STORE_TC_PENDING || tc->status == STORE_TC_UNKNOWN;
	if (unsettled && settled)
		problem(c, "tool call %s: row %s but settled in the log", id, st);
	if (!unsettled && !settled)
		problem(c, "tool call %s: row %s but not settled in the log", id, st);
	const char *logged = str_or(json_string_value(json_object_get(call, "status")), "?");
	if (settled && strcmp(st, logged))
		problem(c, "tool call %s: row %s, log settled it %s", id, st, logged);
	json_t *e = json_object_get(c->expiries, id);
	if (tc->status == STORE_TC_PENDING && tc->deadline > 0) {
		if (!e || json_integer_value(json_object_get(e, "deadline")) != tc->deadline)
			problem(c, "tool call %s: pending with deadline %lld but no matching expiry", id,
				(long long)tc->deadline);
	} else if (e) {
		problem(c, "tool call %s: an expiry is scheduled but the call is %s%s", id, st,
			tc->deadline ? "" : " without a deadline");
	}
	if (e)
		kept(c, json_object_set_new(e, "seen", json_true()));
	return 0;
}

/* An idempotency index row must lead to an event that carries its event_id
 * (one that leads to another seq was named from that event's side). */
static int on_eid(void *arg, const char *id, size_t len, uint64_t seq)
{
	struct ck *c = arg;
	char eid[STORE_EVENT_ID_MAX + 1];
	snprintf(eid, sizeof eid, "%.*s", (int)len, id);
	if (!json_object_get(c->eids, eid))
		problem(c, "the idempotency index sends event_id %s to seq %llu, which holds no event with it", eid,
			(unsigned long long)seq);
	return 0;
}

/* A tool call row no conversation's index reaches (its conversation is gone,
 * or the index lost it): found only by walking every row. */
static int on_any_row(void *arg, const struct store_tool_call *tc)
{
	struct ck *c = arg;
	char id[STORE_ID_MAX + 1];
	snprintf(id, sizeof id, "%.*s", (int)tc->id.len, (const char *)tc->id.ptr);
	if (json_object_get(c->rows, id))
		return 0;
	c->ncalls++;
	problem(c, "tool call row %s (conversation %.*s) is not in any conversation's index", id,
		(int)tc->conversation.len, (const char *)tc->conversation.ptr);
	return 0;
}

static int on_expiry(void *arg, const struct store_expiry *e)
{
	struct ck *c = arg;
	char id[STORE_ID_MAX + 1];
	snprintf(id, sizeof id, "%.*s", (int)e->tool_call_id.len, (const char *)e->tool_call_id.ptr);
	kept(c, json_object_set_new(c->expiries, id, json_pack("{s:I, s:s#}", "deadline", (json_int_t)e->deadline,
								"conversation", (const char *)e->conversation.ptr,
								(int)e->conversation.len)));
	return 0;
}

/* ---- runs and expiry warnings ------------------------------------------ */

struct runs_ck {
	struct ck *c;
	char conv[STORE_ID_MAX + 1]; /* the conversation whose runs come now */
	int have, ended;
	struct store_run prev;       /* its run before this one (id 0: none) */
	uint64_t running;            /* the id of its running run, 0: none seen */
	uint64_t n;
};

static int on_run(void *arg, store_bytes conv, const struct store_run *r)
{
	struct runs_ck *rc = arg;
	struct ck *c = rc->c;
	rc->n++;
	if (!conv.len) {
		c->conv = NULL;
		problem(c, "run %llu (%s, attempt %u) belongs to no conversation", (unsigned long long)r->id,
			str_or(store_run_status_name(r->status), "?"), r->attempt);
		rc->have = 0;
		return 0;
	}
	if (!rc->have || conv.len != strlen(rc->conv) || memcmp(conv.ptr, rc->conv, conv.len)) {
		struct store_conv cv;
		snprintf(rc->conv, sizeof rc->conv, "%.*s", (int)conv.len, (const char *)conv.ptr);
		rc->have = 1;
		rc->ended = store_conv_get(c->t, rc->conv, &cv) == 0 && cv.status == STORE_ENDED;
		rc->prev.id = 0;
		rc->running = 0;
	}
	c->conv = rc->conv;
	/* A turn run again is the next attempt of the run before it (the same
	 * from_seq): attempts go 1..n without a gap (docs/protocol.md, "Runs"). */
	if (r->attempt > 1 && (!rc->prev.id || rc->prev.from_seq != r->from_seq || rc->prev.attempt + 1 != r->attempt))
		problem(c, "run %llu: attempt %u does not follow the run before it (%s): a turn's attempts go 1..n "
			   "without a gap", (unsigned long long)r->id, r->attempt,
			rc->prev.id ? "another turn, or another attempt" : "none");
	if (r->status == STORE_RUN_RUNNING) {
		if (rc->running)
			problem(c, "runs %llu and %llu are both running: at most one run of a conversation is",
				(unsigned long long)rc->running, (unsigned long long)r->id);
		else
			rc->running = r->id;
		if (rc->ended)
			problem(c, "run %llu is running but the conversation is ended", (unsigned long long)r->id);
	}
	rc->prev = *r;
	c->conv = NULL;
	return 0;
}

static int on_warning(void *arg, const struct store_expiry *w)
{
	struct ck *c = arg;
	char id[STORE_ID_MAX + 1], conv[STORE_ID_MAX + 1];
	struct store_tool_call tc;
	snprintf(id, sizeof id, "%.*s", (int)w->tool_call_id.len, (const char *)w->tool_call_id.ptr);
	snprintf(conv, sizeof conv, "%.*s", (int)w->conversation.len, (const char *)w->conversation.ptr);
	c->conv = conv;
	int e = store_tool_call_get(c->t, id, &tc);
	if (e)
		problem(c, "expiry warning of tool call %s: %s", id,
			e == STORE_E_NOTFOUND ? "no such tool call" : store_strerror(e));
	else if (tc.status != STORE_TC_PENDING)
		problem(c, "expiry warning of tool call %s, which is %s: a stale warning row", id,
			str_or(store_tc_status_name(tc.status), "?"));
	else if (tc.deadline <= 0)
		problem(c, "expiry warning of tool call %s, which has no deadline", id);
	if (!e && (tc.conversation.len != w->conversation.len ||
		   memcmp(tc.conversation.ptr, w->conversation.ptr, w->conversation.len)))
		problem(c, "expiry warning of tool call %s names this conversation; the call is %.*s's", id,
			(int)tc.conversation.len, (const char *)tc.conversation.ptr);
	c->conv = NULL;
	return 0;
}

/* fsm_state and status against what the log's tail owes. */
static void check_state(struct ck *c, const struct store_conv *conv)
{
	struct tail tl;
	int te = tail_decide(c->events, c->after, &tl);
	if (te == -ENOMEM) {
		kept(c, -1); /* incomplete, not a problem of the store's */
		return;
	}
	if (te) {
		problem(c, "the log's tail holds a malformed event");
		return;
	}
	json_t *fsm = NULL;
	if (conv->fsm_state.len && jsonmp_decode(conv->fsm_state.ptr, conv->fsm_state.len, &fsm) == -ENOMEM)
		kept(c, -1); /* the checks of fsm_state below would pass unread */
	const char *fstate = json_string_value(json_object_get(fsm, "state"));
	int humans = 0, servers = 0, unknowns = 0;
	size_t i;
	json_t *call;
	json_array_foreach(tl.unsettled, i, call) {
		const char *ex = json_string_value(json_object_get(call, "executor"));
		struct store_tool_call row;
		const char *id = json_string_value(json_object_get(call, "tool_call_id"));
		if (ex && !strcmp(ex, "human"))
			humans++;
		else if (id && !store_tool_call_get(c->t, id, &row) && row.status == STORE_TC_UNKNOWN)
			unknowns++; /* awaited as a person's call is (docs/tools.md) */
		else
			servers++;
	}
	const char *st = store_status_name(conv->status);
	if (conv->status == STORE_ENDED)
		goto out; /* closed: a worker may still finish, nothing is owed */
	if (conv->status == STORE_SUSPENDED && !humans && !unknowns)
		problem(c, "status suspended but no human tool call is pending in the log, and none is unknown");
	if (conv->status == STORE_SUSPENDED && fstate && strcmp(fstate, "awaiting_input"))
		problem(c, "status suspended but fsm_state is %s", fstate);
	if (conv->status == STORE_IDLE && tl.action != TAIL_IDLE)
		problem(c, "status idle but the log owes %s", tl.action == TAIL_TURN ? "a model turn" : "tool calls");
	if (conv->status == STORE_PAUSED && tl.action != TAIL_TURN)
		problem(c, "status paused but the log owes %s", tl.action == TAIL_IDLE ? "nothing" : "tool calls");
	if (conv->status == STORE_IDLE && fstate && strcmp(fstate, "idle"))
		problem(c, "status idle but fsm_state is %s", fstate);
	if (humans && !servers && conv->status != STORE_SUSPENDED && conv->status != STORE_ENDED &&
	    conv->status != STORE_ACTIVE)
		problem(c, "%d human tool call(s) pending in the log but status is %s", humans, st);
	if (fstate && !strcmp(fstate, "awaiting_input") && conv->status == STORE_SUSPENDED) {
		json_t *pend = json_object_get(fsm, "pending");
		json_array_foreach(tl.unsettled, i, call) {
			const char *id = json_string_value(json_object_get(call, "tool_call_id"));
			const char *ex = json_string_value(json_object_get(call, "executor"));
			struct store_tool_call row;
			int unknown = !(ex && !strcmp(ex, "human")) && id && !store_tool_call_get(c->t, id, &row) &&
				      row.status == STORE_TC_UNKNOWN;
			if (((ex && !strcmp(ex, "human")) || unknown) && !json_object_get(pend, id))
				problem(c, "fsm_state.pending lacks %s call %s", unknown ? "unknown" : "pending", id);
		}
	}
out:
	json_decref(fsm);
	tail_free(&tl);
}

static int check_conv(struct ck *c, const char *id)
{
	struct store_conv conv;
	struct store_summary sum;
	int e = store_conv_get(c->t, id, &conv);
	if (e) {
		problem(c, "conversation record: %s", store_strerror(e));
		return 0;
	}
	json_t *settings;
	if (jsonmp_decode(conv.settings.ptr, conv.settings.len, &settings) == -ENOMEM)
		kept(c, -1); /* incomplete, not a problem of the store's */
	else if (!json_is_object(settings))
		problem(c, "settings are not a JSON object");
	json_decref(settings);
	c->last_ctx = 0;
	c->after = 0;
	c->first = 1;
	if ((e = store_event_first_seq(c->t, id, &c->first)))
		problem(c, "where the log begins: %s", store_strerror(e));
	c->prev_seq = c->first - 1;
	c->outside = json_object();
	c->calls = json_object();
	c->events = json_array();
	c->eids = json_object();
	kept(c, !c->calls || !c->events || !c->eids || !c->outside ? -1 : 0);
	uint64_t last = 0;
	store_event_latest_seq(c->t, id, &last);
	e = store_summary_latest(c->t, id, &sum);
	if (e == 0) {
		c->after = sum.to_seq;
		if (sum.from_seq > sum.to_seq || sum.to_seq > last)
			problem(c, "summary %llu-%llu does not fit the log (last seq %llu)", (unsigned long long)sum.from_seq,
				(unsigned long long)sum.to_seq, (unsigned long long)last);
	} else if (e != STORE_E_NOTFOUND) {
		problem(c, "summary: %s", store_strerror(e));
	}
	/* A log may begin after seq 1 only where a summary stands in for the
	 * seqs before it (the latest summary covers 1..its to_seq). */
	if (c->first > 1 && (e != 0 || c->after + 1 < c->first))
		problem(c, "the log begins at seq %llu but no summary stands in for seqs 1..%llu",
			(unsigned long long)c->first, (unsigned long long)c->first - 1);
	struct store_range r = { 0 };
	while ((e = store_events_stream(c->t, id, &r, on_event, c))) {
		/* The stream stops at a record it cannot decode; name it, then go
		 * on past it (each retry starts further on, so this ends). */
		uint64_t bad = c->prev_seq + 1;
		problem(c, "events: the record of seq %llu (or the first after it): %s", (unsigned long long)bad,
			store_strerror(e));
		if (e != STORE_E_CORRUPT || bad <= r.after)
			break;
		r.after = c->prev_seq = bad;
		if (bad >= last)
			break;
	}
	if (c->prev_seq != last)
		problem(c, "the last seq is %llu but the log ends at %llu", (unsigned long long)last,
			(unsigned long long)c->prev_seq);
	if ((e = store_event_ids_each(c->t, id, on_eid, c)))
		problem(c, "idempotency index: %s", store_strerror(e));
	if ((e = store_tool_calls_list(c->t, id, 0, on_row, c)))
		problem(c, "tool calls: %s", store_strerror(e));
	const char *k;
	json_t *v;
	json_object_foreach(c->calls, k, v)
		if (!json_object_get(v, "row"))
			problem(c, "tool call %s is in the log but has no row", k);
	check_state(c, &conv);
	json_decref(c->calls);
	json_decref(c->events);
	json_decref(c->eids);
	json_decref(c->outside);
	return 0;
}

struct ids {
	char (*id)[STORE_ID_MAX + 1];
	size_t n, cap;
};

static int collect(void *arg, const char *id, size_t len)
{
	struct ids *ids = arg;
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 64;
		void *p = realloc(ids->id, cap * sizeof *ids->id);
		if (!p)
			return -ENOMEM;
		ids->id = p;
		ids->cap = cap;
	}
	snprintf(ids->id[ids->n++], STORE_ID_MAX + 1, "%.*s", (int)len, id);
	return 0;
}

/* ---- schedules --------------------------------------------------------- */

struct sched_ck {
	struct ck *c;
	int64_t prev_due; /* the due index's order: due times never go back */
	uint64_t n;
};

/* A schedule row, reached through the due index (store_schedules_list:
 * an entry whose row is missing is STORE_E_CORRUPT there): its
 * conversation exists, its due time is in the index's order, its cron
 * spec (if any) parses. */
static int on_schedule(void *arg, const struct store_schedule *s)
{
	struct sched_ck *k = arg;
	struct ck *c = k->c;
	char id[STORE_ID_MAX + 1], conv[STORE_ID_MAX + 1], spec[STORE_CRON_MAX + 1];
	snprintf(id, sizeof id, "%.*s", (int)s->id.len, (const char *)s->id.ptr);
	snprintf(conv, sizeof conv, "%.*s", (int)s->conversation.len, (const char *)s->conversation.ptr);
	snprintf(spec, sizeof spec, "%.*s", (int)s->cron.len, (const char *)s->cron.ptr);
	int64_t due = s->due;
	k->n++;
	struct store_conv cv;
	int e = store_conv_get(c->t, conv, &cv);
	if (e)
		problem(c, "schedule %s names conversation %s: %s", id, conv,
			e == STORE_E_NOTFOUND ? "there is none (deleting it removes its schedules)" : store_strerror(e));
	if (due <= 0 || due < k->prev_due)
		problem(c, "schedule %s: due %lld is out of the due index's order (after %lld)", id, (long long)due,
			(long long)k->prev_due);
	k->prev_due = due;
	struct cron cr;
	char why[128];
	if (spec[0] && cron_parse(spec, &cr, why, sizeof why))
		problem(c, "schedule %s: its cron spec '%s' does not parse: %s", id, spec, why);
	return 0;
}

int check_store(const char *dir, FILE *out, int *problems)
{
	store *st;
	*problems = 0;
	struct store_opts so = { .read_only = 1 };
	int e = store_open(&st, dir, &so);
	char *shown = config_store_shown(dir);
	if (e && config_store_is_pg(dir)) {
		fprintf(out, "agentd check: cannot open the PostgreSQL store %s: %s\n", shown ? shown : "",
			*store_open_error() ? store_open_error() : store_strerror(e));
		free(shown);
		return e;
	}
	if (shown)
		dir = shown; /* a PostgreSQL target's password stays out of what is printed */
	if (e) {
		struct stat sb;
		if (e == -ENOENT && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode))
			fprintf(out, "agentd check: cannot open the store in %s: there is no store there (no data.mdb)\n",
				dir);
		else if (e == STORE_E_CORRUPT)
			fprintf(out, "agentd check: cannot open the store in %s: its data.mdb is not an agentd store of "
				     "this version, or is damaged\n", dir);
		else
			fprintf(out, "agentd check: cannot open the store in %s: %s\n", dir, store_strerror(e));
		free(shown);
		return e;
	}
	struct ck c = { .out = out, .expiries = json_object(), .rows = json_object() };
	kept(&c, !c.expiries || !c.rows ? -1 : 0);
	struct ids ids = { 0 };
	if ((e = store_txn_begin(st, STORE_READ, &c.t)) == 0) {
		if ((e = store_conv_ids(c.t, collect, &ids)))
			problem(&c, "listing conversations: %s", store_strerror(e));
		if ((e = store_expiries_due(c.t, INT64_MAX, on_expiry, &c)))
			problem(&c, "listing expiries: %s", store_strerror(e));
		for (size_t i = 0; i < ids.n; i++) {
			c.conv = ids.id[i];
			check_conv(&c, ids.id[i]);
		}
		c.conv = NULL;
		if ((e = store_tool_calls_each(c.t, on_any_row, &c)))
			problem(&c, "tool call rows: %s", store_strerror(e));
		struct runs_ck rc = { .c = &c };
		if ((e = store_runs_each(c.t, on_run, &rc))) {
			c.conv = NULL;
			problem(&c, "runs: %s", store_strerror(e));
		}
		if ((e = store_warnings_due(c.t, INT64_MAX, on_warning, &c))) {
			c.conv = NULL;
			problem(&c, "expiry warnings: %s", store_strerror(e));
		}
		struct sched_ck sk = { .c = &c };
		if ((e = store_schedules_list(c.t, NULL, on_schedule, &sk)))
			problem(&c, "schedules: %s%s", store_strerror(e),
				e == STORE_E_CORRUPT ? " (the due index names a schedule whose row is missing or undecodable)" : "");
		const char *k;
		json_t *v;
		json_object_foreach(c.expiries, k, v)
			if (!json_object_get(v, "seen"))
				problem(&c, "expiry of tool call %s (conversation %s) has no pending row", k,
					json_string_value(json_object_get(v, "conversation")));
		store_txn_abort(c.t);
	} else {
		problem(&c, "read transaction: %s", store_strerror(e));
	}
	if (c.oom)
		problem(&c, "out of memory: the check is incomplete");
	fprintf(out, "agentd check: %s: %zu conversations, %llu events, %llu tool calls: %s", dir, ids.n,
		(unsigned long long)c.nevents, (unsigned long long)c.ncalls,
		c.problems ? "" : "consistent\n");
	if (c.problems)
		fprintf(out, "%d problem(s)\n", c.problems);
	free(ids.id);
	json_decref(c.expiries);
	json_decref(c.rows);
	store_close(st);
	free(shown);
	*problems = c.problems;
	return 0;
}
