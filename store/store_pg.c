/*
 * store_pg.c: the store (store.h) over PostgreSQL, through libpq.
 *
 * This file is kept whole because every query here is written against one private
 * layer: the statement table (Q_*, prepared on a connection at its first use), the
 * parameter packer and result readers, the connection pool, the row lock
 * a write transaction holds and its gathered, pipelined event inserts.
 * Split, they would become an internal header of this one backend, as
 * LMDB's mdb.c keeps its B-tree in one file. It reads in sections
 * (---- name ----): statements; handles; errors; parameters and results;
 * connections; the schema; open, close, sync, stat; transactions; then the
 * operations in store.h's order; the backend's table last. No function here
 * checks its arguments: store.c did (store/backend.h, "Who checks what").
 *
 * Tables (created by store_open in the connection's current schema, version
 * in schema_version; see docs/scale-out.md, "The PostgreSQL store"):
 *
 *   convs        id -> status, created_at, updated_at, lease, in_tok, out_tok,
 *                      cost, last_seq, settings, fsm, metadata, turns, owner, lease_expires,
 *                      first_seq (where the log begins: 1, or store_conv_create_at's)
 *   events       (conv, seq) -> type, inserted_at, event_id, content
 *                (unique (conv, event_id) where event_id is not null: the
 *                idempotency index)
 *   summaries    (conv, to_seq) -> from_seq, version, inserted_at, content
 *   tool_calls   id -> conv, name, executor, status, inserted_at, resolved_at,
 *                      deadline, attempts, args, prompt, result
 *   expiries     (deadline, tool_call_id) -> conv
 *   warnings     tool_call_id -> at, conv (index (at, tool_call_id))
 *   schedules    id -> conv, due, cron, text (index (due, id); version 2)
 *   model_calls  (conv, turn_ref) -> model, in_tok, out_tok, cost, latency,
 *                      summary_version, inserted_at, rendered
 *   lease_seq    the sequence writer generations come from
 *   nodes        id -> started_at, beat_at, expires_at (convs.owner and
 *                convs.lease_expires hold each conversation's lease)
 *
 * Content is msgpack in bytea columns; integers are bigint (uint64 values
 * bit-cast, turn_ref mapped so its order is kept); ids are text COLLATE "C"
 * (byte order, as LMDB's keys).
 *
 * Each open transaction has a connection of its own (a read beside a write
 * needs two); ended transactions hand theirs back to a few spares. A read
 * transaction is REPEATABLE READ READ ONLY, its snapshot taken at begin. A
 * write transaction is READ COMMITTED and takes row locks: every write that
 * concerns a conversation locks its convs row first (SELECT ... FOR UPDATE),
 * so two writers of one conversation serialise, and store_lease_check holds
 * the row until the commit: a lease_next waits for it, and the writer it
 * supersedes sees the new generation in its next transaction. Every query
 * asks for binary results, kept on the transaction until it ends: what a
 * read returns points into them.
 */
#define STORE_BACKEND_NAME(n) pg_store_##n
#include "store/backend_names.h"
#include "store/store.h"
#include "store/backend.h"
#include "common/mp.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SCHEMA_VERSION 2
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define NSPARE 2          /* idle connections a handle keeps */
#define ROW_OVERHEAD 64   /* bytes counted per row written against the quota */
#define GATHER_MAX (8u << 20) /* event content gathered before it goes out as one insert */
#define GATHER_ONE (1u << 20) /* a larger event is inserted alone */

/* ---- statements ------------------------------------------------------ */

enum {
	Q_CONV_GET, Q_CONV_LOCK, Q_CONV_INSERT, Q_CONV_UPDATE, Q_CONV_LIST, Q_CONV_IDS, Q_CONV_DELETE,
	Q_LEASE_NEXT, Q_LEASE_GET, Q_LEASE_LOCK, Q_USAGE_SET, Q_TURNS_SET, Q_LAST_SEQ,
	Q_EVENT_DUP, Q_EVENT_INSERT, Q_EVENT_ID_SEQ, Q_EVENT_IDS,
	Q_STREAM, Q_STREAM_TAIL,
	Q_SUMMARY_PUT, Q_SUMMARY_LATEST,
	Q_TC_UPSERT, Q_TC_GET, Q_TC_LOCK, Q_TC_CONV_LOCK, Q_TC_LIST, Q_TC_EACH, Q_TC_ATTEMPT, Q_TC_RESOLVE,
	Q_EXP_SCHEDULE, Q_EXP_CANCEL, Q_EXP_DROP, Q_EXP_DUE, Q_EXP_EARLIEST,
	Q_WARN_SCHEDULE, Q_WARN_DROP, Q_WARN_DUE, Q_WARN_EARLIEST,
	Q_MC_PUT, Q_MC_LIST, Q_MC_GC,
	Q_RUN_PUT, Q_RUN_GET, Q_RUN_LIST,
	Q_NODE_BEAT, Q_NODE_LEAVE, Q_NODES_LIST, Q_OWNER_GET, Q_OWNER_LOCK, Q_CLAIM, Q_RELEASE,
	Q_CLAIMABLE, Q_CLAIMABLE_LOCK, Q_NODE_LEASES,
	Q_NOTIFY,
	Q_EXP_CLAIM, Q_EXP_CLAIM_READ,
	Q_META_SET, Q_META_DEL, Q_META_INS, Q_CONV_FIND_META,
	Q_LOG_START, Q_RUN_EACH,
	Q_CONVS_LOCK,
	NQ
};

#define CONV_COLS "id, status, created_at, updated_at, lease, in_tok, out_tok, cost, settings, fsm, metadata, turns"
#define CONV_NCOLS 12 /* Q_CONV_LOCK's last_seq follows them */
#define EV_COLS "seq, type, inserted_at, event_id, content"
#define TC_COLS "id, conv, name, executor, status, inserted_at, resolved_at, deadline, attempts, args, prompt, result"
#define RUN_COLS "id, status, attempt, from_seq, to_seq, first_seq, last_seq, model, in_tok, out_tok, cost, " \
	"started_at, ended_at"
#define MC_COLS "turn_ref, model, in_tok, out_tok, cost, latency, summary_version, inserted_at, rendered"

static const char *const sql[NQ] = {
	[Q_CONV_GET] = "SELECT " CONV_COLS " FROM convs WHERE id = $1::text",
	[Q_CONV_LOCK] = "SELECT " CONV_COLS ", last_seq FROM convs WHERE id = $1::text FOR UPDATE",
	[Q_CONV_INSERT] = "INSERT INTO convs (id, status, created_at, updated_at, settings) "
			  "VALUES ($1::text, 0, $2::int8, $2::int8, $3::bytea) ON CONFLICT (id) DO NOTHING RETURNING 1",
	[Q_CONV_UPDATE] = "UPDATE convs SET settings = $2::bytea, status = $3::int8, fsm = $4::bytea, "
			  "updated_at = $5::int8 WHERE id = $1::text",
	[Q_CONV_LIST] = "SELECT " CONV_COLS " FROM convs WHERE ($1::text IS NULL OR id > $1::text) "
			"AND ($2::int8 < 0 OR status = $2::int8) ORDER BY id LIMIT $3::int8",
	[Q_CONV_IDS] = "SELECT id FROM convs ORDER BY id",
	[Q_CONV_DELETE] = "WITH e AS (DELETE FROM events WHERE conv = $1::text), "
			  "s AS (DELETE FROM summaries WHERE conv = $1::text), "
			  "x AS (DELETE FROM expiries USING tool_calls t WHERE t.conv = $1::text "
			  "AND expiries.tool_call_id = t.id AND expiries.deadline = t.deadline), "
			  "t AS (DELETE FROM tool_calls WHERE conv = $1::text), "
			  "m AS (DELETE FROM model_calls WHERE conv = $1::text), "
			  "r AS (DELETE FROM runs WHERE conv = $1::text), "
			  "k AS (DELETE FROM conv_meta WHERE conv = $1::text), "
			  "w AS (DELETE FROM warnings WHERE conv = $1::text), "
			  "sc AS (DELETE FROM schedules WHERE conv = $1::text) "
			  "DELETE FROM convs WHERE id = $1::text RETURNING 1",
	[Q_LEASE_NEXT] = "UPDATE convs SET lease = GREATEST(nextval('lease_seq'), lease + 1) "
			 "WHERE id = $1::text RETURNING lease",
	[Q_LEASE_GET] = "SELECT lease FROM convs WHERE id = $1::text",
	[Q_LEASE_LOCK] = "SELECT lease, last_seq FROM convs WHERE id = $1::text FOR UPDATE",
	[Q_USAGE_SET] = "UPDATE convs SET in_tok = $2::int8, out_tok = $3::int8, cost = $4::float8, "
			"updated_at = $5::int8 WHERE id = $1::text",
	[Q_TURNS_SET] = "UPDATE convs SET turns = $2::int8, updated_at = $3::int8 WHERE id = $1::text",
	[Q_LAST_SEQ] = "SELECT last_seq, first_seq FROM convs WHERE id = $1::text",
	[Q_EVENT_DUP] = "SELECT seq FROM events WHERE conv = $1::text AND event_id = $2::bytea",
	/* One round trip per event: the insert, or nothing for a repeated
	 * event_id (then Q_EVENT_DUP says its seq), and last_seq follows. */
	[Q_EVENT_INSERT] = "WITH i AS (INSERT INTO events (conv, seq, type, inserted_at, event_id, content) "
			   "VALUES ($1::text, $2::int8, $3::text, $4::int8, $5::bytea, $6::bytea) "
			   "ON CONFLICT (conv, event_id) WHERE event_id IS NOT NULL DO NOTHING RETURNING seq) "
			   "UPDATE convs SET last_seq = i.seq FROM i WHERE convs.id = $1::text RETURNING i.seq",
	[Q_EVENT_ID_SEQ] = "SELECT e.seq FROM convs c LEFT JOIN events e ON e.conv = c.id "
			   "AND e.event_id = $2::bytea WHERE c.id = $1::text",
	[Q_EVENT_IDS] = "SELECT event_id, seq FROM events WHERE conv = $1::text AND event_id IS NOT NULL "
			"ORDER BY event_id",
	[Q_STREAM] = "SELECT " EV_COLS " FROM events WHERE conv = $1::text AND seq > $2::int8 AND seq < $3::int8 "
		     "AND ($4::text IS NULL OR type = $4::text) ORDER BY seq",
	[Q_STREAM_TAIL] = "SELECT * FROM (SELECT " EV_COLS " FROM events WHERE conv = $1::text AND seq > $2::int8 "
			  "AND seq < $3::int8 AND ($4::text IS NULL OR type = $4::text) ORDER BY seq DESC "
			  "LIMIT $5::int8) t ORDER BY seq",
	[Q_SUMMARY_PUT] = "INSERT INTO summaries (conv, to_seq, from_seq, version, inserted_at, content) "
			  "SELECT $1::text, $2::int8, $3::int8, coalesce(max(version), 0) + 1, $4::int8, $5::bytea "
			  "FROM summaries WHERE conv = $1::text ON CONFLICT (conv, to_seq) DO UPDATE SET "
			  "from_seq = EXCLUDED.from_seq, version = EXCLUDED.version, "
			  "inserted_at = EXCLUDED.inserted_at, content = EXCLUDED.content RETURNING version",
	[Q_SUMMARY_LATEST] = "SELECT s.from_seq, s.to_seq, s.version, s.inserted_at, s.content FROM convs c "
			     "LEFT JOIN LATERAL (SELECT * FROM summaries WHERE conv = c.id ORDER BY to_seq DESC "
			     "LIMIT 1) s ON true WHERE c.id = $1::text",
	[Q_TC_UPSERT] = "INSERT INTO tool_calls (id, conv, name, executor, status, inserted_at, args, prompt) "
			"VALUES ($1::text, $2::text, $3::bytea, $4::int8, 0, $5::int8, $6::bytea, $7::bytea) "
			"ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, executor = EXCLUDED.executor, "
			"args = EXCLUDED.args, prompt = EXCLUDED.prompt WHERE tool_calls.conv = EXCLUDED.conv "
			"RETURNING 1",
	[Q_TC_GET] = "SELECT " TC_COLS " FROM tool_calls WHERE id = $1::text",
	[Q_TC_LOCK] = "SELECT status, deadline, conv FROM tool_calls WHERE id = $1::text FOR UPDATE",
	[Q_TC_CONV_LOCK] = "SELECT c.id FROM tool_calls t JOIN convs c ON c.id = t.conv WHERE t.id = $1::text "
			   "FOR UPDATE OF c",
	[Q_TC_LIST] = "SELECT " TC_COLS " FROM tool_calls WHERE conv = $1::text "
		      "AND ($2::int8 = 0 OR ((1::int8 << status::int) & $2::int8) <> 0) ORDER BY id",
	[Q_TC_EACH] = "SELECT " TC_COLS " FROM tool_calls ORDER BY id",
	[Q_TC_ATTEMPT] = "UPDATE tool_calls SET attempts = LEAST(attempts + 1, 4294967295) WHERE id = $1::text "
			 "RETURNING attempts",
	[Q_TC_RESOLVE] = "WITH old AS (SELECT id, conv, deadline FROM tool_calls WHERE id = $1::text "
			 "AND status IN (0, 5) FOR UPDATE), "
			 "u AS (UPDATE tool_calls t SET status = $2::int8, result = $3::bytea, resolved_at = $4::int8, "
			 "deadline = 0 FROM old WHERE t.id = old.id RETURNING 1), "
			 "d AS (DELETE FROM expiries e USING old WHERE old.deadline > 0 AND e.deadline = old.deadline "
			 "AND e.tool_call_id = old.id), "
			 "w AS (DELETE FROM warnings w USING old WHERE w.tool_call_id = old.id) SELECT conv FROM old",
	[Q_EXP_SCHEDULE] = "WITH d AS (DELETE FROM expiries WHERE deadline = $3::int8 AND tool_call_id = $1::text), "
			   "u AS (UPDATE tool_calls SET deadline = $2::int8 WHERE id = $1::text) "
			   "INSERT INTO expiries (deadline, tool_call_id, conv) VALUES ($2::int8, $1::text, $4::text) "
			   "ON CONFLICT (deadline, tool_call_id) DO UPDATE SET conv = EXCLUDED.conv",
	[Q_EXP_CANCEL] = "WITH d AS (DELETE FROM expiries WHERE deadline = $2::int8 AND tool_call_id = $1::text) "
			 "UPDATE tool_calls SET deadline = 0 WHERE id = $1::text",
	[Q_EXP_DROP] = "DELETE FROM expiries WHERE deadline = $1::int8 AND tool_call_id = $2::text",
	[Q_EXP_DUE] = "SELECT deadline, tool_call_id, conv FROM expiries WHERE deadline <= $1::int8 "
		      "ORDER BY deadline, tool_call_id",
	[Q_EXP_EARLIEST] = "SELECT deadline FROM expiries ORDER BY deadline LIMIT 1",
	[Q_WARN_SCHEDULE] = "INSERT INTO warnings (tool_call_id, at, conv) VALUES ($1::text, $2::int8, $3::text) "
			    "ON CONFLICT (tool_call_id) DO UPDATE SET at = EXCLUDED.at, conv = EXCLUDED.conv",
	[Q_WARN_DROP] = "DELETE FROM warnings WHERE tool_call_id = $1::text",
	[Q_WARN_DUE] = "SELECT at, tool_call_id, conv FROM warnings WHERE at <= $1::int8 ORDER BY at, tool_call_id",
	[Q_WARN_EARLIEST] = "SELECT at FROM warnings ORDER BY at, tool_call_id LIMIT 1",
	[Q_MC_PUT] = "INSERT INTO model_calls (conv, turn_ref, model, in_tok, out_tok, cost, latency, "
		     "summary_version, inserted_at, rendered) VALUES ($1::text, $2::int8, $3::bytea, $4::int8, "
		     "$5::int8, $6::float8, $7::int8, $8::int8, $9::int8, $10::bytea) ON CONFLICT (conv, turn_ref) "
		     "DO UPDATE SET model = EXCLUDED.model, in_tok = EXCLUDED.in_tok, out_tok = EXCLUDED.out_tok, "
		     "cost = EXCLUDED.cost, latency = EXCLUDED.latency, summary_version = EXCLUDED.summary_version, "
		     "inserted_at = EXCLUDED.inserted_at, rendered = EXCLUDED.rendered",
	[Q_MC_LIST] = "SELECT " MC_COLS " FROM model_calls WHERE conv = $1::text ORDER BY turn_ref",
	[Q_MC_GC] = "DELETE FROM model_calls WHERE ($1::text IS NULL OR conv = $1::text) AND inserted_at < $2::int8",
	[Q_RUN_PUT] = "INSERT INTO runs (conv, " RUN_COLS ") VALUES ($1::text, $2::int8, $3::int8, $4::int8, $5::int8, "
		      "$6::int8, $7::int8, $8::int8, $9::bytea, $10::int8, $11::int8, $12::float8, $13::int8, $14::int8) "
		      "ON CONFLICT (conv, id) DO UPDATE SET status = EXCLUDED.status, attempt = EXCLUDED.attempt, "
		      "from_seq = EXCLUDED.from_seq, to_seq = EXCLUDED.to_seq, first_seq = EXCLUDED.first_seq, "
		      "last_seq = EXCLUDED.last_seq, model = EXCLUDED.model, in_tok = EXCLUDED.in_tok, "
		      "out_tok = EXCLUDED.out_tok, cost = EXCLUDED.cost, started_at = EXCLUDED.started_at, "
		      "ended_at = EXCLUDED.ended_at",
	[Q_RUN_GET] = "SELECT " RUN_COLS " FROM runs WHERE conv = $1::text AND id = $2::int8",
	/* One more than the limit says whether runs are left. */
	[Q_RUN_LIST] = "SELECT " RUN_COLS " FROM runs WHERE conv = $1::text AND ($2::int8 = 0 OR id < $2::int8) "
		       "ORDER BY id DESC LIMIT $3::int8",
	/* Nodes and leases. A node's leases are locked in id order, as every
	 * transaction that locks several conversations should. */
	/* A beat never waits on a row another transaction holds (another
	 * node's, stopped inside it, above all): it renews the leases whose
	 * rows are free, and says how many it holds; BEAT_REST_SQL then
	 * renews the others, under lock_timeout. */
	[Q_NODE_BEAT] = "WITH n AS (INSERT INTO nodes (id, started_at, beat_at, expires_at) "
			"VALUES ($1::text, $2::int8, $2::int8, $3::int8) ON CONFLICT (id) DO UPDATE SET "
			"beat_at = EXCLUDED.beat_at, expires_at = EXCLUDED.expires_at), "
			"l AS (UPDATE convs c SET lease_expires = $3::int8 FROM (SELECT id FROM convs "
			"WHERE owner = $1::text ORDER BY id FOR UPDATE SKIP LOCKED) o WHERE c.id = o.id RETURNING 1) "
			"SELECT (SELECT count(*) FROM l)::int8, "
			"(SELECT count(*) FROM convs WHERE owner = $1::text)::int8",
	[Q_NODE_LEAVE] = "WITH l AS (UPDATE convs c SET owner = NULL, lease_expires = 0 FROM (SELECT id FROM convs "
			 "WHERE owner = $1::text ORDER BY id FOR UPDATE) o WHERE c.id = o.id) "
			 "DELETE FROM nodes WHERE id = $1::text",
	[Q_NODES_LIST] = "SELECT n.id, n.started_at, n.beat_at, n.expires_at, "
			 "(SELECT count(*) FROM convs c WHERE c.owner = n.id)::int8 FROM nodes n ORDER BY n.id",
	[Q_OWNER_GET] = "SELECT owner, lease, lease_expires FROM convs WHERE id = $1::text",
	[Q_OWNER_LOCK] = "SELECT owner, lease, lease_expires, last_seq FROM convs WHERE id = $1::text FOR UPDATE",
	[Q_CLAIM] = "UPDATE convs SET owner = $2::text, lease_expires = $3::int8, "
		    "lease = GREATEST(nextval('lease_seq'), lease + 1) WHERE id = $1::text RETURNING lease",
	[Q_RELEASE] = "UPDATE convs SET owner = NULL, lease_expires = 0 WHERE id = $1::text AND owner = $2::text "
		      "AND lease = $3::int8 RETURNING 1",
	[Q_CLAIMABLE] = "SELECT id FROM convs WHERE ($1::int8 = 0 OR ((1::int8 << status::int) & $1::int8) <> 0) "
			"AND (owner IS NULL OR lease_expires <= $2::int8) ORDER BY id LIMIT $3::int8",
	/* Nodes looking for orphans at once share them out: each takes the
	 * rows no other transaction holds. */
	[Q_CLAIMABLE_LOCK] = "SELECT id FROM convs WHERE ($1::int8 = 0 OR ((1::int8 << status::int) & $1::int8) <> 0) "
			     "AND (owner IS NULL OR lease_expires <= $2::int8) ORDER BY id LIMIT $3::int8 "
			     "FOR UPDATE SKIP LOCKED",
	[Q_NODE_LEASES] = "SELECT id, lease, lease_expires FROM convs WHERE owner = $1::text ORDER BY id",
	[Q_EXP_CLAIM] = "SELECT e.deadline, e.tool_call_id, e.conv FROM expiries e JOIN convs c ON c.id = e.conv "
			"WHERE e.deadline <= $1::int8 ORDER BY e.deadline, e.tool_call_id LIMIT $2::int8 "
			"FOR UPDATE OF c SKIP LOCKED",
	[Q_EXP_CLAIM_READ] = "SELECT e.deadline, e.tool_call_id, e.conv FROM expiries e JOIN convs c ON c.id = e.conv "
			     "WHERE e.deadline <= $1::int8 ORDER BY e.deadline, e.tool_call_id LIMIT $2::int8",
	[Q_NOTIFY] = "SELECT pg_notify('ad_' || md5(current_schema() || '/' || $1::text), $2::text)",
	[Q_META_SET] = "UPDATE convs SET metadata = $2::bytea WHERE id = $1::text",
	[Q_META_DEL] = "DELETE FROM conv_meta WHERE conv = $1::text",
	[Q_META_INS] = "INSERT INTO conv_meta (k, v, conv) VALUES ($1::bytea, $2::bytea, $3::text)",
	/* Walks conv_meta's primary key (k, v, conv): the matches of one pair, in id order. */
	[Q_CONV_FIND_META] = "SELECT " CONV_COLS " FROM conv_meta m JOIN convs c ON c.id = m.conv "
			     "WHERE m.k = $1::bytea AND m.v = $2::bytea AND ($3::text IS NULL OR m.conv > $3::text) "
			     "ORDER BY m.conv LIMIT $4::int8",
	/* A log that begins after seq 1 (store_conv_create_at), on the row just made. */
	[Q_LOG_START] = "UPDATE convs SET first_seq = $2::int8, last_seq = $2::int8 - 1 WHERE id = $1::text",
	/* Every run row, and whether its conversation exists (c.id null: not). */
	[Q_RUN_EACH] = "SELECT r.id, r.status, r.attempt, r.from_seq, r.to_seq, r.first_seq, r.last_seq, r.model, "
		       "r.in_tok, r.out_tok, r.cost, r.started_at, r.ended_at, c.id FROM runs r "
		       "LEFT JOIN convs c ON c.id = r.conv ORDER BY r.conv, r.id",
	/* ids joined by spaces (an id has none); the rows are locked as
	 * sorted, in id order. */
	[Q_CONVS_LOCK] = "SELECT " CONV_COLS ", last_seq FROM convs "
			 "WHERE id = ANY(string_to_array($1::text, ' ')) ORDER BY id FOR UPDATE",
};
_Static_assert(STORE_TC_PENDING == 0 && STORE_TC_UNKNOWN == 5, "Q_TC_RESOLVE names the unsettled statuses by number");

