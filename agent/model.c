/* model.c: what the HTTP model clients share: the transcript, streaming,
 * retries (see model.h). */
#include "agent/model.h"
#include "agent/jsonb.h"
#include "common/jsonmp.h"
#include "common/text.h"
#include "conv/conv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const char model_summarize_prompt[] =
	"Summarize the conversation above in a few sentences, keeping every fact, decision and open question a "
	"later turn would need.";

/* ---- the transcript -------------------------------------------------- */

static const char *type_of(const json_t *e)
{
	const char *t = json_string_value(json_object_get(e, "type"));
	return t ? t : "";
}

static json_int_t seq_of(const json_t *e)
{
	return json_integer_value(json_object_get(e, "seq"));
}

/* A user_msg's content as text: its "text" when that is all it holds.
 * NULL when out of memory. */
static char *user_text(const json_t *c)
{
	const char *t = json_string_value(json_object_get(c, "text"));
	if (t && json_object_size(c) == 1)
		return strdup(t);
	return c ? jsonmp_dumps(c, JSON_COMPACT | JSON_ENCODE_ANY, 0, NULL) : strdup("");
}

/* A scheduled event's text, as the model is given it: "[scheduled] "
 * and the text the wakeup was given. NULL when out of memory. */
static char *scheduled_text(const json_t *c)
{
	const char *t = json_string_value(json_object_get(c, "text"));
	char *out = NULL;
	return asprintf(&out, "[scheduled] %s", t ? t : "") < 0 ? NULL : out;
}

static void add_user(json_t *out, const json_t *e, const json_t *content, int *oom)
{
	char *t = strcmp(type_of(e), "scheduled") ? user_text(content) : scheduled_text(content);
	if (!t) {
		*oom = 1;
		return;
	}
	jb_append(oom, out, json_pack("{ssss}", "role", "user", "text", t));
	free(t);
}

char *model_result_text(const json_t *item)
{
	const char *status = json_string_value(json_object_get(item, "status"));
	json_t *res = json_object_get(item, "result");
	if (status && !strcmp(status, "resolved")) {
		if (json_is_string(res))
			return strdup(json_string_value(res));
		return res ? jsonmp_dumps(res, JSON_COMPACT | JSON_ENCODE_ANY, 0, NULL) : strdup("null");
	}
	if (status && !strcmp(status, "missing"))
		return strdup("{\"status\":\"missing\",\"error\":\"no result was recorded for this call\"}");
	json_t *o = json_pack("{sssO}", "status", status ? status : "errored", "result", res ? res : json_null());
	char *s = jsonmp_dumps(o, JSON_COMPACT, 0, NULL);
	json_decref(o);
	return s;
}

/* Close the open assistant item: calls never answered get a "missing" tool
 * item (an API refuses a call without its result), then the messages held
 * back follow. */
static void close_turn(json_t *out, json_t *open, json_t *held, int *oom)
{
	if (open) {
		const char *k;
		json_t *name;
		json_object_foreach(open, k, name)
			jb_append(oom, out, json_pack("{sssssOssso}", "role", "tool", "id", k, "name", name, "status",
						      "missing", "result", json_null()));
		json_object_clear(open);
	}
	size_t i;
	json_t *m;
	json_array_foreach(held, i, m)
		add_user(out, m, json_object_get(m, "content"), oom);
	json_array_clear(held);
}

/* An assistant item's calls told as text after its own. */
static json_t *flat_calls(const json_t *it, int *oom)
{
	json_t *text = jb_check(oom, json_string(json_string_value(json_object_get(it, "text"))));
	size_t j;
	json_t *c;
	json_array_foreach(json_object_get(it, "calls"), j, c) {
		if (!text)
			break;
		json_t *args = json_object_get(c, "args");
		char *a = args ? jsonmp_dumps(args, JSON_COMPACT, 0, NULL) : NULL;
		json_t *t = args && !a ? NULL
				       : json_sprintf("%s%s[called %s (%s) with %s]", json_string_value(text),
						      json_string_length(text) ? "\n" : "",
						      json_string_value(json_object_get(c, "name")),
						      json_string_value(json_object_get(c, "id")), a ? a : "{}");
		free(a);
		json_decref(text);
		text = jb_check(oom, t);
	}
	return text;
}

