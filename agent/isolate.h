/*
 * isolate.h: what a model, tool or MCP server process may see and do
 * (struct isolate_cfg, common/config.h; docs/tools.md "Isolation").
 *
 * Every process the worker starts gets a minimal environment, never the
 * worker's whole one: PATH, HOME and LANG of the worker (PATH a default
 * when it has none), then what the configuration's `env` allows or sets,
 * then what the caller adds (AGENTD_CONVERSATION; AGENTD_TOOL_CALL_ID for
 * a tool). No other AGENTD_* variable of the worker is passed on. Between fork and
 * exec the child lowers its limits (setrlimit) and, when a user or group is
 * configured, drops to it: setgroups, then setgid, then setuid (after setuid
 * the process could no longer change its groups). With network = none it
 * first enters a new, empty network namespace (no_network in isolate.c):
 * a command never runs with the network it was configured without.
 * What runs next is agentd-sandbox (agent/sandbox.c) unless sandbox = no:
 * its failures come back as ISOLATE_ESANDBOX and ISOLATE_ELANDLOCK codes.
 *
 * Caveats:
 *  - isolate_child is for the child between fork and exec: it only makes
 *    system calls (async-signal-safe) and reads iso, allocated before fork.
 *  - A credential change clears PR_SET_PDEATHSIG: the caller sets it again
 *    after isolate_child (proc.c does).
 *  - Dropping to another user needs root (CAP_SETUID, CAP_SETGID): otherwise
 *    isolate_child returns -EPERM and the command does not run.
 */
#ifndef AGENTD_ISOLATE_H
#define AGENTD_ISOLATE_H

#include <stddef.h>

#include "common/config.h"

/* PATH when the worker has none (a supervisor started with env -i). */
#define ISOLATE_PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"

/*
 * The child's environment: a new NULL-terminated array (free the array
 * only: its strings are borrowed from environ, iso and add, which must
 * outlive it). iso may be NULL (the minimal environment); add is NULL or
 * NULL-terminated "K=V" strings. Later sources replace a variable of the
 * same name. Returns 0, -EINVAL (an add entry without '=' or with an empty
 * name) or -ENOMEM.
 */
int isolate_env(const struct isolate_cfg *iso, const char *const *add, char ***envp);

/* isolate_child's code for a network namespace the kernel refused:
 * ISOLATE_ENETNS - errno (isolate_strerror says which). */
#define ISOLATE_ENETNS (-0x10000)

/* agentd-sandbox's codes (agent/sandbox.c): a namespace or mount the
 * kernel refused, ISOLATE_ESANDBOX - errno; a Landlock older than ABI 6,
 * ISOLATE_ELANDLOCK - abi (0: no Landlock). */
#define ISOLATE_ESANDBOX (-0x20000)
#define ISOLATE_ELANDLOCK (-0x30000)

/* Whether rc is one of the codes of the space base (ISOLATE_ENETNS, ...). */
#define ISOLATE_IS(rc, base) ((rc) <= (base) && (rc) > (base) - 4096)

/* In the child: limits, then the network namespace (network = none), then
 * groups, group and user. 0, -errno, or ISOLATE_ENETNS - errno. iso may be
 * NULL. */
int isolate_child(const struct isolate_cfg *iso);

/* What a negative code of proc_run or proc_spawn (isolate_child's and
 * agentd-sandbox's codes included) means, into buf: strerror's text, or
 * "cannot make its network namespace (network = none): REASON", or
 * "cannot make its sandbox: REASON", or what Landlock lacks. Returns 0. */
int isolate_strerror(int rc, char *buf, size_t len);

/* Enter a new user namespace (with more namespaces in flags, CLONE_NEWNET
 * or CLONE_NEWNS) in which this process's uid and gid stay what they were
 * (setgroups denied). System calls only: for a child between fork and exec.
 * 0 or -errno. */
int isolate_own_userns(int flags);

/*
 * Why a process that failed may have met its limits, for the error result
 * ("killed at its CPU time limit (rlimit_cpu = 2 s)"), written to buf; 0 if
 * none applies (no limit configured that explains this end). signaled/sig
 * and exited/status as proc_result has them.
 */
int isolate_explain(const struct isolate_cfg *iso, int exited, int status, int signaled, int sig, char *buf,
		    size_t len);

#endif
