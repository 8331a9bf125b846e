/* The deadlines of human tool calls (supervisor/expiry.c) on a real store:
 * the timer armed to the earliest deadline or warning in the store, and
 * again after a new one; a passed deadline bringing the timer back at once;
 * every call past its deadline settled `expired` with its resolution event,
 * in one transaction per batch, as many batches as it takes; a call
 * resolved before its deadline left alone; a failed batch retried later,
 * not at once; warnings given once, and not for a call that expired
 * meanwhile; the conversation woken (an ended one only notified); a tool's
 * on_expiry (deny, approve: settled resolved by "expiry"; escalate: handed
 * to the next human tool, pending, nobody woken).
 *
 * Deadlines are wall-clock and nothing here races one: they are far in the
 * past or far in the future, and expiry_fire is called directly except
 * where the timer itself is under test (a wait with a generous bound).
 *
 * workers.h and waiters.h are this file's (workers.c and waiters.c are not
 * linked): each wake, lease taken ahead and notice is recorded, so that a
 * test sees which conversations were woken without a worker process. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/config.h"
#include "conv/conv.h"
#include "supervisor/durable.h"
#include "supervisor/expiry.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"
#include "tests/unit/store_dir.h"

#define HOUR_MS (3600 * 1000)

/* ---- fake workers and waiters ------------------------------------------ */

#define MAXREC 8
struct record {
	int n;                          /* calls, all of them */
	char conv[MAXREC][STORE_ID_MAX + 1]; /* the first MAXREC calls' conversations */
};
static struct record wakes, leases, notices;
static int drops;    /* leases_ahead_drop */
static int lease_rc; /* what lease_ahead returns */

static void record(struct record *r, const char *conv)
{
	if (r->n < MAXREC)
		snprintf(r->conv[r->n], sizeof r->conv[0], "%s", conv);
	r->n++;
}

/* How many of the recorded calls (the first MAXREC) were for conv. */
static int recorded(const struct record *r, const char *conv)
{
	int k = 0;
	for (int i = 0; i < r->n && i < MAXREC; i++)
		k += !strcmp(r->conv[i], conv);
	return k;
}

int workers_wake(const char *conv)
{
	record(&wakes, conv);
	return 0;
}
int lease_ahead(store_txn *t, const char *conv)
{
	(void)t;
	record(&leases, conv);
	return lease_rc;
}
void leases_ahead_drop(void)
{
	drops++;
}
void waiters_notify(const char *conv)
{
	record(&notices, conv);
}

/* ---- the fixture: a store in a fresh directory, the loop, the gate ------- */

static char dir[64];
static store *st;
static const struct gate_hooks no_members;
/* The human tools' on_expiry: `approve` (the tool of call_in) expires, the
 * others settle or hand on as named. */
static struct config cfg;
static const char cfg_text[] = "[tool.approve]\nexecutor = human\n"
			       "[tool.nay]\nexecutor = human\non_expiry = deny\n"
			       "[tool.yea]\nexecutor = human\non_expiry = approve\n"
			       "[tool.esc]\nexecutor = human\non_expiry = escalate\nescalate_to = boss\n"
			       "[tool.boss]\nexecutor = human\nprompt = Boss?\nexpires = 2h\n"
			       "[tool.pair]\nexecutor = human\napprovers = 2\non_expiry = approve\n";

static void config_from_text(void)
{
	char path[] = "/tmp/agentd-check-expiry-cfg-XXXXXX", err[256] = "";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, cfg_text, sizeof cfg_text - 1), (ssize_t)(sizeof cfg_text - 1));
	close(fd);
	config_init(&cfg);
	int rc = config_load(&cfg, path, err, sizeof err);
	unlink(path);
	ck_assert_msg(rc == 0, "%s", err);
}

static void advanced(uint64_t frontier)
{
	(void)frontier;
}
static int no_more(void)
{
	return 0;
}