/* Schema version 1, created in one transaction under an advisory lock (two
 * processes opening a new store at once create it once). */
static const char schema_v1[] =
	"CREATE TABLE schema_version (version bigint NOT NULL);"
	"CREATE SEQUENCE lease_seq;"
	"CREATE TABLE convs (id text COLLATE \"C\" PRIMARY KEY, status bigint NOT NULL,"
	" created_at bigint NOT NULL, updated_at bigint NOT NULL, lease bigint NOT NULL DEFAULT 0,"
	" in_tok bigint NOT NULL DEFAULT 0, out_tok bigint NOT NULL DEFAULT 0,"
	" cost float8 NOT NULL DEFAULT 0, last_seq bigint NOT NULL DEFAULT 0,"
	" settings bytea NOT NULL, fsm bytea, metadata bytea, turns bigint NOT NULL DEFAULT 0,"
	" owner text COLLATE \"C\", lease_expires bigint NOT NULL DEFAULT 0);"
	"CREATE INDEX convs_owner ON convs (owner, id) WHERE owner IS NOT NULL;"
	"CREATE TABLE nodes (id text COLLATE \"C\" PRIMARY KEY, started_at bigint NOT NULL,"
	" beat_at bigint NOT NULL, expires_at bigint NOT NULL);"
	/* The metadata index: one row per (key, value) pair of a conversation. */
	"CREATE TABLE conv_meta (k bytea NOT NULL, v bytea NOT NULL, conv text COLLATE \"C\" NOT NULL,"
	" PRIMARY KEY (k, v, conv));"
	"CREATE INDEX conv_meta_conv ON conv_meta (conv);"
	"CREATE TABLE events (conv text COLLATE \"C\" NOT NULL, seq bigint NOT NULL,"
	" type text COLLATE \"C\" NOT NULL, inserted_at bigint NOT NULL, event_id bytea,"
	" content bytea NOT NULL, PRIMARY KEY (conv, seq));"
	/* Stored as written: a read hands out the bytes without
	 * decompressing, and the quota (max_map_size) sees what was written. */
	"ALTER TABLE events ALTER COLUMN content SET STORAGE EXTERNAL;"
	"CREATE UNIQUE INDEX events_event_id ON events (conv, event_id) WHERE event_id IS NOT NULL;"
	"CREATE TABLE summaries (conv text COLLATE \"C\" NOT NULL, to_seq bigint NOT NULL,"
	" from_seq bigint NOT NULL, version bigint NOT NULL, inserted_at bigint NOT NULL,"
	" content bytea NOT NULL, PRIMARY KEY (conv, to_seq));"
	"CREATE TABLE tool_calls (id text COLLATE \"C\" PRIMARY KEY, conv text COLLATE \"C\" NOT NULL,"
	" name bytea NOT NULL, executor bigint NOT NULL, status bigint NOT NULL,"
	" inserted_at bigint NOT NULL, resolved_at bigint NOT NULL DEFAULT 0,"
	" deadline bigint NOT NULL DEFAULT 0, attempts bigint NOT NULL DEFAULT 0,"
	" args bytea NOT NULL, prompt bytea, result bytea);"
	"CREATE INDEX tool_calls_conv ON tool_calls (conv, id);"
	"CREATE TABLE expiries (deadline bigint NOT NULL, tool_call_id text COLLATE \"C\" NOT NULL,"
	" conv text COLLATE \"C\" NOT NULL, PRIMARY KEY (deadline, tool_call_id));"
	"CREATE TABLE warnings (tool_call_id text COLLATE \"C\" PRIMARY KEY, at bigint NOT NULL,"
	" conv text COLLATE \"C\" NOT NULL);"
	"CREATE INDEX warnings_at ON warnings (at, tool_call_id);"
	"CREATE TABLE model_calls (conv text COLLATE \"C\" NOT NULL, turn_ref bigint NOT NULL,"
	" model bytea NOT NULL, in_tok bigint NOT NULL, out_tok bigint NOT NULL, cost float8 NOT NULL,"
	" latency bigint NOT NULL, summary_version bigint NOT NULL, inserted_at bigint NOT NULL,"
	" rendered bytea NOT NULL, PRIMARY KEY (conv, turn_ref));"
	"CREATE TABLE runs (conv text COLLATE \"C\" NOT NULL, id bigint NOT NULL, status bigint NOT NULL,"
	" attempt bigint NOT NULL, from_seq bigint NOT NULL, to_seq bigint NOT NULL, first_seq bigint NOT NULL,"
	" last_seq bigint NOT NULL, model bytea NOT NULL, in_tok bigint NOT NULL, out_tok bigint NOT NULL,"
	" cost float8 NOT NULL, started_at bigint NOT NULL, ended_at bigint NOT NULL, PRIMARY KEY (conv, id));"
	"ALTER TABLE convs ADD COLUMN first_seq bigint NOT NULL DEFAULT 1;"
	"INSERT INTO schema_version VALUES (1);";

/* Version 2: scheduled wakeups. A version 1 store is migrated to it by
 * the first open that may write (schema_migrate). */
static const char schema_v2[] =
	"CREATE TABLE schedules (id text COLLATE \"C\" PRIMARY KEY, conv text COLLATE \"C\" NOT NULL,"
	" due bigint NOT NULL, cron text, text bytea NOT NULL);"
	"CREATE INDEX schedules_due ON schedules (due, id);"
	"UPDATE schema_version SET version = 2;"; /* one row: the version */

/* Held by the session across the transaction that creates (or migrates)
 * the schema, and released after its commit. Not a transaction-level lock:
 * a process that waited for it must look again in a transaction begun
 * after the wait, since one begun before would keep its catalog cache's
 * word that the tables are absent (a wait on an advisory lock, unlike one
 * on a table's, does not refresh it) and create them a second time. */
#define SCHEMA_LOCK "SELECT pg_advisory_lock(7270018)"
#define SCHEMA_UNLOCK "SELECT pg_advisory_unlock(7270018)"

/* The bytes of this schema's tables, their indexes and TOAST included. */
#define SIZE_SQL \
	"SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c " \
	"WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'"

/* ---- handles --------------------------------------------------------- */

_Static_assert(NQ <= 64, "struct pgconn.prepared has a bit per statement");

struct pgconn {
	PGconn *c;
	uint64_t prepared; /* bit q: statement q is prepared on this connection */
};

struct store {
	const struct store_vt *vt; /* store_pg_vt: first, for store/store.c */
	char *conninfo;
	struct store_opts opts;
	int quota;        /* max_map_size was given: map_size is enforced */
	size_t map_size;  /* the limit in force, growing to max_map_size */
	int grow_pending; /* a write met the limit: grow before the next begins */
	uint64_t size_est;  /* the store's bytes when last measured, plus what this handle wrote since */
	int64_t measured;   /* CLOCK_MONOTONIC ms of that measure; 0: never */
	int ntxn;
	int writing;
	unsigned readers;
	struct pgconn *spare[NSPARE];
	int nspare;
	struct pgconn *listen; /* store_listen's connection, or NULL */
};

struct store_txn {
	struct store_txn_hdr h; /* first, for store/store.c: its table, mode and poison */
	store *s;
	struct pgconn *pc;
	int64_t now;
	uint64_t base;    /* with a quota: the store's bytes when the txn began */
	uint64_t written; /* bytes this txn wrote, counted against the quota */
	int64_t txid;     /* a write txn's server id, taken at begin (commit_outcome) */
	PGresult **res;   /* every result, cleared when the txn ends */
	size_t nres, cap;
	/* A write txn holds the row lock of conversation `held` (held_ok),
	 * whose last seq is held_last: its next operations on it need not
	 * ask again (the lock keeps both as they are but for this txn). */
	int held_ok;
	uint64_t held_last;
	char held[STORE_ID_MAX + 1];
	/* store_convs_lock's rows (a result kept on the txn): conv_load hands
	 * row i out while pre_ok[i], until a statement may have changed it. */
	PGresult *pre;
	unsigned char *pre_ok;
	/* Event inserts sent ahead in pipeline mode, their answers not read
	 * yet (pipe_drain): npipe statements inserting nahead events. */
	int npipe;
	size_t nahead;
	/* Events without an event_id gathered for one insert (gather_send):
	 * the elements of its arrays in PostgreSQL's binary array format, each
	 * buffer starting with room for the array's header. */
	struct {
		char *b;
		size_t len, cap;
	} g[4]; /* conv, seq, type, content */
	size_t ngather, gather_bytes;
};

