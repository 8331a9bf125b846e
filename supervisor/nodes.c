/* nodes.c: this supervisor as one node of those sharing a store (see nodes.h). */
#include "supervisor/nodes.h"
#include "common/log.h"
#include "supervisor/durable.h"
#include "supervisor/forward.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define CLAIM_BATCH 64 /* orphans one beat claims at most: the others are left for the next, or other nodes */

static void on_beat(struct loop_watch *lw, uint32_t events);
static void on_listen(struct loop_watch *lw, uint32_t events);

static struct {
	store *st;
	const struct config *cfg;
	char id[STORE_ID_MAX + 1];
	int64_t lease_ms, beat_ms, poll_ms;
	int tfd;           /* the heartbeat: CLOCK_MONOTONIC, periodic */
	int lfd;           /* the wakeup connection's socket; -1: none */
	int multi;         /* other nodes may share the store (PostgreSQL) */
	int64_t next_poll; /* monotonic ms */
	uint64_t leases;   /* held after the last beat */
	int64_t last_beat; /* monotonic ms of the last beat that committed; 0: none */
	uint64_t beats, beat_failures, claims, orphans, fenced, wakeups, elsewhere;
	struct loop_watch lw_beat, lw_listen;
} N = { .tfd = -1, .lfd = -1, .lw_beat = { on_beat }, .lw_listen = { on_listen } };

static const char id_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-";

/* The host's name, in the id alphabet. */
static int host_id(char *out, size_t cap)
{
	char h[256] = "";
	if (gethostname(h, sizeof h - 1) != 0 || !h[0])
		return -1;
	size_t n = 0;
	for (const char *p = h; *p && n < cap - 1 && n < 128; p++)
		out[n++] = strchr(id_chars, *p) ? *p : '-';
	out[n] = 0;
	return n ? 0 : -1;
}

int nodes_shared(void)
{
	return N.multi;
}

/* ---- claims ------------------------------------------------------------- */

/* Conversations whose worker ended while they still owe work: an
 * operator's `stop`, which is "go quiet until the next event or a resume".
 * This node keeps their leases (renewed by its beats), so no node claims
 * them as orphans, and its poll gives them no worker; a claim (the next
 * event or a resume, here or woken from another node) takes them off. */
static struct {
	char (*v)[STORE_ID_MAX + 1];
	size_t n, cap;
} Q;

static size_t quiet_find(const char *conv)
{
	for (size_t i = 0; i < Q.n; i++)
		if (!strcmp(Q.v[i], conv))
			return i;
	return SIZE_MAX;
}

static int quiet_add(const char *conv)
{
	if (quiet_find(conv) != SIZE_MAX)
		return 0;
	if (Q.n == Q.cap) {
		size_t cap = Q.cap ? Q.cap * 2 : 16;
		void *v = realloc(Q.v, cap * sizeof *Q.v);
		if (!v)
			return -ENOMEM;
		Q.v = v;
		Q.cap = cap;
	}
	snprintf(Q.v[Q.n++], sizeof *Q.v, "%s", conv);
	return 0;
}

static void quiet_del(size_t i)
{
	if (i < Q.n)
		memmove(Q.v[i], Q.v[--Q.n], sizeof *Q.v);
}

int nodes_claim(store_txn *t, const char *conv, uint64_t *gen)
{
	if (!N.id[0]) /* before nodes_open: no node to own it yet */
		return store_lease_next(t, conv, gen);
	int e = store_conv_claim(t, conv, N.id, N.lease_ms, gen);
	if (e != STORE_E_CONFLICT) {
		if (!e) {
			N.claims++;
			quiet_del(quiet_find(conv)); /* it gets a worker again */
		}
		return e;
	}
	/* Another node's live lease: its worker runs it. Tell that node (at
	 * this commit: what this transaction wrote is what it must read). */
	struct store_owner o;
	if ((e = store_conv_owner(t, conv, &o)) != 0)
		return e;
	if (o.node.len && o.node.len <= STORE_ID_MAX) {
		char owner[STORE_ID_MAX + 1];
		memcpy(owner, o.node.ptr, o.node.len);
		owner[o.node.len] = 0;
		if ((e = store_notify(t, owner, conv)) != 0)
			return e;
	}
	N.elsewhere++;
	return WORKERS_ELSEWHERE;
}

