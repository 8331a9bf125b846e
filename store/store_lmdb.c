/*
 * store_lmdb.c: the store (store.h) over LMDB.
 *
 * This file is kept whole because every query here is written against one private
 * layer: the layout below, the key and record packers, the transaction's
 * cursor pool and record buffer, the conversation-number cache and the
 * poisoning of a write transaction, about a hundred static functions. Split,
 * they would become an internal header of this one backend, as LMDB's own
 * mdb.c keeps its B-tree in one file. It reads in sections (---- name ----)
 * in store.h's order: helpers; open, map growth, flush and backup;
 * transactions; conversations and their metadata index; events; summaries;
 * tool calls, expiries and warnings; audit; nodes and leases; runs; the
 * backend's table last. No function here checks its arguments: store.c did
 * (store/backend.h, "Who checks what").
 *
 * Layout (docs/architecture.md, "The store"): named sub-databases, fixed-width big-endian
 * integer keys where order matters, msgpack values. Records are msgpack arrays
 * whose variable-size objects (content, args, results) come last, so a reader
 * hands out pointers into the map without decoding them.
 *
 *   meta            name                         -> uint
 *   conv_ids        conversation id              -> uint conv number
 *   convs           num                          -> [id, status, created, updated, lease,
 *                                                    in_tok, out_tok, cost, turns, settings, fsm|nil]
 *                                                   (a record of 10 has no turns: 0)
 *   events          num, seq                     -> [type, inserted_at, event_id|nil, content]
 *   event_ids       num, event_id                -> uint seq
 *   summaries       num, to_seq                  -> [from, to, version, inserted_at, content]
 *   tool_calls      tool call id                 -> [conv id, num, name, executor, status,
 *                                                    inserted, resolved, deadline, attempts,
 *                                                    args, prompt|nil, result|nil]
 *   conv_tool_calls num, tool call id            -> uint status
 *   expiries        deadline, tool call id       -> conv id
 *   warnings        at, tool call id             -> conv id
 *   warning_at      tool call id                 -> uint at (to find its warnings row)
 *   schedules       schedule id                  -> [conv id, due, cron|nil, text]
 *   schedule_due    due, schedule id             -> conv id
 *   model_calls     num, turn_ref                -> [model, in, out, cost, latency,
 *                                                    summary_version, inserted_at, rendered]
 *   runs            num, run id                  -> [status, attempt, from, to, first, last,
 *                                                    model, in, out, cost, started, ended]
 *   nodes           node id                      -> [started_at, beat_at, expires_at]
 *   log_starts      num                          -> uint first_seq (only a log that begins
 *                                                    after seq 1: store_conv_create_at)
 *   owners          conversation id              -> [node id, expires_at] (its lease; the
 *                                                    generation is the convs record's)
 *
 * nodes and owners came after the first stores were made: an open that may
 * write creates them; a read-only open of a store without them sees them
 * empty.
 */
/* This file defines the backend's functions (store/backend.h) under
 * lmdb_store_*; store/store.c dispatches to them. */
#define STORE_BACKEND_NAME(n) lmdb_store_##n
#include "store/backend_names.h"
#include "store/store.h"
#include "store/backend.h"
#include "common/mp.h"
#include "store/flushrec.h"

#include <dirent.h>
#include <endian.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <lmdb.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define SCHEMA_VERSION 1
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* The conversations this process used lately: id -> number and last seq,
 * so an append needs no conv_ids lookup and no search for the last seq, and
 * a read no conv_ids lookup. It holds one committed state, the one after
 * txn cache_base: a write txn carries it on only when no other process
 * committed in between (cache_begin), a read txn uses it only when its
 * snapshot is that state (cache_usable). An entry's generation is the
 * store's when it is current, so one increment empties the whole cache. */
#define CONV_CACHE 256 /* slots, a power of two */
#define CONV_WAYS 4    /* slots an id may occupy, from its hash on */

struct conv_ent {
	uint64_t num;
	uint64_t last;     /* the conversation's last seq, when has_last */
	uint64_t used;     /* the store's tick at the last use: the oldest is evicted */
	uint64_t gen;      /* current when == store.cache_gen; 0: empty */
	unsigned char len; /* of id */
	unsigned char has_last;
	char id[STORE_ID_MAX];
};

struct store {
	const struct store_vt *vt; /* store_lmdb_vt: first, for store/store.c */
	MDB_env *env;
	MDB_dbi meta, conv_ids, convs, events, event_ids, summaries, tool_calls,
		conv_tool_calls, expiries, model_calls, runs;
	MDB_dbi warnings, warning_at; /* expiry warnings by time; each call's time */
	MDB_dbi schedules, schedule_due; /* wakeups by id; by due time */
	MDB_dbi nodes, owners;
	int has_nodes; /* nodes and owners exist (a read-only open of an older store: not) */
	MDB_dbi conv_meta, meta_index; /* metadata by conv number; its index "key\0value\0id" -> number */
	MDB_dbi log_starts; /* where a log begins, for one that begins after seq 1 */
	struct store_opts opts;
	size_t map_size;
	int grow_pending; /* a txn hit MDB_MAP_FULL: grow before the next begins */
	int unmapped;     /* a remap failed and LMDB left no map: every txn fails (-ENOMEM) */
	int ntxn;         /* open transactions: the map may only be resized at 0 */
	int writing;
	struct conv_ent *cache; /* CONV_CACHE slots, allocated by the first write txn */
	uint64_t cache_gen;     /* from 1; never wraps */
	int cache_ok;           /* cache_base is set */
	size_t cache_base;      /* the txn id whose committed state the cache holds */
	uint64_t tick;
	unsigned psize;     /* LMDB's page size */
	int fd;             /* the data file, for store_flush (from any thread) */
	struct flushrec *fr; /* the flushes shared with the other processes (sync full, not read-only) */
	uint64_t flushes, flushes_spared; /* store_flush's (store_stat), atomics: any thread */
	uint64_t file_seen; /* the data file is at least this long */
	/* One ended transaction object of each kind, kept for the next begin:
	 * no allocation per transaction, and a read one keeps its cursors for
	 * mdb_cursor_renew. */
	struct store_txn *spare_r, *spare_w;
};

/* Cursors a transaction keeps for the operations that run often. */
enum { CUR_EVENTS, CUR_SUMMARIES, NCUR };

struct store_txn {
	struct store_txn_hdr h; /* first, for store/store.c: its table, mode and poison */
	store *s;
	MDB_txn *t;
	int lazy;    /* STORE_WRITE_LAZY: commit without flushing the meta page */
	int freeing; /* STORE_WRITE_FREEING: may map the delete reserve */
	int deleted; /* a conversation was deleted: its pages settle at the commit */
	int dirty;   /* a write succeeded: the commit takes a txn id */
	int64_t now;
	/* cur[i] is bound to t when bound[i]; busy[i] while an operation holds
	 * it (a callback may call back into the store: it gets a cursor of its
	 * own). A write txn's cursors die with it (LMDB frees them); a read
	 * txn's survive it, for mdb_cursor_renew. */
	MDB_cursor *cur[NCUR];
	unsigned char bound[NCUR], busy[NCUR];
	/* The head [type, now, nil] of the last event record packed without an
	 * event_id: the next event of that type reuses it (now is the txn's). */
	char head_type[33];
	unsigned char head[48];
	size_t head_len; /* 0: none */
	msgpack_sbuffer buf;
	msgpack_packer pk;
};

/* ---- errors ---------------------------------------------------------- */

/* Map an LMDB return code into the store's codes; nothing above sees MDB_*. */
static int map_err(int rc)
{
	switch (rc) {
	case MDB_SUCCESS: return 0;
	case MDB_NOTFOUND: return STORE_E_NOTFOUND;
	case MDB_KEYEXIST: return STORE_E_CONFLICT;
	case MDB_MAP_FULL: return STORE_E_FULL;
	case MDB_CORRUPTED: case MDB_PAGE_NOTFOUND: case MDB_INVALID:
	case MDB_VERSION_MISMATCH: case MDB_INCOMPATIBLE: case MDB_BAD_VALSIZE:
		return STORE_E_CORRUPT;
	case MDB_READERS_FULL: return -EAGAIN;
	/* Another process grew the map while a txn of ours pins the old
	 * mapping (store_txn_begin cannot adopt it then): retryable once that
	 * txn ends, not an I/O failure. */
	case MDB_MAP_RESIZED: return -EAGAIN;
	case MDB_TXN_FULL: return STORE_E_FULL;
	case MDB_BAD_TXN: case MDB_BAD_RSLOT: case MDB_BAD_DBI: return -EINVAL;
	}
	if (rc > 0)
		return rc == ENOSPC ? STORE_E_FULL : -rc;
	return -EIO;
}

/* Record an error on a write txn: fatal ones poison it. */
static int fail(store_txn *x, int err)
{
	if (err == STORE_E_FULL)
		x->s->grow_pending = 1;
	return store_txn_poison(&x->h, err);
}

/* ---- small helpers --------------------------------------------------- */

static void put_be64(unsigned char *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

static uint64_t get_be64(const unsigned char *p)
{
	return mp_be64(p);
}

int64_t store_now(store *s)
{
	return s->opts.clock ? s->opts.clock(s->opts.clock_arg) : clock_ms();
}

int64_t store_txn_now(store_txn *x)
{
	return x->now;
}

static void pack_raw(store_txn *x, store_bytes b)
{
	if (b.len == 0)
		msgpack_pack_nil(&x->pk);
	else
		msgpack_sbuffer_write(&x->buf, b.ptr, b.len);
}

static void pack_strn(store_txn *x, const void *p, size_t n)
{
	msgpack_pack_str(&x->pk, n);
	msgpack_pack_str_body(&x->pk, p, n);
}

static void pack_str(store_txn *x, const char *s)
{
	pack_strn(x, s, strlen(s));
}

/* Start packing a new record in the txn's scratch buffer. */
static msgpack_packer *rec(store_txn *x)
{
	msgpack_sbuffer_clear(&x->buf);
	return &x->pk;
}

static int put(store_txn *x, MDB_dbi dbi, const void *k, size_t klen, unsigned flags)
{
	MDB_val key = { klen, (void *)k };
	MDB_val val = { x->buf.size, x->buf.data };
	int rc = mdb_put(x->t, dbi, &key, &val, flags);
	if (rc)
		return fail(x, map_err(rc));
	x->dirty = 1;
	return 0;
}

/* A named database added after the first stores were made, missing from an
 * older one opened read-only (nothing may create it then): reads of it find
 * nothing. Writable opens create it. */
#define DBI_ABSENT ((MDB_dbi)-1)

static int get(store_txn *x, MDB_dbi dbi, const void *k, size_t klen, MDB_val *val)
{
	MDB_val key = { klen, (void *)k };
	int rc = dbi == DBI_ABSENT ? MDB_NOTFOUND : mdb_get(x->t, dbi, &key, val);
	return rc ? fail(x, map_err(rc)) : 0;
}

static int del(store_txn *x, MDB_dbi dbi, const void *k, size_t klen)
{
	MDB_val key = { klen, (void *)k };
	int rc = mdb_del(x->t, dbi, &key, NULL);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc)
		return fail(x, map_err(rc));
	x->dirty = 1;
	return 0;
}

/* Optional nil-or-object: returns its bytes (len 0 for nil). */
static int mp_opt(struct mp *m, store_bytes *out)
{
	if (mp_nil(m) == 0) {
		out->ptr = NULL;
		out->len = 0;
		return 0;
	}
	return mp_skip(m, &out->ptr, &out->len);
}

static int mp_bytes(struct mp *m, store_bytes *out)
{
	const char *p;
	if (mp_str(m, &p, &out->len))
		return -1;
	out->ptr = p;
	return 0;
}

static int mp_opt_str(struct mp *m, store_bytes *out)
{
	if (mp_nil(m) == 0) {
		out->ptr = NULL;
		out->len = 0;
		return 0;
	}
	return mp_bytes(m, out);
}

static int val_uint(const MDB_val *v, uint64_t *out)
{
	struct mp m;
	mp_init(&m, v->mv_data, v->mv_size);
	return mp_uint(&m, out) == 0 && m.p == m.end ? 0 : STORE_E_CORRUPT;
}

static int put_uint(store_txn *x, MDB_dbi dbi, const void *k, size_t klen, uint64_t v)
{
	msgpack_pack_uint64(rec(x), v);
	return put(x, dbi, k, klen, 0);
}

/* Key of (conv number, u64). */
static void key2(unsigned char k[16], uint64_t num, uint64_t v)
{
	put_be64(k, num);
	put_be64(k + 8, v);
}

/* Key of (prefix u64, string). Returns its length. */
static size_t key_str(unsigned char *k, uint64_t num, const char *s, size_t len)
{
	put_be64(k, num);
	memcpy(k + 8, s, len);
	return 8 + len;
}

/* The txn's cursor of kind i (CUR_*), bound to this txn; while an
 * operation holds it, a new one (a callback calling back into the store
 * must not move its caller's cursor). Hand it back with cursor_give. */
static int cursor_take(store_txn *x, int i, MDB_cursor **c)
{
	MDB_dbi dbi = i == CUR_EVENTS ? x->s->events : x->s->summaries;
	int rc;
	if (x->busy[i]) {
		rc = mdb_cursor_open(x->t, dbi, c);
		return rc ? fail(x, map_err(rc)) : 0;
	}
	if (!x->bound[i]) {
		/* A read txn's cursor outlives it and is renewed; a write
		 * txn's was freed with its txn. */
		rc = x->cur[i] ? mdb_cursor_renew(x->t, x->cur[i]) : mdb_cursor_open(x->t, dbi, &x->cur[i]);
		if (rc)
			return fail(x, map_err(rc));
		x->bound[i] = 1;
	}
	x->busy[i] = 1;
	*c = x->cur[i];
	return 0;
}

static void cursor_give(store_txn *x, int i, MDB_cursor *c)
{
	if (c == x->cur[i])
		x->busy[i] = 0;
	else
		mdb_cursor_close(c);
}

/* Iterate keys starting with the 8-byte prefix `num`, from key `from`
 * (from_len 8 means the whole prefix), with cursor c; from_len 0: every key
 * of the table. The callback gets key and value. */
typedef int (*kv_fn)(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v);

static int scan(store_txn *x, MDB_cursor *c, const unsigned char *from, size_t from_len, kv_fn fn,
		void *arg)
{
	MDB_val k = { from_len, (void *)from }, v;
	int r = 0, rc;
	for (rc = mdb_cursor_get(c, &k, &v, from_len ? MDB_SET_RANGE : MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (from_len && (k.mv_size < 8 || memcmp(k.mv_data, from, 8) != 0))
			break;
		if ((r = fn(x, arg, &k, &v)) != 0)
			break;
	}
	if (r)
		return r;
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

static int scan_prefix(store_txn *x, MDB_dbi dbi, const unsigned char *from, size_t from_len,
		       kv_fn fn, void *arg)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, dbi, &c);
	if (rc)
		return fail(x, map_err(rc));
	int r = scan(x, c, from, from_len, fn, arg);
	mdb_cursor_close(c);
	return r;
}

static int conv_num(store_txn *x, const char *id, uint64_t *num);

/* Every row of sub-database dbi under the conversation's number, in key
 * order. Errors: STORE_E_NOTFOUND (conversation), the callback's. */
static int conv_scan(store_txn *x, const char *conv, MDB_dbi dbi, kv_fn fn, void *arg)
{
	uint64_t num;
	int err = conv_num(x, conv, &num);
	if (err)
		return err;
	unsigned char k[8];
	put_be64(k, num);
	return scan_prefix(x, dbi, k, 8, fn, arg);
}

/* Delete every key with the 8-byte prefix `num`. Re-seeks after each
 * delete rather than trusting a cursor's position after mdb_cursor_del. */
static int del_prefix(store_txn *x, MDB_dbi dbi, uint64_t num,
		      int (*each)(store_txn *, const MDB_val *k, const MDB_val *v))
{
	unsigned char from[8];
	put_be64(from, num);
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, dbi, &c);
	if (rc)
		return fail(x, map_err(rc));
	for (;;) {
		MDB_val k = { 8, from }, v;
		rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
		if (rc || k.mv_size < 8 || memcmp(k.mv_data, from, 8) != 0)
			break;
		if (each && (rc = each(x, &k, &v)) != 0)
			break;
		if ((rc = mdb_cursor_del(c, 0)) != 0) {
			rc = map_err(rc);
			break;
		}
		x->dirty = 1;
	}
	mdb_cursor_close(c);
	if (rc == MDB_NOTFOUND || rc == 0)
		return 0;
	return fail(x, rc > 0 ? map_err(rc) : rc);
}

