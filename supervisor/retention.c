#include "supervisor/retention.h"
#include "common/log.h"
#include "conv/conv.h"
#include "supervisor/forward.h"
#include "supervisor/gate.h"
#include "supervisor/metrics.h"
#include "supervisor/transfer.h"
#include "supervisor/waiters.h"
#include "supervisor/workers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STEP_READ 200 /* conversations read by one step */
#define START_DELAY_MS 1000

enum { END = 1, REMOVE };

struct due {
	char id[STORE_ID_MAX + 1];
	int what; /* END or REMOVE */
};

static struct {
	store *st;
	const struct config *cfg;
	int on;
	int64_t next;                 /* the next step, monotonic ms; 0: none */
	int in_pass;
	char after[STORE_ID_MAX + 1]; /* the pass's cursor: the last id read */
	struct due due[STEP_READ];
	size_t ndue;
	uint64_t ended, removed, exported, failed; /* this pass's, for its log line */
} R;

/* What c is due for at now (realtime ms): END, REMOVE or 0. */
static int due_for(const struct store_conv *c, int64_t now)
{
	const struct config *k = R.cfg;
	if (c->status == STORE_IDLE && k->end_idle_after_ms && c->updated_at <= now - k->end_idle_after_ms)
		return END;
	if (c->status == STORE_ENDED && k->remove_ended_after_ms && c->updated_at <= now - k->remove_ended_after_ms)
		return REMOVE;
	return 0;
}

static int on_conv(void *arg, const struct store_conv *c)
{
	int64_t now = *(const int64_t *)arg;
	size_t n = c->id.len < STORE_ID_MAX ? c->id.len : STORE_ID_MAX;
	memcpy(R.after, c->id.ptr, n);
	R.after[n] = 0;
	int what = due_for(c, now);
	if (what && R.ndue < STEP_READ) {
		memcpy(R.due[R.ndue].id, R.after, n + 1);
		R.due[R.ndue++].what = what;
	}
	return 0;
}

/* The next slice of the pass: the due ones among STEP_READ conversations
 * after the cursor. 1 when the pass has read every conversation. */
static int read_slice(int64_t now)
{
	store_txn *t;
	int more = 0;
	R.ndue = 0;
	int e = store_txn_begin(R.st, STORE_READ, &t);
	if (!e) {
		e = store_conv_list(t, -1, R.after[0] ? R.after : NULL, STEP_READ, on_conv, &now, &more);
		store_txn_abort(t);
	}
	if (e && e != STORE_E_CORRUPT) { /* a damaged record is passed over; the rest is listed */
		log_warn("retention: reading the conversations: %s (tried again at the next pass)", store_strerror(e));
		return 1;
	}
	return !more;
}

/* id's whole stream into DIR/ID.jsonl, written to a temporary name, flushed
 * and renamed (then the directory flushed): a removal never precedes its
 * export's durability. 0 or -errno / a store error. */
static int export_one(const char *id)
{
	const char *dir = R.cfg->retention_export;
	char tmp[4200], path[4200];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.jsonl.tmp", dir, id) >= sizeof tmp ||
	    (size_t)snprintf(path, sizeof path, "%s/%s.jsonl", dir, id) >= sizeof path)
		return -ENAMETOOLONG;
	FILE *f = fopen(tmp, "we");
	if (!f)
		return -errno;
	int e = transfer_export_conv(R.st, id, R.cfg->store ? "postgresql" : "lmdb", f);
	if (!e && (fflush(f) || fdatasync(fileno(f))))
		e = -errno;
	if (fclose(f) && !e)
		e = -errno;
	if (!e && rename(tmp, path))
		e = -errno;
	if (!e) {
		int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d < 0 || fsync(d))
			e = -errno;
		if (d >= 0)
			close(d);
	}
	if (e)
		unlink(tmp);
	return e;
}

static int any_schedule(void *arg, const struct store_schedule *s)
{
	(void)s;
	*(int *)arg = 1;
	return 1;
}

/* In t: d still due (checked again: a send or an update since the read
 * moves updated_at; an idle conversation with a scheduled wakeup is
 * waiting for it, not abandoned), then ended or removed as `update` and
 * `delete` do. 1 done, 0 no longer due, else a store error. */
