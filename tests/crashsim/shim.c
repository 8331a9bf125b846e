/* crashsim shim: an LD_PRELOAD library that records every write to and every
 * flush of one data.mdb, for the power-loss simulator (tests/crashsim/,
 * docs/durability.md).
 *
 * Environment: AGENTD_CRASHSIM_TRACE=FILE (the trace; the written bytes go to
 * FILE.data) and AGENTD_CRASHSIM_DIR=DIR (the data directory whose data.mdb is
 * traced). Without both the shim does nothing but call through.
 *
 * The trace is a sequence of records of exactly REC bytes (text, space
 * separated, padded, ending in '\n'), appended with O_APPEND, one write() per
 * record, under an flock() of the trace, so several processes (agentd, its
 * workers, the test's client) append at once and a record's sequence number
 * is its position in the file. Records:
 *
 *   SEQ WB PID FD OFF LEN DATAOFF HASH DSYNC   a write begins: LEN bytes at OFF,
 *                                             copied to FILE.data at DATAOFF,
 *                                             FNV-1a 64 HASH; DSYNC 1 when the
 *                                             descriptor was opened O_DSYNC
 *   SEQ WE PID REF RET                         the write begun at REF returned RET
 *   SEQ FB PID KIND SCOPE                      a flush begins (KIND fdatasync,
 *                                             fsync, msync, sync, syncfs,
 *                                             sync_file_range; SCOPE data or all)
 *   SEQ FE PID REF RET                         the flush begun at REF returned RET
 *   SEQ OP PID FD FLAGS                        data.mdb opened (informational)
 *   SEQ XX PID WHAT                            something the simulator cannot
 *                                             model (a writable mapping of the
 *                                             file): the replayer refuses the trace
 *   SEQ ACK PID KIND CONV SEQ TYPE EVENT_ID HASH  written by the test's client after a reply
 *   SEQ READY PID                              written by the test's client once agentd answered
 *
 * A write's begin record is appended before the system call and its end
 * record after it returns, before control goes back to the caller: whatever
 * the caller (or another process told by it) does next comes later in the
 * trace. A flush covers the writes whose end record precedes its begin
 * record; it is complete at its end record.
 *
 * lock.mdb is not traced: LMDB never flushes it, and the first process that
 * opens an environment nobody else has open (always so after a power loss)
 * re-initialises it, so nothing on disk in it survives a crash in any form
 * that matters (docs/durability.md). */
#undef _FORTIFY_SOURCE
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define REC 160
#define MAXFD 65536

enum { T_NONE = 0, T_DATA = 1, T_DSYNC = 2 };

static unsigned char fdkind[MAXFD];
static int trace_fd = -1, data_fd = -1;
static char dir_real[PATH_MAX];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

struct map { void *addr; size_t len; };
static struct map maps[64];

static ssize_t (*r_write)(int, const void *, size_t);
static ssize_t (*r_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*r_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*r_writev)(int, const struct iovec *, int);
static ssize_t (*r_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*r_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*r_pwritev2)(int, const struct iovec *, int, off_t, int);
static int (*r_open)(const char *, int, ...);
static int (*r_open64)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static int (*r_openat64)(int, const char *, int, ...);
static int (*r_close)(int);
static int (*r_fdatasync)(int);
static int (*r_fsync)(int);
static int (*r_msync)(void *, size_t, int);
static int (*r_sync_file_range)(int, off_t, off_t, unsigned int);
static void (*r_sync)(void);
static int (*r_syncfs)(int);
static void *(*r_mmap)(void *, size_t, int, int, int, off_t);
static void *(*r_mmap64)(void *, size_t, int, int, int, off_t);
static int (*r_munmap)(void *, size_t);

#define RESOLVE(name) ((void)(r_##name || (*(void **)&r_##name = dlsym(RTLD_NEXT, #name))), r_##name)

static void die(const char *what)
{
	/* A trace with a record missing would prove nothing: stop loudly. */
	char b[256];
	int n = snprintf(b, sizeof b, "crashsim shim (pid %d): %s: %s\n", (int)getpid(), what, strerror(errno));
	if (n > 0)
		(void)!syscall(SYS_write, 2, b, (size_t)n);
	abort();
}

