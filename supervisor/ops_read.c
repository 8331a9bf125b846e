/*
 * ops_read.c: the ops that read the store (get, list, runs, events, watch,
 * tool_call, tool_calls, summary, audit, nodes) and the records as the
 * protocol shows them. Each runs on the loop, on the committed state (a
 * read transaction of its own), at the iteration's end (commit.h).
 */
#include "common/digest.h"
#include "common/log.h"
#include "common/mp.h"
#include "conv/conv.h"
#include "supervisor/control.h"
#include "supervisor/durable.h"
#include "supervisor/forward.h"
#include "supervisor/loop.h"
#include "supervisor/nodes.h"
#include "supervisor/ops_int.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *usage_json(const struct store_usage *u)
{
	return json_pack("{sIsIsf}", "input_tokens", (json_int_t)u->input_tokens, "output_tokens",
			 (json_int_t)u->output_tokens, "cost", u->cost);
}

json_t *ops_conv_json(store_txn *t, const struct store_conv *c, int with_worker)
{
	char id[STORE_ID_MAX + 1];
	uint64_t last = 0;
	memcpy(id, c->id.ptr, c->id.len);
	id[c->id.len] = 0;
	store_event_latest_seq(t, id, &last);
	json_t *o = json_pack("{ss#sososIsosIsI}", "id", (const char *)c->id.ptr, (int)c->id.len, "settings",
			      ops_mp_json(c->settings), "status", json_string(store_status_name(c->status)), "last_seq",
			      (json_int_t)last, "usage", conv_usage_json(&c->usage, c->turns), "created_at", (json_int_t)c->created_at,
			      "updated_at", (json_int_t)c->updated_at);
	/* A field that cannot be added (out of memory) fails the record: never
	 * a reply that silently lacks it. */
	if (o && (json_object_set_new(o, "fsm_state", c->fsm_state.len ? ops_mp_json(c->fsm_state) : json_null()) ||
		  json_object_set_new(o, "metadata", c->metadata.len ? ops_mp_json(c->metadata) : json_object()) ||
		  (with_worker && json_object_set_new(o, "worker", workers_conv_json(id))))) {
		json_decref(o);
		return NULL;
	}
	/* A fork's origin rides in its settings (agentd's key, which no
	 * client may set): shown beside them, not in them. */
	json_t *settings = json_object_get(o, "settings");
	json_t *origin = json_incref(json_object_get(settings, CONV_FORKED_FROM));
	json_object_del(settings, CONV_FORKED_FROM);
	if (json_object_set_new(o, "forked_from", origin ? origin : json_null())) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *tool_call_json(const struct store_tool_call *tc)
{
	/* args_digest: what a person who approves these args sends back
	 * (resolve's args_digest; common/digest.h). */
	char digest[DIGEST_HEX_LEN + 1];
	json_t *args = ops_mp_json(tc->args);
	if (!args || digest_json(args, digest)) {
		json_decref(args);
		return NULL;
	}
	json_t *o = json_pack("{s:s#, s:s#, s:s, s:s, s:s#, s:o, s:s, s:I, s:I}", "id", (const char *)tc->id.ptr,
			      (int)tc->id.len, "conversation", (const char *)tc->conversation.ptr,
			      (int)tc->conversation.len, "executor", tc->executor == STORE_EXEC_HUMAN ? "human" : "server",
			      "status", store_tc_status_name(tc->status), "name", (const char *)tc->name.ptr,
			      (int)tc->name.len, "args", args, "args_digest", digest, "inserted_at",
			      (json_int_t)tc->inserted_at, "attempts", (json_int_t)tc->attempts);
	if (o && (json_object_set_new(o, "result", tc->result.len ? ops_mp_json(tc->result) : json_null()) ||
		  json_object_set_new(o, "resolved_at", tc->resolved_at ? json_integer(tc->resolved_at) : json_null()) ||
		  json_object_set_new(o, "deadline", tc->deadline ? json_integer(tc->deadline) : json_null()) ||
		  (tc->prompt.len && json_object_set_new(o, "prompt", ops_mp_json(tc->prompt))))) {
		json_decref(o);
		return NULL; /* as ops_conv_json: never a record short of a field */
	}
	return o;
}

int ops_append_json(void *arg, const struct store_event *ev)
{
	json_t *e = conv_event_json(ev);
	return e && !json_array_append_new(arg, e) ? 0 : -ENOMEM;
}

/* An `events` reply's events, collected within max_reply_bytes: their
 * JSON text as the reply writes it (JSON_COMPACT, a comma between two),
 * counted as each is added. Without a limit the walk stops before the
 * event that would pass the cap (EVENTS_FULL); with one, the oldest kept
 * go instead (the most recent `limit` are asked for, so the newest stay).
 * Either way one event is always kept, so a client paging on progresses. */
#define EVENTS_FULL 1
struct events_acc {
	json_t *a;
	size_t bytes, cap;
	int keep_newest;       /* a limit: drop the oldest past the cap */
	uint64_t last;         /* without a limit: the seq of the last event kept */
	uint64_t dropped;      /* with one: the seq of the newest event dropped (0: none) */
};

static size_t event_bytes(const json_t *e)
{
	return json_dumpb(e, NULL, 0, JSON_COMPACT) + 1; /* and its comma */
}

static int events_acc_add(void *arg, const struct store_event *ev)
{
	struct events_acc *acc = arg;
	json_t *e = conv_event_json(ev);
	if (!e)
		return -ENOMEM;
	size_t n = event_bytes(e);
	if (!acc->keep_newest && json_array_size(acc->a) && acc->bytes + n > acc->cap) {
		json_decref(e);
		return EVENTS_FULL;
	}
	if (json_array_append_new(acc->a, e))
		return -ENOMEM;
	acc->bytes += n;
	acc->last = ev->seq;
	while (acc->keep_newest && acc->bytes > acc->cap && json_array_size(acc->a) > 1) {
		json_t *old = json_array_get(acc->a, 0);
		acc->bytes -= event_bytes(old);
		acc->dropped = (uint64_t)json_integer_value(json_object_get(old, "seq"));
		json_array_remove(acc->a, 0);
	}
	return 0;
}

json_t *ops_events_query(const struct request *rq, uint64_t *last_seq, struct events_next *next, uint64_t *txnid,
			 int *err, char *msg, size_t msglen)
{
	store_txn *t;
	int e = store_txn_begin(ops_ctx()->st, STORE_READ, &t);
	struct events_acc acc = { json_array(), 0, ops_ctx()->cfg->max_reply_bytes, rq->limit > 0, 0, 0 };
	json_t *a = acc.a;
	next->after = next->before = 0;
	*txnid = e ? 0 : store_txn_id(t);
	if (!e && !a)
		e = -ENOMEM;
	if (!e)
		e = store_event_latest_seq(t, rq->conv, last_seq);
	if (!e) {
		struct store_range r = { rq->after, rq->before, rq->limit, rq->type };
		/* Without a limit, one reply covers at most PROTO_EVENTS_MAX
		 * seqs (the oldest after `after`; seqs are dense): a whole long
		 * log built as one JSON reply would stall the loop for everyone.
		 * When seqs are left past that, *next is the last one covered:
		 * the client pages on with after = next (next_after). */
		if (!r.limit && (!r.before || (r.before > r.after && r.before - r.after > PROTO_EVENTS_MAX + 1)) &&
		    r.after <= UINT64_MAX - PROTO_EVENTS_MAX - 1) {
			r.before = r.after + PROTO_EVENTS_MAX + 1;
			if (*last_seq >= r.before)
				next->after = r.before - 1;
		}
		/* The byte cap (max_reply_bytes): stopped before an event, the
		 * page goes on after the last one kept; with a limit, the
		 * oldest were dropped, and the page before the oldest kept
		 * holds them. */
		e = store_events_stream(t, rq->conv, &r, events_acc_add, &acc);
		if (e == EVENTS_FULL) {
			e = 0;
			next->after = acc.last;
		}
		if (!e && acc.dropped)
			next->before = (uint64_t)json_integer_value(json_object_get(json_array_get(a, 0), "seq"));
	}
	store_txn_abort(t);
	if (e) {
		*err = commit_perr(e);
		if (e == -ENOMEM)
			snprintf(msg, msglen, "out of memory");
		else
			snprintf(msg, msglen, e == STORE_E_NOTFOUND ? "conversation '%s' not found" : "%s: %s",
				 rq->conv, store_strerror(e));
		json_decref(a);
		return NULL;
	}
	*err = 0;
	return a;
}

void ops_get(store_txn *t, struct job *j)
{
	struct store_conv c;
	struct store_run run;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e) {
		job_store_error(j, e, "conversation");
		return;
	}
	json_t *o = ops_conv_json(t, &c, 1);
	int running = o ? conv_run_running(t, j->rq.conv, &run) : 0;
	/* the active run (docs/protocol.md, "Runs"), null between turns; a
	 * field that cannot be added fails the reply (out of memory) */
	if (o && json_object_set_new(o, "run", running > 0 ? conv_run_json(&run) : json_null())) {
		json_decref(o);
		o = NULL;
	}
	uint64_t first = 1;
	/* where its log begins (a fork's may begin later) */
	if (o && store_event_first_seq(t, j->rq.conv, &first) == 0 &&
	    json_object_set_new(o, "first_seq", json_integer((json_int_t)first))) {
		json_decref(o);
		o = NULL;
	}
	j->reply = json_pack("{so}", "conversation", o); /* NULL o: NULL, answered "out of memory" */
	char owner[STORE_ID_MAX + 1];
	if (j->reply && o && forward_owner(t, j->rq.conv, owner) == 1)
		ops_park_forward(j, FORWARD_WORKER, owner, 0);
}

