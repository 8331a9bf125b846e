/*
 * workers.c: one worker process per conversation that owes work.
 *
 * ensure_started() is the one door: send, resolve and a fired expiry all go
 * through it. A worker that dies is reaped, the reader table is checked, and
 * if its conversation still owes work it is restarted after a backoff; after
 * restart_limit crashes within restart_window the conversation gets an
 * `error` event and is left alone until its next event. Idle workers are told
 * to stop after idle_timeout, so a conversation that owes nothing has no process.
 */
#include "supervisor/sup.h"
#include "conv/conv.h"
#include "supervisor/metrics.h"
#include "ipc/ipc.h"
#include "common/jsonmp.h"

#include <bsd/unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_BASE_MS 100
#define BACKOFF_MAX_MS 10000
#define EARLY_MAX 4       /* workers forked while one commit flushes */
#define GATE_HOLD_MS 1000 /* a grant unanswered this long is revoked */
#define EXPIRY_BATCH 512
#define EXPIRY_ROUNDS 4   /* batches of expiries one wake-up fires at most (unless full) */
#define EXPIRY_RETRY_MS 1000 /* after a failed attempt to fire expiries */

static void gate_drop(struct worker *w);

static int worker_cmp(struct worker *a, struct worker *b)
{
	return strcmp(a->conv, b->conv);
}

RB_GENERATE(worker_tree, worker, node, worker_cmp)

static const char *const wstate_names[] = {
	[W_NONE] = "none", [W_STARTING] = "starting", [W_RUNNING] = "running", [W_IDLE] = "idle",
	[W_AWAITING] = "awaiting_input", [W_STOPPING] = "stopping", [W_QUEUED] = "queued",
	[W_BACKOFF] = "backoff",
};

const char *wstate_name(int st)
{
	return st >= 0 && st <= W_BACKOFF ? wstate_names[st] : "unknown";
}

struct worker *worker_find(const char *conv)
{
	struct worker key;
	size_t n = strlen(conv);
	if (n > STORE_ID_MAX)
		return NULL;
	memcpy(key.conv, conv, n + 1);
	return RB_FIND(worker_tree, &S.workers, &key);
}

struct worker *worker_get(const char *conv)
{
	struct worker *w = worker_find(conv);
	if (w || strlen(conv) > STORE_ID_MAX)
		return w;
	w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->lw.fn = worker_on_io;
	w->ipc = -1;
	w->early = (struct early){ 0, -1, -1, 0 };
	w->state = W_NONE;
	memcpy(w->conv, conv, strlen(conv) + 1); /* a valid id: at most STORE_ID_MAX */
	LIST_INIT(&w->waiters);
	RB_INSERT(worker_tree, &S.workers, w);
	workers_changed();
	return w;
}

/* A worker's state, process, waiters or compactions changed: its deadline
 * may have moved and its record may be free to go. */
void workers_changed(void)
{
	S.wdl_stale = S.wgc_stale = 1;
}

static void set_state(struct worker *w, int st)
{
	w->state = st;
	w->since = loop_now_ms();
	workers_changed();
}

/* Free records that track nothing any more (no process, no waiters). */
void workers_gc(void)
{
	struct worker *w, *next;
	if (!S.wgc_stale)
		return;
	S.wgc_stale = 0;
	RB_FOREACH_SAFE(w, worker_tree, &S.workers, next) {
		if (w->pid || w->state != W_NONE || !LIST_EMPTY(&w->waiters) || w->compacts)
			continue;
		RB_REMOVE(worker_tree, &S.workers, w);
		free(w);
	}
}

static void compacts_fail(struct worker *w, const char *why)
{
	struct compact_req *r;
	workers_changed();
	while ((r = w->compacts)) {
		w->compacts = r->next;
		if (r->slot) {
			struct client *c = r->slot->c;
			slot_error(r->slot, r->id, PERR_INTERNAL, why);
			client_flush(c);
		}
		json_decref(r->id);
		free(r);
	}
}

/* ---- spawning -------------------------------------------------------- */

static int take_lease(const char *conv, uint64_t *gen)
{
	store_txn *t;
	/* Half flushed (the meta page is not): a lease only has to outlive the
	 * processes, and after an OS crash every worker is gone anyway. A full
	 * flush pair here cost each revival a second pair after the send's own
	 * (docs/architecture.md, "Lease ahead"); no flush at all (MDB_NOSYNC) could let an OS
	 * crash leave the store damaged. */
	int e = sup_write_begin(STORE_WRITE_LAZY, &t);
	if (e)
		return e;
	e = store_lease_next(t, conv, gen);
	if (e) {
		store_txn_abort(t);
		return e;
	}
	return store_txn_commit(t);
}

/* The child between fork and exec: only async-signal-safe calls. */
static void child_exec(int ipc, int errfd, char *const argv[])
{
	struct sigaction sa = { .sa_handler = SIG_DFL };
	sigset_t none;
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &sa, NULL); /* fails harmlessly for KILL, STOP and the RT ones glibc keeps */
	/* Put the two descriptors the worker keeps at 3 (IPC) and 4 (exec
	 * status, close-on-exec): first out of the way, then into place. */
	int hi_ipc = fcntl(ipc, F_DUPFD, 10);
	int hi_err = fcntl(errfd, F_DUPFD_CLOEXEC, 10);
	if (hi_ipc < 0 || hi_err < 0 || dup2(hi_ipc, 3) < 0 || dup3(hi_err, 4, O_CLOEXEC) < 0) {
		/* Out of descriptors (agentd at its limit): say so as an exec
		 * failure does, so agentd backs off and retries with the reason
		 * logged, instead of counting a crash of a worker that never ran. */
		int e = errno;
		ssize_t w = write(hi_err >= 0 ? hi_err : errfd, &e, sizeof e);
		(void)w;
		_exit(127);
	}
	closefrom(5);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execv(argv[0], argv);
	int e = errno;
	ssize_t n = write(4, &e, sizeof e);
	(void)n;
	_exit(127);
}

