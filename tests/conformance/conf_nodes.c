/*
 * Nodes and leases between nodes: heartbeats, claims and their generations,
 * expired leases moving, releases, what is claimable, notifications and the
 * claim of due deadlines (case "nodes").
 */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/conformance/conformance.h"

#define NODES_MAX 8
struct node_copy {
	char id[STORE_ID_MAX + 1];
	int64_t started_at, beat_at, expires_at;
	uint64_t leases;
};
struct nodes_seen {
	size_t n;
	struct node_copy v[NODES_MAX];
};

static int collect_node(void *arg, const struct store_node *nd)
{
	struct nodes_seen *ns = arg;
	ck_assert_uint_lt(ns->n, NODES_MAX);
	ck_assert_uint_le(nd->id.len, STORE_ID_MAX);
	struct node_copy *c = &ns->v[ns->n++];
	memcpy(c->id, nd->id.ptr, nd->id.len);
	c->id[nd->id.len] = 0;
	c->started_at = nd->started_at;
	c->beat_at = nd->beat_at;
	c->expires_at = nd->expires_at;
	c->leases = nd->leases;
	return 0;
}

static struct nodes_seen nodes_now(void)
{
	struct nodes_seen ns = { 0 };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_nodes_list(t, collect_node, &ns), 0);
	store_txn_abort(t);
	return ns;
}

static uint64_t beat(const char *node, int64_t ttl)
{
	store_txn *t = wbegin();
	uint64_t n = 99;
	ck_assert_int_eq(store_node_beat(t, node, ttl, &n), 0);
	commit(t);
	return n;
}

static int claim(const char *conv, const char *node, int64_t ttl, uint64_t *gen)
{
	store_txn *t = wbegin();
	int err = store_conv_claim(t, conv, node, ttl, gen);
	commit(t);
	return err;
}

/* The owner of conv as "node@expires" ("-" without one), and its generation. */
static void owner_of(const char *conv, char *out, size_t cap, uint64_t *gen)
{
	store_txn *t = rbegin();
	struct store_owner o;
	ck_assert_int_eq(store_conv_owner(t, conv, &o), 0);
	if (o.node.len)
		snprintf(out, cap, "%.*s@%lld", (int)o.node.len, (const char *)o.node.ptr, (long long)o.expires_at);
	else
		snprintf(out, cap, "-@%lld", (long long)o.expires_at);
	if (gen)
		*gen = o.lease;
	store_txn_abort(t);
}

struct ids_seen {
	char s[512];
};

static int collect_cid(void *arg, const char *id, size_t len)
{
	struct ids_seen *c = arg;
	size_t n = strlen(c->s);
	ck_assert_uint_lt(n + len + 2, sizeof c->s);
	snprintf(c->s + n, sizeof c->s - n, "%s%.*s", n ? "," : "", (int)len, id);
	return 0;
}

static int stop_id(void *arg, const char *id, size_t len)
{
	(void)arg;
	(void)id;
	(void)len;
	return 42;
}

static int collect_lease(void *arg, const char *id, size_t len, uint64_t gen, int64_t exp)
{
	struct ids_seen *c = arg;
	size_t n = strlen(c->s);
	snprintf(c->s + n, sizeof c->s - n, "%s%.*s/%llu@%lld", n ? "," : "", (int)len, id, (unsigned long long)gen,
		 (long long)(exp - T0));
	return 0;
}

START_TEST(node_beat_creates_refreshes_and_lists)
{
	ck_assert_uint_eq(nodes_now().n, 0);
	ck_assert_uint_eq(beat("n2", 1000), 0);
	NOW += 10;
	ck_assert_uint_eq(beat("n1", 3000), 0);
	NOW += 500;
	ck_assert_uint_eq(beat("n2", 2000), 0);
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 2); /* in id order */
	ck_assert_str_eq(ns.v[0].id, "n1");
	ck_assert_int_eq(ns.v[0].started_at, T0 + 10);
	ck_assert_int_eq(ns.v[0].beat_at, T0 + 10);
	ck_assert_int_eq(ns.v[0].expires_at, T0 + 3010);
	ck_assert_str_eq(ns.v[1].id, "n2");
	ck_assert_int_eq(ns.v[1].started_at, T0); /* kept by a later beat */
	ck_assert_int_eq(ns.v[1].beat_at, T0 + 510);
	ck_assert_int_eq(ns.v[1].expires_at, T0 + 2510);
	ck_assert_uint_eq(ns.v[1].leases, 0);
	/* an expired node is still listed: callers judge by expires_at */
	NOW += 100000;
	ck_assert_uint_eq(nodes_now().n, 2);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_node_leave(t, "n1"), 0);
	ck_assert_int_eq(store_node_leave(t, "never-seen"), 0);
	commit(t);
	ns = nodes_now();
	ck_assert_uint_eq(ns.n, 1);
	ck_assert_str_eq(ns.v[0].id, "n2");
	/* a node that left and beats again starts anew */
	beat("n1", 1000);
	ns = nodes_now();
	ck_assert_int_eq(ns.v[0].started_at, NOW);
}
END_TEST

