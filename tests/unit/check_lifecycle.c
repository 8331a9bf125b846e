/* The worker lifecycle table (supervisor/lifecycle.c), cell by cell, with
 * recording effects instead of processes: every (state, event) pair is either
 * in the spec below, with the state it must lead to and the effects it must
 * ask for, or must change nothing and ask for nothing. */
#include <check.h>
#include <string.h>

#include "common/log.h"
#include "supervisor/lifecycle.h"
#include "supervisor/metrics.h"
#include "tests/suites.h"

/* Effects, as bits. */
enum {
	F_QPUSH = 1 << 0, F_QREMOVE = 1 << 1, F_YIELD = 1 << 2, F_SPAWN = 1 << 3, F_WAKE = 1 << 4,
	F_STOP = 1 << 5, F_KILL = 1 << 6, F_REARM = 1 << 7, F_GIVEUP = 1 << 8, F_CRASH = 1 << 9,
	F_REVIVAL = 1 << 10, F_SPAWNS = 1 << 11, F_COALESCED = 1 << 12,
};

/* What the world answers. */
struct world {
	int shutting, slot, queue_empty, active, spawn_rc, started_by_commit, wake_rc;
};

static struct world W;
static unsigned done;   /* effects asked */
static int giveup_crashes;
static int64_t clock_ms;
static struct lifecycle *cur; /* for spawn: E_SPAWNED as the real spawn sends it */
static struct lifecycle_fx fx;

static int64_t t_now(void) { return clock_ms; }
static int t_shutting(void) { return W.shutting; }
static int t_slot(void) { return W.slot; }
static int t_qempty(void) { return W.queue_empty; }
static void t_qpush(void *o) { done |= F_QPUSH; }
static void t_qremove(void *o) { done |= F_QREMOVE; }
static void t_yield(void) { done |= F_YIELD; }
static int t_spawn(void *o)
{
	done |= F_SPAWN;
	if (W.spawn_rc == SPAWN_STARTED)
		lifecycle_event(cur, o, &fx, E_SPAWNED, NULL);
	else if (W.spawn_rc < 0)
		lifecycle_event(cur, o, &fx, E_SPAWN_FAILED, NULL);
	else if (W.spawn_rc == SPAWN_WAIT)
		lifecycle_event(cur, o, &fx, E_SPAWN_WAIT, NULL);
	return W.spawn_rc;
}
static int t_sbc(void *o) { return W.started_by_commit; }
static int t_wake(void *o) { done |= F_WAKE; return W.wake_rc; }
static void t_stop(void *o) { done |= F_STOP; }
static void t_kill(void *o) { done |= F_KILL; }
static void t_rearm(void) { done |= F_REARM; }
static int t_active(void *o) { return W.active; }
static void t_count(int m)
{
	done |= m == M_CRASHES ? F_CRASH : m == M_REVIVALS ? F_REVIVAL : m == M_SPAWNS ? F_SPAWNS :
		m == M_WAKES_COALESCED ? F_COALESCED : 0;
}
static void t_giveup(void *o, int crashes, const char *msg) { done |= F_GIVEUP; giveup_crashes = crashes; }
static const char *t_name(void *o) { return "c-test"; }

static struct lifecycle_fx fx = {
	.now = t_now, .shutting_down = t_shutting, .slot_free = t_slot, .queue_empty = t_qempty,
	.queue_push = t_qpush, .queue_remove = t_qremove, .yield_slot = t_yield, .spawn = t_spawn,
	.started_by_commit = t_sbc, .wake = t_wake, .stop = t_stop, .kill = t_kill, .rearm_expiry = t_rearm,
	.conv_active = t_active, .count = t_count, .give_up = t_giveup, .name = t_name,
	.restart_limit = 3, .restart_window_ms = 60000,
};

/* A world where everything works: a slot free, nothing queued, the
 * conversation active, spawns and wakes succeed. */
static const struct world ok = { 0, 1, 1, 1, 0, 0, 0 };

/* Exits: clean; a crash nobody asked for; clean with compactions owed;
 * out of store room; killed by agentd's own signal. */
static const struct lifecycle_exit x_clean = { 1, 0, 0, 0 }, x_crash = { 0, 1, 0, 0 },
				   x_compact = { 1, 0, 0, 1 }, x_full = { 0, 1, 1, 0 }, x_killed = { 0, 0, 0, 0 };

struct cell {
	int state, event;
	struct world w;
	int wake_pending, wake_sent; /* before */
	const struct lifecycle_exit *x;
	int next;
	unsigned effects;
};

#define LIVE_STATES(S) (S == W_STARTING || S == W_RUNNING || S == W_IDLE || S == W_AWAITING)

