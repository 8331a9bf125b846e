/*
 * protocol.h: what model and server-tool processes print, and what a tool reads
 * (docs/configuration.md). Pure functions over bytes and jansson values: no I/O.
 *
 * A model prints JSON lines on stdout: any number of {"delta":"text"}, then one
 * final {"text", "tool_calls":[{"id"?, "name", "args"}], "usage":{"input_tokens",
 * "output_tokens", "cost"}}. The usual pattern with proc.h: stream deltas with
 * model_line_parse from proc_opts.on_line (ignoring finals there), then, once
 * the process exited 0, parse proc_result.out whole with model_output_parse.
 *
 * Rules of the parsers:
 *  - Unknown keys are ignored (the protocol grows by new optional fields).
 *    A JSON null counts as an absent field.
 *  - A line is one of: blank (spaces, tabs, '\r'); a delta (an object with
 *    "delta"); a final (an object with "text" or "tool_calls", and no "delta").
 *    Anything else is an error: not JSON, not an object, both a delta and a
 *    final, neither (e.g. {} or a misspelt key), a wrong type, duplicate keys.
 *  - Error messages name the field and, for whole outputs, the line number;
 *    they are written to err (truncated to errlen, always NUL-terminated; err
 *    may be NULL when errlen is 0).
 */
#ifndef AGENTD_PROTOCOL_H
#define AGENTD_PROTOCOL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"

#define TOOL_NAME_MAX 128 /* bytes of a tool call's name, as the store keeps them */

struct model_call {
	/* The model's id, or NULL: absent, null, not a valid tool call id
	 * (1-128 chars of [A-Za-z0-9._:-]) or repeating an earlier call's id in
	 * the same reply. The caller keeps it if the store has not seen it, and
	 * otherwise mints one (docs/protocol.md, "Semantics"). */
	char *id;
	char *name;   /* non-empty */
	json_t *args; /* an object, owned (absent or null: {}) */
};

struct model_reply {
	char *text;               /* never NULL once parsed ("" when absent) */
	struct model_call *calls; /* ncalls entries, in the model's order */
	size_t ncalls;
	uint64_t input_tokens, output_tokens; /* 0 when absent */
	double cost;                          /* finite, >= 0; 0 when absent */
};

/*
 * Parse one stdout line of a model (without its '\n'; a trailing '\r' is
 * fine). Returns
 *   0   blank line (nothing written)
 *   1   a delta: *delta = its text, malloc'd (when delta is not NULL)
 *   2   the final object: *final is overwritten (when final is not NULL; free
 *       it with model_reply_free)
 *  -EINVAL  anything else, with a specific message in err
 *  -ENOMEM  out of memory reading it (err says so)
 * *delta and *final are written only on the return that names them.
 * Types: delta and text strings; tool_calls an array of objects; name a
 * non-empty string of at most TOOL_NAME_MAX bytes; id a string; args
 * an object; usage an object whose input_tokens and output_tokens are
 * non-negative integers and cost a non-negative number.
 */
int model_line_parse(const char *line, size_t len, char **delta, struct model_reply *final,
                     char *err, size_t errlen);

/*
 * A whole captured stdout: lines split on '\n'; blank lines skipped; every
 * line but the last non-blank one a valid delta; the last non-blank one the
 * final. No final, a bad line, or anything after the final (a delta, a second
 * final) is an error. Returns 0 with *r filled (free with model_reply_free;
 * on error *r is zeroed), or -EINVAL with a message like "line 3: ..."
 * (also for a NULL r, and when memory ran out: the message says so).
 */
int model_output_parse(const char *out, size_t len, struct model_reply *r, char *err, size_t errlen);
void model_reply_free(struct model_reply *r); /* frees everything, zeroes *r; NULL fine */

/*
 * A server tool's stdout as the call's result: if the whole output (surrounding
 * whitespace allowed) is one JSON value of any type, nested no deeper than its
 * tool_result event can hold (jsonmp_fits at level 1), that value; otherwise the
 * text as a JSON string with one trailing "\n" (or "\r\n") removed, each
 * maximal ill-formed UTF-8 subsequence replaced by U+FFFD (empty output: "").
 * Returns 0 and a new reference in *result; -EINVAL (result NULL, or out NULL
 * with len > 0); -ENOMEM.
 */
int tool_output_parse(const char *out, size_t len, json_t **result);

/*
 * A server tool's stdin: {"tool_call_id", "name", "args", "conversation"} as
 * compact JSON followed by one '\n' (so line-reading tools see a whole line).
 * args NULL means {}. Returns a malloc'd NUL-terminated string, or NULL with
 * errno EINVAL (a NULL string, args not an object, a string not valid UTF-8)
 * or ENOMEM.
 */
char *tool_input_json(const char *tool_call_id, const char *name, json_t *args, const char *conversation);
/* As tool_input_json, with "attempt": attempt (the dispatch's count, 1 for
 * the first) when attempt > 0. */
char *tool_input_json_attempt(const char *tool_call_id, const char *name, json_t *args, const char *conversation,
			      uint32_t attempt);

#endif
