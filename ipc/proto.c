/* proto.c: the control protocol's request codec (see proto.h). */
#include "ipc/proto.h"
#include "common/cron.h"
#include "common/jsonmp.h"
#include "common/id.h"
#include "common/text.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[OP_COUNT] = {
	"ping", "create", "get", "list", "update", "delete", "send", "events", "watch", "resolve",
	"tool_call", "tool_calls", "summary", "compact", "audit", "kill", "stop", "status", "metrics",
	"shutdown", "fork", "backup", "cancel", "resume", "runs", "nodes",
	"extend", "settle", "schedule", "schedules", "unschedule",
};

static const char *const err_codes[PERR_COUNT] = {
	"ok", "bad_request", "unknown_op", "not_found", "conflict", "stale", "too_large", "store_full",
	"unavailable", "internal", "busy", "unsupported",
};

const char *proto_op_name(int op)
{
	return op >= 0 && op < OP_COUNT ? op_names[op] : NULL;
}

const char *proto_err_code(int err)
{
	return err >= 0 && err < PERR_COUNT ? err_codes[err] : "internal";
}

struct pctx {
	json_t *o;
	char *msg;
	size_t msglen;
	const struct proto_names *names;
};

static int bad(struct pctx *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct pctx *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->msg, p->msglen, fmt, ap);
	va_end(ap);
	return PERR_BAD_REQUEST;
}

/* Out of memory: agentd's fault (internal), never the client's. */
static int oom(struct pctx *p)
{
	snprintf(p->msg, p->msglen, "out of memory");
	return PERR_INTERNAL;
}

/* Each getter: 0 when absent (and not required) or valid, else an error. */
static int get_id(struct pctx *p, const char *key, int required, const char **out)
{
	json_t *v = json_object_get(p->o, key);
	*out = NULL;
	if (!v)
		return required ? bad(p, "missing field '%s'", key) : 0;
	if (!json_is_string(v))
		return bad(p, "'%s' must be a string", key);
	if (!id_valid(json_string_value(v), json_string_length(v)))
		return bad(p, "'%s' must be 1-%d characters of [A-Za-z0-9._:-]", key, ID_MAX);
	*out = json_string_value(v);
	return 0;
}

/* resolve's by: a name for the audit trail, printable (no control
 * characters: it is shown in terminals and pages) and short. */
static int get_by(struct pctx *p, const char **out)
{
	json_t *v = json_object_get(p->o, "by");
	*out = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > PROTO_BY_MAX)
		return bad(p, "'by' must be a string of 1-%d bytes", PROTO_BY_MAX);
	for (const unsigned char *s = (const unsigned char *)json_string_value(v); *s; s++)
		if (*s < 0x20 || *s == 0x7f)
			return bad(p, "'by' must not hold control characters");
	*out = json_string_value(v);
	return 0;
}

/* resolve's args_digest: PROTO_DIGEST_LEN lowercase hex digits (the
 * digest of the arguments the person saw, docs/protocol.md). */
static int get_digest(struct pctx *p, const char **out)
{
	json_t *v = json_object_get(p->o, "args_digest");
	*out = NULL;
	if (!v)
		return 0;
	const char *s = json_is_string(v) ? json_string_value(v) : "";
	if (json_string_length(v) != PROTO_DIGEST_LEN || strspn(s, "0123456789abcdef") != PROTO_DIGEST_LEN)
		return bad(p, "'args_digest' must be %d lowercase hex digits (the SHA-256 of the arguments, "
			   "as tool_call shows it)", PROTO_DIGEST_LEN);
	*out = s;
	return 0;
}

/* An integer field from min to max; the message names the range accepted. */
static int get_uint_in(struct pctx *p, const char *key, uint64_t min, uint64_t max, int *has, uint64_t *out)
{
	json_t *v = json_object_get(p->o, key);
	if (has)
		*has = 0;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) < min ||
	    (uint64_t)json_integer_value(v) > max)
		return bad(p, "'%s' must be an integer from %llu to %llu", key, (unsigned long long)min,
			   (unsigned long long)max);
	*out = (uint64_t)json_integer_value(v);
	if (has)
		*has = 1;
	return 0;
}

static int get_uint(struct pctx *p, const char *key, uint64_t max, int *has, uint64_t *out)
{
	return get_uint_in(p, key, 0, max, has, out);
}

static int get_enum(struct pctx *p, const char *key, const char *const *names, int n, int *out)
{
	json_t *v = json_object_get(p->o, key);
	*out = -1;
	if (!v)
		return 0;
	for (int i = 0; json_is_string(v) && i < n; i++)
		if (names[i] && !strcmp(json_string_value(v), names[i])) {
			*out = i;
			return 0;
		}
	char list[256] = "";
	for (int i = 0; i < n; i++)
		if (names[i]) {
			strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
			strncat(list, names[i], sizeof list - strlen(list) - 1);
		}
	return bad(p, "'%s' must be one of: %s", key, list);
}