/* Whether conv still owes work (its status is active). */
static int owes_work(const char *conv)
{
	store_txn *t;
	struct store_conv c;
	int active = 0;
	if (store_txn_begin(N.st, STORE_READ, &t) == 0) {
		active = store_conv_get(t, conv, &c) == 0 && c.status == STORE_ACTIVE;
		store_txn_abort(t);
	}
	return active;
}

void nodes_release(const char *conv, uint64_t gen)
{
	store_txn *t;
	if (!N.st)
		return;
	if (N.multi && owes_work(conv) && quiet_add(conv) == 0) {
		log_debug("%s: stopped while it owes work: its lease is kept, for it to stay quiet", conv);
		return;
	}
	if (gate_write_begin(STORE_WRITE_LAZY, &t))
		return;
	int e = store_conv_release(t, conv, N.id, gen);
	if (e) {
		store_txn_abort(t);
		if (e != STORE_E_FENCED && e != STORE_E_NOTFOUND)
			log_warn("%s: releasing its lease: %s (it lapses after lease_time)", conv, store_strerror(e));
		return;
	}
	if ((e = store_txn_commit(t)) != 0)
		log_warn("%s: releasing its lease: %s (it lapses after lease_time)", conv, store_strerror(e));
}

/* ---- the heartbeat ------------------------------------------------------ */

struct lease {
	char conv[STORE_ID_MAX + 1];
	uint64_t gen;
};
struct leases {
	struct lease *v;
	size_t n, cap;
};

static int lease_add(void *arg, const char *id, size_t len, uint64_t gen, int64_t exp)
{
	(void)exp;
	struct leases *l = arg;
	if (len > STORE_ID_MAX)
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct lease *v = realloc(l->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	memcpy(l->v[l->n].conv, id, len);
	l->v[l->n].conv[len] = 0;
	l->v[l->n++].gen = gen;
	return 0;
}

static int lease_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lease *)a)->conv, ((const struct lease *)b)->conv);
}

/* Whether this node holds conv's lease at generation gen (the store's list,
 * in id order: the conversation ids compare as bytes there and here). */
static int held(void *arg, const char *conv, uint64_t gen)
{
	const struct leases *l = arg;
	struct lease key;
	if (l->n == 0)
		return 0; /* it holds none (and l->v may be NULL) */
	snprintf(key.conv, sizeof key.conv, "%s", conv);
	const struct lease *f = bsearch(&key, l->v, l->n, sizeof *l->v, lease_cmp);
	return f && f->gen == gen;
}

/* Stop the workers whose leases moved to another node while this one did
 * not beat: each is fenced at its next write anyway, but one busy in a
 * model or a tool would spend them for nothing. */
static void fence_lost(void)
{
	struct leases l = { 0 };
	store_txn *t;
	if (store_txn_begin(N.st, STORE_READ, &t))
		return;
	int e = store_node_leases(t, N.id, lease_add, &l);
	store_txn_abort(t);
	if (!e) {
		int n = workers_stop_unheld(held, &l);
		if (n) {
			N.fenced += (uint64_t)n;
			log_warn("node %s: %d conversation(s) moved to other nodes while this one was not heard from: "
				 "their workers here are stopped", N.id, n);
		}
	}
	free(l.v);
}

struct ids {
	char v[CLAIM_BATCH][STORE_ID_MAX + 1];
	size_t n;
};

static int id_add(void *arg, const char *id, size_t len)
{
	struct ids *c = arg;
	if (c->n == CLAIM_BATCH || len > STORE_ID_MAX)
		return 0;
	memcpy(c->v[c->n], id, len);
	c->v[c->n++][len] = 0;
	return 0;
}

