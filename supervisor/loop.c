/* loop.c: the event loop (see loop.h). */
#include "supervisor/loop.h"
#include "common/log.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define LOOP_EVENTS 64 /* ready descriptors taken per wait */

static int ep = -1;

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
	return ep < 0 ? -errno : 0;
}

void loop_close(void)
{
	if (ep >= 0)
		close(ep);
	ep = -1;
}

int loop_add(int fd, uint32_t events, struct loop_watch *w)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int loop_mod(int fd, uint32_t events, struct loop_watch *w)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };
	return epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
}

void loop_del(int fd)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
}

int loop_run(const struct loop_hooks *h)
{
	struct epoll_event evs[LOOP_EVENTS];
	for (;;) {
		int busy = h->before_wait ? h->before_wait(h->arg) : 0;
		int n = epoll_wait(ep, evs, LOOP_EVENTS, busy ? 0 : -1);
		if (n < 0 && errno != EINTR) {
			int e = errno;
			log_error("epoll_wait: %s", strerror(e));
			return -e;
		}
		if (h->after_wait)
			h->after_wait(h->arg);
		for (int i = 0; i < n; i++) {
			struct loop_watch *w = evs[i].data.ptr;
			w->fn(w, evs[i].events);
		}
		if (h->end && h->end(h->arg))
			return 0;
	}
}
