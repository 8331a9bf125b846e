/* The worker's pure logic: what the log's tail owes for every dangling shape
 * (conv/tail.c; docs/protocol.md, "Semantics"), the model's input
 * (agent/render.c; docs/configuration.md), and the built-in echo model. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/render.h"
#include "tests/suites.h"

/* A working set from "[[seq, type, content], ...]" (extra keys ride along as
 * the store's inserted_at would). */
static json_t *evs(const char *spec)
{
	json_error_t je;
	json_t *in = json_loads(spec, 0, &je);
	ck_assert_msg(in != NULL, "bad spec %s: %s", spec, je.text);
	json_t *out = json_array();
	size_t i;
	json_t *t;
	json_array_foreach(in, i, t)
		json_array_append_new(out, json_pack("{sOsOsOsi}", "seq", json_array_get(t, 0), "type",
						     json_array_get(t, 1), "content", json_array_get(t, 2),
						     "inserted_at", 12345));
	json_decref(in);
	return out;
}

static json_t *js(const char *text)
{
	json_error_t je;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
	ck_assert_msg(v != NULL, "bad json %s: %s", text, je.text);
	return v;
}

/* Equal as JSON (ints and reals compared by value). */
static void ck_json(const json_t *got, const char *want)
{
	json_t *w = js(want);
	char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	ck_assert_msg(json_equal((json_t *)got, w), "got %s\nwant %s", g ? g : "(null)", want);
	free(g);
	json_decref(w);
}

static struct tail decide(const char *spec, uint64_t base)
{
	struct tail t;
	json_t *e = evs(spec);
	ck_assert_int_eq(tail_decide(e, base, &t), 0);
	json_decref(e);
	return t;
}

static void bad(const char *spec)
{
	struct tail t;
	json_t *e = evs(spec);
	ck_assert_msg(tail_decide(e, 0, &t) == -EINVAL, "accepted %s", spec);
	ck_assert_ptr_null(t.calls);
	ck_assert_ptr_null(t.unsettled);
	ck_assert_ptr_null(t.settled);
	json_decref(e);
}

#define U(seq, text) "[" #seq ",\"user_msg\",{\"text\":\"" text "\"}]"
#define A(seq, ctx) "[" #seq ",\"assistant_msg\",{\"text\":\"a\",\"context_seq\":" #ctx "}]"
#define E(seq, ctx) "[" #seq ",\"error\",{\"message\":\"m\",\"attempts\":3,\"context_seq\":" #ctx "}]"
#define TC(seq, id, ex) \
	"[" #seq ",\"tool_call\",{\"tool_call_id\":\"" id "\",\"name\":\"t\",\"args\":{},\"executor\":\"" ex "\"}]"
#define TR(seq, id) "[" #seq ",\"tool_result\",{\"tool_call_id\":\"" id "\",\"status\":\"resolved\",\"result\":1}]"
#define SUSP(seq, id) "[" #seq ",\"suspension\",{\"tool_call_id\":\"" id "\",\"prompt\":\"ok?\"}]"
#define RES(seq, id, st) "[" #seq ",\"resolution\",{\"tool_call_id\":\"" id "\",\"status\":\"" st "\",\"result\":null}]"

static void ck_ids(const json_t *calls, const char *want) /* "a,b" */
{
	char buf[256] = "";
	size_t i;
	json_t *c;
	json_array_foreach(calls, i, c) {
		if (i)
			strcat(buf, ",");
		strcat(buf, json_string_value(json_object_get(c, "tool_call_id")));
	}
	ck_assert_str_eq(buf, want);
}

/* ------------------------------------------------------------------ tail */