static void setup(void)
{
	strcpy(dir, "/tmp/agentd-check-expiry-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct store_opts so = { .sync = STORE_SYNC_NONE };
	ck_assert_int_eq(store_open(&st, dir, &so), 0);
	ck_assert_int_eq(loop_open(), 0);
	ck_assert_int_eq(durable_open(st, 0, advanced, no_more, NULL), 0); /* every commit covered at once */
	gate_init(st, &no_members);
	config_from_text();
	ck_assert_int_eq(expiry_open(st, &cfg), 0);
	memset(&wakes, 0, sizeof wakes);
	memset(&leases, 0, sizeof leases);
	memset(&notices, 0, sizeof notices);
	drops = lease_rc = 0;
}

static void teardown(void)
{
	expiry_close();
	config_free(&cfg);
	durable_close();
	store_close(st);
	loop_close();
	ck_assert_int_eq(store_dir_remove(dir), 0);
}

/* ---- helpers ------------------------------------------------------------- */

/* A pending human call id in conv (made when absent) expiring at deadline
 * and warned at warn (0: none), in t. */
static void call_of(store_txn *t, const char *conv, const char *id, const char *tool, int64_t deadline,
		    int64_t warn)
{
	int e = store_conv_create(t, conv, (store_bytes){ "\x80", 1 });
	ck_assert(e == 0 || e == STORE_E_CONFLICT);
	struct store_tool_call_in tc = { id, tool, STORE_EXEC_HUMAN, { "\x80", 1 }, { NULL, 0 } };
	ck_assert_int_eq(store_tool_call_upsert(t, conv, &tc), 0);
	if (deadline)
		ck_assert_int_eq(store_expiry_schedule(t, id, deadline), 0);
	if (warn)
		ck_assert_int_eq(store_warning_schedule(t, id, warn), 0);
}

static void call_in(store_txn *t, const char *conv, const char *id, int64_t deadline, int64_t warn)
{
	call_of(t, conv, id, "approve", deadline, warn);
}

static void call_tool(const char *conv, const char *id, const char *tool, int64_t deadline, int64_t warn)
{
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	call_of(t, conv, id, tool, deadline, warn);
	ck_assert_int_eq(store_txn_commit(t), 0);
}

static void call(const char *conv, const char *id, int64_t deadline, int64_t warn)
{
	call_tool(conv, id, "approve", deadline, warn);
}

static store_txn *rbegin(void)
{
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	return t;
}

static int tc_status(const char *id)
{
	struct store_tool_call tc;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_tool_call_get(t, id, &tc), 0);
	store_txn_abort(t);
	return tc.status;
}

static int conv_status(const char *conv)
{
	struct store_conv c;
	store_txn *t = rbegin();
	ck_assert_int_eq(store_conv_get(t, conv, &c), 0);
	store_txn_abort(t);
	return c.status;
}

struct seen {
	int n;
	json_t *last; /* the last one's content */
};

static int seen_one(void *arg, const struct store_event *ev)
{
	struct seen *s = arg;
	json_t *j = conv_event_json(ev);
	ck_assert_ptr_nonnull(j);
	json_decref(s->last);
	s->last = json_incref(json_object_get(j, "content"));
	json_decref(j);
	s->n++;
	return 0;
}

/* conv's events of type; *last (may be NULL) the last one's content (the
 * caller's reference). */
static int events_of(const char *conv, const char *type, json_t **last)
{
	store_txn *t;
	struct seen s = { 0, NULL };
	struct store_range r = { 0, 0, 0, type };
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	ck_assert_int_eq(store_events_stream(t, conv, &r, seen_one, &s), 0);
	store_txn_abort(t);
	if (last)
		*last = s.last;
	else
		json_decref(s.last);
	return s.n;
}

/* The resolution conv's last event records: call id settled with status. */
static void assert_resolution(const char *conv, const char *id, const char *status)
{
	json_t *c;
	ck_assert_int_ge(events_of(conv, "resolution", &c), 1);
	ck_assert_str_eq(json_string_value(json_object_get(c, "tool_call_id")), id);
	ck_assert_str_eq(json_string_value(json_object_get(c, "status")), status);
	json_decref(c);
}

/* expiry.c's timerfd: the one timerfd of this process (durable.c makes
 * none under sync = none, and nothing else linked here makes one). */
static int timer_fd(void)
{
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	int fd = -1, n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char l[64];
		ssize_t k = readlinkat(dirfd(d), de->d_name, l, sizeof l - 1);
		if (k <= 0)
			continue;
		l[k] = 0;
		if (!strcmp(l, "anon_inode:[timerfd]"))
			fd = atoi(de->d_name), n++;
	}
	closedir(d);
	ck_assert_int_eq(n, 1);
	return fd;
}

