/*
 * mcp_http.c: agentd-mcp-http, MCP's streamable HTTP transport behind the
 * stdio one the worker speaks (mcp.c). The worker starts it as an [mcp.NAME]
 * server's process when the section has a url:
 *
 *   agentd-mcp-http URL        (headers: AGENTD_MCP_HEADERS, one per line)
 *
 * Each JSON-RPC line read on stdin is POSTed to URL in the order read; a
 * request does not wait for the answers of earlier ones (a
 * notifications/cancelled must not wait behind the call it cancels), but a
 * notification or response waits for the notifications before it (pump). What
 * the server answers, a JSON body or a text/event-stream of messages, is
 * written to stdout one message a line, as a stdio server would: the
 * worker's reading, timeouts and cancelling are the stdio transport's. The
 * session id the server gives at initialize goes on every later request,
 * with the protocol version the initialize result names. A request the
 * server fails (an HTTP error, a connection refused, a stream cut before its
 * response) is answered here with a JSON-RPC error that says why, so no call
 * waits for its timeout on an answer that cannot come. A stream cut before
 * its response, after events that carry ids, is resumed with a GET that
 * sends Last-Event-ID (up to three times). A session the server
 * no longer knows (404, or 400 as servers restarted without their sessions
 * answer) ends this process: the worker starts the server
 * again, with a new initialize, at its next call. On EOF of stdin the
 * session is ended with a DELETE and the process exits.
 *
 * Revision 2026-07-28 (stateless: no initialize, no session) is spoken when
 * the server says it is: the worker's initialize is held behind a
 * server/discover POST of our own; a result whose supportedVersions lists
 * MODERN answers the initialize here, and from then on every request carries
 * the revision's _meta and headers, notifications/initialized and responses
 * are not sent, and a notifications/cancelled closes its request's stream
 * (that revision's cancellation). Any other answer to server/discover (an
 * error, an HTTP 400 or 404, a result without MODERN) posts the initialize
 * as the 2025 revisions want.
 *
 * Kept out of agentd-worker for the reason agentd-model is: libcurl and its
 * TLS stack would make every worker's exec slower.
 */
#include "agent/sse.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define LINE_MAX_BYTES (16u << 20) /* a request line, and a JSON response body */
#define DELETE_TIMEOUT_MS 2000
#define CONNECT_TIMEOUT_MS 10000
#define RESUMES_MAX 3              /* GETs with Last-Event-ID for one request's cut stream */
#define MODERN "2026-07-28"        /* the stateless revision */
#define DISCOVER_TIMEOUT_MS 5000   /* a server that never answers server/discover is taken for a 2025 one */
#define NAME_HEADER_MAX 1024       /* longest Mcp-Name value sent */

struct post {
	struct post *next;
	CURL *h;
	struct curl_slist *hl;
	char *body;          /* the request line, sent as is; NULL: a GET that resumes a stream */
	size_t body_len;
	json_t *id;          /* the request's id; NULL for a notification or a response */
	int initialize;      /* an initialize: its session id and version are kept */
	int discover;        /* our server/discover: its answer decides the revision, and is not written */
	json_t *found;       /* the discover's result, when it had one */
	char *method;        /* MODERN: the Mcp-Method header's value */
	char *name;          /* MODERN: the Mcp-Name header's value, or NULL */
	int event_stream;    /* the response is text/event-stream */
	int answered;        /* a message with the request's id was written */
	int resumes;         /* a GET with Last-Event-ID: how many streams this request has had before */
	struct sse sse;
	char *buf;           /* a JSON body (or the first bytes of an error's) */
	size_t len, cap;
	int oom;
};

static const char *url;
static struct curl_slist *extra; /* AGENTD_MCP_HEADERS */
static char session[256];        /* Mcp-Session-Id: "" before initialize answered */
static char version[64];         /* MCP-Protocol-Version, from initialize's result */
static struct post *posts;        /* in flight */
static struct post *queue, **queue_tail = &queue; /* read, not yet posted, in order */
static int ordered_in_flight;     /* POSTs of notifications and responses not yet done */
static enum { UNDECIDED, LEGACY, STATELESS } revision;
static json_t *discovered;        /* STATELESS: server/discover's result */

