/*
 * approvals.c: a second pair of eyes (conv.h, "approvers = N"). A human
 * call whose tool asks for N approvals settles on the Nth by a different
 * name; each approval before it is an `approval_vote` event in the call's
 * conversation, written in the transaction that counts the ones before it,
 * so the log is the count's one record: a kill at any instant loses no
 * vote committed, and the call settles exactly once, on the Nth.
 */
#include "conv/conv.h"
#include "common/jsonmp.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct names_ctx {
	const char *id;
	json_t *names;
};

static int name_add(void *arg, const struct store_event *ev)
{
	struct names_ctx *c = arg;
	json_t *content;
	if (jsonmp_decode(ev->content.ptr, ev->content.len, &content) == -ENOMEM)
		return -ENOMEM;
	const char *of = json_string_value(json_object_get(content, "tool_call_id"));
	json_t *name = json_object_get(json_object_get(content, "by"), "name");
	int e = 0;
	if (of && !strcmp(of, c->id) && json_is_string(name))
		e = json_array_append(c->names, name) ? -ENOMEM : 0;
	json_decref(content);
	return e;
}

int conv_approvals(store_txn *t, const char *conv, const char *id, const char *name, const struct config *cfg,
		   int *need, json_t **names)
{
	const struct tool_cfg *tool;
	int e = conv_call_tool(t, conv, id, name, cfg, &tool);
	if (e)
		return e;
	*need = tool && tool->executor == EXEC_HUMAN && tool->approvers > 1 ? tool->approvers : 1;
	struct names_ctx c = { id, json_array() };
	struct store_range r = { 0, 0, 0, "approval_vote" };
	e = c.names ? store_events_stream(t, conv, &r, name_add, &c) : -ENOMEM;
	if (e) {
		json_decref(c.names);
		return e;
	}
	*names = c.names;
	return 0;
}

static int counted(const json_t *names, const char *name)
{
	size_t i;
	json_t *v;
	json_array_foreach (names, i, v)
		if (!strcmp(json_string_value(v), name))
			return 1;
	return 0;
}

static int vote_append(store_txn *t, const char *conv, const char *id, const char *name, const json_t *by,
		       const struct conv_vote_out *out, uint64_t *seq)
{
	json_t *content = json_pack("{s:s, s:s, s:O, s:i, s:i}", "tool_call_id", id, "name", name, "by", by,
				    "approvals", out->approvals, "approvers", out->need);
	struct jsonmp_buf b;
	int e = content ? conv_pack(&b, content) : -ENOMEM;
	json_decref(content);
	if (e)
		return e;
	struct store_event_in ev = { "approval_vote", { b.sb.data, b.sb.size }, NULL };
	e = store_event_append(t, conv, &ev, seq, NULL);
	jsonmp_buf_destroy(&b);
	return e;
}

int conv_approve(store_txn *t, const char *id, const json_t *result, const json_t *by, const struct config *cfg,
		 struct conv_vote_out *out, char *conv, uint64_t *seq, int *ended)
{
	struct store_tool_call tc;
	char name[STORE_ID_MAX + 1];
	*out = (struct conv_vote_out){ CONV_VOTE_SETTLED, 1, 1, NULL };
	*ended = 0;
	int e = store_tool_call_get(t, id, &tc);
	if (e == STORE_E_NOTFOUND || (!e && (tc.status != STORE_TC_PENDING || tc.executor != STORE_EXEC_HUMAN)))
		return conv_resolve(t, id, STORE_TC_RESOLVED, result, by, conv, seq, ended); /* as before: stale */
	if (e)
		return e;
	if (tc.conversation.len > STORE_ID_MAX)
		return STORE_E_CORRUPT;
	snprintf(conv, STORE_ID_MAX + 1, "%.*s", (int)tc.conversation.len, (const char *)tc.conversation.ptr);
	snprintf(name, sizeof name, "%.*s", (int)tc.name.len, (const char *)tc.name.ptr);
	if ((e = conv_approvals(t, conv, id, name, cfg, &out->need, &out->names)))
		return e;
	out->approvals = (int)json_array_size(out->names);
	const char *who = json_string_value(json_object_get(by, "name"));
	/* Every refusal before the first write. */
	if (out->need > 1 && !who)
		return out->vote = CONV_VOTE_NO_NAME, 0;
	if (out->need > 1 && counted(out->names, who))
		return out->vote = CONV_VOTE_TWICE, 0;
	/* A need lowered below the votes counted (the configuration changed):
	 * this approval settles the call. */
	if (out->need <= 1 && !out->approvals)
		return conv_resolve(t, id, STORE_TC_RESOLVED, result, by, conv, seq, ended);
	out->approvals++;
	if ((e = vote_append(t, conv, id, name, by, out, seq)))
		return e;
	if (out->approvals < out->need)
		return out->vote = CONV_VOTE_COUNTED, 0;
	return conv_resolve(t, id, STORE_TC_RESOLVED, result, by, conv, seq, ended);
}