/* How long until the timer fires, in ms; 0: disarmed (or fired). */
static int64_t armed_in(void)
{
	struct itimerspec its;
	ck_assert_int_eq(timerfd_gettime(timer_fd(), &its), 0);
	return (int64_t)its.it_value.tv_sec * 1000 + its.it_value.tv_nsec / 1000000;
}

/* The timer is armed to fire at `at` (wall ms), as seen from now0, a time
 * taken before: no more than at - now0 away, and less than a minute nearer
 * (the test's own time between). */
static void assert_armed_at(int64_t at, int64_t now0)
{
	int64_t in = armed_in();
	ck_assert_int_le(in, at - now0 + 1); /* + 1: the kernel rounds up */
	ck_assert_int_ge(in, at - now0 - 60000);
}

static int timer_ready(int timeout_ms)
{
	struct pollfd p = { timer_fd(), POLLIN, 0 };
	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

static int one_iteration(void *arg)
{
	(void)arg;
	return 1;
}

/* ---- the timer ------------------------------------------------------------ */

START_TEST(armed_to_the_earliest_deadline)
{
	int64_t now0 = store_now(st);
	expiry_rearm();
	ck_assert_int_eq(armed_in(), 0); /* nothing scheduled: disarmed */
	call("c1", "ta", now0 + 2 * HOUR_MS, 0);
	call("c1", "tb", now0 + HOUR_MS, 0);
	expiry_rearm();
	assert_armed_at(now0 + HOUR_MS, now0);
	/* A new, earlier deadline counts once the timer is re-armed. */
	call("c2", "tc", now0 + HOUR_MS / 2, 0);
	assert_armed_at(now0 + HOUR_MS, now0);
	expiry_rearm();
	assert_armed_at(now0 + HOUR_MS / 2, now0);
	/* A later one changes nothing; a warning before every deadline is the
	 * time (one timer for both). */
	call("c2", "td", now0 + 3 * HOUR_MS, 0);
	expiry_rearm();
	assert_armed_at(now0 + HOUR_MS / 2, now0);
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	ck_assert_int_eq(store_warning_schedule(t, "ta", now0 + HOUR_MS / 4), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	expiry_rearm();
	assert_armed_at(now0 + HOUR_MS / 4, now0);
	ck_assert_int_eq(expiry_fire(), 0); /* nothing due */
	ck_assert_int_eq(expiry_warn_fire(), 0);
	ck_assert_int_eq(tc_status("tb"), STORE_TC_PENDING);
}
END_TEST

/* A passed deadline makes the timer readable at once; its callback fires
 * what is due, deadlines before warnings (the call that expires gets no
 * warning), and re-arms: nothing left, disarmed. */
START_TEST(passed_deadline_fires_through_the_timer)
{
	int64_t now0 = store_now(st);
	call("c1", "ta", now0 - 2000, now0 - 3000);
	expiry_rearm();
	ck_assert(timer_ready(30000)); /* at once; the bound is only a bound */
	static const struct loop_hooks h = { NULL, NULL, one_iteration, NULL };
	ck_assert_int_eq(loop_run(&h), 0); /* the timer's callback */
	ck_assert_int_eq(tc_status("ta"), STORE_TC_EXPIRED);
	assert_resolution("c1", "ta", "expired");
	ck_assert_int_eq(events_of("c1", "expiry_warning", NULL), 0);
	ck_assert_int_eq(wakes.n, 1);
	ck_assert_int_eq(recorded(&wakes, "c1"), 1);
	ck_assert_int_eq(armed_in(), 0);
	ck_assert(!timer_ready(0));
}
END_TEST

/* ---- firing ----------------------------------------------------------------- */

/* Each call past its deadline expires with its resolution event and wakes
 * its conversation; one not yet due stays pending; a second fire finds
 * nothing. */
START_TEST(passed_deadlines_expire)
{
	int64_t now0 = store_now(st);
	call("c1", "ta", now0 - HOUR_MS, 0);
	call("c1", "tb", now0 - 1000, 0);
	call("c2", "tc", now0 + HOUR_MS, 0);
	uint64_t before = store_last_id(st);
	ck_assert_int_eq(expiry_fire(), 2);
	ck_assert_uint_eq(store_last_id(st), before + 1); /* one transaction */
	ck_assert_int_eq(tc_status("ta"), STORE_TC_EXPIRED);
	ck_assert_int_eq(tc_status("tb"), STORE_TC_EXPIRED);
	ck_assert_int_eq(tc_status("tc"), STORE_TC_PENDING);
	json_t *c;
	ck_assert_int_eq(events_of("c1", "resolution", &c), 2);
	ck_assert_str_eq(json_string_value(json_object_get(c, "status")), "expired");
	ck_assert(json_is_null(json_object_get(c, "result")));
	json_decref(c);
	ck_assert_int_eq(events_of("c2", NULL, NULL), 0);
	/* No person awaited in c1 any more: it owes work, and is woken, its
	 * lease taken in the same transaction. */
	ck_assert_int_eq(conv_status("c1"), STORE_ACTIVE);
	ck_assert_int_eq(wakes.n, 2);
	ck_assert_int_eq(recorded(&wakes, "c1"), 2);
	ck_assert_int_eq(recorded(&leases, "c1"), 2);
	ck_assert_int_eq(recorded(&notices, "c1"), 2);
	ck_assert_int_eq(recorded(&notices, "c2"), 0);
	ck_assert_int_ge(drops, 1);
	ck_assert_int_eq(expiry_fire(), 0);
	ck_assert_int_eq(events_of("c1", "resolution", NULL), 2);
	ck_assert_int_eq(wakes.n, 2);
	expiry_rearm();
	assert_armed_at(now0 + HOUR_MS, now0);
}
END_TEST

/* A call resolved before its deadline fired (here, after it passed, before
 * a fire) has no deadline left: only the other call expires. */
START_TEST(resolved_before_its_deadline_not_expired)
{
	int64_t now0 = store_now(st);
	call("c1", "ta", now0 - 2000, 0);
	store_txn *t;
	char conv[STORE_ID_MAX + 1];
	int ended;
	json_t *yes = json_string("yes");
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	ck_assert_int_eq(conv_resolve(t, "ta", STORE_TC_RESOLVED, yes, NULL, conv, NULL, &ended), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	json_decref(yes);
	call("c1", "tb", now0 - 1000, 0);
	ck_assert_int_eq(expiry_fire(), 1);
	ck_assert_int_eq(tc_status("ta"), STORE_TC_RESOLVED);
	ck_assert_int_eq(tc_status("tb"), STORE_TC_EXPIRED);
	ck_assert_int_eq(events_of("c1", "resolution", NULL), 2);
	ck_assert_int_eq(expiry_fire(), 0);
	expiry_rearm();
	ck_assert_int_eq(armed_in(), 0);
}
END_TEST

/* An ended conversation gets its call expired and its waiters told, but no
 * worker (and no lease for one). */
START_TEST(ended_conversation_notified_not_woken)
{
	int64_t now0 = store_now(st);
	call("c1", "ta", now0 - 1000, 0);
	store_txn *t;
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ENDED };
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	ck_assert_int_eq(store_conv_put(t, "c1", &p), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(expiry_fire(), 1);
	ck_assert_int_eq(tc_status("ta"), STORE_TC_EXPIRED);
	assert_resolution("c1", "ta", "expired");
	ck_assert_int_eq(conv_status("c1"), STORE_ENDED);
	ck_assert_int_eq(wakes.n, 0);
	ck_assert_int_eq(leases.n, 0);
	ck_assert_int_eq(recorded(&notices, "c1"), 1);
}
END_TEST

/* More calls due than one batch (512) holds: full batches follow one
 * another without the round limit, one transaction each, until none is
 * left. */
START_TEST(a_backlog_fires_in_batches)
{
	enum { PER_CONV = 8, N = 4 * 512 + 100 };
	int64_t now0 = store_now(st);
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	for (int i = 0; i < N; i++) {
		char conv[16], id[16];
		snprintf(conv, sizeof conv, "b%d", i / PER_CONV);
		snprintf(id, sizeof id, "t%d", i);
		call_in(t, conv, id, now0 - HOUR_MS + i, 0);
	}
	ck_assert_int_eq(store_txn_commit(t), 0);
	uint64_t before = store_last_id(st);
	ck_assert_int_eq(expiry_fire(), N);
	ck_assert_uint_eq(store_last_id(st), before + 5); /* four full batches and the rest */
	ck_assert_int_eq(wakes.n, N);
	ck_assert_int_eq(notices.n, N);
	ck_assert_int_eq(tc_status("t0"), STORE_TC_EXPIRED);
	ck_assert_int_eq(tc_status("t2147"), STORE_TC_EXPIRED);
	ck_assert_int_eq(events_of("b0", "resolution", NULL), PER_CONV);
	int64_t d;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	ck_assert_int_eq(store_expiry_earliest(t, &d), STORE_E_NOTFOUND);
	store_txn_abort(t);
	ck_assert_int_eq(expiry_fire(), 0);
}
END_TEST

/* A batch whose transaction fails commits nothing and is not tried again
 * at once: the timer waits a second (EXPIRY_RETRY_MS), not the passed
 * deadline; the next fire does it. */
START_TEST(failed_batch_retried_later)
{
	int64_t now0 = store_now(st);
	call("c1", "ta", now0 - 1000, 0);
	lease_rc = -EIO; /* poisons the batch's transaction */
	int64_t tried = store_now(st);
	ck_assert_int_eq(expiry_fire(), 0);
	ck_assert_int_eq(tc_status("ta"), STORE_TC_PENDING);
	ck_assert_int_eq(events_of("c1", NULL, NULL), 0);
	ck_assert_int_eq(wakes.n, 0);
	ck_assert_int_ge(drops, 1);
	expiry_rearm();
	int64_t in = armed_in();
	/* Armed up to a second ahead, or (a slow machine) fired already, but
	 * not before that second was over. */
	ck_assert((in > 0 && in <= 1001) || (timer_ready(0) && store_now(st) >= tried + 1000));
	lease_rc = 0;
	ck_assert_int_eq(expiry_fire(), 1);
	ck_assert_int_eq(tc_status("ta"), STORE_TC_EXPIRED);
	ck_assert_int_eq(wakes.n, 1);
	expiry_rearm();
	ck_assert_int_eq(armed_in(), 0); /* the retry's wait went with the commit */
}
END_TEST

/* ---- warnings -------------------------------------------------------------- */

/* A warning whose time has passed is given once, as an expiry_warning
 * event, and its waiters told (no worker woken); one whose call expired
 * first is not given at all. */
START_TEST(warnings_given_once)
{
	int64_t now0 = store_now(st);
	call("c1", "ta", now0 + HOUR_MS, now0 - 1000);
	call("c2", "tb", now0 - 1000, now0 - 2000);
	/* The order of the timer's wake-up: deadlines, then warnings. */
	ck_assert_int_eq(expiry_fire(), 1);
	ck_assert_int_eq(wakes.n, 1);
	ck_assert_int_eq(recorded(&wakes, "c2"), 1);
	ck_assert_int_eq(expiry_warn_fire(), 1);
	json_t *c;
	ck_assert_int_eq(events_of("c1", "expiry_warning", &c), 1);
	ck_assert_str_eq(json_string_value(json_object_get(c, "tool_call_id")), "ta");
	ck_assert_int_eq(json_integer_value(json_object_get(c, "deadline")), now0 + HOUR_MS);
	ck_assert_int_gt(json_integer_value(json_object_get(c, "expires_in_ms")), 0);
	json_decref(c);
	ck_assert_int_eq(events_of("c2", "expiry_warning", NULL), 0);
	ck_assert_int_eq(recorded(&notices, "c1"), 1);
	ck_assert_int_eq(wakes.n, 1); /* a warning wakes no worker */
	ck_assert_int_eq(tc_status("ta"), STORE_TC_PENDING);
	ck_assert_int_eq(expiry_warn_fire(), 0);
	ck_assert_int_eq(events_of("c1", "expiry_warning", NULL), 1);
	store_txn *t;
	int64_t at;
	ck_assert_int_eq(store_txn_begin(st, STORE_READ, &t), 0);
	ck_assert_int_eq(store_warning_earliest(t, &at), STORE_E_NOTFOUND);
	store_txn_abort(t);
	expiry_rearm();
	assert_armed_at(now0 + HOUR_MS, now0); /* the deadline is left */
}
END_TEST

/* ---- on_expiry --------------------------------------------------------------- */

/* deny and approve settle the call resolved, {"approved": false|true,
 * "on_expiry"} by {"name": "expiry"}, and wake the conversation as an
 * expiry does; the tool that expires beside them still expires. */
START_TEST(on_expiry_deny_and_approve_settle_resolved)
{
	int64_t now0 = store_now(st);
	call_tool("c1", "tn", "nay", now0 - 2000, 0);
	call_tool("c2", "ty", "yea", now0 - 1000, 0);
	call("c3", "te", now0 - 1000, 0);
	ck_assert_int_eq(expiry_fire(), 3);
	ck_assert_int_eq(tc_status("tn"), STORE_TC_RESOLVED);
	ck_assert_int_eq(tc_status("ty"), STORE_TC_RESOLVED);
	ck_assert_int_eq(tc_status("te"), STORE_TC_EXPIRED);
	static const struct {
		const char *conv, *id, *policy;
		int approved;
	} want[] = { { "c1", "tn", "deny", 0 }, { "c2", "ty", "approve", 1 } };
	for (size_t i = 0; i < 2; i++) {
		json_t *c;
		assert_resolution(want[i].conv, want[i].id, "resolved");
		ck_assert_int_eq(events_of(want[i].conv, "resolution", &c), 1);
		json_t *r = json_object_get(c, "result");
		ck_assert(json_is_boolean(json_object_get(r, "approved")));
		ck_assert_int_eq(json_is_true(json_object_get(r, "approved")), want[i].approved);
		ck_assert_str_eq(json_string_value(json_object_get(r, "on_expiry")), want[i].policy);
		ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "by"), "name")), "expiry");
		json_decref(c);
		ck_assert_int_eq(recorded(&wakes, want[i].conv), 1);
		ck_assert_int_eq(recorded(&leases, want[i].conv), 1);
	}
	assert_resolution("c3", "te", "expired");
	ck_assert_int_eq(wakes.n, 3);
	ck_assert_int_eq(expiry_fire(), 0);
}
END_TEST