/* In the transaction that gives conv work (a send, a resolution, a fired
 * expiry) take the lease for the worker ensure_started() will spawn after
 * that commit, when it has none: one durable commit per revival, not two.
 * Good only for this iteration (leases_ahead_drop), and for the newest lease
 * of the conversation, which the last call in the transaction takes. */
int lease_ahead(store_txn *t, const char *conv)
{
	struct worker *w = worker_find(conv);
	if (w && (w->pid || w->state != W_NONE))
		return 0;
	if (S.shutting_down || S.nlive >= S.cfg->max_workers || (!w && !(w = worker_get(conv))))
		return 0;
	uint64_t gen;
	int e = store_lease_next(t, conv, &gen);
	if (e)
		return e == STORE_E_NOTFOUND ? 0 : e;
	if (!w->lease_ahead)
		LIST_INSERT_HEAD(&S.ahead, w, alink);
	w->lease_ahead = gen;
	return 0;
}

/* After the commit's work is handed out, or when it was aborted. */
void leases_ahead_drop(void)
{
	struct worker *w;
	while ((w = LIST_FIRST(&S.ahead))) {
		LIST_REMOVE(w, alink);
		w->lease_ahead = 0;
	}
}

/* fork+exec agentd-worker for w with lease gen, without waiting for the
 * exec: w->early holds the child until spawn_finish. Returns 0 or -1
 * (logged). */
