/*
 * commit.c: the execution of each iteration's requests (commit.h): the job
 * queue, the group commit and the writer thread.
 *
 * Group commit: every write request read in one iteration, from all clients,
 * runs in ONE write transaction, and each is acknowledged only after that
 * commit: one flush pair for many events, still durable before any reply.
 * Reads run in order around it: a read whose client sent a write earlier in
 * the same batch waits for the commit (it must see that write); any other read
 * runs at once on the committed state.
 */
#include "supervisor/commit.h"
#include "common/log.h"
#include "supervisor/control.h"
#include "supervisor/durable.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

static struct {
	const struct commit_env *env;
	TAILQ_HEAD(, job) jobs; /* this iteration's requests */
} C = { .jobs = TAILQ_HEAD_INITIALIZER(C.jobs) };

/* The writer thread's state (below, "the writer thread"). */
struct agroup;
static void on_group_done(struct loop_watch *lw, uint32_t events);

static struct {
	int off;                /* AGENTD_WRITER_THREAD=0: every group on the loop (benchmarks compare) */
	int started, quit;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct agroup *todo;    /* handed to the thread (under mu) */
	struct agroup *done;    /* handed back (under mu) */
	struct agroup *ready;   /* made by commit_execute, handed over at the iteration's end */
	int kick;               /* requests came during the commit: the next wait must not block */
	int efd;
	struct loop_watch lw;
} WT = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .efd = -1, .lw = { on_group_done, 1 } };

static void writer_client_gone(struct client *c);

void commit_init(const struct commit_env *env)
{
	C.env = env;
	const char *wt = getenv("AGENTD_WRITER_THREAD");
	WT.off = wt && !strcmp(wt, "0");
}

/* Whether op runs in the group transaction. */
static int is_write(int op)
{
	return op >= 0 && op < OP_COUNT && (C.env->ops[op].flags & OPF_WRITE);
}

int commit_request(struct client *c, struct slot *s, struct request *rq, int64_t started_us, int after_write)
{
	struct job *j = calloc(1, sizeof *j);
	if (!j)
		return -ENOMEM;
	j->rq = *rq;
	memset(rq, 0, sizeof *rq);
	j->slot = s;
	j->started_us = started_us;
	j->peer_uid = control_uid(c);
	j->after_write = after_write;
	TAILQ_INSERT_TAIL(&C.jobs, j, q);
	return 0;
}

static void jobs_client_gone(struct job *first, struct client *c)
{
	for (struct job *j = first; j; j = TAILQ_NEXT(j, q))
		if (j->slot && slot_client(j->slot) == c)
			j->slot = NULL;
}

void commit_client_gone(struct client *c)
{
	jobs_client_gone(TAILQ_FIRST(&C.jobs), c);
	writer_client_gone(c);
}

/* A store error as the protocol's code. */
int commit_perr(int e)
{
	switch (e) {
	case 0: return PERR_OK;
	case STORE_E_NOTFOUND: return PERR_NOT_FOUND;
	case STORE_E_STALE: return PERR_STALE;
	case STORE_E_CONFLICT: return PERR_CONFLICT;
	case STORE_E_FULL: return PERR_STORE_FULL;
	case STORE_E_INVAL: return PERR_BAD_REQUEST;
	/* A PostgreSQL store that refuses writes for now (read-only) or
	 * cannot be reached (a restart, a failover): nothing was written,
	 * and a retry once it is back succeeds. */
	case -EROFS: case -ECONNRESET: case -ECONNREFUSED: case STORE_E_INDOUBT: return PERR_UNAVAILABLE;
	/* A row it writes stayed locked by another node's transaction past
	 * the supervisor's lock_timeout, or deadlocked, through every retry:
	 * nothing was written, and a retry later succeeds. */
	case -EAGAIN: return PERR_UNAVAILABLE;
	}
	return PERR_INTERNAL;
}

