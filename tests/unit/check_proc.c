/* The command runner: shell-like splitting, and running real programs (true,
 * cat, sh, sleep, head, yes) with timeouts, caps, streaming and cancellation.
 * Every test runs in its own forked process (Check's fork mode), made a child
 * subreaper so that grandchildren the runner killed come back to it to be
 * reaped: "no process of the group remains" is then checkable here whatever
 * the machine's init does with orphans. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/isolate.h"
#include "agent/proc.h"
#include "common/cmdline.h"
#include "tests/suites.h"

/* ------------------------------------------------------------------ helpers */

static double slow(void)
{
	const char *s = getenv("AGENTD_TEST_SLOW");
	double m = s ? atof(s) : 1.0;
	return m > 0 ? m : 1.0;
}

static int64_t scaled(int64_t ms)
{
	return (int64_t)((double)ms * slow());
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void subreaper(void)
{
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
}

/* Wait (scaled deadline) until no process of group pgid exists, reaping the
 * orphans that come back to us. 1 when gone. */
static int group_gone(pid_t pgid)
{
	int64_t end = mono_ms() + scaled(3000);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (kill(-pgid, 0) < 0 && errno == ESRCH)
			return 1;
		if (mono_ms() > end)
			return 0;
		usleep(5000);
	}
}

static int pid_gone(pid_t pid)
{
	int64_t end = mono_ms() + scaled(3000);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (kill(pid, 0) < 0 && errno == ESRCH)
			return 1;
		if (mono_ms() > end)
			return 0;
		usleep(5000);
	}
}

static long maxrss_kb(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* Run a command line with options; returns proc_run's value. */
static int run(const char *cmdline, const struct proc_opts *o, struct proc_result *r)
{
	char **argv;
	ck_assert_int_eq(cmdline_split(cmdline, &argv), 0);
	int rc = proc_run(argv, o, r);
	cmdline_free(argv);
	return rc;
}

/* ---------------------------------------------------------------- splitting */

static void split_is(const char *line, const char *const *want)
{
	char **argv;
	size_t i;
	ck_assert_msg(cmdline_split(line, &argv) == 0, "split of [%s] failed", line);
	for (i = 0; want[i]; i++) {
		ck_assert_msg(argv[i] != NULL, "[%s]: word %zu missing", line, i);
		ck_assert_msg(strcmp(argv[i], want[i]) == 0, "[%s]: word %zu is [%s], want [%s]", line, i,
		              argv[i], want[i]);
	}
	ck_assert_msg(argv[i] == NULL, "[%s]: extra word [%s]", line, argv[i]);
	cmdline_free(argv);
}

#define SPLIT(line, ...) split_is(line, (const char *const[]){ __VA_ARGS__, NULL })

START_TEST(split_words)
{
	SPLIT("ls", "ls");
	SPLIT("  a b\tc\n d  ", "a", "b", "c", "d");
	SPLIT("/usr/bin/env python3 scripts/models/example.py --model gpt-4o-mini", "/usr/bin/env",
	      "python3", "scripts/models/example.py", "--model", "gpt-4o-mini");
	/* No substitution, globbing, comments or operators: all literal. */
	SPLIT("echo $HOME ~ *.c #x a|b ; & > <", "echo", "$HOME", "~", "*.c", "#x", "a|b", ";", "&", ">", "<");
}
END_TEST

START_TEST(split_quotes)
{
	SPLIT("'a b' \"c d\" e'f'\"g\"h", "a b", "c d", "efgh");
	SPLIT("'' \"\" x", "", "", "x");
	SPLIT("'$HOME \"x\" \\n'", "$HOME \"x\" \\n");
	SPLIT("\"it's\" 'say \"hi\"'", "it's", "say \"hi\"");
	/* Inside double quotes only \\ \" \$ \` escape; other backslashes stay. */
	SPLIT("\"a\\\"b\\\\c\\$d\\`e\\xf\"", "a\"b\\c$d`e\\xf");
	/* Outside quotes a backslash quotes any next character. */
	SPLIT("a\\ b c\\'d \\\\ \\x", "a b", "c'd", "\\", "x");
	/* Backslash-newline is a line continuation, inside double quotes too. */
	SPLIT("a \\\n b", "a", "b");
	SPLIT("a\\\nb \"c\\\nd\"", "ab", "cd");
	SPLIT("'a\nb'", "a\nb");
}
END_TEST

START_TEST(split_errors)
{
	static const char *const bad[] = {
		"", "   ", "\t\n", "'abc", "a 'b", "\"abc", "\"abc\\\"", "abc\\", "a \\", "\\\n",
	};
	char **argv = (char **)1;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		argv = (char **)1;
		ck_assert_msg(cmdline_split(bad[i], &argv) == -EINVAL, "[%s] accepted", bad[i]);
		ck_assert_ptr_null(argv);
	}
	ck_assert_int_eq(cmdline_split(NULL, &argv), -EINVAL);
	ck_assert_int_eq(cmdline_split("a", NULL), -EINVAL);
	cmdline_free(NULL);
}
END_TEST

