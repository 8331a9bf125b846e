/* run.c: a command run against agentd (agentctl.h): the connection through
 * client/ctl.h, the request and its reply, the pages of a long log, a
 * watch's stream, and pending's walk over several requests. */
#include "agentctl/agentctl.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/ctl.h"
#include "common/jsonmp.h"

/* ------------------------------------------------------------------------ */
/* The connection                                                           */

static struct conn {
	ctl_conn *c;      /* client/ctl.h */
	const char *path;
	int64_t budget;   /* ms the deadline allowed, for the message */
} conn;                   /* file scope: see `held` */

static volatile sig_atomic_t interrupted;

/* ------------------------------------------------------------------------ */
/* Running a command                                                        */

/* Milliseconds as seconds for a message: "60", "1.5", "3660". */
static const char *secs_text(int64_t ms)
{
	static char buf[48];
	int n = snprintf(buf, sizeof buf, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
	while (n > 0 && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && buf[n - 1] == '.')
		buf[--n] = '\0';
	return buf;
}

/* The line as JSON, or NULL when it is none. */
static json_t *parse_line(const char *line, size_t len)
{
	json_t *v;
	return ctl_parse_line(line, len, &v) == 0 ? v : NULL;
}

static void print_line(const char *line, size_t len)
{
	fwrite(line, 1, len, stdout);
	putchar('\n');
}

/* While a watch writes (signals let in, see stream), a signal ends it at
 * once: a write to a reader that stopped reading may never return, and one
 * that returns part of its bytes is simply retried by stdio. */
static volatile sig_atomic_t in_output;

static void on_signal(int sig)
{
	(void)sig;
	if (in_output)
		_exit(EXIT_OK);
	interrupted = 1;
}

static _Noreturn void conn_fail(const struct conn *c, const char *what, int err)
{
	if (err == -ENOMEM)
		fail("out of memory");
	if (err == -ETIMEDOUT)
		fail("no reply from agentd within %s s (see --timeout)", secs_text(c->budget));
	fail("%s %s: %s", what, c->path, strerror(-err));
}

static void open_one(struct conn *c, const char *path, const struct options *o);

/* The defaults: the first that accepts a connection. A path with nothing
 * there, or only a dead agentd's socket file, is passed over; any other
 * failure (a permission, a full backlog) is that agentd's and is reported. */
static void open_or_fail(struct conn *c, const struct sockets *ss, const struct options *o)
{
	if (ss->n == 1) {
		open_one(c, ss->path[0], o);
		return;
	}
	int err[2];
	for (int k = 0; k < ss->n; k++) {
		err[k] = ctl_connect(ss->path[k], o->timeout_ms, &c->c);
		c->path = ss->path[k];
		if (err[k] == 0)
			return;
		if (err[k] != -ENOENT && err[k] != -ECONNREFUSED) {
			open_one(c, ss->path[k], o); /* says why, and exits */
			return;
		}
	}
	fail("cannot connect to agentd: tried %s (%s) and %s (%s); is agentd running? Give its socket with -s "
	     "SOCKET or $AGENTD_SOCKET", ss->path[0], strerror(-err[0]), ss->path[1], strerror(-err[1]));
}

static void open_one(struct conn *c, const char *path, const struct options *o)
{
	int r = ctl_connect(path, o->timeout_ms, &c->c);
	c->path = path;
	if (r == -ENAMETOOLONG)
		fail("socket path too long (%zu bytes; a Unix socket path holds at most %zu): %s", strlen(path),
		     sizeof(((struct sockaddr_un *)0)->sun_path) - 1, path);
	if (r == -EAGAIN)
		fail("cannot connect to %s: timed out (agentd is not accepting connections)", path);
	if (r < 0)
		fail("cannot connect to %s: %s%s", path, strerror(-r),
		     r == -ENOENT || r == -ECONNREFUSED ? " (is agentd running?)"
		     : r == -EACCES			? " (the socket is mode 0600: run agentctl as agentd's user)"
							: "");
}

/* After the watch reply: print each streamed line until agentd closes the
 * stream or the user interrupts. Both end the watch normally. */
static _Noreturn void stream(struct conn *c, const sigset_t *mask, bool raw)
{
	for (;;) {
		const char *line;
		size_t len;
		int r = ctl_watch_next(c->c, -1, -1, &line, &len);
		if (r == -EINTR)
			exit(EXIT_OK);
		if (r == -ECONNRESET) {
			/* Not the user's doing: say so, or a script cannot tell this
			 * end from a quiet conversation. */
			check_stdout(EXIT_OK);
			warn("agentd ended the watch (it stopped, or the conversation was deleted)");
			exit(EXIT_OK);
		}
		if (r < 0)
			conn_fail(c, "reading from", r);
		/* Writing may block on a reader that does not read: SIGINT and
		 * SIGTERM get in meanwhile (they interrupt the write). */
		sigset_t blocked;
		in_output = 1;
		sigprocmask(SIG_SETMASK, mask, &blocked);
		json_t *v = raw ? NULL : parse_line(line, len);
		const json_t *ev = json_object_get(v, "event");
		const json_t *delta = json_object_get(v, "delta");
		const json_t *run = json_object_get(v, "run");
		if (json_is_object(ev)) {
			print_event(ev);
		} else if (delta) {
			char *t = dump(delta);
			printf("- delta %s\n", t);
			free(t);
		} else if (json_is_object(run)) {
			char *t = dump(run);
			printf("- run %s\n", t);
			free(t);
		} else {
			print_line(line, len);
		}
		json_decref(v);
		check_stdout(EXIT_OK);
		sigprocmask(SIG_SETMASK, &blocked, NULL);
		in_output = 0;
	}
}

/* Send one request line and read its reply (held, for the exit paths). */
static json_t *exchange(struct conn *c, const char *request, const char **line, size_t *len)
{
	int r = ctl_send_line(c->c, request);
	if (r == -EINTR)
		exit(EXIT_OK);
	if (r < 0 && r != -EPIPE) /* after EPIPE agentd may still have replied: read on */
		conn_fail(c, "writing to", r);
	json_t *reply = NULL;
	while (!reply) {
		r = ctl_read_line(c->c, line, len);
		if (r == -EINTR)
			exit(EXIT_OK);
		if (r == -ECONNRESET)
			fail("agentd closed the connection without replying");
		if (r < 0)
			conn_fail(c, "reading from", r);
		reply = held.reply = parse_line(*line, *len);
		if (!json_is_object(reply) || !json_object_get(reply, "ok")) {
			warn("ignoring a line that is not a reply: %.80s%s", *line, *len > 80 ? "..." : "");
			json_decref(reply);
			reply = held.reply = NULL;
		}
	}
	return reply;
}

static void print_ids(const json_t *reply, const char *spec);
static void print_reply_error(const json_t *reply);

/* approve and deny always send the digest of the args they decide on
 * (docs/protocol.md, resolve's args_digest): the one given, else the one
 * agentd shows for the call now (tool_call, on the same connection). A
 * call agentd does not know is left to the resolve to refuse (stale).
 * Returns the request to send: request itself, or a new line (held). */
static const char *with_digest(struct conn *c, const char *request)
{
	json_t *rq = must(json_loads(request, 0, NULL));
	if (json_object_get(rq, "args_digest")) {
		json_decref(rq);
		return request;
	}
	json_t *ask = must(json_pack("{sisssO}", "id", 0, "op", "tool_call", "tool_call_id",
				     json_object_get(rq, "tool_call_id")));
	char *line = must(jsonmp_dumps(ask, SEND_FLAGS, 0, NULL));
	json_decref(ask);
	const char *rl;
	size_t rlen;
	json_t *reply = exchange(c, line, &rl, &rlen);
	free(line);
	const char *code = json_string_value(json_object_get(reply, "error"));
	const json_t *d = json_object_get(json_object_get(reply, "tool_call"), "args_digest");
	if (!json_is_true(json_object_get(reply, "ok")) && !(code && !strcmp(code, "not_found"))) {
		print_reply_error(reply);
		exit(EXIT_REPLY);
	}
	if (json_is_string(d))
		put(rq, "args_digest", json_incref((json_t *)d));
	json_decref(reply);
	held.reply = NULL;
	free(held.request);
	held.request = must(jsonmp_dumps(rq, SEND_FLAGS, 0, NULL));
	json_decref(rq);
	return held.request;
}
static void word_after(const struct command *cmd, const char *request, const json_t *reply);

int run(const struct command *cmd, const struct sockets *ss, const char *request, int64_t extra_ms,
	       const struct options *o)
{
	struct conn *c = &conn;
	sigset_t block, orig;
	bool watch = cmd->flags & CMD_WATCH;

	if (watch) {
		/* SIGINT and SIGTERM stay blocked except inside ppoll, so one that
		 * arrives between two waits is not lost: it interrupts the next. */
		struct sigaction sa = {.sa_handler = on_signal};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigemptyset(&block);
		sigaddset(&block, SIGINT);
		sigaddset(&block, SIGTERM);
		sigprocmask(SIG_BLOCK, &block, &orig);
	}
	open_or_fail(c, ss, o);
	ctl_set_signals(c->c, watch ? &orig : NULL, &interrupted);
	if (o->timeout_ms > 0) {
		c->budget = o->timeout_ms + extra_ms;
		ctl_set_timeout(c->c, c->budget);
	}

	if (cmd->flags & CMD_DIGEST)
		request = with_digest(c, request);
	const char *line = NULL;
	size_t len = 0;
	json_t *reply = exchange(c, request, &line, &len);
	bool ok = json_is_true(json_object_get(reply, "ok"));
	if (o->json || (cmd->flags & CMD_RAW))
		print_line(line, len);
	else if (ok && o->quiet)
		print_ids(reply, cmd->ids);
	else if (ok && cmd->show)
		cmd->show(reply);
	/* A long log comes in pages (next_after): readable output shows it
	 * all; --json prints the one reply, next_after included. */
	while (ok && cmd->show == show_events && !o->json && json_integer_value(json_object_get(reply, "next_after")) > 0) {
		json_t *rq = must(json_loads(request, 0, NULL));
		if (json_object_set(rq, "after", json_object_get(reply, "next_after")))
			fail("out of memory"); /* the same page again, for ever */
		json_object_del(rq, "wait_ms"); /* the wait was met by the first page */
		char *next = must(jsonmp_dumps(rq, JSON_COMPACT, 0, NULL));
		json_decref(rq);
		json_decref(reply);
		reply = exchange(c, next, &line, &len);
		free(next);
		ok = json_is_true(json_object_get(reply, "ok"));
		if (ok && o->quiet)
			print_ids(reply, cmd->ids);
		else if (ok)
			cmd->show(reply);
	}
	if (ok)
		word_after(cmd, request, reply);
	if (!ok)
		print_reply_error(reply);
	check_stdout(ok ? EXIT_OK : EXIT_REPLY);
	if (ok && watch)
		stream(c, &orig, o->json); /* does not return */
	json_decref(reply);
	held.reply = NULL;
	ctl_close(c->c);
	c->c = NULL;
	return ok ? EXIT_OK : EXIT_REPLY;
}

/* -q: the ids a script wants, one a line. spec "FIELD" prints that member;
 * "ARRAY/FIELD" prints FIELD of each row of ARRAY. */
static void print_ids(const json_t *reply, const char *spec)
{
	char arr[64];
	const char *slash = spec ? strchr(spec, '/') : NULL;
	if (!spec)
		return;
	if (!slash && strchr(spec, ',')) { /* "a,b": the first field the reply has */
		size_t n = strcspn(spec, ",");
		snprintf(arr, sizeof arr, "%.*s", (int)n, spec);
		print_ids(reply, json_object_get(reply, arr) ? arr : spec + n + 1);
		return;
	}
	if (!slash && json_is_array(json_object_get(reply, spec))) { /* one per line */
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(reply, spec), i, v) {
			char *t = text_of(v, "null");
			puts(t);
			free(t);
		}
		return;
	}
	if (!slash) {
		const json_t *v = json_object_get(reply, spec);
		if (v && !json_is_null(v)) {
			char *t = text_of(v, "null");
			puts(t);
			free(t);
		}
		return;
	}
	snprintf(arr, sizeof arr, "%.*s", (int)(slash - spec), spec);
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(reply, arr), i, row) {
		char *t = text_of(json_object_get(row, slash + 1), "-");
		puts(t);
		free(t);
	}
}

