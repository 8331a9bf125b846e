/*
 * Expiries of pending tool calls and their warnings: scheduling,
 * replacing, cancelling, dropping and what is due in order (case "expiries").
 */
#include <check.h>
#include <limits.h>
#include <string.h>

#include "tests/conformance/conformance.h"

/* ---- expiry warnings ---- */

static int wdue(int64_t now)
{
	memset(&L, 0, sizeof L);
	store_txn *t = rbegin();
	int rc = store_warnings_due(t, now, collect_exp, &L);
	store_txn_abort(t);
	return rc;
}

static int wearliest(int64_t *d)
{
	store_txn *t = rbegin();
	int rc = store_warning_earliest(t, d);
	store_txn_abort(t);
	return rc;
}

static void warn_at(const char *id, int64_t at)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_warning_schedule(t, id, at), 0);
	commit(t);
}

/* A warning is due at its time, in time then id order, apart from the
 * call's expiry; a second schedule replaces the first; listing removes
 * nothing; a drop does, and survives a reopen. */
START_TEST(warning_schedule_due_replace_drop)
{
	mkconv("c1");
	mkconv("c2");
	mktc("c1", "tb");
	mktc("c1", "ta");
	mktc("c2", "tc");
	int64_t d = 0;
	ck_assert_int_eq(wearliest(&d), STORE_E_NOTFOUND);
	schedule("ta", T0 + 1000);
	ck_assert_int_eq(wearliest(&d), STORE_E_NOTFOUND); /* an expiry is no warning */
	warn_at("ta", T0 + 900);
	warn_at("tb", T0 + 50);
	warn_at("tc", T0 + 900);
	warn_at("tb", T0 + 900); /* replaces T0 + 50 */
	ck_assert_int_eq(wearliest(&d), 0);
	ck_assert_int_eq(d, T0 + 900);
	ck_assert_int_eq(wdue(T0 + 899), 0);
	ck_assert_uint_eq(L.n, 0);
	ck_assert_int_eq(wdue(T0 + 900), 0);
	EXPECT_LIST("ta", "tb", "tc");
	ck_assert_str_eq(L.conv[0], "c1");
	ck_assert_str_eq(L.conv[2], "c2");
	ck_assert_int_eq(L.deadline[1], T0 + 900);
	ck_assert_int_eq(due(T0 + 900), 0); /* the expiry is not due yet */
	ck_assert_uint_eq(L.n, 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_warning_drop(t, "tb"), 0);
	ck_assert_int_eq(store_warning_drop(t, "tb"), 0); /* none left: still 0 */
	ck_assert_int_eq(store_warning_drop(t, "bad id!"), STORE_E_INVAL);
	commit(t);
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	ck_assert_int_eq(wdue(T0 + 5000), 0);
	EXPECT_LIST("ta", "tc");
	ck_assert_int_eq(due(T0 + 5000), 0);
	EXPECT_LIST("ta");
}
END_TEST

/* Settling a call and deleting its conversation remove its warning; only a
 * pending call gets one. */
START_TEST(warning_goes_with_its_call)
{
	mkconv("c1");
	mkconv("c2");
	mktc("c1", "ta");
	mktc("c1", "tb");
	mktc("c2", "tc");
	warn_at("ta", T0 + 10);
	warn_at("tb", T0 + 20);
	warn_at("tc", T0 + 30);
	ck_assert_int_eq(resolve("ta", STORE_TC_RESOLVED, raw(NULL, 0)), 0);
	ck_assert_int_eq(wdue(T0 + 100), 0);
	EXPECT_LIST("tb", "tc");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_warning_schedule(t, "ta", T0 + 40), STORE_E_STALE);
	ck_assert_int_eq(store_warning_schedule(t, "nope", T0 + 40), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_warning_schedule(t, "tb", 0), STORE_E_INVAL);
	ck_assert_int_eq(store_warning_schedule(t, "bad id!", T0), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_delete(t, "c2"), 0);
	commit(t);
	ck_assert_int_eq(wdue(T0 + 100), 0);
	EXPECT_LIST("tb");
	int64_t d;
	ck_assert_int_eq(wearliest(&d), 0);
	ck_assert_int_eq(d, T0 + 20);
	t = rbegin();
	ck_assert_int_eq(store_warning_schedule(t, "tb", T0), STORE_E_INVAL); /* a read transaction */
	ck_assert_int_eq(store_warnings_due(t, T0, NULL, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_warning_earliest(t, NULL), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

/* ---- expiries ---- */

START_TEST(expiry_schedule_and_due)
{
	mkconv("c1");
	mktc("c1", "tc");
	int64_t d = 0;
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND); /* none scheduled */
	schedule("tc", T0 + 100);
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 100);
	store_txn *t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.deadline, T0 + 100);
	store_txn_abort(t);
	ck_assert_int_eq(due(T0 + 99), 0);
	ck_assert_uint_eq(L.n, 0);
	ck_assert_int_eq(due(T0 + 100), 0); /* deadline <= now */
	EXPECT_LIST("tc");
	ck_assert_int_eq(L.deadline[0], T0 + 100);
	ck_assert_str_eq(L.conv[0], "c1");
	/* listing due expiries does not remove them */
	ck_assert_int_eq(due(T0 + 100), 0);
	ck_assert_uint_eq(L.n, 1);
}
END_TEST