START_TEST(tail_empty_log)
{
	struct tail t = decide("[]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(t.ctx_seq, 0);
	ck_assert_uint_eq(t.marker_seq, 0);
	ck_assert_uint_eq(json_array_size(t.calls), 0);
	ck_assert_uint_eq(json_array_size(t.unsettled), 0);
	ck_assert_uint_eq(json_array_size(t.settled), 0);
	tail_free(&t);
	ck_assert_ptr_null(t.calls);
	tail_free(&t); /* twice is fine */
}
END_TEST

START_TEST(tail_user_msg_only)
{
	struct tail t = decide("[" U(1, "hi") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_uint_eq(t.ctx_seq, 0);
	ck_assert_uint_eq(t.marker_seq, 0);
	tail_free(&t);
	/* Several, none answered yet: one turn for all. */
	t = decide("[" U(1, "a") "," U(2, "b") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	tail_free(&t);
}
END_TEST

#define SCH(seq, text) "[" #seq ",\"scheduled\",{\"text\":\"" text "\",\"schedule\":\"k\",\"late\":false}]"

/* A scheduled event owes a turn as a user_msg does, and starts the rounds
 * afresh; one the last turn's context covered owes none. */
START_TEST(tail_scheduled_owes_a_turn)
{
	struct tail t = decide("[" SCH(1, "wake") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_int_eq(t.round, 1);
	tail_free(&t);
	t = decide("[" U(1, "a") "," A(2, 1) "," SCH(3, "wake") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_uint_eq(t.ctx_seq, 1);
	tail_free(&t);
	t = decide("[" U(1, "a") "," SCH(2, "wake") "," A(3, 2) "]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	tail_free(&t);
}
END_TEST

START_TEST(tail_answered_is_idle)
{
	struct tail t = decide("[" U(1, "hi") "," A(2, 1) "]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(t.ctx_seq, 1);
	ck_assert_uint_eq(t.marker_seq, 2);
	ck_assert_uint_eq(json_array_size(t.calls), 0);
	tail_free(&t);
	/* Older turns do not matter, only the last one. */
	t = decide("[" U(1, "a") "," A(2, 1) "," U(3, "b") "," A(4, 3) "]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(t.ctx_seq, 3);
	ck_assert_uint_eq(t.marker_seq, 4);
	tail_free(&t);
}
END_TEST

START_TEST(tail_user_msg_after_answer)
{
	struct tail t = decide("[" U(1, "a") "," A(2, 1) "," U(3, "b") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_uint_eq(t.ctx_seq, 1);
	ck_assert_uint_eq(t.marker_seq, 2);
	tail_free(&t);
}
END_TEST

START_TEST(tail_unsettled_server_call)
{
	struct tail t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "c1", "server") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TOOLS);
	ck_ids(t.calls, "c1");
	ck_ids(t.unsettled, "c1");
	ck_assert_uint_eq(json_array_size(t.settled), 0);
	ck_json(json_array_get(t.unsettled, 0), "{\"tool_call_id\":\"c1\",\"name\":\"t\",\"args\":{},\"executor\":\"server\"}");
	ck_assert_uint_eq(t.ctx_seq, 1);
	ck_assert_uint_eq(t.marker_seq, 2);
	tail_free(&t);
}
END_TEST

START_TEST(tail_unsettled_human_call)
{
	struct tail t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "h1", "human") "," SUSP(4, "h1") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TOOLS);
	ck_ids(t.unsettled, "h1");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(t.unsettled, 0), "executor")), "human");
	tail_free(&t);
	/* A user_msg while waiting does not start a turn: the calls come first. */
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "h1", "human") "," SUSP(4, "h1") "," U(5, "b") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TOOLS);
	ck_ids(t.unsettled, "h1");
	tail_free(&t);
}
END_TEST

START_TEST(tail_some_settled)
{
	struct tail t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "s1", "server") "," TC(4, "s2", "server") ","
			       TC(5, "h1", "human") "," SUSP(6, "h1") "," TR(7, "s1") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TOOLS);
	ck_ids(t.calls, "s1,s2,h1");
	ck_ids(t.unsettled, "s2,h1");
	ck_ids(t.settled, "s1");
	tail_free(&t);
	/* Settled out of order, by a resolution (an expiry too). */
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "s1", "server") "," TC(4, "h1", "human") "," SUSP(5, "h1") ","
		   RES(6, "h1", "expired") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TOOLS);
	ck_ids(t.unsettled, "s1");
	ck_ids(t.settled, "h1");
	tail_free(&t);
}
END_TEST

