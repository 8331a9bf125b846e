/*
 * bench_control: agentd's control protocol beside Redis, in one run.
 *
 * Both servers run side by side on Unix sockets in one scratch directory on
 * the disk under test: agentd with sync=full, redis-server with appendonly
 * yes and appendfsync always (Redis's own group commit). Each figure is
 * measured on both in every run, the order alternating, and reported as the
 * median over the runs; ratios are the median of the per-run ratios
 * (agentd/Redis > 1: agentd is faster).
 *
 * This file is kept whole because every row is one cell of the same run loop
 * (run_once): the servers it starts, the alternation, the per-run ratios and
 * the report share its static state, and the bare servers are measured beside
 * agentd in that loop so that both see the same store size; split, each part
 * would need that state through an internal header used by nothing else.
 *
 *   ping          agentd `ping` vs redis-benchmark PING (PING_MBULK)
 *   durable send  agentd `send` vs redis-benchmark SET
 *
 * each with 1 and 50 clients. Redis is driven by redis-benchmark itself;
 * agentd by the closed loop here, built like redis-benchmark without
 * pipelining: C connections in one epoll thread, each sending one request and
 * waiting for its reply before the next. Latency is per request, from the
 * write to the reply's arrival.
 *
 * Sends go to one conversation per client, with the built-in echo model, so
 * every conversation has a live worker that answers: the workers run turns
 * and commit them (durably, serialised with the supervisor's group commits
 * by LMDB's writer lock) while the sends are measured. That is agentd's real
 * work, not removed from the figure. A diagnostic row sends to conversations
 * whose worker sits in a model call that never returns, so no turn commits:
 * the control plane's group commit alone.
 *
 * The bare LMDB loop: what a send writes, committed with the store library
 * in this process by a closed loop of 50 clients served one transaction per
 * batch: the ceiling of the send rows. Its store grows with agentd's (the
 * same sends per run into its own conversations, ballast topped up to the
 * echo row's events), so it writes into a tree as deep as agentd's; the
 * same loop on a fresh store each run is printed beside it.
 *
 * The bare LMDB servers: the same rows, but served over a Unix socket to the
 * same 50 clients agentd serves, by a process of its own that does nothing
 * else (below): what the loop leaves out, reading requests as they come and
 * acking each one, measured on its own. One commits in its loop with LMDB's
 * two flushes; one is agentd's pipeline without the rest of agentd; one
 * waits for every client before it commits, as the loop's batches do; the
 * last waits as well, and parses each request and builds each reply as JSON.
 *
 * One-event-per-transaction: the same event appended with the store library
 * in this process, one durable transaction each, on the same filesystem: the
 * most a server that commits each event on its own could give. Group commit
 * must beat it by 3x with 50 clients.
 *
 * Usage: bench_control [-d DIR] [-r RUNS] [-o NAME] [-q] [-k] [-v]
 *   -d DIR   where the scratch directory goes (default "."): the disk to measure
 *   -r RUNS  timed runs (default 5, at most 15)
 *   -q       quick: a tenth of the requests, 3 runs (a smoke test)
 *   -o NAME  only the figures whose name contains NAME ("parked" for the
 *            diagnostic row, measured beside the bare LMDB loop and the bare
 *            servers, each with its CPU time per send), no report (for
 *            profiling; -v prints every run)
 *   -k       keep the scratch directory (agentd's and Redis's logs are there)
 *   -v       print every run's figures (on stderr)
 */
#include "bench/bench.h"
#include "bench/harness.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define NCLIENTS_MAX 50

static int nruns = 5, quick, keep, verbose;
static const char *only; /* -o: only the figures whose name contains it */
static char scratch[PATH_MAX], bindir[PATH_MAX];
static struct harness_agentd agentd;
static pid_t redis_pid;
static char redis_sock[PATH_MAX], redis_version[64];

/* One measurement: throughput and latency percentiles. */
struct fig {
	double rps, p50_ms, p99_ms;
};

/* ---- Redis ----------------------------------------------------------- */

static void redis_start(void)
{
	char dir[PATH_MAX], log[PATH_MAX];
	harness_path(dir, sizeof dir, "%s/redis", scratch);
	harness_path(redis_sock, sizeof redis_sock, "%s/redis.sock", scratch);
	harness_path(log, sizeof log, "%s/redis.log", scratch);
	bench_mkdir(dir);
	char *argv[] = { "/usr/bin/redis-server", "--port", "0", "--unixsocket", redis_sock, "--save", "",
			 "--appendonly", "yes", "--appendfsync", "always", "--dir", dir, NULL };
	redis_pid = harness_spawn(argv, log);
	/* Any connection accepted means it is listening; the benchmark's own
	 * clients speak RESP, not this one. */
	ctl_conn *c;
	if (harness_connect(&c, redis_sock, 10000) != 0)
		bench_fail("redis-server did not listen on %s (installed? scripts/deps.sh --bench): see %s",
			   redis_sock, log);
	ctl_close(c);
	FILE *p = popen("redis-server --version", "re");
	char line[256] = "";
	if (p && fgets(line, sizeof line, p)) {
		char *v = strstr(line, "v=");
		if (v)
			snprintf(redis_version, sizeof redis_version, "%.*s", (int)strcspn(v + 2, " \n"), v + 2);
	}
	if (p)
		pclose(p);
}

static void redis_stop(void)
{
	if (redis_pid > 0) {
		kill(redis_pid, SIGTERM);
		harness_reap(redis_pid, 10000);
	}
	redis_pid = 0;
}

/* redis-benchmark -s SOCK -t TEST -n N -c C --csv, the row of `name` parsed:
 * "test","rps","avg","min","p50","p95","p99","max". */
