/*
 * connslot.h: a limit on the worker processes holding store connections at
 * once, kept by the kernel (docs/scale-out.md, "Connections").
 *
 * With a PostgreSQL store every worker that has the store open holds
 * connections; a worker lets go of the store while it waits (for a model, a
 * tool, a message), so only workers at work count. The limit is N
 * open-file-description locks on the bytes 0..N-1 of RUN/connections.lock: a
 * worker holds one byte while it has the store open and releases it when it
 * lets go; the kernel drops it when the process ends, however it ends. A
 * worker that finds every byte taken waits for one (the caller logs that it
 * waits), so a client sees a slower reply, never an error.
 *
 * The descriptor is close-on-exec: a model or tool never holds a slot.
 */
#ifndef AGENTD_CONNSLOT_H
#define AGENTD_CONNSLOT_H

/* Open (creating, mode 0600) DIR/connections.lock. The descriptor, or a
 * negative errno. */
int connslot_open(const char *dir);

/* Take a free slot of n on fd without waiting: its number (0..n-1), or
 * -EAGAIN when all n are held (by other processes), or a negative errno. */
int connslot_try(int fd, int n);

/* Take slot `slot` (0..n-1), waiting while another process holds it. 0 or a
 * negative errno. */
int connslot_wait(int fd, int slot);

/* Release the slot taken on fd. */
void connslot_release(int fd, int slot);

#endif
