/* The group commit and the writer thread (supervisor/commit.c) on a real
 * store, with a table of ops of this file's own and fake reply slots: every
 * write of an iteration commits in one transaction; a write that poisons it
 * is left out alone and the others commit; a refused write fails alone
 * without a retry; replies come in request order, and a read queued behind
 * a write of its client sees it while one that is not does not; a group of
 * sends commits on the writer thread and is answered once it is done.
 *
 * The slots are this file's (control.c is not linked): each answer is
 * logged in the order it is given, which is the order the client would read
 * them in (control.c writes a slot's reply out only in request order). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/commit.h"
#include "supervisor/control.h"
#include "supervisor/durable.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "tests/unit/store_dir.h"

/* ---- fake reply slots (control.h) ------------------------------------- */

struct client {
	int only_free; /* what control_only_free answers */
};
struct slot {
	struct client *c;
};

#define MAXR 16
static struct answer {
	json_int_t id; /* the request's id */
	int err;       /* 0: slot_ok */
	json_t *reply;
} answers[MAXR];
static int nanswers;

static void answer(json_t *id, int err, json_t *reply)
{
	ck_assert_int_lt(nanswers, MAXR);
	answers[nanswers++] = (struct answer){ json_integer_value(id), err, reply };
}

void slot_ok(struct slot *s, json_t *id, json_t *obj)
{
	answer(id, 0, obj);
}
void slot_error(struct slot *s, json_t *id, int err, const char *msg)
{
	answer(id, err, NULL);
}
void slot_error_with(struct slot *s, json_t *id, int err, const char *msg, json_t *extra)
{
	json_decref(extra);
	answer(id, err, NULL);
}
struct client *slot_client(const struct slot *s)
{
	return s->c;
}
void slot_need(struct slot *s, uint64_t txnid)
{
}
void client_flush(struct client *c)
{
}
void control_batch_done(struct client *c)
{
}
int control_only_free(const struct client *c)
{
	return c->only_free;
}
void control_drain_watches(void)
{
}
uid_t control_uid(const struct client *c)
{
	return 0;
}

/* ---- the ops of this test ----------------------------------------------- */

static void t_ping(store_txn *t, struct job *j)
{
	j->reply = json_object();
}

/* get: the conversation exists ({}), or not found. */
static void t_get(store_txn *t, struct job *j)
{
	struct store_conv c;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e)
		job_store_error(j, e, "conversation");
	else
		j->reply = json_object();
}

static int t_create(store_txn *t, struct job *j, struct wres *r)
{
	int e = store_conv_create(t, j->rq.conv, (store_bytes){ "\x80", 1 });
	if (e)
		return job_store_error(j, e, "create"), e == STORE_E_CONFLICT ? 0 : e;
	j->reply = json_object();
	return 0;
}

/* A write that meets a damaged record after it wrote: it poisons the group
 * transaction, which must not commit what it wrote. */
static int t_damaged(store_txn *t, struct job *j, struct wres *r)
{
	int e = store_conv_create(t, j->rq.conv, (store_bytes){ "\x80", 1 });
	return e ? e : STORE_E_CORRUPT;
}

/* A write refused before it writes: the transaction stays usable. */
static int t_refused(store_txn *t, struct job *j, struct wres *r)
{
	job_error(j, PERR_CONFLICT, "refused");
	return 0;
}

static int afters;
static void t_after(struct job *j, struct wres *r)
{
	afters++;
}

static int t_send(store_txn *t, struct job *j, struct wres *r)
{
	struct store_event_in ev = { "user_msg", { "\xa1x", 2 }, NULL };
	uint64_t seq;
	int dup;
	int e = store_events_append(t, j->rq.conv, &ev, 1, &seq, &dup);
	if (e)
		return job_store_error(j, e, "send"), e;
	r->seq = seq;
	j->reply = json_pack("{sI}", "seq", (json_int_t)seq);
	return 0;
}

static const struct commit_op table[OP_COUNT] = {
	[OP_PING] = { OPF_FIRST, t_ping, NULL, NULL },
	[OP_GET] = { OPF_TXN, t_get, NULL, NULL },
	[OP_CREATE] = { OPF_WRITE, NULL, t_create, t_after },
	[OP_UPDATE] = { OPF_WRITE, NULL, t_damaged, t_after },
	[OP_FORK] = { OPF_WRITE, NULL, t_refused, t_after },
	[OP_SEND] = { OPF_WRITE, NULL, t_send, t_after },
};

/* ---- the fixture: a store in a fresh directory, the loop, the frontier -- */

static char dir[64];
static store *st;
static struct config cfg;
static int forgets;

