/* fork.c: a new conversation from a prefix of another's log (see conv.h). */
#include "conv/conv.h"
#include "common/id.h"
#include "common/jsonmp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Events are appended this many at a time (their decoded copies, read
 * before the first write: what a read returns is valid only until the next
 * write). */
#define FORK_CHUNK 256

struct fork_ctx {
	store_txn *t;
	const char *dst;
	json_t *evs;     /* every copied event {seq, type, content, event_id?} */
	json_t *ids;     /* source tool_call_id -> the fork's */
	json_t *calls;   /* the fork's tool_call_id -> {name, executor, args, prompt?, status?, result?} */
	json_t *order;   /* the fork's tool_call_ids, in log order */
	uint64_t marker; /* seq of the last assistant_msg or error */
	int err;
};

static int collect(void *arg, const struct store_event *ev)
{
	struct fork_ctx *f = arg;
	json_t *content;
	int de = jsonmp_decode(ev->content.ptr, ev->content.len, &content);
	if (de) {
		f->err = de == -ENOMEM ? -ENOMEM : STORE_E_CORRUPT; /* out of memory is no damaged record */
		return 1;
	}
	json_t *o = json_pack("{sIss#so}", "seq", (json_int_t)ev->seq, "type", (const char *)ev->type.ptr,
			      (int)ev->type.len, "content", content);
	/* Never a copy short of its event_id (a retried send would be written twice). */
	if (o && ev->event_id.len &&
	    json_object_set_new(o, "event_id", json_stringn(ev->event_id.ptr, ev->event_id.len))) {
		json_decref(o);
		o = NULL;
	}
	if (!o || json_array_append_new(f->evs, o)) {
		f->err = -ENOMEM;
		return 1;
	}
	return 0;
}

/* The fork's id for a source tool call id: new, since tool call ids are
 * unique across the store. */
static const char *map_id(struct fork_ctx *f, const char *src, int *e)
{
	json_t *m = json_object_get(f->ids, src);
	if (m)
		return json_string_value(m);
	char id[STORE_ID_MAX + 1];
	struct store_tool_call tc;
	do
		id_random(id, sizeof id, "tc-", 10);
	while (store_tool_call_get(f->t, id, &tc) == 0 || json_object_get(f->calls, id));
	if (json_object_set_new(f->ids, src, json_string(id))) {
		*e = -ENOMEM;
		return NULL;
	}
	return json_string_value(json_object_get(f->ids, src));
}

/* Rewrite one event's tool_call_id and note what it says of its call. */
static int note(struct fork_ctx *f, json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_t *c = json_object_get(ev, "content");
	uint64_t seq = (uint64_t)json_integer_value(json_object_get(ev, "seq"));
	int e = 0;
	if (!strcmp(type, "assistant_msg") || !strcmp(type, "error"))
		f->marker = seq;
	const char *src = json_is_object(c) ? json_string_value(json_object_get(c, "tool_call_id")) : NULL;
	if (!src)
		return 0;
	const char *id = map_id(f, src, &e);
	if (!id)
		return e;
	char own[STORE_ID_MAX + 1];
	strcpy(own, id);
	if (json_object_set_new(c, "tool_call_id", json_string(own)))
		return -ENOMEM;
	json_t *call = json_object_get(f->calls, own);
	if (!strcmp(type, "tool_call")) {
		if (call || !json_is_string(json_object_get(c, "name")))
			return STORE_E_CORRUPT;
		const char *ex = json_string_value(json_object_get(c, "executor"));
		call = json_pack("{sOsssO}", "name", json_object_get(c, "name"), "executor", ex ? ex : "server", "args",
				 json_object_get(c, "args") ? json_object_get(c, "args") : json_null());
		if (!call || json_object_set_new(f->calls, own, call) || json_array_append_new(f->order, json_string(own)))
			return -ENOMEM;
	} else if (!call) {
		return 0; /* a settlement of a call this prefix does not hold: copied as it is */
	} else if (!strcmp(type, "suspension")) {
		/* A value absent from the event is not set: the row is as before. */
		json_t *pr = json_object_get(c, "prompt");
		if (pr && json_object_set(call, "prompt", pr))
			return -ENOMEM;
	} else if ((!strcmp(type, "tool_result") || !strcmp(type, "resolution")) && !json_object_get(call, "status")) {
		/* A settled call's row short of its status would be copied pending. */
		json_t *st = json_object_get(c, "status"), *res = json_object_get(c, "result");
		if ((st && json_object_set(call, "status", st)) || (res && json_object_set(call, "result", res)))
			return -ENOMEM;
	}
	return 0;
}

