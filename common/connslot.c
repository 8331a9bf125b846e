/*
 * connslot.c: see connslot.h.
 */
#include "common/connslot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

int connslot_open(const char *dir)
{
	char path[PATH_MAX];
	if (!dir)
		return -EINVAL;
	if (snprintf(path, sizeof path, "%s/connections.lock", dir) >= (int)sizeof path)
		return -ENAMETOOLONG;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

static int lock(int fd, int slot, int cmd, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1 };
	return fcntl(fd, cmd, &fl);
}

int connslot_try(int fd, int n)
{
	if (fd < 0 || n < 1)
		return -EINVAL;
	/* Start where this process's id points, so that workers starting
	 * together do not all try slot 0 first. */
	int first = (int)(getpid() % n);
	for (int i = 0; i < n; i++) {
		int s = (first + i) % n;
		if (lock(fd, s, F_OFD_SETLK, F_WRLCK) == 0)
			return s;
		if (errno != EAGAIN && errno != EACCES && errno != EINTR)
			return -errno;
	}
	return -EAGAIN;
}

int connslot_wait(int fd, int slot)
{
	while (lock(fd, slot, F_OFD_SETLKW, F_WRLCK) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

void connslot_release(int fd, int slot)
{
	if (fd >= 0 && slot >= 0)
		lock(fd, slot, F_OFD_SETLK, F_UNLCK);
}
