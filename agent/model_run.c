/*
 * model_run.c: the worker's model calls (model_run.h): a kind exec model
 * run here (or the echo model), an HTTP kind through agentd-model.
 */
#include "agent/model_run.h"
#include "agent/isolate.h"
#include "agent/render.h"
#include "agent/wipc.h"
#include "agent/wstore.h"
#include "common/cmdline.h"
#include "common/jsonmp.h"
#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A model's streamed text to watchers. */
static void send_delta(struct worker *w, const char *text, size_t len)
{
	struct ipc_msg m = { .type = IPC_DELTA, .text = text, .text_len = len };
	if (m.text_len > IPC_MAX - 256) {
		/* A live view only (the final text is whole), cut where
		 * a character begins: watchers get UTF-8. */
		m.text_len = IPC_MAX - 256;
		while (m.text_len > 0 && ((unsigned char)text[m.text_len] & 0xC0) == 0x80)
			m.text_len--;
	}
	ipc_send(w->ipc, &m);
}

static int on_model_line(void *arg, const char *line, size_t len)
{
	struct model_run *mr = arg;
	struct worker *w = mr->watch.w;
	char *delta = NULL;
	struct model_reply fin = { 0 };
	int rc = model_line_parse(line, len, &delta, &fin, mr->err, sizeof mr->err);
	if ((rc == 1 || rc == 2) && mr->have_final) {
		/* as model_output_parse: the final line is the last */
		free(delta);
		model_reply_free(&fin);
		snprintf(mr->err, sizeof mr->err, "model printed output after its final line");
		return 2;
	}
	if (rc == 1) {
		send_delta(w, delta, strlen(delta));
		free(delta);
		return 0;
	}
	if (rc == 2) {
		mr->final = fin;
		mr->have_final = 1;
		return 0;
	}
	if (rc == 0)
		return 0;
	return 2; /* bad line: err says why */
}

static int on_model_watch(void *arg)
{
	struct model_run *mr = arg;
	if (wipc_drain(mr->watch.w)) {
		mr->watch.stop = 1;
		return 1;
	}
	return 0;
}

/* How a command ended, for an error: "exited with status 3: <stderr's
 * tail>" or "killed by signal 9", the tail (trailing blanks cut) only when
 * there is one: never a dangling separator. */
static void end_text(const struct proc_result *r, char *buf, size_t len)
{
	size_t n = r->err ? r->err_len : 0;
	while (n > 0 && (r->err[n - 1] == '\n' || r->err[n - 1] == ' ' || r->err[n - 1] == '\t' || r->err[n - 1] == '\r'))
		n--;
	int k = snprintf(buf, len, "%s %d", r->exited ? "exited with status" : "killed by signal",
			 r->exited ? r->status : r->sig);
	if (n > 0 && k > 0 && (size_t)k < len)
		snprintf(buf + k, len - (size_t)k, ": %.*s", (int)(n > 200 ? 200 : n), r->err);
}

/* Wait before retry i + 1 (200 ms more each time), still listening for
 * stop: told to stop, exits 0 (the turn is re-run on revival). */
static void retry_backoff(struct worker *w, int i)
{
	struct pollfd p = { w->ipc, POLLIN, 0 };
	if (poll(&p, 1, 200 * (i + 1)) > 0 && wipc_drain(w))
		exit(0);
}

