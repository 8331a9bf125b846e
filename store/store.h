/*
 * store.h: agentd's durable store, the contract every backend keeps.
 *
 * The append-only event log of each conversation is the truth; conversation
 * records, fsm_state, tool-call rows, summaries and expiries are derived from it
 * or cache it. Every operation runs inside a transaction the caller owns, so a
 * state change that touches several tables (a turn's events, its tool-call rows
 * and expiries, usage, fsm_state and status) commits all at once or not at all.
 *
 * Caveats (rules a caller must keep):
 *  - One store handle per process. Never use a handle after fork(): the child
 *    opens its own (LMDB's locks and maps are per process).
 *  - Keep transactions short. A read transaction pins the pages it sees; one held
 *    for long makes the file grow, and the supervisor never holds one across
 *    loop iterations.
 *  - One write transaction at a time per process (writers are serialised across
 *    processes too). Read transactions may be open beside it.
 *  - Everything a read returns (strings, msgpack bytes) points into the map and
 *    stays valid, without copying, until the read transaction that read it
 *    ends; in a write transaction, until its next write operation (LMDB may
 *    reuse a dirty page in place). Strings are NOT NUL-terminated: use the length.
 *  - An operation that fails with STORE_E_NOTFOUND, STORE_E_STALE,
 *    STORE_E_CONFLICT, STORE_E_FENCED or STORE_E_INVAL has written nothing and
 *    the transaction stays usable. Any other error poisons a write transaction:
 *    every later operation and the commit return that error; abort it.
 *  - STORE_E_FULL: the map is full. The transaction must be aborted; the store
 *    grows the map (up to max_map_size) before the next transaction begins, so a
 *    retry may succeed. Nothing committed is lost.
 *  - Content (event content, settings, args, results, fsm_state, summaries) is
 *    opaque msgpack: the store checks it is exactly one well-formed msgpack
 *    object and never interprets it.
 *  - Times are milliseconds since the Unix epoch, read once per transaction from
 *    the store's clock (store_opts.clock, CLOCK_REALTIME by default).
 *
 * Two backends keep this contract, chosen by store_open's target: an LMDB
 * directory (the default; what the notes above describe), or a PostgreSQL
 * database (store_pg.c). On PostgreSQL:
 *  - Each open transaction has a connection of its own (a read beside a write
 *    needs two); a handle keeps up to two idle ones for the next transactions.
 *    A read transaction is REPEATABLE READ READ ONLY with its snapshot taken at
 *    begin, so it sees what LMDB's would. One write transaction at a time per
 *    handle (-EBUSY), as on LMDB.
 *  - Writers of one conversation serialise, across processes and machines:
 *    every write operation that concerns a conversation first locks its row
 *    (SELECT ... FOR UPDATE) until the transaction ends; writers of different
 *    conversations run side by side. store_lease_check in a write transaction
 *    takes that lock, so a store_lease_next elsewhere waits for the checked
 *    transaction to end, and the superseded writer's next check is fenced.
 *    Resolve, attempt and the expiry calls lock the tool call's conversation
 *    first, then the call's row, so a resolver and that conversation's
 *    worker queue rather than deadlock. Transactions that lock several
 *    conversations in opposite orders do deadlock: the server aborts one,
 *    which fails -EAGAIN (abort it and retry); taking them in id order
 *    avoids it.
 *  - What a read returns points into the transaction's result sets and stays
 *    valid until the transaction ends, in a write transaction too.
 *  - A server error poisons the transaction, read or write (PostgreSQL has
 *    aborted it): every later operation and the commit return it. Disk full
 *    is STORE_E_FULL; a database refusing writes (default_transaction_read_only,
 *    a hot standby) -EROFS; a deadlock, a serialisation failure or a row
 *    lock waited for past lock_timeout_ms -EAGAIN; a lost
 *    connection -ECONNRESET (a begin retries once on a new connection); no
 *    server, or one refusing the connection (too many clients, bad
 *    credentials) -ECONNREFUSED; a statement timeout -ETIMEDOUT; anything
 *    else -EIO.
 *  - A connection lost during COMMIT leaves its outcome to be learned: the
 *    commit asks the server on a new connection (txid_status of the txn's
 *    id, taken at begin) and returns 0 when it was made, -ECONNRESET when
 *    it was not; STORE_E_INDOUBT only when the server cannot say within a
 *    few seconds (unreachable, or the old session still open).
 *  - An event appended without an event_id (of up to 1 MiB) is gathered
 *    with the transaction's others into one insert, sent ahead (libpq's
 *    pipeline mode) before the next operation that waits for an answer, or
 *    with the commit, and its answer read with that one's: its seq is known
 *    from the locked row, and it cannot be a repeat. A server error it
 *    meets (a full disk, a lost connection) is returned by that later
 *    operation or the commit, and poisons the transaction as any server
 *    error does; the append itself returned 0.
 *  - STORE_SYNC_NONE is synchronous_commit off for the handle's sessions, and
 *    store_sync() one synchronous commit, which flushes every commit before
 *    it. STORE_WRITE_LAZY commits as STORE_WRITE does, durable when it
 *    returns: txn ids are all 0 and store_flush has nothing to do, so what
 *    a caller acknowledges after a commit must not wait for a later flush.
 *  - map_size and max_map_size: with max_map_size given, a quota on the bytes
 *    of the store's tables (indexes and TOAST included) plus what the write
 *    transaction writes: passing it is STORE_E_FULL. The size is measured at
 *    a write transaction's begin once this handle's estimate (the last
 *    measure plus its own commits since) passes half the quota, or when the
 *    last measure is a second old: other processes' writes of the last second
 *    may pass it by that much. The quota grows as LMDB's map does
 *    (doubling within max_map_size before the next write transaction;
 *    store_reserve grows it ahead). Without max_map_size there is no quota:
 *    the server's disk is the limit, and map_size only reports the default.
 *    store_map_size() is the quota now. Event content is stored uncompressed (as on LMDB). A record
 *    of 1 GiB or more is STORE_E_FULL (PostgreSQL's limit for a value).
 *  - store_stat: size_bytes is the bytes of the store's tables, file_bytes
 *    the whole database's (pg_database_size); readers counts this handle's
 *    open read transactions and max_readers bounds them (store_txn_begin
 *    -EAGAIN past it: each holds a connection); map_full as on LMDB under a
 *    quota, else 0.
 *  - store_reader_check() does nothing and returns 0 (cleared: 0): a dead
 *    process's connections end with it, and the server aborts its
 *    transactions and releases their locks.
 *  - The tables live in the connection's current schema (search_path), so
 *    one database may hold several stores. store_open creates them when
 *    absent (not when read_only: a database without them is STORE_E_CORRUPT,
 *    not an agentd store) and refuses a newer schema version with
 *    STORE_E_CORRUPT, store_open_error() naming both versions.
 *  - Timestamps come from the client's clock (store_opts.clock), not the
 *    server's: machines sharing a database must keep their clocks in step.
 *  - Never use a handle after fork() either: its connections would be shared.
 */
#ifndef AGENTD_STORE_H
#define AGENTD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/id.h"

typedef struct store store;
typedef struct store_txn store_txn;

