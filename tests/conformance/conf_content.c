/*
 * Content that must be exactly one msgpack object, any object round-tripping;
 * the error texts and the status names (case "content").
 */
#include <check.h>
#include <errno.h>
#include <msgpack.h>
#include <string.h>

#include "tests/conformance/conformance.h"

START_TEST(content_must_be_one_msgpack_object)
{
	mkconv("c1");
	append_n("c1", 1, "user_msg");
	mktc("c1", "tc");
	store_txn *t = wbegin();
	for (size_t i = 0; i < NBAD; i++) {
		store_bytes b = bad_blobs[i].b;
		const char *w = bad_blobs[i].what;
		struct store_event_in e = ev("user_msg", b, NULL);
		struct store_conv_patch p = { .set = STORE_SET_SETTINGS, .settings = b };
		struct store_tool_call_in in = tcin("tc2", "n", STORE_EXEC_SERVER, b, raw(NULL, 0));
		uint64_t seq;
		ck_assert_msg(store_event_append(t, "c1", &e, &seq, NULL) == STORE_E_INVAL, "event %s", w);
		ck_assert_msg(store_summary_put(t, "c1", 1, 1, b, NULL) == STORE_E_INVAL, "summary %s", w);
		ck_assert_msg(store_conv_create(t, "c2", b) == STORE_E_INVAL, "settings %s", w);
		ck_assert_msg(store_conv_put(t, "c1", &p) == STORE_E_INVAL, "put settings %s", w);
		ck_assert_msg(store_conv_put_fsm(t, "c1", b) == STORE_E_INVAL, "fsm %s", w);
		ck_assert_msg(store_tool_call_upsert(t, "c1", &in) == STORE_E_INVAL, "args %s", w);
		in = tcin("tc2", "n", STORE_EXEC_SERVER, mint(1), b);
		ck_assert_msg(store_tool_call_upsert(t, "c1", &in) == STORE_E_INVAL, "prompt %s", w);
		ck_assert_msg(store_tool_call_resolve(t, "tc", STORE_TC_RESOLVED, b, NULL) == STORE_E_INVAL,
			      "result %s", w);
	}
	/* required content may not be empty */
	struct store_event_in e = ev("user_msg", raw(NULL, 0), NULL);
	uint64_t seq;
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	e = ev("user_msg", raw(two_objs, 0), NULL);
	ck_assert_int_eq(store_event_append(t, "c1", &e, &seq, NULL), STORE_E_INVAL);
	ck_assert_int_eq(store_summary_put(t, "c1", 1, 1, raw(NULL, 0), NULL), STORE_E_INVAL);
	commit(t);
	/* nothing was written */
	ck_assert_uint_eq(latest("c1"), 1);
	ck_assert_int_eq(list_convs(-1, NULL, 0, NULL), 0);
	EXPECT_IDS("c1");
	t = rbegin();
	struct store_summary sum;
	struct store_conv c;
	ck_assert_int_eq(store_summary_latest(t, "c1", &sum), STORE_E_NOTFOUND);
	ck_assert_int_eq(store_conv_get(t, "c1", &c), 0);
	ck_assert(bytes_eq_b(c.settings, mmap0()));
	ck_assert_uint_eq(c.fsm_state.len, 0);
	store_txn_abort(t);
	ck_assert_int_eq(list_tcs("c1", 0), 0);
	EXPECT_LIST("tc");
	ck_assert_int_eq(L.status[0], STORE_TC_PENDING);
}
END_TEST

START_TEST(content_any_object_round_trips)
{
	mkconv("c1");
	/* nested, binary and large objects are opaque and come back byte-exact */
	msgpack_packer *pk = B();
	msgpack_pack_array(pk, 3);
	msgpack_pack_map(pk, 1);
	msgpack_pack_str_with_body(pk, "deep", 4);
	for (int i = 0; i < 50; i++)
		msgpack_pack_array(pk, 1);
	msgpack_pack_nil(pk);
	msgpack_pack_bin_with_body(pk, "\0\1\2\0", 4);
	msgpack_pack_double(pk, -1.5);
	store_bytes nested = built();
	static char big[1 << 20];
	memset(big, 'b', sizeof big);
	pk = B();
	msgpack_pack_bin_with_body(pk, big, sizeof big);
	store_bytes large = built();
	store_txn *t = wbegin();
	struct store_event_in in[3] = { ev("a", nested, NULL), ev("b", large, NULL), ev("c", mint(0), NULL) };
	uint64_t seqs[3];
	ck_assert_int_eq(store_events_append(t, "c1", in, 3, seqs, NULL), 0);
	commit(t);
	struct ptrs ps = { 0 };
	struct store_range r = { 0 };
	t = rbegin();
	ck_assert_int_eq(store_events_stream(t, "c1", &r, keep_ptr, &ps), 0);
	ck_assert_uint_eq(ps.n, 3);
	ck_assert(bytes_eq_b(ps.content[0], nested));
	ck_assert(bytes_eq_b(ps.content[1], large));
	ck_assert(bytes_eq_b(ps.content[2], mint(0)));
	store_txn_abort(t);
}
END_TEST

