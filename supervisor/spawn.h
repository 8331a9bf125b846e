/*
 * spawn.h: starting agentd-worker, at the bottom of the supervisor: fork and
 * exec with the worker's IPC socket at descriptor 3 and an exec-status pipe
 * at 4 (close-on-exec: zero bytes read means the exec succeeded, else the
 * child's errno), every other descriptor closed, signal dispositions reset
 * and the mask cleared in the child (skalibs' cspawn and libuv's
 * process.c do the same). Starting and waiting for the exec are two steps,
 * so a worker's exec can overlap a commit's flush.
 */
#ifndef AGENTD_SPAWN_H
#define AGENTD_SPAWN_H

#include <sys/types.h>

/* A child forked and not yet known to have exec'd. */
struct spawn {
	pid_t pid;  /* 0: none */
	int ipc;    /* agentd's end of its IPC socket */
	int ep;     /* the exec-status pipe's read end */
};

#define SPAWN_NONE ((struct spawn){ 0, -1, -1 })

/* Fork argv[0] with argv (NULL-terminated). 0 with *sp filled, or -errno
 * (nothing left open). Blocks every signal across the fork, so none hits the
 * child before it resets dispositions. */
int spawn_start(char *const argv[], struct spawn *sp);
/* Wait for the exec (only for it). 0: it runs, sp->ipc is agentd's end
 * (non-blocking), sp->ep closed. Otherwise the exec's -errno, as the child
 * reported it (-EIO when it reported none): it was reaped and its
 * descriptors closed. */
int spawn_exec_wait(struct spawn *sp);
/* Kill and reap a child started and not waited for; close its descriptors. */
void spawn_abort(struct spawn *sp);

#endif