/* With no tools offered (a summary, or tools since removed from the
 * conversation or the configuration), calls and results are told as text:
 * the APIs refuse tool blocks without tool definitions. */
static void flatten(json_t *out, int *oom)
{
	size_t i;
	json_t *it;
	json_array_foreach(out, i, it) {
		const char *role = json_string_value(json_object_get(it, "role"));
		if (!strcmp(role, "assistant") && json_array_size(json_object_get(it, "calls"))) {
			jb_set(oom, it, "text", flat_calls(it, oom));
			jb_set(oom, it, "calls", json_array());
		} else if (!strcmp(role, "tool")) {
			char *r = model_result_text(it);
			json_t *t = r ? json_sprintf("[result of %s (%s): %s]", json_string_value(json_object_get(it, "name")),
						     json_string_value(json_object_get(it, "id")), r)
				      : NULL;
			free(r);
			if (!jb_check(oom, t) || json_array_set_new(out, i, json_pack("{ssso}", "role", "user", "text", t)))
				*oom = 1;
		}
	}
}

/* The walk of model_transcript: what is open while the events are read. */
struct walk {
	json_t *out;
	json_t *open;      /* the open assistant item's unanswered calls: id -> name */
	json_t *answered;  /* ids answered once */
	json_t *held;      /* user_msgs to place after the open turn's results */
	json_t *assistant; /* the last assistant item, while its tool_calls follow */
	json_t *empty;     /* args of a call that has none */
	int oom;
};

static void walk_call(struct walk *w, const json_t *c)
{
	const char *id = json_string_value(json_object_get(c, "tool_call_id"));
	const char *name = json_string_value(json_object_get(c, "name"));
	json_t *args = json_object_get(c, "args");
	if (!id || !name)
		return;
	jb_append(&w->oom, json_object_get(w->assistant, "calls"),
		  json_pack("{sssssO}", "id", id, "name", name, "args", json_is_object(args) ? args : w->empty));
	jb_set(&w->oom, w->open, id, json_string(name));
}

static void walk_result(struct walk *w, const json_t *c)
{
	const char *id = json_string_value(json_object_get(c, "tool_call_id"));
	if (!id || json_object_get(w->answered, id))
		return; /* answered once */
	json_t *name = json_object_get(w->open, id);
	if (name) {
		/* A status or result missing from the event is null (read as
		 * "errored", no result), never a message lost for it. */
		json_t *st = json_object_get(c, "status"), *res = json_object_get(c, "result");
		jb_append(&w->oom, w->out, json_pack("{sssssOsOsO}", "role", "tool", "id", id, "name", name, "status",
						     st ? st : json_null(), "result", res ? res : json_null()));
		json_object_del(w->open, id);
		jb_set(&w->oom, w->answered, id, json_true());
		if (!json_object_size(w->open))
			close_turn(w->out, w->open, w->held, &w->oom);
		return;
	}
	/* Its call was summarised away (or never seen): a note, not a tool
	 * message with no call. */
	char *r = model_result_text(c);
	json_t *text = r ? json_sprintf("[result of tool call %s: %s]", id, r) : NULL;
	free(r);
	json_t *note = jb_check(&w->oom, json_pack("{so}", "text", jb_check(&w->oom, text)));
	if (!note)
		return;
	if (json_object_size(w->open))
		jb_append(&w->oom, w->held, json_pack("{so}", "content", note));
	else {
		add_user(w->out, NULL, note, &w->oom);
		json_decref(note);
	}
}

/* The one place the ordering rules of both APIs are applied, in the order
 * the turn's events are walked (results after their call, what arrived
 * meanwhile after the results). */
