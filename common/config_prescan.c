/* config_prescan.c: the first pass over a configuration file, before
 * libinih's (config_int.h, struct prescan). */
#include "common/config_int.h"

#include <ctype.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Where libinih's find_chars_or_comment stops: at one of chars, or at a ';'
 * after whitespace (an inline comment), or at the end. */
static const char *ini_find(const char *t, const char *chars)
{
	int was_space = 0;
	for (; *t && !strchr(chars, *t) && !(was_space && *t == ';'); t++)
		was_space = isspace((unsigned char)*t);
	return t;
}

static int prescan_line(struct prescan *p, const char *path, int no, const char *ln, char *err, size_t errlen)
{
	const char *t = ln;
	while (isspace((unsigned char)*t))
		t++;
	if (!*t || *t == ';' || *t == '#')
		return 0;
	if (t != ln) {
		snprintf(err, errlen, "%s:%d: an indented line (it would continue the value above): remove the indentation",
			 path, no);
		return -1;
	}
	if (*t == '[') {
		const char *e = ini_find(t + 1, "]");
		if (*e != ']')
			return 0; /* the parser's syntax error */
		const char *after = e + 1;
		while (isspace((unsigned char)*after))
			after++;
		if (*after && *after != ';' && *after != '#') {
			snprintf(err, errlen, "%s:%d: text after the section header: '%s' (a key goes on a line of its own)",
				 path, no, after);
			return -1;
		}
		if (p->nsect == p->capsect) {
			int cap = p->capsect ? 2 * p->capsect : 16;
			void *a = realloc(p->sect, (size_t)cap * sizeof *p->sect);
			if (a)
				p->sect = a;
			void *b = a ? realloc(p->sectline, (size_t)cap * sizeof *p->sectline) : NULL;
			if (!b) {
				snprintf(err, errlen, "%s: out of memory", path);
				return -1;
			}
			p->sectline = b;
			p->capsect = cap;
		}
		const char *n = t + 1;
		while (isspace((unsigned char)*n))
			n++;
		size_t len = (size_t)(e - n);
		while (len && isspace((unsigned char)n[len - 1]))
			len--;
		snprintf(p->sect[p->nsect], INI_MAX_LINE, "%.*s", (int)len, n);
		p->sectline[p->nsect++] = no;
		return 0;
	}
	const char *k = ini_find(t, "=:");
	if (*k != '=' && *k != ':')
		return 0; /* no key: the parser's syntax error */
	if (p->nkey == p->capkey) {
		int cap = p->capkey ? 2 * p->capkey : 64;
		void *a = realloc(p->keyline, (size_t)cap * sizeof *p->keyline);
		if (!a) {
			snprintf(err, errlen, "%s: out of memory", path);
			return -1;
		}
		p->keyline = a;
		p->capkey = cap;
	}
	p->keyline[p->nkey++] = no;
	return 0;
}

/* libinih reads a line with fgets into INI_MAX_LINE bytes: the longest it
 * takes whole, its newline included, is INI_MAX_LINE - 2 bytes (a '\r'
 * counted). It sees a line up to a NUL, and skips a UTF-8 BOM first. */
int config_prescan(FILE *f, const char *path, struct prescan *p, char *err, size_t errlen)
{
	char ln[INI_MAX_LINE];
	int ch, no = 1, len = 0, cut = 0;
	for (;;) {
		ch = getc(f);
		if (ch == '\n' || ch == EOF) {
			ln[cut ? cut - 1 : len] = 0;
			const char *t = ln;
			if (no == 1 && !strncmp(t, "\xEF\xBB\xBF", 3))
				t += 3;
			if (prescan_line(p, path, no, t, err, errlen))
				return -1;
			if (ch == EOF)
				return 0;
			no++;
			len = cut = 0;
		} else if (len >= INI_MAX_LINE - 2) {
			snprintf(err, errlen, "%s:%d: a line over %d bytes (a long command can live in a script)", path,
				 no, INI_MAX_LINE - 2);
			return -1;
		} else {
			if (!ch && !cut)
				cut = len + 1; /* the parser's line ends here */
			ln[len++] = (char)ch;
		}
	}
}

/* A section that holds no key never reaches on_key: an unknown name, or a
 * model or tool that would silently not exist. */

void config_prescan_free(struct prescan *p)
{
	free(p->keyline);
	free(p->sect);
	free(p->sectline);
}
