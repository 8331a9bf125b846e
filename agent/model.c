/* model.c: what the HTTP model clients share: the transcript, streaming,
 * retries (see model.h). */
#include "agent/model.h"
#include "agent/http.h"
#include "common/jsonmp.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* snprintf whose cut is intended (messages quoting the server). */
static void seterr(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *dst, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst, n, fmt, ap);
	va_end(ap);
}

const char model_summarize_prompt[] =
	"Summarize the conversation above in a few sentences, keeping every fact, decision and open question a "
	"later turn would need.";

int model_http_init(void)
{
	return http_global_init();
}

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

/* A user_msg's content as text: its "text" when that is all it holds. */
static char *user_text(const json_t *c)
{
	const char *t = json_string_value(json_object_get(c, "text"));
	if (t && json_object_size(c) == 1)
		return strdup(t);
	return json_dumps(c, JSON_COMPACT | JSON_ENCODE_ANY);
}

static void add_user(json_t *out, const json_t *content)
{
	char *t = user_text(content);
	json_array_append_new(out, json_pack("{ssss}", "role", "user", "text", t ? t : ""));
	free(t);
}

char *model_result_text(const json_t *item)
{
	const char *status = json_string_value(json_object_get(item, "status"));
	json_t *res = json_object_get(item, "result");
	if (status && !strcmp(status, "resolved")) {
		if (json_is_string(res))
			return strdup(json_string_value(res));
		return json_dumps(res, JSON_COMPACT | JSON_ENCODE_ANY);
	}
	if (status && !strcmp(status, "missing"))
		return strdup("{\"status\":\"missing\",\"error\":\"no result was recorded for this call\"}");
	json_t *o = json_pack("{sssO}", "status", status ? status : "errored", "result", res ? res : json_null());
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

/* Close the open assistant item: calls never answered get a "missing" tool
 * item (an API refuses a call without its result), then the messages held
 * back follow. */
static void close_turn(json_t *out, json_t *open, json_t *held)
{
	if (open) {
		const char *k;
		json_t *name;
		json_object_foreach(open, k, name)
			json_array_append_new(out, json_pack("{sssssOssso}", "role", "tool", "id", k, "name", name,
							     "status", "missing", "result", json_null()));
		json_object_clear(open);
	}
	size_t i;
	json_t *m;
	json_array_foreach(held, i, m)
		add_user(out, json_object_get(m, "content"));
	json_array_clear(held);
}

json_t *model_transcript(const json_t *req)
{
	const json_t *evs = json_object_get(req, "messages");
	size_t n = json_array_size(evs);
	json_t *out = json_array();
	/* next_ctx[i]: the context_seq of the first assistant_msg after i
	 * (-1: none). A user_msg past it arrived while that turn ran. */
	json_int_t *next_ctx = calloc(n + 1, sizeof *next_ctx);
	if (!next_ctx)
		return out;
	next_ctx[n] = -1;
	for (size_t i = n; i-- > 0;) {
		const json_t *e = json_array_get(evs, i);
		next_ctx[i] = !strcmp(type_of(e), "assistant_msg") ?
				      json_integer_value(json_object_get(json_object_get(e, "content"), "context_seq")) :
				      next_ctx[i + 1];
	}
	json_t *open = json_object(); /* the open assistant item's unanswered calls: id -> name */
	json_t *answered = json_object();
	json_t *held = json_array();  /* user_msgs to place after the open turn's results */
	json_t *assistant = NULL;     /* the last assistant item, while its tool_calls follow */
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(evs, i);
		const char *t = type_of(e);
		const json_t *c = json_object_get(e, "content");
		if (strcmp(t, "tool_call"))
			assistant = NULL;
		if (!strcmp(t, "user_msg")) {
			if (json_object_size(open) || (next_ctx[i + 1] >= 0 && seq_of(e) > next_ctx[i + 1]))
				json_array_append(held, (json_t *)e);
			else
				add_user(out, c);
		} else if (!strcmp(t, "assistant_msg")) {
			close_turn(out, open, NULL);
			const char *text = json_string_value(json_object_get(c, "text"));
			assistant = json_pack("{sssss[]}", "role", "assistant", "text", text ? text : "", "calls");
			json_array_append_new(out, assistant);
			/* Messages that arrived while this turn ran come after
			 * its results (or right after it, with no calls). */
			if (i + 1 >= n || strcmp(type_of(json_array_get(evs, i + 1)), "tool_call"))
				close_turn(out, open, held);
		} else if (!strcmp(t, "tool_call") && assistant) {
			const char *id = json_string_value(json_object_get(c, "tool_call_id"));
			const char *name = json_string_value(json_object_get(c, "name"));
			json_t *args = json_object_get(c, "args");
			if (!id || !name)
				continue;
			json_array_append_new(json_object_get(assistant, "calls"),
					      json_pack("{sssssO}", "id", id, "name", name, "args",
							json_is_object(args) ? args : json_object()));
			json_object_set_new(open, id, json_string(name));
			/* The last call of the turn: held messages wait for results. */
		} else if (!strcmp(t, "tool_result") || !strcmp(t, "resolution")) {
			const char *id = json_string_value(json_object_get(c, "tool_call_id"));
			if (!id || json_object_get(answered, id))
				continue; /* answered once */
			json_t *name = json_object_get(open, id);
			if (name) {
				json_array_append_new(out, json_pack("{sssssOsOsO}", "role", "tool", "id", id, "name", name,
								     "status", json_object_get(c, "status"), "result",
								     json_object_get(c, "result")));
				json_object_del(open, id);
				json_object_set_new(answered, id, json_true());
				if (!json_object_size(open))
					close_turn(out, open, held);
			} else {
				/* Its call was summarised away (or never seen):
				 * a note, not a tool message with no call. */
				char *r = model_result_text(c);
				json_t *note = json_pack("{ss}", "text", "");
				json_object_set_new(note, "text", json_sprintf("[result of tool call %s: %s]", id,
										 r ? r : "null"));
				free(r);
				if (json_object_size(open))
					json_array_append_new(held, json_pack("{so}", "content", note));
				else {
					add_user(out, note);
					json_decref(note);
				}
			}
		}
	}
	close_turn(out, open, held);
	json_decref(open);
	json_decref(answered);
	json_decref(held);
	free(next_ctx);
	return out;
}

