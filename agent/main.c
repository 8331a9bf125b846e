/*
 * main.c: agentd-worker, one conversation's runtime (docs/protocol.md "Semantics", docs/configuration.md).
 *
 * Started by agentd with the store path, the conversation, its writer lease and
 * the IPC socket. It opens its own store handle, reads "latest summary + events
 * since", and decides from the log's tail what is owed: run a model turn,
 * re-dispatch unsettled server tool calls with their same ids, or wait for a
 * person. Every state change commits in one transaction with a lease check, so
 * a superseded worker can never write. It exits when told to stop or when its
 * IPC socket closes: a dead supervisor leaves no worker behind.
 *
 * This file is the command line and the decision loop; the steps it takes are
 * the modules below it (docs/architecture.md, "Inside agent/"): turn.h,
 * tools.h, compact.h, over budget.h, model_run.h, workset.h, wstore.h and
 * wipc.h, all passed the one context (worker.h).
 */
#include "agent/compact.h"
#include "agent/tools.h"
#include "agent/turn.h"
#include "agent/wipc.h"
#include "agent/workset.h"
#include "agent/wstore.h"
#include "common/connslot.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "conv/conv.h"

#include <bsd/unistd.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long a waiting worker keeps the store open before it lets go of it. */
#define STORE_LINGER_MS 200

/* Told to stop, between steps: compacts asked for before the stop are still
 * done (replies come in the order asked), then exit. */
static void stop_now(struct worker *w) __attribute__((noreturn));
static void stop_now(struct worker *w)
{
	if (w->ncompact && !w->compacting) {
		w->compacting = 1; /* its own writes must not stop it halfway */
		wstore_take(w);
		compact_answer(w);
	}
	exit(0);
}

static int settle_idle(struct worker *w)
{
	store_txn *t = wstore_rbegin(w);
	struct store_conv c;
	int e = store_conv_get(t, w->conv, &c);
	int status = c.status;
	store_txn_abort(t);
	if (e)
		wstore_die(w, e, "read conversation");
	if (status != STORE_IDLE && status != STORE_ENDED) {
		t = wstore_wbegin(w, 0);
		if (wstore_log_moved(w, t, w->last_seq)) {
			/* A send came since: idle now would hide the turn it is owed. */
			wstore_wabort(w, t);
			return 1;
		}
		wstore_put_state(w, t, STORE_IDLE, conv_fsm_state("idle", NULL, w->last_seq));
		wstore_commit(w, t, "idle", 0);
	}
	if (w->cfg.compact_events > 0 && json_array_size(w->events) > (size_t)w->cfg.compact_events) {
		char err[512];
		if (compact_run(w, w->cfg.compact_keep, err, sizeof err))
			log_warn("%s: compaction failed: %s", w->conv, err);
	}
	wipc_report_state(w, "idle");
	return 0;
}

/* A tail that owes tools: dispatch the first server call, else await the
 * people (tl freed here). 1: decide again; 0: the worker now waits. */
static int run_tools(struct worker *w, struct tail *tl)
{
	size_t i;
	json_t *call;
	json_t *humans = json_array();
	int ran = 0;
	if (!humans)
		wstore_die_oom(w, NULL, "deciding the next step");
	json_array_foreach(tl->unsettled, i, call) {
		const char *ex = json_string_value(json_object_get(call, "executor"));
		if ((ex && !strcmp(ex, "human")) ||
		    (!ran && tools_call_unknown(w, json_string_value(json_object_get(call, "tool_call_id"))))) {
			/* An unknown call waits for a decision as a person's does. */
			if (json_array_append(humans, call)) /* never a call left unawaited */
				wstore_die_oom(w, NULL, "deciding the next step");
		} else if (!ran) {
			tools_dispatch(w, call);
			ran = 1;
		}
	}
	tail_free(tl);
	if (ran) {
		json_decref(humans);
		return 1;
	}
	int again = tools_await_people(w, humans);
	json_decref(humans);
	return again;
}

