/* libFuzzer target: the control request parser. Any bytes give a request or
 * an error code with a message; never a crash, a leak or a hang. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int model_ok(void *arg, const char *n)
{
	(void)arg;
	return strcmp(n, "echo") == 0;
}

static int tool_ok(void *arg, const char *n)
{
	(void)arg;
	return strcmp(n, "approve") == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct proto_names names = { model_ok, tool_ok, NULL, 8, 1 << 16 }; /* batch limits reached often */
	struct request rq;
	char msg[256];
	int err = proto_parse((const char *)data, size, &names, &rq, msg, sizeof msg);
	size_t len;
	char *line = err ? proto_error_line(rq.id, err, msg, &len) : proto_ok_line(rq.id, NULL, &len);
	if (!line || len == 0 || line[len - 1] != '\n')
		__builtin_trap();
	free(line);
	proto_request_free(&rq);
	return 0;
}
