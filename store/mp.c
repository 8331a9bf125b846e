/* mp.c: the in-place msgpack reader (see mp.h). */
#include "store/mp.h"

#include <string.h>

static int need(const struct mp *m, size_t n)
{
	return (size_t)(m->end - m->p) >= n ? 0 : -1;
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
		return -1;
	*v = be(m->p + 1, n);
	m->p += 1 + n;
	return 0;
}

static int container(struct mp *m, int is_map, uint32_t *n)
{
	uint64_t v;
	if (need(m, 1))
		return -1;
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
			return -1;
	} else if (t == (is_map ? 0xdf : 0xdd)) {
		if (lenfield(m, 4, &v))
			return -1;
	} else {
		return -1;
	}
	*n = (uint32_t)v;
	return 0;
}

int mp_array(struct mp *m, uint32_t *n) { return container(m, 0, n); }
int mp_map(struct mp *m, uint32_t *n) { return container(m, 1, n); }

int mp_str(struct mp *m, const char **s, size_t *len)
{
	uint64_t v;
	if (need(m, 1))
		return -1;
	unsigned char t = *m->p;
	if ((t & 0xe0) == 0xa0) {
		v = t & 0x1f;
		m->p++;
	} else if (t == 0xd9 || t == 0xc4) {
		if (lenfield(m, 1, &v))
			return -1;
	} else if (t == 0xda || t == 0xc5) {
		if (lenfield(m, 2, &v))
			return -1;
	} else if (t == 0xdb || t == 0xc6) {
		if (lenfield(m, 4, &v))
			return -1;
	} else {
		return -1;
	}
	if (need(m, v))
		return -1;
	*s = (const char *)m->p;
	*len = (size_t)v;
	m->p += v;
	return 0;
}

int mp_int(struct mp *m, int64_t *out)
{
	if (need(m, 1))
		return -1;
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
	default: return -1;
	}
	uint64_t v;
	if (lenfield(m, n, &v))
		return -1;
	if (!sign) {
		if (v > (uint64_t)INT64_MAX)
			return -1;
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
		return -1;
	if (*m->p == 0xcf) {
		uint64_t v;
		if (lenfield(m, 8, &v))
			return -1;
		*out = v;
		return 0;
	}
	const unsigned char *save = m->p;
	int64_t v;
	if (mp_int(m, &v) || v < 0) {
		m->p = save;
		return -1;
	}
	*out = (uint64_t)v;
	return 0;
}

int mp_double(struct mp *m, double *out)
{
	if (need(m, 1))
		return -1;
	unsigned char t = *m->p;
	if (t == 0xcb || t == 0xca) {
		uint64_t v;
		if (lenfield(m, t == 0xcb ? 8 : 4, &v))
			return -1;
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
		return -1;
	*out = (double)i;
	return 0;
}

int mp_nil(struct mp *m)
{
	if (need(m, 1) || *m->p != 0xc0)
		return -1;
	m->p++;
	return 0;
}

/* Skip one object. Containers are counted, not recursed, so depth is bounded
 * by the pending counter rather than the C stack. */
int mp_skip(struct mp *m, const void **start, size_t *len)
{
	const unsigned char *s = m->p;
	uint64_t pending = 1;
	while (pending > 0) {
		uint64_t v;
		uint32_t n;
		if (need(m, 1))
			return -1;
		unsigned char t = *m->p;
		pending--;
		if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
			m->p++;
		} else if ((t & 0xf0) == 0x90 || t == 0xdc || t == 0xdd) {
			if (mp_array(m, &n))
				return -1;
			pending += n;
		} else if ((t & 0xf0) == 0x80 || t == 0xde || t == 0xdf) {
			if (mp_map(m, &n))
				return -1;
			pending += 2 * (uint64_t)n;
		} else if ((t & 0xe0) == 0xa0 || t == 0xd9 || t == 0xda || t == 0xdb ||
			   t == 0xc4 || t == 0xc5 || t == 0xc6) {
			const char *p;
			size_t l;
			if (mp_str(m, &p, &l))
				return -1;
		} else {
			size_t skip;
			switch (t) {
			case 0xcc: case 0xd0: skip = 1; break;
			case 0xcd: case 0xd1: skip = 2; break;
			case 0xce: case 0xd2: case 0xca: skip = 4; break;
			case 0xcf: case 0xd3: case 0xcb: skip = 8; break;
			case 0xd4: skip = 2; break;  /* fixext 1: type + 1 */
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			case 0xc7: case 0xc8: case 0xc9: {
				int w = t == 0xc7 ? 1 : t == 0xc8 ? 2 : 4;
				if (lenfield(m, w, &v))
					return -1;
				if (need(m, v + 1))
					return -1;
				m->p += v + 1;
				continue;
			}
			default: return -1; /* 0xc1: never used */
			}
			if (need(m, 1 + skip))
				return -1;
			m->p += 1 + skip;
		}
		/* A claimed count larger than the bytes left cannot be honest:
		 * every object takes at least one byte. */
		if (pending > (uint64_t)(m->end - m->p))
			return -1;
	}
	if (start)
		*start = s;
	if (len)
		*len = (size_t)(m->p - s);
	return 0;
}

int mp_valid_one(const void *p, size_t len)
{
	struct mp m;
	mp_init(&m, p, len);
	return len > 0 && mp_skip(&m, NULL, NULL) == 0 && m.p == m.end;
}
