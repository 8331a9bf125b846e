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
 */
#include "agent/isolate.h"
#include "agent/mcp.h"
#include "agent/model.h"
#include "agent/proc.h"
#include "agent/protocol.h"
#include "agent/render.h"
#include "common/cmdline.h"
#include "ipc/ipc.h"
#include "common/jsonmp.h"
#include "ipc/proto.h"
#include "store/store.h"
#include "common/config.h"
#include "common/connslot.h"
#include "common/convlock.h"

#include <bsd/unistd.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>


/* Audit rows are keyed by turn_ref: a turn's assistant_msg seq, or for a
 * summarize call this bit plus the summary's to_seq (so the two never clash;
 * the audit op shows it as task "summarize" and the bare to_seq). */
#define AUDIT_SUMMARY_BIT (1ULL << 62)

/* How long a waiting worker keeps the store open before it lets go of it. */
#define STORE_LINGER_MS 200

static struct {
	store *st;
	const char *conv;
	uint64_t lease;
	int ipc;
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
	int compacting;      /* answering compacts on the way out (stop_now) */
	const char *data;    /* the store: closed (NULL st) while we wait */
	const char *run_dir; /* the directory of workers.lock: data, or --run-dir */
	const char *shown;   /* the store as logs name it (no password) */
	int pg;              /* a PostgreSQL store: connections, so a slot while open */
	int nslots, slotfd, slot; /* --connections, connections.lock, the slot held (-1: none) */
	struct store_opts so;
	char ipcbuf[IPC_MAX];
} W;

/* ---- store plumbing -------------------------------------------------- */

/* Let go of the store while we wait (for a model, a tool, the supervisor):
 * the flush of every commit, anyone's, visits each process's mapping of each
 * page it cleans, so a thousand waiting workers' maps made the supervisor's
 * commits several times slower (docs/architecture.md, "A waiting worker lets go of the store"). Opening it again costs
 * about 0.1 ms. */
static void store_let_go(void)
{
	if (W.st) {
		store_close(W.st);
		W.st = NULL;
	}
	if (W.slot >= 0) {
		connslot_release(W.slotfd, W.slot);
		W.slot = -1;
	}
}

/* On PostgreSQL, one of the --connections slots before the store opens
 * (common/connslot.h): at the limit, wait for one, saying so once. */
static void slot_take(void)
{
	if (!W.pg || W.slot >= 0)
		return;
	int s = connslot_try(W.slotfd, W.nslots);
	if (s == -EAGAIN) {
		s = (int)(getpid() % W.nslots);
		log_warn("%s: all %d store connection slots are in use (connections in [store]): waiting for one",
			 W.conv, W.nslots);
		int e = connslot_wait(W.slotfd, s);
		if (e)
			s = e;
		else
			log_info("%s: got a store connection slot", W.conv);
	}
	if (s < 0) {
		log_error("%s: cannot take a store connection slot in %s/connections.lock: %s", W.conv, W.run_dir,
			  strerror(-s));
		exit(IPC_EXIT_STORE);
	}
	W.slot = s;
}

static void store_take(void)
{
	int e;
	if (W.st)
		return;
	slot_take();
	if ((e = store_open(&W.st, W.data, &W.so))) {
		log_error("%s: cannot open the store in %s again: %s%s%s", W.conv, W.shown, store_strerror(e),
			  *store_open_error() ? ": " : "", store_open_error());
		exit(IPC_EXIT_STORE);
	}
}

static int ipc_one(const struct ipc_msg *m);

/* Whether the data directory's filesystem is (nearly) out of space: then a
 * full store is the disk's, and a larger map would not help a new worker. */
