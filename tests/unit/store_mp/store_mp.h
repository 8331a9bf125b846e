/*
 * store_mp.h: what the files of the store_mp suite (tests/unit/check_store_mp.c)
 * share, and nothing else includes: the fixtures, the children
 * (tests/store_child, fork+exec'd) and the test's own store operations, all in
 * mp_fixture.c. Each mp_<topic>.c holds the tests of one topic and an
 * mp_<topic>_add that adds them to their case. Include it after every other
 * header.
 *
 * The fixture's state is a set of globals (dir, st): the tests name them
 * directly, as Check's fixtures do; each test runs in its own fork.
 */
#ifndef AGENTD_TESTS_UNIT_STORE_MP_STORE_MP_H
#define AGENTD_TESTS_UNIT_STORE_MP_STORE_MP_H
#include <check.h>
#include <limits.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/store.h"

/* check_all links this suite beside the conformance suite, whose fixture has
 * a dir and an open_store of its own (tests/conformance/conformance.h): in
 * this suite's files the two names stand for this suite's. */
#define dir mp_dir
#define open_store mp_open_store

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* store_child's exit statuses. */
enum { CHILD_OK = 0, CHILD_FULL = 3, CHILD_STALE = 4 };

/* Processes racing in the concurrent appenders and resolvers. */
#define NPROC 6

extern const store_bytes empty_map;

/* ---- time ------------------------------------------------------------- */

/* AGENTD_TEST_SLOW, at least 1: what every timeout here is multiplied by. */
double slow_factor(void);
int64_t mono_ms(void);
/* A deadline `ms` from now, stretched for slow machines. */
int64_t deadline_in(int ms);
/* Milliseconds left until deadline, 0 once it passed. */
int ms_left(int64_t deadline);

/* ---- fixtures --------------------------------------------------------- */

extern char dir[PATH_MAX]; /* checked: this test's store directory */
extern store *st;          /* the test's own handle, NULL until open_store */

/* Unchecked (once per case, in the runner): the base directory the tests'
 * directories go in, removed even when a test _exit()ed before teardown. */
void mp_base_setup(void);
void mp_base_teardown(void);
/* Checked (in each test's fork): a fresh directory; teardown kills and
 * reaps every child, closes st and removes the directory. */
void mp_setup(void);
void mp_teardown(void);

/* ---- children --------------------------------------------------------- */

struct kid {
	pid_t pid;
	int in;  /* write end of its stdin; closing it is EOF, the release */
	int out; /* read end of its stdout */
};

/* fork+exec store_child with args (NULL-terminated). The child gets pipes on
 * stdin and stdout and keeps stderr; exec failure comes back through a
 * close-on-exec pipe (zero bytes read: exec succeeded) and fails the test. */
struct kid *spawn(const char *const *args);
/* Read up to `len` bytes from the child's stdout before the deadline; returns
 * how many (0: EOF). Fails the test on timeout. */
size_t kid_read(struct kid *k, char *buf, size_t len, int64_t deadline);
/* The next byte the child prints must be `want`, within ms (scaled). */
void expect_byte(struct kid *k, char want, int ms);
/* Everything the child prints until it closes stdout. */
size_t read_all(struct kid *k, char *buf, size_t cap, int ms);
/* Write the byte c to the child's stdin. */
void kid_send(struct kid *k, char c);
/* EOF on its stdin: the gate opens, a holder lets go, a worker exits. */
void release(struct kid *k);
/* Close the pipes and clear the slot (after the child was reaped). */
void forget(struct kid *k);
/* 1 and *status filled when the child exited, 0 while it runs. */
int kid_poll_exit(struct kid *k, int *status);
/* The child's exit status, waiting at most ms (scaled); a child still running
 * then is killed and fails the test, as one killed by a signal does. Reaped
 * children are forgotten, so their pids are never signalled again. */
int kid_exit(struct kid *k, int ms);
/* SIGKILL the child and reap it. */
void kill9(struct kid *k);
/* Spawn a child and expect it to exit CHILD_OK. */
void child_run(const char *const *args);

/* ---- the test's own store operations ---------------------------------- */

/* Open st on dir with these map sizes (the other options default). */
void open_store(size_t map_size, size_t max_map_size);
/* v in decimal in buf; returns buf. */
const char *sz(char *buf, size_t v);
/* Event content: a msgpack string of `eid` padded with '.' to pad bytes. */
void pack_content(msgpack_sbuffer *sb, const char *eid, size_t pad);
/* 1 when c is exactly what pack_content makes of eid and pad. */
int content_is(store_bytes c, const char *eid, size_t pad);
/* Create conversation id (empty settings) in its own write transaction. */
void conv_create(const char *id);
/* Append events eids[0..n) (content padded to pad bytes) in one write
 * transaction. Returns the first error, the transaction then aborted; when
 * the append succeeded but the commit failed, *at_commit is set. */
int append_batch(const char *conv, const char *const *eids, size_t n, size_t pad, int *at_commit);
/* append_batch of one event. */
int append1(const char *conv, const char *eid, size_t pad);

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
/* An event callback appending a copy to the struct recs at arg. */
int collect(void *arg, const struct store_event *ev);
/* Every event of conv, read in a fresh read transaction. */
void load(const char *conv, struct recs *out);
void recs_free(struct recs *r);
/* The log is exactly seqs 1..n, and event i (from 1) is "TAG-i" with its content. */
void assert_log(const struct recs *r, size_t from, size_t n, const char *tag, size_t pad);

/* ---- the cases' tests (each mp_<topic>.c) ----------------------------- */

void mp_procs_add(TCase *tc);
void mp_map_add(TCase *tc);
void mp_fencing_add(TCase *tc);
void mp_flush_add(TCase *tc);
void mp_cache_add(TCase *tc);
void mp_ahead_add(TCase *tc);
#endif