/* What a client is told of a store that is unavailable (commit_perr). */
const char *commit_unavailable_why(int e)
{
	if (e == STORE_E_INDOUBT)
		return "the connection to the store's database was lost during the commit, and whether it was made "
		       "is unknown; a retry with the same event_id is written once";
	if (e == -EAGAIN)
		return "a row it writes is locked by another transaction (a node stopped inside one?): nothing was "
		       "written; retry later";
	return e == -EROFS ? "the store refuses writes (its database is read-only): nothing was written; retry later"
			   : "the store's database cannot be reached: nothing was written; retry later";
}

void job_error(struct job *j, int err, const char *fmt, ...)
{
	va_list ap;
	j->err = err;
	va_start(ap, fmt);
	vsnprintf(j->msg, sizeof j->msg, fmt, ap);
	va_end(ap);
}

/* A store error to a job error with a message that names the object. */
int job_store_error(struct job *j, int e, const char *what)
{
	int err = commit_perr(e);
	/* Name what was not found (messages name what was wrong):
	 * "conversation 'demo' not found", not just "conversation not found". */
	const char *id = j->rq.tool_call_id ? j->rq.tool_call_id : j->rq.conv;
	if (e == -ENOMEM)
		job_error(j, PERR_INTERNAL, "out of memory");
	else if (e == STORE_E_NOTFOUND && id)
		job_error(j, err, "%s '%s' not found", what, id);
	else if (e == STORE_E_NOTFOUND)
		job_error(j, err, "%s not found", what);
	else if (e == STORE_E_FULL)
		job_error(j, err, "the store is full (map size limit reached, or the disk is full)");
	else if (err == PERR_UNAVAILABLE)
		job_error(j, err, "%s: %s", what, commit_unavailable_why(e));
	else
		job_error(j, err, "%s: %s", what, store_strerror(e));
	return err;
}

/* Whether a write's (or a step's) error e poisoned the group transaction:
 * the refusals leave it usable (nothing written), anything else does not. */
static int fatal(int e)
{
	return e && e != STORE_E_NOTFOUND && e != STORE_E_STALE && e != STORE_E_CONFLICT && e != STORE_E_INVAL &&
	       e != STORE_E_FENCED;
}

/* Run one write; a non-zero return that is fatal() poisoned the txn. */
static int write_one(store_txn *t, struct job *j, struct wres *r)
{
	return C.env->ops[j->rq.op].write(t, j, r);
}

static void after_write(struct job *j, struct wres *r)
{
	if (C.env->ops[j->rq.op].after)
		C.env->ops[j->rq.op].after(j, r);
}

/* A line clients retrying into the same failure would repeat: logged at
 * most once a second, saying how many were held back since. */
struct every_second {
	int64_t last;
	unsigned more; /* held back since the last line */
};

static int every_second_due(struct every_second *r)
{
	int64_t now = loop_now_ms();
	if (r->last && now - r->last < 1000) {
		r->more++;
		return 0;
	}
	r->last = now;
	return 1;
}

/* Say why a group commit of n writes failed: an unavailable or full store
 * once a second (clients retry into it), anything else each time. */
static void group_commit_failed(int e, size_t n)
{
	static struct every_second unavailable, full;
	if (commit_perr(e) == PERR_UNAVAILABLE) {
		if (every_second_due(&unavailable)) {
			log_error("group commit of %zu writes failed: %s (%s); %u more failed so since the last such "
				  "line", n, commit_unavailable_why(e), store_strerror(e), unavailable.more);
			unavailable.more = 0;
		}
	} else if (e == STORE_E_FULL) {
		if (every_second_due(&full)) {
			log_error("group commit of %zu writes failed: the store is full (map at max_map_size, or the "
				  "disk is full); %u more failed so since the last such line", n, full.more);
			full.more = 0;
		}
	} else {
		log_error("group commit of %zu writes failed: %s", n, store_strerror(e));
	}
}

/* A full map that cannot grow: keep only the deletes, for a transaction
 * that may use the store's delete reserve (STORE_WRITE_FREEING); the other
 * writes are refused store_full, since they are what must not spend it.
 * Returns how many writes are left (0: there was no delete). */
