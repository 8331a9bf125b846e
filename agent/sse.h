/*
 * sse.h: an incremental parser of server-sent events (the WHATWG "event
 * stream" format), as HTTP model APIs stream their answers. Bytes are fed as
 * they arrive, cut anywhere: a line, a CRLF pair or a UTF-8 character may
 * straddle two feeds.
 *
 * Lines end with LF, CRLF or a lone CR. "data:" lines accumulate (joined by
 * LF); "event:" sets the event's type; lines starting with ':' are comments
 * (keep-alives); "id:" sets the stream's last event id, kept from the blank
 * line that ends its event on (what a reconnect sends as Last-Event-ID);
 * "retry:" and unknown fields are ignored; one space
 * after the colon is dropped. A blank line dispatches the event, if it had
 * data. No I/O.
 */
#ifndef AGENTD_SSE_H
#define AGENTD_SSE_H

#include <stddef.h>

#define SSE_EVENT_MAX (16u << 20) /* data of one event, bytes: more is -E2BIG */

struct sse {
	char *line;          /* the line being read */
	size_t len, cap;
	char *data;          /* the event's data so far */
	size_t dlen, dcap;
	int has_data;
	char event[64];      /* its type ("" when none was given) */
	char id_buf[256];    /* the last "id:" read */
	char last_id[256];   /* the id of the last event ended: "" before any (or one too long) */
	int after_cr;        /* the last byte fed was a CR: an LF next ends nothing */
};

/* Called per dispatched event: type ("" for none), data NUL-terminated (len
 * bytes). A non-zero return stops the feed and is returned by sse_feed. */
typedef int (*sse_fn)(void *arg, const char *type, const char *data, size_t len);

void sse_init(struct sse *s);
/* Feed n bytes. Returns 0, fn's non-zero return, -ENOMEM, or -E2BIG. */
int sse_feed(struct sse *s, const char *p, size_t n, sse_fn fn, void *arg);
void sse_free(struct sse *s);

#endif