START_TEST(expiry_reschedule_replaces)
{
	mkconv("c1");
	mktc("c1", "tc");
	schedule("tc", T0 + 100);
	schedule("tc", T0 + 50); /* earlier */
	int64_t d;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 50);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("tc");
	ck_assert_int_eq(L.deadline[0], T0 + 50);
	schedule("tc", T0 + 300); /* later */
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 300);
	ck_assert_int_eq(due(T0 + 299), 0);
	ck_assert_uint_eq(L.n, 0);
	schedule("tc", T0 + 300); /* the same again */
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("tc");
	/* replaced within one txn too */
	store_txn *t = wbegin();
	ck_assert_int_eq(store_expiry_schedule(t, "tc", T0 + 5), 0);
	ck_assert_int_eq(store_expiry_schedule(t, "tc", T0 + 6), 0);
	commit(t);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("tc");
	ck_assert_int_eq(L.deadline[0], T0 + 6);
}
END_TEST

/* What extend and an escalation rely on: a pending call's record shows the
 * rescheduled deadline; an upsert of its prompt (an escalation hands the
 * call to another tool's prompt) keeps its status, deadline and expiry row,
 * and the warning rescheduled with it replaces the one it had. */
START_TEST(expiry_moved_with_its_record_and_prompt)
{
	mkconv("c1");
	mktc("c1", "tc");
	schedule("tc", T0 + 100);
	warn_at("tc", T0 + 40);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_expiry_schedule(t, "tc", T0 + 500), 0);
	ck_assert_int_eq(store_warning_schedule(t, "tc", T0 + 440), 0);
	commit(t);
	struct store_tool_call tc;
	t = rbegin();
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.deadline, T0 + 500);
	store_txn_abort(t);
	ck_assert_int_eq(due(T0 + 499), 0);
	ck_assert_uint_eq(L.n, 0); /* the old deadline is no longer due */
	ck_assert_int_eq(wdue(T0 + 439), 0);
	ck_assert_uint_eq(L.n, 0); /* nor the old warning */
	ck_assert_int_eq(wdue(T0 + 440), 0);
	EXPECT_LIST("tc");
	/* a new prompt: \xa4 "boss" as msgpack */
	static const char prompt[] = "\xa4" "boss";
	struct store_tool_call_in in = { "tc", "approve", STORE_EXEC_HUMAN, { "\x80", 1 }, { prompt, 5 } };
	t = wbegin();
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	ck_assert_int_eq(tc.deadline, T0 + 500);
	ck_assert_uint_eq(tc.prompt.len, 5);
	ck_assert_int_eq(memcmp(tc.prompt.ptr, prompt, 5), 0);
	store_txn_abort(t);
	ck_assert_int_eq(due(T0 + 500), 0);
	EXPECT_LIST("tc");
	ck_assert_int_eq(L.deadline[0], T0 + 500);
}
END_TEST

START_TEST(expiry_cancel)
{
	mkconv("c1");
	mktc("c1", "tc");
	mktc("c1", "never");
	schedule("tc", T0 + 100);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_expiry_cancel(t, "tc"), 0);
	ck_assert_int_eq(store_expiry_cancel(t, "tc"), 0);    /* again: none left */
	ck_assert_int_eq(store_expiry_cancel(t, "never"), 0); /* never scheduled */
	commit(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
	ck_assert_int_eq(due(INT64_MAX), 0);
	ck_assert_uint_eq(L.n, 0);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.deadline, 0);
	ck_assert_int_eq(tc.status, STORE_TC_PENDING); /* cancelling does not settle */
	store_txn_abort(t);
	schedule("tc", T0 + 7); /* and it can be scheduled again */
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 7);
}
END_TEST