/* ---- open, close, sync, stat ----------------------------------------- */

/* Open every sub-database (and the schema mark) in a transaction of the given
 * kind. Returns an LMDB code; MDB_NOTFOUND when something is missing. */
static int open_dbis_in(store *s, int write)
{
	MDB_txn *t;
	int rc = mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, &t);
	if (rc)
		return rc;
	struct { const char *name; MDB_dbi *dbi; int later; } dbs[] = {
		{ "meta", &s->meta, 0 }, { "conv_ids", &s->conv_ids, 0 }, { "convs", &s->convs, 0 },
		{ "events", &s->events, 0 }, { "event_ids", &s->event_ids, 0 },
		{ "summaries", &s->summaries, 0 }, { "tool_calls", &s->tool_calls, 0 },
		{ "conv_tool_calls", &s->conv_tool_calls, 0 }, { "expiries", &s->expiries, 0 },
		{ "model_calls", &s->model_calls, 0 },
		{ "conv_meta", &s->conv_meta, 1 }, { "meta_index", &s->meta_index, 1 },
		{ "warnings", &s->warnings, 1 }, { "warning_at", &s->warning_at, 1 },
		{ "runs", &s->runs, 1 },
		{ "schedules", &s->schedules, 1 }, { "schedule_due", &s->schedule_due, 1 },
		{ "log_starts", &s->log_starts, 1 },
	};
	for (size_t i = 0; i < sizeof dbs / sizeof dbs[0]; i++) {
		rc = mdb_dbi_open(t, dbs[i].name, write ? MDB_CREATE : 0, dbs[i].dbi);
		if (rc == MDB_NOTFOUND && dbs[i].later && s->opts.read_only) {
			*dbs[i].dbi = DBI_ABSENT;
			continue;
		}
		if (rc) {
			mdb_txn_abort(t);
			return rc;
		}
	}
	MDB_val k = { 6, "schema" }, v;
	rc = mdb_get(t, s->meta, &k, &v);
	if (rc == MDB_NOTFOUND && write) {
		unsigned char b[2] = { SCHEMA_VERSION }; /* positive fixint */
		v.mv_size = 1;
		v.mv_data = b;
		rc = mdb_put(t, s->meta, &k, &v, 0);
	} else if (rc == 0) {
		uint64_t ver;
		if (val_uint(&v, &ver) || ver != SCHEMA_VERSION)
			rc = MDB_INCOMPATIBLE;
	}
	if (rc) {
		mdb_txn_abort(t);
		return rc;
	}
	return mdb_txn_commit(t); /* a committed read txn's handles stay open */
}

/* Try a read transaction first: on an existing store, opening must not wait
 * behind another process's write transaction (a worker's revival would stall
 * behind any writer). Only a new store needs the write lock. */
static int open_dbis(store *s)
{
	int rc = open_dbis_in(s, 0);
	if (rc == MDB_NOTFOUND && !s->opts.read_only)
		rc = open_dbis_in(s, 1);
	return rc == MDB_NOTFOUND ? STORE_E_CORRUPT : map_err(rc);
}

/* nodes and owners, created when absent unless read-only (then a store
 * without them has none: every node list is empty). */
static int open_node_dbis_in(store *s, int write)
{
	MDB_txn *t;
	int rc = mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, &t);
	if (rc)
		return rc;
	if ((rc = mdb_dbi_open(t, "nodes", write ? MDB_CREATE : 0, &s->nodes)) ||
	    (rc = mdb_dbi_open(t, "owners", write ? MDB_CREATE : 0, &s->owners))) {
		mdb_txn_abort(t);
		return rc;
	}
	return mdb_txn_commit(t);
}

static int open_node_dbis(store *s)
{
	int rc = open_node_dbis_in(s, 0);
	if (rc == MDB_NOTFOUND && !s->opts.read_only)
		rc = open_node_dbis_in(s, 1);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc == 0)
		s->has_nodes = 1;
	return map_err(rc);
}

/* The file fd is, opened once more, read-only. */
static int open_again(int fd)
{
	char path[64];
	struct stat a, b;
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	int ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro < 0)
		return -1;
	if (fstat(ro, &a) || fstat(fd, &b) || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
		close(ro);
		return -1;
	}
	return ro;
}

/* Where LMDB's map of the data file begins (LMDB does not say): the map
 * of this process that holds a value a read txn returns, which points into
 * the map. NULL when it cannot be told. */
static void *map_find(store *s, size_t len)
{
	MDB_txn *t;
	MDB_val k = { 6, "schema" }, v;
	struct stat st;
	void *base = NULL;
	if (fstat(s->fd, &st) || mdb_txn_begin(s->env, NULL, MDB_RDONLY, &t))
		return NULL;
	FILE *f = mdb_get(t, s->meta, &k, &v) == 0 ? fopen("/proc/self/maps", "re") : NULL;
	uintptr_t p = f ? (uintptr_t)v.mv_data : 0;
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, hi, off, ino;
		if (sscanf(line, "%lx-%lx %*s %lx %*s %lu", &lo, &hi, &off, &ino) != 4 || p < lo || p >= hi)
			continue;
		if (ino == (unsigned long)st.st_ino && off == 0 && hi - lo == len)
			base = (void *)lo;
		break;
	}
	if (f)
		fclose(f);
	mdb_txn_abort(t);
	return base;
}

/* Put a read-only descriptor under LMDB's map, in place. LMDB maps the data
 * file through its read-write descriptor, so the map counts as writable
 * shared memory although LMDB never writes through it (no MDB_WRITEMAP).
 * Before the kernel writes back a dirty page of a file, it write-protects
 * that page in every writable shared map of the file: it walks the page
 * tables of each process that maps it, the supervisor and every worker,
 * for every page of every flush. A map made through a read-only
 * descriptor is not writable shared memory, and the walk passes it by.
 * Same file, same pages, same address: LMDB sees no difference. Called
 * after every (re)map, with no txn open; should the new map fail, the old
 * one is put back, and if that fails too every txn fails, as after a
 * failed resize. */
static void map_unshared(store *s)
{
	MDB_envinfo info;
	void *base;
	if (s->opts.read_only || s->fd < 0 || mdb_env_info(s->env, &info) ||
	    !(base = map_find(s, info.me_mapsize)))
		return;
	/* The map holds the file, not the descriptor: it is closed at once,
	 * and the process keeps no more descriptors than LMDB's. */
	int ro = open_again(s->fd);
	if (ro < 0)
		return;
	if (mmap(base, info.me_mapsize, PROT_READ, MAP_SHARED | MAP_FIXED, ro, 0) == MAP_FAILED &&
	    mmap(base, info.me_mapsize, PROT_READ, MAP_SHARED | MAP_FIXED, s->fd, 0) == MAP_FAILED)
		s->unmapped = 1;
	close(ro);
}

int store_open(store **out, const char *dir, const struct store_opts *opts)
{
	store *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->vt = &store_lmdb_vt;
	if (opts)
		s->opts = *opts;
	if (!s->opts.map_size) /* the default, or all that max_map_size allows */
		s->opts.map_size = s->opts.max_map_size && s->opts.max_map_size < 256 * MiB ? s->opts.max_map_size
											     : 256 * MiB;
	if (!s->opts.max_map_size)
		s->opts.max_map_size = 64 * GiB;
	if (s->opts.max_map_size < s->opts.map_size)
		s->opts.max_map_size = s->opts.map_size;
	if (!s->opts.max_readers)
		s->opts.max_readers = 1024;
	s->map_size = s->opts.map_size;

	unsigned flags = MDB_NOTLS;
	if (s->opts.sync == STORE_SYNC_NONE)
		flags |= MDB_NOSYNC;
	if (s->opts.read_only)
		flags |= MDB_RDONLY;
	int rc = mdb_env_create(&s->env);
	if (rc)
		goto fail;
	if ((rc = mdb_env_set_maxdbs(s->env, 32)) || (rc = mdb_env_set_maxreaders(s->env, s->opts.max_readers)) ||
	    (rc = mdb_env_set_mapsize(s->env, s->map_size)))
		goto fail;
	if ((rc = mdb_env_open(s->env, dir, flags, 0600)) != 0)
		goto fail;
	/* LMDB leaves the data file inheritable: a worker's model or tool
	 * child must not get a descriptor onto the store. */
	int fd;
	s->fd = -1;
	if (mdb_env_get_fd(s->env, &fd) == 0) {
		fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
		s->fd = fd;
	}
	if (s->opts.sync == STORE_SYNC_FULL && !s->opts.read_only)
		s->fr = flushrec_open(dir, s->fd);
	if (s->opts.flush_alone)
		flushrec_alone(s->fr);
	MDB_stat ms;
	s->psize = mdb_env_stat(s->env, &ms) == 0 ? ms.ms_psize : 4096;
	/* Another process may have grown the map beyond our size: adopt it. */
	MDB_envinfo info;
	if (mdb_env_info(s->env, &info) == 0 && info.me_mapsize > s->map_size)
		s->map_size = info.me_mapsize;
	int err = open_dbis(s);
	if (!err)
		err = open_node_dbis(s);
	if (!err)
		map_unshared(s);
	if (err) {
		flushrec_close(s->fr);
		mdb_env_close(s->env);
		free(s);
		return err;
	}
	*out = s;
	return 0;
fail:
	if (s->env)
		mdb_env_close(s->env);
	free(s);
	return map_err(rc);
}

static void txn_destroy(store_txn *x);

void store_close(store *s)
{
	txn_destroy(s->spare_r);
	txn_destroy(s->spare_w);
	flushrec_close(s->fr);
	mdb_env_close(s->env);
	free(s->cache);
	free(s);
}

int lmdb_store_sync(store *s)
{
	if (s->opts.read_only)
		return 0;
	uint64_t last = store_last_id(s);
	int rc = mdb_env_sync(s->env, 1);
	if (!rc)
		flushrec_end(s->fr, 0, last);
	return map_err(rc);
}

static uint64_t last_id(void *s)
{
	return store_last_id(s);
}

int store_flush(store *s)
{
	if (s->opts.read_only || s->opts.sync == STORE_SYNC_NONE)
		return 0;
	/* Not mdb_env_sync: it reads the handle's flags, which a lazy commit
	 * of another thread toggles; the descriptor is all a flush needs. A
	 * flush under way in any process that covers the last id does
	 * instead (flushrec.h). */
	int e = flushrec_flush(s->fr, s->fd, store_last_id(s), last_id, s);
	if (e >= 0)
		__atomic_add_fetch(e ? &s->flushes_spared : &s->flushes, 1, __ATOMIC_RELAXED);
	return e < 0 ? e : 0;
}

/* A directory holding nothing: 1; -errno when it cannot be read. */
static int dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	struct dirent *e;
	int empty = 1;
	while (empty && (e = readdir(d)) != NULL)
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	return empty;
}

static int fsync_path(const char *path, int flags)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | flags);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

int store_backup(store *s, const char *dir)
{
	int rc = dir_empty(dir);
	if (rc <= 0)
		return rc ? rc : -EEXIST;
	/* LMDB's compacting copy: one read transaction of its own (writers go
	 * on), only the pages in use, free pages left out. */
	if ((rc = mdb_env_copy2(s->env, dir, MDB_CP_COMPACT)) != 0)
		return map_err(rc);
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof path, "%s/data.mdb", dir) >= sizeof path)
		return -ENAMETOOLONG;
	if ((rc = fsync_path(path, 0)) != 0)
		return rc;
	return fsync_path(dir, O_DIRECTORY);
}

uint64_t store_txn_id(store_txn *x)
{
	return (uint64_t)mdb_txn_id(x->t);
}

uint64_t store_last_id(store *s)
{
	MDB_envinfo info;
	return mdb_env_info(s->env, &info) == 0 ? (uint64_t)info.me_last_txnid : 0;
}

int store_reader_check(store *s, int *cleared)
{
	int dead = 0;
	int rc = mdb_reader_check(s->env, &dead);
	if (cleared)
		*cleared = dead;
	return map_err(rc);
}

/* mdb_reader_list prints a header line, then one line per reader slot in
 * use, each starting with the (right-aligned) pid; or a single
 * "(no active readers)" line. */
static int count_reader_line(const char *msg, void *ctx)
{
	while (*msg == ' ')
		msg++;
	if (*msg >= '0' && *msg <= '9')
		++*(unsigned *)ctx;
	return 0;
}

size_t store_map_size(store *s)
{
	return s->map_size;
}

static int disk_full(store *s);

int lmdb_store_stat(store *s, struct store_stat *st)
{
	MDB_envinfo info;
	MDB_stat ms;
	int rc = mdb_env_info(s->env, &info);
	if (!rc)
		rc = mdb_env_stat(s->env, &ms);
	if (rc)
		return map_err(rc);
	memset(st, 0, sizeof *st);
	st->size_bytes = (uint64_t)(info.me_last_pgno + 1) * ms.ms_psize;
	st->map_size = info.me_mapsize;
	st->max_map_size = s->opts.max_map_size;
	st->map_full = s->grow_pending && s->map_size < s->opts.max_map_size && !disk_full(s);
	/* Not me_numreaders: that is the most slots ever used (LMDB never
	 * lowers it), while store.h promises the slots in use now. */
	st->readers = 0;
	mdb_reader_list(s->env, count_reader_line, &st->readers);
	st->max_readers = info.me_maxreaders;
	st->sync = s->opts.sync;
	st->flushes = __atomic_load_n(&s->flushes, __ATOMIC_RELAXED);
	st->flushes_spared = __atomic_load_n(&s->flushes_spared, __ATOMIC_RELAXED);
	int fd;
	struct stat sb;
	if (mdb_env_get_fd(s->env, &fd) == 0 && fstat(fd, &sb) == 0)
		st->file_bytes = (uint64_t)sb.st_size;
	return 0;
}

/* ---- transactions ---------------------------------------------------- */

/* Map a larger size. LMDB unmaps the old map before it maps the new one,
 * and if that fails (no address space: RLIMIT_AS, valgrind) it leaves the
 * handle with no map at all, which it cannot restore. So first see that
 * the address space is there (a reservation, no memory); should LMDB fail
 * anyway, every transaction of this handle fails from then on, rather than
 * touching pages that are gone. */
static int map_resize(store *s, size_t want)
{
	void *p = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	munmap(p, want);
	if (mdb_env_set_mapsize(s->env, want) == 0) {
		s->map_size = want;
		map_unshared(s);
		return 0;
	}
	s->unmapped = 1;
	return -1;
}

/* Grow the map after a txn ran out of room, or before a write txn once the
 * data passes three quarters of it: every process grows its own map ahead of
 * need, since a process whose map is smaller than another's fails with
 * MDB_MAP_FULL where that one would not, and only a transaction larger than
 * the last quarter meets a full map. Only possible with no txn of this
 * process open; a process that finds the data past its map adopts the
 * larger size (MDB_MAP_RESIZED, store_txn_begin). */
static void maybe_grow(store *s, int write)
{
	if (s->ntxn > 0)
		return;
	MDB_envinfo info;
	if (!s->grow_pending && write && s->map_size < s->opts.max_map_size && mdb_env_info(s->env, &info) == 0 &&
	    ((uint64_t)info.me_last_pgno + 1) * s->psize > s->map_size / 4 * 3)
		s->grow_pending = 1;
	if (!s->grow_pending)
		return;
	s->grow_pending = 0;
	/* A full disk also fails a commit with "full": a larger map would
	 * not help it. */
	if (s->map_size >= s->opts.max_map_size || disk_full(s))
		return;
	size_t want = s->map_size * 2;
	if (want > s->opts.max_map_size || want < s->map_size)
		want = s->opts.max_map_size;
	map_resize(s, want);
}

/* The delete reserve (store.h, STORE_WRITE_FREEING). */
static size_t freeing_reserve(const store *s)
{
	size_t r = s->opts.max_map_size / 16;
	return r < 256 * 1024 ? 256 * 1024 : r > GiB ? GiB : r;
}

/* Before a freeing txn: map the reserve past the data's end or
 * max_map_size, whichever is further. */
static void freeing_map(store *s)
{
	MDB_envinfo info;
	if (s->ntxn > 0 || s->opts.read_only || mdb_env_info(s->env, &info))
		return;
	size_t used = ((size_t)info.me_last_pgno + 1) * s->psize;
	size_t want = (used > s->opts.max_map_size ? used : s->opts.max_map_size) + freeing_reserve(s);
	if (want > s->map_size)
		map_resize(s, want);
}

/* After a freeing txn, or on adopting another process's larger map: never
 * keep a map past max_map_size beyond the data's end (LMDB rounds a smaller
 * size up to it), so no ordinary write spends the reserve. */
