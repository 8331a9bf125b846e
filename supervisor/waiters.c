/* waiters.c: long-polls and watches, keyed by conversation (see waiters.h). */
#include "supervisor/waiters.h"
#include "common/jsonmp.h"
#include "conv/conv.h"
#include "supervisor/control.h"
#include "supervisor/convtree.h"
#include "supervisor/durable.h"

#include <bsd/sys/queue.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_BATCH 256 /* events read per store transaction while a watch streams */

struct waiter {
	LIST_ENTRY(waiter) link;  /* on its conversation's list */
	TAILQ_ENTRY(waiter) tq;   /* long-polls: on the deadline list */
	struct wconv *wc;
	struct client *c;
	struct slot *slot;        /* long-poll: the reply to complete */
	struct request rq;        /* long-poll: the query to re-run */
	int64_t deadline;         /* long-poll: monotonic ms */
	int watch;
	uint64_t sent;            /* watch: last seq streamed */
	int runs;                 /* watch: runs are streamed too (asked with `runs`) */
	uint64_t run_id;          /* watch: the latest run streamed (or current when it began), 0: none */
	int run_status;           /* watch: its status as streamed */
	int held;                 /* what it would get is not durable yet: tried again when the frontier moves */
	int broken;               /* watch: an event could not be encoded (out of memory): nothing more is
				   * streamed, the connection closes once its output is out, no hole is seen */
};

/* The waiters of one conversation. */
struct wconv {
	RB_ENTRY(wconv) node;
	LIST_HEAD(, waiter) list;
	char conv[STORE_ID_MAX + 1];
};

CONVTREE_GENERATE(wconv_tree, wconv, node, conv)

static struct {
	store *st;
	waiters_query_fn *query;
	waiters_reply_fn *reply;
	struct wconv_tree convs;
	TAILQ_HEAD(, waiter) polls; /* by insertion (deadlines checked by scan) */
	int nheld;                  /* waiters held for the durable frontier: none, no walk */
} WT = { .convs = RB_INITIALIZER(&WT.convs), .polls = TAILQ_HEAD_INITIALIZER(WT.polls) };

void waiters_init(store *st, waiters_query_fn *query, waiters_reply_fn *reply)
{
	WT.st = st;
	WT.query = query;
	WT.reply = reply;
}

static struct wconv *wconv_find(const char *conv)
{
	return wconv_tree_find(&WT.convs, conv);
}

static struct wconv *wconv_get(const char *conv)
{
	struct wconv *wc = wconv_find(conv);
	if (!wc && (wc = wconv_tree_new(&WT.convs, conv)))
		LIST_INIT(&wc->list);
	return wc;
}

static struct waiter *waiter_new(const char *conv)
{
	struct waiter *wt = calloc(1, sizeof *wt);
	struct wconv *wc = wt ? wconv_get(conv) : NULL;
	if (!wc) {
		free(wt);
		return NULL;
	}
	wt->wc = wc;
	LIST_INSERT_HEAD(&wc->list, wt, link);
	return wt;
}

/* What wt would get is not durable yet: tried again when the frontier moves. */
static void hold(struct waiter *wt)
{
	if (!wt->held)
		WT.nheld++;
	wt->held = 1;
}

static void waiter_free(struct waiter *wt)
{
	if (wt->held)
		WT.nheld--;
	struct wconv *wc = wt->wc;
	LIST_REMOVE(wt, link);
	if (LIST_EMPTY(&wc->list)) {
		RB_REMOVE(wconv_tree, &WT.convs, wc);
		free(wc);
	}
	if (!wt->watch)
		TAILQ_REMOVE(&WT.polls, wt, tq);
	else if (control_watch(wt->c) == wt)
		control_set_watch(wt->c, NULL);
	proto_request_free(&wt->rq);
	free(wt);
}

int waiters_poll(struct client *c, struct slot *s, struct request *rq, int64_t deadline)
{
	struct waiter *wt = waiter_new(rq->conv);
	if (!wt)
		return -ENOMEM;
	wt->c = c;
	wt->slot = s;
	wt->rq = *rq;
	memset(rq, 0, sizeof *rq); /* the waiter owns the request now */
	rq->op = OP_EVENTS;        /* still counted as an `events` in the metrics */
	wt->deadline = deadline;
	TAILQ_INSERT_TAIL(&WT.polls, wt, tq);
	return 0;
}

int waiters_watch(struct client *c, const char *conv, uint64_t after)
{
	if (control_watch(c))
		return -EEXIST;
	struct waiter *wt = waiter_new(conv);
	if (!wt)
		return -ENOMEM;
	wt->c = c;
	wt->watch = 1;
	wt->sent = after;
	control_set_watch(c, wt);
	return 0;
}

int waiters_watch_runs(struct client *c, store_txn *t)
{
	struct waiter *wt = control_watch(c);
	struct store_run r;
	if (!wt)
		return -ENOENT;
	/* Runs stream from now: the latest one as it is is not news. */
	int e = conv_run_running(t, wt->wc->conv, &r);
	if (e < 0)
		return e;
	wt->runs = 1;
	wt->run_id = r.id;
	wt->run_status = r.status;
	return 0;
}