START_TEST(claim_takes_a_new_generation_and_fences)
{
	mkconv("c1");
	char o[256];
	uint64_t g0 = 0, g1 = 0, g2 = 0, g = 0;
	owner_of("c1", o, sizeof o, &g0);
	ck_assert_str_eq(o, "-@0");
	ck_assert_int_eq(claim("c1", "n1", 1000, &g1), 0);
	ck_assert_uint_gt(g1, g0);
	owner_of("c1", o, sizeof o, &g);
	ck_assert_int_eq(g, g1);
	char want[64];
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 1000));
	ck_assert_str_eq(o, want);
	/* the owner may claim again: a new generation fences its own old worker */
	ck_assert_int_eq(claim("c1", "n1", 1000, &g2), 0);
	ck_assert_uint_gt(g2, g1);
	store_txn *t = rbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", g1), STORE_E_FENCED);
	ck_assert_int_eq(store_lease_check(t, "c1", g2), 0);
	struct store_conv c;
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert_uint_eq(c.lease, g2); /* the generation is the conversation's lease */
	store_txn_abort(t);
}
END_TEST

START_TEST(claim_of_a_live_lease_conflicts_and_writes_nothing)
{
	mkconv("c1");
	uint64_t g1 = 0, g = 77;
	ck_assert_int_eq(claim("c1", "n1", 1000, &g1), 0);
	NOW += 999; /* one ms before its expiry */
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_claim(t, "c1", "n2", 5000, &g), STORE_E_CONFLICT);
	ck_assert_uint_eq(g, 77);
	/* the transaction stays usable */
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	char o[256], want[64];
	owner_of("c1", o, sizeof o, &g);
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 1000));
	ck_assert_str_eq(o, want);
	ck_assert_uint_eq(g, g1);
	ck_assert_uint_eq(latest("c1"), 1);
}
END_TEST

/* A node that stopped (SIGSTOP, a partition) and comes back after its
 * lease expired and moved: its worker is fenced, its beat renews nothing. */
START_TEST(expired_lease_moves_and_the_stale_owner_is_fenced)
{
	mkconv("c1");
	mkconv("c2");
	uint64_t g1 = 0, g2 = 0, gx = 0;
	beat("n1", 1000);
	ck_assert_int_eq(claim("c1", "n1", 1000, &g1), 0);
	ck_assert_int_eq(claim("c2", "n1", 1000, &gx), 0);
	NOW += 1000; /* expires_at <= now: expired */
	ck_assert_int_eq(claim("c1", "n2", 1000, &g2), 0);
	ck_assert_uint_gt(g2, g1);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_lease_check(t, "c1", g1), STORE_E_FENCED);
	store_txn_abort(t);
	/* n1 wakes: its beat renews only what it still holds */
	NOW += 10;
	ck_assert_uint_eq(beat("n1", 1000), 1);
	char o[256], want[64];
	owner_of("c1", o, sizeof o, NULL);
	snprintf(want, sizeof want, "n2@%lld", (long long)(T0 + 2000));
	ck_assert_str_eq(o, want);
	owner_of("c2", o, sizeof o, NULL);
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 2010));
	ck_assert_str_eq(o, want);
	/* and its release of what it lost is refused */
	t = wbegin();
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1), STORE_E_FENCED);
	commit(t);
	owner_of("c1", o, sizeof o, NULL);
	snprintf(want, sizeof want, "n2@%lld", (long long)(T0 + 2000));
	ck_assert_str_eq(o, want);
}
END_TEST