/* Only the fields an op knows are allowed: a typo is an error, not a no-op. */
static int only(struct pctx *p, const char *const *allowed)
{
	const char *k;
	json_t *v;
	json_object_foreach(p->o, k, v) {
		int ok = !strcmp(k, "op") || !strcmp(k, "id");
		for (size_t i = 0; !ok && allowed[i]; i++)
			ok = !strcmp(k, allowed[i]);
		if (!ok)
			return bad(p, "unknown field '%s' for op '%s'", k, json_string_value(json_object_get(p->o, "op")));
	}
	return 0;
}

/* settings.budget: {max_tokens, max_cost, max_turns}, each a limit or null
 * (none); every key optional, no other key. */
static int budget_check(struct pctx *p, json_t *b)
{
	const char *k;
	json_t *v;
	if (json_is_null(b))
		return 0;
	if (!json_is_object(b))
		return bad(p, "'settings.budget' must be an object (max_tokens, max_cost, max_turns) or null");
	json_object_foreach(b, k, v) {
		if (!strcmp(k, "max_tokens") || !strcmp(k, "max_turns")) {
			if (!json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0))
				return bad(p, "'settings.budget.%s' must be an integer from 0 to %lld, or null (no limit)",
					   k, (long long)INT64_MAX);
		} else if (!strcmp(k, "max_cost")) {
			if (!json_is_null(v) && (!json_is_number(v) || !(json_number_value(v) >= 0)))
				return bad(p, "'settings.budget.max_cost' must be a number of at least 0, or null (no limit)");
		} else {
			return bad(p, "unknown field 'settings.budget.%s' (max_tokens, max_cost, max_turns)", k);
		}
	}
	return 0;
}

const char *const proto_on_busy_names[PROTO_ON_BUSY_N] = { "enqueue", "reject", "interrupt", "steer" };

int proto_on_busy(const char *name)
{
	for (int i = 0; name && i < PROTO_ON_BUSY_N; i++)
		if (!strcmp(name, proto_on_busy_names[i]))
			return i;
	return -1;
}

static int settings_check(struct pctx *p, json_t *s, int full)
{
	const char *k;
	json_t *v;
	if (!json_is_object(s))
		return bad(p, "'settings' must be an object");
	if (!jsonmp_fits(s, 0))
		return bad(p, "'settings' nests more than %d levels of objects and arrays", JSONMP_MAX_DEPTH + 1);
	json_object_foreach(s, k, v) {
		if (!strcmp(k, "model")) {
			if (!json_is_string(v))
				return bad(p, "'settings.model' must be a string");
			if (!p->names->model_ok(p->names->arg, json_string_value(v)))
				return bad(p, "unknown model '%s' (not in the configuration)", json_string_value(v));
		} else if (!strcmp(k, "system")) {
			if (!json_is_string(v))
				return bad(p, "'settings.system' must be a string");
		} else if (!strcmp(k, "tools")) {
			size_t i;
			json_t *t;
			if (!json_is_array(v))
				return bad(p, "'settings.tools' must be an array of tool names");
			json_array_foreach(v, i, t) {
				if (!json_is_string(t))
					return bad(p, "'settings.tools' must be an array of tool names");
				if (!p->names->tool_ok(p->names->arg, json_string_value(t)))
					return bad(p, "unknown tool '%s' (not in the configuration)", json_string_value(t));
			}
		} else if (!strcmp(k, "params")) {
			if (!json_is_object(v))
				return bad(p, "'settings.params' must be an object");
		} else if (!strcmp(k, "max_tool_rounds")) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000)
				return bad(p, "'settings.max_tool_rounds' must be an integer from 1 to 1000000");
		} else if (!strcmp(k, "budget")) {
			int e = budget_check(p, v);
			if (e)
				return e;
		} else if (!strcmp(k, "on_busy")) {
			if (!json_is_string(v) || proto_on_busy(json_string_value(v)) < 0)
				return bad(p, "'settings.on_busy' must be one of: enqueue, reject, interrupt, steer");
		} else if (!strcmp(k, "forked_from")) {
			return bad(p, "'settings.forked_from' is agentd's (set by fork), not a client's");
		} else {
			return bad(p, "unknown settings field '%s' (model, system, tools, params, budget, max_tool_rounds, "
				   "on_busy)",
				   k);
		}
	}
	if (full && !json_object_get(s, "model"))
		return bad(p, "missing field 'settings.model'");
	return 0;
}

/* send's content: a string (stored as {"text": ...}) or an object; *out is
 * a new reference. `name` is how the message names the field. */