json_t *model_transcript(const json_t *req)
{
	const json_t *evs = json_object_get(req, "messages");
	size_t n = json_array_size(evs);
	/* next_ctx[i]: the context_seq of the first assistant_msg after i
	 * (-1: none). A user_msg past it arrived while that turn ran. */
	json_int_t *next_ctx = calloc(n + 1, sizeof *next_ctx);
	if (!next_ctx)
		return NULL;
	next_ctx[n] = -1;
	for (size_t i = n; i-- > 0;) {
		const json_t *e = json_array_get(evs, i);
		next_ctx[i] = !strcmp(type_of(e), "assistant_msg") ?
				      json_integer_value(json_object_get(json_object_get(e, "content"), "context_seq")) :
				      next_ctx[i + 1];
	}
	struct walk w = { 0 };
	w.out = jb_check(&w.oom, json_array());
	w.open = jb_check(&w.oom, json_object());
	w.answered = jb_check(&w.oom, json_object());
	w.held = jb_check(&w.oom, json_array());
	w.empty = jb_check(&w.oom, json_object());
	for (size_t i = 0; i < n && !w.oom; i++) {
		const json_t *e = json_array_get(evs, i);
		const char *t = type_of(e);
		const json_t *c = json_object_get(e, "content");
		if (strcmp(t, "tool_call"))
			w.assistant = NULL;
		if (conv_is_input(t)) {
			if (json_object_size(w.open) || (next_ctx[i + 1] >= 0 && seq_of(e) > next_ctx[i + 1]))
				jb_append(&w.oom, w.held, json_incref((json_t *)e));
			else
				add_user(w.out, e, c, &w.oom);
		} else if (!strcmp(t, "assistant_msg")) {
			close_turn(w.out, w.open, NULL, &w.oom);
			const char *text = json_string_value(json_object_get(c, "text"));
			w.assistant = json_pack("{sssss[]}", "role", "assistant", "text", text ? text : "", "calls");
			jb_append(&w.oom, w.out, w.assistant);
			/* Messages that arrived while this turn ran come after
			 * its results (or right after it, with no calls). */
			if (i + 1 >= n || strcmp(type_of(json_array_get(evs, i + 1)), "tool_call"))
				close_turn(w.out, w.open, w.held, &w.oom);
		} else if (!strcmp(t, "tool_call") && w.assistant) {
			walk_call(&w, c);
		} else if (!strcmp(t, "tool_result") || !strcmp(t, "resolution")) {
			walk_result(&w, c);
		}
	}
	close_turn(w.out, w.open, w.held, &w.oom);
	json_decref(w.open);
	json_decref(w.answered);
	json_decref(w.held);
	json_decref(w.empty);
	free(next_ctx);
	if (!w.oom && !json_array_size(json_object_get(req, "tools")))
		flatten(w.out, &w.oom);
	return jb_done(w.oom, w.out);
}

static json_t *tool_def(const json_t *tool, const char *schema_key, int *oom)
{
	json_t *p = json_object_get(tool, "input_schema"); /* an MCP tool's (mcp.h) */
	const char *d = json_string_value(json_object_get(tool, "description"));
	json_t *o = jb_check(oom, json_pack("{sOso}", "name", json_object_get(tool, "name"), schema_key,
					    json_is_object(p) ? json_incref(p)
							      : json_pack("{sss{}}", "type", "object", "properties")));
	if (d && *d)
		jb_set(oom, o, "description", json_string(d));
	return o;
}

json_t *model_tools(const json_t *tools, const char *schema_key, const char *wrap)
{
	int oom = 0;
	json_t *ts = jb_check(&oom, json_array());
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t) {
		if (!json_is_string(json_object_get(t, "name")))
			continue; /* no tool the model could call by name: not offered */
		json_t *def = tool_def(t, schema_key, &oom);
		jb_append(&oom, ts, wrap ? json_pack("{ssso}", "type", wrap, wrap, def) : def);
	}
	return jb_done(oom, ts);
}

char *model_system_text(const json_t *req)
{
	const char *sys = json_string_value(json_object_get(req, "system"));
	const json_t *sum = json_object_get(req, "summary");
	const json_t *c = json_is_object(sum) ? json_object_get(sum, "content") : NULL;
	char *st = c ? user_text(c) : NULL;
	if (c && !st)
		return NULL; /* never a request that lost its summary */
	char *out = NULL;
	if (st && sys && *sys) {
		if (asprintf(&out, "%s\n\nSummary of the earlier conversation:\n%s", sys, st) < 0)
			out = NULL;
	} else if (st) {
		if (asprintf(&out, "Summary of the earlier conversation:\n%s", st) < 0)
			out = NULL;
	} else {
		out = strdup(sys ? sys : "");
	}
	free(st);
	return out;
}

/* ---- streams --------------------------------------------------------- */

