/*
 * Runs: put, get and replace, listing newest first with a cursor, invalid
 * rows, deletion with the conversation, and store_runs_each over every row
 * (cases "runs" and "runs_each").
 */
#include <check.h>
#include <string.h>

#include "tests/conformance/conformance.h"

static struct store_run mkrun(uint64_t id, int status, uint32_t attempt)
{
	return (struct store_run){ .id = id, .status = status, .attempt = attempt, .from_seq = id, .to_seq = id + 1,
				   .first_seq = status == STORE_RUN_COMPLETED ? id + 2 : 0,
				   .last_seq = status == STORE_RUN_COMPLETED ? id + 3 : 0, .model = raw("m", 1),
				   .usage = { 10 * id, id, 0.5 }, .started_at = T0 + (int64_t)id,
				   .ended_at = status == STORE_RUN_RUNNING ? 0 : T0 + 100 };
}

static int put_run(const char *conv, struct store_run r)
{
	store_txn *t = wbegin();
	int e = store_run_put(t, conv, &r);
	commit(t);
	return e;
}

static struct {
	size_t n;
	uint64_t ids[16];
	int status[16];
} RL;

static int run_one(void *arg, const struct store_run *r)
{
	if (RL.n < 16) {
		RL.ids[RL.n] = r->id;
		RL.status[RL.n] = r->status;
	}
	RL.n++;
	return 0;
}

static int list_runs(const char *conv, uint64_t before, size_t limit, int *more)
{
	memset(&RL, 0, sizeof RL);
	store_txn *t = rbegin();
	int e = store_runs_list(t, conv, before, limit, run_one, NULL, more);
	store_txn_abort(t);
	return e;
}

START_TEST(runs_put_get_replace)
{
	mkconv("c1");
	ck_assert_int_eq(put_run("c1", mkrun(1, STORE_RUN_RUNNING, 1)), 0);
	store_txn *t = rbegin();
	struct store_run r;
	ck_assert_int_eq(store_run_get(t, "c1", 1, &r), 0);
	ck_assert_int_eq(r.status, STORE_RUN_RUNNING);
	ck_assert_uint_eq(r.attempt, 1);
	ck_assert_uint_eq(r.from_seq, 1);
	ck_assert_uint_eq(r.to_seq, 2);
	ck_assert_uint_eq(r.first_seq, 0);
	ck_assert_int_eq(r.ended_at, 0);
	ck_assert_int_eq(r.started_at, T0 + 1);
	ck_assert(r.model.len == 1 && memcmp(r.model.ptr, "m", 1) == 0);
	ck_assert_int_eq(store_run_get(t, "c1", 2, &r), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_run_get(t, "nope", 1, &r), STORE_E_NOTFOUND);
	store_txn_abort(t);
	/* Its end replaces it, under the same id. */
	ck_assert_int_eq(put_run("c1", mkrun(1, STORE_RUN_COMPLETED, 1)), 0);
	t = rbegin();
	ck_assert_int_eq(store_run_get(t, "c1", 1, &r), 0);
	ck_assert_int_eq(r.status, STORE_RUN_COMPLETED);
	ck_assert_uint_eq(r.first_seq, 3);
	ck_assert_uint_eq(r.last_seq, 4);
	ck_assert_uint_eq(r.usage.input_tokens, 10);
	ck_assert_uint_eq(r.usage.output_tokens, 1);
	ck_assert(r.usage.cost == 0.5);
	ck_assert_int_eq(r.ended_at, T0 + 100);
	store_txn_abort(t);
	ck_assert_str_eq(store_run_status_name(STORE_RUN_INTERRUPTED), "interrupted");
	ck_assert_str_eq(store_run_status_name(STORE_RUN_CANCELLED), "cancelled");
	ck_assert_ptr_null(store_run_status_name(STORE_RUN_INTERRUPTED + 1));
	ck_assert_ptr_null(store_run_status_name(-1));
}
END_TEST

