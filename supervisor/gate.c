/* gate.c: the write gate (see gate.h). */
#include "supervisor/gate.h"
#include "common/log.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

static struct {
	store *st;
	const struct gate_hooks *h;
	struct gate_member *holder;       /* NULL: free */
	int64_t granted_at;               /* monotonic ms */
	int writes_held;                  /* this iteration's writes wait for the holder */
	TAILQ_HEAD(, gate_member) queue;  /* members that asked, in order */
} G = { .queue = TAILQ_HEAD_INITIALIZER(G.queue) };

static int64_t now_ms(void)
{
	return G.h && G.h->now ? G.h->now() : loop_now_ms();
}

void gate_init(store *st, const struct gate_hooks *h)
{
	G.st = st;
	G.h = h;
}

int gate_ask(struct gate_member *m)
{
	if (G.holder == m || m->waiting)
		return -EALREADY;
	m->waiting = 1;
	TAILQ_INSERT_TAIL(&G.queue, m, q);
	return 0;
}

void gate_release(struct gate_member *m)
{
	if (G.holder == m)
		G.holder = NULL;
}

void gate_drop(struct gate_member *m)
{
	gate_release(m);
	if (m->waiting) {
		TAILQ_REMOVE(&G.queue, m, q);
		m->waiting = 0;
	}
}

/* Take back a grant held GATE_HOLD_MS. 1 when revoked. */
static int revoke(int64_t now)
{
	if (!G.holder || now < G.granted_at + GATE_HOLD_MS)
		return 0;
	log_warn("%s: worker %d has held the write gate for %lld ms: taking it back", G.h->name(G.holder),
		 (int)G.h->pid(G.holder), (long long)(now - G.granted_at));
	G.holder = NULL;
	metrics_add(M_GATE_REVOKED, 1);
	return 1;
}

int64_t gate_deadline(void)
{
	return G.holder && (G.writes_held || !TAILQ_EMPTY(&G.queue)) ? G.granted_at + GATE_HOLD_MS : 0;
}

int gate_wanted(void)
{
	return G.holder || !TAILQ_EMPTY(&G.queue);
}

int gate_busy(void)
{
	return G.holder && !revoke(now_ms());
}

void gate_hold_writes(int held)
{
	G.writes_held = held;
}

void gate_pump(void)
{
	struct gate_member *m;
	if (G.holder && !TAILQ_EMPTY(&G.queue))
		revoke(now_ms());
	while (!G.holder && (m = TAILQ_FIRST(&G.queue))) {
		TAILQ_REMOVE(&G.queue, m, q);
		m->waiting = 0;
		int rc = G.h->grant(m);
		if (rc == 0) {
			G.holder = m;
			G.granted_at = now_ms();
			metrics_add(M_GATE_GRANTS, 1);
		} else {
			/* Its queue is full, yet it waits reading it: stuck. Or
			 * it shut its socket: exiting, or broken. Either way it
			 * would wait for this grant forever. */
			G.h->refused(m, rc);
		}
	}
}

/* Let the member holding the gate finish its one commit, reading its
 * messages meanwhile (until the grant is revoked, at worst). */
static void wait_holder(void)
{
	static int busy; /* the drain never writes, but never re-enter */
	if (busy || !G.holder)
		return;
	busy = 1;
	int64_t t0 = loop_now_us();
	metrics_add(M_GATE_WAITS, 1);
	while (G.holder && !revoke(now_ms())) {
		int ms = (int)(G.granted_at + GATE_HOLD_MS - now_ms());
		struct pollfd p = { G.h->fd(G.holder), POLLIN, 0 };
		if (poll(&p, 1, ms > 0 ? ms : 0) < 0 && errno != EINTR)
			break;
		G.h->drain(G.holder); /* its written releases the gate; so does its end */
	}
	metrics_gate_wait(loop_now_us() - t0);
	busy = 0;
}

int gate_write_begin(int mode, store_txn **t)
{
	wait_holder();
	return store_txn_begin(G.st, mode, t);
}
