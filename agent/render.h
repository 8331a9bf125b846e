/*
 * render.h: the worker's pure logic, apart from processes and the store so it
 * can be tested alone: the model's input and the built-in echo model.
 *
 * Events here are JSON objects {seq, type, content} in ascending seq order:
 * the working set (every event after the latest summary).
 */
#ifndef AGENTD_RENDER_H
#define AGENTD_RENDER_H

#include <jansson.h>
#include <stdint.h>

#include "common/config.h"
#include "conv/conv.h"

/* The model's stdin for a turn (docs/configuration.md, "The model process protocol"). summary: the summary
 * object or NULL. Returns a new reference, or NULL when out of memory (never a request with a message or a
 * tool left out). */
json_t *render_turn(const char *conv, uint64_t ctx_seq, const json_t *settings, const struct config *cfg,
		    const json_t *summary, const json_t *events);
/* The model's stdin to summarise `events` (with the previous summary); NULL when out of memory. */
json_t *render_summarize(const char *conv, const json_t *settings, const json_t *summary, const json_t *events);

/* The built-in echo model: the final output line it would print for this
 * request (a JSON object: text, tool_calls, usage). A user message
 * "/tool NAME {json args}" asks for a tool call, so demos can show tools and
 * approvals without a script; after the calls settle it echoes their results.
 * NULL when out of memory (never a reply with a call or a line left out). */
json_t *echo_model(const json_t *request);

#endif
