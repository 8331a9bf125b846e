/* jsonmp.c: JSON <-> msgpack (see jsonmp.h). */
#include "common/jsonmp.h"
#include "common/mp.h"

#include <string.h>

void jsonmp_buf_init(struct jsonmp_buf *b)
{
	msgpack_sbuffer_init(&b->sb);
	msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

void jsonmp_buf_destroy(struct jsonmp_buf *b)
{
	msgpack_sbuffer_destroy(&b->sb);
}

int jsonmp_fits(const json_t *v, int at)
{
	if (at > JSONMP_MAX_DEPTH)
		return 0;
	const char *k;
	size_t i;
	json_t *e;
	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, k, e)
			if (!jsonmp_fits(e, at + 1))
				return 0;
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, e)
			if (!jsonmp_fits(e, at + 1))
				return 0;
	}
	return 1;
}

static int pack(msgpack_packer *pk, const json_t *v, int depth)
{
	if (depth > JSONMP_MAX_DEPTH)
		return -1;
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char *k;
		json_t *e;
		msgpack_pack_map(pk, json_object_size(v));
		json_object_foreach((json_t *)v, k, e) {
			msgpack_pack_str_with_body(pk, k, strlen(k));
			if (pack(pk, e, depth + 1))
				return -1;
		}
		return 0;
	}
	case JSON_ARRAY: {
		size_t i;
		json_t *e;
		msgpack_pack_array(pk, json_array_size(v));
		json_array_foreach(v, i, e)
			if (pack(pk, e, depth + 1))
				return -1;
		return 0;
	}
	case JSON_STRING:
		return msgpack_pack_str_with_body(pk, json_string_value(v), json_string_length(v));
	case JSON_INTEGER:
		return msgpack_pack_int64(pk, json_integer_value(v));
	case JSON_REAL:
		return msgpack_pack_double(pk, json_real_value(v));
	case JSON_TRUE:
		return msgpack_pack_true(pk);
	case JSON_FALSE:
		return msgpack_pack_false(pk);
	case JSON_NULL:
		return msgpack_pack_nil(pk);
	}
	return -1;
}

int jsonmp_pack(msgpack_packer *pk, const json_t *v)
{
	return v ? pack(pk, v, 0) : -1;
}

static json_t *unpack(struct mp *m, int depth);

static json_t *unpack_container(struct mp *m, int depth)
{
	uint32_t n;
	const unsigned char *save = m->p;
	if (mp_array(m, &n) == 0) {
		if (n > (size_t)(m->end - m->p))
			return NULL;
		json_t *a = json_array();
		for (uint32_t i = 0; a && i < n; i++) {
			json_t *e = unpack(m, depth + 1);
			if (!e || json_array_append_new(a, e)) {
				json_decref(a);
				return NULL;
			}
		}
		return a;
	}
	m->p = save;
	if (mp_map(m, &n) == 0) {
		if (n > (size_t)(m->end - m->p))
			return NULL;
		json_t *o = json_object();
		for (uint32_t i = 0; o && i < n; i++) {
			const char *k;
			size_t kl;
			/* A key with a NUL byte cannot round-trip through
			 * jansson's C-string keys: refuse it. */
			if (mp_str(m, &k, &kl) || memchr(k, 0, kl)) {
				json_decref(o);
				return NULL;
			}
			json_t *e = unpack(m, depth + 1);
			/* setn validates the key's UTF-8 and takes its length. */
			if (!e || json_object_setn_new(o, k, kl, e)) {
				json_decref(o);
				return NULL;
			}
		}
		return o;
	}
	return NULL;
}

static json_t *unpack(struct mp *m, int depth)
{
	if (depth > JSONMP_MAX_DEPTH || m->p >= m->end)
		return NULL;
	unsigned char t = *m->p;
	const char *s;
	size_t len;
	int64_t i;
	uint64_t u;
	double d;
	switch (t) {
	case 0xc0: m->p++; return json_null();
	case 0xc2: m->p++; return json_false();
	case 0xc3: m->p++; return json_true();
	case 0xca: case 0xcb:
		return mp_double(m, &d) ? NULL : json_real(d);
	}
	if ((t & 0xe0) == 0xa0 || t == 0xd9 || t == 0xda || t == 0xdb)
		return mp_str(m, &s, &len) ? NULL : json_stringn(s, len); /* NULL if not UTF-8 */
	if (t <= 0x7f || t >= 0xe0 || (t >= 0xcc && t <= 0xd3)) {
		if (t == 0xcf) {
			if (mp_uint(m, &u) || u > INT64_MAX)
				return NULL; /* JSON integers here are int64 */
			return json_integer((json_int_t)u);
		}
		return mp_int(m, &i) ? NULL : json_integer(i);
	}
	return unpack_container(m, depth);
}

json_t *jsonmp_unpack(const void *p, size_t len)
{
	if (len == 0)
		return json_null();
	struct mp m;
	mp_init(&m, p, len);
	json_t *v = unpack(&m, 0);
	if (v && m.p != m.end) {
		json_decref(v);
		return NULL;
	}
	return v;
}
