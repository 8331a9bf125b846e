/* metrics.c: the supervisor's counters and histograms (see metrics.h). */
#include "supervisor/metrics.h"
#include "ipc/proto.h"
#include "supervisor/loop.h"

#include <stdio.h>
#include <stdlib.h>

static struct {
	uint64_t c[M_COUNT];
	uint64_t ops[OP_COUNT];
	uint64_t errors[PERR_COUNT];
	int64_t gate_wait_us;
	uint64_t lat_buckets[OP_COUNT][12]; /* op latency histogram, le 0.1ms..+Inf */
	double lat_sum[OP_COUNT];
	uint64_t late_buckets[12]; /* expiry lateness histogram, le 1ms..+Inf */
	double late_sum;
	uint64_t wlate_buckets[12]; /* scheduled wakeups' lateness, le 1ms..+Inf */
	double wlate_sum;
	uint64_t dwait_buckets[12]; /* replies' wait for the durable frontier, le 0.1ms..+Inf */
	double dwait_sum;
} m;

void metrics_add(enum metric c, uint64_t n)
{
	m.c[c] += n;
}

void metrics_error(int err)
{
	m.errors[err >= 0 && err < PERR_COUNT ? err : PERR_INTERNAL]++;
}

void metrics_gate_wait(int64_t us)
{
	m.gate_wait_us += us;
}

static const double lat_bounds[11] = { 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10 };

void metrics_op(int op)
{
	if (op >= 0 && op < OP_COUNT)
		m.ops[op]++; /* errors are counted by code where the reply is made */
}

void metrics_op_latency(int op, int64_t started_us)
{
	if (op < 0 || op >= OP_COUNT)
		return;
	double secs = (double)(loop_now_us() - started_us) / 1e6;
	int b = 0;
	while (b < 11 && secs > lat_bounds[b])
		b++;
	m.lat_buckets[op][b]++;
	m.lat_sum[op] += secs;
}

void metrics_durable_wait(int64_t held_us)
{
	metrics_durable_waited(loop_now_us() - held_us);
}

void metrics_durable_waited(int64_t us)
{
	double secs = (double)us / 1e6;
	int b = 0;
	while (b < 11 && secs > lat_bounds[b])
		b++;
	m.dwait_buckets[b]++;
	m.dwait_sum += secs;
}

/* Deadlines fire late by a disk flush when all is well, by the downtime after
 * a restart: the buckets reach from one to the other. */
static const double late_bounds[11] = { 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 10, 60, 3600 };

static void late_count(uint64_t *buckets, double *sum, int64_t at_us, int64_t due_ms)
{
	double secs = (double)(at_us - due_ms * 1000) / 1e6;
	if (secs < 0)
		secs = 0;
	int b = 0;
	while (b < 11 && secs > late_bounds[b])
		b++;
	buckets[b]++;
	*sum += secs;
}

void metrics_expiry_late(int64_t at_us, int64_t deadline_ms)
{
	late_count(m.late_buckets, &m.late_sum, at_us, deadline_ms);
}

void metrics_wakeup_late(int64_t at_us, int64_t due_ms)
{
	late_count(m.wlate_buckets, &m.wlate_sum, at_us, due_ms);
}

static void text_requests(FILE *f)
{
	fprintf(f, "# HELP agentd_ops_total Control requests by op.\n# TYPE agentd_ops_total counter\n");
	for (int i = 0; i < OP_COUNT; i++)
		fprintf(f, "agentd_ops_total{op=\"%s\"} %llu\n", proto_op_name(i), (unsigned long long)m.ops[i]);
	fprintf(f, "# HELP agentd_errors_total Error replies by code.\n# TYPE agentd_errors_total counter\n");
	for (int i = 1; i < PERR_COUNT; i++)
		fprintf(f, "agentd_errors_total{code=\"%s\"} %llu\n", proto_err_code(i),
			(unsigned long long)m.errors[i]);
}

