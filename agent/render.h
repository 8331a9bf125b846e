/*
 * render.h: the worker's pure logic, apart from processes and the store so it
 * can be tested alone: what the log's tail owes (design.md section 3), the
 * model's input, and the built-in echo model.
 *
 * Events here are JSON objects {seq, type, content} in ascending seq order:
 * the working set (every event after the latest summary).
 */
#ifndef AGENTD_RENDER_H
#define AGENTD_RENDER_H

#include <jansson.h>
#include <stdint.h>

#include "supervisor/config.h"

enum tail_action {
	TAIL_IDLE = 0,  /* nothing owed */
	TAIL_TURN,      /* run a model turn */
	TAIL_TOOLS,     /* the last turn has unsettled tool calls: dispatch / wait */
};

struct tail {
	int action;
	uint64_t ctx_seq;    /* context_seq of the last assistant_msg or error (base if none) */
	uint64_t marker_seq; /* seq of that assistant_msg or error; 0 when none */
	json_t *calls;       /* the last turn's tool_call contents, in order (new reference) */
	json_t *unsettled;   /* those of them with no tool_result/resolution yet (new reference) */
	json_t *settled;     /* their settlements' contents, in log order (new reference) */
};

/* Decide from the working set. base_ctx is the summary's to_seq (0 without):
 * everything up to it was answered before it was summarised. Returns 0, or -1
 * when an event is malformed (a record we cannot trust: the caller stops). */
int tail_decide(const json_t *events, uint64_t base_ctx, struct tail *t);
void tail_free(struct tail *t);

/* The model's stdin for a turn (design.md section 8). summary: the summary
 * object or NULL. Returns a new reference. */
json_t *render_turn(const char *conv, uint64_t ctx_seq, const json_t *settings, const struct config *cfg,
		    const json_t *summary, const json_t *events);
/* The model's stdin to summarise `events` (with the previous summary). */
json_t *render_summarize(const char *conv, const json_t *settings, const json_t *summary, const json_t *events);

/* The built-in echo model: the final output line it would print for this
 * request (a JSON object: text, tool_calls, usage). A user message
 * "/tool NAME {json args}" asks for a tool call, so demos can show tools and
 * approvals without a script; after the calls settle it echoes their results. */
json_t *echo_model(const json_t *request);

#endif
