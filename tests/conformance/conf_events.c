/*
 * Appending events: sequence numbers per conversation, the event fields
 * and the txn clock, idempotent appends by event id and the id index, batches
 * and the field limits (case "events").
 */
#include <check.h>
#include <string.h>

#include "tests/conformance/conformance.h"

START_TEST(seq_starts_at_one_and_increases)
{
	mkconv("c1");
	uint64_t prev = 0;
	for (int txn = 0; txn < 3; txn++) {
		store_txn *t = wbegin();
		for (int i = 0; i < 3; i++) {
			struct store_event_in e = ev("user_msg", mstr("hi"), NULL);
			uint64_t seq = 0;
			int dup = -1;
			ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, &dup), 0);
			ck_assert_uint_eq(seq, prev + 1);
			ck_assert_int_eq(dup, 0);
			prev = seq;
		}
		commit(t);
	}
	ck_assert_uint_eq(latest("c1"), 9);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	expect_run(1, 9);
}
END_TEST

START_TEST(seq_is_per_conversation)
{
	mkconv("a");
	mkconv("b");
	append_n("a", 3, "user_msg");
	append_n("b", 2, "user_msg");
	append_n("a", 1, "user_msg");
	ck_assert_uint_eq(latest("a"), 4);
	ck_assert_uint_eq(latest("b"), 2);
	ck_assert_int_eq(stream("b", 0, 0, 0, NULL), 0);
	expect_run(1, 2);
}
END_TEST

START_TEST(latest_seq_zero_when_empty)
{
	mkconv("c1");
	ck_assert_uint_eq(latest("c1"), 0);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(event_fields_round_trip)
{
	mkconv("c1");
	store_bytes content = mmap1("text", "hello");
	store_txn *t = wbegin();
	struct store_event_in a = ev("user_msg", content, "req-1");
	struct store_event_in b = ev("assistant_msg", mint(-7), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &a, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "c1", &b, &seq, NULL), 0);
	commit(t);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	EXPECT_SEQS(1, 2);
	ck_assert_str_eq(E.e[0].type, "user_msg");
	ck_assert(bytes_eq(raw(E.e[0].content, E.e[0].clen), content.ptr, content.len));
	ck_assert_str_eq(E.e[0].eid, "req-1");
	ck_assert_int_eq(E.e[0].inserted_at, T0);
	ck_assert_str_eq(E.e[1].type, "assistant_msg");
	ck_assert_uint_eq(E.e[1].eidlen, 0); /* len 0 when none */
	store_bytes m7 = mint(-7);
	ck_assert(bytes_eq(raw(E.e[1].content, E.e[1].clen), m7.ptr, m7.len));
}
END_TEST

START_TEST(event_inserted_at_is_txn_clock)
{
	mkconv("c1");
	NOW = T0 + 5000;
	append_n("c1", 1, "user_msg");
	NOW = T0 + 9000;
	append_n("c1", 1, "user_msg");
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	ck_assert_uint_eq(E.n, 2);
	ck_assert_int_eq(E.e[0].inserted_at, T0 + 5000);
	ck_assert_int_eq(E.e[1].inserted_at, T0 + 9000);
}
END_TEST

