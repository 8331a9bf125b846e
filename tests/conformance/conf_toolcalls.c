/*
 * Tool calls: upserts that never reopen a settled call, listing by status
 * and walking every row, attempts, and resolving a call (case "tool_calls").
 */
#include <check.h>
#include <limits.h>
#include <string.h>

#include "tests/conformance/conformance.h"

START_TEST(tool_call_upsert_new_is_pending)
{
	mkconv("c1");
	NOW = T0 + 11;
	store_bytes args = mmap1("path", "/tmp");
	store_bytes prompt = mstr("Approve?");
	struct store_tool_call_in in = tcin("call_1", "read_file", STORE_EXEC_HUMAN, args, prompt);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), 0);
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "call_1", &tc), 0);
	ck_assert(bytes_eq_s(tc.id, "call_1"));
	ck_assert(bytes_eq_s(tc.conversation, "c1"));
	ck_assert(bytes_eq_s(tc.name, "read_file"));
	ck_assert_int_eq(tc.executor, STORE_EXEC_HUMAN);
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	ck_assert(bytes_eq_b(tc.args, args));
	ck_assert(bytes_eq_b(tc.prompt, prompt));
	ck_assert_uint_eq(tc.result.len, 0);
	ck_assert_int_eq(tc.inserted_at, T0 + 11);
	ck_assert_int_eq(tc.resolved_at, 0);
	ck_assert_int_eq(tc.deadline, 0);
	ck_assert_uint_eq(tc.attempts, 0);
	store_txn_abort(t);
	/* no prompt: len 0 */
	mktc("c1", "call_2");
	t = rbegin();
	ck_assert_int_eq(store_tool_call_get(t, "call_2", &tc), 0);
	ck_assert_uint_eq(tc.prompt.len, 0);
	ck_assert_int_eq(tc.executor, STORE_EXEC_SERVER);
	store_txn_abort(t);
}
END_TEST

START_TEST(tool_call_upsert_updates_fields)
{
	mkconv("c1");
	mktc("c1", "tc");
	store_txn *t = wbegin();
	uint32_t att;
	ck_assert_int_eq(store_tool_call_attempt(t, "tc", &att), 0);
	commit(t);
	NOW = T0 + 500;
	struct store_tool_call_in in = tcin("tc", "write_file", STORE_EXEC_HUMAN, mint(42), mstr("ok?"));
	t = wbegin();
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), 0);
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert(bytes_eq_s(tc.name, "write_file"));
	ck_assert_int_eq(tc.executor, STORE_EXEC_HUMAN);
	ck_assert(bytes_eq_b(tc.args, mint(42)));
	ck_assert(bytes_eq_b(tc.prompt, mstr("ok?")));
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	ck_assert_int_eq(tc.inserted_at, T0); /* kept */
	ck_assert_uint_eq(tc.attempts, 1);    /* kept */
	store_txn_abort(t);
	ck_assert_int_eq(list_tcs("c1", 0), 0);
	EXPECT_LIST("tc"); /* still one row */
}
END_TEST

START_TEST(tool_call_upsert_never_reopens)
{
	mkconv("c1");
	mktc("c1", "tc");
	store_txn *t = wbegin();
	uint32_t att;
	ck_assert_int_eq(store_tool_call_attempt(t, "tc", &att), 0);
	commit(t);
	NOW = T0 + 10;
	ck_assert_int_eq(resolve("tc", STORE_TC_ERRORED, mstr("boom")), 0);
	NOW = T0 + 20;
	struct store_tool_call_in in = tcin("tc", "shell2", STORE_EXEC_SERVER, mint(2), raw(NULL, 0));
	t = wbegin();
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), 0);
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_ERRORED);
	ck_assert(bytes_eq_b(tc.result, mstr("boom")));
	ck_assert_int_eq(tc.resolved_at, T0 + 10);
	ck_assert_uint_eq(tc.attempts, 1);
	ck_assert(bytes_eq_s(tc.name, "shell2")); /* the descriptive fields do update */
	store_txn_abort(t);
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_PENDING), 0);
	ck_assert_uint_eq(L.n, 0);
	ck_assert_int_eq(resolve("tc", STORE_TC_RESOLVED, mint(1)), STORE_E_STALE);
}
END_TEST

