/*
 * What the PostgreSQL store promises beyond the conformance suite (which
 * runs unchanged on it): the choice of backend by target, the schema
 * version check, row locks serialising writers of one conversation across
 * processes (lease fencing, resolvers behind workers), a killed writer,
 * concurrent appenders, a lost connection, and a COMMIT whose answer is lost.
 *
 * The "server" tests need the throwaway cluster of tests/pg/cluster.sh,
 * named by AGENTD_TEST_PG (the conninfo prefix it printed), with a database
 * "conformance" (ctest conformance_pg runs them so); each test works in a
 * fresh schema of it. Without AGENTD_TEST_PG only the "dispatch" tests run.
 */
#include <check.h>
#include <errno.h>
#include <libpq-fe.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/suites.h"

/* ---- helpers ---------------------------------------------------------- */

static char schema[64];
static char target[512];

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t deadline_in(int ms)
{
	const char *s = getenv("AGENTD_TEST_SLOW");
	double f = s ? strtod(s, NULL) : 1.0;
	return mono_ms() + (int64_t)(ms * (f >= 1.0 ? f : 1.0));
}

static PGconn *admin(void)
{
	char ci[600];
	snprintf(ci, sizeof ci, "%s dbname=conformance options=-cclient_min_messages=warning",
		 getenv("AGENTD_TEST_PG"));
	PGconn *c = PQconnectdb(ci);
	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "test cluster: %s", PQerrorMessage(c));
	return c;
}

/* Run sql on an admin connection; returns the first value of the first row
 * as a number (0 when none). */
static long admin_sql(const char *sql)
{
	PGconn *c = admin();
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	ck_assert_msg(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
	long v = st == PGRES_TUPLES_OK && PQntuples(r) > 0 ? strtol(PQgetvalue(r, 0, 0), NULL, 10) : 0;
	PQclear(r);
	PQfinish(c);
	return v;
}

static void drop_schema(void)
{
	if (!schema[0])
		return;
	char sql[128];
	snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	PGconn *c = admin();
	PQclear(PQexec(c, sql));
	PQfinish(c);
	schema[0] = 0;
}

static void setup(void)
{
	char sql[128];
	snprintf(schema, sizeof schema, "pgt_%d_%lld", (int)getpid(), (long long)mono_ms());
	snprintf(sql, sizeof sql, "CREATE SCHEMA %s", schema);
	admin_sql(sql);
	atexit(drop_schema); /* a failed assertion skips teardown */
	snprintf(target, sizeof target, "%s dbname=conformance options=-csearch_path=%s", getenv("AGENTD_TEST_PG"),
		 schema);
}

static void teardown(void)
{
	drop_schema();
}

static store *open_ok(void)
{
	store *s = NULL;
	int err = store_open(&s, target, NULL);
	ck_assert_msg(err == 0, "store_open %s: %s", target, store_strerror(err));
	return s;
}

static store_bytes mstr(msgpack_sbuffer *sb, const char *text)
{
	msgpack_packer pk;
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_str_with_body(&pk, text, strlen(text));
	return (store_bytes){ sb->data, sb->size };
}

static const store_bytes empty_map = { "\x80", 1 };

static void conv_create(store *s, const char *id)
{
	store_txn *x;
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_create(x, id, empty_map), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
}

static int append(store_txn *x, const char *conv, const char *eid, uint64_t *seq)
{
	msgpack_sbuffer sb;
	struct store_event_in ev = { "user_msg", mstr(&sb, eid), eid };
	int err = store_event_append(x, conv, &ev, seq, NULL);
	msgpack_sbuffer_destroy(&sb);
	return err;
}

static uint64_t latest(store *s, const char *conv)
{
	store_txn *x;
	uint64_t seq = 0;
	ck_assert_int_eq(store_txn_begin(s, STORE_READ, &x), 0);
	ck_assert_int_eq(store_event_latest_seq(x, conv, &seq), 0);
	store_txn_abort(x);
	return seq;
}

/* ---- dispatch (no server needed) ------------------------------------- */

/* PostgreSQL targets reach libpq (no server there: refused), anything else
 * is an LMDB directory (missing here: -ENOENT). */
START_TEST(target_chooses_the_backend)
{
	static const char *const pg[] = {
		"postgresql:///agentd?host=/nonexistent-agentd-socket-dir",
		"postgres:///agentd?host=/nonexistent-agentd-socket-dir",
		"host=/nonexistent-agentd-socket-dir dbname=agentd",
		"dbname=agentd host=/nonexistent-agentd-socket-dir",
	};
	static const char *const lmdb[] = {
		"/nonexistent-agentd-dir/postgresql:",
		"nonexistent-agentd-dir-host=x",
		"postgresql:nonexistent",
	};
	for (size_t i = 0; i < sizeof pg / sizeof pg[0]; i++) {
		store *s = NULL;
		ck_assert_msg(store_open(&s, pg[i], NULL) == -ECONNREFUSED, "%s", pg[i]);
		ck_assert_ptr_null(s);
		/* libpq's reason, on one line, for the opener's message */
		ck_assert_msg(strstr(store_open_error(), "nonexistent-agentd-socket-dir") != NULL, "%s: '%s'", pg[i],
			      store_open_error());
		ck_assert_ptr_null(strchr(store_open_error(), '\n'));
	}
	store *bad = NULL;
	ck_assert_int_eq(store_open(&bad, "postgresql://h:notaport/x", NULL), -ECONNREFUSED);
	ck_assert_ptr_nonnull(strstr(store_open_error(), "notaport"));
	for (size_t i = 0; i < sizeof lmdb / sizeof lmdb[0]; i++) {
		store *s = NULL;
		ck_assert_msg(store_open(&s, lmdb[i], NULL) == -ENOENT, "%s", lmdb[i]);
		ck_assert_ptr_null(s);
	}
}
END_TEST

/* ---- server ----------------------------------------------------------- */

/* A database whose schema is newer than this agentd's is refused, and
 * nothing is changed in it; the version this agentd knows opens again. */
START_TEST(newer_schema_is_refused)
{
	store *s = open_ok();
	conv_create(s, "c1");
	store_close(s);
	char sql[160];
	snprintf(sql, sizeof sql, "UPDATE %s.schema_version SET version = version + 1", schema);
	admin_sql(sql);
	s = NULL;
	ck_assert_int_eq(store_open(&s, target, NULL), STORE_E_CORRUPT);
	ck_assert_ptr_null(s);
	ck_assert_str_eq(store_open_error(), "the database's schema is version 3, newer than this agentd's (2): "
					     "upgrade agentd to use it");
	snprintf(sql, sizeof sql, "SELECT version FROM %s.schema_version", schema);
	ck_assert_int_eq(admin_sql(sql), 3);
	snprintf(sql, sizeof sql, "UPDATE %s.schema_version SET version = 2", schema);
	admin_sql(sql);
	s = open_ok();
	ck_assert_str_eq(store_open_error(), "");
	store_txn *x;
	struct store_conv c;
	ck_assert_int_eq(store_txn_begin(s, STORE_READ, &x), 0);
	ck_assert_int_eq(store_conv_get(x, "c1", &c), 0);
	store_txn_abort(x);
	store_close(s);
}
END_TEST

/* A version 1 store (no schedules table) is refused read-only, with the
 * reason, and migrated to version 2 by an open that may write: its rows
 * stay, and schedules work. */
START_TEST(version_1_is_migrated)
{
	store *s = open_ok();
	conv_create(s, "c1");
	store_close(s);
	char sql[200];
	snprintf(sql, sizeof sql, "DROP TABLE %s.schedules; UPDATE %s.schema_version SET version = 1", schema, schema);
	admin_sql(sql);
	struct store_opts ro = { .read_only = 1 };
	s = NULL;
	ck_assert_int_eq(store_open(&s, target, &ro), STORE_E_CORRUPT);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(store_open_error(), "older than this agentd's") != NULL, "%s", store_open_error());
	s = open_ok();
	snprintf(sql, sizeof sql, "SELECT version FROM %s.schema_version", schema);
	ck_assert_int_eq(admin_sql(sql), 2);
	store_txn *x;
	struct store_conv c;
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_get(x, "c1", &c), 0);
	ck_assert_int_eq(store_schedule_put(x, "s1", "c1", 1000, NULL, (store_bytes){ "t", 1 }), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	store_close(s);
	s = open_ok(); /* a second open finds version 2: nothing to migrate */
	ck_assert_int_eq(store_txn_begin(s, STORE_READ, &x), 0);
	int64_t due = 0;
	ck_assert_int_eq(store_schedule_earliest(x, &due), 0);
	ck_assert_int_eq(due, 1000);
	store_txn_abort(x);
	store_close(s);
}
END_TEST