/* Act on the log until nothing more can be done without an event. */
static void run(struct worker *w)
{
	for (;;) {
		if (w->woken) {
			/* The supervisor sends no other wake until it hears
			 * this, so it must leave before the log is read. */
			struct ipc_msg m = { .type = IPC_WOKEN };
			ipc_send(w->ipc, &m);
		}
		w->woken = 0; /* this refresh sees what every wake so far announced */
		workset_refresh(w);
		struct tail tl;
		int te = tail_decide_active(w->events, w->sum_to, w->active, &tl);
		if (te == -ENOMEM)
			wstore_die_oom(w, NULL, "deciding what the log owes"); /* not a damaged record */
		if (te) {
			log_error("%s: the log's tail holds a malformed event: refusing to guess", w->conv);
			exit(IPC_EXIT_CORRUPT);
		}
		/* An ended conversation is closed: what its log would still
		 * owe (a turn, a tool to dispatch) is not done. */
		if (w->ended && (tl.action == TAIL_TURN || tl.action == TAIL_TOOLS))
			log_info("%s: the conversation is ended: the work its log owes is not done", w->conv);
		else if (w->paused && tl.action == TAIL_TURN) {
			/* Its turn waits for a larger budget: `update` makes it
			 * active and wakes this worker. */
			tail_free(&tl);
			wipc_report_state(w, "idle");
			compact_answer(w);
			if (w->woken)
				continue;
			return;
		} else if (tl.action == TAIL_TURN) {
			int round = tl.round;
			/* The run answers the events after the last turn boundary
			 * (its marker, or the summary's end when it covers it). */
			uint64_t from = tl.marker_seq ? tl.marker_seq : tl.ctx_seq;
			tail_free(&tl);
			turn_run(w, round, from);
			continue;
		} else if (tl.action == TAIL_TOOLS) {
			if (run_tools(w, &tl))
				continue;
			compact_answer(w);
			if (w->woken)
				continue; /* read by a compaction's model call: not lost */
			return;
		}
		tail_free(&tl);
		if (settle_idle(w))
			continue;
		compact_answer(w);
		/* A wake read while compacting (the summarize call watches the
		 * socket and consumes it) announces events this refresh missed:
		 * waiting now would leave them unanswered until the next event. */
		if (w->woken)
			continue;
		return;
	}
}

/* At every exit (the worker exits from many places): each MCP server is
 * shut down as the stdio transport says (stdin closed, then signals), so a
 * call it was told is cancelled is read, and nothing it forked stays. */
static void mcp_end(int status, void *arg)
{
	struct worker *w = arg;
	(void)status;
	mcp_set_free(w->mcp);
	w->mcp = NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: agentd-worker --data DIR --conversation ID --lease N --ipc-fd FD [--config FILE]\n"
		   "                     [--sync full|none] [--audit] [--log-level LEVEL] [--hide PATH]...\n"
		   "       agentd-worker --store-env --run-dir DIR --connections N ... (a PostgreSQL store:\n"
		   "                     its target in the environment variable AGENTD_STORE)\n"
		   "One conversation's runtime; started by agentd, not by hand.\n");
}

/* The command line agentd gives a worker into w (and the rest into the
 * out-parameters). 0, or the status to exit with. */
