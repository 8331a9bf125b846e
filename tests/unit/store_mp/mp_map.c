/*
 * The map between processes: a map that cannot grow and one another process
 * grew, growth across processes and beside an open transaction, the map never
 * writable shared memory, the data file's descriptors close-on-exec (case
 * "processes"); the data file written ahead of its use (case "written ahead").
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/unit/store_mp/store_mp.h"

#define FULL_MAP (1 * MiB)
#define FULL_PAD 1000
#define MORE 600 /* events of FULL_PAD bytes: more than FULL_MAP holds */

/* A map that cannot grow: appending ends in exactly STORE_E_FULL, nothing
 * committed is lost and reads go on; then a process allowed a larger map
 * appends again, and this one, which had the old map, reads and writes in the
 * grown map (MDB_MAP_RESIZED); and so does a reopened handle. */
START_TEST(map_full_then_grown)
{
	char eid[64], m[32], mx[32], pad[32], nmore[32];
	size_t committed = 0;
	int err = 0, at_commit = 0;
	struct store_stat ss;
	open_store(FULL_MAP, FULL_MAP);
	conv_create("c");
	while (committed < 10000) {
		snprintf(eid, sizeof eid, "full-%zu", committed + 1);
		const char *e = eid;
		if ((err = append_batch("c", &e, 1, FULL_PAD, &at_commit)) != 0)
			break;
		committed++;
	}
	ck_assert_msg(err == STORE_E_FULL, "append %zu: %s (at %s), expected STORE_E_FULL", committed + 1,
		      store_strerror(err), at_commit ? "commit" : "append");
	ck_assert_uint_gt(committed, 100); /* about 1 MiB of 1 KiB events did fit */

	/* The map cannot grow: the next attempt fails the same way. */
	snprintf(eid, sizeof eid, "full-%zu", committed + 1);
	ck_assert_int_eq(append1("c", eid, FULL_PAD), STORE_E_FULL);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_eq(ss.map_size, FULL_MAP);

	/* Everything committed is there, and reads are served. */
	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, committed);
	assert_log(&r, 0, committed, "full", FULL_PAD);
	recs_free(&r);

	/* So does another process held to the same limit. */
	const char *same[] = { "-m", sz(m, FULL_MAP), "-M", sz(mx, FULL_MAP), "-p", sz(pad, FULL_PAD), dir,
			       "append", "1", "other", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(same), 10000), CHILD_FULL);

	/* Another process, allowed 8 MiB, grows the map and appends more than
	 * the old map could ever hold. */
	const char *more[] = { "-m", sz(m, FULL_MAP), "-M", sz(mx, 8 * MiB), "-p", sz(pad, FULL_PAD), dir,
			       "append", sz(nmore, MORE), "more", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(more), 15000), CHILD_OK);

	/* This handle, mapped at 1 MiB, reads past it and writes again. */
	load("c", &r);
	ck_assert_uint_eq(r.n, committed + MORE);
	assert_log(&r, 0, committed, "full", FULL_PAD);
	for (size_t i = 0; i < MORE; i++) {
		snprintf(eid, sizeof eid, "more-%zu", i + 1);
		ck_assert_uint_eq(r.v[committed + i].seq, committed + i + 1);
		ck_assert_str_eq(r.v[committed + i].eid, eid);
		ck_assert(content_is(r.v[committed + i].content, eid, FULL_PAD));
	}
	recs_free(&r);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_gt(ss.map_size, FULL_MAP);
	err = append1("c", "after-1", 0);
	ck_assert_msg(err == 0, "append after another process grew the map: %s", store_strerror(err));

	/* Reopened with room to grow, it grows ahead of need again: no
	 * transaction of 1 KB meets a full map. */
	store_close(st);
	st = NULL;
	/* Growth, not durability, is what this part checks: 2048 flushed
	 * commits took over the case's timeout on a disk shared with other
	 * fsyncing processes. */
	struct store_opts o = { .map_size = FULL_MAP, .max_map_size = 16 * MiB, .sync = STORE_SYNC_NONE };
	ck_assert_int_eq(store_open(&st, dir, &o), 0);
	size_t extra = 0, fulls = 0;
	for (; extra < 2048; extra++) {
		snprintf(eid, sizeof eid, "re-%zu", extra + 1);
		if ((err = append1("c", eid, FULL_PAD)) == STORE_E_FULL) {
			fulls++;
			err = append1("c", eid, FULL_PAD); /* the map grew before this txn */
		}
		ck_assert_msg(err == 0, "append re-%zu: %s", extra + 1, store_strerror(err));
	}
	ck_assert_uint_eq(fulls, 0);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_le(ss.map_size, 16 * MiB);
	load("c", &r);
	ck_assert_uint_eq(r.n, committed + MORE + 1 + extra);
	assert_log(&r, committed + MORE + 1, extra, "re", FULL_PAD);
	recs_free(&r);
}
END_TEST