/* Read-only opening of a schema without the store's tables: not an agentd
 * store, and nothing is created. */
START_TEST(read_only_open_creates_nothing)
{
	struct store_opts o = { .read_only = 1 };
	store *s = NULL;
	ck_assert_int_eq(store_open(&s, target, &o), STORE_E_CORRUPT);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(strstr(store_open_error(), "no agentd store"));
	char sql[200];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_tables WHERE schemaname = '%s'", schema);
	ck_assert_int_eq(admin_sql(sql), 0);
}
END_TEST

/* The backends of this test's schema waiting for a lock. */
static long lock_waiters(void)
{
	return admin_sql("SELECT count(*) FROM pg_stat_activity WHERE datname = 'conformance' "
			 "AND wait_event_type = 'Lock'");
}

/* A writer that checked its lease holds the conversation's row: the next
 * generation, taken by another process, waits for that writer's commit (so
 * what it wrote under its lease lands), and its next transaction is fenced. */
START_TEST(lease_check_holds_the_row_until_commit)
{
	store *s = open_ok();
	conv_create(s, "c");
	store_txn *x;
	uint64_t g1, g2 = 0, seq;
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_next(x, "c", &g1), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);

	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_check(x, "c", g1), 0);
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* A supervisor of its own, with its own handle. */
		store *s2 = NULL;
		store_txn *y;
		uint64_t g = 0;
		if (store_open(&s2, target, NULL) || store_txn_begin(s2, STORE_WRITE, &y) ||
		    store_lease_next(y, "c", &g) || store_txn_commit(y))
			_exit(1);
		(void)!write(p[1], &g, sizeof g);
		store_close(s2);
		_exit(0);
	}
	close(p[1]);
	int64_t dl = deadline_in(10000);
	while (lock_waiters() < 1) {
		ck_assert_msg(mono_ms() < dl, "the other process's lease_next never waited for the row");
		usleep(10000);
	}
	/* still ours: the write under the checked lease lands */
	ck_assert_int_eq(append(x, "c", "under-g1", &seq), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(read(p[0], &g2, sizeof g2), (ssize_t)sizeof g2);
	close(p[0]);
	ck_assert_uint_gt(g2, g1);
	/* the superseded writer is fenced, and writes nothing */
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_check(x, "c", g1), STORE_E_FENCED);
	store_txn_abort(x);
	ck_assert_uint_eq(latest(s, "c"), 1);
	store_close(s);
}
END_TEST