/* Conversations that owe work and whose owner stopped beating (or that
 * have none): claimed in one transaction, whose rows other nodes doing the
 * same skip, then revived here from the log like those of a restart. */
static void claim_orphans(void)
{
	static struct ids c;
	store_txn *t;
	c.n = 0;
	if (gate_write_begin(STORE_WRITE_LAZY, &t))
		return;
	int e = store_convs_claimable(t, 1u << STORE_ACTIVE, CLAIM_BATCH, id_add, &c);
	for (size_t i = 0; i < c.n && !e; i++)
		e = lease_ahead(t, c.v[i]);
	if (e || c.n == 0) {
		store_txn_abort(t);
		leases_ahead_drop();
		if (e)
			log_warn("node %s: claiming orphaned conversations: %s", N.id, store_strerror(e));
		return;
	}
	e = commit_spawning(t);
	if (!e) {
		for (size_t i = 0; i < c.n; i++)
			workers_wake(c.v[i]);
		N.orphans += c.n;
		log_info("node %s: claimed %zu conversation(s) whose owner is not heard from", N.id, c.n);
	}
	leases_ahead_drop();
}

/* The fallback behind the wakeups: this node's conversations that owe work
 * get a worker, and what clients here wait on is looked at again. */
static void poll_fallback(void)
{
	struct leases l = { 0 };
	store_txn *t;
	if (store_txn_begin(N.st, STORE_READ, &t))
		return;
	int e = store_node_leases(t, N.id, lease_add, &l);
	/* Quiet ones whose lease moved (claimed after this node was not
	 * heard from, or deleted) are another node's business now. */
	for (size_t i = Q.n; i-- > 0 && !e;) {
		struct lease key;
		snprintf(key.conv, sizeof key.conv, "%s", Q.v[i]);
		if (!l.n || !bsearch(&key, l.v, l.n, sizeof *l.v, lease_cmp))
			quiet_del(i);
	}
	for (size_t i = 0; i < l.n && !e; i++) {
		struct store_conv c;
		l.v[i].gen = 0;
		if (workers_running(l.v[i].conv) || quiet_find(l.v[i].conv) != SIZE_MAX)
			continue;
		if (store_conv_get(t, l.v[i].conv, &c) == 0 && c.status == STORE_ACTIVE)
			l.v[i].gen = 1; /* marked: woken below, after the read ends */
		else
			l.v[i].gen = 0;
	}
	store_txn_abort(t);
	for (size_t i = 0; i < l.n && !e; i++)
		if (l.v[i].gen == 1 && !workers_running(l.v[i].conv))
			workers_wake(l.v[i].conv);
	free(l.v);
	waiters_notify_all();
}

static int listen_start(void)
{
	int fd = -1;
	int e = store_listen(N.st, N.id, &fd);
	if (e)
		return e;
	N.lfd = fd;
	if ((e = loop_add(fd, EPOLLIN, &N.lw_listen)) != 0) {
		N.lfd = -1;
		return e;
	}
	return 0;
}

/* 0, or the store's error beating (logged now and then). */
static int beat(void)
{
	store_txn *t;
	uint64_t n = 0;
	int e = gate_write_begin(STORE_WRITE_LAZY, &t);
	if (!e) {
		e = store_node_beat(t, N.id, N.lease_ms, &n);
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
	}
	if (e == -EIO) /* the commit's page flush failed (durable.h) */
		durable_fail(e);
	if (e) {
		if (N.beat_failures++ % 16 == 0)
			log_warn("node %s: heartbeat failed: %s (its leases lapse %lld ms after the last one)", N.id,
				 store_strerror(e), (long long)N.lease_ms);
		return e;
	}
	N.beats++;
	N.leases = n;
	N.last_beat = loop_now_ms();
	if (!N.multi)
		return 0; /* one node: nothing moves, nothing is orphaned while it runs */
	fence_lost();
	claim_orphans();
	if (N.multi && N.lfd < 0 && listen_start() == 0)
		N.next_poll = 0; /* listening again: what was missed meanwhile is looked at now */
	if (N.multi && loop_now_ms() >= N.next_poll) {
		poll_fallback();
		N.next_poll = loop_now_ms() + N.poll_ms;
	}
	return 0;
}

