/*
 * lifecycle.h: a worker's lifecycle as one table, actions[state][event], on
 * one screen (lifecycle.c), as s6-supervise keeps its own. Every state change
 * of a worker goes through lifecycle_event(); each cell is a small function
 * that decides the next state and asks for its effects through the
 * lifecycle_fx the owner (workers.c) gives, so the table runs and is tested
 * without processes (tests/unit/check_lifecycle.c).
 *
 * The states, with what each means for the process:
 *   NONE        no process, nothing pending
 *   QUEUED      no process: waiting for a slot under max_workers
 *   BACKOFF     no process: waiting out a restart delay (restart_at)
 *   STARTING    forked and exec'd, told go, not ready yet
 *   RUNNING     a turn or a tool is in progress, or a wake is being read
 *   IDLE        nothing owed; evicted after idle_timeout
 *   AWAITING    waiting for a person (a human tool call)
 *   STOPPING    told to stop by an operator, an `ended` update or shutdown:
 *               not restarted on exit unless work arrived meanwhile
 *   EVICTING    told to stop to free memory or a slot (idle eviction, a
 *               slot yielded): restarted on exit if work crossed the stop
 *   DELETING    killed because its conversation was deleted
 *   RECREATING  as DELETING, and the conversation exists again: a new
 *               worker starts once this one is reaped
 *   KILLING     signalled by an operator (the kill op, a cancel): its exit
 *               is no crash; revived at once if its conversation owes work
 *
 * Data that is not a state: a wake owed (wake_pending: sent when the
 * process restarts, or when it could not be sent), a wake not yet answered
 * with `woken` (wake_sent) and work that arrived since (wake_missed), and the
 * recent crash times the restart policy counts.
 */
#ifndef AGENTD_LIFECYCLE_H
#define AGENTD_LIFECYCLE_H

#include <stdint.h>

enum wstate {
	W_NONE, W_QUEUED, W_BACKOFF, W_STARTING, W_RUNNING, W_IDLE, W_AWAITING, W_STOPPING, W_EVICTING,
	W_DELETING, W_RECREATING, W_KILLING, W_NSTATES
};

enum wevent {
	E_WORK,        /* its conversation owes work (a send, a resolution, an expiry, a revival) */
	E_SPAWNED,     /* the process was forked and exec'd (and told go) */
	E_SPAWN_FAILED,/* fork or exec failed */
	E_SPAWN_WAIT,  /* a worker of an earlier agentd still runs for it (common/convlock.h): soon again */
	E_READY,       /* the worker read the log */
	E_RUNNING,     /* it reported running, idle or awaiting_input */
	E_IDLE,
	E_AWAITING,
	E_STOP,        /* an operator's stop, an `ended` update */
	E_EVICT,       /* idle too long, or its slot is wanted */
	E_DELETE,      /* its conversation was deleted */
	E_SHUTDOWN,    /* agentd is shutting down */
	E_EXIT,        /* the process was reaped (arg: struct lifecycle_exit) */
	E_TIMER,       /* its backoff ended */
	E_SLOT,        /* a slot is free for it (queued) */
	E_KILL,        /* an operator signalled it (the kill op, a cancel): sent before the event */
	E_NEVENTS
};

struct lifecycle {
	int state;                /* enum wstate */
	int64_t since;            /* monotonic ms of the last state change */
	int64_t restart_at;       /* BACKOFF: monotonic ms */
	int wake_pending, wake_sent, wake_missed;
	int64_t crash_times[16];  /* recent crash times, a ring */
	int ncrash;
};

/* How a reaped process ended. */
struct lifecycle_exit {
	int clean;      /* exit status 0 */
	int unasked;    /* not clean, and nobody asked it to die (no kill op, delete, shutdown) */
	int store_full; /* it exited IPC_EXIT_FULL: its turn's result did not fit */
	int compacts;   /* compactions were asked of it and are not answered */
};

/* The effects a cell asks for; owner is the lifecycle's record. */
/* What fx.spawn did when it did not fail (a failure is a negative errno or
 * store error, and E_SPAWN_FAILED follows). */
enum spawn_outcome {
	SPAWN_STARTED = 0, /* E_SPAWNED follows */
	SPAWN_GONE = 1,    /* its conversation is gone (or another node runs it): nothing to start */
	SPAWN_WAIT = 2,    /* a worker of an earlier agentd still runs for it: E_SPAWN_WAIT follows */
};

struct lifecycle_fx {
	int64_t (*now)(void);                  /* monotonic ms */
	int (*shutting_down)(void);
	int (*slot_free)(void);                /* a process may start under max_workers */
	int (*queue_empty)(void);
	void (*queue_push)(void *owner);
	void (*queue_remove)(void *owner);
	void (*yield_slot)(void);              /* ask an idle worker to give its slot */
	int (*spawn)(void *owner);             /* an enum spawn_outcome, or a negative errno or store error */
	int (*started_by_commit)(void *owner); /* forked by the commit that owes this work: it reads the log after it */
	int (*wake)(void *owner);              /* 0 sent, or -errno: not (full or closed socket) */
	void (*stop)(void *owner);             /* ask the process to stop (or SIGTERM it) */
	void (*kill)(void *owner);             /* SIGKILL it */
	void (*rearm_expiry)(void);
	int (*conv_active)(void *owner);       /* its conversation's status is active */
	void (*count)(int metric);             /* enum metric */
	void (*give_up)(void *owner, int crashes, const char *msg);
	const char *(*name)(void *owner);      /* for log lines */
	int restart_limit;
	int64_t restart_window_ms;
};

/* Initialise l in NONE. */
void lifecycle_init(struct lifecycle *l);
/* Apply event ev (with arg: a struct lifecycle_exit for E_EXIT, else NULL). */
void lifecycle_event(struct lifecycle *l, void *owner, const struct lifecycle_fx *fx, int ev, const void *arg);
/* The state's name as `status` and `get` show it (docs/protocol.md). */
const char *lifecycle_state_name(int state);
/* Whether the state has a process. */
int lifecycle_live(int state);

#define BACKOFF_BASE_MS 100
#define BACKOFF_MAX_MS 10000
#define SPAWN_WAIT_MS 50

#endif
