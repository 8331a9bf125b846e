/* server.c: the supervisor's wiring (see server.h). */
#include "supervisor/server.h"
#include "common/log.h"
#include "supervisor/backup.h"
#include "supervisor/compaction.h"
#include "supervisor/control.h"
#include "supervisor/durable.h"
#include "supervisor/expiry.h"
#include "supervisor/forward.h"
#include "supervisor/gate.h"
#include "supervisor/loop.h"
#include "supervisor/nodes.h"
#include "supervisor/notify.h"
#include "supervisor/commit.h"
#include "supervisor/ops.h"
#include "supervisor/retention.h"
#include "supervisor/waiters.h"
#include "supervisor/wakeup.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static void on_signal(struct loop_watch *lw, uint32_t events);
static void on_tick(struct loop_watch *lw, uint32_t events);

static struct {
	const struct server_opts *o;
	int sig_fd;
	int tick_fd;             /* CLOCK_MONOTONIC, absolute */
	int64_t tick_armed;      /* the deadline tick_fd is armed to (0: disarmed) */
	int64_t next_sync;       /* sync=none: the next store_sync */
	int64_t next_gc;         /* the next audit TTL sweep */
	int shutting_down;
	int64_t shutdown_deadline;
	int killed_all;
	int waiters_owed;        /* the frontier moved while the loop was restricted */
	int failed;              /* a flush failed (-errno): stop with status 1 */
	struct loop_watch w_signal, w_tick;
	struct ops_env ops;
	struct workers_env workers;
} SV = { .sig_fd = -1, .tick_fd = -1, .w_signal = { on_signal }, .w_tick = { on_tick } };

/* ---- shutdown ----------------------------------------------------------- */

static void begin_shutdown(void)
{
	if (SV.shutting_down)
		return;
	SV.shutting_down = 1;
	SV.shutdown_deadline = loop_now_ms() + SV.o->cfg->shutdown_timeout_ms;
	notify_stopping();
	control_stop_listening();
	control_refuse();
	workers_stop_all();
}

/* The shutdown op. */
static void shutdown_asked(struct client *by)
{
	if (!SV.shutting_down) {
		if (by)
			log_info("shutdown asked by a client (pid %d, uid %u): shutting down", (int)control_pid(by),
				 (unsigned)control_uid(by));
		else
			log_info("shutdown asked: shutting down");
	}
	begin_shutdown();
}

/* ---- signals and the tick ---------------------------------------------- */

static void on_signal(struct loop_watch *lw, uint32_t events)
{
	struct signalfd_siginfo si;
	while (read(SV.sig_fd, &si, sizeof si) == sizeof si) {
		switch (si.ssi_signo) {
		case SIGCHLD:
			workers_reap();
			break;
		case SIGTERM:
		case SIGINT:
			if (!SV.shutting_down)
				log_info("%s: shutting down", strsignal((int)si.ssi_signo));
			begin_shutdown();
			break;
		case SIGHUP:
			log_info("SIGHUP: configuration is read at start only; restart agentd to apply changes");
			break;
		}
	}
}

static int64_t earliest(int64_t a, int64_t b)
{
	return b && (!a || b < a) ? b : a;
}

