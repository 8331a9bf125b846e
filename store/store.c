/*
 * store.c: the store contract (store.h) checked, then dispatched to its
 * backend, chosen at run time by the target store_open is given: a
 * PostgreSQL connection string goes to store_pg.c, anything else is an LMDB
 * directory (store_lmdb.c). Each handle and transaction begins with its
 * backend's table (store/backend.h), so nothing above store.h knows which
 * one runs.
 *
 * Every public store_* function checks here, once for both backends, what
 * store.h's rules say of its arguments and of the transaction (given, not
 * poisoned, a write one for a write), then calls the backend through its
 * table: a backend never sees a call that fails them. The backend-neutral
 * parts live here too: error texts, status names, the id and metadata
 * rules, the filter test.
 *
 * Built without PostgreSQL (STORE_NO_PG: the statically linked worker),
 * a PostgreSQL target is refused with -EPROTONOSUPPORT.
 */
#include "store/store.h"
#include "store/backend.h"
#include "common/id.h"
#include "common/mp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define VT(s) (((const struct store_hdr *)(const void *)(s))->vt)
#define TXN(x) ((struct store_txn_hdr *)(void *)(x)) /* its first member */

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

/* ---- names and texts, the same for every backend ---------------------- */

const char *store_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	case STORE_E_NOTFOUND: return "not found";
	case STORE_E_STALE: return "tool call is not pending";
	case STORE_E_FENCED: return "writer lease superseded (fenced)";
	case STORE_E_CONFLICT: return "already exists";
	case STORE_E_FULL: return "store full";
	case STORE_E_CORRUPT: return "corrupt record";
	case STORE_E_INDOUBT: return "the connection was lost during the commit: it may or may not be written";
	case STORE_E_INVAL: return "invalid argument";
	case -EROFS: return "read-only: the store refuses writes"; /* a read-only database, or file system */
	}
	return err < 0 ? strerror(-err) : "unknown error";
}

int store_id_valid(const char *id, size_t len)
{
	return id_valid(id, len);
}

static const char *const tc_status_names[] = { "pending", "resolved", "errored", "expired", "cancelled", "unknown" };
static const char *const status_names[] = { "idle", "active", "suspended", "ended", "paused" };
static const char *const run_status_names[] = { "running", "completed", "failed", "cancelled", "interrupted" };

static int name_parse(const char *const *names, int n, const char *s, size_t len)
{
	for (int i = 0; s && i < n; i++)
		if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
			return i;
	return -1;
}

const char *store_tc_status_name(int st) { return st >= 0 && st <= STORE_TC_UNKNOWN ? tc_status_names[st] : NULL; }
int store_tc_status_parse(const char *s, size_t len) { return name_parse(tc_status_names, 6, s, len); }
const char *store_run_status_name(int st) { return st >= 0 && st <= STORE_RUN_INTERRUPTED ? run_status_names[st] : NULL; }
const char *store_status_name(int st) { return st >= 0 && st <= STORE_STATUS_MAX ? status_names[st] : NULL; }
int store_status_parse(const char *s, size_t len) { return name_parse(status_names, STORE_STATUS_MAX + 1, s, len); }

/* ---- the argument rules of store.h, one copy ------------------------- */

static int id_ok(const char *id)
{
	return id && store_id_valid(id, strnlen(id, STORE_ID_MAX + 1));
}

/* Optional msgpack: len 0 means nil; otherwise it must be one object. */
static int opt_mp_ok(store_bytes b)
{
	return b.len == 0 || (b.ptr && mp_valid_one(b.ptr, b.len));
}

/* Required msgpack: exactly one object. */
static int mp_ok(store_bytes b)
{
	return b.ptr && mp_valid_one(b.ptr, b.len);
}

/* Settings: one msgpack map. */
static int settings_ok(store_bytes b)
{
	struct mp m;
	uint32_t n;
	if (!mp_ok(b))
		return 0;
	mp_init(&m, b.ptr, b.len);
	return mp_map(&m, &n) == 0;
}

