/*
 * ops.c: the control protocol's ops (docs/protocol.md): the op table, one
 * row per op, which commit.c runs at the end of each loop iteration; the
 * ops on the process and its workers (ping, shutdown, status, metrics,
 * backup, kill, stop, compact); and the helpers the handlers share
 * (ops_int.h). The reads of the store are in ops_read.c, the writes in
 * ops_write.c, cancel and resume in ops_cancel.c, schedules in
 * ops_schedule.c.
 */
#include "supervisor/ops.h"
#include "common/jsonmp.h"
#include "conv/conv.h"
#include "supervisor/backup.h"
#include "supervisor/commit.h"
#include "supervisor/compaction.h"
#include "supervisor/control.h"
#include "supervisor/durable.h"
#include "supervisor/forward.h"
#include "supervisor/loop.h"
#include "supervisor/metrics.h"
#include "supervisor/nodes.h"
#include "supervisor/ops_int.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct {
	const struct ops_env *env;
	struct commit_env commit; /* what commit.c runs the table with */
} O;

static const struct commit_op op_table[OP_COUNT];

void ops_init(const struct ops_env *env)
{
	O.env = env;
	O.commit = (struct commit_env){ env->cfg, env->st, op_table, commit_spawning, leases_ahead_drop };
	commit_init(&O.commit);
}

const struct ops_env *ops_ctx(void)
{
	return O.env;
}

_Static_assert((int)PROTO_ENDED == (int)STORE_ENDED && (int)PROTO_SUSPENDED == (int)STORE_SUSPENDED && (int)PROTO_IDLE == (int)STORE_IDLE &&
		       (int)PROTO_ACTIVE == (int)STORE_ACTIVE && (int)PROTO_PAUSED == (int)STORE_PAUSED,
	       "the codec's conversation statuses are the store's");
_Static_assert((int)PROTO_TC_PENDING == (int)STORE_TC_PENDING && (int)PROTO_TC_RESOLVED == (int)STORE_TC_RESOLVED &&
		       (int)PROTO_TC_ERRORED == (int)STORE_TC_ERRORED && (int)PROTO_TC_EXPIRED == (int)STORE_TC_EXPIRED &&
		       (int)PROTO_TC_CANCELLED == (int)STORE_TC_CANCELLED && (int)PROTO_TC_UNKNOWN == (int)STORE_TC_UNKNOWN,
	       "the codec's tool call statuses are the store's");

/* 0, or jsonmp_pack's -EINVAL (too deep) or -ENOMEM; b is freed on failure. */
int ops_pack(struct jsonmp_buf *b, json_t *v)
{
	jsonmp_buf_init(b);
	int e = jsonmp_pack(&b->pk, v);
	if (e)
		jsonmp_buf_destroy(b);
	return e;
}

/* A failed ops_pack as the client's error or ours. */
void ops_pack_error(struct job *j, int e, const char *what)
{
	if (e == -ENOMEM)
		job_error(j, PERR_INTERNAL, "out of memory");
	else
		job_error(j, PERR_BAD_REQUEST, "%s nest too deeply", what);
}

/* Stored bytes as JSON: null when undecodable (agentd check names it),
 * NULL when out of memory (the reply fails; it never shows null for it). */
json_t *ops_mp_json(store_bytes b)
{
	json_t *v;
	int e = jsonmp_decode(b.ptr, b.len, &v);
	return e == -ENOMEM ? NULL : e ? json_null() : v;
}

/* Park j's reply until owner, the node that runs its conversation, has
 * acted (forward.h); get's reply so far goes with it. A failure to ask is
 * j's error (get: its reply as it is, without the owner's worker). */
void ops_park_forward(struct job *j, int action, const char *owner, int sig)
{
	json_t *partial = action == FORWARD_WORKER ? j->reply : NULL;
	if (!j->slot)
		return; /* its client went: nobody to answer */
	int e = forward_ask(action, j->rq.conv, owner, j->slot, j->rq.id, sig, json_incref(partial));
	if (e == -ENOMEM) {
		job_error(j, PERR_INTERNAL, "out of memory"); /* never a get short of the owner's worker */
		return;
	}
	if (e) {
		if (action != FORWARD_WORKER)
			job_error(j, PERR_UNAVAILABLE, "conversation %s is run by node %s, which cannot be asked: %s",
				  j->rq.conv, owner, e == -ENOMEM ? "out of memory" : store_strerror(e));
		return;
	}
	json_decref(j->reply);
	j->reply = NULL;
	j->slot = NULL; /* answered when the owner answers, or after lease_time */
	j->parked = 1;
}

/* Whether j's conversation is run by another live node, to which j went
 * (parked, or failed with j's error): 1, or 0 to act here. */
