/*
 * Reading a log back with store_events_stream: the after/before bounds,
 * the limit keeping the most recent, the type filter, paging backwards and a
 * callback's return (case "stream").
 */
#include <check.h>
#include <limits.h>
#include <string.h>

#include "tests/conformance/conformance.h"

START_TEST(stream_after_before_exclusive)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	ck_assert_int_eq(stream("c1", 3, 7, 0, NULL), 0);
	EXPECT_SEQS(4, 5, 6);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0); /* before 0: unbounded */
	expect_run(1, 10);
	ck_assert_int_eq(stream("c1", 9, 0, 0, NULL), 0);
	EXPECT_SEQS(10);
	ck_assert_int_eq(stream("c1", 0, 2, 0, NULL), 0);
	EXPECT_SEQS(1);
	ck_assert_int_eq(stream("c1", 0, 1, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 10, 0, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 4, 5, 0, NULL), 0); /* nothing strictly between */
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 7, 3, 0, NULL), 0); /* empty range */
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, 100, 0, NULL), 0);
	expect_run(1, 10);
}
END_TEST

START_TEST(stream_after_max_is_empty)
{
	mkconv("c1");
	append_n("c1", 3, "user_msg");
	ck_assert_int_eq(stream("c1", UINT64_MAX, 0, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", UINT64_MAX, 0, 2, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", UINT64_MAX, 0, 2, "user_msg"), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, UINT64_MAX, 0, NULL), 0);
	expect_run(1, 3);
}
END_TEST

START_TEST(stream_limit_keeps_most_recent)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	ck_assert_int_eq(stream("c1", 0, 0, 3, NULL), 0);
	EXPECT_SEQS(8, 9, 10);
	ck_assert_int_eq(stream("c1", 0, 6, 3, NULL), 0);
	EXPECT_SEQS(3, 4, 5);
	ck_assert_int_eq(stream("c1", 7, 0, 5, NULL), 0); /* fewer than limit in range */
	EXPECT_SEQS(8, 9, 10);
	ck_assert_int_eq(stream("c1", 3, 6, 3, NULL), 0);
	EXPECT_SEQS(4, 5);
	ck_assert_int_eq(stream("c1", 3, 7, 3, NULL), 0);
	EXPECT_SEQS(4, 5, 6);
	ck_assert_int_eq(stream("c1", 0, 0, 10, NULL), 0);
	expect_run(1, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 1000, NULL), 0);
	expect_run(1, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 1, NULL), 0);
	EXPECT_SEQS(10);
	ck_assert_int_eq(stream("c1", 0, 1, 1, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, 500, 2, NULL), 0); /* before past the end */
	EXPECT_SEQS(9, 10);
}
END_TEST

/* Types by seq: u a t u a t u a t u (seq 1..10). */
static void mixed_log(const char *conv)
{
	static const char *const types[] = { "user_msg", "assistant_msg", "tool_result" };
	store_txn *t = wbegin();
	for (int i = 0; i < 10; i++) {
		struct store_event_in e = ev(types[i % 3], mint(i + 1), NULL);
		uint64_t seq;
		ck_assert_int_eq(store_event_append(t, conv, &e, &seq, NULL), 0);
	}
	commit(t);
}

START_TEST(stream_type_filter)
{
	mkconv("c1");
	mixed_log("c1");
	ck_assert_int_eq(stream("c1", 0, 0, 0, "user_msg"), 0);
	EXPECT_SEQS(1, 4, 7, 10);
	for (size_t i = 0; i < E.n; i++)
		ck_assert_str_eq(E.e[i].type, "user_msg");
	ck_assert_int_eq(stream("c1", 0, 0, 0, "tool_result"), 0);
	EXPECT_SEQS(3, 6, 9);
	ck_assert_int_eq(stream("c1", 1, 7, 0, "user_msg"), 0);
	EXPECT_SEQS(4);
	ck_assert_int_eq(stream("c1", 0, 0, 0, "system"), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, 0, 0, "user"), 0); /* a prefix does not match */
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(stream_type_filter_with_limit)
{
	mkconv("c1");
	mixed_log("c1");
	ck_assert_int_eq(stream("c1", 0, 0, 2, "user_msg"), 0);
	EXPECT_SEQS(7, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 2, "assistant_msg"), 0);
	EXPECT_SEQS(5, 8);
	ck_assert_int_eq(stream("c1", 0, 0, 9, "tool_result"), 0);
	EXPECT_SEQS(3, 6, 9);
	ck_assert_int_eq(stream("c1", 4, 0, 5, "user_msg"), 0);
	EXPECT_SEQS(7, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 1, "system"), 0);
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(stream_type_filter_with_limit_and_before)
{
	mkconv("c1");
	mixed_log("c1");
	ck_assert_int_eq(stream("c1", 0, 10, 2, "user_msg"), 0); /* 10 excluded */
	EXPECT_SEQS(4, 7);
	ck_assert_int_eq(stream("c1", 0, 7, 1, "user_msg"), 0);
	EXPECT_SEQS(4);
	ck_assert_int_eq(stream("c1", 0, 9, 2, "tool_result"), 0);
	EXPECT_SEQS(3, 6);
	ck_assert_int_eq(stream("c1", 1, 4, 3, "user_msg"), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 1, 5, 3, "user_msg"), 0);
	EXPECT_SEQS(4);
	/* the top of the range is not of the type */
	ck_assert_int_eq(stream("c1", 0, 9, 1, "assistant_msg"), 0);
	EXPECT_SEQS(8);
}
END_TEST