static int send_content(struct pctx *p, json_t *v, const char *name, json_t **out)
{
	*out = NULL;
	if (!v)
		return bad(p, "missing field '%s'", name);
	if (!json_is_string(v) && !json_is_object(v))
		return bad(p, "'%s' must be a string or an object", name);
	if (!jsonmp_fits(v, 0)) /* content is its event's whole record */
		return bad(p, "'%s' nests more than %d levels of objects and arrays", name, JSONMP_MAX_DEPTH + 1);
	if (json_is_string(v)) {
		/* json_pack("{sO}") would parse its format on every send. */
		*out = json_object();
		if (*out && json_object_set(*out, "text", v)) {
			json_decref(*out);
			*out = NULL;
		}
	} else {
		*out = json_incref(v);
	}
	return *out ? 0 : oom(p);
}

static int send_event_id(struct pctx *p, json_t *v, const char *name, const char **out)
{
	*out = NULL;
	if (v && (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > EVENT_ID_MAX))
		return bad(p, "'%s' must be a string of 1-%d bytes", name, EVENT_ID_MAX);
	*out = v ? json_string_value(v) : NULL;
	return 0;
}

static int count_bytes(void *data, const char *buf, size_t len)
{
	(void)buf;
	*(size_t *)data += len;
	return 0;
}

/* Each event of a batch, checked as a single send's content and event_id
 * are; `seen` maps each event_id to its index. */
static int send_batch_events(struct pctx *p, struct request *rq, json_t *a, json_t *seen, size_t *bytes)
{
	char name[48];
	json_t *ev;
	size_t i;
	int e;
	json_array_foreach(a, i, ev) {
		const char *k, *id;
		json_t *v, *content;
		if (!json_is_object(ev))
			return bad(p, "'events[%zu]' must be an object {\"content\": ..., \"event_id\"?: ...}", i);
		json_object_foreach(ev, k, v)
			if (strcmp(k, "content") && strcmp(k, "event_id"))
				return bad(p, "unknown field 'events[%zu].%.64s' (content, event_id)", i, k);
		snprintf(name, sizeof name, "events[%zu].content", i);
		if ((e = send_content(p, json_object_get(ev, "content"), name, &content)))
			return e;
		msgpack_packer pk;
		msgpack_packer_init(&pk, bytes, count_bytes);
		jsonmp_pack(&pk, content); /* it fits: checked above */
		json_t *o = json_pack("{so}", "content", content); /* content stolen */
		if (!o || json_array_append_new(rq->events, o))
			return oom(p);
		snprintf(name, sizeof name, "events[%zu].event_id", i);
		if ((e = send_event_id(p, json_object_get(ev, "event_id"), name, &id)))
			return e;
		if (!id)
			continue;
		json_t *first = json_object_get(seen, id);
		if (first)
			return bad(p, "'events[%zu].event_id' repeats 'events[%lld].event_id' ('%.64s')", i,
				   (long long)json_integer_value(first), id);
		if (json_object_set_new(o, "event_id", json_string(id)) ||
		    json_object_set_new(seen, id, json_integer((json_int_t)i)))
			return oom(p);
	}
	return 0;
}

/* metadata: an object of at most PROTO_META_MAX string values (or, in an
 * update's patch, null: delete the key); keys of 1-PROTO_META_KEY_MAX bytes,
 * values of at most PROTO_META_VAL_MAX, neither with a NUL byte. */
static int metadata_check(struct pctx *p, json_t *m, int nulls)
{
	const char *k;
	json_t *v;
	if (!json_is_object(m))
		return bad(p, "'metadata' must be an object of strings");
	if (json_object_size(m) > PROTO_META_MAX)
		return bad(p, "'metadata' has %zu keys (at most %d)", json_object_size(m), PROTO_META_MAX);
	json_object_foreach(m, k, v) {
		size_t kl = strlen(k);
		if (kl == 0 || kl > PROTO_META_KEY_MAX)
			return bad(p, "'metadata' keys must be 1-%d bytes", PROTO_META_KEY_MAX);
		if (json_is_null(v) && nulls)
			continue;
		if (!json_is_string(v))
			return bad(p, nulls ? "'metadata.%.64s' must be a string, or null to delete it"
					    : "'metadata.%.64s' must be a string", k);
		if (json_string_length(v) > PROTO_META_VAL_MAX)
			return bad(p, "'metadata.%.64s' is longer than %d bytes", k, PROTO_META_VAL_MAX);
		if (strlen(json_string_value(v)) != json_string_length(v))
			return bad(p, "'metadata.%.64s' must not contain a NUL character", k);
	}
	return 0;
}

/* send with `events`: the events, then the batch's limits; rq->events gets
 * them normalised. A repeated event_id inside one batch is refused: it can
 * only be a client's mistake, and refusing it keeps one seq per entry. */
