/* http.c: libcurl POSTs for the model clients (see http.h). */
#include "agent/http.h"

#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int http_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
}

void http_resp_free(struct http_resp *resp)
{
	free(resp->body);
	resp->body = NULL;
	resp->body_len = 0;
}

int64_t http_retry_after_ms(const char *v, int64_t now)
{
	while (*v == ' ' || *v == '\t')
		v++;
	if (isdigit((unsigned char)*v)) {
		char *end;
		errno = 0;
		unsigned long long s = strtoull(v, &end, 10);
		while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
			end++;
		if (*end || errno)
			return -1;
		return s > 86400ULL * 365 ? 86400LL * 365 * 1000 : (int64_t)s * 1000;
	}
	time_t t = curl_getdate(v, NULL);
	if (t == -1)
		return -1;
	int64_t d = (int64_t)t * 1000 - now;
	return d > 0 ? d : 0;
}

struct xfer {
	const struct http_req *rq;
	struct http_resp *resp;
	CURL *h;
	int rc;       /* on_data's stop */
};

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = size * n;
	if (len > 12 && !strncasecmp(p, "retry-after:", 12)) {
		char v[128];
		size_t c = len - 12 < sizeof v - 1 ? len - 12 : sizeof v - 1;
		memcpy(v, p + 12, c);
		v[c] = 0;
		x->resp->retry_after_ms = http_retry_after_ms(v, now_ms());
	}
	return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = size * n;
	long status = 0;
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300) {
		int rc = x->rq->on_data ? x->rq->on_data(x->rq->arg, p, len) : 0;
		if (rc) {
			x->rc = rc;
			return 0; /* stops the transfer */
		}
		return len;
	}
	struct http_resp *r = x->resp;
	size_t keep = r->body_len < HTTP_ERR_BODY_MAX ? HTTP_ERR_BODY_MAX - r->body_len : 0;
	if (keep > len)
		keep = len;
	if (keep) {
		char *b = realloc(r->body, r->body_len + keep + 1);
		if (!b) {
			x->rc = -ENOMEM; /* the attempt fails saying so, not as a write error */
			return 0;
		}
		memcpy(b + r->body_len, p, keep);
		r->body = b;
		r->body_len += keep;
		b[r->body_len] = 0;
	}
	return len;
}

/* The request's headers into *hl (the caller frees them, also on error)
 * and the options of x's transfer: 0 or -ENOMEM. */
static int xfer_setup(struct xfer *x, struct curl_slist **hl)
{
	const struct http_req *rq = x->rq;
	struct curl_slist *tmp;
	if (!(tmp = curl_slist_append(*hl, "Content-Type: application/json")))
		return -ENOMEM;
	*hl = tmp;
	if (!(tmp = curl_slist_append(*hl, "Expect:"))) /* no 100-continue round trip */
		return -ENOMEM;
	*hl = tmp;
	for (const char *const *h = rq->headers; h && *h; h++) {
		if (!(tmp = curl_slist_append(*hl, *h)))
			return -ENOMEM;
		*hl = tmp;
	}
	curl_easy_setopt(x->h, CURLOPT_URL, rq->url);
	curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(x->h, CURLOPT_POST, 1L);
	curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, rq->body);
	curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
	curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, *hl);
	curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, (long)rq->timeout_ms);
	curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS, (long)rq->connect_timeout_ms);
	curl_easy_setopt(x->h, CURLOPT_ACCEPT_ENCODING, ""); /* whatever libcurl can decode */
	curl_easy_setopt(x->h, CURLOPT_USERAGENT, "agentd/" AGENTD_VERSION);
	return 0;
}

/* Run m's transfer to its end, the wait also watching the worker's IPC
 * socket (rq->watch_fd): 0; -EIO (libcurl's multi interface failed:
 * resp->err says why); -ECANCELED (rq->on_watch asked to stop). */
static int xfer_wait(CURLM *m, const struct http_req *rq, struct http_resp *resp)
{
	int running = 1;
	while (running) {
		CURLMcode mc = curl_multi_perform(m, &running);
		if (mc != CURLM_OK) {
			snprintf(resp->err, sizeof resp->err, "%s", curl_multi_strerror(mc));
			return -EIO;
		}
		if (!running)
			break;
		struct curl_waitfd wf = { rq->watch_fd, CURL_WAIT_POLLIN, 0 };
		int nfd = 0;
		mc = curl_multi_poll(m, rq->watch_fd >= 0 ? &wf : NULL, rq->watch_fd >= 0 ? 1 : 0, 1000, &nfd);
		if (mc != CURLM_OK) {
			snprintf(resp->err, sizeof resp->err, "%s", curl_multi_strerror(mc));
			return -EIO;
		}
		if (rq->watch_fd >= 0 && (wf.revents & (CURL_WAIT_POLLIN | POLLHUP)) && rq->on_watch &&
		    rq->on_watch(rq->arg))
			return -ECANCELED;
	}
	return 0;
}

/* One libcurl transfer set up (xfer_setup), run (xfer_wait) and read back
 * in order: the status, the transfer's outcome, then the cleanup. */
int http_post(const struct http_req *rq, struct http_resp *resp)
{
	memset(resp, 0, sizeof *resp);
	resp->retry_after_ms = -1;
	int64_t t0 = mono_ms();
	struct xfer x = { rq, resp, NULL, 0 };
	struct curl_slist *hl = NULL;
	CURLM *m = curl_multi_init();
	x.h = curl_easy_init();
	int rc = -ENOMEM;
	if (!m || !x.h || (rc = xfer_setup(&x, &hl)))
		goto done;
	curl_multi_add_handle(m, x.h);
	if ((rc = xfer_wait(m, rq, resp)))
		goto done;
	CURLMsg *msg;
	int left;
	CURLcode cc = CURLE_OK;
	while ((msg = curl_multi_info_read(m, &left)))
		if (msg->msg == CURLMSG_DONE)
			cc = msg->data.result;
	curl_easy_getinfo(x.h, CURLINFO_RESPONSE_CODE, &resp->status);
	if (x.rc) {
		rc = x.rc;
	} else if (cc != CURLE_OK) {
		resp->timed_out = cc == CURLE_OPERATION_TIMEDOUT;
		if (resp->timed_out)
			snprintf(resp->err, sizeof resp->err, "timed out after %lld ms", (long long)(mono_ms() - t0));
		else
			snprintf(resp->err, sizeof resp->err, "%s", curl_easy_strerror(cc));
		rc = -EIO;
	} else {
		rc = 0;
	}
done:
	resp->elapsed_ms = mono_ms() - t0;
	if (m && x.h)
		curl_multi_remove_handle(m, x.h);
	if (x.h)
		curl_easy_cleanup(x.h);
	if (m)
		curl_multi_cleanup(m);
	curl_slist_free_all(hl);
	return rc;
}