static int append_chunk(struct fork_ctx *f, size_t from, size_t to)
{
	struct store_event_in in[FORK_CHUNK];
	struct jsonmp_buf b[FORK_CHUNK];
	uint64_t seqs[FORK_CHUNK];
	size_t n = 0;
	int e = 0;
	for (size_t i = from; i < to; i++, n++) {
		json_t *ev = json_array_get(f->evs, i);
		if ((e = note(f, ev)))
			break;
		if ((e = conv_pack(&b[n], json_object_get(ev, "content")))) {
			jsonmp_buf_destroy(&b[n]);
			break;
		}
		in[n] = (struct store_event_in){ json_string_value(json_object_get(ev, "type")),
						 { b[n].sb.data, b[n].sb.size },
						 json_string_value(json_object_get(ev, "event_id")) };
	}
	if (!e)
		e = store_events_append(f->t, f->dst, in, n, seqs, NULL);
	for (size_t i = 0; i < n; i++)
		jsonmp_buf_destroy(&b[i]);
	/* Past the first write an error must poison the group transaction:
	 * nothing of a half-made fork may commit. */
	return e == STORE_E_INVAL || e == STORE_E_NOTFOUND ? STORE_E_CORRUPT : e;
}

/* Read src's events (base, seq] into f->evs, checking they are all there. */
static int read_range(struct fork_ctx *f, const char *src, uint64_t base, uint64_t seq)
{
	struct store_range r = { base, seq + 1, 0, NULL };
	int e = store_events_stream(f->t, src, &r, collect, f);
	if (e)
		return f->err ? f->err : e;
	if (json_array_size(f->evs) != seq - base)
		return STORE_E_CORRUPT; /* the source's log has a gap */
	return 0;
}

/* Does the working set hold a turn boundary (what a carried summary must
 * end before)? */
static int has_marker(const json_t *evs)
{
	size_t i;
	json_t *ev;
	json_array_foreach(evs, i, ev) {
		const char *type = json_string_value(json_object_get(ev, "type"));
		if (type && (!strcmp(type, "assistant_msg") || !strcmp(type, "error")))
			return 1;
	}
	return 0;
}

static int pack_put(store_txn *t, const char *dst, const json_t *v, unsigned what)
{
	struct jsonmp_buf b;
	int e = conv_pack(&b, v);
	if (!e) {
		struct store_conv_patch p = { .set = what };
		if (what == STORE_SET_METADATA)
			p.metadata = (store_bytes){ b.sb.data, b.sb.size };
		else
			p.fsm_state = (store_bytes){ b.sb.data, b.sb.size };
		e = store_conv_put(t, dst, &p);
	}
	jsonmp_buf_destroy(&b);
	return e;
}

/* Each call of the prefix gets its row in the fork; one the prefix leaves
 * unsettled is settled cancelled {"forked_from": ...} by a resolution event. */
