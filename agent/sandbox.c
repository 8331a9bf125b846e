/*
 * sandbox.c: agentd-sandbox, what a tool, MCP server or model command is
 * run inside (docs/tools.md, "The sandbox").
 *
 *   agentd-sandbox --exec-fd FD [--hide PATH]... -- COMMAND [ARG]...
 *
 * The worker execs it in the child it forked, after isolate_child (limits,
 * network, user), with the exec-status pipe at FD. It:
 *  1. enters a new mount namespace (a new user namespace too when it lacks
 *     CAP_SYS_ADMIN, mapping only its own uid and gid), makes every mount
 *     private, and covers each PATH: a directory with an empty read-only
 *     tmpfs of mode 000, anything else (a file, a socket) with /dev/null;
 *     a path that does not exist is skipped;
 *  2. enters a second user and mount namespace, in which those covers are
 *     locked: a process inside can neither unmount nor move them;
 *  3. takes a Landlock domain scoped to itself (ABI 6 or later): no signal
 *     and no connect to an abstract socket reaches a process outside, and
 *     no ptrace, so no /proc/PID/environ, mem or fd of agentd or its
 *     workers either; with no_new_privs;
 *  4. execs COMMAND, searching PATH.
 * Failure writes one int to FD and exits 127: ISOLATE_ESANDBOX - errno
 * (a namespace or mount refused), ISOLATE_ELANDLOCK - abi (Landlock too
 * old), or the errno of the last exec (FD is close-on-exec: nothing read
 * means the command runs). isolate_strerror says what each means.
 */
#include "agent/isolate.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* linux/landlock.h of older headers lacks the scoped field: the ABI's. */
struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)
#define LL_ABI_SCOPED 6

static int status_fd = -1;

_Noreturn static void fail(int code)
{
	while (write(status_fd, &code, sizeof code) < 0 && errno == EINTR)
		;
	_exit(127);
}

/* Cover path; 0 when covered or there is nothing to cover. */
static int hide(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return errno == ENOENT || errno == ENOTDIR || errno == EACCES ? 0 : -errno;
	if (S_ISDIR(st.st_mode))
		return mount("agentd-hidden", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			     "mode=000,size=4k") < 0 ? -errno : 0;
	return mount("/dev/null", path, NULL, MS_BIND, NULL) < 0 ? -errno : 0;
}

static void landlock(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	if (abi < LL_ABI_SCOPED)
		fail(ISOLATE_ELANDLOCK - (int)(abi < 0 ? 0 : abi));
	struct ll_ruleset_attr attr = { .scoped = LL_SCOPE_SIGNAL | LL_SCOPE_ABSTRACT_UNIX_SOCKET };
	int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (fd < 0)
		fail(ISOLATE_ESANDBOX - errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_landlock_restrict_self, fd, 0) < 0)
		fail(ISOLATE_ESANDBOX - errno);
	close(fd);
}

int main(int argc, char **argv)
{
	int i = 1;
	if (argc > 2 && !strcmp(argv[1], "--exec-fd"))
		status_fd = atoi(argv[2]), i = 3;
	if (status_fd < 0 || fcntl(status_fd, F_SETFD, FD_CLOEXEC) < 0) {
		fprintf(stderr, "usage: agentd-sandbox --exec-fd FD [--hide PATH]... -- COMMAND [ARG]...\n"
				"Runs COMMAND sandboxed; agentd-worker starts it, not people.\n");
		return 2;
	}
	pid_t parent = getppid();
	char cwd[4096];
	if (!getcwd(cwd, sizeof cwd)) /* removed, or too long: the root then, as under a cover */
		strcpy(cwd, "/");
	int e;
	if (unshare(CLONE_NEWNS) < 0) {
		if (errno != EPERM)
			fail(ISOLATE_ESANDBOX - errno);
		if ((e = isolate_own_userns(CLONE_NEWNS)))
			fail(ISOLATE_ESANDBOX + e);
	}
	/* Nothing mounted here may show in agentd's namespace. */
	if (mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail(ISOLATE_ESANDBOX - errno);
	for (; i + 1 < argc && !strcmp(argv[i], "--hide"); i += 2)
		if ((e = hide(argv[i + 1])))
			fail(ISOLATE_ESANDBOX + e);
	if (i >= argc || strcmp(argv[i], "--") || i + 1 >= argc)
		fail(ISOLATE_ESANDBOX - EINVAL);
	/* Mounts made in a namespace of a more privileged user namespace are
	 * locked in this one: the command cannot lift a cover. */
	if ((e = isolate_own_userns(CLONE_NEWNS)))
		fail(ISOLATE_ESANDBOX + e);
	/* The working directory as the new namespaces see it; under a cover
	 * it is gone: the root then. */
	if (chdir(cwd) < 0 && chdir("/") < 0)
		fail(ISOLATE_ESANDBOX - errno);
	landlock();
	/* A new user namespace cleared the pdeath signal: set it again, and
	 * see the worker did not die meanwhile. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		fail(ISOLATE_ESANDBOX - errno);
	if (getppid() != parent)
		_exit(127);
	execvp(argv[i + 1], argv + i + 1);
	fail(errno);
}
