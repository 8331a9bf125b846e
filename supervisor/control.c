/*
 * control.c: the control socket (docs/protocol.md, "Framing"). Non-blocking clients
 * with their own input and output buffers; only complete lines are parsed, at
 * most REQS_PER_WAKEUP per client per iteration, and a client whose output
 * queue is over OUT_CAP is not read until it drains, so a client that never
 * reads, never sends, or hangs up mid-line stalls nobody else.
 */
#include "supervisor/sup.h"
#include "conv/conv.h"
#include "supervisor/metrics.h"
#include "common/jsonmp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define REQS_PER_WAKEUP 64
#define OUT_CAP (4u << 20)
#define WATCH_BATCH 256

/* ---- listening ------------------------------------------------------- */

/* What is at the socket path before we bind. The single-instance lock
 * covers the data directory, not a --socket path elsewhere: only a socket
 * nobody listens on is a dead agentd's, to be replaced. A live one (another
 * agentd on another data directory, say) or any other file is left alone
 * and refused. */
static int stale_socket_clear(const struct sockaddr_un *sa)
{
	struct stat st;
	if (lstat(sa->sun_path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		log_error("socket path %s: %s", sa->sun_path, strerror(errno));
		return -1;
	}
	if (!S_ISSOCK(st.st_mode)) {
		log_error("socket path %s exists and is not a socket: not replacing it", sa->sun_path);
		return -1;
	}
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (probe < 0) {
		log_error("socket: %s", strerror(errno));
		return -1;
	}
	int rc = connect(probe, (const struct sockaddr *)sa, sizeof *sa);
	int err = errno;
	close(probe);
	if (rc < 0 && err == ECONNREFUSED) {
		if (unlink(sa->sun_path) < 0 && errno != ENOENT) {
			log_error("cannot remove the stale socket %s: %s", sa->sun_path, strerror(errno));
			return -1;
		}
		log_info("removed a stale socket %s", sa->sun_path);
		return 0;
	}
	if (rc == 0 || err == EAGAIN)
		log_error("another process listens on %s: not replacing it (is another agentd running with this "
			  "--socket?)", sa->sun_path);
	else
		log_error("socket path %s: %s: not replacing it", sa->sun_path, strerror(err));
	return -1;
}

int control_listen(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(S.sock_path) >= sizeof sa.sun_path) {
		log_error("socket path '%s' is %zu bytes; a Unix socket path must be under %zu: use --socket "
			  "with a shorter path", S.sock_path, strlen(S.sock_path), sizeof sa.sun_path);
		return -1;
	}
	strcpy(sa.sun_path, S.sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_error("socket: %s", strerror(errno));
		return -1;
	}
	if (stale_socket_clear(&sa) < 0) {
		close(fd);
		return -1;
	}
	/* The socket is created 0600 (docs/protocol.md, "Framing"): bind applies the
	 * umask to 0777, so 0177, not 077, which would leave it 0700. With
	 * allow_any_uid it is 0666: the peer check would let others in, the
	 * mode would not. */
	mode_t old = umask(S.cfg->allow_any_uid ? 0111 : 0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (rc < 0 || listen(fd, 512) < 0) {
		log_error("cannot listen on %s: %s", S.sock_path, strerror(errno));
		close(fd);
		return -1;
	}
	S.listen_fd = fd;
	S.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (lstat(S.sock_path, &st) == 0) {
		S.sock_dev = st.st_dev;
		S.sock_ino = st.st_ino;
	}
	return 0;
}

/* Remove the socket file at exit, only if it is still the one we bound: the
 * path may have been removed and taken by another agentd meanwhile. */
void control_unlink(void)
{
	struct stat st;
	if (lstat(S.sock_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == S.sock_dev &&
	    st.st_ino == S.sock_ino)
		unlink(S.sock_path);
}

static void client_new(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof cred;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(fd);
		return;
	}
	if (!S.cfg->allow_any_uid && cred.uid != 0 && cred.uid != getuid()) {
		static const char msg[] = "{\"ok\":false,\"error\":\"unavailable\",\"message\":\"permission denied: "
					  "only the same user or root may connect\"}\n";
		log_warn("refused a client of uid %u (pid %d)", (unsigned)cred.uid, (int)cred.pid);
		metrics_error(PERR_UNAVAILABLE);
		ssize_t w = write(fd, msg, sizeof msg - 1);
		(void)w;
		close(fd);
		return;
	}
	struct client *c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return;
	}
	c->lw.fn = control_on_io;
	c->fd = fd;
	c->uid = cred.uid;
	c->pid = cred.pid;
	TAILQ_INIT(&c->slots);
	c->events = EPOLLIN | EPOLLRDHUP;
	if (loop_add(fd, c->events, &c->lw) < 0) {
		close(fd);
		free(c);
		return;
	}
	LIST_INSERT_HEAD(&S.clients, c, link);
	S.nclients++;
}

