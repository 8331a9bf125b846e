/*
 * gate.h: the write gate. LMDB lets one writer in at a time; a worker that
 * wants to commit asks first and commits once granted (ipc.h: write,
 * grant, written), so the supervisor's group commit never queues behind a
 * line of workers on LMDB's mutex, and each iteration's control-plane writes
 * run while no worker holds the gate. A grant unanswered for GATE_HOLD_MS (a
 * stopped or hung worker, a very slow disk) is taken back: LMDB's own mutex,
 * not the gate, keeps the writes apart, so one worker cannot stall the rest.
 *
 * The gate knows its members only through gate_hooks: it never names a
 * worker.
 */
#ifndef AGENTD_GATE_H
#define AGENTD_GATE_H

#include <bsd/sys/queue.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/store.h"

#define GATE_HOLD_MS 1000

/* Embedded in a member (a worker). */
struct gate_member {
	TAILQ_ENTRY(gate_member) q;
	int waiting;
};

struct gate_hooks {
	int (*grant)(struct gate_member *m);   /* tell it: 0, or -errno when it cannot be told */
	void (*refused)(struct gate_member *m, int err); /* a grant it cannot take: it is stuck */
	void (*drain)(struct gate_member *m);  /* read its messages (its `written` releases the gate) */
	int (*fd)(struct gate_member *m);      /* to poll while waiting for its commit */
	const char *(*name)(struct gate_member *m);
	pid_t (*pid)(struct gate_member *m);
	int64_t (*now)(void);                  /* monotonic ms; NULL: loop_now_ms (a test's clock otherwise) */
};

void gate_init(store *st, const struct gate_hooks *h);
/* m asks to write. -EALREADY when it holds the gate or waits already. */
int gate_ask(struct gate_member *m);
/* m committed (`written`): the gate is free if it held it. */
void gate_release(struct gate_member *m);
/* m left (its socket closed, it was reaped): it holds and awaits nothing. */
void gate_drop(struct gate_member *m);
/* Between loop iterations, after the supervisor's writes: grant the member
 * that asked first, if nobody holds the gate. */
void gate_pump(void);
/* When the loop must wake to revoke a grant others wait behind (0: none). */
int64_t gate_deadline(void);
/* Whether a member holds the gate now (a grant held too long is revoked). */
int gate_busy(void);
/* A worker holds the gate or waits for it. */
int gate_wanted(void);
/* This iteration's writes wait for the holder (their deadline counts). */
void gate_hold_writes(int held);
/* Begin a supervisor write transaction: first let the member holding the
 * gate finish its one commit (reading its messages meanwhile), until the
 * grant is revoked at worst. store_txn_begin's errors. */
int gate_write_begin(int mode, store_txn **t);

#endif