static int spawn_fork(struct worker *w, uint64_t gen)
{
	int sv[2], ep[2];
	if (ipc_pair(sv) < 0) {
		log_error("%s: socketpair: %s", w->conv, strerror(errno));
		return -1;
	}
	if (pipe2(ep, O_CLOEXEC) < 0) {
		log_error("%s: pipe2: %s", w->conv, strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	char lease[24];
	snprintf(lease, sizeof lease, "%llu", (unsigned long long)gen);
	char *argv[20];
	int a = 0;
	argv[a++] = S.worker_path;
	argv[a++] = "--data";
	argv[a++] = S.data_dir;
	argv[a++] = "--conversation";
	argv[a++] = w->conv;
	argv[a++] = "--lease";
	argv[a++] = lease;
	argv[a++] = "--ipc-fd";
	argv[a++] = "3";
	argv[a++] = "--sync";
	argv[a++] = S.cfg->sync == STORE_SYNC_NONE ? "none" : "full";
	if (S.config_path) {
		argv[a++] = "--config";
		argv[a++] = S.config_path;
	}
	if (S.cfg->audit)
		argv[a++] = "--audit";
	argv[a++] = "--log-level";
	argv[a++] = S.cfg->log_level == LOG_DEBUG ? "debug" : S.cfg->log_level == LOG_WARN ? "warn" :
		    S.cfg->log_level == LOG_ERROR ? "error" : "info";
	argv[a] = NULL;

	/* Block every signal across fork so no handler-less signal hits the
	 * child before it resets dispositions (libuv does the same). */
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t pid = fork();
	if (pid == 0)
		child_exec(sv[1], ep[1], argv);
	int fork_errno = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(sv[1]);
	close(ep[1]);
	if (pid < 0) {
		log_error("%s: fork: %s", w->conv, strerror(fork_errno));
		close(sv[0]);
		close(ep[0]);
		return -1;
	}
	w->early = (struct early){ pid, sv[0], ep[0], gen };
	return 0;
}

/* Wait for w->early's exec and make it w's live worker (not yet told go).
 * Returns 0, or -1 when the exec failed (logged, child reaped). */
static int spawn_finish(struct worker *w)
{
	struct early sp = w->early;
	w->early = (struct early){ 0, -1, -1, 0 };
	/* Zero bytes: exec succeeded (the pipe closed on exec). This read
	 * waits only for the exec itself. */
	int child_errno = 0;
	ssize_t n;
	do
		n = read(sp.ep, &child_errno, sizeof child_errno);
	while (n < 0 && errno == EINTR);
	close(sp.ep);
	if (n > 0) {
		log_error("%s: cannot run %s: %s", w->conv, S.worker_path, strerror(child_errno));
		waitpid(sp.pid, NULL, 0);
		close(sp.ipc);
		return -1;
	}
	fcntl(sp.ipc, F_SETFL, O_NONBLOCK);
	w->pid = sp.pid;
	w->asked_kill = 0;
	w->ipc = sp.ipc;
	w->lease = sp.gen;
	w->stop_sent = 0;
	w->wake_pending = 0;
	w->wake_sent = w->wake_missed = 0;
	set_state(w, W_STARTING);
	if (loop_add(w->ipc, EPOLLIN, &w->lw) < 0)
		log_error("%s: epoll_ctl: %s", w->conv, strerror(errno));
	S.nlive++;
	metrics_add(M_SPAWNS, 1);
	log_debug("%s: worker %d started (lease %llu)", w->conv, (int)sp.pid, (unsigned long long)sp.gen);
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

static int spawn(struct worker *w)
{
	uint64_t gen = w->lease_ahead;
	int e = 0;
	if (gen) {
		LIST_REMOVE(w, alink);
		w->lease_ahead = 0;
	} else {
		e = take_lease(w->conv, &gen);
	}
	if (e) {
		if (e == STORE_E_NOTFOUND)
			return 1; /* deleted meanwhile: nothing to start */
		log_error("%s: cannot take a writer lease: %s", w->conv, store_strerror(e));
		return -1;
	}
	if (spawn_fork(w, gen) || spawn_finish(w))
		return -1;
	spawn_go(w);
	return 0;
}

/* Commit t, which took leases ahead (lease_ahead), starting those workers
 * while it flushes: the worker's exec, linking and opening of the store
 * overlap the commit's disk flush instead of following it, and it reads the
 * log only when told go, after the commit. A commit that fails kills them
 * before they have read anything. At most EARLY_MAX, within max_workers, so
 * a commit reviving many conversations is not held up by their forks; the
 * others are started by ensure_started() after the commit, as before. */
int commit_spawning(store_txn *t)
{
	struct worker *w;
	int n = 0;
	LIST_FOREACH(w, &S.ahead, alink) {
		if (w->pid)
			continue;
		if (S.nlive + n >= S.cfg->max_workers || n >= EARLY_MAX)
			break;
		if (spawn_fork(w, w->lease_ahead) == 0)
			n++;
	}
	int e = store_txn_commit(t);
	int killed = 0;
	LIST_FOREACH(w, &S.ahead, alink) {
		if (!w->early.pid)
			continue;
		if (e) {
			kill(w->early.pid, SIGKILL);
			waitpid(w->early.pid, NULL, 0);
			close(w->early.ipc);
			close(w->early.ep);
			w->early = (struct early){ 0, -1, -1, 0 };
			killed = 1;
			continue;
		}
		/* It stays on S.ahead for this iteration: ensure_started knows
		 * by its lease that it reads the log after this commit. */
		if (spawn_finish(w)) {
			/* As ensure_started does when spawn fails. */
			set_state(w, W_BACKOFF);
			w->restart_at = loop_now_ms() + BACKOFF_MAX_MS;
			continue;
		}
		spawn_go(w);
	}
	if (killed) {
		/* One may have been killed holding a reader slot. */
		int cleared = 0;
		store_reader_check(S.st, &cleared);
	}
	return e;
}

/* Tell a live worker new events exist; it answers woken before it re-reads
 * the log. Unsent (a full or closed socket): it is woken when it restarts. */
static void wake_send(struct worker *w)
{
	struct ipc_msg m = { .type = IPC_WAKE };
	if (ipc_send(w->ipc, &m) < 0) {
		w->wake_pending = 1;
		return;
	}
	w->wake_sent = 1;
	metrics_add(M_WAKES, 1);
}

/* A conversation was queued at max_workers: a worker with nothing to do
 * (idle, or waiting for a person, who may take hours) gives its slot, one
 * per conversation queued beyond those already giving theirs. */
static void yield_slot(void)
{
	struct worker *w, *pick = NULL;
	int queued = 0, yielding = 0;
	TAILQ_FOREACH(w, &S.queue, qlink)
		queued++;
	RB_FOREACH(w, worker_tree, &S.workers) {
		if (w->pid && w->state == W_STOPPING && w->stop_sent == 2)
			yielding++;
		else if (w->pid && (w->state == W_IDLE || w->state == W_AWAITING) && !w->wake_pending &&
			 !w->wake_sent && (!pick || w->since < pick->since))
			pick = w; /* the one idle longest */
	}
	if (pick && yielding < queued) {
		worker_stop(pick);
		pick->stop_sent = 2; /* not an operator's stop: see on_exit_status */
	}
}

/* Its conversation is being deleted (ops.c, in the delete's transaction):
 * kill its worker, and take it off the queue or out of backoff, so nothing
 * starts for it. */
void worker_deleted(struct worker *w)
{
	w->deleted = 1;
	w->recreated = 0;
	if (w->state == W_QUEUED) {
		TAILQ_REMOVE(&S.queue, w, qlink);
		set_state(w, W_NONE);
	} else if (w->state == W_BACKOFF) {
		set_state(w, W_NONE);
	}
	if (w->lease_ahead) {
		/* A send in the same transaction took a lease for a worker
		 * this commit would start: it would find nothing to read. */
		LIST_REMOVE(w, alink);
		w->lease_ahead = 0;
	}
	w->ncrash = 0;
	if (w->pid)
		worker_kill(w, SIGKILL);
}

int ensure_started(const char *conv)
{
	struct worker *w = worker_get(conv);
	if (!w)
		return -1;
	if (w->pid) {
		if (w->deleted) {
			/* Its worker is being killed for a delete, and the
			 * conversation exists again (created in the same
			 * iteration): a new worker starts once that one is
			 * reaped. */
			w->recreated = 1;
			return 0;
		}
		if (w->lease_ahead && w->lease_ahead == w->lease)
			return 0; /* started by this commit (commit_spawning): it reads the log after it */
		if (w->state == W_STOPPING) {
			w->wake_pending = 1; /* restarted when it exits */
		} else {
			if (w->wake_sent) {
				/* It has not re-read the log since the last wake:
				 * it will, and its woken says whether to wake it
				 * again. */
				w->wake_missed = 1;
				metrics_add(M_WAKES_COALESCED, 1);
			} else {
				wake_send(w);
			}
			if (!w->wake_pending && (w->state == W_IDLE || w->state == W_AWAITING))
				/* It has work now: an idle worker that has not yet
				 * read the wake must not be evicted as idle (its
				 * stop would cross the wake and swallow the turn). */
				set_state(w, W_RUNNING);
		}
		return 0;
	}
	w->deleted = 0;
	if (w->state == W_QUEUED || w->state == W_BACKOFF || S.shutting_down)
		return 0;
	if (S.nlive >= S.cfg->max_workers) {
		set_state(w, W_QUEUED);
		TAILQ_INSERT_TAIL(&S.queue, w, qlink);
		log_info("%s: %d workers live (max_workers): queued for a worker", conv, S.nlive);
		yield_slot();
		return 0;
	}
	int r = spawn(w);
	if (r >= 0)
		return 0; /* started, or its conversation is gone */
	/* Could not start (exec failure, fork failure): count it as a crash
	 * so a broken worker binary backs off instead of spinning. */
	set_state(w, W_BACKOFF);
	w->restart_at = loop_now_ms() + BACKOFF_MAX_MS;
	return -1;
}

static void start_queued(void)
{
	struct worker *w;
	while (!S.shutting_down && S.nlive < S.cfg->max_workers && (w = TAILQ_FIRST(&S.queue))) {
		TAILQ_REMOVE(&S.queue, w, qlink);
		set_state(w, W_NONE);
		ensure_started(w->conv);
	}
}

/* ---- exits ----------------------------------------------------------- */

static int conv_status(const char *conv)
{
	store_txn *t;
	struct store_conv c;
	int st = -1;
	if (store_txn_begin(S.st, STORE_READ, &t) == 0) {
		if (store_conv_get(t, conv, &c) == 0)
			st = c.status;
		store_txn_abort(t);
	}
	return st;
}

struct pend_ctx {
	char (*ids)[STORE_ID_MAX + 1];
	size_t n, cap;
};

static int pend_server(void *arg, const struct store_tool_call *tc)
{
	struct pend_ctx *p = arg;
	if (tc->executor != STORE_EXEC_SERVER || tc->id.len > STORE_ID_MAX)
		return 0;
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 8;
		void *ids = realloc(p->ids, cap * sizeof *p->ids);
		if (!ids)
			return -ENOMEM;
		p->ids = ids;
		p->cap = cap;
	}
	memcpy(p->ids[p->n], tc->id.ptr, tc->id.len);
	p->ids[p->n++][tc->id.len] = 0;
	return 0;
}

/* Settle a server call the crash loop interrupted: errored, with its tool_result. */
static int settle_interrupted(store_txn *t, const char *id, int crashes)
{
	json_t *res = json_pack("{sssi}", "error", "interrupted", "crashes", crashes);
	int e = res ? conv_settle(t, id, STORE_TC_ERRORED, "tool_result", res, NULL, NULL) : -ENOMEM;
	json_decref(res);
	return e == STORE_E_STALE ? 0 : e;
}

/* Too many crashes, or a full store: log an `error` event (msg) so the
 * conversation owes nothing until its next user_msg, and stop restarting
 * it. */
static void give_up(struct worker *w, int crashes, const char *msg)
{
	store_txn *t;
	uint64_t last = 0, seq;
	log_error("%s: %s", w->conv, msg);
	if (sup_write_begin(STORE_WRITE, &t))
		return;
	/* The error ends the turn, and nothing re-dispatches a call behind it:
	 * settle its pending server calls errored first, or their rows stay
	 * pending forever and the next turn's model sees calls without results. */
	struct pend_ctx pc = { 0 };
	int e = store_tool_calls_list(t, w->conv, 1u << STORE_TC_PENDING, pend_server, &pc);
	for (size_t i = 0; !e && i < pc.n; i++)
		e = settle_interrupted(t, pc.ids[i], crashes);
	free(pc.ids);
	if (!e)
		e = store_event_latest_seq(t, w->conv, &last);
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_IDLE };
	if (!e)
		e = conv_error_append(t, w->conv, msg, strlen(msg), crashes, last, &seq);
	if (!e)
		e = store_conv_put(t, w->conv, &p);
	if (!e)
		e = store_txn_commit(t);
	else
		store_txn_abort(t);
	if (e)
		log_error("%s: cannot record the error event: %s", w->conv, store_strerror(e));
	else
		waiters_notify(w, seq);
}

static void on_exit_status(struct worker *w, int status)
{
	int clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
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
	/* Died on its own (not told to by agentd, an operator's kill op, a
	 * delete or the shutdown): worth a warning, and a crash to count
	 * even when it owed nothing (an OOM kill of an idle worker). */
	int unasked = !clean && !w->asked_kill && !w->deleted && !S.shutting_down;
	if (WIFSIGNALED(status))
		log_msg(unasked ? LOG_WARN : LOG_INFO, "%s: worker %d killed by signal %d", w->conv, (int)w->pid,
			WTERMSIG(status));
	else if (!clean && w->deleted && WEXITSTATUS(status) == IPC_EXIT_GONE)
		log_info("%s: worker %d exited: its conversation was deleted", w->conv, (int)w->pid);
	else if (!clean)
		log_warn("%s: worker %d exited with status %d", w->conv, (int)w->pid, WEXITSTATUS(status));
	else
		log_debug("%s: worker %d exited", w->conv, (int)w->pid);
	/* A model or tool still running for a dead worker would go on unseen
	 * (its pdeath signal reaches only itself, not what it forked): kill
	 * its whole process group. Only a group the worker announced, and
	 * announced as still running. */
	if (w->child_pgid > 1) {
		kill(-w->child_pgid, SIGKILL);
		w->child_pgid = 0;
	}
	w->pid = 0;
	S.nlive--;
	gate_drop(w);
	/* It may have committed and died before saying so (`written`): its
	 * events and any deadline it scheduled would wait for the next commit
	 * of someone else. Watchers and long-polls read the store; the timer
	 * is armed from it. */
	if (!LIST_EMPTY(&w->waiters))
		waiters_notify(w, 0);
	server_rearm_expiry();
	set_state(w, W_NONE);
	if (w->compacts && clean && !w->deleted && !S.shutting_down) {
		/* Asked of a worker that was stopping: a new one does it (it
		 * is sent the compacts when it starts), and whatever else the
		 * conversation owes. */
		w->recreated = 0;
		ensure_started(w->conv);
		return;
	}
	compacts_fail(w, "the worker exited before compacting");
	if (w->deleted) {
		w->deleted = 0;
		if (w->recreated && !S.shutting_down) {
			w->recreated = 0;
			ensure_started(w->conv);
		}
		return;
	}
	if (S.shutting_down)
		return;
	if (conv_status(w->conv) != STORE_ACTIVE) {
		metrics_add(M_CRASHES, (uint64_t)unasked);
		return;
	}
	if (clean && w->stop_sent == 1 && !w->wake_pending)
		return; /* told to stop: it revives on the next event */
	/* Evicted or yielding its slot (stop_sent 2) yet active: work arrived
	 * as it was told to stop (a wake crossing the stop), and nothing else
	 * will restart it. */
	if (clean && (w->wake_pending || w->stop_sent == 2)) {
		if (w->stop_sent == 2 && !TAILQ_EMPTY(&S.queue)) {
			/* It gave its slot away: wait behind those queued. */
			set_state(w, W_QUEUED);
			TAILQ_INSERT_TAIL(&S.queue, w, qlink);
			return;
		}
		ensure_started(w->conv);
		return;
	}
	/* It owes work and died on its own: a crash. */
	metrics_add(M_CRASHES, 1);
	int64_t now = loop_now_ms();
	w->crash_times[w->ncrash++ % 16] = now;
	int recent = 0;
	int n = w->ncrash < 16 ? w->ncrash : 16;
	for (int i = 0; i < n; i++)
		recent += now - w->crash_times[i] <= S.cfg->restart_window_ms;
	if (WIFEXITED(status) && WEXITSTATUS(status) == IPC_EXIT_FULL) {
		/* Its turn will not fit again before someone makes room. */
		w->ncrash = 0;
		give_up(w, 1, "the store is full: the turn's result could not be stored; not restarted until the "
			      "next event");
		return;
	}
	if (recent >= S.cfg->restart_limit) {
		char msg[200];
		w->ncrash = 0;
		int64_t win = S.cfg->restart_window_ms;
		int ms = win % 1000 != 0; /* a sub-second window said "within 0 s" */
		snprintf(msg, sizeof msg, "worker crashed %d times within %lld %s; not restarted until the next event",
			 recent, (long long)(ms ? win : win / 1000), ms ? "ms" : "s");
		give_up(w, recent, msg);
		return;
	}
	int64_t delay = BACKOFF_BASE_MS << (recent > 7 ? 7 : recent - 1);
	if (delay > BACKOFF_MAX_MS)
		delay = BACKOFF_MAX_MS;
	set_state(w, W_BACKOFF);
	w->restart_at = now + delay;
	log_info("%s: restarting in %lld ms (crash %d of %d allowed in %lld s)", w->conv, (long long)delay, recent,
		 S.cfg->restart_limit, (long long)(S.cfg->restart_window_ms / 1000));
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
		RB_FOREACH(w, worker_tree, &S.workers)
			if (w->pid == pid)
				break;
		if (w)
			on_exit_status(w, status);
	}
	if (reaped) {
		/* A worker killed inside a read transaction leaves its reader
		 * slot taken: clear it, or freed pages are never reused. */
		int cleared = 0;
		store_reader_check(S.st, &cleared);
		if (cleared)
			log_info("cleared %d stale reader slot(s)", cleared);
		start_queued();
	}
}