/* Errors: 0 is success; negative errno values (-EINVAL, -ENOMEM, -EIO,
 * -ENOSPC, ...) for system failures; and these. */
enum {
	STORE_E_NOTFOUND = -30001, /* no such conversation, tool call, summary, expiry */
	STORE_E_STALE = -30002,    /* tool call unknown or no longer pending */
	STORE_E_FENCED = -30003,   /* the writer's lease was superseded */
	STORE_E_CONFLICT = -30004, /* already exists, or belongs to another conversation */
	STORE_E_FULL = -30005,     /* map (or disk) full; nothing of the txn was written */
	STORE_E_CORRUPT = -30006,  /* a record that cannot be decoded */
	STORE_E_INDOUBT = -30007,  /* a commit's outcome is unknown: it may be written */
	STORE_E_INVAL = -22,       /* invalid argument (== -EINVAL) */
};

/* A short static description of any code above or of a negative errno. */
const char *store_strerror(int err);

/* A byte range: a string (not NUL-terminated) or one msgpack object. */
typedef struct store_bytes {
	const void *ptr;
	size_t len;
} store_bytes;

enum store_sync {
	STORE_SYNC_FULL = SYNC_FULL, /* every commit is durable before it returns */
	STORE_SYNC_NONE = SYNC_NONE, /* commits are not flushed; call store_sync() periodically */
};

struct store_opts {
	int sync;               /* enum store_sync */
	int read_only;          /* open without writing (tools, checks) */
	int audit;              /* store_model_call_put writes only when set */
	size_t map_size;        /* initial map size; 0: 256 MiB, or max_map_size if smaller */
	size_t max_map_size;    /* growth limit on STORE_E_FULL; 0: 64 GiB; == map_size: no growth */
	unsigned max_readers;   /* reader slots; 0: 1024 */
	int64_t (*clock)(void *arg); /* ms since the epoch; NULL: CLOCK_REALTIME */
	void *clock_arg;
	/* PostgreSQL: a session left idle inside a transaction this long (its
	 * process stopped, or cut off) is ended by the server, which releases
	 * its row locks: other nodes do not wait on a stopped one for longer.
	 * 0: no limit. LMDB ignores it (a dead process's reader slot is
	 * cleared, and writers are one machine's). */
	int64_t idle_txn_timeout_ms;
	/* PostgreSQL: a statement that waits this long for a row lock another
	 * session holds fails -EAGAIN (lock_timeout), as a deadlock does: abort
	 * and retry later. For a process whose one thread must not wait on
	 * another node's transaction (the supervisor's loop). 0: wait. LMDB
	 * ignores it. */
	int64_t lock_timeout_ms;
	/* LMDB, STORE_SYNC_FULL: this handle's store_flush never waits for a
	 * commit or flush of another process to cover it (one already done
	 * still spares it). For a flush that replies wait on: a commit under
	 * way would hold them for its whole transaction, where a flush of
	 * their own runs beside it. */
	int flush_alone;
};

/* Open (creating when absent, unless read_only) the store at `target`: a
 * PostgreSQL connection string (a postgresql:// or postgres:// URI, or a
 * libpq key=value string starting with host= or dbname=) opens the
 * PostgreSQL backend; anything else is an LMDB directory, which must exist.
 * opts may be NULL for defaults. The data file's descriptor (the
 * connections' sockets) is close-on-exec. A program built without
 * PostgreSQL (the statically linked worker) refuses a PostgreSQL target with
 * -EPROTONOSUPPORT.
 * Errors: STORE_E_INVAL, STORE_E_CORRUPT (not an agentd store, or a newer
 * schema), -ECONNREFUSED (no PostgreSQL server, or it refused us), -errno.
 * On success *out is owned by the caller: store_close(). */
int store_open(store **out, const char *target, const struct store_opts *opts);
/* What the backend said when this process's last store_open failed: on
 * PostgreSQL libpq's or the server's message (no server there, a bad
 * URI, authentication failed, no such database) or the newer schema's
 * versions; "" when it said nothing beyond the code, and after an open that
 * succeeded. For the opener's error messages; not thread-safe. */
const char *store_open_error(void);
void store_close(store *s);

/* Flush commits made under STORE_SYNC_NONE to disk (a read-only store: 0).
 * Errors: STORE_E_INVAL (s NULL), -errno; PostgreSQL's server errors. */
int store_sync(store *s);

/* The durable frontier's flush: fdatasync of the data file. Every
 * transaction committed (by any process) before this call began is durable
 * when it returns 0, also one committed STORE_WRITE_LAZY. On LMDB the flush
 * is not made when a flush or commit of another process (or thread) covers
 * the same, under way or done: the call then waits for it instead, or with
 * flush_alone only for one done (store/flushrec.h; store_stat counts both
 * kinds). Under STORE_SYNC_NONE it does nothing and returns 0. Errors: STORE_E_INVAL
 * (s NULL), -errno (the fdatasync's). The one call
 * that may run in another thread of this process while the others use s: it
 * touches only the data file's descriptor. */
int store_flush(store *s);

/* Hot backup: write a compacted, consistent copy of the store, as one read
 * transaction sees it, into dir (an existing empty directory; the copy is
 * its data file, made durable before this returns). Writers go on
 * meanwhile: the copy holds every transaction committed before the call
 * began. The copy is itself a store (store_open it, or start agentd on it).
 * Like store_flush it may run in another thread while the others use s.
 * Errors: -EOPNOTSUPP on PostgreSQL (back it up with pg_dump), -EEXIST (dir
 * is not empty), -errno. */
int store_backup(store *s, const char *dir);

/* Clear reader slots left by dead processes; *cleared (may be NULL) gets how many.
 * Errors: STORE_E_INVAL (s NULL), -errno. */
int store_reader_check(store *s, int *cleared);

struct store_stat {
	uint64_t size_bytes;  /* bytes of the data file in use (last page) */
	uint64_t file_bytes;  /* size of the data file */
	uint64_t map_size;
	uint64_t max_map_size; /* what map_size may grow to */
	int map_full;         /* the last write met a full map, which this handle's next write
			       * transaction grows (within max_map_size): a retry may fit */
	unsigned readers;     /* reader slots in use */
	unsigned max_readers;
	int sync;
	/* This handle's store_flush calls that flushed the data file, and
	 * those that did not need to: a flush or commit of another process, or
	 * thread, covered them (LMDB; 0 on PostgreSQL). */
	uint64_t flushes, flushes_spared;
};
/* Errors: STORE_E_INVAL (s or st NULL), -errno; PostgreSQL's server errors. */
int store_stat(store *s, struct store_stat *st);
/* This handle's map size now, as store_stat's map_size, without its system
 * calls (for a check on every write). */
size_t store_map_size(store *s);

/* Before a write transaction of about `bytes`, with no transaction of this
 * handle open: grow the map (within max_map_size) until that much room is
 * left twice over, so the transaction does not meet a full map. The map also
 * grows by itself before a write transaction once the data passes three
 * quarters of it; this is for a transaction larger than the last quarter.
 * Returns 0, or STORE_E_FULL when even max_map_size leaves less room (the
 * transaction may still fit), -EBUSY with a transaction open, STORE_E_INVAL
 * (s NULL); on PostgreSQL the server's errors. */