static size_t keep_deletes(struct job **w, size_t n)
{
	size_t dels = 0;
	for (size_t i = 0; i < n; i++)
		dels += !w[i]->excluded && w[i]->rq.op == OP_DELETE;
	for (size_t i = 0; dels && i < n; i++) {
		if (w[i]->excluded || w[i]->rq.op == OP_DELETE)
			continue;
		w[i]->excluded = 1;
		json_decref(w[i]->reply);
		w[i]->reply = NULL;
		json_decref(w[i]->err_extra);
		w[i]->err_extra = NULL;
		job_error(w[i], PERR_STORE_FULL, "the store is full (map size limit reached, or the disk is full)");
	}
	return dels;
}

/* How long the writer thread retries a group that met a locked row. */
#define LOCK_RETRY_MS 2000

/* One group transaction across its attempts: a damaged record or a write
 * too large for a full map is left out and the rest run again, as after a
 * locked row or once the map has grown. */
struct group {
	struct job **w;
	struct wres *res;
	size_t n;           /* writes in the group */
	size_t left;        /* of those, not left out (excluded) yet */
	int grown;          /* attempts that met a full map which then grew */
	int freeing;        /* the deletes alone, with the store's delete reserve */
	int deadlocks;      /* attempts aborted for a lock conflict */
	int64_t locked_since; /* the first of them (ms): off the loop they are retried for LOCK_RETRY_MS */
	int resets;         /* attempts whose connection was lost */
	int async;          /* on the writer thread: nothing of the loop's is touched */
	int made;           /* committed, as id */
	uint64_t id;        /* the id its commit made current */
	uint64_t committed; /* the id its replies show */
};

static void job_clear_result(struct job *j)
{
	json_decref(j->reply);
	j->reply = NULL;
	json_decref(j->err_extra);
	j->err_extra = NULL;
}

/* The loop's part of a commit: the frontier and the counters. */
static void group_committed_note(struct group *g)
{
	if (g->committed == g->id)
		durable_committed(g->id); /* its page flush covered those before */
	durable_need(g->committed);
	metrics_add(M_GROUP_COMMITS, 1);
	metrics_add(M_GROUP_WRITES, g->n);
	/* Off the loop the next group is made while this one commits, and
	 * commits right after it: this one's replies do not wait for that
	 * commit to cover them; the flusher covers them beside it, at once. */
	if (g->async) {
		metrics_add(M_GROUP_COMMITS_THREAD, 1);
		durable_flush_now();
	}
}

static void group_committed(struct group *g, uint64_t id)
{
	/* A transaction that changed nothing commits no id: its replies
	 * show the one before. */
	uint64_t last = store_last_id(C.env->st);
	g->committed = last < id ? last : id;
	g->id = id;
	g->made = 1;
	if (!g->async)
		group_committed_note(g); /* else the loop's, once the thread is done */
}

/* The conversations the group's sends write to, locked in one step
 * (store_convs_lock: on PostgreSQL one round trip for them all, where each
 * send's own lock would take one). A bad id is its send's to refuse. */
static int group_lock_sends(struct group *g, store_txn *t)
{
	const char **ids = calloc(g->n + 1, sizeof *ids);
	size_t k = 0;
	if (!ids)
		return 0; /* each send locks its own */
	for (size_t i = 0; i < g->n; i++)
		if (!g->w[i]->excluded && g->w[i]->rq.op == OP_SEND && g->w[i]->rq.conv)
			ids[k++] = g->w[i]->rq.conv;
	int e = k > 1 ? store_convs_lock(t, ids, k) : 0;
	free(ids);
	return fatal(e) ? e : 0;
}

/* One attempt: every write not left out, in one transaction, committed.
 * Returns 0 or the store error; *bad is the write that met it (g->n: the
 * begin or the commit did). */
