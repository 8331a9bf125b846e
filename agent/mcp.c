/* mcp.c: MCP servers over stdio, as tools (see mcp.h). */
#include "agent/mcp.h"
#include "agent/isolate.h"
#include "agent/jsonb.h"
#include "agent/proc.h"
#include "common/cmdline.h"
#include "common/jsonmp.h"
#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536
#define ERR_TAIL 4096          /* bytes of a server's stderr kept for messages */
#define RESTART_GAP_MS 1000    /* a failed start is not tried again sooner */
#define CANCEL_WRITE_MS 1000   /* how long a notifications/cancelled may take to write */
#define LIST_PAGES_MAX 1000
#define STOP_GRACE_MS 500      /* after closing its stdin, and again after SIGTERM */    /* tools/list pages: a server that loops on its cursor stops here */

/* Revisions whose tools/list and tools/call we speak (the shapes we read are the same in each). */
static const char *const known_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };

struct server {
	const struct tool_cfg *tc;
	struct proc_child ch;
	int up;              /* initialized and listed: calls may go */
	json_t *tools;       /* the last tools/list, an array; NULL before */
	int stale;           /* notifications/tools/list_changed since that list */
	int resources;       /* initialize declared the resources capability */
	json_int_t next_id;
	char *buf;           /* stdout bytes not yet a whole line */
	size_t len, cap;
	char err[ERR_TAIL + 1]; /* the last bytes of stderr */
	size_t err_len;
	int64_t failed_at;   /* monotonic ms of the last failed start; 0: none */
	char why[600];       /* why it is not up */
};

struct mcp_set {
	const struct config *cfg;
	const struct proc_sandbox *sb;
	char *conv;
	struct server *srv;
	size_t n;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the set --------------------------------------------------------- */

mcp_set *mcp_set_new(const struct config *cfg, const char *conversation, const struct proc_sandbox *sb)
{
	mcp_set *s = calloc(1, sizeof *s);
	if (!s || !(s->conv = strdup(conversation ? conversation : "")))
		goto fail;
	s->cfg = cfg;
	s->sb = sb;
	for (size_t i = 0; i < cfg->ntools; i++)
		s->n += cfg->tools[i].mcp != NULL;
	if (s->n && !(s->srv = calloc(s->n, sizeof *s->srv)))
		goto fail;
	for (size_t i = 0, k = 0; i < cfg->ntools; i++)
		if (cfg->tools[i].mcp)
			s->srv[k++].tc = &cfg->tools[i];
	return s;
fail:
	if (s)
		free(s->conv);
	free(s);
	return NULL;
}

/* Whether the child exited within ms (it is not reaped). */
static int exits_within(struct server *sv, int ms)
{
	int exited, status, signaled, sig;
	for (int waited = 0;; waited += 5) {
		if (proc_child_exited(&sv->ch, &exited, &status, &signaled, &sig) != 0)
			return 1;
		if (waited >= ms)
			return 0;
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
}

/* The stdio transport's shutdown: close its stdin and let it exit, then
 * SIGTERM, then (proc_child_end) SIGKILL to its whole group. A server
 * that died is reaped at once. */
static void srv_down(struct server *sv)
{
	if (sv->ch.pid > 0 && sv->ch.in_fd >= 0) {
		close(sv->ch.in_fd);
		sv->ch.in_fd = -1;
		if (!exits_within(sv, STOP_GRACE_MS)) {
			kill(-sv->ch.pid, SIGTERM);
			(void)exits_within(sv, STOP_GRACE_MS);
		}
	}
	proc_child_end(&sv->ch);
	sv->up = 0;
	sv->len = 0;
}

void mcp_set_free(mcp_set *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		srv_down(&s->srv[i]);
		json_decref(s->srv[i].tools);
		free(s->srv[i].buf);
	}
	free(s->srv);
	free(s->conv);
	free(s);
}

static struct server *srv_of(mcp_set *s, const struct tool_cfg *tc)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->srv[i].tc == tc)
			return &s->srv[i];
	return NULL;
}

const char *mcp_tool_name(const struct tool_cfg *tc, const char *name)
{
	if (!tc || !tc->mcp || !name)
		return NULL;
	size_t n = strlen(tc->mcp->prefix);
	return !strncmp(name, tc->mcp->prefix, n) && name[n] ? name + n : NULL;
}

/* ---- reading and writing --------------------------------------------- */