static void forget(void)
{
	forgets++;
}

static void advanced(uint64_t frontier)
{
}

static int no_more(void)
{
	return 0;
}

static const struct gate_hooks no_members;
static struct commit_env env;

static void setup(void)
{
	strcpy(dir, "/tmp/agentd-check-commit-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct store_opts so = { .sync = STORE_SYNC_FULL };
	ck_assert_int_eq(store_open(&st, dir, &so), 0);
	ck_assert_int_eq(loop_open(), 0);
	ck_assert_int_eq(durable_open(st, 1, advanced, no_more, NULL), 0);
	gate_init(st, &no_members);
	cfg.sync = STORE_SYNC_FULL;
	env = (struct commit_env){ &cfg, st, table, store_txn_commit, forget };
	commit_init(&env);
	nanswers = afters = forgets = 0;
}

static void teardown(void)
{
	commit_close();
	durable_close();
	for (int i = 0; i < nanswers; i++)
		json_decref(answers[i].reply);
	store_close(st);
	loop_close();
	ck_assert_int_eq(store_dir_remove(dir), 0);
}

static struct client one = { 0 };
static struct slot slots[MAXR];

/* Request k of client c: op on conv, queued for this iteration. */
static void request(int k, struct client *c, int op, const char *conv, int after_write)
{
	struct request rq = { 0 };
	rq.root = json_pack("{sisi}", "id", k, "op", op);
	ck_assert_ptr_nonnull(rq.root);
	if (conv)
		ck_assert_int_eq(json_object_set_new(rq.root, "conversation", json_string(conv)), 0);
	rq.id = json_object_get(rq.root, "id");
	rq.op = op;
	rq.conv = conv ? json_string_value(json_object_get(rq.root, "conversation")) : NULL;
	slots[k].c = c;
	ck_assert_int_eq(commit_request(c, &slots[k], &rq, 0, after_write), 0);
}

static int exists(const char *conv)
{
	store_txn *t;
	struct store_conv c;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	int e = store_conv_get(t, conv, &c);
	store_txn_abort(t);
	ck_assert(e == 0 || e == STORE_E_NOTFOUND);
	return e == 0;
}

static uint64_t last_seq(const char *conv)
{
	store_txn *t;
	uint64_t seq = 0;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	ck_assert_int_eq(store_event_latest_seq(t, conv, &seq), 0);
	store_txn_abort(t);
	return seq;
}

/* Conversations made in a transaction of the test's own. */
static void make_convs(const char *const *ids, size_t n)
{
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(store_conv_create(t, ids[i], (store_bytes){ "\x80", 1 }), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
}

/* ---- the tests ----------------------------------------------------------- */

START_TEST(writes_commit_in_one_transaction)
{
	uint64_t before = store_last_id(st);
	request(0, &one, OP_CREATE, "a", 0);
	request(1, &one, OP_CREATE, "b", 0);
	request(2, &one, OP_CREATE, "c", 0);
	commit_execute();
	ck_assert_int_eq(commit_start(), 0); /* creates commit on the loop */
	ck_assert_uint_eq(store_last_id(st), before + 1);
	ck_assert(exists("a") && exists("b") && exists("c"));
	ck_assert_int_eq(nanswers, 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(answers[i].id, i);
		ck_assert_int_eq(answers[i].err, 0);
	}
	ck_assert_int_eq(afters, 3);
}
END_TEST

START_TEST(damaged_write_left_out_alone)
{
	uint64_t before = store_last_id(st);
	request(0, &one, OP_CREATE, "a", 0);
	request(1, &one, OP_UPDATE, "bad", 0); /* writes, then meets a damaged record */
	request(2, &one, OP_CREATE, "c", 0);
	commit_execute();
	/* The attempt with it was aborted; the retry without it committed. */
	ck_assert_uint_eq(store_last_id(st), before + 1);
	ck_assert(exists("a") && exists("c"));
	ck_assert(!exists("bad"));
	ck_assert_int_eq(nanswers, 3);
	ck_assert_int_eq(answers[0].err, 0);
	ck_assert_int_eq(answers[1].id, 1);
	ck_assert_int_eq(answers[1].err, PERR_INTERNAL);
	ck_assert_int_eq(answers[2].err, 0);
	ck_assert_int_eq(afters, 2); /* no after step for the write that failed */
	ck_assert_int_ge(forgets, 2); /* the aborted attempt's, and the group's end */
}
END_TEST

START_TEST(refused_write_fails_alone)
{
	uint64_t before = store_last_id(st);
	request(0, &one, OP_CREATE, "a", 0);
	request(1, &one, OP_FORK, "a", 0);
	request(2, &one, OP_CREATE, "a", 0); /* exists by now: refused by the store, in the same transaction */
	commit_execute();
	ck_assert_uint_eq(store_last_id(st), before + 1);
	ck_assert(exists("a"));
	ck_assert_int_eq(nanswers, 3);
	ck_assert_int_eq(answers[0].err, 0);
	ck_assert_int_eq(answers[1].err, PERR_CONFLICT);
	ck_assert_int_eq(answers[2].err, PERR_CONFLICT);
	ck_assert_int_eq(afters, 1);
}
END_TEST

START_TEST(replies_in_request_order)
{
	request(0, &one, OP_CREATE, "x", 0);
	request(1, &one, OP_GET, "x", 1); /* behind the create: runs after the commit */
	request(2, &one, OP_GET, "x", 0); /* marked as needing no earlier write: the committed state */
	request(3, &one, OP_PING, NULL, 0);
	commit_execute();
	ck_assert_int_eq(nanswers, 4);
	/* The ping first (it has no effect), then the others in request order. */
	ck_assert_int_eq(answers[0].id, 3);
	ck_assert_int_eq(answers[1].id, 0);
	ck_assert_int_eq(answers[2].id, 1);
	ck_assert_int_eq(answers[3].id, 2);
	ck_assert_int_eq(answers[1].err, 0);
	ck_assert_int_eq(answers[2].err, 0);              /* saw the write */
	ck_assert_int_eq(answers[3].err, PERR_NOT_FOUND); /* ran before it */
}
END_TEST

static int want;
static int keep_going(void *arg)
{
	return 1; /* never block once unrestricted: the end hook decides */
}
static int enough(void *arg)
{
	return nanswers >= want;
}

START_TEST(sends_commit_on_the_writer_thread)
{
	const char *ids[] = { "s1", "s2" };
	make_convs(ids, 2);
	uint64_t before = store_last_id(st);
	struct client other = { 0 };
	request(0, &one, OP_SEND, "s1", 0);
	request(1, &other, OP_SEND, "s2", 0);
	request(2, &one, OP_GET, "nothing", 1); /* behind the send: goes with the group */
	request(3, &one, OP_SEND, "s1", 0);
	commit_execute();
	ck_assert_int_eq(nanswers, 0); /* made, not committed: handed over at the iteration's end */
	ck_assert_int_eq(commit_start(), 1);
	ck_assert(loop_restricted());
	/* Requests that come meanwhile wait for the group. */
	request(4, &other, OP_PING, NULL, 0);
	commit_execute();
	ck_assert_int_eq(nanswers, 0);
	want = 4;
	static const struct loop_hooks h = { keep_going, NULL, enough, NULL };
	ck_assert_int_eq(loop_run(&h), 0);
	ck_assert(!loop_restricted());
	ck_assert_int_eq(store_last_id(st), before + 1);
	ck_assert_int_eq(last_seq("s1"), 2);
	ck_assert_int_eq(last_seq("s2"), 1);
	ck_assert_int_eq(nanswers, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(answers[i].id, i);
	ck_assert_int_eq(answers[2].err, PERR_NOT_FOUND);
	ck_assert_int_eq(json_integer_value(json_object_get(answers[3].reply, "seq")), 2);
	ck_assert_int_eq(afters, 3);
	ck_assert(commit_pending()); /* the ping came during the commit: the next wait must not block */
	commit_execute();
	ck_assert_int_eq(nanswers, 5);
	ck_assert_int_eq(answers[4].id, 4);
}
END_TEST

START_TEST(writer_thread_off_commits_on_the_loop)
{
	const char *ids[] = { "s1" };
	make_convs(ids, 1);
	cfg.sync = STORE_SYNC_NONE; /* the thread takes groups only under sync = full */
	request(0, &one, OP_SEND, "s1", 0);
	commit_execute();
	ck_assert_int_eq(nanswers, 1);
	ck_assert_int_eq(commit_start(), 0);
	ck_assert_int_eq(last_seq("s1"), 1);
}
END_TEST

Suite *make_commit_suite(void); /* check_main.c, as CHECK_ONE_SUITE */
Suite *make_commit_suite(void)
{
	Suite *s = suite_create("commit");
	TCase *tc = tcase_create("group");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, writes_commit_in_one_transaction);
	tcase_add_test(tc, damaged_write_left_out_alone);
	tcase_add_test(tc, refused_write_fails_alone);
	tcase_add_test(tc, replies_in_request_order);
	tcase_add_test(tc, sends_commit_on_the_writer_thread);
	tcase_add_test(tc, writer_thread_off_commits_on_the_loop);
	suite_add_tcase(s, tc);
	return s;
}
