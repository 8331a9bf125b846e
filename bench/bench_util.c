/* bench_util.c: the clock, statistics, machine description and scratch
 * directories shared by the benchmark programs (bench.h). */
#include "bench/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void bench_die(const char *what, int err)
{
	fprintf(stderr, "bench: %s: %s (%d)\n", what, err < 0 ? strerror(-err) : "failed", err);
	exit(1);
}

void bench_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bench_median(const double *v, int n)
{
	double s[BENCH_MAX_RUNS];
	if (n <= 0)
		return 0;
	memcpy(s, v, (size_t)n * sizeof *s);
	qsort(s, (size_t)n, sizeof *s, cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

void bench_range(const double *v, int n, double *lo, double *hi)
{
	*lo = *hi = n > 0 ? v[0] : 0;
	for (int i = 1; i < n; i++) {
		if (v[i] < *lo)
			*lo = v[i];
		if (v[i] > *hi)
			*hi = v[i];
	}
}

double bench_spread(const double *v, int n)
{
	double lo, hi, med = bench_median(v, n);
	bench_range(v, n, &lo, &hi);
	return med > 0 ? (hi - lo) / med : 0;
}

double bench_ratio(const struct bench_row *r, int sys, double *lo, double *hi)
{
	double q[BENCH_MAX_RUNS], l, h;
	for (int k = 0; k < r->nruns; k++)
		q[k] = r->spo[0][k] > 0 ? r->spo[sys][k] / r->spo[0][k] : 0;
	bench_range(q, r->nruns, &l, &h);
	if (lo)
		*lo = l;
	if (hi)
		*hi = h;
	return bench_median(q, r->nruns);
}

void bench_machine(char *buf, size_t len)
{
	char model[256] = "unknown", line[512];
	FILE *f = fopen("/proc/cpuinfo", "re");
	while (f && fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (strncmp(line, "model name", 10) == 0 && colon) {
			snprintf(model, sizeof model, "%s", colon + 2);
			model[strcspn(model, "\n")] = 0;
			break;
		}
	}
	if (f)
		fclose(f);
	struct utsname u;
	if (uname(&u) != 0)
		snprintf(u.release, sizeof u.release, "unknown");
	char date[64];
	time_t t = time(NULL);
	strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&t));
	snprintf(buf, len, "nproc %ld, CPU \"%s\", Linux %s, %s", sysconf(_SC_NPROCESSORS_ONLN), model,
		 u.release, date);
}

void bench_loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "re");
	snprintf(buf, len, "unknown");
	if (f && fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	if (f)
		fclose(f);
}

void bench_filesystem(const char *path, char *buf, size_t len, int *tmpfs)
{
	char real[PATH_MAX], line[4096], dev[1024], mnt[1024], type[64], opts[1024];
	size_t best = 0;
	snprintf(buf, len, "unknown");
	*tmpfs = 0;
	if (!realpath(path, real))
		return;
	FILE *f = fopen("/proc/self/mounts", "re");
	while (f && fgets(line, sizeof line, f)) {
		if (sscanf(line, "%1023s %1023s %63s %1023s", dev, mnt, type, opts) != 4)
			continue;
		size_t n = strlen(mnt);
		int under = strncmp(real, mnt, n) == 0 && (real[n] == '/' || real[n] == 0 || n == 1);
		if (under && n >= best) {
			best = n;
			snprintf(buf, len, "%s on %s (%s, %s)", dev, mnt, type, strtok(opts, ","));
			*tmpfs = strcmp(type, "tmpfs") == 0 || strcmp(type, "ramfs") == 0;
		}
	}
	if (f)
		fclose(f);
}

void bench_mkdir(const char *path)
{
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		bench_die(path, -errno);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void bench_rmtree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void bench_sh(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "re");
	if (!p)
		bench_die(cmd, -errno);
	size_t n = out ? fread(out, 1, cap - 1, p) : 0;
	if (out) {
		out[n] = 0;
		while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
			out[--n] = 0;
	} else {
		char b[256];
		while (fread(b, 1, sizeof b, p) > 0)
			;
	}
	int st = pclose(p);
	if (st != 0)
		bench_fail("%s: exit status %d", cmd, st);
}


double bench_flush_ms(const char *dir, int pages, int contiguous, int reps)
{
	enum { PAGE = 4096, FILE_PAGES = 16384 }; /* 64 MiB */
	static char buf[256 * 1024];
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/flush-probe", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		bench_fail("%s: %s", path, strerror(errno));
	memset(buf, 'x', sizeof buf);
	for (off_t off = 0; off < (off_t)FILE_PAGES * PAGE; off += (off_t)sizeof buf)
		if (pwrite(fd, buf, sizeof buf, off) != (ssize_t)sizeof buf)
			bench_fail("%s: %s", path, strerror(errno));
	if (fsync(fd))
		bench_fail("%s: fsync: %s", path, strerror(errno));
	double v[BENCH_MAX_RUNS]; /* bench_median takes no more */
	if (reps > BENCH_MAX_RUNS)
		reps = BENCH_MAX_RUNS;
	if (pages * PAGE > (int)sizeof buf)
		pages = (int)(sizeof buf / PAGE);
	unsigned seed = 1;
	for (int r = 0; r < reps; r++) {
		long first = rand_r(&seed) % (FILE_PAGES - pages);
		if (contiguous) {
			if (pwrite(fd, buf, (size_t)pages * PAGE, (off_t)first * PAGE) != (ssize_t)pages * PAGE)
				bench_fail("%s: %s", path, strerror(errno));
		} else {
			for (int i = 0; i < pages; i++)
				if (pwrite(fd, buf, PAGE, (off_t)(rand_r(&seed) % FILE_PAGES) * PAGE) != PAGE)
					bench_fail("%s: %s", path, strerror(errno));
		}
		double t0 = bench_now();
		if (fdatasync(fd))
			bench_fail("%s: fdatasync: %s", path, strerror(errno));
		v[r] = (bench_now() - t0) * 1e3;
	}
	close(fd);
	unlink(path);
	return bench_median(v, reps);
}

void bench_dir_arg(char *dir, size_t len, int argc, char **argv, const char *name)
{
	const char *tmp = getenv("TMPDIR");
	if (argc > 1)
		snprintf(dir, len, "%s", argv[1]);
	else
		snprintf(dir, len, "%s/agentd-bench-%s", tmp && *tmp ? tmp : "/tmp", name);
}
