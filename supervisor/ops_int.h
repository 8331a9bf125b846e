/*
 * ops_int.h: what the files of the ops module share (ops.c, ops_read.c,
 * ops_write.c, ops_cancel.c, ops_settle.c, ops_schedule.c): the handlers the op table names, and the
 * helpers more than one of them uses. Not for any other module: ops.h is
 * the module's contract.
 */
#ifndef AGENTD_OPS_INT_H
#define AGENTD_OPS_INT_H

#include <jansson.h>

#include "store/store.h"
#include "supervisor/commit.h"
#include "supervisor/ops.h"

struct jsonmp_buf;

/* The environment ops_init was given. */
const struct ops_env *ops_ctx(void);

/* v packed as msgpack into b: 0, or jsonmp_pack's -EINVAL (too deep) or
 * -ENOMEM; b is freed on failure. */
int ops_pack(struct jsonmp_buf *b, json_t *v);
/* A failed ops_pack as the client's error (what nests too deeply) or ours. */
void ops_pack_error(struct job *j, int e, const char *what);
/* Who asked, for the audit trail (resolve's, extend's, settle's): the peer's
 * uid always (it cannot be forged), and the name a client such as agentd-web
 * gives for its user. NULL with j's error set when out of memory (ops_write.c). */
json_t *ops_by_json(struct job *j);
/* Stored bytes as JSON: null when undecodable (agentd check names it),
 * NULL when out of memory (the reply fails; it never shows null for it). */
json_t *ops_mp_json(store_bytes b);
/* A store_events_stream callback: ev appended to the JSON array arg. 0 or -ENOMEM. */
int ops_append_json(void *arg, const struct store_event *ev);
/* A conversation record as the protocol shows it (with_worker: and its
 * worker). NULL when out of memory: never a record short of a field. */
json_t *ops_conv_json(store_txn *t, const struct store_conv *c, int with_worker);
/* Park j's reply until owner, the node that runs its conversation, has
 * acted (forward.h); see ops.c. */
void ops_park_forward(struct job *j, int action, const char *owner, int sig);
/* Whether j's conversation is run by another live node, to which j went
 * (parked, or failed with j's error): 1, or 0 to act here. */
int ops_forwarded(struct job *j, int action);
/* j's conversation exists: 0, or the store's error (j's error set). */
int ops_conv_check(struct job *j);

/* The reads of the store (ops_read.c). */
void ops_get(store_txn *t, struct job *j);
void ops_runs(store_txn *t, struct job *j);
void ops_list(store_txn *t, struct job *j);
void ops_events(store_txn *t, struct job *j);
void ops_watch(store_txn *t, struct job *j);
void ops_tool_call(store_txn *t, struct job *j);
void ops_tool_calls(store_txn *t, struct job *j);
void ops_summary(store_txn *t, struct job *j);
void ops_audit(store_txn *t, struct job *j);
void ops_nodes(store_txn *t, struct job *j);

/* The writes (ops_write.c) and their after steps (commit_op). */
int ops_w_create(store_txn *t, struct job *j, struct wres *r);
int ops_w_update(store_txn *t, struct job *j, struct wres *r);
int ops_w_delete(store_txn *t, struct job *j, struct wres *r);
int ops_w_send(store_txn *t, struct job *j, struct wres *r);
int ops_w_resolve(store_txn *t, struct job *j, struct wres *r);
int ops_w_fork(store_txn *t, struct job *j, struct wres *r);
int ops_w_extend(store_txn *t, struct job *j, struct wres *r);
void ops_after_update(struct job *j, struct wres *r);
void ops_after_delete(struct job *j, struct wres *r);
void ops_after_send(struct job *j, struct wres *r);
void ops_after_resolve(struct job *j, struct wres *r);
void ops_after_fork(struct job *j, struct wres *r);
void ops_after_extend(struct job *j, struct wres *r);

/* A decision on an unknown call (ops_settle.c). */
int ops_w_settle(store_txn *t, struct job *j, struct wres *r);
void ops_after_settle(struct job *j, struct wres *r);

/* Cancel and resume (ops_cancel.c). */
int ops_w_cancel(store_txn *t, struct job *j, struct wres *r);
int ops_w_resume(store_txn *t, struct job *j, struct wres *r);
void ops_after_cancel(struct job *j, struct wres *r);
void ops_after_resume(struct job *j, struct wres *r);

/* A conversation's scheduled wakeups (ops_schedule.c). */
int ops_w_schedule(store_txn *t, struct job *j, struct wres *r);
int ops_w_unschedule(store_txn *t, struct job *j, struct wres *r);
void ops_schedules(store_txn *t, struct job *j);
void ops_after_schedule(struct job *j, struct wres *r);
void ops_after_unschedule(struct job *j, struct wres *r);

#endif
