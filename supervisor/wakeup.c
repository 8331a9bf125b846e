/* wakeup.c: scheduled wakeups, fired on time (see wakeup.h). */
#include "supervisor/wakeup.h"
#include "common/cron.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"
#include "supervisor/durable.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"
#include "supervisor/nodes.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAKEUP_BATCH 256
#define WAKEUP_ROUNDS 4      /* batches one wake-up fires at most (unless full) */
#define WAKEUP_RETRY_MS 1000 /* after a failed attempt to fire */
#define WAKEUP_HELD_MS 100   /* after finding every due schedule held by another transaction */
#define WAKEUP_POLL_MS 1000  /* a shared store: how often other nodes' rows are looked for */

static void on_timer(struct loop_watch *lw, uint32_t events);

static struct {
	store *st;
	int fd;             /* CLOCK_REALTIME, absolute */
	int64_t started_ms; /* wall clock at open: a row due before it was missed while agentd was down */
	int64_t retry_at;   /* wall ms: no attempt to fire before (after a failed one); 0: none */
	struct loop_watch lw;
} W = { .fd = -1, .lw = { on_timer } };

int wakeup_open(store *st)
{
	W.st = st;
	W.started_ms = store_now(st);
	W.fd = loop_realtime_timer(&W.lw);
	return W.fd < 0 ? W.fd : 0;
}

void wakeup_close(void)
{
	if (W.fd >= 0)
		close(W.fd);
	W.fd = -1;
}

void wakeup_rearm(void)
{
	store_txn *t;
	int64_t due = 0;
	if (store_txn_begin(W.st, STORE_READ, &t) == 0) {
		if (store_schedule_earliest(t, &due) != 0)
			due = 0;
		store_txn_abort(t);
	}
	if (due > 0 && due < W.retry_at)
		due = W.retry_at; /* the last attempt failed: not before its retry */
	if (nodes_shared()) {
		int64_t poll = store_now(W.st) + WAKEUP_POLL_MS;
		if (due == 0 || due > poll)
			due = poll; /* another node may add one, or die with one due */
	}
	int e = loop_realtime_arm(W.fd, due);
	if (e)
		log_error("timerfd_settime(wakeup): %s", strerror(-e));
}

static void on_timer(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	if (read(W.fd, &n, sizeof n) < 0 && errno == ECANCELED)
		log_info("the realtime clock changed: re-checking scheduled wakeups");
	wakeup_fire();
	wakeup_rearm();
}

/* A due schedule claimed, and what firing it did. */
struct due {
	char id[STORE_ID_MAX + 1];
	char conv[STORE_ID_MAX + 1];
	int64_t due;
	int fired;  /* its event appended */
	int late;
	int wake;   /* its conversation owes a turn now (not paused) */
	uint64_t seq;
};

struct due_ctx {
	struct due *d;
	size_t n;
};

static int due_one(void *arg, const struct store_schedule *s)
{
	struct due_ctx *c = arg;
	if (c->n == WAKEUP_BATCH)
		return 1;
	struct due *d = &c->d[c->n++];
	memset(d, 0, sizeof *d);
	memcpy(d->id, s->id.ptr, s->id.len);
	memcpy(d->conv, s->conversation.ptr, s->conversation.len);
	d->due = s->due;
	return 0;
}

/* The `scheduled` event of s in conv, late or not, with its idempotency
 * key (the schedule and its due time: a second append of the same fire is
 * a duplicate). 0, -ENOMEM, or the store's error. */
static int fire_event(store_txn *t, const char *conv, const struct store_schedule *s, int late, uint64_t *seq,
		      int *dup)
{
	json_t *c = json_pack("{ss#ss#sIsb}", "text", (const char *)s->text.ptr, (int)s->text.len, "schedule",
			      (const char *)s->id.ptr, (int)s->id.len, "due", (json_int_t)s->due, "late", late);
	if (c && s->cron.len && json_object_set_new(c, "cron", json_stringn((const char *)s->cron.ptr, s->cron.len))) {
		json_decref(c);
		c = NULL;
	}
	if (!c)
		return -ENOMEM;
	struct jsonmp_buf b;
	int e = conv_pack(&b, c);
	json_decref(c);
	char key[STORE_EVENT_ID_MAX + 1];
	snprintf(key, sizeof key, "schedule:%.*s:%lld", (int)s->id.len, (const char *)s->id.ptr, (long long)s->due);
	if (!e) {
		struct store_event_in ev = { "scheduled", { b.sb.data, b.sb.size }, key };
		e = store_event_append(t, conv, &ev, seq, dup);
	}
	jsonmp_buf_destroy(&b);
	return e;
}

/* After a fire: a repeating schedule (spec not empty) moves to its
 * spec's first minute after now (however many it missed: it fires once
 * for them), a once one (or one whose spec no longer parses or matches)
 * goes. */
static int fire_next(store_txn *t, const char *id, const char *spec, int64_t due, int64_t now)
{
	if (spec[0]) {
		char why[128];
		struct cron c;
		int64_t next = cron_parse(spec, &c, why, sizeof why) ? -EINVAL : cron_next(&c, now > due ? now : due);
		if (next > 0)
			return store_schedule_move(t, id, next);
		log_error("schedule %s: its cron spec '%s' gives no next time: the schedule is removed", id, spec);
	}
	return store_schedule_drop(t, id);
}

/* Fire d in t: 0 (d->fired when its event was appended; a row another node
 * fired or moved meanwhile, or whose conversation is ended, is not), or the
 * store's error or -ENOMEM. */
