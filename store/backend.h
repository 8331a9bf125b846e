/*
 * backend.h: how a store backend plugs in behind store.h (store/store.c
 * dispatches). Not a contract for anything above the store.
 *
 * A backend's store begins with a pointer to its table (struct store_hdr),
 * its store_txn with struct store_txn_hdr (the table, the mode, the poison),
 * so store.c finds the backend of any handle. The functions store.c
 * dispatches per backend are listed once here; a backend defines them under
 * its own prefix and exports its table.
 *
 * Who checks what: store.c checks every argument store.h states a rule for
 * (NULL pointers, ids, msgpack, modes, ranges) and the transaction's state
 * (given, not poisoned, a write one for a write) before it calls a backend,
 * so a backend's function is only ever called with arguments that pass
 * them. A backend checks what only its storage knows: the data (a
 * conversation absent, a seq past the last), its handle's state (read-only,
 * a write transaction already open, a reader limit, a listener) and its own
 * limits (PostgreSQL's bigint columns); it records an error on a write
 * transaction with store_txn_poison.
 */
#ifndef AGENTD_STORE_BACKEND_H
#define AGENTD_STORE_BACKEND_H

#include "store/store.h"
#include "common/mp.h"

#include <string.h>
#include <time.h>

/* Every transaction operation that returns int with the txn first. */
#define STORE_TXN_FUNCS(X) \
	X(txn_commit, (store_txn *x), (x)) \
	X(conv_create, (store_txn *x, const char *id, store_bytes settings), (x, id, settings)) \
	X(conv_get, (store_txn *x, const char *id, struct store_conv *out), (x, id, out)) \
	X(conv_put, (store_txn *x, const char *id, const struct store_conv_patch *p), (x, id, p)) \
	X(conv_list, (store_txn *x, int status, const char *after, size_t limit, store_conv_fn fn, void *arg, \
		      int *more), (x, status, after, limit, fn, arg, more)) \
	X(conv_ids, (store_txn *x, store_conv_id_fn fn, void *arg), (x, fn, arg)) \
	X(conv_find, (store_txn *x, const struct store_conv_filter *f, const char *after, size_t limit, \
		      store_conv_fn fn, void *arg, int *more), (x, f, after, limit, fn, arg, more)) \
	X(conv_delete, (store_txn *x, const char *id), (x, id)) \
	X(lease_next, (store_txn *x, const char *id, uint64_t *gen), (x, id, gen)) \
	X(lease_check, (store_txn *x, const char *id, uint64_t gen), (x, id, gen)) \
	X(usage_add, (store_txn *x, const char *id, const struct store_usage *u), (x, id, u)) \
	X(turns_add, (store_txn *x, const char *id, uint64_t n), (x, id, n)) \
	X(node_beat, (store_txn *x, const char *node, int64_t ttl_ms, uint64_t *leases), (x, node, ttl_ms, leases)) \
	X(node_leave, (store_txn *x, const char *node), (x, node)) \
	X(nodes_list, (store_txn *x, int (*fn)(void *arg, const struct store_node *n), void *arg), (x, fn, arg)) \
	X(conv_owner, (store_txn *x, const char *id, struct store_owner *out), (x, id, out)) \
	X(conv_claim, (store_txn *x, const char *id, const char *node, int64_t ttl_ms, uint64_t *gen), \
	  (x, id, node, ttl_ms, gen)) \
	X(conv_release, (store_txn *x, const char *id, const char *node, uint64_t gen), (x, id, node, gen)) \
	X(notify, (store_txn *x, const char *node, const char *conv), (x, node, conv)) \
	X(notify_msg, (store_txn *x, const char *node, const char *msg), (x, node, msg)) \
	X(expiries_claim, (store_txn *x, int64_t now_ms, size_t limit, \
			   int (*fn)(void *arg, const struct store_expiry *e), void *arg), (x, now_ms, limit, fn, arg)) \
	X(convs_claimable, (store_txn *x, unsigned mask, size_t limit, store_conv_id_fn fn, void *arg), \
	  (x, mask, limit, fn, arg)) \
	X(node_leases, (store_txn *x, const char *node, \
			int (*fn)(void *arg, const char *id, size_t len, uint64_t gen, int64_t expires_at), \
			void *arg), (x, node, fn, arg)) \
	X(events_append, (store_txn *x, const char *conv, const struct store_event_in *ev, size_t n, \
			  uint64_t *seqs, int *dups), (x, conv, ev, n, seqs, dups)) \
	X(event_latest_seq, (store_txn *x, const char *conv, uint64_t *seq), (x, conv, seq)) \
	X(event_id_seq, (store_txn *x, const char *conv, const char *event_id, size_t len, uint64_t *seq), \
	  (x, conv, event_id, len, seq)) \
	X(event_ids_each, (store_txn *x, const char *conv, \
			   int (*fn)(void *arg, const char *event_id, size_t len, uint64_t seq), void *arg), \
	  (x, conv, fn, arg)) \
	X(events_stream, (store_txn *x, const char *conv, const struct store_range *r, store_event_fn fn, \
			  void *arg), (x, conv, r, fn, arg)) \
	X(summary_put, (store_txn *x, const char *conv, uint64_t from_seq, uint64_t to_seq, \
			store_bytes content, uint64_t *version), (x, conv, from_seq, to_seq, content, version)) \
	X(summary_latest, (store_txn *x, const char *conv, struct store_summary *out), (x, conv, out)) \
	X(load_since, (store_txn *x, const char *conv, struct store_summary *sum, int *has_summary, \
		       store_event_fn fn, void *arg), (x, conv, sum, has_summary, fn, arg)) \
	X(conv_create_at, (store_txn *x, const char *id, store_bytes settings, uint64_t first_seq), \
	  (x, id, settings, first_seq)) \
	X(event_first_seq, (store_txn *x, const char *conv, uint64_t *seq), (x, conv, seq)) \
	X(runs_each, (store_txn *x, int (*fn)(void *arg, store_bytes conv, const struct store_run *r), void *arg), \
	  (x, fn, arg)) \
	X(tool_call_upsert, (store_txn *x, const char *conv, const struct store_tool_call_in *tc), (x, conv, tc)) \
	X(tool_call_get, (store_txn *x, const char *id, struct store_tool_call *out), (x, id, out)) \
	X(tool_calls_list, (store_txn *x, const char *conv, unsigned mask, \
			    int (*fn)(void *arg, const struct store_tool_call *tc), void *arg), \
	  (x, conv, mask, fn, arg)) \
	X(tool_calls_each, (store_txn *x, int (*fn)(void *arg, const struct store_tool_call *tc), void *arg), \
	  (x, fn, arg)) \
	X(tool_call_attempt, (store_txn *x, const char *id, uint32_t *attempts), (x, id, attempts)) \
	X(tool_call_unknown, (store_txn *x, const char *id, int unknown), (x, id, unknown)) \
	X(tool_call_resolve, (store_txn *x, const char *id, int status, store_bytes result, char *conv), \
	  (x, id, status, result, conv)) \
	X(expiry_schedule, (store_txn *x, const char *tool_call_id, int64_t deadline_ms), \
	  (x, tool_call_id, deadline_ms)) \
	X(expiry_cancel, (store_txn *x, const char *tool_call_id), (x, tool_call_id)) \
	X(expiry_drop, (store_txn *x, int64_t deadline_ms, const char *tool_call_id), \
	  (x, deadline_ms, tool_call_id)) \
	X(expiries_due, (store_txn *x, int64_t now_ms, int (*fn)(void *arg, const struct store_expiry *e), \
			 void *arg), (x, now_ms, fn, arg)) \
	X(expiry_earliest, (store_txn *x, int64_t *deadline_ms), (x, deadline_ms)) \
	X(warning_schedule, (store_txn *x, const char *tool_call_id, int64_t at_ms), (x, tool_call_id, at_ms)) \
	X(warning_drop, (store_txn *x, const char *tool_call_id), (x, tool_call_id)) \
	X(warnings_due, (store_txn *x, int64_t now_ms, int (*fn)(void *arg, const struct store_expiry *e), \
			 void *arg), (x, now_ms, fn, arg)) \
	X(warning_earliest, (store_txn *x, int64_t *at_ms), (x, at_ms)) \
	X(schedule_put, (store_txn *x, const char *id, const char *conv, int64_t due_ms, const char *cron, \
			 store_bytes text), (x, id, conv, due_ms, cron, text)) \
	X(schedule_get, (store_txn *x, const char *id, struct store_schedule *out), (x, id, out)) \
	X(schedule_move, (store_txn *x, const char *id, int64_t due_ms), (x, id, due_ms)) \
	X(schedule_drop, (store_txn *x, const char *id), (x, id)) \
	X(schedules_list, (store_txn *x, const char *conv, int (*fn)(void *arg, const struct store_schedule *s), \
			   void *arg), (x, conv, fn, arg)) \
	X(schedules_due, (store_txn *x, int64_t now_ms, size_t limit, \
			  int (*fn)(void *arg, const struct store_schedule *s), void *arg), (x, now_ms, limit, fn, arg)) \
	X(schedule_earliest, (store_txn *x, int64_t *due_ms), (x, due_ms)) \
	X(model_call_put, (store_txn *x, const char *conv, const struct store_model_call_in *mc), (x, conv, mc)) \
	X(model_calls_list, (store_txn *x, const char *conv, \
			     int (*fn)(void *arg, const struct store_model_call *mc), void *arg), (x, conv, fn, arg)) \
	X(model_calls_gc, (store_txn *x, const char *conv, int64_t ttl_ms, uint64_t *removed), \
	  (x, conv, ttl_ms, removed)) \
	X(run_put, (store_txn *x, const char *conv, const struct store_run *r), (x, conv, r)) \
	X(run_get, (store_txn *x, const char *conv, uint64_t id, struct store_run *out), (x, conv, id, out)) \
	X(runs_list, (store_txn *x, const char *conv, uint64_t before, size_t limit, \
		      int (*fn)(void *arg, const struct store_run *r), void *arg, int *more), \
	  (x, conv, before, limit, fn, arg, more)) \
	X(summaries_list, (store_txn *x, const char *conv, int (*fn)(void *arg, const struct store_summary *s), \
			   void *arg), (x, conv, fn, arg)) \
	X(summary_restore, (store_txn *x, const char *conv, const struct store_summary *s), (x, conv, s)) \
	X(convs_lock, (store_txn *x, const char *const *ids, size_t n), (x, ids, n))

