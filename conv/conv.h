/*
 * conv.h: the conversation rules, written once and used by both programs
 * (agentd and agentd-worker) and by `agentd check`: what a log's tail owes,
 * how a tool call is settled, how an error is recorded, records as JSON.
 *
 * Events here are JSON objects {seq, type, content} in ascending seq order:
 * the working set (every event after the latest summary).
 */
#ifndef AGENTD_CONV_H
#define AGENTD_CONV_H

#include <jansson.h>
#include <stdint.h>

#include "common/config.h"
#include "store/store.h"

#include <string.h>

/* Whether an event of this type is input a turn answers, as a user_msg
 * is: a user_msg, or the `scheduled` event a scheduled wakeup appends
 * when it fires. Each makes the conversation owe a turn (tail_decide) and
 * is shown to the model as a user message. */
static inline int conv_is_input(const char *type)
{
	return !strcmp(type, "user_msg") || !strcmp(type, "scheduled");
}

enum tail_action {
	TAIL_IDLE = 0,  /* nothing owed */
	TAIL_TURN,      /* run a model turn */
	TAIL_TOOLS,     /* the last turn has unsettled tool calls: dispatch / wait */
};

struct tail {
	int action;
	uint64_t ctx_seq;    /* context_seq of the last assistant_msg, error or turn_cancelled (base if none) */
	uint64_t marker_seq; /* seq of that event; 0 when none */
	json_t *calls;       /* the last turn's tool_call contents, in order (new reference) */
	json_t *unsettled;   /* those of them with no tool_result/resolution yet (new reference) */
	json_t *settled;     /* their settlements' contents, in log order (new reference) */
	int round;           /* TAIL_TURN: the model round the owed turn is, counted from the last user_msg:
			      * 1 when a user_msg is owed an answer, else the last assistant_msg's round + 1
			      * (its content's "round", 1 when absent) */
};

/* Decide from the working set. base_ctx is the summary's to_seq (0 without):
 * everything up to it was answered before it was summarised. Returns 0,
 * -EINVAL when an event is malformed (a record we cannot trust: the caller
 * stops) or -ENOMEM when memory ran out (never a decision made on part of the
 * tail). */
int tail_decide(const json_t *events, uint64_t base_ctx, struct tail *t);
/* As tail_decide; with active set (the conversation's status is active), an
 * `error` with "gave_up": true is no turn boundary: a resumed conversation
 * runs again the turn that its give-up ended. */
int tail_decide_active(const json_t *events, uint64_t base_ctx, int active, struct tail *t);
void tail_free(struct tail *t);

/* ---- records ---------------------------------------------------------- */

/* An event as the protocol shows it: {seq, type, content, inserted_at,
 * event_id?}. NULL when out of memory (content that cannot be decoded is
 * shown as null: `agentd check` names it). */
json_t *conv_event_json(const struct store_event *ev);

/* A summary as the protocol shows it: {from_seq, to_seq, content, version,
 * inserted_at}. NULL when out of memory. */
json_t *conv_summary_json(const struct store_summary *s);
/* conv's latest summary as JSON in *out (null when it has none), read in a
 * read txn of its own. Errors: the store's (a read that failed is never
 * "no summary"), -ENOMEM. */
int conv_summary_read(store *st, const char *conv, json_t **out);

/* A run as the protocol shows it (docs/protocol.md, "Runs"): {id, status,
 * attempt, from_seq, to_seq, first_seq, last_seq, model, usage, started_at,
 * ended_at}, first/last_seq and ended_at null until it ends. NULL when out
 * of memory. */
json_t *conv_run_json(const struct store_run *r);

/* The fsm_state a conversation records: {state, pending, last_seq}; pending
 * (stolen; NULL: {}) maps each awaited tool_call_id to its call. */
json_t *conv_fsm_state(const char *state, json_t *pending, uint64_t last_seq);

/* v as one msgpack object in b (jsonmp_buf_init'ed here; destroy it after,
 * also on error). 0, or -ENOMEM. */
struct jsonmp_buf;
int conv_pack(struct jsonmp_buf *b, const json_t *v);

/* ---- rules that write ------------------------------------------------- *
 * Each runs inside the caller's write transaction t and composes with the
 * rest of it. Errors: STORE_E_STALE and STORE_E_INVAL leave t usable (nothing
 * written); -ENOMEM and any other store error poison it (abort).            */

