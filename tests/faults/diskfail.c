/* diskfail: an LD_PRELOAD library that makes writes and flushes of one
 * data.mdb fail, for tests/proc/test_diskfail.py (docs/durability.md, "A
 * flush that fails").
 *
 * Environment: AGENTD_DISKFAIL=ERRNO:CALLS:FLAG, for example
 * "EIO:fdatasync,fsync:/tmp/x/fail". While the file FLAG exists, each call
 * named in CALLS (fdatasync, fsync, sync_file_range, write: every write,
 * pwrite and writev kind) on a descriptor of a file named data.mdb fails with
 * ERRNO (EIO or ENOSPC) instead of being made. Without the variable, or while
 * FLAG is missing, every call goes through. LMDB writes data.mdb only with
 * these calls (agentd maps it read-only: no msync to fail). Each failure is
 * counted in FLAG.count (one byte appended), so a test knows it happened.
 * AGENTD_DISKFAIL_THREAD=NAME[,NAME...] fails them only on threads of those names
 * (/proc/thread-self/comm: agentd names its flusher thread "flusher" and
 * its writer thread "writer"; a worker's is "agentd-worker").
 *
 * Not in sanitizer builds: ASan interposes the same calls. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { C_FDATASYNC = 1, C_FSYNC = 2, C_SFR = 4, C_WRITE = 8 };

static int conf_read, fail_errno, calls;
static char flag[4096], count_path[4200], threads[256];

static void conf(void)
{
	if (conf_read)
		return;
	conf_read = 1;
	const char *v = getenv("AGENTD_DISKFAIL");
	char buf[4200];
	if (!v || strlen(v) >= sizeof buf)
		return;
	strcpy(buf, v);
	char *err = buf, *list = strchr(err, ':'), *path = list ? strchr(list + 1, ':') : NULL;
	if (!path)
		return;
	*list++ = 0;
	*path++ = 0;
	fail_errno = !strcmp(err, "ENOSPC") ? ENOSPC : EIO;
	for (char *c = strtok(list, ","); c; c = strtok(NULL, ","))
		calls |= !strcmp(c, "fdatasync") ? C_FDATASYNC : !strcmp(c, "fsync") ? C_FSYNC
			 : !strcmp(c, "sync_file_range") ? C_SFR : !strcmp(c, "write") ? C_WRITE : 0;
	snprintf(flag, sizeof flag, "%s", path);
	snprintf(count_path, sizeof count_path, "%s.count", path);
	const char *t = getenv("AGENTD_DISKFAIL_THREAD");
	snprintf(threads, sizeof threads, ",%s,", t ? t : "");
}

/* 1 when the calling thread is one of those named (or none is). */
static int this_thread(void)
{
	if (!strcmp(threads, ",,"))
		return 1;
	char name[32] = "";
	int fd = open("/proc/thread-self/comm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, name, sizeof name - 1);
	close(fd);
	if (n <= 0)
		return 0;
	name[n] = 0;
	name[strcspn(name, "\n")] = 0;
	char key[40];
	snprintf(key, sizeof key, ",%s,", name);
	return strstr(threads, key) != NULL;
}

/* 1 when this call on fd is to fail now. */
static int failing(int fd, int call)
{
	conf();
	if (!(calls & call) || !flag[0] || access(flag, F_OK) != 0 || !this_thread())
		return 0;
	char link[64], target[4096];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof target - 1);
	if (n < 9)
		return 0;
	target[n] = 0;
	if (strcmp(target + n - 9, "/data.mdb"))
		return 0;
	int cfd = open(count_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (cfd >= 0) {
		ssize_t w = write(cfd, "x", 1); /* not data.mdb: goes through */
		(void)w;
		close(cfd);
	}
	errno = fail_errno;
	return 1;
}

#define REAL(name) static __typeof__(name) *real; if (!real) real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

int fdatasync(int fd)
{
	REAL(fdatasync);
	return failing(fd, C_FDATASYNC) ? -1 : real(fd);
}

int fsync(int fd)
{
	REAL(fsync);
	return failing(fd, C_FSYNC) ? -1 : real(fd);
}

int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
	REAL(sync_file_range);
	return failing(fd, C_SFR) ? -1 : real(fd, off, n, flags);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	REAL(write);
	return failing(fd, C_WRITE) ? -1 : real(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	REAL(pwrite);
	return failing(fd, C_WRITE) ? -1 : real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	REAL(pwrite64);
	return failing(fd, C_WRITE) ? -1 : real(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	REAL(writev);
	return failing(fd, C_WRITE) ? -1 : real(fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	REAL(pwritev);
	return failing(fd, C_WRITE) ? -1 : real(fd, iov, cnt, off);
}
