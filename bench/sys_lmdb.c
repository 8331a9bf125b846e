/*
 * sys_lmdb.c: the raw LMDB baseline. Plain mdb_put/mdb_get loops writing the
 * same keys and the same value bytes agentd writes (store_lmdb.c's layout:
 * events (num, seq) -> [type, inserted_at, nil, content], and so on), with no
 * agentd code: no id lookup, no seq lookup, no validation, values packed
 * once per transaction. It is the floor agentd's overhead is measured from.
 */
#include "bench/bench.h"
#include "bench/bench_store.h"

#include <lmdb.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct raw {
	MDB_env *env;
	MDB_dbi events, summaries, tool_calls, conv_tool_calls;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	size_t status_off; /* where a tool call record's status byte sits */
	uint64_t flushed;  /* append_flushed's flushes: its commit's and mdb_env_sync's */
};

static void check(const char *what, int rc)
{
	if (rc) {
		char msg[160];
		snprintf(msg, sizeof msg, "lmdb %s: %s", what, mdb_strerror(rc));
		bench_die(msg, rc > 0 ? -rc : rc);
	}
}

static void be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

static uint64_t get_be64(const void *p)
{
	const unsigned char *b = p;
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = (v << 8) | b[i];
	return v;
}

static int64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static MDB_txn *begin(struct raw *r, unsigned flags)
{
	MDB_txn *t;
	check("txn_begin", mdb_txn_begin(r->env, NULL, flags, &t));
	return t;
}

static void *raw_open(const char *dir, int durable, size_t map_size)
{
	struct raw *r = calloc(1, sizeof *r);
	if (!r)
		bench_fail("out of memory");
	check("env_create", mdb_env_create(&r->env));
	check("set_maxdbs", mdb_env_set_maxdbs(r->env, 16));
	check("set_mapsize", mdb_env_set_mapsize(r->env, map_size));
	check("env_open", mdb_env_open(r->env, dir, MDB_NOTLS | (durable ? 0 : MDB_NOSYNC), 0600));
	MDB_txn *t = begin(r, 0);
	check("dbi_open", mdb_dbi_open(t, "events", MDB_CREATE, &r->events));
	check("dbi_open", mdb_dbi_open(t, "summaries", MDB_CREATE, &r->summaries));
	check("dbi_open", mdb_dbi_open(t, "tool_calls", MDB_CREATE, &r->tool_calls));
	check("dbi_open", mdb_dbi_open(t, "conv_tool_calls", MDB_CREATE, &r->conv_tool_calls));
	check("commit", mdb_txn_commit(t));
	msgpack_sbuffer_init(&r->buf);
	msgpack_packer_init(&r->pk, &r->buf, msgpack_sbuffer_write);
	return r;
}

static void raw_close(void *h)
{
	struct raw *r = h;
	mdb_env_close(r->env);
	msgpack_sbuffer_destroy(&r->buf);
	free(r);
}

/* Conversations are numbered as agentd numbers them; the baseline keeps no
 * conversation records. */