static struct fig redis_bench(const char *test, const char *name, int clients, long n)
{
	char ns[32], cs[32], out[PATH_MAX];
	snprintf(ns, sizeof ns, "%ld", n);
	snprintf(cs, sizeof cs, "%d", clients);
	harness_path(out, sizeof out, "%s/redis-benchmark.csv", scratch);
	unlink(out);
	char *argv[] = { "/usr/bin/redis-benchmark", "-s", redis_sock, "-t", (char *)test, "-n", ns, "-c", cs,
			 "--csv", NULL };
	int st = harness_reap(harness_spawn(argv, out), 600000);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		bench_fail("redis-benchmark %s failed: see %s", test, out);
	FILE *f = fopen(out, "re");
	char line[512];
	struct fig fg = { 0 };
	int found = 0;
	char want[64];
	snprintf(want, sizeof want, "\"%s\",", name);
	while (f && fgets(line, sizeof line, f)) {
		double v[7];
		if (strncmp(line, want, strlen(want)))
			continue;
		if (sscanf(line + strlen(want), "\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"", &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6]) == 7) {
			fg = (struct fig){ v[0], v[3], v[5] };
			found = 1;
		}
	}
	if (f)
		fclose(f);
	if (!found)
		bench_fail("no %s row in redis-benchmark's output: see %s", name, out);
	return fg;
}

/* ---- agentd: the closed loop ----------------------------------------- */

static size_t line_ping(int idx, char *buf, size_t cap, void *arg)
{
	(void)idx;
	(void)arg;
	return (size_t)snprintf(buf, cap, "{\"op\":\"ping\"}\n");
}

static const char *send_prefix = "b";

/* A send with its own event_id, as a client that retries sends it: the
 * rows the bare LMDB loop writes (the event, its event_id index entry, the
 * conversation record). */
static size_t line_send(int idx, char *buf, size_t cap, void *arg)
{
	static long eid;
	(void)arg;
	return (size_t)snprintf(buf, cap,
				"{\"op\":\"send\",\"conversation\":\"%s-%d\",\"content\":\"hello from client %d\","
				"\"event_id\":\"e-%ld\"}\n",
				send_prefix, idx, idx, eid++);
}

/* nreq requests over `clients` connections, each with one request in
 * flight (harness.h's closed loop, on agentd's one socket). */
static struct fig agentd_load(int clients, long nreq, harness_line_fn fn)
{
	const char *socks[] = { agentd.sock };
	struct harness_load_fig f = harness_load(socks, 1, clients, nreq, fn, NULL);
	return (struct fig){ f.rps, f.p50_ms, f.p99_ms };
}

/* The value of one counter in the metrics op's Prometheus text. */
static double agentd_counter(const char *name)
{
	ctl_conn *c;
	if (harness_connect(&c, agentd.sock, 5000))
		bench_fail("cannot connect to agentd");
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

/* Sum of last_seq over the conversations PREFIX-0..n-1: events in the logs. */
static double agentd_events(const char *prefix, int n)
{
	ctl_conn *c;
	double total = 0;
	if (harness_connect(&c, agentd.sock, 5000))
		bench_fail("cannot connect to agentd");
	for (int i = 0; i < n; i++) {
		char id[64];
		snprintf(id, sizeof id, "%s-%d", prefix, i);
		json_t *r = harness_ok(c, json_pack("{ssss}", "op", "get", "conversation", id), "get");
		total += (double)json_integer_value(json_object_get(json_object_get(r, "conversation"), "last_seq"));
		json_decref(r);
	}
	ctl_close(c);
	return total;
}

/* Wait until the conversations PREFIX-0..n-1 have answered everything they
 * were sent (status idle): the turns a row's sends left queued would
 * otherwise commit during the next row and be counted against it. */
static void agentd_settle(const char *prefix, int n)
{
	ctl_conn *c;
	if (harness_connect(&c, agentd.sock, 5000))
		bench_fail("cannot connect to agentd");
	int64_t until = harness_wall_us() + 60 * 1000000LL;
	for (int i = 0; i < n;) {
		char id[64];
		snprintf(id, sizeof id, "%s-%d", prefix, i);
		json_t *r = harness_ok(c, json_pack("{ssss}", "op", "get", "conversation", id), "get");
		const char *st = json_string_value(json_object_get(json_object_get(r, "conversation"), "status"));
		int idle = st && strcmp(st, "idle") == 0;
		json_decref(r);
		if (idle) {
			i++;
			continue;
		}
		if (harness_wall_us() > until)
			bench_fail("%s has not answered its sends after 60 s", id);
		usleep(2000);
	}
	ctl_close(c);
}

/* CPU seconds (user + system, every thread) agentd has used so far, from
 * /proc/PID/stat: with the sends of a row, its CPU per send. */
static double agentd_cpu_s(void)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)agentd.pid);
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	/* Fields after the command's closing parenthesis: state is the 3rd,
	 * utime and stime the 14th and 15th. */
	char *p = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	if (!p || sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lu %lu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Bytes process pid (0: this one) has written to storage so far
 * (/proc/PID/io write_bytes, counted as pages are dirtied): over a row,
 * divided by its commits and the page size, the pages a commit flushes. */
static double write_bytes(pid_t pid)
{
	char path[64], line[128];
	unsigned long long v = 0;
	if (pid)
		snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
	else
		snprintf(path, sizeof path, "/proc/self/io");
	FILE *f = fopen(path, "re");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "write_bytes: %llu", &v) == 1)
			break;
	if (f)
		fclose(f);
	return (double)v;
}

/* CPU seconds used so far (user and system): by this thread (RUSAGE_THREAD)
 * or by this process, every thread (RUSAGE_SELF). */
static double cpu_s(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

/* ---- one event per transaction --------------------------------------- */

/* A fresh durable store in the scratch directory (name-run), and the
 * content a send carries, packed into sb (destroy it after). */
static store *scratch_store(const char *name, int run, msgpack_sbuffer *sb)
{
	char dir[PATH_MAX];
	harness_path(dir, sizeof dir, "%s/%s-%d", scratch, name, run);
	bench_mkdir(dir);
	store *s;
	struct store_opts so = { .sync = STORE_SYNC_FULL };
	int e = store_open(&s, dir, &so);
	if (e)
		bench_die("store_open", e);
	msgpack_packer pk;
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "text", 4);
	msgpack_pack_str_with_body(&pk, "hello from client 0", 19);
	return s;
}

/* n appends of the send's event (with its event_id), each in its own
 * durable transaction, with the store library in this process (opened and
 * closed here: nothing of it crosses the forks of this program). Returns
 * events per second. */
static double one_txn_rate(long n, int run)
{
	msgpack_sbuffer sb;
	store *s = scratch_store("one-txn", run, &sb);
	int e;
	store_txn *t;
	if ((e = store_txn_begin(s, STORE_WRITE, &t)) || (e = store_conv_create(t, "one", (store_bytes){ "\x80", 1 })) ||
	    (e = store_txn_commit(t)))
		bench_die("create", e);
	double t0 = bench_now();
	for (long i = 0; i < n; i++) {
		uint64_t seq;
		char eid[48];
		snprintf(eid, sizeof eid, "e-%ld", i);
		struct store_event_in ev = { "user_msg", { sb.data, sb.size }, eid };
		if ((e = store_txn_begin(s, STORE_WRITE, &t)) || (e = store_event_append(t, "one", &ev, &seq, NULL)) ||
		    (e = store_txn_commit(t)))
			bench_die("append", e);
	}
	double rate = (double)n / (bench_now() - t0);
	msgpack_sbuffer_destroy(&sb);
	store_close(s);
	return rate;
}

/* ---- the bare LMDB loop ---------------------------------------------- */

static double loop_cpu_us; /* the last lmdb_loop_rate's CPU per send, microseconds */
static double loop_pages;  /* and the pages each of its commits wrote */
static long loop_eid;      /* event_ids written so far in the grown store (each unique) */
static long loop_ballast;  /* events written as ballast so far in the grown store */

/* Events appended untimed to the grown store's ballast conversations, in
 * large transactions, until it holds `upto` of them: each with an event_id,
 * as the echo row's sends have (its turns, a few in a hundred, have none). */
static void loop_top_up(store *s, const msgpack_sbuffer *sb, long upto)
{
	int e;
	store_txn *t;
	char conv[32];
	while (loop_ballast < upto) {
		if ((e = store_txn_begin(s, STORE_WRITE, &t)))
			bench_die("begin", e);
		for (int k = 0; k < 5000 && loop_ballast < upto; k++, loop_ballast++) {
			char eid[48];
			snprintf(conv, sizeof conv, "ballast-%ld", loop_ballast % NCLIENTS_MAX);
			snprintf(eid, sizeof eid, "b-%ld", loop_ballast);
			struct store_event_in ev = { "user_msg", { sb->data, sb->size }, eid };
			uint64_t seq;
			if ((e = store_event_append(t, conv, &ev, &seq, NULL)))
				bench_die("ballast", e);
		}
		if ((e = store_txn_commit(t)))
			bench_die("commit", e);
	}
}