/* One attempt. 0 with mr->final, -EIO with mr->err; exits when told to stop. */
static int model_attempt(struct worker *w, const struct model_cfg *mc, const json_t *req, struct model_run *mr,
			 int64_t *latency)
{
	memset(mr, 0, sizeof *mr);
	mr->watch.w = w;
	if (!mc->command) {
		json_t *out = echo_model(req);
		char *line = jsonmp_dumps(out, JSON_COMPACT, 0, NULL);
		json_decref(out);
		int rc = line ? model_output_parse(line, strlen(line), &mr->final, mr->err, sizeof mr->err) : -ENOMEM;
		if (!line) /* an empty err would read as success */
			snprintf(mr->err, sizeof mr->err, "model %s (echo): out of memory", mc->name);
		free(line);
		*latency = 0;
		return rc ? -EIO : 0;
	}
	char **argv = NULL;
	if (cmdline_split(mc->command, &argv)) {
		snprintf(mr->err, sizeof mr->err, "model %s: cannot split its command", mc->name);
		return -EIO;
	}
	char *input = jsonmp_dumps(req, JSON_COMPACT, 0, NULL);
	if (!input) { /* never run the model without its request */
		cmdline_free(argv);
		snprintf(mr->err, sizeof mr->err, "model %s: out of memory", mc->name);
		return -EIO;
	}
	char env1[200];
	snprintf(env1, sizeof env1, "AGENTD_CONVERSATION=%s", w->conv);
	const char *env[] = { env1, NULL };
	struct proc_opts o = {
		.env_add = env, .iso = &mc->iso, .sandbox = &w->sandbox, .input = input,
		.input_len = input ? strlen(input) : 0, .timeout_ms = mc->timeout_ms, .out_cap = w->cfg.model_out_cap, .on_line = on_model_line,
		.arg = mr, .watch_fd = w->ipc, .on_watch = on_model_watch, .on_start = wipc_on_start,
	};
	struct proc_result r;
	int rc = wstore_run_command(w, argv, &o, &r);
	free(input);
	cmdline_free(argv);
	*latency = r.elapsed_ms;
	if (mr->watch.stop || rc == -ECANCELED) {
		proc_result_free(&r);
		model_reply_free(&mr->final);
		log_info("%s: stopped during a model call; the turn is re-run on revival", w->conv);
		exit(0);
	}
	int ok = 0;
	char why[300];
	if (rc < 0 && rc != -ECANCELED && rc != 2) {
		isolate_strerror(rc, why, sizeof why);
		snprintf(mr->err, sizeof mr->err, "cannot run model %s: %s", mc->name, why);
	} else if (rc == 2)
		; /* err set by on_model_line */
	else if (r.timed_out)
		snprintf(mr->err, sizeof mr->err, "model %s timed out after %lld ms", mc->name, (long long)mc->timeout_ms);
	else if (r.out_overflow)
		snprintf(mr->err, sizeof mr->err, "model %s wrote more than %zu bytes", mc->name, w->cfg.model_out_cap);
	else if (!r.exited || r.status != 0) {
		end_text(&r, why, sizeof why);
		snprintf(mr->err, sizeof mr->err, "model %s %s", mc->name, why);
	} else if (!mr->have_final)
		snprintf(mr->err, sizeof mr->err, "model %s printed no final line", mc->name);
	else
		ok = 1;
	proc_result_free(&r);
	if (!ok) {
		model_reply_free(&mr->final);
		mr->have_final = 0;
		return -EIO;
	}
	return 0;
}

/* agentd-model, beside this program (model.h). */
static const char *model_helper(void)
{
	static char path[4096];
	static const char *p;
	if (!p)
		p = proc_beside_self("agentd-model", path, sizeof path);
	return p;
}

/* The helper's lines: attempts and a failure are its own; the rest is the
 * model process protocol. */
static int on_http_line(void *arg, const char *line, size_t len)
{
	struct model_run *mr = arg;
	json_t *j;
	if (jsonmp_loadb(line, len, 0, &j, NULL) == -ENOMEM) {
		snprintf(mr->err, sizeof mr->err, "out of memory reading agentd-model's output");
		return 2; /* never its failure or attempts missed */
	}
	json_t *att = json_object_get(j, "attempts");
	if (json_is_array(att)) {
		json_decref(mr->attempts);
		mr->attempts = json_incref(att);
	}
	const char *failed = json_string_value(json_object_get(j, "failed"));
	if (failed) {
		snprintf(mr->err, sizeof mr->err, "%s", failed);
		mr->failed = 1;
		json_decref(j);
		return 0;
	}
	json_decref(j);
	return on_model_line(arg, line, len);
}

/* The helper's environment: the minimal one (isolate.h) plus what it needs
 * of the worker's: the key api_key_env names, and libcurl's proxy and CA
 * settings. envs holds 16; *ne gets the number set (free each, also on
 * failure). 0, or -ENOMEM: a helper run without its key or conversation
 * would fail as something else. */
static int model_helper_env(struct worker *w, const struct model_cfg *mc, char *envs[16], size_t *ne)
{
	static const char *const pass[] = { "https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy",
					    "NO_PROXY", "all_proxy", "ALL_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
					    "CURL_CA_BUNDLE", NULL };
	int e = 0;
	*ne = 0;
	if (asprintf(&envs[*ne], "AGENTD_CONVERSATION=%s", w->conv) >= 0)
		++*ne;
	else
		e = -ENOMEM;
	const char *key = mc->api_key_env ? getenv(mc->api_key_env) : NULL;
	if (!e && key) {
		if (asprintf(&envs[*ne], "%s=%s", mc->api_key_env, key) >= 0)
			++*ne;
		else
			e = -ENOMEM;
	}
	for (const char *const *p = pass; !e && *p; p++) {
		const char *v = getenv(*p);
		if (!v)
			continue;
		if (asprintf(&envs[*ne], "%s=%s", *p, v) >= 0)
			++*ne;
		else
			e = -ENOMEM;
	}
	envs[*ne] = NULL; /* also where a failed asprintf left its pointer undefined */
	return e;
}

