/*
 * store.c: the store contract (store.h) dispatched to its backend, chosen at
 * run time by the target store_open is given: a PostgreSQL connection
 * string goes to store_pg.c, anything else is an LMDB directory
 * (store_lmdb.c). Each handle and transaction begins with its backend's
 * table (store/backend.h), so nothing above store.h knows which one runs.
 *
 * Built without PostgreSQL (STORE_NO_PG: the statically linked worker),
 * a PostgreSQL target is refused with -EPROTONOSUPPORT.
 */
#include "store/store.h"
#include "store/backend.h"
#include "common/mp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define VT(h) (((const struct store_hdr *)(const void *)(h))->vt)

int store_target_is_pg(const char *t)
{
	if (!t)
		return 0;
	return strncmp(t, "postgresql://", 13) == 0 || strncmp(t, "postgres://", 11) == 0 ||
	       strncmp(t, "host=", 5) == 0 || strncmp(t, "dbname=", 7) == 0;
}

static char open_err[512];

const char *store_open_error(void)
{
	return open_err;
}

void store_open_error_set(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(open_err, sizeof open_err, fmt, ap);
	va_end(ap);
	/* libpq's messages end in a newline, some in two lines: one line. */
	size_t n = strlen(open_err);
	while (n && (open_err[n - 1] == '\n' || open_err[n - 1] == ' '))
		open_err[--n] = 0;
	char *w = open_err;
	for (char *p = open_err; *p; p++) {
		char ch = *p == '\n' || *p == '\t' ? ' ' : *p;
		if (ch == ' ' && w > open_err && w[-1] == ' ')
			continue;
		*w++ = ch;
	}
	*w = 0;
}

int store_open(store **out, const char *target, const struct store_opts *opts)
{
	open_err[0] = 0;
	if (store_target_is_pg(target)) {
#ifdef STORE_NO_PG
		(void)out;
		(void)opts;
		store_open_error_set("this program was built without PostgreSQL (the statically linked "
				     "agentd-worker: PostgreSQL stores need agentd-worker-dynamic)");
		return -EPROTONOSUPPORT;
#else
		return store_pg_vt.open(out, target, opts);
#endif
	}
	return store_lmdb_vt.open(out, target, opts);
}

void store_close(store *s)
{
	if (s)
		VT(s)->close(s);
}

int store_sync(store *s)
{
	return s ? VT(s)->sync(s) : STORE_E_INVAL;
}

int store_flush(store *s)
{
	return s ? VT(s)->flush(s) : STORE_E_INVAL;
}

uint64_t store_last_id(store *s)
{
	return s ? VT(s)->last_id(s) : 0;
}

int store_backup(store *s, const char *dir)
{
	return s && dir ? VT(s)->backup(s, dir) : STORE_E_INVAL;
}

int store_reader_check(store *s, int *cleared)
{
	return s ? VT(s)->reader_check(s, cleared) : STORE_E_INVAL;
}

int store_stat(store *s, struct store_stat *st)
{
	return s ? VT(s)->stat(s, st) : STORE_E_INVAL;
}

size_t store_map_size(store *s)
{
	return s ? VT(s)->map_size(s) : 0;
}

int store_reserve(store *s, size_t bytes)
{
	return s ? VT(s)->reserve(s, bytes) : STORE_E_INVAL;
}

int64_t store_now(store *s)
{
	return VT(s)->now(s);
}

int store_txn_begin(store *s, int mode, store_txn **out)
{
	if (out)
		*out = NULL; /* a failed begin leaves nothing to abort */
	return s ? VT(s)->txn_begin(s, mode, out) : STORE_E_INVAL;
}

void store_txn_abort(store_txn *x)
{
	if (x)
		VT(x)->txn_abort(x);
}

int64_t store_txn_now(store_txn *x)
{
	return VT(x)->txn_now(x);
}

/* Only PostgreSQL has other nodes to hear from (store.h). */
int store_listen(store *s, const char *node, int *fd)
{
	if (!s || !fd)
		return STORE_E_INVAL;
#ifndef STORE_NO_PG
	if (VT(s) == &store_pg_vt)
		return pg_store_listen(s, node, fd);
#endif
	(void)node;
	return -EOPNOTSUPP;
}

