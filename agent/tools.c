/*
 * tools.c: the worker's tool executors (tools.h): a server call run as a
 * command or as an MCP server's tool, a human call awaited.
 */
#include "agent/tools.h"
#include "agent/isolate.h"
#include "agent/protocol.h"
#include "agent/wipc.h"
#include "agent/workset.h"
#include "agent/wstore.h"
#include "common/cmdline.h"
#include "common/convlock.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"

#include <bsd/unistd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A human call's deadline (tc's expires from now) and, with warn_before,
 * its expiry warning: durable like the deadline, in the caller's
 * transaction. */
int tools_schedule_deadline(store_txn *t, const char *id, const struct tool_cfg *tc)
{
	int64_t deadline = store_txn_now(t) + tc->expires_ms;
	int e = store_expiry_schedule(t, id, deadline);
	if (!e && tc->warn_before_ms > 0)
		e = store_warning_schedule(t, id, deadline - tc->warn_before_ms);
	return e;
}

/* Settle a server call (if still pending) with its tool_result. */
static void settle(struct worker *w, const char *id, int status, json_t *result)
{
	wstore_reserve(w, 2 * wstore_json_size(result)); /* in the tool_result event and the call's row */
	store_txn *t = wstore_wbegin(w, 1);
	uint64_t seq = 0;
	int e = result ? conv_settle(t, id, status, "tool_result", result, NULL, &seq) : -ENOMEM;
	json_decref(result);
	if (e == STORE_E_STALE) {
		/* Someone settled it first (an operator's resolve): theirs stands. */
		wstore_wabort(w, t);
		return;
	}
	wstore_must(w, t, e, "settle");
	wstore_commit(w, t, "commit tool result", seq);
	/* A tool that ran is not run again after an OS crash for want of a
	 * flush: its result is made durable now (outside the writer lock; a
	 * tool's run dwarfs it). */
	if ((e = store_flush(w->st)))
		wstore_die_flush(w, e, "flush after the tool's result");
}

/* A stop ends the tool (it is re-dispatched on revival). The supervisor's
 * death does not: the tool runs to its end and its result is committed
 * (orphaned), since a kill of agentd alone must not run a side effect twice;
 * a new agentd waits for this worker to end (convlock.h) before it takes the
 * conversation's lease. */
int tools_on_watch(void *arg)
{
	struct worker_watch *ww = arg;
	int d = wipc_drain(ww->w);
	if (d == 2) {
		wipc_orphaned(ww->w, 1);
		return 0; /* the socket is no longer watched */
	}
	if (d && ww->hold) {
		/* Ending this run would leave its outcome unknown: the stop
		 * waits for its result (tools_dispatch exits after it). */
		ww->stop_held = 1;
		return 0;
	}
	if (d) {
		ww->stop = 1;
		return 1;
	}
	return 0;
}

/* A call of an MCP server's tool (mcp.h): tools/call on the server this
 * worker keeps, the same settle and stop rules as a command's. */
static void dispatch_mcp(struct worker *w, const char *id, const char *name, json_t *args, const struct tool_cfg *tc,
			 uint32_t attempt, struct worker_watch *hold)
{
	const char *tool = mcp_tool_name(tc, name);
	if (!tool) {
		settle(w, id, STORE_TC_ERRORED, json_pack("{so}", "error", json_sprintf("%s is an MCP server: call one of its "
									    "tools, %s<tool>", name, tc->mcp->prefix)));
		return;
	}
	struct worker_watch ww = *hold;
	int is_error = 1;
	struct mcp_watch mw = { w->ipc, tools_on_watch, &ww, wipc_on_start };
	json_t *res = NULL;
	/* The idempotency key a server that can deduplicate uses (docs/tools.md). */
	json_t *meta = json_pack("{sssi}", "agentd/idempotency_key", id, "agentd/attempt", (int)attempt);
	if (!meta) {
		settle(w, id, STORE_TC_ERRORED, json_pack("{ss}", "error", "out of memory for the call's request"));
		return;
	}
	wstore_let_go(w);
	int rc = mcp_call_meta(w->mcp, tc, tool, args, meta, &mw, &res, &is_error);
	wstore_take(w);
	json_decref(meta);
	hold->stop_held = ww.stop_held;
	if (ww.stop || rc == -ECANCELED) {
		json_decref(res);
		log_info("%s: stopped during tool call %s; it is re-dispatched on revival", w->conv, id);
		exit(0);
	}
	if (rc < 0)
		res = json_pack("{ssss}", "error", "cannot call the MCP tool", "reason", strerror(-rc));
	settle(w, id, is_error ? STORE_TC_ERRORED : STORE_TC_RESOLVED, res);
}