static int fire_one(store_txn *t, struct due *d, int64_t now)
{
	struct store_schedule s;
	int e = store_schedule_get(t, d->id, &s);
	if (e == STORE_E_NOTFOUND || (!e && s.due != d->due))
		return 0; /* fired meanwhile (another node) */
	if (e)
		return e;
	struct store_conv c;
	if ((e = store_conv_get(t, d->conv, &c)) == STORE_E_NOTFOUND || (!e && c.status == STORE_ENDED)) {
		log_warn("schedule %s: conversation %s is %s: the schedule is removed unfired", d->id, d->conv,
			 e ? "gone" : "ended");
		return store_schedule_drop(t, d->id);
	}
	if (e)
		return e;
	d->late = now - d->due > WAKEUP_LATE_MS || d->due < W.started_ms;
	/* Copied: a write may move the pages s points into (LMDB). */
	char spec[STORE_CRON_MAX + 1];
	snprintf(spec, sizeof spec, "%.*s", (int)s.cron.len, (const char *)s.cron.ptr);
	int dup = 0;
	if ((e = fire_event(t, d->conv, &s, d->late, &d->seq, &dup)))
		return e;
	if ((e = fire_next(t, d->id, spec, d->due, now)) || dup)
		return e; /* dup: its event is there already; the row is moved on */
	if (c.status == STORE_IDLE) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		if ((e = store_conv_put(t, d->conv, &p)))
			return e;
	}
	d->fired = 1;
	d->wake = c.status != STORE_PAUSED; /* paused: kept for when a larger budget resumes it, as a send's */
	return d->wake ? lease_ahead(t, d->conv) : 0;
}

static int due_any(void *arg, const struct store_schedule *s)
{
	(void)s;
	*(int *)arg = 1;
	return 1;
}

/* Whether a schedule is due (a read: cheaper than a write's begin, which
 * may wait for the gate's holder). */
static int wakeup_due(void)
{
	store_txn *t;
	int any = 0;
	if (store_txn_begin(W.st, STORE_READ, &t))
		return 0;
	store_schedules_due(t, store_now(W.st), 1, due_any, &any);
	store_txn_abort(t);
	return any;
}

/* After the commit: each wake fired counts and wakes its conversation. */
static int batch_wake(const struct due *d, size_t n, int64_t at_us)
{
	int fired = 0;
	for (size_t i = 0; i < n; i++) {
		if (!d[i].fired)
			continue;
		fired++;
		metrics_add(M_WAKEUPS_FIRED, 1);
		metrics_add(M_WAKEUPS_LATE, (uint64_t)d[i].late);
		metrics_wakeup_late(at_us, d[i].due);
		log_info("%s: schedule %s fired (seq %llu)%s", d[i].conv, d[i].id, (unsigned long long)d[i].seq,
			 d[i].late ? ", late" : "");
		if (d[i].wake)
			workers_wake(d[i].conv);
		waiters_notify(d[i].conv);
	}
	return fired;
}

/* Fire every due schedule: in one transaction per batch, each one's
 * `scheduled` event, its row moved on or dropped, its conversation made
 * active and its worker's lease; then each conversation is woken. What is
 * due is read inside the write transaction, after the wait for the write
 * gate; batches follow one another while schedules keep coming due, up to
 * WAKEUP_ROUNDS unless they come full (a backlog, as on start). A batch
 * that fails is retried WAKEUP_RETRY_MS later (wakeup_rearm), not at once:
 * a failing commit must not spin the loop. */
int wakeup_fire(void)
{
	static struct due d[WAKEUP_BATCH];
	int total = 0;
	for (int round = 0; wakeup_due(); round++) {
		store_txn *t;
		if (gate_write_begin(STORE_WRITE_LAZY, &t)) {
			W.retry_at = store_now(W.st) + WAKEUP_RETRY_MS;
			return total;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t at_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000, now = store_now(W.st);
		struct due_ctx c = { d, 0 };
		int e = store_schedules_due(t, now, WAKEUP_BATCH, due_one, &c);
		if ((e && e != 1) || c.n == 0) {
			store_txn_abort(t);
			if (e) /* a failed claim: not again at once */
				log_error("claiming due scheduled wakeups failed: %s: retrying in %d ms", store_strerror(e),
					  WAKEUP_RETRY_MS);
			/* due, all held elsewhere: look again shortly, not at once */
			W.retry_at = store_now(W.st) + (e ? WAKEUP_RETRY_MS : WAKEUP_HELD_MS);
			return total;
		}
		e = 0;
		for (size_t i = 0; i < c.n && !e; i++)
			e = fire_one(t, &d[i], now);
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
		if (e == -EIO) /* the commit's page flush failed (durable.h) */
			durable_fail(e);
		if (e) {
			leases_ahead_drop();
			log_error("firing %zu scheduled wakeups failed: %s: retrying in %d ms", c.n, store_strerror(e),
				  WAKEUP_RETRY_MS);
			W.retry_at = store_now(W.st) + WAKEUP_RETRY_MS;
			return total;
		}
		durable_need(store_last_id(W.st));
		W.retry_at = 0;
		metrics_add(M_WAKEUP_COMMITS, 1);
		total += batch_wake(d, c.n, at_us);
		leases_ahead_drop();
		if (c.n < WAKEUP_BATCH && round + 1 >= WAKEUP_ROUNDS)
			return total;
	}
	return total;
}
