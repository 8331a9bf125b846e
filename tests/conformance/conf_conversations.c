/*
 * Conversation rows: create, get, the flagged patches of store_conv_put,
 * the FSM field, listing by status with a cursor and a limit, the id list and
 * the id alphabet (case "conversations").
 */
#include <check.h>
#include <string.h>

#include "tests/conformance/conformance.h"

START_TEST(conv_create_and_get)
{
	store_bytes settings = mmap1("model", "m1");
	NOW = T0 + 7;
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "conv-1", settings), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "conv-1", &c), 0);
	ck_assert(bytes_eq_s(c.id, "conv-1"));
	ck_assert(bytes_eq_b(c.settings, settings));
	ck_assert_uint_eq(c.fsm_state.len, 0); /* never set */
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert_int_eq(c.created_at, T0 + 7);
	ck_assert_int_eq(c.updated_at, T0 + 7);
	ck_assert_uint_eq(c.lease, 0);
	ck_assert_uint_eq(c.usage.input_tokens, 0);
	ck_assert_uint_eq(c.usage.output_tokens, 0);
	ck_assert(c.usage.cost == 0);
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_create_twice_conflicts)
{
	mkconv("c1");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "c1", mmap1("k", "v")), STORE_E_CONFLICT);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.settings, mmap0())); /* the first settings stand */
	store_txn_abort(t);
	/* also within the creating txn */
	t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "c2", mmap0()), 0);
	ck_assert_int_eq(store_conv_create(t, "c2", mmap0()), STORE_E_CONFLICT);
	commit(t);
}
END_TEST

START_TEST(conv_create_settings_must_be_map)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "c1", mstr("not a map")), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create(t, "c1", mint(1)), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create(t, "c1", raw(NULL, 0)), STORE_E_INVAL);
	for (size_t i = 0; i < NBAD; i++)
		ck_assert_msg(store_conv_create(t, "c1", bad_blobs[i].b) == STORE_E_INVAL, "%s", bad_blobs[i].what);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), STORE_E_NOTFOUND);
	commit(t);
}
END_TEST

