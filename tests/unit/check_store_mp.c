/*
 * The store's multi-process rules (docs/architecture.md, "The store"), with real processes.
 *
 * Every other process is tests/store_child (STORE_CHILD), fork+exec'd so that
 * it opens its own environment: a forked copy of the test never touches the
 * test's handle. The test's own handle lives in a checked fixture (it runs
 * inside the test's fork) in a fresh mkdtemp directory; an unchecked fixture
 * owns the parent directory and removes it even when a failed test _exit()ed
 * before its teardown. Children wait on pipes: readiness is a byte on their
 * stdout, release is EOF on their stdin (so a dead test frees them too), and
 * conditions are polled against deadlines scaled by AGENTD_TEST_SLOW.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <msgpack.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/suites.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* store_child's exit statuses. */
enum { CHILD_OK = 0, CHILD_FULL = 3, CHILD_STALE = 4 };

static const store_bytes empty_map = { "\x80", 1 };

/* ---- time ------------------------------------------------------------- */

static double slow_factor(void)
{
	const char *s = getenv("AGENTD_TEST_SLOW");
	double f = s ? strtod(s, NULL) : 1.0;
	return f >= 1.0 ? f : 1.0;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline `ms` from now, stretched for slow machines. */
static int64_t deadline_in(int ms)
{
	return mono_ms() + (int64_t)(ms * slow_factor());
}

static int ms_left(int64_t deadline)
{
	int64_t left = deadline - mono_ms();
	return left > 0 ? (int)left : 0;
}

/* ---- fixtures --------------------------------------------------------- */

static char base_dir[PATH_MAX - 64]; /* unchecked: made and removed by the runner */
static char dir[PATH_MAX];      /* checked: this test's store directory */
static store *st;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void rm_tree(const char *path)
{
	if (path[0])
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void base_setup(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(base_dir, sizeof base_dir, "%s/agentd-store-mp.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base_dir)) {
		perror("store_mp: mkdtemp");
		base_dir[0] = 0;
	}
}

static void base_teardown(void)
{
	rm_tree(base_dir);
}

#define MAX_KIDS 16
struct kid {
	pid_t pid;
	int in;  /* write end of its stdin; closing it is EOF, the release */
	int out; /* read end of its stdout */
};
static struct kid kids[MAX_KIDS];

static void setup(void)
{
	ck_assert_msg(base_dir[0], "no base directory");
	snprintf(dir, sizeof dir, "%s/t.XXXXXX", base_dir);
	ck_assert_msg(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	/* A child that died makes writes to its stdin fail with EPIPE rather
	 * than kill the test; children get the default back before exec. */
	signal(SIGPIPE, SIG_IGN);
	st = NULL;
	memset(kids, 0, sizeof kids);
	for (int i = 0; i < MAX_KIDS; i++)
		kids[i].in = kids[i].out = -1;
}

static void teardown(void)
{
	for (int i = 0; i < MAX_KIDS; i++) {
		if (kids[i].in >= 0)
			close(kids[i].in);
		if (kids[i].out >= 0)
			close(kids[i].out);
		if (kids[i].pid > 0) {
			kill(kids[i].pid, SIGKILL);
			waitpid(kids[i].pid, NULL, 0);
		}
	}
	store_close(st);
	st = NULL;
	rm_tree(dir);
}

/* ---- children --------------------------------------------------------- */

/* fork+exec store_child with args (NULL-terminated). The child gets pipes on
 * stdin and stdout and keeps stderr; exec failure comes back through a
 * close-on-exec pipe (zero bytes read: exec succeeded). */
static struct kid *spawn(const char *const *args)
{
	const char *argv[32];
	int in[2], out[2], ep[2], i, n = 0, slot;
	argv[n++] = STORE_CHILD;
	for (i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	for (slot = 0; slot < MAX_KIDS && kids[slot].pid; slot++)
		;
	ck_assert_msg(slot < MAX_KIDS, "too many children");
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(ep, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		/* Only async-signal-safe calls between fork and exec. */
		struct sigaction sa = { .sa_handler = SIG_DFL };
		sigaction(SIGPIPE, &sa, NULL);
		if (dup2(in[0], STDIN_FILENO) >= 0 && dup2(out[1], STDOUT_FILENO) >= 0)
			execv(STORE_CHILD, (char *const *)argv);
		int e = errno;
		(void)!write(ep[1], &e, sizeof e);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(ep[1]);
	kids[slot] = (struct kid){ pid, in[1], out[0] };
	int e;
	ssize_t r;
	do
		r = read(ep[0], &e, sizeof e);
	while (r < 0 && errno == EINTR);
	close(ep[0]);
	ck_assert_msg(r == 0, "exec %s: %s", STORE_CHILD, r > 0 ? strerror(e) : "?");
	return &kids[slot];
}

/* Read up to `len` bytes from the child's stdout before the deadline; returns
 * how many (0: EOF). Fails the test on timeout. */
static size_t kid_read(struct kid *k, char *buf, size_t len, int64_t deadline)
{
	struct pollfd p = { k->out, POLLIN, 0 };
	for (;;) {
		int r = poll(&p, 1, ms_left(deadline));
		if (r < 0 && errno == EINTR)
			continue;
		ck_assert_msg(r > 0, "child %d: nothing on stdout before the deadline", (int)k->pid);
		ssize_t n = read(k->out, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_msg(n >= 0, "read from child %d: %s", (int)k->pid, strerror(errno));
		return (size_t)n;
	}
}

static void expect_byte(struct kid *k, char want, int ms)
{
	char c;
	ck_assert_msg(kid_read(k, &c, 1, deadline_in(ms)) == 1, "child %d: EOF, expected '%c'", (int)k->pid,
		      want);
	ck_assert_msg(c == want, "child %d: got '%c', expected '%c'", (int)k->pid, c, want);
}

/* Everything the child prints until it closes stdout. */
static size_t read_all(struct kid *k, char *buf, size_t cap, int ms)
{
	int64_t dl = deadline_in(ms);
	size_t len = 0, n;
	while (len + 1 < cap && (n = kid_read(k, buf + len, cap - 1 - len, dl)) > 0)
		len += n;
	buf[len] = 0;
	return len;
}

static void kid_send(struct kid *k, char c)
{
	ck_assert_msg(write(k->in, &c, 1) == 1, "write to child %d: %s", (int)k->pid, strerror(errno));
}

/* EOF on its stdin: the gate opens, a holder lets go, a worker exits. */
static void release(struct kid *k)
{
	close(k->in);
	k->in = -1;
}

static void forget(struct kid *k)
{
	if (k->in >= 0)
		close(k->in);
	if (k->out >= 0)
		close(k->out);
	*k = (struct kid){ 0, -1, -1 };
}

/* 1 and *status filled when the child exited, 0 while it runs. */
static int kid_poll_exit(struct kid *k, int *status)
{
	pid_t r = waitpid(k->pid, status, WNOHANG);
	ck_assert_msg(r >= 0, "waitpid %d: %s", (int)k->pid, strerror(errno));
	return r == k->pid;
}

/* The child's exit status, waiting at most ms (scaled); a child still running
 * then is killed and fails the test. Reaped children are forgotten, so their
 * pids are never signalled again. */
static int kid_exit(struct kid *k, int ms)
{
	int64_t dl = deadline_in(ms);
	int status;
	while (!kid_poll_exit(k, &status)) {
		if (mono_ms() >= dl) {
			pid_t pid = k->pid;
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			forget(k);
			ck_abort_msg("child %d did not exit within %d ms", (int)pid, ms);
		}
		nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
	}
	forget(k);
	ck_assert_msg(WIFEXITED(status), "child died of signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return WEXITSTATUS(status);
}

static void kill9(struct kid *k)
{
	int status;
	ck_assert_int_eq(kill(k->pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(k->pid, &status, 0), k->pid);
	forget(k);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* ---- the test's own store operations ---------------------------------- */

static void open_store(size_t map_size, size_t max_map_size)
{
	struct store_opts o = { .map_size = map_size, .max_map_size = max_map_size };
	int err = store_open(&st, dir, &o);
	ck_assert_msg(err == 0, "store_open: %s", store_strerror(err));
}

static const char *sz(char *buf, size_t v)
{
	snprintf(buf, 32, "%zu", v);
	return buf;
}

/* Event content: a msgpack string of `eid` padded with '.' to pad bytes. */
static void pack_content(msgpack_sbuffer *sb, const char *eid, size_t pad)
{
	msgpack_packer pk;
	size_t n = strlen(eid), len = n > pad ? n : pad;
	char *s = malloc(len);
	ck_assert_ptr_nonnull(s);
	memcpy(s, eid, n);
	memset(s + n, '.', len - n);
	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_str_with_body(&pk, s, len);
	free(s);
}

static int content_is(store_bytes c, const char *eid, size_t pad)
{
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	pack_content(&sb, eid, pad);
	int same = c.len == sb.size && memcmp(c.ptr, sb.data, sb.size) == 0;
	msgpack_sbuffer_destroy(&sb);
	return same;
}

static void conv_create(const char *id)
{
	store_txn *x;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_create(x, id, empty_map), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
}

/* Append events eids[0..n) (content padded to pad bytes) in one write
 * transaction. Returns the first error, the transaction then aborted; when
 * the append succeeded but the commit failed, *at_commit is set. */
static int append_batch(const char *conv, const char *const *eids, size_t n, size_t pad, int *at_commit)
{
	msgpack_sbuffer sb;
	store_txn *x;
	uint64_t seq;
	int err = store_txn_begin(st, STORE_WRITE, &x);
	*at_commit = 0;
	if (err)
		return err;
	msgpack_sbuffer_init(&sb);
	for (size_t i = 0; i < n && !err; i++) {
		pack_content(&sb, eids[i], pad);
		struct store_event_in ev = { "user_msg", { sb.data, sb.size }, eids[i] };
		err = store_event_append(x, conv, &ev, &seq, NULL);
	}
	msgpack_sbuffer_destroy(&sb);
	if (err) {
		/* A poisoned transaction: its commit must give the same error. */
		int cerr = store_txn_commit(x);
		ck_assert_msg(cerr == err, "commit after %s returned %s", store_strerror(err),
			      store_strerror(cerr));
		return err;
	}
	err = store_txn_commit(x);
	*at_commit = err != 0;
	return err;
}

static int append1(const char *conv, const char *eid, size_t pad)
{
	int at_commit;
	return append_batch(conv, &eid, 1, pad, &at_commit);
}

/* A copy of one event, outliving its transaction. */
struct rec {
	uint64_t seq;
	char eid[STORE_EVENT_ID_MAX + 1];
	store_bytes content; /* malloc'd */
};
struct recs {
	struct rec *v;
	size_t n, cap;
};

static int collect(void *arg, const struct store_event *ev)
{
	struct recs *r = arg;
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 64;
		r->v = realloc(r->v, r->cap * sizeof *r->v);
		ck_assert_ptr_nonnull(r->v);
	}
	struct rec *e = &r->v[r->n++];
	e->seq = ev->seq;
	ck_assert_uint_le(ev->event_id.len, STORE_EVENT_ID_MAX);
	memcpy(e->eid, ev->event_id.ptr, ev->event_id.len);
	e->eid[ev->event_id.len] = 0;
	void *c = malloc(ev->content.len);
	ck_assert_ptr_nonnull(c);
	memcpy(c, ev->content.ptr, ev->content.len);
	e->content = (store_bytes){ c, ev->content.len };
	return 0;
}

/* Every event of conv, read in a fresh read transaction. */
static void load(const char *conv, struct recs *out)
{
	store_txn *x;
	struct store_range all = { 0 };
	memset(out, 0, sizeof *out);
	int err = store_txn_begin(st, STORE_READ, &x);
	ck_assert_msg(err == 0, "read txn: %s", store_strerror(err));
	err = store_events_stream(x, conv, &all, collect, out);
	store_txn_abort(x);
	ck_assert_msg(err == 0, "stream %s: %s", conv, store_strerror(err));
}

static void recs_free(struct recs *r)
{
	for (size_t i = 0; i < r->n; i++)
		free((void *)r->v[i].content.ptr);
	free(r->v);
	memset(r, 0, sizeof *r);
}

/* The log is exactly seqs 1..n, and event i (from 1) is "TAG-i" with its content. */
static void assert_log(const struct recs *r, size_t from, size_t n, const char *tag, size_t pad)
{
	char eid[128]; /* a tag and a number: bigger than GCC -O3 can prove it needs */
	ck_assert_uint_ge(r->n, from + n);
	for (size_t i = 0; i < n; i++) {
		const struct rec *e = &r->v[from + i];
		snprintf(eid, sizeof eid, "%s-%zu", tag, i + 1);
		ck_assert_uint_eq(e->seq, from + i + 1);
		ck_assert_str_eq(e->eid, eid);
		ck_assert_msg(content_is(e->content, eid, pad), "seq %llu: content differs",
			      (unsigned long long)e->seq);
	}
}

/* ---- 1. concurrent appenders ------------------------------------------ */

#define NPROC 6
#define NAPPEND 30

/* Six processes, each with its own environment, released together, append
 * to one shared conversation and to their own, one event per transaction.
 * The shared log must be exactly 1..N with every event_id once, each
 * process's events in its own order, and no cross-talk between logs. */
START_TEST(concurrent_appenders)
{
	struct kid *k[NPROC];
	char tag[NPROC][16], own[NPROC][16], n[16];
	open_store(0, 0);
	snprintf(n, sizeof n, "%d", NAPPEND);
	for (int i = 0; i < NPROC; i++) {
		snprintf(tag[i], sizeof tag[i], "p%d", i);
		snprintf(own[i], sizeof own[i], "own-%d", i);
		const char *args[] = { "-g", dir, "append", n, tag[i], "shared", own[i], NULL };
		k[i] = spawn(args);
	}
	/* Each has its environment open; then all go at once. */
	for (int i = 0; i < NPROC; i++)
		expect_byte(k[i], 'R', 5000);
	for (int i = 0; i < NPROC; i++)
		release(k[i]);
	for (int i = 0; i < NPROC; i++)
		ck_assert_int_eq(kid_exit(k[i], 15000), CHILD_OK);

	struct recs r;
	int seen[NPROC][NAPPEND + 1] = { { 0 } }, last[NPROC] = { 0 }, switches = 0, prev = -1;
	load("shared", &r);
	ck_assert_uint_eq(r.n, (size_t)NPROC * NAPPEND);
	for (size_t i = 0; i < r.n; i++) {
		int p, j, used = 0;
		ck_assert_uint_eq(r.v[i].seq, i + 1);
		ck_assert_msg(sscanf(r.v[i].eid, "p%d-%d%n", &p, &j, &used) == 2 && r.v[i].eid[used] == 0 &&
			      p >= 0 && p < NPROC && j >= 1 && j <= NAPPEND, "unexpected event_id %s", r.v[i].eid);
		ck_assert_msg(seen[p][j]++ == 0, "event_id %s twice", r.v[i].eid);
		ck_assert_msg(j == last[p] + 1, "%s after p%d-%d: a process's order was broken", r.v[i].eid, p,
			      last[p]);
		last[p] = j;
		ck_assert(content_is(r.v[i].content, r.v[i].eid, 0));
		switches += prev >= 0 && p != prev;
		prev = p;
	}
	for (int p = 0; p < NPROC; p++)
		ck_assert_int_eq(last[p], NAPPEND); /* with the checks above: each 1..N exactly once */
	/* Not an invariant, but without interleaving the test proved nothing. */
	ck_assert_msg(switches >= NPROC, "the writers never interleaved (%d switches)", switches);
	recs_free(&r);

	for (int p = 0; p < NPROC; p++) {
		load(own[p], &r);
		ck_assert_uint_eq(r.n, NAPPEND);
		assert_log(&r, 0, NAPPEND, tag[p], 0);
		recs_free(&r);
	}
}
END_TEST

/* ---- 2. killed inside a write transaction ----------------------------- */

static int has_eid(const struct recs *r, const char *eid)
{
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->v[i].eid, eid) == 0)
			return 1;
	return 0;
}

/* A writer SIGKILLed holding LMDB's writer lock: the robust mutex lets the
 * next writer go on, whether it was already waiting (another process) or
 * comes later (this one), and the dead transaction left nothing behind. */
START_TEST(kill_inside_write_txn)
{
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "before-1", 0), 0);

	/* A writer with its store open (opening takes the writer lock briefly,
	 * so it opens first), a holder inside its transaction, then the writer
	 * released to queue behind it. */
	const char *wait1[] = { "-g", dir, "append", "1", "after", "c", NULL };
	struct kid *w = spawn(wait1);
	expect_byte(w, 'R', 5000);
	const char *hold1[] = { dir, "hold-write", "c", "doomed-1", NULL };
	struct kid *h = spawn(hold1);
	expect_byte(h, 'W', 5000);
	release(w);
	int status;
	ck_assert_msg(!kid_poll_exit(w, &status), "a writer committed while another held the write txn");
	kill9(h);
	ck_assert_int_eq(kid_exit(w, 10000), CHILD_OK);

	/* A second holder killed with nobody waiting: this process is next. */
	const char *hold2[] = { dir, "hold-write", "c", "doomed-2", NULL };
	h = spawn(hold2);
	expect_byte(h, 'W', 5000);
	kill9(h);
	ck_assert_int_eq(append1("c", "mine-1", 0), 0); /* would hang (test timeout) if the lock were lost */

	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_str_eq(r.v[0].eid, "before-1");
	ck_assert_str_eq(r.v[1].eid, "after-1");
	ck_assert_str_eq(r.v[2].eid, "mine-1");
	for (size_t i = 0; i < r.n; i++)
		ck_assert_uint_eq(r.v[i].seq, i + 1);
	ck_assert(!has_eid(&r, "doomed-1") && !has_eid(&r, "doomed-2"));
	recs_free(&r);

	/* Nor did the killed transactions leave an event_id index entry: the
	 * same ids now append as new events, not as duplicates. */
	store_txn *x;
	uint64_t seq;
	int dup = -1;
	struct store_event_in ev = { "user_msg", { "\xc0", 1 }, "doomed-1" };
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &ev, &seq, &dup), 0);
	ck_assert_int_eq(dup, 0);
	ck_assert_uint_eq(seq, 4);
	ck_assert_int_eq(store_txn_commit(x), 0);
}
END_TEST

/* ---- 3. killed inside a read transaction ------------------------------ */

static unsigned readers(void)
{
	struct store_stat s;
	ck_assert_int_eq(store_stat(st, &s), 0);
	return s.readers;
}

/* Pages the file's used part grows by while the fsm_state of conv is
 * rewritten n times, one write transaction each. With nothing pinning old
 * snapshots LMDB reuses the pages each rewrite frees, so the file stays put;
 * a reader slot, live or stale, keeps them all. */
static uint64_t rewrite_growth(const char *conv, int n)
{
	struct store_stat a, b;
	char fsm[200];
	fsm[0] = (char)0xd9; /* msgpack str8 */
	fsm[1] = (char)(sizeof fsm - 2);
	ck_assert_int_eq(store_stat(st, &a), 0);
	for (int i = 0; i < n; i++) {
		store_txn *x;
		memset(fsm + 2, 'a' + i % 26, sizeof fsm - 2);
		ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
		ck_assert_int_eq(store_conv_put_fsm(x, conv, (store_bytes){ fsm, sizeof fsm }), 0);
		ck_assert_int_eq(store_txn_commit(x), 0);
	}
	ck_assert_int_eq(store_stat(st, &b), 0);
	return (b.size_bytes - a.size_bytes) / 4096;
}

#define REWRITES 150

/* A reader SIGKILLed inside its transaction leaves its slot taken, pinning
 * its snapshot: the file grows on every rewrite. store_reader_check clears
 * exactly the dead slot (a live reader's stays), the file stops growing, and
 * store_stat's count of slots in use drops. */
START_TEST(kill_inside_read_txn)
{
	int cleared = -1;
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "e-1", 0), 0);
	ck_assert_int_eq(store_reader_check(st, &cleared), 0);
	ck_assert_int_eq(cleared, 0);
	unsigned idle = readers(); /* nobody is reading now */
	rewrite_growth("c", 10);   /* warm the free list up */
	uint64_t base = rewrite_growth("c", REWRITES);
	ck_assert_uint_le(base, 10);

	const char *hold[] = { dir, "hold-read", NULL };
	struct kid *dead = spawn(hold);
	expect_byte(dead, 'R', 5000);
	ck_assert_uint_ge(readers(), 1);
	kill9(dead);
	ck_assert_msg(readers() >= 1, "the dead reader's slot vanished by itself?");
	uint64_t pinned = rewrite_growth("c", REWRITES);
	ck_assert_msg(pinned >= REWRITES, "a stale reader slot should pin every freed page: grew %llu pages",
		      (unsigned long long)pinned);

	/* A live reader, which must survive the check. */
	struct kid *live = spawn(hold);
	expect_byte(live, 'R', 5000);
	ck_assert_int_eq(store_reader_check(st, &cleared), 0);
	ck_assert_int_eq(cleared, 1); /* the dead one only */
	ck_assert_int_eq(store_reader_check(st, &cleared), 0);
	ck_assert_int_eq(cleared, 0);
	unsigned with_live = readers();
	release(live);
	ck_assert_int_eq(kid_exit(live, 5000), CHILD_OK);

	/* Nothing pins now: the file stops growing. */
	rewrite_growth("c", 10);
	uint64_t after = rewrite_growth("c", REWRITES);
	ck_assert_msg(after <= 10, "after store_reader_check the file still grew %llu pages",
		      (unsigned long long)after);

	/* STORE BUG (store_lmdb.c, store_stat): readers is LMDB's me_numreaders,
	 * the high-water mark of reader slots ever used (LMDB never lowers it),
	 * not the slots in use that store.h promises; so it never drops after a
	 * reader ends or store_reader_check clears a dead one. */
	ck_assert_msg(with_live == 1 && readers() == 0,
		      "store_stat.readers does not count reader slots in use: %u with nobody reading, "
		      "%u with one live reader after clearing the dead one, %u after it ended "
		      "(expected %u, 1, 0)",
		      idle, with_live, readers(), idle);
}
END_TEST