static void err_take(struct server *sv)
{
	char chunk[CHUNK];
	ssize_t n = read(sv->ch.err_fd, chunk, sizeof chunk);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close(sv->ch.err_fd);
		sv->ch.err_fd = -1;
		return;
	}
	size_t k = (size_t)n;
	const char *p = chunk;
	if (k >= ERR_TAIL) {
		p += k - ERR_TAIL;
		k = ERR_TAIL;
		sv->err_len = 0;
	} else if (sv->err_len + k > ERR_TAIL) {
		size_t drop = sv->err_len + k - ERR_TAIL;
		memmove(sv->err, sv->err + drop, sv->err_len - drop);
		sv->err_len -= drop;
	}
	memcpy(sv->err + sv->err_len, p, k);
	sv->err_len += k;
	sv->err[sv->err_len] = 0;
}

/* stdout into buf. 0, -EPIPE at its end, -EMSGSIZE past the cap, -ENOMEM. */
static int out_take(struct server *sv)
{
	size_t max = sv->tc->out_cap;
	if (sv->cap - sv->len < CHUNK) {
		size_t cap = sv->cap ? sv->cap * 2 : 2 * CHUNK;
		while (cap - sv->len < CHUNK)
			cap *= 2;
		char *b = realloc(sv->buf, cap + 1);
		if (!b)
			return -ENOMEM;
		sv->buf = b;
		sv->cap = cap;
	}
	ssize_t n = read(sv->ch.out_fd, sv->buf + sv->len, CHUNK);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -EPIPE;
	if (n == 0)
		return -EPIPE;
	sv->len += (size_t)n;
	/* Only the line being received can be too long: whole ones are taken first. */
	const char *nl = memrchr(sv->buf, '\n', sv->len);
	size_t partial = nl ? sv->len - (size_t)(nl - sv->buf) - 1 : sv->len;
	return partial > max ? -EMSGSIZE : 0;
}

static int send_msg(struct server *sv, json_t *msg, int64_t deadline);

/* Answer a request the server made: ping, or "not supported" (we declare no
 * client capability, so a server should ask nothing else). */
static void answer_request(struct server *sv, json_t *msg)
{
	const char *method = json_string_value(json_object_get(msg, "method"));
	json_t *id = json_object_get(msg, "id");
	json_t *r = method && !strcmp(method, "ping")
			    ? json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", id, "result")
			    : json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error", "code", -32601,
					"message", "method not supported by agentd");
	if (send_msg(sv, r, now_ms() + CANCEL_WRITE_MS) == -ENOMEM)
		log_warn("mcp %s: out of memory answering its %s request", sv->tc->name, method ? method : "?");
}

/* One line from the server. 1 when it is the response to want (then *resp);
 * -ENOMEM when it could not be read (it may have been that response). */
static int take_line(struct server *sv, const char *line, size_t len, json_int_t want, json_t **resp)
{
	json_t *msg;
	if (jsonmp_loadb(line, len, JSON_REJECT_DUPLICATES, &msg, NULL) == -ENOMEM)
		return -ENOMEM;
	if (!json_is_object(msg)) {
		if (len && !(len == 1 && line[0] == '\r'))
			log_debug("mcp %s: not a JSON-RPC message on stdout: %.100s", sv->tc->name, line);
		json_decref(msg);
		return 0;
	}
	const char *method = json_string_value(json_object_get(msg, "method"));
	json_t *id = json_object_get(msg, "id");
	int got = 0;
	if (method && id) {
		answer_request(sv, msg);
	} else if (method) {
		if (!strcmp(method, "notifications/tools/list_changed"))
			sv->stale = 1;
	} else if (json_is_integer(id) && json_integer_value(id) == want) {
		*resp = json_incref(msg);
		got = 1;
	} /* else a late answer to a request we gave up (cancelled): dropped */
	json_decref(msg);
	return got;
}

/* Handle the whole lines in buf; stop at the one answering want (1), or
 * at one that could not be read (-ENOMEM). */
static int take_lines(struct server *sv, json_int_t want, json_t **resp)
{
	size_t off = 0;
	int got = 0;
	while (got == 0 && off < sv->len) {
		char *nl = memchr(sv->buf + off, '\n', sv->len - off);
		if (!nl)
			break;
		size_t n = (size_t)(nl - (sv->buf + off));
		got = take_line(sv, sv->buf + off, n, want, resp);
		off += n + 1;
	}
	if (off) {
		memmove(sv->buf, sv->buf + off, sv->len - off);
		sv->len -= off;
	}
	return got;
}

/*
 * Read until the response to want arrives (want < 0: none, just take what
 * is there until the deadline). 0 with *resp; -ETIMEDOUT; -EPIPE (the
 * server's stdout ended: it died); -EMSGSIZE; -ECANCELED (on_watch); -ENOMEM.
 */
