/* orphans.c: finding a worker of an earlier agentd in /proc (see orphans.h). */
#include "supervisor/orphans.h"

#include <dirent.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCAN_EVERY_MS 1000
#define KEEP_MAX 256 /* orphans remembered from one scan */

struct orphan {
	pid_t pid;
	int stopped;
	char conv[160];
};

static struct {
	struct orphan o[KEEP_MAX];
	size_t n;
	int64_t scanned_at; /* 0: never */
} S;

/* argv of pid (NUL-separated, n bytes) into buf; 0 or -1. */
static int cmdline(pid_t pid, char *buf, size_t cap, size_t *n)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, buf, cap - 1);
	close(fd);
	if (r <= 0)
		return -1;
	buf[r] = 0;
	*n = (size_t)r;
	return 0;
}

/* The value after flag in an argv of n bytes, or NULL. */
static const char *arg_after(const char *argv, size_t n, const char *flag)
{
	for (const char *a = argv; a < argv + n; a += strlen(a) + 1)
		if (!strcmp(a, flag) && a + strlen(a) + 1 < argv + n)
			return a + strlen(a) + 1;
	return NULL;
}

/* The conversation a worker's argv (n bytes) names, copied into out: its
 * --conversation, or, once it has set its title ("agentd-worker: CONV
 * STATE", agent/main.c; agentd-worker-dynamic's alike), the title's first
 * word. 0, or -1: not a worker's. */
static int worker_conv(const char *argv, size_t n, char *out, size_t cap)
{
	const char *c = arg_after(argv, n, "--conversation");
	size_t len = c ? strlen(c) : 0;
	const char *colon = strchr(argv, ':');
	if (!c && !strncmp(argv, "agentd-worker", 13) && colon && colon[1] == ' ' &&
	    !memchr(argv, ' ', (size_t)(colon - argv))) {
		c = colon + 2;
		len = strcspn(c, " ");
	}
	if (!c || !len || len >= cap)
		return -1;
	memcpy(out, c, len);
	out[len] = 0;
	return 0;
}

/* Whether pid has path (workers.lock of our data directory) open. */
static int has_open(pid_t pid, const char *path)
{
	char dir[32], to[PATH_MAX];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	struct dirent *e;
	size_t plen = strlen(path);
	int found = 0;
	while (!found && (e = readdir(d))) {
		ssize_t r = e->d_name[0] == '.' ? -1 : readlinkat(dirfd(d), e->d_name, to, sizeof to);
		found = r > 0 && (size_t)r == plen && !memcmp(to, path, plen);
	}
	closedir(d);
	return found;
}

/* Whether pid is stopped, and its parent: 0, or -1 when it is gone. */
static int proc_state(pid_t pid, int *is_stopped, pid_t *ppid)
{
	char path[64], st[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t r = fread(st, 1, sizeof st - 1, f);
	fclose(f);
	st[r] = 0;
	const char *paren = strrchr(st, ')'); /* the name may hold spaces and parentheses */
	int pp;
	if (!paren || sscanf(paren + 1, " %*c %d", &pp) != 1)
		return -1;
	*is_stopped = paren[2] == 'T' || paren[2] == 't';
	*ppid = (pid_t)pp;
	return 0;
}

static void scan(const char *data_dir)
{
	S.n = 0;
	char lock[PATH_MAX + 16], real[PATH_MAX];
	if (!realpath(data_dir, real))
		return;
	snprintf(lock, sizeof lock, "%s/workers.lock", real);
	DIR *d = opendir("/proc");
	if (!d)
		return;
	struct dirent *e;
	char argv[4096];
	size_t n;
	pid_t self = getpid();
	while ((e = readdir(d)) && S.n < KEEP_MAX) {
		pid_t pid = (pid_t)atoi(e->d_name);
		struct orphan *o = &S.o[S.n];
		int st;
		pid_t ppid;
		if (pid <= 0 || pid == self || cmdline(pid, argv, sizeof argv, &n) ||
		    worker_conv(argv, n, o->conv, sizeof o->conv) || proc_state(pid, &st, &ppid) || ppid == self ||
		    !has_open(pid, lock))
			continue; /* not a worker, one of ours, or another data directory's */
		o->pid = pid;
		o->stopped = st;
		S.n++;
	}
	closedir(d);
}

int orphan_find(const char *data_dir, const char *conv, int64_t now, pid_t *pid, int *is_stopped)
{
	if (!S.scanned_at || now - S.scanned_at >= SCAN_EVERY_MS) {
		scan(data_dir);
		S.scanned_at = now ? now : 1;
	}
	for (size_t i = 0; i < S.n; i++)
		if (!strcmp(S.o[i].conv, conv)) {
			*pid = S.o[i].pid;
			*is_stopped = S.o[i].stopped;
			return 1;
		}
	return 0;
}
