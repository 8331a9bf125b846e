/*
 * ops.c: the control protocol's ops (docs/protocol.md), executed at the end
 * of each loop iteration.
 *
 * Group commit: every write request read in one iteration, from all clients,
 * runs in ONE write transaction, and each is acknowledged only after that
 * commit: one flush pair for many events, still durable before any reply.
 * Reads run in order around it: a read whose client sent a write earlier in
 * the same batch waits for the commit (it must see that write); any other read
 * runs at once on the committed state.
 */
#include "supervisor/ops.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "common/mp.h"
#include "conv/conv.h"
#include "supervisor/backup.h"
#include "supervisor/control.h"
#include "supervisor/durable.h"
#include "supervisor/forward.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"
#include "supervisor/nodes.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <bsd/sys/queue.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A request parsed this iteration, executed at its end (after the group
 * commit for writes, so a pipelined read sees the writes before it). */
struct job {
	TAILQ_ENTRY(job) q;
	struct request rq;
	struct slot *slot;       /* NULL: its client went, or it is answered later */
	int64_t started_us;
	uid_t peer_uid;          /* its client's (SO_PEERCRED): resolve records it */
	/* write results, filled inside the group transaction */
	int err;
	char msg[160];
	json_t *reply;   /* success fields */
	json_t *err_extra; /* more fields of an error reply (send's conflict: last_seq), or NULL */
	int ran;         /* a read already answered while the writes were held */
	int after_write; /* a read queued behind a write of its client: runs after the commit */
	int excluded;    /* a write that met a damaged record: failed alone, left out of the retry */
	int parked;      /* its slot is answered later (a long-poll, a compact): counted then */
	uint64_t txnid;  /* the transaction its reply shows: sent once that is durable */
};

static struct {
	const struct ops_env *env;
	TAILQ_HEAD(, job) jobs; /* this iteration's requests */
} O = { .jobs = TAILQ_HEAD_INITIALIZER(O.jobs) };

/* The writer thread's state (below, "the writer thread"). */
struct agroup;
static void on_group_done(struct loop_watch *lw, uint32_t events);

static struct {
	int off;                /* AGENTD_WRITER_THREAD=0: every group on the loop (benchmarks compare) */
	int started, quit;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct agroup *todo;    /* handed to the thread (under mu) */
	struct agroup *done;    /* handed back (under mu) */
	struct agroup *ready;   /* made by ops_execute, handed over at the iteration's end */
	int kick;               /* requests came during the commit: the next wait must not block */
	int efd;
	struct loop_watch lw;
} WT = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .efd = -1, .lw = { on_group_done, 1 } };

static void writer_client_gone(struct client *c);

void ops_init(const struct ops_env *env)
{
	O.env = env;
	const char *wt = getenv("AGENTD_WRITER_THREAD");
	WT.off = wt && !strcmp(wt, "0");
}

int ops_request(struct client *c, struct slot *s, struct request *rq, int64_t started_us, int after_write)
{
	struct job *j = calloc(1, sizeof *j);
	if (!j)
		return -ENOMEM;
	j->rq = *rq;
	memset(rq, 0, sizeof *rq);
	j->slot = s;
	j->started_us = started_us;
	j->peer_uid = control_uid(c);
	j->after_write = after_write;
	TAILQ_INSERT_TAIL(&O.jobs, j, q);
	return 0;
}

static void jobs_client_gone(struct job *first, struct client *c)
{
	for (struct job *j = first; j; j = TAILQ_NEXT(j, q))
		if (j->slot && slot_client(j->slot) == c)
			j->slot = NULL;
}

void ops_client_gone(struct client *c)
{
	jobs_client_gone(TAILQ_FIRST(&O.jobs), c);
	writer_client_gone(c);
}

/* A store error as the protocol's code. */
static int perr_from_store(int e)
{
	switch (e) {
	case 0: return PERR_OK;
	case STORE_E_NOTFOUND: return PERR_NOT_FOUND;
	case STORE_E_STALE: return PERR_STALE;
	case STORE_E_CONFLICT: return PERR_CONFLICT;
	case STORE_E_FULL: return PERR_STORE_FULL;
	case STORE_E_INVAL: return PERR_BAD_REQUEST;
	/* A PostgreSQL store that refuses writes for now (read-only) or
	 * cannot be reached (a restart, a failover): nothing was written,
	 * and a retry once it is back succeeds. */
	case -EROFS: case -ECONNRESET: case -ECONNREFUSED: case STORE_E_INDOUBT: return PERR_UNAVAILABLE;
	}
	return PERR_INTERNAL;
}

/* What a client is told of a store that is unavailable (perr_from_store). */
static const char *store_unavailable_why(int e)
{
	if (e == STORE_E_INDOUBT)
		return "the connection to the store's database was lost during the commit, and whether it was made "
		       "is unknown; a retry with the same event_id is written once";
	return e == -EROFS ? "the store refuses writes (its database is read-only): nothing was written; retry later"
			   : "the store's database cannot be reached: nothing was written; retry later";
}

_Static_assert((int)PROTO_ENDED == (int)STORE_ENDED && (int)PROTO_SUSPENDED == (int)STORE_SUSPENDED && (int)PROTO_IDLE == (int)STORE_IDLE &&
		       (int)PROTO_ACTIVE == (int)STORE_ACTIVE && (int)PROTO_PAUSED == (int)STORE_PAUSED,
	       "the codec's conversation statuses are the store's");
_Static_assert((int)PROTO_TC_PENDING == (int)STORE_TC_PENDING && (int)PROTO_TC_RESOLVED == (int)STORE_TC_RESOLVED &&
		       (int)PROTO_TC_ERRORED == (int)STORE_TC_ERRORED && (int)PROTO_TC_EXPIRED == (int)STORE_TC_EXPIRED &&
		       (int)PROTO_TC_CANCELLED == (int)STORE_TC_CANCELLED,
	       "the codec's tool call statuses are the store's");

