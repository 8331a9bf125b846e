/*
 * sys_sqlite.c: SQLite doing the same operations at its best.
 *
 * WAL; synchronous=FULL when durable (one WAL fsync per commit), NORMAL when
 * not (no fsync at commit); WITHOUT ROWID tables keyed by (conversation, seq)
 * and (conversation, to_seq); statements prepared once; a 64 MiB page cache
 * that holds every page read here. Not memory-mapped: on this workload
 * PRAGMA mmap_size made SQLite's reads slower (the newest page of 50 took
 * 37 us mapped against 16 us through the page cache), so it is left off. Appends
 * assign seq = max + 1 in the INSERT (as agentd assigns it in the
 * transaction); write transactions are BEGIN IMMEDIATE, and a writer that
 * finds the lock taken retries after 100 us (the default busy timeout sleeps
 * for milliseconds, which would not be SQLite at its best).
 */
#include "bench/bench.h"
#include "bench/bench_store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char schema[] =
	"CREATE TABLE IF NOT EXISTS events(conv TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,"
	" inserted_at INTEGER NOT NULL, event_id TEXT, content BLOB NOT NULL,"
	" PRIMARY KEY(conv, seq)) WITHOUT ROWID;"
	"CREATE UNIQUE INDEX IF NOT EXISTS events_event_id ON events(conv, event_id)"
	" WHERE event_id IS NOT NULL;"
	"CREATE TABLE IF NOT EXISTS summaries(conv TEXT NOT NULL, to_seq INTEGER NOT NULL,"
	" from_seq INTEGER NOT NULL, version INTEGER NOT NULL, inserted_at INTEGER NOT NULL,"
	" content BLOB NOT NULL, PRIMARY KEY(conv, to_seq)) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS tool_calls(id TEXT PRIMARY KEY, conv TEXT NOT NULL, name TEXT NOT NULL,"
	" executor INTEGER NOT NULL, status INTEGER NOT NULL, inserted_at INTEGER NOT NULL,"
	" resolved_at INTEGER NOT NULL, deadline INTEGER NOT NULL, attempts INTEGER NOT NULL,"
	" args BLOB NOT NULL, prompt BLOB, result BLOB) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS tool_calls_conv ON tool_calls(conv, status);";

enum {
	S_BEGIN_W, S_BEGIN_R, S_COMMIT, S_EV_INS, S_SUM_INS, S_SUM_LATEST, S_EV_AFTER, S_EV_NEWEST,
	S_TC_INS, S_TC_RESOLVE, S_COUNT
};

static const char *const sql[S_COUNT] = {
	[S_BEGIN_W] = "BEGIN IMMEDIATE",
	[S_BEGIN_R] = "BEGIN",
	[S_COMMIT] = "COMMIT",
	[S_EV_INS] = "INSERT INTO events(conv, seq, type, inserted_at, event_id, content)"
		     " VALUES(?1, (SELECT coalesce(max(seq), 0) + 1 FROM events WHERE conv = ?1), ?2, ?3, NULL, ?4)",
	[S_SUM_INS] = "INSERT OR REPLACE INTO summaries(conv, to_seq, from_seq, version, inserted_at, content)"
		      " VALUES(?1, ?2, 1, (SELECT coalesce(max(version), 0) + 1 FROM summaries WHERE conv = ?1),"
		      " ?3, ?4)",
	[S_SUM_LATEST] = "SELECT from_seq, to_seq, version, inserted_at, content FROM summaries"
			 " WHERE conv = ?1 ORDER BY to_seq DESC LIMIT 1",
	[S_EV_AFTER] = "SELECT seq, type, inserted_at, event_id, content FROM events"
		       " WHERE conv = ?1 AND seq > ?2 ORDER BY seq",
	/* Seqs are dense, as agentd's stream relies on: the newest `limit`
	 * start limit back from the last (a sub-select evaluated once). */
	[S_EV_NEWEST] = "SELECT seq, type, inserted_at, event_id, content FROM events"
			" WHERE conv = ?1 AND seq > (SELECT coalesce(max(seq), 0) FROM events WHERE conv = ?1) - ?2"
			" ORDER BY seq",
	[S_TC_INS] = "INSERT INTO tool_calls(id, conv, name, executor, status, inserted_at, resolved_at, deadline,"
		     " attempts, args, prompt, result) VALUES(?1, ?2, ?3, 1, 0, ?4, 0, 0, 0, ?5, NULL, NULL)",
	[S_TC_RESOLVE] = "UPDATE tool_calls SET status = 1, result = ?2, resolved_at = ?3"
			 " WHERE id = ?1 AND status = 0",
};