static int disk_full(void)
{
	struct statvfs fs;
	if (W.pg)
		return 0; /* the server's disk: not ours to see */
	return statvfs(W.data, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < 4u << 20;
}

static void die_store(int e, const char *what) __attribute__((noreturn));
static void die_store(int e, const char *what)
{
	if (e == STORE_E_FENCED || e == STORE_E_NOTFOUND) {
		/* Another worker holds the lease, or the conversation is gone
		 * (deleted as this worker started or ran: nothing is wrong). */
		if (e == STORE_E_FENCED)
			log_warn("%s: %s: lease superseded (fenced); exiting", W.conv, what);
		else
			log_info("%s: %s: the conversation was deleted; exiting", W.conv, what);
		exit(IPC_EXIT_GONE);
	}
	log_error("%s: %s: %s", W.conv, what, store_strerror(e));
	struct store_stat st;
	if (e == STORE_E_FULL && W.st && store_stat(W.st, &st) == 0 && st.map_size < st.max_map_size &&
	    !disk_full()) {
		/* The map grows before this handle's next transaction, and a
		 * new worker reserves room again: a restart, not a dead end. */
		log_warn("%s: the map (%llu bytes) may still grow: exiting to be restarted", W.conv,
			 (unsigned long long)st.map_size);
		exit(IPC_EXIT_STORE);
	}
	exit(e == STORE_E_CORRUPT ? IPC_EXIT_CORRUPT : e == STORE_E_FULL ? IPC_EXIT_FULL : IPC_EXIT_STORE);
}

/* About the bytes v takes in the store (its compact JSON). */
static size_t json_size(const json_t *v)
{
	return v ? json_dumpb(v, NULL, 0, JSON_COMPACT) : 0;
}

/* Room for a write of about `bytes` before its transaction: the map grows
 * by itself only by halves, and a large turn or result would otherwise meet
 * a full map that could still grow (store_reserve). */
static void reserve(size_t bytes)
{
	store_reserve(W.st, bytes); /* no system call unless the map grows */
}

static store_txn *rbegin(void)
{
	store_txn *t;
	int e = store_txn_begin(W.st, STORE_READ, &t);
	if (e)
		die_store(e, "read transaction");
	return t;
}

/* Send a message the supervisor must get: wait for room rather than drop it. */
static void ipc_send_all(const struct ipc_msg *m)
{
	int rc;
	while ((rc = ipc_send(W.ipc, m)) == -EAGAIN) {
		struct pollfd p = { W.ipc, POLLOUT, 0 };
		poll(&p, 1, -1);
	}
	if (rc < 0)
		exit(0); /* the supervisor is gone: nothing more is ours to write */
}

/* Wait for a message of the given type, taking wakes and compactions that
 * come first (ipc_one). A stop that comes first ends the wait (returns 1),
 * or with keep_stop is kept in W.stop for later. Returns 1 too when the
 * supervisor is gone. */
static int await_msg(int type, int keep_stop)
{
	for (;;) {
		struct pollfd p = { W.ipc, POLLIN, 0 };
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return 1;
		struct ipc_msg m;
		int rc;
		while ((rc = ipc_recv(W.ipc, &m, W.ipcbuf)) == 1) {
			if (m.type == type)
				return 0;
			if (ipc_one(&m)) {
				if (!keep_stop)
					return 1;
				W.stop = 1;
			}
		}
		if (rc != -EAGAIN)
			return 1;
	}
}

/* The supervisor is gone (killed, or it closed our socket). A finished
 * result (a tool's, a model's turn, a summary) is committed all the same:
 * the tool's side effect is done, and a new agentd would run it again. The
 * lease check in the write still decides (a newer worker fences us off), and
 * the gate only orders writers, so writing without its grant is safe: LMDB's
 * mutex does the locking. Anything else (counting a dispatch, waiting for
 * people) is left to the next worker: exit now. */
static void orphaned(int finished)
{
	if (!W.orphan)
		log_warn("%s: the supervisor is gone%s", W.conv, finished ? ": committing the finished result" : "");
	W.orphan = 1;
	if (!finished)
		exit(0);
}

/* The write gate (ipc.h): ask the supervisor for our turn to write and wait
 * for it; a stop is kept until the write is done, so what the step did (a
 * tool's result) is not thrown away. finished: the write holds a finished
 * result, committed even if the supervisor never answers (orphaned). */
static void gate_enter(int finished)
{
	struct ipc_msg m = { .type = IPC_WRITE };
	int rc = W.orphan ? -EPIPE : 0;
	while (!rc && (rc = ipc_send(W.ipc, &m)) == -EAGAIN) {
		struct pollfd p = { W.ipc, POLLOUT, 0 };
		poll(&p, 1, -1);
		rc = 0;
	}
	if (rc < 0 || await_msg(IPC_GRANT, 1))
		orphaned(finished);
}

static void answer_compacts(void);

/* Told to stop, between steps: compacts asked for before the stop are still
 * done (replies come in the order asked), then exit. */
static void stop_now(void) __attribute__((noreturn));
static void stop_now(void)
{
	if (W.ncompact && !W.compacting) {
		W.compacting = 1; /* its own writes must not stop it halfway */
		store_take();
		answer_compacts();
	}
	exit(0);
}

/* Done writing: give the gate back, with the last seq the commit made
 * visible (0: none), and honour a stop that came meanwhile. Never inlined
 * nor given another calling convention, on every build type: a debugger
 * stopping the worker between a commit and its announcement (a process
 * test does) breaks at its address and reads seq from the first argument
 * register, with or without debug information. */
#if defined(__clang__)
#define GATE_LEAVE_ATTR __attribute__((noinline))
#else
#define GATE_LEAVE_ATTR __attribute__((noipa))
#endif
static GATE_LEAVE_ATTR void gate_leave(uint64_t seq)
{
	if (W.orphan)
		exit(0); /* its one write done: the next worker does the rest */
	struct ipc_msg m = { .type = IPC_WRITTEN, .seq = seq };
	ipc_send_all(&m);
	if (W.stop && !W.compacting)
		stop_now();
}

/* A write transaction that checks the lease first: writers are serialised, so
 * the check holds until commit. finished: see gate_enter. */
static store_txn *wbegin(int finished)
{
	store_txn *t;
	gate_enter(finished);
	/* Lazy: one flush under the writer lock. Nothing outside the store
	 * acts on a commit before a flush covers it (dispatch flushes before
	 * a tool runs; agentd's replies and watchers wait for its frontier). */
	int e = store_txn_begin(W.st, STORE_WRITE_LAZY, &t);
	if (e)
		die_store(e, "write transaction");
	if ((e = store_lease_check(t, W.conv, W.lease))) {
		store_txn_abort(t);
		die_store(e, "lease check");
	}
	return t;
}

static void must(store_txn *t, int e, const char *what)
{
	if (e) {
		store_txn_abort(t);
		die_store(e, what);
	}
}

/* Commit a write transaction; seq: the last event it appended (0: none),
 * announced to the supervisor for watchers. */
static void commit(store_txn *t, const char *what, uint64_t seq)
{
	int e = store_txn_commit(t);
	if (e)
		die_store(e, what);
	gate_leave(seq);
}

/* Abort a write transaction that found nothing to write. */
static void wabort(store_txn *t)
{
	store_txn_abort(t);
	gate_leave(0);
}

/* Pack JSON for the store; the bytes live in b until jsonmp_buf_destroy. */
static store_bytes packed(struct jsonmp_buf *b, const json_t *v)
{
	jsonmp_buf_init(b);
	int e = jsonmp_pack(&b->pk, v);
	if (e == -ENOMEM) {
		/* Never a record stored as something else: end here, inside the
		 * transaction (nothing of it is committed); the turn is re-run on
		 * revival. */
		log_error("%s: out of memory packing a record; exiting", W.conv);
		exit(IPC_EXIT_STORE);
	}
	if (e) {
		msgpack_sbuffer_clear(&b->sb);
		msgpack_pack_nil(&b->pk); /* deeper than we keep: stored as null */
	}
	return (store_bytes){ b->sb.data, b->sb.size };
}

static uint64_t append(store_txn *t, const char *type, json_t *content)
{
	if (!content) {
		/* A content that could not be built (out of memory): stored, it
		 * would be a null event the log's tail can never get past. */
		store_txn_abort(t);
		log_error("%s: cannot build the %s event's content: out of memory", W.conv, type);
		exit(IPC_EXIT_STORE);
	}
	struct jsonmp_buf b;
	struct store_event_in ev = { type, packed(&b, content), NULL };
	uint64_t seq = 0;
	int e = store_event_append(t, W.conv, &ev, &seq, NULL);
	jsonmp_buf_destroy(&b);
	json_decref(content);
	must(t, e, "append");
	return seq;
}

/* ---- IPC ------------------------------------------------------------- */

static const char *reported = "running"; /* the last state reported, bar "compacting" */

static void report_state(const char *state)
{
	if (strcmp(state, "compacting"))
		reported = state;
	struct ipc_msg m = { .type = IPC_STATE, .text = state, .text_len = strlen(state) };
	ipc_send(W.ipc, &m);
	setproctitle("%s %s", W.conv, state);
}

/* Tell the supervisor which process group runs for us, so that a kill of
 * this worker takes the model or tool (and anything it forked) with it. */
static void report_child(void *arg, pid_t pgid)
{
	(void)arg;
	struct ipc_msg m = { .type = IPC_CHILD, .num = pgid };
	ipc_send(W.ipc, &m);
}

/* Run a model or tool command (proc_run), without the store while it runs. */
static int run_command(char *const argv[], const struct proc_opts *o, struct proc_result *r)
{
	store_let_go();
	int rc = proc_run(argv, o, r);
	store_take();
	report_child(NULL, 0);
	return rc;
}

/* Handle one message outside a turn; returns 1 when the worker must exit. */
static int ipc_one(const struct ipc_msg *m)
{
	switch (m->type) {
	case IPC_STOP:
		return 1;
	case IPC_COMPACT:
		if (W.ncompact == W.compact_cap) {
			size_t cap = W.compact_cap ? W.compact_cap * 2 : 8;
			int64_t *n = reallocarray(W.compacts, cap, sizeof *n);
			if (!n) {
				struct ipc_msg r = { .type = IPC_COMPACTED, .num = m->num, .text = "out of memory",
						     .text_len = 13 };
				ipc_send(W.ipc, &r);
				return 0;
			}
			W.compacts = n;
			W.compact_cap = cap;
		}
		W.compacts[W.ncompact++] = m->num;
		return 0;
	default:
		W.woken = 1; /* wake: run() re-reads the log before it waits */
		return 0;
	}
}

/* Drain the socket. Returns non-zero when the worker must exit: 1 when told
 * to stop, 2 when the supervisor is gone. */
static int ipc_drain(void)
{
	int stop = 0;
	for (;;) {
		struct ipc_msg m;
		int rc = ipc_recv(W.ipc, &m, W.ipcbuf);
		if (rc == -EAGAIN)
			return stop;
		if (rc <= 0)
			return 2; /* closed: the supervisor is gone */
		if (ipc_one(&m))
			stop = 1; /* read on: a compact queued behind it is still answered */
	}
}

/* ---- the working set ------------------------------------------------- */

/* Out of memory where going on would leave a record or this worker's view
 * short of something: end here (an open transaction commits nothing); the
 * next worker does the work again. */
static void die_oom(store_txn *t, const char *what) __attribute__((noreturn));
static void die_oom(store_txn *t, const char *what)
{
	if (t)
		store_txn_abort(t);
	log_error("%s: out of memory %s; exiting", W.conv, what);
	exit(IPC_EXIT_STORE);
}

/* 0 with *out, -ENOMEM, or STORE_E_CORRUPT (its content cannot be decoded). */
static int ev_json(const struct store_event *ev, json_t **out)
{
	json_t *c;
	int e = jsonmp_decode(ev->content.ptr, ev->content.len, &c);
	if (e)
		return e == -ENOMEM ? e : STORE_E_CORRUPT;
	*out = json_pack("{sIss#so}", "seq", (json_int_t)ev->seq, "type", (const char *)ev->type.ptr, (int)ev->type.len,
			 "content", c);
	return *out ? 0 : -ENOMEM;
}

static int ws_add(void *arg, const struct store_event *ev)
{
	(void)arg;
	json_t *e = NULL;
	int r = ev_json(ev, &e);
	if (r == STORE_E_CORRUPT)
		log_error("%s: event %llu cannot be decoded", W.conv, (unsigned long long)ev->seq);
	if (!r && json_array_append_new(W.events, e))
		r = -ENOMEM; /* never a working set short of an event */
	if (r)
		return r;
	W.last_seq = ev->seq;
	return 0;
}

static void load_settings(store_txn *t)
{
	struct store_conv c;
	int e = store_conv_get(t, W.conv, &c);
	if (e) {
		store_txn_abort(t);
		die_store(e, "read conversation");
	}
	W.ended = c.status == STORE_ENDED;
	W.active = c.status == STORE_ACTIVE;
	W.paused = c.status == STORE_PAUSED;
	json_decref(W.settings);
	W.settings = NULL;
	if (jsonmp_decode(c.settings.ptr, c.settings.len, &W.settings) == -ENOMEM)
		die_oom(t, "reading the conversation's settings");
	if (!json_is_object(W.settings)) {
		store_txn_abort(t);
		die_store(STORE_E_CORRUPT, "conversation settings");
	}
}

/* Revival read: the latest summary and every event after it. */
static void load(void)
{
	store_txn *t = rbegin();
	struct store_summary s;
	int has = 0;
	load_settings(t);
	if (!(W.events = json_array()))
		die_oom(t, "reading the log");
	int e = store_load_since(t, W.conv, &s, &has, ws_add, NULL);
	if (e == -ENOMEM)
		die_oom(t, "reading the log");
	if (e) {
		store_txn_abort(t);
		die_store(e, "load_since");
	}
	if (has) {
		uint64_t last = 0;
		if ((e = store_event_latest_seq(t, W.conv, &last)) == 0 && last < s.to_seq)
			e = STORE_E_CORRUPT; /* a summary past the log: nothing read from here is sound */
		if (e) {
			store_txn_abort(t);
			die_store(e, "summary");
		}
		W.sum_to = s.to_seq;
		W.sum_version = s.version;
		if (!W.last_seq)
			W.last_seq = s.to_seq;
		json_t *content = NULL;
		if (jsonmp_decode(s.content.ptr, s.content.len, &content) == -ENOMEM)
			die_oom(t, "reading the summary");
		if (!content) {
			store_txn_abort(t);
			die_store(STORE_E_CORRUPT, "summary");
		}
		W.summary = json_pack("{sIsIsosI}", "from_seq", (json_int_t)s.from_seq, "to_seq", (json_int_t)s.to_seq,
				      "content", content, "version", (json_int_t)s.version);
		if (!W.summary)
			die_oom(t, "reading the summary"); /* never a turn rendered without it */
	}
	store_txn_abort(t);
}

/* Pick up events committed since (by the supervisor: sends, resolutions,
 * expiries) and the current settings. */
static void refresh(void)
{
	store_txn *t = rbegin();
	load_settings(t);
	struct store_range r = { .after = W.last_seq };
	int e = store_events_stream(t, W.conv, &r, ws_add, NULL);
	store_txn_abort(t);
	if (e)
		die_store(e, "read events");
}

/* ---- models ---------------------------------------------------------- */

struct model_run {
	struct model_reply final;
	int have_final;
	int stop;
	char err[512];
	json_t *audit; /* the audit row's rendered_context when not the request (HTTP kinds) */
	json_t *attempts; /* HTTP kinds: agentd-model's attempts */
	int failed;       /* HTTP kinds: agentd-model said the call failed */
};

/* A model's streamed text to watchers. */
static void send_delta(const char *text, size_t len)
{
	struct ipc_msg m = { .type = IPC_DELTA, .text = text, .text_len = len };
	if (m.text_len > IPC_MAX - 256) {
		/* A live view only (the final text is whole), cut where
		 * a character begins: watchers get UTF-8. */
		m.text_len = IPC_MAX - 256;
		while (m.text_len > 0 && ((unsigned char)text[m.text_len] & 0xC0) == 0x80)
			m.text_len--;
	}
	ipc_send(W.ipc, &m);
}

static int on_model_line(void *arg, const char *line, size_t len)
{
	struct model_run *mr = arg;
	char *delta = NULL;
	struct model_reply fin = { 0 };
	int rc = model_line_parse(line, len, &delta, &fin, mr->err, sizeof mr->err);
	if ((rc == 1 || rc == 2) && mr->have_final) {
		/* as model_output_parse: the final line is the last */
		free(delta);
		model_reply_free(&fin);
		snprintf(mr->err, sizeof mr->err, "model printed output after its final line");
		return 2;
	}
	if (rc == 1) {
		send_delta(delta, strlen(delta));
		free(delta);
		return 0;
	}
	if (rc == 2) {
		mr->final = fin;
		mr->have_final = 1;
		return 0;
	}
	if (rc == 0)
		return 0;
	return 2; /* bad line: err says why */
}

static int on_model_watch(void *arg)
{
	struct model_run *mr = arg;
	if (ipc_drain()) {
		mr->stop = 1;
		return 1;
	}
	return 0;
}

/* One attempt. 0 with mr->final, -1 with mr->err; exits when told to stop. */
static int model_attempt(const struct model_cfg *mc, const json_t *req, struct model_run *mr, int64_t *latency)
{
	memset(mr, 0, sizeof *mr);
	if (!mc->command) {
		json_t *out = echo_model(req);
		char *line = jsonmp_dumps(out, JSON_COMPACT, 0, NULL);
		json_decref(out);
		int rc = line ? model_output_parse(line, strlen(line), &mr->final, mr->err, sizeof mr->err) : -1;
		if (!line) /* an empty err would read as success */
			snprintf(mr->err, sizeof mr->err, "model %s (echo): out of memory", mc->name);
		free(line);
		*latency = 0;
		return rc;
	}
	char **argv = NULL;
	if (cmdline_split(mc->command, &argv)) {
		snprintf(mr->err, sizeof mr->err, "model %s: cannot split its command", mc->name);
		return -1;
	}
	char *input = jsonmp_dumps(req, JSON_COMPACT, 0, NULL);
	if (!input) { /* never run the model without its request */
		cmdline_free(argv);
		snprintf(mr->err, sizeof mr->err, "model %s: out of memory", mc->name);
		return -1;
	}
	char env1[200];
	snprintf(env1, sizeof env1, "AGENTD_CONVERSATION=%s", W.conv);
	const char *env[] = { env1, NULL };
	struct proc_opts o = {
		.env_add = env, .iso = &mc->iso, .input = input, .input_len = input ? strlen(input) : 0,
		.timeout_ms = mc->timeout_ms, .out_cap = W.cfg.model_out_cap, .on_line = on_model_line,
		.arg = mr, .watch_fd = W.ipc, .on_watch = on_model_watch, .on_start = report_child,
	};
	struct proc_result r;
	int rc = run_command(argv, &o, &r);
	free(input);
	cmdline_free(argv);
	*latency = r.elapsed_ms;
	if (mr->stop || rc == -ECANCELED) {
		proc_result_free(&r);
		model_reply_free(&mr->final);
		log_info("%s: stopped during a model call; the turn is re-run on revival", W.conv);
		exit(0);
	}
	int ok = 0;
	if (rc < 0 && rc != -ECANCELED && rc != 2)
		snprintf(mr->err, sizeof mr->err, "cannot run model %s: %s", mc->name, strerror(-rc));
	else if (rc == 2)
		; /* err set by on_model_line */
	else if (r.timed_out)
		snprintf(mr->err, sizeof mr->err, "model %s timed out after %lld ms", mc->name, (long long)mc->timeout_ms);
	else if (r.out_overflow)
		snprintf(mr->err, sizeof mr->err, "model %s wrote more than %zu bytes", mc->name, W.cfg.model_out_cap);
	else if (!r.exited || r.status != 0)
		snprintf(mr->err, sizeof mr->err, "model %s %s %d: %.200s", mc->name,
			 r.exited ? "exited with status" : "killed by signal", r.exited ? r.status : r.sig, r.err ? r.err : "");
	else if (!mr->have_final)
		snprintf(mr->err, sizeof mr->err, "model %s printed no final line", mc->name);
	else
		ok = 1;
	proc_result_free(&r);
	if (!ok) {
		model_reply_free(&mr->final);
		mr->have_final = 0;
		return -1;
	}
	return 0;
}

/* agentd-model, beside this program (model.h). */
static const char *model_helper(void)
{
	static char path[4096];
	if (!path[0]) {
		ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
		char *slash = n > 0 ? memrchr(path, '/', (size_t)n) : NULL;
		if (!slash)
			return "agentd-model";
		strcpy(slash + 1, "agentd-model");
	}
	return path;
}

/* The helper's lines: attempts and a failure are its own; the rest is the
 * model process protocol. */
static int on_http_line(void *arg, const char *line, size_t len)
{
	struct model_run *mr = arg;
	json_t *j;
	if (jsonmp_loadb(line, len, 0, &j, NULL) == -ENOMEM) {
		snprintf(mr->err, sizeof mr->err, "out of memory reading agentd-model's output");
		return 2; /* never its failure or attempts missed */
	}
	json_t *att = json_object_get(j, "attempts");
	if (json_is_array(att)) {
		json_decref(mr->attempts);
		mr->attempts = json_incref(att);
	}
	const char *failed = json_string_value(json_object_get(j, "failed"));
	if (failed) {
		snprintf(mr->err, sizeof mr->err, "%s", failed);
		mr->failed = 1;
		json_decref(j);
		return 0;
	}
	json_decref(j);
	return on_model_line(arg, line, len);
}

/* A kind openai or anthropic model: one run of agentd-model, which makes
 * the attempts (model.h); each is in the audit row (mr->audit) and the log. */
/* The helper's environment: the minimal one (isolate.h) plus what it needs
 * of the worker's: the key api_key_env names, and libcurl's proxy and CA
 * settings. envs holds 16; *ne gets the number set (free each, also on
 * failure). 0, or -ENOMEM: a helper run without its key or conversation
 * would fail as something else. */
static int model_helper_env(const struct model_cfg *mc, char *envs[16], size_t *ne)
{
	static const char *const pass[] = { "https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy",
					    "NO_PROXY", "all_proxy", "ALL_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
					    "CURL_CA_BUNDLE", NULL };
	int e = 0;
	*ne = 0;
	if (asprintf(&envs[*ne], "AGENTD_CONVERSATION=%s", W.conv) >= 0)
		++*ne;
	else
		e = -ENOMEM;
	const char *key = mc->api_key_env ? getenv(mc->api_key_env) : NULL;
	if (!e && key) {
		if (asprintf(&envs[*ne], "%s=%s", mc->api_key_env, key) >= 0)
			++*ne;
		else
			e = -ENOMEM;
	}
	for (const char *const *p = pass; !e && *p; p++) {
		const char *v = getenv(*p);
		if (!v)
			continue;
		if (asprintf(&envs[*ne], "%s=%s", *p, v) >= 0)
			++*ne;
		else
			e = -ENOMEM;
	}
	envs[*ne] = NULL; /* also where a failed asprintf left its pointer undefined */
	return e;
}

/* Log each failed attempt, and make the audit row: what was sent (rendered
 * here as the helper did) and every attempt. */
static void model_attempts_done(const struct model_cfg *mc, const json_t *req, struct model_run *mr)
{
	size_t i;
	json_t *a;
	json_array_foreach(mr->attempts, i, a) {
		const char *e = json_string_value(json_object_get(a, "error"));
		if (!e)
			continue;
		json_int_t wait = json_integer_value(json_object_get(a, "wait_ms"));
		if (wait > 0)
			log_warn("%s: model %s attempt %zu of %d failed: %s; retrying in %lld ms", W.conv, mc->name, i + 1,
				 mc->retries + 1, e, (long long)wait);
		else
			log_warn("%s: model %s attempt %zu of %d failed: %s", W.conv, mc->name, i + 1, mc->retries + 1, e);
	}
	/* The audit row: what was sent (rendered here as the helper did) and
	 * every attempt. */
	char url[512];
	model_url(mc, url, sizeof url);
	json_t *body = model_api_of(mc)->body(mc, req);
	mr->audit = json_pack("{sssoso}", "url", url, "body", body ? body : json_null(), "attempts",
			      mr->attempts ? json_incref(mr->attempts) : json_array());
	json_decref(mr->attempts);
	mr->attempts = NULL;
}

static int model_run_http(const struct model_cfg *mc, const json_t *req, struct model_run *mr, int64_t *latency)
{
	memset(mr, 0, sizeof *mr);
	if (!W.cfg.path) {
		snprintf(mr->err, sizeof mr->err, "model %s: no configuration file to give agentd-model", mc->name);
		return 1;
	}
	char *argv[] = { (char *)model_helper(), "--config", W.cfg.path, "--model", mc->name, NULL };
	char *input = jsonmp_dumps(req, JSON_COMPACT, 0, NULL);
	char *envs[16] = { 0 };
	size_t ne = 0;
	if (model_helper_env(mc, envs, &ne) || !input) {
		for (size_t i = 0; i < ne; i++)
			free(envs[i]);
		free(input);
		snprintf(mr->err, sizeof mr->err, "model %s: out of memory", mc->name);
		return 1;
	}
	struct proc_opts o = {
		.env_add = (const char *const *)envs, .iso = &mc->iso, .input = input,
		.input_len = input ? strlen(input) : 0,
		.timeout_ms = model_call_budget(mc), .out_cap = W.cfg.model_out_cap, .on_line = on_http_line,
		.arg = mr, .watch_fd = W.ipc, .on_watch = on_model_watch, .on_start = report_child,
	};
	struct proc_result r;
	int rc = run_command(argv, &o, &r);
	free(input);
	for (size_t i = 0; i < ne; i++)
		free(envs[i]);
	*latency = r.elapsed_ms;
	if (mr->stop || rc == -ECANCELED) {
		proc_result_free(&r);
		model_reply_free(&mr->final);
		json_decref(mr->attempts);
		log_info("%s: stopped during a model call; the turn is re-run on revival", W.conv);
		exit(0);
	}
	int attempts = mr->attempts ? (int)json_array_size(mr->attempts) : 1;
	if (mr->failed && rc == 0 && r.exited && r.status == 0)
		; /* err holds the helper's message */
	else if (rc < 0)
		snprintf(mr->err, sizeof mr->err, "cannot run %s: %s", argv[0], strerror(-rc));
	else if (rc == 2)
		; /* err set by on_model_line */
	else if (r.timed_out)
		snprintf(mr->err, sizeof mr->err, "model %s: no answer within %lld ms", mc->name,
			 (long long)model_call_budget(mc));
	else if (r.out_overflow)
		snprintf(mr->err, sizeof mr->err, "model %s wrote more than %zu bytes", mc->name, W.cfg.model_out_cap);
	else if (!r.exited || r.status != 0)
		snprintf(mr->err, sizeof mr->err, "%s %s %d: %.200s", argv[0], r.exited ? "exited with status" : "killed by signal",
			 r.exited ? r.status : r.sig, r.err ? r.err : "");
	else if (!mr->have_final)
		snprintf(mr->err, sizeof mr->err, "%s printed no final line", argv[0]);
	proc_result_free(&r);
	if (mr->err[0]) {
		model_reply_free(&mr->final);
		mr->have_final = 0;
	} else if (mr->attempts) {
		/* the latency of the attempt that answered */
		json_t *last = json_array_get(mr->attempts, json_array_size(mr->attempts) - 1);
		*latency = json_integer_value(json_object_get(last, "elapsed_ms"));
	}
	model_attempts_done(mc, req, mr);
	return attempts;
}

/* Run with retries. Returns the attempts made; mr->err empty on success. */
static int model_run_attempts(const struct model_cfg *mc, const json_t *req, struct model_run *mr, int64_t *latency)
{
	if (mc->kind != MODEL_EXEC)
		return model_run_http(mc, req, mr, latency);
	int attempts = 0;
	for (int i = 0; i <= mc->retries; i++) {
		attempts++;
		if (model_attempt(mc, req, mr, latency) == 0) {
			mr->err[0] = 0;
			return attempts;
		}
		log_warn("%s: model attempt %d of %d failed: %s", W.conv, attempts, mc->retries + 1, mr->err);
		if (i < mc->retries) {
			/* Back off a little, still listening for stop. */
			struct pollfd p = { W.ipc, POLLIN, 0 };
			if (poll(&p, 1, 200 * (i + 1)) > 0 && ipc_drain())
				exit(0);
		}
	}
	return attempts;
}

/* model_run_attempts, and its attempts told to the supervisor's metrics. */
static int model_run(const struct model_cfg *mc, const json_t *req, struct model_run *mr, int64_t *latency)
{
	int n = model_run_attempts(mc, req, mr, latency);
	struct ipc_msg m = { .type = IPC_MODEL, .num = n, .ok = !mr->err[0] };
	ipc_send(W.ipc, &m);
	return n;
}

/* ---- turns ----------------------------------------------------------- */

/* A tool this conversation may use: configured and in its settings. */
static const struct tool_cfg *conv_tool(const char *name)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(W.settings, "tools"), i, n)
		if (json_is_string(n) && !strcmp(json_string_value(n), name))
			return config_tool(&W.cfg, name);
	/* PREFIX+tool: a tool of an MCP server the conversation offers. */
	json_array_foreach(json_object_get(W.settings, "tools"), i, n) {
		const struct tool_cfg *tc = json_is_string(n) ? config_tool(&W.cfg, json_string_value(n)) : NULL;
		if (mcp_tool_name(tc, name))
			return tc;
	}
	return NULL;
}

