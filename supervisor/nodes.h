/*
 * nodes.h: this supervisor as one node of those sharing a store
 * (docs/scale-out.md, "Several nodes, one database").
 *
 * A node has an id (the `node_id` setting, else the host's name) and owns
 * the conversations it runs through leases in the store (store.h, "nodes"):
 * it heartbeats every `heartbeat` (a third of `lease_time` by default),
 * which renews them; it claims a conversation before it starts a worker for
 * it, which takes the writer generation the worker is fenced by. A claim
 * that meets another node's live lease starts nothing here: the owner is
 * told (store_notify) and its worker reads the log. After each beat the
 * node stops its workers whose leases moved (it was stopped, or cut off,
 * past lease_time), then claims conversations that owe work and have no
 * live owner (a node that stopped beating), FOR UPDATE SKIP LOCKED so that
 * nodes doing so at once share them out.
 *
 * On PostgreSQL the node listens for wakeups (store_listen) and polls every
 * `notify_poll` as a fallback: its own conversations that owe work get a
 * worker, and every conversation a client waits on here is looked at again,
 * so a long-poll or a watch sees what other nodes write. On LMDB there is
 * one node: it beats (the `nodes` op lists it) and claims, and at start it
 * takes over what an earlier id of this data directory held.
 *
 * It stands above forward.c (ops on conversations other nodes run) and owns
 * its input: it opens it with the node's id and lease time, hands it the
 * messages heard on the wakeup channel, and ticks it at each heartbeat.
 */
#ifndef AGENTD_NODES_H
#define AGENTD_NODES_H

#include <jansson.h>
#include <stdint.h>

#include "common/config.h"
#include "store/store.h"

/* Take the node's id, beat once, arm the heartbeat, open forward.c, and
 * on PostgreSQL listen for wakeups. 0, or (logged) -EINVAL (no node_id and
 * no usable host name), the store's error listening or beating the first
 * time (-EIO when the beat failed without one), or the timer's -errno. */
int nodes_open(store *st, const struct config *cfg);
/* At a clean shutdown, after the workers stopped: leave (the leases go at
 * once, for the other nodes to claim). */
void nodes_leave(void);
void nodes_close(void);

/* Whether other nodes may share the store (PostgreSQL). */
int nodes_shared(void);

/* Claim conv for this node in t, for its next worker (workers_hooks.claim):
 * 0 with *gen, WORKERS_ELSEWHERE when another node owns it (it was told:
 * nothing to start here), or a store error (STORE_E_NOTFOUND: the
 * conversation is gone). */
int nodes_claim(store_txn *t, const char *conv, uint64_t *gen);

/* conv's worker of generation gen ended owing nothing: give its lease
 * back (nothing when it moved already; workers_hooks.released). */
void nodes_release(const char *conv, uint64_t gen);

/* The `nodes` op's reply fields (0, -ENOMEM, or the store's error reading
 * the nodes), `status`'s `node` object, and the lines `metrics` adds (a
 * malloc'd string, NULL when out of memory). */
int nodes_json(store_txn *t, json_t **out);
json_t *nodes_status_json(void);
char *nodes_metrics_text(void);

#endif