START_TEST(tail_all_settled_owes_a_turn)
{
	struct tail t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "s1", "server") "," TC(4, "h1", "human") ","
			       SUSP(5, "h1") "," TR(6, "s1") "," RES(7, "h1", "resolved") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_ids(t.calls, "s1,h1");
	ck_assert_uint_eq(json_array_size(t.unsettled), 0);
	ck_ids(t.settled, "s1,h1");
	ck_assert_uint_eq(t.ctx_seq, 1);
	tail_free(&t);
	/* Errored and expired settle too. */
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "h1", "human") "," RES(4, "h1", "expired") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	tail_free(&t);
	/* ... and once that turn answered, nothing is owed. */
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "s1", "server") "," TR(4, "s1") "," A(5, 4) "]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(json_array_size(t.calls), 0);
	ck_assert_uint_eq(t.marker_seq, 5);
	tail_free(&t);
}
END_TEST

START_TEST(tail_error_is_idle_until_user_msg)
{
	struct tail t = decide("[" U(1, "a") "," E(2, 1) "]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(t.ctx_seq, 1);
	ck_assert_uint_eq(t.marker_seq, 2);
	tail_free(&t);
	t = decide("[" U(1, "a") "," E(2, 1) "," U(3, "b") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	tail_free(&t);
	/* The follow-up turn of settled calls failed: owes nothing either. */
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "s1", "server") "," TR(4, "s1") "," E(5, 4) "]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(json_array_size(t.calls), 0);
	tail_free(&t);
	/* A message queued while the failing turn ran is still owed an answer. */
	t = decide("[" U(1, "a") "," U(2, "b") "," E(3, 1) "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	tail_free(&t);
}
END_TEST

START_TEST(tail_user_msg_queued_during_turn)
{
	/* Sent while the model ran: before the assistant_msg, after its context. */
	struct tail t = decide("[" U(1, "a") "," U(2, "b") "," U(3, "c") "," A(4, 1) "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_uint_eq(t.ctx_seq, 1);
	tail_free(&t);
	/* Sent while a tool ran: the calls first, then one turn for both. */
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "s1", "server") "," U(4, "b") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TOOLS);
	tail_free(&t);
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "s1", "server") "," U(4, "b") "," TR(5, "s1") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	tail_free(&t);
}
END_TEST

START_TEST(tail_base_from_summary)
{
	/* Everything up to base_ctx was answered before it was summarised. */
	struct tail t = decide("[]", 8);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(t.ctx_seq, 8);
	ck_assert_uint_eq(t.marker_seq, 0);
	tail_free(&t);
	t = decide("[" U(9, "a") "]", 8);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_uint_eq(t.ctx_seq, 8);
	tail_free(&t);
	t = decide("[" A(9, 8) "," U(10, "a") "," A(11, 10) "]", 8);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	ck_assert_uint_eq(t.ctx_seq, 10);
	ck_assert_uint_eq(t.marker_seq, 11);
	tail_free(&t);
	/* The last turn's calls after a summary are still seen. */
	t = decide("[" A(9, 8) "," TC(10, "s9", "server") "]", 8);
	ck_assert_int_eq(t.action, TAIL_TOOLS);
	ck_ids(t.unsettled, "s9");
	tail_free(&t);
	/* A user_msg the summary covered does not count (only events after it do). */
	t = decide("[" U(3, "old") "]", 8);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	tail_free(&t);
}
END_TEST

