/*
 * ops_schedule.c: a conversation's durable wakeups (docs/protocol.md,
 * schedule): schedule adds one, schedules lists them, unschedule removes
 * one. Each write re-arms the wakeup timer after its commit (the
 * rearm_wakeup hook); firing them is wakeup.c's.
 */
#include "common/cron.h"
#include "common/id.h"
#include "supervisor/ops_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

_Static_assert(PROTO_SCHEDULE_TEXT_MAX == STORE_SCHEDULE_TEXT_MAX, "schedule's text limit is the store's");
_Static_assert(CRON_SPEC_MAX <= STORE_CRON_MAX, "a spec the codec accepts fits the store");

/* The first due time of j's schedule, from now (the store's clock): at,
 * now + after, or the cron spec's first minute after now. 0, or j's error
 * set (-EINVAL). */
static int schedule_due(struct job *j, int64_t now, int64_t *due)
{
	if (j->rq.at_ms) {
		if (j->rq.at_ms <= now)
			return job_error(j, PERR_BAD_REQUEST, "'at' %lld is not in the future (now: %lld)",
					 (long long)j->rq.at_ms, (long long)now), -EINVAL;
		*due = j->rq.at_ms;
	} else if (j->rq.in_ms >= 0) {
		*due = now + j->rq.in_ms;
	} else {
		struct cron c;
		*due = cron_parse(j->rq.cron, &c, NULL, 0) ? -EINVAL : cron_next(&c, now);
		if (*due < 0) /* the codec parsed it: only a spec that stops matching within 8 years */
			return job_error(j, PERR_BAD_REQUEST, "'cron' %s has no time within 8 years", j->rq.cron),
			       -EINVAL;
	}
	return 0;
}

int ops_w_schedule(store_txn *t, struct job *j, struct wres *r)
{
	struct store_conv c;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e)
		return job_store_error(j, e, "conversation"), e == STORE_E_NOTFOUND ? 0 : e;
	if (c.status == STORE_ENDED)
		return job_error(j, PERR_CONFLICT, "conversation %s is ended: it cannot be woken", j->rq.conv), 0;
	int64_t due;
	if (schedule_due(j, store_txn_now(t), &due))
		return 0;
	char id[20];
	id_random(id, sizeof id, "s-", 8);
	e = store_schedule_put(t, id, j->rq.conv, due, j->rq.cron, (store_bytes){ j->rq.text, j->rq.text_len });
	if (e == STORE_E_CONFLICT) /* 64 random bits taken: say so rather than retry blind */
		return job_error(j, PERR_CONFLICT, "schedule id %s is taken: try again", id), 0;
	if (e)
		return job_store_error(j, e, "schedule"), e == STORE_E_NOTFOUND || e == STORE_E_INVAL ? 0 : e;
	snprintf(r->conv, sizeof r->conv, "%s", j->rq.conv);
	j->reply = json_pack("{sssssIso}", "schedule", id, "conversation", j->rq.conv, "due", (json_int_t)due, "cron",
			     j->rq.cron ? json_string(j->rq.cron) : json_null());
	return 0;
}

/* After the commit: the timer moves to the new row if it is the earliest. */
void ops_after_schedule(struct job *j, struct wres *r)
{
	ops_ctx()->rearm_wakeup();
}

/* A schedule row as the protocol shows it. */
static int schedule_one(void *arg, const struct store_schedule *s)
{
	json_t *o = json_pack("{ss#ss#sIsoss#}", "schedule", (const char *)s->id.ptr, (int)s->id.len, "conversation",
			      (const char *)s->conversation.ptr, (int)s->conversation.len, "due", (json_int_t)s->due,
			      "cron",
			      s->cron.len ? json_stringn((const char *)s->cron.ptr, s->cron.len) : json_null(), "text",
			      (const char *)s->text.ptr, (int)s->text.len);
	return o && !json_array_append_new(arg, o) ? 0 : -ENOMEM;
}

void ops_schedules(store_txn *t, struct job *j)
{
	struct store_conv c;
	int e = j->rq.conv ? store_conv_get(t, j->rq.conv, &c) : 0;
	json_t *a = json_array();
	if (!e)
		e = a ? store_schedules_list(t, j->rq.conv, schedule_one, a) : -ENOMEM;
	if (e) {
		json_decref(a);
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "schedules", a);
}

int ops_w_unschedule(store_txn *t, struct job *j, struct wres *r)
{
	struct store_schedule s;
	int e = store_schedule_get(t, j->rq.schedule_id, &s);
	if (!e)
		snprintf(r->conv, sizeof r->conv, "%.*s", (int)s.conversation.len, (const char *)s.conversation.ptr);
	if (!e)
		e = store_schedule_drop(t, j->rq.schedule_id);
	if (e == STORE_E_NOTFOUND)
		return job_error(j, PERR_NOT_FOUND, "schedule '%s' not found (fired already, if it was once, or removed)",
				 j->rq.schedule_id), 0;
	if (e)
		return job_store_error(j, e, "unschedule"), e;
	j->reply = json_pack("{ssss}", "schedule", j->rq.schedule_id, "conversation", r->conv);
	return 0;
}

void ops_after_unschedule(struct job *j, struct wres *r)
{
	ops_ctx()->rearm_wakeup();
}
