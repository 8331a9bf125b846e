/*
 * model.h: the built-in HTTP model clients, kinds `openai` (any
 * OpenAI-compatible chat completions server) and `anthropic` (the Messages
 * API); docs/models.md. The worker gives them the same request an exec model
 * reads on stdin (render.h) and gets the same struct model_reply back.
 *
 * Rendering keeps each API's rules (model_transcript): a tool result right
 * after the assistant message that called it, each call answered once,
 * messages that arrived while a turn ran or a call awaited a person placed
 * after that turn's results (by the assistant_msg's context_seq).
 *
 * Retries: 408, 409, 429, 5xx, a stream error event the API marks as
 * transient, a timeout, a connection failure or a response cut mid-stream
 * are retried up to `retries` times with exponential backoff and jitter,
 * never sooner than Retry-After (a longer one than model_retry_after_max
 * ends the call); any other status ends at once, quoting the server's
 * message. The calls run in agentd-model (below), not in the worker.
 */
#ifndef AGENTD_MODEL_H
#define AGENTD_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/protocol.h"
#include "agent/sse.h"
#include "common/config.h"

struct model_api;

struct model_hooks {
	/* Streamed text, as it arrives (a retried attempt streams again). */
	void (*on_delta)(void *arg, const char *text, size_t len);
	int watch_fd;               /* -1: none */
	int (*on_watch)(void *arg); /* watch_fd readable; non-zero: stop now */
	void *arg;
};

/* What one attempt did, for the audit and the log. */
struct model_attempt {
	long status;          /* HTTP status, 0: none */
	int64_t elapsed_ms;
	int64_t retry_after_ms; /* -1: none given */
	int64_t wait_ms;      /* waited after it before the next attempt */
	char error[300];      /* "" for the attempt that succeeded */
};

struct model_outcome {
	int attempts;
	struct model_attempt att[101]; /* retries are at most 100 */
	json_t *body;         /* the request body sent (owned) */
	char url[512];
	int64_t latency_ms;   /* the successful attempt's */
	char err[400];        /* why the call failed: the last attempt's error */
};

/* ---- agentd-model, the helper that makes the call (model_http.c) ------
 *
 * The worker stays statically linked and quick to start: libcurl and its
 * TLS stack load only in the helper, `agentd-model --config FILE --model
 * NAME`, which the worker runs beside itself for each call, as an exec
 * model's command, reading the same request on stdin. It prints {"delta"}
 * lines, then either a final {"text", "tool_calls", "usage", "attempts"}
 * line or {"failed": "message", "attempts"}, and exits 0; attempts is
 * model_attempts_json's array. */

/* Once per process (libcurl). */
int model_http_init(void);

/*
 * One model call for a kind openai or anthropic model: render req (render.h's
 * turn or summarize request), POST, stream, retry. Returns 0 with *out filled
 * (model_reply_free it); -1 with oc->err; -ECANCELED when on_watch asked to
 * stop. Free oc with model_outcome_free either way.
 */
int model_http_run(const struct model_cfg *mc, const json_t *req, const struct model_hooks *h,
		   struct model_reply *out, struct model_outcome *oc);
void model_outcome_free(struct model_outcome *oc);
/* Each attempt: [{"status", "elapsed_ms", "wait_ms", "retry_after_ms"?, "error"?}]; NULL when out of memory. */
json_t *model_attempts_json(const struct model_outcome *oc);

/* The longest Retry-After a call waits for: max(backoff_max, 60 s). A
 * server asking for more ends the call (the worker bounds the helper's run
 * by model_call_budget). */
static inline int64_t model_retry_after_max(const struct model_cfg *mc)
{
	return mc->backoff_max_ms > 60000 ? mc->backoff_max_ms : 60000;
}

/* The longest a whole call may take with its retries and waits. */
static inline int64_t model_call_budget(const struct model_cfg *mc)
{
	return (int64_t)(mc->retries + 1) * (mc->timeout_ms + mc->connect_timeout_ms) +
	       (int64_t)mc->retries * model_retry_after_max(mc) + 10000;
}

/* The API of a model's kind, and the URL it posts to. */
const struct model_api *model_api_of(const struct model_cfg *mc);
void model_url(const struct model_cfg *mc, char *buf, size_t len);

/*
 * The API-neutral transcript of a request's messages, in the order the APIs
 * accept: [{"role":"user","text"}, {"role":"assistant","text","calls":[{id,
 * name,args}]}, {"role":"tool","id","name","status","result"}]. Every call
 * gets exactly one tool item right after its assistant item (a call with no
 * result yet: status "missing"); a result whose call is not in the
 * transcript (summarised away) becomes a user note. NULL when out of memory
 * (never a transcript with an item left out).
 */
json_t *model_transcript(const json_t *req);
/* The system text: the request's system prompt and its summary, if any;
 * NULL when out of memory. */
char *model_system_text(const json_t *req);
/* The instruction appended to a summarize request. */
extern const char model_summarize_prompt[];
/* A tool result's content as text for the APIs; NULL when out of memory. */
char *model_result_text(const json_t *tool_item);

/* ---- between model.c and the two APIs -------------------------------- */

struct stream_call {
	int index;       /* the API's index of the call (or content block) */
	char *id, *name;
	char *args;      /* JSON text, as streamed */
	size_t alen;
};

struct stream {
	const struct model_hooks *h;
	char *text;
	size_t tlen, tcap;
	struct stream_call *calls;
	size_t ncalls;
	uint64_t in_tok, out_tok;
	int done;            /* the stream's end marker was seen */
	int failed;          /* an error inside the stream: err says it */
	int transient;       /* ... and it may pass */
	char err[300];
};

int stream_text(struct stream *s, const char *p, size_t n);
/* The finished stream as a reply (the text moves); -1 with err. */
int stream_reply(struct stream *s, struct model_reply *r, char *err, size_t errlen);
void stream_free(struct stream *s);
struct stream_call *stream_call_at(struct stream *s, int index);
int stream_append(char **buf, size_t *len, const char *p, size_t n);

/* settings.params and the configured params merged into an API body,
 * never over the keys is_owned names. 0 or -ENOMEM. */
int model_merge_params(json_t *body, const struct model_cfg *mc, const json_t *req, int (*is_owned)(const char *));
/* The request's tools as an API defines them: each {name, <schema_key>:
 * its input schema (an MCP tool's, else an object schema with no
 * properties), description when it has one}, inside {"type": wrap, wrap:
 * ...} when wrap is not NULL. NULL when out of memory. */
json_t *model_tools(const json_t *tools, const char *schema_key, const char *wrap);
/* A summarize request's one user text: the transcript and the instruction;
 * NULL when out of memory. */
json_t *model_summary_text(const json_t *transcript);

struct model_api {
	const char *path; /* appended to base_url */
	json_t *(*body)(const struct model_cfg *mc, const json_t *req); /* NULL: out of memory */
	/* Its headers into out (at most 4), given the key (NULL: the
	 * variable is unset); returns how many. */
	size_t (*headers)(const char *key, char out[][600]);
	/* 0, or non-zero with s->err when out of memory (the transfer stops). */
	int (*event)(struct stream *s, const char *type, const char *data, size_t len);
};
extern const struct model_api model_api_openai, model_api_anthropic;

#endif
