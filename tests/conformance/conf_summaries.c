/*
 * Summaries: store_load_since around them, the latest summary, replacing
 * and versions, bad ranges, listing every summary and restoring one as given
 * (case "summaries").
 */
#include <check.h>
#include <limits.h>
#include <msgpack.h>
#include <string.h>

#include "tests/conformance/conformance.h"

START_TEST(load_since_without_summary)
{
	mkconv("c1");
	append_n("c1", 6, "user_msg");
	struct store_summary sum;
	memset(&sum, 0xff, sizeof sum);
	int has = -1;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	expect_run(1, 6);
	/* sum and has_summary may be NULL */
	ck_assert_int_eq(load_since("c1", NULL, NULL), 0);
	expect_run(1, 6);
	mkconv("empty");
	ck_assert_int_eq(load_since("empty", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(load_since_after_latest_summary)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	put_summary("c1", 1, 4, mstr("s4"), 1);
	put_summary("c1", 1, 7, mstr("s7"), 2);
	struct store_summary sum;
	int has = 0;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 7);
	ck_assert_uint_eq(sum.from_seq, 1);
	ck_assert_uint_eq(sum.version, 2);
	ck_assert(bytes_eq_b(sum.content, mstr("s7")));
	expect_run(8, 10);
	/* a later summary of an earlier range does not move the cut */
	put_summary("c1", 2, 5, mstr("s5"), 3);
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 7);
	expect_run(8, 10);
	/* events appended after the summary are included */
	append_n("c1", 2, "user_msg");
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	expect_run(8, 12);
}
END_TEST

START_TEST(load_since_summary_at_last_seq)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	put_summary("c1", 1, 5, mstr("all"), 1);
	struct store_summary sum;
	int has = 0;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 5);
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(load_since_callback_return_stops)
{
	mkconv("c1");
	append_n("c1", 6, "user_msg");
	put_summary("c1", 1, 2, mstr("s"), 1);
	const int rets[] = { 1, 2, 9 };
	for (size_t i = 0; i < 3; i++) {
		memset(&E, 0, sizeof E);
		E.stop_after = 2;
		E.stop_ret = rets[i];
		store_txn *t = rbegin();
		ck_assert_int_eq(store_load_since(t, "c1", NULL, NULL, collect_ev, &E), rets[i]);
		store_txn_abort(t);
		EXPECT_SEQS(3, 4);
	}
}
END_TEST

/* ---- summaries -------------------------------------------------------- */

START_TEST(summary_latest_none_is_notfound)
{
	mkconv("c1");
	append_n("c1", 3, "user_msg");
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), STORE_E_NOTFOUND);
	store_txn_abort(t);
}
END_TEST

START_TEST(summary_fields_round_trip)
{
	mkconv("c1");
	append_n("c1", 9, "user_msg");
	NOW = T0 + 42;
	store_bytes content = mmap1("summary", "the gist");
	put_summary("c1", 3, 9, content, 1);
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.from_seq, 3);
	ck_assert_uint_eq(sum.to_seq, 9);
	ck_assert_uint_eq(sum.version, 1);
	ck_assert_int_eq(sum.inserted_at, T0 + 42);
	ck_assert(bytes_eq_b(sum.content, content));
	store_txn_abort(t);
}
END_TEST

START_TEST(summary_latest_is_greatest_to_seq)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	put_summary("c1", 1, 8, mstr("s8"), 1);
	put_summary("c1", 1, 3, mstr("s3"), 2);
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.to_seq, 8);
	ck_assert(bytes_eq_b(sum.content, mstr("s8")));
	store_txn_abort(t);
	/* summaries are per conversation */
	mkconv("c2");
	append_n("c2", 2, "user_msg");
	t = rbegin();
	ck_assert_int_eq(store_summary_latest(t, "c2", &sum), STORE_E_NOTFOUND);
	store_txn_abort(t);
	put_summary("c2", 1, 1, mstr("x"), 1); /* versions count per conversation */
}
END_TEST

