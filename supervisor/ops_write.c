/*
 * ops_write.c: the ops that write (create, update, delete, send, resolve,
 * fork): each runs inside the iteration's group transaction (commit.h), a
 * send possibly on the writer thread, and its after step on the loop once
 * the group committed. Everything that can refuse a write is checked before
 * its first write, so a refused write leaves the group transaction usable
 * for the others; a store error poisons it (the group then runs again
 * without the write that met it, or fails).
 */
#include "common/digest.h"
#include "common/id.h"
#include "common/jsonmp.h"
#include "conv/conv.h"
#include "supervisor/forward.h"
#include "supervisor/ops_int.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Store metadata (checked by the codec) as the conversation's whole map. */
static int meta_put(store_txn *t, struct job *j, const char *id, json_t *m)
{
	struct jsonmp_buf b;
	if (ops_pack(&b, m))
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

int ops_w_create(store_txn *t, struct job *j, struct wres *r)
{
	char gen[20];
	const char *id = j->rq.conv;
	if (!id) {
		id_random(gen, sizeof gen, "c-", 8);
		id = gen;
	}
	struct jsonmp_buf b;
	int e = ops_pack(&b, j->rq.settings);
	if (e) {
		ops_pack_error(j, e, "settings");
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
	conv_budget_of(settings, &ops_ctx()->cfg->budget, &b);
	json_decref(settings);
	r->resumed = !conv_budget_exceeded(&b, &r->usage, r->turns, NULL);
	if (r->resumed) {
		p->set |= STORE_SET_STATUS;
		p->status = STORE_ACTIVE;
	}
	return 0;
}

/* ops_w_update's new settings: the stored ones with the request's merged in,
 * packed into b and set in p. 0, or -ENOMEM or -EINVAL (unreadable stored
 * settings, or too deep to pack) with j's error set. */
static int update_settings(struct job *j, const struct store_conv *c, struct jsonmp_buf *b,
			   struct store_conv_patch *p)
{
	json_t *merged;
	int de = jsonmp_decode(c->settings.ptr, c->settings.len, &merged);
	if (de == -ENOMEM || (!de && json_object_update(merged, j->rq.settings))) {
		json_decref(merged);
		job_error(j, PERR_INTERNAL, "out of memory"); /* never settings stored short of a key */
		return -ENOMEM;
	}
	if (!json_is_object(merged)) {
		json_decref(merged);
		job_error(j, PERR_INTERNAL, "stored settings of %s are unreadable", j->rq.conv);
		return -EINVAL;
	}
	de = ops_pack(b, merged);
	json_decref(merged);
	if (de) {
		ops_pack_error(j, de, "settings");
		return de;
	}
	p->set |= STORE_SET_SETTINGS;
	p->settings = (store_bytes){ b->sb.data, b->sb.size };
	return 0;
}

/* ops_w_update's new metadata, merged as settings are; allowed on an ended
 * conversation too (labels for what is kept, not for what runs). Packed
 * into mb and set in p. 0, or -ENOMEM or -EINVAL with j's error set. */
static int update_metadata(struct job *j, const struct store_conv *c, struct jsonmp_buf *mb,
			   struct store_conv_patch *p)
{
	json_t *m = meta_merge(j, c);
	if (!m)
		return -EINVAL; /* j's error says which bound was broken, or that memory ran out */
	int bad = ops_pack(mb, m);
	json_decref(m);
	if (bad)
		return ops_pack_error(j, bad, "metadata"), bad;
	p->set |= STORE_SET_METADATA;
	p->metadata = (store_bytes){ mb->sb.data, mb->sb.size };
	return 0;
}

/* ops_w_update's writes: the patch, and what ending or resuming brings. */
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

int ops_w_update(store_txn *t, struct job *j, struct wres *r)
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

int ops_w_delete(store_txn *t, struct job *j, struct wres *r)
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

/* What this send does when it finds a turn running (enum proto_on_busy):
 * its own on_busy, else the conversation's settings.on_busy, else enqueue
 * (*named 0: neither names one). -ENOMEM: the settings could not be read
 * for memory (never decided on the default). */
static int send_on_busy(const struct job *j, const struct store_conv *c, int *named)
{
	*named = 1;
	if (j->rq.on_busy >= 0)
		return j->rq.on_busy;
	json_t *s = NULL;
	if (c->settings.len && jsonmp_decode(c->settings.ptr, c->settings.len, &s) == -ENOMEM)
		return -ENOMEM;
	int m = proto_on_busy(json_string_value(json_object_get(s, "on_busy")));
	json_decref(s);
	*named = m >= 0;
	return m < 0 ? PROTO_ON_BUSY_ENQUEUE : m;
}

/* Whether the send finds a turn running, from the status in its own
 * transaction: active (a turn in progress or owed, its tools running) or
 * suspended (its tools waiting on a person). *mode gets what it does then,
 * *named whether on_busy was given (the reply then says the mode). A replay
 * finds nothing busy: it writes nothing. 0 with *mode -1 when not busy; else
 * j's error is set when the send is refused (1), or -ENOMEM. */
static int send_busy(store_txn *t, struct job *j, const struct store_conv *c, const struct store_event_in *ev,
		     size_t n, int *mode, int *named)
{
	int e = 0;
	*mode = -1;
	*named = 0;
	if (c->status != STORE_ACTIVE && c->status != STORE_SUSPENDED)
		return 0;
	if (send_is_replay(t, j->rq.conv, ev, n, &e) || e)
		return e;
	if ((*mode = send_on_busy(j, c, named)) < 0) {
		job_error(j, PERR_INTERNAL, "out of memory"); /* nothing written yet */
		return 1;
	}
	if (*mode != PROTO_ON_BUSY_REJECT)
		return 0;
	job_error(j, PERR_CONFLICT, "conversation %s is busy: a turn is running (on_busy = reject): nothing was written",
		  j->rq.conv);
	j->err_extra = json_pack("{ss}", "status", store_status_name(c->status));
	if (!j->err_extra) /* never a conflict short of status */
		job_error(j, PERR_INTERNAL, "out of memory");
	return 1;
}

/* An interrupting send, after its events: the running turn cancelled as
 * `cancel` does (conv_turn_interrupt keeps the text its model streamed), its
 * worker fenced, and the conversation active again for the turn that
 * answers both. r->seq gets the turn_cancelled's seq. A store error or
 * -ENOMEM (both poison t). */
static int send_interrupt(store_txn *t, const char *conv, uint64_t by_seq, struct wres *r)
{
	size_t len;
	const char *partial = workers_partial(conv, &len);
	json_t *ids = NULL;
	int e = conv_turn_interrupt(t, conv, by_seq, partial, len, &ids, &r->seq);
	json_decref(ids);
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
	if (!e)
		e = store_conv_put(t, conv, &p);
	if (!e)
		e = workers_fence(t, conv);
	if (!e) /* a worker on another node: that node kills it and its model or tool */
		e = forward_tell(t, conv, "cancel");
	if (!e)
		r->interrupted = 1;
	return e;
}

static int send_steer(store_txn *t, const char *conv, const uint64_t *seqs, const int *dups, size_t n);

/* What a send that wrote events (r->appended) does after them, by its
 * on_busy mode (-1: no turn ran): an interrupt cancels the running turn;
 * steer names its user_msgs; with enqueue or steer, the approvals whose
 * tools say on_user_message = reject are settled by its first user_msg
 * (conv_user_message_reject: *rejected gets their ids); an idle
 * conversation becomes active; then its worker's lease. A refused send
 * writes nothing and gets none of this. A store error or -ENOMEM. */
static int send_writes(store_txn *t, const char *conv, int mode, int was_idle, const uint64_t *seqs,
		       const int *dups, size_t n, struct wres *r, json_t **rejected)
{
	size_t first = 0;
	while (dups[first])
		first++; /* the first event this send wrote: one is (appended) */
	int e = 0;
	if (mode == PROTO_ON_BUSY_INTERRUPT)
		e = send_interrupt(t, conv, seqs[first], r);
	else if (mode == PROTO_ON_BUSY_STEER)
		e = send_steer(t, conv, seqs, dups, n);
	if (!e && (mode == PROTO_ON_BUSY_ENQUEUE || mode == PROTO_ON_BUSY_STEER))
		e = conv_user_message_reject(t, conv, seqs[first], ops_ctx()->cfg, rejected);
	if (!e && was_idle) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		e = store_conv_put(t, conv, &p);
	}
	return e ? e : lease_ahead(t, conv);
}

/* send's checks and its append, in that order: the conversation exists and
 * is not ended; expected_seq (unless the send is a replay: idempotency wins,
 * and a replay writes nothing); then every event or none. A send that finds
 * a turn running does what on_busy says (send_busy). */
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
	r->interrupted = 0;
	int was_idle = c.status == STORE_IDLE, mode, named;
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
	if ((e = send_busy(t, j, &c, ev, n, &mode, &named)))
		return e < 0 ? (job_store_error(j, e, "send"), e) : 0;
	/* Atomic: the store checks every event before writing one. */
	e = store_events_append(t, conv, ev, n, seqs, dups);
	r->appended = 0;
	for (size_t i = 0; !e && i < n; i++)
		r->appended += !dups[i];
	json_t *rejected = NULL;
	if (!e && r->appended)
		e = send_writes(t, conv, mode, was_idle, seqs, dups, n, r, &rejected);
	if (e) {
		json_decref(rejected);
		return job_store_error(j, e, "send"), e;
	}
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
	if (j->reply && !oom && mode >= 0 && named && r->appended) /* today's replies stay as they were */
		oom = json_object_set_new(j->reply, "on_busy", json_string(proto_on_busy_names[mode]));
	if (j->reply && !oom && r->interrupted)
		oom = json_object_set_new(j->reply, "interrupted", json_integer((json_int_t)r->seq));
	if (j->reply && !oom && json_array_size(rejected))
		oom = json_object_set(j->reply, "rejected", rejected);
	json_decref(rejected);
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

/* A steering send, after its events: a `steer` event naming the seqs it
 * wrote, which makes them part of the running turn (tail.c): its next model
 * round answers them, counted on from the rounds before. A store error or
 * -ENOMEM (both poison t). */
static int send_steer(store_txn *t, const char *conv, const uint64_t *seqs, const int *dups, size_t n)
{
	json_t *a = json_array();
	int e = a ? 0 : -ENOMEM;
	for (size_t i = 0; !e && i < n; i++)
		if (!dups[i] && json_array_append_new(a, json_integer((json_int_t)seqs[i])))
			e = -ENOMEM;
	json_t *content = e ? NULL : json_pack("{sO}", "seqs", a);
	json_decref(a);
	struct jsonmp_buf b;
	if (!e && !content)
		e = -ENOMEM;
	if (!e && !(e = ops_pack(&b, content))) {
		struct store_event_in ev = { "steer", { b.sb.data, b.sb.size }, NULL };
		uint64_t s;
		e = store_event_append(t, conv, &ev, &s, NULL);
		jsonmp_buf_destroy(&b);
	}
	json_decref(content);
	return e;
}

/* send: one event, or a batch (rq.events) appended in order in one
 * transaction. Everything that can refuse it is checked before its first
 * write, so a refused send writes nothing and leaves the group transaction
 * usable for the others (a store error poisons it: group_commit then). */
int ops_w_send(store_txn *t, struct job *j, struct wres *r)
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
		int pe = ops_pack(&b[packed], item ? json_object_get(item, "content") : j->rq.content);
		if (pe) {
			ops_pack_error(j, pe, "content");
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

json_t *ops_by_json(struct job *j)
{
	json_t *by = json_pack("{sI}", "uid", (json_int_t)j->peer_uid);
	if (!by || (j->rq.by && json_object_set_new(by, "name", json_string(j->rq.by)))) {
		json_decref(by);
		job_error(j, PERR_INTERNAL, "out of memory"); /* nothing written yet */
		return NULL;
	}
	return by;
}

/* The resolution rule (conv_resolve), then the lease of the worker it
 * wakes when the conversation owes work; by (NULL: none) records who decided. */
static int settle(store_txn *t, const char *tool_call_id, int status, json_t *result, const json_t *by, char *conv,
		  uint64_t *seq, int *ended)
{
	int e = conv_resolve(t, tool_call_id, status, result, by, conv, seq, ended);
	return e || *ended ? e : lease_ahead(t, conv);
}

/* What was approved is what runs: with args_digest, the pending call's
 * args must have that digest (common/digest.h), or the resolve is refused
 * (conflict, the digest they have in the reply) before anything is written.
 * 0 to go on: the digest matches, or the call is not pending (the settle
 * says stale); 1 refused (j's error set, t usable); or the store's error
 * that poisoned t. */
static int digest_check(store_txn *t, struct job *j)
{
	struct store_tool_call tc;
	char have[DIGEST_HEX_LEN + 1];
	int e = store_tool_call_get(t, j->rq.tool_call_id, &tc);
	if (e == STORE_E_NOTFOUND || (!e && tc.status != STORE_TC_PENDING))
		return 0;
	if (e)
		return job_store_error(j, e, "resolve"), e;
	json_t *args = ops_mp_json(tc.args);
	e = args ? digest_json(args, have) : -ENOMEM;
	json_decref(args);
	if (e)
		return job_error(j, PERR_INTERNAL, "out of memory"), 1;
	if (!strcmp(have, j->rq.args_digest))
		return 0;
	j->err_extra = json_pack("{ss}", "args_digest", have);
	if (!j->err_extra) /* never a conflict short of the digest */
		return job_error(j, PERR_INTERNAL, "out of memory"), 1;
	job_error(j, PERR_CONFLICT, "tool call %s: its arguments are not those approved (args_digest %s given, "
		  "theirs is %s): nothing settled", j->rq.tool_call_id, j->rq.args_digest, have);
	return 1;
}

/* A deny (status errored, or a result {"approved": false, ...}) settles at
 * once; anything else is an approval, counted per name when the call's
 * tool asks for approvers > 1 (conv_approve). */
static int is_deny(const struct job *j)
{
	return j->rq.status != STORE_TC_RESOLVED || json_is_false(json_object_get(j->rq.result, "approved"));
}

/* An approval (conv_approve): 0 counted or settled, *approvals and *need
 * (for the reply) its count and its tool's approvers; 1 refused, nothing
 * written (j's error set, with the count); or the store's error. */
static int approve(store_txn *t, struct job *j, struct wres *r, const json_t *by, int *approvals, int *need)
{
	struct conv_vote_out v;
	const char *id = j->rq.tool_call_id;
	int e = conv_approve(t, id, j->rq.result, by, ops_ctx()->cfg, &v, r->conv, &r->seq, &r->ended);
	if (!e && v.vote == CONV_VOTE_SETTLED && !r->ended)
		e = lease_ahead(t, r->conv);
	if (e || v.vote == CONV_VOTE_SETTLED || v.vote == CONV_VOTE_COUNTED) {
		json_decref(v.names);
		r->voted = !e && v.vote == CONV_VOTE_COUNTED;
		*approvals = v.approvals;
		*need = v.need;
		return e;
	}
	char *names = json_dumps(v.names, JSON_COMPACT);
	j->err_extra = json_pack("{sisisO}", "approvals", v.approvals, "approvers", v.need, "approved_by", v.names);
	json_decref(v.names);
	if (!names || !j->err_extra)
		job_error(j, PERR_INTERNAL, "out of memory"); /* nothing written */
	else if (v.vote == CONV_VOTE_NO_NAME)
		job_error(j, PERR_BAD_REQUEST, "tool call %s needs %d approvals by different names (%d so far: %s): "
			  "an approval without 'by' cannot be counted; nothing written", id, v.need, v.approvals, names);
	else
		job_error(j, PERR_CONFLICT, "tool call %s: '%s' has approved it already (%d of %d approvals: %s); "
			  "a name approves once, nothing written", id, j->rq.by, v.approvals, v.need, names);
	free(names);
	return 1;
}

int ops_w_resolve(store_txn *t, struct job *j, struct wres *r)
{
	int e = j->rq.args_digest ? digest_check(t, j) : 0;
	if (e)
		return e > 0 ? 0 : e; /* refused, nothing written; or a store error */
	json_t *by = ops_by_json(j);
	int approvals = 0, need = 1;
	if (!by)
		return 0;
	if (is_deny(j))
		e = settle(t, j->rq.tool_call_id, j->rq.status, j->rq.result, by, r->conv, &r->seq, &r->ended);
	else
		e = approve(t, j, r, by, &approvals, &need);
	json_decref(by);
	if (e == 1)
		return 0;
	if (e == STORE_E_STALE) {
		job_error(j, PERR_STALE, "tool call %s is not pending (unknown, already settled or expired)",
			  j->rq.tool_call_id);
		return 0;
	}
	if (e)
		return job_store_error(j, e, "resolve"), e;
	j->reply = json_pack("{sIsssb}", "seq", (json_int_t)r->seq, "conversation", r->conv, "settled", !r->voted);
	/* Committed either way: a reply short of its count is answered "out of memory". */
	if (j->reply && need > 1 && (json_object_set_new(j->reply, "approvals", json_integer(approvals)) ||
				     json_object_set_new(j->reply, "approvers", json_integer(need)))) {
		json_decref(j->reply);
		j->reply = NULL;
	}
	return 0;
}

int ops_w_extend(store_txn *t, struct job *j, struct wres *r)
{
	const char *id = j->rq.tool_call_id;
	int64_t now = store_txn_now(t);
	int64_t at = j->rq.expires_in_ms ? now + j->rq.expires_in_ms : j->rq.deadline;
	json_t *by = ops_by_json(j);
	if (!by)
		return 0;
	int e = conv_deadline_extend(t, id, j->rq.conv, at, ops_ctx()->cfg, by, r->conv, &r->seq);
	json_decref(by);
	if (e == STORE_E_NOTFOUND)
		return job_error(j, PERR_NOT_FOUND, "tool call %s not found in conversation %s", id, j->rq.conv), 0;
	if (e == STORE_E_STALE)
		return job_error(j, PERR_STALE, "tool call %s is not pending (already settled or expired): its "
				 "deadline cannot move", id), 0;
	if (e == STORE_E_CONFLICT)
		return job_error(j, PERR_CONFLICT, "tool call %s has no deadline (its tool never expires, or it is "
				 "no human call): there is nothing to extend", id), 0;
	if (e == STORE_E_INVAL)
		return job_error(j, PERR_BAD_REQUEST, "the new deadline %lld is not in the future (now: %lld)",
				 (long long)at, (long long)now), 0;
	if (e)
		return job_store_error(j, e, "extend"), e;
	j->reply = json_pack("{sIsIss}", "seq", (json_int_t)r->seq, "deadline", (json_int_t)at, "conversation",
			     r->conv);
	return 0;
}

int ops_w_fork(store_txn *t, struct job *j, struct wres *r)
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

/* After the commit: wake workers and waiters. */
void ops_after_send(struct job *j, struct wres *r)
{
	if (r->interrupted)
		workers_cancel(j->rq.conv); /* as cancel's: its worker is fenced; the next one answers both */
	if (r->appended && !r->paused)
		workers_wake(j->rq.conv);
	waiters_notify(j->rq.conv);
}

void ops_after_resolve(struct job *j, struct wres *r)
{
	if (!r->ended && !r->voted) /* a vote counted short of the need owes no work */
		workers_wake(r->conv);
	waiters_notify(r->conv);
}

/* The timer moves to the new deadline (an earlier one fires on time; a
 * later one is not fired early: the store decides what is due). */
void ops_after_extend(struct job *j, struct wres *r)
{
	ops_ctx()->rearm_expiry();
	waiters_notify(r->conv);
}

void ops_after_update(struct job *j, struct wres *r)
{
	if (j->rq.status == STORE_ENDED)
		workers_stop(j->rq.conv);
	if (r->resumed)
		workers_wake(j->rq.conv);
}

void ops_after_fork(struct job *j, struct wres *r)
{
	if (r->active)
		workers_wake(r->conv);
}

void ops_after_delete(struct job *j, struct wres *r)
{
	waiters_deleted(j->rq.conv);
}
