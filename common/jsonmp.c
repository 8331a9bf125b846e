/* jsonmp.c: JSON <-> msgpack (see jsonmp.h). */
#include "common/jsonmp.h"
#include "common/mp.h"
#include "common/text.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned long alloc_failures; /* jansson's, counted by counted_malloc */

static void *counted_malloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		__atomic_add_fetch(&alloc_failures, 1, __ATOMIC_RELAXED);
	return p;
}

static void counted_free(void *p)
{
	free(p);
}

void jsonmp_alloc_init(void)
{
	json_set_alloc_funcs(counted_malloc, counted_free);
}

static int json_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* A byte jansson reads inside a string as itself: printable ASCII, not '"' or '\\'. */
static int plain_byte(char c)
{
	return (unsigned char)c >= 0x20 && (unsigned char)c <= 0x7e && c != '"' && c != '\\';
}

/* A flat object built straight into jansson values, as json_loadb would
 * build it: keys and string values of plain bytes, values strings, unsigned
 * integers of at most 18 digits, true, false or null, no key twice, nothing
 * after it but whitespace. That is nearly every control request (a send);
 * jansson's lexer reads it a byte at a time through a stream and costs a
 * third of a send's instructions (docs/benchmarks.md, "bench_control").
 * Returns 1 with *out set, -ENOMEM, or 0 for any other text: jansson parses
 * it, and words any error. Kept long because it is one flat state machine
 * over the bytes (key, colon, value, comma), clearest read top to bottom. */
static int flat_loadb(const char *s, size_t n, json_t **out)
{
	size_t i = 0;
	*out = NULL;
	while (i < n && json_ws(s[i]))
		i++;
	if (i == n || s[i] != '{')
		return 0;
	json_t *o = json_object();
	if (!o)
		return -ENOMEM;
	for (i++; i < n && json_ws(s[i]); i++)
		;
	if (i < n && s[i] == '}') {
		i++;
		goto end;
	}
	for (;;) {
		if (i >= n || s[i] != '"')
			goto other;
		size_t k0 = ++i;
		while (i < n && plain_byte(s[i]))
			i++;
		if (i >= n || s[i] != '"')
			goto other;
		size_t kl = i - k0;
		for (i++; i < n && json_ws(s[i]); i++)
			;
		if (i >= n || s[i] != ':')
			goto other;
		for (i++; i < n && json_ws(s[i]); i++)
			;
		if (i >= n)
			goto other;
		json_t *v;
		if (s[i] == '"') {
			size_t v0 = ++i;
			while (i < n && plain_byte(s[i]))
				i++;
			if (i >= n || s[i] != '"')
				goto other;
			v = json_stringn_nocheck(s + v0, i - v0);
			i++;
		} else if (s[i] >= '0' && s[i] <= '9') {
			size_t d0 = i;
			json_int_t x = 0;
			for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
				if (i - d0 >= 18)
					goto other;
				x = x * 10 + (s[i] - '0');
			}
			if (s[d0] == '0' && i - d0 > 1)
				goto other; /* a leading zero: jansson's error */
			v = json_integer(x);
		} else {
			static const char *const lit[] = { "true", "false", "null" };
			int which = s[i] == 't' ? 0 : s[i] == 'f' ? 1 : s[i] == 'n' ? 2 : -1;
			size_t ll = which < 0 ? 0 : strlen(lit[which]);
			if (which < 0 || n - i < ll || memcmp(s + i, lit[which], ll))
				goto other;
			i += ll;
			v = which == 0 ? json_true() : which == 1 ? json_false() : json_null();
		}
		if (!v) { /* out of memory, whatever the text turns out to be */
			json_decref(o);
			return -ENOMEM;
		}
		/* What follows a value: whitespace, ',' or '}' (a number or a
		 * word running on, "1.5" or "truex", is jansson's). */
		if (i < n && !json_ws(s[i]) && s[i] != ',' && s[i] != '}') {
			json_decref(v);
			goto other;
		}
		if (json_object_getn(o, s + k0, kl)) {
			json_decref(v);
			goto other; /* a key twice: jansson keeps the last, or refuses it */
		}
		if (json_object_setn_new_nocheck(o, s + k0, kl, v)) { /* v is taken either way */
			json_decref(o);
			return -ENOMEM;
		}
		while (i < n && json_ws(s[i]))
			i++;
		if (i < n && s[i] == ',') {
			for (i++; i < n && json_ws(s[i]); i++)
				;
			continue;
		}
		if (i < n && s[i] == '}') {
			i++;
			break;
		}
		goto other;
	}