int ops_forwarded(struct job *j, int action)
{
	store_txn *t;
	char owner[STORE_ID_MAX + 1];
	if (!nodes_shared())
		return 0;
	int e = store_txn_begin(O.env->st, STORE_READ, &t);
	if (!e) {
		e = forward_owner(t, j->rq.conv, owner);
		store_txn_abort(t);
	}
	if (e < 0) {
		job_store_error(j, e, "conversation");
		return 1;
	}
	if (e == 1)
		ops_park_forward(j, action, owner, j->rq.signal);
	return e == 1;
}

int ops_conv_check(struct job *j)
{
	store_txn *t;
	struct store_conv c;
	int e = store_txn_begin(O.env->st, STORE_READ, &t);
	if (!e)
		e = store_conv_get(t, j->rq.conv, &c);
	store_txn_abort(t);
	if (e)
		job_store_error(j, e, "conversation");
	return e;
}

static void ops_kill(store_txn *t, struct job *j)
{
	if (ops_conv_check(j) || ops_forwarded(j, FORWARD_KILL))
		return;
	json_t *worker = workers_conv_json(j->rq.conv);
	if (!worker)
		return; /* out of memory: answered so, nothing killed (not "no worker") */
	json_t *pid = json_incref(json_object_get(worker, "pid"));
	json_decref(worker);
	if (pid && workers_kill(j->rq.conv, j->rq.signal) != 0) {
		json_decref(pid);
		pid = NULL;
	}
	j->reply = json_pack("{so}", "pid", pid ? pid : json_null());
}

static void ops_stop(store_txn *t, struct job *j)
{
	if (ops_conv_check(j) || ops_forwarded(j, FORWARD_STOP))
		return;
	j->reply = json_pack("{sb}", "stopping", workers_stop(j->rq.conv) == 0);
}

static void ops_compact(store_txn *t, struct job *j)
{
	if (ops_conv_check(j) || ops_forwarded(j, FORWARD_COMPACT))
		return;
	if (workers_wake(j->rq.conv)) {
		job_error(j, PERR_INTERNAL, "could not start a worker for %s", j->rq.conv);
		return;
	}
	if (compaction_ask(O.env->st, j->rq.conv, j->slot, j->rq.id)) {
		job_error(j, PERR_INTERNAL, "could not reach the worker of %s", j->rq.conv);
		return;
	}
	j->slot = NULL; /* answered when the worker reports */
	j->parked = 1;
}

static void ops_status(store_txn *t, struct job *j)
{
	struct store_stat st = { 0 };
	store_stat(O.env->st, &st);
	/* A PostgreSQL store shows its target, never its password. */
	char *pg = O.env->cfg->store ? config_store_shown(O.env->cfg->store) : NULL;
	j->reply = json_pack("{sssIsos{sssssIsIsIsIss}}", "version", AGENTD_VERSION, "uptime_ms",
			     (json_int_t)(loop_now_ms() - O.env->started_ms), "workers", workers_json(), "store",
			     "backend", O.env->cfg->store ? "postgresql" : "lmdb", "path",
			     pg ? pg : O.env->data_dir, "size_bytes", (json_int_t)st.size_bytes, "file_bytes",
			     (json_int_t)st.file_bytes, "map_size", (json_int_t)st.map_size, "readers",
			     (json_int_t)st.readers, "sync", st.sync == STORE_SYNC_NONE ? "none" : "full");
	free(pg);
	json_t *node = nodes_status_json();
	if (j->reply && (!node || json_object_set_new(j->reply, "node", node))) { /* node is taken either way */
		json_decref(j->reply);
		j->reply = NULL; /* answered "out of memory": never a status short of its node */
	} else if (!j->reply) {
		json_decref(node);
	}
}

static void ops_metrics(store_txn *t, struct job *j)
{
	struct store_stat st = { 0 };
	store_stat(O.env->st, &st);
	struct metrics_gauges g = { workers_live(), control_nclients(), st.size_bytes, st.map_size, st.flushes,
				    st.flushes_spared, durable_flush_failures() };
	size_t len = 0;
	char *buf = metrics_text(&g, &len);
	char *more = buf ? nodes_metrics_text() : NULL;
	if (buf && !more) {
		free(buf); /* never a text short of the node's lines */
		buf = NULL;
	}
	if (more) {
		size_t m = strlen(more);
		char *both = realloc(buf, len + m + 1);
		if (both) {
			memcpy(both + len, more, m + 1);
			buf = both;
			len += m;
		} else {
			free(buf); /* never a text short of the node's lines */
			buf = NULL;
		}
		free(more);
	}
	j->reply = buf ? json_pack("{ss#}", "text", buf, (int)len) : NULL; /* NULL: out of memory, not an empty text */
	free(buf);
}

