/* The in-place msgpack reader: every truncation and type mismatch fails. */
#include <check.h>
#include <msgpack.h>
#include <string.h>

#include "common/mp.h"
#include "tests/suites.h"

static msgpack_sbuffer sb;
static msgpack_packer pk;

static void setup(void)
{
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
}

static void teardown(void)
{
	msgpack_sbuffer_destroy(&sb);
}

START_TEST(roundtrip_scalars)
{
	msgpack_pack_array(&pk, 6);
	msgpack_pack_uint64(&pk, UINT64_MAX);
	msgpack_pack_int64(&pk, -5);
	msgpack_pack_double(&pk, 1.5);
	msgpack_pack_str_with_body(&pk, "hello", 5);
	msgpack_pack_nil(&pk);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "k", 1);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_true(&pk);
	msgpack_pack_bin_with_body(&pk, "\0\1", 2);

	struct mp m;
	uint32_t n;
	uint64_t u;
	int64_t i;
	double d;
	const char *s;
	size_t len;
	const void *start;
	mp_init(&m, sb.data, sb.size);
	ck_assert_int_eq(mp_array(&m, &n), 0);
	ck_assert_uint_eq(n, 6);
	ck_assert_int_eq(mp_uint(&m, &u), 0);
	ck_assert_uint_eq(u, UINT64_MAX);
	ck_assert_int_eq(mp_uint(&m, &u), -1); /* -5 is not unsigned, cursor kept */
	ck_assert_int_eq(mp_int(&m, &i), 0);
	ck_assert_int_eq(i, -5);
	ck_assert_int_eq(mp_double(&m, &d), 0);
	ck_assert(d == 1.5);
	ck_assert_int_eq(mp_str(&m, &s, &len), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert_int_eq(memcmp(s, "hello", 5), 0);
	ck_assert_int_eq(mp_nil(&m), 0);
	ck_assert_int_eq(mp_skip(&m, &start, &len), 0);
	ck_assert_ptr_eq(m.p, m.end);
	ck_assert_int_eq(mp_valid_one(sb.data, sb.size), 1);
}
END_TEST

START_TEST(every_truncation_fails)
{
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "text", 4);
	msgpack_pack_str_with_body(&pk, "a longer string value here", 26);
	msgpack_pack_str_with_body(&pk, "n", 1);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint32(&pk, 70000);
	msgpack_pack_double(&pk, 2.25);
	msgpack_pack_int8(&pk, -100);
	for (size_t cut = 0; cut < sb.size; cut++)
		ck_assert_msg(!mp_valid_one(sb.data, cut), "prefix of %zu bytes accepted", cut);
	ck_assert(mp_valid_one(sb.data, sb.size));
	/* Trailing garbage is not one object either. */
	msgpack_pack_nil(&pk);
	ck_assert(!mp_valid_one(sb.data, sb.size));
}
END_TEST

START_TEST(lying_counts_fail)
{
	/* An array32 claiming four billion elements in five bytes. */
	const unsigned char huge[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01 };
	ck_assert(!mp_valid_one(huge, sizeof huge));
	/* A str32 claiming more bytes than exist. */
	const unsigned char str[] = { 0xdb, 0x00, 0x00, 0x10, 0x00, 'a' };
	ck_assert(!mp_valid_one(str, sizeof str));
	/* 0xc1 is never used. */
	const unsigned char bad[] = { 0xc1 };
	ck_assert(!mp_valid_one(bad, 1));
	/* Deep nesting costs no stack. */
	static unsigned char deep[100001];
	memset(deep, 0x91, 100000);
	deep[100000] = 0xc0;
	ck_assert(mp_valid_one(deep, sizeof deep));
	ck_assert(!mp_valid_one(deep, sizeof deep - 1));
}
END_TEST

Suite *make_mp_suite(void)
{
	Suite *s = suite_create("mp");
	TCase *tc = tcase_create("reader");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, roundtrip_scalars);
	tcase_add_test(tc, every_truncation_fails);
	tcase_add_test(tc, lying_counts_fail);
	suite_add_tcase(s, tc);
	return s;
}
