/*
 * bench_supervisor: the supervisor's figures beside their raw limits, in one run.
 *
 * revival   kill -> revived worker ready, for conversations of 100 and 10,000
 *           events, with and without a summary, beside the raw spawn:
 *           fork+exec+wait of raw_spawn_child (exec, open the LMDB environment
 *           read-only, read one key), timed in the same loop on the same store.
 *           One revival: the conversation's idle worker is killed with the
 *           `kill` op (SIGKILL) and reaped; then, from the moment the `send`
 *           is written, the time until `get` shows the new worker past
 *           `starting` (it opened the store, read "latest summary + events
 *           after it" and reported ready): the figure. Also reported: the
 *           time until the send is acknowledged and until the echo answer is
 *           in the log. Every conversation is revived once, so each revival
 *           reads exactly the log it was seeded with (plus one warm-up turn).
 * memory    private RSS (Private_Clean + Private_Dirty, smaps_rollup) of idle
 *           workers, and how many live workers this machine holds: batches of
 *           50 conversations are started (create, send, wait until idle)
 *           until the cap (-n, default 2000), an error, or a stop condition.
 * expiry    lateness of 1,000 human-tool timers: 1,000 conversations each ask
 *           the echo model for "/tool approve"; the calls expire while their
 *           workers wait. Two regimes, each on its own agentd: `spread`, the
 *           calls started one every -i ms (default 20), so each expiry's two
 *           commits (the resolution, then the woken worker's turn) are done
 *           before the next deadline; and `burst`, started as fast as agentd
 *           takes them (half as many), so the deadlines come as densely as
 *           commits allow.
 *           Lateness is the resolution event's inserted_at minus the call's
 *           deadline (ms, as the store stamps them), and, to the microsecond,
 *           the arrival of the resolution on a `watch` of the conversation
 *           minus the deadline. Beside each, a bare timerfd (CLOCK_REALTIME,
 *           absolute) re-armed to the next of the same deadlines, its
 *           lateness measured the same two ways: on a thread of this process
 *           while agentd fires them (alongside: the same minute of a shared
 *           machine, the peer the targets use), and again alone afterwards
 *           (replayed, shifted to the future, while agentd idles).
 *
 * The conversations of the revival phase are written straight into the store
 * with the store library before agentd starts (10,000 events through `send`
 * would take minutes). Each phase runs its own agentd (sync=full) on its own
 * data directory under the scratch directory. Targets print PASS or MISS.
 *
 * Usage: bench_supervisor [-d DIR] [-r REPS] [-n MAX_WORKERS] [-t TIMERS] [-i MS] [-e SECS] [-o PHASE] [-q] [-k] [-v]
 *   -d DIR   where the scratch directory goes (default "."): the disk to measure
 *   -r REPS  revivals per case (default 20)
 *   -n N     stop the capacity phase at N live workers (default 2000)
 *   -t N     expiry timers (default 1000)
 *   -i MS    the spread regime's pace (default 20); its expiry is 1.5 times
 *            the paced time to start them all, plus 10 s
 *   -e SECS  the burst regime's expiry (default 30): longer than starting them takes
 *   -o PHASE only this phase: revival, memory or expiry (or one of its
 *            regimes: spread, burst)
 *   -q       quick: 5 revivals per case, 200 workers, 200 timers (burst expiring after 10 s)
 *   -k       keep the scratch directory (agentd's logs are there)
 *   -v       print progress and every sample's figure (on stderr)
 */
#include "bench/bench.h"
#include "bench/harness.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int reps = 20, max_workers = 2000, ntimers = 1000, pace_ms = 20, expires_s = 30, quick, keep, verbose;
static const char *only;
static char scratch[PATH_MAX], bindir[PATH_MAX];
static struct harness_agentd agentd;

#define SEC(x) ((x) * 1e3) /* seconds to ms, for printing */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	if (!verbose)
		return;
	va_start(ap, fmt);
	fputs("bench_supervisor: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void phase_dir(char *buf, size_t len, const char *name)
{
	harness_path(buf, len, "%s/%s", scratch, name);
	bench_mkdir(buf);
}

/* ---- control helpers ------------------------------------------------- */

static void conn_open(ctl_conn **c)
{
	if (harness_connect(c, agentd.sock, 5000))
		bench_fail("cannot connect to agentd on %s", agentd.sock);
}

/* The conversation's worker: 1 and its pid and state when it has a process. */
static int worker_of(ctl_conn *c, const char *id, pid_t *pid, char *state, size_t n)
{
	json_t *r = harness_ok(c, json_pack("{ssss}", "op", "get", "conversation", id), "get");
	json_t *w = json_object_get(json_object_get(r, "conversation"), "worker");
	int live = json_is_object(w);
	if (live) {
		if (pid)
			*pid = (pid_t)json_integer_value(json_object_get(w, "pid"));
		if (state)
			snprintf(state, n, "%s", json_string_value(json_object_get(w, "state")));
	}
	json_decref(r);
	return live;
}

/* Poll until the worker is in `want` ("" : gone), pausing `pause_us`
 * between polls. */
static void wait_worker(ctl_conn *c, const char *id, const char *want, int pause_us, double timeout_s)
{
	double until = bench_now() + timeout_s;
	char st[32] = "";
	for (;;) {
		int live = worker_of(c, id, NULL, st, sizeof st);
		if (*want ? live && !strcmp(st, want) : !live)
			return;
		if (bench_now() > until)
			bench_fail("%s: worker %s, not %s, after %.0f s", id, live ? st : "gone", *want ? want : "gone",
				   timeout_s);
		if (pause_us)
			usleep((useconds_t)pause_us);
	}
}

static uint64_t send_text(ctl_conn *c, const char *id, const char *text)
{
	json_t *r = harness_ok(c, json_pack("{ssssss}", "op", "send", "conversation", id, "content", text), "send");
	uint64_t seq = (uint64_t)json_integer_value(json_object_get(r, "seq"));
	json_decref(r);
	return seq;
}

/* Long-poll until an event of `type` after seq `after` is in the log. */
static json_t *wait_event(ctl_conn *c, const char *id, uint64_t after, const char *type)
{
	for (int i = 0; i < 6; i++) {
		json_t *r = harness_ok(c, json_pack("{sssssIsssi}", "op", "events", "conversation", id, "after",
						(json_int_t)after, "type", type, "wait_ms", 10000), "events");
		json_t *evs = json_object_get(r, "events");
		if (json_array_size(evs) > 0) {
			json_t *e = json_incref(json_array_get(evs, 0));
			json_decref(r);
			return e;
		}
		json_decref(r);
	}
	bench_fail("%s: no %s after seq %llu within 60 s", id, type, (unsigned long long)after);
}

/* ---- revival: seeding ------------------------------------------------ */

struct rcase {
	const char *prefix, *name;
	unsigned events, summary_to;
	int target; /* the 3x target applies */
	int nosync; /* diagnostic: revived by an agentd with --sync none */
};

static const struct rcase rcases[] = {
	{ "r100", "100 events, no summary", 100, 0, 1, 0 },
	{ "r200s", "200 events, 100 behind a summary", 200, 100, 1, 0 },
	{ "r10ks", "10,000 events, 9,900 behind a summary", 10000, 9900, 1, 0 },
	{ "r10k", "10,000 events, no summary", 10000, 0, 0, 0 },
	/* Where the time goes: the same small revival without the flushes of
	 * the send's and the lease's commits. */
	{ "n100", "100 events, --sync none (diagnostic)", 100, 0, 0, 1 },
};
#define NRCASES (sizeof rcases / sizeof rcases[0])

static const char lorem[] =
	"about the deploy of the api service to the staging cluster: the health check timed out after the "
	"migration step";

static void pack_msg(msgpack_sbuffer *sb, const char *text, uint64_t context_seq)
{
	msgpack_packer pk;
	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, context_seq ? 2 : 1);
	msgpack_pack_str_with_body(&pk, "text", 4);
	msgpack_pack_str_with_body(&pk, text, strlen(text));
	if (context_seq) {
		msgpack_pack_str_with_body(&pk, "context_seq", 11);
		msgpack_pack_uint64(&pk, context_seq);
	}
}

