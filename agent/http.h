/*
 * http.h: one HTTP POST with libcurl for the built-in model clients, the
 * response body streamed to a callback as it arrives, while a descriptor (the
 * worker's IPC socket) is watched so a stop is never kept waiting on the
 * network.
 */
#ifndef AGENTD_HTTP_H
#define AGENTD_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_ERR_BODY_MAX (64u << 10) /* bytes of a non-2xx body kept */

struct http_req {
	const char *url;
	const char *body;            /* JSON */
	size_t body_len;
	const char *const *headers;  /* "Name: value", NULL-terminated (Content-Type is added) */
	int64_t timeout_ms;          /* the whole exchange; 0: none */
	int64_t connect_timeout_ms;
	/* A 2xx body, as it arrives; non-zero stops the transfer (returned). */
	int (*on_data)(void *arg, const char *p, size_t n);
	int watch_fd;                /* -1: none */
	int (*on_watch)(void *arg);  /* watch_fd readable; non-zero cancels */
	void *arg;
};

struct http_resp {
	long status;            /* 0: no response (err says why) */
	char *body;             /* a non-2xx body (up to HTTP_ERR_BODY_MAX), NUL-terminated, or NULL */
	size_t body_len;
	int64_t retry_after_ms; /* Retry-After (seconds or an HTTP-date) as a delay; -1: none */
	int timed_out;          /* the timeout or connect_timeout passed */
	int64_t elapsed_ms;
	char err[256];          /* transport failure (status 0), or a body cut mid-stream */
};

/* Once per process, before any other call here: libcurl's global init. */
int http_global_init(void);

/*
 * POST. Returns 0 when a response came whole (any status: look at it),
 * -EIO when the transfer failed (no connection, timeout, a body cut
 * mid-stream; resp->err says which), -ECANCELED when on_watch asked, or
 * on_data's non-zero return. Free resp with http_resp_free.
 */
int http_post(const struct http_req *rq, struct http_resp *resp);
void http_resp_free(struct http_resp *resp);

/* A Retry-After value as milliseconds from now (now: ms since the epoch);
 * -1 when it is neither delta-seconds nor an HTTP-date. A date past is 0. */
int64_t http_retry_after_ms(const char *value, int64_t now_ms);

#endif