START_TEST(split_many_words)
{
	char line[6000];
	size_t o = 0;
	for (int i = 0; i < 1000; i++)
		o += (size_t)snprintf(line + o, sizeof line - o, "w%d ", i);
	char **argv;
	ck_assert_int_eq(cmdline_split(line, &argv), 0);
	int n = 0;
	while (argv[n])
		n++;
	ck_assert_int_eq(n, 1000);
	ck_assert_str_eq(argv[0], "w0");
	ck_assert_str_eq(argv[999], "w999");
	cmdline_free(argv);
}
END_TEST

/* ------------------------------------------------------------- exit status */

START_TEST(run_exit_status)
{
	struct proc_result r;
	ck_assert_int_eq(run("true", NULL, &r), 0);
	ck_assert(r.exited && r.status == 0 && !r.signaled && !r.timed_out && !r.out_overflow);
	ck_assert_int_gt(r.pid, 0);
	ck_assert_ptr_nonnull(r.out);
	ck_assert_ptr_nonnull(r.err);
	ck_assert_uint_eq(r.out_len, 0);
	ck_assert_str_eq(r.out, "");
	ck_assert_str_eq(r.err, "");
	ck_assert_int_ge(r.elapsed_ms, 0);
	proc_result_free(&r);
	ck_assert_ptr_null(r.out);

	ck_assert_int_eq(run("false", NULL, &r), 0);
	ck_assert(r.exited && r.status == 1 && !r.signaled);
	proc_result_free(&r);

	ck_assert_int_eq(run("sh -c 'echo out; echo err >&2; exit 7'", NULL, &r), 0);
	ck_assert(r.exited && r.status == 7);
	ck_assert_str_eq(r.out, "out\n");
	ck_assert_uint_eq(r.out_len, 4);
	ck_assert_str_eq(r.err, "err\n");
	ck_assert_uint_eq(r.err_len, 4);
	proc_result_free(&r);

	ck_assert_int_eq(run("sh -c 'kill -TERM $$'", NULL, &r), 0);
	ck_assert(!r.exited && r.signaled && r.sig == SIGTERM && !r.timed_out);
	proc_result_free(&r);
}
END_TEST

START_TEST(run_cannot_start)
{
	struct proc_result r;
	ck_assert_int_eq(run("agentd-no-such-program-7f3a --x", NULL, &r), -ENOENT);
	ck_assert(!r.exited && !r.signaled);
	proc_result_free(&r);
	ck_assert_int_eq(run("/nonexistent/dir/prog", NULL, &r), -ENOENT);
	proc_result_free(&r);

	char path[] = "/tmp/agentd-proc-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "#!/bin/sh\n", 10), 10);
	close(fd);
	chmod(path, 0644);
	char *argv[] = { path, NULL };
	ck_assert_int_eq(proc_run(argv, NULL, &r), -EACCES);
	proc_result_free(&r);
	unlink(path);

	char *dir[] = { "/tmp", NULL };
	ck_assert_int_eq(proc_run(dir, NULL, &r), -EACCES);
	proc_result_free(&r);
}
END_TEST