__attribute__((constructor)) static void shim_init(void)
{
	const char *t = getenv("AGENTD_CRASHSIM_TRACE"), *d = getenv("AGENTD_CRASHSIM_DIR");
	if (!t || !*t || !d || !*d)
		return;
	if (!realpath(d, dir_real))
		die("AGENTD_CRASHSIM_DIR");
	char side[PATH_MAX];
	if (snprintf(side, sizeof side, "%s.data", t) >= (int)sizeof side)
		die("trace path too long");
	/* Raw system calls: our own open() wrapper must not see these. Put them
	 * high, out of the way of programs that expect low descriptors. */
	int a = (int)syscall(SYS_openat, AT_FDCWD, t, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	int b = (int)syscall(SYS_openat, AT_FDCWD, side, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (a < 0 || b < 0)
		die("open the trace");
	trace_fd = fcntl(a, F_DUPFD_CLOEXEC, 900);
	data_fd = fcntl(b, F_DUPFD_CLOEXEC, 900);
	if (trace_fd < 0 || data_fd < 0)
		die("dup the trace");
	syscall(SYS_close, a);
	syscall(SYS_close, b);
}

static int active(void) { return trace_fd >= 0; }

static int tracked(int fd) { return active() && fd >= 0 && fd < MAXFD && fdkind[fd]; }

/* The next record's sequence number: its position in the trace. Called with
 * mu held and the trace flocked, so no other record comes between this and
 * the put() that appends it. */
static long long next_seq(void)
{
	struct stat st;
	if (fstat(trace_fd, &st))
		die("fstat the trace");
	if (st.st_size % REC)
		die("the trace has a partial record");
	return (long long)(st.st_size / REC);
}

static void put(const char *fmt, ...)
{
	char b[REC + 1];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b, sizeof b, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= REC)
		die("record too long");
	memset(b + n, ' ', (size_t)(REC - 1 - n));
	b[REC - 1] = '\n';
	if (syscall(SYS_write, trace_fd, b, (size_t)REC) != REC)
		die("append to the trace");
}

static void lock(void)
{
	pthread_mutex_lock(&mu);
	int e;
	while ((e = flock(trace_fd, LOCK_EX)) && errno == EINTR)
		;
	if (e)
		die("flock the trace");
}

static void unlock(void)
{
	flock(trace_fd, LOCK_UN);
	pthread_mutex_unlock(&mu);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

/* The begin record of a write of iov at off; returns its seq. */
static long long write_begin(int fd, const struct iovec *iov, int cnt, off_t off)
{
	lock();
	long long seq = next_seq();
	off_t at = lseek(data_fd, 0, SEEK_END);
	if (at < 0)
		die("seek the trace's data");
	size_t len = 0;
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < cnt; i++) {
		len += iov[i].iov_len;
		h = fnv(h, iov[i].iov_base, iov[i].iov_len);
		const char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left) {
			ssize_t w = syscall(SYS_write, data_fd, p, left);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				die("copy a write to the trace's data");
			p += w, left -= (size_t)w;
		}
	}
	put("%lld WB %d %d %lld %zu %lld %016llx %d", seq, (int)getpid(), fd, (long long)off, len, (long long)at,
	    (unsigned long long)h, fdkind[fd] == T_DSYNC);
	unlock();
	return seq;
}

static void end_rec(const char *kind, long long ref, long long ret)
{
	int saved = errno;
	lock();
	put("%lld %s %d %lld %lld", next_seq(), kind, (int)getpid(), ref, ret);
	unlock();
	errno = saved;
}

static long long flush_begin(const char *kind, const char *scope)
{
	lock();
	long long seq = next_seq();
	put("%lld FB %d %s %s", seq, (int)getpid(), kind, scope);
	unlock();
	return seq;
}

static void note(const char *what)
{
	lock();
	put("%lld XX %d %s", next_seq(), (int)getpid(), what);
	unlock();
}

/* ---- opens ------------------------------------------------------------ */

static int is_data_path(int dirfd, const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (strcmp(base, "data.mdb"))
		return 0;
	char full[PATH_MAX], dirpart[PATH_MAX], real[PATH_MAX];
	if (path[0] == '/' || dirfd == AT_FDCWD) {
		if (snprintf(full, sizeof full, "%s", path) >= (int)sizeof full)
			return 0;
	} else {
		char link[64], dpath[PATH_MAX];
		snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
		ssize_t n = readlink(link, dpath, sizeof dpath - 1);
		if (n < 0)
			return 0;
		dpath[n] = 0;
		if (snprintf(full, sizeof full, "%s/%s", dpath, path) >= (int)sizeof full)
			return 0;
	}
	size_t dl = (size_t)(strrchr(full, '/') ? strrchr(full, '/') - full : 0);
	if (dl == 0)
		snprintf(dirpart, sizeof dirpart, "%s", strrchr(full, '/') ? "/" : ".");
	else
		snprintf(dirpart, sizeof dirpart, "%.*s", (int)dl, full);
	if (!realpath(dirpart, real))
		return 0;
	return !strcmp(real, dir_real);
}

