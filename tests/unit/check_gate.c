/* The write gate (supervisor/gate.c) with fake members and a fake clock:
 * grants go one at a time in request order, only from gate_pump; a member
 * that cannot be told is refused and the next one granted; a grant held
 * GATE_HOLD_MS is taken back; a supervisor write waits for the holder's
 * commit, reading its messages, until it commits or is revoked. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/gate.h"
#include "tests/suites.h"
#include "tests/unit/store_dir.h"

struct member {
	struct gate_member gm; /* first: the hooks get it back by a cast */
	const char *name;
	int grant_rc;          /* what telling it returns */
	int granted, refused, drained;
	int commit_after;      /* drains before its `written` (gate_write_begin); -1: never */
	int64_t drain_step;    /* ms the fake clock moves at each drain */
};

static int64_t clock_ms = 1000000;
static int order[16], norder; /* grants, by member index */
static struct member m[4];
static int pipefd[2] = { -1, -1 };
static char dir[64];
static store *st;

static int64_t fake_now(void)
{
	return clock_ms;
}

static int h_grant(struct gate_member *g)
{
	struct member *x = (struct member *)g;
	if (x->grant_rc)
		return x->grant_rc;
	x->granted++;
	order[norder++] = (int)(x - m);
	return 0;
}

static void h_refused(struct gate_member *g, int err)
{
	struct member *x = (struct member *)g;
	ck_assert_int_eq(err, x->grant_rc);
	x->refused++;
}

static void h_drain(struct gate_member *g)
{
	struct member *x = (struct member *)g;
	x->drained++;
	clock_ms += x->drain_step;
	if (x->commit_after >= 0 && x->drained >= x->commit_after)
		gate_release(g); /* its `written` */
}

static int h_fd(struct gate_member *g)
{
	(void)g;
	return pipefd[0]; /* always readable: the wait never sleeps on a real clock */
}

static const char *h_name(struct gate_member *g)
{
	return ((struct member *)g)->name;
}

static pid_t h_pid(struct gate_member *g)
{
	(void)g;
	return 42;
}

static const struct gate_hooks hooks = { h_grant, h_refused, h_drain, h_fd, h_name, h_pid, fake_now };

