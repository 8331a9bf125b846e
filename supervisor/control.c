/* control.c: the control socket, its clients and ordered replies (see control.h). */
#include "supervisor/control.h"
#include "common/log.h"
#include "supervisor/durable.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"

#include <bsd/sys/queue.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The budget for requests whose reply may be large (control.h). */
#define LARGE_PER_ITERATION (1u << 20)
#define LARGE_GUESS LARGE_PER_ITERATION /* a client's first: assume the worst */
/* Room in a slot for its out-of-memory line: an id of up to about 60 bytes
 * of JSON text fits, a longer one's line is allocated with the slot. */
#define SLOT_OOM_INLINE 128

/* A reply slot: replies leave in request order even when some complete later. */
struct slot {
	TAILQ_ENTRY(slot) q;
	struct client *c;
	char *line;
	size_t len;
	int done;
	int op;             /* counted in the metrics when answered; -1: not (yet) an op */
	int64_t started_us; /* when its line was parsed */
	uint64_t need;      /* the transaction its reply shows: it leaves once that is durable */
	int64_t held_us;    /* when its reply, ready, was first held for that; 0: not held */
	/* The reply when no other can be built (out of memory), with the
	 * request's id, made with the slot (proto_oom_line): oom_buf, or a
	 * block of its own for a long id. */
	char *oom;
	size_t oom_len;
	char oom_buf[SLOT_OOM_INLINE];
};

struct client {
	struct loop_watch lw;     /* on_client_io */
	LIST_ENTRY(client) link;
	int fd;
	uid_t uid;
	pid_t pid;                /* the peer's, at connect (SO_PEERCRED) */
	char *in;
	size_t in_len, in_cap;
	char *out;
	size_t out_len, out_off, out_cap;
	TAILQ_HEAD(, slot) slots;
	void *watch;              /* streaming: the connection is a watch (waiters.c's) */
	int closing;              /* too_large: stop reading, close once output is flushed */
	int eof;                  /* the peer shut down its side: answer what was read, then close */
	int dead;                 /* freed at the end of the iteration */
	int paused;               /* output over cap: stop reading */
	int backlog;              /* complete lines left after the per-wakeup cap */
	uint32_t events;          /* the epoll mask registered now */
	int batch_write;          /* a write of this client is in the pending jobs */
	int held;                 /* on C.held: its next reply waits for the durable frontier */
	LIST_ENTRY(client) hlink;
	int barrier;              /* a read after that write is too: parse nothing more until they end */
	size_t owed;              /* bytes of finished replies waiting behind one still owed */
	unsigned nslots;          /* replies owed (slots) */
	uint64_t parse_iter;      /* the loop iteration `parsed` counts for */
	unsigned parsed;          /* requests parsed in that iteration */
	uint64_t large_round;     /* the last round it had a large reply in (see the top) */
	size_t large_est;         /* the size of its last large reply: what its next one may cost */
};

static void on_listen(struct loop_watch *lw, uint32_t events);
static void slot_free(struct slot *s);
static void slot_flush_failed(struct slot *s);

static struct {
	const struct config *cfg;
	const struct control_hooks *h;
	struct loop_watch lw;   /* on_listen */
	int listen_fd;
	char *path;
	dev_t dev;              /* the socket file we bound (control_unlink) */
	ino_t ino;
	int reserve_fd;         /* spare descriptor, freed to refuse a connection at EMFILE */
	int refusing;           /* shutting down: only ping and status are served */
	LIST_HEAD(, client) clients;
	LIST_HEAD(, client) held;  /* clients whose next reply waits for the durable frontier */
	int nheld;
	int nclients;
	int nbacklog;           /* clients with unparsed complete lines */
	uint64_t iteration;     /* the loop's, counted by control_backlog (once per iteration) */
	/* The budget for large replies (see the top): this iteration's guessed
	 * bytes, the round, and whether a client was turned away this iteration
	 * because it had its turn in the round (and whether anyone had a turn). */
	size_t large_bytes;
	uint64_t large_round;
	int large_turned_away, large_served;
	int drain_owed;         /* a watch drained while the loop was restricted */
} C = { .lw = { on_listen, 1 }, .listen_fd = -1, .reserve_fd = -1, .clients = LIST_HEAD_INITIALIZER(C.clients),
      .held = LIST_HEAD_INITIALIZER(C.held), .large_round = 1 };

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

