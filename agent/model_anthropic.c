/* model_anthropic.c: kind anthropic, the Messages API (POST
 * {base_url}/messages, streamed); see model.h. */
#include "agent/model.h"
#include "agent/jsonb.h"
#include "common/jsonmp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int owned(const char *k)
{
	static const char *const keys[] = { "model", "messages", "stream", "system", "tools", NULL };
	for (const char *const *p = keys; *p; p++)
		if (!strcmp(k, *p))
			return 1;
	return 0;
}

/* Append blocks as role's: merged into the last message when it has the
 * same role (the API wants user and assistant to alternate). */
static void add(json_t *msgs, const char *role, json_t *blocks, int *oom)
{
	json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
	if (!jb_check(oom, blocks) || !json_array_size(blocks)) {
		json_decref(blocks);
		return;
	}
	if (last && !strcmp(json_string_value(json_object_get(last, "role")), role)) {
		if (json_array_extend(json_object_get(last, "content"), blocks))
			*oom = 1;
		json_decref(blocks);
		return;
	}
	jb_append(oom, msgs, json_pack("{ssso}", "role", role, "content", blocks));
}

static json_t *text_blocks(const char *text, int *oom)
{
	json_t *a = jb_check(oom, json_array());
	if (text && *text) /* the API refuses empty text blocks */
		jb_append(oom, a, json_pack("{ssss}", "type", "text", "text", text));
	return a;
}

static json_t *result_block(const json_t *it)
{
	const char *st = json_string_value(json_object_get(it, "status"));
	char *r = model_result_text(it);
	json_t *blk = r ? json_pack("{sssOss}", "type", "tool_result", "tool_use_id", json_object_get(it, "id"),
				    "content", r)
			: NULL;
	free(r);
	if (blk && st && strcmp(st, "resolved") && json_object_set_new(blk, "is_error", json_true())) {
		json_decref(blk);
		return NULL;
	}
	return blk;
}

static json_t *messages(const json_t *tr, int summarize, int *oom)
{
	json_t *msgs = jb_check(oom, json_array());
	if (summarize) {
		json_t *t = jb_check(oom, model_summary_text(tr));
		add(msgs, "user", text_blocks(json_string_value(t), oom), oom);
		json_decref(t);
	} else {
		size_t i;
		json_t *it;
		json_array_foreach(tr, i, it) {
			const char *role = json_string_value(json_object_get(it, "role"));
			if (!strcmp(role, "user")) {
				add(msgs, "user", text_blocks(json_string_value(json_object_get(it, "text")), oom), oom);
			} else if (!strcmp(role, "assistant")) {
				json_t *b = text_blocks(json_string_value(json_object_get(it, "text")), oom);
				size_t j;
				json_t *c;
				json_array_foreach(json_object_get(it, "calls"), j, c)
					jb_append(oom, b, json_pack("{sssOsOsO}", "type", "tool_use", "id",
								    json_object_get(c, "id"), "name",
								    json_object_get(c, "name"), "input",
								    json_object_get(c, "args")));
				add(msgs, "assistant", b, oom);
			} else {
				json_t *blk = jb_check(oom, result_block(it));
				add(msgs, "user", blk ? json_pack("[o]", blk) : NULL, oom);
			}
		}
	}
	/* The first message must be the user's (the start of a log read after
	 * a summary may be an assistant's). */
	json_t *first = json_array_get(msgs, 0);
	if (!*oom && (!first || strcmp(json_string_value(json_object_get(first, "role")), "user")) &&
	    json_array_insert_new(msgs, 0,
				  json_pack("{sss[{ssss}]}", "role", "user", "content", "type", "text", "text",
					    "(The conversation continues from the summary.)")))
		*oom = 1;
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
	const char *task = json_string_value(json_object_get(req, "task"));
	int summarize = task && !strcmp(task, "summarize");
	json_t *msgs = messages(tr, summarize, &oom);
	json_decref(tr);
	if (oom) {
		json_decref(msgs);
		return NULL;
	}
	json_t *b = jb_check(&oom, json_pack("{sssisosb}", "model", mc->model, "max_tokens", mc->max_tokens,
					     "messages", msgs, "stream", 1));
	char *sys = model_system_text(req);
	if (!sys)
		oom = 1;
	else if (*sys)
		jb_set(&oom, b, "system", json_string(sys));
	free(sys);
	json_t *tools = json_object_get(req, "tools");
	if (!summarize && json_array_size(tools))
		jb_set(&oom, b, "tools", model_tools(tools, "input_schema", NULL));
	if (!oom && model_merge_params(b, mc, req, owned))
		oom = 1;
	return jb_done(oom, b);
}

static size_t headers(const char *key, char out[][600])
{
	size_t n = 0;
	snprintf(out[n++], 600, "anthropic-version: 2023-06-01");
	if (key)
		snprintf(out[n++], 600, "x-api-key: %s", key);
	return n;
}

static uint64_t tokens(const json_t *u, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(u, k));
	return v > 0 ? (uint64_t)v : 0;
}

/* A tool_use block (cb) started at c's index: a block started again there
 * starts over. 0, or -1 out of memory. */
