/*
 * harness.h: what the process-level benchmarks (bench_control,
 * bench_supervisor, bench_fairness, bench_failover, bench_pg) share: running
 * agentd and helper programs in a scratch directory, the control protocol
 * through client/ctl.h with every failure fatal, latency percentiles, a
 * process's private memory and CPU time, and a closed-loop load generator.
 *
 * Every failure here ends the benchmark (bench_fail): a figure measured over
 * a failed operation is no figure.
 */
#ifndef AGENTD_BENCH_HARNESS_H
#define AGENTD_BENCH_HARNESS_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "client/ctl.h"

/* snprintf into a path buffer; a path that does not fit ends the benchmark. */
void harness_path(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- processes ------------------------------------------------------- */

/* The directory holding agentd, agentd-worker and agentctl: the parent of
 * the directory of this program (build-bench/bench/X -> build-bench). */
void harness_bindir(char *buf, size_t len);
/* A fresh scratch directory DIR/NAME.XXXXXX (DIR made absolute) in buf; dies on failure. */
void harness_scratch(char *buf, size_t len, const char *dir, const char *name);

/* fork+exec argv with stdin from /dev/null and stdout and stderr appended to
 * logpath (NULL: inherited). Returns the pid. */
pid_t harness_spawn(char *const argv[], const char *logpath);

/* Wait for pid up to timeout_ms, then SIGKILL it and wait. Returns the wait
 * status. */
int harness_reap(pid_t pid, int timeout_ms);

/* ---- agentd ---------------------------------------------------------- */

struct harness_agentd {
	pid_t pid;
	char data[PATH_MAX];   /* DIR/data */
	char sock[PATH_MAX];   /* DIR/agentd.sock */
	char config[PATH_MAX]; /* DIR/agentd.ini, when config text was given */
	char log[PATH_MAX];    /* DIR/agentd.log: its stderr */
};

/* Start agentd from bindir on the data directory DIR/data (created if
 * absent; it may hold a store seeded beforehand), with the configuration
 * text `config` (NULL: none) and the extra arguments `extra` (NULL or
 * NULL-terminated), then wait until it answers ping. */
void harness_agentd_start(struct harness_agentd *a, const char *bindir, const char *dir, const char *config,
		      const char *const *extra);
/* The shutdown op, then wait for the exit (SIGKILL after 30 s). */
void harness_agentd_stop(struct harness_agentd *a);

/* ---- a control connection (client/ctl.h), dying on failure ----------- */

/* Connect, retrying for up to timeout_ms while the socket is not there yet
 * (agentd starting). Returns 0 with *c a connection without a deadline
 * (calls block; close it with ctl_close), or -1 when it never became
 * reachable. */
int harness_connect(ctl_conn **c, const char *sock, int timeout_ms);
/* Write all of p. */
void harness_write(ctl_conn *c, const char *p, size_t n);
/* The next line (without its '\n', NUL-terminated), valid until the next
 * read on c. */
const char *harness_read_line(ctl_conn *c, size_t *len);
/* Send req (stolen) as one line and return the parsed reply (caller frees). */
json_t *harness_call(ctl_conn *c, json_t *req);
/* harness_call that ends the benchmark on an error reply; `what` names it. */
json_t *harness_ok(ctl_conn *c, json_t *req, const char *what);
/* Pipeline: send the n requests (stolen) and read the n replies into out[]
 * (caller frees each), errors included. */
void harness_call_many(ctl_conn *c, json_t **reqs, size_t n, json_t **out);
/* harness_call_many that ends the benchmark on an error reply; out may be
 * NULL (the replies are dropped). */
void harness_ok_many(ctl_conn *c, json_t **reqs, size_t n, json_t **out, const char *what);

/* ---- figures --------------------------------------------------------- */

/* Microseconds on CLOCK_REALTIME (the clock agentd stamps records with). */
int64_t harness_wall_us(void);
/* The p-th percentile (0..100, nearest rank) of n values; sorts v in place. */
double harness_pct(double *v, size_t n, double p);
/* Private memory of a process, KiB: Private_Clean + Private_Dirty from
 * /proc/PID/smaps_rollup. -1 when unreadable. */
long harness_private_kib(pid_t pid);
/* MemAvailable from /proc/meminfo, KiB. */
long harness_mem_available_kib(void);

/* ---- a closed loop of many clients ----------------------------------- */

/* One load's figures: requests per second and latency percentiles (ms). */
struct harness_load_fig {
	double rps, p50_ms, p99_ms;
};

/* The request line of client `client` into buf (ending in '\n'); returns
 * its length. */
typedef size_t (*harness_line_fn)(int client, char *buf, size_t cap, void *arg);

/* nreq requests over `clients` connections, client i on socks[i % nsocks],
 * each with one request in flight (a closed loop, as redis-benchmark without
 * pipelining), all in one epoll thread. Latency is from the write to the
 * reply's arrival. An error reply ends the benchmark. */
struct harness_load_fig harness_load(const char *const *socks, int nsocks, int clients, long nreq, harness_line_fn fn,
			     void *arg);

/* CPU time (user + system) of a process and its reaped children, seconds,
 * from /proc/PID/stat; -1 when unreadable. */
double harness_cpu_seconds(pid_t pid);

#endif