/* ---- 4. map full, and map growth -------------------------------------- */

#define FULL_MAP (1 * MiB)
#define FULL_PAD 1000
#define MORE 600 /* events of FULL_PAD bytes: more than FULL_MAP holds */

/* A map that cannot grow: appending ends in exactly STORE_E_FULL, nothing
 * committed is lost and reads go on; then a process allowed a larger map
 * appends again, and this one, which had the old map, reads and writes in the
 * grown map (MDB_MAP_RESIZED); and so does a reopened handle. */
START_TEST(map_full_then_grown)
{
	char eid[64], m[32], mx[32], pad[32], nmore[32];
	size_t committed = 0;
	int err = 0, at_commit = 0;
	struct store_stat ss;
	open_store(FULL_MAP, FULL_MAP);
	conv_create("c");
	while (committed < 10000) {
		snprintf(eid, sizeof eid, "full-%zu", committed + 1);
		const char *e = eid;
		if ((err = append_batch("c", &e, 1, FULL_PAD, &at_commit)) != 0)
			break;
		committed++;
	}
	ck_assert_msg(err == STORE_E_FULL, "append %zu: %s (at %s), expected STORE_E_FULL", committed + 1,
		      store_strerror(err), at_commit ? "commit" : "append");
	ck_assert_uint_gt(committed, 100); /* about 1 MiB of 1 KiB events did fit */

	/* The map cannot grow: the next attempt fails the same way. */
	snprintf(eid, sizeof eid, "full-%zu", committed + 1);
	ck_assert_int_eq(append1("c", eid, FULL_PAD), STORE_E_FULL);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_eq(ss.map_size, FULL_MAP);

	/* Everything committed is there, and reads are served. */
	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, committed);
	assert_log(&r, 0, committed, "full", FULL_PAD);
	recs_free(&r);

	/* So does another process held to the same limit. */
	const char *same[] = { "-m", sz(m, FULL_MAP), "-M", sz(mx, FULL_MAP), "-p", sz(pad, FULL_PAD), dir,
			       "append", "1", "other", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(same), 10000), CHILD_FULL);

	/* Another process, allowed 8 MiB, grows the map and appends more than
	 * the old map could ever hold. */
	const char *more[] = { "-m", sz(m, FULL_MAP), "-M", sz(mx, 8 * MiB), "-p", sz(pad, FULL_PAD), dir,
			       "append", sz(nmore, MORE), "more", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(more), 15000), CHILD_OK);

	/* This handle, mapped at 1 MiB, reads past it and writes again. */
	load("c", &r);
	ck_assert_uint_eq(r.n, committed + MORE);
	assert_log(&r, 0, committed, "full", FULL_PAD);
	for (size_t i = 0; i < MORE; i++) {
		snprintf(eid, sizeof eid, "more-%zu", i + 1);
		ck_assert_uint_eq(r.v[committed + i].seq, committed + i + 1);
		ck_assert_str_eq(r.v[committed + i].eid, eid);
		ck_assert(content_is(r.v[committed + i].content, eid, FULL_PAD));
	}
	recs_free(&r);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_gt(ss.map_size, FULL_MAP);
	err = append1("c", "after-1", 0);
	ck_assert_msg(err == 0, "append after another process grew the map: %s", store_strerror(err));

	/* Reopened with room to grow, it grows ahead of need again: no
	 * transaction of 1 KB meets a full map. */
	store_close(st);
	st = NULL;
	/* Growth, not durability, is what this part checks: 2048 flushed
	 * commits took over the case's timeout on a disk shared with other
	 * fsyncing processes. */
	struct store_opts o = { .map_size = FULL_MAP, .max_map_size = 16 * MiB, .sync = STORE_SYNC_NONE };
	ck_assert_int_eq(store_open(&st, dir, &o), 0);
	size_t extra = 0, fulls = 0;
	for (; extra < 2048; extra++) {
		snprintf(eid, sizeof eid, "re-%zu", extra + 1);
		if ((err = append1("c", eid, FULL_PAD)) == STORE_E_FULL) {
			fulls++;
			err = append1("c", eid, FULL_PAD); /* the map grew before this txn */
		}
		ck_assert_msg(err == 0, "append re-%zu: %s", extra + 1, store_strerror(err));
	}
	ck_assert_uint_eq(fulls, 0);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_le(ss.map_size, 16 * MiB);
	load("c", &r);
	ck_assert_uint_eq(r.n, committed + MORE + 1 + extra);
	assert_log(&r, committed + MORE + 1, extra, "re", FULL_PAD);
	recs_free(&r);
}
END_TEST