struct runs_ctx {
	json_t *a;
	uint64_t last;
};

static int runs_one(void *arg, const struct store_run *r)
{
	struct runs_ctx *c = arg;
	c->last = r->id;
	return json_array_append_new(c->a, conv_run_json(r)) ? -ENOMEM : 0;
}

void ops_runs(store_txn *t, struct job *j)
{
	struct runs_ctx c = { json_array(), 0 };
	int more = 0;
	int e = c.a ? store_runs_list(t, j->rq.conv, j->rq.before, j->rq.limit, runs_one, &c, &more) : -ENOMEM;
	if (e) {
		json_decref(c.a);
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "runs", c.a);
	/* Without `next` a client takes the page as the last one. */
	if (more && j->reply && json_object_set_new(j->reply, "next", json_integer((json_int_t)c.last))) {
		json_decref(j->reply);
		j->reply = NULL; /* answered "out of memory" */
	}
}

struct list_ctx {
	store_txn *t;
	json_t *a;
	char last[STORE_ID_MAX + 1];
};

static int list_one(void *arg, const struct store_conv *c)
{
	struct list_ctx *l = arg;
	memcpy(l->last, c->id.ptr, c->id.len);
	l->last[c->id.len] = 0;
	return json_array_append_new(l->a, ops_conv_json(l->t, c, 1)) ? -ENOMEM : 0;
}