static void freeing_unmap(store *s)
{
	MDB_envinfo info;
	if (s->ntxn > 0 || s->map_size <= s->opts.max_map_size)
		return;
	if (map_resize(s, s->opts.max_map_size) == 0 && mdb_env_info(s->env, &info) == 0)
		s->map_size = info.me_mapsize;
}

/* After a freeing txn committed, with the reserve still mapped. LMDB
 * reuses the pages a transaction freed only from the second transaction
 * after it (a reader may still see them through the other meta page), so
 * without another commit the next write would find no room in a map full
 * to its last page, and, refused, never make that commit. This one rewrites
 * the schema key with its own value: the room the delete freed then serves
 * the very next write. Its few pages come from the reserve. */
static void freeing_settle(store *s)
{
	MDB_txn *t;
	unsigned char b[1] = { SCHEMA_VERSION };
	MDB_val k = { 6, "schema" }, v = { 1, b };
	if (mdb_txn_begin(s->env, NULL, 0, &t))
		return;
	if (mdb_put(t, s->meta, &k, &v, 0))
		mdb_txn_abort(t);
	else
		mdb_txn_commit(t);
	s->cache_gen++; /* its txn id is not the one the conversation cache holds */
	s->cache_ok = 0;
}

int store_reserve(store *s, size_t bytes)
{
	MDB_envinfo info;
	if (s->ntxn > 0)
		return -EBUSY;
	if (s->opts.read_only || mdb_env_info(s->env, &info))
		return 0;
	uint64_t used = ((uint64_t)info.me_last_pgno + 1) * s->psize, need = used + 2 * (uint64_t)bytes;
	size_t want = s->map_size;
	while (want < need && want < s->opts.max_map_size)
		want = want > s->opts.max_map_size / 2 ? s->opts.max_map_size : want * 2;
	if (want > s->map_size)
		map_resize(s, want);
	return s->map_size >= need ? 0 : STORE_E_FULL;
}

/* Keep the data file written ahead of LMDB's last page. On ext4 (and most
 * journalled filesystems) the fdatasync of a commit that lengthens the file
 * must also commit the new size to the journal, which doubled its cost here
 * (docs/architecture.md, "The data file written ahead"); a commit whose
 * pages land on blocks already written flushes only them. LMDB appends pages
 * at the end, so without this most commits lengthen the file. Called in a
 * write txn, under LMDB's writer lock: no other process writes pages now,
 * none past the last committed page, and this txn's own pages are written
 * over the zeros at its commit, whose flush takes them to disk. Best effort:
 * a failure (a full disk) is left to LMDB's own writes to report. */
enum { AHEAD_LOW = 256 * 1024, AHEAD_CHUNK = 2 * 1024 * 1024 };

static void write_ahead(store *s)
{
	MDB_envinfo info;
	int fd;
	struct stat sb;
	if (mdb_env_info(s->env, &info) || mdb_env_get_fd(s->env, &fd))
		return;
	uint64_t used = ((uint64_t)info.me_last_pgno + 1) * s->psize;
	if (s->file_seen >= used + AHEAD_LOW)
		return;
	if (fstat(fd, &sb))
		return;
	s->file_seen = (uint64_t)sb.st_size;
	if (s->file_seen >= used + AHEAD_LOW)
		return;
	uint64_t to = used + AHEAD_CHUNK;
	if (to > s->map_size)
		to = s->map_size;
	static const char zeros[64 * 1024];
	uint64_t at = s->file_seen > used ? s->file_seen : used;
	while (at < to) {
		size_t n = to - at < sizeof zeros ? (size_t)(to - at) : sizeof zeros;
		ssize_t w = pwrite(fd, zeros, n, (off_t)at);
		if (w <= 0)
			break;
		at += (uint64_t)w;
	}
	if (at > s->file_seen)
		s->file_seen = at;
}

/* A transaction object: the spare one of its kind, or a new one. */
static store_txn *txn_obj(store *s, int write)
{
	store_txn **spare = write ? &s->spare_w : &s->spare_r;
	store_txn *x = *spare;
	if (x) {
		*spare = NULL;
		return x;
	}
	if ((x = calloc(1, sizeof *x)) != NULL) {
		x->h.vt = &store_lmdb_vt;
		msgpack_sbuffer_init(&x->buf);
		msgpack_packer_init(&x->pk, &x->buf, msgpack_sbuffer_write);
	}
	return x;
}

/* Free a transaction object whose LMDB txn has ended; NULL is accepted. */
static void txn_destroy(store_txn *x)
{
	if (!x)
		return;
	for (int i = 0; i < NCUR; i++)
		if (x->cur[i])
			mdb_cursor_close(x->cur[i]); /* only a read txn's are left */
	msgpack_sbuffer_destroy(&x->buf);
	free(x);
}

/* A write txn begins: keep the conversation cache only if the last state it
 * holds is the one this txn starts from, that is if no other process
 * committed since (a write txn's id is the last committed one + 1). */
static int cache_begin(store_txn *x)
{
	store *s = x->s;
	size_t id = mdb_txn_id(x->t);
	if (!s->cache) {
		if (!(s->cache = calloc(CONV_CACHE, sizeof *s->cache)))
			return -ENOMEM;
		s->cache_gen = 1;
	}
	if (!s->cache_ok || s->cache_base != id - 1)
		s->cache_gen++;
	s->cache_ok = 0; /* until the commit says what the cache holds */
	return 0;
}

/* A write txn ended: committed (the cache holds its state) or not (the
 * cache may hold changes that never were: forget everything). A commit that
 * wrote nothing takes no txn id, and the next writer, maybe another
 * process, gets the same one. */
static void cache_end(store_txn *x, size_t id, int committed)
{
	store *s = x->s;
	if (committed) {
		s->cache_base = x->dirty ? id : id - 1;
		s->cache_ok = 1;
	} else {
		s->cache_gen++;
	}
}

int store_txn_begin(store *s, int mode, store_txn **out)
{
	int freeing = !!(mode & STORE_WRITE_FREEING);
	mode &= ~STORE_WRITE_FREEING;
	int lazy = mode == STORE_WRITE_LAZY;
	if (lazy)
		mode = STORE_WRITE;
	if (mode == STORE_WRITE && s->opts.read_only)
		return STORE_E_INVAL;
	if (mode == STORE_WRITE && s->writing)
		return -EBUSY;
	maybe_grow(s, mode == STORE_WRITE);
	if (freeing)
		freeing_map(s);
	if (s->unmapped)
		return -ENOMEM;
	store_txn *x = txn_obj(s, mode == STORE_WRITE);
	if (!x)
		return -ENOMEM;
	int rc;
	if (mode == STORE_WRITE)
		flushrec_want(s->fr, 1);
	for (int tries = 0;; tries++) {
		rc = mdb_txn_begin(s->env, NULL, mode == STORE_WRITE ? 0 : MDB_RDONLY, &x->t);
		if (rc != MDB_MAP_RESIZED || tries > 2 || s->ntxn > 0)
			break;
		/* Another process grew the map: adopt its size and retry. */
		if (mdb_env_set_mapsize(s->env, 0) == 0) {
			map_unshared(s);
			MDB_envinfo info;
			if (mdb_env_info(s->env, &info) == 0)
				s->map_size = info.me_mapsize;
			if (!freeing)
				freeing_unmap(s); /* the size a freeing txn left in the meta page */
		}
	}
	if (rc == 0 && mode == STORE_WRITE) /* before the lock is let go: no gap */
		flushrec_begin(s->fr, mdb_txn_id(x->t) - 1); /* its commit's page flush covers that */
	if (mode == STORE_WRITE)
		flushrec_want(s->fr, 0);
	if (rc) {
		if (mode == STORE_WRITE)
			flushrec_end(s->fr, 0, 0);
		txn_destroy(x);
		if (freeing)
			freeing_unmap(s);
		return map_err(rc);
	}
	x->s = s;
	x->h.write = mode == STORE_WRITE;
	x->lazy = lazy;
	x->freeing = freeing;
	x->h.err = 0;
	x->dirty = 0;
	x->deleted = 0;
	x->head_len = 0;
	x->now = store_now(s);
	if (x->h.write && cache_begin(x) != 0) {
		flushrec_end(s->fr, mdb_txn_id(x->t) - 1, 0);
		mdb_txn_abort(x->t);
		txn_destroy(x);
		return -ENOMEM;
	}
	if (x->h.write)
		write_ahead(s);
	s->ntxn++;
	if (x->h.write)
		s->writing = 1;
	*out = x;
	return 0;
}

/* After the LMDB txn ended: keep the object as its kind's spare, or free it. */
static void txn_free(store_txn *x)
{
	store *s = x->s;
	s->ntxn--;
	if (x->h.write)
		s->writing = 0;
	for (int i = 0; i < NCUR; i++) {
		if (x->h.write)
			x->cur[i] = NULL; /* freed by LMDB with the txn */
		x->bound[i] = x->busy[i] = 0;
	}
	store_txn **spare = x->h.write ? &s->spare_w : &s->spare_r;
	/* A spare keeps its buffer, unless a large record grew it. */
	if (*spare || x->buf.alloc > 64 * 1024) {
		txn_destroy(x);
		return;
	}
	msgpack_sbuffer_clear(&x->buf);
	*spare = x;
}

/* LMDB reports a write that ran out of disk as a short write (-EIO) or
 * ENOSPC. When the filesystem is (nearly) full, say so: it is store_full to
 * the caller, not a mysterious I/O error. */
static int disk_full(store *s)
{
	int fd;
	struct statvfs sv;
	if (mdb_env_get_fd(s->env, &fd) || fstatvfs(fd, &sv))
		return 0;
	return (uint64_t)sv.f_bavail * sv.f_frsize < 4 * MiB;
}

int store_txn_commit(store_txn *x)
{
	int err = x->h.err;
	size_t id = mdb_txn_id(x->t);
	if (err) {
		mdb_txn_abort(x->t);
	} else {
		/* MDB_NOMETASYNC, not MDB_NOSYNC: the pages are flushed before
		 * the meta page that points at them is written, so an OS crash
		 * can undo this commit but never leave a meta page pointing at
		 * pages that were not written (which MDB_NOSYNC can). It is a
		 * flag of this process's handle; one thread commits at a time
		 * here, so setting it around one commit affects that one only. */
		int toggle = x->lazy && x->s->opts.sync == STORE_SYNC_FULL;
		if (toggle)
			mdb_env_set_flags(x->s->env, MDB_NOMETASYNC, 1);
		int rc = mdb_txn_commit(x->t);
		if (toggle)
			mdb_env_set_flags(x->s->env, MDB_NOMETASYNC, 0);
		err = map_err(rc);
		if (err == -EIO)
			err = disk_full(x->s) ? STORE_E_FULL : err;
		else if (rc == MDB_MAP_FULL)
			x->s->grow_pending = 1; /* not for ENOSPC: a larger map would not help a full disk */
	}
	store *s = x->s;
	if (x->h.write) {
		cache_end(x, id, err == 0);
		/* A commit that wrote flushed its pages after every earlier meta
		 * page was written, and a full one its own meta page too. */
		int wrote = !err && x->dirty && store_last_id(s) >= id;
		flushrec_end(s->fr, id - 1, !wrote ? 0 : x->lazy ? id - 1 : id);
	}
	int freeing = x->freeing;
	/* A delete that found room without the reserve frees pages the next
	 * write cannot use either (freeing_settle): in a map that cannot grow,
	 * settle them too, with the reserve mapped for the settling commit. */
	int settle = freeing || (x->deleted && s->map_size >= s->opts.max_map_size);
	txn_free(x);
	if (settle && !err && s->ntxn == 0) {
		if (!freeing)
			freeing_map(s);
		freeing_settle(s);
		freeing_unmap(s);
	} else if (freeing) {
		freeing_unmap(s);
	}
	maybe_grow(s, 0);
	return err;
}

void store_txn_abort(store_txn *x)
{
	store *s = x->s;
	if (x->h.write) {
		cache_end(x, 0, 0);
		flushrec_end(s->fr, mdb_txn_id(x->t) - 1, 0);
	}
	mdb_txn_abort(x->t);
	int freeing = x->freeing;
	txn_free(x);
	if (freeing)
		freeing_unmap(s);
	maybe_grow(s, 0);
}

/* ---- conversations --------------------------------------------------- */

static uint32_t id_hash(const char *id, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)id[i]) * 16777619u;
	return h;
}

static struct conv_ent *cache_find(store *s, const char *id, size_t len)
{
	uint32_t h = id_hash(id, len);
	for (uint32_t w = 0; w < CONV_WAYS; w++) {
		struct conv_ent *e = &s->cache[(h + w) & (CONV_CACHE - 1)];
		if (e->gen == s->cache_gen && e->len == len && memcmp(e->id, id, len) == 0) {
			e->used = ++s->tick;
			return e;
		}
	}
	return NULL;
}

/* Remember a valid id's number, its last seq not known yet. */
static struct conv_ent *cache_add(store *s, const char *id, size_t len, uint64_t num)
{
	uint32_t h = id_hash(id, len);
	struct conv_ent *v = NULL;
	for (uint32_t w = 0; w < CONV_WAYS; w++) {
		struct conv_ent *e = &s->cache[(h + w) & (CONV_CACHE - 1)];
		if (e->gen != s->cache_gen) {
			v = e;
			break;
		}
		if (!v || e->used < v->used)
			v = e;
	}
	v->gen = s->cache_gen;
	v->num = num;
	v->has_last = 0;
	v->used = ++s->tick;
	v->len = (unsigned char)len;
	memcpy(v->id, id, len);
	return v;
}

/* May txn use the cache? A write txn keeps it. A read txn only when the
 * cache holds exactly its snapshot: no write txn of ours is open (it would
 * hold uncommitted changes), and the snapshot is the committed state the
 * cache was left at (or, the cache holding none, it takes the snapshot's). */
static int cache_usable(store_txn *x)
{
	store *s = x->s;
	if (x->h.write)
		return 1;
	if (!s->cache || s->writing)
		return 0;
	size_t id = mdb_txn_id(x->t); /* the snapshot's: the last committed txn */
	if (!s->cache_ok) {
		s->cache_gen++;
		s->cache_base = id;
		s->cache_ok = 1;
	}
	return s->cache_base == id;
}

/* A conversation's number, from its id, through the cache when txn may use
 * it: *ent (may be NULL) then gets the conversation's entry. */
static int conv_find(store_txn *x, const char *id, uint64_t *num, struct conv_ent **ent)
{
	struct conv_ent *e = NULL;
	size_t len = strlen(id); /* a valid id (store.c checked it) */
	int cached = cache_usable(x);
	if (ent)
		*ent = NULL;
	if (cached && (e = cache_find(x->s, id, len)) != NULL) {
		*num = e->num;
		if (ent)
			*ent = e;
		return 0;
	}
	MDB_val v;
	int err = get(x, x->s->conv_ids, id, len, &v);
	if (err)
		return err;
	if (val_uint(&v, num))
		return fail(x, STORE_E_CORRUPT);
	if (cached) {
		e = cache_add(x->s, id, len, *num);
		if (ent)
			*ent = e;
	}
	return 0;
}

static int conv_num(store_txn *x, const char *id, uint64_t *num)
{
	return conv_find(x, id, num, NULL);
}

static int conv_decode(const MDB_val *v, struct store_conv *c)
{
	struct mp m;
	uint32_t n;
	uint64_t st;
	mp_init(&m, v->mv_data, v->mv_size);
	memset(c, 0, sizeof *c);
	if (mp_array(&m, &n) || (n != 10 && n != 11) || mp_bytes(&m, &c->id) || mp_uint(&m, &st) ||
	    st > STORE_STATUS_MAX || mp_int(&m, &c->created_at) || mp_int(&m, &c->updated_at) ||
	    mp_uint(&m, &c->lease) || mp_uint(&m, &c->usage.input_tokens) || mp_uint(&m, &c->usage.output_tokens) ||
	    mp_double(&m, &c->usage.cost) || (n == 11 && mp_uint(&m, &c->turns)) ||
	    mp_skip(&m, &c->settings.ptr, &c->settings.len) ||
	    mp_opt(&m, &c->fsm_state) || m.p != m.end)
		return STORE_E_CORRUPT;
	c->status = (int)st;
	return 0;
}

/* c->metadata from its own table (len 0: none). */
static int conv_meta_load(store_txn *x, uint64_t num, struct store_conv *c)
{
	unsigned char k[8];
	MDB_val v;
	put_be64(k, num);
	int err = get(x, x->s->conv_meta, k, 8, &v);
	if (err == STORE_E_NOTFOUND)
		return 0;
	if (err)
		return err;
	c->metadata.ptr = v.mv_data;
	c->metadata.len = v.mv_size;
	return 0;
}

