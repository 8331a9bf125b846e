/*
 * ops_cancel.c: cancel and resume (docs/protocol.md, "Cancel and resume"):
 * writes in the group transaction as ops_write.c's are, which end a turn
 * for good (fencing the worker that runs it) or start a worker without a
 * new event.
 */
#include "conv/conv.h"
#include "supervisor/forward.h"
#include "supervisor/ops_int.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* End the turn for good: settle its pending calls cancelled, log
 * turn_cancelled, go idle, and fence the worker running it so it cannot
 * commit that turn after this; after the commit it is killed. */
int ops_w_cancel(store_txn *t, struct job *j, struct wres *r)
{
	struct store_conv c;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e)
		return job_store_error(j, e, "conversation"), e == STORE_E_NOTFOUND ? 0 : e;
	if (c.status == STORE_ENDED) {
		job_error(j, PERR_CONFLICT, "conversation %s is ended: there is no turn to cancel", j->rq.conv);
		return 0;
	}
	if (c.status == STORE_IDLE) {
		j->reply = json_pack("{sbss}", "cancelled", 0, "message", "no turn is running or owed: nothing cancelled");
		return 0;
	}
	json_t *ids = NULL;
	e = conv_turn_cancel(t, j->rq.conv, &ids, &r->seq);
	if (!e)
		e = workers_fence(t, j->rq.conv);
	if (!e) /* a worker on another node: that node kills it and its model or tool */
		e = forward_tell(t, j->rq.conv, "cancel");
	if (e) {
		json_decref(ids);
		return job_store_error(j, e, "cancel"), e;
	}
	snprintf(r->conv, sizeof r->conv, "%s", j->rq.conv);
	j->reply = json_pack("{sbsIso}", "cancelled", 1, "seq", (json_int_t)r->seq, "tool_calls", ids);
	return 0;
}

void ops_after_cancel(struct job *j, struct wres *r)
{
	if (!r->seq)
		return;
	workers_cancel(j->rq.conv);
	waiters_notify(j->rq.conv);
}

/* Whether conv's last event is the error of a crash loop given up (or a full
 * store): the turn it ended is what a resume runs again. */
static int gave_up_last(store_txn *t, const char *conv, int *yes)
{
	struct store_range rg = { .limit = 1 };
	json_t *a = json_array();
	int e = a ? store_events_stream(t, conv, &rg, ops_append_json, a) : -ENOMEM;
	json_t *ev = json_array_get(a, 0);
	const char *ty = json_string_value(json_object_get(ev, "type"));
	*yes = !e && ty && !strcmp(ty, "error") &&
	       json_is_true(json_object_get(json_object_get(ev, "content"), "gave_up"));
	json_decref(a);
	return e;
}

/* Start the conversation's worker now, without a new event: after `stop`, or
 * after the crash-loop limit gave up on it (its status becomes active, and
 * while it is, revival takes the give-up error as not ending the turn). */
int ops_w_resume(store_txn *t, struct job *j, struct wres *r)
{
	struct store_conv c;
	int gave_up = 0;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e)
		return job_store_error(j, e, "conversation"), e == STORE_E_NOTFOUND ? 0 : e;
	if (c.status == STORE_ENDED) {
		job_error(j, PERR_CONFLICT, "conversation %s is ended: it cannot be resumed", j->rq.conv);
		return 0;
	}
	json_t *w = workers_conv_json(j->rq.conv);
	int live = json_is_object(w);
	json_decref(w);
	if (!w) { /* out of memory: never taken for "no worker" (a resume would fence a live one) */
		job_error(j, PERR_INTERNAL, "out of memory");
		return 0;
	}
	if (live) {
		j->reply = json_pack("{sbss}", "resumed", 0, "message", "its worker is already running");
		return 0;
	}
	if (c.status == STORE_PAUSED) {
		j->reply = json_pack("{sbss}", "resumed", 0, "message",
				     "it is paused by its budget: raise the budget with update to resume it");
		return 0;
	}
	if (c.status == STORE_IDLE && (e = gave_up_last(t, j->rq.conv, &gave_up)))
		return job_store_error(j, e, "resume"), e;
	if (c.status == STORE_IDLE && !gave_up) {
		j->reply = json_pack("{sbss}", "resumed", 0, "message",
				     "nothing is owed: no turn to run and no tool call to dispatch");
		return 0;
	}
	if (gave_up) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		e = store_conv_put(t, j->rq.conv, &p);
	}
	if (!e)
		e = lease_ahead(t, j->rq.conv);
	if (e)
		return job_store_error(j, e, "resume"), e;
	r->seq = 1; /* for ops_after_resume: a worker is owed */
	j->reply = json_pack("{sbsb}", "resumed", 1, "rerun", gave_up);
	/* Another node's live lease: lease_ahead's claim told that node, which
	 * starts the worker if none runs there (docs/scale-out.md). */
	char owner[STORE_ID_MAX + 1];
	if (j->reply && forward_owner(t, j->rq.conv, owner) == 1 &&
	    json_object_set_new(j->reply, "node", json_string(owner))) {
		json_decref(j->reply);
		j->reply = NULL; /* committed: answered "out of memory" */
	}
	return 0;
}

void ops_after_resume(struct job *j, struct wres *r)
{
	if (r->seq)
		workers_wake(j->rq.conv);
}