#define GROW_TXNS 128
#define GROW_BATCH 16
#define GROW_PAD (2 * KiB)

/* A map of 1 MiB allowed to grow to 64 MiB: 4 MiB of events go in, in
 * transactions of 32 KiB, each succeeding at once: the store grows the map
 * before a write transaction once the data passes three quarters of it, so
 * only a transaction larger than the last quarter meets a full map (then
 * STORE_E_FULL, and the map grows before the next: store.h). A process that
 * had the environment open at 1 MiB before the growth then reads every event
 * and appends its own. */
START_TEST(map_grows_across_processes)
{
	char m[32], mx[32], line[128];
	char eid[GROW_BATCH][32];
	const char *eids[GROW_BATCH];
	size_t fulls = 0, n = 0;
	open_store(1 * MiB, 64 * MiB);
	conv_create("big");

	const char *args[] = { "-g", "-m", sz(m, 1 * MiB), "-M", sz(mx, 64 * MiB), dir,
			       "count", "big", ",", "append", "20", "b", "big", NULL };
	struct kid *b = spawn(args);
	expect_byte(b, 'R', 5000); /* its map is 1 MiB now */

	for (int t = 0; t < GROW_TXNS; t++) {
		for (int i = 0; i < GROW_BATCH; i++) {
			snprintf(eid[i], sizeof eid[i], "g-%zu", n + (size_t)i + 1);
			eids[i] = eid[i];
		}
		int at_commit, err = append_batch("big", eids, GROW_BATCH, GROW_PAD, &at_commit);
		if (err == STORE_E_FULL) {
			fulls++;
			err = append_batch("big", eids, GROW_BATCH, GROW_PAD, &at_commit);
		}
		ck_assert_msg(err == 0, "txn %d: %s at %s (after %zu growths)", t, store_strerror(err),
			      at_commit ? "commit" : "append", fulls);
		n += GROW_BATCH;
	}
	struct store_stat ss;
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_eq(fulls, 0);
	ck_assert_uint_ge(ss.map_size, 4 * MiB);
	ck_assert_uint_le(ss.map_size, 64 * MiB);

	struct recs r;
	uint64_t bytes = 0;
	load("big", &r);
	ck_assert_uint_eq(r.n, n);
	assert_log(&r, 0, n, "g", GROW_PAD);
	for (size_t i = 0; i < r.n; i++)
		bytes += r.v[i].content.len;
	recs_free(&r);

	/* The old-map process reads everything, then writes. */
	release(b);
	read_all(b, line, sizeof line, 15000);
	unsigned long long cnt, last, got_bytes;
	ck_assert_msg(sscanf(line, "%llu %llu %llu", &cnt, &last, &got_bytes) == 3, "child said: %s", line);
	ck_assert_uint_eq(cnt, n);
	ck_assert_uint_eq(last, n);
	ck_assert_uint_eq(got_bytes, bytes);
	ck_assert_int_eq(kid_exit(b, 15000), CHILD_OK);

	load("big", &r);
	ck_assert_uint_eq(r.n, n + 20);
	for (size_t i = 0; i < 20; i++) {
		snprintf(eid[0], sizeof eid[0], "b-%zu", i + 1);
		ck_assert_uint_eq(r.v[n + i].seq, n + i + 1);
		ck_assert_str_eq(r.v[n + i].eid, eid[0]);
		ck_assert(content_is(r.v[n + i].content, eid[0], 0));
	}
	recs_free(&r);
}
END_TEST

