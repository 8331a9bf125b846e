/*
 * flushrec.h: the flushes of an LMDB store, shared by the processes on it.
 *
 * A commit under STORE_SYNC_FULL flushes the data file (one fdatasync,
 * under LMDB's writer lock), and that flush begins after the meta page of
 * every earlier transaction was written: when the commit that made id N
 * returns, every id below N is durable (store.h). store_flush needs no
 * more than such a flush, so it need not make its own while one is under
 * way in any process. This record, a page shared by every process with the
 * store open, lets them tell each other:
 *
 *   durable   every id up to it is durable: a flush that began after its
 *             meta page was written has returned
 *   covering  the highest id that a flush now running, or the commit of a
 *             write transaction now open, will make durable
 *   gen       bumped whenever durable rises; waiters sleep on it (a futex
 *             on the shared mapping)
 *   nwait     how many sleep, so that a rise wakes nobody when none does
 *
 * store_flush, wanting the last committed id W: durable >= W, done;
 * covering >= W, or a process waits for LMDB's writer lock (it begins
 * after W, so its commit covers W), sleep on gen and look again at every
 * rise, FLUSHREC_WAIT_MS in all at most; else, or when that time is up,
 * flush itself: raise covering to the last id, fdatasync, raise durable to
 * it, wake the sleepers.
 *
 * Only durable is a promise, and only a returned flush raises it; covering
 * and nwait are hints whose error costs a sleep of FLUSHREC_WAIT_MS at
 * most (a process killed with a write transaction open), never
 * durability. Nothing in the record outlives the processes: it lives in
 * FLUSHREC_FILE next to data.mdb (mapped, its descriptor closed), and a
 * process that opens the store while no other has it open (it gets an OFD
 * write lock on data.mdb's first byte, which every opener holds a read lock
 * on) zeroes it, as LMDB re-initialises its lock file. The locks are
 * advisory and on data.mdb's descriptor, so they die with it: LMDB never
 * locks data.mdb (its own locks are on lock.mdb).
 */
#ifndef AGENTD_FLUSHREC_H
#define AGENTD_FLUSHREC_H

#include <stdint.h>

#define FLUSHREC_FILE "flush.lock"
#define FLUSHREC_WAIT_MS 20 /* AGENTD_TEST_FLUSH_WAIT_MS overrides it, for tests */

struct flushrec;

/* Map dir's record, creating the file; data_fd is the store's descriptor
 * onto data.mdb, which must stay open until flushrec_close (closing it after
 * drops this process's locks on it). NULL when it cannot be (a read-only
 * directory): then every store_flush flushes, as without sharing. */
struct flushrec *flushrec_open(const char *dir, int data_fd);
/* This process's flushrec_flush never sleeps for another's flush or commit:
 * it returns at once when durable covers want, and flushes otherwise. */
void flushrec_alone(struct flushrec *r);
void flushrec_close(struct flushrec *r);

/* A write transaction is about to wait for LMDB's writer lock (on), or
 * has it or gave up (off). A process waiting for it begins after every
 * commit that returned, so it too is going to cover them. An OFD read lock
 * on data.mdb's second byte, so that a process killed while it waits says
 * so no longer. */
void flushrec_want(struct flushrec *r, int on);
/* A write transaction began with last the last committed id: its commit
 * will flush, covering last. */
void flushrec_begin(struct flushrec *r, uint64_t last);
/* That transaction ended: its commit made every id up to durable durable
 * (0 when it was aborted, failed or wrote nothing; then covering is taken
 * back if it is still the value begin set). */
void flushrec_end(struct flushrec *r, uint64_t last, uint64_t durable);

/* Make every id up to want durable: wait for a flush that covers it, or
 * flush fd. last_id reads the last committed id (of any process) for arg.
 * r may be NULL: then fdatasync(fd). 0 when it flushed fd, 1 when another
 * flush or commit covered want, or -errno of fdatasync. */
int flushrec_flush(struct flushrec *r, int fd, uint64_t want, uint64_t (*last_id)(void *), void *arg);

#endif
