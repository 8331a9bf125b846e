/*
 * The store conformance suite: every behaviour store/store.h promises, one
 * test per behaviour, written against store.h alone (plus libc, Check and
 * msgpack-c to build content), so a second backend links it unchanged.
 *
 * Each test runs in its own fork (Check's fork mode); the checked fixture
 * opens a fresh store in a fresh mkdtemp() directory inside that fork, so no
 * environment ever crosses a fork. Time comes from a fake clock the tests set.
 * With AGENTD_TEST_STORE=pg every store directory stands for a fresh
 * PostgreSQL database of its own (target.h): the same tests, unchanged,
 * run against the PostgreSQL backend.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/conformance/target.h"
#include "tests/suites.h"

/* ---- fixture --------------------------------------------------------- */

#define T0 INT64_C(1700000000000)

static char dir[PATH_MAX];
static store *S;
static int64_t NOW;
static struct store_opts OPTS;

static int64_t fake_clock(void *arg)
{
	return *(const int64_t *)arg;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_dir(void)
{
	conf_target_cleanup();
	if (dir[0])
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	dir[0] = 0;
}

/* msgpack buffers built by a test, freed in teardown (LeakSanitizer). */
#define POOL_MAX 512
static msgpack_sbuffer *pool[POOL_MAX];
static size_t npool;
static msgpack_packer PK;

static void pool_free(void)
{
	for (size_t i = 0; i < npool; i++) {
		msgpack_sbuffer_free(pool[i]);
		pool[i] = NULL;
	}
	npool = 0;
}

static void open_store(void)
{
	ck_assert_int_eq(store_open(&S, dir, &OPTS), 0);
	ck_assert_ptr_nonnull(S);
}

static void reopen_store(void)
{
	store_close(S);
	S = NULL;
	open_store();
}

static void setup_common(int audit)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/agentd-conf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	/* A failed assertion exits the fork without teardown: clean up anyway. */
	atexit(rm_dir);
	NOW = T0;
	memset(&OPTS, 0, sizeof OPTS);
	OPTS.sync = STORE_SYNC_NONE; /* durability is not what this suite measures */
	OPTS.audit = audit;
	OPTS.map_size = (size_t)32 << 20;
	OPTS.clock = fake_clock;
	OPTS.clock_arg = &NOW;
	open_store();
}

static void setup(void)
{
	setup_common(0);
}

static void setup_audit(void)
{
	setup_common(1);
}

static void teardown(void)
{
	store_close(S);
	S = NULL;
	pool_free();
	rm_dir();
}

/* ---- content builders ------------------------------------------------ */

/* Start a new msgpack buffer; pack into PK, then take it with built(). */
static msgpack_packer *B(void)
{
	ck_assert_uint_lt(npool, POOL_MAX);
	msgpack_sbuffer *sb = msgpack_sbuffer_new();
	ck_assert_ptr_nonnull(sb);
	pool[npool++] = sb;
	msgpack_packer_init(&PK, sb, msgpack_sbuffer_write);
	return &PK;
}

static store_bytes built(void)
{
	msgpack_sbuffer *sb = pool[npool - 1];
	return (store_bytes){ sb->data, sb->size };
}

static store_bytes mstr(const char *s)
{
	msgpack_pack_str_with_body(B(), s, strlen(s));
	return built();
}

static store_bytes mint(int64_t v)
{
	msgpack_pack_int64(B(), v);
	return built();
}

static store_bytes mmap1(const char *k, const char *v)
{
	msgpack_packer *pk = B();
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, k, strlen(k));
	msgpack_pack_str_with_body(pk, v, strlen(v));
	return built();
}

static store_bytes mmap0(void)
{
	msgpack_pack_map(B(), 0);
	return built();
}

static store_bytes raw(const void *p, size_t len)
{
	return (store_bytes){ p, len };
}

/* Byte strings that are not exactly one msgpack object. */
static const unsigned char two_objs[] = { 0x01, 0x02 };            /* 1, 2 */
static const unsigned char trunc_arr[] = { 0x92, 0x01 };           /* [1, <missing>] */
static const unsigned char trunc_str[] = { 0xa5, 'a', 'b' };       /* str of 5, 2 given */
static const unsigned char never_used[] = { 0xc1 };                /* reserved byte */
static const unsigned char map_then_junk[] = { 0x80, 0x00 };       /* {} 0 */

static const struct bad_blob {
	const char *what;
	store_bytes b;
} bad_blobs[] = {
	{ "two objects", { two_objs, sizeof two_objs } },
	{ "truncated array", { trunc_arr, sizeof trunc_arr } },
	{ "truncated str", { trunc_str, sizeof trunc_str } },
	{ "reserved 0xc1", { never_used, sizeof never_used } },
	{ "map + trailing byte", { map_then_junk, sizeof map_then_junk } },
};
#define NBAD (sizeof bad_blobs / sizeof bad_blobs[0])

static int bytes_eq(store_bytes b, const void *p, size_t len)
{
	return b.len == len && (len == 0 || memcmp(b.ptr, p, len) == 0);
}

static int bytes_eq_s(store_bytes b, const char *s)
{
	return bytes_eq(b, s, strlen(s));
}

static int bytes_eq_b(store_bytes a, store_bytes b)
{
	return bytes_eq(a, b.ptr, b.len);
}

/* ---- transactions ---------------------------------------------------- */

static store_txn *wbegin(void)
{
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE, &t), 0);
	ck_assert_ptr_nonnull(t);
	return t;
}

static store_txn *rbegin(void)
{
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_READ, &t), 0);
	ck_assert_ptr_nonnull(t);
	return t;
}

static void commit(store_txn *t)
{
	ck_assert_int_eq(store_txn_commit(t), 0);
}

static void mkconv(const char *id)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, id, mmap0()), 0);
	commit(t);
}

static struct store_event_in ev(const char *type, store_bytes content, const char *event_id)
{
	return (struct store_event_in){ type, content, event_id };
}

/* Append n events "e1".."en" (content: their 1-based index), one txn. */
static void append_n(const char *conv, size_t n, const char *type)
{
	store_txn *t = wbegin();
	for (size_t i = 0; i < n; i++) {
		struct store_event_in e = ev(type, mint((int64_t)i + 1), NULL);
		uint64_t seq = 0;
		ck_assert_int_eq(store_event_append(t, conv, &e, &seq, NULL), 0);
	}
	commit(t);
}

static uint64_t latest(const char *conv)
{
	store_txn *t = rbegin();
	uint64_t seq = 99;
	ck_assert_int_eq(store_event_latest_seq(t, conv, &seq), 0);
	store_txn_abort(t);
	return seq;
}

/* ---- event collection ------------------------------------------------ */

#define EV_MAX 600
struct ev_copy {
	uint64_t seq;
	char type[40];
	unsigned char content[64];
	size_t clen;
	char eid[STORE_EVENT_ID_MAX + 1];
	size_t eidlen;
	int64_t inserted_at;
};
struct evs {
	size_t n;
	size_t stop_after; /* 0: never stop */
	int stop_ret;
	struct ev_copy e[EV_MAX];
};
static struct evs E;

static int collect_ev(void *arg, const struct store_event *e)
{
	struct evs *c = arg;
	ck_assert_uint_lt(c->n, EV_MAX);
	ck_assert_uint_le(e->type.len, 32);
	ck_assert_uint_le(e->event_id.len, STORE_EVENT_ID_MAX);
	struct ev_copy *o = &c->e[c->n++];
	o->seq = e->seq;
	memcpy(o->type, e->type.ptr, e->type.len);
	o->type[e->type.len] = 0;
	/* large contents keep only their length (tests compare small ones) */
	o->clen = e->content.len;
	if (e->content.len <= sizeof o->content)
		memcpy(o->content, e->content.ptr, e->content.len);
	else
		o->clen = SIZE_MAX;
	if (e->event_id.len)
		memcpy(o->eid, e->event_id.ptr, e->event_id.len);
	o->eid[e->event_id.len] = 0;
	o->eidlen = e->event_id.len;
	o->inserted_at = e->inserted_at;
	return c->stop_after && c->n == c->stop_after ? c->stop_ret : 0;
}

static int stream(const char *conv, uint64_t after, uint64_t before, size_t limit, const char *type)
{
	memset(&E, 0, sizeof E);
	struct store_range r = { after, before, limit, type };
	store_txn *t = rbegin();
	int rc = store_events_stream(t, conv, &r, collect_ev, &E);
	store_txn_abort(t);
	return rc;
}

static void expect_seqs_at(int line, const uint64_t *want, size_t n)
{
	ck_assert_msg(E.n == n, "line %d: got %zu events, want %zu", line, E.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(E.e[i].seq == want[i], "line %d: event %zu has seq %llu, want %llu", line, i,
			      (unsigned long long)E.e[i].seq, (unsigned long long)want[i]);
}
#define EXPECT_SEQS(...)                                                       \
	do {                                                                   \
		const uint64_t want_[] = { __VA_ARGS__ };                      \
		expect_seqs_at(__LINE__, want_, sizeof want_ / sizeof want_[0]); \
	} while (0)
#define EXPECT_NO_EVENTS() ck_assert_uint_eq(E.n, 0)

/* Expect seqs lo..hi (inclusive) in order. */
static void expect_run(uint64_t lo, uint64_t hi)
{
	ck_assert_uint_eq(E.n, hi - lo + 1);
	for (size_t i = 0; i < E.n; i++)
		ck_assert_uint_eq(E.e[i].seq, lo + i);
}

/* ---- events ---------------------------------------------------------- */

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

/* ---- stream ------------------------------------------------------------ */

START_TEST(stream_after_before_exclusive)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	ck_assert_int_eq(stream("c1", 3, 7, 0, NULL), 0);
	EXPECT_SEQS(4, 5, 6);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0); /* before 0: unbounded */
	expect_run(1, 10);
	ck_assert_int_eq(stream("c1", 9, 0, 0, NULL), 0);
	EXPECT_SEQS(10);
	ck_assert_int_eq(stream("c1", 0, 2, 0, NULL), 0);
	EXPECT_SEQS(1);
	ck_assert_int_eq(stream("c1", 0, 1, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 10, 0, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 4, 5, 0, NULL), 0); /* nothing strictly between */
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 7, 3, 0, NULL), 0); /* empty range */
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, 100, 0, NULL), 0);
	expect_run(1, 10);
}
END_TEST

START_TEST(stream_after_max_is_empty)
{
	mkconv("c1");
	append_n("c1", 3, "user_msg");
	ck_assert_int_eq(stream("c1", UINT64_MAX, 0, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", UINT64_MAX, 0, 2, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", UINT64_MAX, 0, 2, "user_msg"), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, UINT64_MAX, 0, NULL), 0);
	expect_run(1, 3);
}
END_TEST

START_TEST(stream_limit_keeps_most_recent)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	ck_assert_int_eq(stream("c1", 0, 0, 3, NULL), 0);
	EXPECT_SEQS(8, 9, 10);
	ck_assert_int_eq(stream("c1", 0, 6, 3, NULL), 0);
	EXPECT_SEQS(3, 4, 5);
	ck_assert_int_eq(stream("c1", 7, 0, 5, NULL), 0); /* fewer than limit in range */
	EXPECT_SEQS(8, 9, 10);
	ck_assert_int_eq(stream("c1", 3, 6, 3, NULL), 0);
	EXPECT_SEQS(4, 5);
	ck_assert_int_eq(stream("c1", 3, 7, 3, NULL), 0);
	EXPECT_SEQS(4, 5, 6);
	ck_assert_int_eq(stream("c1", 0, 0, 10, NULL), 0);
	expect_run(1, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 1000, NULL), 0);
	expect_run(1, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 1, NULL), 0);
	EXPECT_SEQS(10);
	ck_assert_int_eq(stream("c1", 0, 1, 1, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, 500, 2, NULL), 0); /* before past the end */
	EXPECT_SEQS(9, 10);
}
END_TEST

/* Types by seq: u a t u a t u a t u (seq 1..10). */
static void mixed_log(const char *conv)
{
	static const char *const types[] = { "user_msg", "assistant_msg", "tool_result" };
	store_txn *t = wbegin();
	for (int i = 0; i < 10; i++) {
		struct store_event_in e = ev(types[i % 3], mint(i + 1), NULL);
		uint64_t seq;
		ck_assert_int_eq(store_event_append(t, conv, &e, &seq, NULL), 0);
	}
	commit(t);
}

START_TEST(stream_type_filter)
{
	mkconv("c1");
	mixed_log("c1");
	ck_assert_int_eq(stream("c1", 0, 0, 0, "user_msg"), 0);
	EXPECT_SEQS(1, 4, 7, 10);
	for (size_t i = 0; i < E.n; i++)
		ck_assert_str_eq(E.e[i].type, "user_msg");
	ck_assert_int_eq(stream("c1", 0, 0, 0, "tool_result"), 0);
	EXPECT_SEQS(3, 6, 9);
	ck_assert_int_eq(stream("c1", 1, 7, 0, "user_msg"), 0);
	EXPECT_SEQS(4);
	ck_assert_int_eq(stream("c1", 0, 0, 0, "system"), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 0, 0, 0, "user"), 0); /* a prefix does not match */
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(stream_type_filter_with_limit)
{
	mkconv("c1");
	mixed_log("c1");
	ck_assert_int_eq(stream("c1", 0, 0, 2, "user_msg"), 0);
	EXPECT_SEQS(7, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 2, "assistant_msg"), 0);
	EXPECT_SEQS(5, 8);
	ck_assert_int_eq(stream("c1", 0, 0, 9, "tool_result"), 0);
	EXPECT_SEQS(3, 6, 9);
	ck_assert_int_eq(stream("c1", 4, 0, 5, "user_msg"), 0);
	EXPECT_SEQS(7, 10);
	ck_assert_int_eq(stream("c1", 0, 0, 1, "system"), 0);
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(stream_type_filter_with_limit_and_before)
{
	mkconv("c1");
	mixed_log("c1");
	ck_assert_int_eq(stream("c1", 0, 10, 2, "user_msg"), 0); /* 10 excluded */
	EXPECT_SEQS(4, 7);
	ck_assert_int_eq(stream("c1", 0, 7, 1, "user_msg"), 0);
	EXPECT_SEQS(4);
	ck_assert_int_eq(stream("c1", 0, 9, 2, "tool_result"), 0);
	EXPECT_SEQS(3, 6);
	ck_assert_int_eq(stream("c1", 1, 4, 3, "user_msg"), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("c1", 1, 5, 3, "user_msg"), 0);
	EXPECT_SEQS(4);
	/* the top of the range is not of the type */
	ck_assert_int_eq(stream("c1", 0, 9, 1, "assistant_msg"), 0);
	EXPECT_SEQS(8);
}
END_TEST

/* Page backwards with before = the oldest seq seen, until a page is empty:
 * every event exactly once. */
static void page_back(const char *conv, size_t limit, const char *type, const uint64_t *want, size_t nwant)
{
	uint64_t seen[EV_MAX];
	size_t nseen = 0, pages = 0;
	uint64_t before = 0;
	for (;;) {
		ck_assert_int_eq(stream(conv, 0, before, limit, type), 0);
		ck_assert_uint_le(E.n, limit);
		if (E.n == 0)
			break;
		ck_assert_uint_lt(++pages, 100);
		for (size_t i = 1; i < E.n; i++)
			ck_assert_uint_lt(E.e[i - 1].seq, E.e[i].seq); /* ascending */
		if (before)
			ck_assert_uint_lt(E.e[E.n - 1].seq, before);
		/* pages come newest first; keep the whole list ascending */
		memmove(seen + E.n, seen, nseen * sizeof seen[0]);
		for (size_t i = 0; i < E.n; i++)
			seen[i] = E.e[i].seq;
		nseen += E.n;
		before = E.e[0].seq;
	}
	ck_assert_uint_eq(nseen, nwant);
	for (size_t i = 0; i < nwant; i++)
		ck_assert_uint_eq(seen[i], want[i]);
}