static void job_error(struct job *j, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void job_error(struct job *j, int err, const char *fmt, ...)
{
	va_list ap;
	j->err = err;
	va_start(ap, fmt);
	vsnprintf(j->msg, sizeof j->msg, fmt, ap);
	va_end(ap);
}

/* A store error to a job error with a message that names the object. */
static int job_store_error(struct job *j, int e, const char *what)
{
	int err = perr_from_store(e);
	/* Name what was not found (messages name what was wrong):
	 * "conversation 'demo' not found", not just "conversation not found". */
	const char *id = j->rq.tool_call_id ? j->rq.tool_call_id : j->rq.conv;
	if (e == -ENOMEM)
		job_error(j, PERR_INTERNAL, "out of memory");
	else if (e == STORE_E_NOTFOUND && id)
		job_error(j, err, "%s '%s' not found", what, id);
	else if (e == STORE_E_NOTFOUND)
		job_error(j, err, "%s not found", what);
	else if (e == STORE_E_FULL)
		job_error(j, err, "the store is full (map size limit reached, or the disk is full)");
	else if (err == PERR_UNAVAILABLE)
		job_error(j, err, "%s: %s", what, store_unavailable_why(e));
	else
		job_error(j, err, "%s: %s", what, store_strerror(e));
	return err;
}

/* 0, or jsonmp_pack's -EINVAL (too deep) or -ENOMEM; b is freed on failure. */
static int pack_json(struct jsonmp_buf *b, json_t *v)
{
	jsonmp_buf_init(b);
	int e = jsonmp_pack(&b->pk, v);
	if (e)
		jsonmp_buf_destroy(b);
	return e;
}

/* A failed pack_json as the client's error or ours. */
static void pack_error(struct job *j, int e, const char *what)
{
	if (e == -ENOMEM)
		job_error(j, PERR_INTERNAL, "out of memory");
	else
		job_error(j, PERR_BAD_REQUEST, "%s nest too deeply", what);
}

/* Stored bytes as JSON: null when undecodable (agentd check names it),
 * NULL when out of memory (the reply fails; it never shows null for it). */
static json_t *mp_json(store_bytes b)
{
	json_t *v;
	int e = jsonmp_decode(b.ptr, b.len, &v);
	return e == -ENOMEM ? NULL : e ? json_null() : v;
}

/* ---- reads ----------------------------------------------------------- */

static json_t *usage_json(const struct store_usage *u)
{
	return json_pack("{sIsIsf}", "input_tokens", (json_int_t)u->input_tokens, "output_tokens",
			 (json_int_t)u->output_tokens, "cost", u->cost);
}

static json_t *conv_json(store_txn *t, const struct store_conv *c, int with_worker)
{
	char id[STORE_ID_MAX + 1];
	uint64_t last = 0;
	memcpy(id, c->id.ptr, c->id.len);
	id[c->id.len] = 0;
	store_event_latest_seq(t, id, &last);
	json_t *o = json_pack("{ss#sososIsosIsI}", "id", (const char *)c->id.ptr, (int)c->id.len, "settings",
			      mp_json(c->settings), "status", json_string(store_status_name(c->status)), "last_seq",
			      (json_int_t)last, "usage", conv_usage_json(&c->usage, c->turns), "created_at", (json_int_t)c->created_at,
			      "updated_at", (json_int_t)c->updated_at);
	/* A field that cannot be added (out of memory) fails the record: never
	 * a reply that silently lacks it. */
	if (o && (json_object_set_new(o, "fsm_state", c->fsm_state.len ? mp_json(c->fsm_state) : json_null()) ||
		  json_object_set_new(o, "metadata", c->metadata.len ? mp_json(c->metadata) : json_object()) ||
		  (with_worker && json_object_set_new(o, "worker", workers_conv_json(id))))) {
		json_decref(o);
		return NULL;
	}
	/* A fork's origin rides in its settings (agentd's key, which no
	 * client may set): shown beside them, not in them. */
	json_t *settings = json_object_get(o, "settings");
	json_t *origin = json_incref(json_object_get(settings, CONV_FORKED_FROM));
	json_object_del(settings, CONV_FORKED_FROM);
	if (json_object_set_new(o, "forked_from", origin ? origin : json_null())) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *tool_call_json(const struct store_tool_call *tc)
{
	json_t *o = json_pack("{s:s#, s:s#, s:s, s:s, s:s#, s:o, s:I, s:I}", "id", (const char *)tc->id.ptr, (int)tc->id.len,
			      "conversation", (const char *)tc->conversation.ptr, (int)tc->conversation.len,
			      "executor", tc->executor == STORE_EXEC_HUMAN ? "human" : "server", "status",
			      store_tc_status_name(tc->status), "name", (const char *)tc->name.ptr, (int)tc->name.len,
			      "args", mp_json(tc->args), "inserted_at", (json_int_t)tc->inserted_at, "attempts",
			      (json_int_t)tc->attempts);
	if (o && (json_object_set_new(o, "result", tc->result.len ? mp_json(tc->result) : json_null()) ||
		  json_object_set_new(o, "resolved_at", tc->resolved_at ? json_integer(tc->resolved_at) : json_null()) ||
		  json_object_set_new(o, "deadline", tc->deadline ? json_integer(tc->deadline) : json_null()) ||
		  (tc->prompt.len && json_object_set_new(o, "prompt", mp_json(tc->prompt))))) {
		json_decref(o);
		return NULL; /* as conv_json: never a record short of a field */
	}
	return o;
}

static int append_json(void *arg, const struct store_event *ev)
{
	json_t *e = conv_event_json(ev);
	return e && !json_array_append_new(arg, e) ? 0 : -ENOMEM;
}

json_t *ops_events_query(const struct request *rq, uint64_t *last_seq, uint64_t *next, uint64_t *txnid, int *err,
			 char *msg, size_t msglen)
{
	store_txn *t;
	int e = store_txn_begin(O.env->st, STORE_READ, &t);
	json_t *a = json_array();
	*next = 0;
	*txnid = e ? 0 : store_txn_id(t);
	if (!e && !a)
		e = -ENOMEM;
	if (!e)
		e = store_event_latest_seq(t, rq->conv, last_seq);
	if (!e) {
		struct store_range r = { rq->after, rq->before, rq->limit, rq->type };
		/* Without a limit, one reply covers at most PROTO_EVENTS_MAX
		 * seqs (the oldest after `after`; seqs are dense): a whole long
		 * log built as one JSON reply would stall the loop for everyone.
		 * When seqs are left past that, *next is the last one covered:
		 * the client pages on with after = next (next_after). */
		if (!r.limit && (!r.before || (r.before > r.after && r.before - r.after > PROTO_EVENTS_MAX + 1)) &&
		    r.after <= UINT64_MAX - PROTO_EVENTS_MAX - 1) {
			r.before = r.after + PROTO_EVENTS_MAX + 1;
			if (*last_seq >= r.before)
				*next = r.before - 1;
		}
		e = store_events_stream(t, rq->conv, &r, append_json, a);
	}
	store_txn_abort(t);
	if (e) {
		*err = perr_from_store(e);
		if (e == -ENOMEM)
			snprintf(msg, msglen, "out of memory");
		else
			snprintf(msg, msglen, e == STORE_E_NOTFOUND ? "conversation '%s' not found" : "%s: %s",
				 rq->conv, store_strerror(e));
		json_decref(a);
		return NULL;
	}
	*err = 0;
	return a;
}

/* Park j's reply until owner, the node that runs its conversation, has
 * acted (forward.h); get's reply so far goes with it. A failure to ask is
 * j's error (get: its reply as it is, without the owner's worker). */
static void park_forward(struct job *j, int action, const char *owner, int sig)
{
	json_t *partial = action == FORWARD_WORKER ? j->reply : NULL;
	if (!j->slot)
		return; /* its client went: nobody to answer */
	int e = forward_ask(action, j->rq.conv, owner, j->slot, j->rq.id, sig, json_incref(partial));
	if (e == -ENOMEM) {
		job_error(j, PERR_INTERNAL, "out of memory"); /* never a get short of the owner's worker */
		return;
	}
	if (e) {
		if (action != FORWARD_WORKER)
			job_error(j, PERR_UNAVAILABLE, "conversation %s is run by node %s, which cannot be asked: %s",
				  j->rq.conv, owner, e == -ENOMEM ? "out of memory" : store_strerror(e));
		return;
	}
	json_decref(j->reply);
	j->reply = NULL;
	j->slot = NULL; /* answered when the owner answers, or after lease_time */
	j->parked = 1;
}

/* Whether j's conversation is run by another live node, to which j went
 * (parked, or failed with j's error): 1, or 0 to act here. */
static int forwarded(struct job *j, int action)
{
	store_txn *t;
	char owner[STORE_ID_MAX + 1];
	if (!nodes_shared())
		return 0;
	int e = store_txn_begin(O.env->st, STORE_READ, &t);
	if (!e) {
		e = forward_owner(t, j->rq.conv, owner);
		store_txn_abort(t);
	}
	if (e < 0) {
		job_store_error(j, e, "conversation");
		return 1;
	}
	if (e == 1)
		park_forward(j, action, owner, j->rq.signal);
	return e == 1;
}

static void op_get(store_txn *t, struct job *j)
{
	struct store_conv c;
	struct store_run run;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e) {
		job_store_error(j, e, "conversation");
		return;
	}
	json_t *o = conv_json(t, &c, 1);
	int running = o ? conv_run_running(t, j->rq.conv, &run) : 0;
	/* the active run (docs/protocol.md, "Runs"), null between turns; a
	 * field that cannot be added fails the reply (out of memory) */
	if (o && json_object_set_new(o, "run", running > 0 ? conv_run_json(&run) : json_null())) {
		json_decref(o);
		o = NULL;
	}
	uint64_t first = 1;
	/* where its log begins (a fork's may begin later) */
	if (o && store_event_first_seq(t, j->rq.conv, &first) == 0 &&
	    json_object_set_new(o, "first_seq", json_integer((json_int_t)first))) {
		json_decref(o);
		o = NULL;
	}
	j->reply = json_pack("{so}", "conversation", o); /* NULL o: NULL, answered "out of memory" */
	char owner[STORE_ID_MAX + 1];
	if (j->reply && o && forward_owner(t, j->rq.conv, owner) == 1)
		park_forward(j, FORWARD_WORKER, owner, 0);
}

struct runs_ctx {
	json_t *a;
	uint64_t last;
};

static int runs_one(void *arg, const struct store_run *r)
{
	struct runs_ctx *c = arg;
	c->last = r->id;
	return json_array_append_new(c->a, conv_run_json(r)) ? -ENOMEM : 0;
}

static void op_runs(store_txn *t, struct job *j)
{
	struct runs_ctx c = { json_array(), 0 };
	int more = 0;
	int e = c.a ? store_runs_list(t, j->rq.conv, j->rq.before, j->rq.limit, runs_one, &c, &more) : -ENOMEM;
	if (e) {
		json_decref(c.a);
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "runs", c.a);
	/* Without `next` a client takes the page as the last one. */
	if (more && j->reply && json_object_set_new(j->reply, "next", json_integer((json_int_t)c.last))) {
		json_decref(j->reply);
		j->reply = NULL; /* answered "out of memory" */
	}
}

struct list_ctx {
	store_txn *t;
	json_t *a;
	char last[STORE_ID_MAX + 1];
};

static int list_one(void *arg, const struct store_conv *c)
{
	struct list_ctx *l = arg;
	memcpy(l->last, c->id.ptr, c->id.len);
	l->last[c->id.len] = 0;
	return json_array_append_new(l->a, conv_json(l->t, c, 1)) ? -ENOMEM : 0;
}

_Static_assert(PROTO_META_MAX == STORE_META_MAX && PROTO_META_KEY_MAX == STORE_META_KEY_MAX &&
		       PROTO_META_VAL_MAX == STORE_META_VAL_MAX, "the protocol's metadata bounds are the store's");

/* list's model filter: settings.model, read in place from the stored map. */
static int model_is(void *arg, const struct store_conv *c)
{
	const char *want = arg;
	struct mp m;
	uint32_t n;
	mp_init(&m, c->settings.ptr, c->settings.len);
	if (mp_map(&m, &n))
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		const char *k, *v;
		size_t kl, vl;
		const void *skip;
		size_t sl;
		if (mp_str(&m, &k, &kl))
			return 0;
		if (kl == 5 && memcmp(k, "model", 5) == 0)
			return mp_str(&m, &v, &vl) == 0 && vl == strlen(want) && memcmp(v, want, vl) == 0;
		if (mp_skip(&m, &skip, &sl))
			return 0;
	}
	return 0;
}

static void op_list(store_txn *t, struct job *j)
{
	struct list_ctx l = { t, json_array(), "" };
	int more = 0;
	struct store_kv kv[PROTO_META_MAX];
	struct store_conv_filter f = { .status = j->rq.status, .updated_after = j->rq.updated_after,
				       .updated_before = j->rq.updated_before };
	const char *k;
	json_t *v;
	if (j->rq.metadata)
		json_object_foreach(j->rq.metadata, k, v) {
			kv[f.nmeta].key = (store_bytes){ k, strlen(k) };
			kv[f.nmeta].value = (store_bytes){ json_string_value(v), json_string_length(v) };
			f.nmeta++;
		}
	f.meta = kv;
	if (j->rq.model) {
		f.match = model_is;
		f.match_arg = (void *)j->rq.model;
	}
	int e = store_conv_find(t, &f, j->rq.conv, j->rq.limit, list_one, &l, &more);
	if (e == STORE_E_CORRUPT) { /* the others are listed: serve them */
		log_error("list: a conversation record cannot be decoded (see agentd check)");
		e = 0;
	}
	if (e) {
		json_decref(l.a);
		job_store_error(j, e, "list");
		return;
	}
	j->reply = json_pack("{so}", "conversations", l.a);
	/* Without `next` a client takes the page as the last one. */
	if (more && j->reply && json_object_set_new(j->reply, "next", json_string(l.last))) {
		json_decref(j->reply);
		j->reply = NULL; /* answered "out of memory" */
	}
}

/* The reply to `events`: next_after (an extension) when a capped reply left
 * seqs unread. */
