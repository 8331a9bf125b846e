/* harness.c: processes, the control protocol and figures for the
 * process-level benchmarks (harness.h). */
#include "bench/harness.h"
#include "bench/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void harness_path(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= len)
		bench_fail("path too long: %s...", buf);
}

/* ---- processes ------------------------------------------------------- */

void harness_scratch(char *buf, size_t len, const char *dir, const char *name)
{
	char real[PATH_MAX];
	if (!realpath(dir, real))
		bench_die(dir, -errno);
	harness_path(buf, len, "%s/%s.XXXXXX", real, name);
	if (!mkdtemp(buf))
		bench_die(buf, -errno);
}

void harness_bindir(char *buf, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		bench_die("readlink /proc/self/exe", -errno);
	self[n] = 0;
	char *dir = dirname(self);      /* build-bench/bench */
	harness_path(buf, len, "%s/..", dir); /* build-bench */
	char real[PATH_MAX];
	if (realpath(buf, real))
		snprintf(buf, len, "%s", real);
}

pid_t harness_spawn(char *const argv[], const char *logpath)
{
	pid_t pid = fork();
	if (pid < 0)
		bench_die("fork", -errno);
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		if (in >= 0)
			dup2(in, 0);
		if (logpath) {
			int out = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
			if (out >= 0) {
				dup2(out, 1);
				dup2(out, 2);
			}
		}
		execv(argv[0], argv);
		fprintf(stderr, "bench: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

int harness_reap(pid_t pid, int timeout_ms)
{
	int status = 0;
	for (int waited = 0;; waited++) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid || (r < 0 && errno == ECHILD))
			return status;
		if (waited >= timeout_ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return status;
		}
		usleep(1000);
	}
}

/* ---- agentd ---------------------------------------------------------- */

void harness_agentd_start(struct harness_agentd *a, const char *bindir, const char *dir, const char *config,
		      const char *const *extra)
{
	char agentd[PATH_MAX];
	harness_path(agentd, sizeof agentd, "%s/agentd", bindir);
	harness_path(a->data, sizeof a->data, "%s/data", dir);
	harness_path(a->sock, sizeof a->sock, "%s/agentd.sock", dir);
	harness_path(a->log, sizeof a->log, "%s/agentd.log", dir);
	a->config[0] = 0;
	bench_mkdir(a->data);
	if (config) {
		harness_path(a->config, sizeof a->config, "%s/agentd.ini", dir);
		FILE *f = fopen(a->config, "we");
		if (!f || fputs(config, f) < 0 || fclose(f) != 0)
			bench_die(a->config, -errno);
	}
	char *argv[32];
	int n = 0;
	argv[n++] = agentd;
	argv[n++] = "--data";
	argv[n++] = a->data;
	argv[n++] = "--socket";
	argv[n++] = a->sock;
	if (config) {
		argv[n++] = "--config";
		argv[n++] = a->config;
	}
	for (int i = 0; extra && extra[i] && n < 31; i++)
		argv[n++] = (char *)extra[i];
	argv[n] = NULL;
	unlink(a->sock);
	a->pid = harness_spawn(argv, a->log);
	ctl_conn *c;
	if (harness_connect(&c, a->sock, 20000) != 0)
		bench_fail("agentd did not start listening on %s: see %s", a->sock, a->log);
	json_decref(harness_ok(c, json_pack("{ss}", "op", "ping"), "ping"));
	ctl_close(c);
}

void harness_agentd_stop(struct harness_agentd *a)
{
	ctl_conn *c;
	if (a->pid <= 0)
		return;
	if (harness_connect(&c, a->sock, 1000) == 0) {
		json_decref(harness_call(c, json_pack("{ss}", "op", "shutdown")));
		ctl_close(c);
	} else {
		kill(a->pid, SIGTERM);
	}
	harness_reap(a->pid, 30000);
	a->pid = 0;
}

/* ---- a control connection (client/ctl.h), dying on failure ----------- */

