/* The HTTP model clients' pure parts: the SSE parser fed in every cut
 * (agent/sse.c), Retry-After (agent/http.c), and the transcript order the
 * APIs accept (agent/model.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http.h"
#include "agent/model.h"
#include "agent/sse.h"
#include "tests/suites.h"

struct got {
	char buf[2048];
	int n;
};

static int collect(void *arg, const char *type, const char *data, size_t len)
{
	struct got *g = arg;
	size_t l = strlen(g->buf);
	snprintf(g->buf + l, sizeof g->buf - l, "[%s|%.*s]", type, (int)len, data);
	g->n++;
	return 0;
}

static const char STREAM[] = ": keep-alive\r\n"
			     "event: delta\r\n"
			     "data: {\"a\":\r\n"
			     "data:  1}\r\n"
			     "\r\n"
			     "data:x\n"
			     "id: 7\n"
			     "retry: 100\n"
			     "\n"
			     "data: caf\xc3\xa9\r"
			     "\r"
			     "event: ignored without data\n"
			     "\n"
			     "data\n"
			     "\n"
			     "data: [DONE]\n\n"
			     "data: not dispatched (no blank line)\n";
static const char WANT[] = "[delta|{\"a\":\n 1}][|x][|caf\xc3\xa9][|][|[DONE]]";

/* Every way of cutting the stream in two, and byte by byte: the same events. */
START_TEST(test_sse_any_cut)
{
	size_t n = strlen(STREAM);
	for (size_t cut = 0; cut <= n; cut++) {
		struct sse s;
		struct got g = { "", 0 };
		sse_init(&s);
		ck_assert_int_eq(sse_feed(&s, STREAM, cut, collect, &g), 0);
		ck_assert_int_eq(sse_feed(&s, STREAM + cut, n - cut, collect, &g), 0);
		ck_assert_msg(!strcmp(g.buf, WANT), "cut at %zu: %s", cut, g.buf);
		ck_assert_str_eq(s.last_id, "7"); /* kept past the events after it */
		sse_free(&s);
	}
	struct sse s;
	struct got g = { "", 0 };
	sse_init(&s);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(sse_feed(&s, STREAM + i, 1, collect, &g), 0);
	ck_assert_str_eq(g.buf, WANT);
	sse_free(&s);
}
END_TEST

/* The last event id is an ended event's: one whose blank line has not come
 * is not, and an id too long to keep is none. */
START_TEST(test_sse_last_id)
{
	struct sse s;
	struct got g = { "", 0 };
	sse_init(&s);
	ck_assert_int_eq(sse_feed(&s, "id: e1\ndata: a\n\nid: e2\ndata: b\n", 31, collect, &g), 0);
	ck_assert_str_eq(s.last_id, "e1");
	ck_assert_int_eq(sse_feed(&s, "\n", 1, collect, &g), 0);
	ck_assert_str_eq(s.last_id, "e2");
	char line[400] = "id: ";
	memset(line + 4, 'z', 300);
	memcpy(line + 304, "\n\n", 3);
	ck_assert_int_eq(sse_feed(&s, line, strlen(line), collect, &g), 0);
	ck_assert_str_eq(s.last_id, "");
	sse_free(&s);
}
END_TEST

static int stop_at_first(void *arg, const char *type, const char *data, size_t len)
{
	(void)arg, (void)type, (void)data, (void)len;
	return 42;
}

START_TEST(test_sse_stop_and_limit)
{
	struct sse s;
	sse_init(&s);
	ck_assert_int_eq(sse_feed(&s, "data: a\n\ndata: b\n\n", 18, stop_at_first, NULL), 42);
	sse_free(&s);
	sse_init(&s);
	size_t big = SSE_EVENT_MAX / 2 + 10;
	char *line = malloc(big + 8);
	memcpy(line, "data: ", 6);
	memset(line + 6, 'x', big);
	line[6 + big] = '\n';
	ck_assert_int_eq(sse_feed(&s, line, big + 7, collect, &(struct got){ "", 0 }), 0);
	ck_assert_int_eq(sse_feed(&s, line, big + 7, collect, &(struct got){ "", 0 }), -E2BIG);
	free(line);
	sse_free(&s);
}
END_TEST

