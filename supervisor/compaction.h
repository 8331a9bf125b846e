/*
 * compaction.h: the `compact` op's reply when this node's worker compacts.
 * The request is asked of the worker (workers_compact, with this module's
 * callback) and its reply slot waits here until the worker reports: the
 * summary it committed, read from the store, or why it failed. workers.c
 * knows no client: it reports only through that callback. A compaction of
 * a conversation another node runs goes through forward.h instead.
 */
#ifndef AGENTD_COMPACTION_H
#define AGENTD_COMPACTION_H

#include <jansson.h>

#include "store/store.h"

struct client;
struct slot;

/* Ask conv's worker (workers_wake it first) to compact, answering s (with
 * the reply id id, borrowed) when it reports; s NULL (its client went): the
 * compaction is asked all the same, its reply dropped. st is where the
 * summary is read then. 0: s is taken and answered later. Otherwise s is
 * not touched: -EINVAL (st or conv is NULL), -ENOMEM, or workers_compact's
 * error. */
int compaction_ask(store *st, const char *conv, struct slot *s, json_t *id);

/* c goes: the compactions it asked for go on, their replies are dropped. */
void compaction_client_gone(struct client *c);

#endif
