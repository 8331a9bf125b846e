/* The event loop alone (supervisor/loop.c): watches called back with their
 * events, hooks around each wait in order, a busy hook keeping the wait from
 * blocking, removal inside a callback, the end hook stopping it. */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/loop.h"
#include "tests/suites.h"

struct pipe_watch {
	struct loop_watch lw;
	int fd[2];
	int calls;
	uint32_t events;
	int remove; /* loop_del its descriptor when called */
};

static char trace[64];
static int ntrace;

static void mark(char c)
{
	if (ntrace < (int)sizeof trace - 1)
		trace[ntrace++] = c;
	trace[ntrace] = 0;
}

static void on_pipe(struct loop_watch *lw, uint32_t events)
{
	struct pipe_watch *p = (struct pipe_watch *)(void *)((char *)lw - offsetof(struct pipe_watch, lw));
	char buf[16];
	p->calls++;
	p->events = events;
	mark('W');
	/* One byte when it removes itself: data stays ready, yet it must not
	 * be called again. */
	if (read(p->fd[0], buf, p->remove ? 1 : sizeof buf) < 0)
		return;
	if (p->remove)
		loop_del(p->fd[0]);
}

static int iterations, stop_after, busy_left;

static int before(void *arg)
{
	mark('B');
	return busy_left-- > 0;
}

static void after(void *arg)
{
	mark('A');
}

static int end(void *arg)
{
	mark('E');
	return ++iterations >= stop_after;
}

static void setup(struct pipe_watch *p)
{
	ck_assert_int_eq(pipe(p->fd), 0);
	p->lw = (struct loop_watch){ on_pipe, 0 };
	p->calls = 0;
	p->remove = 0;
	ntrace = 0;
	trace[0] = 0;
	iterations = 0;
	busy_left = 0;
	ck_assert_int_eq(loop_open(), 0);
	ck_assert_int_eq(loop_add(p->fd[0], EPOLLIN, &p->lw), 0);
}

START_TEST(ready_watch_is_called_between_the_hooks)
{
	struct pipe_watch p;
	struct loop_hooks h = { before, after, end, NULL };
	setup(&p);
	ck_assert_int_eq(write(p.fd[1], "x", 1), 1);
	stop_after = 1;
	ck_assert_int_eq(loop_run(&h), 0);
	ck_assert_str_eq(trace, "BAWE");
	ck_assert_int_eq(p.calls, 1);
	ck_assert_uint_eq(p.events & EPOLLIN, EPOLLIN);
	loop_close();
}
END_TEST

/* A busy before-hook makes the wait return at once with nothing ready:
 * work left over (pipelined lines) is never stranded waiting for input. */
START_TEST(busy_hook_does_not_block)
{
	struct pipe_watch p;
	struct loop_hooks h = { before, after, end, NULL };
	setup(&p);
	busy_left = 3;
	stop_after = 3;
	ck_assert_int_eq(loop_run(&h), 0); /* would hang if the wait blocked */
	ck_assert_str_eq(trace, "BAEBAEBAE");
	ck_assert_int_eq(p.calls, 0);
	loop_close();
}
END_TEST

START_TEST(removed_in_its_callback_is_not_called_again)
{
	struct pipe_watch p;
	struct loop_hooks h = { before, after, end, NULL };
	setup(&p);
	p.remove = 1;
	ck_assert_int_eq(write(p.fd[1], "xyz", 3), 3);
	busy_left = 3;
	stop_after = 3;
	ck_assert_int_eq(loop_run(&h), 0);
	ck_assert_int_eq(p.calls, 1);
	loop_close();
}
END_TEST

START_TEST(level_triggered_until_read)
{
	struct pipe_watch p;
	struct loop_hooks h = { NULL, NULL, end, NULL };
	setup(&p);
	/* 40 bytes, 16 read per call: called three times in three iterations. */
	ck_assert_int_eq(write(p.fd[1], "0123456789012345678901234567890123456789", 40), 40);
	stop_after = 3;
	ck_assert_int_eq(loop_run(&h), 0);
	ck_assert_int_eq(p.calls, 3);
	loop_close();
}
END_TEST

/* Restricted, only the watches marked during_commit are called, and no
 * hook; lifted (here by such a watch, as the writer thread's eventfd does),
 * the others' events, kept meanwhile, are called in the next whole
 * iteration. Unrestricted, a marked watch is called as any other, and once
 * removed it is called in neither mode. */
