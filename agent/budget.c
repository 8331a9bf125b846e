/*
 * budget.c: a conversation's budget, as the worker keeps it (budget.h).
 */
#include "agent/budget.h"
#include "agent/wstore.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"

/* The limit the conversation's committed usage has reached under its
 * settings as this transaction reads them, or NULL; *why as
 * conv_budget_exceeded gives it. */
const char *budget_spent(struct worker *w, store_txn *t, json_t **why)
{
	struct store_conv c;
	int e = store_conv_get(t, w->conv, &c);
	if (e) {
		store_txn_abort(t);
		wstore_die(w, e, "read conversation");
	}
	json_t *settings = jsonmp_unpack(c.settings.ptr, c.settings.len);
	struct config_budget b;
	conv_budget_of(settings, &w->cfg.budget, &b);
	json_decref(settings);
	return conv_budget_exceeded(&b, &c.usage, c.turns, why);
}

/* Before a turn's model call: with the budget spent, a budget_exceeded
 * event and status paused commit together, and the turn stays owed (a
 * larger budget set with `update` makes the conversation active again).
 * Returns 1 when paused. Decided again inside the write transaction: an
 * update that raised the budget since the read must not be paused over. */
int budget_pause(struct worker *w, uint64_t ctx_seq)
{
	store_txn *t = wstore_rbegin(w);
	const char *limit = budget_spent(w, t, NULL);
	store_txn_abort(t);
	if (!limit)
		return 0;
	t = wstore_wbegin(w, 1);
	json_t *why = NULL;
	if (!(limit = budget_spent(w, t, &why))) {
		wstore_wabort(w, t);
		return 0;
	}
	uint64_t seq = wstore_append(w, t, "budget_exceeded", why);
	wstore_put_state(w, t, STORE_PAUSED, conv_fsm_state("paused", NULL, seq));
	wstore_commit(w, t, "pause", seq);
	log_info("%s: the budget's %s is reached: paused before the turn after seq %llu", w->conv, limit,
		 (unsigned long long)ctx_seq);
	return 1;
}