/* An event type: 1 to 32 of [a-z_]. */
static int type_ok(const char *t)
{
	if (!t)
		return 0;
	size_t n = strnlen(t, 33);
	if (n == 0 || n > 32)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((t[i] >= 'a' && t[i] <= 'z') || t[i] == '_'))
			return 0;
	return 1;
}

static int event_in_ok(const struct store_event_in *ev)
{
	if (!ev || !type_ok(ev->type) || !mp_ok(ev->content))
		return 0;
	if (ev->event_id) {
		size_t n = strnlen(ev->event_id, STORE_EVENT_ID_MAX + 1);
		if (n == 0 || n > STORE_EVENT_ID_MAX)
			return 0;
	}
	return 1;
}

/* An event id given by length: 1-STORE_EVENT_ID_MAX bytes, no NUL. */
static int event_id_ok(const char *event_id, size_t len)
{
	return event_id && len && len <= STORE_EVENT_ID_MAX && !memchr(event_id, 0, len);
}

/* A lease or heartbeat time: positive, and far from overflowing a deadline. */
static int ttl_ok(int64_t ttl_ms)
{
	return ttl_ms > 0 && ttl_ms <= INT64_MAX / 4;
}

/* A message a node's listener takes for one (store.h): printable ASCII,
 * shorter than STORE_NOTIFY_MSG_MAX, with a space. */
static int notify_msg_ok(const char *msg)
{
	size_t n = 0;
	int space = 0;
	if (!msg)
		return 0;
	for (; msg[n]; n++) {
		if ((unsigned char)msg[n] < 0x20 || (unsigned char)msg[n] > 0x7e || n >= STORE_NOTIFY_MSG_MAX)
			return 0;
		space |= msg[n] == ' ';
	}
	return n > 0 && space;
}

static int patch_ok(const struct store_conv_patch *p)
{
	return p && (!(p->set & STORE_SET_SETTINGS) || settings_ok(p->settings)) &&
	       (!(p->set & STORE_SET_STATUS) || store_status_name(p->status)) &&
	       (!(p->set & STORE_SET_FSM) || opt_mp_ok(p->fsm_state)) &&
	       (!(p->set & STORE_SET_METADATA) || store_meta_valid(p->metadata));
}

static int events_ok(const struct store_event_in *ev, size_t n)
{
	if (!ev && n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!event_in_ok(&ev[i]))
			return 0;
	return 1;
}

/* A summary's range and content (to_seq past the last seq is the
 * backend's to say). */
static int summary_ok(uint64_t from_seq, uint64_t to_seq, store_bytes content)
{
	return to_seq != 0 && from_seq <= to_seq && mp_ok(content);
}

static int tool_call_in_ok(const struct store_tool_call_in *in)
{
	size_t nl = in && in->name ? strnlen(in->name, 129) : 0;
	return in && id_ok(in->id) && nl >= 1 && nl <= 128 &&
	       (in->executor == STORE_EXEC_SERVER || in->executor == STORE_EXEC_HUMAN) && mp_ok(in->args) &&
	       opt_mp_ok(in->prompt);
}

static int model_call_in_ok(const struct store_model_call_in *mc)
{
	return mc && mc->model && mp_ok(mc->rendered) && mc->usage.cost >= 0;
}

static int run_ok(const struct store_run *r)
{
	return r && r->id && r->id <= INT64_MAX && store_run_status_name(r->status) && r->attempt &&
	       r->model.ptr && r->usage.cost >= 0 && r->usage.input_tokens <= INT64_MAX &&
	       r->usage.output_tokens <= INT64_MAX;
}

static int ids_ok(const char *const *ids, size_t n)
{
	if (!ids && n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!id_ok(ids[i]))
			return 0;
	return 1;
}

static int filter_valid(const struct store_conv_filter *f);

/* ---- the handle ------------------------------------------------------ */

