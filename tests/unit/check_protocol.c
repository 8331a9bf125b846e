/* The model and tool process protocols: what a model or a tool may print and
 * what each parser makes of it, bad output above all. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/protocol.h"
#include "tests/suites.h"

#define S(lit) lit, sizeof(lit) - 1

static double slow(void)
{
	const char *s = getenv("AGENTD_TEST_SLOW");
	double m = s ? atof(s) : 1.0;
	return m > 0 ? m : 1.0;
}

/* ------------------------------------------------------------- model lines */

START_TEST(line_blank_and_delta)
{
	char err[256], *d = NULL;
	struct model_reply f = { 0 };
	ck_assert_int_eq(model_line_parse(S(""), &d, &f, err, sizeof err), 0);
	ck_assert_int_eq(model_line_parse(S(" \t\r"), &d, &f, err, sizeof err), 0);
	ck_assert_int_eq(model_line_parse(NULL, 0, &d, &f, err, sizeof err), 0);
	ck_assert_ptr_null(d);

	ck_assert_int_eq(model_line_parse(S("{\"delta\":\"Hel\"}"), &d, &f, err, sizeof err), 1);
	ck_assert_str_eq(d, "Hel");
	free(d);
	ck_assert_int_eq(model_line_parse(S(" {\"delta\":\"\\u00e9\\n\", \"extra\":[1]}\r"), &d, &f, err, sizeof err), 1);
	ck_assert_str_eq(d, "\xc3\xa9\n");
	free(d);
	ck_assert_int_eq(model_line_parse(S("{\"delta\":\"\"}"), &d, NULL, err, sizeof err), 1);
	ck_assert_str_eq(d, "");
	free(d);
	/* delta may be NULL: validated, not returned. */
	ck_assert_int_eq(model_line_parse(S("{\"delta\":\"x\"}"), NULL, NULL, NULL, 0), 1);
	ck_assert_ptr_null(f.text); /* a delta never touches *final */
}
END_TEST

START_TEST(line_final_full)
{
	char err[256];
	char *d = (char *)1;
	struct model_reply f = { 0 };
	const char *line = "{\"text\":\"Looking.\",\"tool_calls\":["
	                   "{\"id\":\"call_1\",\"name\":\"weather\",\"args\":{\"city\":\"Paris\"}},"
	                   "{\"name\":\"approve\"}],"
	                   "\"usage\":{\"input_tokens\":120,\"output_tokens\":7,\"cost\":0.0015}}";
	ck_assert_int_eq(model_line_parse(line, strlen(line), &d, &f, err, sizeof err), 2);
	ck_assert_ptr_eq(d, (char *)1); /* a final never touches *delta */
	ck_assert_str_eq(f.text, "Looking.");
	ck_assert_uint_eq(f.ncalls, 2);
	ck_assert_str_eq(f.calls[0].id, "call_1");
	ck_assert_str_eq(f.calls[0].name, "weather");
	ck_assert(json_is_object(f.calls[0].args));
	ck_assert_str_eq(json_string_value(json_object_get(f.calls[0].args, "city")), "Paris");
	ck_assert_ptr_null(f.calls[1].id);
	ck_assert_str_eq(f.calls[1].name, "approve");
	ck_assert(json_is_object(f.calls[1].args) && json_object_size(f.calls[1].args) == 0);
	ck_assert_uint_eq(f.input_tokens, 120);
	ck_assert_uint_eq(f.output_tokens, 7);
	ck_assert_double_eq_tol(f.cost, 0.0015, 1e-12);
	model_reply_free(&f);
	ck_assert_ptr_null(f.text);
	ck_assert_uint_eq(f.ncalls, 0);
	model_reply_free(&f);
	model_reply_free(NULL);
}
END_TEST

