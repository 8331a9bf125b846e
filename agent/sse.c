/* sse.c: server-sent events, parsed incrementally (see sse.h). */
#include "agent/sse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void sse_init(struct sse *s)
{
	memset(s, 0, sizeof *s);
}

void sse_free(struct sse *s)
{
	free(s->line);
	free(s->data);
	memset(s, 0, sizeof *s);
}

static int grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	if (need > SSE_EVENT_MAX + 64)
		return -E2BIG;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	char *b = realloc(*buf, c);
	if (!b)
		return -ENOMEM;
	*buf = b;
	*cap = c;
	return 0;
}

/* One whole line (without its end). */
static int line_done(struct sse *s, sse_fn fn, void *arg)
{
	const char *l = s->line ? s->line : "";
	size_t n = s->len;
	s->len = 0;
	if (n == 0) {
		int rc = 0;
		if (s->has_data) {
			s->data[s->dlen] = 0;
			rc = fn(arg, s->event, s->data, s->dlen);
		}
		s->has_data = 0;
		s->dlen = 0;
		s->event[0] = 0;
		memcpy(s->last_id, s->id_buf, sizeof s->last_id);
		return rc;
	}
	if (l[0] == ':')
		return 0; /* a comment */
	const char *colon = memchr(l, ':', n);
	size_t flen = colon ? (size_t)(colon - l) : n;
	const char *v = colon ? colon + 1 : l + n;
	size_t vlen = (size_t)(l + n - v);
	if (vlen && *v == ' ') {
		v++;
		vlen--;
	}
	if (flen == 4 && !memcmp(l, "data", 4)) {
		size_t need = s->dlen + (s->has_data ? 1 : 0) + vlen + 1;
		if (need > SSE_EVENT_MAX)
			return -E2BIG;
		int e = grow(&s->data, &s->dcap, need);
		if (e)
			return e;
		if (s->has_data)
			s->data[s->dlen++] = '\n';
		memcpy(s->data + s->dlen, v, vlen);
		s->dlen += vlen;
		s->has_data = 1;
	} else if (flen == 2 && !memcmp(l, "id", 2) && !memchr(v, 0, vlen)) {
		size_t c = vlen < sizeof s->id_buf ? vlen : 0; /* too long: none, never a cut one */
		memcpy(s->id_buf, v, c);
		s->id_buf[c] = 0;
	} else if (flen == 5 && !memcmp(l, "event", 5)) {
		size_t c = vlen < sizeof s->event - 1 ? vlen : sizeof s->event - 1;
		memcpy(s->event, v, c);
		s->event[c] = 0;
	}
	return 0;
}

int sse_feed(struct sse *s, const char *p, size_t n, sse_fn fn, void *arg)
{
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (c == '\n' && s->after_cr) {
			s->after_cr = 0; /* the LF of a CRLF whose CR ended the line */
			continue;
		}
		s->after_cr = c == '\r';
		if (c == '\n' || c == '\r') {
			int rc = line_done(s, fn, arg);
			if (rc)
				return rc;
			continue;
		}
		/* Copy the run up to the next line end at once. */
		size_t j = i;
		while (j < n && p[j] != '\n' && p[j] != '\r')
			j++;
		if (s->len + (j - i) > SSE_EVENT_MAX)
			return -E2BIG;
		int e = grow(&s->line, &s->cap, s->len + (j - i) + 1);
		if (e)
			return e;
		memcpy(s->line + s->len, p + i, j - i);
		s->len += j - i;
		i = j - 1;
	}
	return 0;
}