/* Log each failed attempt of mr->attempts from index from on (those the
 * last run of agentd-model reported; an interrupted run's was logged when
 * it ended), and make the audit row: what was sent (rendered here as the
 * helper did) and every attempt. */
static void model_attempts_done(struct worker *w, const struct model_cfg *mc, const json_t *req,
				struct model_run *mr, size_t from)
{
	size_t i;
	json_t *a;
	json_array_foreach(mr->attempts, i, a) {
		const char *e = json_string_value(json_object_get(a, "error"));
		if (i < from || !e)
			continue;
		json_int_t wait = json_integer_value(json_object_get(a, "wait_ms"));
		if (wait > 0)
			log_warn("%s: model %s attempt %zu of %d failed: %s; retrying in %lld ms", w->conv, mc->name, i + 1,
				 mc->retries + 1, e, (long long)wait);
		else
			log_warn("%s: model %s attempt %zu of %d failed: %s", w->conv, mc->name, i + 1, mc->retries + 1, e);
	}
	char url[512];
	model_url(mc, url, sizeof url);
	json_t *body = model_api_of(mc)->body(mc, req);
	mr->audit = json_pack("{sssoso}", "url", url, "body", body ? body : json_null(), "attempts",
			      mr->attempts ? json_incref(mr->attempts) : json_array());
	json_decref(mr->attempts);
	mr->attempts = NULL;
}

/* One run of agentd-model (argv) with at most retries retries of its own:
 * mr's answer or err, and the attempts it reported in mr->attempts.
 * Returns 1 when it was killed by a signal that is not the worker's (kill
 * -9, a crash): it reported nothing, and its one attempt was interrupted;
 * else 0. Exits when told to stop. */
static int model_helper_run(struct worker *w, const struct model_cfg *mc, char **argv, struct proc_opts *o,
			    struct model_run *mr, int64_t *latency)
{
	model_reply_free(&mr->final);
	mr->have_final = mr->failed = 0;
	mr->err[0] = 0;
	struct proc_result r;
	int rc = wstore_run_command(w, argv, o, &r);
	*latency = r.elapsed_ms;
	if (mr->watch.stop || rc == -ECANCELED) {
		proc_result_free(&r);
		model_reply_free(&mr->final);
		json_decref(mr->attempts);
		log_info("%s: stopped during a model call; the turn is re-run on revival", w->conv);
		exit(0);
	}
	int killed = 0;
	char end[300];
	if (mr->failed && rc == 0 && r.exited && r.status == 0)
		; /* err holds the helper's message */
	else if (rc < 0) {
		isolate_strerror(rc, end, sizeof end);
		snprintf(mr->err, sizeof mr->err, "cannot run %s: %s", argv[0], end);
	} else if (rc == 2)
		; /* err set by on_model_line */
	else if (r.timed_out)
		snprintf(mr->err, sizeof mr->err, "model %s: no answer within %lld ms", mc->name,
			 (long long)model_call_budget(mc));
	else if (r.out_overflow)
		snprintf(mr->err, sizeof mr->err, "model %s wrote more than %zu bytes", mc->name, w->cfg.model_out_cap);
	else if (!r.exited || r.status != 0) {
		end_text(&r, end, sizeof end);
		snprintf(mr->err, sizeof mr->err, "model %s: agentd-model %s", mc->name, end);
		killed = !r.exited && !mr->have_final && !mr->failed;
	} else if (!mr->have_final)
		snprintf(mr->err, sizeof mr->err, "model %s: agentd-model printed no final line", mc->name);
	proc_result_free(&r);
	if (mr->err[0]) {
		model_reply_free(&mr->final);
		mr->have_final = 0;
	} else if (mr->attempts) {
		/* the latency of the attempt that answered */
		json_t *last = json_array_get(mr->attempts, json_array_size(mr->attempts) - 1);
		*latency = json_integer_value(json_object_get(last, "elapsed_ms"));
	}
	return killed;
}

/* A kind openai or anthropic model: runs of agentd-model, which makes the
 * attempts (model.h); each is in the audit row (mr->audit) and the log. A
 * run killed by a signal (kill -9 of agentd-model, a crash) is one
 * interrupted attempt, retried like an exec model's with what is left of
 * mc->retries (passed to the next run as --retries): it printed no final
 * line, so its usage is never counted. The attempts made in mr->tries;
 * mr->err empty on success. */
