/*
 * assets.h: the page, its script and styles, built into agentd-web (the C
 * source is generated from web/static/ at build time by web/embed.cmake), so
 * the program needs no files, no CDN and no network.
 */
#ifndef AGENTD_WEB_ASSETS_H
#define AGENTD_WEB_ASSETS_H

#include <stddef.h>

struct web_asset {
	const char *path;           /* "/app.js" */
	const char *type;           /* its Content-Type */
	const unsigned char *data;  /* NUL-terminated past len */
	size_t len;
};

extern const struct web_asset web_assets[];
extern const size_t web_assets_count;

/* The asset at path, or NULL. */
const struct web_asset *web_asset_find(const char *path);

#endif
