/*
 * Flushes shared between processes (store/flushrec.h): a flush covered by
 * another's commit, waiting for an open or a queued writer, an aborted or
 * killed one, a record from before, the supervisor's flush_alone, no record
 * at all (case "shared flushes").
 */
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/unit/store_mp/store_mp.h"

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

void mp_flush_add(TCase *tc)
{
	tcase_add_test(tc, flush_covered_by_another_commit);
	tcase_add_test(tc, flush_waits_for_an_open_write_txn);
	tcase_add_test(tc, flush_waits_for_a_queued_writer);
	tcase_add_test(tc, flush_after_an_aborted_writer);
	tcase_add_test(tc, flush_after_a_killed_writer);
	tcase_add_test(tc, flush_record_from_before_is_ignored);
	tcase_add_test(tc, flush_without_the_record);
	tcase_add_test(tc, flush_alone_does_not_wait);
}