/* The spec: one row per cell that does something (and a few variants of
 * the world for the cells that decide). */
static const struct cell spec[] = {
	/* NONE */
	{ W_NONE, E_WORK, ok, 0, 0, NULL, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_NONE, E_WORK, { 0, 0, 1, 1, 0, 0, 0 }, 0, 0, NULL, W_QUEUED, F_QPUSH | F_YIELD },
	{ W_NONE, E_WORK, { 1, 1, 1, 1, 0, 0, 0 }, 0, 0, NULL, W_NONE, 0 },
	{ W_NONE, E_WORK, { 0, 1, 1, 1, -1, 0, 0 }, 0, 0, NULL, W_BACKOFF, F_SPAWN },
	{ W_NONE, E_WORK, { 0, 1, 1, 1, 1, 0, 0 }, 0, 0, NULL, W_NONE, F_SPAWN },
	{ W_NONE, E_SPAWNED, ok, 1, 1, NULL, W_STARTING, F_SPAWNS },
	{ W_NONE, E_SPAWN_FAILED, ok, 0, 0, NULL, W_BACKOFF, 0 },
	{ W_NONE, E_WORK, { 0, 1, 1, 1, 2, 0, 0 }, 0, 0, NULL, W_BACKOFF, F_SPAWN },
	{ W_NONE, E_SPAWN_WAIT, ok, 0, 0, NULL, W_BACKOFF, 0 },
	/* QUEUED, BACKOFF */
	{ W_QUEUED, E_DELETE, ok, 0, 0, NULL, W_NONE, F_QREMOVE },
	{ W_QUEUED, E_SHUTDOWN, ok, 0, 0, NULL, W_NONE, F_QREMOVE },
	{ W_QUEUED, E_SLOT, ok, 0, 0, NULL, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_BACKOFF, E_DELETE, ok, 0, 0, NULL, W_NONE, 0 },
	{ W_BACKOFF, E_SHUTDOWN, ok, 0, 0, NULL, W_NONE, 0 },
	{ W_BACKOFF, E_TIMER, ok, 0, 0, NULL, W_STARTING, F_REVIVAL | F_SPAWN | F_SPAWNS },
	{ W_BACKOFF, E_TIMER, { 0, 1, 1, 0, 0, 0, 0 }, 0, 0, NULL, W_NONE, 0 },
	/* live: wakes */
	{ W_STARTING, E_WORK, ok, 0, 0, NULL, W_STARTING, F_WAKE },
	{ W_RUNNING, E_WORK, ok, 0, 0, NULL, W_RUNNING, F_WAKE },
	{ W_RUNNING, E_WORK, ok, 0, 1, NULL, W_RUNNING, F_COALESCED },
	{ W_RUNNING, E_WORK, { 0, 1, 1, 1, 0, 1, 0 }, 0, 0, NULL, W_RUNNING, 0 },
	{ W_IDLE, E_WORK, ok, 0, 0, NULL, W_RUNNING, F_WAKE },
	{ W_IDLE, E_WORK, { 0, 1, 1, 1, 0, 0, -1 }, 0, 0, NULL, W_IDLE, F_WAKE },
	{ W_AWAITING, E_WORK, ok, 0, 0, NULL, W_RUNNING, F_WAKE },
	{ W_AWAITING, E_WORK, ok, 0, 1, NULL, W_RUNNING, F_COALESCED },
	/* live: reports */
	{ W_STARTING, E_READY, ok, 0, 0, NULL, W_RUNNING, 0 },
	{ W_STARTING, E_RUNNING, ok, 0, 0, NULL, W_RUNNING, 0 },
	{ W_STARTING, E_IDLE, ok, 0, 0, NULL, W_IDLE, 0 },
	{ W_STARTING, E_AWAITING, ok, 0, 0, NULL, W_AWAITING, F_REARM },
	{ W_RUNNING, E_RUNNING, ok, 0, 0, NULL, W_RUNNING, 0 },
	{ W_RUNNING, E_IDLE, ok, 0, 0, NULL, W_IDLE, 0 },
	{ W_RUNNING, E_IDLE, { 0, 0, 0, 1, 0, 0, 0 }, 0, 0, NULL, W_EVICTING, F_STOP },
	{ W_RUNNING, E_AWAITING, ok, 0, 0, NULL, W_AWAITING, F_REARM },
	{ W_RUNNING, E_AWAITING, { 0, 0, 0, 1, 0, 0, 0 }, 0, 0, NULL, W_EVICTING, F_REARM | F_STOP },
	{ W_IDLE, E_RUNNING, ok, 0, 0, NULL, W_RUNNING, 0 },
	{ W_IDLE, E_IDLE, ok, 0, 0, NULL, W_IDLE, 0 },
	{ W_IDLE, E_AWAITING, ok, 0, 0, NULL, W_AWAITING, F_REARM },
	{ W_AWAITING, E_RUNNING, ok, 0, 0, NULL, W_RUNNING, 0 },
	{ W_AWAITING, E_IDLE, ok, 0, 0, NULL, W_IDLE, 0 },
	{ W_AWAITING, E_AWAITING, ok, 0, 0, NULL, W_AWAITING, F_REARM },
	/* live: stop, evict, delete, shutdown */
	{ W_STARTING, E_STOP, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_RUNNING, E_STOP, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_IDLE, E_STOP, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_AWAITING, E_STOP, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_IDLE, E_EVICT, ok, 0, 0, NULL, W_EVICTING, F_STOP },
	{ W_AWAITING, E_EVICT, ok, 0, 0, NULL, W_EVICTING, F_STOP },
	{ W_STARTING, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_RUNNING, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_IDLE, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_AWAITING, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_STARTING, E_SHUTDOWN, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_RUNNING, E_SHUTDOWN, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_IDLE, E_SHUTDOWN, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_AWAITING, E_SHUTDOWN, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	/* live: exits */
	{ W_RUNNING, E_EXIT, ok, 0, 0, &x_crash, W_BACKOFF, F_CRASH },
	{ W_RUNNING, E_EXIT, ok, 0, 0, &x_clean, W_BACKOFF, F_CRASH },
	{ W_RUNNING, E_EXIT, ok, 1, 0, &x_clean, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_RUNNING, E_EXIT, ok, 0, 0, &x_full, W_NONE, F_CRASH | F_GIVEUP },
	{ W_RUNNING, E_EXIT, ok, 0, 0, &x_compact, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_RUNNING, E_EXIT, { 0, 1, 1, 0, 0, 0, 0 }, 0, 0, &x_crash, W_NONE, F_CRASH },
	{ W_RUNNING, E_EXIT, { 0, 1, 1, 0, 0, 0, 0 }, 0, 0, &x_clean, W_NONE, 0 },
	{ W_RUNNING, E_EXIT, { 1, 1, 1, 1, 0, 0, 0 }, 0, 0, &x_crash, W_NONE, 0 },
	{ W_STARTING, E_EXIT, ok, 0, 0, &x_crash, W_BACKOFF, F_CRASH },
	{ W_IDLE, E_EXIT, ok, 0, 0, &x_crash, W_BACKOFF, F_CRASH },
	{ W_AWAITING, E_EXIT, ok, 0, 0, &x_crash, W_BACKOFF, F_CRASH },
	/* live: an operator's kill (the signal sent by the caller) */
	{ W_STARTING, E_KILL, ok, 0, 0, NULL, W_KILLING, 0 },
	{ W_RUNNING, E_KILL, ok, 0, 0, NULL, W_KILLING, 0 },
	{ W_IDLE, E_KILL, ok, 0, 0, NULL, W_KILLING, 0 },
	{ W_AWAITING, E_KILL, ok, 0, 0, NULL, W_KILLING, 0 },
	{ W_EVICTING, E_KILL, ok, 0, 0, NULL, W_KILLING, 0 },
	/* KILLING: its exit is no crash; revived at once when active */
	{ W_KILLING, E_WORK, ok, 0, 0, NULL, W_KILLING, 0 },
	{ W_KILLING, E_STOP, ok, 0, 0, NULL, W_STOPPING, 0 },
	{ W_KILLING, E_SHUTDOWN, ok, 0, 0, NULL, W_STOPPING, 0 },
	{ W_KILLING, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_KILLING, E_EXIT, ok, 0, 0, &x_killed, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_KILLING, E_EXIT, ok, 0, 0, &x_clean, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_KILLING, E_EXIT, { 0, 1, 1, 0, 0, 0, 0 }, 0, 0, &x_killed, W_NONE, 0 },
	{ W_KILLING, E_EXIT, { 0, 1, 1, 0, 0, 0, 0 }, 1, 0, &x_killed, W_NONE, 0 },
	{ W_KILLING, E_EXIT, { 1, 1, 1, 1, 0, 0, 0 }, 0, 0, &x_killed, W_NONE, 0 },
	/* STOPPING */
	{ W_STOPPING, E_WORK, ok, 0, 0, NULL, W_STOPPING, 0 },
	{ W_STOPPING, E_EXIT, ok, 0, 0, &x_killed, W_NONE, 0 },
	{ W_STOPPING, E_EXIT, ok, 1, 0, &x_killed, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_STOPPING, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_STOPPING, E_EXIT, ok, 0, 0, &x_clean, W_NONE, 0 },
	{ W_STOPPING, E_EXIT, ok, 1, 0, &x_clean, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_STOPPING, E_EXIT, ok, 0, 0, &x_crash, W_BACKOFF, F_CRASH },
	{ W_STOPPING, E_EXIT, ok, 0, 0, &x_compact, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_STOPPING, E_EXIT, { 1, 1, 1, 1, 0, 0, 0 }, 1, 0, &x_clean, W_NONE, 0 },
	/* EVICTING */
	{ W_EVICTING, E_WORK, ok, 0, 0, NULL, W_EVICTING, 0 },
	{ W_EVICTING, E_STOP, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_EVICTING, E_SHUTDOWN, ok, 0, 0, NULL, W_STOPPING, F_STOP },
	{ W_EVICTING, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_EVICTING, E_EXIT, ok, 0, 0, &x_clean, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_EVICTING, E_EXIT, { 0, 1, 0, 1, 0, 0, 0 }, 0, 0, &x_clean, W_QUEUED, F_QPUSH },
	{ W_EVICTING, E_EXIT, { 0, 1, 1, 0, 0, 0, 0 }, 0, 0, &x_clean, W_NONE, 0 },
	{ W_EVICTING, E_EXIT, ok, 0, 0, &x_crash, W_BACKOFF, F_CRASH },
	/* DELETING, RECREATING */
	{ W_DELETING, E_WORK, ok, 0, 0, NULL, W_RECREATING, 0 },
	{ W_DELETING, E_EXIT, ok, 0, 0, &x_crash, W_NONE, 0 },
	{ W_RECREATING, E_DELETE, ok, 0, 0, NULL, W_DELETING, F_KILL },
	{ W_RECREATING, E_EXIT, ok, 0, 0, &x_crash, W_STARTING, F_SPAWN | F_SPAWNS },
	{ W_RECREATING, E_EXIT, { 1, 1, 1, 1, 0, 0, 0 }, 0, 0, &x_crash, W_NONE, 0 },
};

static void run(struct lifecycle *l, const struct cell *c)
{
	log_init("check_lifecycle", LOG_ERROR);
	lifecycle_init(l);
	l->state = c->state;
	l->wake_pending = c->wake_pending;
	l->wake_sent = c->wake_sent;
	W = c->w;
	done = 0;
	cur = l;
	clock_ms = 1000000;
	lifecycle_event(l, l, &fx, c->event, c->event == E_EXIT ? (const void *)(c->x ? c->x : &x_crash) : NULL);
}

START_TEST(every_cell_in_the_spec)
{
	for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
		struct lifecycle l;
		run(&l, &spec[i]);
		ck_assert_msg(l.state == spec[i].next && done == spec[i].effects,
			      "spec row %zu (%s, event %d): state %s effects %#x, want %s %#x", i,
			      lifecycle_state_name(spec[i].state), spec[i].event, lifecycle_state_name(l.state), done,
			      lifecycle_state_name(spec[i].next), spec[i].effects);
	}
}
END_TEST