START_TEST(stream_pages_backwards)
{
	mkconv("c1");
	append_n("c1", 23, "user_msg");
	uint64_t all[23];
	for (int i = 0; i < 23; i++)
		all[i] = (uint64_t)i + 1;
	page_back("c1", 5, NULL, all, 23);  /* 5,5,5,5,3 */
	page_back("c1", 1, NULL, all, 23);
	page_back("c1", 23, NULL, all, 23); /* one full page */
	page_back("c1", 22, NULL, all, 23); /* last page of one */
	/* the first page exactly: a limit that divides the log */
	mkconv("c2");
	append_n("c2", 20, "user_msg");
	page_back("c2", 5, NULL, all, 20);
}
END_TEST

START_TEST(stream_pages_backwards_with_type)
{
	mkconv("c1");
	mixed_log("c1");
	mixed_log("c1"); /* 20 events: user_msg at 1,4,7,10,11,14,17,20 */
	static const char *const types[] = { "user_msg", "assistant_msg", "tool_result" };
	uint64_t want[3][EV_MAX];
	size_t nwant[3] = { 0 };
	for (uint64_t s = 1; s <= 20; s++) {
		int k = (int)((s - 1) % 10 % 3);
		want[k][nwant[k]++] = s;
	}
	for (int k = 0; k < 3; k++)
		for (size_t limit = 1; limit <= 4; limit++)
			page_back("c1", limit, types[k], want[k], nwant[k]);
}
END_TEST

START_TEST(stream_callback_return_stops)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	/* every non-zero return is handed back unchanged */
	const int rets[] = { 1, 2, 7, -1, STORE_E_NOTFOUND };
	for (size_t i = 0; i < sizeof rets / sizeof rets[0]; i++) {
		memset(&E, 0, sizeof E);
		E.stop_after = 2;
		E.stop_ret = rets[i];
		struct store_range r = { 0 };
		store_txn *t = rbegin();
		ck_assert_int_eq(store_events_stream(t, "c1", &r, collect_ev, &E), rets[i]);
		store_txn_abort(t);
		EXPECT_SEQS(1, 2);
		/* with a limit and a before too */
		memset(&E, 0, sizeof E);
		E.stop_after = 1;
		E.stop_ret = rets[i];
		r = (struct store_range){ 0, 5, 3, NULL };
		t = rbegin();
		ck_assert_int_eq(store_events_stream(t, "c1", &r, collect_ev, &E), rets[i]);
		store_txn_abort(t);
		EXPECT_SEQS(2);
	}
}
END_TEST

START_TEST(stream_invalid_args)
{
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	ck_assert_int_eq(stream("c1", 0, 0, 0, "User"), STORE_E_INVAL);
	ck_assert_int_eq(stream("c1", 0, 0, 0, ""), STORE_E_INVAL);
	store_txn *t = rbegin();
	ck_assert_int_eq(store_events_stream(t, "c1", NULL, collect_ev, &E), STORE_E_INVAL);
	struct store_range r = { 0 };
	ck_assert_int_eq(store_events_stream(t, "c1", &r, NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

/* ---- load_since ------------------------------------------------------- */

static int load_since(const char *conv, struct store_summary *sum, int *has)
{
	memset(&E, 0, sizeof E);
	store_txn *t = rbegin();
	int rc = store_load_since(t, conv, sum, has, collect_ev, &E);
	/* The summary's content lives until the txn ends (store.h): the tests
	 * look at it after, so they get a copy. */
	if (rc == 0 && sum && sum->content.len) {
		B();
		msgpack_sbuffer_write(pool[npool - 1], sum->content.ptr, sum->content.len);
		sum->content = built();
	}
	store_txn_abort(t);
	return rc;
}

static void put_summary(const char *conv, uint64_t from, uint64_t to, store_bytes content, uint64_t want_ver)
{
	store_txn *t = wbegin();
	uint64_t ver = 0;
	ck_assert_int_eq(store_summary_put(t, conv, from, to, content, &ver), 0);
	ck_assert_uint_eq(ver, want_ver);
	commit(t);
}

START_TEST(load_since_without_summary)
{
	mkconv("c1");
	append_n("c1", 6, "user_msg");
	struct store_summary sum;
	memset(&sum, 0xff, sizeof sum);
	int has = -1;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	expect_run(1, 6);
	/* sum and has_summary may be NULL */
	ck_assert_int_eq(load_since("c1", NULL, NULL), 0);
	expect_run(1, 6);
	mkconv("empty");
	ck_assert_int_eq(load_since("empty", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(load_since_after_latest_summary)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	put_summary("c1", 1, 4, mstr("s4"), 1);
	put_summary("c1", 1, 7, mstr("s7"), 2);
	struct store_summary sum;
	int has = 0;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 7);
	ck_assert_uint_eq(sum.from_seq, 1);
	ck_assert_uint_eq(sum.version, 2);
	ck_assert(bytes_eq_b(sum.content, mstr("s7")));
	expect_run(8, 10);
	/* a later summary of an earlier range does not move the cut */
	put_summary("c1", 2, 5, mstr("s5"), 3);
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 7);
	expect_run(8, 10);
	/* events appended after the summary are included */
	append_n("c1", 2, "user_msg");
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	expect_run(8, 12);
}
END_TEST

START_TEST(load_since_summary_at_last_seq)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	put_summary("c1", 1, 5, mstr("all"), 1);
	struct store_summary sum;
	int has = 0;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 5);
	EXPECT_NO_EVENTS();
}
END_TEST

START_TEST(load_since_callback_return_stops)
{
	mkconv("c1");
	append_n("c1", 6, "user_msg");
	put_summary("c1", 1, 2, mstr("s"), 1);
	const int rets[] = { 1, 2, 9 };
	for (size_t i = 0; i < 3; i++) {
		memset(&E, 0, sizeof E);
		E.stop_after = 2;
		E.stop_ret = rets[i];
		store_txn *t = rbegin();
		ck_assert_int_eq(store_load_since(t, "c1", NULL, NULL, collect_ev, &E), rets[i]);
		store_txn_abort(t);
		EXPECT_SEQS(3, 4);
	}
}
END_TEST

/* ---- summaries -------------------------------------------------------- */

START_TEST(summary_latest_none_is_notfound)
{
	mkconv("c1");
	append_n("c1", 3, "user_msg");
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), STORE_E_NOTFOUND);
	store_txn_abort(t);
}
END_TEST

START_TEST(summary_fields_round_trip)
{
	mkconv("c1");
	append_n("c1", 9, "user_msg");
	NOW = T0 + 42;
	store_bytes content = mmap1("summary", "the gist");
	put_summary("c1", 3, 9, content, 1);
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.from_seq, 3);
	ck_assert_uint_eq(sum.to_seq, 9);
	ck_assert_uint_eq(sum.version, 1);
	ck_assert_int_eq(sum.inserted_at, T0 + 42);
	ck_assert(bytes_eq_b(sum.content, content));
	store_txn_abort(t);
}
END_TEST

START_TEST(summary_latest_is_greatest_to_seq)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	put_summary("c1", 1, 8, mstr("s8"), 1);
	put_summary("c1", 1, 3, mstr("s3"), 2);
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.to_seq, 8);
	ck_assert(bytes_eq_b(sum.content, mstr("s8")));
	store_txn_abort(t);
	/* summaries are per conversation */
	mkconv("c2");
	append_n("c2", 2, "user_msg");
	t = rbegin();
	ck_assert_int_eq(store_summary_latest(t, "c2", &sum), STORE_E_NOTFOUND);
	store_txn_abort(t);
	put_summary("c2", 1, 1, mstr("x"), 1); /* versions count per conversation */
}
END_TEST

START_TEST(summary_same_to_seq_replaces)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	put_summary("c1", 1, 5, mstr("first"), 1);
	put_summary("c1", 2, 5, mstr("second"), 2);
	struct store_summary sum;
	int has;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.from_seq, 2);
	ck_assert_uint_eq(sum.to_seq, 5);
	ck_assert_uint_eq(sum.version, 2);
	ck_assert(bytes_eq_b(sum.content, mstr("second")));
	expect_run(6, 10);
}
END_TEST

START_TEST(summary_versions_increment)
{
	mkconv("c1");
	append_n("c1", 20, "user_msg");
	/* every put gets the next version, whatever its to_seq */
	put_summary("c1", 1, 5, mstr("a"), 1);
	put_summary("c1", 1, 10, mstr("b"), 2);
	put_summary("c1", 1, 5, mstr("c"), 3); /* replaces to_seq 5 */
	put_summary("c1", 1, 12, mstr("d"), 4);
	put_summary("c1", 1, 7, mstr("e"), 5);
	put_summary("c1", 1, 12, mstr("f"), 6);
	store_txn *t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.version, 6);
	ck_assert_uint_eq(sum.to_seq, 12);
	store_txn_abort(t);
	/* version may be NULL */
	t = wbegin();
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 13, mstr("g"), NULL), 0);
	commit(t);
}
END_TEST

START_TEST(summary_put_rejects_bad_range)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	store_txn *t = wbegin();
	uint64_t ver = 77;
	ck_assert_int_eq(store_summary_put(t, "c1", 4, 3, mstr("x"), &ver), STORE_E_INVAL); /* from > to */
	ck_assert_int_eq(store_summary_put(t, "c1", 0, 0, mstr("x"), &ver), STORE_E_INVAL); /* to 0 */
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 6, mstr("x"), &ver), STORE_E_INVAL); /* past last */
	ck_assert_uint_eq(ver, 77);
	ck_assert_int_eq(store_summary_put(t, "c1", 5, 5, mstr("x"), &ver), 0); /* from == to == last */
	ck_assert_uint_eq(ver, 1);
	commit(t);
	mkconv("empty");
	t = wbegin();
	ck_assert_int_eq(store_summary_put(t, "empty", 1, 1, mstr("x"), NULL), STORE_E_INVAL);
	commit(t);
	t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "empty", &sum), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.version, 1);
	store_txn_abort(t);
}
END_TEST

/* ---- every summary, and a restored one (agentd export/import) --------- */

struct sums {
	struct store_summary s[8];
	size_t n;
	int stop_after, stop_ret;
};

static int collect_sum(void *arg, const struct store_summary *sm)
{
	struct sums *c = arg;
	ck_assert_uint_lt(c->n, 8);
	c->s[c->n] = *sm;
	B(); /* the content lives until the txn ends: keep a copy */
	msgpack_sbuffer_write(pool[npool - 1], sm->content.ptr, sm->content.len);
	c->s[c->n++].content = built();
	return c->stop_after && (int)c->n == c->stop_after ? c->stop_ret : 0;
}

static int list_sums(const char *conv, struct sums *c)
{
	memset(c, 0, sizeof *c);
	store_txn *t = rbegin();
	int rc = store_summaries_list(t, conv, collect_sum, c);
	store_txn_abort(t);
	return rc;
}