/* A peer's conversations in s, created unless there: PREFIX-i for its
 * clients' sends and ballast-i, for i below NCLIENTS_MAX. */
static void peer_convs(store *s, const char *prefix)
{
	int e;
	store_txn *t;
	char conv[32];
	if ((e = store_txn_begin(s, STORE_WRITE, &t)))
		bench_die("begin", e);
	for (int c = 0; c < NCLIENTS_MAX; c++) {
		snprintf(conv, sizeof conv, "%s-%d", prefix, c);
		if ((e = store_conv_create(t, conv, (store_bytes){ "\x80", 1 })) && e != STORE_E_CONFLICT)
			bench_die("create", e);
		snprintf(conv, sizeof conv, "ballast-%d", c);
		if ((e = store_conv_create(t, conv, (store_bytes){ "\x80", 1 })) && e != STORE_E_CONFLICT)
			bench_die("create", e);
	}
	if ((e = store_txn_commit(t)))
		bench_die("commit", e);
}

/* The most LMDB can commit on this disk for the send rows, with batches
 * known to be complete and no socket (the bare servers below put those
 * back): a closed loop of `clients` clients, each waiting for its ack,
 * served in batches of one transaction each that writes the rows a `send`
 * writes (the event, its event_id index, the conversation record) and is
 * acked once durable (STORE_WRITE: LMDB's own two flushes). Sends per
 * second.
 *
 * grown: the store lives for the whole invocation, as agentd's does: its
 * own conversations take every run's sends as the parked row's do, and
 * ballast conversations are topped up (untimed) to as many events as
 * agentd's other conversations hold, so the loop writes into a tree as
 * deep as agentd's. Otherwise a fresh store per run. */
static double lmdb_loop_rate(int clients, long n, int run, int grown, long ballast)
{
	msgpack_sbuffer sb;
	store *s = scratch_store(grown ? "lmdb-loop-grown" : "lmdb-loop", grown ? 0 : run, &sb);
	int e;
	store_txn *t;
	char conv[32], eid[48];
	peer_convs(s, "loop");
	if (grown)
		loop_top_up(s, &sb, ballast);
	struct store_conv_patch st = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
	double t0 = bench_now(), cpu0 = cpu_s(RUSAGE_THREAD), wb0 = write_bytes(0);
	long done = 0, txns = 0;
	while (done < n) {
		if ((e = store_txn_begin(s, STORE_WRITE, &t)))
			bench_die("begin", e);
		for (int c = 0; c < clients && done + c < n; c++) {
			snprintf(conv, sizeof conv, "loop-%d", c);
			snprintf(eid, sizeof eid, "e-%ld", grown ? loop_eid++ : done + c);
			struct store_event_in ev = { "user_msg", { sb.data, sb.size }, eid };
			uint64_t seq;
			if ((e = store_event_append(t, conv, &ev, &seq, NULL)) || (e = store_conv_put(t, conv, &st)))
				bench_die("append", e);
		}
		if ((e = store_txn_commit(t)))
			bench_die("commit", e);
		done += clients;
		txns++;
	}
	double rate = (double)n / (bench_now() - t0);
	loop_cpu_us = (cpu_s(RUSAGE_THREAD) - cpu0) * 1e6 / (double)n;
	loop_pages = (write_bytes(0) - wb0) / 4096 / (double)txns;
	msgpack_sbuffer_destroy(&sb);
	store_close(s);
	return rate;
}

/* ---- the bare LMDB servers ------------------------------------------- */

/* The bare loop above batches exactly its 50 clients, in this process, with
 * no request to read and no reply to write. A server cannot: it reads
 * requests as they arrive on its sockets and acks each one. These three are
 * the least such a server can do, each in a process of its own beside the
 * same 50 clients (harness_load, the agentd rows' own driver). Each reads every
 * readable connection, takes the conversation and event_id out of each
 * complete request line (a scan, no JSON parser) and writes the rows a
 * send writes, with the content the bare loop writes.
 *
 * plain: one batch per iteration, as Redis's appendfsync always: the
 *        batch's transaction committed with LMDB's own two flushes
 *        (STORE_WRITE), then one reply per request. What arrives during a
 *        commit waits for the next.
 * pipelined: agentd's design with nothing else: the loop only reads; a
 *        writer thread commits each batch with one flush (STORE_WRITE_LAZY)
 *        and takes the next at once; a flusher thread flushes the data file
 *        once for every batch committed before it began and writes their
 *        replies.
 * gathering: plain, but a batch waits until every connected client has a
 *        request in it, or its oldest request has waited SRV_GATHER_US: in a
 *        closed loop, the batches of 50 the bare loop makes by construction.
 * gathering-json: gathering, with the least work of the protocol's own:
 *        each line parsed by a JSON parser (jansson, as agentd), its content
 *        packed as the event's ({"text": content}, msgpack), and the reply
 *        built as a JSON object with the event's seq. */

struct srv_req {
	int fd;
	char conv[32], eid[48];
	unsigned char content[128]; /* gathering-json: the event's own, packed */
	size_t clen;
	uint64_t seq;
};

struct srv_stats {
	double cpu_s, wbytes;
	long txns;
};

struct srv_conn {
	int fd;
	size_t len;
	char buf[8192];
};

#define SRV_MAXREQ (NCLIENTS_MAX * 4)

static struct {
	store *s;
	msgpack_sbuffer sb;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct srv_req todo[SRV_MAXREQ]; /* read, for the writer thread */
	int ntodo;
	int fds[SRV_MAXREQ]; /* committed, for the flusher thread */
	int nfds;
	int quit;
	long txns;
} SRV = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* The string value of "key":"..." in line (no escapes: the benchmark's own
 * lines), copied to out. 0, or -1 when absent or too long. */
static int srv_field(const char *line, const char *key, char *out, size_t cap)
{
	const char *p = strstr(line, key);
	if (!p)
		return -1;
	p += strlen(key);
	const char *q = strchr(p, '"');
	if (!q || (size_t)(q - p) >= cap)
		return -1;
	memcpy(out, p, (size_t)(q - p));
	out[q - p] = 0;
	return 0;
}

static void srv_write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(3); /* a client gone mid-run: the parent's harness_load fails with it */
		p += w;
		n -= (size_t)w;
	}
}

static void srv_reply(int fd)
{
	static const char ok[] = "{\"ok\":true}\n";
	srv_write_all(fd, ok, sizeof ok - 1);
}

/* gathering-json: the request parsed as JSON into rq, its content packed. 0,
 * or -1 when it is not a send this server can serve. */
static int srv_parse_json(const char *line, size_t len, struct srv_req *rq)
{
	json_error_t err;
	json_t *o = json_loadb(line, len, 0, &err);
	const char *conv, *eid, *text;
	int bad = !o || json_unpack(o, "{s:s, s:s, s:s}", "conversation", &conv, "event_id", &eid, "content", &text) ||
		  strlen(conv) >= sizeof rq->conv || strlen(eid) >= sizeof rq->eid ||
		  strlen(text) + 16 > sizeof rq->content;
	if (!bad) {
		static msgpack_sbuffer sb; /* one buffer, reused: no allocation per request once grown */
		strcpy(rq->conv, conv);
		strcpy(rq->eid, eid);
		msgpack_sbuffer_clear(&sb);
		msgpack_packer pk;
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 1);
		msgpack_pack_str_with_body(&pk, "text", 4);
		msgpack_pack_str_with_body(&pk, text, strlen(text));
		memcpy(rq->content, sb.data, sb.size);
		rq->clen = sb.size;
	}
	json_decref(o);
	return bad ? -1 : 0;
}

