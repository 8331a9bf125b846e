/* The durable frontier (supervisor/durable.c) on a real store: a lazy commit
 * is not covered until the flusher's flush returns; the frontier then covers
 * it and everything before; a read's snapshot id is the last commit's;
 * sync = none and the test-only early ack cover everything at once. */
#include <errno.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/durable.h"
#include "supervisor/loop.h"
#include "tests/suites.h"

static char dir[64];
static store *st;
static uint64_t seen;  /* the frontier the callback was last told */
static int advances;

static void on_advanced(uint64_t frontier)
{
	ck_assert_uint_gt(frontier, seen); /* it only moves forward */
	seen = frontier;
	advances++;
}

static void open_store(int sync)
{
	strcpy(dir, "/tmp/agentd-check-durable-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct store_opts so = { .sync = sync };
	ck_assert_int_eq(store_open(&st, dir, &so), 0);
	ck_assert_int_eq(loop_open(), 0);
}

static void close_store(void)
{
	char f[96];
	store_close(st);
	loop_close();
	snprintf(f, sizeof f, "%s/data.mdb", dir);
	unlink(f);
	snprintf(f, sizeof f, "%s/lock.mdb", dir);
	unlink(f);
	snprintf(f, sizeof f, "%s/flush.lock", dir);
	unlink(f);
	rmdir(dir);
}

/* A lazy commit of a new conversation; its id. */
static uint64_t commit_one(const char *id)
{
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE_LAZY, &t), 0);
	uint64_t txnid = store_txn_id(t);
	ck_assert_int_eq(store_conv_create(t, id, (store_bytes){ "\x80", 1 }), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_uint_eq(store_last_id(st), txnid);
	return txnid;
}

static int more_coming; /* what durable_more_fn answers */
static int more(void)
{
	return more_coming;
}

static uint64_t target;
static int covered(void *arg)
{
	return durable_covers(target);
}

static int before_wait(void *arg)
{
	durable_before_wait();
	return 0;
}

/* Run the loop until id is covered, before_wait run before each wait (the
 * test's timeout stops a hang). */
static void run_until(uint64_t id, int (*before)(void *))
{
	struct loop_hooks h = { before, NULL, covered, NULL };
	target = id;
	if (!durable_covers(id))
		ck_assert_int_eq(loop_run(&h), 0);
}

static void run_until_covered(uint64_t id)
{
	run_until(id, before_wait);
}

/* The frontier over a store with sync = full; free: whether a client is
 * free to send (what more() answers). */
static void open_full(int free)
{
	open_store(STORE_SYNC_FULL);
	unsetenv("AGENTD_TEST_ACK_EARLY");
	ck_assert_int_eq(durable_open(st, 1, on_advanced, more, NULL), 0);
	more_coming = free;
}

static void close_full(void)
{
	more_coming = 0;
	durable_close();
	close_store();
}

START_TEST(a_lazy_commit_is_covered_once_flushed)
{
	open_full(0);
	uint64_t a = commit_one("a"), b = commit_one("b");
	ck_assert_uint_eq(b, a + 1);
	ck_assert(!durable_covers(a) && !durable_covers(b));
	durable_need(a);
	run_until_covered(a);
	/* The flush began after b committed too: it covers both. */
	ck_assert(durable_covers(b));
	ck_assert_uint_ge(seen, b);
	ck_assert_uint_ge(durable_flushes(), 1);
	/* A read sees the last commit: covered. */
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	ck_assert_uint_eq(store_txn_id(t), b);
	store_txn_abort(t);
	/* A later commit is not, until asked for and flushed. */
	uint64_t c = commit_one("c");
	ck_assert(!durable_covers(c));
	durable_need(c);
	run_until_covered(c);
	ck_assert_int_ge(advances, 2);
	/* A later commit's own page flush covers those before it, not itself. */
	uint64_t d = commit_one("d"), e = commit_one("e");
	uint64_t flushes = durable_flushes();
	durable_committed(e);
	ck_assert(durable_covers(d) && !durable_covers(e));
	ck_assert_uint_eq(durable_flushes(), flushes);
	durable_close();
	ck_assert(durable_covers(UINT64_MAX)); /* closed: everything goes out */
	close_store();
}
END_TEST

/* With a client free to send, the flush waits a little for a commit to
 * cover it; with none coming it still starts, after the delay. */