static void raw_convs_create(void *h, unsigned from, unsigned to)
{
	(void)h;
	(void)from;
	(void)to;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void raw_append(void *h, const struct bench_ev *ev, size_t n)
{
	struct raw *r = h;
	MDB_txn *t = begin(r, 0);
	msgpack_sbuffer_clear(&r->buf);
	msgpack_pack_array(&r->pk, 4);
	pack_str(&r->pk, bench_event_type);
	msgpack_pack_int64(&r->pk, ms_now());
	msgpack_pack_nil(&r->pk);
	msgpack_sbuffer_write(&r->buf, (const char *)bench_content, bench_content_len);
	MDB_val val = { r->buf.size, r->buf.data };
	for (size_t i = 0; i < n; i++) {
		unsigned char kb[16];
		be64(kb, ev[i].conv + 1);
		be64(kb + 8, ev[i].seq);
		MDB_val key = { 16, kb };
		check("put", mdb_put(t, r->events, &key, &val, 0));
	}
	check("commit", mdb_txn_commit(t));
}

static void raw_summary_put(void *h, unsigned conv, uint64_t to_seq)
{
	struct raw *r = h;
	unsigned char kb[16];
	msgpack_sbuffer_clear(&r->buf);
	msgpack_pack_array(&r->pk, 5);
	msgpack_pack_uint64(&r->pk, 1);
	msgpack_pack_uint64(&r->pk, to_seq);
	msgpack_pack_uint64(&r->pk, 1);
	msgpack_pack_int64(&r->pk, ms_now());
	msgpack_sbuffer_write(&r->buf, (const char *)bench_content, bench_content_len);
	be64(kb, conv + 1);
	be64(kb + 8, to_seq);
	MDB_val key = { 16, kb }, val = { r->buf.size, r->buf.data };
	MDB_txn *t = begin(r, 0);
	check("put", mdb_put(t, r->summaries, &key, &val, 0));
	check("commit", mdb_txn_commit(t));
}

/* The last key of prefix `num` in dbi: 0 and its key, or MDB_NOTFOUND. */
static int last_of(MDB_cursor *c, uint64_t num, MDB_val *k, MDB_val *v)
{
	unsigned char kb[16];
	be64(kb, num + 1);
	be64(kb + 8, 0);
	k->mv_size = 16;
	k->mv_data = kb;
	int rc = mdb_cursor_get(c, k, v, MDB_SET_RANGE);
	rc = rc == 0 ? mdb_cursor_get(c, k, v, MDB_PREV) : mdb_cursor_get(c, k, v, MDB_LAST);
	if (rc == 0 && (k->mv_size != 16 || get_be64(k->mv_data) != num))
		rc = MDB_NOTFOUND;
	return rc;
}

/* Walk events of `num` from seq `from` on, undecoded. */
static void walk(MDB_cursor *c, uint64_t num, uint64_t from, struct bench_sink *out)
{
	unsigned char kb[16];
	be64(kb, num);
	be64(kb + 8, from);
	MDB_val k = { 16, kb }, v;
	int rc;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (get_be64(k.mv_data) != num)
			break;
		bench_sink_raw(out, get_be64((char *)k.mv_data + 8), v.mv_data, v.mv_size);
	}
	if (rc && rc != MDB_NOTFOUND)
		check("cursor_get", rc);
}

static void raw_load_since(void *h, unsigned conv, struct bench_sink *out)
{
	struct raw *r = h;
	MDB_txn *t = begin(r, MDB_RDONLY);
	MDB_cursor *c;
	MDB_val k, v;
	uint64_t after = 0;
	check("cursor_open", mdb_cursor_open(t, r->summaries, &c));
	if (last_of(c, conv + 1, &k, &v) == 0) {
		after = get_be64((char *)k.mv_data + 8);
		out->sum += after + v.mv_size;
	}
	mdb_cursor_close(c);
	check("cursor_open", mdb_cursor_open(t, r->events, &c));
	walk(c, conv + 1, after + 1, out);
	mdb_cursor_close(c);
	mdb_txn_abort(t);
}

static void raw_newest(void *h, unsigned conv, size_t limit, struct bench_sink *out)
{
	struct raw *r = h;
	MDB_txn *t = begin(r, MDB_RDONLY);
	MDB_cursor *c;
	MDB_val k, v;
	check("cursor_open", mdb_cursor_open(t, r->events, &c));
	if (last_of(c, conv + 1, &k, &v) == 0) {
		uint64_t last = get_be64((char *)k.mv_data + 8);
		walk(c, conv + 1, last > limit ? last - limit + 1 : 1, out);
	}
	mdb_cursor_close(c);
	mdb_txn_abort(t);
}

/* A tool call record in agentd's layout: [conv id, num, name, executor,
 * status, inserted, resolved, deadline, attempts, args, prompt, result]. */