/* gathering-json: {"ok":true,"seq":N}, built as a JSON object. */
static void srv_reply_json(const struct srv_req *rq)
{
	json_t *r = json_pack("{s:b, s:I}", "ok", 1, "seq", (json_int_t)rq->seq);
	char *s = r ? json_dumps(r, JSON_COMPACT) : NULL;
	if (!s)
		bench_fail("the bare server: out of memory");
	size_t n = strlen(s);
	s[n] = '\n'; /* over the terminator: written by length */
	srv_write_all(rq->fd, s, n + 1);
	free(s);
	json_decref(r);
}

/* One transaction writing the rows of n requests, committed in mode; each
 * request's seq set. */
static void srv_commit(struct srv_req *rq, int n, int mode)
{
	static const struct store_conv_patch st = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
	store_txn *t;
	int e;
	if ((e = store_txn_begin(SRV.s, mode, &t)))
		bench_die("begin", e);
	for (int i = 0; i < n; i++) {
		struct store_event_in ev = { "user_msg", { SRV.sb.data, SRV.sb.size }, rq[i].eid };
		if (rq[i].clen)
			ev.content = (store_bytes){ rq[i].content, rq[i].clen };
		if ((e = store_event_append(t, rq[i].conv, &ev, &rq[i].seq, NULL)) ||
		    (e = store_conv_put(t, rq[i].conv, &st)))
			bench_die("append", e);
	}
	if ((e = store_txn_commit(t)))
		bench_die("commit", e);
	SRV.txns++;
}

static void *srv_writer(void *arg)
{
	(void)arg;
	struct srv_req rq[SRV_MAXREQ];
	pthread_mutex_lock(&SRV.mu);
	for (;;) {
		while (!SRV.ntodo && !SRV.quit)
			pthread_cond_wait(&SRV.cv, &SRV.mu);
		if (!SRV.ntodo)
			break;
		int n = SRV.ntodo;
		memcpy(rq, SRV.todo, (size_t)n * sizeof *rq);
		SRV.ntodo = 0;
		pthread_mutex_unlock(&SRV.mu);
		srv_commit(rq, n, STORE_WRITE_LAZY);
		pthread_mutex_lock(&SRV.mu);
		for (int i = 0; i < n; i++)
			SRV.fds[SRV.nfds++] = rq[i].fd;
		pthread_cond_broadcast(&SRV.cv);
	}
	pthread_mutex_unlock(&SRV.mu);
	return NULL;
}

static void *srv_flusher(void *arg)
{
	(void)arg;
	int fds[SRV_MAXREQ];
	pthread_mutex_lock(&SRV.mu);
	for (;;) {
		while (!SRV.nfds && !SRV.quit)
			pthread_cond_wait(&SRV.cv, &SRV.mu);
		if (!SRV.nfds)
			break;
		int n = SRV.nfds;
		memcpy(fds, SRV.fds, (size_t)n * sizeof *fds);
		SRV.nfds = 0;
		pthread_mutex_unlock(&SRV.mu);
		int e = store_flush(SRV.s); /* every batch taken was committed before it began */
		if (e)
			bench_die("flush", e);
		for (int i = 0; i < n; i++)
			srv_reply(fds[i]);
		pthread_mutex_lock(&SRV.mu);
	}
	pthread_mutex_unlock(&SRV.mu);
	return NULL;
}

enum { SRV_PLAIN, SRV_PIPED, SRV_GATHER, SRV_GATHER_JSON, SRV_KINDS };
static const char *const srv_name[SRV_KINDS] = { "plain", "pipelined", "gathering", "gathering-json" };
#define SRV_GATHER_US 1000 /* how long the gathering server waits for every client */

/* The bare server's listening socket at sockpath, on a new epoll instance
 * (*ep; the listener's event carries NULL). */
static int srv_listen(const char *sockpath, int *ep)
{
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(sockpath) >= sizeof sa.sun_path)
		bench_fail("the bare server's socket path is too long: %s", sockpath);
	memcpy(sa.sun_path, sockpath, strlen(sockpath) + 1);
	unlink(sockpath);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 128) < 0)
		bench_die("the bare server's socket", -errno);
	*ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (*ep < 0 || epoll_ctl(*ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		bench_die("epoll", -errno);
	return lfd;
}

/* A client connected: its record in cs[*ncs], on ep. */
static void srv_accept(int ep, int lfd, struct srv_conn **cs, int *ncs)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0 || *ncs == NCLIENTS_MAX)
		bench_fail("the bare server: accept (%d clients)", *ncs);
	struct srv_conn *c = cs[(*ncs)++] = calloc(1, sizeof *c);
	struct epoll_event cev = { .events = EPOLLIN, .data.ptr = c };
	if (!c || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev) < 0)
		bench_die("epoll_ctl", -errno);
	c->fd = fd;
}

/* Read what c sent: each whole line a request in rq from rq[nr] on. The
 * requests held now, or -1 when c hung up (it is gone from cs). */
static int srv_read(int ep, struct srv_conn *c, struct srv_conn **cs, int *ncs, struct srv_req *rq, int nr, int json)
{
	ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len - 1);
	if (r <= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		for (int i = 0; i < *ncs; i++)
			if (cs[i] == c)
				cs[i] = cs[--*ncs];
		free(c);
		return -1;
	}
	c->len += (size_t)r;
	char *nl;
	while ((nl = memchr(c->buf, '\n', c->len))) {
		*nl = 0;
		if (nr == SRV_MAXREQ ||
		    (json ? srv_parse_json(c->buf, (size_t)(nl - c->buf), &rq[nr])
			  : srv_field(c->buf, "\"conversation\":\"", rq[nr].conv, sizeof rq[nr].conv) ||
				    srv_field(c->buf, "\"event_id\":\"", rq[nr].eid, sizeof rq[nr].eid)))
			bench_fail("the bare server: a request it cannot serve: %.200s", c->buf);
		rq[nr++].fd = c->fd;
		size_t used = (size_t)(nl - c->buf) + 1;
		memmove(c->buf, c->buf + used, c->len - used);
		c->len -= used;
	}
	return nr;
}

/* Serve the nr requests in hand: committed and acked here, or (piped)
 * handed to the writer thread. */
static void srv_serve(struct srv_req *rq, int nr, int piped, int json)
{
	if (!piped) {
		srv_commit(rq, nr, STORE_WRITE);
		for (int i = 0; i < nr; i++)
			if (json)
				srv_reply_json(&rq[i]);
			else
				srv_reply(rq[i].fd);
		return;
	}
	pthread_mutex_lock(&SRV.mu);
	if (SRV.ntodo + nr > SRV_MAXREQ)
		bench_fail("the bare server: %d requests waiting", SRV.ntodo + nr);
	memcpy(SRV.todo + SRV.ntodo, rq, (size_t)nr * sizeof *rq);
	SRV.ntodo += nr;
	pthread_cond_broadcast(&SRV.cv);
	pthread_mutex_unlock(&SRV.mu);
}

/* The server's process: serve until every client that connected has hung
 * up, then write its figures to `out` and exit. */
