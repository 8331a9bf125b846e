/* mp.c: the in-place msgpack reader (see mp.h). */
#include "common/mp.h"

#include <string.h>

static int need(const struct mp *m, size_t n)
{
	return (size_t)(m->end - m->p) >= n ? 0 : -EBADMSG;
}

static uint64_t be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Read a big-endian length of n bytes after the tag byte. */
static int lenfield(struct mp *m, int n, uint64_t *v)
{
	if (need(m, 1 + (size_t)n))
		return -EBADMSG;
	*v = be(m->p + 1, n);
	m->p += 1 + n;
	return 0;
}

static int container(struct mp *m, int is_map, uint32_t *n)
{
	uint64_t v;
	if (need(m, 1))
		return -EBADMSG;
	unsigned char t = *m->p;
	if (!is_map && (t & 0xf0) == 0x90) {
		*n = t & 0x0f;
		m->p++;
		return 0;
	}
	if (is_map && (t & 0xf0) == 0x80) {
		*n = t & 0x0f;
		m->p++;
		return 0;
	}
	if (t == (is_map ? 0xde : 0xdc)) {
		if (lenfield(m, 2, &v))
			return -EBADMSG;
	} else if (t == (is_map ? 0xdf : 0xdd)) {
		if (lenfield(m, 4, &v))
			return -EBADMSG;
	} else {
		return -EBADMSG;
	}
	*n = (uint32_t)v;
	return 0;
}

int mp_array_any(struct mp *m, uint32_t *n) { return container(m, 0, n); }
int mp_map(struct mp *m, uint32_t *n) { return container(m, 1, n); }

int mp_str_any(struct mp *m, const char **s, size_t *len)
{
	uint64_t v;
	if (need(m, 1))
		return -EBADMSG;
	unsigned char t = *m->p;
	if ((t & 0xe0) == 0xa0) {
		v = t & 0x1f;
		m->p++;
	} else if (t == 0xd9 || t == 0xc4) {
		if (lenfield(m, 1, &v))
			return -EBADMSG;
	} else if (t == 0xda || t == 0xc5) {
		if (lenfield(m, 2, &v))
			return -EBADMSG;
	} else if (t == 0xdb || t == 0xc6) {
		if (lenfield(m, 4, &v))
			return -EBADMSG;
	} else {
		return -EBADMSG;
	}
	if (need(m, v))
		return -EBADMSG;
	*s = (const char *)m->p;
	*len = (size_t)v;
	m->p += v;
	return 0;
}

int mp_int_any(struct mp *m, int64_t *out)
{
	if (need(m, 1))
		return -EBADMSG;
	unsigned char t = *m->p;
	if (t <= 0x7f) {
		*out = t;
		m->p++;
		return 0;
	}
	if (t >= 0xe0) {
		*out = (int8_t)t;
		m->p++;
		return 0;
	}
	int n;
	int sign;
	switch (t) {
	case 0xcc: n = 1; sign = 0; break;
	case 0xcd: n = 2; sign = 0; break;
	case 0xce: n = 4; sign = 0; break;
	case 0xcf: n = 8; sign = 0; break;
	case 0xd0: n = 1; sign = 1; break;
	case 0xd1: n = 2; sign = 1; break;
	case 0xd2: n = 4; sign = 1; break;
	case 0xd3: n = 8; sign = 1; break;
	default: return -EBADMSG;
	}
	uint64_t v;
	if (lenfield(m, n, &v))
		return -EBADMSG;
	if (!sign) {
		if (v > (uint64_t)INT64_MAX)
			return -EBADMSG;
		*out = (int64_t)v;
		return 0;
	}
	switch (n) {
	case 1: *out = (int8_t)v; break;
	case 2: *out = (int16_t)v; break;
	case 4: *out = (int32_t)v; break;
	default: *out = (int64_t)v; break;
	}
	return 0;
}

int mp_uint(struct mp *m, uint64_t *out)
{
	if (need(m, 1))
		return -EBADMSG;
	if (*m->p == 0xcf) {
		uint64_t v;
		if (lenfield(m, 8, &v))
			return -EBADMSG;
		*out = v;
		return 0;
	}
	const unsigned char *save = m->p;
	int64_t v;
	if (mp_int(m, &v) || v < 0) {
		m->p = save;
		return -EBADMSG;
	}
	*out = (uint64_t)v;
	return 0;
}