/* Whether s[0..n) is visible ASCII (0x21-0x7E), as a session id must be:
 * what the server gives goes into our headers, never a CR or LF. */
static int visible(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return 0;
	return n > 0;
}

/* Whether s is printable ASCII (spaces too): a header value we make. */
static int printable(const char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e)
			return 0;
	return 1;
}

static void die(const char *what)
{
	fprintf(stderr, "agentd-mcp-http: %s\n", what);
	exit(1);
}

/* One message out, on one line; a write that fails ends us (the worker is gone). */
static void put(const json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	if (!s)
		die("out of memory writing a message");
	size_t n = strlen(s);
	s[n] = '\n'; /* over the NUL: written as n + 1 bytes */
	for (size_t off = 0; off <= n;) {
		ssize_t w = write(1, s + off, n + 1 - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			exit(0);
		off += (size_t)w;
	}
	free(s);
}

/* A JSON-RPC error for p's request, unless it has had its answer. */
static void fail_post(struct post *p, const char *fmt, const char *detail)
{
	if (!p->id || p->answered)
		return;
	char m[600];
	snprintf(m, sizeof m, fmt, detail);
	json_t *e = json_pack("{sssOs{siss}}", "jsonrpc", "2.0", "id", p->id, "error", "code", -32000, "message", m);
	if (!e)
		die("out of memory");
	put(e);
	json_decref(e);
	p->answered = 1;
}

/* A message from the server: noted (initialize's version; p's answer) and written. */
static void take(struct post *p, json_t *msg)
{
	json_t *id = json_object_get(msg, "id");
	if (p->discover) {
		json_t *r = json_object_get(msg, "result");
		if (id && json_equal(id, p->id) && json_is_object(r) && !p->found)
			p->found = json_incref(r);
		return;
	}
	if (p->id && id && json_equal(id, p->id) && !json_object_get(msg, "method")) {
		const char *rt = json_string_value(json_object_get(json_object_get(msg, "result"), "resultType"));
		if (revision == STATELESS && rt && strcmp(rt, "complete")) {
			/* input_required (multi round-trip requests): agentd
			 * declares no client capability, so it has nothing to give. */
			fail_post(p, "the MCP server asked for input (resultType %s), which agentd does not give", rt);
			return;
		}
		p->answered = 1;
		const char *v = json_string_value(json_object_get(json_object_get(msg, "result"), "protocolVersion"));
		if (p->initialize && v && strlen(v) < sizeof version && visible(v, strlen(v)))
			snprintf(version, sizeof version, "%s", v);
	}
	put(msg);
}

static void take_text(struct post *p, const char *s, size_t n)
{
	json_error_t je;
	json_t *j = json_loadb(s, n, 0, &je);
	if (!j) {
		fprintf(stderr, "agentd-mcp-http: the server sent a message that is not JSON: %s\n", je.text);
		return;
	}
	if (json_is_array(j)) { /* a batch, as 2025-03-26 allowed */
		size_t i;
		json_t *m;
		json_array_foreach(j, i, m)
			take(p, m);
	} else {
		take(p, j);
	}
	json_decref(j);
}

static int on_event(void *arg, const char *type, const char *data, size_t len)
{
	if (!*type || !strcmp(type, "message"))
		take_text(arg, data, len);
	return 0;
}

static long status_of(struct post *p)
{
	long st = 0;
	curl_easy_getinfo(p->h, CURLINFO_RESPONSE_CODE, &st);
	return st;
}

static size_t on_body(char *d, size_t size, size_t n, void *arg)
{
	struct post *p = arg;
	size_t len = size * n;
	long st = status_of(p);
	if (st >= 200 && st < 300 && p->event_stream) {
		int e = sse_feed(&p->sse, d, len, on_event, p);
		if (e == -ENOMEM)
			p->oom = 1;
		return e ? 0 : len;
	}
	size_t room = p->len < LINE_MAX_BYTES ? LINE_MAX_BYTES - p->len : 0;
	size_t keep = len < room ? len : room;
	if (p->len + keep + 1 > p->cap) {
		size_t cap = p->cap ? p->cap : 4096;
		while (cap < p->len + keep + 1)
			cap *= 2;
		char *b = realloc(p->buf, cap);
		if (!b) {
			p->oom = 1;
			return 0;
		}
		p->buf = b, p->cap = cap;
	}
	memcpy(p->buf + p->len, d, keep);
	p->len += keep;
	p->buf[p->len] = 0;
	return len;
}

static size_t on_header(char *d, size_t size, size_t n, void *arg)
{
	struct post *p = arg;
	size_t len = size * n, v = 0;
	const char *colon = memchr(d, ':', len);
	if (!colon)
		return len;
	size_t nl = (size_t)(colon - d);
	for (v = nl + 1; v < len && (d[v] == ' ' || d[v] == '\t'); v++)
		;
	size_t vl = len - v;
	while (vl && (d[v + vl - 1] == '\r' || d[v + vl - 1] == '\n' || d[v + vl - 1] == ' '))
		vl--;
	if (nl == 12 && !strncasecmp(d, "content-type", 12))
		p->event_stream = vl >= 17 && !strncasecmp(d + v, "text/event-stream", 17);
	else if (nl == 14 && !strncasecmp(d, "mcp-session-id", 14) && p->initialize && vl < sizeof session &&
		 visible(d + v, vl))
		snprintf(session, sizeof session, "%.*s", (int)vl, d + v);
	return len;
}

/* "name: value" onto *hl; value NULL: name is the whole line. Any length
 * (a configured token may be kilobytes). 0 or -ENOMEM. */
static int add_header(struct curl_slist **hl, const char *name, const char *value)
{
	char *h = NULL;
	if (value ? asprintf(&h, "%s: %s", name, value) < 0 : !(h = strdup(name)))
		return -ENOMEM;
	struct curl_slist *t = curl_slist_append(*hl, h);
	free(h);
	return t ? (*hl = t, 0) : -ENOMEM;
}

/* The headers every request carries: ours, the session's, the configured ones. */
static int headers(struct curl_slist **hl, int with_body, const struct post *p)
{
	if ((p && p->method && add_header(hl, "Mcp-Method", p->method)) ||
	    (p && p->name && add_header(hl, "Mcp-Name", p->name)) ||
	    (with_body && add_header(hl, "Content-Type", "application/json")) ||
	    add_header(hl, "Accept", "application/json, text/event-stream") || add_header(hl, "Expect:", NULL) ||
	    (session[0] && add_header(hl, "Mcp-Session-Id", session)) ||
	    (p && p->discover && add_header(hl, "MCP-Protocol-Version", MODERN)) ||
	    (version[0] && add_header(hl, "MCP-Protocol-Version", version)))
		return -ENOMEM;
	for (struct curl_slist *x = extra; x; x = x->next)
		if (add_header(hl, x->data, NULL))
			return -ENOMEM;
	return 0;
}

static CURL *easy(struct curl_slist *hl)
{
	CURL *h = curl_easy_init();
	if (!h)
		return NULL;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "agentd/" AGENTD_VERSION);
	return h;
}