START_TEST(tail_malformed)
{
	bad("[[1,\"user_msg\",\"not an object\"]]");
	bad("[[1,\"user_msg\",null]]");
	bad("[[\"1\",\"user_msg\",{}]]");
	bad("[[null,\"user_msg\",{}]]");
	bad("[[1,null,{}]]");
	bad("[[1,7,{}]]");
	bad("[" U(1, "a") ",[2,\"assistant_msg\",{\"text\":\"x\"}]]");              /* no context_seq */
	bad("[" U(1, "a") ",[2,\"assistant_msg\",{\"text\":\"x\",\"context_seq\":\"1\"}]]");
	bad("[" U(1, "a") ",[2,\"assistant_msg\",{\"text\":\"x\",\"context_seq\":-1}]]");
	bad("[" U(1, "a") ",[2,\"error\",{\"message\":\"x\"}]]");
	bad("[" U(1, "a") "," A(2, 1) ",[3,\"tool_call\",{\"name\":\"t\"}]]");     /* no id */
	bad("[" U(1, "a") "," A(2, 1) ",[3,\"tool_call\",{\"tool_call_id\":\"c\"}]]"); /* no name */
	bad("[" U(1, "a") "," A(2, 1) "," TC(3, "c", "server") ",[4,\"tool_result\",{\"status\":\"resolved\"}]]");
	bad("[" U(1, "a") "," A(2, 1) "," TC(3, "c", "human") ",[4,\"resolution\",{\"tool_call_id\":5}]]");
	/* Missing keys altogether. */
	struct tail t;
	json_t *e = js("[{\"type\":\"user_msg\",\"content\":{}}]");
	ck_assert_int_eq(tail_decide(e, 0, &t), -EINVAL);
	json_decref(e);
	e = js("[{\"seq\":1,\"content\":{}}]");
	ck_assert_int_eq(tail_decide(e, 0, &t), -EINVAL);
	json_decref(e);
	e = js("[{\"seq\":1,\"type\":\"user_msg\"}]");
	ck_assert_int_eq(tail_decide(e, 0, &t), -EINVAL);
	json_decref(e);
	e = js("[\"not an event\"]");
	ck_assert_int_eq(tail_decide(e, 0, &t), -EINVAL);
	json_decref(e);
	e = js("{\"not\":\"an array\"}");
	ck_assert_int_eq(tail_decide(e, 0, &t), -EINVAL);
	json_decref(e);
	ck_assert_int_eq(tail_decide(NULL, 0, &t), -EINVAL);
	ck_assert_ptr_null(t.calls);
}
END_TEST

/* A turn_cancelled of an interrupting send is no boundary: the next turn
 * answers what the cancelled turn owed with the new message; a plain
 * cancel's is one. */
START_TEST(tail_interrupt_is_no_boundary)
{
	struct tail t = decide("[" U(1, "a") "," U(2, "b") ",[3,\"turn_cancelled\",{\"context_seq\":2,"
			       "\"tool_calls\":[],\"interrupted_by\":2,\"partial_text\":\"x\"}]]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_uint_eq(t.ctx_seq, 0);
	ck_assert_int_eq(t.round, 1);
	tail_free(&t);
	t = decide("[" U(1, "a") "," U(2, "b") ",[3,\"turn_cancelled\",{\"context_seq\":2,\"tool_calls\":[]}]]", 0);
	ck_assert_int_eq(t.action, TAIL_IDLE);
	tail_free(&t);
	/* Interrupted while its human call waited: the call settled cancelled,
	 * the new message owed at round 1. */
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "h", "human") "," SUSP(4, "h") "," U(5, "b") "," RES(6, "h", "cancelled")
		   ",[7,\"turn_cancelled\",{\"context_seq\":6,\"tool_calls\":[\"h\"],\"interrupted_by\":5}]]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_int_eq(t.round, 1);
	ck_assert_uint_eq(json_array_size(t.unsettled), 0);
	tail_free(&t);
}
END_TEST

/* Messages a steer event names continue the running turn: its next round is
 * the last + 1; one owed message not steered starts a new turn. */