static int group_attempt(struct group *g, size_t *bad)
{
	store_txn *t;
	*bad = g->n;
	/* Lazy: one flush under the writer lock; the replies wait for the
	 * durable frontier instead (durable.h). */
	int mode = STORE_WRITE_LAZY | (g->freeing ? STORE_WRITE_FREEING : 0);
	/* The writer thread leaves the gate to the loop: a worker granted it
	 * commits first, and LMDB's writer lock makes this thread wait. */
	int e = g->async ? store_txn_begin(C.env->st, mode, &t) : gate_write_begin(mode, &t);
	uint64_t id = e ? 0 : store_txn_id(t);
	if (!e && (e = group_lock_sends(g, t)))
		*bad = g->n;
	for (size_t i = 0; !e && i < g->n; i++) {
		if (g->w[i]->excluded)
			continue;
		g->w[i]->err = 0;
		job_clear_result(g->w[i]);
		int we = write_one(t, g->w[i], &g->res[i]);
		if (fatal(we))
			e = we, *bad = i;
	}
	if (e)
		store_txn_abort(t);
	else if (!(e = g->async ? store_txn_commit(t) : C.env->commit(t)))
		group_committed(g, id); /* async: workers_wake spawns after it, on the loop */
	if (e)
		C.env->forget(); /* taken in a transaction that did not commit */
	return e;
}

/* One write met a damaged record (`agentd check` names it), or ran out of
 * memory: it fails alone, with the error it set; the others are retried
 * without it. */
static void group_leave_out_damaged(struct group *g, size_t bad, int e)
{
	struct job *j = g->w[bad];
	j->excluded = 1;
	if (!j->err)
		job_store_error(j, e, proto_op_name(j->rq.op));
	g->left--;
	log_error("a %s of %s %s: refused; %zu other write(s) retried without it", proto_op_name(j->rq.op),
		  j->rq.conv ? j->rq.conv : j->rq.tool_call_id ? j->rq.tool_call_id : "a new conversation",
		  e == -ENOMEM ? "ran out of memory" : "met a damaged record", g->left);
}

/* The map is full and cannot grow: 1 when the group runs again smaller. */
static int group_shrink_full(struct group *g, size_t bad)
{
	/* A delete among the writes: the deletes alone, with the reserve,
	 * so that an operator can always free room. */
	size_t dels = g->freeing ? 0 : keep_deletes(g->w, g->n);
	if (dels) {
		log_error("the store is full: %zu delete(s) run alone with the delete reserve, %zu other "
			  "write(s) refused", dels, g->left - dels);
		g->freeing = 1;
		g->left = dels;
		return 1;
	}
	/* The write that met the full map (a large send or batch) fails
	 * alone, as a damaged record does, and the others are retried
	 * without it; a small write, a delete above all, still fits. */
	if (bad >= g->n || g->left < 2)
		return 0;
	struct job *j = g->w[bad];
	j->excluded = 1;
	job_error(j, PERR_STORE_FULL, "the store is full (map size limit reached, or the disk is full)");
	g->left--;
	log_error("a %s of %s does not fit the full store (max_map_size): refused; %zu other write(s) "
		  "retried without it", proto_op_name(j->rq.op), j->rq.conv ? j->rq.conv : "?", g->left);
	return 1;
}

/* After an attempt failed with *e: 1 when the group runs again, 0 when *e
 * stands (0 once every write was left out). map0: the map's size before
 * the attempt. */
static int group_retry(struct group *g, int *e, size_t bad, size_t map0)
{
	if ((*e == STORE_E_CORRUPT || *e == -ENOMEM) && bad < g->n) {
		group_leave_out_damaged(g, bad, *e);
		if (!g->left)
			*e = 0;
		return g->left > 0;
	}
	/* A row it writes stayed locked past the lock_timeout (a worker's
	 * turn commit on a loaded machine, another node's transaction, a node
	 * stopped inside one), or deadlocked (-EAGAIN). Nothing of it was
	 * written: run it again. On the loop a few times, each a lock_timeout
	 * the loop waits; on the writer thread, which the loop does not wait
	 * for, for up to LOCK_RETRY_MS. */
	if (*e == -EAGAIN) {
		int64_t now = loop_now_ms();
		if (!g->deadlocks++)
			g->locked_since = now;
		if (g->async ? now - g->locked_since < LOCK_RETRY_MS : g->deadlocks <= 8) {
			if (g->deadlocks == 1)
				log_info("a group commit of %zu writes met a locked row: retrying it", g->left);
			return 1;
		}
		log_warn("a group commit of %zu writes found a row locked through %d tries in %lld ms: refused as "
			 "unavailable", g->left, g->deadlocks, (long long)(now - g->locked_since));
		return 0;
	}
	/* The connection went before the commit was made (the server
	 * restarted, or ended a session left idle in its transaction while
	 * this process was stopped): nothing was written; once more, on a new
	 * connection. STORE_E_INDOUBT is not retried: it may be written. */
	if (*e == -ECONNRESET && g->resets++ < 1) {
		log_info("a group commit of %zu writes lost its connection to the store: retrying it", g->left);
		return 1;
	}
	/* A full map: the store doubled it, or does before the next begin, up
	 * to max_map_size; a large send may need several doublings. A full
	 * disk, or a map at its maximum: no retry. */
	if (*e != STORE_E_FULL)
		return 0;
	struct store_stat st;
	if (g->grown >= 64 || store_stat(C.env->st, &st) || !(st.map_full || st.map_size > map0))
		return group_shrink_full(g, bad);
	if (!g->grown++)
		log_info("the map is full during a group commit of %zu writes: growing it from %zu bytes", g->left, map0);
	return 1;
}

