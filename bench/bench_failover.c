/*
 * bench_failover: how long a conversation waits when the node running it
 * dies (docs/benchmarks.md, "bench_failover").
 *
 * Two agentd nodes share one PostgreSQL store: a survivor, and a victim
 * started anew for each round. Each round gives the victim a conversation
 * mid-turn (its model, configured on the victim only, never answers), kills
 * the victim's whole process group (kill -9 of the node, its worker and its
 * model: a machine lost), and long-polls the survivor for the conversation's
 * next event: the survivor claims the conversation once the victim's lease
 * has expired (at its next heartbeat), revives it from the log, and its model
 * (the same name, configured on the survivor to answer at once) commits the
 * turn. The figure is that event's inserted_at minus the time of the kill,
 * over the rounds: median, p99 (the largest of 20), and the lease time and
 * heartbeat it is to be read against (goal: lease time + 1 s).
 *
 *   bench_failover [ROUNDS [LEASE_MS]]     defaults 20 and 2000
 *
 * The store: AGENTD_BENCH_PG (a conninfo prefix, as tests/pg/cluster.sh
 * prints; a database "failover" is created in it), or a throwaway cluster
 * started with tests/pg/cluster.sh in a scratch directory and stopped at the
 * end.
 */
#include "bench/bench.h"
#include "bench/harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AGENTD_SRC
#error "AGENTD_SRC: the source directory (bench/CMakeLists.txt)"
#endif

static char scratch[PATH_MAX], cluster_dir[PATH_MAX], prefix[512], target[600];
static int own_cluster;
static pid_t groups[64]; /* every node started, killed at exit (a failed run too) */
static int ngroups;

static void nodes_kill(void)
{
	for (int i = 0; i < ngroups; i++)
		kill(-groups[i], SIGKILL);
	ngroups = 0;
}

static void cluster_stop(void)
{
	char cmd[PATH_MAX * 2];
	if (own_cluster) {
		snprintf(cmd, sizeof cmd, "%s/tests/pg/cluster.sh stop %s", AGENTD_SRC, cluster_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "bench_failover: stopping the cluster in %s failed\n", cluster_dir);
		else
			bench_rmtree(cluster_dir);
		own_cluster = 0;
	}
}

struct node {
	pid_t pid;
	char dir[PATH_MAX], sock[PATH_MAX];
};

/* agentd on the store, in its own session (setsid) so that a kill of its
 * group takes its workers and their models too. */