#define GROW_TXNS 128
#define GROW_BATCH 16
#define GROW_PAD (2 * KiB)

/* A map of 1 MiB allowed to grow to 64 MiB: 4 MiB of events go in, in
 * transactions of 32 KiB, each succeeding at once: the store grows the map
 * before a write transaction once the data passes three quarters of it, so
 * only a transaction larger than the last quarter meets a full map (then
 * STORE_E_FULL, and the map grows before the next: store.h). A process that
 * had the environment open at 1 MiB before the growth then reads every event
 * and appends its own. */
START_TEST(map_grows_across_processes)
{
	char m[32], mx[32], line[128];
	char eid[GROW_BATCH][32];
	const char *eids[GROW_BATCH];
	size_t fulls = 0, n = 0;
	open_store(1 * MiB, 64 * MiB);
	conv_create("big");

	const char *args[] = { "-g", "-m", sz(m, 1 * MiB), "-M", sz(mx, 64 * MiB), dir,
			       "count", "big", ",", "append", "20", "b", "big", NULL };
	struct kid *b = spawn(args);
	expect_byte(b, 'R', 5000); /* its map is 1 MiB now */

	for (int t = 0; t < GROW_TXNS; t++) {
		for (int i = 0; i < GROW_BATCH; i++) {
			snprintf(eid[i], sizeof eid[i], "g-%zu", n + (size_t)i + 1);
			eids[i] = eid[i];
		}
		int at_commit, err = append_batch("big", eids, GROW_BATCH, GROW_PAD, &at_commit);
		if (err == STORE_E_FULL) {
			fulls++;
			err = append_batch("big", eids, GROW_BATCH, GROW_PAD, &at_commit);
		}
		ck_assert_msg(err == 0, "txn %d: %s at %s (after %zu growths)", t, store_strerror(err),
			      at_commit ? "commit" : "append", fulls);
		n += GROW_BATCH;
	}
	struct store_stat ss;
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_eq(fulls, 0);
	ck_assert_uint_ge(ss.map_size, 4 * MiB);
	ck_assert_uint_le(ss.map_size, 64 * MiB);

	struct recs r;
	uint64_t bytes = 0;
	load("big", &r);
	ck_assert_uint_eq(r.n, n);
	assert_log(&r, 0, n, "g", GROW_PAD);
	for (size_t i = 0; i < r.n; i++)
		bytes += r.v[i].content.len;
	recs_free(&r);

	/* The old-map process reads everything, then writes. */
	release(b);
	read_all(b, line, sizeof line, 15000);
	unsigned long long cnt, last, got_bytes;
	ck_assert_msg(sscanf(line, "%llu %llu %llu", &cnt, &last, &got_bytes) == 3, "child said: %s", line);
	ck_assert_uint_eq(cnt, n);
	ck_assert_uint_eq(last, n);
	ck_assert_uint_eq(got_bytes, bytes);
	ck_assert_int_eq(kid_exit(b, 15000), CHILD_OK);

	load("big", &r);
	ck_assert_uint_eq(r.n, n + 20);
	for (size_t i = 0; i < 20; i++) {
		snprintf(eid[0], sizeof eid[0], "b-%zu", i + 1);
		ck_assert_uint_eq(r.v[n + i].seq, n + i + 1);
		ck_assert_str_eq(r.v[n + i].eid, eid[0]);
		ck_assert(content_is(r.v[n + i].content, eid[0], 0));
	}
	recs_free(&r);
}
END_TEST

