/*
 * Conversation metadata and the filtered conversation list
 * (store_conv_find); backups of what was committed (case "metadata").
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/conformance/conformance.h"

/* A metadata map from "k=v" strings. */
static store_bytes mmeta(size_t n, const char *const *kv)
{
	msgpack_packer *pk = B();
	msgpack_pack_map(pk, n);
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(kv[i], '=');
		msgpack_pack_str_with_body(pk, kv[i], (size_t)(eq - kv[i]));
		msgpack_pack_str_with_body(pk, eq + 1, strlen(eq + 1));
	}
	return built();
}
#define MMETA(...) mmeta(sizeof (const char *const[]){ __VA_ARGS__ } / sizeof(const char *), \
			 (const char *const[]){ __VA_ARGS__ })

static int put_meta(const char *id, store_bytes m)
{
	struct store_conv_patch p = { .set = STORE_SET_METADATA, .metadata = m };
	store_txn *t = wbegin();
	int rc = store_conv_put(t, id, &p);
	if (rc == 0)
		commit(t);
	else
		store_txn_abort(t);
	return rc;
}

static store_bytes meta_of(store_txn *t, const char *id)
{
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, id, &c), 0);
	return c.metadata;
}

static int find_convs(const struct store_conv_filter *f, const char *after, size_t limit, int *more)
{
	memset(&C, 0, sizeof C);
	store_txn *t = rbegin();
	int rc = store_conv_find(t, f, after, limit, collect_conv, &C, more);
	store_txn_abort(t);
	return rc;
}

static struct store_kv kv(const char *k, const char *v)
{
	return (struct store_kv){ { k, strlen(k) }, { v, strlen(v) } };
}

static int meta_seen(void *arg, const struct store_conv *c)
{
	*(store_bytes *)arg = c->metadata;
	return 0;
}

START_TEST(meta_round_trips_and_stamps_updated_at)
{
	mkconv("c1");
	store_txn *t = rbegin();
	ck_assert_uint_eq(meta_of(t, "c1").len, 0); /* none yet */
	store_txn_abort(t);
	store_bytes m = MMETA("team=red", "user=u-1", "empty=");
	NOW = T0 + 50;
	ck_assert_int_eq(put_meta("c1", m), 0);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.metadata, m));
	ck_assert_int_eq(c.updated_at, T0 + 50);
	store_txn_abort(t);
	/* list shows it too */
	t = rbegin();
	store_bytes seen = { NULL, 0 };
	ck_assert_int_eq(store_conv_list(t, -1, NULL, 0, meta_seen, &seen, NULL), 0);
	ck_assert(bytes_eq_b(seen, m));
	seen.len = 0;
	ck_assert_int_eq(store_conv_find(t, NULL, NULL, 0, meta_seen, &seen, NULL), 0);
	ck_assert(bytes_eq_b(seen, m));
	store_txn_abort(t);
	/* an empty map clears it */
	ck_assert_int_eq(put_meta("c1", mmap0()), 0);
	t = rbegin();
	ck_assert_uint_eq(meta_of(t, "c1").len, 0);
	store_txn_abort(t);
	struct store_kv team = kv("team", "red");
	struct store_conv_filter f = { .status = -1, .meta = &team, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	/* other fields are left as they were */
	t = rbegin();
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_int_eq(c.status, STORE_IDLE);
	store_txn_abort(t);
}
END_TEST

START_TEST(meta_survives_other_puts_and_goes_with_delete)
{
	mkconv("c1");
	store_bytes m = MMETA("team=red");
	ck_assert_int_eq(put_meta("c1", m), 0);
	set_status("c1", STORE_ACTIVE);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(3)), 0);
	ck_assert(bytes_eq_b(meta_of(t, "c1"), m));
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	mkconv("c1"); /* the same id again: none of the old metadata */
	t = rbegin();
	ck_assert_uint_eq(meta_of(t, "c1").len, 0);
	store_txn_abort(t);
	struct store_kv team = kv("team", "red");
	struct store_conv_filter f = { .status = -1, .meta = &team, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
}
END_TEST