/* ---- errors and names ------------------------------------------------------ */

START_TEST(strerror_distinct_per_code)
{
	const int codes[] = { 0, STORE_E_NOTFOUND, STORE_E_STALE, STORE_E_FENCED, STORE_E_CONFLICT,
			      STORE_E_FULL, STORE_E_CORRUPT, STORE_E_INVAL, -ENOMEM, -EIO, -ENOSPC,
			      -EBUSY, -EAGAIN, -ENOENT };
	const size_t n = sizeof codes / sizeof codes[0];
	for (size_t i = 0; i < n; i++) {
		const char *a = store_strerror(codes[i]);
		ck_assert_ptr_nonnull(a);
		ck_assert_uint_gt(strlen(a), 0);
		ck_assert_str_eq(a, store_strerror(codes[i])); /* stable */
		for (size_t j = 0; j < i; j++)
			ck_assert_msg(strcmp(a, store_strerror(codes[j])) != 0, "%d and %d both say \"%s\"",
				      codes[i], codes[j], a);
	}
	ck_assert_int_eq(STORE_E_INVAL, -EINVAL);
	ck_assert_ptr_nonnull(store_strerror(-99999));
	ck_assert_ptr_nonnull(store_strerror(12345));
}
END_TEST

START_TEST(status_names_round_trip)
{
	const char *tc[] = { "pending", "resolved", "errored", "expired", "cancelled", "unknown" };
	const char *conv[] = { "idle", "active", "suspended", "ended", "paused" };
	ck_assert_str_eq(store_status_name(STORE_PAUSED), "paused");
	ck_assert_int_eq(store_status_parse("paused", 6), STORE_PAUSED);
	ck_assert_ptr_null(store_status_name(STORE_STATUS_MAX + 1));
	for (int i = 0; i < 4; i++) {
		ck_assert_str_eq(store_status_name(i), conv[i]);
		ck_assert_int_eq(store_status_parse(conv[i], strlen(conv[i])), i);
	}
	for (int i = 0; i < 6; i++) {
		ck_assert_str_eq(store_tc_status_name(i), tc[i]);
		ck_assert_int_eq(store_tc_status_parse(tc[i], strlen(tc[i])), i);
	}
	ck_assert_int_eq(STORE_IDLE, 0);
	ck_assert_int_eq(STORE_ENDED, 3);
	ck_assert_int_eq(STORE_TC_PENDING, 0);
	ck_assert_int_eq(STORE_TC_EXPIRED, 3);
	ck_assert_ptr_null(store_status_name(-1));
	ck_assert_int_eq(STORE_TC_CANCELLED, 4);
	ck_assert_int_eq(STORE_TC_UNKNOWN, 5);
	ck_assert_ptr_null(store_tc_status_name(6));
	ck_assert_ptr_null(store_tc_status_name(-1));
	ck_assert_int_eq(store_status_parse("IDLE", 4), -1);
	ck_assert_int_eq(store_status_parse("idl", 3), -1);
	ck_assert_int_eq(store_status_parse("idlex", 4), 0); /* only len bytes */
	ck_assert_int_eq(store_status_parse("idle", 5), -1);
	ck_assert_int_eq(store_status_parse("pending", 7), -1);
	ck_assert_int_eq(store_tc_status_parse("idle", 4), -1);
	ck_assert_int_eq(store_tc_status_parse("", 0), -1);
}
END_TEST

void conf_content_add(TCase *tc)
{
	tcase_add_test(tc, content_must_be_one_msgpack_object);
	tcase_add_test(tc, content_any_object_round_trips);
	tcase_add_test(tc, strerror_distinct_per_code);
	tcase_add_test(tc, status_names_round_trip);
}
