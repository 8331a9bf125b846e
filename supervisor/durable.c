/* durable.c: the durable frontier and its flusher thread (see durable.h). */
#include "supervisor/durable.h"
#include "common/log.h"
#include "supervisor/loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

static void on_flushed(struct loop_watch *lw, uint32_t events);
static void on_timer(struct loop_watch *lw, uint32_t events);

/* How long a flush waits for the next group commit to cover it instead
 * (durable.h), when some client may still send one. */
#define DEFER_US 200

static struct {
	store *st;
	durable_advanced_fn *advanced;
	durable_more_fn *more;   /* another commit may come soon */
	durable_failed_fn *failed;
	int broken;              /* a flush failed: nothing moves the frontier again (loop thread) */
	int all;                 /* sync = none, or the test-only early ack: everything counts as durable */
	uint64_t frontier;       /* loop thread only */
	uint64_t wanted;         /* the highest id asked for (loop thread) */
	int running;             /* a flush is asked or in flight (loop thread) */
	int now;                 /* a flush was asked at once while one ran: the next starts at its end */
	int efd;                 /* the flusher's "done" to the loop */
	struct loop_watch lw;
	int tfd;                 /* the deferred flush's timer */
	struct loop_watch tw;
	int armed;               /* tfd is set */
	pthread_t thread;
	int started;
	/* Between the threads, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t target;         /* flush for this id (0: nothing asked) */
	uint64_t done;           /* the last target flushed */
	int err;                 /* the first failed flush's error, here or on another thread: it stays */
	int quit;
	uint64_t nfailed;        /* flushes that failed */
} D = { .efd = -1,
	.lw = { on_flushed, 1 }, /* also while a group commits off the loop (ops.c) */
	.tfd = -1, .tw = { on_timer }, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* One flush of the data file, on any thread. *last, read before it begins,
 * is what it makes durable: every transaction up to it had its meta page
 * written (and what was asked for was committed before it was asked). */
static int flush_once(uint64_t *last)
{
	*last = store_last_id(D.st);
	return store_flush(D.st);
}

static void *flusher(void *arg)
{
	pthread_setname_np(pthread_self(), "flusher"); /* for top -H, and tests/faults/diskfail.c */
	pthread_mutex_lock(&D.mu);
	for (;;) {
		while (!D.target && !D.quit)
			pthread_cond_wait(&D.cv, &D.mu);
		if (D.quit)
			break;
		D.target = 0;
		/* After a failed flush nothing is flushed again: a later one
		 * that succeeds would say nothing of the pages the failed one
		 * could not write (durable.h). */
		int e = D.err;
		uint64_t last = 0;
		pthread_mutex_unlock(&D.mu);
		if (!e)
			e = flush_once(&last);
		pthread_mutex_lock(&D.mu);
		if (e && !D.err) {
			D.nfailed++;
			D.err = e;
		}
		if (!e && last > D.done)
			D.done = last;
		uint64_t one = 1;
		ssize_t w = write(D.efd, &one, sizeof one);
		(void)w;
	}
	pthread_mutex_unlock(&D.mu);
	return NULL;
}

static void advance(uint64_t id)
{
	if (id <= D.frontier)
		return;
	D.frontier = id;
	D.advanced(id);
}

static void disarm(void)
{
	if (!D.armed)
		return;
	struct itimerspec its = { 0 };
	timerfd_settime(D.tfd, 0, &its, NULL);
	D.armed = 0;
}

static void start_flush(void)
{
	if (D.running || D.broken || D.wanted <= D.frontier)
		return;
	disarm();
	D.running = 1;
	pthread_mutex_lock(&D.mu);
	D.target = D.wanted;
	pthread_cond_signal(&D.cv);
	pthread_mutex_unlock(&D.mu);
}

static void on_flushed(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	if (read(D.efd, &n, sizeof n) < 0)
		return;
	pthread_mutex_lock(&D.mu);
	uint64_t done = D.done;
	int err = D.err;
	pthread_mutex_unlock(&D.mu);
	D.running = 0;
	int now = D.now;
	D.now = 0;
	if (err) {
		durable_fail(err);
		return;
	}
	advance(done);
	/* What was committed while this one ran: at once if a group off the
	 * loop asked for it so (its replies wait for nothing else, and the
	 * next group's commit runs beside it), else durable_before_wait's. */
	if (now && !err)
		start_flush();
}

static void on_timer(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	if (read(D.tfd, &n, sizeof n) < 0)
		return;
	D.armed = 0;
	start_flush();
}

int durable_open(store *st, int sync_full, durable_advanced_fn *advanced, durable_more_fn *more,
		 durable_failed_fn *failed)
{
	D.st = st;
	D.advanced = advanced;
	D.more = more;
	D.failed = failed;
	/* Test-only (docs/testing.md, the power-loss simulator): acknowledge
	 * before the flush, so the simulator can show it would catch that. */
	const char *early = getenv("AGENTD_TEST_ACK_EARLY");
	D.all = !sync_full || (early && !strcmp(early, "1"));
	if (D.all)
		return 0;
	D.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (D.efd < 0)
		return -errno;
	int e = loop_add(D.efd, EPOLLIN, &D.lw);
	if (e)
		return e;
	D.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (D.tfd < 0)
		return -errno;
	if ((e = loop_add(D.tfd, EPOLLIN, &D.tw)))
		return e;
	if ((e = loop_thread(&D.thread, flusher, NULL)))
		return e;
	D.started = 1;
	return 0;
}

void durable_close(void)
{
	if (D.started) {
		pthread_mutex_lock(&D.mu);
		D.quit = 1;
		pthread_cond_signal(&D.cv);
		pthread_mutex_unlock(&D.mu);
		pthread_join(D.thread, NULL);
		D.started = 0;
	}
	if (D.efd >= 0) {
		loop_del(D.efd);
		close(D.efd);
		D.efd = -1;
	}
	if (D.tfd >= 0) {
		loop_del(D.tfd);
		close(D.tfd);
		D.tfd = -1;
		D.armed = 0;
	}
	uint64_t last = store_last_id(D.st);
	if (!D.all && !D.broken && store_flush(D.st) == 0)
		advance(last);
	/* After a failed flush what is held stays held: its clients were told. */
	if (!D.broken)
		D.all = 1;
}

void durable_fail(int err)
{
	if (D.all || D.broken || !store_flushes_locally(D.st))
		return;
	D.broken = err;
	pthread_mutex_lock(&D.mu); /* the flusher and the writer thread flush no more */
	if (!D.err)
		D.err = err;
	pthread_mutex_unlock(&D.mu);
	disarm();
	if (D.failed)
		D.failed(err);
}

int durable_failed(void)
{
	return D.broken;
}

int durable_covers(uint64_t id)
{
	return D.all || id <= D.frontier;
}

void durable_need(uint64_t id)
{
	if (D.all || id <= D.frontier)
		return;
	if (id > D.wanted)
		D.wanted = id;
}

void durable_before_wait(void)
{
	if (D.all || D.running || D.wanted <= D.frontier)
		return;
	if (!D.more()) {
		start_flush(); /* nobody can send the commit that would cover it */
		return;
	}
	if (D.armed)
		return;
	struct itimerspec its = { .it_value = { 0, DEFER_US * 1000 } };
	if (timerfd_settime(D.tfd, 0, &its, NULL) == 0)
		D.armed = 1;
	else
		start_flush();
}

int durable_flush_here(uint64_t *id)
{
	if (D.all || !D.started)
		return -EAGAIN;
	pthread_mutex_lock(&D.mu);
	int e = D.err;
	pthread_mutex_unlock(&D.mu);
	if (e)
		return e;
	uint64_t last;
	if ((e = flush_once(&last))) {
		/* The loop learns of it from the flusher's wake-up, as of its own. */
		pthread_mutex_lock(&D.mu);
		if (!D.err) {
			D.nfailed++;
			D.err = e;
		}
		pthread_mutex_unlock(&D.mu);
		uint64_t one = 1;
		ssize_t w = write(D.efd, &one, sizeof one);
		(void)w;
		return e;
	}
	*id = last;
	return 0;
}

/* id is durable: the frontier moves, and a deferred flush no longer owed
 * is called off. */
static void covered_to(uint64_t id)
{
	advance(id);
	if (D.wanted <= D.frontier)
		disarm();
}

void durable_flushed(uint64_t id)
{
	if (!D.all && !D.broken)
		covered_to(id);
}

void durable_flush_now(void)
{
	if (D.all)
		return;
	if (D.running)
		D.now = 1; /* on_flushed starts it */
	else
		start_flush();
}

void durable_committed(uint64_t id)
{
	if (!D.all && !D.broken && id >= 2)
		covered_to(id - 1);
}

uint64_t durable_flushes(void)
{
	struct store_stat st = { 0 };
	store_stat(D.st, &st); /* the store counts them: only the flusher flushes this handle */
	return st.flushes;
}

uint64_t durable_flush_failures(void)
{
	pthread_mutex_lock(&D.mu);
	uint64_t n = D.nfailed;
	pthread_mutex_unlock(&D.mu);
	return n;
}
