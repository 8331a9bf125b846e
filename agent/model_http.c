/* model_http.c: one HTTP model call with its retries (see model.h); the
 * agentd-model helper's core, the only part that needs libcurl. */
#include "agent/http.h"
#include "agent/jsonb.h"
#include "agent/model.h"
#include "common/jsonmp.h"
#include "common/text.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>


int model_http_init(void)
{
	return http_global_init();
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
	size_t events;   /* events dispatched */
	char head[201];  /* the body's first bytes, to quote one that is not a stream */
	size_t hlen;
};

static int feed_event(void *arg, const char *type, const char *data, size_t len)
{
	struct feed *f = arg;
	f->events++;
	if (f->st.done || f->st.failed)
		return 0; /* nothing after the end counts */
	return f->api->event(&f->st, type, data, len);
}

static int on_data(void *arg, const char *p, size_t n)
{
	struct feed *f = arg;
	size_t keep = n < sizeof f->head - 1 - f->hlen ? n : sizeof f->head - 1 - f->hlen;
	memcpy(f->head + f->hlen, p, keep);
	f->hlen += keep;
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

/* Sorts an attempt that ran to its end: 0 when it gave the reply; -1 when
 * it failed, with a->error saying why and *transient set when asking again
 * may pass. The order matters: an error the stream carried is more specific
 * than the status or the transfer's end that followed it. */
static int attempt_classify(struct feed *f, int e, const struct http_resp *resp, const char *url,
			    struct model_attempt *a, struct model_reply *out, int *transient)
{
	char msg[300];
	*transient = 0;
	if (f->st.failed) {
		/* An error the stream itself carried (or one too big). */
		text_fmt(a->error, sizeof a->error, "%s", f->st.err);
		*transient = f->st.transient;
	} else if (e == -EIO && resp->status >= 200 && resp->status < 300) {
		text_fmt(a->error, sizeof a->error, "the response was cut mid-stream: %s", resp->err);
		*transient = 1;
	} else if (e) {
		text_fmt(a->error, sizeof a->error, "cannot reach %s: %s", url, e == -EIO ? resp->err : strerror(-e));
		*transient = 1;
	} else if (resp->status < 200 || resp->status >= 300) {
		server_message(resp->body, resp->body_len, msg, sizeof msg);
		text_fmt(a->error, sizeof a->error, "HTTP %ld: %s", resp->status, msg);
		*transient = retryable_status(resp->status);
	} else if (!f->st.done && !f->events && f->hlen && f->head[0] == '{') {
		/* A server that ignored "stream": true; asking again would
		 * get the same. */
		text_fmt(a->error, sizeof a->error, "the server answered without streaming (not an event stream): %.*s",
		       (int)f->hlen, f->head);
	} else if (!f->st.done) {
		text_fmt(a->error, sizeof a->error, "the response ended before the stream's end");
		*transient = 1;
	} else if (stream_reply(&f->st, out, a->error, sizeof a->error) == 0) {
		return 0;
	}
	return -1;
}

/* One POST of the rendered request, recorded in a: 0 with the reply in out,
 * -ECANCELED when the watch said stop (nothing recorded as an error), -1
 * when it failed (see attempt_classify). */
static int attempt_run(const struct model_cfg *mc, const struct model_api *api, const struct model_hooks *h,
		       const char *body, const char *const *hdrs, struct model_attempt *a, struct model_reply *out,
		       struct model_outcome *oc, int *transient)
{
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
	*transient = 0;
	int rc = e == -ECANCELED ? -ECANCELED : attempt_classify(&f, e, &resp, oc->url, a, out, transient);
	if (rc == 0)
		oc->latency_ms = resp.elapsed_ms;
	http_resp_free(&resp);
	sse_free(&f.sse);
	stream_free(&f.st);
	return rc;
}

/* How long to wait before attempt retry + 1: the jittered back-off, or the
 * server's Retry-After when longer; -1 when the server asks for more than
 * the call may wait (oc->err then says so). */
static int64_t attempt_wait_ms(const struct model_cfg *mc, int retry, const struct model_attempt *a,
			       struct model_outcome *oc)
{
	int64_t wait = jittered(mc, retry);
	if (a->retry_after_ms > model_retry_after_max(mc)) {
		/* Waiting that long would outlast what the worker allows
		 * the call: say so rather than retry early. */
		text_fmt(oc->err, sizeof oc->err, "model %s: %s (the server asks to retry after %lld s, over %lld s)",
		       mc->name, a->error, (long long)(a->retry_after_ms / 1000),
		       (long long)(model_retry_after_max(mc) / 1000));
		log_warn("%s", oc->err);
		return -1;
	}
	return a->retry_after_ms > wait ? a->retry_after_ms : wait;
}

int model_http_run(const struct model_cfg *mc, const json_t *req, const struct model_hooks *h,
		   struct model_reply *out, struct model_outcome *oc)
{
	memset(oc, 0, sizeof *oc);
	memset(out, 0, sizeof *out);
	const struct model_api *api = model_api_of(mc);
	model_url(mc, oc->url, sizeof oc->url);
	oc->body = api->body(mc, req);
	char *body = oc->body ? jsonmp_dumps(oc->body, JSON_COMPACT, 0, NULL) : NULL;
	if (!body) {
		text_fmt(oc->err, sizeof oc->err, "model %s: cannot render the request: out of memory", mc->name);
		return -1;
	}
	const char *key = mc->api_key_env ? getenv(mc->api_key_env) : NULL;
	if (key && !*key)
		key = NULL;
	char hbuf[4][600];
	size_t nh = api->headers(key, hbuf), nc = 0;
	while (mc->headers && mc->headers[nc])
		nc++;
	const char **hdrs = calloc(nh + nc + 1, sizeof *hdrs);
	if (!hdrs) {
		free(body);
		text_fmt(oc->err, sizeof oc->err, "model %s: out of memory", mc->name);
		return -1;
	}
	for (size_t i = 0; i < nh; i++)
		hdrs[i] = hbuf[i];
	for (size_t i = 0; i < nc; i++) /* the configured ones (config.h): never logged */
		hdrs[nh + i] = mc->headers[i];
	int rc = -1;
	for (int i = 0; i <= mc->retries; i++) {
		struct model_attempt *a = &oc->att[oc->attempts++];
		int transient;
		rc = attempt_run(mc, api, h, body, hdrs, a, out, oc, &transient);
		if (rc == 0 || rc == -ECANCELED)
			break;
		text_fmt(oc->err, sizeof oc->err, "model %s: %s", mc->name, a->error);
		if (!transient || i == mc->retries) {
			log_warn("model %s: attempt %d of %d failed%s: %s", mc->name, oc->attempts, mc->retries + 1,
				 transient ? "" : " (not retried)", a->error);
			break;
		}
		int64_t wait = attempt_wait_ms(mc, i, a, oc);
		if (wait < 0)
			break;
		a->wait_ms = wait;
		log_warn("model %s: attempt %d of %d failed: %s; retrying in %lld ms", mc->name, oc->attempts,
			 mc->retries + 1, a->error, (long long)wait);
		if (backoff_wait(h, wait)) {
			rc = -ECANCELED;
			break;
		}
	}
	free(body);
	free(hdrs);
	if (rc == 0) /* docs/models.md, "Prices" */
		out->cost = ((double)out->input_tokens * mc->price_input + (double)out->output_tokens * mc->price_output) /
			    1e6;
	return rc;
}

void model_outcome_free(struct model_outcome *oc)
{
	json_decref(oc->body);
	oc->body = NULL;
}

json_t *model_attempts_json(const struct model_outcome *oc)
{
	int oom = 0;
	json_t *a = jb_check(&oom, json_array());
	for (int i = 0; i < oc->attempts; i++) {
		const struct model_attempt *t = &oc->att[i];
		json_t *o = jb_check(&oom, json_pack("{sisIsI}", "status", (int)t->status, "elapsed_ms",
						     (json_int_t)t->elapsed_ms, "wait_ms", (json_int_t)t->wait_ms));
		if (t->retry_after_ms >= 0)
			jb_set(&oom, o, "retry_after_ms", json_integer(t->retry_after_ms));
		if (t->error[0])
			jb_set(&oom, o, "error", json_text(t->error, strlen(t->error)));
		jb_append(&oom, a, o);
	}
	return jb_done(oom, a);
}