#define STORE_VT_FIELD(name, params, args) int (*name) params;

struct store_vt {
	const char *name; /* "lmdb", "postgresql" */
	int (*open)(store **out, const char *target, const struct store_opts *opts);
	void (*close)(store *s);
	int (*sync)(store *s);
	int (*reader_check)(store *s, int *cleared);
	int (*stat)(store *s, struct store_stat *st);
	size_t (*map_size)(store *s);
	int (*reserve)(store *s, size_t bytes);
	int64_t (*now)(store *s);
	int (*txn_begin)(store *s, int mode, store_txn **out);
	void (*txn_abort)(store_txn *x);
	int64_t (*txn_now)(store_txn *x);
	uint64_t (*txn_id)(store_txn *x);
	uint64_t (*last_id)(store *s);
	int (*flush)(store *s);
	int (*backup)(store *s, const char *dir);
	STORE_TXN_FUNCS(STORE_VT_FIELD)
};

/* What every backend's store begins with. */
struct store_hdr {
	const struct store_vt *vt;
};

/* What every backend's store_txn begins with (a member named h): store.c
 * reads the mode and the poison to check a call before it dispatches. */
struct store_txn_hdr {
	const struct store_vt *vt;
	int write; /* a write transaction */
	int err;   /* poisoned: the first fatal error, returned from then on */
};

