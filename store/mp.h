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

#include <stddef.h>
#include <stdint.h>

struct mp {
	const unsigned char *p;
	const unsigned char *end;
};

static inline void mp_init(struct mp *m, const void *p, size_t len)
{
	m->p = p;
	m->end = (const unsigned char *)p + len;
}

/* Each returns 0, or -1 when the next object is missing, truncated or not of
 * the type asked for (the cursor is then unspecified). */
int mp_array(struct mp *m, uint32_t *n);
int mp_map(struct mp *m, uint32_t *n);
int mp_str(struct mp *m, const char **s, size_t *len);   /* str or bin */
int mp_uint(struct mp *m, uint64_t *v);                  /* non-negative int */
int mp_int(struct mp *m, int64_t *v);                    /* any int fitting int64 */
int mp_double(struct mp *m, double *v);                  /* float32/64 or int */
int mp_nil(struct mp *m);                                /* 0 and consumed if nil, else -1 untouched */
/* Skip one whole object (iteratively: no recursion, any depth); *start and *len (may be NULL)
 * get its bytes. */
int mp_skip(struct mp *m, const void **start, size_t *len);
/* 1 if [p, p+len) is exactly one well-formed msgpack object. */
int mp_valid_one(const void *p, size_t len);

#endif
