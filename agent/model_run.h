/*
 * model_run.h: the worker's call of a model (config.h's model_cfg) for a turn
 * or a summary: a kind exec model is run here as a command speaking the
 * model process protocol (docs/protocol.md; no command: the echo model), an
 * HTTP kind (openai, anthropic: model.h) through agentd-model, the helper
 * beside this program, which makes its attempts and reports them. Streamed
 * text goes to watchers as deltas; the attempts go to the supervisor's
 * metrics.
 *
 * Where a new model kind goes: an HTTP API is a struct model_api in a
 * model_<kind>.c, picked by model.c's model_api_of (agentd-model runs it;
 * nothing here changes); a kind run otherwise is dispatched in model_run.c's
 * model_run_attempts.
 */
#ifndef AGENTD_AGENT_MODEL_RUN_H
#define AGENTD_AGENT_MODEL_RUN_H

#include "agent/model.h"
#include "agent/protocol.h"
#include "agent/worker.h"

struct model_run {
	struct worker_watch watch; /* first: the on_watch/on_start arg is the model_run */
	struct model_reply final;  /* the answer (model_reply_free it) when err is empty */
	int have_final;
	int tries;                 /* the attempts made */
	char err[512];             /* why the call failed; empty on success */
	json_t *audit;    /* the audit row's rendered_context when not the request (HTTP kinds); the caller's */
	json_t *attempts; /* HTTP kinds: agentd-model's attempts (consumed into audit) */
	int failed;       /* HTTP kinds: agentd-model said the call failed */
};

/*
 * Call model mc with request req (not stolen), retrying as mc says; *mr is
 * overwritten. Returns 0 with mr->final (the caller model_reply_frees it)
 * and *latency the answering attempt's milliseconds, or -EIO with mr->err
 * saying why (final empty). Either way mr->tries is set and mr->audit, when
 * not NULL, is the caller's to json_decref (use it as the audit row's
 * request: it is what an HTTP model was sent, and its attempts). Told to
 * stop during the call (a stop read from the socket), exits 0: the turn is
 * re-run on revival.
 */
int model_run(struct worker *w, const struct model_cfg *mc, const json_t *req, struct model_run *mr, int64_t *latency);

#endif