static void rearm_tick(void)
{
	int64_t d = workers_next_deadline();
	d = earliest(d, waiters_next_deadline());
	d = earliest(d, gate_deadline());
	d = earliest(d, SV.next_sync);
	d = earliest(d, SV.next_gc);
	d = earliest(d, retention_deadline());
	if (SV.shutting_down && !SV.killed_all)
		d = earliest(d, SV.shutdown_deadline);
	d = notify_deadline(d); /* the systemd watchdog's next ping */
	if (d == SV.tick_armed)
		return; /* already armed there: no system call */
	SV.tick_armed = d;
	struct itimerspec its = { 0 };
	if (d) {
		its.it_value.tv_sec = d / 1000;
		its.it_value.tv_nsec = (d % 1000) * 1000000;
	}
	timerfd_settime(SV.tick_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void gc_audit(void)
{
	store_txn *t;
	uint64_t n = 0;
	if (gate_write_begin(STORE_WRITE, &t)) /* also with audit off: rows from when it was on go too */
		return;
	if (store_model_calls_gc(t, NULL, SV.o->cfg->audit_ttl_ms, &n) == 0 && store_txn_commit(t) == 0) {
		if (n)
			log_info("audit: removed %llu model_calls rows older than the TTL", (unsigned long long)n);
	} else {
		store_txn_abort(t);
	}
}

static void on_tick(struct loop_watch *lw, uint32_t events)
{
	uint64_t n;
	ssize_t r = read(SV.tick_fd, &n, sizeof n);
	(void)r;
	SV.tick_armed = 0; /* it fired: the next rearm must set it again */
	int64_t now = loop_now_ms();
	notify_tick(now);
	workers_tick(now);
	waiters_expire(now);
	if (SV.next_sync && now >= SV.next_sync) {
		int err = store_sync(SV.o->st);
		if (err)
			log_error("sync: %s", store_strerror(err));
		SV.next_sync = now + 1000;
	}
	if (SV.next_gc && now >= SV.next_gc) {
		gc_audit();
		SV.next_gc = now + 3600 * 1000;
	}
	if (!SV.shutting_down)
		retention_tick(now);
	if (SV.shutting_down && !SV.killed_all && now >= SV.shutdown_deadline) {
		log_warn("shutdown: workers still running after %lld ms: killing them",
			 (long long)SV.o->cfg->shutdown_timeout_ms);
		workers_kill_all();
		SV.killed_all = 1;
	}
}

/* ---- the hooks between modules ------------------------------------------ */

static void client_gone(struct client *c)
{
	waiters_client_gone(c);
	compaction_client_gone(c);
	commit_client_gone(c);
	backup_client_gone(c);
	forward_client_gone(c);
}

/* The durable frontier moved: replies and waiters it lets through go out. */
static void durable_advanced(uint64_t frontier)
{
	control_durable_advanced();
	/* Waiters read the store: not while a group commits off the loop
	 * (commit.c); before the next wait, once it is done. */
	if (loop_restricted())
		SV.waiters_owed = 1;
	else
		waiters_durable_advanced();
}

/* The first failed flush (durable.h): what waits for the frontier is
 * answered with an error, and agentd stops with status 1. */
static void flush_failed(int err)
{
	log_error("flushing the store failed: %s. The kernel may have dropped the pages it could not write, so no "
		  "later flush can prove them durable: every reply that waits for a flush is answered `unavailable`, "
		  "and agentd stops; a restart reads the store from disk (docs/durability.md)",
		  store_strerror(err));
	SV.failed = err;
	control_durable_advanced(); /* the held replies leave, as errors (control.c) */
	begin_shutdown();
}

static void worker_flush_failed(const char *conv)
{
	durable_fail(-EIO);
}

/* Another group commit may come soon (durable.h): a client is free to send. */
static int durable_more(void)
{
	return !control_all_held();
}

static const struct control_hooks control_hooks = { commit_request, ops_is_write, ops_reply_large, waiters_drained,
						    client_gone };

/* ---- one loop iteration -------------------------------------------------- */

static int before_wait(void *arg)
{
	if (SV.waiters_owed) {
		SV.waiters_owed = 0;
		waiters_durable_advanced();
	}
	rearm_tick();
	durable_before_wait();
	/* Lines left over from the per-wakeup cap are parsed every iteration,
	 * without waiting for new input that may never come. */
	return control_backlog_ready() || commit_pending();
}

static void after_wait(void *arg)
{
	control_backlog();
}

static int iteration_end(void *arg)
{
	commit_execute();
	gate_pump();
	control_reap();
	workers_gc();
	if (commit_start())
		return 0; /* restricted until the group is committed (commit.c, the writer thread) */
	return SV.shutting_down && workers_live() == 0;
}

/* ---- open, run, close ----------------------------------------------------- */

/* Signals arrive as descriptor events; nothing runs in a handler. */
static int signals_open(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	/* A signal ignored is discarded before any signalfd sees it, and an
	 * ignored SIGCHLD also reaps the children behind our back (no exit
	 * would ever be noticed): what the parent ignored is not inherited. */
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	for (int s = 1; s < NSIG; s++)
		if (sigismember(&set, s) == 1)
			sigaction(s, &dfl, NULL);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	SV.sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	SV.tick_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (SV.sig_fd < 0 || SV.tick_fd < 0)
		return -errno;
	int e = loop_add(SV.sig_fd, EPOLLIN, &SV.w_signal);
	return e ? e : loop_add(SV.tick_fd, EPOLLIN, &SV.w_tick);
}

int server_open(const struct server_opts *o)
{
	int e;
	SV.o = o;
	if ((e = loop_open()) || (e = signals_open()) || (e = expiry_open(o->st, o->cfg)) ||
	    (e = wakeup_open(o->st)) ||
	    (e = durable_open(o->st, o->cfg->sync == STORE_SYNC_FULL, durable_advanced, durable_more, flush_failed)) ||
	    (e = backup_open(o->st))) {
		log_error("cannot create the loop's descriptors: %s", strerror(-e));
		return e;
	}
	int64_t now = loop_now_ms();
	SV.ops = (struct ops_env){ o->cfg, o->st, o->data_dir, now, shutdown_asked, expiry_rearm,
				   wakeup_rearm };
	SV.workers = (struct workers_env){ o->cfg, o->st, o->data_dir, o->worker_path, o->config_path,
					   { waiters_notify, waiters_delta, expiry_rearm, nodes_claim, nodes_release,
					     worker_flush_failed }, o->sock_path, o->config_source };
	ops_init(&SV.ops);
	workers_init(&SV.workers);
	waiters_init(o->st, ops_events_query, ops_events_reply);
	if ((e = control_listen(o->cfg, o->sock_path, &control_hooks)) != 0)
		return e;
	SV.next_sync = o->cfg->sync == STORE_SYNC_NONE ? now + 1000 : 0;
	SV.next_gc = now + 1000;
	retention_init(o->st, o->cfg, now);
	/* Deadlines that passed while nothing ran fire now; then the
	 * conversations that were mid-turn get their workers back. */
	/* The node first: what follows claims conversations for it. */
	if ((e = nodes_open(o->st, o->cfg)) != 0)
		return e;
	int fired = expiry_fire();
	if (fired)
		log_info("fired %d expiry deadline(s) that passed while agentd was down", fired);
	if ((fired = expiry_warn_fire()))
		log_info("gave %d expiry warning(s) whose time passed while agentd was down", fired);
	expiry_rearm();
	if ((fired = wakeup_fire()))
		log_info("fired %d scheduled wakeup(s) due while agentd was down", fired);
	wakeup_rearm();
	workers_start_active();
	return 0;
}

int server_run(void)
{
	static const struct loop_hooks hooks = { before_wait, after_wait, iteration_end, NULL };
	int e = loop_run(&hooks);
	commit_close();
	backup_close(); /* a copy in flight is finished and answered */
	if (!e)
		nodes_leave(); /* its workers are stopped: its leases go now, for other nodes */
	durable_close(); /* a last flush: every reply held for it goes out */
	waiters_shutdown();
	forward_close();
	control_close_all();
	if (SV.failed)
		return SV.failed; /* no final sync: a flush after a failed one proves nothing */
	int se = store_sync(SV.o->st);
	if (se)
		log_error("final sync: %s", store_strerror(se));
	return e;
}

void server_close(void)
{
	control_stop_listening();
	expiry_close();
	wakeup_close();
	nodes_close();
	if (SV.sig_fd >= 0)
		close(SV.sig_fd);
	if (SV.tick_fd >= 0)
		close(SV.tick_fd);
	SV.sig_fd = SV.tick_fd = -1;
	loop_close();
}
