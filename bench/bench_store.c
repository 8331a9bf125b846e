/*
 * bench_store: agentd's store beside raw LMDB and SQLite, in one run.
 *
 * Every figure is the median over -r runs (default 7), after an untimed
 * warm-up run; each run is cut in slices, and in each slice the three systems
 * take turns (the order rotating), each on its own directory under the
 * scratch directory, so the drift of a shared machine falls on all alike.
 * Ratios are speeds, agentd/X > 1 meaning agentd is faster than X: the
 * median of the per-run ratios. A missed target prints MISS; the program
 * fails only when an operation fails.
 *
 * Usage: bench_store [-d DIR] [-r RUNS] [-q] [-k] [-o NAME] [-v]
 *   -d DIR   where the scratch directory goes (default "."): put it on the
 *            disk you mean to measure, not tmpfs, for the durable figures
 *   -r RUNS  timed runs per figure (default 7, at most 15)
 *   -q       quick: a tenth of the work, a 100,000-event large store (smoke test)
 *   -k       keep the scratch directory
 *   -o NAME  only the figures whose name contains NAME (for profiling)
 *   -v       print every run's figure too (on stderr)
 */
#include "bench/bench.h"
#include "bench/bench_store.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <msgpack.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NSYS 3
#define MAP_SIZE ((size_t)2 << 30) /* 2 GiB for every system: room for the 1M-event store */

static const struct bench_sys *const systems[NSYS] = { &bench_sys_agentd, &bench_sys_lmdb, &bench_sys_sqlite };

/* ---- the shared workload bytes --------------------------------------- */

const char *const bench_event_type = "user_msg";
const char *const bench_call_name = "shell";
unsigned char bench_content[256];
size_t bench_content_len;
unsigned char bench_args[128];
size_t bench_args_len;
unsigned char bench_result[128];
size_t bench_result_len;

void bench_conv_id(char *buf, unsigned conv)
{
	snprintf(buf, 32, "conv-%06u", conv);
}

void bench_call_id(char *buf, unsigned call)
{
	snprintf(buf, 32, "call-%08u", call);
}

/* Pack the map {key: value} into out, led by "ok": true when with_ok. */
static size_t pack_map(unsigned char *out, size_t cap, const char *key, const char *value, int with_ok)
{
	msgpack_sbuffer b;
	msgpack_packer pk;
	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, with_ok ? 2 : 1);
	if (with_ok) {
		msgpack_pack_str(&pk, 2);
		msgpack_pack_str_body(&pk, "ok", 2);
		msgpack_pack_true(&pk);
	}
	msgpack_pack_str(&pk, strlen(key));
	msgpack_pack_str_body(&pk, key, strlen(key));
	msgpack_pack_str(&pk, strlen(value));
	msgpack_pack_str_body(&pk, value, strlen(value));
	if (b.size > cap)
		bench_fail("workload record too large");
	memcpy(out, b.data, b.size);
	size_t n = b.size;
	msgpack_sbuffer_destroy(&b);
	return n;
}

static void workload_init(void)
{
	/* A user message of about 200 bytes. */
	static const char text[] =
		"Can you look at the failing deploy from last night? The health check on the staging "
		"cluster timed out after the migration step, and I would like to know whether we should "
		"roll back or patch forward.";
	char t200[201];
	snprintf(t200, sizeof t200, "%s", text);
	bench_content_len = pack_map(bench_content, sizeof bench_content, "text", t200, 0);
	bench_args_len = pack_map(bench_args, sizeof bench_args, "cmd",
				   "kubectl -n staging rollout status deploy/api --timeout=30s", 0);
	bench_result_len = pack_map(bench_result, sizeof bench_result, "output",
				     "deployment \"api\" successfully rolled out", 1);
}

/* ---- options, scratch directories, rows ------------------------------ */

static int nruns = 7;
static int quick;
static int verbose;
static int keep; /* -k: leave every store behind for mdb_stat and sqlite3 */
static char scratch[4096];

#define MAX_ROWS 24
static struct bench_row rows[MAX_ROWS];
static int nrows;