/* The conversation's lock (common/convlock.h), held from before a dispatch is
 * counted until its result is committed: if agentd dies meanwhile, this
 * worker runs the tool to its end and commits (orphaned), and the next agentd
 * takes no lease for the conversation while the lock is held. Released by
 * closing it, or by the kernel when this process ends. */
static int tool_lock(struct worker *w)
{
	int fd = convlock_open(w->run_dir), e = 0;
	if (fd < 0 || (e = convlock_take(fd, w->conv)) < 0) {
		log_error("%s: cannot lock the conversation in %s/workers.lock: %s", w->conv, w->run_dir,
			  strerror(fd < 0 ? -fd : -e));
		exit(IPC_EXIT_STORE);
	}
	return fd;
}

static void dispatch_call(struct worker *w, const json_t *call);

void tools_dispatch(struct worker *w, const json_t *call)
{
	int lk = tool_lock(w);
	dispatch_call(w, call);
	close(lk);
}

int tools_call_unknown(struct worker *w, const char *id)
{
	struct store_tool_call row;
	store_txn *t = wstore_rbegin(w);
	int e = store_tool_call_get(t, id, &row);
	int unknown = !e && row.status == STORE_TC_UNKNOWN;
	store_txn_abort(t);
	if (e && e != STORE_E_NOTFOUND)
		wstore_die(w, e, "read the tool call");
	return unknown;
}

/* Whether the call's tool may be dispatched again after an interruption
 * (docs/tools.md, "Calls whose outcome is unknown"). An unknown tool never
 * runs: nothing to protect. */
static int tool_idempotent(struct worker *w, const char *name, const struct tool_cfg *tc)
{
	if (!tc)
		return 1;
	if (!tc->mcp)
		return tc->idempotent == 1;
	struct worker_watch ww = { w, 0, 1, 0 };
	struct mcp_watch mw = { w->ipc, tools_on_watch, &ww, NULL };
	wstore_let_go(w);
	int r = mcp_tool_idempotent(w->mcp, tc, mcp_tool_name(tc, name), &mw);
	wstore_take(w);
	return r;
}

/* Whether a person or a reconcile command granted the call's next dispatch:
 * the working set's last tool_retry of id names the attempts counted now
 * (no dispatch began since). */
static int retry_granted(struct worker *w, const char *id, uint32_t attempts)
{
	for (size_t i = json_array_size(w->events); i-- > 0;) {
		json_t *ev = json_array_get(w->events, i), *c = json_object_get(ev, "content");
		const char *ty = json_string_value(json_object_get(ev, "type"));
		const char *cid = json_string_value(json_object_get(c, "tool_call_id"));
		if (!ty || !cid || strcmp(cid, id) || strcmp(ty, "tool_retry"))
			continue;
		json_t *a = json_object_get(c, "attempts");
		return json_is_integer(a) && json_integer_value(a) == (json_int_t)attempts;
	}
	return 0;
}

enum { RUN = 0, SETTLED, UNKNOWN, UNKNOWN_NOW };

/* Count the dispatch durably before the tool runs, so a kill mid-run is
 * counted (*attempt gets its count). SETTLED when the call was settled
 * instead (interrupted too often), UNKNOWN when it is unknown, UNKNOWN_NOW
 * when it was made so now (a dispatch of a tool not safe to run twice began
 * and never ended; *attempt gets the dispatches counted). */