/* Settle the pending tool call id: its row gets status (enum
 * store_tc_status) and result (NULL: null), and the log the event that
 * records it, of type event_type: "tool_result" for a server call's own
 * outcome (ran, failed, interrupted), "resolution" for an answer from
 * outside (a person, an operator, an expiry). Its content is {tool_call_id,
 * status, result}. conv (STORE_ID_MAX + 1 bytes) gets the call's
 * conversation, *seq the event's seq (either may be NULL).
 * Errors: STORE_E_STALE (unknown or not pending: nothing written),
 * STORE_E_INVAL (result nests deeper than an event can hold). */
int conv_settle(store_txn *t, const char *id, int status, const char *event_type, const json_t *result,
		char *conv, uint64_t *seq);
/* conv_settle with by added to the event's content when not NULL: who
 * decided ({"uid", "name"?}, for `resolve`). */
int conv_settle_by(store_txn *t, const char *id, int status, const char *event_type, const json_t *result,
		   const json_t *by, char *conv, uint64_t *seq);

/* After a resolution of one of conv's calls: once no person is awaited any
 * more (no human call pending), the conversation owes work (a turn, or a
 * mixed turn's server calls) and becomes active, unless it is ended or
 * already active. *ended says whether it is ended (it then gets no worker). */
int conv_after_resolution(store_txn *t, const char *conv, int *ended);

/* The resolution rule: settle the pending call id as an answer from
 * outside (`resolve`, an expiry): conv_settle_by with event type
 * "resolution", then conv_after_resolution, in t. conv (STORE_ID_MAX + 1
 * bytes, not NULL) gets the call's conversation, *seq the event's seq (may
 * be NULL), *ended whether the conversation is ended. The caller gives the
 * conversation its writer lease when it owes work (!*ended): that is the
 * supervisor's (lease_ahead). Errors: those of conv_settle_by (STORE_E_STALE,
 * STORE_E_INVAL: nothing written, t usable) and conv_after_resolution. */
int conv_resolve(store_txn *t, const char *id, int status, const json_t *result, const json_t *by, char *conv,
		 uint64_t *seq, int *ended);

/* A deadline passed with nobody's answer (expiry.c): the pending call id is
 * settled by the on_expiry in cfg (may be NULL: expire) of its tool, or of
 * the last tool its escalation chain handed it to, by the resolution rule
 * (conv_resolve): `expire` as status expired, result null, no by; `deny`
 * and `approve` as status resolved with the result {"approved":
 * false|true, "on_expiry": "deny"|"approve"} and by {"name": "expiry"}
 * (nobody's uid: no person decided). `escalate` settles nothing: the call
 * stays pending, handed to its escalate_to tool (its prompt and expires
 * from now, its warning), and an `escalation` event {tool_call_id, name,
 * from, to, prompt, deadline, chain} records it (*ended is then 0, and
 * nothing is owed: the caller takes no lease and wakes no worker). A tool no longer in
 * the configuration, or a chain of CONV_ESCALATE_MAX tools, expires.
 * Arguments and errors as conv_resolve's; *policy (may be NULL) gets the
 * enum tool_on_expiry applied. */
#define CONV_ESCALATE_MAX 16
int conv_expire(store_txn *t, const char *id, const struct config *cfg, char *conv, uint64_t *seq, int *ended,
		int *policy);

/* A user_msg (the first a send wrote, at by_seq) arrived while conv waits on
 * people: each pending human call whose tool in cfg (the one it waits on
 * now, after any escalation) says on_user_message = reject is settled by
 * the resolution rule as status resolved, result {"approved": false,
 * "on_user_message": "reject", "user_msg": by_seq}, by {"name":
 * "user_message"}; the others stay pending. *rejected gets the ids settled
 * (a new reference, [] when none). Errors: any store error, -ENOMEM (both
 * poison t). */
int conv_user_message_reject(store_txn *t, const char *conv, uint64_t by_seq, const struct config *cfg,
			     json_t **rejected);

/* The tool the pending human call id (of conv, its tool name) waits on now
 * in cfg (may be NULL): its own, or the last its escalation chain handed it
 * to; *tool NULL when cfg has no such tool. Errors: the store's. */
