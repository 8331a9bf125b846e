/*
 * The store_mp suite's fixtures and helpers (store_mp.h): time against
 * deadlines scaled by AGENTD_TEST_SLOW, the base and per-test directories,
 * the children (tests/store_child, fork+exec'd so each opens its own
 * environment) and the test's own store operations.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <msgpack.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/unit/store_mp/store_mp.h"

const store_bytes empty_map = { "\x80", 1 };

/* ---- time ------------------------------------------------------------- */

double slow_factor(void)
{
	const char *s = getenv("AGENTD_TEST_SLOW");
	double f = s ? strtod(s, NULL) : 1.0;
	return f >= 1.0 ? f : 1.0;
}

int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline `ms` from now, stretched for slow machines. */
int64_t deadline_in(int ms)
{
	return mono_ms() + (int64_t)(ms * slow_factor());
}

int ms_left(int64_t deadline)
{
	int64_t left = deadline - mono_ms();
	return left > 0 ? (int)left : 0;
}

/* ---- fixtures --------------------------------------------------------- */

static char base_dir[PATH_MAX - 64]; /* unchecked: made and removed by the runner */
char dir[PATH_MAX];      /* checked: this test's store directory */
store *st;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void rm_tree(const char *path)
{
	if (path[0])
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void mp_base_setup(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(base_dir, sizeof base_dir, "%s/agentd-store-mp.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base_dir)) {
		perror("store_mp: mkdtemp");
		base_dir[0] = 0;
	}
}

void mp_base_teardown(void)
{
	rm_tree(base_dir);
}

#define MAX_KIDS 16
static struct kid kids[MAX_KIDS];

void mp_setup(void)
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

void mp_teardown(void)
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
struct kid *spawn(const char *const *args)
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
size_t kid_read(struct kid *k, char *buf, size_t len, int64_t deadline)
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

void expect_byte(struct kid *k, char want, int ms)
{
	char c;
	ck_assert_msg(kid_read(k, &c, 1, deadline_in(ms)) == 1, "child %d: EOF, expected '%c'", (int)k->pid,
		      want);
	ck_assert_msg(c == want, "child %d: got '%c', expected '%c'", (int)k->pid, c, want);
}

/* Everything the child prints until it closes stdout. */
size_t read_all(struct kid *k, char *buf, size_t cap, int ms)
{
	int64_t dl = deadline_in(ms);
	size_t len = 0, n;
	while (len + 1 < cap && (n = kid_read(k, buf + len, cap - 1 - len, dl)) > 0)
		len += n;
	buf[len] = 0;
	return len;
}

void kid_send(struct kid *k, char c)
{
	ck_assert_msg(write(k->in, &c, 1) == 1, "write to child %d: %s", (int)k->pid, strerror(errno));
}

/* EOF on its stdin: the gate opens, a holder lets go, a worker exits. */
void release(struct kid *k)
{
	close(k->in);
	k->in = -1;
}

void forget(struct kid *k)
{
	if (k->in >= 0)
		close(k->in);
	if (k->out >= 0)
		close(k->out);
	*k = (struct kid){ 0, -1, -1 };
}

/* 1 and *status filled when the child exited, 0 while it runs. */
int kid_poll_exit(struct kid *k, int *status)
{
	pid_t r = waitpid(k->pid, status, WNOHANG);
	ck_assert_msg(r >= 0, "waitpid %d: %s", (int)k->pid, strerror(errno));
	return r == k->pid;
}

/* The child's exit status, waiting at most ms (scaled); a child still running
 * then is killed and fails the test. Reaped children are forgotten, so their
 * pids are never signalled again. */
int kid_exit(struct kid *k, int ms)
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

void kill9(struct kid *k)
{
	int status;
	ck_assert_int_eq(kill(k->pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(k->pid, &status, 0), k->pid);
	forget(k);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* ---- the test's own store operations ---------------------------------- */

void open_store(size_t map_size, size_t max_map_size)
{
	struct store_opts o = { .map_size = map_size, .max_map_size = max_map_size };
	int err = store_open(&st, dir, &o);
	ck_assert_msg(err == 0, "store_open: %s", store_strerror(err));
}

const char *sz(char *buf, size_t v)
{
	snprintf(buf, 32, "%zu", v);
	return buf;
}

/* Event content: a msgpack string of `eid` padded with '.' to pad bytes. */
void pack_content(msgpack_sbuffer *sb, const char *eid, size_t pad)
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

int content_is(store_bytes c, const char *eid, size_t pad)
{
	msgpack_sbuffer sb;
	msgpack_sbuffer_init(&sb);
	pack_content(&sb, eid, pad);
	int same = c.len == sb.size && memcmp(c.ptr, sb.data, sb.size) == 0;
	msgpack_sbuffer_destroy(&sb);
	return same;
}

void conv_create(const char *id)
{
	store_txn *x;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &x), 0);
	ck_assert_int_eq(store_conv_create(x, id, empty_map), 0);
	ck_assert_int_eq(store_txn_commit(x), 0);
}

/* Append events eids[0..n) (content padded to pad bytes) in one write
 * transaction. Returns the first error, the transaction then aborted; when
 * the append succeeded but the commit failed, *at_commit is set. */
int append_batch(const char *conv, const char *const *eids, size_t n, size_t pad, int *at_commit)
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

int append1(const char *conv, const char *eid, size_t pad)
{
	int at_commit;
	return append_batch(conv, &eid, 1, pad, &at_commit);
}

int collect(void *arg, const struct store_event *ev)
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
void load(const char *conv, struct recs *out)
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

void recs_free(struct recs *r)
{
	for (size_t i = 0; i < r->n; i++)
		free((void *)r->v[i].content.ptr);
	free(r->v);
	memset(r, 0, sizeof *r);
}

/* The log is exactly seqs 1..n, and event i (from 1) is "TAG-i" with its content. */
void assert_log(const struct recs *r, size_t from, size_t n, const char *tag, size_t pad)
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

void child_run(const char *const *args)
{
	ck_assert_int_eq(kid_exit(spawn(args), 5000), CHILD_OK);
}
