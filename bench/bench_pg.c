/*
 * bench_pg: agentd on PostgreSQL beside its peers, in one run
 * (docs/benchmarks.md, "bench_pg").
 *
 * send    durable `send` throughput with 50 clients (a closed loop: each
 *         client sends and waits for its reply), five rows side by side,
 *         their order rotating from round to round:
 *           - a bare libpq loop: 50 connections in 50 threads, each inserting
 *             one event row per send into a table laid out as agentd's
 *             `events` (prepared INSERT, autocommit: one round trip and one
 *             commit per send), with synchronous_commit = on: the most a
 *             client of this database could get doing the same inserts;
 *           - agentd on LMDB (sync = full), one node;
 *           - agentd on PostgreSQL, one node;
 *           - agentd on PostgreSQL, three nodes sharing the database, each
 *             client on one of them (client i on node i mod 3), sending to a
 *             conversation that node owns;
 *           - the same three nodes and conversations, each client on the
 *             next node instead: every send is committed by a node that does
 *             not own its conversation, and wakes the owner (NOTIFY).
 *         Every client sends to its own conversation, whose worker sits in a
 *         model call that never returns (a `sleep`), so what is measured is
 *         the send's durable commit and reply, the work the bare loop does,
 *         with no turns committing beside it.
 *         Counted per send, from the server: statements (pg_stat_statements)
 *         and round trips (the statements but agentd's event inserts, which
 *         store_pg sends ahead in pipeline mode, their answers read with the
 *         next statement's; a begin's two statements take one), write
 *         transactions (transaction ids assigned: pg_current_snapshot()'s
 *         xmax; every commit that writes takes one, a read-only one takes
 *         none and flushes nothing) and WAL bytes; from agentd's metrics,
 *         sends per group commit; and where the CPU went (agentd's
 *         processes, the server's, this program's, and the machine's idle
 *         share: 2 cores are shared by all of them).
 * expiry  lateness of human-tool deadlines: n conversations ask the echo
 *         model for a human tool, one every -i ms, and the calls expire while
 *         their workers wait; lateness is the `resolution` event's
 *         inserted_at minus the call's deadline (ms, as the store stamps
 *         them); the deadline is the pending row's, or, for a call that
 *         expired before its row was read, its inserted_at plus the expiry. agentd on LMDB and on PostgreSQL (one node), the order
 *         alternating from round to round.
 *
 * The database: a throwaway cluster started with `tests/pg/cluster.sh start
 * DIR durable` in the scratch directory (fsync, synchronous_commit and
 * full_page_writes on, pg_stat_statements preloaded), stopped at the end; or
 * AGENTD_BENCH_PG, the conninfo prefix of a running cluster (which must
 * preload pg_stat_statements; its settings are printed as found).
 *
 * Usage: bench_pg [-d DIR] [-r ROUNDS] [-n SENDS] [-t TIMERS] [-i MS] [-o send|expiry] [-q] [-k] [-v]
 *   -d DIR     where the scratch directory goes (default "."): the disk to measure
 *   -r ROUNDS  rounds of the send phase (default 5, at most 15); the expiry
 *              phase runs half as many (at least 1)
 *
 * Each phase takes about a minute on an idle 2-core machine (more on a busy
 * one); -r, -n and -t make them longer.
 *   -n SENDS   sends per system per round (default 3000; the row via a
 *              non-owner node gets a fifth as many)
 *   -t TIMERS  expiry timers per backend per round (default 100)
 *   -i MS      the expiry phase's pace (default 20)
 *   -o PHASE   only this phase
 *   -q         quick: 3 rounds of 1500 sends, 1 round of 50 timers
 *   -k         keep the scratch directory (the logs, the cluster's too)
 *   -v         print every run's figures (on stderr)
 */
#include "bench/bench.h"
#include "bench/harness.h"

#include <errno.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AGENTD_SRC
#error "AGENTD_SRC: the source directory (bench/CMakeLists.txt)"
#endif

#define CLIENTS 50
#define NODES_MAX 8

