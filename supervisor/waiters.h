/*
 * waiters.h: clients that wait on a conversation's commits: long-polls (an
 * `events` with wait_ms and nothing to return yet) and watches (a connection
 * that streams a conversation). Kept apart from everything else, keyed by
 * the conversation they wait for, as Redis keeps its blocked clients:
 * nothing else holds them, and a notification only says "look": what a
 * waiter gets is read from the store, in seq order, with no gaps.
 *
 * Caveats:
 *  - waiters_init before anything else here; the query and reply functions
 *    build a long-poll's answer exactly as an `events` request's.
 *  - A client's waiters go with it: call waiters_client_gone before freeing it.
 */
#ifndef AGENTD_WAITERS_H
#define AGENTD_WAITERS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/proto.h"
#include "store/store.h"

struct client;
struct slot;

/* Where an `events` reply cut short goes on (0: it was not): after, the
 * next page's `after` (next_after: seqs past the reply's); before, with a
 * limit, the next page's `before` (next_before: older events the byte cap
 * left out). */
struct events_next {
	uint64_t after;
	uint64_t before;
};

/* An `events` query: the events (a new array) or NULL with *err (enum
 * proto_err) and msg set; *last the conversation's last seq, *next where
 * the next page begins. */
typedef json_t *waiters_query_fn(const struct request *rq, uint64_t *last, struct events_next *next, uint64_t *txnid,
				 int *err, char *msg, size_t msglen);
/* The reply object for events evs (stolen). */
typedef json_t *waiters_reply_fn(json_t *evs, uint64_t last, const struct events_next *next);

void waiters_init(store *st, waiters_query_fn *query, waiters_reply_fn *reply);

/* Park a long-poll: slot s of client c is answered at the first commit to
 * rq->conv that gives it events, or at deadline (monotonic ms) with what
 * there is. Takes rq (its fields are moved out; free it as usual). 0 or
 * -ENOMEM (nothing parked). */
int waiters_poll(struct client *c, struct slot *s, struct request *rq, int64_t deadline);
/* Make c a watch of conv, streaming from after after. 0, -EEXIST (c watches
 * already), -ENOMEM. */
int waiters_watch(struct client *c, const char *conv, uint64_t after);
/* Whether c is a watch (its input is then ignored). */
/* Stream c's watch's runs too (`watch` with runs: docs/protocol.md, "Runs"),
 * from the state t shows (the watch's own transaction): the runs that exist
 * then are not streamed, only their later changes. 0, -ENOENT (no watch),
 * or a store error. */
int waiters_watch_runs(struct client *c, store_txn *t);
int waiters_watching(const struct client *c);

/* conv has new commits (or may have: a worker died without saying). */
void waiters_notify(const char *conv);
/* Every conversation waited on may have new commits (another node's: the
 * fallback poll of nodes.c). */
void waiters_notify_all(void);
/* A streamed model delta for conv's watches: a live view, dropped for a slow
 * reader and never ahead of a reply still owed. */
void waiters_delta(const char *conv, const char *text, size_t len);
/* conv was deleted: its watches end, its long-polls are answered not_found. */
void waiters_deleted(const char *conv);
/* c's output drained: its watch streams on. */
void waiters_drained(struct client *c);
void waiters_client_gone(struct client *c);

/* The durable frontier moved: deliver what waited for it. A long-poll or a
 * watch gets nothing an OS crash could take back (durable.h). */
void waiters_durable_advanced(void);

/* Answer the long-polls whose deadline passed (now: monotonic ms); the
 * earliest deadline left (0: none). */
void waiters_expire(int64_t now);
int64_t waiters_next_deadline(void);
/* At shutdown: every parked long-poll is answered unavailable. */
void waiters_shutdown(void);

#endif
