/* protocol.c: the model and tool process protocols (see protocol.h). */
#include "agent/protocol.h"
#include "common/jsonmp.h"
#include "common/text.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL_CALL_ID_MAX 128

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* A field, with JSON null counted as absent. */
static json_t *field(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_null(v) ? NULL : v;
}

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a real number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

static int is_blank(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
			return 0;
	return 1;
}

/* docs/protocol.md: 1-128 chars of [A-Za-z0-9._:-]. */
static int tool_call_id_valid(const char *s, size_t len)
{
	if (len == 0 || len > TOOL_CALL_ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == ':' || c == '-'))
			return 0;
	}
	return 1;
}

/* ------------------------------------------------------------- model output */

static int call_parse(json_t *c, size_t i, struct model_call *call, char *err, size_t errlen)
{
	if (!json_is_object(c)) {
		seterr(err, errlen, "tool_calls[%zu] must be an object, not %s", i, type_name(c));
		return -1;
	}
	json_t *name = field(c, "name"), *id = field(c, "id"), *args = field(c, "args");
	if (!name) {
		seterr(err, errlen, "tool_calls[%zu] has no name", i);
		return -1;
	}
	if (!json_is_string(name) || json_string_length(name) == 0) {
		seterr(err, errlen, "tool_calls[%zu].name must be a non-empty string, not %s", i,
		       json_is_string(name) ? "empty" : type_name(name));
		return -1;
	}
	/* The store keeps names of 1-128 bytes: a longer one made every
	 * attempt to record the turn fail, and the worker crash for ever. */
	if (json_string_length(name) > TOOL_NAME_MAX) {
		seterr(err, errlen, "tool_calls[%zu].name must be at most %d bytes", i, TOOL_NAME_MAX);
		return -1;
	}
	if (id && !json_is_string(id)) {
		seterr(err, errlen, "tool_calls[%zu].id must be a string, not %s", i, type_name(id));
		return -1;
	}
	if (args && !json_is_object(args)) {
		seterr(err, errlen, "tool_calls[%zu].args must be an object, not %s", i, type_name(args));
		return -1;
	}
	/* args sit one level into their tool_call event */
	if (args && !jsonmp_fits(args, 1)) {
		seterr(err, errlen, "tool_calls[%zu].args nest more than %d levels of objects and arrays", i,
		       JSONMP_MAX_DEPTH);
		return -1;
	}
	if (!(call->name = strdup(json_string_value(name))))
		goto nomem;
	if (id && tool_call_id_valid(json_string_value(id), json_string_length(id)) &&
	    !(call->id = strdup(json_string_value(id))))
		goto nomem;
	if (!(call->args = args ? json_incref(args) : json_object()))
		goto nomem;
	return 0;
nomem:
	seterr(err, errlen, "out of memory");
	return -1;
}