int harness_connect(ctl_conn **c, const char *sock, int timeout_ms)
{
	double until = bench_now() + timeout_ms / 1000.0;
	for (;;) {
		int e = ctl_connect(sock, 0, c);
		if (e == 0)
			return 0;
		if (e == -ENAMETOOLONG)
			bench_fail("socket path too long for sun_path: %s", sock);
		if ((e != -ENOENT && e != -ECONNREFUSED && e != -EAGAIN) || bench_now() > until)
			return -1;
		usleep(2000);
	}
}

void harness_write(ctl_conn *c, const char *p, size_t n)
{
	int e = ctl_write(c, p, n);
	if (e)
		bench_die("write to agentd", e);
}

static _Noreturn void conn_lost(int e)
{
	if (e == -ENOMEM)
		bench_fail("out of memory");
	bench_fail("agentd closed the connection (%s)", e == -ECONNRESET ? "EOF" : strerror(-e));
}

const char *harness_read_line(ctl_conn *c, size_t *len)
{
	const char *line;
	int e = ctl_read_line(c, &line, len);
	if (e)
		conn_lost(e);
	return line;
}

json_t *harness_call(ctl_conn *c, json_t *req)
{
	json_t *r;
	if (!req)
		bench_fail("could not build a request");
	int e = ctl_request(c, req, &r);
	json_decref(req);
	if (e == -EPROTO)
		bench_fail("unparsable reply from agentd, or none");
	if (e)
		conn_lost(e);
	return r;
}

json_t *harness_ok(ctl_conn *c, json_t *req, const char *what)
{
	json_t *r = harness_call(c, req);
	if (!json_is_true(json_object_get(r, "ok"))) {
		char *s = json_dumps(r, JSON_COMPACT);
		bench_fail("%s: %s", what, s ? s : "error");
	}
	return r;
}

void harness_call_many(ctl_conn *c, json_t **reqs, size_t n, json_t **out)
{
	json_t *all = json_array(), *replies;
	if (!all)
		bench_fail("out of memory");
	for (size_t i = 0; i < n; i++)
		if (!reqs[i] || json_array_append_new(all, reqs[i]))
			bench_fail("could not build a request");
	int e = ctl_pipeline(c, all, &replies);
	json_decref(all);
	if (e == -EPROTO)
		bench_fail("unparsable reply from agentd, or none");
	if (e)
		conn_lost(e);
	for (size_t i = 0; i < n; i++)
		out[i] = json_incref(json_array_get(replies, i));
	json_decref(replies);
}

void harness_ok_many(ctl_conn *c, json_t **reqs, size_t n, json_t **out, const char *what)
{
	json_t **r = out ? out : calloc(n ? n : 1, sizeof *r);
	if (!r)
		bench_fail("out of memory");
	harness_call_many(c, reqs, n, r);
	for (size_t i = 0; i < n; i++) {
		if (!json_is_true(json_object_get(r[i], "ok"))) {
			char *s = json_dumps(r[i], JSON_COMPACT);
			bench_fail("%s: %.300s", what, s ? s : "error");
		}
		if (!out)
			json_decref(r[i]);
	}
	if (!out)
		free(r);
}

/* ---- figures --------------------------------------------------------- */

int64_t harness_wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double harness_pct(double *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof *v, cmp_dbl);
	/* Nearest rank: the smallest value with at least p% of values <= it. */
	size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

static long field_kib(const char *path, const char *const names[], int nnames)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	char line[256];
	long total = 0;
	int found = 0;
	while (fgets(line, sizeof line, f)) {
		for (int i = 0; i < nnames; i++) {
			size_t k = strlen(names[i]);
			if (!strncmp(line, names[i], k) && line[k] == ':') {
				total += strtol(line + k + 1, NULL, 10);
				found++;
			}
		}
	}
	fclose(f);
	return found ? total : -1;
}

