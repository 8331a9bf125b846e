/*
 * Opening a store: persistence across a reopen, read-only stores, stat and
 * the reader check, and the map size: full, grown, bounded, freeing deletes and
 * reserves (case "open").
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/conformance/conformance.h"

START_TEST(reopen_keeps_committed_data)
{
	mkconv("c1");
	append_n("c1", 3, "user_msg");
	mktc("c1", "tc");
	schedule("tc", T0 + 5);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_create(t, "aborted", mmap0()), 0);
	store_txn_abort(t);
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	ck_assert_uint_eq(latest("c1"), 3);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	int64_t d;
	ck_assert_int_eq(earliest(&d), 0);
	ck_assert_int_eq(d, T0 + 5);
	append_n("c1", 1, "user_msg"); /* seq continues after reopening */
	ck_assert_uint_eq(latest("c1"), 4);
	ck_assert_int_eq(store_sync(S), 0);
}
END_TEST

START_TEST(read_only_store_refuses_writes)
{
	mkconv("c1");
	store_close(S);
	S = NULL;
	OPTS.read_only = 1;
	open_store();
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE, &t), STORE_E_INVAL);
	ck_assert_uint_eq(latest("c1"), 0);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	ck_assert_int_eq(store_sync(S), 0);
	store_close(S);
	S = NULL;
	/* read-only does not create a store */
	char empty[PATH_MAX + 16];
	snprintf(empty, sizeof empty, "%s/empty", dir);
	ck_assert_int_eq(mkdir(empty, 0700), 0);
	store *s2 = NULL;
	ck_assert_int_ne(store_open(&s2, empty, &OPTS), 0);
	ck_assert_ptr_null(s2);
	OPTS.read_only = 0;
	open_store();
	/* an open that succeeds leaves no reason behind */
	ck_assert_str_eq(store_open_error(), "");
}
END_TEST

START_TEST(open_needs_existing_dir)
{
	char missing[PATH_MAX + 16];
	snprintf(missing, sizeof missing, "%s/missing", dir);
	store *s2 = NULL;
	ck_assert_int_lt(store_open(&s2, missing, &OPTS), 0);
	ck_assert_ptr_null(s2);
	ck_assert_int_eq(store_open(&s2, NULL, &OPTS), STORE_E_INVAL);
	ck_assert_int_eq(store_open(NULL, dir, &OPTS), STORE_E_INVAL);
}
END_TEST

START_TEST(stat_and_reader_check)
{
	struct store_stat st;
	memset(&st, 0xff, sizeof st);
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.map_size, OPTS.map_size);
	ck_assert_uint_ge(st.max_readers, 1024); /* 0: 1024 */
	ck_assert_uint_gt(st.size_bytes, 0);
	ck_assert_uint_le(st.size_bytes, st.map_size);
	ck_assert_int_eq(st.sync, STORE_SYNC_NONE);
	/* readers counts the slots in use now, not the most ever used */
	ck_assert_uint_eq(st.readers, 0);
	store_txn *r = rbegin(), *r2 = rbegin();
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.readers, 2);
	store_txn_abort(r2);
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.readers, 1);
	ck_assert_int_eq(store_txn_commit(r), 0); /* committing a read txn ends it too */
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.readers, 0);
	int cleared = -1;
	ck_assert_int_eq(store_reader_check(S, &cleared), 0);
	ck_assert_int_eq(cleared, 0);
	ck_assert_int_eq(store_reader_check(S, NULL), 0);
	ck_assert_int_eq(store_sync(S), 0);
}
END_TEST

/* Append one event of `len` bytes in its own txn. */
static int append_big(const char *conv, size_t len)
{
	static char blob[4 << 20];
	ck_assert_uint_le(len, sizeof blob);
	memset(blob, 'x', len);
	msgpack_pack_bin_with_body(B(), blob, len);
	struct store_event_in e = ev("blob", built(), NULL);
	store_txn *t = wbegin();
	uint64_t seq;
	int rc = store_event_append(t, conv, &e, &seq, NULL);
	if (rc) {
		/* a full map poisons the txn: everything after, and commit, fail alike */
		if (rc == STORE_E_FULL) {
			struct store_event_in small = ev("blob", mint(1), NULL);
			ck_assert_int_eq(store_event_append(t, conv, &small, &seq, NULL), STORE_E_FULL);
			ck_assert_int_eq(store_txn_commit(t), STORE_E_FULL);
		} else {
			store_txn_abort(t);
		}
		pool_free();
		return rc;
	}
	rc = store_txn_commit(t);
	pool_free();
	return rc;
}

