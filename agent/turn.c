/*
 * turn.c: one model round of a turn (turn.h).
 */
#include "agent/turn.h"
#include "agent/budget.h"
#include "agent/model_run.h"
#include "agent/render.h"
#include "agent/tools.h"
#include "agent/wipc.h"
#include "agent/workset.h"
#include "agent/wstore.h"
#include "common/id.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"

#include <stdio.h>
#include <string.h>

/* Start the turn's run (store.h), durably before the model is called: a
 * run left running by a worker that died is interrupted now, and this one
 * is its next attempt when it answers the same events (from_seq). */
static void run_begin(struct worker *w, uint64_t from_seq, uint64_t ctx_seq, const char *model)
{
	store_txn *t = wstore_wbegin(w, 0);
	struct store_run prev;
	int e = conv_run_running(t, w->conv, &prev);
	if (e < 0)
		wstore_must(w, t, e, "read runs");
	int64_t now = store_txn_now(t);
	uint32_t attempt = 1;
	if (prev.id && (prev.status == STORE_RUN_RUNNING || prev.status == STORE_RUN_INTERRUPTED) &&
	    prev.from_seq == from_seq)
		attempt = prev.attempt + 1;
	if (prev.id && prev.status == STORE_RUN_RUNNING) {
		log_info("%s: run %llu was interrupted: this is attempt %u", w->conv, (unsigned long long)prev.id,
			 attempt);
		prev.status = STORE_RUN_INTERRUPTED;
		prev.ended_at = now;
		wstore_must(w, t, store_run_put(t, w->conv, &prev), "end interrupted run");
	}
	snprintf(w->run_model, sizeof w->run_model, "%s", model);
	w->run = (struct store_run){ .id = prev.id + 1, .status = STORE_RUN_RUNNING, .attempt = attempt,
				    .from_seq = from_seq, .to_seq = ctx_seq,
				    .model = { w->run_model, strlen(w->run_model) }, .started_at = now };
	wstore_must(w, t, store_run_put(t, w->conv, &w->run), "start run");
	wstore_commit(w, t, "start run", 0); /* no event: agentd still tells watchers (runs) */
}

/* End the turn's run inside the transaction that commits the turn's end. */
static void run_end(struct worker *w, store_txn *t, int status, uint64_t first, uint64_t last, const struct store_usage *u)
{
	if (!w->run.id)
		return;
	w->run.status = status;
	w->run.first_seq = first;
	w->run.last_seq = last;
	if (u)
		w->run.usage = *u;
	w->run.ended_at = store_txn_now(t);
	wstore_must(w, t, store_run_put(t, w->conv, &w->run), "end run");
	w->run.id = 0;
}

/* One of the turn's tool calls, in its transaction t: the tool_call event
 * (the model's id kept when the store has not seen it), the call's row and,
 * for a human call, its suspension, deadline and entry in pending. 1 for a
 * human call, 0 for a server call. */
static int record_call(struct worker *w, store_txn *t, struct model_call *mc, json_t *pending)
{
	char id[STORE_ID_MAX + 1];
	struct store_tool_call old;
	if (mc->id && store_tool_call_get(t, mc->id, &old) == STORE_E_NOTFOUND)
		snprintf(id, sizeof id, "%s", mc->id);
	else
		id_random(id, sizeof id, "tc-", 10);
	const struct tool_cfg *tc = workset_tool(w, mc->name);
	int human = tc && tc->executor == EXEC_HUMAN;
	wstore_append(w, t, "tool_call", json_pack("{sssssOss}", "tool_call_id", id, "name", mc->name, "args", mc->args,
					 "executor", human ? "human" : "server"));
	struct jsonmp_buf ab, pb;
	json_t *prompt = human ? json_string(tc->prompt) : NULL;
	if (human && !prompt)
		wstore_die_oom(w, t, "recording the turn"); /* stored, it would be a null prompt */
	struct store_tool_call_in in = { id, mc->name, human ? STORE_EXEC_HUMAN : STORE_EXEC_SERVER,
					 wstore_pack(w, &ab, mc->args), human ? wstore_pack(w, &pb, prompt) : (store_bytes){ 0 } };
	int e = store_tool_call_upsert(t, w->conv, &in);
	jsonmp_buf_destroy(&ab);
	if (human)
		jsonmp_buf_destroy(&pb);
	wstore_must(w, t, e, "tool call row");
	if (human) {
		wstore_append(w, t, "suspension", json_pack("{ssso}", "tool_call_id", id, "prompt", prompt));
		if (tc->expires_ms > 0)
			wstore_must(w, t, tools_schedule_deadline(t, id, tc), "expiry");
		if (json_object_set_new(pending, id, json_pack("{s:s, s:s, s:s}", "executor", "human", "name",
								mc->name, "prompt", tc->prompt)))
			wstore_die_oom(w, t, "recording the turn"); /* never a call missing from the awaited ones */
	}
	return human;
}