void control_accept(void)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(S.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			client_new(fd);
			continue;
		}
		if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
			return;
		if ((errno == EMFILE || errno == ENFILE) && S.reserve_fd >= 0) {
			/* Out of descriptors: free the spare to accept and close the
			 * connection, so the listening socket does not stay readable
			 * forever, then take the spare back. */
			static int64_t last;
			if (loop_now_ms() - last > 1000) {
				log_warn("out of file descriptors: refusing connections");
				last = loop_now_ms();
			}
			close(S.reserve_fd);
			fd = accept4(S.listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				close(fd);
			S.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			continue;
		}
		log_warn("accept: %s", strerror(errno));
		return;
	}
}

/* ---- output ---------------------------------------------------------- */

static size_t out_pending(const struct client *c)
{
	return c->out_len - c->out_off;
}

void client_write(struct client *c, const char *p, size_t n)
{
	if (c->dead)
		return;
	if (c->out_off && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->out_len + n > c->out_cap) {
		/* Compact before growing. */
		if (c->out_off) {
			memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
			c->out_len -= c->out_off;
			c->out_off = 0;
		}
		if (c->out_len + n > c->out_cap) {
			size_t cap = c->out_cap ? c->out_cap : 4096;
			while (cap < c->out_len + n)
				cap *= 2;
			char *b = realloc(c->out, cap);
			if (!b) {
				c->dead = 1;
				return;
			}
			c->out = b;
			c->out_cap = cap;
		}
	}
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
}

static void client_events(struct client *c)
{
	uint32_t ev = 0;
	/* After end of file, input events would fire forever: drop them. */
	if (!c->eof)
		ev |= EPOLLRDHUP;
	if (!c->paused && !c->closing && !c->eof)
		ev |= EPOLLIN;
	if (out_pending(c))
		ev |= EPOLLOUT;
	/* A system call per flush only when the mask changes: a ping
	 * answered at once leaves it as it was. */
	if (ev != c->events) {
		loop_mod(c->fd, ev, &c->lw);
		c->events = ev;
	}
}

/* Move finished replies, in order, into the output buffer and write. */
void client_flush(struct client *c)
{
	if (c->dead)
		return;
	struct slot *s;
	while ((s = TAILQ_FIRST(&c->slots)) && s->done) {
		client_write(c, s->line, s->len);
		TAILQ_REMOVE(&c->slots, s, q);
		free(s->line);
		free(s);
	}
	while (out_pending(c)) {
		ssize_t n = write(c->fd, c->out + c->out_off, out_pending(c));
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		c->dead = 1; /* EPIPE and friends: the reader is gone */
		return;
	}
	/* Done with a client that hung up (or was cut off) once every reply
	 * it is owed has been written. */
	/* A watch is kept open after its reader shuts down its writing side
	 * (eof), but not once agentd ends it (closing: its conversation was
	 * deleted), or the stream would never end. */
	if ((c->closing || c->eof) && !out_pending(c) && TAILQ_EMPTY(&c->slots) && !c->backlog &&
	    (!c->watch || c->closing)) {
		c->dead = 1;
		return;
	}
	c->paused = out_pending(c) > OUT_CAP;
	if (c->watch && !c->paused && out_pending(c) < OUT_CAP / 2)
		watch_pump(c->watch);
	client_events(c);
}