START_TEST(run_invalid)
{
	struct proc_result r;
	char *argv[] = { "true", NULL }, *empty[] = { NULL };
	ck_assert_int_eq(proc_run(NULL, NULL, &r), -EINVAL);
	ck_assert_int_eq(proc_run(empty, NULL, &r), -EINVAL);
	ck_assert_int_eq(proc_run(argv, NULL, NULL), -EINVAL);
	struct proc_opts o = { .input_len = 3 };
	ck_assert_int_eq(proc_run(argv, &o, &r), -EINVAL);
	proc_result_free(&r);
	const char *const env_bad[] = { "NOEQUALS", NULL }, *const env_bad2[] = { "=x", NULL };
	struct proc_opts o2 = { .env_add = env_bad }, o3 = { .env_add = env_bad2 };
	ck_assert_int_eq(proc_run(argv, &o2, &r), -EINVAL);
	proc_result_free(&r);
	ck_assert_int_eq(proc_run(argv, &o3, &r), -EINVAL);
	proc_result_free(&r);
	/* A zeroed proc_opts (watch_fd 0, no on_watch) watches nothing. */
	struct proc_opts zero = { 0 };
	ck_assert_int_eq(proc_run(argv, &zero, &r), 0);
	ck_assert(r.exited && r.status == 0);
	proc_result_free(&r);
}
END_TEST

/* ------------------------------------------------------------- stdin, env */

START_TEST(run_stdin_cat)
{
	struct proc_result r;
	struct proc_opts o = { .input = "hello\nworld", .input_len = 11 };
	ck_assert_int_eq(run("cat", &o, &r), 0);
	ck_assert(r.exited && r.status == 0);
	ck_assert_str_eq(r.out, "hello\nworld");
	proc_result_free(&r);

	/* 8 MiB through cat: it writes while we still write, so both directions
	 * must be served at once or the two pipe buffers deadlock. */
	size_t n = (size_t)8 << 20;
	char *big = malloc(n);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)('a' + (i * 7 + i / 4093) % 26);
	struct proc_opts ob = { .input = big, .input_len = n, .out_cap = n, .timeout_ms = (int)scaled(20000) };
	ck_assert_int_eq(run("cat", &ob, &r), 0);
	ck_assert(r.exited && r.status == 0 && !r.out_overflow && !r.timed_out);
	ck_assert_uint_eq(r.out_len, n);
	ck_assert(memcmp(r.out, big, n) == 0);
	proc_result_free(&r);
	free(big);
}
END_TEST

START_TEST(run_env)
{
	struct proc_result r;
	setenv("AGENTD_T_KEEP", "kept", 1);
	setenv("AGENTD_T_OVER", "old", 1);
	const char *const env[] = { "X=hello world", "AGENTD_T_OVER=new", "X=twice", NULL };
	struct proc_opts o = { .env_add = env };
	ck_assert_int_eq(run("sh -c 'echo \"$X|$AGENTD_T_OVER|${AGENTD_T_KEEP-unset}\"; env | grep -c ^AGENTD_T_OVER='",
	                     &o, &r),
	                 0);
	ck_assert(r.exited && r.status == 0);
	ck_assert_str_eq(r.out, "twice|new|unset\n1\n");
	proc_result_free(&r);
	/* The worker's AGENTD_* variables are its own: none passes. */
	ck_assert_int_eq(run("sh -c 'echo \"${AGENTD_T_OVER-unset}\"'", NULL, &r), 0);
	ck_assert_str_eq(r.out, "unset\n");
	proc_result_free(&r);
}
END_TEST

/* The environment is minimal (isolate.h): PATH, HOME, LANG, then
 * what env allows (a name: the caller's value) or sets (KEY=VALUE). */