/* A transfer of p joins the others in flight: p->body POSTed, or (no body)
 * a GET that resumes p's request's stream after last_id. */
static void post_add(CURLM *m, struct post *p, size_t len, const char *last_id)
{
	sse_init(&p->sse);
	if (headers(&p->hl, p->body != NULL, p) || (last_id && add_header(&p->hl, "Last-Event-ID", last_id)) ||
	    !(p->h = easy(p->hl)))
		die("out of memory");
	if (last_id) {
		snprintf(p->sse.id_buf, sizeof p->sse.id_buf, "%s", last_id);
		curl_easy_setopt(p->h, CURLOPT_HTTPGET, 1L);
	} else {
		curl_easy_setopt(p->h, CURLOPT_POSTFIELDS, p->body);
		curl_easy_setopt(p->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	curl_easy_setopt(p->h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(p->h, CURLOPT_WRITEDATA, p);
	curl_easy_setopt(p->h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(p->h, CURLOPT_HEADERDATA, p);
	curl_easy_setopt(p->h, CURLOPT_PRIVATE, p);
	if (p->discover)
		curl_easy_setopt(p->h, CURLOPT_TIMEOUT_MS, (long)DISCOVER_TIMEOUT_MS);
	curl_multi_add_handle(m, p->h);
	p->next = posts;
	posts = p;
}

/* The lines read go out in order, as stdio would deliver them, except that
 * a request does not wait for the answers of those before it: a
 * notification or a response is posted once every one before it is done
 * (the server sees notifications/initialized before tools/list), and no
 * line is posted while one of them is in flight; a request may go while
 * earlier requests wait for their answers (a notifications/cancelled never
 * waits behind the call it cancels). */
static void pump(CURLM *m)
{
	while (queue && !ordered_in_flight) {
		struct post *p = queue;
		if (!(queue = p->next))
			queue_tail = &queue;
		p->next = NULL;
		ordered_in_flight += !p->id;
		post_add(m, p, p->body_len, NULL);
	}
}

/* p's memory: in flight (taken off the multi handle) or only queued. */
static void post_free(struct post *p)
{
	curl_easy_cleanup(p->h);
	curl_slist_free_all(p->hl);
	sse_free(&p->sse);
	json_decref(p->id);
	json_decref(p->found);
	free(p->method);
	free(p->name);
	free(p->body);
	free(p->buf);
	free(p);
}

/* p off the list *l, if it is there. */
static void unlink_post(struct post **l, const struct post *p)
{
	for (; *l; l = &(*l)->next)
		if (*l == p) {
			*l = p->next;
			return;
		}
}

/* STATELESS: the request with id rid is given up (its stream closed, that
 * revision's cancellation); its late answer has nobody to read it. */
static void cancel(CURLM *m, const json_t *rid)
{
	for (struct post *p = posts; rid && p; p = p->next)
		if (p->id && !p->discover && json_equal(p->id, rid)) {
			curl_multi_remove_handle(m, p->h);
			unlink_post(&posts, p);
			post_free(p);
			return;
		}
}

/* STATELESS: j (p's request) as that revision wants it: its params' _meta
 * names the revision, our capabilities (none) and who we are, and its
 * Mcp-Method and Mcp-Name headers say what it is. 1 when it is not to be
 * sent at all: a response (such a server sends no requests), the 2025
 * handshake's notifications/initialized, a notifications/cancelled. */
static int stateless_form(CURLM *m, struct post *p, json_t *j)
{
	const char *method = json_string_value(json_object_get(j, "method"));
	if (!method || !strcmp(method, "notifications/initialized"))
		return 1;
	json_t *params = json_object_get(j, "params");
	if (!strcmp(method, "notifications/cancelled")) {
		cancel(m, json_object_get(params, "requestId"));
		return 1;
	}
	if (!params && json_object_set_new(j, "params", params = json_object()))
		die("out of memory");
	json_t *meta = json_object_get(params, "_meta");
	if (json_is_object(params) && !meta && json_object_set_new(params, "_meta", meta = json_object()))
		die("out of memory");
	if (json_is_object(meta) &&
	    (json_object_set_new(meta, "io.modelcontextprotocol/protocolVersion", json_string(MODERN)) ||
	     json_object_set_new(meta, "io.modelcontextprotocol/clientCapabilities", json_object()) ||
	     json_object_set_new(meta, "io.modelcontextprotocol/clientInfo",
				 json_pack("{ssss}", "name", "agentd", "version", AGENTD_VERSION))))
		die("out of memory");
	int named = !strcmp(method, "tools/call") || !strcmp(method, "prompts/get");
	const char *name = json_string_value(json_object_get(params, named ? "name" : "uri"));
	if (!named && strcmp(method, "resources/read"))
		name = NULL;
	if (printable(method) && !(p->method = strdup(method)))
		die("out of memory");
	if (name && strlen(name) <= NAME_HEADER_MAX && printable(name) && !(p->name = strdup(name)))
		die("out of memory");
	char *body = json_dumps(j, JSON_COMPACT);
	if (!body)
		die("out of memory");
	free(p->body);
	p->body = body;
	p->body_len = strlen(body);
	return 0;
}

/* STATELESS: the worker's initialize (p) answered here from server/discover's
 * result: the version the worker asked for, the server's capabilities, who
 * it is and its instructions. */
static void answer_initialize(struct post *p)
{
	json_t *j = json_loadb(p->body, p->body_len, 0, NULL);
	json_t *asked = json_object_get(json_object_get(j, "params"), "protocolVersion");
	json_t *caps = json_object_get(discovered, "capabilities");
	json_t *info = json_object_get(json_object_get(discovered, "_meta"), "io.modelcontextprotocol/serverInfo");
	json_t *r = json_pack("{sssOs{sososo}}", "jsonrpc", "2.0", "id", p->id, "result", "protocolVersion",
			      json_is_string(asked) ? json_incref(asked) : json_string(MODERN), "capabilities",
			      json_is_object(caps) ? json_incref(caps) : json_object(), "serverInfo",
			      json_is_object(info) ? json_incref(info) : json_pack("{ssss}", "name", "", "version", ""));
	json_t *ins = json_object_get(discovered, "instructions");
	if (!r || (json_is_string(ins) && json_object_set(json_object_get(r, "result"), "instructions", ins)))
		die("out of memory");
	put(r);
	json_decref(r);
	json_decref(j);
}

/* The worker's initialize waits behind a server/discover of ours, posted
 * before anything else (ordered: nothing is posted before its answer). */
static void discover(CURLM *m)
{
	struct post *d = calloc(1, sizeof *d);
	json_t *j = json_pack("{sssssss{s{sssos{ssss}}}}", "jsonrpc", "2.0", "id", "agentd-mcp-http/discover", "method",
			      "server/discover", "params", "_meta", "io.modelcontextprotocol/protocolVersion", MODERN,
			      "io.modelcontextprotocol/clientCapabilities", json_object(),
			      "io.modelcontextprotocol/clientInfo", "name", "agentd", "version", AGENTD_VERSION);
	if (!d || !j || !(d->body = json_dumps(j, JSON_COMPACT)) || !(d->method = strdup("server/discover")))
		die("out of memory");
	d->id = json_incref(json_object_get(j, "id"));
	d->discover = 1;
	d->body_len = strlen(d->body);
	json_decref(j);
	ordered_in_flight++;
	post_add(m, d, d->body_len, NULL);
}

/* server/discover (d) ended: the revision is decided. STATELESS answers the
 * initialize waiting in the queue and puts what was read after it in that
 * revision's form (a worker waits for initialize's answer first; a client
 * that does not finds its lines posted as the revision wants them); LEGACY
 * lets pump post them as read. */
static void discovered_by(CURLM *m, struct post *d)
{
	json_t *v, *versions = json_object_get(d->found, "supportedVersions");
	size_t i;
	revision = LEGACY;
	json_array_foreach(versions, i, v)
		if (json_is_string(v) && !strcmp(json_string_value(v), MODERN))
			revision = STATELESS;
	if (revision == LEGACY)
		return;
	discovered = json_incref(d->found);
	snprintf(version, sizeof version, "%s", MODERN);
	fprintf(stderr, "agentd-mcp-http: the server speaks MCP %s (stateless)\n", MODERN);
	for (struct post *p = queue, *next; p; p = next) {
		next = p->next;
		json_t *j = p->initialize ? NULL : json_loadb(p->body, p->body_len, 0, NULL);
		if (p->initialize)
			answer_initialize(p);
		if (p->initialize || (json_is_object(j) && stateless_form(m, p, j))) {
			unlink_post(&queue, p);
			post_free(p);
		}
		json_decref(j);
	}
	for (queue_tail = &queue; *queue_tail; queue_tail = &(*queue_tail)->next)
		;
}

/* A request line read: its POST follows the others (pump). */
static void post_line(CURLM *m, char *line, size_t len)
{
	struct post *p = calloc(1, sizeof *p);
	json_t *j = json_loadb(line, len, 0, NULL);
	if (!p || !(p->body = strndup(line, len)))
		die("out of memory");
	p->body_len = len;
	if (json_is_object(j)) {
		json_t *id = json_object_get(j, "id");
		const char *method = json_string_value(json_object_get(j, "method"));
		if (id && method)
			p->id = json_incref(id);
		p->initialize = method && !strcmp(method, "initialize");
		if (revision == STATELESS && p->initialize && p->id) {
			answer_initialize(p);
			json_decref(j);
			post_free(p);
			return;
		}
		if (revision == STATELESS && stateless_form(m, p, j)) {
			json_decref(j);
			post_free(p);
			return;
		}
	}
	json_decref(j);
	if (p->initialize && revision == UNDECIDED)
		discover(m);
	*queue_tail = p;
	queue_tail = &p->next;
	pump(m);
}

/* p's stream ended before its response, after events with ids: its request
 * goes on in a GET with Last-Event-ID (the server replays what that stream
 * missed), up to RESUMES_MAX times. 1 if one was started. */
static int resume(CURLM *m, struct post *p)
{
	if (!p->event_stream || p->answered || !p->id || !session[0] || !p->sse.last_id[0] ||
	    p->resumes >= RESUMES_MAX)
		return 0;
	struct post *g = calloc(1, sizeof *g);
	if (!g)
		die("out of memory");
	g->id = json_incref(p->id);
	g->resumes = p->resumes + 1;
	fprintf(stderr, "agentd-mcp-http: a response stream ended before its response: resuming after event %s\n",
		p->sse.last_id);
	post_add(m, g, 0, p->sse.last_id);
	return 1;
}

/* "STATUS: the first 200 bytes of the body" on one line, into d. */
static void status_detail(const struct post *p, long st, char *d, size_t n)
{
	snprintf(d, n, "%ld%s%.200s", st, p->len ? ": " : "", p->len ? p->buf : "");
	for (char *c = d; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
}

/* A POST ended (cc: how the transfer went): its answer, or the error that stands for it. */
static void post_done(CURLM *m, struct post *p, CURLcode cc)
{
	long st = status_of(p);
	if (p->discover) { /* its answer is ours, never the worker's */
		if (cc == CURLE_OK && !p->oom && st >= 200 && st < 300 && !p->event_stream && p->len)
			take_text(p, p->buf, p->len);
		discovered_by(m, p);
		ordered_in_flight--;
		curl_multi_remove_handle(m, p->h);
		unlink_post(&posts, p);
		post_free(p);
		return;
	}
	if (!p->oom && st >= 200 && st < 300 && resume(m, p))
		p->answered = 1; /* a cut stream: the GET that resumes it answers */
	if (p->oom) {
		fail_post(p, "%s", "agentd-mcp-http ran out of memory reading the response");
	} else if (cc != CURLE_OK) {
		fail_post(p, "the MCP server could not be reached: %s", curl_easy_strerror(cc));
	} else if ((st == 404 || st == 400) && session[0]) {
		/* 404 is the spec's answer to a session the server no longer
		 * has; servers restarted without their sessions (the SDK's
		 * examples) answer 400. Either way a new session is the cure. */
		char d[300];
		status_detail(p, st, d, sizeof d);
		fail_post(p, "the MCP server does not know the session any more (HTTP %s)", d);
		fprintf(stderr, "agentd-mcp-http: the server does not know the session (HTTP %ld): "
				"a new one starts with the next call\n", st);
		exit(1);
	} else if (st < 200 || st >= 300) {
		char d[300];
		status_detail(p, st, d, sizeof d);
		fail_post(p, "the MCP server answered HTTP %s", d);
	} else if (!p->event_stream && p->len) {
		take_text(p, p->buf, p->len);
	}
	fail_post(p, "%s", p->event_stream ? "the MCP server's stream ended before the response"
					  : "the MCP server sent no response");
	curl_multi_remove_handle(m, p->h);
	if (p->body && !p->id)
		ordered_in_flight--;
	unlink_post(&posts, p);
	post_free(p);
}

/* stdin's bytes into lines, each posted; 1 at EOF. */
static int read_stdin(CURLM *m, char **buf, size_t *len, size_t *cap)
{
	for (;;) {
		if (*len + 65536 > *cap) {
			if (*cap > LINE_MAX_BYTES + 65536)
				die("a request line is longer than 16 MiB");
			char *b = realloc(*buf, *cap ? *cap * 2 : 131072);
			if (!b)
				die("out of memory");
			*buf = b, *cap = *cap ? *cap * 2 : 131072;
		}
		ssize_t r = read(0, *buf + *len, *cap - *len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return 0;
		if (r <= 0)
			return 1;
		*len += (size_t)r;
		char *nl, *start = *buf;
		while ((nl = memchr(start, '\n', *len - (size_t)(start - *buf)))) {
			if (nl > start)
				post_line(m, start, (size_t)(nl - start));
			start = nl + 1;
		}
		*len -= (size_t)(start - *buf);
		memmove(*buf, start, *len);
	}
}

/* The end: the session is ended on the server (best effort, bounded). */
static void end_session(void)
{
	struct curl_slist *hl = NULL;
	CURL *h;
	if (!session[0] || headers(&hl, 0, NULL) || !(h = easy(hl))) {
		curl_slist_free_all(hl);
		return;
	}
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
	curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)DELETE_TIMEOUT_MS);
	curl_easy_perform(h);
	curl_easy_cleanup(h);
	curl_slist_free_all(hl);
}

static void configured_headers(void)
{
	const char *v = getenv("AGENTD_MCP_HEADERS");
	for (const char *s = v; s && *s;) {
		const char *e = strchr(s, '\n');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		char *h = strndup(s, n);
		struct curl_slist *t = h && n ? curl_slist_append(extra, h) : extra;
		if (!h || !t)
			die("out of memory");
		extra = t;
		free(h);
		s += n + (e != NULL);
	}
	unsetenv("AGENTD_MCP_HEADERS");
}

int main(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: agentd-mcp-http URL\n"
		       "MCP's streamable HTTP transport as a stdio server: JSON-RPC lines on stdin are POSTed to URL,\n"
		       "the server's messages written to stdout a line each. Headers to send: AGENTD_MCP_HEADERS,\n"
		       "one 'Name: value' a line. agentd-worker runs it for an [mcp.NAME] section with a url.\n");
		return 0;
	}
	if (argc != 2 || (strncmp(argv[1], "http://", 7) && strncmp(argv[1], "https://", 8))) {
		fprintf(stderr, "usage: agentd-mcp-http URL (http:// or https://)\n");
		return 2;
	}
	url = argv[1];
	configured_headers();
	CURLM *m;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(m = curl_multi_init()))
		die("cannot initialise libcurl");
	fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int eof = 0, running = 0;
	while (!eof || posts) {
		struct curl_waitfd wf = { 0, CURL_WAIT_POLLIN, 0 };
		int nfd;
		if (curl_multi_poll(m, eof ? NULL : &wf, eof ? 0 : 1, 1000, &nfd) != CURLM_OK)
			die("libcurl's multi interface failed");
		if (!eof && wf.revents)
			eof = read_stdin(m, &buf, &len, &cap);
		if (eof) { /* the worker let go of us: what is queued or in flight has no reader */
			for (struct post *p = posts; p; p = posts) {
				p->answered = 1;
				post_done(m, p, CURLE_ABORTED_BY_CALLBACK);
			}
			for (struct post *p = queue; p; p = queue) {
				queue = p->next;
				post_free(p);
			}
			queue_tail = &queue;
		}
		curl_multi_perform(m, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(m, &left)))
			if (msg->msg == CURLMSG_DONE) {
				struct post *p = NULL;
				curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&p);
				post_done(m, p, msg->data.result);
			}
		if (!eof)
			pump(m); /* what waited for an ordered POST that ended */
	}
	end_session();
	json_decref(discovered);
	free(buf);
	curl_multi_cleanup(m);
	curl_slist_free_all(extra);
	curl_global_cleanup();
	return 0;
}