static int calls_parse(json_t *tc, struct model_reply *rep, char *err, size_t errlen)
{
	if (!json_is_array(tc)) {
		seterr(err, errlen, "tool_calls must be an array, not %s", type_name(tc));
		return -1;
	}
	size_t n = json_array_size(tc);
	if (n && !(rep->calls = calloc(n, sizeof *rep->calls))) {
		seterr(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		/* counted before parsing, so a half-filled call is freed too */
		rep->ncalls++;
		if (call_parse(json_array_get(tc, i), i, &rep->calls[i], err, errlen) < 0)
			return -1;
	}
	/* An id repeated within one reply cannot name two calls: mint for the later. */
	for (size_t i = 1; i < n; i++)
		for (size_t j = 0; j < i && rep->calls[i].id; j++)
			if (rep->calls[j].id && strcmp(rep->calls[i].id, rep->calls[j].id) == 0) {
				free(rep->calls[i].id);
				rep->calls[i].id = NULL;
			}
	return 0;
}

static int tokens_parse(json_t *usage, const char *key, uint64_t *v, char *err, size_t errlen)
{
	json_t *t = field(usage, key);
	if (!t)
		return 0;
	if (!json_is_integer(t) || json_integer_value(t) < 0) {
		seterr(err, errlen, "usage.%s must be a non-negative integer", key);
		return -1;
	}
	*v = (uint64_t)json_integer_value(t);
	return 0;
}

static int usage_parse(json_t *u, struct model_reply *rep, char *err, size_t errlen)
{
	if (!json_is_object(u)) {
		seterr(err, errlen, "usage must be an object, not %s", type_name(u));
		return -1;
	}
	if (tokens_parse(u, "input_tokens", &rep->input_tokens, err, errlen) < 0 ||
	    tokens_parse(u, "output_tokens", &rep->output_tokens, err, errlen) < 0)
		return -1;
	json_t *c = field(u, "cost");
	if (c) {
		double d = json_number_value(c);
		if (!json_is_number(c) || !isfinite(d) || d < 0) {
			seterr(err, errlen, "usage.cost must be a non-negative number");
			return -1;
		}
		rep->cost = d;
	}
	return 0;
}

static int final_parse(json_t *v, struct model_reply *rep, char *err, size_t errlen)
{
	json_t *t = field(v, "text"), *tc = field(v, "tool_calls"), *u = field(v, "usage");
	if (t && !json_is_string(t)) {
		seterr(err, errlen, "text must be a string, not %s", type_name(t));
		return -1;
	}
	if (!(rep->text = strdup(t ? json_string_value(t) : ""))) {
		seterr(err, errlen, "out of memory");
		return -1;
	}
	if (tc && calls_parse(tc, rep, err, errlen) < 0)
		return -1;
	if (u && usage_parse(u, rep, err, errlen) < 0)
		return -1;
	return 0;
}

/* The object's kind: 1 delta, 2 final, -1 error. */
static int line_object(json_t *v, char **delta, struct model_reply *final, char *err, size_t errlen)
{
	if (!json_is_object(v)) {
		seterr(err, errlen, "not a JSON object but %s", type_name(v));
		return -1;
	}
	json_t *d = field(v, "delta");
	int is_final = field(v, "text") || field(v, "tool_calls");
	if (d && is_final) {
		seterr(err, errlen, "both \"delta\" and a final field (\"text\" or \"tool_calls\")");
		return -1;
	}
	if (d) {
		if (!json_is_string(d)) {
			seterr(err, errlen, "delta must be a string, not %s", type_name(d));
			return -1;
		}
		if (delta && !(*delta = strdup(json_string_value(d)))) {
			seterr(err, errlen, "out of memory");
			return -1;
		}
		return 1;
	}
	if (!is_final) {
		seterr(err, errlen, "neither a delta (\"delta\") nor a final (\"text\" or \"tool_calls\")");
		return -1;
	}
	struct model_reply rep = { 0 };
	if (final_parse(v, &rep, err, errlen) < 0) {
		model_reply_free(&rep);
		return -1;
	}
	if (final)
		*final = rep;
	else
		model_reply_free(&rep);
	return 2;
}

int model_line_parse(const char *line, size_t len, char **delta, struct model_reply *final,
                     char *err, size_t errlen)
{
	seterr(err, errlen, "%s", "");
	if (!line && len) {
		seterr(err, errlen, "no line");
		return -EINVAL;
	}
	if (is_blank(line, len))
		return 0;
	json_error_t je;
	/* Duplicate keys would make the reply ambiguous; NUL cannot be in our C strings. */
	json_t *v;
	if (jsonmp_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &v, &je) == -ENOMEM) {
		seterr(err, errlen, "out of memory"); /* not the model's fault */
		return -ENOMEM;
	}
	if (!v) {
		seterr(err, errlen, "not JSON (at byte %d): %s", je.position, je.text);
		return -EINVAL;
	}
	int rc = line_object(v, delta, final, err, errlen);
	json_decref(v);
	return rc < 0 ? -EINVAL : rc;
}