/* A long-poll that timed out is a success with nothing in it: say so on
 * stderr, so a person sees the wait ended and a script's stdout stays empty. */
static void word_after(const struct command *cmd, const char *request, const json_t *reply)
{
	if (cmd->show != show_events || json_array_size(json_object_get(reply, "events")) > 0)
		return;
	json_t *rq = json_loads(request, 0, NULL);
	const json_t *w = json_object_get(rq, "wait_ms");
	if (w && json_integer_value(w) > 0)
		warn("no event after seq %lld within %s s", (long long)json_integer_value(json_object_get(rq, "after")),
		     secs_text(json_integer_value(w)));
	json_decref(rq);
}

static void print_reply_error(const json_t *reply)
{
	const char *code = json_string_value(json_object_get(reply, "error"));
	const char *msg = json_string_value(json_object_get(reply, "message"));
	/* Exactly "agentctl: CODE: message": scripts match on it. */
	fprintf(stderr, "agentctl: %s%s%s\n", code ? code : "error", msg ? ": " : "", msg ? msg : "");
}

/* One request of pending's; the reply (held), or NULL after printing its
 * error when it is not ok (not_found too, when not_found_ok is unset). */
static json_t *pending_ask(struct conn *c, json_t *rq, bool not_found_ok)
{
	char *req = must(jsonmp_dumps(rq, SEND_FLAGS, 0, NULL));
	const char *line;
	size_t len;
	json_decref(rq);
	json_t *reply = exchange(c, req, &line, &len);
	free(req);
	if (json_is_true(json_object_get(reply, "ok")))
		return reply;
	const char *code = json_string_value(json_object_get(reply, "error"));
	if (!not_found_ok || !code || strcmp(code, "not_found") != 0)
		print_reply_error(reply);
	json_decref(reply);
	held.reply = NULL;
	return NULL;
}