START_TEST(test_retry_after)
{
	int64_t now = 1784000000000LL; /* 2026-07-14 */
	ck_assert_int_eq(http_retry_after_ms("3", now), 3000);
	ck_assert_int_eq(http_retry_after_ms(" 0\r\n", now), 0);
	ck_assert_int_eq(http_retry_after_ms("1.5", now), -1);
	ck_assert_int_eq(http_retry_after_ms("soon", now), -1);
	ck_assert_int_eq(http_retry_after_ms("3x", now), -1);
	/* An HTTP-date 10 s after now, and one in the past. */
	ck_assert_int_eq(http_retry_after_ms("Tue, 14 Jul 2026 03:33:30 GMT", 1784000000000LL), 10000);
	ck_assert_int_eq(http_retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT", now), 0);
}
END_TEST

static json_t *req_of(const char *events)
{
	json_error_t je;
	json_t *e = json_loads(events, 0, &je);
	ck_assert_msg(e != NULL, "%s", je.text);
	return json_pack("{sssos[{ss}]}", "task", "turn", "messages", e, "tools", "name", "x");
}

static void ck_roles(const json_t *tr, const char *want)
{
	char buf[512] = "";
	size_t i;
	json_t *it;
	json_array_foreach(tr, i, it) {
		const char *r = json_string_value(json_object_get(it, "role"));
		const char *t = json_string_value(json_object_get(it, "text"));
		const char *id = json_string_value(json_object_get(it, "id"));
		size_t l = strlen(buf);
		snprintf(buf + l, sizeof buf - l, "%s%s:%s", i ? " " : "", r, t ? t : id);
	}
	ck_assert_str_eq(buf, want);
}

START_TEST(test_transcript_order)
{
	/* u2 arrived while the turn of context 1 ran; u6 while t1 awaited a
	 * person; t2 was answered twice (a second resolution is ignored). */
	json_t *rq = req_of("["
			    "{\"seq\":1,\"type\":\"user_msg\",\"content\":{\"text\":\"u1\"}},"
			    "{\"seq\":2,\"type\":\"user_msg\",\"content\":{\"text\":\"u2\"}},"
			    "{\"seq\":3,\"type\":\"assistant_msg\",\"content\":{\"text\":\"a3\",\"context_seq\":1}},"
			    "{\"seq\":4,\"type\":\"tool_call\",\"content\":{\"tool_call_id\":\"t1\",\"name\":\"x\",\"args\":{}}},"
			    "{\"seq\":5,\"type\":\"tool_call\",\"content\":{\"tool_call_id\":\"t2\",\"name\":\"x\",\"args\":{}}},"
			    "{\"seq\":6,\"type\":\"user_msg\",\"content\":{\"text\":\"u6\"}},"
			    "{\"seq\":7,\"type\":\"tool_result\",\"content\":{\"tool_call_id\":\"t2\",\"status\":\"resolved\",\"result\":1}},"
			    "{\"seq\":8,\"type\":\"resolution\",\"content\":{\"tool_call_id\":\"t2\",\"status\":\"resolved\",\"result\":2}},"
			    "{\"seq\":9,\"type\":\"resolution\",\"content\":{\"tool_call_id\":\"t1\",\"status\":\"expired\",\"result\":null}},"
			    "{\"seq\":10,\"type\":\"assistant_msg\",\"content\":{\"text\":\"a10\",\"context_seq\":9}},"
			    "{\"seq\":11,\"type\":\"user_msg\",\"content\":{\"text\":\"u11\"}}"
			    "]");
	json_t *tr = model_transcript(rq);
	ck_roles(tr, "user:u1 assistant:a3 tool:t2 tool:t1 user:u2 user:u6 assistant:a10 user:u11");
	char *r = model_result_text(json_array_get(tr, 2));
	ck_assert_str_eq(r, "1");
	free(r);
	r = model_result_text(json_array_get(tr, 3));
	ck_assert_str_eq(r, "{\"status\":\"expired\",\"result\":null}");
	free(r);
	json_decref(tr);
	json_decref(rq);

	/* A call with no result yet is answered "missing"; a result whose call
	 * was summarised away becomes a note. */
	rq = req_of("["
		    "{\"seq\":5,\"type\":\"tool_result\",\"content\":{\"tool_call_id\":\"old\",\"status\":\"resolved\",\"result\":\"r\"}},"
		    "{\"seq\":6,\"type\":\"user_msg\",\"content\":{\"text\":\"u6\"}},"
		    "{\"seq\":7,\"type\":\"assistant_msg\",\"content\":{\"text\":\"\",\"context_seq\":6}},"
		    "{\"seq\":8,\"type\":\"tool_call\",\"content\":{\"tool_call_id\":\"t8\",\"name\":\"x\",\"args\":{}}}"
		    "]");
	tr = model_transcript(rq);
	ck_roles(tr, "user:[result of tool call old: r] user:u6 assistant: tool:t8");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(tr, 3), "status")), "missing");
	json_decref(tr);
	json_decref(rq);

	/* No tools offered: calls and results become text. */
	rq = req_of("["
		    "{\"seq\":1,\"type\":\"user_msg\",\"content\":{\"text\":\"u1\"}},"
		    "{\"seq\":2,\"type\":\"assistant_msg\",\"content\":{\"text\":\"a2\",\"context_seq\":1}},"
		    "{\"seq\":3,\"type\":\"tool_call\",\"content\":{\"tool_call_id\":\"t3\",\"name\":\"x\",\"args\":{\"k\":1}}},"
		    "{\"seq\":4,\"type\":\"tool_result\",\"content\":{\"tool_call_id\":\"t3\",\"status\":\"resolved\",\"result\":\"ok\"}}"
		    "]");
	json_object_set_new(rq, "tools", json_array());
	tr = model_transcript(rq);
	ck_roles(tr, "user:u1 assistant:a2\n[called x (t3) with {\"k\":1}] user:[result of x (t3): ok]");
	ck_assert_int_eq(json_array_size(json_object_get(json_array_get(tr, 1), "calls")), 0);
	json_decref(tr);
	json_decref(rq);

	/* A scheduled event is a user message marked [scheduled], its text
	 * only; one that came while a turn ran follows its results, as a
	 * user_msg does. */
	rq = req_of("["
		    "{\"seq\":1,\"type\":\"user_msg\",\"content\":{\"text\":\"u1\"}},"
		    "{\"seq\":2,\"type\":\"scheduled\",\"content\":{\"text\":\"s2\",\"schedule\":\"k\",\"late\":false}},"
		    "{\"seq\":3,\"type\":\"assistant_msg\",\"content\":{\"text\":\"a3\",\"context_seq\":1}},"
		    "{\"seq\":4,\"type\":\"scheduled\",\"content\":{\"text\":\"s4\",\"schedule\":\"k\",\"late\":true}}"
		    "]");
	tr = model_transcript(rq);
	ck_roles(tr, "user:u1 assistant:a3 user:[scheduled] s2 user:[scheduled] s4");
	json_decref(tr);
	json_decref(rq);
}
END_TEST

