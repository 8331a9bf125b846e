/*
 * wstore.c: the worker's store plumbing (wstore.h).
 */
#include "agent/wstore.h"
#include "agent/wipc.h"
#include "common/connslot.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Let go of the store while we wait (for a model, a tool, the supervisor):
 * the flush of every commit, anyone's, visits each process's mapping of each
 * page it cleans, so a thousand waiting workers' maps made the supervisor's
 * commits several times slower (docs/architecture.md, "A waiting worker lets go of the store"). Opening it again costs
 * about 0.1 ms. */
void wstore_let_go(struct worker *w)
{
	if (w->st) {
		store_close(w->st);
		w->st = NULL;
	}
	if (w->slot >= 0) {
		connslot_release(w->slotfd, w->slot);
		w->slot = -1;
	}
}

/* On PostgreSQL, one of the --connections slots before the store opens
 * (common/connslot.h): at the limit, wait for one, saying so once. */
void wstore_slot_take(struct worker *w)
{
	if (!w->pg || w->slot >= 0)
		return;
	int s = connslot_try(w->slotfd, w->nslots);
	if (s == -EAGAIN) {
		s = (int)(getpid() % w->nslots);
		log_warn("%s: all %d store connection slots are in use (connections in [store]): waiting for one",
			 w->conv, w->nslots);
		int e = connslot_wait(w->slotfd, s);
		if (e)
			s = e;
		else
			log_info("%s: got a store connection slot", w->conv);
	}
	if (s < 0) {
		log_error("%s: cannot take a store connection slot in %s/connections.lock: %s", w->conv, w->run_dir,
			  strerror(-s));
		exit(IPC_EXIT_STORE);
	}
	w->slot = s;
}

void wstore_take(struct worker *w)
{
	int e;
	if (w->st)
		return;
	wstore_slot_take(w);
	if ((e = store_open(&w->st, w->data, &w->so))) {
		log_error("%s: cannot open the store in %s again: %s%s%s", w->conv, w->shown, store_strerror(e),
			  *store_open_error() ? ": " : "", store_open_error());
		exit(IPC_EXIT_STORE);
	}
}

/* Whether the data directory's filesystem is (nearly) out of space: then a
 * full store is the disk's, and a larger map would not help a new worker. */