START_TEST(summaries_list_every_summary_in_to_seq_order)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	struct sums c;
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 0);
	NOW = T0 + 1;
	put_summary("c1", 1, 8, mstr("s8"), 1);
	NOW = T0 + 2;
	put_summary("c1", 1, 3, mstr("s3"), 2);
	NOW = T0 + 3;
	put_summary("c1", 2, 8, mstr("s8b"), 3); /* replaces to_seq 8 */
	mkconv("c2");
	append_n("c2", 2, "user_msg");
	put_summary("c2", 1, 2, mstr("other"), 1);
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 2);
	ck_assert_uint_eq(c.s[0].to_seq, 3);
	ck_assert_uint_eq(c.s[0].from_seq, 1);
	ck_assert_uint_eq(c.s[0].version, 2);
	ck_assert_int_eq(c.s[0].inserted_at, T0 + 2);
	ck_assert(bytes_eq_b(c.s[0].content, mstr("s3")));
	ck_assert_uint_eq(c.s[1].to_seq, 8);
	ck_assert_uint_eq(c.s[1].from_seq, 2);
	ck_assert_uint_eq(c.s[1].version, 3);
	ck_assert_int_eq(c.s[1].inserted_at, T0 + 3);
	ck_assert(bytes_eq_b(c.s[1].content, mstr("s8b")));
	/* the callback's return stops the walk */
	memset(&c, 0, sizeof c);
	c.stop_after = 1;
	c.stop_ret = 7;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_summaries_list(t, "c1", collect_sum, &c), 7);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_int_eq(store_summaries_list(t, "nope", collect_sum, &c), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_summaries_list(t, "c1", NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

START_TEST(summary_restore_writes_it_as_given)
{
	mkconv("c1");
	append_n("c1", 10, "user_msg");
	NOW = T0 + 100;
	store_txn *t = wbegin();
	struct store_summary a = { 1, 4, mstr("four"), 5, T0 - 7 }, b = { 2, 9, mstr("nine"), 12, T0 - 3 };
	ck_assert_int_eq(store_summary_restore(t, "c1", &a), 0);
	ck_assert_int_eq(store_summary_restore(t, "c1", &b), 0);
	commit(t);
	struct sums c;
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 2);
	ck_assert_uint_eq(c.s[0].version, 5);
	ck_assert_int_eq(c.s[0].inserted_at, T0 - 7);
	ck_assert_uint_eq(c.s[1].from_seq, 2);
	ck_assert_uint_eq(c.s[1].version, 12);
	ck_assert_int_eq(c.s[1].inserted_at, T0 - 3);
	ck_assert(bytes_eq_b(c.s[1].content, mstr("nine")));
	t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), 0);
	ck_assert_uint_eq(sum.to_seq, 9);
	ck_assert_uint_eq(sum.version, 12);
	store_txn_abort(t);
	/* the next put numbers on from the greatest version */
	put_summary("c1", 1, 10, mstr("ten"), 13);
	/* a version another to_seq holds is a conflict, and writes nothing;
	 * the same to_seq takes its own version again (a replace) */
	t = wbegin();
	struct store_summary dup = { 1, 6, mstr("six"), 5, T0 };
	ck_assert_int_eq(store_summary_restore(t, "c1", &dup), STORE_E_CONFLICT);
	struct store_summary again = { 3, 4, mstr("four again"), 5, T0 };
	ck_assert_int_eq(store_summary_restore(t, "c1", &again), 0);
	commit(t);
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 3);
	ck_assert_uint_eq(c.s[0].from_seq, 3);
	ck_assert(bytes_eq_b(c.s[0].content, mstr("four again")));
	/* bad input writes nothing */
	t = wbegin();
	struct store_summary bad[] = {
		{ 1, 4, mstr("x"), 0, T0 },                        /* version 0 */
		{ 1, 4, mstr("x"), (uint64_t)INT64_MAX + 1, T0 },  /* past INT64_MAX */
		{ 5, 4, mstr("x"), 20, T0 },                       /* from > to */
		{ 0, 0, mstr("x"), 20, T0 },                       /* to 0 */
		{ 1, 11, mstr("x"), 20, T0 },                      /* past the last seq */
		{ 1, 4, raw(two_objs, sizeof two_objs), 20, T0 },  /* not one msgpack object */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_int_eq(store_summary_restore(t, "c1", &bad[i]), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_restore(t, "c1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_restore(t, "nope", &a), STORE_E_NOTFOUND);
	commit(t);
	ck_assert_int_eq(list_sums("c1", &c), 0);
	ck_assert_uint_eq(c.n, 3);
	/* in a read transaction: refused */
	t = rbegin();
	ck_assert_int_eq(store_summary_restore(t, "c1", &a), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

/* ---- conversations ---------------------------------------------------- */

#define CONV_MAX 64
struct convs {
	size_t n;
	size_t stop_after;
	int stop_ret;
	char id[CONV_MAX][STORE_ID_MAX + 1];
	int status[CONV_MAX];
};
static struct convs C;

static int collect_conv(void *arg, const struct store_conv *c)
{
	struct convs *o = arg;
	ck_assert_uint_lt(o->n, CONV_MAX);
	ck_assert_uint_le(c->id.len, STORE_ID_MAX);
	memcpy(o->id[o->n], c->id.ptr, c->id.len);
	o->id[o->n][c->id.len] = 0;
	o->status[o->n] = c->status;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

static int list_convs(int status, const char *after, size_t limit, int *more)
{
	memset(&C, 0, sizeof C);
	store_txn *t = rbegin();
	int rc = store_conv_list(t, status, after, limit, collect_conv, &C, more);
	store_txn_abort(t);
	return rc;
}

static void expect_ids_at(int line, const char *const *want, size_t n)
{
	ck_assert_msg(C.n == n, "line %d: got %zu conversations, want %zu", line, C.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(strcmp(C.id[i], want[i]) == 0, "line %d: [%zu] is %s, want %s", line, i, C.id[i],
			      want[i]);
}
#define EXPECT_IDS(...)                                                         \
	do {                                                                    \
		const char *const want_[] = { __VA_ARGS__ };                    \
		expect_ids_at(__LINE__, want_, sizeof want_ / sizeof want_[0]); \
	} while (0)

static void set_status(const char *id, int status)
{
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = status };
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_put(t, id, &p), 0);
	commit(t);
}

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

/* ---- tool call helpers ----------------------------------------------- */

static struct store_tool_call_in tcin(const char *id, const char *name, int executor, store_bytes args,
				      store_bytes prompt)
{
	return (struct store_tool_call_in){ id, name, executor, args, prompt };
}

static void mktc(const char *conv, const char *id)
{
	struct store_tool_call_in in = tcin(id, "shell", STORE_EXEC_SERVER, mmap1("cmd", "ls"), raw(NULL, 0));
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_upsert(t, conv, &in), 0);
	commit(t);
}

static int resolve(const char *id, int status, store_bytes result)
{
	store_txn *t = wbegin();
	int rc = store_tool_call_resolve(t, id, status, result, NULL);
	commit(t);
	return rc;
}

static void schedule(const char *id, int64_t deadline)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_expiry_schedule(t, id, deadline), 0);
	commit(t);
}

#define TC_MAX 32
struct tcs {
	size_t n;
	size_t stop_after;
	int stop_ret;
	char id[TC_MAX][STORE_ID_MAX + 1];
	char conv[TC_MAX][STORE_ID_MAX + 1];
	int status[TC_MAX];
	int64_t deadline[TC_MAX];
};
static struct tcs L;

static void copy_id(char *dst, store_bytes b)
{
	ck_assert_uint_le(b.len, STORE_ID_MAX);
	memcpy(dst, b.ptr, b.len);
	dst[b.len] = 0;
}

static int collect_tc(void *arg, const struct store_tool_call *tc)
{
	struct tcs *o = arg;
	ck_assert_uint_lt(o->n, TC_MAX);
	copy_id(o->id[o->n], tc->id);
	copy_id(o->conv[o->n], tc->conversation);
	o->status[o->n] = tc->status;
	o->deadline[o->n] = tc->deadline;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

static int list_tcs(const char *conv, unsigned mask)
{
	memset(&L, 0, sizeof L);
	store_txn *t = rbegin();
	int rc = store_tool_calls_list(t, conv, mask, collect_tc, &L);
	store_txn_abort(t);
	return rc;
}

static int collect_exp(void *arg, const struct store_expiry *e)
{
	struct tcs *o = arg;
	ck_assert_uint_lt(o->n, TC_MAX);
	copy_id(o->id[o->n], e->tool_call_id);
	copy_id(o->conv[o->n], e->conversation);
	o->deadline[o->n] = e->deadline;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

static int due(int64_t now)
{
	memset(&L, 0, sizeof L);
	store_txn *t = rbegin();
	int rc = store_expiries_due(t, now, collect_exp, &L);
	store_txn_abort(t);
	return rc;
}

static int earliest(int64_t *d)
{
	store_txn *t = rbegin();
	int rc = store_expiry_earliest(t, d);
	store_txn_abort(t);
	return rc;
}

static void expect_list_at(int line, const char *const *want, size_t n)
{
	ck_assert_msg(L.n == n, "line %d: got %zu rows, want %zu", line, L.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(strcmp(L.id[i], want[i]) == 0, "line %d: [%zu] is %s, want %s", line, i, L.id[i],
			      want[i]);
}
#define EXPECT_LIST(...)                                                         \
	do {                                                                     \
		const char *const want_[] = { __VA_ARGS__ };                     \
		expect_list_at(__LINE__, want_, sizeof want_ / sizeof want_[0]); \
	} while (0)

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

/* ---- lease and usage ---------------------------------------------------- */

START_TEST(lease_next_increments_and_check_fences)
{
	mkconv("c1");
	mkconv("c2");
	store_txn *t = wbegin();
	uint64_t gen = 0;
	ck_assert_int_eq(store_lease_check(t, "c1", 0), 0); /* 0 before any worker */
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_uint_eq(gen, 1);
	ck_assert_int_eq(store_lease_check(t, "c1", 1), 0);
	ck_assert_int_eq(store_lease_check(t, "c1", 0), STORE_E_FENCED);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_uint_eq(gen, 2);
	commit(t);
	t = rbegin(); /* a check reads: a read txn will do */
	ck_assert_int_eq(store_lease_check(t, "c1", 2), 0);
	ck_assert_int_eq(store_lease_check(t, "c1", 1), STORE_E_FENCED); /* superseded */
	ck_assert_int_eq(store_lease_check(t, "c1", 3), STORE_E_FENCED); /* never issued */
	ck_assert_int_eq(store_lease_check(t, "c2", 0), 0);              /* per conversation */
	ck_assert_int_eq(store_lease_check(t, "c2", 2), STORE_E_FENCED);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.lease, 2);
	store_txn_abort(t);
}
END_TEST

/* A lazy write commits like any other (only its flush is deferred): visible
 * at once, to this handle and after a store_sync. */
START_TEST(lazy_write_commits_and_is_visible)
{
	mkconv("c1");
	store_txn *t;
	uint64_t gen = 0;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE_LAZY, &t), 0);
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(store_sync(S), 0);
	t = rbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", gen), 0);
	store_txn_abort(t);
	/* and the next ordinary write goes on as usual */
	t = wbegin();
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	commit(t);
	ck_assert_int_eq(store_txn_begin(S, 7, &t), STORE_E_INVAL);
}
END_TEST

/* A worker left over from a deleted conversation must not hold the lease of
 * a new conversation created with the same id. */
START_TEST(lease_not_reissued_after_delete)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t old = 0, gen = 0;
	ck_assert_int_eq(store_lease_next(t, "c1", &old), 0);
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), 0);
	ck_assert_int_eq(store_lease_check(t, "c1", old), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_uint_gt(gen, old);
	ck_assert_int_eq(store_lease_check(t, "c1", old), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_check(t, "c1", gen), 0);
	commit(t);
}
END_TEST

START_TEST(lease_fenced_writer_txn_stays_usable)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t gen;
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", gen - 1), STORE_E_FENCED);
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	ck_assert_uint_eq(latest("c1"), 1);
}
END_TEST

START_TEST(usage_add_accumulates)
{
	mkconv("c1");
	mkconv("c2");
	store_txn *t = wbegin();
	struct store_usage a = { 100, 20, 0.25 }, b = { 5, 7, 0.5 };
	ck_assert_int_eq(store_usage_add(t, "c1", &a), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &b), 0);
	commit(t);
	NOW = T0 + 9;
	t = wbegin();
	ck_assert_int_eq(store_usage_add(t, "c1", &a), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, 205);
	ck_assert_uint_eq(c.usage.output_tokens, 47);
	ck_assert_double_eq_tol(c.usage.cost, 1.0, 1e-12);
	ck_assert_int_eq(store_conv_get(t, "c2", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, 0);
	ck_assert(c.usage.cost == 0);
	store_txn_abort(t);
}
END_TEST

/* Turns count apart from usage, per conversation, from 0; they survive a
 * reopen and every other change to the record, and saturate. */
START_TEST(turns_add_counts)
{
	mkconv("c1");
	mkconv("c2");
	store_txn *t = wbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.turns, 0);
	ck_assert_int_eq(store_turns_add(t, "c1", 1), 0);
	ck_assert_int_eq(store_turns_add(t, "c1", 2), 0);
	struct store_usage u = { 10, 5, 0.5 };
	ck_assert_int_eq(store_usage_add(t, "c1", &u), 0);
	ck_assert_int_eq(store_turns_add(t, "nope", 1), STORE_E_NOTFOUND);
	commit(t);
	set_status("c1", STORE_PAUSED);
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.turns, 3);
	ck_assert_uint_eq(c.usage.input_tokens, 10);
	ck_assert_int_eq(c.status, STORE_PAUSED);
	ck_assert_int_eq(store_conv_get(t, "c2", &c), 0);
	ck_assert_uint_eq(c.turns, 0);
	store_txn_abort(t);
	t = wbegin();
	ck_assert_int_eq(store_turns_add(t, "c2", (uint64_t)INT64_MAX - 1), 0);
	ck_assert_int_eq(store_turns_add(t, "c2", 5), 0);
	ck_assert_int_eq(store_conv_get(t, "c2", &c), 0);
	ck_assert_uint_eq(c.turns, (uint64_t)INT64_MAX);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_turns_add(t, "c1", 1), STORE_E_INVAL); /* a read transaction */
	store_txn_abort(t);
}
END_TEST

/* Totals saturate where JSON can still show them: tokens at INT64_MAX, the
 * cost at DBL_MAX, never infinite; a NaN or negative cost is refused. */
START_TEST(usage_add_saturates)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_usage big = { (uint64_t)INT64_MAX - 1, UINT64_MAX, 1e308 }, one = { 1, 1, 1e308 };
	ck_assert_int_eq(store_usage_add(t, "c1", &big), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &one), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &one), 0);
	struct store_usage nan_cost = { 0, 0, NAN }, neg = { 0, 0, -1 };
	ck_assert_int_eq(store_usage_add(t, "c1", &nan_cost), STORE_E_INVAL);
	ck_assert_int_eq(store_usage_add(t, "c1", &neg), STORE_E_INVAL);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, (uint64_t)INT64_MAX);
	ck_assert_uint_eq(c.usage.output_tokens, (uint64_t)INT64_MAX);
	ck_assert(c.usage.cost == DBL_MAX);
	store_txn_abort(t);
}
END_TEST

/* ---- tool calls -------------------------------------------------------- */

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

/* ---- expiries ------------------------------------------------------------- */

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

/* ---- audit helpers ---------------------------------------------------- */

static struct store_model_call_in mcin(uint64_t turn_ref, const char *model, store_bytes rendered)
{
	return (struct store_model_call_in){ turn_ref, rendered, model, { 10, 20, 0.5 }, 123, 0 };
}

static void put_mc(const char *conv, uint64_t turn_ref)
{
	struct store_model_call_in in = mcin(turn_ref, "m", mint((int64_t)turn_ref));
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_call_put(t, conv, &in), 0);
	commit(t);
}

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

/* ---- delete ------------------------------------------------------------ */

START_TEST(delete_removes_conversation_and_events)
{
	mkconv("c1");
	store_txn *t = wbegin();
	struct store_event_in e = ev("user_msg", mstr("old"), "req-1");
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	append_n("c1", 3, "user_msg");
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_latest_seq(t, "c1", &seq), STORE_E_NOTFOUND);
	store_txn_abort(t);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	/* re-created: an empty log, and the event id is free again */
	mkconv("c1");
	ck_assert_uint_eq(latest("c1"), 0);
	t = wbegin();
	e = ev("user_msg", mstr("new"), "req-1");
	int dup = -1;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(dup, 0);
	commit(t);
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	EXPECT_SEQS(1);
	ck_assert(bytes_eq(raw(E.e[0].content, E.e[0].clen), mstr("new").ptr, mstr("new").len));
}
END_TEST

START_TEST(delete_removes_summaries)
{
	mkconv("c1");
	append_n("c1", 4, "user_msg");
	put_summary("c1", 1, 2, mstr("s"), 1);
	put_summary("c1", 1, 4, mstr("s"), 2);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	mkconv("c1");
	t = rbegin();
	struct store_summary sum;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), STORE_E_NOTFOUND);
	store_txn_abort(t);
	int has = -1;
	ck_assert_int_eq(load_since("c1", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	EXPECT_NO_EVENTS();
	append_n("c1", 1, "user_msg");
	put_summary("c1", 1, 1, mstr("s"), 1); /* versions start over */
}
END_TEST

START_TEST(delete_removes_tool_calls_and_expiries)
{
	mkconv("c1");
	mkconv("c2");
	mktc("c1", "p1");
	mktc("c1", "p2");
	mktc("c1", "done");
	mktc("c2", "other");
	schedule("p1", T0 + 10);
	schedule("p2", T0 + 20);
	schedule("other", T0 + 30);
	ck_assert_int_eq(resolve("done", STORE_TC_RESOLVED, mint(1)), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	t = rbegin();
	struct store_tool_call tc;
	ck_assert_int_eq(store_tool_call_get(t, "p1", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_get(t, "p2", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_get(t, "done", &tc), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_tool_call_get(t, "other", &tc), 0);
	store_txn_abort(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 30);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("other");
	ck_assert_int_eq(resolve("p1", STORE_TC_EXPIRED, raw(NULL, 0)), STORE_E_STALE);
	/* the ids are free: another conversation may now own them */
	mktc("c2", "p1");
	mkconv("c1");
	ck_assert_int_eq(list_tcs("c1", 0), 0);
	ck_assert_uint_eq(L.n, 0);
	ck_assert_int_eq(list_tcs("c2", 0), 0);
	EXPECT_LIST("other", "p1");
	ck_assert_int_eq(L.status[1], STORE_TC_PENDING);
	ck_assert_int_eq(L.deadline[1], 0);
	/* and with only one expiry left, deleting its owner leaves none */
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c2"), 0);
	commit(t);
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
	ck_assert_int_eq(due(INT64_MAX), 0);
	ck_assert_uint_eq(L.n, 0);
}
END_TEST

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

START_TEST(delete_resets_lease_usage_and_status)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t gen;
	struct store_usage u = { 1, 2, 3 };
	struct store_conv_patch p = { .set = STORE_SET_STATUS | STORE_SET_FSM, .status = STORE_ENDED,
				      .fsm_state = mint(1) };
	ck_assert_int_eq(store_lease_next(t, "c1", &gen), 0);
	ck_assert_int_eq(store_usage_add(t, "c1", &u), 0);
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	NOW = T0 + 5;
	mkconv("c1");
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.lease, 0);
	ck_assert_uint_eq(c.usage.input_tokens, 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert_uint_eq(c.fsm_state.len, 0);
	ck_assert_int_eq(c.created_at, T0 + 5);
	store_txn_abort(t);
}
END_TEST

START_TEST(delete_leaves_other_conversations)
{
	const char *ids[] = { "a", "b", "c" };
	for (int i = 0; i < 3; i++) {
		mkconv(ids[i]);
		append_n(ids[i], 3, "user_msg");
		put_summary(ids[i], 1, 2, mstr(ids[i]), 1);
	}
	mktc("a", "ta");
	mktc("c", "tc");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "b"), 0);
	commit(t);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("a", "c");
	for (int i = 0; i < 3; i += 2) {
		ck_assert_uint_eq(latest(ids[i]), 3);
		struct store_summary sum;
		int has = 0;
		ck_assert_int_eq(load_since(ids[i], &sum, &has), 0);
		ck_assert_int_eq(has, 1);
		EXPECT_SEQS(3);
	}
	ck_assert_int_eq(list_tcs("a", 0), 0);
	EXPECT_LIST("ta");
	ck_assert_int_eq(list_tcs("c", 0), 0);
	EXPECT_LIST("tc");
}
END_TEST

START_TEST(delete_twice_is_notfound)
{
	mkconv("c1");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	ck_assert_int_eq(store_conv_delete(t, "c1"), STORE_E_NOTFOUND);
	commit(t);
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), STORE_E_NOTFOUND);
	commit(t);
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

/* ---- transactions ------------------------------------------------------- */

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

/* Pointers kept from a read txn: they must stay valid (and unchanged)
 * until it ends, even while a write txn rewrites the same rows. */
struct ptrs {
	size_t n;
	store_bytes content[16];
};

static int keep_ptr(void *arg, const struct store_event *e)
{
	struct ptrs *p = arg;
	ck_assert_uint_lt(p->n, 16);
	p->content[p->n++] = e->content;
	return 0;
}

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

/* ---- content ------------------------------------------------------------- */