#define SEED_BATCH 1000

/* One conversation: user_msg at odd seqs, the echo's assistant_msg (its
 * context_seq the message before) at even ones, so the log owes nothing;
 * then the summary and the idle fsm_state a worker would have left. */
static void seed_conv(store *s, const char *id, const struct rcase *rc)
{
	static unsigned char bufs[SEED_BATCH][512];
	static struct store_event_in evs[SEED_BATCH];
	static uint64_t seqs[SEED_BATCH];
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	store_txn *t;
	int e;
	/* settings {"model": "echo"} */
	static const unsigned char settings[] = { 0x81, 0xa5, 'm', 'o', 'd', 'e', 'l', 0xa4, 'e', 'c', 'h', 'o' };
	if ((e = store_txn_begin(s, STORE_WRITE, &t)) || (e = store_conv_create(t, id, (store_bytes){ settings, sizeof settings })) ||
	    (e = store_txn_commit(t)))
		bench_die("seed: create", e);
	for (unsigned first = 1; first <= rc->events; first += SEED_BATCH) {
		unsigned n = rc->events - first + 1 < SEED_BATCH ? rc->events - first + 1 : SEED_BATCH;
		for (unsigned i = 0; i < n; i++) {
			unsigned seq = first + i;
			char text[256];
			if (seq % 2) {
				snprintf(text, sizeof text, "question %u %s", seq, lorem);
				pack_msg(&sb, text, 0);
				evs[i].type = "user_msg";
			} else {
				snprintf(text, sizeof text, "echo: question %u %s", seq - 1, lorem);
				pack_msg(&sb, text, seq - 1);
				evs[i].type = "assistant_msg";
			}
			if (sb.size > sizeof bufs[i])
				bench_fail("seed event too large");
			memcpy(bufs[i], sb.data, sb.size);
			evs[i].content = (store_bytes){ bufs[i], sb.size };
			evs[i].event_id = NULL;
		}
		if ((e = store_txn_begin(s, STORE_WRITE, &t)) || (e = store_events_append(t, id, evs, n, seqs, NULL)) ||
		    (e = store_txn_commit(t)))
			bench_die("seed: append", e);
	}
	if ((e = store_txn_begin(s, STORE_WRITE, &t)))
		bench_die("seed: begin", e);
	if (rc->summary_to) {
		char text[128];
		snprintf(text, sizeof text, "summary of %u events: questions about the staging deploy", rc->summary_to);
		pack_msg(&sb, text, 0);
		if ((e = store_summary_put(t, id, 1, rc->summary_to, (store_bytes){ sb.data, sb.size }, NULL)))
			bench_die("seed: summary", e);
	}
	/* fsm_state {"state":"idle","pending":{},"last_seq":N} */
	msgpack_packer pk;
	msgpack_sbuffer_clear(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	msgpack_pack_str_with_body(&pk, "state", 5);
	msgpack_pack_str_with_body(&pk, "idle", 4);
	msgpack_pack_str_with_body(&pk, "pending", 7);
	msgpack_pack_map(&pk, 0);
	msgpack_pack_str_with_body(&pk, "last_seq", 8);
	msgpack_pack_uint64(&pk, rc->events);
	if ((e = store_conv_put_fsm(t, id, (store_bytes){ sb.data, sb.size })) || (e = store_txn_commit(t)))
		bench_die("seed: fsm_state", e);
	msgpack_sbuffer_destroy(&sb);
}

static void seed(const char *data)
{
	store *s;
	/* No flush per batch: one store_sync at the end; the map sized for it. */
	struct store_opts so = { .sync = STORE_SYNC_NONE, .map_size = (size_t)4 << 30 };
	int e = store_open(&s, data, &so);
	if (e)
		bench_die("seed: store_open", e);
	for (size_t k = 0; k < NRCASES; k++)
		for (int r = 0; r < reps; r++) {
			char id[64];
			snprintf(id, sizeof id, "%s-%d", rcases[k].prefix, r);
			seed_conv(s, id, &rcases[k]);
		}
	if ((e = store_sync(s)))
		bench_die("seed: sync", e);
	store_close(s);
}

/* ---- revival: measuring ---------------------------------------------- */

static double raw_spawn_once(const char *child, const char *data)
{
	char *argv[] = { (char *)child, (char *)data, NULL };
	double t0 = bench_now();
	pid_t pid = fork();
	if (pid < 0)
		bench_die("fork", -errno);
	if (pid == 0) {
		execv(child, argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	double dt = bench_now() - t0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		bench_fail("%s %s failed (status %d)", child, data, st);
	return dt;
}

struct revival {
	double ack, ready, answer; /* seconds from writing the send */
	double kib;                /* the revived worker's private memory once idle */
};

/* Warm the conversation (one answered turn), kill its idle worker and wait
 * for the reap, then time the revival. */
static struct revival revive(ctl_conn *c, const char *id)
{
	struct revival rv;
	uint64_t seq = send_text(c, id, "warm up");
	json_decref(wait_event(c, id, seq, "assistant_msg"));
	wait_worker(c, id, "idle", 200, 30);
	json_decref(harness_ok(c, json_pack("{ssssss}", "op", "kill", "conversation", id, "signal", "KILL"), "kill"));
	wait_worker(c, id, "", 200, 30);

	double t0 = bench_now();
	seq = send_text(c, id, "are you back?");
	rv.ack = bench_now() - t0;
	/* Ready: past `starting`. Polls 100 us apart: the figure is within
	 * about a poll of the truth, and the poller leaves the worker a core. */
	char st[32];
	for (;;) {
		int live = worker_of(c, id, NULL, st, sizeof st);
		if (live && strcmp(st, "starting"))
			break;
		if (!live && bench_now() - t0 > 1)
			bench_fail("%s: no worker after the send", id);
		if (bench_now() - t0 > 60)
			bench_fail("%s: the worker never became ready", id);
		usleep(100);
	}
	rv.ready = bench_now() - t0;
	json_decref(wait_event(c, id, seq, "assistant_msg"));
	rv.answer = bench_now() - t0;
	/* Hibernate it: the next cases should not share the machine with it. */
	wait_worker(c, id, "idle", 200, 30);
	pid_t pid = 0;
	worker_of(c, id, &pid, NULL, 0);
	rv.kib = pid ? (double)harness_private_kib(pid) : -1;
	json_decref(harness_ok(c, json_pack("{ssss}", "op", "stop", "conversation", id), "stop"));
	return rv;
}

static const char *verdict(int ok)
{
	return ok ? "PASS" : "MISS";
}

static void phase_revival(void)
{
	char dir[PATH_MAX], child[PATH_MAX];
	phase_dir(dir, sizeof dir, "revival");
	harness_path(child, sizeof child, "%s/bench/raw_spawn_child", bindir);
	char data[PATH_MAX];
	harness_path(data, sizeof data, "%s/data", dir);
	bench_mkdir(data);
	double t0 = bench_now();
	seed(data);
	say("revival: seeded %zu conversations in %.1f s", NRCASES * (size_t)reps, bench_now() - t0);
	/* compact_events = 0: no compaction behind our back, so the
	 * no-summary conversations stay without one. */
	static const char config[] = "[agentd]\ncompact_events = 0\n";
	harness_agentd_start(&agentd, bindir, dir, config, NULL);
	ctl_conn *c;
	conn_open(&c);

	int nraw = reps * 6;
	double *raw = calloc((size_t)nraw, sizeof *raw);
	struct revival(*rv)[NRCASES] = calloc((size_t)reps, sizeof *rv);
	if (!raw || !rv)
		bench_fail("out of memory");
	/* Warm the page cache and the binaries: one untimed spawn each. */
	raw_spawn_once(child, data);
	int iraw = 0;
	for (int nosync = 0; nosync < 2; nosync++) {
		if (nosync) {
			static const char *const none[] = { "--sync", "none", NULL };
			ctl_close(c);
			harness_agentd_stop(&agentd);
			harness_agentd_start(&agentd, bindir, dir, config, none);
			conn_open(&c);
		}
		for (int r = 0; r < reps; r++) {
			for (size_t j = 0; j < NRCASES; j++) {
				size_t k = (j + (size_t)r) % NRCASES; /* rotate the order */
				if (rcases[k].nosync != nosync)
					continue;
				char id[64];
				snprintf(id, sizeof id, "%s-%d", rcases[k].prefix, r);
				rv[r][k] = revive(c, id);
				say("revival %s: ack %.2f ready %.2f answer %.2f ms, %.0f KiB", id, SEC(rv[r][k].ack),
				    SEC(rv[r][k].ready), SEC(rv[r][k].answer), rv[r][k].kib);
			}
			for (int i = 0; i < 3; i++)
				raw[iraw++] = raw_spawn_once(child, data);
		}
	}
	ctl_close(c);
	harness_agentd_stop(&agentd);

	double raw_p50 = harness_pct(raw, (size_t)nraw, 50), raw_p99 = harness_pct(raw, (size_t)nraw, 99);
	printf("\n== revival: kill -9 an idle worker, then send; %d revivals per case, the raw spawn %d times, interleaved\n",
	       reps, nraw);
	printf("%-40s %9s %9s | %9s %9s | %9s %9s | %-8s %-24s %s\n", "", "ready p50", "p99", "ack p50", "p99",
	       "answer p50", "p99", "ratio", "target <= 3x raw", "idle private KiB");
	printf("%-40s %9.2f %9.2f |\n", "raw spawn (fork+exec+LMDB read+wait), ms", SEC(raw_p50), SEC(raw_p99));
	for (size_t k = 0; k < NRCASES; k++) {
		double a[256], b[256], d[256], m[256];
		for (int r = 0; r < reps; r++) {
			a[r] = rv[r][k].ready;
			b[r] = rv[r][k].ack;
			d[r] = rv[r][k].answer;
			m[r] = rv[r][k].kib;
		}
		double p50 = harness_pct(a, (size_t)reps, 50), p99 = harness_pct(a, (size_t)reps, 99);
		double q = p50 / raw_p50;
		char tg[64] = "- (reads the whole log)";
		if (rcases[k].nosync)
			snprintf(tg, sizeof tg, "- (diagnostic)");
		if (rcases[k].target)
			snprintf(tg, sizeof tg, "%s", verdict(q <= 3.0));
		printf("%-40s %9.2f %9.2f | %9.2f %9.2f | %9.2f %9.2f | %6.2fx  %-24s %.0f\n", rcases[k].name, SEC(p50),
		       SEC(p99), SEC(harness_pct(b, (size_t)reps, 50)), SEC(harness_pct(b, (size_t)reps, 99)),
		       SEC(harness_pct(d, (size_t)reps, 50)), SEC(harness_pct(d, (size_t)reps, 99)), q, tg,
		       harness_pct(m, (size_t)reps, 50));
	}
	free(raw);
	free(rv);
}

/* ---- memory and capacity --------------------------------------------- */

static int count_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

#define CAP_BATCH 50

/* What the memory phase's fill came to. */
struct mem_run {
	int live;          /* workers started and idle */
	char why[256];     /* why it stopped */
	double first_batch, last_batch, t_all; /* s */
	long avail0;       /* MemAvailable before, KiB */
};

/* One batch: n conversations from m-<live> created and sent to, and every
 * new worker waited for until it answers and goes idle (a spawn that failed
 * shows as no worker, or one in backoff or queued). A failure into r->why. */
static void mem_batch(ctl_conn *c, struct mem_run *r, int n)
{
	json_t *reqs[CAP_BATCH], *reps_[CAP_BATCH];
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof id, "m-%d", r->live + i);
		reqs[i] = json_pack("{sssss{ss}}", "op", "create", "conversation", id, "settings", "model", "echo");
	}
	harness_ok_many(c, reqs, (size_t)n, NULL, "create");
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof id, "m-%d", r->live + i);
		reqs[i] = json_pack("{ssssss}", "op", "send", "conversation", id, "content", "hello");
	}
	harness_call_many(c, reqs, (size_t)n, reps_);
	for (int i = 0; i < n; i++) {
		if (!r->why[0] && !json_is_true(json_object_get(reps_[i], "ok"))) {
			char *s = json_dumps(reps_[i], JSON_COMPACT);
			snprintf(r->why, sizeof r->why, "a send failed: %.200s", s ? s : "?");
			free(s);
		}
		json_decref(reps_[i]);
	}
	for (int i = 0; i < n && !r->why[0]; i++) {
		char id[32], st[32] = "";
		snprintf(id, sizeof id, "m-%d", r->live + i);
		double until = bench_now() + 60;
		for (;;) {
			int has = worker_of(c, id, NULL, st, sizeof st);
			if (has && !strcmp(st, "idle"))
				break;
			if (bench_now() > until) {
				snprintf(r->why, sizeof r->why, "worker %d did not become idle within 60 s (%s)", r->live + i,
					 has ? st : "no process");
				break;
			}
			usleep(1000);
		}
	}
}

