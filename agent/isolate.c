/* isolate.c: environment, limits and user of the processes the worker runs (see isolate.h). */
#include "agent/isolate.h"

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

extern char **environ;

static size_t key_len(const char *s)
{
	const char *eq = strchr(s, '=');
	return eq ? (size_t)(eq - s) : strlen(s);
}

static int same_key(const char *a, const char *b)
{
	size_t n = key_len(a);
	return n == key_len(b) && !memcmp(a, b, n);
}

/* The worker's "KEY=VALUE" for key (a bare name or "KEY=..."), or NULL. */
static char *worker_var(const char *key)
{
	for (size_t i = 0; environ && environ[i]; i++)
		if (same_key(environ[i], key) && strchr(environ[i], '='))
			return environ[i];
	return NULL;
}

/* PATH, HOME and LANG: what a program expects to find, none of them a
 * secret. Not AGENTD_*: agentd's own settings (AGENTD_STORE, a store's
 * connection string, among them) are the worker's, not its children's;
 * the two a child is owed come from the caller (add). */
static int base_var(const char *s)
{
	static const char *const keep[] = { "PATH=", "HOME=", "LANG=" };
	for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
		if (!strncmp(s, keep[i], strlen(keep[i])))
			return 1;
	return 0;
}

/* Put s into e (n used), replacing a variable of the same name. */
static void put(char **e, size_t *n, char *s)
{
	for (size_t i = 0; i < *n; i++)
		if (same_key(e[i], s)) {
			e[i] = s;
			return;
		}
	e[(*n)++] = s;
}

int isolate_env(const struct isolate_cfg *iso, const char *const *add, char ***envp)
{
	size_t ne = 0, ni = 0, na = 0, n = 0;
	*envp = NULL;
	for (; add && add[na]; na++)
		if (!strchr(add[na], '=') || add[na][0] == '=')
			return -EINVAL;
	for (; environ && environ[ne]; ne++)
		;
	for (; iso && iso->env && iso->env[ni]; ni++)
		;
	char **e = calloc(ne + ni + na + 2, sizeof *e);
	if (!e)
		return -ENOMEM;
	for (size_t i = 0; i < ne; i++)
		if (base_var(environ[i]))
			put(e, &n, environ[i]);
	if (!worker_var("PATH"))
		put(e, &n, "PATH=" ISOLATE_PATH_DEFAULT);
	for (size_t i = 0; i < ni; i++) {
		char *s = iso->env[i];
		if (strchr(s, '='))
			put(e, &n, s);
		else if ((s = worker_var(s)))
			put(e, &n, s); /* allowed but unset: stays unset */
	}
	for (size_t i = 0; i < na; i++)
		put(e, &n, (char *)add[i]);
	*envp = e;
	return 0;
}

static int limit(int resource, rlim_t soft, rlim_t hard)
{
	struct rlimit rl;
	if (getrlimit(resource, &rl) < 0)
		return -errno;
	/* Never above what the worker has: raising the hard limit needs
	 * privileges, and lowering is what we are here for. */
	if (rl.rlim_max != RLIM_INFINITY && hard > rl.rlim_max)
		hard = rl.rlim_max;
	if (soft > hard)
		soft = hard;
	rlim_t old_max = rl.rlim_max;
	rl.rlim_cur = soft;
	rl.rlim_max = hard;
	if (setrlimit(resource, &rl) == 0)
		return 0;
	/* Lowering a hard limit needs no privilege: this is valgrind (whose
	 * children run under it until exec), which refuses any change of
	 * RLIMIT_NOFILE's hard limit and keeps the soft one to itself. Run
	 * the command anyway: under valgrind it goes without that limit. */
	if (errno != EPERM)
		return -errno;
	rl.rlim_max = old_max;
	return setrlimit(resource, &rl) < 0 ? -errno : 0;
}

/* Write s to path, whole; 0 or -errno. For the child: system calls only. */
static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t n = strlen(s);
	ssize_t w = write(fd, s, n);
	int e = w < 0 ? -errno : (size_t)w != n ? -EIO : 0;
	close(fd);
	return e;
}

/* "ID ID 1\n" into buf (24 bytes): one's own id mapped to itself. No
 * snprintf: it is not async-signal-safe. */
static void id_map(char *buf, unsigned long id)
{
	char d[24];
	int n = 0;
	do
		d[n++] = (char)('0' + id % 10);
	while ((id /= 10) && n < 20);
	char *p = buf;
	for (int k = 0; k < 2; k++) {
		for (int i = n - 1; i >= 0; i--)
			*p++ = d[i];
		*p++ = ' ';
	}
	memcpy(p, "1\n", 3);
}