static int conv_load(store_txn *x, const char *id, uint64_t *num, struct store_conv *c)
{
	int err = conv_num(x, id, num);
	if (err)
		return err;
	unsigned char k[8];
	MDB_val v;
	put_be64(k, *num);
	if ((err = get(x, x->s->convs, k, 8, &v)) != 0)
		return err == STORE_E_NOTFOUND ? fail(x, STORE_E_CORRUPT) : err;
	if (conv_decode(&v, c))
		return fail(x, STORE_E_CORRUPT);
	return conv_meta_load(x, *num, c);
}

static int conv_store(store_txn *x, uint64_t num, const struct store_conv *c)
{
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 11);
	pack_strn(x, c->id.ptr, c->id.len);
	msgpack_pack_uint8(pk, (uint8_t)c->status);
	msgpack_pack_int64(pk, c->created_at);
	msgpack_pack_int64(pk, c->updated_at);
	msgpack_pack_uint64(pk, c->lease);
	msgpack_pack_uint64(pk, c->usage.input_tokens);
	msgpack_pack_uint64(pk, c->usage.output_tokens);
	msgpack_pack_double(pk, c->usage.cost);
	msgpack_pack_uint64(pk, c->turns);
	pack_raw(x, c->settings);
	pack_raw(x, c->fsm_state);
	unsigned char k[8];
	put_be64(k, num);
	return put(x, x->s->convs, k, 8, 0);
}

static int conv_insert(store_txn *x, const char *id, store_bytes settings, uint64_t *num_out)
{
	MDB_val v;
	uint64_t num = 1;
	int err = get(x, x->s->meta, "next_conv", 9, &v);
	if (err && err != STORE_E_NOTFOUND)
		return err;
	if (!err && val_uint(&v, &num))
		return fail(x, STORE_E_CORRUPT);
	/* A number in use (next_conv lost or behind: a damaged store) is never
	 * taken over: the next one after the greatest in use is. */
	unsigned char k[8];
	put_be64(k, num);
	if ((err = get(x, x->s->convs, k, 8, &v)) != STORE_E_NOTFOUND) {
		if (err)
			return err;
		MDB_cursor *c;
		MDB_val ck, cv;
		int rc = mdb_cursor_open(x->t, x->s->convs, &c);
		if (rc)
			return fail(x, map_err(rc));
		rc = mdb_cursor_get(c, &ck, &cv, MDB_LAST);
		mdb_cursor_close(c);
		if (rc || ck.mv_size != 8)
			return fail(x, rc ? map_err(rc) : STORE_E_CORRUPT);
		num = get_be64(ck.mv_data) + 1;
	}
	if ((err = put_uint(x, x->s->meta, "next_conv", 9, num + 1)) ||
	    (err = put_uint(x, x->s->conv_ids, id, strlen(id), num)))
		return err;
	cache_add(x->s, id, strlen(id), num);
	struct store_conv c = {
		.id = { id, strlen(id) }, .settings = settings, .status = STORE_IDLE,
		.created_at = x->now, .updated_at = x->now,
	};
	*num_out = num;
	return conv_store(x, num, &c);
}

int store_conv_create(store_txn *x, const char *id, store_bytes settings)
{
	uint64_t num;
	int err = conv_num(x, id, &num);
	if (err == 0)
		return STORE_E_CONFLICT;
	if (err != STORE_E_NOTFOUND)
		return err;
	return conv_insert(x, id, settings, &num);
}

int store_conv_get(store_txn *x, const char *id, struct store_conv *out)
{
	uint64_t num;
	return conv_load(x, id, &num, out);
}

/* ---- metadata: a row per conversation, and one index key per pair ---- */

struct meta_ix {
	store_txn *x;
	const char *id;
	uint64_t num;
	int add; /* put the keys, else delete them */
};

static int meta_ix_one(void *arg, const char *k, size_t kl, const char *v, size_t vl)
{
	struct meta_ix *m = arg;
	size_t il = strlen(m->id);
	unsigned char key[STORE_META_KEY_MAX + STORE_META_VAL_MAX + 2 + STORE_ID_MAX];
	memcpy(key, k, kl);
	key[kl] = 0;
	memcpy(key + kl + 1, v, vl);
	key[kl + 1 + vl] = 0;
	memcpy(key + kl + vl + 2, m->id, il);
	size_t len = kl + vl + 2 + il;
	if (!m->add)
		return del(m->x, m->x->s->meta_index, key, len);
	unsigned char nb[8];
	put_be64(nb, m->num);
	MDB_val mk = { len, key }, mv = { 8, nb };
	int rc = mdb_put(m->x->t, m->x->s->meta_index, &mk, &mv, 0);
	if (rc)
		return fail(m->x, map_err(rc));
	m->x->dirty = 1;
	return 0;
}

/* Replace the conversation's metadata (valid: checked by the caller) and
 * its index keys. Both the old and the new bytes are copied first: either
 * may point into a page the writes below reuse. */
static int conv_meta_set(store_txn *x, uint64_t num, const char *id, store_bytes m)
{
	unsigned char k[8];
	MDB_val v;
	put_be64(k, num);
	int err = get(x, x->s->conv_meta, k, 8, &v);
	if (err && err != STORE_E_NOTFOUND)
		return err;
	size_t ol = err ? 0 : v.mv_size;
	unsigned char *buf = malloc(ol + m.len + 1);
	if (!buf)
		return fail(x, -ENOMEM);
	if (ol)
		memcpy(buf, v.mv_data, ol);
	if (m.len)
		memcpy(buf + ol, m.ptr, m.len);
	struct meta_ix ix = { x, id, num, 0 };
	if ((err = store_meta_each((store_bytes){ buf, ol }, meta_ix_one, &ix)) < 0 && !x->h.err)
		err = fail(x, STORE_E_CORRUPT);
	ix.add = 1;
	uint32_t n = 0;
	if (!err && m.len) { /* an empty map is stored as none */
		struct mp mp;
		mp_init(&mp, buf + ol, m.len);
		mp_map(&mp, &n);
	}
	if (!err && n)
		err = store_meta_each((store_bytes){ buf + ol, m.len }, meta_ix_one, &ix);
	if (!err && n) {
		MDB_val mk = { 8, k }, mv = { m.len, buf + ol };
		int rc = mdb_put(x->t, x->s->conv_meta, &mk, &mv, 0);
		err = rc ? fail(x, map_err(rc)) : 0;
		x->dirty = 1;
	} else if (!err && ol) {
		err = del(x, x->s->conv_meta, k, 8);
	}
	free(buf);
	return err;
}

int store_conv_put(store_txn *x, const char *id, const struct store_conv_patch *p)
{
	uint64_t num;
	struct store_conv c;
	int err = conv_load(x, id, &num, &c);
	if (err == STORE_E_NOTFOUND) {
		store_bytes s = { empty_map, 1 };
		if ((err = conv_insert(x, id, s, &num)) != 0)
			return err;
		err = conv_load(x, id, &num, &c);
	}
	if (err)
		return err;
	if (p->set & STORE_SET_SETTINGS)
		c.settings = p->settings;
	if (p->set & STORE_SET_STATUS)
		c.status = p->status;
	if (p->set & STORE_SET_FSM)
		c.fsm_state = p->fsm_state;
	c.updated_at = x->now;
	if ((err = conv_store(x, num, &c)) != 0)
		return err;
	return p->set & STORE_SET_METADATA ? conv_meta_set(x, num, id, p->metadata) : 0;
}

int store_conv_list(store_txn *x, int status, const char *after, size_t limit,
		    store_conv_fn fn, void *arg, int *more)
{
	if (more)
		*more = 0;
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->conv_ids, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	size_t n = 0;
	int r = 0, from_fn = 0, damaged = 0;
	if (after) {
		k.mv_size = strlen(after);
		k.mv_data = (void *)after;
		rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
		if (rc == 0 && k.mv_size == strlen(after) && memcmp(k.mv_data, after, k.mv_size) == 0)
			rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
	} else {
		rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
	}
	for (; rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		uint64_t num;
		unsigned char kb[8];
		MDB_val cv;
		struct store_conv conv;
		/* A record that cannot be read is passed over: the others are
		 * listed, and STORE_E_CORRUPT says so at the end. */
		if (val_uint(&v, &num)) {
			damaged = 1;
			continue;
		}
		put_be64(kb, num);
		if ((r = get(x, x->s->convs, kb, 8, &cv)) != 0 || (r = conv_decode(&cv, &conv)) != 0) {
			if (r != STORE_E_NOTFOUND && r != STORE_E_CORRUPT)
				break;
			r = 0;
			damaged = 1;
			continue;
		}
		if (status != -1 && conv.status != status)
			continue;
		if ((r = conv_meta_load(x, num, &conv)) != 0)
			break;
		if (limit && n == limit) {
			if (more)
				*more = 1;
			break;
		}
		n++;
		if ((r = fn(arg, &conv)) != 0) {
			from_fn = 1;
			break;
		}
	}
	mdb_cursor_close(c);
	/* Only a record we could not decode poisons the txn; the callback's
	 * return is the caller's value, handed back as is (store.h), even when
	 * it equals STORE_E_CORRUPT. */
	if (r)
		return r == STORE_E_CORRUPT && !from_fn ? fail(x, r) : r;
	if (rc != 0 && rc != MDB_NOTFOUND)
		return fail(x, map_err(rc));
	return damaged ? STORE_E_CORRUPT : 0; /* read only: the txn goes on */
}

/* One listed conversation of store_conv_find: decode, filter, hand out.
 * Returns 0 to go on, 1 when the limit stopped it, or an error (*from_fn
 * set when it is the caller's). */
struct find {
	store_txn *x;
	const struct store_conv_filter *f;
	size_t limit, n;
	store_conv_fn fn;
	void *arg;
	int *more;
	int damaged, from_fn;
};

static int find_one(struct find *fd, uint64_t num)
{
	store_txn *x = fd->x;
	unsigned char kb[8];
	MDB_val cv;
	struct store_conv conv;
	int r;
	put_be64(kb, num);
	if ((r = get(x, x->s->convs, kb, 8, &cv)) != 0 || (r = conv_decode(&cv, &conv)) != 0) {
		if (r != STORE_E_NOTFOUND && r != STORE_E_CORRUPT)
			return r;
		fd->damaged = 1; /* passed over; STORE_E_CORRUPT at the end */
		return 0;
	}
	if ((r = conv_meta_load(x, num, &conv)) != 0)
		return r;
	if ((r = store_filter_match(fd->f, &conv)) <= 0) {
		if (r < 0)
			fd->damaged = 1;
		return 0;
	}
	if (fd->f && fd->f->match && (r = fd->f->match(fd->f->match_arg, &conv)) <= 0) {
		fd->from_fn = r < 0;
		return r;
	}
	if (fd->limit && fd->n == fd->limit) {
		if (fd->more)
			*fd->more = 1;
		return 1;
	}
	fd->n++;
	if ((r = fd->fn(fd->arg, &conv)) != 0)
		fd->from_fn = 1;
	return r;
}

