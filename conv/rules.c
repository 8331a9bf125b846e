/* rules.c: the conversation rules that write, and records as JSON (see conv.h). */
#include "conv/conv.h"
#include "common/jsonmp.h"
#include "common/text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int conv_pack(struct jsonmp_buf *b, const json_t *v)
{
	jsonmp_buf_init(b);
	return jsonmp_pack(&b->pk, v) ? -ENOMEM : 0; /* depth is checked before (jsonmp_fits) */
}

json_t *conv_event_json(const struct store_event *ev)
{
	json_t *content;
	if (jsonmp_decode(ev->content.ptr, ev->content.len, &content) == -ENOMEM)
		return NULL; /* undecodable content shows as null; a lack of memory is not that */
	json_t *o = json_pack("{sIss#sosI}", "seq", (json_int_t)ev->seq, "type", (const char *)ev->type.ptr,
			      (int)ev->type.len, "content", content ? content : json_null(), "inserted_at",
			      (json_int_t)ev->inserted_at);
	/* Never an event short of its event_id (out of memory): NULL instead. */
	if (o && ev->event_id.len &&
	    json_object_set_new(o, "event_id", json_stringn(ev->event_id.ptr, ev->event_id.len))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *conv_summary_json(const struct store_summary *s)
{
	json_t *content;
	if (jsonmp_decode(s->content.ptr, s->content.len, &content) == -ENOMEM)
		return NULL;
	return json_pack("{sIsIsosIsI}", "from_seq", (json_int_t)s->from_seq, "to_seq", (json_int_t)s->to_seq,
			 "content", content ? content : json_null(), "version", (json_int_t)s->version, "inserted_at",
			 (json_int_t)s->inserted_at);
}

int conv_summary_read(store *st, const char *conv, json_t **out)
{
	store_txn *t;
	struct store_summary s;
	*out = NULL;
	int e = store_txn_begin(st, STORE_READ, &t);
	if (e)
		return e;
	e = store_summary_latest(t, conv, &s);
	if (!e)
		e = (*out = conv_summary_json(&s)) ? 0 : -ENOMEM;
	else if (e == STORE_E_NOTFOUND)
		*out = json_null(), e = 0;
	store_txn_abort(t);
	return e;
}

json_t *conv_run_json(const struct store_run *r)
{
	json_t *o = json_pack("{sIsssIsIsIss#s{sIsIsf}sI}", "id", (json_int_t)r->id, "status",
			      store_run_status_name(r->status), "attempt", (json_int_t)r->attempt, "from_seq",
			      (json_int_t)r->from_seq, "to_seq", (json_int_t)r->to_seq, "model", (const char *)r->model.ptr,
			      (int)r->model.len, "usage", "input_tokens", (json_int_t)r->usage.input_tokens,
			      "output_tokens", (json_int_t)r->usage.output_tokens, "cost", r->usage.cost, "started_at",
			      (json_int_t)r->started_at);
	/* Never a run short of a field (out of memory): NULL instead. */
	if (o && (json_object_set_new(o, "first_seq",
				      r->first_seq ? json_integer((json_int_t)r->first_seq) : json_null()) ||
		  json_object_set_new(o, "last_seq", r->last_seq ? json_integer((json_int_t)r->last_seq) : json_null()) ||
		  json_object_set_new(o, "ended_at", r->ended_at ? json_integer(r->ended_at) : json_null()))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *conv_fsm_state(const char *state, json_t *pending, uint64_t last_seq)
{
	return json_pack("{sssosI}", "state", state, "pending", pending ? pending : json_object(), "last_seq",
			 (json_int_t)last_seq);
}

/* Append an event of type with content (borrowed) to conv. */
static int append(store_txn *t, const char *conv, const char *type, const json_t *content, uint64_t *seq)
{
	struct jsonmp_buf b;
	uint64_t s = 0;
	int e = conv_pack(&b, content);
	if (!e) {
		struct store_event_in ev = { type, { b.sb.data, b.sb.size }, NULL };
		e = store_event_append(t, conv, &ev, &s, NULL);
	}
	jsonmp_buf_destroy(&b);
	if (!e && seq)
		*seq = s;
	return e;
}

int conv_settle(store_txn *t, const char *id, int status, const char *event_type, const json_t *result,
		char *conv, uint64_t *seq)
{
	return conv_settle_by(t, id, status, event_type, result, NULL, conv, seq);
}

int conv_settle_by(store_txn *t, const char *id, int status, const char *event_type, const json_t *result,
		   const json_t *by, char *conv, uint64_t *seq)
{
	char own[STORE_ID_MAX + 1];
	const json_t *res = result ? result : json_null();
	struct jsonmp_buf rb;
	if (!conv)
		conv = own;
	/* Checked before anything is written: a failure past the first write
	 * would leave the settlement half done in a transaction that goes on
	 * (a group commit). The result sits one level into its event. */
	if (!jsonmp_fits(res, 1))
		return STORE_E_INVAL;
	int e = conv_pack(&rb, res);
	if (!e)
		e = store_tool_call_resolve(t, id, status, (store_bytes){ rb.sb.data, rb.sb.size }, conv);
	jsonmp_buf_destroy(&rb);
	if (e)
		return e;
	json_t *content = json_pack("{sssssO}", "tool_call_id", id, "status", store_tc_status_name(status),
				    "result", (json_t *)res);
	if (!content || (by && json_object_set(content, "by", (json_t *)by))) {
		json_decref(content);
		return -ENOMEM;
	}
	e = append(t, conv, event_type, content, seq);
	json_decref(content);
	return e;
}

static int count_human(void *arg, const struct store_tool_call *tc)
{
	/* Only people suspend a conversation. A mixed turn's server call still
	 * pending is its worker's work: once the people answered, the
	 * conversation must be active, or a worker that dies running that call
	 * would never be restarted. */
	if (tc->executor == STORE_EXEC_HUMAN || tc->status == STORE_TC_UNKNOWN)
		(*(int *)arg)++;
	return 0;
}

/* fsm_state.pending lists the calls a conversation awaits. The worker
 * rewrites it at its next step, but a call settled while no worker will run
 * (an ended conversation gets none) must leave it here, or it shows as
 * pending for ever. Drops every id whose call is no longer pending; with
 * none left, an ended conversation's state is idle (nothing is owed). */
static int fsm_prune(store_txn *t, const char *conv, const struct store_conv *c)
{
	json_t *fsm = NULL;
	/* Undecodable: left as it is (agentd check names it); out of memory
	 * fails the settlement rather than leave the call pending here. */
	if (c->fsm_state.len && jsonmp_decode(c->fsm_state.ptr, c->fsm_state.len, &fsm) == -ENOMEM)
		return -ENOMEM;
	json_t *pend = json_object_get(fsm, "pending"), *v;
	const char *id;
	void *tmp;
	int changed = 0, e = 0;
	json_object_foreach_safe(pend, tmp, id, v) {
		struct store_tool_call tc;
		int r = store_tool_call_get(t, id, &tc);
		if (r && r != STORE_E_NOTFOUND) {
			e = r;
			goto out;
		}
		if (r == STORE_E_NOTFOUND || (tc.status != STORE_TC_PENDING && tc.status != STORE_TC_UNKNOWN)) {
			json_object_del(pend, id);
			changed = 1;
		}
	}
	if (!changed)
		goto out;
	uint64_t last = 0;
	if ((e = store_event_latest_seq(t, conv, &last)))
		goto out;
	/* Never a state stored short of either (out of memory). */
	if ((c->status == STORE_ENDED && json_object_size(pend) == 0 &&
	     json_object_set_new(fsm, "state", json_string("idle"))) ||
	    json_object_set_new(fsm, "last_seq", json_integer((json_int_t)last))) {
		e = -ENOMEM;
		goto out;
	}
	struct jsonmp_buf b;
	if (!(e = conv_pack(&b, fsm)))
		e = store_conv_put_fsm(t, conv, (store_bytes){ b.sb.data, b.sb.size });
	jsonmp_buf_destroy(&b);
out:
	json_decref(fsm);
	return e;
}

int conv_after_resolution(store_txn *t, const char *conv, int *ended)
{
	int pending = 0, e;
	struct store_conv c;
	/* An unknown call waits for a decision as a person's call does. */
	if ((e = store_tool_calls_list(t, conv, (1u << STORE_TC_PENDING) | (1u << STORE_TC_UNKNOWN), count_human,
				       &pending)))
		return e;
	if ((e = store_conv_get(t, conv, &c)))
		return e;
	*ended = c.status == STORE_ENDED;
	if ((e = fsm_prune(t, conv, &c)))
		return e;
	if (pending == 0 && c.status != STORE_ENDED && c.status != STORE_ACTIVE) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		e = store_conv_put(t, conv, &p);
	}
	return e;
}

int conv_resolve(store_txn *t, const char *id, int status, const json_t *result, const json_t *by, char *conv,
		 uint64_t *seq, int *ended)
{
	int e = conv_settle_by(t, id, status, "resolution", result, by, conv, seq);
	return e ? e : conv_after_resolution(t, conv, ended);
}

/* The call's conversation id into conv (STORE_ID_MAX + 1 bytes). */
static int call_conv(const struct store_tool_call *tc, char *conv)
{
	if (tc->conversation.len > STORE_ID_MAX)
		return STORE_E_CORRUPT;
	memcpy(conv, tc->conversation.ptr, tc->conversation.len);
	conv[tc->conversation.len] = 0;
	return 0;
}

/* The chain of tools a call was handed along (its `escalation` events, in
 * log order): *chain gets [its own tool, each `to`] (a new reference). */
struct chain_ctx {
	const char *id;
	json_t *chain;
};

static int chain_add(void *arg, const struct store_event *ev)
{
	struct chain_ctx *c = arg;
	json_t *content;
	if (jsonmp_decode(ev->content.ptr, ev->content.len, &content) == -ENOMEM)
		return -ENOMEM;
	const char *of = json_string_value(json_object_get(content, "tool_call_id"));
	json_t *to = json_object_get(content, "to");
	int e = 0;
	if (of && !strcmp(of, c->id) && json_is_string(to))
		e = json_array_append(c->chain, to) ? -ENOMEM : 0;
	json_decref(content);
	return e;
}

static int escalation_chain(store_txn *t, const char *conv, const char *id, const char *name, json_t **chain)
{
	struct chain_ctx c = { id, json_array() };
	struct store_range r = { 0, 0, 0, "escalation" };
	int e = c.chain && !json_array_append_new(c.chain, json_string(name)) ? 0 : -ENOMEM;
	if (!e)
		e = store_events_stream(t, conv, &r, chain_add, &c);
	if (e) {
		json_decref(c.chain);
		return e;
	}
	*chain = c.chain;
	return 0;
}

/* The tool a pending call waits on now (cfg may be NULL: none): its own, or
 * the last one its escalation chain handed it to; *chain (may be NULL)
 * gets that chain when it was read (a new reference, else NULL). */
static int current_tool(store_txn *t, const char *conv, const char *id, const char *name, const struct config *cfg,
			const struct tool_cfg **tool, json_t **chain)
{
	json_t *c = NULL;
	*tool = cfg ? config_tool(cfg, name) : NULL;
	if (chain)
		*chain = NULL;
	if (!*tool || (*tool)->executor != EXEC_HUMAN || (*tool)->on_expiry != ON_EXPIRY_ESCALATE)
		return 0; /* never handed on */
	int e = escalation_chain(t, conv, id, name, &c);
	if (e)
		return e;
	*tool = config_tool(cfg, json_string_value(json_array_get(c, json_array_size(c) - 1)));
	if (chain)
		*chain = c;
	else
		json_decref(c);
	return 0;
}

int conv_call_tool(store_txn *t, const char *conv, const char *id, const char *name, const struct config *cfg,
		   const struct tool_cfg **tool)
{
	return current_tool(t, conv, id, name, cfg, tool, NULL);
}

/* Hand the pending call to the human tool `to` (on_expiry = escalate): its
 * prompt becomes to's, its deadline to's expires from now (none for 0),
 * with to's warning, and an `escalation` event records the chain, in t. */
static int escalate(store_txn *t, const struct store_tool_call *tc, const char *id, const char *conv,
		    const struct tool_cfg *to, json_t *chain, uint64_t *seq)
{
	int64_t deadline = to->expires_ms ? store_txn_now(t) + to->expires_ms : 0;
	char name[STORE_ID_MAX + 1];
	struct jsonmp_buf pb;
	json_t *prompt = json_string(to->prompt ? to->prompt : "Approve?");
	snprintf(name, sizeof name, "%.*s", (int)tc->name.len, (const char *)tc->name.ptr);
	json_t *from = json_incref(json_array_get(chain, json_array_size(chain) - 1));
	int e = json_array_append_new(chain, json_string(to->name)) ? -ENOMEM : 0;
	json_t *content = e ? NULL : json_pack("{s:s, s:s, s:O, s:s, s:O, s:o, s:O}", "tool_call_id", id, "name", name,
					       "from", from, "to", to->name, "prompt", prompt, "deadline",
					       deadline ? json_integer(deadline) : json_null(), "chain", chain);
	json_decref(from);
	if (content && prompt) {
		if (!(e = conv_pack(&pb, prompt))) {
			struct store_tool_call_in in = { id, name, STORE_EXEC_HUMAN, tc->args, { pb.sb.data, pb.sb.size } };
			e = store_tool_call_upsert(t, conv, &in);
		}
		jsonmp_buf_destroy(&pb);
	} else {
		e = -ENOMEM;
	}
	json_decref(prompt);
	if (!e)
		e = deadline ? store_expiry_schedule(t, id, deadline) : store_expiry_cancel(t, id);
	if (!e)
		e = deadline && to->warn_before_ms > 0 ? store_warning_schedule(t, id, deadline - to->warn_before_ms)
						       : store_warning_drop(t, id);
	if (!e)
		e = append(t, conv, "escalation", content, seq);
	json_decref(content);
	return e;
}

int conv_expire(store_txn *t, const char *id, const struct config *cfg, char *conv, uint64_t *seq, int *ended,
		int *policy)
{
	struct store_tool_call tc;
	char name[STORE_ID_MAX + 1];
	int p = ON_EXPIRY_EXPIRE;
	json_t *chain = NULL;
	int e = store_tool_call_get(t, id, &tc);
	if (e == STORE_E_NOTFOUND || (!e && tc.status != STORE_TC_PENDING))
		return STORE_E_STALE;
	if (e)
		return e;
	if ((e = call_conv(&tc, conv)))
		return e;
	snprintf(name, sizeof name, "%.*s", (int)tc.name.len, (const char *)tc.name.ptr);
	const struct tool_cfg *tool;
	if ((e = current_tool(t, conv, id, name, cfg, &tool, &chain)))
		return e;
	if (tool && tool->executor == EXEC_HUMAN)
		p = tool->on_expiry;
	const struct tool_cfg *to = p == ON_EXPIRY_ESCALATE ? config_tool(cfg, tool->escalate_to) : NULL;
	/* A chain that ran its length (or whose next tool is gone) expires. */
	if (p == ON_EXPIRY_ESCALATE && (!to || to->executor != EXEC_HUMAN || json_array_size(chain) >= CONV_ESCALATE_MAX))
		p = ON_EXPIRY_EXPIRE;
	if (policy)
		*policy = p;
	if (p == ON_EXPIRY_ESCALATE) {
		e = escalate(t, &tc, id, conv, to, chain, seq);
		json_decref(chain);
		*ended = 0;
		return e; /* nothing is owed: the caller wakes no worker */
	}
	json_decref(chain);
	if (p == ON_EXPIRY_EXPIRE)
		return conv_resolve(t, id, STORE_TC_EXPIRED, NULL, NULL, conv, seq, ended);
	json_t *result = json_pack("{sbss}", "approved", p == ON_EXPIRY_APPROVE, "on_expiry", config_on_expiry_name(p));
	json_t *by = json_pack("{ss}", "name", "expiry");
	e = result && by ? conv_resolve(t, id, STORE_TC_RESOLVED, result, by, conv, seq, ended) : -ENOMEM;
	json_decref(result);
	json_decref(by);
	return e;
}

/* A pending human call as [id, name]. */
static int collect_human_call(void *arg, const struct store_tool_call *tc)
{
	if (tc->executor != STORE_EXEC_HUMAN)
		return 0;
	json_t *c = json_pack("[s#s#]", (const char *)tc->id.ptr, (int)tc->id.len, (const char *)tc->name.ptr,
			      (int)tc->name.len);
	return c && !json_array_append_new(arg, c) ? 0 : -ENOMEM;
}

int conv_user_message_reject(store_txn *t, const char *conv, uint64_t by_seq, const struct config *cfg,
			     json_t **rejected)
{
	*rejected = NULL;
	size_t any = 0;
	for (size_t k = 0; k < cfg->ntools; k++)
		any += cfg->tools[k].on_user_message == ON_USER_MESSAGE_REJECT;
	if (!any) /* the common case: no read of the calls on every busy send */
		return (*rejected = json_array()) ? 0 : -ENOMEM;
	json_t *calls = json_array(), *ids = json_array(), *c;
	json_t *result = json_pack("{sbsssI}", "approved", 0, "on_user_message", "reject", "user_msg",
				   (json_int_t)by_seq);
	json_t *by = json_pack("{ss}", "name", "user_message");
	char own[STORE_ID_MAX + 1];
	size_t i;
	int e = calls && ids && result && by ? store_tool_calls_list(t, conv, 1u << STORE_TC_PENDING,
								   collect_human_call, calls)
					     : -ENOMEM;
	json_array_foreach(calls, i, c) {
		const char *id = json_string_value(json_array_get(c, 0));
		const struct tool_cfg *tool;
		if (e || (e = current_tool(t, conv, id, json_string_value(json_array_get(c, 1)), cfg, &tool, NULL)))
			break;
		if (!tool || tool->executor != EXEC_HUMAN || tool->on_user_message != ON_USER_MESSAGE_REJECT)
			continue;
		if (!(e = conv_settle_by(t, id, STORE_TC_RESOLVED, "resolution", result, by, own, NULL)) &&
		    json_array_append_new(ids, json_string(id)))
			e = -ENOMEM;
	}
	int ended;
	if (!e && json_array_size(ids))
		e = conv_after_resolution(t, conv, &ended);
	json_decref(calls);
	json_decref(result);
	json_decref(by);
	if (e) {
		json_decref(ids);
		return e;
	}
	*rejected = ids;
	return 0;
}

static const char *const outcome_names[] = { "retry", "done", "failed" };

const char *conv_outcome_name(int outcome)
{
	return outcome >= CONV_RETRY && outcome <= CONV_FAILED ? outcome_names[outcome] : NULL;
}

int conv_unknown_mark(store_txn *t, const char *conv, const char *id, const char *name, uint32_t attempts,
		      uint64_t *seq)
{
	int e = store_tool_call_unknown(t, id, 1);
	if (e)
		return e;
	json_t *content = json_pack("{sssssI}", "tool_call_id", id, "name", name, "attempts", (json_int_t)attempts);
	if (!content)
		return -ENOMEM;
	e = append(t, conv, "tool_unknown", content, seq);
	json_decref(content);
	return e;
}

/* CONV_RETRY: the call pending again, and the grant in the log. */
static int unknown_retry(store_txn *t, const char *conv, const char *id, uint32_t attempts, const json_t *by,
			 uint64_t *seq)
{
	json_t *content = json_pack("{sssI}", "tool_call_id", id, "attempts", (json_int_t)attempts);
	if (!content || (by && json_object_set(content, "by", (json_t *)by))) {
		json_decref(content);
		return -ENOMEM; /* nothing written yet */
	}
	int e = store_tool_call_unknown(t, id, 0);
	if (!e)
		e = append(t, conv, "tool_retry", content, seq);
	json_decref(content);
	return e;
}

int conv_unknown_decide(store_txn *t, const char *id, int outcome, const json_t *result, const json_t *by,
			char *conv, uint64_t *seq, int *ended)
{
	struct store_tool_call tc;
	int e = store_tool_call_get(t, id, &tc);
	if (e)
		return e;
	if (tc.conversation.len > STORE_ID_MAX)
		return STORE_E_CORRUPT;
	if (*conv && (strlen(conv) != tc.conversation.len || memcmp(conv, tc.conversation.ptr, tc.conversation.len)))
		return STORE_E_NOTFOUND;
	if (tc.status != STORE_TC_UNKNOWN)
		return STORE_E_STALE;
	if ((e = call_conv(&tc, conv)))
		return e;
	if (outcome == CONV_RETRY) {
		e = unknown_retry(t, conv, id, tc.attempts, by, seq);
		return e ? e : conv_after_resolution(t, conv, ended);
	}
	json_t *b = by ? json_deep_copy(by) : json_object();
	json_t *res = result ? json_incref((json_t *)result)
			     : outcome == CONV_DONE ? json_null()
						    : json_pack("{ss}", "error", "the call was interrupted and did not take effect");
	if (!b || !res || json_object_set_new(b, "outcome", json_string(outcome_names[outcome]))) {
		json_decref(b);
		json_decref(res);
		return -ENOMEM;
	}
	e = conv_resolve(t, id, outcome == CONV_DONE ? STORE_TC_RESOLVED : STORE_TC_ERRORED, res, b, conv, seq, ended);
	json_decref(b);
	json_decref(res);
	return e;
}

int conv_expiry_warn(store_txn *t, const char *id, char *conv, uint64_t *seq)
{
	struct store_tool_call tc;
	int e = store_tool_call_get(t, id, &tc);
	if (e == STORE_E_NOTFOUND || (!e && tc.status != STORE_TC_PENDING))
		return (e = store_warning_drop(t, id)) ? e : STORE_E_STALE;
	if (e)
		return e;
	if ((e = call_conv(&tc, conv)))
		return e;
	int64_t left = tc.deadline > 0 ? tc.deadline - store_txn_now(t) : 0;
	json_t *content = json_pack("{s:s, s:s#, s:I, s:I}", "tool_call_id", id, "name", (const char *)tc.name.ptr,
				    (int)tc.name.len, "deadline", (json_int_t)tc.deadline, "expires_in_ms",
				    (json_int_t)(left > 0 ? left : 0));
	if (!content)
		return -ENOMEM;
	e = append(t, conv, "expiry_warning", content, seq);
	json_decref(content);
	return e ? e : store_warning_drop(t, id);
}

int conv_deadline_extend(store_txn *t, const char *id, const char *want_conv, int64_t deadline,
			 const struct config *cfg, const json_t *by, char *conv, uint64_t *seq)
{
	char name[STORE_ID_MAX + 1];
	struct store_tool_call tc;
	int e = store_tool_call_get(t, id, &tc);
	if (e)
		return e;
	if ((e = call_conv(&tc, conv)))
		return e;
	/* Every refusal before the first write. */
	if (want_conv && strcmp(want_conv, conv))
		return STORE_E_NOTFOUND;
	if (tc.status != STORE_TC_PENDING)
		return STORE_E_STALE;
	if (tc.deadline <= 0)
		return STORE_E_CONFLICT;
	if (deadline <= store_txn_now(t))
		return STORE_E_INVAL;
	json_t *content = json_pack("{s:s, s:s#, s:I, s:I}", "tool_call_id", id, "name", (const char *)tc.name.ptr,
				    (int)tc.name.len, "deadline", (json_int_t)deadline, "previous",
				    (json_int_t)tc.deadline);
	if (!content || (by && json_object_set(content, "by", (json_t *)by))) {
		json_decref(content);
		return -ENOMEM;
	}
	snprintf(name, sizeof name, "%.*s", (int)tc.name.len, (const char *)tc.name.ptr);
	const struct tool_cfg *tool;
	if ((e = current_tool(t, conv, id, name, cfg, &tool, NULL))) {
		json_decref(content);
		return e;
	}
	int64_t warn_before_ms = tool && tool->executor == EXEC_HUMAN ? tool->warn_before_ms : 0;
	e = store_expiry_schedule(t, id, deadline);
	/* The warning keeps its distance from the deadline; one that would
	 * fall before now comes at once (the deadline is that close). */
	if (!e && warn_before_ms > 0)
		e = store_warning_schedule(t, id, deadline - warn_before_ms > 0 ? deadline - warn_before_ms : 1);
	if (!e)
		e = append(t, conv, "deadline_extended", content, seq);
	json_decref(content);
	return e;
}

static int error_append(store_txn *t, const char *conv, const char *msg, size_t len, int attempts,
			uint64_t ctx_seq, int gave_up, uint64_t *seq)
{
	json_t *content = json_pack("{sosisI}", "message", json_text(msg, len), "attempts", attempts, "context_seq",
				    (json_int_t)ctx_seq);
	if (content && gave_up && json_object_set_new(content, "gave_up", json_true())) {
		json_decref(content);
		content = NULL;
	}
	if (!content)
		return -ENOMEM;
	int e = append(t, conv, "error", content, seq);
	json_decref(content);
	return e;
}

int conv_error_append(store_txn *t, const char *conv, const char *msg, size_t len, int attempts,
		      uint64_t ctx_seq, uint64_t *seq)
{
	return error_append(t, conv, msg, len, attempts, ctx_seq, 0, seq);
}

int conv_gave_up_append(store_txn *t, const char *conv, const char *msg, size_t len, int crashes,
			uint64_t ctx_seq, uint64_t *seq)
{
	return error_append(t, conv, msg, len, crashes, ctx_seq, 1, seq);
}

static int collect_id(void *arg, const struct store_tool_call *tc)
{
	json_t *id = json_stringn((const char *)tc->id.ptr, tc->id.len);
	return id && !json_array_append_new(arg, id) ? 0 : -ENOMEM;
}

static int latest_run(void *arg, const struct store_run *r)
{
	*(struct store_run *)arg = *r;
	return 0;
}

int conv_run_running(store_txn *t, const char *conv, struct store_run *r)
{
	memset(r, 0, sizeof *r);
	int e = store_runs_list(t, conv, 0, 1, latest_run, r, NULL);
	if (e)
		return e;
	return r->id && r->status == STORE_RUN_RUNNING;
}

int conv_run_end(store_txn *t, const char *conv, int status)
{
	struct store_run r;
	int e = conv_run_running(t, conv, &r);
	if (e <= 0)
		return e;
	r.status = status;
	r.ended_at = store_txn_now(t);
	return store_run_put(t, conv, &r);
}

static int collect_server_id(void *arg, const struct store_tool_call *tc)
{
	return tc->executor == STORE_EXEC_SERVER ? collect_id(arg, tc) : 0;
}

int conv_give_up(store_txn *t, const char *conv, const char *msg, size_t len, int crashes, uint64_t *seq)
{
	/* The error ends the turn, and nothing re-dispatches a call behind it:
	 * its pending server calls are settled errored first, or their rows
	 * stay pending forever and the next turn's model sees calls without
	 * results. */
	json_t *ids = json_array(), *id, *res = json_pack("{sssi}", "error", "interrupted", "crashes", crashes);
	uint64_t last = 0;
	size_t i;
	int e = ids && res ? store_tool_calls_list(t, conv, 1u << STORE_TC_PENDING, collect_server_id, ids) : -ENOMEM;
	json_array_foreach(ids, i, id) {
		if (e)
			break;
		e = conv_settle(t, json_string_value(id), STORE_TC_ERRORED, "tool_result", res, NULL, NULL);
		if (e == STORE_E_STALE)
			e = 0;
	}
	json_decref(ids);
	json_decref(res);
	if (!e)
		e = store_event_latest_seq(t, conv, &last);
	if (!e)
		e = conv_run_end(t, conv, STORE_RUN_INTERRUPTED); /* its worker died: a resume runs it again */
	if (!e)
		e = conv_gave_up_append(t, conv, msg, len, crashes, last, seq);
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_IDLE };
	return e ? e : store_conv_put(t, conv, &p);
}

/* conv_turn_cancel with extra's keys (borrowed; NULL: none) added to the
 * turn_cancelled event's content. */
static int turn_cancel(store_txn *t, const char *conv, const json_t *extra, json_t **cancelled, uint64_t *seq)
{
	json_t *ids = json_array();
	uint64_t last = 0, s = 0;
	size_t i;
	json_t *id;
	*cancelled = NULL;
	if (!ids)
		return -ENOMEM;
	/* Every call still pending belongs to the turn being cancelled: only
	 * the last turn can have unsettled calls (revival, docs/protocol.md). */
	int e = store_tool_calls_list(t, conv, (1u << STORE_TC_PENDING) | (1u << STORE_TC_UNKNOWN), collect_id, ids);
	json_array_foreach(ids, i, id) {
		if (e)
			break;
		e = conv_settle(t, json_string_value(id), STORE_TC_CANCELLED, "resolution", NULL, NULL, NULL);
	}
	if (!e)
		e = conv_run_end(t, conv, STORE_RUN_CANCELLED);
	if (!e)
		e = store_event_latest_seq(t, conv, &last);
	json_t *content = e ? NULL : json_pack("{sIsO}", "context_seq", (json_int_t)last, "tool_calls", ids);
	if (content && extra && json_object_update(content, (json_t *)extra)) {
		json_decref(content);
		content = NULL;
	}
	if (!e && !content)
		e = -ENOMEM;
	if (!e)
		e = append(t, conv, "turn_cancelled", content, &s);
	json_decref(content);
	json_t *fsm = e ? NULL : conv_fsm_state("idle", NULL, s);
	struct jsonmp_buf b = { 0 };
	if (!e && (!fsm || conv_pack(&b, fsm)))
		e = -ENOMEM;
	if (!e) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS | STORE_SET_FSM, .status = STORE_IDLE,
					      .fsm_state = { b.sb.data, b.sb.size } };
		e = store_conv_put(t, conv, &p);
	}
	if (fsm)
		jsonmp_buf_destroy(&b);
	json_decref(fsm);
	if (e) {
		json_decref(ids);
		return e;
	}
	*cancelled = ids;
	if (seq)
		*seq = s;
	return 0;
}

int conv_turn_cancel(store_txn *t, const char *conv, json_t **cancelled, uint64_t *seq)
{
	return turn_cancel(t, conv, NULL, cancelled, seq);
}

int conv_turn_interrupt(store_txn *t, const char *conv, uint64_t by_seq, const char *partial, size_t len,
			json_t **cancelled, uint64_t *seq)
{
	json_t *extra = json_pack("{sIso}", "interrupted_by", (json_int_t)by_seq, "partial_text",
				  json_text(partial ? partial : "", partial ? len : 0));
	if (!extra)
		return -ENOMEM;
	int e = turn_cancel(t, conv, extra, cancelled, seq);
	json_decref(extra);
	return e;
}
