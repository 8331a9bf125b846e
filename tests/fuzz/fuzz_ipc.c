/* libFuzzer target: the supervisor<->worker message decoder. */
#include <stddef.h>
#include <stdint.h>

#include "ipc/ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ipc_msg m;
	int rc = ipc_decode((const char *)data, size, &m);
	if (rc == 0) {
		/* A decoded message's text lies inside the input. */
		if (m.text && (m.text < (const char *)data || m.text + m.text_len > (const char *)data + size))
			__builtin_trap();
		if (!ipc_type_name(m.type))
			__builtin_trap();
	} else if (rc != -71 /* -EPROTO */) {
		__builtin_trap();
	}
	return 0;
}