/* ---- errors ---------------------------------------------------------- */

/* A server error as a store code, from its SQLSTATE. */
static int sqlstate_err(const PGresult *r, PGconn *c)
{
	const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (!st)
		return PQstatus(c) == CONNECTION_BAD ? -ECONNRESET : -EIO;
	if (strcmp(st, "53100") == 0 || strcmp(st, "54000") == 0)
		return STORE_E_FULL; /* disk full; a value past PostgreSQL's limits */
	if (strcmp(st, "53200") == 0)
		return -ENOMEM;
	if (strcmp(st, "53300") == 0 || strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0 ||
	    strcmp(st, "55P03") == 0)
		return -EAGAIN; /* too many connections, serialisation failure, deadlock, lock timeout */
	if (strcmp(st, "57014") == 0)
		return -ETIMEDOUT; /* statement_timeout */
	if (strcmp(st, "25006") == 0)
		return -EROFS; /* a read-only transaction: default_transaction_read_only, a hot standby */
	/* A lost connection, or a session the server ended: a restart, an
	 * operator, idle_in_transaction_session_timeout (25P03). */
	if (strncmp(st, "08", 2) == 0 || strncmp(st, "57P", 3) == 0 || strcmp(st, "25P03") == 0)
		return -ECONNRESET;
	/* Every insert the store makes names its conflict (ON CONFLICT): a
	 * unique violation is a row the store's own records say is absent. */
	if (strncmp(st, "XX", 2) == 0 || strcmp(st, "23505") == 0)
		return STORE_E_CORRUPT;
	return -EIO;
}

/* Record an error: as LMDB's, fatal ones poison a write txn. */
static int fail(store_txn *x, int err)
{
	if (err == STORE_E_FULL && x->s->quota)
		x->s->grow_pending = 1;
	return store_txn_poison(&x->h, err);
}

/* ---- parameters and results ------------------------------------------ */

#define MAXP 16 /* store_run_put's 14 */

struct args {
	int n;
	const char *v[MAXP];
	int len[MAXP];
	int fmt[MAXP];
	uint64_t num[MAXP]; /* big-endian integers and doubles */
};

static void a_bin(struct args *a, const void *p, size_t len)
{
	a->v[a->n] = p ? p : "";
	a->len[a->n] = (int)len;
	a->fmt[a->n++] = 1;
}

static void a_str(struct args *a, const char *s)
{
	if (s)
		a_bin(a, s, strlen(s));
	else {
		a->v[a->n] = NULL;
		a->len[a->n] = 0;
		a->fmt[a->n++] = 1;
	}
}

/* A byte string; len 0 is SQL NULL when nullable. */
static void a_bytes(struct args *a, store_bytes b, int nullable)
{
	if (b.len == 0 && nullable) {
		a->v[a->n] = NULL;
		a->len[a->n] = 0;
		a->fmt[a->n++] = 1;
	} else {
		a_bin(a, b.ptr, b.len);
	}
}

static void a_i64(struct args *a, int64_t v)
{
	a->num[a->n] = htobe64((uint64_t)v);
	a_bin(a, &a->num[a->n], 8);
}

static void a_f64(struct args *a, double d)
{
	uint64_t u;
	memcpy(&u, &d, 8);
	a->num[a->n] = htobe64(u);
	a_bin(a, &a->num[a->n], 8);
}

static void a_null(struct args *a)
{
	a->v[a->n] = NULL;
	a->len[a->n] = 0;
	a->fmt[a->n++] = 1;
}

static int64_t g_i64(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8)
		return 0;
	return (int64_t)mp_be64((const unsigned char *)PQgetvalue(r, row, col));
}

static double g_f64(const PGresult *r, int row, int col)
{
	uint64_t u = (uint64_t)g_i64(r, row, col);
	double d;
	memcpy(&d, &u, 8);
	return d;
}

static store_bytes g_bytes(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return (store_bytes){ NULL, 0 };
	return (store_bytes){ PQgetvalue(r, row, col), (size_t)PQgetlength(r, row, col) };
}

/* turn_ref keeps its order as a bigint: the top bit flipped. */
static int64_t ref_key(uint64_t v) { return (int64_t)(v ^ ((uint64_t)1 << 63)); }
static uint64_t ref_val(int64_t k) { return (uint64_t)k ^ ((uint64_t)1 << 63); }

/* Keep a result on the txn (cleared when it ends). */
static int keep(store_txn *x, PGresult *r)
{
	if (x->nres == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 16;
		PGresult **n = realloc(x->res, cap * sizeof *n);
		if (!n) {
			PQclear(r);
			return -ENOMEM;
		}
		x->res = n;
		x->cap = cap;
	}
	x->res[x->nres++] = r;
	return 0;
}

/* A statement's result r: kept on the txn, or NULL with *err set (a
 * server error poisons the txn, read or write, since PostgreSQL aborts the
 * transaction). */
static PGresult *result_kept(store_txn *x, PGresult *r, int *err)
{
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		*err = sqlstate_err(r, x->pc->c);
		PQclear(r);
		x->h.err = x->h.err ? x->h.err : *err;
		return NULL;
	}
	if ((*err = keep(x, r)) != 0) {
		x->h.err = x->h.err ? x->h.err : *err;
		return NULL;
	}
	return r;
}

/* Statement q prepared on the txn's connection (at its first use there);
 * name (8 bytes) gets its name. */
static int prepare(store_txn *x, int q, char *name)
{
	PGconn *c = x->pc->c;
	snprintf(name, 8, "s%d", q);
	if (x->pc->prepared & ((uint64_t)1 << q))
		return 0;
	PGresult *p = PQprepare(c, name, sql[q], 0, NULL);
	if (PQresultStatus(p) != PGRES_COMMAND_OK) {
		int err = sqlstate_err(p, c);
		PQclear(p);
		x->h.err = x->h.err ? x->h.err : err;
		return err;
	}
	PQclear(p);
	x->pc->prepared |= (uint64_t)1 << q;
	return 0;
}

static int gather_send(store_txn *x);

/* Read the answers to the event inserts sent ahead (x->npipe) and leave
 * pipeline mode: one round trip for them all, and with commit set the
 * txn's COMMIT too, sent behind them. An error there poisons the txn: the
 * append that met it was told 0, so the next operation or the commit says
 * it (nothing of a txn is acknowledged before its commit). Returns x->h.err,
 * or with commit the COMMIT's outcome as store_txn_commit's (but for a
 * lost connection, -ECONNRESET: it may have been made). */
static int pipe_finish(store_txn *x, int commit)
{
	PGconn *c = x->pc->c;
	int err = gather_send(x);
	int left = x->npipe, nulls = 0, seen = 0;
	size_t inserted = 0, ahead = x->nahead;
	if (!left)
		return err ? err : x->h.err;
	x->npipe = 0;
	x->nahead = 0;
	if (commit && !err && PQsendQueryParams(c, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) == 1)
		left++;
	else if (commit && !err)
		err = sqlstate_err(NULL, c);
	/* Always the sync: without it the server need not send its answers. */
	if (PQpipelineSync(c) != 1 && !err)
		err = sqlstate_err(NULL, c);
	while (!err || PQstatus(c) == CONNECTION_OK) {
		PGresult *r = PQgetResult(c);
		if (!r) {
			/* One follows each statement's answer; past those, the
			 * sync's answer will not come. */
			if (++nulls > left || PQstatus(c) != CONNECTION_OK) {
				err = err ? err : sqlstate_err(NULL, c);
				break;
			}
			continue;
		}
		ExecStatusType st = PQresultStatus(r);
		if (st == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			break;
		}
		if (commit && ++seen == left) {
			/* the COMMIT's: made, or the server had aborted the txn */
			if (!err && st == PGRES_COMMAND_OK && strcmp(PQcmdStatus(r), "COMMIT") != 0)
				err = -EIO;
			else if (!err && st != PGRES_COMMAND_OK)
				err = st == PGRES_PIPELINE_ABORTED ? -EIO : sqlstate_err(r, c);
		} else if (!err && st == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQnfields(r) == 2) {
			inserted += (size_t)g_i64(r, 0, 0);
		} else if (!err && st == PGRES_TUPLES_OK) {
			err = STORE_E_CORRUPT;
		} else if (!err && st != PGRES_TUPLES_OK) {
			err = st == PGRES_PIPELINE_ABORTED ? -EIO : sqlstate_err(r, c);
		}
		PQclear(r);
	}
	if (PQexitPipelineMode(c) != 1 && !err)
		err = sqlstate_err(NULL, c);
	if (!err && inserted != ahead)
		err = STORE_E_CORRUPT; /* without an event_id no insert is passed over */
	return err ? fail(x, err) : x->h.err;
}

static int pipe_drain(store_txn *x)
{
	return pipe_finish(x, 0);
}

/* Gathered events (store_events_append without an event_id): their
 * seqs are known from the locked row, and without an event_id none can be
 * a repeat, so they need no answer to go on. They go out as one statement
 * (gather_send) in pipeline mode before the next statement that waits for
 * an answer, or the COMMIT, whose round trip brings its answer too. */
static const char gather_sql[] =
	"WITH v AS (SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::bytea[]) AS v(conv, seq, type, content)), "
	"i AS (INSERT INTO events (conv, seq, type, inserted_at, content) "
	"SELECT conv, seq, type, $5::int8, content FROM v RETURNING conv, seq), "
	"u AS (UPDATE convs SET last_seq = m.s FROM (SELECT conv, max(seq) AS s FROM i GROUP BY conv) m "
	"WHERE convs.id = m.conv RETURNING 1) "
	"SELECT (SELECT count(*) FROM i)::int8, (SELECT count(*) FROM u)::int8";

#define ARR_HDR 20 /* ndim, flags, element type, length, lower bound */

static int gather_put(store_txn *x, int k, const void *d, size_t len)
{
	size_t need = x->g[k].len + 4 + len + (x->g[k].len ? 0 : ARR_HDR);
	if (need > x->g[k].cap) {
		size_t cap = x->g[k].cap ? x->g[k].cap : 4096;
		while (cap < need)
			cap *= 2;
		char *n = realloc(x->g[k].b, cap);
		if (!n)
			return -ENOMEM;
		x->g[k].b = n;
		x->g[k].cap = cap;
	}
	if (!x->g[k].len)
		x->g[k].len = ARR_HDR;
	uint32_t l = htobe32((uint32_t)len);
	memcpy(x->g[k].b + x->g[k].len, &l, 4);
	memcpy(x->g[k].b + x->g[k].len + 4, d, len);
	x->g[k].len += 4 + len;
	return 0;
}

static int gather_add(store_txn *x, const char *conv, uint64_t seq, const char *type, store_bytes content)
{
	uint64_t be = htobe64(seq);
	if (gather_put(x, 0, conv, strlen(conv)) || gather_put(x, 1, &be, 8) ||
	    gather_put(x, 2, type, strlen(type)) || gather_put(x, 3, content.ptr ? content.ptr : "", content.len))
		return fail(x, -ENOMEM); /* the arrays may be a part longer than the others: poisoned */
	x->ngather++;
	x->gather_bytes += content.len;
	return 0;
}

static void gather_drop(store_txn *x)
{
	for (int k = 0; k < 4; k++)
		x->g[k].len = 0;
	x->ngather = x->gather_bytes = 0;
}

/* Send the gathered events as one insert, ahead in pipeline mode (libpq
 * 14+), flushed at once so that the server works on it meanwhile. */
static int gather_send(store_txn *x)
{
	static const uint32_t oid[4] = { 25, 20, 25, 17 }; /* text, int8, text, bytea */
	PGconn *c = x->pc->c;
	if (x->h.err)
		gather_drop(x); /* nothing more goes out */
	if (!x->ngather)
		return x->h.err;
	struct args a = { 0 };
	for (int k = 0; k < 4; k++) {
		uint32_t h[5] = { htobe32(1), 0, htobe32(oid[k]), htobe32((uint32_t)x->ngather), htobe32(1) };
		memcpy(x->g[k].b, h, ARR_HDR);
		a_bin(&a, x->g[k].b, x->g[k].len);
	}
	a_i64(&a, x->now);
	size_t n = x->ngather;
	if (!x->npipe && PQenterPipelineMode(c) != 1) {
		gather_drop(x);
		return fail(x, sqlstate_err(NULL, c));
	}
	int sent = PQsendQueryParams(c, gather_sql, a.n, NULL, a.v, a.len, a.fmt, 1); /* copies the arrays */
	gather_drop(x);
	if (sent != 1) {
		int err = sqlstate_err(NULL, c);
		if (!x->npipe)
			PQexitPipelineMode(c);
		return fail(x, err);
	}
	x->npipe++;
	x->nahead += n;
	PQflush(c); /* a failure shows when the answer is read */
	return 0;
}

/* Statement q changes no conversation row (Q_EVENT_INSERT changes one's
 * last_seq: store_events_append forgets that row): store_convs_lock's rows
 * stay as read. Any other statement may change some: they are forgotten. */
static int q_keeps_convs(int q)
{
	switch (q) {
	case Q_CONV_GET: case Q_CONV_LOCK: case Q_CONV_LIST: case Q_CONV_IDS: case Q_LEASE_GET: case Q_LEASE_LOCK:
	case Q_LAST_SEQ: case Q_EVENT_DUP: case Q_EVENT_INSERT: case Q_EVENT_ID_SEQ: case Q_EVENT_IDS: case Q_STREAM:
	case Q_STREAM_TAIL: case Q_SUMMARY_LATEST: case Q_TC_GET: case Q_TC_LOCK: case Q_TC_CONV_LOCK: case Q_TC_LIST:
	case Q_OWNER_GET: case Q_OWNER_LOCK: case Q_NOTIFY: case Q_CONVS_LOCK:
		return 1;
	default:
		return 0;
	}
}

/* Run statement q (prepared on the txn's connection at its first use) with
 * binary parameters and results. Returns the result, kept on the txn, or
 * NULL with *err set: a server error poisons the txn, read or write, since
 * PostgreSQL aborts the transaction. */
static PGresult *run(store_txn *x, int q, const struct args *a, int *err)
{
	PGconn *c = x->pc->c;
	char name[8];
	if (!q_keeps_convs(q))
		x->pre = NULL; /* kept on the txn, freed at its end */
	if ((*err = pipe_drain(x)) != 0 || (*err = prepare(x, q, name)) != 0)
		return NULL;
	PGresult *r = PQexecPrepared(c, name, a ? a->n : 0, a ? a->v : NULL, a ? a->len : NULL,
				     a ? a->fmt : NULL, 1);
	return result_kept(x, r, err);
}

/* Count bytes against the quota, when there is one. A record past 1 GiB
 * is full on PostgreSQL whatever the quota: no value or message may be that
 * large (and a length must fit libpq's int). */
static int quota(store_txn *x, size_t bytes)
{
	store *s = x->s;
	if (bytes >= ((size_t)1 << 30))
		return fail(x, STORE_E_FULL);
	x->written += bytes + ROW_OVERHEAD;
	if (s->quota && x->base + x->written > s->map_size)
		return fail(x, STORE_E_FULL);
	return 0;
}

/* ---- small helpers ---------------------------------------------------- */

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t store_now(store *s)
{
	return s->opts.clock ? s->opts.clock(s->opts.clock_arg) : clock_ms();
}

int64_t store_txn_now(store_txn *x)
{
	return x->now;
}

/* PostgreSQL commits are durable when they return (synchronous_commit):
 * there is no frontier to wait for. Every id is 0, which every frontier
 * covers, and a flush has nothing to do. */
uint64_t store_txn_id(store_txn *x)
{
	(void)x;
	return 0;
}

uint64_t store_last_id(store *s)
{
	(void)s;
	return 0;
}

int store_flush(store *s)
{
	(void)s;
	return 0;
}

/* ---- connections ----------------------------------------------------- */

static void conn_close(struct pgconn *pc)
{
	if (!pc)
		return;
	PQfinish(pc->c);
	free(pc);
}

/* A simple command outside of the statement table; 0 or an error. */
static int exec_simple(PGconn *c, const char *cmd)
{
	PGresult *r = PQexec(c, cmd);
	ExecStatusType st = PQresultStatus(r);
	int err = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : sqlstate_err(r, c);
	PQclear(r);
	return err;
}

