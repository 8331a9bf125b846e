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
	if (d) {
		ww->stop = 1;
		return 1;
	}
	return 0;
}

/* A call of an MCP server's tool (mcp.h): tools/call on the server this
 * worker keeps, the same settle and stop rules as a command's. */
static void dispatch_mcp(struct worker *w, const char *id, const char *name, json_t *args, const struct tool_cfg *tc)
{
	const char *tool = mcp_tool_name(tc, name);
	if (!tool) {
		settle(w, id, STORE_TC_ERRORED, json_pack("{so}", "error", json_sprintf("%s is an MCP server: call one of its "
									    "tools, %s<tool>", name, tc->mcp->prefix)));
		return;
	}
	struct worker_watch ww = { w, 0 };
	int is_error = 1;
	struct mcp_watch mw = { w->ipc, tools_on_watch, &ww, wipc_on_start };
	json_t *res = NULL;
	wstore_let_go(w);
	int rc = mcp_call(w->mcp, tc, tool, args, &mw, &res, &is_error);
	wstore_take(w);
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

/* Dispatch one unsettled server call: count the attempt durably first, so a
 * kill mid-run is counted, then run it with the same tool_call_id. */
/* Count the dispatch durably before the tool runs, so a kill mid-run is
 * counted. 1 when the call was settled instead (interrupted too often). */
static int count_attempt(struct worker *w, const char *id, const char *name, json_t *args, const struct tool_cfg *tc)
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
	}
	wstore_must(w, t, e, "tool call row");
	if (tc && row.attempts >= (uint32_t)tc->max_attempts) {
		/* Every dispatch so far was interrupted: settle it without
		 * counting one that will not run, so its row and its result name
		 * the same attempts. */
		wstore_wabort(w, t);
		log_warn("%s: tool call %s interrupted %u times: settled errored", w->conv, id, row.attempts);
		settle(w, id, STORE_TC_ERRORED, json_pack("{sssi}", "error", "interrupted", "attempts", (int)row.attempts));
		return 1;
	}
	wstore_must(w, t, store_tool_call_attempt(t, id, NULL), "attempt");
	wstore_commit(w, t, "count attempt", 0);
	/* The tool acts outside the store: the call and its attempt must be
	 * durable first, or an OS crash could forget a side effect that ran
	 * (docs/durability.md). Outside the writer lock and the write gate. */
	if ((e = store_flush(w->st)))
		wstore_die_flush(w, e, "flush before the tool runs");
	return 0;
}

/* The result of a server tool's process: its output, or why it failed. */
static json_t *tool_result(const struct tool_cfg *tc, int rc, const struct proc_result *r, int *status)
{
	json_t *res = NULL;
	*status = STORE_TC_ERRORED;
	if (rc < 0) {
		char why[200];
		isolate_strerror(rc, why, sizeof why);
		res = json_pack("{ssss}", "error", "cannot run the tool", "reason", why);
		if (rc <= ISOLATE_ENETNS)
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

static void dispatch_call(struct worker *w, const json_t *call)
{
	const char *id = json_string_value(json_object_get(call, "tool_call_id"));
	const char *name = json_string_value(json_object_get(call, "name"));
	json_t *args = json_object_get(call, "args");
	const struct tool_cfg *tc = workset_tool(w, name);
	if (count_attempt(w, id, name, args, tc))
		return;
	if (!tc) {
		settle(w, id, STORE_TC_ERRORED, json_pack("{ss}", "error", "unknown tool: not configured for this conversation"));
		return;
	}
	wipc_report_state(w, "running");
	setproctitle("%s tool %s", w->conv, name);
	if (tc->mcp) {
		dispatch_mcp(w, id, name, args, tc);
		return;
	}
	char **argv = NULL;
	if (cmdline_split(tc->command, &argv)) {
		settle(w, id, STORE_TC_ERRORED, json_pack("{ss}", "error", "the tool's command cannot be split"));
		return;
	}
	char *input = tool_input_json(id, name, args, w->conv);
	if (!input) { /* never run the tool without its request */
		cmdline_free(argv);
		settle(w, id, STORE_TC_ERRORED, json_pack("{ss}", "error", "out of memory for the tool's input"));
		return;
	}
	char env1[200], env2[200];
	snprintf(env1, sizeof env1, "AGENTD_TOOL_CALL_ID=%s", id);
	snprintf(env2, sizeof env2, "AGENTD_CONVERSATION=%s", w->conv);
	const char *env[] = { env1, env2, NULL };
	struct worker_watch ww = { w, 0 };
	int status;
	struct proc_opts o = {
		.env_add = env, .iso = &tc->iso, .input = input, .input_len = input ? strlen(input) : 0,
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
					json_pack("{s:s, s:s, s:s}", "executor", "human", "name", name, "prompt", prompt)))
			wstore_die_oom(w, t, "recording the awaited calls"); /* never a call missing from them */
	}
	wstore_put_state(w, t, STORE_SUSPENDED, conv_fsm_state("awaiting_input", pending, w->last_seq));
	wstore_commit(w, t, "await", 0);
	wipc_report_state(w, "awaiting_input");
	return 0;
}
