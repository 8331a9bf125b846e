/* `agentd check`: a consistent store passes, and each kind of disagreement
 * between the log and its derived rows is reported. Stores are built through
 * the store API, the way agentd and its workers write them. */
#include <check.h>
#include <lmdb.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/jsonmp.h"
#include "store/store.h"
#include "supervisor/check.h"
#include "tests/suites.h"

static char dir[64];
static store *st;

static void setup(void)
{
	strcpy(dir, "/tmp/agentd-check-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(store_open(&st, dir, NULL), 0);
}

static void teardown(void)
{
	char cmd[128];
	store_close(st);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Append an event whose content is the JSON text j. */
static void ev(store_txn *t, const char *type, const char *j)
{
	json_t *v = json_loads(j, 0, NULL);
	ck_assert_ptr_nonnull(v);
	struct jsonmp_buf b;
	jsonmp_buf_init(&b);
	ck_assert_int_eq(jsonmp_pack(&b.pk, v), 0);
	struct store_event_in in = { type, { b.sb.data, b.sb.size }, NULL };
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &in, &seq, NULL), 0);
	jsonmp_buf_destroy(&b);
	json_decref(v);
}

static void row(store_txn *t, const char *id, int executor)
{
	static const unsigned char args[] = { 0x80 };
	struct store_tool_call_in in = { id, "approve", executor, { args, 1 }, { 0 } };
	ck_assert_int_eq(store_tool_call_upsert(t, "c1", &in), 0);
}

static void status(store_txn *t, int st_, const char *fsm)
{
	json_t *v = json_loads(fsm, 0, NULL);
	struct jsonmp_buf b;
	jsonmp_buf_init(&b);
	jsonmp_pack(&b.pk, v);
	struct store_conv_patch p = { .set = STORE_SET_STATUS | STORE_SET_FSM, .status = st_,
				      .fsm_state = { b.sb.data, b.sb.size } };
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	jsonmp_buf_destroy(&b);
	json_decref(v);
}

static store_txn *begin(void)
{
	store_txn *t;
	static const unsigned char settings[] = { 0x81, 0xa5, 'm', 'o', 'd', 'e', 'l', 0xa4, 'e', 'c', 'h', 'o' };
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	store_bytes s = { settings, sizeof settings };
	int e = store_conv_create(t, "c1", s);
	ck_assert(e == 0 || e == STORE_E_CONFLICT);
	return t;
}

/* Run the check; returns its problem count, with the report in out. */
static int run(char *out, size_t n)
{
	FILE *f = fmemopen(out, n, "w");
	int p = -1;
	ck_assert_int_eq(check_store(dir, f, &p), 0);
	fclose(f);
	return p;
}

/* A conversation that went through a turn with a human call, resolved. */
static void good_log(store_txn *t)
{
	ev(t, "user_msg", "{\"text\":\"hi\"}");
	ev(t, "assistant_msg", "{\"text\":\"calling\",\"context_seq\":1}");
	ev(t, "tool_call", "{\"tool_call_id\":\"t1\",\"name\":\"approve\",\"args\":{},\"executor\":\"human\"}");
	ev(t, "suspension", "{\"tool_call_id\":\"t1\",\"prompt\":\"ok?\"}");
	row(t, "t1", STORE_EXEC_HUMAN);
}