START_TEST(beat_renews_held_leases)
{
	mkconv("c1");
	mkconv("c2");
	mkconv("c3");
	uint64_t g;
	beat("n1", 1000);
	ck_assert_int_eq(claim("c1", "n1", 1000, &g), 0);
	ck_assert_int_eq(claim("c2", "n1", 1000, &g), 0);
	ck_assert_int_eq(claim("c3", "n2", 1000, &g), 0);
	NOW += 800;
	ck_assert_uint_eq(beat("n1", 1000), 2);
	NOW += 800; /* past the first expiry, inside the renewed one */
	ck_assert_int_eq(claim("c1", "n2", 1000, &g), STORE_E_CONFLICT);
	ck_assert_int_eq(claim("c2", "n3", 1000, &g), STORE_E_CONFLICT);
	ck_assert_int_eq(claim("c3", "n3", 1000, &g), 0); /* n2 never beat: its lease lapsed */
	struct ids_seen l = { "" };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_node_leases(t, "n1", collect_lease, &l), 0);
	store_txn_abort(t);
	char want[128];
	uint64_t g1, g2;
	char o[256];
	owner_of("c1", o, sizeof o, &g1);
	owner_of("c2", o, sizeof o, &g2);
	snprintf(want, sizeof want, "c1/%llu@1800,c2/%llu@1800", (unsigned long long)g1, (unsigned long long)g2);
	ck_assert_str_eq(l.s, want);
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 1);
	ck_assert_uint_eq(ns.v[0].leases, 2);
}
END_TEST

START_TEST(release_and_leave_free_leases_at_once)
{
	mkconv("c1");
	mkconv("c2");
	uint64_t g1 = 0, g2 = 0, g = 0;
	beat("n1", 60000);
	ck_assert_int_eq(claim("c1", "n1", 60000, &g1), 0);
	ck_assert_int_eq(claim("c2", "n1", 60000, &g2), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_release(t, "c1", "n2", g1), STORE_E_FENCED);     /* not its owner */
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1 + 100), STORE_E_FENCED); /* not its generation */
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1), 0);
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g1), STORE_E_FENCED); /* no longer held */
	commit(t);
	char o[256];
	owner_of("c1", o, sizeof o, &g);
	ck_assert_str_eq(o, "-@0");
	ck_assert_uint_eq(g, g1); /* the generation stays: its worker is not fenced by a release */
	ck_assert_int_eq(claim("c1", "n2", 1000, &g), 0);
	/* leaving releases the rest */
	t = wbegin();
	ck_assert_int_eq(store_node_leave(t, "n1"), 0);
	commit(t);
	owner_of("c2", o, sizeof o, NULL);
	ck_assert_str_eq(o, "-@0");
	ck_assert_uint_eq(nodes_now().n, 0);
	ck_assert_int_eq(claim("c2", "n2", 1000, &g), 0);
	ck_assert_uint_gt(g, g2);
}
END_TEST

START_TEST(claimable_lists_free_and_expired_by_status)
{
	const char *ids[] = { "a", "b", "c", "d", "e" };
	for (size_t i = 0; i < 5; i++)
		mkconv(ids[i]);
	set_status("a", STORE_ACTIVE);
	set_status("b", STORE_ACTIVE);
	set_status("c", STORE_SUSPENDED);
	set_status("e", STORE_ACTIVE); /* d stays idle */
	uint64_t g;
	ck_assert_int_eq(claim("a", "n1", 1000, &g), 0);
	ck_assert_int_eq(claim("b", "n1", 5000, &g), 0);
	NOW += 1000; /* a expired, b live, c d e never owned */
	unsigned mask = 1u << STORE_ACTIVE | 1u << STORE_SUSPENDED;
	struct ids_seen l = { "" };
	store_txn *t = rbegin();
	ck_assert_int_eq(store_convs_claimable(t, mask, 0, collect_cid, &l), 0);
	store_txn_abort(t);
	ck_assert_str_eq(l.s, "a,c,e");
	l.s[0] = 0;
	t = wbegin();
	ck_assert_int_eq(store_convs_claimable(t, 0, 0, collect_cid, &l), 0); /* any status */
	ck_assert_str_eq(l.s, "a,c,d,e");
	l.s[0] = 0;
	ck_assert_int_eq(store_convs_claimable(t, mask, 2, collect_cid, &l), 0);
	ck_assert_str_eq(l.s, "a,c");
	ck_assert_int_eq(store_conv_claim(t, "a", "n2", 1000, &g), 0);
	ck_assert_int_eq(store_conv_claim(t, "c", "n2", 1000, &g), 0);
	commit(t);
	l.s[0] = 0;
	t = rbegin();
	ck_assert_int_eq(store_convs_claimable(t, mask, 0, collect_cid, &l), 0);
	ck_assert_str_eq(l.s, "e");
	/* the callback's return stops it and comes back unchanged */
	ck_assert_int_eq(store_convs_claimable(t, mask, 0, stop_id, NULL), 42);
	store_txn_abort(t);
}
END_TEST