_Static_assert(PROTO_META_MAX == STORE_META_MAX && PROTO_META_KEY_MAX == STORE_META_KEY_MAX &&
		       PROTO_META_VAL_MAX == STORE_META_VAL_MAX, "the protocol's metadata bounds are the store's");

/* list's model filter: settings.model, read in place from the stored map. */
static int model_is(void *arg, const struct store_conv *c)
{
	const char *want = arg;
	struct mp m;
	uint32_t n;
	mp_init(&m, c->settings.ptr, c->settings.len);
	if (mp_map(&m, &n))
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		const char *k, *v;
		size_t kl, vl;
		const void *skip;
		size_t sl;
		if (mp_str(&m, &k, &kl))
			return 0;
		if (kl == 5 && memcmp(k, "model", 5) == 0)
			return mp_str(&m, &v, &vl) == 0 && vl == strlen(want) && memcmp(v, want, vl) == 0;
		if (mp_skip(&m, &skip, &sl))
			return 0;
	}
	return 0;
}

void ops_list(store_txn *t, struct job *j)
{
	struct list_ctx l = { t, json_array(), "" };
	int more = 0;
	struct store_kv kv[PROTO_META_MAX];
	struct store_conv_filter f = { .status = j->rq.status, .updated_after = j->rq.updated_after,
				       .updated_before = j->rq.updated_before };
	const char *k;
	json_t *v;
	if (j->rq.metadata)
		json_object_foreach(j->rq.metadata, k, v) {
			kv[f.nmeta].key = (store_bytes){ k, strlen(k) };
			kv[f.nmeta].value = (store_bytes){ json_string_value(v), json_string_length(v) };
			f.nmeta++;
		}
	f.meta = kv;
	if (j->rq.model) {
		f.match = model_is;
		f.match_arg = (void *)j->rq.model;
	}
	int e = store_conv_find(t, &f, j->rq.conv, j->rq.limit, list_one, &l, &more);
	if (e == STORE_E_CORRUPT) { /* the others are listed: serve them */
		log_error("list: a conversation record cannot be decoded (see agentd check)");
		e = 0;
	}
	if (e) {
		json_decref(l.a);
		job_store_error(j, e, "list");
		return;
	}
	j->reply = json_pack("{so}", "conversations", l.a);
	/* Without `next` a client takes the page as the last one. */
	if (more && j->reply && json_object_set_new(j->reply, "next", json_string(l.last))) {
		json_decref(j->reply);
		j->reply = NULL; /* answered "out of memory" */
	}
}

