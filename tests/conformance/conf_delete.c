/*
 * Deleting a conversation: everything it owned goes, its lease, usage and
 * status reset, other conversations untouched (case "delete").
 */
#include <check.h>
#include <limits.h>

#include "tests/conformance/conformance.h"

START_TEST(delete_removes_conversation_and_events)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_event_in e = ev("user_msg", mstr("old"), "req-1");
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	append_n("c1", 3, "user_msg");
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_latest_seq(t, "c1", &seq), STORE_E_NOTFOUND);
	store_txn_abort(t);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	/* re-created: an empty log, and the event id is free again */
	mkconv("c1");
	ck_assert_uint_eq(latest("c1"), 0);
	t = wbegin();
	e = ev("user_msg", mstr("new"), "req-1");
	int dup = -1;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(dup, 0);
	commit(t);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	EXPECT_SEQS(1);
	ck_assert(bytes_eq(raw(E.e[0].content, E.e[0].clen), mstr("new").ptr, mstr("new").len));
}
END_TEST

START_TEST(delete_removes_summaries)
{
	mkconv("c1");
	append_n("c1", 4, "user_msg");
	put_summary("c1", 1, 2, mstr("s"), 1);
	put_summary("c1", 1, 4, mstr("s"), 2);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	mkconv("c1");
	t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), STORE_E_NOTFOUND);
	store_txn_abort(t);
	int has = -1;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	EXPECT_NO_EVENTS();
	append_n("c1", 1, "user_msg");
	put_summary("c1", 1, 1, mstr("s"), 1); /* versions start over */
}
END_TEST

START_TEST(delete_removes_tool_calls_and_expiries)
{
	mkconv("c1");
	mkconv("c2");
	mktc("c1", "p1");
	mktc("c1", "p2");
	mktc("c1", "done");
	mktc("c2", "other");
	schedule("p1", T0 + 10);
	schedule("p2", T0 + 20);
	schedule("other", T0 + 30);
	ck_assert_int_eq(resolve("done", STORE_TC_RESOLVED, mint(1)), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "p1", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_get(t, "p2", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_get(t, "done", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_get(t, "other", &tc), 0);
	store_txn_abort(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 30);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("other");
	ck_assert_int_eq(resolve("p1", STORE_TC_EXPIRED, raw(NULL, 0)), STORE_E_STALE);
	/* the ids are free: another conversation may now own them */
	mktc("c2", "p1");
	mkconv("c1");
	ck_assert_int_eq(list_tcs("c1", 0), 0);
	ck_assert_uint_eq(L.n, 0);
	ck_assert_int_eq(list_tcs("c2", 0), 0);
	EXPECT_LIST("other", "p1");
	ck_assert_int_eq(L.status[1], STORE_TC_PENDING);
	ck_assert_int_eq(L.deadline[1], 0);
	/* and with only one expiry left, deleting its owner leaves none */
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c2"), 0);
	commit(t);
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
	ck_assert_int_eq(due(INT64_MAX), 0);
	ck_assert_uint_eq(L.n, 0);
}
END_TEST

START_TEST(delete_resets_lease_usage_and_status)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t gen;
	struct store_usage u = { 1, 2, 3 };
	struct store_conv_patch p = { .set = STORE_SET_STATUS | STORE_SET_FSM, .status = STORE_ENDED,
				      .fsm_state = mint(1) };
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &u), 0);
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	NOW = T0 + 5;
	mkconv("c1");
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.lease, 0);
	ck_assert_uint_eq(c.usage.input_tokens, 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert_uint_eq(c.fsm_state.len, 0);
	ck_assert_int_eq(c.created_at, T0 + 5);
	store_txn_abort(t);
}
END_TEST

START_TEST(delete_leaves_other_conversations)
{
	const char *ids[] = { "a", "b", "c" };
	for (int i = 0; i < 3; i++) {
		mkconv(ids[i]);
		append_n(ids[i], 3, "user_msg");
		put_summary(ids[i], 1, 2, mstr(ids[i]), 1);
	}
	mktc("a", "ta");
	mktc("c", "tc");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "b"), 0);
	commit(t);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("a", "c");
	for (int i = 0; i < 3; i += 2) {
		ck_assert_uint_eq(latest(ids[i]), 3);
		struct store_summary sum;
		int has = 0;
		ck_assert_int_eq(load_since(ids[i], &sum, &has), 0);
		ck_assert_int_eq(has, 1);
		EXPECT_SEQS(3);
	}
	ck_assert_int_eq(list_tcs("a", 0), 0);
	EXPECT_LIST("ta");
	ck_assert_int_eq(list_tcs("c", 0), 0);
	EXPECT_LIST("tc");
}
END_TEST

START_TEST(delete_twice_is_notfound)
{
	mkconv("c1");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	ck_assert_int_eq(store_conv_delete(t, "c1"), STORE_E_NOTFOUND);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), STORE_E_NOTFOUND);
	commit(t);
}
END_TEST

void conf_delete_add(TCase *tc)
{
	tcase_add_test(tc, delete_removes_conversation_and_events);
	tcase_add_test(tc, delete_removes_summaries);
	tcase_add_test(tc, delete_removes_tool_calls_and_expiries);
	tcase_add_test(tc, delete_resets_lease_usage_and_status);
	tcase_add_test(tc, delete_leaves_other_conversations);
	tcase_add_test(tc, delete_twice_is_notfound);
}