START_TEST(tool_call_id_of_other_conversation_conflicts)
{
	mkconv("c1");
	mkconv("c2");
	mktc("c1", "tc");
	struct store_tool_call_in in = tcin("tc", "other", STORE_EXEC_HUMAN, mint(9), raw(NULL, 0));
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_upsert(t, "c2", &in), STORE_E_CONFLICT);
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert(bytes_eq_s(tc.conversation, "c1"));
	ck_assert(bytes_eq_s(tc.name, "shell"));
	store_txn_abort(t);
	ck_assert_int_eq(list_tcs("c2", 0), 0);
	ck_assert_uint_eq(L.n, 0);
}
END_TEST

START_TEST(tool_call_upsert_rejects_invalid)
{
	mkconv("c1");
	char name128[129], name129[130];
	memset(name128, 'n', 128);
	name128[128] = 0;
	memset(name129, 'n', 129);
	name129[129] = 0;
	store_txn *t = wbegin();
	struct store_tool_call_in in;
	in = tcin("tc", "", STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), STORE_E_INVAL);
	in = tcin("tc", NULL, STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), STORE_E_INVAL);
	in = tcin("tc", name129, STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), STORE_E_INVAL);
	in = tcin("tc", "x", 2, mint(1), raw(NULL, 0));
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), STORE_E_INVAL);
	in = tcin("tc", "x", -1, mint(1), raw(NULL, 0));
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), STORE_E_INVAL);
	in = tcin("tc", "x", STORE_EXEC_SERVER, raw(NULL, 0), raw(NULL, 0)); /* args required */
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), STORE_E_INVAL);
	for (size_t i = 0; i < NBAD; i++) {
		in = tcin("tc", "x", STORE_EXEC_SERVER, bad_blobs[i].b, raw(NULL, 0));
		ck_assert_msg(store_tool_call_upsert(t, "c1", &in) == STORE_E_INVAL, "args %s", bad_blobs[i].what);
		in = tcin("tc", "x", STORE_EXEC_SERVER, mint(1), bad_blobs[i].b);
		ck_assert_msg(store_tool_call_upsert(t, "c1", &in) == STORE_E_INVAL, "prompt %s", bad_blobs[i].what);
	}
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", NULL), STORE_E_INVAL);
	in = tcin("tc", name128, STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), 0);
	commit(t);
	ck_assert_int_eq(list_tcs("c1", 0), 0);
	EXPECT_LIST("tc");
}
END_TEST

START_TEST(tool_calls_list_by_status_mask)
{
	mkconv("c1");
	mkconv("c2");
	mktc("c1", "d");
	mktc("c1", "b");
	mktc("c1", "a");
	mktc("c1", "c");
	mktc("c1", "e");
	mktc("c2", "aa");
	ck_assert_int_eq(resolve("b", STORE_TC_RESOLVED, mint(1)), 0);
	ck_assert_int_eq(resolve("c", STORE_TC_ERRORED, mint(1)), 0);
	ck_assert_int_eq(resolve("d", STORE_TC_EXPIRED, raw(NULL, 0)), 0);
	ck_assert_int_eq(list_tcs("c1", 0), 0); /* 0: all, in id order */
	EXPECT_LIST("a", "b", "c", "d", "e");
	ck_assert_int_eq(L.status[0], STORE_TC_PENDING);
	ck_assert_int_eq(L.status[1], STORE_TC_RESOLVED);
	ck_assert_int_eq(L.status[2], STORE_TC_ERRORED);
	ck_assert_int_eq(L.status[3], STORE_TC_EXPIRED);
	ck_assert_str_eq(L.conv[0], "c1");
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_PENDING), 0);
	EXPECT_LIST("a", "e");
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_RESOLVED), 0);
	EXPECT_LIST("b");
	ck_assert_int_eq(list_tcs("c1", (1u << STORE_TC_ERRORED) | (1u << STORE_TC_EXPIRED)), 0);
	EXPECT_LIST("c", "d");
	ck_assert_int_eq(list_tcs("c1", 0xf), 0);
	ck_assert_uint_eq(L.n, 5);
	ck_assert_int_eq(list_tcs("c2", 0), 0);
	EXPECT_LIST("aa");
	mkconv("c3");
	ck_assert_int_eq(list_tcs("c3", 0), 0);
	ck_assert_uint_eq(L.n, 0);
	/* the callback's return stops the listing and is returned */
	memset(&L, 0, sizeof L);
	L.stop_after = 2;
	L.stop_ret = 3;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_tool_calls_list(t, "c1", 0, collect_tc, &L), 3);
	store_txn_abort(t);
	EXPECT_LIST("a", "b");
}
END_TEST

