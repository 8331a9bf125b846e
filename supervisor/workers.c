/* workers.c: worker processes, one per conversation that owes work (see workers.h). */
#include "supervisor/workers.h"
#include "common/convlock.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"
#include "ipc/ipc.h"
#include "supervisor/convtree.h"
#include "supervisor/gate.h"
#include "supervisor/lifecycle.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"
#include "supervisor/orphans.h"
#include "supervisor/spawn.h"

#include <bsd/sys/queue.h>
#include <bsd/unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EARLY_MAX 4       /* workers forked while one commit flushes */
#define ACTIVE_BATCH 512  /* conversations listed per read transaction at start */

/* A compaction asked of a worker: its asker is told through done, once. */
struct compact_req {
	struct compact_req *next;
	int64_t num;
	workers_compacted_fn *done;
	void *done_arg;
};

/* One per conversation the supervisor tracks: a live worker, one queued for
 * a slot, or one waiting out a restart backoff. */
struct worker {
	struct loop_watch lw;       /* on_worker_io */
	RB_ENTRY(worker) node;
	TAILQ_ENTRY(worker) qlink;  /* on the max_workers queue */
	LIST_ENTRY(worker) alink;   /* on W.ahead while lease_ahead is set */
	struct gate_member gm;      /* on the write gate's queue */
	uint64_t lease_ahead;       /* a lease taken in this iteration's commit, for spawn() */
	struct early {              /* forked while that commit flushes (commit_spawning) */
		struct spawn sp;    /* pid 0: none */
		uint64_t gen;
	} early;
	char conv[STORE_ID_MAX + 1];
	pid_t pid;                  /* 0: no process */
	int ipc;                    /* -1: none */
	struct lifecycle lc;        /* its state and what the table keeps (lifecycle.h) */
	uint64_t lease;             /* the live process's writer lease */
	int asked_kill;             /* agentd signalled it (kill op, delete, shutdown): not a crash */
	int reaped;                 /* in on_exit_status: its pid is no longer its own */
	pid_t child_pgid;           /* the model or tool running for it, 0: none */
	struct compact_req *compacts;
	char *partial;              /* the model's text streamed since its last commit (an interrupt keeps it) */
	int64_t orphan_stopped_at;  /* when an earlier agentd's worker holding conv was first seen stopped; 0: not */
	size_t partial_len, partial_cap;
};

CONVTREE_GENERATE(worker_tree, worker, node, conv)

static struct {
	const struct workers_env *env;
	const struct config *cfg;
	store *st;
	struct worker_tree tree;
	TAILQ_HEAD(, worker) queue;  /* waiting for a worker slot */
	LIST_HEAD(, worker) ahead;   /* with a lease taken ahead (lease_ahead()) */
	int nlive;                   /* workers with a process */
	int shutting_down;
	int64_t compact_seq;
	int spawn_err;               /* the last start's failure, for workers_wake's caller */
	/* What changed since workers_next_deadline() and workers_gc() last
	 * walked every worker: they walk again only then. */
	int wdl_stale, wgc_stale;
	int64_t wdl;                 /* the cached next deadline */
} W = { .tree = RB_INITIALIZER(&W.tree), .queue = TAILQ_HEAD_INITIALIZER(W.queue),
	.ahead = LIST_HEAD_INITIALIZER(W.ahead) };

static void worker_ipc(struct worker *w);
static void on_worker_io(struct loop_watch *lw, uint32_t events);
static int worker_stop(struct worker *w);
static void workers_changed(void);
static int worker_kill(struct worker *w, int sig);

static struct worker *worker_find(const char *conv)
{
	return worker_tree_find(&W.tree, conv);
}

static struct worker *worker_get(const char *conv)
{
	struct worker *w = worker_find(conv);
	if (w)
		return w;
	if (!(w = worker_tree_new(&W.tree, conv)))
		return NULL;
	w->lw.fn = on_worker_io;
	w->ipc = -1;
	w->early = (struct early){ SPAWN_NONE, 0 };
	lifecycle_init(&w->lc);
	workers_changed();
	return w;
}

/* A worker's state, process, waiters or compactions changed: its deadline
 * may have moved and its record may be free to go. */
static void workers_changed(void)
{
	W.wdl_stale = W.wgc_stale = 1;
}

static struct lifecycle_fx fx;

/* Every change of a worker's state goes through the table (lifecycle.c). */
static void worker_event(struct worker *w, int ev, const void *arg)
{
	lifecycle_event(&w->lc, w, &fx, ev, arg);
	workers_changed();
}

/* Free records that track nothing any more (no process, no waiters). */
void workers_gc(void)
{
	struct worker *w, *next;
	if (!W.wgc_stale)
		return;
	W.wgc_stale = 0;
	RB_FOREACH_SAFE(w, worker_tree, &W.tree, next) {
		if (w->pid || w->lc.state != W_NONE || w->compacts)
			continue;
		RB_REMOVE(worker_tree, &W.tree, w);
		free(w->partial);
		free(w);
	}
}

static void compacts_fail(struct worker *w, const char *why)
{
	struct compact_req *r;
	workers_changed();
	while ((r = w->compacts)) {
		w->compacts = r->next;
		r->done(r->done_arg, -ECHILD, why, strlen(why));
		free(r);
	}
}

/* ---- spawning -------------------------------------------------------- */