int store_open(store **out, const char *target, const struct store_opts *opts)
{
	open_err[0] = 0;
	if (!out || !target)
		return STORE_E_INVAL;
	if (store_target_is_pg(target)) {
#ifdef STORE_NO_PG
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

int store_flushes_locally(store *s)
{
	return s && VT(s) == &store_lmdb_vt;
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
	return s && st ? VT(s)->stat(s, st) : STORE_E_INVAL;
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

/* Only PostgreSQL has other nodes to hear from (store.h). */
int store_listen(store *s, const char *node, int *fd)
{
	if (!s || !fd)
		return STORE_E_INVAL;
#ifndef STORE_NO_PG
	if (VT(s) == &store_pg_vt)
		return id_ok(node) ? pg_store_listen(s, node, fd) : STORE_E_INVAL;
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

/* ---- transactions ---------------------------------------------------- */

/* A mode store_txn_begin takes: read, write or lazy write, FREEING only on
 * a write. */
static int mode_ok(int mode)
{
	int m = mode & ~STORE_WRITE_FREEING;
	return (m == STORE_READ || m == STORE_WRITE || m == STORE_WRITE_LAZY) &&
	       !(m == STORE_READ && (mode & STORE_WRITE_FREEING));
}

int store_txn_begin(store *s, int mode, store_txn **out)
{
	if (out)
		*out = NULL; /* a failed begin leaves nothing to abort */
	return s && out && mode_ok(mode) ? VT(s)->txn_begin(s, mode, out) : STORE_E_INVAL;
}

int store_txn_commit(store_txn *x)
{
	return x ? TXN(x)->vt->txn_commit(x) : STORE_E_INVAL;
}

void store_txn_abort(store_txn *x)
{
	if (x)
		TXN(x)->vt->txn_abort(x);
}

int64_t store_txn_now(store_txn *x)
{
	return TXN(x)->vt->txn_now(x);
}

uint64_t store_txn_id(store_txn *x)
{
	return x ? TXN(x)->vt->txn_id(x) : 0;
}

int store_txn_poison(struct store_txn_hdr *h, int err)
{
	if (h->write && err != 0 && err != STORE_E_NOTFOUND && err != STORE_E_STALE && err != STORE_E_CONFLICT &&
	    err != STORE_E_FENCED && err != STORE_E_INVAL && !h->err)
		h->err = err;
	return err;
}

/* What every operation checks first: a transaction, not poisoned (it
 * returns its poison, store.h); then, when bad (the arguments break a rule
 * of store.h), STORE_E_INVAL. 0 lets the call through to the backend. */
static int read_check(store_txn *x, int bad)
{
	if (!x)
		return STORE_E_INVAL;
	if (TXN(x)->err)
		return TXN(x)->err;
	return bad ? STORE_E_INVAL : 0;
}

/* ... and a write operation a write transaction. */
static int write_check(store_txn *x, int bad)
{
	int err = read_check(x, 0);
	return err ? err : !TXN(x)->write || bad ? STORE_E_INVAL : 0;
}

/* The backend's function `name` of x's table. */
#define BE(x, name) (TXN(x)->vt->name)

/* ---- conversations --------------------------------------------------- */

int store_conv_create(store_txn *x, const char *id, store_bytes settings)
{
	int err = write_check(x, !id_ok(id) || !settings_ok(settings));
	return err ? err : BE(x, conv_create)(x, id, settings);
}

int store_conv_create_at(store_txn *x, const char *id, store_bytes settings, uint64_t first_seq)
{
	int err = write_check(x, !id_ok(id) || !settings_ok(settings) || first_seq == 0 ||
					 first_seq > (uint64_t)INT64_MAX);
	return err ? err : BE(x, conv_create_at)(x, id, settings, first_seq);
}

int store_conv_get(store_txn *x, const char *id, struct store_conv *out)
{
	int err = read_check(x, !out || !id_ok(id));
	return err ? err : BE(x, conv_get)(x, id, out);
}

int store_conv_put(store_txn *x, const char *id, const struct store_conv_patch *p)
{
	int err = write_check(x, !id_ok(id) || !patch_ok(p));
	return err ? err : BE(x, conv_put)(x, id, p);
}

int store_conv_put_fsm(store_txn *x, const char *id, store_bytes fsm_state)
{
	struct store_conv_patch p = { .set = STORE_SET_FSM, .fsm_state = fsm_state };
	return store_conv_put(x, id, &p);
}

int store_conv_list(store_txn *x, int status, const char *after, size_t limit, store_conv_fn fn, void *arg,
		    int *more)
{
	int err = read_check(x, !fn || (status != -1 && !store_status_name(status)) || (after && !id_ok(after)));
	return err ? err : BE(x, conv_list)(x, status, after, limit, fn, arg, more);
}

int store_conv_find(store_txn *x, const struct store_conv_filter *f, const char *after, size_t limit,
		    store_conv_fn fn, void *arg, int *more)
{
	int err = read_check(x, !fn || !filter_valid(f) || (after && !id_ok(after)));
	return err ? err : BE(x, conv_find)(x, f, after, limit, fn, arg, more);
}

int store_conv_ids(store_txn *x, store_conv_id_fn fn, void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, conv_ids)(x, fn, arg);
}

int store_conv_delete(store_txn *x, const char *id)
{
	int err = write_check(x, !id_ok(id));
	return err ? err : BE(x, conv_delete)(x, id);
}

int store_lease_next(store_txn *x, const char *id, uint64_t *gen)
{
	int err = write_check(x, !gen || !id_ok(id));
	return err ? err : BE(x, lease_next)(x, id, gen);
}

int store_lease_check(store_txn *x, const char *id, uint64_t gen)
{
	int err = read_check(x, !id_ok(id));
	return err ? err : BE(x, lease_check)(x, id, gen);
}

int store_usage_add(store_txn *x, const char *id, const struct store_usage *u)
{
	int err = write_check(x, !u || !(u->cost >= 0) || !id_ok(id));
	return err ? err : BE(x, usage_add)(x, id, u);
}

int store_turns_add(store_txn *x, const char *id, uint64_t n)
{
	int err = write_check(x, !id_ok(id));
	return err ? err : BE(x, turns_add)(x, id, n);
}

int store_convs_lock(store_txn *x, const char *const *ids, size_t n)
{
	int err = write_check(x, !ids_ok(ids, n));
	return err ? err : BE(x, convs_lock)(x, ids, n);
}

/* ---- nodes ----------------------------------------------------------- */

int store_node_beat(store_txn *x, const char *node, int64_t ttl_ms, uint64_t *leases)
{
	int err = write_check(x, !id_ok(node) || !ttl_ok(ttl_ms));
	return err ? err : BE(x, node_beat)(x, node, ttl_ms, leases);
}

int store_node_leave(store_txn *x, const char *node)
{
	int err = write_check(x, !id_ok(node));
	return err ? err : BE(x, node_leave)(x, node);
}

int store_nodes_list(store_txn *x, int (*fn)(void *arg, const struct store_node *n), void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, nodes_list)(x, fn, arg);
}

int store_conv_owner(store_txn *x, const char *id, struct store_owner *out)
{
	int err = read_check(x, !out || !id_ok(id));
	return err ? err : BE(x, conv_owner)(x, id, out);
}

int store_conv_claim(store_txn *x, const char *id, const char *node, int64_t ttl_ms, uint64_t *gen)
{
	int err = write_check(x, !gen || !id_ok(id) || !id_ok(node) || !ttl_ok(ttl_ms));
	return err ? err : BE(x, conv_claim)(x, id, node, ttl_ms, gen);
}

int store_conv_release(store_txn *x, const char *id, const char *node, uint64_t gen)
{
	int err = write_check(x, !id_ok(id) || !id_ok(node));
	return err ? err : BE(x, conv_release)(x, id, node, gen);
}

int store_convs_claimable(store_txn *x, unsigned mask, size_t limit, store_conv_id_fn fn, void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, convs_claimable)(x, mask, limit, fn, arg);
}

int store_node_leases(store_txn *x, const char *node,
		      int (*fn)(void *arg, const char *id, size_t len, uint64_t gen, int64_t expires_at), void *arg)
{
	int err = read_check(x, !fn || !id_ok(node));
	return err ? err : BE(x, node_leases)(x, node, fn, arg);
}

int store_notify(store_txn *x, const char *node, const char *conv)
{
	int err = write_check(x, !id_ok(node) || !id_ok(conv));
	return err ? err : BE(x, notify)(x, node, conv);
}

int store_notify_msg(store_txn *x, const char *node, const char *msg)
{
	int err = write_check(x, !id_ok(node) || !notify_msg_ok(msg));
	return err ? err : BE(x, notify_msg)(x, node, msg);
}

/* ---- events ---------------------------------------------------------- */

int store_events_append(store_txn *x, const char *conv, const struct store_event_in *ev, size_t n, uint64_t *seqs,
			int *dups)
{
	int err = write_check(x, !seqs || !events_ok(ev, n) || !id_ok(conv));
	return err ? err : BE(x, events_append)(x, conv, ev, n, seqs, dups);
}

int store_event_append(store_txn *x, const char *conv, const struct store_event_in *ev, uint64_t *seq, int *dup)
{
	return store_events_append(x, conv, ev, 1, seq, dup);
}

int store_event_latest_seq(store_txn *x, const char *conv, uint64_t *seq)
{
	int err = read_check(x, !seq || !id_ok(conv));
	return err ? err : BE(x, event_latest_seq)(x, conv, seq);
}

int store_event_first_seq(store_txn *x, const char *conv, uint64_t *seq)
{
	int err = read_check(x, !seq || !id_ok(conv));
	return err ? err : BE(x, event_first_seq)(x, conv, seq);
}

int store_event_id_seq(store_txn *x, const char *conv, const char *event_id, size_t len, uint64_t *seq)
{
	int err = read_check(x, !seq || !event_id_ok(event_id, len) || !id_ok(conv));
	return err ? err : BE(x, event_id_seq)(x, conv, event_id, len, seq);
}

int store_event_ids_each(store_txn *x, const char *conv,
			 int (*fn)(void *arg, const char *event_id, size_t len, uint64_t seq), void *arg)
{
	int err = read_check(x, !fn || !id_ok(conv));
	return err ? err : BE(x, event_ids_each)(x, conv, fn, arg);
}

int store_events_stream(store_txn *x, const char *conv, const struct store_range *r, store_event_fn fn, void *arg)
{
	int err = read_check(x, !r || !fn || (r->type && !type_ok(r->type)) || !id_ok(conv));
	return err ? err : BE(x, events_stream)(x, conv, r, fn, arg);
}

/* ---- summaries ------------------------------------------------------- */

int store_summary_put(store_txn *x, const char *conv, uint64_t from_seq, uint64_t to_seq, store_bytes content,
		      uint64_t *version)
{
	int err = write_check(x, !summary_ok(from_seq, to_seq, content) || !id_ok(conv));
	return err ? err : BE(x, summary_put)(x, conv, from_seq, to_seq, content, version);
}

int store_summary_latest(store_txn *x, const char *conv, struct store_summary *out)
{
	int err = read_check(x, !out || !id_ok(conv));
	return err ? err : BE(x, summary_latest)(x, conv, out);
}

int store_load_since(store_txn *x, const char *conv, struct store_summary *sum, int *has_summary,
		     store_event_fn fn, void *arg)
{
	int err = read_check(x, !fn || !id_ok(conv));
	return err ? err : BE(x, load_since)(x, conv, sum, has_summary, fn, arg);
}

int store_summaries_list(store_txn *x, const char *conv, int (*fn)(void *arg, const struct store_summary *s),
			 void *arg)
{
	int err = read_check(x, !fn || !id_ok(conv));
	return err ? err : BE(x, summaries_list)(x, conv, fn, arg);
}

int store_summary_restore(store_txn *x, const char *conv, const struct store_summary *s)
{
	int err = write_check(x, !s || !summary_ok(s->from_seq, s->to_seq, s->content) || s->version == 0 ||
					 s->version > INT64_MAX || !id_ok(conv));
	return err ? err : BE(x, summary_restore)(x, conv, s);
}

/* ---- tool calls, expiries, warnings ---------------------------------- */

int store_tool_call_upsert(store_txn *x, const char *conv, const struct store_tool_call_in *tc)
{
	int err = write_check(x, !tool_call_in_ok(tc) || !id_ok(conv));
	return err ? err : BE(x, tool_call_upsert)(x, conv, tc);
}

int store_tool_call_get(store_txn *x, const char *id, struct store_tool_call *out)
{
	int err = read_check(x, !out || !id_ok(id));
	return err ? err : BE(x, tool_call_get)(x, id, out);
}

int store_tool_calls_list(store_txn *x, const char *conv, unsigned mask,
			  int (*fn)(void *arg, const struct store_tool_call *tc), void *arg)
{
	int err = read_check(x, !fn || !id_ok(conv));
	return err ? err : BE(x, tool_calls_list)(x, conv, mask, fn, arg);
}

int store_tool_calls_each(store_txn *x, int (*fn)(void *arg, const struct store_tool_call *tc), void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, tool_calls_each)(x, fn, arg);
}