int mp_double(struct mp *m, double *out)
{
	if (need(m, 1))
		return -EBADMSG;
	unsigned char t = *m->p;
	if (t == 0xcb || t == 0xca) {
		uint64_t v;
		if (lenfield(m, t == 0xcb ? 8 : 4, &v))
			return -EBADMSG;
		if (t == 0xcb) {
			memcpy(out, &v, sizeof *out);
		} else {
			uint32_t w = (uint32_t)v;
			float f;
			memcpy(&f, &w, sizeof f);
			*out = f;
		}
		return 0;
	}
	int64_t i;
	if (mp_int(m, &i))
		return -EBADMSG;
	*out = (double)i;
	return 0;
}

/* Skip one object. Containers are counted, not recursed, so depth is bounded
 * by the pending counter rather than the C stack. One loop with the lengths
 * read in place: it runs over every record's content on every read. */
int mp_skip(struct mp *m, const void **start, size_t *len)
{
	const unsigned char *s = m->p, *p = m->p, *end = m->end;
	uint64_t pending = 1;
	while (pending > 0) {
		if (p == end)
			return -EBADMSG;
		unsigned t = *p++;
		uint64_t n = 0; /* bytes after the tag and its length field */
		pending--;
		if (t <= 0x7f || t >= 0xe0) {
			continue;
		} else if (t <= 0x8f) {
			pending += 2 * (uint64_t)(t & 0x0f);
		} else if (t <= 0x9f) {
			pending += t & 0x0f;
		} else if (t <= 0xbf) {
			n = t & 0x1f;
		} else if (t == 0xd9) { /* str 8: text of 32-255 bytes, common in content */
			if (p == end)
				return -EBADMSG;
			n = *p++;
		} else {
			int w = 0;        /* width of the length or count field */
			uint64_t add = 0; /* bytes beyond the length's value (ext: the type) */
			int count = 0;    /* 1: array count, 2: map count */
			switch (t) {
			case 0xc0: case 0xc2: case 0xc3: continue;
			case 0xc4: case 0xd9: w = 1; break;
			case 0xc5: case 0xda: w = 2; break;
			case 0xc6: case 0xdb: w = 4; break;
			case 0xc7: w = 1; add = 1; break;
			case 0xc8: w = 2; add = 1; break;
			case 0xc9: w = 4; add = 1; break;
			case 0xcc: case 0xd0: n = 1; break;
			case 0xcd: case 0xd1: n = 2; break;
			case 0xce: case 0xd2: case 0xca: n = 4; break;
			case 0xcf: case 0xd3: case 0xcb: n = 8; break;
			case 0xd4: n = 2; break;  /* fixext 1: type + 1 */
			case 0xd5: n = 3; break;
			case 0xd6: n = 5; break;
			case 0xd7: n = 9; break;
			case 0xd8: n = 17; break;
			case 0xdc: w = 2; count = 1; break;
			case 0xdd: w = 4; count = 1; break;
			case 0xde: w = 2; count = 2; break;
			case 0xdf: w = 4; count = 2; break;
			default: return -EBADMSG; /* 0xc1: never used */
			}
			if (w) {
				if ((size_t)(end - p) < (size_t)w)
					return -EBADMSG;
				uint64_t v = 0;
				for (int i = 0; i < w; i++)
					v = (v << 8) | p[i];
				p += w;
				if (count)
					pending += count * v;
				else
					n = v + add;
			}
		}
		if ((uint64_t)(end - p) < n)
			return -EBADMSG;
		p += n;
		/* A claimed count larger than the bytes left cannot be honest:
		 * every object takes at least one byte. */
		if (pending > (uint64_t)(end - p))
			return -EBADMSG;
	}
	m->p = p;
	if (start)
		*start = s;
	if (len)
		*len = (size_t)(p - s);
	return 0;
}

int mp_valid_one(const void *p, size_t len)
{
	struct mp m;
	mp_init(&m, p, len);
	return len > 0 && mp_skip(&m, NULL, NULL) == 0 && m.p == m.end;
}