/* Whether a worker that outlived an earlier agentd still runs for conv
 * (common/convlock.h): it may be finishing a tool and committing its result
 * under its lease, which a new lease would fence off, running the tool again.
 * Asked only when agentd has no worker of its own for conv. */
static int orphan_running(const char *conv)
{
	static int fd = -1;
	if (fd < 0 && (fd = convlock_open(W.env->data_dir)) < 0) {
		log_error("cannot open %s/workers.lock: %s", W.env->data_dir, strerror(-fd));
		return 0; /* the new worker's own wait for the lock still keeps one at a time */
	}
	return convlock_held(fd, conv) > 0;
}

/* The lease for conv's next worker: the node's claim (server.c wires
 * nodes.c), or a new generation where no node is wired (unit tests). */
static int claim_lease(store_txn *t, const char *conv, uint64_t *gen)
{
	return W.env->hooks.claim ? W.env->hooks.claim(t, conv, gen) : store_lease_next(t, conv, gen);
}

static int take_lease(const char *conv, uint64_t *gen)
{
	store_txn *t;
	/* Half flushed (the meta page is not): a lease only has to outlive the
	 * processes, and after an OS crash every worker is gone anyway. A full
	 * flush pair here cost each revival a second pair after the send's own
	 * (docs/architecture.md, "Lease ahead"); no flush at all (MDB_NOSYNC) could let an OS
	 * crash leave the store damaged. */
	int e = gate_write_begin(STORE_WRITE_LAZY, &t);
	if (e)
		return e;
	/* A claim: the node's lease and the worker's generation. Another
	 * node's live lease is committed too: the notice that tells its owner. */
	e = claim_lease(t, conv, gen);
	if (e < 0) {
		store_txn_abort(t);
		return e;
	}
	int ce = store_txn_commit(t);
	return ce ? ce : e;
}

/* In the transaction that gives conv work (a send, a resolution, a fired
 * expiry) take the lease for the worker workers_wake() will spawn after
 * that commit, when it has none: one durable commit per revival, not two.
 * Good only for this iteration (leases_ahead_drop), and for the newest lease
 * of the conversation, which the last call in the transaction takes. */
int lease_ahead(store_txn *t, const char *conv)
{
	struct worker *w = worker_find(conv);
	if (w && (w->pid || w->lc.state != W_NONE))
		return 0;
	if (W.shutting_down || W.nlive >= W.cfg->max_workers || orphan_running(conv) || (!w && !(w = worker_get(conv))))
		return 0;
	uint64_t gen;
	int e = claim_lease(t, conv, &gen);
	if (e)
		return e == STORE_E_NOTFOUND || e == WORKERS_ELSEWHERE ? 0 : e;
	if (!w->lease_ahead)
		LIST_INSERT_HEAD(&W.ahead, w, alink);
	w->lease_ahead = gen;
	return 0;
}

/* After the commit's work is handed out, or when it was aborted. */
void leases_ahead_drop(void)
{
	struct worker *w;
	while ((w = LIST_FIRST(&W.ahead))) {
		LIST_REMOVE(w, alink);
		w->lease_ahead = 0;
	}
}

/* fork+exec agentd-worker for w with lease gen, without waiting for the
 * exec: w->early holds the child until spawn_finish. Returns 0 or
 * spawn_start's -errno (logged). */
static int spawn_fork(struct worker *w, uint64_t gen)
{
	char lease[24];
	snprintf(lease, sizeof lease, "%llu", (unsigned long long)gen);
	char *argv[32];
	int a = 0;
	char conns[16];
	argv[a++] = (char *)W.env->worker_path; /* execv takes char *const[]; it writes none */
	if (W.cfg->store) {
		/* The target is in the environment (AGENTD_STORE, set by main):
		 * a command line is anyone's to read. */
		snprintf(conns, sizeof conns, "%d", W.cfg->store_connections);
		argv[a++] = "--store-env";
		argv[a++] = "--run-dir";
		argv[a++] = (char *)W.env->data_dir;
		argv[a++] = "--connections";
		argv[a++] = conns;
	} else {
		argv[a++] = "--data";
		argv[a++] = (char *)W.env->data_dir;
	}
	argv[a++] = "--conversation";
	argv[a++] = w->conv;
	argv[a++] = "--lease";
	argv[a++] = lease;
	argv[a++] = "--ipc-fd";
	argv[a++] = "3";
	argv[a++] = "--sync";
	argv[a++] = W.cfg->sync == STORE_SYNC_NONE ? "none" : "full";
	if (W.env->config_path) {
		argv[a++] = "--config";
		argv[a++] = (char *)W.env->config_path;
	}
	argv[a++] = "--hide";
	argv[a++] = (char *)W.env->sock_path;
	if (W.env->config_source) {
		argv[a++] = "--hide";
		argv[a++] = (char *)W.env->config_source;
	}
	if (W.cfg->audit)
		argv[a++] = "--audit";
	argv[a++] = "--log-level";
	argv[a++] = W.cfg->log_level == LOG_DEBUG ? "debug" : W.cfg->log_level == LOG_WARN ? "warn" :
		    W.cfg->log_level == LOG_ERROR ? "error" : "info";
	argv[a] = NULL;

	int e = spawn_start(argv, &w->early.sp);
	if (e) {
		log_error("%s: cannot start a worker: %s", w->conv, strerror(-e));
		return e;
	}
	w->early.gen = gen;
	return 0;
}