int store_reserve(store *s, size_t bytes);

/* The milliseconds clock the store stamps records with. */
int64_t store_now(store *s);

/* ---- transactions ---------------------------------------------------- */

/* STORE_WRITE_LAZY: a write transaction whose commit makes one flush
 * instead of two under STORE_SYNC_FULL: its pages are flushed, the meta page
 * that makes them current is written but not flushed. It becomes durable
 * with the next flush of the data file by any process (another commit's
 * page flush, store_flush, store_sync); an OS crash before that may undo
 * this commit (a process kill never does), and never damages the store.
 * Its own page flush begins after the meta pages of every transaction before
 * it were written: when the commit that made id N returns 0 (N a new id,
 * STORE_SYNC_FULL), every id below N is durable.
 * agentd commits every write this way and acknowledges nothing a flush has
 * not covered (its durable frontier: docs/durability.md). */
enum { STORE_READ = 0, STORE_WRITE = 1, STORE_WRITE_LAZY = 2 };

/* STORE_WRITE_FREEING, or'ed into STORE_WRITE or STORE_WRITE_LAZY: a write
 * transaction that frees room (store_conv_delete, and nothing that adds),
 * so that a store full to its limit still takes a delete. On LMDB it may use
 * a reserve past max_map_size (max_map_size / 16, at least 256 KiB, at most
 * 1 GiB): a delete copies the pages it touches before it frees any, which a
 * map full to its last page has no room for. When it ends, the map is set
 * back to max_map_size, or to the data's end if that is past it (the pages
 * the delete wrote), and the pages it freed serve the next writes. Other
 * processes never map the reserve: one that meets the larger map adopts
 * only the data's end. The caller keeps the rule: such a transaction only
 * removes, else it could spend the reserve. On PostgreSQL a delete is never
 * refused by the quota, with or without the flag; the quota counts the
 * tables' bytes, which PostgreSQL reuses for new rows only after it has
 * vacuumed them (docs/operations.md). */
enum { STORE_WRITE_FREEING = 8 };

/* A transaction's id: for a write transaction the id its commit makes
 * current, for a read transaction the id of the commit it sees. Ids grow by
 * one per commit, across every process on the store, so "every transaction
 * up to id N is durable" is a frontier: a read that saw id N shows nothing
 * an OS crash can take back once N is behind it. */
uint64_t store_txn_id(store_txn *txn);
/* (PostgreSQL: every id is 0 and store_flush does nothing: its commits are
 * durable when they return.) */
/* The id of the last committed transaction, of any process. Like
 * store_flush, it may run in another thread while the others use s. */
uint64_t store_last_id(store *s);
/* 1 when what is durable depends on flushes of a file this machine holds
 * (LMDB's data.mdb), so a failed flush or -EIO from a commit means the
 * page cache can no longer be trusted (docs/durability.md, "A flush that
 * fails"); 0 for PostgreSQL, whose commits are durable when they return
 * and whose -EIO is a server's error. */
int store_flushes_locally(store *s);

/* Begin a transaction. Errors: STORE_E_INVAL (s or out NULL, a mode not
 * listed above, FREEING on a read, write on a read-only store),
 * -EBUSY (a write transaction of this process is already open), -EAGAIN (no
 * free reader slot; or another process grew the map while a transaction of
 * this process is open: end it, then retry), STORE_E_FULL (the map could not
 * grow), -errno. On failure *out is NULL (store_txn_abort(NULL) does
 * nothing), so a caller's shared abort path is safe. */
int store_txn_begin(store *s, int mode, store_txn **out);
/* Commit and free. On failure nothing was written and txn is freed, but
 * for STORE_E_INDOUBT (PostgreSQL only): the outcome is unknown, and a
 * caller must learn it from the store before acting on either.
 * Errors: the poisoning error, STORE_E_FULL, STORE_E_INDOUBT, -errno (-EIO,
 * -ENOSPC). */
int store_txn_commit(store_txn *txn);
/* Abort and free; NULL is accepted. */
void store_txn_abort(store_txn *txn);
/* The timestamp this transaction stamps records with. */
int64_t store_txn_now(store_txn *txn);

/* Callbacks receive records that live until the transaction ends; a non-zero
 * return stops the iteration and is returned by the iterating call unchanged.
 * It is the caller's value, not a store failure: it never poisons a write
 * transaction, whatever its value. */

/* Errors every operation on a transaction may return, besides those its
 * own comment names (which it lists for what it adds):
 *  - STORE_E_INVAL: txn NULL; a write operation in a read transaction; an
 *    argument breaking a rule stated here (an id outside the alphabet, a
 *    NULL out-pointer or callback it needs, msgpack that is not exactly one
 *    object, a value out of its range). Every such rule is checked once, in
 *    store/store.c, before a backend is called, and checked alike for both.
 *  - the poisoning error of a poisoned transaction (see the caveats above),
 *    checked first: the same error on every later call.
 *  - a failure of the storage: -errno (-ENOMEM, -EIO, ...), STORE_E_FULL on a
 *    write, STORE_E_CORRUPT for a record that cannot be decoded, and on
 *    PostgreSQL the server's errors listed at the top (-EAGAIN, -ECONNRESET,
 *    -ETIMEDOUT, -EROFS, ...). */

/* ---- conversations --------------------------------------------------- */

enum store_status {
	STORE_IDLE = 0,      /* nothing owed */
	STORE_ACTIVE = 1,    /* a turn is in progress or owed */
	STORE_SUSPENDED = 2, /* waiting on a human tool call */
	STORE_ENDED = 3,     /* closed: no further sends */
	STORE_PAUSED = 4,    /* a turn is owed but the budget is spent: waits for a larger one */
};
#define STORE_STATUS_MAX STORE_PAUSED
const char *store_status_name(int status);  /* "idle", ...; NULL if out of range */
int store_status_parse(const char *name, size_t len); /* the enum, or -1 */

struct store_usage {
	uint64_t input_tokens;
	uint64_t output_tokens;
	double cost;
};

struct store_conv {
	store_bytes id;
	store_bytes settings;   /* msgpack map */
	store_bytes fsm_state;  /* msgpack; len 0 when never set */
	int status;             /* enum store_status */
	int64_t created_at;
	int64_t updated_at;
	uint64_t lease;         /* writer generation; 0 before any worker */
	struct store_usage usage;
	uint64_t turns;         /* model turns committed (store_turns_add) */
	store_bytes metadata;   /* msgpack map of str -> str (store_meta_valid); len 0 when none */
};

/* Conversation and tool call ids: 1-128 bytes of [A-Za-z0-9._:-]. Returns 1 if valid. */
#define STORE_ID_MAX ID_MAX             /* common/id.h */
#define STORE_EVENT_ID_MAX EVENT_ID_MAX
int store_id_valid(const char *id, size_t len);

/* Create a conversation with the given settings (one msgpack map), status idle.
 * Errors: STORE_E_INVAL (bad id or settings), STORE_E_CONFLICT (exists). */
int store_conv_create(store_txn *txn, const char *id, store_bytes settings);

/* Errors: STORE_E_NOTFOUND, STORE_E_CORRUPT, STORE_E_INVAL. */
int store_conv_get(store_txn *txn, const char *id, struct store_conv *out);

