/*
 * text.h: bytes from outside (a process's stderr, a tail of it cut anywhere,
 * a message quoting it) kept as readable JSON text.
 */
#ifndef AGENTD_TEXT_H
#define AGENTD_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* At s (n > 0 bytes left): the length of a well-formed UTF-8 sequence (*ok =
 * 1), or of the maximal ill-formed subpart to replace with one U+FFFD (*ok =
 * 0), after Unicode's table 3-7 (no overlongs, surrogates or values past
 * U+10FFFF). */
size_t utf8_seq(const unsigned char *s, size_t n, int *ok);

/*
 * Bytes as a JSON string (NUL bytes kept), each maximal ill-formed UTF-8
 * subsequence replaced by U+FFFD: for text from outside (a process's stderr,
 * a tail of it cut anywhere, a message quoting it) that must be stored. NULL:
 * out of memory.
 */
json_t *json_text(const char *text, size_t len);

/* snprintf into dst whose cut is intended: a message quoting text from
 * outside (a server's error body) keeps what fits. */
void text_fmt(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