/* Every row of the store, across conversations, in id order; the rows of a
 * deleted conversation go with it; the callback stops the walk. */
START_TEST(tool_calls_each_walks_every_row)
{
	mkconv("c1");
	mkconv("c2");
	mktc("c1", "m");
	mktc("c2", "b");
	mktc("c1", "a");
	mktc("c2", "z");
	ck_assert_int_eq(resolve("b", STORE_TC_RESOLVED, mint(1)), 0);
	memset(&L, 0, sizeof L);
	store_txn *t = rbegin();
	ck_assert_int_eq(store_tool_calls_each(t, collect_tc, &L), 0);
	EXPECT_LIST("a", "b", "m", "z");
	ck_assert_str_eq(L.conv[0], "c1");
	ck_assert_str_eq(L.conv[1], "c2");
	ck_assert_int_eq(L.status[1], STORE_TC_RESOLVED);
	ck_assert_int_eq(L.status[2], STORE_TC_PENDING);
	memset(&L, 0, sizeof L);
	L.stop_after = 2;
	L.stop_ret = 5;
	ck_assert_int_eq(store_tool_calls_each(t, collect_tc, &L), 5);
	EXPECT_LIST("a", "b");
	ck_assert_int_eq(store_tool_calls_each(t, NULL, &L), STORE_E_INVAL);
	store_txn_abort(t);
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c2"), 0);
	commit(t);
	memset(&L, 0, sizeof L);
	t = rbegin();
	ck_assert_int_eq(store_tool_calls_each(t, collect_tc, &L), 0);
	EXPECT_LIST("a", "m");
	store_txn_abort(t);
}
END_TEST

START_TEST(tool_call_attempt_counts)
{
	mkconv("c1");
	mktc("c1", "tc");
	mktc("c1", "other");
	store_txn *t = wbegin();
	uint32_t att = 0;
	ck_assert_int_eq(store_tool_call_attempt(t, "tc", &att), 0);
	ck_assert_uint_eq(att, 1);
	ck_assert_int_eq(store_tool_call_attempt(t, "tc", &att), 0);
	ck_assert_uint_eq(att, 2);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_tool_call_attempt(t, "tc", &att), 0);
	ck_assert_uint_eq(att, 3);
	ck_assert_int_eq(store_tool_call_attempt(t, "tc", NULL), 0); /* may be NULL */
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_uint_eq(tc.attempts, 4);
	ck_assert_int_eq(tc.status, STORE_TC_PENDING); /* counting does not settle it */
	ck_assert_int_eq(store_tool_call_get(t, "other", &tc), 0);
	ck_assert_uint_eq(tc.attempts, 0);
	store_txn_abort(t);
}
END_TEST

/* ---- resolve -------------------------------------------------------------- */

START_TEST(resolve_settles_pending_call)
{
	char cid[STORE_ID_MAX + 1];
	memset(cid, 'q', STORE_ID_MAX); /* the longest id fills the out-param */
	cid[STORE_ID_MAX] = 0;
	mkconv(cid);
	mktc(cid, "tc");
	NOW = T0 + 77;
	store_bytes result = mmap1("stdout", "hello");
	char conv[STORE_ID_MAX + 1];
	memset(conv, 'Z', sizeof conv);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", STORE_TC_RESOLVED, result, conv), 0);
	commit(t);
	ck_assert_str_eq(conv, cid); /* NUL-terminated */
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_RESOLVED);
	ck_assert(bytes_eq_b(tc.result, result));
	ck_assert_int_eq(tc.resolved_at, T0 + 77);
	ck_assert_int_eq(tc.inserted_at, T0);
	store_txn_abort(t);
}
END_TEST

