/* expiry.c: human tool calls' deadlines (see expiry.h). */
#include "supervisor/expiry.h"
#include "common/log.h"
#include "conv/conv.h"
#include "supervisor/durable.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPIRY_BATCH 512
#define EXPIRY_ROUNDS 4      /* batches one wake-up fires at most (unless full) */
#define EXPIRY_RETRY_MS 1000 /* after a failed attempt to fire */
#define EXPIRY_HELD_MS 100   /* after finding every due deadline held by another transaction */

static void on_timer(struct loop_watch *lw, uint32_t events);

static struct {
	store *st;
	const struct config *cfg; /* each human tool's on_expiry */
	int fd;            /* CLOCK_REALTIME, absolute */
	int64_t retry_at;  /* wall ms: no attempt to fire before (after a failed one); 0: none */
	struct loop_watch lw;
} X = { .fd = -1, .lw = { on_timer } };

int expiry_open(store *st, const struct config *cfg)
{
	X.st = st;
	X.cfg = cfg;
	X.fd = loop_realtime_timer(&X.lw);
	return X.fd < 0 ? X.fd : 0;
}

void expiry_close(void)
{
	if (X.fd >= 0)
		close(X.fd);
	X.fd = -1;
}

void expiry_rearm(void)
{
	store_txn *t;
	int64_t deadline = 0, warn = 0;
	if (store_txn_begin(X.st, STORE_READ, &t) == 0) {
		if (store_expiry_earliest(t, &deadline) != 0)
			deadline = 0;
		if (store_warning_earliest(t, &warn) == 0 && warn > 0 && (deadline == 0 || warn < deadline))
			deadline = warn; /* one timer for both */
		store_txn_abort(t);
	}
	if (deadline > 0 && deadline < X.retry_at)
		deadline = X.retry_at; /* the last attempt failed: not before its retry */
	int e = loop_realtime_arm(X.fd, deadline);
	if (e)
		log_error("timerfd_settime(expiry): %s", strerror(-e));
}

static void on_timer(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	/* ECANCELED: the clock was set. Either way, fire what is due and re-arm. */
	if (read(X.fd, &n, sizeof n) < 0 && errno == ECANCELED)
		log_info("the realtime clock changed: re-checking expiry deadlines");
	expiry_fire();
	expiry_warn_fire();
	expiry_rearm();
}

struct due {
	char id[STORE_ID_MAX + 1];
	int64_t deadline;
};

struct due_ctx {
	struct due *d;
	size_t n;
	size_t cap; /* 0: EXPIRY_BATCH */
};

/* Collect one id; 1 (stop listing) when the batch is full. */
static int due_add(struct due_ctx *c, store_bytes id)
{
	if (c->n == (c->cap ? c->cap : EXPIRY_BATCH))
		return 1;
	memcpy(c->d[c->n].id, id.ptr, id.len);
	c->d[c->n].id[id.len] = 0;
	c->n++;
	return 0;
}

static int due_one(void *arg, const struct store_expiry *e)
{
	struct due_ctx *c = arg;
	int r = due_add(c, e->tool_call_id);
	if (r == 0)
		c->d[c->n - 1].deadline = e->deadline;
	return r;
}

/* A due row whose call's records cannot be read (a damaged store): its
 * deadline row goes, in a transaction of its own, so that it neither fails
 * the batch of the others nor comes due again at once. `agentd check` names
 * the damage; the call's record keeps its deadline. */
static int expiry_drop_damaged(const struct due *d, int why)
{
	store_txn *t = NULL;
	int e = gate_write_begin(STORE_WRITE, &t);
	if (!e) {
		e = store_expiry_drop(t, d->deadline, d->id);
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
	}
	if (e)
		log_error("tool call %s: its records cannot be read (%s) and its deadline could not be dropped: %s",
			  d->id, store_strerror(why), store_strerror(e));
	else
		log_error("tool call %s: its records cannot be read (%s; see agentd check): its deadline is dropped",
			  d->id, store_strerror(why));
	return e;
}

/* After a failed attempt to fire: the next one waits EXPIRY_RETRY_MS. */
static void expiry_retry_later(void)
{
	X.retry_at = store_now(X.st) + EXPIRY_RETRY_MS;
}

static int due_any(void *arg, const struct store_expiry *e)
{
	(void)e;
	*(int *)arg = 1;
	return 1;
}

/* Whether a deadline has passed (a read: cheaper than a write's begin, which
 * may wait for the gate's holder). */
static int expiry_due(void)
{
	store_txn *t;
	int any = 0;
	if (store_txn_begin(X.st, STORE_READ, &t))
		return 0;
	store_expiries_due(t, store_now(X.st), due_any, &any);
	store_txn_abort(t);
	return any;
}

/* One batch of due calls being fired, and what became of each. */
struct batch {
	struct due_ctx c;
	int64_t at_us; /* wall clock at the claim, for how late each fired */
	char convs[EXPIRY_BATCH][STORE_ID_MAX + 1];
	uint64_t seqs[EXPIRY_BATCH];
	int fired[EXPIRY_BATCH], ended[EXPIRY_BATCH];
	int policy[EXPIRY_BATCH]; /* enum tool_on_expiry applied */
};