int store_tool_call_attempt(store_txn *x, const char *id, uint32_t *attempts)
{
	int err = write_check(x, !id_ok(id));
	return err ? err : BE(x, tool_call_attempt)(x, id, attempts);
}

int store_tool_call_unknown(store_txn *x, const char *id, int unknown)
{
	int err = write_check(x, !id_ok(id) || (unknown != 0 && unknown != 1));
	return err ? err : BE(x, tool_call_unknown)(x, id, unknown);
}

int store_tool_call_resolve(store_txn *x, const char *id, int status, store_bytes result, char *conv)
{
	int err = write_check(x, !id_ok(id) || status < STORE_TC_RESOLVED || status > STORE_TC_CANCELLED ||
					 !opt_mp_ok(result));
	return err ? err : BE(x, tool_call_resolve)(x, id, status, result, conv);
}

int store_expiry_schedule(store_txn *x, const char *tool_call_id, int64_t deadline_ms)
{
	int err = write_check(x, !id_ok(tool_call_id) || deadline_ms <= 0);
	return err ? err : BE(x, expiry_schedule)(x, tool_call_id, deadline_ms);
}

int store_expiry_cancel(store_txn *x, const char *tool_call_id)
{
	int err = write_check(x, !id_ok(tool_call_id));
	return err ? err : BE(x, expiry_cancel)(x, tool_call_id);
}