START_TEST(run_env_minimal)
{
	struct proc_result r;
	setenv("T_SECRET", "s3cret", 1);
	setenv("T_ALLOWED", "yes", 1);
	setenv("LANG", "C.UTF-8", 1);
	unsetenv("T_UNSET");
	ck_assert_int_eq(run("sh -c 'echo \"${T_SECRET-unset}|$LANG|${PATH:+path}\"'", NULL, &r), 0);
	ck_assert_str_eq(r.out, "unset|C.UTF-8|path\n");
	proc_result_free(&r);
	char *allow[] = { "T_ALLOWED", "T_UNSET", "T_SET=given value", "LANG=fr_FR.UTF-8", NULL };
	struct isolate_cfg iso = { .env = allow, .uid = -1, .gid = -1 };
	const char *const add[] = { "T_SET=added", NULL };
	struct proc_opts o = { .iso = &iso, .env_add = add };
	ck_assert_int_eq(run("sh -c 'echo \"${T_SECRET-unset}|$T_ALLOWED|${T_UNSET-unset}|$T_SET|$LANG\"'",
	                     &o, &r), 0);
	ck_assert_str_eq(r.out, "unset|yes|unset|added|fr_FR.UTF-8\n");
	proc_result_free(&r);
}
END_TEST

/* Limits reach the command: its own view of them (ulimit) shows them. */
START_TEST(run_rlimits)
{
	struct proc_result r;
	struct isolate_cfg iso = { .rlimit_as = (size_t)256 << 20, .rlimit_cpu = 7, .rlimit_nofile = 40,
				   .uid = -1, .gid = -1 };
	struct proc_opts o = { .iso = &iso };
	ck_assert_int_eq(run("sh -c 'ulimit -v; ulimit -t; ulimit -n'", &o, &r), 0);
	ck_assert_str_eq(r.out, "262144\n7\n40\n");
	proc_result_free(&r);
	char why[200];
	ck_assert_int_eq(isolate_explain(&iso, 0, 0, 1, SIGXCPU, why, sizeof why), 1);
	ck_assert_str_eq(why, "killed at its CPU time limit (rlimit_cpu = 7 s)");
	ck_assert_int_eq(isolate_explain(NULL, 0, 0, 1, SIGXCPU, why, sizeof why), 0);
}
END_TEST

/* A child that never reads stdin while we hold 1 MiB for it: no deadlock, and
 * no SIGPIPE for a caller that does not ignore it. */
START_TEST(run_stdin_unread)
{
	struct proc_result r;
	size_t n = (size_t)1 << 20;
	char *big = calloc(1, n);
	sigset_t none, mask, pending;
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	struct proc_opts o = { .input = big, .input_len = n, .timeout_ms = (int)scaled(10000) };

	ck_assert_int_eq(run("true", &o, &r), 0);
	ck_assert(r.exited && r.status == 0 && !r.timed_out);
	proc_result_free(&r);
	/* Closes stdin and goes on running: our write meets EPIPE mid-run. */
	ck_assert_int_eq(run("sh -c 'exec 0<&-; sleep 0.2; echo done'", &o, &r), 0);
	ck_assert(r.exited && r.status == 0 && !r.timed_out);
	ck_assert_str_eq(r.out, "done\n");
	proc_result_free(&r);
	sigpending(&pending);
	ck_assert(!sigismember(&pending, SIGPIPE));
	sigprocmask(SIG_SETMASK, NULL, &mask);
	ck_assert(!sigismember(&mask, SIGPIPE));

	/* Neither reads nor exits: the deadline ends it. */
	o.timeout_ms = 300;
	int64_t t0 = mono_ms();
	ck_assert_int_eq(run("sleep 100", &o, &r), 0);
	ck_assert(r.timed_out && r.signaled && r.sig == SIGKILL);
	ck_assert_int_lt(mono_ms() - t0, 300 + scaled(3000));
	proc_result_free(&r);
	free(big);
}
END_TEST

/* ----------------------------------------------------- timeouts and groups */