struct lite {
	sqlite3 *db;
	sqlite3_stmt *st[S_COUNT];
	char conv[32]; /* bound SQLITE_STATIC: lives as long as the handle */
	char call[32];
};

static void check(struct lite *l, const char *what, int rc)
{
	if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
		bench_fail("sqlite %s: %s (%d)", what, l->db ? sqlite3_errmsg(l->db) : sqlite3_errstr(rc), rc);
}

static void exec(struct lite *l, const char *s)
{
	check(l, s, sqlite3_exec(l->db, s, NULL, NULL, NULL));
}

/* Step a statement that returns no rows, then reset it. */
static void run(struct lite *l, int i)
{
	check(l, sql[i], sqlite3_step(l->st[i]));
	sqlite3_reset(l->st[i]);
}

static int64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int busy(void *arg, int tries)
{
	(void)arg;
	if (tries > 100000)
		return 0;
	usleep(100);
	return 1;
}

static void *lite_open(const char *dir, int durable, size_t map_size)
{
	struct lite *l = calloc(1, sizeof *l);
	char path[4096];
	(void)map_size; /* SQLite grows its file as it needs */
	if (!l)
		bench_fail("out of memory");
	snprintf(path, sizeof path, "%s/bench.sqlite", dir);
	check(l, "open", sqlite3_open_v2(path, &l->db,
					 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL));
	sqlite3_busy_handler(l->db, busy, NULL);
	exec(l, "PRAGMA journal_mode=WAL");
	exec(l, durable ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
	exec(l, "PRAGMA cache_size=-65536");
	exec(l, "PRAGMA temp_store=MEMORY");
	exec(l, schema);
	for (int i = 0; i < S_COUNT; i++)
		check(l, sql[i], sqlite3_prepare_v3(l->db, sql[i], -1, SQLITE_PREPARE_PERSISTENT, &l->st[i], NULL));
	return l;
}

static void lite_close(void *h)
{
	struct lite *l = h;
	for (int i = 0; i < S_COUNT; i++)
		sqlite3_finalize(l->st[i]);
	sqlite3_close(l->db);
	free(l);
}

/* No conversation table: at its best, SQLite keys events by the id itself. */
static void lite_convs_create(void *h, unsigned from, unsigned to)
{
	(void)h;
	(void)from;
	(void)to;
}

static void lite_append(void *h, const struct bench_ev *ev, size_t n)
{
	struct lite *l = h;
	sqlite3_stmt *s = l->st[S_EV_INS];
	run(l, S_BEGIN_W);
	int64_t now = ms_now();
	sqlite3_bind_text(s, 2, bench_event_type, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, now);
	sqlite3_bind_blob(s, 4, bench_content, (int)bench_content_len, SQLITE_STATIC);
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || ev[i].conv != ev[i - 1].conv) {
			bench_conv_id(l->conv, ev[i].conv);
			sqlite3_bind_text(s, 1, l->conv, -1, SQLITE_STATIC);
		}
		check(l, "insert event", sqlite3_step(s));
		sqlite3_reset(s);
	}
	run(l, S_COMMIT);
}

static void lite_summary_put(void *h, unsigned conv, uint64_t to_seq)
{
	struct lite *l = h;
	sqlite3_stmt *s = l->st[S_SUM_INS];
	bench_conv_id(l->conv, conv);
	run(l, S_BEGIN_W);
	sqlite3_bind_text(s, 1, l->conv, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, (sqlite3_int64)to_seq);
	sqlite3_bind_int64(s, 3, ms_now());
	sqlite3_bind_blob(s, 4, bench_content, (int)bench_content_len, SQLITE_STATIC);
	run(l, S_SUM_INS);
	run(l, S_COMMIT);
}