/* Found by fuzz_stream: a block started twice at one index, and a call with
 * no args in the log. */
START_TEST(test_fuzz_regressions)
{
	struct stream st;
	memset(&st, 0, sizeof st);
	const char *a = "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\","
			"\"id\":\"t1\",\"name\":\"one\",\"input\":{}}}";
	const char *b = "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\","
			"\"id\":\"t2\",\"name\":\"two\",\"input\":{\"k\":1}}}";
	ck_assert_int_eq(model_api_anthropic.event(&st, "", a, strlen(a)), 0);
	ck_assert_int_eq(model_api_anthropic.event(&st, "", b, strlen(b)), 0);
	struct model_reply r;
	char err[300];
	ck_assert_int_eq(stream_reply(&st, &r, err, sizeof err), 0);
	ck_assert_uint_eq(r.ncalls, 1);
	ck_assert_str_eq(r.calls[0].id, "t2");
	ck_assert_str_eq(r.calls[0].name, "two");
	ck_assert_int_eq(json_integer_value(json_object_get(r.calls[0].args, "k")), 1);
	model_reply_free(&r);
	stream_free(&st);

	json_t *rq = req_of("["
			    "{\"seq\":1,\"type\":\"user_msg\",\"content\":{\"text\":\"u\"}},"
			    "{\"seq\":2,\"type\":\"assistant_msg\",\"content\":{\"text\":\"\",\"context_seq\":1}},"
			    "{\"seq\":3,\"type\":\"tool_call\",\"content\":{\"tool_call_id\":\"t3\",\"name\":\"x\"}}"
			    "]");
	json_t *tr = model_transcript(rq);
	json_t *call = json_array_get(json_object_get(json_array_get(tr, 1), "calls"), 0);
	ck_assert(json_is_object(json_object_get(call, "args")) && json_object_size(json_object_get(call, "args")) == 0);
	json_decref(tr);
	json_decref(rq);
}
END_TEST

/* An MCP tool's input_schema (mcp.h) is the function's parameters (openai)
 * and the tool's input_schema (anthropic); other tools get an open object. */