/* A resolver (another process) and the conversation's worker touch the same
 * tool call: the worker holds the conversation and then counts an attempt
 * on the call, the resolver waits for the conversation before the call, so
 * both succeed in turn instead of deadlocking (one would fail -EAGAIN). */
START_TEST(resolver_and_worker_queue_without_deadlock)
{
	store *s = open_ok();
	conv_create(s, "c");
	store_txn *x;
	struct store_tool_call_in tc = { "tc", "approve", STORE_EXEC_HUMAN, { "\x80", 1 }, { 0 } };
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_tool_call_upsert(x, "c", &tc), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);

	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_check(x, "c", 0), 0); /* the worker holds its conversation */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		store *s2 = NULL;
		store_txn *y;
		char conv[STORE_ID_MAX + 1];
		if (store_open(&s2, target, NULL) || store_txn_begin(s2, STORE_WRITE, &y))
			_exit(1);
		int err = store_tool_call_resolve(y, "tc", STORE_TC_RESOLVED, (store_bytes){ 0 }, conv);
		if (err)
			_exit(err == -EAGAIN ? 3 : 2);
		if (store_txn_commit(y) || strcmp(conv, "c") != 0)
			_exit(4);
		store_close(s2);
		_exit(0);
	}
	int64_t dl = deadline_in(10000);
	while (lock_waiters() < 1) {
		ck_assert_msg(mono_ms() < dl, "the resolver never waited");
		usleep(10000);
	}
	uint32_t att = 0;
	ck_assert_int_eq(store_tool_call_attempt(x, "tc", &att), 0);
	ck_assert_uint_eq(att, 1);
	ck_assert_int_eq(store_txn_commit(x), 0);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "resolver exited %d",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	struct store_tool_call got;
	ck_assert_int_eq(store_txn_begin(s, STORE_READ, &x), 0);
	ck_assert_int_eq(store_tool_call_get(x, "tc", &got), 0);
	ck_assert_int_eq(got.status, STORE_TC_RESOLVED);
	ck_assert_uint_eq(got.attempts, 1);
	store_txn_abort(x);
	store_close(s);
}
END_TEST

/* A writer killed (SIGKILL) inside its transaction, holding the
 * conversation's row: the server sees its connection close, aborts the
 * transaction and releases the row, so the next writer goes on at once and
 * nothing of the dead transaction remains. */
START_TEST(killed_writer_releases_the_row)
{
	store *s = open_ok();
	conv_create(s, "c");
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		store *s2 = NULL;
		store_txn *y;
		uint64_t seq;
		close(p[0]);
		if (store_open(&s2, target, NULL) || store_txn_begin(s2, STORE_WRITE, &y) ||
		    store_lease_check(y, "c", 0) || append(y, "c", "doomed", &seq))
			_exit(1);
		(void)!write(p[1], "w", 1);
		for (;;)
			pause();
	}
	close(p[1]);
	char b;
	ck_assert_int_eq(read(p[0], &b, 1), 1); /* it holds the row, inside its transaction */
	close(p[0]);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	store_txn *x;
	uint64_t gen, seq;
	int64_t t0 = mono_ms();
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_next(x, "c", &gen), 0);
	ck_assert_int_eq(append(x, "c", "next", &seq), 0);
	ck_assert_uint_eq(seq, 1); /* the dead writer's event is gone */
	ck_assert_int_eq(store_txn_commit(x), 0);
	ck_assert_msg(mono_ms() < t0 + 5000, "the row was held %lld ms after the kill", (long long)(mono_ms() - t0));
	ck_assert_uint_eq(latest(s, "c"), 1);
	store_close(s);
}
END_TEST

#define NPROC 4
#define NAPPEND 40

/* Processes appending to one conversation, one event per transaction: the
 * log is 1..N with every event once, each process's in its own order. */
START_TEST(concurrent_appenders_get_gapless_seqs)
{
	store *s = open_ok();
	conv_create(s, "shared");
	store_close(s);
	pid_t pids[NPROC];
	for (int i = 0; i < NPROC; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			store *s2 = NULL;
			if (store_open(&s2, target, NULL))
				_exit(1);
			for (int j = 1; j <= NAPPEND; j++) {
				char eid[32];
				store_txn *y;
				uint64_t seq;
				snprintf(eid, sizeof eid, "p%d-%d", i, j);
				if (store_txn_begin(s2, STORE_WRITE, &y) || append(y, "shared", eid, &seq) ||
				    store_txn_commit(y))
					_exit(2);
			}
			store_close(s2);
			_exit(0);
		}
	}
	for (int i = 0; i < NPROC; i++) {
		int status;
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "appender %d failed", i);
	}
	char sql[600];
	snprintf(sql, sizeof sql,
		 "SELECT count(*) FROM %s.events WHERE conv = 'shared' AND seq BETWEEN 1 AND %d", schema,
		 NPROC * NAPPEND);
	ck_assert_int_eq(admin_sql(sql), NPROC * NAPPEND);
	snprintf(sql, sizeof sql, "SELECT count(DISTINCT event_id) FROM %s.events WHERE conv = 'shared'", schema);
	ck_assert_int_eq(admin_sql(sql), NPROC * NAPPEND);
	/* each process's events in its order: seq rises with its counter */
	snprintf(sql, sizeof sql,
		 "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY split_part(convert_from(event_id, "
		 "'UTF8'), '-', 1) ORDER BY split_part(convert_from(event_id, 'UTF8'), '-', 2)::int) AS prev "
		 "FROM %s.events WHERE conv = 'shared') t WHERE prev > seq",
		 schema);
	ck_assert_int_eq(admin_sql(sql), 0);
	s = open_ok();
	ck_assert_uint_eq(latest(s, "shared"), NPROC * NAPPEND);
	store_close(s);
}
END_TEST