static int parse_args(struct worker *w, int argc, char **argv, const char **data, const char **config,
		      const char **level, int *sync, int *audit_on)
{
	static const struct option opts[] = {
		{ "data", required_argument, 0, 'd' }, { "conversation", required_argument, 0, 'c' },
		{ "lease", required_argument, 0, 'l' }, { "ipc-fd", required_argument, 0, 'f' },
		{ "config", required_argument, 0, 'C' }, { "sync", required_argument, 0, 's' },
		{ "audit", no_argument, 0, 'a' }, { "log-level", required_argument, 0, 'L' },
		{ "help", no_argument, 0, 'h' }, { "store-env", no_argument, 0, 'E' },
		{ "run-dir", required_argument, 0, 'R' }, { "connections", required_argument, 0, 'N' },
		{ "hide", required_argument, 0, 'H' }, { 0, 0, 0, 0 },
	};
	int c, from_env = 0, nhide = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': *data = optarg; break;
		case 'c': w->conv = optarg; break;
		case 'l': w->lease = strtoull(optarg, NULL, 10); break;
		case 'f': w->ipc = atoi(optarg); break;
		case 'C': *config = optarg; break;
		case 's': *sync = strcmp(optarg, "none") ? STORE_SYNC_FULL : STORE_SYNC_NONE; break;
		case 'a': *audit_on = 1; break;
		case 'L': *level = optarg; break;
		case 'E': from_env = 1; break;
		case 'R': w->run_dir = optarg; break;
		case 'N': w->nslots = atoi(optarg); break;
		case 'H':
			if (nhide == WORKER_ARG_HIDE) {
				usage(stderr);
				return IPC_EXIT_USAGE;
			}
			w->sandbox_hide[nhide++] = optarg;
			break;
		case 'h': usage(stdout); return -1;
		default: usage(stderr); return IPC_EXIT_USAGE;
		}
	}
	if (from_env && !*data) {
		/* Copied, then out of the environment: the models and tools
		 * this worker runs need not see it. */
		const char *t = getenv("AGENTD_STORE");
		*data = t ? strdup(t) : NULL;
		unsetenv("AGENTD_STORE");
		w->pg = 1;
	}
	if (w->pg && (!w->run_dir || w->nslots < 1)) {
		usage(stderr);
		return IPC_EXIT_USAGE;
	}
	if (!*data || !w->conv || !w->lease || w->ipc < 0 || !store_id_valid(w->conv, strlen(w->conv))) {
		usage(stderr);
		return IPC_EXIT_USAGE;
	}
	return 0;
}

/* What every command runs inside (worker.h): hidden from it, the data or
 * run directory (a PostgreSQL target is no path), the configuration, what
 * agentd passed with --hide (already in sandbox_hide) and [agentd] hide. */
static void sandbox_init(struct worker *w, const char *data, const char *config)
{
	size_t n = 0;
	while (w->sandbox_hide[n])
		n++;
	w->sandbox_hide[n++] = w->pg ? w->run_dir : data;
	if (config)
		w->sandbox_hide[n++] = config;
	for (size_t i = 0; w->cfg.hide && w->cfg.hide[i]; i++)
		w->sandbox_hide[n++] = w->cfg.hide[i];
	w->sandbox_hide[n] = NULL;
	w->sandbox.program = proc_beside_self("agentd-sandbox", w->sandbox_path, sizeof w->sandbox_path);
	w->sandbox.hide = w->sandbox_hide;
}

/* Logging, the descriptor agentd passed, SIGPIPE, the config and the MCP
 * servers (shut down at every exit: mcp_end), before the store is touched: 0, or the status to exit with. */
static int start_up(struct worker *w, const char *data, const char *config, const char *level, int sync,
		    int audit_on)
{
	int lv = config_log_level(level);
	log_init("agentd-worker", lv < 0 ? LOG_INFO : lv);
	struct stat ipc_st;
	if (fstat(w->ipc, &ipc_st) < 0 || !S_ISSOCK(ipc_st.st_mode)) {
		fprintf(stderr, "agentd-worker: --ipc-fd %d is not a socket: agentd starts workers, not people\n", w->ipc);
		return IPC_EXIT_USAGE;
	}
	/* A tool or model that closes its stdin early must not kill us. */
	signal(SIGPIPE, SIG_IGN);
	config_init(&w->cfg);
	char err[512];
	if (config && config_load(&w->cfg, config, err, sizeof err)) {
		log_error("%s", err);
		return IPC_EXIT_USAGE;
	}
	w->cfg.audit = audit_on;
	w->cfg.sync = sync;
	sandbox_init(w, data, config);
	if (!(w->mcp = mcp_set_new(&w->cfg, w->conv, &w->sandbox)) || on_exit(mcp_end, w)) {
		log_error("%s: out of memory", w->conv);
		return IPC_EXIT_STORE;
	}
	return 0;
}