static int disk_full(struct worker *w)
{
	struct statvfs fs;
	if (w->pg)
		return 0; /* the server's disk: not ours to see */
	return statvfs(w->data, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < 4u << 20;
}

void wstore_die(struct worker *w, int e, const char *what)
{
	if (e == STORE_E_FENCED || e == STORE_E_NOTFOUND) {
		/* Another worker holds the lease, or the conversation is gone
		 * (deleted as this worker started or ran: nothing is wrong). */
		if (e == STORE_E_FENCED)
			log_warn("%s: %s: lease superseded (fenced); exiting", w->conv, what);
		else
			log_info("%s: %s: the conversation was deleted; exiting", w->conv, what);
		exit(IPC_EXIT_GONE);
	}
	log_error("%s: %s: %s", w->conv, what, store_strerror(e));
	struct store_stat st;
	if (e == STORE_E_FULL && w->st && store_stat(w->st, &st) == 0 && st.map_size < st.max_map_size &&
	    !disk_full(w)) {
		/* The map grows before this handle's next transaction, and a
		 * new worker reserves room again: a restart, not a dead end. */
		log_warn("%s: the map (%llu bytes) may still grow: exiting to be restarted", w->conv,
			 (unsigned long long)st.map_size);
		exit(IPC_EXIT_STORE);
	}
	/* -EIO from a commit on LMDB: its own page flush failed. */
	int flush = e == -EIO && store_flushes_locally(w->st);
	exit(e == STORE_E_CORRUPT ? IPC_EXIT_CORRUPT : e == STORE_E_FULL ? IPC_EXIT_FULL : flush ? IPC_EXIT_FLUSH
											    : IPC_EXIT_STORE);
}

void wstore_die_flush(struct worker *w, int e, const char *what)
{
	log_error("%s: %s: %s; a failed flush is never retried (agentd stops)", w->conv, what, store_strerror(e));
	exit(IPC_EXIT_FLUSH);
}

/* About the bytes v takes in the store (its compact JSON). */
size_t wstore_json_size(const json_t *v)
{
	return v ? json_dumpb(v, NULL, 0, JSON_COMPACT) : 0;
}

/* Room for a write of about `bytes` before its transaction: the map grows
 * by itself only by halves, and a large turn or result would otherwise meet
 * a full map that could still grow (store_reserve). */
void wstore_reserve(struct worker *w, size_t bytes)
{
	store_reserve(w->st, bytes); /* no system call unless the map grows */
}

store_txn *wstore_rbegin(struct worker *w)
{
	store_txn *t;
	int e = store_txn_begin(w->st, STORE_READ, &t);
	if (e)
		wstore_die(w, e, "read transaction");
	return t;
}

/* A write transaction that checks the lease first: writers are serialised, so
 * the check holds until commit. finished: see wipc_gate_enter. */
store_txn *wstore_wbegin(struct worker *w, int finished)
{
	store_txn *t;
	wipc_gate_enter(w, finished);
	/* Lazy: one flush under the writer lock. Nothing outside the store
	 * acts on a commit before a flush covers it (dispatch flushes before
	 * a tool runs; agentd's replies and watchers wait for its frontier). */
	int e = store_txn_begin(w->st, STORE_WRITE_LAZY, &t);
	if (e)
		wstore_die(w, e, "write transaction");
	if ((e = store_lease_check(t, w->conv, w->lease))) {
		store_txn_abort(t);
		wstore_die(w, e, "lease check");
	}
	return t;
}

void wstore_must(struct worker *w, store_txn *t, int e, const char *what)
{
	if (e) {
		store_txn_abort(t);
		wstore_die(w, e, what);
	}
}

/* Commit a write transaction; seq: the last event it appended (0: none),
 * announced to the supervisor for watchers. */
void wstore_commit(struct worker *w, store_txn *t, const char *what, uint64_t seq)
{
	int e = store_txn_commit(t);
	if (e)
		wstore_die(w, e, what);
	wipc_gate_leave(seq, w);
}

/* Abort a write transaction that found nothing to write. */
void wstore_wabort(struct worker *w, store_txn *t)
{
	store_txn_abort(t);
	wipc_gate_leave(0, w);
}

/* Pack JSON for the store; the bytes live in b until jsonmp_buf_destroy. */
store_bytes wstore_pack(struct worker *w, struct jsonmp_buf *b, const json_t *v)
{
	jsonmp_buf_init(b);
	int e = jsonmp_pack(&b->pk, v);
	if (e == -ENOMEM) {
		/* Never a record stored as something else: end here, inside the
		 * transaction (nothing of it is committed); the turn is re-run on
		 * revival. */
		log_error("%s: out of memory packing a record; exiting", w->conv);
		exit(IPC_EXIT_STORE);
	}
	if (e) {
		msgpack_sbuffer_clear(&b->sb);
		msgpack_pack_nil(&b->pk); /* deeper than we keep: stored as null */
	}
	return (store_bytes){ b->sb.data, b->sb.size };
}

uint64_t wstore_append(struct worker *w, store_txn *t, const char *type, json_t *content)
{
	if (!content) {
		/* A content that could not be built (out of memory): stored, it
		 * would be a null event the log's tail can never get past. */
		store_txn_abort(t);
		log_error("%s: cannot build the %s event's content: out of memory", w->conv, type);
		exit(IPC_EXIT_STORE);
	}
	struct jsonmp_buf b;
	struct store_event_in ev = { type, wstore_pack(w, &b, content), NULL };
	uint64_t seq = 0;
	int e = store_event_append(t, w->conv, &ev, &seq, NULL);
	jsonmp_buf_destroy(&b);
	json_decref(content);
	wstore_must(w, t, e, "append");
	return seq;
}

/* Run a model or tool command (proc_run), without the store while it runs. */
int wstore_run_command(struct worker *w, char *const argv[], const struct proc_opts *o, struct proc_result *r)
{
	wstore_let_go(w);
	int rc = proc_run(argv, o, r);
	wstore_take(w);
	wipc_report_child(w, 0);
	return rc;
}

/* Out of memory where going on would leave a record or this worker's view
 * short of something: end here (an open transaction commits nothing); the
 * next worker does the work again. */
void wstore_die_oom(struct worker *w, store_txn *t, const char *what)
{
	if (t)
		store_txn_abort(t);
	log_error("%s: out of memory %s; exiting", w->conv, what);
	exit(IPC_EXIT_STORE);
}

/* Status and fsm_state together; an ended conversation stays ended. */
void wstore_put_state(struct worker *w, store_txn *t, int status, json_t *fsm)
{
	if (!fsm)
		wstore_die_oom(w, t, "recording the state"); /* stored, it would be a null fsm_state */
	struct store_conv c;
	wstore_must(w, t, store_conv_get(t, w->conv, &c), "read conversation");
	struct jsonmp_buf b;
	struct store_conv_patch p = { .set = STORE_SET_FSM, .fsm_state = wstore_pack(w, &b, fsm) };
	if (c.status != STORE_ENDED) {
		p.set |= STORE_SET_STATUS;
		p.status = status;
	}
	int e = store_conv_put(t, w->conv, &p);
	jsonmp_buf_destroy(&b);
	json_decref(fsm);
	wstore_must(w, t, e, "put state");
}

void wstore_audit(struct worker *w, store_txn *t, uint64_t turn_ref, const json_t *req, const char *model,
		  const struct store_usage *u, int64_t latency)
{
	if (!w->cfg.audit)
		return;
	struct jsonmp_buf b;
	struct store_model_call_in mc = { turn_ref, wstore_pack(w, &b, req), model, *u, (uint64_t)latency,
					  w->sum_version };
	int e = store_model_call_put(t, w->conv, &mc);
	jsonmp_buf_destroy(&b);
	wstore_must(w, t, e, "audit");
}

/* Did the log grow past what this worker last read? Asked inside the write
 * transaction that records a state decided from that read: the supervisor
 * commits sends, resolutions and expiries (and sets the status `active`)
 * between the worker's read and its write, so a status written from the
 * older view would overwrite theirs, and a worker killed then would never be
 * restarted for the work they owe (found by tests/proc/test_chaos.py). */
int wstore_log_moved(struct worker *w, store_txn *t, uint64_t seen)
{
	uint64_t last = 0;
	wstore_must(w, t, store_event_latest_seq(t, w->conv, &last), "latest seq");
	return last != seen;
}