int stream_append(char **buf, size_t *len, const char *p, size_t n)
{
	char *b = realloc(*buf, *len + n + 1);
	if (!b)
		return -ENOMEM;
	memcpy(b + *len, p, n);
	*len += n;
	b[*len] = 0;
	*buf = b;
	return 0;
}

int stream_text(struct stream *s, const char *p, size_t n)
{
	if (!n)
		return 0;
	int e = stream_append(&s->text, &s->tlen, p, n);
	if (!e && s->h && s->h->on_delta)
		s->h->on_delta(s->h->arg, p, n);
	return e;
}

struct stream_call *stream_call_at(struct stream *s, int index)
{
	for (size_t i = 0; i < s->ncalls; i++)
		if (s->calls[i].index == index)
			return &s->calls[i];
	struct stream_call *c = realloc(s->calls, (s->ncalls + 1) * sizeof *c);
	if (!c)
		return NULL;
	s->calls = c;
	c = &s->calls[s->ncalls++];
	memset(c, 0, sizeof *c);
	c->index = index;
	return c;
}

void stream_free(struct stream *s)
{
	free(s->text);
	for (size_t i = 0; i < s->ncalls; i++) {
		free(s->calls[i].id);
		free(s->calls[i].name);
		free(s->calls[i].args);
	}
	free(s->calls);
	memset(s, 0, sizeof *s);
}

static int id_ok(const char *id)
{
	size_t n = strlen(id);
	if (n < 1 || n > 128)
		return 0;
	for (const char *p = id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      strchr("._:-", *p)))
			return 0;
	return 1;
}

/* The finished stream as a reply. */
int stream_reply(struct stream *s, struct model_reply *r, char *err, size_t errlen)
{
	memset(r, 0, sizeof *r);
	r->text = s->text ? s->text : strdup("");
	s->text = NULL;
	r->calls = calloc(s->ncalls ? s->ncalls : 1, sizeof *r->calls);
	if (!r->text || !r->calls) {
		model_reply_free(r);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < s->ncalls; i++) {
		struct stream_call *c = &s->calls[i];
		struct model_call *mc = &r->calls[r->ncalls];
		if (!c->name || !*c->name || strlen(c->name) > TOOL_NAME_MAX) {
			model_reply_free(r);
			snprintf(err, errlen, "the model's tool call %zu has no usable name", i + 1);
			return -1;
		}
		json_t *a = NULL;
		int le = c->alen ? jsonmp_loadb(c->args, c->alen, JSON_DECODE_ANY, &a, NULL) : 0;
		if (!c->alen)
			a = json_object();
		else if (le == -EINVAL)
			a = json_pack("{ss#}", "raw", c->args, (int)c->alen); /* not JSON: kept as given */
		else if (a && !json_is_object(a))
			a = json_pack("{so}", "value", a);
		if (!a) {
			model_reply_free(r);
			snprintf(err, errlen, "out of memory"); /* never args other than the model gave */
			return -1;
		}
		if (!jsonmp_fits(a, 1)) {
			json_decref(a);
			model_reply_free(r);
			snprintf(err, errlen, "the model's tool call %s has args nested deeper than the store keeps",
				 c->name);
			return -1;
		}
		int dup = 0;
		for (size_t j = 0; c->id && j < r->ncalls; j++)
			if (r->calls[j].id && !strcmp(r->calls[j].id, c->id))
				dup = 1;
		int keep_id = c->id && id_ok(c->id) && !dup;
		mc->id = keep_id ? strdup(c->id) : NULL;
		mc->name = strdup(c->name);
		mc->args = a;
		r->ncalls++;
		if (!mc->name || (keep_id && !mc->id)) {
			model_reply_free(r);
			snprintf(err, errlen, "out of memory");
			return -1;
		}
	}
	r->input_tokens = s->in_tok;
	r->output_tokens = s->out_tok;
	return 0;
}

/* ---- what the worker and the helper share ---------------------------- */

const struct model_api *model_api_of(const struct model_cfg *mc)
{
	return mc->kind == MODEL_ANTHROPIC ? &model_api_anthropic : &model_api_openai;
}

void model_url(const struct model_cfg *mc, char *buf, size_t len)
{
	const char *path = model_api_of(mc)->path;
	size_t n = strlen(mc->base_url);
	text_fmt(buf, len, "%s%s", mc->base_url, n && mc->base_url[n - 1] == '/' ? path + 1 : path);
}