START_TEST(line_final_defaults)
{
	char err[256];
	struct model_reply f;
	/* Text only: no calls, no usage. */
	ck_assert_int_eq(model_line_parse(S("{\"text\":\"hi\"}"), NULL, &f, err, sizeof err), 2);
	ck_assert_str_eq(f.text, "hi");
	ck_assert_uint_eq(f.ncalls, 0);
	ck_assert_ptr_null(f.calls);
	ck_assert(f.input_tokens == 0 && f.output_tokens == 0 && f.cost == 0);
	model_reply_free(&f);
	/* Calls only, and null for absent (OpenAI sends "content": null with tool calls). */
	ck_assert_int_eq(model_line_parse(S("{\"text\":null,\"tool_calls\":[{\"name\":\"t\",\"id\":null,\"args\":null}],"
	                                    "\"usage\":null}"),
	                                  NULL, &f, err, sizeof err),
	                 2);
	ck_assert_str_eq(f.text, "");
	ck_assert_uint_eq(f.ncalls, 1);
	ck_assert_ptr_null(f.calls[0].id);
	ck_assert(json_is_object(f.calls[0].args));
	model_reply_free(&f);
	/* An empty tool_calls array and a partial usage. */
	ck_assert_int_eq(model_line_parse(S("{\"tool_calls\":[],\"usage\":{\"output_tokens\":3,\"cost\":1}}"), NULL, &f,
	                                  err, sizeof err),
	                 2);
	ck_assert_str_eq(f.text, "");
	ck_assert_uint_eq(f.ncalls, 0);
	ck_assert_uint_eq(f.output_tokens, 3);
	ck_assert(f.cost == 1.0);
	model_reply_free(&f);
	/* final may be NULL: validated, not returned. */
	ck_assert_int_eq(model_line_parse(S("{\"text\":\"x\",\"tool_calls\":[{\"name\":\"a\"}]}"), NULL, NULL, err,
	                                  sizeof err),
	                 2);
}
END_TEST

START_TEST(line_ids)
{
	char err[256], id129[140];
	struct model_reply f;
	memset(id129, 'a', 129);
	id129[129] = 0;
	char line[1024];
	snprintf(line, sizeof line,
	         "{\"tool_calls\":[{\"name\":\"a\",\"id\":\"toolu_01.A:b-c\"},{\"name\":\"b\",\"id\":\"has space\"},"
	         "{\"name\":\"c\",\"id\":\"\"},{\"name\":\"d\",\"id\":\"%s\"},{\"name\":\"e\",\"id\":\"toolu_01.A:b-c\"},"
	         "{\"name\":\"f\",\"id\":\"%.128s\"},{\"name\":\"g\",\"id\":\"x/y\"}]}",
	         id129, id129);
	ck_assert_int_eq(model_line_parse(line, strlen(line), NULL, &f, err, sizeof err), 2);
	ck_assert_uint_eq(f.ncalls, 7);
	ck_assert_str_eq(f.calls[0].id, "toolu_01.A:b-c");
	ck_assert_ptr_null(f.calls[1].id); /* invalid characters: the caller mints */
	ck_assert_ptr_null(f.calls[2].id); /* empty */
	ck_assert_ptr_null(f.calls[3].id); /* 129 chars */
	ck_assert_ptr_null(f.calls[4].id); /* repeats call 0 */
	ck_assert_uint_eq(strlen(f.calls[5].id), 128);
	ck_assert_ptr_null(f.calls[6].id);
	ck_assert_str_eq(f.calls[6].name, "g");
	model_reply_free(&f);
}
END_TEST

#define N16 "nnnnnnnnnnnnnnnn"
#define N128 N16 N16 N16 N16 N16 N16 N16 N16
#define N129 N128 "n"

