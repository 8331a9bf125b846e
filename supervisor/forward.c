/* forward.c: ops on a conversation whose worker runs on another node (see forward.h). */
#include "supervisor/forward.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"
#include "supervisor/control.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <bsd/sys/queue.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASK_ID_MAX 40

static const char *const action_names[] = { [FORWARD_KILL] = "kill", [FORWARD_STOP] = "stop",
					     [FORWARD_COMPACT] = "compact", [FORWARD_WORKER] = "worker" };

/* A request parked here until the owner answers. */
struct ask {
	LIST_ENTRY(ask) link;
	char id[ASK_ID_MAX];
	int action;
	char conv[STORE_ID_MAX + 1];
	char owner[STORE_ID_MAX + 1];
	struct slot *slot; /* NULL: its client went */
	json_t *rqid;
	json_t *partial;  /* get's reply, to complete */
	int64_t deadline; /* monotonic ms; 0: a compaction accepted, bounded by its owner's heartbeat */
};

/* A compaction another node asked of a worker here. */
struct served {
	char id[ASK_ID_MAX];
	char from[STORE_ID_MAX + 1];
};

static struct {
	store *st;
	char self[STORE_ID_MAX + 1]; /* this node's id */
	int shared;                  /* other nodes may share the store */
	int64_t lease_ms;            /* what a wait for another node is bounded by */
	int64_t boot;
	uint64_t seq;
	LIST_HEAD(, ask) asks;
	struct forward_counts n;
} F = { .asks = LIST_HEAD_INITIALIZER(F.asks) };

void forward_counts(struct forward_counts *out)
{
	*out = F.n;
}

void forward_open(store *st, const char *self, int shared, int64_t lease_ms)
{
	F.st = st;
	snprintf(F.self, sizeof F.self, "%s", self);
	F.shared = shared;
	F.lease_ms = lease_ms;
	F.boot = store_now(st);
}

/* One message to node, in a transaction of its own. */
static int send_msg(const char *node, const char *msg)
{
	store_txn *t;
	int e = gate_write_begin(STORE_WRITE_LAZY, &t);
	if (e)
		return e;
	e = store_notify_msg(t, node, msg);
	return e ? (store_txn_abort(t), e) : store_txn_commit(t);
}

int forward_owner(store_txn *t, const char *conv, char owner[STORE_ID_MAX + 1])
{
	if (!F.shared)
		return 0;
	struct store_owner o;
	int e = store_conv_owner(t, conv, &o);
	if (e)
		return e;
	const char *self = F.self;
	if (!o.node.len || o.node.len > STORE_ID_MAX ||
	    (o.node.len == strlen(self) && !memcmp(o.node.ptr, self, o.node.len)) || o.expires_at <= store_now(F.st))
		return 0;
	memcpy(owner, o.node.ptr, o.node.len);
	owner[o.node.len] = 0;
	return 1;
}

struct tell_ctx {
	store_txn *t;
	const char *msg;
};

static int tell_one(void *arg, const struct store_node *n)
{
	struct tell_ctx *c = arg;
	char id[STORE_ID_MAX + 1];
	const char *self = F.self;
	if (n->id.len > STORE_ID_MAX || (n->id.len == strlen(self) && !memcmp(n->id.ptr, self, n->id.len)))
		return 0;
	memcpy(id, n->id.ptr, n->id.len);
	id[n->id.len] = 0;
	int e = store_notify_msg(c->t, id, c->msg);
	F.n.told += !e;
	return e;
}

int forward_tell(store_txn *t, const char *conv, const char *action)
{
	char owner[STORE_ID_MAX + 1], msg[STORE_ID_MAX + 32];
	if (!strcmp(action, "delete") && F.shared) {
		/* Every node: the owner has the worker, any may have watchers. */
		snprintf(msg, sizeof msg, "tell %s %s", action, conv);
		struct tell_ctx c = { t, msg };
		return store_nodes_list(t, tell_one, &c);
	}
	int e = forward_owner(t, conv, owner);
	if (e <= 0)
		return e == STORE_E_NOTFOUND ? 0 : e;
	snprintf(msg, sizeof msg, "tell %s %s", action, conv);
	e = store_notify_msg(t, owner, msg);
	F.n.told += !e;
	return e;
}

/* ---- the asking side ------------------------------------------------------ */

static void ask_free(struct ask *a)
{
	LIST_REMOVE(a, link);
	json_decref(a->rqid);
	json_decref(a->partial);
	free(a);
}