/* MDB_MAP_RESIZED when this process cannot adopt the new size yet: it holds
 * a read transaction from before another process grew the map (store.h allows
 * read transactions beside a write one). That old transaction reads on
 * unharmed; a transaction begun beside it cannot see the grown map, so its
 * begin must fail with an error that says so, and succeed once the old
 * transaction has ended. */
START_TEST(map_resized_while_txn_open)
{
	char m[32], mx[32], pad[32], nmore[32];
	store_txn *old, *x;
	uint64_t seq;
	open_store(FULL_MAP, 64 * MiB);
	conv_create("c");
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &old), 0);

	const char *grow[] = { "-m", sz(m, FULL_MAP), "-M", sz(mx, 64 * MiB), "-p", sz(pad, FULL_PAD), dir,
			       "append", sz(nmore, MORE), "g", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(grow), 15000), CHILD_OK);

	/* The old snapshot: still the empty log. */
	ck_assert_int_eq(store_event_latest_seq(old, "c", &seq), 0);
	ck_assert_uint_eq(seq, 0);

	int werr = store_txn_begin(st, STORE_WRITE, &x);
	if (werr == 0)
		store_txn_abort(x);
	store_txn_abort(old);

	/* With nothing open, the handle adopts the grown map. */
	ck_assert_int_eq(append1("c", "mine-1", 0), 0);
	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, MORE + 1);
	assert_log(&r, 0, MORE, "g", FULL_PAD);
	ck_assert_str_eq(r.v[MORE].eid, "mine-1");
	recs_free(&r);

	/* With a txn open the map cannot be moved under it, so the begin cannot
	 * adopt the grown map: it must say so as a retryable error ("end your
	 * open transaction first", store.h: -EAGAIN), never as -EIO, which a
	 * caller would take for a disk failure (docs/architecture.md: another
	 * process's growth of the map is handled). */
	ck_assert_msg(werr != -EIO && werr != 0,
		      "begin beside a pre-growth read txn returned %d (%s): MDB_MAP_RESIZED leaks out as an "
		      "I/O error",
		      werr, store_strerror(werr));
}
END_TEST

/* This process's maps of the store's data file, from /proc/self/smaps:
 * how many, the size of the last, and how many are writable shared memory
 * (VmFlags "sh"); and its descriptors onto the file. */
struct data_maps {
	int n, shared;
	size_t size;
	int fds; /* this process's descriptors onto the data file */
};

static struct data_maps data_maps(void)
{
	char real[PATH_MAX], data[PATH_MAX + 16], line[PATH_MAX + 128];
	struct data_maps m = { 0 };
	int in_data = 0;
	ck_assert_ptr_nonnull(realpath(dir, real));
	snprintf(data, sizeof data, "%s/data.mdb", real);
	FILE *f = fopen("/proc/self/smaps", "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char path[PATH_MAX + 1] = "";
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4096s", &lo, &hi, path) >= 2) { /* a map's first line */
			in_data = strcmp(path, data) == 0;
			if (in_data) {
				m.n++;
				m.size = hi - lo;
			}
		} else if (in_data && strncmp(line, "VmFlags:", 8) == 0) {
			m.shared += strstr(line, " sh") != NULL;
		}
	}
	fclose(f);
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char fdpath[300], target[PATH_MAX];
		snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%s", de->d_name);
		ssize_t len = readlink(fdpath, target, sizeof target - 1);
		if (len > 0) {
			target[len] = 0;
			m.fds += strcmp(target, data) == 0;
		}
	}
	closedir(d);
	return m;
}