START_TEST(idempotent_append_returns_original_seq)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_event_in a = ev("user_msg", mstr("first"), "k1");
	struct store_event_in b = ev("user_msg", mstr("second"), "k2");
	struct store_event_in again = ev("assistant_msg", mstr("changed"), "k1");
	uint64_t seq = 0;
	int dup = -1;
	ck_assert_int_eq(store_event_append(t, "c1", &a, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(dup, 0);
	ck_assert_int_eq(store_event_append(t, "c1", &b, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 2);
	ck_assert_int_eq(dup, 0);
	/* same txn */
	ck_assert_int_eq(store_event_append(t, "c1", &again, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(dup, 1);
	commit(t);
	/* a later txn; dup may be NULL */
	t = wbegin();
	seq = 0;
	ck_assert_int_eq(store_event_append(t, "c1", &again, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	dup = -1;
	ck_assert_int_eq(store_event_append(t, "c1", &b, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 2);
	ck_assert_int_eq(dup, 1);
	commit(t);
	ck_assert_uint_eq(latest("c1"), 2);
	/* nothing of the duplicates was written: the first content stands */
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	EXPECT_SEQS(1, 2);
	store_bytes first = mstr("first");
	ck_assert(bytes_eq(raw(E.e[0].content, E.e[0].clen), first.ptr, first.len));
	ck_assert_str_eq(E.e[0].type, "user_msg");
}
END_TEST

START_TEST(event_id_scoped_to_conversation)
{
	mkconv("a");
	mkconv("b");
	store_txn *t = wbegin();
	struct store_event_in e = ev("user_msg", mstr("x"), "same");
	uint64_t seq;
	int dup;
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, &dup), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, &dup), 0);
	ck_assert_int_eq(dup, 1);
	ck_assert_int_eq(store_event_append(t, "b", &e, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(dup, 0);
	commit(t);
	ck_assert_uint_eq(latest("b"), 1);
}
END_TEST

/* What the idempotency index answers for an event_id: its event's seq, for
 * its conversation only, and nothing once the conversation is deleted. */
START_TEST(event_id_seq_lookup)
{
	mkconv("a");
	mkconv("b");
	store_txn *t = wbegin();
	struct store_event_in e1 = ev("user_msg", mstr("x"), "first"), e2 = ev("user_msg", mstr("y"), NULL),
			      e3 = ev("user_msg", mstr("z"), "third");
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "a", &e1, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e2, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e3, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e1, &seq, NULL), 0); /* a duplicate changes nothing */
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_event_id_seq(t, "a", "first", 5, &seq), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_event_id_seq(t, "a", "third", 5, &seq), 0);
	ck_assert_uint_eq(seq, 3);
	ck_assert_int_eq(store_event_id_seq(t, "a", "firstX", 5, &seq), 0); /* len bytes only */
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_event_id_seq(t, "a", "other", 5, &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_id_seq(t, "b", "first", 5, &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_id_seq(t, "nope", "first", 5, &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_id_seq(t, "a", "first", 0, &seq), STORE_E_INVAL);
	ck_assert_int_eq(store_event_id_seq(t, "a", "fi\0st", 5, &seq), STORE_E_INVAL);
	ck_assert_int_eq(store_event_id_seq(t, "a", "first", 5, NULL), STORE_E_INVAL);
	char longid[STORE_EVENT_ID_MAX + 1];
	memset(longid, 'x', sizeof longid);
	ck_assert_int_eq(store_event_id_seq(t, "a", longid, sizeof longid, &seq), STORE_E_INVAL);
	store_txn_abort(t);
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "a"), 0);
	ck_assert_int_eq(store_conv_create(t, "a", mmap0()), 0);
	ck_assert_int_eq(store_event_id_seq(t, "a", "first", 5, &seq), STORE_E_NOTFOUND);
	commit(t);
}
END_TEST

/* The idempotency index row by row: each event_id of the conversation with
 * its seq, in byte order; a duplicate adds no row; the callback stops it. */
struct eids {
	char id[8][STORE_EVENT_ID_MAX + 1];
	uint64_t seq[8];
	size_t n, stop_after;
	int stop_ret;
};

static int collect_eid(void *arg, const char *id, size_t len, uint64_t seq)
{
	struct eids *o = arg;
	ck_assert_uint_lt(o->n, 8);
	ck_assert_uint_le(len, STORE_EVENT_ID_MAX);
	memcpy(o->id[o->n], id, len);
	o->id[o->n][len] = 0;
	o->seq[o->n++] = seq;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

START_TEST(event_ids_each_lists_the_index)
{
	mkconv("a");
	mkconv("b");
	mkconv("c");
	store_txn *t = wbegin();
	struct store_event_in e1 = ev("user_msg", mstr("x"), "zeta"), e2 = ev("user_msg", mstr("y"), NULL),
			      e3 = ev("user_msg", mstr("z"), "alpha"), e4 = ev("user_msg", mstr("w"), "beta");
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "a", &e1, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e2, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e3, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e1, &seq, NULL), 0); /* a duplicate: no new row */
	ck_assert_int_eq(store_event_append(t, "b", &e4, &seq, NULL), 0);
	commit(t);
	struct eids o = { 0 };
	t = rbegin();
	ck_assert_int_eq(store_event_ids_each(t, "a", collect_eid, &o), 0);
	ck_assert_uint_eq(o.n, 2);
	ck_assert_str_eq(o.id[0], "alpha");
	ck_assert_uint_eq(o.seq[0], 3);
	ck_assert_str_eq(o.id[1], "zeta");
	ck_assert_uint_eq(o.seq[1], 1);
	memset(&o, 0, sizeof o);
	ck_assert_int_eq(store_event_ids_each(t, "b", collect_eid, &o), 0);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_str_eq(o.id[0], "beta");
	memset(&o, 0, sizeof o);
	ck_assert_int_eq(store_event_ids_each(t, "c", collect_eid, &o), 0);
	ck_assert_uint_eq(o.n, 0);
	ck_assert_int_eq(store_event_ids_each(t, "nope", collect_eid, &o), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_ids_each(t, "a", NULL, &o), STORE_E_INVAL);
	memset(&o, 0, sizeof o);
	o.stop_after = 1;
	o.stop_ret = 7;
	ck_assert_int_eq(store_event_ids_each(t, "a", collect_eid, &o), 7);
	ck_assert_uint_eq(o.n, 1);
	store_txn_abort(t);
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "a"), 0);
	ck_assert_int_eq(store_conv_create(t, "a", mmap0()), 0);
	memset(&o, 0, sizeof o);
	ck_assert_int_eq(store_event_ids_each(t, "a", collect_eid, &o), 0); /* gone with the conversation */
	ck_assert_uint_eq(o.n, 0);
	commit(t);
}
END_TEST

