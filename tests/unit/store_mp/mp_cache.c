/*
 * The writer's cache of each conversation's number and last seq, against
 * other processes' commits, deletes and re-creations, empty commits, aborts,
 * reads beside a write and nested streams (case "writer cache").
 */
#include <check.h>
#include <msgpack.h>
#include <stdio.h>

#include "store/store.h"
#include "tests/unit/store_mp/store_mp.h"

/* A write transaction remembers each conversation's number and last seq
 * for the next one of the same process; these pin what must make it forget. */

/* The log of conv is exactly the event_ids want[0..n), seqs 1..n. */
static void assert_eids(const char *conv, const char *const *want, size_t n)
{
	struct recs r;
	load(conv, &r);
	ck_assert_uint_eq(r.n, n);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(r.v[i].seq, i + 1);
		ck_assert_str_eq(r.v[i].eid, want[i]);
	}
	recs_free(&r);
}

static struct store_event_in event(msgpack_sbuffer *sb, const char *eid)
{
	pack_content(sb, eid, 0);
	return (struct store_event_in){ "user_msg", { sb->data, sb->size }, eid };
}

/* Another process appends between two of ours: ours must follow its seq. */
START_TEST(cache_other_writer_appends)
{
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "p-1", 0), 0);
	ck_assert_int_eq(append1("c", "p-2", 0), 0);
	const char *args[] = { dir, "append", "1", "q", "c", NULL };
	child_run(args);
	ck_assert_int_eq(append1("c", "p-3", 0), 0);
	const char *want[] = { "p-1", "p-2", "q-1", "p-3" };
	assert_eids("c", want, 4);
}
END_TEST

/* Another process deletes the conversation and creates it again (a new
 * number): ours must write to the new one, from seq 1 on. */
START_TEST(cache_other_writer_recreates)
{
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "p-1", 0), 0);
	ck_assert_int_eq(append1("c", "p-2", 0), 0);
	const char *args[] = { dir, "delete", "c", ",", "append", "1", "q", "c", NULL };
	child_run(args);
	const char *want[] = { "q-1", "p-3" };
	assert_eids("c", want, 1); /* a read sees the new one too */
	ck_assert_int_eq(append1("c", "p-3", 0), 0);
	assert_eids("c", want, 2);
	/* and deleted by the other process, gone for ours too */
	const char *del[] = { dir, "delete", "c", NULL };
	child_run(del);
	msgpack_sbuffer sb;
	store_txn *x;
	uint64_t seq;
	msgpack_sbuffer_init(&sb);
	struct store_event_in e = event(&sb, "p-4");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e, &seq, NULL), STORE_E_NOTFOUND);
	store_txn_abort(x);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* A commit that wrote nothing takes no transaction id: the next writer,
 * here another process, commits under the id ours would have had. */
START_TEST(cache_after_empty_commit)
{
	store_txn *x;
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "p-1", 0), 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_expiry_cancel(x, "no-such-call"), 0); /* succeeds, writes nothing */
	uint64_t seq;
	ck_assert_int_eq(store_event_latest_seq(x, "c", &seq), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_txn_commit(x), 0);
	const char *args[] = { dir, "append", "1", "q", "c", NULL };
	child_run(args);
	ck_assert_int_eq(append1("c", "p-2", 0), 0);
	const char *want[] = { "p-1", "q-1", "p-2" };
	assert_eids("c", want, 3);
}
END_TEST

/* Delete and create again inside one transaction; abort, then go on. */
START_TEST(cache_within_txn_and_abort)
{
	msgpack_sbuffer sb[8];
	store_txn *x;
	uint64_t seq, seqs[2];
	int dup;
	for (int i = 0; i < 8; i++)
		msgpack_sbuffer_init(&sb[i]);
	open_store(0, 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	struct store_event_in e1 = event(&sb[0], "e1");
	ck_assert_int_eq(store_event_append(x, "c", &e1, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_conv_delete(x, "c"), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e1, &seq, NULL), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	struct store_event_in e23[2] = { event(&sb[1], "e2"), event(&sb[2], "e3") };
	ck_assert_int_eq(store_events_append(x, "c", e23, 2, seqs, NULL), 0);
	ck_assert_uint_eq(seqs[0], 1);
	ck_assert_uint_eq(seqs[1], 2);
	ck_assert_int_eq(store_txn_commit(x), 0);
	const char *want[] = { "e2", "e3", "e5", "e4", "e7" };
	assert_eids("c", want, 2);

	/* an aborted append leaves no trace: neither its seq nor its event_id */
	struct store_event_in e4 = event(&sb[3], "e4");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e4, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 3);
	store_txn_abort(x);
	struct store_event_in e5 = event(&sb[4], "e5");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e5, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 3);
	ck_assert_int_eq(dup, 0);
	ck_assert_int_eq(store_event_append(x, "c", &e4, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 4);
	ck_assert_int_eq(dup, 0);
	ck_assert_int_eq(store_txn_commit(x), 0);

	/* an aborted delete and re-creation: the old conversation stays */
	struct store_event_in e6 = event(&sb[5], "e6");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_delete(x, "c"), 0);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e6, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	store_txn_abort(x);
	assert_eids("c", want, 4);
	ck_assert_int_eq(append1("c", "e7", 0), 0);
	assert_eids("c", want, 5);
	for (int i = 0; i < 8; i++)
		msgpack_sbuffer_destroy(&sb[i]);
}
END_TEST

