/* loop.c: the event loop (see loop.h). */
#include "supervisor/loop.h"
#include "common/log.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define LOOP_EVENTS 64 /* ready descriptors taken per wait */

/* ep holds every watch; ep_commit also holds those marked during_commit,
 * for the restricted wait. An unrestricted wait is one epoll_wait on ep. */
static int ep = -1, ep_commit = -1, restricted;

int loop_realtime_timer(struct loop_watch *w)
{
	int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int e = loop_add(fd, EPOLLIN, w);
	if (e) {
		close(fd);
		return e;
	}
	return fd;
}

int loop_realtime_arm(int fd, int64_t at_ms)
{
	struct itimerspec its = { 0 };
	if (at_ms > 0) {
		its.it_value.tv_sec = at_ms / 1000;
		its.it_value.tv_nsec = (at_ms % 1000) * 1000000;
	}
	return timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its, NULL) < 0 ? -errno : 0;
}

int64_t loop_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t loop_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int loop_open(void)
{
	ep = epoll_create1(EPOLL_CLOEXEC);
	ep_commit = epoll_create1(EPOLL_CLOEXEC);
	return ep < 0 || ep_commit < 0 ? -errno : 0;
}

void loop_close(void)
{
	if (ep >= 0)
		close(ep);
	if (ep_commit >= 0)
		close(ep_commit);
	ep = ep_commit = -1;
}

static int ctl(int op, int fd, uint32_t events, struct loop_watch *w)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };
	if (epoll_ctl(ep, op, fd, &ev) < 0)
		return -errno;
	if (w->during_commit && epoll_ctl(ep_commit, op, fd, &ev) < 0) {
		int e = -errno;
		if (op == EPOLL_CTL_ADD)
			epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL); /* in both sets or in neither */
		return e;
	}
	return 0;
}

int loop_add(int fd, uint32_t events, struct loop_watch *w)
{
	return ctl(EPOLL_CTL_ADD, fd, events, w);
}

int loop_mod(int fd, uint32_t events, struct loop_watch *w)
{
	return ctl(EPOLL_CTL_MOD, fd, events, w);
}

void loop_del(int fd)
{
	/* ep_commit holds only the during_commit ones: the others say ENOENT. */
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	epoll_ctl(ep_commit, EPOLL_CTL_DEL, fd, NULL);
}

int loop_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -e;
}

void loop_restrict(int on)
{
	restricted = on;
}

int loop_restricted(void)
{
	return restricted;
}

/* Wait on set (-1: forever) and call back what is ready; -errno when
 * epoll fails. */
static int dispatch(int set, int timeout, int (*after)(const struct loop_hooks *), const struct loop_hooks *h)
{
	struct epoll_event evs[LOOP_EVENTS];
	int n = epoll_wait(set, evs, LOOP_EVENTS, timeout);
	if (n < 0 && errno != EINTR) {
		int e = errno;
		log_error("epoll_wait: %s", strerror(e));
		return -e;
	}
	if (after)
		after(h);
	for (int i = 0; i < n; i++) {
		struct loop_watch *w = evs[i].data.ptr;
		w->fn(w, evs[i].events);
	}
	return 0;
}

static int after_wait(const struct loop_hooks *h)
{
	if (h->after_wait)
		h->after_wait(h->arg);
	return 0;
}

int loop_run(const struct loop_hooks *h)
{
	for (;;) {
		int e;
		/* Restricted, no hook runs; once lifted, the next iteration is a
		 * whole one, so every watch gets its turn between two commits. */
		if (restricted) {
			if ((e = dispatch(ep_commit, -1, NULL, h)) < 0)
				return e;
			continue;
		}
		int busy = h->before_wait ? h->before_wait(h->arg) : 0;
		if ((e = dispatch(ep, busy ? 0 : -1, after_wait, h)) < 0)
			return e;
		if (h->end && h->end(h->arg))
			return 0;
	}
}