/* The row alone goes, by its key; the call's record is not read or changed. */
START_TEST(expiry_drop)
{
	mkconv("c1");
	mktc("c1", "tc");
	mktc("c1", "other");
	schedule("tc", T0 + 100);
	schedule("other", T0 + 50);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_expiry_drop(t, T0 + 99, "tc"), 0); /* not its key: nothing goes */
	ck_assert_int_eq(store_expiry_drop(t, T0 + 100, "nope"), 0);
	ck_assert_int_eq(store_expiry_drop(t, 0, "tc"), STORE_E_INVAL);
	ck_assert_int_eq(store_expiry_drop(t, T0 + 100, "a b"), STORE_E_INVAL);
	commit(t);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("other", "tc");
	t = wbegin();
	ck_assert_int_eq(store_expiry_drop(t, T0 + 100, "tc"), 0);
	ck_assert_int_eq(store_expiry_drop(t, T0 + 100, "tc"), 0); /* again: none left */
	commit(t);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("other");
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.deadline, T0 + 100); /* the record keeps its deadline */
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	store_txn_abort(t);
	t = rbegin();
	ck_assert_int_eq(store_expiry_drop(t, T0 + 50, "other"), STORE_E_INVAL); /* a write */
	store_txn_abort(t);
}
END_TEST

START_TEST(expiries_due_order)
{
	mkconv("c1");
	mkconv("c2");
	const char *ids[] = { "t5", "t1", "t3", "t2", "t4", "t0" };
	for (int i = 0; i < 6; i++)
		mktc(i % 2 ? "c2" : "c1", ids[i]);
	schedule("t5", T0 + 30);
	schedule("t1", T0 + 10);
	schedule("t3", T0 + 20);
	schedule("t2", T0 + 20); /* tie with t3: id order */
	schedule("t4", T0 + 20);
	schedule("t0", T0 + 40);
	ck_assert_int_eq(due(T0 + 30), 0);
	EXPECT_LIST("t1", "t2", "t3", "t4", "t5");
	ck_assert_int_eq(L.deadline[0], T0 + 10);
	ck_assert_int_eq(L.deadline[3], T0 + 20);
	ck_assert_int_eq(L.deadline[4], T0 + 30);
	ck_assert_str_eq(L.conv[0], "c2"); /* t1 */
	ck_assert_str_eq(L.conv[1], "c2"); /* t2 */
	ck_assert_str_eq(L.conv[2], "c1"); /* t3 */
	ck_assert_int_eq(due(T0 + 19), 0);
	EXPECT_LIST("t1");
	ck_assert_int_eq(due(T0 + 9), 0);
	ck_assert_uint_eq(L.n, 0);
	int64_t d;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 10);
	/* the callback's return stops the iteration and is returned */
	memset(&L, 0, sizeof L);
	L.stop_after = 3;
	L.stop_ret = 4;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_expiries_due(t, INT64_MAX, collect_exp, &L), 4);
	store_txn_abort(t);
	EXPECT_LIST("t1", "t2", "t3");
}
END_TEST

START_TEST(expiry_schedule_needs_pending_call)
{
	mkconv("c1");
	mktc("c1", "tc");
	ck_assert_int_eq(resolve("tc", STORE_TC_RESOLVED, mint(1)), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_expiry_schedule(t, "tc", T0 + 100), STORE_E_STALE);
	ck_assert_int_eq(store_expiry_schedule(t, "nope", T0 + 100), STORE_E_NOTFOUND);
	commit(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
	/* deadline 0 means "none" (store_tool_call.deadline): not a deadline */
	mktc("c1", "tc2");
	t = wbegin();
	ck_assert_int_eq(store_expiry_schedule(t, "tc2", 0), STORE_E_INVAL);
	commit(t);
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
}
END_TEST

void conf_expiries_add(TCase *tc)
{
	tcase_add_test(tc, expiry_schedule_and_due);
	tcase_add_test(tc, expiry_reschedule_replaces);
	tcase_add_test(tc, expiry_moved_with_its_record_and_prompt);
	tcase_add_test(tc, expiry_cancel);
	tcase_add_test(tc, expiry_drop);
	tcase_add_test(tc, expiries_due_order);
	tcase_add_test(tc, expiry_schedule_needs_pending_call);
	tcase_add_test(tc, warning_schedule_due_replace_drop);
	tcase_add_test(tc, warning_goes_with_its_call);
}
