/*
 * Schedules (durable wakeups of a conversation): put, get, list per
 * conversation and all, what is due in order, moving one to its next time
 * (a cron schedule fired), dropping one (a once schedule fired, or
 * cancelled), and that a delete of the conversation takes its schedules
 * (case "schedules").
 */
#include <check.h>
#include <string.h>

#include "tests/conformance/conformance.h"

#define SC_MAX 16
static struct {
	size_t n;
	char id[SC_MAX][STORE_ID_MAX + 1];
	char conv[SC_MAX][STORE_ID_MAX + 1];
	char cron[SC_MAX][STORE_CRON_MAX + 1];
	char text[SC_MAX][64];
	int64_t due[SC_MAX];
} K;

static int collect_sched(void *arg, const struct store_schedule *s)
{
	(void)arg;
	ck_assert_uint_lt(K.n, SC_MAX);
	copy_id(K.id[K.n], s->id);
	copy_id(K.conv[K.n], s->conversation);
	ck_assert_uint_le(s->cron.len, STORE_CRON_MAX);
	if (s->cron.len) /* none: ptr may be NULL */
		memcpy(K.cron[K.n], s->cron.ptr, s->cron.len);
	K.cron[K.n][s->cron.len] = 0;
	ck_assert_uint_lt(s->text.len, 64);
	if (s->text.len)
		memcpy(K.text[K.n], s->text.ptr, s->text.len);
	K.text[K.n][s->text.len] = 0;
	K.due[K.n++] = s->due;
	return 0;
}

static int list(const char *conv)
{
	memset(&K, 0, sizeof K);
	store_txn *t = rbegin();
	int rc = store_schedules_list(t, conv, collect_sched, NULL);
	store_txn_abort(t);
	return rc;
}

static int sdue(int64_t now, size_t limit)
{
	memset(&K, 0, sizeof K);
	store_txn *t = wbegin();
	int rc = store_schedules_due(t, now, limit, collect_sched, NULL);
	store_txn_abort(t);
	return rc;
}

static int put(const char *id, const char *conv, int64_t due, const char *cron, const char *text)
{
	store_txn *t = wbegin();
	int rc = store_schedule_put(t, id, conv, due, cron, (store_bytes){ text, strlen(text) });
	if (rc == 0)
		commit(t);
	else
		store_txn_abort(t);
	return rc;
}

static void expect_ids(const char *const *want, size_t n, int line)
{
	ck_assert_msg(K.n == n, "line %d: %zu schedules, want %zu", line, K.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(!strcmp(K.id[i], want[i]), "line %d: [%zu] %s, want %s", line, i, K.id[i], want[i]);
}
#define EXPECT_SCHED(...)                                                      \
	do {                                                                   \
		const char *const want_[] = { __VA_ARGS__ };                   \
		expect_ids(want_, sizeof want_ / sizeof want_[0], __LINE__);   \
	} while (0)

/* Rows come back as put, in due then id order, per conversation or all,
 * and survive a reopen; earliest is the first due. */
START_TEST(schedule_put_get_list)
{
	mkconv("c1");
	mkconv("c2");
	int64_t d = 0;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_schedule_earliest(t, &d), STORE_E_NOTFOUND);
	store_txn_abort(t);
	ck_assert_int_eq(put("sb", "c1", T0 + 2000, NULL, "wake b"), 0);
	ck_assert_int_eq(put("sa", "c1", T0 + 2000, "*/5 * * * *", "wake a"), 0);
	ck_assert_int_eq(put("sc", "c2", T0 + 1000, "", "wake c"), 0);
	ck_assert_int_eq(put("sd", "c2", T0 + 3000, NULL, ""), 0); /* an empty text is a text */
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	ck_assert_int_eq(list(NULL), 0);
	EXPECT_SCHED("sc", "sa", "sb", "sd");
	ck_assert_str_eq(K.conv[0], "c2");
	ck_assert_str_eq(K.cron[1], "*/5 * * * *");
	ck_assert_str_eq(K.cron[0], ""); /* "" is once, as NULL */
	ck_assert_str_eq(K.text[2], "wake b");
	ck_assert_str_eq(K.text[3], "");
	ck_assert_int_eq(K.due[1], T0 + 2000);
	ck_assert_int_eq(list("c1"), 0);
	EXPECT_SCHED("sa", "sb");
	ck_assert_int_eq(list("c9"), 0); /* no such conversation: none */
	ck_assert_uint_eq(K.n, 0);
	struct store_schedule s;
	t = rbegin();
	ck_assert_int_eq(store_schedule_get(t, "sa", &s), 0);
	ck_assert(bytes_eq_s(s.conversation, "c1"));
	ck_assert(bytes_eq_s(s.text, "wake a"));
	ck_assert_int_eq(s.due, T0 + 2000);
	ck_assert_int_eq(store_schedule_get(t, "zz", &s), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_schedule_earliest(t, &d), 0);
	ck_assert_int_eq(d, T0 + 1000);
	store_txn_abort(t);
}
END_TEST