static void text_counters(FILE *f)
{
	struct { const char *name, *help; uint64_t v; } counters[] = {
		{ "agentd_worker_spawns_total", "Worker processes started.", m.c[M_SPAWNS] },
		{ "agentd_worker_crashes_total", "Workers that died without being asked to.", m.c[M_CRASHES] },
		{ "agentd_worker_revivals_total", "Workers restarted after a crash.", m.c[M_REVIVALS] },
		{ "agentd_expiries_fired_total", "Human tool calls expired by their deadline.", m.c[M_EXPIRIES_FIRED] },
		{ "agentd_expiry_commits_total", "Write transactions that fired expiries.", m.c[M_EXPIRY_COMMITS] },
		{ "agentd_scheduled_wakeups_fired_total", "Scheduled wakeups fired (a `scheduled` event appended).",
		  m.c[M_WAKEUPS_FIRED] },
		{ "agentd_scheduled_wakeups_late_total", "Of those, fired late (marked late: missed while agentd was down).",
		  m.c[M_WAKEUPS_LATE] },
		{ "agentd_scheduled_wakeup_commits_total", "Write transactions that fired scheduled wakeups.",
		  m.c[M_WAKEUP_COMMITS] },
		{ "agentd_group_commits_total", "Write transactions of the control plane.", m.c[M_GROUP_COMMITS] },
		{ "agentd_group_writes_total", "Write requests committed in them.", m.c[M_GROUP_WRITES] },
		{ "agentd_group_commits_thread_total", "Of those, committed on the writer thread while the loop read on.",
		  m.c[M_GROUP_COMMITS_THREAD] },
		{ "agentd_group_commits_flushed_total",
		  "Of those, made durable by the writer thread's own flush: one client's writes, every other client held.",
		  m.c[M_GROUP_COMMITS_FLUSHED] },
		{ "agentd_write_gate_grants_total", "Writes granted to workers.", m.c[M_GATE_GRANTS] },
		{ "agentd_write_gate_waits_total", "Supervisor writes that waited for a worker's.", m.c[M_GATE_WAITS] },
		{ "agentd_write_gate_revoked_total", "Grants taken back from a worker that held one too long.",
		  m.c[M_GATE_REVOKED] },
		{ "agentd_worker_wakes_total", "Wakes sent to workers for new events.", m.c[M_WAKES] },
		{ "agentd_worker_wakes_coalesced_total", "New events a wake already in flight covered.",
		  m.c[M_WAKES_COALESCED] },
		{ "agentd_model_calls_total", "Model calls (turns and summaries) that ended.", m.c[M_MODEL_CALLS] },
		{ "agentd_model_attempts_total", "Their attempts, retries included.", m.c[M_MODEL_ATTEMPTS] },
		{ "agentd_model_attempt_failures_total", "Attempts that failed (retried or not).",
		  m.c[M_MODEL_ATTEMPT_FAILURES] },
		{ "agentd_model_call_failures_total", "Model calls that failed after their attempts.",
		  m.c[M_MODEL_CALL_FAILURES] },
		{ "agentd_retention_passes_total", "Retention passes that read every conversation.",
		  m.c[M_RETENTION_PASSES] },
		{ "agentd_retention_ended_total", "Idle conversations retention ended.", m.c[M_RETENTION_ENDED] },
		{ "agentd_retention_removed_total", "Ended conversations retention removed.", m.c[M_RETENTION_REMOVED] },
		{ "agentd_retention_exported_total", "Of those, exported into retention_export first.",
		  m.c[M_RETENTION_EXPORTED] },
	};
	for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", counters[i].name, counters[i].help,
			counters[i].name, counters[i].name, (unsigned long long)counters[i].v);
	fprintf(f, "# HELP agentd_write_gate_wait_seconds_total Time supervisor writes waited for a worker's.\n"
		   "# TYPE agentd_write_gate_wait_seconds_total counter\nagentd_write_gate_wait_seconds_total %.6f\n",
		(double)m.gate_wait_us / 1e6);
}

