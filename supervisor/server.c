/*
 * server.c: what wires the supervisor's modules to its loop: the signalfd,
 * the two timerfds (expiry deadlines, and the tick for everything else that
 * waits: eviction, backoff, long-polls, sync, audit GC, shutdown), and the
 * work around each wait: control lines left from the per-wakeup cap before
 * it, and after the ready descriptors the iteration's requests (the writes
 * among them in one group commit), the write gate, and freeing what died.
 */
#include "supervisor/sup.h"
#include "supervisor/loop.h"
#include "supervisor/notify.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* Arm the realtime timerfd to the earliest durable deadline. Absolute and
 * CLOCK_REALTIME, because deadlines are wall-clock; TFD_TIMER_CANCEL_ON_SET
 * wakes us when the clock is set, and we simply re-arm. */
void server_rearm_expiry(void)
{
	store_txn *t;
	int64_t deadline = 0;
	if (store_txn_begin(S.st, STORE_READ, &t) == 0) {
		if (store_expiry_earliest(t, &deadline) != 0)
			deadline = 0;
		store_txn_abort(t);
	}
	if (deadline > 0 && deadline < S.expiry_retry_at)
		deadline = S.expiry_retry_at; /* the last attempt failed: not before its retry */
	struct itimerspec its = { 0 };
	if (deadline > 0) {
		its.it_value.tv_sec = deadline / 1000;
		its.it_value.tv_nsec = (deadline % 1000) * 1000000;
	}
	if (timerfd_settime(S.expiry_fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its, NULL) < 0)
		log_error("timerfd_settime(expiry): %s", strerror(errno));
}

static void rearm_tick(void)
{
	int64_t d = workers_next_deadline();
	int64_t p = polls_next_deadline();
	if (p && (!d || p < d))
		d = p;
	int64_t g = gate_deadline();
	if (g && (!d || g < d))
		d = g;
	if (S.next_sync && (!d || S.next_sync < d))
		d = S.next_sync;
	if (S.next_gc && (!d || S.next_gc < d))
		d = S.next_gc;
	if (S.shutting_down && !S.killed_all && (!d || S.shutdown_deadline < d))
		d = S.shutdown_deadline;
	d = notify_deadline(d); /* the systemd watchdog's next ping */
	if (d == S.tick_armed)
		return; /* already armed there: no system call */
	S.tick_armed = d;
	struct itimerspec its = { 0 };
	if (d) {
		if (d <= 0)
			d = 1;
		its.it_value.tv_sec = d / 1000;
		its.it_value.tv_nsec = (d % 1000) * 1000000;
	}
	timerfd_settime(S.tick_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void on_listen(struct loop_watch *lw, uint32_t events)
{
	if (S.listen_fd >= 0)
		control_accept();
}

static void on_signal(struct loop_watch *lw, uint32_t events)
{
	struct signalfd_siginfo si;
	while (read(S.sig_fd, &si, sizeof si) == sizeof si) {
		switch (si.ssi_signo) {
		case SIGCHLD:
			workers_reap();
			break;
		case SIGTERM:
		case SIGINT:
			if (!S.shutting_down)
				log_info("%s: shutting down", strsignal((int)si.ssi_signo));
			server_begin_shutdown();
			break;
		case SIGHUP:
			log_info("SIGHUP: configuration is read at start only; restart agentd to apply changes");
			break;
		}
	}
}

static void gc_audit(void)
{
	store_txn *t;
	uint64_t n = 0;
	if (sup_write_begin(STORE_WRITE, &t)) /* also with audit off: rows from when it was on go too */
		return;
	if (store_model_calls_gc(t, NULL, S.cfg->audit_ttl_ms, &n) == 0 && store_txn_commit(t) == 0) {
		if (n)
			log_info("audit: removed %llu model_calls rows older than the TTL", (unsigned long long)n);
	} else {
		store_txn_abort(t);
	}
}

static void on_tick(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	ssize_t r = read(S.tick_fd, &n, sizeof n);
	(void)r;
	S.tick_armed = 0; /* it fired: the next rearm must set it again */
	int64_t now = loop_now_ms();
	notify_tick(now);
	workers_tick(now);
	polls_expire(now);
	if (S.next_sync && now >= S.next_sync) {
		int err = store_sync(S.st);
		if (err)
			log_error("sync: %s", store_strerror(err));
		S.next_sync = now + 1000;
	}
	if (S.next_gc && now >= S.next_gc) {
		gc_audit();
		S.next_gc = now + 3600 * 1000;
	}
	if (S.shutting_down && !S.killed_all && now >= S.shutdown_deadline) {
		log_warn("shutdown: workers still running after %lld ms: killing them",
			 (long long)S.cfg->shutdown_timeout_ms);
		workers_kill_all();
		S.killed_all = 1;
	}
}

static void on_expiry(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	/* ECANCELED: the clock was set. Either way, fire what is due and re-arm. */
	if (read(S.expiry_fd, &n, sizeof n) < 0 && errno == ECANCELED)
		log_info("the realtime clock changed: re-checking expiry deadlines");
	expiries_fire();
	server_rearm_expiry();
}

void server_begin_shutdown(void)
{
	if (S.shutting_down)
		return;
	S.shutting_down = 1;
	notify_stopping();
	S.shutdown_deadline = loop_now_ms() + S.cfg->shutdown_timeout_ms;
	if (S.listen_fd >= 0) {
		loop_del(S.listen_fd);
		close(S.listen_fd);
		S.listen_fd = -1;
		control_unlink();
	}
	workers_stop_all();
}

static struct loop_watch w_signal = { on_signal }, w_tick = { on_tick }, w_expiry = { on_expiry },
			 w_listen = { on_listen };

static int before_wait(void *arg)
{
	rearm_tick();
	/* Lines left over from the per-wakeup cap are parsed every iteration,
	 * without waiting for new input that may never come. */
	return control_backlog_ready();
}

static void after_wait(void *arg)
{
	control_backlog();
}

static int iteration_end(void *arg)
{
	ops_execute();
	gate_pump();
	clients_reap();
	workers_gc();
	return S.shutting_down && S.nlive == 0;
}

int server_run(void)
{
	static const struct loop_hooks hooks = { before_wait, after_wait, iteration_end, NULL };
	int e;
	if ((e = loop_add(S.sig_fd, EPOLLIN, &w_signal)) || (e = loop_add(S.expiry_fd, EPOLLIN, &w_expiry)) ||
	    (e = loop_add(S.tick_fd, EPOLLIN, &w_tick)) || (e = loop_add(S.listen_fd, EPOLLIN, &w_listen))) {
		log_error("epoll_ctl: %s", strerror(-e));
		return e;
	}
	e = loop_run(&hooks);
	control_close_all();
	int se = store_sync(S.st);
	if (se)
		log_error("final sync: %s", store_strerror(se));
	return e;
}
