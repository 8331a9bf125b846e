/*
 * budget.h: the worker's side of a conversation's budget (the limits of its
 * settings over the configuration's, conv/conv.h's conv_budget_*): whether
 * it is spent, and pausing a turn on it.
 */
#ifndef AGENTD_AGENT_BUDGET_H
#define AGENTD_AGENT_BUDGET_H

#include "agent/worker.h"

/* The limit the conversation's committed usage has reached under its
 * settings as transaction t reads them (a static string: "turns", ...), or
 * NULL; why (may be NULL) gets what conv_budget_exceeded gives (the
 * caller's). Exits as wstore_die when the conversation cannot be read. */
const char *budget_spent(struct worker *w, store_txn *t, json_t **why);

/* Before a turn's model call: with the budget spent, a budget_exceeded event
 * and status paused commit together, and the turn stays owed (a larger
 * budget set with `update` makes the conversation active again). Decided
 * again inside the write transaction: an update that raised the budget
 * since the read must not be paused over. Returns 1 when paused, 0 when the
 * turn may run; store failures exit (wstore.h). */
int budget_pause(struct worker *w, uint64_t ctx_seq);

#endif