static int count_attempt(struct worker *w, const char *id, const char *name, json_t *args, const struct tool_cfg *tc,
			 uint32_t *attempt)
{
	store_txn *t = wstore_wbegin(w, 0);
	struct store_tool_call row;
	int e = store_tool_call_get(t, id, &row);
	if (e == STORE_E_NOTFOUND) {
		/* The row is a cache of the log: rebuild it. */
		struct jsonmp_buf ab;
		struct store_tool_call_in in = { id, name, STORE_EXEC_SERVER, wstore_pack(w, &ab, args), { 0 } };
		e = store_tool_call_upsert(t, w->conv, &in);
		jsonmp_buf_destroy(&ab);
		row.attempts = 0;
		row.status = STORE_TC_PENDING;
	}
	wstore_must(w, t, e, "tool call row");
	if (row.status == STORE_TC_UNKNOWN) {
		wstore_wabort(w, t);
		return UNKNOWN;
	}
	int granted = row.attempts > 0 && retry_granted(w, id, row.attempts);
	if (row.attempts > 0 && !granted) {
		uint32_t att = row.attempts;
		wstore_wabort(w, t); /* tool_idempotent may start an MCP server: not inside a write */
		if (!tool_idempotent(w, name, tc)) {
			uint64_t seq = 0;
			t = wstore_wbegin(w, 0);
			wstore_must(w, t, conv_unknown_mark(t, w->conv, id, name, att, &seq), "unknown call");
			wstore_commit(w, t, "unknown call", seq);
			log_warn("%s: tool call %s was interrupted after its dispatch began and %s is not idempotent: "
				 "its outcome is unknown, it waits for settle", w->conv, id, name);
			*attempt = att;
			return UNKNOWN_NOW;
		}
		t = wstore_wbegin(w, 0);
		/* Read again: it may have been settled (a cancel) while no transaction was held. */
		wstore_must(w, t, store_tool_call_get(t, id, &row), "tool call row");
		if (row.status != STORE_TC_PENDING || row.attempts != att) {
			wstore_wabort(w, t);
			return SETTLED; /* decide again from the log */
		}
	}
	if (tc && !granted && row.attempts >= (uint32_t)tc->max_attempts) {
		/* Every dispatch so far was interrupted: settle it without
		 * counting one that will not run, so its row and its result name
		 * the same attempts. A dispatch someone granted is not refused. */
		wstore_wabort(w, t);
		log_warn("%s: tool call %s interrupted %u times: settled errored", w->conv, id, row.attempts);
		settle(w, id, STORE_TC_ERRORED, json_pack("{sssi}", "error", "interrupted", "attempts", (int)row.attempts));
		return SETTLED;
	}
	wstore_must(w, t, store_tool_call_attempt(t, id, attempt), "attempt");
	wstore_commit(w, t, "count attempt", 0);
	/* The tool acts outside the store: the call and its attempt must be
	 * durable first, or an OS crash could forget a side effect that ran
	 * (docs/durability.md). Outside the writer lock and the write gate. */
	if ((e = store_flush(w->st)))
		wstore_die_flush(w, e, "flush before the tool runs");
	return RUN;
}

