/* lifecycle.c: the worker lifecycle table (see lifecycle.h). */
#include "supervisor/lifecycle.h"
#include "common/log.h"
#include "supervisor/metrics.h"

#include <stdio.h>
#include <string.h>

typedef void action(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg);

static void go(struct lifecycle *l, const struct lifecycle_fx *fx, int st)
{
	l->state = st;
	l->since = fx->now();
}

/* ---- the cells --------------------------------------------------------- */

/* Work for a conversation with no process: start one, or queue for a slot. */
static void start(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	if (fx->shutting_down())
		return;
	if (!fx->slot_free()) {
		go(l, fx, W_QUEUED);
		fx->queue_push(o);
		log_info("%s: workers at max_workers: queued for a worker", fx->name(o));
		fx->yield_slot();
		return;
	}
	/* Every outcome is handled by the spawn itself, by the event it posts
	 * (E_SPAWNED, E_SPAWN_WAIT, E_SPAWN_FAILED) or by nothing to start. */
	fx->spawn(o);
}

static void spawned(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	l->wake_pending = l->wake_sent = l->wake_missed = 0;
	go(l, fx, W_STARTING);
	fx->count(M_SPAWNS);
}

/* A worker that could not start backs off as one that crashed would, so a
 * broken worker binary does not spin. */
static void spawn_failed(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_BACKOFF);
	l->restart_at = fx->now() + BACKOFF_MAX_MS;
}

/* A worker of an earlier agentd still runs for it, finishing a tool whose
 * result it commits under its lease: look again shortly. */
static void spawn_wait(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_BACKOFF);
	l->restart_at = fx->now() + SPAWN_WAIT_MS;
}

/* Work for a live worker: wake it (once: a wake in flight covers what
 * arrives before its `woken`). */
static void wake(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	if (fx->started_by_commit(o))
		return; /* it reads the log after the commit that owes this work */
	if (l->wake_sent) {
		l->wake_missed = 1;
		fx->count(M_WAKES_COALESCED);
	} else if (fx->wake(o) == 0) {
		l->wake_sent = 1;
	} else {
		l->wake_pending = 1; /* it is woken when it restarts */
	}
}

/* As wake, for one with nothing to do: it has work now, so it must not be
 * evicted as idle (its stop would cross the wake and swallow the turn). */
static void wake_idle(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	wake(l, o, fx, arg);
	if (!l->wake_pending && !fx->started_by_commit(o))
		go(l, fx, W_RUNNING);
}

/* Work while it stops: it is started again when it exits. */
static void owe(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	l->wake_pending = 1;
}

static void recreate(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_RECREATING);
}

static void ready(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_RUNNING);
}

static void to_running(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_RUNNING);
}

static void evict(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_EVICTING);
	fx->stop(o);
}

/* Nothing to do now: at max_workers it gives its slot to a conversation
 * queued for one. */
static void to_idle(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_IDLE);
	if (!fx->queue_empty())
		evict(l, o, fx, arg);
}

static void to_awaiting(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_AWAITING);
	/* A revived worker may schedule an expiry without appending an event
	 * (a pending call whose tool now expires): arm the timer. */
	fx->rearm_expiry();
	if (!fx->queue_empty())
		evict(l, o, fx, arg);
}

static void stop(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_STOPPING);
	fx->stop(o);
}

static void kill_deleted(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_DELETING);
	fx->kill(o);
}

/* An operator's kill (the signal is already sent): its exit is not a crash. */
static void killed(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_KILLING);
}

/* Told to stop while an operator's kill ends it: not restarted on exit
 * unless work arrives. */
static void killed_stop(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_STOPPING);
}

static void unqueue(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	fx->queue_remove(o);
	go(l, fx, W_NONE);
}

static void to_none(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_NONE);
}

static void dequeued(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_NONE);
	start(l, o, fx, arg);
}

static void backoff_over(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_NONE);
	if (fx->conv_active(o)) {
		fx->count(M_REVIVALS);
		start(l, o, fx, arg);
	}
}

/* ---- exits ------------------------------------------------------------- */

/* It owed work and died on its own: count the crash, then back off, or
 * give up after restart_limit crashes within restart_window. */
