/* proc.c: running model and tool commands (see proc.h). */
#include "agent/proc.h"
#include "agent/isolate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CHUNK 65536    /* one read from a pipe */
#define DRAIN_MS 500   /* after the child exited or was killed: how long to wait for the pipes' EOF */
#define NOPIDFD_TICK 10 /* without pidfd_open: how often to look for the child's exit */

/* ------------------------------------------------------------------- child */

/* Between fork and exec: only async-signal-safe calls. On failure the errno
 * goes to the parent through exfd (close-on-exec: EOF there means exec worked). */
_Noreturn static void child_exec(char *const argv[], char **envp, int fds[4], pid_t parent,
				 const struct isolate_cfg *iso, int sandboxed)
{
	int e;
	/* Own process group, so one kill(-pgid) reaches everything the command
	 * forks. The parent does the same, whichever runs first. */
	if (setpgid(0, 0) < 0)
		goto fail;
	/* Die with the worker; and if it died before prctl, nobody would ever
	 * send that signal, so check the parent is still ours. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		goto fail;
	if (getppid() != parent)
		_exit(127);
	/* Lift any of our pipe ends that sits on 0..2 above them, so that the
	 * dup2s below cannot overwrite one another (the caller may run with 0, 1
	 * or 2 closed, and pipe2 then hands out those numbers). */
	for (int i = 0; i < 4; i++)
		if (fds[i] < 3 && (fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3)) < 0)
			goto fail;
	for (int i = 0; i < 3; i++) /* dup2 leaves the copy without FD_CLOEXEC */
		if (dup2(fds[i], i) < 0)
			goto fail;
	/* Keep only 0, 1, 2 and the exec-error pipe (itself close-on-exec). */
	if (fds[3] > 3 && close_range(3, (unsigned)fds[3] - 1, 0) < 0)
		for (int fd = 3; fd < fds[3]; fd++)
			close(fd);
	closefrom(fds[3] + 1);
	/* agentd-sandbox reports through the pipe too, at 3 (--exec-fd 3),
	 * which it keeps open across its own setup. */
	if (sandboxed) {
		if (fds[3] != 3) {
			if (dup2(fds[3], 3) < 0)
				goto fail;
			close(fds[3]);
			fds[3] = 3;
		} else if (fcntl(3, F_SETFD, 0) < 0) {
			goto fail;
		}
	}
	/* Limits and credentials once only our descriptors are left (a low
	 * rlimit_nofile must not meet the worker's). A credential change
	 * clears the pdeath signal: set it again, and check again that the
	 * worker did not die in between. */
	if ((e = isolate_child(iso)) < 0) {
		errno = -e;
		goto fail;
	}
	if (iso && (iso->uid >= 0 || iso->gid >= 0)) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
			goto fail;
		if (getppid() != parent)
			_exit(127);
	}
	/* Handlers and ignored signals would survive into the command (SIG_IGN
	 * does across exec: a tool with SIGPIPE ignored never stops on a closed
	 * pipe), and so would the worker's mask (it blocks what its signalfd
	 * reads): give the command a fresh start, unblocking last. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)sigaction(sig, &sa, NULL); /* EINVAL for libc's reserved ones */
	sigset_t none;
	sigemptyset(&none);
	if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
		goto fail;
	execvpe(argv[0], argv, envp);
fail:
	e = errno;
	while (write(fds[3], &e, sizeof e) < 0 && errno == EINTR)
		;
	_exit(127);
}

/* ------------------------------------------------------------------ parent */

struct run {
	const struct proc_opts *o;
	struct proc_result *r;
	size_t out_cap, err_max;       /* effective limits */
	size_t out_alloc, err_alloc;   /* allocated sizes of r->out, r->err */
	size_t in_off;                 /* input bytes written so far */
	size_t line_start;             /* offset in out of the line being received */
	pid_t pid;
	int pidfd;                     /* -1: no pidfd_open, poll waitid instead */
	int in_fd, out_fd, err_fd, watch_fd;
	int exited;                    /* the child is a zombie: seen, not yet reaped */
	int stopped;                   /* we killed the group for a reason: no more callbacks */
	int ret;                       /* what proc_run returns; the first reason wins */
	int64_t deadline, drain_deadline; /* monotonic ms; 0: none */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		int e = errno;
		close(*fd);
		errno = e;
		*fd = -1;
	}
}