/* Status and fsm_state together; an ended conversation stays ended. */
static void put_state(store_txn *t, int status, json_t *fsm)
{
	if (!fsm)
		die_oom(t, "recording the state"); /* stored, it would be a null fsm_state */
	struct store_conv c;
	must(t, store_conv_get(t, W.conv, &c), "read conversation");
	struct jsonmp_buf b;
	struct store_conv_patch p = { .set = STORE_SET_FSM, .fsm_state = packed(&b, fsm) };
	if (c.status != STORE_ENDED) {
		p.set |= STORE_SET_STATUS;
		p.status = status;
	}
	int e = store_conv_put(t, W.conv, &p);
	jsonmp_buf_destroy(&b);
	json_decref(fsm);
	must(t, e, "put state");
}

static void audit(store_txn *t, uint64_t turn_ref, const json_t *req, const char *model, const struct store_usage *u,
		  int64_t latency)
{
	if (!W.cfg.audit)
		return;
	struct jsonmp_buf b;
	struct store_model_call_in mc = { turn_ref, packed(&b, req), model, *u, (uint64_t)latency, W.sum_version };
	int e = store_model_call_put(t, W.conv, &mc);
	jsonmp_buf_destroy(&b);
	must(t, e, "audit");
}

/* Start the turn's run (store.h), durably before the model is called: a
 * run left running by a worker that died is interrupted now, and this one
 * is its next attempt when it answers the same events (from_seq). */