/* Measure: batches of CAP_BATCH live workers until the cap (-n), a
 * failure, MemAvailable under 1 GiB or a batch 20 times the first's. */
static void mem_fill(ctl_conn *c, struct mem_run *r)
{
	double t_start = bench_now();
	while (!r->why[0]) {
		if (r->live >= max_workers) {
			snprintf(r->why, sizeof r->why, "reached the cap of %d (-n)", max_workers);
			break;
		}
		int n = max_workers - r->live < CAP_BATCH ? max_workers - r->live : CAP_BATCH;
		double t0 = bench_now();
		mem_batch(c, r, n);
		if (r->why[0])
			break;
		r->live += n;
		r->last_batch = bench_now() - t0;
		if (!r->first_batch)
			r->first_batch = r->last_batch;
		long avail = harness_mem_available_kib();
		say("memory: %d live workers, batch %.2f s, MemAvailable %ld MiB", r->live, r->last_batch, avail / 1024);
		if (avail >= 0 && avail < 1024 * 1024)
			snprintf(r->why, sizeof r->why, "MemAvailable fell under 1 GiB (%ld MiB)", avail / 1024);
		else if (r->last_batch > 20 * r->first_batch && r->last_batch > 5)
			snprintf(r->why, sizeof r->why, "a batch of %d took %.1f s, over 20x the first (%.2f s)", n,
				 r->last_batch, r->first_batch);
	}
	r->t_all = bench_now() - t_start;
}