/* Wait for w->early's exec and make it w's live worker (not yet told go).
 * Returns 0, or the exec's -errno (logged, child reaped). */
static int spawn_finish(struct worker *w)
{
	struct early sp = w->early;
	w->early = (struct early){ SPAWN_NONE, 0 };
	int e = spawn_exec_wait(&sp.sp);
	if (e) {
		log_error("%s: cannot run %s: %s", w->conv, W.env->worker_path, strerror(-e));
		return e;
	}
	w->pid = sp.sp.pid;
	w->asked_kill = 0;
	w->ipc = sp.sp.ipc;
	w->lease = sp.gen;
	worker_event(w, E_SPAWNED, NULL);
	if (loop_add(w->ipc, EPOLLIN, &w->lw) < 0)
		log_error("%s: epoll_ctl: %s", w->conv, strerror(errno));
	W.nlive++;
	log_debug("%s: worker %d started (lease %llu)", w->conv, (int)sp.sp.pid, (unsigned long long)sp.gen);
	return 0;
}

/* Tell a started worker to read the log (ipc.h: go), then what it was
 * asked before it started. */
static void spawn_go(struct worker *w)
{
	struct ipc_msg m = { .type = IPC_GO };
	ipc_send(w->ipc, &m);
	for (struct compact_req *r = w->compacts; r; r = r->next) {
		struct ipc_msg c = { .type = IPC_COMPACT, .num = r->num };
		ipc_send(w->ipc, &c);
	}
}

/* The earlier agentd's worker that keeps w's conversation waiting: one
 * stopped for ORPHAN_STOPPED_MAX_MS is killed (its lock goes with it, and
 * the lease the next worker takes fences off anything it would still
 * write); a running one is waited for, as long as its tool runs. */
static void orphan_bound(struct worker *w)
{
	pid_t pid;
	int stopped;
	int64_t now = loop_now_ms();
	if (orphan_find(W.env->data_dir, w->conv, now, &pid, &stopped) != 1 || !stopped) {
		w->orphan_stopped_at = 0;
		return;
	}
	if (!w->orphan_stopped_at) {
		w->orphan_stopped_at = now;
		log_warn("%s: worker %d of an earlier agentd holds it and is stopped: killed unless it goes on within %d s",
			 w->conv, (int)pid, ORPHAN_STOPPED_MAX_MS / 1000);
	} else if (now - w->orphan_stopped_at >= ORPHAN_STOPPED_MAX_MS) {
		log_warn("%s: worker %d of an earlier agentd stayed stopped for %lld ms holding it: killed", w->conv,
			 (int)pid, (long long)(now - w->orphan_stopped_at));
		kill(pid, SIGKILL);
		w->orphan_stopped_at = 0;
	}
}

/* An enum spawn_outcome (SPAWN_WAIT: orphan_running); or, when it could not
 * start, the lease's store error or the fork's or exec's -errno (also kept
 * in W.spawn_err for workers_wake). */
static int spawn(struct worker *w)
{
	uint64_t gen = w->lease_ahead;
	int e = 0;
	if (gen) {
		LIST_REMOVE(w, alink);
		w->lease_ahead = 0;
	} else {
		if (orphan_running(w->conv)) {
			orphan_bound(w);
			log_debug("%s: a worker of an earlier agentd still runs for it: starting once it exits", w->conv);
			worker_event(w, E_SPAWN_WAIT, NULL);
			return SPAWN_WAIT;
		}
		e = take_lease(w->conv, &gen);
	}
	if (e) {
		if (e == STORE_E_NOTFOUND || e == WORKERS_ELSEWHERE)
			return SPAWN_GONE; /* deleted meanwhile, or another node runs it */
		log_error("%s: cannot take a writer lease: %s", w->conv, store_strerror(e));
		return W.spawn_err = e;
	}
	if ((e = spawn_fork(w, gen)) || (e = spawn_finish(w))) {
		W.spawn_err = e;
		worker_event(w, E_SPAWN_FAILED, NULL);
		return e;
	}
	spawn_go(w);
	return SPAWN_STARTED;
}

/* Commit t, which took leases ahead (lease_ahead), starting those workers
 * while it flushes: the worker's exec, linking and opening of the store
 * overlap the commit's disk flush instead of following it, and it reads the
 * log only when told go, after the commit. A commit that fails kills them
 * before they have read anything. At most EARLY_MAX, within max_workers, so
 * a commit reviving many conversations is not held up by their forks; the
 * others are started by workers_wake() after the commit, as before. */
int commit_spawning(store_txn *t)
{
	struct worker *w;
	int n = 0;
	LIST_FOREACH(w, &W.ahead, alink) {
		if (w->pid)
			continue;
		if (W.nlive + n >= W.cfg->max_workers || n >= EARLY_MAX)
			break;
		if (spawn_fork(w, w->lease_ahead) == 0)
			n++;
	}
	int e = store_txn_commit(t);
	int killed = 0;
	LIST_FOREACH(w, &W.ahead, alink) {
		if (!w->early.sp.pid)
			continue;
		if (e) {
			spawn_abort(&w->early.sp);
			killed = 1;
			continue;
		}
		/* It stays on W.ahead for this iteration: workers_wake knows
		 * by its lease that it reads the log after this commit. */
		if (spawn_finish(w)) {
			worker_event(w, E_SPAWN_FAILED, NULL);
			continue;
		}
		spawn_go(w);
	}
	if (killed) {
		/* One may have been killed holding a reader slot. */
		int cleared = 0;
		store_reader_check(W.st, &cleared);
	}
	return e;
}