/* ---- the write gate (ipc.h) ----------------------------------------- */

/* A worker left (its socket closed, or it was reaped): it holds and awaits
 * nothing any more. */
static void gate_drop(struct worker *w)
{
	if (S.gate == w)
		S.gate = NULL;
	if (w->gate_wait) {
		TAILQ_REMOVE(&S.gate_q, w, glink);
		w->gate_wait = 0;
	}
}

/* A grant unanswered for GATE_HOLD_MS (a stopped or hung worker, or a very
 * slow disk) is taken back, so that one worker cannot stall every other
 * writer. Safe: LMDB's writer mutex, not the gate, serialises the writes. */
static int gate_revoke(int64_t now)
{
	if (!S.gate || now < S.gate_at + GATE_HOLD_MS)
		return 0;
	log_warn("%s: worker %d has held the write gate for %lld ms: taking it back", S.gate->conv,
		 (int)S.gate->pid, (long long)(now - S.gate_at));
	S.gate = NULL;
	metrics_add(M_GATE_REVOKED, 1);
	return 1;
}

/* When the loop must wake to revoke a grant others wait behind (0: none). */
int64_t gate_deadline(void)
{
	return S.gate && (S.writes_held || !TAILQ_EMPTY(&S.gate_q)) ? S.gate_at + GATE_HOLD_MS : 0;
}

