/*
 * bench_fork: what a `fork` costs on a long conversation, with and without a
 * summary that stands in for its prefix. Two sources hold the same log of
 * EVENTS events (user_msg / assistant_msg turns, about 200 bytes of content
 * each); the second also has a summary of 1..EVENTS-2 (the rule every
 * summary keeps: it ends before the last turn boundary). Each run forks
 * both at their last seq with conv_fork (what the `fork` op runs), each in
 * one write transaction from begin to commit, and reports the median and
 * range over runs in milliseconds, the events copied, and the store's bytes
 * grown per fork.
 *
 *   bench_fork [TARGET] [EVENTS] [RUNS]   (default: a scratch LMDB dir under $TMPDIR, 10000, 7)
 *
 * TARGET may be a PostgreSQL connection string (an empty database).
 */
#include "bench/bench.h"
#include "common/jsonmp.h"
#include "conv/conv.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_json(store_txn *t, const char *conv, const char *type, json_t *v)
{
	struct jsonmp_buf b;
	if (conv_pack(&b, v))
		bench_die("pack", -12);
	struct store_event_in in = { type, { b.sb.data, b.sb.size }, NULL };
	uint64_t seq;
	int e = store_event_append(t, conv, &in, &seq, NULL);
	jsonmp_buf_destroy(&b);
	if (e)
		bench_die("append", e);
}

/* A conversation of n events: turns of a user_msg and its answer. */
static void make_source(store *s, const char *id, size_t n, int summarised)
{
	store_txn *t;
	int e;
	char text[201];
	memset(text, 'x', sizeof text - 1);
	text[sizeof text - 1] = 0;
	struct jsonmp_buf sb;
	json_t *settings = json_pack("{ss}", "model", "echo");
	conv_pack(&sb, settings);
	json_decref(settings);
	for (size_t seq = 1; seq <= n;) {
		if ((e = store_txn_begin(s, STORE_WRITE, &t)) != 0)
			bench_die("write txn", e);
		if (seq == 1 && (e = store_conv_create(t, id, (store_bytes){ sb.sb.data, sb.sb.size })) != 0)
			bench_die("create", e);
		for (size_t k = 0; k < 1000 && seq <= n; k++, seq++) {
			json_t *c = seq % 2 ? json_pack("{ss}", "text", text)
					    : json_pack("{sssI}", "text", text, "context_seq", (json_int_t)(seq - 1));
			put_json(t, id, seq % 2 ? "user_msg" : "assistant_msg", c);
			json_decref(c);
		}
		if (seq > n) {
			json_t *fsm = conv_fsm_state("idle", NULL, n);
			struct jsonmp_buf fb;
			conv_pack(&fb, fsm);
			json_decref(fsm);
			if ((e = store_conv_put_fsm(t, id, (store_bytes){ fb.sb.data, fb.sb.size })) != 0)
				bench_die("fsm", e);
			jsonmp_buf_destroy(&fb);
			if (summarised) {
				json_t *v = json_pack("{ss}", "text", "what the conversation said so far");
				struct jsonmp_buf vb;
				conv_pack(&vb, v);
				json_decref(v);
				if ((e = store_summary_put(t, id, 1, n - 2, (store_bytes){ vb.sb.data, vb.sb.size }, NULL)))
					bench_die("summary", e);
				jsonmp_buf_destroy(&vb);
			}
		}
		if ((e = store_txn_commit(t)) != 0)
			bench_die("commit", e);
	}
	jsonmp_buf_destroy(&sb);
}

static uint64_t size_now(store *s)
{
	struct store_stat st;
	int e = store_stat(s, &st);
	if (e)
		bench_die("stat", e);
	return st.size_bytes;
}

/* One fork of src at seq into dst, begin to commit. */
static double fork_once(store *s, const char *src, uint64_t seq, const char *dst, struct conv_fork_out *out)
{
	store_txn *t;
	double t0 = bench_now();
	int e = store_txn_begin(s, STORE_WRITE, &t);
	if (e)
		bench_die("write txn", e);
	struct conv_fork_in in = { src, seq, dst, NULL, NULL };
	if ((e = conv_fork(t, &in, out)) != 0) {
		store_txn_abort(t);
		bench_die("conv_fork", e);
	}
	if ((e = store_txn_commit(t)) != 0)
		bench_die("commit", e);
	return bench_now() - t0;
}

int main(int argc, char **argv)
{
	char target[4096];
	bench_dir_arg(target, sizeof target, argc, argv, "fork");
	size_t events = argc > 2 ? strtoul(argv[2], NULL, 10) : 10000;
	int runs = argc > 3 ? atoi(argv[3]) : 7;
	if (runs < 1 || runs > BENCH_MAX_RUNS || events < 4 || events % 2)
		bench_fail("usage: bench_fork [TARGET] [EVENTS: even, >= 4] [RUNS 1-%d]", BENCH_MAX_RUNS);
	int lmdb = !strstr(target, "://") && strncmp(target, "host=", 5) && strncmp(target, "dbname=", 7);
	if (lmdb) {
		bench_rmtree(target);
		bench_mkdir(target);
	}
	char info[512];
	bench_machine(info, sizeof info);
	printf("machine: %s\n", info);
	if (lmdb) {
		int tmpfs;
		bench_filesystem(target, info, sizeof info, &tmpfs);
		printf("store:   %s (LMDB, unflushed commits)\n", info);
	} else {
		printf("store:   PostgreSQL (synchronous_commit off)\n");
	}
	struct store_opts o = { .sync = STORE_SYNC_NONE, .map_size = (size_t)1 << 30 };
	store *s;
	int e = store_open(&s, target, &o);
	if (e)
		bench_die("store_open", e);
	double t0 = bench_now();
	make_source(s, "whole", events, 0);
	make_source(s, "summarised", events, 1);
	printf("setup:   two sources of %zu events (about 200 bytes of content each), one with a summary of "
	       "1..%zu, in %.1f s\n", events, events - 2, bench_now() - t0);
	char load[128];
	bench_loadavg(load, sizeof load);
	printf("load:    %s\n\n", load);

	const char *srcs[] = { "whole", "summarised" };
	const char *names[] = { "no summary", "a summary of 1..seq-2" };
	printf("%-32s %12s %22s %8s %12s\n", "fork at the last seq", "median ms", "range ms", "copied", "bytes/fork");
	for (int k = 0; k < 2; k++) {
		double dt[BENCH_MAX_RUNS];
		struct conv_fork_out out = { 0 };
		uint64_t before = size_now(s);
		for (int r = 0; r < runs; r++) {
			char dst[64];
			snprintf(dst, sizeof dst, "fork-%d-%d", k, r);
			dt[r] = fork_once(s, srcs[k], events, dst, &out);
		}
		uint64_t grown = size_now(s) - before;
		double lo, hi;
		bench_range(dt, runs, &lo, &hi);
		printf("%-32s %12.3f %10.3f - %-9.3f %8llu %12llu\n", names[k], bench_median(dt, runs) * 1e3, lo * 1e3,
		       hi * 1e3, (unsigned long long)out.copied, (unsigned long long)(grown / (uint64_t)runs));
	}
	store_close(s);
	if (lmdb)
		bench_rmtree(target);
	return 0;
}
