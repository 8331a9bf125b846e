/* libFuzzer target: the in-place msgpack reader (every record at rest goes
 * through it) and msgpack -> JSON. A corrupt or truncated object is an
 * error, never a crash or a read outside the input. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonmp.h"
#include "common/mp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Copy to an exact-size buffer so ASan sees any read past the end. */
	uint8_t *buf = malloc(size ? size : 1);
	memcpy(buf, data, size);
	int valid = mp_valid_one(buf, size);
	json_t *j = jsonmp_unpack(buf, size);
	if (j && size && !valid)
		__builtin_trap(); /* decoded something the validator rejects */
	if (j) {
		/* Round trip: JSON -> msgpack -> JSON gives the same value. */
		struct jsonmp_buf b;
		jsonmp_buf_init(&b);
		if (jsonmp_pack(&b.pk, j) == 0) {
			json_t *k = jsonmp_unpack(b.sb.data, b.sb.size);
			if (!k || !json_equal(j, k))
				__builtin_trap();
			json_decref(k);
		}
		jsonmp_buf_destroy(&b);
		json_decref(j);
	}
	struct mp m;
	mp_init(&m, buf, size);
	while (m.p < m.end && mp_skip(&m, NULL, NULL) == 0)
		;
	free(buf);
	return 0;
}
