/*
 * bench.h: what every agentd benchmark program shares: a clock, medians over
 * runs, the report table, the machine and filesystem it ran on, a scratch
 * directory. Benchmarks are programs that print figures; a target that is
 * missed is printed as MISS and never fails the program.
 */
#ifndef AGENTD_BENCH_H
#define AGENTD_BENCH_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_RUNS 15
#define BENCH_MAX_SYS 3

/* Seconds on the monotonic clock. */
double bench_now(void);

/* Print the message and errno-style code, then exit 1: a benchmark whose
 * operation failed has no figure to report. */
void bench_die(const char *what, int err) __attribute__((noreturn));
/* Print a formatted message and exit 1. */
void bench_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Run cmd with the shell; its output (trailing blanks and newlines cut)
 * into out when out is given, else read and dropped. Fails the benchmark
 * when cmd exits non-zero. */
void bench_sh(const char *cmd, char *out, size_t cap);

/* One row of the report: seconds per operation in each run, per system
 * (system 0 is agentd, the others are its baselines). */
struct bench_row {
	char name[96];
	int reads;                   /* 1: shown as us/op; 0: shown as ops/s */
	int nruns;
	double spo[BENCH_MAX_SYS][BENCH_MAX_RUNS];
	double target[BENCH_MAX_SYS]; /* minimum speed ratio agentd/system; 0: none */
};

/* Median of n values (n <= BENCH_MAX_RUNS), the input left untouched. */
double bench_median(const double *v, int n);
/* (max - min) / median of n values: the run-to-run spread. */
double bench_spread(const double *v, int n);
/* Lowest and highest of n values. */
void bench_range(const double *v, int n, double *lo, double *hi);
/* agentd's speed over system sys's (> 1: agentd is faster): the median of
 * the per-run ratios, each run's systems having been timed side by side;
 * *lo and *hi (may be NULL) get the lowest and highest per-run ratio. */
double bench_ratio(const struct bench_row *r, int sys, double *lo, double *hi);

/* Describe the machine: nproc, CPU model, kernel, date (UTC). */
void bench_machine(char *buf, size_t len);
/* /proc/loadavg: how busy the machine was (others' work skews figures). */
void bench_loadavg(char *buf, size_t len);
/* The filesystem holding `path`: type, device and mount point from
 * /proc/self/mounts (longest matching mount point). Sets *tmpfs when it is
 * a memory filesystem. */
void bench_filesystem(const char *path, char *buf, size_t len, int *tmpfs);

/* The directory a benchmark works in: argv[1] when given, else
 * $TMPDIR/agentd-bench-NAME (/tmp when TMPDIR is unset or empty). */
void bench_dir_arg(char *dir, size_t len, int argc, char **argv, const char *name);

/* mkdir -p of one level, failing loudly. */
/* The disk's cost per flushed page: the median fdatasync, in ms, after
 * writing `pages` 4 KiB pages into a file of 64 MiB already on disk, at
 * random places (contiguous: one run of them), `reps` times (at most
 * BENCH_MAX_RUNS). The file is made in dir and removed. */
double bench_flush_ms(const char *dir, int pages, int contiguous, int reps);
void bench_mkdir(const char *path);
/* rm -rf. */
void bench_rmtree(const char *path);

#endif
