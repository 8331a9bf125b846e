/*
 * loop.c: the supervisor's one thread. epoll over the control socket and its
 * clients, each worker's IPC socket, a signalfd and two timerfds; at the end of
 * every iteration the requests it read are executed, the writes among them in
 * one durable transaction (group commit), and replies go out in order.
 */
#include "supervisor/sup.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int kind_listen = K_LISTEN, kind_signal = K_SIGNAL, kind_expiry = K_EXPIRY, kind_tick = K_TICK;

int64_t now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int loop_add(int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };
	return epoll_ctl(S.ep, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

void loop_mod(int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };
	epoll_ctl(S.ep, EPOLL_CTL_MOD, fd, &ev);
}

void loop_del(int fd)
{
	epoll_ctl(S.ep, EPOLL_CTL_DEL, fd, NULL);
}

/* Arm the realtime timerfd to the earliest durable deadline. Absolute and
 * CLOCK_REALTIME, because deadlines are wall-clock; TFD_TIMER_CANCEL_ON_SET
 * wakes us when the clock is set, and we simply re-arm. */
void loop_rearm_expiry(void)
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

static void on_signal(void)
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
			loop_begin_shutdown();
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

static void on_tick(void)
{
	uint64_t n;
	ssize_t r = read(S.tick_fd, &n, sizeof n);
	(void)r;
	S.tick_armed = 0; /* it fired: the next rearm must set it again */
	int64_t now = now_mono();
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

static void on_expiry(void)
{
	uint64_t n;
	/* ECANCELED: the clock was set. Either way, fire what is due and re-arm. */
	if (read(S.expiry_fd, &n, sizeof n) < 0 && errno == ECANCELED)
		log_info("the realtime clock changed: re-checking expiry deadlines");
	expiries_fire();
	loop_rearm_expiry();
}

void loop_begin_shutdown(void)
{
	if (S.shutting_down)
		return;
	S.shutting_down = 1;
	S.shutdown_deadline = now_mono() + S.cfg->shutdown_timeout_ms;
	if (S.listen_fd >= 0) {
		loop_del(S.listen_fd);
		close(S.listen_fd);
		S.listen_fd = -1;
		control_unlink();
	}
	workers_stop_all();
}

int loop_run(void)
{
	struct epoll_event evs[64];
	if (loop_add(S.sig_fd, EPOLLIN, &kind_signal) || loop_add(S.expiry_fd, EPOLLIN, &kind_expiry) ||
	    loop_add(S.tick_fd, EPOLLIN, &kind_tick) || loop_add(S.listen_fd, EPOLLIN, &kind_listen))
		return -1;
	for (;;) {
		rearm_tick();
		/* Lines left over from the per-wakeup cap are parsed every
		 * iteration, without waiting for new input that may never come. */
		int n = epoll_wait(S.ep, evs, 64, control_backlog_ready() ? 0 : -1);
		if (n < 0 && errno != EINTR) {
			log_error("epoll_wait: %s", strerror(errno));
			return -1;
		}
		control_backlog();
		for (int i = 0; i < n; i++) {
			int *kind = evs[i].data.ptr;
			switch (*kind) {
			case K_LISTEN:
				if (S.listen_fd >= 0)
					control_accept();
				break;
			case K_SIGNAL: on_signal(); break;
			case K_EXPIRY: on_expiry(); break;
			case K_TICK: on_tick(); break;
			case K_CLIENT: control_io((struct client *)kind, evs[i].events); break;
			case K_WORKER: worker_ipc((struct worker *)kind); break;
			}
		}
		ops_execute();
		gate_pump();
		clients_reap();
		workers_gc();
		if (S.shutting_down && S.nlive == 0)
			break;
	}
	control_close_all();
	int err = store_sync(S.st);
	if (err)
		log_error("final sync: %s", store_strerror(err));
	return 0;
}