/* MDB_MAP_RESIZED when this process cannot adopt the new size yet: it holds
 * a read transaction from before another process grew the map (store.h allows
 * read transactions beside a write one). That old transaction reads on
 * unharmed; a transaction begun beside it cannot see the grown map, so its
 * begin must fail with an error that says so, and succeed once the old
 * transaction has ended. */
START_TEST(map_resized_while_txn_open)
{
	char m[32], mx[32], pad[32], nmore[32];
	store_txn *old, *x;
	uint64_t seq;
	open_store(FULL_MAP, 64 * MiB);
	conv_create("c");
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &old), 0);

	const char *grow[] = { "-m", sz(m, FULL_MAP), "-M", sz(mx, 64 * MiB), "-p", sz(pad, FULL_PAD), dir,
			       "append", sz(nmore, MORE), "g", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(grow), 15000), CHILD_OK);

	/* The old snapshot: still the empty log. */
	ck_assert_int_eq(store_event_latest_seq(old, "c", &seq), 0);
	ck_assert_uint_eq(seq, 0);

	int werr = store_txn_begin(st, STORE_WRITE, &x);
	if (werr == 0)
		store_txn_abort(x);
	store_txn_abort(old);

	/* With nothing open, the handle adopts the grown map. */
	ck_assert_int_eq(append1("c", "mine-1", 0), 0);
	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, MORE + 1);
	assert_log(&r, 0, MORE, "g", FULL_PAD);
	ck_assert_str_eq(r.v[MORE].eid, "mine-1");
	recs_free(&r);

	/* With a txn open the map cannot be moved under it, so the begin cannot
	 * adopt the grown map: it must say so as a retryable error ("end your
	 * open transaction first", store.h: -EAGAIN), never as -EIO, which a
	 * caller would take for a disk failure (docs/architecture.md: another
	 * process's growth of the map is handled). */
	ck_assert_msg(werr != -EIO && werr != 0,
		      "begin beside a pre-growth read txn returned %d (%s): MDB_MAP_RESIZED leaks out as an "
		      "I/O error",
		      werr, store_strerror(werr));
}
END_TEST

/* This process's maps of the store's data file, from /proc/self/smaps:
 * how many, the size of the last, and how many are writable shared memory
 * (VmFlags "sh"); and its descriptors onto the file. */
struct data_maps {
	int n, shared;
	size_t size;
	int fds; /* this process's descriptors onto the data file */
};

static struct data_maps data_maps(void)
{
	char real[PATH_MAX], data[PATH_MAX + 16], line[PATH_MAX + 128];
	struct data_maps m = { 0 };
	int in_data = 0;
	ck_assert_ptr_nonnull(realpath(dir, real));
	snprintf(data, sizeof data, "%s/data.mdb", real);
	FILE *f = fopen("/proc/self/smaps", "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char path[PATH_MAX + 1] = "";
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4096s", &lo, &hi, path) >= 2) { /* a map's first line */
			in_data = strcmp(path, data) == 0;
			if (in_data) {
				m.n++;
				m.size = hi - lo;
			}
		} else if (in_data && strncmp(line, "VmFlags:", 8) == 0) {
			m.shared += strstr(line, " sh") != NULL;
		}
	}
	fclose(f);
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char fdpath[300], target[PATH_MAX];
		snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%s", de->d_name);
		ssize_t len = readlink(fdpath, target, sizeof target - 1);
		if (len > 0) {
			target[len] = 0;
			m.fds += strcmp(target, data) == 0;
		}
	}
	closedir(d);
	return m;
}

/* LMDB never writes through its map (no MDB_WRITEMAP), yet maps the file
 * through its read-write descriptor, which makes the map writable shared
 * memory: then every page a flush writes back is first write-protected in
 * every process that maps the file, a page-table walk per process per page,
 * the supervisor's and every worker's (store_lmdb.c, map_unshared). The
 * store's map is not writable shared memory: not at open, not after it grew
 * its own map, not after it adopted the larger map another process made. */
