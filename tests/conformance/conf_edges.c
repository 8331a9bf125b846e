/*
 * Edges: callback returns that never poison a write txn, a poisoned txn,
 * reader slots exhausted, opening with no options, close-on-exec descriptors
 * and the longest tool-call id (cases "edges" and "audit_edges").
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/conformance/conformance.h"

static int conv_cb_ret;
static int conv_ret(void *arg, const struct store_conv *c)
{
	(void)arg;
	(void)c;
	return conv_cb_ret;
}

static int tc_ret(void *arg, const struct store_tool_call *tc)
{
	(void)tc;
	return *(const int *)arg;
}

static int exp_ret(void *arg, const struct store_expiry *e)
{
	(void)e;
	return *(const int *)arg;
}

static int mc_ret(void *arg, const struct store_model_call *mc)
{
	(void)mc;
	return *(const int *)arg;
}

static int ev_ret(void *arg, const struct store_event *e)
{
	(void)e;
	return *(const int *)arg;
}

/* A callback's return stops an iteration and comes back unchanged; it is
 * the caller's value, not a store failure, so it never poisons the txn,
 * whatever the value (even one that looks like a store code). */
START_TEST(callback_return_never_poisons_write_txn)
{
	mkconv("c1");
	append_n("c1", 2, "user_msg");
	mktc("c1", "tc");
	schedule("tc", T0 + 1);
	const int rets[] = { 1, -EIO, STORE_E_CORRUPT, STORE_E_FULL, -ENOMEM };
	for (size_t i = 0; i < sizeof rets / sizeof rets[0]; i++) {
		int ret = rets[i];
		struct store_range r = { 0 };
		store_txn *t = wbegin();
		conv_cb_ret = ret;
		ck_assert_int_eq(store_conv_list(t, -1, NULL, 0, conv_ret, NULL, NULL), ret);
		ck_assert_int_eq(store_events_stream(t, "c1", &r, ev_ret, &ret), ret);
		ck_assert_int_eq(store_load_since(t, "c1", NULL, NULL, ev_ret, &ret), ret);
		ck_assert_int_eq(store_tool_calls_list(t, "c1", 0, tc_ret, &ret), ret);
		ck_assert_int_eq(store_expiries_due(t, INT64_MAX, exp_ret, &ret), ret);
		struct store_event_in e = ev("user_msg", mint(1), NULL);
		uint64_t seq;
		ck_assert_msg(store_event_append(t, "c1", &e, &seq, NULL) == 0, "after callback %d", ret);
		ck_assert_msg(store_txn_commit(t) == 0, "commit after callback %d", ret);
	}
	ck_assert_uint_eq(latest("c1"), 7);
}
END_TEST

START_TEST(audit_callback_return_never_poisons_write_txn)
{
	mkconv("c1");
	put_mc("c1", 1);
	int ret = STORE_E_CORRUPT;
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_calls_list(t, "c1", mc_ret, &ret), ret);
	ck_assert_int_eq(store_conv_put_fsm(t, "c1", mint(1)), 0);
	commit(t);
}
END_TEST

START_TEST(poisoned_txn_fails_every_later_operation)
{
	OPTS.map_size = OPTS.max_map_size = (size_t)1 << 20;
	reopen_store();
	mkconv("c1");
	static char blob[2 << 20];
	msgpack_pack_bin_with_body(B(), blob, sizeof blob);
	struct store_event_in big = ev("blob", built(), NULL);
	store_txn *t = wbegin();
	uint64_t seq;
	struct store_conv c;
	ck_assert_int_eq(store_event_append(t, "c1", &big, &seq, NULL), STORE_E_FULL);
	/* reads and writes alike, and the commit, give the poisoning error */
	ck_assert_int_eq(store_conv_get(t, "c1", &c), STORE_E_FULL);
	ck_assert_int_eq(store_event_latest_seq(t, "c1", &seq), STORE_E_FULL);
	ck_assert_int_eq(store_conv_create(t, "c2", mmap0()), STORE_E_FULL);
	ck_assert_int_eq(store_txn_commit(t), STORE_E_FULL);
	/* the failed commit freed the txn: a new one begins, nothing was written */
	ck_assert_uint_eq(latest("c1"), 0);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
}
END_TEST