char *model_system_text(const json_t *req)
{
	const char *sys = json_string_value(json_object_get(req, "system"));
	const json_t *sum = json_object_get(req, "summary");
	char *st = NULL;
	if (json_is_object(sum)) {
		const json_t *c = json_object_get(sum, "content");
		st = user_text(c);
	}
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

static void stream_free(struct stream *s)
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
static int stream_reply(struct stream *s, struct model_reply *r, char *err, size_t errlen)
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
		json_t *a = c->alen ? json_loadb(c->args, c->alen, JSON_DECODE_ANY, NULL) : json_object();
		if (!a)
			a = json_pack("{ss#}", "raw", c->args, (int)c->alen); /* not JSON: kept as given */
		else if (!json_is_object(a))
			a = json_pack("{so}", "value", a);
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
		mc->id = c->id && id_ok(c->id) && !dup ? strdup(c->id) : NULL;
		mc->name = strdup(c->name);
		mc->args = a;
		r->ncalls++;
		if (!mc->name) {
			model_reply_free(r);
			snprintf(err, errlen, "out of memory");
			return -1;
		}
	}
	r->input_tokens = s->in_tok;
	r->output_tokens = s->out_tok;
	return 0;
}

/* ---- errors ---------------------------------------------------------- */

/* The server's message from an error body: both APIs put it in
 * error.message; otherwise the body's start. */