static int nrounds = 5, quick, keep, verbose, ntimers = 100, pace_ms = 20;
static long nsends = 3000;
static const char *only;
static char scratch[PATH_MAX], bindir[PATH_MAX], cluster_dir[PATH_MAX], prefix[512];
static int own_cluster;
static pid_t groups[NODES_MAX * 4];
static int ngroups;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	if (!verbose)
		return;
	va_start(ap, fmt);
	fputs("bench_pg: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- the cluster ------------------------------------------------------ */

static void cluster_stop(void)
{
	char cmd[PATH_MAX * 2];
	if (!own_cluster)
		return;
	own_cluster = 0;
	snprintf(cmd, sizeof cmd, "%s/tests/pg/cluster.sh stop %s", AGENTD_SRC, cluster_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_pg: stopping the cluster in %s failed\n", cluster_dir);
}

static void notice_quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static PGconn *pg_connect(const char *db)
{
	char ci[700];
	snprintf(ci, sizeof ci, "%s dbname=%s", prefix, db);
	PGconn *c = PQconnectdb(ci);
	if (PQstatus(c) != CONNECTION_OK)
		bench_fail("cannot connect to %s: %s", ci, PQerrorMessage(c));
	return c;
}

static void pg_exec(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		bench_fail("%s: %s", sql, PQerrorMessage(c));
	PQclear(r);
}

/* The first column of the first row of a query with at most one text
 * parameter, as text into buf. */
static void pg_text(PGconn *c, const char *sql, const char *param, char *buf, size_t cap)
{
	PGresult *r = PQexecParams(c, sql, param ? 1 : 0, NULL, param ? &param : NULL, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) < 1)
		bench_fail("%s: %s", sql, PQerrorMessage(c));
	snprintf(buf, cap, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
}

static double pg_num(PGconn *c, const char *sql, const char *param)
{
	char buf[64];
	pg_text(c, sql, param, buf, sizeof buf);
	return strtod(buf, NULL);
}

static void db_create(PGconn *admin, const char *db)
{
	char sql[200];
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", db);
	pg_exec(admin, sql);
	snprintf(sql, sizeof sql, "CREATE DATABASE %s", db);
	pg_exec(admin, sql);
}

/* What the server counted: statements in database db, and of those agentd's
 * event inserts sent ahead (store_pg gathers events without an event_id
 * into one insert, sent in pipeline mode: its answer comes back with the
 * next statement's, not a round trip of its own; the bench's sends have
 * none), transaction ids assigned and WAL bytes written in the whole
 * cluster. */
struct pgcount {
	double stmts, ahead, xids, wal;
};

static struct pgcount pg_count(PGconn *admin, const char *db)
{
	struct pgcount k;
	k.stmts = pg_num(admin, "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d "
				"ON d.oid = s.dbid WHERE d.datname = $1", db);
	k.ahead = pg_num(admin, "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d "
				"ON d.oid = s.dbid WHERE d.datname = $1 AND (s.query LIKE 'WITH i AS (INSERT INTO events %' "
				"OR s.query LIKE 'WITH v AS (SELECT * FROM unnest(%')", db);
	k.xids = pg_num(admin, "SELECT pg_snapshot_xmax(pg_current_snapshot())", NULL);
	k.wal = pg_num(admin, "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn", NULL);
	return k;
}

/* ---- CPU -------------------------------------------------------------- */

/* The cluster's postmaster: the parent of the admin connection's backend
 * (the server may be on this machine only; other clusters here, such as
 * other tests', are not counted). */
static pid_t postmaster;

static pid_t parent_of(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	int ppid = 0;
	if (!p || sscanf(p + 2, "%*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* CPU seconds of the cluster: its postmaster (whose count includes the
 * backends it reaped) and every live child of it. 0 when the server is
 * not on this machine. */
static double cpu_postgres(void)
{
	if (postmaster <= 0)
		return 0;
	double total = harness_cpu_seconds(postmaster);
	char path[100];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)postmaster, (int)postmaster);
	FILE *f = fopen(path, "re");
	int child;
	while (f && fscanf(f, "%d", &child) == 1) {
		double c = harness_cpu_seconds(child);
		total += c > 0 ? c : 0;
	}
	if (f)
		fclose(f);
	return total > 0 ? total : 0;
}

static double cpu_self(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

/* The machine's idle and total jiffies, from /proc/stat's first line. */
static void cpu_machine(double *idle, double *total)
{
	FILE *f = fopen("/proc/stat", "re");
	unsigned long long v[8] = { 0 };
	if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
			 &v[6], &v[7]) != 8)
		bench_fail("cannot read /proc/stat");
	fclose(f);
	*idle = (double)(v[3] + v[4]);
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += (double)v[i];
}

/* ---- agentd nodes ----------------------------------------------------- */

struct node {
	pid_t pid;
	char dir[PATH_MAX], sock[PATH_MAX], log[PATH_MAX];
};

static void nodes_kill(void)
{
	for (int i = 0; i < ngroups; i++)
		kill(-groups[i], SIGKILL);
	for (int i = 0; i < ngroups; i++)
		harness_reap(groups[i], 5000);
	ngroups = 0;
}

static void ungroup(pid_t pid)
{
	for (int i = 0; i < ngroups; i++)
		if (groups[i] == pid) {
			groups[i] = groups[--ngroups];
			return;
		}
}

/* agentd on an LMDB data directory (store NULL: DIR/data) or on a
 * PostgreSQL database, in its own session (setsid), so that stopping its
 * group takes its workers and their models too. */
static void node_start(struct node *n, const char *name, const char *db, const char *config)
{
	char agentd[PATH_MAX], cfg[PATH_MAX], data[PATH_MAX], target[700];
	harness_path(n->dir, sizeof n->dir, "%s/%s", scratch, name);
	bench_mkdir(n->dir);
	harness_path(n->sock, sizeof n->sock, "%s/agentd.sock", n->dir);
	harness_path(cfg, sizeof cfg, "%s/agentd.ini", n->dir);
	harness_path(n->log, sizeof n->log, "%s/agentd.log", n->dir);
	harness_path(agentd, sizeof agentd, "%s/agentd", bindir);
	FILE *f = fopen(cfg, "we");
	if (!f || fputs(config, f) < 0 || fclose(f) != 0)
		bench_die(cfg, -errno);
	char *argv[16];
	int k = 0;
	argv[k++] = "/usr/bin/setsid";
	argv[k++] = agentd;
	if (db) {
		snprintf(target, sizeof target, "%s dbname=%s", prefix, db);
		argv[k++] = "--store";
		argv[k++] = target;
		argv[k++] = "--run-dir";
		argv[k++] = n->dir;
	} else {
		harness_path(data, sizeof data, "%s/data", n->dir);
		bench_mkdir(data);
		argv[k++] = "--data";
		argv[k++] = data;
		argv[k++] = "--socket";
		argv[k++] = n->sock;
	}
	argv[k++] = "--config";
	argv[k++] = cfg;
	argv[k] = NULL;
	unlink(n->sock);
	n->pid = harness_spawn(argv, n->log);
	if (ngroups < (int)(sizeof groups / sizeof groups[0]))
		groups[ngroups++] = n->pid;
	ctl_conn *c;
	if (harness_connect(&c, n->sock, 30000) != 0)
		bench_fail("agentd did not start listening on %s: see %s", n->sock, n->log);
	json_decref(harness_ok(c, json_pack("{ss}", "op", "ping"), "ping"));
	ctl_close(c);
}

static void node_stop(struct node *n)
{
	if (n->pid <= 0)
		return;
	kill(-n->pid, SIGKILL);
	harness_reap(n->pid, 10000);
	ungroup(n->pid);
	n->pid = 0;
}

/* CPU seconds of agentd and its reaped workers, and of the live workers
 * (each a child of agentd). */
static double cpu_agentd(const struct node *n)
{
	double t = harness_cpu_seconds(n->pid);
	char path[100];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)n->pid, (int)n->pid);
	FILE *f = fopen(path, "re");
	int child;
	while (f && fscanf(f, "%d", &child) == 1) {
		double c = harness_cpu_seconds(child);
		t += c > 0 ? c : 0;
	}
	if (f)
		fclose(f);
	return t;
}

