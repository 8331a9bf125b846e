/*
 * loop.h: the supervisor's event loop, one thread over epoll. It knows
 * nobody: a module registers a descriptor with a watch (a callback it embeds
 * in its own record), and the loop calls it back with the ready events. It
 * never names a module, reads the store or decides anything; what runs
 * around each wait is the caller's (loop_hooks), as Redis's ae.c has its
 * beforesleep.
 *
 * Caveats:
 *  - A callback may loop_del its own descriptor, or another's, but must not
 *    free a record whose watch may still be delivered in this iteration:
 *    mark it and free it at the iteration's end (the end hook).
 *  - Descriptors are level-triggered: a callback that leaves input unread is
 *    called again after the next wait.
 */
#ifndef AGENTD_LOOP_H
#define AGENTD_LOOP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Embed in the record a descriptor belongs to; fn gets it back with the
 * epoll events (EPOLLIN, EPOLLOUT, EPOLLHUP, ...), and container_of finds
 * the record from it. */
#define container_of(p, type, m) ((type *)(void *)((char *)(p)-offsetof(type, m)))
struct loop_watch {
	void (*fn)(struct loop_watch *w, uint32_t events);
	int during_commit; /* also called back while the loop is restricted (loop_restrict) */
};

/* What the caller runs around each wait. Any may be NULL. */
struct loop_hooks {
	int (*before_wait)(void *arg);  /* 1: work is left, do not block in the wait */
	void (*after_wait)(void *arg);  /* before the ready watches are called */
	int (*end)(void *arg);          /* after them, the iteration's end: 1 stops the loop */
	void *arg;
};

/* Create the epoll instance (close-on-exec). 0 or -errno. */
int loop_open(void);
void loop_close(void);

/* Register, change or remove fd. 0 or -errno (loop_del ignores errors: the
 * descriptor may already be closed). */
int loop_add(int fd, uint32_t events, struct loop_watch *w);
int loop_mod(int fd, uint32_t events, struct loop_watch *w);
void loop_del(int fd);

/* Run until the end hook returns 1 (0), or epoll fails (-errno, logged). */
int loop_run(const struct loop_hooks *h);

/* Restricted (on = 1): while another thread commits a group of writes, the
 * loop calls back only the watches marked during_commit, and runs none of
 * its hooks; the others' events wait (level-triggered) until it is lifted.
 * A watch must be marked before loop_add, and keep its mark. */
void loop_restrict(int on);
int loop_restricted(void);

/* Start a thread beside the loop that takes no signal: the loop reads them
 * all through its signalfd. 0 or -errno. */
int loop_thread(pthread_t *t, void *(*fn)(void *), void *arg);

/* A timer on the wall clock, for deadlines given in unix ms (expiries,
 * scheduled wakeups): a CLOCK_REALTIME timerfd (close-on-exec,
 * non-blocking) registered for EPOLLIN with w. Its fd, or -errno. Armed
 * with loop_realtime_arm to an absolute time (at_ms <= 0 disarms it),
 * with TFD_TIMER_CANCEL_ON_SET: when the clock is set, its read fails
 * with ECANCELED and the watch is called, to look again. 0 or -errno. */
int loop_realtime_timer(struct loop_watch *w);
int loop_realtime_arm(int fd, int64_t at_ms);

/* CLOCK_MONOTONIC in milliseconds and in microseconds. */
int64_t loop_now_ms(void);
int64_t loop_now_us(void);

#endif
