/*
 * jsonmp.h: JSON (jansson, the control and model protocols) <-> msgpack (the
 * store's records and IPC). Content crosses the store as msgpack bytes; these
 * convert at the edges.
 */
#ifndef AGENTD_JSONMP_H
#define AGENTD_JSONMP_H

#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>

#define JSONMP_MAX_DEPTH 64

/* Append v as one msgpack object to pk. Integers stay integers, reals become
 * float64. Returns 0, -EINVAL when v is NULL or nesting exceeds
 * JSONMP_MAX_DEPTH, or -ENOMEM when the packer's write fails; pk then holds
 * a partial object. */
int jsonmp_pack(msgpack_packer *pk, const json_t *v);

/* Whether v, placed at nesting level `at` of a record (0: the record
 * itself; 1: a field of it, as a tool result or a call's args sit in their
 * event), stays within JSONMP_MAX_DEPTH: what jsonmp_pack and jsonmp_unpack
 * accept. Check what others send before it is stored, never after. */
int jsonmp_fits(const json_t *v, int at);

/* Decode exactly one msgpack object into a new JSON value (a new reference),
 * or NULL when the bytes are not one well-formed object, nest deeper than
 * JSONMP_MAX_DEPTH, hold a non-string map key, an extension type, or a string
 * that is not UTF-8. An empty range (len 0) decodes to JSON null. */
json_t *jsonmp_unpack(const void *p, size_t len);
/* jsonmp_unpack telling why not: 0 with *out a new reference, -EINVAL when
 * the bytes are not decodable (as above), -ENOMEM when out of memory. */
int jsonmp_decode(const void *p, size_t len, json_t **out);

/* v as JSON text (json_dumps' flags), with a '\n' after it when nl, or NULL
 * when out of memory; *len (may be NULL) gets its length; free it. Use it,
 * not json_dumps, for anything sent: jansson 2.14's json_dumps can return
 * text with an object key left out when an allocation inside it fails (it
 * ignores a failed write of a key). Here every write after a failed one
 * fails too, and the failure is seen. */
char *jsonmp_dumps(const json_t *v, size_t flags, int nl, size_t *len);

/* Reading JSON text with every allocation failure seen. jansson 2.14 does
 * not report each one: a token whose buffer cannot grow loses the byte (a
 * string comes back a character short: "content_block_tart"), and one that
 * cannot be copied reads as a syntax error. jsonmp_alloc_init, called once
 * at a program's start, makes jansson allocate through a counter of
 * failures; jsonmp_loadb then returns 0 with *out a new reference, -ENOMEM
 * when an allocation failed while it read (also one another thread made:
 * an error, never a wrong value), or -EINVAL when the text is not JSON
 * (je, which may be NULL, says where). Without jsonmp_alloc_init it is
 * json_loadb with the failures it sees. */
void jsonmp_alloc_init(void);
int jsonmp_loadb(const char *buf, size_t len, size_t flags, json_t **out, json_error_t *je);

/* A packer writing into a fresh buffer, for one-off encodings. */
struct jsonmp_buf {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};
void jsonmp_buf_init(struct jsonmp_buf *b);
void jsonmp_buf_destroy(struct jsonmp_buf *b);

#endif
