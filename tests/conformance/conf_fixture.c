/*
 * The conformance suite's fixture and the helpers every file of it uses
 * (conformance.h): a fresh store per test in a fresh mkdtemp() directory,
 * opened inside the test's fork, time from a fake clock; the content
 * builders; the transaction and event shorthands.
 */
#include <check.h>
#include <ftw.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/conformance/conformance.h"

char dir[PATH_MAX];
store *S;
int64_t NOW;
struct store_opts OPTS;

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
msgpack_sbuffer *pool[POOL_MAX];
size_t npool;
static msgpack_packer PK;

void pool_free(void)
{
	for (size_t i = 0; i < npool; i++) {
		msgpack_sbuffer_free(pool[i]);
		pool[i] = NULL;
	}
	npool = 0;
}

void open_store(void)
{
	ck_assert_int_eq(store_open(&S, dir, &OPTS), 0);
	ck_assert_ptr_nonnull(S);
}

void reopen_store(void)
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

void conf_setup(void)
{
	setup_common(0);
}

void conf_setup_audit(void)
{
	setup_common(1);
}

void conf_teardown(void)
{
	store_close(S);
	S = NULL;
	pool_free();
	rm_dir();
}

/* ---- content builders ------------------------------------------------ */

/* Start a new msgpack buffer; pack into PK, then take it with built(). */
msgpack_packer *B(void)
{
	ck_assert_uint_lt(npool, POOL_MAX);
	msgpack_sbuffer *sb = msgpack_sbuffer_new();
	ck_assert_ptr_nonnull(sb);
	pool[npool++] = sb;
	msgpack_packer_init(&PK, sb, msgpack_sbuffer_write);
	return &PK;
}

store_bytes built(void)
{
	msgpack_sbuffer *sb = pool[npool - 1];
	return (store_bytes){ sb->data, sb->size };
}

store_bytes mstr(const char *s)
{
	msgpack_pack_str_with_body(B(), s, strlen(s));
	return built();
}

store_bytes mint(int64_t v)
{
	msgpack_pack_int64(B(), v);
	return built();
}

store_bytes mmap1(const char *k, const char *v)
{
	msgpack_packer *pk = B();
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, k, strlen(k));
	msgpack_pack_str_with_body(pk, v, strlen(v));
	return built();
}

store_bytes mmap0(void)
{
	msgpack_pack_map(B(), 0);
	return built();
}

store_bytes raw(const void *p, size_t len)
{
	return (store_bytes){ p, len };
}

/* Byte strings that are not exactly one msgpack object. */
const unsigned char two_objs[] = { 0x01, 0x02 };            /* 1, 2 */
const unsigned char trunc_arr[] = { 0x92, 0x01 };           /* [1, <missing>] */
const unsigned char trunc_str[] = { 0xa5, 'a', 'b' };       /* str of 5, 2 given */
const unsigned char never_used[] = { 0xc1 };                /* reserved byte */
const unsigned char map_then_junk[] = { 0x80, 0x00 };       /* {} 0 */

const struct bad_blob bad_blobs[] = {
	{ "two objects", { two_objs, sizeof two_objs } },
	{ "truncated array", { trunc_arr, sizeof trunc_arr } },
	{ "truncated str", { trunc_str, sizeof trunc_str } },
	{ "reserved 0xc1", { never_used, sizeof never_used } },
	{ "map + trailing byte", { map_then_junk, sizeof map_then_junk } },
};

int bytes_eq(store_bytes b, const void *p, size_t len)
{
	return b.len == len && (len == 0 || memcmp(b.ptr, p, len) == 0);
}

int bytes_eq_s(store_bytes b, const char *s)
{
	return bytes_eq(b, s, strlen(s));
}

int bytes_eq_b(store_bytes a, store_bytes b)
{
	return bytes_eq(a, b.ptr, b.len);
}

/* ---- transactions ---------------------------------------------------- */

store_txn *wbegin(void)
{
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE, &t), 0);
	ck_assert_ptr_nonnull(t);
	return t;
}

store_txn *rbegin(void)
{
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_READ, &t), 0);
	ck_assert_ptr_nonnull(t);
	return t;
}

void commit(store_txn *t)
{
	ck_assert_int_eq(store_txn_commit(t), 0);
}

void mkconv(const char *id)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, id, mmap0()), 0);
	commit(t);
}

struct store_event_in ev(const char *type, store_bytes content, const char *event_id)
{
	return (struct store_event_in){ type, content, event_id };
}

/* Append n events "e1".."en" (content: their 1-based index), one txn. */
void append_n(const char *conv, size_t n, const char *type)
{
	store_txn *t = wbegin();
	for (size_t i = 0; i < n; i++) {
		struct store_event_in e = ev(type, mint((int64_t)i + 1), NULL);
		uint64_t seq = 0;
		ck_assert_int_eq(store_event_append(t, conv, &e, &seq, NULL), 0);
	}
	commit(t);
}

uint64_t latest(const char *conv)
{
	store_txn *t = rbegin();
	uint64_t seq = 99;
	ck_assert_int_eq(store_event_latest_seq(t, conv, &seq), 0);
	store_txn_abort(t);
	return seq;
}

/* ---- event collection ------------------------------------------------ */

struct evs E;

int collect_ev(void *arg, const struct store_event *e)
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

int stream(const char *conv, uint64_t after, uint64_t before, size_t limit, const char *type)
{
	memset(&E, 0, sizeof E);
	struct store_range r = { after, before, limit, type };
	store_txn *t = rbegin();
	int rc = store_events_stream(t, conv, &r, collect_ev, &E);
	store_txn_abort(t);
	return rc;
}

void expect_seqs_at(int line, const uint64_t *want, size_t n)
{
	ck_assert_msg(E.n == n, "line %d: got %zu events, want %zu", line, E.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(E.e[i].seq == want[i], "line %d: event %zu has seq %llu, want %llu", line, i,
			      (unsigned long long)E.e[i].seq, (unsigned long long)want[i]);
}

/* Expect seqs lo..hi (inclusive) in order. */
void expect_run(uint64_t lo, uint64_t hi)
{
	ck_assert_uint_eq(E.n, hi - lo + 1);
	for (size_t i = 0; i < E.n; i++)
		ck_assert_uint_eq(E.e[i].seq, lo + i);
}