/* The reply to `events`: next_after (an extension) when a capped reply left
 * seqs unread, next_before when a reply with a limit left older ones out. */
json_t *ops_events_reply(json_t *evs, uint64_t last, const struct events_next *next)
{
	json_t *o = json_pack("{soso}", "events", evs, "last_seq", json_integer((json_int_t)last));
	/* Without them a capped reply would read as the whole log. */
	if (o && ((next->after && json_object_set_new(o, "next_after", json_integer((json_int_t)next->after))) ||
		  (next->before && json_object_set_new(o, "next_before", json_integer((json_int_t)next->before))))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A range asked from before where the log begins (a fork's log begins
 * after the summary that stands in for what came before): the reply says
 * first_seq (an extension), so a client paging from 0 sees why its first
 * event is not seq 1. Asked only when the events did not start at after + 1. */
static int events_first_seq(struct job *j)
{
	store_txn *t;
	uint64_t first = 1;
	if (store_txn_begin(ops_ctx()->st, STORE_READ, &t))
		return 0; /* an extension left out, never the events */
	int e = store_event_first_seq(t, j->rq.conv, &first);
	store_txn_abort(t);
	if (e || first <= 1 || j->rq.after + 1 >= first)
		return 0;
	return json_object_set_new(j->reply, "first_seq", json_integer((json_int_t)first));
}

void ops_events(store_txn *t, struct job *j)
{
	uint64_t last = 0;
	struct events_next next;
	int err;
	json_t *evs = ops_events_query(&j->rq, &last, &next, &j->txnid, &err, j->msg, sizeof j->msg);
	durable_need(j->txnid);
	if (err) {
		j->err = err;
		return;
	}
	if (json_array_size(evs) == 0 && !next.after && j->rq.wait_ms > 0) {
		/* Long-poll: park it on the conversation until a commit or the deadline. */
		json_decref(evs);
		if (waiters_poll(slot_client(j->slot), j->slot, &j->rq, loop_now_ms() + j->rq.wait_ms)) {
			job_error(j, PERR_INTERNAL, "out of memory");
			return;
		}
		j->slot = NULL; /* completed by the waiter */
		j->parked = 1;
		return;
	}
	json_t *first = json_array_get(evs, 0);
	uint64_t from = (uint64_t)json_integer_value(json_object_get(first, "seq"));
	int asked_before = j->rq.after < last && (!first || from > j->rq.after + 1);
	j->reply = ops_events_reply(evs, last, &next);
	if (j->reply && asked_before && events_first_seq(j))
		j->reply = NULL; /* answered "out of memory" */
}

void ops_watch(store_txn *t, struct job *j)
{
	uint64_t last = 0;
	int e = store_event_latest_seq(t, j->rq.conv, &last);
	if (e) {
		job_store_error(j, e, "conversation");
		return;
	}
	uint64_t after = j->rq.has_after ? j->rq.after : last, first = 1;
	/* A log that begins after seq 1 (a fork's): a watch from before it
	 * starts at its first seq, as `events` does (the pump reads batches
	 * from `after` on and would find nothing before it). */
	if ((e = store_event_first_seq(t, j->rq.conv, &first))) {
		job_store_error(j, e, "conversation");
		return;
	}
	if (after + 1 < first)
		after = first - 1;
	int e2 = waiters_watch(slot_client(j->slot), j->rq.conv, after);
	if (e2 == -EEXIST) {
		job_error(j, PERR_CONFLICT, "this connection is already watching");
		return;
	}
	if (!e2 && j->rq.runs)
		e2 = waiters_watch_runs(slot_client(j->slot), t);
	if (e2) {
		job_error(j, PERR_INTERNAL, "out of memory");
		return;
	}
	j->reply = json_pack("{sI}", "last_seq", (json_int_t)last);
}

/* A pending human call's approvals (conv_approvals): "approvers", the
 * approvals that settle it, and "approved_by", the names counted so far,
 * added to its record o. Read after the listing, never inside it. */
static int approvals_add(store_txn *t, json_t *o)
{
	const char *status = json_string_value(json_object_get(o, "status"));
	const char *executor = json_string_value(json_object_get(o, "executor"));
	if (!status || strcmp(status, "pending") || !executor || strcmp(executor, "human"))
		return 0;
	json_t *names = NULL;
	int need = 1;
	int e = conv_approvals(t, json_string_value(json_object_get(o, "conversation")),
			       json_string_value(json_object_get(o, "id")), json_string_value(json_object_get(o, "name")),
			       ops_ctx()->cfg, &need, &names);
	if (e)
		return e;
	if (json_object_set_new(o, "approvers", json_integer(need)) || json_object_set_new(o, "approved_by", names))
		return -ENOMEM;
	return 0;
}

void ops_tool_call(store_txn *t, struct job *j)
{
	struct store_tool_call tc;
	int e = store_tool_call_get(t, j->rq.tool_call_id, &tc);
	if (e) {
		job_store_error(j, e, "tool call");
		return;
	}
	json_t *o = tool_call_json(&tc);
	if (!o || (e = approvals_add(t, o))) {
		json_decref(o);
		job_store_error(j, o ? e : -ENOMEM, "tool call");
		return;
	}
	j->reply = json_pack("{so}", "tool_call", o);
}

static int tc_one(void *arg, const struct store_tool_call *tc)
{
	return json_array_append_new(arg, tool_call_json(tc)) ? -ENOMEM : 0;
}

void ops_tool_calls(store_txn *t, struct job *j)
{
	json_t *a = json_array(), *o;
	unsigned mask = j->rq.status >= 0 ? 1u << j->rq.status : 0;
	size_t i;
	int e = a ? store_tool_calls_list(t, j->rq.conv, mask, tc_one, a) : -ENOMEM;
	json_array_foreach (a, i, o)
		if (!e)
			e = approvals_add(t, o);
	if (e) {
		json_decref(a);
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "tool_calls", a);
}

void ops_summary(store_txn *t, struct job *j)
{
	struct store_summary s;
	struct store_conv c;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (!e)
		e = store_summary_latest(t, j->rq.conv, &s);
	if (e == STORE_E_NOTFOUND && store_conv_get(t, j->rq.conv, &c) == 0) {
		j->reply = json_pack("{so}", "summary", json_null());
		return;
	}
	if (e) {
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "summary", conv_summary_json(&s));
}

static int mc_one(void *arg, const struct store_model_call *mc)
{
	/* The worker keys a summarize call's row by bit 62 + the summary's to_seq. */
	int summary = (mc->turn_ref >> 62) & 1;
	json_t *o = json_pack("{sssIss#sosIsIsIso}", "task", summary ? "summarize" : "turn", "turn_ref",
			      (json_int_t)(mc->turn_ref & ~(1ULL << 62)), "model",
			      (const char *)mc->model.ptr, (int)mc->model.len, "usage", usage_json(&mc->usage),
			      "latency_ms", (json_int_t)mc->latency_ms, "summary_version", (json_int_t)mc->summary_version,
			      "inserted_at", (json_int_t)mc->inserted_at, "rendered_context", ops_mp_json(mc->rendered));
	return json_array_append_new(arg, o) ? -ENOMEM : 0;
}

void ops_audit(store_txn *t, struct job *j)
{
	json_t *a = json_array();
	/* docs/protocol.md (audit): empty unless audit is on (rows kept from when it was
	 * on are removed by their TTL). */
	int e = ops_ctx()->cfg->audit ? store_model_calls_list(t, j->rq.conv, mc_one, a) : store_conv_get(t, j->rq.conv, &(struct store_conv){ 0 });
	if (e) {
		json_decref(a);
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "model_calls", a);
}

/* The nodes sharing the store, as their heartbeats left them. */
void ops_nodes(store_txn *t, struct job *j)
{
	int e = nodes_json(t, &j->reply);
	if (e)
		job_store_error(j, e, "the nodes");
}