START_TEST(resolve_each_settled_status)
{
	mkconv("c1");
	const int st[] = { STORE_TC_RESOLVED, STORE_TC_ERRORED, STORE_TC_EXPIRED, STORE_TC_CANCELLED };
	const char *ids[] = { "r", "e", "x", "k" };
	for (int i = 0; i < 4; i++) {
		mktc("c1", ids[i]);
		ck_assert_int_eq(resolve(ids[i], st[i], raw(NULL, 0)), 0); /* len 0: nil */
	}
	store_txn *t = rbegin();
	for (int i = 0; i < 4; i++) {
		struct store_tool_call tc;
		ck_assert_int_eq(store_tool_call_get(t, ids[i], &tc), 0);
		ck_assert_int_eq(tc.status, st[i]);
	}
	store_txn_abort(t);
	/* A cancelled call is settled: a late result is stale, and the
	 * status index lists it under its own status. */
	ck_assert_int_eq(resolve("k", STORE_TC_RESOLVED, raw(NULL, 0)), STORE_E_STALE);
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_CANCELLED), 0);
	ck_assert_int_eq(L.n, 1);
	ck_assert_int_eq(L.status[0], STORE_TC_CANCELLED);
	ck_assert_int_eq(resolve("k", STORE_TC_CANCELLED + 1, raw(NULL, 0)), STORE_E_INVAL);
}
END_TEST

START_TEST(resolve_twice_is_stale)
{
	mkconv("c1");
	mktc("c1", "tc");
	ck_assert_int_eq(resolve("tc", STORE_TC_RESOLVED, mstr("first")), 0);
	NOW = T0 + 1000;
	char conv[STORE_ID_MAX + 1] = "untouched";
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", STORE_TC_ERRORED, mstr("second"), conv), STORE_E_STALE);
	commit(t);
	ck_assert_str_eq(conv, "untouched"); /* not written when stale */
	ck_assert_int_eq(resolve("tc", STORE_TC_RESOLVED, mstr("third")), STORE_E_STALE);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_RESOLVED);
	ck_assert(bytes_eq_b(tc.result, mstr("first")));
	ck_assert_int_eq(tc.resolved_at, T0);
	store_txn_abort(t);
	/* also twice inside one txn */
	mktc("c1", "tc2");
	t = wbegin();
	ck_assert_int_eq(store_tool_call_resolve(t, "tc2", STORE_TC_RESOLVED, mint(1), NULL), 0);
	ck_assert_int_eq(store_tool_call_resolve(t, "tc2", STORE_TC_RESOLVED, mint(2), NULL), STORE_E_STALE);
	commit(t);
}
END_TEST

START_TEST(resolve_rejects_invalid)
{
	mkconv("c1");
	mktc("c1", "tc");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", STORE_TC_PENDING, mint(1), NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", STORE_TC_CANCELLED + 1, mint(1), NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", -1, mint(1), NULL), STORE_E_INVAL);
	for (size_t i = 0; i < NBAD; i++)
		ck_assert_msg(store_tool_call_resolve(t, "tc", STORE_TC_RESOLVED, bad_blobs[i].b, NULL) ==
				      STORE_E_INVAL,
			      "%s", bad_blobs[i].what);
	commit(t);
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_PENDING), 0);
	EXPECT_LIST("tc"); /* still pending */
	ck_assert_int_eq(resolve("tc", STORE_TC_RESOLVED, mint(1)), 0);
}
END_TEST

START_TEST(resolve_removes_expiry)
{
	mkconv("c1");
	mktc("c1", "tc");
	mktc("c1", "keep");
	schedule("tc", T0 + 100);
	schedule("keep", T0 + 200);
	ck_assert_int_eq(resolve("tc", STORE_TC_RESOLVED, mint(1)), 0);
	int64_t d = 0;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 200);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("keep");
	store_txn *t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.deadline, 0);
	store_txn_abort(t);
	ck_assert_int_eq(resolve("keep", STORE_TC_RESOLVED, mint(1)), 0);
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
}
END_TEST

START_TEST(resolve_after_expiry_is_stale)
{
	mkconv("c1");
	mktc("c1", "tc");
	schedule("tc", T0 + 100);
	NOW = T0 + 150;
	/* the expiry fires: the owner of due expiries settles the call as expired */
	ck_assert_int_eq(due(store_now(S)), 0);
	EXPECT_LIST("tc");
	char conv[STORE_ID_MAX + 1];
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_resolve(t, "tc", STORE_TC_EXPIRED, mstr("timeout"), conv), 0);
	commit(t);
	ck_assert_str_eq(conv, "c1");
	/* the late answer loses */
	ck_assert_int_eq(resolve("tc", STORE_TC_RESOLVED, mstr("late")), STORE_E_STALE);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_EXPIRED);
	ck_assert(bytes_eq_b(tc.result, mstr("timeout")));
	store_txn_abort(t);
	ck_assert_int_eq(due(INT64_MAX), 0);
	ck_assert_uint_eq(L.n, 0);
}
END_TEST