static void run_begin(uint64_t from_seq, uint64_t ctx_seq, const char *model)
{
	store_txn *t = wbegin(0);
	struct store_run prev;
	int e = conv_run_running(t, W.conv, &prev);
	if (e < 0)
		must(t, e, "read runs");
	int64_t now = store_txn_now(t);
	uint32_t attempt = 1;
	if (prev.id && (prev.status == STORE_RUN_RUNNING || prev.status == STORE_RUN_INTERRUPTED) &&
	    prev.from_seq == from_seq)
		attempt = prev.attempt + 1;
	if (prev.id && prev.status == STORE_RUN_RUNNING) {
		log_info("%s: run %llu was interrupted: this is attempt %u", W.conv, (unsigned long long)prev.id,
			 attempt);
		prev.status = STORE_RUN_INTERRUPTED;
		prev.ended_at = now;
		must(t, store_run_put(t, W.conv, &prev), "end interrupted run");
	}
	snprintf(W.run_model, sizeof W.run_model, "%s", model);
	W.run = (struct store_run){ .id = prev.id + 1, .status = STORE_RUN_RUNNING, .attempt = attempt,
				    .from_seq = from_seq, .to_seq = ctx_seq,
				    .model = { W.run_model, strlen(W.run_model) }, .started_at = now };
	must(t, store_run_put(t, W.conv, &W.run), "start run");
	commit(t, "start run", 0); /* no event: agentd still tells watchers (runs) */
}

/* End the turn's run inside the transaction that commits the turn's end. */
static void run_end(store_txn *t, int status, uint64_t first, uint64_t last, const struct store_usage *u)
{
	if (!W.run.id)
		return;
	W.run.status = status;
	W.run.first_seq = first;
	W.run.last_seq = last;
	if (u)
		W.run.usage = *u;
	W.run.ended_at = store_txn_now(t);
	must(t, store_run_put(t, W.conv, &W.run), "end run");
	W.run.id = 0;
}

/* A human call's deadline (tc's expires from now) and, with warn_before,
 * its expiry warning: durable like the deadline, in the caller's
 * transaction. */
static int schedule_deadline(store_txn *t, const char *id, const struct tool_cfg *tc)
{
	int64_t deadline = store_txn_now(t) + tc->expires_ms;
	int e = store_expiry_schedule(t, id, deadline);
	if (!e && tc->warn_before_ms > 0)
		e = store_warning_schedule(t, id, deadline - tc->warn_before_ms);
	return e;
}

/* The turn's assistant_msg, its tool calls (rows, suspensions, expiries),
 * usage, audit row, status and fsm_state: one transaction. */