/* Upsert: fields flagged in `set` replace the stored ones (settings
 * replace wholesale: merging is the caller's business); a missing
 * conversation is created (settings default to an empty map).
 * Errors: STORE_E_INVAL, STORE_E_CORRUPT. */
enum { STORE_SET_SETTINGS = 1, STORE_SET_STATUS = 2, STORE_SET_FSM = 4, STORE_SET_METADATA = 8 };
struct store_conv_patch {
	unsigned set;
	store_bytes settings;
	int status;
	store_bytes fsm_state;
	store_bytes metadata; /* replaces wholesale, as settings; len 0 or an empty map: none */
};
int store_conv_put(store_txn *txn, const char *id, const struct store_conv_patch *p);

/* Just fsm_state (a cache over the log), creating the row if absent.
 * Errors: as store_conv_put. */
int store_conv_put_fsm(store_txn *txn, const char *id, store_bytes fsm_state);

/* Conversations in id order, strictly after `after` (NULL: from the start),
 * with status == `status` (-1: any), at most `limit` (0: no limit) of them.
 * *more (may be NULL) is set to 1 when further matches exist past the last.
 * Errors: STORE_E_INVAL, the callback's return, STORE_E_CORRUPT when a
 * conversation's record cannot be decoded (a damaged store): it is passed
 * over, every other one is still listed, and the error comes at the end. */
typedef int (*store_conv_fn)(void *arg, const struct store_conv *c);
int store_conv_list(store_txn *txn, int status, const char *after, size_t limit,
		    store_conv_fn fn, void *arg, int *more);

/* ---- conversation metadata and filtered lists ---------------------- */

/* Metadata: a msgpack map of at most STORE_META_MAX entries, each key a str
 * (or bin) of 1-STORE_META_KEY_MAX bytes, each value one of
 * 0-STORE_META_VAL_MAX bytes, neither holding a NUL byte, no key twice.
 * It is indexed by (key, value, conversation id): a list filtered by
 * metadata walks the index, not every conversation. The bounds keep one
 * index key within LMDB's 511 bytes. Setting it (STORE_SET_METADATA)
 * stamps updated_at as any put does. */
#define STORE_META_MAX 16
#define STORE_META_KEY_MAX 64
#define STORE_META_VAL_MAX 256
/* 1 if m is metadata as above (len 0 counts as none: valid). */
int store_meta_valid(store_bytes m);

struct store_kv {
	store_bytes key;
	store_bytes value;
};
/* What store_conv_find keeps: every condition given must hold. */
struct store_conv_filter {
	int status;                   /* enum store_status; -1: any */
	const struct store_kv *meta;  /* nmeta pairs, each of which the metadata must hold */
	size_t nmeta;
	int64_t updated_after;        /* updated_at > this; 0: unbounded */
	int64_t updated_before;       /* updated_at < this; 0: unbounded */
	/* The caller's own test (what the store does not interpret, such as
	 * a setting), run last: 1 keeps the conversation, 0 passes it over,
	 * negative stops the list with that error. NULL: none. */
	int (*match)(void *arg, const struct store_conv *c);
	void *match_arg;
};
/* store_conv_list with a filter: conversations in id order strictly after
 * `after`, those that pass f (NULL: all), at most `limit` (0: no limit);
 * *more as store_conv_list. With metadata pairs in f the first pair's index
 * range is walked (its matches only, in id order); otherwise every
 * conversation is read. Errors: STORE_E_INVAL (a bad filter: an unknown
 * status, a pair outside the metadata bounds), match's negative return, the
 * callback's, STORE_E_CORRUPT as store_conv_list. */
int store_conv_find(store_txn *txn, const struct store_conv_filter *f, const char *after, size_t limit,
		    store_conv_fn fn, void *arg, int *more);
/* Does c pass f (status, updated range, metadata; not match)? 1 or 0;
 * STORE_E_CORRUPT when c's metadata cannot be read. For backends. */
int store_filter_match(const struct store_conv_filter *f, const struct store_conv *c);

/* The id of every conversation, in id order, without reading their records:
 * what `agentd check` walks so that a record that cannot be decoded is named
 * (store_conv_get on its id says STORE_E_CORRUPT). The id is not
 * NUL-terminated. Errors: STORE_E_INVAL (no fn), the callback's return. */
typedef int (*store_conv_id_fn)(void *arg, const char *id, size_t len);
int store_conv_ids(store_txn *txn, store_conv_id_fn fn, void *arg);

/* Delete every row of the conversation (events, event ids, summaries, tool
 * calls and their expiries, audit rows). The room it frees serves the very
 * next write, also in a store full to its limit (LMDB settles the freed
 * pages with a commit of its own when its map cannot grow). Errors:
 * STORE_E_NOTFOUND. */
int store_conv_delete(store_txn *txn, const char *id);

/* Writer lease. The supervisor takes a new generation for each worker it
 * spawns; the worker checks it first in each of its write transactions, and
 * since writers are serialised, a superseded worker can never write.
 * Generations are unique across the store (never reissued, even to a
 * conversation deleted and created again with the same id).
 * Errors: STORE_E_NOTFOUND, STORE_E_INVAL (store_lease_next: gen NULL);
 * store_lease_check: STORE_E_FENCED. */
int store_lease_next(store_txn *txn, const char *id, uint64_t *gen);
int store_lease_check(store_txn *txn, const char *id, uint64_t gen);

/* ---- nodes: several supervisors sharing one store ------------------------
 *
 * A node is one supervisor among those sharing the store, named by an id of
 * the conversation id alphabet. A node owns a conversation through a lease:
 * the owner, the writer generation (store_conv.lease, the fencing epoch
 * store_lease_check compares) and an expiry. Claiming a conversation takes
 * a new generation, so the previous owner's workers are fenced from their
 * next write transaction on, whatever they believe. A node's heartbeat
 * (store_node_beat) renews every lease it still holds; one that stops
 * beating has its leases expire, and then any node may claim them.
 * Expiries are store times (store_txn_now): machines sharing a store keep
 * their clocks in step, and a lease time well above the skew between them.
 * On PostgreSQL store_convs_claimable in a write transaction locks the rows
 * it lists and skips rows other transactions hold (FOR UPDATE SKIP LOCKED),
 * so nodes looking for orphans at once share them out instead of queueing;
 * on LMDB writers are serialised, and one machine usually runs one node.
 * Ownership is advisory for everything but fencing: any node may write any
 * conversation (a send accepted by one node for a conversation another owns
 * is committed by the first); only a worker checks its generation. */

struct store_node {
	store_bytes id;
	int64_t started_at;  /* its first beat since it last left */
	int64_t beat_at;     /* its last beat */
	int64_t expires_at;  /* beat_at + its ttl: past it the node is not heard from */
	uint64_t leases;     /* conversations it owns now (expired leases included) */
};

/* A heartbeat of `node`: its row is created (started_at now) or refreshed
 * (beat_at now, expires_at now + ttl_ms), and every lease it still holds is
 * renewed to expire at that time too. A lease another node claimed is gone
 * and is not renewed. PostgreSQL: a lease whose row another transaction
 * holds locked past lock_timeout_ms (store_opts) is left for the next beat
 * rather than waited for; the beat still commits. *leases (may be NULL)
 * gets how many it holds.
 * Errors: STORE_E_INVAL (bad id, ttl_ms <= 0). */
