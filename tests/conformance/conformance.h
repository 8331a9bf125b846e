/*
 * conformance.h: what the files of the store conformance suite share, and
 * nothing else includes. The fixture (conf_fixture.c: a fresh store per test
 * in a fresh directory, time from a fake clock), the content builders, the
 * transaction shorthands, and the collectors that several files' tests read
 * rows back with (conf_rows.c). Each conf_<topic>.c holds the tests of one
 * topic and a conf_<case>_add that adds them to their case; conformance.c
 * makes the suite from those cases.
 *
 * The fixture's state is a set of globals (S, NOW, OPTS, E, C, L, ...): the
 * tests, written against store.h alone, name them directly, as Check's
 * fixtures do; each test runs in its own fork, so no state crosses tests.
 * Results a collector fills live in the global it names (E for events, C for
 * conversations, L for tool calls and expiries) until the next call.
 */
#ifndef AGENTD_TESTS_CONFORMANCE_CONFORMANCE_H
#define AGENTD_TESTS_CONFORMANCE_CONFORMANCE_H
#include <check.h>
#include <limits.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "tests/conformance/target.h"

/* ---- fixture (conf_fixture.c) ------------------------------------------ */

/* The fake clock's start: every test's NOW begins here. */
#define T0 INT64_C(1700000000000)

extern char dir[PATH_MAX]; /* this test's store directory */
extern store *S;           /* the store open on it */
extern int64_t NOW;        /* what the store's clock reads */
extern struct store_opts OPTS;

/* Checked fixtures: a fresh store in a fresh directory, audit off or on;
 * teardown closes it and removes the directory (also at exit, when a failed
 * assertion leaves the fork without teardown). */
void conf_setup(void);
void conf_setup_audit(void);
void conf_teardown(void);

/* Open S on dir with OPTS; close and open it again. */
void open_store(void);
void reopen_store(void);

/* ---- content builders (conf_fixture.c) ---------------------------------- */

/* msgpack buffers built by a test, freed in teardown. */
#define POOL_MAX 512
extern msgpack_sbuffer *pool[POOL_MAX];
extern size_t npool;
/* Free every buffer of the pool (teardown does). */
void pool_free(void);

/* Start a new msgpack buffer and return its packer; built() is what was
 * packed into the newest one. */
msgpack_packer *B(void);
store_bytes built(void);
store_bytes mstr(const char *s);
store_bytes mint(int64_t v);
store_bytes mmap1(const char *k, const char *v);
store_bytes mmap0(void);
store_bytes raw(const void *p, size_t len);

/* Byte strings that are not exactly one msgpack object. */
extern const unsigned char two_objs[2];
extern const unsigned char trunc_arr[2];
extern const unsigned char trunc_str[3];
extern const unsigned char never_used[1];
extern const unsigned char map_then_junk[2];

struct bad_blob {
	const char *what;
	store_bytes b;
};
extern const struct bad_blob bad_blobs[5];
#define NBAD (sizeof bad_blobs / sizeof bad_blobs[0])

/* 1 when b holds exactly the given bytes. */
int bytes_eq(store_bytes b, const void *p, size_t len);
int bytes_eq_s(store_bytes b, const char *s);
int bytes_eq_b(store_bytes a, store_bytes b);

/* ---- transactions and events (conf_fixture.c) -------------------------- */

/* Begin a write or read txn on S (asserting it began); commit one. */
store_txn *wbegin(void);
store_txn *rbegin(void);
void commit(store_txn *t);

/* Create conversation id with empty settings, in its own txn. */
void mkconv(const char *id);
struct store_event_in ev(const char *type, store_bytes content, const char *event_id);
/* Append n events "e1".."en" (content: their 1-based index), one txn. */
void append_n(const char *conv, size_t n, const char *type);
/* conv's latest seq, read in its own txn. */
uint64_t latest(const char *conv);

#define EV_MAX 600
struct ev_copy {
	uint64_t seq;
	char type[40];
	unsigned char content[64];
	size_t clen;
	char eid[STORE_EVENT_ID_MAX + 1];
	size_t eidlen;
	int64_t inserted_at;
};
struct evs {
	size_t n;
	size_t stop_after; /* 0: never stop */
	int stop_ret;
	struct ev_copy e[EV_MAX];
};
extern struct evs E;

/* An event callback copying into the struct evs at arg. */
int collect_ev(void *arg, const struct store_event *e);
/* store_events_stream into E, in its own read txn; its return code. */
int stream(const char *conv, uint64_t after, uint64_t before, size_t limit, const char *type);

void expect_seqs_at(int line, const uint64_t *want, size_t n);
#define EXPECT_SEQS(...)                                                       \
	do {                                                                   \
		const uint64_t want_[] = { __VA_ARGS__ };                      \
		expect_seqs_at(__LINE__, want_, sizeof want_ / sizeof want_[0]); \
	} while (0)
