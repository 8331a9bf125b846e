/*
 * bench_meta: a list filtered by metadata on 100,000 conversations, through
 * the metadata index (store_conv_find with a pair) beside a full scan of the
 * same store in the same run (store_conv_find with the same test as the
 * caller's match, which reads every conversation). Each run times both on
 * the same committed data; the report is the median and range over runs.
 *
 *   bench_meta [DIR] [CONVS] [RUNS]   (default: a scratch dir under $TMPDIR, 100000, 11)
 */
#include "bench/bench.h"
#include "store/store.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENANTS 1000 /* each tenant holds CONVS / TENANTS conversations */

static int count_one(void *arg, const struct store_conv *c)
{
	(void)c;
	++*(size_t *)arg;
	return 0;
}

/* The full scan's test: the metadata holds tenant=t7 (what the index answers). */
static int tenant_is_t7(void *arg, const struct store_conv *c)
{
	struct store_kv kv = { { "tenant", 6 }, { "t7", 2 } };
	struct store_conv_filter f = { .status = -1, .meta = &kv, .nmeta = 1 };
	(void)arg;
	return store_filter_match(&f, c);
}

static double list_once(store *s, const struct store_conv_filter *f, size_t limit, size_t *n)
{
	store_txn *t;
	int e = store_txn_begin(s, STORE_READ, &t);
	if (e)
		bench_die("read txn", e);
	*n = 0;
	double t0 = bench_now();
	if ((e = store_conv_find(t, f, NULL, limit, count_one, n, NULL)) != 0)
		bench_die("store_conv_find", e);
	double dt = bench_now() - t0;
	store_txn_abort(t);
	return dt;
}

/* Setup: convs conversations, each with metadata {tenant: one of TENANTS,
 * user: its own}, 1,000 to a transaction. */
static void fill(store *s, size_t convs)
{
	int e;
	double t0 = bench_now();
	msgpack_sbuffer set, meta;
	msgpack_sbuffer_init(&set);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &set, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "model", 5);
	msgpack_pack_str_with_body(&pk, "echo", 4);
	for (size_t i = 0; i < convs;) {
		store_txn *t;
		if ((e = store_txn_begin(s, STORE_WRITE, &t)) != 0)
			bench_die("write txn", e);
		for (size_t k = 0; k < 1000 && i < convs; k++, i++) {
			char id[32], tenant[24], user[24];
			snprintf(id, sizeof id, "c-%08zu", i);
			snprintf(tenant, sizeof tenant, "t%zu", i % TENANTS);
			snprintf(user, sizeof user, "u%zu", i);
			msgpack_sbuffer_init(&meta);
			msgpack_packer_init(&pk, &meta, msgpack_sbuffer_write);
			msgpack_pack_map(&pk, 2);
			msgpack_pack_str_with_body(&pk, "tenant", 6);
			msgpack_pack_str_with_body(&pk, tenant, strlen(tenant));
			msgpack_pack_str_with_body(&pk, "user", 4);
			msgpack_pack_str_with_body(&pk, user, strlen(user));
			struct store_conv_patch p = { .set = STORE_SET_METADATA, .metadata = { meta.data, meta.size } };
			if ((e = store_conv_create(t, id, (store_bytes){ set.data, set.size })) != 0 ||
			    (e = store_conv_put(t, id, &p)) != 0)
				bench_die("create", e);
			msgpack_sbuffer_destroy(&meta);
		}
		if ((e = store_txn_commit(t)) != 0)
			bench_die("commit", e);
	}
	msgpack_sbuffer_destroy(&set);
	printf("setup:   %zu conversations, metadata {tenant: 1 of %d, user: unique}, in %.1f s\n", convs, TENANTS,
	       bench_now() - t0);
}

/* Measure and report: each case listed runs times by the index and by a
 * full scan, which must find the same. */
static void measure(store *s, int runs)
{
	struct store_kv kv = { { "tenant", 6 }, { "t7", 2 } };
	struct store_conv_filter by_index = { .status = -1, .meta = &kv, .nmeta = 1 };
	struct store_conv_filter by_scan = { .status = -1, .match = tenant_is_t7 };
	struct { const char *name; size_t limit; } cases[] = {
		{ "tenant=t7, every match", 0 },
		{ "tenant=t7, first page of 20", 20 },
	};
	printf("%-30s %-10s %12s %22s %8s\n", "list filtered by metadata", "way", "median ms", "range ms", "matches");
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		double ix[BENCH_MAX_RUNS], sc[BENCH_MAX_RUNS];
		size_t ni = 0, ns = 0;
		for (int r = 0; r < runs; r++) {
			ix[r] = list_once(s, &by_index, cases[c].limit, &ni);
			sc[r] = list_once(s, &by_scan, cases[c].limit, &ns);
		}
		if (ni != ns)
			bench_fail("the index found %zu, the scan %zu", ni, ns);
		double lo, hi;
		bench_range(ix, runs, &lo, &hi);
		printf("%-30s %-10s %12.3f %10.3f - %-9.3f %8zu\n", cases[c].name, "index", bench_median(ix, runs) * 1e3,
		       lo * 1e3, hi * 1e3, ni);
		bench_range(sc, runs, &lo, &hi);
		printf("%-30s %-10s %12.3f %10.3f - %-9.3f %8zu\n", "", "full scan", bench_median(sc, runs) * 1e3,
		       lo * 1e3, hi * 1e3, ns);
	}
}

int main(int argc, char **argv)
{
	char dir[4096];
	bench_dir_arg(dir, sizeof dir, argc, argv, "meta");
	size_t convs = argc > 2 ? strtoul(argv[2], NULL, 10) : 100000;
	int runs = argc > 3 ? atoi(argv[3]) : 11;
	if (runs < 1 || runs > BENCH_MAX_RUNS || convs < TENANTS)
		bench_fail("usage: bench_meta [DIR] [CONVS >= %d] [RUNS 1-%d]", TENANTS, BENCH_MAX_RUNS);
	bench_rmtree(dir);
	bench_mkdir(dir);
	char info[512];
	bench_machine(info, sizeof info);
	printf("machine: %s\n", info);
	int tmpfs;
	bench_filesystem(dir, info, sizeof info, &tmpfs);
	printf("store:   %s (LMDB)\n", info);

	struct store_opts o = { .sync = STORE_SYNC_NONE, .map_size = (size_t)1 << 30 };
	store *s;
	int e = store_open(&s, dir, &o);
	if (e)
		bench_die("store_open", e);
	fill(s, convs);
	char load[128];
	bench_loadavg(load, sizeof load);
	printf("load:    %s\n\n", load);

	measure(s, runs);
	store_close(s);
	bench_rmtree(dir);
	return 0;
}