int store_node_beat(store_txn *txn, const char *node, int64_t ttl_ms, uint64_t *leases);
/* `node` leaves: its row goes and every lease it holds is released (no
 * owner, generation kept), so any node may claim them at once. 0 also when
 * it had no row. Errors: STORE_E_INVAL. */
int store_node_leave(store_txn *txn, const char *node);
/* Every node's row in id order, expired ones included (callers compare
 * expires_at with their clock). Errors: the callback's. */
int store_nodes_list(store_txn *txn, int (*fn)(void *arg, const struct store_node *n), void *arg);

struct store_owner {
	store_bytes node;    /* len 0: no owner */
	uint64_t lease;      /* the generation (store_conv.lease) */
	int64_t expires_at;  /* 0 without an owner */
};
/* Errors: STORE_E_NOTFOUND, STORE_E_INVAL. */
int store_conv_owner(store_txn *txn, const char *id, struct store_owner *out);
/* Take the lease of conversation `id` for `node` until now + ttl_ms, if it
 * has no owner, `node` owns it already, or its owner's lease has expired
 * (expires_at <= now). A new generation is taken as store_lease_next takes
 * one (*gen gets it): every worker of an earlier generation is fenced.
 * Errors: STORE_E_NOTFOUND, STORE_E_CONFLICT (another node's lease is still
 * live: nothing written), STORE_E_INVAL. */
int store_conv_claim(store_txn *txn, const char *id, const char *node, int64_t ttl_ms, uint64_t *gen);
/* Give back the lease `node` holds on `id` at generation `gen`: no owner
 * after it, the generation kept. Errors: STORE_E_NOTFOUND, STORE_E_FENCED
 * (node does not hold it at gen: nothing written), STORE_E_INVAL. */
int store_conv_release(store_txn *txn, const char *id, const char *node, uint64_t gen);
/* Conversations a node may claim: a status bit (1 << status) in `mask` (0:
 * any), and no owner or an expired lease (expires_at <= now), whoever held
 * it; in id order, at most `limit` (0: no limit). See above for the locks
 * a write transaction takes on PostgreSQL.
 * Errors: STORE_E_INVAL (no fn), the callback's. */
int store_convs_claimable(store_txn *txn, unsigned mask, size_t limit, store_conv_id_fn fn, void *arg);
/* The leases `node` holds, in conversation id order: the id (len bytes),
 * its generation and expiry. Errors: STORE_E_INVAL, the callback's. */
int store_node_leases(store_txn *txn, const char *node,
		      int (*fn)(void *arg, const char *id, size_t len, uint64_t gen, int64_t expires_at),
		      void *arg);

/* Cross-node wakeups. A node that commits work for a conversation another
 * node owns tells the owner: store_notify in that transaction, delivered
 * at its commit and only if it commits (PostgreSQL's NOTIFY; the same
 * conversation named twice in one transaction arrives once). The owner
 * listens on a connection of its own, store_listen, whose descriptor goes
 * into its poll loop; when it is readable, store_notified hands over the
 * conversation ids that arrived (and store_notify_msg's messages, below).
 * A notification is a hint, never the
 * truth: one is lost when the listening connection breaks (store_notified
 * then fails -ECONNRESET: listen again, and look at the log, as a poll
 * would), so a listener also polls now and then. Channels are per node and
 * per schema (store_pg.c), so stores sharing a database do not hear each
 * other. The LMDB store has one node: store_notify validates and does
 * nothing, store_listen fails -EOPNOTSUPP.
 * store_notify errors: STORE_E_INVAL (bad ids, a read transaction).
 * store_listen: *fd gets the descriptor (owned by s: store_close closes it;
 * a second listen replaces the first); -ECONNREFUSED, -EOPNOTSUPP.
 * store_notified: 0, -ECONNRESET (the connection is closed: listen again),
 * STORE_E_INVAL (not listening), or the callback's return. */
int store_notify(store_txn *txn, const char *node, const char *conv);
int store_listen(store *s, const char *node, int *fd);
int store_notified(store *s, int (*fn)(void *arg, const char *conv, size_t len), void *arg);

/* A message for `node`'s listener, sent as store_notify sends a wakeup (at
 * commit, only if it commits; the same message twice in one transaction
 * arrives once): nodes asking each other to act on the workers they run
 * (supervisor/forward.h). msg is 1 to STORE_NOTIFY_MSG_MAX bytes of
 * printable ASCII (0x20-0x7e) holding at least one space, which no
 * conversation id holds: store_notified hands it to its callback as it
 * arrived (not NUL-terminated), and the callback tells a message from a
 * wakeup by that space. The LMDB store validates and does nothing.
 * Errors: STORE_E_INVAL (a bad node id or message, a read transaction). */
#define STORE_NOTIFY_MSG_MAX 4000
int store_notify_msg(store_txn *txn, const char *node, const char *msg);

/* Add a model call's usage to the conversation's running totals. They
 * saturate: tokens at INT64_MAX (what a JSON integer holds), the cost at
 * DBL_MAX (a sum past it is never infinite). Errors: STORE_E_NOTFOUND,
 * STORE_E_INVAL (a negative or NaN cost). */
int store_usage_add(store_txn *txn, const char *id, const struct store_usage *u);

/* Add n to the conversation's count of committed model turns (turns in
 * store_conv), saturating at INT64_MAX. The worker adds 1 in the
 * transaction that commits the turn, beside its usage, so a turn killed
 * before its commit counts nowhere and its re-run once: budgets read both.
 * Errors: STORE_E_NOTFOUND, STORE_E_INVAL. */
int store_turns_add(store_txn *txn, const char *id, uint64_t n);

/* ---- events ---------------------------------------------------------- */

struct store_event_in {
	const char *type;     /* 1-32 bytes of [a-z_] */
	store_bytes content;  /* one msgpack object */
	const char *event_id; /* NULL, or 1-200 bytes (no NUL): idempotency key */
};

struct store_event {
	uint64_t seq;
	store_bytes type;
	store_bytes content;
	store_bytes event_id; /* len 0 when none */
	int64_t inserted_at;
};

/* Append one event; seq is last+1 (1-based). When event_id was already used in
 * this conversation nothing is written, *seq gets the original seq and *dup
 * (may be NULL) is set to 1.
 * Errors: STORE_E_NOTFOUND (conversation), STORE_E_INVAL. */
int store_event_append(store_txn *txn, const char *conv, const struct store_event_in *ev,
		       uint64_t *seq, int *dup);

/* Append n events in order, atomically: every event is validated first, and one
 * bad event writes nothing. A repeated event_id, within the batch or across
 * batches, is a duplicate of its first occurrence. seqs[] and dups[] (dups may
 * be NULL) get one entry per event.
 * Errors: STORE_E_NOTFOUND (conversation), STORE_E_INVAL (any bad event,
 * seqs NULL, ev NULL with n > 0). */
int store_events_append(store_txn *txn, const char *conv, const struct store_event_in *ev,
			size_t n, uint64_t *seqs, int *dups);

