/* ctl.c: the control protocol's client library (see ctl.h). */
#include "client/ctl.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/jsonmp.h"

#define READ_CHUNK 65536
/* Requests as agentctl always sent them: 17 significant digits give agentd
 * exactly the double that was meant (jansson's default too). */
#define SEND_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17))

struct ctl_conn {
	int fd;
	char *buf;
	size_t off, len, cap; /* unread bytes are buf[off..len) */
	size_t scan;          /* buf[off..scan) holds no newline */
	size_t line_max;      /* 0: none */
	bool eof;
	int64_t deadline;     /* CLOCK_MONOTONIC ms; -1: none */
	const sigset_t *mask; /* ppoll's mask while waiting; NULL: the thread's */
	volatile sig_atomic_t *interrupted;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool interrupted(const ctl_conn *c)
{
	return c->interrupted && *c->interrupted;
}

/* Nothing to watch but the socket and no deadline: a call may block in the
 * system call itself (one recv per reply, not recv, ppoll and recv). */
static bool may_block(const ctl_conn *c, int64_t deadline, int extra_fd)
{
	return deadline < 0 && !c->mask && extra_fd < 0;
}

/* Wait until the socket is ready for `events` (revents in *got). -ETIMEDOUT
 * past the deadline, -EINTR when the caller's flag went up, -EPIPE when
 * extra_fd hung up. */
static int conn_wait(ctl_conn *c, short events, int64_t deadline, int extra_fd, short *got)
{
	struct pollfd pf[2] = { { .fd = c->fd, .events = events }, { .fd = extra_fd, .events = POLLRDHUP } };
	for (;;) {
		struct timespec ts, *tsp = NULL;
		if (deadline >= 0) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				return -ETIMEDOUT;
			ts.tv_sec = left / 1000;
			ts.tv_nsec = (left % 1000) * 1000000;
			tsp = &ts;
		}
		int r = ppoll(pf, extra_fd >= 0 ? 2 : 1, tsp, c->mask);
		if (r < 0 && errno == EINTR) {
			if (interrupted(c))
				return -EINTR;
			continue;
		}
		if (r < 0)
			return -errno;
		if (r > 0 && extra_fd >= 0 && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return -EPIPE;
		if (r > 0 && pf[0].revents) {
			if (got)
				*got = pf[0].revents;
			return 0; /* POLLHUP and POLLERR too: the read or write reports them */
		}
	}
}

int ctl_connect(const char *path, int64_t timeout_ms, ctl_conn **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int e;
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!path)
		return -EINVAL;
	size_t len = strlen(path);
	if (len >= sizeof sa.sun_path)
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, len + 1);
	ctl_conn *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->deadline = -1;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		goto fail_errno;
	/* A blocking connect waits while agentd's listen backlog is full; on
	 * Linux SO_SNDTIMEO bounds that wait (connect then fails with EAGAIN).
	 * It is cleared after: the deadline bounds every later wait. */
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	if (timeout_ms > 0)
		setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		goto fail_errno;
	if (timeout_ms > 0) {
		tv = (struct timeval){ 0 };
		setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	}
	ctl_set_timeout(c, timeout_ms);
	*out = c;
	return 0;
fail_errno:
	e = -errno;
	ctl_close(c);
	return e;
}

void ctl_close(ctl_conn *c)
{
	if (!c)
		return;
	int e = errno;
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c);
	errno = e;
}

int ctl_fd(const ctl_conn *c)
{
	return c ? c->fd : -EINVAL;
}

void ctl_set_timeout(ctl_conn *c, int64_t timeout_ms)
{
	if (c)
		c->deadline = timeout_ms > 0 ? now_ms() + timeout_ms : -1;
}

void ctl_set_line_max(ctl_conn *c, size_t max)
{
	if (c)
		c->line_max = max;
}

void ctl_set_signals(ctl_conn *c, const sigset_t *mask, volatile sig_atomic_t *flag)
{
	if (!c)
		return;
	c->mask = mask;
	c->interrupted = flag;
}

/* One send of what is left; 0 or the bytes sent, -EAGAIN when the socket
 * is full, -EPIPE when agentd closed. */
static ssize_t send_some(ctl_conn *c, const char *p, size_t n, bool block)
{
	for (;;) {
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | (block ? 0 : MSG_DONTWAIT));
		if (w >= 0)
			return w;
		if (errno == EINTR && !interrupted(c))
			continue;
		if (errno == EWOULDBLOCK)
			return -EAGAIN;
		return errno == ECONNRESET ? -EPIPE : -errno;
	}
}

