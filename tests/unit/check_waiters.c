/* Long-polls and watches (supervisor/waiters.c), keyed by conversation, with
 * a fake control socket (the clients and reply slots below stand in for
 * control.c's) and a fake `events` query: a long-poll is answered at the
 * first notice that finds events for it, at its deadline with what there
 * is, when its conversation is deleted, or at shutdown; only its own
 * conversation's notices wake it; a client that goes takes its waiters
 * along; what is not durable yet waits for the frontier. Deadlines are the
 * test's numbers: nothing here reads a clock. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/control.h"
#include "supervisor/durable.h"
#include "supervisor/loop.h"
#include "supervisor/waiters.h"
#include "tests/suites.h"
#include "tests/unit/store_dir.h"

/* ---- the fake control socket --------------------------------------------- */

struct client {
	int dead, owes, ended, flushes, want_write;
	size_t pending;
	void *watch;
	char out[16384];
	size_t n;
};

struct slot {
	int done, err;
	json_t *obj;
	char msg[200];
};

void slot_ok(struct slot *s, json_t *id, json_t *obj)
{
	(void)id;
	ck_assert(!s->done); /* filled once */
	s->done = 1;
	s->obj = obj;
}

void slot_error(struct slot *s, json_t *id, int err, const char *msg)
{
	(void)id;
	ck_assert(!s->done);
	s->done = 1;
	s->err = err;
	snprintf(s->msg, sizeof s->msg, "%s", msg);
}

void client_flush(struct client *c)
{
	c->flushes++;
}

void client_write(struct client *c, const char *p, size_t n)
{
	ck_assert_uint_lt(c->n + n, sizeof c->out);
	memcpy(c->out + c->n, p, n);
	c->n += n;
	c->out[c->n] = 0;
}

int control_dead(const struct client *c)
{
	return c->dead;
}

void control_end(struct client *c)
{
	c->ended = 1;
}

size_t control_out_pending(const struct client *c)
{
	return c->pending;
}

int control_owes(const struct client *c)
{
	return c->owes;
}

void control_set_watch(struct client *c, void *watch)
{
	c->watch = watch;
}

void control_want_write(struct client *c)
{
	c->want_write = 1;
}

void *control_watch(const struct client *c)
{
	return c->watch;
}

/* ---- the fake query -------------------------------------------------------- */

static int nevents[4];    /* events the query finds, by conversation c0..c3 */
static int query_err;     /* an error it answers instead (enum proto_err) */
static uint64_t snap_id;  /* the transaction id its answer shows */
static int queries;

static int conv_index(const char *conv)
{
	ck_assert(conv[0] == 'c' && conv[1] >= '0' && conv[1] <= '3' && !conv[2]);
	return conv[1] - '0';
}

static json_t *fake_query(const struct request *rq, uint64_t *last, struct events_next *next, uint64_t *txnid, int *err,
			  char *msg, size_t msglen)
{
	queries++;
	*txnid = snap_id;
	next->after = next->before = 0;
	if (query_err) {
		*err = query_err;
		snprintf(msg, msglen, "fake failure");
		return NULL;
	}
	*err = 0;
	json_t *a = json_array();
	int n = nevents[conv_index(rq->conv)];
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(i + 1));
	*last = (uint64_t)n;
	return a;
}

static json_t *fake_reply(json_t *evs, uint64_t last, const struct events_next *next)
{
	(void)next;
	return json_pack("{sosI}", "events", evs, "last_seq", (json_int_t)last);
}

/* ---- helpers ----------------------------------------------------------------- */

static struct client cl[3];
static struct slot sl[6];

static void setup(void)
{
	memset(cl, 0, sizeof cl);
	memset(sl, 0, sizeof sl);
	memset(nevents, 0, sizeof nevents);
	query_err = 0;
	snap_id = 1;
	queries = 0;
	/* sync = none: everything is durable at once (the held case opens its own). */
	ck_assert_int_eq(durable_open(NULL, 0, NULL, NULL, NULL), 0);
	waiters_init(NULL, fake_query, fake_reply);
}

static void poll_on(struct client *c, struct slot *s, const char *conv, int64_t deadline)
{
	struct request rq = { 0 };
	rq.root = json_pack("{ss}", "conversation", conv);
	ck_assert_ptr_nonnull(rq.root);
	rq.conv = json_string_value(json_object_get(rq.root, "conversation"));
	rq.op = OP_EVENTS;
	ck_assert_int_eq(waiters_poll(c, s, &rq, deadline), 0);
	ck_assert_ptr_null(rq.root); /* moved to the waiter */
	proto_request_free(&rq);
}

static size_t events_in(const struct slot *s)
{
	ck_assert(s->done);
	ck_assert_int_eq(s->err, 0);
	return json_array_size(json_object_get(s->obj, "events"));
}

/* ---- long-polls -------------------------------------------------------------- */

