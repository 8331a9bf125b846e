/*
 * bench_store.h: the store benchmark's three systems behind one interface.
 *
 * agentd (store/store.h), raw LMDB (plain mdb_put/mdb_get with the same keys
 * and values agentd writes, no agentd code) and SQLite at its best (WAL,
 * WITHOUT ROWID tables keyed by (conversation, seq), prepared statements)
 * each implement struct bench_sys. The driver (bench_store.c) runs the same
 * workload through all three in the same run.
 *
 * Every system writes the same bytes: event type "user_msg", the content
 * below, no event_id; conversations are numbered 0.. and named "conv-%06u"
 * (agentd numbers them 1.. internally in creation order: the raw baseline
 * keys them the same way).
 */
#ifndef AGENTD_BENCH_STORE_H
#define AGENTD_BENCH_STORE_H

#include <stddef.h>
#include <stdint.h>

/* The shared workload bytes (bench_store.c). */
extern const char *const bench_event_type;
extern unsigned char bench_content[256];   /* msgpack {"text": "<200 bytes>"} */
extern size_t bench_content_len;
extern unsigned char bench_args[128];      /* msgpack {"cmd": "..."}: tool call args */
extern size_t bench_args_len;
extern unsigned char bench_result[128];    /* msgpack {"ok": true, ...}: tool call result */
extern size_t bench_result_len;
extern const char *const bench_call_name;

/* Names: "conv-%06u", "call-%08u". buf holds at least 32 bytes. */
void bench_conv_id(char *buf, unsigned conv);
void bench_call_id(char *buf, unsigned call);

/* One event to append: its conversation and the seq it must get (agentd and
 * SQLite assign seqs themselves, last + 1, and agentd's is checked; the raw
 * baseline uses it as its key). */
struct bench_ev {
	unsigned conv;
	uint64_t seq;
};

/* What a read hands on: every system decodes the same fields of each event
 * (seq, type, inserted_at, event_id, content as bytes), except the raw
 * baseline which walks keys and values undecoded (bench_sink_raw). */
struct bench_sink {
	uint64_t n;
	uint64_t sum;
};

static inline void bench_sink_event(struct bench_sink *s, uint64_t seq, size_t type_len, int64_t at,
				    size_t event_id_len, const void *content, size_t content_len)
{
	s->n++;
	s->sum += seq + type_len + (uint64_t)at + event_id_len + content_len +
		  (content_len ? *(const unsigned char *)content : 0);
}

static inline void bench_sink_raw(struct bench_sink *s, uint64_t seq, const void *val, size_t len)
{
	s->n++;
	s->sum += seq + len + (len ? *(const unsigned char *)val : 0);
}

/* A system under test. Every function returns 0 or fails loudly itself (via
 * bench_die): a benchmark with a failed operation has no figure. */
struct bench_sys {
	const char *name;
	/* Open (creating) the store in directory dir; durable: every commit
	 * flushed (agentd STORE_SYNC_FULL, LMDB default, SQLite synchronous=FULL)
	 * or not (STORE_SYNC_NONE, MDB_NOSYNC, synchronous=NORMAL). */
	void *(*open)(const char *dir, int durable, size_t map_size);
	void (*close)(void *h);
	/* Create conversations [from, to) in one transaction, in order. */
	void (*convs_create)(void *h, unsigned from, unsigned to);
	/* One write transaction appending ev[0..n), grouped by conversation. */
	void (*append)(void *h, const struct bench_ev *ev, size_t n);
	/* One write transaction: a summary of 1..to_seq. */
	void (*summary_put)(void *h, unsigned conv, uint64_t to_seq);
	/* One read transaction each: the revival read, and the newest `limit`
	 * events of the conversation, ascending. */
	void (*load_since)(void *h, unsigned conv, struct bench_sink *out);
	void (*newest)(void *h, unsigned conv, size_t limit, struct bench_sink *out);
	/* One write transaction: pending tool calls [from, to) of conversation conv. */
	void (*calls_create)(void *h, unsigned conv, unsigned from, unsigned to);
	/* One write transaction: resolve calls [from, to) of conversation conv,
	 * each only if pending (a call found not pending fails the benchmark).
	 * Only the raw baseline uses conv (to key its index row without
	 * decoding the record); agentd and SQLite find it from the call. */
	void (*calls_resolve)(void *h, unsigned conv, unsigned from, unsigned to);
	/* Flush unsynced commits. */
	void (*sync)(void *h);
	/* append as a durable writer that shares the flush: a lazy commit (its
	 * pages flushed under the writer lock, its meta page not: agentd
	 * STORE_WRITE_LAZY, LMDB MDB_NOMETASYNC), then a flush of the data file
	 * outside the lock, so the next writer commits while this one waits.
	 * Durable when it returns. SQLite: append (a WAL commit is one flush). */
	void (*append_flushed)(void *h, const struct bench_ev *ev, size_t n);
	/* The flushes of the data file append_flushed made through h so far,
	 * its commits' own among them; NULL: not counted (SQLite). */
	uint64_t (*flushes)(void *h);
};

extern const struct bench_sys bench_sys_agentd, bench_sys_lmdb, bench_sys_sqlite;

/* The largest n one append or calls_create/calls_resolve call is given. */
#define BENCH_MAX_BATCH 10000

#endif