START_TEST(delete_forgets_the_owner)
{
	mkconv("c1");
	uint64_t g;
	ck_assert_int_eq(claim("c1", "n1", 60000, &g), 0);
	store_txn *t = wbegin();
	ck_assert_int_eq(store_conv_delete(t, "c1"), 0);
	ck_assert_int_eq(store_conv_create(t, "c1", mmap0()), 0);
	commit(t);
	char o[256];
	owner_of("c1", o, sizeof o, NULL);
	ck_assert_str_eq(o, "-@0");
	ck_assert_int_eq(claim("c1", "n2", 1000, &g), 0);
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 0); /* claims alone make no node row */
}
END_TEST

START_TEST(node_ops_reject_invalid_args)
{
	mkconv("c1");
	store_txn *t = wbegin();
	uint64_t g = 0;
	struct store_owner o;
	struct ids_seen l = { "" };
	ck_assert_int_eq(store_node_beat(t, "bad id", 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_beat(t, NULL, 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_beat(t, "n1", 0, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_beat(t, "n1", -5, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leave(t, ""), STORE_E_INVAL);
	ck_assert_int_eq(store_nodes_list(t, NULL, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_owner(t, "c1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_owner(t, "nope", &o), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_owner(t, "bad/id", &o), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "nope", "n1", 1000, &g), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_claim(t, "c1", "bad id", 1000, &g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 0, &g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_release(t, "nope", "n1", 1), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_release(t, "c1", "bad id", 1), STORE_E_INVAL);
	ck_assert_int_eq(store_convs_claimable(t, 0, 0, NULL, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leases(t, "bad id", collect_lease, &l), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leases(t, "n1", NULL, NULL), STORE_E_INVAL);
	/* none of them poisoned the transaction */
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 1000, &g), 0);
	commit(t);
	/* the writes need a write transaction; the reads do not */
	t = rbegin();
	ck_assert_int_eq(store_node_beat(t, "n1", 1000, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_node_leave(t, "n1"), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_claim(t, "c1", "n1", 1000, &g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_release(t, "c1", "n1", g), STORE_E_INVAL);
	ck_assert_int_eq(store_conv_owner(t, "c1", &o), 0);
	ck_assert_int_eq(store_node_leases(t, "n1", collect_lease, &l), 0);
	ck_assert_uint_gt(strlen(l.s), 0);
	store_txn_abort(t);
}
END_TEST

/* A wakeup for another node is part of the write transaction; on every
 * backend it takes valid ids in a write transaction (what it reaches is a
 * backend's business: store_pg's suite). */
START_TEST(notify_validates_and_keeps_the_txn_usable)
{
	mkconv("c1");
	store_txn *t = wbegin();
	ck_assert_int_eq(store_notify(t, "n1", "c1"), 0);
	ck_assert_int_eq(store_notify(t, "n1", "not-a-conv-yet"), 0);
	ck_assert_int_eq(store_notify(t, "bad id", "c1"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify(t, "n1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_notify(NULL, "n1", "c1"), STORE_E_INVAL);
	/* messages: printable, 1..STORE_NOTIFY_MSG_MAX bytes, with a space */
	char big[STORE_NOTIFY_MSG_MAX + 2];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = 0;
	big[1] = ' ';
	ck_assert_int_eq(store_notify_msg(t, "n1", "ask 1 n2 kill c1 9"), 0);
	ck_assert_int_eq(store_notify_msg(t, "n1", big), STORE_E_INVAL);
	big[STORE_NOTIFY_MSG_MAX] = 0;
	ck_assert_int_eq(store_notify_msg(t, "n1", big), 0);
	ck_assert_int_eq(store_notify_msg(t, "n1", "no-space"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", ""), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", "tab\there x"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", "caf\xc3\xa9 x"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "bad id", "a b"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(NULL, "n1", "a b"), STORE_E_INVAL);
	struct store_event_in e = ev("user_msg", mint(1), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), 0);
	commit(t);
	ck_assert_uint_eq(latest("c1"), 1);
	t = rbegin();
	ck_assert_int_eq(store_notify(t, "n1", "c1"), STORE_E_INVAL);
	ck_assert_int_eq(store_notify_msg(t, "n1", "a b"), STORE_E_INVAL);
	store_txn_abort(t);
	ck_assert_int_eq(store_notified(S, NULL, NULL), STORE_E_INVAL);
}
END_TEST

/* A node's claim of due deadlines: what is due, earliest first, at most
 * limit; fired ones (resolved) are gone for the next claim. */
START_TEST(expiries_claim_due_in_order_with_limit)
{
	mkconv("c1");
	mkconv("c2");
	const char *ids[] = { "t3", "t1", "t2", "t4" };
	for (int i = 0; i < 4; i++)
		mktc(i % 2 ? "c2" : "c1", ids[i]);
	schedule("t3", T0 + 20);
	schedule("t1", T0 + 10);
	schedule("t2", T0 + 20);
	schedule("t4", T0 + 99);
	for (int write = 0; write < 2; write++) {
		memset(&L, 0, sizeof L);
		store_txn *t = write ? wbegin() : rbegin();
		ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 0, collect_exp, &L), 0);
		EXPECT_LIST("t1", "t2", "t3");
		ck_assert_int_eq(L.deadline[0], T0 + 10);
		ck_assert_str_eq(L.conv[0], "c2");
		memset(&L, 0, sizeof L);
		ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 2, collect_exp, &L), 0);
		EXPECT_LIST("t1", "t2");
		memset(&L, 0, sizeof L);
		ck_assert_int_eq(store_expiries_claim(t, T0 + 9, 0, collect_exp, &L), 0);
		ck_assert_uint_eq(L.n, 0);
		store_txn_abort(t);
	}
	store_txn *t = wbegin();
	memset(&L, 0, sizeof L);
	ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 1, collect_exp, &L), 0);
	EXPECT_LIST("t1");
	ck_assert_int_eq(store_tool_call_resolve(t, "t1", STORE_TC_EXPIRED, raw(NULL, 0), NULL), 0);
	memset(&L, 0, sizeof L);
	L.stop_after = 1;
	L.stop_ret = 9; /* the callback's return comes back unchanged, even with a limit */
	ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 5, collect_exp, &L), 9);
	EXPECT_LIST("t2");
	ck_assert_int_eq(store_expiries_claim(t, T0 + 20, 0, NULL, NULL), STORE_E_INVAL);
	commit(t);
}
END_TEST

/* Nodes and leases survive a reopen. */
START_TEST(nodes_and_leases_are_durable)
{
	mkconv("c1");
	uint64_t g;
	beat("n1", 1000);
	ck_assert_int_eq(claim("c1", "n1", 1000, &g), 0);
	reopen_store();
	struct nodes_seen ns = nodes_now();
	ck_assert_uint_eq(ns.n, 1);
	ck_assert_uint_eq(ns.v[0].leases, 1);
	char o[256], want[64];
	uint64_t g2;
	owner_of("c1", o, sizeof o, &g2);
	snprintf(want, sizeof want, "n1@%lld", (long long)(T0 + 1000));
	ck_assert_str_eq(o, want);
	ck_assert_uint_eq(g2, g);
}
END_TEST

void conf_nodes_add(TCase *tc)
{
	tcase_add_test(tc, node_beat_creates_refreshes_and_lists);
	tcase_add_test(tc, claim_takes_a_new_generation_and_fences);
	tcase_add_test(tc, claim_of_a_live_lease_conflicts_and_writes_nothing);
	tcase_add_test(tc, expired_lease_moves_and_the_stale_owner_is_fenced);
	tcase_add_test(tc, beat_renews_held_leases);
	tcase_add_test(tc, release_and_leave_free_leases_at_once);
	tcase_add_test(tc, claimable_lists_free_and_expired_by_status);
	tcase_add_test(tc, delete_forgets_the_owner);
	tcase_add_test(tc, node_ops_reject_invalid_args);
	tcase_add_test(tc, nodes_and_leases_are_durable);
	tcase_add_test(tc, notify_validates_and_keeps_the_txn_usable);
	tcase_add_test(tc, expiries_claim_due_in_order_with_limit);
}