int store_expiry_drop(store_txn *x, int64_t deadline_ms, const char *tool_call_id)
{
	int err = write_check(x, !id_ok(tool_call_id) || deadline_ms <= 0);
	return err ? err : BE(x, expiry_drop)(x, deadline_ms, tool_call_id);
}

int store_expiries_due(store_txn *x, int64_t now_ms, int (*fn)(void *arg, const struct store_expiry *e), void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, expiries_due)(x, now_ms, fn, arg);
}

int store_expiries_claim(store_txn *x, int64_t now_ms, size_t limit,
			 int (*fn)(void *arg, const struct store_expiry *e), void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, expiries_claim)(x, now_ms, limit, fn, arg);
}

int store_expiry_earliest(store_txn *x, int64_t *deadline_ms)
{
	int err = read_check(x, !deadline_ms);
	return err ? err : BE(x, expiry_earliest)(x, deadline_ms);
}

int store_warning_schedule(store_txn *x, const char *tool_call_id, int64_t at_ms)
{
	int err = write_check(x, !id_ok(tool_call_id) || at_ms <= 0);
	return err ? err : BE(x, warning_schedule)(x, tool_call_id, at_ms);
}

int store_warning_drop(store_txn *x, const char *tool_call_id)
{
	int err = write_check(x, !id_ok(tool_call_id));
	return err ? err : BE(x, warning_drop)(x, tool_call_id);
}