/* The last seq, 0 for an empty log. Errors: STORE_E_NOTFOUND, STORE_E_INVAL. */
int store_event_latest_seq(store_txn *txn, const char *conv, uint64_t *seq);

/* The seq of the event appended with event_id (len bytes, 1-200, no NUL), as
 * the idempotency index holds it: what a repeated append would answer.
 * Errors: STORE_E_NOTFOUND (conversation, or no such event_id), STORE_E_INVAL,
 * STORE_E_CORRUPT. */
int store_event_id_seq(store_txn *txn, const char *conv, const char *event_id, size_t len, uint64_t *seq);

/* Every row of the conversation's idempotency index, in event_id byte order:
 * the event_id (len bytes) and the seq it answers. Errors: STORE_E_NOTFOUND
 * (conversation), STORE_E_CORRUPT (a row whose seq is unreadable), the
 * callback's. */
int store_event_ids_each(store_txn *txn, const char *conv,
			 int (*fn)(void *arg, const char *event_id, size_t len, uint64_t seq), void *arg);

/* Events with after < seq < before (before 0: unbounded), only of `type` when
 * non-NULL; limit > 0 keeps the most recent `limit` of them. Delivered in
 * ascending seq order. Errors: STORE_E_NOTFOUND, STORE_E_CORRUPT, STORE_E_INVAL
 * (r or fn NULL, a bad type), the callback's. */
struct store_range {
	uint64_t after;
	uint64_t before;
	size_t limit;
	const char *type;
};
typedef int (*store_event_fn)(void *arg, const struct store_event *ev);
int store_events_stream(store_txn *txn, const char *conv, const struct store_range *r,
			store_event_fn fn, void *arg);

/* ---- summaries ------------------------------------------------------- */

struct store_summary {
	uint64_t from_seq;
	uint64_t to_seq;
	store_bytes content;
	uint64_t version;    /* 1 for the first summary of a conversation, then +1 */
	int64_t inserted_at;
};

/* Store a summary of seqs from_seq..to_seq (keyed by to_seq: a second put with
 * the same to_seq replaces the first). *version (may be NULL) gets its version.
 * Errors: STORE_E_NOTFOUND, STORE_E_INVAL (from_seq > to_seq, to_seq 0 or past
 * the last seq). */
int store_summary_put(store_txn *txn, const char *conv, uint64_t from_seq, uint64_t to_seq,
		      store_bytes content, uint64_t *version);
/* The summary with the greatest to_seq. Errors: STORE_E_NOTFOUND (no
 * conversation, or no summary), STORE_E_INVAL. */
int store_summary_latest(store_txn *txn, const char *conv, struct store_summary *out);

/* Revival read: the latest summary (*has_summary 1, *sum filled) and every
 * event after its to_seq; with no summary, every event. sum and has_summary
 * may be NULL. Errors: STORE_E_NOTFOUND (conversation), STORE_E_INVAL (no
 * fn), STORE_E_CORRUPT, the callback's. */
int store_load_since(store_txn *txn, const char *conv, struct store_summary *sum,
		     int *has_summary, store_event_fn fn, void *arg);

/* ---- logs that begin after seq 1 --------------------------------------
 *
 * A conversation made with store_conv_create_at(k + 1) has a log that
 * begins at seq k + 1: events 1..k were never its own (a fork whose carried
 * summary stands in for them, docs/protocol.md "Fork"). Its last seq is k
 * until the first append, which is k + 1; a range starting before k + 1
 * delivers from k + 1 on (there is nothing before it); load_since, summaries
 * (a to_seq up to the last seq), the idempotency index, delete and every
 * other operation treat it as any conversation. */

/* As store_conv_create, with the log beginning at first_seq (1 is
 * store_conv_create's). Errors: STORE_E_INVAL (bad id or settings,
 * first_seq 0 or past INT64_MAX), STORE_E_CONFLICT (exists). */
int store_conv_create_at(store_txn *txn, const char *id, store_bytes settings, uint64_t first_seq);
/* The seq the conversation's log begins at: 1, or the first_seq it was
 * created with (whether or not an event is there yet).
 * Errors: STORE_E_NOTFOUND, STORE_E_INVAL. */
int store_event_first_seq(store_txn *txn, const char *conv, uint64_t *seq);

/* Every summary of the conversation, superseded ones too, in to_seq order
 * (agentd export). fn's non-zero return stops the walk and is returned.
 * Errors: STORE_E_NOTFOUND (conversation), STORE_E_CORRUPT, STORE_E_INVAL. */
int store_summaries_list(store_txn *txn, const char *conv,
			 int (*fn)(void *arg, const struct store_summary *s), void *arg);
/* Write a summary exactly as given: its from_seq, to_seq, version and
 * inserted_at (not the next version, not the clock's time), replacing one
 * with its to_seq; for agentd import, which carries each summary of a store
 * as its source had it. Later puts number on from the greatest version.
 * Errors: STORE_E_NOTFOUND, STORE_E_INVAL (as store_summary_put, or version
 * 0 or past INT64_MAX), STORE_E_CONFLICT (another to_seq of the
 * conversation has that version: a version names one summary). */
int store_summary_restore(store_txn *txn, const char *conv, const struct store_summary *s);

/* ---- tool calls ------------------------------------------------------ */

/* CANCELLED: settled by a `cancel` of its turn (it never ran to an outcome).
 * UNKNOWN: not settled: a server call whose dispatch began and was
 * interrupted, of a tool that is not safe to run twice; it waits for a
 * decision (docs/tools.md, "Calls whose outcome is unknown"). Like PENDING,
 * store_tool_call_resolve settles it. */
enum store_tc_status { STORE_TC_PENDING = 0, STORE_TC_RESOLVED, STORE_TC_ERRORED, STORE_TC_EXPIRED, STORE_TC_CANCELLED,
		       STORE_TC_UNKNOWN };
enum store_executor { STORE_EXEC_SERVER = EXEC_SERVER, STORE_EXEC_HUMAN = EXEC_HUMAN };
const char *store_tc_status_name(int status);
int store_tc_status_parse(const char *name, size_t len);

struct store_tool_call_in {
	const char *id;     /* tool call id: the conversation id alphabet */
	const char *name;   /* 1-128 bytes */
	int executor;       /* enum store_executor */
	store_bytes args;   /* msgpack */
	store_bytes prompt; /* msgpack string or nil; len 0: none */
};

struct store_tool_call {
	store_bytes id;
	store_bytes conversation;
	store_bytes name;
	int executor;
	int status;          /* enum store_tc_status */
	store_bytes args;
	store_bytes prompt;  /* len 0 when none */
	store_bytes result;  /* len 0 while pending */
	int64_t inserted_at;
	int64_t resolved_at; /* 0 while pending */
	int64_t deadline;    /* 0 when no expiry is scheduled */
	uint32_t attempts;   /* dispatches counted by store_tool_call_attempt */
};

/* Insert a pending tool call, or update an existing one's name, executor, args
 * and prompt (its status, result and attempts are kept: an upsert never
 * re-opens a settled call).
 * Errors: STORE_E_NOTFOUND (conversation), STORE_E_CONFLICT (the id belongs to
 * another conversation), STORE_E_INVAL. */