static int srv_wait(struct server *sv, json_int_t want, int64_t deadline, const struct mcp_watch *w, json_t **resp)
{
	int watch = w && w->on_watch ? w->fd : -1;
	/* At least one look, even past the deadline: a deadline of now takes
	 * what the server wrote meanwhile without waiting. */
	for (int looked = 0;; looked = 1) {
		int got = take_lines(sv, want, resp);
		if (got)
			return got < 0 ? got : 0;
		int64_t left = deadline - now_ms();
		if (left < 0 && looked)
			return -ETIMEDOUT;
		struct pollfd pf[3] = {
			{ sv->ch.out_fd, POLLIN, 0 },
			{ sv->ch.err_fd, POLLIN, 0 },
			{ watch, POLLIN, 0 },
		};
		int n = poll(pf, 3, left < 0 ? 0 : left > 1000000 ? 1000000 : (int)left);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n <= 0)
			continue;
		if (pf[1].revents)
			err_take(sv);
		if (pf[0].revents) {
			int e = out_take(sv);
			if (e == -EPIPE) {
				/* The lines before the end still count (a response, then exit). */
				got = take_lines(sv, want, resp);
				if (got)
					return got < 0 ? got : 0;
				/* Its stderr's last words, before it is reaped. */
				while (sv->ch.err_fd >= 0)
					err_take(sv);
			}
			if (e < 0)
				return e;
		}
		if (pf[2].revents) {
			if (w->on_watch(w->arg))
				return -ECANCELED;
			if (pf[2].revents & (POLLHUP | POLLERR | POLLNVAL))
				watch = -1;
		}
	}
}

/* Write a whole line, reading the server's stdout meanwhile (a server that
 * writes while we write must not block us both). */
static int send_line(struct server *sv, const char *line, size_t len, int64_t deadline)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(sv->ch.in_fd, line + off, len - off);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -EPIPE;
		int64_t left = deadline - now_ms();
		if (left < 0)
			return -ETIMEDOUT;
		struct pollfd pf[2] = { { sv->ch.in_fd, POLLOUT, 0 }, { sv->ch.out_fd, POLLIN, 0 } };
		if (poll(pf, 2, left > 1000000 ? 1000000 : (int)left) > 0 && pf[1].revents) {
			int e = out_take(sv);
			if (e < 0)
				return e;
		}
	}
	return 0;
}

static int send_msg(struct server *sv, json_t *msg, int64_t deadline)
{
	char *s = msg ? jsonmp_dumps(msg, JSON_COMPACT, 0, NULL) : NULL;
	json_decref(msg);
	if (!s)
		return -ENOMEM;
	size_t n = strlen(s);
	char *line = realloc(s, n + 2);
	if (!line) {
		free(s);
		return -ENOMEM;
	}
	line[n] = '\n';
	line[n + 1] = 0;
	int e = send_line(sv, line, n + 1, deadline);
	free(line);
	return e;
}

/* A request; 0 with the response (a new reference, with "result" or
 * "error"). params (stolen) NULL: the caller ran out of memory building
 * them, -ENOMEM (never a request sent with other params). */
static int request(struct server *sv, const char *method, json_t *params, int64_t deadline,
		   const struct mcp_watch *w, json_int_t *idp, json_t **resp)
{
	json_int_t id = ++sv->next_id;
	if (idp)
		*idp = id;
	if (!params)
		return -ENOMEM;
	json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method", method, "params",
				params);
	int e = send_msg(sv, msg, deadline);
	return e ? e : srv_wait(sv, id, deadline, w, resp);
}

static void notify_cancelled(struct server *sv, json_int_t id, const char *reason)
{
	json_t *n = json_pack("{s:s, s:s, s:{s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/cancelled",
			      "params", "requestId", id, "reason", reason);
	if (send_msg(sv, n, now_ms() + CANCEL_WRITE_MS))
		log_warn("mcp %s: could not send notifications/cancelled for request %lld", sv->tc->name,
			 (long long)id);
}

/* "MCP error -32602: message" from a JSON-RPC error object. */
static json_t *rpc_error(const json_t *err)
{
	const char *m = json_string_value(json_object_get(err, "message"));
	json_t *r = json_pack("{s:o, s:O}", "error",
			      json_sprintf("MCP error %lld: %s", (long long)json_integer_value(json_object_get(err, "code")),
					   m ? m : "(no message)"),
			      "code", json_object_get(err, "code") ? json_object_get(err, "code") : json_null());
	if (r && json_object_get(err, "data") && json_object_set(r, "data", json_object_get(err, "data"))) {
		json_decref(r);
		return NULL;
	}
	return r;
}