START_TEST(run_timeout_kills_group)
{
	subreaper();
	struct proc_result r;
	struct proc_opts o = { .timeout_ms = 300 };
	int64_t t0 = mono_ms();
	ck_assert_int_eq(run("sh -c 'sleep 100 & echo $!; sleep 100'", &o, &r), 0);
	int64_t took = mono_ms() - t0;
	ck_assert(r.timed_out && r.signaled && r.sig == SIGKILL && !r.exited);
	ck_assert_int_ge(took, 290);
	ck_assert_int_lt(took, 300 + scaled(3000));
	ck_assert_int_ge(r.elapsed_ms, 290);
	pid_t grandchild = (pid_t)atoi(r.out);
	ck_assert_int_gt(grandchild, 0);
	ck_assert_msg(group_gone(r.pid), "process group %d still has members", (int)r.pid);
	ck_assert(pid_gone(grandchild));
	proc_result_free(&r);
}
END_TEST

/* The child exits but leaves a grandchild holding stdout: we do not wait for
 * it (no timeout set), and it is killed. */
START_TEST(run_exit_kills_leftovers)
{
	subreaper();
	struct proc_result r;
	int64_t t0 = mono_ms();
	ck_assert_int_eq(run("sh -c 'sleep 100 & echo started'", NULL, &r), 0);
	ck_assert_int_lt(mono_ms() - t0, scaled(5000));
	ck_assert(r.exited && r.status == 0 && !r.timed_out);
	ck_assert_str_eq(r.out, "started\n");
	ck_assert(group_gone(r.pid));
	proc_result_free(&r);
}
END_TEST

/* The child gets its own group, default dispositions, an empty mask and no
 * descriptor beyond 0, 1, 2, whatever the caller's state. */
