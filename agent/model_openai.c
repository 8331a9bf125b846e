/* model_openai.c: kind openai, the chat completions API (POST
 * {base_url}/chat/completions, streamed); see model.h. */
#include "agent/model.h"
#include "agent/jsonb.h"
#include "common/jsonmp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys the client owns: params never override them. */
static int owned(const char *k)
{
	static const char *const keys[] = { "model", "messages", "stream", "stream_options", "tools", NULL };
	for (const char *const *p = keys; *p; p++)
		if (!strcmp(k, *p))
			return 1;
	return 0;
}

/* The configured params, then the conversation's (settings.params).
 * -ENOMEM: never a body with a param left out. */
int model_merge_params(json_t *body, const struct model_cfg *mc, const json_t *req, int (*is_owned)(const char *))
{
	json_t *cfg = NULL;
	if (mc->params && jsonmp_loadb(mc->params, strlen(mc->params), 0, &cfg, NULL))
		return -ENOMEM; /* checked when the configuration was loaded */
	const json_t *srcs[2] = { cfg, json_object_get(req, "params") };
	int e = 0;
	for (int i = 0; i < 2 && !e; i++) {
		const char *k;
		json_t *v;
		if (!json_is_object(srcs[i]))
			continue;
		json_object_foreach((json_t *)srcs[i], k, v)
			if (!is_owned(k) && json_object_set(body, k, v))
				e = -ENOMEM;
	}
	json_decref(cfg);
	return e;
}

/* One transcript item as text, for a summarize request. */
static void summary_item(FILE *f, const json_t *it, int *oom)
{
	const char *role = json_string_value(json_object_get(it, "role"));
	if (!strcmp(role, "tool")) {
		char *r = model_result_text(it);
		if (!r)
			*oom = 1;
		fprintf(f, "\n[result of %s (%s): %s]", json_string_value(json_object_get(it, "name")),
			json_string_value(json_object_get(it, "id")), r ? r : "null");
		free(r);
		return;
	}
	fprintf(f, "\n%s: %s", role, json_string_value(json_object_get(it, "text")));
	size_t j;
	json_t *c;
	json_array_foreach(json_object_get(it, "calls"), j, c) {
		json_t *args = json_object_get(c, "args");
		char *a = args ? jsonmp_dumps(args, JSON_COMPACT, 0, NULL) : NULL;
		if (args && !a)
			*oom = 1;
		fprintf(f, "\n[call %s (%s) with %s]", json_string_value(json_object_get(c, "name")),
			json_string_value(json_object_get(c, "id")), a ? a : "{}");
		free(a);
	}
}

/* A summarize request: the events as one text to summarise. NULL when out
 * of memory. */
json_t *model_summary_text(const json_t *transcript)
{
	char *buf = NULL;
	size_t len = 0;
	int oom = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fputs("The conversation so far:\n", f);
	size_t i;
	json_t *it;
	json_array_foreach(transcript, i, it)
		summary_item(f, it, &oom);
	fprintf(f, "\n\n%s", model_summarize_prompt);
	/* A write that failed leaves the text short: ferror keeps it. */
	int bad = ferror(f);
	json_t *s = fclose(f) || bad || oom || !buf ? NULL : json_stringn(buf, len);
	free(buf);
	return s;
}

static int summarize(const json_t *req)
{
	const char *t = json_string_value(json_object_get(req, "task"));
	return t && !strcmp(t, "summarize");
}

static json_t *assistant_message(const json_t *it, int *oom)
{
	json_t *calls = json_object_get(it, "calls");
	const char *text = json_string_value(json_object_get(it, "text"));
	json_t *m = jb_check(oom, json_pack("{ss}", "role", "assistant"));
	/* content may be null only with tool_calls */
	jb_set(oom, m, "content", *text || !json_array_size(calls) ? json_string(text) : json_null());
	if (!json_array_size(calls))
		return m;
	json_t *tc = jb_check(oom, json_array());
	size_t j;
	json_t *c;
	json_array_foreach(calls, j, c) {
		json_t *args = json_object_get(c, "args");
		char *a = args ? jsonmp_dumps(args, JSON_COMPACT, 0, NULL) : NULL;
		jb_append(oom, tc, a || !args ? json_pack("{sOsss{sOss}}", "id", json_object_get(c, "id"), "type",
							  "function", "function", "name", json_object_get(c, "name"),
							  "arguments", a ? a : "{}")
					      : NULL);
		free(a);
	}
	jb_set(oom, m, "tool_calls", tc);
	return m;
}

