/*
 * ctl.h: agentd-web's client of agentd's control protocol (docs/protocol.md).
 *
 * agentd-web speaks only the public protocol: JSON lines over the control
 * socket. Every request is one connection (agentd answers in order and holds
 * no per-connection state but watches), so a slow reply for one page never
 * delays another's, and a watch owns its connection until it is closed.
 *
 * Rules: the peer check of agentd (SO_PEERCRED) applies: agentd-web must run
 * as agentd's uid (or root) unless agentd has allow_any_uid on. Functions are
 * thread-safe (no shared state).
 */
#ifndef AGENTD_WEB_CTL_H
#define AGENTD_WEB_CTL_H

#include <jansson.h>

/* The longest reply line accepted (an `events` page of large events). */
#define CTL_REPLY_MAX (64u << 20)

/* Send req (borrowed) to the socket at path and read one reply line.
 * Returns 0 and the parsed reply object in *reply (the caller decrefs; it
 * may be {"ok":false,...}: check "ok"), or -errno: -ECONNREFUSED/-ENOENT
 * (agentd not running), -ETIMEDOUT (no reply in timeout_ms), -EPROTO (a
 * reply that is not a JSON object line), -EMSGSIZE (over CTL_REPLY_MAX). */
int ctl_request(const char *path, json_t *req, int timeout_ms, json_t **reply);

/* Send every request in reqs (an array of objects, borrowed) on one
 * connection, pipelined (agentd answers in request order), reading replies
 * while sending so that neither side's buffer fills up waiting for the
 * other. Returns 0 with *replies an array of as many reply objects, in
 * request order (the caller decrefs), or -errno as ctl_request. */
int ctl_pipeline(const char *path, json_t *reqs, int timeout_ms, json_t **replies);

/* A started watch: the connection, and what was read past the first reply. */
struct ctl_watch {
	int fd;
	char *buf;
	size_t len, cap;
	size_t drop; /* the line returned last: dropped at the next call */
};

/* Start a watch of conv after seq `after` (-1: from the current last seq),
 * with runs (the watch's `runs: true`: run starts and ends stream too, as
 * {"run": {...}} lines) when runs is nonzero. Returns 0 with w set up and
 * *reply the first reply (ok or not: on an error reply the connection is
 * closed already and w->fd is -1), or -errno as ctl_request. */
int ctl_watch_open(const char *path, const char *conv, long long after, int runs, int timeout_ms,
		   struct ctl_watch *w, json_t **reply);
/* The next complete line of the watch, without its newline, in *line (a
 * pointer into w->buf valid until the next call; *len its length). Waits at
 * most timeout_ms (poll also watches extra_fd for POLLHUP/POLLRDHUP/POLLIN
 * when >= 0: a browser that went away). Returns 1 with a line, 0 on timeout,
 * -EPIPE when extra_fd hung up, -ECONNRESET when agentd closed the watch
 * (the conversation was deleted, agentd stopped), other -errno on errors. */
int ctl_watch_next(struct ctl_watch *w, int timeout_ms, int extra_fd, const char **line, size_t *len);
void ctl_watch_close(struct ctl_watch *w);

/* A message for ctl_request's -errno codes ("agentd is not running at PATH"). */
const char *ctl_strerror(int err);

#endif
