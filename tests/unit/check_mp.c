/* The in-place msgpack reader: every truncation and type mismatch fails. */
#include <check.h>
#include <errno.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonmp.h"
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
	ck_assert_int_eq(mp_uint(&m, &u), -EBADMSG); /* -5 is not unsigned, cursor kept */
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

/* jsonmp_dumps writes a flat object of plain strings, integers, booleans
 * and null itself: byte for byte what jansson writes, with and without the
 * newline; anything else (escapes, UTF-8, nesting, reals, other flags) is
 * jansson's own output. */
static void dumps_as_jansson(const char *text, size_t flags)
{
	json_error_t je;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
	ck_assert_msg(v != NULL, "%s: %s", text, je.text);
	char *want = json_dumps(v, flags);
	size_t len = 0;
	if (!want) { /* a bare string without JSON_ENCODE_ANY: refused by both */
		ck_assert(jsonmp_dumps(v, flags, 1, &len) == NULL);
		json_decref(v);
		return;
	}
	char *got = jsonmp_dumps(v, flags, 0, &len);
	ck_assert_msg(got && !strcmp(got, want), "%s: got %s, want %s", text, got ? got : "NULL", want);
	ck_assert_uint_eq(len, strlen(want));
	free(got);
	got = jsonmp_dumps(v, flags, 1, &len);
	ck_assert(got != NULL);
	ck_assert_uint_eq(len, strlen(want) + 1);
	ck_assert(!strncmp(got, want, strlen(want)) && got[len - 1] == '\n' && got[len] == 0);
	free(got);
	free(want);
	json_decref(v);
}

START_TEST(flat_dumps_match_jansson)
{
	static const char *const texts[] = {
		"{}",
		"{\"seq\":1,\"ok\":true}",
		"{\"seq\":9223372036854775807,\"id\":-9223372036854775808,\"ok\":false,\"x\":null}",
		"{\"seq\":0,\"duplicate\":true,\"id\":\"req-7 ~!#$%&'()*+,-./:;<=>?@[]^_`{|}\",\"ok\":true}",
		"{\"status\":\"paused\",\"seq\":3,\"ok\":true,\"empty\":\"\"}",
		"{\"b\":1,\"a\":2,\"c\":3}",                      /* insertion order, not sorted */
		"{\"id\":\"quote \\\" in it\",\"ok\":true}",       /* escapes: jansson's */
		"{\"id\":\"back\\\\slash\",\"ok\":true}",
		"{\"id\":\"tab\\there\",\"ok\":true}",
		"{\"id\":\"\\u00e9t\\u00e9 \\u2603\",\"ok\":true}",  /* UTF-8 */
		"{\"id\":\"\\u007f\",\"ok\":true}",
		"{\"id\":\"sl/ash\",\"ok\":true}",
		"{\"k\\u00e9y\":1}",
		"{\"seqs\":[1,2,3],\"ok\":true}",                 /* nested: jansson's */
		"{\"o\":{},\"ok\":true}",
		"{\"r\":1.5,\"ok\":true}",
		"[1,2]",
		"\"top\"",
	};
	for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
		dumps_as_jansson(texts[i], JSON_COMPACT);
		dumps_as_jansson(texts[i], JSON_COMPACT | JSON_SORT_KEYS);
		dumps_as_jansson(texts[i], 0);
	}
	/* Every byte as a string value and as a key. */
	for (int c = 1; c < 256; c++) {
		char raw[2] = { (char)c, 0 };
		json_t *o = json_object();
		json_object_set_new(o, "v", json_stringn_nocheck(raw, 1));
		json_object_set_new(o, raw, json_integer(c));
		char *want = json_dumps(o, JSON_COMPACT), *got = jsonmp_dumps(o, JSON_COMPACT, 0, NULL);
		ck_assert_msg((!want && !got) || (want && got && !strcmp(got, want)), "byte %d: got %s, want %s", c,
			      got ? got : "NULL", want ? want : "NULL");
		free(want);
		free(got);
		json_decref(o);
	}
}
END_TEST

/* jsonmp_loadb reads a flat object itself: for any text, it must give what
 * json_loadb gives (the same values in the same key order), or fail where
 * json_loadb fails. Random texts from JSON's pieces, many of them flat
 * objects, some only nearly so. */
static void loads_as_jansson(const char *text, size_t n, size_t flags)
{
	json_error_t je;
	json_t *want = json_loadb(text, n, flags, &je), *got = NULL;
	int e = jsonmp_loadb(text, n, flags, &got, NULL);
	if (!want) {
		ck_assert_msg(e == -EINVAL && !got, "%.*s: jansson refuses it (%s), jsonmp_loadb returned %d", (int)n,
			      text, je.text, e);
		return;
	}
	ck_assert_msg(e == 0 && got, "%.*s: jansson reads it, jsonmp_loadb returned %d", (int)n, text, e);
	char *a = json_dumps(want, JSON_COMPACT | JSON_ENCODE_ANY), *b = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
	ck_assert_msg(json_equal(want, got) && a && b && !strcmp(a, b), "%.*s: jansson %s, jsonmp_loadb %s", (int)n, text,
		      a, b);
	free(a);
	free(b);
	json_decref(want);
	json_decref(got);
}