/* get's reply with the conversation's worker set to w (stolen). */
static json_t *partial_with(struct ask *a, json_t *w)
{
	json_t *r = a->partial;
	a->partial = NULL;
	if (!r || json_object_set_new(json_object_get(r, "conversation"), "worker", w)) {
		json_decref(r);
		return NULL; /* answered "out of memory": never a get short of its worker */
	}
	return r;
}

/* The owner did not answer (or this node shuts down): say so, naming it. */
static void ask_fail(struct ask *a, const char *why)
{
	F.n.unanswered++;
	if (a->slot) {
		struct client *c = slot_client(a->slot);
		if (a->action == FORWARD_WORKER) {
			slot_ok(a->slot, a->rqid,
				partial_with(a, json_pack("{sssoss}", "node", a->owner, "pid", json_null(), "state",
							  "unknown")));
		} else {
			char msg[400];
			snprintf(msg, sizeof msg, "conversation %s is run by node %s, which %s: %s", a->conv, a->owner, why,
				 a->action == FORWARD_COMPACT ? "no summary was made here"
							      : "nothing was done (retry: once its lease lapses, any node acts)");
			json_t *node = json_pack("{ss}", "node", a->owner);
			if (node)
				slot_error_with(a->slot, a->rqid, PERR_UNAVAILABLE, msg, node);
			else /* never an unavailable short of its node */
				slot_error(a->slot, a->rqid, PERR_INTERNAL, "out of memory");
		}
		client_flush(c);
	}
	ask_free(a);
}

int forward_ask(int action, const char *conv, const char *owner, struct slot *s, json_t *rqid, int sig,
		json_t *partial)
{
	char msg[2 * STORE_ID_MAX + ASK_ID_MAX + 64];
	struct ask *a = calloc(1, sizeof *a);
	if (!a) {
		json_decref(partial);
		return -ENOMEM;
	}
	snprintf(a->id, sizeof a->id, "%llx.%llu", (unsigned long long)F.boot, (unsigned long long)++F.seq);
	a->action = action;
	snprintf(a->conv, sizeof a->conv, "%s", conv);
	snprintf(a->owner, sizeof a->owner, "%s", owner);
	/* The deadline (store time) lets an owner that hears it late, after it
	 * was stopped or cut off, drop it: the asker has answered by then. */
	snprintf(msg, sizeof msg, "ask %s %s %s %s %d %lld", a->id, F.self, action_names[action], conv, sig,
		 (long long)(store_now(F.st) + F.lease_ms));
	int e = send_msg(owner, msg);
	if (e) {
		json_decref(partial);
		free(a);
		return e;
	}
	a->slot = s;
	a->rqid = json_incref(rqid);
	a->partial = partial;
	a->deadline = loop_now_ms() + F.lease_ms;
	LIST_INSERT_HEAD(&F.asks, a, link);
	F.n.asked++;
	log_debug("%s: %s asked of node %s, which runs it (%s)", conv, action_names[action], owner, a->id);
	return 0;
}

static struct ask *ask_find(const char *id, size_t len)
{
	struct ask *a;
	LIST_FOREACH(a, &F.asks, link)
		if (strlen(a->id) == len && !memcmp(a->id, id, len))
			return a;
	return NULL;
}

/* The compaction's summary, read here: the owner's answer only says it is
 * committed (a summary may not fit a message). */
static json_t *summary_reply(struct ask *a, int *err, char *msg, size_t cap)
{
	json_t *sum;
	int e = conv_summary_read(F.st, a->conv, &sum);
	if (e) {
		*err = PERR_INTERNAL;
		snprintf(msg, cap, "compacted on node %s, but reading the summary failed: %s", a->owner, store_strerror(e));
		return NULL;
	}
	return json_pack("{soss}", "summary", sum, "node", a->owner);
}

/* The owner's answer to a: the reply the client was waiting for. */
static void ask_answered(struct ask *a, json_t *ans)
{
	json_t *r = NULL;
	int err = 0;
	char msg[400] = "";
	switch (a->action) {
	case FORWARD_KILL:
		r = json_pack("{sOss}", "pid", json_object_get(ans, "pid") ? json_object_get(ans, "pid") : json_null(),
			      "node", a->owner);
		break;
	case FORWARD_STOP:
		r = json_pack("{sbss}", "stopping", json_is_true(json_object_get(ans, "stopping")), "node", a->owner);
		break;
	case FORWARD_WORKER: {
		json_t *w = json_object_get(ans, "worker");
		w = json_is_object(w) ? json_deep_copy(w) : json_null();
		if (json_is_object(w) && json_object_set_new(w, "node", json_string(a->owner))) {
			json_decref(w); /* never a worker short of its node: answered "out of memory" */
			w = NULL;
		}
		r = partial_with(a, w);
		break;
	}
	case FORWARD_COMPACT:
		if (json_is_string(json_object_get(ans, "error"))) {
			err = PERR_INTERNAL;
			snprintf(msg, sizeof msg, "compaction on node %s failed: %s", a->owner,
				 json_string_value(json_object_get(ans, "error")));
		} else {
			r = summary_reply(a, &err, msg, sizeof msg);
		}
		break;
	}
	if (a->slot) {
		struct client *c = slot_client(a->slot);
		if (err) {
			json_decref(r);
			slot_error(a->slot, a->rqid, err, msg);
		} else {
			slot_ok(a->slot, a->rqid, r); /* NULL: out of memory */
		}
		client_flush(c);
	} else {
		json_decref(r);
	}
	ask_free(a);
}