/* Whether a worker holds the gate now (a grant held too long is revoked). */
int gate_busy(void)
{
	return S.gate && !gate_revoke(loop_now_ms());
}

/* Between loop iterations, after the supervisor's own writes: hand the gate
 * to the worker that asked first, if nobody holds it. */
void gate_pump(void)
{
	struct worker *w;
	if (S.gate && !TAILQ_EMPTY(&S.gate_q))
		gate_revoke(loop_now_ms());
	while (!S.gate && (w = TAILQ_FIRST(&S.gate_q))) {
		TAILQ_REMOVE(&S.gate_q, w, glink);
		w->gate_wait = 0;
		struct ipc_msg m = { .type = IPC_GRANT };
		int rc = ipc_send(w->ipc, &m);
		if (rc == 0) {
			S.gate = w;
			S.gate_at = loop_now_ms();
			metrics_add(M_GATE_GRANTS, 1);
		} else {
			/* Its queue is full, yet it waits reading it: stuck. Or
			 * it shut its socket: exiting, or broken. Either way it
			 * would wait for this grant forever. */
			log_error("%s: cannot grant worker %d its write: %s: killing it", w->conv, (int)w->pid,
				  strerror(-rc));
			worker_kill(w, SIGKILL);
		}
	}
}

/* Before the supervisor's own write: let the worker holding the gate finish
 * its one commit, reading its messages meanwhile (until the grant is
 * revoked, at worst). */
