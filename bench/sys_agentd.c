/* sys_agentd.c: the system under test, through store/store.h only. */
#include "bench/bench.h"
#include "bench/bench_store.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

struct agentd {
	store *s;
	struct store_event_in in[BENCH_MAX_BATCH];
	uint64_t seqs[BENCH_MAX_BATCH];
	uint64_t lazy_commits; /* append_flushed's: one flush each, of its pages */
};

static void check(const char *what, int err)
{
	if (err) {
		char msg[128];
		snprintf(msg, sizeof msg, "agentd %s: %s", what, store_strerror(err));
		bench_die(msg, err);
	}
}

static store_txn *begin(struct agentd *a, int mode)
{
	store_txn *t;
	check("txn_begin", store_txn_begin(a->s, mode, &t));
	return t;
}

static void *ag_open(const char *dir, int durable, size_t map_size)
{
	struct agentd *a = calloc(1, sizeof *a);
	if (!a)
		bench_fail("out of memory");
	struct store_opts o = { .sync = durable ? STORE_SYNC_FULL : STORE_SYNC_NONE, .map_size = map_size };
	check("open", store_open(&a->s, dir, &o));
	for (size_t i = 0; i < BENCH_MAX_BATCH; i++)
		a->in[i] = (struct store_event_in){ bench_event_type, { bench_content, bench_content_len }, NULL };
	return a;
}

static void ag_close(void *h)
{
	struct agentd *a = h;
	store_close(a->s);
	free(a);
}

static void ag_convs_create(void *h, unsigned from, unsigned to)
{
	struct agentd *a = h;
	static const unsigned char settings[] = { 0x81, 0xa5, 'm', 'o', 'd', 'e', 'l', 0xa4, 'e', 'c', 'h', 'o' };
	store_txn *t = begin(a, STORE_WRITE);
	for (unsigned c = from; c < to; c++) {
		char id[32];
		bench_conv_id(id, c);
		check("conv_create", store_conv_create(t, id, (store_bytes){ settings, sizeof settings }));
	}
	check("commit", store_txn_commit(t));
}

/* Runs of one conversation go in one store_events_append call, as the
 * supervisor's group commit would hand them over. */
static void append_mode(struct agentd *a, const struct bench_ev *ev, size_t n, int mode)
{
	store_txn *t = begin(a, mode);
	for (size_t i = 0; i < n;) {
		size_t k = 1;
		while (i + k < n && ev[i + k].conv == ev[i].conv)
			k++;
		char id[32];
		bench_conv_id(id, ev[i].conv);
		check("events_append", store_events_append(t, id, a->in, k, a->seqs, NULL));
		for (size_t j = 0; j < k; j++)
			if (a->seqs[j] != ev[i + j].seq)
				bench_fail("agentd assigned seq %llu, expected %llu",
					   (unsigned long long)a->seqs[j], (unsigned long long)ev[i + j].seq);
		i += k;
	}
	check("commit", store_txn_commit(t));
}

static void ag_append(void *h, const struct bench_ev *ev, size_t n)
{
	append_mode(h, ev, n, STORE_WRITE);
}

/* As a worker's turn commit and the durable frontier: one flush under the
 * writer lock, the second (store_flush) outside it. */
static void ag_append_flushed(void *h, const struct bench_ev *ev, size_t n)
{
	struct agentd *a = h;
	append_mode(a, ev, n, STORE_WRITE_LAZY);
	a->lazy_commits++;
	check("flush", store_flush(a->s));
}

/* The commits' page flushes, and the flushes store_flush made (not those
 * another writer's flush or commit spared it: store/flushrec.h). */
static uint64_t ag_flushes(void *h)
{
	struct agentd *a = h;
	struct store_stat st;
	check("stat", store_stat(a->s, &st));
	return a->lazy_commits + st.flushes;
}

static void ag_summary_put(void *h, unsigned conv, uint64_t to_seq)
{
	struct agentd *a = h;
	char id[32];
	bench_conv_id(id, conv);
	store_txn *t = begin(a, STORE_WRITE);
	check("summary_put", store_summary_put(t, id, 1, to_seq, (store_bytes){ bench_content, bench_content_len },
					       NULL));
	check("commit", store_txn_commit(t));
}

static int sink_cb(void *arg, const struct store_event *e)
{
	bench_sink_event(arg, e->seq, e->type.len, e->inserted_at, e->event_id.len, e->content.ptr,
			 e->content.len);
	return 0;
}

static void ag_load_since(void *h, unsigned conv, struct bench_sink *out)
{
	struct agentd *a = h;
	char id[32];
	struct store_summary sum;
	int has;
	bench_conv_id(id, conv);
	store_txn *t = begin(a, STORE_READ);
	check("load_since", store_load_since(t, id, &sum, &has, sink_cb, out));
	if (has)
		out->sum += sum.to_seq + sum.content.len;
	store_txn_abort(t);
}

static void ag_newest(void *h, unsigned conv, size_t limit, struct bench_sink *out)
{
	struct agentd *a = h;
	char id[32];
	struct store_range r = { .limit = limit };
	bench_conv_id(id, conv);
	store_txn *t = begin(a, STORE_READ);
	check("events_stream", store_events_stream(t, id, &r, sink_cb, out));
	store_txn_abort(t);
}

static void ag_calls_create(void *h, unsigned conv, unsigned from, unsigned to)
{
	struct agentd *a = h;
	char cid[32], id[32];
	bench_conv_id(cid, conv);
	store_txn *t = begin(a, STORE_WRITE);
	for (unsigned i = from; i < to; i++) {
		bench_call_id(id, i);
		struct store_tool_call_in tc = { id, bench_call_name, STORE_EXEC_HUMAN,
						 { bench_args, bench_args_len }, { NULL, 0 } };
		check("tool_call_upsert", store_tool_call_upsert(t, cid, &tc));
	}
	check("commit", store_txn_commit(t));
}

static void ag_calls_resolve(void *h, unsigned conv, unsigned from, unsigned to)
{
	struct agentd *a = h;
	char id[32];
	(void)conv;
	store_txn *t = begin(a, STORE_WRITE);
	for (unsigned i = from; i < to; i++) {
		bench_call_id(id, i);
		check("tool_call_resolve", store_tool_call_resolve(t, id, STORE_TC_RESOLVED,
								   (store_bytes){ bench_result, bench_result_len },
								   NULL));
	}
	check("commit", store_txn_commit(t));
}

static void ag_sync(void *h)
{
	struct agentd *a = h;
	check("sync", store_sync(a->s));
}

const struct bench_sys bench_sys_agentd = {
	"agentd", ag_open, ag_close, ag_convs_create, ag_append, ag_summary_put, ag_load_since, ag_newest,
	ag_calls_create, ag_calls_resolve, ag_sync, ag_append_flushed, ag_flushes,
};