/* Grow *p geometrically to hold need bytes, never past max (need <= max). */
static int buf_reserve(char **p, size_t *alloc, size_t need, size_t max)
{
	if (need <= *alloc)
		return 0;
	size_t n = *alloc ? *alloc : 4096;
	while (n < need)
		n = n > max / 2 ? max : n * 2;
	if (n > max)
		n = max;
	char *q = realloc(*p, n);
	if (!q)
		return -ENOMEM;
	*p = q;
	*alloc = n;
	return 0;
}

static void set_drain(struct run *R)
{
	if (!R->drain_deadline)
		R->drain_deadline = now_ms() + DRAIN_MS;
}

/* Kill the whole group for a reason (timeout, overflow, stop, cancel, error).
 * Safe: the child is not reaped yet, so its pid still names our group. */
static void run_stop(struct run *R, int ret)
{
	if (!R->ret)
		R->ret = ret;
	if (R->stopped)
		return;
	R->stopped = 1;
	kill(-R->pid, SIGKILL);
	close_fd(&R->in_fd);
	set_drain(R);
}

/* The child exited (it is a zombie, holding the group id): kill what it left
 * in its group, so grandchildren neither linger nor hold our pipes open. */
static void check_exit(struct run *R)
{
	siginfo_t si;
	if (R->exited)
		return;
	si.si_pid = 0;
	if (waitid(P_PID, (id_t)R->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == R->pid) {
		R->exited = 1;
		kill(-R->pid, SIGKILL);
		close_fd(&R->in_fd);
		set_drain(R);
	}
}

static void deliver_lines(struct run *R, size_t from)
{
	char *out = R->r->out;
	const struct proc_opts *o = R->o;
	while (!R->stopped && from < R->r->out_len) {
		char *nl = memchr(out + from, '\n', R->r->out_len - from);
		if (!nl)
			return;
		size_t end = (size_t)(nl - out);
		*nl = 0; /* the line is NUL-terminated during the call */
		int rc = o->on_line(o->arg, out + R->line_start, end - R->line_start);
		*nl = '\n';
		R->line_start = from = end + 1;
		if (rc)
			run_stop(R, rc);
	}
}

static void stdout_take(struct run *R, const char *p, size_t n)
{
	struct proc_result *r = R->r;
	if (r->out_overflow)
		return;
	size_t keep = n;
	if (keep > R->out_cap - r->out_len) {
		keep = R->out_cap - r->out_len;
		r->out_overflow = 1;
	}
	if (buf_reserve(&r->out, &R->out_alloc, r->out_len + keep + 1, R->out_cap + 1) < 0) {
		run_stop(R, -ENOMEM);
		return;
	}
	memcpy(r->out + r->out_len, p, keep);
	size_t from = r->out_len;
	r->out_len += keep;
	r->out[r->out_len] = 0;
	if (R->o->on_line)
		deliver_lines(R, from);
	if (r->out_overflow)
		run_stop(R, 0);
}

/* stdout ended: a last line without '\n' is a line too. */
static void stdout_eof(struct run *R)
{
	struct proc_result *r = R->r;
	if (!R->o->on_line || R->stopped || r->out_overflow || R->line_start >= r->out_len)
		return;
	int rc = R->o->on_line(R->o->arg, r->out + R->line_start, r->out_len - R->line_start);
	R->line_start = r->out_len;
	if (rc)
		run_stop(R, rc);
}

/* Keep the last err_max bytes in a buffer of 2 * err_max: a memmove of
 * err_max bytes at most once per err_max bytes received. */
static void stderr_take(struct run *R, const char *p, size_t n)
{
	struct proc_result *r = R->r;
	size_t max = R->err_max;
	if (n >= max) {
		p += n - max;
		n = max;
		r->err_len = 0;
	} else if (r->err_len + n > 2 * max) { /* then err_len > max */
		memmove(r->err, r->err + r->err_len - max, max);
		r->err_len = max;
	}
	if (buf_reserve(&r->err, &R->err_alloc, r->err_len + n + 1, 2 * max + 1) < 0) {
		run_stop(R, -ENOMEM);
		return;
	}
	memcpy(r->err + r->err_len, p, n);
	r->err_len += n;
}

static void stderr_finish(struct run *R)
{
	struct proc_result *r = R->r;
	if (r->err_len > R->err_max) {
		memmove(r->err, r->err + r->err_len - R->err_max, R->err_max);
		r->err_len = R->err_max;
	}
	r->err[r->err_len] = 0;
}

/* One read per wakeup and descriptor, so a chatty stream cannot starve the
 * others (nor the deadline). */
static void pipe_read(struct run *R, int *fd, int is_out)
{
	char chunk[CHUNK];
	ssize_t n = read(*fd, chunk, sizeof chunk);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close_fd(fd);
		if (is_out)
			stdout_eof(R);
		return;
	}
	if (is_out)
		stdout_take(R, chunk, (size_t)n);
	else
		stderr_take(R, chunk, (size_t)n);
}

