/*
 * Processes racing to resolve one tool call, and the lease fencing an old
 * worker's writes once the next generation is taken (case "processes").
 */
#include <check.h>
#include <stdio.h>

#include "store/store.h"
#include "tests/unit/store_mp/store_mp.h"

/* Several processes race to resolve one pending tool call: exactly one wins,
 * every other gets STORE_E_STALE, and the row holds the winner's result. */
START_TEST(concurrent_resolvers)
{
	store_txn *x;
	struct kid *k[NPROC];
	char tag[NPROC][16];
	open_store(0, 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	struct store_tool_call_in tc = { "tc-1", "approve", STORE_EXEC_HUMAN, { "\x80", 1 }, { 0 } };
	ck_assert_int_eq(store_tool_call_upsert(x, "c", &tc), 0);
	ck_assert_int_eq(store_expiry_schedule(x, "tc-1", store_txn_now(x) + 3600 * 1000), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);

	for (int i = 0; i < NPROC; i++) {
		snprintf(tag[i], sizeof tag[i], "r%d", i);
		const char *args[] = { "-g", dir, "resolve", "tc-1", tag[i], NULL };
		k[i] = spawn(args);
	}
	for (int i = 0; i < NPROC; i++)
		expect_byte(k[i], 'R', 5000);
	for (int i = 0; i < NPROC; i++)
		release(k[i]);
	int winner = -1, stale = 0;
	for (int i = 0; i < NPROC; i++) {
		int rc = kid_exit(k[i], 10000);
		ck_assert_msg(rc == CHILD_OK || rc == CHILD_STALE, "resolver %d exited %d", i, rc);
		if (rc == CHILD_OK) {
			ck_assert_msg(winner < 0, "resolvers %d and %d both won", winner, i);
			winner = i;
		} else {
			stale++;
		}
	}
	ck_assert_int_ge(winner, 0);
	ck_assert_int_eq(stale, NPROC - 1);

	struct store_tool_call got;
	int64_t dl;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &x), 0);
	ck_assert_int_eq(store_tool_call_get(x, "tc-1", &got), 0);
	ck_assert_int_eq(got.status, STORE_TC_RESOLVED);
	ck_assert(content_is(got.result, tag[winner], 0));
	ck_assert_int_gt(got.resolved_at, 0);
	ck_assert_int_eq(got.deadline, 0);
	ck_assert_int_eq(store_expiry_earliest(x, &dl), STORE_E_NOTFOUND);
	store_txn_abort(x);

	/* And a late resolver here is stale too. */
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_tool_call_resolve(x, "tc-1", STORE_TC_ERRORED, (store_bytes){ 0 }, NULL),
			 STORE_E_STALE);
	store_txn_abort(x);
}
END_TEST

/* ---- 7. fencing ------------------------------------------------------- */

static uint64_t lease_next(const char *conv)
{
	store_txn *x;
	uint64_t gen = 0;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_next(x, conv, &gen), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	return gen;
}

/* Two live workers of one conversation with different lease generations: once
 * the supervisor takes the next generation, the old worker's writes are
 * fenced (nothing written) while the new one's commit. */
START_TEST(fencing)
{
	char g1s[32], g2s[32];
	open_store(0, 0);
	conv_create("c");
	uint64_t g1 = lease_next("c");
	ck_assert_uint_eq(g1, 1);
	const char *a_args[] = { dir, "worker", "c", sz(g1s, g1), "a", NULL };
	struct kid *a = spawn(a_args);
	kid_send(a, 'w');
	expect_byte(a, 'o', 5000);

	/* The supervisor replaces the worker; the old one is still alive. */
	uint64_t g2 = lease_next("c");
	ck_assert_uint_eq(g2, 2);
	const char *b_args[] = { dir, "worker", "c", sz(g2s, g2), "b", NULL };
	struct kid *b = spawn(b_args);
	kid_send(b, 'w');
	expect_byte(b, 'o', 5000);
	kid_send(a, 'w');
	expect_byte(a, 'f', 5000);
	kid_send(b, 'w');
	expect_byte(b, 'o', 5000);
	kid_send(a, 'w');
	expect_byte(a, 'f', 5000);
	release(a);
	release(b);
	ck_assert_int_eq(kid_exit(a, 5000), CHILD_OK);
	ck_assert_int_eq(kid_exit(b, 5000), CHILD_OK);

	store_txn *x;
	struct store_conv c;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &x), 0);
	ck_assert_int_eq(store_lease_check(x, "c", g1), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_check(x, "c", g2), 0);
	ck_assert_int_eq(store_conv_get(x, "c", &c), 0);
	ck_assert_uint_eq(c.lease, g2);
	store_txn_abort(x);

	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_str_eq(r.v[0].eid, "a-1");
	ck_assert_str_eq(r.v[1].eid, "b-1");
	ck_assert_str_eq(r.v[2].eid, "b-2");
	for (size_t i = 0; i < r.n; i++)
		ck_assert_uint_eq(r.v[i].seq, i + 1);
	recs_free(&r);
}
END_TEST

void mp_fencing_add(TCase *tc)
{
	tcase_add_test(tc, concurrent_resolvers);
	tcase_add_test(tc, fencing);
}