START_TEST(tail_steered_round_goes_on)
{
	struct tail t = decide("[" U(1, "a") "," U(2, "b") ",[3,\"steer\",{\"seqs\":[2]}]," A(4, 1) "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_int_eq(t.round, 2);
	tail_free(&t);
	t = decide("[" U(1, "a") "," A(2, 1) "," TC(3, "x", "server") "," U(4, "b") ",[5,\"steer\",{\"seqs\":[4]}],"
		   TR(6, "x") "]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_int_eq(t.round, 2);
	tail_free(&t);
	t = decide("[" U(1, "a") "," U(2, "b") ",[3,\"steer\",{\"seqs\":[2]}]," A(4, 1) "," U(5, "c") "]", 0);
	ck_assert_int_eq(t.round, 1);
	tail_free(&t);
	/* No turn running before it (the first message steered): round 1. */
	t = decide("[" U(1, "a") ",[2,\"steer\",{\"seqs\":[1]}]]", 0);
	ck_assert_int_eq(t.action, TAIL_TURN);
	ck_assert_int_eq(t.round, 1);
	tail_free(&t);
}
END_TEST

/* ---------------------------------------------------------------- render */

static char cfg_path[64];

static void cfg_load(struct config *c)
{
	snprintf(cfg_path, sizeof cfg_path, "/tmp/agentd-check-render-XXXXXX");
	int fd = mkstemp(cfg_path);
	ck_assert_int_ge(fd, 0);
	static const char text[] = "[model.m]\ncommand = /bin/true\n"
				   "[tool.add]\nexecutor = server\ncommand = /bin/true\ndescription = Adds two numbers.\n"
				   "[tool.ask]\nexecutor = human\nprompt = Sure?\n";
	ck_assert_int_eq(write(fd, text, sizeof text - 1), (int)(sizeof text - 1));
	close(fd);
	config_init(c);
	char err[256];
	int rc = config_load(c, cfg_path, err, sizeof err);
	unlink(cfg_path);
	ck_assert_msg(rc == 0, "config: %s", err);
}

START_TEST(render_turn_shape)
{
	struct config c;
	cfg_load(&c);
	json_t *settings = js("{\"model\":\"m\",\"system\":\"Be brief.\",\"tools\":[\"ask\",\"add\",\"gone\"],"
			      "\"params\":{\"temperature\":0.5,\"stop\":[\"x\"]}}");
	json_t *e = evs("[" U(1, "hi") "," A(2, 1) "," U(3, "again") "]");
	json_t *r = render_turn("c1", 3, settings, &c, NULL, e);
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(json_string_value(json_object_get(r, "task")), "turn");
	ck_assert_str_eq(json_string_value(json_object_get(r, "conversation")), "c1");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "turn")), 3);
	ck_assert_str_eq(json_string_value(json_object_get(r, "system")), "Be brief.");
	ck_assert(json_is_null(json_object_get(r, "summary")));
	/* seq, type, content only: nothing else of the stored event. */
	ck_json(json_object_get(r, "messages"),
		"[{\"seq\":1,\"type\":\"user_msg\",\"content\":{\"text\":\"hi\"}},"
		"{\"seq\":2,\"type\":\"assistant_msg\",\"content\":{\"text\":\"a\",\"context_seq\":1}},"
		"{\"seq\":3,\"type\":\"user_msg\",\"content\":{\"text\":\"again\"}}]");
	/* In the settings' order; a tool gone from the configuration is left out. */
	ck_json(json_object_get(r, "tools"), "[{\"name\":\"ask\",\"description\":\"\",\"executor\":\"human\"},"
					     "{\"name\":\"add\",\"description\":\"Adds two numbers.\",\"executor\":\"server\"}]");
	ck_json(json_object_get(r, "params"), "{\"temperature\":0.5,\"stop\":[\"x\"]}");
	/* The events themselves are not changed. */
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(e, 0), "inserted_at")), 12345);
	json_decref(r);

	/* With a summary; defaults when settings say nothing. */
	json_t *sum = js("{\"from_seq\":1,\"to_seq\":2,\"content\":{\"text\":\"S\"},\"version\":1}");
	json_t *bare = js("{\"model\":\"m\"}");
	json_t *tail = evs("[" U(3, "again") "]");
	r = render_turn("c1", 3, bare, &c, sum, tail);
	ck_json(json_object_get(r, "summary"), "{\"from_seq\":1,\"to_seq\":2,\"content\":{\"text\":\"S\"},\"version\":1}");
	ck_json(json_object_get(r, "messages"), "[{\"seq\":3,\"type\":\"user_msg\",\"content\":{\"text\":\"again\"}}]");
	ck_assert_str_eq(json_string_value(json_object_get(r, "system")), "");
	ck_json(json_object_get(r, "tools"), "[]");
	ck_json(json_object_get(r, "params"), "{}");
	json_decref(r);
	/* No events at all (a turn right after a summary). */
	json_t *none = json_array();
	r = render_turn("c1", 2, bare, &c, sum, none);
	ck_json(json_object_get(r, "messages"), "[]");
	json_decref(r);
	json_decref(none);
	json_decref(tail);
	json_decref(bare);
	json_decref(sum);
	json_decref(e);
	json_decref(settings);
	config_free(&c);
}
END_TEST