/* Page backwards with before = the oldest seq seen, until a page is empty:
 * every event exactly once. */
static void page_back(const char *conv, size_t limit, const char *type, const uint64_t *want, size_t nwant)
{
	uint64_t seen[EV_MAX];
	size_t nseen = 0, pages = 0;
	uint64_t before = 0;
	for (;;) {
		ck_assert_int_eq(stream(conv, 0, before, limit, type), 0);
		ck_assert_uint_le(E.n, limit);
		if (E.n == 0)
			break;
		ck_assert_uint_lt(++pages, 100);
		for (size_t i = 1; i < E.n; i++)
			ck_assert_uint_lt(E.e[i - 1].seq, E.e[i].seq); /* ascending */
		if (before)
			ck_assert_uint_lt(E.e[E.n - 1].seq, before);
		/* pages come newest first; keep the whole list ascending */
		memmove(seen + E.n, seen, nseen * sizeof seen[0]);
		for (size_t i = 0; i < E.n; i++)
			seen[i] = E.e[i].seq;
		nseen += E.n;
		before = E.e[0].seq;
	}
	ck_assert_uint_eq(nseen, nwant);
	for (size_t i = 0; i < nwant; i++)
		ck_assert_uint_eq(seen[i], want[i]);
}

START_TEST(stream_pages_backwards)
{
	mkconv("c1");
	append_n("c1", 23, "user_msg");
	uint64_t all[23];
	for (int i = 0; i < 23; i++)
		all[i] = (uint64_t)i + 1;
	page_back("c1", 5, NULL, all, 23);  /* 5,5,5,5,3 */
	page_back("c1", 1, NULL, all, 23);
	page_back("c1", 23, NULL, all, 23); /* one full page */
	page_back("c1", 22, NULL, all, 23); /* last page of one */
	/* the first page exactly: a limit that divides the log */
	mkconv("c2");
	append_n("c2", 20, "user_msg");
	page_back("c2", 5, NULL, all, 20);
}
END_TEST

START_TEST(stream_pages_backwards_with_type)
{
	mkconv("c1");
	mixed_log("c1");
	mixed_log("c1"); /* 20 events: user_msg at 1,4,7,10,11,14,17,20 */
	static const char *const types[] = { "user_msg", "assistant_msg", "tool_result" };
	uint64_t want[3][EV_MAX];
	size_t nwant[3] = { 0 };
	for (uint64_t s = 1; s <= 20; s++) {
		int k = (int)((s - 1) % 10 % 3);
		want[k][nwant[k]++] = s;
	}
	for (int k = 0; k < 3; k++)
		for (size_t limit = 1; limit <= 4; limit++)
			page_back("c1", limit, types[k], want[k], nwant[k]);
}
END_TEST

START_TEST(stream_callback_return_stops)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	/* every non-zero return is handed back unchanged */
	const int rets[] = { 1, 2, 7, -1, STORE_E_NOTFOUND };
	for (size_t i = 0; i < sizeof rets / sizeof rets[0]; i++) {
		memset(&E, 0, sizeof E);
		E.stop_after = 2;
		E.stop_ret = rets[i];
		struct store_range r = { 0 };
		store_txn *t = rbegin();
		ck_assert_int_eq(store_events_stream(t, "c1", &r, collect_ev, &E), rets[i]);
		store_txn_abort(t);
		EXPECT_SEQS(1, 2);
		/* with a limit and a before too */
		memset(&E, 0, sizeof E);
		E.stop_after = 1;
		E.stop_ret = rets[i];
		r = (struct store_range){ 0, 5, 3, NULL };
		t = rbegin();
		ck_assert_int_eq(store_events_stream(t, "c1", &r, collect_ev, &E), rets[i]);
		store_txn_abort(t);
		EXPECT_SEQS(2);
	}
}
END_TEST

START_TEST(stream_invalid_args)
{
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	ck_assert_int_eq(stream("c1", 0, 0, 0, "User"), STORE_E_INVAL);
	ck_assert_int_eq(stream("c1", 0, 0, 0, ""), STORE_E_INVAL);
	store_txn *t = rbegin();
	ck_assert_int_eq(store_events_stream(t, "c1", NULL, collect_ev, &E), STORE_E_INVAL);
	struct store_range r = { 0 };
	ck_assert_int_eq(store_events_stream(t, "c1", &r, NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

void conf_stream_add(TCase *tc)
{
	tcase_add_test(tc, stream_after_before_exclusive);
	tcase_add_test(tc, stream_after_max_is_empty);
	tcase_add_test(tc, stream_limit_keeps_most_recent);
	tcase_add_test(tc, stream_type_filter);
	tcase_add_test(tc, stream_type_filter_with_limit);
	tcase_add_test(tc, stream_type_filter_with_limit_and_before);
	tcase_add_test(tc, stream_pages_backwards);
	tcase_add_test(tc, stream_pages_backwards_with_type);
	tcase_add_test(tc, stream_callback_return_stops);
	tcase_add_test(tc, stream_invalid_args);
}