/* Begin the batch's transaction and claim up to cap due calls into d:
 * 0 with *t open and at least one call claimed; -EAGAIN when there is
 * nothing to fire now (a failed begin or claim retries later, deadlines all
 * held elsewhere shortly). */
static int batch_claim(struct batch *b, struct due *d, size_t cap, store_txn **t)
{
	b->c = (struct due_ctx){ d, 0, cap };
	memset(b->fired, 0, sizeof b->fired);
	memset(b->ended, 0, sizeof b->ended);
	/* Lazy: the waiters of what fires read it once it is durable. */
	if (gate_write_begin(STORE_WRITE_LAZY, t)) {
		expiry_retry_later();
		return -EAGAIN;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	b->at_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	/* Claimed: on a store shared by several nodes, deadlines whose
	 * conversation another transaction holds (another node firing them,
	 * a worker writing) are skipped rather than waited for. */
	int e = store_expiries_claim(*t, store_now(X.st), cap, due_one, &b->c);
	if ((e && e != 1) || b->c.n == 0) {
		store_txn_abort(*t);
		if (!e && b->c.n == 0) /* due, all held elsewhere: look again shortly, not at once */
			X.retry_at = store_now(X.st) + EXPIRY_HELD_MS;
		return -EAGAIN;
	}
	return 0;
}

/* Each claimed call still pending becomes expired in t. Returns 0 or the
 * first error, *bad the call that met it. */
static int batch_settle(store_txn *t, struct batch *b, size_t *bad)
{
	struct due *d = b->c.d;
	*bad = b->c.n;
	for (size_t i = 0; i < b->c.n; i++) {
		/* The resolution rule by the tool's on_expiry, and the lease
		 * of the worker it wakes. */
		int r = conv_expire(t, d[i].id, X.cfg, b->convs[i], &b->seqs[i], &b->ended[i], &b->policy[i]);
		if (r == 0 && !b->ended[i] && b->policy[i] != ON_EXPIRY_ESCALATE)
			r = lease_ahead(t, b->convs[i]);
		if (r == 0) {
			b->fired[i] = 1;
		} else if (r == STORE_E_STALE) {
			/* Settled already, or gone: only a damaged store keeps
			 * its row (resolve removes it). The row goes. */
			if ((r = store_expiry_drop(t, d[i].deadline, d[i].id)) == 0)
				log_warn("tool call %s: dropped a deadline row for a call that is settled or gone", d[i].id);
		}
		if (r) {
			*bad = i;
			return r;
		}
	}
	return 0;
}

/* The batch's transaction failed with e: 1 when it is to run again (a
 * damaged call's row dropped, or in halves in a full store), 0 when the
 * next attempt waits EXPIRY_RETRY_MS. */
static int batch_failed(struct batch *b, int e, size_t bad, size_t *cap)
{
	if ((e == STORE_E_CORRUPT || e == STORE_E_NOTFOUND) && bad < b->c.n) {
		if (expiry_drop_damaged(&b->c.d[bad], e)) {
			expiry_retry_later();
			return 0;
		}
		return 1; /* the others again, without it */
	}
	if (e == STORE_E_FULL && b->c.n > 1) {
		*cap = b->c.n / 2;
		log_warn("store full firing %zu expiries: retrying in batches of %zu", b->c.n, *cap);
		return 1;
	}
	log_error("firing %zu expiries failed: %s: retrying in %d ms", b->c.n, store_strerror(e), EXPIRY_RETRY_MS);
	expiry_retry_later();
	return 0;
}

/* After the commit: each call that fired wakes its conversation. Returns
 * how many fired. */
static int batch_wake(const struct batch *b)
{
	int n = 0;
	for (size_t i = 0; i < b->c.n; i++) {
		if (!b->fired[i])
			continue;
		n++;
		metrics_add(M_EXPIRIES_FIRED, 1);
		metrics_expiry_late(b->at_us, b->c.d[i].deadline);
		if (b->policy[i] == ON_EXPIRY_EXPIRE)
			log_info("%s: tool call %s expired", b->convs[i], b->c.d[i].id);
		else if (b->policy[i] == ON_EXPIRY_ESCALATE)
			log_info("%s: tool call %s: no answer by its deadline: escalated", b->convs[i], b->c.d[i].id);
		else
			log_info("%s: tool call %s: no answer by its deadline: settled as on_expiry = %s", b->convs[i],
				 b->c.d[i].id, config_on_expiry_name(b->policy[i]));
		if (!b->ended[i] && b->policy[i] != ON_EXPIRY_ESCALATE)
			workers_wake(b->convs[i]);
		waiters_notify(b->convs[i]);
	}
	return n;
}

/* Fire every deadline that has passed: in one transaction per batch, each
 * still-pending call becomes `expired` with its resolution event and its
 * expiry row gone; then its conversation is woken. What is due is read
 * inside the write transaction, after the wait for the write gate: every
 * deadline that passed while a worker committed joins this batch, instead
 * of each waiting for a commit of its own behind the next worker's. And
 * batches follow one another while deadlines keep passing, before the gate
 * goes to any worker (gate_pump runs after this): up to EXPIRY_ROUNDS, so
 * that a dense run of deadlines cannot keep the loop from its clients
 * (the timerfd, re-armed to a passed deadline, brings the loop back at
 * once); without limit while batches come full (a backlog, as on start).
 * A batch the store has no room for is retried in halves (and the size
 * doubles back with each commit): deadlines are small writes, and a full
 * store must not keep them all from firing. One that fails alone, or for
 * another reason, is retried EXPIRY_RETRY_MS later (expiry_rearm),
 * not at once: a failing commit must not spin the loop. */
int expiry_fire(void)
{
	static struct due d[EXPIRY_BATCH];
	static size_t cap = EXPIRY_BATCH; /* halved when the store is full, doubled back after a commit */
	int total = 0;
	for (int round = 0; expiry_due(); round++) {
		struct batch b;
		store_txn *t;
		if (batch_claim(&b, d, cap, &t))
			return total;
		size_t bad;
		int e = batch_settle(t, &b, &bad);
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
		if (e == -EIO) /* the commit's page flush failed (durable.h) */
			durable_fail(e);
		if (e) {
			leases_ahead_drop();
			if (!batch_failed(&b, e, bad, &cap))
				return total;
			round--; /* the batch again, smaller */
			continue;
		}
		durable_need(store_last_id(X.st));
		X.retry_at = 0;
		cap = cap < EXPIRY_BATCH / 2 ? cap * 2 : EXPIRY_BATCH;
		metrics_add(M_EXPIRY_COMMITS, 1);
		total += batch_wake(&b);
		leases_ahead_drop();
		if (b.c.n < EXPIRY_BATCH && round + 1 >= EXPIRY_ROUNDS)
			return total;
	}
	return total;
}

/* ---- expiry warnings --------------------------------------------------- */

static int warn_one(void *arg, const struct store_expiry *e)
{
	struct due_ctx *c = arg;
	int r = due_add(c, e->tool_call_id);
	if (r == 0)
		c->d[c->n - 1].deadline = e->deadline;
	return r;
}

static int warn_any(void)
{
	store_txn *t;
	int any = 0;
	if (store_txn_begin(X.st, STORE_READ, &t))
		return 0;
	store_warnings_due(t, store_now(X.st), due_any, &any);
	store_txn_abort(t);
	return any;
}

/* A warning whose call cannot be read (a damaged store): its row goes in
 * a transaction of its own, so it neither blocks the others nor comes due
 * again at once. */
static int warn_drop_damaged(const char *id, int why)
{
	store_txn *t = NULL;
	int e = gate_write_begin(STORE_WRITE, &t);
	if (!e) {
		e = store_warning_drop(t, id);
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
	}
	log_error("tool call %s: its records cannot be read (%s; see agentd check): its expiry warning is %s", id,
		  store_strerror(why), e ? "kept" : "dropped");
	return e;
}

/* Each batch in one transaction, as expiry_fire's: the event and the
 * removal of the warning's row commit together, so a kill or a restart
 * between the warning and the expiry never gives it twice. */
int expiry_warn_fire(void)
{
	static struct due d[EXPIRY_BATCH];
	int total = 0;
	for (int round = 0; round < EXPIRY_ROUNDS && warn_any(); round++) {
		struct due_ctx c = { d, 0, EXPIRY_BATCH };
		store_txn *t;
		if (gate_write_begin(STORE_WRITE_LAZY, &t)) {
			expiry_retry_later();
			return total;
		}
		int e = store_warnings_due(t, store_now(X.st), warn_one, &c);
		if ((e && e != 1) || c.n == 0) {
			store_txn_abort(t);
			return total;
		}
		static char convs[EXPIRY_BATCH][STORE_ID_MAX + 1];
		int given[EXPIRY_BATCH] = { 0 };
		size_t bad = c.n;
		e = 0;
		for (size_t i = 0; i < c.n && !e; i++) {
			uint64_t seq;
			int r = conv_expiry_warn(t, d[i].id, convs[i], &seq);
			if (r == 0)
				given[i] = 1;
			else if (r != STORE_E_STALE)
				e = r, bad = i;
		}
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
		if (e) {
			if (e == STORE_E_CORRUPT && bad < c.n && warn_drop_damaged(d[bad].id, e) == 0)
				continue;
			log_error("giving %zu expiry warnings failed: %s: retrying in %d ms", c.n, store_strerror(e),
				  EXPIRY_RETRY_MS);
			expiry_retry_later();
			return total;
		}
		durable_need(store_last_id(X.st));
		for (size_t i = 0; i < c.n; i++) {
			if (!given[i])
				continue;
			total++;
			log_info("%s: tool call %s: expiry warning given", convs[i], d[i].id);
			waiters_notify(convs[i]);
		}
	}
	return total;
}