json_t *ops_events_reply(json_t *evs, uint64_t last, uint64_t next)
{
	json_t *o = json_pack("{soso}", "events", evs, "last_seq", json_integer((json_int_t)last));
	/* Without next_after a capped reply would read as the whole log. */
	if (o && next && json_object_set_new(o, "next_after", json_integer((json_int_t)next))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A range asked from before where the log begins (a fork's log begins
 * after the summary that stands in for what came before): the reply says
 * first_seq (an extension), so a client paging from 0 sees why its first
 * event is not seq 1. Asked only when the events did not start at after + 1. */
static int events_first_seq(struct job *j)
{
	store_txn *t;
	uint64_t first = 1;
	if (store_txn_begin(O.env->st, STORE_READ, &t))
		return 0; /* an extension left out, never the events */
	int e = store_event_first_seq(t, j->rq.conv, &first);
	store_txn_abort(t);
	if (e || first <= 1 || j->rq.after + 1 >= first)
		return 0;
	return json_object_set_new(j->reply, "first_seq", json_integer((json_int_t)first));
}

static void op_events(store_txn *t, struct job *j)
{
	uint64_t last = 0, next;
	int err;
	json_t *evs = ops_events_query(&j->rq, &last, &next, &j->txnid, &err, j->msg, sizeof j->msg);
	durable_need(j->txnid);
	if (err) {
		j->err = err;
		return;
	}
	if (json_array_size(evs) == 0 && !next && j->rq.wait_ms > 0) {
		/* Long-poll: park it on the conversation until a commit or the deadline. */
		json_decref(evs);
		if (waiters_poll(slot_client(j->slot), j->slot, &j->rq, loop_now_ms() + j->rq.wait_ms)) {
			job_error(j, PERR_INTERNAL, "out of memory");
			return;
		}
		j->slot = NULL; /* completed by the waiter */
		j->parked = 1;
		return;
	}
	json_t *first = json_array_get(evs, 0);
	uint64_t from = (uint64_t)json_integer_value(json_object_get(first, "seq"));
	int asked_before = j->rq.after < last && (!first || from > j->rq.after + 1);
	j->reply = ops_events_reply(evs, last, next);
	if (j->reply && asked_before && events_first_seq(j))
		j->reply = NULL; /* answered "out of memory" */
}

static void op_watch(store_txn *t, struct job *j)
{
	uint64_t last = 0;
	int e = store_event_latest_seq(t, j->rq.conv, &last);
	if (e) {
		job_store_error(j, e, "conversation");
		return;
	}
	uint64_t after = j->rq.has_after ? j->rq.after : last, first = 1;
	/* A log that begins after seq 1 (a fork's): a watch from before it
	 * starts at its first seq, as `events` does (the pump reads batches
	 * from `after` on and would find nothing before it). */
	if ((e = store_event_first_seq(t, j->rq.conv, &first))) {
		job_store_error(j, e, "conversation");
		return;
	}
	if (after + 1 < first)
		after = first - 1;
	int e2 = waiters_watch(slot_client(j->slot), j->rq.conv, after);
	if (e2 == -EEXIST) {
		job_error(j, PERR_CONFLICT, "this connection is already watching");
		return;
	}
	if (!e2 && j->rq.runs)
		e2 = waiters_watch_runs(slot_client(j->slot), t);
	if (e2) {
		job_error(j, PERR_INTERNAL, "out of memory");
		return;
	}
	j->reply = json_pack("{sI}", "last_seq", (json_int_t)last);
}

static void op_tool_call(store_txn *t, struct job *j)
{
	struct store_tool_call tc;
	int e = store_tool_call_get(t, j->rq.tool_call_id, &tc);
	if (e) {
		job_store_error(j, e, "tool call");
		return;
	}
	j->reply = json_pack("{so}", "tool_call", tool_call_json(&tc));
}

static int tc_one(void *arg, const struct store_tool_call *tc)
{
	return json_array_append_new(arg, tool_call_json(tc)) ? -ENOMEM : 0;
}

static void op_tool_calls(store_txn *t, struct job *j)
{
	json_t *a = json_array();
	unsigned mask = j->rq.status >= 0 ? 1u << j->rq.status : 0;
	int e = store_tool_calls_list(t, j->rq.conv, mask, tc_one, a);
	if (e) {
		json_decref(a);
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "tool_calls", a);
}

static void op_summary(store_txn *t, struct job *j)
{
	struct store_summary s;
	struct store_conv c;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (!e)
		e = store_summary_latest(t, j->rq.conv, &s);
	if (e == STORE_E_NOTFOUND && store_conv_get(t, j->rq.conv, &c) == 0) {
		j->reply = json_pack("{so}", "summary", json_null());
		return;
	}
	if (e) {
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "summary", conv_summary_json(&s));
}

static int mc_one(void *arg, const struct store_model_call *mc)
{
	/* The worker keys a summarize call's row by bit 62 + the summary's to_seq. */
	int summary = (mc->turn_ref >> 62) & 1;
	json_t *o = json_pack("{sssIss#sosIsIsIso}", "task", summary ? "summarize" : "turn", "turn_ref",
			      (json_int_t)(mc->turn_ref & ~(1ULL << 62)), "model",
			      (const char *)mc->model.ptr, (int)mc->model.len, "usage", usage_json(&mc->usage),
			      "latency_ms", (json_int_t)mc->latency_ms, "summary_version", (json_int_t)mc->summary_version,
			      "inserted_at", (json_int_t)mc->inserted_at, "rendered_context", mp_json(mc->rendered));
	return json_array_append_new(arg, o) ? -ENOMEM : 0;
}

static void op_audit(store_txn *t, struct job *j)
{
	json_t *a = json_array();
	/* docs/protocol.md (audit): empty unless audit is on (rows kept from when it was
	 * on are removed by their TTL). */
	int e = O.env->cfg->audit ? store_model_calls_list(t, j->rq.conv, mc_one, a) : store_conv_get(t, j->rq.conv, &(struct store_conv){ 0 });
	if (e) {
		json_decref(a);
		job_store_error(j, e, "conversation");
		return;
	}
	j->reply = json_pack("{so}", "model_calls", a);
}

static int conv_exists(struct job *j)
{
	store_txn *t;
	struct store_conv c;
	int e = store_txn_begin(O.env->st, STORE_READ, &t);
	if (!e)
		e = store_conv_get(t, j->rq.conv, &c);
	store_txn_abort(t);
	if (e)
		job_store_error(j, e, "conversation");
	return e == 0;
}

static void op_kill(store_txn *t, struct job *j)
{
	if (!conv_exists(j) || forwarded(j, FORWARD_KILL))
		return;
	json_t *worker = workers_conv_json(j->rq.conv);
	if (!worker)
		return; /* out of memory: answered so, nothing killed (not "no worker") */
	json_t *pid = json_incref(json_object_get(worker, "pid"));
	json_decref(worker);
	if (pid && workers_kill(j->rq.conv, j->rq.signal) != 0) {
		json_decref(pid);
		pid = NULL;
	}
	j->reply = json_pack("{so}", "pid", pid ? pid : json_null());
}

static void op_stop(store_txn *t, struct job *j)
{
	if (!conv_exists(j) || forwarded(j, FORWARD_STOP))
		return;
	j->reply = json_pack("{sb}", "stopping", workers_stop(j->rq.conv) == 0);
}

static void op_compact(store_txn *t, struct job *j)
{
	if (!conv_exists(j) || forwarded(j, FORWARD_COMPACT))
		return;
	if (workers_wake(j->rq.conv)) {
		job_error(j, PERR_INTERNAL, "could not start a worker for %s", j->rq.conv);
		return;
	}
	if (workers_compact(j->rq.conv, j->slot, j->rq.id)) {
		job_error(j, PERR_INTERNAL, "could not reach the worker of %s", j->rq.conv);
		return;
	}
	j->slot = NULL; /* answered when the worker reports */
	j->parked = 1;
}

static void op_status(store_txn *t, struct job *j)
{
	struct store_stat st = { 0 };
	store_stat(O.env->st, &st);
	/* A PostgreSQL store shows its target, never its password. */
	char *pg = O.env->cfg->store ? config_store_shown(O.env->cfg->store) : NULL;
	j->reply = json_pack("{sssIsos{sssssIsIsIsIss}}", "version", AGENTD_VERSION, "uptime_ms",
			     (json_int_t)(loop_now_ms() - O.env->started_ms), "workers", workers_json(), "store",
			     "backend", O.env->cfg->store ? "postgresql" : "lmdb", "path",
			     pg ? pg : O.env->data_dir, "size_bytes", (json_int_t)st.size_bytes, "file_bytes",
			     (json_int_t)st.file_bytes, "map_size", (json_int_t)st.map_size, "readers",
			     (json_int_t)st.readers, "sync", st.sync == STORE_SYNC_NONE ? "none" : "full");
	free(pg);
	json_t *node = nodes_status_json();
	if (j->reply && (!node || json_object_set_new(j->reply, "node", node))) { /* node is taken either way */
		json_decref(j->reply);
		j->reply = NULL; /* answered "out of memory": never a status short of its node */
	} else if (!j->reply) {
		json_decref(node);
	}
}

static void op_metrics(store_txn *t, struct job *j)
{
	struct store_stat st = { 0 };
	store_stat(O.env->st, &st);
	struct metrics_gauges g = { workers_live(), control_nclients(), st.size_bytes, st.map_size, st.flushes,
				    st.flushes_spared, durable_flush_failures() };
	size_t len = 0;
	char *buf = metrics_text(&g, &len);
	char *more = buf ? nodes_metrics_text() : NULL;
	if (buf && !more) {
		free(buf); /* never a text short of the node's lines */
		buf = NULL;
	}
	if (more) {
		size_t m = strlen(more);
		char *both = realloc(buf, len + m + 1);
		if (both) {
			memcpy(both + len, more, m + 1);
			buf = both;
			len += m;
		} else {
			free(buf); /* never a text short of the node's lines */
			buf = NULL;
		}
		free(more);
	}
	j->reply = buf ? json_pack("{ss#}", "text", buf, (int)len) : NULL; /* NULL: out of memory, not an empty text */
	free(buf);
}

static void op_backup(store_txn *t, struct job *j)
{
	int e = backup_start(j->rq.path, j->slot, j->rq.id);
	if (e == -EBUSY) {
		job_error(j, PERR_BUSY, "a backup is already running: one at a time");
	} else if (e == -ENOTDIR) {
		job_error(j, PERR_BAD_REQUEST, "%.120s is not a directory", j->rq.path);
	} else if (e) {
		job_error(j, e == -ENOMEM ? PERR_INTERNAL : PERR_BAD_REQUEST, "cannot make %.100s: %s", j->rq.path,
			  strerror(-e));
	} else {
		j->slot = NULL; /* answered when the copy is done (backup.c) */
		j->parked = 1;
	}
}

/* The nodes sharing the store, as their heartbeats left them. */
static void op_nodes(store_txn *t, struct job *j)
{
	int e = nodes_json(t, &j->reply);
	if (e)
		job_store_error(j, e, "the nodes");
}

/* ---- writes (inside the group transaction) --------------------------- */

/* What a write leaves for its after step. */
struct wres {
	char conv[STORE_ID_MAX + 1];
	uint64_t seq;
	int active; /* a fork whose log owes a turn: it gets a worker */
	int ended; /* the resolved call's conversation is ended: it gets no worker */
	int paused; /* send: the conversation is paused (no worker); update: it still is */
	int resumed; /* update: a larger budget made a paused conversation active */
	struct store_usage usage; /* update: the committed usage and turns the budget is checked against */
	uint64_t turns;
	size_t appended; /* send: events written (0: every one was a duplicate) */
};

/* Store metadata (checked by the codec) as the conversation's whole map. */
static int meta_put(store_txn *t, struct job *j, const char *id, json_t *m)
{
	struct jsonmp_buf b;
	if (pack_json(&b, m))
		return -ENOMEM;
	struct store_conv_patch p = { .set = STORE_SET_METADATA, .metadata = { b.sb.data, b.sb.size } };
	int e = store_conv_put(t, id, &p);
	jsonmp_buf_destroy(&b);
	return e;
}

/* update's metadata: the patch merged into the stored map, a null value
 * deleting its key. NULL with j's error set when the result breaks a bound. */
static json_t *meta_merge(struct job *j, const struct store_conv *c)
{
	json_t *m = NULL;
	int de = c->metadata.len ? jsonmp_decode(c->metadata.ptr, c->metadata.len, &m) : 0;
	if (!c->metadata.len && !(m = json_object()))
		de = -ENOMEM;
	const char *k;
	json_t *v;
	if (de == -ENOMEM) {
		job_error(j, PERR_INTERNAL, "out of memory");
		return NULL;
	}
	if (!json_is_object(m)) {
		json_decref(m);
		job_error(j, PERR_INTERNAL, "stored metadata of %s is unreadable", j->rq.conv);
		return NULL;
	}
	json_object_foreach(j->rq.metadata, k, v) {
		if (json_is_null(v)) {
			json_object_del(m, k);
		} else if (json_object_set(m, k, v)) {
			json_decref(m); /* never metadata stored short of a key */
			job_error(j, PERR_INTERNAL, "out of memory");
			return NULL;
		}
	}
	if (json_object_size(m) > PROTO_META_MAX) {
		job_error(j, PERR_BAD_REQUEST, "metadata of %s would have %zu keys (at most %d)", j->rq.conv,
			  json_object_size(m), PROTO_META_MAX);
		json_decref(m);
		return NULL;
	}
	return m;
}

static int w_create(store_txn *t, struct job *j, struct wres *r)
{
	char gen[20];
	const char *id = j->rq.conv;
	if (!id) {
		id_random(gen, sizeof gen, "c-", 8);
		id = gen;
	}
	struct jsonmp_buf b;
	int e = pack_json(&b, j->rq.settings);
	if (e) {
		pack_error(j, e, "settings");
		return 0;
	}
	e = store_conv_create(t, id, (store_bytes){ b.sb.data, b.sb.size });
	jsonmp_buf_destroy(&b);
	if (!e && j->rq.metadata && json_object_size(j->rq.metadata))
		e = meta_put(t, j, id, j->rq.metadata);
	if (e == STORE_E_CONFLICT)
		job_error(j, PERR_CONFLICT, "conversation %s already exists", id);
	else if (e)
		return job_store_error(j, e, "create"), e;
	else
		j->reply = json_pack("{ss}", "conversation", id);
	return 0;
}

/* A paused conversation's update whose settings (p's, merged) give a
 * budget its committed usage is under: active again, so its owed turn runs.
 * Still spent: it stays paused (the reply says so), with no new event. */
static int budget_resume(struct store_conv_patch *p, struct wres *r)
{
	json_t *settings = jsonmp_unpack(p->settings.ptr, p->settings.len);
	if (!settings)
		return -ENOMEM; /* just packed: only memory can fail; never decided on the defaults */
	struct config_budget b;
	conv_budget_of(settings, &O.env->cfg->budget, &b);
	json_decref(settings);
	r->resumed = !conv_budget_exceeded(&b, &r->usage, r->turns, NULL);
	if (r->resumed) {
		p->set |= STORE_SET_STATUS;
		p->status = STORE_ACTIVE;
	}
	return 0;
}

/* w_update's new settings: the stored ones with the request's merged in,
 * packed into b and set in p. 0, or -1 with j's error set. */
static int update_settings(struct job *j, const struct store_conv *c, struct jsonmp_buf *b,
			   struct store_conv_patch *p)
{
	json_t *merged;
	int de = jsonmp_decode(c->settings.ptr, c->settings.len, &merged);
	if (de == -ENOMEM || (!de && json_object_update(merged, j->rq.settings))) {
		json_decref(merged);
		job_error(j, PERR_INTERNAL, "out of memory"); /* never settings stored short of a key */
		return -1;
	}
	if (!json_is_object(merged)) {
		json_decref(merged);
		job_error(j, PERR_INTERNAL, "stored settings of %s are unreadable", j->rq.conv);
		return -1;
	}
	de = pack_json(b, merged);
	json_decref(merged);
	if (de) {
		pack_error(j, de, "settings");
		return -1;
	}
	p->set |= STORE_SET_SETTINGS;
	p->settings = (store_bytes){ b->sb.data, b->sb.size };
	return 0;
}

/* w_update's new metadata, merged as settings are; allowed on an ended
 * conversation too (labels for what is kept, not for what runs). Packed
 * into mb and set in p. 0, or -1 with j's error set. */
static int update_metadata(struct job *j, const struct store_conv *c, struct jsonmp_buf *mb,
			   struct store_conv_patch *p)
{
	json_t *m = meta_merge(j, c);
	if (!m)
		return -1;
	int bad = pack_json(mb, m);
	json_decref(m);
	if (bad)
		return pack_error(j, bad, "metadata"), -1;
	p->set |= STORE_SET_METADATA;
	p->metadata = (store_bytes){ mb->sb.data, mb->sb.size };
	return 0;
}

/* w_update's writes: the patch, and what ending or resuming brings. */
static int update_write(store_txn *t, struct job *j, const struct store_conv *c, const struct store_conv_patch *p,
			const struct wres *r)
{
	int e = p->set ? store_conv_put(t, j->rq.conv, p) : 0;
	/* Ended, its worker is stopped and none starts again: a run still
	 * running would stay so for good. It ends interrupted here; a worker
	 * that still completes the turn ends it as it does every run. */
	if (!e && j->rq.status == STORE_ENDED && c->status != STORE_ENDED)
		e = conv_run_end(t, j->rq.conv, STORE_RUN_INTERRUPTED);
	if (!e && j->rq.status == STORE_ENDED) /* a worker on another node: that node stops it */
		e = forward_tell(t, j->rq.conv, "end");
	if (!e && r->resumed)
		e = lease_ahead(t, j->rq.conv);
	return e;
}

static int w_update(store_txn *t, struct job *j, struct wres *r)
{
	struct store_conv c;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e)
		return job_store_error(j, e, "conversation"), e == STORE_E_NOTFOUND ? 0 : e;
	if (c.status == STORE_ENDED && j->rq.settings) {
		job_error(j, PERR_CONFLICT, "conversation %s is ended", j->rq.conv);
		return 0;
	}
	struct store_conv_patch p = { 0 };
	struct jsonmp_buf b = { 0 }, mb = { 0 };
	int have_buf = 0, have_mb = 0;
	r->usage = c.usage;
	r->turns = c.turns;
	r->resumed = 0;
	if (j->rq.settings) {
		if (update_settings(j, &c, &b, &p))
			return 0;
		have_buf = 1;
	}
	if (j->rq.status == STORE_ENDED) {
		p.set |= STORE_SET_STATUS;
		p.status = STORE_ENDED;
	} else if (c.status == STORE_PAUSED && j->rq.settings && budget_resume(&p, r)) {
		jsonmp_buf_destroy(&b);
		job_error(j, PERR_INTERNAL, "out of memory"); /* nothing written yet */
		return 0;
	}
	if (j->rq.metadata) {
		if (update_metadata(j, &c, &mb, &p)) {
			if (have_buf)
				jsonmp_buf_destroy(&b);
			return 0;
		}
		have_mb = 1;
	}
	e = update_write(t, j, &c, &p, r);
	if (have_buf)
		jsonmp_buf_destroy(&b);
	if (have_mb)
		jsonmp_buf_destroy(&mb);
	if (e)
		return job_store_error(j, e, "update"), e;
	j->reply = json_object();
	/* Committed either way: a reply short of status is answered "out of memory". */
	if (j->reply && c.status == STORE_PAUSED && j->rq.status != STORE_ENDED &&
	    json_object_set_new(j->reply, "status", json_string(r->resumed ? "active" : "paused"))) {
		json_decref(j->reply);
		j->reply = NULL;
	}
	return 0;
}

static int w_delete(store_txn *t, struct job *j, struct wres *r)
{
	/* The rows go in this transaction; a worker left running would only
	 * be fenced (its conversation is gone), but it must not run a model or
	 * tool for a deleted conversation either. */
	workers_deleted(j->rq.conv);
	int e = forward_tell(t, j->rq.conv, "delete"); /* another node's worker: that node kills it */
	if (e)
		return job_store_error(j, e, "delete"), e;
	e = store_conv_delete(t, j->rq.conv);
	if (e && e != STORE_E_NOTFOUND)
		return job_store_error(j, e, "delete"), e;
	j->reply = json_pack("{sb}", "deleted", e == 0);
	return 0;
}

/* Whether every event carries an event_id already in the log: a replay of
 * a send whose reply was lost, which writes nothing. *e gets a store error
 * other than "not found". */
static int send_is_replay(store_txn *t, const char *conv, const struct store_event_in *ev, size_t n, int *e)
{
	*e = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t seq;
		if (!ev[i].event_id)
			return 0;
		int r = store_event_id_seq(t, conv, ev[i].event_id, strlen(ev[i].event_id), &seq);
		if (r) {
			*e = r == STORE_E_NOTFOUND ? 0 : r;
			return 0;
		}
	}
	return 1;
}