/* A read txn beside an open write txn of the same process must not see
 * what the write txn did (reads use the cache only at its exact snapshot). */
START_TEST(cache_read_beside_write)
{
	msgpack_sbuffer sb;
	store_txn *r, *w;
	uint64_t seq;
	msgpack_sbuffer_init(&sb);
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &r), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "c", &seq), 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &w), 0);
	ck_assert_int_eq(store_conv_create(w, "d", empty_map), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "d", &seq), STORE_E_NOTFOUND);
	struct store_event_in e = event(&sb, "e1");
	ck_assert_int_eq(store_event_append(w, "d", &e, &seq, NULL), 0);
	ck_assert_int_eq(store_conv_delete(w, "c"), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "d", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_latest_seq(r, "c", &seq), 0);
	store_txn_abort(r);
	ck_assert_int_eq(store_txn_commit(w), 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &r), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "c", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_latest_seq(r, "d", &seq), 0);
	ck_assert_uint_eq(seq, 1);
	store_txn_abort(r);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* A callback calling back into the store on the same transaction while the
 * stream that called it goes on. */
struct nest_ctx {
	store_txn *x;
	uint64_t n, inner;
};

static int count_inner(void *arg, const struct store_event *ev)
{
	struct nest_ctx *c = arg;
	c->inner = ev->seq;
	return 0;
}

static int nest_each(void *arg, const struct store_event *ev)
{
	struct nest_ctx *c = arg;
	struct store_range last = { .limit = 1 };
	struct store_summary sum;
	int has;
	uint64_t seq;
	ck_assert_uint_eq(ev->seq, ++c->n);
	ck_assert_int_eq(store_event_latest_seq(c->x, "c", &seq), 0);
	ck_assert_uint_eq(seq, 5);
	ck_assert_int_eq(store_events_stream(c->x, "c", &last, count_inner, c), 0);
	ck_assert_uint_eq(c->inner, 5);
	ck_assert_int_eq(store_load_since(c->x, "c", &sum, &has, count_inner, c), 0);
	ck_assert_int_eq(has, 1);
	return 0;
}

START_TEST(cache_nested_streams)
{
	open_store(0, 0);
	conv_create("c");
	for (int i = 1; i <= 5; i++) {
		char eid[16];
		snprintf(eid, sizeof eid, "e%d", i);
		ck_assert_int_eq(append1("c", eid, 0), 0);
	}
	store_txn *x;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_summary_put(x, "c", 1, 2, empty_map, NULL), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	for (int mode = STORE_READ; mode <= STORE_WRITE; mode++) {
		struct nest_ctx c = { NULL, 0, 0 };
		struct store_range all = { 0 };
		ck_assert_int_eq(store_txn_begin(st, mode, &c.x), 0);
		ck_assert_int_eq(store_events_stream(c.x, "c", &all, nest_each, &c), 0);
		ck_assert_uint_eq(c.n, 5);
		c.n = 2; /* after the summary's to_seq: 3, 4, 5 */
		ck_assert_int_eq(store_load_since(c.x, "c", NULL, NULL, nest_each, &c), 0);
		ck_assert_uint_eq(c.n, 5);
		store_txn_abort(c.x);
	}
}
END_TEST

/* More conversations than the cache holds, appended to in turns. */
START_TEST(cache_many_conversations)
{
	enum { NCONV = 700 };
	msgpack_sbuffer sb;
	store_txn *x;
	char id[32];
	uint64_t seq;
	msgpack_sbuffer_init(&sb);
	open_store(0, 0);
	struct store_event_in e = event(&sb, "x");
	e.event_id = NULL;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	for (int i = 0; i < NCONV; i++) {
		snprintf(id, sizeof id, "conv-%d", i);
		ck_assert_int_eq(store_conv_create(x, id, empty_map), 0);
	}
	ck_assert_int_eq(store_txn_commit(x), 0);
	for (uint64_t round = 1; round <= 3; round++) {
		ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
		for (int i = 0; i < NCONV; i++) {
			snprintf(id, sizeof id, "conv-%d", (int)((i * 3 + round) % NCONV));
			ck_assert_int_eq(store_event_append(x, id, &e, &seq, NULL), 0);
			ck_assert_uint_eq(seq, round);
		}
		ck_assert_int_eq(store_txn_commit(x), 0);
	}
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &x), 0);
	for (int i = 0; i < NCONV; i++) {
		snprintf(id, sizeof id, "conv-%d", i);
		ck_assert_int_eq(store_event_latest_seq(x, id, &seq), 0);
		ck_assert_uint_eq(seq, 3);
	}
	store_txn_abort(x);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

void mp_cache_add(TCase *tc)
{
	tcase_add_test(tc, cache_other_writer_appends);
	tcase_add_test(tc, cache_other_writer_recreates);
	tcase_add_test(tc, cache_after_empty_commit);
	tcase_add_test(tc, cache_within_txn_and_abort);
	tcase_add_test(tc, cache_read_beside_write);
	tcase_add_test(tc, cache_nested_streams);
	tcase_add_test(tc, cache_many_conversations);
}