START_TEST(runs_list_newest_first_with_cursor)
{
	mkconv("c1");
	mkconv("c2");
	mkconv("c0");
	for (uint64_t i = 1; i <= 5; i++)
		ck_assert_int_eq(put_run("c1", mkrun(i, i == 5 ? STORE_RUN_RUNNING : STORE_RUN_COMPLETED, 1)), 0);
	ck_assert_int_eq(put_run("c2", mkrun(1, STORE_RUN_FAILED, 1)), 0);
	int more = -1;
	ck_assert_int_eq(list_runs("c1", 0, 0, &more), 0);
	ck_assert_uint_eq(RL.n, 5);
	ck_assert_int_eq(more, 0);
	for (int i = 0; i < 5; i++)
		ck_assert_uint_eq(RL.ids[i], 5 - i);
	ck_assert_int_eq(RL.status[0], STORE_RUN_RUNNING);
	ck_assert_int_eq(list_runs("c1", 0, 2, &more), 0);
	ck_assert_uint_eq(RL.n, 2);
	ck_assert_int_eq(more, 1);
	ck_assert_uint_eq(RL.ids[1], 4);
	ck_assert_int_eq(list_runs("c1", 4, 2, &more), 0); /* the cursor: ids below 4 */
	ck_assert_uint_eq(RL.n, 2);
	ck_assert_uint_eq(RL.ids[0], 3);
	ck_assert_uint_eq(RL.ids[1], 2);
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(list_runs("c1", 2, 2, &more), 0);
	ck_assert_uint_eq(RL.n, 1);
	ck_assert_uint_eq(RL.ids[0], 1);
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(list_runs("c1", 1, 0, &more), 0);
	ck_assert_uint_eq(RL.n, 0);
	ck_assert_int_eq(list_runs("c1", 100, 1, NULL), 0);
	ck_assert_uint_eq(RL.ids[0], 5);
	ck_assert_int_eq(list_runs("c2", 0, 0, &more), 0); /* the last conversation's, and only its */
	ck_assert_uint_eq(RL.n, 1);
	ck_assert_int_eq(RL.status[0], STORE_RUN_FAILED);
	ck_assert_int_eq(list_runs("c0", 0, 0, &more), 0); /* a conversation before them: none */
	ck_assert_uint_eq(RL.n, 0);
	ck_assert_int_eq(list_runs("nope", 0, 0, &more), STORE_E_NOTFOUND);
}
END_TEST

