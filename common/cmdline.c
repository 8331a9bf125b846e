/* cmdline.c: splitting a configured command line into words (see cmdline.h). */
#include "common/cmdline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n';
}

/* Parse one word starting at *pp (not a blank) into word; *have tells whether
 * it produced a word at all (a lone backslash-newline does not). */
static int split_word(const char **pp, char *word, size_t *wlen, int *have)
{
	const char *p = *pp;
	size_t wl = 0;
	*have = 0;
	while (*p && !is_blank(*p)) {
		if (*p == '\'') {
			const char *q = strchr(p + 1, '\'');
			if (!q)
				return -EINVAL;
			memcpy(word + wl, p + 1, (size_t)(q - p - 1));
			wl += (size_t)(q - p - 1);
			p = q + 1;
			*have = 1;
		} else if (*p == '"') {
			for (p++;; p++) {
				if (!*p)
					return -EINVAL;
				if (*p == '"')
					break;
				/* POSIX: inside double quotes a backslash escapes only these. */
				if (*p == '\\' && p[1] && strchr("\\\"$`\n", p[1])) {
					p++;
					if (*p == '\n')
						continue;
				}
				word[wl++] = *p;
			}
			p++;
			*have = 1;
		} else if (*p == '\\') {
			if (!p[1])
				return -EINVAL;
			if (p[1] != '\n') { /* backslash-newline: a line continuation */
				word[wl++] = p[1];
				*have = 1;
			}
			p += 2;
		} else {
			word[wl++] = *p++;
			*have = 1;
		}
	}
	word[wl] = 0;
	*wlen = wl;
	*pp = p;
	return 0;
}

int cmdline_split(const char *cmdline, char ***argvp)
{
	if (!argvp)
		return -EINVAL;
	*argvp = NULL;
	if (!cmdline)
		return -EINVAL;
	/* A word is never longer than the line, so one scratch buffer does. */
	char *word = malloc(strlen(cmdline) + 1);
	char **v = NULL;
	size_t n = 0, cap = 0;
	int err = -ENOMEM;
	if (!word)
		return -ENOMEM;
	for (const char *p = cmdline;;) {
		while (is_blank(*p))
			p++;
		if (!*p)
			break;
		size_t wl;
		int have;
		if ((err = split_word(&p, word, &wl, &have)) < 0)
			goto fail;
		err = -ENOMEM;
		if (!have)
			continue;
		if (n + 2 > cap) {
			size_t ncap = cap ? cap * 2 : 8;
			char **nv = realloc(v, ncap * sizeof *nv);
			if (!nv)
				goto fail;
			v = nv;
			cap = ncap;
		}
		if (!(v[n] = malloc(wl + 1)))
			goto fail;
		memcpy(v[n], word, wl + 1);
		v[++n] = NULL;
	}
	if (n == 0) {
		err = -EINVAL;
		goto fail;
	}
	free(word);
	*argvp = v;
	return 0;
fail:
	free(word);
	if (v) {
		v[n] = NULL;
		cmdline_free(v);
	}
	return err;
}

void cmdline_free(char **argv)
{
	if (!argv)
		return;
	for (char **a = argv; *a; a++)
		free(*a);
	free(argv);
}