static void crashed(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const struct lifecycle_exit *x)
{
	fx->count(M_CRASHES);
	int64_t now = fx->now();
	l->crash_times[l->ncrash++ % 16] = now;
	int recent = 0, n = l->ncrash < 16 ? l->ncrash : 16;
	for (int i = 0; i < n; i++)
		recent += now - l->crash_times[i] <= fx->restart_window_ms;
	if (x->store_full) {
		/* Its turn will not fit again before someone makes room. */
		l->ncrash = 0;
		fx->give_up(o, 1, "the store is full: the turn's result could not be stored; not restarted until "
				  "the next event");
		return;
	}
	if (recent >= fx->restart_limit) {
		char msg[200];
		int64_t win = fx->restart_window_ms;
		int ms = win % 1000 != 0; /* a sub-second window said "within 0 s" */
		l->ncrash = 0;
		snprintf(msg, sizeof msg, "worker crashed %d times within %lld %s; not restarted until the next event",
			 recent, (long long)(ms ? win : win / 1000), ms ? "ms" : "s");
		fx->give_up(o, recent, msg);
		return;
	}
	int64_t delay = BACKOFF_BASE_MS << (recent > 7 ? 7 : recent - 1);
	if (delay > BACKOFF_MAX_MS)
		delay = BACKOFF_MAX_MS;
	go(l, fx, W_BACKOFF);
	l->restart_at = now + delay;
	log_info("%s: restarting in %lld ms (crash %d of %d allowed in %lld s)", fx->name(o), (long long)delay,
		 recent, fx->restart_limit, (long long)(fx->restart_window_ms / 1000));
}

/* What every exit of a process that was not deleted decides first: nothing
 * more during shutdown; a conversation that owes nothing is not restarted
 * (a death nobody asked for still counts as a crash: an OOM kill of an
 * idle worker). Returns 1 when that settled it. */
static int exit_settled(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const struct lifecycle_exit *x)
{
	go(l, fx, W_NONE);
	if (fx->shutting_down())
		return 1;
	if (x->compacts && x->clean) {
		/* Asked to compact while it was stopping: a new one does it
		 * (it is sent the compactions when it starts), and whatever
		 * else the conversation owes. */
		start(l, o, fx, x);
		return 1;
	}
	if (!fx->conv_active(o)) {
		if (x->unasked)
			fx->count(M_CRASHES);
		return 1;
	}
	return 0;
}

static void exit_live(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	const struct lifecycle_exit *x = arg;
	if (exit_settled(l, o, fx, x))
		return;
	if (x->clean && l->wake_pending)
		start(l, o, fx, arg); /* it stopped as work arrived */
	else
		crashed(l, o, fx, x);
}

static void exit_stopping(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	const struct lifecycle_exit *x = arg;
	if (exit_settled(l, o, fx, x))
		return;
	/* Ended by agentd's own signal (a stop's SIGTERM, an operator's kill
	 * while it stopped): a stop, not a crash. */
	if (!x->clean && x->unasked)
		crashed(l, o, fx, x);
	else if (l->wake_pending)
		start(l, o, fx, arg); /* work arrived as it stopped */
	/* else told to stop: it revives on the next event */
}

/* Evicted or yielding its slot, yet active: work arrived as it was told to
 * stop (a wake crossing the stop), and nothing else will restart it. */
static void exit_evicting(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	const struct lifecycle_exit *x = arg;
	if (exit_settled(l, o, fx, x))
		return;
	if (!x->clean) {
		crashed(l, o, fx, x);
	} else if (!fx->queue_empty()) {
		go(l, fx, W_QUEUED); /* it gave its slot away: wait behind those queued */
		fx->queue_push(o);
	} else {
		start(l, o, fx, arg);
	}
}

/* Killed by an operator: what it owed is run at once by a new worker,
 * without a crash counted, so repeated kills never reach the crash-loop
 * limit (a crash nobody asked for is counted in the other states). */
static void exit_killing(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	const struct lifecycle_exit *x = arg;
	if (exit_settled(l, o, fx, x))
		return;
	start(l, o, fx, arg);
}

static void exit_recreating(struct lifecycle *l, void *o, const struct lifecycle_fx *fx, const void *arg)
{
	go(l, fx, W_NONE);
	start(l, o, fx, arg);
}

/* ---- the table ---------------------------------------------------------- */

/* A cell left NULL is an event that cannot happen in that state (a report
 * from a process that does not exist) or changes nothing there: ignored. */