/* The store, opened as agentd opened it (a connection slot first on
 * PostgreSQL): 0, or the status to exit with. */
static int open_store(struct worker *w, const char *data, int sync, int audit_on)
{
	w->data = data;
	if (!w->run_dir)
		w->run_dir = data;
	/* The map's limits are agentd's: a worker opening with the store's
	 * defaults would grow the map past max_map_size. PostgreSQL has no
	 * map (agentd ignores them there too). */
	w->so = (struct store_opts){ .sync = sync, .audit = audit_on, .map_size = w->pg ? 0 : w->cfg.map_size,
				    .max_map_size = w->pg ? 0 : w->cfg.max_map_size,
				    .idle_txn_timeout_ms = w->cfg.lease_ms / 2 };
	char *shown = w->pg ? config_store_shown(data) : NULL;
	w->shown = shown ? shown : data;
	if (w->pg && (w->slotfd = connslot_open(w->run_dir)) < 0) {
		log_error("%s: cannot open %s/connections.lock: %s", w->conv, w->run_dir, strerror(-w->slotfd));
		return IPC_EXIT_STORE;
	}
	wstore_slot_take(w);
	int e = store_open(&w->st, data, &w->so);
	if (e) {
		log_error("%s: cannot open the store in %s: %s%s%s", w->conv, w->shown, store_strerror(e),
			  *store_open_error() ? ": " : "", store_open_error());
		return IPC_EXIT_STORE;
	}
	return 0;
}

/* Act on the log, then wait for the supervisor, until it says stop or is
 * gone. */
static void serve(struct worker *w)
{
	for (;;) {
		run(w);
		/* Wait for the supervisor: wake, stop, compact, or its death;
		 * past a moment (a person may take hours), without the store. */
		struct pollfd p = { w->ipc, POLLIN, 0 };
		int n = poll(&p, 1, STORE_LINGER_MS);
		if (n == 0) {
			wstore_let_go(w);
			n = poll(&p, 1, -1);
		}
		if (n < 0 && errno != EINTR)
			return;
		int d = wipc_drain(w);
		if (d == 1 && w->ncompact) { /* as stop_now, then shut_down */
			w->compacting = 1;
			wstore_take(w);
			compact_answer(w);
		}
		if (d)
			return;
		wstore_take(w);
	}
}

/* The clean exit's frees, so a leak checker sees only real leaks. */
static void shut_down(struct worker *w)
{
	if (w->st)
		store_close(w->st);
	json_decref(w->events);
	json_decref(w->settings);
	json_decref(w->summary);
	free(w->compacts);
	mcp_end(0, w);
	config_free(&w->cfg);
}

int main(int argc, char **argv, char **envp)
{
	const char *data = NULL, *config = NULL, *level = "info";
	int sync = STORE_SYNC_FULL, audit_on = 0;
	/* Static, not on main's stack: the exit handler (mcp_end) runs after
	 * main returns. The only reference to it: every module is passed w. */
	static struct worker worker;
	struct worker *w = &worker;
	w->ipc = -1;
	w->slot = w->slotfd = -1;
	w->reported = "running";
	w->on_stop = stop_now;
	jsonmp_alloc_init(); /* before any JSON is read: jsonmp_loadb sees every failed allocation */
	if (ipc_stdio_guard())
		return EXIT_FAILURE;
	setproctitle_init(argc, argv, envp);
	int rc = parse_args(w, argc, argv, &data, &config, &level, &sync, &audit_on);
	if (rc)
		return rc < 0 ? 0 : rc;
	if ((rc = start_up(w, data, config, level, sync, audit_on)) || (rc = open_store(w, data, sync, audit_on)))
		return rc;
	setproctitle("%s starting", w->conv);
	/* ipc.h: the commit this worker was started for may still be in flight. */
	if (wipc_await(w, IPC_GO, 0))
		return 0;
	workset_load(w);
	struct ipc_msg ready = { .type = IPC_READY, .num = getpid() };
	ipc_send(w->ipc, &ready);
	serve(w);
	shut_down(w);
	return 0;
}
