/*
 * ctl.h: the C client library of agentd's control protocol (docs/protocol.md),
 * as hiredis is Redis's: JSON lines over the control socket. Every program of
 * ours that talks to agentd uses it: agentctl, agentd-web and the benchmarks.
 *
 * Caveats (the rules a caller keeps):
 * - One connection is one `ctl_conn`, used by one thread at a time. The
 *   library keeps no state outside it: separate connections may be used
 *   from separate threads at once.
 * - agentd answers the requests of a connection in order, one reply line
 *   each; a watch then owns its connection until it is closed.
 * - agentd's peer check (SO_PEERCRED) applies: the caller runs as agentd's
 *   uid (or root) unless agentd has allow_any_uid on.
 * - The library never raises SIGPIPE (every send is MSG_NOSIGNAL) and never
 *   prints: every failure is a return code, worded by ctl_strerror.
 *
 * Errors: every function returning int returns 0 (or what it says) or a
 * negative errno, one code space, worded by ctl_strerror:
 *   -ENOENT, -ECONNREFUSED  nothing listens on the socket (agentd not running)
 *   -EACCES, -EPERM         no permission to connect
 *   -EAGAIN                 agentd's listen backlog stayed full past the
 *                           connect's timeout
 *   -ENAMETOOLONG           the path does not fit sun_path
 *   -ETIMEDOUT              the connection's deadline passed
 *   -EINTR                  the caller's interrupt flag was raised while
 *                           waiting (ctl_set_signals)
 *   -ECONNRESET             agentd closed the connection (the end of a watch)
 *   -EPIPE                  a write found the connection closed (a reply may
 *                           still be readable), or watch_next's extra fd
 *                           hung up
 *   -EPROTO                 a reply that is not a JSON object line (or none:
 *                           agentd closed the connection before replying)
 *   -EMSGSIZE               a line longer than ctl_set_line_max allows
 *   -ENOMEM                 out of memory
 *   -EINVAL                 an argument out of range (NULL handle, ...)
 * and any other errno of socket(2), connect(2), send(2), recv(2), ppoll(2).
 */
#ifndef AGENTD_CLIENT_CTL_H
#define AGENTD_CLIENT_CTL_H

#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ctl_conn ctl_conn;

/* Connect to the control socket at path. timeout_ms > 0 bounds the connect
 * (a full listen backlog: -EAGAIN after it) and becomes the connection's
 * deadline (ctl_set_timeout); 0: no limit, and calls block as long as they
 * must. Returns 0 with *out a new connection (free it with ctl_close), or a
 * negative errno with *out NULL. */
int ctl_connect(const char *path, int64_t timeout_ms, ctl_conn **out);

/* Close the socket and free c and its buffer; NULL is ignored. A line a
 * read returned is invalid after it. */
void ctl_close(ctl_conn *c);

/* The connection's socket, for a caller that polls or reads it itself (the
 * benchmarks' load generator); it stays c's, closed by ctl_close. Bytes
 * read from it directly bypass c's buffer. */
int ctl_fd(const ctl_conn *c);

/* The three setters ignore a NULL c. */

/* The deadline of every call after this one: timeout_ms from now, or none
 * when timeout_ms <= 0. Past it a call returns -ETIMEDOUT. */
void ctl_set_timeout(ctl_conn *c, int64_t timeout_ms);

/* The longest line a read accepts (-EMSGSIZE past it); 0: no limit (the
 * default). */
void ctl_set_line_max(ctl_conn *c, size_t max);

/* While a call waits, ppoll runs with the signal mask `mask` (NULL: the
 * thread's own), so a signal the caller keeps blocked gets in only there;
 * a wait or a system call interrupted while *interrupted (NULL: never) is
 * nonzero returns -EINTR, otherwise it goes on. Both pointers are borrowed
 * and must outlive c. */
void ctl_set_signals(ctl_conn *c, const sigset_t *mask, volatile sig_atomic_t *interrupted);

/* Write all n bytes of p. 0, -EPIPE (agentd closed first: its reply may
 * still be readable, a too_large reply comes before the close),
 * -ETIMEDOUT, -EINTR, or another errno. */
int ctl_write(ctl_conn *c, const char *p, size_t n);

/* Write line (a request line, no newline in it) and a '\n'. As ctl_write,
 * and -ENOMEM. */
int ctl_send_line(ctl_conn *c, const char *line);

/* The next line, without its '\n' and NUL-terminated, in *line (c's buffer:
 * valid until the next call on c) and its length in *len. A last line
 * without a newline (agentd stopped in the middle of it) is returned as a
 * line before the end. Returns 0; -ECONNRESET at the end of the stream
 * (a reset is an end too); -ETIMEDOUT, -EINTR, -EMSGSIZE, -ENOMEM or
 * another errno. */
int ctl_read_line(ctl_conn *c, const char **line, size_t *len);

/* Parse one line as JSON: strings may hold NUL, and a reply with an integer
 * past 64 bits still reads (as a real). Returns 0 with *value a new
 * reference (any JSON value; the caller decrefs), or -EPROTO with *value
 * NULL when the line is not JSON (out of memory reads so too); -EINVAL for
 * a NULL argument. */
int ctl_parse_line(const char *line, size_t len, json_t **value);

/* Send req (borrowed) as one line and read its reply line. Returns 0 with
 * *reply the reply object (a new reference, the caller decrefs; it may be
 * {"ok":false,...}: check "ok"), or a negative errno with *reply NULL:
 * -EPROTO when the first line is not a JSON object or none came. */
int ctl_request(ctl_conn *c, const json_t *req, json_t **reply);

/* Send every request of the array reqs (borrowed) on c, pipelined, reading
 * replies while sending so that neither side's buffer fills up waiting for
 * the other. Returns 0 with *replies a new array of as many reply objects,
 * in request order (the caller decrefs; each may be an error reply), or a
 * negative errno as ctl_request with *replies NULL. */
int ctl_pipeline(ctl_conn *c, const json_t *reqs, json_t **replies);

/* Start a watch of conversation conv after seq `after` (-1: from its current
 * last seq), with run starts and ends streamed too ({"run": {...}} lines)
 * when runs is nonzero. Returns 0 with *reply the first reply, ok or not (a
 * new reference; after an error reply c streams nothing: close it), or a
 * negative errno as ctl_request. */
int ctl_watch_open(ctl_conn *c, const char *conv, long long after, int runs, json_t **reply);

/* The next line of a watch, as ctl_read_line, waiting at most timeout_ms
 * (< 0: no limit; the connection's deadline does not apply) and, when
 * extra_fd >= 0, watching it too: a peer of the caller's that hangs up ends
 * the wait. Returns 0 with a line; -ETIMEDOUT when timeout_ms passed;
 * -EPIPE when extra_fd hung up; -ECONNRESET when agentd ended the watch
 * (the conversation was deleted, agentd stopped); other errors as
 * ctl_read_line. A watch is closed with ctl_close. */
int ctl_watch_next(ctl_conn *c, int timeout_ms, int extra_fd, const char **line, size_t *len);

/* A sentence for a negative errno of this library, in agentd's terms
 * ("agentd is not running (nothing listens on the control socket)");
 * strerror's for the rest. Never NULL; static storage. */
const char *ctl_strerror(int err);

#endif