static void node_start(struct node *n, const char *bindir, const char *name, const char *config)
{
	char agentd[PATH_MAX], cfg[PATH_MAX], logp[PATH_MAX];
	harness_path(n->dir, sizeof n->dir, "%s/%s", scratch, name);
	bench_mkdir(n->dir);
	harness_path(n->sock, sizeof n->sock, "%s/agentd.sock", n->dir);
	harness_path(cfg, sizeof cfg, "%s/agentd.ini", n->dir);
	harness_path(logp, sizeof logp, "%s/agentd.log", n->dir);
	harness_path(agentd, sizeof agentd, "%s/agentd", bindir);
	FILE *f = fopen(cfg, "we");
	if (!f || fputs(config, f) < 0 || fclose(f) != 0)
		bench_die(cfg, -errno);
	char *argv[] = { "/usr/bin/setsid", agentd, "--store", target, "--run-dir", n->dir, "--config", cfg,
			 "--log-level", "info", NULL };
	unlink(n->sock);
	n->pid = harness_spawn(argv, logp);
	if (ngroups < 64)
		groups[ngroups++] = n->pid;
	ctl_conn *c;
	if (harness_connect(&c, n->sock, 20000) != 0)
		bench_fail("agentd did not start listening on %s: see %s", n->sock, logp);
	json_decref(harness_ok(c, json_pack("{ss}", "op", "ping"), "ping"));
	ctl_close(c);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Setup: the store, in AGENTD_BENCH_PG's cluster or a throwaway one of
 * this run's own, with a fresh database "failover" (target). */
static void store_setup(void)
{
	char cmd[PATH_MAX * 2];
	const char *pg = getenv("AGENTD_BENCH_PG");
	if (pg && *pg) {
		snprintf(prefix, sizeof prefix, "%s", pg);
	} else {
		/* Its own directory under /tmp: the server runs as nobody when
		 * this runs as root, and must reach it. */
		harness_scratch(cluster_dir, sizeof cluster_dir, "/tmp", "bench-failover-pg");
		snprintf(cmd, sizeof cmd, "%s/tests/pg/cluster.sh start %s", AGENTD_SRC, cluster_dir);
		bench_sh(cmd, prefix, sizeof prefix);
		own_cluster = 1;
		atexit(cluster_stop);
	}
	atexit(nodes_kill); /* runs before cluster_stop */
	snprintf(cmd, sizeof cmd, "psql -X -q '%s dbname=postgres' -c 'DROP DATABASE IF EXISTS failover' "
		 "-c 'CREATE DATABASE failover' >/dev/null 2>&1", prefix);
	bench_sh(cmd, NULL, 0);
	snprintf(target, sizeof target, "%s dbname=failover", prefix);
}

/* One model name, two behaviours: the victim's never answers (its turn is
 * mid-call when it dies), the survivor's answers at once. Shell scripts: a
 * model that starts in a few ms, so the figure is the takeover's, not an
 * interpreter's start-up. Their paths into slow and fast. */
static void models_write(char *slow, char *fast, size_t size)
{
	harness_path(slow, size, "%s/slow.sh", scratch);
	harness_path(fast, size, "%s/fast.sh", scratch);
	FILE *f = fopen(slow, "we");
	if (!f || fputs("cat >/dev/null\nexec sleep 3600\n", f) < 0 || fclose(f))
		bench_die(slow, -errno);
	f = fopen(fast, "we");
	if (!f || fputs("cat >/dev/null\necho '{\"text\": \"done\"}'\n", f) < 0 || fclose(f))
		bench_die(fast, -errno);
}

/* Wait until the victim's worker is in its model call: the node holds the
 * lease. */
static void victim_running(ctl_conn *vc, const char *name)
{
	for (int i = 0;; i++) {
		json_t *st = harness_ok(vc, json_pack("{ss}", "op", "status"), "status");
		json_int_t leases = json_integer_value(json_object_get(json_object_get(st, "node"), "leases"));
		json_t *w = json_object_get(st, "workers");
		int running = json_array_size(w) == 1 &&
			      !strcmp(json_string_value(json_object_get(json_array_get(w, 0), "state")), "running");
		json_decref(st);
		if (leases == 1 && running)
			return;
		if (i > 2000)
			bench_fail("%s never ran its turn", name);
		usleep(5000);
	}
}

/* Measure round r: a victim started with victim_cfg, given a turn, killed;
 * the seconds from the kill to the turn committed on the survivor (sc). */
static double round_once(int r, const char *bindir, const char *victim_cfg, ctl_conn *sc)
{
	char name[32], conv[32];
	snprintf(name, sizeof name, "victim-%d", r);
	snprintf(conv, sizeof conv, "fo-%d", r);
	struct node v;
	node_start(&v, bindir, name, victim_cfg);
	ctl_conn *vc;
	if (harness_connect(&vc, v.sock, 5000))
		bench_fail("connect to %s", name);
	json_decref(harness_ok(vc, json_pack("{sssss{ss}}", "op", "create", "conversation", conv, "settings", "model",
					 "m"), "create"));
	json_decref(harness_ok(vc, json_pack("{ssssss}", "op", "send", "conversation", conv, "content", "hi"),
			       "send"));
	victim_running(vc, name);
	ctl_close(vc);
	int64_t t0 = harness_wall_us();
	kill(-v.pid, SIGKILL);
	harness_reap(v.pid, 5000);
	json_t *rep = harness_ok(sc, json_pack("{sssssssisi}", "op", "events", "conversation", conv, "type",
					    "assistant_msg", "after", 1, "wait_ms", 60000),
			     "the survivor's long-poll");
	json_t *evs = json_object_get(rep, "events");
	if (json_array_size(evs) < 1)
		bench_fail("%s: no turn on the survivor within 60 s", conv);
	json_int_t at = json_integer_value(json_object_get(json_array_get(evs, 0), "inserted_at"));
	double lat = ((double)at * 1000.0 - (double)t0) / 1e6;
	json_decref(rep);
	printf("round %2d: %.3f s (killed at %lld us)\n", r + 1, lat, (long long)t0);
	fflush(stdout);
	return lat;
}

/* Report: the rounds' latencies (sorted here), against the lease time. */
static void report(double *lat, int rounds, int lease_ms)
{
	qsort(lat, (size_t)rounds, sizeof *lat, cmp_d);
	double p99 = harness_pct(lat, (size_t)rounds, 99); /* sorted now */
	double median = rounds % 2 ? lat[rounds / 2] : (lat[rounds / 2 - 1] + lat[rounds / 2]) / 2;
	printf("\nfailover (kill -9 of a node's group to its conversation's next event committed on another node), "
	       "%d rounds\n", rounds);
	printf("lease time %d ms, heartbeat %d ms (a third): goal <= %.1f s\n", lease_ms, lease_ms / 3,
	       lease_ms / 1000.0 + 1.0);
	printf("median %.3f s   p99 %.3f s   min %.3f s   max %.3f s\n", median, p99, lat[0],
	       lat[rounds - 1]);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	int lease_ms = argc > 2 ? atoi(argv[2]) : 2000;
	if (rounds < 1 || lease_ms < 1000)
		bench_fail("usage: bench_failover [ROUNDS >= 1 [LEASE_MS >= 1000]]");
	char bindir[PATH_MAX];
	harness_bindir(bindir, sizeof bindir);
	harness_scratch(scratch, sizeof scratch, "/tmp", "bench-failover");
	store_setup();
	char slow[PATH_MAX], fast[PATH_MAX], survivor_cfg[PATH_MAX + 256], victim_cfg[PATH_MAX + 256];
	models_write(slow, fast, sizeof slow);
	const char *tmpl = "[agentd]\nnode_id = %s\nlease_time = %dms\n[model.m]\ncommand = sh %s\n";
	snprintf(survivor_cfg, sizeof survivor_cfg, tmpl, "survivor", lease_ms, fast);

	struct node surv;
	node_start(&surv, bindir, "survivor", survivor_cfg);
	ctl_conn *sc;
	if (harness_connect(&sc, surv.sock, 5000))
		bench_fail("connect to the survivor");
	double *lat = calloc((size_t)rounds, sizeof *lat);
	if (!lat)
		bench_die("calloc", -ENOMEM);
	for (int r = 0; r < rounds; r++) {
		char name[32];
		snprintf(name, sizeof name, "victim-%d", r);
		snprintf(victim_cfg, sizeof victim_cfg, tmpl, name, lease_ms, slow);
		lat[r] = round_once(r, bindir, victim_cfg, sc);
	}
	ctl_close(sc);
	report(lat, rounds, lease_ms);
	kill(-surv.pid, SIGTERM);
	harness_reap(surv.pid, 15000);
	nodes_kill();
	free(lat);
	cluster_stop();
	if (!getenv("AGENTD_KEEP"))
		bench_rmtree(scratch);
	return 0;
}