START_TEST(render_summarize_shape)
{
	json_t *settings = js("{\"model\":\"m\",\"params\":{\"k\":1}}");
	json_t *e = evs("[" U(4, "x") "," A(5, 4) "]");
	json_t *r = render_summarize("c2", settings, NULL, e);
	ck_assert_str_eq(json_string_value(json_object_get(r, "task")), "summarize");
	ck_assert_str_eq(json_string_value(json_object_get(r, "conversation")), "c2");
	ck_assert(json_is_null(json_object_get(r, "summary")));
	ck_json(json_object_get(r, "messages"), "[{\"seq\":4,\"type\":\"user_msg\",\"content\":{\"text\":\"x\"}},"
						"{\"seq\":5,\"type\":\"assistant_msg\",\"content\":{\"text\":\"a\",\"context_seq\":4}}]");
	ck_json(json_object_get(r, "params"), "{\"k\":1}");
	ck_json(json_object_get(r, "tools"), "[]");
	json_decref(r);
	/* The previous summary is given, to be folded in. */
	json_t *sum = js("{\"from_seq\":1,\"to_seq\":3,\"content\":{\"text\":\"S\"},\"version\":1}");
	r = render_summarize("c2", settings, sum, e);
	ck_json(json_object_get(r, "summary"), "{\"from_seq\":1,\"to_seq\":3,\"content\":{\"text\":\"S\"},\"version\":1}");
	json_decref(r);
	json_decref(sum);
	json_decref(e);
	json_decref(settings);
}
END_TEST

/* ------------------------------------------------------------------ echo */

static json_t *echo(const char *task, const char *spec)
{
	json_t *m = evs(spec);
	json_t *req = json_pack("{sssssO}", "task", task, "conversation", "c", "messages", m);
	json_t *out = echo_model(req);
	ck_assert_ptr_nonnull(out);
	json_decref(req);
	json_decref(m);
	return out;
}

static const char *text_of(const json_t *out)
{
	return json_string_value(json_object_get(out, "text"));
}

START_TEST(echo_plain)
{
	json_t *o = echo("turn", "[" U(1, "hello") "]");
	ck_assert_str_eq(text_of(o), "echo: hello");
	ck_json(json_object_get(o, "tool_calls"), "[]");
	json_t *u = json_object_get(o, "usage");
	ck_assert(json_is_integer(json_object_get(u, "input_tokens")));
	ck_assert(json_is_integer(json_object_get(u, "output_tokens")));
	ck_assert(json_is_number(json_object_get(u, "cost")));
	json_decref(o);
	/* Content that is not {"text"} is echoed as JSON. */
	o = echo("turn", "[[1,\"user_msg\",{\"a\":[1,2]}]]");
	ck_assert_str_eq(text_of(o), "echo: {\"a\":[1,2]}");
	json_decref(o);
	/* Answered messages are not echoed again. */
	o = echo("turn", "[" U(1, "one") "," A(2, 1) "," U(3, "two") "]");
	ck_assert_str_eq(text_of(o), "echo: two");
	json_decref(o);
}
END_TEST

