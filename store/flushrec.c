/* flushrec.c: the flushes of an LMDB store, shared by its processes (flushrec.h). */
#include "store/flushrec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

/* The shared page. Every field is read and written with atomics only. */
struct shared {
	uint64_t durable;
	uint64_t covering;
	uint32_t gen;
	uint32_t nwait;
};

struct flushrec {
	int fd; /* data.mdb's (the store's): its OFD locks, not its bytes */
	struct shared *sh;
	long wait_ms;
	int alone; /* flushrec_alone */
};

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)

static void raise_to(uint64_t *p, uint64_t v)
{
	uint64_t cur = LOAD(p);
	while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
}

/* An OFD lock on byte `at`: held by the open file description, so released
 * when the last descriptor onto it closes, also by a process killed. */
static int lock_byte(int fd, short type, off_t at, int wait)
{
	struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
	while (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

struct flushrec *flushrec_open(const char *dir, int data_fd)
{
	char path[PATH_MAX];
	if (data_fd < 0 || snprintf(path, sizeof path, "%s/%s", dir, FLUSHREC_FILE) >= (int)sizeof path)
		return NULL;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return NULL;
	struct stat st;
	void *m = MAP_FAILED;
	if (fstat(fd, &st) == 0 && (st.st_size >= PAGE || ftruncate(fd, PAGE) == 0))
		m = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd); /* the mapping keeps the page: no descriptor per process */
	struct flushrec *r = m == MAP_FAILED ? NULL : calloc(1, sizeof *r);
	if (!r)
		goto fail;
	r->fd = data_fd;
	r->sh = m;
	const char *w = getenv("AGENTD_TEST_FLUSH_WAIT_MS"); /* test-only */
	r->wait_ms = w && atol(w) > 0 ? atol(w) : FLUSHREC_WAIT_MS;
	/* Alone on the store: what the record holds is from processes gone,
	 * perhaps from before a power loss, perhaps of another data file. */
	if (lock_byte(data_fd, F_WRLCK, 0, 0) == 0)
		*r->sh = (struct shared){ 0 };
	if (lock_byte(data_fd, F_RDLCK, 0, 1) == 0) /* from the write lock: atomic, no gap */
		return r;
fail:
	if (m != MAP_FAILED)
		munmap(m, PAGE);
	free(r);
	return NULL;
}

void flushrec_close(struct flushrec *r)
{
	if (!r)
		return;
	/* No unlock: the locks go when the store closes its descriptor onto
	 * data.mdb, the last one onto that open file description. A fork
	 * shares it, so an unlock in a forked child would drop its parent's
	 * locks too. */
	munmap(r->sh, PAGE);
	free(r);
}

void flushrec_alone(struct flushrec *r)
{
	if (r)
		r->alone = 1;
}

static void wake(struct flushrec *r)
{
	__atomic_add_fetch(&r->sh->gen, 1, __ATOMIC_SEQ_CST);
	if (LOAD(&r->sh->nwait))
		syscall(SYS_futex, &r->sh->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void flushrec_want(struct flushrec *r, int on)
{
	if (r)
		lock_byte(r->fd, on ? F_RDLCK : F_UNLCK, 1, 0);
}

/* Some other process waits for LMDB's writer lock (flushrec_want). */
static int others_want(struct flushrec *r)
{
	struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1 };
	return fcntl(r->fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

void flushrec_begin(struct flushrec *r, uint64_t last)
{
	if (r)
		raise_to(&r->sh->covering, last);
}

void flushrec_end(struct flushrec *r, uint64_t last, uint64_t durable)
{
	if (!r)
		return;
	if (durable) {
		raise_to(&r->sh->durable, durable);
	} else {
		/* No flush will come of it: give covering back to what is
		 * durable, unless a flush raised it past ours meanwhile. */
		uint64_t cur = last;
		__atomic_compare_exchange_n(&r->sh->covering, &cur, LOAD(&r->sh->durable), 0, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	}
	wake(r);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep until gen moves from g, ms at most. */
static void sleep_on(struct flushrec *r, uint32_t g, int64_t ms)
{
	struct timespec ts = { ms / 1000, ms % 1000 * 1000000L };
	syscall(SYS_futex, &r->sh->gen, FUTEX_WAIT, g, &ts, NULL, 0);
}

static int sync_fd(int fd)
{
	while (fdatasync(fd) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

int flushrec_flush(struct flushrec *r, int fd, uint64_t want, uint64_t (*last_id)(void *), void *arg)
{
	if (!r)
		return sync_fd(fd);
	struct shared *sh = r->sh;
	int64_t deadline = 0;
	for (;;) {
		if (LOAD(&sh->durable) >= want)
			return 1;
		/* Nobody is going to cover it, or not in time. */
		if (r->alone || (LOAD(&sh->covering) < want && !others_want(r)))
			break;
		int64_t now = now_ms();
		if (!deadline)
			deadline = now + r->wait_ms;
		else if (now >= deadline)
			break;
		/* Counted before gen is read: a rise after this read wakes us,
		 * one before it shows in durable below. */
		__atomic_add_fetch(&sh->nwait, 1, __ATOMIC_SEQ_CST);
		uint32_t g = LOAD(&sh->gen);
		if (LOAD(&sh->durable) < want)
			sleep_on(r, g, deadline - now);
		__atomic_sub_fetch(&sh->nwait, 1, __ATOMIC_SEQ_CST);
	}
	/* Read before the flush begins: every id up to it had its meta page
	 * written, so the flush covers them. */
	uint64_t last = last_id(arg);
	raise_to(&sh->covering, last);
	int e = sync_fd(fd);
	if (e) {
		flushrec_end(r, last, 0);
		return e;
	}
	raise_to(&sh->durable, last);
	wake(r);
	return 0;
}
