/* The directory of a unit test's LMDB store: made fresh under /tmp, and
 * removed with the files LMDB and the flush lock leave in it. */
#ifndef AGENTD_TESTS_STORE_DIR_H
#define AGENTD_TESTS_STORE_DIR_H

#include <stdio.h>
#include <unistd.h>

/* Remove the store's files and dir (the store closed first): rmdir's
 * result, 0 when nothing else was left in it. */
static inline int store_dir_remove(const char *dir)
{
	static const char *const files[] = { "data.mdb", "lock.mdb", "flush.lock" };
	char f[4096];
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		snprintf(f, sizeof f, "%s/%s", dir, files[i]);
		unlink(f);
	}
	return rmdir(dir);
}

#endif