static void notice_quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static int conn_open(store *s, struct pgconn **out)
{
	struct pgconn *pc = calloc(1, sizeof *pc);
	if (!pc)
		return -ENOMEM;
	/* Defaults the target may override (later keywords win, and the
	 * target is expanded in place of dbname): a server that does not
	 * answer is an error after 10 s, not a hang of the kernel's minutes. */
	static const char *const keys[] = { "connect_timeout", "fallback_application_name", "dbname", NULL };
	const char *vals[] = { "10", "agentd", s->conninfo, NULL };
	pc->c = PQconnectdbParams(keys, vals, 1);
	if (!pc->c || PQstatus(pc->c) != CONNECTION_OK) {
		store_open_error_set("%s", pc->c ? PQerrorMessage(pc->c) : "out of memory");
		conn_close(pc);
		return -ECONNREFUSED;
	}
	/* Server notices (client_min_messages is warning) are not for a
	 * library to print on its caller's stderr. */
	PQsetNoticeProcessor(pc->c, notice_quiet, NULL);
	/* libpq marks its socket close-on-exec already; a worker's children
	 * must never inherit a connection, so make sure. */
	int fd = PQsocket(pc->c);
	if (fd >= 0)
		fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
	/* STORE_SYNC_FULL: a commit must be durable when it returns (see
	 * txn_start), whatever the server's default: `off` there becomes `on`
	 * for the store's sessions; a stronger setting (remote_apply, ...) is
	 * kept. */
	int err = exec_simple(pc->c, s->opts.sync == STORE_SYNC_NONE
				     ? "SET synchronous_commit = off; SET client_min_messages = warning"
				     : "SET client_min_messages = warning; SELECT set_config('synchronous_commit', 'on', "
				       "false) WHERE current_setting('synchronous_commit') = 'off'");
	if (!err && s->opts.idle_txn_timeout_ms > 0) {
		char set[96];
		snprintf(set, sizeof set, "SET idle_in_transaction_session_timeout = %lld",
			 (long long)s->opts.idle_txn_timeout_ms);
		err = exec_simple(pc->c, set);
	}
	if (!err && s->opts.lock_timeout_ms > 0) {
		char set[64];
		snprintf(set, sizeof set, "SET lock_timeout = %lld", (long long)s->opts.lock_timeout_ms);
		err = exec_simple(pc->c, set);
	}
	if (err) {
		conn_close(pc);
		return err;
	}
	*out = pc;
	return 0;
}

static int conn_take(store *s, struct pgconn **out)
{
	if (s->nspare) {
		*out = s->spare[--s->nspare];
		return 0;
	}
	return conn_open(s, out);
}

/* A connection back to the spares, if it is healthy and idle. */
static void conn_give(store *s, struct pgconn *pc)
{
	if (!pc)
		return;
	if (s->nspare < NSPARE && PQstatus(pc->c) == CONNECTION_OK &&
	    PQtransactionStatus(pc->c) == PQTRANS_IDLE)
		s->spare[s->nspare++] = pc;
	else
		conn_close(pc);
}

/* One int8 from a query outside any store txn (schema, sizes). */
static int query_i64(PGconn *c, const char *q, int64_t *v, int *rows)
{
	PGresult *r = PQexecParams(c, q, 0, NULL, NULL, NULL, NULL, 1);
	int err = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		err = sqlstate_err(r, c);
	else if ((*rows = PQntuples(r)) > 0)
		*v = g_i64(r, 0, 0);
	PQclear(r);
	return err;
}

/* ---- the schema as agentd needs it ------------------------------------ */

/* What schema_v1 creates, read from its own text (so a column added there
 * is checked without a second list to keep): each relation (table,
 * sequence, index, a table's primary key) and each column with its type.
 * Three parallel PostgreSQL text[] literals: relation, column ("" for a
 * relation alone), type ("" when not checked; for a relation alone, what
 * it is: table, sequence, index, primary key). */
struct need {
	char *rel, *col, *type;
	size_t len[3], cap[3];
	int n;
};

static int need_add1(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 6 > *cap) { /* sep, quotes, NUL, and a closing brace */
		size_t c = (*cap ? *cap * 2 : 1024) + n;
		char *p = realloc(*buf, c);
		if (!p)
			return -ENOMEM;
		*buf = p;
		*cap = c;
	}
	char sep = *len ? ',' : '{';
	(*buf)[(*len)++] = sep;
	(*buf)[(*len)++] = '"';
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[(*len)++] = '"';
	(*buf)[*len] = 0;
	return 0;
}

static int need_add(struct need *nd, const char *rel, size_t rl, const char *col, size_t cl, const char *type)
{
	if (need_add1(&nd->rel, &nd->len[0], &nd->cap[0], rel, rl) ||
	    need_add1(&nd->col, &nd->len[1], &nd->cap[1], col, cl) ||
	    need_add1(&nd->type, &nd->len[2], &nd->cap[2], type, strlen(type)))
		return -ENOMEM;
	nd->n++;
	return 0;
}

static size_t tok_len(const char *p)
{
	size_t n = 0;
	while (p[n] && p[n] != ' ' && p[n] != ',' && p[n] != '(' && p[n] != ')' && p[n] != ';')
		n++;
	return n;
}

static int tok_is(const char *p, const char *w)
{
	size_t n = strlen(w);
	return strncmp(p, w, n) == 0 && tok_len(p) == n;
}

/* The name format_type() gives a type as schema_v1 spells it; "" for one
 * not listed (not checked). */
static const char *type_name(const char *p, size_t n)
{
	static const char *const map[][2] = { { "bigint", "bigint" }, { "int8", "bigint" }, { "text", "text" },
					      { "bytea", "bytea" }, { "float8", "double precision" },
					      { "integer", "integer" }, { "boolean", "boolean" } };
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (strlen(map[i][0]) == n && strncmp(p, map[i][0], n) == 0)
			return map[i][1];
	return "";
}

/* One CREATE TABLE's columns (p after "CREATE TABLE "). */
static int need_table(struct need *nd, const char *p, const char *end)
{
	size_t tl = tok_len(p);
	const char *name = p;
	char pkey[64]; /* PostgreSQL's names are 63 bytes at most */
	int err = need_add(nd, name, tl, "", 0, "table"), has_pkey = 0;
	p = strchr(p, '(');
	if (!p || p > end)
		return err;
	for (p++; !err && p < end;) {
		while (*p == ' ')
			p++;
		if (tok_is(p, "PRIMARY")) {
			has_pkey = 1;
		} else if (!tok_is(p, "UNIQUE") && !tok_is(p, "CONSTRAINT") && !tok_is(p, "CHECK") &&
			   !tok_is(p, "FOREIGN")) {
			size_t cl = tok_len(p);
			const char *ty = p + cl;
			while (*ty == ' ')
				ty++;
			err = need_add(nd, name, tl, p, cl, type_name(ty, tok_len(ty)));
		}
		/* to the next column at depth 0: past this one's parentheses */
		int depth = 0;
		for (; p < end; p++) {
			if (*p == '(')
				depth++;
			else if (*p == ')' && depth-- == 0)
				break;
			else if (*p == ',' && depth == 0)
				break;
			else if (depth == 0 && strncmp(p, "PRIMARY KEY", 11) == 0)
				has_pkey = 1;
		}
		if (p >= end || *p == ')')
			break;
		p++;
	}
	if (!err && has_pkey && tl + 5 < sizeof pkey) {
		snprintf(pkey, sizeof pkey, "%.*s_pkey", (int)tl, name);
		err = need_add(nd, pkey, strlen(pkey), "", 0, "primary key");
	}
	return err;
}

static int need_build(struct need *nd)
{
	int err = 0;
	const char *texts[2] = { schema_v1, schema_v2 };
	for (int ti = 0; ti < 2; ti++)
	for (const char *p = texts[ti]; !err && *p;) {
		const char *end = strchr(p, ';');
		if (!end)
			break;
		if (strncmp(p, "CREATE TABLE ", 13) == 0)
			err = need_table(nd, p + 13, end);
		else if (strncmp(p, "CREATE SEQUENCE ", 16) == 0)
			err = need_add(nd, p + 16, tok_len(p + 16), "", 0, "sequence");
		else if (strncmp(p, "CREATE INDEX ", 13) == 0)
			err = need_add(nd, p + 13, tok_len(p + 13), "", 0, "index");
		else if (strncmp(p, "CREATE UNIQUE INDEX ", 20) == 0)
			err = need_add(nd, p + 20, tok_len(p + 20), "", 0, "index");
		p = end + 1;
	}
	/* Close each literal (need_add1 left room for it). */
	for (int i = 0; !err && i < 3; i++) {
		char *b = i == 0 ? nd->rel : i == 1 ? nd->col : nd->type;
		if (!b)
			return STORE_E_CORRUPT; /* schema_v1 lists nothing: never */
		b[nd->len[i]++] = '}';
		b[nd->len[i]] = 0;
	}
	return err;
}

/* The first relation or column schema_v1 has that the store's schema
 * lacks or has with another type, in one query. A missing table, index or
 * sequence, or an altered column, would otherwise fail some statement
 * later with a bare -EIO; open says which instead. */
static int schema_verify(PGconn *c)
{
	struct need nd = { 0 };
	int err = need_build(&nd);
	if (err)
		goto out;
	const char *vals[3] = { nd.rel, nd.col, nd.type };
	PGresult *r = PQexecParams(c,
		"WITH e AS (SELECT e.*, to_regclass(quote_ident(current_schema()) || '.' || quote_ident(e.r)) AS oid "
		"FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY e(r, c, ty, n)) "
		"SELECT e.r, e.c, e.ty, CASE WHEN e.oid IS NULL THEN NULL "
		"ELSE coalesce(format_type(a.atttypid, a.atttypmod), '') END "
		"FROM e LEFT JOIN pg_attribute a ON e.c <> '' AND a.attrelid = e.oid AND a.attname = e.c "
		"AND a.attnum > 0 AND NOT a.attisdropped "
		"WHERE e.oid IS NULL OR (e.c <> '' AND (a.attname IS NULL OR "
		"(e.ty <> '' AND format_type(a.atttypid, a.atttypmod) <> e.ty))) ORDER BY e.n LIMIT 1",
		3, NULL, vals, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		err = sqlstate_err(r, c);
	} else if (PQntuples(r) == 1) {
		const char *rel = PQgetvalue(r, 0, 0), *col = PQgetvalue(r, 0, 1), *ty = PQgetvalue(r, 0, 2),
			   *got = PQgetvalue(r, 0, 3);
		if (PQgetisnull(r, 0, 3) && !*col)
			store_open_error_set("the store's schema is damaged: the %s %s is missing", ty, rel);
		else if (PQgetisnull(r, 0, 3))
			store_open_error_set("the store's schema is damaged: the table %s is missing", rel);
		else if (!*got)
			store_open_error_set("the store's schema is damaged: the table %s has no column %s (%s)", rel,
					     col, ty);
		else
			store_open_error_set("the store's schema is damaged: the column %s.%s is %s where agentd needs %s",
					     rel, col, got, ty);
		err = STORE_E_CORRUPT;
	}
	PQclear(r);
out:
	free(nd.rel);
	free(nd.col);
	free(nd.type);
	return err;
}

#define SCHEMA_PRESENT "SELECT (to_regclass('schema_version') IS NOT NULL)::int::int8"
#define SCHEMA_VERSION_SQL "SELECT max(version) FROM schema_version"

/* One step of the schema, under SCHEMA_LOCK in one transaction, taken once
 * by whoever opens at once: stmts run when probe (one number), read after
 * the wait for the lock, is below `below`. */
static int schema_step(PGconn *c, const char *probe, int64_t below, const char *stmts)
{
	int64_t v = 0;
	int rows = 0, err = exec_simple(c, SCHEMA_LOCK);
	if (err)
		return err;
	if ((err = exec_simple(c, "BEGIN")) == 0) {
		if ((err = query_i64(c, probe, &v, &rows)) == 0 && v < below)
			err = exec_simple(c, stmts);
		if (!err)
			err = exec_simple(c, "COMMIT");
		else
			exec_simple(c, "ROLLBACK");
	}
	int unlock = exec_simple(c, SCHEMA_UNLOCK);
	return err ? err : unlock;
}

/* Bring a store below version `to` up to it with the statements stmts
 * (which record the version). Refused read-only. */
static int schema_migrate(store *s, PGconn *c, int64_t to, const char *stmts)
{
	if (s->opts.read_only) {
		store_open_error_set("the database's schema is older than this agentd's (version %lld): open it once "
				     "with agentd (not read-only) to migrate it", (long long)to);
		return STORE_E_CORRUPT;
	}
	return schema_step(c, SCHEMA_VERSION_SQL, to, stmts);
}

/* Create the schema when absent (unless read-only), refuse a newer one. */
static int schema_check(store *s, PGconn *c)
{
	int64_t ver = 0;
	int rows = 0, err;
	int64_t present = 0;
	if ((err = query_i64(c, SCHEMA_PRESENT, &present, &rows)))
		return err;
	if (!present) {
		if (s->opts.read_only) {
			store_open_error_set("no agentd store in this database and schema (no schema_version table)");
			return STORE_E_CORRUPT; /* not an agentd store */
		}
		if ((err = schema_step(c, SCHEMA_PRESENT, 1, schema_v1)) != 0)
			return err;
	}
	rows = 0;
	if ((err = query_i64(c, SCHEMA_VERSION_SQL, &ver, &rows)))
		return err;
	if (rows != 1 || ver <= 0)
		return STORE_E_CORRUPT;
	if (ver > SCHEMA_VERSION) {
		store_open_error_set("the database's schema is version %lld, newer than this agentd's (%d): "
				     "upgrade agentd to use it", (long long)ver, SCHEMA_VERSION);
		return STORE_E_CORRUPT;
	}
	/* Migrations from older versions, each in its own transaction
	 * under SCHEMA_LOCK. */
	if (ver < 2 && (err = schema_migrate(s, c, 2, schema_v2)) != 0)
		return err;
	return schema_verify(c);
}

static int store_size(PGconn *c, uint64_t *bytes)
{
	int64_t v = 0;
	int rows = 0, err = query_i64(c, SIZE_SQL, &v, &rows);
	*bytes = v > 0 ? (uint64_t)v : 0;
	return err;
}

/* ---- open, close, sync, stat ----------------------------------------- */

int store_open(store **out, const char *target, const struct store_opts *opts)
{
	*out = NULL;
	store *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->vt = &store_pg_vt;
	if (opts)
		s->opts = *opts;
	/* The same defaults as LMDB's map; enforced only when max_map_size
	 * is given (store.h, PostgreSQL notes). */
	s->quota = s->opts.max_map_size != 0;
	if (!s->opts.map_size)
		s->opts.map_size = s->opts.max_map_size && s->opts.max_map_size < 256 * MiB ? s->opts.max_map_size
											     : 256 * MiB;
	if (!s->opts.max_map_size)
		s->opts.max_map_size = 64 * GiB;
	if (s->opts.max_map_size < s->opts.map_size)
		s->opts.max_map_size = s->opts.map_size;
	if (!s->opts.max_readers)
		s->opts.max_readers = 1024;
	s->map_size = s->opts.map_size;
	if (!(s->conninfo = strdup(target))) {
		free(s);
		return -ENOMEM;
	}
	struct pgconn *pc;
	int err = conn_open(s, &pc);
	if (!err) {
		err = schema_check(s, pc->c);
		if (err)
			conn_close(pc);
		else
			s->spare[s->nspare++] = pc;
	}
	if (err) {
		free(s->conninfo);
		free(s);
		return err;
	}
	*out = s;
	return 0;
}

void store_close(store *s)
{
	conn_close(s->listen);
	while (s->nspare)
		conn_close(s->spare[--s->nspare]);
	free(s->conninfo);
	free(s);
}

/* Commits under STORE_SYNC_NONE (synchronous_commit off) are flushed by
 * the next synchronous commit: one that has a transaction id to commit. */