static struct pipe_watch *lifter; /* lifts the restriction when called */

static void on_marked(struct loop_watch *lw, uint32_t events)
{
	struct pipe_watch *p = (struct pipe_watch *)(void *)((char *)lw - offsetof(struct pipe_watch, lw));
	char buf[16];
	p->calls++;
	mark(loop_restricted() ? 'R' : 'M');
	if (read(p->fd[0], buf, sizeof buf) < 0)
		return;
	if (p == lifter)
		loop_restrict(0);
}

START_TEST(restricted_calls_only_the_marked)
{
	struct pipe_watch p, m;
	struct loop_hooks h = { before, after, end, NULL };
	setup(&p); /* unmarked: its callback marks 'W' */
	ck_assert_int_eq(pipe(m.fd), 0);
	m.lw = (struct loop_watch){ on_marked, 1 };
	m.calls = 0;
	ck_assert_int_eq(loop_add(m.fd[0], EPOLLIN, &m.lw), 0);

	/* Unrestricted: both, in one iteration between the hooks. */
	ck_assert_int_eq(write(p.fd[1], "x", 1), 1);
	ck_assert_int_eq(write(m.fd[1], "x", 1), 1);
	stop_after = 1;
	ck_assert_int_eq(loop_run(&h), 0);
	ck_assert_int_eq(p.calls, 1);
	ck_assert_int_eq(m.calls, 1);
	ck_assert_msg(!strcmp(trace, "BAWME") || !strcmp(trace, "BAMWE"), "trace %s", trace);

	/* Restricted: the unmarked one waits; the marked one lifts it. */
	ntrace = 0;
	iterations = 0;
	lifter = &m;
	ck_assert_int_eq(write(p.fd[1], "y", 1), 1);
	loop_restrict(1);
	ck_assert_int_eq(write(m.fd[1], "y", 1), 1);
	ck_assert_int_eq(loop_run(&h), 0);
	ck_assert_str_eq(trace, "RBAWE");
	ck_assert_int_eq(p.calls, 2);
	ck_assert_int_eq(m.calls, 2);

	/* Removed: called in neither mode. */
	loop_del(m.fd[0]);
	ntrace = 0;
	iterations = 0;
	busy_left = 2;
	stop_after = 2;
	ck_assert_int_eq(write(m.fd[1], "z", 1), 1);
	ck_assert_int_eq(loop_run(&h), 0);
	ck_assert_str_eq(trace, "BAEBAE");
	ck_assert_int_eq(m.calls, 2);
	close(m.fd[0]);
	close(m.fd[1]);
	lifter = NULL;
	loop_close();
}
END_TEST

START_TEST(errors_are_negative_errno)
{
	struct loop_watch w = { NULL };
	ck_assert_int_eq(loop_open(), 0);
	ck_assert_int_eq(loop_add(-1, EPOLLIN, &w), -EBADF);
	int fd[2];
	ck_assert_int_eq(pipe(fd), 0);
	ck_assert_int_eq(loop_mod(fd[0], EPOLLIN, &w), -ENOENT);
	ck_assert_int_eq(loop_add(fd[0], EPOLLIN, &w), 0);
	ck_assert_int_eq(loop_add(fd[0], EPOLLIN, &w), -EEXIST);
	loop_close();
	ck_assert_int_eq(loop_add(fd[0], EPOLLIN, &w), -EBADF); /* closed */
}
END_TEST

START_TEST(clocks_are_monotonic)
{
	int64_t a = loop_now_ms(), ua = loop_now_us();
	usleep(2000);
	ck_assert_int_ge(loop_now_ms(), a + 1);
	ck_assert_int_ge(loop_now_us(), ua + 2000);
}
END_TEST

Suite *make_loop_suite(void)
{
	Suite *s = suite_create("loop");
	TCase *tc = tcase_create("loop");
	tcase_add_test(tc, ready_watch_is_called_between_the_hooks);
	tcase_add_test(tc, busy_hook_does_not_block);
	tcase_add_test(tc, removed_in_its_callback_is_not_called_again);
	tcase_add_test(tc, level_triggered_until_read);
	tcase_add_test(tc, restricted_calls_only_the_marked);
	tcase_add_test(tc, errors_are_negative_errno);
	tcase_add_test(tc, clocks_are_monotonic);
	suite_add_tcase(s, tc);
	return s;
}