static struct bench_row *row_new(const char *name, int reads, double t_raw, double t_sqlite)
{
	if (nrows == MAX_ROWS)
		bench_fail("too many rows");
	struct bench_row *r = &rows[nrows++];
	snprintf(r->name, sizeof r->name, "%s", name);
	r->reads = reads;
	r->nruns = nruns;
	r->target[1] = t_raw;
	r->target[2] = t_sqlite;
	return r;
}

/* Work per run, scaled down by -q. */
static size_t per_run(size_t n)
{
	return quick ? (n / 10 ? n / 10 : 1) : n;
}

static void sys_dir(char *buf, size_t len, const char *scenario, int sys)
{
	snprintf(buf, len, "%s/%s-%d", scratch, scenario, sys);
	bench_mkdir(buf);
}

/* A scenario's stores are removed when it ends (the 1M-event ones are
 * large), unless -k. */
static void discard(const char *dir)
{
	if (!keep)
		bench_rmtree(dir);
}

static double t_start;
static const char *only; /* -o: run only the figures whose name contains this */

static void progress(const char *what)
{
	fprintf(stderr, "bench_store: %6.1f s  %s\n", bench_now() - t_start, what);
}

static int wanted(const char *name)
{
	return !only || strstr(name, only);
}

/* Before each timed slice: write back every dirty page of the scratch
 * filesystem, untimed, so one system's deferred writes (unsynced commits,
 * a WAL) are not flushed by the kernel inside another system's slice. It
 * changes no system's state: SQLite does not checkpoint, no LMDB meta page
 * is written. */
static int scratch_fd = -1;

static void settle(void)
{
	if (syncfs(scratch_fd) != 0)
		bench_die("syncfs", -errno);
}

/* ---- the measurement -------------------------------------------------- */

/* `nvar` variants (rows) of one operation, each on every system. A run is
 * cut into `slices` slices, and in each slice every (variant, system) takes
 * its turn, the order rotating, so the slow drift of a shared machine falls
 * on all of them alike; a system's figure for the run is its summed time
 * over its summed operations. Run -1 is an untimed warm-up. */
struct meas {
	int nvar, slices;
	struct bench_row *row[2];
	void (*prepare)(struct meas *m, int run); /* before each run; may be NULL */
	/* Do the slice's share of the run; returns the operations done. */
	size_t (*work)(struct meas *m, int var, int sys, int run, int slice);
};

static void measure(struct meas *m)
{
	int slots = m->nvar * NSYS;
	for (int run = -1; run < nruns; run++) {
		double t[2][NSYS] = { { 0 } };
		size_t ops[2][NSYS] = { { 0 } };
		if (m->prepare)
			m->prepare(m, run);
		for (int s = 0; s < m->slices; s++) {
			for (int k = 0; k < slots; k++) {
				int slot = (run + 1 + s + k) % slots, v = slot / NSYS, i = slot % NSYS;
				settle();
				double t0 = bench_now();
				ops[v][i] += m->work(m, v, i, run, s);
				t[v][i] += bench_now() - t0;
			}
		}
		for (int v = 0; run >= 0 && v < m->nvar; v++)
			for (int i = 0; i < NSYS; i++)
				m->row[v]->spo[i][run] = ops[v][i] ? t[v][i] / (double)ops[v][i] : 0;
	}
}

/* The part [lo, hi) of n units that slice s of `slices` covers. */
static void slice_of(size_t n, int s, int slices, size_t *lo, size_t *hi)
{
	*lo = n * (size_t)s / (size_t)slices;
	*hi = n * (size_t)(s + 1) / (size_t)slices;
}

#define SLICES 5

/* ---- appends ---------------------------------------------------------- */

struct append_ctx {
	struct meas m;
	void *h[NSYS];
	unsigned nconv;
	size_t per_txn, n, nev;
	struct bench_ev *ev;
	uint64_t *last, counter;
};