START_TEST(reader_slots_exhausted_is_eagain)
{
	/* a fresh directory: an existing reader table may keep its size */
	char sub[PATH_MAX + 16];
	snprintf(sub, sizeof sub, "%s/readers", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	store_close(S);
	S = NULL;
	OPTS.max_readers = 2;
	ck_assert_int_eq(store_open(&S, sub, &OPTS), 0);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.max_readers, 2);
	ck_assert_uint_lt(st.max_readers, 256);
	store_txn *r[256];
	size_t n = 0;
	int rc;
	while ((rc = store_txn_begin(S, STORE_READ, &r[n])) == 0) {
		n++;
		ck_assert_uint_lt(n, 256);
	}
	ck_assert_int_eq(rc, -EAGAIN);
	ck_assert_uint_ge(n, 2);
	/* a writer needs no reader slot */
	store_txn *w = wbegin();
	ck_assert_int_eq(store_conv_create(w, "c1", mmap0()), 0);
	commit(w);
	store_txn_abort(r[--n]); /* a freed slot serves the next reader */
	ck_assert_int_eq(store_txn_begin(S, STORE_READ, &r[n]), 0);
	n++;
	while (n)
		store_txn_abort(r[--n]);
}
END_TEST

static int64_t realtime_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(null_opts_open_with_defaults)
{
	store_close(S);
	S = NULL;
	ck_assert_int_eq(store_open(&S, dir, NULL), 0);
	struct store_stat st;
	ck_assert_int_eq(store_stat(S, &st), 0);
	ck_assert_uint_ge(st.map_size, (uint64_t)256 << 20); /* 0: 256 MiB */
	ck_assert_uint_ge(st.max_readers, 1024);
	ck_assert_int_eq(st.sync, STORE_SYNC_FULL);
	/* the default clock is CLOCK_REALTIME in ms */
	int64_t lo = realtime_ms();
	int64_t now = store_now(S);
	store_txn *t = wbegin();
	int64_t tnow = store_txn_now(t);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), 0);
	commit(t);
	int64_t hi = realtime_ms();
	ck_assert_int_ge(now, lo);
	ck_assert_int_le(now, hi);
	ck_assert_int_ge(tnow, now);
	ck_assert_int_le(tnow, hi);
	t = rbegin();
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_int_eq(c.created_at, tnow);
	store_txn_abort(t);
}
END_TEST

/* Descriptors without FD_CLOEXEC, as a bitmap over fds 0..1023. */
static void inheritable_fds(unsigned char *set)
{
	memset(set, 0, 1024);
	for (int fd = 0; fd < 1024; fd++) {
		int fl = fcntl(fd, F_GETFD);
		if (fl >= 0 && !(fl & FD_CLOEXEC))
			set[fd] = 1;
	}
}

START_TEST(store_descriptors_are_cloexec)
{
	store_close(S);
	S = NULL;
	unsigned char before[1024], after[1024];
	inheritable_fds(before);
	open_store();
	mkconv("c1"); /* descriptors a backend opens lazily, too */
	store_txn *r = rbegin();
	inheritable_fds(after);
	store_txn_abort(r);
	for (int fd = 0; fd < 1024; fd++)
		ck_assert_msg(!after[fd] || before[fd], "fd %d opened by the store is inheritable", fd);
}
END_TEST

START_TEST(longest_tool_call_id)
{
	char id[STORE_ID_MAX + 1];
	memset(id, 'T', STORE_ID_MAX);
	id[STORE_ID_MAX] = 0;
	mkconv("c1");
	mktc("c1", id);
	mktc("c1", "short");
	schedule(id, T0 + 9);
	schedule("short", T0 + 9);
	ck_assert_int_eq(due(T0 + 9), 0);
	EXPECT_LIST(id, "short"); /* tie: id order ('T' < 's') */
	store_txn *t = wbegin();
	uint32_t att;
	ck_assert_int_eq(store_tool_call_attempt(t, id, &att), 0);
	ck_assert_int_eq(store_tool_call_resolve(t, id, STORE_TC_RESOLVED, mint(1), NULL), 0);
	commit(t);
	ck_assert_int_eq(due(INT64_MAX), 0);
	EXPECT_LIST("short");
	t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	int64_t d;
	ck_assert_int_eq(earliest(&d), STORE_E_NOTFOUND);
}
END_TEST

void conf_edges_add(TCase *tc)
{
	tcase_add_test(tc, callback_return_never_poisons_write_txn);
	tcase_add_test(tc, poisoned_txn_fails_every_later_operation);
	tcase_add_test(tc, reader_slots_exhausted_is_eagain);
	tcase_add_test(tc, null_opts_open_with_defaults);
	tcase_add_test(tc, store_descriptors_are_cloexec);
	tcase_add_test(tc, longest_tool_call_id);
}

void conf_audit_edges_add(TCase *tc)
{
	tcase_add_test(tc, audit_callback_return_never_poisons_write_txn);
}
