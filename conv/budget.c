/* budget.c: a conversation's budget and when it is spent (see conv.h). */
#include "conv/conv.h"

static void limit_int(const json_t *budget, const char *key, int64_t *out)
{
	json_t *v = json_object_get(budget, key);
	if (json_is_null(v))
		*out = -1;
	else if (json_is_integer(v) && json_integer_value(v) >= 0)
		*out = json_integer_value(v);
}

void conv_budget_of(const json_t *settings, const struct config_budget *dflt, struct config_budget *out)
{
	*out = *dflt;
	json_t *b = json_object_get(settings, "budget");
	if (!json_is_object(b))
		return; /* absent (or null): the defaults */
	limit_int(b, "max_tokens", &out->max_tokens);
	limit_int(b, "max_turns", &out->max_turns);
	json_t *c = json_object_get(b, "max_cost");
	if (json_is_null(c))
		out->max_cost = -1;
	else if (json_is_number(c) && json_number_value(c) >= 0)
		out->max_cost = json_number_value(c);
}

json_t *conv_usage_json(const struct store_usage *u, uint64_t turns)
{
	return json_pack("{sIsIsfsI}", "input_tokens", (json_int_t)u->input_tokens, "output_tokens",
			 (json_int_t)u->output_tokens, "cost", u->cost, "turns", (json_int_t)turns);
}

const char *conv_budget_exceeded(const struct config_budget *b, const struct store_usage *u, uint64_t turns,
				 json_t **why)
{
	/* Both totals saturate at INT64_MAX: their sum fits a uint64_t. */
	uint64_t tokens = u->input_tokens + u->output_tokens;
	const char *limit = NULL;
	json_t *used = NULL, *max = NULL;
	if (b->max_tokens >= 0 && tokens >= (uint64_t)b->max_tokens) {
		limit = "max_tokens";
		used = json_integer(tokens > INT64_MAX ? INT64_MAX : (json_int_t)tokens);
		max = json_integer(b->max_tokens);
	} else if (b->max_cost >= 0 && u->cost >= b->max_cost) {
		limit = "max_cost";
		used = json_real(u->cost);
		max = json_real(b->max_cost);
	} else if (b->max_turns >= 0 && turns >= (uint64_t)b->max_turns) {
		limit = "max_turns";
		used = json_integer((json_int_t)turns);
		max = json_integer(b->max_turns);
	}
	if (why)
		*why = limit ? json_pack("{sssoso so}", "limit", limit, "used", used, "max", max, "usage",
					 conv_usage_json(u, turns))
			     : NULL;
	else {
		json_decref(used);
		json_decref(max);
	}
	return limit;
}