static void commit_turn(struct model_reply *r, uint64_t ctx_seq, int round, const json_t *req, const char *model,
			int64_t latency)
{
	size_t bytes = strlen(r->text) + (W.cfg.audit ? json_size(req) : 0);
	for (size_t i = 0; i < r->ncalls; i++)
		bytes += 2 * json_size(r->calls[i].args); /* in the tool_call event and the call's row */
	reserve(bytes);
	store_txn *t = wbegin(1);
	uint64_t before = 0;
	must(t, store_event_latest_seq(t, W.conv, &before), "latest seq");
	json_t *content = json_pack("{sssI}", "text", r->text, "context_seq", (json_int_t)ctx_seq);
	/* the rounds max_tool_rounds counts; a first round says nothing */
	if (content && round > 1 && json_object_set_new(content, "round", json_integer(round)))
		die_oom(t, "recording the turn");
	uint64_t a = append(t, "assistant_msg", content);
	json_t *pending = json_object();
	if (!pending)
		die_oom(t, "recording the turn");
	int humans = 0, servers = 0;
	for (size_t i = 0; i < r->ncalls; i++) {
		struct model_call *mc = &r->calls[i];
		char id[STORE_ID_MAX + 1];
		struct store_tool_call old;
		/* Keep the model's id when the store has not seen it. */
		if (mc->id && store_tool_call_get(t, mc->id, &old) == STORE_E_NOTFOUND)
			snprintf(id, sizeof id, "%s", mc->id);
		else
			id_random(id, sizeof id, "tc-", 10);
		const struct tool_cfg *tc = conv_tool(mc->name);
		int human = tc && tc->executor == EXEC_HUMAN;
		append(t, "tool_call", json_pack("{sssssOss}", "tool_call_id", id, "name", mc->name, "args", mc->args,
						 "executor", human ? "human" : "server"));
		struct jsonmp_buf ab, pb;
		json_t *prompt = human ? json_string(tc->prompt) : NULL;
		if (human && !prompt)
			die_oom(t, "recording the turn"); /* stored, it would be a null prompt */
		struct store_tool_call_in in = { id, mc->name, human ? STORE_EXEC_HUMAN : STORE_EXEC_SERVER,
						 packed(&ab, mc->args), human ? packed(&pb, prompt) : (store_bytes){ 0 } };
		int e = store_tool_call_upsert(t, W.conv, &in);
		jsonmp_buf_destroy(&ab);
		if (human)
			jsonmp_buf_destroy(&pb);
		must(t, e, "tool call row");
		if (human) {
			humans++;
			append(t, "suspension", json_pack("{ssso}", "tool_call_id", id, "prompt", prompt));
			if (tc->expires_ms > 0)
				must(t, schedule_deadline(t, id, tc), "expiry");
			if (json_object_set_new(pending, id, json_pack("{s:s, s:s, s:s}", "executor", "human", "name",
									mc->name, "prompt", tc->prompt)))
				die_oom(t, "recording the turn"); /* never a call missing from the awaited ones */
		} else {
			servers++;
		}
	}
	/* Counted in the turn's own transaction: a turn killed before it is
	 * counted nowhere, and its re-run once (a budget never pays twice). */
	struct store_usage u = { r->input_tokens, r->output_tokens, r->cost };
	must(t, store_usage_add(t, W.conv, &u), "usage");
	must(t, store_turns_add(t, W.conv, 1), "turns");
	audit(t, a, req, model, &u, latency);
	uint64_t last = 0;
	must(t, store_event_latest_seq(t, W.conv, &last), "latest seq");
	run_end(t, STORE_RUN_COMPLETED, a, last, &u);
	if (humans) {
		/* Suspended in the transaction that makes the suspension visible
		 * (docs/protocol.md, "Semantics"), even while this turn's server calls still
		 * run (resolve and expiry make it active once no person is
		 * awaited, so a worker that dies running them is restarted). */
		put_state(t, STORE_SUSPENDED, conv_fsm_state("awaiting_input", pending, last));
	} else {
		json_decref(pending);
		if (!servers && before == ctx_seq)
			put_state(t, STORE_IDLE, conv_fsm_state("idle", NULL, last)); /* nothing arrived meanwhile */
	}
	commit(t, "commit turn", last);
}

/* Did the log grow past what this worker last read? Asked inside the write
 * transaction that records a state decided from that read: the supervisor
 * commits sends, resolutions and expiries (and sets the status `active`)
 * between the worker's read and its write, so a status written from the
 * older view would overwrite theirs, and a worker killed then would never be
 * restarted for the work they owe (found by tests/proc/test_chaos.py). */
static int log_moved(store_txn *t, uint64_t seen)
{
	uint64_t last = 0;
	must(t, store_event_latest_seq(t, W.conv, &last), "latest seq");
	return last != seen;
}

static void commit_error_audit(const char *msg, int attempts, uint64_t ctx_seq, const json_t *rendered,
			       const char *model)
{
	store_txn *t = wbegin(1);
	int moved = log_moved(t, ctx_seq); /* a message queued during the failed turn is still owed */
	/* msg may quote a model's stderr, cut anywhere: not always UTF-8. */
	uint64_t seq = 0;
	must(t, conv_error_append(t, W.conv, msg, strlen(msg), attempts, ctx_seq, &seq), "append");
	run_end(t, STORE_RUN_FAILED, seq, seq, NULL);
	if (!moved)
		put_state(t, STORE_IDLE, conv_fsm_state("idle", NULL, seq));
	if (rendered) /* the failed attempts, keyed by the error event */
		audit(t, seq, rendered, model, &(struct store_usage){ 0 }, 0);
	commit(t, "commit error", seq);
}

static void commit_error(const char *msg, int attempts, uint64_t ctx_seq)
{
	commit_error_audit(msg, attempts, ctx_seq, NULL, NULL);
}

static int on_tool_watch(void *arg);

/* The tools of the MCP servers the turn offers (started at their first
 * turn), in place of the servers' names. -ENOMEM: the turn is not to run. */
static int offer_mcp(json_t *req)
{
	int stop = 0, any = 0;
	struct mcp_watch w = { W.ipc, on_tool_watch, &stop, report_child };
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(req, "tools"), i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		const struct tool_cfg *tc = name ? config_tool(&W.cfg, name) : NULL;
		any |= tc && tc->mcp;
	}
	if (!any)
		return 0; /* the common case keeps the store open: no server to wait for */
	store_let_go();
	int e = mcp_offer(W.mcp, json_object_get(req, "tools"), &w);
	store_take();
	if (stop) {
		json_decref(req);
		log_info("%s: stopped while starting an MCP server; the turn is run on revival", W.conv);
		exit(0);
	}
	return e;
}

/* The conversation's max_tool_rounds, else the configuration's. */
static int max_tool_rounds(void)
{
	json_t *v = json_object_get(W.settings, "max_tool_rounds");
	return json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 1000000
		       ? (int)json_integer_value(v)
		       : W.cfg.max_tool_rounds;
}

/* ---- budgets ---------------------------------------------------------- */

/* The limit the conversation's committed usage has reached under its
 * settings as this transaction reads them, or NULL; *why as
 * conv_budget_exceeded gives it. */
static const char *budget_spent(store_txn *t, json_t **why)
{
	struct store_conv c;
	int e = store_conv_get(t, W.conv, &c);
	if (e) {
		store_txn_abort(t);
		die_store(e, "read conversation");
	}
	json_t *settings = jsonmp_unpack(c.settings.ptr, c.settings.len);
	struct config_budget b;
	conv_budget_of(settings, &W.cfg.budget, &b);
	json_decref(settings);
	return conv_budget_exceeded(&b, &c.usage, c.turns, why);
}

/* Before a turn's model call: with the budget spent, a budget_exceeded
 * event and status paused commit together, and the turn stays owed (a
 * larger budget set with `update` makes the conversation active again).
 * Returns 1 when paused. Decided again inside the write transaction: an
 * update that raised the budget since the read must not be paused over. */
static int budget_pause(uint64_t ctx_seq)
{
	store_txn *t = rbegin();
	const char *limit = budget_spent(t, NULL);
	store_txn_abort(t);
	if (!limit)
		return 0;
	t = wbegin(1);
	json_t *why = NULL;
	if (!(limit = budget_spent(t, &why))) {
		wabort(t);
		return 0;
	}
	uint64_t seq = append(t, "budget_exceeded", why);
	put_state(t, STORE_PAUSED, conv_fsm_state("paused", NULL, seq));
	commit(t, "pause", seq);
	log_info("%s: the budget's %s is reached: paused before the turn after seq %llu", W.conv, limit,
		 (unsigned long long)ctx_seq);
	return 1;
}

/* Model round `round` of a turn (tail.h): past max_tool_rounds rounds that
 * each called tools, the turn ends with an error instead of another call, so a
 * model that always calls a tool cannot loop forever; a user_msg starts anew. */
static void run_turn(int round, uint64_t from_seq)
{
	const char *model = json_string_value(json_object_get(W.settings, "model"));
	const struct model_cfg *mc = model ? config_model(&W.cfg, model) : NULL;
	uint64_t ctx_seq = W.last_seq;
	int max = max_tool_rounds();
	report_state("running");
	if (round > max) {
		char msg[200];
		snprintf(msg, sizeof msg,
			 "the turn called tools in %d model rounds in a row (max_tool_rounds = %d): stopped; the next "
			 "user message starts a new turn",
			 round - 1, max);
		log_warn("%s: %s", W.conv, msg);
		commit_error(msg, 0, ctx_seq);
		return;
	}
	if (!mc) {
		char msg[200];
		snprintf(msg, sizeof msg, "model '%s' is not in the configuration", model ? model : "(none)");
		commit_error(msg, 0, ctx_seq);
		return;
	}
	if (budget_pause(ctx_seq))
		return;
	run_begin(from_seq, ctx_seq, mc->name); /* after the budget: a paused turn calls no model, makes no run */
	json_t *req = render_turn(W.conv, ctx_seq, W.settings, &W.cfg, W.summary, W.events);
	if (!req || offer_mcp(req)) {
		/* Never a model called with a message or a tool left out: the
		 * turn fails, and the next message asks again. */
		json_decref(req);
		log_error("%s: out of memory rendering the model's request", W.conv);
		commit_error("out of memory rendering the model's request", 0, ctx_seq);
		return;
	}
	struct model_run mr;
	int64_t latency = 0;
	int attempts = model_run(mc, req, &mr, &latency);
	if (mr.err[0])
		commit_error_audit(mr.err, attempts, ctx_seq, mr.audit, mc->name);
	else
		commit_turn(&mr.final, ctx_seq, round, mr.audit ? mr.audit : req, mc->name, latency);
	model_reply_free(&mr.final);
	json_decref(mr.audit);
	json_decref(req);
}