static void pack_call(struct raw *r, unsigned conv, int status, int64_t now)
{
	char cid[32];
	bench_conv_id(cid, conv);
	msgpack_sbuffer_clear(&r->buf);
	msgpack_pack_array(&r->pk, 12);
	pack_str(&r->pk, cid);
	msgpack_pack_uint64(&r->pk, conv + 1);
	pack_str(&r->pk, bench_call_name);
	msgpack_pack_uint8(&r->pk, 1);
	r->status_off = r->buf.size;
	msgpack_pack_uint8(&r->pk, (uint8_t)status);
	msgpack_pack_int64(&r->pk, now);
	msgpack_pack_int64(&r->pk, status ? now : 0);
	msgpack_pack_int64(&r->pk, 0);
	msgpack_pack_uint32(&r->pk, 0);
	msgpack_sbuffer_write(&r->buf, (const char *)bench_args, bench_args_len);
	msgpack_pack_nil(&r->pk);
	if (status)
		msgpack_sbuffer_write(&r->buf, (const char *)bench_result, bench_result_len);
	else
		msgpack_pack_nil(&r->pk);
}

static void put_call(struct raw *r, MDB_txn *t, unsigned conv, unsigned call, unsigned char status)
{
	char id[32];
	unsigned char kb[8 + 32];
	bench_call_id(id, call);
	size_t n = strlen(id);
	MDB_val key = { n, id }, val = { r->buf.size, r->buf.data };
	check("put", mdb_put(t, r->tool_calls, &key, &val, 0));
	be64(kb, conv + 1);
	memcpy(kb + 8, id, n);
	MDB_val ik = { 8 + n, kb }, iv = { 1, &status }; /* msgpack positive fixint */
	check("put", mdb_put(t, r->conv_tool_calls, &ik, &iv, 0));
}

static void raw_calls_create(void *h, unsigned conv, unsigned from, unsigned to)
{
	struct raw *r = h;
	MDB_txn *t = begin(r, 0);
	pack_call(r, conv, 0, ms_now());
	for (unsigned i = from; i < to; i++)
		put_call(r, t, conv, i, 0);
	check("commit", mdb_txn_commit(t));
}

static void raw_calls_resolve(void *h, unsigned conv, unsigned from, unsigned to)
{
	struct raw *r = h;
	MDB_txn *t = begin(r, 0);
	pack_call(r, conv, 1, ms_now());
	for (unsigned i = from; i < to; i++) {
		char id[32];
		bench_call_id(id, i);
		MDB_val key = { strlen(id), id }, v;
		check("get", mdb_get(t, r->tool_calls, &key, &v));
		if (v.mv_size <= r->status_off || ((unsigned char *)v.mv_data)[r->status_off] != 0)
			bench_fail("lmdb: tool call %s is not pending", id);
		put_call(r, t, conv, i, 1);
	}
	check("commit", mdb_txn_commit(t));
}

static void raw_sync(void *h)
{
	struct raw *r = h;
	check("env_sync", mdb_env_sync(r->env, 1));
}

/* MDB_NOMETASYNC for this commit only (one thread per handle here). */
static void raw_append_flushed(void *h, const struct bench_ev *ev, size_t n)
{
	struct raw *r = h;
	check("env_set_flags", mdb_env_set_flags(r->env, MDB_NOMETASYNC, 1));
	raw_append(h, ev, n);
	check("env_set_flags", mdb_env_set_flags(r->env, MDB_NOMETASYNC, 0));
	raw_sync(h);
	r->flushed += 2;
}

static uint64_t raw_flushes(void *h)
{
	return ((struct raw *)h)->flushed;
}

const struct bench_sys bench_sys_lmdb = {
	"raw LMDB", raw_open, raw_close, raw_convs_create, raw_append, raw_summary_put, raw_load_since,
	raw_newest, raw_calls_create, raw_calls_resolve, raw_sync, raw_append_flushed, raw_flushes,
};