/* LMDB never writes through its map (no MDB_WRITEMAP), yet maps the file
 * through its read-write descriptor, which makes the map writable shared
 * memory: then every page a flush writes back is first write-protected in
 * every process that maps the file, a page-table walk per process per page,
 * the supervisor's and every worker's (store_lmdb.c, map_unshared). The
 * store's map is not writable shared memory: not at open, not after it grew
 * its own map, not after it adopted the larger map another process made. */
START_TEST(map_not_writable_shared)
{
	char m[32], mx[32], pad[32];
	struct store_stat ss;
	open_store(1 * MiB, 64 * MiB);
	conv_create("c");
	struct data_maps dm = data_maps();
	ck_assert_int_eq(dm.n, 1);
	ck_assert_uint_eq(dm.size, 1 * MiB);
	ck_assert_msg(dm.shared == 0, "the data file is mapped as writable shared memory at open");
	/* LMDB's own two (its descriptor, and the O_DSYNC one it writes meta
	 * pages through): the read-only one is closed once mapped. */
	ck_assert_int_eq(dm.fds, 2);

	/* Grown by this handle ahead of need. */
	size_t n = 0;
	char eid[32];
	do {
		snprintf(eid, sizeof eid, "g-%zu", ++n);
		ck_assert_int_eq(append1("c", eid, GROW_PAD), 0);
		ck_assert_int_eq(store_stat(st, &ss), 0);
	} while (ss.map_size == 1 * MiB && n < 10000);
	ck_assert_uint_gt(ss.map_size, 1 * MiB);
	dm = data_maps();
	ck_assert_int_eq(dm.n, 1);
	ck_assert_uint_eq(dm.size, ss.map_size);
	ck_assert_msg(dm.shared == 0, "the data file is mapped as writable shared memory after growing");
	ck_assert_int_eq(dm.fds, 2);

	/* Grown by another process, past the end of this handle's map: adopted
	 * at the next begin, here a read's (a write's would grow its own map
	 * ahead of need first). */
	size_t ours = ss.map_size;
	const char *grow[] = { "-m", sz(m, 32 * MiB), "-M", sz(mx, 64 * MiB), "-p", sz(pad, GROW_PAD), dir, "append",
			       "1024", "o", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(grow), 15000), CHILD_OK);
	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, n + 1024);
	ck_assert_str_eq(r.v[n].eid, "o-1");
	ck_assert_str_eq(r.v[n + 1023].eid, "o-1024");
	recs_free(&r);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_gt(ss.map_size, ours);
	dm = data_maps();
	ck_assert_int_eq(dm.n, 1);
	ck_assert_uint_eq(dm.size, ss.map_size);
	ck_assert_msg(dm.shared == 0, "the data file is mapped as writable shared memory after adopting a map");
	ck_assert_int_eq(dm.fds, 2);
}
END_TEST

/* ---- 5. close-on-exec ------------------------------------------------- */

/* The store's files never leak into programs a worker execs (models, tools):
 * every descriptor onto data.mdb (and lock.mdb; flush.lock is mapped, its
 * descriptor closed at once) is FD_CLOEXEC, and an exec'd
 * child holds none. */
START_TEST(data_fd_cloexec)
{
	char real[PATH_MAX], data[PATH_MAX + 16], lock[PATH_MAX + 16], flush[PATH_MAX + 16], path[64], target[PATH_MAX];
	int ndata = 0;
	open_store(0, 0);
	conv_create("c"); /* LMDB has opened everything it will */
	ck_assert_ptr_nonnull(realpath(dir, real));
	snprintf(data, sizeof data, "%s/data.mdb", real);
	snprintf(lock, sizeof lock, "%s/lock.mdb", real);
	snprintf(flush, sizeof flush, "%s/flush.lock", real);

	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		int fd = atoi(de->d_name);
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n < 0)
			continue;
		target[n] = 0;
		int is_data = strcmp(target, data) == 0;
		if (!is_data && strcmp(target, lock) != 0 && strcmp(target, flush) != 0)
			continue;
		ndata += is_data;
		int flags = fcntl(fd, F_GETFD);
		ck_assert_msg(flags >= 0 && (flags & FD_CLOEXEC), "fd %d onto %s is not close-on-exec", fd,
			      target);
	}
	closedir(d);
	ck_assert_int_ge(ndata, 1);

	char out[8192];
	const char *args[] = { "-", "list-fds", NULL };
	struct kid *k = spawn(args);
	read_all(k, out, sizeof out, 5000);
	ck_assert_int_eq(kid_exit(k, 5000), CHILD_OK);
	ck_assert_msg(strncmp(out, "0 ", 2) == 0 || strstr(out, "\n0 "), "list-fds printed: %s", out);
	ck_assert_msg(!strstr(out, "data.mdb") && !strstr(out, "lock.mdb") && !strstr(out, "flush.lock"),
		      "an exec'd child inherited the store's files:\n%s", out);
}
END_TEST

/* ---- 6. concurrent resolvers ------------------------------------------ */

/* Several processes race to resolve one pending tool call: exactly one wins,
 * every other gets STORE_E_STALE, and the row holds the winner's result. */
START_TEST(concurrent_resolvers)
{
	store_txn *x;
	struct kid *k[NPROC];
	char tag[NPROC][16];
	open_store(0, 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	struct store_tool_call_in tc = { "tc-1", "approve", STORE_EXEC_HUMAN, { "\x80", 1 }, { 0 } };
	ck_assert_int_eq(store_tool_call_upsert(x, "c", &tc), 0);
	ck_assert_int_eq(store_expiry_schedule(x, "tc-1", store_txn_now(x) + 3600 * 1000), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);

	for (int i = 0; i < NPROC; i++) {
		snprintf(tag[i], sizeof tag[i], "r%d", i);
		const char *args[] = { "-g", dir, "resolve", "tc-1", tag[i], NULL };
		k[i] = spawn(args);
	}
	for (int i = 0; i < NPROC; i++)
		expect_byte(k[i], 'R', 5000);
	for (int i = 0; i < NPROC; i++)
		release(k[i]);
	int winner = -1, stale = 0;
	for (int i = 0; i < NPROC; i++) {
		int rc = kid_exit(k[i], 10000);
		ck_assert_msg(rc == CHILD_OK || rc == CHILD_STALE, "resolver %d exited %d", i, rc);
		if (rc == CHILD_OK) {
			ck_assert_msg(winner < 0, "resolvers %d and %d both won", winner, i);
			winner = i;
		} else {
			stale++;
		}
	}
	ck_assert_int_ge(winner, 0);
	ck_assert_int_eq(stale, NPROC - 1);

	struct store_tool_call got;
	int64_t dl;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &x), 0);
	ck_assert_int_eq(store_tool_call_get(x, "tc-1", &got), 0);
	ck_assert_int_eq(got.status, STORE_TC_RESOLVED);
	ck_assert(content_is(got.result, tag[winner], 0));
	ck_assert_int_gt(got.resolved_at, 0);
	ck_assert_int_eq(got.deadline, 0);
	ck_assert_int_eq(store_expiry_earliest(x, &dl), STORE_E_NOTFOUND);
	store_txn_abort(x);

	/* And a late resolver here is stale too. */
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_tool_call_resolve(x, "tc-1", STORE_TC_ERRORED, (store_bytes){ 0 }, NULL),
			 STORE_E_STALE);
	store_txn_abort(x);
}
END_TEST

/* ---- 7. fencing ------------------------------------------------------- */

static uint64_t lease_next(const char *conv)
{
	store_txn *x;
	uint64_t gen = 0;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_lease_next(x, conv, &gen), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	return gen;
}

/* Two live workers of one conversation with different lease generations: once
 * the supervisor takes the next generation, the old worker's writes are
 * fenced (nothing written) while the new one's commit. */