/* Report: private memory of every live worker, and the supervisor's. */
static void mem_report(ctl_conn *c, const struct mem_run *r)
{
	json_t *st = harness_ok(c, json_pack("{ss}", "op", "status"), "status");
	json_t *ws = json_object_get(st, "workers");
	size_t nw = json_array_size(ws);
	double *kib = calloc(nw ? nw : 1, sizeof *kib);
	size_t nk = 0;
	double sum = 0;
	for (size_t i = 0; i < nw; i++) {
		json_t *w = json_array_get(ws, i);
		if (strcmp(json_string_value(json_object_get(w, "state")), "idle"))
			continue;
		long k = harness_private_kib((pid_t)json_integer_value(json_object_get(w, "pid")));
		if (k >= 0) {
			kib[nk++] = (double)k;
			sum += (double)k;
		}
	}
	json_decref(st);
	long sup_kib = harness_private_kib(agentd.pid);
	int sup_fds = count_fds(agentd.pid);
	long avail1 = harness_mem_available_kib();
	double p50 = harness_pct(kib, nk, 50), p90 = harness_pct(kib, nk, 90), mx = nk ? kib[nk - 1] : 0;
	printf("\n== memory: private RSS (Private_Clean + Private_Dirty) of idle workers, and live workers held\n");
	printf("%-44s %8.0f KiB p50, %.0f p90, %.0f max (%zu idle workers)   target < 1024 KiB %s\n",
	       "idle worker private RSS", p50, p90, mx, nk, verdict(nk && p50 < 1024));
	printf("%-44s %8d (stopped: %s)\n", "live workers held", r->live, r->why);
	printf("%-44s %8.1f s (%.1f ms per worker; first batch of %d %.2f s, last %.2f s)\n", "time to start them",
	       r->t_all, r->live ? SEC(r->t_all) / r->live : 0, CAP_BATCH, r->first_batch, r->last_batch);
	printf("%-44s %8.0f MiB private in workers; MemAvailable %ld -> %ld MiB\n", "memory", sum / 1024,
	       r->avail0 / 1024, avail1 / 1024);
	printf("%-44s %8ld KiB private, %d descriptors\n", "supervisor with them", sup_kib, sup_fds);
	free(kib);
}

