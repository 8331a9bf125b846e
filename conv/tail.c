/* tail.c: what a conversation's log owes (see conv.h). */
#include "conv/conv.h"

#include <errno.h>
#include <string.h>

static const char *ev_type(const json_t *e)
{
	return json_string_value(json_object_get(e, "type"));
}

static uint64_t ev_seq(const json_t *e)
{
	return (uint64_t)json_integer_value(json_object_get(e, "seq"));
}

static const char *call_id(const json_t *content)
{
	return json_string_value(json_object_get(content, "tool_call_id"));
}

void tail_free(struct tail *t)
{
	json_decref(t->calls);
	json_decref(t->unsettled);
	json_decref(t->settled);
	memset(t, 0, sizeof *t);
}

int tail_decide(const json_t *events, uint64_t base_ctx, struct tail *t)
{
	return tail_decide_active(events, base_ctx, 0, t);
}

/* A give-up error of a conversation made active again by `resume`, or the
 * turn_cancelled of an interrupting send (its turn's work is answered with
 * that send's message by the next turn): no turn boundary. */
static int reopened(const char *ty, const json_t *content, int active)
{
	if (!strcmp(ty, "turn_cancelled"))
		return json_object_get(content, "interrupted_by") != NULL;
	return active && !strcmp(ty, "error") && json_is_true(json_object_get(content, "gave_up"));
}

/* The last turn boundary (an assistant_msg, an error or a turn_cancelled):
 * its index in *marker ((size_t)-1: none), its context in t. 0, or -EINVAL
 * when an event is malformed. */
static int tail_find_marker(const json_t *events, int active, struct tail *t, size_t *marker)
{
	size_t i;
	json_t *e;
	*marker = (size_t)-1;
	json_array_foreach(events, i, e) {
		const char *ty = ev_type(e);
		if (!ty || !json_is_integer(json_object_get(e, "seq")) || !json_is_object(json_object_get(e, "content")))
			return -EINVAL;
		if ((!strcmp(ty, "assistant_msg") || !strcmp(ty, "error") || !strcmp(ty, "turn_cancelled")) &&
		    !reopened(ty, json_object_get(e, "content"), active)) {
			json_t *cs = json_object_get(json_object_get(e, "content"), "context_seq");
			if (!json_is_integer(cs) || json_integer_value(cs) < 0)
				return -EINVAL;
			*marker = i;
			t->ctx_seq = (uint64_t)json_integer_value(cs);
			t->marker_seq = ev_seq(e);
		}
	}
	return 0;
}

/* The tool calls that follow the marker, and what settled them, into
 * t->calls and t->settled. -EINVAL when one is malformed, -ENOMEM when out
 * of memory (a call left out would read as not owed). */
static int tail_collect(const json_t *events, size_t marker, struct tail *t)
{
	for (size_t i = marker + 1; i < json_array_size(events); i++) {
		json_t *ev = json_array_get(events, i);
		json_t *c = json_object_get(ev, "content");
		const char *ty = ev_type(ev);
		if (!strcmp(ty, "tool_call")) {
			if (!call_id(c) || !json_is_string(json_object_get(c, "name")))
				return -EINVAL;
			if (json_array_append(t->calls, c))
				return -ENOMEM;
		} else if (!strcmp(ty, "tool_result") || !strcmp(ty, "resolution")) {
			if (!call_id(c))
				return -EINVAL;
			if (json_array_append(t->settled, c))
				return -ENOMEM;
		}
	}
	return 0;
}

/* The calls no settlement names, into t->unsettled. By id, through a hash:
 * comparing every call with every settlement made a reply of 1,000 calls
 * take seconds per step (and a step per call). -ENOMEM when out of memory
 * (never a settled call taken for unsettled). */
static int tail_match(struct tail *t)
{
	size_t i;
	json_t *e, *done = json_object();
	int r = done ? 0 : -ENOMEM;
	json_array_foreach(t->settled, i, e)
		if (!r && json_object_set_nocheck(done, call_id(e), json_true()))
			r = -ENOMEM;
	json_array_foreach(t->calls, i, e)
		if (!r && !json_object_get(done, call_id(e)) && json_array_append(t->unsettled, e))
			r = -ENOMEM;
	json_decref(done);
	return r;
}

/* The round of the assistant_msg at the marker: its content's "round", 1
 * when absent. */
static int tail_marker_round(const json_t *marker_ev)
{
	json_t *rd = json_object_get(json_object_get(marker_ev, "content"), "round");
	if (json_is_integer(rd) && json_integer_value(rd) > 1)
		return (int)(json_integer_value(rd) < INT32_MAX ? json_integer_value(rd) : INT32_MAX - 1);
	return 1;
}

/* Whether every user_msg after ctx_seq is named by a `steer` event (a send
 * with on_busy = steer made it part of the running turn); 0 when none is
 * owed. A steer event's seqs are those of earlier user_msgs: the steered
 * ones are counted by looking each owed seq up among them. */
static int all_steered(const json_t *events, uint64_t ctx_seq)
{
	size_t i, k;
	json_t *e, *s;
	int owed = 0;
	json_array_foreach(events, i, e) {
		if (strcmp(ev_type(e), "user_msg") || ev_seq(e) <= ctx_seq)
			continue;
		owed = 1;
		int found = 0;
		for (size_t j = i + 1; !found && j < json_array_size(events); j++) {
			json_t *st = json_array_get(events, j);
			if (strcmp(ev_type(st), "steer"))
				continue;
			json_array_foreach(json_object_get(json_object_get(st, "content"), "seqs"), k, s)
				found |= json_is_integer(s) && (uint64_t)json_integer_value(s) == ev_seq(e);
		}
		if (!found)
			return 0;
	}
	return owed;
}

int tail_decide_active(const json_t *events, uint64_t base_ctx, int active, struct tail *t)
{
	size_t i, marker;
	json_t *e;
	int err = -EINVAL;
	memset(t, 0, sizeof *t);
	t->ctx_seq = base_ctx;
	t->calls = json_array();
	t->unsettled = json_array();
	t->settled = json_array();
	if (!t->calls || !t->unsettled || !t->settled) {
		err = -ENOMEM;
		goto bad;
	}
	if (!json_is_array(events) || tail_find_marker(events, active, t, &marker))
		goto bad;
	int turn_had_calls = 0, last_round = 1, in_turn = 0;
	if (marker != (size_t)-1 && !strcmp(ev_type(json_array_get(events, marker)), "assistant_msg")) {
		in_turn = 1;
		last_round = tail_marker_round(json_array_get(events, marker));
		if ((err = tail_collect(events, marker, t)) || (err = tail_match(t)))
			goto bad;
		turn_had_calls = json_array_size(t->calls) > 0;
	}
	if (json_array_size(t->unsettled)) {
		t->action = TAIL_TOOLS;
		return 0;
	}
	/* Owed: the last turn's calls all settled (their results need an
	 * answer), or a user_msg or a scheduled event came after the last
	 * turn's context. */
	json_array_foreach(events, i, e)
		if (conv_is_input(ev_type(e)) && ev_seq(e) > t->ctx_seq)
			t->action = TAIL_TURN;
	/* A user_msg (or a scheduled event) starts the rounds afresh (max_tool_rounds); results
	 * alone continue the turn that asked for them, and so do messages
	 * steered into it (the turn's rounds go on being counted). */
	t->round = t->action == TAIL_TURN && !(in_turn && all_steered(events, t->ctx_seq)) ? 1 : last_round + 1;
	if (turn_had_calls)
		t->action = TAIL_TURN;
	return 0;
bad:
	tail_free(t);
	return err;
}