/* The turn's assistant_msg, its tool calls (rows, suspensions, expiries),
 * usage, audit row, status and fsm_state: one transaction. */
static void commit_turn(struct worker *w, struct model_reply *r, uint64_t ctx_seq, int round, const json_t *req,
			const char *model, int64_t latency)
{
	size_t bytes = strlen(r->text) + (w->cfg.audit ? wstore_json_size(req) : 0);
	for (size_t i = 0; i < r->ncalls; i++)
		bytes += 2 * wstore_json_size(r->calls[i].args); /* in the tool_call event and the call's row */
	wstore_reserve(w, bytes);
	store_txn *t = wstore_wbegin(w, 1);
	uint64_t before = 0;
	wstore_must(w, t, store_event_latest_seq(t, w->conv, &before), "latest seq");
	json_t *content = json_pack("{sssI}", "text", r->text, "context_seq", (json_int_t)ctx_seq);
	/* the rounds max_tool_rounds counts; a first round says nothing */
	if (content && round > 1 && json_object_set_new(content, "round", json_integer(round)))
		wstore_die_oom(w, t, "recording the turn");
	uint64_t a = wstore_append(w, t, "assistant_msg", content);
	json_t *pending = json_object();
	if (!pending)
		wstore_die_oom(w, t, "recording the turn");
	int humans = 0, servers = 0;
	for (size_t i = 0; i < r->ncalls; i++) {
		if (record_call(w, t, &r->calls[i], pending))
			humans++;
		else
			servers++;
	}
	/* Counted in the turn's own transaction: a turn killed before it is
	 * counted nowhere, and its re-run once (a budget never pays twice). */
	struct store_usage u = { r->input_tokens, r->output_tokens, r->cost };
	wstore_must(w, t, store_usage_add(t, w->conv, &u), "usage");
	wstore_must(w, t, store_turns_add(t, w->conv, 1), "turns");
	wstore_audit(w, t, a, req, model, &u, latency);
	uint64_t last = 0;
	wstore_must(w, t, store_event_latest_seq(t, w->conv, &last), "latest seq");
	run_end(w, t, STORE_RUN_COMPLETED, a, last, &u);
	if (humans) {
		/* Suspended in the transaction that makes the suspension visible
		 * (docs/protocol.md, "Semantics"), even while this turn's server calls still
		 * run (resolve and expiry make it active once no person is
		 * awaited, so a worker that dies running them is restarted). */
		wstore_put_state(w, t, STORE_SUSPENDED, conv_fsm_state("awaiting_input", pending, last));
	} else {
		json_decref(pending);
		if (!servers && before == ctx_seq)
			wstore_put_state(w, t, STORE_IDLE, conv_fsm_state("idle", NULL, last)); /* nothing arrived meanwhile */
	}
	wstore_commit(w, t, "commit turn", last);
}