/* send's checks and its append, in that order: the conversation exists and
 * is not ended; expected_seq (unless the send is a replay: idempotency wins,
 * and a replay writes nothing); then every event or none. */
static int send_append(store_txn *t, struct job *j, struct wres *r, const struct store_event_in *ev, size_t n,
		       uint64_t *seqs, int *dups)
{
	const char *conv = j->rq.conv;
	struct store_conv c;
	int e = store_conv_get(t, conv, &c);
	if (e)
		return job_store_error(j, e, "conversation"), e == STORE_E_NOTFOUND ? 0 : e;
	if (c.status == STORE_ENDED) {
		job_error(j, PERR_CONFLICT, "conversation %s is ended: sends are refused", conv);
		return 0;
	}
	r->paused = 0;
	int was_idle = c.status == STORE_IDLE;
	if (j->rq.has_expected_seq && !send_is_replay(t, conv, ev, n, &e)) {
		uint64_t last = 0;
		if (!e)
			e = store_event_latest_seq(t, conv, &last);
		if (e)
			return job_store_error(j, e, "send"), e;
		if (last != j->rq.expected_seq) {
			job_error(j, PERR_CONFLICT, "conversation %s is at seq %llu, not the expected_seq %llu: nothing was written",
				  conv, (unsigned long long)last, (unsigned long long)j->rq.expected_seq);
			j->err_extra = json_pack("{sI}", "last_seq", (json_int_t)last);
			if (!j->err_extra) /* never a conflict short of last_seq */
				job_error(j, PERR_INTERNAL, "out of memory");
			return 0;
		}
	}
	/* Atomic: the store checks every event before writing one. */
	e = store_events_append(t, conv, ev, n, seqs, dups);
	r->appended = 0;
	for (size_t i = 0; !e && i < n; i++)
		r->appended += !dups[i];
	if (!e && r->appended && was_idle) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		e = store_conv_put(t, conv, &p);
	}
	if (!e && r->appended)
		e = lease_ahead(t, conv);
	if (e)
		return job_store_error(j, e, "send"), e;
	/* Committed either way: a reply short of a field is answered "out of
	 * memory" instead (a retry with the event_ids then gets the seqs). */
	int oom = 0;
	if (!j->rq.events) {
		/* Not json_pack: it parses its format on every send. */
		j->reply = json_object();
		if (j->reply && json_object_set_new(j->reply, "seq", json_integer((json_int_t)seqs[0]))) {
			json_decref(j->reply);
			j->reply = NULL;
		}
		if (j->reply && dups[0])
			oom = json_object_set_new(j->reply, "duplicate", json_true());
	} else {
		json_t *a = json_array(), *d = json_array();
		for (size_t i = 0; a && d && !oom && i < n; i++) {
			oom = json_array_append_new(a, json_integer((json_int_t)seqs[i]));
			if (!oom && dups[i])
				oom = json_array_append_new(d, json_integer((json_int_t)i));
		}
		j->reply = a && d && !oom ? json_pack("{sO}", "seqs", a) : NULL;
		if (j->reply && json_array_size(d))
			oom = json_object_set(j->reply, "duplicates", d);
		json_decref(a);
		json_decref(d);
	}
	if (j->reply && !oom && c.status == STORE_PAUSED) {
		/* Kept, and answered once a larger budget resumes it. */
		r->paused = 1;
		oom = json_object_set_new(j->reply, "status", json_string("paused"));
	}
	if (oom) {
		json_decref(j->reply);
		j->reply = NULL;
	}
	return 0;
}

