/* libFuzzer target: the HTTP model clients' parsing (agent/sse.c, the
 * openai and anthropic stream events, agent/model.c) and rendering. The
 * input, as an event stream, is fed whole and cut in two at a point its
 * first byte picks: both must dispatch the same events; each event goes to
 * both APIs' stream parsers and the result becomes a reply. As JSON, it is
 * a request rendered into both APIs' bodies. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/model.h"
#include "agent/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct acc {
	char *all;
	size_t len;
	struct stream oa, an;
};

static int on_event(void *arg, const char *type, const char *d, size_t len)
{
	struct acc *a = arg;
	stream_append(&a->all, &a->len, type, strlen(type));
	stream_append(&a->all, &a->len, "|", 1);
	stream_append(&a->all, &a->len, d, len);
	stream_append(&a->all, &a->len, "\n", 1);
	if (!a->oa.done && !a->oa.failed)
		model_api_openai.event(&a->oa, type, d, len);
	if (!a->an.done && !a->an.failed)
		model_api_anthropic.event(&a->an, type, d, len);
	return 0;
}

static void finish(struct stream *s)
{
	struct model_reply r;
	char err[300];
	if (stream_reply(s, &r, err, sizeof err) == 0) {
		if (!r.text)
			__builtin_trap();
		model_reply_free(&r);
	}
	stream_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct acc whole = { 0 }, cut = { 0 };
	struct sse s;
	sse_init(&s);
	int e1 = sse_feed(&s, p, size, on_event, &whole);
	sse_free(&s);
	size_t at = size ? data[0] % (size + 1) : 0;
	sse_init(&s);
	int e2 = sse_feed(&s, p, at, on_event, &cut);
	if (!e2)
		e2 = sse_feed(&s, p + at, size - at, on_event, &cut);
	sse_free(&s);
	if (!e1 && !e2 && (whole.len != cut.len || (whole.len && memcmp(whole.all, cut.all, whole.len))))
		__builtin_trap();
	free(whole.all);
	free(cut.all);
	finish(&whole.oa);
	finish(&whole.an);
	finish(&cut.oa);
	finish(&cut.an);

	json_t *req = json_loadb(p, size, 0, NULL);
	if (json_is_object(req)) {
		struct model_cfg mc = { .name = "m", .model = "m", .base_url = "http://x/v1", .max_tokens = 5,
					.params = "{\"temperature\":1}" };
		for (int k = MODEL_OPENAI; k <= MODEL_ANTHROPIC; k++) {
			mc.kind = k;
			json_t *b = model_api_of(&mc)->body(&mc, req);
			if (!b)
				__builtin_trap();
			char *txt = json_dumps(b, JSON_COMPACT);
			free(txt);
			json_decref(b);
		}
	}
	json_decref(req);
	return 0;
}
