/*
 * forward.h: ops on a conversation whose worker runs on another node
 * (docs/scale-out.md, "Ops on any node").
 *
 * Every node serves every op for every conversation, but a worker is a
 * process on the node that owns the conversation's lease. What acts on it
 * goes to that node as a message on its wakeup channel (store_notify_msg),
 * in two kinds:
 *   - asks (kill, stop, compact, get's worker): the node that received the
 *     request parks its reply, the owner acts and answers on the asker's
 *     channel, and the reply says what the owner did and names it (`node`).
 *     An owner that does not answer within lease_time (a compaction: does
 *     not accept it within lease_time, or stops beating before it reports)
 *     fails the request `unavailable` naming it; get shows its worker as
 *     {node, pid: null, state: "unknown"} instead.
 *   - tells (delete, cancel, update to ended): the write is committed where
 *     it was received, and the same transaction tells the owner, which kills
 *     or stops its worker when the message arrives (a delete tells every
 *     node, which also ends the watches on it there). They are hints: the
 *     durable part (rows gone, a new lease) also stops that worker at the
 *     owner's next heartbeat (nodes.c, fence_lost) or at its next write.
 *
 * Messages, one per notification, fields split by spaces (ids hold none):
 *   ask ID FROM ACTION CONV SIGNAL DEADLINE
 *                                      ACTION: kill, stop, compact, worker;
 *                                      DEADLINE: store time (ms) past which
 *                                      the owner drops it (the asker answered)
 *   ack ID                             a compaction accepted: it runs
 *   ans ID JSON                        the owner's answer (compact JSON)
 *   tell ACTION CONV                   ACTION: delete, cancel, end
 * ID is the asker's (its start time and a counter), FROM its node id.
 *
 * It stands below nodes.c, which owns its input: nodes_open opens it with
 * the node's id and lease time, the node's wakeup channel hands it the
 * messages (forward_heard) and its heartbeat the clock (forward_tick). It
 * calls nothing of nodes.c.
 */
#ifndef AGENTD_FORWARD_H
#define AGENTD_FORWARD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct client;
struct slot;

enum forward_action { FORWARD_KILL, FORWARD_STOP, FORWARD_COMPACT, FORWARD_WORKER };

/* Called by nodes_open once the node is known: self, its id (copied);
 * shared, whether other nodes may share the store (0: every call here acts
 * as on a store of one node); lease_ms, what each wait for another node is
 * bounded by. */
void forward_open(store *st, const char *self, int shared, int64_t lease_ms);
/* At shutdown, before the clients go: every parked reply is answered
 * `unavailable`. */
void forward_close(void);

/* In t: 1 when another node holds conv's lease and it has not expired
 * (owner gets its id), 0 when this node or no live node does (act here),
 * or a store error (STORE_E_NOTFOUND). Always 0 on a store of one node. */
int forward_owner(store_txn *t, const char *conv, char owner[STORE_ID_MAX + 1]);

/* Ask owner to act on conv's worker, and answer s (with id rqid) when it
 * has: kill with signal sig; partial: get's reply, whose conversation's
 * worker the answer fills (stolen, also on failure). 0 (s is taken), or
 * -ENOMEM, or a store error sending the message (s is not taken). */
int forward_ask(int action, const char *conv, const char *owner, struct slot *s, json_t *rqid, int sig,
		json_t *partial);

/* In the write transaction t that deletes conv, cancels its turn or ends
 * it ("delete", "cancel", "end"): tell its owner, if another node, at
 * commit (a delete: every other node, for the watchers each may have).
 * Before the delete (the row names the owner). 0 or a store error. */
int forward_tell(store_txn *t, const char *conv, const char *action);

/* A message heard on this node's channel (nodes.c calls it). */
void forward_heard(const char *msg, size_t len);
/* At each heartbeat (nodes.c calls it): fail the asks whose owner did not
 * answer in time. */
void forward_tick(void);
/* c goes: its parked replies are answered to nobody. */
void forward_client_gone(struct client *c);

/* What `metrics` shows (nodes.c): asks sent, those that went unanswered,
 * asks served here for other nodes, tells sent. */
struct forward_counts {
	uint64_t asked, unanswered, served, told;
};
void forward_counts(struct forward_counts *out);

#endif