static void stdin_write(struct run *R)
{
	const struct proc_opts *o = R->o;
	ssize_t n = write(R->in_fd, (const char *)o->input + R->in_off, o->input_len - R->in_off);
	if (n < 0) {
		/* EPIPE: the child closed stdin or exited; it did not want the rest. */
		if (errno != EAGAIN && errno != EINTR)
			close_fd(&R->in_fd);
		return;
	}
	R->in_off += (size_t)n;
	if (R->in_off == o->input_len)
		close_fd(&R->in_fd);
}

static void on_watch(struct run *R, short revents)
{
	if (R->o->on_watch(R->o->arg))
		run_stop(R, -ECANCELED);
	else if (revents & (POLLHUP | POLLERR | POLLNVAL))
		R->watch_fd = -1; /* it will stay so: stop polling it */
}

static int poll_timeout(const struct run *R)
{
	int64_t now = now_ms(), t = INT64_MAX;
	if (R->deadline && !R->stopped && !R->exited && R->deadline - now < t)
		t = R->deadline - now;
	if (R->drain_deadline && R->drain_deadline - now < t)
		t = R->drain_deadline - now;
	if (R->pidfd < 0 && !R->exited && NOPIDFD_TICK < t)
		t = NOPIDFD_TICK;
	if (t == INT64_MAX)
		return -1;
	return t < 0 ? 0 : t > 1000000 ? 1000000 : (int)t;
}

enum { PF_IN, PF_OUT, PF_ERR, PF_WATCH, PF_PID, PF_N };