int store_warnings_due(store_txn *x, int64_t now_ms, int (*fn)(void *arg, const struct store_expiry *e), void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, warnings_due)(x, now_ms, fn, arg);
}

int store_warning_earliest(store_txn *x, int64_t *at_ms)
{
	int err = read_check(x, !at_ms);
	return err ? err : BE(x, warning_earliest)(x, at_ms);
}

/* ---- schedules -------------------------------------------------------- */

/* A cron spec the store keeps: printable ASCII, at most STORE_CRON_MAX. */
static int cron_text_ok(const char *cron)
{
	size_t n = cron ? strlen(cron) : 0;
	for (size_t i = 0; i < n; i++)
		if (cron[i] < 0x20 || cron[i] > 0x7e)
			return 0;
	return n <= STORE_CRON_MAX;
}

int store_schedule_put(store_txn *x, const char *id, const char *conv, int64_t due_ms, const char *cron,
		       store_bytes text)
{
	int err = write_check(x, !id_ok(id) || !id_ok(conv) || due_ms <= 0 || !cron_text_ok(cron) ||
					 text.len > STORE_SCHEDULE_TEXT_MAX || (text.len && !text.ptr));
	return err ? err : BE(x, schedule_put)(x, id, conv, due_ms, cron && *cron ? cron : NULL, text);
}