struct slot *slot_new(struct client *c)
{
	struct slot *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->c = c;
	s->op = -1;
	TAILQ_INSERT_TAIL(&c->slots, s, q);
	return s;
}

void slot_done(struct slot *s, char *line, size_t len)
{
	if (!line) {
		static const char oom[] = "{\"ok\":false,\"error\":\"internal\",\"message\":\"out of memory\"}\n";
		line = strdup(oom);
		len = line ? sizeof oom - 1 : 0;
	}
	s->line = line;
	s->len = len;
	s->done = 1;
	/* The op's latency runs to its reply, also a reply made later (a
	 * long-poll's, a compaction's). */
	if (s->op >= 0) {
		metrics_op_latency(s->op, s->started_us);
		s->op = -1;
	}
}

void slot_error(struct slot *s, json_t *id, int err, const char *msg)
{
	size_t len = 0;
	metrics_error(err);
	char *line = proto_error_line(id, err, msg, &len); /* sets len: not in the same call */
	slot_done(s, line, len);
}

void slot_ok(struct slot *s, json_t *id, json_t *obj)
{
	size_t len = 0;
	char *line = proto_ok_line(id, obj, &len);
	slot_done(s, line, len);
}

/* ---- input ----------------------------------------------------------- */

static int name_model(void *arg, const char *n)
{
	(void)arg;
	return config_model(S.cfg, n) != NULL;
}

static int name_tool(void *arg, const char *n)
{
	(void)arg;
	return config_tool(S.cfg, n) != NULL;
}

static const struct proto_names names = { name_model, name_tool, NULL };

/* One complete line: a job for the end of the iteration, or an error now.
 * Returns 1 when the line was a read queued after a write of the same client
 * in this iteration: the client's next lines wait for the next iteration, so
 * that read (which runs after the group commit, to see the write) does not
 * also see writes the client pipelined after it. */
static int client_line(struct client *c, const char *line, size_t len)
{
	if (len && line[len - 1] == '\r')
		len--;
	struct slot *s = slot_new(c);
	struct job *j = calloc(1, sizeof *j);
	if (!s || !j) {
		free(j);
		if (s)
			slot_error(s, NULL, PERR_INTERNAL, "out of memory");
		return 0;
	}
	j->slot = s;
	j->started_us = loop_now_us();
	char msg[256];
	int err = proto_parse(line, len, &names, &j->rq, msg, sizeof msg);
	metrics_op(j->rq.op);
	s->op = j->rq.op;
	s->started_us = j->started_us;
	if (err == PERR_OK && S.shutting_down && j->rq.op != OP_PING && j->rq.op != OP_STATUS) {
		err = PERR_UNAVAILABLE;
		strcpy(msg, "agentd is shutting down");
	}
	if (err != PERR_OK) {
		slot_error(s, j->rq.id, err, msg); /* timed there */
		proto_request_free(&j->rq);
		free(j);
		return 0;
	}
	TAILQ_INSERT_TAIL(&S.jobs, j, q);
	if (ops_is_write(j->rq.op)) {
		c->batch_write = 1;
		return 0;
	}
	j->after_write = c->batch_write;
	/* Lines after a watch wait for it: once it runs, the connection's
	 * input is ignored (protocol.md); if it fails, they are served. */
	return c->batch_write || j->rq.op == OP_WATCH;
}