START_TEST(runs_put_rejects_invalid)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_run r = mkrun(1, STORE_RUN_RUNNING, 1);
	ck_assert_int_eq(store_run_put(t, "nope", &r), STORE_E_NOTFOUND);
	r.id = 0;
	ck_assert_int_eq(store_run_put(t, "c1", &r), STORE_E_INVAL);
	r = mkrun(1, STORE_RUN_INTERRUPTED + 1, 1);
	ck_assert_int_eq(store_run_put(t, "c1", &r), STORE_E_INVAL);
	r = mkrun(1, STORE_RUN_RUNNING, 0);
	ck_assert_int_eq(store_run_put(t, "c1", &r), STORE_E_INVAL);
	r = mkrun(1, STORE_RUN_RUNNING, 1);
	r.model.ptr = NULL;
	ck_assert_int_eq(store_run_put(t, "c1", &r), STORE_E_INVAL);
	r = mkrun(1, STORE_RUN_RUNNING, 1);
	r.usage.cost = -1;
	ck_assert_int_eq(store_run_put(t, "c1", &r), STORE_E_INVAL);
	ck_assert_int_eq(store_run_put(t, "c1", NULL), STORE_E_INVAL);
	/* Nothing of that poisoned the transaction. */
	r = mkrun(1, STORE_RUN_RUNNING, 1);
	ck_assert_int_eq(store_run_put(t, "c1", &r), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_run_put(t, "c1", &r), STORE_E_INVAL); /* a read transaction */
	ck_assert_int_eq(store_runs_list(t, "c1", 0, 0, NULL, NULL, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_run_get(t, "c1", 0, &r), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

START_TEST(delete_removes_runs)
{
	mkconv("c1");
	mkconv("c2");
	ck_assert_int_eq(put_run("c1", mkrun(1, STORE_RUN_COMPLETED, 1)), 0);
	ck_assert_int_eq(put_run("c2", mkrun(1, STORE_RUN_COMPLETED, 1)), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	mkconv("c1");
	ck_assert_int_eq(list_runs("c1", 0, 0, NULL), 0);
	ck_assert_uint_eq(RL.n, 0);
	ck_assert_int_eq(list_runs("c2", 0, 0, NULL), 0);
	ck_assert_uint_eq(RL.n, 1);
}
END_TEST

/* ---- every run row (store_runs_each) ----------------------------------- */

struct run_seen {
	char conv[8][16];
	uint64_t id[8];
	uint32_t attempt[8];
	int n, stop_at;
};

static int run_seen_one(void *arg, store_bytes conv, const struct store_run *r)
{
	struct run_seen *rs = arg;
	ck_assert_int_lt(rs->n, 8);
	ck_assert_uint_lt(conv.len, 16);
	memcpy(rs->conv[rs->n], conv.ptr, conv.len);
	rs->conv[rs->n][conv.len] = 0;
	rs->id[rs->n] = r->id;
	rs->attempt[rs->n] = r->attempt;
	rs->n++;
	return rs->n == rs->stop_at ? 7 : 0;
}

START_TEST(runs_each_walks_every_row_by_conversation)
{
	mkconv("b");
	mkconv("a");
	mkconv("gone");
	ck_assert_int_eq(put_run("b", mkrun(2, STORE_RUN_RUNNING, 2)), 0);
	ck_assert_int_eq(put_run("b", mkrun(1, STORE_RUN_INTERRUPTED, 1)), 0);
	ck_assert_int_eq(put_run("a", mkrun(1, STORE_RUN_COMPLETED, 1)), 0);
	ck_assert_int_eq(put_run("gone", mkrun(1, STORE_RUN_COMPLETED, 1)), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "gone"), 0); /* its runs go with it */
	commit(t);
	struct run_seen rs = { .stop_at = 0 };
	t = rbegin();
	ck_assert_int_eq(store_runs_each(t, run_seen_one, &rs), 0);
	ck_assert_int_eq(rs.n, 3);
	/* Grouped by conversation (in no order promised), ascending id within each. */
	int ia = strcmp(rs.conv[0], "a") == 0 ? 0 : 2, ib = ia == 0 ? 1 : 0;
	ck_assert_str_eq(rs.conv[ia], "a");
	ck_assert_uint_eq(rs.id[ia], 1);
	ck_assert_str_eq(rs.conv[ib], "b");
	ck_assert_str_eq(rs.conv[ib + 1], "b");
	ck_assert_uint_eq(rs.id[ib], 1);
	ck_assert_uint_eq(rs.attempt[ib], 1);
	ck_assert_uint_eq(rs.id[ib + 1], 2);
	ck_assert_uint_eq(rs.attempt[ib + 1], 2);
	/* The callback's return stops the walk and comes back; no fn is INVAL. */
	memset(&rs, 0, sizeof rs);
	rs.stop_at = 2;
	ck_assert_int_eq(store_runs_each(t, run_seen_one, &rs), 7);
	ck_assert_int_eq(rs.n, 2);
	ck_assert_int_eq(store_runs_each(t, NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
	/* An empty store has none. */
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "a"), 0);
	ck_assert_int_eq(store_conv_delete(t, "b"), 0);
	memset(&rs, 0, sizeof rs);
	ck_assert_int_eq(store_runs_each(t, run_seen_one, &rs), 0); /* in a write txn too */
	ck_assert_int_eq(rs.n, 0);
	store_txn_abort(t);
}
END_TEST

void conf_runs_add(TCase *tc)
{
	tcase_add_test(tc, runs_put_get_replace);
	tcase_add_test(tc, runs_list_newest_first_with_cursor);
	tcase_add_test(tc, runs_put_rejects_invalid);
	tcase_add_test(tc, delete_removes_runs);
}

void conf_runs_each_add(TCase *tc)
{
	tcase_add_test(tc, runs_each_walks_every_row_by_conversation);
}
