/*
 * metrics.h: the supervisor's counters and histograms, printed in the
 * Prometheus text format by the `metrics` op (docs/protocol.md). Every
 * module counts through these calls; nothing here reads another module.
 */
#ifndef AGENTD_METRICS_H
#define AGENTD_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metric {
	M_SPAWNS, M_CRASHES, M_REVIVALS, M_EXPIRIES_FIRED, M_EXPIRY_COMMITS, M_GROUP_COMMITS, M_GROUP_WRITES,
	M_GROUP_COMMITS_THREAD,
	M_GROUP_COMMITS_FLUSHED,
	M_GATE_GRANTS, M_GATE_WAITS, M_GATE_REVOKED, M_WAKES, M_WAKES_COALESCED, M_MODEL_CALLS, M_MODEL_ATTEMPTS,
	M_MODEL_ATTEMPT_FAILURES, M_MODEL_CALL_FAILURES, M_RETENTION_PASSES, M_RETENTION_ENDED, M_RETENTION_REMOVED,
	M_RETENTION_EXPORTED, M_WAKEUPS_FIRED, M_WAKEUPS_LATE, M_WAKEUP_COMMITS, M_COUNT
};

void metrics_add(enum metric c, uint64_t n);
/* An op answered (enum proto_op; out of range: ignored), and how long it took
 * since its line was parsed (monotonic microseconds). */
void metrics_op(int op);
void metrics_op_latency(int op, int64_t started_us);
/* An error reply (enum proto_err; out of range counts as internal). */
void metrics_error(int err);
/* Time a supervisor write waited for a worker holding the write gate. */
void metrics_gate_wait(int64_t us);
/* A reply held for the durable frontier since held_us (monotonic) leaves. */
void metrics_durable_wait(int64_t held_us);
/* A reply waited us for the flush that made its transaction durable before
 * it was made (the writer thread's own flush: ops.c). */
void metrics_durable_waited(int64_t us);
/* An expiry fired at realtime at_us for a deadline of deadline_ms. */
void metrics_expiry_late(int64_t at_us, int64_t deadline_ms);
/* A scheduled wakeup fired at realtime at_us for a due time of due_ms. */
void metrics_wakeup_late(int64_t at_us, int64_t due_ms);

/* What other modules own, read when the text is made. */
struct metrics_gauges {
	int workers_live;
	int clients;
	uint64_t store_size;
	uint64_t map_size;
	uint64_t durable_flushes; /* the durable frontier's flushes (durable.h): made, */
	uint64_t durable_flushes_spared; /* not needed */
	uint64_t durable_flush_failures;
};
/* The whole text, malloc'd (length in *len), or NULL when out of memory. */
char *metrics_text(const struct metrics_gauges *g, size_t *len);

#endif