START_TEST(content_must_be_one_msgpack_object)
{
	mkconv("c1");
	append_n("c1", 1, "user_msg");
	mktc("c1", "tc");
	store_txn *t = wbegin();
	for (size_t i = 0; i < NBAD; i++) {
		store_bytes b = bad_blobs[i].b;
		const char *w = bad_blobs[i].what;
		struct store_event_in e = ev("user_msg", b, NULL);
		struct store_conv_patch p = { .set = STORE_SET_SETTINGS, .settings = b };
		struct store_tool_call_in in = tcin("tc2", "n", STORE_EXEC_SERVER, b, raw(NULL, 0));
		uint64_t seq;
		ck_assert_msg(store_event_append(t, "c1", &e, &seq, NULL) == STORE_E_INVAL, "event %s", w);
		ck_assert_msg(store_summary_put(t, "c1", 1, 1, b, NULL) == STORE_E_INVAL, "summary %s", w);
		ck_assert_msg(store_conv_create(t, "c2", b) == STORE_E_INVAL, "settings %s", w);
		ck_assert_msg(store_conv_put(t, "c1", &p) == STORE_E_INVAL, "put settings %s", w);
		ck_assert_msg(store_conv_put_fsm(t, "c1", b) == STORE_E_INVAL, "fsm %s", w);
		ck_assert_msg(store_tool_call_upsert(t, "c1", &in) == STORE_E_INVAL, "args %s", w);
		in = tcin("tc2", "n", STORE_EXEC_SERVER, mint(1), b);
		ck_assert_msg(store_tool_call_upsert(t, "c1", &in) == STORE_E_INVAL, "prompt %s", w);
		ck_assert_msg(store_tool_call_resolve(t, "tc", STORE_TC_RESOLVED, b, NULL) == STORE_E_INVAL,
			      "result %s", w);
	}
	/* required content may not be empty */
	struct store_event_in e = ev("user_msg", raw(NULL, 0), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	e = ev("user_msg", raw(two_objs, 0), NULL);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 1, raw(NULL, 0), NULL), STORE_E_INVAL);
	commit(t);
	/* nothing was written */
	ck_assert_uint_eq(latest("c1"), 1);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	t = rbegin();
	struct store_summary sum;
	struct store_conv c;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.settings, mmap0()));
	ck_assert_uint_eq(c.fsm_state.len, 0);
	store_txn_abort(t);
	ck_assert_int_eq(list_tcs("c1", 0), 0);
	EXPECT_LIST("tc");
	ck_assert_int_eq(L.status[0], STORE_TC_PENDING);
}
END_TEST

START_TEST(content_any_object_round_trips)
{
	mkconv("c1");
	/* nested, binary and large objects are opaque and come back byte-exact */
	msgpack_packer *pk = B();
	msgpack_pack_array(pk, 3);
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, "deep", 4);
	for (int i = 0; i < 50; i++)
		msgpack_pack_array(pk, 1);
	msgpack_pack_nil(pk);
	msgpack_pack_bin_with_body(pk, "\0\1\2\0", 4);
	msgpack_pack_double(pk, -1.5);
	store_bytes nested = built();
	static char big[1 << 20];
	memset(big, 'b', sizeof big);
	pk = B();
	msgpack_pack_bin_with_body(pk, big, sizeof big);
	store_bytes large = built();
	store_txn *t = wbegin();
	struct store_event_in in[3] = { ev("a", nested, NULL), ev("b", large, NULL), ev("c", mint(0), NULL) };
	uint64_t seqs[3];
	ck_assert_int_eq(store_events_append(t, "c1", in, 3, seqs, NULL), 0);
	commit(t);
	struct ptrs ps = { 0 };
	struct store_range r = { 0 };
	t = rbegin();
	ck_assert_int_eq(store_events_stream(t, "c1", &r, keep_ptr, &ps), 0);
	ck_assert_uint_eq(ps.n, 3);
	ck_assert(bytes_eq_b(ps.content[0], nested));
	ck_assert(bytes_eq_b(ps.content[1], large));
	ck_assert(bytes_eq_b(ps.content[2], mint(0)));
	store_txn_abort(t);
}
END_TEST

/* ---- errors and names ------------------------------------------------------ */

START_TEST(strerror_distinct_per_code)
{
	const int codes[] = { 0, STORE_E_NOTFOUND, STORE_E_STALE, STORE_E_FENCED, STORE_E_CONFLICT,
			      STORE_E_FULL, STORE_E_CORRUPT, STORE_E_INVAL, -ENOMEM, -EIO, -ENOSPC,
			      -EBUSY, -EAGAIN, -ENOENT };
	const size_t n = sizeof codes / sizeof codes[0];
	for (size_t i = 0; i < n; i++) {
		const char *a = store_strerror(codes[i]);
		ck_assert_ptr_nonnull(a);
		ck_assert_uint_gt(strlen(a), 0);
		ck_assert_str_eq(a, store_strerror(codes[i])); /* stable */
		for (size_t j = 0; j < i; j++)
			ck_assert_msg(strcmp(a, store_strerror(codes[j])) != 0, "%d and %d both say \"%s\"",
				      codes[i], codes[j], a);
	}
	ck_assert_int_eq(STORE_E_INVAL, -EINVAL);
	ck_assert_ptr_nonnull(store_strerror(-99999));
	ck_assert_ptr_nonnull(store_strerror(12345));
}
END_TEST

START_TEST(status_names_round_trip)
{
	const char *tc[] = { "pending", "resolved", "errored", "expired", "cancelled" };
	const char *conv[] = { "idle", "active", "suspended", "ended", "paused" };
	ck_assert_str_eq(store_status_name(STORE_PAUSED), "paused");
	ck_assert_int_eq(store_status_parse("paused", 6), STORE_PAUSED);
	ck_assert_ptr_null(store_status_name(STORE_STATUS_MAX + 1));
	for (int i = 0; i < 4; i++) {
		ck_assert_str_eq(store_status_name(i), conv[i]);
		ck_assert_int_eq(store_status_parse(conv[i], strlen(conv[i])), i);
	}
	for (int i = 0; i < 5; i++) {
		ck_assert_str_eq(store_tc_status_name(i), tc[i]);
		ck_assert_int_eq(store_tc_status_parse(tc[i], strlen(tc[i])), i);
	}
	ck_assert_int_eq(STORE_IDLE, 0);
	ck_assert_int_eq(STORE_ENDED, 3);
	ck_assert_int_eq(STORE_TC_PENDING, 0);
	ck_assert_int_eq(STORE_TC_EXPIRED, 3);
	ck_assert_ptr_null(store_status_name(-1));
	ck_assert_int_eq(STORE_TC_CANCELLED, 4);
	ck_assert_ptr_null(store_tc_status_name(5));
	ck_assert_ptr_null(store_tc_status_name(-1));
	ck_assert_int_eq(store_status_parse("IDLE", 4), -1);
	ck_assert_int_eq(store_status_parse("idl", 3), -1);
	ck_assert_int_eq(store_status_parse("idlex", 4), 0); /* only len bytes */
	ck_assert_int_eq(store_status_parse("idle", 5), -1);
	ck_assert_int_eq(store_status_parse("pending", 7), -1);
	ck_assert_int_eq(store_tc_status_parse("idle", 4), -1);
	ck_assert_int_eq(store_tc_status_parse("", 0), -1);
}
END_TEST

/* ---- open, persistence, map size --------------------------------------- */

START_TEST(reopen_keeps_committed_data)
{
	mkconv("c1");
	append_n("c1", 3, "user_msg");
	mktc("c1", "tc");
	schedule("tc", T0 + 5);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "aborted", mmap0()), 0);
	store_txn_abort(t);
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	ck_assert_uint_eq(latest("c1"), 3);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	int64_t d;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 5);
	append_n("c1", 1, "user_msg"); /* seq continues after reopening */
	ck_assert_uint_eq(latest("c1"), 4);
	ck_assert_int_eq(store_sync(S), 0);
}
END_TEST

START_TEST(read_only_store_refuses_writes)
{
	mkconv("c1");
	store_close(S);
	S = NULL;
	OPTS.read_only = 1;
	open_store();
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE, &t), STORE_E_INVAL);
	ck_assert_uint_eq(latest("c1"), 0);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	ck_assert_int_eq(store_sync(S), 0);
	store_close(S);
	S = NULL;
	/* read-only does not create a store */
	char empty[PATH_MAX + 16];
	snprintf(empty, sizeof empty, "%s/empty", dir);
	ck_assert_int_eq(mkdir(empty, 0700), 0);
	store *s2 = NULL;
	ck_assert_int_ne(store_open(&s2, empty, &OPTS), 0);
	ck_assert_ptr_null(s2);
	OPTS.read_only = 0;
	open_store();
	/* an open that succeeds leaves no reason behind */
	ck_assert_str_eq(store_open_error(), "");
}
END_TEST

START_TEST(open_needs_existing_dir)
{
	char missing[PATH_MAX + 16];
	snprintf(missing, sizeof missing, "%s/missing", dir);
	store *s2 = NULL;
	ck_assert_int_lt(store_open(&s2, missing, &OPTS), 0);
	ck_assert_ptr_null(s2);
	ck_assert_int_eq(store_open(&s2, NULL, &OPTS), STORE_E_INVAL);
	ck_assert_int_eq(store_open(NULL, dir, &OPTS), STORE_E_INVAL);
}
END_TEST

START_TEST(stat_and_reader_check)
{
	struct store_stat st;
	memset(&st, 0xff, sizeof st);
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.map_size, OPTS.map_size);
	ck_assert_uint_ge(st.max_readers, 1024); /* 0: 1024 */
	ck_assert_uint_gt(st.size_bytes, 0);
	ck_assert_uint_le(st.size_bytes, st.map_size);
	ck_assert_int_eq(st.sync, STORE_SYNC_NONE);
	/* readers counts the slots in use now, not the most ever used */
	ck_assert_uint_eq(st.readers, 0);
	store_txn *r = rbegin(), *r2 = rbegin();
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.readers, 2);
	store_txn_abort(r2);
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.readers, 1);
	ck_assert_int_eq(store_txn_commit(r), 0); /* committing a read txn ends it too */
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.readers, 0);
	int cleared = -1;
	ck_assert_int_eq(store_reader_check(S, &cleared), 0);
	ck_assert_int_eq(cleared, 0);
	ck_assert_int_eq(store_reader_check(S, NULL), 0);
	ck_assert_int_eq(store_sync(S), 0);
}
END_TEST

/* Append one event of `len` bytes in its own txn. */
static int append_big(const char *conv, size_t len)
{
	static char blob[4 << 20];
	ck_assert_uint_le(len, sizeof blob);
	memset(blob, 'x', len);
	msgpack_pack_bin_with_body(B(), blob, len);
	struct store_event_in e = ev("blob", built(), NULL);
	store_txn *t = wbegin();
	uint64_t seq;
	int rc = store_event_append(t, conv, &e, &seq, NULL);
	if (rc) {
		/* a full map poisons the txn: everything after, and commit, fail alike */
		if (rc == STORE_E_FULL) {
			struct store_event_in small = ev("blob", mint(1), NULL);
			ck_assert_int_eq(store_event_append(t, conv, &small, &seq, NULL), STORE_E_FULL);
			ck_assert_int_eq(store_txn_commit(t), STORE_E_FULL);
		} else {
			store_txn_abort(t);
		}
		pool_free();
		return rc;
	}
	rc = store_txn_commit(t);
	pool_free();
	return rc;
}

START_TEST(map_full_without_growth_loses_nothing)
{
	OPTS.map_size = OPTS.max_map_size = (size_t)1 << 20; /* no growth */
	reopen_store();
	mkconv("c1");
	int rc = 0;
	uint64_t committed = 0;
	for (int i = 0; i < 64 && rc == 0; i++) {
		rc = append_big("c1", 64 << 10);
		if (rc == 0)
			committed++;
	}
	ck_assert_int_eq(rc, STORE_E_FULL);
	ck_assert_uint_gt(committed, 0);
	ck_assert_uint_eq(latest("c1"), committed);
	ck_assert_int_eq(append_big("c1", 64 << 10), STORE_E_FULL); /* no growth: still full */
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	expect_run(1, committed);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.map_size, (size_t)1 << 20);
	ck_assert_uint_eq(store_map_size(S), st.map_size);
	ck_assert_int_eq(st.map_full, 0); /* at its maximum: no retry can fit */
}
END_TEST

/* max_map_size alone, smaller than the default map: the map starts there
 * (the default 256 MiB map used to raise the maximum to itself). */
START_TEST(max_map_size_alone_bounds_the_map)
{
	OPTS.map_size = 0;
	OPTS.max_map_size = (size_t)1 << 20;
	reopen_store();
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.map_size, (size_t)1 << 20);
	ck_assert_uint_eq(st.max_map_size, (size_t)1 << 20);
	mkconv("c1");
	int rc = 0;
	for (int i = 0; i < 64 && rc == 0; i++)
		rc = append_big("c1", 64 << 10);
	ck_assert_int_eq(rc, STORE_E_FULL); /* within 1 MiB, not 256 */
}
END_TEST

/* A map that cannot grow for want of address space (ulimit -v) is refused
 * as full, and the handle keeps working: LMDB unmaps the old map before it
 * maps the new one and cannot restore it, so the store must not let it try.
 * PostgreSQL's limit is a quota that needs no address space: there the
 * reservation succeeds, and the handle keeps working all the same.
 * In a child, whose limit dies with it; not under a sanitizer, whose shadow
 * memory needs the address space. */
START_TEST(a_map_without_address_space_to_grow_stays_usable)
{
#if defined(__SANITIZE_ADDRESS__)
	return;
#endif
	OPTS.map_size = (size_t)64 << 20;
	OPTS.max_map_size = (size_t)1 << 30;
	reopen_store();
	mkconv("c1");
	int want = strcmp(conf_backend(), "pg") == 0 ? 0 : STORE_E_FULL;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		long pages = 0;
		FILE *f = fopen("/proc/self/statm", "r");
		if (!f || fscanf(f, "%ld", &pages) != 1)
			_exit(3);
		fclose(f);
		struct rlimit rl = { 0 };
		rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)32 << 20);
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(4);
		if (store_reserve(S, (size_t)100 << 20) != want)
			_exit(5);
		store_txn *t;
		if (store_txn_begin(S, STORE_READ, &t))
			_exit(6);
		uint64_t seq;
		int rc = store_event_latest_seq(t, "c1", &seq); /* touches the map: it is still there */
		store_txn_abort(t);
		_exit(rc ? 7 : 0);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s %d",
		      WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}
END_TEST

/* Fill conv's store to its limit: ever smaller events until one of a byte
 * is full. */
static void fill_to_the_limit(const char *conv)
{
	static const size_t sizes[] = { 64 << 10, 4 << 10, 256, 1 };
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
		for (int i = 0; i < 20000 && append_big(conv, sizes[k]) == 0; i++)
			;
	ck_assert_int_eq(append_big(conv, 1), STORE_E_FULL);
}

/* store.h, STORE_WRITE_FREEING: a store full to its limit still takes a
 * delete, again and again, and (LMDB) the room it freed serves the next
 * write at once, while the map stays within the reserve. PostgreSQL never
 * refuses a delete for the quota; its tables keep their bytes until they
 * are vacuumed, so there the quota stays reached. */
START_TEST(freeing_txn_deletes_in_a_full_store)
{
	const size_t max = (size_t)1 << 20, reserve = 256 << 10;
	int lmdb = strcmp(conf_backend(), "pg") != 0;
	OPTS.map_size = OPTS.max_map_size = max;
	reopen_store();
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_READ | STORE_WRITE_FREEING, &t), STORE_E_INVAL);
	for (int round = 0; round < 3; round++) {
		char a[8], b[8];
		snprintf(a, sizeof a, "a%d", round);
		snprintf(b, sizeof b, "b%d", round);
		if (!lmdb && round > 0)
			break; /* the quota stays reached (above) */
		mkconv(a);
		mkconv(b);
		append_big(b, 64 << 10);
		fill_to_the_limit(a);
		/* an ordinary delete meets the full store on LMDB */
		t = wbegin();
		int rc = store_conv_delete(t, b);
		if (rc == 0)
			rc = store_txn_commit(t);
		else
			store_txn_abort(t);
		ck_assert_int_eq(rc, lmdb ? STORE_E_FULL : 0);
		ck_assert_int_eq(store_txn_begin(S, STORE_WRITE_LAZY | STORE_WRITE_FREEING, &t), 0);
		ck_assert_int_eq(store_conv_delete(t, a), 0);
		ck_assert_int_eq(store_txn_commit(t), 0);
		struct store_conv c;
		t = rbegin();
		ck_assert_int_eq(store_conv_get(t, a, &c), STORE_E_NOTFOUND);
		ck_assert_int_eq(store_conv_get(t, b, &c), lmdb ? 0 : STORE_E_NOTFOUND);
		store_txn_abort(t);
		struct store_stat st;
		ck_assert_int_eq(store_stat(S, &st), 0);
		ck_assert_uint_le(st.map_size, max + reserve);
		ck_assert_uint_le(st.size_bytes, lmdb ? max + reserve : st.size_bytes);
		if (lmdb) /* the room a0 held serves the next write at once */
			ck_assert_int_eq(append_big(b, 64 << 10), 0);
	}
}
END_TEST