START_TEST(line_errors)
{
	static const struct {
		const char *line;
		const char *msg; /* expected in the message */
	} bad[] = {
		{ "not json", "not JSON" },
		{ "{\"text\":\"a\"} junk", "not JSON" },
		{ "{\"text\":\"a\"", "not JSON" },
		{ "{\"text\":\"a\",\"text\":\"b\"}", "duplicate" },
		{ "{\"text\":\"a\\u0000b\"}", "not JSON" },
		{ "{\"text\":\"\xff\"}", "not JSON" },
		{ "[1,2]", "not a JSON object but an array" },
		{ "\"text\"", "not a JSON object but a string" },
		{ "42", "not a JSON object" },
		{ "null", "not a JSON object" },
		{ "{}", "neither" },
		{ "{\"txt\":\"hello\"}", "neither" },
		{ "{\"usage\":{\"input_tokens\":1}}", "neither" },
		{ "{\"delta\":\"a\",\"text\":\"b\"}", "both" },
		{ "{\"delta\":\"a\",\"tool_calls\":[]}", "both" },
		{ "{\"delta\":5}", "delta must be a string, not an integer" },
		{ "{\"delta\":{}}", "delta must be a string, not an object" },
		{ "{\"text\":5}", "text must be a string" },
		{ "{\"text\":[\"a\"]}", "text must be a string, not an array" },
		{ "{\"tool_calls\":{}}", "tool_calls must be an array" },
		{ "{\"tool_calls\":\"x\"}", "tool_calls must be an array" },
		{ "{\"tool_calls\":[5]}", "tool_calls[0] must be an object" },
		{ "{\"tool_calls\":[{\"args\":{}}]}", "tool_calls[0] has no name" },
		{ "{\"tool_calls\":[{\"name\":null}]}", "tool_calls[0] has no name" },
		{ "{\"tool_calls\":[{\"name\":5}]}", "tool_calls[0].name must be a non-empty string, not an integer" },
		{ "{\"tool_calls\":[{\"name\":\"\"}]}", "tool_calls[0].name must be a non-empty string, not empty" },
		{ "{\"tool_calls\":[{\"name\":\"" N129 "\"}]}", "tool_calls[0].name must be at most 128 bytes" },
		{ "{\"tool_calls\":[{\"name\":\"a\",\"args\":[1]}]}", "tool_calls[0].args must be an object" },
		{ "{\"tool_calls\":[{\"name\":\"a\",\"args\":\"{}\"}]}", "tool_calls[0].args must be an object, not a string" },
		{ "{\"tool_calls\":[{\"name\":\"a\",\"id\":7}]}", "tool_calls[0].id must be a string" },
		{ "{\"tool_calls\":[{\"name\":\"a\",\"id\":\"x\"},{\"name\":\"b\",\"args\":5}]}", "tool_calls[1].args" },
		{ "{\"text\":\"a\",\"usage\":[]}", "usage must be an object" },
		{ "{\"text\":\"a\",\"usage\":{\"input_tokens\":-1}}", "usage.input_tokens must be a non-negative integer" },
		{ "{\"text\":\"a\",\"usage\":{\"output_tokens\":1.5}}", "usage.output_tokens" },
		{ "{\"text\":\"a\",\"usage\":{\"output_tokens\":\"3\"}}", "usage.output_tokens" },
		{ "{\"text\":\"a\",\"usage\":{\"cost\":\"1\"}}", "usage.cost must be a non-negative number" },
		{ "{\"text\":\"a\",\"usage\":{\"cost\":-0.5}}", "usage.cost" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char err[256] = "unset";
		char *d = (char *)1;
		struct model_reply f = { .text = (char *)2 };
		int rc = model_line_parse(bad[i].line, strlen(bad[i].line), &d, &f, err, sizeof err);
		ck_assert_msg(rc == -EINVAL, "[%s] gave %d", bad[i].line, rc);
		ck_assert_msg(strstr(err, bad[i].msg), "[%s]: message [%s] lacks [%s]", bad[i].line, err, bad[i].msg);
		ck_assert_ptr_eq(d, (char *)1);
		ck_assert_ptr_eq(f.text, (char *)2);
	}
	/* 128 bytes is the longest name the store keeps */
	struct model_reply ok = { 0 };
	ck_assert_int_eq(model_line_parse(S("{\"tool_calls\":[{\"name\":\"" N128 "\"}]}"), NULL, &ok, NULL, 0), 2);
	ck_assert_uint_eq(strlen(ok.calls[0].name), 128);
	model_reply_free(&ok);
	/* A short buffer truncates the message, still terminated; none is fine too. */
	char tiny[8];
	ck_assert_int_eq(model_line_parse(S("{\"delta\":5}"), NULL, NULL, tiny, sizeof tiny), -EINVAL);
	ck_assert_uint_eq(strlen(tiny), 7);
	ck_assert_int_eq(model_line_parse(S("{\"delta\":5}"), NULL, NULL, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(line_huge)
{
	char err[256], *d;
	size_t n = (size_t)8 << 20;
	char *line = malloc(n + 32);
	memcpy(line, "{\"delta\":\"", 10);
	memset(line + 10, 'z', n);
	memcpy(line + 10 + n, "\"}", 2);
	ck_assert_int_eq(model_line_parse(line, n + 12, &d, NULL, err, sizeof err), 1);
	ck_assert_uint_eq(strlen(d), n);
	free(d);
	/* Deep nesting is refused, not recursed into without bound. */
	memset(line, '[', n);
	ck_assert_int_eq(model_line_parse(line, n, &d, NULL, err, sizeof err), -EINVAL);
	ck_assert(strstr(err, "not JSON"));
	/* A huge line that is not JSON at its very end. */
	memcpy(line, "{\"delta\":\"", 10);
	memset(line + 10, 'z', n - 10);
	ck_assert_int_eq(model_line_parse(line, n, &d, NULL, err, sizeof err), -EINVAL);
	ck_assert(strstr(err, "not JSON"));
	free(line);
}
END_TEST

/* ----------------------------------------------------------- model outputs */

START_TEST(output_deltas_then_final)
{
	char err[256];
	struct model_reply r;
	const char *out = "{\"delta\":\"Hel\"}\n{\"delta\":\"lo\"}\n\n  \n{\"text\":\"Hello\",\"tool_calls\":"
	                  "[{\"id\":\"c1\",\"name\":\"t\",\"args\":{\"n\":1}}],\"usage\":{\"input_tokens\":5}}\n\n";
	ck_assert_int_eq(model_output_parse(out, strlen(out), &r, err, sizeof err), 0);
	ck_assert_str_eq(r.text, "Hello");
	ck_assert_uint_eq(r.ncalls, 1);
	ck_assert_str_eq(r.calls[0].id, "c1");
	ck_assert_int_eq(json_integer_value(json_object_get(r.calls[0].args, "n")), 1);
	ck_assert_uint_eq(r.input_tokens, 5);
	model_reply_free(&r);
	/* No trailing newline, CRLF lines, a final alone. */
	const char *crlf = "{\"delta\":\"a\"}\r\n{\"text\":\"a\"}";
	ck_assert_int_eq(model_output_parse(crlf, strlen(crlf), &r, err, sizeof err), 0);
	ck_assert_str_eq(r.text, "a");
	model_reply_free(&r);
	ck_assert_int_eq(model_output_parse(S("{\"tool_calls\":[{\"name\":\"x\"}]}\n"), &r, err, sizeof err), 0);
	ck_assert_uint_eq(r.ncalls, 1);
	model_reply_free(&r);
	/* Many deltas. */
	size_t n = 100000, o = 0;
	char *big = malloc(n * 16 + 64);
	for (size_t i = 0; i < n; i++)
		o += (size_t)sprintf(big + o, "{\"delta\":\"%zu\"}\n", i % 10);
	o += (size_t)sprintf(big + o, "{\"text\":\"done\"}\n");
	ck_assert_int_eq(model_output_parse(big, o, &r, err, sizeof err), 0);
	ck_assert_str_eq(r.text, "done");
	model_reply_free(&r);
	free(big);
}
END_TEST

static void output_fails(const char *out, const char *msg)
{
	char err[256] = "";
	struct model_reply r = { .text = (char *)1 };
	ck_assert_msg(model_output_parse(out, strlen(out), &r, err, sizeof err) == -EINVAL, "[%s] accepted", out);
	ck_assert_msg(strstr(err, msg), "[%s]: message [%s] lacks [%s]", out, err, msg);
	ck_assert_ptr_null(r.text); /* zeroed on error, nothing leaked (ASan) */
	ck_assert_uint_eq(r.ncalls, 0);
}

START_TEST(output_errors)
{
	output_fails("", "empty output");
	output_fails("\n\n", "no final object after 2 lines");
	output_fails("{\"delta\":\"a\"}\n{\"delta\":\"b\"}\n", "no final object");
	output_fails("{\"text\":\"a\"}\n{\"delta\":\"b\"}\n", "line 2: output after the final object (line 1)");
	output_fails("{\"delta\":\"x\"}\n{\"text\":\"a\",\"tool_calls\":[{\"name\":\"t\"}]}\n\n{\"text\":\"b\"}",
	             "line 4: output after the final object (line 2)");
	output_fails("{\"text\":\"a\"}\ngarbage\n", "line 2: output after the final");
	output_fails("{\"delta\":\"a\"}\noops\n{\"text\":\"a\"}\n", "line 2: not JSON");
	output_fails("{\"delta\":\"a\"}\n{\"text\":\"a\",\"tool_calls\":[{\"name\":\"t\",\"args\":3}]}\n",
	             "line 2: tool_calls[0].args must be an object");
	output_fails("Sorry, I cannot do that.\n", "line 1: not JSON");
	char err[64];
	ck_assert_int_eq(model_output_parse(S("{\"text\":\"a\"}"), NULL, err, sizeof err), -EINVAL);
}
END_TEST

/* --------------------------------------------------------------- tool output */

static json_t *tool(const char *out, size_t len)
{
	json_t *v = NULL;
	ck_assert_int_eq(tool_output_parse(out, len, &v), 0);
	ck_assert_ptr_nonnull(v);
	return v;
}

static void tool_text_is(const char *out, size_t len, const char *want, size_t want_len)
{
	json_t *v = tool(out, len);
	ck_assert_msg(json_is_string(v), "[%.*s] not taken as text", (int)len, out);
	ck_assert_uint_eq(json_string_length(v), want_len);
	ck_assert_msg(memcmp(json_string_value(v), want, want_len) == 0, "[%.*s] -> [%s]", (int)len, out,
	              json_string_value(v));
	json_decref(v);
}

START_TEST(tool_output_json)
{
	json_t *v = tool(S("{\"temp\":21,\"unit\":\"C\"}\n"));
	ck_assert(json_is_object(v));
	ck_assert_int_eq(json_integer_value(json_object_get(v, "temp")), 21);
	json_decref(v);
	v = tool(S("  [1, 2]\n\n"));
	ck_assert(json_is_array(v) && json_array_size(v) == 2);
	json_decref(v);
	v = tool(S("42\n"));
	ck_assert(json_is_integer(v) && json_integer_value(v) == 42);
	json_decref(v);
	v = tool(S("null"));
	ck_assert(json_is_null(v));
	json_decref(v);
	v = tool(S("\"quoted\"\n"));
	ck_assert_str_eq(json_string_value(v), "quoted");
	json_decref(v);
	/* NUL inside a JSON string survives with its length. */
	v = tool(S("\"a\\u0000b\""));
	ck_assert_uint_eq(json_string_length(v), 3);
	json_decref(v);
}
END_TEST

/* JSON a tool_result cannot hold (its result sits one level in, and the
 * store keeps 65 levels) is kept as the text printed, never lost to null. */
START_TEST(tool_output_too_deep_is_text)
{
	char buf[300];
	for (int n = 63; n <= 66; n++) {
		memset(buf, '[', (size_t)n);
		memset(buf + n, ']', (size_t)n);
		buf[2 * n] = '\n';
		json_t *v = tool(buf, (size_t)(2 * n + 1));
		if (n <= 64) {
			ck_assert_msg(json_is_array(v), "%d levels not kept as JSON", n);
		} else {
			ck_assert_msg(json_is_string(v), "%d levels not kept as text", n);
			ck_assert_uint_eq(json_string_length(v), (size_t)(2 * n));
			ck_assert(memcmp(json_string_value(v), buf, (size_t)(2 * n)) == 0);
		}
		json_decref(v);
	}
}
END_TEST

/* A model's tool call args sit one level into their tool_call event. */
START_TEST(line_args_too_deep)
{
	char line[600], err[300];
	for (int n = 64; n <= 65; n++) {
		/* {"text":"","tool_calls":[{"name":"t","args":{"k":{"k":...{}}}}]}: args is n objects deep */
		size_t o = (size_t)snprintf(line, sizeof line, "{\"text\":\"\",\"tool_calls\":[{\"name\":\"t\",\"args\":");
		for (int i = 1; i < n; i++)
			o += (size_t)snprintf(line + o, sizeof line - o, "{\"k\":");
		o += (size_t)snprintf(line + o, sizeof line - o, "{}");
		for (int i = 1; i < n; i++)
			line[o++] = '}';
		o += (size_t)snprintf(line + o, sizeof line - o, "}]}");
		char *delta = NULL;
		struct model_reply r = { 0 };
		int rc = model_line_parse(line, o, &delta, &r, err, sizeof err);
		if (n == 64) {
			ck_assert_msg(rc == 2, "%d: %s", n, err);
			ck_assert_uint_eq(r.ncalls, 1);
		} else {
			ck_assert_int_eq(rc, -EINVAL);
			ck_assert_str_eq(err, "tool_calls[0].args nest more than 64 levels of objects and arrays");
		}
		model_reply_free(&r);
		free(delta);
	}
}
END_TEST

START_TEST(tool_output_text)
{
	tool_text_is(S("sunny, 21C\n"), S("sunny, 21C"));
	tool_text_is(S("sunny\r\n"), S("sunny"));
	tool_text_is(S("two\nlines\n\n"), S("two\nlines\n"));
	tool_text_is(S("no newline"), S("no newline"));
	tool_text_is(S(""), S(""));
	tool_text_is(NULL, 0, S(""));
	tool_text_is(S("\n"), S(""));
	tool_text_is(S("   \n"), S("   "));
	tool_text_is(S("{\"truncated\":"), S("{\"truncated\":"));
	tool_text_is(S("1 2\n"), S("1 2"));
	tool_text_is(S("true false"), S("true false"));
	tool_text_is(S("a\0b\n"), S("a\0b"));
	tool_text_is(S("caf\xc3\xa9 \xf0\x9f\x98\x80\n"), S("caf\xc3\xa9 \xf0\x9f\x98\x80"));
}
END_TEST

#define FFFD "\xef\xbf\xbd"

START_TEST(tool_output_bad_utf8)
{
	tool_text_is(S("ab\xff" "cd\n"), S("ab" FFFD "cd"));
	tool_text_is(S("\xe2\x82"), S(FFFD));                         /* truncated: one maximal subpart */
	tool_text_is(S("\xe2\x82x"), S(FFFD "x"));
	tool_text_is(S("\xf0\x9f\x98x"), S(FFFD "x"));
	tool_text_is(S("\xc0\xaf"), S(FFFD FFFD));                    /* overlong */
	tool_text_is(S("\xed\xa0\x80"), S(FFFD FFFD FFFD));           /* surrogate */
	tool_text_is(S("\xf4\x90\x80\x80"), S(FFFD FFFD FFFD FFFD));  /* past U+10FFFF */
	tool_text_is(S("\x80\xbf"), S(FFFD FFFD));                    /* lone continuations */
	tool_text_is(S("\xf5"), S(FFFD));
	/* JSON with an invalid byte inside is not JSON: it becomes text. */
	tool_text_is(S("{\"a\":\"\xff\"}\n"), S("{\"a\":\"" FFFD "\"}"));
	/* Every result is valid UTF-8 to jansson: it dumps back. */
	json_t *v = tool(S("\xfe\xfe\xc3"));
	char *s = json_dumps(v, JSON_ENCODE_ANY);
	ck_assert_ptr_nonnull(s);
	free(s);
	json_decref(v);
}
END_TEST

/* Text from outside (a stderr tail cut anywhere): valid UTF-8 kept as is, NUL
 * included, every ill-formed part one U+FFFD. */
START_TEST(json_text_replaces_ill_formed)
{
	static const struct {
		const char *in;
		size_t len;
		const char *want;
		size_t want_len;
	} cases[] = {
		{ S("plain"), S("plain") },
		{ S("bad \xff\xfe bytes"), S("bad " FFFD FFFD " bytes") },
		{ S("\x82\xac\xe2\x82\xac"), S(FFFD FFFD "\xe2\x82\xac") }, /* a tail cut inside a character */
		{ S("\xe2\x82"), S(FFFD) },                                  /* cut at the end */
		{ S("a\0b"), S("a\0b") },
		{ S(""), S("") },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		json_t *v = json_text(cases[i].in, cases[i].len);
		ck_assert_ptr_nonnull(v);
		ck_assert_uint_eq(json_string_length(v), cases[i].want_len);
		ck_assert(memcmp(json_string_value(v), cases[i].want, cases[i].want_len) == 0);
		json_decref(v);
	}
}
END_TEST

START_TEST(tool_output_invalid_args)
{
	json_t *v = (json_t *)1;
	ck_assert_int_eq(tool_output_parse(S("x"), NULL), -EINVAL);
	ck_assert_int_eq(tool_output_parse(NULL, 3, &v), -EINVAL);
	ck_assert_ptr_null(v);
}
END_TEST

START_TEST(tool_output_huge)
{
	size_t n = (size_t)16 << 20;
	char *out = malloc(n);
	memset(out, 'x', n);
	out[n / 2] = (char)0xff;
	json_t *v = tool(out, n);
	ck_assert_uint_eq(json_string_length(v), n + 2);
	json_decref(v);
	free(out);
}
END_TEST

/* ---------------------------------------------------------------- tool input */

START_TEST(tool_input)
{
	json_t *args = json_pack("{s:s}", "city", "Paris");
	char *s = tool_input_json("call_1", "weather", args, "conv-1");
	ck_assert_str_eq(s, "{\"tool_call_id\":\"call_1\",\"name\":\"weather\",\"args\":{\"city\":\"Paris\"},"
	                    "\"conversation\":\"conv-1\"}\n");
	free(s);
	ck_assert_int_eq(args->refcount, 1); /* borrowed, not kept */
	s = tool_input_json("c", "n", NULL, "v");
	ck_assert_str_eq(s, "{\"tool_call_id\":\"c\",\"name\":\"n\",\"args\":{},\"conversation\":\"v\"}\n");
	free(s);
	/* The dispatch's attempt, part of its idempotency key (docs/tools.md). */
	s = tool_input_json_attempt("c", "n", NULL, "v", 3);
	ck_assert_str_eq(s, "{\"tool_call_id\":\"c\",\"name\":\"n\",\"args\":{},\"conversation\":\"v\",\"attempt\":3}\n");
	free(s);
	/* Round trip, with text that needs escaping. */
	json_t *a2 = json_pack("{s:s}", "q", "line\n\"quoted\" caf\xc3\xa9");
	s = tool_input_json("id", "t", a2, "c");
	ck_assert_ptr_eq(strchr(s, '\n'), s + strlen(s) - 1);
	json_t *back = json_loads(s, 0, NULL);
	ck_assert_ptr_nonnull(back);
	ck_assert(json_equal(json_object_get(back, "args"), a2));
	json_decref(back);
	free(s);

	json_t *arr = json_array();
	errno = 0;
	ck_assert_ptr_null(tool_input_json("c", "n", arr, "v"));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(tool_input_json(NULL, "n", NULL, "v"));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(tool_input_json("c", NULL, NULL, "v"));
	ck_assert_ptr_null(tool_input_json("c", "n", NULL, NULL));
	errno = 0;
	ck_assert_ptr_null(tool_input_json("c", "bad\xff", NULL, "v"));
	ck_assert_int_eq(errno, EINVAL);
	json_decref(arr);
	json_decref(a2);
	json_decref(args);
}
END_TEST

Suite *make_protocol_suite(void)
{
	Suite *s = suite_create("protocol");
	TCase *model = tcase_create("model");
	tcase_set_timeout(model, 30 * slow());
	tcase_add_test(model, line_blank_and_delta);
	tcase_add_test(model, line_final_full);
	tcase_add_test(model, line_final_defaults);
	tcase_add_test(model, line_ids);
	tcase_add_test(model, line_errors);
	tcase_add_test(model, line_huge);
	tcase_add_test(model, line_args_too_deep);
	tcase_add_test(model, output_deltas_then_final);
	tcase_add_test(model, output_errors);
	suite_add_tcase(s, model);
	TCase *tl = tcase_create("tool");
	tcase_set_timeout(tl, 30 * slow());
	tcase_add_test(tl, tool_output_json);
	tcase_add_test(tl, tool_output_text);
	tcase_add_test(tl, tool_output_too_deep_is_text);
	tcase_add_test(tl, tool_output_bad_utf8);
	tcase_add_test(tl, json_text_replaces_ill_formed);
	tcase_add_test(tl, tool_output_invalid_args);
	tcase_add_test(tl, tool_output_huge);
	tcase_add_test(tl, tool_input);
	suite_add_tcase(s, tl);
	return s;
}