/* Step event rows, reading every column as agentd's reader decodes every field. */
static void rows(struct lite *l, sqlite3_stmt *s, struct bench_sink *out)
{
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		sqlite3_int64 seq = sqlite3_column_int64(s, 0);
		(void)sqlite3_column_text(s, 1);
		size_t tlen = (size_t)sqlite3_column_bytes(s, 1);
		sqlite3_int64 at = sqlite3_column_int64(s, 2);
		size_t elen = 0;
		if (sqlite3_column_type(s, 3) != SQLITE_NULL) {
			(void)sqlite3_column_text(s, 3);
			elen = (size_t)sqlite3_column_bytes(s, 3);
		}
		const void *c = sqlite3_column_blob(s, 4);
		size_t clen = (size_t)sqlite3_column_bytes(s, 4);
		bench_sink_event(out, (uint64_t)seq, tlen, at, elen, c, clen);
	}
	check(l, "select events", rc);
	sqlite3_reset(s);
}

static void lite_load_since(void *h, unsigned conv, struct bench_sink *out)
{
	struct lite *l = h;
	sqlite3_stmt *s = l->st[S_SUM_LATEST], *e = l->st[S_EV_AFTER];
	sqlite3_int64 after = 0;
	bench_conv_id(l->conv, conv);
	run(l, S_BEGIN_R); /* one read snapshot for the summary and the events */
	sqlite3_bind_text(s, 1, l->conv, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		(void)sqlite3_column_int64(s, 0);
		after = sqlite3_column_int64(s, 1);
		(void)sqlite3_column_int64(s, 2);
		(void)sqlite3_column_int64(s, 3);
		(void)sqlite3_column_blob(s, 4);
		out->sum += (uint64_t)after + (uint64_t)sqlite3_column_bytes(s, 4);
	} else {
		check(l, "select summary", rc);
	}
	sqlite3_reset(s);
	sqlite3_bind_text(e, 1, l->conv, -1, SQLITE_STATIC);
	sqlite3_bind_int64(e, 2, after);
	rows(l, e, out);
	run(l, S_COMMIT);
}

static void lite_newest(void *h, unsigned conv, size_t limit, struct bench_sink *out)
{
	struct lite *l = h;
	sqlite3_stmt *s = l->st[S_EV_NEWEST];
	bench_conv_id(l->conv, conv);
	sqlite3_bind_text(s, 1, l->conv, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, (sqlite3_int64)limit);
	rows(l, s, out);
}

static void lite_calls_create(void *h, unsigned conv, unsigned from, unsigned to)
{
	struct lite *l = h;
	sqlite3_stmt *s = l->st[S_TC_INS];
	bench_conv_id(l->conv, conv);
	run(l, S_BEGIN_W);
	sqlite3_bind_text(s, 2, l->conv, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, bench_call_name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, ms_now());
	sqlite3_bind_blob(s, 5, bench_args, (int)bench_args_len, SQLITE_STATIC);
	for (unsigned i = from; i < to; i++) {
		bench_call_id(l->call, i);
		sqlite3_bind_text(s, 1, l->call, -1, SQLITE_STATIC);
		check(l, "insert tool call", sqlite3_step(s));
		sqlite3_reset(s);
	}
	run(l, S_COMMIT);
}

static void lite_calls_resolve(void *h, unsigned conv, unsigned from, unsigned to)
{
	struct lite *l = h;
	sqlite3_stmt *s = l->st[S_TC_RESOLVE];
	(void)conv;
	run(l, S_BEGIN_W);
	sqlite3_bind_blob(s, 2, bench_result, (int)bench_result_len, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, ms_now());
	for (unsigned i = from; i < to; i++) {
		bench_call_id(l->call, i);
		sqlite3_bind_text(s, 1, l->call, -1, SQLITE_STATIC);
		check(l, "resolve tool call", sqlite3_step(s));
		sqlite3_reset(s);
		if (sqlite3_changes(l->db) != 1)
			bench_fail("sqlite: tool call %s is not pending", l->call);
	}
	run(l, S_COMMIT);
}

/* Checkpoint the WAL into the database (what synchronous=NORMAL defers),
 * so later reads do not search a long WAL either. */
static void lite_sync(void *h)
{
	struct lite *l = h;
	check(l, "wal_checkpoint", sqlite3_wal_checkpoint_v2(l->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL));
}

const struct bench_sys bench_sys_sqlite = {
	"SQLite", lite_open, lite_close, lite_convs_create, lite_append, lite_summary_put, lite_load_since,
	lite_newest, lite_calls_create, lite_calls_resolve, lite_sync, lite_append, NULL,
};