/* ---- starting, listing ----------------------------------------------- */

/* How the child ended, for messages: "exited with status 1" / "was killed by signal 9". */
static void describe_exit(struct server *sv, char *out, size_t len)
{
	int exited = 0, status = 0, signaled = 0, sig = 0;
	/* Its stdout ended: it exits now, if it has not yet (or closed
	 * stdout and runs on: then it is killed by srv_down). */
	if (sv->ch.pid > 0 && exits_within(sv, STOP_GRACE_MS))
		(void)proc_child_exited(&sv->ch, &exited, &status, &signaled, &sig);
	if (exited)
		snprintf(out, len, "exited with status %d", status);
	else if (signaled)
		snprintf(out, len, "was killed by signal %d", sig);
	else
		snprintf(out, len, "closed its stdout");
}

static void set_why(struct server *sv, const char *fmt, const char *detail)
{
	snprintf(sv->why, sizeof sv->why, fmt, sv->tc->name, detail);
}

static int list_tools(struct server *sv, int64_t deadline, const struct mcp_watch *w)
{
	json_t *all = json_array();
	json_t *cursor = NULL;
	if (!all)
		return -ENOMEM;
	sv->stale = 0; /* a change announced from here on is after this list */
	for (int page = 0; page < LIST_PAGES_MAX; page++) {
		json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : json_object();
		json_decref(cursor);
		cursor = NULL;
		json_t *resp = NULL;
		int e = request(sv, "tools/list", params, deadline, w, NULL, &resp);
		if (e) {
			json_decref(all);
			return e;
		}
		json_t *res = json_object_get(resp, "result");
		json_t *tools = json_object_get(res, "tools");
		if (!json_is_array(tools)) {
			json_t *er = json_object_get(resp, "error");
			char *d = jsonmp_dumps(er ? er : resp, JSON_COMPACT, 0, NULL);
			set_why(sv, "MCP server %s cannot start: tools/list failed: %.300s", d ? d : "?");
			free(d);
			json_decref(resp);
			json_decref(all);
			return -EPROTO;
		}
		size_t i;
		json_t *t;
		json_array_foreach(tools, i, t)
			if (json_is_string(json_object_get(t, "name")) && json_array_append(all, t))
				e = -ENOMEM; /* never a list short of a tool */
		if (e) {
			json_decref(resp);
			json_decref(all);
			return e;
		}
		json_t *next = json_object_get(res, "nextCursor");
		if (json_is_string(next) && json_string_length(next))
			cursor = json_incref(next);
		json_decref(resp);
		if (!cursor)
			break;
	}
	json_decref(cursor);
	json_decref(sv->tools);
	sv->tools = all;
	return 0;
}

/* A url server's argv: agentd-mcp-http, beside this program, and the url. */
static int http_argv(const struct mcp_cfg *m, char ***argv)
{
	char path[4096];
	char **v = calloc(3, sizeof *v);
	if (v && (v[0] = strdup(proc_beside_self("agentd-mcp-http", path, sizeof path))) && (v[1] = strdup(m->url)))
		return *argv = v, 0;
	if (v)
		free(v[0]);
	free(v);
	return -ENOMEM;
}

/* A url server's headers for agentd-mcp-http: AGENTD_MCP_HEADERS, one a
 * line, into *out (NULL when there are none). 0 or -ENOMEM. */
static int headers_env(const struct mcp_cfg *m, char **out)
{
	size_t n = sizeof "AGENTD_MCP_HEADERS=";
	*out = NULL;
	for (char **h = m->headers; h && *h; h++)
		n += strlen(*h) + 1;
	if (!m->headers || !m->headers[0] || !(*out = malloc(n)))
		return m->headers && m->headers[0] ? -ENOMEM : 0;
	char *p = stpcpy(*out, "AGENTD_MCP_HEADERS=");
	for (char **h = m->headers; *h; h++)
		p = stpcpy(stpcpy(p, *h), h[1] ? "\n" : "");
	return 0;
}

static int split_argv(const struct mcp_cfg *m, char ***argv)
{
	char **a = NULL, **b = NULL;
	*argv = NULL;
	if (m->url)
		return http_argv(m, argv);
	int e = cmdline_split(m->command, &a);
	if (!e && m->args)
		e = cmdline_split(m->args, &b);
	size_t na = 0, nb = 0;
	while (!e && a[na])
		na++;
	while (!e && b && b[nb])
		nb++;
	char **v = e ? NULL : calloc(na + nb + 1, sizeof *v);
	for (size_t i = 0; v && i < na + nb; i++)
		if (!(v[i] = strdup(i < na ? a[i] : b[i - na]))) {
			for (size_t k = 0; k < i; k++)
				free(v[k]);
			free(v);
			v = NULL;
		}
	cmdline_free(a);
	cmdline_free(b);
	if (!v)
		return e ? e : -ENOMEM;
	*argv = v;
	return 0;
}