/* An ordinary delete that still finds room in a store full to its limit
 * frees room the very next write can use (LMDB reuses a transaction's freed
 * pages only from the second transaction after it, so the store settles
 * them), as a delete with the reserve does. */
START_TEST(ordinary_delete_in_a_full_store_frees_room_at_once)
{
	const size_t max = (size_t)1 << 20;
	int lmdb = strcmp(conf_backend(), "pg") != 0;
	OPTS.map_size = OPTS.max_map_size = max;
	reopen_store();
	mkconv("a");
	mkconv("small");
	mkconv("big");
	ck_assert_int_eq(append_big("small", 64 << 10), 0);
	ck_assert_int_eq(append_big("big", 64 << 10), 0);
	ck_assert_int_eq(append_big("big", 64 << 10), 0);
	fill_to_the_limit("a");
	/* room for the next delete's copied pages, not for a 64 KiB event */
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE_LAZY | STORE_WRITE_FREEING, &t), 0);
	ck_assert_int_eq(store_conv_delete(t, "small"), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "big"), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	/* the 128 KiB "big" held serve the next write */
	ck_assert_int_eq(append_big("a", 64 << 10), lmdb ? 0 : STORE_E_FULL);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_le(st.map_size, lmdb ? max : st.map_size);
}
END_TEST

START_TEST(map_full_grows_for_retry)
{
	OPTS.map_size = (size_t)1 << 20;
	OPTS.max_map_size = (size_t)16 << 20;
	reopen_store();
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	int rc, tries = 0;
	struct store_stat st0;
	ck_assert_int_eq(store_stat(S, &st0), 0);
	ck_assert_int_eq(st0.map_full, 0);
	while ((rc = append_big("c1", (size_t)3 << 20)) == STORE_E_FULL && tries < 8) {
		struct store_stat sf;
		ck_assert_int_eq(store_stat(S, &sf), 0);
		ck_assert(sf.map_full || sf.map_size > st0.map_size); /* a retry may fit */
		ck_assert_uint_eq(store_map_size(S), sf.map_size);
		tries++;
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_int_gt(tries, 0); /* it was full at first */
	ck_assert_uint_eq(latest("c1"), 3);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_gt(st.map_size, (size_t)3 << 20);
	ck_assert_uint_le(st.map_size, (size_t)16 << 20);
	ck_assert_int_eq(stream("c1", 0, 2, 0, NULL), 0);
	EXPECT_SEQS(1);
}
END_TEST

START_TEST(reserve_grows_ahead)
{
	OPTS.map_size = (size_t)1 << 20;
	OPTS.max_map_size = (size_t)16 << 20;
	reopen_store();
	mkconv("c1");
	ck_assert_int_eq(store_reserve(S, (size_t)3 << 20), 0);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.map_size, (size_t)6 << 20);
	ck_assert_uint_eq(st.max_map_size, (size_t)16 << 20);
	ck_assert_int_eq(append_big("c1", (size_t)3 << 20), 0); /* at once: no full map */
	ck_assert_int_eq(store_reserve(S, (size_t)100 << 20), STORE_E_FULL);
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.map_size, (size_t)16 << 20); /* grown as far as allowed */
	store_txn *t = rbegin();
	ck_assert_int_eq(store_reserve(S, 1), -EBUSY);
	store_txn_abort(t);
	ck_assert_int_eq(store_reserve(S, 1), 0);
	ck_assert_int_eq(store_reserve(NULL, 1), STORE_E_INVAL);
}
END_TEST

/* ---- more edges --------------------------------------------------------- */

static int conv_cb_ret;
static int conv_ret(void *arg, const struct store_conv *c)
{
	(void)arg;
	(void)c;
	return conv_cb_ret;
}

static int tc_ret(void *arg, const struct store_tool_call *tc)
{
	(void)tc;
	return *(const int *)arg;
}

static int exp_ret(void *arg, const struct store_expiry *e)
{
	(void)e;
	return *(const int *)arg;
}

static int mc_ret(void *arg, const struct store_model_call *mc)
{
	(void)mc;
	return *(const int *)arg;
}

static int ev_ret(void *arg, const struct store_event *e)
{
	(void)e;
	return *(const int *)arg;
}

/* A callback's return stops an iteration and comes back unchanged; it is
 * the caller's value, not a store failure, so it never poisons the txn,
 * whatever the value (even one that looks like a store code). */
START_TEST(callback_return_never_poisons_write_txn)
{
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	mktc("c1", "tc");
	schedule("tc", T0 + 1);
	const int rets[] = { 1, -EIO, STORE_E_CORRUPT, STORE_E_FULL, -ENOMEM };
	for (size_t i = 0; i < sizeof rets / sizeof rets[0]; i++) {
		int ret = rets[i];
		struct store_range r = { 0 };
		store_txn *t = wbegin();
		conv_cb_ret = ret;
		ck_assert_int_eq(store_conv_list(t, -1, NULL, 0, conv_ret, NULL, NULL), ret);
		ck_assert_int_eq(store_events_stream(t, "c1", &r, ev_ret, &ret), ret);
		ck_assert_int_eq(store_load_since(t, "c1", NULL, NULL, ev_ret, &ret), ret);
		ck_assert_int_eq(store_tool_calls_list(t, "c1", 0, tc_ret, &ret), ret);
		ck_assert_int_eq(store_expiries_due(t, INT64_MAX, exp_ret, &ret), ret);
		struct store_event_in e = ev("user_msg", mint(1), NULL);
		uint64_t seq;
		ck_assert_msg(store_event_append(t, "c1", &e, &seq, NULL) == 0, "after callback %d", ret);
		ck_assert_msg(store_txn_commit(t) == 0, "commit after callback %d", ret);
	}
	ck_assert_uint_eq(latest("c1"), 7);
}
END_TEST

START_TEST(audit_callback_return_never_poisons_write_txn)
{
	mkconv("c1");
	put_mc("c1", 1);
	int ret = STORE_E_CORRUPT;
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_calls_list(t, "c1", mc_ret, &ret), ret);
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(1)), 0);
	commit(t);
}
END_TEST

START_TEST(poisoned_txn_fails_every_later_operation)
{
	OPTS.map_size = OPTS.max_map_size = (size_t)1 << 20;
	reopen_store();
	mkconv("c1");
	static char blob[2 << 20];
	msgpack_pack_bin_with_body(B(), blob, sizeof blob);
	struct store_event_in big = ev("blob", built(), NULL);
	store_txn *t = wbegin();
	uint64_t seq;
	struct store_conv c;
	ck_assert_int_eq(store_event_append(t, "c1", &big, &seq, NULL), STORE_E_FULL);
	/* reads and writes alike, and the commit, give the poisoning error */
	ck_assert_int_eq(store_conv_get(t, "c1", &c), STORE_E_FULL);
	ck_assert_int_eq(store_event_latest_seq(t, "c1", &seq), STORE_E_FULL);
	ck_assert_int_eq(store_conv_create(t, "c2", mmap0()), STORE_E_FULL);
	ck_assert_int_eq(store_txn_commit(t), STORE_E_FULL);
	/* the failed commit freed the txn: a new one begins, nothing was written */
	ck_assert_uint_eq(latest("c1"), 0);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
}
END_TEST

START_TEST(reader_slots_exhausted_is_eagain)
{
	/* a fresh directory: an existing reader table may keep its size */
	char sub[PATH_MAX + 16];
	snprintf(sub, sizeof sub, "%s/readers", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	store_close(S);
	S = NULL;
	OPTS.max_readers = 2;
	ck_assert_int_eq(store_open(&S, sub, &OPTS), 0);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.max_readers, 2);
	ck_assert_uint_lt(st.max_readers, 256);
	store_txn *r[256];
	size_t n = 0;
	int rc;
	while ((rc = store_txn_begin(S, STORE_READ, &r[n])) == 0) {
		n++;
		ck_assert_uint_lt(n, 256);
	}
	ck_assert_int_eq(rc, -EAGAIN);
	ck_assert_uint_ge(n, 2);
	/* a writer needs no reader slot */
	store_txn *w = wbegin();
	ck_assert_int_eq(store_conv_create(w, "c1", mmap0()), 0);
	commit(w);
	store_txn_abort(r[--n]); /* a freed slot serves the next reader */
	ck_assert_int_eq(store_txn_begin(S, STORE_READ, &r[n]), 0);
	n++;
	while (n)
		store_txn_abort(r[--n]);
}
END_TEST

static int64_t realtime_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(null_opts_open_with_defaults)
{
	store_close(S);
	S = NULL;
	ck_assert_int_eq(store_open(&S, dir, NULL), 0);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.map_size, (uint64_t)256 << 20); /* 0: 256 MiB */
	ck_assert_uint_ge(st.max_readers, 1024);
	ck_assert_int_eq(st.sync, STORE_SYNC_FULL);
	/* the default clock is CLOCK_REALTIME in ms */
	int64_t lo = realtime_ms();
	int64_t now = store_now(S);
	store_txn *t = wbegin();
	int64_t tnow = store_txn_now(t);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), 0);
	commit(t);
	int64_t hi = realtime_ms();
	ck_assert_int_ge(now, lo);
	ck_assert_int_le(now, hi);
	ck_assert_int_ge(tnow, now);
	ck_assert_int_le(tnow, hi);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_int_eq(c.created_at, tnow);
	store_txn_abort(t);
}
END_TEST

/* Descriptors without FD_CLOEXEC, as a bitmap over fds 0..1023. */
static void inheritable_fds(unsigned char *set)
{
	memset(set, 0, 1024);
	for (int fd = 0; fd < 1024; fd++) {
		int fl = fcntl(fd, F_GETFD);
		if (fl >= 0 && !(fl & FD_CLOEXEC))
			set[fd] = 1;
	}
}

START_TEST(store_descriptors_are_cloexec)
{
	store_close(S);
	S = NULL;
	unsigned char before[1024], after[1024];
	inheritable_fds(before);
	open_store();
	mkconv("c1"); /* descriptors a backend opens lazily, too */
	store_txn *r = rbegin();
	inheritable_fds(after);
	store_txn_abort(r);
	for (int fd = 0; fd < 1024; fd++)
		ck_assert_msg(!after[fd] || before[fd], "fd %d opened by the store is inheritable", fd);
}
END_TEST

START_TEST(longest_tool_call_id)
{
	char id[STORE_ID_MAX + 1];
	memset(id, 'T', STORE_ID_MAX);
	id[STORE_ID_MAX] = 0;
	mkconv("c1");
	mktc("c1", id);
	mktc("c1", "short");
	schedule(id, T0 + 9);
	schedule("short", T0 + 9);
	ck_assert_int_eq(due(T0 + 9), 0);
	EXPECT_LIST(id, "short"); /* tie: id order ('T' < 's') */
	store_txn *t = wbegin();
	uint32_t att;
	ck_assert_int_eq(store_tool_call_attempt(t, id, &att), 0);
	ck_assert_int_eq(store_tool_call_resolve(t, id, STORE_TC_RESOLVED, mint(1), NULL), 0);
	commit(t);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("short");
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
}
END_TEST

/* ---- runs ------------------------------------------------------------- */

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

/* ---- conversation metadata and filtered lists -------------------------- */

/* A metadata map from "k=v" strings. */
static store_bytes mmeta(size_t n, const char *const *kv)
{
	msgpack_packer *pk = B();
	msgpack_pack_map(pk, n);
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(kv[i], '=');
		msgpack_pack_str_with_body(pk, kv[i], (size_t)(eq - kv[i]));
		msgpack_pack_str_with_body(pk, eq + 1, strlen(eq + 1));
	}
	return built();
}
#define MMETA(...) mmeta(sizeof (const char *const[]){ __VA_ARGS__ } / sizeof(const char *), \
			 (const char *const[]){ __VA_ARGS__ })

static int put_meta(const char *id, store_bytes m)
{
	struct store_conv_patch p = { .set = STORE_SET_METADATA, .metadata = m };
	store_txn *t = wbegin();
	int rc = store_conv_put(t, id, &p);
	if (rc == 0)
		commit(t);
	else
		store_txn_abort(t);
	return rc;
}

static store_bytes meta_of(store_txn *t, const char *id)
{
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, id, &c), 0);
	return c.metadata;
}

static int find_convs(const struct store_conv_filter *f, const char *after, size_t limit, int *more)
{
	memset(&C, 0, sizeof C);
	store_txn *t = rbegin();
	int rc = store_conv_find(t, f, after, limit, collect_conv, &C, more);
	store_txn_abort(t);
	return rc;
}

static struct store_kv kv(const char *k, const char *v)
{
	return (struct store_kv){ { k, strlen(k) }, { v, strlen(v) } };
}

static int meta_seen(void *arg, const struct store_conv *c)
{
	*(store_bytes *)arg = c->metadata;
	return 0;
}

START_TEST(meta_round_trips_and_stamps_updated_at)
{
	mkconv("c1");
	store_txn *t = rbegin();
	ck_assert_uint_eq(meta_of(t, "c1").len, 0); /* none yet */
	store_txn_abort(t);
	store_bytes m = MMETA("team=red", "user=u-1", "empty=");
	NOW = T0 + 50;
	ck_assert_int_eq(put_meta("c1", m), 0);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.metadata, m));
	ck_assert_int_eq(c.updated_at, T0 + 50);
	store_txn_abort(t);
	/* list shows it too */
	t = rbegin();
	store_bytes seen = { NULL, 0 };
	ck_assert_int_eq(store_conv_list(t, -1, NULL, 0, meta_seen, &seen, NULL), 0);
	ck_assert(bytes_eq_b(seen, m));
	seen.len = 0;
	ck_assert_int_eq(store_conv_find(t, NULL, NULL, 0, meta_seen, &seen, NULL), 0);
	ck_assert(bytes_eq_b(seen, m));
	store_txn_abort(t);
	/* an empty map clears it */
	ck_assert_int_eq(put_meta("c1", mmap0()), 0);
	t = rbegin();
	ck_assert_uint_eq(meta_of(t, "c1").len, 0);
	store_txn_abort(t);
	struct store_kv team = kv("team", "red");
	struct store_conv_filter f = { .status = -1, .meta = &team, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	/* other fields are left as they were */
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
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

START_TEST(meta_survives_other_puts_and_goes_with_delete)
{
	mkconv("c1");
	store_bytes m = MMETA("team=red");
	ck_assert_int_eq(put_meta("c1", m), 0);
	set_status("c1", STORE_ACTIVE);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(3)), 0);
	ck_assert(bytes_eq_b(meta_of(t, "c1"), m));
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	mkconv("c1"); /* the same id again: none of the old metadata */
	t = rbegin();
	ck_assert_uint_eq(meta_of(t, "c1").len, 0);
	store_txn_abort(t);
	struct store_kv team = kv("team", "red");
	struct store_conv_filter f = { .status = -1, .meta = &team, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
}
END_TEST