static int rows(struct fork_ctx *f, const struct conv_fork_in *in, struct conv_fork_out *out)
{
	size_t i;
	json_t *idv;
	json_array_foreach(f->order, i, idv) {
		const char *id = json_string_value(idv);
		json_t *call = json_object_get(f->calls, id);
		const char *ex = json_string_value(json_object_get(call, "executor"));
		int human = ex && !strcmp(ex, "human");
		json_t *prompt = json_object_get(call, "prompt");
		struct jsonmp_buf ab, pb, rb;
		int e = conv_pack(&ab, json_object_get(call, "args"));
		int pe = human && prompt ? conv_pack(&pb, prompt) : 1; /* 1: none; -ENOMEM: never a row short of it */
		if (!e && pe < 0)
			e = pe;
		struct store_tool_call_in tin = { id, json_string_value(json_object_get(call, "name")),
						  human ? STORE_EXEC_HUMAN : STORE_EXEC_SERVER, { ab.sb.data, ab.sb.size },
						  pe ? (store_bytes){ 0 } : (store_bytes){ pb.sb.data, pb.sb.size } };
		if (!e)
			e = store_tool_call_upsert(f->t, f->dst, &tin);
		jsonmp_buf_destroy(&ab);
		if (pe <= 0)
			jsonmp_buf_destroy(&pb);
		if (e)
			return e == STORE_E_INVAL || e == STORE_E_CONFLICT ? STORE_E_CORRUPT : e;
		json_t *st = json_object_get(call, "status");
		if (st) {
			int s = json_is_string(st) ? store_tc_status_parse(json_string_value(st), json_string_length(st)) : -1;
			if (s <= STORE_TC_PENDING)
				return STORE_E_CORRUPT;
			e = conv_pack(&rb, json_object_get(call, "result"));
			if (!e)
				e = store_tool_call_resolve(f->t, id, s, (store_bytes){ rb.sb.data, rb.sb.size }, NULL);
			jsonmp_buf_destroy(&rb);
		} else {
			json_t *res = json_pack("{s{sssI}}", "forked_from", "conversation", in->src, "seq",
						(json_int_t)in->seq);
			uint64_t seq = 0;
			e = res ? conv_settle(f->t, id, STORE_TC_CANCELLED, "resolution", res, NULL, &seq) : -ENOMEM;
			json_t *ev = NULL;
			if (!e)
				ev = json_pack("{sIsss{sssssO}}", "seq", (json_int_t)seq, "type", "resolution", "content",
					       "tool_call_id", id, "status", "cancelled", "result", res);
			json_decref(res);
			if (!e && (!ev || json_array_append_new(f->evs, ev)))
				e = -ENOMEM;
			out->cancelled++;
		}
		if (e)
			return e == STORE_E_INVAL || e == STORE_E_STALE ? STORE_E_CORRUPT : e;
	}
	return 0;
}

/* What the checks and reads settle before anything is written. */
struct fork_plan {
	json_t *settings;    /* the fork's settings, forked_from included */
	json_t *meta;        /* the fork's metadata */
	json_t *sum_content; /* the source's latest summary if it ends within 1..seq, else NULL */
	uint64_t sum_from, sum_to;
	uint64_t base; /* the fork's log begins at base + 1 */
};

static void fork_plan_free(struct fork_plan *p)
{
	json_decref(p->sum_content);
	json_decref(p->settings);
	json_decref(p->meta);
}

/* The refusals: src must exist and hold seq, dst must not exist. */
static int fork_check(store_txn *t, const struct conv_fork_in *in, struct conv_fork_out *out, struct store_conv *src)
{
	struct store_conv dst;
	int e;
	if ((e = store_conv_get(t, in->src, src)))
		return e;
	if ((e = store_event_latest_seq(t, in->src, &out->src_last)))
		return e;
	if (in->seq < 1 || in->seq > out->src_last)
		return STORE_E_INVAL;
	if ((e = store_conv_get(t, in->dst, &dst)) != STORE_E_NOTFOUND)
		return e ? e : STORE_E_CONFLICT;
	return 0;
}

/* The fork's settings (src's, overridden by the caller's, plus where it was
 * forked from) and metadata (the caller's, else src's). */
