/*
 * ops.h: the control protocol's ops: the op table (one row per op, as Redis
 * has its command table) and their handlers. commit.h runs the table at
 * the end of each loop iteration (the job queue, the group commit, the
 * writer thread); this module says what each op does.
 */
#ifndef AGENTD_OPS_H
#define AGENTD_OPS_H

#include <jansson.h>
#include <stdint.h>

#include "common/config.h"
#include "ipc/proto.h"
#include "store/store.h"
#include "supervisor/waiters.h"

struct client;

struct ops_env {
	const struct config *cfg;
	store *st;
	const char *data_dir;      /* shown by status */
	int64_t started_ms;        /* monotonic: status's uptime */
	void (*shutdown)(struct client *by); /* the shutdown op (by: its client, or NULL) */
	void (*rearm_expiry)(void);          /* after a commit that moved a deadline (extend) */
	void (*rearm_wakeup)(void);          /* after a commit that added or removed a schedule */
};

/* Start using env (kept: it must outlive the module), and give commit.h
 * the op table to run (commit_init). */
void ops_init(const struct ops_env *env);

int ops_is_write(int op);
/* Whether op's reply carries stored data and may be large (control_hooks.is_large). */
int ops_reply_large(int op);

/* The `events` query and reply, given to long-polls as hooks (waiters_init:
 * waiters.c stands below ops and never names it); *txnid gets the id of
 * the transaction it read (durable.h). The query: the events as a JSON
 * array, or NULL with *err (enum proto_err) and msg set. The reply: NULL
 * when out of memory (evs taken either way). */
json_t *ops_events_query(const struct request *rq, uint64_t *last_seq, struct events_next *next, uint64_t *txnid,
			 int *err, char *msg, size_t msglen);
json_t *ops_events_reply(json_t *evs, uint64_t last, const struct events_next *next);

#endif
