/*
 * proc.h: run a configured command (a model or a server tool) without a shell.
 *
 * A command line from the configuration is split like a shell would split it,
 * with no substitution of any kind (cmdline_split, common/cmdline.h), and run in its own process
 * group with its stdin fed from memory and its stdout and stderr captured
 * (proc_run). Nothing here interprets what the command prints: protocol.h does.
 *
 * Caveats (rules a caller must keep):
 *  - proc_run blocks until the command is gone. It reaps only its own child
 *    (waitpid on that pid), so the caller must not reap with waitpid(-1, ...)
 *    from another thread meanwhile, and must not set SIGCHLD to SIG_IGN or
 *    SA_NOCLDWAIT (the kernel would then reap the child before we can).
 *  - It may run with any signal mask and any SIGPIPE disposition: SIGPIPE is
 *    blocked for the duration of the call and one raised by our own writes to
 *    the child's stdin is consumed before the caller's mask is restored.
 *  - The command gets a clean process: every signal disposition default, an
 *    empty signal mask, only descriptors 0, 1 and 2 open, its own process group
 *    (pgid == its pid), and PR_SET_PDEATHSIG(SIGKILL) so it dies with the
 *    calling thread. The pdeath signal reaches the direct child only: if the
 *    caller is SIGKILLed, a grandchild the command forked keeps running until
 *    someone kills its group (whose id is the command's pid).
 *  - When proc_run returns, the whole process group has been sent SIGKILL
 *    (after the direct child exited, or when it was killed) while the child's
 *    unreaped pid still held the group id, so a recycled id is never
 *    signalled. Killed grandchildren are reaped by whoever inherits them (init
 *    or a subreaper). A process that left the group (setsid, setpgid) is out
 *    of reach; if it keeps stdout or stderr open, proc_run stops reading them
 *    half a second after the child exited instead of waiting for it.
 */
#ifndef AGENTD_PROC_H
#define AGENTD_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/config.h"

#define PROC_OUT_CAP_DEFAULT ((size_t)16 << 20) /* out_cap 0 */
#define PROC_ERR_TAIL_DEFAULT ((size_t)4096)    /* err_tail 0 */

/* The sandbox a command runs in (agent/sandbox.c): program is the path of
 * agentd-sandbox, hide the paths every command must not see (the worker's:
 * data and run directories, control socket, configuration, [agentd] hide),
 * NULL-terminated or NULL. A command whose iso says sandbox = no runs
 * without; its iso's hide paths are covered too. */
struct proc_sandbox {
	const char *program;
	const char *const *hide;
};

struct proc_opts {
	/* The environment is minimal (isolate.h): PATH, HOME, LANG, AGENTD_*,
	 * what iso->env allows or sets, then env_add: NULL-terminated "K=V"
	 * strings replacing a variable of the same name; may be NULL. PATH
	 * search uses the caller's PATH, not one given here. */
	const char *const *env_add;
	/* Environment, limits and user of the command (isolate.h); NULL: the
	 * minimal environment, the caller's user, the caller's limits. Must
	 * outlive the call. */
	const struct isolate_cfg *iso;
	/* NULL: the command runs as it is (agentd-model, which reads the
	 * configuration's keys); else inside agentd-sandbox, unless iso says
	 * sandbox = no. Must outlive the call. */
	const struct proc_sandbox *sandbox;
	/* Written to the child's stdin as it accepts it, then stdin is closed
	 * (at once when input_len is 0). A child that exits or closes stdin
	 * without reading it all is not an error. */
	const void *input;
	size_t input_len;
	/* <= 0: no limit. At the deadline (monotonic, from the fork) the process
	 * group is SIGKILLed and timed_out is set. */
	int64_t timeout_ms;
	/* Most stdout bytes kept (0: PROC_OUT_CAP_DEFAULT). One byte more and the
	 * group is SIGKILLed, out_overflow set and out holds the first out_cap. */
	size_t out_cap;
	/* Keep the last err_tail bytes of stderr (0: PROC_ERR_TAIL_DEFAULT);
	 * memory stays within 2 * err_tail whatever the child writes. */
	size_t err_tail;
	/* Called for each stdout line as it arrives, without its '\n' (a last line
	 * with no '\n' is delivered when stdout ends). line points into out and is
	 * NUL-terminated, valid only during the call; len is exact (a line may hold
	 * NUL bytes). A nonzero return kills the group and proc_run returns that
	 * value; no call is made after one returned nonzero or after any kill.
	 * Lines are counted within out_cap. May be NULL. */
	int (*on_line)(void *arg, const char *line, size_t len);
	void *arg; /* passed to on_line and on_watch */
	/* -1, or a descriptor polled too (the worker's IPC socket). When it is
	 * readable, hung up or in error, on_watch(arg) runs: nonzero kills the group
	 * and proc_run returns -ECANCELED; zero goes on (on_watch must have consumed
	 * what made it readable; after zero on a hangup or error the descriptor is
	 * no longer watched, so a dead peer cannot spin us). watch_fd is ignored
	 * when on_watch is NULL (so a zeroed proc_opts watches nothing). */
	int watch_fd;
	int (*on_watch)(void *arg);
	/* Called once the command runs (exec succeeded) with its pid, which is
	 * also its process group id; may be NULL. The worker reports it to the
	 * supervisor, which kills the group if the worker dies first: the pdeath
	 * signal alone would miss a grandchild. */
	void (*on_start)(void *arg, pid_t pgid);
};