static int in_spec(int st, int ev)
{
	for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++)
		if (spec[i].state == st && spec[i].event == ev)
			return 1;
	return 0;
}

/* A cell not in the spec does nothing, in any world. */
START_TEST(cells_outside_the_spec_do_nothing)
{
	const struct world worlds[] = { ok, { 1, 0, 0, 0, -1, 1, -1 } };
	for (int st = 0; st < W_NSTATES; st++)
		for (int ev = 0; ev < E_NEVENTS; ev++) {
			if (in_spec(st, ev))
				continue;
			for (size_t k = 0; k < 2; k++) {
				struct cell c = { st, ev, worlds[k], 0, 0, &x_crash, st, 0 };
				struct lifecycle l;
				run(&l, &c);
				ck_assert_msg(l.state == st && done == 0, "(%s, event %d) changed to %s with effects %#x",
					      lifecycle_state_name(st), ev, lifecycle_state_name(l.state), done);
			}
		}
}
END_TEST

/* Each live state's exit is specified: no process outlives the table. */
START_TEST(every_live_state_specifies_its_exit)
{
	for (int st = 0; st < W_NSTATES; st++)
		ck_assert_msg(lifecycle_live(st) == in_spec(st, E_EXIT), "%s", lifecycle_state_name(st));
}
END_TEST

