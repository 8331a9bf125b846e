/*
 * bench_fairness: one client's ping beside a flood of hostile clients, and
 * agentd's peak memory meanwhile (docs/protocol.md, Limits).
 *
 * agentd runs with one conversation holding EVENTS events of EVENT_BYTES
 * each, so one `events` reply for it is about EVENTS * EVENT_BYTES. In every
 * run, two phases, measured the same way:
 *
 *   quiet   one client sends PINGS pings, one at a time (write, wait for the
 *           reply), and nothing else talks to agentd;
 *   flood   N clients each write REQS pipelined `events` requests for that
 *           conversation in one write and never read (a small receive
 *           buffer: slow readers), and right after, the same pinging client
 *           sends PINGS pings as above. Then the flooders hang up.
 *
 * For each phase: the ping's p50 and p99 latency (from the write to the
 * reply's arrival) and agentd's peak resident memory during the phase
 * (VmHWM after `echo 5 > /proc/PID/clear_refs` at its start), with the
 * resident memory before it. Figures are medians over the runs.
 *
 * Usage: bench_fairness [-d DIR] [-r RUNS] [-n FLOODERS] [-q] [-k] [-v]
 *   -d DIR       where the scratch directory goes (default ".")
 *   -r RUNS      runs (default 5, at most 15)
 *   -n FLOODERS  flooding clients (default 16)
 *   -q           quick: 2 runs, a fifth of the pings (a smoke test)
 *   -k           keep the scratch directory (agentd's log is there)
 *   -v           print every run's figures (on stderr)
 */
#include "bench/bench.h"
#include "bench/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EVENTS 25
#define EVENT_BYTES 40000 /* one events reply: about 1 MB */
#define REQS 200          /* pipelined per flooder: about 200 MB of replies asked for */
#define FLOODERS_MAX 256

static char bindir[PATH_MAX], scratch[PATH_MAX];
static struct harness_agentd agentd;
static int nruns = 5, nflood = 16, pings = 2000, keep, verbose;

static void cleanup(void)
{
	if (agentd.pid > 0)
		kill(agentd.pid, SIGKILL);
	if (scratch[0] && !keep)
		bench_rmtree(scratch);
}

/* A line of /proc/PID/status ("VmHWM", "VmRSS"), in KiB. */
static long status_kib(pid_t pid, const char *key)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	long v = -1;
	size_t kl = strlen(key);
	if (!f)
		bench_die(path, errno);
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, key, kl) && line[kl] == ':')
			v = strtol(line + kl + 1, NULL, 10);
	fclose(f);
	if (v < 0)
		bench_fail("no %s in %s", key, path);
	return v;
}

/* Peak RSS from now on: VmHWM := VmRSS. */
static void peak_reset(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "5", 1) != 1)
		bench_die(path, errno);
	close(fd);
}

struct phase {
	double p50_us, p99_us, max_us, rss0_mib, peak_mib;
};

static void ping_series(ctl_conn *p, double *lat, int n)
{
	static const char req[] = "{\"op\":\"ping\"}\n";
	for (int i = 0; i < n; i++) {
		double t0 = bench_now();
		harness_write(p, req, sizeof req - 1);
		size_t len;
		const char *line = harness_read_line(p, &len);
		lat[i] = (bench_now() - t0) * 1e6;
		if (!strstr(line, "\"ok\":true"))
			bench_fail("ping: %s", line);
	}
}