static action *const actions[W_NSTATES][E_NEVENTS] = {
	[W_NONE] = { [E_WORK] = start, [E_SPAWNED] = spawned, [E_SPAWN_FAILED] = spawn_failed,
		     [E_SPAWN_WAIT] = spawn_wait },
	[W_QUEUED] = { [E_DELETE] = unqueue, [E_SHUTDOWN] = unqueue, [E_SLOT] = dequeued },
	[W_BACKOFF] = { [E_DELETE] = to_none, [E_SHUTDOWN] = to_none, [E_TIMER] = backoff_over },
	[W_STARTING] = { [E_WORK] = wake, [E_READY] = ready, [E_RUNNING] = to_running, [E_IDLE] = to_idle,
			 [E_AWAITING] = to_awaiting, [E_STOP] = stop, [E_DELETE] = kill_deleted,
			 [E_SHUTDOWN] = stop, [E_EXIT] = exit_live, [E_KILL] = killed },
	[W_RUNNING] = { [E_WORK] = wake, [E_RUNNING] = to_running, [E_IDLE] = to_idle, [E_AWAITING] = to_awaiting,
			[E_STOP] = stop, [E_DELETE] = kill_deleted, [E_SHUTDOWN] = stop, [E_EXIT] = exit_live,
			[E_KILL] = killed },
	[W_IDLE] = { [E_WORK] = wake_idle, [E_RUNNING] = to_running, [E_IDLE] = to_idle, [E_AWAITING] = to_awaiting,
		     [E_STOP] = stop, [E_EVICT] = evict, [E_DELETE] = kill_deleted, [E_SHUTDOWN] = stop,
		     [E_EXIT] = exit_live, [E_KILL] = killed },
	[W_AWAITING] = { [E_WORK] = wake_idle, [E_RUNNING] = to_running, [E_IDLE] = to_idle,
			 [E_AWAITING] = to_awaiting, [E_STOP] = stop, [E_EVICT] = evict, [E_DELETE] = kill_deleted,
			 [E_SHUTDOWN] = stop, [E_EXIT] = exit_live, [E_KILL] = killed },
	[W_STOPPING] = { [E_WORK] = owe, [E_DELETE] = kill_deleted, [E_EXIT] = exit_stopping },
	[W_EVICTING] = { [E_WORK] = owe, [E_STOP] = stop, [E_DELETE] = kill_deleted, [E_SHUTDOWN] = stop,
			 [E_EXIT] = exit_evicting, [E_KILL] = killed },
	[W_DELETING] = { [E_WORK] = recreate, [E_EXIT] = to_none },
	[W_RECREATING] = { [E_DELETE] = kill_deleted, [E_EXIT] = exit_recreating },
	[W_KILLING] = { [E_WORK] = owe, [E_STOP] = killed_stop, [E_DELETE] = kill_deleted, [E_SHUTDOWN] = killed_stop,
			[E_EXIT] = exit_killing },
};

void lifecycle_event(struct lifecycle *l, void *owner, const struct lifecycle_fx *fx, int ev, const void *arg)
{
	if (l->state < 0 || l->state >= W_NSTATES || ev < 0 || ev >= E_NEVENTS)
		return;
	action *a = actions[l->state][ev];
	if (a)
		a(l, owner, fx, arg);
}

void lifecycle_init(struct lifecycle *l)
{
	memset(l, 0, sizeof *l);
	l->state = W_NONE;
}

const char *lifecycle_state_name(int state)
{
	/* EVICTING, DELETING, RECREATING and KILLING are stopping to a client. */
	static const char *const names[W_NSTATES] = {
		[W_NONE] = "none", [W_QUEUED] = "queued", [W_BACKOFF] = "backoff", [W_STARTING] = "starting",
		[W_RUNNING] = "running", [W_IDLE] = "idle", [W_AWAITING] = "awaiting_input",
		[W_STOPPING] = "stopping", [W_EVICTING] = "stopping", [W_DELETING] = "stopping",
		[W_RECREATING] = "stopping", [W_KILLING] = "stopping",
	};
	return state >= 0 && state < W_NSTATES ? names[state] : "unknown";
}

int lifecycle_live(int state)
{
	return state >= W_STARTING && state < W_NSTATES;
}