int model_output_parse(const char *out, size_t len, struct model_reply *r, char *err, size_t errlen)
{
	char msg[320];
	size_t lineno = 0, final_line = 0;
	if (!r) {
		seterr(err, errlen, "no reply to fill");
		return -EINVAL;
	}
	memset(r, 0, sizeof *r);
	if (!out && len) {
		seterr(err, errlen, "no output");
		return -EINVAL;
	}
	for (const char *p = out, *end = out + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		lineno++;
		if (!is_blank(p, (size_t)(le - p))) {
			if (final_line) {
				seterr(err, errlen, "line %zu: output after the final object (line %zu)", lineno, final_line);
				goto fail;
			}
			int rc = model_line_parse(p, (size_t)(le - p), NULL, r, msg, sizeof msg);
			if (rc < 0) {
				seterr(err, errlen, "line %zu: %s", lineno, msg);
				goto fail;
			}
			if (rc == 2)
				final_line = lineno;
		}
		p = nl ? nl + 1 : end;
	}
	if (!final_line) {
		seterr(err, errlen, lineno ? "no final object after %zu lines" : "empty output", lineno);
		goto fail;
	}
	return 0;
fail:
	model_reply_free(r);
	return -EINVAL;
}

void model_reply_free(struct model_reply *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->ncalls; i++) {
		free(r->calls[i].id);
		free(r->calls[i].name);
		json_decref(r->calls[i].args);
	}
	free(r->calls);
	free(r->text);
	memset(r, 0, sizeof *r);
}

/* -------------------------------------------------------------- tool output */


int tool_output_parse(const char *out, size_t len, json_t **result)
{
	if (!result)
		return -EINVAL;
	*result = NULL;
	if (!out && len)
		return -EINVAL;
	if (len) {
		json_error_t je;
		/* NUL is allowed: a string's length is kept, as for the text below. */
		json_t *v;
		if (jsonmp_loadb(out, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &v, &je) == -ENOMEM)
			return -ENOMEM; /* never JSON output taken for text */
		/* JSON nested deeper than its event can hold is kept as text. */
		if (v && jsonmp_fits(v, 1)) {
			*result = v;
			return 0;
		}
		json_decref(v);
	}
	if (len && out[len - 1] == '\n') {
		len--;
		if (len && out[len - 1] == '\r')
			len--;
	}
	*result = json_text(len ? out : "", len);
	return *result ? 0 : -ENOMEM;
}

static int utf8_valid(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t len = strlen(str);
	int ok = 1;
	for (size_t i = 0; ok && i < len; i += utf8_seq(s + i, len - i, &ok))
		;
	return ok;
}

char *tool_input_json(const char *tool_call_id, const char *name, json_t *args, const char *conversation)
{
	return tool_input_json_attempt(tool_call_id, name, args, conversation, 0);
}

char *tool_input_json_attempt(const char *tool_call_id, const char *name, json_t *args, const char *conversation,
			      uint32_t attempt)
{
	if (!tool_call_id || !name || !conversation || (args && !json_is_object(args)) ||
	    !utf8_valid(tool_call_id) || !utf8_valid(name) || !utf8_valid(conversation)) {
		errno = EINVAL;
		return NULL;
	}
	json_t *o = json_object();
	json_t *id = json_string(tool_call_id), *nm = json_string(name), *cv = json_string(conversation);
	json_t *a = args ? json_incref(args) : json_object();
	char *s = NULL;
	if (!o || !a || !id || !nm || !cv)
		goto done;
	if (json_object_set(o, "tool_call_id", id) || json_object_set(o, "name", nm) ||
	    json_object_set(o, "args", a) || json_object_set(o, "conversation", cv) ||
	    (attempt > 0 && json_object_set_new(o, "attempt", json_integer(attempt))))
		goto done;
	s = jsonmp_dumps(o, JSON_COMPACT, 1, NULL); /* never a request short of a key */
done:
	json_decref(o);
	json_decref(id);
	json_decref(nm);
	json_decref(cv);
	json_decref(a);
	if (!s)
		errno = ENOMEM;
	return s;
}