START_TEST(summary_same_to_seq_replaces)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	put_summary("c1", 1, 5, mstr("first"), 1);
	put_summary("c1", 2, 5, mstr("second"), 2);
	struct store_summary sum;
	int has;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.from_seq, 2);
	ck_assert_uint_eq(sum.to_seq, 5);
	ck_assert_uint_eq(sum.version, 2);
	ck_assert(bytes_eq_b(sum.content, mstr("second")));
	expect_run(6, 10);
}
END_TEST

START_TEST(summary_versions_increment)
{
	mkconv("c1");
	append_n("c1", 20, "user_msg");
	/* every put gets the next version, whatever its to_seq */
	put_summary("c1", 1, 5, mstr("a"), 1);
	put_summary("c1", 1, 10, mstr("b"), 2);
	put_summary("c1", 1, 5, mstr("c"), 3); /* replaces to_seq 5 */
	put_summary("c1", 1, 12, mstr("d"), 4);
	put_summary("c1", 1, 7, mstr("e"), 5);
	put_summary("c1", 1, 12, mstr("f"), 6);
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.version, 6);
	ck_assert_uint_eq(sum.to_seq, 12);
	store_txn_abort(t);
	/* version may be NULL */
	t = wbegin();
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 13, mstr("g"), NULL), 0);
	commit(t);
}
END_TEST

START_TEST(summary_put_rejects_bad_range)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	store_txn *t = wbegin();
	uint64_t ver = 77;
	ck_assert_int_eq(store_summary_put(t, "c1", 4, 3, mstr("x"), &ver), STORE_E_INVAL); /* from > to */
	ck_assert_int_eq(store_summary_put(t, "c1", 0, 0, mstr("x"), &ver), STORE_E_INVAL); /* to 0 */
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 6, mstr("x"), &ver), STORE_E_INVAL); /* past last */
	ck_assert_uint_eq(ver, 77);
	ck_assert_int_eq(store_summary_put(t, "c1", 5, 5, mstr("x"), &ver), 0); /* from == to == last */
	ck_assert_uint_eq(ver, 1);
	commit(t);
	mkconv("empty");
	t = wbegin();
	ck_assert_int_eq(store_summary_put(t, "empty", 1, 1, mstr("x"), NULL), STORE_E_INVAL);
	commit(t);
	t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "empty", &sum), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.version, 1);
	store_txn_abort(t);
}
END_TEST

/* ---- every summary, and a restored one (agentd export/import) --------- */

struct sums {
	struct store_summary s[8];
	size_t n;
	int stop_after, stop_ret;
};

static int collect_sum(void *arg, const struct store_summary *sm)
{
	struct sums *c = arg;
	ck_assert_uint_lt(c->n, 8);
	c->s[c->n] = *sm;
	B(); /* the content lives until the txn ends: keep a copy */
	msgpack_sbuffer_write(pool[npool - 1], sm->content.ptr, sm->content.len);
	c->s[c->n++].content = built();
	return c->stop_after && (int)c->n == c->stop_after ? c->stop_ret : 0;
}

static int list_sums(const char *conv, struct sums *c)
{
	memset(c, 0, sizeof *c);
	store_txn *t = rbegin();
	int rc = store_summaries_list(t, conv, collect_sum, c);
	store_txn_abort(t);
	return rc;
}