START_TEST(map_not_writable_shared)
{
	char m[32], mx[32], pad[32];
	struct store_stat ss;
	open_store(1 * MiB, 64 * MiB);
	conv_create("c");
	struct data_maps dm = data_maps();
	ck_assert_int_eq(dm.n, 1);
	ck_assert_uint_eq(dm.size, 1 * MiB);
	ck_assert_msg(dm.shared == 0, "the data file is mapped as writable shared memory at open");
	/* LMDB's own two (its descriptor, and the O_DSYNC one it writes meta
	 * pages through): the read-only one is closed once mapped. */
	ck_assert_int_eq(dm.fds, 2);

	/* Grown by this handle ahead of need. */
	size_t n = 0;
	char eid[32];
	do {
		snprintf(eid, sizeof eid, "g-%zu", ++n);
		ck_assert_int_eq(append1("c", eid, GROW_PAD), 0);
		ck_assert_int_eq(store_stat(st, &ss), 0);
	} while (ss.map_size == 1 * MiB && n < 10000);
	ck_assert_uint_gt(ss.map_size, 1 * MiB);
	dm = data_maps();
	ck_assert_int_eq(dm.n, 1);
	ck_assert_uint_eq(dm.size, ss.map_size);
	ck_assert_msg(dm.shared == 0, "the data file is mapped as writable shared memory after growing");
	ck_assert_int_eq(dm.fds, 2);

	/* Grown by another process, past the end of this handle's map: adopted
	 * at the next begin, here a read's (a write's would grow its own map
	 * ahead of need first). */
	size_t ours = ss.map_size;
	const char *grow[] = { "-m", sz(m, 32 * MiB), "-M", sz(mx, 64 * MiB), "-p", sz(pad, GROW_PAD), dir, "append",
			       "1024", "o", "c", NULL };
	ck_assert_int_eq(kid_exit(spawn(grow), 15000), CHILD_OK);
	struct recs r;
	load("c", &r);
	ck_assert_uint_eq(r.n, n + 1024);
	ck_assert_str_eq(r.v[n].eid, "o-1");
	ck_assert_str_eq(r.v[n + 1023].eid, "o-1024");
	recs_free(&r);
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_gt(ss.map_size, ours);
	dm = data_maps();
	ck_assert_int_eq(dm.n, 1);
	ck_assert_uint_eq(dm.size, ss.map_size);
	ck_assert_msg(dm.shared == 0, "the data file is mapped as writable shared memory after adopting a map");
	ck_assert_int_eq(dm.fds, 2);
}
END_TEST

/* ---- 5. close-on-exec ------------------------------------------------- */

/* The store's files never leak into programs a worker execs (models, tools):
 * every descriptor onto data.mdb (and lock.mdb; flush.lock is mapped, its
 * descriptor closed at once) is FD_CLOEXEC, and an exec'd
 * child holds none. */
START_TEST(data_fd_cloexec)
{
	char real[PATH_MAX], data[PATH_MAX + 16], lock[PATH_MAX + 16], flush[PATH_MAX + 16], path[64], target[PATH_MAX];
	int ndata = 0;
	open_store(0, 0);
	conv_create("c"); /* LMDB has opened everything it will */
	ck_assert_ptr_nonnull(realpath(dir, real));
	snprintf(data, sizeof data, "%s/data.mdb", real);
	snprintf(lock, sizeof lock, "%s/lock.mdb", real);
	snprintf(flush, sizeof flush, "%s/flush.lock", real);

	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		int fd = atoi(de->d_name);
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n < 0)
			continue;
		target[n] = 0;
		int is_data = strcmp(target, data) == 0;
		if (!is_data && strcmp(target, lock) != 0 && strcmp(target, flush) != 0)
			continue;
		ndata += is_data;
		int flags = fcntl(fd, F_GETFD);
		ck_assert_msg(flags >= 0 && (flags & FD_CLOEXEC), "fd %d onto %s is not close-on-exec", fd,
			      target);
	}
	closedir(d);
	ck_assert_int_ge(ndata, 1);

	char out[8192];
	const char *args[] = { "-", "list-fds", NULL };
	struct kid *k = spawn(args);
	read_all(k, out, sizeof out, 5000);
	ck_assert_int_eq(kid_exit(k, 5000), CHILD_OK);
	ck_assert_msg(strncmp(out, "0 ", 2) == 0 || strstr(out, "\n0 "), "list-fds printed: %s", out);
	ck_assert_msg(!strstr(out, "data.mdb") && !strstr(out, "lock.mdb") && !strstr(out, "flush.lock"),
		      "an exec'd child inherited the store's files:\n%s", out);
}
END_TEST

