/* ctl.c: agentd-web's control protocol client (see ctl.h). */
#include "web/ctl.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path)
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A local stream connect completes at once or fails (no EINPROGRESS
	 * for AF_UNIX except a full backlog: EAGAIN, reported as is). */
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static int send_all(int fd, const char *p, size_t n, long long deadline)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pf = { fd, POLLOUT, 0 };
			long long left = deadline - mono_ms();
			if (left <= 0)
				return -ETIMEDOUT;
			if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
				return -errno;
			continue;
		}
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read until w->buf holds a newline (its index in *nl); 0 on timeout. */
static int read_line(struct ctl_watch *w, int timeout_ms, int extra_fd, size_t *nl)
{
	long long deadline = mono_ms() + timeout_ms;
	size_t scanned = 0;
	for (;;) {
		char *p = w->len > scanned ? memchr(w->buf + scanned, '\n', w->len - scanned) : NULL;
		if (p) {
			*nl = (size_t)(p - w->buf);
			return 1;
		}
		scanned = w->len;
		if (w->len >= CTL_REPLY_MAX)
			return -EMSGSIZE;
		if (w->cap - w->len < 4096) {
			size_t cap = w->cap ? w->cap * 2 : 16384;
			char *b = realloc(w->buf, cap);
			if (!b)
				return -ENOMEM;
			w->buf = b;
			w->cap = cap;
		}
		ssize_t r = recv(w->fd, w->buf + w->len, w->cap - w->len, 0);
		if (r > 0) {
			w->len += (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		struct pollfd pf[2] = { { w->fd, POLLIN, 0 }, { extra_fd, POLLRDHUP, 0 } };
		long long left = deadline - mono_ms();
		if (left <= 0)
			return 0;
		int n = poll(pf, extra_fd >= 0 ? 2 : 1, (int)left);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0 && extra_fd >= 0 && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return -EPIPE;
	}
}

/* The first line, parsed, consumed from w->buf. */
static int first_reply(struct ctl_watch *w, json_t *req, int timeout_ms, json_t **reply)
{
	char *line = json_dumps(req, JSON_COMPACT);
	size_t nl;
	if (!line)
		return -ENOMEM;
	size_t n = strlen(line);
	char *l2 = realloc(line, n + 2);
	if (!l2) {
		free(line);
		return -ENOMEM;
	}
	l2[n] = '\n';
	int e = send_all(w->fd, l2, n + 1, mono_ms() + timeout_ms);
	free(l2);
	if (e)
		return e;
	e = read_line(w, timeout_ms, -1, &nl);
	if (e == 0)
		return -ETIMEDOUT;
	if (e < 0)
		return e == -ECONNRESET ? -EPROTO : e;
	*reply = json_loadb(w->buf, nl, 0, NULL);
	if (!*reply || !json_is_object(*reply)) {
		json_decref(*reply);
		*reply = NULL;
		return -EPROTO;
	}
	memmove(w->buf, w->buf + nl + 1, w->len - nl - 1);
	w->len -= nl + 1;
	return 0;
}

int ctl_request(const char *path, json_t *req, int timeout_ms, json_t **reply)
{
	struct ctl_watch w = { .fd = -1 };
	*reply = NULL;
	if ((w.fd = ctl_connect(path)) < 0)
		return w.fd;
	int e = first_reply(&w, req, timeout_ms, reply);
	ctl_watch_close(&w);
	return e;
}

/* The requests as one buffer of lines. */
static char *lines_of(json_t *reqs, size_t *len)
{
	size_t i, n = 0, cap = 0;
	json_t *r;
	char *buf = NULL;
	json_array_foreach(reqs, i, r) {
		char *l = json_dumps(r, JSON_COMPACT);
		size_t ll = l ? strlen(l) : 0;
		if (l && n + ll + 1 > cap) {
			size_t nc = (n + ll + 1) * 2;
			char *b = realloc(buf, nc);
			if (!b) {
				free(l);
				l = NULL;
			} else {
				buf = b;
				cap = nc;
			}
		}
		if (!l) {
			free(buf);
			return NULL;
		}
		memcpy(buf + n, l, ll);
		buf[n + ll] = '\n';
		n += ll + 1;
		free(l);
	}
	*len = n;
	return buf ? buf : calloc(1, 1);
}

int ctl_pipeline(const char *path, json_t *reqs, int timeout_ms, json_t **replies)
{
	struct ctl_watch w = { .fd = -1 };
	size_t len, off = 0, want = json_array_size(reqs);
	long long deadline = mono_ms() + timeout_ms;
	int e = 0;
	char *out = lines_of(reqs, &len);
	*replies = json_array();
	if (!out || !*replies) {
		e = -ENOMEM;
		goto fail;
	}
	if ((w.fd = ctl_connect(path)) < 0) {
		e = w.fd;
		goto fail;
	}
	while (json_array_size(*replies) < want) {
		size_t nl;
		/* Whole lines already read first; then wait for more input, or
		 * room to send the rest. */
		char *p = w.len ? memchr(w.buf, '\n', w.len) : NULL;
		if (p) {
			nl = (size_t)(p - w.buf);
			json_t *r = json_loadb(w.buf, nl, 0, NULL);
			if (!json_is_object(r)) {
				json_decref(r);
				e = -EPROTO;
				goto fail;
			}
			json_array_append_new(*replies, r);
			memmove(w.buf, w.buf + nl + 1, w.len - nl - 1);
			w.len -= nl + 1;
			continue;
		}
		struct pollfd pf = { w.fd, (short)(POLLIN | (off < len ? POLLOUT : 0)), 0 };
		long long left = deadline - mono_ms();
		if (left <= 0) {
			e = -ETIMEDOUT;
			goto fail;
		}
		if (poll(&pf, 1, (int)left) < 0 && errno != EINTR) {
			e = -errno;
			goto fail;
		}
		if (off < len && (pf.revents & POLLOUT)) {
			ssize_t n = send(w.fd, out + off, len - off, MSG_NOSIGNAL);
			if (n > 0)
				off += (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				e = -errno;
				goto fail;
			}
		}
		if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
			/* read_line with no wait: takes what is there, 0 when nothing */
			e = read_line(&w, 0, -1, &nl);
			if (e < 0) {
				e = e == -ECONNRESET ? -EPROTO : e;
				goto fail;
			}
			e = 0;
		}
	}
	free(out);
	ctl_watch_close(&w);
	return 0;
fail:
	free(out);
	ctl_watch_close(&w);
	json_decref(*replies);
	*replies = NULL;
	return e;
}

int ctl_watch_open(const char *path, const char *conv, long long after, int runs, int timeout_ms,
		   struct ctl_watch *w, json_t **reply)
{
	*reply = NULL;
	memset(w, 0, sizeof *w);
	w->fd = -1;
	json_t *req = after >= 0 ? json_pack("{sssssI}", "op", "watch", "conversation", conv, "after", (json_int_t)after)
				 : json_pack("{ssss}", "op", "watch", "conversation", conv);
	if (req && runs && json_object_set_new(req, "runs", json_true())) {
		json_decref(req);
		req = NULL;
	}
	if (!req)
		return -ENOMEM;
	int e = (w->fd = ctl_connect(path)) < 0 ? w->fd : first_reply(w, req, timeout_ms, reply);
	json_decref(req);
	if (e || !json_is_true(json_object_get(*reply, "ok")))
		ctl_watch_close(w);
	return e;
}

int ctl_watch_next(struct ctl_watch *w, int timeout_ms, int extra_fd, const char **line, size_t *len)
{
	size_t nl;
	/* The line returned last time is still at the front: drop it now. */
	if (w->drop) {
		memmove(w->buf, w->buf + w->drop, w->len - w->drop);
		w->len -= w->drop;
		w->drop = 0;
	}
	int e = read_line(w, timeout_ms, extra_fd, &nl);
	if (e <= 0)
		return e;
	w->buf[nl] = 0;
	*line = w->buf;
	*len = nl;
	w->drop = nl + 1;
	return 1;
}

void ctl_watch_close(struct ctl_watch *w)
{
	if (w->fd >= 0)
		close(w->fd);
	free(w->buf);
	w->fd = -1;
	w->buf = NULL;
	w->len = w->cap = w->drop = 0;
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
	}
	return strerror(-err);
}