/* Checked: runs in each test's fork, so the store is never used across one. */
static void setup(void)
{
	memset(m, 0, sizeof m);
	const char *names[] = { "a", "b", "c", "d" };
	for (int i = 0; i < 4; i++) {
		m[i].name = names[i];
		m[i].commit_after = -1;
	}
	norder = 0;
	clock_ms = 1000000;
	ck_assert_int_eq(pipe(pipefd), 0);
	ck_assert_int_eq(write(pipefd[1], "x", 1), 1);
	strcpy(dir, "/tmp/agentd-check-gate-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct store_opts so = { 0 };
	ck_assert_int_eq(store_open(&st, dir, &so), 0);
	gate_init(st, &hooks);
}

static void teardown(void)
{
	store_close(st);
	store_dir_remove(dir);
	close(pipefd[0]);
	close(pipefd[1]);
}

START_TEST(grants_one_at_a_time_in_request_order)
{
	ck_assert_int_eq(gate_ask(&m[2].gm), 0);
	ck_assert_int_eq(gate_ask(&m[0].gm), 0);
	ck_assert_int_eq(gate_ask(&m[1].gm), 0);
	ck_assert(gate_wanted());
	ck_assert_int_eq(norder, 0); /* only gate_pump grants */
	gate_pump();
	ck_assert_int_eq(norder, 1);
	ck_assert_int_eq(order[0], 2);
	ck_assert(gate_busy());
	gate_pump(); /* held: nobody else */
	ck_assert_int_eq(norder, 1);
	gate_release(&m[2].gm);
	ck_assert(!gate_busy());
	gate_pump();
	gate_release(&m[0].gm);
	gate_pump();
	ck_assert_int_eq(norder, 3);
	ck_assert_int_eq(order[1], 0);
	ck_assert_int_eq(order[2], 1);
	gate_release(&m[1].gm);
	ck_assert(!gate_wanted());
}
END_TEST

START_TEST(asking_twice_is_refused)
{
	ck_assert_int_eq(gate_ask(&m[0].gm), 0);
	ck_assert_int_eq(gate_ask(&m[0].gm), -EALREADY); /* waiting */
	gate_pump();
	ck_assert_int_eq(gate_ask(&m[0].gm), -EALREADY); /* holding */
	gate_pump();
	ck_assert_int_eq(m[0].granted, 1);
}
END_TEST

START_TEST(a_member_that_cannot_be_told_is_refused_and_the_next_granted)
{
	m[0].grant_rc = -EPIPE;
	gate_ask(&m[0].gm);
	gate_ask(&m[1].gm);
	gate_pump();
	ck_assert_int_eq(m[0].refused, 1);
	ck_assert_int_eq(m[0].granted, 0);
	ck_assert_int_eq(m[1].granted, 1);
	ck_assert_int_eq(m[0].gm.waiting, 0); /* off the queue: it may ask again */
}
END_TEST

START_TEST(a_member_that_leaves_holds_and_awaits_nothing)
{
	gate_ask(&m[0].gm);
	gate_ask(&m[1].gm);
	gate_ask(&m[2].gm);
	gate_drop(&m[1].gm); /* waiting: taken off the queue */
	gate_pump();
	gate_drop(&m[0].gm); /* holding: the gate is free */
	ck_assert(!gate_busy());
	gate_pump();
	ck_assert_int_eq(norder, 2);
	ck_assert_int_eq(order[0], 0);
	ck_assert_int_eq(order[1], 2);
	ck_assert_int_eq(m[1].granted, 0);
}
END_TEST

START_TEST(a_grant_held_too_long_is_revoked_when_others_wait)
{
	gate_ask(&m[0].gm);
	gate_pump();
	ck_assert_int_eq(gate_deadline(), 0); /* nobody waits behind it: no wake-up owed */
	gate_ask(&m[1].gm);
	ck_assert_int_eq(gate_deadline(), clock_ms + GATE_HOLD_MS);
	clock_ms += GATE_HOLD_MS - 1;
	gate_pump();
	ck_assert_int_eq(m[1].granted, 0); /* not yet */
	clock_ms += 1;
	gate_pump();
	ck_assert_int_eq(m[1].granted, 1); /* taken back from a, given to b */
	gate_release(&m[0].gm);          /* a's late `written` frees nothing of b's */
	ck_assert(gate_busy());
}
END_TEST

START_TEST(busy_revokes_a_grant_past_its_time)
{
	gate_ask(&m[0].gm);
	gate_pump();
	ck_assert(gate_busy());
	clock_ms += GATE_HOLD_MS;
	ck_assert(!gate_busy());
	ck_assert(!gate_wanted());
}
END_TEST

START_TEST(held_writes_owe_a_deadline)
{
	gate_ask(&m[0].gm);
	gate_pump();
	int64_t at = clock_ms + GATE_HOLD_MS;
	gate_hold_writes(1);
	ck_assert_int_eq(gate_deadline(), at);
	gate_hold_writes(0);
	ck_assert_int_eq(gate_deadline(), 0);
}
END_TEST

START_TEST(a_write_waits_for_the_holders_commit)
{
	store_txn *t;
	m[0].commit_after = 3;
	gate_ask(&m[0].gm);
	gate_pump();
	ck_assert_int_eq(gate_write_begin(STORE_WRITE, &t), 0);
	store_txn_abort(t);
	ck_assert_int_eq(m[0].drained, 3); /* read until its `written` */
	ck_assert(!gate_busy());
}
END_TEST

START_TEST(a_write_waits_no_longer_than_the_hold)
{
	store_txn *t;
	m[0].drain_step = 100; /* it never commits; the clock moves as it is read */
	gate_ask(&m[0].gm);
	gate_pump();
	ck_assert_int_eq(gate_write_begin(STORE_WRITE, &t), 0);
	store_txn_abort(t);
	ck_assert_int_eq(m[0].drained, GATE_HOLD_MS / 100);
	ck_assert(!gate_busy()); /* revoked */
}
END_TEST

START_TEST(a_write_with_the_gate_free_does_not_wait)
{
	store_txn *t;
	gate_ask(&m[0].gm); /* asked, not granted */
	ck_assert_int_eq(gate_write_begin(STORE_WRITE, &t), 0);
	store_txn_abort(t);
	ck_assert_int_eq(m[0].drained, 0);
}
END_TEST

Suite *make_gate_suite(void)
{
	Suite *s = suite_create("gate");
	TCase *tc = tcase_create("gate");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, grants_one_at_a_time_in_request_order);
	tcase_add_test(tc, asking_twice_is_refused);
	tcase_add_test(tc, a_member_that_cannot_be_told_is_refused_and_the_next_granted);
	tcase_add_test(tc, a_member_that_leaves_holds_and_awaits_nothing);
	tcase_add_test(tc, a_grant_held_too_long_is_revoked_when_others_wait);
	tcase_add_test(tc, busy_revokes_a_grant_past_its_time);
	tcase_add_test(tc, held_writes_owe_a_deadline);
	tcase_add_test(tc, a_write_waits_for_the_holders_commit);
	tcase_add_test(tc, a_write_waits_no_longer_than_the_hold);
	tcase_add_test(tc, a_write_with_the_gate_free_does_not_wait);
	suite_add_tcase(s, tc);
	return s;
}