/* Tell a live worker new events exist; it answers woken before it re-reads
 * the log. 0, or ipc_send's -errno when unsent (a full or closed socket). */
static int wake_send(struct worker *w)
{
	struct ipc_msg m = { .type = IPC_WAKE };
	int e = ipc_send(w->ipc, &m);
	if (e < 0)
		return e;
	metrics_add(M_WAKES, 1);
	return 0;
}

/* A conversation was queued at max_workers: a worker with nothing to do
 * (idle, or waiting for a person, who may take hours) gives its slot, one
 * per conversation queued beyond those already giving theirs. */
static void yield_slot(void)
{
	struct worker *w, *pick = NULL;
	int queued = 0, yielding = 0;
	TAILQ_FOREACH(w, &W.queue, qlink)
		queued++;
	RB_FOREACH(w, worker_tree, &W.tree) {
		if (w->pid && w->lc.state == W_EVICTING)
			yielding++;
		else if (w->pid && (w->lc.state == W_IDLE || w->lc.state == W_AWAITING) && !w->lc.wake_pending &&
			 !w->lc.wake_sent && (!pick || w->lc.since < pick->lc.since))
			pick = w; /* the one idle longest */
	}
	if (pick && yielding < queued)
		worker_event(pick, E_EVICT, NULL);
}

/* Its conversation is being deleted (ops.c, in the delete's transaction):
 * kill its worker, and take it off the queue or out of backoff, so nothing
 * starts for it. */
static void worker_deleted(struct worker *w)
{
	if (w->lease_ahead) {
		/* A send in the same transaction took a lease for a worker
		 * this commit would start: it would find nothing to read. */
		LIST_REMOVE(w, alink);
		w->lease_ahead = 0;
	}
	w->lc.ncrash = 0;
	worker_event(w, E_DELETE, NULL);
}

int workers_wake(const char *conv)
{
	struct worker *w = worker_get(conv);
	if (!w)
		return -ENOMEM;
	int was = w->lc.state;
	W.spawn_err = 0;
	worker_event(w, E_WORK, NULL);
	/* Could not start (exec or fork failure): it backs off as a crash would. */
	if (was == W_NONE && w->lc.state == W_BACKOFF)
		return W.spawn_err ? W.spawn_err : -EAGAIN;
	return 0;
}

static void start_queued(void)
{
	struct worker *w;
	while (!W.shutting_down && W.nlive < W.cfg->max_workers && (w = TAILQ_FIRST(&W.queue))) {
		TAILQ_REMOVE(&W.queue, w, qlink);
		worker_event(w, E_SLOT, NULL);
	}
}

/* ---- exits ----------------------------------------------------------- */

static int conv_status(const char *conv)
{
	store_txn *t;
	struct store_conv c;
	int st = -1;
	if (store_txn_begin(W.st, STORE_READ, &t) == 0) {
		if (store_conv_get(t, conv, &c) == 0)
			st = c.status;
		store_txn_abort(t);
	}
	return st;
}

/* Too many crashes, or a full store: log an `error` event (msg) so the
 * conversation owes nothing until its next user_msg, and stop restarting
 * it. */
static void give_up(void *owner, int crashes, const char *msg)
{
	struct worker *w = owner;
	store_txn *t;
	uint64_t seq;
	log_error("%s: %s", w->conv, msg);
	if (gate_write_begin(STORE_WRITE, &t))
		return;
	int e = conv_give_up(t, w->conv, msg, strlen(msg), crashes, &seq);
	e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
	if (e)
		log_error("%s: cannot record the error event: %s", w->conv, store_strerror(e));
	else
		W.env->hooks.committed(w->conv);
}

/* Its last words, then what a dead process leaves behind. */
static void exit_cleanup(struct worker *w)
{
	/* What it said just before it exited (a compaction's answer, its last
	 * commit's seq) may still be unread: SIGCHLD can be handled first. */
	w->reaped = 1;
	if (w->ipc >= 0)
		worker_ipc(w);
	w->reaped = 0;
	if (w->ipc >= 0) {
		loop_del(w->ipc);
		close(w->ipc);
		w->ipc = -1;
	}
	/* A model or tool still running for a dead worker would go on unseen
	 * (its pdeath signal reaches only itself, not what it forked): kill
	 * its whole process group. Only a group the worker announced, and
	 * announced as still running. */
	if (w->child_pgid > 1) {
		kill(-w->child_pgid, SIGKILL);
		w->child_pgid = 0;
	}
	w->pid = 0;
	W.nlive--;
	gate_drop(&w->gm);
	/* It may have committed and died before saying so (`written`): its
	 * events and any deadline it scheduled would wait for the next commit
	 * of someone else. Watchers and long-polls read the store; the timer
	 * is armed from it. */
	W.env->hooks.committed(w->conv);
	W.env->hooks.rearm_expiry();
}

