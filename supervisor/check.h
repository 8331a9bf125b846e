/* check.h: `agentd check`, the store's consistency check (see check.c). */
#ifndef AGENTD_CHECK_H
#define AGENTD_CHECK_H

#include <stdio.h>

/* Check the store in dir (read-only; safe while agentd runs), one line per
 * problem on out, then a summary line. Returns the number of problems, or -1
 * when the store cannot be opened. */
int check_store(const char *dir, FILE *out);

#endif