long harness_private_kib(pid_t pid)
{
	static const char *const names[] = { "Private_Clean", "Private_Dirty" };
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
	return field_kib(path, names, 2);
}

long harness_mem_available_kib(void)
{
	static const char *const names[] = { "MemAvailable" };
	return field_kib("/proc/meminfo", names, 1);
}

/* ---- a closed loop of many clients ----------------------------------- */

struct load_conn {
	ctl_conn *conn; /* its socket read and written directly: no buffer of the library's */
	int fd, idx;
	double sent; /* when the outstanding request was written */
	size_t len;
	char buf[8192];
};

static void load_write(struct load_conn *c, harness_line_fn fn, void *arg)
{
	char line[512];
	size_t n = fn(c->idx, line, sizeof line, arg);
	if (n >= sizeof line)
		bench_fail("a request line is longer than %zu bytes", sizeof line);
	c->sent = bench_now();
	for (size_t off = 0; off < n;) {
		ssize_t w = write(c->fd, line + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			bench_die("write to agentd", -errno);
		off += (size_t)w;
	}
}

struct harness_load_fig harness_load(const char *const *socks, int nsocks, int clients, long nreq, harness_line_fn fn,
			     void *arg)
{
	struct load_conn *cs = calloc((size_t)clients, sizeof *cs);
	double *lat = malloc((size_t)nreq * sizeof *lat);
	struct epoll_event *evs = calloc((size_t)clients, sizeof *evs);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (!cs || !lat || !evs || ep < 0 || nsocks < 1)
		bench_fail("out of memory");
	for (int i = 0; i < clients; i++) {
		if (harness_connect(&cs[i].conn, socks[i % nsocks], 5000))
			bench_fail("cannot connect to agentd on %s", socks[i % nsocks]);
		cs[i].fd = ctl_fd(cs[i].conn);
		cs[i].idx = i;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &cs[i] };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev) < 0)
			bench_die("epoll_ctl", -errno);
	}
	long issued = 0, done = 0;
	double t0 = bench_now();
	for (int i = 0; i < clients && issued < nreq; i++, issued++)
		load_write(&cs[i], fn, arg);
	while (done < nreq) {
		int n = epoll_wait(ep, evs, clients, 30000);
		if (n == 0)
			bench_fail("agentd stopped answering (%ld of %ld done)", done, nreq);
		if (n < 0 && errno != EINTR)
			bench_die("epoll_wait", -errno);
		for (int k = 0; k < n; k++) {
			struct load_conn *c = evs[k].data.ptr;
			ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len - 1);
			if (r <= 0)
				bench_fail("agentd closed a client connection");
			c->len += (size_t)r;
			char *nl;
			while ((nl = memchr(c->buf, '\n', c->len))) {
				double now = bench_now();
				*nl = 0;
				if (!strstr(c->buf, "\"ok\":true"))
					bench_fail("error reply: %.300s", c->buf);
				lat[done++] = now - c->sent;
				size_t used = (size_t)(nl - c->buf) + 1;
				memmove(c->buf, c->buf + used, c->len - used);
				c->len -= used;
				if (issued < nreq) {
					issued++;
					load_write(c, fn, arg);
				}
			}
		}
	}
	double elapsed = bench_now() - t0;
	struct harness_load_fig fg = { (double)nreq / elapsed, harness_pct(lat, (size_t)nreq, 50) * 1e3,
				   harness_pct(lat, (size_t)nreq, 99) * 1e3 };
	for (int i = 0; i < clients; i++)
		ctl_close(cs[i].conn);
	close(ep);
	free(cs);
	free(lat);
	free(evs);
	return fg;
}

double harness_cpu_seconds(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	/* Fields after the command (which may hold spaces): from the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	unsigned long long v[4];
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &v[0], &v[1], &v[2],
		   &v[3]) != 4)
		return -1;
	long hz = sysconf(_SC_CLK_TCK);
	return (double)(v[0] + v[1] + v[2] + v[3]) / (double)(hz > 0 ? hz : 100);
}