START_TEST(a_poll_is_answered_by_the_first_notice_that_finds_events)
{
	poll_on(&cl[0], &sl[0], "c1", 5000);
	waiters_notify("c1"); /* nothing yet: it stays */
	ck_assert(!sl[0].done);
	nevents[1] = 2;
	waiters_notify("c1");
	ck_assert_uint_eq(events_in(&sl[0]), 2);
	ck_assert_int_eq(cl[0].flushes, 1);
	ck_assert_int_eq(waiters_next_deadline(), 0); /* gone from the deadline list */
	json_decref(sl[0].obj);
}
END_TEST

START_TEST(only_its_own_conversation_wakes_a_poll)
{
	poll_on(&cl[0], &sl[0], "c1", 5000);
	poll_on(&cl[1], &sl[1], "c2", 5000);
	nevents[1] = nevents[2] = 1;
	queries = 0;
	waiters_notify("c2");
	ck_assert_int_eq(queries, 1); /* c1's waiter was not looked at */
	ck_assert(!sl[0].done);
	ck_assert_uint_eq(events_in(&sl[1]), 1);
	waiters_notify("c3"); /* nobody waits on it */
	ck_assert_int_eq(queries, 1);
	waiters_notify_all();
	ck_assert_uint_eq(events_in(&sl[0]), 1);
	json_decref(sl[0].obj);
	json_decref(sl[1].obj);
}
END_TEST

START_TEST(every_poll_on_a_conversation_is_answered_by_one_notice)
{
	poll_on(&cl[0], &sl[0], "c1", 5000);
	poll_on(&cl[0], &sl[1], "c1", 6000);
	poll_on(&cl[1], &sl[2], "c1", 7000);
	nevents[1] = 3;
	waiters_notify("c1");
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(events_in(&sl[i]), 3);
		json_decref(sl[i].obj);
	}
	ck_assert_int_eq(waiters_next_deadline(), 0);
}
END_TEST

START_TEST(a_poll_gets_what_there_is_at_its_deadline)
{
	poll_on(&cl[0], &sl[0], "c1", 5000);
	poll_on(&cl[1], &sl[1], "c2", 3000);
	ck_assert_int_eq(waiters_next_deadline(), 3000);
	waiters_expire(2999);
	ck_assert(!sl[0].done && !sl[1].done);
	waiters_expire(3000);
	ck_assert_uint_eq(events_in(&sl[1]), 0); /* its time is up: answered empty */
	ck_assert(!sl[0].done);
	ck_assert_int_eq(waiters_next_deadline(), 5000);
	nevents[1] = 1;
	waiters_expire(9000);
	ck_assert_uint_eq(events_in(&sl[0]), 1);
	ck_assert_int_eq(waiters_next_deadline(), 0);
	json_decref(sl[0].obj);
	json_decref(sl[1].obj);
}
END_TEST

START_TEST(a_failing_query_answers_the_poll_with_its_error)
{
	poll_on(&cl[0], &sl[0], "c1", 5000);
	query_err = PERR_NOT_FOUND;
	waiters_notify("c1");
	ck_assert(sl[0].done);
	ck_assert_int_eq(sl[0].err, PERR_NOT_FOUND);
	ck_assert_str_eq(sl[0].msg, "fake failure");
}
END_TEST

START_TEST(a_deleted_conversation_answers_its_polls_not_found)
{
	poll_on(&cl[0], &sl[0], "c1", 5000);
	poll_on(&cl[1], &sl[1], "c1", 5000);
	poll_on(&cl[1], &sl[2], "c2", 5000);
	waiters_deleted("c1");
	ck_assert_int_eq(sl[0].err, PERR_NOT_FOUND);
	ck_assert_int_eq(sl[1].err, PERR_NOT_FOUND);
	ck_assert(!sl[2].done);
	ck_assert_int_eq(waiters_next_deadline(), 5000); /* c2's is left */
}
END_TEST

START_TEST(a_client_that_goes_takes_its_waiters)
{
	poll_on(&cl[0], &sl[0], "c1", 4000);
	poll_on(&cl[1], &sl[1], "c1", 5000);
	waiters_client_gone(&cl[0]);
	ck_assert_int_eq(waiters_next_deadline(), 5000);
	nevents[1] = 1;
	waiters_notify("c1");
	ck_assert(!sl[0].done); /* never answered: its client is gone */
	ck_assert_uint_eq(events_in(&sl[1]), 1);
	json_decref(sl[1].obj);
}
END_TEST

START_TEST(a_dead_clients_poll_is_not_answered)
{
	poll_on(&cl[0], &sl[0], "c1", 4000);
	cl[0].dead = 1;
	nevents[1] = 1;
	waiters_notify("c1");
	ck_assert(!sl[0].done);
	waiters_client_gone(&cl[0]); /* control_reap's turn */
	ck_assert_int_eq(waiters_next_deadline(), 0);
}
END_TEST

START_TEST(shutdown_answers_every_poll_unavailable)
{
	poll_on(&cl[0], &sl[0], "c1", 4000);
	poll_on(&cl[1], &sl[1], "c2", 5000);
	waiters_shutdown();
	ck_assert_int_eq(sl[0].err, PERR_UNAVAILABLE);
	ck_assert_int_eq(sl[1].err, PERR_UNAVAILABLE);
	ck_assert_int_eq(waiters_next_deadline(), 0);
}
END_TEST