START_TEST(map_full_without_growth_loses_nothing)
{
	OPTS.map_size = OPTS.max_map_size = (size_t)1 << 20; /* no growth */
	reopen_store();
	mkconv("c1");
	int rc = 0;
	uint64_t committed = 0;
	for (int i = 0; i < 64 && rc == 0; i++) {
		rc = append_big("c1", 64 << 10);
		if (rc == 0)
			committed++;
	}
	ck_assert_int_eq(rc, STORE_E_FULL);
	ck_assert_uint_gt(committed, 0);
	ck_assert_uint_eq(latest("c1"), committed);
	ck_assert_int_eq(append_big("c1", 64 << 10), STORE_E_FULL); /* no growth: still full */
	ck_assert_int_eq(stream("c1", 0, 0, 0, NULL), 0);
	expect_run(1, committed);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.map_size, (size_t)1 << 20);
	ck_assert_uint_eq(store_map_size(S), st.map_size);
	ck_assert_int_eq(st.map_full, 0); /* at its maximum: no retry can fit */
}
END_TEST

/* max_map_size alone, smaller than the default map: the map starts there
 * (the default 256 MiB map used to raise the maximum to itself). */
START_TEST(max_map_size_alone_bounds_the_map)
{
	OPTS.map_size = 0;
	OPTS.max_map_size = (size_t)1 << 20;
	reopen_store();
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.map_size, (size_t)1 << 20);
	ck_assert_uint_eq(st.max_map_size, (size_t)1 << 20);
	mkconv("c1");
	int rc = 0;
	for (int i = 0; i < 64 && rc == 0; i++)
		rc = append_big("c1", 64 << 10);
	ck_assert_int_eq(rc, STORE_E_FULL); /* within 1 MiB, not 256 */
}
END_TEST

/* A map that cannot grow for want of address space (ulimit -v) is refused
 * as full, and the handle keeps working: LMDB unmaps the old map before it
 * maps the new one and cannot restore it, so the store must not let it try.
 * PostgreSQL's limit is a quota that needs no address space: there the
 * reservation succeeds, and the handle keeps working all the same.
 * In a child, whose limit dies with it; not under a sanitizer, whose shadow
 * memory needs the address space. */
START_TEST(a_map_without_address_space_to_grow_stays_usable)
{
#if defined(__SANITIZE_ADDRESS__)
	return;
#endif
	OPTS.map_size = (size_t)64 << 20;
	OPTS.max_map_size = (size_t)1 << 30;
	reopen_store();
	mkconv("c1");
	int want = strcmp(conf_backend(), "pg") == 0 ? 0 : STORE_E_FULL;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		long pages = 0;
		FILE *f = fopen("/proc/self/statm", "r");
		if (!f || fscanf(f, "%ld", &pages) != 1)
			_exit(3);
		fclose(f);
		struct rlimit rl = { 0 };
		rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)32 << 20);
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(4);
		if (store_reserve(S, (size_t)100 << 20) != want)
			_exit(5);
		store_txn *t;
		if (store_txn_begin(S, STORE_READ, &t))
			_exit(6);
		uint64_t seq;
		int rc = store_event_latest_seq(t, "c1", &seq); /* touches the map: it is still there */
		store_txn_abort(t);
		_exit(rc ? 7 : 0);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s %d",
		      WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}
END_TEST

/* Fill conv's store to its limit: ever smaller events until one of a byte
 * is full. */
static void fill_to_the_limit(const char *conv)
{
	static const size_t sizes[] = { 64 << 10, 4 << 10, 256, 1 };
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
		for (int i = 0; i < 20000 && append_big(conv, sizes[k]) == 0; i++)
			;
	ck_assert_int_eq(append_big(conv, 1), STORE_E_FULL);
}

/* store.h, STORE_WRITE_FREEING: a store full to its limit still takes a
 * delete, again and again, and (LMDB) the room it freed serves the next
 * write at once, while the map stays within the reserve. PostgreSQL never
 * refuses a delete for the quota; its tables keep their bytes until they
 * are vacuumed, so there the quota stays reached. */
START_TEST(freeing_txn_deletes_in_a_full_store)
{
	const size_t max = (size_t)1 << 20, reserve = 256 << 10;
	int lmdb = strcmp(conf_backend(), "pg") != 0;
	OPTS.map_size = OPTS.max_map_size = max;
	reopen_store();
	store_txn *t = NULL;
	ck_assert_int_eq(store_txn_begin(S, STORE_READ | STORE_WRITE_FREEING, &t), STORE_E_INVAL);
	for (int round = 0; round < 3; round++) {
		char a[8], b[8];
		snprintf(a, sizeof a, "a%d", round);
		snprintf(b, sizeof b, "b%d", round);
		if (!lmdb && round > 0)
			break; /* the quota stays reached (above) */
		mkconv(a);
		mkconv(b);
		append_big(b, 64 << 10);
		fill_to_the_limit(a);
		/* an ordinary delete meets the full store on LMDB */
		t = wbegin();
		int rc = store_conv_delete(t, b);
		if (rc == 0)
			rc = store_txn_commit(t);
		else
			store_txn_abort(t);
		ck_assert_int_eq(rc, lmdb ? STORE_E_FULL : 0);
		ck_assert_int_eq(store_txn_begin(S, STORE_WRITE_LAZY | STORE_WRITE_FREEING, &t), 0);
		ck_assert_int_eq(store_conv_delete(t, a), 0);
		ck_assert_int_eq(store_txn_commit(t), 0);
		struct store_conv c;
		t = rbegin();
		ck_assert_int_eq(store_conv_get(t, a, &c), STORE_E_NOTFOUND);
		ck_assert_int_eq(store_conv_get(t, b, &c), lmdb ? 0 : STORE_E_NOTFOUND);
		store_txn_abort(t);
		struct store_stat st;
		ck_assert_int_eq(store_stat(S, &st), 0);
		ck_assert_uint_le(st.map_size, max + reserve);
		ck_assert_uint_le(st.size_bytes, lmdb ? max + reserve : st.size_bytes);
		if (lmdb) /* the room a0 held serves the next write at once */
			ck_assert_int_eq(append_big(b, 64 << 10), 0);
	}
}
END_TEST