static void on_exit_status(struct worker *w, int status)
{
	int clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	int deleting = w->lc.state == W_DELETING || w->lc.state == W_RECREATING;
	/* Died on its own (not told to by agentd, an operator's kill op, a
	 * delete or the shutdown): worth a warning, and a crash to count
	 * even when it owed nothing (an OOM kill of an idle worker). */
	struct lifecycle_exit x = {
		.clean = clean,
		.unasked = !clean && !w->asked_kill && !deleting && !W.shutting_down,
		.store_full = WIFEXITED(status) && WEXITSTATUS(status) == IPC_EXIT_FULL,
		.compacts = w->compacts && clean && !deleting && !W.shutting_down,
	};
	if (WIFSIGNALED(status))
		log_msg(x.unasked ? LOG_WARN : LOG_INFO, "%s: worker %d killed by signal %d", w->conv, (int)w->pid,
			WTERMSIG(status));
	else if (!clean && deleting && WEXITSTATUS(status) == IPC_EXIT_GONE)
		log_info("%s: worker %d exited: its conversation was deleted", w->conv, (int)w->pid);
	else if (!clean && WEXITSTATUS(status) == IPC_EXIT_FLUSH)
		log_error("%s: worker %d exited: a flush of the store failed", w->conv, (int)w->pid);
	else if (!clean)
		log_warn("%s: worker %d exited with status %d", w->conv, (int)w->pid, WEXITSTATUS(status));
	else
		log_debug("%s: worker %d exited", w->conv, (int)w->pid);
	exit_cleanup(w);
	if (WIFEXITED(status) && WEXITSTATUS(status) == IPC_EXIT_FLUSH && W.env->hooks.flush_failed)
		W.env->hooks.flush_failed(w->conv);
	/* Compactions asked of it are answered by the next worker when one
	 * starts at once (lifecycle.c), else they fail now. */
	if (!x.compacts)
		compacts_fail(w, "the worker exited before compacting");
	worker_event(w, E_EXIT, &x);
	/* Done and owing nothing: its lease goes, so a node does not renew
	 * every conversation it ever ran, and the next send's node runs it. */
	if (w->lc.state == W_NONE && !w->pid && !W.shutting_down && W.env->hooks.released)
		W.env->hooks.released(w->conv, w->lease);
}

void workers_reap(void)
{
	int status;
	pid_t pid;
	int reaped = 0;
	/* Signals coalesce: reap until nothing is left. */
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct worker *w;
		reaped++;
		RB_FOREACH(w, worker_tree, &W.tree)
			if (w->pid == pid)
				break;
		if (w)
			on_exit_status(w, status);
	}
	if (reaped) {
		/* A worker killed inside a read transaction leaves its reader
		 * slot taken: clear it, or freed pages are never reused. */
		int cleared = 0;
		store_reader_check(W.st, &cleared);
		if (cleared)
			log_info("cleared %d stale reader slot(s)", cleared);
		start_queued();
	}
}

/* ---- IPC ------------------------------------------------------------- */

static void on_compacted(struct worker *w, const struct ipc_msg *m)
{
	struct compact_req **pp = &w->compacts, *r;
	while ((r = *pp) && r->num != m->num)
		pp = &r->next;
	if (!r)
		return;
	*pp = r->next;
	workers_changed();
	r->done(r->done_arg, m->ok ? 0 : -EIO, m->text ? m->text : "", m->ok ? 0 : m->text_len);
	free(r);
}

/* The worker's IPC socket closed (it is exiting) or sent garbage (rc < 0):
 * stop listening; SIGCHLD does the rest. */
static void worker_ipc_close(struct worker *w, int rc)
{
	if (rc < 0 && rc != -ECONNRESET) {
		log_error("%s: bad IPC message from worker %d: %s: killing it", w->conv, (int)w->pid, strerror(-rc));
		worker_kill(w, SIGKILL);
	}
	loop_del(w->ipc);
	close(w->ipc);
	w->ipc = -1;
	gate_drop(&w->gm);
}

static void on_state(struct worker *w, const struct ipc_msg *m)
{
	if (m->text_len == 4 && !memcmp(m->text, "idle", 4))
		worker_event(w, E_IDLE, NULL);
	else if (m->text_len == 14 && !memcmp(m->text, "awaiting_input", 14))
		worker_event(w, E_AWAITING, NULL);
	else
		worker_event(w, E_RUNNING, NULL);
}

/* A model call ended: its attempts, for the metrics. */
static void on_model(const struct ipc_msg *m)
{
	if (m->num <= 0 || m->num > 1000)
		return;
	metrics_add(M_MODEL_CALLS, 1);
	metrics_add(M_MODEL_ATTEMPTS, (uint64_t)m->num);
	metrics_add(M_MODEL_ATTEMPT_FAILURES, (uint64_t)m->num - (m->ok ? 1 : 0));
	if (!m->ok)
		metrics_add(M_MODEL_CALL_FAILURES, 1);
}

/* Kept up to WORKERS_PARTIAL_MAX bytes, the buffer grown as it fills; past
 * them (or out of memory) the rest is left out: a preview, as deltas are. */