/* pending: no op lists pending calls across conversations, so agentctl asks
 * for the suspended conversations (a conversation with a pending human call
 * is suspended until it is settled), page by page, and for each one's pending
 * calls, on one connection. A conversation deleted in between is skipped. */
int run_pending(const struct sockets *ss, const struct options *o)
{
	struct conn *c = &conn;
	open_or_fail(c, ss, o);
	if (o->timeout_ms > 0) {
		c->budget = o->timeout_ms;
		ctl_set_timeout(c->c, c->budget);
	}
	json_t *all = held.req = must(json_array());
	int rc = EXIT_OK;
	for (;;) {
		json_t *rq = must(json_pack("{sisssssi}", "id", 1, "op", "list", "status", "suspended", "limit", 1000));
		if (held.after)
			put(rq, "after", must(json_string(held.after)));
		free(held.after);
		held.after = NULL;
		json_t *page = held.page = pending_ask(c, rq, false);
		if (!page) {
			rc = EXIT_REPLY;
			break;
		}
		held.reply = NULL; /* held.page now: the next exchange replaces held.reply */
		const json_t *next = json_object_get(page, "next");
		if (json_is_string(next))
			held.after = xstrdup(json_string_value(next));
		size_t i;
		json_t *conv;
		json_array_foreach(json_object_get(page, "conversations"), i, conv) {
			const json_t *id = json_object_get(conv, "id");
			if (!json_is_string(id))
				continue;
			/* Approvals, then calls whose outcome is unknown: both wait for someone. */
			static const char *const st[] = { "pending", "unknown" }, *const kind[] = { "approval", "unknown" };
			for (int k = 0; k < 2; k++) {
				json_t *r = pending_ask(c, must(json_pack("{sisssOss}", "id", 2, "op", "tool_calls",
									  "conversation", id, "status", st[k])), true);
				if (!r)
					continue;
				size_t ti;
				json_t *tc;
				json_array_foreach(json_object_get(r, "tool_calls"), ti, tc)
					if (json_is_object(tc))
						put(tc, "kind", must(json_string(kind[k])));
				if (json_array_extend(all, json_object_get(r, "tool_calls")))
					fail("out of memory"); /* a pending call left out of the list */
				json_decref(r);
				held.reply = NULL;
			}
		}
		json_decref(page);
		held.page = NULL;
		if (!held.after)
			break;
	}
	if (rc == EXIT_OK) {
		json_t *out = must(json_pack("{sbsO}", "ok", 1, "tool_calls", all));
		if (o->json) {
			char *t = must(jsonmp_dumps(out, SEND_FLAGS, 0, NULL));
			puts(t);
			free(t);
		} else if (o->quiet) {
			print_ids(out, "tool_calls/id");
		} else {
			show_pending(out);
		}
		json_decref(out);
	}
	json_decref(all);
	held.req = NULL;
	check_stdout(rc);
	ctl_close(c->c);
	c->c = NULL;
	return rc;
}

void run_release(void)
{
	ctl_close(conn.c);
	conn.c = NULL;
}