START_TEST(test_tool_schemas)
{
	json_error_t je;
	json_t *req = json_loads("{\"task\":\"turn\",\"messages\":[{\"seq\":1,\"type\":\"user_msg\",\"content\":"
				 "{\"text\":\"hi\"}}],\"tools\":[{\"name\":\"m_echo\",\"description\":\"d\",\"input_schema\":"
				 "{\"type\":\"object\",\"required\":[\"message\"]}},{\"name\":\"calc\"}]}", 0, &je);
	ck_assert_msg(req != NULL, "%s", je.text);
	struct model_cfg mc = { .name = "m", .model = "m", .base_url = "http://x/v1", .kind = MODEL_OPENAI };
	json_t *b = model_api_of(&mc)->body(&mc, req);
	json_t *fn = json_object_get(json_array_get(json_object_get(b, "tools"), 0), "function");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(fn, "parameters"), "required"), 0)),
			 "message");
	fn = json_object_get(json_array_get(json_object_get(b, "tools"), 1), "function");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fn, "parameters"), "type")), "object");
	json_decref(b);
	mc.kind = MODEL_ANTHROPIC;
	mc.max_tokens = 10;
	b = model_api_of(&mc)->body(&mc, req);
	json_t *t = json_array_get(json_object_get(b, "tools"), 0);
	ck_assert(json_object_get(json_object_get(t, "input_schema"), "required") != NULL);
	json_decref(b);
	json_decref(req);
}
END_TEST

/* A tool without a string name cannot be called by the model: it is left
 * out of both bodies, which are still made (not taken for out of memory). */
START_TEST(test_tool_without_a_name_is_not_offered)
{
	json_t *req = json_loads("{\"task\":\"turn\",\"messages\":[{\"seq\":1,\"type\":\"user_msg\",\"content\":"
				 "{\"text\":\"hi\"}}],\"tools\":[{\"naAe\":\"calc\"},{\"name\":7},{\"name\":\"ok\"}]}",
				 0, NULL);
	ck_assert_ptr_nonnull(req);
	struct model_cfg mc = { .name = "m", .model = "m", .base_url = "http://x/v1", .max_tokens = 10 };
	for (int k = MODEL_OPENAI; k <= MODEL_ANTHROPIC; k++) {
		mc.kind = k;
		json_t *b = model_api_of(&mc)->body(&mc, req);
		ck_assert_ptr_nonnull(b);
		json_t *ts = json_object_get(b, "tools");
		ck_assert_uint_eq(json_array_size(ts), 1);
		json_t *t = json_array_get(ts, 0);
		json_t *fn = k == MODEL_OPENAI ? json_object_get(t, "function") : t;
		ck_assert_str_eq(json_string_value(json_object_get(fn, "name")), "ok");
		json_decref(b);
	}
	json_decref(req);
}
END_TEST

/* A resolution event without status or result still answers its call (an
 * errored one with no result), and both bodies are made. */
START_TEST(test_resolution_without_a_result_still_answers_its_call)
{
	json_t *req = json_loads("{\"task\":\"turn\",\"tools\":[{\"name\":\"calc\"}],\"messages\":["
				 "{\"seq\":1,\"type\":\"user_msg\",\"content\":{\"text\":\"u\"}},"
				 "{\"seq\":2,\"type\":\"assistant_msg\",\"content\":{\"text\":\"\",\"context_seq\":1}},"
				 "{\"seq\":3,\"type\":\"tool_call\",\"content\":{\"tool_call_id\":\"t3\",\"name\":\"calc\"}},"
				 "{\"seq\":4,\"type\":\"resolution\",\"content\":{\"tool_call_id\":\"t3\"}}]}",
				 0, NULL);
	ck_assert_ptr_nonnull(req);
	json_t *tr = model_transcript(req);
	ck_assert_ptr_nonnull(tr);
	json_t *tool = json_array_get(tr, 2);
	ck_assert_str_eq(json_string_value(json_object_get(tool, "role")), "tool");
	ck_assert_str_eq(json_string_value(json_object_get(tool, "id")), "t3");
	json_decref(tr);
	struct model_cfg mc = { .name = "m", .model = "m", .base_url = "http://x/v1", .max_tokens = 10 };
	for (int k = MODEL_OPENAI; k <= MODEL_ANTHROPIC; k++) {
		mc.kind = k;
		json_t *b = model_api_of(&mc)->body(&mc, req);
		ck_assert_ptr_nonnull(b);
		json_decref(b);
	}
	json_decref(req);
}
END_TEST

Suite *make_model_suite(void)
{
	Suite *s = suite_create("model");
	TCase *tc = tcase_create("model");
	tcase_add_test(tc, test_sse_any_cut);
	tcase_add_test(tc, test_sse_stop_and_limit);
	tcase_add_test(tc, test_sse_last_id);
	tcase_add_test(tc, test_retry_after);
	tcase_add_test(tc, test_transcript_order);
	tcase_add_test(tc, test_fuzz_regressions);
	tcase_add_test(tc, test_tool_schemas);
	tcase_add_test(tc, test_tool_without_a_name_is_not_offered);
	tcase_add_test(tc, test_resolution_without_a_result_still_answers_its_call);
	suite_add_tcase(s, tc);
	return s;
}
