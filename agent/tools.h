/*
 * tools.h: the worker's tool executors: a server call is counted durably,
 * run (a command, tools.c's dispatch_call, or an MCP server's tool, mcp.h)
 * and settled with its tool_result; human calls are recorded as awaited and
 * the worker waits for people (the supervisor settles them).
 *
 * Where a new tool executor goes: its kind in common/config.h's tool_cfg
 * (executor, or a field like mcp), its run in tools.c's dispatch_call beside
 * dispatch_mcp, settled with settle() as the others are.
 *
 * Each call's result is committed and flushed before the next step: a tool
 * that ran is never run again for want of a record. Told to stop while a
 * tool runs, the worker exits 0 (the call is re-dispatched on revival with
 * its same id); the supervisor's death does not stop it (its result is
 * committed, wipc_orphaned).
 */
#ifndef AGENTD_AGENT_TOOLS_H
#define AGENTD_AGENT_TOOLS_H

#include "agent/worker.h"

/* Dispatch one unsettled server call (its tool_call event's content: id,
 * name, args), under the conversation's lock (common/convlock.h), held until
 * its result is committed. Exits IPC_EXIT_STORE when the lock cannot be
 * taken; store failures exit as wstore.h says. */
void tools_dispatch(struct worker *w, const json_t *call);
/* Whether the server call id is unknown (store.h's STORE_TC_UNKNOWN): not
 * dispatched, awaited as a person's call is until `settle` decides it. */
int tools_call_unknown(struct worker *w, const char *id);

/* Human calls and unknown server calls (an array of tool_call contents):
 * make sure each human call's row is pending with its expiry, record status suspended, report
 * "awaiting_input". Returns 1 when the log moved since the last read (decide
 * again; nothing written), 0 when the worker now waits. */
int tools_await_people(struct worker *w, const json_t *unsettled);

/* A human call's deadline (tc's expires from now) and, with warn_before,
 * its expiry warning: durable like the deadline, in the caller's
 * transaction t. 0, or a store error code (store.h). */
int tools_schedule_deadline(store_txn *t, const char *id, const struct tool_cfg *tc);

/* The on_watch callback (proc.h, mcp.h) of a tool's or MCP server's run: arg
 * is a struct worker_watch. A stop sets its stop and returns 1 (the run
 * ends); the supervisor's death is noted (wipc_orphaned) and the run goes
 * on (0). */
int tools_on_watch(void *arg);

#endif
