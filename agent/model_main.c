/*
 * model_main.c: agentd-model, the helper the worker runs for each call of a
 * kind openai or anthropic model (model.h): libcurl and its TLS stack load
 * here, not in every worker revival.
 *
 *   agentd-model --config FILE --model NAME < request.json
 *
 * stdout: {"delta"} lines as the answer streams, then one final line
 * ({"text", "tool_calls", "usage", "attempts"}, or {"failed", "attempts"});
 * exit 0. Exit 2: a usage or configuration error (stderr says which).
 */
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

static void put_line(json_t *o)
{
	char *s = jsonmp_dumps(o, JSON_COMPACT, 0, NULL);
	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	free(s);
	json_decref(o);
}

static void on_delta(void *arg, const char *text, size_t len)
{
	(void)arg;
	put_line(json_pack("{ss#}", "delta", text, (int)len));
}

static json_t *reply_json(const struct model_reply *r, json_t *attempts)
{
	json_t *calls = json_array();
	for (size_t i = 0; i < r->ncalls; i++) {
		json_t *c = json_pack("{sssO}", "name", r->calls[i].name, "args", r->calls[i].args);
		if (r->calls[i].id)
			json_object_set_new(c, "id", json_string(r->calls[i].id));
		json_array_append_new(calls, c);
	}
	return json_pack("{sssos{sIsIsf}so}", "text", r->text, "tool_calls", calls, "usage", "input_tokens",
			 (json_int_t)r->input_tokens, "output_tokens", (json_int_t)r->output_tokens, "cost", r->cost,
			 "attempts", attempts);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, 0, 'C' }, { "model", required_argument, 0, 'm' },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	const char *config = NULL, *name = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'C': config = optarg; break;
		case 'm': name = optarg; break;
		case 'h':
			printf("usage: agentd-model --config FILE --model NAME < request.json\n"
			       "Makes one call of an HTTP model (kind openai or anthropic); run by agentd-worker.\n");
			return 0;
		default: return 2;
		}
	}
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
	const struct model_cfg *mc = config_model(&cfg, name);
	if (!mc || mc->kind == MODEL_EXEC) {
		fprintf(stderr, "agentd-model: %s is not a model of kind openai or anthropic in %s\n", name, config);
		config_free(&cfg);
		return 2;
	}
	json_error_t je;
	json_t *req = json_loadf(stdin, 0, &je);
	if (!json_is_object(req)) {
		fprintf(stderr, "agentd-model: the request on stdin is not a JSON object: %s\n", je.text);
		json_decref(req);
		config_free(&cfg);
		return 2;
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
	int rc = model_http_run(mc, req, &h, &r, &oc);
	json_t *att = model_attempts_json(&oc);
	if (rc == 0)
		put_line(reply_json(&r, att));
	else
		put_line(json_pack("{soso}", "failed", json_text(oc.err, strlen(oc.err)), "attempts", att));
	model_reply_free(&r);
	model_outcome_free(&oc);
	json_decref(req);
	config_free(&cfg);
	return 0;
}