/* Until the child exited and both pipes ended, or the drain time is up. */
static void run_loop(struct run *R)
{
	struct pollfd pf[PF_N];
	for (;;) {
		if (R->exited && R->out_fd < 0 && R->err_fd < 0)
			return;
		int64_t now = now_ms();
		if (R->drain_deadline && now >= R->drain_deadline)
			return;
		if (R->deadline && !R->stopped && !R->exited && now >= R->deadline) {
			R->r->timed_out = 1;
			run_stop(R, 0);
			continue;
		}
		pf[PF_IN] = (struct pollfd){ .fd = R->in_fd, .events = POLLOUT };
		pf[PF_OUT] = (struct pollfd){ .fd = R->out_fd, .events = POLLIN };
		pf[PF_ERR] = (struct pollfd){ .fd = R->err_fd, .events = POLLIN };
		pf[PF_WATCH] = (struct pollfd){ .fd = R->stopped ? -1 : R->watch_fd, .events = POLLIN };
		pf[PF_PID] = (struct pollfd){ .fd = R->exited ? -1 : R->pidfd, .events = POLLIN };
		int n = poll(pf, PF_N, poll_timeout(R));
		if (n < 0) {
			if (errno != EINTR)
				run_stop(R, -errno);
			continue;
		}
		if (pf[PF_IN].revents && R->in_fd >= 0)
			stdin_write(R);
		if (pf[PF_OUT].revents && R->out_fd >= 0)
			pipe_read(R, &R->out_fd, 1);
		if (pf[PF_ERR].revents && R->err_fd >= 0)
			pipe_read(R, &R->err_fd, 0);
		if (pf[PF_WATCH].revents && !R->stopped && R->watch_fd >= 0)
			on_watch(R, pf[PF_WATCH].revents);
		if (R->pidfd < 0 || pf[PF_PID].revents)
			check_exit(R);
	}
}

/* Wait for the child to be a zombie, kill its group while the zombie still
 * holds the group id (after the reap that id may name someone else), reap. */
