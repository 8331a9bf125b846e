/* libFuzzer target: the store's record decoders, through the store's own API.
 *
 * A store is built once with one row of every kind. Each input overwrites one
 * record's value (the first byte picks which) with raw LMDB, in an environment
 * opened and closed around the write (never two handles at once in a process),
 * then the store is opened and every read runs. A corrupt or truncated record
 * must come back as STORE_E_CORRUPT (or the row simply absent), never a crash,
 * a read outside the value, or a misread. */
#include <lmdb.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void ok(int rc)
{
	if (rc)
		__builtin_trap();
}

/* At a run's end (libFuzzer exits through exit()); a crash keeps the store
 * beside its input. */
static void remove_store(void)
{
	char p[96];
	snprintf(p, sizeof p, "%s/data.mdb", dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/lock.mdb", dir);
	unlink(p);
	rmdir(dir);
}

static void build(void)
{
	strcpy(dir, "/tmp/agentd-fuzz-records-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	atexit(remove_store);
	store *s;
	struct store_opts o = { .audit = 1, .sync = STORE_SYNC_NONE };
	ok(store_open(&s, dir, &o));
	store_txn *t;
	ok(store_txn_begin(s, STORE_WRITE, &t));
	static const unsigned char map[] = { 0x81, 0xa1, 'k', 0x01 };
	store_bytes m = { map, sizeof map };
	ok(store_conv_create(t, "c1", m));
	struct store_event_in ev = { "user_msg", m, "e1" };
	uint64_t seq;
	ok(store_event_append(t, "c1", &ev, &seq, NULL));
	struct store_tool_call_in tc = { "t1", "approve", STORE_EXEC_HUMAN, m, m };
	ok(store_tool_call_upsert(t, "c1", &tc));
	ok(store_expiry_schedule(t, "t1", 1000));
	ok(store_summary_put(t, "c1", 1, 1, m, NULL));
	struct store_model_call_in mc = { 1, m, "echo", { 1, 2, 0.5 }, 3, 1 };
	ok(store_model_call_put(t, "c1", &mc));
	ok(store_txn_commit(t));
	store_close(s);
}

static void be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

/* Overwrite one record with raw LMDB. */
static void poke(unsigned which, const void *val, size_t len)
{
	static const char *const dbs[] = { "convs", "events", "tool_calls", "summaries", "model_calls",
					   "conv_ids", "expiries", "conv_tool_calls", "event_ids" };
	unsigned char k[40];
	size_t kl;
	which %= sizeof dbs / sizeof dbs[0];
	switch (which) {
	case 0: be64(k, 1); kl = 8; break;                               /* convs: conv 1 */
	case 1: case 3: case 4: be64(k, 1); be64(k + 8, 1); kl = 16; break; /* (conv 1, 1) */
	case 2: memcpy(k, "t1", 2); kl = 2; break;
	case 5: memcpy(k, "c1", 2); kl = 2; break;
	case 6: be64(k, 1000); memcpy(k + 8, "t1", 2); kl = 10; break;
	case 7: be64(k, 1); memcpy(k + 8, "t1", 2); kl = 10; break;
	default: be64(k, 1); memcpy(k + 8, "e1", 2); kl = 10; break;
	}
	MDB_env *env;
	MDB_txn *t;
	MDB_dbi dbi;
	ok(mdb_env_create(&env));
	ok(mdb_env_set_maxdbs(env, 16));
	ok(mdb_env_open(env, dir, MDB_NOSYNC, 0600));
	ok(mdb_txn_begin(env, NULL, 0, &t));
	ok(mdb_dbi_open(t, dbs[which], 0, &dbi));
	MDB_val key = { kl, k }, v = { len, (void *)val };
	if (len > 0 && len < 4000)
		ok(mdb_put(t, dbi, &key, &v, 0));
	ok(mdb_txn_commit(t));
	mdb_env_close(env);
}

static int expect(int rc)
{
	/* Reads of a damaged record: fine, corrupt, or absent. */
	if (rc != 0 && rc != STORE_E_CORRUPT && rc != STORE_E_NOTFOUND && rc != 1)
		__builtin_trap();
	return rc;
}

static int on_ev(void *a, const struct store_event *e)
{
	(void)a;
	volatile size_t sum = e->content.len + e->type.len + e->event_id.len;
	(void)sum;
	return 0;
}

static int on_conv(void *a, const struct store_conv *c) { (void)a; (void)c; return 0; }
static int on_tc(void *a, const struct store_tool_call *c) { (void)a; (void)c; return 0; }
static int on_mc(void *a, const struct store_model_call *c) { (void)a; (void)c; return 0; }
static int on_exp(void *a, const struct store_expiry *e) { (void)a; (void)e; return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0])
		build();
	if (size < 1)
		return 0;
	poke(data[0], data + 1, size - 1);
	store *s;
	struct store_opts o = { .audit = 1, .read_only = 1 };
	if (store_open(&s, dir, &o))
		__builtin_trap();
	store_txn *t;
	ok(store_txn_begin(s, STORE_READ, &t));
	struct store_conv c;
	struct store_tool_call tc;
	struct store_summary sum;
	struct store_range r = { 0 };
	uint64_t seq;
	expect(store_conv_get(t, "c1", &c));
	expect(store_conv_list(t, -1, NULL, 0, on_conv, NULL, NULL));
	expect(store_events_stream(t, "c1", &r, on_ev, NULL));
	r.limit = 1;
	r.type = "user_msg";
	expect(store_events_stream(t, "c1", &r, on_ev, NULL));
	expect(store_event_latest_seq(t, "c1", &seq));
	expect(store_load_since(t, "c1", &sum, NULL, on_ev, NULL));
	expect(store_summary_latest(t, "c1", &sum));
	expect(store_tool_call_get(t, "t1", &tc));
	expect(store_tool_calls_list(t, "c1", 0, on_tc, NULL));
	expect(store_model_calls_list(t, "c1", on_mc, NULL));
	expect(store_expiries_due(t, INT64_MAX, on_exp, NULL));
	store_txn_abort(t);
	store_close(s);
	return 0;
}