/* The result of a server tool's process: its output, or why it failed. */
static json_t *tool_result(const struct tool_cfg *tc, int rc, const struct proc_result *r, int *status)
{
	json_t *res = NULL;
	*status = STORE_TC_ERRORED;
	if (rc < 0) {
		char why[300];
		isolate_strerror(rc, why, sizeof why);
		res = json_pack("{ssss}", "error", "cannot run the tool", "reason", why);
		if (ISOLATE_IS(rc, ISOLATE_ESANDBOX) || ISOLATE_IS(rc, ISOLATE_ELANDLOCK))
			json_object_set_new(res, "error", json_string("cannot run the tool in its sandbox"));
		else if (ISOLATE_IS(rc, ISOLATE_ENETNS))
			json_object_set_new(res, "error", json_string("cannot run the tool without a network (network = none)"));
		else if (rc == -EPERM && (tc->iso.user || tc->iso.group))
			json_object_set_new(res, "error", json_sprintf("cannot run the tool as %s%s (agentd is not root?)",
								       tc->iso.user ? "user " : "group ",
								       tc->iso.user ? tc->iso.user : tc->iso.group));
		return res;
	}
	if (r->exited && r->status == 0 && !r->out_overflow) {
		*status = STORE_TC_RESOLVED;
		if (tool_output_parse(r->out, r->out_len, &res))
			res = json_pack("{ss}", "error", "out of memory");
		return res;
	}
	/* The tail of stderr: any bytes, cut anywhere (json_pack refused what
	 * was not UTF-8, and the result was stored as null). */
	res = json_pack("{so}", "stderr", json_text(r->err ? r->err : "", r->err_len));
	if (r->timed_out)
		json_object_set_new(res, "error", json_sprintf("timed out after %lld ms", (long long)tc->timeout_ms));
	else if (r->out_overflow)
		json_object_set_new(res, "error", json_sprintf("output over %zu bytes", tc->out_cap));
	else if (r->exited)
		json_object_set_new(res, "exit_status", json_integer(r->status));
	else
		json_object_set_new(res, "signal", json_integer(r->sig));
	char why[200];
	if (!r->timed_out && !r->out_overflow &&
	    isolate_explain(&tc->iso, r->exited, r->status, r->signaled, r->sig, why, sizeof why))
		json_object_set_new(res, "error", json_string(why));
	return res;
}

/* What a reconcile command answered (docs/tools.md): CONV_DONE (with
 * *result, a new reference or NULL), CONV_RETRY, or -1 unsure. */
static int reconcile_answer(int rc, const struct proc_result *r, json_t **result)
{
	*result = NULL;
	if (rc < 0 || !r->exited || r->status != 0 || r->out_overflow)
		return -1;
	json_t *a = json_loadb(r->out ? r->out : "", r->out_len, 0, NULL);
	json_t *h = json_object_get(a, "happened");
	int out = json_is_true(h) ? CONV_DONE : json_is_false(h) ? CONV_RETRY : -1;
	if (out == CONV_DONE && json_object_get(a, "result"))
		*result = json_incref(json_object_get(a, "result"));
	json_decref(a);
	return out;
}

/* Ask the tool's reconcile command, with the call's id (its last argument,
 * AGENTD_TOOL_CALL_ID, and the tool's input on stdin), whether the unknown
 * call's effect happened; its answer decides the call (conv_unknown_decide):
 * done with its result, or retry. Unsure, failed or stopped: the call stays
 * unknown. */