static json_t *messages(const json_t *req, const json_t *tr, int *oom)
{
	json_t *msgs = jb_check(oom, json_array());
	char *sys = model_system_text(req);
	if (!sys)
		*oom = 1;
	else if (*sys)
		jb_append(oom, msgs, json_pack("{ssss}", "role", "system", "content", sys));
	free(sys);
	if (summarize(req)) {
		jb_append(oom, msgs, json_pack("{ssso}", "role", "user", "content", model_summary_text(tr)));
		return msgs;
	}
	size_t i;
	json_t *it;
	json_array_foreach(tr, i, it) {
		const char *role = json_string_value(json_object_get(it, "role"));
		if (!strcmp(role, "user")) {
			jb_append(oom, msgs, json_pack("{sssO}", "role", "user", "content", json_object_get(it, "text")));
		} else if (!strcmp(role, "assistant")) {
			jb_append(oom, msgs, assistant_message(it, oom));
		} else {
			char *r = model_result_text(it);
			jb_append(oom, msgs, r ? json_pack("{sssOss}", "role", "tool", "tool_call_id",
							 json_object_get(it, "id"), "content", r)
					       : NULL);
			free(r);
		}
	}
	return msgs;
}

/* NULL when out of memory: never a body with a message, a tool or a param
 * left out. */
static json_t *body(const struct model_cfg *mc, const json_t *req)
{
	int oom = 0;
	json_t *tr = model_transcript(req);
	if (!tr)
		return NULL;
	json_t *msgs = messages(req, tr, &oom);
	json_decref(tr);
	if (oom) {
		json_decref(msgs);
		return NULL;
	}
	json_t *b = jb_check(&oom, json_pack("{sssos{sb}sb}", "model", mc->model, "messages", msgs, "stream_options",
					     "include_usage", 1, "stream", 1));
	if (mc->max_tokens)
		jb_set(&oom, b, "max_tokens", json_integer(mc->max_tokens));
	json_t *tools = json_object_get(req, "tools");
	if (!summarize(req) && json_array_size(tools))
		jb_set(&oom, b, "tools", model_tools(tools, "parameters", "function"));
	if (!oom && model_merge_params(b, mc, req, owned))
		oom = 1;
	return jb_done(oom, b);
}

static size_t headers(const char *key, char out[][600])
{
	if (!key)
		return 0; /* local servers (llama.cpp, Ollama, vLLM) often need none */
	snprintf(out[0], sizeof out[0], "Authorization: Bearer %s", key);
	return 1;
}

/* One case per kind of streamed chunk: the switch is the stream's grammar,
 * read in one place. */
static int event(struct stream *s, const char *type, const char *data, size_t len)
{
	(void)type;
	if (len == 6 && !memcmp(data, "[DONE]", 6)) {
		s->done = 1;
		return 0;
	}
	json_t *j;
	if (jsonmp_loadb(data, len, 0, &j, NULL) == -ENOMEM) {
		snprintf(s->err, sizeof s->err, "out of memory reading the stream");
		return -ENOMEM;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(s->err, sizeof s->err, "the stream held an event that is not a JSON object: %.80s", data);
		s->failed = 1;
		s->transient = 1;
		return 0;
	}
	json_t *err = json_object_get(j, "error");
	if (err) {
		const char *m = json_string_value(json_object_get(err, "message"));
		snprintf(s->err, sizeof s->err, "error in the stream: %s", m ? m : "(no message)");
		s->failed = 1;
		s->transient = 1;
		json_decref(j);
		return 0;
	}
	json_t *u = json_object_get(j, "usage");
	if (json_is_object(u)) {
		s->in_tok = (uint64_t)json_integer_value(json_object_get(u, "prompt_tokens"));
		s->out_tok = (uint64_t)json_integer_value(json_object_get(u, "completion_tokens"));
	}
	size_t i;
	json_t *ch;
	int rc = 0;
	json_array_foreach(json_object_get(j, "choices"), i, ch) {
		json_t *ix = json_object_get(ch, "index");
		if (json_is_integer(ix) && json_integer_value(ix) != 0)
			continue; /* params asked for several choices: the first is the answer */
		json_t *d = json_object_get(ch, "delta");
		const char *text = json_string_value(json_object_get(d, "content"));
		if (text && (rc = stream_text(s, text, strlen(text))))
			break;
		size_t k;
		json_t *tc;
		json_array_foreach(json_object_get(d, "tool_calls"), k, tc) {
			json_t *tix = json_object_get(tc, "index");
			struct stream_call *c = stream_call_at(s, json_is_integer(tix) ? (int)json_integer_value(tix) : (int)k);
			if (!c) {
				rc = -1;
				break;
			}
			const char *id = json_string_value(json_object_get(tc, "id"));
			json_t *fn = json_object_get(tc, "function");
			const char *name = json_string_value(json_object_get(fn, "name"));
			const char *args = json_string_value(json_object_get(fn, "arguments"));
			if (id && !c->id && !(c->id = strdup(id)))
				rc = -1;
			size_t nl = c->name ? strlen(c->name) : 0;
			if (name && stream_append(&c->name, &nl, name, strlen(name)))
				rc = -1;
			if (args && stream_append(&c->args, &c->alen, args, strlen(args)))
				rc = -1;
		}
		if (rc)
			break;
	}
	json_decref(j);
	if (rc)
		snprintf(s->err, sizeof s->err, "out of memory reading the stream");
	return rc;
}

const struct model_api model_api_openai = { "/chat/completions", body, headers, event };