static void phase_memory(void)
{
	char dir[PATH_MAX];
	phase_dir(dir, sizeof dir, "memory");
	char config[256];
	snprintf(config, sizeof config, "[agentd]\nmax_workers = %d\nidle_timeout = 1h\n", max_workers + 100);
	harness_agentd_start(&agentd, bindir, dir, config, NULL);
	ctl_conn *c;
	conn_open(&c);
	struct mem_run r = { .avail0 = harness_mem_available_kib() };
	mem_fill(c, &r);
	mem_report(c, &r);
	ctl_close(c);
	harness_agentd_stop(&agentd);
}

/* ---- expiry ---------------------------------------------------------- */

struct timer {
	char conv[32];
	int64_t deadline;   /* ms, the tool_call row's */
	int64_t store_at;   /* the resolution event's inserted_at, ms */
	int64_t seen_us;    /* its arrival on the watch, wall-clock us */
	int64_t watch_us;   /* when the watch was in place */
};

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The bare timerfd: re-armed to the next of the deadlines (sorted), each
 * shifted by `shift` ms. Fills lateness in ms (the store's way: floor of
 * now in ms minus the deadline) and in us. */
static void bare_timerfd(const int64_t *dl, size_t n, int64_t shift, double *late_ms, double *late_us)
{
	int fd = timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC);
	if (fd < 0)
		bench_die("timerfd_create", -errno);
	size_t i = 0;
	while (i < n) {
		int64_t d = dl[i] + shift;
		struct itimerspec its = { .it_value = { d / 1000, (d % 1000) * 1000000 } };
		if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
			bench_die("timerfd_settime", -errno);
		uint64_t x;
		if (read(fd, &x, sizeof x) < 0 && errno != EINTR)
			bench_die("read timerfd", -errno);
		int64_t now = harness_wall_us();
		/* Fire everything due, as the supervisor does. */
		while (i < n && (dl[i] + shift) * 1000 <= now) {
			late_ms[i] = (double)(now / 1000 - (dl[i] + shift));
			late_us[i] = (double)(now - (dl[i] + shift) * 1000);
			i++;
		}
	}
	close(fd);
}

/* The bare timerfd on a thread of its own, over agentd's own deadlines
 * while agentd fires them: the same minute of the same machine. */
struct bare_run {
	const int64_t *dl;
	size_t n;
	double *late_ms, *late_us;
	pthread_t th;
};

static void *bare_thread(void *arg)
{
	struct bare_run *b = arg;
	bare_timerfd(b->dl, b->n, 0, b->late_ms, b->late_us);
	return NULL;
}

#define EXP_CHUNK 100

/* What publishing an expiry costs at least: n durable transactions of one
 * small event each, with the store library in this process, on the same
 * filesystem. Seconds per commit into lat[]. */
static void commit_latency(const char *dir, int n, double *lat)
{
	store *s;
	struct store_opts so = { .sync = STORE_SYNC_FULL };
	int e = store_open(&s, dir, &so);
	if (e)
		bench_die("store_open", e);
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	pack_msg(&sb, "expired", 0);
	store_txn *t;
	static const unsigned char settings[] = { 0x80 };
	if ((e = store_txn_begin(s, STORE_WRITE, &t)) || (e = store_conv_create(t, "c", (store_bytes){ settings, 1 })) ||
	    (e = store_txn_commit(t)))
		bench_die("create", e);
	struct store_event_in ev = { "resolution", { sb.data, sb.size }, NULL };
	for (int i = 0; i < n; i++) {
		uint64_t seq;
		double t0 = bench_now();
		if ((e = store_txn_begin(s, STORE_WRITE, &t)) || (e = store_event_append(t, "c", &ev, &seq, NULL)) ||
		    (e = store_txn_commit(t)))
			bench_die("append", e);
		lat[i] = bench_now() - t0;
	}
	msgpack_sbuffer_destroy(&sb);
	store_close(s);
}

/* Ask conversation i for the human tool: its worker starts, the echo model
 * calls `approve`, the worker commits the suspension with the deadline and
 * waits. pace 0: in pipelined batches, as fast as agentd takes them;
 * otherwise one every pace ms. */
static void expiry_start_calls(ctl_conn *c, struct timer *tm, int n, int pace)
{
	json_t *reqs[CAP_BATCH];
	static const char ask[] = "/tool approve {\"what\":\"deploy\"}";
	if (pace) {
		double next = bench_now();
		for (int i = 0; i < n; i++) {
			double wait = next - bench_now();
			if (wait > 0)
				usleep((useconds_t)(wait * 1e6));
			next += pace / 1e3;
			send_text(c, tm[i].conv, ask);
		}
		return;
	}
	for (int base = 0; base < n; base += CAP_BATCH) {
		int k = n - base < CAP_BATCH ? n - base : CAP_BATCH;
		for (int i = 0; i < k; i++)
			reqs[i] = json_pack("{ssssss}", "op", "send", "conversation", tm[base + i].conv, "content", ask);
		harness_ok_many(c, reqs, (size_t)k, NULL, "send");
	}
}