int store_tool_call_upsert(store_txn *txn, const char *conv, const struct store_tool_call_in *tc);
/* Errors: STORE_E_NOTFOUND, STORE_E_INVAL, STORE_E_CORRUPT. */
int store_tool_call_get(store_txn *txn, const char *id, struct store_tool_call *out);
/* Tool calls of a conversation in id order, only those whose status bit
 * (1 << status) is in `mask` (0: all). Errors: STORE_E_NOTFOUND, STORE_E_INVAL
 * (no fn), STORE_E_CORRUPT, the callback's. */
int store_tool_calls_list(store_txn *txn, const char *conv, unsigned mask,
			  int (*fn)(void *arg, const struct store_tool_call *tc), void *arg);
/* Every tool call row of the store, whatever its conversation, in id order
 * (for consistency checks: a row whose conversation or index entry is gone is
 * delivered too). Errors: STORE_E_CORRUPT (an undecodable row, after the rows
 * before it), the callback's. */
int store_tool_calls_each(store_txn *txn, int (*fn)(void *arg, const struct store_tool_call *tc), void *arg);
/* Count one more dispatch; *attempts (may be NULL) gets the new count.
 * Errors: STORE_E_NOTFOUND, STORE_E_INVAL. */
int store_tool_call_attempt(store_txn *txn, const char *id, uint32_t *attempts);
/* Move an unsettled call between PENDING and UNKNOWN: unknown 1 makes a
 * pending call unknown, 0 an unknown call pending again (to be dispatched
 * again); its attempts, args and deadline are kept.
 * Errors: STORE_E_STALE (unknown id, or not in the state it moves from:
 * nothing written), STORE_E_INVAL. */
int store_tool_call_unknown(store_txn *txn, const char *id, int unknown);
/* Settle a call if and only if it is pending or unknown: status is resolved, errored,
 * expired or cancelled, result one msgpack object (len 0: nil). Its expiry, if any, is
 * removed. Atomic against other resolvers (writers are serialised).
 * conv (may be NULL; STORE_ID_MAX + 1 bytes) gets the owning conversation id,
 * NUL-terminated. Errors: STORE_E_STALE (unknown id, or settled), STORE_E_INVAL. */
int store_tool_call_resolve(store_txn *txn, const char *id, int status, store_bytes result,
			    char *conv);

/* ---- expiries (durable deadlines of pending calls) ------------------- */

/* Schedule the call to expire at deadline_ms, replacing an earlier deadline.
 * Errors: STORE_E_NOTFOUND (no such call), STORE_E_STALE (not pending), STORE_E_INVAL. */
int store_expiry_schedule(store_txn *txn, const char *tool_call_id, int64_t deadline_ms);
/* Remove the call's deadline; 0 also when there was none (or no such
 * call). Errors: STORE_E_INVAL. */
int store_expiry_cancel(store_txn *txn, const char *tool_call_id);
/* Remove the deadline row (deadline_ms, tool_call_id) itself, reading no
 * tool call: for a row store_expiries_due gave whose call cannot be expired
 * (settled or gone, or its records unreadable: a damaged store, which
 * `agentd check` lists). The call's record is left as it is. 0 also when
 * there was no such row. Errors: STORE_E_INVAL. */
int store_expiry_drop(store_txn *txn, int64_t deadline_ms, const char *tool_call_id);
/* Deadlines <= now_ms, earliest first (ties in tool call id order).
 * Errors: STORE_E_INVAL (no fn), STORE_E_CORRUPT, the callback's. */
struct store_expiry {
	int64_t deadline;
	store_bytes tool_call_id;
	store_bytes conversation;
};
int store_expiries_due(store_txn *txn, int64_t now_ms,
		       int (*fn)(void *arg, const struct store_expiry *e), void *arg);
/* What store_expiries_due gives, at most `limit` (0: no limit) of them,
 * for a node to fire: on PostgreSQL a write transaction locks their
 * conversations' rows and skips rows another transaction holds (FOR UPDATE
 * OF convs SKIP LOCKED: a node firing them, or the conversation's worker
 * writing), so nodes firing at once share the deadlines out and none
 * waits; a skipped one comes again once that transaction ends, and
 * store_tool_call_resolve settles a call once whoever tries. A row whose
 * conversation is gone (a damaged store) is not given there: its
 * store_expiries_due does. On LMDB it is store_expiries_due with a limit.
 * Errors: STORE_E_INVAL (no fn), STORE_E_CORRUPT, the callback's. */
int store_expiries_claim(store_txn *txn, int64_t now_ms, size_t limit,
			 int (*fn)(void *arg, const struct store_expiry *e), void *arg);
/* The earliest deadline. Errors: STORE_E_NOTFOUND (none scheduled),
 * STORE_E_INVAL (deadline_ms NULL). */
int store_expiry_earliest(store_txn *txn, int64_t *deadline_ms);

/* ---- expiry warnings ------------------------------------------------- */

/* A pending call's warning time (a human tool's warn_before ahead of its
 * deadline): at most one per call, a second schedule replaces the first.
 * Settling the call (store_tool_call_resolve) and deleting its conversation
 * remove it; whoever commits the warning's event drops it in the same
 * transaction, so a warning is given once, across kills and restarts.
 * store_warnings_due delivers struct store_expiry rows whose deadline is the
 * warning time. Errors: store_warning_schedule: STORE_E_NOTFOUND (no such
 * call), STORE_E_STALE (not pending), STORE_E_INVAL (bad id, at_ms <= 0);
 * store_warning_earliest: STORE_E_NOTFOUND (none); store_warning_drop: 0
 * also when there was none, STORE_E_INVAL. */
int store_warning_schedule(store_txn *txn, const char *tool_call_id, int64_t at_ms);
int store_warning_drop(store_txn *txn, const char *tool_call_id);
/* Warning times <= now_ms, earliest first (ties in tool call id order).
 * Errors: as store_expiries_due. */
int store_warnings_due(store_txn *txn, int64_t now_ms, int (*fn)(void *arg, const struct store_expiry *e),
		       void *arg);
int store_warning_earliest(store_txn *txn, int64_t *at_ms);

/* ---- schedules (durable wakeups of a conversation) ------------------ */

/* A schedule: a wake of a conversation at a time (unix ms), once or on a
 * cron spec (common/cron.h; the store keeps its text and does not read
 * it), with a text the conversation is given when it fires. Whoever fires
 * one appends its event and removes the row (store_schedule_drop) or moves
 * it to its next time (store_schedule_move) in the same transaction, so a
 * schedule fires once across kills, restarts and nodes. Deleting a
 * conversation removes its schedules. */
#define STORE_SCHEDULE_TEXT_MAX (64 * 1024) /* bytes of a schedule's text */
#define STORE_CRON_MAX 256                  /* bytes of its cron spec */
struct store_schedule {
	store_bytes id;
	store_bytes conversation;
	int64_t due;      /* unix ms */
	store_bytes cron; /* len 0: once */
	store_bytes text;
};
/* A new schedule. cron NULL or "": once. Errors: STORE_E_NOTFOUND (no such
 * conversation), STORE_E_CONFLICT (id taken), STORE_E_INVAL (bad id or
 * conversation id, due_ms <= 0, text or cron too long, cron not printable
 * text). */