/* The restart policy: backoff doubles from 100 ms, and the restart_limit-th
 * crash within the window gives up with that count. */
START_TEST(crash_loop_backs_off_then_gives_up)
{
	struct lifecycle l;
	log_init("check_lifecycle", LOG_ERROR);
	lifecycle_init(&l);
	W = ok;
	cur = &l;
	clock_ms = 5000;
	int64_t want[] = { 100, 200 };
	for (int i = 0; i < 2; i++) {
		l.state = W_RUNNING;
		done = 0;
		lifecycle_event(&l, &l, &fx, E_EXIT, &x_crash);
		ck_assert_int_eq(l.state, W_BACKOFF);
		ck_assert_int_eq(l.restart_at - clock_ms, want[i]);
	}
	l.state = W_RUNNING;
	done = 0;
	lifecycle_event(&l, &l, &fx, E_EXIT, &x_crash);
	ck_assert_uint_eq(done, F_CRASH | F_GIVEUP);
	ck_assert_int_eq(giveup_crashes, 3);
	ck_assert_int_eq(l.ncrash, 0);
	/* Crashes older than the window do not count. */
	clock_ms += 120000;
	l.state = W_RUNNING;
	lifecycle_event(&l, &l, &fx, E_EXIT, &x_crash);
	ck_assert_int_eq(l.state, W_BACKOFF);
	ck_assert_int_eq(l.restart_at - clock_ms, 100);
}
END_TEST