START_TEST(batch_appends_in_order)
{
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	struct store_event_in in[4] = {
		ev("user_msg", mint(10), NULL), ev("assistant_msg", mint(11), "x"),
		ev("tool_call", mint(12), NULL), ev("tool_result", mint(13), "y"),
	};
	uint64_t seqs[4] = { 0 };
	int dups[4] = { -1, -1, -1, -1 };
	store_txn *t = wbegin();
	ck_assert_int_eq(store_events_append(t, "c1", in, 4, seqs, dups), 0);
	commit(t);
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(seqs[i], 3 + (uint64_t)i);
		ck_assert_int_eq(dups[i], 0);
	}
	ck_assert_int_eq(stream("c1", 2, 0, 0, NULL), 0);
	EXPECT_SEQS(3, 4, 5, 6);
	const char *types[] = { "user_msg", "assistant_msg", "tool_call", "tool_result" };
	for (int i = 0; i < 4; i++) {
		ck_assert_str_eq(E.e[i].type, types[i]);
		ck_assert(bytes_eq(raw(E.e[i].content, E.e[i].clen), in[i].content.ptr, in[i].content.len));
	}
}
END_TEST

START_TEST(batch_duplicate_within_batch)
{
	mkconv("c1");
	struct store_event_in in[4] = {
		ev("user_msg", mint(1), "a"), ev("user_msg", mint(2), "b"),
		ev("user_msg", mint(3), "a"), ev("user_msg", mint(4), NULL),
	};
	uint64_t seqs[4];
	int dups[4];
	store_txn *t = wbegin();
	ck_assert_int_eq(store_events_append(t, "c1", in, 4, seqs, dups), 0);
	commit(t);
	ck_assert_uint_eq(seqs[0], 1);
	ck_assert_uint_eq(seqs[1], 2);
	ck_assert_uint_eq(seqs[2], 1); /* the first occurrence's seq */
	ck_assert_uint_eq(seqs[3], 3); /* no gap left by the duplicate */
	ck_assert_int_eq(dups[0], 0);
	ck_assert_int_eq(dups[1], 0);
	ck_assert_int_eq(dups[2], 1);
	ck_assert_int_eq(dups[3], 0);
	ck_assert_uint_eq(latest("c1"), 3);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	EXPECT_SEQS(1, 2, 3);
	store_bytes one = mint(1);
	ck_assert(bytes_eq(raw(E.e[0].content, E.e[0].clen), one.ptr, one.len));
}
END_TEST

