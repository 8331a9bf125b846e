/* config_int.h: what config.c and config_model.c share, inside common/ only
 * (config.h is the contract for everyone else). */
#ifndef AGENTD_CONFIG_INT_H
#define AGENTD_CONFIG_INT_H

#include "common/config.h"

#include <ini.h>
#include <stddef.h>
#include <stdio.h>

/* Value setters of one key. Each returns 0, or -1 on a value the key does
 * not take or no memory; *dst is changed only on 0. */
int config_set_str(char **dst, const char *v); /* a copy of v; the old *dst freed */
int config_set_int(int *dst, const char *v, int min, int max); /* decimal in [min, max] */
int config_set_decimal(double *dst, const char *v); /* digits, one optional point */

/* [store]: the PostgreSQL target and its connection limit; 0, -1 on a bad
 * value, -2 when k is not one of them (config_store.c). */
int config_store_key(struct config *c, const char *k, const char *v);

/* 1 if s[0..n) is an environment variable's name (what a shell takes), else 0. */
int config_env_name_ok(const char *s, size_t n);

/* One key of [model.NAME] for the HTTP kinds (kind, base_url, model,
 * api_key_env, headers, prices, ...): 0, -1 on a bad value, -2 when k is
 * not one of them. */
int config_model_http_key(struct model_cfg *m, const char *k, const char *v);

/* The whole [model.NAME] read: an HTTP kind needs model and takes no
 * command; sets the kind's defaults and resolves headers (each $VAR passed
 * to agentd-model through m->iso.env). 0, or -1 with err ("PATH: ...")
 * set; err never holds a header's value. */
int config_model_http_validate(const char *path, struct model_cfg *m, char *err, size_t errlen);

/* headers = "Name: value" ...: words split as env's, each checked (an HTTP
 * token, no control character, not one owned(arg, name, len) refuses, not
 * twice) and each $VAR resolved (and passed through iso's env) into *out, a
 * NULL-terminated array. 0, or -1 with err ("PATH: [SECTION] headers: ...")
 * set, never holding a value. */
int config_headers(const char *path, const char *section, const char *conf, struct isolate_cfg *iso,
		   const char *(*owned)(const void *, const char *, size_t), const void *arg, char ***out,
		   char *err, size_t errlen);
/* The headers agent/mcp_http.c sets on an MCP server's requests: why one
 * may not be configured, or NULL. */
const char *config_mcp_header_owned(const void *arg, const char *name, size_t n);

/* What the parser will not say, from a first pass over the file: its lines
 * fit libinih's buffer, none is indented (libinih takes an indented line as
 * the continuation of the one above: "set twice", or a value with a line of
 * another key in it), every section named is one agentd knows, and on which
 * line each key stands (for messages). A line longer than the buffer ends
 * the pass, so /dev/zero ends too. */
struct prescan {
	int *keyline;
	int nkey, capkey;
	char (*sect)[INI_MAX_LINE]; /* section names, in order */
	int *sectline;
	int nsect, capsect;
};
/* The pass over f (rewound by the caller before libinih reads it): 0, or -1
 * with err ("PATH:LINE: ...") set. */
int config_prescan(FILE *f, const char *path, struct prescan *p, char *err, size_t errlen);
void config_prescan_free(struct prescan *p);

#endif