/* ---- watches (their streaming reads the store: proc tests cover it) ----------- */

START_TEST(a_client_watches_one_conversation)
{
	ck_assert_int_eq(waiters_watch(&cl[0], "c1", 0), 0);
	ck_assert(waiters_watching(&cl[0]));
	ck_assert(!waiters_watching(&cl[1]));
	ck_assert_int_eq(waiters_watch(&cl[0], "c2", 0), -EEXIST);
	ck_assert_int_eq(waiters_next_deadline(), 0); /* a watch has no deadline */
	waiters_client_gone(&cl[0]);
	ck_assert(!waiters_watching(&cl[0]));
}
END_TEST

START_TEST(a_deleted_conversation_ends_its_watches)
{
	ck_assert_int_eq(waiters_watch(&cl[0], "c1", 0), 0);
	ck_assert_int_eq(waiters_watch(&cl[1], "c2", 0), 0);
	waiters_deleted("c1");
	ck_assert(cl[0].ended);
	ck_assert(!waiters_watching(&cl[0]));
	ck_assert(!cl[1].ended);
	ck_assert(waiters_watching(&cl[1]));
}
END_TEST

START_TEST(deltas_reach_ready_watchers_of_their_conversation_only)
{
	ck_assert_int_eq(waiters_watch(&cl[0], "c1", 0), 0);
	ck_assert_int_eq(waiters_watch(&cl[1], "c1", 0), 0);
	ck_assert_int_eq(waiters_watch(&cl[2], "c2", 0), 0);
	cl[1].owes = 1; /* a reply owed: a delta must not overtake it */
	waiters_delta("c1", "hello", 5);
	ck_assert_str_eq(cl[0].out, "{\"delta\":{\"text\":\"hello\"}}\n");
	ck_assert_uint_eq(cl[1].n, 0);
	ck_assert_uint_eq(cl[2].n, 0);
	cl[0].pending = CONTROL_OUT_CAP; /* a slow reader loses deltas */
	waiters_delta("c1", "more", 4);
	ck_assert_str_eq(cl[0].out, "{\"delta\":{\"text\":\"hello\"}}\n");
}
END_TEST

/* ---- the durable frontier ------------------------------------------------------ */

static char dir[64];
static store *st;

static void frontier_moved(uint64_t frontier)
{
	(void)frontier;
	waiters_durable_advanced();
}

static int no_more(void)
{
	return 0;
}

START_TEST(a_poll_waits_for_what_it_would_get_to_be_durable)
{
	strcpy(dir, "/tmp/agentd-check-waiters-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct store_opts so = { .sync = STORE_SYNC_FULL };
	ck_assert_int_eq(store_open(&st, dir, &so), 0);
	ck_assert_int_eq(loop_open(), 0);
	durable_close(); /* the fixture's sync = none one */
	ck_assert_int_eq(durable_open(st, 1, frontier_moved, no_more, NULL), 0);
	poll_on(&cl[0], &sl[0], "c1", 5000);
	nevents[1] = 1;
	snap_id = 7; /* what the answer shows: not behind the frontier yet */
	waiters_notify("c1");
	ck_assert(!sl[0].done);
	waiters_expire(9000); /* nor at its deadline: it is held, not dropped */
	ck_assert(!sl[0].done);
	durable_committed(8); /* a commit's flush made 7 durable */
	ck_assert_uint_eq(events_in(&sl[0]), 1);
	json_decref(sl[0].obj);
	durable_close();
	store_close(st);
	loop_close();
	store_dir_remove(dir);
}
END_TEST

Suite *make_waiters_suite(void)
{
	Suite *s = suite_create("waiters");
	TCase *tc = tcase_create("waiters");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, a_poll_is_answered_by_the_first_notice_that_finds_events);
	tcase_add_test(tc, only_its_own_conversation_wakes_a_poll);
	tcase_add_test(tc, every_poll_on_a_conversation_is_answered_by_one_notice);
	tcase_add_test(tc, a_poll_gets_what_there_is_at_its_deadline);
	tcase_add_test(tc, a_failing_query_answers_the_poll_with_its_error);
	tcase_add_test(tc, a_deleted_conversation_answers_its_polls_not_found);
	tcase_add_test(tc, a_client_that_goes_takes_its_waiters);
	tcase_add_test(tc, a_dead_clients_poll_is_not_answered);
	tcase_add_test(tc, shutdown_answers_every_poll_unavailable);
	tcase_add_test(tc, a_client_watches_one_conversation);
	tcase_add_test(tc, a_deleted_conversation_ends_its_watches);
	tcase_add_test(tc, deltas_reach_ready_watchers_of_their_conversation_only);
	tcase_add_test(tc, a_poll_waits_for_what_it_would_get_to_be_durable);
	suite_add_tcase(s, tc);
	return s;
}
