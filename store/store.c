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
