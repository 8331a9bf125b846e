/*
 * worker.h: agentd-worker's context, the one state every module of the
 * worker takes as its first argument (docs/architecture.md, "Inside agent/").
 *
 * One conversation's runtime per process: main.c owns the only struct worker
 * (static storage, so the exit handlers it registers still see it after main
 * returns) and passes it down; no module keeps state of its own about the
 * conversation.
 *
 * Caveats, the rules every worker module keeps:
 *  - A failure that would leave a record, or this worker's view of the log,
 *    short of something ends the process (exit with an IPC_EXIT_* code,
 *    ipc/ipc.h): an open transaction commits nothing and the next worker
 *    does the work again. Functions declared void therefore return only on
 *    success; the headers say which exit codes each may end with.
 *  - Told to stop while a model or tool runs, the worker exits 0 from inside
 *    the call (the turn is re-run, the tool re-dispatched, on revival).
 *  - The store is held only while the worker works (wstore.h): around a
 *    model's or tool's run and while it waits, st is NULL.
 */
#ifndef AGENTD_AGENT_WORKER_H
#define AGENTD_AGENT_WORKER_H

#include "agent/mcp.h"
#include "agent/proc.h"
#include "common/config.h"
#include "ipc/ipc.h"
#include "store/store.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The paths a worker's sandbox covers: its data or run directory, its
 * configuration, up to WORKER_ARG_HIDE --hide paths from agentd (the
 * control socket, the configuration agentd read), and [agentd] hide. */
#define WORKER_ARG_HIDE 4
#define WORKER_HIDE_MAX (2 + WORKER_ARG_HIDE + CONFIG_HIDE_MAX)

struct worker {
	store *st;           /* NULL while we wait (wstore_let_go) */
	const char *conv;
	uint64_t lease;
	int ipc;             /* the socket to agentd (-1 until parsed) */
	struct config cfg;
	mcp_set *mcp;        /* the MCP servers this worker started (mcp.h) */
	json_t *settings;
	json_t *summary;     /* {from_seq,to_seq,content,version} or NULL */
	uint64_t sum_to, sum_version;
	json_t *events;      /* the working set: events after the summary */
	uint64_t last_seq;
	int64_t *compacts;   /* compact requests queued, answered together */
	size_t ncompact, compact_cap;
	int ended;           /* status ended (as of the last read): no turn, no dispatch */
	int active;          /* status active (as of the last read): a resumed give-up runs its turn again */
	struct store_run run; /* the run of the model turn in progress (id 0: none); model points to run_model */
	char run_model[128];
	int paused;          /* status paused (as of the last read): the budget is spent, no turn */
	int woken;           /* a wake was read since the last refresh */
	int orphan;          /* the supervisor is gone: commit what is finished, then exit */
	int stop;            /* told to stop while waiting to write: exit after it */
	int compacting;      /* answering compacts on the way out (on_stop) */
	const char *reported; /* the last state reported, bar "compacting" (wipc_report_state) */
	const char *data;    /* the store: closed (NULL st) while we wait */
	const char *run_dir; /* the directory of workers.lock: data, or --run-dir */
	const char *shown;   /* the store as logs name it (no password) */
	int pg;              /* a PostgreSQL store: connections, so a slot while open */
	int nslots, slotfd, slot; /* --connections, connections.lock, the slot held (-1: none) */
	struct store_opts so;
	/* What every tool, MCP server and model command runs inside (proc.h):
	 * agentd-sandbox beside this program, covering sandbox_hide. */
	struct proc_sandbox sandbox;
	const char *sandbox_hide[WORKER_HIDE_MAX + 1];
	char sandbox_path[4096];
	/* Told to stop between steps (wipc_gate_leave): set by main.c, which
	 * answers queued compactions and exits. Never returns. */
	void (*on_stop)(struct worker *w) __attribute__((noreturn));
	char ipcbuf[IPC_MAX];
};

/* The arg of a model's or tool's on_watch and on_start callbacks (proc.h,
 * mcp.h): the worker, and whether a stop was read while it ran. */
struct worker_watch {
	struct worker *w;
	int stop;
	/* A tool not safe to run twice: a stop is held until its result is
	 * committed (stop_held), rather than ending a run whose outcome would
	 * then be unknown. */
	int hold;
	int stop_held;
};

#endif