/* The echo model answers a scheduled event with its text. */
START_TEST(echo_scheduled)
{
	json_t *o = echo("turn", "[" U(1, "a") "," A(2, 1) "," SCH(3, "wake up") "]");
	ck_assert_str_eq(text_of(o), "echo: wake up");
	json_decref(o);
}
END_TEST

START_TEST(echo_several_queued)
{
	json_t *o = echo("turn", "[" U(1, "a") "," U(2, "b") "]");
	ck_assert_str_eq(text_of(o), "echo: a\necho: b");
	json_decref(o);
	/* Queued while the last turn ran: before its assistant_msg in the log,
	 * after its context_seq. */
	o = echo("turn", "[" U(1, "a") "," U(2, "b") "," U(3, "c") "," A(4, 1) "]");
	ck_assert_str_eq(text_of(o), "echo: b\necho: c");
	json_decref(o);
	/* After a failed turn, everything unanswered. */
	o = echo("turn", "[" U(1, "a") "," E(2, 1) "," U(3, "b") "]");
	ck_assert_str_eq(text_of(o), "echo: a\necho: b");
	json_decref(o);
}
END_TEST

START_TEST(echo_tool_requests)
{
	json_t *o = echo("turn", "[" U(1, "/tool add {\\\"a\\\": 2, \\\"b\\\": 3}") "]");
	ck_json(json_object_get(o, "tool_calls"), "[{\"name\":\"add\",\"args\":{\"a\":2,\"b\":3}}]");
	ck_assert_str_eq(text_of(o), "calling add");
	json_decref(o);
	/* No args: {}; args that are not a JSON object: kept as text. */
	o = echo("turn", "[" U(1, "/tool approve") "]");
	ck_json(json_object_get(o, "tool_calls"), "[{\"name\":\"approve\",\"args\":{}}]");
	json_decref(o);
	o = echo("turn", "[" U(1, "/tool   add   please do") "]");
	ck_json(json_object_get(o, "tool_calls"), "[{\"name\":\"add\",\"args\":{\"text\":\"please do\"}}]");
	json_decref(o);
	o = echo("turn", "[" U(1, "/tool add [1,2]") "]");
	ck_json(json_object_get(o, "tool_calls"), "[{\"name\":\"add\",\"args\":{\"text\":\"[1,2]\"}}]");
	json_decref(o);
	/* Several in one turn, in order, with a plain message between. */
	o = echo("turn", "[" U(1, "/tool a") "," U(2, "hi") "," U(3, "/tool b") "]");
	ck_json(json_object_get(o, "tool_calls"), "[{\"name\":\"a\",\"args\":{}},{\"name\":\"b\",\"args\":{}}]");
	ck_assert_str_eq(text_of(o), "calling a\necho: hi\ncalling b");
	json_decref(o);
	/* Not a tool request: "/tool" alone, "/toolx", a name too long. */
	o = echo("turn", "[" U(1, "/tool") "," U(2, "/tool ") "," U(3, "/toolx y") "]");
	ck_json(json_object_get(o, "tool_calls"), "[]");
	ck_assert_str_eq(text_of(o), "echo: /tool\necho: /tool \necho: /toolx y");
	json_decref(o);
	char name[200], spec[400];
	memset(name, 'n', 129);
	name[129] = 0;
	snprintf(spec, sizeof spec, "[[1,\"user_msg\",{\"text\":\"/tool %s\"}]]", name);
	o = echo("turn", spec);
	ck_json(json_object_get(o, "tool_calls"), "[]");
	json_decref(o);
}
END_TEST

