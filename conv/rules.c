/* rules.c: the conversation rules that write, and records as JSON (see conv.h). */
#include "conv/conv.h"
#include "common/jsonmp.h"
#include "common/text.h"

#include <errno.h>
#include <string.h>

int conv_pack(struct jsonmp_buf *b, const json_t *v)
{
	jsonmp_buf_init(b);
	return jsonmp_pack(&b->pk, v) ? -ENOMEM : 0;
}

json_t *conv_event_json(const struct store_event *ev)
{
	json_t *content = jsonmp_unpack(ev->content.ptr, ev->content.len);
	json_t *o = json_pack("{sIss#sosI}", "seq", (json_int_t)ev->seq, "type", (const char *)ev->type.ptr,
			      (int)ev->type.len, "content", content ? content : json_null(), "inserted_at",
			      (json_int_t)ev->inserted_at);
	if (o && ev->event_id.len)
		json_object_set_new(o, "event_id", json_stringn(ev->event_id.ptr, ev->event_id.len));
	return o;
}

json_t *conv_fsm_state(const char *state, json_t *pending, uint64_t last_seq)
{
	return json_pack("{sssosI}", "state", state, "pending", pending ? pending : json_object(), "last_seq",
			 (json_int_t)last_seq);
}

/* Append an event of type with content (borrowed) to conv. */
static int append(store_txn *t, const char *conv, const char *type, const json_t *content, uint64_t *seq)
{
	struct jsonmp_buf b;
	uint64_t s = 0;
	int e = conv_pack(&b, content);
	if (!e) {
		struct store_event_in ev = { type, { b.sb.data, b.sb.size }, NULL };
		e = store_event_append(t, conv, &ev, &s, NULL);
	}
	jsonmp_buf_destroy(&b);
	if (!e && seq)
		*seq = s;
	return e;
}

int conv_settle(store_txn *t, const char *id, int status, const char *event_type, const json_t *result,
		char *conv, uint64_t *seq)
{
	return conv_settle_by(t, id, status, event_type, result, NULL, conv, seq);
}

int conv_settle_by(store_txn *t, const char *id, int status, const char *event_type, const json_t *result,
		   const json_t *by, char *conv, uint64_t *seq)
{
	char own[STORE_ID_MAX + 1];
	const json_t *res = result ? result : json_null();
	struct jsonmp_buf rb;
	if (!conv)
		conv = own;
	/* Checked before anything is written: a failure past the first write
	 * would leave the settlement half done in a transaction that goes on
	 * (a group commit). The result sits one level into its event. */
	if (!jsonmp_fits(res, 1))
		return STORE_E_INVAL;
	int e = conv_pack(&rb, res);
	if (!e)
		e = store_tool_call_resolve(t, id, status, (store_bytes){ rb.sb.data, rb.sb.size }, conv);
	jsonmp_buf_destroy(&rb);
	if (e)
		return e;
	json_t *content = json_pack("{sssssO}", "tool_call_id", id, "status", store_tc_status_name(status),
				    "result", (json_t *)res);
	if (!content || (by && json_object_set(content, "by", (json_t *)by))) {
		json_decref(content);
		return -ENOMEM;
	}
	e = append(t, conv, event_type, content, seq);
	json_decref(content);
	return e;
}

static int count_human(void *arg, const struct store_tool_call *tc)
{
	/* Only people suspend a conversation. A mixed turn's server call still
	 * pending is its worker's work: once the people answered, the
	 * conversation must be active, or a worker that dies running that call
	 * would never be restarted. */
	if (tc->executor == STORE_EXEC_HUMAN)
		(*(int *)arg)++;
	return 0;
}

int conv_after_resolution(store_txn *t, const char *conv, int *ended)
{
	int pending = 0, e;
	struct store_conv c;
	if ((e = store_tool_calls_list(t, conv, 1u << STORE_TC_PENDING, count_human, &pending)))
		return e;
	if ((e = store_conv_get(t, conv, &c)))
		return e;
	*ended = c.status == STORE_ENDED;
	if (pending == 0 && c.status != STORE_ENDED && c.status != STORE_ACTIVE) {
		struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ACTIVE };
		e = store_conv_put(t, conv, &p);
	}
	return e;
}

int conv_expiry_warn(store_txn *t, const char *id, char *conv, uint64_t *seq)
{
	struct store_tool_call tc;
	int e = store_tool_call_get(t, id, &tc);
	if (e == STORE_E_NOTFOUND || (!e && tc.status != STORE_TC_PENDING))
		return (e = store_warning_drop(t, id)) ? e : STORE_E_STALE;
	if (e)
		return e;
	if (tc.conversation.len > STORE_ID_MAX)
		return STORE_E_CORRUPT;
	memcpy(conv, tc.conversation.ptr, tc.conversation.len);
	conv[tc.conversation.len] = 0;
	int64_t left = tc.deadline > 0 ? tc.deadline - store_txn_now(t) : 0;
	json_t *content = json_pack("{s:s, s:s#, s:I, s:I}", "tool_call_id", id, "name", (const char *)tc.name.ptr,
				    (int)tc.name.len, "deadline", (json_int_t)tc.deadline, "expires_in_ms",
				    (json_int_t)(left > 0 ? left : 0));
	if (!content)
		return -ENOMEM;
	e = append(t, conv, "expiry_warning", content, seq);
	json_decref(content);
	return e ? e : store_warning_drop(t, id);
}

int conv_error_append(store_txn *t, const char *conv, const char *msg, size_t len, int attempts,
		      uint64_t ctx_seq, uint64_t *seq)
{
	json_t *content = json_pack("{sosisI}", "message", json_text(msg, len), "attempts", attempts, "context_seq",
				    (json_int_t)ctx_seq);
	if (!content)
		return -ENOMEM;
	int e = append(t, conv, "error", content, seq);
	json_decref(content);
	return e;
}
