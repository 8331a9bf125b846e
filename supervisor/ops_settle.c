/*
 * ops_settle.c: `settle`, a decision on a tool call whose outcome is
 * unknown (docs/tools.md, "Calls whose outcome is unknown";
 * docs/protocol.md): retry, done or failed, by the conversation rule
 * conv_unknown_decide, in the group transaction as ops_write.c's writes are.
 * Kept apart from `resolve`, which answers the calls people are asked.
 */
#include "conv/conv.h"
#include "supervisor/ops_int.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

_Static_assert((int)PROTO_RETRY == (int)CONV_RETRY && (int)PROTO_DONE == (int)CONV_DONE &&
		       (int)PROTO_FAILED == (int)CONV_FAILED,
	       "the codec's outcomes are the conversation rule's");

int ops_w_settle(store_txn *t, struct job *j, struct wres *r)
{
	json_t *by = ops_by_json(j); /* who decided, as resolve records it */
	if (!by)
		return 0;
	snprintf(r->conv, sizeof r->conv, "%s", j->rq.conv);
	int e = conv_unknown_decide(t, j->rq.tool_call_id, j->rq.outcome, j->rq.result, by, r->conv, &r->seq, &r->ended);
	json_decref(by);
	if (e == STORE_E_NOTFOUND)
		return job_error(j, PERR_NOT_FOUND, "tool call %s of conversation %s not found", j->rq.tool_call_id,
				 j->rq.conv), 0;
	if (e == STORE_E_STALE)
		return job_error(j, PERR_STALE, "tool call %s is not unknown (pending, running or already settled)",
				 j->rq.tool_call_id), 0;
	if (e == STORE_E_INVAL)
		return job_error(j, PERR_BAD_REQUEST, "'result' cannot be stored"), 0;
	if (!e && !r->ended)
		e = lease_ahead(t, r->conv);
	if (e)
		return job_store_error(j, e, "settle"), e;
	j->reply = json_pack("{sIssss}", "seq", (json_int_t)r->seq, "conversation", r->conv, "outcome",
			     conv_outcome_name(j->rq.outcome));
	return 0;
}

void ops_after_settle(struct job *j, struct wres *r)
{
	(void)j;
	if (!r->ended)
		workers_wake(r->conv);
	waiters_notify(r->conv);
}