/* Watch every conversation until each has shown its resolution (or 30 s
 * past the last deadline); the arrival time is the read's. Returns how many
 * arrived. */
static int expiry_watch(struct timer *tm, int n, int64_t dmax)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	ctl_conn **wc = calloc((size_t)n, sizeof *wc);
	if (ep < 0 || !wc)
		bench_fail("out of memory");
	for (int i = 0; i < n; i++) {
		conn_open(&wc[i]);
		/* From seq 0: a resolution committed before the watch was in
		 * place still arrives (and is left out of the watched figure). */
		json_decref(harness_ok(wc[i], json_pack("{sssssi}", "op", "watch", "conversation", tm[i].conv, "after", 0),
				       "watch"));
		tm[i].watch_us = harness_wall_us();
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, ctl_fd(wc[i]), &ev) < 0)
			bench_die("epoll_ctl", -errno);
	}
	int seen = 0;
	struct epoll_event evs[64];
	while (seen < n && harness_wall_us() / 1000 < dmax + 30000) {
		int k = epoll_wait(ep, evs, 64, 1000);
		int64_t at = harness_wall_us();
		for (int j = 0; j < k; j++) {
			int i = (int)evs[j].data.u32;
			const char *line;
			size_t len;
			/* Every whole line read so far, without waiting (0 ms). */
			while (ctl_watch_next(wc[i], 0, -1, &line, &len) == 0)
				if (!tm[i].seen_us && strstr(line, "\"type\":\"resolution\"")) {
					tm[i].seen_us = at;
					seen++;
				}
		}
	}
	for (int i = 0; i < n; i++)
		ctl_close(wc[i]);
	close(ep);
	free(wc);
	return seen;
}

/* One regime of the expiry phase, from its start to its report. */
struct exp_run {
	const char *label;
	int n, pace, expires;
	char dir[PATH_MAX];
	struct timer *tm;
	double t_create;   /* s from the first call started to the last one's deadline read */
	int derived;       /* deadlines derived from inserted_at (the call had expired) */
	int overlap;       /* some fired before all were started */
	int nw;            /* timers in the watched figure */
	int64_t dmin, dmax;
	int64_t *dl;       /* the deadlines, sorted */
	double *a_ms, *a_us, *b_ms, *b_us, *s_ms, *s_us; /* agentd's, the bare replay's, the bare alongside's */
	struct bare_run side;
	double clat[200];
};

/* Setup: n conversations with the human tool, a call started in each
 * (expiry_start_calls), and each call's deadline read: the pending row's;
 * once expired the row has none, and then it is the call's inserted_at plus
 * the expiry (the worker stamps both in the transaction that makes it). */
static void exp_start(ctl_conn *c, struct exp_run *x)
{
	int n = x->n;
	json_t **reqs = calloc(EXP_CHUNK, sizeof *reqs);
	if (!reqs)
		bench_fail("out of memory");
	for (int i = 0; i < n; i++)
		snprintf(x->tm[i].conv, sizeof x->tm[i].conv, "x-%d", i);
	for (int base = 0; base < n; base += EXP_CHUNK) {
		int k = n - base < EXP_CHUNK ? n - base : EXP_CHUNK;
		for (int i = 0; i < k; i++)
			reqs[i] = json_pack("{sssss{sss[s]}}", "op", "create", "conversation", x->tm[base + i].conv,
					    "settings", "model", "echo", "tools", "approve");
		harness_ok_many(c, reqs, (size_t)k, NULL, "create");
	}
	free(reqs);
	double t0 = bench_now();
	expiry_start_calls(c, x->tm, n, x->pace);
	for (int i = 0; i < n; i++) {
		struct timer *t = &x->tm[i];
		double until = bench_now() + 120;
		for (;;) {
			json_t *r = harness_ok(c, json_pack("{ssss}", "op", "tool_calls", "conversation", t->conv),
					   "tool_calls");
			json_t *a = json_object_get(r, "tool_calls");
			if (json_array_size(a) == 1) {
				json_t *tc = json_array_get(a, 0);
				t->deadline = json_integer_value(json_object_get(tc, "deadline"));
				if (!t->deadline) {
					t->deadline = json_integer_value(json_object_get(tc, "inserted_at")) +
						      (int64_t)x->expires * 1000;
					x->derived++;
				}
			}
			json_decref(r);
			if (t->deadline)
				break;
			if (bench_now() > until)
				bench_fail("%s: no tool call after 120 s", t->conv);
			usleep(2000);
		}
	}
	x->t_create = bench_now() - t0;
	x->dmin = INT64_MAX;
	x->dmax = 0;
	for (int i = 0; i < n; i++) {
		x->dmin = x->tm[i].deadline < x->dmin ? x->tm[i].deadline : x->dmin;
		x->dmax = x->tm[i].deadline > x->dmax ? x->tm[i].deadline : x->dmax;
	}
	int64_t now_ms = harness_wall_us() / 1000;
	say("expiry (%s): %d calls pending after %.1f s; deadlines span %.1f s, the first in %.1f s", x->label, n,
	    x->t_create, (double)(x->dmax - x->dmin) / 1e3, (double)(x->dmin - now_ms) / 1e3);
	x->overlap = x->dmin <= now_ms + 500;
}

/* Measure: every resolution watched, with the bare timerfd alongside from
 * now on, over the deadlines still ahead (all of them, unless some fired
 * while the calls started); then the resolution events as stored. */