static void reconcile(struct worker *w, const char *id, const char *name, json_t *args, const struct tool_cfg *tc,
		      uint32_t attempts, struct worker_watch *ww)
{
	char **words = NULL, *input = NULL, **argv = NULL;
	size_t n = 0;
	if (cmdline_split(tc->reconcile, &words))
		return;
	while (words[n])
		n++;
	input = tool_input_json_attempt(id, name, args, w->conv, attempts);
	if (!input || !(argv = calloc(n + 2, sizeof *argv))) {
		log_warn("%s: cannot ask reconcile of tool call %s: out of memory; it stays unknown", w->conv, id);
		goto out;
	}
	memcpy(argv, words, n * sizeof *argv);
	argv[n] = (char *)id;
	char env1[200], env2[200];
	snprintf(env1, sizeof env1, "AGENTD_TOOL_CALL_ID=%s", id);
	snprintf(env2, sizeof env2, "AGENTD_CONVERSATION=%s", w->conv);
	const char *env[] = { env1, env2, NULL };
	struct proc_opts o = {
		.env_add = env, .iso = &tc->iso, .sandbox = &w->sandbox, .input = input, .input_len = strlen(input),
		.timeout_ms = tc->timeout_ms, .out_cap = tc->out_cap, .watch_fd = w->ipc,
		.on_watch = tools_on_watch, .arg = ww, .on_start = wipc_on_start,
	};
	struct proc_result r;
	json_t *result = NULL;
	int rc = wstore_run_command(w, argv, &o, &r);
	int outcome = reconcile_answer(rc, &r, &result);
	proc_result_free(&r);
	if (outcome < 0) {
		log_warn("%s: reconcile of tool call %s gave no answer (rc %d): it stays unknown", w->conv, id, rc);
		goto out;
	}
	json_t *by = json_pack("{sb}", "reconcile", 1);
	char conv[STORE_ID_MAX + 1];
	snprintf(conv, sizeof conv, "%s", w->conv);
	uint64_t seq = 0;
	int ended = 0;
	store_txn *t = wstore_wbegin(w, 0);
	int e = by ? conv_unknown_decide(t, id, outcome, result, by, conv, &seq, &ended) : -ENOMEM;
	json_decref(by);
	json_decref(result);
	if (e == STORE_E_STALE || e == STORE_E_INVAL) {
		wstore_wabort(w, t); /* decided first by someone else, or a result too deep: unknown */
		log_warn("%s: reconcile's answer for tool call %s not recorded: %s", w->conv, id, store_strerror(e));
		goto out;
	}
	wstore_must(w, t, e, "reconcile");
	wstore_commit(w, t, "reconcile", seq);
	log_info("%s: reconcile decided tool call %s: %s", w->conv, id, conv_outcome_name(outcome));
out:
	free(argv);
	free(input);
	cmdline_free(words);
}

static void dispatch_call(struct worker *w, const json_t *call)
{
	const char *id = json_string_value(json_object_get(call, "tool_call_id"));
	const char *name = json_string_value(json_object_get(call, "name"));
	json_t *args = json_object_get(call, "args");
	const struct tool_cfg *tc = workset_tool(w, name);
	uint32_t attempt = 0;
	struct worker_watch ww = { w, 0, 0, 0 };
	int c = count_attempt(w, id, name, args, tc, &attempt);
	if (c == UNKNOWN_NOW && tc && tc->reconcile) {
		/* Asked once, when the call becomes unknown. */
		ww.hold = 1;
		wipc_report_state(w, "running");
		reconcile(w, id, name, args, tc, attempt, &ww);
		if (ww.stop_held)
			exit(0);
		return; /* decide again: decided, or still unknown (then awaited) */
	}
	if (c == UNKNOWN || c == UNKNOWN_NOW)
		return; /* decide again: now awaited */
	if (c == SETTLED)
		return;
	if (!tc) {
		settle(w, id, STORE_TC_ERRORED, json_pack("{ss}", "error", "unknown tool: not configured for this conversation"));
		return;
	}
	ww.hold = !tool_idempotent(w, name, tc);
	wipc_report_state(w, "running");
	setproctitle("%s tool %s", w->conv, name);
	if (tc->mcp) {
		dispatch_mcp(w, id, name, args, tc, attempt, &ww);
		if (ww.stop_held)
			exit(0);
		return;
	}
	char **argv = NULL;
	if (cmdline_split(tc->command, &argv)) {
		settle(w, id, STORE_TC_ERRORED, json_pack("{ss}", "error", "the tool's command cannot be split"));
		return;
	}
	char *input = tool_input_json_attempt(id, name, args, w->conv, attempt);
	if (!input) { /* never run the tool without its request */
		cmdline_free(argv);
		settle(w, id, STORE_TC_ERRORED, json_pack("{ss}", "error", "out of memory for the tool's input"));
		return;
	}
	char env1[200], env2[200];
	snprintf(env1, sizeof env1, "AGENTD_TOOL_CALL_ID=%s", id);
	snprintf(env2, sizeof env2, "AGENTD_CONVERSATION=%s", w->conv);
	const char *env[] = { env1, env2, NULL };
	int status;
	struct proc_opts o = {
		.env_add = env, .iso = &tc->iso, .sandbox = &w->sandbox, .input = input,
		.input_len = input ? strlen(input) : 0,
		.timeout_ms = tc->timeout_ms, .out_cap = tc->out_cap, .watch_fd = w->ipc,
		.on_watch = tools_on_watch, .arg = &ww, .on_start = wipc_on_start,
	};
	struct proc_result r;
	int rc = wstore_run_command(w, argv, &o, &r);
	free(input);
	cmdline_free(argv);
	if (ww.stop || rc == -ECANCELED) {
		proc_result_free(&r);
		log_info("%s: stopped during tool call %s; it is re-dispatched on revival", w->conv, id);
		exit(0);
	}
	json_t *res = tool_result(tc, rc, &r, &status);
	settle(w, id, status, res);
	proc_result_free(&r);
	if (ww.stop_held)
		exit(0); /* the stop it held */
	return;
}

