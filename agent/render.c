/* render.c: model input, the echo model (see render.h). */
#include "agent/render.h"
#include "agent/jsonb.h"
#include "common/jsonmp.h"
#include "conv/conv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each message is {seq, type, content}. The worker's working set holds
 * events of just that shape: those are shared with the request, not copied
 * (neither side changes them; a copy per event per turn was most of a
 * turn's work on a long log). */
static json_t *message(json_t *e)
{
	json_t *seq = json_object_get(e, "seq"), *type = json_object_get(e, "type"),
	       *content = json_object_get(e, "content");
	if (json_object_size(e) == 3 && seq && type && content)
		return json_incref(e);
	return json_pack("{sOsOsO}", "seq", seq, "type", type, "content", content);
}

/* NULL when out of memory: never a request with a message left out. */
static json_t *messages(const json_t *events)
{
	int oom = 0;
	json_t *a = jb_check(&oom, json_array());
	size_t i;
	json_t *e;
	json_array_foreach(events, i, e)
		jb_append(&oom, a, message(e));
	return jb_done(oom, a);
}

json_t *render_turn(const char *conv, uint64_t ctx_seq, const json_t *settings, const struct config *cfg,
		    const json_t *summary, const json_t *events)
{
	int oom = 0;
	json_t *tools = jb_check(&oom, json_array());
	json_t *names = json_object_get(settings, "tools");
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n) {
		const struct tool_cfg *tc = config_tool(cfg, json_string_value(n));
		if (!tc)
			continue; /* removed from the configuration since */
		jb_append(&oom, tools, json_pack("{s:s, s:s, s:s}", "name", tc->name, "description",
						 tc->description ? tc->description : "", "executor",
						 tc->executor == EXEC_HUMAN ? "human" : "server"));
	}
	if (oom) {
		json_decref(tools);
		return NULL; /* never a turn offered fewer tools than it has */
	}
	json_t *system = json_object_get(settings, "system");
	json_t *params = json_object_get(settings, "params");
	json_t *model = json_object_get(settings, "model");
	/* "o" steals a reference: borrowed values are increfed first. A
	 * NULL one (out of memory) fails the pack, which still releases the
	 * others. */
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

/* "/tool NAME {args}" -> a tool call request, or NULL: not one, or out of
 * memory (*oom set: never taken for plain text, nor args for text). */
static json_t *echo_tool_request(const char *text, int *oom)
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
	json_t *args = NULL;
	int le = *p ? jsonmp_loadb(p, strlen(p), JSON_DECODE_ANY, &args, NULL) : 0;
	if (!*p)
		args = json_object();
	if (le == -ENOMEM || (!*p && !args)) {
		*oom = 1;
		return NULL;
	}
	if (!json_is_object(args)) {
		json_decref(args);
		args = json_pack("{ss}", "text", p);
	}
	return jb_check(oom, json_pack("{ssso}", "name", name, "args", args));
}

json_t *echo_model(const json_t *request)
{
	const json_t *msgs = json_object_get(request, "messages");
	const char *task = json_string_value(json_object_get(request, "task"));
	if (task && !strcmp(task, "summarize"))
		return echo_summary(msgs);
	int oom = 0;
	json_t *calls = jb_check(&oom, json_array());
	char *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);
	if (!f) {
		json_decref(calls);
		return NULL;
	}
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
		if (conv_is_input(type) && json_integer_value(json_object_get(m, "seq")) > answered) {
			const char *text = json_string_value(json_object_get(c, "text"));
			json_t *tc = text ? echo_tool_request(text, &oom) : NULL;
			if (tc) {
				fprintf(f, "%scalling %s", n++ ? "\n" : "", json_string_value(json_object_get(tc, "name")));
				jb_append(&oom, calls, tc);
			} else {
				char *dump = text ? NULL : jsonmp_dumps(c, JSON_COMPACT, 0, NULL);
				if (!text && !dump)
					oom = 1;
				fprintf(f, "%secho: %s", n++ ? "\n" : "", text ? text : dump ? dump : "");
				free(dump);
			}
		} else if ((!strcmp(type, "tool_result") || !strcmp(type, "resolution")) && last_assistant != (size_t)-1 &&
			   i > last_assistant) {
			json_t *result = json_object_get(c, "result");
			char *res = jsonmp_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY, 0, NULL);
			if (result && !res)
				oom = 1;
			fprintf(f, "%s%s %s: %s", n++ ? "\n" : "", json_string_value(json_object_get(c, "tool_call_id")),
				json_string_value(json_object_get(c, "status")), res ? res : "null");
			free(res);
		}
	}
	/* A write that failed leaves the text short: ferror keeps it. */
	int bad = ferror(f);
	if (fclose(f) || bad || !out)
		oom = 1;
	if (oom) {
		json_decref(calls);
		free(out);
		return NULL;
	}
	json_t *r = json_pack("{ss#sos{sIsisf}}", "text", out, (int)outlen, "tool_calls", calls, "usage",
			      "input_tokens", (json_int_t)json_array_size(msgs), "output_tokens", n, "cost", 0.0);
	free(out);
	return r;
}