static void gate_wait(void)
{
	static int busy; /* worker_ipc() never writes, but never re-enter */
	if (busy || !S.gate)
		return;
	busy = 1;
	int64_t t0 = loop_now_us();
	metrics_add(M_GATE_WAITS, 1);
	while (S.gate && !gate_revoke(loop_now_ms())) {
		int ms = (int)(S.gate_at + GATE_HOLD_MS - loop_now_ms());
		struct pollfd p = { S.gate->ipc, POLLIN, 0 };
		if (poll(&p, 1, ms > 0 ? ms : 0) < 0 && errno != EINTR)
			break;
		worker_ipc(S.gate); /* its written clears S.gate; so does its end */
	}
	metrics_gate_wait(loop_now_us() - t0);
	busy = 0;
}

int sup_write_begin(int mode, store_txn **t)
{
	gate_wait();
	return store_txn_begin(S.st, mode, t);
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
	if (r->slot) {
		struct client *c = r->slot->c;
		if (m->ok) {
			store_txn *t;
			struct store_summary s;
			json_t *sum = json_null();
			if (store_txn_begin(S.st, STORE_READ, &t) == 0) {
				if (store_summary_latest(t, w->conv, &s) == 0) {
					json_decref(sum);
					sum = json_pack("{sIsIsosI}", "from_seq", (json_int_t)s.from_seq, "to_seq",
							(json_int_t)s.to_seq, "content",
							jsonmp_unpack(s.content.ptr, s.content.len), "version",
							(json_int_t)s.version);
				}
				store_txn_abort(t);
			}
			slot_ok(r->slot, r->id, json_pack("{so}", "summary", sum ? sum : json_null()));
		} else {
			char msg[300];
			snprintf(msg, sizeof msg, "compaction failed: %.*s", (int)m->text_len, m->text ? m->text : "");
			slot_error(r->slot, r->id, PERR_INTERNAL, msg);
		}
		client_flush(c);
	}
	json_decref(r->id);
	free(r);
}