/* An approval by name (conv_approve) of a call of pair (approvers = 2),
 * in a transaction of its own; its vote, its count out. */
static int approve_by(const char *id, const char *name, struct conv_vote_out *v, int *ended)
{
	store_txn *t;
	char conv[STORE_ID_MAX + 1];
	uint64_t seq = 0;
	json_t *result = json_pack("{sb}", "approved", 1);
	json_t *by = name ? json_pack("{siss}", "uid", 0, "name", name) : json_pack("{si}", "uid", 0);
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	int e = conv_approve(t, id, result, by, &cfg, v, conv, &seq, ended);
	if (e)
		store_txn_abort(t);
	else
		ck_assert_int_eq(store_txn_commit(t), 0);
	json_decref(result);
	json_decref(by);
	json_decref(v->names);
	v->names = NULL;
	return e;
}

/* approvers = 2: the first name is counted (an approval_vote, still
 * pending), the same name again and no name are refused with nothing
 * written, the second name settles the call; a third is stale. */
START_TEST(approvers_count_each_name_once)
{
	struct conv_vote_out v;
	int ended = 1;
	call_tool("c1", "tp", "pair", 0, 0);
	ck_assert_int_eq(approve_by("tp", "alice", &v, &ended), 0);
	ck_assert_int_eq(v.vote, CONV_VOTE_COUNTED);
	ck_assert_int_eq(v.approvals, 1);
	ck_assert_int_eq(v.need, 2);
	ck_assert_int_eq(ended, 0);
	ck_assert_int_eq(tc_status("tp"), STORE_TC_PENDING);
	ck_assert_int_eq(approve_by("tp", "alice", &v, &ended), 0);
	ck_assert_int_eq(v.vote, CONV_VOTE_TWICE);
	ck_assert_int_eq(approve_by("tp", NULL, &v, &ended), 0);
	ck_assert_int_eq(v.vote, CONV_VOTE_NO_NAME);
	ck_assert_int_eq(events_of("c1", "approval_vote", NULL), 1);
	ck_assert_int_eq(approve_by("tp", "bob", &v, &ended), 0);
	ck_assert_int_eq(v.vote, CONV_VOTE_SETTLED);
	ck_assert_int_eq(v.approvals, 2);
	ck_assert_int_eq(tc_status("tp"), STORE_TC_RESOLVED);
	ck_assert_int_eq(events_of("c1", "approval_vote", NULL), 2);
	ck_assert_int_eq(events_of("c1", "resolution", NULL), 1);
	ck_assert_int_eq(approve_by("tp", "carol", &v, &ended), STORE_E_STALE);
	/* A tool of one approver settles on the first, no vote written. */
	call_tool("c2", "ta", "approve", 0, 0);
	ck_assert_int_eq(approve_by("ta", NULL, &v, &ended), 0);
	ck_assert_int_eq(v.vote, CONV_VOTE_SETTLED);
	ck_assert_int_eq(events_of("c2", "approval_vote", NULL), 0);
	ck_assert_int_eq(tc_status("ta"), STORE_TC_RESOLVED);
}
END_TEST

