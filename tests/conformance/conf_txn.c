/*
 * Transactions: abort discards, errors keep a write txn usable, writes need
 * a write txn, one writer at a time, one clock read per txn, and read results
 * valid until the txn ends (case "transactions").
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>

#include "tests/conformance/conformance.h"

START_TEST(txn_abort_discards_every_write)
{
	mkconv("keep");
	append_n("keep", 2, "user_msg");
	mktc("keep", "pending");
	mktc("keep", "sched");
	schedule("sched", T0 + 500);
	store_txn *t = wbegin();
	uint64_t seq, gen;
	uint32_t att;
	struct store_usage u = { 9, 9, 9 };
	struct store_conv_patch p = { .set = STORE_SET_STATUS | STORE_SET_SETTINGS, .status = STORE_ENDED,
				      .settings = mmap1("x", "y") };
	struct store_event_in e = ev("user_msg", mint(1), "k");
	struct store_tool_call_in in = tcin("new-tc", "n", STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
	ck_assert_int_eq(store_conv_create(t, "new", mmap0()), 0);
	ck_assert_int_eq(store_event_append(t, "new", &e, &seq, NULL), 0);
	ck_assert_int_eq(store_tool_call_upsert(t, "new", &in), 0);
	ck_assert_int_eq(store_expiry_schedule(t, "new-tc", T0 + 1), 0);
	ck_assert_int_eq(store_event_append(t, "keep", &e, &seq, NULL), 0);
	ck_assert_int_eq(store_summary_put(t, "keep", 1, 3, mint(1), NULL), 0);
	ck_assert_int_eq(store_conv_put(t, "keep", &p), 0);
	ck_assert_int_eq(store_lease_next(t, "keep", &gen), 0);
	ck_assert_int_eq(store_usage_add(t, "keep", &u), 0);
	ck_assert_int_eq(store_tool_call_attempt(t, "pending", &att), 0);
	ck_assert_int_eq(store_tool_call_resolve(t, "pending", STORE_TC_RESOLVED, mint(1), NULL), 0);
	ck_assert_int_eq(store_expiry_cancel(t, "sched"), 0);
	/* the txn sees its own writes */
	ck_assert_int_eq(store_event_latest_seq(t, "keep", &seq), 0);
	ck_assert_uint_eq(seq, 3);
	store_txn_abort(t);

	t = rbegin();
	struct store_conv c;
	struct store_tool_call tc;
	struct store_summary sum;
	ck_assert_int_eq(store_conv_get(t, "new", &c), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_get(t, "new-tc", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_latest_seq(t, "keep", &seq), 0);
	ck_assert_uint_eq(seq, 2);
	ck_assert_int_eq(store_summary_latest(t, "keep", &sum), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_get(t, "keep", &c), 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert(bytes_eq_b(c.settings, mmap0()));
	ck_assert_uint_eq(c.lease, 0);
	ck_assert_uint_eq(c.usage.input_tokens, 0);
	ck_assert_int_eq(store_tool_call_get(t, "pending", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	ck_assert_uint_eq(tc.attempts, 0);
	store_txn_abort(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 500);
	/* the event id of the aborted append was never recorded */
	t = wbegin();
	int dup = -1;
	ck_assert_int_eq(store_event_append(t, "keep", &e, &seq, &dup), 0);
	ck_assert_int_eq(dup, 0);
	ck_assert_uint_eq(seq, 3);
	commit(t);
	store_txn_abort(NULL); /* accepted */
}
END_TEST

START_TEST(txn_errors_leave_write_txn_usable)
{
	mkconv("c1");
	mktc("c1", "settled");
	ck_assert_int_eq(resolve("settled", STORE_TC_RESOLVED, mint(1)), 0);
	store_txn *t = wbegin();
	uint64_t seq, gen;
	struct store_conv c;
	struct store_event_in good = ev("user_msg", mint(1), NULL);
	struct store_event_in bad = ev("user_msg", raw(two_objs, 2), NULL);
	ck_assert_int_eq(store_event_append(t, "c1", &good, &seq, NULL), 0);
	ck_assert_int_eq(store_conv_get(t, "nope", &c), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_resolve(t, "settled", STORE_TC_RESOLVED, mint(1), NULL), STORE_E_STALE);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), STORE_E_CONFLICT);
	ck_assert_int_eq(store_event_append(t, "c1", &bad, &seq, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_lease_check(t, "c1", gen + 1), STORE_E_FENCED);
	ck_assert_int_eq(store_expiry_schedule(t, "settled", T0 + 1), STORE_E_STALE);
	ck_assert_int_eq(store_event_append(t, "c1", &good, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 2);
	ck_assert_int_eq(store_conv_create(t, "c2", mmap0()), 0);
	commit(t);
	ck_assert_uint_eq(latest("c1"), 2);
	ck_assert_uint_eq(latest("c2"), 0);
	t = rbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", gen), 0);
	store_txn_abort(t);
}
END_TEST

START_TEST(txn_write_ops_need_write_txn)
{
	mkconv("c1");
	mktc("c1", "tc");
	store_txn *t = rbegin();
	uint64_t u64;
	uint32_t u32;
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	struct store_usage u = { 1, 1, 0 };
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
	struct store_tool_call_in in = tcin("tc2", "n", STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
	struct store_model_call_in mc = mcin(1, "m", mint(1));
	ck_assert_int_eq(store_conv_create(t, "c2", mmap0()), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_put(t, "c1", &p), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(1)), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_delete(t, "c1"), STORE_E_INVAL);
	ck_assert_int_eq(store_lease_next(t, "c1", &u64), STORE_E_INVAL);
	ck_assert_int_eq(store_usage_add(t, "c1", &u), STORE_E_INVAL);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &u64, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_events_append(t, "c1", &e, 1, &u64, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 1, mint(1), NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), STORE_E_INVAL);
	ck_assert_int_eq(store_tool_call_attempt(t, "tc", &u32), STORE_E_INVAL);
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", STORE_TC_RESOLVED, mint(1), NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_expiry_schedule(t, "tc", T0 + 1), STORE_E_INVAL);
	ck_assert_int_eq(store_expiry_cancel(t, "tc"), STORE_E_INVAL);
	ck_assert_int_eq(store_model_call_put(t, "c1", &mc), STORE_E_INVAL);
	ck_assert_int_eq(store_model_calls_gc(t, "c1", 0, &u64), STORE_E_INVAL);
	/* the read txn still reads */
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	store_txn_abort(t);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_PENDING), 0);
	EXPECT_LIST("tc");
}
END_TEST