/* send: one event, or a batch (rq.events) appended in order in one
 * transaction. Everything that can refuse it is checked before its first
 * write, so a refused send writes nothing and leaves the group transaction
 * usable for the others (a store error poisons it: group_commit then). */
static int w_send(store_txn *t, struct job *j, struct wres *r)
{
	size_t n = j->rq.events ? json_array_size(j->rq.events) : 1, packed = 0;
	/* One event (nearly every send): on the stack, no allocation. */
	struct store_event_in ev1 = { 0 };
	struct jsonmp_buf b1 = { 0 };
	uint64_t seq1 = 0;
	int dup1 = 0;
	struct store_event_in *ev = n == 1 ? &ev1 : calloc(n, sizeof *ev);
	struct jsonmp_buf *b = n == 1 ? &b1 : calloc(n, sizeof *b);
	uint64_t *seqs = n == 1 ? &seq1 : calloc(n, sizeof *seqs);
	int *dups = n == 1 ? &dup1 : calloc(n, sizeof *dups);
	int e = 0;
	if (!ev || !b || !seqs || !dups) {
		job_error(j, PERR_INTERNAL, "out of memory"); /* nothing written yet */
		goto done;
	}
	for (; packed < n; packed++) {
		json_t *item = j->rq.events ? json_array_get(j->rq.events, packed) : NULL;
		int pe = pack_json(&b[packed], item ? json_object_get(item, "content") : j->rq.content);
		if (pe) {
			pack_error(j, pe, "content");
			goto done;
		}
		ev[packed] = (struct store_event_in){ "user_msg", { b[packed].sb.data, b[packed].sb.size },
			item ? json_string_value(json_object_get(item, "event_id")) : j->rq.event_id };
	}
	e = send_append(t, j, r, ev, n, seqs, dups);
done:
	for (size_t i = 0; i < packed; i++)
		jsonmp_buf_destroy(&b[i]);
	if (n != 1) {
		free(ev);
		free(b);
		free(seqs);
		free(dups);
	}
	return e;
}

/* The resolution rule (conv_resolve), then the lease of the worker it
 * wakes when the conversation owes work; by (NULL: none) records who decided. */
static int settle(store_txn *t, const char *tool_call_id, int status, json_t *result, const json_t *by, char *conv,
		  uint64_t *seq, int *ended)
{
	int e = conv_resolve(t, tool_call_id, status, result, by, conv, seq, ended);
	return e || *ended ? e : lease_ahead(t, conv);
}

static int w_resolve(store_txn *t, struct job *j, struct wres *r)
{
	/* Who decided, for the audit trail: the peer's uid always (it cannot be
	 * forged), and the name a client such as agentd-web gives for its user. */
	json_t *by = json_pack("{sI}", "uid", (json_int_t)j->peer_uid);
	if (!by || (j->rq.by && json_object_set_new(by, "name", json_string(j->rq.by)))) {
		json_decref(by);
		job_error(j, PERR_INTERNAL, "out of memory"); /* nothing written yet */
		return 0;
	}
	int e = settle(t, j->rq.tool_call_id, j->rq.status, j->rq.result, by, r->conv, &r->seq, &r->ended);
	json_decref(by);
	if (e == STORE_E_STALE) {
		job_error(j, PERR_STALE, "tool call %s is not pending (unknown, already settled or expired)",
			  j->rq.tool_call_id);
		return 0;
	}
	if (e)
		return job_store_error(j, e, "resolve"), e;
	j->reply = json_pack("{sIss}", "seq", (json_int_t)r->seq, "conversation", r->conv);
	return 0;
}

static int w_fork(store_txn *t, struct job *j, struct wres *r)
{
	char gen[20];
	const char *id = j->rq.new_conv;
	if (!id) {
		id_random(gen, sizeof gen, "c-", 8);
		id = gen;
	}
	struct conv_fork_in in = { j->rq.conv, j->rq.seq, id, j->rq.settings, j->rq.metadata };
	struct conv_fork_out out;
	int e = conv_fork(t, &in, &out);
	if (e == STORE_E_NOTFOUND)
		return job_error(j, PERR_NOT_FOUND, "conversation '%s' not found", j->rq.conv), 0;
	if (e == STORE_E_INVAL && out.src_first > 1)
		return job_error(j, PERR_BAD_REQUEST, "seq %llu of %s: its log begins at seq %llu and its latest summary "
				 "cannot stand in for the seqs before that at this seq (fork at a seq after a turn that "
				 "follows its latest summary)", (unsigned long long)j->rq.seq, j->rq.conv,
				 (unsigned long long)out.src_first), 0;
	if (e == STORE_E_INVAL)
		return job_error(j, PERR_BAD_REQUEST, "seq %llu is past the last seq of %s (%llu)",
				 (unsigned long long)j->rq.seq, j->rq.conv, (unsigned long long)out.src_last), 0;
	if (e == STORE_E_CONFLICT)
		return job_error(j, PERR_CONFLICT, "conversation %s already exists", id), 0;
	if (e == STORE_E_CORRUPT)
		return job_error(j, PERR_INTERNAL, "fork of %s: a record of its log cannot be copied (agentd check)",
				 j->rq.conv), e;
	if (e)
		return job_store_error(j, e, "fork"), e;
	if (out.status == STORE_ACTIVE && (e = lease_ahead(t, id)))
		return job_store_error(j, e, "fork"), e;
	snprintf(r->conv, sizeof r->conv, "%s", id);
	r->active = out.status == STORE_ACTIVE;
	j->reply = json_pack("{sss{sssI}sIsIsIss}", "conversation", id, "forked_from", "conversation", j->rq.conv, "seq",
			     (json_int_t)j->rq.seq, "last_seq", (json_int_t)out.last_seq, "copied",
			     (json_int_t)out.copied, "cancelled", (json_int_t)out.cancelled, "status",
			     store_status_name(out.status));
	/* Committed either way: a reply short of a field is answered "out of memory". */
	if (j->reply && (json_object_set_new(j->reply, "summary_to",
					     out.summary_to ? json_integer((json_int_t)out.summary_to) : json_null()) ||
			 json_object_set_new(j->reply, "first_seq", json_integer((json_int_t)out.first_seq)))) {
		json_decref(j->reply);
		j->reply = NULL;
	}
	return 0;
}

/* ---- cancel and resume (docs/protocol.md, "Cancel and resume") ---------- */

/* End the turn for good: settle its pending calls cancelled, log
 * turn_cancelled, go idle, and fence the worker running it so it cannot
 * commit that turn after this; after the commit it is killed. */
static int w_cancel(store_txn *t, struct job *j, struct wres *r)
{
	struct store_conv c;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e)
		return job_store_error(j, e, "conversation"), e == STORE_E_NOTFOUND ? 0 : e;
	if (c.status == STORE_ENDED) {
		job_error(j, PERR_CONFLICT, "conversation %s is ended: there is no turn to cancel", j->rq.conv);
		return 0;
	}
	if (c.status == STORE_IDLE) {
		j->reply = json_pack("{sbss}", "cancelled", 0, "message", "no turn is running or owed: nothing cancelled");
		return 0;
	}
	json_t *ids = NULL;
	e = conv_turn_cancel(t, j->rq.conv, &ids, &r->seq);
	if (!e)
		e = workers_fence(t, j->rq.conv);
	if (!e) /* a worker on another node: that node kills it and its model or tool */
		e = forward_tell(t, j->rq.conv, "cancel");
	if (e) {
		json_decref(ids);
		return job_store_error(j, e, "cancel"), e;
	}
	snprintf(r->conv, sizeof r->conv, "%s", j->rq.conv);
	j->reply = json_pack("{sbsIso}", "cancelled", 1, "seq", (json_int_t)r->seq, "tool_calls", ids);
	return 0;
}

static void after_cancel(struct job *j, struct wres *r)
{
	if (!r->seq)
		return;
	workers_cancel(j->rq.conv);
	waiters_notify(j->rq.conv);
}

/* Whether conv's last event is the error of a crash loop given up (or a full
 * store): the turn it ended is what a resume runs again. */
static int gave_up_last(store_txn *t, const char *conv, int *yes)
{
	struct store_range rg = { .limit = 1 };
	json_t *a = json_array();
	int e = a ? store_events_stream(t, conv, &rg, append_json, a) : -ENOMEM;
	json_t *ev = json_array_get(a, 0);
	const char *ty = json_string_value(json_object_get(ev, "type"));
	*yes = !e && ty && !strcmp(ty, "error") &&
	       json_is_true(json_object_get(json_object_get(ev, "content"), "gave_up"));
	json_decref(a);
	return e;
}

/* Start the conversation's worker now, without a new event: after `stop`, or
 * after the crash-loop limit gave up on it (its status becomes active, and
 * while it is, revival takes the give-up error as not ending the turn). */