START_TEST(fencing)
{
	char g1s[32], g2s[32];
	open_store(0, 0);
	conv_create("c");
	uint64_t g1 = lease_next("c");
	ck_assert_uint_eq(g1, 1);
	const char *a_args[] = { dir, "worker", "c", sz(g1s, g1), "a", NULL };
	struct kid *a = spawn(a_args);
	kid_send(a, 'w');
	expect_byte(a, 'o', 5000);

	/* The supervisor replaces the worker; the old one is still alive. */
	uint64_t g2 = lease_next("c");
	ck_assert_uint_eq(g2, 2);
	const char *b_args[] = { dir, "worker", "c", sz(g2s, g2), "b", NULL };
	struct kid *b = spawn(b_args);
	kid_send(b, 'w');
	expect_byte(b, 'o', 5000);
	kid_send(a, 'w');
	expect_byte(a, 'f', 5000);
	kid_send(b, 'w');
	expect_byte(b, 'o', 5000);
	kid_send(a, 'w');
	expect_byte(a, 'f', 5000);
	release(a);
	release(b);
	ck_assert_int_eq(kid_exit(a, 5000), CHILD_OK);
	ck_assert_int_eq(kid_exit(b, 5000), CHILD_OK);

	store_txn *x;
	struct store_conv c;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &x), 0);
	ck_assert_int_eq(store_lease_check(x, "c", g1), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_check(x, "c", g2), 0);
	ck_assert_int_eq(store_conv_get(x, "c", &c), 0);
	ck_assert_uint_eq(c.lease, g2);
	store_txn_abort(x);

	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_str_eq(r.v[0].eid, "a-1");
	ck_assert_str_eq(r.v[1].eid, "b-1");
	ck_assert_str_eq(r.v[2].eid, "b-2");
	for (size_t i = 0; i < r.n; i++)
		ck_assert_uint_eq(r.v[i].seq, i + 1);
	recs_free(&r);
}
END_TEST

/* ---- 8. flushes shared between processes (store/flushrec.h) ----------- */

/* One event committed STORE_WRITE_LAZY: not durable until a flush. */
static void append_lazy(const char *conv, const char *eid)
{
	store_txn *x;
	uint64_t seq;
	struct store_event_in ev = { "user_msg", { "\xc0", 1 }, eid };
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE_LAZY, &x), 0);
	ck_assert_int_eq(store_event_append(x, conv, &ev, &seq, NULL), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
}

/* This handle's store_flush calls so far: made a flush, and spared one. */
static void assert_flushes(uint64_t made, uint64_t spared)
{
	struct store_stat ss;
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_msg(ss.flushes == made && ss.flushes_spared == spared,
		      "flushes made %llu spared %llu, expected %llu and %llu", (unsigned long long)ss.flushes,
		      (unsigned long long)ss.flushes_spared, (unsigned long long)made, (unsigned long long)spared);
}

/* store_flush succeeds, with this handle's count of flushes then made and
 * spared. */
static void flush_expect(uint64_t made, uint64_t spared)
{
	ck_assert_int_eq(store_flush(st), 0);
	assert_flushes(made, spared);
}

/* Conversation c, our lazy commit of "mine-1" in it, then another
 * process's (full) commit of "theirs-1" after it. */
static void ours_then_theirs(void)
{
	conv_create("c");
	append_lazy("c", "mine-1");
	const char *app[] = { dir, "append", "1", "theirs", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(app), 10000), CHILD_OK);
}

/* store_flush on a thread, timed, while the test drives a child. */
struct flusher {
	pthread_t t;
	int err;
	int64_t ms;
};

static void *flusher_main(void *arg)
{
	struct flusher *f = arg;
	int64_t t0 = mono_ms();
	f->err = store_flush(st);
	f->ms = mono_ms() - t0;
	return NULL;
}

static void flusher_start(struct flusher *f)
{
	ck_assert_int_eq(pthread_create(&f->t, NULL, flusher_main, f), 0);
}

static void flusher_join(struct flusher *f)
{
	ck_assert_int_eq(pthread_join(f->t, NULL), 0);
	ck_assert_int_eq(f->err, 0);
}

static void sleep_ms(int ms)
{
	nanosleep(&(struct timespec){ ms / 1000, ms % 1000 * 1000000L }, NULL);
}

/* A store (flushes wait at most wait_ms) holding our lazy commit, and a
 * child inside a write transaction begun after it, which commits at its
 * release when commit is set and aborts otherwise. */
static struct kid *writer_after_ours(const char *wait_ms, int commit)
{
	setenv("AGENTD_TEST_FLUSH_WAIT_MS", wait_ms, 1);
	open_store(0, 0);
	conv_create("c");
	append_lazy("c", "mine-1");
	const char *hold[] = { dir, "hold-write", "c", "theirs-1", commit ? "commit" : NULL, NULL };
	struct kid *h = spawn(hold);
	expect_byte(h, 'W', 5000);
	return h;
}

/* Another process's commit flushed the data file after our lazy commit's
 * meta page was written: our flush is not needed. With nothing after our
 * commit, it is. */
START_TEST(flush_covered_by_another_commit)
{
	open_store(0, 0);
	ours_then_theirs();
	flush_expect(0, 1);
	append_lazy("c", "mine-2");
	flush_expect(1, 1);
	flush_expect(1, 2); /* nothing since: covered by our own */
}
END_TEST

/* A write transaction open in another process will flush our commit with
 * its own: the flush waits for that commit instead of flushing. */
START_TEST(flush_waits_for_an_open_write_txn)
{
	struct kid *h = writer_after_ours("20000", 1);
	struct flusher f;
	flusher_start(&f);
	sleep_ms(200);
	release(h);
	expect_byte(h, 'C', 10000);
	flusher_join(&f);
	ck_assert_int_eq(kid_exit(h, 10000), CHILD_OK);
	ck_assert_msg(f.ms >= 150, "the flush returned after %lld ms, before the commit it waited for",
		      (long long)f.ms);
	assert_flushes(0, 1);
}
END_TEST

/* A process waiting for the writer lock begins after our commit, so its
 * commit covers ours: the flush waits for it. */
START_TEST(flush_waits_for_a_queued_writer)
{
	setenv("AGENTD_TEST_FLUSH_WAIT_MS", "20000", 1);
	open_store(0, 0);
	conv_create("c");
	const char *app[] = { "-g", dir, "append", "1", "theirs", "c", NULL };
	struct kid *w = spawn(app);
	expect_byte(w, 'R', 5000); /* its store open before we take the writer lock */
	store_txn *x;
	uint64_t seq;
	struct store_event_in ev = { "user_msg", { "\xc0", 1 }, "mine-1" };
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE_LAZY, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &ev, &seq, NULL), 0);
	release(w);
	/* Until it says it waits: a read lock on data.mdb's second byte. */
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/data.mdb", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	int64_t dl = deadline_in(10000);
	for (;;) {
		struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1 };
		ck_assert_int_eq(fcntl(fd, F_OFD_GETLK, &l), 0);
		if (l.l_type != F_UNLCK)
			break;
		ck_assert_msg(ms_left(dl) > 0, "the writer never waited for the writer lock");
		sleep_ms(2);
	}
	close(fd);
	ck_assert_int_eq(store_txn_commit(x), 0);
	ck_assert_int_eq(store_flush(st), 0);
	ck_assert_int_eq(kid_exit(w, 10000), CHILD_OK);
	assert_flushes(0, 1);
}
END_TEST

/* The open write transaction ends without a commit (aborted): the flush
 * stops waiting at once and flushes itself. */
START_TEST(flush_after_an_aborted_writer)
{
	struct kid *h = writer_after_ours("20000", 0);
	struct flusher f;
	flusher_start(&f);
	sleep_ms(200);
	release(h);
	flusher_join(&f);
	ck_assert_int_eq(kid_exit(h, 10000), CHILD_OK);
	ck_assert_msg(f.ms >= 150 && f.ms < 10000,
		      "the flush returned after %lld ms: it should wait for the open transaction, and stop once it "
		      "was aborted", (long long)f.ms);
	assert_flushes(1, 0);
}
END_TEST

/* The process holding the write transaction is killed: nothing tells the
 * waiting flush, which stops waiting after its bound and flushes itself. */
START_TEST(flush_after_a_killed_writer)
{
	kill9(writer_after_ours("300", 0));
	int64_t t0 = mono_ms();
	ck_assert_int_eq(store_flush(st), 0);
	ck_assert_int_ge(mono_ms() - t0, 250);
	assert_flushes(1, 0);
	append_lazy("c", "mine-2"); /* the writer lock is free again; our commit covers no more than before */
	flush_expect(2, 0);
}
END_TEST

/* What the record held before anyone had the store open says nothing: a
 * first opener zeroes it, so the flush is made. */