START_TEST(meta_out_of_bounds_is_inval_and_writes_nothing)
{
	mkconv("c1");
	store_bytes m = MMETA("team=red");
	ck_assert_int_eq(put_meta("c1", m), 0);
	char k65[66], v257[258];
	memset(k65, 'k', 65);
	k65[65] = 0;
	memset(v257, 'v', 257);
	v257[257] = 0;
	char longk[80], longv[270];
	snprintf(longk, sizeof longk, "%s=x", k65);
	snprintf(longv, sizeof longv, "k=%s", v257);
	const char *seventeen[17];
	char names[17][8];
	for (int i = 0; i < 17; i++) {
		snprintf(names[i], sizeof names[i], "k%d=v", i);
		seventeen[i] = names[i];
	}
	msgpack_packer *pk = B(); /* a value that is not a string */
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, "n", 1);
	msgpack_pack_int64(pk, 1);
	store_bytes nonstr = built();
	pk = B(); /* a NUL in a key */
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, "a\0b", 3);
	msgpack_pack_str_with_body(pk, "v", 1);
	store_bytes nul = built();
	pk = B(); /* a key twice */
	msgpack_pack_map(pk, 2);
	for (int i = 0; i < 2; i++) {
		msgpack_pack_str_with_body(pk, "a", 1);
		msgpack_pack_str_with_body(pk, "v", 1);
	}
	store_bytes twice = built();
	store_bytes bad[] = { mstr("x"), mint(1), MMETA("=v"), mmeta(1, (const char *const[]){ longk }),
			      mmeta(1, (const char *const[]){ longv }), mmeta(17, seventeen), nonstr, nul, twice };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(put_meta("c1", bad[i]) == STORE_E_INVAL, "bad metadata %zu accepted", i);
	for (size_t i = 0; i < NBAD; i++)
		ck_assert_int_eq(put_meta("c1", bad_blobs[i].b), STORE_E_INVAL);
	/* the transaction stays usable after an INVAL */
	store_txn *t = wbegin();
	struct store_conv_patch p = { .set = STORE_SET_METADATA, .metadata = nonstr };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(1)), 0);
	commit(t);
	t = rbegin();
	ck_assert(bytes_eq_b(meta_of(t, "c1"), m));
	store_txn_abort(t);
	/* the largest allowed: 16 pairs, 64-byte keys, 256-byte values, a 128-byte id */
	char id[STORE_ID_MAX + 1];
	memset(id, 'i', STORE_ID_MAX);
	id[STORE_ID_MAX] = 0;
	mkconv(id);
	char kvs[16][64 + 1 + 256 + 1];
	const char *big[16];
	for (int i = 0; i < 16; i++) {
		memset(kvs[i], 'a' + i, 64);
		kvs[i][64] = '=';
		memset(kvs[i] + 65, 'v', 256);
		kvs[i][65 + 256] = 0;
		big[i] = kvs[i];
	}
	ck_assert_int_eq(put_meta(id, mmeta(16, big)), 0);
	struct store_kv last = { { kvs[15], 64 }, { kvs[15] + 65, 256 } };
	struct store_conv_filter f = { .status = -1, .meta = &last, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS(id);
}
END_TEST

/* c1..c6 with metadata, statuses and update times to filter on. */
static void filter_fixture(void)
{
	const char *ids[] = { "c1", "c2", "c3", "c4", "c5", "c6" };
	for (int i = 0; i < 6; i++) {
		NOW = T0 + 100 * (i + 1);
		mkconv(ids[i]);
		ck_assert_int_eq(put_meta(ids[i], i % 2 ? MMETA("team=red", "env=prod") : MMETA("team=blue", "env=prod")),
				 0);
	}
	NOW = T0 + 1000;
	set_status("c3", STORE_ACTIVE);
	set_status("c5", STORE_ACTIVE);
	/* c2: team=red, env=prod; c4: red, prod; c6: red, prod; c1, c3, c5: blue, prod */
	ck_assert_int_eq(put_meta("c6", MMETA("team=red", "env=dev")), 0);
}

static int keep_not_c4(void *arg, const struct store_conv *c)
{
	(void)arg;
	return !bytes_eq_s(c->id, "c4");
}

static int match_fails(void *arg, const struct store_conv *c)
{
	(void)c;
	return ++*(int *)arg == 2 ? -77 : 1;
}