/* The value of one counter in the metrics op's Prometheus text. */
static double node_counter(const struct node *n, const char *name)
{
	ctl_conn *c;
	if (harness_connect(&c, n->sock, 5000))
		bench_fail("cannot connect to agentd on %s", n->sock);
	json_t *r = harness_ok(c, json_pack("{ss}", "op", "metrics"), "metrics");
	const char *text = json_string_value(json_object_get(r, "text"));
	double v = 0;
	char key[128];
	snprintf(key, sizeof key, "\n%s ", name);
	const char *p = text ? strstr(text, key) : NULL;
	if (p)
		v = strtod(p + strlen(key), NULL);
	json_decref(r);
	ctl_close(c);
	return v;
}

/* ---- the send phase --------------------------------------------------- */

/* S_PG3X: the three nodes of S_PG3 and their conversations, each client on
 * the node after its conversation's owner: every send crosses nodes. */
enum { S_BARE, S_LMDB, S_PG1, S_PG3, S_PG3X, NSYS };
static const char *const sys_name[NSYS] = { "bare libpq loop, 50 connections", "agentd on LMDB, 1 node",
					    "agentd on PostgreSQL, 1 node", "agentd on PostgreSQL, 3 nodes",
					    "  the same, via a non-owner node" };
static const char *const sys_prefix[NSYS] = { "bare", "l", "p1", "p3", "p3" };
static const char *const sys_db[NSYS] = { "bare", NULL, "send1", "send3", "send3" };

struct system {
	struct node nodes[3];
	int nnodes;
	const char *socks[3];
};

static struct system sys[NSYS];

/* One system's run. */
struct sample {
	double rps, p50_ms, p99_ms;
	double stmts, xids, wal;      /* per send (PostgreSQL systems) */
	double trips;                 /* round trips per send: stmts but the inserts sent ahead */
	double group;                 /* sends per group commit (agentd) */
	double flushes;               /* LMDB: flushes per send */
	double cpu_agentd, cpu_pg, cpu_client; /* CPU seconds per send */
	double idle;                  /* the machine's idle share */
	double rtt_us;                /* S_BARE only: one round trip, p50 */
};

static struct sample samples[NSYS][BENCH_MAX_RUNS];
static PGconn *admin;

static size_t send_line(int client, char *buf, size_t cap, void *arg)
{
	const char *pfx = arg;
	return (size_t)snprintf(buf, cap,
				"{\"op\":\"send\",\"conversation\":\"%s-%d\",\"content\":\"hello from client %d\"}\n",
				pfx, client, client);
}

/* The bare loop: one thread per connection. */
struct bare_conn {
	PGconn *c;
	pthread_t th;
	int idx;
	long n, seq;
	double *lat;
	char conv[32];
};

static struct bare_conn bare[CLIENTS];
static pthread_barrier_t bare_start;

static const char bare_insert[] = "INSERT INTO events (conv, seq, type, inserted_at, event_id, content) "
				  "VALUES ($1, $2, 'user_msg', $3, NULL, $4)";

static void *bare_thread(void *arg)
{
	struct bare_conn *b = arg;
	/* The content a send of "hello from client N" stores: the msgpack map
	 * {"text": "..."}. */
	char text[40], content[64], seq[24], at[24];
	int tl = snprintf(text, sizeof text, "hello from client %d", b->idx);
	size_t cl = 0;
	content[cl++] = (char)0x81;
	content[cl++] = (char)0xa4;
	memcpy(content + cl, "text", 4);
	cl += 4;
	content[cl++] = (char)(0xa0 | tl);
	memcpy(content + cl, text, (size_t)tl);
	cl += (size_t)tl;
	pthread_barrier_wait(&bare_start);
	for (long i = 0; i < b->n; i++) {
		snprintf(seq, sizeof seq, "%ld", ++b->seq);
		snprintf(at, sizeof at, "%lld", (long long)(harness_wall_us() / 1000));
		const char *v[4] = { b->conv, seq, at, content };
		int len[4] = { 0, 0, 0, (int)cl };
		int fmt[4] = { 0, 0, 0, 1 };
		double t0 = bench_now();
		PGresult *r = PQexecPrepared(b->c, "ins", 4, v, len, fmt, 0);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			bench_fail("bare insert: %s", PQerrorMessage(b->c));
		PQclear(r);
		b->lat[i] = bench_now() - t0;
	}
	return NULL;
}