static void exp_watch(ctl_conn *c, struct exp_run *x)
{
	int n = x->n;
	x->dl = calloc((size_t)n, sizeof *x->dl);
	x->a_ms = calloc((size_t)n, sizeof *x->a_ms), x->a_us = calloc((size_t)n, sizeof *x->a_us);
	x->b_ms = calloc((size_t)n, sizeof *x->b_ms), x->b_us = calloc((size_t)n, sizeof *x->b_us);
	x->s_ms = calloc((size_t)n, sizeof *x->s_ms), x->s_us = calloc((size_t)n, sizeof *x->s_us);
	if (!x->dl || !x->a_ms || !x->a_us || !x->b_ms || !x->b_us || !x->s_ms || !x->s_us)
		bench_fail("out of memory");
	for (int i = 0; i < n; i++)
		x->dl[i] = x->tm[i].deadline;
	qsort(x->dl, (size_t)n, sizeof *x->dl, cmp_i64);
	size_t ahead = 0;
	int64_t now_ms = harness_wall_us() / 1000;
	while (ahead < (size_t)n && x->dl[ahead] <= now_ms)
		ahead++;
	x->side = (struct bare_run){ x->dl + ahead, (size_t)n - ahead, x->s_ms, x->s_us, 0 };
	if (x->side.n && pthread_create(&x->side.th, NULL, bare_thread, &x->side))
		bench_fail("pthread_create failed");
	int seen = expiry_watch(x->tm, n, x->dmax);
	if (x->side.n)
		pthread_join(x->side.th, NULL);
	if (seen < n)
		bench_fail("expiry: only %d of %d resolutions arrived within 30 s of the last deadline", seen, n);
	for (int i = 0; i < n; i++) {
		json_t *e = wait_event(c, x->tm[i].conv, 0, "resolution");
		const char *status = json_string_value(json_object_get(json_object_get(e, "content"), "status"));
		if (!status || strcmp(status, "expired"))
			bench_fail("%s: the resolution is not `expired`", x->tm[i].conv);
		x->tm[i].store_at = json_integer_value(json_object_get(e, "inserted_at"));
		json_decref(e);
	}
}

/* With -v: every timer, for a look at when the late ones came. */
static void exp_csv(const struct exp_run *x)
{
	char csv[PATH_MAX];
	harness_path(csv, sizeof csv, "%s/timers.csv", x->dir);
	FILE *f = fopen(csv, "we");
	for (int i = 0; f && i < x->n; i++)
		fprintf(f, "%s,%lld,%lld,%lld\n", x->tm[i].conv, (long long)x->tm[i].deadline,
			(long long)(x->tm[i].store_at - x->tm[i].deadline),
			(long long)(x->tm[i].seen_us - x->tm[i].deadline * 1000));
	if (f)
		fclose(f);
	say("expiry (%s): per timer (conversation, deadline, stored ms, watched us) in %s", x->label, csv);
}

/* Measure the floors: agentd's lateness from the timers, then the bare
 * timerfd again over the same deadlines, alone, while agentd idles (it is
 * stopped after), and one durable commit of the store here. */
static void exp_replay(struct exp_run *x)
{
	int n = x->n;
	x->nw = 0;
	for (int i = 0; i < n; i++) {
		x->a_ms[i] = (double)(x->tm[i].store_at - x->tm[i].deadline);
		if (x->tm[i].deadline * 1000 > x->tm[i].watch_us)
			x->a_us[x->nw++] = (double)(x->tm[i].seen_us - x->tm[i].deadline * 1000);
	}
	if (x->nw == 0)
		bench_fail("expiry: every deadline passed before its watch was in place: raise -e");
	if (!x->side.n)
		bench_fail("expiry: every deadline passed before the bare timerfd started: raise -e");
	int64_t shift = harness_wall_us() / 1000 + 1000 - x->dl[0];
	say("expiry (%s): the bare timerfd replays the %.1f s of deadlines", x->label, (double)(x->dmax - x->dmin) / 1e3);
	bare_timerfd(x->dl, (size_t)n, shift, x->b_ms, x->b_us);
	harness_agentd_stop(&agentd);
	char cdir[PATH_MAX];
	harness_path(cdir, sizeof cdir, "%s/commit", x->dir);
	bench_mkdir(cdir);
	commit_latency(cdir, 200, x->clat);
}

/* Report: the regime's lateness beside the bare timerfd's and a commit's. */
static void exp_report(struct exp_run *x)
{
	int n = x->n, nw = x->nw;
	size_t ns = x->side.n;
	double am50 = harness_pct(x->a_ms, (size_t)n, 50), am99 = harness_pct(x->a_ms, (size_t)n, 99);
	double au50 = harness_pct(x->a_us, (size_t)nw, 50), au99 = harness_pct(x->a_us, (size_t)nw, 99);
	double sm50 = harness_pct(x->s_ms, ns, 50), sm99 = harness_pct(x->s_ms, ns, 99);
	double su50 = harness_pct(x->s_us, ns, 50), su99 = harness_pct(x->s_us, ns, 99);
	double bm50 = harness_pct(x->b_ms, (size_t)n, 50), bm99 = harness_pct(x->b_ms, (size_t)n, 99);
	double bu50 = harness_pct(x->b_us, (size_t)n, 50), bu99 = harness_pct(x->b_us, (size_t)n, 99);
	double amax = x->a_us[nw - 1], smax = x->s_us[ns - 1], bmax = x->b_us[n - 1];
	double span = (double)(x->dmax - x->dmin);
	printf("\n== expiry, %s: %d human-tool timers, one per conversation, workers waiting (expires = %d s)\n",
	       x->label, n, x->expires);
	printf("started in %.1f s (%s); deadlines spread over %.1f s, %.1f ms apart on average\n", x->t_create,
	       x->pace ? "paced" : "as fast as agentd took them", span / 1e3, n > 1 ? span / (n - 1) : 0);
	if (x->overlap)
		printf("WARNING: some fired before all were started (raise -e or -i): %d deadlines derived from "
		       "inserted_at, %d left out of the watched figure, %zu out of the bare timerfd alongside\n",
		       x->derived, n - nw, (size_t)n - ns);
	printf("%-52s %10s %10s %10s\n", "lateness", "p50", "p99", "max");
	printf("%-52s %7.0f ms %7.0f ms\n", "agentd: resolution inserted_at - deadline", am50, am99);
	printf("%-52s %7.0f ms %7.0f ms\n", "bare timerfd alongside: floor(wake-up ms) - deadline", sm50, sm99);
	printf("%-52s %7.0f ms %7.0f ms\n", "bare timerfd replayed alone: the same", bm50, bm99);
	printf("%-52s %7.3f ms %7.3f ms %7.3f ms\n", "agentd: resolution seen on a watch - deadline", au50 / 1e3,
	       au99 / 1e3, amax / 1e3);
	printf("%-52s %7.3f ms %7.3f ms %7.3f ms\n", "bare timerfd alongside: wake-up - deadline", su50 / 1e3,
	       su99 / 1e3, smax / 1e3);
	printf("%-52s %7.3f ms %7.3f ms %7.3f ms\n", "bare timerfd replayed alone: the same", bu50 / 1e3, bu99 / 1e3,
	       bmax / 1e3);
	printf("%-52s %7.3f ms %7.3f ms (the floor under the watched figure)\n",
	       "one durable commit of one event (store, here)", SEC(harness_pct(x->clat, 200, 50)),
	       SEC(harness_pct(x->clat, 200, 99)));
	printf("targets: p50 < 1 ms: %s (stored), %s (watched); p99 <= 2x the timerfd's alongside: %s (stored, %.0f vs "
	       "%.0f ms), %s (watched vs wake-up, %.1fx)\n", verdict(am50 < 1), verdict(au50 < 1000),
	       verdict(am99 <= 2 * sm99), am99, sm99, verdict(au99 <= 2 * su99), su99 > 0 ? au99 / su99 : 0);
	fflush(stdout);
}