static void on_beat(struct loop_watch *lw, uint32_t events)
{
	(void)lw;
	(void)events;
	uint64_t n;
	if (read(N.tfd, &n, sizeof n) < 0 && errno != EAGAIN)
		log_error("node heartbeat timer: %s", strerror(errno));
	beat();
	forward_tick(); /* also when the beat failed: waits on other nodes end on time */
}

static int woken(void *arg, const char *conv, size_t len)
{
	(void)arg;
	char id[STORE_ID_MAX + 1];
	if (memchr(conv, ' ', len)) { /* a message, not a wakeup (store_notify_msg) */
		forward_heard(conv, len);
		return 0;
	}
	if (len == 0 || len > STORE_ID_MAX)
		return 0;
	memcpy(id, conv, len);
	id[len] = 0;
	N.wakeups++;
	workers_wake(id);
	waiters_notify(id);
	return 0;
}

static void on_listen(struct loop_watch *lw, uint32_t events)
{
	(void)lw;
	(void)events;
	int e = store_notified(N.st, woken, NULL);
	if (e == -ECONNRESET) {
		/* Wakeups sent meanwhile are lost: the next beat listens again
		 * and polls at once. */
		log_warn("node %s: the wakeup connection was lost: listening again at the next heartbeat", N.id);
		loop_del(N.lfd);
		N.lfd = -1;
	}
}

/* ---- open and close ----------------------------------------------------- */

static int other_add(void *arg, const struct store_node *nd)
{
	if (nd->id.len == strlen(N.id) && !memcmp(nd->id.ptr, N.id, nd->id.len))
		return 0;
	return id_add(arg, nd->id.ptr, nd->id.len);
}

/* LMDB: one node per data directory (its lock keeps one agentd), so leases
 * of an earlier node id (the host renamed, node_id changed) are this
 * node's to take. */
static void leave_others(void)
{
	static struct ids c;
	store_txn *t;
	c.n = 0;
	if (store_txn_begin(N.st, STORE_WRITE_LAZY, &t))
		return;
	int e = store_nodes_list(t, other_add, &c);
	for (size_t i = 0; i < c.n && !e; i++) {
		log_info("node %s: an earlier node of this data directory (%s) leaves", N.id, c.v[i]);
		e = store_node_leave(t, c.v[i]);
	}
	e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
	if (e)
		log_warn("node %s: releasing the leases of earlier nodes: %s", N.id, store_strerror(e));
}

