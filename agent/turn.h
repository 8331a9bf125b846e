/*
 * turn.h: one model round of a turn: the budget checked, the run started
 * (store.h's runs), the request rendered (render.h) with the MCP servers'
 * tools offered, the model called (model_run.h), and its reply committed
 * (the assistant_msg, its tool calls, usage, audit row, status and
 * fsm_state in one transaction), or the failure committed as an error event.
 */
#ifndef AGENTD_AGENT_TURN_H
#define AGENTD_AGENT_TURN_H

#include "agent/worker.h"

/* Model round `round` of the turn answering the events from from_seq (its
 * run's from_seq; conv/conv.h's tail): past max_tool_rounds rounds that each
 * called tools, the turn ends with an error instead of another call, so a
 * model that always calls a tool cannot loop forever. A model not in the
 * configuration, a request that cannot be rendered, or a failed call is
 * committed as an error event; a spent budget pauses the conversation
 * instead (budget_pause). Told to stop during the call, exits 0; store
 * failures exit as wstore.h says. */
void turn_run(struct worker *w, int round, uint64_t from_seq);

#endif