/* One regime: n timers started one every pace ms (0: a burst), expiring after
 * expires seconds, beside the bare timerfd over the same deadlines. */
static void phase_expiry(const char *label, int n, int pace, int expires)
{
	struct exp_run x = { .label = label, .n = n, .pace = pace, .expires = expires };
	phase_dir(x.dir, sizeof x.dir, pace ? "expiry-spread" : "expiry-burst");
	char config[512];
	snprintf(config, sizeof config,
		 "[agentd]\nmax_workers = %d\nidle_timeout = 1h\n\n"
		 "[tool.approve]\nexecutor = human\nprompt = Approve?\nexpires = %ds\n",
		 n + 100, expires);
	harness_agentd_start(&agentd, bindir, x.dir, config, NULL);
	ctl_conn *c;
	conn_open(&c);
	if (!(x.tm = calloc((size_t)n, sizeof *x.tm)))
		bench_fail("out of memory");
	exp_start(c, &x);
	exp_watch(c, &x);
	ctl_close(c);
	if (verbose)
		exp_csv(&x);
	exp_replay(&x);
	exp_report(&x);
	free(x.dl);
	free(x.a_ms);
	free(x.a_us);
	free(x.s_ms);
	free(x.s_us);
	free(x.b_ms);
	free(x.b_us);
	free(x.tm);
}

/* ---- main ------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_supervisor [-d DIR] [-r REPS] [-n MAX_WORKERS] [-t TIMERS] [-i MS] [-e SECS] "
		   "[-o revival|memory|expiry|spread|burst] [-q] [-k] [-v]\n");
}

static void cleanup(void)
{
	harness_agentd_stop(&agentd);
	if (!keep && scratch[0])
		bench_rmtree(scratch);
}

int main(int argc, char **argv)
{
	const char *dir = ".";
	int c, set_r = 0, set_n = 0, set_t = 0, set_e = 0;
	while ((c = getopt(argc, argv, "d:r:n:t:e:i:o:qkvh")) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'r': reps = atoi(optarg), set_r = 1; break;
		case 'n': max_workers = atoi(optarg), set_n = 1; break;
		case 't': ntimers = atoi(optarg), set_t = 1; break;
		case 'e': expires_s = atoi(optarg), set_e = 1; break;
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
		reps = set_r ? reps : 5;
		max_workers = set_n ? max_workers : 200;
		ntimers = set_t ? ntimers : 200;
		expires_s = set_e ? expires_s : 10;
	}
	if (reps < 1 || reps > 256 || max_workers < 1 || ntimers < 1 || expires_s < 1 || pace_ms < 1 ||
	    (only && strcmp(only, "revival") && strcmp(only, "memory") && strcmp(only, "expiry") && strcmp(only, "spread") &&
	     strcmp(only, "burst"))) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	harness_bindir(bindir, sizeof bindir);
	harness_scratch(scratch, sizeof scratch, dir, "bench-supervisor");
	atexit(cleanup);

	char machine[512], fs[512], load0[128], load1[128];
	int tmpfs;
	bench_machine(machine, sizeof machine);
	bench_filesystem(scratch, fs, sizeof fs, &tmpfs);
	bench_loadavg(load0, sizeof load0);
	printf("agentd supervisor beside its raw limits\nmachine: %s\nfilesystem: %s\n", machine, fs);
	if (tmpfs)
		printf("WARNING: a memory filesystem: durable commits flush nothing\n");
	fflush(stdout);
	if (!only || !strcmp(only, "revival"))
		phase_revival();
	fflush(stdout);
	/* Spread: the deadlines far enough apart that each expiry's commits
	 * (its own and the woken worker's turn) are done before the next; the
	 * expiry outlasts starting them all. */
	if (!only || !strcmp(only, "expiry") || !strcmp(only, "spread")) {
		int spread_expires = (int)(1.5 * ntimers * pace_ms / 1e3) + 10;
		phase_expiry("spread", ntimers, pace_ms, spread_expires);
	}
	/* Burst: half as many, as fast as agentd starts them. */
	if (!only || !strcmp(only, "expiry") || !strcmp(only, "burst"))
		phase_expiry("burst", ntimers / 2 > 0 ? ntimers / 2 : 1, 0, expires_s);
	fflush(stdout);
	if (!only || !strcmp(only, "memory"))
		phase_memory();
	bench_loadavg(load1, sizeof load1);
	printf("\nload average: before %s, after %s\nscratch: %s%s\n", load0, load1, scratch, keep ? " (kept)" : "");
	return 0;
}
