/*
 * sup.h: the supervisor's shared state, between its files:
 *   server.c   signals, timers, what runs around each wait of the loop (loop.h)
 *   control.c  the listening socket, client buffers, ordered replies, watchers
 *   ops.c      one function per control-protocol op
 *   workers.c  spawn, reap, restart policy, IPC, idle eviction, expiries
 * One thread; nothing here is locked.
 */
#ifndef AGENTD_SUP_H
#define AGENTD_SUP_H

#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc/proto.h"
#include "store/store.h"
#include "common/config.h"
#include "supervisor/loop.h"

struct client;
struct worker;

/* The record that embeds member m at p. */
#define container_of(p, type, m) ((type *)(void *)((char *)(p)-offsetof(type, m)))

/* A reply slot: replies leave in request order even when some complete later
 * (a long-poll, a compaction, a write waiting for the group commit). */
struct slot {
	TAILQ_ENTRY(slot) q;
	struct client *c;
	char *line;
	size_t len;
	int done;
	int op;             /* counted in the metrics when answered; -1: not (yet) an op */
	int64_t started_us; /* when its line was parsed */
};

/* A request parsed this iteration, executed at its end (after the group commit
 * for writes, so a pipelined read sees the writes before it). */
struct job {
	TAILQ_ENTRY(job) q;
	struct request rq;
	struct slot *slot;
	int64_t started_us;
	/* write results, filled inside the group transaction */
	int err;
	char msg[160];
	json_t *reply;  /* success fields */
	int ran;        /* a read already answered while the writes were held */
	int after_write; /* a read queued behind a write of its client: runs after the commit */
	int excluded;   /* a write that met a damaged record: failed alone, left out of the retry */
	int parked;     /* its slot is answered later (a long-poll, a compact): counted then */
};

/* A client waiting on a conversation's commits: a long-poll or a watch. */
struct waiter {
	LIST_ENTRY(waiter) link;      /* on its conversation's list */
	TAILQ_ENTRY(waiter) tq;       /* long-polls: on the deadline list */
	struct client *c;
	struct slot *slot;            /* long-poll: the reply to complete */
	json_t *id;
	struct request rq;            /* long-poll: the query to re-run */
	int64_t deadline;             /* monotonic ms, long-poll */
	int watch;
	uint64_t sent;                /* watch: last seq streamed */
	char conv[STORE_ID_MAX + 1];
};

struct client {
	struct loop_watch lw;     /* control_on_io */
	LIST_ENTRY(client) link;
	int fd;
	uid_t uid;
	pid_t pid;                /* the peer's, at connect (SO_PEERCRED) */
	char *in;
	size_t in_len, in_cap;
	char *out;
	size_t out_len, out_off, out_cap;
	TAILQ_HEAD(, slot) slots;
	struct waiter *watch;     /* streaming: the connection is a watch */
	int closing;              /* too_large: stop reading, close once output is flushed */
	int eof;                  /* the peer shut down its side: answer what was read, then close */
	int dead;                 /* freed at the end of the iteration */
	int paused;               /* output over cap: stop reading */
	int backlog;              /* complete lines left after the per-wakeup cap */
	uint32_t events;          /* the epoll mask registered now */
	int batch_write;          /* a write of this client is in the pending jobs */
	int barrier;              /* a read after that write is too: parse nothing more until they end */
};

enum wstate { W_NONE, W_STARTING, W_RUNNING, W_IDLE, W_AWAITING, W_STOPPING, W_QUEUED, W_BACKOFF };

/* One per conversation the supervisor tracks: a live worker, one queued for a
 * slot, one waiting out a restart backoff, or only watchers. */
struct worker {
	struct loop_watch lw;       /* worker_on_io */
	RB_ENTRY(worker) node;
	TAILQ_ENTRY(worker) qlink;  /* on the max_workers queue */
	TAILQ_ENTRY(worker) glink;  /* on the write gate's queue */
	LIST_ENTRY(worker) alink;   /* on S.ahead while lease_ahead is set */
	uint64_t lease_ahead;       /* a lease taken in this iteration's commit, for spawn() */
	struct early {              /* forked while that commit flushes (commit_spawning) */
		pid_t pid;          /* 0: none */
		int ipc, ep;        /* its IPC socket, its exec-error pipe */
		uint64_t gen;
	} early;
	int gate_wait;              /* asked for the write gate, not granted yet */
	char conv[STORE_ID_MAX + 1];
	pid_t pid;                  /* 0: no process */
	int ipc;                    /* -1: none */
	int state;                  /* enum wstate */
	uint64_t lease;
	int64_t since;              /* monotonic ms of the last state change */
	int64_t restart_at;         /* backoff: monotonic ms */
	int64_t crash_times[16];    /* recent crash times, ring */
	int ncrash;
	int stop_sent;              /* stop requested: do not restart on exit */
	int asked_kill;             /* agentd signalled it (kill op, delete, shutdown): not a crash */
	int wake_pending;           /* an event arrived while it was stopping */
	int wake_sent;              /* a wake it has not answered with woken */
	int wake_missed;            /* an event since that wake: wake again on woken */
	int deleted;                /* conversation deleted: never restart */
	int recreated;              /* created again while its old worker was being killed */
	int reaped;                 /* in on_exit_status: its pid is no longer its own */
	uint64_t seen_seq;          /* highest seq announced to waiters */
	pid_t child_pgid;           /* the model or tool running for it, 0: none */
	LIST_HEAD(, waiter) waiters;
	struct compact_req *compacts;
};

