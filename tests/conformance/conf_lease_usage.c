/*
 * Leases and usage: the lease counter and its fence, lazy writes, usage
 * and turn counters that accumulate and saturate (case "lease_usage").
 */
#include <check.h>
#include <float.h>
#include <limits.h>
#include <math.h>

#include "tests/conformance/conformance.h"

START_TEST(lease_next_increments_and_check_fences)
{
	mkconv("c1");
	mkconv("c2");
	store_txn *t = wbegin();
	uint64_t gen = 0;
	ck_assert_int_eq(store_lease_check(t, "c1", 0), 0); /* 0 before any worker */
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_uint_eq(gen, 1);
	ck_assert_int_eq(store_lease_check(t, "c1", 1), 0);
	ck_assert_int_eq(store_lease_check(t, "c1", 0), STORE_E_FENCED);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_uint_eq(gen, 2);
	commit(t);
	t = rbegin(); /* a check reads: a read txn will do */
	ck_assert_int_eq(store_lease_check(t, "c1", 2), 0);
	ck_assert_int_eq(store_lease_check(t, "c1", 1), STORE_E_FENCED); /* superseded */
	ck_assert_int_eq(store_lease_check(t, "c1", 3), STORE_E_FENCED); /* never issued */
	ck_assert_int_eq(store_lease_check(t, "c2", 0), 0);              /* per conversation */
	ck_assert_int_eq(store_lease_check(t, "c2", 2), STORE_E_FENCED);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.lease, 2);
	store_txn_abort(t);
}
END_TEST

/* A lazy write commits like any other (only its flush is deferred): visible
 * at once, to this handle and after a store_sync. */
START_TEST(lazy_write_commits_and_is_visible)
{
	mkconv("c1");
	store_txn *t;
	uint64_t gen = 0;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE_LAZY, &t), 0);
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(store_sync(S), 0);
	t = rbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", gen), 0);
	store_txn_abort(t);
	/* and the next ordinary write goes on as usual */
	t = wbegin();
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	commit(t);
	ck_assert_int_eq(store_txn_begin(S, 7, &t), STORE_E_INVAL);
}
END_TEST

/* A worker left over from a deleted conversation must not hold the lease of
 * a new conversation created with the same id. */
START_TEST(lease_not_reissued_after_delete)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t old = 0, gen = 0;
	ck_assert_int_eq(store_lease_next(t, "c1", &old), 0);
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), 0);
	ck_assert_int_eq(store_lease_check(t, "c1", old), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_uint_gt(gen, old);
	ck_assert_int_eq(store_lease_check(t, "c1", old), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_check(t, "c1", gen), 0);
	commit(t);
}
END_TEST

START_TEST(lease_fenced_writer_txn_stays_usable)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t gen;
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", gen - 1), STORE_E_FENCED);
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	ck_assert_uint_eq(latest("c1"), 1);
}
END_TEST

START_TEST(usage_add_accumulates)
{
	mkconv("c1");
	mkconv("c2");
	store_txn *t = wbegin();
	struct store_usage a = { 100, 20, 0.25 }, b = { 5, 7, 0.5 };
	ck_assert_int_eq(store_usage_add(t, "c1", &a), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &b), 0);
	commit(t);
	NOW = T0 + 9;
	t = wbegin();
	ck_assert_int_eq(store_usage_add(t, "c1", &a), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, 205);
	ck_assert_uint_eq(c.usage.output_tokens, 47);
	ck_assert_double_eq_tol(c.usage.cost, 1.0, 1e-12);
	ck_assert_int_eq(store_conv_get(t, "c2", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, 0);
	ck_assert(c.usage.cost == 0);
	store_txn_abort(t);
}
END_TEST

/* Turns count apart from usage, per conversation, from 0; they survive a
 * reopen and every other change to the record, and saturate. */
START_TEST(turns_add_counts)
{
	mkconv("c1");
	mkconv("c2");
	store_txn *t = wbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.turns, 0);
	ck_assert_int_eq(store_turns_add(t, "c1", 1), 0);
	ck_assert_int_eq(store_turns_add(t, "c1", 2), 0);
	struct store_usage u = { 10, 5, 0.5 };
	ck_assert_int_eq(store_usage_add(t, "c1", &u), 0);
	ck_assert_int_eq(store_turns_add(t, "nope", 1), STORE_E_NOTFOUND);
	commit(t);
	set_status("c1", STORE_PAUSED);
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.turns, 3);
	ck_assert_uint_eq(c.usage.input_tokens, 10);
	ck_assert_int_eq(c.status, STORE_PAUSED);
	ck_assert_int_eq(store_conv_get(t, "c2", &c), 0);
	ck_assert_uint_eq(c.turns, 0);
	store_txn_abort(t);
	t = wbegin();
	ck_assert_int_eq(store_turns_add(t, "c2", (uint64_t)INT64_MAX - 1), 0);
	ck_assert_int_eq(store_turns_add(t, "c2", 5), 0);
	ck_assert_int_eq(store_conv_get(t, "c2", &c), 0);
	ck_assert_uint_eq(c.turns, (uint64_t)INT64_MAX);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_turns_add(t, "c1", 1), STORE_E_INVAL); /* a read transaction */
	store_txn_abort(t);
}
END_TEST

/* Totals saturate where JSON can still show them: tokens at INT64_MAX, the
 * cost at DBL_MAX, never infinite; a NaN or negative cost is refused. */
START_TEST(usage_add_saturates)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_usage big = { (uint64_t)INT64_MAX - 1, UINT64_MAX, 1e308 }, one = { 1, 1, 1e308 };
	ck_assert_int_eq(store_usage_add(t, "c1", &big), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &one), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &one), 0);
	struct store_usage nan_cost = { 0, 0, NAN }, neg = { 0, 0, -1 };
	ck_assert_int_eq(store_usage_add(t, "c1", &nan_cost), STORE_E_INVAL);
	ck_assert_int_eq(store_usage_add(t, "c1", &neg), STORE_E_INVAL);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, (uint64_t)INT64_MAX);
	ck_assert_uint_eq(c.usage.output_tokens, (uint64_t)INT64_MAX);
	ck_assert(c.usage.cost == DBL_MAX);
	store_txn_abort(t);
}
END_TEST

void conf_lease_usage_add(TCase *tc)
{
	tcase_add_test(tc, lease_next_increments_and_check_fences);
	tcase_add_test(tc, lease_not_reissued_after_delete);
	tcase_add_test(tc, lazy_write_commits_and_is_visible);
	tcase_add_test(tc, lease_fenced_writer_txn_stays_usable);
	tcase_add_test(tc, usage_add_accumulates);
	tcase_add_test(tc, usage_add_saturates);
	tcase_add_test(tc, turns_add_counts);
}