int waiters_watching(const struct client *c)
{
	return control_watch(c) != NULL;
}

/* Answer a long-poll if its query has something now. 1: answered. */
static int poll_answer(struct waiter *wt)
{
	uint64_t last = 0, id = 0;
	struct events_next next;
	int err = 0;
	char msg[160];
	json_t *evs = WT.query(&wt->rq, &last, &next, &id, &err, msg, sizeof msg);
	if (!durable_covers(id)) {
		json_decref(evs);
		hold(wt);
		durable_need(id);
		return 0;
	}
	if (err) {
		slot_error(wt->slot, wt->rq.id, err, msg);
		return 1;
	}
	if (json_array_size(evs) == 0 && !next.after) {
		json_decref(evs);
		return 0;
	}
	slot_ok(wt->slot, wt->rq.id, WT.reply(evs, last, &next));
	return 1;
}

/* 0, or -ENOMEM when o (stolen) is NULL or cannot be encoded. */
static int line_write(struct client *c, json_t *o)
{
	size_t n = 0;
	char *s = jsonmp_dumps(o, JSON_COMPACT, 1, &n); /* never a line short of a key */
	json_decref(o);
	if (!s)
		return -ENOMEM;
	client_write(c, s, n);
	free(s);
	return 0;
}

struct pump_ctx {
	struct waiter *wt;
	size_t n;
};

static int pump_one(void *arg, const struct store_event *ev)
{
	struct pump_ctx *p = arg;
	if (line_write(p->wt->c, json_pack("{so}", "event", conv_event_json(ev)))) {
		p->wt->broken = 1;
		return -ENOMEM;
	}
	p->wt->sent = ev->seq;
	p->n++;
	/* Stop at half the output cap, not at the end of the batch: a batch of
	 * large events would otherwise queue many megabytes at once and hold
	 * the loop (and every other client) while it is encoded. The rest
	 * follows from `sent` when the reader drains. */
	return control_out_pending(p->wt->c) >= CONTROL_OUT_CAP / 2;
}

#define RUNS_PUMP 16 /* runs read per pump: more started and ended between two reads are not streamed */

struct runs_pump {
	uint64_t from;
	struct store_run r[RUNS_PUMP];
	size_t n;
};

static int runs_one(void *arg, const struct store_run *r)
{
	struct runs_pump *p = arg;
	if (r->id < p->from)
		return 1;
	p->r[p->n++] = *r;
	return 0;
}

/* The runs that started or ended since the watch last streamed one, oldest
 * first, as {"run": {...}} lines: read in the transaction its events were
 * (its frontier covers them too). A run that started and ended between two
 * reads is streamed once, ended. */
static void runs_pump(struct waiter *wt, store_txn *t)
{
	struct runs_pump p = { .from = wt->run_id ? wt->run_id : 1 };
	int e = store_runs_list(t, wt->wc->conv, 0, RUNS_PUMP, runs_one, &p, NULL);
	if (e < 0)
		return;
	while (p.n--) {
		const struct store_run *r = &p.r[p.n];
		if (r->id == wt->run_id && r->status == wt->run_status)
			continue;
		if (line_write(wt->c, json_pack("{so}", "run", conv_run_json(r)))) {
			wt->broken = 1; /* as an event: never a stream with a run left out */
			return;
		}
		wt->run_id = r->id;
		wt->run_status = r->status;
	}
}

/* Stream a watch's events after `sent`, a batch at a time while its output
 * has room, then the runs that changed. */
static void watch_pump(struct waiter *wt)
{
	struct client *c = wt->c;
	/* Replies still owed on this connection (the watch's own, or a
	 * long-poll pipelined before it) go first: streamed lines written now
	 * would overtake them. Drained, the connection pumps again. */
	if (control_owes(c) || wt->broken)
		return;
	while (!control_dead(c) && control_out_pending(c) < CONTROL_OUT_CAP / 2) {
		store_txn *t;
		if (store_txn_begin(WT.st, STORE_READ, &t))
			return;
		uint64_t id = store_txn_id(t);
		if (!durable_covers(id)) {
			store_txn_abort(t);
			hold(wt);
			durable_need(id);
			break;
		}
		struct pump_ctx p = { wt, 0 };
		struct store_range r = { .after = wt->sent, .before = wt->sent + WATCH_BATCH + 1, .limit = 0 };
		int err = store_events_stream(t, wt->wc->conv, &r, pump_one, &p);
		if (!err && p.n < WATCH_BATCH && wt->runs)
			runs_pump(wt, t); /* after the events its commit holds, as they were committed */
		store_txn_abort(t);
		if (err == STORE_E_NOTFOUND || wt->broken) {
			control_end(c); /* the conversation was deleted, or the stream cannot go on whole */
			break;
		}
		if (err || p.n < WATCH_BATCH)
			break;
	}
	control_want_write(c);
}