static void phase_run(int flood, struct phase *out)
{
	ctl_conn *p, *fl[FLOODERS_MAX];
	double *lat = calloc((size_t)pings, sizeof *lat);
	if (!lat)
		bench_die("calloc", ENOMEM);
	if (harness_connect(&p, agentd.sock, 5000))
		bench_fail("cannot connect to agentd");
	out->rss0_mib = status_kib(agentd.pid, "VmRSS") / 1024.0;
	peak_reset(agentd.pid);
	if (flood) {
		static char batch[REQS * 80];
		size_t bl = 0;
		for (int i = 0; i < REQS; i++)
			bl += (size_t)snprintf(batch + bl, sizeof batch - bl,
					       "{\"op\":\"events\",\"conversation\":\"big\",\"type\":\"user_msg\",\"id\":%d}\n", i);
		for (int i = 0; i < nflood; i++) {
			if (harness_connect(&fl[i], agentd.sock, 5000))
				bench_fail("cannot connect a flooder");
			int small = 4096;
			setsockopt(ctl_fd(fl[i]), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
			harness_write(fl[i], batch, bl);
		}
	}
	ping_series(p, lat, pings);
	out->peak_mib = status_kib(agentd.pid, "VmHWM") / 1024.0;
	out->max_us = harness_pct(lat, (size_t)pings, 100);
	out->p99_us = harness_pct(lat, (size_t)pings, 99);
	out->p50_us = harness_pct(lat, (size_t)pings, 50);
	if (flood)
		for (int i = 0; i < nflood; i++)
			ctl_close(fl[i]);
	/* Until agentd has freed the flooders: a ping after their hang-ups is
	 * answered after the iteration that saw them. */
	ping_series(p, lat, 10);
	ctl_close(p);
	free(lat);
}

static void seed(void)
{
	ctl_conn *cc;
	if (harness_connect(&cc, agentd.sock, 5000))
		bench_fail("cannot connect to agentd");
	json_decref(harness_ok(cc, json_pack("{sssss{ss}}", "op", "create", "conversation", "big", "settings", "model",
					  "echo"), "create"));
	char *pad = malloc(EVENT_BYTES + 1);
	if (!pad)
		bench_die("malloc", ENOMEM);
	memset(pad, 'p', EVENT_BYTES);
	pad[EVENT_BYTES] = 0;
	for (int i = 0; i < EVENTS; i++)
		json_decref(harness_ok(cc, json_pack("{sssss{siss}}", "op", "send", "conversation", "big", "content", "n", i,
						  "pad", pad), "send"));
	free(pad);
	json_t *r = harness_ok(cc, json_pack("{ssssss}", "op", "events", "conversation", "big", "type", "user_msg"), "events");
	char *line = json_dumps(r, JSON_COMPACT);
	fprintf(stderr, "bench_fairness: one events reply is %zu bytes\n", line ? strlen(line) : 0);
	free(line);
	json_decref(r);
	ctl_close(cc);
}

int main(int argc, char **argv)
{
	const char *dir = ".";
	int c, quick = 0, runs_set = 0;
	while ((c = getopt(argc, argv, "d:r:n:qkvh")) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'r':
			nruns = atoi(optarg);
			runs_set = 1;
			break;
		case 'n': nflood = atoi(optarg); break;
		case 'q': quick = 1; break;
		case 'k': keep = 1; break;
		case 'v': verbose = 1; break;
		default:
			fprintf(c == 'h' ? stdout : stderr,
				"usage: bench_fairness [-d DIR] [-r RUNS] [-n FLOODERS] [-q] [-k] [-v]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (quick) {
		pings /= 5;
		if (!runs_set)
			nruns = 2;
	}
	if (nruns < 1 || nruns > BENCH_MAX_RUNS || nflood < 1 || nflood > FLOODERS_MAX) {
		fprintf(stderr, "bench_fairness: -r takes 1 to %d, -n 1 to %d\n", BENCH_MAX_RUNS, FLOODERS_MAX);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	harness_bindir(bindir, sizeof bindir);
	harness_scratch(scratch, sizeof scratch, dir, "bench-fairness");
	atexit(cleanup);
	char machine[512], load0[128], load1[128];
	bench_machine(machine, sizeof machine);
	bench_loadavg(load0, sizeof load0);
	static const char config[] = "[agentd]\nmax_line = 64k\n";
	harness_agentd_start(&agentd, bindir, scratch, config, NULL);
	seed();

	struct phase q[BENCH_MAX_RUNS], f[BENCH_MAX_RUNS];
	for (int r = 0; r < nruns; r++) {
		phase_run(0, &q[r]);
		phase_run(1, &f[r]);
		if (verbose)
			fprintf(stderr,
				"run %d: quiet p50 %.0f p99 %.0f max %.0f us, rss %.1f peak %.1f MiB; "
				"flood p50 %.0f p99 %.0f max %.0f us, rss %.1f peak %.1f MiB\n",
				r + 1, q[r].p50_us, q[r].p99_us, q[r].max_us, q[r].rss0_mib, q[r].peak_mib, f[r].p50_us,
				f[r].p99_us, f[r].max_us, f[r].rss0_mib, f[r].peak_mib);
	}
	bench_loadavg(load1, sizeof load1);
	harness_agentd_stop(&agentd);
	agentd.pid = 0;

	double v[6][BENCH_MAX_RUNS];
	const char *names[] = { "ping p50 (us)", "ping p99 (us)", "ping max (us)", "RSS before (MiB)",
				"peak RSS (MiB)", "peak - before (MiB)" };
	printf("bench_fairness: %s\nload before %s, after %s\n", machine, load0, load1);
	printf("%d flooders x %d pipelined `events` requests (replies of about %d KB, never read); %d pings; "
	       "median of %d runs\n\n", nflood, REQS, EVENTS * EVENT_BYTES / 1000, pings, nruns);
	printf("| figure | quiet | flood |\n| --- | ---: | ---: |\n");
	struct phase *ph[2] = { q, f };
	double med[2][6];
	for (int k = 0; k < 2; k++) {
		for (int r = 0; r < nruns; r++) {
			v[0][r] = ph[k][r].p50_us;
			v[1][r] = ph[k][r].p99_us;
			v[2][r] = ph[k][r].max_us;
			v[3][r] = ph[k][r].rss0_mib;
			v[4][r] = ph[k][r].peak_mib;
			v[5][r] = ph[k][r].peak_mib - ph[k][r].rss0_mib;
		}
		for (int i = 0; i < 6; i++)
			med[k][i] = bench_median(v[i], nruns);
	}
	for (int i = 0; i < 6; i++)
		printf("| %s | %.1f | %.1f |\n", names[i], med[0][i], med[1][i]);
	return 0;
}
