/*
 * jsonb.h: building a JSON value of many parts with one check at the end.
 *
 * Each step that fails (a NULL part given, or an append or set out of
 * memory) sets *oom; the builder then returns NULL, never a value with a
 * part quietly left out (a model request short of a message, a tool call
 * short of its arguments). Each step takes its part's reference, as
 * json_array_append_new and json_object_set_new do, also on failure.
 */
#ifndef AGENTD_JSONB_H
#define AGENTD_JSONB_H

#include <jansson.h>

/* v itself; *oom set when it is NULL. */
static inline json_t *jb_check(int *oom, json_t *v)
{
	if (!v)
		*oom = 1;
	return v;
}

static inline void jb_append(int *oom, json_t *a, json_t *v)
{
	if (!v || json_array_append_new(a, v))
		*oom = 1;
}

static inline void jb_set(int *oom, json_t *o, const char *k, json_t *v)
{
	if (!v || json_object_set_new(o, k, v))
		*oom = 1;
}

/* The value built, or NULL (v released) when a step failed. */
static inline json_t *jb_done(int oom, json_t *v)
{
	if (oom || !v) {
		json_decref(v);
		return NULL;
	}
	return v;
}

#endif