struct proc_result {
	pid_t pid;           /* the child's pid (== its process group id); 0 if never forked */
	int exited, status;  /* exit status, if it exited */
	int signaled, sig;   /* killed by signal sig (SIGKILL when we killed it) */
	int timed_out;       /* we killed it at the deadline */
	int out_overflow;    /* we killed it for writing more than out_cap */
	char *out;           /* stdout, up to out_cap bytes, NUL-terminated */
	size_t out_len;
	char *err;           /* the last err_tail bytes of stderr, NUL-terminated */
	size_t err_len;
	int64_t elapsed_ms;  /* from before the fork to the reap */
};

/*
 * Run argv[0] (searched in PATH when it has no '/') with argv, and wait until
 * it exited and its group was killed. o may be NULL (all defaults, no input).
 *
 * Returns:
 *   0            the child ran; inspect r (exited/status, signaled/sig,
 *                timed_out, out_overflow)
 *   -errno       it could not start: -ENOENT (no such program), -EACCES (not
 *                executable), -ENOEXEC, ... as execvp reported it through a
 *                close-on-exec pipe; or fork/pipe failures (-EAGAIN, -EMFILE);
 *                or isolate.h's codes (ISOLATE_ENETNS, ISOLATE_ESANDBOX,
 *                ISOLATE_ELANDLOCK: isolate_strerror says what they mean)
 *   -ECANCELED   on_watch returned nonzero (the child was killed and reaped)
 *   other        on_line's nonzero return value (killed and reaped; return
 *                positive values to tell them from the codes here)
 *   -EINVAL      argv, argv[0] or r NULL, input NULL with input_len > 0,
 *                an env_add entry without '=' (or with an empty name),
 *                out_cap or err_tail absurdly large
 *   -ENOMEM      (also after the start, like a failing poll's -errno: the
 *                child is then killed and reaped)
 * r is always initialised (zeroed first); out and err are non-NULL,
 * NUL-terminated strings unless -EINVAL or -ENOMEM was returned, and whatever
 * was captured is kept on every return. Free with proc_result_free.
 */
int proc_run(char *const argv[], const struct proc_opts *o, struct proc_result *r);
void proc_result_free(struct proc_result *r); /* frees out and err, zeroes r */

/*
 * A long-lived command with pipes (an MCP server): the same clean process as
 * proc_run's (own group, pdeath signal, environment, isolation), but the
 * caller talks to it. Only env_add, iso and sandbox of o are used.
 */
struct proc_child {
	pid_t pid;    /* also its process group id; 0: none */
	int in_fd;    /* its stdin, our end: non-blocking, close-on-exec */
	int out_fd;   /* its stdout, our end: non-blocking */
	int err_fd;   /* its stderr, our end: non-blocking */
	int pidfd;    /* readable once it exited; -1 without pidfd_open */
};

/* Start argv. Returns 0 with c filled, or as proc_run before the start
 * (-ENOENT, -EACCES, -EPERM from a user change, -EINVAL, -ENOMEM, ...) with
 * c->pid 0 and every descriptor -1. Writing to a child that exited raises
 * SIGPIPE: the caller ignores it (the worker does). */
int proc_spawn(char *const argv[], const struct proc_opts *o, struct proc_child *c);
/* 1 when the child exited (not reaped: its status in the out-parameters),
 * 0 while it runs, -errno. */
int proc_child_exited(const struct proc_child *c, int *exited, int *status, int *signaled, int *sig);
/* Close our ends, SIGKILL its group, reap it; c->pid becomes 0. NULL or an
 * ended child is fine. */
void proc_child_end(struct proc_child *c);

/* The path of the program name installed beside this one (in the directory
 * of /proc/self/exe), written into buf (n bytes); name itself, for a PATH
 * lookup, when that cannot be read or does not fit. Returns buf or name. */
const char *proc_beside_self(const char *name, char *buf, size_t n);

#endif