/* A worker of an earlier agentd still runs for the conversation: look again
 * soon, not after a crash's backoff, and count no crash. */
START_TEST(spawn_wait_looks_again_soon)
{
	struct lifecycle l;
	log_init("check_lifecycle", LOG_ERROR);
	lifecycle_init(&l);
	W = ok;
	W.spawn_rc = SPAWN_WAIT;
	cur = &l;
	clock_ms = 5000;
	done = 0;
	lifecycle_event(&l, &l, &fx, E_WORK, NULL);
	ck_assert_int_eq(l.state, W_BACKOFF);
	ck_assert_int_eq(l.restart_at - clock_ms, SPAWN_WAIT_MS);
	ck_assert_uint_eq(done, F_SPAWN);
	ck_assert_int_eq(l.ncrash, 0);
	W.spawn_rc = 0;
	clock_ms += SPAWN_WAIT_MS;
	lifecycle_event(&l, &l, &fx, E_TIMER, NULL);
	ck_assert_int_eq(l.state, W_STARTING);
}
END_TEST

/* An operator's kills never reach the crash-loop limit: each exit after
 * E_KILL revives at once and counts nothing. */
START_TEST(operator_kills_are_not_crashes)
{
	struct lifecycle l;
	log_init("check_lifecycle", LOG_ERROR);
	lifecycle_init(&l);
	W = ok;
	cur = &l;
	clock_ms = 5000;
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(l.state, i ? W_STARTING : W_NONE);
		l.state = W_RUNNING;
		done = 0;
		lifecycle_event(&l, &l, &fx, E_KILL, NULL);
		lifecycle_event(&l, &l, &fx, E_EXIT, &x_killed);
		ck_assert_uint_eq(done, F_SPAWN | F_SPAWNS);
		ck_assert_int_eq(l.ncrash, 0);
	}
	cur = NULL;
}
END_TEST

/* Names a client sees: the states agentd adds to stopping read as it. */
START_TEST(state_names_keep_the_protocol)
{
	ck_assert_str_eq(lifecycle_state_name(W_AWAITING), "awaiting_input");
	ck_assert_str_eq(lifecycle_state_name(W_EVICTING), "stopping");
	ck_assert_str_eq(lifecycle_state_name(W_DELETING), "stopping");
	ck_assert_str_eq(lifecycle_state_name(W_RECREATING), "stopping");
	ck_assert_str_eq(lifecycle_state_name(W_KILLING), "stopping");
	ck_assert_str_eq(lifecycle_state_name(W_NSTATES), "unknown");
	ck_assert_str_eq(lifecycle_state_name(-1), "unknown");
}
END_TEST

Suite *make_lifecycle_suite(void)
{
	Suite *s = suite_create("lifecycle");
	TCase *tc = tcase_create("table");
	tcase_add_test(tc, every_cell_in_the_spec);
	tcase_add_test(tc, cells_outside_the_spec_do_nothing);
	tcase_add_test(tc, every_live_state_specifies_its_exit);
	tcase_add_test(tc, crash_loop_backs_off_then_gives_up);
	tcase_add_test(tc, spawn_wait_looks_again_soon);
	tcase_add_test(tc, state_names_keep_the_protocol);
	tcase_add_test(tc, operator_kills_are_not_crashes);
	suite_add_tcase(s, tc);
	return s;
}
