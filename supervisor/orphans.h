/*
 * orphans.h: workers of an earlier agentd that outlived it (a worker
 * finishes the tool it runs and commits its result under its lease:
 * common/convlock.h). agentd waits for such a worker before it starts its
 * own for the conversation; this finds the process, so that one stopped
 * (SIGSTOP, a debugger, a frozen cgroup) is not waited for forever.
 */
#ifndef AGENTD_ORPHANS_H
#define AGENTD_ORPHANS_H

#include <stdint.h>
#include <sys/types.h>

/* A worker stopped this long while it holds its conversation's lock is
 * killed (docs/operations.md, "Processes"). */
#define ORPHAN_STOPPED_MAX_MS 10000

/* A process other than ours whose command line runs a worker for conv on
 * data_dir: its pid and whether it is stopped (state T or t). 1 found, 0
 * none (or /proc unreadable). Reads /proc at most once a second (now:
 * monotonic ms); between reads the last one's answer stands. */
int orphan_find(const char *data_dir, const char *conv, int64_t now, pid_t *pid, int *stopped);

#endif