static void srv_main(const char *sockpath, int kind, int ready, int out, long ballast_have, long ballast_upto)
{
	char name[64];
	snprintf(name, sizeof name, "lmdb-server-%s", srv_name[kind]);
	SRV.s = scratch_store(name, 0, &SRV.sb);
	int piped = kind == SRV_PIPED, json = kind == SRV_GATHER_JSON, gather = kind == SRV_GATHER || json;
	peer_convs(SRV.s, "srv");
	loop_ballast = ballast_have;
	loop_top_up(SRV.s, &SRV.sb, ballast_upto);
	SRV.txns = 0;
	int ep, lfd = srv_listen(sockpath, &ep);
	pthread_t wt, ft;
	if (piped && (pthread_create(&wt, NULL, srv_writer, NULL) || pthread_create(&ft, NULL, srv_flusher, NULL)))
		bench_fail("the bare server's threads");
	srv_write_all(ready, "r", 1);
	struct srv_conn *cs[NCLIENTS_MAX];
	static struct srv_req rq[SRV_MAXREQ]; /* clen 0 but in gathering-json */
	int ncs = 0, ever = 0;
	double cpu0 = cpu_s(RUSAGE_SELF);
	double wb0 = write_bytes(0);
	int nr = 0;       /* requests read, not yet committed */
	double first = 0; /* when the oldest of them was read */
	while (!ever || ncs > 0) {
		struct epoll_event evs[NCLIENTS_MAX + 1];
		/* Gathering with requests in hand: wait no longer than their deadline. */
		int gathering = gather && nr;
		double left = gathering ? first + SRV_GATHER_US / 1e6 - bench_now() : 0;
		struct timespec ts = { 0, left > 0 ? (long)(left * 1e9) : 0 };
		int n = epoll_pwait2(ep, evs, NCLIENTS_MAX + 1, gathering ? &ts : NULL, NULL);
		if (n < 0 && errno != EINTR)
			bench_die("epoll_wait", -errno);
		int had = nr;
		for (int k = 0; k < n; k++) {
			struct srv_conn *c = evs[k].data.ptr;
			if (!c) {
				srv_accept(ep, lfd, cs, &ncs);
				ever = 1;
				continue;
			}
			int now = srv_read(ep, c, cs, &ncs, rq, nr, json);
			if (now >= 0)
				nr = now;
		}
		if (!nr)
			continue;
		if (!had)
			first = bench_now();
		/* Gathering: until every client has a request in, or the oldest waited SRV_GATHER_US. */
		if (gather && nr < ncs && bench_now() < first + SRV_GATHER_US / 1e6)
			continue;
		srv_serve(rq, nr, piped, json);
		nr = 0;
	}
	if (piped) {
		pthread_mutex_lock(&SRV.mu);
		SRV.quit = 1;
		pthread_cond_broadcast(&SRV.cv);
		pthread_mutex_unlock(&SRV.mu);
		pthread_join(wt, NULL);
		pthread_join(ft, NULL);
	}
	struct srv_stats fs = { cpu_s(RUSAGE_SELF) - cpu0, write_bytes(0) - wb0, SRV.txns };
	srv_write_all(out, (const char *)&fs, sizeof fs);
	store_close(SRV.s);
	msgpack_sbuffer_destroy(&SRV.sb);
	_exit(0);
}

static long srv_ballast[SRV_KINDS]; /* ballast events in each server's grown store */

/* A bare server's figures: sends per second, its CPU per send (every
 * thread), pages per commit and sends per commit. */
struct srv_fig {
	double rps, cpu_us, pages, batch;
};

/* A bare server of that kind, started on its grown store (topped up to
 * `ballast` events), served n sends by the 50 clients. */
static struct srv_fig lmdb_server_rate(int kind, long n, long ballast)
{
	char sock[PATH_MAX];
	harness_path(sock, sizeof sock, "%s/lmdb-server.sock", scratch);
	int rp[2], op[2];
	if (pipe2(rp, O_CLOEXEC) < 0 || pipe2(op, O_CLOEXEC) < 0)
		bench_die("pipe", -errno);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		bench_die("fork", -errno);
	if (pid == 0) {
		close(rp[0]);
		close(op[0]);
		srv_main(sock, kind, rp[1], op[1], srv_ballast[kind], ballast);
	}
	close(rp[1]);
	close(op[1]);
	char b;
	if (read(rp[0], &b, 1) != 1)
		bench_fail("the bare LMDB server did not start");
	close(rp[0]);
	if (ballast > srv_ballast[kind])
		srv_ballast[kind] = ballast;
	const char *socks[] = { sock };
	send_prefix = "srv";
	struct harness_load_fig f = harness_load(socks, 1, NCLIENTS_MAX, n, line_send, NULL);
	send_prefix = "b";
	struct srv_stats fs;
	if (read(op[0], &fs, sizeof fs) != (ssize_t)sizeof fs)
		bench_fail("the bare LMDB server ended without its figures");
	close(op[0]);
	int st = harness_reap(pid, 10000);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		bench_fail("the bare LMDB server failed (status %d)", st);
	return (struct srv_fig){ f.rps, fs.cpu_s * 1e6 / (double)n, fs.txns ? fs.wbytes / 4096 / (double)fs.txns : 0,
				 fs.txns ? (double)n / (double)fs.txns : 0 };
}

/* ---- the report ------------------------------------------------------ */

enum { T_PING1, T_PING50, T_SEND1, T_SEND50, NTESTS };
static const struct {
	const char *name, *redis_test, *redis_row;
	int clients, send;
	long n, n_redis; /* requests per run: 0.3-1 s of each at its own speed, long enough for
			 * the 50-client send to reach its steady state (every worker queued
			 * for the write gate has had its turn several times) */
	double target;   /* minimum agentd/Redis ratio; 0: none */
} tests[NTESTS] = {
	{ "ping, 1 client", "ping_mbulk", "PING_MBULK", 1, 0, 20000, 20000, 1.0 },
	{ "ping, 50 clients", "ping_mbulk", "PING_MBULK", 50, 0, 150000, 100000, 1.0 },
	{ "durable send/SET, 1 client", "set", "SET", 1, 1, 1500, 5000, 0 },
	{ "durable send/SET, 50 clients", "set", "SET", 50, 1, 20000, 60000, 0.5 },
};

static struct fig fa[NTESTS][BENCH_MAX_RUNS], fr[NTESTS][BENCH_MAX_RUNS], fdiag[BENCH_MAX_RUNS];
static double one_txn[BENCH_MAX_RUNS], group_size[BENCH_MAX_RUNS], turns_per_send[BENCH_MAX_RUNS];
static double grants_per_group[BENCH_MAX_RUNS];
static double dwait_ms[NTESTS][BENCH_MAX_RUNS]; /* a send reply's mean wait for the durable frontier */
static double diag_group[BENCH_MAX_RUNS];
static double lmdb_loop[BENCH_MAX_RUNS], lmdb_loop_fresh[BENCH_MAX_RUNS], flushes_per_send[BENCH_MAX_RUNS];
static double parked_cpu_us[BENCH_MAX_RUNS], bare_cpu_us[BENCH_MAX_RUNS]; /* CPU per send */
static double parked_pages[BENCH_MAX_RUNS], bare_pages[BENCH_MAX_RUNS];     /* pages written per commit */
static struct srv_fig srv_figs[SRV_KINDS][BENCH_MAX_RUNS]; /* the bare servers */

static double med_field(const struct fig *f, int n, int field)
{
	double v[BENCH_MAX_RUNS];
	for (int k = 0; k < n; k++)
		v[k] = field == 0 ? f[k].rps : field == 1 ? f[k].p50_ms : f[k].p99_ms;
	return bench_median(v, n);
}