START_TEST(meta_out_of_bounds_is_inval_and_writes_nothing)
{
	mkconv("c1");
	store_bytes m = MMETA("team=red");
	ck_assert_int_eq(put_meta("c1", m), 0);
	char k65[66], v257[258];
	memset(k65, 'k', 65);
	k65[65] = 0;
	memset(v257, 'v', 257);
	v257[257] = 0;
	char longk[80], longv[270];
	snprintf(longk, sizeof longk, "%s=x", k65);
	snprintf(longv, sizeof longv, "k=%s", v257);
	const char *seventeen[17];
	char names[17][8];
	for (int i = 0; i < 17; i++) {
		snprintf(names[i], sizeof names[i], "k%d=v", i);
		seventeen[i] = names[i];
	}
	msgpack_packer *pk = B(); /* a value that is not a string */
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, "n", 1);
	msgpack_pack_int64(pk, 1);
	store_bytes nonstr = built();
	pk = B(); /* a NUL in a key */
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, "a\0b", 3);
	msgpack_pack_str_with_body(pk, "v", 1);
	store_bytes nul = built();
	pk = B(); /* a key twice */
	msgpack_pack_map(pk, 2);
	for (int i = 0; i < 2; i++) {
		msgpack_pack_str_with_body(pk, "a", 1);
		msgpack_pack_str_with_body(pk, "v", 1);
	}
	store_bytes twice = built();
	store_bytes bad[] = { mstr("x"), mint(1), MMETA("=v"), mmeta(1, (const char *const[]){ longk }),
			      mmeta(1, (const char *const[]){ longv }), mmeta(17, seventeen), nonstr, nul, twice };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(put_meta("c1", bad[i]) == STORE_E_INVAL, "bad metadata %zu accepted", i);
	for (size_t i = 0; i < NBAD; i++)
		ck_assert_int_eq(put_meta("c1", bad_blobs[i].b), STORE_E_INVAL);
	/* the transaction stays usable after an INVAL */
	store_txn *t = wbegin();
	struct store_conv_patch p = { .set = STORE_SET_METADATA, .metadata = nonstr };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(1)), 0);
	commit(t);
	t = rbegin();
	ck_assert(bytes_eq_b(meta_of(t, "c1"), m));
	store_txn_abort(t);
	/* the largest allowed: 16 pairs, 64-byte keys, 256-byte values, a 128-byte id */
	char id[STORE_ID_MAX + 1];
	memset(id, 'i', STORE_ID_MAX);
	id[STORE_ID_MAX] = 0;
	mkconv(id);
	char kvs[16][64 + 1 + 256 + 1];
	const char *big[16];
	for (int i = 0; i < 16; i++) {
		memset(kvs[i], 'a' + i, 64);
		kvs[i][64] = '=';
		memset(kvs[i] + 65, 'v', 256);
		kvs[i][65 + 256] = 0;
		big[i] = kvs[i];
	}
	ck_assert_int_eq(put_meta(id, mmeta(16, big)), 0);
	struct store_kv last = { { kvs[15], 64 }, { kvs[15] + 65, 256 } };
	struct store_conv_filter f = { .status = -1, .meta = &last, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS(id);
}
END_TEST

/* c1..c6 with metadata, statuses and update times to filter on. */
static void filter_fixture(void)
{
	const char *ids[] = { "c1", "c2", "c3", "c4", "c5", "c6" };
	for (int i = 0; i < 6; i++) {
		NOW = T0 + 100 * (i + 1);
		mkconv(ids[i]);
		ck_assert_int_eq(put_meta(ids[i], i % 2 ? MMETA("team=red", "env=prod") : MMETA("team=blue", "env=prod")),
				 0);
	}
	NOW = T0 + 1000;
	set_status("c3", STORE_ACTIVE);
	set_status("c5", STORE_ACTIVE);
	/* c2: team=red, env=prod; c4: red, prod; c6: red, prod; c1, c3, c5: blue, prod */
	ck_assert_int_eq(put_meta("c6", MMETA("team=red", "env=dev")), 0);
}

static int keep_not_c4(void *arg, const struct store_conv *c)
{
	(void)arg;
	return !bytes_eq_s(c->id, "c4");
}

static int match_fails(void *arg, const struct store_conv *c)
{
	(void)c;
	return ++*(int *)arg == 2 ? -77 : 1;
}

START_TEST(find_filters_by_metadata_status_time_and_match)
{
	filter_fixture();
	int more = 7;
	struct store_kv red[] = { kv("team", "red"), kv("env", "prod") };
	struct store_conv_filter f = { .status = -1, .meta = red, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, &more), 0);
	EXPECT_IDS("c2", "c4", "c6");
	ck_assert_int_eq(more, 0);
	f.nmeta = 2; /* all pairs must match */
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c4");
	struct store_kv prod_red[] = { kv("env", "prod"), kv("team", "red") }; /* either pair first */
	f.meta = prod_red;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c4");
	struct store_kv none = kv("team", "green"), nokey = kv("nokey", "red"), emptyv = kv("team", "");
	f.meta = &none;
	f.nmeta = 1;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	f.meta = &nokey;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	f.meta = &emptyv;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	/* status */
	struct store_conv_filter fs = { .status = STORE_ACTIVE };
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), 0);
	EXPECT_IDS("c3", "c5");
	struct store_kv blue = kv("team", "blue");
	fs.meta = &blue;
	fs.nmeta = 1;
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), 0);
	EXPECT_IDS("c3", "c5");
	fs.status = STORE_IDLE;
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	/* updated range, both ends exclusive: c1 at +100 ... c4 at +400; c3, c5, c6 at +1000 */
	struct store_conv_filter ft = { .status = -1, .updated_after = T0 + 100, .updated_before = T0 + 1000 };
	ck_assert_int_eq(find_convs(&ft, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c4");
	ft.updated_before = 0;
	ck_assert_int_eq(find_convs(&ft, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c3", "c4", "c5", "c6");
	ft.updated_after = 0;
	ft.updated_before = T0 + 201;
	ck_assert_int_eq(find_convs(&ft, NULL, 0, NULL), 0);
	EXPECT_IDS("c1", "c2");
	/* the caller's match, after the rest */
	struct store_conv_filter fm = { .status = -1, .meta = red, .nmeta = 1, .match = keep_not_c4 };
	ck_assert_int_eq(find_convs(&fm, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c6");
	int calls = 0;
	struct store_conv_filter fe = { .status = -1, .match = match_fails, .match_arg = &calls };
	ck_assert_int_eq(find_convs(&fe, NULL, 0, NULL), -77);
	EXPECT_IDS("c1");
	/* no filter: everything */
	ck_assert_int_eq(find_convs(NULL, NULL, 0, NULL), 0);
	EXPECT_IDS("c1", "c2", "c3", "c4", "c5", "c6");
	/* replaced metadata moves in the index */
	ck_assert_int_eq(put_meta("c2", MMETA("team=blue")), 0);
	f.meta = red;
	f.nmeta = 1;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c4", "c6");
	f.meta = &blue;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c1", "c2", "c3", "c5");
}
END_TEST

START_TEST(find_pages_with_after_limit_and_more)
{
	filter_fixture();
	struct store_kv blue = kv("team", "blue");
	struct store_conv_filter f = { .status = -1, .meta = &blue, .nmeta = 1 };
	int more = 0;
	ck_assert_int_eq(find_convs(&f, NULL, 2, &more), 0);
	EXPECT_IDS("c1", "c3");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(find_convs(&f, "c3", 2, &more), 0);
	EXPECT_IDS("c5");
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(find_convs(&f, "c2", 1, &more), 0); /* after an id not matching: from the next */
	EXPECT_IDS("c3");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(find_convs(&f, "c5", 0, &more), 0);
	ck_assert_uint_eq(C.n, 0);
	ck_assert_int_eq(more, 0);
	/* exactly limit matches: no more */
	ck_assert_int_eq(find_convs(&f, NULL, 3, &more), 0);
	EXPECT_IDS("c1", "c3", "c5");
	ck_assert_int_eq(more, 0);
	/* the full walk pages as well */
	struct store_conv_filter fa = { .status = STORE_ACTIVE };
	ck_assert_int_eq(find_convs(&fa, NULL, 1, &more), 0);
	EXPECT_IDS("c3");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(find_convs(&fa, "c3", 1, &more), 0);
	EXPECT_IDS("c5");
	ck_assert_int_eq(more, 0);
	/* the callback's return stops it, handed back as is */
	memset(&C, 0, sizeof C);
	C.stop_after = 1;
	C.stop_ret = 42;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_conv_find(t, &f, NULL, 0, collect_conv, &C, NULL), 42);
	store_txn_abort(t);
	ck_assert_uint_eq(C.n, 1);
}
END_TEST

START_TEST(find_bad_filter_is_inval)
{
	filter_fixture();
	char k65[66];
	memset(k65, 'k', 65);
	k65[65] = 0;
	struct store_kv bad[] = { kv("", "v"), kv(k65, "v"), { { "a\0b", 3 }, { "v", 1 } } };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct store_conv_filter f = { .status = -1, .meta = &bad[i], .nmeta = 1 };
		ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), STORE_E_INVAL);
	}
	struct store_conv_filter fs = { .status = 9 };
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), STORE_E_INVAL);
	struct store_conv_filter fn = { .status = -1, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&fn, NULL, 0, NULL), STORE_E_INVAL);
	ck_assert_int_eq(find_convs(NULL, "a b", 0, NULL), STORE_E_INVAL);
	store_txn *t = rbegin();
	ck_assert_int_eq(store_conv_find(t, NULL, NULL, 0, NULL, NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

START_TEST(backup_copies_what_was_committed)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	ck_assert_int_eq(put_meta("c1", MMETA("team=red")), 0);
	char bk[PATH_MAX + 16];
	snprintf(bk, sizeof bk, "%s.bk", dir);
	ck_assert_int_eq(mkdir(bk, 0700), 0);
	int rc = store_backup(S, bk);
	if (rc == -EOPNOTSUPP) { /* PostgreSQL: pg_dump's job */
		const char *t = getenv("AGENTD_TEST_STORE");
		ck_assert_msg(t && !strcmp(t, "pg"), "only PostgreSQL may refuse a backup");
		rmdir(bk);
		return;
	}
	ck_assert_int_eq(rc, 0);
	/* a write after the copy is not in it */
	append_n("c1", 1, "user_msg");
	store *b;
	struct store_opts o = { .sync = STORE_SYNC_NONE, .read_only = 1 };
	ck_assert_int_eq(store_open(&b, bk, &o), 0);
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(b, STORE_READ, &t), 0);
	uint64_t seq;
	ck_assert_int_eq(store_event_latest_seq(t, "c1", &seq), 0);
	ck_assert_uint_eq(seq, 5);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.metadata, MMETA("team=red")));
	store_txn_abort(t);
	store_close(b);
	/* a directory holding anything is refused, a missing one too */
	ck_assert_int_eq(store_backup(S, bk), -EEXIST);
	char missing[PATH_MAX + 32];
	snprintf(missing, sizeof missing, "%s.none/x", dir);
	ck_assert_int_eq(store_backup(S, missing), -ENOENT);
	char f[PATH_MAX + 16 + 260];
	DIR *d = opendir(bk);
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(f, sizeof f, "%s/%s", bk, e->d_name);
			unlink(f);
		}
	closedir(d);
	rmdir(bk);
}
END_TEST

/* ---- nodes and leases -------------------------------------------------- */

#define NODES_MAX 8
struct node_copy {
	char id[STORE_ID_MAX + 1];
	int64_t started_at, beat_at, expires_at;
	uint64_t leases;
};
struct nodes_seen {
	size_t n;
	struct node_copy v[NODES_MAX];
};

static int collect_node(void *arg, const struct store_node *nd)
{
	struct nodes_seen *ns = arg;
	ck_assert_uint_lt(ns->n, NODES_MAX);
	ck_assert_uint_le(nd->id.len, STORE_ID_MAX);
	struct node_copy *c = &ns->v[ns->n++];
	memcpy(c->id, nd->id.ptr, nd->id.len);
	c->id[nd->id.len] = 0;
	c->started_at = nd->started_at;
	c->beat_at = nd->beat_at;
	c->expires_at = nd->expires_at;
	c->leases = nd->leases;
	return 0;
}

static struct nodes_seen nodes_now(void)
{
	struct nodes_seen ns = { 0 };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_nodes_list(t, collect_node, &ns), 0);
	store_txn_abort(t);
	return ns;
}

static uint64_t beat(const char *node, int64_t ttl)
{
	store_txn *t = wbegin();
	uint64_t n = 99;
	ck_assert_int_eq(store_node_beat(t, node, ttl, &n), 0);
	commit(t);
	return n;
}

static int claim(const char *conv, const char *node, int64_t ttl, uint64_t *gen)
{
	store_txn *t = wbegin();
	int err = store_conv_claim(t, conv, node, ttl, gen);
	commit(t);
	return err;
}

/* The owner of conv as "node@expires" ("-" without one), and its generation. */
static void owner_of(const char *conv, char *out, size_t cap, uint64_t *gen)
{
	store_txn *t = rbegin();
	struct store_owner o;
	ck_assert_int_eq(store_conv_owner(t, conv, &o), 0);
	if (o.node.len)
		snprintf(out, cap, "%.*s@%lld", (int)o.node.len, (const char *)o.node.ptr, (long long)o.expires_at);
	else
		snprintf(out, cap, "-@%lld", (long long)o.expires_at);
	if (gen)
		*gen = o.lease;
	store_txn_abort(t);
}

struct ids_seen {
	char s[512];
};

static int collect_cid(void *arg, const char *id, size_t len)
{
	struct ids_seen *c = arg;
	size_t n = strlen(c->s);
	ck_assert_uint_lt(n + len + 2, sizeof c->s);
	snprintf(c->s + n, sizeof c->s - n, "%s%.*s", n ? "," : "", (int)len, id);
	return 0;
}

static int stop_id(void *arg, const char *id, size_t len)
{
	(void)arg;
	(void)id;
	(void)len;
	return 42;
}

static int collect_lease(void *arg, const char *id, size_t len, uint64_t gen, int64_t exp)
{
	struct ids_seen *c = arg;
	size_t n = strlen(c->s);
	snprintf(c->s + n, sizeof c->s - n, "%s%.*s/%llu@%lld", n ? "," : "", (int)len, id, (unsigned long long)gen,
		 (long long)(exp - T0));
	return 0;
}

START_TEST(node_beat_creates_refreshes_and_lists)
{
	ck_assert_uint_eq(nodes_now().n, 0);
	ck_assert_uint_eq(beat("n2", 1000), 0);
	NOW += 10;
	ck_assert_uint_eq(beat("n1", 3000), 0);
	NOW += 500;
	ck_assert_uint_eq(beat("n2", 2000), 0);
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 2); /* in id order */
	ck_assert_str_eq(ns.v[0].id, "n1");
	ck_assert_int_eq(ns.v[0].started_at, T0 + 10);
	ck_assert_int_eq(ns.v[0].beat_at, T0 + 10);
	ck_assert_int_eq(ns.v[0].expires_at, T0 + 3010);
	ck_assert_str_eq(ns.v[1].id, "n2");
	ck_assert_int_eq(ns.v[1].started_at, T0); /* kept by a later beat */
	ck_assert_int_eq(ns.v[1].beat_at, T0 + 510);
	ck_assert_int_eq(ns.v[1].expires_at, T0 + 2510);
	ck_assert_uint_eq(ns.v[1].leases, 0);
	/* an expired node is still listed: callers judge by expires_at */
	NOW += 100000;
	ck_assert_uint_eq(nodes_now().n, 2);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_node_leave(t, "n1"), 0);
	ck_assert_int_eq(store_node_leave(t, "never-seen"), 0);
	commit(t);
	ns = nodes_now();
	ck_assert_uint_eq(ns.n, 1);
	ck_assert_str_eq(ns.v[0].id, "n2");
	/* a node that left and beats again starts anew */
	beat("n1", 1000);
	ns = nodes_now();
	ck_assert_int_eq(ns.v[0].started_at, NOW);
}
END_TEST

START_TEST(claim_takes_a_new_generation_and_fences)
{
	mkconv("c1");
	char o[256];
	uint64_t g0 = 0, g1 = 0, g2 = 0, g = 0;
	owner_of("c1", o, sizeof o, &g0);
	ck_assert_str_eq(o, "-@0");
	ck_assert_int_eq(claim("c1", "n1", 1000, &g1), 0);
	ck_assert_uint_gt(g1, g0);
	owner_of("c1", o, sizeof o, &g);
	ck_assert_int_eq(g, g1);
	char want[64];
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 1000));
	ck_assert_str_eq(o, want);
	/* the owner may claim again: a new generation fences its own old worker */
	ck_assert_int_eq(claim("c1", "n1", 1000, &g2), 0);
	ck_assert_uint_gt(g2, g1);
	store_txn *t = rbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", g1), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_check(t, "c1", g2), 0);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.lease, g2); /* the generation is the conversation's lease */
	store_txn_abort(t);
}
END_TEST