/* What each write owes once the group is done: its after step, or the
 * group's error (a write left out has its own). */
static void group_settle(struct group *g, int e)
{
	for (size_t i = 0; i < g->n; i++) {
		struct job *j = g->w[i];
		j->txnid = g->committed;
		if (j->excluded)
			continue; /* its error is set */
		if (e) {
			job_clear_result(j);
			if (e == STORE_E_FULL)
				job_error(j, PERR_STORE_FULL, "the store is full (map size limit reached, or the disk is full)");
			else if (commit_perr(e) == PERR_UNAVAILABLE)
				job_error(j, PERR_UNAVAILABLE, "%s", commit_unavailable_why(e));
			else
				job_error(j, PERR_INTERNAL, "commit failed: %s",
					  e == -ENOMEM ? "out of memory" : store_strerror(e));
		} else if (!j->err) {
			after_write(j, &g->res[i]);
		}
	}
}

/* The attempts, on the loop or the writer thread: 0 or the error that
 * stands. */
static int group_run(struct group *g)
{
	int e;
	for (;;) {
		size_t bad, map0 = store_map_size(C.env->st); /* store_stat lists the readers: too dear for every commit */
		e = group_attempt(g, &bad);
		if (!e || !group_retry(g, &e, bad, map0))
			break;
	}
	return e;
}

/* The loop's part once the attempts are done. */
static void group_finish(struct group *g, int e)
{
	group_settle(g, e);
	C.env->forget();
	if (e)
		group_commit_failed(e, g->n);
	if (e == -EIO) /* its page flush failed: durable.h */
		durable_fail(e);
}

static void group_commit(struct job **w, struct wres *res, size_t n)
{
	struct group g = { .w = w, .res = res, .n = n, .left = n };
	group_finish(&g, group_run(&g));
}

/* ---- the writer thread --------------------------------------------------
 *
 * LMDB flushes a commit's pages under its writer lock, in the thread that
 * commits. On the loop thread that flush stalls every client for its length:
 * the loop neither reads the next requests nor parses them meanwhile. So a
 * group of sends on an LMDB store commits on a thread of its own, while the
 * loop, restricted (loop_restrict), only reads, parses and queues requests
 * and writes replies already made: nothing the group's writes touch (the
 * store handle, the workers, the gate, the frontier, the counters). Once
 * the thread is done, the loop starts the frontier's flush for the group
 * (the next group commits beside it, and the replies leave when it
 * returns, restricted or not), settles the group (its replies, the workers
 * it wakes) and runs one whole iteration before the next group goes.
 * docs/architecture.md, "The writer thread". */

struct agroup {
	struct group g;
	int e;
	int flush;        /* the thread flushes after the commit (group_ready) */
	uint64_t flushed; /* and that flush covered this id (0: none made) */
	int64_t flush_us; /* how long it took: each reply waited that for the frontier */
	struct job **deferred; /* reads behind a write of their client */
	size_t nd;
	TAILQ_HEAD(, job) jobs; /* its writes and those reads, in request order */
};