int nodes_open(store *st, const struct config *cfg)
{
	N.st = st;
	N.cfg = cfg;
	N.lease_ms = cfg->lease_ms > 0 ? cfg->lease_ms : 10000;
	N.beat_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : N.lease_ms / 3;
	N.poll_ms = cfg->notify_poll_ms > 0 ? cfg->notify_poll_ms : 2000;
	if (cfg->node_id)
		snprintf(N.id, sizeof N.id, "%s", cfg->node_id);
	else if (host_id(N.id, sizeof N.id)) {
		log_error("no node_id set and the host has no usable name: set node_id in [agentd]");
		return -EINVAL;
	}
	int e = listen_start();
	N.multi = e != -EOPNOTSUPP;
	if (e && N.multi) {
		log_error("node %s: cannot listen for wakeups: %s", N.id, store_strerror(e));
		return e;
	}
	/* forward.c hears this node's messages and keeps its clock: from
	 * the first one on, it must know whom it speaks for. */
	forward_open(st, N.id, N.multi, N.lease_ms);
	if (!N.multi)
		leave_others();
	N.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (N.tfd < 0) {
		e = -errno;
		log_error("timerfd_create: %s", strerror(-e));
		return e;
	}
	struct itimerspec its = { { N.beat_ms / 1000, (N.beat_ms % 1000) * 1000000 },
				  { N.beat_ms / 1000, (N.beat_ms % 1000) * 1000000 } };
	if (timerfd_settime(N.tfd, 0, &its, NULL) < 0)
		e = -errno;
	else
		e = loop_add(N.tfd, EPOLLIN, &N.lw_beat);
	if (e) {
		log_error("node heartbeat timer: %s", strerror(-e));
		return e;
	}
	/* The first beat: the node is listed before any worker starts, and a
	 * node coming back after lease_time finds which leases it lost. */
	e = beat();
	if (!N.last_beat && N.multi) {
		log_error("node %s: cannot join: its first heartbeat failed", N.id);
		return e ? e : -EIO;
	}
	/* One node owns every conversation whatever its row says: a full
	 * store must not keep it from starting to serve reads and deletes. */
	log_info("node %s: lease time %lld ms, heartbeat %lld ms%s", N.id, (long long)N.lease_ms,
		 (long long)N.beat_ms, N.multi ? ", listening for wakeups" : " (one node: an LMDB store)");
	return 0;
}

void nodes_leave(void)
{
	if (!N.st || !N.id[0])
		return;
	store_txn *t;
	int e = store_txn_begin(N.st, STORE_WRITE, &t);
	if (!e) {
		e = store_node_leave(t, N.id);
		e = e ? (store_txn_abort(t), e) : store_txn_commit(t);
	}
	if (e)
		log_warn("node %s: leaving: %s (its leases lapse after lease_time)", N.id, store_strerror(e));
}

void nodes_close(void)
{
	free(Q.v);
	Q.v = NULL;
	Q.n = Q.cap = 0;
	if (N.tfd >= 0)
		close(N.tfd);
	N.tfd = -1;
	if (N.lfd >= 0)
		loop_del(N.lfd); /* the store closes the connection */
	N.lfd = -1;
}

/* ---- what status, metrics and the nodes op show ----------------------------- */

static int node_row(void *arg, const struct store_node *nd)
{
	json_t *a = arg;
	int64_t now = store_now(N.st);
	int self = nd->id.len == strlen(N.id) && !memcmp(nd->id.ptr, N.id, nd->id.len);
	return json_array_append_new(a, json_pack("{ss#sIsIsIsIsbsb}", "node", (const char *)nd->id.ptr,
						 (int)nd->id.len, "started_at", (json_int_t)nd->started_at,
						 "beat_at", (json_int_t)nd->beat_at, "expires_at",
						 (json_int_t)nd->expires_at, "leases", (json_int_t)nd->leases, "live",
						 nd->expires_at > now, "self", self))
		       ? -ENOMEM
		       : 0;
}

int nodes_json(store_txn *t, json_t **out)
{
	json_t *a = json_array();
	*out = NULL;
	if (!a)
		return -ENOMEM;
	int e = store_nodes_list(t, node_row, a);
	if (e) {
		json_decref(a);
		return e;
	}
	*out = json_pack("{sssIsIso}", "node", N.id, "lease_ms", (json_int_t)N.lease_ms, "heartbeat_ms",
			 (json_int_t)N.beat_ms, "nodes", a);
	return *out ? 0 : -ENOMEM;
}

struct seen {
	uint64_t live, all;
};

static int count_seen(void *arg, const struct store_node *nd)
{
	struct seen *s = arg;
	if (nd->id.len == strlen(N.id) && !memcmp(nd->id.ptr, N.id, nd->id.len))
		return 0;
	s->all++;
	if (nd->expires_at > store_now(N.st))
		s->live++;
	return 0;
}

static struct seen nodes_seen(void)
{
	struct seen s = { 0 };
	store_txn *t;
	if (store_txn_begin(N.st, STORE_READ, &t) == 0) {
		store_nodes_list(t, count_seen, &s);
		store_txn_abort(t);
	}
	return s;
}