int pg_store_sync(store *s)
{
	if (s->opts.read_only)
		return 0;
	struct pgconn *pc;
	int err = conn_take(s, &pc);
	if (err)
		return err;
	err = exec_simple(pc->c, "BEGIN; SET LOCAL synchronous_commit = on; SELECT txid_current(); COMMIT");
	conn_give(s, pc);
	return err;
}

/* No reader table: a dead process's connections end with it. */
/* A PostgreSQL database is backed up with PostgreSQL's own tools (pg_dump,
 * pg_basebackup): a copy from here could not be consistent with the
 * server's other databases, roles and settings, nor be restored as one. */
int store_backup(store *s, const char *dir)
{
	(void)s;
	(void)dir;
	return -EOPNOTSUPP;
}

int store_reader_check(store *s, int *cleared)
{
	if (cleared)
		*cleared = 0;
	return 0;
}

int pg_store_stat(store *s, struct store_stat *st)
{
	struct pgconn *pc;
	int err = conn_take(s, &pc);
	if (err)
		return err;
	uint64_t size = 0;
	int64_t db = 0;
	int rows = 0;
	err = store_size(pc->c, &size);
	if (!err)
		err = query_i64(pc->c, "SELECT pg_database_size(current_database())::int8", &db, &rows);
	conn_give(s, pc);
	if (err)
		return err;
	memset(st, 0, sizeof *st);
	st->size_bytes = size;
	st->file_bytes = db > 0 ? (uint64_t)db : 0;
	st->map_size = s->map_size;
	st->max_map_size = s->opts.max_map_size;
	st->map_full = s->quota && s->grow_pending && s->map_size < s->opts.max_map_size;
	st->readers = s->readers;
	st->max_readers = s->opts.max_readers;
	st->sync = s->opts.sync;
	return 0;
}

size_t store_map_size(store *s)
{
	return s->map_size;
}

/* The quota grows as LMDB's map does: doubling, within max_map_size. */
static void limit_grow(store *s, size_t want)
{
	if (want > s->opts.max_map_size || want < s->map_size)
		want = s->opts.max_map_size;
	if (want > s->map_size)
		s->map_size = want;
}

int store_reserve(store *s, size_t bytes)
{
	if (s->ntxn > 0)
		return -EBUSY;
	if (s->opts.read_only || !s->quota)
		return 0;
	struct pgconn *pc;
	uint64_t used = 0;
	int err = conn_take(s, &pc);
	if (err)
		return err;
	err = store_size(pc->c, &used);
	conn_give(s, pc);
	if (err)
		return err;
	s->size_est = used;
	s->measured = mono_ms();
	uint64_t need = used + 2 * (uint64_t)bytes;
	size_t want = s->map_size;
	while (want < need && want < s->opts.max_map_size)
		want = want > s->opts.max_map_size / 2 ? s->opts.max_map_size : want * 2;
	limit_grow(s, want);
	return s->map_size >= need ? 0 : STORE_E_FULL;
}

/* ---- transactions ---------------------------------------------------- */

static void txn_end(store_txn *x, int ok_conn)
{
	store *s = x->s;
	for (size_t i = 0; i < x->nres; i++)
		PQclear(x->res[i]);
	free(x->res);
	free(x->pre_ok);
	for (int k = 0; k < 4; k++)
		free(x->g[k].b);
	s->ntxn--;
	if (x->h.write)
		s->writing = 0;
	else
		s->readers--;
	if (ok_conn)
		conn_give(s, x->pc);
	else
		conn_close(x->pc);
	free(x);
}

/* BEGIN on the txn's connection, after measuring the store for a quota. */
static int txn_start(store_txn *x, int lazy)
{
	store *s = x->s;
	int err = 0;
	if (x->h.write && s->quota) {
		/* The size is measured (a query) when this handle's estimate is
		 * near the quota, or a second old (other processes write too):
		 * far below its quota, a write txn does not pay for it. */
		int64_t t = mono_ms();
		if (!s->measured || t - s->measured >= 1000 || s->size_est > s->map_size / 2 || s->grow_pending) {
			if ((err = store_size(x->pc->c, &s->size_est)) != 0)
				return err;
			s->measured = t;
		}
		x->base = s->size_est;
		/* As LMDB's map: grow after a write met the limit, or ahead
		 * once the data passes three quarters of it. */
		if ((s->grow_pending || x->base > s->map_size / 4 * 3) && s->map_size < s->opts.max_map_size)
			limit_grow(s, s->map_size * 2);
		s->grow_pending = 0;
	}
	/* A read txn's snapshot is taken by its first statement: take it now,
	 * as LMDB's is taken at begin. A lazy write commits synchronously as
	 * any other: here every txn id is 0 and store_flush does nothing, so
	 * agentd's frontier covers a commit as soon as it returns and sends
	 * its replies and events at once; a commit whose WAL was not flushed
	 * yet (synchronous_commit off) could then be undone by a crash of the
	 * server after it was acknowledged. */
	(void)lazy;
	if (err)
		return err;
	if (!x->h.write)
		return exec_simple(x->pc->c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1");
	/* A write txn learns its id in the same round trip, for the case its
	 * COMMIT's answer is lost (commit_outcome). */
	PGresult *r = PQexec(x->pc->c, "BEGIN; SELECT txid_current()");
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		x->txid = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	else
		err = sqlstate_err(r, x->pc->c);
	PQclear(r);
	return err;
}

/* The connection went during COMMIT: whether the server made it is asked
 * on a new connection, until the old session has ended (its COMMIT, if
 * the server read it, is then either made or not). 0: made; -ECONNRESET:
 * not; STORE_E_INDOUBT: no answer within a few seconds. */
static int commit_outcome(store *s, int64_t txid)
{
	int64_t until = mono_ms() + 3000;
	int delay_ms = 10;
	char q[64];
	snprintf(q, sizeof q, "SELECT txid_status(%lld)", (long long)txid);
	for (;;) {
		struct pgconn *pc;
		int made = -1; /* unknown yet */
		if (txid > 0 && conn_open(s, &pc) == 0) {
			PGresult *r = PQexec(pc->c, q);
			if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)) {
				const char *v = PQgetvalue(r, 0, 0);
				made = strcmp(v, "committed") == 0 ? 1 : strcmp(v, "aborted") == 0 ? 0 : -1;
			}
			PQclear(r);
			conn_give(s, pc);
		}
		if (made >= 0)
			return made ? 0 : -ECONNRESET;
		if (txid <= 0 || mono_ms() >= until)
			return STORE_E_INDOUBT;
		usleep((useconds_t)delay_ms * 1000);
		delay_ms = delay_ms < 100 ? delay_ms * 2 : 200;
	}
}

int store_txn_begin(store *s, int mode, store_txn **out)
{
	/* STORE_WRITE_FREEING changes nothing here: a delete is never refused
	 * by the quota (store.h). */
	mode &= ~STORE_WRITE_FREEING;
	int lazy = mode == STORE_WRITE_LAZY, write = mode != STORE_READ;
	if (write && s->opts.read_only)
		return STORE_E_INVAL;
	if (write && s->writing)
		return -EBUSY;
	if (!write && s->readers >= s->opts.max_readers)
		return -EAGAIN; /* max_readers bounds this handle's open read txns (connections) */
	store_txn *x = calloc(1, sizeof *x);
	if (!x)
		return -ENOMEM;
	x->h.vt = &store_pg_vt;
	x->s = s;
	x->h.write = write;
	int err = conn_take(s, &x->pc);
	if (err) {
		free(x);
		return err;
	}
	err = txn_start(x, lazy);
	if (err && PQstatus(x->pc->c) == CONNECTION_BAD) {
		/* A spare whose server went away (a restart, a failover, an
		 * idle timeout) is found dead only by using it: nothing of the
		 * txn ran, so it starts again on a new connection, and the other
		 * spares, likely dead too, go. */
		conn_close(x->pc);
		x->pc = NULL;
		while (s->nspare)
			conn_close(s->spare[--s->nspare]);
		if ((err = conn_open(s, &x->pc)) == 0)
			err = txn_start(x, lazy);
	}
	if (err) {
		conn_close(x->pc);
		free(x);
		return err;
	}
	x->now = store_now(s);
	s->ntxn++;
	if (write)
		s->writing = 1;
	else
		s->readers++;
	*out = x;
	return 0;
}

int store_txn_commit(store_txn *x)
{
	int err = x->h.err;
	PGconn *c = x->pc->c;
	if (!err && (x->npipe || x->ngather)) {
		/* The COMMIT goes behind the inserts sent ahead: one round trip
		 * for them all. Refused, the txn is aborted and still open. */
		err = pipe_finish(x, 1);
		if (err == -ECONNRESET && x->h.write)
			err = commit_outcome(x->s, x->txid);
		else if (err)
			exec_simple(c, "ROLLBACK");
		if (!err)
			x->s->size_est += x->written;
	} else if ((err = pipe_drain(x)) != 0) {
		exec_simple(c, "ROLLBACK");
	} else {
		PGresult *r = PQexec(c, "COMMIT");
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			err = sqlstate_err(r, c);
		else if (strcmp(PQcmdStatus(r), "COMMIT") != 0)
			err = -EIO; /* the server had aborted it */
		PQclear(r);
		if (err == -ECONNRESET && x->h.write)
			err = commit_outcome(x->s, x->txid);
		if (!err)
			x->s->size_est += x->written;
	}
	txn_end(x, PQstatus(c) == CONNECTION_OK);
	return err;
}

void store_txn_abort(store_txn *x)
{
	gather_drop(x);
	pipe_drain(x);
	int ok = exec_simple(x->pc->c, "ROLLBACK") == 0;
	txn_end(x, ok);
}

/* ---- conversations --------------------------------------------------- */

static int conv_row(const PGresult *r, int row, struct store_conv *c)
{
	memset(c, 0, sizeof *c);
	c->id = g_bytes(r, row, 0);
	int64_t st = g_i64(r, row, 1);
	c->created_at = g_i64(r, row, 2);
	c->updated_at = g_i64(r, row, 3);
	c->lease = (uint64_t)g_i64(r, row, 4);
	c->usage.input_tokens = (uint64_t)g_i64(r, row, 5);
	c->usage.output_tokens = (uint64_t)g_i64(r, row, 6);
	c->usage.cost = g_f64(r, row, 7);
	c->settings = g_bytes(r, row, 8);
	c->fsm_state = g_bytes(r, row, 9);
	c->metadata = g_bytes(r, row, 10);
	c->turns = (uint64_t)g_i64(r, row, 11);
	if (st < 0 || st > STORE_STATUS_MAX)
		return STORE_E_CORRUPT;
	c->status = (int)st;
	return 0;
}

static void held_set(store_txn *x, const char *id, uint64_t last)
{
	strcpy(x->held, id); /* id_ok: at most STORE_ID_MAX bytes */
	x->held_last = last;
	x->held_ok = 1;
}

/* The row of conversation id among store_convs_lock's, still as read, or -1. */
static int pre_find(store_txn *x, const char *id)
{
	if (!x->pre)
		return -1;
	size_t n = strlen(id);
	for (int i = 0; i < PQntuples(x->pre); i++)
		if (x->pre_ok[i] && (size_t)PQgetlength(x->pre, i, 0) == n && memcmp(PQgetvalue(x->pre, i, 0), id, n) == 0)
			return i;
	return -1;
}

/* Conversation id's row, or all of them (id NULL), may have changed. */
static void pre_drop(store_txn *x, const char *id)
{
	if (!id) {
		x->pre = NULL; /* still kept on the txn: freed at its end */
		return;
	}
	int i = pre_find(x, id);
	if (i >= 0)
		x->pre_ok[i] = 0;
}

/* Load a conversation; in a write txn its row is locked until the end.
 * *last (may be NULL) gets its last seq (write txns only). */
static int conv_load(store_txn *x, const char *id, struct store_conv *c, uint64_t *last)
{
	if (!c && x->h.write && x->held_ok && strcmp(x->held, id) == 0) {
		if (last)
			*last = x->held_last;
		return 0;
	}
	struct args a = { 0 };
	int err, row = pre_find(x, id);
	PGresult *r = row >= 0 ? x->pre : NULL;
	if (!r) {
		a_str(&a, id);
		if (!(r = run(x, x->h.write ? Q_CONV_LOCK : Q_CONV_GET, &a, &err)))
			return err;
		if (PQntuples(r) == 0)
			return STORE_E_NOTFOUND;
		row = 0;
	}
	if (x->h.write)
		held_set(x, id, (uint64_t)g_i64(r, row, CONV_NCOLS));
	if (last)
		*last = x->h.write ? (uint64_t)g_i64(r, row, CONV_NCOLS) : 0;
	struct store_conv tmp;
	return conv_row(r, row, c ? c : &tmp) ? fail(x, STORE_E_CORRUPT) : 0;
}

/* The conversation exists (and, in a write txn, is locked). */
static int conv_exists(store_txn *x, const char *id)
{
	return conv_load(x, id, NULL, NULL);
}

static int conv_insert(store_txn *x, const char *id, store_bytes settings, int *made)
{
	struct args a = { 0 };
	int err;
	if ((err = quota(x, settings.len + strlen(id))) != 0)
		return err;
	a_str(&a, id);
	a_i64(&a, x->now);
	a_bytes(&a, settings, 0);
	PGresult *r = run(x, Q_CONV_INSERT, &a, &err);
	if (!r)
		return err;
	*made = PQntuples(r) == 1;
	return 0;
}

int store_conv_create(store_txn *x, const char *id, store_bytes settings)
{
	int made = 0, err = conv_insert(x, id, settings, &made);
	return err ? err : made ? 0 : STORE_E_CONFLICT;
}

int store_conv_get(store_txn *x, const char *id, struct store_conv *out)
{
	return conv_load(x, id, out, NULL);
}

/* ---- metadata: a column, and conv_meta rows as its index -------------- */

struct meta_ins {
	store_txn *x;
	const char *id;
};

static int meta_ins_one(void *arg, const char *k, size_t kl, const char *v, size_t vl)
{
	struct meta_ins *m = arg;
	struct args a = { 0 };
	int err;
	a_bin(&a, k, kl);
	a_bin(&a, v, vl);
	a_str(&a, m->id);
	return run(m->x, Q_META_INS, &a, &err) ? 0 : err;
}

/* Replace the metadata (valid: checked by the caller) and its index rows;
 * an empty map is stored as none. */
static int meta_set(store_txn *x, const char *id, store_bytes m)
{
	struct args a = { 0 };
	int err;
	if (m.len == 1 && *(const unsigned char *)m.ptr == 0x80)
		m.len = 0;
	if ((err = quota(x, m.len * 2)) != 0)
		return err;
	a_str(&a, id);
	a_bytes(&a, m, 1);
	if (!run(x, Q_META_SET, &a, &err))
		return err;
	struct args d = { 0 };
	a_str(&d, id);
	if (!run(x, Q_META_DEL, &d, &err))
		return err;
	struct meta_ins mi = { x, id };
	return store_meta_each(m, meta_ins_one, &mi);
}

int store_conv_put(store_txn *x, const char *id, const struct store_conv_patch *p)
{
	struct store_conv c;
	int err = conv_load(x, id, &c, NULL);
	if (err == STORE_E_NOTFOUND) {
		int made = 0;
		if ((err = conv_insert(x, id, (store_bytes){ empty_map, 1 }, &made)) != 0)
			return err;
		err = conv_load(x, id, &c, NULL);
	}
	if (err)
		return err;
	if (p->set & STORE_SET_SETTINGS)
		c.settings = p->settings;
	if (p->set & STORE_SET_STATUS)
		c.status = p->status;
	if (p->set & STORE_SET_FSM)
		c.fsm_state = p->fsm_state;
	if ((err = quota(x, c.settings.len + c.fsm_state.len)) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, id);
	a_bytes(&a, c.settings, 0);
	a_i64(&a, c.status);
	a_bytes(&a, c.fsm_state, 1);
	a_i64(&a, x->now);
	if (!run(x, Q_CONV_UPDATE, &a, &err))
		return err;
	return p->set & STORE_SET_METADATA ? meta_set(x, id, p->metadata) : 0;
}

