/*
 * backup.h: the `backup` op's copy, made by a thread of its own while the
 * loop goes on serving (store_backup may run beside the loop's use of the
 * store). One backup at a time; its reply is sent when the copy is complete
 * and flushed (store_backup makes it durable before it returns).
 */
#ifndef AGENTD_BACKUP_H
#define AGENTD_BACKUP_H

#include <jansson.h>

#include "store/store.h"

struct client;
struct slot;

/* The thread's "done" descriptor, registered with the loop. 0 or -errno. */
int backup_open(store *st);
/* Copy the store into dir (absolute; made when absent, else it must be an
 * empty directory), answering slot (its reply's id: id, borrowed) when done.
 * 0: started, the slot is answered later. Otherwise nothing started and the
 * slot is not touched: -EBUSY (a backup runs), -ENOTDIR / -errno (dir cannot
 * be made), -ENOMEM. */
int backup_start(const char *dir, struct slot *slot, json_t *id);
/* Its client went: the copy goes on, its reply is dropped. */
void backup_client_gone(struct client *c);
/* At exit: wait for a running copy and answer it; close the descriptor. */
void backup_close(void);

#endif