static int fork_settings_make(const struct conv_fork_in *in, const struct store_conv *src, struct fork_plan *p)
{
	int se = jsonmp_decode(src->settings.ptr, src->settings.len, &p->settings), me = 0;
	if (in->metadata)
		p->meta = json_incref((json_t *)in->metadata);
	else if (src->metadata.len)
		me = jsonmp_decode(src->metadata.ptr, src->metadata.len, &p->meta);
	else if (!(p->meta = json_object()))
		me = -ENOMEM;
	if (se == -ENOMEM || me == -ENOMEM)
		return -ENOMEM; /* not a damaged record */
	if (!json_is_object(p->settings) || !json_is_object(p->meta))
		return STORE_E_CORRUPT;
	/* Never a fork without the caller's settings (out of memory). */
	if (in->settings && json_object_update(p->settings, (json_t *)in->settings))
		return -ENOMEM;
	json_t *origin = json_pack("{sssI}", "conversation", in->src, "seq", (json_int_t)in->seq);
	if (!origin || json_object_set_new(p->settings, CONV_FORKED_FROM, origin))
		return -ENOMEM;
	return 0;
}

/* src's latest summary, kept only when it ends within the prefix. */
static int fork_summary_get(store_txn *t, const struct conv_fork_in *in, struct fork_plan *p)
{
	struct store_summary sum;
	int e = store_summary_latest(t, in->src, &sum);
	if (e == STORE_E_NOTFOUND || (e == 0 && sum.to_seq > in->seq))
		return 0;
	if (e)
		return e;
	p->sum_from = sum.from_seq;
	p->sum_to = sum.to_seq;
	int de = jsonmp_decode(sum.content.ptr, sum.content.len, &p->sum_content);
	if (de)
		return de == -ENOMEM ? -ENOMEM : STORE_E_CORRUPT;
	return 0;
}

/* The log to copy, read before anything is written. When the summary will
 * be carried (a turn boundary follows it within 1..seq), it stands in for
 * 1..to_seq: the fork's log begins at to_seq + 1 and only seq - to_seq
 * events are read and written. */
static int fork_log_read(struct fork_ctx *f, const struct conv_fork_in *in, struct conv_fork_out *out,
			 struct fork_plan *p)
{
	int e;
	p->base = 0;
	if ((e = store_event_first_seq(f->t, in->src, &out->src_first)))
		return e;
	if (p->sum_content && p->sum_to < in->seq) {
		if ((e = read_range(f, in->src, p->sum_to, in->seq)))
			return e;
		if (has_marker(f->evs))
			p->base = p->sum_to;
		else
			json_array_clear(f->evs);
	}
	if (p->base)
		return 0;
	/* The whole prefix: only a log that holds it can give it. */
	if (out->src_first > 1)
		return STORE_E_INVAL;
	return read_range(f, in->src, 0, in->seq);
}

/* The first writes: the conversation, its metadata, the copied events and
 * the tool call rows. */
static int fork_log_write(struct fork_ctx *f, const struct conv_fork_in *in, struct conv_fork_out *out,
			  const struct fork_plan *p)
{
	struct jsonmp_buf sb;
	int e;
	if ((e = conv_pack(&sb, p->settings)) == 0)
		e = store_conv_create_at(f->t, in->dst, (store_bytes){ sb.sb.data, sb.sb.size }, p->base + 1);
	jsonmp_buf_destroy(&sb);
	if (e)
		return e;
	if (json_object_size(p->meta) && (e = pack_put(f->t, in->dst, p->meta, STORE_SET_METADATA)))
		return e;
	for (size_t at = 0, n = json_array_size(f->evs); at < n; at += FORK_CHUNK)
		if ((e = append_chunk(f, at, n - at > FORK_CHUNK ? at + FORK_CHUNK : n)))
			return e;
	out->copied = in->seq - p->base;
	out->first_seq = p->base + 1;
	return rows(f, in, out);
}

/* A summary is carried only when the fork's log keeps the rule that made
 * it: it ends before the last turn boundary, so the revival decision over
 * "summary + the events after it" is the log's own. */