static int tool_use_start(struct stream_call *c, const json_t *cb)
{
	const char *id = json_string_value(json_object_get(cb, "id"));
	const char *name = json_string_value(json_object_get(cb, "name"));
	json_t *in = json_object_get(cb, "input");
	int rc = 0;
	free(c->id);
	free(c->name);
	free(c->args);
	c->args = NULL;
	c->alen = 0;
	c->id = id ? strdup(id) : NULL;
	c->name = name ? strdup(name) : NULL;
	if ((id && !c->id) || (name && !c->name))
		rc = -1;
	if (json_object_size(in)) {
		char *a = jsonmp_dumps(in, JSON_COMPACT, 0, NULL);
		if (!a || stream_append(&c->args, &c->alen, a, strlen(a)))
			rc = -1;
		free(a);
	}
	return rc;
}

/* content_block_start: a tool call's or a text's block. 0, or -1. */
static int block_start(struct stream *s, const json_t *j)
{
	json_t *cb = json_object_get(j, "content_block");
	const char *bt = json_string_value(json_object_get(cb, "type"));
	int index = (int)json_integer_value(json_object_get(j, "index"));
	if (bt && !strcmp(bt, "tool_use")) {
		struct stream_call *c = stream_call_at(s, index);
		return c ? tool_use_start(c, cb) : -1;
	}
	if (bt && !strcmp(bt, "text")) {
		const char *text = json_string_value(json_object_get(cb, "text"));
		if (text)
			return stream_text(s, text, strlen(text));
	}
	return 0;
}

/* content_block_delta: more text, or more of a tool call's arguments. 0,
 * or -1. */
static int block_delta(struct stream *s, const json_t *j)
{
	json_t *d = json_object_get(j, "delta");
	const char *dt = json_string_value(json_object_get(d, "type"));
	if (dt && !strcmp(dt, "text_delta")) {
		const char *text = json_string_value(json_object_get(d, "text"));
		if (text)
			return stream_text(s, text, strlen(text));
	} else if (dt && !strcmp(dt, "input_json_delta")) {
		const char *pj = json_string_value(json_object_get(d, "partial_json"));
		struct stream_call *c = stream_call_at(s, (int)json_integer_value(json_object_get(j, "index")));
		if (!c || (pj && stream_append(&c->args, &c->alen, pj, strlen(pj))))
			return -1;
	}
	return 0;
}

/* An error event: the attempt failed, transient for the kinds a retry may
 * cure. */
static void stream_error(struct stream *s, const json_t *j)
{
	json_t *e = json_object_get(j, "error");
	const char *et = json_string_value(json_object_get(e, "type"));
	const char *m = json_string_value(json_object_get(e, "message"));
	snprintf(s->err, sizeof s->err, "error in the stream: %s: %s", et ? et : "error", m ? m : "(no message)");
	s->failed = 1;
	s->transient = et && (!strcmp(et, "overloaded_error") || !strcmp(et, "api_error") ||
			      !strcmp(et, "rate_limit_error") || !strcmp(et, "timeout_error"));
}

/* One case per Messages-API event type: the chain is the stream's
 * grammar, read in one place, each case a line or a call. */
static int event(struct stream *s, const char *type, const char *data, size_t len)
{
	(void)type;
	json_t *j;
	if (jsonmp_loadb(data, len, 0, &j, NULL) == -ENOMEM) {
		snprintf(s->err, sizeof s->err, "out of memory reading the stream");
		return -ENOMEM;
	}
	const char *t = json_string_value(json_object_get(j, "type"));
	if (!t) {
		json_decref(j);
		snprintf(s->err, sizeof s->err, "the stream held an event with no type: %.80s", data);
		s->failed = 1;
		s->transient = 1;
		return 0;
	}
	int rc = 0;
	if (!strcmp(t, "message_start")) {
		json_t *u = json_object_get(json_object_get(j, "message"), "usage");
		s->in_tok = tokens(u, "input_tokens") + tokens(u, "cache_creation_input_tokens") +
			    tokens(u, "cache_read_input_tokens");
		s->out_tok = tokens(u, "output_tokens");
	} else if (!strcmp(t, "content_block_start")) {
		rc = block_start(s, j);
	} else if (!strcmp(t, "content_block_delta")) {
		rc = block_delta(s, j);
	} else if (!strcmp(t, "message_delta")) {
		json_t *u = json_object_get(j, "usage");
		if (json_object_get(u, "output_tokens"))
			s->out_tok = tokens(u, "output_tokens");
		if (json_object_get(u, "input_tokens"))
			s->in_tok = tokens(u, "input_tokens") + tokens(u, "cache_creation_input_tokens") +
				    tokens(u, "cache_read_input_tokens");
	} else if (!strcmp(t, "message_stop")) {
		s->done = 1;
	} else if (!strcmp(t, "error")) {
		stream_error(s, j);
	}
	json_decref(j);
	if (rc)
		snprintf(s->err, sizeof s->err, "out of memory reading the stream");
	return rc;
}

const struct model_api model_api_anthropic = { "/messages", body, headers, event };