static int send_batch(struct pctx *p, struct request *rq)
{
	json_t *a = json_object_get(p->o, "events"), *seen;
	size_t bytes = 0;
	int e;
	if (json_object_get(p->o, "content") || json_object_get(p->o, "event_id"))
		return bad(p, "'events' replaces 'content' and 'event_id': each event carries its own");
	if (!json_is_array(a))
		return bad(p, "'events' must be an array of objects {\"content\": ..., \"event_id\"?: ...}");
	if (json_array_size(a) == 0)
		return bad(p, "'events' is empty: a batch holds at least one event");
	if (p->names->batch_max_events && json_array_size(a) > p->names->batch_max_events)
		return bad(p, "'events' holds %zu events: at most %zu in one batch (batch_max_events)",
			   json_array_size(a), p->names->batch_max_events);
	if (!(rq->events = json_array()) || !(seen = json_object()))
		return oom(p);
	e = send_batch_events(p, rq, a, seen, &bytes);
	json_decref(seen);
	if (!e && p->names->batch_max_bytes && bytes > p->names->batch_max_bytes)
		return bad(p, "'events' content is %zu bytes as stored: at most %zu in one batch (batch_max_bytes)",
			   bytes, p->names->batch_max_bytes);
	return e;
}

/* ---- one parser per op ---------------------------------------------------
 * Each takes the request whose fields only() has let through (the op's row
 * in op_fields below) and checks and copies them into rq. */

static const char *const conv_status[] = { "idle", "active", "suspended", "ended", "paused" };
static const char *const tc_status[] = { "pending", "resolved", "errored", "expired", "cancelled", "unknown" };
static const char *const outcomes[] = { "retry", "done", "failed" };
static const char *const res_status[] = { NULL, "resolved", "errored" };

static int parse_none(struct pctx *p, struct request *rq)
{
	(void)p;
	(void)rq;
	return 0;
}

static int parse_conv(struct pctx *p, struct request *rq)
{
	return get_id(p, "conversation", 1, &rq->conv);
}

static int parse_create(struct pctx *p, struct request *rq)
{
	int e;
	if ((e = get_id(p, "conversation", 0, &rq->conv)))
		return e;
	if ((rq->metadata = json_object_get(p->o, "metadata")) && (e = metadata_check(p, rq->metadata, 0)))
		return e;
	if (!(rq->settings = json_object_get(p->o, "settings")))
		return bad(p, "missing field 'settings'");
	return settings_check(p, rq->settings, 1);
}

static int parse_list(struct pctx *p, struct request *rq)
{
	int e;
	uint64_t u = 0; /* GCC -O3 cannot see get_uint sets it before use */
	if ((e = get_enum(p, "status", conv_status, 5, &rq->status)) ||
	    (e = get_uint_in(p, "limit", 1, PROTO_LIST_MAX, NULL, &u)))
		return e;
	rq->limit = json_object_get(p->o, "limit") ? (size_t)u : 100;
	if ((rq->metadata = json_object_get(p->o, "metadata")) && (e = metadata_check(p, rq->metadata, 0)))
		return e;
	json_t *v = json_object_get(p->o, "model");
	if (v && (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 128 ||
		  strlen(json_string_value(v)) != json_string_length(v)))
		return bad(p, "'model' must be a model name (a string of 1-128 bytes)");
	rq->model = v ? json_string_value(v) : NULL;
	if ((e = get_uint(p, "updated_after", INT64_MAX, NULL, &u)))
		return e;
	rq->updated_after = json_object_get(p->o, "updated_after") ? (int64_t)u : 0;
	if ((e = get_uint_in(p, "updated_before", 1, INT64_MAX, NULL, &u)))
		return e;
	rq->updated_before = json_object_get(p->o, "updated_before") ? (int64_t)u : 0;
	return get_id(p, "after", 0, &rq->conv);
}

static int parse_update(struct pctx *p, struct request *rq)
{
	int e;
	if ((e = get_id(p, "conversation", 1, &rq->conv)))
		return e;
	if ((rq->metadata = json_object_get(p->o, "metadata")) && (e = metadata_check(p, rq->metadata, 1)))
		return e;
	if ((rq->settings = json_object_get(p->o, "settings")) && (e = settings_check(p, rq->settings, 0)))
		return e;
	json_t *v = json_object_get(p->o, "status");
	if (v && (!json_is_string(v) || strcmp(json_string_value(v), "ended")))
		return bad(p, "'status' can only be set to \"ended\"");
	rq->status = v ? PROTO_ENDED : -1;
	return 0;
}

static int parse_send(struct pctx *p, struct request *rq)
{
	int e;
	if ((e = get_id(p, "conversation", 1, &rq->conv)) ||
	    (e = get_uint(p, "expected_seq", INT64_MAX, &rq->has_expected_seq, &rq->expected_seq)))
		return e;
	if ((e = get_enum(p, "on_busy", proto_on_busy_names, PROTO_ON_BUSY_N, &rq->on_busy)))
		return e;
	if (json_object_get(p->o, "events"))
		return send_batch(p, rq);
	if ((e = send_content(p, json_object_get(p->o, "content"), "content", &rq->content)))
		return e;
	return send_event_id(p, json_object_get(p->o, "event_id"), "event_id", &rq->event_id);
}