static double med_ratio(const struct fig *a, const struct fig *b, int n, double *lo, double *hi)
{
	double q[BENCH_MAX_RUNS];
	for (int k = 0; k < n; k++)
		q[k] = b[k].rps > 0 ? a[k].rps / b[k].rps : 0;
	bench_range(q, n, lo, hi);
	return bench_median(q, n);
}

static long scaled(long n)
{
	long m = quick ? n / 10 : n;
	return m < 50 ? 50 : m;
}

/* One row of tests[] in run `run` (timed: its figures kept): agentd and
 * Redis, the order alternating with the run, and for the sends the
 * counters read around agentd's load. */
static void run_test(int run, int timed, int t)
{
	long n = timed ? scaled(tests[t].n) : scaled(tests[t].n) / 5 + 50;
	long nr = timed ? scaled(tests[t].n_redis) : scaled(tests[t].n_redis) / 5 + 50;
	struct fig a, r = { 0 };
	double c0 = 0, w0 = 0, e0 = 0, g0 = 0;
	int redis_first = run % 2;
	if (redis_first)
		r = redis_bench(tests[t].redis_test, tests[t].redis_row, tests[t].clients, nr);
	if (tests[t].send)
		agentd_settle("b", 50);
	if (t == T_SEND50) {
		c0 = agentd_counter("agentd_group_commits_total");
		w0 = agentd_counter("agentd_group_writes_total");
		g0 = agentd_counter("agentd_write_gate_grants_total");
		e0 = agentd_events("b", 50);
	}
	double ds0 = 0, dn0 = 0;
	if (tests[t].send) {
		ds0 = agentd_counter("agentd_reply_durable_wait_seconds_sum");
		dn0 = agentd_counter("agentd_reply_durable_wait_seconds_count");
	}
	send_prefix = "b";
	a = agentd_load(tests[t].clients, n, tests[t].send ? line_send : line_ping);
	if (tests[t].send && timed) {
		double ds1 = agentd_counter("agentd_reply_durable_wait_seconds_sum");
		double dn1 = agentd_counter("agentd_reply_durable_wait_seconds_count");
		dwait_ms[t][run] = dn1 > dn0 ? (ds1 - ds0) * 1e3 / (dn1 - dn0) : 0;
	}
	if (t == T_SEND50 && timed) {
		double c1 = agentd_counter("agentd_group_commits_total");
		double w1 = agentd_counter("agentd_group_writes_total");
		double g1 = agentd_counter("agentd_write_gate_grants_total");
		double e1 = agentd_events("b", 50);
		group_size[run] = c1 > c0 ? (w1 - w0) / (c1 - c0) : 0;
		grants_per_group[run] = c1 > c0 ? (g1 - g0) / (c1 - c0) : 0;
		/* Each turn appends one assistant_msg: events beyond the sends are turns. */
		turns_per_send[run] = (e1 - e0 - (double)n) / (double)n;
	}
	if (!redis_first)
		r = redis_bench(tests[t].redis_test, tests[t].redis_row, tests[t].clients, nr);
	if (timed) {
		fa[t][run] = a;
		fr[t][run] = r;
		if (verbose)
			fprintf(stderr, "run %d %-30s agentd %9.0f/s p50 %.3f p99 %.3f | redis %9.0f/s p50 %.3f p99 %.3f\n",
				run, tests[t].name, a.rps, a.p50_ms, a.p99_ms, r.rps, r.p50_ms, r.p99_ms);
		if (verbose && tests[t].send)
			fprintf(stderr, "run %d   %.3f ms mean wait of a reply for the durable frontier\n", run,
				dwait_ms[t][run]);
		if (verbose && t == T_SEND50)
			fprintf(stderr, "run %d   %.1f sends and %.2f worker writes per group commit, %.3f turns per send\n",
				run, group_size[run], grants_per_group[run], turns_per_send[run]);
	}
}

/* Diagnostic: the same 50-client send, to conversations whose workers
 * are parked in a model call, so no turn commits compete. */
static struct fig run_parked(int run, int timed)
{
	long n = timed ? scaled(20000) : 100;
	agentd_settle("b", 50);
	double c0 = agentd_counter("agentd_group_commits_total");
	double w0 = agentd_counter("agentd_group_writes_total");
	double f0 = agentd_counter("agentd_durable_flushes_total");
	send_prefix = "s";
	double cpu0 = agentd_cpu_s(), wb0 = write_bytes(agentd.pid);
	struct fig d = agentd_load(50, n, line_send);
	double cpu1 = agentd_cpu_s(), wb1 = write_bytes(agentd.pid);
	send_prefix = "b";
	if (timed) {
		double c1 = agentd_counter("agentd_group_commits_total");
		double w1 = agentd_counter("agentd_group_writes_total");
		diag_group[run] = c1 > c0 ? (w1 - w0) / (c1 - c0) : 0;
		/* Each group commit flushes once (its pages); the frontier's
		 * flusher adds its own. Per acknowledged send. */
		double f1 = agentd_counter("agentd_durable_flushes_total");
		flushes_per_send[run] = ((c1 - c0) + (f1 - f0)) / (double)n;
		parked_cpu_us[run] = (cpu1 - cpu0) * 1e6 / (double)n;
		parked_pages[run] = c1 > c0 ? (wb1 - wb0) / 4096 / (c1 - c0) : 0;
		fdiag[run] = d;
	}
	return d;
}

/* The bare LMDB loop and servers beside the parked row (d); with -o, their
 * figures said for this run. Returns the loop's sends per second. */
static double run_bare(int run, int timed, struct fig d)
{
	/* The bare LMDB loop runs with the parked row even in a partial run:
	 * the parked row is only meaningful beside it. Its store grows as
	 * agentd's: its own conversations as the parked ones, ballast as the
	 * echo row's. The same loop on a fresh store is printed beside it. */
	long ballast = (long)agentd_events("b", NCLIENTS_MAX);
	long nl = timed ? scaled(20000) : 500;
	struct srv_fig sf[SRV_KINDS];
	/* The servers and the loop, in an order turning with the run. */
	double loop = 0;
	for (int i = 0; i <= SRV_KINDS; i++) {
		int k = (i + run) % (SRV_KINDS + 1);
		if (k == SRV_KINDS)
			loop = lmdb_loop_rate(50, nl, run, 1, ballast);
		else
			sf[k] = lmdb_server_rate(k, nl, ballast);
	}
	if (timed) {
		lmdb_loop[run] = loop;
		bare_cpu_us[run] = loop_cpu_us;
		bare_pages[run] = loop_pages;
		for (int k = 0; k < SRV_KINDS; k++)
			srv_figs[k][run] = sf[k];
		lmdb_loop_fresh[run] = lmdb_loop_rate(50, scaled(20000), run, 0, 0);
	}
	if (only) {
		if (timed && verbose)
			fprintf(stderr, "run %d send50 no turns %.0f/s p50 %.3f p99 %.3f (group %.1f, %.3f flushes/send, "
				"agentd CPU %.1f us/send, %.0f pages/commit) | bare LMDB loop %.0f/s (CPU %.1f us/send, "
				"%.0f pages/commit; fresh store %.0f/s) | parked/loop %.2fx\n",
				run, d.rps, d.p50_ms, d.p99_ms, diag_group[run], flushes_per_send[run], parked_cpu_us[run],
				parked_pages[run], loop, bare_cpu_us[run], bare_pages[run], lmdb_loop_fresh[run],
				loop > 0 ? d.rps / loop : 0);
		for (int k = 0; timed && verbose && k < SRV_KINDS; k++)
			fprintf(stderr, "run %d   bare LMDB server, %s: %.0f/s (%.1f sends/commit, CPU %.1f us/send, %.0f "
				"pages/commit) | it/loop %.2fx | parked/it %.2fx\n",
				run, srv_name[k], sf[k].rps, sf[k].batch, sf[k].cpu_us, sf[k].pages,
				loop > 0 ? sf[k].rps / loop : 0, sf[k].rps > 0 ? d.rps / sf[k].rps : 0);
	}
	return loop;
}

