/* ctl.c: processes, the control protocol and figures for the process-level
 * benchmarks (ctl.h). */
#include "bench/ctl.h"
#include "bench/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void ctl_path(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= len)
		bench_fail("path too long: %s...", buf);
}

/* ---- processes ------------------------------------------------------- */

void ctl_scratch(char *buf, size_t len, const char *dir, const char *name)
{
	char real[PATH_MAX];
	if (!realpath(dir, real))
		bench_die(dir, -errno);
	ctl_path(buf, len, "%s/%s.XXXXXX", real, name);
	if (!mkdtemp(buf))
		bench_die(buf, -errno);
}

void ctl_bindir(char *buf, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		bench_die("readlink /proc/self/exe", -errno);
	self[n] = 0;
	char *dir = dirname(self);      /* build-bench/bench */
	ctl_path(buf, len, "%s/..", dir); /* build-bench */
	char real[PATH_MAX];
	if (realpath(buf, real))
		snprintf(buf, len, "%s", real);
}

pid_t ctl_spawn(char *const argv[], const char *logpath)
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

int ctl_reap(pid_t pid, int timeout_ms)
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

void ctl_agentd_start(struct ctl_agentd *a, const char *bindir, const char *dir, const char *config,
		      const char *const *extra)
{
	char agentd[PATH_MAX];
	ctl_path(agentd, sizeof agentd, "%s/agentd", bindir);
	ctl_path(a->data, sizeof a->data, "%s/data", dir);
	ctl_path(a->sock, sizeof a->sock, "%s/agentd.sock", dir);
	ctl_path(a->log, sizeof a->log, "%s/agentd.log", dir);
	a->config[0] = 0;
	bench_mkdir(a->data);
	if (config) {
		ctl_path(a->config, sizeof a->config, "%s/agentd.ini", dir);
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
	a->pid = ctl_spawn(argv, a->log);
	struct ctl_conn c;
	if (ctl_connect(&c, a->sock, 20000) != 0)
		bench_fail("agentd did not start listening on %s: see %s", a->sock, a->log);
	json_decref(ctl_ok(&c, json_pack("{ss}", "op", "ping"), "ping"));
	ctl_close(&c);
}

void ctl_agentd_stop(struct ctl_agentd *a)
{
	struct ctl_conn c;
	if (a->pid <= 0)
		return;
	if (ctl_connect(&c, a->sock, 1000) == 0) {
		json_decref(ctl_call(&c, json_pack("{ss}", "op", "shutdown")));
		ctl_close(&c);
	} else {
		kill(a->pid, SIGTERM);
	}
	ctl_reap(a->pid, 30000);
	a->pid = 0;
}

/* ---- a synchronous control connection -------------------------------- */

int ctl_connect(struct ctl_conn *c, const char *sock, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof sa.sun_path)
		bench_fail("socket path too long for sun_path: %s", sock);
	strcpy(sa.sun_path, sock);
	memset(c, 0, sizeof *c);
	double until = bench_now() + timeout_ms / 1000.0;
	for (;;) {
		c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			bench_die("socket", -errno);
		if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) == 0)
			break;
		int e = errno;
		close(c->fd);
		c->fd = -1;
		if ((e != ENOENT && e != ECONNREFUSED && e != EAGAIN) || bench_now() > until)
			return -1;
		usleep(2000);
	}
	c->cap = 1 << 16;
	c->buf = malloc(c->cap);
	if (!c->buf)
		bench_fail("out of memory");
	return 0;
}

void ctl_close(struct ctl_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	memset(c, 0, sizeof *c);
	c->fd = -1;
}

void ctl_write(struct ctl_conn *c, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(c->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			bench_die("write to agentd", -errno);
		p += w;
		n -= (size_t)w;
	}
}

char *ctl_read_line(struct ctl_conn *c, size_t *len)
{
	for (;;) {
		char *nl = memchr(c->buf + c->off, '\n', c->len - c->off);
		if (nl) {
			char *line = c->buf + c->off;
			*nl = 0;
			*len = (size_t)(nl - line);
			c->off = (size_t)(nl - c->buf) + 1;
			return line;
		}
		/* Keep the partial line at the start, grow when it fills the buffer. */
		if (c->off) {
			memmove(c->buf, c->buf + c->off, c->len - c->off);
			c->len -= c->off;
			c->off = 0;
		}
		if (c->len == c->cap) {
			c->cap *= 2;
			c->buf = realloc(c->buf, c->cap);
			if (!c->buf)
				bench_fail("out of memory");
		}
		ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			bench_fail("agentd closed the connection (%s)", r < 0 ? strerror(errno) : "EOF");
		c->len += (size_t)r;
	}
}

json_t *ctl_call(struct ctl_conn *c, json_t *req)
{
	if (!req)
		bench_fail("could not build a request");
	char *s = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!s)
		bench_fail("out of memory");
	size_t n = strlen(s);
	s[n] = '\n'; /* json_dumps leaves room for its NUL: reuse it for the newline */
	ctl_write(c, s, n + 1);
	free(s);
	size_t len;
	char *line = ctl_read_line(c, &len);
	json_error_t je;
	json_t *r = json_loadb(line, len, 0, &je);
	if (!json_is_object(r))
		bench_fail("unparsable reply from agentd: %.200s", line);
	return r;
}

json_t *ctl_ok(struct ctl_conn *c, json_t *req, const char *what)
{
	json_t *r = ctl_call(c, req);
	if (!json_is_true(json_object_get(r, "ok"))) {
		char *s = json_dumps(r, JSON_COMPACT);
		bench_fail("%s: %s", what, s ? s : "error");
	}
	return r;
}

void ctl_call_many(struct ctl_conn *c, json_t **reqs, size_t n, json_t **out)
{
	char *all = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&all, &len);
	if (!f)
		bench_fail("out of memory");
	for (size_t i = 0; i < n; i++) {
		char *s = reqs[i] ? json_dumps(reqs[i], JSON_COMPACT) : NULL;
		if (!s)
			bench_fail("could not build a request");
		fputs(s, f);
		fputc('\n', f);
		free(s);
		json_decref(reqs[i]);
	}
	fclose(f);
	ctl_write(c, all, len);
	free(all);
	for (size_t i = 0; i < n; i++) {
		size_t ll;
		char *line = ctl_read_line(c, &ll);
		json_error_t je;
		out[i] = json_loadb(line, ll, 0, &je);
		if (!json_is_object(out[i]))
			bench_fail("unparsable reply from agentd: %.200s", line);
	}
}

void ctl_ok_many(struct ctl_conn *c, json_t **reqs, size_t n, json_t **out, const char *what)
{
	json_t **r = out ? out : calloc(n ? n : 1, sizeof *r);
	if (!r)
		bench_fail("out of memory");
	ctl_call_many(c, reqs, n, r);
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

int64_t ctl_wall_us(void)
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

double ctl_pct(double *v, size_t n, double p)
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

long ctl_private_kib(pid_t pid)
{
	static const char *const names[] = { "Private_Clean", "Private_Dirty" };
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
	return field_kib(path, names, 2);
}

long ctl_mem_available_kib(void)
{
	static const char *const names[] = { "MemAvailable" };
	return field_kib("/proc/meminfo", names, 1);
}