static void text_gauges(FILE *f, const struct metrics_gauges *g)
{
	fprintf(f, "# HELP agentd_workers_live Worker processes alive.\n# TYPE agentd_workers_live gauge\n"
		   "agentd_workers_live %d\n", g->workers_live);
	fprintf(f, "# HELP agentd_clients Connected control clients.\n# TYPE agentd_clients gauge\n"
		   "agentd_clients %d\n", g->clients);
	fprintf(f, "# HELP agentd_store_size_bytes Bytes of the data file up to its last page written (a "
		   "high-water mark).\n# TYPE agentd_store_size_bytes gauge\n"
		   "agentd_store_size_bytes %llu\n", (unsigned long long)g->store_size);
	fprintf(f, "# HELP agentd_store_map_size_bytes The store's map size.\n"
		   "# TYPE agentd_store_map_size_bytes gauge\nagentd_store_map_size_bytes %llu\n",
		(unsigned long long)g->map_size);
	fprintf(f, "# HELP agentd_durable_flushes_total Flushes of the data file that succeeded: each made what "
		   "was committed before it durable (docs/durability.md).\n"
		   "# TYPE agentd_durable_flushes_total counter\nagentd_durable_flushes_total %llu\n",
		(unsigned long long)g->durable_flushes);
	fprintf(f, "# HELP agentd_durable_flushes_spared_total Flushes the durable frontier did not make: a worker's "
		   "commit or flush made the same durable (docs/durability.md).\n"
		   "# TYPE agentd_durable_flushes_spared_total counter\nagentd_durable_flushes_spared_total %llu\n",
		(unsigned long long)g->durable_flushes_spared);
	fprintf(f, "# HELP agentd_durable_flush_failures_total Flushes of the data file that failed; after the "
		   "first agentd answers what waits unavailable and stops.\n# TYPE agentd_durable_flush_failures_total counter\n"
		   "agentd_durable_flush_failures_total %llu\n", (unsigned long long)g->durable_flush_failures);
}

/* One histogram's series: its 12 cumulative buckets (11 bounds and +Inf),
 * sum and count, labelled by op when op is not NULL. */
static void text_histogram(FILE *f, const char *name, const char *op, const double bounds[11],
			   const uint64_t buckets[12], double sum)
{
	char by[64] = "", in[80] = "";
	if (op) {
		snprintf(by, sizeof by, "op=\"%s\",", op);
		snprintf(in, sizeof in, "{op=\"%s\"}", op);
	}
	uint64_t cum = 0;
	for (int b = 0; b < 12; b++) {
		cum += buckets[b];
		if (b < 11)
			fprintf(f, "%s_bucket{%sle=\"%g\"} %llu\n", name, by, bounds[b], (unsigned long long)cum);
		else
			fprintf(f, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, by, (unsigned long long)cum);
	}
	fprintf(f, "%s_sum%s %.6f\n%s_count%s %llu\n", name, in, sum, name, in, (unsigned long long)cum);
}

static void text_histograms(FILE *f)
{
	fprintf(f, "# HELP agentd_op_duration_seconds Control request latency.\n"
		   "# TYPE agentd_op_duration_seconds histogram\n");
	for (int i = 0; i < OP_COUNT; i++)
		text_histogram(f, "agentd_op_duration_seconds", proto_op_name(i), lat_bounds, m.lat_buckets[i],
			       m.lat_sum[i]);
	fprintf(f, "# HELP agentd_expiry_lateness_seconds How long after its deadline an expired call was "
		   "settled (its transaction's start).\n# TYPE agentd_expiry_lateness_seconds histogram\n");
	text_histogram(f, "agentd_expiry_lateness_seconds", NULL, late_bounds, m.late_buckets, m.late_sum);
	fprintf(f, "# HELP agentd_scheduled_wakeup_lateness_seconds How long after its due time a scheduled wakeup "
		   "fired (its transaction's start).\n# TYPE agentd_scheduled_wakeup_lateness_seconds histogram\n");
	text_histogram(f, "agentd_scheduled_wakeup_lateness_seconds", NULL, late_bounds, m.wlate_buckets, m.wlate_sum);
	fprintf(f, "# HELP agentd_reply_durable_wait_seconds How long a reply, ready, waited for the durable frontier "
		   "to pass its transaction.\n# TYPE agentd_reply_durable_wait_seconds histogram\n");
	text_histogram(f, "agentd_reply_durable_wait_seconds", NULL, lat_bounds, m.dwait_buckets, m.dwait_sum);
}

/* The families in the order the text shows them. */
char *metrics_text(const struct metrics_gauges *g, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	text_requests(f);
	text_counters(f);
	text_gauges(f, g);
	text_histograms(f);
	/* A write that failed (out of memory) leaves the text short: ferror
	 * keeps it, fclose may not report it. */
	int bad = ferror(f);
	if (fclose(f) || bad) {
		free(buf);
		return NULL;
	}
	return buf;
}