static void partial_add(struct worker *w, const char *text, size_t len)
{
	size_t cap = w->partial_cap ? w->partial_cap : 1024;
	while (cap < WORKERS_PARTIAL_MAX && cap - w->partial_len < len)
		cap *= 2;
	char *p = cap != w->partial_cap ? realloc(w->partial, cap) : w->partial;
	if (!p)
		return;
	w->partial = p;
	w->partial_cap = cap;
	if (len > cap - w->partial_len)
		len = cap - w->partial_len;
	memcpy(w->partial + w->partial_len, text, len);
	w->partial_len += len;
}

const char *workers_partial(const char *conv, size_t *len)
{
	struct worker *w = worker_find(conv);
	*len = w && w->partial ? w->partial_len : 0;
	return *len ? w->partial : NULL;
}

static void on_written(struct worker *w)
{
	w->partial_len = 0; /* a run's start, or a turn's end: what streamed before is committed or gone */
	gate_release(&w->gm);
	/* Also a commit without an event: a run started, which watchers
	 * that asked for runs stream (waiters.c). */
	W.env->hooks.committed(w->conv);
	/* The commit may have scheduled an expiry, also one that appended
	 * no event (seq 0: a deadline added to a pending call by a revived
	 * worker). */
	W.env->hooks.rearm_expiry();
}

static void on_woken(struct worker *w)
{
	/* Events committed since the last wake may be newer than the log
	 * the worker is about to read: wake it again. */
	if (w->lc.wake_missed) {
		if (wake_send(w))
			w->lc.wake_pending = 1; /* it is woken when it restarts */
		w->lc.wake_missed = 0;
	} else {
		w->lc.wake_sent = 0;
	}
}

/* One case per message a worker sends, each a lifecycle event or a hook up:
 * the switch is the IPC protocol's table, read in one place. */
static void worker_msg(struct worker *w, const struct ipc_msg *m)
{
	switch (m->type) {
	case IPC_READY:
		worker_event(w, E_READY, NULL);
		break;
	case IPC_STATE:
		on_state(w, m);
		break;
	case IPC_DELTA:
		partial_add(w, m->text, m->text_len);
		W.env->hooks.delta(w->conv, m->text, m->text_len);
		break;
	case IPC_MODEL:
		on_model(m);
		break;
	case IPC_COMPACTED:
		on_compacted(w, m);
		break;
	case IPC_CHILD:
		w->child_pgid = m->num > 1 ? (pid_t)m->num : 0;
		break;
	case IPC_WRITE:
		if (gate_ask(&w->gm)) {
			log_error("%s: worker %d asked for the write gate twice: killing it", w->conv, (int)w->pid);
			worker_kill(w, SIGKILL);
		}
		break;
	case IPC_WRITTEN:
		on_written(w);
		break;
	case IPC_WOKEN:
		on_woken(w);
		break;
	default:
		log_warn("%s: unexpected IPC message '%s' from the worker", w->conv,
			 ipc_type_name(m->type) ? ipc_type_name(m->type) : "?");
	}
}

/* At most 256 messages a wake-up, so that one chatty worker cannot keep
 * the loop from the others. */
static void worker_ipc(struct worker *w)
{
	static char buf[IPC_MAX];
	for (int i = 0; w->ipc >= 0 && i < 256; i++) {
		struct ipc_msg m;
		int rc = ipc_recv(w->ipc, &m, buf);
		if (rc == -EAGAIN)
			return;
		if (rc <= 0) {
			worker_ipc_close(w, rc);
			return;
		}
		/* Drained after its exit: only what it reported counts (answers,
		 * commits, its child), not what it asked for. */
		if (w->reaped && (m.type == IPC_WRITE || m.type == IPC_STATE || m.type == IPC_READY))
			continue;
		worker_msg(w, &m);
	}
}

static void on_worker_io(struct loop_watch *lw, uint32_t events)
{
	worker_ipc(container_of(lw, struct worker, lw));
}

static int worker_kill(struct worker *w, int sig)
{
	/* pid is cleared when reaped (and marked reaped while its last words
	 * are read), so this never signals a recycled pid. */
	if (!w->pid || w->reaped)
		return -1;
	if (kill(w->pid, sig) < 0)
		return -1;
	w->asked_kill = 1;
	return 0;
}

static int worker_stop(struct worker *w)
{
	if (!w->pid)
		return -1;
	worker_event(w, E_STOP, NULL);
	return 0;
}

/* Ask the process to stop; SIGTERM when it cannot be told. */
static void stop_send(struct worker *w)
{
	struct ipc_msg m = { .type = IPC_STOP };
	if (w->ipc < 0 || ipc_send(w->ipc, &m) < 0)
		worker_kill(w, SIGTERM);
}

static int worker_compact(struct worker *w, workers_compacted_fn *done, void *arg)
{
	struct compact_req *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->num = ++W.compact_seq;
	r->done = done;
	r->done_arg = arg;
	r->next = w->compacts;
	w->compacts = r;
	if (w->pid && w->ipc >= 0) {
		/* A worker whose socket is closed is exiting (told to stop a
		 * moment ago: on PostgreSQL a store round trip lies between a
		 * pipelined stop and compact). The request stays queued: the
		 * exit hands it to the next worker, or fails it if none starts
		 * (on_exit_status), so it is answered either way. */
		struct ipc_msg m = { .type = IPC_COMPACT, .num = r->num };
		int e = ipc_send(w->ipc, &m);
		if (e == -EPIPE || e == -ECONNRESET) {
			log_debug("%s: the worker is exiting: its compaction waits for the next", w->conv);
		} else if (e < 0) {
			/* Alive but not reading (its socket is full): refused. */
			w->compacts = r->next;
			free(r);
			workers_changed();
			return e;
		}
	}
	return 0;
}