void worker_ipc(struct worker *w)
{
	static char buf[IPC_MAX];
	for (int i = 0; w->ipc >= 0 && i < 256; i++) {
		struct ipc_msg m;
		int rc = ipc_recv(w->ipc, &m, buf);
		if (rc == -EAGAIN)
			return;
		if (rc <= 0) {
			/* Closed (the worker is exiting) or garbage: stop
			 * listening; SIGCHLD does the rest. */
			if (rc < 0 && rc != -ECONNRESET) {
				log_error("%s: bad IPC message from worker %d: %s: killing it", w->conv, (int)w->pid,
					  strerror(-rc));
				worker_kill(w, SIGKILL);
			}
			loop_del(w->ipc);
			close(w->ipc);
			w->ipc = -1;
			gate_drop(w);
			return;
		}
		/* Drained after its exit: only what it reported counts (answers,
		 * commits, its child), not what it asked for. */
		if (w->reaped && (m.type == IPC_WRITE || m.type == IPC_STATE || m.type == IPC_READY))
			continue;
		switch (m.type) {
		case IPC_READY:
			if (w->state == W_STARTING)
				set_state(w, W_RUNNING);
			break;
		case IPC_STATE:
			if (w->state == W_STOPPING)
				break;
			if (m.text_len == 4 && !memcmp(m.text, "idle", 4))
				set_state(w, W_IDLE);
			else if (m.text_len == 14 && !memcmp(m.text, "awaiting_input", 14)) {
				set_state(w, W_AWAITING);
				/* A revived worker may schedule an expiry without
				 * appending an event (a pending call whose tool now
				 * expires, or whose row it rebuilt): arm the timer. */
				server_rearm_expiry();
			} else
				set_state(w, W_RUNNING);
			/* At max_workers, a worker with nothing to do gives its
			 * slot to a conversation queued for one. */
			if ((w->state == W_IDLE || w->state == W_AWAITING) && !TAILQ_EMPTY(&S.queue)) {
				worker_stop(w);
				/* Not an operator's stop: if work arrived meanwhile (a
				 * wake it read before this report), restart it on exit. */
				w->stop_sent = 2;
			}
			break;
		case IPC_DELTA:
			watch_delta(w, m.text, m.text_len);
			break;
		case IPC_MODEL: /* a model call ended: its attempts, for the metrics */
			if (m.num > 0 && m.num <= 1000) {
				metrics_add(M_MODEL_CALLS, 1);
				metrics_add(M_MODEL_ATTEMPTS, (uint64_t)m.num);
				metrics_add(M_MODEL_ATTEMPT_FAILURES, (uint64_t)m.num - (m.ok ? 1 : 0));
				if (!m.ok)
					metrics_add(M_MODEL_CALL_FAILURES, 1);
			}
			break;
		case IPC_COMPACTED:
			on_compacted(w, &m);
			break;
		case IPC_CHILD:
			w->child_pgid = m.num > 1 ? (pid_t)m.num : 0;
			break;
		case IPC_WRITE:
			if (S.gate == w || w->gate_wait) {
				log_error("%s: worker %d asked for the write gate twice: killing it", w->conv,
					  (int)w->pid);
				worker_kill(w, SIGKILL);
				break;
			}
			w->gate_wait = 1;
			TAILQ_INSERT_TAIL(&S.gate_q, w, glink);
			break;
		case IPC_WRITTEN:
			if (S.gate == w)
				S.gate = NULL;
			if (m.seq)
				waiters_notify(w, m.seq);
			/* The commit may have scheduled an expiry, also one that
			 * appended no event (seq 0: a deadline added to a pending
			 * call by a revived worker). */
			server_rearm_expiry();
			break;
		case IPC_WOKEN:
			/* Events committed since the last wake may be newer than
			 * the log the worker is about to read: wake it again. */
			if (w->wake_missed) {
				wake_send(w);
				w->wake_missed = 0;
			} else {
				w->wake_sent = 0;
			}
			break;
		default:
			log_warn("%s: unexpected IPC message '%s' from the worker", w->conv,
				 ipc_type_name(m.type) ? ipc_type_name(m.type) : "?");
		}
	}
}

void worker_on_io(struct loop_watch *lw, uint32_t events)
{
	worker_ipc(container_of(lw, struct worker, lw));
}

int worker_kill(struct worker *w, int sig)
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

int worker_stop(struct worker *w)
{
	if (!w->pid)
		return -1;
	struct ipc_msg m = { .type = IPC_STOP };
	w->stop_sent = 1;
	set_state(w, W_STOPPING);
	if (w->ipc < 0 || ipc_send(w->ipc, &m) < 0)
		return worker_kill(w, SIGTERM);
	return 0;
}

int worker_compact(struct worker *w, struct slot *slot, json_t *id)
{
	struct compact_req *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	r->num = ++S.compact_seq;
	r->slot = slot;
	r->id = json_incref(id);
	r->next = w->compacts;
	w->compacts = r;
	if (w->pid && w->ipc >= 0) {
		struct ipc_msg m = { .type = IPC_COMPACT, .num = r->num };
		if (ipc_send(w->ipc, &m) < 0) {
			w->compacts = r->next;
			json_decref(r->id);
			free(r);
			workers_changed();
			return -1;
		}
	}
	return 0;
}

/* ---- timers ---------------------------------------------------------- */

static int64_t evict_at(const struct worker *w)
{
	if (!w->pid || w->stop_sent || (w->state != W_IDLE && w->state != W_AWAITING))
		return 0;
	return w->since + S.cfg->idle_timeout_ms;
}

void workers_tick(int64_t now)
{
	struct worker *w;
	RB_FOREACH(w, worker_tree, &S.workers) {
		if (w->state == W_BACKOFF && now >= w->restart_at) {
			set_state(w, W_NONE);
			if (conv_status(w->conv) == STORE_ACTIVE) {
				metrics_add(M_REVIVALS, 1);
				ensure_started(w->conv);
			}
		}
		int64_t t = evict_at(w);
		if (t && now >= t) {
			log_debug("%s: worker %d idle for %lld ms: stopping it", w->conv, (int)w->pid,
				  (long long)(now - w->since));
			worker_stop(w);
			w->stop_sent = 2; /* an eviction, not an operator's stop: see on_exit_status */
		}
	}
}

int64_t workers_next_deadline(void)
{
	if (!S.wdl_stale)
		return S.wdl;
	int64_t d = 0;
	struct worker *w;
	RB_FOREACH(w, worker_tree, &S.workers) {
		int64_t t = w->state == W_BACKOFF ? w->restart_at : evict_at(w);
		if (t && (!d || t < d))
			d = t;
	}
	S.wdl_stale = 0;
	return S.wdl = d;
}

