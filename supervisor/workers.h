/*
 * workers.h: one worker process per conversation that owes work.
 *
 * workers_wake() is the one door: a send, a resolution, a fired expiry and a
 * revival all go through it. A worker that dies is reaped, the reader table
 * is checked, and its lifecycle (lifecycle.h) decides: restart after a
 * backoff, give up after restart_limit crashes within restart_window (an
 * `error` event, so the conversation owes nothing until its next event), or
 * leave it stopped. Idle workers are told to stop after idle_timeout, so a
 * conversation that owes nothing has no process.
 *
 * Workers report up only through workers_hooks.
 */
#ifndef AGENTD_WORKERS_H
#define AGENTD_WORKERS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "store/store.h"

struct workers_hooks {
	void (*committed)(const char *conv);                         /* its log may have grown */
	void (*delta)(const char *conv, const char *text, size_t len); /* a model's streamed text */
	void (*rearm_expiry)(void);                                  /* a deadline may have been scheduled */
	/* The lease for conv's next worker, in t (NULL: store_lease_next):
	 * 0 with *gen, WORKERS_ELSEWHERE when another node runs conv (start
	 * nothing), or a store error. */
	int (*claim)(store_txn *t, const char *conv, uint64_t *gen);
	/* conv's worker of generation gen ended owing nothing (may be NULL). */
	void (*released)(const char *conv, uint64_t gen);
	/* conv's worker exited because a flush of the store failed
	 * (IPC_EXIT_FLUSH): the frontier must stop (durable.h). */
	void (*flush_failed)(const char *conv);
};
enum { WORKERS_ELSEWHERE = 1 };

struct workers_env {
	const struct config *cfg;
	store *st;
	const char *data_dir;    /* passed to each worker */
	const char *worker_path; /* the agentd-worker binary */
	const char *config_path; /* the configuration copy workers read, or NULL */
	struct workers_hooks hooks;
	/* Hidden from every command a worker runs (agent/sandbox.c), with
	 * data_dir and config_path: the control socket and the file agentd
	 * read (NULL: none). */
	const char *sock_path;
	const char *config_source;
};

/* Keep env (and what it points at) for the process's life; sets up the
 * write gate (gate.h) for the workers. */
void workers_init(const struct workers_env *env);

/* conv owes work: wake its worker, or start one (queued past max_workers,
 * or backing off). 0, or -ENOMEM (no record), or when a worker could not be
 * started (it backs off as after a crash): the lease's store error, or the
 * fork's or exec's -errno. */
int workers_wake(const char *conv);
/* Signal conv's worker: 0, -ESRCH (no process), -errno. Not a crash. */
int workers_kill(const char *conv, int sig);
/* Ask conv's worker to stop (it revives on the next event): 0, -ESRCH. */
int workers_stop(const char *conv);
/* How a compaction ended, told once to the one who asked (workers_compact):
 * err 0, the summary is committed (msg empty, len 0); -EIO, the worker
 * reported that it failed (msg, len bytes, not NUL-terminated: its reason);
 * -ECHILD, it exited without compacting and no next worker took it over
 * (msg, len: agentd's words for it). */
typedef void workers_compacted_fn(void *arg, int err, const char *msg, size_t len);
/* Ask conv's worker (workers_wake it first) to compact now, or the next
 * worker when this one is stopping; done(arg, ...) is called when it
 * reports (compaction.h builds the op's reply, forward.c another node's
 * answer). 0, or (done never called) -EINVAL (done is NULL), -ENOENT (no
 * worker record), -ENOMEM, or ipc_send's error (its socket is full or
 * gone). */
int workers_compact(const char *conv, workers_compacted_fn *done, void *arg);
/* conv was deleted (in the transaction that deletes it): kill its worker,
 * take it off the queue or out of backoff, so nothing starts for it. */
void workers_deleted(const char *conv);

/* In the transaction that gives conv work, take the lease for the worker
 * workers_wake() will spawn after that commit, when it has none: one durable
 * commit per revival, not two. Good for this iteration only. 0 or a store error. */
int lease_ahead(store_txn *t, const char *conv);
void leases_ahead_drop(void);
/* Commit t, starting the workers it took leases for while it flushes. */
int commit_spawning(store_txn *t);

/* A cancel of conv's turn (ops.c, inside its transaction t): take a new
 * lease so the worker running it is fenced off and cannot commit the turn it
 * was running after the cancel; nothing when a send in t already took a lease
 * ahead (the worker to come reads the log after the cancel). 0 or a store error. */
int workers_fence(store_txn *t, const char *conv);
/* After the cancel committed: kill conv's worker and the model or tool
 * process group running for it, as an operator's kill (no crash counted, not
 * restarted while the conversation owes nothing). 0, or -ESRCH without one. */
int workers_cancel(const char *conv);

/* The text conv's model streamed since its worker's last commit (the
 * model call in flight: an interrupting send keeps it in its
 * turn_cancelled), at most WORKERS_PARTIAL_MAX bytes, *len of them; NULL
 * (*len 0) when none. Valid until the loop reads the worker again. */
#define WORKERS_PARTIAL_MAX 65536
const char *workers_partial(const char *conv, size_t *len);

/* The `worker` field of `get` ({pid, state}, or null) and `status`'s list. */
json_t *workers_conv_json(const char *conv);
json_t *workers_json(void); /* NULL: out of memory */
int workers_live(void);

/* The loop's parts: SIGCHLD, the tick, the deadline it must wake at (0:
 * none), freeing records that track nothing, and shutdown. */
void workers_reap(void);
void workers_tick(int64_t now);
int64_t workers_next_deadline(void);
void workers_gc(void);
void workers_stop_all(void);
void workers_kill_all(void);
/* On start: every conversation left active was mid-turn when everything
 * died: give it a worker. */
void workers_start_active(void);

/* For nodes.c: whether conv has a live worker here; stop (SIGKILL, not a
 * crash) every live worker for which held(arg, conv, lease) is 0, and
 * say how many. */
int workers_running(const char *conv);
int workers_stop_unheld(int (*held)(void *arg, const char *conv, uint64_t lease), void *arg);

#endif