/* The run's events: nev in transactions of per_txn, event j going to
 * conversation j % nconv, each transaction's events grouped by conversation,
 * seqs continuing. Every system appends the same events. */
static void append_prepare(struct meas *m, int run)
{
	struct append_ctx *a = (struct append_ctx *)m;
	a->nev = run < 0 ? (a->n / 5 / a->per_txn + 1) * a->per_txn : a->n;
	for (size_t t = 0; t < a->nev; t += a->per_txn) {
		size_t k = 0;
		for (unsigned c = 0; c < a->nconv; c++)
			for (size_t j = 0; j < a->per_txn; j++)
				if ((a->counter + j) % a->nconv == c) {
					a->ev[t + k].conv = c;
					a->ev[t + k].seq = ++a->last[c];
					k++;
				}
		a->counter += a->per_txn;
	}
}

static size_t append_work(struct meas *m, int var, int sys, int run, int slice)
{
	struct append_ctx *a = (struct append_ctx *)m;
	size_t lo, hi;
	(void)var;
	(void)run;
	slice_of(a->nev / a->per_txn, slice, m->slices, &lo, &hi);
	for (size_t t = lo; t < hi; t++)
		systems[sys]->append(a->h[sys], a->ev + t * a->per_txn, a->per_txn);
	return (hi - lo) * a->per_txn;
}

/* n events per run (a multiple of per_txn) over nconv conversations,
 * per_txn to a transaction. */
static void bench_append(const char *name, const char *scenario, int durable, unsigned nconv, size_t per_txn,
			 size_t n, double t_sqlite)
{
	if (!wanted(name))
		return;
	struct append_ctx a = { .m = { 1, SLICES, { row_new(name, 0, 0.9, t_sqlite) }, append_prepare, append_work },
				.nconv = nconv, .per_txn = per_txn, .n = n };
	char dir[4200];
	a.last = calloc(nconv, sizeof *a.last);
	a.ev = calloc(n, sizeof *a.ev);
	if (!a.last || !a.ev)
		bench_fail("out of memory");
	progress(name);
	for (int i = 0; i < NSYS; i++) {
		sys_dir(dir, sizeof dir, scenario, i);
		a.h[i] = systems[i]->open(dir, durable, MAP_SIZE);
		systems[i]->convs_create(a.h[i], 0, nconv);
	}
	measure(&a.m);
	for (int i = 0; i < NSYS; i++) {
		systems[i]->close(a.h[i]);
		sys_dir(dir, sizeof dir, scenario, i);
		discard(dir);
	}
	free(a.last);
	free(a.ev);
}

/* ---- 8 writer processes ---------------------------------------------- */

#define WRITERS 8

/* The writers' directories and the last seq each writer's conversation got. */
struct writers_ctx {
	char dir[NSYS][4200];
	int durable;
	int flushed; /* append_flushed: a lazy commit, then a flush outside the writer lock */
	size_t n;
	uint64_t last[NSYS][WRITERS];
	double flushes[NSYS][BENCH_MAX_RUNS]; /* flushed: data-file flushes per event (s->flushes) */
};

/* The lazy row's flushes per event, for the report's header (0: not run). */
static double lazy_flushes[NSYS];

/* A writer: its own handle, opened after fork (never an inherited one),
 * waits for the start, appends n events to its conversation one per
 * transaction (flushed: each through append_flushed). */
static void writer(const struct bench_sys *s, const char *dir, int durable, int flushed, unsigned conv,
		   uint64_t first, size_t n, int ready, int go, int counts)
{
	void *h = s->open(dir, durable, MAP_SIZE);
	char c = 'r', g;
	if (write(ready, &c, 1) != 1)
		_exit(2);
	close(ready);
	if (read(go, &g, 1) < 0) /* EOF: the parent closed the pipe, go */
		_exit(2);
	for (size_t i = 0; i < n; i++) {
		struct bench_ev ev = { conv, first + i };
		(flushed ? s->append_flushed : s->append)(h, &ev, 1);
	}
	uint64_t f = flushed && s->flushes ? s->flushes(h) : 0;
	if (write(counts, &f, sizeof f) != sizeof f) /* atomic: under PIPE_BUF */
		_exit(2);
	s->close(h);
	_exit(0);
}

