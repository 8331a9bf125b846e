/*
 * conv.h: the conversation rules, written once and used by both programs
 * (agentd and agentd-worker) and by `agentd check`: what a log's tail owes,
 * how a tool call is settled, how an error is recorded, records as JSON.
 *
 * Events here are JSON objects {seq, type, content} in ascending seq order:
 * the working set (every event after the latest summary).
 */
#ifndef AGENTD_CONV_H
#define AGENTD_CONV_H

#include <jansson.h>
#include <stdint.h>

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

#endif