static int apply(store_txn *t, const struct due *d, int64_t now)
{
	struct store_conv c;
	int e = store_conv_get(t, d->id, &c);
	if (e)
		return e == STORE_E_NOTFOUND ? 0 : e;
	if (due_for(&c, now) != d->what)
		return 0;
	if (d->what == REMOVE) {
		workers_deleted(d->id);
		if ((e = forward_tell(t, d->id, "delete")) || (e = store_conv_delete(t, d->id)))
			return e;
		return 1;
	}
	int waits = 0;
	if ((e = store_schedules_list(t, d->id, any_schedule, &waits)) && e != 1)
		return e;
	if (waits)
		return 0;
	struct store_conv_patch p = { .set = STORE_SET_STATUS, .status = STORE_ENDED };
	if ((e = store_conv_put(t, d->id, &p)) || (e = conv_run_end(t, d->id, STORE_RUN_INTERRUPTED)) ||
	    (e = forward_tell(t, d->id, "end")))
		return e;
	return 1;
}

/* The slice's due conversations: those to remove exported first (when
 * set), then all of them written in one transaction. */
static void write_slice(int64_t now)
{
	int ok[STEP_READ] = { 0 };
	for (size_t i = 0; i < R.ndue; i++) {
		ok[i] = 1;
		if (R.due[i].what != REMOVE || !R.cfg->retention_export)
			continue;
		int e = export_one(R.due[i].id);
		if (e) {
			ok[i] = 0;
			R.failed++;
			log_warn("retention: %s: not removed: its export into %s failed: %s", R.due[i].id,
				 R.cfg->retention_export, e < 0 && e > -4096 ? strerror(-e) : store_strerror(e));
		}
	}
	store_txn *t = NULL;
	int done[STEP_READ] = { 0 };
	int e = gate_write_begin(STORE_WRITE, &t);
	for (size_t i = 0; !e && i < R.ndue; i++)
		if (ok[i] && (e = apply(t, &R.due[i], now)) > 0)
			done[i] = 1, e = 0;
	if (!e)
		e = store_txn_commit(t);
	else if (t)
		store_txn_abort(t);
	if (e) {
		log_warn("retention: writing: %s (tried again at the next pass)", store_strerror(e));
		return;
	}
	for (size_t i = 0; i < R.ndue; i++) {
		if (!done[i])
			continue;
		const char *id = R.due[i].id;
		if (R.due[i].what == REMOVE) {
			waiters_deleted(id);
			R.removed++;
			R.exported += R.cfg->retention_export != NULL;
			metrics_add(M_RETENTION_REMOVED, 1);
			if (R.cfg->retention_export)
				metrics_add(M_RETENTION_EXPORTED, 1);
			log_debug("retention: %s removed", id);
		} else {
			workers_stop(id);
			R.ended++;
			metrics_add(M_RETENTION_ENDED, 1);
			log_debug("retention: %s ended", id);
		}
	}
}

void retention_init(store *st, const struct config *cfg, int64_t now)
{
	memset(&R, 0, sizeof R);
	R.st = st;
	R.cfg = cfg;
	R.on = cfg->end_idle_after_ms > 0 || cfg->remove_ended_after_ms > 0;
	R.next = R.on ? now + START_DELAY_MS : 0;
	if (R.on)
		log_info("retention: idle conversations ended after %lld ms, ended ones removed after %lld ms%s%s "
			 "(0: never), a pass every %lld ms", (long long)cfg->end_idle_after_ms,
			 (long long)cfg->remove_ended_after_ms, cfg->retention_export ? ", exported first into " : "",
			 cfg->retention_export ? cfg->retention_export : "", (long long)cfg->retention_interval_ms);
}

int64_t retention_deadline(void)
{
	return R.next;
}

void retention_tick(int64_t now)
{
	if (!R.next || now < R.next)
		return;
	if (!R.in_pass) {
		R.in_pass = 1;
		R.after[0] = 0;
		R.ended = R.removed = R.exported = R.failed = 0;
	}
	int64_t wall = store_now(R.st);
	int last = read_slice(wall);
	if (R.ndue)
		write_slice(wall);
	if (!last) {
		R.next = now; /* the next slice after the loop's other work */
		return;
	}
	R.in_pass = 0;
	R.next = now + R.cfg->retention_interval_ms;
	metrics_add(M_RETENTION_PASSES, 1);
	if (R.ended || R.removed || R.failed)
		log_info("retention: a pass ended %llu idle conversation(s) and removed %llu ended one(s)%s%s; %llu "
			 "export(s) failed", (unsigned long long)R.ended, (unsigned long long)R.removed,
			 R.cfg->retention_export ? ", each exported first into " : "",
			 R.cfg->retention_export ? R.cfg->retention_export : "", (unsigned long long)R.failed);
}