static int w_resume(store_txn *t, struct job *j, struct wres *r)
{
	struct store_conv c;
	int gave_up = 0;
	int e = store_conv_get(t, j->rq.conv, &c);
	if (e)
		return job_store_error(j, e, "conversation"), e == STORE_E_NOTFOUND ? 0 : e;
	if (c.status == STORE_ENDED) {
		job_error(j, PERR_CONFLICT, "conversation %s is ended: it cannot be resumed", j->rq.conv);
		return 0;
	}
	json_t *w = workers_conv_json(j->rq.conv);
	int live = json_is_object(w);
	json_decref(w);
	if (!w) { /* out of memory: never taken for "no worker" (a resume would fence a live one) */
		job_error(j, PERR_INTERNAL, "out of memory");
		return 0;
	}
	if (live) {
		j->reply = json_pack("{sbss}", "resumed", 0, "message", "its worker is already running");
		return 0;
	}
	if (c.status == STORE_PAUSED) {
		j->reply = json_pack("{sbss}", "resumed", 0, "message",
				     "it is paused by its budget: raise the budget with update to resume it");
		return 0;
	}
	if (c.status == STORE_IDLE && (e = gave_up_last(t, j->rq.conv, &gave_up)))
		return job_store_error(j, e, "resume"), e;
	if (c.status == STORE_IDLE && !gave_up) {
		j->reply = json_pack("{sbss}", "resumed", 0, "message",
				     "nothing is owed: no turn to run and no tool call to dispatch");
		return 0;
	}
	if (gave_up) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		e = store_conv_put(t, j->rq.conv, &p);
	}
	if (!e)
		e = lease_ahead(t, j->rq.conv);
	if (e)
		return job_store_error(j, e, "resume"), e;
	r->seq = 1; /* for after_resume: a worker is owed */
	j->reply = json_pack("{sbsb}", "resumed", 1, "rerun", gave_up);
	/* Another node's live lease: lease_ahead's claim told that node, which
	 * starts the worker if none runs there (docs/scale-out.md). */
	char owner[STORE_ID_MAX + 1];
	if (j->reply && forward_owner(t, j->rq.conv, owner) == 1 &&
	    json_object_set_new(j->reply, "node", json_string(owner))) {
		json_decref(j->reply);
		j->reply = NULL; /* committed: answered "out of memory" */
	}
	return 0;
}

static void after_resume(struct job *j, struct wres *r)
{
	if (r->seq)
		workers_wake(j->rq.conv);
}

/* Run one write; a non-zero return is a store error that poisoned the txn. */

static int fatal(int e)
{
	return e && e != STORE_E_NOTFOUND && e != STORE_E_STALE && e != STORE_E_CONFLICT && e != STORE_E_INVAL &&
	       e != STORE_E_FENCED;
}

/* After the commit: wake workers and waiters. */
static void after_send(struct job *j, struct wres *r)
{
	if (r->appended && !r->paused)
		workers_wake(j->rq.conv);
	waiters_notify(j->rq.conv);
}

static void after_resolve(struct job *j, struct wres *r)
{
	if (!r->ended)
		workers_wake(r->conv);
	waiters_notify(r->conv);
}

static void after_update(struct job *j, struct wres *r)
{
	if (j->rq.status == STORE_ENDED)
		workers_stop(j->rq.conv);
	if (r->resumed)
		workers_wake(j->rq.conv);
}

static void after_fork(struct job *j, struct wres *r)
{
	if (r->active)
		workers_wake(r->conv);
}

static void after_delete(struct job *j, struct wres *r)
{
	waiters_deleted(j->rq.conv);
}

static void op_ping(store_txn *t, struct job *j)
{
	j->reply = json_pack("{ss}", "version", AGENTD_VERSION);
}

static void op_shutdown(store_txn *t, struct job *j)
{
	j->reply = json_object();
	O.env->shutdown(j->slot ? slot_client(j->slot) : NULL);
}

/* The op table: one row per op, as Redis has its command table. A read runs
 * with a read transaction when OPF_TXN says so (else t is NULL); a write runs
 * inside the iteration's group transaction, and its after step once that
 * committed. Adding an op: its codec case (ipc/proto.c), a row and its
 * handlers here. */
enum {
	OPF_WRITE = 1,
	OPF_TXN = 2,
	OPF_LARGE = 4, /* its reply carries stored data and may be large: parsed within a budget (control.h) */
	OPF_FIRST = 8, /* no effect and a reply of a few bytes: answered before the iteration's other requests */
};
struct op {
	int flags;
	void (*read)(store_txn *t, struct job *j);
	int (*write)(store_txn *t, struct job *j, struct wres *r);
	void (*after)(struct job *j, struct wres *r);
};
static const struct op op_table[OP_COUNT] = {
	[OP_PING] = { OPF_FIRST, op_ping, NULL, NULL },
	[OP_CREATE] = { OPF_WRITE, NULL, w_create, NULL },
	[OP_GET] = { OPF_TXN | OPF_LARGE, op_get, NULL, NULL },
	[OP_LIST] = { OPF_TXN | OPF_LARGE, op_list, NULL, NULL },
	[OP_UPDATE] = { OPF_WRITE, NULL, w_update, after_update },
	[OP_DELETE] = { OPF_WRITE, NULL, w_delete, after_delete },
	[OP_SEND] = { OPF_WRITE, NULL, w_send, after_send },
	[OP_EVENTS] = { OPF_LARGE, op_events, NULL, NULL },
	[OP_WATCH] = { OPF_TXN, op_watch, NULL, NULL },
	[OP_RESOLVE] = { OPF_WRITE, NULL, w_resolve, after_resolve },
	[OP_TOOL_CALL] = { OPF_TXN | OPF_LARGE, op_tool_call, NULL, NULL },
	[OP_TOOL_CALLS] = { OPF_TXN | OPF_LARGE, op_tool_calls, NULL, NULL },
	[OP_SUMMARY] = { OPF_TXN | OPF_LARGE, op_summary, NULL, NULL },
	[OP_COMPACT] = { 0, op_compact, NULL, NULL },
	[OP_AUDIT] = { OPF_TXN | OPF_LARGE, op_audit, NULL, NULL },
	[OP_KILL] = { 0, op_kill, NULL, NULL },
	[OP_STOP] = { 0, op_stop, NULL, NULL },
	[OP_STATUS] = { OPF_LARGE, op_status, NULL, NULL },
	[OP_METRICS] = { OPF_LARGE, op_metrics, NULL, NULL },
	[OP_SHUTDOWN] = { 0, op_shutdown, NULL, NULL },
	[OP_FORK] = { OPF_WRITE, NULL, w_fork, after_fork },
	[OP_BACKUP] = { 0, op_backup, NULL, NULL },
	[OP_CANCEL] = { OPF_WRITE, NULL, w_cancel, after_cancel },
	[OP_RESUME] = { OPF_WRITE, NULL, w_resume, after_resume },
	[OP_RUNS] = { OPF_TXN | OPF_LARGE, op_runs, NULL, NULL },
	[OP_NODES] = { OPF_TXN, op_nodes, NULL, NULL },
};

int ops_is_write(int op)
{
	return op >= 0 && op < OP_COUNT && (op_table[op].flags & OPF_WRITE);
}

int ops_reply_large(int op)
{
	return op >= 0 && op < OP_COUNT && (op_table[op].flags & OPF_LARGE);
}

static int write_one(store_txn *t, struct job *j, struct wres *r)
{
	return op_table[j->rq.op].write(t, j, r);
}

static void after_write(struct job *j, struct wres *r)
{
	if (op_table[j->rq.op].after)
		op_table[j->rq.op].after(j, r);
}

/* A line clients retrying into the same failure would repeat: logged at
 * most once a second, saying how many were held back since. */
struct every_second {
	int64_t last;
	unsigned more; /* held back since the last line */
};

static int every_second_due(struct every_second *r)
{
	int64_t now = loop_now_ms();
	if (r->last && now - r->last < 1000) {
		r->more++;
		return 0;
	}
	r->last = now;
	return 1;
}

/* Say why a group commit of n writes failed: an unavailable or full store
 * once a second (clients retry into it), anything else each time. */
static void group_commit_failed(int e, size_t n)
{
	static struct every_second unavailable, full;
	if (perr_from_store(e) == PERR_UNAVAILABLE) {
		if (every_second_due(&unavailable)) {
			log_error("group commit of %zu writes failed: %s (%s); %u more failed so since the last such "
				  "line", n, store_unavailable_why(e), store_strerror(e), unavailable.more);
			unavailable.more = 0;
		}
	} else if (e == STORE_E_FULL) {
		if (every_second_due(&full)) {
			log_error("group commit of %zu writes failed: the store is full (map at max_map_size, or the "
				  "disk is full); %u more failed so since the last such line", n, full.more);
			full.more = 0;
		}
	} else {
		log_error("group commit of %zu writes failed: %s", n, store_strerror(e));
	}
}

/* A full map that cannot grow: keep only the deletes, for a transaction
 * that may use the store's delete reserve (STORE_WRITE_FREEING); the other
 * writes are refused store_full, since they are what must not spend it.
 * Returns how many writes are left (0: there was no delete). */
static size_t keep_deletes(struct job **w, size_t n)
{
	size_t dels = 0;
	for (size_t i = 0; i < n; i++)
		dels += !w[i]->excluded && w[i]->rq.op == OP_DELETE;
	for (size_t i = 0; dels && i < n; i++) {
		if (w[i]->excluded || w[i]->rq.op == OP_DELETE)
			continue;
		w[i]->excluded = 1;
		json_decref(w[i]->reply);
		w[i]->reply = NULL;
		json_decref(w[i]->err_extra);
		w[i]->err_extra = NULL;
		job_error(w[i], PERR_STORE_FULL, "the store is full (map size limit reached, or the disk is full)");
	}
	return dels;
}

/* One group transaction across its attempts: a damaged record or a write
 * too large for a full map is left out and the rest run again, as after a
 * lock conflict with another node or once the map has grown. */
struct group {
	struct job **w;
	struct wres *res;
	size_t n;           /* writes in the group */
	size_t left;        /* of those, not left out (excluded) yet */
	int grown;          /* attempts that met a full map which then grew */
	int freeing;        /* the deletes alone, with the store's delete reserve */
	int deadlocks;      /* attempts aborted for a lock conflict */
	int resets;         /* attempts whose connection was lost */
	int async;          /* on the writer thread: nothing of the loop's is touched */
	int made;           /* committed, as id */
	uint64_t id;        /* the id its commit made current */
	uint64_t committed; /* the id its replies show */
};

static void job_clear_result(struct job *j)
{
	json_decref(j->reply);
	j->reply = NULL;
	json_decref(j->err_extra);
	j->err_extra = NULL;
}