START_TEST(claim_of_a_live_lease_conflicts_and_writes_nothing)
{
	mkconv("c1");
	uint64_t g1 = 0, g = 77;
	ck_assert_int_eq(claim("c1", "n1", 1000, &g1), 0);
	NOW += 999; /* one ms before its expiry */
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_claim(t, "c1", "n2", 5000, &g), STORE_E_CONFLICT);
	ck_assert_uint_eq(g, 77);
	/* the transaction stays usable */
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	char o[256], want[64];
	owner_of("c1", o, sizeof o, &g);
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 1000));
	ck_assert_str_eq(o, want);
	ck_assert_uint_eq(g, g1);
	ck_assert_uint_eq(latest("c1"), 1);
}
END_TEST

/* A node that stopped (SIGSTOP, a partition) and comes back after its
 * lease expired and moved: its worker is fenced, its beat renews nothing. */
START_TEST(expired_lease_moves_and_the_stale_owner_is_fenced)
{
	mkconv("c1");
	mkconv("c2");
	uint64_t g1 = 0, g2 = 0, gx = 0;
	beat("n1", 1000);
	ck_assert_int_eq(claim("c1", "n1", 1000, &g1), 0);
	ck_assert_int_eq(claim("c2", "n1", 1000, &gx), 0);
	NOW += 1000; /* expires_at <= now: expired */
	ck_assert_int_eq(claim("c1", "n2", 1000, &g2), 0);
	ck_assert_uint_gt(g2, g1);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", g1), STORE_E_FENCED);
	store_txn_abort(t);
	/* n1 wakes: its beat renews only what it still holds */
	NOW += 10;
	ck_assert_uint_eq(beat("n1", 1000), 1);
	char o[256], want[64];
	owner_of("c1", o, sizeof o, NULL);
	snprintf(want, sizeof want, "n2@%lld", (long long)(T0 + 2000));
	ck_assert_str_eq(o, want);
	owner_of("c2", o, sizeof o, NULL);
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 2010));
	ck_assert_str_eq(o, want);
	/* and its release of what it lost is refused */
	t = wbegin();
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1), STORE_E_FENCED);
	commit(t);
	owner_of("c1", o, sizeof o, NULL);
	snprintf(want, sizeof want, "n2@%lld", (long long)(T0 + 2000));
	ck_assert_str_eq(o, want);
}
END_TEST

START_TEST(beat_renews_held_leases)
{
	mkconv("c1");
	mkconv("c2");
	mkconv("c3");
	uint64_t g;
	beat("n1", 1000);
	ck_assert_int_eq(claim("c1", "n1", 1000, &g), 0);
	ck_assert_int_eq(claim("c2", "n1", 1000, &g), 0);
	ck_assert_int_eq(claim("c3", "n2", 1000, &g), 0);
	NOW += 800;
	ck_assert_uint_eq(beat("n1", 1000), 2);
	NOW += 800; /* past the first expiry, inside the renewed one */
	ck_assert_int_eq(claim("c1", "n2", 1000, &g), STORE_E_CONFLICT);
	ck_assert_int_eq(claim("c2", "n3", 1000, &g), STORE_E_CONFLICT);
	ck_assert_int_eq(claim("c3", "n3", 1000, &g), 0); /* n2 never beat: its lease lapsed */
	struct ids_seen l = { "" };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_node_leases(t, "n1", collect_lease, &l), 0);
	store_txn_abort(t);
	char want[128];
	uint64_t g1, g2;
	char o[256];
	owner_of("c1", o, sizeof o, &g1);
	owner_of("c2", o, sizeof o, &g2);
	snprintf(want, sizeof want, "c1/%llu@1800,c2/%llu@1800", (unsigned long long)g1, (unsigned long long)g2);
	ck_assert_str_eq(l.s, want);
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 1);
	ck_assert_uint_eq(ns.v[0].leases, 2);
}
END_TEST

START_TEST(release_and_leave_free_leases_at_once)
{
	mkconv("c1");
	mkconv("c2");
	uint64_t g1 = 0, g2 = 0, g = 0;
	beat("n1", 60000);
	ck_assert_int_eq(claim("c1", "n1", 60000, &g1), 0);
	ck_assert_int_eq(claim("c2", "n1", 60000, &g2), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_release(t, "c1", "n2", g1), STORE_E_FENCED);     /* not its owner */
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1 + 100), STORE_E_FENCED); /* not its generation */
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1), 0);
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1), STORE_E_FENCED); /* no longer held */
	commit(t);
	char o[256];
	owner_of("c1", o, sizeof o, &g);
	ck_assert_str_eq(o, "-@0");
	ck_assert_uint_eq(g, g1); /* the generation stays: its worker is not fenced by a release */
	ck_assert_int_eq(claim("c1", "n2", 1000, &g), 0);
	/* leaving releases the rest */
	t = wbegin();
	ck_assert_int_eq(store_node_leave(t, "n1"), 0);
	commit(t);
	owner_of("c2", o, sizeof o, NULL);
	ck_assert_str_eq(o, "-@0");
	ck_assert_uint_eq(nodes_now().n, 0);
	ck_assert_int_eq(claim("c2", "n2", 1000, &g), 0);
	ck_assert_uint_gt(g, g2);
}
END_TEST

START_TEST(claimable_lists_free_and_expired_by_status)
{
	const char *ids[] = { "a", "b", "c", "d", "e" };
	for (size_t i = 0; i < 5; i++)
		mkconv(ids[i]);
	set_status("a", STORE_ACTIVE);
	set_status("b", STORE_ACTIVE);
	set_status("c", STORE_SUSPENDED);
	set_status("e", STORE_ACTIVE); /* d stays idle */
	uint64_t g;
	ck_assert_int_eq(claim("a", "n1", 1000, &g), 0);
	ck_assert_int_eq(claim("b", "n1", 5000, &g), 0);
	NOW += 1000; /* a expired, b live, c d e never owned */
	unsigned mask = 1u << STORE_ACTIVE | 1u << STORE_SUSPENDED;
	struct ids_seen l = { "" };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_convs_claimable(t, mask, 0, collect_cid, &l), 0);
	store_txn_abort(t);
	ck_assert_str_eq(l.s, "a,c,e");
	l.s[0] = 0;
	t = wbegin();
	ck_assert_int_eq(store_convs_claimable(t, 0, 0, collect_cid, &l), 0); /* any status */
	ck_assert_str_eq(l.s, "a,c,d,e");
	l.s[0] = 0;
	ck_assert_int_eq(store_convs_claimable(t, mask, 2, collect_cid, &l), 0);
	ck_assert_str_eq(l.s, "a,c");
	ck_assert_int_eq(store_conv_claim(t, "a", "n2", 1000, &g), 0);
	ck_assert_int_eq(store_conv_claim(t, "c", "n2", 1000, &g), 0);
	commit(t);
	l.s[0] = 0;
	t = rbegin();
	ck_assert_int_eq(store_convs_claimable(t, mask, 0, collect_cid, &l), 0);
	ck_assert_str_eq(l.s, "e");
	/* the callback's return stops it and comes back unchanged */
	ck_assert_int_eq(store_convs_claimable(t, mask, 0, stop_id, NULL), 42);
	store_txn_abort(t);
}
END_TEST

START_TEST(delete_forgets_the_owner)
{
	mkconv("c1");
	uint64_t g;
	ck_assert_int_eq(claim("c1", "n1", 60000, &g), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), 0);
	commit(t);
	char o[256];
	owner_of("c1", o, sizeof o, NULL);
	ck_assert_str_eq(o, "-@0");
	ck_assert_int_eq(claim("c1", "n2", 1000, &g), 0);
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 0); /* claims alone make no node row */
}
END_TEST

START_TEST(node_ops_reject_invalid_args)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t g = 0;
	struct store_owner o;
	struct ids_seen l = { "" };
	ck_assert_int_eq(store_node_beat(t, "bad id", 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_beat(t, NULL, 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_beat(t, "n1", 0, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_beat(t, "n1", -5, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leave(t, ""), STORE_E_INVAL);
	ck_assert_int_eq(store_nodes_list(t, NULL, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_owner(t, "c1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_owner(t, "nope", &o), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_owner(t, "bad/id", &o), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "nope", "n1", 1000, &g), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_claim(t, "c1", "bad id", 1000, &g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 0, &g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_release(t, "nope", "n1", 1), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_release(t, "c1", "bad id", 1), STORE_E_INVAL);
	ck_assert_int_eq(store_convs_claimable(t, 0, 0, NULL, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leases(t, "bad id", collect_lease, &l), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leases(t, "n1", NULL, NULL), STORE_E_INVAL);
	/* none of them poisoned the transaction */
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 1000, &g), 0);
	commit(t);
	/* the writes need a write transaction; the reads do not */
	t = rbegin();
	ck_assert_int_eq(store_node_beat(t, "n1", 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leave(t, "n1"), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 1000, &g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_owner(t, "c1", &o), 0);
	ck_assert_int_eq(store_node_leases(t, "n1", collect_lease, &l), 0);
	ck_assert_uint_gt(strlen(l.s), 0);
	store_txn_abort(t);
}
END_TEST

/* A wakeup for another node is part of the write transaction; on every
 * backend it takes valid ids in a write transaction (what it reaches is a
 * backend's business: store_pg's suite). */
START_TEST(notify_validates_and_keeps_the_txn_usable)
{
	mkconv("c1");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_notify(t, "n1", "c1"), 0);
	ck_assert_int_eq(store_notify(t, "n1", "not-a-conv-yet"), 0);
	ck_assert_int_eq(store_notify(t, "bad id", "c1"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify(t, "n1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_notify(NULL, "n1", "c1"), STORE_E_INVAL);
	/* messages: printable, 1..STORE_NOTIFY_MSG_MAX bytes, with a space */
	char big[STORE_NOTIFY_MSG_MAX + 2];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = 0;
	big[1] = ' ';
	ck_assert_int_eq(store_notify_msg(t, "n1", "ask 1 n2 kill c1 9"), 0);
	ck_assert_int_eq(store_notify_msg(t, "n1", big), STORE_E_INVAL);
	big[STORE_NOTIFY_MSG_MAX] = 0;
	ck_assert_int_eq(store_notify_msg(t, "n1", big), 0);
	ck_assert_int_eq(store_notify_msg(t, "n1", "no-space"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", ""), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", "tab\there x"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", "caf\xc3\xa9 x"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "bad id", "a b"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(NULL, "n1", "a b"), STORE_E_INVAL);
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	ck_assert_uint_eq(latest("c1"), 1);
	t = rbegin();
	ck_assert_int_eq(store_notify(t, "n1", "c1"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", "a b"), STORE_E_INVAL);
	store_txn_abort(t);
	ck_assert_int_eq(store_notified(S, NULL, NULL), STORE_E_INVAL);
}
END_TEST

/* A node's claim of due deadlines: what is due, earliest first, at most
 * limit; fired ones (resolved) are gone for the next claim. */
START_TEST(expiries_claim_due_in_order_with_limit)
{
	mkconv("c1");
	mkconv("c2");
	const char *ids[] = { "t3", "t1", "t2", "t4" };
	for (int i = 0; i < 4; i++)
		mktc(i % 2 ? "c2" : "c1", ids[i]);
	schedule("t3", T0 + 20);
	schedule("t1", T0 + 10);
	schedule("t2", T0 + 20);
	schedule("t4", T0 + 99);
	for (int write = 0; write < 2; write++) {
		memset(&L, 0, sizeof L);
		store_txn *t = write ? wbegin() : rbegin();
		ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 0, collect_exp, &L), 0);
		EXPECT_LIST("t1", "t2", "t3");
		ck_assert_int_eq(L.deadline[0], T0 + 10);
		ck_assert_str_eq(L.conv[0], "c2");
		memset(&L, 0, sizeof L);
		ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 2, collect_exp, &L), 0);
		EXPECT_LIST("t1", "t2");
		memset(&L, 0, sizeof L);
		ck_assert_int_eq(store_expiries_claim(t, T0 + 9, 0, collect_exp, &L), 0);
		ck_assert_uint_eq(L.n, 0);
		store_txn_abort(t);
	}
	store_txn *t = wbegin();
	memset(&L, 0, sizeof L);
	ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 1, collect_exp, &L), 0);
	EXPECT_LIST("t1");
	ck_assert_int_eq(store_tool_call_resolve(t, "t1", STORE_TC_EXPIRED, raw(NULL, 0), NULL), 0);
	memset(&L, 0, sizeof L);
	L.stop_after = 1;
	L.stop_ret = 9; /* the callback's return comes back unchanged, even with a limit */
	ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 5, collect_exp, &L), 9);
	EXPECT_LIST("t2");
	ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 0, NULL, NULL), STORE_E_INVAL);
	commit(t);
}
END_TEST

/* Nodes and leases survive a reopen. */
START_TEST(nodes_and_leases_are_durable)
{
	mkconv("c1");
	uint64_t g;
	beat("n1", 1000);
	ck_assert_int_eq(claim("c1", "n1", 1000, &g), 0);
	reopen_store();
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 1);
	ck_assert_uint_eq(ns.v[0].leases, 1);
	char o[256], want[64];
	uint64_t g2;
	owner_of("c1", o, sizeof o, &g2);
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 1000));
	ck_assert_str_eq(o, want);
	ck_assert_uint_eq(g2, g);
}
END_TEST


/* ---- suite ------------------------------------------------------------ */


/* ---- logs that begin after seq 1 (store_conv_create_at) --------------- */

static void mkconv_at(const char *id, uint64_t first)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create_at(t, id, mmap0(), first), 0);
	commit(t);
}

static uint64_t first_seq(const char *conv)
{
	store_txn *t = rbegin();
	uint64_t seq = 99;
	ck_assert_int_eq(store_event_first_seq(t, conv, &seq), 0);
	store_txn_abort(t);
	return seq;
}