int store_conv_find(store_txn *x, const struct store_conv_filter *f, const char *after, size_t limit,
		    store_conv_fn fn, void *arg, int *more)
{
	if (more)
		*more = 0;
	struct find fd = { x, f, limit, 0, fn, arg, more, 0, 0 };
	int by_meta = f && f->nmeta;
	MDB_cursor *c;
	if (by_meta && x->s->meta_index == DBI_ABSENT)
		return 0; /* an older store, opened read-only: no metadata yet */
	int rc = mdb_cursor_open(x->t, by_meta ? x->s->meta_index : x->s->conv_ids, &c);
	if (rc)
		return fail(x, map_err(rc));
	/* The walk: conv_ids (id -> number), or the first pair's index range
	 * ("key\0value\0" id -> number), from just past `after`. */
	unsigned char from[STORE_META_KEY_MAX + STORE_META_VAL_MAX + 2 + STORE_ID_MAX];
	size_t plen = 0, alen = after ? strlen(after) : 0;
	if (by_meta) {
		const struct store_kv *kv = &f->meta[0];
		memcpy(from, kv->key.ptr, kv->key.len);
		from[kv->key.len] = 0;
		if (kv->value.len)
			memcpy(from + kv->key.len + 1, kv->value.ptr, kv->value.len);
		from[kv->key.len + 1 + kv->value.len] = 0;
		plen = kv->key.len + kv->value.len + 2;
	}
	if (alen)
		memcpy(from + plen, after, alen);
	MDB_val k = { plen + alen, from }, v;
	if (plen + alen == 0) {
		rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
	} else {
		rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
		if (rc == 0 && alen && k.mv_size == plen + alen && memcmp(k.mv_data, from, plen + alen) == 0)
			rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
	}
	int r = 0;
	for (; rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (plen && (k.mv_size <= plen || memcmp(k.mv_data, from, plen) != 0))
			break;
		uint64_t num;
		if (by_meta ? v.mv_size != 8 : val_uint(&v, &num)) {
			fd.damaged = 1;
			continue;
		}
		if (by_meta)
			num = get_be64(v.mv_data);
		if ((r = find_one(&fd, num)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (r == 1 && !fd.from_fn)
		r = 0;
	if (r)
		return fd.from_fn ? r : fail(x, r);
	if (rc != 0 && rc != MDB_NOTFOUND)
		return fail(x, map_err(rc));
	return fd.damaged ? STORE_E_CORRUPT : 0;
}

int store_conv_ids(store_txn *x, store_conv_id_fn fn, void *arg)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->conv_ids, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	int r = 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && r == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
		r = fn(arg, k.mv_data, k.mv_size);
	mdb_cursor_close(c);
	if (r)
		return r;
	if (rc != MDB_NOTFOUND)
		return fail(x, map_err(rc));
	return 0;
}

/* Deleting a tool call also removes its expiry and its row. */
/* Remove the call's warning (both its rows); 0 also when it has none. */
static int warning_del(store_txn *x, const char *id, size_t len)
{
	MDB_val v;
	uint64_t at;
	unsigned char wk[8 + STORE_ID_MAX];
	if (len > STORE_ID_MAX)
		return STORE_E_INVAL;
	int err = get(x, x->s->warning_at, id, len, &v);
	if (err == STORE_E_NOTFOUND)
		return 0;
	if (err)
		return err;
	if (val_uint(&v, &at))
		return fail(x, STORE_E_CORRUPT);
	size_t wl = key_str(wk, at, id, len);
	if ((err = del(x, x->s->warnings, wk, wl)) != 0)
		return err;
	return del(x, x->s->warning_at, id, len);
}

static int del_conv_tool_call(store_txn *x, const MDB_val *k, const MDB_val *v)
{
	(void)v;
	const char *id = (const char *)k->mv_data + 8;
	size_t len = k->mv_size - 8;
	MDB_val tv;
	int err = get(x, x->s->tool_calls, id, len, &tv);
	if (err == STORE_E_NOTFOUND)
		return 0;
	if (err)
		return err;
	struct mp m;
	uint32_t n;
	store_bytes s;
	uint64_t u;
	int64_t deadline, i;
	mp_init(&m, tv.mv_data, tv.mv_size);
	if (mp_array(&m, &n) || n != 12 || mp_bytes(&m, &s) || mp_uint(&m, &u) || mp_bytes(&m, &s) ||
	    mp_uint(&m, &u) || mp_uint(&m, &u) || mp_int(&m, &i) || mp_int(&m, &i) || mp_int(&m, &deadline))
		return fail(x, STORE_E_CORRUPT);
	if (deadline > 0) {
		unsigned char ek[8 + STORE_ID_MAX];
		if (len > STORE_ID_MAX)
			return fail(x, STORE_E_CORRUPT);
		size_t el = key_str(ek, (uint64_t)deadline, id, len);
		if ((err = del(x, x->s->expiries, ek, el)) != 0)
			return err;
	}
	if ((err = warning_del(x, id, len)) != 0)
		return err;
	return del(x, x->s->tool_calls, id, len);
}

static int del_log_start(store_txn *x, uint64_t num)
{
	unsigned char k[8];
	put_be64(k, num);
	int err = del(x, x->s->log_starts, k, 8);
	return err == STORE_E_NOTFOUND ? 0 : err;
}

static int schedules_del_conv(store_txn *x, const char *conv);

int store_conv_delete(store_txn *x, const char *id)
{
	uint64_t num;
	struct conv_ent *e;
	int err = conv_find(x, id, &num, &e);
	if (err)
		return err;
	e->gen = 0; /* forgotten before anything is deleted */
	unsigned char k[8];
	put_be64(k, num);
	if ((err = conv_meta_set(x, num, id, (store_bytes){ NULL, 0 })) ||
	    (err = del_prefix(x, x->s->conv_tool_calls, num, del_conv_tool_call)) ||
	    (err = del_prefix(x, x->s->events, num, NULL)) ||
	    (err = del_prefix(x, x->s->event_ids, num, NULL)) ||
	    (err = del_prefix(x, x->s->summaries, num, NULL)) ||
	    (err = del_prefix(x, x->s->model_calls, num, NULL)) ||
	    (err = del_prefix(x, x->s->runs, num, NULL)) ||
	    (err = del_log_start(x, num)) || (err = schedules_del_conv(x, id)) ||
	    (x->s->has_nodes && (err = del(x, x->s->owners, id, strlen(id)))) ||
	    (err = del(x, x->s->convs, k, 8)) || (err = del(x, x->s->conv_ids, id, strlen(id))))
		return err;
	x->deleted = 1;
	return 0;
}

int store_lease_next(store_txn *x, const char *id, uint64_t *gen)
{
	uint64_t num, next = 1;
	struct store_conv c;
	MDB_val v;
	int err = conv_load(x, id, &num, &c);
	if (err)
		return err;
	/* Generations come from one store-wide counter, so a worker left over
	 * from a deleted conversation can never hold the lease of a new one
	 * created with the same id. */
	err = get(x, x->s->meta, "next_lease", 10, &v);
	if (err && err != STORE_E_NOTFOUND)
		return err;
	if (!err && val_uint(&v, &next))
		return fail(x, STORE_E_CORRUPT);
	if (next <= c.lease)
		next = c.lease + 1;
	if ((err = put_uint(x, x->s->meta, "next_lease", 10, next + 1)) != 0)
		return err;
	c.lease = next;
	*gen = next;
	return conv_store(x, num, &c);
}

int store_lease_check(store_txn *x, const char *id, uint64_t gen)
{
	uint64_t num;
	struct store_conv c;
	int err = conv_load(x, id, &num, &c);
	if (err)
		return err;
	return c.lease == gen ? 0 : STORE_E_FENCED;
}

int store_usage_add(store_txn *x, const char *id, const struct store_usage *u)
{
	uint64_t num;
	struct store_conv c;
	int err = conv_load(x, id, &num, &c);
	if (err)
		return err;
	/* Saturating: the totals stay what JSON's integers and finite numbers
	 * can show (an infinite cost made the record unreadable as JSON, and
	 * get and list failed on it). */
	c.usage.input_tokens = sat_add(c.usage.input_tokens, u->input_tokens);
	c.usage.output_tokens = sat_add(c.usage.output_tokens, u->output_tokens);
	c.usage.cost += u->cost;
	if (!isfinite(c.usage.cost))
		c.usage.cost = DBL_MAX;
	c.updated_at = x->now;
	return conv_store(x, num, &c);
}

int store_turns_add(store_txn *x, const char *id, uint64_t n)
{
	uint64_t num;
	struct store_conv c;
	int err = conv_load(x, id, &num, &c);
	if (err)
		return err;
	c.turns = sat_add(c.turns, n);
	c.updated_at = x->now;
	return conv_store(x, num, &c);
}

/* ---- events ---------------------------------------------------------- */

/* The seq before the conversation's log begins: 0, or first_seq - 1 of a
 * log made by store_conv_create_at. What the last seq is while the log has
 * no event. */
static int log_base(store_txn *x, uint64_t num, uint64_t *base)
{
	unsigned char k[8];
	MDB_val v;
	uint64_t first;
	put_be64(k, num);
	*base = 0;
	int err = get(x, x->s->log_starts, k, 8, &v);
	if (err == STORE_E_NOTFOUND)
		return 0;
	if (err)
		return err;
	if (val_uint(&v, &first) || first < 2)
		return fail(x, STORE_E_CORRUPT);
	*base = first - 1;
	return 0;
}

/* Put cursor c on the conversation's last event; *seq gets its seq, 0 when
 * it has none (c is then elsewhere). */
static int seek_last(store_txn *x, MDB_cursor *c, uint64_t num, uint64_t *seq)
{
	unsigned char kb[16];
	key2(kb, num + 1, 0);
	MDB_val k = { 16, kb }, v;
	/* The first key past this conversation, then one back. */
	int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
	if (rc == 0)
		rc = mdb_cursor_get(c, &k, &v, MDB_PREV);
	else if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
	*seq = 0;
	if (rc == 0 && k.mv_size == 16 && get_be64(k.mv_data) == num)
		*seq = get_be64((const unsigned char *)k.mv_data + 8);
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

/* The last seq: the cache entry's (e may be NULL) when it knows it. */
static int latest_seq(store_txn *x, uint64_t num, struct conv_ent *e, uint64_t *seq)
{
	MDB_cursor *c;
	if (e && e->has_last) {
		*seq = e->last;
		return 0;
	}
	int err = cursor_take(x, CUR_EVENTS, &c);
	if (err)
		return err;
	err = seek_last(x, c, num, seq);
	cursor_give(x, CUR_EVENTS, c);
	if (!err && *seq == 0)
		err = log_base(x, num, seq);
	if (!err && e) {
		e->last = *seq;
		e->has_last = 1;
	}
	return err;
}

/* Write one validated event as seq `seq` through cursor c (NULL: without
 * one), or report its event_id's seq. */
static int append_one(store_txn *x, MDB_cursor *c, uint64_t num, const struct store_event_in *ev,
		      uint64_t *seq, int *dup)
{
	unsigned char ik[8 + STORE_EVENT_ID_MAX];
	size_t il = 0;
	int err;
	*dup = 0;
	if (ev->event_id) {
		MDB_val v;
		il = key_str(ik, num, ev->event_id, strlen(ev->event_id));
		err = get(x, x->s->event_ids, ik, il, &v);
		if (err == 0) {
			*dup = 1;
			return val_uint(&v, seq) ? fail(x, STORE_E_CORRUPT) : 0;
		}
		if (err != STORE_E_NOTFOUND)
			return err;
	}
	/* Content is copied into the record before the put: it may point
	 * into a page of this txn that the put rewrites. */
	if (!ev->event_id && x->head_len && strcmp(ev->type, x->head_type) == 0) {
		msgpack_sbuffer_clear(&x->buf);
		msgpack_sbuffer_write(&x->buf, (const char *)x->head, x->head_len);
	} else {
		msgpack_packer *pk = rec(x);
		msgpack_pack_array(pk, 4);
		pack_str(x, ev->type);
		msgpack_pack_int64(pk, x->now);
		if (ev->event_id) {
			pack_str(x, ev->event_id);
		} else {
			msgpack_pack_nil(pk);
			if (x->buf.size <= sizeof x->head) { /* always: a type is at most 32 bytes */
				memcpy(x->head, x->buf.data, x->buf.size);
				x->head_len = x->buf.size;
				strcpy(x->head_type, ev->type);
			}
		}
	}
	msgpack_sbuffer_write(&x->buf, ev->content.ptr, ev->content.len);
	unsigned char k[16];
	key2(k, num, *seq);
	MDB_val key = { 16, k }, val = { x->buf.size, x->buf.data };
	/* Through a cursor already on the key's leaf (it found the last seq or
	 * wrote the event before), LMDB searches that leaf, not from the root.
	 * seq is last + 1, never a key in use: were it one (a wrong cached
	 * seq), overwriting would lose an event, so that is an error. */
	int rc = c ? mdb_cursor_put(c, &key, &val, MDB_NOOVERWRITE)
		   : mdb_put(x->t, x->s->events, &key, &val, MDB_NOOVERWRITE);
	if (rc)
		return fail(x, rc == MDB_KEYEXIST ? STORE_E_CORRUPT : map_err(rc));
	x->dirty = 1;
	if (ev->event_id)
		return put_uint(x, x->s->event_ids, ik, il, *seq);
	return 0;
}

int store_events_append(store_txn *x, const char *conv, const struct store_event_in *ev, size_t n,
			uint64_t *seqs, int *dups)
{
	uint64_t num, last = 0;
	struct conv_ent *e;
	MDB_cursor *c = NULL;
	int err = conv_find(x, conv, &num, &e);
	if (err)
		return err;
	/* One event after a known last seq needs no cursor (opening one in a
	 * write txn allocates); several go through one, leaf to leaf. */
	if (!e->has_last || n > 1) {
		if ((err = cursor_take(x, CUR_EVENTS, &c)) != 0)
			return err;
	}
	if (e->has_last)
		last = e->last;
	else if ((err = seek_last(x, c, num, &last)) == 0 && last == 0)
		err = log_base(x, num, &last);
	e->has_last = 0; /* until every event is written */
	for (size_t i = 0; i < n && !err; i++) {
		int dup;
		uint64_t seq = last + 1;
		if ((err = append_one(x, c, num, &ev[i], &seq, &dup)) != 0)
			break;
		if (!dup)
			last = seq;
		seqs[i] = seq;
		if (dups)
			dups[i] = dup;
	}
	if (c)
		cursor_give(x, CUR_EVENTS, c);
	if (!err) {
		e->last = last;
		e->has_last = 1;
	}
	return err;
}

int store_event_latest_seq(store_txn *x, const char *conv, uint64_t *seq)
{
	uint64_t num;
	struct conv_ent *e;
	int err = conv_find(x, conv, &num, &e);
	return err ? err : latest_seq(x, num, e, seq);
}

int store_event_id_seq(store_txn *x, const char *conv, const char *event_id, size_t len, uint64_t *seq)
{
	uint64_t num;
	struct conv_ent *e;
	int err = conv_find(x, conv, &num, &e);
	if (err)
		return err;
	unsigned char ik[8 + STORE_EVENT_ID_MAX];
	size_t il = key_str(ik, num, event_id, len);
	MDB_val v;
	if ((err = get(x, x->s->event_ids, ik, il, &v)))
		return err;
	return val_uint(&v, seq) ? fail(x, STORE_E_CORRUPT) : 0;
}

struct eid_ctx {
	int (*fn)(void *, const char *, size_t, uint64_t);
	void *arg;
};

static int eid_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct eid_ctx *c = arg;
	uint64_t seq;
	if (k->mv_size <= 8 || val_uint(v, &seq))
		return fail(x, STORE_E_CORRUPT);
	return c->fn(c->arg, (const char *)k->mv_data + 8, k->mv_size - 8, seq);
}

int store_event_ids_each(store_txn *x, const char *conv,
			 int (*fn)(void *arg, const char *event_id, size_t len, uint64_t seq), void *arg)
{
	struct eid_ctx c = { fn, arg };
	return conv_scan(x, conv, x->s->event_ids, eid_each, &c);
}

static int event_decode(const MDB_val *k, const MDB_val *v, struct store_event *e)
{
	struct mp m;
	uint32_t n;
	if (k->mv_size != 16)
		return STORE_E_CORRUPT;
	e->seq = get_be64((const unsigned char *)k->mv_data + 8);
	mp_init(&m, v->mv_data, v->mv_size);
	if (mp_array(&m, &n) || n != 4 || mp_bytes(&m, &e->type) || mp_int(&m, &e->inserted_at) ||
	    mp_opt_str(&m, &e->event_id) || mp_skip(&m, &e->content.ptr, &e->content.len) || m.p != m.end)
		return STORE_E_CORRUPT;
	return 0;
}

struct stream_ctx {
	uint64_t before;
	int past; /* stopped at `before`, not by the callback */
	const char *type;
	size_t type_len;
	store_event_fn fn;
	void *arg;
};

static int stream_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct stream_ctx *sc = arg;
	struct store_event e;
	if (k->mv_size == 16 && sc->before && get_be64((const unsigned char *)k->mv_data + 8) >= sc->before) {
		sc->past = 1; /* past the range: stop, not an error */
		return 1;
	}
	if (event_decode(k, v, &e))
		return fail(x, STORE_E_CORRUPT);
	if (sc->type && (e.type.len != sc->type_len || memcmp(e.type.ptr, sc->type, sc->type_len)))
		return 0;
	/* The callback's return goes back unchanged (store.h); the range stop is
	 * told apart by sc->past, not by remapping values (which turned a
	 * callback's 2 into 1). */
	return sc->fn(sc->arg, &e);
}

/* With a type filter, the first seq of the last `limit` matches in range. */
static int tail_start(store_txn *x, MDB_cursor *c, uint64_t num, uint64_t after, uint64_t hi,
		      const struct stream_ctx *sc, size_t limit, uint64_t *start)
{
	unsigned char kb[16];
	key2(kb, num, hi);
	MDB_val k = { 16, kb }, v;
	size_t found = 0;
	int err = 0, rc;
	*start = after + 1;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_KEY); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_PREV)) {
		struct store_event e;
		if (k.mv_size != 16 || get_be64(k.mv_data) != num ||
		    get_be64((const unsigned char *)k.mv_data + 8) <= after)
			break;
		if ((err = event_decode(&k, &v, &e)) != 0)
			break;
		if (e.type.len == sc->type_len && memcmp(e.type.ptr, sc->type, sc->type_len) == 0 &&
		    ++found == limit) {
			*start = e.seq;
			break;
		}
	}
	if (err)
		return fail(x, err);
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

/* Where a range starts: after + 1, or with a limit the first of the last
 * `limit` events in range; *none when the range is empty. *at: the seq c
 * was left on (the last one), 0 when c was not positioned. */
static int range_start(store_txn *x, MDB_cursor *c, uint64_t num, const struct conv_ent *e,
		       const struct store_range *r, const struct stream_ctx *sc, uint64_t *start, int *none,
		       uint64_t *at)
{
	uint64_t last;
	*start = r->after + 1;
	*none = 0;
	*at = 0;
	if (!r->limit)
		return 0;
	int err = 0;
	if (e && e->has_last)
		last = e->last;
	else if ((err = seek_last(x, c, num, &last)) == 0)
		*at = last;
	if (err)
		return err;
	uint64_t hi = r->before && r->before - 1 < last ? r->before - 1 : last;
	if (hi <= r->after) {
		*none = 1;
		return 0;
	}
	if (r->type)
		return tail_start(x, c, num, r->after, hi, sc, r->limit, start);
	/* Seqs are dense (1..last, never deleted singly): the tail starts
	 * `limit` back from the top of the range. */
	if (hi - r->after > r->limit)
		*start = hi - r->limit + 1;
	return 0;
}

/* A newest page: in a read txn, collect it walking back from the last
 * event, where seek_last left the cursor, then deliver it. The pages of a
 * read txn stay put until it ends, so what the walk saw stays valid; in a
 * write txn a callback's write may move them. One pass over a leaf or two,
 * where a second search from the root costs a level more with every tenfold
 * growth of the store. Returns 1 when done (*err set), 0 when the keys were
 * not the dense run expected: the caller searches instead. */
#define WALK_BACK 128

static int tail_read(store_txn *x, MDB_cursor *c, uint64_t num, uint64_t start, uint64_t at,
		     struct stream_ctx *sc, int *err)
{
	MDB_val k[WALK_BACK], v[WALK_BACK];
	size_t n = (size_t)(at - start) + 1;
	int rc = mdb_cursor_get(c, &k[n - 1], &v[n - 1], MDB_GET_CURRENT);
	for (size_t i = n - 1; rc == 0 && i > 0; i--)
		rc = mdb_cursor_get(c, &k[i - 1], &v[i - 1], MDB_PREV);
	if (rc)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (k[i].mv_size != 16 || get_be64(k[i].mv_data) != num ||
		    get_be64((const unsigned char *)k[i].mv_data + 8) != start + i)
			return 0;
	*err = 0;
	for (size_t i = 0; i < n && !*err; i++)
		*err = stream_each(x, sc, &k[i], &v[i]);
	return 1;
}

/* e: the conversation's cache entry, or NULL. */
static int stream(store_txn *x, uint64_t num, const struct conv_ent *e, const struct store_range *r,
		  store_event_fn fn, void *arg)
{
	struct stream_ctx sc = { r->before, 0, r->type, r->type ? strlen(r->type) : 0, fn, arg };
	/* Nothing is after the greatest seq; after + 1 would wrap to 0 and
	 * stream the whole log. */
	if (r->after == UINT64_MAX)
		return 0;
	MDB_cursor *c;
	uint64_t start, at;
	int none, err = cursor_take(x, CUR_EVENTS, &c);
	if (err)
		return err;
	err = range_start(x, c, num, e, r, &sc, &start, &none, &at);
	if (!err && !none) {
		unsigned char kb[16];
		key2(kb, num, start);
		if (x->h.write || at < start || at - start >= WALK_BACK || !tail_read(x, c, num, start, at, &sc, &err))
			err = scan(x, c, kb, 16, stream_each, &sc);
		if (sc.past)
			err = 0; /* reaching `before` is the normal end */
	}
	cursor_give(x, CUR_EVENTS, c);
	return err;
}

