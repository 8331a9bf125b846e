/*
 * http.h: agentd-web's HTTP side: routes, authentication, CSRF checks, the
 * JSON API over the control protocol, server-sent events over `watch`, and
 * /metrics (docs/web.md lists every route).
 *
 * Runs libmicrohttpd with a thread per connection: a handler may block on
 * agentd (a watch blocks for as long as the browser keeps its stream), and a
 * crash here never touches agentd, which only sees a client go away.
 */
#ifndef AGENTD_WEB_HTTP_H
#define AGENTD_WEB_HTTP_H

#include <stddef.h>

#define HTTP_ORIGINS_MAX 8

struct http_config {
	const char *socket;                  /* agentd's control socket */
	const char *origins[HTTP_ORIGINS_MAX]; /* allowed Origin values; their hosts are the allowed Host values */
	size_t norigins;
	const char *user_header;             /* a header a reverse proxy sets to the user's name, or NULL */
	int secure_cookie;                   /* mark the cookie Secure (behind TLS) */
	int poll_ms;                         /* how often the page polls the pending list */
	unsigned max_connections;
};

struct http_server;

/* Serve on listen_fd (bound and listening; owned by the server from now
 * on). Returns 0 with *out set, or -errno with msg set. cfg must outlive the
 * server. */
int http_start(const struct http_config *cfg, int listen_fd, struct http_server **out, char *msg, size_t msglen);
/* Stop listening, end open streams, free. */
void http_stop(struct http_server *s);

#endif