/* ---- tools ----------------------------------------------------------- */

/* Settle a server call (if still pending) with its tool_result. */
static void settle(const char *id, int status, json_t *result)
{
	reserve(2 * json_size(result)); /* in the tool_result event and the call's row */
	store_txn *t = wbegin(1);
	uint64_t seq = 0;
	int e = result ? conv_settle(t, id, status, "tool_result", result, NULL, &seq) : -ENOMEM;
	json_decref(result);
	if (e == STORE_E_STALE) {
		/* Someone settled it first (an operator's resolve): theirs stands. */
		wabort(t);
		return;
	}
	must(t, e, "settle");
	commit(t, "commit tool result", seq);
	/* A tool that ran is not run again after an OS crash for want of a
	 * flush: its result is made durable now (outside the writer lock; a
	 * tool's run dwarfs it). */
	if ((e = store_flush(W.st)))
		die_store(e, "flush after the tool's result");
}

/* A stop ends the tool (it is re-dispatched on revival). The supervisor's
 * death does not: the tool runs to its end and its result is committed
 * (orphaned), since a kill of agentd alone must not run a side effect twice;
 * a new agentd waits for this worker to end (convlock.h) before it takes the
 * conversation's lease. */
static int on_tool_watch(void *arg)
{
	int *stop = arg;
	int d = ipc_drain();
	if (d == 2) {
		orphaned(1);
		return 0; /* the socket is no longer watched */
	}
	if (d) {
		*stop = 1;
		return 1;
	}
	return 0;
}

/* A call of an MCP server's tool (mcp.h): tools/call on the server this
 * worker keeps, the same settle and stop rules as a command's. */
static void dispatch_mcp(const char *id, const char *name, json_t *args, const struct tool_cfg *tc)
{
	const char *tool = mcp_tool_name(tc, name);
	if (!tool) {
		settle(id, STORE_TC_ERRORED, json_pack("{so}", "error", json_sprintf("%s is an MCP server: call one of its "
									    "tools, %s<tool>", name, tc->mcp->prefix)));
		return;
	}
	int stop = 0, is_error = 1;
	struct mcp_watch w = { W.ipc, on_tool_watch, &stop, report_child };
	json_t *res = NULL;
	store_let_go();
	int rc = mcp_call(W.mcp, tc, tool, args, &w, &res, &is_error);
	store_take();
	if (stop || rc == -ECANCELED) {
		json_decref(res);
		log_info("%s: stopped during tool call %s; it is re-dispatched on revival", W.conv, id);
		exit(0);
	}
	if (rc < 0)
		res = json_pack("{ssss}", "error", "cannot call the MCP tool", "reason", strerror(-rc));
	settle(id, is_error ? STORE_TC_ERRORED : STORE_TC_RESOLVED, res);
}

/* The conversation's lock (common/convlock.h), held from before a dispatch is
 * counted until its result is committed: if agentd dies meanwhile, this
 * worker runs the tool to its end and commits (orphaned), and the next agentd
 * takes no lease for the conversation while the lock is held. Released by
 * closing it, or by the kernel when this process ends. */
static int tool_lock(void)
{
	int fd = convlock_open(W.run_dir), e = 0;
	if (fd < 0 || (e = convlock_take(fd, W.conv)) < 0) {
		log_error("%s: cannot lock the conversation in %s/workers.lock: %s", W.conv, W.run_dir,
			  strerror(fd < 0 ? -fd : -e));
		exit(IPC_EXIT_STORE);
	}
	return fd;
}

static void dispatch_call(const json_t *call);

static void dispatch(const json_t *call)
{
	int lk = tool_lock();
	dispatch_call(call);
	close(lk);
}

/* Dispatch one unsettled server call: count the attempt durably first, so a
 * kill mid-run is counted, then run it with the same tool_call_id. */
/* Count the dispatch durably before the tool runs, so a kill mid-run is
 * counted. 1 when the call was settled instead (interrupted too often). */
static int count_attempt(const char *id, const char *name, json_t *args, const struct tool_cfg *tc)
{
	store_txn *t = wbegin(0);
	struct store_tool_call row;
	int e = store_tool_call_get(t, id, &row);
	if (e == STORE_E_NOTFOUND) {
		/* The row is a cache of the log: rebuild it. */
		struct jsonmp_buf ab;
		struct store_tool_call_in in = { id, name, STORE_EXEC_SERVER, packed(&ab, args), { 0 } };
		e = store_tool_call_upsert(t, W.conv, &in);
		jsonmp_buf_destroy(&ab);
		row.attempts = 0;
	}
	must(t, e, "tool call row");
	if (tc && row.attempts >= (uint32_t)tc->max_attempts) {
		/* Every dispatch so far was interrupted: settle it without
		 * counting one that will not run, so its row and its result name
		 * the same attempts. */
		wabort(t);
		log_warn("%s: tool call %s interrupted %u times: settled errored", W.conv, id, row.attempts);
		settle(id, STORE_TC_ERRORED, json_pack("{sssi}", "error", "interrupted", "attempts", (int)row.attempts));
		return 1;
	}
	must(t, store_tool_call_attempt(t, id, NULL), "attempt");
	commit(t, "count attempt", 0);
	/* The tool acts outside the store: the call and its attempt must be
	 * durable first, or an OS crash could forget a side effect that ran
	 * (docs/durability.md). Outside the writer lock and the write gate. */
	if ((e = store_flush(W.st)))
		die_store(e, "flush before the tool runs");
	return 0;
}

/* The result of a server tool's process: its output, or why it failed. */
static json_t *tool_result(const struct tool_cfg *tc, int rc, const struct proc_result *r, int *status)
{
	json_t *res = NULL;
	*status = STORE_TC_ERRORED;
	if (rc < 0) {
		res = json_pack("{ssss}", "error", "cannot run the tool", "reason", strerror(-rc));
		if (rc == -EPERM && (tc->iso.user || tc->iso.group))
			json_object_set_new(res, "error", json_sprintf("cannot run the tool as %s%s (agentd is not root?)",
								       tc->iso.user ? "user " : "group ",
								       tc->iso.user ? tc->iso.user : tc->iso.group));
		return res;
	}
	if (r->exited && r->status == 0 && !r->out_overflow) {
		*status = STORE_TC_RESOLVED;
		if (tool_output_parse(r->out, r->out_len, &res))
			res = json_pack("{ss}", "error", "out of memory");
		return res;
	}
	/* The tail of stderr: any bytes, cut anywhere (json_pack refused what
	 * was not UTF-8, and the result was stored as null). */
	res = json_pack("{so}", "stderr", json_text(r->err ? r->err : "", r->err_len));
	if (r->timed_out)
		json_object_set_new(res, "error", json_sprintf("timed out after %lld ms", (long long)tc->timeout_ms));
	else if (r->out_overflow)
		json_object_set_new(res, "error", json_sprintf("output over %zu bytes", tc->out_cap));
	else if (r->exited)
		json_object_set_new(res, "exit_status", json_integer(r->status));
	else
		json_object_set_new(res, "signal", json_integer(r->sig));
	char why[200];
	if (!r->timed_out && !r->out_overflow &&
	    isolate_explain(&tc->iso, r->exited, r->status, r->signaled, r->sig, why, sizeof why))
		json_object_set_new(res, "error", json_string(why));
	return res;
}

static void dispatch_call(const json_t *call)
{
	const char *id = json_string_value(json_object_get(call, "tool_call_id"));
	const char *name = json_string_value(json_object_get(call, "name"));
	json_t *args = json_object_get(call, "args");
	const struct tool_cfg *tc = conv_tool(name);
	if (count_attempt(id, name, args, tc))
		return;
	if (!tc) {
		settle(id, STORE_TC_ERRORED, json_pack("{ss}", "error", "unknown tool: not configured for this conversation"));
		return;
	}
	report_state("running");
	setproctitle("%s tool %s", W.conv, name);
	if (tc->mcp) {
		dispatch_mcp(id, name, args, tc);
		return;
	}
	char **argv = NULL;
	if (cmdline_split(tc->command, &argv)) {
		settle(id, STORE_TC_ERRORED, json_pack("{ss}", "error", "the tool's command cannot be split"));
		return;
	}
	char *input = tool_input_json(id, name, args, W.conv);
	if (!input) { /* never run the tool without its request */
		cmdline_free(argv);
		settle(id, STORE_TC_ERRORED, json_pack("{ss}", "error", "out of memory for the tool's input"));
		return;
	}
	char env1[200], env2[200];
	snprintf(env1, sizeof env1, "AGENTD_TOOL_CALL_ID=%s", id);
	snprintf(env2, sizeof env2, "AGENTD_CONVERSATION=%s", W.conv);
	const char *env[] = { env1, env2, NULL };
	int stop = 0, status;
	struct proc_opts o = {
		.env_add = env, .iso = &tc->iso, .input = input, .input_len = input ? strlen(input) : 0,
		.timeout_ms = tc->timeout_ms, .out_cap = tc->out_cap, .watch_fd = W.ipc,
		.on_watch = on_tool_watch, .arg = &stop, .on_start = report_child,
	};
	struct proc_result r;
	int rc = run_command(argv, &o, &r);
	free(input);
	cmdline_free(argv);
	if (stop || rc == -ECANCELED) {
		proc_result_free(&r);
		log_info("%s: stopped during tool call %s; it is re-dispatched on revival", W.conv, id);
		exit(0);
	}
	json_t *res = tool_result(tc, rc, &r, &status);
	settle(id, status, res);
	proc_result_free(&r);
}