int conv_call_tool(store_txn *t, const char *conv, const char *id, const char *name, const struct config *cfg,
		   const struct tool_cfg **tool);

/* ---- a second pair of eyes: approvers = N (conv/approvals.c) --------- */

/* A person's approval of a human call counts once per name: a tool with
 * approvers = N (the tool the call waits on now, conv_call_tool) settles
 * a call on the Nth approval by a different `by` name. Each approval is an
 * `approval_vote` event {tool_call_id, name, by, approvals, approvers} in
 * the call's conversation (approvals: the count with this one); the log is
 * the count's one record, so a vote committed is never lost.
 *
 * conv_approvals: the names of the call's approvals so far, in log order,
 * into *names (a new reference; an array of strings) and the approvals its
 * tool needs into *need (1 when its tool is gone or asks for one). */
int conv_approvals(store_txn *t, const char *conv, const char *id, const char *name, const struct config *cfg,
		   int *need, json_t **names);

/* What conv_approve did: refused (nothing written, t usable), counted, or
 * settled. */
enum conv_vote { CONV_VOTE_SETTLED = 0, CONV_VOTE_COUNTED, CONV_VOTE_NO_NAME, CONV_VOTE_TWICE };
struct conv_vote_out {
	int vote;      /* enum conv_vote */
	int approvals; /* the count with this one (refused: without it) */
	int need;      /* the approvals that settle the call */
	json_t *names; /* the names counted (refused: before it), a new reference, or NULL */
};

/* An approval (resolve's status resolved, a result that is no deny) of the
 * pending human call id, by ({"uid", "name"?}): with need 1, the resolution
 * rule (conv_resolve) as before. Otherwise refused without by's name
 * (CONV_VOTE_NO_NAME) or for a name already counted (CONV_VOTE_TWICE);
 * else its approval_vote event is appended and, when it is the need-th,
 * the call settled by the resolution rule with result and by in t (*seq
 * then the resolution's seq, else the vote's; *ended as conv_resolve's,
 * 0 for a vote counted). Errors as conv_resolve's (STORE_E_STALE: not
 * pending, nothing written). out->names is the caller's to free. */
int conv_approve(store_txn *t, const char *id, const json_t *result, const json_t *by, const struct config *cfg,
		 struct conv_vote_out *out, char *conv, uint64_t *seq, int *ended);

/* ---- calls whose outcome is unknown (docs/tools.md) ------------------ */

/* How a call whose outcome is unknown is decided (`settle`, a reconcile
 * command's answer). */
enum conv_outcome { CONV_RETRY = 0, CONV_DONE, CONV_FAILED };
/* "retry", "done", "failed"; NULL out of range. */
const char *conv_outcome_name(int outcome);

/* The pending server call id (of conv) was interrupted after its dispatch
 * began and is not safe to run again: make it unknown (store.h's
 * STORE_TC_UNKNOWN) and record it in the log, a `tool_unknown` event
 * {tool_call_id, name, attempts}, in t; *seq (may be NULL) the event's seq.
 * Errors: STORE_E_STALE (not pending: nothing written, t usable), the
 * store's. */
int conv_unknown_mark(store_txn *t, const char *conv, const char *id, const char *name, uint32_t attempts,
		      uint64_t *seq);

/* Decide the unknown call id: CONV_RETRY makes it pending again, with a
 * `tool_retry` event {tool_call_id, attempts, by} (a dispatch is granted
 * while its attempts are the row's); CONV_DONE settles it resolved with
 * result (NULL: null) and CONV_FAILED errored with result (NULL: {"error":
 * "...did not take effect"}), each a `resolution` event with by and
 * "outcome". Then conv_after_resolution. conv, when not empty, must be the
 * call's conversation; it gets the call's conversation (STORE_ID_MAX + 1
 * bytes). by: who decided ({"uid", "name"?} for `settle`, {"reconcile":
 * true} for a reconcile command), may be NULL. *seq the event's seq, *ended
 * whether the conversation is ended.
 * Errors, nothing written and t usable: STORE_E_NOTFOUND (no such call, or
 * not conv's), STORE_E_STALE (not unknown: pending, running or settled),
 * STORE_E_INVAL (result too deep); others poison t. */
