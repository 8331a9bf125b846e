#include "common/id.h"

#include <bsd/stdlib.h>
#include <stdlib.h>
#include <string.h>

int id_valid(const char *id, size_t len)
{
	if (!id || len == 0 || len > ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == ':' || c == '-'))
			return 0;
	}
	return 1;
}

void id_random(char *out, size_t size, const char *prefix, size_t nbytes)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char r[32];
	size_t p = strlen(prefix);
	if (nbytes > sizeof r || p + 2 * nbytes + 1 > size)
		abort(); /* a caller's sizing mistake, not an input error */
	arc4random_buf(r, nbytes);
	memcpy(out, prefix, p);
	for (size_t i = 0; i < nbytes; i++) {
		out[p + 2 * i] = hex[r[i] >> 4];
		out[p + 2 * i + 1] = hex[r[i] & 15];
	}
	out[p + 2 * nbytes] = 0;
}
