/*
 * retention.h: what the store keeps (docs/operations.md, "Retention"). An
 * idle conversation untouched for end_idle_after is ended; an ended one
 * untouched for remove_ended_after is removed, exported first into
 * retention_export when that is set. Passes run a second after start, then
 * every retention_interval, in steps: each step reads a bounded slice of the
 * conversations (a read transaction), then writes what it found due in one
 * short write transaction of its own, and the loop serves its clients
 * between steps. Every node of a shared store runs them; each write checks
 * again, in its transaction, that the conversation is still due.
 */
#ifndef AGENTD_RETENTION_H
#define AGENTD_RETENTION_H

#include <stdint.h>

#include "common/config.h"
#include "store/store.h"

/* Nothing runs when neither end_idle_after nor remove_ended_after is set. */
void retention_init(store *st, const struct config *cfg, int64_t now);
/* When the loop must wake for the next step (monotonic ms), 0: never. */
int64_t retention_deadline(void);
/* A step, when one is due at now (monotonic ms). */
void retention_tick(int64_t now);

#endif