struct compact_req {
	struct compact_req *next;
	int64_t num;
	struct slot *slot;
	json_t *id;
};

RB_HEAD(worker_tree, worker);
RB_PROTOTYPE(worker_tree, worker, node, worker_cmp)

struct sup {
	struct config *cfg;
	store *st;
	char *data_dir;
	char *sock_path;
	dev_t sock_dev;                    /* the socket file we bound (control_unlink) */
	ino_t sock_ino;
	char *worker_path;
	char *config_path;
	int listen_fd;
	int sig_fd;
	int expiry_fd;       /* CLOCK_REALTIME, absolute */
	int64_t expiry_retry_at; /* wall ms: no attempt to fire before (after a failed one); 0: none */
	int tick_fd;         /* CLOCK_MONOTONIC: eviction, backoff, long-polls, sync */
	int64_t started_ms;  /* monotonic */
	int64_t next_sync;   /* sync=none: next mdb_env_sync */
	int64_t next_gc;
	int shutting_down;
	int64_t shutdown_deadline;
	int killed_all;
	int nlive;           /* workers with a process */
	int64_t compact_seq;
	LIST_HEAD(, client) clients;
	TAILQ_HEAD(, job) jobs;            /* this iteration's requests */
	TAILQ_HEAD(, waiter) polls;        /* long-polls by insertion (deadline checked by scan) */
	TAILQ_HEAD(, worker) queue;        /* waiting for a worker slot */
	TAILQ_HEAD(, worker) gate_q;       /* workers waiting for the write gate (ipc.h) */
	LIST_HEAD(, worker) ahead;         /* workers with a lease taken ahead (lease_ahead()) */
	struct worker *gate;               /* the worker holding it, NULL: free */
	int64_t gate_at;                   /* monotonic ms it was granted */
	int writes_held;                   /* this iteration's writes wait for the gate's holder */
	struct worker_tree workers;
	int nclients;
	int nbacklog;        /* clients with unparsed complete lines */
	int reserve_fd;      /* spare descriptor, freed to refuse a connection at EMFILE */
	int64_t tick_armed;  /* the monotonic deadline tick_fd is armed to (0: disarmed) */
	/* What changed since workers_next_deadline() and workers_gc() last walked
	 * every worker: they walk again only then, not on every iteration. */
	int wdl_stale, wgc_stale;
	int64_t wdl;         /* the cached next worker deadline */
};

extern struct sup S;


/* server.c */
int server_run(void);
void server_rearm_expiry(void);
void server_begin_shutdown(void);

/* control.c */
int control_listen(void);
void control_unlink(void);
void control_accept(void);
void control_on_io(struct loop_watch *lw, uint32_t events);
struct slot *slot_new(struct client *c);
void slot_done(struct slot *s, char *line, size_t len);
void slot_error(struct slot *s, json_t *id, int err, const char *msg);
void slot_ok(struct slot *s, json_t *id, json_t *obj);
void client_write(struct client *c, const char *p, size_t n);
void client_flush(struct client *c);
void clients_reap(void);
void control_close_all(void);
void control_backlog(void);
int control_backlog_ready(void);
void watch_pump(struct waiter *wt);
void waiters_notify(struct worker *w, uint64_t seq);
void waiter_free(struct waiter *wt);
void polls_expire(int64_t now);
int64_t polls_next_deadline(void);
void watch_delta(struct worker *w, const char *text, size_t len);

/* ops.c */
void ops_execute(void);
int ops_is_write(int op);
/* Settle a pending tool call in t: row, resolution event, expiry and status
 * together (resolve and fired expiries). conv gets its conversation. */
int ops_settle(store_txn *t, const char *tool_call_id, int status, json_t *result, char *conv, uint64_t *seq,
	       int *ended);
json_t *ops_events_query(const struct request *rq, uint64_t *last_seq, uint64_t *next, int *err, char *msg,
			 size_t msglen);
json_t *ops_events_reply(json_t *evs, uint64_t last, uint64_t next);

/* workers.c */
struct worker *worker_find(const char *conv);
struct worker *worker_get(const char *conv);
int ensure_started(const char *conv);
void worker_deleted(struct worker *w);
void workers_reap(void);
void worker_ipc(struct worker *w);
void worker_on_io(struct loop_watch *lw, uint32_t events);
void workers_tick(int64_t now);
int64_t workers_next_deadline(void);
void workers_stop_all(void);
void workers_kill_all(void);
int worker_kill(struct worker *w, int sig);
int worker_stop(struct worker *w);
int worker_compact(struct worker *w, struct slot *slot, json_t *id);
int expiries_fire(void);
void workers_start_active(void);
void workers_gc(void);
void workers_changed(void);
void gate_pump(void);
int64_t gate_deadline(void);
int gate_busy(void);
int sup_write_begin(int mode, store_txn **t);
int lease_ahead(store_txn *t, const char *conv);
void leases_ahead_drop(void);
int commit_spawning(store_txn *t);
const char *wstate_name(int st);

#endif