void workers_stop_all(void)
{
	struct worker *w;
	while ((w = TAILQ_FIRST(&S.queue))) {
		TAILQ_REMOVE(&S.queue, w, qlink);
		set_state(w, W_NONE);
	}
	RB_FOREACH(w, worker_tree, &S.workers) {
		if (w->pid)
			worker_stop(w);
		else if (w->state == W_BACKOFF)
			set_state(w, W_NONE);
	}
}

void workers_kill_all(void)
{
	struct worker *w;
	RB_FOREACH(w, worker_tree, &S.workers)
		if (w->pid)
			worker_kill(w, SIGKILL);
}

/* ---- expiries and start-up ------------------------------------------- */

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
	int e = sup_write_begin(STORE_WRITE, &t);
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
	S.expiry_retry_at = store_now(S.st) + EXPIRY_RETRY_MS;
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
	if (store_txn_begin(S.st, STORE_READ, &t))
		return 0;
	store_expiries_due(t, store_now(S.st), due_any, &any);
	store_txn_abort(t);
	return any;
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
 * another reason, is retried EXPIRY_RETRY_MS later (server_rearm_expiry),
 * not at once: a failing commit must not spin the loop. */
int expiries_fire(void)
{
	static struct due d[EXPIRY_BATCH];
	static size_t cap = EXPIRY_BATCH; /* halved when the store is full, doubled back after a commit */
	int total = 0;
	for (int round = 0; expiry_due(); round++) {
		struct due_ctx c = { d, 0, cap };
		store_txn *t;
		if (sup_write_begin(STORE_WRITE, &t)) {
			expiry_retry_later();
			return total;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t at_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
		int e = store_expiries_due(t, store_now(S.st), due_one, &c);
		if ((e && e != 1) || c.n == 0) {
			store_txn_abort(t);
			return total;
		}
		e = 0;
		char convs[EXPIRY_BATCH][STORE_ID_MAX + 1];
		uint64_t seqs[EXPIRY_BATCH];
		int fired[EXPIRY_BATCH] = { 0 }, ended[EXPIRY_BATCH] = { 0 };
		size_t bad = c.n;
		for (size_t i = 0; i < c.n && !e; i++) {
			int r = ops_settle(t, d[i].id, STORE_TC_EXPIRED, NULL, convs[i], &seqs[i], &ended[i]);
			if (r == 0) {
				fired[i] = 1;
			} else if (r == STORE_E_STALE) {
				/* Settled already, or gone: only a damaged store
				 * keeps its row (resolve removes it). The row goes. */
				if ((r = store_expiry_drop(t, d[i].deadline, d[i].id)) == 0)
					log_warn("tool call %s: dropped a deadline row for a call that is settled or gone",
						 d[i].id);
			}
			if (r)
				e = r, bad = i;
		}
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
		if (e) {
			leases_ahead_drop();
			if ((e == STORE_E_CORRUPT || e == STORE_E_NOTFOUND) && bad < c.n) {
				if (expiry_drop_damaged(&d[bad], e)) {
					expiry_retry_later();
					return total;
				}
				round--; /* the others again, without it */
				continue;
			}
			if (e == STORE_E_FULL && c.n > 1) {
				cap = c.n / 2;
				log_warn("store full firing %zu expiries: retrying in batches of %zu", c.n, cap);
				round--;
				continue;
			}
			log_error("firing %zu expiries failed: %s: retrying in %d ms", c.n, store_strerror(e),
				  EXPIRY_RETRY_MS);
			expiry_retry_later();
			return total;
		}
		S.expiry_retry_at = 0;
		cap = cap < EXPIRY_BATCH / 2 ? cap * 2 : EXPIRY_BATCH;
		metrics_add(M_EXPIRY_COMMITS, 1);
		for (size_t i = 0; i < c.n; i++) {
			if (!fired[i])
				continue;
			total++;
			metrics_add(M_EXPIRIES_FIRED, 1);
			metrics_expiry_late(at_us, d[i].deadline);
			log_info("%s: tool call %s expired", convs[i], d[i].id);
			if (!ended[i])
				ensure_started(convs[i]);
			struct worker *w = worker_find(convs[i]);
			if (w)
				waiters_notify(w, seqs[i]);
		}
		leases_ahead_drop();
		if (c.n < EXPIRY_BATCH && round + 1 >= EXPIRY_ROUNDS)
			return total;
	}
	return total;
}

static int active_one(void *arg, const struct store_conv *c)
{
	return due_add(arg, c->id);
}

/* On start, every conversation left `active` was mid-turn when everything
 * died: give it a worker (queued past max_workers). */
void workers_start_active(void)
{
	static struct due d[EXPIRY_BATCH];
	char after[STORE_ID_MAX + 1] = "";
	int n = 0;
	for (;;) {
		struct due_ctx c = { d, 0, 0 };
		store_txn *t;
		if (store_txn_begin(S.st, STORE_READ, &t))
			return;
		int e = store_conv_list(t, STORE_ACTIVE, after[0] ? after : NULL, 0, active_one, &c, NULL);
		store_txn_abort(t);
		if (e && e != 1)
			log_error("listing active conversations: %s%s", store_strerror(e),
				  e == STORE_E_CORRUPT ? " (a record passed over: see agentd check)" : "");
		for (size_t i = 0; i < c.n; i++) {
			ensure_started(d[i].id);
			n++;
		}
		if (c.n < EXPIRY_BATCH)
			break;
		snprintf(after, sizeof after, "%s", d[c.n - 1].id);
	}
	if (n)
		log_info("revived %d conversation(s) that were mid-turn", n);
}