static void *writer_main(void *arg)
{
	pthread_setname_np(pthread_self(), "writer");
	(void)arg;
	pthread_mutex_lock(&WT.mu);
	for (;;) {
		while (!WT.todo && !WT.quit)
			pthread_cond_wait(&WT.cv, &WT.mu);
		if (WT.quit)
			break;
		struct agroup *ag = WT.todo;
		WT.todo = NULL;
		pthread_mutex_unlock(&WT.mu);
		ag->e = group_run(&ag->g);
		if (ag->flush && ag->g.made) {
			uint64_t id;
			int64_t t0 = loop_now_us();
			if (durable_flush_here(&id) == 0) {
				ag->flushed = id;
				ag->flush_us = loop_now_us() - t0;
			}
		}
		pthread_mutex_lock(&WT.mu);
		WT.done = ag;
		uint64_t one = 1;
		ssize_t w = write(WT.efd, &one, sizeof one);
		(void)w;
	}
	pthread_mutex_unlock(&WT.mu);
	return NULL;
}

static int writer_start(void)
{
	if (WT.started)
		return 0;
	WT.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (WT.efd < 0)
		return -errno;
	int e = loop_add(WT.efd, EPOLLIN, &WT.lw);
	if (e) {
		close(WT.efd);
		WT.efd = -1;
		return e;
	}
	if ((e = loop_thread(&WT.th, writer_main, NULL))) {
		loop_del(WT.efd);
		close(WT.efd);
		WT.efd = -1;
		return e;
	}
	WT.started = 1;
	return 0;
}

/* A group the writer thread may commit: sends alone (their writes touch the
 * store, the workers' leases and nothing else of the loop's), on LMDB with
 * sync = full, where the flush it takes off the loop is, and no worker
 * holding the gate or waiting for it: restricted, the loop would not read
 * their `written` and `write` to hand it on. */
static int group_async_ok(struct job **w, size_t n)
{
	if (WT.off || C.env->cfg->store || C.env->cfg->sync != STORE_SYNC_FULL || gate_wanted())
		return 0;
	for (size_t i = 0; i < n; i++)
		if (w[i]->rq.op != OP_SEND)
			return 0;
	return 1;
}

/* The group's writes are all one client's, and every other client waits on
 * a held reply: no next commit can come before these replies leave, so
 * nothing would commit beside the frontier's flush, and the thread makes
 * that flush itself, right after the commit (outside the writer lock):
 * the replies leave without the hand-offs to and from the flusher thread
 * (docs/durability.md). */
static int group_alone(struct job **w, size_t n)
{
	struct client *c = w[0]->slot ? slot_client(w[0]->slot) : NULL;
	if (!c)
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!w[i]->slot || slot_client(w[i]->slot) != c)
			return 0;
	return control_only_free(c);
}

/* Make the group for the thread: its writes and the reads behind them
 * leave C.jobs for it. 0, or -ENOMEM (then it commits on the loop). */
static int group_ready(struct job **w, struct wres *res, size_t n, struct job **deferred, size_t nd)
{
	struct agroup *ag = calloc(1, sizeof *ag);
	if (!ag)
		return -ENOMEM;
	ag->g = (struct group){ .w = w, .res = res, .n = n, .left = n, .async = 1 };
	ag->deferred = deferred;
	ag->nd = nd;
	ag->flush = group_alone(w, n);
	TAILQ_INIT(&ag->jobs);
	struct job *j, *next;
	TAILQ_FOREACH_SAFE(j, &C.jobs, q, next)
		if (is_write(j->rq.op) || (j->after_write && !j->ran)) {
			TAILQ_REMOVE(&C.jobs, j, q);
			TAILQ_INSERT_TAIL(&ag->jobs, j, q);
		}
	WT.ready = ag;
	return 0;
}

/* A group made and not handed over yet. No client is freed while one is on
 * the thread: control_reap runs at an iteration's end, never restricted. */
static void writer_client_gone(struct client *c)
{
	if (WT.ready)
		jobs_client_gone(TAILQ_FIRST(&WT.ready->jobs), c);
}

static void agroup_finish(struct agroup *ag);

