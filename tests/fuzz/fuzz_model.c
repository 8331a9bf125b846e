/* libFuzzer target: the model and tool output parsers (docs/configuration.md). */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	memcpy(buf, data, size);
	buf[size] = 0;
	char err[256];
	struct model_reply r;
	memset(&r, 0, sizeof r);
	if (model_output_parse(buf, size, &r, err, sizeof err) == 0 && !r.text)
		__builtin_trap();
	model_reply_free(&r);
	char *delta = NULL;
	struct model_reply f;
	memset(&f, 0, sizeof f);
	int rc = model_line_parse(buf, size, &delta, &f, err, sizeof err);
	if (rc == 1 && !delta)
		__builtin_trap();
	free(delta);
	model_reply_free(&f);
	json_t *res = NULL;
	if (tool_output_parse(buf, size, &res) != 0 || !res)
		__builtin_trap();
	json_decref(res);
	free(buf);
	return 0;
}
