/*
 * mp.h: a bounds-checked msgpack reader for records at rest.
 *
 * msgpack-c packs our records; reading them back needs no allocation: a cursor
 * walks the bytes in place, so strings and nested objects stay pointers into
 * the LMDB map (zero-copy). Every read checks the remaining length, and a
 * truncated or ill-typed record makes the read fail instead of misreading.
 */
#ifndef AGENTD_MP_H
#define AGENTD_MP_H

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct mp {
	const unsigned char *p;
	const unsigned char *end;
};

static inline void mp_init(struct mp *m, const void *p, size_t len)
{
	m->p = p;
	m->end = (const unsigned char *)p + len;
}

/* Each returns 0, or -EBADMSG when the next object is missing, truncated or
 * not of the type asked for (the cursor is then unspecified). mp_array, mp_str and
 * mp_int are inline for the encodings records use most (a fixarray, a
 * fixstr, a fixint or 64-bit int) and call the general reader otherwise. */
int mp_array_any(struct mp *m, uint32_t *n);
int mp_map(struct mp *m, uint32_t *n);
int mp_str_any(struct mp *m, const char **s, size_t *len);
int mp_int_any(struct mp *m, int64_t *v);

static inline int mp_array(struct mp *m, uint32_t *n)
{
	if (m->p < m->end && (*m->p & 0xf0) == 0x90) {
		*n = *m->p++ & 0x0f;
		return 0;
	}
	return mp_array_any(m, n);
}

/* A str or bin. */
static inline int mp_str(struct mp *m, const char **s, size_t *len)
{
	if (m->p < m->end && (*m->p & 0xe0) == 0xa0) {
		size_t n = *m->p & 0x1f;
		if ((size_t)(m->end - m->p) - 1 < n)
			return -EBADMSG;
		*s = (const char *)m->p + 1;
		*len = n;
		m->p += 1 + n;
		return 0;
	}
	return mp_str_any(m, s, len);
}

/* A big-endian u64 at p: one load, not eight. */
static inline uint64_t mp_be64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return be64toh(v);
}

/* Any int fitting int64. */
static inline int mp_int(struct mp *m, int64_t *v)
{
	if (m->p < m->end && *m->p <= 0x7f) {
		*v = *m->p++;
		return 0;
	}
	if (m->end - m->p >= 9 && *m->p == 0xcf) { /* uint 64, as timestamps are packed */
		uint64_t u = mp_be64(m->p + 1);
		if (u > (uint64_t)INT64_MAX)
			return -EBADMSG;
		*v = (int64_t)u;
		m->p += 9;
		return 0;
	}
	return mp_int_any(m, v);
}

int mp_uint(struct mp *m, uint64_t *v);                  /* non-negative int */
int mp_double(struct mp *m, double *v);                  /* float32/64 or int */

/* 0 and consumed if nil, else -EBADMSG untouched. */
static inline int mp_nil(struct mp *m)
{
	if (m->p == m->end || *m->p != 0xc0)
		return -EBADMSG;
	m->p++;
	return 0;
}

/* Skip one whole object (iteratively: no recursion, any depth); *start and *len (may be NULL)
 * get its bytes. 0, or -EBADMSG as the readers above. */
int mp_skip(struct mp *m, const void **start, size_t *len);
/* 1 if [p, p+len) is exactly one well-formed msgpack object. */
int mp_valid_one(const void *p, size_t len);

#endif