START_TEST(summaries_list_every_summary_in_to_seq_order)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	struct sums c;
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 0);
	NOW = T0 + 1;
	put_summary("c1", 1, 8, mstr("s8"), 1);
	NOW = T0 + 2;
	put_summary("c1", 1, 3, mstr("s3"), 2);
	NOW = T0 + 3;
	put_summary("c1", 2, 8, mstr("s8b"), 3); /* replaces to_seq 8 */
	mkconv("c2");
	append_n("c2", 2, "user_msg");
	put_summary("c2", 1, 2, mstr("other"), 1);
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 2);
	ck_assert_uint_eq(c.s[0].to_seq, 3);
	ck_assert_uint_eq(c.s[0].from_seq, 1);
	ck_assert_uint_eq(c.s[0].version, 2);
	ck_assert_int_eq(c.s[0].inserted_at, T0 + 2);
	ck_assert(bytes_eq_b(c.s[0].content, mstr("s3")));
	ck_assert_uint_eq(c.s[1].to_seq, 8);
	ck_assert_uint_eq(c.s[1].from_seq, 2);
	ck_assert_uint_eq(c.s[1].version, 3);
	ck_assert_int_eq(c.s[1].inserted_at, T0 + 3);
	ck_assert(bytes_eq_b(c.s[1].content, mstr("s8b")));
	/* the callback's return stops the walk */
	memset(&c, 0, sizeof c);
	c.stop_after = 1;
	c.stop_ret = 7;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_summaries_list(t, "c1", collect_sum, &c), 7);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_int_eq(store_summaries_list(t, "nope", collect_sum, &c), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_summaries_list(t, "c1", NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

START_TEST(summary_restore_writes_it_as_given)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	NOW = T0 + 100;
	store_txn *t = wbegin();
	struct store_summary a = { 1, 4, mstr("four"), 5, T0 - 7 }, b = { 2, 9, mstr("nine"), 12, T0 - 3 };
	ck_assert_int_eq(store_summary_restore(t, "c1", &a), 0);
	ck_assert_int_eq(store_summary_restore(t, "c1", &b), 0);
	commit(t);
	struct sums c;
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 2);
	ck_assert_uint_eq(c.s[0].version, 5);
	ck_assert_int_eq(c.s[0].inserted_at, T0 - 7);
	ck_assert_uint_eq(c.s[1].from_seq, 2);
	ck_assert_uint_eq(c.s[1].version, 12);
	ck_assert_int_eq(c.s[1].inserted_at, T0 - 3);
	ck_assert(bytes_eq_b(c.s[1].content, mstr("nine")));
	t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.to_seq, 9);
	ck_assert_uint_eq(sum.version, 12);
	store_txn_abort(t);
	/* the next put numbers on from the greatest version */
	put_summary("c1", 1, 10, mstr("ten"), 13);
	/* a version another to_seq holds is a conflict, and writes nothing;
	 * the same to_seq takes its own version again (a replace) */
	t = wbegin();
	struct store_summary dup = { 1, 6, mstr("six"), 5, T0 };
	ck_assert_int_eq(store_summary_restore(t, "c1", &dup), STORE_E_CONFLICT);
	struct store_summary again = { 3, 4, mstr("four again"), 5, T0 };
	ck_assert_int_eq(store_summary_restore(t, "c1", &again), 0);
	commit(t);
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 3);
	ck_assert_uint_eq(c.s[0].from_seq, 3);
	ck_assert(bytes_eq_b(c.s[0].content, mstr("four again")));
	/* bad input writes nothing */
	t = wbegin();
	struct store_summary bad[] = {
		{ 1, 4, mstr("x"), 0, T0 },                        /* version 0 */
		{ 1, 4, mstr("x"), (uint64_t)INT64_MAX + 1, T0 },  /* past INT64_MAX */
		{ 5, 4, mstr("x"), 20, T0 },                       /* from > to */
		{ 0, 0, mstr("x"), 20, T0 },                       /* to 0 */
		{ 1, 11, mstr("x"), 20, T0 },                      /* past the last seq */
		{ 1, 4, raw(two_objs, sizeof two_objs), 20, T0 },  /* not one msgpack object */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_int_eq(store_summary_restore(t, "c1", &bad[i]), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_restore(t, "c1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_restore(t, "nope", &a), STORE_E_NOTFOUND);
	commit(t);
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 3);
	/* in a read transaction: refused */
	t = rbegin();
	ck_assert_int_eq(store_summary_restore(t, "c1", &a), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

void conf_summaries_add(TCase *tc)
{
	tcase_add_test(tc, load_since_without_summary);
	tcase_add_test(tc, load_since_after_latest_summary);
	tcase_add_test(tc, load_since_summary_at_last_seq);
	tcase_add_test(tc, load_since_callback_return_stops);
	tcase_add_test(tc, summary_latest_none_is_notfound);
	tcase_add_test(tc, summary_fields_round_trip);
	tcase_add_test(tc, summary_latest_is_greatest_to_seq);
	tcase_add_test(tc, summary_same_to_seq_replaces);
	tcase_add_test(tc, summary_versions_increment);
	tcase_add_test(tc, summary_put_rejects_bad_range);
	tcase_add_test(tc, summaries_list_every_summary_in_to_seq_order);
	tcase_add_test(tc, summary_restore_writes_it_as_given);
}