START_TEST(echo_results_after_settlement)
{
	json_t *o = echo("turn", "[" U(1, "/tool add") "," A(2, 1) "," TC(3, "c1", "server") ","
			 "[4,\"tool_result\",{\"tool_call_id\":\"c1\",\"status\":\"resolved\",\"result\":{\"sum\":5}}]]");
	ck_assert_str_eq(text_of(o), "c1 resolved: {\"sum\":5}");
	ck_json(json_object_get(o, "tool_calls"), "[]");
	json_decref(o);
	o = echo("turn", "[" U(1, "/tool ask") "," A(2, 1) "," TC(3, "h1", "human") "," SUSP(4, "h1") ","
		 RES(5, "h1", "expired") "]");
	ck_assert_str_eq(text_of(o), "h1 expired: null");
	json_decref(o);
	/* Results of an older turn are not echoed again. */
	o = echo("turn", "[" U(1, "/tool add") "," A(2, 1) "," TC(3, "c1", "server") "," TR(4, "c1") "," A(5, 4) ","
		 U(6, "next") "]");
	ck_assert_str_eq(text_of(o), "echo: next");
	json_decref(o);
}
END_TEST

START_TEST(echo_summarize)
{
	json_t *o = echo("summarize", "[" U(1, "a") ",[2,\"assistant_msg\",{\"text\":\"echo: a\",\"context_seq\":1}]]");
	ck_assert_str_eq(text_of(o), "summary of 2 events: a | echo: a");
	ck_json(json_object_get(o, "tool_calls"), "[]");
	json_decref(o);
	o = echo("summarize", "[]");
	ck_assert_str_eq(text_of(o), "summary of 0 events: ");
	json_decref(o);
	/* A long history is cut, not overflowed. */
	json_t *m = json_array();
	for (int i = 1; i <= 200; i++)
		json_array_append_new(m, json_pack("{sisss{ss}}", "seq", i, "type", "user_msg", "content", "text",
						   "twenty characters!!"));
	json_t *req = json_pack("{sssO}", "task", "summarize", "messages", m);
	o = echo_model(req);
	ck_assert_ptr_nonnull(text_of(o));
	ck_assert_uint_lt(strlen(text_of(o)), 1200);
	ck_assert(!strncmp(text_of(o), "summary of 200 events: ", 23));
	json_decref(o);
	json_decref(req);
	json_decref(m);
}
END_TEST

Suite *make_render_suite(void)
{
	Suite *s = suite_create("render");
	TCase *t = tcase_create("tail");
	tcase_add_test(t, tail_empty_log);
	tcase_add_test(t, tail_user_msg_only);
	tcase_add_test(t, tail_answered_is_idle);
	tcase_add_test(t, tail_user_msg_after_answer);
	tcase_add_test(t, tail_unsettled_server_call);
	tcase_add_test(t, tail_unsettled_human_call);
	tcase_add_test(t, tail_some_settled);
	tcase_add_test(t, tail_all_settled_owes_a_turn);
	tcase_add_test(t, tail_error_is_idle_until_user_msg);
	tcase_add_test(t, tail_user_msg_queued_during_turn);
	tcase_add_test(t, tail_base_from_summary);
	tcase_add_test(t, tail_malformed);
	tcase_add_test(t, tail_interrupt_is_no_boundary);
	tcase_add_test(t, tail_steered_round_goes_on);
	tcase_add_test(t, tail_scheduled_owes_a_turn);
	suite_add_tcase(s, t);
	TCase *r = tcase_create("render");
	tcase_add_test(r, render_turn_shape);
	tcase_add_test(r, render_summarize_shape);
	suite_add_tcase(s, r);
	TCase *e = tcase_create("echo");
	tcase_add_test(e, echo_plain);
	tcase_add_test(e, echo_scheduled);
	tcase_add_test(e, echo_several_queued);
	tcase_add_test(e, echo_tool_requests);
	tcase_add_test(e, echo_results_after_settlement);
	tcase_add_test(e, echo_summarize);
	suite_add_tcase(s, e);
	return s;
}
