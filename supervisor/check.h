/* check.h: `agentd check`, the store's consistency check (see check.c). */
#ifndef AGENTD_CHECK_H
#define AGENTD_CHECK_H

#include <stdio.h>

/* Check the store in dir (read-only; safe while agentd runs), one line per
 * problem on out, then a summary line. 0 with *problems the number found
 * (0: consistent), or store_open's error when the store cannot be opened
 * (said on out; *problems 0). */
int check_store(const char *dir, FILE *out, int *problems);

#endif