static void control_batch_limits(const struct config *cfg);

int control_listen(const struct config *cfg, const char *path, const struct control_hooks *hooks)
{
	C.cfg = cfg;
	control_batch_limits(cfg);
	C.h = hooks;
	if (!(C.path = strdup(path))) {
		log_error("out of memory");
		return -ENOMEM;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(C.path) >= sizeof sa.sun_path) {
		log_error("socket path '%s' is %zu bytes; a Unix socket path must be under %zu: use --socket "
			  "with a shorter path", C.path, strlen(C.path), sizeof sa.sun_path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, C.path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = -errno;
		log_error("socket: %s", strerror(-e));
		return e;
	}
	if (stale_socket_clear(&sa) < 0) {
		close(fd);
		return -EADDRINUSE;
	}
	/* The socket is created 0600 (docs/protocol.md, "Framing"): bind applies the
	 * umask to 0777, so 0177, not 077, which would leave it 0700. With
	 * allow_any_uid it is 0666: the peer check would let others in, the
	 * mode would not; with socket_group, 0660 in that group. */
	mode_t old = umask(C.cfg->allow_any_uid ? 0111 : C.cfg->socket_gid >= 0 ? 0117 : 0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (rc == 0 && C.cfg->socket_gid >= 0 && chown(C.path, (uid_t)-1, (gid_t)C.cfg->socket_gid) < 0) {
		int e = -errno;
		log_error("cannot give %s to the group %s (socket_group): %s (agentd must be root or a member of it)",
			  C.path, C.cfg->socket_group, strerror(-e));
		unlink(C.path);
		close(fd);
		return e;
	}
	if (rc < 0 || listen(fd, 512) < 0) {
		int e = -errno;
		log_error("cannot listen on %s: %s", C.path, strerror(-e));
		close(fd);
		return e;
	}
	if ((rc = loop_add(fd, EPOLLIN, &C.lw)) < 0) {
		log_error("epoll_ctl: %s", strerror(-rc));
		close(fd);
		return rc;
	}
	C.listen_fd = fd;
	C.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (lstat(C.path, &st) == 0) {
		C.dev = st.st_dev;
		C.ino = st.st_ino;
	}
	return 0;
}

/* Remove the socket file at exit, only if it is still the one we bound: the
 * path may have been removed and taken by another agentd meanwhile. */
void control_unlink(void)
{
	struct stat st;
	if (!C.path)
		return;
	if (lstat(C.path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == C.dev &&
	    st.st_ino == C.ino)
		unlink(C.path);
}

void control_stop_listening(void)
{
	if (C.listen_fd < 0)
		return;
	loop_del(C.listen_fd);
	close(C.listen_fd);
	C.listen_fd = -1;
	control_unlink();
}

void control_refuse(void)
{
	C.refusing = 1;
}

int control_nclients(void)
{
	return C.nclients;
}

int control_all_held(void)
{
	return C.nheld == C.nclients;
}

int control_only_free(const struct client *c)
{
	return C.nclients - C.nheld - !c->held == 0;
}

static void on_client_io(struct loop_watch *lw, uint32_t events);

/* Whether the peer on fd (its primary group gid) is in socket_group: its
 * primary group or one of its supplementary groups (SO_PEERGROUPS, which
 * the kernel fills from the peer's credentials at connect: not forgeable). */
static int in_socket_group(int fd, gid_t gid)
{
	gid_t want = (gid_t)C.cfg->socket_gid, small[64], *g = small;
	if (C.cfg->socket_gid < 0)
		return 0;
	if (gid == want)
		return 1;
	socklen_t len = sizeof small;
	int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len);
	if (rc < 0 && errno == ERANGE && (g = malloc(len)))
		rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len);
	int in = 0;
	for (size_t i = 0; rc == 0 && g && i < len / sizeof *g; i++)
		in |= g[i] == want;
	if (g != small)
		free(g);
	return in;
}

static void client_new(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof cred;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(fd);
		return;
	}
	if (!C.cfg->allow_any_uid && cred.uid != 0 && cred.uid != getuid() && !in_socket_group(fd, cred.gid)) {
		static const char msg[] = "{\"ok\":false,\"error\":\"unavailable\",\"message\":\"permission denied: "
					  "only the same user, root or a member of socket_group may connect\"}\n";
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
	c->lw.fn = on_client_io;
	c->lw.during_commit = 1; /* read and answered while a group commits (ops.c) */
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
	LIST_INSERT_HEAD(&C.clients, c, link);
	C.nclients++;
}

static void on_listen(struct loop_watch *lw, uint32_t events)
{
	if (C.listen_fd < 0)
		return;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(C.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			client_new(fd);
			continue;
		}
		if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
			return;
		if ((errno == EMFILE || errno == ENFILE) && C.reserve_fd >= 0) {
			/* Out of descriptors: free the spare to accept and close the
			 * connection, so the listening socket does not stay readable
			 * forever, then take the spare back. */
			static int64_t last;
			if (loop_now_ms() - last > 1000) {
				log_warn("out of file descriptors: refusing connections");
				last = loop_now_ms();
			}
			close(C.reserve_fd);
			fd = accept4(C.listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				close(fd);
			C.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
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

/* Output this client has caused and not yet taken: its unwritten output and
 * the finished replies queued behind one still owed (a long-poll). */
static size_t out_queued(const struct client *c)
{
	return out_pending(c) + c->owed;
}

/* May c have a large reply parsed now? Counts it when so. */
static int large_take(struct client *c)
{
	size_t guess = c->large_est ? c->large_est : LARGE_GUESS;
	if (c->large_round == C.large_round) {
		C.large_turned_away = 1;
		return 0;
	}
	if (C.large_bytes && C.large_bytes + guess > LARGE_PER_ITERATION)
		return 0; /* next iteration: the round still holds its turn */
	C.large_bytes += guess;
	C.large_served = 1;
	c->large_round = C.large_round;
	return 1;
}

/* At the start of an iteration: a new round once the last iteration turned
 * clients away and served nobody (all that asked had their turn). */
static void large_iteration(void)
{
	if (C.large_turned_away && !C.large_served)
		C.large_round++;
	C.large_bytes = 0;
	C.large_turned_away = C.large_served = 0;
}

size_t control_out_pending(const struct client *c)
{
	return out_pending(c);
}

int control_dead(const struct client *c)
{
	return c->dead;
}

int control_owes(const struct client *c)
{
	return !TAILQ_EMPTY(&c->slots);
}

void control_end(struct client *c)
{
	c->closing = 1;
}

void control_batch_done(struct client *c)
{
	c->batch_write = c->barrier = 0;
}

void *control_watch(const struct client *c)
{
	return c->watch;
}

void control_set_watch(struct client *c, void *watch)
{
	c->watch = watch;
}

uid_t control_uid(const struct client *c)
{
	return c->uid;
}

pid_t control_pid(const struct client *c)
{
	return c->pid;
}

struct client *slot_client(const struct slot *s)
{
	return s->c;
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

void control_want_write(struct client *c)
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
		if (!durable_covers(s->need) && durable_failed())
			slot_flush_failed(s);
		else if (!durable_covers(s->need)) {
			/* Its reply shows a transaction an OS crash could
			 * still take back: it waits, and so do those after it. */
			if (!s->held_us)
				s->held_us = loop_now_us();
			if (!c->held) {
				c->held = 1;
				C.nheld++;
				LIST_INSERT_HEAD(&C.held, c, hlink);
			}
			break;
		}
		/* The op's latency runs to its reply leaving, also a reply
		 * made later (a long-poll's, a compaction's, one waiting for
		 * durability). */
		if (s->op >= 0)
			metrics_op_latency(s->op, s->started_us);
		if (s->held_us)
			metrics_durable_wait(s->held_us);
		client_write(c, s->line, s->len);
		c->owed -= s->len;
		c->nslots--;
		TAILQ_REMOVE(&c->slots, s, q);
		slot_free(s);
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
	c->paused = out_queued(c) > CONTROL_OUT_CAP || c->nslots >= CONTROL_REQS_PER_WAKEUP;
	/* A watch's next events are read from the store: not while another
	 * thread commits (loop_restrict); control_drain_watches then. */
	if (c->watch && !c->paused && out_pending(c) < CONTROL_OUT_CAP / 2) {
		if (loop_restricted())
			C.drain_owed = 1;
		else
			C.h->drained(c);
	}
	control_want_write(c);
}

struct slot *slot_new(struct client *c, json_t *id)
{
	struct slot *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	if (proto_oom_line(id, s->oom_buf, sizeof s->oom_buf, &s->oom, &s->oom_len)) {
		free(s);
		return NULL;
	}
	s->c = c;
	s->op = -1;
	TAILQ_INSERT_TAIL(&c->slots, s, q);
	c->nslots++;
	return s;
}

/* A slot and its lines (its reply may be its out-of-memory line). */
static void slot_free(struct slot *s)
{
	if (s->line != s->oom)
		free(s->line);
	if (s->oom != s->oom_buf)
		free(s->oom);
	free(s);
}

/* The frontier stopped (durable_failed): a reply that waited for it never
 * leaves; the error `unavailable` does instead, with its request's id. */
static void slot_flush_failed(struct slot *s)
{
	char msg[160];
	snprintf(msg, sizeof msg, "flushing the store failed (%s): nothing can be made durable; agentd is stopping",
		 strerror(-durable_failed()));
	size_t len = 0;
	char *line = proto_error_for_oom_line(s->oom, s->oom_len, PERR_UNAVAILABLE, msg, &len);
	if (s->line != s->oom)
		free(s->line);
	s->line = line ? line : s->oom;
	s->len = line ? len : s->oom_len;
	s->need = 0;
}

static void slot_done(struct slot *s, char *line, size_t len)
{
	if (!line) {
		/* Made with the slot: it needs no memory now. */
		line = s->oom;
		len = s->oom_len;
	}
	s->line = line;
	s->len = len;
	s->done = 1;
	s->c->owed += len;
	if (s->op >= 0 && C.h->is_large(s->op))
		s->c->large_est = len;
}

void slot_need(struct slot *s, uint64_t txnid)
{
	s->need = txnid;
}

void control_durable_advanced(void)
{
	/* Take the list: a client flushed may be held again, behind a later
	 * transaction, and goes back on C.held for the next advance. */
	LIST_HEAD(, client) held = LIST_HEAD_INITIALIZER(held);
	struct client *c;
	while ((c = LIST_FIRST(&C.held))) {
		LIST_REMOVE(c, hlink);
		LIST_INSERT_HEAD(&held, c, hlink);
	}
	C.nheld = 0;
	while ((c = LIST_FIRST(&held))) {
		LIST_REMOVE(c, hlink);
		c->held = 0;
		client_flush(c);
	}
}

void control_drain_watches(void)
{
	struct client *c;
	if (!C.drain_owed)
		return; /* no walk of every client per group commit when none is owed */
	C.drain_owed = 0;
	LIST_FOREACH(c, &C.clients, link)
		if (c->watch && !c->dead)
			client_flush(c);
}

void slot_error(struct slot *s, json_t *id, int err, const char *msg)
{
	size_t len = 0;
	metrics_error(err);
	char *line = proto_error_line(id, err, msg, &len); /* sets len: not in the same call */
	slot_done(s, line, len);
}

void slot_error_with(struct slot *s, json_t *id, int err, const char *msg, json_t *extra)
{
	size_t len = 0;
	metrics_error(err);
	char *line = proto_error_line_with(id, err, msg, extra, &len);
	slot_done(s, line, len);
}

void slot_ok(struct slot *s, json_t *id, json_t *obj)
{
	/* NULL is a reply that could not be built (out of memory): never a
	 * bare {"ok":true} that reads as success with nothing in it. */
	if (!obj) {
		slot_error(s, id, PERR_INTERNAL, "out of memory");
		return;
	}
	size_t len = 0;
	char *line = proto_ok_line(id, obj, &len);
	slot_done(s, line, len);
}

/* ---- input ----------------------------------------------------------- */

static int name_model(void *arg, const char *n)
{
	(void)arg;
	return config_model(C.cfg, n) != NULL;
}

static int name_tool(void *arg, const char *n)
{
	(void)arg;
	return config_tool(C.cfg, n) != NULL;
}

static struct proto_names names = { name_model, name_tool, NULL, 0, 0 }; /* limits set by control_listen */

static void control_batch_limits(const struct config *cfg)
{
	names.batch_max_events = cfg->batch_max_events;
	names.batch_max_bytes = cfg->batch_max_bytes;
}

/* One complete line: a job for the end of the iteration, or an error now.
 * Returns 1 when the line was a read queued after a write of the same client
 * in this iteration: the client's next lines wait for the next iteration, so
 * that read (which runs after the group commit, to see the write) does not
 * also see writes the client pipelined after it. */
static int client_line(struct client *c, const char *line, size_t len)
{
	struct request rq;
	char msg[256];
	if (len && line[len - 1] == '\r')
		len--;
	int64_t started_us = loop_now_us();
	int err = proto_parse(line, len, &names, &rq, msg, sizeof msg);
	if (err == PERR_OK && C.h->is_large(rq.op) && !large_take(c)) {
		proto_request_free(&rq);
		return -1; /* not now: the line stays for a later iteration */
	}
	struct slot *s = slot_new(c, rq.id);
	if (!s) {
		/* No slot, no reply: every later reply would pair with the wrong
		 * request. The connection closes instead. */
		proto_request_free(&rq);
		c->dead = 1;
		c->closing = 1;
		return 0;
	}
	metrics_op(rq.op);
	s->op = rq.op;
	s->started_us = started_us;
	if (err == PERR_OK && C.refusing && rq.op != OP_PING && rq.op != OP_STATUS) {
		err = PERR_UNAVAILABLE;
		strcpy(msg, "agentd is shutting down");
	}
	if (err != PERR_OK) {
		slot_error(s, rq.id, err, msg); /* timed there */
		proto_request_free(&rq);
		return 0;
	}
	int op = rq.op, write = C.h->is_write(op);
	if (C.h->request(c, s, &rq, started_us, write ? 0 : c->batch_write)) {
		slot_error(s, rq.id, PERR_INTERNAL, "out of memory"); /* rq is still ours: with its id */
		proto_request_free(&rq);
		return 0;
	}
	if (write) {
		c->batch_write = 1;
		return 0;
	}
	/* Lines after a watch wait for it: once it runs, the connection's
	 * input is ignored (protocol.md); if it fails, they are served. */
	return c->batch_write || op == OP_WATCH;
}

/* Parse complete lines from the input buffer within the client's budget for
 * this iteration (see the top of this file). */
static void client_parse(struct client *c)
{
	size_t off = 0;
	if (c->parse_iter != C.iteration) {
		c->parse_iter = C.iteration;
		c->parsed = 0;
	}
	while (!c->closing && c->parsed < CONTROL_REQS_PER_WAKEUP && !c->paused && !c->barrier &&
	       out_queued(c) <= CONTROL_OUT_CAP && c->nslots < CONTROL_REQS_PER_WAKEUP) {
		char *nl = memchr(c->in + off, '\n', c->in_len - off);
		if (!nl)
			break;
		size_t len = (size_t)(nl - (c->in + off));
		if (c->watch) {
			off += len + 1; /* a watching client's input is ignored */
			continue;
		}
		/* The limit is on the line: a '\r' before the '\n' is not part of it. */
		if (len - (len && c->in[off + len - 1] == '\r') > C.cfg->max_line) {
			struct slot *s = slot_new(c, NULL);
			if (s)
				slot_error(s, NULL, PERR_TOO_LARGE, "request line over the limit");
			c->closing = 1;
			break;
		}
		int r = client_line(c, c->in + off, len);
		if (r < 0)
			break; /* its large reply waits its turn (see the top) */
		c->parsed++;
		c->barrier = r;
		off += len + 1;
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
		struct slot *s = slot_new(c, NULL);
		if (s)
			slot_error(s, NULL, PERR_BAD_REQUEST, "the connection ended inside a line: a request must end "
							   "in a newline; not executed");
		c->in_len = 0;
		cut = 0;
	}
	int more = !c->closing && (cut || memchr(c->in, '\n', c->in_len) != NULL);
	if (more != c->backlog) {
		C.nbacklog += more ? 1 : -1;
		c->backlog = more;
	}
	if (!c->closing && !memchr(c->in, '\n', c->in_len) &&
	    c->in_len - (c->in_len && c->in[c->in_len - 1] == '\r') > C.cfg->max_line) {
		struct slot *s = slot_new(c, NULL);
		if (s)
			slot_error(s, NULL, PERR_TOO_LARGE, "request line over the limit");
		c->closing = 1;
	}
}

/* Parse what clients left over from earlier iterations, and send what that
 * answered at once (errors): a client that pipelined its requests in one
 * write may never write again to wake us. */
void control_backlog(void)
{
	struct client *c;
	C.iteration++;
	large_iteration();
	if (!C.nbacklog)
		return;
	LIST_FOREACH(c, &C.clients, link)
		if (c->backlog && !c->dead && !c->paused && !c->barrier) {
			client_parse(c);
			client_flush(c);
		}
}

/* Whether some client has complete lines left that it may parse now: the
 * loop must not block in epoll_wait then, because no new input may ever
 * come to wake it (a client that pipelined more than CONTROL_REQS_PER_WAKEUP
 * requests in one write and waits for the replies). */
int control_backlog_ready(void)
{
	struct client *c;
	if (!C.nbacklog)
		return 0;
	LIST_FOREACH(c, &C.clients, link)
		if (c->backlog && !c->dead && !c->paused && !c->barrier)
			return 1;
	return 0;
}

static void client_read(struct client *c)
{
	for (;;) {
		if (c->in_cap - c->in_len < 4096) {
			size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
			if (cap > C.cfg->max_line + 8192)
				cap = C.cfg->max_line + 8192;
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

static void on_client_io(struct loop_watch *lw, uint32_t events)
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

/* ---- teardown -------------------------------------------------------- */

static void client_free(struct client *c)
{
	/* Drop what points at it: its waiters, its compactions, its jobs
	 * (writes held for the next group commit are still committed, as a
	 * write read before a hang-up always was, with nobody to answer). */
	C.h->gone(c);
	struct slot *s;
	while ((s = TAILQ_FIRST(&c->slots))) {
		TAILQ_REMOVE(&c->slots, s, q);
		slot_free(s);
	}
	if (c->backlog)
		C.nbacklog--;
	if (c->held) {
		LIST_REMOVE(c, hlink);
		C.nheld--;
	}
	loop_del(c->fd);
	close(c->fd);
	LIST_REMOVE(c, link);
	C.nclients--;
	free(c->in);
	free(c->out);
	free(c);
}

void control_reap(void)
{
	struct client *c, *next;
	LIST_FOREACH_SAFE(c, &C.clients, link, next) {
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
		if (len > C.cfg->max_line) {
			struct slot *s = slot_new(c, NULL);
			if (s)
				slot_error(s, NULL, PERR_TOO_LARGE, "request line over the limit");
			break;
		}
		struct request rq;
		char why[256];
		memset(&rq, 0, sizeof rq);
		int err = proto_parse(c->in + off, len, &names, &rq, why, sizeof why);
		struct slot *s = slot_new(c, rq.id);
		if (!s) {
			proto_request_free(&rq);
			break;
		}
		slot_error(s, rq.id, err != PERR_OK ? err : PERR_UNAVAILABLE, err != PERR_OK ? why : msg);
		proto_request_free(&rq);
		off = (size_t)(nl - c->in) + 1;
	}
	c->in_len = 0;
}

void control_close_all(void)
{
	struct client *c, *next;
	LIST_FOREACH_SAFE(c, &C.clients, link, next) {
		answer_unavailable(c);
		/* One last try at what is owed; the socket is non-blocking. */
		client_flush(c);
		client_free(c);
	}
	if (C.reserve_fd >= 0)
		close(C.reserve_fd);
}
