/* render.c: tail decisions, model input, the echo model (see render.h). */
#include "agent/render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *ev_type(const json_t *e)
{
	return json_string_value(json_object_get(e, "type"));
}

static uint64_t ev_seq(const json_t *e)
{
	return (uint64_t)json_integer_value(json_object_get(e, "seq"));
}

static const char *call_id(const json_t *content)
{
	return json_string_value(json_object_get(content, "tool_call_id"));
}

void tail_free(struct tail *t)
{
	json_decref(t->calls);
	json_decref(t->unsettled);
	json_decref(t->settled);
	memset(t, 0, sizeof *t);
}

int tail_decide(const json_t *events, uint64_t base_ctx, struct tail *t)
{
	size_t i, marker = (size_t)-1;
	json_t *e;
	memset(t, 0, sizeof *t);
	t->ctx_seq = base_ctx;
	t->calls = json_array();
	t->unsettled = json_array();
	t->settled = json_array();
	if (!json_is_array(events) || !t->calls || !t->unsettled || !t->settled)
		goto bad;
	/* The last turn boundary: an assistant_msg or an error. */
	json_array_foreach(events, i, e) {
		const char *ty = ev_type(e);
		if (!ty || !json_is_integer(json_object_get(e, "seq")) || !json_is_object(json_object_get(e, "content")))
			goto bad;
		if (!strcmp(ty, "assistant_msg") || !strcmp(ty, "error")) {
			json_t *cs = json_object_get(json_object_get(e, "content"), "context_seq");
			if (!json_is_integer(cs) || json_integer_value(cs) < 0)
				goto bad;
			marker = i;
			t->ctx_seq = (uint64_t)json_integer_value(cs);
			t->marker_seq = ev_seq(e);
		}
	}
	int turn_had_calls = 0;
	if (marker != (size_t)-1 && !strcmp(ev_type(json_array_get(events, marker)), "assistant_msg")) {
		/* Its tool calls, and what settled them, follow it. */
		for (i = marker + 1; i < json_array_size(events); i++) {
			json_t *ev = json_array_get(events, i);
			json_t *c = json_object_get(ev, "content");
			const char *ty = ev_type(ev);
			if (!strcmp(ty, "tool_call")) {
				if (!call_id(c) || !json_is_string(json_object_get(c, "name")))
					goto bad;
				json_array_append(t->calls, c);
			} else if (!strcmp(ty, "tool_result") || !strcmp(ty, "resolution")) {
				if (!call_id(c))
					goto bad;
				json_array_append(t->settled, c);
			}
		}
		/* By id, through a hash: comparing every call with every
		 * settlement made a reply of 1,000 calls take seconds per
		 * step (and a step per call). */
		json_t *done = json_object();
		if (!done)
			goto bad;
		json_array_foreach(t->settled, i, e)
			if (json_object_set_nocheck(done, call_id(e), json_true())) {
				json_decref(done); /* out of memory: never take a settled call for unsettled */
				goto bad;
			}
		json_array_foreach(t->calls, i, e)
			if (!json_object_get(done, call_id(e)))
				json_array_append(t->unsettled, e);
		json_decref(done);
		turn_had_calls = json_array_size(t->calls) > 0;
	}
	if (json_array_size(t->unsettled)) {
		t->action = TAIL_TOOLS;
		return 0;
	}
	/* Owed: the last turn's calls all settled (their results need an
	 * answer), or a user_msg came after the last turn's context. */
	if (turn_had_calls) {
		t->action = TAIL_TURN;
		return 0;
	}
	json_array_foreach(events, i, e)
		if (!strcmp(ev_type(e), "user_msg") && ev_seq(e) > t->ctx_seq)
			t->action = TAIL_TURN;
	return 0;
bad:
	tail_free(t);
	return -1;
}

static json_t *messages(const json_t *events)
{
	json_t *a = json_array();
	size_t i;
	json_t *e;
	json_array_foreach(events, i, e)
		json_array_append_new(a, json_pack("{sOsOsO}", "seq", json_object_get(e, "seq"), "type",
						   json_object_get(e, "type"), "content", json_object_get(e, "content")));
	return a;
}

json_t *render_turn(const char *conv, uint64_t ctx_seq, const json_t *settings, const struct config *cfg,
		    const json_t *summary, const json_t *events)
{
	json_t *tools = json_array();
	json_t *names = json_object_get(settings, "tools");
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n) {
		const struct tool_cfg *tc = config_tool(cfg, json_string_value(n));
		if (!tc)
			continue; /* removed from the configuration since */
		json_array_append_new(tools, json_pack("{s:s, s:s, s:s}", "name", tc->name, "description",
						       tc->description ? tc->description : "", "executor",
						       tc->executor == EXEC_HUMAN ? "human" : "server"));
	}
	json_t *system = json_object_get(settings, "system");
	json_t *params = json_object_get(settings, "params");
	json_t *model = json_object_get(settings, "model");
	/* "o" steals a reference: borrowed values are increfed first. */
	return json_pack("{s:s, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "task", "turn", "conversation", conv, "turn",
			 (json_int_t)ctx_seq, "system", system ? json_incref(system) : json_string(""), "summary",
			 summary ? json_incref((json_t *)summary) : json_null(), "messages", messages(events), "tools",
			 tools, "model", model ? json_incref(model) : json_null(), "params",
			 params ? json_incref(params) : json_object());
}