int store_conv_list(store_txn *x, int status, const char *after, size_t limit, store_conv_fn fn, void *arg,
		    int *more)
{
	if (more)
		*more = 0;
	struct args a = { 0 };
	int err;
	a_str(&a, after);
	a_i64(&a, status);
	if (limit && limit < (size_t)INT64_MAX)
		a_i64(&a, (int64_t)limit + 1);
	else
		a_null(&a);
	PGresult *r = run(x, Q_CONV_LIST, &a, &err);
	if (!r)
		return err;
	int n = PQntuples(r), damaged = 0;
	for (int i = 0; i < n; i++) {
		struct store_conv c;
		if (limit && (size_t)i == limit) {
			if (more)
				*more = 1;
			break;
		}
		if (conv_row(r, i, &c)) {
			damaged = 1;
			continue;
		}
		int rc = fn(arg, &c);
		if (rc)
			return rc;
	}
	return damaged ? STORE_E_CORRUPT : 0;
}

/* Filtered list: the rows come in chunks, in id order, from conv_meta's
 * index for the first pair or from convs (status filtered there); the rest
 * of the filter is tested here, row by row. */
#define FIND_CHUNK 256

int store_conv_find(store_txn *x, const struct store_conv_filter *f, const char *after, size_t limit,
		    store_conv_fn fn, void *arg, int *more)
{
	if (more)
		*more = 0;
	char cursor[STORE_ID_MAX + 1];
	const char *from = after;
	size_t n = 0;
	int damaged = 0;
	for (;;) {
		struct args a = { 0 };
		int err, q = f && f->nmeta ? Q_CONV_FIND_META : Q_CONV_LIST;
		if (q == Q_CONV_FIND_META) {
			a_bin(&a, f->meta[0].key.ptr, f->meta[0].key.len);
			a_bin(&a, f->meta[0].value.ptr, f->meta[0].value.len);
			a_str(&a, from);
		} else {
			a_str(&a, from);
			a_i64(&a, f ? f->status : -1);
		}
		a_i64(&a, FIND_CHUNK);
		PGresult *r = run(x, q, &a, &err);
		if (!r)
			return err;
		int rows = PQntuples(r);
		for (int i = 0; i < rows; i++) {
			struct store_conv c;
			if (conv_row(r, i, &c)) {
				damaged = 1;
				continue;
			}
			int rc = store_filter_match(f, &c);
			if (rc == 1 && f && f->match)
				rc = f->match(f->match_arg, &c);
			else if (rc < 0) {
				damaged = 1;
				rc = 0;
			}
			if (rc < 0)
				return rc;
			if (rc == 0)
				continue;
			if (limit && n == limit) {
				if (more)
					*more = 1;
				return damaged ? STORE_E_CORRUPT : 0;
			}
			n++;
			if ((rc = fn(arg, &c)) != 0)
				return rc;
		}
		if (rows < FIND_CHUNK)
			break;
		store_bytes last = g_bytes(r, rows - 1, 0);
		if (last.len > STORE_ID_MAX)
			return fail(x, STORE_E_CORRUPT);
		memcpy(cursor, last.ptr, last.len);
		cursor[last.len] = 0;
		from = cursor;
	}
	return damaged ? STORE_E_CORRUPT : 0;
}

int store_conv_ids(store_txn *x, store_conv_id_fn fn, void *arg)
{
	int err;
	PGresult *r = run(x, Q_CONV_IDS, NULL, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		int rc = fn(arg, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0));
		if (rc)
			return rc;
	}
	return 0;
}

int store_conv_delete(store_txn *x, const char *id)
{
	int err = conv_exists(x, id);
	if (err)
		return err;
	x->held_ok = 0; /* the row goes */
	struct args a = { 0 };
	a_str(&a, id);
	return run(x, Q_CONV_DELETE, &a, &err) ? 0 : err;
}

int store_lease_next(store_txn *x, const char *id, uint64_t *gen)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	PGresult *r = run(x, Q_LEASE_NEXT, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	*gen = (uint64_t)g_i64(r, 0, 0);
	return 0;
}

int store_lease_check(store_txn *x, const char *id, uint64_t gen)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	/* In a write txn the row stays locked: no lease_next can come
	 * between this check and the commit. */
	PGresult *r = run(x, x->h.write ? Q_LEASE_LOCK : Q_LEASE_GET, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	if (x->h.write)
		held_set(x, id, (uint64_t)g_i64(r, 0, 1));
	return (uint64_t)g_i64(r, 0, 0) == gen ? 0 : STORE_E_FENCED;
}

int store_usage_add(store_txn *x, const char *id, const struct store_usage *u)
{
	struct store_conv c;
	int err = conv_load(x, id, &c, NULL);
	if (err)
		return err;
	c.usage.input_tokens = sat_add(c.usage.input_tokens, u->input_tokens);
	c.usage.output_tokens = sat_add(c.usage.output_tokens, u->output_tokens);
	c.usage.cost += u->cost;
	if (!isfinite(c.usage.cost))
		c.usage.cost = DBL_MAX;
	struct args a = { 0 };
	a_str(&a, id);
	a_i64(&a, (int64_t)c.usage.input_tokens);
	a_i64(&a, (int64_t)c.usage.output_tokens);
	a_f64(&a, c.usage.cost);
	a_i64(&a, x->now);
	return run(x, Q_USAGE_SET, &a, &err) ? 0 : err;
}

int store_turns_add(store_txn *x, const char *id, uint64_t n)
{
	struct store_conv c;
	int err = conv_load(x, id, &c, NULL);
	if (err)
		return err;
	struct args a = { 0 };
	a_str(&a, id);
	a_i64(&a, (int64_t)sat_add(c.turns, n));
	a_i64(&a, x->now);
	return run(x, Q_TURNS_SET, &a, &err) ? 0 : err;
}

/* ---- events ---------------------------------------------------------- */

int store_events_append(store_txn *x, const char *conv, const struct store_event_in *ev, size_t n,
			uint64_t *seqs, int *dups)
{
	uint64_t last;
	int err = conv_load(x, conv, NULL, &last);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		struct args a = { 0 };
		PGresult *r;
		if ((err = quota(x, ev[i].content.len)) != 0)
			return err;
		a_str(&a, conv);
		a_i64(&a, (int64_t)(last + 1));
		a_str(&a, ev[i].type);
		a_i64(&a, x->now);
		a_str(&a, ev[i].event_id);
		a_bytes(&a, ev[i].content, 0);
		if (!ev[i].event_id && ev[i].content.len <= GATHER_ONE) {
			if (x->gather_bytes + ev[i].content.len > GATHER_MAX && (err = gather_send(x)) != 0)
				return err;
			if ((err = gather_add(x, conv, last + 1, ev[i].type, ev[i].content)) != 0)
				return err;
			seqs[i] = ++last;
			x->held_last = last;
			pre_drop(x, conv);
			if (dups)
				dups[i] = 0;
			continue;
		}
		if (!(r = run(x, Q_EVENT_INSERT, &a, &err)))
			return err;
		if (PQntuples(r) == 1) {
			seqs[i] = ++last;
			x->held_last = last; /* conv_load left conv held */
			pre_drop(x, conv);   /* its last_seq moved */
			if (dups)
				dups[i] = 0;
			continue;
		}
		/* A repeated event_id (the conversation is locked: it stays so). */
		memset(&a, 0, sizeof a);
		a_str(&a, conv);
		a_bin(&a, ev[i].event_id, strlen(ev[i].event_id));
		if (!(r = run(x, Q_EVENT_DUP, &a, &err)))
			return err;
		if (PQntuples(r) != 1)
			return fail(x, STORE_E_CORRUPT);
		seqs[i] = (uint64_t)g_i64(r, 0, 0);
		if (dups)
			dups[i] = 1;
	}
	return 0;
}

int store_event_latest_seq(store_txn *x, const char *conv, uint64_t *seq)
{
	struct args a = { 0 };
	int err;
	a_str(&a, conv);
	PGresult *r = run(x, Q_LAST_SEQ, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	*seq = (uint64_t)g_i64(r, 0, 0);
	return 0;
}

int store_event_id_seq(store_txn *x, const char *conv, const char *event_id, size_t len, uint64_t *seq)
{
	struct args a = { 0 };
	int err;
	a_str(&a, conv);
	a_bin(&a, event_id, len);
	PGresult *r = run(x, Q_EVENT_ID_SEQ, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0 || PQgetisnull(r, 0, 0))
		return STORE_E_NOTFOUND;
	*seq = (uint64_t)g_i64(r, 0, 0);
	return 0;
}

int store_event_ids_each(store_txn *x, const char *conv,
			 int (*fn)(void *arg, const char *event_id, size_t len, uint64_t seq), void *arg)
{
	int err = conv_exists(x, conv);
	if (err)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	PGresult *r = run(x, Q_EVENT_IDS, &a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		int rc = fn(arg, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0), (uint64_t)g_i64(r, i, 1));
		if (rc)
			return rc;
	}
	return 0;
}

/* Events of a checked conversation: after < seq < before, maybe of one
 * type, the last `limit` of them, ascending. */
static int stream(store_txn *x, const char *conv, const struct store_range *rg, store_event_fn fn, void *arg)
{
	if (rg->after >= (uint64_t)INT64_MAX)
		return 0; /* no seq is past it */
	int64_t before = rg->before == 0 || rg->before > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)rg->before;
	struct args a = { 0 };
	int err;
	a_str(&a, conv);
	a_i64(&a, (int64_t)rg->after);
	a_i64(&a, before);
	a_str(&a, rg->type);
	if (rg->limit)
		a_i64(&a, rg->limit > (size_t)INT64_MAX ? INT64_MAX : (int64_t)rg->limit);
	PGresult *r = run(x, rg->limit ? Q_STREAM_TAIL : Q_STREAM, &a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_event e = {
			.seq = (uint64_t)g_i64(r, i, 0),
			.type = g_bytes(r, i, 1),
			.inserted_at = g_i64(r, i, 2),
			.event_id = g_bytes(r, i, 3),
			.content = g_bytes(r, i, 4),
		};
		int rc = fn(arg, &e);
		if (rc)
			return rc;
	}
	return 0;
}

int store_events_stream(store_txn *x, const char *conv, const struct store_range *r, store_event_fn fn,
			void *arg)
{
	int err = conv_exists(x, conv);
	return err ? err : stream(x, conv, r, fn, arg);
}

/* ---- summaries ------------------------------------------------------- */

int store_summary_put(store_txn *x, const char *conv, uint64_t from_seq, uint64_t to_seq, store_bytes content,
		      uint64_t *version)
{
	uint64_t last;
	int err = conv_load(x, conv, NULL, &last);
	if (err)
		return err;
	if (to_seq > last)
		return STORE_E_INVAL;
	if ((err = quota(x, content.len)) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, (int64_t)to_seq);
	a_i64(&a, (int64_t)from_seq);
	a_i64(&a, x->now);
	a_bytes(&a, content, 0);
	PGresult *r = run(x, Q_SUMMARY_PUT, &a, &err);
	if (!r)
		return err;
	if (version)
		*version = (uint64_t)g_i64(r, 0, 0);
	return 0;
}

/* The latest summary: 0, STORE_E_NOTFOUND (no summary), *noconv when the
 * conversation itself is missing. */
static int summary_latest(store_txn *x, const char *conv, struct store_summary *out)
{
	struct args a = { 0 };
	int err;
	a_str(&a, conv);
	PGresult *r = run(x, Q_SUMMARY_LATEST, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	if (PQgetisnull(r, 0, 1))
		return 1; /* the conversation, no summary */
	out->from_seq = (uint64_t)g_i64(r, 0, 0);
	out->to_seq = (uint64_t)g_i64(r, 0, 1);
	out->version = (uint64_t)g_i64(r, 0, 2);
	out->inserted_at = g_i64(r, 0, 3);
	out->content = g_bytes(r, 0, 4);
	return 0;
}

int store_summary_latest(store_txn *x, const char *conv, struct store_summary *out)
{
	int err = summary_latest(x, conv, out);
	return err == 1 ? STORE_E_NOTFOUND : err;
}

int store_load_since(store_txn *x, const char *conv, struct store_summary *sum, int *has_summary,
		     store_event_fn fn, void *arg)
{
	struct store_summary tmp;
	if (!sum)
		sum = &tmp;
	int err = summary_latest(x, conv, sum);
	if (err < 0)
		return err;
	struct store_range r = { 0 };
	if (has_summary)
		*has_summary = err == 0;
	if (err == 0)
		r.after = sum->to_seq;
	else
		memset(sum, 0, sizeof *sum);
	return stream(x, conv, &r, fn, arg);
}

/* ---- every summary, and one restored as it was (agentd export/import) --- */

/* A statement of the few that run once per conversation at most (export
 * and import): not prepared, so they take no bit of struct pgconn's. */
static PGresult *run_sql(store_txn *x, const char *q, const struct args *a, int *err)
{
	PGconn *c = x->pc->c;
	x->pre = NULL; /* it may change conversation rows (run's q_keeps_convs) */
	if ((*err = pipe_drain(x)) != 0)
		return NULL;
	PGresult *r = PQexecParams(c, q, a ? a->n : 0, NULL, a ? a->v : NULL, a ? a->len : NULL,
				   a ? a->fmt : NULL, 1);
	return result_kept(x, r, err);
}

int store_summaries_list(store_txn *x, const char *conv, int (*fn)(void *, const struct store_summary *),
			 void *arg)
{
	int err = conv_exists(x, conv);
	if (err)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	PGresult *r = run_sql(x, "SELECT from_seq, to_seq, version, inserted_at, content FROM summaries "
			      "WHERE conv = $1::text ORDER BY to_seq", &a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_summary sm = {
			.from_seq = (uint64_t)g_i64(r, i, 0),
			.to_seq = (uint64_t)g_i64(r, i, 1),
			.version = (uint64_t)g_i64(r, i, 2),
			.inserted_at = g_i64(r, i, 3),
			.content = g_bytes(r, i, 4),
		};
		int rc = fn(arg, &sm);
		if (rc)
			return rc;
	}
	return 0;
}

int store_summary_restore(store_txn *x, const char *conv, const struct store_summary *in)
{
	if (in->to_seq > INT64_MAX)
		return STORE_E_INVAL; /* past a bigint: a limit of this backend's columns */
	uint64_t last;
	int err = conv_load(x, conv, NULL, &last);
	if (err)
		return err;
	if (in->to_seq > last)
		return STORE_E_INVAL;
	if ((err = quota(x, in->content.len)) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, (int64_t)in->to_seq);
	a_i64(&a, (int64_t)in->from_seq);
	a_i64(&a, (int64_t)in->version);
	a_i64(&a, in->inserted_at);
	a_bytes(&a, in->content, 0);
	/* No row back: another to_seq holds the version (the conversation's
	 * row lock keeps that true until the commit). */
	PGresult *r = run_sql(x, "INSERT INTO summaries (conv, to_seq, from_seq, version, inserted_at, content) "
			      "SELECT $1::text, $2::int8, $3::int8, $4::int8, $5::int8, $6::bytea WHERE NOT EXISTS "
			      "(SELECT 1 FROM summaries WHERE conv = $1::text AND version = $4::int8 "
			      "AND to_seq <> $2::int8) ON CONFLICT (conv, to_seq) DO UPDATE SET "
			      "from_seq = EXCLUDED.from_seq, version = EXCLUDED.version, "
			      "inserted_at = EXCLUDED.inserted_at, content = EXCLUDED.content RETURNING 1", &a, &err);
	if (!r)
		return err;
	return PQntuples(r) == 1 ? 0 : STORE_E_CONFLICT;
}

/* ---- tool calls ------------------------------------------------------ */

static int tc_row(const PGresult *r, int row, struct store_tool_call *tc)
{
	memset(tc, 0, sizeof *tc);
	tc->id = g_bytes(r, row, 0);
	tc->conversation = g_bytes(r, row, 1);
	tc->name = g_bytes(r, row, 2);
	int64_t exec = g_i64(r, row, 3), st = g_i64(r, row, 4), att = g_i64(r, row, 8);
	tc->inserted_at = g_i64(r, row, 5);
	tc->resolved_at = g_i64(r, row, 6);
	tc->deadline = g_i64(r, row, 7);
	tc->args = g_bytes(r, row, 9);
	tc->prompt = g_bytes(r, row, 10);
	tc->result = g_bytes(r, row, 11);
	if (exec < 0 || exec > STORE_EXEC_HUMAN || st < 0 || st > STORE_TC_UNKNOWN || att < 0 || att > UINT32_MAX)
		return STORE_E_CORRUPT;
	tc->executor = (int)exec;
	tc->status = (int)st;
	tc->attempts = (uint32_t)att;
	return 0;
}

/* Lock the conversation of tool call `id` (none: nothing), before the call's
 * own row: every writer takes a conversation's row before its tool calls',
 * so a resolver and that conversation's worker cannot deadlock. */
static int tc_conv_lock(store_txn *x, const char *id)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	return run(x, Q_TC_CONV_LOCK, &a, &err) ? 0 : err;
}