/* Record err on h: on a write transaction an error other than those that
 * write nothing (store.h: NOTFOUND, STALE, CONFLICT, FENCED, INVAL) poisons
 * it, the first one staying. Returns err. */
int store_txn_poison(struct store_txn_hdr *h, int err);

/* A backend defines its functions as PREFIX_store_* (store/backend_names.h
 * renames them in its file) and fills its table with STORE_VT_INIT and
 * STORE_TXN_FUNCS. */
#define STORE_VT_INIT(prefix, label) \
	.name = label, .open = prefix##_store_open, .close = prefix##_store_close, .sync = prefix##_store_sync, \
	.reader_check = prefix##_store_reader_check, .stat = prefix##_store_stat, \
	.map_size = prefix##_store_map_size, .reserve = prefix##_store_reserve, .now = prefix##_store_now, \
	.txn_begin = prefix##_store_txn_begin, .txn_abort = prefix##_store_txn_abort, \
	.txn_now = prefix##_store_txn_now, .txn_id = prefix##_store_txn_id, .last_id = prefix##_store_last_id, \
	.flush = prefix##_store_flush, .backup = prefix##_store_backup

int lmdb_store_stat(store *s, struct store_stat *st);
int lmdb_store_sync(store *s);
int pg_store_stat(store *s, struct store_stat *st);
int pg_store_sync(store *s);
/* PostgreSQL only (store.c answers for LMDB): store_listen, store_notified. */
int pg_store_listen(store *s, const char *node, int *fd);
int pg_store_notified(store *s, int (*fn)(void *arg, const char *conv, size_t len), void *arg);

extern const struct store_vt store_lmdb_vt;
extern const struct store_vt store_pg_vt;

/* Metadata pairs in stored order (store.c): 0, fn's non-zero return, or -1
 * when m is not valid metadata (store_meta_valid). */
int store_meta_each(store_bytes m, int (*fn)(void *arg, const char *k, size_t kl, const char *v, size_t vl),
		    void *arg);

/* ---- what both backends compute alike ---- */

/* Usage counters saturate at INT64_MAX (both backends store them signed). */
static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > (uint64_t)INT64_MAX || b > (uint64_t)INT64_MAX - a ? (uint64_t)INT64_MAX : a + b;
}

/* Settings nobody gave: an empty map. */
static const unsigned char empty_map[1] = { 0x80 };

static inline int64_t clock_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Is target one for the PostgreSQL backend: a postgresql:// or postgres://
 * URI, or a libpq key=value conninfo starting with host= or dbname=? */
int store_target_is_pg(const char *target);
/* A backend's reason for a failed open, for store_open_error(). */
void store_open_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