START_TEST(consistent_store_passes)
{
	char out[4096];
	store_txn *t = begin();
	good_log(t);
	ck_assert_int_eq(store_expiry_schedule(t, "t1", 5000), 0);
	status(t, STORE_SUSPENDED, "{\"state\":\"awaiting_input\",\"pending\":{\"t1\":{}},\"last_seq\":4}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 0);
	ck_assert_ptr_nonnull(strstr(out, "consistent"));
	/* Resolved with its resolution event, then answered and idle. */
	t = begin();
	ck_assert_int_eq(store_tool_call_resolve(t, "t1", STORE_TC_RESOLVED, (store_bytes){ 0 }, NULL), 0);
	ev(t, "resolution", "{\"tool_call_id\":\"t1\",\"status\":\"resolved\",\"result\":null}");
	ev(t, "assistant_msg", "{\"text\":\"done\",\"context_seq\":5}");
	status(t, STORE_IDLE, "{\"state\":\"idle\",\"pending\":{},\"last_seq\":6}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 0);
}
END_TEST

START_TEST(row_without_event_and_event_without_row)
{
	char out[4096];
	store_txn *t = begin();
	good_log(t);
	row(t, "ghost", STORE_EXEC_SERVER);
	ev(t, "tool_call", "{\"tool_call_id\":\"norow\",\"name\":\"x\",\"args\":{},\"executor\":\"server\"}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_ge(run(out, sizeof out), 2);
	ck_assert_ptr_nonnull(strstr(out, "ghost has no tool_call event"));
	ck_assert_ptr_nonnull(strstr(out, "norow is in the log but has no row"));
}
END_TEST

START_TEST(settled_twice_and_status_mismatch)
{
	char out[4096];
	store_txn *t = begin();
	good_log(t);
	ev(t, "resolution", "{\"tool_call_id\":\"t1\",\"status\":\"resolved\",\"result\":1}");
	ev(t, "resolution", "{\"tool_call_id\":\"t1\",\"status\":\"expired\",\"result\":null}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_ge(run(out, sizeof out), 2);
	ck_assert_ptr_nonnull(strstr(out, "settled 2 times"));
	ck_assert_ptr_nonnull(strstr(out, "row pending but settled in the log"));
}
END_TEST

START_TEST(state_disagrees_with_log)
{
	char out[4096];
	store_txn *t = begin();
	ev(t, "user_msg", "{\"text\":\"hi\"}");
	/* idle although a turn is owed */
	status(t, STORE_IDLE, "{\"state\":\"idle\",\"pending\":{},\"last_seq\":1}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "status idle but the log owes a model turn"));
	/* suspended with nothing pending */
	t = begin();
	ev(t, "assistant_msg", "{\"text\":\"x\",\"context_seq\":1}");
	status(t, STORE_SUSPENDED, "{\"state\":\"awaiting_input\",\"pending\":{},\"last_seq\":2}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "status suspended but no human tool call is pending"));
}
END_TEST

START_TEST(expiry_without_pending_row)
{
	char out[4096];
	store_txn *t = begin();
	good_log(t);
	ck_assert_int_eq(store_expiry_schedule(t, "t1", 5000), 0);
	status(t, STORE_SUSPENDED, "{\"state\":\"awaiting_input\",\"pending\":{},\"last_seq\":4}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	/* fsm_state.pending lacks the call */
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "fsm_state.pending lacks pending call t1"));
}
END_TEST

START_TEST(a_second_answer_to_one_turn)
{
	char out[4096];
	store_txn *t = begin();
	ev(t, "user_msg", "{\"text\":\"hi\"}");
	ev(t, "assistant_msg", "{\"text\":\"a\",\"context_seq\":1}");
	ev(t, "assistant_msg", "{\"text\":\"b\",\"context_seq\":1}");
	status(t, STORE_IDLE, "{\"state\":\"idle\",\"pending\":{},\"last_seq\":3}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "a second model answer for context_seq 1"));
}
END_TEST

START_TEST(missing_store_is_an_error)
{
	char out[512];
	FILE *f = fmemopen(out, sizeof out, "w");
	int p = -1;
	ck_assert_int_lt(check_store("/nonexistent/agentd", f, &p), 0);
	ck_assert_int_eq(p, 0);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(out, "cannot open the store"));
}
END_TEST

/* c1 made with its log beginning at first (a fork's, after its summary). */
static store_txn *begin_at(uint64_t first)
{
	store_txn *t;
	static const unsigned char settings[] = { 0x81, 0xa5, 'm', 'o', 'd', 'e', 'l', 0xa4, 'e', 'c', 'h', 'o' };
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	ck_assert_int_eq(store_conv_create_at(t, "c1", (store_bytes){ settings, sizeof settings }, first), 0);
	return t;
}

static void summary(store_txn *t, uint64_t from, uint64_t to)
{
	static const unsigned char text[] = { 0x81, 0xa4, 't', 'e', 'x', 't', 0xa1, 's' };
	ck_assert_int_eq(store_summary_put(t, "c1", from, to, (store_bytes){ text, sizeof text }, NULL), 0);
}

START_TEST(a_log_that_begins_after_its_summary)
{
	char out[4096];
	store_txn *t = begin_at(11);
	/* The settlement of a call whose tool_call the summary stands in for. */
	ev(t, "tool_result", "{\"tool_call_id\":\"old\",\"status\":\"resolved\",\"result\":1}");
	ev(t, "assistant_msg", "{\"text\":\"ok\",\"context_seq\":11}");
	summary(t, 1, 10);
	status(t, STORE_IDLE, "{\"state\":\"idle\",\"pending\":{},\"last_seq\":12}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 0);
	ck_assert_ptr_nonnull(strstr(out, "consistent"));
	/* A later summary still covers the start; settling that call again does not pass. */
	t = begin();
	summary(t, 11, 11);
	ev(t, "tool_result", "{\"tool_call_id\":\"old\",\"status\":\"resolved\",\"result\":2}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "c1: tool call old settled 2 times (seq 13)"));
}
END_TEST

START_TEST(a_log_that_begins_after_1_needs_a_summary)
{
	char out[4096];
	store_txn *t = begin_at(11);
	ev(t, "user_msg", "{\"text\":\"hi\"}");
	ev(t, "assistant_msg", "{\"text\":\"ok\",\"context_seq\":11}");
	status(t, STORE_IDLE, "{\"state\":\"idle\",\"pending\":{},\"last_seq\":12}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "c1: the log begins at seq 11 but no summary stands in for seqs 1..10"));
	/* A summary that ends short of the start does not either. */
	t = begin();
	summary(t, 1, 9);
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "no summary stands in for seqs 1..10"));
}
END_TEST

/* Remove event seq of conversation number 1 (the store's first) behind the store's back. */
static void drop_event(uint64_t seq)
{
	MDB_env *env;
	MDB_txn *mt;
	MDB_dbi dbi;
	unsigned char k[16] = { 0, 0, 0, 0, 0, 0, 0, 1 }; /* (num, seq), big-endian */
	for (int i = 0; i < 8; i++)
		k[8 + i] = (unsigned char)(seq >> (56 - 8 * i));
	MDB_val key = { 16, k };
	ck_assert_int_eq(mdb_env_create(&env), 0);
	ck_assert_int_eq(mdb_env_set_maxdbs(env, 64), 0);
	ck_assert_int_eq(mdb_env_open(env, dir, 0, 0600), 0);
	ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &mt), 0);
	ck_assert_int_eq(mdb_dbi_open(mt, "events", 0, &dbi), 0);
	ck_assert_int_eq(mdb_del(mt, dbi, &key, NULL), 0);
	ck_assert_int_eq(mdb_txn_commit(mt), 0);
	mdb_env_close(env);
}

START_TEST(a_gap_in_a_log_that_begins_after_1)
{
	char out[4096];
	store_txn *t = begin_at(11);
	ev(t, "user_msg", "{\"text\":\"a\"}");
	ev(t, "user_msg", "{\"text\":\"b\"}");
	ev(t, "user_msg", "{\"text\":\"c\"}");
	ev(t, "assistant_msg", "{\"text\":\"ok\",\"context_seq\":13}");
	summary(t, 1, 10);
	status(t, STORE_IDLE, "{\"state\":\"idle\",\"pending\":{},\"last_seq\":14}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(run(out, sizeof out), 0);
	store_close(st);
	st = NULL;
	drop_event(12); /* inside the log */
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "c1: seq 13 follows 11: the log must be 11..N without a gap"));
	drop_event(11); /* its first event */
	ck_assert_int_eq(run(out, sizeof out), 1);
	ck_assert_ptr_nonnull(strstr(out, "c1: seq 13 follows 10: the log must be 11..N without a gap"));
	ck_assert_int_eq(store_open(&st, dir, NULL), 0);
}
END_TEST

static int count_conv(void *arg, const struct store_conv *c)
{
	(void)c;
	++*(int *)arg;
	return 0;
}

/* A store made before the later named databases existed, opened read-only (as
 * `agentd check` opens it): it opens, checks, and its conversations have no
 * metadata; a writable open then adds the databases. */
START_TEST(an_older_store_opens_read_only)
{
	char out[4096];
	store_txn *t = begin();
	good_log(t);
	status(t, STORE_SUSPENDED, "{\"state\":\"awaiting_input\",\"pending\":{\"t1\":{}},\"last_seq\":4}");
	ck_assert_int_eq(store_txn_commit(t), 0);
	store_close(st);
	st = NULL;
	MDB_env *env;
	MDB_txn *mt;
	MDB_dbi dbi;
	ck_assert_int_eq(mdb_env_create(&env), 0);
	ck_assert_int_eq(mdb_env_set_maxdbs(env, 64), 0);
	ck_assert_int_eq(mdb_env_open(env, dir, 0, 0600), 0);
	ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &mt), 0);
	const char *later[] = { "conv_meta", "meta_index", "warnings", "warning_at", "runs", "log_starts" };
	for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
		ck_assert_int_eq(mdb_dbi_open(mt, later[i], 0, &dbi), 0);
		ck_assert_int_eq(mdb_drop(mt, dbi, 1), 0);
	}
	ck_assert_int_eq(mdb_txn_commit(mt), 0);
	mdb_env_close(env);
	ck_assert_int_eq(run(out, sizeof out), 0);
	ck_assert_ptr_nonnull(strstr(out, "consistent"));
	struct store_opts ro = { .read_only = 1 };
	ck_assert_int_eq(store_open(&st, dir, &ro), 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.metadata.len, 0);
	struct store_kv kv = { { "k", 1 }, { "v", 1 } };
	struct store_conv_filter f = { .status = -1, .meta = &kv, .nmeta = 1 };
	int n = 0;
	ck_assert_int_eq(store_conv_find(t, &f, NULL, 0, count_conv, &n, NULL), 0);
	ck_assert_int_eq(n, 0);
	f.nmeta = 0;
	ck_assert_int_eq(store_conv_find(t, &f, NULL, 0, count_conv, &n, NULL), 0);
	ck_assert_int_eq(n, 1);
	store_txn_abort(t);
	store_close(st);
	ck_assert_int_eq(store_open(&st, dir, NULL), 0); /* writable: creates them */
}
END_TEST

Suite *make_consistency_suite(void)
{
	Suite *s = suite_create("consistency");
	TCase *tc = tcase_create("check");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, consistent_store_passes);
	tcase_add_test(tc, row_without_event_and_event_without_row);
	tcase_add_test(tc, settled_twice_and_status_mismatch);
	tcase_add_test(tc, state_disagrees_with_log);
	tcase_add_test(tc, expiry_without_pending_row);
	tcase_add_test(tc, a_second_answer_to_one_turn);
	tcase_add_test(tc, missing_store_is_an_error);
	tcase_add_test(tc, an_older_store_opens_read_only);
	tcase_add_test(tc, a_log_that_begins_after_its_summary);
	tcase_add_test(tc, a_log_that_begins_after_1_needs_a_summary);
	tcase_add_test(tc, a_gap_in_a_log_that_begins_after_1);
	suite_add_tcase(s, tc);
	return s;
}
