/*
 * Rows that the tests of several conformance files write and read back
 * (conformance.h): summaries, conversation lists, tool calls and their
 * expiries, model calls, and event content pointers kept from a read txn.
 */
#include <check.h>
#include <msgpack.h>
#include <string.h>

#include "tests/conformance/conformance.h"

/* ---- summaries ---------------------------------------------------------- */

int load_since(const char *conv, struct store_summary *sum, int *has)
{
	memset(&E, 0, sizeof E);
	store_txn *t = rbegin();
	int rc = store_load_since(t, conv, sum, has, collect_ev, &E);
	/* The summary's content lives until the txn ends (store.h): the tests
	 * look at it after, so they get a copy. */
	if (rc == 0 && sum && sum->content.len) {
		B();
		msgpack_sbuffer_write(pool[npool - 1], sum->content.ptr, sum->content.len);
		sum->content = built();
	}
	store_txn_abort(t);
	return rc;
}

void put_summary(const char *conv, uint64_t from, uint64_t to, store_bytes content, uint64_t want_ver)
{
	store_txn *t = wbegin();
	uint64_t ver = 0;
	ck_assert_int_eq(store_summary_put(t, conv, from, to, content, &ver), 0);
	ck_assert_uint_eq(ver, want_ver);
	commit(t);
}

/* ---- conversations ------------------------------------------------------ */

struct convs C;

int collect_conv(void *arg, const struct store_conv *c)
{
	struct convs *o = arg;
	ck_assert_uint_lt(o->n, CONV_MAX);
	ck_assert_uint_le(c->id.len, STORE_ID_MAX);
	memcpy(o->id[o->n], c->id.ptr, c->id.len);
	o->id[o->n][c->id.len] = 0;
	o->status[o->n] = c->status;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

int list_convs(int status, const char *after, size_t limit, int *more)
{
	memset(&C, 0, sizeof C);
	store_txn *t = rbegin();
	int rc = store_conv_list(t, status, after, limit, collect_conv, &C, more);
	store_txn_abort(t);
	return rc;
}

void expect_ids_at(int line, const char *const *want, size_t n)
{
	ck_assert_msg(C.n == n, "line %d: got %zu conversations, want %zu", line, C.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(strcmp(C.id[i], want[i]) == 0, "line %d: [%zu] is %s, want %s", line, i, C.id[i],
			      want[i]);
}

void set_status(const char *id, int status)
{
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = status };
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_put(t, id, &p), 0);
	commit(t);
}

/* ---- tool calls and expiries -------------------------------------------- */

struct store_tool_call_in tcin(const char *id, const char *name, int executor, store_bytes args,
			       store_bytes prompt)
{
	return (struct store_tool_call_in){ id, name, executor, args, prompt };
}

void mktc(const char *conv, const char *id)
{
	struct store_tool_call_in in = tcin(id, "shell", STORE_EXEC_SERVER, mmap1("cmd", "ls"), raw(NULL, 0));
	store_txn *t = wbegin();
	ck_assert_int_eq(store_tool_call_upsert(t, conv, &in), 0);
	commit(t);
}

int resolve(const char *id, int status, store_bytes result)
{
	store_txn *t = wbegin();
	int rc = store_tool_call_resolve(t, id, status, result, NULL);
	commit(t);
	return rc;
}

void schedule(const char *id, int64_t deadline)
{
	store_txn *t = wbegin();
	ck_assert_int_eq(store_expiry_schedule(t, id, deadline), 0);
	commit(t);
}

struct tcs L;

void copy_id(char *dst, store_bytes b)
{
	ck_assert_uint_le(b.len, STORE_ID_MAX);
	memcpy(dst, b.ptr, b.len);
	dst[b.len] = 0;
}

int collect_tc(void *arg, const struct store_tool_call *tc)
{
	struct tcs *o = arg;
	ck_assert_uint_lt(o->n, TC_MAX);
	copy_id(o->id[o->n], tc->id);
	copy_id(o->conv[o->n], tc->conversation);
	o->status[o->n] = tc->status;
	o->deadline[o->n] = tc->deadline;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

int list_tcs(const char *conv, unsigned mask)
{
	memset(&L, 0, sizeof L);
	store_txn *t = rbegin();
	int rc = store_tool_calls_list(t, conv, mask, collect_tc, &L);
	store_txn_abort(t);
	return rc;
}

int collect_exp(void *arg, const struct store_expiry *e)
{
	struct tcs *o = arg;
	ck_assert_uint_lt(o->n, TC_MAX);
	copy_id(o->id[o->n], e->tool_call_id);
	copy_id(o->conv[o->n], e->conversation);
	o->deadline[o->n] = e->deadline;
	o->n++;
	return o->stop_after && o->n == o->stop_after ? o->stop_ret : 0;
}

int due(int64_t now)
{
	memset(&L, 0, sizeof L);
	store_txn *t = rbegin();
	int rc = store_expiries_due(t, now, collect_exp, &L);
	store_txn_abort(t);
	return rc;
}

int earliest(int64_t *d)
{
	store_txn *t = rbegin();
	int rc = store_expiry_earliest(t, d);
	store_txn_abort(t);
	return rc;
}

void expect_list_at(int line, const char *const *want, size_t n)
{
	ck_assert_msg(L.n == n, "line %d: got %zu rows, want %zu", line, L.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(strcmp(L.id[i], want[i]) == 0, "line %d: [%zu] is %s, want %s", line, i, L.id[i],
			      want[i]);
}

/* ---- model calls and kept pointers --------------------------------------- */

struct store_model_call_in mcin(uint64_t turn_ref, const char *model, store_bytes rendered)
{
	return (struct store_model_call_in){ turn_ref, rendered, model, { 10, 20, 0.5 }, 123, 0 };
}

void put_mc(const char *conv, uint64_t turn_ref)
{
	struct store_model_call_in in = mcin(turn_ref, "m", mint((int64_t)turn_ref));
	store_txn *t = wbegin();
	ck_assert_int_eq(store_model_call_put(t, conv, &in), 0);
	commit(t);
}

int keep_ptr(void *arg, const struct store_event *e)
{
	struct ptrs *p = arg;
	ck_assert_uint_lt(p->n, 16);
	p->content[p->n++] = e->content;
	return 0;
}
