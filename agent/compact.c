/*
 * compact.c: compaction of the working set into a summary (compact.h).
 */
#include "agent/compact.h"
#include "agent/budget.h"
#include "agent/model_run.h"
#include "agent/render.h"
#include "agent/wipc.h"
#include "agent/workset.h"
#include "agent/wstore.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The seqs the next summary covers: after the last summary, up to keep
 * events short of the end, never past the last turn boundary (so the tail
 * decision still sees the last turn). *to < *from: nothing to summarise.
 * 0, or tail_decide's -EINVAL or -ENOMEM when the tail cannot be read. */
static int compact_range(struct worker *w, int keep, uint64_t *from, uint64_t *to)
{
	struct tail tl;
	int e = tail_decide(w->events, w->sum_to, &tl);
	if (e)
		return e;
	*to = w->last_seq > (uint64_t)keep ? w->last_seq - (uint64_t)keep : 0;
	if (tl.marker_seq && *to >= tl.marker_seq)
		*to = tl.marker_seq - 1;
	if (!tl.marker_seq)
		*to = 0;
	tail_free(&tl);
	*from = w->sum_to + 1;
	return 0;
}

/* Commit the summary of from..to (content, stolen) with the call's usage
 * and audit row (req), then start the working set after it. */
static void compact_commit(struct worker *w, const struct model_cfg *mc, uint64_t from, uint64_t to, json_t *content,
			   const json_t *req, const struct model_reply *r, int64_t latency)
{
	wstore_reserve(w, strlen(r->text) + (w->cfg.audit ? wstore_json_size(req) : 0));
	store_txn *t = wstore_wbegin(w, 1);
	struct jsonmp_buf b;
	uint64_t version = 0;
	int rc = store_summary_put(t, w->conv, from, to, wstore_pack(w, &b, content), &version);
	jsonmp_buf_destroy(&b);
	wstore_must(w, t, rc, "put summary");
	struct store_usage u = { r->input_tokens, r->output_tokens, r->cost };
	wstore_must(w, t, store_usage_add(t, w->conv, &u), "usage");
	wstore_audit(w, t, AUDIT_SUMMARY_BIT | to, req, mc->name, &u, latency);
	wstore_commit(w, t, "commit summary", 0);
	json_t *rest = workset_between(w, to + 1, UINT64_MAX);
	json_t *sum = json_pack("{sIsIsosI}", "from_seq", (json_int_t)from, "to_seq", (json_int_t)to, "content", content,
				"version", (json_int_t)version);
	if (!rest || !sum) {
		/* Committed: the next worker reads the summary and the log
		 * after it from the store; this one's view would be short. */
		log_error("%s: out of memory after compacting; exiting", w->conv);
		exit(IPC_EXIT_STORE);
	}
	json_decref(w->events);
	w->events = rest;
	json_decref(w->summary);
	w->summary = sum;
	w->sum_to = to;
	w->sum_version = version;
	log_info("%s: compacted seqs %llu-%llu into summary v%llu", w->conv, (unsigned long long)from,
		 (unsigned long long)to, (unsigned long long)version);
}

/* Summarise the oldest part of the working set (compact_range). The log is
 * untouched; the next revival starts from the summary. keep: events left
 * after it. */
int compact_run(struct worker *w, int keep, char *err, size_t errlen)
{
	uint64_t from, to;
	int e = compact_range(w, keep, &from, &to);
	if (e) {
		snprintf(err, errlen, "the log's tail cannot be read");
		return e;
	}
	if (to < from)
		return 0; /* nothing old enough to summarise */
	json_t *msgs = workset_between(w, 0, to);
	if (!msgs) { /* a summary short of an event would stand for it */
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	const char *model = json_string_value(json_object_get(w->settings, "model"));
	const struct model_cfg *mc = model ? config_model(&w->cfg, model) : NULL;
	if (!mc) {
		json_decref(msgs);
		snprintf(err, errlen, "model '%s' is not in the configuration", model ? model : "(none)");
		return -ENOENT;
	}
	/* A summary's model call is paid from the same budget. */
	store_txn *bt = wstore_rbegin(w);
	const char *spent = budget_spent(w, bt, NULL);
	store_txn_abort(bt);
	if (spent) {
		json_decref(msgs);
		snprintf(err, errlen, "the budget's %s is reached: no model call (raise it with update)", spent);
		return -EDQUOT;
	}
	wipc_report_state(w, "compacting");
	json_t *req = render_summarize(w->conv, w->settings, w->summary, msgs);
	json_decref(msgs);
	if (!req) {
		snprintf(err, errlen, "out of memory rendering the summary's request");
		return -ENOMEM;
	}
	struct model_run mr;
	int64_t latency = 0;
	e = model_run(w, mc, req, &mr, &latency);
	if (mr.audit) { /* what an HTTP model was sent, and its attempts */
		json_decref(req);
		req = mr.audit;
	}
	/* Stored without its text, it would be a summary of nothing. */
	json_t *content = e ? NULL : json_pack("{ss}", "text", mr.final.text);
	if (content)
		compact_commit(w, mc, from, to, content, req, &mr.final, latency);
	else
		snprintf(err, errlen, "%s", e ? mr.err : "out of memory");
	json_decref(req);
	model_reply_free(&mr.final);
	return content ? 0 : e ? e : -ENOMEM;
}

/* One compaction answers every request queued before it began; those that
 * arrive during it (its model call reads IPC) get the next one. */
void compact_answer(struct worker *w)
{
	while (w->ncompact > 0) {
		char err[512] = "";
		size_t n = w->ncompact;
		int ok = compact_run(w, 0, err, sizeof err) == 0;
		for (size_t i = 0; i < n; i++) {
			struct ipc_msg m = { .type = IPC_COMPACTED, .num = w->compacts[i], .ok = ok, .text = err,
					     .text_len = strlen(err) };
			ipc_send(w->ipc, &m);
		}
		w->ncompact -= n;
		memmove(w->compacts, w->compacts + n, w->ncompact * sizeof *w->compacts);
		/* compact_run said "compacting": say again what it is now (idle,
		 * awaiting_input), or it would never be evicted. */
		wipc_report_state(w, w->reported);
	}
}