static void bare_setup(void)
{
	db_create(admin, "bare");
	PGconn *c = pg_connect("bare");
	/* agentd's events table, as store_pg creates it. */
	pg_exec(c, "CREATE TABLE events (conv text COLLATE \"C\" NOT NULL, seq bigint NOT NULL,"
		   " type text COLLATE \"C\" NOT NULL, inserted_at bigint NOT NULL, event_id bytea,"
		   " content bytea NOT NULL, PRIMARY KEY (conv, seq));"
		   "ALTER TABLE events ALTER COLUMN content SET STORAGE EXTERNAL;"
		   "CREATE UNIQUE INDEX events_event_id ON events (conv, event_id) WHERE event_id IS NOT NULL");
	PQfinish(c);
	for (int i = 0; i < CLIENTS; i++) {
		bare[i].c = pg_connect("bare");
		bare[i].idx = i;
		snprintf(bare[i].conv, sizeof bare[i].conv, "bare-%d", i);
		PGresult *r = PQprepare(bare[i].c, "ins", bare_insert, 0, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			bench_fail("prepare: %s", PQerrorMessage(bare[i].c));
		PQclear(r);
	}
}

static struct harness_load_fig bare_run(long n)
{
	double *lat = malloc((size_t)n * sizeof *lat);
	if (!lat)
		bench_fail("out of memory");
	pthread_barrier_init(&bare_start, NULL, CLIENTS + 1);
	long off = 0;
	for (int i = 0; i < CLIENTS; i++) {
		bare[i].n = n / CLIENTS + (i < n % CLIENTS);
		bare[i].lat = lat + off;
		off += bare[i].n;
		if (pthread_create(&bare[i].th, NULL, bare_thread, &bare[i]))
			bench_fail("pthread_create failed");
	}
	pthread_barrier_wait(&bare_start);
	double t0 = bench_now();
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(bare[i].th, NULL);
	double elapsed = bench_now() - t0;
	pthread_barrier_destroy(&bare_start);
	struct harness_load_fig f = { (double)n / elapsed, harness_pct(lat, (size_t)n, 50) * 1e3,
				  harness_pct(lat, (size_t)n, 99) * 1e3 };
	free(lat);
	return f;
}

static const char send_config[] =
	"; bench_pg: `slow` parks a worker in a model call that never returns.\n"
	"[agentd]\nnode_id = %s\n"
	"[model.slow]\ncommand = /bin/sleep 7200\ntimeout = 3h\nretries = 0\n";

/* Every conversation of system s has its worker in its model call: a send
 * then appends the event and wakes nobody who would write. */
static void wait_parked(int s)
{
	struct system *y = &sys[s];
	for (int i = 0; i < CLIENTS; i++) {
		ctl_conn *c;
		char id[32];
		snprintf(id, sizeof id, "%s-%d", sys_prefix[s], i);
		if (harness_connect(&c, y->socks[i % y->nnodes], 5000))
			bench_fail("cannot connect to %s", y->socks[i % y->nnodes]);
		double until = bench_now() + 60;
		for (;;) {
			json_t *r = harness_ok(c, json_pack("{ssss}", "op", "get", "conversation", id), "get");
			json_t *w = json_object_get(json_object_get(r, "conversation"), "worker");
			const char *st = json_string_value(json_object_get(w, "state"));
			int running = st && !strcmp(st, "running");
			json_decref(r);
			if (running)
				break;
			if (bench_now() > until)
				bench_fail("%s: its worker is not in its model call after 60 s", id);
			usleep(5000);
		}
		ctl_close(c);
	}
}

static void send_setup(void)
{
	char cfg[512], name[32];
	bare_setup();
	for (int s = S_LMDB; s < S_PG3X; s++) {
		struct system *y = &sys[s];
		y->nnodes = s == S_PG3 ? 3 : 1;
		if (sys_db[s])
			db_create(admin, sys_db[s]);
		for (int k = 0; k < y->nnodes; k++) {
			snprintf(name, sizeof name, "%s-%c", sys_prefix[s], 'a' + k);
			snprintf(cfg, sizeof cfg, send_config, name);
			node_start(&y->nodes[k], name, sys_db[s], cfg);
			y->socks[k] = y->nodes[k].sock;
		}
		/* Conversation i is created on the node its client uses, and its
		 * first send (the warm-up's) starts its worker there: that node
		 * owns it. */
		for (int i = 0; i < CLIENTS; i++) {
			ctl_conn *c;
			char id[32];
			snprintf(id, sizeof id, "%s-%d", sys_prefix[s], i);
			if (harness_connect(&c, y->socks[i % y->nnodes], 5000))
				bench_fail("cannot connect to agentd");
			json_decref(harness_ok(c, json_pack("{sssss{ss}}", "op", "create", "conversation", id, "settings",
							 "model", "slow"), "create"));
			ctl_close(c);
		}
	}
	sys[S_PG3X] = sys[S_PG3];
	for (int k = 0; k < 3; k++)
		sys[S_PG3X].socks[k] = sys[S_PG3].nodes[(k + 1) % 3].sock;
	/* The views of pg_stat_statements live in a database: the admin one. */
	pg_exec(admin, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
}

/* One round trip to the server: `SELECT 1` (prepared) on one idle
 * connection, 300 times; the median in microseconds. What each of agentd's
 * statements costs its single-threaded supervisor at least. */
static double round_trip_us(void)
{
	static int prepared;
	double v[300];
	PGconn *c = bare[0].c;
	PGresult *r;
	if (!prepared) {
		r = PQprepare(c, "one", "SELECT 1", 0, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			bench_fail("prepare SELECT 1: %s", PQerrorMessage(c));
		PQclear(r);
		prepared = 1;
	}
	for (int i = 0; i < 300; i++) {
		double t0 = bench_now();
		r = PQexecPrepared(c, "one", 0, NULL, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			bench_fail("SELECT 1: %s", PQerrorMessage(c));
		PQclear(r);
		v[i] = (bench_now() - t0) * 1e6;
	}
	return harness_pct(v, 300, 50);
}

static void send_run(int s, long n, struct sample *out)
{
	struct system *y = &sys[s];
	double c0 = 0, w0 = 0, f0 = 0, a0 = 0;
	for (int k = 0; k < y->nnodes; k++) {
		c0 += node_counter(&y->nodes[k], "agentd_group_commits_total");
		w0 += node_counter(&y->nodes[k], "agentd_group_writes_total");
		f0 += node_counter(&y->nodes[k], "agentd_durable_flushes_total");
		a0 += cpu_agentd(&y->nodes[k]);
	}
	struct pgcount k0 = pg_count(admin, sys_db[s] ? sys_db[s] : "bare");
	double pg0 = cpu_postgres(), me0 = cpu_self(), i0, t0;
	cpu_machine(&i0, &t0);
	struct harness_load_fig f = s == S_BARE ? bare_run(n)
					    : harness_load(y->socks, y->nnodes, CLIENTS, n, send_line, (void *)sys_prefix[s]);
	double i1, t1;
	cpu_machine(&i1, &t1);
	double pg1 = cpu_postgres(), me1 = cpu_self();
	struct pgcount k1 = pg_count(admin, sys_db[s] ? sys_db[s] : "bare");
	double c1 = 0, w1 = 0, f1 = 0, a1 = 0;
	for (int k = 0; k < y->nnodes; k++) {
		c1 += node_counter(&y->nodes[k], "agentd_group_commits_total");
		w1 += node_counter(&y->nodes[k], "agentd_group_writes_total");
		f1 += node_counter(&y->nodes[k], "agentd_durable_flushes_total");
		a1 += cpu_agentd(&y->nodes[k]);
	}
	if (!out)
		return;
	double dn = (double)n;
	*out = (struct sample){ .rps = f.rps, .p50_ms = f.p50_ms, .p99_ms = f.p99_ms };
	if (s != S_LMDB) {
		/* The counting queries run in the admin database: not counted. */
		out->stmts = (k1.stmts - k0.stmts) / dn;
		out->trips = (k1.stmts - k0.stmts - (k1.ahead - k0.ahead)) / dn;
		out->xids = (k1.xids - k0.xids) / dn;
		out->wal = (k1.wal - k0.wal) / dn;
	}
	if (s != S_BARE) {
		out->group = c1 > c0 ? (w1 - w0) / (c1 - c0) : 0;
		out->cpu_agentd = (a1 - a0) / dn;
	}
	if (s == S_LMDB)
		out->flushes = ((c1 - c0) + (f1 - f0)) / dn;
	if (s == S_BARE)
		out->rtt_us = round_trip_us();
	out->cpu_pg = (pg1 - pg0) / dn;
	out->cpu_client = (me1 - me0) / dn;
	out->idle = t1 > t0 ? (i1 - i0) / (t1 - t0) : 0;
	if (verbose)
		fprintf(stderr, "%-32s %8.0f sends/s p50 %.2f ms p99 %.2f ms; per send: %.2f round trips, %.3f xids, %.0f WAL B; "
			"%.1f sends/group; CPU us/send agentd %.0f, postgres %.0f, client %.0f; idle %.0f%%\n",
			sys_name[s], f.rps, f.p50_ms, f.p99_ms, out->trips, out->xids, out->wal, out->group,
			out->cpu_agentd * 1e6, out->cpu_pg * 1e6, out->cpu_client * 1e6, out->idle * 100);
}

/* The statements of one agentd-on-PostgreSQL run, per send: where its round
 * trips go. */
static void statements_top(const char *db, double sends)
{
	char sql[600];
	snprintf(sql, sizeof sql,
		 "SELECT s.calls, s.total_exec_time, regexp_replace(left(s.query, 100), '\\s+', ' ', 'g') "
		 "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '%s' "
		 "ORDER BY s.total_exec_time DESC LIMIT 12", db);
	PGresult *r = PQexec(admin, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		bench_fail("pg_stat_statements: %s", PQerrorMessage(admin));
	printf("\nstatements of the last round's run of agentd on PostgreSQL, 1 node (%.0f sends): calls per send, "
	       "server execution time per send (us)\n", sends);
	for (int i = 0; i < PQntuples(r); i++)
		printf("  %6.3f %7.1f  %s\n", strtod(PQgetvalue(r, i, 0), NULL) / sends,
		       strtod(PQgetvalue(r, i, 1), NULL) * 1e3 / sends, PQgetvalue(r, i, 2));
	PQclear(r);
}

static double med(int s, size_t off, int n)
{
	double v[BENCH_MAX_RUNS];
	for (int k = 0; k < n; k++)
		v[k] = *(const double *)((const char *)&samples[s][k] + off);
	return bench_median(v, n);
}

static void rng(int s, size_t off, int n, double *lo, double *hi)
{
	double v[BENCH_MAX_RUNS];
	for (int k = 0; k < n; k++)
		v[k] = *(const double *)((const char *)&samples[s][k] + off);
	bench_range(v, n, lo, hi);
}

#define F(field) offsetof(struct sample, field)

static void send_report(void)
{
	int n = nrounds;
	printf("\n== durable send, %d clients (closed loop), %ld sends per system per round (the row via a non-owner "
	       "node: %ld), %d rounds, order rotating\n", CLIENTS, nsends, nsends / 5, n);
	printf("%-32s %8s %13s %7s %7s | %-18s | %6s %6s %7s %6s %6s\n", "system", "sends/s", "(range)", "p50 ms",
	       "p99 ms", "/ bare loop", "stmts", "trips", "commits", "WAL B", "group");
	for (int s = 0; s < NSYS; s++) {
		double lo, hi, q[BENCH_MAX_RUNS], rlo, rhi;
		rng(s, F(rps), n, &lo, &hi);
		for (int k = 0; k < n; k++)
			q[k] = samples[S_BARE][k].rps > 0 ? samples[s][k].rps / samples[S_BARE][k].rps : 0;
		bench_range(q, n, &rlo, &rhi);
		char range[32], ratio[40], pgc[48], grp[16];
		snprintf(range, sizeof range, "(%.0f-%.0f)", lo, hi);
		snprintf(ratio, sizeof ratio, "%.2fx (%.2f-%.2f)", bench_median(q, n), rlo, rhi);
		if (s == S_LMDB)
			snprintf(pgc, sizeof pgc, "%6s %6s %7s %6s", "-", "-", "-", "-");
		else
			snprintf(pgc, sizeof pgc, "%6.2f %6.2f %7.3f %6.0f", med(s, F(stmts), n), med(s, F(trips), n),
				 med(s, F(xids), n), med(s, F(wal), n));
		if (s == S_BARE)
			snprintf(grp, sizeof grp, "%6s", "-");
		else
			snprintf(grp, sizeof grp, "%6.1f", med(s, F(group), n));
		printf("%-32s %8.0f %13s %7.2f %7.2f | %-18s | %s %s\n", sys_name[s], med(s, F(rps), n), range,
		       med(s, F(p50_ms), n), med(s, F(p99_ms), n), ratio, pgc, grp);
	}
	printf("stmts: statements per send (pg_stat_statements); trips: round trips per send (the statements but "
	       "agentd's event inserts, sent ahead in pipeline mode); commits: write transactions per "
	       "send (transaction ids assigned, whole cluster); WAL B: WAL bytes per send; group: sends per group "
	       "commit (agentd's metrics)\n");
	printf("agentd on LMDB: %.2f flushes per send (group commits + the durable frontier's)\n",
	       med(S_LMDB, F(flushes), n));
	printf("\nwhere the CPU went, us per send (median): agentd (its processes), postgres (every server process), "
	       "client (this program), and the machine's idle share\n");
	for (int s = 0; s < NSYS; s++)
		printf("%-32s agentd %6.0f  postgres %6.0f  client %6.0f  idle %3.0f%%\n", sys_name[s],
		       med(s, F(cpu_agentd), n) * 1e6, med(s, F(cpu_pg), n) * 1e6, med(s, F(cpu_client), n) * 1e6,
		       med(s, F(idle), n) * 100);
	/* The serial chain: a node's supervisor waits for its group commit's
	 * round trips one after another on one connection. */
	double rtt = med(S_BARE, F(rtt_us), n), lo, hi;
	rng(S_BARE, F(rtt_us), n, &lo, &hi);
	double chain = med(S_PG1, F(trips), n) * rtt;
	printf("\none round trip (SELECT 1 on one idle connection, right after the bare loop): p50 %.0f us "
	       "(%.0f-%.0f over rounds)\n", rtt, lo, hi);
	printf("one node's round trips in a row: %.2f per send x %.0f us = %.0f us per send: at most %.0f sends/s per "
	       "node from round trips alone (measured: %.0f)\n", med(S_PG1, F(trips), n), rtt, chain,
	       chain > 0 ? 1e6 / chain : 0, med(S_PG1, F(rps), n));
	double r1 = med(S_PG1, F(rps), n), r3 = med(S_PG3, F(rps), n);
	double g1 = med(S_PG1, F(group), n), g3 = med(S_PG3, F(group), n);
	printf("one group commit took, in the run: %.1f ms on 1 node (sends per group / sends/s) for %.1f round trips, "
	       "%.1f ms on each of 3 nodes for %.1f: the rest is its sends' work in agentd and in the node's one server "
	       "backend, and their wait for a CPU on a busy machine\n",
	       r1 > 0 ? g1 / r1 * 1e3 : 0, g1 * med(S_PG1, F(trips), n), r3 > 0 ? g3 / (r3 / 3) * 1e3 : 0,
	       g3 * med(S_PG3, F(trips), n));
	double q[BENCH_MAX_RUNS];
	for (int k = 0; k < n; k++)
		q[k] = samples[S_BARE][k].rps > 0 ? samples[S_PG1][k].rps / samples[S_BARE][k].rps : 0;
	bench_range(q, n, &lo, &hi);
	printf("\ngoal: agentd on PostgreSQL, 1 node, >= 1.0x the bare loop at %d clients: %.2fx (%.2f-%.2f) %s\n",
	       CLIENTS, bench_median(q, n), lo, hi, bench_median(q, n) >= 1.0 ? "PASS" : "MISS");
	fflush(stdout);
}

static void phase_send(void)
{
	send_setup();
	say("send: warm-up (starts every conversation's worker)");
	for (int s = 0; s < NSYS; s++)
		send_run(s, nsends / 5 > CLIENTS * 4 ? nsends / 5 : CLIENTS * 4, NULL);
	for (int s = S_LMDB; s < S_PG3X; s++)
		wait_parked(s);
	for (int r = 0; r < nrounds; r++) {
		say("send: round %d of %d", r + 1, nrounds);
		for (int k = 0; k < NSYS; k++) {
			int s = (r + k) % NSYS;
			/* The statements of the last round's one-node run, alone. */
			if (s == S_PG1 && r == nrounds - 1)
				pg_exec(admin, "SELECT pg_stat_statements_reset()");
			/* Sends across nodes are slower by far: a fifth as many. */
			send_run(s, s == S_PG3X ? nsends / 5 : nsends, &samples[s][r]);
		}
	}
	send_report();
	statements_top("send1", (double)nsends);
	for (int s = S_LMDB; s < S_PG3X; s++)
		for (int k = 0; k < sys[s].nnodes; k++)
			node_stop(&sys[s].nodes[k]);
	for (int i = 0; i < CLIENTS; i++)
		PQfinish(bare[i].c);
}

/* ---- the expiry phase ------------------------------------------------- */

#define EXP_CHUNK 100

/* One backend's lateness over n timers: p50, p99, max (ms). */
struct late {
	double p50, p99, max;
};

/* Setup: n conversations x-0 .. x-(n-1) with the human tool, EXP_CHUNK
 * creates to a batch. */
static void exp_create(ctl_conn *c, int n)
{
	json_t *reqs[EXP_CHUNK];
	for (int base = 0; base < n; base += EXP_CHUNK) {
		int k = n - base < EXP_CHUNK ? n - base : EXP_CHUNK;
		for (int i = 0; i < k; i++) {
			char id[32];
			snprintf(id, sizeof id, "x-%d", base + i);
			reqs[i] = json_pack("{sssss{sss[s]}}", "op", "create", "conversation", id, "settings", "model",
					    "echo", "tools", "approve");
		}
		harness_ok_many(c, reqs, (size_t)k, NULL, "create");
	}
}

/* One call every pace ms: each expiry's commits (the resolution, then the
 * woken worker's turn) are done before the next deadline. */
static void exp_send(ctl_conn *c, int n)
{
	double next = bench_now();
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof id, "x-%d", i);
		double wait = next - bench_now();
		if (wait > 0)
			usleep((useconds_t)(wait * 1e6));
		next += pace_ms / 1e3;
		json_decref(harness_ok(c, json_pack("{ssssss}", "op", "send", "conversation", id, "content",
						 "/tool approve {\"what\":\"deploy\"}"), "send"));
	}
}

/* Each call's deadline into deadline[] (zeroed), read from its row, or
 * derived when it expired before the row was read. */
static void exp_deadlines(ctl_conn *c, int n, int expires, int64_t *deadline)
{
	int derived = 0;
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof id, "x-%d", i);
		double until = bench_now() + 120;
		while (!deadline[i]) {
			json_t *r = harness_ok(c, json_pack("{ssss}", "op", "tool_calls", "conversation", id), "tool_calls");
			json_t *a = json_object_get(r, "tool_calls");
			if (json_array_size(a) == 1) {
				json_t *tc = json_array_get(a, 0);
				/* Pending, the row has its deadline; once expired it has
				 * none, and it is the call's inserted_at plus the expiry
				 * (the worker stamps both in one transaction). */
				deadline[i] = json_integer_value(json_object_get(tc, "deadline"));
				if (!deadline[i]) {
					deadline[i] = json_integer_value(json_object_get(tc, "inserted_at")) +
						      (int64_t)expires * 1000;
					derived++;
				}
			}
			json_decref(r);
			if (!deadline[i] && bench_now() > until)
				bench_fail("%s: no pending tool call after 120 s", id);
			if (!deadline[i])
				usleep(2000);
		}
	}
	if (derived)
		say("expiry: %d calls had expired before their rows were read (deadlines derived)", derived);
}

/* Measure: each call's resolution, which must be `expired`, and how late
 * after its deadline it was committed (ms) into late[]. */
static void exp_lateness(ctl_conn *c, int n, const int64_t *deadline, double *late)
{
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof id, "x-%d", i);
		int64_t wait = deadline[i] - harness_wall_us() / 1000 + 30000;
		json_t *r = harness_ok(c, json_pack("{sssssssisI}", "op", "events", "conversation", id, "type", "resolution",
						 "after", 0, "wait_ms", (json_int_t)(wait > 1000 ? wait : 1000)),
				   "events");
		json_t *e = json_array_get(json_object_get(r, "events"), 0);
		if (!e)
			bench_fail("%s: no resolution 30 s after its deadline", id);
		const char *st = json_string_value(json_object_get(json_object_get(e, "content"), "status"));
		if (!st || strcmp(st, "expired"))
			bench_fail("%s: the resolution is not `expired`", id);
		late[i] = (double)(json_integer_value(json_object_get(e, "inserted_at")) - deadline[i]);
		json_decref(r);
	}
}