/* ---- timers ---------------------------------------------------------- */

static int64_t evict_at(const struct worker *w)
{
	if (!w->pid || (w->lc.state != W_IDLE && w->lc.state != W_AWAITING))
		return 0;
	return w->lc.since + W.cfg->idle_timeout_ms;
}

void workers_tick(int64_t now)
{
	struct worker *w;
	RB_FOREACH(w, worker_tree, &W.tree) {
		if (w->lc.state == W_BACKOFF && now >= w->lc.restart_at)
			worker_event(w, E_TIMER, NULL);
		int64_t t = evict_at(w);
		if (t && now >= t) {
			log_debug("%s: worker %d idle for %lld ms: stopping it", w->conv, (int)w->pid,
				  (long long)(now - w->lc.since));
			worker_event(w, E_EVICT, NULL);
		}
	}
}

int64_t workers_next_deadline(void)
{
	if (!W.wdl_stale)
		return W.wdl;
	int64_t d = 0;
	struct worker *w;
	RB_FOREACH(w, worker_tree, &W.tree) {
		int64_t t = w->lc.state == W_BACKOFF ? w->lc.restart_at : evict_at(w);
		if (t && (!d || t < d))
			d = t;
	}
	W.wdl_stale = 0;
	return W.wdl = d;
}

void workers_stop_all(void)
{
	W.shutting_down = 1;
	struct worker *w, *next;
	TAILQ_FOREACH_SAFE(w, &W.queue, qlink, next)
		worker_event(w, E_SHUTDOWN, NULL);
	RB_FOREACH(w, worker_tree, &W.tree)
		worker_event(w, E_SHUTDOWN, NULL);
}

void workers_kill_all(void)
{
	struct worker *w;
	RB_FOREACH(w, worker_tree, &W.tree)
		if (w->pid)
			worker_kill(w, SIGKILL);
}

/* ---- start-up ------------------------------------------------------ */

struct active_ctx {
	char (*ids)[STORE_ID_MAX + 1];
	size_t n;
};

static int active_one(void *arg, const struct store_conv *c)
{
	struct active_ctx *a = arg;
	if (a->n == ACTIVE_BATCH)
		return 1;
	memcpy(a->ids[a->n], c->id.ptr, c->id.len);
	a->ids[a->n++][c->id.len] = 0;
	return 0;
}

void workers_start_active(void)
{
	static char ids[ACTIVE_BATCH][STORE_ID_MAX + 1];
	char after[STORE_ID_MAX + 1] = "";
	int n = 0;
	for (;;) {
		struct active_ctx c = { ids, 0 };
		store_txn *t;
		if (store_txn_begin(W.st, STORE_READ, &t))
			return;
		int e = store_conv_list(t, STORE_ACTIVE, after[0] ? after : NULL, 0, active_one, &c, NULL);
		store_txn_abort(t);
		if (e && e != 1)
			log_error("listing active conversations: %s%s", store_strerror(e),
				  e == STORE_E_CORRUPT ? " (a record passed over: see agentd check)" : "");
		/* Counted: those that got a worker here (or a place in the
		 * queue); one another live node owns stays with it, told. */
		for (size_t i = 0; i < c.n; i++) {
			workers_wake(ids[i]);
			struct worker *w = worker_find(ids[i]);
			n += w && w->lc.state != W_NONE;
		}
		if (c.n < ACTIVE_BATCH)
			break;
		snprintf(after, sizeof after, "%s", ids[c.n - 1]);
	}
	if (n)
		log_info("revived %d conversation(s) that were mid-turn", n);
}

/* ---- by conversation: what the ops ask ---------------------------------- */

int workers_running(const char *conv)
{
	struct worker *w = worker_find(conv);
	return w && w->pid;
}

int workers_stop_unheld(int (*held)(void *arg, const char *conv, uint64_t lease), void *arg)
{
	struct worker *w;
	int n = 0;
	RB_FOREACH(w, worker_tree, &W.tree) {
		if (!w->pid || w->asked_kill || held(arg, w->conv, w->lease))
			continue;
		log_warn("%s: its lease moved to another node: worker %d stopped", w->conv, (int)w->pid);
		if (worker_kill(w, SIGKILL) == 0)
			n++;
	}
	return n;
}

int workers_kill(const char *conv, int sig)
{
	struct worker *w = worker_find(conv);
	if (!w || !w->pid)
		return -ESRCH;
	if (worker_kill(w, sig))
		return -errno;
	/* An operator's kill: the table does not count its exit as a crash. */
	worker_event(w, E_KILL, NULL);
	return 0;
}

int workers_fence(store_txn *t, const char *conv)
{
	struct worker *w = worker_find(conv);
	uint64_t gen;
	if (w && w->lease_ahead)
		return 0;
	int e = store_lease_next(t, conv, &gen);
	return e == STORE_E_NOTFOUND ? 0 : e;
}

