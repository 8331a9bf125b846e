/*
 * api.h: what agentd-web's API routes are made of (http.c's routes and
 * convs.c's acts and search): the response headers every answer carries,
 * JSON answers and errors, one request to agentd (a connection of its own),
 * query and body arguments, and the name a person acts under.
 *
 * Every function that answers the HTTP request returns what libmicrohttpd
 * is to be told (MHD_NO: the connection is dropped, for want of memory).
 * Those that may answer return 0/1 or a pointer and say when they did.
 * Thread-safe once api_init has run: libmicrohttpd runs a thread per
 * connection.
 */
#ifndef AGENTD_WEB_API_H
#define AGENTD_WEB_API_H

#include "web/auth.h"
#include "client/ctl.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>

/* Per request: the body as it arrives. */
struct api_req {
	char *body;
	size_t len;
	int too_large;
};

/* Who is asking: a session (cookie) or the token (Authorization: Bearer). */
struct api_who {
	int session;                 /* by cookie: POSTs need the CSRF checks */
	char id[AUTH_ID_LEN + 1];
	char csrf[AUTH_ID_LEN + 1];
	char name[AUTH_NAME_MAX + 1];
	int role;                    /* users.h: what it may do (the token: operator) */
};


/* agentd's control socket, and the header a proxy names the user in (or
 * NULL); both must outlive the server. Call once, before serving. */
void api_init(const char *socket, const char *user_header);

/* The headers every response carries: CSP, nosniff, Referrer-Policy,
 * X-Frame-Options, no-store (docs/web.md, "What protects the page"). */
void api_headers(struct MHD_Response *r);
/* data as the body; cookie (or NULL) as Set-Cookie. */
enum MHD_Result api_send_buf(struct MHD_Connection *c, unsigned status, const char *type, const void *data,
			     size_t len, enum MHD_ResponseMemoryMode mode, const char *cookie);
/* obj (stolen; NULL: a 500 "out of memory") as compact JSON. */
enum MHD_Result api_send_json(struct MHD_Connection *c, unsigned status, json_t *obj);
/* {"error": code, "message": msg}. */
enum MHD_Result api_send_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg);
/* A protocol error code as an HTTP status (docs/web.md; 502 for one not mapped). */
unsigned api_status_of(const char *code);

/* A connection of its own to agentd (0 or a ctl error: ctl_strerror). */
int api_connect(ctl_conn **cc);
/* One request to agentd; req is stolen (NULL: out of memory, answered
 * 502). The reply without "ok" and "id" (the caller decrefs), or NULL with
 * the request answered (agentd's error as its status, or 502
 * agentd_unreachable) and *ret what to return. */
json_t *api_ask(struct MHD_Connection *c, json_t *req, enum MHD_Result *ret);
/* api_ask, its reply answered 200. */
enum MHD_Result api_proxy(struct MHD_Connection *c, json_t *req);

/* The query argument k, or NULL when absent or empty. */
const char *api_arg(struct MHD_Connection *c, const char *k);
/* 1 and *out when k is a whole number in [0, max]; 0 when absent; *bad set
 * when present and not one. */
int api_arg_num(struct MHD_Connection *c, const char *k, long long max, long long *out, int *bad);
/* 1 and *out when the query's name is given as valid UTF-8; otherwise 0
 * with a 400 naming it answered. */
int api_id_arg(struct MHD_Connection *c, const char *name, const char **out, enum MHD_Result *ret);
/* A POST's body as a JSON object holding only the fields named (a
 * NULL-ended list) into *b (the caller decrefs); 1 with a 400 answered. */
int api_body(struct MHD_Connection *c, struct api_req *rq, const char *const *fields, json_t **b,
	     enum MHD_Result *ret);
/* The name a person acts under (docs/web.md, "Who decided"): the proxy's
 * header, the session's name, else "agentd-web" ("agentd-web (token)" for
 * the bearer token). At most AUTH_NAME_MAX bytes into out. */
void api_by_name(struct MHD_Connection *c, const struct api_who *w, char *out, size_t n);

#endif
