/*
 * Several conversations locked at once in one write txn
 * (store_convs_lock) (case "convs_lock").
 */
#include <check.h>

#include "tests/conformance/conformance.h"

START_TEST(convs_lock_changes_nothing_later_reads_see)
{
	mkconv("a");
	mkconv("b");
	mkconv("c");
	append_n("b", 2, "user_msg");
	store_txn *t = wbegin();
	const char *ids[] = { "c", "missing", "b", "a", "b" };
	ck_assert_int_eq(store_convs_lock(t, ids, 5), 0);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "b", &c), 0);
	ck_assert(bytes_eq_s(c.id, "b"));
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert_int_eq(store_conv_get(t, "missing", &c), STORE_E_NOTFOUND);
	/* Appends interleaved across the locked conversations: each seq
	 * follows its own conversation's last. */
	uint64_t seq = 0;
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "b", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 3);
	ck_assert_int_eq(store_conv_get(t, "a", &c), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_conv_get(t, "b", &c), 0);
	ck_assert_int_eq(store_event_append(t, "b", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 4);
	/* A change made after the lock is what the next get returns. */
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
	ck_assert_int_eq(store_conv_put(t, "c", &p), 0);
	ck_assert_int_eq(store_conv_get(t, "c", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	ck_assert_int_eq(store_convs_lock(t, ids, 3), 0); /* again, in the same txn */
	struct store_usage u = { 5, 7, 0.5 };
	ck_assert_int_eq(store_usage_add(t, "a", &u), 0);
	ck_assert_int_eq(store_conv_get(t, "a", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, 5);
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 2);
	ck_assert_int_eq(store_conv_get(t, "c", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	ck_assert_int_eq(store_convs_lock(t, NULL, 0), 0);
	commit(t);
	ck_assert_uint_eq(latest("a"), 2);
	ck_assert_uint_eq(latest("b"), 4);
	ck_assert_uint_eq(latest("c"), 0);
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	store_txn_abort(t);
}
END_TEST

START_TEST(convs_lock_bad_args_are_inval_and_keep_the_txn)
{
	mkconv("a");
	const char *bad[] = { "a", "no spaces" };
	const char *none[] = { NULL };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_convs_lock(t, bad, 1), STORE_E_INVAL); /* a read txn */
	store_txn_abort(t);
	t = wbegin();
	ck_assert_int_eq(store_convs_lock(t, bad, 2), STORE_E_INVAL);
	ck_assert_int_eq(store_convs_lock(t, none, 1), STORE_E_INVAL);
	ck_assert_int_eq(store_convs_lock(t, NULL, 1), STORE_E_INVAL);
	uint64_t seq = 0;
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	commit(t);
	ck_assert_uint_eq(latest("a"), 1);
}
END_TEST

void conf_convs_lock_add(TCase *tc)
{
	tcase_add_test(tc, convs_lock_changes_nothing_later_reads_see);
	tcase_add_test(tc, convs_lock_bad_args_are_inval_and_keep_the_txn);
}