int store_tool_call_upsert(store_txn *x, const char *conv, const struct store_tool_call_in *in)
{
	int err = conv_exists(x, conv);
	if (err)
		return err;
	if ((err = quota(x, in->args.len + in->prompt.len)) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, in->id);
	a_str(&a, conv);
	a_bin(&a, in->name, strlen(in->name));
	a_i64(&a, in->executor);
	a_i64(&a, x->now);
	a_bytes(&a, in->args, 0);
	a_bytes(&a, in->prompt, 1);
	PGresult *r = run(x, Q_TC_UPSERT, &a, &err);
	if (!r)
		return err;
	return PQntuples(r) == 1 ? 0 : STORE_E_CONFLICT; /* the id is another conversation's */
}

int store_tool_call_get(store_txn *x, const char *id, struct store_tool_call *out)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	PGresult *r = run(x, Q_TC_GET, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	return tc_row(r, 0, out) ? fail(x, STORE_E_CORRUPT) : 0;
}

static int tc_deliver(store_txn *x, PGresult *r, int (*fn)(void *, const struct store_tool_call *), void *arg)
{
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_tool_call tc;
		if (tc_row(r, i, &tc))
			return fail(x, STORE_E_CORRUPT);
		int rc = fn(arg, &tc);
		if (rc)
			return rc;
	}
	return 0;
}

int store_tool_calls_list(store_txn *x, const char *conv, unsigned mask,
			  int (*fn)(void *arg, const struct store_tool_call *tc), void *arg)
{
	int err = conv_exists(x, conv);
	if (err)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, mask);
	PGresult *r = run(x, Q_TC_LIST, &a, &err);
	return r ? tc_deliver(x, r, fn, arg) : err;
}

int store_tool_calls_each(store_txn *x, int (*fn)(void *arg, const struct store_tool_call *tc), void *arg)
{
	int err;
	PGresult *r = run(x, Q_TC_EACH, NULL, &err);
	return r ? tc_deliver(x, r, fn, arg) : err;
}

int store_tool_call_attempt(store_txn *x, const char *id, uint32_t *attempts)
{
	struct args a = { 0 };
	int err = tc_conv_lock(x, id);
	if (err)
		return err;
	a_str(&a, id);
	PGresult *r = run(x, Q_TC_ATTEMPT, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	if (attempts)
		*attempts = (uint32_t)g_i64(r, 0, 0);
	return 0;
}

int store_tool_call_unknown(store_txn *x, const char *id, int unknown)
{
	struct args a = { 0 };
	int err = tc_conv_lock(x, id);
	if (err)
		return err == STORE_E_NOTFOUND ? STORE_E_STALE : err;
	a_str(&a, id);
	a_i64(&a, unknown ? STORE_TC_PENDING : STORE_TC_UNKNOWN);
	a_i64(&a, unknown ? STORE_TC_UNKNOWN : STORE_TC_PENDING);
	/* Not prepared (run_sql): the statement table has no bit left, and a
	 * call turns unknown rarely. */
	PGresult *r = run_sql(x, "UPDATE tool_calls SET status = $3::int8 WHERE id = $1::text AND status = $2::int8 "
			      "RETURNING 1", &a, &err);
	if (!r)
		return err;
	return PQntuples(r) == 0 ? STORE_E_STALE : 0;
}

int store_tool_call_resolve(store_txn *x, const char *id, int status, store_bytes result, char *conv)
{
	int err;
	if ((err = quota(x, result.len)) != 0 || (err = tc_conv_lock(x, id)) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, id);
	a_i64(&a, status);
	a_bytes(&a, result, 1);
	a_i64(&a, x->now);
	PGresult *r = run(x, Q_TC_RESOLVE, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_STALE; /* unknown, or settled (by another resolver, maybe just now) */
	if (conv) {
		size_t len = (size_t)PQgetlength(r, 0, 0);
		if (len > STORE_ID_MAX)
			return fail(x, STORE_E_CORRUPT);
		memcpy(conv, PQgetvalue(r, 0, 0), len);
		conv[len] = 0;
	}
	return 0;
}

/* ---- expiries -------------------------------------------------------- */

/* The row of pending tool call id, locked (its conversation's row first),
 * with room for a timer row of it: NULL with *err set, STORE_E_NOTFOUND
 * or STORE_E_STALE among them. Columns: status, deadline, conv. */
static PGresult *tc_pending_locked(store_txn *x, const char *id, int *err)
{
	struct args a = { 0 };
	if ((*err = tc_conv_lock(x, id)) != 0)
		return NULL;
	a_str(&a, id);
	PGresult *r = run(x, Q_TC_LOCK, &a, err);
	if (r && PQntuples(r) == 0)
		*err = STORE_E_NOTFOUND, r = NULL;
	else if (r && g_i64(r, 0, 0) != STORE_TC_PENDING)
		*err = STORE_E_STALE, r = NULL;
	else if (r && (*err = quota(x, strlen(id))) != 0)
		r = NULL;
	return r;
}

int store_expiry_schedule(store_txn *x, const char *id, int64_t deadline)
{
	int err;
	PGresult *r = tc_pending_locked(x, id, &err);
	if (!r)
		return err;
	int64_t old = g_i64(r, 0, 1);
	struct args a = { 0 };
	a_str(&a, id);
	a_i64(&a, deadline);
	a_i64(&a, old == deadline ? 0 : old); /* the same row is not deleted and inserted at once */
	a_bytes(&a, g_bytes(r, 0, 2), 0);
	return run(x, Q_EXP_SCHEDULE, &a, &err) ? 0 : err;
}

int store_expiry_cancel(store_txn *x, const char *id)
{
	struct args a = { 0 };
	int err = tc_conv_lock(x, id);
	if (err)
		return err;
	a_str(&a, id);
	PGresult *r = run(x, Q_TC_LOCK, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0 || g_i64(r, 0, 1) <= 0)
		return 0;
	a_i64(&a, g_i64(r, 0, 1));
	return run(x, Q_EXP_CANCEL, &a, &err) ? 0 : err;
}

int store_expiry_drop(store_txn *x, int64_t deadline, const char *id)
{
	struct args a = { 0 };
	int err;
	a_i64(&a, deadline);
	a_str(&a, id);
	return run(x, Q_EXP_DROP, &a, &err) ? 0 : err;
}

/* Rows (time, tool call id, conversation) of query q, each to fn, in order:
 * the due expiries and warnings alike. */
static int time_rows(store_txn *x, int q, struct args *a, int (*fn)(void *, const struct store_expiry *), void *arg)
{
	int err;
	PGresult *r = run(x, q, a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_expiry e = { g_i64(r, i, 0), g_bytes(r, i, 1), g_bytes(r, i, 2) };
		int rc = fn(arg, &e);
		if (rc)
			return rc;
	}
	return 0;
}

/* The one time query q returns; STORE_E_NOTFOUND without a row. */
static int time_first(store_txn *x, int q, int64_t *out)
{
	int err;
	PGresult *r = run(x, q, NULL, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	*out = g_i64(r, 0, 0);
	return 0;
}

int store_expiries_due(store_txn *x, int64_t now, int (*fn)(void *, const struct store_expiry *), void *arg)
{
	struct args a = { 0 };
	a_i64(&a, now);
	return time_rows(x, Q_EXP_DUE, &a, fn, arg);
}

int store_expiries_claim(store_txn *x, int64_t now, size_t limit, int (*fn)(void *, const struct store_expiry *),
			 void *arg)
{
	struct args a = { 0 };
	a_i64(&a, now);
	a_i64(&a, limit && limit < (size_t)INT64_MAX ? (int64_t)limit : INT64_MAX);
	return time_rows(x, x->h.write ? Q_EXP_CLAIM : Q_EXP_CLAIM_READ, &a, fn, arg);
}

int store_expiry_earliest(store_txn *x, int64_t *deadline)
{
	return time_first(x, Q_EXP_EARLIEST, deadline);
}

/* ---- expiry warnings ------------------------------------------------- */

int store_warning_schedule(store_txn *x, const char *id, int64_t at)
{
	int err;
	PGresult *r = tc_pending_locked(x, id, &err);
	if (!r)
		return err;
	struct args a = { 0 };
	a_str(&a, id);
	a_i64(&a, at);
	a_bytes(&a, g_bytes(r, 0, 2), 0);
	return run(x, Q_WARN_SCHEDULE, &a, &err) ? 0 : err;
}

int store_warning_drop(store_txn *x, const char *id)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	return run(x, Q_WARN_DROP, &a, &err) ? 0 : err;
}

int store_warnings_due(store_txn *x, int64_t now, int (*fn)(void *, const struct store_expiry *), void *arg)
{
	struct args a = { 0 };
	a_i64(&a, now);
	return time_rows(x, Q_WARN_DUE, &a, fn, arg);
}

int store_warning_earliest(store_txn *x, int64_t *at)
{
	return time_first(x, Q_WARN_EARLIEST, at);
}

/* ---- schedules ------------------------------------------------------- */

/* The schedules' statements: not prepared (run_sql), since the statement
 * table has no bit left; a node runs them once per firing or op. */
enum { S_PUT, S_GET, S_MOVE, S_DROP, S_LIST, S_DUE, S_DUE_READ, S_EARLIEST, NS };
#define SCHED_COLS "s.id, s.conv, s.due, s.cron, s.text"
static const char *const sched_sql[NS] = {
	[S_PUT] = "INSERT INTO schedules (id, conv, due, cron, text) VALUES ($1::text, $2::text, $3::int8, "
			"$4::text, $5::bytea) ON CONFLICT (id) DO NOTHING RETURNING 1",
	[S_GET] = "SELECT " SCHED_COLS " FROM schedules s WHERE s.id = $1::text",
	[S_MOVE] = "UPDATE schedules SET due = $2::int8 WHERE id = $1::text RETURNING 1",
	[S_DROP] = "DELETE FROM schedules WHERE id = $1::text RETURNING 1",
	[S_LIST] = "SELECT " SCHED_COLS " FROM schedules s WHERE ($1::text IS NULL OR s.conv = $1::text) "
			 "ORDER BY s.due, s.id",
	[S_DUE] = "SELECT " SCHED_COLS " FROM schedules s JOIN convs c ON c.id = s.conv WHERE s.due <= $1::int8 "
			"ORDER BY s.due, s.id LIMIT $2::int8 FOR UPDATE OF c SKIP LOCKED",
	[S_DUE_READ] = "SELECT " SCHED_COLS " FROM schedules s WHERE s.due <= $1::int8 ORDER BY s.due, s.id "
			     "LIMIT $2::int8",
	[S_EARLIEST] = "SELECT due FROM schedules ORDER BY due, id LIMIT 1",
};
/* Nodes firing at once share the due schedules out (S_DUE), as expiries. */

static void sched_row(const PGresult *r, int i, struct store_schedule *s)
{
	*s = (struct store_schedule){ g_bytes(r, i, 0), g_bytes(r, i, 1), g_i64(r, i, 2), g_bytes(r, i, 3),
				      g_bytes(r, i, 4) };
	if (!s->text.ptr)
		s->text = (store_bytes){ "", 0 };
}

int store_schedule_put(store_txn *x, const char *id, const char *conv, int64_t due, const char *cron,
		       store_bytes text)
{
	int err = conv_exists(x, conv);
	if (err || (err = quota(x, text.len + strlen(id) + (cron ? strlen(cron) : 0))) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, id);
	a_str(&a, conv);
	a_i64(&a, due);
	a_str(&a, cron);
	a_bytes(&a, text, 0);
	PGresult *r = run_sql(x, sched_sql[S_PUT], &a, &err);
	if (!r)
		return err;
	return PQntuples(r) == 1 ? 0 : STORE_E_CONFLICT;
}

int store_schedule_get(store_txn *x, const char *id, struct store_schedule *out)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	PGresult *r = run_sql(x, sched_sql[S_GET], &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) != 1)
		return STORE_E_NOTFOUND;
	sched_row(r, 0, out);
	return 0;
}

int store_schedule_move(store_txn *x, const char *id, int64_t due)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	a_i64(&a, due);
	PGresult *r = run_sql(x, sched_sql[S_MOVE], &a, &err);
	return !r ? err : PQntuples(r) == 1 ? 0 : STORE_E_NOTFOUND;
}

int store_schedule_drop(store_txn *x, const char *id)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	PGresult *r = run_sql(x, sched_sql[S_DROP], &a, &err);
	return !r ? err : PQntuples(r) == 1 ? 0 : STORE_E_NOTFOUND;
}

static int sched_rows(store_txn *x, const char *q, struct args *a, int (*fn)(void *, const struct store_schedule *),
		      void *arg)
{
	int err;
	PGresult *r = run_sql(x, q, a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_schedule s;
		sched_row(r, i, &s);
		int rc = fn(arg, &s);
		if (rc)
			return rc;
	}
	return 0;
}

int store_schedules_list(store_txn *x, const char *conv, int (*fn)(void *, const struct store_schedule *), void *arg)
{
	struct args a = { 0 };
	a_str(&a, conv);
	return sched_rows(x, sched_sql[S_LIST], &a, fn, arg);
}

int store_schedules_due(store_txn *x, int64_t now, size_t limit, int (*fn)(void *, const struct store_schedule *),
			void *arg)
{
	struct args a = { 0 };
	a_i64(&a, now);
	a_i64(&a, limit && limit < (size_t)INT64_MAX ? (int64_t)limit : INT64_MAX);
	return sched_rows(x, sched_sql[x->h.write ? S_DUE : S_DUE_READ], &a, fn, arg);
}