int commit_start(void)
{
	struct agroup *ag = WT.ready;
	if (!ag)
		return 0;
	WT.ready = NULL;
	int e = writer_start();
	if (e) {
		/* No thread: on the loop, as any other group, from now on. */
		log_warn("cannot start the writer thread (%s): groups of sends commit on the loop", strerror(-e));
		WT.off = 1;
		ag->g.async = 0;
		ag->e = group_run(&ag->g);
		agroup_finish(ag);
		return 0;
	}
	loop_restrict(1);
	pthread_mutex_lock(&WT.mu);
	WT.todo = ag;
	pthread_cond_signal(&WT.cv);
	pthread_mutex_unlock(&WT.mu);
	return 1;
}

static void job_answer(struct job *j);
static void read_one(struct job *j);

static void on_group_done(struct loop_watch *lw, uint32_t events)
{
	(void)events;
	uint64_t n;
	if (read(WT.efd, &n, sizeof n) < 0)
		return;
	pthread_mutex_lock(&WT.mu);
	struct agroup *ag = WT.done;
	WT.done = NULL;
	pthread_mutex_unlock(&WT.mu);
	if (!ag)
		return;
	loop_restrict(0);
	agroup_finish(ag);
}

/* The loop's part of a group once its attempts are done. */
static void agroup_finish(struct agroup *ag)
{
	if (ag->flushed) {
		durable_flushed(ag->flushed); /* before the note: it asks the flusher for nothing then */
		metrics_add(M_GROUP_COMMITS_FLUSHED, 1);
		for (size_t i = 0; i < ag->g.n; i++) /* never held, yet they waited for it */
			metrics_durable_waited(ag->flush_us);
	}
	if (ag->g.made && ag->g.async)
		group_committed_note(&ag->g);
	group_finish(&ag->g, ag->e);
	for (size_t k = 0; k < ag->nd; k++)
		read_one(ag->deferred[k]);
	struct job *j;
	while ((j = TAILQ_FIRST(&ag->jobs))) {
		TAILQ_REMOVE(&ag->jobs, j, q);
		job_answer(j);
	}
	control_drain_watches();
	WT.kick = !TAILQ_EMPTY(&C.jobs);
	free(ag->g.w);
	free(ag->g.res);
	free(ag->deferred);
	free(ag);
}

int commit_pending(void)
{
	return WT.kick;
}

void commit_close(void)
{
	if (!WT.started)
		return;
	pthread_mutex_lock(&WT.mu);
	WT.quit = 1;
	pthread_cond_signal(&WT.cv);
	pthread_mutex_unlock(&WT.mu);
	pthread_join(WT.th, NULL);
	loop_del(WT.efd);
	close(WT.efd);
	WT.efd = -1;
	WT.started = 0;
}

/* ---- dispatch -------------------------------------------------------- */

static void read_one(struct job *j)
{
	const struct commit_op *op = &C.env->ops[j->rq.op];
	store_txn *t = NULL;
	if (!j->slot && (j->rq.op == OP_EVENTS || j->rq.op == OP_WATCH))
		return; /* its client hung up while the writes before it were held */
	if (op->flags & OPF_TXN) {
		int e = store_txn_begin(C.env->st, STORE_READ, &t);
		if (e) {
			job_store_error(j, e, "read");
			return;
		}
	}
	if (t) {
		j->txnid = store_txn_id(t);
		durable_need(j->txnid);
	}
	op->read(t, j);
	if (t)
		store_txn_abort(t);
}

static void job_finish(struct job *j)
{
	if (j->slot) {
		slot_need(j->slot, j->txnid);
		if (j->err && j->err_extra)
			slot_error_with(j->slot, j->rq.id, j->err, j->msg, json_incref(j->err_extra));
		else if (j->err)
			slot_error(j->slot, j->rq.id, j->err, j->msg);
		else if (j->reply)
			slot_ok(j->slot, j->rq.id, json_incref(j->reply));
		else
			slot_error(j->slot, j->rq.id, PERR_INTERNAL, "out of memory");
	}
	if (!j->slot && !j->parked)
		metrics_op_latency(j->rq.op, j->started_us); /* its client left; one with a slot is timed at its reply */
	json_decref(j->reply);
	json_decref(j->err_extra);
	proto_request_free(&j->rq);
	free(j);
}