int store_events_stream(store_txn *x, const char *conv, const struct store_range *r, store_event_fn fn,
			void *arg)
{
	uint64_t num;
	struct conv_ent *e;
	int err = conv_find(x, conv, &num, &e);
	return err ? err : stream(x, num, e, r, fn, arg);
}

/* ---- summaries ------------------------------------------------------- */

static int summary_decode(const MDB_val *v, struct store_summary *s)
{
	struct mp m;
	uint32_t n;
	mp_init(&m, v->mv_data, v->mv_size);
	if (mp_array(&m, &n) || n != 5 || mp_uint(&m, &s->from_seq) || mp_uint(&m, &s->to_seq) ||
	    mp_uint(&m, &s->version) || mp_int(&m, &s->inserted_at) ||
	    mp_skip(&m, &s->content.ptr, &s->content.len) || m.p != m.end)
		return STORE_E_CORRUPT;
	return 0;
}

static int summary_latest(store_txn *x, uint64_t num, struct store_summary *out)
{
	MDB_cursor *c;
	unsigned char kb[16];
	int err = cursor_take(x, CUR_SUMMARIES, &c);
	if (err)
		return err;
	key2(kb, num + 1, 0);
	MDB_val k = { 16, kb }, v;
	int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
	if (rc == 0)
		rc = mdb_cursor_get(c, &k, &v, MDB_PREV);
	else if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
	if (rc == 0 && (k.mv_size != 16 || get_be64(k.mv_data) != num))
		err = STORE_E_NOTFOUND;
	else if (rc == 0)
		err = summary_decode(&v, out) ? fail(x, STORE_E_CORRUPT) : 0;
	else
		err = rc == MDB_NOTFOUND ? STORE_E_NOTFOUND : fail(x, map_err(rc));
	cursor_give(x, CUR_SUMMARIES, c);
	return err;
}

/* The greatest version among the conversation's summaries (0: none). */
static int summary_max_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct store_summary s;
	uint64_t *max = arg;
	(void)k;
	if (summary_decode(v, &s))
		return fail(x, STORE_E_CORRUPT);
	if (s.version > *max)
		*max = s.version;
	return 0;
}

int store_summary_put(store_txn *x, const char *conv, uint64_t from_seq, uint64_t to_seq, store_bytes content,
		      uint64_t *version)
{
	uint64_t num, last;
	struct conv_ent *e;
	int err = conv_find(x, conv, &num, &e);
	if (err || (err = latest_seq(x, num, e, &last)))
		return err;
	if (to_seq > last)
		return STORE_E_INVAL;
	/* Versions count puts: take the greatest version, not the one of the
	 * greatest to_seq, or a put below the latest to_seq would hand out a
	 * version twice. Summaries are few per conversation: a scan is cheap. */
	uint64_t ver = 0;
	unsigned char from[8];
	put_be64(from, num);
	if ((err = scan_prefix(x, x->s->summaries, from, 8, summary_max_each, &ver)) != 0)
		return err;
	ver++;
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 5);
	msgpack_pack_uint64(pk, from_seq);
	msgpack_pack_uint64(pk, to_seq);
	msgpack_pack_uint64(pk, ver);
	msgpack_pack_int64(pk, x->now);
	msgpack_sbuffer_write(&x->buf, content.ptr, content.len);
	unsigned char k[16];
	key2(k, num, to_seq);
	if ((err = put(x, x->s->summaries, k, 16, 0)) != 0)
		return err;
	if (version)
		*version = ver;
	return 0;
}

int store_summary_latest(store_txn *x, const char *conv, struct store_summary *out)
{
	uint64_t num;
	int err = conv_num(x, conv, &num);
	return err ? err : summary_latest(x, num, out);
}

int store_load_since(store_txn *x, const char *conv, struct store_summary *sum, int *has_summary,
		     store_event_fn fn, void *arg)
{
	uint64_t num;
	struct store_summary tmp;
	if (!sum)
		sum = &tmp;
	int err = conv_num(x, conv, &num);
	if (err)
		return err;
	struct store_range r = { 0 };
	err = summary_latest(x, num, sum);
	if (err && err != STORE_E_NOTFOUND)
		return err;
	if (has_summary)
		*has_summary = err == 0;
	if (err == 0)
		r.after = sum->to_seq;
	else
		memset(sum, 0, sizeof *sum);
	return stream(x, num, NULL, &r, fn, arg);
}

/* ---- every summary, and one restored as it was (agentd export/import) --- */

struct sml_ctx {
	int (*fn)(void *, const struct store_summary *);
	void *arg;
};

static int sml_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct sml_ctx *c = arg;
	struct store_summary s;
	(void)k;
	if (summary_decode(v, &s))
		return fail(x, STORE_E_CORRUPT);
	return c->fn(c->arg, &s);
}

int store_summaries_list(store_txn *x, const char *conv, int (*fn)(void *, const struct store_summary *),
			 void *arg)
{
	struct sml_ctx c = { fn, arg };
	return conv_scan(x, conv, x->s->summaries, sml_each, &c);
}

struct ver_taken {
	uint64_t version, to_seq;
	int taken;
};

static int summary_ver_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct store_summary s;
	struct ver_taken *w = arg;
	(void)k;
	if (summary_decode(v, &s))
		return fail(x, STORE_E_CORRUPT);
	if (s.version == w->version && s.to_seq != w->to_seq)
		w->taken = 1;
	return 0;
}

int store_summary_restore(store_txn *x, const char *conv, const struct store_summary *in)
{
	uint64_t num, last;
	struct conv_ent *e;
	int err = conv_find(x, conv, &num, &e);
	if (err || (err = latest_seq(x, num, e, &last)))
		return err;
	if (in->to_seq > last)
		return STORE_E_INVAL;
	/* A version is handed out once per conversation (the next put takes
	 * the greatest + 1): another to_seq holding it is a conflict. */
	struct ver_taken w = { in->version, in->to_seq, 0 };
	unsigned char from[8];
	put_be64(from, num);
	if ((err = scan_prefix(x, x->s->summaries, from, 8, summary_ver_each, &w)) != 0)
		return err;
	if (w.taken)
		return STORE_E_CONFLICT;
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 5);
	msgpack_pack_uint64(pk, in->from_seq);
	msgpack_pack_uint64(pk, in->to_seq);
	msgpack_pack_uint64(pk, in->version);
	msgpack_pack_int64(pk, in->inserted_at);
	msgpack_sbuffer_write(&x->buf, in->content.ptr, in->content.len);
	unsigned char k[16];
	key2(k, num, in->to_seq);
	return put(x, x->s->summaries, k, 16, 0);
}

/* ---- tool calls ------------------------------------------------------ */

struct tc_rec {
	struct store_tool_call tc;
	uint64_t num;
};

static int tc_decode(const MDB_val *k, const MDB_val *v, struct tc_rec *r)
{
	struct mp m;
	uint32_t n;
	uint64_t exec, st, att;
	struct store_tool_call *tc = &r->tc;
	memset(r, 0, sizeof *r);
	tc->id.ptr = k->mv_data;
	tc->id.len = k->mv_size;
	mp_init(&m, v->mv_data, v->mv_size);
	if (mp_array(&m, &n) || n != 12 || mp_bytes(&m, &tc->conversation) || mp_uint(&m, &r->num) ||
	    mp_bytes(&m, &tc->name) || mp_uint(&m, &exec) || exec > STORE_EXEC_HUMAN || mp_uint(&m, &st) ||
	    st > STORE_TC_UNKNOWN || mp_int(&m, &tc->inserted_at) || mp_int(&m, &tc->resolved_at) ||
	    mp_int(&m, &tc->deadline) || mp_uint(&m, &att) || att > UINT32_MAX ||
	    mp_skip(&m, &tc->args.ptr, &tc->args.len) || mp_opt(&m, &tc->prompt) || mp_opt(&m, &tc->result) ||
	    m.p != m.end)
		return STORE_E_CORRUPT;
	tc->executor = (int)exec;
	tc->status = (int)st;
	tc->attempts = (uint32_t)att;
	return 0;
}

static int tc_load(store_txn *x, const char *id, struct tc_rec *r)
{
	MDB_val v;
	MDB_val k = { strlen(id), (void *)id };
	int err = get(x, x->s->tool_calls, id, k.mv_size, &v);
	if (err)
		return err;
	return tc_decode(&k, &v, r) ? fail(x, STORE_E_CORRUPT) : 0;
}

/* Write the record and its per-conversation index entry. The record's byte
 * fields may point into the map: they are packed before the put. */
static int tc_store(store_txn *x, const struct tc_rec *r)
{
	const struct store_tool_call *tc = &r->tc;
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 12);
	pack_strn(x, tc->conversation.ptr, tc->conversation.len);
	msgpack_pack_uint64(pk, r->num);
	pack_strn(x, tc->name.ptr, tc->name.len);
	msgpack_pack_uint8(pk, (uint8_t)tc->executor);
	msgpack_pack_uint8(pk, (uint8_t)tc->status);
	msgpack_pack_int64(pk, tc->inserted_at);
	msgpack_pack_int64(pk, tc->resolved_at);
	msgpack_pack_int64(pk, tc->deadline);
	msgpack_pack_uint32(pk, tc->attempts);
	pack_raw(x, tc->args);
	pack_raw(x, tc->prompt);
	pack_raw(x, tc->result);
	char id[STORE_ID_MAX];
	size_t idlen = tc->id.len;
	memcpy(id, tc->id.ptr, idlen);
	int err = put(x, x->s->tool_calls, id, idlen, 0);
	if (err)
		return err;
	unsigned char k[8 + STORE_ID_MAX];
	size_t kl = key_str(k, r->num, id, idlen);
	return put_uint(x, x->s->conv_tool_calls, k, kl, (uint64_t)tc->status);
}

int store_tool_call_upsert(store_txn *x, const char *conv, const struct store_tool_call_in *in)
{
	uint64_t num;
	int err = conv_num(x, conv, &num);
	if (err)
		return err;
	struct tc_rec r;
	err = tc_load(x, in->id, &r);
	if (err == 0) {
		if (r.num != num)
			return STORE_E_CONFLICT;
	} else if (err == STORE_E_NOTFOUND) {
		memset(&r, 0, sizeof r);
		r.num = num;
		r.tc.id = (store_bytes){ in->id, strlen(in->id) };
		r.tc.conversation = (store_bytes){ conv, strlen(conv) };
		r.tc.status = STORE_TC_PENDING;
		r.tc.inserted_at = x->now;
	} else {
		return err;
	}
	r.tc.name = (store_bytes){ in->name, strlen(in->name) };
	r.tc.executor = in->executor;
	r.tc.args = in->args;
	r.tc.prompt = in->prompt;
	return tc_store(x, &r);
}

int store_tool_call_get(store_txn *x, const char *id, struct store_tool_call *out)
{
	struct tc_rec r;
	int err = tc_load(x, id, &r);
	if (!err)
		*out = r.tc;
	return err;
}

struct tcl_ctx {
	unsigned mask;
	int (*fn)(void *, const struct store_tool_call *);
	void *arg;
};

static int tcl_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct tcl_ctx *c = arg;
	uint64_t st;
	if (val_uint(v, &st) || st > STORE_TC_UNKNOWN)
		return fail(x, STORE_E_CORRUPT);
	if (c->mask && !(c->mask & (1u << st)))
		return 0;
	MDB_val tk = { k->mv_size - 8, (char *)k->mv_data + 8 }, tv;
	int err = get(x, x->s->tool_calls, tk.mv_data, tk.mv_size, &tv);
	struct tc_rec r;
	if (err)
		return err == STORE_E_NOTFOUND ? fail(x, STORE_E_CORRUPT) : err;
	if (tc_decode(&tk, &tv, &r))
		return fail(x, STORE_E_CORRUPT);
	return c->fn(c->arg, &r.tc);
}

int store_tool_calls_list(store_txn *x, const char *conv, unsigned mask,
			  int (*fn)(void *arg, const struct store_tool_call *tc), void *arg)
{
	struct tcl_ctx c = { mask, fn, arg };
	return conv_scan(x, conv, x->s->conv_tool_calls, tcl_each, &c);
}

/* A tool_calls row itself, for store_tool_calls_each. */
static int tce_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct tcl_ctx *c = arg;
	struct tc_rec r;
	if (tc_decode(k, v, &r))
		return fail(x, STORE_E_CORRUPT);
	return c->fn(c->arg, &r.tc);
}

int store_tool_calls_each(store_txn *x, int (*fn)(void *arg, const struct store_tool_call *tc), void *arg)
{
	struct tcl_ctx c = { 0, fn, arg };
	return scan_prefix(x, x->s->tool_calls, NULL, 0, tce_each, &c);
}

int store_tool_call_attempt(store_txn *x, const char *id, uint32_t *attempts)
{
	struct tc_rec r;
	int err = tc_load(x, id, &r);
	if (err)
		return err;
	if (r.tc.attempts < UINT32_MAX)
		r.tc.attempts++;
	if (attempts)
		*attempts = r.tc.attempts;
	return tc_store(x, &r);
}

static int expiry_del(store_txn *x, const struct tc_rec *r)
{
	unsigned char ek[8 + STORE_ID_MAX];
	if (r->tc.deadline <= 0)
		return 0;
	size_t el = key_str(ek, (uint64_t)r->tc.deadline, r->tc.id.ptr, r->tc.id.len);
	return del(x, x->s->expiries, ek, el);
}

int store_tool_call_unknown(store_txn *x, const char *id, int unknown)
{
	struct tc_rec r;
	int err = tc_load(x, id, &r);
	if (err)
		return err == STORE_E_NOTFOUND ? STORE_E_STALE : err;
	if (r.tc.status != (unknown ? STORE_TC_PENDING : STORE_TC_UNKNOWN))
		return STORE_E_STALE;
	r.tc.status = unknown ? STORE_TC_UNKNOWN : STORE_TC_PENDING;
	return tc_store(x, &r);
}

int store_tool_call_resolve(store_txn *x, const char *id, int status, store_bytes result, char *conv)
{
	struct tc_rec r;
	int err = tc_load(x, id, &r);
	if (err)
		return err == STORE_E_NOTFOUND ? STORE_E_STALE : err;
	if (r.tc.status != STORE_TC_PENDING && r.tc.status != STORE_TC_UNKNOWN)
		return STORE_E_STALE;
	if (conv) {
		memcpy(conv, r.tc.conversation.ptr, r.tc.conversation.len);
		conv[r.tc.conversation.len] = 0;
	}
	/* Write the record first, while its fields still point at the page
	 * they were read from; the expiry key is built from locals. */
	struct tc_rec old = r;
	r.tc.status = status;
	r.tc.result = result;
	r.tc.resolved_at = x->now;
	r.tc.deadline = 0;
	if ((err = tc_store(x, &r)) != 0 || (err = expiry_del(x, &old)) != 0)
		return err;
	return warning_del(x, id, strlen(id));
}

/* A pending call's record and a copy of its conversation id (the page may be
 * reused by the writes that follow). STORE_E_STALE when it is settled. */
static int tc_load_pending(store_txn *x, const char *id, struct tc_rec *r, char *conv, size_t *clen)
{
	int err = tc_load(x, id, r);
	if (err)
		return err;
	if (r->tc.status != STORE_TC_PENDING)
		return STORE_E_STALE;
	*clen = r->tc.conversation.len;
	if (*clen > STORE_ID_MAX)
		return fail(x, STORE_E_CORRUPT);
	memcpy(conv, r->tc.conversation.ptr, *clen);
	return 0;
}

/* ---- expiries -------------------------------------------------------- */

int store_expiry_schedule(store_txn *x, const char *id, int64_t deadline)
{
	struct tc_rec r;
	char conv[STORE_ID_MAX];
	size_t clen;
	int err = tc_load_pending(x, id, &r, conv, &clen);
	if (err)
		return err;
	struct tc_rec old = r;
	r.tc.deadline = deadline;
	if ((err = tc_store(x, &r)) != 0 || (err = expiry_del(x, &old)) != 0)
		return err;
	unsigned char ek[8 + STORE_ID_MAX];
	size_t el = key_str(ek, (uint64_t)deadline, id, strlen(id));
	rec(x);
	pack_strn(x, conv, clen);
	return put(x, x->s->expiries, ek, el, 0);
}

