/*
 * control.h: the control socket (docs/protocol.md, "Framing"): the listening
 * socket, its clients with their own input and output buffers, and replies
 * that leave in request order even when some are made later (a long-poll, a
 * compaction, a write waiting for the group commit). Only complete lines are
 * parsed.
 *
 * What one client may cost is bounded before its replies are built, not
 * after (Redis's client output buffer limits and per-event fairness):
 *  - per loop iteration a client gets at most CONTROL_REQS_PER_WAKEUP requests
 *    parsed;
 *  - none while its queued output (written, or finished and waiting behind a
 *    reply still owed) is over CONTROL_OUT_CAP, nor while it is owed
 *    CONTROL_REQS_PER_WAKEUP replies: a connection holds at most
 *    CONTROL_OUT_CAP plus one reply;
 *  - a request whose reply may be large (control_hooks.is_large: it carries
 *    stored data, as events, get and list do) is parsed only within a budget:
 *    one per client per round, where a round lasts until every client that
 *    asked has had one, and about 1 MiB of them per iteration (each client's
 *    next reply guessed from its last one; a line turned away stays in the
 *    buffer). With a ping answered before the iteration's other requests run
 *    (commit_execute), a ping waits for at most about 1 MiB of replies being
 *    built, however many clients flood, and a client that never reads, never
 *    sends, or hangs up mid-line stalls nobody else.
 * Every request parsed is answered without the client's help: the backlog's
 * replies are flushed as it is parsed.
 *
 * What a request means is not this module's business: each parsed request
 * goes up through control_hooks.request with the slot its reply fills.
 *
 * Caveats:
 *  - A client is never freed inside a callback: it is marked dead and freed
 *    by control_reap at the iteration's end (control_hooks.gone first).
 *  - A slot belongs to its client: fill it once (slot_ok or slot_error),
 *    then client_flush the client.
 */
#ifndef AGENTD_CONTROL_H
#define AGENTD_CONTROL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/config.h"
#include "ipc/proto.h"

#define CONTROL_REQS_PER_WAKEUP 64
#define CONTROL_OUT_CAP (4u << 20)

struct client;
struct slot;

struct control_hooks {
	/* A valid request, its reply to be put in s. rq is moved to the
	 * callee (zeroed here). 0, or -ENOMEM (answered internal). */
	int (*request)(struct client *c, struct slot *s, struct request *rq, int64_t started_us, int after_write);
	int (*is_write)(int op);                /* the op is a write: it joins the group commit */
	int (*is_large)(int op);                /* the op's reply may be large: parsed within a budget */
	void (*drained)(struct client *c);      /* its output drained below half the cap */
	void (*gone)(struct client *c);         /* about to be freed: drop what points at it */
};

/* Bind and listen on path (created 0600, or 0666 with allow_any_uid); a
 * stale socket of a dead agentd is replaced, anything else refused. 0, or
 * (logged) -ENOMEM, -ENAMETOOLONG (the path does not fit sun_path),
 * -EADDRINUSE (something else is at the path), or socket(2), bind(2),
 * listen(2) or epoll's -errno. cfg is kept. */
int control_listen(const struct config *cfg, const char *path, const struct control_hooks *hooks);
/* Stop listening and remove the socket file if it is still ours. */
void control_stop_listening(void);
/* Remove the socket file if it is still the one bound. */
void control_unlink(void);
/* Refuse every request but ping and status from now on (shutdown). */
void control_refuse(void);

/* Lines left over from the per-wakeup cap: parse them (after_wait), and
 * whether any client has such lines it may parse now (the loop must not
 * block then: no new input may ever come to wake it). */
void control_backlog(void);
int control_backlog_ready(void);
/* At the iteration's end: flush clients closing, free the dead. */
void control_reap(void);
/* At exit: every line read gets an answer (unavailable), then every client goes. */
void control_close_all(void);
int control_nclients(void);
/* Every client waits on a reply held for the durable frontier: none can
 * send a request until the frontier moves. */
int control_all_held(void);
/* Every client but c waits on a held reply: once c's requests are answered,
 * none can send the next commit before the frontier moves. */
int control_only_free(const struct client *c);

/* ---- one client -------------------------------------------------------- */
/* A reply slot at the end of c's, for the request whose id is id (NULL:
 * none). Its out-of-memory reply, with that id, is made here, so that a
 * reply that cannot be built later still carries it. NULL when out of
 * memory. */
struct slot *slot_new(struct client *c, json_t *id);
void slot_ok(struct slot *s, json_t *id, json_t *obj);           /* obj stolen; NULL: answered out of memory */
void slot_error(struct slot *s, json_t *id, int err, const char *msg);
/* An error reply with more fields (extra: an object, stolen, may be NULL),
 * as send's `conflict` carries `last_seq`. */
void slot_error_with(struct slot *s, json_t *id, int err, const char *msg, json_t *extra);
struct client *slot_client(const struct slot *s);
/* s's reply shows transaction txnid: it leaves only once that is durable
 * (durable.h), and the replies after it wait with it. */
void slot_need(struct slot *s, uint64_t txnid);
/* The durable frontier moved: send the replies it lets through. */
void control_durable_advanced(void);

/* A group commit ran on another thread (loop_restrict): the watches whose
 * output drained meanwhile read their next events now. */
void control_drain_watches(void);

void client_write(struct client *c, const char *p, size_t n);
/* Write the replies that are done, in order, and what else is queued. */
void client_flush(struct client *c);

size_t control_out_pending(const struct client *c);
int control_dead(const struct client *c);
int control_owes(const struct client *c);         /* replies still owed */
void control_end(struct client *c);               /* close once its output is out */
void control_want_write(struct client *c);        /* queued output: wait for writability */
void control_batch_done(struct client *c);        /* its writes of this iteration committed */
void *control_watch(const struct client *c);      /* what waiters keep for a watching client */
void control_set_watch(struct client *c, void *watch);
uid_t control_uid(const struct client *c);
pid_t control_pid(const struct client *c);

#endif