static struct late expiry_run(int pg, int round, int n)
{
	char name[32], db[32], config[512];
	int expires = (int)(2.0 * n * pace_ms / 1e3) + 10;
	snprintf(name, sizeof name, "exp-%s-%d", pg ? "pg" : "lmdb", round);
	snprintf(db, sizeof db, "exp%d", round);
	if (pg)
		db_create(admin, db);
	snprintf(config, sizeof config,
		 "[agentd]\nnode_id = %s\nmax_workers = %d\nidle_timeout = 1h\n\n"
		 "[tool.approve]\nexecutor = human\nprompt = Approve?\nexpires = %ds\n",
		 name, n + 100, expires);
	struct node nd;
	node_start(&nd, name, pg ? db : NULL, config);
	ctl_conn *c;
	if (harness_connect(&c, nd.sock, 5000))
		bench_fail("cannot connect to %s", nd.sock);
	exp_create(c, n);
	exp_send(c, n);
	int64_t *deadline = calloc((size_t)n, sizeof *deadline);
	double *late = calloc((size_t)n, sizeof *late);
	if (!deadline || !late)
		bench_fail("out of memory");
	exp_deadlines(c, n, expires, deadline);
	exp_lateness(c, n, deadline, late);
	ctl_close(c);
	node_stop(&nd);
	struct late l = { harness_pct(late, (size_t)n, 50), harness_pct(late, (size_t)n, 99), late[n - 1] };
	say("expiry on %s, round %d: p50 %.0f ms p99 %.0f ms max %.0f ms", pg ? "PostgreSQL" : "LMDB", round + 1, l.p50,
	    l.p99, l.max);
	free(deadline);
	free(late);
	return l;
}