/* events and watch: the fields they share (only() has refused the others). */
static int parse_events(struct pctx *p, struct request *rq)
{
	int e;
	uint64_t u = 0; /* GCC -O3 cannot see get_uint sets it before use */
	if ((e = get_id(p, "conversation", 1, &rq->conv)) ||
	    (e = get_uint(p, "after", INT64_MAX, &rq->has_after, &rq->after)) ||
	    (e = get_uint_in(p, "before", 1, INT64_MAX, NULL, &rq->before)) ||
	    (e = get_uint_in(p, "limit", 1, PROTO_EVENTS_MAX, NULL, &u)))
		return e;
	rq->limit = json_object_get(p->o, "limit") ? (size_t)u : 0;
	if ((e = get_uint(p, "wait_ms", PROTO_WAIT_MAX, NULL, &u)))
		return e;
	rq->wait_ms = json_object_get(p->o, "wait_ms") ? (int64_t)u : 0;
	json_t *v = json_object_get(p->o, "runs");
	if (v && !json_is_boolean(v))
		return bad(p, "'runs' must be true or false");
	rq->runs = json_is_true(v);
	if (json_object_get(p->o, "type")) {
		static const char *const types[] = { "user_msg", "assistant_msg", "tool_call", "tool_result",
			"suspension", "resolution", "error", "budget_exceeded", "expiry_warning", "turn_cancelled",
			"deadline_extended", "escalation", "steer", "tool_unknown", "tool_retry", "approval_vote",
			"scheduled" };
		int t;
		if ((e = get_enum(p, "type", types, (int)(sizeof types / sizeof *types), &t)))
			return e;
		rq->type = types[t];
	}
	return 0;
}

static int parse_resolve(struct pctx *p, struct request *rq)
{
	int e;
	if ((e = get_id(p, "tool_call_id", 1, &rq->tool_call_id)) ||
	    (e = get_enum(p, "status", res_status, 3, &rq->status)))
		return e;
	if (rq->status < 0)
		rq->status = PROTO_TC_RESOLVED;
	rq->result = json_object_get(p->o, "result");
	/* one level into its resolution event */
	if (rq->result && !jsonmp_fits(rq->result, 1))
		return bad(p, "'result' nests more than %d levels of objects and arrays", JSONMP_MAX_DEPTH);
	if ((e = get_digest(p, &rq->args_digest)))
		return e;
	return get_by(p, &rq->by);
}

/* extend: the call, and its new deadline as exactly one of expires_in_ms
 * (from now) and deadline (absolute). Whether it is in the future is the
 * handler's to say: the store's clock decides. */
static int parse_extend(struct pctx *p, struct request *rq)
{
	int e, has_in = 0, has_at = 0;
	uint64_t in = 0, at = 0;
	if ((e = get_id(p, "conversation", 1, &rq->conv)) || (e = get_id(p, "tool_call_id", 1, &rq->tool_call_id)) ||
	    (e = get_uint_in(p, "expires_in_ms", 1, PROTO_EXTEND_MAX_MS, &has_in, &in)) ||
	    (e = get_uint_in(p, "deadline", 1, INT64_MAX, &has_at, &at)))
		return e;
	if (has_in == has_at)
		return bad(p, has_in ? "give one of 'expires_in_ms' and 'deadline', not both"
				     : "missing field 'expires_in_ms' (or 'deadline': ms since the epoch)");
	rq->expires_in_ms = (int64_t)in;
	rq->deadline = (int64_t)at;
	return get_by(p, &rq->by);
}

/* settle: a decision on an unknown call (docs/protocol.md). A result is for
 * done and failed only. */
static int parse_settle(struct pctx *p, struct request *rq)
{
	int e;
	if ((e = get_id(p, "conversation", 1, &rq->conv)) || (e = get_id(p, "tool_call_id", 1, &rq->tool_call_id)) ||
	    (e = get_enum(p, "outcome", outcomes, 3, &rq->outcome)))
		return e;
	if (rq->outcome < 0)
		return bad(p, "missing 'outcome': retry, done or failed");
	rq->result = json_object_get(p->o, "result");
	if (rq->result && rq->outcome == PROTO_RETRY)
		return bad(p, "'result' is for outcome done or failed, not retry");
	if (rq->result && !jsonmp_fits(rq->result, 1))
		return bad(p, "'result' nests more than %d levels of objects and arrays", JSONMP_MAX_DEPTH);
	return get_by(p, &rq->by);
}