static void free_argv(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

static int handshake(struct server *sv, int64_t deadline, const struct mcp_watch *w)
{
	json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_VERSION, "capabilities",
				   "clientInfo", "name", "agentd", "version", "0.1.0");
	json_t *resp = NULL;
	int e = request(sv, "initialize", params, deadline, w, NULL, &resp);
	if (e)
		return e;
	const char *v = json_string_value(json_object_get(json_object_get(resp, "result"), "protocolVersion"));
	int known = 0;
	for (size_t i = 0; v && i < sizeof known_versions / sizeof *known_versions; i++)
		known |= !strcmp(v, known_versions[i]);
	if (!known) {
		json_t *er = json_object_get(resp, "error");
		char *d = er ? jsonmp_dumps(er, JSON_COMPACT, 0, NULL) : NULL;
		char detail[400];
		snprintf(detail, sizeof detail, "%s%.300s", d ? "" : "protocol version not supported: ",
			 d ? d : v ? v : "(none)");
		set_why(sv, "MCP server %s cannot start: initialize failed: %s", detail);
		free(d);
		json_decref(resp);
		return -EPROTO;
	}
	sv->resources = json_is_object(json_object_get(
		json_object_get(json_object_get(resp, "result"), "capabilities"), "resources"));
	json_decref(resp);
	json_t *n = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
	return send_msg(sv, n, deadline);
}

/* A failure's reason, with the end of the server's stderr. */
static void why_from(struct server *sv, int e)
{
	char how[100], detail[200];
	if (e == -EPROTO && sv->why[0])
		return; /* already said */
	if (e == -EPIPE) {
		describe_exit(sv, how, sizeof how);
		snprintf(detail, sizeof detail, "it %s during the handshake", how);
	} else if (e == -ETIMEDOUT) {
		snprintf(detail, sizeof detail, "no answer within start_timeout (%lld ms)",
			 (long long)sv->tc->mcp->start_timeout_ms);
	} else if (e == -EMSGSIZE) {
		snprintf(detail, sizeof detail, "a message over output_cap (%zu bytes)", sv->tc->out_cap);
	} else {
		snprintf(detail, sizeof detail, "%s", strerror(-e));
	}
	set_why(sv, "MCP server %s cannot start: %s", detail);
	if (sv->err_len) {
		size_t n = strlen(sv->why);
		snprintf(sv->why + n, sizeof sv->why - n, "; stderr: %.300s", sv->err);
	}
}

/* Start, initialize and list. 0; -ECANCELED; another negative code with sv->why. */
static int srv_start(mcp_set *s, struct server *sv, const struct mcp_watch *w)
{
	if (sv->failed_at && now_ms() - sv->failed_at < RESTART_GAP_MS)
		return -EAGAIN; /* why: the last failure's */
	char **argv = NULL;
	char env1[200], *env2 = NULL;
	snprintf(env1, sizeof env1, "AGENTD_CONVERSATION=%s", s->conv);
	int e = headers_env(sv->tc->mcp, &env2);
	const char *env[] = { env1, env2, NULL };
	struct proc_opts o = { .env_add = env, .iso = &sv->tc->iso, .sandbox = s->sb, .watch_fd = -1 };
	sv->why[0] = 0;
	sv->err_len = 0;
	sv->err[0] = 0;
	sv->len = 0;
	sv->stale = 0;
	if (!e)
		e = split_argv(sv->tc->mcp, &argv);
	if (!e)
		e = proc_spawn(argv, &o, &sv->ch);
	free_argv(argv);
	free(env2);
	if (e) {
		char d[300];
		const struct isolate_cfg *iso = &sv->tc->iso;
		if (e == -EPERM && (iso->user || iso->group))
			snprintf(d, sizeof d, "cannot run it as %s %s (agentd is not root?): %s", iso->user ? "user" : "group",
				 iso->user ? iso->user : iso->group, strerror(-e));
		else
			isolate_strerror(e, d, sizeof d);
		set_why(sv, "MCP server %s cannot start: %s", d);
		goto fail;
	}
	int64_t deadline = now_ms() + sv->tc->mcp->start_timeout_ms;
	if ((e = handshake(sv, deadline, w)) == 0)
		e = list_tools(sv, deadline, w);
	if (e) {
		if (e != -ECANCELED)
			why_from(sv, e);
		srv_down(sv);
		goto fail;
	}
	sv->up = 1;
	sv->failed_at = 0;
	log_info("mcp %s: started (pid %d), %zu tools", sv->tc->name, (int)sv->ch.pid, json_array_size(sv->tools));
	return 0;
fail:
	if (e == -ECANCELED)
		return e;
	sv->failed_at = now_ms();
	if (!sv->failed_at)
		sv->failed_at = 1;
	log_warn("%s", sv->why);
	return e;
}

