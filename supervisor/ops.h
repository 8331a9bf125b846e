/*
 * ops.h: the control protocol's ops: the op table (one row per op, as Redis
 * has its command table), their handlers, and each iteration's execution:
 * reads on the committed state, every write of the iteration in one group
 * transaction (one durable commit for all of them), then the reads queued
 * behind a write of their own client, and replies in request order.
 */
#ifndef AGENTD_OPS_H
#define AGENTD_OPS_H

#include <jansson.h>
#include <stdint.h>

#include "common/config.h"
#include "ipc/proto.h"
#include "store/store.h"

struct client;
struct slot;

struct ops_env {
	const struct config *cfg;
	store *st;
	const char *data_dir;      /* shown by status */
	int64_t started_ms;        /* monotonic: status's uptime */
	void (*shutdown)(struct client *by); /* the shutdown op (by: its client, or NULL) */
};

void ops_init(const struct ops_env *env);

/* A parsed request for this iteration (control_hooks.request): rq is moved
 * in. after_write: a read behind a write of its client, run after the
 * commit. 0 or -ENOMEM (rq then stays the caller's, untouched). */
int ops_request(struct client *c, struct slot *s, struct request *rq, int64_t started_us, int after_write);
int ops_is_write(int op);
/* Whether op's reply carries stored data and may be large (control_hooks.is_large). */
int ops_reply_large(int op);
/* c goes: its requests still queued are done with nobody to answer. */
void ops_client_gone(struct client *c);
/* At the iteration's end: execute what was read. */
void ops_execute(void);
/* Last at the iteration's end: hand a group of sends ops_execute made to
 * the writer thread (ops.c). 1 when one went: the loop is restricted
 * (loop_restrict) until it is done. */
int ops_commit_start(void);
/* Requests came while a group committed: the next wait must not block. */
int ops_pending(void);
/* Stop the writer thread (after the loop ended: no group is in flight). */
void ops_close(void);

/* The `events` query and reply, shared with long-polls (waiters.h);
 * *txnid gets the id of the transaction it read (durable.h). */
json_t *ops_events_query(const struct request *rq, uint64_t *last_seq, uint64_t *next, uint64_t *txnid, int *err,
			 char *msg, size_t msglen);
json_t *ops_events_reply(json_t *evs, uint64_t last, uint64_t next);

#endif
