/*
 * Unknown and invalid ids: every operation taking a conversation id, and
 * the tool-call ones, on ids that name nothing or are not ids (case "ids").
 */
#include <check.h>
#include <string.h>

#include "tests/conformance/conformance.h"

static int noop_ev(void *arg, const struct store_event *e) { (void)arg; (void)e; return 0; }
static int noop_tc(void *arg, const struct store_tool_call *tc) { (void)arg; (void)tc; return 0; }
static int noop_mc(void *arg, const struct store_model_call *mc) { (void)arg; (void)mc; return 0; }
static int noop_eid(void *arg, const char *id, size_t len, uint64_t seq)
{
	(void)arg, (void)id, (void)len, (void)seq;
	return 0;
}

/* ---- unknown and invalid ids --------------------------------------------- */

/* Every operation taking a conversation id, on `id`, each expected to give
 * `want`; all other arguments valid. Runs in one write txn, which every
 * one of these errors must leave usable. */
static void every_conv_op(store_txn *t, const char *id, int want)
{
	struct store_conv c;
	struct store_usage u = { 1, 1, 0 };
	struct store_event_in e = ev("user_msg", mint(1), "k");
	struct store_range r = { 0 };
	struct store_summary sum;
	struct store_tool_call_in in = tcin("tc-new", "shell", STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
	uint64_t u64 = 0;
	int i = 0;
#define OP(call) ck_assert_msg((call) == want, "%s on \"%.20s\": got %d, want %d", #call, id, (call), want)
	OP(store_conv_get(t, id, &c));
	OP(store_conv_delete(t, id));
	OP(store_lease_next(t, id, &u64));
	OP(store_lease_check(t, id, 0));
	OP(store_usage_add(t, id, &u));
	OP(store_event_append(t, id, &e, &u64, &i));
	OP(store_events_append(t, id, &e, 1, &u64, &i));
	OP(store_event_latest_seq(t, id, &u64));
	OP(store_event_ids_each(t, id, noop_eid, NULL));
	OP(store_events_stream(t, id, &r, noop_ev, NULL));
	OP(store_summary_put(t, id, 1, 1, mint(1), &u64));
	OP(store_summary_latest(t, id, &sum));
	OP(store_load_since(t, id, &sum, &i, noop_ev, NULL));
	OP(store_tool_call_upsert(t, id, &in));
	OP(store_tool_calls_list(t, id, 0, noop_tc, NULL));
	OP(store_model_calls_list(t, id, noop_mc, NULL));
	OP(store_model_calls_gc(t, id, 0, &u64));
#undef OP
}

START_TEST(unknown_conversation_is_notfound)
{
	mkconv("known");
	mktc("known", "tc-1");
	store_txn *t = wbegin();
	every_conv_op(t, "unknown", STORE_E_NOTFOUND);
	/* nothing was created by any of them: the txn commits clean */
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "known", &e, &seq, NULL), 0);
	commit(t);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("known");
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "tc-new", &tc), STORE_E_NOTFOUND);
	store_txn_abort(t);
	ck_assert_uint_eq(latest("known"), 1);
}
END_TEST

START_TEST(unknown_tool_call)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_tool_call tc;
	uint32_t att = 5;
	char conv[STORE_ID_MAX + 1] = "untouched";
	ck_assert_int_eq(store_tool_call_get(t, "nope", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_attempt(t, "nope", &att), STORE_E_NOTFOUND);
	ck_assert_uint_eq(att, 5);
	ck_assert_int_eq(store_expiry_schedule(t, "nope", T0 + 10), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_resolve(t, "nope", STORE_TC_RESOLVED, mint(1), conv), STORE_E_STALE);
	ck_assert_str_eq(conv, "untouched");
	ck_assert_int_eq(store_expiry_cancel(t, "nope"), 0); /* 0 also when there was none */
	commit(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
}
END_TEST

START_TEST(invalid_ids_are_inval)
{
	char id129[STORE_ID_MAX + 2];
	memset(id129, 'x', STORE_ID_MAX + 1);
	id129[STORE_ID_MAX + 1] = 0;
	const char *bad[] = { "", id129, "a b", "a/b", "caf\xc3\xa9", "a\tb" };
	store_txn *t = wbegin();
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *id = bad[i];
		every_conv_op(t, id, STORE_E_INVAL);
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		ck_assert_msg(store_conv_create(t, id, mmap0()) == STORE_E_INVAL, "create %zu", i);
		ck_assert_msg(store_conv_put(t, id, &p) == STORE_E_INVAL, "put %zu", i);
		ck_assert_msg(store_conv_put_fsm(t, id, mint(1)) == STORE_E_INVAL, "put_fsm %zu", i);
	}
	commit(t);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	/* tool call ids */
	mkconv("c1");
	t = wbegin();
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *id = bad[i];
		struct store_tool_call_in in = tcin(id, "shell", STORE_EXEC_SERVER, mint(1), raw(NULL, 0));
		struct store_tool_call tc;
		uint32_t att;
		ck_assert_msg(store_tool_call_upsert(t, "c1", &in) == STORE_E_INVAL, "upsert %zu", i);
		ck_assert_msg(store_tool_call_get(t, id, &tc) == STORE_E_INVAL, "get %zu", i);
		ck_assert_msg(store_tool_call_attempt(t, id, &att) == STORE_E_INVAL, "attempt %zu", i);
		ck_assert_msg(store_tool_call_resolve(t, id, STORE_TC_RESOLVED, mint(1), NULL) == STORE_E_INVAL,
			      "resolve %zu", i);
		ck_assert_msg(store_expiry_schedule(t, id, T0) == STORE_E_INVAL, "schedule %zu", i);
		ck_assert_msg(store_expiry_cancel(t, id) == STORE_E_INVAL, "cancel %zu", i);
	}
	commit(t);
	ck_assert_int_eq(list_tcs("c1", 0), 0);
	ck_assert_uint_eq(L.n, 0);
}
END_TEST

void conf_ids_add(TCase *tc)
{
	tcase_add_test(tc, unknown_conversation_is_notfound);
	tcase_add_test(tc, unknown_tool_call);
	tcase_add_test(tc, invalid_ids_are_inval);
}