/* Is it still there? Takes what it wrote meanwhile (a list_changed), and
 * notices a death: EOF on stdout, or its exit. */
static int srv_alive(struct server *sv)
{
	if (!sv->up)
		return 0;
	int exited, status, signaled, sig;
	json_t *none = NULL;
	int e = srv_wait(sv, -1, now_ms() - 1, NULL, &none);
	if (e == -ETIMEDOUT && proc_child_exited(&sv->ch, &exited, &status, &signaled, &sig) == 0)
		return 1;
	char how[100];
	describe_exit(sv, how, sizeof how);
	log_warn("mcp %s: the server %s since its last call; it starts again now", sv->tc->name, how);
	srv_down(sv);
	return 0;
}

static int srv_ensure(mcp_set *s, struct server *sv, const struct mcp_watch *w)
{
	if (srv_alive(sv))
		return 0;
	return srv_start(s, sv, w);
}

/* ---- offering -------------------------------------------------------- */

/* The server's tools, as render_turn's tools, into out. -ENOMEM: one could
 * not be added. */
/* ---- resources, offered as two tools -------------------------------- */

/* The tools that stand for a server's resources/list and resources/read
 * (docs/tools.md, "Resources"), offered when initialize declared the
 * resources capability and the server lists no tool of the same name. */
static const struct {
	const char *name, *method, *description, *schema;
} res_tools[] = {
	{ "list_resources", "resources/list",
	  "Lists the resources this server offers (uri, name, description, mimeType); pass nextCursor back as "
	  "cursor for the next page.",
	  "{\"type\": \"object\", \"properties\": {\"cursor\": {\"type\": \"string\"}}}" },
	{ "read_resource", "resources/read", "Reads one resource of this server by its uri.",
	  "{\"type\": \"object\", \"properties\": {\"uri\": {\"type\": \"string\"}}, \"required\": [\"uri\"]}" },
};

/* The tool named name in sv's last tools/list, or NULL. */
static json_t *listed_tool(const struct server *sv, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(sv->tools, i, t)
		if (json_is_string(json_object_get(t, "name")) && !strcmp(json_string_value(json_object_get(t, "name")), name))
			return t;
	return NULL;
}

/* The resources method tool stands for on sv, or NULL. */
static const char *res_method(const struct server *sv, const char *tool)
{
	for (size_t i = 0; sv->resources && tool && i < sizeof res_tools / sizeof *res_tools; i++)
		if (!strcmp(tool, res_tools[i].name) && !listed_tool(sv, tool))
			return res_tools[i].method;
	return NULL;
}

static void offer_resources(struct server *sv, json_t *out, int *oom)
{
	for (size_t i = 0; i < sizeof res_tools / sizeof *res_tools; i++)
		if (res_method(sv, res_tools[i].name))
			jb_append(oom, out,
				  json_pack("{s:o, s:s, s:s, s:o}", "name",
					    json_sprintf("%s%s", sv->tc->mcp->prefix, res_tools[i].name), "description",
					    res_tools[i].description, "executor", "server", "input_schema",
					    json_loads(res_tools[i].schema, 0, NULL)));
}

/* The text items of a tools/call result's content (any: every item with a
 * "text", as resources/read's contents have no type), one a line, into
 * *text (free it); -ENOMEM. *texts and *others count the items. */