static void phase_expiry(void)
{
	int rounds = nrounds / 2 > 0 ? nrounds / 2 : 1;
	if (quick)
		rounds = 1;
	struct late l[2][BENCH_MAX_RUNS];
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < 2; k++) {
			int pg = (r + k) % 2;
			l[pg][r] = expiry_run(pg, r, ntimers);
		}
	printf("\n== expiry lateness: %d human-tool timers per backend per round, one started every %d ms, %d round(s), "
	       "order alternating\n", ntimers, pace_ms, rounds);
	printf("resolution event's inserted_at - the call's deadline (ms): median over rounds (range)\n");
	printf("%-30s %18s %18s %18s\n", "backend", "p50", "p99", "max");
	for (int pg = 0; pg < 2; pg++) {
		double v[3][BENCH_MAX_RUNS], lo[3], hi[3];
		for (int r = 0; r < rounds; r++) {
			v[0][r] = l[pg][r].p50;
			v[1][r] = l[pg][r].p99;
			v[2][r] = l[pg][r].max;
		}
		for (int j = 0; j < 3; j++)
			bench_range(v[j], rounds, &lo[j], &hi[j]);
		printf("%-30s %6.0f (%4.0f-%4.0f) %6.0f (%4.0f-%4.0f) %6.0f (%4.0f-%4.0f)\n",
		       pg ? "agentd on PostgreSQL, 1 node" : "agentd on LMDB", bench_median(v[0], rounds), lo[0], hi[0],
		       bench_median(v[1], rounds), lo[1], hi[1], bench_median(v[2], rounds), lo[2], hi[2]);
	}
	fflush(stdout);
}