static int opened(int fd, int dirfd, const char *path, int flags)
{
	if (fd < 0 || !active() || fd >= MAXFD)
		return fd;
	int saved = errno;
	if (is_data_path(dirfd, path)) {
		fdkind[fd] = (flags & O_DSYNC) ? T_DSYNC : T_DATA;
		lock();
		put("%lld OP %d %d %#x", next_seq(), (int)getpid(), fd, flags);
		unlock();
	} else {
		fdkind[fd] = T_NONE;
	}
	errno = saved;
	return fd;
}

static mode_t mode_of(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_of(flags, ap);
	va_end(ap);
	return opened(RESOLVE(open)(path, flags, m), AT_FDCWD, path, flags);
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_of(flags, ap);
	va_end(ap);
	return opened(RESOLVE(open64)(path, flags, m), AT_FDCWD, path, flags);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_of(flags, ap);
	va_end(ap);
	return opened(RESOLVE(openat)(dirfd, path, flags, m), dirfd, path, flags);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_of(flags, ap);
	va_end(ap);
	return opened(RESOLVE(openat64)(dirfd, path, flags, m), dirfd, path, flags);
}

int close(int fd)
{
	/* Async-signal-safe: called between fork and exec too. */
	if (fd >= 0 && fd < MAXFD)
		fdkind[fd] = T_NONE;
	if (fd >= 0 && (fd == trace_fd || fd == data_fd)) {
		errno = EBADF; /* not the program's descriptor */
		return -1;
	}
	return RESOLVE(close)(fd);
}

/* ---- writes ----------------------------------------------------------- */

static ssize_t traced(int fd, const struct iovec *iov, int cnt, off_t off, ssize_t (*call)(void *), void *arg)
{
	long long b = write_begin(fd, iov, cnt, off);
	ssize_t r = call(arg);
	end_rec("WE", b, r < 0 ? -errno : r);
	return r;
}

struct wargs { int fd; const void *buf; size_t n; off_t off; const struct iovec *iov; int cnt; int flags; };

static ssize_t c_write(void *a) { struct wargs *w = a; return RESOLVE(write)(w->fd, w->buf, w->n); }
static ssize_t c_pwrite(void *a) { struct wargs *w = a; return RESOLVE(pwrite)(w->fd, w->buf, w->n, w->off); }
static ssize_t c_pwrite64(void *a) { struct wargs *w = a; return RESOLVE(pwrite64)(w->fd, w->buf, w->n, w->off); }
static ssize_t c_writev(void *a) { struct wargs *w = a; return RESOLVE(writev)(w->fd, w->iov, w->cnt); }
static ssize_t c_pwritev(void *a) { struct wargs *w = a; return RESOLVE(pwritev)(w->fd, w->iov, w->cnt, w->off); }
static ssize_t c_pwritev64(void *a)
{
	struct wargs *w = a;
	return RESOLVE(pwritev64)(w->fd, w->iov, w->cnt, w->off);
}
static ssize_t c_pwritev2(void *a)
{
	struct wargs *w = a;
	return RESOLVE(pwritev2)(w->fd, w->iov, w->cnt, w->off, w->flags);
}

static off_t cur(int fd)
{
	int flags = fcntl(fd, F_GETFL);
	return (flags >= 0 && (flags & O_APPEND)) ? lseek(fd, 0, SEEK_END) : lseek(fd, 0, SEEK_CUR);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	if (!tracked(fd))
		return RESOLVE(write)(fd, buf, n);
	struct wargs w = { .fd = fd, .buf = buf, .n = n };
	struct iovec v = { (void *)buf, n };
	return traced(fd, &v, 1, cur(fd), c_write, &w);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	if (!tracked(fd))
		return RESOLVE(pwrite)(fd, buf, n, off);
	struct wargs w = { .fd = fd, .buf = buf, .n = n, .off = off };
	struct iovec v = { (void *)buf, n };
	return traced(fd, &v, 1, off, c_pwrite, &w);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	if (!tracked(fd))
		return RESOLVE(pwrite64)(fd, buf, n, off);
	struct wargs w = { .fd = fd, .buf = buf, .n = n, .off = off };
	struct iovec v = { (void *)buf, n };
	return traced(fd, &v, 1, off, c_pwrite64, &w);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	if (!tracked(fd))
		return RESOLVE(writev)(fd, iov, cnt);
	struct wargs w = { .fd = fd, .iov = iov, .cnt = cnt };
	return traced(fd, iov, cnt, cur(fd), c_writev, &w);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (!tracked(fd))
		return RESOLVE(pwritev)(fd, iov, cnt, off);
	struct wargs w = { .fd = fd, .iov = iov, .cnt = cnt, .off = off };
	return traced(fd, iov, cnt, off, c_pwritev, &w);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (!tracked(fd))
		return RESOLVE(pwritev64)(fd, iov, cnt, off);
	struct wargs w = { .fd = fd, .iov = iov, .cnt = cnt, .off = off };
	return traced(fd, iov, cnt, off, c_pwritev64, &w);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (!tracked(fd))
		return RESOLVE(pwritev2)(fd, iov, cnt, off, flags);
	struct wargs w = { .fd = fd, .iov = iov, .cnt = cnt, .off = off, .flags = flags };
	/* RWF_DSYNC / RWF_SYNC make this one write durable, as O_DSYNC does:
	 * recorded as a plain write (a stricter model), never used by LMDB. */
	return traced(fd, iov, cnt, off < 0 ? cur(fd) : off, c_pwritev2, &w);
}