START_TEST(find_filters_by_metadata_status_time_and_match)
{
	filter_fixture();
	int more = 7;
	struct store_kv red[] = { kv("team", "red"), kv("env", "prod") };
	struct store_conv_filter f = { .status = -1, .meta = red, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&f, NULL, 0, &more), 0);
	EXPECT_IDS("c2", "c4", "c6");
	ck_assert_int_eq(more, 0);
	f.nmeta = 2; /* all pairs must match */
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c4");
	struct store_kv prod_red[] = { kv("env", "prod"), kv("team", "red") }; /* either pair first */
	f.meta = prod_red;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c4");
	struct store_kv none = kv("team", "green"), nokey = kv("nokey", "red"), emptyv = kv("team", "");
	f.meta = &none;
	f.nmeta = 1;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	f.meta = &nokey;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	f.meta = &emptyv;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	ck_assert_uint_eq(C.n, 0);
	/* status */
	struct store_conv_filter fs = { .status = STORE_ACTIVE };
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), 0);
	EXPECT_IDS("c3", "c5");
	struct store_kv blue = kv("team", "blue");
	fs.meta = &blue;
	fs.nmeta = 1;
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), 0);
	EXPECT_IDS("c3", "c5");
	fs.status = STORE_IDLE;
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	/* updated range, both ends exclusive: c1 at +100 ... c4 at +400; c3, c5, c6 at +1000 */
	struct store_conv_filter ft = { .status = -1, .updated_after = T0 + 100, .updated_before = T0 + 1000 };
	ck_assert_int_eq(find_convs(&ft, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c4");
	ft.updated_before = 0;
	ck_assert_int_eq(find_convs(&ft, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c3", "c4", "c5", "c6");
	ft.updated_after = 0;
	ft.updated_before = T0 + 201;
	ck_assert_int_eq(find_convs(&ft, NULL, 0, NULL), 0);
	EXPECT_IDS("c1", "c2");
	/* the caller's match, after the rest */
	struct store_conv_filter fm = { .status = -1, .meta = red, .nmeta = 1, .match = keep_not_c4 };
	ck_assert_int_eq(find_convs(&fm, NULL, 0, NULL), 0);
	EXPECT_IDS("c2", "c6");
	int calls = 0;
	struct store_conv_filter fe = { .status = -1, .match = match_fails, .match_arg = &calls };
	ck_assert_int_eq(find_convs(&fe, NULL, 0, NULL), -77);
	EXPECT_IDS("c1");
	/* no filter: everything */
	ck_assert_int_eq(find_convs(NULL, NULL, 0, NULL), 0);
	EXPECT_IDS("c1", "c2", "c3", "c4", "c5", "c6");
	/* replaced metadata moves in the index */
	ck_assert_int_eq(put_meta("c2", MMETA("team=blue")), 0);
	f.meta = red;
	f.nmeta = 1;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c4", "c6");
	f.meta = &blue;
	ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), 0);
	EXPECT_IDS("c1", "c2", "c3", "c5");
}
END_TEST

START_TEST(find_pages_with_after_limit_and_more)
{
	filter_fixture();
	struct store_kv blue = kv("team", "blue");
	struct store_conv_filter f = { .status = -1, .meta = &blue, .nmeta = 1 };
	int more = 0;
	ck_assert_int_eq(find_convs(&f, NULL, 2, &more), 0);
	EXPECT_IDS("c1", "c3");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(find_convs(&f, "c3", 2, &more), 0);
	EXPECT_IDS("c5");
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(find_convs(&f, "c2", 1, &more), 0); /* after an id not matching: from the next */
	EXPECT_IDS("c3");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(find_convs(&f, "c5", 0, &more), 0);
	ck_assert_uint_eq(C.n, 0);
	ck_assert_int_eq(more, 0);
	/* exactly limit matches: no more */
	ck_assert_int_eq(find_convs(&f, NULL, 3, &more), 0);
	EXPECT_IDS("c1", "c3", "c5");
	ck_assert_int_eq(more, 0);
	/* the full walk pages as well */
	struct store_conv_filter fa = { .status = STORE_ACTIVE };
	ck_assert_int_eq(find_convs(&fa, NULL, 1, &more), 0);
	EXPECT_IDS("c3");
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(find_convs(&fa, "c3", 1, &more), 0);
	EXPECT_IDS("c5");
	ck_assert_int_eq(more, 0);
	/* the callback's return stops it, handed back as is */
	memset(&C, 0, sizeof C);
	C.stop_after = 1;
	C.stop_ret = 42;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_conv_find(t, &f, NULL, 0, collect_conv, &C, NULL), 42);
	store_txn_abort(t);
	ck_assert_uint_eq(C.n, 1);
}
END_TEST