/* Votes short of the need do not stop the clock: at the deadline the call
 * is settled as its on_expiry says (approve, by "expiry"). */
START_TEST(partial_votes_follow_on_expiry)
{
	struct conv_vote_out v;
	int ended;
	int64_t now0 = store_now(st);
	call_tool("c1", "tp", "pair", now0 + HOUR_MS, 0);
	ck_assert_int_eq(approve_by("tp", "alice", &v, &ended), 0);
	ck_assert_int_eq(v.vote, CONV_VOTE_COUNTED);
	store_txn *t;
	ck_assert_int_eq(store_txn_begin(st, STORE_WRITE, &t), 0);
	ck_assert_int_eq(store_expiry_schedule(t, "tp", now0 - 1000), 0);
	ck_assert_int_eq(store_txn_commit(t), 0);
	ck_assert_int_eq(expiry_fire(), 1);
	ck_assert_int_eq(tc_status("tp"), STORE_TC_RESOLVED);
	json_t *c;
	ck_assert_int_eq(events_of("c1", "resolution", &c), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "by"), "name")), "expiry");
	ck_assert(json_is_true(json_object_get(json_object_get(c, "result"), "approved")));
	json_decref(c);
}
END_TEST

/* escalate settles nothing: the call stays pending, handed to boss (its
 * prompt, a deadline boss's expires from the fire), an escalation event
 * records the chain; its waiters are told, but no worker is woken and no
 * lease taken (nothing is owed). The next fire finds nothing until boss's
 * deadline, which is armed. */
