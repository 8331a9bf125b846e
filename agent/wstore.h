/*
 * wstore.h: the worker's store plumbing: when the store is held, the write
 * transaction (the gate, the lease check, the commit's announcement), and
 * how a store failure ends the worker.
 *
 * Every function here that meets a store error ends the process through
 * wstore_die (exit codes below); a function declared void returns only on
 * success. A transaction a function aborts before dying is not to be used
 * again (it never returns to the caller anyway).
 *
 * Exit codes (ipc/ipc.h): IPC_EXIT_GONE when fenced (another worker holds the
 * lease) or the conversation was deleted; IPC_EXIT_CORRUPT for a damaged
 * store; IPC_EXIT_FULL for a full store that cannot grow; IPC_EXIT_STORE for
 * anything else, out of memory, and a full map that may still grow (the next
 * worker reserves room again).
 */
#ifndef AGENTD_AGENT_WSTORE_H
#define AGENTD_AGENT_WSTORE_H

#include "agent/proc.h"
#include "agent/worker.h"
#include "common/jsonmp.h"

/* Let go of the store (and the PostgreSQL connection slot) while we wait for
 * a model, a tool or the supervisor: the flush of every commit, anyone's,
 * visits each process's mapping of each page it cleans, so a thousand
 * waiting workers' maps made the supervisor's commits several times slower
 * (docs/architecture.md, "A waiting worker lets go of the store"). Opening
 * it again costs about 0.1 ms. Nothing when not held. */
void wstore_let_go(struct worker *w);

/* On PostgreSQL, take one of the --connections slots (common/connslot.h)
 * before the store opens: at the limit, wait for one, saying so once.
 * Nothing on LMDB or when held. Exits IPC_EXIT_STORE when the lock file
 * fails. */
void wstore_slot_take(struct worker *w);

/* Open the store again (w->st) if let go. Exits IPC_EXIT_STORE when it
 * cannot. */
void wstore_take(struct worker *w);

/* End the worker for store error e met doing `what` (logged), with the exit
 * code the header's opening comment gives. */
void wstore_die(struct worker *w, int e, const char *what) __attribute__((noreturn));
/* A flush of the data file failed (e): exit IPC_EXIT_FLUSH. */
void wstore_die_flush(struct worker *w, int e, const char *what) __attribute__((noreturn));

/* Out of memory where going on would leave a record or this worker's view
 * short of something: abort t (may be NULL), log, exit IPC_EXIT_STORE. */
void wstore_die_oom(struct worker *w, store_txn *t, const char *what) __attribute__((noreturn));

/* About the bytes v takes in the store (its compact JSON); 0 for NULL. */
size_t wstore_json_size(const json_t *v);

/* Room for a write of about `bytes` before its transaction: the map grows by
 * itself only by halves, and a large turn or result would otherwise meet a
 * full map that could still grow (store_reserve). Best effort. */
void wstore_reserve(struct worker *w, size_t bytes);

/* A read transaction (the caller aborts it). */
store_txn *wstore_rbegin(struct worker *w);

/* A write transaction with the lease checked first: the write gate is
 * entered (wipc_gate_enter, finished as there), and writers are serialised,
 * so the check holds until commit. End it with wstore_commit or
 * wstore_wabort, which leave the gate. */
store_txn *wstore_wbegin(struct worker *w, int finished);

/* If e is an error: abort t and die for it (wstore_die). */
void wstore_must(struct worker *w, store_txn *t, int e, const char *what);

/* Commit t and leave the gate announcing seq, the last event the commit
 * appended (0: none), for watchers. May not return when a stop was waiting
 * (w->on_stop) or the supervisor is gone (exit 0). */
void wstore_commit(struct worker *w, store_txn *t, const char *what, uint64_t seq);

/* Abort a write transaction that found nothing to write, and leave the gate
 * (as wstore_commit with seq 0). */
void wstore_wabort(struct worker *w, store_txn *t);

/* Pack v for the store into b (jsonmp_buf_init'd here; the caller
 * jsonmp_buf_destroys it); the bytes returned live in b. A value nested
 * deeper than the store keeps is stored as null. Exits IPC_EXIT_STORE when
 * out of memory (never a record stored as something else). */
store_bytes wstore_pack(struct worker *w, struct jsonmp_buf *b, const json_t *v);

/* Append an event of `type` with content (the reference is stolen) and
 * return its seq. content NULL (it could not be built) aborts t and exits
 * IPC_EXIT_STORE: stored, it would be a null event the log's tail can never
 * get past. */
uint64_t wstore_append(struct worker *w, store_txn *t, const char *type, json_t *content);

/* Status and fsm_state together (fsm stolen; NULL dies as out of memory); an
 * ended conversation stays ended. */
void wstore_put_state(struct worker *w, store_txn *t, int status, json_t *fsm);

/* The audit row of a model call keyed by turn_ref (an assistant_msg's or an
 * error's seq, or AUDIT_SUMMARY_BIT | to_seq for a summary), when auditing
 * is on; nothing otherwise. req is not stolen. */
void wstore_audit(struct worker *w, store_txn *t, uint64_t turn_ref, const json_t *req, const char *model,
		  const struct store_usage *u, int64_t latency);

/* Did the log grow past `seen` (what this worker last read)? Asked inside
 * the write transaction that records a state decided from that read: the
 * supervisor commits sends, resolutions and expiries (and sets the status
 * `active`) between the worker's read and its write, so a status written
 * from the older view would overwrite theirs. 1 if so, 0 if not. */
int wstore_log_moved(struct worker *w, store_txn *t, uint64_t seen);

/* proc_run without the store while the command runs (taken again after), the
 * child's group reported to the supervisor meanwhile by o->on_start and
 * cleared after. Returns what proc_run returns (proc.h); r is the caller's
 * to proc_result_free. */
int wstore_run_command(struct worker *w, char *const argv[], const struct proc_opts *o, struct proc_result *r);

/* Audit rows of a summarize call: this bit plus the summary's to_seq, so the
 * two never clash with a turn's (the audit op shows task "summarize" and the
 * bare to_seq). */
#define AUDIT_SUMMARY_BIT (1ULL << 62)

#endif