START_TEST(txn_one_writer_at_a_time)
{
	store_txn *w = wbegin(), *w2 = (store_txn *)&w, *r = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE, &w2), -EBUSY);
	ck_assert_ptr_null(w2); /* a failed begin leaves nothing to abort */
	store_txn_abort(w2);
	ck_assert_int_eq(store_txn_begin(S, STORE_READ, &r), 0); /* reads beside it */
	ck_assert_int_eq(store_conv_create(w, "c1", mmap0()), 0);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(r, "c1", &c), STORE_E_NOTFOUND); /* not committed */
	commit(w);
	store_txn_abort(r);
	w = wbegin(); /* free again after commit */
	store_txn_abort(w);
	w = wbegin(); /* and after abort */
	commit(w);
	ck_assert_int_eq(store_txn_begin(S, 7, &w2), STORE_E_INVAL);
}
END_TEST

START_TEST(txn_clock_read_once)
{
	NOW = T0 + 1;
	ck_assert_int_eq(store_now(S), T0 + 1);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_txn_now(t), T0 + 1);
	NOW = T0 + 2; /* the clock moves mid-txn: the txn's stamp does not */
	ck_assert_int_eq(store_now(S), T0 + 2);
	ck_assert_int_eq(store_txn_now(t), T0 + 1);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), 0);
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_txn_now(t), T0 + 2);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_int_eq(c.created_at, T0 + 1);
	store_txn_abort(t);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	ck_assert_int_eq(E.e[0].inserted_at, T0 + 1);
}
END_TEST

START_TEST(read_results_valid_until_txn_ends)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "c1", mmap1("v", "one")), 0);
	ck_assert_int_eq(store_conv_create(t, "c2", mmap1("v", "two")), 0);
	commit(t);
	append_n("c1", 5, "user_msg");
	put_summary("c1", 1, 2, mstr("sum-1"), 1);
	mktc("c1", "tc");
	store_txn *r = rbegin();
	struct store_conv c1, c2;
	struct store_tool_call tc;
	struct store_summary sum;
	struct ptrs ps = { 0 };
	struct store_range range = { 0 };
	ck_assert_int_eq(store_conv_get(r, "c1", &c1), 0);
	ck_assert_int_eq(store_events_stream(r, "c1", &range, keep_ptr, &ps), 0);
	ck_assert_int_eq(store_tool_call_get(r, "tc", &tc), 0);
	ck_assert_int_eq(store_summary_latest(r, "c1", &sum), 0);
	ck_assert_int_eq(store_conv_get(r, "c2", &c2), 0);
	/* a writer rewrites every one of those rows and more, and commits */
	t = wbegin();
	struct store_conv_patch p = { .set = STORE_SET_SETTINGS, .settings = mmap1("v", "changed") };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	ck_assert_int_eq(store_conv_put(t, "c2", &p), 0);
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", STORE_TC_RESOLVED, mint(5), NULL), 0);
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 2, mstr("sum-2"), NULL), 0);
	for (int i = 0; i < 200; i++) {
		char name[32];
		snprintf(name, sizeof name, "filler-%d", i);
		ck_assert_int_eq(store_conv_create(t, name, mmap1("pad", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")), 0);
	}
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	/* everything read before is still there, as it was */
	ck_assert(bytes_eq_s(c1.id, "c1"));
	ck_assert(bytes_eq_b(c1.settings, mmap1("v", "one")));
	ck_assert(bytes_eq_b(c2.settings, mmap1("v", "two")));
	ck_assert_uint_eq(ps.n, 5);
	for (size_t i = 0; i < 5; i++)
		ck_assert(bytes_eq_b(ps.content[i], mint((int64_t)i + 1)));
	ck_assert(bytes_eq_s(tc.id, "tc"));
	ck_assert(bytes_eq_s(tc.conversation, "c1"));
	ck_assert(bytes_eq_b(tc.args, mmap1("cmd", "ls")));
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	ck_assert(bytes_eq_b(sum.content, mstr("sum-1")));
	/* and the read txn still sees its snapshot */
	ck_assert_int_eq(store_conv_get(r, "c1", &c1), 0);
	ck_assert(bytes_eq_b(c1.settings, mmap1("v", "one")));
	store_txn_abort(r);
}
END_TEST

void conf_transactions_add(TCase *tc)
{
	tcase_add_test(tc, txn_abort_discards_every_write);
	tcase_add_test(tc, txn_errors_leave_write_txn_usable);
	tcase_add_test(tc, txn_write_ops_need_write_txn);
	tcase_add_test(tc, txn_one_writer_at_a_time);
	tcase_add_test(tc, txn_clock_read_once);
	tcase_add_test(tc, read_results_valid_until_txn_ends);
}
