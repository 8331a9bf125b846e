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
 * The flushes run on a flusher thread, never on the loop and never under the
 * writer lock: while one flush runs the loop accepts and commits the next
 * batch (a pipeline), and when it returns the next flush starts for whatever
 * was committed meanwhile.
 *
 * Under sync = none everything counts as durable at once (the documented
 * meaning of that setting).
 */
#ifndef AGENTD_DURABLE_H
#define AGENTD_DURABLE_H

#include <stdint.h>

#include "store/store.h"

/* Called on the loop each time the frontier moves. */
typedef void durable_advanced_fn(uint64_t frontier);

/* Start the flusher thread (sync = full) and register its wake-up with the
 * loop. 0 or -errno. */
int durable_open(store *st, int sync_full, durable_advanced_fn *advanced);
/* Stop the flusher, flush once more, and let everything through. */
void durable_close(void);

/* Whether transaction id is behind the frontier. */
int durable_covers(uint64_t id);
/* Make id durable soon: a flush starts for it unless one covering it runs. */
void durable_need(uint64_t id);
/* A worker flushed its own commit id: every id up to it is durable. */
void durable_reported(uint64_t id);
/* Flushes made by the flusher so far (agentd_durable_flushes_total). */
uint64_t durable_flushes(void);

#endif