START_TEST(conv_put_patches_flagged_fields)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "c1", mmap1("a", "1")), 0);
	commit(t);
	struct store_conv c;

	NOW = T0 + 100; /* status only: settings and fsm kept */
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE,
				      .settings = mmap1("ignored", "x"), .fsm_state = mstr("ignored") };
	t = wbegin();
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	ck_assert(bytes_eq_b(c.settings, mmap1("a", "1")));
	ck_assert_uint_eq(c.fsm_state.len, 0);
	ck_assert_int_eq(c.created_at, T0);
	ck_assert_int_eq(c.updated_at, T0 + 100);
	store_txn_abort(t);

	NOW = T0 + 200; /* settings replace wholesale: the old key is gone */
	p = (struct store_conv_patch){ .set = STORE_SET_SETTINGS, .settings = mmap1("b", "2"), .status = 99 };
	t = wbegin();
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.settings, mmap1("b", "2")));
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	ck_assert_int_eq(c.updated_at, T0 + 200);
	store_txn_abort(t);

	/* fsm_state, then all three at once */
	p = (struct store_conv_patch){ .set = STORE_SET_FSM, .fsm_state = mmap1("state", "waiting") };
	t = wbegin();
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.fsm_state, mmap1("state", "waiting")));
	ck_assert(bytes_eq_b(c.settings, mmap1("b", "2")));
	store_txn_abort(t);
	p = (struct store_conv_patch){ .set = STORE_SET_SETTINGS | STORE_SET_STATUS | STORE_SET_FSM,
				       .settings = mmap0(), .status = STORE_ENDED, .fsm_state = mint(3) };
	t = wbegin();
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.settings, mmap0()));
	ck_assert_int_eq(c.status, STORE_ENDED);
	ck_assert(bytes_eq_b(c.fsm_state, mint(3)));
	ck_assert_int_eq(c.created_at, T0);
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_put_keeps_lease_and_usage)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t gen;
	struct store_usage u = { 10, 20, 0.5 };
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &u), 0);
	struct store_conv_patch p = { .set = STORE_SET_SETTINGS | STORE_SET_STATUS, .settings = mmap1("x", "y"),
				      .status = STORE_SUSPENDED };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(1)), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.lease, gen);
	ck_assert_uint_eq(c.usage.input_tokens, 10);
	ck_assert_uint_eq(c.usage.output_tokens, 20);
	ck_assert(c.usage.cost == 0.5);
	ck_assert_int_eq(c.status, STORE_SUSPENDED);
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_put_creates_missing)
{
	NOW = T0 + 3;
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_put(t, "new", &p), 0);
	p = (struct store_conv_patch){ .set = STORE_SET_SETTINGS, .settings = mmap1("k", "v") };
	ck_assert_int_eq(store_conv_put(t, "new2", &p), 0);
	p = (struct store_conv_patch){ .set = 0 };
	ck_assert_int_eq(store_conv_put(t, "new3", &p), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "new", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	ck_assert(bytes_eq_b(c.settings, mmap0())); /* defaults to an empty map */
	ck_assert_uint_eq(c.fsm_state.len, 0);
	ck_assert_int_eq(c.created_at, T0 + 3);
	ck_assert_uint_eq(c.lease, 0);
	ck_assert_int_eq(store_conv_get(t, "new2", &c), 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert(bytes_eq_b(c.settings, mmap1("k", "v")));
	ck_assert_int_eq(store_conv_get(t, "new3", &c), 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
	uint64_t seq = 9;
	ck_assert_int_eq(store_event_latest_seq(t, "new", &seq), 0);
	ck_assert_uint_eq(seq, 0);
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_put_rejects_invalid_patch)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "c1", mmap1("a", "1")), 0);
	commit(t);
	t = wbegin();
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_STATUS_MAX + 1 };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), STORE_E_INVAL);
	p.status = -1;
	ck_assert_int_eq(store_conv_put(t, "c1", &p), STORE_E_INVAL);
	p = (struct store_conv_patch){ .set = STORE_SET_SETTINGS | STORE_SET_STATUS, .settings = mstr("x"),
				       .status = STORE_ENDED };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), STORE_E_INVAL);
	for (size_t i = 0; i < NBAD; i++) {
		p = (struct store_conv_patch){ .set = STORE_SET_FSM | STORE_SET_STATUS,
					       .fsm_state = bad_blobs[i].b, .status = STORE_ENDED };
		ck_assert_msg(store_conv_put(t, "c1", &p) == STORE_E_INVAL, "fsm %s", bad_blobs[i].what);
		ck_assert_msg(store_conv_put_fsm(t, "c1", bad_blobs[i].b) == STORE_E_INVAL, "%s",
			      bad_blobs[i].what);
		p = (struct store_conv_patch){ .set = STORE_SET_SETTINGS, .settings = bad_blobs[i].b };
		ck_assert_msg(store_conv_put(t, "c1", &p) == STORE_E_INVAL, "settings %s", bad_blobs[i].what);
	}
	/* nor does a rejected patch create a missing row */
	p = (struct store_conv_patch){ .set = STORE_SET_STATUS, .status = 17 };
	ck_assert_int_eq(store_conv_put(t, "missing", &p), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_put_fsm(t, "missing", raw(two_objs, 2)), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_put(t, "c1", NULL), STORE_E_INVAL);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert(bytes_eq_b(c.settings, mmap1("a", "1")));
	ck_assert_uint_eq(c.fsm_state.len, 0);
	ck_assert_int_eq(store_conv_get(t, "missing", &c), STORE_E_NOTFOUND);
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_put_fsm_creates_missing_row)
{
	store_bytes fsm = mmap1("state", "idle");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_put_fsm(t, "fresh", fsm), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "fresh", &c), 0);
	ck_assert(bytes_eq_b(c.fsm_state, fsm));
	ck_assert(bytes_eq_b(c.settings, mmap0()));
	ck_assert_int_eq(c.status, STORE_IDLE);
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_put_fsm_touches_only_fsm)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "c1", mmap1("s", "1")), 0);
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_SUSPENDED };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	commit(t);
	NOW = T0 + 50;
	t = wbegin();
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(1)), 0);
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(2)), 0); /* replaces */
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.fsm_state, mint(2)));
	ck_assert(bytes_eq_b(c.settings, mmap1("s", "1")));
	ck_assert_int_eq(c.status, STORE_SUSPENDED);
	ck_assert_int_eq(c.created_at, T0);
	ck_assert_int_eq(c.updated_at, T0 + 50);
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_list_in_id_order)
{
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	mkconv("b");
	mkconv("a");
	mkconv("c");
	mkconv("B");
	mkconv("a.1");
	int more = -1;
	ck_assert_int_eq(list_convs(-1, NULL, 0, &more), 0);
	EXPECT_IDS("B", "a", "a.1", "b", "c"); /* byte order */
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0); /* more may be NULL */
	ck_assert_uint_eq(C.n, 5);
}
END_TEST

