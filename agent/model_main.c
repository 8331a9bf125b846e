/*
 * model_main.c: agentd-model, the helper the worker runs for each call of a
 * kind openai or anthropic model (model.h): libcurl and its TLS stack load
 * here, not in every worker revival.
 *
 *   agentd-model --config FILE --model NAME [--retries N] < request.json
 *
 * --retries: at most N retries, never more than the model's own `retries`
 * (the worker passes what is left of them after a run of this program was
 * killed).
 *
 * stdout: {"delta"} lines as the answer streams, then one final line
 * ({"text", "tool_calls", "usage", "attempts"}, or {"failed", "attempts"});
 * exit 0. Exit 2: a usage or configuration error, or a request that is not
 * a JSON object; exit 1: out of memory for the request or the final line
 * (stderr says which).
 */
#include "agent/jsonb.h"
#include "agent/model.h"
#include "common/config.h"
#include "common/jsonmp.h"
#include "common/log.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line of o (stolen); -1 when it could not be made (out of memory). */
static int put_line(json_t *o)
{
	char *s = jsonmp_dumps(o, JSON_COMPACT, 0, NULL);
	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	free(s);
	json_decref(o);
	return s ? 0 : -1;
}

static void on_delta(void *arg, const char *text, size_t len)
{
	(void)arg;
	(void)put_line(json_pack("{ss#}", "delta", text, (int)len)); /* a delta only shows progress */
}

/* All of f into *buf (free it); -ENOMEM, or -EIO on a read error. */
static int read_all(FILE *f, char **buf, size_t *len)
{
	size_t cap = 0;
	*buf = NULL;
	*len = 0;
	for (;;) {
		if (cap - *len < 4096) {
			size_t ncap = cap ? cap * 2 : 65536;
			char *b = realloc(*buf, ncap);
			if (!b)
				return -ENOMEM;
			*buf = b;
			cap = ncap;
		}
		size_t n = fread(*buf + *len, 1, cap - *len, f);
		*len += n;
		if (n == 0)
			return ferror(f) ? -EIO : 0;
	}
}

/* The request on stdin, read whole, then parsed by jsonmp_loadb: never a
 * request read with a byte left out for want of memory. 0 with *req, or
 * the exit code (1: out of memory, 2: not a JSON object), stderr saying
 * which. */
static int read_request(json_t **req)
{
	json_error_t je = { .text = "cannot read it" };
	char *in = NULL;
	size_t inlen = 0;
	int e = read_all(stdin, &in, &inlen);
	if (!e)
		e = jsonmp_loadb(in, inlen, 0, req, &je);
	free(in);
	if (!e && json_is_object(*req))
		return 0;
	if (e == -ENOMEM)
		fprintf(stderr, "agentd-model: out of memory reading the request\n");
	else
		fprintf(stderr, "agentd-model: the request on stdin is not a JSON object: %s\n",
			e ? je.text : "another JSON value");
	json_decref(*req);
	*req = NULL;
	return e == -ENOMEM ? 1 : 2;
}

/* The final line; NULL when out of memory (never one short of a call). */
static json_t *reply_json(const struct model_reply *r, json_t *attempts)
{
	int oom = 0;
	json_t *calls = jb_check(&oom, json_array());
	for (size_t i = 0; i < r->ncalls; i++) {
		json_t *c = jb_check(&oom, json_pack("{sssO}", "name", r->calls[i].name, "args", r->calls[i].args));
		if (r->calls[i].id)
			jb_set(&oom, c, "id", json_string(r->calls[i].id));
		jb_append(&oom, calls, c);
	}
	if (oom) {
		json_decref(calls);
		json_decref(attempts);
		return NULL;
	}
	return json_pack("{sssos{sIsIsf}so}", "text", r->text, "tool_calls", calls, "usage", "input_tokens",
			 (json_int_t)r->input_tokens, "output_tokens", (json_int_t)r->output_tokens, "cost", r->cost,
			 "attempts", attempts);
}

/* The command line into *config, *name and *retries (-1: the model's own):
 * -1 to go on, or the status to exit with (0 after --help, 2 for a usage
 * error, said on stderr). */
static int parse_args(int argc, char **argv, const char **config, const char **name, long *retries)
{
	static const struct option opts[] = {
		{ "config", required_argument, 0, 'C' }, { "model", required_argument, 0, 'm' },
		{ "retries", required_argument, 0, 'r' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	char *endp;
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'C': *config = optarg; break;
		case 'm': *name = optarg; break;
		case 'r':
			*retries = strtol(optarg, &endp, 10);
			if (*optarg < '0' || *optarg > '9' || *endp || *retries > 100) {
				fprintf(stderr, "agentd-model: --retries takes 0 to 100\n");
				return 2;
			}
			break;
		case 'h':
			printf("usage: agentd-model --config FILE --model NAME [--retries N] < request.json\n"
			       "Makes one call of an HTTP model (kind openai or anthropic); run by agentd-worker.\n");
			return 0;
		default: return 2;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	const char *config = NULL, *name = NULL;
	long retries = -1;
	jsonmp_alloc_init(); /* before any JSON is read: jsonmp_loadb sees every failed allocation */
	int st = parse_args(argc, argv, &config, &name, &retries);
	if (st >= 0)
		return st;
	log_init("agentd-model", LOG_ERROR); /* the worker logs each attempt */
	if (!config || !name) {
		fprintf(stderr, "agentd-model: --config and --model are required\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct config cfg;
	char err[512];
	config_init(&cfg);
	if (config_load(&cfg, config, err, sizeof err)) {
		fprintf(stderr, "agentd-model: %s\n", err);
		config_free(&cfg);
		return 2;
	}
	const struct model_cfg *found = config_model(&cfg, name);
	if (!found || found->kind == MODEL_EXEC) {
		fprintf(stderr, "agentd-model: %s is not a model of kind openai or anthropic in %s\n", name, config);
		config_free(&cfg);
		return 2;
	}
	struct model_cfg m = *found; /* borrows found's strings: cfg outlives it */
	if (retries >= 0 && retries < m.retries)
		m.retries = (int)retries;
	const struct model_cfg *mc = &m;
	json_t *req = NULL;
	int rc = read_request(&req);
	if (rc) {
		config_free(&cfg);
		return rc;
	}
	if (model_http_init()) {
		fprintf(stderr, "agentd-model: cannot initialise libcurl\n");
		json_decref(req);
		config_free(&cfg);
		return 2;
	}
	struct model_hooks h = { on_delta, -1, NULL, NULL };
	struct model_reply r;
	struct model_outcome oc;
	rc = model_http_run(mc, req, &h, &r, &oc);
	json_t *att = model_attempts_json(&oc);
	json_t *out = !att ? NULL
		      : rc == 0 ? reply_json(&r, att)
				: json_pack("{soso}", "failed", json_text(oc.err, strlen(oc.err)), "attempts", att);
	model_reply_free(&r);
	model_outcome_free(&oc);
	json_decref(req);
	config_free(&cfg);
	if (put_line(out)) {
		/* Never a final line short of a call or an attempt: the worker
		 * reports this exit and its stderr. */
		fprintf(stderr, "agentd-model: out of memory for the final line\n");
		return 1;
	}
	return 0;
}