int store_schedule_earliest(store_txn *x, int64_t *due)
{
	int err;
	PGresult *r = run_sql(x, sched_sql[S_EARLIEST], NULL, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	*due = g_i64(r, 0, 0);
	return 0;
}

/* ---- audit ----------------------------------------------------------- */

int store_model_call_put(store_txn *x, const char *conv, const struct store_model_call_in *mc)
{
	int err = conv_exists(x, conv);
	if (err || !x->s->opts.audit)
		return err;
	if ((err = quota(x, mc->rendered.len + strlen(mc->model))) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, ref_key(mc->turn_ref));
	a_bin(&a, mc->model, strlen(mc->model));
	a_i64(&a, (int64_t)mc->usage.input_tokens);
	a_i64(&a, (int64_t)mc->usage.output_tokens);
	a_f64(&a, mc->usage.cost);
	a_i64(&a, (int64_t)mc->latency_ms);
	a_i64(&a, (int64_t)mc->summary_version);
	a_i64(&a, x->now);
	a_bytes(&a, mc->rendered, 0);
	return run(x, Q_MC_PUT, &a, &err) ? 0 : err;
}

int store_model_calls_list(store_txn *x, const char *conv, int (*fn)(void *, const struct store_model_call *),
			   void *arg)
{
	int err = conv_exists(x, conv);
	if (err)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	PGresult *r = run(x, Q_MC_LIST, &a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_model_call mc = {
			.turn_ref = ref_val(g_i64(r, i, 0)),
			.model = g_bytes(r, i, 1),
			.usage = { (uint64_t)g_i64(r, i, 2), (uint64_t)g_i64(r, i, 3), g_f64(r, i, 4) },
			.latency_ms = (uint64_t)g_i64(r, i, 5),
			.summary_version = (uint64_t)g_i64(r, i, 6),
			.inserted_at = g_i64(r, i, 7),
			.rendered = g_bytes(r, i, 8),
		};
		int rc = fn(arg, &mc);
		if (rc)
			return rc;
	}
	return 0;
}

int store_model_calls_gc(store_txn *x, const char *conv, int64_t ttl_ms, uint64_t *removed)
{
	int err;
	if (conv && (err = conv_exists(x, conv)) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, x->now - ttl_ms);
	PGresult *r = run(x, Q_MC_GC, &a, &err);
	if (!r)
		return err;
	if (removed)
		*removed = strtoull(PQcmdTuples(r), NULL, 10);
	return 0;
}

/* ---- nodes and leases -------------------------------------------------- */

/* The leases a beat found locked (a writer of this node's, for a moment;
 * another node's transaction, maybe stopped): renewed now, in a savepoint
 * so that a lock waited for past lock_timeout leaves them for the next
 * beat and this one still commits. */
#define BEAT_REST_SQL /* not prepared: the table has no bit left, and it runs rarely */ \
	"UPDATE convs c SET lease_expires = $2::int8 FROM (SELECT id FROM convs WHERE owner = $1::text " \
	"AND lease_expires < $2::int8 ORDER BY id FOR UPDATE) o WHERE c.id = o.id"

static int beat_rest(store_txn *x, const char *node, int64_t expires, int64_t *renewed)
{
	struct args a = { 0 };
	a_str(&a, node);
	a_i64(&a, expires);
	int err = pipe_drain(x);
	if (!err)
		err = exec_simple(x->pc->c, "SAVEPOINT beat_rest");
	if (err)
		return fail(x, err);
	PGresult *r = PQexecParams(x->pc->c, BEAT_REST_SQL, a.n, NULL, a.v, a.len, a.fmt, 1);
	err = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : sqlstate_err(r, x->pc->c);
	if (!err)
		*renewed = strtoll(PQcmdTuples(r), NULL, 10); /* not those claimed meanwhile */
	PQclear(r);
	if (err == -EAGAIN) /* lock_timeout (or a deadlock): nothing of it stays, the beat does */
		err = exec_simple(x->pc->c, "ROLLBACK TO SAVEPOINT beat_rest");
	else if (!err)
		err = exec_simple(x->pc->c, "RELEASE SAVEPOINT beat_rest");
	return err ? fail(x, err) : 0;
}

int store_node_beat(store_txn *x, const char *node, int64_t ttl_ms, uint64_t *leases)
{
	struct args a = { 0 };
	int err;
	a_str(&a, node);
	a_i64(&a, x->now);
	a_i64(&a, x->now + ttl_ms);
	PGresult *r = run(x, Q_NODE_BEAT, &a, &err);
	if (!r)
		return err;
	int64_t renewed = g_i64(r, 0, 0), owned = g_i64(r, 0, 1), rest = owned - renewed;
	/* Those left locked past lock_timeout count as held: no claim took
	 * them yet, and the next beat renews them if none does. */
	if (rest > 0 && (err = beat_rest(x, node, x->now + ttl_ms, &rest)) != 0)
		return err;
	if (leases)
		*leases = (uint64_t)(renewed + (rest > 0 ? rest : 0));
	return 0;
}

int store_node_leave(store_txn *x, const char *node)
{
	struct args a = { 0 };
	int err;
	a_str(&a, node);
	return run(x, Q_NODE_LEAVE, &a, &err) ? 0 : err;
}

int store_nodes_list(store_txn *x, int (*fn)(void *arg, const struct store_node *n), void *arg)
{
	int err;
	PGresult *r = run(x, Q_NODES_LIST, NULL, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_node nd = { g_bytes(r, i, 0), g_i64(r, i, 1), g_i64(r, i, 2), g_i64(r, i, 3),
					 (uint64_t)g_i64(r, i, 4) };
		int rc = fn(arg, &nd);
		if (rc)
			return rc;
	}
	return 0;
}

/* The owner columns of a conversation's row; in a write txn the row is
 * locked until the end (and held for the operations after). */
static int owner_load(store_txn *x, const char *id, struct store_owner *o)
{
	struct args a = { 0 };
	int err;
	a_str(&a, id);
	PGresult *r = run(x, x->h.write ? Q_OWNER_LOCK : Q_OWNER_GET, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	if (x->h.write)
		held_set(x, id, (uint64_t)g_i64(r, 0, 3));
	o->node = g_bytes(r, 0, 0);
	o->lease = (uint64_t)g_i64(r, 0, 1);
	o->expires_at = o->node.len ? g_i64(r, 0, 2) : 0;
	return 0;
}

int store_conv_owner(store_txn *x, const char *id, struct store_owner *out)
{
	return owner_load(x, id, out);
}

int store_conv_claim(store_txn *x, const char *id, const char *node, int64_t ttl_ms, uint64_t *gen)
{
	struct store_owner o;
	int err = owner_load(x, id, &o);
	if (err)
		return err;
	size_t nlen = strlen(node);
	if (o.node.len && !(o.node.len == nlen && memcmp(o.node.ptr, node, nlen) == 0) && o.expires_at > x->now)
		return STORE_E_CONFLICT;
	struct args a = { 0 };
	a_str(&a, id);
	a_str(&a, node);
	a_i64(&a, x->now + ttl_ms);
	PGresult *r = run(x, Q_CLAIM, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return fail(x, STORE_E_CORRUPT); /* the row is locked: it cannot have gone */
	*gen = (uint64_t)g_i64(r, 0, 0);
	return 0;
}

int store_conv_release(store_txn *x, const char *id, const char *node, uint64_t gen)
{
	struct store_owner o;
	int err = owner_load(x, id, &o);
	if (err)
		return err;
	struct args a = { 0 };
	a_str(&a, id);
	a_str(&a, node);
	a_i64(&a, (int64_t)gen);
	PGresult *r = run(x, Q_RELEASE, &a, &err);
	if (!r)
		return err;
	return PQntuples(r) == 1 ? 0 : STORE_E_FENCED;
}

int store_convs_claimable(store_txn *x, unsigned mask, size_t limit, store_conv_id_fn fn, void *arg)
{
	struct args a = { 0 };
	int err;
	a_i64(&a, (int64_t)mask);
	a_i64(&a, x->now);
	a_i64(&a, limit && limit < (size_t)INT64_MAX ? (int64_t)limit : INT64_MAX);
	PGresult *r = run(x, x->h.write ? Q_CLAIMABLE_LOCK : Q_CLAIMABLE, &a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		int rc = fn(arg, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0));
		if (rc)
			return rc;
	}
	return 0;
}

int store_node_leases(store_txn *x, const char *node,
		      int (*fn)(void *arg, const char *id, size_t len, uint64_t gen, int64_t expires_at), void *arg)
{
	struct args a = { 0 };
	int err;
	a_str(&a, node);
	PGresult *r = run(x, Q_NODE_LEASES, &a, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		int rc = fn(arg, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0), (uint64_t)g_i64(r, i, 1),
			    g_i64(r, i, 2));
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- cross-node wakeups ------------------------------------------------ */

/* A node's channel: its id and the store's schema, hashed to a short
 * identifier (channel names stop at 63 bytes), so stores sharing a database
 * do not wake each other's nodes. */
#define CHANNEL_SQL(node) "'ad_' || md5(current_schema() || '/' || " node ")" /* also Q_NOTIFY's */

int store_notify(store_txn *x, const char *node, const char *conv)
{
	struct args a = { 0 };
	int err;
	a_str(&a, node);
	a_str(&a, conv);
	return run(x, Q_NOTIFY, &a, &err) ? 0 : err;
}

int store_notify_msg(store_txn *x, const char *node, const char *msg)
{
	struct args a = { 0 };
	int err;
	a_str(&a, node);
	a_str(&a, msg);
	return run(x, Q_NOTIFY, &a, &err) ? 0 : err;
}

int pg_store_listen(store *s, const char *node, int *fd)
{
	if (s->listen) {
		conn_close(s->listen);
		s->listen = NULL;
	}
	struct pgconn *pc;
	int err = conn_open(s, &pc);
	if (err)
		return err;
	const char *v[1] = { node };
	PGresult *r = PQexecParams(pc->c, "SELECT " CHANNEL_SQL("$1::text"), 1, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
		err = sqlstate_err(r, pc->c);
		PQclear(r);
		conn_close(pc);
		return err;
	}
	char cmd[96];
	snprintf(cmd, sizeof cmd, "LISTEN \"%s\"", PQgetvalue(r, 0, 0)); /* hex: nothing to quote */
	PQclear(r);
	if ((err = exec_simple(pc->c, cmd)) != 0) {
		conn_close(pc);
		return err;
	}
	if (PQsetnonblocking(pc->c, 1) != 0) {
		conn_close(pc);
		return -EIO;
	}
	s->listen = pc;
	*fd = PQsocket(pc->c);
	return 0;
}

int pg_store_notified(store *s, int (*fn)(void *arg, const char *conv, size_t len), void *arg)
{
	if (!s->listen)
		return STORE_E_INVAL; /* no store_listen before */
	PGconn *c = s->listen->c;
	if (!PQconsumeInput(c) || PQstatus(c) != CONNECTION_OK) {
		conn_close(s->listen);
		s->listen = NULL;
		return -ECONNRESET;
	}
	PGnotify *n;
	int rc = 0;
	while (!rc && (n = PQnotifies(c)) != NULL) {
		rc = fn(arg, n->extra, strlen(n->extra));
		PQfreemem(n);
	}
	return rc;
}

/* ---- runs ------------------------------------------------------------ */

int store_run_put(store_txn *x, const char *conv, const struct store_run *r)
{
	/* Seqs past a bigint: a limit of this backend's columns. */
	if (r->from_seq > INT64_MAX || r->to_seq > INT64_MAX || r->first_seq > INT64_MAX || r->last_seq > INT64_MAX)
		return STORE_E_INVAL;
	int err = conv_exists(x, conv);
	if (err)
		return err;
	if ((err = quota(x, 96 + r->model.len)) != 0)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, (int64_t)r->id);
	a_i64(&a, r->status);
	a_i64(&a, r->attempt);
	a_i64(&a, (int64_t)r->from_seq);
	a_i64(&a, (int64_t)r->to_seq);
	a_i64(&a, (int64_t)r->first_seq);
	a_i64(&a, (int64_t)r->last_seq);
	a_bytes(&a, r->model, 0);
	a_i64(&a, (int64_t)r->usage.input_tokens);
	a_i64(&a, (int64_t)r->usage.output_tokens);
	a_f64(&a, r->usage.cost);
	a_i64(&a, r->started_at);
	a_i64(&a, r->ended_at);
	return run(x, Q_RUN_PUT, &a, &err) ? 0 : err;
}

static int run_row(const PGresult *r, int i, struct store_run *out)
{
	int64_t st = g_i64(r, i, 1), att = g_i64(r, i, 2);
	if (st < 0 || st > STORE_RUN_INTERRUPTED || att < 1 || att > UINT32_MAX)
		return STORE_E_CORRUPT;
	*out = (struct store_run){
		.id = (uint64_t)g_i64(r, i, 0), .status = (int)st, .attempt = (uint32_t)att,
		.from_seq = (uint64_t)g_i64(r, i, 3), .to_seq = (uint64_t)g_i64(r, i, 4),
		.first_seq = (uint64_t)g_i64(r, i, 5), .last_seq = (uint64_t)g_i64(r, i, 6),
		.model = g_bytes(r, i, 7),
		.usage = { (uint64_t)g_i64(r, i, 8), (uint64_t)g_i64(r, i, 9), g_f64(r, i, 10) },
		.started_at = g_i64(r, i, 11), .ended_at = g_i64(r, i, 12),
	};
	return 0;
}

int store_run_get(store_txn *x, const char *conv, uint64_t id, struct store_run *out)
{
	int err = conv_exists(x, conv);
	if (err)
		return err;
	if (id > INT64_MAX)
		return STORE_E_NOTFOUND;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, (int64_t)id);
	PGresult *r = run(x, Q_RUN_GET, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	return run_row(r, 0, out) ? fail(x, STORE_E_CORRUPT) : 0;
}

int store_runs_list(store_txn *x, const char *conv, uint64_t before, size_t limit,
		    int (*fn)(void *, const struct store_run *), void *arg, int *more)
{
	if (more)
		*more = 0;
	int err = conv_exists(x, conv);
	if (err)
		return err;
	struct args a = { 0 };
	a_str(&a, conv);
	a_i64(&a, before > INT64_MAX ? 0 : (int64_t)before);
	a_i64(&a, limit && limit < INT64_MAX ? (int64_t)limit + 1 : INT64_MAX);
	PGresult *r = run(x, Q_RUN_LIST, &a, &err);
	if (!r)
		return err;
	int n = PQntuples(r);
	if (limit && (size_t)n > limit) {
		n = (int)limit;
		if (more)
			*more = 1;
	}
	for (int i = 0; i < n; i++) {
		struct store_run rr;
		if (run_row(r, i, &rr))
			return fail(x, STORE_E_CORRUPT);
		int rc = fn(arg, &rr);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- logs that begin after seq 1 --------------------------------------- */

int store_conv_create_at(store_txn *x, const char *id, store_bytes settings, uint64_t first_seq)
{
	int made = 0, err = conv_insert(x, id, settings, &made);
	if (err)
		return err;
	if (!made)
		return STORE_E_CONFLICT;
	if (first_seq == 1)
		return 0;
	struct args a = { 0 };
	a_str(&a, id);
	a_i64(&a, (int64_t)first_seq);
	if (!run(x, Q_LOG_START, &a, &err))
		return err;
	if (x->held_ok && strcmp(x->held, id) == 0)
		x->held_last = first_seq - 1;
	return 0;
}

int store_event_first_seq(store_txn *x, const char *conv, uint64_t *seq)
{
	struct args a = { 0 };
	int err;
	a_str(&a, conv);
	PGresult *r = run(x, Q_LAST_SEQ, &a, &err);
	if (!r)
		return err;
	if (PQntuples(r) == 0)
		return STORE_E_NOTFOUND;
	*seq = (uint64_t)g_i64(r, 0, 1);
	return 0;
}

/* ---- every run row (store_runs_each) ------------------------------------ */

int store_runs_each(store_txn *x, int (*fn)(void *arg, store_bytes conv, const struct store_run *r), void *arg)
{
	int err;
	PGresult *r = run(x, Q_RUN_EACH, NULL, &err);
	if (!r)
		return err;
	for (int i = 0, n = PQntuples(r); i < n; i++) {
		struct store_run rr;
		if (run_row(r, i, &rr))
			return fail(x, STORE_E_CORRUPT);
		store_bytes conv = PQgetisnull(r, i, 13) ? (store_bytes){ NULL, 0 } : g_bytes(r, i, 13);
		int rc = fn(arg, conv, &rr);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- several conversations locked at once (store_convs_lock) ----------- */

int store_convs_lock(store_txn *x, const char *const *ids, size_t n)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += strlen(ids[i]) + 1;
	if (!n)
		return 0;
	char *list = malloc(len), *p = list;
	if (!list)
		return fail(x, -ENOMEM);
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(ids[i]);
		memcpy(p, ids[i], l);
		p += l;
		*p++ = i + 1 < n ? ' ' : 0;
	}
	struct args a = { 0 };
	int err;
	a_str(&a, list);
	PGresult *r = run(x, Q_CONVS_LOCK, &a, &err);
	free(list);
	if (!r)
		return err;
	/* Without memory for the marks the rows are locked all the same, and
	 * conv_load reads them again. */
	unsigned char *ok = PQntuples(r) ? malloc((size_t)PQntuples(r)) : NULL;
	if (ok)
		memset(ok, 1, (size_t)PQntuples(r));
	free(x->pre_ok);
	x->pre_ok = ok;
	x->pre = ok ? r : NULL;
	return 0;
}

/* ---- the backend's table (store/store.c) -------------------------------- */

#define PG_ENTRY(name, params, args) .name = pg_store_##name,
const struct store_vt store_pg_vt = {
	STORE_VT_INIT(pg, "postgresql"),
	STORE_TXN_FUNCS(PG_ENTRY)
};