/* ---- flushes ---------------------------------------------------------- */

static int flushed(const char *kind, const char *scope, int (*call)(void *), void *arg)
{
	long long b = flush_begin(kind, scope);
	int r = call(arg);
	end_rec("FE", b, r < 0 ? -errno : r);
	return r;
}

struct fargs { int fd; void *addr; size_t len; int flags; off_t off, n; unsigned int sfr; };

static int c_fdatasync(void *a) { return RESOLVE(fdatasync)(((struct fargs *)a)->fd); }
static int c_fsync(void *a) { return RESOLVE(fsync)(((struct fargs *)a)->fd); }
static int c_msync(void *a) { struct fargs *f = a; return RESOLVE(msync)(f->addr, f->len, f->flags); }
static int c_sfr(void *a) { struct fargs *f = a; return RESOLVE(sync_file_range)(f->fd, f->off, f->n, f->sfr); }
static int c_sync(void *a) { (void)a; RESOLVE(sync)(); return 0; }
static int c_syncfs(void *a) { return RESOLVE(syncfs)(((struct fargs *)a)->fd); }

int fdatasync(int fd)
{
	struct fargs f = { .fd = fd };
	return tracked(fd) ? flushed("fdatasync", "data", c_fdatasync, &f) : RESOLVE(fdatasync)(fd);
}

int fsync(int fd)
{
	struct fargs f = { .fd = fd };
	return tracked(fd) ? flushed("fsync", "data", c_fsync, &f) : RESOLVE(fsync)(fd);
}

/* sync_file_range writes pages out but flushes neither the device's cache nor
 * the file's metadata: recorded, and the replayer makes nothing durable by it. */
int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
	struct fargs f = { .fd = fd, .off = off, .n = n, .sfr = flags };
	return tracked(fd) ? flushed("sync_file_range", "data", c_sfr, &f) : RESOLVE(sync_file_range)(fd, off, n, flags);
}

void sync(void)
{
	if (active())
		flushed("sync", "all", c_sync, NULL);
	else
		RESOLVE(sync)();
}

int syncfs(int fd)
{
	struct fargs f = { .fd = fd };
	return active() ? flushed("syncfs", "all", c_syncfs, &f) : RESOLVE(syncfs)(fd);
}

static int mapped(void *addr, size_t len)
{
	char *a = addr;
	for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) {
		char *m = maps[i].addr;
		if (m && a < m + maps[i].len && a + len > m)
			return 1;
	}
	return 0;
}

int msync(void *addr, size_t len, int flags)
{
	struct fargs f = { .addr = addr, .len = len, .flags = flags };
	if (!active() || !mapped(addr, len) || !(flags & MS_SYNC))
		return RESOLVE(msync)(addr, len, flags);
	return flushed("msync", "data", c_msync, &f);
}

static void *track_map(void *p, size_t len, int prot, int flags, int fd)
{
	if (p == MAP_FAILED || !tracked(fd))
		return p;
	int saved = errno;
	/* Writes through a shared writable mapping never pass a system call:
	 * the simulator cannot see them (LMDB makes one only with MDB_WRITEMAP). */
	if ((prot & PROT_WRITE) && (flags & MAP_SHARED))
		note("writable-shared-mapping-of-data.mdb");
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < sizeof maps / sizeof *maps; i++)
		if (!maps[i].addr) {
			maps[i].addr = p, maps[i].len = len;
			break;
		}
	pthread_mutex_unlock(&mu);
	errno = saved;
	return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return track_map(RESOLVE(mmap)(addr, len, prot, flags, fd, off), len, prot, flags, fd);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return track_map(RESOLVE(mmap64)(addr, len, prot, flags, fd, off), len, prot, flags, fd);
}

int munmap(void *addr, size_t len)
{
	if (active()) {
		pthread_mutex_lock(&mu);
		for (size_t i = 0; i < sizeof maps / sizeof *maps; i++)
			if (maps[i].addr == addr)
				maps[i].addr = NULL;
		pthread_mutex_unlock(&mu);
	}
	return RESOLVE(munmap)(addr, len);
}
