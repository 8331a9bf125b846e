/*
 * durable.h: the durable frontier (docs/durability.md). Every write
 * transaction commits lazily (STORE_WRITE_LAZY: its pages are flushed under
 * LMDB's writer lock, its meta page is written but not flushed), so a commit
 * holds the lock for one flush, not two. A transaction is durable once a
 * flush of the data file that began after its commit has returned (any
 * process's: a worker flushes its own turn commit before it says `written`).
 * The frontier is the highest transaction id known durable; a reply, a
 * long-poll's answer and a watch's event leave only once the transaction
 * they show is behind it, so no client sees what an OS crash can take back.
 *
 * A lazy commit's own page flush begins after every earlier transaction's
 * meta page was written, so a commit that made id N makes every id below N
 * durable when it returns (durable_committed). Under load that is how the
 * frontier moves: each group commit makes the previous one durable, one
 * flush per batch. The flusher thread covers the last batch: just before
 * the loop waits, a flush starts at once when no client could send the
 * commit that would cover it (every client waits on a held reply), or after
 * a short delay otherwise, unless a commit covered it first. Flushes run on
 * the flusher thread, never on the loop and never under the writer lock:
 * while one flush runs the loop accepts and commits the next batch.
 *
 * Under sync = none everything counts as durable at once (the documented
 * meaning of that setting).
 *
 * A flush that fails (EIO, ENOSPC: the flusher's, the writer thread's, a
 * worker's) stops the frontier for good: the kernel may have dropped the
 * pages it could not write or marked them clean, so a later flush that
 * succeeds proves nothing about them (PostgreSQL's "fsyncgate"). Nothing is
 * flushed again, nothing more is let through, and durable_failed_fn is
 * called once; agentd answers what waits with an error and stops, and a
 * restart reads the store from disk (docs/durability.md).
 */
#ifndef AGENTD_DURABLE_H
#define AGENTD_DURABLE_H

#include <stdint.h>

#include "store/store.h"

/* Called on the loop each time the frontier moves. */
typedef void durable_advanced_fn(uint64_t frontier);
/* 1 when another commit may come soon (a client is free to send). */
typedef int durable_more_fn(void);
/* Called on the loop once, when the first flush failed (its -errno). */
typedef void durable_failed_fn(int err);

/* Start the flusher thread (sync = full) and register its wake-up and its
 * timer with the loop. 0 or -errno. */
int durable_open(store *st, int sync_full, durable_advanced_fn *advanced, durable_more_fn *more,
		 durable_failed_fn *failed);
/* Stop the flusher, flush once more, and let everything through. */
void durable_close(void);

/* On the loop: a flush of this store failed elsewhere (a worker's, or a
 * commit's own page flush): the frontier stops as for the flusher's. */
void durable_fail(int err);
/* The failure that stopped the frontier (-errno), or 0. */
int durable_failed(void);

/* Whether transaction id is behind the frontier. */
int durable_covers(uint64_t id);
/* Make id durable soon: by the next commit, or a flush that
 * durable_before_wait starts. */
void durable_need(uint64_t id);
/* Just before the loop waits: start or schedule the flush owed. */
void durable_before_wait(void);
/* A write transaction of this process committed id (its own page flush
 * returned): every id below it is durable. */
void durable_committed(uint64_t id);
/* Flushes of the data file the flusher (or durable_flush_here) made that
 * succeeded (and so may have moved the frontier:
 * agentd_durable_flushes_total; those a worker's commit or flush spared
 * are store_stat's flushes_spared), and that failed
 * (agentd_durable_flush_failures_total). */
uint64_t durable_flushes(void);
uint64_t durable_flush_failures(void);

/* On any thread (the writer thread, after its commit returned, outside the
 * writer lock): flush, and on success set *id to the last id committed
 * before the flush began, now durable, for durable_flushed on the loop.
 * -EAGAIN when nothing is ever flushed here (sync = none, the test-only
 * early ack); a failed flush stops the frontier as the flusher's does. */
int durable_flush_here(uint64_t *id);
/* On the loop: a durable_flush_here covered id. */
void durable_flushed(uint64_t id);

/* Start a flush for what was asked, without waiting for the next group
 * commit to cover it (when one is running, the next starts as it ends):
 * after a group committed off the loop, whose next group then commits
 * beside this flush. */
void durable_flush_now(void);

#endif