START_TEST(flat_loads_match_jansson)
{
	static const char *const pieces[] = {
		"{", "}", "\"", ":", ",", " ", "\t", "\n", "\r", "\"op\"", "\"send\"", "\"k\"", "\"\"", "a", "0", "1", "9",
		"123456789", "999999999999999999", "1000000000000000000", "-", ".", "e", "E", "+", "true", "false",
		"null", "tru", "nul", "\\", "\\\"", "\\u00e9", "\xc3\xa9", "\xff", "\x01", "\x7f", "[", "]", "/",
		"\"conversation\":\"s-1\"", "\"content\":\"hello\"", "\"id\":7", "\"x\":null", "\"op\":\"ping\"",
	};
	const size_t np = sizeof pieces / sizeof *pieces;
	static const size_t flags[] = { JSON_REJECT_DUPLICATES, 0, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
					JSON_DISABLE_EOF_CHECK, JSON_ALLOW_NUL };
	uint64_t r = 0x9e3779b97f4a7c15ull;
	char text[512];
	for (int round = 0; round < 200000; round++) {
		size_t n = 0;
		int flat = round % 2;
		int k = (int)(r >> 59) + 1;
		if (flat) /* a flat object, its pieces drawn at random, then maybe one byte changed */
			n += (size_t)snprintf(text + n, sizeof text - n, "{");
		for (int i = 0; i < k; i++) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			const char *pc = pieces[(r >> 33) % np];
			if (flat) {
				static const char *const vals[] = { "\"v\"", "0", "12", "true", "false", "null", "\"\"",
								    "999999999999999999", "\" sp ace ~\"" };
				static const char *const keys[] = { "\"op\"", "\"id\"", "\"k\"", "\"\"", "\"a b\"" };
				n += (size_t)snprintf(text + n, sizeof text - n, "%s%s%s:%s%s", i ? "," : "",
						      (r >> 20) % 4 ? "" : " ", keys[(r >> 24) % 5], (r >> 28) % 3 ? "" : " ",
						      vals[(r >> 40) % 9]);
			} else {
				n += (size_t)snprintf(text + n, sizeof text - n, "%s", pc);
			}
		}
		if (flat) {
			n += (size_t)snprintf(text + n, sizeof text - n, "}");
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			if ((r >> 60) < 6) { /* one byte replaced or cut */
				size_t at = (size_t)((r >> 20) % n);
				const char *pc = pieces[(r >> 33) % np];
				if ((r >> 56) & 1)
					n = at;
				else
					text[at] = pc[0];
			}
		}
		loads_as_jansson(text, n, flags[round % 5]);
	}
	/* The edges by hand: numbers jansson refuses or reads otherwise,
	 * words running on, commas and colons missing or extra, keys twice. */
	static const char *const edges[] = {
		"{\"a\":01}", "{\"a\":00}", "{\"a\":0}", "{\"a\":-0}", "{\"a\":-1}", "{\"a\":1e5}", "{\"a\":1E5}",
		"{\"a\":1.0}", "{\"a\":1.}", "{\"a\":truex}", "{\"a\":true1}", "{\"a\":nul}", "{\"a\":1}x",
		"{\"a\":1,}", "{\"a\":1 \"b\":2}", "{\"a\" 1}", "{\"a\":1}{", "{\"a\":1,\"a\":2}",
		"{\"\":1,\"\":2}", "{,}", "{ }", " {\"a\" : \"b\" , \"c\" : null } \r\n", "{\"a\":\"b\"\"c\"}",
		"{\"a\":999999999999999999}", "{\"a\":9999999999999999999}", "{\"a\":9223372036854775808}",
		"{\"a\":\"\t\"}", "{\"a\t\":1}", "{\"a\":{}}", "{\"a\":[]}", "{\"a\":1", "{\"a\":", "{\"a\"", "{",
	};
	for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
		for (size_t f = 0; f < sizeof flags / sizeof *flags; f++)
			loads_as_jansson(edges[i], strlen(edges[i]), flags[f]);
	/* A NUL inside the text, and the empty text. */
	loads_as_jansson("{\"a\":\"b\0c\"}", 11, JSON_ALLOW_NUL);
	loads_as_jansson("{\"a\":1}\0", 8, 0);
	loads_as_jansson("", 0, 0);
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
	TCase *td = tcase_create("jsonmp_dumps");
	tcase_add_test(td, flat_dumps_match_jansson);
	tcase_add_test(td, flat_loads_match_jansson);
	tcase_set_timeout(td, 60);
	suite_add_tcase(s, td);
	return s;
}