static int result_text(const json_t *content, int any, char **text, size_t *tlen, int *texts, int *others)
{
	*text = NULL;
	*tlen = 0;
	*texts = *others = 0;
	FILE *f = open_memstream(text, tlen);
	if (!f)
		return -ENOMEM;
	size_t i;
	json_t *c;
	json_array_foreach(content, i, c) {
		const char *type = json_string_value(json_object_get(c, "type"));
		const char *s = json_string_value(json_object_get(c, "text"));
		if (s && (any || (type && !strcmp(type, "text"))))
			fprintf(f, "%s%s", (*texts)++ ? "\n" : "", s);
		else
			(*others)++;
	}
	/* A write that failed leaves the text short: ferror keeps it. */
	int bad = ferror(f);
	if (fclose(f) || bad || !*text) {
		free(*text);
		*text = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* A resources/read result as a tool result: the text contents joined as
 * "text", every item in "contents" (blobs, mime types, uris); resources/list's
 * as the server sent it. */
static json_t *res_result(const char *method, const json_t *res)
{
	if (strcmp(method, "resources/read"))
		return json_is_object(res) ? json_deep_copy(res) : json_object();
	json_t *contents = json_object_get(res, "contents");
	char *text;
	size_t tlen;
	int texts, others;
	if (result_text(contents, 1, &text, &tlen, &texts, &others))
		return NULL;
	int oom = 0;
	json_t *r = jb_check(&oom, json_object());
	if (texts)
		jb_set(&oom, r, "text", json_stringn(text, tlen));
	free(text);
	jb_set(&oom, r, "contents", json_is_array(contents) ? json_incref(contents) : json_array());
	return jb_done(oom, r);
}

static int offer_server(struct server *sv, json_t *out)
{
	size_t i;
	json_t *t;
	int oom = 0;
	offer_resources(sv, out, &oom);
	json_array_foreach(sv->tools, i, t) {
		json_t *schema = json_object_get(t, "inputSchema");
		json_t *desc = json_object_get(t, "description");
		/* "o" steals a reference: borrowed values are increfed first. */
		jb_append(&oom, out,
			  json_pack("{s:o, s:o, s:s, s:o}", "name",
				    json_sprintf("%s%s", sv->tc->mcp->prefix, json_string_value(json_object_get(t, "name"))),
				    "description", json_is_string(desc) ? json_incref(desc) : json_string(""), "executor",
				    "server", "input_schema",
				    json_is_object(schema) ? json_incref(schema) : json_pack("{s:s}", "type", "object")));
	}
	return oom ? -ENOMEM : 0;
}

int mcp_offer(mcp_set *s, json_t *tools, const struct mcp_watch *w)
{
	if (!s || !s->n || !json_is_array(tools))
		return 0;
	json_t *out = json_array();
	if (!out)
		return -ENOMEM;
	size_t i;
	json_t *t;
	int oom = 0;
	json_array_foreach(tools, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		const struct tool_cfg *tc = name ? config_tool(s->cfg, name) : NULL;
		struct server *sv = tc && tc->mcp ? srv_of(s, tc) : NULL;
		if (!sv) {
			if (json_array_append(out, t))
				oom = 1;
			continue;
		}
		int e = srv_ensure(s, sv, w);
		if (!e && sv->stale) {
			int64_t deadline = now_ms() + sv->tc->mcp->start_timeout_ms;
			e = list_tools(sv, deadline, w);
			if (e && e != -ECANCELED) {
				log_warn("mcp %s: tools/list after list_changed failed (%s): keeping the last list",
					 sv->tc->name, strerror(-e));
				if (e == -EPIPE || e == -EMSGSIZE || e == -ETIMEDOUT)
					srv_down(sv);
				e = 0;
			}
		}
		if (e == -ECANCELED)
			break;
		if (e == -ENOMEM || (sv->tools && offer_server(sv, out)))
			oom = 1; /* not a server that cannot start: a turn short of its tools */
	}
	/* Out of memory: the caller fails the turn (tools may be half replaced). */
	if (oom || json_array_clear(tools) || json_array_extend(tools, out)) {
		json_decref(out);
		return -ENOMEM;
	}
	json_decref(out);
	return 0;
}

/* ---- calling --------------------------------------------------------- */


/* A tools/call result as the tool result (docs/tools.md); NULL when out of
 * memory (never a result with a part left out). */
static json_t *call_result(const json_t *res, int *is_error)
{
	json_t *content = json_object_get(res, "content");
	json_t *structured = json_object_get(res, "structuredContent");
	*is_error = json_is_true(json_object_get(res, "isError"));
	char *text;
	size_t tlen;
	int texts, others;
	if (result_text(content, 0, &text, &tlen, &texts, &others))
		return NULL;
	int oom = 0;
	json_t *r = jb_check(&oom, json_object());
	if (texts)
		jb_set(&oom, r, *is_error ? "error" : "text", json_stringn(text, tlen));
	else if (*is_error)
		jb_set(&oom, r, "error", json_string("the tool reported an error"));
	free(text);
	if (structured)
		jb_set(&oom, r, "structuredContent", json_incref(structured));
	if (others || (!texts && !structured))
		jb_set(&oom, r, "content", json_is_array(content) ? json_incref(content) : json_array());
	return jb_done(oom, r);
}

static void on_start(const struct mcp_watch *w, pid_t pid)
{
	if (w && w->on_start)
		w->on_start(w->arg, pid);
}

/* A hint of the annotations: 1 true, 0 false, -1 absent (or not a boolean). */
static int hint(const json_t *ann, const char *key)
{
	json_t *v = json_object_get(ann, key);
	return json_is_boolean(v) ? json_is_true(v) : -1;
}

int mcp_tool_idempotent(mcp_set *s, const struct tool_cfg *tc, const char *tool, const struct mcp_watch *w)
{
	if (!tc || !tc->mcp || !tool)
		return 0;
	/* Said by the configuration: no server needed. */
	int said = config_mcp_idempotent(tc, tool, 0, 0);
	if (said == config_mcp_idempotent(tc, tool, 1, 1))
		return said;
	struct server *sv = s ? srv_of(s, tc) : NULL;
	if (!sv || srv_ensure(s, sv, w))
		return config_mcp_idempotent(tc, tool, -1, -1);
	if (res_method(sv, tool))
		return config_mcp_idempotent(tc, tool, 1, 1); /* reads */
	json_t *t = listed_tool(sv, tool);
	if (!t)
		return config_mcp_idempotent(tc, tool, -1, -1);
	json_t *ann = json_object_get(t, "annotations");
	return config_mcp_idempotent(tc, tool, hint(ann, "readOnlyHint"), hint(ann, "idempotentHint"));
}

int mcp_call(mcp_set *s, const struct tool_cfg *tc, const char *tool, json_t *args, const struct mcp_watch *w,
	     json_t **result, int *is_error)
{
	return mcp_call_meta(s, tc, tool, args, NULL, w, result, is_error);
}

int mcp_call_meta(mcp_set *s, const struct tool_cfg *tc, const char *tool, json_t *args, const json_t *meta,
		  const struct mcp_watch *w, json_t **result, int *is_error)
{
	struct server *sv = s && tc ? srv_of(s, tc) : NULL;
	if (!sv || !tool || !result || !is_error || (args && !json_is_object(args)))
		return -EINVAL;
	*result = NULL;
	*is_error = 1;
	int e = srv_ensure(s, sv, w);
	if (e == -ECANCELED)
		return e;
	if (e) {
		*result = json_pack("{s:s}", "error", sv->why);
		return *result ? 0 : -ENOMEM;
	}
	on_start(w, sv->ch.pid);
	const char *method = res_method(sv, tool);
	json_t *params = method ? (args ? json_deep_copy(args) : json_object())
				: json_pack("{s:s, s:o}", "name", tool, "arguments", args ? json_incref(args) : json_object());
	if (params && meta && json_object_set(params, "_meta", (json_t *)meta)) {
		json_decref(params);
		params = NULL;
	}
	json_int_t id = 0;
	json_t *resp = NULL;
	e = request(sv, method ? method : "tools/call", params, now_ms() + tc->timeout_ms, w, &id, &resp);
	on_start(w, 0);
	switch (e) {
	case 0:
		if (json_object_get(resp, "error"))
			*result = rpc_error(json_object_get(resp, "error"));
		else if (method)
			*is_error = 0, *result = res_result(method, json_object_get(resp, "result"));
		else
			*result = call_result(json_object_get(resp, "result"), is_error);
		json_decref(resp);
		break;
	case -ECANCELED:
		/* The worker stops: the server drops the call, and it is
		 * dispatched again (same id) when the conversation revives. */
		notify_cancelled(sv, id, "the agentd worker is stopping");
		return e;
	case -ETIMEDOUT:
		notify_cancelled(sv, id, "timed out");
		*result = json_pack("{s:o}", "error", json_sprintf("timed out after %lld ms", (long long)tc->timeout_ms));
		break;
	case -EPIPE: {
		char how[100];
		describe_exit(sv, how, sizeof how);
		*result = json_pack("{s:o, s:s}", "error",
				    json_sprintf("MCP server %s %s during the call; it starts again at the next call", tc->name,
						 how),
				    "stderr", sv->err);
		log_warn("mcp %s: the server %s during call %lld", tc->name, how, (long long)id);
		srv_down(sv);
		break;
	}
	case -EMSGSIZE:
		*result = json_pack("{s:o}", "error", json_sprintf("MCP server %s sent a message over output_cap (%zu bytes); "
								   "it starts again at the next call", tc->name, tc->out_cap));
		srv_down(sv);
		break;
	default:
		*result = json_pack("{s:o}", "error", json_sprintf("MCP server %s: %s", tc->name, strerror(-e)));
		srv_down(sv);
		break;
	}
	return *result ? 0 : -ENOMEM;
}