static void server_message(const char *body, size_t len, char *out, size_t outlen)
{
	json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
	json_t *e = json_object_get(j, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	if (!msg)
		msg = json_string_value(e); /* some compatible servers: {"error": "text"} */
	if (msg)
		snprintf(out, outlen, "%s", msg);
	else if (body && len)
		snprintf(out, outlen, "%.*s", (int)(len < 300 ? len : 300), body);
	else
		snprintf(out, outlen, "(no message)");
	json_decref(j);
}

/* ---- the call -------------------------------------------------------- */

struct feed {
	struct sse sse;
	struct stream st;
	const struct model_api *api;
	const struct model_hooks *h;
};

static int feed_event(void *arg, const char *type, const char *data, size_t len)
{
	struct feed *f = arg;
	if (f->st.done || f->st.failed)
		return 0; /* nothing after the end counts */
	return f->api->event(&f->st, type, data, len);
}

static int on_data(void *arg, const char *p, size_t n)
{
	struct feed *f = arg;
	int e = sse_feed(&f->sse, p, n, feed_event, f);
	if (e == -E2BIG) {
		snprintf(f->st.err, sizeof f->st.err, "an event of the stream is over %u bytes", SSE_EVENT_MAX);
		f->st.failed = 1;
	}
	return e;
}

static int on_watch(void *arg)
{
	struct feed *f = arg;
	return f->h && f->h->on_watch ? f->h->on_watch(f->h->arg) : 0;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait ms, still watching; non-zero when told to stop. */
static int backoff_wait(const struct model_hooks *h, int64_t ms)
{
	int64_t end = mono_ms() + ms;
	for (;;) {
		int64_t left = end - mono_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { h && h->watch_fd >= 0 ? h->watch_fd : -1, POLLIN, 0 };
		int n = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
		if (n > 0 && h->on_watch && h->on_watch(h->arg))
			return 1;
	}
}

static int64_t jittered(const struct model_cfg *mc, int retry)
{
	int64_t d = mc->backoff_ms;
	for (int i = 0; i < retry && d < mc->backoff_max_ms; i++)
		d *= 2;
	if (d > mc->backoff_max_ms)
		d = mc->backoff_max_ms;
	uint32_t r = 0;
	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
		r = (uint32_t)mono_ms() * 2654435761u;
	/* "Equal jitter": half fixed, half random, so workers that failed
	 * together do not come back together. */
	return d / 2 + (int64_t)((double)r / 4294967296.0 * (double)(d / 2 + 1));
}

static int retryable_status(long s)
{
	return s == 408 || s == 409 || s == 429 || s >= 500;
}

int model_http_run(const struct model_cfg *mc, const json_t *req, const struct model_hooks *h,
		   struct model_reply *out, struct model_outcome *oc)
{
	memset(oc, 0, sizeof *oc);
	memset(out, 0, sizeof *out);
	const struct model_api *api = mc->kind == MODEL_ANTHROPIC ? &model_api_anthropic : &model_api_openai;
	seterr(oc->url, sizeof oc->url, "%s%s%s", mc->base_url,
		 mc->base_url[strlen(mc->base_url) - 1] == '/' ? api->path + 1 : api->path, "");
	oc->body = api->body(mc, req);
	char *body = oc->body ? json_dumps(oc->body, JSON_COMPACT) : NULL;
	if (!body) {
		seterr(oc->err, sizeof oc->err, "model %s: cannot render the request: out of memory", mc->name);
		return -1;
	}
	const char *key = mc->api_key_env ? getenv(mc->api_key_env) : NULL;
	if (key && !*key)
		key = NULL;
	char hbuf[4][600];
	size_t nh = api->headers(key, hbuf);
	const char *hdrs[5];
	for (size_t i = 0; i < nh; i++)
		hdrs[i] = hbuf[i];
	hdrs[nh] = NULL;
	int rc = -1;
	for (int i = 0; i <= mc->retries; i++) {
		struct model_attempt *a = &oc->att[oc->attempts++];
		struct feed f = { .api = api, .h = h };
		sse_init(&f.sse);
		f.st.h = h;
		struct http_req rq = { oc->url, body, strlen(body), hdrs, mc->timeout_ms, mc->connect_timeout_ms,
				       on_data, h ? h->watch_fd : -1, on_watch, &f };
		struct http_resp resp;
		int e = http_post(&rq, &resp);
		a->status = resp.status;
		a->elapsed_ms = resp.elapsed_ms;
		a->retry_after_ms = resp.retry_after_ms;
		int transient = 0;
		if (e == -ECANCELED) {
			http_resp_free(&resp);
			sse_free(&f.sse);
			stream_free(&f.st);
			rc = -ECANCELED;
			break;
		}
		char msg[300];
		if (f.st.failed) {
			/* An error the stream itself carried (or one too big). */
			seterr(a->error, sizeof a->error, "%s", f.st.err);
			transient = f.st.transient;
		} else if (e == -EIO && resp.status >= 200 && resp.status < 300) {
			seterr(a->error, sizeof a->error, "the response was cut mid-stream: %s", resp.err);
			transient = 1;
		} else if (e) {
			seterr(a->error, sizeof a->error, "cannot reach %s: %s", oc->url,
				 e == -EIO ? resp.err : strerror(-e));
			transient = 1;
		} else if (resp.status < 200 || resp.status >= 300) {
			server_message(resp.body, resp.body_len, msg, sizeof msg);
			seterr(a->error, sizeof a->error, "HTTP %ld: %s", resp.status, msg);
			transient = retryable_status(resp.status);
		} else if (!f.st.done) {
			seterr(a->error, sizeof a->error, "the response ended before the stream's end");
			transient = 1;
		} else if (stream_reply(&f.st, out, a->error, sizeof a->error) == 0) {
			oc->latency_ms = resp.elapsed_ms;
			rc = 0;
		}
		http_resp_free(&resp);
		sse_free(&f.sse);
		stream_free(&f.st);
		if (rc == 0)
			break;
		seterr(oc->err, sizeof oc->err, "model %s: %s", mc->name, a->error);
		if (!transient || i == mc->retries) {
			log_warn("model %s: attempt %d of %d failed%s: %s", mc->name, oc->attempts, mc->retries + 1,
				 transient ? "" : " (not retried)", a->error);
			break;
		}
		int64_t wait = jittered(mc, i);
		if (a->retry_after_ms > wait)
			wait = a->retry_after_ms;
		a->wait_ms = wait;
		log_warn("model %s: attempt %d of %d failed: %s; retrying in %lld ms", mc->name, oc->attempts,
			 mc->retries + 1, a->error, (long long)wait);
		if (backoff_wait(h, wait)) {
			rc = -ECANCELED;
			break;
		}
	}
	free(body);
	return rc;
}

void model_outcome_free(struct model_outcome *oc)
{
	json_decref(oc->body);
	oc->body = NULL;
}

json_t *model_outcome_json(const struct model_outcome *oc)
{
	json_t *a = json_array();
	for (int i = 0; i < oc->attempts; i++) {
		const struct model_attempt *t = &oc->att[i];
		json_t *o = json_pack("{sisIsI}", "status", (int)t->status, "elapsed_ms", (json_int_t)t->elapsed_ms,
				      "wait_ms", (json_int_t)t->wait_ms);
		if (t->retry_after_ms >= 0)
			json_object_set_new(o, "retry_after_ms", json_integer(t->retry_after_ms));
		if (t->error[0])
			json_object_set_new(o, "error", json_text(t->error, strlen(t->error)));
		json_array_append_new(a, o);
	}
	return json_pack("{sssOso}", "url", oc->url, "body", oc->body ? oc->body : json_null(), "attempts", a);
}
