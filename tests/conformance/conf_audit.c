/*
 * The audit log of model calls: off by default, its fields and turn order,
 * replacement, invalid rows, the TTL collection, and its rows going with
 * their conversation (cases "audit_off" and "audit").
 */
#include <check.h>
#include <string.h>

#include "tests/conformance/conformance.h"

#define MC_MAX 32
struct mcs {
	size_t n;
	size_t stop_after;
	int stop_ret;
	uint64_t turn_ref[MC_MAX];
	int64_t inserted_at[MC_MAX];
	struct store_model_call first; /* pointers valid only in the txn */
	char model[MC_MAX][32];
	unsigned char rendered[MC_MAX][32];
	size_t rlen[MC_MAX];
};
static struct mcs M;

static int collect_mc(void *arg, const struct store_model_call *mc)
{
	struct mcs *o = arg;
	ck_assert_uint_lt(o->n, MC_MAX);
	ck_assert_uint_lt(mc->model.len, 32);
	ck_assert_uint_le(mc->rendered.len, 32);
	if (o->n == 0)
		o->first = *mc;
	o->turn_ref[o->n] = mc->turn_ref;
	o->inserted_at[o->n] = mc->inserted_at;
	memcpy(o->model[o->n], mc->model.ptr, mc->model.len);
	o->model[o->n][mc->model.len] = 0;
	memcpy(o->rendered[o->n], mc->rendered.ptr, mc->rendered.len);
	o->rlen[o->n] = mc->rendered.len;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

static int list_mcs(const char *conv)
{
	memset(&M, 0, sizeof M);
	store_txn *t = rbegin();
	int rc = store_model_calls_list(t, conv, collect_mc, &M);
	store_txn_abort(t);
	return rc;
}

static void expect_turns_at(int line, const uint64_t *want, size_t n)
{
	ck_assert_msg(M.n == n, "line %d: got %zu audit rows, want %zu", line, M.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(M.turn_ref[i] == want[i], "line %d: [%zu] turn_ref %llu, want %llu", line, i,
			      (unsigned long long)M.turn_ref[i], (unsigned long long)want[i]);
}
#define EXPECT_TURNS(...)                                                         \
	do {                                                                      \
		const uint64_t want_[] = { __VA_ARGS__ };                         \
		expect_turns_at(__LINE__, want_, sizeof want_ / sizeof want_[0]); \
	} while (0)

static uint64_t gc(const char *conv, int64_t ttl)
{
	uint64_t removed = 12345;
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_calls_gc(t, conv, ttl, &removed), 0);
	commit(t);
	return removed;
}

START_TEST(delete_removes_audit_rows)
{
	mkconv("c1");
	mkconv("c2");
	put_mc("c1", 1);
	put_mc("c1", 2);
	put_mc("c2", 1);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	mkconv("c1");
	ck_assert_int_eq(list_mcs("c1"), 0);
	ck_assert_uint_eq(M.n, 0);
	ck_assert_int_eq(list_mcs("c2"), 0);
	EXPECT_TURNS(1);
	NOW = T0 + 10;
	ck_assert_uint_eq(gc(NULL, 0), 1); /* only c2's row was left */
}
END_TEST

/* ---- audit ----------------------------------------------------------- */

START_TEST(audit_off_put_is_noop)
{
	mkconv("c1");
	struct store_model_call_in in = mcin(1, "m", mint(1));
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_call_put(t, "c1", &in), 0);
	commit(t);
	ck_assert_int_eq(list_mcs("c1"), 0);
	ck_assert_uint_eq(M.n, 0);
	NOW = T0 + 100;
	ck_assert_uint_eq(gc(NULL, 0), 0);
	ck_assert_uint_eq(gc("c1", 0), 0);
}
END_TEST

START_TEST(audit_fields_and_turn_ref_order)
{
	mkconv("c1");
	mkconv("c2");
	NOW = T0 + 4;
	store_bytes rendered = mmap1("messages", "...");
	struct store_model_call_in in = { 5, rendered, "model-x", { 100, 50, 0.125 }, 900, 3 };
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_call_put(t, "c1", &in), 0);
	commit(t);
	put_mc("c1", 1);
	put_mc("c1", 300);
	put_mc("c1", 3);
	put_mc("c2", 2);
	ck_assert_int_eq(list_mcs("c1"), 0);
	EXPECT_TURNS(1, 3, 5, 300);
	ck_assert_int_eq(list_mcs("c2"), 0);
	EXPECT_TURNS(2);
	/* the row of turn 5, read inside a txn */
	memset(&M, 0, sizeof M);
	M.stop_after = 3;
	M.stop_ret = 6;
	t = rbegin();
	ck_assert_int_eq(store_model_calls_list(t, "c1", collect_mc, &M), 6); /* stops, returned */
	ck_assert_uint_eq(M.n, 3);
	ck_assert_uint_eq(M.turn_ref[2], 5);
	ck_assert_str_eq(M.model[2], "model-x");
	ck_assert(bytes_eq(raw(M.rendered[2], M.rlen[2]), rendered.ptr, rendered.len));
	ck_assert_int_eq(M.inserted_at[2], T0 + 4);
	store_txn_abort(t);
	/* usage, latency and summary version of one row */
	memset(&M, 0, sizeof M);
	mkconv("c3");
	t = wbegin();
	ck_assert_int_eq(store_model_call_put(t, "c3", &in), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_model_calls_list(t, "c3", collect_mc, &M), 0);
	ck_assert_uint_eq(M.n, 1);
	ck_assert_uint_eq(M.first.turn_ref, 5);
	ck_assert_uint_eq(M.first.usage.input_tokens, 100);
	ck_assert_uint_eq(M.first.usage.output_tokens, 50);
	ck_assert(M.first.usage.cost == 0.125);
	ck_assert_uint_eq(M.first.latency_ms, 900);
	ck_assert_uint_eq(M.first.summary_version, 3);
	ck_assert(bytes_eq_s(M.first.model, "model-x"));
	store_txn_abort(t);
}
END_TEST