/* Fork WRITERS writers of system sys, n events each, and return the
 * seconds per event from the start signal (every writer open and waiting)
 * to the last exit. The parent holds no store handle while it forks. */
static double writers_run(struct writers_ctx *w, int sys, size_t n, double *flushes)
{
	const struct bench_sys *s = systems[sys];
	int ready[2], go[2], counts[2];
	pid_t pid[WRITERS];
	if (pipe2(ready, O_CLOEXEC) || pipe2(go, O_CLOEXEC) || pipe2(counts, O_CLOEXEC))
		bench_die("pipe", -errno);
	fflush(NULL);
	for (unsigned k = 0; k < WRITERS; k++) {
		pid[k] = fork();
		if (pid[k] < 0)
			bench_die("fork", -errno);
		if (pid[k] == 0) {
			close(ready[0]);
			close(go[1]);
			close(counts[0]);
			writer(s, w->dir[sys], w->durable, w->flushed, k, w->last[sys][k] + 1, n, ready[1], go[0],
			       counts[1]);
		}
	}
	close(ready[1]);
	close(go[0]);
	close(counts[1]);
	for (unsigned k = 0; k < WRITERS; k++) {
		char c;
		if (read(ready[0], &c, 1) != 1)
			bench_fail("%s: a writer died before starting", s->name);
	}
	close(ready[0]);
	double t0 = bench_now();
	close(go[1]);
	int failed = 0;
	for (unsigned k = 0; k < WRITERS; k++) {
		int st;
		if (waitpid(pid[k], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed = 1;
	}
	double t = bench_now() - t0;
	if (failed)
		bench_fail("%s: a writer failed", s->name);
	uint64_t f, sum = 0;
	for (unsigned k = 0; k < WRITERS; k++)
		if (read(counts[0], &f, sizeof f) == sizeof f)
			sum += f;
	close(counts[0]);
	*flushes = (double)sum / (double)(n * WRITERS);
	for (unsigned k = 0; k < WRITERS; k++)
		w->last[sys][k] += n;
	return t / (double)(n * WRITERS);
}

/* Not through measure(): one turn per system per run (the order rotating),
 * since slices would time the forks and opens too. */
static void bench_writers(const char *name, const char *scenario, int durable, int flushed, size_t n,
			  double t_sqlite)
{
	if (!wanted(name))
		return;
	struct bench_row *r = row_new(name, 0, 0.9, t_sqlite);
	struct writers_ctx w = { .durable = durable, .flushed = flushed, .n = n };
	progress(name);
	for (int i = 0; i < NSYS; i++) {
		sys_dir(w.dir[i], sizeof w.dir[i], scenario, i);
		void *h = systems[i]->open(w.dir[i], durable, MAP_SIZE);
		systems[i]->convs_create(h, 0, WRITERS);
		systems[i]->close(h);
	}
	for (int run = -1; run < nruns; run++) {
		for (int k = 0; k < NSYS; k++) {
			int i = (run + 1 + k) % NSYS;
			settle();
			double f, spo = writers_run(&w, i, run < 0 ? n / 5 + 1 : n, &f);
			if (run >= 0) {
				r->spo[i][run] = spo;
				w.flushes[i][run] = f;
			}
		}
	}
	if (flushed)
		for (int i = 0; i < NSYS; i++)
			lazy_flushes[i] = systems[i]->flushes ? bench_median(w.flushes[i], nruns) : 0;
	for (int i = 0; i < NSYS; i++)
		discard(w.dir[i]);
}

/* ---- reads ------------------------------------------------------------ */

/* Fill conversations [0, nconv) with per_conv events each, interleaved the
 * way live conversations grow (each transaction adds a run of events to
 * every conversation), in large unsynced transactions, then flush. */
static void fill(const struct bench_sys *s, void *h, unsigned nconv, size_t per_conv)
{
	size_t chunk = BENCH_MAX_BATCH / nconv ? BENCH_MAX_BATCH / nconv : 1;
	struct bench_ev *ev = calloc(BENCH_MAX_BATCH, sizeof *ev);
	if (!ev)
		bench_fail("out of memory");
	s->convs_create(h, 0, nconv);
	for (size_t done = 0; done < per_conv; done += chunk) {
		size_t m = per_conv - done < chunk ? per_conv - done : chunk;
		for (unsigned c0 = 0; c0 < nconv;) {
			size_t k = 0;
			unsigned c = c0;
			for (; c < nconv && k + m <= BENCH_MAX_BATCH; c++)
				for (size_t j = 0; j < m; j++)
					ev[k++] = (struct bench_ev){ c, done + j + 1 };
			s->append(h, ev, k);
			c0 = c;
		}
	}
	s->sync(h);
	free(ev);
}

/* Two variants of a read: variant v reads conversation conv[v] of store
 * h[v][sys], iters[v] times a run, each read delivering expect[v] events. */
struct read_ctx {
	struct meas m;
	void *h[2][NSYS];
	unsigned conv[2];
	size_t iters[2];
	uint64_t expect[2];
	int page; /* newest page of 50; else load_since */
};

static size_t read_work(struct meas *m, int var, int sys, int run, int slice)
{
	struct read_ctx *r = (struct read_ctx *)m;
	const struct bench_sys *s = systems[sys];
	struct bench_sink sink = { 0, 0 };
	size_t lo, hi;
	slice_of(run < 0 ? r->iters[var] / 5 + 1 : r->iters[var], slice, m->slices, &lo, &hi);
	for (size_t j = lo; j < hi; j++) {
		if (r->page)
			s->newest(r->h[var][sys], r->conv[var], 50, &sink);
		else
			s->load_since(r->h[var][sys], r->conv[var], &sink);
	}
	if (sink.n != r->expect[var] * (hi - lo))
		bench_fail("%s: %s read %llu events, expected %llu", m->row[var]->name, s->name,
			   (unsigned long long)sink.n, (unsigned long long)(r->expect[var] * (hi - lo)));
	return hi - lo;
}

static void bench_load_since(void)
{
	if (!wanted("load_since"))
		return;
	struct read_ctx r = {
		.m = { 2, SLICES, { row_new("load_since, 10,000 events, no summary", 1, 0, 5),
				    row_new("load_since, 10,000 events, summary at 9,900", 1, 0, 5) },
		       NULL, read_work },
		.conv = { 0, 1 }, .iters = { per_run(200), per_run(10000) }, .expect = { 10000, 100 },
	};
	char dir[4200];
	progress("load_since: building two 10,000-event conversations");
	for (int i = 0; i < NSYS; i++) {
		sys_dir(dir, sizeof dir, "load", i);
		r.h[0][i] = r.h[1][i] = systems[i]->open(dir, 0, MAP_SIZE);
		fill(systems[i], r.h[0][i], 2, 10000);
		systems[i]->summary_put(r.h[0][i], 1, 9900);
		systems[i]->sync(r.h[0][i]);
	}
	progress("load_since");
	measure(&r.m);
	for (int i = 0; i < NSYS; i++) {
		systems[i]->close(r.h[0][i]);
		sys_dir(dir, sizeof dir, "load", i);
		discard(dir);
	}
}

/* The newest 50 of a 1,000-event conversation in a store of 1,000 events
 * and in one of `big` x 1,000, measured together. */
static void bench_pages(unsigned big, struct bench_row **p1k, struct bench_row **pbig)
{
	char name[96], dir[4200], msg[160];
	if (!wanted("newest page"))
		return;
	snprintf(name, sizeof name, "newest page of 50, %s events in store", big == 1000 ? "1,000,000" : "100,000");
	*p1k = row_new("newest page of 50, 1,000 events in store", 1, 0, 5);
	*pbig = row_new(name, 1, 0, 5);
	struct read_ctx r = { .m = { 2, SLICES, { *p1k, *pbig }, NULL, read_work },
			      .conv = { 0, big / 2 }, .iters = { per_run(20000), per_run(20000) },
			      .expect = { 50, 50 }, .page = 1 };
	for (int v = 0; v < 2; v++) {
		unsigned nconv = v ? big : 1;
		snprintf(msg, sizeof msg, "newest page: building %u x 1,000 events", nconv);
		progress(msg);
		for (int i = 0; i < NSYS; i++) {
			double t0 = bench_now();
			sys_dir(dir, sizeof dir, v ? "pbig" : "p1k", i);
			r.h[v][i] = systems[i]->open(dir, 0, MAP_SIZE);
			fill(systems[i], r.h[v][i], nconv, 1000);
			snprintf(msg, sizeof msg, "  %s built in %.1f s", systems[i]->name, bench_now() - t0);
			progress(msg);
		}
	}
	progress("newest page of 50");
	measure(&r.m);
	for (int v = 0; v < 2; v++) {
		for (int i = 0; i < NSYS; i++) {
			systems[i]->close(r.h[v][i]);
			sys_dir(dir, sizeof dir, v ? "pbig" : "p1k", i);
			discard(dir);
		}
	}
}

/* ---- resolve-if-pending ---------------------------------------------- */

struct resolve_ctx {
	struct meas m;
	void *h[NSYS];
	size_t per_txn, n, base, m_run;
};

static void resolve_prepare(struct meas *m, int run)
{
	struct resolve_ctx *r = (struct resolve_ctx *)m;
	r->base += r->m_run; /* the calls the last run resolved */
	r->m_run = run < 0 ? (r->n / 5 / r->per_txn + 1) * r->per_txn : r->n;
}

static size_t resolve_work(struct meas *m, int var, int sys, int run, int slice)
{
	struct resolve_ctx *r = (struct resolve_ctx *)m;
	size_t lo, hi;
	(void)var;
	(void)run;
	slice_of(r->m_run / r->per_txn, slice, m->slices, &lo, &hi);
	for (size_t t = lo; t < hi; t++) {
		size_t c = r->base + t * r->per_txn;
		systems[sys]->calls_resolve(r->h[sys], 0, (unsigned)c, (unsigned)(c + r->per_txn));
	}
	return (hi - lo) * r->per_txn;
}

/* Pending calls of one conversation, created beforehand in large
 * transactions; each run resolves n of them, per_txn to a transaction. */
static void bench_resolve(const char *name, const char *scenario, int durable, size_t per_txn, size_t n)
{
	if (!wanted(name))
		return;
	struct resolve_ctx r = { .m = { 1, SLICES, { row_new(name, 0, 0, 0) }, resolve_prepare, resolve_work },
				 .per_txn = per_txn, .n = n };
	char dir[4200];
	size_t total = (n / 5 / per_txn + 1) * per_txn + n * (size_t)nruns;
	progress(name);
	for (int i = 0; i < NSYS; i++) {
		sys_dir(dir, sizeof dir, scenario, i);
		r.h[i] = systems[i]->open(dir, durable, MAP_SIZE);
		systems[i]->convs_create(r.h[i], 0, 1);
		for (size_t c = 0; c < total; c += BENCH_MAX_BATCH)
			systems[i]->calls_create(r.h[i], 0, (unsigned)c,
						 (unsigned)(total - c < BENCH_MAX_BATCH ? total : c + BENCH_MAX_BATCH));
	}
	measure(&r.m);
	for (int i = 0; i < NSYS; i++) {
		systems[i]->close(r.h[i]);
		sys_dir(dir, sizeof dir, scenario, i);
		discard(dir);
	}
}

/* ---- report ----------------------------------------------------------- */

static void fmt_value(char *buf, size_t len, const struct bench_row *r, int sys)
{
	double m = bench_median(r->spo[sys], r->nruns);
	if (r->reads)
		snprintf(buf, len, "%.1f µs", m * 1e6);
	else
		snprintf(buf, len, "%.0f/s", m > 0 ? 1 / m : 0);
}

static void fmt_ratio(char *buf, size_t len, const struct bench_row *r, int sys)
{
	double lo, hi, x = bench_ratio(r, sys, &lo, &hi);
	int n = snprintf(buf, len, "%.2fx [%.2f-%.2f]", x, lo, hi);
	if (r->target[sys] > 0 && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, " %s (≥ %.1fx)", x >= r->target[sys] ? "**PASS**" : "**MISS**",
			 r->target[sys]);
}

/* Every run's figure, in the row's unit, for judging the noise. */
static void dump_runs(void)
{
	for (int j = 0; j < nrows; j++) {
		const struct bench_row *r = &rows[j];
		fprintf(stderr, "%s:\n", r->name);
		for (int i = 0; i < NSYS; i++) {
			fprintf(stderr, "  %-9s", systems[i]->name);
			for (int k = 0; k < r->nruns; k++)
				fprintf(stderr, " %10.1f", r->reads ? r->spo[i][k] * 1e6 : 1 / r->spo[i][k]);
			fputc('\n', stderr);
		}
	}
}

/* The newest page must not grow with the store: the per-run ratio of its
 * time in the big store over the small one is 1 within noise, taken as half
 * the range of those per-run ratios, and at least 10%. */
static void report_pages(const struct bench_row *p1k, const struct bench_row *pbig, const char *big)
{
	printf("\nNewest page of 50, time with %s events in the store / with 1,000 (median [range] of per-run ratios):",
	       big);
	double x0 = 0, lo0 = 0, hi0 = 0;
	for (int i = 0; i < NSYS; i++) {
		double q[BENCH_MAX_RUNS], lo, hi;
		for (int k = 0; k < nruns; k++)
			q[k] = p1k->spo[i][k] > 0 ? pbig->spo[i][k] / p1k->spo[i][k] : 0;
		double x = bench_median(q, nruns);
		bench_range(q, nruns, &lo, &hi);
		printf(" %s %.2fx [%.2f-%.2f]%s", systems[i]->name, x, lo, hi, i < NSYS - 1 ? "," : ".");
		if (i == 0) {
			x0 = x;
			lo0 = lo;
			hi0 = hi;
		}
	}
	double noise = (hi0 - lo0) / 2 > 0.10 ? (hi0 - lo0) / 2 : 0.10;
	printf("\nagentd's newest page costs the same at both sizes: %s (|%.2f - 1| %s %.2f, the noise bound)\n",
	       x0 - 1 <= noise && 1 - x0 <= noise ? "**PASS**" : "**MISS**", x0,
	       x0 - 1 <= noise && 1 - x0 <= noise ? "≤" : ">", noise);
}

static void report(void)
{
	printf("\n| operation | agentd | raw LMDB | SQLite | agentd/raw LMDB | agentd/SQLite |\n");
	printf("| --- | ---: | ---: | ---: | --- | --- |\n");
	for (int j = 0; j < nrows; j++) {
		const struct bench_row *r = &rows[j];
		char v[NSYS][32], x1[80], x2[80];
		for (int i = 0; i < NSYS; i++)
			fmt_value(v[i], sizeof v[i], r, i);
		fmt_ratio(x1, sizeof x1, r, 1);
		fmt_ratio(x2, sizeof x2, r, 2);
		printf("| %s | %s | %s | %s | %s | %s |\n", r->name, v[0], v[1], v[2], x1, x2);
	}
}

/* ---- main ------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr, "usage: bench_store [-d DIR] [-r RUNS] [-q] [-k] [-o NAME] [-v]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *parent = ".";
	int opt;
	t_start = bench_now();
	while ((opt = getopt(argc, argv, "d:r:qko:v")) != -1) {
		switch (opt) {
		case 'd': parent = optarg; break;
		case 'r': nruns = atoi(optarg); break;
		case 'q': quick = 1; break;
		case 'k': keep = 1; break;
		case 'o': only = optarg; break;
		case 'v': verbose = 1; break;
		default: usage();
		}
	}
	if (optind != argc || nruns < 1 || nruns > BENCH_MAX_RUNS)
		usage();
	workload_init();
	snprintf(scratch, sizeof scratch, "%s/bench-store.XXXXXX", parent);
	if (!mkdtemp(scratch))
		bench_die(scratch, -errno);
	if ((scratch_fd = open(scratch, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		bench_die(scratch, -errno);

	char machine[512], fs[1024];
	int tmpfs;
	bench_machine(machine, sizeof machine);
	bench_filesystem(scratch, fs, sizeof fs, &tmpfs);
	unsigned big = quick ? 100 : 1000;
	printf("# agentd store benchmark\n\n");
	char load[128];
	bench_loadavg(load, sizeof load);
	printf("- machine: %s\n", machine);
	printf("- scratch directory: %s, on %s%s\n", scratch, fs,
	       tmpfs ? " -- WARNING: a memory filesystem: the durable figures mean nothing" : "");
	printf("- LMDB %d.%d.%d, SQLite %s, msgpack-c %s\n", MDB_VERSION_MAJOR, MDB_VERSION_MINOR, MDB_VERSION_PATCH,
	       sqlite3_libversion(), msgpack_version());
	printf("- %d runs after a warm-up, each run in %d interleaved slices%s; event content: msgpack "
	       "{\"text\": <200 bytes>} (%zu bytes)\n",
	       nruns, SLICES, quick ? " (QUICK: a tenth of the work, smoke test only)" : "", bench_content_len);
	printf("- figures: medians over the runs; writes in operations/s, reads in µs per read\n");
	printf("- ratios: speed of agentd over the other system, the median [min-max] of the per-run ratios "
	       "(> 1: agentd faster)\n");
	fflush(stdout);

	bench_append("append, 1 event/txn, durable", "a1d", 1, 1, 1, per_run(500), 0);
	bench_append("append, 1 event/txn, unsynced", "a1n", 0, 1, 1, per_run(20000), 0);
	bench_append("append, batches of 100 over 64 convs, durable", "a100d", 1, 64, 100, per_run(10000), 1.3);
	bench_append("append, batches of 100 over 64 convs, unsynced", "a100n", 0, 64, 100, per_run(50000), 4);
	bench_writers("append, 8 writer processes, 1 event/txn, durable", "w8d", 1, 0, per_run(100), 0);
	/* The durable frontier's way: one flush under the writer lock, one outside (target: >= 2x SQLite). */
	bench_writers("append, 8 writer processes, 1 event/txn, lazy commit + flush", "w8l", 1, 1, per_run(100), 2.0);
	bench_writers("append, 8 writer processes, 1 event/txn, unsynced", "w8n", 0, 0, per_run(2500), 0);
	bench_load_since();
	struct bench_row *p1k = NULL, *pbig = NULL;
	bench_pages(big, &p1k, &pbig);
	bench_resolve("resolve-if-pending, 1/txn, durable", "r1d", 1, 1, per_run(500));
	bench_resolve("resolve-if-pending, batches of 100, durable", "r100d", 1, 100, per_run(10000));
	bench_resolve("resolve-if-pending, batches of 100, unsynced", "r100n", 0, 100, per_run(50000));

	progress("done");
	char load_end[128];
	bench_loadavg(load_end, sizeof load_end);
	if (lazy_flushes[0] > 0)
		printf("- append, 8 writer processes, lazy commit + flush: flushes of the data file per event, median: "
		       "%s %.2f, %s %.2f (a commit's own flush and the writer's store_flush or mdb_env_sync; agentd's "
		       "store_flush makes none when another writer's commit covers it)\n",
		       systems[0]->name, lazy_flushes[0], systems[1]->name, lazy_flushes[1]);
	printf("- load average (/proc/loadavg) before: %s; after: %s\n", load, load_end);
	if (verbose)
		dump_runs();
	report();
	if (p1k && pbig)
		report_pages(p1k, pbig, big == 1000 ? "1,000,000" : "100,000");
	if (!keep)
		bench_rmtree(scratch);
	return 0;
}
