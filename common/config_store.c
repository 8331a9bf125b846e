/* config_store.c: the [store] section and a store target's text (see
 * config.h): which targets name PostgreSQL, and a target as logs show it,
 * its password masked. */
#include "common/config.h"
#include "common/config_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int config_store_is_pg(const char *t)
{
	/* As store/store.c dispatches (common may not include store/). */
	return t && (!strncmp(t, "postgresql://", 13) || !strncmp(t, "postgres://", 11) || !strncmp(t, "host=", 5) ||
		     !strncmp(t, "dbname=", 7));
}

/* The value at v (up to end) as "***", or as many '*' as it is long when
 * shorter: never longer than it was, so it is done in place. */
static void mask(char *v, char *end)
{
	if (end - v >= 3) {
		memcpy(v, "***", 3);
		memmove(v + 3, end, strlen(end) + 1);
	} else {
		memset(v, '*', (size_t)(end - v));
	}
}

char *config_store_shown(const char *t)
{
	char *out = strdup(t ? t : "");
	if (!out || !config_store_is_pg(out))
		return out;
	if (strstr(out, "://")) {
		/* scheme://user:password@host...: the password out */
		char *u = strstr(out, "://") + 3, *at = strchr(u, '@'), *colon = strchr(u, ':');
		char *slash = strchr(u, '/');
		if (at && (!slash || at < slash) && colon && colon < at) {
			char *n = NULL;
			if (asprintf(&n, "%.*s:***%s", (int)(colon - out), out, at) < 0) {
				free(out);
				return NULL;
			}
			free(out);
			out = n;
		}
		/* ...?password=... in the query */
		for (char *p = strstr(out, "password="); p; p = strstr(p + 1, "password=")) {
			if (p[-1] != '?' && p[-1] != '&')
				continue;
			char *v = p + 9;
			mask(v, v + strcspn(v, "&"));
		}
		return out;
	}
	/* conninfo: password=VALUE or password='VALUE' */
	for (char *p = strstr(out, "password"); p; p = strstr(p + 1, "password")) {
		if (p != out && p[-1] != ' ')
			continue;
		char *v = p + 8;
		while (*v == ' ')
			v++;
		if (*v != '=')
			continue;
		v++;
		while (*v == ' ')
			v++;
		char *end = v;
		if (*v == '\'') {
			for (end = v + 1; *end && *end != '\''; end++)
				if (*end == '\\' && end[1])
					end++;
			if (*end)
				end++;
		} else {
			end = v + strcspn(v, " ");
		}
		mask(v, end);
	}
	return out;
}

int config_store_key(struct config *c, const char *k, const char *v)
{
	if (!strcmp(k, "target"))
		return config_store_is_pg(v) ? config_set_str(&c->store, v) : -1;
	if (!strcmp(k, "connections"))
		return config_set_int(&c->store_connections, v, 1, 100000);
	return -2;
}