/* network = none: a new network namespace, with nothing in it but a
 * loopback that is down. With CAP_SYS_ADMIN (agentd as root) directly;
 * else inside a new user namespace in which the process keeps its own uid
 * and gid (and which it may not add groups to). ISOLATE_ENETNS - errno
 * when the kernel refuses both. */
static int no_network(const struct isolate_cfg *iso)
{
	if (unshare(CLONE_NEWNET) == 0)
		return 0;
	if (errno != EPERM)
		return ISOLATE_ENETNS - errno;
	/* Not root: a user to drop to would fail anyway (and could not be
	 * mapped): the caller's clear error for that. */
	if (iso->uid >= 0 || iso->gid >= 0)
		return -EPERM;
	int e = isolate_own_userns(CLONE_NEWNET);
	return e ? ISOLATE_ENETNS + e : 0;
}

int isolate_own_userns(int flags)
{
	/* The ids before the unshare: in the new namespace they read as the
	 * overflow id until the map is written. */
	char um[24 * 2], gm[24 * 2];
	id_map(um, (unsigned long)geteuid());
	id_map(gm, (unsigned long)getegid());
	int e;
	if (unshare(CLONE_NEWUSER | flags) < 0)
		return -errno;
	if ((e = write_file("/proc/self/setgroups", "deny")) || (e = write_file("/proc/self/uid_map", um)) ||
	    (e = write_file("/proc/self/gid_map", gm)))
		return e;
	return 0;
}

int isolate_strerror(int rc, char *buf, size_t len)
{
	if (ISOLATE_IS(rc, ISOLATE_ENETNS))
		snprintf(buf, len, "cannot make its network namespace (network = none): %s", strerror(ISOLATE_ENETNS - rc));
	else if (ISOLATE_IS(rc, ISOLATE_ESANDBOX))
		snprintf(buf, len, "cannot make its sandbox (user and mount namespaces): %s",
			 strerror(ISOLATE_ESANDBOX - rc));
	else if (ISOLATE_IS(rc, ISOLATE_ELANDLOCK))
		snprintf(buf, len, "cannot sandbox it: this kernel's Landlock (ABI %d) cannot keep it from signalling "
			 "agentd (ABI 6, Linux 6.12, is needed), set sandbox = no to run it unsandboxed",
			 ISOLATE_ELANDLOCK - rc);
	else
		snprintf(buf, len, "%s", strerror(-rc));
	return 0;
}

int isolate_child(const struct isolate_cfg *iso)
{
	int e;
	if (!iso)
		return 0;
	if (iso->rlimit_as && (e = limit(RLIMIT_AS, iso->rlimit_as, iso->rlimit_as)))
		return e;
	/* SIGXCPU at the soft limit (a program may catch it and finish up),
	 * SIGKILL a second later at the hard one. */
	if (iso->rlimit_cpu && (e = limit(RLIMIT_CPU, (rlim_t)iso->rlimit_cpu, (rlim_t)iso->rlimit_cpu + 1)))
		return e;
	if (iso->rlimit_nofile && (e = limit(RLIMIT_NOFILE, (rlim_t)iso->rlimit_nofile, (rlim_t)iso->rlimit_nofile)))
		return e;
	if (iso->network_none && (e = no_network(iso)))
		return e;
	if (iso->gid >= 0) {
		gid_t g = (gid_t)iso->gid;
		/* Drop root's supplementary groups first: they would survive setgid. */
		if (setgroups(1, &g) < 0 || setgid(g) < 0)
			return -errno;
	}
	if (iso->uid >= 0 && setuid((uid_t)iso->uid) < 0)
		return -errno;
	return 0;
}

int isolate_explain(const struct isolate_cfg *iso, int exited, int status, int signaled, int sig, char *buf,
		    size_t len)
{
	if (!iso)
		return 0;
	if (signaled && (sig == SIGXCPU || sig == SIGKILL) && iso->rlimit_cpu) {
		snprintf(buf, len, "killed at its CPU time limit (rlimit_cpu = %ld s)", iso->rlimit_cpu);
		return 1;
	}
	if (iso->rlimit_as && ((exited && status != 0) || (signaled && (sig == SIGSEGV || sig == SIGABRT ||
									 sig == SIGBUS)))) {
		snprintf(buf, len, "failed under its address space limit (rlimit_as = %zu bytes): an allocation "
			 "beyond it fails", iso->rlimit_as);
		return 1;
	}
	if (iso->rlimit_nofile && exited && status != 0) {
		snprintf(buf, len, "failed under its open file limit (rlimit_nofile = %ld)", iso->rlimit_nofile);
		return 1;
	}
	return 0;
}