int store_notified(store *s, int (*fn)(void *arg, const char *conv, size_t len), void *arg)
{
	if (!s || !fn)
		return STORE_E_INVAL;
#ifndef STORE_NO_PG
	if (VT(s) == &store_pg_vt)
		return pg_store_notified(s, fn, arg);
#endif
	(void)arg;
	return STORE_E_INVAL;
}

uint64_t store_txn_id(store_txn *x)
{
	return x ? VT(x)->txn_id(x) : 0;
}

#define DISPATCH(name, params, args) \
	int store_##name params \
	{ \
		return x ? VT(x)->name args : STORE_E_INVAL; \
	}
STORE_TXN_FUNCS(DISPATCH)

/* ---- metadata and filters, the same for every backend ---------------- */

/* Walk metadata m: fn gets each pair; 0, fn's return, or -1 when m is not
 * metadata within the bounds (store.h). */
static int meta_walk(store_bytes m, int (*fn)(void *arg, const char *k, size_t kl, const char *v, size_t vl),
		     void *arg)
{
	if (m.len == 0)
		return 0;
	if (!m.ptr || !mp_valid_one(m.ptr, m.len))
		return -1;
	struct mp p;
	uint32_t n;
	mp_init(&p, m.ptr, m.len);
	if (mp_map(&p, &n) || n > STORE_META_MAX)
		return -1;
	const char *keys[STORE_META_MAX];
	size_t lens[STORE_META_MAX];
	for (uint32_t i = 0; i < n; i++) {
		const char *k, *v;
		size_t kl, vl;
		if (mp_str(&p, &k, &kl) || mp_str(&p, &v, &vl) || kl == 0 || kl > STORE_META_KEY_MAX ||
		    vl > STORE_META_VAL_MAX || memchr(k, 0, kl) || memchr(v, 0, vl))
			return -1;
		for (uint32_t j = 0; j < i; j++)
			if (lens[j] == kl && memcmp(keys[j], k, kl) == 0)
				return -1;
		keys[i] = k;
		lens[i] = kl;
		if (fn) {
			int r = fn(arg, k, kl, v, vl);
			if (r)
				return r;
		}
	}
	return p.p == p.end ? 0 : -1;
}

int store_meta_valid(store_bytes m)
{
	return meta_walk(m, NULL, NULL) == 0;
}

int store_meta_each(store_bytes m, int (*fn)(void *arg, const char *k, size_t kl, const char *v, size_t vl),
		    void *arg)
{
	return meta_walk(m, fn, arg);
}

static int kv_ok(const struct store_kv *kv)
{
	return kv->key.ptr && kv->key.len >= 1 && kv->key.len <= STORE_META_KEY_MAX &&
	       !memchr(kv->key.ptr, 0, kv->key.len) && (kv->value.ptr || kv->value.len == 0) &&
	       kv->value.len <= STORE_META_VAL_MAX && (!kv->value.len || !memchr(kv->value.ptr, 0, kv->value.len));
}

int store_filter_valid(const struct store_conv_filter *f)
{
	if (!f)
		return 1;
	if (f->status != -1 && !store_status_name(f->status))
		return 0;
	if (f->nmeta && !f->meta)
		return 0;
	for (size_t i = 0; i < f->nmeta; i++)
		if (!kv_ok(&f->meta[i]))
			return 0;
	return 1;
}

struct meta_find {
	const struct store_kv *kv;
	int found;
};

static int meta_find_one(void *arg, const char *k, size_t kl, const char *v, size_t vl)
{
	struct meta_find *m = arg;
	if (kl == m->kv->key.len && memcmp(k, m->kv->key.ptr, kl) == 0) {
		m->found = vl == m->kv->value.len && (vl == 0 || memcmp(v, m->kv->value.ptr, vl) == 0);
		return 1; /* keys are unique: no need to read on */
	}
	return 0;
}

int store_filter_match(const struct store_conv_filter *f, const struct store_conv *c)
{
	if (!f)
		return 1;
	if (f->status != -1 && c->status != f->status)
		return 0;
	if (f->updated_after && !(c->updated_at > f->updated_after))
		return 0;
	if (f->updated_before && !(c->updated_at < f->updated_before))
		return 0;
	for (size_t i = 0; i < f->nmeta; i++) {
		struct meta_find m = { &f->meta[i], 0 };
		if (meta_walk(c->metadata, meta_find_one, &m) < 0)
			return STORE_E_CORRUPT;
		if (!m.found)
			return 0;
	}
	return 1;
}