/* Human calls: make sure each row is pending with its expiry, then wait. */
static int await_people(const json_t *unsettled)
{
	store_txn *t = wbegin(0);
	if (log_moved(t, W.last_seq)) {
		/* A resolution or expiry came since: decide again. */
		wabort(t);
		return 1;
	}
	json_t *pending = json_object();
	if (!pending)
		die_oom(t, "recording the awaited calls");
	size_t i;
	json_t *call;
	json_array_foreach(unsettled, i, call) {
		const char *id = json_string_value(json_object_get(call, "tool_call_id"));
		const char *name = json_string_value(json_object_get(call, "name"));
		const struct tool_cfg *tc = conv_tool(name);
		const char *prompt = tc ? tc->prompt : "Approve?";
		struct store_tool_call row;
		int e = store_tool_call_get(t, id, &row);
		if (e == STORE_E_NOTFOUND) {
			struct jsonmp_buf ab, pb;
			json_t *p = json_string(prompt);
			if (!p)
				die_oom(t, "recording the awaited calls"); /* stored, it would be a null prompt */
			struct store_tool_call_in in = { id, name, STORE_EXEC_HUMAN, packed(&ab, json_object_get(call, "args")),
							 packed(&pb, p) };
			e = store_tool_call_upsert(t, W.conv, &in);
			jsonmp_buf_destroy(&ab);
			jsonmp_buf_destroy(&pb);
			json_decref(p);
			if (!e && tc && tc->expires_ms > 0)
				e = schedule_deadline(t, id, tc);
		} else if (!e && row.status == STORE_TC_PENDING && row.deadline == 0 && tc && tc->expires_ms > 0) {
			e = schedule_deadline(t, id, tc);
		}
		must(t, e, "pending row");
		if (json_object_set_new(pending, id,
					json_pack("{s:s, s:s, s:s}", "executor", "human", "name", name, "prompt", prompt)))
			die_oom(t, "recording the awaited calls"); /* never a call missing from them */
	}
	put_state(t, STORE_SUSPENDED, conv_fsm_state("awaiting_input", pending, W.last_seq));
	commit(t, "await", 0);
	report_state("awaiting_input");
	return 0;
}

/* ---- compaction ------------------------------------------------------ */

/* The working set's events with lo <= seq <= hi: a new array, or NULL
 * when out of memory (never one short of an event). */
static json_t *events_between(uint64_t lo, uint64_t hi)
{
	json_t *a = json_array();
	int oom = !a;
	size_t i;
	json_t *e;
	json_array_foreach(W.events, i, e) {
		uint64_t seq = (uint64_t)json_integer_value(json_object_get(e, "seq"));
		if (seq >= lo && seq <= hi && json_array_append(a, e))
			oom = 1;
	}
	if (oom) {
		json_decref(a);
		return NULL;
	}
	return a;
}

/* The seqs the next summary covers: after the last summary, up to keep
 * events short of the end, never past the last turn boundary (so the tail
 * decision still sees the last turn). *to < *from: nothing to summarise. -1
 * when the tail cannot be read. */
static int compact_range(int keep, uint64_t *from, uint64_t *to)
{
	struct tail tl;
	if (tail_decide(W.events, W.sum_to, &tl))
		return -1;
	*to = W.last_seq > (uint64_t)keep ? W.last_seq - (uint64_t)keep : 0;
	if (tl.marker_seq && *to >= tl.marker_seq)
		*to = tl.marker_seq - 1;
	if (!tl.marker_seq)
		*to = 0;
	tail_free(&tl);
	*from = W.sum_to + 1;
	return 0;
}

/* Commit the summary of from..to (content, stolen) with the call's usage
 * and audit row (req), then start the working set after it. */
static void compact_commit(const struct model_cfg *mc, uint64_t from, uint64_t to, json_t *content, const json_t *req,
			   const struct model_reply *r, int64_t latency)
{
	reserve(strlen(r->text) + (W.cfg.audit ? json_size(req) : 0));
	store_txn *t = wbegin(1);
	struct jsonmp_buf b;
	uint64_t version = 0;
	int rc = store_summary_put(t, W.conv, from, to, packed(&b, content), &version);
	jsonmp_buf_destroy(&b);
	must(t, rc, "put summary");
	struct store_usage u = { r->input_tokens, r->output_tokens, r->cost };
	must(t, store_usage_add(t, W.conv, &u), "usage");
	audit(t, AUDIT_SUMMARY_BIT | to, req, mc->name, &u, latency);
	commit(t, "commit summary", 0);
	json_t *rest = events_between(to + 1, UINT64_MAX);
	json_t *sum = json_pack("{sIsIsosI}", "from_seq", (json_int_t)from, "to_seq", (json_int_t)to, "content", content,
				"version", (json_int_t)version);
	if (!rest || !sum) {
		/* Committed: the next worker reads the summary and the log
		 * after it from the store; this one's view would be short. */
		log_error("%s: out of memory after compacting; exiting", W.conv);
		exit(IPC_EXIT_STORE);
	}
	json_decref(W.events);
	W.events = rest;
	json_decref(W.summary);
	W.summary = sum;
	W.sum_to = to;
	W.sum_version = version;
	log_info("%s: compacted seqs %llu-%llu into summary v%llu", W.conv, (unsigned long long)from,
		 (unsigned long long)to, (unsigned long long)version);
}

/* Summarise the oldest part of the working set (compact_range). The log is
 * untouched; the next revival starts from the summary. keep: events left
 * after it. */
static int compact(int keep, char *err, size_t errlen)
{
	uint64_t from, to;
	if (compact_range(keep, &from, &to)) {
		snprintf(err, errlen, "the log's tail cannot be read");
		return -1;
	}
	if (to < from)
		return 0; /* nothing old enough to summarise */
	json_t *msgs = events_between(0, to);
	if (!msgs) { /* a summary short of an event would stand for it */
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	const char *model = json_string_value(json_object_get(W.settings, "model"));
	const struct model_cfg *mc = model ? config_model(&W.cfg, model) : NULL;
	if (!mc) {
		json_decref(msgs);
		snprintf(err, errlen, "model '%s' is not in the configuration", model ? model : "(none)");
		return -1;
	}
	/* A summary's model call is paid from the same budget. */
	store_txn *bt = rbegin();
	const char *spent = budget_spent(bt, NULL);
	store_txn_abort(bt);
	if (spent) {
		json_decref(msgs);
		snprintf(err, errlen, "the budget's %s is reached: no model call (raise it with update)", spent);
		return -1;
	}
	report_state("compacting");
	json_t *req = render_summarize(W.conv, W.settings, W.summary, msgs);
	json_decref(msgs);
	if (!req) {
		snprintf(err, errlen, "out of memory rendering the summary's request");
		return -1;
	}
	struct model_run mr;
	int64_t latency = 0;
	model_run(mc, req, &mr, &latency);
	if (mr.audit) { /* what an HTTP model was sent, and its attempts */
		json_decref(req);
		req = mr.audit;
	}
	/* Stored without its text, it would be a summary of nothing. */
	json_t *content = mr.err[0] ? NULL : json_pack("{ss}", "text", mr.final.text);
	if (content)
		compact_commit(mc, from, to, content, req, &mr.final, latency);
	else
		snprintf(err, errlen, "%s", mr.err[0] ? mr.err : "out of memory");
	json_decref(req);
	model_reply_free(&mr.final);
	return content ? 0 : -1;
}

/* One compaction answers every request queued before it began; those that
 * arrive during it (its model call reads IPC) get the next one. */
static void answer_compacts(void)
{
	while (W.ncompact > 0) {
		char err[512] = "";
		size_t n = W.ncompact;
		int ok = compact(0, err, sizeof err) == 0;
		for (size_t i = 0; i < n; i++) {
			struct ipc_msg m = { .type = IPC_COMPACTED, .num = W.compacts[i], .ok = ok, .text = err,
					     .text_len = strlen(err) };
			ipc_send(W.ipc, &m);
		}
		W.ncompact -= n;
		memmove(W.compacts, W.compacts + n, W.ncompact * sizeof *W.compacts);
		/* compact() said "compacting": say again what it is now (idle,
		 * awaiting_input), or it would never be evicted. */
		report_state(reported);
	}
}

/* ---- the decision loop ----------------------------------------------- */

static int settle_idle(void)
{
	store_txn *t = rbegin();
	struct store_conv c;
	int e = store_conv_get(t, W.conv, &c);
	int status = c.status;
	store_txn_abort(t);
	if (e)
		die_store(e, "read conversation");
	if (status != STORE_IDLE && status != STORE_ENDED) {
		t = wbegin(0);
		if (log_moved(t, W.last_seq)) {
			/* A send came since: idle now would hide the turn it is owed. */
			wabort(t);
			return 1;
		}
		put_state(t, STORE_IDLE, conv_fsm_state("idle", NULL, W.last_seq));
		commit(t, "idle", 0);
	}
	if (W.cfg.compact_events > 0 && json_array_size(W.events) > (size_t)W.cfg.compact_events) {
		char err[512];
		if (compact(W.cfg.compact_keep, err, sizeof err))
			log_warn("%s: compaction failed: %s", W.conv, err);
	}
	report_state("idle");
	return 0;
}

/* Act on the log until nothing more can be done without an event. */
static void run(void)
{
	for (;;) {
		if (W.woken) {
			/* The supervisor sends no other wake until it hears
			 * this, so it must leave before the log is read. */
			struct ipc_msg m = { .type = IPC_WOKEN };
			ipc_send(W.ipc, &m);
		}
		W.woken = 0; /* this refresh sees what every wake so far announced */
		refresh();
		struct tail tl;
		int te = tail_decide_active(W.events, W.sum_to, W.active, &tl);
		if (te == -ENOMEM)
			die_oom(NULL, "deciding what the log owes"); /* not a damaged record */
		if (te) {
			log_error("%s: the log's tail holds a malformed event: refusing to guess", W.conv);
			exit(IPC_EXIT_CORRUPT);
		}
		/* An ended conversation is closed: what its log would still
		 * owe (a turn, a tool to dispatch) is not done. */
		if (W.ended && (tl.action == TAIL_TURN || tl.action == TAIL_TOOLS))
			log_info("%s: the conversation is ended: the work its log owes is not done", W.conv);
		else if (W.paused && tl.action == TAIL_TURN) {
			/* Its turn waits for a larger budget: `update` makes it
			 * active and wakes this worker. */
			tail_free(&tl);
			report_state("idle");
			answer_compacts();
			if (W.woken)
				continue;
			return;
		} else if (tl.action == TAIL_TURN) {
			int round = tl.round;
			/* The run answers the events after the last turn boundary
			 * (its marker, or the summary's end when it covers it). */
			uint64_t from = tl.marker_seq ? tl.marker_seq : tl.ctx_seq;
			tail_free(&tl);
			run_turn(round, from);
			continue;
		} else if (tl.action == TAIL_TOOLS) {
			size_t i;
			json_t *call;
			json_t *humans = json_array();
			int ran = 0;
			if (!humans)
				die_oom(NULL, "deciding the next step");
			json_array_foreach(tl.unsettled, i, call) {
				const char *ex = json_string_value(json_object_get(call, "executor"));
				if (ex && !strcmp(ex, "human")) {
					if (json_array_append(humans, call)) /* never a call left unawaited */
						die_oom(NULL, "deciding the next step");
				} else if (!ran) {
					dispatch(call);
					ran = 1;
				}
			}
			tail_free(&tl);
			if (ran) {
				json_decref(humans);
				continue;
			}
			int again = await_people(humans);
			json_decref(humans);
			if (again)
				continue;
			answer_compacts();
			if (W.woken)
				continue; /* read by a compaction's model call: not lost */
			return;
		}
		tail_free(&tl);
		if (settle_idle())
			continue;
		answer_compacts();
		/* A wake read while compacting (the summarize call watches the
		 * socket and consumes it) announces events this refresh missed:
		 * waiting now would leave them unanswered until the next event. */
		if (W.woken)
			continue;
		return;
	}
}

/* At every exit (the worker exits from many places): each MCP server is
 * shut down as the stdio transport says (stdin closed, then signals), so a
 * call it was told is cancelled is read, and nothing it forked stays. */
static void mcp_end(void)
{
	mcp_set_free(W.mcp);
	W.mcp = NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: agentd-worker --data DIR --conversation ID --lease N --ipc-fd FD [--config FILE]\n"
		   "                     [--sync full|none] [--audit] [--log-level LEVEL]\n"
		   "       agentd-worker --store-env --run-dir DIR --connections N ... (a PostgreSQL store:\n"
		   "                     its target in the environment variable AGENTD_STORE)\n"
		   "One conversation's runtime; started by agentd, not by hand.\n");
}

