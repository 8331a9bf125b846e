/*
 * convlock.c: see convlock.h.
 */
#include "common/convlock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* FNV-1a, folded to 62 bits: an offset that, plus one, still fits off_t. */
static off_t conv_offset(const char *conv)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const unsigned char *p = (const unsigned char *)conv; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return (off_t)(h & ((1ull << 62) - 1));
}

int convlock_open(const char *data_dir)
{
	char path[PATH_MAX];
	if (!data_dir)
		return -EINVAL;
	if (snprintf(path, sizeof path, "%s/workers.lock", data_dir) >= (int)sizeof path)
		return -ENAMETOOLONG;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

int convlock_take(int fd, const char *conv)
{
	if (fd < 0 || !conv)
		return -EINVAL;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = conv_offset(conv), .l_len = 1 };
	while (fcntl(fd, F_OFD_SETLKW, &fl) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

int convlock_held(int fd, const char *conv)
{
	if (fd < 0 || !conv)
		return -EINVAL;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = conv_offset(conv), .l_len = 1 };
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	return fl.l_type != F_UNLCK;
}
