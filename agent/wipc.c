/*
 * wipc.c: the worker's side of the supervisor<->worker socket (wipc.h).
 */
#include "agent/wipc.h"
#include "common/log.h"

#include <bsd/unistd.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

void wipc_report_state(struct worker *w, const char *state)
{
	if (strcmp(state, "compacting"))
		w->reported = state;
	struct ipc_msg m = { .type = IPC_STATE, .text = state, .text_len = strlen(state) };
	ipc_send(w->ipc, &m);
	setproctitle("%s %s", w->conv, state);
}

void wipc_report_child(struct worker *w, pid_t pgid)
{
	struct ipc_msg m = { .type = IPC_CHILD, .num = pgid };
	ipc_send(w->ipc, &m);
}

void wipc_on_start(void *arg, pid_t pgid)
{
	struct worker_watch *ww = arg;
	wipc_report_child(ww->w, pgid);
}

void wipc_send_all(struct worker *w, const struct ipc_msg *m)
{
	int rc;
	while ((rc = ipc_send(w->ipc, m)) == -EAGAIN) {
		struct pollfd p = { w->ipc, POLLOUT, 0 };
		poll(&p, 1, -1);
	}
	if (rc < 0)
		exit(0); /* the supervisor is gone: nothing more is ours to write */
}

/* Handle one message outside a turn; returns 1 when the worker must exit. */
static int ipc_one(struct worker *w, const struct ipc_msg *m)
{
	switch (m->type) {
	case IPC_STOP:
		return 1;
	case IPC_COMPACT:
		if (w->ncompact == w->compact_cap) {
			size_t cap = w->compact_cap ? w->compact_cap * 2 : 8;
			int64_t *n = reallocarray(w->compacts, cap, sizeof *n);
			if (!n) {
				struct ipc_msg r = { .type = IPC_COMPACTED, .num = m->num, .text = "out of memory",
						     .text_len = 13 };
				ipc_send(w->ipc, &r);
				return 0;
			}
			w->compacts = n;
			w->compact_cap = cap;
		}
		w->compacts[w->ncompact++] = m->num;
		return 0;
	default:
		w->woken = 1; /* wake: the decision loop re-reads the log before it waits */
		return 0;
	}
}

int wipc_drain(struct worker *w)
{
	int stop = 0;
	for (;;) {
		struct ipc_msg m;
		int rc = ipc_recv(w->ipc, &m, w->ipcbuf);
		if (rc == -EAGAIN)
			return stop;
		if (rc <= 0)
			return 2; /* closed: the supervisor is gone */
		if (ipc_one(w, &m))
			stop = 1; /* read on: a compact queued behind it is still answered */
	}
}

int wipc_await(struct worker *w, int type, int keep_stop)
{
	for (;;) {
		struct pollfd p = { w->ipc, POLLIN, 0 };
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return 1;
		struct ipc_msg m;
		int rc;
		while ((rc = ipc_recv(w->ipc, &m, w->ipcbuf)) == 1) {
			if (m.type == type)
				return 0;
			if (ipc_one(w, &m)) {
				if (!keep_stop)
					return 1;
				w->stop = 1;
			}
		}
		if (rc != -EAGAIN)
			return 1;
	}
}

/* A finished result (a tool's, a model's turn, a summary) is committed all
 * the same: the tool's side effect is done, and a new agentd would run it
 * again. The lease check in the write still decides (a newer worker fences
 * us off), and the gate only orders writers, so writing without its grant is
 * safe: LMDB's mutex does the locking. Anything else (counting a dispatch,
 * waiting for people) is left to the next worker. */
void wipc_orphaned(struct worker *w, int finished)
{
	if (!w->orphan)
		log_warn("%s: the supervisor is gone%s", w->conv, finished ? ": committing the finished result" : "");
	w->orphan = 1;
	if (!finished)
		exit(0);
}

/* A stop is kept until the write is done, so what the step did (a tool's
 * result) is not thrown away. */
void wipc_gate_enter(struct worker *w, int finished)
{
	struct ipc_msg m = { .type = IPC_WRITE };
	int rc = w->orphan ? -EPIPE : 0;
	while (!rc && (rc = ipc_send(w->ipc, &m)) == -EAGAIN) {
		struct pollfd p = { w->ipc, POLLOUT, 0 };
		poll(&p, 1, -1);
		rc = 0;
	}
	if (rc < 0 || wipc_await(w, IPC_GRANT, 1))
		wipc_orphaned(w, finished);
}

/* Never inlined nor given another calling convention, on every build type:
 * a debugger stopping the worker between a commit and its announcement (a
 * process test does) breaks at its address and reads seq from the first
 * argument register, with or without debug information. */
#if defined(__clang__)
#define GATE_LEAVE_ATTR __attribute__((noinline))
#else
#define GATE_LEAVE_ATTR __attribute__((noipa))
#endif
GATE_LEAVE_ATTR void wipc_gate_leave(uint64_t seq, struct worker *w)
{
	if (w->orphan)
		exit(0); /* its one write done: the next worker does the rest */
	struct ipc_msg m = { .type = IPC_WRITTEN, .seq = seq };
	wipc_send_all(w, &m);
	if (w->stop && !w->compacting)
		w->on_stop(w);
}