START_TEST(conv_list_status_filter)
{
	mkconv("a");
	mkconv("b");
	mkconv("c");
	mkconv("d");
	set_status("b", STORE_ACTIVE);
	set_status("d", STORE_ACTIVE);
	set_status("c", STORE_ENDED);
	ck_assert_int_eq(list_convs(STORE_ACTIVE, NULL, 0, NULL), 0);
	EXPECT_IDS("b", "d");
	ck_assert_int_eq(C.status[0], STORE_ACTIVE);
	ck_assert_int_eq(list_convs(STORE_IDLE, NULL, 0, NULL), 0);
	EXPECT_IDS("a");
	ck_assert_int_eq(list_convs(STORE_ENDED, NULL, 0, NULL), 0);
	EXPECT_IDS("c");
	ck_assert_int_eq(list_convs(STORE_SUSPENDED, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 4);
	ck_assert_int_eq(list_convs(STORE_STATUS_MAX + 1, NULL, 0, NULL), STORE_E_INVAL);
	ck_assert_int_eq(list_convs(-2, NULL, 0, NULL), STORE_E_INVAL);
}
END_TEST

/* paused: a status like the others, kept, listed and filtered by. */
START_TEST(conv_paused_status)
{
	mkconv("a");
	mkconv("b");
	set_status("b", STORE_PAUSED);
	ck_assert_int_eq(list_convs(STORE_PAUSED, NULL, 0, NULL), 0);
	EXPECT_IDS("b");
	ck_assert_int_eq(C.status[0], STORE_PAUSED);
	store_txn *t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "b", &c), 0);
	ck_assert_int_eq(c.status, STORE_PAUSED);
	store_txn_abort(t);
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	ck_assert_int_eq(list_convs(STORE_PAUSED, NULL, 0, NULL), 0);
	EXPECT_IDS("b");
	set_status("b", STORE_ACTIVE);
	ck_assert_int_eq(list_convs(STORE_PAUSED, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	t = wbegin();
	struct store_conv_patch bad = { .set = STORE_SET_STATUS, .status = STORE_STATUS_MAX + 1 };
	ck_assert_int_eq(store_conv_put(t, "a", &bad), STORE_E_INVAL);
	commit(t);
}
END_TEST

START_TEST(conv_list_after_cursor)
{
	mkconv("a");
	mkconv("b");
	mkconv("bb");
	mkconv("c");
	ck_assert_int_eq(list_convs(-1, "a", 0, NULL), 0);
	EXPECT_IDS("b", "bb", "c");
	ck_assert_int_eq(list_convs(-1, "b", 0, NULL), 0); /* strictly after */
	EXPECT_IDS("bb", "c");
	ck_assert_int_eq(list_convs(-1, "ba", 0, NULL), 0); /* a cursor that is not a conversation */
	EXPECT_IDS("bb", "c");
	ck_assert_int_eq(list_convs(-1, "A", 0, NULL), 0);
	EXPECT_IDS("a", "b", "bb", "c");
	ck_assert_int_eq(list_convs(-1, "c", 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	ck_assert_int_eq(list_convs(-1, "zzz", 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
}
END_TEST

static int collect_id(void *arg, const char *id, size_t len)
{
	struct convs *o = arg;
	ck_assert_uint_lt(o->n, sizeof o->id / sizeof o->id[0]);
	ck_assert_uint_le(len, STORE_ID_MAX);
	memcpy(o->id[o->n], id, len);
	o->id[o->n][len] = 0;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

/* Every id, in the order store_conv_list gives them; the callback's return
 * stops the walk and is handed back. */
START_TEST(conv_ids_in_id_order)
{
	store_txn *t = rbegin();
	memset(&C, 0, sizeof C);
	ck_assert_int_eq(store_conv_ids(t, collect_id, &C), 0);
	ck_assert_uint_eq(C.n, 0);
	ck_assert_int_eq(store_conv_ids(t, NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
	mkconv("b");
	mkconv("a");
	mkconv("B");
	mkconv("a.1");
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "b"), 0);
	commit(t);
	t = rbegin();
	memset(&C, 0, sizeof C);
	ck_assert_int_eq(store_conv_ids(t, collect_id, &C), 0);
	EXPECT_IDS("B", "a", "a.1");
	memset(&C, 0, sizeof C);
	C.stop_after = 2;
	C.stop_ret = 7;
	ck_assert_int_eq(store_conv_ids(t, collect_id, &C), 7);
	EXPECT_IDS("B", "a");
	store_txn_abort(t);
}
END_TEST

START_TEST(conv_list_limit_and_more)
{
	const char *ids[] = { "c1", "c2", "c3", "c4", "c5" };
	for (int i = 0; i < 5; i++)
		mkconv(ids[i]);
	int more = -1;
	ck_assert_int_eq(list_convs(-1, NULL, 2, &more), 0);
	EXPECT_IDS("c1", "c2");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(list_convs(-1, "c2", 2, &more), 0);
	EXPECT_IDS("c3", "c4");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(list_convs(-1, "c4", 2, &more), 0);
	EXPECT_IDS("c5");
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(list_convs(-1, "c3", 2, &more), 0); /* exactly the rest */
	EXPECT_IDS("c4", "c5");
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(list_convs(-1, NULL, 5, &more), 0);
	ck_assert_uint_eq(C.n, 5);
	ck_assert_int_eq(more, 0);
	/* paging with a cursor visits every conversation exactly once */
	char after[STORE_ID_MAX + 1] = "";
	size_t seen = 0;
	for (int page = 0; page < 10; page++) {
		ck_assert_int_eq(list_convs(-1, after[0] ? after : NULL, 2, &more), 0);
		for (size_t i = 0; i < C.n; i++)
			ck_assert_str_eq(C.id[i], ids[seen++]);
		if (!more)
			break;
		strcpy(after, C.id[C.n - 1]);
	}
	ck_assert_uint_eq(seen, 5);
}
END_TEST

START_TEST(conv_list_more_counts_only_matches)
{
	mkconv("a");
	mkconv("b");
	mkconv("c");
	mkconv("d");
	set_status("b", STORE_ACTIVE);
	int more = -1;
	ck_assert_int_eq(list_convs(STORE_IDLE, NULL, 1, &more), 0);
	EXPECT_IDS("a");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(list_convs(STORE_IDLE, "c", 1, &more), 0);
	EXPECT_IDS("d");
	ck_assert_int_eq(more, 0);
	/* "b" is the only active one: nothing further matches */
	ck_assert_int_eq(list_convs(STORE_ACTIVE, NULL, 1, &more), 0);
	EXPECT_IDS("b");
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(list_convs(STORE_IDLE, NULL, 3, &more), 0);
	EXPECT_IDS("a", "c", "d");
	ck_assert_int_eq(more, 0);
}
END_TEST

START_TEST(conv_list_callback_return_stops)
{
	mkconv("a");
	mkconv("b");
	mkconv("c");
	memset(&C, 0, sizeof C);
	C.stop_after = 2;
	C.stop_ret = 5;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_conv_list(t, -1, NULL, 0, collect_conv, &C, NULL), 5);
	store_txn_abort(t);
	EXPECT_IDS("a", "b");
}
END_TEST

/* ---- ids ---------------------------------------------------------------- */

START_TEST(id_alphabet_and_length)
{
	char id128[STORE_ID_MAX + 1], id129[STORE_ID_MAX + 2];
	memset(id128, 'x', STORE_ID_MAX);
	id128[STORE_ID_MAX] = 0;
	memset(id129, 'x', STORE_ID_MAX + 1);
	id129[STORE_ID_MAX + 1] = 0;
	const char *good = "AZaz09._:-";
	ck_assert_int_eq(store_id_valid(good, strlen(good)), 1);
	ck_assert_int_eq(store_id_valid(id128, STORE_ID_MAX), 1);
	ck_assert_int_eq(store_id_valid("a", 1), 1);
	ck_assert_int_eq(store_id_valid(id129, STORE_ID_MAX + 1), 0);
	ck_assert_int_eq(store_id_valid("", 0), 0);
	ck_assert_int_eq(store_id_valid(NULL, 0), 0);
	const char *bad[] = { "a b", "a/b", "a\xc3\xa9", "a\n", "a,b", "a*", "a@b", "a+b", "a#" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(store_id_valid(bad[i], strlen(bad[i])) == 0, "%s", bad[i]);
	ck_assert_int_eq(store_id_valid("a\0b", 3), 0); /* NUL inside the length */
	ck_assert_int_eq(store_id_valid("ab!", 2), 1);   /* only `len` bytes count */
	/* the boundary ids work as conversation ids */
	mkconv(id128);
	mkconv(good);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 2);
}
END_TEST

void conf_conversations_add(TCase *tc)
{
	tcase_add_test(tc, conv_create_and_get);
	tcase_add_test(tc, conv_create_twice_conflicts);
	tcase_add_test(tc, conv_create_settings_must_be_map);
	tcase_add_test(tc, conv_put_patches_flagged_fields);
	tcase_add_test(tc, conv_put_keeps_lease_and_usage);
	tcase_add_test(tc, conv_put_creates_missing);
	tcase_add_test(tc, conv_put_rejects_invalid_patch);
	tcase_add_test(tc, conv_put_fsm_creates_missing_row);
	tcase_add_test(tc, conv_put_fsm_touches_only_fsm);
	tcase_add_test(tc, conv_list_in_id_order);
	tcase_add_test(tc, conv_list_status_filter);
	tcase_add_test(tc, conv_paused_status);
	tcase_add_test(tc, conv_list_after_cursor);
	tcase_add_test(tc, conv_list_limit_and_more);
	tcase_add_test(tc, conv_ids_in_id_order);
	tcase_add_test(tc, conv_list_more_counts_only_matches);
	tcase_add_test(tc, conv_list_callback_return_stops);
	tcase_add_test(tc, id_alphabet_and_length);
}