static int fork_summary_carry(struct fork_ctx *f, const struct fork_plan *p, struct conv_fork_out *out, int *has_sum)
{
	struct jsonmp_buf cb;
	int e;
	*has_sum = 0;
	if (!p->sum_content || p->sum_to >= f->marker)
		return 0;
	if ((e = conv_pack(&cb, p->sum_content)) == 0)
		e = store_summary_put(f->t, f->dst, p->sum_from, p->sum_to, (store_bytes){ cb.sb.data, cb.sb.size },
				      NULL);
	jsonmp_buf_destroy(&cb);
	if (e)
		return e;
	*has_sum = 1;
	out->summary_to = p->sum_to;
	return 0;
}

/* fsm_state and status from the conversation rules over the fork's working
 * set (the events after a carried summary): idle, or active when its log
 * owes a turn. */
static int fork_state_set(struct fork_ctx *f, uint64_t sum_to, int has_sum, struct conv_fork_out *out)
{
	json_t *work = json_array();
	size_t i;
	json_t *ev;
	int e = work ? 0 : -ENOMEM;
	/* The whole working set or none: a state decided over part of it
	 * would be wrong. */
	json_array_foreach(f->evs, i, ev)
		if (!e && (!has_sum || (uint64_t)json_integer_value(json_object_get(ev, "seq")) > sum_to) &&
		    json_array_append(work, ev))
			e = -ENOMEM;
	if (e)
		goto fail;
	struct tail tl;
	if ((e = tail_decide(work, has_sum ? sum_to : 0, &tl))) {
		e = e == -ENOMEM ? -ENOMEM : STORE_E_CORRUPT;
		goto fail;
	}
	int owed = tl.action != TAIL_IDLE;
	tail_free(&tl);
	if ((e = store_event_latest_seq(f->t, f->dst, &out->last_seq)))
		goto fail;
	out->status = owed ? STORE_ACTIVE : STORE_IDLE;
	if (owed) {
		struct store_conv_patch pa = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		e = store_conv_put(f->t, f->dst, &pa);
	} else {
		json_t *fsm = conv_fsm_state("idle", NULL, out->last_seq);
		e = fsm ? pack_put(f->t, f->dst, fsm, STORE_SET_FSM) : -ENOMEM;
		json_decref(fsm);
	}
fail:
	json_decref(work);
	return e;
}

int conv_fork(store_txn *t, const struct conv_fork_in *in, struct conv_fork_out *out)
{
	struct store_conv src;
	struct fork_ctx f = { t, in->dst, json_array(), json_object(), json_object(), json_array(), 0, 0 };
	struct fork_plan p = { 0 };
	int e, has_sum = 0;
	memset(out, 0, sizeof *out);
	if (!f.evs || !f.ids || !f.calls || !f.order) {
		e = -ENOMEM;
		goto out;
	}
	/* Checks and reads first: each refusal leaves t usable, nothing written. */
	if ((e = fork_check(t, in, out, &src)) || (e = fork_settings_make(in, &src, &p)) ||
	    (e = fork_summary_get(t, in, &p)) || (e = fork_log_read(&f, in, out, &p)))
		goto out;
	if (!(e = fork_log_write(&f, in, out, &p)) && !(e = fork_summary_carry(&f, &p, out, &has_sum)))
		e = fork_state_set(&f, p.sum_to, has_sum, out);
	/* Past the first write, a refusal code would let a half-made fork
	 * commit with the group: make it one that aborts the transaction. */
	if (e == STORE_E_NOTFOUND || e == STORE_E_INVAL || e == STORE_E_STALE || e == STORE_E_CONFLICT)
		e = STORE_E_CORRUPT;
out:
	fork_plan_free(&p);
	json_decref(f.evs);
	json_decref(f.ids);
	json_decref(f.calls);
	json_decref(f.order);
	return e;
}