void waiters_drained(struct client *c)
{
	struct waiter *wt = control_watch(c);
	if (wt)
		watch_pump(wt);
}

void waiters_notify(const char *conv)
{
	struct wconv *wc = wconv_find(conv);
	struct waiter *wt, *next;
	if (!wc)
		return;
	/* Answering the last long-poll frees wc: stop with it. */
	for (wt = LIST_FIRST(&wc->list); wt; wt = next) {
		next = LIST_NEXT(wt, link);
		int last = next == NULL;
		if (control_dead(wt->c))
			continue;
		if (wt->watch) {
			watch_pump(wt);
		} else if (poll_answer(wt)) {
			struct client *c = wt->c;
			waiter_free(wt);
			client_flush(c);
		}
		if (last)
			break;
	}
}

void waiters_notify_all(void)
{
	struct wconv *wc, *wn;
	RB_FOREACH_SAFE(wc, wconv_tree, &WT.convs, wn) {
		/* Answering a conversation's last long-poll frees it: by its id. */
		char id[STORE_ID_MAX + 1];
		snprintf(id, sizeof id, "%s", wc->conv);
		waiters_notify(id);
	}
}

void waiters_durable_advanced(void)
{
	struct wconv *wc, *wn;
	if (!WT.nheld)
		return; /* a flush per burst of commits: no walk of every waiter when none waits on it */
	RB_FOREACH_SAFE(wc, wconv_tree, &WT.convs, wn) {
		int any = 0;
		struct waiter *wt;
		LIST_FOREACH(wt, &wc->list, link)
			if (wt->held) {
				wt->held = 0;
				WT.nheld--;
				any = 1;
			}
		if (any)
			waiters_notify(wc->conv); /* may free wc */
	}
}

void waiters_delta(const char *conv, const char *text, size_t len)
{
	struct wconv *wc = wconv_find(conv);
	struct waiter *wt;
	if (!wc)
		return;
	LIST_FOREACH(wt, &wc->list, link) {
		if (!wt->watch || control_dead(wt->c) || control_out_pending(wt->c) > CONTROL_OUT_CAP / 2 ||
		    control_owes(wt->c))
			continue; /* deltas are a live view: a slow reader loses them, never events;
				   * nor may they overtake a reply still owed (see watch_pump) */
		(void)line_write(wt->c, json_pack("{s{ss#}}", "delta", "text", text, (int)len));
		client_flush(wt->c);
	}
}

void waiters_deleted(const char *conv)
{
	struct wconv *wc = wconv_find(conv);
	while (wc && !LIST_EMPTY(&wc->list)) {
		struct waiter *wt = LIST_FIRST(&wc->list);
		struct client *c = wt->c;
		int last = LIST_NEXT(wt, link) == NULL;
		if (wt->watch)
			/* The stream ends with what was sent of the deleted
			 * conversation, not with one created again by its id. */
			control_end(c);
		else
			slot_error(wt->slot, wt->rq.id, PERR_NOT_FOUND, "conversation deleted");
		waiter_free(wt); /* frees wc with its last waiter */
		client_flush(c);
		if (last)
			break;
	}
}

void waiters_client_gone(struct client *c)
{
	struct waiter *wt, *next;
	struct wconv *wc, *wn;
	RB_FOREACH_SAFE(wc, wconv_tree, &WT.convs, wn) {
		for (wt = LIST_FIRST(&wc->list); wt; wt = next) {
			next = LIST_NEXT(wt, link);
			int last = next == NULL;
			if (wt->c == c)
				waiter_free(wt);
			if (last)
				break;
		}
	}
}

void waiters_expire(int64_t now)
{
	struct waiter *wt, *next;
	TAILQ_FOREACH_SAFE(wt, &WT.polls, tq, next) {
		if (wt->deadline > now)
			continue;
		struct client *c = wt->c;
		uint64_t last = 0, id = 0;
		struct events_next after;
		int err = 0;
		char msg[160];
		/* Its time is up: it gets what is durable, at worst nothing new
		 * (the frontier is at most one flush behind). */
		json_t *evs = WT.query(&wt->rq, &last, &after, &id, &err, msg, sizeof msg);
		if (!err && !durable_covers(id)) {
			json_decref(evs);
			hold(wt);
			durable_need(id);
			continue;
		}
		if (err)
			slot_error(wt->slot, wt->rq.id, err, msg);
		else
			slot_ok(wt->slot, wt->rq.id, WT.reply(evs, last, &after));
		waiter_free(wt);
		client_flush(c);
	}
}

int64_t waiters_next_deadline(void)
{
	int64_t d = 0;
	struct waiter *wt;
	TAILQ_FOREACH(wt, &WT.polls, tq)
		if (!d || wt->deadline < d)
			d = wt->deadline;
	return d;
}

void waiters_shutdown(void)
{
	struct waiter *wt, *next;
	TAILQ_FOREACH_SAFE(wt, &WT.polls, tq, next) {
		slot_error(wt->slot, wt->rq.id, PERR_UNAVAILABLE, "agentd is shutting down");
		waiter_free(wt);
	}
}