json_t *render_summarize(const char *conv, const json_t *settings, const json_t *summary, const json_t *events)
{
	json_t *params = json_object_get(settings, "params");
	return json_pack("{s:s, s:s, s:o, s:o, s:o, s:o}", "task", "summarize", "conversation", conv, "summary",
			 summary ? json_incref((json_t *)summary) : json_null(), "messages", messages(events), "tools",
			 json_array(), "params", params ? json_incref(params) : json_object());
}

/* ---- echo ------------------------------------------------------------ */

static json_t *echo_summary(const json_t *msgs)
{
	char buf[1024];
	size_t len = 0, i;
	json_t *m;
	buf[0] = 0;
	json_array_foreach(msgs, i, m) {
		const char *text = json_string_value(json_object_get(json_object_get(m, "content"), "text"));
		if (text && len < sizeof buf - 1)
			len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? " | " : "", text);
	}
	if (len >= sizeof buf)
		len = sizeof buf - 1;
	char head[64];
	snprintf(head, sizeof head, "summary of %zu events: ", json_array_size(msgs));
	json_t *text = json_pack("s++", head, "", buf);
	return json_pack("{sos[]s{sisisf}}", "text", text, "tool_calls", "usage", "input_tokens", 0,
			 "output_tokens", 0, "cost", 0.0);
}

/* "/tool NAME {args}" -> a tool call request, or NULL. */
static json_t *echo_tool_request(const char *text)
{
	if (strncmp(text, "/tool ", 6))
		return NULL;
	const char *p = text + 6;
	while (*p == ' ')
		p++;
	size_t n = strcspn(p, " ");
	if (n == 0 || n > 128)
		return NULL;
	char name[129];
	memcpy(name, p, n);
	name[n] = 0;
	p += n;
	while (*p == ' ')
		p++;
	json_t *args = *p ? json_loads(p, JSON_DECODE_ANY, NULL) : json_object();
	if (!json_is_object(args)) {
		json_decref(args);
		args = json_pack("{ss}", "text", p);
	}
	return json_pack("{ssso}", "name", name, "args", args);
}

json_t *echo_model(const json_t *request)
{
	const json_t *msgs = json_object_get(request, "messages");
	if (!strcmp(json_string_value(json_object_get(request, "task")), "summarize"))
		return echo_summary(msgs);
	json_t *calls = json_array();
	char *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);
	size_t i, last_assistant = (size_t)-1;
	json_int_t answered = 0;
	json_t *m;
	/* Messages queued while the last turn ran precede its assistant_msg in
	 * the log but are after its context_seq: those are the ones to answer
	 * (by position alone they were never echoed). */
	json_array_foreach(msgs, i, m)
		if (!strcmp(json_string_value(json_object_get(m, "type")), "assistant_msg")) {
			last_assistant = i;
			answered = json_integer_value(json_object_get(json_object_get(m, "content"), "context_seq"));
		}
	int n = 0;
	json_array_foreach(msgs, i, m) {
		const char *type = json_string_value(json_object_get(m, "type"));
		json_t *c = json_object_get(m, "content");
		if (!strcmp(type, "user_msg") && json_integer_value(json_object_get(m, "seq")) > answered) {
			const char *text = json_string_value(json_object_get(c, "text"));
			json_t *tc = text ? echo_tool_request(text) : NULL;
			if (tc) {
				json_array_append_new(calls, tc);
				fprintf(f, "%scalling %s", n++ ? "\n" : "", json_string_value(json_object_get(tc, "name")));
			} else {
				char *dump = text ? NULL : json_dumps(c, JSON_COMPACT);
				fprintf(f, "%secho: %s", n++ ? "\n" : "", text ? text : dump);
				free(dump);
			}
		} else if ((!strcmp(type, "tool_result") || !strcmp(type, "resolution")) && last_assistant != (size_t)-1 &&
			   i > last_assistant) {
			char *res = json_dumps(json_object_get(c, "result"), JSON_COMPACT | JSON_ENCODE_ANY);
			fprintf(f, "%s%s %s: %s", n++ ? "\n" : "", json_string_value(json_object_get(c, "tool_call_id")),
				json_string_value(json_object_get(c, "status")), res ? res : "null");
			free(res);
		}
	}
	fclose(f);
	json_t *r = json_pack("{ss#sos{sIsisf}}", "text", out ? out : "", (int)outlen, "tool_calls", calls, "usage",
			      "input_tokens", (json_int_t)json_array_size(msgs), "output_tokens", n, "cost", 0.0);
	free(out);
	return r;
}