static void ops_backup(store_txn *t, struct job *j)
{
	int e = backup_start(j->rq.path, j->slot, j->rq.id);
	if (e == -EBUSY) {
		job_error(j, PERR_BUSY, "a backup is already running: one at a time");
	} else if (e == -ENOTDIR) {
		job_error(j, PERR_BAD_REQUEST, "%.120s is not a directory", j->rq.path);
	} else if (e) {
		job_error(j, e == -ENOMEM ? PERR_INTERNAL : PERR_BAD_REQUEST, "cannot make %.100s: %s", j->rq.path,
			  strerror(-e));
	} else {
		j->slot = NULL; /* answered when the copy is done (backup.c) */
		j->parked = 1;
	}
}

static void ops_ping(store_txn *t, struct job *j)
{
	j->reply = json_pack("{ss}", "version", AGENTD_VERSION);
}

static void ops_shutdown(store_txn *t, struct job *j)
{
	j->reply = json_object();
	O.env->shutdown(j->slot ? slot_client(j->slot) : NULL);
}

/* The op table: one row per op, as Redis has its command table. A read runs
 * with a read transaction when OPF_TXN says so (else t is NULL); a write runs
 * inside the iteration's group transaction, and its after step once that
 * committed (commit.h). Adding an op: its codec case (ipc/proto.c), a row
 * here and its handlers: a read of the store in ops_read.c, a write in
 * ops_write.c, an op on the process or its workers in this file. */
static const struct commit_op op_table[OP_COUNT] = {
	[OP_PING] = { OPF_FIRST, ops_ping, NULL, NULL },
	[OP_CREATE] = { OPF_WRITE, NULL, ops_w_create, NULL },
	[OP_GET] = { OPF_TXN | OPF_LARGE, ops_get, NULL, NULL },
	[OP_LIST] = { OPF_TXN | OPF_LARGE, ops_list, NULL, NULL },
	[OP_UPDATE] = { OPF_WRITE, NULL, ops_w_update, ops_after_update },
	[OP_DELETE] = { OPF_WRITE, NULL, ops_w_delete, ops_after_delete },
	[OP_SEND] = { OPF_WRITE, NULL, ops_w_send, ops_after_send },
	[OP_EVENTS] = { OPF_LARGE, ops_events, NULL, NULL },
	[OP_WATCH] = { OPF_TXN, ops_watch, NULL, NULL },
	[OP_RESOLVE] = { OPF_WRITE, NULL, ops_w_resolve, ops_after_resolve },
	[OP_TOOL_CALL] = { OPF_TXN | OPF_LARGE, ops_tool_call, NULL, NULL },
	[OP_TOOL_CALLS] = { OPF_TXN | OPF_LARGE, ops_tool_calls, NULL, NULL },
	[OP_SUMMARY] = { OPF_TXN | OPF_LARGE, ops_summary, NULL, NULL },
	[OP_COMPACT] = { 0, ops_compact, NULL, NULL },
	[OP_AUDIT] = { OPF_TXN | OPF_LARGE, ops_audit, NULL, NULL },
	[OP_KILL] = { 0, ops_kill, NULL, NULL },
	[OP_STOP] = { 0, ops_stop, NULL, NULL },
	[OP_STATUS] = { OPF_LARGE, ops_status, NULL, NULL },
	[OP_METRICS] = { OPF_LARGE, ops_metrics, NULL, NULL },
	[OP_SHUTDOWN] = { 0, ops_shutdown, NULL, NULL },
	[OP_FORK] = { OPF_WRITE, NULL, ops_w_fork, ops_after_fork },
	[OP_BACKUP] = { 0, ops_backup, NULL, NULL },
	[OP_CANCEL] = { OPF_WRITE, NULL, ops_w_cancel, ops_after_cancel },
	[OP_RESUME] = { OPF_WRITE, NULL, ops_w_resume, ops_after_resume },
	[OP_RUNS] = { OPF_TXN | OPF_LARGE, ops_runs, NULL, NULL },
	[OP_NODES] = { OPF_TXN, ops_nodes, NULL, NULL },
	[OP_EXTEND] = { OPF_WRITE, NULL, ops_w_extend, ops_after_extend },
	[OP_SETTLE] = { OPF_WRITE, NULL, ops_w_settle, ops_after_settle },
	[OP_SCHEDULE] = { OPF_WRITE, NULL, ops_w_schedule, ops_after_schedule },
	[OP_SCHEDULES] = { OPF_TXN | OPF_LARGE, ops_schedules, NULL, NULL },
	[OP_UNSCHEDULE] = { OPF_WRITE, NULL, ops_w_unschedule, ops_after_unschedule },
};

int ops_is_write(int op)
{
	return op >= 0 && op < OP_COUNT && (op_table[op].flags & OPF_WRITE);
}

int ops_reply_large(int op)
{
	return op >= 0 && op < OP_COUNT && (op_table[op].flags & OPF_LARGE);
}