/* Parse up to REQS_PER_WAKEUP complete lines from the input buffer. */
static void client_parse(struct client *c)
{
	size_t off = 0;
	int n = 0;
	while (!c->closing && n < REQS_PER_WAKEUP && !c->paused && !c->barrier) {
		char *nl = memchr(c->in + off, '\n', c->in_len - off);
		if (!nl)
			break;
		size_t len = (size_t)(nl - (c->in + off));
		if (c->watch) {
			off += len + 1; /* a watching client's input is ignored */
			continue;
		}
		/* The limit is on the line: a '\r' before the '\n' is not part of it. */
		if (len - (len && c->in[off + len - 1] == '\r') > S.cfg->max_line) {
			struct slot *s = slot_new(c);
			if (s)
				slot_error(s, NULL, PERR_TOO_LARGE, "request line over the limit");
			c->closing = 1;
			break;
		}
		c->barrier = client_line(c, c->in + off, len);
		off += len + 1;
		n++;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	/* The peer ended its side with a line it never terminated: that is
	 * not a request (it is not executed, whatever it holds) but it is not
	 * silence either. Once every complete line before it has its reply
	 * slot, it gets one error, in order; until then it counts as backlog,
	 * so that it is come back to when a barrier or a pause ends. */
	int cut = c->eof && c->in_len && !c->watch && !memchr(c->in, '\n', c->in_len);
	if (cut && !c->closing && !c->paused && !c->barrier) {
		struct slot *s = slot_new(c);
		if (s)
			slot_error(s, NULL, PERR_BAD_REQUEST, "the connection ended inside a line: a request must end "
							   "in a newline; not executed");
		c->in_len = 0;
		cut = 0;
	}
	int more = !c->closing && (cut || memchr(c->in, '\n', c->in_len) != NULL);
	if (more != c->backlog) {
		S.nbacklog += more ? 1 : -1;
		c->backlog = more;
	}
	if (!c->closing && !memchr(c->in, '\n', c->in_len) &&
	    c->in_len - (c->in_len && c->in[c->in_len - 1] == '\r') > S.cfg->max_line) {
		struct slot *s = slot_new(c);
		if (s)
			slot_error(s, NULL, PERR_TOO_LARGE, "request line over the limit");
		c->closing = 1;
	}
}

void control_backlog(void)
{
	struct client *c;
	if (!S.nbacklog)
		return;
	LIST_FOREACH(c, &S.clients, link)
		if (c->backlog && !c->dead && !c->paused && !c->barrier)
			client_parse(c);
}

/* Whether some client has complete lines left that it may parse now: the
 * loop must not block in epoll_wait then, because no new input may ever
 * come to wake it (a client that pipelined more than REQS_PER_WAKEUP
 * requests in one write and waits for the replies). */
int control_backlog_ready(void)
{
	struct client *c;
	if (!S.nbacklog)
		return 0;
	LIST_FOREACH(c, &S.clients, link)
		if (c->backlog && !c->dead && !c->paused && !c->barrier)
			return 1;
	return 0;
}

static void client_read(struct client *c)
{
	for (;;) {
		if (c->in_cap - c->in_len < 4096) {
			size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
			if (cap > S.cfg->max_line + 8192)
				cap = S.cfg->max_line + 8192;
			if (cap <= c->in_len) {
				break; /* full: client_parse answers too_large */
			}
			char *b = realloc(c->in, cap);
			if (!b) {
				c->dead = 1;
				return;
			}
			c->in = b;
			c->in_cap = cap;
		}
		size_t room = c->in_cap - c->in_len;
		ssize_t n = read(c->fd, c->in + c->in_len, room);
		if (n > 0) {
			c->in_len += (size_t)n;
			if ((size_t)n < room)
				break; /* drained; level-triggered epoll reports the rest */
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		/* EOF or error: a line cut off mid-way is answered with an
		 * error, not executed (client_parse); replies owed are still
		 * written if the peer only shut down its writing side. */
		c->eof = 1;
		break;
	}
	client_parse(c);
}

void control_on_io(struct loop_watch *lw, uint32_t events)
{
	struct client *c = container_of(lw, struct client, lw);
	if (c->dead)
		return;
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		client_read(c);
	if (events & (EPOLLHUP | EPOLLERR))
		c->dead = 1;
	if (!c->dead)
		client_flush(c);
}

/* ---- waiters: long-polls and watches --------------------------------- */

void waiter_free(struct waiter *wt)
{
	LIST_REMOVE(wt, link);
	if (!wt->watch)
		TAILQ_REMOVE(&S.polls, wt, tq);
	else if (wt->c && wt->c->watch == wt)
		wt->c->watch = NULL;
	proto_request_free(&wt->rq);
	free(wt);
	workers_changed(); /* its worker record, if now unused, goes in workers_gc() */
}

static int poll_answer(struct waiter *wt)
{
	uint64_t last = 0, next;
	int err = 0;
	char msg[160];
	json_t *evs = ops_events_query(&wt->rq, &last, &next, &err, msg, sizeof msg);
	if (err) {
		slot_error(wt->slot, wt->rq.id, err, msg);
		return 1;
	}
	if (json_array_size(evs) == 0 && !next) {
		json_decref(evs);
		return 0;
	}
	slot_ok(wt->slot, wt->rq.id, ops_events_reply(evs, last, next));
	return 1;
}

struct pump_ctx {
	struct waiter *wt;
	size_t n;
};

static int pump_one(void *arg, const struct store_event *ev)
{
	struct pump_ctx *p = arg;
	json_t *o = json_pack("{so}", "event", conv_event_json(ev));
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (s) {
		client_write(p->wt->c, s, strlen(s));
		client_write(p->wt->c, "\n", 1);
		free(s);
	}
	p->wt->sent = ev->seq;
	p->n++;
	/* Stop at the output cap, not at the end of the batch: a batch of
	 * large events would otherwise queue many megabytes at once and hold
	 * the loop (and every other client) while it is encoded. The rest
	 * follows from `sent` when the reader drains (client_flush). */
	return out_pending(p->wt->c) >= OUT_CAP / 2;
}

/* Stream a watcher's events after `sent`, a batch at a time while its output
 * has room: in seq order, no gaps, read from the store (not from
 * notifications, which only say "look"). */
void watch_pump(struct waiter *wt)
{
	struct client *c = wt->c;
	/* Replies still owed on this connection (the watch's own, or a
	 * long-poll pipelined before it) go first: streamed lines written now
	 * would overtake them. client_flush pumps once they are out. */
	if (!TAILQ_EMPTY(&c->slots))
		return;
	while (!c->dead && out_pending(c) < OUT_CAP / 2) {
		store_txn *t;
		if (store_txn_begin(S.st, STORE_READ, &t))
			return;
		struct pump_ctx p = { wt, 0 };
		struct store_range r = { .after = wt->sent, .limit = 0 };
		/* Bound the batch: before = sent + WATCH_BATCH + 1. */
		r.before = wt->sent + WATCH_BATCH + 1;
		int err = store_events_stream(t, wt->conv, &r, pump_one, &p);
		store_txn_abort(t);
		if (err == STORE_E_NOTFOUND) {
			c->closing = 1; /* the conversation was deleted */
			break;
		}
		if (err || p.n < WATCH_BATCH)
			break;
	}
	if (out_pending(c))
		client_events(c);
}

void waiters_notify(struct worker *w, uint64_t seq)
{
	struct waiter *wt, *next;
	if (seq > w->seen_seq)
		w->seen_seq = seq;
	LIST_FOREACH_SAFE(wt, &w->waiters, link, next) {
		if (wt->c->dead)
			continue;
		if (wt->watch) {
			watch_pump(wt);
		} else if (poll_answer(wt)) {
			struct client *c = wt->c;
			waiter_free(wt);
			client_flush(c);
		}
	}
}

void watch_delta(struct worker *w, const char *text, size_t len)
{
	struct waiter *wt;
	LIST_FOREACH(wt, &w->waiters, link) {
		if (!wt->watch || wt->c->dead || out_pending(wt->c) > OUT_CAP / 2 || !TAILQ_EMPTY(&wt->c->slots))
			continue; /* deltas are a live view: a slow reader loses them, never events;
				   * nor may they overtake a reply still owed (see watch_pump) */
		json_t *o = json_pack("{s{ss#}}", "delta", "text", text, (int)len);
		char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
		if (s) {
			client_write(wt->c, s, strlen(s));
			client_write(wt->c, "\n", 1);
			free(s);
			client_flush(wt->c);
		}
	}
}

void polls_expire(int64_t now)
{
	struct waiter *wt, *next;
	TAILQ_FOREACH_SAFE(wt, &S.polls, tq, next) {
		if (wt->deadline > now)
			continue;
		struct client *c = wt->c;
		uint64_t last = 0, after;
		int err = 0;
		char msg[160];
		json_t *evs = ops_events_query(&wt->rq, &last, &after, &err, msg, sizeof msg);
		if (err)
			slot_error(wt->slot, wt->rq.id, err, msg);
		else
			slot_ok(wt->slot, wt->rq.id, ops_events_reply(evs, last, after));
		waiter_free(wt);
		client_flush(c);
	}
}

int64_t polls_next_deadline(void)
{
	int64_t d = 0;
	struct waiter *wt;
	TAILQ_FOREACH(wt, &S.polls, tq)
		if (!d || wt->deadline < d)
			d = wt->deadline;
	return d;
}

/* ---- teardown -------------------------------------------------------- */

static void client_free(struct client *c)
{
	struct worker *w;
	/* Drop the waiters and compaction requests that point at it. */
	RB_FOREACH(w, worker_tree, &S.workers) {
		struct waiter *wt, *next;
		LIST_FOREACH_SAFE(wt, &w->waiters, link, next)
			if (wt->c == c)
				waiter_free(wt);
		for (struct compact_req *r = w->compacts; r; r = r->next)
			if (r->slot && r->slot->c == c)
				r->slot = NULL;
	}
	/* Its writes held for the next group commit are still committed (as
	 * a write read before a hang-up always was), with nobody to answer. */
	struct job *j;
	TAILQ_FOREACH(j, &S.jobs, q)
		if (j->slot && j->slot->c == c)
			j->slot = NULL;
	struct slot *s;
	while ((s = TAILQ_FIRST(&c->slots))) {
		TAILQ_REMOVE(&c->slots, s, q);
		free(s->line);
		free(s);
	}
	if (c->backlog)
		S.nbacklog--;
	loop_del(c->fd);
	close(c->fd);
	LIST_REMOVE(c, link);
	S.nclients--;
	free(c->in);
	free(c->out);
	free(c);
}

void clients_reap(void)
{
	struct client *c, *next;
	LIST_FOREACH_SAFE(c, &S.clients, link, next) {
		if (!c->dead && c->closing)
			client_flush(c);
		if (c->dead)
			client_free(c);
	}
}

/* At exit, every request read gets an answer: a long-poll still parked,
 * and each complete line not parsed yet (pipelined behind the per-wakeup
 * cap or a barrier), is answered `unavailable`, in order. */
static void answer_unavailable(struct client *c)
{
	static const char msg[] = "agentd is shutting down";
	size_t off = 0;
	char *nl;
	if (c->watch || c->closing)
		return;
	while ((nl = memchr(c->in + off, '\n', c->in_len - off))) {
		size_t len = (size_t)(nl - (c->in + off));
		len -= len && c->in[off + len - 1] == '\r';
		struct slot *s = slot_new(c);
		if (!s)
			break;
		if (len > S.cfg->max_line) {
			slot_error(s, NULL, PERR_TOO_LARGE, "request line over the limit");
			break;
		}
		struct request rq;
		char why[256];
		memset(&rq, 0, sizeof rq);
		int err = proto_parse(c->in + off, len, &names, &rq, why, sizeof why);
		slot_error(s, rq.id, err != PERR_OK ? err : PERR_UNAVAILABLE, err != PERR_OK ? why : msg);
		proto_request_free(&rq);
		off = (size_t)(nl - c->in) + 1;
	}
	c->in_len = 0;
}

void control_close_all(void)
{
	struct client *c, *next;
	struct waiter *wt, *wn;
	TAILQ_FOREACH_SAFE(wt, &S.polls, tq, wn) {
		slot_error(wt->slot, wt->rq.id, PERR_UNAVAILABLE, "agentd is shutting down");
		waiter_free(wt);
	}
	LIST_FOREACH_SAFE(c, &S.clients, link, next) {
		answer_unavailable(c);
		/* One last try at what is owed; the socket is non-blocking. */
		client_flush(c);
		client_free(c);
	}
	if (S.reserve_fd >= 0)
		close(S.reserve_fd);
}