static void run_reap(struct run *R)
{
	siginfo_t si;
	int st;
	while (waitid(P_PID, (id_t)R->pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
		;
	kill(-R->pid, SIGKILL);
	while (waitpid(R->pid, &st, 0) < 0) {
		if (errno != EINTR)
			return; /* ECHILD: someone broke the caveats and reaped it */
	}
	if (WIFEXITED(st)) {
		R->r->exited = 1;
		R->r->status = WEXITSTATUS(st);
	} else if (WIFSIGNALED(st)) {
		R->r->signaled = 1;
		R->r->sig = WTERMSIG(st);
	}
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

/* pipes: [0] stdin, [1] stdout, [2] stderr, [3] exec error; [i][0] read end. */
static int make_pipes(int p[4][2])
{
	for (int i = 0; i < 4; i++)
		if (pipe2(p[i], O_CLOEXEC) < 0)
			return -errno;
	/* Our ends only: the child's must block like any stdio. */
	if (set_nonblock(p[0][1]) < 0 || set_nonblock(p[1][0]) < 0 || set_nonblock(p[2][0]) < 0)
		return -errno;
	return 0;
}

/* argv inside agentd-sandbox (proc.h, struct proc_sandbox) into *out, or
 * NULL when it runs as it is. Free the array only. 0 or -ENOMEM. */
static int sandbox_argv(char *const argv[], const struct proc_sandbox *sb, const struct isolate_cfg *iso,
			char ***out)
{
	size_t nh = 0, ni = 0, na = 0;
	*out = NULL;
	if (!sb || (iso && iso->sandbox_off))
		return 0;
	for (; sb->hide && sb->hide[nh]; nh++)
		;
	for (; iso && iso->hide && iso->hide[ni]; ni++)
		;
	for (; argv[na]; na++)
		;
	char **v = calloc(4 + 2 * (nh + ni) + na + 1, sizeof *v);
	if (!v)
		return -ENOMEM;
	size_t k = 0;
	v[k++] = (char *)sb->program;
	v[k++] = "--exec-fd";
	v[k++] = "3";
	for (size_t i = 0; i < nh + ni; i++) {
		v[k++] = "--hide";
		v[k++] = i < nh ? (char *)sb->hide[i] : iso->hide[i - nh];
	}
	v[k++] = "--";
	memcpy(v + k, argv, na * sizeof *v);
	*out = v;
	return 0;
}

/* Fork and exec; on success *pid is a running command and its group, *pidfd
 * a pidfd for it or -1. Closes the child's ends of the pipes. */
static int spawn_child(char *const argv[], char **envp, int p[4][2], const struct isolate_cfg *iso,
		       const struct proc_sandbox *sb, pid_t *pidp, int *pidfd)
{
	int fds[4] = { p[0][0], p[1][1], p[2][1], p[3][1] };
	char **sv;
	int e = sandbox_argv(argv, sb, iso, &sv);
	if (e < 0)
		return e;
	sigset_t all, saved;
	pid_t parent = getpid();
	*pidfd = -1;
	/* Block every signal across fork: a handler of the worker must not run in
	 * the child (it would act on a copy of the worker's state), and a signal
	 * arriving before the child reset its dispositions stays pending until
	 * they are default. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	pid_t pid = fork();
	if (pid == 0)
		child_exec(sv ? sv : argv, envp, fds, parent, iso, sv != NULL);
	e = errno;
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	free(sv);
	if (pid < 0)
		return -e;
	*pidp = pid;
	(void)setpgid(pid, pid); /* EACCES once it exec'd: it did so itself */
	for (int i = 0; i < 4; i++)
		close_fd(&p[i][i == 0 ? 0 : 1]);
	int err = 0;
	ssize_t n;
	while ((n = read(p[3][0], &err, sizeof err)) < 0 && errno == EINTR)
		;
	if (n != 0) { /* exec failed: the child wrote errno (agentd-sandbox: its code) and exits 127 */
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		return n != (ssize_t)sizeof err || err == 0 ? -EIO : err > 0 ? -err : err;
	}
#ifdef SYS_pidfd_open
	*pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* always close-on-exec */
#endif
	return 0;
}

static int spawn(struct run *R, char *const argv[], char **envp, int p[4][2])
{
	pid_t pid = 0;
	int e = spawn_child(argv, envp, p, R->o->iso, R->o->sandbox, &pid, &R->pidfd);
	R->pid = R->r->pid = pid;
	if (e < 0)
		return e;
	if (R->o->on_start)
		R->o->on_start(R->o->arg, pid);
	return 0;
}

static int run_start(struct run *R, char *const argv[])
{
	const struct proc_opts *o = R->o;
	int p[4][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 }, { -1, -1 } };
	char **envp = NULL;
	int err;
	if ((err = isolate_env(o->iso, o->env_add, &envp)) < 0)
		return err;
	if ((err = make_pipes(p)) < 0 || (err = spawn(R, argv, envp, p)) < 0)
		goto fail;
	free(envp);
	close_fd(&p[3][0]);
	R->in_fd = p[0][1];
	R->out_fd = p[1][0];
	R->err_fd = p[2][0];
	if (o->input_len == 0)
		close_fd(&R->in_fd);
	return 0;
fail:
	free(envp);
	for (int i = 0; i < 4; i++) {
		close_fd(&p[i][0]);
		close_fd(&p[i][1]);
	}
	return err;
}

static int run(char *const argv[], const struct proc_opts *o, struct proc_result *r)
{
	struct run R = {
		.o = o, .r = r, .pidfd = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1,
		.watch_fd = o->on_watch ? o->watch_fd : -1,
		.out_cap = o->out_cap ? o->out_cap : PROC_OUT_CAP_DEFAULT,
		.err_max = o->err_tail ? o->err_tail : PROC_ERR_TAIL_DEFAULT,
	};
	int64_t start = now_ms();
	if (buf_reserve(&r->out, &R.out_alloc, 1, R.out_cap + 1) < 0 ||
	    buf_reserve(&r->err, &R.err_alloc, 1, 2 * R.err_max + 1) < 0) {
		proc_result_free(r);
		return -ENOMEM;
	}
	r->out[0] = r->err[0] = 0;
	int err = run_start(&R, argv);
	if (err < 0) {
		r->elapsed_ms = now_ms() - start;
		return err;
	}
	if (o->timeout_ms > 0)
		R.deadline = start + o->timeout_ms;
	run_loop(&R);
	run_reap(&R);
	close_fd(&R.in_fd);
	close_fd(&R.out_fd);
	close_fd(&R.err_fd);
	close_fd(&R.pidfd);
	stderr_finish(&R);
	r->elapsed_ms = now_ms() - start;
	return R.ret;
}

int proc_run(char *const argv[], const struct proc_opts *o, struct proc_result *r)
{
	static const struct proc_opts defaults = { .watch_fd = -1 };
	if (!r)
		return -EINVAL;
	memset(r, 0, sizeof *r);
	if (!o)
		o = &defaults;
	if (!argv || !argv[0] || (!o->input && o->input_len) ||
	    o->out_cap > SIZE_MAX / 2 || o->err_tail > SIZE_MAX / 4)
		return -EINVAL;
	/* Writing to a stdin the child closed raises SIGPIPE, which would kill a
	 * caller that does not ignore it. Block it for the call, and consume the
	 * one our writes raised (a blocked SIGPIPE is left pending on the thread)
	 * before restoring the caller's mask. */
	sigset_t pipe_set, saved, pending;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &saved);
	sigpending(&pending);
	int was_pending = sigismember(&pending, SIGPIPE);
	int rc = run(argv, o, r);
	sigpending(&pending);
	if (!was_pending && sigismember(&pending, SIGPIPE)) {
		struct timespec zero = { 0, 0 };
		int e = errno;
		(void)sigtimedwait(&pipe_set, NULL, &zero);
		errno = e;
	}
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	return rc;
}

void proc_result_free(struct proc_result *r)
{
	if (!r)
		return;
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof *r);
}