/* schedule: the conversation, its text, and when (docs/protocol.md):
 * at most one of at and after, and cron; with neither, cron is required
 * (its next minute is the first time). Whether at is in the future is the
 * handler's to say: the store's clock decides. */
static int parse_schedule(struct pctx *p, struct request *rq)
{
	int e, has_at = 0, has_in = 0;
	uint64_t at = 0, in = 0;
	if ((e = get_id(p, "conversation", 1, &rq->conv)) ||
	    (e = get_uint_in(p, "at", 1, INT64_MAX, &has_at, &at)) ||
	    (e = get_uint_in(p, "after", 0, PROTO_SCHEDULE_AFTER_MAX, &has_in, &in)))
		return e;
	json_t *v = json_object_get(p->o, "text");
	if (!v)
		return bad(p, "missing field 'text' (what the conversation is given when it fires)");
	if (!json_is_string(v) || json_string_length(v) == 0)
		return bad(p, "'text' must be a non-empty string");
	if (json_string_length(v) > PROTO_SCHEDULE_TEXT_MAX)
		return bad(p, "'text' is %zu bytes: at most %d", json_string_length(v), PROTO_SCHEDULE_TEXT_MAX);
	rq->text = json_string_value(v);
	rq->text_len = json_string_length(v);
	if ((v = json_object_get(p->o, "cron"))) {
		char why[128];
		struct cron c;
		if (!json_is_string(v) || json_string_length(v) > CRON_SPEC_MAX ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return bad(p, "'cron' must be a string of at most %d bytes", CRON_SPEC_MAX);
		if (cron_parse(json_string_value(v), &c, why, sizeof why))
			return bad(p, "'cron' is not a cron expression: %s", why);
		if (cron_next(&c, 0) < 0)
			return bad(p, "'cron' %s never matches a day that exists", json_string_value(v));
		rq->cron = json_string_value(v);
	}
	if (has_at && has_in)
		return bad(p, "give one of 'at' and 'after', not both");
	if (!has_at && !has_in && !rq->cron)
		return bad(p, "missing field 'at' (ms since the epoch), 'after' (ms from now) or 'cron'");
	rq->at_ms = (int64_t)at;
	rq->in_ms = has_in ? (int64_t)in : -1;
	return 0;
}

static int parse_schedules(struct pctx *p, struct request *rq)
{
	return get_id(p, "conversation", 0, &rq->conv);
}

static int parse_unschedule(struct pctx *p, struct request *rq)
{
	return get_id(p, "schedule", 1, &rq->schedule_id);
}

static int parse_tool_call(struct pctx *p, struct request *rq)
{
	return get_id(p, "tool_call_id", 1, &rq->tool_call_id);
}

static int parse_tool_calls(struct pctx *p, struct request *rq)
{
	int e;
	if ((e = get_id(p, "conversation", 1, &rq->conv)))
		return e;
	return get_enum(p, "status", tc_status, 6, &rq->status);
}

static int parse_fork(struct pctx *p, struct request *rq)
{
	int e;
	if ((e = get_id(p, "conversation", 1, &rq->conv)) || (e = get_id(p, "new_conversation", 0, &rq->new_conv)))
		return e;
	if (!json_object_get(p->o, "seq"))
		return bad(p, "missing field 'seq'");
	if ((e = get_uint_in(p, "seq", 1, INT64_MAX, NULL, &rq->seq)))
		return e;
	if ((rq->metadata = json_object_get(p->o, "metadata")) && (e = metadata_check(p, rq->metadata, 0)))
		return e;
	if ((rq->settings = json_object_get(p->o, "settings")) && (e = settings_check(p, rq->settings, 0)))
		return e;
	return 0;
}

static int parse_backup(struct pctx *p, struct request *rq)
{
	json_t *v = json_object_get(p->o, "path");
	if (!v)
		return bad(p, "missing field 'path'");
	if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > PROTO_PATH_MAX ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return bad(p, "'path' must be a directory path (a string of 1-%d bytes)", PROTO_PATH_MAX);
	if (json_string_value(v)[0] != '/')
		return bad(p, "'path' must be absolute (agentd's working directory is not the client's)");
	rq->path = json_string_value(v);
	return 0;
}

static int parse_runs(struct pctx *p, struct request *rq)
{
	int e;
	uint64_t u = 0; /* GCC -O3 cannot see get_uint sets it before use */
	if ((e = get_id(p, "conversation", 1, &rq->conv)) ||
	    (e = get_uint_in(p, "limit", 1, PROTO_LIST_MAX, NULL, &u)) ||
	    (e = get_uint_in(p, "before", 1, INT64_MAX, NULL, &rq->before)))
		return e;
	rq->limit = json_object_get(p->o, "limit") ? (size_t)u : 100;
	return 0;
}

static int parse_kill(struct pctx *p, struct request *rq)
{
	static const char *const sigs[] = { "KILL", "TERM" };
	int e, s;
	if ((e = get_id(p, "conversation", 1, &rq->conv)) || (e = get_enum(p, "signal", sigs, 2, &s)))
		return e;
	rq->signal = s == 1 ? SIGTERM : SIGKILL;
	return 0;
}

/* The codec's op table, one row per op: the fields it allows (besides op
 * and id; any other is refused, so that a typo is an error and not a
 * no-op) and the parser of their values. */
#define FIELDS(...) ((const char *const[]){ __VA_ARGS__, NULL })
static const struct {
	const char *const *fields;
	int (*parse)(struct pctx *p, struct request *rq);
} op_fields[OP_COUNT] = {
	[OP_PING] = { FIELDS(NULL), parse_none },
	[OP_STATUS] = { FIELDS(NULL), parse_none },
	[OP_METRICS] = { FIELDS(NULL), parse_none },
	[OP_SHUTDOWN] = { FIELDS(NULL), parse_none },
	[OP_NODES] = { FIELDS(NULL), parse_none },
	[OP_GET] = { FIELDS("conversation"), parse_conv },
	[OP_DELETE] = { FIELDS("conversation"), parse_conv },
	[OP_SUMMARY] = { FIELDS("conversation"), parse_conv },
	[OP_COMPACT] = { FIELDS("conversation"), parse_conv },
	[OP_AUDIT] = { FIELDS("conversation"), parse_conv },
	[OP_STOP] = { FIELDS("conversation"), parse_conv },
	[OP_CANCEL] = { FIELDS("conversation"), parse_conv },
	[OP_RESUME] = { FIELDS("conversation"), parse_conv },
	[OP_CREATE] = { FIELDS("conversation", "settings", "metadata"), parse_create },
	[OP_LIST] = { FIELDS("status", "limit", "after", "metadata", "model", "updated_after", "updated_before"),
		      parse_list },
	[OP_UPDATE] = { FIELDS("conversation", "settings", "status", "metadata"), parse_update },
	[OP_SEND] = { FIELDS("conversation", "content", "event_id", "expected_seq", "events", "on_busy"), parse_send },
	[OP_EVENTS] = { FIELDS("conversation", "after", "before", "limit", "type", "wait_ms"), parse_events },
	[OP_WATCH] = { FIELDS("conversation", "after", "runs"), parse_events },
	[OP_RESOLVE] = { FIELDS("tool_call_id", "status", "result", "by", "args_digest"), parse_resolve },
	[OP_EXTEND] = { FIELDS("conversation", "tool_call_id", "expires_in_ms", "deadline", "by"), parse_extend },
	[OP_SETTLE] = { FIELDS("conversation", "tool_call_id", "outcome", "result", "by"), parse_settle },
	[OP_TOOL_CALL] = { FIELDS("tool_call_id"), parse_tool_call },
	[OP_TOOL_CALLS] = { FIELDS("conversation", "status"), parse_tool_calls },
	[OP_FORK] = { FIELDS("conversation", "seq", "new_conversation", "settings", "metadata"), parse_fork },
	[OP_BACKUP] = { FIELDS("path"), parse_backup },
	[OP_RUNS] = { FIELDS("conversation", "limit", "before"), parse_runs },
	[OP_KILL] = { FIELDS("conversation", "signal"), parse_kill },
	[OP_SCHEDULE] = { FIELDS("conversation", "text", "at", "after", "cron"), parse_schedule },
	[OP_SCHEDULES] = { FIELDS("conversation"), parse_schedules },
	[OP_UNSCHEDULE] = { FIELDS("schedule"), parse_unschedule },
};
#undef FIELDS

static int parse_fields(struct pctx *p, struct request *rq)
{
	if (!op_fields[rq->op].parse)
		return PERR_INTERNAL; /* an op without its row */
	int e = only(p, op_fields[rq->op].fields);
	return e ? e : op_fields[rq->op].parse(p, rq);
}

int proto_parse(const char *line, size_t len, const struct proto_names *names, struct request *rq, char *msg,
		size_t msglen)
{
	json_error_t je;
	struct pctx p = { NULL, msg, msglen, names };
	memset(rq, 0, sizeof *rq);
	rq->status = -1;
	rq->on_busy = -1;
	rq->op = -1;
	msg[0] = 0;
	if (len == 0)
		return bad(&p, "empty line: expected a JSON object");
	/* Out of memory is not the client's fault, and never a request read
	 * with a byte left out (jsonmp.h). */
	if (jsonmp_loadb(line, len, JSON_REJECT_DUPLICATES, &rq->root, &je) == -ENOMEM) {
		snprintf(msg, msglen, "out of memory");
		return PERR_INTERNAL;
	}
	if (!rq->root)
		return bad(&p, "invalid JSON at column %d: %s", je.column, je.text);
	if (!json_is_object(rq->root))
		return bad(&p, "the request must be a JSON object");
	p.o = rq->root;
	rq->id = json_object_get(rq->root, "id");
	json_t *op = json_object_get(rq->root, "op");
	if (!op)
		return bad(&p, "missing field 'op'");
	if (!json_is_string(op))
		return bad(&p, "'op' must be a string");
	for (int i = 0; i < OP_COUNT && rq->op < 0; i++)
		if (!strcmp(json_string_value(op), op_names[i]))
			rq->op = i;
	if (rq->op < 0) {
		snprintf(msg, msglen, "unknown op '%.64s'", json_string_value(op));
		return PERR_UNKNOWN_OP;
	}
	return parse_fields(&p, rq);
}

void proto_request_free(struct request *rq)
{
	json_decref(rq->content);
	json_decref(rq->events);
	json_decref(rq->root);
	memset(rq, 0, sizeof *rq);
}

static char *dump_line(json_t *o, size_t *len)
{
	char *s = jsonmp_dumps(o, JSON_COMPACT, 1, len);
	json_decref(o);
	return s;
}

char *proto_error_line(json_t *id, int err, const char *msg, size_t *len)
{
	return proto_error_line_with(id, err, msg, NULL, len);
}

char *proto_error_line_with(json_t *id, int err, const char *msg, json_t *extra, size_t *len)
{
	json_t *o = json_object();
	/* extra first: id, ok, error and message set after it win. */
	if (!o || (extra && json_object_update(o, extra))) {
		json_decref(extra);
		json_decref(o);
		return NULL;
	}
	json_decref(extra);
	/* The message may quote bad input: keep it valid UTF-8 for the reply
	 * (ill-formed bytes become U+FFFD); NULL is out of memory alone. */
	json_t *m = json_text(msg, strlen(msg));
	/* A reply short of a field (out of memory) would be misread: none. */
	if ((id && json_object_set(o, "id", id)) || json_object_set_new(o, "ok", json_false()) ||
	    json_object_set_new(o, "error", json_string(proto_err_code(err)))) {
		json_decref(m);
		json_decref(o);
		return NULL;
	}
	if (json_object_set_new(o, "message", m)) { /* m is taken either way */
		json_decref(o);
		return NULL;
	}
	return dump_line(o, len);
}

int proto_oom_line(json_t *id, char *buf, size_t cap, char **line, size_t *len)
{
	static const char tail[] = "\"ok\":false,\"error\":\"internal\",\"message\":\"out of memory\"}\n";
	char *idtext = NULL;
	size_t idlen = 0;
	*line = NULL;
	*len = 0;
	if (id && !(idtext = jsonmp_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY, 0, &idlen)))
		return -ENOMEM;
	size_t n = 1 + (id ? sizeof "\"id\":" - 1 + idlen + 1 : 0) + sizeof tail - 1;
	char *p = n <= cap ? buf : malloc(n);
	if (!p) {
		free(idtext);
		return -ENOMEM;
	}
	size_t o = 0;
	p[o++] = '{';
	if (id) {
		memcpy(p + o, "\"id\":", 5);
		memcpy(p + o + 5, idtext, idlen);
		o += 5 + idlen;
		p[o++] = ',';
	}
	memcpy(p + o, tail, sizeof tail - 1);
	free(idtext);
	*line = p;
	*len = n;
	return 0;
}