/* An ordinary delete that still finds room in a store full to its limit
 * frees room the very next write can use (LMDB reuses a transaction's freed
 * pages only from the second transaction after it, so the store settles
 * them), as a delete with the reserve does. */
START_TEST(ordinary_delete_in_a_full_store_frees_room_at_once)
{
	const size_t max = (size_t)1 << 20;
	int lmdb = strcmp(conf_backend(), "pg") != 0;
	OPTS.map_size = OPTS.max_map_size = max;
	reopen_store();
	mkconv("a");
	mkconv("small");
	mkconv("big");
	ck_assert_int_eq(append_big("small", 64 << 10), 0);
	ck_assert_int_eq(append_big("big", 64 << 10), 0);
	ck_assert_int_eq(append_big("big", 64 << 10), 0);
	fill_to_the_limit("a");
	/* room for the next delete's copied pages, not for a 64 KiB event */
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(S, STORE_WRITE_LAZY | STORE_WRITE_FREEING, &t), 0);
	ck_assert_int_eq(store_conv_delete(t, "small"), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "big"), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	/* the 128 KiB "big" held serve the next write */
	ck_assert_int_eq(append_big("a", 64 << 10), lmdb ? 0 : STORE_E_FULL);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_le(st.map_size, lmdb ? max : st.map_size);
}
END_TEST

START_TEST(map_full_grows_for_retry)
{
	OPTS.map_size = (size_t)1 << 20;
	OPTS.max_map_size = (size_t)16 << 20;
	reopen_store();
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	int rc, tries = 0;
	struct store_stat st0;
	ck_assert_int_eq(store_stat(S, &st0), 0);
	ck_assert_int_eq(st0.map_full, 0);
	while ((rc = append_big("c1", (size_t)3 << 20)) == STORE_E_FULL && tries < 8) {
		struct store_stat sf;
		ck_assert_int_eq(store_stat(S, &sf), 0);
		ck_assert(sf.map_full || sf.map_size > st0.map_size); /* a retry may fit */
		ck_assert_uint_eq(store_map_size(S), sf.map_size);
		tries++;
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_int_gt(tries, 0); /* it was full at first */
	ck_assert_uint_eq(latest("c1"), 3);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_gt(st.map_size, (size_t)3 << 20);
	ck_assert_uint_le(st.map_size, (size_t)16 << 20);
	ck_assert_int_eq(stream("c1", 0, 2, 0, NULL), 0);
	EXPECT_SEQS(1);
}
END_TEST

START_TEST(reserve_grows_ahead)
{
	OPTS.map_size = (size_t)1 << 20;
	OPTS.max_map_size = (size_t)16 << 20;
	reopen_store();
	mkconv("c1");
	ck_assert_int_eq(store_reserve(S, (size_t)3 << 20), 0);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.map_size, (size_t)6 << 20);
	ck_assert_uint_eq(st.max_map_size, (size_t)16 << 20);
	ck_assert_int_eq(append_big("c1", (size_t)3 << 20), 0); /* at once: no full map */
	ck_assert_int_eq(store_reserve(S, (size_t)100 << 20), STORE_E_FULL);
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_eq(st.map_size, (size_t)16 << 20); /* grown as far as allowed */
	store_txn *t = rbegin();
	ck_assert_int_eq(store_reserve(S, 1), -EBUSY);
	store_txn_abort(t);
	ck_assert_int_eq(store_reserve(S, 1), 0);
	ck_assert_int_eq(store_reserve(NULL, 1), STORE_E_INVAL);
}
END_TEST

void conf_open_add(TCase *tc)
{
	tcase_add_test(tc, reopen_keeps_committed_data);
	tcase_add_test(tc, read_only_store_refuses_writes);
	tcase_add_test(tc, open_needs_existing_dir);
	tcase_add_test(tc, stat_and_reader_check);
	tcase_add_test(tc, map_full_without_growth_loses_nothing);
	tcase_add_test(tc, map_full_grows_for_retry);
	tcase_add_test(tc, freeing_txn_deletes_in_a_full_store);
	tcase_add_test(tc, ordinary_delete_in_a_full_store_frees_room_at_once);
	tcase_add_test(tc, a_map_without_address_space_to_grow_stays_usable);
	tcase_add_test(tc, max_map_size_alone_bounds_the_map);
	tcase_add_test(tc, reserve_grows_ahead);
}