START_TEST(on_expiry_escalate_hands_on_and_wakes_nobody)
{
	int64_t now0 = store_now(st);
	call_tool("c1", "tx", "esc", now0 - 1000, 0);
	ck_assert_int_eq(expiry_fire(), 1);
	ck_assert_int_eq(tc_status("tx"), STORE_TC_PENDING);
	ck_assert_int_eq(events_of("c1", "resolution", NULL), 0);
	json_t *c;
	ck_assert_int_eq(events_of("c1", "escalation", &c), 1);
	ck_assert_str_eq(json_string_value(json_object_get(c, "from")), "esc");
	ck_assert_str_eq(json_string_value(json_object_get(c, "to")), "boss");
	ck_assert_str_eq(json_string_value(json_object_get(c, "prompt")), "Boss?");
	int64_t deadline = json_integer_value(json_object_get(c, "deadline"));
	ck_assert_int_ge(deadline, now0 + 2 * HOUR_MS);
	ck_assert_int_le(deadline, store_now(st) + 2 * HOUR_MS);
	ck_assert_int_eq(json_array_size(json_object_get(c, "chain")), 2);
	json_decref(c);
	ck_assert_int_eq(wakes.n, 0);
	ck_assert_int_eq(leases.n, 0);
	ck_assert_int_eq(recorded(&notices, "c1"), 1);
	ck_assert_int_eq(expiry_fire(), 0);
	expiry_rearm();
	assert_armed_at(deadline, now0);
}
END_TEST

Suite *make_expiry_suite(void); /* check_main.c, as CHECK_ONE_SUITE */
Suite *make_expiry_suite(void)
{
	Suite *s = suite_create("expiry");
	TCase *tc = tcase_create("deadlines");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120); /* a bound for slow builds (sanitizers), not a clock the tests race */
	tcase_add_test(tc, armed_to_the_earliest_deadline);
	tcase_add_test(tc, passed_deadline_fires_through_the_timer);
	tcase_add_test(tc, passed_deadlines_expire);
	tcase_add_test(tc, resolved_before_its_deadline_not_expired);
	tcase_add_test(tc, ended_conversation_notified_not_woken);
	tcase_add_test(tc, a_backlog_fires_in_batches);
	tcase_add_test(tc, failed_batch_retried_later);
	tcase_add_test(tc, warnings_given_once);
	tcase_add_test(tc, on_expiry_deny_and_approve_settle_resolved);
	tcase_add_test(tc, on_expiry_escalate_hands_on_and_wakes_nobody);
	tcase_add_test(tc, approvers_count_each_name_once);
	tcase_add_test(tc, partial_votes_follow_on_expiry);
	suite_add_tcase(s, tc);
	return s;
}