/* ---- written ahead ---------------------------------------------------- */

#define AHEAD_LOW (256 * KiB)
#define AHEAD_CHUNK (2 * MiB)

/* The data file's length beyond the pages in use. */
static uint64_t ahead(void)
{
	struct store_stat ss;
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_ge(ss.file_bytes, ss.size_bytes);
	return ss.file_bytes - ss.size_bytes;
}

/* Every write transaction keeps the data file written at least AHEAD_LOW
 * past LMDB's last page (store_lmdb.c, write_ahead), so commits land on
 * blocks already written. The zeros go in under the writer lock, before the
 * transaction's own pages: two processes that take turns lengthening the
 * file must never zero a page the other committed. 64 KiB events make each
 * round of ten cross the low mark, so both extend it several times. */
START_TEST(written_ahead_across_processes)
{
	enum { ROUNDS = 6, PER = 10, PAD = 64 * 1024 };
	open_store(0, 0);
	conv_create("c");
	ck_assert_uint_ge(ahead(), AHEAD_LOW);
	char eid[32], tag[8], n[32], pad[32];
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < PER; i++) {
			snprintf(eid, sizeof eid, "p-%d", r * PER + i + 1);
			ck_assert_int_eq(append1("c", eid, PAD), 0);
		}
		snprintf(tag, sizeof tag, "q%d", r);
		const char *args[] = { "-p", sz(pad, PAD), dir, "append", sz(n, PER), tag, "c", NULL };
		child_run(args);
	}
	ck_assert_uint_ge(ahead(), AHEAD_LOW);
	ck_assert_uint_le(ahead(), AHEAD_CHUNK + PAD + 64 * KiB);
	/* All there, in order, intact: from this handle and from a new one. */
	for (int pass = 0; pass < 2; pass++) {
		struct recs rc;
		load("c", &rc);
		ck_assert_uint_eq(rc.n, (size_t)ROUNDS * PER * 2);
		for (int r = 0; r < ROUNDS; r++) {
			for (int i = 0; i < 2 * PER; i++) {
				const struct rec *e = &rc.v[r * 2 * PER + i];
				if (i < PER)
					snprintf(eid, sizeof eid, "p-%d", r * PER + i + 1);
				else
					snprintf(eid, sizeof eid, "q%d-%d", r, i - PER + 1);
				ck_assert_str_eq(e->eid, eid);
				ck_assert_msg(content_is(e->content, eid, PAD), "%s: content differs", eid);
			}
		}
		recs_free(&rc);
		store_close(st);
		st = NULL;
		open_store(0, 0);
	}
}
END_TEST

/* Never past the map: LMDB could not use it, and a file longer than the map
 * would only take disk. */
START_TEST(written_ahead_within_the_map)
{
	open_store(512 * KiB, 512 * KiB);
	conv_create("c");
	ck_assert_int_eq(append1("c", "e-1", 0), 0);
	struct store_stat ss;
	ck_assert_int_eq(store_stat(st, &ss), 0);
	ck_assert_uint_eq(ss.file_bytes, 512 * KiB);
}
END_TEST

void mp_map_add(TCase *tc)
{
	tcase_add_test(tc, map_full_then_grown);
	tcase_add_test(tc, map_grows_across_processes);
	tcase_add_test(tc, map_resized_while_txn_open);
	tcase_add_test(tc, map_not_writable_shared);
	tcase_add_test(tc, data_fd_cloexec);
}

void mp_ahead_add(TCase *tc)
{
	tcase_add_test(tc, written_ahead_across_processes);
	tcase_add_test(tc, written_ahead_within_the_map);
}