char *proto_error_for_oom_line(const char *oom, size_t oom_len, int err, const char *msg, size_t *len)
{
	static const char tail[] = "\"ok\":false,\"error\":\"internal\",\"message\":\"out of memory\"}\n";
	if (oom_len < sizeof tail - 1 || memcmp(oom + oom_len - (sizeof tail - 1), tail, sizeof tail - 1))
		return NULL;
	size_t head = oom_len - (sizeof tail - 1); /* "{" and "id":ID, */
	json_t *o = json_pack("{s:b,s:s,s:s}", "ok", 0, "error", proto_err_code(err), "message", msg);
	size_t olen = 0;
	char *rest = o ? jsonmp_dumps(o, JSON_COMPACT, 0, &olen) : NULL;
	json_decref(o);
	char *p = rest ? malloc(head + olen + 1) : NULL;
	if (!p) {
		free(rest);
		return NULL;
	}
	memcpy(p, oom, head);
	memcpy(p + head, rest + 1, olen - 1); /* without its own '{' */
	p[head + olen - 1] = '\n';
	free(rest);
	*len = head + olen;
	return p;
}

char *proto_ok_line(json_t *id, json_t *obj, size_t *len)
{
	json_t *o = obj ? obj : json_object();
	if (!o)
		return NULL;
	if ((id && json_object_set(o, "id", id)) || json_object_set_new(o, "ok", json_true())) {
		json_decref(o);
		return NULL;
	}
	return dump_line(o, len);
}
