/*
 * digest.h: the digest of a JSON value, as a person's approval pins a tool
 * call's arguments (docs/protocol.md, "args_digest"): the lowercase hex
 * SHA-256 of the value's canonical form, RFC 8785's JSON Canonicalization
 * Scheme (JCS): no whitespace, object members sorted by their names' UTF-16
 * code units, strings with only `"`, `\` and the control characters escaped
 * (\b \t \n \f \r, the others \u00xx), numbers as ECMAScript writes a double
 * (the shortest digits that read back to it: 1, 0.1, 1e+21, 1e-7). A client
 * computes the same with any JCS library and SHA-256.
 */
#ifndef AGENTD_DIGEST_H
#define AGENTD_DIGEST_H

#include <jansson.h>

#define DIGEST_HEX_LEN 64

/* v's digest into hex (DIGEST_HEX_LEN digits and a NUL). 0, -ENOMEM, or
 * -EINVAL (v NULL, or a number JSON cannot hold). */
int digest_json(const json_t *v, char hex[DIGEST_HEX_LEN + 1]);
/* v's canonical form (JCS) as a malloc'd NUL-terminated string, its length
 * in *len (may be NULL); NULL when out of memory or v cannot be written. */
char *digest_canonical(const json_t *v, size_t *len);

#endif