static void model_run_http(struct worker *w, const struct model_cfg *mc, const json_t *req, struct model_run *mr,
			   int64_t *latency)
{
	memset(mr, 0, sizeof *mr);
	mr->watch.w = w;
	mr->tries = 1;
	if (!w->cfg.path) {
		snprintf(mr->err, sizeof mr->err, "model %s: no configuration file to give agentd-model", mc->name);
		return;
	}
	char left[16];
	char *argv[] = { (char *)model_helper(), "--config", w->cfg.path, "--model", mc->name, "--retries", left, NULL };
	char *input = jsonmp_dumps(req, JSON_COMPACT, 0, NULL);
	json_t *all = json_array(); /* every attempt of every run */
	char *envs[16] = { 0 };
	size_t ne = 0;
	if (model_helper_env(w, mc, envs, &ne) || !input || !all) {
		for (size_t i = 0; i < ne; i++)
			free(envs[i]);
		free(input);
		json_decref(all);
		snprintf(mr->err, sizeof mr->err, "model %s: out of memory", mc->name);
		return;
	}
	/* No sandbox: agentd-model reads the configuration for its keys. */
	struct proc_opts o = {
		.env_add = (const char *const *)envs, .iso = &mc->iso, .input = input,
		.input_len = input ? strlen(input) : 0,
		.timeout_ms = model_call_budget(mc), .out_cap = w->cfg.model_out_cap, .on_line = on_http_line,
		.arg = mr, .watch_fd = w->ipc, .on_watch = on_model_watch, .on_start = wipc_on_start,
	};
	int used = 0, oom = 0, killed;
	for (;;) {
		snprintf(left, sizeof left, "%d", mc->retries - used);
		if (!(killed = model_helper_run(w, mc, argv, &o, mr, latency)))
			break;
		used++;
		int retry = used <= mc->retries;
		int64_t wait = retry ? 200 * used : 0;
		oom |= json_array_append_new(all, json_pack("{sisIsIss}", "status", 0, "elapsed_ms", (json_int_t)*latency,
							   "wait_ms", (json_int_t)wait, "error", mr->err));
		if (!retry) {
			log_warn("%s: model %s attempt %d of %d interrupted: %s", w->conv, mc->name, used, mc->retries + 1,
				 mr->err);
			break;
		}
		log_warn("%s: model %s attempt %d of %d interrupted: %s; retrying in %lld ms", w->conv, mc->name, used,
			 mc->retries + 1, mr->err, (long long)wait);
		retry_backoff(w, used - 1);
	}
	free(input);
	for (size_t i = 0; i < ne; i++)
		free(envs[i]);
	/* The last run's own attempts; one when it reported none (it could
	 * not start, or exited without its final line). */
	size_t from = json_array_size(all);
	int unreported = !killed && !mr->attempts;
	if (mr->attempts)
		oom |= json_array_extend(all, mr->attempts);
	json_decref(mr->attempts);
	mr->attempts = all;
	if (oom && !mr->err[0]) /* never an answer whose attempts went unrecorded */
		snprintf(mr->err, sizeof mr->err, "model %s: out of memory recording its attempts", mc->name);
	mr->tries = (int)json_array_size(all) + unreported;
	model_attempts_done(w, mc, req, mr, from);
}


/* Run with retries: the attempts made in mr->tries; mr->err empty on
 * success. A new model kind that is not an HTTP API (those are run by
 * agentd-model: model.h) is run from here. */
static void model_run_attempts(struct worker *w, const struct model_cfg *mc, const json_t *req, struct model_run *mr,
			       int64_t *latency)
{
	if (mc->kind != MODEL_EXEC) {
		model_run_http(w, mc, req, mr, latency);
		return;
	}
	int attempts = 0;
	for (int i = 0; i <= mc->retries; i++) {
		attempts++;
		if (model_attempt(w, mc, req, mr, latency) == 0) {
			mr->err[0] = 0;
			mr->tries = attempts;
			return;
		}
		log_warn("%s: model attempt %d of %d failed: %s", w->conv, attempts, mc->retries + 1, mr->err);
		if (i < mc->retries)
			retry_backoff(w, i);
	}
	mr->tries = attempts;
}

/* model_run_attempts, and its attempts told to the supervisor's metrics. */
int model_run(struct worker *w, const struct model_cfg *mc, const json_t *req, struct model_run *mr, int64_t *latency)
{
	model_run_attempts(w, mc, req, mr, latency);
	struct ipc_msg m = { .type = IPC_MODEL, .num = mr->tries, .ok = !mr->err[0] };
	ipc_send(w->ipc, &m);
	return mr->err[0] ? -EIO : 0;
}