static void run_once(int run, int timed)
{
	for (int t = 0; t < NTESTS; t++)
		if (!only || strstr(tests[t].name, only))
			run_test(run, timed, t);
	if (only && !strstr("send, 50 clients, workers parked", only))
		return;
	struct fig d = run_parked(run, timed);
	double loop = run_bare(run, timed, d);
	if (only)
		return;
	double rate = one_txn_rate(timed ? scaled(400) : 50, timed ? run : 99);
	if (timed) {
		one_txn[run] = rate;
		if (verbose)
			fprintf(stderr, "run %d send50 no turns %.0f/s (group %.1f); bare LMDB loop %.0f/s (fresh store "
				"%.0f/s); one event per txn %.0f/s; group %.1f sends/commit, %.2f turns/send\n", run, d.rps,
				diag_group[run], loop, lmdb_loop_fresh[run], rate, group_size[run], turns_per_send[run]);
	}
}

static double probe[4]; /* bench_flush_ms: 1, 10, 50 scattered pages; 50 contiguous */

static const char *probe_line(void)
{
	static char line[200];
	snprintf(line, sizeof line,
		 "disk: fdatasync after 1, 10, 50 scattered 4 KiB pages %.2f, %.2f, %.2f ms; after 50 contiguous %.2f ms",
		 probe[0], probe[1], probe[2], probe[3]);
	return line;
}

static const char *verdict(double v, double target)
{
	return v >= target ? "PASS" : "MISS";
}

/* The bare servers' rows, each one's ratio to the bare loop, and the parked
 * row's ratio to each, over n runs (ratios per run: median and range). */
static void servers_report(int n)
{
	for (int i = 0; i < SRV_KINDS; i++) {
		const struct srv_fig *sv = srv_figs[i];
		double r[BENCH_MAX_RUNS], l[BENCH_MAX_RUNS], v[4][BENCH_MAX_RUNS], lo, hi, llo, lhi;
		for (int k = 0; k < n; k++) {
			r[k] = sv[k].rps > 0 ? fdiag[k].rps / sv[k].rps : 0;
			l[k] = lmdb_loop[k] > 0 ? sv[k].rps / lmdb_loop[k] : 0;
			v[0][k] = sv[k].rps;
			v[1][k] = sv[k].batch;
			v[2][k] = sv[k].cpu_us;
			v[3][k] = sv[k].pages;
		}
		bench_range(r, n, &lo, &hi);
		bench_range(l, n, &llo, &lhi);
		char name[64];
		snprintf(name, sizeof name, "bare LMDB server, %s", srv_name[i]);
		printf("%-44s %10.0f/s, %.1f sends per commit, CPU %.1f us per send, %.0f pages per commit; "
		       "it / bare loop %.2fx (%.2f-%.2f); parked / it %.2fx (%.2f-%.2f)\n",
		       name, bench_median(v[0], n), bench_median(v[1], n), bench_median(v[2], n), bench_median(v[3], n),
		       bench_median(l, n), llo, lhi, bench_median(r, n), lo, hi);
	}
}

static void report(const char *machine, const char *fs, const char *load0, const char *load1)
{
	int n = nruns;
	printf("\nagentd control protocol beside Redis %s, Unix sockets, median of %d runs\n", redis_version, n);
	printf("machine: %s\nfilesystem: %s\nload average: before %s, after %s\n%s\n\n", machine, fs, load0, load1,
	       probe_line());
	printf("%-30s %10s %8s %8s | %10s %8s %8s | %-22s %s\n", "figure", "agentd/s", "p50 ms", "p99 ms", "redis/s",
	       "p50 ms", "p99 ms", "ratio (range)", "target");
	for (int t = 0; t < NTESTS; t++) {
		double lo, hi, q = med_ratio(fa[t], fr[t], n, &lo, &hi);
		char tg[40] = "-";
		if (tests[t].target > 0)
			snprintf(tg, sizeof tg, ">= %.1fx %s", tests[t].target, verdict(q, tests[t].target));
		printf("%-30s %10.0f %8.3f %8.3f | %10.0f %8.3f %8.3f | %5.2fx (%.2f-%.2f)%*s %s\n", tests[t].name,
		       med_field(fa[t], n, 0), med_field(fa[t], n, 1), med_field(fa[t], n, 2), med_field(fr[t], n, 0),
		       med_field(fr[t], n, 1), med_field(fr[t], n, 2), q, lo, hi, 4, "", tg);
	}
	/* What waiting for durability adds to a reply, once its commit returned. */
	for (int t = 0; t < NTESTS; t++)
		if (tests[t].send)
			printf("%-44s %10.3f ms mean, of a p50 reply of %.3f ms\n",
			       t == T_SEND1 ? "send, 1 client: wait for the durable frontier"
					    : "send, 50 clients: wait for the frontier",
			       bench_median(dwait_ms[t], n), med_field(fa[t], n, 1));
	/* Group commit's gain: 50-client sends over one event per transaction. */
	double g[BENCH_MAX_RUNS], lo, hi;
	for (int k = 0; k < n; k++)
		g[k] = one_txn[k] > 0 ? fa[T_SEND50][k].rps / one_txn[k] : 0;
	bench_range(g, n, &lo, &hi);
	double gain = bench_median(g, n);
	printf("\n%-44s %10.0f events/s\n", "one event per durable transaction (store)", bench_median(one_txn, n));
	printf("%-44s %10.2fx (%.2f-%.2f)   target >= 3.0x %s\n", "send, 50 clients / one event per transaction", gain,
	       lo, hi, verdict(gain, 3.0));
	printf("%-44s %10.1f sends per group commit, %.2f echo turns per send\n", "send, 50 clients: batching",
	       bench_median(group_size, n), bench_median(turns_per_send, n));
	double dr[BENCH_MAX_RUNS];
	for (int k = 0; k < n; k++)
		dr[k] = fdiag[k].rps;
	printf("%-44s %10.0f/s p50 %.3f ms p99 %.3f ms, %.1f sends per group commit, %.2f flushes per send\n",
	       "send, 50 clients, workers parked (no turns)", bench_median(dr, n), med_field(fdiag, n, 1),
	       med_field(fdiag, n, 2), bench_median(diag_group, n), bench_median(flushes_per_send, n));
	/* The ceiling: a bare LMDB closed loop doing what a send does. */
	double pl[BENCH_MAX_RUNS], lr[BENCH_MAX_RUNS], ep[BENCH_MAX_RUNS], l2, h2, l3, h3;
	for (int k = 0; k < n; k++) {
		pl[k] = lmdb_loop[k] > 0 ? fdiag[k].rps / lmdb_loop[k] : 0;
		lr[k] = fr[T_SEND50][k].rps > 0 ? lmdb_loop[k] / fr[T_SEND50][k].rps : 0;
		ep[k] = fdiag[k].rps > 0 ? fa[T_SEND50][k].rps / fdiag[k].rps : 0;
	}
	bench_range(pl, n, &lo, &hi);
	bench_range(lr, n, &l2, &h2);
	bench_range(ep, n, &l3, &h3);
	printf("%-44s %10.0f/s, %.2fx (%.2f-%.2f) of Redis SET, 50 clients: the ceiling\n",
	       "bare LMDB closed loop, 50 clients", bench_median(lmdb_loop, n), bench_median(lr, n), l2, h2);
	printf("%-44s %10.0f/s (a fresh store each run)\n", "bare LMDB closed loop, fresh store",
	       bench_median(lmdb_loop_fresh, n));
	servers_report(n);
	printf("%-44s %10.1f us agentd (every thread), %.1f us the bare loop\n", "CPU per send, parked / bare loop",
	       bench_median(parked_cpu_us, n), bench_median(bare_cpu_us, n));
	printf("%-44s %10.0f agentd's group commit (%.1f sends), %.0f the bare loop's (50 sends)\n",
	       "pages written per commit, parked / bare loop", bench_median(parked_pages, n), bench_median(diag_group, n),
	       bench_median(bare_pages, n));
	printf("%-44s %10.2fx (%.2f-%.2f)   target >= 0.8x %s\n", "send, 50 clients, parked / bare LMDB loop",
	       bench_median(pl, n), lo, hi, verdict(bench_median(pl, n), 0.8));
	printf("%-44s %10.2fx (%.2f-%.2f)   target >= 0.8x %s\n", "send, 50 clients, echo / parked", bench_median(ep, n),
	       l3, h3, verdict(bench_median(ep, n), 0.8));
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_control [-d DIR] [-r RUNS] [-o NAME] [-q] [-k] [-v]\n");
}