int store_expiry_cancel(store_txn *x, const char *id)
{
	struct tc_rec r;
	int err = tc_load(x, id, &r);
	if (err == STORE_E_NOTFOUND || (err == 0 && r.tc.deadline <= 0))
		return 0;
	if (err)
		return err;
	struct tc_rec old = r;
	r.tc.deadline = 0;
	if ((err = tc_store(x, &r)) != 0)
		return err;
	return expiry_del(x, &old);
}

int store_expiry_drop(store_txn *x, int64_t deadline, const char *id)
{
	unsigned char ek[8 + STORE_ID_MAX];
	size_t el = key_str(ek, (uint64_t)deadline, id, strlen(id));
	return del(x, x->s->expiries, ek, el);
}

/* Rows (time, tool call id) -> conv id of dbi with time <= now, in order. */
static int due_scan(store_txn *x, MDB_dbi dbi, int64_t now, int (*fn)(void *, const struct store_expiry *),
		    void *arg)
{
	MDB_cursor *c;
	if (dbi == DBI_ABSENT)
		return 0; /* an older store opened read-only: none */
	int rc = mdb_cursor_open(x->t, dbi, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	int r = 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		struct store_expiry e;
		struct mp m;
		if (k.mv_size <= 8) {
			r = fail(x, STORE_E_CORRUPT);
			break;
		}
		e.deadline = (int64_t)get_be64(k.mv_data);
		if (e.deadline > now)
			break;
		e.tool_call_id = (store_bytes){ (char *)k.mv_data + 8, k.mv_size - 8 };
		mp_init(&m, v.mv_data, v.mv_size);
		if (mp_bytes(&m, &e.conversation) || m.p != m.end) {
			r = fail(x, STORE_E_CORRUPT);
			break;
		}
		if ((r = fn(arg, &e)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (r)
		return r;
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

struct claim_ctx {
	size_t limit, n;
	int full; /* the limit stopped the walk: not the caller's return */
	int (*fn)(void *, const struct store_expiry *);
	void *arg;
};

static int claim_one(void *arg, const struct store_expiry *e)
{
	struct claim_ctx *c = arg;
	if (c->limit && c->n == c->limit) {
		c->full = 1;
		return 1;
	}
	c->n++;
	return c->fn(c->arg, e);
}

/* Writers are serialised: nothing to skip (store.h). */
int store_expiries_claim(store_txn *x, int64_t now, size_t limit, int (*fn)(void *, const struct store_expiry *),
			 void *arg)
{
	struct claim_ctx c = { limit, 0, 0, fn, arg };
	int r = store_expiries_due(x, now, claim_one, &c);
	return c.full ? 0 : r;
}

int store_expiries_due(store_txn *x, int64_t now, int (*fn)(void *, const struct store_expiry *), void *arg)
{
	return due_scan(x, x->s->expiries, now, fn, arg);
}

/* The first key's time of dbi (keyed time, tool call id). */
static int earliest_scan(store_txn *x, MDB_dbi dbi, int64_t *deadline)
{
	MDB_cursor *c;
	if (dbi == DBI_ABSENT)
		return STORE_E_NOTFOUND;
	int rc = mdb_cursor_open(x->t, dbi, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
	mdb_cursor_close(c);
	if (rc == MDB_NOTFOUND)
		return STORE_E_NOTFOUND;
	if (rc)
		return fail(x, map_err(rc));
	if (k.mv_size <= 8)
		return fail(x, STORE_E_CORRUPT);
	*deadline = (int64_t)get_be64(k.mv_data);
	return 0;
}

int store_expiry_earliest(store_txn *x, int64_t *deadline)
{
	return earliest_scan(x, x->s->expiries, deadline);
}

/* ---- expiry warnings ------------------------------------------------- */

int store_warning_schedule(store_txn *x, const char *id, int64_t at)
{
	struct tc_rec r;
	char conv[STORE_ID_MAX];
	size_t clen;
	int err = tc_load_pending(x, id, &r, conv, &clen);
	if (err)
		return err;
	if ((err = warning_del(x, id, strlen(id))) != 0)
		return err;
	unsigned char wk[8 + STORE_ID_MAX];
	size_t wl = key_str(wk, (uint64_t)at, id, strlen(id));
	rec(x);
	pack_strn(x, conv, clen);
	if ((err = put(x, x->s->warnings, wk, wl, 0)) != 0)
		return err;
	return put_uint(x, x->s->warning_at, id, strlen(id), (uint64_t)at);
}

int store_warning_drop(store_txn *x, const char *id)
{
	return warning_del(x, id, strlen(id));
}

int store_warnings_due(store_txn *x, int64_t now, int (*fn)(void *, const struct store_expiry *), void *arg)
{
	return due_scan(x, x->s->warnings, now, fn, arg);
}

int store_warning_earliest(store_txn *x, int64_t *at)
{
	return earliest_scan(x, x->s->warnings, at);
}

/* ---- schedules ------------------------------------------------------- */

/* A schedules record into s (its id from the key). */
static int sched_decode(const MDB_val *k, const MDB_val *v, struct store_schedule *s)
{
	struct mp m;
	uint32_t n;
	int64_t due;
	mp_init(&m, v->mv_data, v->mv_size);
	if (mp_array(&m, &n) || n != 4 || mp_bytes(&m, &s->conversation) || mp_int(&m, &due) ||
	    mp_opt_str(&m, &s->cron) || mp_bytes(&m, &s->text) || m.p != m.end)
		return STORE_E_CORRUPT;
	s->id = (store_bytes){ k->mv_data, k->mv_size };
	s->due = due;
	return 0;
}

static int sched_load(store_txn *x, const char *id, struct store_schedule *s)
{
	MDB_val v, k = { strlen(id), (void *)id };
	int err = get(x, x->s->schedules, id, strlen(id), &v);
	if (err)
		return err;
	return sched_decode(&k, &v, s) ? fail(x, STORE_E_CORRUPT) : 0;
}

/* The record of (conv, due, cron, text) under id, and its due row. */
static int sched_write(store_txn *x, const char *id, store_bytes conv, int64_t due, store_bytes cron,
		       store_bytes text)
{
	unsigned char dk[8 + STORE_ID_MAX];
	size_t dl = key_str(dk, (uint64_t)due, id, strlen(id));
	msgpack_pack_array(rec(x), 4);
	pack_strn(x, conv.ptr, conv.len);
	msgpack_pack_int64(&x->pk, due);
	if (cron.len)
		pack_strn(x, cron.ptr, cron.len);
	else
		msgpack_pack_nil(&x->pk);
	pack_strn(x, text.ptr, text.len);
	int err = put(x, x->s->schedules, id, strlen(id), 0);
	if (err)
		return err;
	rec(x);
	pack_strn(x, conv.ptr, conv.len);
	return put(x, x->s->schedule_due, dk, dl, 0);
}

int store_schedule_put(store_txn *x, const char *id, const char *conv, int64_t due, const char *cron,
		       store_bytes text)
{
	uint64_t num;
	struct store_schedule old;
	int err = conv_num(x, conv, &num);
	if (err)
		return err;
	if ((err = sched_load(x, id, &old)) != STORE_E_NOTFOUND)
		return err ? err : STORE_E_CONFLICT;
	return sched_write(x, id, (store_bytes){ conv, strlen(conv) }, due,
			   (store_bytes){ cron, cron ? strlen(cron) : 0 }, text);
}

int store_schedule_get(store_txn *x, const char *id, struct store_schedule *out)
{
	return sched_load(x, id, out);
}

/* Remove the due row of s (loaded by sched_load). */
static int sched_due_del(store_txn *x, const char *id, int64_t due)
{
	unsigned char dk[8 + STORE_ID_MAX];
	size_t dl = key_str(dk, (uint64_t)due, id, strlen(id));
	return del(x, x->s->schedule_due, dk, dl);
}

int store_schedule_move(store_txn *x, const char *id, int64_t due)
{
	struct store_schedule s;
	int err = sched_load(x, id, &s);
	if (err || (err = sched_due_del(x, id, s.due)))
		return err;
	/* s points into the map: copy what the rewrite reads before it writes */
	char conv[STORE_ID_MAX], cron[STORE_CRON_MAX];
	size_t cl = s.conversation.len, crl = s.cron.len;
	if (cl > sizeof conv || crl > sizeof cron)
		return fail(x, STORE_E_CORRUPT);
	memcpy(conv, s.conversation.ptr, cl);
	if (crl)
		memcpy(cron, s.cron.ptr, crl);
	char *text = malloc(s.text.len ? s.text.len : 1);
	if (!text)
		return fail(x, -ENOMEM);
	if (s.text.len)
		memcpy(text, s.text.ptr, s.text.len);
	err = sched_write(x, id, (store_bytes){ conv, cl }, due, (store_bytes){ cron, crl },
			  (store_bytes){ text, s.text.len });
	free(text);
	return err;
}

int store_schedule_drop(store_txn *x, const char *id)
{
	struct store_schedule s;
	int err = sched_load(x, id, &s);
	if (err || (err = sched_due_del(x, id, s.due)))
		return err;
	return del(x, x->s->schedules, id, strlen(id));
}

/* Every schedule of conv goes (its conversation is deleted). */
static int schedules_del_conv(store_txn *x, const char *conv)
{
	MDB_cursor *c;
	if (x->s->schedules == DBI_ABSENT)
		return 0;
	int rc = mdb_cursor_open(x->t, x->s->schedules, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	int err = 0;
	size_t cl = strlen(conv);
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && !err; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		struct store_schedule s;
		if ((err = sched_decode(&k, &v, &s)) != 0)
			break;
		if (s.conversation.len != cl || memcmp(s.conversation.ptr, conv, cl))
			continue;
		unsigned char dk[8 + STORE_ID_MAX];
		size_t dl = key_str(dk, (uint64_t)s.due, k.mv_data, k.mv_size);
		if ((err = del(x, x->s->schedule_due, dk, dl)) == 0 && (rc = mdb_cursor_del(c, 0)) != 0)
			err = map_err(rc);
		x->dirty = 1;
	}
	mdb_cursor_close(c);
	if (err)
		return fail(x, err);
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

/* The schedules in due order, due <= upto, conv's only when conv is not
 * NULL, at most limit (0: all). */
static int sched_walk(store_txn *x, const char *conv, int64_t upto, size_t limit,
		      int (*fn)(void *, const struct store_schedule *), void *arg)
{
	MDB_cursor *c;
	if (x->s->schedule_due == DBI_ABSENT)
		return 0;
	int rc = mdb_cursor_open(x->t, x->s->schedule_due, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	int r = 0;
	size_t n = 0, cl = conv ? strlen(conv) : 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (k.mv_size <= 8 || k.mv_size > 8 + STORE_ID_MAX) {
			r = fail(x, STORE_E_CORRUPT);
			break;
		}
		if ((int64_t)get_be64(k.mv_data) > upto || (limit && n == limit))
			break;
		char id[STORE_ID_MAX + 1];
		memcpy(id, (char *)k.mv_data + 8, k.mv_size - 8);
		id[k.mv_size - 8] = 0;
		struct store_schedule s;
		if ((r = sched_load(x, id, &s)) != 0) {
			r = r == STORE_E_NOTFOUND ? fail(x, STORE_E_CORRUPT) : r;
			break;
		}
		if (conv && (s.conversation.len != cl || memcmp(s.conversation.ptr, conv, cl)))
			continue;
		n++;
		if ((r = fn(arg, &s)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (r)
		return r;
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

int store_schedules_list(store_txn *x, const char *conv, int (*fn)(void *, const struct store_schedule *), void *arg)
{
	return sched_walk(x, conv, INT64_MAX, 0, fn, arg);
}

/* Writers are serialised: nothing to skip (store.h). */
int store_schedules_due(store_txn *x, int64_t now, size_t limit, int (*fn)(void *, const struct store_schedule *),
			void *arg)
{
	return sched_walk(x, NULL, now, limit, fn, arg);
}

int store_schedule_earliest(store_txn *x, int64_t *due)
{
	return earliest_scan(x, x->s->schedule_due, due);
}

/* ---- audit ----------------------------------------------------------- */

int store_model_call_put(store_txn *x, const char *conv, const struct store_model_call_in *mc)
{
	uint64_t num;
	int err = conv_num(x, conv, &num);
	if (err || !x->s->opts.audit)
		return err;
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 8);
	pack_str(x, mc->model);
	msgpack_pack_uint64(pk, mc->usage.input_tokens);
	msgpack_pack_uint64(pk, mc->usage.output_tokens);
	msgpack_pack_double(pk, mc->usage.cost);
	msgpack_pack_uint64(pk, mc->latency_ms);
	msgpack_pack_uint64(pk, mc->summary_version);
	msgpack_pack_int64(pk, x->now);
	msgpack_sbuffer_write(&x->buf, mc->rendered.ptr, mc->rendered.len);
	unsigned char k[16];
	key2(k, num, mc->turn_ref);
	return put(x, x->s->model_calls, k, 16, 0);
}

static int mc_decode(const MDB_val *k, const MDB_val *v, struct store_model_call *mc)
{
	struct mp m;
	uint32_t n;
	if (k->mv_size != 16)
		return STORE_E_CORRUPT;
	mc->turn_ref = get_be64((const unsigned char *)k->mv_data + 8);
	mp_init(&m, v->mv_data, v->mv_size);
	if (mp_array(&m, &n) || n != 8 || mp_bytes(&m, &mc->model) || mp_uint(&m, &mc->usage.input_tokens) ||
	    mp_uint(&m, &mc->usage.output_tokens) || mp_double(&m, &mc->usage.cost) ||
	    mp_uint(&m, &mc->latency_ms) || mp_uint(&m, &mc->summary_version) || mp_int(&m, &mc->inserted_at) ||
	    mp_skip(&m, &mc->rendered.ptr, &mc->rendered.len) || m.p != m.end)
		return STORE_E_CORRUPT;
	return 0;
}

struct mcl_ctx {
	int (*fn)(void *, const struct store_model_call *);
	void *arg;
};

static int mcl_each(store_txn *x, void *arg, const MDB_val *k, const MDB_val *v)
{
	struct mcl_ctx *c = arg;
	struct store_model_call mc;
	if (mc_decode(k, v, &mc))
		return fail(x, STORE_E_CORRUPT);
	return c->fn(c->arg, &mc);
}

int store_model_calls_list(store_txn *x, const char *conv, int (*fn)(void *, const struct store_model_call *),
			   void *arg)
{
	struct mcl_ctx c = { fn, arg };
	return conv_scan(x, conv, x->s->model_calls, mcl_each, &c);
}

int store_model_calls_gc(store_txn *x, const char *conv, int64_t ttl_ms, uint64_t *removed)
{
	uint64_t num = 0, n = 0;
	if (conv) {
		int err = conv_num(x, conv, &num);
		if (err)
			return err;
	}
	int64_t cutoff = x->now - ttl_ms;
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->model_calls, &c);
	if (rc)
		return fail(x, map_err(rc));
	unsigned char kb[16];
	key2(kb, num, 0);
	MDB_val k = { conv ? 16 : 0, kb }, v;
	rc = conv ? mdb_cursor_get(c, &k, &v, MDB_SET_RANGE) : mdb_cursor_get(c, &k, &v, MDB_FIRST);
	int err = 0;
	while (rc == 0) {
		struct store_model_call mc;
		if (conv && (k.mv_size != 16 || get_be64(k.mv_data) != num))
			break;
		if (mc_decode(&k, &v, &mc)) {
			err = STORE_E_CORRUPT;
			break;
		}
		if (mc.inserted_at < cutoff) {
			/* Re-seek past the deleted key instead of trusting the
			 * cursor's position after a delete. */
			memcpy(kb, k.mv_data, 16);
			if ((rc = mdb_cursor_del(c, 0)) != 0)
				break;
			x->dirty = 1;
			n++;
			k.mv_size = 16;
			k.mv_data = kb;
			rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
			continue;
		}
		rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(c);
	if (err)
		return fail(x, err);
	if (rc && rc != MDB_NOTFOUND)
		return fail(x, map_err(rc));
	if (removed)
		*removed = n;
	return 0;
}

/* ---- nodes and leases ------------------------------------------------ */

struct owner_rec {
	store_bytes node;
	int64_t expires_at;
};

static int owner_decode(const MDB_val *v, struct owner_rec *o)
{
	struct mp m;
	uint32_t n;
	mp_init(&m, v->mv_data, v->mv_size);
	if (mp_array(&m, &n) || n != 2 || mp_bytes(&m, &o->node) || o->node.len == 0 ||
	    mp_int(&m, &o->expires_at) || m.p != m.end)
		return STORE_E_CORRUPT;
	return 0;
}

/* The owners row of conversation id: STORE_E_NOTFOUND when it has none. */
static int owner_get(store_txn *x, const char *id, size_t len, struct owner_rec *o)
{
	if (!x->s->has_nodes)
		return STORE_E_NOTFOUND;
	MDB_val v;
	int err = get(x, x->s->owners, id, len, &v);
	if (err)
		return err;
	return owner_decode(&v, o) ? fail(x, STORE_E_CORRUPT) : 0;
}

static int owner_put(store_txn *x, const char *id, size_t len, const char *node, size_t nlen, int64_t exp)
{
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 2);
	pack_strn(x, node, nlen);
	msgpack_pack_int64(pk, exp);
	return put(x, x->s->owners, id, len, 0);
}

static int same(store_bytes b, const char *s, size_t len)
{
	return b.len == len && memcmp(b.ptr, s, len) == 0;
}

/* The ids of the conversations `node` owns, in id order (a copy: the
 * caller then writes owners). *ids is malloc'd, STORE_ID_MAX + 1 bytes
 * each, NUL-terminated. */
static int owned_ids(store_txn *x, const char *node, char (**ids)[STORE_ID_MAX + 1], size_t *n)
{
	*ids = NULL;
	*n = 0;
	size_t cap = 0, nlen = strlen(node);
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->owners, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	int err = 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		struct owner_rec o;
		if (owner_decode(&v, &o) || k.mv_size > STORE_ID_MAX) {
			err = STORE_E_CORRUPT;
			break;
		}
		if (!same(o.node, node, nlen))
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			void *nw = realloc(*ids, cap * sizeof **ids);
			if (!nw) {
				err = -ENOMEM;
				break;
			}
			*ids = nw;
		}
		memcpy((*ids)[*n], k.mv_data, k.mv_size);
		(*ids)[(*n)++][k.mv_size] = 0;
	}
	mdb_cursor_close(c);
	if (!err && rc != MDB_NOTFOUND)
		err = map_err(rc);
	if (err) {
		free(*ids);
		*ids = NULL;
		*n = 0;
		return fail(x, err);
	}
	return 0;
}

int store_node_beat(store_txn *x, const char *node, int64_t ttl_ms, uint64_t *leases)
{
	size_t nlen = strlen(node);
	int64_t started = x->now, exp = x->now + ttl_ms;
	MDB_val v;
	int err = get(x, x->s->nodes, node, nlen, &v);
	if (err && err != STORE_E_NOTFOUND)
		return err;
	if (!err) {
		struct mp m;
		uint32_t n;
		mp_init(&m, v.mv_data, v.mv_size);
		if (mp_array(&m, &n) || n != 3 || mp_int(&m, &started))
			return fail(x, STORE_E_CORRUPT);
	}
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 3);
	msgpack_pack_int64(pk, started);
	msgpack_pack_int64(pk, x->now);
	msgpack_pack_int64(pk, exp);
	if ((err = put(x, x->s->nodes, node, nlen, 0)) != 0)
		return err;
	char(*ids)[STORE_ID_MAX + 1];
	size_t n;
	if ((err = owned_ids(x, node, &ids, &n)) != 0)
		return err;
	for (size_t i = 0; i < n && !err; i++)
		err = owner_put(x, ids[i], strlen(ids[i]), node, nlen, exp);
	free(ids);
	if (!err && leases)
		*leases = n;
	return err;
}

int store_node_leave(store_txn *x, const char *node)
{
	char(*ids)[STORE_ID_MAX + 1];
	size_t n;
	int err = owned_ids(x, node, &ids, &n);
	if (err)
		return err;
	for (size_t i = 0; i < n && !err; i++)
		err = del(x, x->s->owners, ids[i], strlen(ids[i]));
	free(ids);
	return err ? err : del(x, x->s->nodes, node, strlen(node));
}

/* How many owners rows name node. */
static int count_owned(store_txn *x, store_bytes node, uint64_t *count)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->owners, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	*count = 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		struct owner_rec o;
		if (owner_decode(&v, &o) == 0 && same(o.node, node.ptr, node.len))
			(*count)++;
	}
	mdb_cursor_close(c);
	return rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

int store_nodes_list(store_txn *x, int (*fn)(void *arg, const struct store_node *n), void *arg)
{
	if (!x->s->has_nodes)
		return 0;
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->nodes, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	int r = 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		struct store_node nd = { .id = { k.mv_data, k.mv_size } };
		struct mp m;
		uint32_t n;
		mp_init(&m, v.mv_data, v.mv_size);
		if (mp_array(&m, &n) || n != 3 || mp_int(&m, &nd.started_at) || mp_int(&m, &nd.beat_at) ||
		    mp_int(&m, &nd.expires_at)) {
			r = fail(x, STORE_E_CORRUPT);
			break;
		}
		if ((r = count_owned(x, nd.id, &nd.leases)) != 0 || (r = fn(arg, &nd)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (r)
		return r;
	return rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

int store_conv_owner(store_txn *x, const char *id, struct store_owner *out)
{
	uint64_t num;
	struct store_conv c;
	int err = conv_load(x, id, &num, &c);
	if (err)
		return err;
	struct owner_rec o;
	memset(out, 0, sizeof *out);
	out->lease = c.lease;
	err = owner_get(x, id, strlen(id), &o);
	if (err == STORE_E_NOTFOUND)
		return 0;
	if (err)
		return err;
	out->node = o.node;
	out->expires_at = o.expires_at;
	return 0;
}

int store_conv_claim(store_txn *x, const char *id, const char *node, int64_t ttl_ms, uint64_t *gen)
{
	uint64_t num;
	struct store_conv c;
	int err = conv_load(x, id, &num, &c);
	if (err)
		return err;
	size_t len = strlen(id), nlen = strlen(node);
	struct owner_rec o;
	err = owner_get(x, id, len, &o);
	if (err && err != STORE_E_NOTFOUND)
		return err;
	if (!err && !same(o.node, node, nlen) && o.expires_at > x->now)
		return STORE_E_CONFLICT;
	if ((err = store_lease_next(x, id, gen)) != 0)
		return err;
	return owner_put(x, id, len, node, nlen, x->now + ttl_ms);
}

int store_conv_release(store_txn *x, const char *id, const char *node, uint64_t gen)
{
	uint64_t num;
	struct store_conv c;
	int err = conv_load(x, id, &num, &c);
	if (err)
		return err;
	struct owner_rec o;
	err = owner_get(x, id, strlen(id), &o);
	if (err == STORE_E_NOTFOUND || (!err && (!same(o.node, node, strlen(node)) || c.lease != gen)))
		return STORE_E_FENCED;
	return err ? err : del(x, x->s->owners, id, strlen(id));
}

int store_convs_claimable(store_txn *x, unsigned mask, size_t limit, store_conv_id_fn fn, void *arg)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->conv_ids, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	size_t n = 0;
	int r = 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && (!limit || n < limit);
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		uint64_t num;
		unsigned char kb[8];
		MDB_val cv;
		struct store_conv conv;
		if (val_uint(&v, &num))
			continue; /* a damaged record: `agentd check` names it */
		put_be64(kb, num);
		if (mdb_get(x->t, x->s->convs, &(MDB_val){ 8, kb }, &cv) || conv_decode(&cv, &conv))
			continue;
		if (mask && !(mask & (1u << conv.status)))
			continue;
		struct owner_rec o;
		int e = owner_get(x, k.mv_data, k.mv_size, &o);
		if (e == 0 && o.expires_at > x->now)
			continue;
		if (e && e != STORE_E_NOTFOUND) {
			r = e;
			break;
		}
		n++;
		if ((r = fn(arg, k.mv_data, k.mv_size)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (r)
		return r;
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

int store_node_leases(store_txn *x, const char *node,
		      int (*fn)(void *arg, const char *id, size_t len, uint64_t gen, int64_t expires_at), void *arg)
{
	if (!x->s->has_nodes)
		return 0;
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->owners, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	int r = 0;
	size_t nlen = strlen(node);
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		struct owner_rec o;
		if (owner_decode(&v, &o) || k.mv_size > STORE_ID_MAX) {
			r = fail(x, STORE_E_CORRUPT);
			break;
		}
		if (!same(o.node, node, nlen))
			continue;
		char id[STORE_ID_MAX + 1];
		memcpy(id, k.mv_data, k.mv_size);
		id[k.mv_size] = 0;
		if (!store_id_valid(id, strlen(id))) {
			r = STORE_E_INVAL; /* an owner key that is no id: a damaged store */
			break;
		}
		uint64_t num;
		struct store_conv conv;
		if ((r = conv_load(x, id, &num, &conv)) != 0 ||
		    (r = fn(arg, k.mv_data, k.mv_size, conv.lease, o.expires_at)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (r)
		return r;
	return rc == MDB_NOTFOUND ? 0 : fail(x, map_err(rc));
}

/* One node: nobody else to tell (store.h). */
int store_notify(store_txn *x, const char *node, const char *conv)
{
	(void)x;
	(void)node;
	(void)conv;
	return 0;
}

int store_notify_msg(store_txn *x, const char *node, const char *msg)
{
	(void)x;
	(void)node;
	(void)msg;
	return 0;
}

/* ---- runs ------------------------------------------------------------ */

int store_run_put(store_txn *x, const char *conv, const struct store_run *r)
{
	uint64_t num;
	int err = conv_num(x, conv, &num);
	if (err)
		return err;
	msgpack_packer *pk = rec(x);
	msgpack_pack_array(pk, 12);
	msgpack_pack_uint64(pk, (uint64_t)r->status);
	msgpack_pack_uint64(pk, r->attempt);
	msgpack_pack_uint64(pk, r->from_seq);
	msgpack_pack_uint64(pk, r->to_seq);
	msgpack_pack_uint64(pk, r->first_seq);
	msgpack_pack_uint64(pk, r->last_seq);
	pack_strn(x, r->model.ptr, r->model.len);
	msgpack_pack_uint64(pk, r->usage.input_tokens);
	msgpack_pack_uint64(pk, r->usage.output_tokens);
	msgpack_pack_double(pk, r->usage.cost);
	msgpack_pack_int64(pk, r->started_at);
	msgpack_pack_int64(pk, r->ended_at);
	unsigned char k[16];
	key2(k, num, r->id);
	return put(x, x->s->runs, k, 16, 0);
}

static int run_decode(const MDB_val *k, const MDB_val *v, struct store_run *r)
{
	struct mp m;
	uint32_t n;
	uint64_t st, att;
	memset(r, 0, sizeof *r);
	if (k->mv_size != 16)
		return STORE_E_CORRUPT;
	r->id = get_be64((const unsigned char *)k->mv_data + 8);
	mp_init(&m, v->mv_data, v->mv_size);
	if (mp_array(&m, &n) || n != 12 || mp_uint(&m, &st) || st > STORE_RUN_INTERRUPTED || mp_uint(&m, &att) ||
	    att == 0 || att > UINT32_MAX || mp_uint(&m, &r->from_seq) || mp_uint(&m, &r->to_seq) ||
	    mp_uint(&m, &r->first_seq) || mp_uint(&m, &r->last_seq) || mp_bytes(&m, &r->model) ||
	    mp_uint(&m, &r->usage.input_tokens) || mp_uint(&m, &r->usage.output_tokens) ||
	    mp_double(&m, &r->usage.cost) || mp_int(&m, &r->started_at) || mp_int(&m, &r->ended_at) || m.p != m.end)
		return STORE_E_CORRUPT;
	r->status = (int)st;
	r->attempt = (uint32_t)att;
	return 0;
}

int store_run_get(store_txn *x, const char *conv, uint64_t id, struct store_run *out)
{
	uint64_t num;
	int err = conv_num(x, conv, &num);
	if (err)
		return err;
	unsigned char k[16];
	key2(k, num, id);
	MDB_val key = { 16, k }, v;
	if ((err = get(x, x->s->runs, k, 16, &v)) != 0)
		return err;
	return run_decode(&key, &v, out) ? fail(x, STORE_E_CORRUPT) : 0;
}

int store_runs_list(store_txn *x, const char *conv, uint64_t before, size_t limit,
		    int (*fn)(void *, const struct store_run *), void *arg, int *more)
{
	uint64_t num;
	if (more)
		*more = 0;
	int err = conv_num(x, conv, &num);
	if (err || x->s->runs == DBI_ABSENT) /* a store from before runs, opened read-only: none */
		return err;
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->runs, &c);
	if (rc)
		return fail(x, map_err(rc));
	/* Newest first: from the first key at or past (num, before) (or the
	 * next conversation's first), step back while the prefix is num. */
	unsigned char from[16];
	if (before)
		key2(from, num, before);
	else
		key2(from, num + 1, 0);
	MDB_val k = { 16, from }, v;
	rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
	rc = mdb_cursor_get(c, &k, &v, rc == MDB_NOTFOUND ? MDB_LAST : MDB_PREV);
	size_t n = 0;
	err = 0;
	for (; rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_PREV)) {
		if (k.mv_size != 16 || get_be64(k.mv_data) != num)
			break;
		if (limit && n == limit) {
			if (more)
				*more = 1;
			break;
		}
		struct store_run r;
		if (run_decode(&k, &v, &r)) {
			err = fail(x, STORE_E_CORRUPT);
			break;
		}
		n++;
		if ((err = fn(arg, &r)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (!err && rc && rc != MDB_NOTFOUND)
		err = fail(x, map_err(rc));
	return err;
}

/* ---- logs that begin after seq 1 --------------------------------------- */

int store_conv_create_at(store_txn *x, const char *id, store_bytes settings, uint64_t first_seq)
{
	uint64_t num;
	int err = conv_num(x, id, &num);
	if (err == 0)
		return STORE_E_CONFLICT;
	if (err != STORE_E_NOTFOUND)
		return err;
	if ((err = conv_insert(x, id, settings, &num)) != 0 || first_seq == 1)
		return err;
	unsigned char k[8];
	put_be64(k, num);
	struct conv_ent *e;
	if ((err = put_uint(x, x->s->log_starts, k, 8, first_seq)) != 0 || (err = conv_find(x, id, &num, &e)) != 0)
		return err;
	if (e) {
		e->last = first_seq - 1;
		e->has_last = 1;
	}
	return 0;
}

int store_event_first_seq(store_txn *x, const char *conv, uint64_t *seq)
{
	uint64_t num, base;
	int err = conv_num(x, conv, &num);
	if (err || (err = log_base(x, num, &base)))
		return err;
	*seq = base + 1;
	return 0;
}

/* ---- every run row (store_runs_each) ------------------------------------ */

int store_runs_each(store_txn *x, int (*fn)(void *arg, store_bytes conv, const struct store_run *r), void *arg)
{
	if (x->s->runs == DBI_ABSENT) /* a store from before runs, opened read-only: none */
		return 0;
	MDB_cursor *c;
	int rc = mdb_cursor_open(x->t, x->s->runs, &c);
	if (rc)
		return fail(x, map_err(rc));
	MDB_val k, v;
	uint64_t num = 0;
	store_bytes conv = { NULL, 0 };
	int err = 0, have = 0, unnamed = 0;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		struct store_run r;
		if (run_decode(&k, &v, &r)) {
			err = fail(x, STORE_E_CORRUPT);
			break;
		}
		if (!have || get_be64(k.mv_data) != num) {
			/* The conversation these rows are under: its record's id,
			 * none when no record has the number. A record that
			 * cannot be decoded names nobody: its rows are passed
			 * over (the record's damage is its reader's to report). */
			unsigned char ck[8];
			MDB_val cv;
			struct store_conv cr;
			num = get_be64(k.mv_data);
			have = 1;
			memcpy(ck, k.mv_data, 8);
			conv = (store_bytes){ NULL, 0 };
			unnamed = 0;
			err = get(x, x->s->convs, ck, 8, &cv);
			if (err == STORE_E_NOTFOUND)
				err = 0;
			else if (err)
				break;
			else if (conv_decode(&cv, &cr))
				unnamed = 1;
			else
				conv = cr.id;
		}
		if (unnamed)
			continue;
		if ((err = fn(arg, conv, &r)) != 0)
			break;
	}
	mdb_cursor_close(c);
	if (!err && rc && rc != MDB_NOTFOUND)
		err = fail(x, map_err(rc));
	return err;
}

/* ---- several conversations locked at once (store_convs_lock) ----------- */

int store_convs_lock(store_txn *x, const char *const *ids, size_t n)
{
	/* One writer at a time: every conversation is the writer's already. */
	return 0;
}

/* ---- the backend's table (store/store.c) -------------------------------- */

#define LMDB_ENTRY(name, params, args) .name = lmdb_store_##name,
const struct store_vt store_lmdb_vt = {
	STORE_VT_INIT(lmdb, "lmdb"),
	STORE_TXN_FUNCS(LMDB_ENTRY)
};