START_TEST(audit_same_turn_ref_replaces)
{
	mkconv("c1");
	put_mc("c1", 7);
	NOW = T0 + 9;
	struct store_model_call_in in = mcin(7, "second", mstr("again"));
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_call_put(t, "c1", &in), 0);
	commit(t);
	ck_assert_int_eq(list_mcs("c1"), 0);
	EXPECT_TURNS(7);
	ck_assert_str_eq(M.model[0], "second");
	ck_assert_int_eq(M.inserted_at[0], T0 + 9);
}
END_TEST

START_TEST(audit_put_rejects_invalid)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_model_call_in in = mcin(1, "m", mint(1));
	ck_assert_int_eq(store_model_call_put(t, "nope", &in), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_model_call_put(t, "", &in), STORE_E_INVAL);
	ck_assert_int_eq(store_model_call_put(t, "c1", NULL), STORE_E_INVAL);
	in = mcin(1, NULL, mint(1));
	ck_assert_int_eq(store_model_call_put(t, "c1", &in), STORE_E_INVAL);
	in = mcin(1, "m", raw(NULL, 0));
	ck_assert_int_eq(store_model_call_put(t, "c1", &in), STORE_E_INVAL);
	for (size_t i = 0; i < NBAD; i++) {
		in = mcin(1, "m", bad_blobs[i].b);
		ck_assert_msg(store_model_call_put(t, "c1", &in) == STORE_E_INVAL, "%s", bad_blobs[i].what);
	}
	commit(t);
	ck_assert_int_eq(list_mcs("c1"), 0);
	ck_assert_uint_eq(M.n, 0);
}
END_TEST

START_TEST(audit_gc_ttl_boundary)
{
	mkconv("c1");
	NOW = T0;
	put_mc("c1", 1);
	NOW = T0 + 1;
	put_mc("c1", 2);
	NOW = T0 + 2;
	put_mc("c1", 3);
	NOW = T0 + 1000; /* row 1 is exactly ttl old: kept */
	ck_assert_uint_eq(gc("c1", 1000), 0);
	ck_assert_int_eq(list_mcs("c1"), 0);
	EXPECT_TURNS(1, 2, 3);
	NOW = T0 + 1001; /* row 1 one ms older than ttl: removed; row 2 exactly ttl: kept */
	ck_assert_uint_eq(gc("c1", 1000), 1);
	ck_assert_int_eq(list_mcs("c1"), 0);
	EXPECT_TURNS(2, 3);
	NOW = T0 + 1003;
	ck_assert_uint_eq(gc("c1", 1000), 2);
	ck_assert_int_eq(list_mcs("c1"), 0);
	ck_assert_uint_eq(M.n, 0);
	ck_assert_uint_eq(gc("c1", 1000), 0);
	/* ttl 0: a row of this very ms is kept */
	put_mc("c1", 4);
	ck_assert_uint_eq(gc("c1", 0), 0);
	NOW++;
	ck_assert_uint_eq(gc("c1", 0), 1);
}
END_TEST

START_TEST(audit_gc_one_or_all_conversations)
{
	const char *ids[] = { "a", "b", "c" };
	for (int i = 0; i < 3; i++) {
		mkconv(ids[i]);
		for (uint64_t r = 1; r <= (uint64_t)i + 2; r++) /* a: 2, b: 3, c: 4 rows */
			put_mc(ids[i], r);
	}
	NOW = T0 + 1;
	ck_assert_uint_eq(gc("b", 0), 3); /* only b's */
	ck_assert_int_eq(list_mcs("a"), 0);
	ck_assert_uint_eq(M.n, 2);
	ck_assert_int_eq(list_mcs("b"), 0);
	ck_assert_uint_eq(M.n, 0);
	NOW = T0 + 50;
	put_mc("b", 9); /* too young to go */
	ck_assert_uint_eq(gc(NULL, 10), 6); /* a's and c's, across conversations */
	ck_assert_int_eq(list_mcs("a"), 0);
	ck_assert_uint_eq(M.n, 0);
	ck_assert_int_eq(list_mcs("c"), 0);
	ck_assert_uint_eq(M.n, 0);
	ck_assert_int_eq(list_mcs("b"), 0);
	EXPECT_TURNS(9);
}
END_TEST

void conf_audit_off_add(TCase *tc)
{
	tcase_add_test(tc, audit_off_put_is_noop);
}

void conf_audit_add(TCase *tc)
{
	tcase_add_test(tc, delete_removes_audit_rows);
	tcase_add_test(tc, audit_fields_and_turn_ref_order);
	tcase_add_test(tc, audit_same_turn_ref_replaces);
	tcase_add_test(tc, audit_put_rejects_invalid);
	tcase_add_test(tc, audit_gc_ttl_boundary);
	tcase_add_test(tc, audit_gc_one_or_all_conversations);
}