int ctl_write(ctl_conn *c, const char *p, size_t n)
{
	if (!c || (!p && n))
		return -EINVAL;
	bool block = may_block(c, c->deadline, -1);
	while (n > 0) {
		ssize_t w = send_some(c, p, n, block);
		if (w == -EAGAIN) {
			int r = conn_wait(c, POLLOUT, c->deadline, -1, NULL);
			if (r < 0)
				return r;
			continue;
		}
		if (w < 0)
			return (int)w;
		if (w == 0)
			return -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int ctl_send_line(ctl_conn *c, const char *line)
{
	if (!c || !line)
		return -EINVAL;
	size_t n = strlen(line);
	char *out = malloc(n + 1);
	if (!out)
		return -ENOMEM;
	memcpy(out, line, n);
	out[n] = '\n';
	int r = ctl_write(c, out, n + 1);
	free(out);
	return r;
}

/* A whole line from what was read: 1 with it, 0 when none is complete yet,
 * -ECONNRESET at the end of the stream. */
static int take_line(ctl_conn *c, const char **line, size_t *len)
{
	char *nl = c->len > c->scan ? memchr(c->buf + c->scan, '\n', c->len - c->scan) : NULL;
	if (nl) {
		*line = c->buf + c->off;
		*len = (size_t)(nl - *line);
		*nl = '\0';
		c->off = c->scan = (size_t)(nl - c->buf) + 1;
		return 1;
	}
	c->scan = c->len;
	if (!c->eof)
		return 0;
	if (c->off == c->len)
		return -ECONNRESET;
	*line = c->buf + c->off;
	*len = c->len - c->off;
	c->buf[c->len] = '\0';
	c->off = c->scan = c->len;
	return 1;
}

/* Room to read into: earlier lines reclaimed (the caller is done with
 * them), the buffer grown so that half a chunk is free. */
static int make_room(ctl_conn *c)
{
	if (c->off > 0) {
		memmove(c->buf, c->buf + c->off, c->len - c->off);
		c->len -= c->off;
		c->scan -= c->off;
		c->off = 0;
	}
	if (c->line_max && c->len >= c->line_max)
		return -EMSGSIZE;
	if (c->cap - c->len >= READ_CHUNK / 2)
		return 0;
	size_t cap = c->cap ? c->cap * 2 : READ_CHUNK;
	while (cap - c->len < READ_CHUNK / 2)
		cap *= 2;
	char *b = realloc(c->buf, cap);
	if (!b)
		return -ENOMEM;
	c->buf = b;
	c->cap = cap;
	return 0;
}

/* One recv into the buffer: 0 after bytes or the end came, -EAGAIN when
 * nothing is there yet. */
static int fill(ctl_conn *c, bool block)
{
	int r = make_room(c);
	if (r < 0)
		return r;
	for (;;) {
		/* One byte spare for the terminating NUL of a final fragment. */
		ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, block ? 0 : MSG_DONTWAIT);
		if (n > 0) {
			c->len += (size_t)n;
			return 0;
		}
		if (n == 0 || errno == ECONNRESET) {
			c->eof = true; /* a reset is a close too: nothing more will come */
			return 0;
		}
		if (errno == EINTR && !interrupted(c))
			continue;
		if (errno == EINTR)
			return -EINTR;
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
}

static int read_line(ctl_conn *c, int64_t deadline, int extra_fd, const char **line, size_t *len)
{
	bool block = may_block(c, deadline, extra_fd);
	for (;;) {
		int r = take_line(c, line, len);
		if (r != 0)
			return r < 0 ? r : 0;
		r = fill(c, block);
		if (r == -EAGAIN)
			r = conn_wait(c, POLLIN, deadline, extra_fd, NULL);
		if (r < 0)
			return r;
	}
}

int ctl_read_line(ctl_conn *c, const char **line, size_t *len)
{
	if (!c || !line || !len)
		return -EINVAL;
	return read_line(c, c->deadline, -1, line, len);
}

int ctl_parse_line(const char *line, size_t len, json_t **value)
{
	if (!value)
		return -EINVAL;
	*value = NULL;
	if (!line)
		return -EINVAL;
	/* NULs inside strings are legal JSON; integers past 64 bits are not
	 * jansson's, so a second try reads them as reals rather than fail. */
	*value = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
	if (!*value)
		*value = json_loadb(line, len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, NULL);
	return *value ? 0 : -EPROTO;
}

/* The next line as a reply object. */
static int read_reply(ctl_conn *c, json_t **reply)
{
	const char *line;
	size_t len;
	int r = ctl_read_line(c, &line, &len);
	if (r == -ECONNRESET)
		return -EPROTO;
	if (r < 0)
		return r;
	if (ctl_parse_line(line, len, reply) < 0 || !json_is_object(*reply)) {
		json_decref(*reply);
		*reply = NULL;
		return -EPROTO;
	}
	return 0;
}

int ctl_request(ctl_conn *c, const json_t *req, json_t **reply)
{
	if (!reply)
		return -EINVAL;
	*reply = NULL;
	if (!c || !req)
		return -EINVAL;
	size_t n;
	char *line = jsonmp_dumps(req, SEND_FLAGS, 1, &n);
	if (!line)
		return -ENOMEM;
	int r = ctl_write(c, line, n);
	free(line);
	/* After -EPIPE agentd may still have replied (too_large): read on. */
	if (r < 0 && r != -EPIPE)
		return r;
	return read_reply(c, reply);
}

/* The requests as one buffer of lines. */
static char *lines_of(const json_t *reqs, size_t *len)
{
	size_t i, n = 0;
	json_t *r;
	char *buf = NULL;
	json_array_foreach(reqs, i, r) {
		size_t ll;
		char *l = jsonmp_dumps(r, SEND_FLAGS, 1, &ll);
		char *b = l ? realloc(buf, n + ll + 1) : NULL;
		if (!b) {
			free(l);
			free(buf);
			return NULL;
		}
		buf = b;
		memcpy(buf + n, l, ll);
		n += ll;
		free(l);
	}
	*len = n;
	return buf ? buf : calloc(1, 1);
}

/* One round of a pipeline: wait for input or room, send some, read some. */
static int pipeline_step(ctl_conn *c, const char *out, size_t len, size_t *off)
{
	short got = 0;
	int r = conn_wait(c, (short)(POLLIN | (*off < len ? POLLOUT : 0)), c->deadline, -1, &got);
	if (r < 0)
		return r;
	if (*off < len && (got & POLLOUT)) {
		ssize_t w = send_some(c, out + *off, len - *off, false);
		if (w > 0)
			*off += (size_t)w;
		else if (w < 0 && w != -EAGAIN && w != -EPIPE) /* after EPIPE: read what was answered */
			return (int)w;
	}
	if (got & (POLLIN | POLLHUP | POLLERR)) {
		r = fill(c, false);
		if (r < 0 && r != -EAGAIN)
			return r;
	}
	return 0;
}

int ctl_pipeline(ctl_conn *c, const json_t *reqs, json_t **replies)
{
	if (!replies)
		return -EINVAL;
	*replies = NULL;
	if (!c || !json_is_array(reqs))
		return -EINVAL;
	size_t len, off = 0, want = json_array_size(reqs);
	int e = 0;
	char *out = lines_of(reqs, &len);
	json_t *got = json_array();
	if (!out || !got) {
		e = -ENOMEM;
		goto fail;
	}
	while (json_array_size(got) < want) {
		const char *line;
		size_t ll;
		json_t *r;
		e = take_line(c, &line, &ll);
		if (e == 0) { /* no whole line yet */
			if ((e = pipeline_step(c, out, len, &off)) < 0)
				goto fail;
			continue;
		}
		if (e < 0 || ctl_parse_line(line, ll, &r) < 0 || !json_is_object(r)) {
			if (e >= 0)
				json_decref(r);
			e = -EPROTO; /* agentd closed before the last reply, or sent no object */
			goto fail;
		}
		if (json_array_append_new(got, r)) {
			e = -ENOMEM;
			goto fail;
		}
	}
	free(out);
	*replies = got;
	return 0;
fail:
	free(out);
	json_decref(got);
	return e;
}

int ctl_watch_open(ctl_conn *c, const char *conv, long long after, int runs, json_t **reply)
{
	if (!reply)
		return -EINVAL;
	*reply = NULL;
	if (!c || !conv)
		return -EINVAL;
	json_t *req = after >= 0 ? json_pack("{sssssI}", "op", "watch", "conversation", conv, "after", (json_int_t)after)
				 : json_pack("{ssss}", "op", "watch", "conversation", conv);
	if (req && runs && json_object_set_new(req, "runs", json_true())) {
		json_decref(req);
		req = NULL;
	}
	if (!req)
		return -ENOMEM;
	int e = ctl_request(c, req, reply);
	json_decref(req);
	return e;
}

int ctl_watch_next(ctl_conn *c, int timeout_ms, int extra_fd, const char **line, size_t *len)
{
	if (!c || !line || !len)
		return -EINVAL;
	return read_line(c, timeout_ms >= 0 ? now_ms() + timeout_ms : -1, extra_fd, line, len);
}

const char *ctl_strerror(int err)
{
	switch (err) {
	case -ENOENT: case -ECONNREFUSED: return "agentd is not running (nothing listens on the control socket)";
	case -EACCES: case -EPERM: return "no permission to connect to agentd's control socket";
	case -ETIMEDOUT: return "agentd did not answer in time";
	case -EPROTO: return "agentd's reply was not a JSON object line";
	case -EMSGSIZE: return "agentd's reply was too large";
	case -ENAMETOOLONG: return "the control socket path is too long";
	case -ENOMEM: return "out of memory";
	case -ECONNRESET: return "agentd closed the connection";
	case -EINTR: return "interrupted";
	}
	return strerror(-err);
}