int conv_unknown_decide(store_txn *t, const char *id, int outcome, const json_t *result, const json_t *by,
			char *conv, uint64_t *seq, int *ended);

/* Record an error that ends a turn: an `error` event {message, attempts,
 * context_seq} (message: bytes from anywhere, kept readable by json_text's
 * rules), its seq in *seq. The tail treats it as the turn's end: nothing is
 * owed until the next event after context_seq. */
int conv_error_append(store_txn *t, const char *conv, const char *msg, size_t len, int attempts,
		      uint64_t ctx_seq, uint64_t *seq);

/* As conv_error_append, for the error that gives up on a conversation (a
 * crash loop, a full store): its content also says "gave_up": true, and while
 * the conversation is active again (a `resume`) the tail does not take it as
 * the turn's end (tail_decide_active), so the turn it ended runs again. */
int conv_gave_up_append(store_txn *t, const char *conv, const char *msg, size_t len, int crashes,
			uint64_t ctx_seq, uint64_t *seq);

/* Give up on conv (a crash loop, a full store): its pending server calls
 * settled errored ({"error": "interrupted", "crashes"}: nothing will run
 * them), its running run ended interrupted, the gave_up error (msg) after
 * its last event, and the conversation idle, owing nothing until its next
 * user_msg. *seq gets the error's seq. 0 or a store error (-ENOMEM). */
int conv_give_up(store_txn *t, const char *conv, const char *msg, size_t len, int crashes, uint64_t *seq);

/* The conversation's latest run (store.h) into *r when it is still running
 * (returns 1), else 0 (none, or ended); negative: a store error. */
int conv_run_running(store_txn *t, const char *conv, struct store_run *r);
/* End conv's running run, if any, with status (enum store_run_status) at the
 * transaction's time: a cancel, or a worker given up on. 0 or a store error. */
int conv_run_end(store_txn *t, const char *conv, int status);

/* Cancel conv's turn for good (the `cancel` op): every tool call still
 * pending is settled `cancelled` (a `resolution` with result null: a late
 * result is then stale), a `turn_cancelled` event {context_seq: the last seq
 * before it, tool_calls: [the ids cancelled]} ends the turn as an error does
 * (nothing is owed until the next user_msg), its running run (if any) ends
 * `cancelled`, and the conversation becomes idle with fsm_state idle. *cancelled gets the ids (new reference), *seq
 * the event's seq. Errors: any store error, -ENOMEM (both poison t). */
int conv_turn_cancel(store_txn *t, const char *conv, json_t **cancelled, uint64_t *seq);
/* The cancel an interrupting send makes (on_busy = interrupt,
 * docs/protocol.md "Concurrent messages"), after it appended its user_msg
 * at by_seq: conv_turn_cancel whose turn_cancelled also says
 * "interrupted_by": by_seq and "partial_text": the text the model had
 * streamed (partial, len bytes, kept readable by json_text's rules; NULL:
 * ""). Such a turn_cancelled is no turn boundary (tail.c): the next turn
 * answers what the cancelled one owed with the new message. */
int conv_turn_interrupt(store_txn *t, const char *conv, uint64_t by_seq, const char *partial, size_t len,
			json_t **cancelled, uint64_t *seq);
/* Give the warning due for the pending call id (store_warning_schedule):
 * an `expiry_warning` event {tool_call_id, name, deadline, expires_in_ms}
 * in its conversation, and the warning's row dropped, in t: given once.
 * conv (STORE_ID_MAX + 1 bytes) gets the conversation, *seq the event's.
 * A call no longer pending (or gone) gets no event: its row is dropped and
 * STORE_E_STALE returned (t stays usable). */
int conv_expiry_warn(store_txn *t, const char *id, char *conv, uint64_t *seq);

/* Move the pending call id's deadline to `deadline` (ms, store time),
 * durable as the first one (the `extend` op): its expiry row replaced,
 * when its tool in cfg (may be NULL) has a warn_before its expiry warning
 * scheduled that long before the new deadline (again, if it was given
 * already), and a `deadline_extended`
 * event {tool_call_id, name, deadline, previous, by} in its conversation
 * (by: who asked, {"uid", "name"?}; NULL: left out), in t. conv
 * (STORE_ID_MAX + 1 bytes) gets the call's conversation, *seq the event's.
 * Refusals, nothing written and t usable: STORE_E_NOTFOUND (no such call,
 * or with want_conv not NULL, one of another conversation), STORE_E_STALE
 * (not pending), STORE_E_CONFLICT (it has no deadline: it never expires),
 * STORE_E_INVAL (deadline not after the transaction's time). */