START_TEST(flush_record_from_before_is_ignored)
{
	char path[PATH_MAX + 16], page[4096] = { 0 };
	snprintf(path, sizeof path, "%s/flush.lock", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	memset(page, 0x7f, 16); /* durable and covering: far ahead */
	ck_assert_int_eq(write(fd, page, sizeof page), (ssize_t)sizeof page);
	close(fd);
	open_store(0, 0);
	conv_create("c");
	append_lazy("c", "mine-1");
	flush_expect(1, 0);
}
END_TEST

/* flush_alone (the supervisor's handle): a commit under way in another
 * process is not waited for, the flush is made at once; a flush or commit
 * already done still spares it. */
START_TEST(flush_alone_does_not_wait)
{
	setenv("AGENTD_TEST_FLUSH_WAIT_MS", "20000", 1);
	struct store_opts o = { .flush_alone = 1 };
	ck_assert_int_eq(store_open(&st, dir, &o), 0);
	ours_then_theirs();
	flush_expect(0, 1); /* its commit, done, covered ours */
	append_lazy("c", "mine-2");
	const char *hold[] = { dir, "hold-write", "c", "theirs-2", "commit", NULL };
	struct kid *h = spawn(hold);
	expect_byte(h, 'W', 5000); /* its write transaction open, begun after our commit */
	int64_t t0 = mono_ms();
	ck_assert_int_eq(store_flush(st), 0);
	int64_t ms = mono_ms() - t0;
	assert_flushes(1, 1); /* made: the child has not committed, and is not waited for */
	ck_assert_msg(ms < 10000, "the flush took %lld ms: it waited for the other writer", (long long)ms);
	release(h);
	expect_byte(h, 'C', 10000);
	ck_assert_int_eq(kid_exit(h, 10000), CHILD_OK);
}
END_TEST

/* No record to share (flush.lock cannot be opened: here a directory in
 * its place, which no permission lets a process open for writing, root's
 * included): the store opens and works, and every store_flush flushes
 * itself, even where another process's commit covered it. */
START_TEST(flush_without_the_record)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/flush.lock", dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	open_store(0, 0);
	ours_then_theirs();
	flush_expect(1, 0);
	append_lazy("c", "mine-2");
	flush_expect(2, 0);
	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_str_eq(r.v[0].eid, "mine-1");
	ck_assert_str_eq(r.v[1].eid, "theirs-1");
	ck_assert_str_eq(r.v[2].eid, "mine-2");
	recs_free(&r);
}
END_TEST

/* ---- 10. the writer's cache ------------------------------------------- */

/* A write transaction remembers each conversation's number and last seq
 * for the next one of the same process; these pin what must make it forget. */

/* The log of conv is exactly the event_ids want[0..n), seqs 1..n. */
static void assert_eids(const char *conv, const char *const *want, size_t n)
{
	struct recs r;
	load(conv, &r);
	ck_assert_uint_eq(r.n, n);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(r.v[i].seq, i + 1);
		ck_assert_str_eq(r.v[i].eid, want[i]);
	}
	recs_free(&r);
}

static struct store_event_in event(msgpack_sbuffer *sb, const char *eid)
{
	pack_content(sb, eid, 0);
	return (struct store_event_in){ "user_msg", { sb->data, sb->size }, eid };
}

static void child_run(const char *const *args)
{
	ck_assert_int_eq(kid_exit(spawn(args), 5000), CHILD_OK);
}

/* Another process appends between two of ours: ours must follow its seq. */
START_TEST(cache_other_writer_appends)
{
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "p-1", 0), 0);
	ck_assert_int_eq(append1("c", "p-2", 0), 0);
	const char *args[] = { dir, "append", "1", "q", "c", NULL };
	child_run(args);
	ck_assert_int_eq(append1("c", "p-3", 0), 0);
	const char *want[] = { "p-1", "p-2", "q-1", "p-3" };
	assert_eids("c", want, 4);
}
END_TEST

/* Another process deletes the conversation and creates it again (a new
 * number): ours must write to the new one, from seq 1 on. */
START_TEST(cache_other_writer_recreates)
{
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "p-1", 0), 0);
	ck_assert_int_eq(append1("c", "p-2", 0), 0);
	const char *args[] = { dir, "delete", "c", ",", "append", "1", "q", "c", NULL };
	child_run(args);
	const char *want[] = { "q-1", "p-3" };
	assert_eids("c", want, 1); /* a read sees the new one too */
	ck_assert_int_eq(append1("c", "p-3", 0), 0);
	assert_eids("c", want, 2);
	/* and deleted by the other process, gone for ours too */
	const char *del[] = { dir, "delete", "c", NULL };
	child_run(del);
	msgpack_sbuffer sb;
	store_txn *x;
	uint64_t seq;
	msgpack_sbuffer_init(&sb);
	struct store_event_in e = event(&sb, "p-4");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e, &seq, NULL), STORE_E_NOTFOUND);
	store_txn_abort(x);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* A commit that wrote nothing takes no transaction id: the next writer,
 * here another process, commits under the id ours would have had. */
START_TEST(cache_after_empty_commit)
{
	store_txn *x;
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(append1("c", "p-1", 0), 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_expiry_cancel(x, "no-such-call"), 0); /* succeeds, writes nothing */
	uint64_t seq;
	ck_assert_int_eq(store_event_latest_seq(x, "c", &seq), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_txn_commit(x), 0);
	const char *args[] = { dir, "append", "1", "q", "c", NULL };
	child_run(args);
	ck_assert_int_eq(append1("c", "p-2", 0), 0);
	const char *want[] = { "p-1", "q-1", "p-2" };
	assert_eids("c", want, 3);
}
END_TEST

/* Delete and create again inside one transaction; abort, then go on. */
START_TEST(cache_within_txn_and_abort)
{
	msgpack_sbuffer sb[8];
	store_txn *x;
	uint64_t seq, seqs[2];
	int dup;
	for (int i = 0; i < 8; i++)
		msgpack_sbuffer_init(&sb[i]);
	open_store(0, 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	struct store_event_in e1 = event(&sb[0], "e1");
	ck_assert_int_eq(store_event_append(x, "c", &e1, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	ck_assert_int_eq(store_conv_delete(x, "c"), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e1, &seq, NULL), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	struct store_event_in e23[2] = { event(&sb[1], "e2"), event(&sb[2], "e3") };
	ck_assert_int_eq(store_events_append(x, "c", e23, 2, seqs, NULL), 0);
	ck_assert_uint_eq(seqs[0], 1);
	ck_assert_uint_eq(seqs[1], 2);
	ck_assert_int_eq(store_txn_commit(x), 0);
	const char *want[] = { "e2", "e3", "e5", "e4", "e7" };
	assert_eids("c", want, 2);

	/* an aborted append leaves no trace: neither its seq nor its event_id */
	struct store_event_in e4 = event(&sb[3], "e4");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e4, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 3);
	store_txn_abort(x);
	struct store_event_in e5 = event(&sb[4], "e5");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e5, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 3);
	ck_assert_int_eq(dup, 0);
	ck_assert_int_eq(store_event_append(x, "c", &e4, &seq, &dup), 0);
	ck_assert_uint_eq(seq, 4);
	ck_assert_int_eq(dup, 0);
	ck_assert_int_eq(store_txn_commit(x), 0);

	/* an aborted delete and re-creation: the old conversation stays */
	struct store_event_in e6 = event(&sb[5], "e6");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_delete(x, "c"), 0);
	ck_assert_int_eq(store_conv_create(x, "c", empty_map), 0);
	ck_assert_int_eq(store_event_append(x, "c", &e6, &seq, NULL), 0);
	ck_assert_uint_eq(seq, 1);
	store_txn_abort(x);
	assert_eids("c", want, 4);
	ck_assert_int_eq(append1("c", "e7", 0), 0);
	assert_eids("c", want, 5);
	for (int i = 0; i < 8; i++)
		msgpack_sbuffer_destroy(&sb[i]);
}
END_TEST

/* A read txn beside an open write txn of the same process must not see
 * what the write txn did (reads use the cache only at its exact snapshot). */
START_TEST(cache_read_beside_write)
{
	msgpack_sbuffer sb;
	store_txn *r, *w;
	uint64_t seq;
	msgpack_sbuffer_init(&sb);
	open_store(0, 0);
	conv_create("c");
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &r), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "c", &seq), 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &w), 0);
	ck_assert_int_eq(store_conv_create(w, "d", empty_map), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "d", &seq), STORE_E_NOTFOUND);
	struct store_event_in e = event(&sb, "e1");
	ck_assert_int_eq(store_event_append(w, "d", &e, &seq, NULL), 0);
	ck_assert_int_eq(store_conv_delete(w, "c"), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "d", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_latest_seq(r, "c", &seq), 0);
	store_txn_abort(r);
	ck_assert_int_eq(store_txn_commit(w), 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &r), 0);
	ck_assert_int_eq(store_event_latest_seq(r, "c", &seq), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_event_latest_seq(r, "d", &seq), 0);
	ck_assert_uint_eq(seq, 1);
	store_txn_abort(r);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* A callback calling back into the store on the same transaction while the
 * stream that called it goes on. */
