/*
 * commit.h: the execution of each loop iteration's control requests: the
 * job queue, the group commit (every write of the iteration in one
 * transaction, one durable commit for all) and the writer thread that
 * commits a group of sends off the loop. docs/architecture.md, "One loop
 * iteration" and "The writer thread".
 *
 * What it does not know: what any op means. The op table (ops.c) gives one
 * row per op code (struct commit_op); this module runs the rows, in order:
 * pings first, then reads that need no earlier write of their client, then
 * every write in the group transaction and, once it committed, each write's
 * after step and the reads queued behind a write of their own client; every
 * reply goes to its slot (control.h) in request order.
 *
 * Caveats (the rules a caller keeps):
 * - Every function here is the loop thread's. The writer thread runs only
 *   the group's attempts (the rows' write handlers, on the store handle) and
 *   touches nothing else of the loop's; while it does the loop is restricted
 *   (loop_restrict): it reads, parses and queues requests (commit_request)
 *   and writes replies already made, and runs no commit_execute.
 * - A write handler may therefore run on the writer thread: for the ops
 *   the thread takes (OP_SEND alone, see commit.c's group_async_ok) it may
 *   touch the store transaction, the job, its wres and the leases taken
 *   ahead (workers.h's lease_ahead, which keeps them for this), and nothing
 *   else of the loop's (workers, waiters, the gate, counters): what it owes
 *   the loop is its after step's, which always runs on the loop.
 * - A write handler runs again with the same job and wres when the group is
 *   retried (a damaged record left out, a map that grew, a lock conflict):
 *   it starts from what the request says, never from what an earlier
 *   attempt left (the job's reply and error are cleared before each).
 */
#ifndef AGENTD_COMMIT_H
#define AGENTD_COMMIT_H

#include <bsd/sys/queue.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/config.h"
#include "ipc/proto.h"
#include "store/store.h"

struct client;
struct slot;

/* A request parsed this iteration, executed at its end (after the group
 * commit for writes, so a pipelined read sees the writes before it). The
 * commit module owns it from commit_request until its reply is given to
 * its slot (or its client went), and frees it then; a handler fills the
 * result fields (err and msg through job_error, reply, err_extra) and may
 * take its slot (slot = NULL, parked = 1) to answer it later itself. */
struct job {
	TAILQ_ENTRY(job) q;
	struct request rq;
	struct slot *slot;       /* NULL: its client went, or it is answered later */
	int64_t started_us;
	uid_t peer_uid;          /* its client's (SO_PEERCRED): resolve records it */
	/* write results, filled inside the group transaction */
	int err;
	char msg[160];
	json_t *reply;   /* success fields (owned: released once answered) */
	json_t *err_extra; /* more fields of an error reply (send's conflict: last_seq), or NULL */
	int ran;         /* a read already answered while the writes were held */
	int after_write; /* a read queued behind a write of its client: runs after the commit */
	int excluded;    /* a write that met a damaged record: failed alone, left out of the retry */
	int parked;      /* its slot is answered later (a long-poll, a compact): counted then */
	uint64_t txnid;  /* the transaction its reply shows: sent once that is durable */
};

/* What a write leaves for its after step: filled by its write handler
 * inside the group transaction (zeroed before the first attempt, kept
 * across retries), read by its after step on the loop once it committed. */
struct wres {
	char conv[STORE_ID_MAX + 1];
	uint64_t seq;
	int active; /* a fork whose log owes a turn: it gets a worker */
	int ended; /* the resolved call's conversation is ended: it gets no worker */
	int voted; /* resolve: an approval counted short of the call's approvers (nothing settled, no worker) */
	int paused; /* send: the conversation is paused (no worker); update: it still is */
	int resumed; /* update: a larger budget made a paused conversation active */
	struct store_usage usage; /* update: the committed usage and turns the budget is checked against */
	uint64_t turns;
	size_t appended; /* send: events written (0: every one was a duplicate) */
	int interrupted; /* send: it cancelled the running turn (on_busy = interrupt); seq: its turn_cancelled */
};

/* An op's row in the op table. */
enum {
	OPF_WRITE = 1, /* runs in the group transaction (write, then after) */
	OPF_TXN = 2,   /* a read given a read transaction of its own (else t is NULL) */
	OPF_LARGE = 4, /* its reply carries stored data and may be large: parsed within a budget (control.h) */
	OPF_FIRST = 8, /* no effect and a reply of a few bytes: answered before the iteration's other requests */
};
struct commit_op {
	int flags;
	/* A read (no OPF_WRITE), on the loop. */
	void (*read)(store_txn *t, struct job *j);
	/* A write, on the loop or the writer thread: 0 when the transaction
	 * stays usable (refused requests set j's error and return 0 too), or
	 * the store error that poisoned it. */
	int (*write)(store_txn *t, struct job *j, struct wres *r);
	/* After the group committed, on the loop (NULL: nothing); not run for
	 * a write that failed. */
	void (*after)(struct job *j, struct wres *r);
};

struct commit_env {
	const struct config *cfg;   /* store and sync: whether the writer thread may take a group */
	store *st;
	const struct commit_op *ops; /* OP_COUNT rows, indexed by op code */
	/* Commit a group's transaction on the loop (workers.h's
	 * commit_spawning: workers owed by it start during its flush). 0 or
	 * the store's error; t is gone either way. */
	int (*commit)(store_txn *t);
	/* What the group's writes kept for their commit (leases taken ahead)
	 * is forgotten: after each attempt that did not commit, and once the
	 * group is done (workers.h's leases_ahead_drop). On the thread that ran
	 * the attempt. */
	void (*forget)(void);
};

/* Start using env (kept: it must outlive the module). AGENTD_WRITER_THREAD=0
 * in the environment commits every group on the loop. */
void commit_init(const struct commit_env *env);

/* A parsed request for this iteration (control_hooks.request): rq is moved
 * in. after_write: a read behind a write of its client, run after the
 * commit. 0 or -ENOMEM (rq then stays the caller's, untouched). */
int commit_request(struct client *c, struct slot *s, struct request *rq, int64_t started_us, int after_write);
/* c goes: its requests still queued are done with nobody to answer. */
void commit_client_gone(struct client *c);
/* At the iteration's end: execute what was read (nothing while a group is
 * on the writer thread: the requests wait for the next iteration). */
void commit_execute(void);
/* Last at the iteration's end: hand a group of sends commit_execute made to
 * the writer thread. 1 when one went: the loop is restricted (loop_restrict)
 * until it is done and settled (on the loop, by the thread's eventfd); 0
 * when none was made, or the thread could not start (the group then
 * committed on the loop, and every later one will). */
int commit_start(void);
/* Requests came while a group committed: the next wait must not block. */
int commit_pending(void);
/* Stop the writer thread (after the loop ended: no group is in flight). */
void commit_close(void);

/* j's error: code err (enum proto_err) and its message. */
void job_error(struct job *j, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The store error e as j's error, its message naming what (and the
 * request's tool call or conversation for "not found"). Returns the
 * protocol's code. */
int job_store_error(struct job *j, int e, const char *what);

/* A store error as the protocol's code (enum proto_err): the one place
 * they are made. */
int commit_perr(int e);
/* What a client is told of a store that is unavailable (commit_perr). */
const char *commit_unavailable_why(int e);

#endif