static pid_t main_pid; /* cleanup is the benchmark's, not a forked helper's */

static void cleanup(void)
{
	if (getpid() != main_pid)
		return;
	harness_agentd_stop(&agentd);
	redis_stop();
	if (!keep && scratch[0])
		bench_rmtree(scratch);
}

/* A partial run (-o), for profiling: no report, only the parked row
 * beside the bare loop when it ran. */
static void partial_report(void)
{
	if (!strstr("send, 50 clients, workers parked", only))
		return;
	double pl[BENCH_MAX_RUNS], dr[BENCH_MAX_RUNS], lo, hi;
	for (int k = 0; k < nruns; k++) {
		pl[k] = lmdb_loop[k] > 0 ? fdiag[k].rps / lmdb_loop[k] : 0;
		dr[k] = fdiag[k].rps;
	}
	bench_range(pl, nruns, &lo, &hi);
	double dl, dh, bl, bh;
	bench_range(dr, nruns, &dl, &dh);
	bench_range(lmdb_loop, nruns, &bl, &bh);
	printf("parked %.0f/s (%.0f-%.0f), bare LMDB loop %.0f/s (%.0f-%.0f; fresh store %.0f/s), "
	       "parked/bare %.2fx (%.2f-%.2f); "
	       "CPU per send: agentd %.1f us, bare loop %.1f us; pages per commit: agentd %.0f, bare loop "
	       "%.0f; %.1f sends per group commit, %.3f flushes per send; median of %d runs\n",
	       bench_median(dr, nruns), dl, dh, bench_median(lmdb_loop, nruns), bl, bh,
	       bench_median(lmdb_loop_fresh, nruns), bench_median(pl, nruns),
	       lo, hi, bench_median(parked_cpu_us, nruns), bench_median(bare_cpu_us, nruns),
	       bench_median(parked_pages, nruns), bench_median(bare_pages, nruns),
	       bench_median(diag_group, nruns), bench_median(flushes_per_send, nruns), nruns);
	servers_report(nruns);
}

/* Setup: the conversations the rows send to, b-N with the echo model and
 * s-N with the parked one, NCLIENTS_MAX of each. */
static void convs_create(void)
{
	ctl_conn *cc;
	if (harness_connect(&cc, agentd.sock, 5000))
		bench_fail("cannot connect to agentd");
	for (int i = 0; i < NCLIENTS_MAX; i++) {
		char id[32];
		snprintf(id, sizeof id, "b-%d", i);
		json_decref(harness_ok(cc, json_pack("{sssss{ss}}", "op", "create", "conversation", id, "settings", "model",
						  "echo"), "create"));
		snprintf(id, sizeof id, "s-%d", i);
		json_decref(harness_ok(cc, json_pack("{sssss{ss}}", "op", "create", "conversation", id, "settings", "model",
						  "slow"), "create"));
	}
	ctl_close(cc);
}

int main(int argc, char **argv)
{
	const char *dir = ".";
	int c, runs_set = 0;
	while ((c = getopt(argc, argv, "d:r:o:qkvh")) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'r':
			nruns = atoi(optarg);
			runs_set = 1;
			break;
		case 'o': only = optarg; break;
		case 'q': quick = 1; break;
		case 'k': keep = 1; break;
		case 'v': verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (quick && !runs_set)
		nruns = 3;
	if (nruns < 1 || nruns > BENCH_MAX_RUNS) {
		fprintf(stderr, "bench_control: -r takes 1 to %d\n", BENCH_MAX_RUNS);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	harness_bindir(bindir, sizeof bindir);
	harness_scratch(scratch, sizeof scratch, dir, "bench-control");
	main_pid = getpid();
	atexit(cleanup);

	char machine[512], fs[512], load0[128], load1[128];
	int tmpfs;
	bench_machine(machine, sizeof machine);
	bench_filesystem(scratch, fs, sizeof fs, &tmpfs);
	bench_loadavg(load0, sizeof load0);
	if (tmpfs)
		fprintf(stderr, "bench_control: warning: %s is a memory filesystem: the durable figures flush nothing\n",
			scratch);

	/* What a flushed page costs on this disk: an LMDB commit flushes its
	 * dirty pages wherever the tree and the free list put them. */
	probe[0] = bench_flush_ms(scratch, 1, 0, 15);
	probe[1] = bench_flush_ms(scratch, 10, 0, 15);
	probe[2] = bench_flush_ms(scratch, 50, 0, 15);
	probe[3] = bench_flush_ms(scratch, 50, 1, 15);
	if (verbose)
		fprintf(stderr, "bench_control: %s\n", probe_line());

	redis_start();
	static const char config[] =
		"; bench_control: the echo model is built in; `slow` parks a worker in a model\n"
		"; call that never returns (the diagnostic row).\n"
		"[model.slow]\ncommand = /bin/sleep 7200\ntimeout = 3h\nretries = 0\n";
	harness_agentd_start(&agentd, bindir, scratch, config, NULL);
	convs_create();

	fprintf(stderr, "bench_control: warm-up\n");
	run_once(0, 0);
	for (int run = 0; run < nruns; run++) {
		fprintf(stderr, "bench_control: run %d of %d\n", run + 1, nruns);
		run_once(run, 1);
	}
	bench_loadavg(load1, sizeof load1);
	if (only) {
		partial_report();
		return 0;
	}
	report(machine, fs, load0, load1);
	printf("\nscratch: %s%s\n", scratch, keep ? " (kept)" : "");
	return 0;
}