/* What the store refuses writes nothing. */
START_TEST(schedule_refusals)
{
	mkconv("c1");
	ck_assert_int_eq(put("s1", "nope", T0, NULL, "x"), STORE_E_NOTFOUND);
	ck_assert_int_eq(put("s1", "c1", T0, NULL, "x"), 0);
	ck_assert_int_eq(put("s1", "c1", T0 + 5, NULL, "y"), STORE_E_CONFLICT); /* id taken */
	ck_assert_int_eq(put("bad id!", "c1", T0, NULL, "x"), STORE_E_INVAL);
	ck_assert_int_eq(put("s2", "bad id!", T0, NULL, "x"), STORE_E_INVAL);
	ck_assert_int_eq(put("s2", "c1", 0, NULL, "x"), STORE_E_INVAL);
	ck_assert_int_eq(put("s2", "c1", T0, "* * *\n* *", "x"), STORE_E_INVAL); /* not printable */
	char longcron[STORE_CRON_MAX + 2];
	memset(longcron, '*', sizeof longcron - 1);
	longcron[sizeof longcron - 1] = 0;
	ck_assert_int_eq(put("s2", "c1", T0, longcron, "x"), STORE_E_INVAL);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_schedule_put(t, "s2", "c1", T0, NULL, (store_bytes){ "x", STORE_SCHEDULE_TEXT_MAX + 1 }),
			 STORE_E_INVAL);
	ck_assert_int_eq(store_schedule_move(t, "zz", T0), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_schedule_move(t, "s1", 0), STORE_E_INVAL);
	ck_assert_int_eq(store_schedule_drop(t, "zz"), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_schedule_drop(t, "bad id!"), STORE_E_INVAL);
	commit(t);
	t = rbegin();
	ck_assert_int_eq(store_schedule_put(t, "s3", "c1", T0, NULL, (store_bytes){ "x", 1 }), STORE_E_INVAL);
	store_txn_abort(t);
	ck_assert_int_eq(list(NULL), 0);
	EXPECT_SCHED("s1");
	ck_assert_str_eq(K.text[0], "x");
	ck_assert_int_eq(K.due[0], T0);
}
END_TEST

/* Due: due <= now, earliest first, at most limit. A fired once schedule
 * is dropped, a cron one moved to its next time: in the firing's
 * transaction, so an aborted firing leaves it due, a committed one does
 * not give it again. */
START_TEST(schedule_due_move_drop)
{
	mkconv("c1");
	ck_assert_int_eq(put("once", "c1", T0 + 100, NULL, "o"), 0);
	ck_assert_int_eq(put("cron", "c1", T0 + 200, "* * * * *", "c"), 0);
	ck_assert_int_eq(put("late", "c1", T0 + 9000, NULL, "l"), 0);
	ck_assert_int_eq(sdue(T0 + 99, 0), 0);
	ck_assert_uint_eq(K.n, 0);
	ck_assert_int_eq(sdue(T0 + 200, 0), 0);
	EXPECT_SCHED("once", "cron");
	ck_assert_int_eq(sdue(T0 + 200, 1), 0);
	EXPECT_SCHED("once");
	/* an aborted firing changes nothing */
	store_txn *t = wbegin();
	ck_assert_int_eq(store_schedule_drop(t, "once"), 0);
	ck_assert_int_eq(store_schedule_move(t, "cron", T0 + 60200), 0);
	store_txn_abort(t);
	ck_assert_int_eq(sdue(T0 + 200, 0), 0);
	EXPECT_SCHED("once", "cron");
	t = wbegin();
	ck_assert_int_eq(store_schedule_drop(t, "once"), 0);
	ck_assert_int_eq(store_schedule_move(t, "cron", T0 + 60200), 0);
	commit(t);
	OPTS.sync = STORE_SYNC_FULL;
	reopen_store();
	ck_assert_int_eq(sdue(T0 + 9000, 0), 0);
	EXPECT_SCHED("late");
	ck_assert_int_eq(list(NULL), 0);
	EXPECT_SCHED("late", "cron");
	ck_assert_int_eq(K.due[1], T0 + 60200);
	ck_assert_str_eq(K.cron[1], "* * * * *");
	ck_assert_str_eq(K.text[1], "c"); /* a move keeps the rest */
	int64_t d;
	t = rbegin();
	ck_assert_int_eq(store_schedule_earliest(t, &d), 0);
	ck_assert_int_eq(d, T0 + 9000);
	store_txn_abort(t);
}
END_TEST

/* Deleting a conversation takes its schedules, and only its. */
START_TEST(schedule_goes_with_its_conversation)
{
	mkconv("c1");
	mkconv("c2");
	ck_assert_int_eq(put("s1", "c1", T0 + 10, NULL, "a"), 0);
	ck_assert_int_eq(put("s2", "c2", T0 + 20, "0 * * * *", "b"), 0);
	ck_assert_int_eq(put("s3", "c1", T0 + 30, NULL, "c"), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	commit(t);
	ck_assert_int_eq(list(NULL), 0);
	EXPECT_SCHED("s2");
	ck_assert_int_eq(sdue(T0 + 100, 0), 0);
	EXPECT_SCHED("s2");
	/* a new conversation of the same id has none */
	mkconv("c1");
	ck_assert_int_eq(list("c1"), 0);
	ck_assert_uint_eq(K.n, 0);
}
END_TEST

void conf_schedules_add(TCase *tc)
{
	tcase_add_test(tc, schedule_put_get_list);
	tcase_add_test(tc, schedule_refusals);
	tcase_add_test(tc, schedule_due_move_drop);
	tcase_add_test(tc, schedule_goes_with_its_conversation);
}