/* ---- the owning side -------------------------------------------------------- */

static void answer(const char *to, const char *id, json_t *v)
{
	/* jsonmp_dumps: json_dumps can leave a key out when memory runs out. */
	char *js = v ? jsonmp_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII, 0, NULL) : NULL;
	json_decref(v);
	char *msg = NULL;
	int e = -ENOMEM;
	if (js && asprintf(&msg, "ans %s %s", id, js) >= 0)
		e = send_msg(to, msg);
	if (e)
		log_warn("answering node %s (%s): %s: its request fails after lease_time", to, id,
			 e == -ENOMEM ? "out of memory" : store_strerror(e));
	free(js);
	free(msg);
}

/* workers_compacted_fn: the answer the asking node waits for. */
static void compacted(void *arg, int err, const char *why, size_t len)
{
	struct served *s = arg;
	if (!err)
		answer(s->from, s->id, json_pack("{sb}", "ok", 1));
	else
		answer(s->from, s->id, json_pack("{ss%}", "error", why, len > 300 ? (size_t)300 : len));
	free(s);
}

static void serve_compact(const char *from, const char *id, const char *conv)
{
	struct served *s = calloc(1, sizeof *s);
	if (!s || workers_wake(conv)) {
		free(s);
		answer(from, id, json_pack("{ss}", "error", s ? "could not start a worker" : "out of memory"));
		return;
	}
	snprintf(s->id, sizeof s->id, "%s", id);
	snprintf(s->from, sizeof s->from, "%s", from);
	if (workers_compact(conv, compacted, s)) {
		free(s);
		answer(from, id, json_pack("{ss}", "error", "could not reach the worker"));
		return;
	}
	char msg[ASK_ID_MAX + 8];
	snprintf(msg, sizeof msg, "ack %s", id);
	int e = send_msg(from, msg);
	if (e)
		log_warn("%s: telling node %s its compaction runs: %s", conv, from, store_strerror(e));
}

static void serve_ask(const char *id, const char *from, const char *action, const char *conv, int sig,
		      int64_t deadline)
{
	if (store_now(F.st) >= deadline) {
		log_warn("%s: node %s asked for a %s that this node heard too late (its answer is given): not done",
			 conv, from, action);
		return;
	}
	log_debug("%s: node %s asks: %s", conv, from, action);
	F.n.served++;
	if (!strcmp(action, "kill")) {
		json_t *w = workers_conv_json(conv);
		if (!w) { /* out of memory: unanswered (the asker says so after lease_time), never "no worker" */
			answer(from, id, NULL);
			return;
		}
		json_t *pid = json_incref(json_object_get(w, "pid"));
		json_decref(w);
		if (sig != SIGKILL && sig != SIGTERM)
			sig = SIGKILL;
		if (pid && workers_kill(conv, sig) != 0) {
			json_decref(pid);
			pid = NULL;
		}
		answer(from, id, json_pack("{so}", "pid", pid ? pid : json_null()));
	} else if (!strcmp(action, "stop")) {
		answer(from, id, json_pack("{sb}", "stopping", workers_stop(conv) == 0));
	} else if (!strcmp(action, "worker")) {
		json_t *w = workers_conv_json(conv);
		answer(from, id, w ? json_pack("{so}", "worker", w) : NULL);
	} else if (!strcmp(action, "compact")) {
		serve_compact(from, id, conv);
	} else {
		log_warn("node %s asks for '%s', which this node does not know: ignored", from, action);
	}
}

static void serve_tell(const char *action, const char *conv)
{
	log_debug("%s: told by another node: %s", conv, action);
	if (!strcmp(action, "delete")) {
		workers_deleted(conv);
		waiters_deleted(conv);
	} else if (!strcmp(action, "cancel")) {
		workers_cancel(conv);
		waiters_notify(conv);
	} else if (!strcmp(action, "end")) {
		workers_stop(conv);
	}
}

/* ---- messages --------------------------------------------------------------- */

