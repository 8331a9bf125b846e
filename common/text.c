/* text.c: bytes from outside as JSON text (see text.h). */
#include "common/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* At s (n > 0 bytes left): the length of a well-formed UTF-8 sequence (*ok = 1),
 * or of the maximal ill-formed subpart to replace with one U+FFFD (*ok = 0),
 * after Unicode's table 3-7 (no overlongs, surrogates or values past U+10FFFF). */
size_t utf8_seq(const unsigned char *s, size_t n, int *ok)
{
	unsigned char b = s[0], lo = 0x80, hi = 0xBF;
	size_t need;
	*ok = 1;
	if (b < 0x80)
		return 1;
	if (b >= 0xC2 && b <= 0xDF)
		need = 2;
	else if (b >= 0xE0 && b <= 0xEF) {
		need = 3;
		if (b == 0xE0)
			lo = 0xA0;
		else if (b == 0xED)
			hi = 0x9F;
	} else if (b >= 0xF0 && b <= 0xF4) {
		need = 4;
		if (b == 0xF0)
			lo = 0x90;
		else if (b == 0xF4)
			hi = 0x8F;
	} else {
		*ok = 0;
		return 1;
	}
	for (size_t i = 1; i < need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*ok = 0;
			return i;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need;
}

json_t *json_text(const char *text, size_t len)
{
	static const char fffd[] = "\xEF\xBF\xBD";
	const unsigned char *s = (const unsigned char *)text;
	size_t outlen = 0, bad = 0;
	int ok;
	for (size_t i = 0, k; i < len; i += k) {
		k = utf8_seq(s + i, len - i, &ok);
		outlen += ok ? k : 3;
		bad += !ok;
	}
	if (!bad)
		return json_stringn_nocheck(text, len);
	char *buf = malloc(outlen + 1);
	if (!buf)
		return NULL;
	size_t o = 0;
	for (size_t i = 0, k; i < len; i += k) {
		k = utf8_seq(s + i, len - i, &ok);
		memcpy(buf + o, ok ? text + i : fffd, ok ? k : 3);
		o += ok ? k : 3;
	}
	json_t *v = json_stringn_nocheck(buf, o);
	free(buf);
	return v;
}

void text_fmt(char *dst, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst, n, fmt, ap);
	va_end(ap);
}
