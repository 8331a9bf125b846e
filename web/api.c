/* api.c: the pieces of agentd-web's API routes (see api.h). */
#include "web/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTL_TIMEOUT_MS 10000
#define CTL_REPLY_MAX (64u << 20) /* the longest reply line taken: an `events` page of large events */

static const char *SOCKET, *USER_HEADER;

void api_init(const char *socket, const char *user_header)
{
	SOCKET = socket;
	USER_HEADER = user_header;
}

static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
			  "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

void api_headers(struct MHD_Response *r)
{
	MHD_add_response_header(r, "Content-Security-Policy", CSP);
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	/* same-origin, not no-referrer: under no-referrer browsers send
	 * "Origin: null" on POSTs, and the CSRF check needs the real one. */
	MHD_add_response_header(r, "Referrer-Policy", "same-origin");
	MHD_add_response_header(r, "X-Frame-Options", "DENY");
	MHD_add_response_header(r, "Cache-Control", "no-store");
}

enum MHD_Result api_send_buf(struct MHD_Connection *c, unsigned status, const char *type, const void *data,
				size_t len, enum MHD_ResponseMemoryMode mode, const char *cookie)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, mode);
	if (!r)
		return MHD_NO;
	api_headers(r);
	MHD_add_response_header(r, "Content-Type", type);
	if (cookie)
		MHD_add_response_header(r, "Set-Cookie", cookie);
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* obj is stolen. */
enum MHD_Result api_send_json(struct MHD_Connection *c, unsigned status, json_t *obj)
{
	char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	if (!s)
		return api_send_buf(c, 500, "text/plain", "out of memory\n", 14, MHD_RESPMEM_PERSISTENT, NULL);
	return api_send_buf(c, status, "application/json", s, strlen(s), MHD_RESPMEM_MUST_FREE, NULL);
}

enum MHD_Result api_send_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg)
{
	return api_send_json(c, status, json_pack("{ssss}", "error", code, "message", msg));
}

/* The protocol's error codes as HTTP statuses. */
unsigned api_status_of(const char *code)
{
	static const struct { const char *code; unsigned status; } map[] = {
		{ "bad_request", 400 }, { "not_found", 404 }, { "conflict", 409 }, { "stale", 409 },
		{ "too_large", 413 }, { "store_full", 507 }, { "unavailable", 503 },
	};
	for (size_t i = 0; code && i < sizeof map / sizeof map[0]; i++)
		if (!strcmp(code, map[i].code))
			return map[i].status;
	return 502;
}

/* A connection of its own for each request (agentd answers a connection's
 * requests in order): a slow reply for one page never delays another's. */
int api_connect(ctl_conn **cc)
{
	int e = ctl_connect(SOCKET, CTL_TIMEOUT_MS, cc);
	if (!e)
		ctl_set_line_max(*cc, CTL_REPLY_MAX);
	return e;
}

/* One request to agentd; req is stolen. On success returns the reply (ok
 * true) and the caller decrefs; otherwise answers the HTTP request with the
 * error and returns NULL (*ret holds what to return). */
json_t *api_ask(struct MHD_Connection *c, json_t *req, enum MHD_Result *ret)
{
	json_t *reply = NULL;
	ctl_conn *cc = NULL;
	int e = !req ? -ENOMEM : api_connect(&cc);
	if (!e)
		e = ctl_request(cc, req, &reply);
	ctl_close(cc);
	json_decref(req);
	if (e) {
		*ret = api_send_error(c, 502, "agentd_unreachable", ctl_strerror(e));
		return NULL;
	}
	if (!json_is_true(json_object_get(reply, "ok"))) {
		const char *code = json_string_value(json_object_get(reply, "error"));
		*ret = api_send_json(c, api_status_of(code), json_pack("{s:s,s:O?}", "error", code ? code : "internal",
								     "message", json_object_get(reply, "message")));
		json_decref(reply);
		return NULL;
	}
	json_object_del(reply, "ok");
	json_object_del(reply, "id");
	return reply;
}

enum MHD_Result api_proxy(struct MHD_Connection *c, json_t *req)
{
	enum MHD_Result ret;
	json_t *r = api_ask(c, req, &ret);
	return r ? api_send_json(c, 200, r) : ret;
}

const char *api_arg(struct MHD_Connection *c, const char *k)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
	return v && *v ? v : NULL;
}

/* A query number: 1 and *out when present and a whole number in [0, max]. */
int api_arg_num(struct MHD_Connection *c, const char *k, long long max, long long *out, int *bad)
{
	const char *v = api_arg(c, k);
	char *end;
	if (!v)
		return 0;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (*end || errno || n < 0 || n > max || end == v) {
		*bad = 1;
		return 0;
	}
	*out = n;
	return 1;
}

/* An id from the query (?name=ID): 1 and *out when given as valid UTF-8
 * (agentd checks the rest: a JSON request cannot carry other bytes);
 * otherwise 0 with the request answered 400. */
int api_id_arg(struct MHD_Connection *c, const char *name, const char **out, enum MHD_Result *ret)
{
	char msg[96];
	json_t *s;
	*out = api_arg(c, name);
	if (*out && (s = json_string(*out))) {
		json_decref(s);
		return 1;
	}
	snprintf(msg, sizeof msg, *out ? "'%s' is not valid UTF-8" : "'%s' is required", name);
	*ret = api_send_error(c, 400, "bad_request", msg);
	return 0;
}

void api_by_name(struct MHD_Connection *c, const struct api_who *w, char *out, size_t n)
{
	const char *h = USER_HEADER ? MHD_lookup_connection_value(c, MHD_HEADER_KIND, USER_HEADER) : NULL;
	if (h && *h && auth_name_ok(h))
		snprintf(out, n, "%s", h);
	else if (w->session && w->name[0])
		snprintf(out, n, "%s", w->name);
	else
		snprintf(out, n, "%s", w->session ? "agentd-web" : "agentd-web (token)");
}

/* A POST's body: a JSON object holding only the fields named (a NULL-ended
 * list) into *b. 1 with *ret the error answered (400), else 0. */
int api_body(struct MHD_Connection *c, struct api_req *rq, const char *const *fields, json_t **b,
		       enum MHD_Result *ret)
{
	const char *k;
	json_t *v;
	*b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(*b)) {
		json_decref(*b);
		*ret = api_send_error(c, 400, "bad_request", "the body must be a JSON object");
		return 1;
	}
	json_object_foreach(*b, k, v) {
		size_t i = 0;
		while (fields[i] && strcmp(k, fields[i]))
			i++;
		if (fields[i])
			continue;
		char msg[200] = "unknown field (";
		for (i = 0; fields[i]; i++)
			snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%s%s", i ? ", " : "", fields[i]);
		snprintf(msg + strlen(msg), sizeof msg - strlen(msg), ")");
		json_decref(*b);
		*ret = api_send_error(c, 400, "bad_request", msg);
		return 1;
	}
	return 0;
}