int conv_deadline_extend(store_txn *t, const char *id, const char *want_conv, int64_t deadline,
			 const struct config *cfg, const json_t *by, char *conv, uint64_t *seq);

/* ---- budgets ---------------------------------------------------------- *
 * settings.budget ({max_tokens, max_cost, max_turns}, each a limit or null
 * for none) over the configuration's defaults: a limit the settings leave
 * out is the default's. A model call starts only while the committed usage
 * is under every limit; the call that crosses one still completes, the next
 * is refused and the conversation is paused (docs/protocol.md, "Budgets"). */

/* The budget in force for settings (an object; anything else: the defaults). */
void conv_budget_of(const json_t *settings, const struct config_budget *dflt, struct config_budget *out);

/* The first limit u and turns have reached (tokens, then cost, then turns): its name
 * ("max_tokens", ...) with *why (may be NULL; a new reference) the content
 * of its budget_exceeded event {limit, used, max, usage}; NULL when none is
 * reached (*why is then NULL too). */
const char *conv_budget_exceeded(const struct config_budget *b, const struct store_usage *u, uint64_t turns,
				 json_t **why);

/* The committed usage as the protocol shows it: {input_tokens,
 * output_tokens, cost, turns}. */
json_t *conv_usage_json(const struct store_usage *u, uint64_t turns);

/* ---- fork ------------------------------------------------------------- */

/* The settings key that records a fork's origin, {conversation, seq}: the
 * supervisor's, never a client's (the codec refuses it in settings). */
#define CONV_FORKED_FROM "forked_from"

struct conv_fork_in {
	const char *src;          /* the conversation forked */
	uint64_t seq;             /* its events 1..seq are the fork's log */
	const char *dst;          /* the new conversation's id */
	const json_t *settings;   /* merged key by key into the source's; NULL: none */
	const json_t *metadata;   /* the fork's whole metadata; NULL: the source's */
};
struct conv_fork_out {
	uint64_t src_last;  /* the source's last seq (also on STORE_E_INVAL) */
	uint64_t last_seq;  /* the fork's last seq */
	uint64_t copied;    /* events copied: seq, or seq - summary_to when the fork's log begins after it */
	uint64_t first_seq; /* where the fork's log begins: 1, or summary_to + 1 */
	uint64_t src_first; /* where the source's log begins (0 when not read) */
	uint64_t summary_to; /* to_seq of the summary carried; 0: none */
	unsigned cancelled; /* calls unsettled at seq, settled cancelled in the fork */
	int status;         /* enum store_status: idle, or active when the log owes a turn */
};
/* Make conversation dst from src's events 1..seq in t (docs/protocol.md,
 * "Fork"): the source's latest summary is carried when it ends before the
 * fork's last turn boundary, and then stands in for events 1..to_seq: the
 * fork's log begins at to_seq + 1 (store_conv_create_at) and only the
 * events after it are read and copied; otherwise events 1..seq are. Copied
 * events get new tool call ids (unique across the store); every call whose
 * tool_call event is copied gets its row, settled as in the log; one
 * unsettled at seq is settled cancelled {"forked_from": ...} by a resolution
 * event after them. Settings and metadata copied unless given, fsm_state and
 * status from tail_decide. src is not touched.
 * Errors, nothing written and t usable: STORE_E_NOTFOUND (src),
 * STORE_E_INVAL (seq outside 1..src_last; or, with out->src_first > 1, a
 * seq the source's log cannot give: it begins after 1 and its latest
 * summary cannot stand in for the fork's prefix), STORE_E_CONFLICT (dst
 * exists).
 * Past the first write every error means t holds half a fork: abort it
 * (STORE_E_CORRUPT: a source record that cannot be copied; STORE_E_FULL,
 * -ENOMEM, -errno). No refusal code is returned then, so a caller that
 * commits on refusals (the group commit) never commits half a fork. */
int conv_fork(store_txn *t, const struct conv_fork_in *in, struct conv_fork_out *out);

#endif
