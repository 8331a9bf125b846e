/* spawn.c: starting agentd-worker (see spawn.h). */
#include "supervisor/spawn.h"
#include "ipc/ipc.h"

#include <bsd/unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* The child between fork and exec: only async-signal-safe calls. */
static void child_exec(int ipc, int errfd, char *const argv[])
{
	struct sigaction sa = { .sa_handler = SIG_DFL };
	sigset_t none;
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &sa, NULL); /* fails harmlessly for KILL, STOP and the RT ones glibc keeps */
	/* Put the two descriptors the worker keeps at 3 (IPC) and 4 (exec
	 * status, close-on-exec): first out of the way, then into place. */
	int hi_ipc = fcntl(ipc, F_DUPFD, 10);
	int hi_err = fcntl(errfd, F_DUPFD_CLOEXEC, 10);
	if (hi_ipc < 0 || hi_err < 0 || dup2(hi_ipc, 3) < 0 || dup3(hi_err, 4, O_CLOEXEC) < 0) {
		/* Out of descriptors (agentd at its limit): say so as an exec
		 * failure does, so agentd backs off and retries with the reason
		 * logged, instead of counting a crash of a worker that never ran. */
		int e = errno;
		ssize_t w = write(hi_err >= 0 ? hi_err : errfd, &e, sizeof e);
		(void)w;
		_exit(127);
	}
	closefrom(5);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execv(argv[0], argv);
	int e = errno;
	ssize_t n = write(4, &e, sizeof e);
	(void)n;
	_exit(127);
}

int spawn_start(char *const argv[], struct spawn *sp)
{
	int sv[2], ep[2], e;
	*sp = SPAWN_NONE;
	if ((e = ipc_pair(sv)) < 0)
		return e;
	if (pipe2(ep, O_CLOEXEC) < 0) {
		e = -errno;
		close(sv[0]);
		close(sv[1]);
		return e;
	}
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t pid = fork();
	if (pid == 0)
		child_exec(sv[1], ep[1], argv);
	e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(sv[1]);
	close(ep[1]);
	if (pid < 0) {
		close(sv[0]);
		close(ep[0]);
		return -e;
	}
	*sp = (struct spawn){ pid, sv[0], ep[0] };
	return 0;
}

int spawn_exec_wait(struct spawn *sp)
{
	/* Zero bytes: the exec succeeded (the pipe closed on exec). */
	int child_errno = 0;
	ssize_t n;
	do
		n = read(sp->ep, &child_errno, sizeof child_errno);
	while (n < 0 && errno == EINTR);
	close(sp->ep);
	sp->ep = -1;
	if (n > 0) {
		waitpid(sp->pid, NULL, 0);
		close(sp->ipc);
		*sp = SPAWN_NONE;
		return child_errno > 0 ? -child_errno : -EIO;
	}
	fcntl(sp->ipc, F_SETFL, O_NONBLOCK);
	return 0;
}

void spawn_abort(struct spawn *sp)
{
	if (!sp->pid)
		return;
	kill(sp->pid, SIGKILL);
	waitpid(sp->pid, NULL, 0);
	close(sp->ipc);
	if (sp->ep >= 0)
		close(sp->ep);
	*sp = SPAWN_NONE;
}