int workers_cancel(const char *conv)
{
	struct worker *w = worker_find(conv);
	if (!w || !w->pid || w->reaped)
		return -ESRCH;
	/* The model or tool first: its pdeath signal reaches only itself, not
	 * what it forked. Only a group the worker announced as running. */
	if (w->child_pgid > 1) {
		kill(-w->child_pgid, SIGKILL);
		w->child_pgid = 0;
	}
	return workers_kill(conv, SIGKILL);
}

int workers_stop(const char *conv)
{
	struct worker *w = worker_find(conv);
	return w && w->pid && worker_stop(w) == 0 ? 0 : -ESRCH;
}

int workers_compact(const char *conv, workers_compacted_fn *done, void *arg)
{
	struct worker *w = worker_find(conv);
	if (!done)
		return -EINVAL;
	return w ? worker_compact(w, done, arg) : -ENOENT;
}

void workers_deleted(const char *conv)
{
	struct worker *w = worker_find(conv);
	if (w)
		worker_deleted(w);
}

json_t *workers_conv_json(const char *conv)
{
	struct worker *w = worker_find(conv);
	return w && w->pid ? json_pack("{sIss}", "pid", (json_int_t)w->pid, "state", lifecycle_state_name(w->lc.state))
			   : json_null();
}

json_t *workers_json(void)
{
	json_t *a = json_array();
	struct worker *w;
	int64_t now = loop_now_ms();
	RB_FOREACH(w, worker_tree, &W.tree) {
		if (!w->pid && w->lc.state != W_QUEUED && w->lc.state != W_BACKOFF)
			continue;
		/* A worker left out would read as not running: fail the list. */
		if (json_array_append_new(a, json_pack("{sssosssI}", "conversation", w->conv, "pid",
						       w->pid ? json_integer(w->pid) : json_null(), "state",
						       lifecycle_state_name(w->lc.state), "since_ms",
						       (json_int_t)(now - w->lc.since)))) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

int workers_live(void)
{
	return W.nlive;
}

/* ---- the gate's view of a worker (gate.h) -------------------------------- */

static int gm_grant(struct gate_member *m)
{
	struct ipc_msg msg = { .type = IPC_GRANT };
	return ipc_send(container_of(m, struct worker, gm)->ipc, &msg);
}

static void gm_refused(struct gate_member *m, int err)
{
	struct worker *w = container_of(m, struct worker, gm);
	log_error("%s: cannot grant worker %d its write: %s: killing it", w->conv, (int)w->pid, strerror(-err));
	worker_kill(w, SIGKILL);
}

static void gm_drain(struct gate_member *m)
{
	worker_ipc(container_of(m, struct worker, gm));
}

static int gm_fd(struct gate_member *m)
{
	return container_of(m, struct worker, gm)->ipc;
}

static const char *gm_name(struct gate_member *m)
{
	return container_of(m, struct worker, gm)->conv;
}

static pid_t gm_pid(struct gate_member *m)
{
	return container_of(m, struct worker, gm)->pid;
}

static const struct gate_hooks gate_hooks = { gm_grant, gm_refused, gm_drain, gm_fd, gm_name, gm_pid, NULL };

void workers_init(const struct workers_env *env)
{
	W.env = env;
	W.cfg = env->cfg;
	W.st = env->st;
	fx.restart_limit = env->cfg->restart_limit;
	fx.restart_window_ms = env->cfg->restart_window_ms;
	gate_init(env->st, &gate_hooks);
}

/* ---- the lifecycle's effects (lifecycle.h) ----------------------------- */

static int fx_shutting_down(void)
{
	return W.shutting_down;
}

static int fx_slot_free(void)
{
	return W.nlive < W.cfg->max_workers;
}

static int fx_queue_empty(void)
{
	return TAILQ_EMPTY(&W.queue);
}

static void fx_queue_push(void *o)
{
	TAILQ_INSERT_TAIL(&W.queue, (struct worker *)o, qlink);
}

static void fx_queue_remove(void *o)
{
	TAILQ_REMOVE(&W.queue, (struct worker *)o, qlink);
}

static int fx_spawn(void *o)
{
	return spawn(o);
}

static int fx_started_by_commit(void *o)
{
	struct worker *w = o;
	return w->lease_ahead && w->lease_ahead == w->lease;
}

static int fx_wake(void *o)
{
	return wake_send(o);
}

static void fx_stop(void *o)
{
	stop_send(o);
}

static void fx_kill(void *o)
{
	worker_kill(o, SIGKILL);
}

static int fx_conv_active(void *o)
{
	return conv_status(((struct worker *)o)->conv) == STORE_ACTIVE;
}

static void fx_count(int metric)
{
	metrics_add((enum metric)metric, 1);
}

static void fx_rearm_expiry(void)
{
	W.env->hooks.rearm_expiry();
}

static const char *fx_name(void *o)
{
	return ((struct worker *)o)->conv;
}

static struct lifecycle_fx fx = {
	.now = loop_now_ms, .shutting_down = fx_shutting_down, .slot_free = fx_slot_free,
	.queue_empty = fx_queue_empty, .queue_push = fx_queue_push, .queue_remove = fx_queue_remove,
	.yield_slot = yield_slot, .spawn = fx_spawn, .started_by_commit = fx_started_by_commit, .wake = fx_wake,
	.stop = fx_stop, .kill = fx_kill, .rearm_expiry = fx_rearm_expiry, .conv_active = fx_conv_active,
	.count = fx_count, .give_up = give_up, .name = fx_name,
};