int store_schedule_get(store_txn *x, const char *id, struct store_schedule *out)
{
	int err = read_check(x, !id_ok(id) || !out);
	return err ? err : BE(x, schedule_get)(x, id, out);
}

int store_schedule_move(store_txn *x, const char *id, int64_t due_ms)
{
	int err = write_check(x, !id_ok(id) || due_ms <= 0);
	return err ? err : BE(x, schedule_move)(x, id, due_ms);
}

int store_schedule_drop(store_txn *x, const char *id)
{
	int err = write_check(x, !id_ok(id));
	return err ? err : BE(x, schedule_drop)(x, id);
}

int store_schedules_list(store_txn *x, const char *conv, int (*fn)(void *arg, const struct store_schedule *s),
			 void *arg)
{
	int err = read_check(x, !fn || (conv && !id_ok(conv)));
	return err ? err : BE(x, schedules_list)(x, conv, fn, arg);
}

int store_schedules_due(store_txn *x, int64_t now_ms, size_t limit,
			int (*fn)(void *arg, const struct store_schedule *s), void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, schedules_due)(x, now_ms, limit, fn, arg);
}

int store_schedule_earliest(store_txn *x, int64_t *due_ms)
{
	int err = read_check(x, !due_ms);
	return err ? err : BE(x, schedule_earliest)(x, due_ms);
}

/* ---- audit and runs -------------------------------------------------- */

int store_model_call_put(store_txn *x, const char *conv, const struct store_model_call_in *mc)
{
	int err = write_check(x, !model_call_in_ok(mc) || !id_ok(conv));
	return err ? err : BE(x, model_call_put)(x, conv, mc);
}

int store_model_calls_list(store_txn *x, const char *conv, int (*fn)(void *arg, const struct store_model_call *mc),
			   void *arg)
{
	int err = read_check(x, !fn || !id_ok(conv));
	return err ? err : BE(x, model_calls_list)(x, conv, fn, arg);
}

int store_model_calls_gc(store_txn *x, const char *conv, int64_t ttl_ms, uint64_t *removed)
{
	int err = write_check(x, ttl_ms < 0 || (conv && !id_ok(conv)));
	return err ? err : BE(x, model_calls_gc)(x, conv, ttl_ms, removed);
}

int store_run_put(store_txn *x, const char *conv, const struct store_run *r)
{
	int err = write_check(x, !run_ok(r) || !id_ok(conv));
	return err ? err : BE(x, run_put)(x, conv, r);
}

int store_run_get(store_txn *x, const char *conv, uint64_t id, struct store_run *out)
{
	int err = read_check(x, !out || !id || !id_ok(conv));
	return err ? err : BE(x, run_get)(x, conv, id, out);
}

int store_runs_list(store_txn *x, const char *conv, uint64_t before, size_t limit,
		    int (*fn)(void *arg, const struct store_run *r), void *arg, int *more)
{
	int err = read_check(x, !fn || !id_ok(conv));
	return err ? err : BE(x, runs_list)(x, conv, before, limit, fn, arg, more);
}

int store_runs_each(store_txn *x, int (*fn)(void *arg, store_bytes conv, const struct store_run *r), void *arg)
{
	int err = read_check(x, !fn);
	return err ? err : BE(x, runs_each)(x, fn, arg);
}

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

static int filter_valid(const struct store_conv_filter *f)
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