struct nest_ctx {
	store_txn *x;
	uint64_t n, inner;
};

static int count_inner(void *arg, const struct store_event *ev)
{
	struct nest_ctx *c = arg;
	c->inner = ev->seq;
	return 0;
}

static int nest_each(void *arg, const struct store_event *ev)
{
	struct nest_ctx *c = arg;
	struct store_range last = { .limit = 1 };
	struct store_summary sum;
	int has;
	uint64_t seq;
	ck_assert_uint_eq(ev->seq, ++c->n);
	ck_assert_int_eq(store_event_latest_seq(c->x, "c", &seq), 0);
	ck_assert_uint_eq(seq, 5);
	ck_assert_int_eq(store_events_stream(c->x, "c", &last, count_inner, c), 0);
	ck_assert_uint_eq(c->inner, 5);
	ck_assert_int_eq(store_load_since(c->x, "c", &sum, &has, count_inner, c), 0);
	ck_assert_int_eq(has, 1);
	return 0;
}

START_TEST(cache_nested_streams)
{
	open_store(0, 0);
	conv_create("c");
	for (int i = 1; i <= 5; i++) {
		char eid[16];
		snprintf(eid, sizeof eid, "e%d", i);
		ck_assert_int_eq(append1("c", eid, 0), 0);
	}
	store_txn *x;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_summary_put(x, "c", 1, 2, empty_map, NULL), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
	for (int mode = STORE_READ; mode <= STORE_WRITE; mode++) {
		struct nest_ctx c = { NULL, 0, 0 };
		struct store_range all = { 0 };
		ck_assert_int_eq(store_txn_begin(st, mode, &c.x), 0);
		ck_assert_int_eq(store_events_stream(c.x, "c", &all, nest_each, &c), 0);
		ck_assert_uint_eq(c.n, 5);
		c.n = 2; /* after the summary's to_seq: 3, 4, 5 */
		ck_assert_int_eq(store_load_since(c.x, "c", NULL, NULL, nest_each, &c), 0);
		ck_assert_uint_eq(c.n, 5);
		store_txn_abort(c.x);
	}
}
END_TEST

/* More conversations than the cache holds, appended to in turns. */
START_TEST(cache_many_conversations)
{
	enum { NCONV = 700 };
	msgpack_sbuffer sb;
	store_txn *x;
	char id[32];
	uint64_t seq;
	msgpack_sbuffer_init(&sb);
	open_store(0, 0);
	struct store_event_in e = event(&sb, "x");
	e.event_id = NULL;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	for (int i = 0; i < NCONV; i++) {
		snprintf(id, sizeof id, "conv-%d", i);
		ck_assert_int_eq(store_conv_create(x, id, empty_map), 0);
	}
	ck_assert_int_eq(store_txn_commit(x), 0);
	for (uint64_t round = 1; round <= 3; round++) {
		ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
		for (int i = 0; i < NCONV; i++) {
			snprintf(id, sizeof id, "conv-%d", (int)((i * 3 + round) % NCONV));
			ck_assert_int_eq(store_event_append(x, id, &e, &seq, NULL), 0);
			ck_assert_uint_eq(seq, round);
		}
		ck_assert_int_eq(store_txn_commit(x), 0);
	}
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &x), 0);
	for (int i = 0; i < NCONV; i++) {
		snprintf(id, sizeof id, "conv-%d", i);
		ck_assert_int_eq(store_event_latest_seq(x, id, &seq), 0);
		ck_assert_uint_eq(seq, 3);
	}
	store_txn_abort(x);
	msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* ---- written ahead ---------------------------------------------------- */

#define AHEAD_LOW (256 * KiB)
#define AHEAD_CHUNK (2 * MiB)

/* The data file's length beyond the pages in use. */
static uint64_t ahead(void)
{
	struct store_stat ss;
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_ge(ss.file_bytes, ss.size_bytes);
	return ss.file_bytes - ss.size_bytes;
}

/* Every write transaction keeps the data file written at least AHEAD_LOW
 * past LMDB's last page (store_lmdb.c, write_ahead), so commits land on
 * blocks already written. The zeros go in under the writer lock, before the
 * transaction's own pages: two processes that take turns lengthening the
 * file must never zero a page the other committed. 64 KiB events make each
 * round of ten cross the low mark, so both extend it several times. */
START_TEST(written_ahead_across_processes)
{
	enum { ROUNDS = 6, PER = 10, PAD = 64 * 1024 };
	open_store(0, 0);
	conv_create("c");
	ck_assert_uint_ge(ahead(), AHEAD_LOW);
	char eid[32], tag[8], n[32], pad[32];
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < PER; i++) {
			snprintf(eid, sizeof eid, "p-%d", r * PER + i + 1);
			ck_assert_int_eq(append1("c", eid, PAD), 0);
		}
		snprintf(tag, sizeof tag, "q%d", r);
		const char *args[] = { "-p", sz(pad, PAD), dir, "append", sz(n, PER), tag, "c", NULL };
		child_run(args);
	}
	ck_assert_uint_ge(ahead(), AHEAD_LOW);
	ck_assert_uint_le(ahead(), AHEAD_CHUNK + PAD + 64 * KiB);
	/* All there, in order, intact: from this handle and from a new one. */
	for (int pass = 0; pass < 2; pass++) {
		struct recs rc;
		load("c", &rc);
		ck_assert_uint_eq(rc.n, (size_t)ROUNDS * PER * 2);
		for (int r = 0; r < ROUNDS; r++) {
			for (int i = 0; i < 2 * PER; i++) {
				const struct rec *e = &rc.v[r * 2 * PER + i];
				if (i < PER)
					snprintf(eid, sizeof eid, "p-%d", r * PER + i + 1);
				else
					snprintf(eid, sizeof eid, "q%d-%d", r, i - PER + 1);
				ck_assert_str_eq(e->eid, eid);
				ck_assert_msg(content_is(e->content, eid, PAD), "%s: content differs", eid);
			}
		}
		recs_free(&rc);
		store_close(st);
		st = NULL;
		open_store(0, 0);
	}
}
END_TEST

/* Never past the map: LMDB could not use it, and a file longer than the map
 * would only take disk. */
START_TEST(written_ahead_within_the_map)
{
	open_store(512 * KiB, 512 * KiB);
	conv_create("c");
	ck_assert_int_eq(append1("c", "e-1", 0), 0);
	struct store_stat ss;
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_eq(ss.file_bytes, 512 * KiB);
}
END_TEST

/* A case of this suite: its own directory per test, children reaped. */
static TCase *mp_case(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);
	tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30 * slow_factor());
	suite_add_tcase(s, tc);
	return tc;
}

Suite *make_store_mp_suite(void)
{
	Suite *s = suite_create("store_mp");
	TCase *tc = mp_case(s, "processes");
	tcase_add_test(tc, concurrent_appenders);
	tcase_add_test(tc, kill_inside_write_txn);
	tcase_add_test(tc, kill_inside_read_txn);
	tcase_add_test(tc, map_full_then_grown);
	tcase_add_test(tc, map_grows_across_processes);
	tcase_add_test(tc, map_resized_while_txn_open);
	tcase_add_test(tc, map_not_writable_shared);
	tcase_add_test(tc, data_fd_cloexec);
	tcase_add_test(tc, concurrent_resolvers);
	tcase_add_test(tc, fencing);
	tc = mp_case(s, "shared flushes");
	tcase_add_test(tc, flush_covered_by_another_commit);
	tcase_add_test(tc, flush_waits_for_an_open_write_txn);
	tcase_add_test(tc, flush_waits_for_a_queued_writer);
	tcase_add_test(tc, flush_after_an_aborted_writer);
	tcase_add_test(tc, flush_after_a_killed_writer);
	tcase_add_test(tc, flush_record_from_before_is_ignored);
	tcase_add_test(tc, flush_without_the_record);
	tcase_add_test(tc, flush_alone_does_not_wait);
	tc = mp_case(s, "writer cache");
	tcase_add_test(tc, cache_other_writer_appends);
	tcase_add_test(tc, cache_other_writer_recreates);
	tcase_add_test(tc, cache_after_empty_commit);
	tcase_add_test(tc, cache_within_txn_and_abort);
	tcase_add_test(tc, cache_read_beside_write);
	tcase_add_test(tc, cache_nested_streams);
	tcase_add_test(tc, cache_many_conversations);
	tc = mp_case(s, "written ahead");
	tcase_add_test(tc, written_ahead_across_processes);
	tcase_add_test(tc, written_ahead_within_the_map);
	return s;
}