static void commit_error_audit(struct worker *w, const char *msg, int attempts, uint64_t ctx_seq, const json_t *rendered,
			       const char *model)
{
	store_txn *t = wstore_wbegin(w, 1);
	int moved = wstore_log_moved(w, t, ctx_seq); /* a message queued during the failed turn is still owed */
	/* msg may quote a model's stderr, cut anywhere: not always UTF-8. */
	uint64_t seq = 0;
	wstore_must(w, t, conv_error_append(t, w->conv, msg, strlen(msg), attempts, ctx_seq, &seq), "append");
	run_end(w, t, STORE_RUN_FAILED, seq, seq, NULL);
	if (!moved)
		wstore_put_state(w, t, STORE_IDLE, conv_fsm_state("idle", NULL, seq));
	if (rendered) /* the failed attempts, keyed by the error event */
		wstore_audit(w, t, seq, rendered, model, &(struct store_usage){ 0 }, 0);
	wstore_commit(w, t, "commit error", seq);
}

static void commit_error(struct worker *w, const char *msg, int attempts, uint64_t ctx_seq)
{
	commit_error_audit(w, msg, attempts, ctx_seq, NULL, NULL);
}

/* The tools of the MCP servers the turn offers (started at their first
 * turn), in place of the servers' names. -ENOMEM: the turn is not to run. */
static int offer_mcp(struct worker *w, json_t *req)
{
	struct worker_watch ww = { w, 0, 0, 0 };
	int any = 0;
	struct mcp_watch mw = { w->ipc, tools_on_watch, &ww, wipc_on_start };
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(req, "tools"), i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		const struct tool_cfg *tc = name ? config_tool(&w->cfg, name) : NULL;
		any |= tc && tc->mcp;
	}
	if (!any)
		return 0; /* the common case keeps the store open: no server to wait for */
	wstore_let_go(w);
	int e = mcp_offer(w->mcp, json_object_get(req, "tools"), &mw);
	wstore_take(w);
	if (ww.stop) {
		json_decref(req);
		log_info("%s: stopped while starting an MCP server; the turn is run on revival", w->conv);
		exit(0);
	}
	return e;
}

/* Model round `round` of a turn (tail.h): past max_tool_rounds rounds that
 * each called tools, the turn ends with an error instead of another call, so a
 * model that always calls a tool cannot loop forever; a user_msg starts anew. */
void turn_run(struct worker *w, int round, uint64_t from_seq)
{
	const char *model = json_string_value(json_object_get(w->settings, "model"));
	const struct model_cfg *mc = model ? config_model(&w->cfg, model) : NULL;
	uint64_t ctx_seq = w->last_seq;
	int max = workset_max_tool_rounds(w);
	wipc_report_state(w, "running");
	if (round > max) {
		char msg[200];
		snprintf(msg, sizeof msg,
			 "the turn called tools in %d model rounds in a row (max_tool_rounds = %d): stopped; the next "
			 "user message starts a new turn",
			 round - 1, max);
		log_warn("%s: %s", w->conv, msg);
		commit_error(w, msg, 0, ctx_seq);
		return;
	}
	if (!mc) {
		char msg[200];
		snprintf(msg, sizeof msg, "model '%s' is not in the configuration", model ? model : "(none)");
		commit_error(w, msg, 0, ctx_seq);
		return;
	}
	if (budget_pause(w, ctx_seq))
		return;
	run_begin(w, from_seq, ctx_seq, mc->name); /* after the budget: a paused turn calls no model, makes no run */
	json_t *req = render_turn(w->conv, ctx_seq, w->settings, &w->cfg, w->summary, w->events);
	if (!req || offer_mcp(w, req)) {
		/* Never a model called with a message or a tool left out: the
		 * turn fails, and the next message asks again. */
		json_decref(req);
		log_error("%s: out of memory rendering the model's request", w->conv);
		commit_error(w, "out of memory rendering the model's request", 0, ctx_seq);
		return;
	}
	struct model_run mr;
	int64_t latency = 0;
	if (model_run(w, mc, req, &mr, &latency))
		commit_error_audit(w, mr.err, mr.tries, ctx_seq, mr.audit, mc->name);
	else
		commit_turn(w, &mr.final, ctx_seq, round, mr.audit ? mr.audit : req, mc->name, latency);
	model_reply_free(&mr.final);
	json_decref(mr.audit);
	json_decref(req);
}
