/*
 * workset.h: the worker's view of its conversation: the settings, the
 * latest summary and the events after it (the working set), as read from
 * the store and kept in the context (worker.h: settings, summary, sum_to,
 * sum_version, events, last_seq, and the status flags ended, active,
 * paused). Read failures end the worker (wstore.h's exit codes): a view
 * short of an event would decide wrongly.
 */
#ifndef AGENTD_AGENT_WORKSET_H
#define AGENTD_AGENT_WORKSET_H

#include "agent/worker.h"

/* The revival read: the settings, the latest summary and every event after
 * it, in one read transaction. Exits IPC_EXIT_CORRUPT on an event, a summary
 * or settings that cannot be decoded (or a summary past the log), and
 * IPC_EXIT_STORE when out of memory. */
void workset_load(struct worker *w);

/* Pick up the events committed since the last read (by the supervisor:
 * sends, resolutions, expiries) and the current settings and status. Exits
 * as workset_load. */
void workset_refresh(struct worker *w);

/* A tool this conversation may use: configured and in its settings, or a
 * tool PREFIX+name of an MCP server it offers. The configuration's entry
 * (owned by w->cfg), or NULL. */
const struct tool_cfg *workset_tool(struct worker *w, const char *name);

/* The conversation's max_tool_rounds (1..1000000), else the
 * configuration's. */
int workset_max_tool_rounds(struct worker *w);

/* The working set's events with lo <= seq <= hi: a new array (the caller
 * json_decrefs it), or NULL when out of memory (never one short of an
 * event). */
json_t *workset_between(struct worker *w, uint64_t lo, uint64_t hi);

#endif