end:
	while (i < n && json_ws(s[i]))
		i++;
	if (i != n)
		goto other;
	*out = o;
	return 1;
other:
	json_decref(o);
	return 0;
}

int jsonmp_loadb(const char *buf, size_t len, size_t flags, json_t **out, json_error_t *je)
{
	json_error_t mine;
	if (!je)
		je = &mine;
	/* The flags that change what a flat object reads as: jansson's. */
	if (!(flags & ~(size_t)(JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL))) {
		int r = flat_loadb(buf, len, out);
		if (r) {
			memset(je, 0, sizeof *je);
			return r < 0 ? r : 0;
		}
	}
	unsigned long before = __atomic_load_n(&alloc_failures, __ATOMIC_RELAXED);
	json_t *v = json_loadb(buf, len, flags, je);
	if (__atomic_load_n(&alloc_failures, __ATOMIC_RELAXED) != before ||
	    (!v && json_error_code(je) == json_error_out_of_memory)) {
		json_decref(v);
		*out = NULL;
		return -ENOMEM;
	}
	*out = v;
	return v ? 0 : -EINVAL;
}

void jsonmp_buf_init(struct jsonmp_buf *b)
{
	msgpack_sbuffer_init(&b->sb);
	msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

void jsonmp_buf_destroy(struct jsonmp_buf *b)
{
	msgpack_sbuffer_destroy(&b->sb);
}

struct dbuf {
	char *p;
	size_t len, cap;
	int failed; /* sticky: jansson may go on writing after a failed write */
};

static int dbuf_put(const char *s, size_t n, void *arg)
{
	struct dbuf *b = arg;
	if (b->failed)
		return -1;
	if (n + 2 > b->cap - b->len) { /* room for '\n' and NUL too */
		size_t cap = b->cap ? b->cap : 256;
		while (n + 2 > cap - b->len) {
			if (cap > SIZE_MAX / 2) {
				b->failed = 1;
				return -1;
			}
			cap *= 2;
		}
		char *q = realloc(b->p, cap);
		if (!q) {
			b->failed = 1;
			return -1;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	return 0;
}

/* Whether s is written by jansson as it is: printable ASCII, no '"' or '\\'. */
static int plain(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
			return 0;
	return 1;
}

/* The common reply ({"seq":N,"ok":true}, an id, a status) written directly,
 * byte for byte what json_dump_callback writes with JSON_COMPACT: a flat
 * object whose keys and string values are plain and whose other values are
 * integers, booleans or null. *done = 0 for anything else (jansson writes it).
 * Every send is answered with one: this spares it jansson's callback per
 * token and its buffer growth (docs/benchmarks.md, "bench_control", has the
 * reply's share of a send's CPU). */
static char *flat_dumps(const json_t *v, size_t flags, int nl, size_t *len, int *done)
{
	const char *k;
	json_t *e;
	size_t need = 2 + (nl ? 1 : 0) + 1; /* {} '\n' NUL */
	*done = 0;
	if (flags != JSON_COMPACT || !json_is_object(v))
		return NULL;
	json_object_foreach((json_t *)v, k, e) {
		size_t kl = strlen(k);
		if (!plain(k, kl))
			return NULL;
		need += kl + 4; /* "k": and a comma */
		if (json_is_string(e)) {
			if (!plain(json_string_value(e), json_string_length(e)))
				return NULL;
			need += json_string_length(e) + 2;
		} else if (json_is_integer(e) || json_is_boolean(e) || json_is_null(e)) {
			need += 21; /* -9223372036854775808, false */
		} else {
			return NULL;
		}
	}
	*done = 1;
	char *p = malloc(need), *q = p;
	if (!p)
		return NULL;
	*q++ = '{';
	json_object_foreach((json_t *)v, k, e) {
		if (q > p + 1)
			*q++ = ',';
		size_t kl = strlen(k);
		*q++ = '"';
		memcpy(q, k, kl);
		q += kl;
		*q++ = '"';
		*q++ = ':';
		if (json_is_string(e)) {
			*q++ = '"';
			memcpy(q, json_string_value(e), json_string_length(e));
			q += json_string_length(e);
			*q++ = '"';
		} else if (json_is_integer(e)) {
			/* The digits backwards, as "%lld" writes them forwards. */
			json_int_t x = json_integer_value(e);
			unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
			char dig[20];
			int nd = 0;
			do
				dig[nd++] = (char)('0' + u % 10);
			while (u /= 10);
			if (x < 0)
				*q++ = '-';
			while (nd)
				*q++ = dig[--nd];
		} else {
			const char *lit = json_is_true(e) ? "true" : json_is_false(e) ? "false" : "null";
			size_t ll = strlen(lit);
			memcpy(q, lit, ll);
			q += ll;
		}
	}
	*q++ = '}';
	if (nl)
		*q++ = '\n';
	*q = 0;
	if (len)
		*len = (size_t)(q - p);
	return p;
}

char *jsonmp_dumps(const json_t *v, size_t flags, int nl, size_t *len)
{
	int done;
	char *fast = flat_dumps(v, flags, nl, len, &done);
	if (done)
		return fast;
	struct dbuf b = { NULL, 0, 0, 0 };
	if (!v || json_dump_callback(v, dbuf_put, &b, flags) || b.failed || !b.p) {
		free(b.p);
		return NULL;
	}
	if (nl)
		b.p[b.len++] = '\n';
	b.p[b.len] = 0;
	if (len)
		*len = b.len;
	return b.p;
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
		return -EINVAL;
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char *k;
		json_t *e;
		/* Every append is checked: the buffer grows by realloc, and a
		 * header or key lost to a failed one would leave bytes that decode
		 * as something else. */
		if (msgpack_pack_map(pk, json_object_size(v)))
			return -ENOMEM;
		json_object_foreach((json_t *)v, k, e) {
			int r = msgpack_pack_str_with_body(pk, k, strlen(k)) ? -ENOMEM : pack(pk, e, depth + 1);
			if (r)
				return r;
		}
		return 0;
	}
	case JSON_ARRAY: {
		size_t i;
		json_t *e;
		if (msgpack_pack_array(pk, json_array_size(v)))
			return -ENOMEM;
		json_array_foreach(v, i, e) {
			int r = pack(pk, e, depth + 1);
			if (r)
				return r;
		}
		return 0;
	}
	case JSON_STRING:
		return msgpack_pack_str_with_body(pk, json_string_value(v), json_string_length(v)) ? -ENOMEM : 0;
	case JSON_INTEGER:
		return msgpack_pack_int64(pk, json_integer_value(v)) ? -ENOMEM : 0;
	case JSON_REAL:
		return msgpack_pack_double(pk, json_real_value(v)) ? -ENOMEM : 0;
	case JSON_TRUE:
		return msgpack_pack_true(pk) ? -ENOMEM : 0;
	case JSON_FALSE:
		return msgpack_pack_false(pk) ? -ENOMEM : 0;
	case JSON_NULL:
		return msgpack_pack_nil(pk) ? -ENOMEM : 0;
	}
	return -EINVAL;
}

int jsonmp_pack(msgpack_packer *pk, const json_t *v)
{
	return v ? pack(pk, v, 0) : -EINVAL;
}

/* Decoding: *oom is set when jansson could not allocate, so a caller can
 * tell "not decodable" from "out of memory". Strings and keys are checked
 * for UTF-8 here, so jansson's constructors fail only for want of memory. */
struct dec {
	struct mp m;
	int oom;
};

static json_t *unpack(struct dec *d, int depth);

static json_t *made(struct dec *d, json_t *v)
{
	if (!v)
		d->oom = 1;
	return v;
}

static int utf8_ok(const char *s, size_t len)
{
	int ok = 1;
	for (size_t i = 0; ok && i < len;)
		i += utf8_seq((const unsigned char *)s + i, len - i, &ok);
	return ok;
}

static json_t *unpack_container(struct dec *d, int depth)
{
	struct mp *m = &d->m;
	uint32_t n;
	const unsigned char *save = m->p;
	if (mp_array(m, &n) == 0) {
		if (n > (size_t)(m->end - m->p))
			return NULL;
		json_t *a = made(d, json_array());
		for (uint32_t i = 0; a && i < n; i++) {
			json_t *e = unpack(d, depth + 1);
			int bad = !e || json_array_append_new(a, e);
			if (bad && e)
				d->oom = 1; /* the append itself */
			if (bad) {
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
		json_t *o = made(d, json_object());
		for (uint32_t i = 0; o && i < n; i++) {
			const char *k;
			size_t kl;
			/* A key with a NUL byte cannot round-trip through
			 * jansson's C-string keys: refuse it. */
			if (mp_str(m, &k, &kl) || memchr(k, 0, kl) || !utf8_ok(k, kl)) {
				json_decref(o);
				return NULL;
			}
			json_t *e = unpack(d, depth + 1);
			int bad = !e || json_object_setn_new_nocheck(o, k, kl, e); /* the key is checked: only memory */
			if (bad && e)
				d->oom = 1;
			if (bad) {
				json_decref(o);
				return NULL;
			}
		}
		return o;
	}
	return NULL;
}

static json_t *unpack(struct dec *d, int depth)
{
	struct mp *m = &d->m;
	if (depth > JSONMP_MAX_DEPTH || m->p >= m->end)
		return NULL;
	unsigned char t = *m->p;
	const char *s;
	size_t len;
	int64_t i;
	uint64_t u;
	double x;
	switch (t) {
	case 0xc0: m->p++; return json_null();
	case 0xc2: m->p++; return json_false();
	case 0xc3: m->p++; return json_true();
	case 0xca: case 0xcb:
		return mp_double(m, &x) ? NULL : made(d, json_real(x));
	}
	if ((t & 0xe0) == 0xa0 || t == 0xd9 || t == 0xda || t == 0xdb)
		return mp_str(m, &s, &len) || !utf8_ok(s, len) ? NULL : made(d, json_stringn_nocheck(s, len));
	if (t <= 0x7f || t >= 0xe0 || (t >= 0xcc && t <= 0xd3)) {
		if (t == 0xcf) {
			if (mp_uint(m, &u) || u > INT64_MAX)
				return NULL; /* JSON integers here are int64 */
			return made(d, json_integer((json_int_t)u));
		}
		return mp_int(m, &i) ? NULL : made(d, json_integer(i));
	}
	return unpack_container(d, depth);
}

int jsonmp_decode(const void *p, size_t len, json_t **out)
{
	*out = NULL;
	if (len == 0) {
		*out = json_null();
		return 0;
	}
	struct dec d = { .oom = 0 };
	mp_init(&d.m, p, len);
	json_t *v = unpack(&d, 0);
	if (v && d.m.p != d.m.end) {
		json_decref(v);
		return -EINVAL;
	}
	if (!v)
		return d.oom ? -ENOMEM : -EINVAL;
	*out = v;
	return 0;
}

json_t *jsonmp_unpack(const void *p, size_t len)
{
	json_t *v;
	return jsonmp_decode(p, len, &v) ? NULL : v;
}