START_TEST(batch_duplicate_across_batches)
{
	mkconv("c1");
	struct store_event_in b1[2] = { ev("user_msg", mint(1), "a"), ev("user_msg", mint(2), "b") };
	struct store_event_in b2[3] = { ev("user_msg", mint(3), "c"), ev("user_msg", mint(4), "a"),
					ev("user_msg", mint(5), "d") };
	uint64_t s1[2], s2[3];
	int d2[3];
	store_txn *t = wbegin();
	ck_assert_int_eq(store_events_append(t, "c1", b1, 2, s1, NULL), 0);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_events_append(t, "c1", b2, 3, s2, d2), 0);
	commit(t);
	ck_assert_uint_eq(s2[0], 3);
	ck_assert_uint_eq(s2[1], 1);
	ck_assert_uint_eq(s2[2], 4);
	ck_assert_int_eq(d2[0], 0);
	ck_assert_int_eq(d2[1], 1);
	ck_assert_int_eq(d2[2], 0);
	ck_assert_uint_eq(latest("c1"), 4);
}
END_TEST

START_TEST(batch_with_invalid_event_writes_nothing)
{
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	char long_type[34];
	memset(long_type, 'a', 33);
	long_type[33] = 0;
	const struct store_event_in bad[] = {
		ev("Bad", mint(1), NULL),          /* type alphabet */
		ev("", mint(1), NULL),             /* empty type */
		ev(long_type, mint(1), NULL),      /* 33-byte type */
		ev(NULL, mint(1), NULL),           /* no type */
		ev("user_msg", raw(two_objs, sizeof two_objs), NULL),
		ev("user_msg", raw(NULL, 0), NULL), /* no content */
		ev("user_msg", mint(1), ""),       /* empty event_id */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		/* the bad event last: the good ones before it must not land */
		struct store_event_in in[3] = { ev("user_msg", mint(1), "good-1"),
						ev("user_msg", mint(2), NULL), bad[i] };
		uint64_t seqs[3];
		store_txn *t = wbegin();
		ck_assert_msg(store_events_append(t, "c1", in, 3, seqs, NULL) == STORE_E_INVAL, "bad[%zu]", i);
		commit(t); /* INVAL leaves the txn usable, and wrote nothing */
		ck_assert_uint_eq(latest("c1"), 2);
	}
	/* good-1 was never recorded: appending it now is not a duplicate */
	store_txn *t = wbegin();
	struct store_event_in g = ev("user_msg", mint(1), "good-1");
	uint64_t seq;
	int dup = -1;
	ck_assert_int_eq(store_event_append(t, "c1", &g, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 3);
	ck_assert_int_eq(dup, 0);
	commit(t);
}
END_TEST

START_TEST(event_field_limits)
{
	mkconv("c1");
	char t32[33], t33[34], id200[201], id201[202];
	memset(t32, 'z', 32);
	t32[32] = 0;
	memset(t33, 'z', 33);
	t33[33] = 0;
	memset(id200, 'k', 200);
	id200[200] = 0;
	memset(id201, 'k', 201);
	id201[201] = 0;
	store_txn *t = wbegin();
	uint64_t seq;
	struct store_event_in e;
	e = ev(t32, mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	e = ev("a_b", mint(1), id200);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	/* event ids are any bytes but NUL, not the id alphabet */
	e = ev("x", mint(1), "any bytes / spaces \xc3\xa9");
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	e = ev(t33, mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	e = ev("a-b", mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	e = ev("a1", mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	e = ev("x", mint(1), id201);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	commit(t);
	ck_assert_uint_eq(latest("c1"), 3);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	ck_assert_str_eq(E.e[0].type, t32);
	ck_assert_uint_eq(E.e[1].eidlen, 200);
	ck_assert_str_eq(E.e[2].eid, "any bytes / spaces \xc3\xa9");
}
END_TEST

void conf_events_add(TCase *tc)
{
	tcase_add_test(tc, seq_starts_at_one_and_increases);
	tcase_add_test(tc, seq_is_per_conversation);
	tcase_add_test(tc, latest_seq_zero_when_empty);
	tcase_add_test(tc, event_fields_round_trip);
	tcase_add_test(tc, event_inserted_at_is_txn_clock);
	tcase_add_test(tc, idempotent_append_returns_original_seq);
	tcase_add_test(tc, event_id_scoped_to_conversation);
	tcase_add_test(tc, event_id_seq_lookup);
	tcase_add_test(tc, event_ids_each_lists_the_index);
	tcase_add_test(tc, batch_appends_in_order);
	tcase_add_test(tc, batch_duplicate_within_batch);
	tcase_add_test(tc, batch_duplicate_across_batches);
	tcase_add_test(tc, batch_with_invalid_event_writes_nothing);
	tcase_add_test(tc, event_field_limits);
}
