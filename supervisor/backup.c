/* backup.c: the online backup's thread (see backup.h). */
#include "supervisor/backup.h"
#include "common/log.h"
#include "supervisor/control.h"
#include "supervisor/loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void on_done(struct loop_watch *lw, uint32_t events);

static struct {
	store *st;
	int efd;
	struct loop_watch lw;
	int running;        /* loop thread: a copy is in flight */
	pthread_t thread;
	char *dir;
	struct slot *slot;  /* NULL: its client went */
	json_t *id;
	int64_t started_ms;
	int err;            /* the thread's result, read after the join */
} B = { .efd = -1, .lw = { on_done } };

static void *copier(void *arg)
{
	pthread_setname_np(pthread_self(), "backup");
	B.err = store_backup(B.st, B.dir);
	uint64_t one = 1;
	ssize_t w = write(B.efd, &one, sizeof one);
	(void)w;
	return NULL;
}

int backup_open(store *st)
{
	B.st = st;
	B.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (B.efd < 0)
		return -errno;
	return loop_add(B.efd, EPOLLIN, &B.lw);
}

int backup_start(const char *dir, struct slot *slot, json_t *id)
{
	if (B.running)
		return -EBUSY;
	/* A new directory is made here, so that a parent that is missing or
	 * not writable is refused at once; emptiness is store_backup's check. */
	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	struct stat sb;
	if (stat(dir, &sb))
		return -errno;
	if (!S_ISDIR(sb.st_mode))
		return -ENOTDIR;
	if (!(B.dir = strdup(dir)))
		return -ENOMEM;
	B.slot = slot;
	B.id = json_incref(id);
	B.started_ms = loop_now_ms();
	int e = loop_thread(&B.thread, copier, NULL);
	if (e) {
		free(B.dir);
		json_decref(B.id);
		B.dir = NULL;
		B.id = NULL;
		B.slot = NULL;
		return e;
	}
	B.running = 1;
	log_info("backup into %s started", dir);
	return 0;
}

/* Join the thread and answer its slot. */
static void finish(void)
{
	pthread_join(B.thread, NULL);
	B.running = 0;
	int64_t ms = loop_now_ms() - B.started_ms;
	struct stat sb;
	char path[4200];
	snprintf(path, sizeof path, "%s/data.mdb", B.dir);
	long long bytes = B.err || stat(path, &sb) ? 0 : (long long)sb.st_size;
	if (B.err)
		log_error("backup into %s failed after %lld ms: %s", B.dir, (long long)ms, store_strerror(B.err));
	else
		log_info("backup into %s done: %lld bytes in %lld ms", B.dir, bytes, (long long)ms);
	if (B.slot) {
		struct client *c = slot_client(B.slot);
		char msg[4300];
		if (!B.err) {
			slot_ok(B.slot, B.id, json_pack("{sssIsI}", "path", B.dir, "bytes", (json_int_t)bytes, "ms",
							(json_int_t)ms));
		} else if (B.err == -EOPNOTSUPP) {
			slot_error(B.slot, B.id, PERR_UNSUPPORTED,
				   "backup is not supported on a PostgreSQL store: back it up with pg_dump");
		} else if (B.err == -EEXIST) {
			snprintf(msg, sizeof msg, "%s is not empty: give a new or empty directory", B.dir);
			slot_error(B.slot, B.id, PERR_BAD_REQUEST, msg);
		} else {
			snprintf(msg, sizeof msg, "backup into %s failed: %s", B.dir, store_strerror(B.err));
			slot_error(B.slot, B.id, PERR_INTERNAL, msg);
		}
		client_flush(c);
	}
	free(B.dir);
	json_decref(B.id);
	B.dir = NULL;
	B.id = NULL;
	B.slot = NULL;
}

static void on_done(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	if (read(B.efd, &n, sizeof n) < 0 || !B.running)
		return;
	finish();
}

void backup_client_gone(struct client *c)
{
	if (B.slot && slot_client(B.slot) == c)
		B.slot = NULL;
}

void backup_close(void)
{
	if (B.running)
		finish();
	if (B.efd >= 0) {
		loop_del(B.efd);
		close(B.efd);
	}
	B.efd = -1;
}