/* Human calls: make sure each row is pending with its expiry, then wait. */
int tools_await_people(struct worker *w, const json_t *unsettled)
{
	store_txn *t = wstore_wbegin(w, 0);
	if (wstore_log_moved(w, t, w->last_seq)) {
		/* A resolution or expiry came since: decide again. */
		wstore_wabort(w, t);
		return 1;
	}
	json_t *pending = json_object();
	if (!pending)
		wstore_die_oom(w, t, "recording the awaited calls");
	size_t i;
	json_t *call;
	json_array_foreach(unsettled, i, call) {
		const char *id = json_string_value(json_object_get(call, "tool_call_id"));
		const char *name = json_string_value(json_object_get(call, "name"));
		const struct tool_cfg *tc = workset_tool(w, name);
		const char *prompt = tc ? tc->prompt : "Approve?";
		const char *ex = json_string_value(json_object_get(call, "executor"));
		if (!ex || strcmp(ex, "human")) {
			/* A server call here is unknown (tools_call_unknown). */
			if (json_object_set_new(pending, id, json_pack("{s:s, s:s, s:s}", "executor", "server", "name", name,
								       "kind", "unknown")))
				wstore_die_oom(w, t, "recording the awaited calls");
			continue;
		}
		struct store_tool_call row;
		int e = store_tool_call_get(t, id, &row);
		if (e == STORE_E_NOTFOUND) {
			struct jsonmp_buf ab, pb;
			json_t *p = json_string(prompt);
			if (!p)
				wstore_die_oom(w, t, "recording the awaited calls"); /* stored, it would be a null prompt */
			struct store_tool_call_in in = { id, name, STORE_EXEC_HUMAN, wstore_pack(w, &ab, json_object_get(call, "args")),
							 wstore_pack(w, &pb, p) };
			e = store_tool_call_upsert(t, w->conv, &in);
			jsonmp_buf_destroy(&ab);
			jsonmp_buf_destroy(&pb);
			json_decref(p);
			if (!e && tc && tc->expires_ms > 0)
				e = tools_schedule_deadline(t, id, tc);
		} else if (!e && row.status == STORE_TC_PENDING && row.deadline == 0 && tc && tc->expires_ms > 0) {
			e = tools_schedule_deadline(t, id, tc);
		}
		wstore_must(w, t, e, "pending row");
		if (json_object_set_new(pending, id,
					json_pack("{s:s, s:s, s:s, s:s}", "executor", "human", "name", name, "prompt", prompt,
						  "kind", "approval")))
			wstore_die_oom(w, t, "recording the awaited calls"); /* never a call missing from them */
	}
	wstore_put_state(w, t, STORE_SUSPENDED, conv_fsm_state("awaiting_input", pending, w->last_seq));
	wstore_commit(w, t, "await", 0);
	wipc_report_state(w, "awaiting_input");
	return 0;
}
