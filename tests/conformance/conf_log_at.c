/*
 * Logs that begin after seq 1 (store_conv_create_at): their base, the
 * summary standing in for what came before, their rules (case "log_at").
 */
#include <check.h>
#include <limits.h>

#include "tests/conformance/conformance.h"

static void mkconv_at(const char *id, uint64_t first)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create_at(t, id, mmap0(), first), 0);
	commit(t);
}

static uint64_t first_seq(const char *conv)
{
	store_txn *t = rbegin();
	uint64_t seq = 99;
	ck_assert_int_eq(store_event_first_seq(t, conv, &seq), 0);
	store_txn_abort(t);
	return seq;
}

START_TEST(log_at_starts_after_its_base)
{
	mkconv_at("f", 101);
	/* No event yet: the last seq is the base, in a read and in a write txn. */
	ck_assert_uint_eq(latest("f"), 100);
	ck_assert_uint_eq(first_seq("f"), 101);
	ck_assert_int_eq(stream("f", 0, 0, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("f", 0, 0, 5, NULL), 0);
	EXPECT_NO_EVENTS();
	store_txn *t = wbegin();
	uint64_t seq = 0, seqs[3];
	ck_assert_int_eq(store_event_latest_seq(t, "f", &seq), 0);
	ck_assert_uint_eq(seq, 100);
	struct store_event_in e = ev("user_msg", mstr("a"), "k1");
	ck_assert_int_eq(store_event_append(t, "f", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 101);
	struct store_event_in b[3] = { ev("assistant_msg", mstr("b"), NULL), ev("user_msg", mstr("c"), "k1"),
				       ev("user_msg", mstr("d"), NULL) };
	int dups[3];
	ck_assert_int_eq(store_events_append(t, "f", b, 3, seqs, dups), 0);
	ck_assert_uint_eq(seqs[0], 102);
	ck_assert_uint_eq(seqs[1], 101); /* the event_id's original seq */
	ck_assert_int_eq(dups[1], 1);
	ck_assert_uint_eq(seqs[2], 103);
	commit(t);
	ck_assert_uint_eq(latest("f"), 103);
	ck_assert_uint_eq(first_seq("f"), 101);
	/* A range that starts before the log delivers from its first seq. */
	ck_assert_int_eq(stream("f", 0, 0, 0, NULL), 0);
	expect_run(101, 103);
	ck_assert_int_eq(stream("f", 50, 103, 0, NULL), 0);
	EXPECT_SEQS(101, 102);
	ck_assert_int_eq(stream("f", 0, 0, 10, NULL), 0);
	expect_run(101, 103);
	ck_assert_int_eq(stream("f", 0, 0, 2, NULL), 0);
	EXPECT_SEQS(102, 103);
	ck_assert_int_eq(stream("f", 0, 0, 10, "user_msg"), 0);
	EXPECT_SEQS(101, 103);
	ck_assert_int_eq(stream("f", 101, 0, 0, NULL), 0);
	EXPECT_SEQS(102, 103);
	t = rbegin();
	ck_assert_int_eq(store_event_id_seq(t, "f", "k1", 2, &seq), 0);
	ck_assert_uint_eq(seq, 101);
	store_txn_abort(t);
	/* What it holds outlives a reopen. */
	reopen_store();
	ck_assert_uint_eq(first_seq("f"), 101);
	ck_assert_uint_eq(latest("f"), 103);
}
END_TEST

START_TEST(log_at_takes_a_summary_of_what_it_stands_in_for)
{
	mkconv_at("f", 41);
	/* The summary that stands in for 1..40: to_seq up to the last seq, as always. */
	store_txn *t = wbegin();
	ck_assert_int_eq(store_summary_put(t, "f", 1, 41, mstr("s"), NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_put(t, "f", 1, 40, mstr("s40"), NULL), 0);
	store_txn_abort(t);
	put_summary("f", 1, 40, mstr("s40"), 1);
	struct store_summary sum;
	int has = 0;
	ck_assert_int_eq(load_since("f", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 40);
	EXPECT_NO_EVENTS();
	append_n("f", 4, "user_msg");
	ck_assert_int_eq(load_since("f", &sum, &has), 0);
	expect_run(41, 44);
	put_summary("f", 41, 42, mstr("s42"), 2);
	ck_assert_int_eq(load_since("f", &sum, &has), 0);
	ck_assert_uint_eq(sum.to_seq, 42);
	EXPECT_SEQS(43, 44);
	/* Without a summary load_since reads the whole (shorter) log. */
	mkconv_at("g", 7);
	append_n("g", 2, "user_msg");
	ck_assert_int_eq(load_since("g", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	EXPECT_SEQS(7, 8);
}
END_TEST

START_TEST(log_at_rules_and_delete)
{
	/* An ordinary conversation's log begins at 1; create_at(1) is create. */
	mkconv("c");
	ck_assert_uint_eq(first_seq("c"), 1);
	mkconv_at("one", 1);
	ck_assert_uint_eq(first_seq("one"), 1);
	ck_assert_uint_eq(latest("one"), 0);
	store_txn *t = wbegin();
	uint64_t seq;
	ck_assert_int_eq(store_conv_create_at(t, "c", mmap0(), 5), STORE_E_CONFLICT);
	ck_assert_int_eq(store_conv_create_at(t, "z", mmap0(), 0), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create_at(t, "z", mmap0(), (uint64_t)INT64_MAX + 1), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create_at(t, "bad id", mmap0(), 5), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create_at(t, "z", mstr("not a map"), 5), STORE_E_INVAL);
	ck_assert_int_eq(store_event_first_seq(t, "nope", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_first_seq(t, "c", NULL), STORE_E_INVAL);
	/* each refusal left the txn usable, and nothing written */
	ck_assert_int_eq(store_conv_create_at(t, "d", mmap0(), 5), 0);
	ck_assert_int_eq(store_event_latest_seq(t, "d", &seq), 0);
	ck_assert_uint_eq(seq, 4);
	commit(t);
	t = rbegin();
	struct store_conv cv;
	ck_assert_int_eq(store_conv_get(t, "z", &cv), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_get(t, "d", &cv), 0);
	ck_assert_int_eq(cv.status, STORE_IDLE);
	store_txn_abort(t);
	/* Created and deleted in one txn, or deleted later: nothing of it stays;
	 * the id made again begins at 1. */
	append_n("d", 2, "user_msg");
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "d"), 0);
	ck_assert_int_eq(store_conv_create_at(t, "e", mmap0(), 9), 0);
	ck_assert_int_eq(store_conv_delete(t, "e"), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_event_first_seq(t, "d", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_first_seq(t, "e", &seq), STORE_E_NOTFOUND);
	store_txn_abort(t);
	mkconv("d");
	ck_assert_uint_eq(first_seq("d"), 1);
	ck_assert_uint_eq(latest("d"), 0);
	append_n("d", 1, "user_msg");
	ck_assert_uint_eq(latest("d"), 1);
	/* An aborted create_at leaves nothing. */
	t = wbegin();
	ck_assert_int_eq(store_conv_create_at(t, "gone", mmap0(), 3), 0);
	store_txn_abort(t);
	t = rbegin();
	ck_assert_int_eq(store_event_first_seq(t, "gone", &seq), STORE_E_NOTFOUND);
	store_txn_abort(t);
	mkconv("gone");
	ck_assert_uint_eq(first_seq("gone"), 1);
}
END_TEST

void conf_log_at_add(TCase *tc)
{
	tcase_add_test(tc, log_at_starts_after_its_base);
	tcase_add_test(tc, log_at_takes_a_summary_of_what_it_stands_in_for);
	tcase_add_test(tc, log_at_rules_and_delete);
}