START_TEST(find_bad_filter_is_inval)
{
	filter_fixture();
	char k65[66];
	memset(k65, 'k', 65);
	k65[65] = 0;
	struct store_kv bad[] = { kv("", "v"), kv(k65, "v"), { { "a\0b", 3 }, { "v", 1 } } };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct store_conv_filter f = { .status = -1, .meta = &bad[i], .nmeta = 1 };
		ck_assert_int_eq(find_convs(&f, NULL, 0, NULL), STORE_E_INVAL);
	}
	struct store_conv_filter fs = { .status = 9 };
	ck_assert_int_eq(find_convs(&fs, NULL, 0, NULL), STORE_E_INVAL);
	struct store_conv_filter fn = { .status = -1, .nmeta = 1 };
	ck_assert_int_eq(find_convs(&fn, NULL, 0, NULL), STORE_E_INVAL);
	ck_assert_int_eq(find_convs(NULL, "a b", 0, NULL), STORE_E_INVAL);
	store_txn *t = rbegin();
	ck_assert_int_eq(store_conv_find(t, NULL, NULL, 0, NULL, NULL, NULL), STORE_E_INVAL);
	store_txn_abort(t);
}
END_TEST

START_TEST(backup_copies_what_was_committed)
{
	mkconv("c1");
	append_n("c1", 5, "user_msg");
	ck_assert_int_eq(put_meta("c1", MMETA("team=red")), 0);
	char bk[PATH_MAX + 16];
	snprintf(bk, sizeof bk, "%s.bk", dir);
	ck_assert_int_eq(mkdir(bk, 0700), 0);
	int rc = store_backup(S, bk);
	if (rc == -EOPNOTSUPP) { /* PostgreSQL: pg_dump's job */
		const char *t = getenv("AGENTD_TEST_STORE");
		ck_assert_msg(t && !strcmp(t, "pg"), "only PostgreSQL may refuse a backup");
		rmdir(bk);
		return;
	}
	ck_assert_int_eq(rc, 0);
	/* a write after the copy is not in it */
	append_n("c1", 1, "user_msg");
	store *b;
	struct store_opts o = { .sync = STORE_SYNC_NONE, .read_only = 1 };
	ck_assert_int_eq(store_open(&b, bk, &o), 0);
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(b, STORE_READ, &t), 0);
	uint64_t seq;
	ck_assert_int_eq(store_event_latest_seq(t, "c1", &seq), 0);
	ck_assert_uint_eq(seq, 5);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.metadata, MMETA("team=red")));
	store_txn_abort(t);
	store_close(b);
	/* a directory holding anything is refused, a missing one too */
	ck_assert_int_eq(store_backup(S, bk), -EEXIST);
	char missing[PATH_MAX + 32];
	snprintf(missing, sizeof missing, "%s.none/x", dir);
	ck_assert_int_eq(store_backup(S, missing), -ENOENT);
	char f[PATH_MAX + 16 + 260];
	DIR *d = opendir(bk);
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(f, sizeof f, "%s/%s", bk, e->d_name);
			unlink(f);
		}
	closedir(d);
	rmdir(bk);
}
END_TEST

void conf_metadata_add(TCase *tc)
{
	tcase_add_test(tc, meta_round_trips_and_stamps_updated_at);
	tcase_add_test(tc, meta_survives_other_puts_and_goes_with_delete);
	tcase_add_test(tc, meta_out_of_bounds_is_inval_and_writes_nothing);
	tcase_add_test(tc, find_filters_by_metadata_status_time_and_match);
	tcase_add_test(tc, find_pages_with_after_limit_and_more);
	tcase_add_test(tc, find_bad_filter_is_inval);
	tcase_add_test(tc, backup_copies_what_was_committed);
}