/* j's reply to its slot, j freed, and its client's replies written out as
 * far as their order allows (j is off its queue). */
static void job_answer(struct job *j)
{
	struct client *c = j->slot ? slot_client(j->slot) : NULL;
	job_finish(j);
	if (c)
		client_flush(c);
}

/* A ping first, sent at once: one read in the same iteration as a flood
 * of large replies does not wait for them to be built. It has no effect,
 * so running it first changes nothing the others see, and its reply still
 * leaves in its connection's order (client_flush). */
static void pings_first(void)
{
	struct job *j, *next;
	TAILQ_FOREACH_SAFE(j, &C.jobs, q, next) {
		if (j->after_write || !(C.env->ops[j->rq.op].flags & OPF_FIRST))
			continue;
		read_one(j);
		TAILQ_REMOVE(&C.jobs, j, q);
		job_answer(j);
	}
}

/* Reads that need no earlier write of their client run now, on the
 * committed state; writes gather for the group transaction (w, *iw of
 * them), the reads behind them in deferred (*nd). Out of memory for that
 * bookkeeping (oom), every request left is answered so, none done. */
static void jobs_sort(int oom, struct job **w, size_t *iw, struct job **deferred, size_t *nd)
{
	struct job *j;
	TAILQ_FOREACH(j, &C.jobs, q) {
		if (oom) {
			j->err = PERR_INTERNAL;
			snprintf(j->msg, sizeof j->msg, "out of memory");
			j->ran = 1;
			continue;
		}
		if (is_write(j->rq.op)) {
			w[(*iw)++] = j;
			continue;
		}
		if (j->after_write) {
			deferred[(*nd)++] = j;
		} else {
			read_one(j);
			j->ran = 1;
		}
	}
}

/* Every job done is answered; held (the writes wait for the write gate),
 * only the reads that ran are, and the rest wait. */
static void jobs_answer(int held)
{
	struct job *j, *next;
	TAILQ_FOREACH_SAFE(j, &C.jobs, q, next) {
		if (held && !j->ran)
			continue;
		TAILQ_REMOVE(&C.jobs, j, q);
		job_answer(j);
	}
}

void commit_execute(void)
{
	struct job *j;
	size_t nw = 0, n = 0;
	WT.kick = 0;
	if (WT.ready || loop_restricted())
		return; /* the requests wait for the group committing */
	TAILQ_FOREACH(j, &C.jobs, q) {
		n++;
		nw += is_write(j->rq.op);
	}
	if (!n)
		return;
	/* A worker holds the write gate: committing now would wait for its
	 * commit. Serve what needs no write and keep the writes (with the
	 * reads queued behind them) for the iteration its `written` wakes;
	 * the batch only grows meanwhile, and the loop never blocks. */
	int held = nw && gate_busy();
	gate_hold_writes(held);
	if (!held)
		TAILQ_FOREACH(j, &C.jobs, q)
			if (j->slot)
				control_batch_done(slot_client(j->slot)); /* see client_line */
	pings_first();
	struct job **w = calloc(nw + 1, sizeof *w);
	struct job **deferred = calloc(n + 1, sizeof *deferred);
	struct wres *res = calloc(nw + 1, sizeof *res);
	size_t iw = 0, nd = 0;
	int oom = !w || !deferred || !res;
	jobs_sort(oom, w, &iw, deferred, &nd);
	int handed = 0;
	if (!held && !oom && iw && group_async_ok(w, iw) && group_ready(w, res, iw, deferred, nd) == 0) {
		handed = 1; /* commit_start hands it over at the iteration's end */
	} else if (!held && !oom) {
		if (iw)
			group_commit(w, res, iw);
		for (size_t k = 0; k < nd; k++)
			read_one(deferred[k]);
	}
	jobs_answer(held);
	if (handed)
		return; /* w, res and deferred are the group's */
	free(w);
	free(deferred);
	free(res);
}