/* The command line agentd gives a worker into W (and the rest into the
 * out-parameters). 0, or the status to exit with. */
static int parse_args(int argc, char **argv, const char **data, const char **config, const char **level, int *sync,
		      int *audit_on)
{
	static const struct option opts[] = {
		{ "data", required_argument, 0, 'd' }, { "conversation", required_argument, 0, 'c' },
		{ "lease", required_argument, 0, 'l' }, { "ipc-fd", required_argument, 0, 'f' },
		{ "config", required_argument, 0, 'C' }, { "sync", required_argument, 0, 's' },
		{ "audit", no_argument, 0, 'a' }, { "log-level", required_argument, 0, 'L' },
		{ "help", no_argument, 0, 'h' }, { "store-env", no_argument, 0, 'E' },
		{ "run-dir", required_argument, 0, 'R' }, { "connections", required_argument, 0, 'N' }, { 0, 0, 0, 0 },
	};
	int c, from_env = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': *data = optarg; break;
		case 'c': W.conv = optarg; break;
		case 'l': W.lease = strtoull(optarg, NULL, 10); break;
		case 'f': W.ipc = atoi(optarg); break;
		case 'C': *config = optarg; break;
		case 's': *sync = strcmp(optarg, "none") ? STORE_SYNC_FULL : STORE_SYNC_NONE; break;
		case 'a': *audit_on = 1; break;
		case 'L': *level = optarg; break;
		case 'E': from_env = 1; break;
		case 'R': W.run_dir = optarg; break;
		case 'N': W.nslots = atoi(optarg); break;
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
		W.pg = 1;
	}
	if (W.pg && (!W.run_dir || W.nslots < 1)) {
		usage(stderr);
		return IPC_EXIT_USAGE;
	}
	if (!*data || !W.conv || !W.lease || W.ipc < 0 || !store_id_valid(W.conv, strlen(W.conv))) {
		usage(stderr);
		return IPC_EXIT_USAGE;
	}
	return 0;
}

/* Logging, the descriptor agentd passed, SIGPIPE, the config and the MCP
 * servers, before the store is touched: 0, or the status to exit with. */
static int start_up(const char *config, const char *level, int sync, int audit_on)
{
	int lv = config_log_level(level);
	log_init("agentd-worker", lv < 0 ? LOG_INFO : lv);
	struct stat ipc_st;
	if (fstat(W.ipc, &ipc_st) < 0 || !S_ISSOCK(ipc_st.st_mode)) {
		fprintf(stderr, "agentd-worker: --ipc-fd %d is not a socket: agentd starts workers, not people\n", W.ipc);
		return IPC_EXIT_USAGE;
	}
	/* A tool or model that closes its stdin early must not kill us. */
	signal(SIGPIPE, SIG_IGN);
	config_init(&W.cfg);
	char err[512];
	if (config && config_load(&W.cfg, config, err, sizeof err)) {
		log_error("%s", err);
		return IPC_EXIT_USAGE;
	}
	W.cfg.audit = audit_on;
	W.cfg.sync = sync;
	if (!(W.mcp = mcp_set_new(&W.cfg, W.conv)) || atexit(mcp_end)) {
		log_error("%s: out of memory", W.conv);
		return IPC_EXIT_STORE;
	}
	return 0;
}

/* The store, opened as agentd opened it (a connection slot first on
 * PostgreSQL): 0, or the status to exit with. */
static int open_store(const char *data, int sync, int audit_on)
{
	W.data = data;
	if (!W.run_dir)
		W.run_dir = data;
	/* The map's limits are agentd's: a worker opening with the store's
	 * defaults would grow the map past max_map_size. PostgreSQL has no
	 * map (agentd ignores them there too). */
	W.so = (struct store_opts){ .sync = sync, .audit = audit_on, .map_size = W.pg ? 0 : W.cfg.map_size,
				    .max_map_size = W.pg ? 0 : W.cfg.max_map_size,
				    .idle_txn_timeout_ms = W.cfg.lease_ms / 2 };
	char *shown = W.pg ? config_store_shown(data) : NULL;
	W.shown = shown ? shown : data;
	if (W.pg && (W.slotfd = connslot_open(W.run_dir)) < 0) {
		log_error("%s: cannot open %s/connections.lock: %s", W.conv, W.run_dir, strerror(-W.slotfd));
		return IPC_EXIT_STORE;
	}
	slot_take();
	int e = store_open(&W.st, data, &W.so);
	if (e) {
		log_error("%s: cannot open the store in %s: %s%s%s", W.conv, W.shown, store_strerror(e),
			  *store_open_error() ? ": " : "", store_open_error());
		return IPC_EXIT_STORE;
	}
	return 0;
}

/* Act on the log, then wait for the supervisor, until it says stop or is
 * gone. */
static void serve(void)
{
	for (;;) {
		run();
		/* Wait for the supervisor: wake, stop, compact, or its death;
		 * past a moment (a person may take hours), without the store. */
		struct pollfd p = { W.ipc, POLLIN, 0 };
		int n = poll(&p, 1, STORE_LINGER_MS);
		if (n == 0) {
			store_let_go();
			n = poll(&p, 1, -1);
		}
		if (n < 0 && errno != EINTR)
			return;
		int d = ipc_drain();
		if (d == 1 && W.ncompact) { /* as stop_now, then shut_down() */
			W.compacting = 1;
			store_take();
			answer_compacts();
		}
		if (d)
			return;
		store_take();
	}
}

/* The clean exit's frees, so a leak checker sees only real leaks. */
static void shut_down(void)
{
	if (W.st)
		store_close(W.st);
	json_decref(W.events);
	json_decref(W.settings);
	json_decref(W.summary);
	free(W.compacts);
	mcp_end();
	config_free(&W.cfg);
}

int main(int argc, char **argv, char **envp)
{
	const char *data = NULL, *config = NULL, *level = "info";
	int sync = STORE_SYNC_FULL, audit_on = 0;
	W.ipc = -1;
	W.slot = W.slotfd = -1;
	jsonmp_alloc_init(); /* before any JSON is read: jsonmp_loadb sees every failed allocation */
	if (ipc_stdio_guard())
		return EXIT_FAILURE;
	setproctitle_init(argc, argv, envp);
	int rc = parse_args(argc, argv, &data, &config, &level, &sync, &audit_on);
	if (rc)
		return rc < 0 ? 0 : rc;
	if ((rc = start_up(config, level, sync, audit_on)) || (rc = open_store(data, sync, audit_on)))
		return rc;
	setproctitle("%s starting", W.conv);
	/* ipc.h: the commit this worker was started for may still be in flight. */
	if (await_msg(IPC_GO, 0))
		return 0;
	load();
	struct ipc_msg ready = { .type = IPC_READY, .num = getpid() };
	ipc_send(W.ipc, &ready);
	serve();
	shut_down();
	return 0;
}
