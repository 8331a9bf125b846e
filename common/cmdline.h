/*
 * cmdline.h: a command line from the configuration, split into words. Only
 * the configuration names commands (docs/configuration.md); agentd checks at
 * start that each one splits, and agentd-worker splits it again to run it.
 */
#ifndef AGENTD_CMDLINE_H
#define AGENTD_CMDLINE_H

/*
 * Split cmdline into words the way a POSIX shell splits a simple command,
 * without expansions: blanks (space, tab, newline) separate words; '...' is
 * literal; inside "..." a backslash escapes only \ " $ ` (and removes a
 * newline), any other backslash stays; outside quotes a backslash makes the
 * next character literal (backslash-newline is removed). Adjacent parts join
 * into one word (a'b'"c" is abc) and '' or "" is an empty word. No globbing,
 * no $VAR, no ~, no comments, no operators: * $ ~ # | ; & < > ( ) are plain
 * characters.
 *
 * Returns 0 and sets *argv to a NULL-terminated array of at least one word
 * (free it with cmdline_free); -EINVAL when cmdline or argv is NULL, when
 * there is no word, on an unterminated quote or a trailing backslash; -ENOMEM.
 * *argv is set to NULL on error.
 */
int cmdline_split(const char *cmdline, char ***argv);
void cmdline_free(char **argv); /* NULL is fine */

#endif
