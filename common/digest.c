/* digest.c: the canonical form of a JSON value and its digest (see digest.h). */
#include "common/digest.h"

#include <errno.h>
#include <math.h>
#include <sha2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct out {
	char *p;
	size_t n, cap;
	int err;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->err)
		return;
	if (o->n + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		while (cap < o->n + n + 1)
			cap *= 2;
		char *p = realloc(o->p, cap);
		if (!p) {
			o->err = -ENOMEM;
			return;
		}
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->n, s, n);
	o->n += n;
	o->p[o->n] = 0;
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

/* A finite double as ECMAScript's Number::toString writes it: the shortest
 * digits that read back to x (the first precision whose correctly rounded
 * digits do), laid out by the position of the decimal point. */
static void put_number(struct out *o, double x)
{
	char buf[40], digits[20], tmp[40];
	if (!isfinite(x)) {
		o->err = -EINVAL;
		return;
	}
	if (x == 0) {
		puts_(o, "0"); /* -0 too */
		return;
	}
	if (x < 0) {
		puts_(o, "-");
		x = -x;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, sizeof buf, "%.*e", p - 1, x);
		if (strtod(buf, NULL) == x)
			break;
	}
	/* buf: d[.ddd]e±XX */
	size_t k = 0;
	const char *s = buf;
	for (; *s && *s != 'e'; s++)
		if (*s != '.')
			digits[k++] = *s;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = 0;
	int n = atoi(s + 1) + 1; /* the decimal point is after n digits */
	if ((int)k <= n && n <= 21) {
		put(o, digits, k);
		for (int i = (int)k; i < n; i++)
			puts_(o, "0");
	} else if (0 < n && n <= 21) {
		put(o, digits, (size_t)n);
		puts_(o, ".");
		put(o, digits + n, k - (size_t)n);
	} else if (-6 < n && n <= 0) {
		puts_(o, "0.");
		for (int i = n; i < 0; i++)
			puts_(o, "0");
		put(o, digits, k);
	} else {
		put(o, digits, 1);
		if (k > 1) {
			puts_(o, ".");
			put(o, digits + 1, k - 1);
		}
		snprintf(tmp, sizeof tmp, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
		puts_(o, tmp);
	}
}

static void put_string(struct out *o, const char *s, size_t len)
{
	char esc[8];
	size_t from = 0;
	puts_(o, "\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *e = NULL;
		switch (c) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\b': e = "\\b"; break;
		case '\t': e = "\\t"; break;
		case '\n': e = "\\n"; break;
		case '\f': e = "\\f"; break;
		case '\r': e = "\\r"; break;
		default:
			if (c < 0x20) {
				snprintf(esc, sizeof esc, "\\u%04x", c);
				e = esc;
			}
		}
		if (!e)
			continue;
		put(o, s + from, i - from);
		puts_(o, e);
		from = i + 1;
	}
	put(o, s + from, len - from);
	puts_(o, "\"");
}

/* The next UTF-16 code unit of the UTF-8 string s (jansson's strings are
 * valid UTF-8), from *i; *lo holds a pending low surrogate. -1 at the end. */
static int utf16_next(const unsigned char *s, size_t len, size_t *i, int *lo)
{
	if (*lo >= 0) {
		int u = *lo;
		*lo = -1;
		return u;
	}
	if (*i >= len)
		return -1;
	unsigned c = s[*i], cp;
	int extra = c < 0x80 ? 0 : c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;
	cp = extra == 0 ? c : extra == 1 ? c & 0x1f : extra == 2 ? c & 0x0f : c & 0x07;
	for (int k = 1; k <= extra && *i + k < len; k++)
		cp = (cp << 6) | (s[*i + k] & 0x3f);
	*i += (size_t)extra + 1;
	if (cp < 0x10000)
		return (int)cp;
	cp -= 0x10000;
	*lo = 0xdc00 + (int)(cp & 0x3ff);
	return 0xd800 + (int)(cp >> 10);
}

struct member {
	const char *key;
	size_t len;
	json_t *v;
};

static int member_cmp(const void *pa, const void *pb)
{
	const struct member *a = pa, *b = pb;
	size_t i = 0, j = 0;
	int la = -1, lb = -1;
	for (;;) {
		int x = utf16_next((const unsigned char *)a->key, a->len, &i, &la);
		int y = utf16_next((const unsigned char *)b->key, b->len, &j, &lb);
		if (x != y)
			return x < y ? -1 : 1; /* the end (-1) sorts first */
		if (x < 0)
			return 0;
	}
}

static void put_value(struct out *o, const json_t *v);

static void put_object(struct out *o, const json_t *v)
{
	size_t n = json_object_size(v), i = 0;
	struct member *m = n ? calloc(n, sizeof *m) : NULL;
	const char *k;
	size_t klen;
	json_t *x;
	if (n && !m) {
		o->err = -ENOMEM;
		return;
	}
	json_object_keylen_foreach((json_t *)v, k, klen, x) m[i++] = (struct member){ k, klen, x };
	if (n) /* qsort(NULL, 0, ...) is undefined */
		qsort(m, n, sizeof *m, member_cmp);
	puts_(o, "{");
	for (i = 0; i < n && !o->err; i++) {
		if (i)
			puts_(o, ",");
		put_string(o, m[i].key, m[i].len);
		puts_(o, ":");
		put_value(o, m[i].v);
	}
	puts_(o, "}");
	free(m);
}

static void put_value(struct out *o, const json_t *v)
{
	size_t i;
	json_t *x;
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		put_object(o, v);
		break;
	case JSON_ARRAY:
		puts_(o, "[");
		json_array_foreach((json_t *)v, i, x) {
			if (i)
				puts_(o, ",");
			put_value(o, x);
		}
		puts_(o, "]");
		break;
	case JSON_STRING:
		put_string(o, json_string_value(v), json_string_length(v));
		break;
	case JSON_INTEGER: /* JCS numbers are doubles: a large integer is rounded as JavaScript reads it */
		put_number(o, (double)json_integer_value(v));
		break;
	case JSON_REAL:
		put_number(o, json_real_value(v));
		break;
	case JSON_TRUE:
		puts_(o, "true");
		break;
	case JSON_FALSE:
		puts_(o, "false");
		break;
	default:
		puts_(o, "null");
	}
}

char *digest_canonical(const json_t *v, size_t *len)
{
	struct out o = { 0 };
	if (!v)
		return NULL;
	put_value(&o, v);
	if (!o.err && !o.p)
		put(&o, "", 0);
	if (o.err) {
		free(o.p);
		return NULL;
	}
	if (len)
		*len = o.n;
	return o.p;
}

int digest_json(const json_t *v, char hex[DIGEST_HEX_LEN + 1])
{
	struct out o = { 0 };
	if (!v)
		return -EINVAL;
	put_value(&o, v);
	if (o.err) {
		free(o.p);
		return o.err;
	}
	SHA2_CTX c;
	uint8_t d[SHA256_DIGEST_LENGTH];
	SHA256Init(&c);
	SHA256Update(&c, (const uint8_t *)(o.p ? o.p : ""), o.n);
	SHA256Final(d, &c);
	free(o.p);
	for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
	return 0;
}