START_TEST(log_at_starts_after_its_base)
{
	mkconv_at("f", 101);
	/* No event yet: the last seq is the base, in a read and in a write txn. */
	ck_assert_uint_eq(latest("f"), 100);
	ck_assert_uint_eq(first_seq("f"), 101);
	ck_assert_int_eq(stream("f", 0, 0, 0, NULL), 0);
	EXPECT_NO_EVENTS();
	ck_assert_int_eq(stream("f", 0, 0, 5, NULL), 0);
	EXPECT_NO_EVENTS();
	store_txn *t = wbegin();
	uint64_t seq = 0, seqs[3];
	ck_assert_int_eq(store_event_latest_seq(t, "f", &seq), 0);
	ck_assert_uint_eq(seq, 100);
	struct store_event_in e = ev("user_msg", mstr("a"), "k1");
	ck_assert_int_eq(store_event_append(t, "f", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 101);
	struct store_event_in b[3] = { ev("assistant_msg", mstr("b"), NULL), ev("user_msg", mstr("c"), "k1"),
				       ev("user_msg", mstr("d"), NULL) };
	int dups[3];
	ck_assert_int_eq(store_events_append(t, "f", b, 3, seqs, dups), 0);
	ck_assert_uint_eq(seqs[0], 102);
	ck_assert_uint_eq(seqs[1], 101); /* the event_id's original seq */
	ck_assert_int_eq(dups[1], 1);
	ck_assert_uint_eq(seqs[2], 103);
	commit(t);
	ck_assert_uint_eq(latest("f"), 103);
	ck_assert_uint_eq(first_seq("f"), 101);
	/* A range that starts before the log delivers from its first seq. */
	ck_assert_int_eq(stream("f", 0, 0, 0, NULL), 0);
	expect_run(101, 103);
	ck_assert_int_eq(stream("f", 50, 103, 0, NULL), 0);
	EXPECT_SEQS(101, 102);
	ck_assert_int_eq(stream("f", 0, 0, 10, NULL), 0);
	expect_run(101, 103);
	ck_assert_int_eq(stream("f", 0, 0, 2, NULL), 0);
	EXPECT_SEQS(102, 103);
	ck_assert_int_eq(stream("f", 0, 0, 10, "user_msg"), 0);
	EXPECT_SEQS(101, 103);
	ck_assert_int_eq(stream("f", 101, 0, 0, NULL), 0);
	EXPECT_SEQS(102, 103);
	t = rbegin();
	ck_assert_int_eq(store_event_id_seq(t, "f", "k1", 2, &seq), 0);
	ck_assert_uint_eq(seq, 101);
	store_txn_abort(t);
	/* What it holds outlives a reopen. */
	reopen_store();
	ck_assert_uint_eq(first_seq("f"), 101);
	ck_assert_uint_eq(latest("f"), 103);
}
END_TEST

START_TEST(log_at_takes_a_summary_of_what_it_stands_in_for)
{
	mkconv_at("f", 41);
	/* The summary that stands in for 1..40: to_seq up to the last seq, as always. */
	store_txn *t = wbegin();
	ck_assert_int_eq(store_summary_put(t, "f", 1, 41, mstr("s"), NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_put(t, "f", 1, 40, mstr("s40"), NULL), 0);
	store_txn_abort(t);
	put_summary("f", 1, 40, mstr("s40"), 1);
	struct store_summary sum;
	int has = 0;
	ck_assert_int_eq(load_since("f", &sum, &has), 0);
	ck_assert_int_eq(has, 1);
	ck_assert_uint_eq(sum.to_seq, 40);
	EXPECT_NO_EVENTS();
	append_n("f", 4, "user_msg");
	ck_assert_int_eq(load_since("f", &sum, &has), 0);
	expect_run(41, 44);
	put_summary("f", 41, 42, mstr("s42"), 2);
	ck_assert_int_eq(load_since("f", &sum, &has), 0);
	ck_assert_uint_eq(sum.to_seq, 42);
	EXPECT_SEQS(43, 44);
	/* Without a summary load_since reads the whole (shorter) log. */
	mkconv_at("g", 7);
	append_n("g", 2, "user_msg");
	ck_assert_int_eq(load_since("g", &sum, &has), 0);
	ck_assert_int_eq(has, 0);
	EXPECT_SEQS(7, 8);
}
END_TEST

START_TEST(log_at_rules_and_delete)
{
	/* An ordinary conversation's log begins at 1; create_at(1) is create. */
	mkconv("c");
	ck_assert_uint_eq(first_seq("c"), 1);
	mkconv_at("one", 1);
	ck_assert_uint_eq(first_seq("one"), 1);
	ck_assert_uint_eq(latest("one"), 0);
	store_txn *t = wbegin();
	uint64_t seq;
	ck_assert_int_eq(store_conv_create_at(t, "c", mmap0(), 5), STORE_E_CONFLICT);
	ck_assert_int_eq(store_conv_create_at(t, "z", mmap0(), 0), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create_at(t, "z", mmap0(), (uint64_t)INT64_MAX + 1), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create_at(t, "bad id", mmap0(), 5), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_create_at(t, "z", mstr("not a map"), 5), STORE_E_INVAL);
	ck_assert_int_eq(store_event_first_seq(t, "nope", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_first_seq(t, "c", NULL), STORE_E_INVAL);
	/* each refusal left the txn usable, and nothing written */
	ck_assert_int_eq(store_conv_create_at(t, "d", mmap0(), 5), 0);
	ck_assert_int_eq(store_event_latest_seq(t, "d", &seq), 0);
	ck_assert_uint_eq(seq, 4);
	commit(t);
	t = rbegin();
	struct store_conv cv;
	ck_assert_int_eq(store_conv_get(t, "z", &cv), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_get(t, "d", &cv), 0);
	ck_assert_int_eq(cv.status, STORE_IDLE);
	store_txn_abort(t);
	/* Created and deleted in one txn, or deleted later: nothing of it stays;
	 * the id made again begins at 1. */
	append_n("d", 2, "user_msg");
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "d"), 0);
	ck_assert_int_eq(store_conv_create_at(t, "e", mmap0(), 9), 0);
	ck_assert_int_eq(store_conv_delete(t, "e"), 0);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_event_first_seq(t, "d", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_first_seq(t, "e", &seq), STORE_E_NOTFOUND);
	store_txn_abort(t);
	mkconv("d");
	ck_assert_uint_eq(first_seq("d"), 1);
	ck_assert_uint_eq(latest("d"), 0);
	append_n("d", 1, "user_msg");
	ck_assert_uint_eq(latest("d"), 1);
	/* An aborted create_at leaves nothing. */
	t = wbegin();
	ck_assert_int_eq(store_conv_create_at(t, "gone", mmap0(), 3), 0);
	store_txn_abort(t);
	t = rbegin();
	ck_assert_int_eq(store_event_first_seq(t, "gone", &seq), STORE_E_NOTFOUND);
	store_txn_abort(t);
	mkconv("gone");
	ck_assert_uint_eq(first_seq("gone"), 1);
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

/* ---- several conversations locked at once (store_convs_lock) ----------- */

START_TEST(convs_lock_changes_nothing_later_reads_see)
{
	mkconv("a");
	mkconv("b");
	mkconv("c");
	append_n("b", 2, "user_msg");
	store_txn *t = wbegin();
	const char *ids[] = { "c", "missing", "b", "a", "b" };
	ck_assert_int_eq(store_convs_lock(t, ids, 5), 0);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "b", &c), 0);
	ck_assert(bytes_eq_s(c.id, "b"));
	ck_assert_int_eq(c.status, STORE_IDLE);
	ck_assert_int_eq(store_conv_get(t, "missing", &c), STORE_E_NOTFOUND);
	/* Appends interleaved across the locked conversations: each seq
	 * follows its own conversation's last. */
	uint64_t seq = 0;
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "b", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 3);
	ck_assert_int_eq(store_conv_get(t, "a", &c), 0);
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_conv_get(t, "b", &c), 0);
	ck_assert_int_eq(store_event_append(t, "b", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 4);
	/* A change made after the lock is what the next get returns. */
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
	ck_assert_int_eq(store_conv_put(t, "c", &p), 0);
	ck_assert_int_eq(store_conv_get(t, "c", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	ck_assert_int_eq(store_convs_lock(t, ids, 3), 0); /* again, in the same txn */
	struct store_usage u = { 5, 7, 0.5 };
	ck_assert_int_eq(store_usage_add(t, "a", &u), 0);
	ck_assert_int_eq(store_conv_get(t, "a", &c), 0);
	ck_assert_uint_eq(c.usage.input_tokens, 5);
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 2);
	ck_assert_int_eq(store_conv_get(t, "c", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	ck_assert_int_eq(store_convs_lock(t, NULL, 0), 0);
	commit(t);
	ck_assert_uint_eq(latest("a"), 2);
	ck_assert_uint_eq(latest("b"), 4);
	ck_assert_uint_eq(latest("c"), 0);
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c", &c), 0);
	ck_assert_int_eq(c.status, STORE_ACTIVE);
	store_txn_abort(t);
}
END_TEST

START_TEST(convs_lock_bad_args_are_inval_and_keep_the_txn)
{
	mkconv("a");
	const char *bad[] = { "a", "no spaces" };
	const char *none[] = { NULL };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_convs_lock(t, bad, 1), STORE_E_INVAL); /* a read txn */
	store_txn_abort(t);
	t = wbegin();
	ck_assert_int_eq(store_convs_lock(t, bad, 2), STORE_E_INVAL);
	ck_assert_int_eq(store_convs_lock(t, none, 1), STORE_E_INVAL);
	ck_assert_int_eq(store_convs_lock(t, NULL, 1), STORE_E_INVAL);
	uint64_t seq = 0;
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	ck_assert_int_eq(store_event_append(t, "a", &e, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	commit(t);
	ck_assert_uint_eq(latest("a"), 1);
}
END_TEST


static TCase *tc_new(Suite *s, const char *name, void (*su)(void))
{
	TCase *tc = tcase_create(name);
	tcase_add_checked_fixture(tc, su, teardown);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tc;
}

Suite *make_conformance_suite(void)
{
	Suite *s = suite_create("conformance");
	TCase *tc = tc_new(s, "events", setup);
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

	tc = tc_new(s, "stream", setup);
	tcase_add_test(tc, stream_after_before_exclusive);
	tcase_add_test(tc, stream_after_max_is_empty);
	tcase_add_test(tc, stream_limit_keeps_most_recent);
	tcase_add_test(tc, stream_type_filter);
	tcase_add_test(tc, stream_type_filter_with_limit);
	tcase_add_test(tc, stream_type_filter_with_limit_and_before);
	tcase_add_test(tc, stream_pages_backwards);
	tcase_add_test(tc, stream_pages_backwards_with_type);
	tcase_add_test(tc, stream_callback_return_stops);
	tcase_add_test(tc, stream_invalid_args);
	tc = tc_new(s, "summaries", setup);
	tcase_add_test(tc, load_since_without_summary);
	tcase_add_test(tc, load_since_after_latest_summary);
	tcase_add_test(tc, load_since_summary_at_last_seq);
	tcase_add_test(tc, load_since_callback_return_stops);
	tcase_add_test(tc, summary_latest_none_is_notfound);
	tcase_add_test(tc, summary_fields_round_trip);
	tcase_add_test(tc, summary_latest_is_greatest_to_seq);
	tcase_add_test(tc, summary_same_to_seq_replaces);
	tcase_add_test(tc, summary_versions_increment);
	tcase_add_test(tc, summary_put_rejects_bad_range);
	tcase_add_test(tc, summaries_list_every_summary_in_to_seq_order);
	tcase_add_test(tc, summary_restore_writes_it_as_given);

	tc = tc_new(s, "conversations", setup);
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
	tc = tc_new(s, "ids", setup);
	tcase_add_test(tc, unknown_conversation_is_notfound);
	tcase_add_test(tc, unknown_tool_call);
	tcase_add_test(tc, invalid_ids_are_inval);

	tc = tc_new(s, "lease_usage", setup);
	tcase_add_test(tc, lease_next_increments_and_check_fences);
	tcase_add_test(tc, lease_not_reissued_after_delete);
	tcase_add_test(tc, lazy_write_commits_and_is_visible);
	tcase_add_test(tc, lease_fenced_writer_txn_stays_usable);
	tcase_add_test(tc, usage_add_accumulates);
	tcase_add_test(tc, usage_add_saturates);
	tcase_add_test(tc, turns_add_counts);

	tc = tc_new(s, "tool_calls", setup);
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

	tc = tc_new(s, "expiries", setup);
	tcase_add_test(tc, expiry_schedule_and_due);
	tcase_add_test(tc, expiry_reschedule_replaces);
	tcase_add_test(tc, expiry_cancel);
	tcase_add_test(tc, expiry_drop);
	tcase_add_test(tc, expiries_due_order);
	tcase_add_test(tc, expiry_schedule_needs_pending_call);
	tcase_add_test(tc, warning_schedule_due_replace_drop);
	tcase_add_test(tc, warning_goes_with_its_call);
	tc = tc_new(s, "delete", setup);
	tcase_add_test(tc, delete_removes_conversation_and_events);
	tcase_add_test(tc, delete_removes_summaries);
	tcase_add_test(tc, delete_removes_tool_calls_and_expiries);
	tcase_add_test(tc, delete_resets_lease_usage_and_status);
	tcase_add_test(tc, delete_leaves_other_conversations);
	tcase_add_test(tc, delete_twice_is_notfound);

	tc = tc_new(s, "audit_off", setup);
	tcase_add_test(tc, audit_off_put_is_noop);

	tc = tc_new(s, "audit", setup_audit);
	tcase_add_test(tc, delete_removes_audit_rows);
	tcase_add_test(tc, audit_fields_and_turn_ref_order);
	tcase_add_test(tc, audit_same_turn_ref_replaces);
	tcase_add_test(tc, audit_put_rejects_invalid);
	tcase_add_test(tc, audit_gc_ttl_boundary);
	tcase_add_test(tc, audit_gc_one_or_all_conversations);

	tc = tc_new(s, "runs", setup);
	tcase_add_test(tc, runs_put_get_replace);
	tcase_add_test(tc, runs_list_newest_first_with_cursor);
	tcase_add_test(tc, runs_put_rejects_invalid);
	tcase_add_test(tc, delete_removes_runs);

	tc = tc_new(s, "transactions", setup);
	tcase_add_test(tc, txn_abort_discards_every_write);
	tcase_add_test(tc, txn_errors_leave_write_txn_usable);
	tcase_add_test(tc, txn_write_ops_need_write_txn);
	tcase_add_test(tc, txn_one_writer_at_a_time);
	tcase_add_test(tc, txn_clock_read_once);
	tcase_add_test(tc, read_results_valid_until_txn_ends);

	tc = tc_new(s, "content", setup);
	tcase_add_test(tc, content_must_be_one_msgpack_object);
	tcase_add_test(tc, content_any_object_round_trips);
	tcase_add_test(tc, strerror_distinct_per_code);
	tcase_add_test(tc, status_names_round_trip);

	tc = tc_new(s, "open", setup);
	tcase_add_test(tc, reopen_keeps_committed_data);
	tcase_add_test(tc, read_only_store_refuses_writes);
	tcase_add_test(tc, open_needs_existing_dir);
	tcase_add_test(tc, stat_and_reader_check);
	tcase_add_test(tc, map_full_without_growth_loses_nothing);
	tcase_add_test(tc, map_full_grows_for_retry);
	tcase_add_test(tc, freeing_txn_deletes_in_a_full_store);
	tcase_add_test(tc, ordinary_delete_in_a_full_store_frees_room_at_once);
	tcase_add_test(tc, a_map_without_address_space_to_grow_stays_usable);
	tcase_add_test(tc, max_map_size_alone_bounds_the_map);
	tcase_add_test(tc, reserve_grows_ahead);
	tc = tc_new(s, "edges", setup);
	tcase_add_test(tc, callback_return_never_poisons_write_txn);
	tcase_add_test(tc, poisoned_txn_fails_every_later_operation);
	tcase_add_test(tc, reader_slots_exhausted_is_eagain);
	tcase_add_test(tc, null_opts_open_with_defaults);
	tcase_add_test(tc, store_descriptors_are_cloexec);
	tcase_add_test(tc, longest_tool_call_id);

	tc = tc_new(s, "metadata", setup);
	tcase_add_test(tc, meta_round_trips_and_stamps_updated_at);
	tcase_add_test(tc, meta_survives_other_puts_and_goes_with_delete);
	tcase_add_test(tc, meta_out_of_bounds_is_inval_and_writes_nothing);
	tcase_add_test(tc, find_filters_by_metadata_status_time_and_match);
	tcase_add_test(tc, find_pages_with_after_limit_and_more);
	tcase_add_test(tc, find_bad_filter_is_inval);
	tcase_add_test(tc, backup_copies_what_was_committed);

	tc = tc_new(s, "audit_edges", setup_audit);
	tcase_add_test(tc, audit_callback_return_never_poisons_write_txn);
	tc = tc_new(s, "nodes", setup);
	tcase_add_test(tc, node_beat_creates_refreshes_and_lists);
	tcase_add_test(tc, claim_takes_a_new_generation_and_fences);
	tcase_add_test(tc, claim_of_a_live_lease_conflicts_and_writes_nothing);
	tcase_add_test(tc, expired_lease_moves_and_the_stale_owner_is_fenced);
	tcase_add_test(tc, beat_renews_held_leases);
	tcase_add_test(tc, release_and_leave_free_leases_at_once);
	tcase_add_test(tc, claimable_lists_free_and_expired_by_status);
	tcase_add_test(tc, delete_forgets_the_owner);
	tcase_add_test(tc, node_ops_reject_invalid_args);
	tcase_add_test(tc, nodes_and_leases_are_durable);
	tcase_add_test(tc, notify_validates_and_keeps_the_txn_usable);
	tcase_add_test(tc, expiries_claim_due_in_order_with_limit);
	tc = tc_new(s, "log_at", setup);
	tcase_add_test(tc, log_at_starts_after_its_base);
	tcase_add_test(tc, log_at_takes_a_summary_of_what_it_stands_in_for);
	tcase_add_test(tc, log_at_rules_and_delete);
	tc = tc_new(s, "runs_each", setup);
	tcase_add_test(tc, runs_each_walks_every_row_by_conversation);
	tc = tc_new(s, "convs_lock", setup);
	tcase_add_test(tc, convs_lock_changes_nothing_later_reads_see);
	tcase_add_test(tc, convs_lock_bad_args_are_inval_and_keep_the_txn);
	return s;
}