int proc_spawn(char *const argv[], const struct proc_opts *o, struct proc_child *c)
{
	int p[4][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 }, { -1, -1 } };
	char **envp = NULL;
	int err;
	if (!c)
		return -EINVAL;
	*c = (struct proc_child){ .in_fd = -1, .out_fd = -1, .err_fd = -1, .pidfd = -1 };
	if (!argv || !argv[0] || !o)
		return -EINVAL;
	if ((err = isolate_env(o->iso, o->env_add, &envp)) < 0)
		return err;
	if ((err = make_pipes(p)) < 0 || (err = spawn_child(argv, envp, p, o->iso, o->sandbox, &c->pid, &c->pidfd)) < 0) {
		c->pid = 0;
		goto fail;
	}
	free(envp);
	close_fd(&p[3][0]);
	c->in_fd = p[0][1];
	c->out_fd = p[1][0];
	c->err_fd = p[2][0];
	return 0;
fail:
	free(envp);
	for (int i = 0; i < 4; i++) {
		close_fd(&p[i][0]);
		close_fd(&p[i][1]);
	}
	return err;
}

int proc_child_exited(const struct proc_child *c, int *exited, int *status, int *signaled, int *sig)
{
	siginfo_t si;
	si.si_pid = 0;
	if (!c || c->pid <= 0)
		return -EINVAL;
	if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return -errno;
	if (si.si_pid != c->pid)
		return 0;
	*exited = si.si_code == CLD_EXITED;
	*signaled = !*exited;
	*status = *exited ? si.si_status : 0;
	*sig = *exited ? 0 : si.si_status;
	return 1;
}

void proc_child_end(struct proc_child *c)
{
	if (!c || c->pid <= 0)
		return;
	close_fd(&c->in_fd);
	close_fd(&c->out_fd);
	close_fd(&c->err_fd);
	siginfo_t si;
	/* The group is killed while the child's pid still holds its id
	 * (a zombie or alive): after the reap the id may be someone else's. */
	kill(-c->pid, SIGKILL);
	while (waitid(P_PID, (id_t)c->pid, &si, WEXITED) < 0 && errno == EINTR)
		;
	close_fd(&c->pidfd);
	c->pid = 0;
}

const char *proc_beside_self(const char *name, char *buf, size_t n)
{
	size_t nl = strlen(name);
	ssize_t len = n > nl + 2 ? readlink("/proc/self/exe", buf, n - nl - 1) : -1;
	char *slash = len > 0 ? memrchr(buf, '/', (size_t)len) : NULL;
	if (!slash)
		return name;
	memcpy(slash + 1, name, nl + 1);
	return buf;
}