/* The loop's part of a commit: the frontier and the counters. */
static void group_committed_note(struct group *g)
{
	if (g->committed == g->id)
		durable_committed(g->id); /* its page flush covered those before */
	durable_need(g->committed);
	metrics_add(M_GROUP_COMMITS, 1);
	metrics_add(M_GROUP_WRITES, g->n);
	/* Off the loop the next group is made while this one commits, and
	 * commits right after it: this one's replies do not wait for that
	 * commit to cover them; the flusher covers them beside it, at once. */
	if (g->async) {
		metrics_add(M_GROUP_COMMITS_THREAD, 1);
		durable_flush_now();
	}
}

static void group_committed(struct group *g, uint64_t id)
{
	/* A transaction that changed nothing commits no id: its replies
	 * show the one before. */
	uint64_t last = store_last_id(O.env->st);
	g->committed = last < id ? last : id;
	g->id = id;
	g->made = 1;
	if (!g->async)
		group_committed_note(g); /* else the loop's, once the thread is done */
}

/* The conversations the group's sends write to, locked in one step
 * (store_convs_lock: on PostgreSQL one round trip for them all, where each
 * send's own lock would take one). A bad id is its send's to refuse. */
static int group_lock_sends(struct group *g, store_txn *t)
{
	const char **ids = calloc(g->n + 1, sizeof *ids);
	size_t k = 0;
	if (!ids)
		return 0; /* each send locks its own */
	for (size_t i = 0; i < g->n; i++)
		if (!g->w[i]->excluded && g->w[i]->rq.op == OP_SEND && g->w[i]->rq.conv)
			ids[k++] = g->w[i]->rq.conv;
	int e = k > 1 ? store_convs_lock(t, ids, k) : 0;
	free(ids);
	return fatal(e) ? e : 0;
}

/* One attempt: every write not left out, in one transaction, committed.
 * Returns 0 or the store error; *bad is the write that met it (g->n: the
 * begin or the commit did). */
static int group_attempt(struct group *g, size_t *bad)
{
	store_txn *t;
	*bad = g->n;
	/* Lazy: one flush under the writer lock; the replies wait for the
	 * durable frontier instead (durable.h). */
	int mode = STORE_WRITE_LAZY | (g->freeing ? STORE_WRITE_FREEING : 0);
	/* The writer thread leaves the gate to the loop: a worker granted it
	 * commits first, and LMDB's writer lock makes this thread wait. */
	int e = g->async ? store_txn_begin(O.env->st, mode, &t) : gate_write_begin(mode, &t);
	uint64_t id = e ? 0 : store_txn_id(t);
	if (!e && (e = group_lock_sends(g, t)))
		*bad = g->n;
	for (size_t i = 0; !e && i < g->n; i++) {
		if (g->w[i]->excluded)
			continue;
		g->w[i]->err = 0;
		job_clear_result(g->w[i]);
		int we = write_one(t, g->w[i], &g->res[i]);
		if (fatal(we))
			e = we, *bad = i;
	}
	if (e)
		store_txn_abort(t);
	else if (!(e = g->async ? store_txn_commit(t) : commit_spawning(t)))
		group_committed(g, id); /* async: workers_wake spawns after it, on the loop */
	if (e)
		leases_ahead_drop(); /* taken in a transaction that did not commit */
	return e;
}

/* One write met a damaged record (`agentd check` names it), or ran out of
 * memory: it fails alone, with the error it set; the others are retried
 * without it. */
static void group_leave_out_damaged(struct group *g, size_t bad, int e)
{
	struct job *j = g->w[bad];
	j->excluded = 1;
	if (!j->err)
		job_store_error(j, e, proto_op_name(j->rq.op));
	g->left--;
	log_error("a %s of %s %s: refused; %zu other write(s) retried without it", proto_op_name(j->rq.op),
		  j->rq.conv ? j->rq.conv : j->rq.tool_call_id ? j->rq.tool_call_id : "a new conversation",
		  e == -ENOMEM ? "ran out of memory" : "met a damaged record", g->left);
}

/* The map is full and cannot grow: 1 when the group runs again smaller. */
static int group_shrink_full(struct group *g, size_t bad)
{
	/* A delete among the writes: the deletes alone, with the reserve,
	 * so that an operator can always free room. */
	size_t dels = g->freeing ? 0 : keep_deletes(g->w, g->n);
	if (dels) {
		log_error("the store is full: %zu delete(s) run alone with the delete reserve, %zu other "
			  "write(s) refused", dels, g->left - dels);
		g->freeing = 1;
		g->left = dels;
		return 1;
	}
	/* The write that met the full map (a large send or batch) fails
	 * alone, as a damaged record does, and the others are retried
	 * without it; a small write, a delete above all, still fits. */
	if (bad >= g->n || g->left < 2)
		return 0;
	struct job *j = g->w[bad];
	j->excluded = 1;
	job_error(j, PERR_STORE_FULL, "the store is full (map size limit reached, or the disk is full)");
	g->left--;
	log_error("a %s of %s does not fit the full store (max_map_size): refused; %zu other write(s) "
		  "retried without it", proto_op_name(j->rq.op), j->rq.conv ? j->rq.conv : "?", g->left);
	return 1;
}

/* After an attempt failed with *e: 1 when the group runs again, 0 when *e
 * stands (0 once every write was left out). map0: the map's size before
 * the attempt. */
static int group_retry(struct group *g, int *e, size_t bad, size_t map0)
{
	if ((*e == STORE_E_CORRUPT || *e == -ENOMEM) && bad < g->n) {
		group_leave_out_damaged(g, bad, *e);
		if (!g->left)
			*e = 0;
		return g->left > 0;
	}
	/* A store shared by several nodes: another node's transaction locked
	 * some of these conversations in another order, and the server
	 * aborted this one to let it go on (-EAGAIN). Nothing of it was
	 * written: run it again, a few times. */
	if (*e == -EAGAIN && g->deadlocks++ < 8) {
		log_info("a group commit of %zu writes met a lock conflict with another node: retrying it", g->left);
		return 1;
	}
	/* The connection went before the commit was made (the server
	 * restarted, or ended a session left idle in its transaction while
	 * this process was stopped): nothing was written; once more, on a new
	 * connection. STORE_E_INDOUBT is not retried: it may be written. */
	if (*e == -ECONNRESET && g->resets++ < 1) {
		log_info("a group commit of %zu writes lost its connection to the store: retrying it", g->left);
		return 1;
	}
	/* A full map: the store doubled it, or does before the next begin, up
	 * to max_map_size; a large send may need several doublings. A full
	 * disk, or a map at its maximum: no retry. */
	if (*e != STORE_E_FULL)
		return 0;
	struct store_stat st;
	if (g->grown >= 64 || store_stat(O.env->st, &st) || !(st.map_full || st.map_size > map0))
		return group_shrink_full(g, bad);
	if (!g->grown++)
		log_info("the map is full during a group commit of %zu writes: growing it from %zu bytes", g->left, map0);
	return 1;
}

/* What each write owes once the group is done: its after step, or the
 * group's error (a write left out has its own). */
static void group_settle(struct group *g, int e)
{
	for (size_t i = 0; i < g->n; i++) {
		struct job *j = g->w[i];
		j->txnid = g->committed;
		if (j->excluded)
			continue; /* its error is set */
		if (e) {
			job_clear_result(j);
			if (e == STORE_E_FULL)
				job_error(j, PERR_STORE_FULL, "the store is full (map size limit reached, or the disk is full)");
			else if (perr_from_store(e) == PERR_UNAVAILABLE)
				job_error(j, PERR_UNAVAILABLE, "%s", store_unavailable_why(e));
			else
				job_error(j, PERR_INTERNAL, "commit failed: %s",
					  e == -ENOMEM ? "out of memory" : store_strerror(e));
		} else if (!j->err) {
			after_write(j, &g->res[i]);
		}
	}
}

/* The attempts, on the loop or the writer thread: 0 or the error that
 * stands. */
static int group_run(struct group *g)
{
	int e;
	for (;;) {
		size_t bad, map0 = store_map_size(O.env->st); /* store_stat lists the readers: too dear for every commit */
		e = group_attempt(g, &bad);
		if (!e || !group_retry(g, &e, bad, map0))
			break;
	}
	return e;
}

/* The loop's part once the attempts are done. */
static void group_finish(struct group *g, int e)
{
	group_settle(g, e);
	leases_ahead_drop();
	if (e)
		group_commit_failed(e, g->n);
}

static void group_commit(struct job **w, struct wres *res, size_t n)
{
	struct group g = { .w = w, .res = res, .n = n, .left = n };
	group_finish(&g, group_run(&g));
}

/* ---- the writer thread --------------------------------------------------
 *
 * LMDB flushes a commit's pages under its writer lock, in the thread that
 * commits. On the loop thread that flush stalls every client for its length:
 * the loop neither reads the next requests nor parses them meanwhile. So a
 * group of sends on an LMDB store commits on a thread of its own, while the
 * loop, restricted (loop_restrict), only reads, parses and queues requests
 * and writes replies already made: nothing the group's writes touch (the
 * store handle, the workers, the gate, the frontier, the counters). Once
 * the thread is done, the loop starts the frontier's flush for the group
 * (the next group commits beside it, and the replies leave when it
 * returns, restricted or not), settles the group (its replies, the workers
 * it wakes) and runs one whole iteration before the next group goes.
 * docs/architecture.md, "The writer thread". */

struct agroup {
	struct group g;
	int e;
	int flush;        /* the thread flushes after the commit (group_ready) */
	uint64_t flushed; /* and that flush covered this id (0: none made) */
	int64_t flush_us; /* how long it took: each reply waited that for the frontier */
	struct job **deferred; /* reads behind a write of their client */
	size_t nd;
	TAILQ_HEAD(, job) jobs; /* its writes and those reads, in request order */
};

static void *writer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&WT.mu);
	for (;;) {
		while (!WT.todo && !WT.quit)
			pthread_cond_wait(&WT.cv, &WT.mu);
		if (WT.quit)
			break;
		struct agroup *ag = WT.todo;
		WT.todo = NULL;
		pthread_mutex_unlock(&WT.mu);
		ag->e = group_run(&ag->g);
		if (ag->flush && ag->g.made) {
			uint64_t id;
			int64_t t0 = loop_now_us();
			if (durable_flush_here(&id) == 0) {
				ag->flushed = id;
				ag->flush_us = loop_now_us() - t0;
			}
		}
		pthread_mutex_lock(&WT.mu);
		WT.done = ag;
		uint64_t one = 1;
		ssize_t w = write(WT.efd, &one, sizeof one);
		(void)w;
	}
	pthread_mutex_unlock(&WT.mu);
	return NULL;
}