json_t *nodes_status_json(void)
{
	struct seen s = nodes_seen();
	return json_pack("{sssIsIsIsIsI}", "id", N.id, "lease_ms", (json_int_t)N.lease_ms, "leases",
			 (json_int_t)N.leases, "last_beat_ms_ago",
			 (json_int_t)(N.last_beat ? loop_now_ms() - N.last_beat : -1), "other_nodes_live",
			 (json_int_t)s.live, "other_nodes", (json_int_t)s.all);
}

char *nodes_metrics_text(void)
{
	struct seen s = nodes_seen();
	struct forward_counts f;
	forward_counts(&f);
	char *buf = NULL;
	if (asprintf(&buf,
		     "# HELP agentd_node_info This node's id.\n# TYPE agentd_node_info gauge\n"
		     "agentd_node_info{node=\"%s\"} 1\n"
		     "# HELP agentd_node_leases Conversations this node held at its last heartbeat.\n"
		     "# TYPE agentd_node_leases gauge\nagentd_node_leases %llu\n"
		     "# HELP agentd_nodes_seen Other nodes whose heartbeat is live.\n"
		     "# TYPE agentd_nodes_seen gauge\nagentd_nodes_seen %llu\n"
		     "# HELP agentd_node_beats_total Heartbeats committed.\n"
		     "# TYPE agentd_node_beats_total counter\nagentd_node_beats_total %llu\n"
		     "# HELP agentd_node_beat_failures_total Heartbeats that failed.\n"
		     "# TYPE agentd_node_beat_failures_total counter\nagentd_node_beat_failures_total %llu\n"
		     "# HELP agentd_node_claims_total Leases this node took for its workers.\n"
		     "# TYPE agentd_node_claims_total counter\nagentd_node_claims_total %llu\n"
		     "# HELP agentd_node_orphans_total Conversations claimed from nodes not heard from.\n"
		     "# TYPE agentd_node_orphans_total counter\nagentd_node_orphans_total %llu\n"
		     "# HELP agentd_node_fenced_total Workers stopped here because their lease moved.\n"
		     "# TYPE agentd_node_fenced_total counter\nagentd_node_fenced_total %llu\n"
		     "# HELP agentd_node_wakeups_total Wakeups received from other nodes.\n"
		     "# TYPE agentd_node_wakeups_total counter\nagentd_node_wakeups_total %llu\n"
		     "# HELP agentd_node_elsewhere_total Work committed here for conversations other nodes own.\n"
		     "# TYPE agentd_node_elsewhere_total counter\nagentd_node_elsewhere_total %llu\n"
		     "# HELP agentd_node_asks_total Ops asked of the node that runs their conversation.\n"
		     "# TYPE agentd_node_asks_total counter\nagentd_node_asks_total %llu\n"
		     "# HELP agentd_node_asks_unanswered_total Asks whose node did not answer in time.\n"
		     "# TYPE agentd_node_asks_unanswered_total counter\nagentd_node_asks_unanswered_total %llu\n"
		     "# HELP agentd_node_asks_served_total Asks of other nodes served here.\n"
		     "# TYPE agentd_node_asks_served_total counter\nagentd_node_asks_served_total %llu\n"
		     "# HELP agentd_node_tells_total Deletes, cancels and ends told to other nodes.\n"
		     "# TYPE agentd_node_tells_total counter\nagentd_node_tells_total %llu\n",
		     N.id, (unsigned long long)N.leases, (unsigned long long)s.live, (unsigned long long)N.beats,
		     (unsigned long long)N.beat_failures, (unsigned long long)N.claims, (unsigned long long)N.orphans,
		     (unsigned long long)N.fenced, (unsigned long long)N.wakeups, (unsigned long long)N.elsewhere,
		     (unsigned long long)f.asked, (unsigned long long)f.unanswered, (unsigned long long)f.served,
		     (unsigned long long)f.told) < 0)
		return NULL;
	return buf;
}
