/* The canonical form and digest of a JSON value (common/digest.c): RFC
 * 8785's own examples (numbers, strings, member order by UTF-16 code
 * units), and the SHA-256 of the form. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "tests/suites.h"

static void canon_is(const char *json, const char *want)
{
	json_error_t je;
	json_t *v = json_loads(json, JSON_DECODE_ANY, &je);
	ck_assert_msg(v != NULL, "%s: %s", json, je.text);
	size_t n;
	char *got = digest_canonical(v, &n);
	ck_assert_ptr_nonnull(got);
	ck_assert_str_eq(got, want);
	ck_assert_uint_eq(n, strlen(want));
	free(got);
	json_decref(v);
}

START_TEST(rfc8785_example)
{
	canon_is("{\"numbers\":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"
		 "\"string\":\"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\","
		 "\"literals\":[null,true,false]}",
		 "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
		 "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");
}
END_TEST

START_TEST(members_sort_by_utf16_code_units)
{
	/* RFC 8785 3.2.3: the emoji (a surrogate pair) sorts before U+FB33 */
	canon_is("{\"\\u20ac\":\"Euro Sign\",\"\\r\":\"Carriage Return\",\"\\ufb33\":\"Hebrew Letter Dalet With Dagesh\","
		 "\"1\":\"One\",\"\\ud83d\\ude00\":\"Emoji: Grinning Face\",\"\\u0080\":\"Control\","
		 "\"\\u00f6\":\"Latin Small Letter O With Diaeresis\"}",
		 "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\xc2\x80\":\"Control\","
		 "\"\xc3\xb6\":\"Latin Small Letter O With Diaeresis\",\"\xe2\x82\xac\":\"Euro Sign\","
		 "\"\xf0\x9f\x98\x80\":\"Emoji: Grinning Face\",\"\xef\xac\xb3\":\"Hebrew Letter Dalet With Dagesh\"}");
	canon_is("{\"b\":1,\"a\":{\"d\":[],\"c\":{}},\"aa\":0,\"\":2}", "{\"\":2,\"a\":{\"c\":{},\"d\":[]},\"aa\":0,\"b\":1}");
}
END_TEST

START_TEST(numbers_as_ecmascript_writes_them)
{
	canon_is("[0,-0.0,1,-1,0.1,100,1e20,1e21,1.23456789012345678901e20,1e-6,1e-7,1.5e-7,-12.25,"
		 "9007199254740993,5e-324,1.7976931348623157e308,2.5,0.30000000000000004]",
		 "[0,0,1,-1,0.1,100,100000000000000000000,1e+21,123456789012345680000,0.000001,1e-7,1.5e-7,-12.25,"
		 "9007199254740992,5e-324,1.7976931348623157e+308,2.5,0.30000000000000004]");
	canon_is("\"tab\\there\\u007f\\u001f\"", "\"tab\\there\x7f\\u001f\"");
}
END_TEST

START_TEST(digest_is_the_sha256_of_the_form)
{
	char hex[DIGEST_HEX_LEN + 1];
	json_t *v = json_pack("{si}", "amount", 5);
	ck_assert_int_eq(digest_json(v, hex), 0);
	/* sha256 of {"amount":5} */
	ck_assert_str_eq(hex, "7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf");
	json_decref(v);
	v = json_object();
	ck_assert_int_eq(digest_json(v, hex), 0);
	/* sha256 of {} */
	ck_assert_str_eq(hex, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
	json_decref(v);
	ck_assert_int_eq(digest_json(NULL, hex), -22);
}
END_TEST

Suite *make_digest_suite(void)
{
	Suite *s = suite_create("digest");
	TCase *tc = tcase_create("digest");
	tcase_add_test(tc, rfc8785_example);
	tcase_add_test(tc, members_sort_by_utf16_code_units);
	tcase_add_test(tc, numbers_as_ecmascript_writes_them);
	tcase_add_test(tc, digest_is_the_sha256_of_the_form);
	suite_add_tcase(s, tc);
	return s;
}