static int writer_start(void)
{
	if (WT.started)
		return 0;
	WT.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (WT.efd < 0)
		return -errno;
	int e = loop_add(WT.efd, EPOLLIN, &WT.lw);
	if (e) {
		close(WT.efd);
		WT.efd = -1;
		return e;
	}
	if ((e = loop_thread(&WT.th, writer_main, NULL))) {
		loop_del(WT.efd);
		close(WT.efd);
		WT.efd = -1;
		return e;
	}
	WT.started = 1;
	return 0;
}

/* A group the writer thread may commit: sends alone (their writes touch the
 * store, the workers' leases and nothing else of the loop's), on LMDB with
 * sync = full, where the flush it takes off the loop is, and no worker
 * holding the gate or waiting for it: restricted, the loop would not read
 * their `written` and `write` to hand it on. */
static int group_async_ok(struct job **w, size_t n)
{
	if (WT.off || O.env->cfg->store || O.env->cfg->sync != STORE_SYNC_FULL || gate_wanted())
		return 0;
	for (size_t i = 0; i < n; i++)
		if (w[i]->rq.op != OP_SEND)
			return 0;
	return 1;
}

/* The group's writes are all one client's, and every other client waits on
 * a held reply: no next commit can come before these replies leave, so
 * nothing would commit beside the frontier's flush, and the thread makes
 * that flush itself, right after the commit (outside the writer lock):
 * the replies leave without the hand-offs to and from the flusher thread
 * (docs/durability.md). */
static int group_alone(struct job **w, size_t n)
{
	struct client *c = w[0]->slot ? slot_client(w[0]->slot) : NULL;
	if (!c)
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!w[i]->slot || slot_client(w[i]->slot) != c)
			return 0;
	return control_only_free(c);
}

/* Make the group for the thread: its writes and the reads behind them
 * leave O.jobs for it. 0, or -ENOMEM (then it commits on the loop). */
static int group_ready(struct job **w, struct wres *res, size_t n, struct job **deferred, size_t nd)
{
	struct agroup *ag = calloc(1, sizeof *ag);
	if (!ag)
		return -ENOMEM;
	ag->g = (struct group){ .w = w, .res = res, .n = n, .left = n, .async = 1 };
	ag->deferred = deferred;
	ag->nd = nd;
	ag->flush = group_alone(w, n);
	TAILQ_INIT(&ag->jobs);
	struct job *j, *next;
	TAILQ_FOREACH_SAFE(j, &O.jobs, q, next)
		if (ops_is_write(j->rq.op) || (j->after_write && !j->ran)) {
			TAILQ_REMOVE(&O.jobs, j, q);
			TAILQ_INSERT_TAIL(&ag->jobs, j, q);
		}
	WT.ready = ag;
	return 0;
}

/* A group made and not handed over yet. No client is freed while one is on
 * the thread: control_reap runs at an iteration's end, never restricted. */
static void writer_client_gone(struct client *c)
{
	if (WT.ready)
		jobs_client_gone(TAILQ_FIRST(&WT.ready->jobs), c);
}

static void agroup_finish(struct agroup *ag);

int ops_commit_start(void)
{
	struct agroup *ag = WT.ready;
	if (!ag)
		return 0;
	WT.ready = NULL;
	int e = writer_start();
	if (e) {
		/* No thread: on the loop, as any other group, from now on. */
		log_warn("cannot start the writer thread (%s): groups of sends commit on the loop", strerror(-e));
		WT.off = 1;
		ag->g.async = 0;
		ag->e = group_run(&ag->g);
		agroup_finish(ag);
		return 0;
	}
	loop_restrict(1);
	pthread_mutex_lock(&WT.mu);
	WT.todo = ag;
	pthread_cond_signal(&WT.cv);
	pthread_mutex_unlock(&WT.mu);
	return 1;
}

static void job_finish(struct job *j);
static void read_one(struct job *j);

static void on_group_done(struct loop_watch *lw, uint32_t events)
{
	(void)events;
	uint64_t n;
	if (read(WT.efd, &n, sizeof n) < 0)
		return;
	pthread_mutex_lock(&WT.mu);
	struct agroup *ag = WT.done;
	WT.done = NULL;
	pthread_mutex_unlock(&WT.mu);
	if (!ag)
		return;
	loop_restrict(0);
	agroup_finish(ag);
}

/* The loop's part of a group once its attempts are done. */
static void agroup_finish(struct agroup *ag)
{
	if (ag->flushed) {
		durable_flushed(ag->flushed); /* before the note: it asks the flusher for nothing then */
		metrics_add(M_GROUP_COMMITS_FLUSHED, 1);
		for (size_t i = 0; i < ag->g.n; i++) /* never held, yet they waited for it */
			metrics_durable_waited(ag->flush_us);
	}
	if (ag->g.made && ag->g.async)
		group_committed_note(&ag->g);
	group_finish(&ag->g, ag->e);
	for (size_t k = 0; k < ag->nd; k++)
		read_one(ag->deferred[k]);
	struct job *j;
	while ((j = TAILQ_FIRST(&ag->jobs))) {
		TAILQ_REMOVE(&ag->jobs, j, q);
		struct client *c = j->slot ? slot_client(j->slot) : NULL;
		job_finish(j);
		if (c)
			client_flush(c);
	}
	control_drain_watches();
	WT.kick = !TAILQ_EMPTY(&O.jobs);
	free(ag->g.w);
	free(ag->g.res);
	free(ag->deferred);
	free(ag);
}

int ops_pending(void)
{
	return WT.kick;
}

void ops_close(void)
{
	if (!WT.started)
		return;
	pthread_mutex_lock(&WT.mu);
	WT.quit = 1;
	pthread_cond_signal(&WT.cv);
	pthread_mutex_unlock(&WT.mu);
	pthread_join(WT.th, NULL);
	loop_del(WT.efd);
	close(WT.efd);
	WT.efd = -1;
	WT.started = 0;
}

/* ---- dispatch -------------------------------------------------------- */

static void read_one(struct job *j)
{
	const struct op *op = &op_table[j->rq.op];
	store_txn *t = NULL;
	if (!j->slot && (j->rq.op == OP_EVENTS || j->rq.op == OP_WATCH))
		return; /* its client hung up while the writes before it were held */
	if (op->flags & OPF_TXN) {
		int e = store_txn_begin(O.env->st, STORE_READ, &t);
		if (e) {
			job_store_error(j, e, "read");
			return;
		}
	}
	if (t) {
		j->txnid = store_txn_id(t);
		durable_need(j->txnid);
	}
	op->read(t, j);
	if (t)
		store_txn_abort(t);
}

static void job_finish(struct job *j)
{
	if (j->slot) {
		slot_need(j->slot, j->txnid);
		if (j->err && j->err_extra)
			slot_error_with(j->slot, j->rq.id, j->err, j->msg, json_incref(j->err_extra));
		else if (j->err)
			slot_error(j->slot, j->rq.id, j->err, j->msg);
		else if (j->reply)
			slot_ok(j->slot, j->rq.id, json_incref(j->reply));
		else
			slot_error(j->slot, j->rq.id, PERR_INTERNAL, "out of memory");
	}
	if (!j->slot && !j->parked)
		metrics_op_latency(j->rq.op, j->started_us); /* its client left; one with a slot is timed at its reply */
	json_decref(j->reply);
	json_decref(j->err_extra);
	proto_request_free(&j->rq);
	free(j);
}

void ops_execute(void)
{
	struct job *j, *next;
	size_t nw = 0, n = 0;
	WT.kick = 0;
	if (WT.ready || loop_restricted())
		return; /* the requests wait for the group committing */
	TAILQ_FOREACH(j, &O.jobs, q) {
		n++;
		nw += ops_is_write(j->rq.op);
	}
	if (!n)
		return;
	/* A worker holds the write gate: committing now would wait for its
	 * commit. Serve what needs no write and keep the writes (with the
	 * reads queued behind them) for the iteration its `written` wakes;
	 * the batch only grows meanwhile, and the loop never blocks. */
	int held = nw && gate_busy();
	gate_hold_writes(held);
	if (!held)
		TAILQ_FOREACH(j, &O.jobs, q)
			if (j->slot)
				control_batch_done(slot_client(j->slot)); /* see client_line */
	/* A ping first, sent at once: one read in the same iteration as a
	 * flood of large replies does not wait for them to be built. It has
	 * no effect, so running it first changes nothing the others see, and
	 * its reply still leaves in its connection's order (client_flush). */
	TAILQ_FOREACH_SAFE(j, &O.jobs, q, next) {
		if (j->after_write || !(op_table[j->rq.op].flags & OPF_FIRST))
			continue;
		read_one(j);
		TAILQ_REMOVE(&O.jobs, j, q);
		struct client *c = j->slot ? slot_client(j->slot) : NULL;
		job_finish(j);
		if (c)
			client_flush(c);
	}
	struct job **w = calloc(nw + 1, sizeof *w);
	struct job **deferred = calloc(n + 1, sizeof *deferred);
	struct wres *res = calloc(nw + 1, sizeof *res);
	size_t iw = 0, nd = 0;
	int oom = !w || !deferred || !res;
	/* Reads that need no earlier write of their client run now, on the
	 * committed state; writes gather for the group transaction. Out of
	 * memory for that bookkeeping, every request left is answered so,
	 * none done. */
	TAILQ_FOREACH(j, &O.jobs, q) {
		if (oom) {
			j->err = PERR_INTERNAL;
			snprintf(j->msg, sizeof j->msg, "out of memory");
			j->ran = 1;
			continue;
		}
		if (ops_is_write(j->rq.op)) {
			w[iw++] = j;
			continue;
		}
		if (j->after_write) {
			deferred[nd++] = j;
		} else {
			read_one(j);
			j->ran = 1;
		}
	}
	int handed = 0;
	if (!held && !oom && iw && group_async_ok(w, iw) && group_ready(w, res, iw, deferred, nd) == 0) {
		handed = 1; /* ops_commit_start hands it over at the iteration's end */
	} else if (!held && !oom) {
		if (iw)
			group_commit(w, res, iw);
		for (size_t k = 0; k < nd; k++)
			read_one(deferred[k]);
	}
	/* Held: only the reads that ran are answered; the rest wait. */
	TAILQ_FOREACH_SAFE(j, &O.jobs, q, next) {
		if (held && !j->ran)
			continue;
		TAILQ_REMOVE(&O.jobs, j, q);
		struct client *c = j->slot ? slot_client(j->slot) : NULL;
		job_finish(j);
		if (c)
			client_flush(c);
	}
	if (handed)
		return; /* w, res and deferred are the group's */
	free(w);
	free(deferred);
	free(res);
}