struct id_list {
	char s[256];
};

static int add_id(void *arg, const char *id, size_t len)
{
	struct id_list *l = arg;
	size_t n = strlen(l->s);
	snprintf(l->s + n, sizeof l->s - n, "%s%.*s", n ? "," : "", (int)len, id);
	return 0;
}

/* Two nodes looking for orphans at once share them out: the rows one
 * transaction listed (and so locked) are skipped by the other, which
 * neither waits nor claims them twice. */
START_TEST(claimable_skips_rows_another_node_holds)
{
	store *s1 = open_ok(), *s2 = open_ok();
	conv_create(s1, "a");
	conv_create(s1, "b");
	conv_create(s1, "c");
	store_txn *x, *y;
	struct id_list l1 = { "" }, l2 = { "" };
	uint64_t g;
	ck_assert_int_eq(store_txn_begin(s1, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_convs_claimable(x, 0, 2, add_id, &l1), 0);
	ck_assert_str_eq(l1.s, "a,b");
	int64_t t0 = mono_ms();
	ck_assert_int_eq(store_txn_begin(s2, STORE_WRITE, &y), 0);
	ck_assert_int_eq(store_convs_claimable(y, 0, 0, add_id, &l2), 0);
	ck_assert_str_eq(l2.s, "c");
	ck_assert_int_eq(store_conv_claim(y, "c", "n2", 60000, &g), 0);
	ck_assert_int_eq(store_txn_commit(y), 0);
	ck_assert_int_lt(mono_ms() - t0, 5000); /* it did not wait for x */
	ck_assert_int_eq(store_conv_claim(x, "a", "n1", 60000, &g), 0);
	ck_assert_int_eq(store_conv_claim(x, "b", "n1", 60000, &g), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.convs WHERE owner = 'n1' AND id IN ('a', 'b')", schema);
	ck_assert_int_eq(admin_sql(sql), 2);
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.convs WHERE owner = 'n2' AND id = 'c'", schema);
	ck_assert_int_eq(admin_sql(sql), 1);
	store_close(s2);
	store_close(s1);
}
END_TEST

/* A stale node's heartbeat that meets a claim in progress waits for it,
 * then renews nothing it lost. */
START_TEST(beat_behind_a_claim_renews_nothing_lost)
{
	store *s1 = open_ok();
	conv_create(s1, "a");
	store_txn *x;
	uint64_t g, n = 99;
	ck_assert_int_eq(store_txn_begin(s1, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_claim(x, "a", "stale", 1, &g), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	usleep(5000); /* the 1 ms lease has expired (store clock: real time) */
	ck_assert_int_eq(store_txn_begin(s1, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_claim(x, "a", "fresh", 60000, &g), 0);
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		store *s2 = NULL;
		store_txn *y;
		uint64_t k = 99;
		if (store_open(&s2, target, NULL) || store_txn_begin(s2, STORE_WRITE, &y) ||
		    store_node_beat(y, "stale", 60000, &k) || store_txn_commit(y))
			_exit(1);
		(void)!write(p[1], &k, sizeof k);
		store_close(s2);
		_exit(0);
	}
	close(p[1]);
	int64_t dl = deadline_in(10000);
	while (lock_waiters() < 1) {
		ck_assert_msg(mono_ms() < dl, "the stale node's beat never waited for the row");
		usleep(10000);
	}
	ck_assert_int_eq(store_txn_commit(x), 0);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(read(p[0], &n, sizeof n), (ssize_t)sizeof n);
	close(p[0]);
	ck_assert_uint_eq(n, 0);
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.convs WHERE owner = 'fresh' AND lease = %llu", schema,
		 (unsigned long long)g);
	ck_assert_int_eq(admin_sql(sql), 1);
	store_close(s1);
}
END_TEST

static int add_exp(void *arg, const struct store_expiry *e)
{
	return add_id(arg, e->tool_call_id.ptr, e->tool_call_id.len);
}

/* Nodes firing deadlines at once share them out: a deadline whose
 * conversation another transaction holds (its worker writing, or another
 * node firing it) is skipped, not waited for, and comes again after. */
START_TEST(expiries_claim_skips_held_conversations)
{
	store *s1 = open_ok(), *s2 = open_ok();
	conv_create(s1, "a");
	conv_create(s1, "b");
	store_txn *x, *y;
	struct store_tool_call_in ta = { "ta", "approve", STORE_EXEC_HUMAN, { "\x80", 1 }, { 0 } };
	struct store_tool_call_in tb = { "tb", "approve", STORE_EXEC_HUMAN, { "\x80", 1 }, { 0 } };
	ck_assert_int_eq(store_txn_begin(s1, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_tool_call_upsert(x, "a", &ta), 0);
	ck_assert_int_eq(store_tool_call_upsert(x, "b", &tb), 0);
	ck_assert_int_eq(store_expiry_schedule(x, "ta", 1000), 0);
	ck_assert_int_eq(store_expiry_schedule(x, "tb", 2000), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	/* a's worker is in a write transaction */
	ck_assert_int_eq(store_txn_begin(s1, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_check(x, "a", 0), 0);
	struct id_list l = { "" };
	int64_t t0 = mono_ms();
	ck_assert_int_eq(store_txn_begin(s2, STORE_WRITE, &y), 0);
	ck_assert_int_eq(store_expiries_claim(y, 5000, 0, add_exp, &l), 0);
	ck_assert_str_eq(l.s, "tb");
	ck_assert_int_eq(store_tool_call_resolve(y, "tb", STORE_TC_EXPIRED, (store_bytes){ 0 }, NULL), 0);
	ck_assert_int_eq(store_txn_commit(y), 0);
	ck_assert_int_lt(mono_ms() - t0, 5000);
	ck_assert_int_eq(store_txn_commit(x), 0);
	l.s[0] = 0;
	ck_assert_int_eq(store_txn_begin(s2, STORE_WRITE, &y), 0);
	ck_assert_int_eq(store_expiries_claim(y, 5000, 0, add_exp, &l), 0);
	ck_assert_str_eq(l.s, "ta");
	store_txn_abort(y);
	store_close(s2);
	store_close(s1);
}
END_TEST

/* Wait (bounded) until fd is readable, then collect what arrived. */
static int heard(store *s, int fd, struct id_list *l, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int64_t dl = deadline_in(ms);
	while (mono_ms() < dl) {
		int n = poll(&p, 1, 50);
		if (n > 0) {
			int err = store_notified(s, add_id, l);
			if (err || l->s[0])
				return err;
		}
	}
	return 0;
}

static void notify_commit(store *s, const char *node, const char *conv, int commit)
{
	store_txn *x;
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_notify(x, node, conv), 0);
	ck_assert_int_eq(store_notify(x, node, conv), 0); /* arrives once */
	if (commit)
		ck_assert_int_eq(store_txn_commit(x), 0);
	else
		store_txn_abort(x);
}

/* A wakeup reaches the node it names, at the commit and only then; a lost
 * listening connection says so, and listening again works. */
START_TEST(notify_reaches_its_node_at_commit)
{
	store *s1 = open_ok(), *s2 = open_ok();
	int fd = -1, fd2 = -1;
	ck_assert_int_eq(store_listen(s1, "n1", &fd), 0);
	ck_assert_int_ge(fd, 0);
	struct id_list l = { "" };
	ck_assert_int_eq(store_notified(s1, add_id, &l), 0); /* nothing yet */
	ck_assert_str_eq(l.s, "");
	notify_commit(s2, "n1", "aborted", 0);
	notify_commit(s2, "n2", "other-node", 1);
	notify_commit(s2, "n1", "c1", 1);
	ck_assert_int_eq(heard(s1, fd, &l, 5000), 0);
	/* the aborted one and the other node's never come: c1 is the first */
	ck_assert_str_eq(l.s, "c1");
	/* the listener's connection goes: it is told, and listens again */
	admin_sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'");
	int64_t dl = deadline_in(5000);
	int err = 0;
	while (!err && mono_ms() < dl) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) > 0)
			err = store_notified(s1, add_id, &l);
	}
	ck_assert_int_eq(err, -ECONNRESET);
	ck_assert_int_eq(store_notified(s1, add_id, &l), STORE_E_INVAL);
	ck_assert_int_eq(store_listen(s1, "n1", &fd2), 0);
	l.s[0] = 0;
	notify_commit(s2, "n1", "c2", 1);
	ck_assert_int_eq(heard(s1, fd2, &l, 5000), 0);
	ck_assert_str_eq(l.s, "c2");
	store_close(s2);
	store_close(s1);
}
END_TEST

/* A message reaches its node whole, beside a wakeup, at the commit; the
 * listener tells them apart by the space only a message holds. */
START_TEST(notify_msg_reaches_its_node_whole)
{
	store *s1 = open_ok(), *s2 = open_ok();
	int fd = -1;
	ck_assert_int_eq(store_listen(s1, "n1", &fd), 0);
	store_txn *x;
	ck_assert_int_eq(store_txn_begin(s2, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_notify_msg(x, "n1", "ask 1 n2 kill c1 9"), 0);
	ck_assert_int_eq(store_notify_msg(x, "n1", "ans 7 {\"pid\":12,\"a\":\"x y\"}"), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	struct id_list l = { "" };
	int64_t dl = deadline_in(5000);
	while (mono_ms() < dl && !strchr(l.s, ',')) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) > 0)
			ck_assert_int_eq(store_notified(s1, add_id, &l), 0);
	}
	ck_assert_str_eq(l.s, "ask 1 n2 kill c1 9,ans 7 {\"pid\":12,\"a\":\"x y\"}");
	store_close(s2);
	store_close(s1);
}
END_TEST

/* The server drops the store's connections: a transaction open then fails
 * (and says so at commit), the next begins on a new connection. */
START_TEST(lost_connection_fails_the_txn_not_the_handle)
{
	store *s = open_ok();
	conv_create(s, "c");
	store_txn *x;
	uint64_t seq;
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(append(x, "c", "lost", &seq), 0);
	ck_assert_uint_eq(latest(s, "c"), 0); /* a read beside it leaves a spare connection */
	ck_assert_int_ge(admin_sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
				   "WHERE datname = 'conformance' AND pid <> pg_backend_pid()"),
			 1);
	ck_assert_int_lt(append(x, "c", "after", &seq), 0);
	ck_assert_int_lt(store_txn_commit(x), 0);
	/* a spare connection died too: the begin finds out and reconnects */
	ck_assert_uint_eq(latest(s, "c"), 0);
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(append(x, "c", "again", &seq), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	ck_assert_uint_eq(latest(s, "c"), 1);
	store_close(s);
}
END_TEST

/* ---- a proxy that loses a COMMIT ---------------------------------------- */

/* Between a store and the test cluster's socket, relaying bytes both ways.
 * Armed, at the next COMMIT a client sends it drops both connections,
 * after passing the COMMIT on (PROXY_MADE: the server makes it, its answer
 * is lost) or before (PROXY_NOT_MADE: the server never reads it). */
enum { PROXY_OFF, PROXY_MADE, PROXY_NOT_MADE };
static struct {
	int lfd;
	char dir[64];
	struct sockaddr_un up;
	volatile int mode;
	volatile int fired;
	volatile int refuse; /* new connections are closed at once: the server cannot be asked */
} px;

static int relay(int from, int to)
{
	char buf[65536];
	ssize_t n = read(from, buf, sizeof buf);
	if (n <= 0)
		return -1;
	int mode = px.mode;
	/* A simple query's text ends in its NUL: "COMMIT\0". */
	if (mode != PROXY_OFF && memmem(buf, (size_t)n, "COMMIT", 7)) {
		if (mode == PROXY_MADE && write(to, buf, (size_t)n) != n)
			return -1;
		px.mode = PROXY_OFF;
		px.fired++;
		return -1;
	}
	return write(to, buf, (size_t)n) == n ? 0 : -1;
}

static void *proxy_conn(void *arg)
{
	int c = (int)(intptr_t)arg, u = px.refuse ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (u >= 0 && connect(u, (struct sockaddr *)&px.up, sizeof px.up) == 0) {
		struct pollfd p[2] = { { .fd = c, .events = POLLIN }, { .fd = u, .events = POLLIN } };
		while (poll(p, 2, -1) > 0) {
			if ((p[0].revents && relay(c, u)) || (p[1].revents && p[1].fd >= 0 && relay(u, c)))
				break;
		}
	}
	if (u >= 0)
		close(u);
	close(c);
	return NULL;
}

static void *proxy_accept(void *arg)
{
	(void)arg;
	int c;
	while ((c = accept4(px.lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		pthread_t t;
		ck_assert_int_eq(pthread_create(&t, NULL, proxy_conn, (void *)(intptr_t)c), 0);
		pthread_detach(t);
	}
	return NULL;
}

/* Start the proxy; the conninfo of the store's schema through it. */
static void proxy_start(char *via, size_t cap)
{
	char host[256] = "", port[16] = "5432";
	const char *ci = getenv("AGENTD_TEST_PG"), *h = strstr(ci, "host="), *p = strstr(ci, "port=");
	ck_assert_ptr_nonnull(h);
	sscanf(h, "host=%255s", host);
	if (p)
		sscanf(p, "port=%15s", port);
	memset(&px, 0, sizeof px);
	px.up.sun_family = AF_UNIX;
	int n = snprintf(px.up.sun_path, sizeof px.up.sun_path, "%s/.s.PGSQL.%s", host, port);
	ck_assert(n > 0 && (size_t)n < sizeof px.up.sun_path); /* the server's socket path fits */
	snprintf(px.dir, sizeof px.dir, "/tmp/agentd-pgpx-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(px.dir));
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	n = snprintf(a.sun_path, sizeof a.sun_path, "%s/.s.PGSQL.%s", px.dir, port);
	ck_assert(n > 0 && (size_t)n < sizeof a.sun_path);
	px.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(px.lfd, (struct sockaddr *)&a, sizeof a), 0);
	ck_assert_int_eq(listen(px.lfd, 16), 0);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, proxy_accept, NULL), 0);
	pthread_detach(t);
	snprintf(via, cap, "%s host=%s", target, px.dir); /* the later host wins */
}

static void proxy_stop(void)
{
	char path[128];
	snprintf(path, sizeof path, "%s/.s.PGSQL.5432", px.dir);
	unlink(path);
	rmdir(px.dir);
}


/* Every commit is durable when it returns, a lazy one too: nothing waits
 * for a later flush on PostgreSQL (txn ids are 0, store_flush does nothing),
 * so agentd acknowledges right after it. The server's WAL is flushed past
 * the commit (fsync off in the test cluster skips the disk's flush, not the
 * flush pointer); a commit with synchronous_commit off would leave it for
 * the WAL writer, up to 200 ms later. */
START_TEST(lazy_commit_is_flushed_when_it_returns)
{
	store *s = open_ok();
	conv_create(s, "c");
	for (int i = 0; i < 20; i++) {
		long before = admin_sql("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint");
		store_txn *x;
		uint64_t seq;
		char eid[16];
		snprintf(eid, sizeof eid, "e%d", i);
		ck_assert_int_eq(store_txn_begin(s, STORE_WRITE_LAZY, &x), 0);
		ck_assert_int_eq(append(x, "c", eid, &seq), 0);
		ck_assert_int_eq(store_txn_commit(x), 0);
		long flushed = admin_sql("SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint");
		ck_assert_msg(flushed > before, "commit %d: WAL flushed to %ld, not past %ld where it began", i, flushed,
			      before);
		ck_assert_int_eq(store_flush(s), 0);
	}
	store_close(s);
}
END_TEST

/* ---- event inserts sent ahead (pipeline mode) ---------------------------- */

/* An event of the given type without an event_id: its insert is sent ahead. */
static int append_ahead(store_txn *x, const char *conv, const char *type, uint64_t *seq)
{
	msgpack_sbuffer sb;
	struct store_event_in ev = { type, mstr(&sb, type), NULL };
	int err = store_event_append(x, conv, &ev, seq, NULL);
	msgpack_sbuffer_destroy(&sb);
	return err;
}

/* The server refuses an insert sent ahead (here a check the test adds to
 * the events table): the append was told 0, the next operation that waits
 * for an answer, or the commit, says it, nothing of the txn is written,
 * and the handle goes on. */
START_TEST(append_sent_ahead_fails_at_the_next_answer)
{
	store *s = open_ok();
	conv_create(s, "c");
	char sql[160];
	snprintf(sql, sizeof sql, "ALTER TABLE %s.events ADD CONSTRAINT no_boom CHECK (type <> 'boom')", schema);
	admin_sql(sql);
	store_txn *x;
	uint64_t seq = 0, last = 0;
	/* at the next operation */
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(append_ahead(x, "c", "user_msg", &seq), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(append_ahead(x, "c", "boom", &seq), 0);
	ck_assert_uint_eq(seq, 2);
	ck_assert_int_eq(store_event_latest_seq(x, "c", &last), -EIO);
	ck_assert_int_eq(append_ahead(x, "c", "user_msg", &seq), -EIO); /* poisoned */
	ck_assert_int_eq(store_txn_commit(x), -EIO);
	ck_assert_uint_eq(latest(s, "c"), 0);
	/* at the commit */
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(append_ahead(x, "c", "user_msg", &seq), 0);
	ck_assert_int_eq(append_ahead(x, "c", "boom", &seq), 0);
	ck_assert_int_eq(store_txn_commit(x), -EIO);
	ck_assert_uint_eq(latest(s, "c"), 0);
	/* aborted with inserts sent ahead */
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	ck_assert_int_eq(append_ahead(x, "c", "user_msg", &seq), 0);
	store_txn_abort(x);
	ck_assert_uint_eq(latest(s, "c"), 0);
	/* the handle goes on, its connections usable */
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
		ck_assert_int_eq(append_ahead(x, "c", "user_msg", &seq), 0);
		ck_assert_int_eq(append_ahead(x, "c", "user_msg", &seq), 0);
		ck_assert_int_eq(append(x, "c", i == 0 ? "a" : i == 1 ? "b" : "c", &seq), 0); /* waits for its answer */
		ck_assert_uint_eq(seq, 3 * (uint64_t)i + 3);
		ck_assert_int_eq(store_txn_commit(x), 0);
	}
	ck_assert_uint_eq(latest(s, "c"), 9);
	store_close(s);
}
END_TEST

/* Many inserts sent ahead in one txn, small and large: each seq in order,
 * all of them committed whole. */
START_TEST(many_appends_sent_ahead_commit_in_order)
{
	store *s = open_ok();
	conv_create(s, "c");
	store_txn *x;
	uint64_t seq = 0;
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	for (uint64_t i = 1; i <= 1000; i++) {
		ck_assert_int_eq(append_ahead(x, "c", "user_msg", &seq), 0);
		ck_assert_uint_eq(seq, i);
	}
	ck_assert_int_eq(store_txn_commit(x), 0);
	ck_assert_uint_eq(latest(s, "c"), 1000);
	char sql[160];
	snprintf(sql, sizeof sql, "SELECT count(DISTINCT seq) FROM %s.events WHERE conv = 'c' AND seq BETWEEN 1 AND 1000",
		 schema);
	ck_assert_int_eq(admin_sql(sql), 1000);
	/* Large ones, interleaved over two conversations: more than one
	 * insert's worth is gathered (8 MiB), the largest go alone. */
	conv_create(s, "d");
	char *big = malloc(1600000);
	ck_assert_ptr_nonnull(big);
	memset(big, 'x', 1600000);
	long bytes = 0;
	ck_assert_int_eq(store_txn_begin(s, STORE_WRITE, &x), 0);
	for (int i = 0; i < 24; i++) {
		size_t len = i == 20 ? 1500000 : i % 5 == 4 ? 10 : 900000;
		msgpack_sbuffer sb;
		msgpack_packer pk;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_str_with_body(&pk, big, len);
		bytes += (long)sb.size;
		struct store_event_in ev = { "user_msg", { sb.data, sb.size }, NULL };
		ck_assert_int_eq(store_event_append(x, i % 2 ? "d" : "c", &ev, &seq, NULL), 0);
		ck_assert_uint_eq(seq, i % 2 ? (uint64_t)i / 2 + 1 : 1000 + (uint64_t)i / 2 + 1);
		msgpack_sbuffer_destroy(&sb);
	}
	ck_assert_int_eq(store_txn_commit(x), 0);
	free(big);
	ck_assert_uint_eq(latest(s, "c"), 1012);
	ck_assert_uint_eq(latest(s, "d"), 12);
	snprintf(sql, sizeof sql, "SELECT sum(length(content)) FROM %s.events WHERE seq > 1000 OR conv = 'd'", schema);
	ck_assert_int_eq(admin_sql(sql), bytes);
	store_close(s);
}
END_TEST

/* A store s with conversation "c", and p, the same store opened through the
 * proxy; proxied_close undoes both. */
static void proxied_open(store **s, store **p)
{
	*s = open_ok();
	*p = NULL;
	conv_create(*s, "c");
	char via[1024];
	proxy_start(via, sizeof via);
	ck_assert_int_eq(store_open(p, via, NULL), 0);
}

static void proxied_close(store *s, store *p)
{
	store_close(p);
	store_close(s);
	proxy_stop();
}

/* The connection goes during COMMIT: the commit asks the server whether it
 * was made (on a new connection) and says so, 0 or -ECONNRESET, never
 * "failed" for a transaction that is in the log. add appends the k-th
 * event to "c": with an event_id, or without (sent ahead in pipeline mode,
 * its COMMIT behind it). */
static void lost_commit_case(int (*add)(store_txn *x, int k, uint64_t *seq))
{
	store *s, *p;
	proxied_open(&s, &p);
	store_txn *x;
	uint64_t seq;
	ck_assert_int_eq(store_txn_begin(p, STORE_WRITE, &x), 0);
	ck_assert_int_eq(add(x, 1, &seq), 0);
	ck_assert_int_eq(add(x, 2, &seq), 0);
	px.mode = PROXY_MADE;
	ck_assert_int_eq(store_txn_commit(x), 0);
	ck_assert_int_eq(px.fired, 1); /* its answer was lost */
	ck_assert_uint_eq(latest(s, "c"), 2);
	ck_assert_int_eq(store_txn_begin(p, STORE_WRITE, &x), 0);
	ck_assert_int_eq(add(x, 3, &seq), 0);
	px.mode = PROXY_NOT_MADE;
	ck_assert_int_eq(store_txn_commit(x), -ECONNRESET);
	ck_assert_int_eq(px.fired, 2);
	ck_assert_uint_eq(latest(s, "c"), 2);
	/* the handle goes on */
	ck_assert_int_eq(store_txn_begin(p, STORE_WRITE, &x), 0);
	ck_assert_int_eq(add(x, 4, &seq), 0);
	ck_assert_uint_eq(seq, 3);
	ck_assert_int_eq(store_txn_commit(x), 0);
	ck_assert_uint_eq(latest(s, "c"), 3);
	proxied_close(s, p);
}

static int add_with_id(store_txn *x, int k, uint64_t *seq)
{
	char eid[16];
	snprintf(eid, sizeof eid, "e%d", k);
	return append(x, "c", eid, seq);
}

static int add_ahead(store_txn *x, int k, uint64_t *seq)
{
	(void)k;
	return append_ahead(x, "c", "user_msg", seq);
}

/* The answer is lost and the server cannot be asked (every new connection
 * fails): the commit says it does not know, STORE_E_INDOUBT, after its
 * few seconds of asking; the transaction was in fact made. */
START_TEST(lost_commit_answer_that_cannot_be_learned_is_in_doubt)
{
	store *s, *p;
	proxied_open(&s, &p);
	store_txn *x;
	uint64_t seq;
	ck_assert_int_eq(store_txn_begin(p, STORE_WRITE, &x), 0);
	ck_assert_int_eq(add_with_id(x, 1, &seq), 0);
	px.mode = PROXY_MADE;
	px.refuse = 1;
	ck_assert_int_eq(store_txn_commit(x), STORE_E_INDOUBT);
	ck_assert_int_eq(px.fired, 1);
	ck_assert_uint_eq(latest(s, "c"), 1);
	px.refuse = 0;
	proxied_close(s, p);
}
END_TEST

START_TEST(lost_commit_answer_is_learned)
{
	lost_commit_case(add_with_id);
}
END_TEST

START_TEST(lost_commit_answer_after_appends_sent_ahead)
{
	lost_commit_case(add_ahead);
}
END_TEST


Suite *make_store_pg_suite(void)
{
	Suite *s = suite_create("store_pg");
	TCase *tc = tcase_create("dispatch");
	tcase_add_test(tc, target_chooses_the_backend);
	suite_add_tcase(s, tc);
	if (getenv("AGENTD_TEST_PG")) {
		tc = tcase_create("server");
		tcase_add_checked_fixture(tc, setup, teardown);
		tcase_set_timeout(tc, 60);
		tcase_add_test(tc, newer_schema_is_refused);
		tcase_add_test(tc, version_1_is_migrated);
		tcase_add_test(tc, read_only_open_creates_nothing);
		tcase_add_test(tc, lease_check_holds_the_row_until_commit);
		tcase_add_test(tc, resolver_and_worker_queue_without_deadlock);
		tcase_add_test(tc, killed_writer_releases_the_row);
		tcase_add_test(tc, concurrent_appenders_get_gapless_seqs);
		tcase_add_test(tc, lost_connection_fails_the_txn_not_the_handle);
		tcase_add_test(tc, lost_commit_answer_is_learned);
		tcase_add_test(tc, lost_commit_answer_that_cannot_be_learned_is_in_doubt);
		tcase_add_test(tc, claimable_skips_rows_another_node_holds);
		tcase_add_test(tc, beat_behind_a_claim_renews_nothing_lost);
		tcase_add_test(tc, notify_reaches_its_node_at_commit);
		tcase_add_test(tc, notify_msg_reaches_its_node_whole);
		tcase_add_test(tc, expiries_claim_skips_held_conversations);
		tcase_add_test(tc, lazy_commit_is_flushed_when_it_returns);
		tcase_add_test(tc, append_sent_ahead_fails_at_the_next_answer);
		tcase_add_test(tc, many_appends_sent_ahead_commit_in_order);
		tcase_add_test(tc, lost_commit_answer_after_appends_sent_ahead);
		suite_add_tcase(s, tc);
	}
	return s;
}