/* The next space-separated field of [*p, end) into out (NUL-terminated);
 * 0, or -1 when there is none or it does not fit. */
static int field(const char **p, const char *end, char *out, size_t cap)
{
	const char *s = *p, *e = s;
	while (e < end && *e != ' ')
		e++;
	if (e == s || (size_t)(e - s) >= cap)
		return -1;
	memcpy(out, s, (size_t)(e - s));
	out[e - s] = 0;
	*p = e < end ? e + 1 : e;
	return 0;
}

void forward_heard(const char *msg, size_t len)
{
	const char *p = msg, *end = msg + len;
	char kind[8], id[ASK_ID_MAX], from[STORE_ID_MAX + 1], action[16], conv[STORE_ID_MAX + 1], sig[8], dl[24];
	if (field(&p, end, kind, sizeof kind))
		goto bad;
	if (!strcmp(kind, "ask")) {
		if (field(&p, end, id, sizeof id) || field(&p, end, from, sizeof from) ||
		    field(&p, end, action, sizeof action) || field(&p, end, conv, sizeof conv) ||
		    field(&p, end, sig, sizeof sig) || field(&p, end, dl, sizeof dl))
			goto bad;
		serve_ask(id, from, action, conv, atoi(sig), strtoll(dl, NULL, 10));
	} else if (!strcmp(kind, "tell")) {
		if (field(&p, end, action, sizeof action) || field(&p, end, conv, sizeof conv))
			goto bad;
		serve_tell(action, conv);
	} else if (!strcmp(kind, "ack") || !strcmp(kind, "ans")) {
		if (field(&p, end, id, sizeof id))
			goto bad;
		struct ask *a = ask_find(id, strlen(id));
		if (!a)
			return; /* answered already (timed out), or asked by an earlier agentd */
		if (kind[1] == 'c') { /* ack: the compaction runs; its owner's heartbeat bounds the wait now */
			a->deadline = 0;
			return;
		}
		json_t *ans;
		/* jsonmp_loadb: json_loadb may drop a byte when memory runs out. */
		if (jsonmp_loadb(p, (size_t)(end - p), 0, &ans, NULL) == -ENOMEM) {
			log_warn("an answer from node %s could not be read: out of memory", a->owner);
			if (a->slot) {
				struct client *c = slot_client(a->slot);
				slot_error(a->slot, a->rqid, PERR_INTERNAL, "out of memory");
				client_flush(c);
			}
			ask_free(a);
			return;
		}
		if (!json_is_object(ans)) {
			json_decref(ans);
			goto bad;
		}
		ask_answered(a, ans);
		json_decref(ans);
	} else {
		goto bad;
	}
	return;
bad:
	log_warn("a message from another node that this node cannot read: %.*s", (int)(len > 200 ? 200 : len), msg);
}

/* ---- time -------------------------------------------------------------------- */

struct live_ctx {
	const char *node;
	int live;
};

static int node_live(void *arg, const struct store_node *n)
{
	struct live_ctx *l = arg;
	if (n->id.len == strlen(l->node) && !memcmp(n->id.ptr, l->node, n->id.len))
		l->live = n->expires_at > store_now(F.st);
	return 0;
}

/* Whether node still beats (its row is live): -1 when that cannot be read. */
static int owner_live(const char *node)
{
	store_txn *t;
	struct live_ctx l = { node, 0 };
	if (store_txn_begin(F.st, STORE_READ, &t))
		return -1;
	int e = store_nodes_list(t, node_live, &l);
	store_txn_abort(t);
	return e ? -1 : l.live;
}

void forward_tick(void)
{
	struct ask *a, *next;
	int64_t now = loop_now_ms();
	char msg[64];
	LIST_FOREACH_SAFE(a, &F.asks, link, next) {
		if (a->deadline && now >= a->deadline) {
			snprintf(msg, sizeof msg, "did not answer within %lld ms", (long long)F.lease_ms);
			log_warn("%s: node %s did not answer a %s within lease_time", a->conv, a->owner,
				 action_names[a->action]);
			ask_fail(a, msg);
		} else if (!a->deadline && owner_live(a->owner) == 0) {
			log_warn("%s: node %s stopped beating before its compaction reported", a->conv, a->owner);
			ask_fail(a, "stopped beating before its compaction reported");
		}
	}
}

void forward_client_gone(struct client *c)
{
	struct ask *a;
	LIST_FOREACH(a, &F.asks, link)
		if (a->slot && slot_client(a->slot) == c)
			a->slot = NULL;
}

void forward_close(void)
{
	while (!LIST_EMPTY(&F.asks))
		ask_fail(LIST_FIRST(&F.asks), "had not answered when this node shut down");
}
