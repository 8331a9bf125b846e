/*
 * convlock.h: one worker per conversation at a time, kept by the kernel.
 *
 * A worker holds its conversation's lock (an open-file-description lock on
 * one byte of DATA/workers.lock, at an offset hashed from the conversation
 * id) from before it counts a tool's dispatch until the tool's result is
 * committed; the kernel drops it when the process ends, however it ends. A
 * worker whose agentd died meanwhile finishes the tool and commits the result
 * under its lease; a new agentd must not take a new lease for that
 * conversation (which would fence that commit off and run the tool again)
 * while the lock is held, so it asks convlock_held() first and tries again a
 * moment later. The wait is bounded by the tool's timeout.
 *
 * Caveats: two conversations may hash to one byte (2^62 offsets: never in
 * practice); the only cost would be one waiting for the other's worker to end.
 * The descriptor is close-on-exec: a model or tool never holds the lock.
 */
#ifndef AGENTD_CONVLOCK_H
#define AGENTD_CONVLOCK_H

/* Open (creating, mode 0600) DATA/workers.lock. Returns the descriptor, or a
 * negative errno (the path too long: -ENAMETOOLONG). */
int convlock_open(const char *data_dir);

/* Take conv's lock on fd, waiting while another process holds it. 0, or a
 * negative errno (-EINVAL: a bad argument). */
int convlock_take(int fd, const char *conv);

/* 1 when a process other than the caller's open of fd holds conv's lock, 0
 * when none does, or a negative errno. */
int convlock_held(int fd, const char *conv);

#endif