int store_schedule_put(store_txn *txn, const char *id, const char *conv, int64_t due_ms, const char *cron,
		       store_bytes text);
/* Errors: STORE_E_NOTFOUND (none), STORE_E_INVAL. */
int store_schedule_get(store_txn *txn, const char *id, struct store_schedule *out);
/* Its next time. Errors: STORE_E_NOTFOUND (none), STORE_E_INVAL (due_ms <= 0). */
int store_schedule_move(store_txn *txn, const char *id, int64_t due_ms);
/* Remove it. Errors: STORE_E_NOTFOUND (none), STORE_E_INVAL. */
int store_schedule_drop(store_txn *txn, const char *id);
/* conv's schedules (NULL: every conversation's), earliest first, ties in
 * id order. Errors: STORE_E_INVAL (no fn, bad conv), STORE_E_CORRUPT, the
 * callback's. */
int store_schedules_list(store_txn *txn, const char *conv, int (*fn)(void *arg, const struct store_schedule *s),
			 void *arg);
/* Schedules due at now_ms (due <= now_ms), earliest first, at most limit
 * (0: no limit), for a node to fire: on PostgreSQL in a write transaction
 * their conversations' rows are locked and a row another transaction holds
 * is skipped (as store_expiries_claim). Errors: as store_schedules_list. */
int store_schedules_due(store_txn *txn, int64_t now_ms, size_t limit,
			int (*fn)(void *arg, const struct store_schedule *s), void *arg);
/* The earliest due time. Errors: STORE_E_NOTFOUND (none), STORE_E_INVAL. */
int store_schedule_earliest(store_txn *txn, int64_t *due_ms);

/* ---- audit (model calls) --------------------------------------------- */

struct store_model_call_in {
	uint64_t turn_ref;          /* the turn's key: its assistant_msg seq, or any increasing number */
	store_bytes rendered;       /* msgpack: exactly what the model was given */
	const char *model;
	struct store_usage usage;
	uint64_t latency_ms;
	uint64_t summary_version;   /* 0: no summary */
};
struct store_model_call {
	uint64_t turn_ref;
	store_bytes rendered;
	store_bytes model;
	struct store_usage usage;
	uint64_t latency_ms;
	uint64_t summary_version;
	int64_t inserted_at;
};
/* Record one model call; a no-op returning 0 unless the store was opened with
 * audit. A repeated turn_ref replaces the row. Errors: STORE_E_NOTFOUND, STORE_E_INVAL. */
int store_model_call_put(store_txn *txn, const char *conv, const struct store_model_call_in *mc);
/* The conversation's audit rows in turn_ref order. Errors:
 * STORE_E_NOTFOUND, STORE_E_INVAL (no fn), STORE_E_CORRUPT, the callback's. */
int store_model_calls_list(store_txn *txn, const char *conv,
			   int (*fn)(void *arg, const struct store_model_call *mc), void *arg);
/* Delete audit rows inserted more than ttl_ms before now (a row exactly ttl_ms
 * old is kept), of one conversation or, with conv NULL, of all. *removed gets
 * the count (may be NULL). Errors: STORE_E_NOTFOUND (conv given and absent),
 * STORE_E_INVAL (ttl_ms < 0, a bad conv). */
int store_model_calls_gc(store_txn *txn, const char *conv, int64_t ttl_ms, uint64_t *removed);

/* ---- runs (one per model turn attempt) ------------------------------- */

/* A run's status: RUNNING from the transaction that starts the model call,
 * then COMPLETED (its assistant_msg committed), FAILED (an error ended it),
 * CANCELLED (a `cancel`), or INTERRUPTED (its worker died: the turn is run
 * again as the next run, attempt + 1). */
enum store_run_status {
	STORE_RUN_RUNNING = 0, STORE_RUN_COMPLETED, STORE_RUN_FAILED, STORE_RUN_CANCELLED, STORE_RUN_INTERRUPTED
};
const char *store_run_status_name(int status); /* NULL when out of range */

struct store_run {
	uint64_t id;                  /* 1, 2, ... within its conversation; 0 is no run */
	int status;                   /* enum store_run_status */
	uint32_t attempt;             /* 1, or 1 + the attempt of the run it re-runs */
	uint64_t from_seq, to_seq;    /* consumed: the events (from_seq, to_seq] it answers */
	uint64_t first_seq, last_seq; /* produced: the events it appended, 0 and 0 when none */
	store_bytes model;            /* the model's name (bytes, not NUL-terminated) */
	struct store_usage usage;
	int64_t started_at, ended_at; /* ms since the epoch; ended_at 0 while running */
};
/* Insert run r->id of conv, or replace it (the same id: its end). Errors:
 * STORE_E_NOTFOUND (no such conversation), STORE_E_INVAL (id 0 or past
 * INT64_MAX, a status out of range, attempt 0, NULL model, a negative cost). */
int store_run_put(store_txn *txn, const char *conv, const struct store_run *r);
/* Run id of conv into *out (its model points into the transaction's pages).
 * Errors: STORE_E_NOTFOUND (no such conversation or run), STORE_E_INVAL. */
int store_run_get(store_txn *txn, const char *conv, uint64_t id, struct store_run *out);
/* conv's runs, newest (highest id) first: those with an id below before (0:
 * no bound), at most limit (0: all). *more (may be NULL) says whether runs
 * were left past limit. fn's non-zero return stops the walk and is returned.
 * Errors: STORE_E_NOTFOUND (no such conversation), STORE_E_INVAL. */
int store_runs_list(store_txn *txn, const char *conv, uint64_t before, size_t limit,
		    int (*fn)(void *arg, const struct store_run *r), void *arg, int *more);
/* Every run row of the store, whatever its conversation (for consistency
 * checks): grouped by conversation, in ascending id within each; conv is
 * the id of the conversation the row belongs to, len 0 when that
 * conversation does not exist (a row left behind: a damaged store); the
 * rows of a conversation whose record cannot be decoded are passed over
 * (reading that record reports it). fn's non-zero return stops the walk
 * and is returned. Errors: STORE_E_INVAL (no fn), STORE_E_CORRUPT (an
 * undecodable row, after the rows before it). */
int store_runs_each(store_txn *txn, int (*fn)(void *arg, store_bytes conv, const struct store_run *r), void *arg);

/* ---- several conversations locked at once ----------------------------- */

/* Lock the conversations ids[0..n) for the rest of a write transaction, in
 * one step: a transaction about to write to several conversations (agentd's
 * group commit) names them up front. Ids not in the store are passed over,
 * repeated ones count once; it changes nothing and nothing a later operation
 * returns. On LMDB (one writer at a time) it only checks its arguments. On
 * PostgreSQL it locks their rows in one statement, in id order (two such
 * transactions do not deadlock over them), and keeps what it read, so the
 * next store_conv_get of each in this transaction needs no round trip (until
 * an operation of the transaction may have changed the row).
 * Errors: STORE_E_INVAL (a read transaction, a bad id, ids NULL with n > 0). */
int store_convs_lock(store_txn *txn, const char *const *ids, size_t n);

#endif