START_TEST(run_clean_child)
{
	struct proc_result r;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGINT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	int fd = open("/dev/null", O_RDONLY); /* no O_CLOEXEC: inherited unless closed */
	ck_assert_int_eq(dup2(fd, 50), 50);

	ck_assert_int_eq(run("grep -E ^Sig(Blk|Ign): /proc/self/status", NULL, &r), 0);
	ck_assert_str_eq(r.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
	proc_result_free(&r);

	ck_assert_int_eq(run("sh -c 'ls /proc/$$/fd; test -e /proc/$$/fd/50 && echo leaked; true'", NULL, &r), 0);
	ck_assert_msg(strcmp(r.out, "0\n1\n2\n") == 0, "child descriptors: %s", r.out);
	proc_result_free(&r);

	ck_assert_int_eq(run("cat /proc/self/stat", NULL, &r), 0);
	int pid, pgrp;
	char state;
	const char *p = strrchr(r.out, ')');
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(sscanf(r.out, "%d", &pid), 1);
	ck_assert_int_eq(sscanf(p + 1, " %c %*d %d", &state, &pgrp), 2);
	ck_assert_int_eq(pid, r.pid);
	ck_assert_int_eq(pgrp, r.pid);
	proc_result_free(&r);
	close(fd);
	close(50);
}
END_TEST

/* Runs with 0, 1 and 2 closed (pipe2 then hands out those numbers). */
START_TEST(run_closed_stdio)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(0);
		close(1);
		close(2);
		struct proc_result r;
		struct proc_opts o = { .input = "abc", .input_len = 3 };
		char *argv[] = { "sh", "-c", "cat; echo err >&2", NULL };
		int rc = proc_run(argv, &o, &r);
		_exit(rc == 0 && r.exited && r.status == 0 && strcmp(r.out, "abc") == 0 &&
		              strcmp(r.err, "err\n") == 0
		          ? 0
		          : 1);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

static int pid_to_pipe(void *arg, const char *line, size_t len)
{
	int fd = *(int *)arg;
	if (write(fd, line, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
		return 1;
	return 0;
}

/* A command whose caller is SIGKILLed dies too (PR_SET_PDEATHSIG). */
START_TEST(run_dies_with_caller)
{
	subreaper();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t caller = fork();
	ck_assert_int_ge(caller, 0);
	if (caller == 0) {
		close(p[0]);
		struct proc_result r;
		struct proc_opts o = { .on_line = pid_to_pipe, .arg = &p[1] };
		char *argv[] = { "sh", "-c", "echo $$; exec sleep 100", NULL };
		proc_run(argv, &o, &r);
		_exit(0);
	}
	close(p[1]);
	char buf[32] = { 0 };
	ssize_t n = read(p[0], buf, sizeof buf - 1);
	ck_assert_int_gt(n, 0);
	pid_t tool = (pid_t)atoi(buf);
	ck_assert_int_gt(tool, 0);
	ck_assert_int_eq(kill(tool, 0), 0);
	ck_assert_int_eq(kill(caller, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(caller, &st, 0), caller);
	ck_assert_msg(pid_gone(tool), "tool %d outlived its caller", (int)tool);
	close(p[0]);
}
END_TEST

/* ------------------------------------------------------------------- output */

START_TEST(run_huge_output_capped)
{
	struct proc_result r;
	long rss0 = maxrss_kb();
	size_t cap = (size_t)4 << 20;
	struct proc_opts o = { .out_cap = cap, .timeout_ms = (int)scaled(20000) };
	int64_t t0 = mono_ms();
	ck_assert_int_eq(run("head -c 2G /dev/zero", &o, &r), 0);
	ck_assert(r.out_overflow && !r.timed_out);
	ck_assert(r.signaled && r.sig == SIGKILL);
	ck_assert_uint_eq(r.out_len, cap);
	ck_assert_int_eq(r.out[cap], 0);
	ck_assert_int_lt(mono_ms() - t0, scaled(10000));
	ck_assert_msg(maxrss_kb() - rss0 < 64 * 1024, "memory grew by %ld KiB", maxrss_kb() - rss0);
	proc_result_free(&r);

	/* Exactly out_cap is not an overflow; one byte more is. */
	struct proc_opts o4 = { .out_cap = 4 }, o3 = { .out_cap = 3 };
	ck_assert_int_eq(run("printf abcd", &o4, &r), 0);
	ck_assert(!r.out_overflow && r.exited && r.status == 0);
	ck_assert_str_eq(r.out, "abcd");
	proc_result_free(&r);
	ck_assert_int_eq(run("printf abcd", &o3, &r), 0);
	ck_assert(r.out_overflow);
	ck_assert_str_eq(r.out, "abc");
	proc_result_free(&r);
}
END_TEST

START_TEST(run_large_output_kept)
{
	struct proc_result r;
	size_t n = (size_t)20 << 20;
	struct proc_opts o = { .out_cap = (size_t)32 << 20, .timeout_ms = (int)scaled(20000) };
	ck_assert_int_eq(run("head -c 20M /dev/zero", &o, &r), 0);
	ck_assert(r.exited && r.status == 0 && !r.out_overflow);
	ck_assert_uint_eq(r.out_len, n);
	for (size_t i = 0; i < n; i += 4096)
		ck_assert_int_eq(r.out[i], 0);
	proc_result_free(&r);
}
END_TEST

START_TEST(run_stderr_tail)
{
	struct proc_result r;
	struct proc_opts o = { .err_tail = 100, .timeout_ms = (int)scaled(20000) };
	ck_assert_int_eq(run("sh -c 'head -c 1000000 /dev/zero | tr \\\\000 x >&2; echo END >&2; echo out'", &o,
	                     &r),
	                 0);
	ck_assert(r.exited && r.status == 0);
	ck_assert_uint_eq(r.err_len, 100);
	ck_assert_uint_eq(strlen(r.err), 100);
	ck_assert_str_eq(r.err + 96, "END\n");
	for (int i = 0; i < 96; i++)
		ck_assert_int_eq(r.err[i], 'x');
	ck_assert_str_eq(r.out, "out\n");
	proc_result_free(&r);

	/* Default tail, 64 MiB of stderr: memory stays bounded. */
	long rss0 = maxrss_kb();
	struct proc_opts od = { .timeout_ms = (int)scaled(20000) };
	ck_assert_int_eq(run("sh -c 'head -c 64M /dev/zero >&2; printf tail >&2'", &od, &r), 0);
	ck_assert(r.exited && r.status == 0);
	ck_assert_uint_eq(r.err_len, PROC_ERR_TAIL_DEFAULT);
	ck_assert_str_eq(r.err + PROC_ERR_TAIL_DEFAULT - 4, "tail");
	ck_assert_msg(maxrss_kb() - rss0 < 16 * 1024, "memory grew by %ld KiB", maxrss_kb() - rss0);
	proc_result_free(&r);

	/* Small writes, many of them, with a tail larger than each. */
	struct proc_opts os = { .err_tail = 10 };
	ck_assert_int_eq(run("sh -c 'for i in 1 2 3 4 5 6 7 8 9; do echo ab$i >&2; done'", &os, &r), 0);
	ck_assert_str_eq(r.err, "7\nab8\nab9\n");
	ck_assert_uint_eq(r.err_len, 10);
	proc_result_free(&r);
}
END_TEST

/* ----------------------------------------------------------------- on_line */

struct lines {
	int n;
	int stop_at;  /* return 42 on this line (1-based); 0: never */
	size_t bytes;
	char seen[8][16];
	int64_t first_ms;
};

static int collect(void *arg, const char *line, size_t len)
{
	struct lines *l = arg;
	ck_assert_uint_eq(strlen(line), len); /* NUL-terminated during the call */
	if (l->n < 8)
		snprintf(l->seen[l->n], sizeof l->seen[0], "%.*s", (int)len, line);
	if (l->n++ == 0)
		l->first_ms = mono_ms();
	l->bytes += len + 1;
	return l->stop_at && l->n == l->stop_at ? 42 : 0;
}

START_TEST(run_on_line)
{
	struct proc_result r;
	struct lines l = { 0 };
	struct proc_opts o = { .on_line = collect, .arg = &l };
	ck_assert_int_eq(run("printf 'a\\nbb\\n\\nccc'", &o, &r), 0);
	ck_assert_int_eq(l.n, 4);
	ck_assert_str_eq(l.seen[0], "a");
	ck_assert_str_eq(l.seen[1], "bb");
	ck_assert_str_eq(l.seen[2], "");
	ck_assert_str_eq(l.seen[3], "ccc");
	ck_assert_str_eq(r.out, "a\nbb\n\nccc"); /* out is kept whole too */
	proc_result_free(&r);

	/* Lines arrive while the command runs: it never ends on its own. */
	subreaper();
	struct lines s = { .stop_at = 2 };
	struct proc_opts os = { .on_line = collect, .arg = &s, .timeout_ms = (int)scaled(20000) };
	int64_t t0 = mono_ms();
	ck_assert_int_eq(run("sh -c 'echo one; echo two; echo three; sleep 100'", &os, &r), 42);
	ck_assert_int_lt(mono_ms() - t0, scaled(5000));
	ck_assert_int_eq(s.n, 2);
	ck_assert_str_eq(s.seen[1], "two");
	ck_assert(!r.timed_out && r.signaled && r.sig == SIGKILL);
	ck_assert(group_gone(r.pid));
	proc_result_free(&r);
}
END_TEST

/* Endless output through on_line: capped, every kept line delivered once. */
START_TEST(run_on_line_yes_capped)
{
	struct proc_result r;
	struct lines l = { 0 };
	struct proc_opts o = { .on_line = collect, .arg = &l, .out_cap = (size_t)1 << 20,
	                       .timeout_ms = (int)scaled(20000) };
	ck_assert_int_eq(run("yes", &o, &r), 0);
	ck_assert(r.out_overflow && !r.timed_out);
	ck_assert_uint_eq(r.out_len, (size_t)1 << 20);
	ck_assert_int_eq(l.n, (1 << 20) / 2); /* "y\n" each */
	ck_assert_uint_eq(l.bytes, (size_t)1 << 20);
	proc_result_free(&r);
}
END_TEST

/* ------------------------------------------------------------------ watch_fd */

struct watch {
	int fd;
	int calls;
	int cancel_at;
};

static int watch_timer(void *arg)
{
	struct watch *w = arg;
	uint64_t ticks;
	ck_assert_int_eq(read(w->fd, &ticks, sizeof ticks), (ssize_t)sizeof ticks);
	return ++w->calls >= w->cancel_at;
}

START_TEST(run_watch_cancel)
{
	subreaper();
	struct proc_result r;
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	ck_assert_int_ge(tfd, 0);
	struct itimerspec its = { .it_interval = { 0, 50 * 1000000 }, .it_value = { 0, 50 * 1000000 } };
	ck_assert_int_eq(timerfd_settime(tfd, 0, &its, NULL), 0);
	struct watch w = { .fd = tfd, .cancel_at = 3 };
	struct proc_opts o = { .watch_fd = tfd, .on_watch = watch_timer, .arg = &w,
	                       .timeout_ms = (int)scaled(20000) };
	int64_t t0 = mono_ms();
	ck_assert_int_eq(run("sleep 100", &o, &r), -ECANCELED);
	int64_t took = mono_ms() - t0;
	ck_assert_int_eq(w.calls, 3);
	ck_assert_int_ge(took, 140);
	ck_assert_int_lt(took, scaled(5000));
	ck_assert(r.signaled && r.sig == SIGKILL && !r.timed_out);
	ck_assert(group_gone(r.pid));
	proc_result_free(&r);
	close(tfd);
}
END_TEST

static int watch_hup(void *arg)
{
	struct watch *w = arg;
	return ++w->calls >= w->cancel_at;
}

START_TEST(run_watch_hangup)
{
	struct proc_result r;
	int sp[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	close(sp[1]); /* the supervisor went away */
	/* on_watch saying "go on" on a hangup: the descriptor is dropped, not spun on. */
	struct watch w = { .fd = sp[0], .cancel_at = 1000 };
	struct proc_opts o = { .watch_fd = sp[0], .on_watch = watch_hup, .arg = &w };
	ck_assert_int_eq(run("sh -c 'sleep 0.2; echo ok'", &o, &r), 0);
	ck_assert_int_eq(w.calls, 1);
	ck_assert(r.exited && r.status == 0);
	ck_assert_str_eq(r.out, "ok\n");
	proc_result_free(&r);
	/* on_watch cancelling on the hangup. */
	struct watch w2 = { .fd = sp[0], .cancel_at = 1 };
	struct proc_opts o2 = { .watch_fd = sp[0], .on_watch = watch_hup, .arg = &w2 };
	ck_assert_int_eq(run("sleep 100", &o2, &r), -ECANCELED);
	ck_assert_int_eq(w2.calls, 1);
	ck_assert(r.signaled && r.sig == SIGKILL);
	proc_result_free(&r);
	close(sp[0]);
}
END_TEST

Suite *make_proc_suite(void)
{
	Suite *s = suite_create("proc");
	TCase *split = tcase_create("split");
	tcase_add_test(split, split_words);
	tcase_add_test(split, split_quotes);
	tcase_add_test(split, split_errors);
	tcase_add_test(split, split_many_words);
	suite_add_tcase(s, split);

	TCase *tc = tcase_create("run");
	tcase_set_timeout(tc, 60 * slow());
	tcase_add_test(tc, run_exit_status);
	tcase_add_test(tc, run_cannot_start);
	tcase_add_test(tc, run_invalid);
	tcase_add_test(tc, run_stdin_cat);
	tcase_add_test(tc, run_env);
	tcase_add_test(tc, run_env_minimal);
	tcase_add_test(tc, run_rlimits);
	tcase_add_test(tc, run_stdin_unread);
	tcase_add_test(tc, run_timeout_kills_group);
	tcase_add_test(tc, run_exit_kills_leftovers);
	tcase_add_test(tc, run_clean_child);
	tcase_add_test(tc, run_closed_stdio);
	tcase_add_test(tc, run_dies_with_caller);
	tcase_add_test(tc, run_huge_output_capped);
	tcase_add_test(tc, run_large_output_kept);
	tcase_add_test(tc, run_stderr_tail);
	tcase_add_test(tc, run_on_line);
	tcase_add_test(tc, run_on_line_yes_capped);
	tcase_add_test(tc, run_watch_cancel);
	tcase_add_test(tc, run_watch_hangup);
	suite_add_tcase(s, tc);
	return s;
}