/* ---- main ------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_pg [-d DIR] [-r ROUNDS] [-n SENDS] [-t TIMERS] [-i MS] [-o send|expiry] [-q] [-k] [-v]\n");
}

static void cleanup(void)
{
	nodes_kill();
	if (admin) {
		PQfinish(admin);
		admin = NULL;
	}
	cluster_stop();
	if (!keep && scratch[0])
		bench_rmtree(scratch);
}

int main(int argc, char **argv)
{
	const char *dir = ".";
	int c, set_r = 0, set_n = 0, set_t = 0;
	while ((c = getopt(argc, argv, "d:r:n:t:i:o:qkvh")) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'r': nrounds = atoi(optarg), set_r = 1; break;
		case 'n': nsends = atol(optarg), set_n = 1; break;
		case 't': ntimers = atoi(optarg), set_t = 1; break;
		case 'i': pace_ms = atoi(optarg); break;
		case 'o': only = optarg; break;
		case 'q': quick = 1; break;
		case 'k': keep = 1; break;
		case 'v': verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (quick) {
		nrounds = set_r ? nrounds : 3;
		nsends = set_n ? nsends : 1500;
		ntimers = set_t ? ntimers : 50;
	}
	if (nrounds < 1 || nrounds > BENCH_MAX_RUNS || nsends < CLIENTS || ntimers < 1 || pace_ms < 1 ||
	    (only && strcmp(only, "send") && strcmp(only, "expiry"))) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	harness_bindir(bindir, sizeof bindir);
	harness_scratch(scratch, sizeof scratch, dir, "bench-pg");
	atexit(cleanup); /* the nodes first, then the cluster */

	char machine[512], fs[512], load0[128], load1[128], cmd[PATH_MAX * 2];
	int tmpfs;
	bench_machine(machine, sizeof machine);
	bench_loadavg(load0, sizeof load0);
	const char *pg = getenv("AGENTD_BENCH_PG");
	if (pg && *pg) {
		snprintf(prefix, sizeof prefix, "%s", pg);
		snprintf(cluster_dir, sizeof cluster_dir, "(AGENTD_BENCH_PG)");
	} else {
		/* The server runs as nobody when this runs as root: it must
		 * reach its directory (mkdtemp made the scratch 0700). */
		if (chmod(scratch, 0755) < 0)
			bench_die(scratch, -errno);
		harness_path(cluster_dir, sizeof cluster_dir, "%s/pg", scratch);
		bench_mkdir(cluster_dir);
		snprintf(cmd, sizeof cmd, "%s/tests/pg/cluster.sh start %s durable", AGENTD_SRC, cluster_dir);
		own_cluster = 1;
		bench_sh(cmd, prefix, sizeof prefix);
	}
	admin = pg_connect("postgres");
	PQsetNoticeProcessor(admin, notice_quiet, NULL); /* DROP DATABASE IF EXISTS's notices */
	postmaster = parent_of((pid_t)PQbackendPID(admin));
	bench_filesystem(scratch, fs, sizeof fs, &tmpfs);
	char ver[64], fsync_s[16], sc[16], fpw[16], wsm[32];
	pg_text(admin, "SHOW server_version", NULL, ver, sizeof ver);
	pg_text(admin, "SHOW fsync", NULL, fsync_s, sizeof fsync_s);
	pg_text(admin, "SHOW synchronous_commit", NULL, sc, sizeof sc);
	pg_text(admin, "SHOW full_page_writes", NULL, fpw, sizeof fpw);
	pg_text(admin, "SHOW wal_sync_method", NULL, wsm, sizeof wsm);
	printf("agentd on PostgreSQL beside a bare libpq loop and LMDB\nmachine: %s\nfilesystem (LMDB, and the cluster "
	       "unless AGENTD_BENCH_PG): %s\n", machine, fs);
	printf("PostgreSQL %s, cluster %s: fsync = %s, synchronous_commit = %s, full_page_writes = %s, "
	       "wal_sync_method = %s\n", ver, cluster_dir, fsync_s, sc, fpw, wsm);
	if (strcmp(fsync_s, "on") || strcmp(sc, "on"))
		printf("WARNING: commits are not durable on this cluster: the figures flush nothing\n");
	if (tmpfs)
		printf("WARNING: a memory filesystem: durable commits flush nothing\n");
	fflush(stdout);
	if (!only || !strcmp(only, "send"))
		phase_send();
	if (!only || !strcmp(only, "expiry"))
		phase_expiry();
	bench_loadavg(load1, sizeof load1);
	printf("\nload average: before %s, after %s\nscratch: %s%s\n", load0, load1, scratch, keep ? " (kept)" : "");
	return 0;
}