START_TEST(a_flush_is_deferred_while_a_commit_may_come)
{
	open_full(1);
	uint64_t a = commit_one("a");
	durable_need(a);
	durable_before_wait();
	ck_assert(!durable_covers(a));
	/* The next commit arrives within the delay: it covers a, no flush. */
	uint64_t b = commit_one("b");
	durable_committed(b);
	ck_assert(durable_covers(a));
	ck_assert_uint_eq(durable_flushes(), 0);
	/* Nothing more comes: the deferred flush still covers b. */
	durable_need(b);
	run_until_covered(b);
	ck_assert_uint_eq(durable_flushes(), 1);
	close_full();
}
END_TEST

/* A group committed off the loop asks for its flush at once. Asked while
 * one runs, that flush starts as the running one ends: not after the
 * deferral (durable_before_wait), which this loop never calls, so without
 * it the second commit would never be covered. */
static int no_before_wait(void *arg)
{
	return 0;
}

START_TEST(a_flush_asked_at_once_follows_the_running_one)
{
	open_full(1);
	uint64_t a = commit_one("a");
	durable_need(a);
	durable_flush_now(); /* the flusher reads the last id, then flushes */
	uint64_t b = commit_one("b");
	durable_need(b);
	durable_flush_now(); /* the first one has not ended on the loop yet */
	run_until(b, no_before_wait);
	ck_assert(durable_covers(a) && durable_covers(b));
	ck_assert_uint_le(durable_flushes(), 2);
	close_full();
}
END_TEST

static int failed_calls, failed_err;
static void on_failed(int err)
{
	failed_calls++;
	failed_err = err;
}

/* A flush that failed elsewhere (a worker's, a commit's own) stops the
 * frontier for good: no later commit or flush moves it, and the hook is
 * told once. */
START_TEST(a_failed_flush_stops_the_frontier_for_good)
{
	open_store(STORE_SYNC_FULL);
	unsetenv("AGENTD_TEST_ACK_EARLY");
	ck_assert_int_eq(durable_open(st, 1, on_advanced, more, on_failed), 0);
	failed_calls = 0;
	uint64_t a = commit_one("a");
	durable_need(a);
	run_until_covered(a);
	uint64_t b = commit_one("b");
	ck_assert(!durable_covers(b));
	durable_fail(-EIO);
	durable_fail(-EIO);
	ck_assert_int_eq(failed_calls, 1);
	ck_assert_int_eq(failed_err, -EIO);
	ck_assert_int_eq(durable_failed(), -EIO);
	uint64_t c = commit_one("c");
	durable_committed(c);
	durable_flushed(c);
	durable_need(c);
	durable_before_wait();
	durable_flush_now();
	ck_assert(durable_covers(a) && !durable_covers(b) && !durable_covers(c));
	uint64_t id = 0;
	ck_assert_int_eq(durable_flush_here(&id), -EIO);
	ck_assert(!durable_covers(b));
	durable_close();
	/* What waited stays held: its clients were answered unavailable. */
	ck_assert(!durable_covers(b));
	close_store();
}
END_TEST

START_TEST(sync_none_covers_everything_at_once)
{
	open_store(STORE_SYNC_NONE);
	ck_assert_int_eq(durable_open(st, 0, on_advanced, more, NULL), 0);
	uint64_t a = commit_one("a");
	ck_assert(durable_covers(a));
	durable_need(a);
	ck_assert_uint_eq(durable_flushes(), 0);
	durable_close();
	close_store();
}
END_TEST

START_TEST(the_test_only_early_ack_covers_before_the_flush)
{
	open_store(STORE_SYNC_FULL);
	setenv("AGENTD_TEST_ACK_EARLY", "1", 1);
	ck_assert_int_eq(durable_open(st, 1, on_advanced, more, NULL), 0);
	uint64_t a = commit_one("a");
	ck_assert(durable_covers(a));
	ck_assert_uint_eq(durable_flushes(), 0);
	unsetenv("AGENTD_TEST_ACK_EARLY");
	durable_close();
	close_store();
}
END_TEST

Suite *make_durable_suite(void)
{
	Suite *s = suite_create("durable");
	TCase *tc = tcase_create("frontier");
	tcase_add_test(tc, a_lazy_commit_is_covered_once_flushed);
	tcase_add_test(tc, a_flush_is_deferred_while_a_commit_may_come);
	tcase_add_test(tc, a_flush_asked_at_once_follows_the_running_one);
	tcase_add_test(tc, a_failed_flush_stops_the_frontier_for_good);
	tcase_add_test(tc, sync_none_covers_everything_at_once);
	tcase_add_test(tc, the_test_only_early_ack_covers_before_the_flush);
	suite_add_tcase(s, tc);
	return s;
}