/* A pending call made unknown and back: its status moves, its attempts and
 * args stay; listed by its own status bit; a move from the wrong state (or
 * of an unknown id) is stale and writes nothing; resolve settles an unknown
 * call as it does a pending one, and a settled call is never made unknown. */
START_TEST(tool_call_unknown_moves_and_settles)
{
	mkconv("c1");
	mktc("c1", "a");
	mktc("c1", "b");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_attempt(t, "a", NULL), 0);
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 1), 0);
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 1), STORE_E_STALE); /* already unknown */
	ck_assert_int_eq(store_tool_call_unknown(t, "b", 0), STORE_E_STALE); /* pending, not unknown */
	ck_assert_int_eq(store_tool_call_unknown(t, "nope", 1), STORE_E_STALE);
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 2), STORE_E_INVAL);
	ck_assert_int_eq(store_tool_call_unknown(t, "bad id!", 1), STORE_E_INVAL);
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "a", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_UNKNOWN);
	ck_assert_uint_eq(tc.attempts, 1);
	ck_assert_int_eq(tc.resolved_at, 0);
	ck_assert_uint_eq(tc.result.len, 0);
	ck_assert_int_eq(store_tool_call_get(t, "b", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	store_txn_abort(t);
	ck_assert_str_eq(store_tc_status_name(STORE_TC_UNKNOWN), "unknown");
	ck_assert_int_eq(store_tc_status_parse("unknown", 7), STORE_TC_UNKNOWN);
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_UNKNOWN), 0);
	EXPECT_LIST("a");
	ck_assert_int_eq(list_tcs("c1", 1u << STORE_TC_PENDING), 0);
	EXPECT_LIST("b");
	/* back to pending: dispatched again, the attempt kept */
	t = wbegin();
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 0), 0);
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 0), STORE_E_STALE);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_tool_call_get(t, "a", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_PENDING);
	ck_assert_uint_eq(tc.attempts, 1);
	store_txn_abort(t);
	/* unknown, then settled by resolve; then neither move applies */
	t = wbegin();
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 1), 0);
	commit(t);
	ck_assert_int_eq(resolve("a", STORE_TC_RESOLVED, mint(7)), 0);
	ck_assert_int_eq(resolve("a", STORE_TC_ERRORED, mint(8)), STORE_E_STALE);
	t = wbegin();
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 1), STORE_E_STALE);
	ck_assert_int_eq(store_tool_call_unknown(t, "a", 0), STORE_E_STALE);
	store_txn_abort(t);
	t = rbegin();
	ck_assert_int_eq(store_tool_call_get(t, "a", &tc), 0);
	ck_assert_int_eq(tc.status, STORE_TC_RESOLVED);
	ck_assert(bytes_eq_b(tc.result, mint(7)));
	ck_assert_uint_eq(tc.attempts, 1);
	store_txn_abort(t);
	/* a read transaction cannot move it */
	t = rbegin();
	ck_assert_int_eq(store_tool_call_unknown(t, "b", 1), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

void conf_tool_calls_add(TCase *tc)
{
	tcase_add_test(tc, tool_call_unknown_moves_and_settles);
	tcase_add_test(tc, tool_call_upsert_new_is_pending);
	tcase_add_test(tc, tool_call_upsert_updates_fields);
	tcase_add_test(tc, tool_call_upsert_never_reopens);
	tcase_add_test(tc, tool_call_id_of_other_conversation_conflicts);
	tcase_add_test(tc, tool_call_upsert_rejects_invalid);
	tcase_add_test(tc, tool_calls_list_by_status_mask);
	tcase_add_test(tc, tool_calls_each_walks_every_row);
	tcase_add_test(tc, tool_call_attempt_counts);
	tcase_add_test(tc, resolve_settles_pending_call);
	tcase_add_test(tc, resolve_each_settled_status);
	tcase_add_test(tc, resolve_twice_is_stale);
	tcase_add_test(tc, resolve_rejects_invalid);
	tcase_add_test(tc, resolve_removes_expiry);
	tcase_add_test(tc, resolve_after_expiry_is_stale);
}