#define EXPECT_NO_EVENTS() ck_assert_uint_eq(E.n, 0)

/* Expect seqs lo..hi (inclusive) in E, in order. */
void expect_run(uint64_t lo, uint64_t hi);

/* ---- rows several files read and write (conf_rows.c) ------------------- */

/* store_load_since into E (the summary's content copied to the pool). */
int load_since(const char *conv, struct store_summary *sum, int *has);
/* Put a summary, asserting it succeeds with version want_ver. */
void put_summary(const char *conv, uint64_t from, uint64_t to, store_bytes content, uint64_t want_ver);

#define CONV_MAX 64
struct convs {
	size_t n;
	size_t stop_after;
	int stop_ret;
	char id[CONV_MAX][STORE_ID_MAX + 1];
	int status[CONV_MAX];
};
extern struct convs C;

/* A conversation callback copying into the struct convs at arg. */
int collect_conv(void *arg, const struct store_conv *c);
/* store_conv_list into C, in its own read txn; its return code. */
int list_convs(int status, const char *after, size_t limit, int *more);
void expect_ids_at(int line, const char *const *want, size_t n);
#define EXPECT_IDS(...)                                                         \
	do {                                                                    \
		const char *const want_[] = { __VA_ARGS__ };                    \
		expect_ids_at(__LINE__, want_, sizeof want_ / sizeof want_[0]); \
	} while (0)
/* Set a conversation's status, in its own txn. */
void set_status(const char *id, int status);

struct store_tool_call_in tcin(const char *id, const char *name, int executor, store_bytes args,
			       store_bytes prompt);
/* A pending shell call id of conv, in its own txn. */
void mktc(const char *conv, const char *id);
/* Resolve id in its own txn; store_tool_call_resolve's return code. */
int resolve(const char *id, int status, store_bytes result);
/* Schedule id's expiry at deadline, in its own txn. */
void schedule(const char *id, int64_t deadline);

#define TC_MAX 32
struct tcs {
	size_t n;
	size_t stop_after;
	int stop_ret;
	char id[TC_MAX][STORE_ID_MAX + 1];
	char conv[TC_MAX][STORE_ID_MAX + 1];
	int status[TC_MAX];
	int64_t deadline[TC_MAX];
};
extern struct tcs L;

/* Copy an id of at most STORE_ID_MAX bytes to dst, terminated. */
void copy_id(char *dst, store_bytes b);
/* Tool-call and expiry callbacks copying into the struct tcs at arg. */
int collect_tc(void *arg, const struct store_tool_call *tc);
int collect_exp(void *arg, const struct store_expiry *e);
/* store_tool_calls_list / store_expiries_due into L, in their own read txn. */
int list_tcs(const char *conv, unsigned mask);
int due(int64_t now);
/* store_expiry_earliest in its own read txn. */
int earliest(int64_t *d);
void expect_list_at(int line, const char *const *want, size_t n);
#define EXPECT_LIST(...)                                                         \
	do {                                                                     \
		const char *const want_[] = { __VA_ARGS__ };                     \
		expect_list_at(__LINE__, want_, sizeof want_ / sizeof want_[0]); \
	} while (0)

struct store_model_call_in mcin(uint64_t turn_ref, const char *model, store_bytes rendered);
/* A model call of conv at turn_ref, in its own txn (a no-op with audit off). */
void put_mc(const char *conv, uint64_t turn_ref);

/* Pointers kept from a read txn: they must stay valid (and unchanged)
 * until it ends, even while a write txn rewrites the same rows. */
struct ptrs {
	size_t n;
	store_bytes content[16];
};
/* An event callback keeping each event's content pointer in struct ptrs. */
int keep_ptr(void *arg, const struct store_event *e);

/* ---- the cases (each conf_<topic>.c adds its tests to its case) -------- */

void conf_events_add(TCase *tc);
void conf_stream_add(TCase *tc);
void conf_summaries_add(TCase *tc);
void conf_conversations_add(TCase *tc);
void conf_ids_add(TCase *tc);
void conf_lease_usage_add(TCase *tc);
void conf_tool_calls_add(TCase *tc);
void conf_expiries_add(TCase *tc);
void conf_schedules_add(TCase *tc);
void conf_delete_add(TCase *tc);
void conf_audit_off_add(TCase *tc);
void conf_audit_add(TCase *tc);
void conf_runs_add(TCase *tc);
void conf_transactions_add(TCase *tc);
void conf_content_add(TCase *tc);
void conf_open_add(TCase *tc);
void conf_edges_add(TCase *tc);
void conf_metadata_add(TCase *tc);
void conf_audit_edges_add(TCase *tc);
void conf_nodes_add(TCase *tc);
void conf_log_at_add(TCase *tc);
void conf_runs_each_add(TCase *tc);
void conf_convs_lock_add(TCase *tc);
#endif
