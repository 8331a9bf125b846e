/*
 * wipc.h: the worker's side of the supervisor<->worker socket (ipc/ipc.h):
 * the messages it reports, the ones it reads between steps, and the write
 * gate. The lowest of the worker's modules: it knows the context (worker.h)
 * and the socket, never the store.
 */
#ifndef AGENTD_AGENT_WIPC_H
#define AGENTD_AGENT_WIPC_H

#include "agent/worker.h"

#include <sys/types.h>

/* Report the worker's state ("running", "idle", "awaiting_input",
 * "compacting") to the supervisor and in the process title. A state other
 * than "compacting" is kept in w->reported. A full socket drops it (the
 * next report says it again). state is not copied: a string literal. */
void wipc_report_state(struct worker *w, const char *state);

/* Tell the supervisor which process group runs for us (0: none any more),
 * so that a kill of this worker takes the model or tool with it. */
void wipc_report_child(struct worker *w, pid_t pgid);

/* wipc_report_child as a proc_opts/mcp_watch on_start callback: arg is a
 * struct worker_watch (worker.h). */
void wipc_on_start(void *arg, pid_t pgid);

/* Send a message the supervisor must get, waiting for room rather than
 * dropping it. Exits 0 when the supervisor is gone. */
void wipc_send_all(struct worker *w, const struct ipc_msg *m);

/* Read every message waiting on the socket: stops are noted, compacts
 * queued (w->compacts), wakes noted (w->woken). Returns 0, 1 when told to
 * stop (the rest is still read: a compact queued behind a stop is still
 * answered), 2 when the supervisor is gone (the socket closed). */
int wipc_drain(struct worker *w);

/* Wait for a message of the given type, taking wakes and compacts that come
 * first. Returns 0 when it came; 1 when a stop came first (with keep_stop
 * the stop is kept in w->stop and the wait goes on instead) or the
 * supervisor is gone. */
int wipc_await(struct worker *w, int type, int keep_stop);

/* The supervisor is gone: note it once in w->orphan. finished: the caller
 * holds a finished result, which it still commits; otherwise exits 0. */
void wipc_orphaned(struct worker *w, int finished);

/* The write gate (ipc.h): ask for our turn to write and wait for it, keeping
 * a stop for later. finished as wipc_orphaned (called when the supervisor
 * does not answer). */
void wipc_gate_enter(struct worker *w, int finished);

/* Give the gate back with the last seq the commit made visible (0: none),
 * then honour a stop that came meanwhile (w->on_stop, which exits). Exits 0
 * when orphaned (its one write done). seq is the first argument and the
 * function is never inlined: tests/proc/test_revival.py breaks at its
 * address and reads seq from the first argument register. */
void wipc_gate_leave(uint64_t seq, struct worker *w);

#endif
