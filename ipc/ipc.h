/*
 * ipc.h: supervisor <-> worker messages.
 *
 * A socketpair(AF_UNIX, SOCK_SEQPACKET): the kernel keeps message boundaries,
 * so one send is one msgpack map and one recv reads it whole. This module owns
 * that framing and nothing else does. A message is at most IPC_MAX bytes; a
 * bigger one is refused on send (-EMSGSIZE) and truncation on receive is an
 * error (-EPROTO).
 *
 * Messages (key "t" names the kind):
 *   supervisor -> worker:  go                the store holds what the worker was started for:
 *                                            read the log (the first message, always)
 *                          wake {seq}        new events exist up to seq
 *                          stop              persist and exit 0 (hibernate)
 *                          compact {req}     summarise now; answer compacted {req}
 *                          grant             your turn to write (answers write)
 *   worker -> supervisor:  ready {pid}       store opened, revival decided
 *                          state {state}     running | idle | awaiting_input
 *                          delta {text}      streamed model output, for watchers
 *                          compacted {req, ok, text}  answer to compact (text: summary or error)
 *                          child {num}       a model or tool runs as process group num (0: none)
 *                          woken             read the wakes sent so far and is about to re-read
 *                                            the log: the next event needs a new wake
 *                          write             asks for its turn to write
 *                          written {seq}     its write is committed or abandoned; seq: the last
 *                                            event the commit made visible (0: none)
 *
 * Wakes are coalesced: after one wake the supervisor sends no other until the
 * worker answers woken (a worker in a model call would only re-read the log
 * once the call ends anyway). An event committed between the two is announced
 * by a wake sent on woken, so none is missed.
 *
 * The write gate: a worker asks (write) before it begins a write transaction
 * and says written after it. The supervisor grants one worker at a time, in
 * request order, and only between its own loop iterations, so its own
 * commits (sends, resolutions, expiries, leases) wait behind at most one
 * worker's, never behind a queue of them on LMDB's writer mutex. LMDB's mutex
 * still does the locking: the gate orders writers, it does not protect data.
 *
 * A worker waits for go before it reads the log: the supervisor may start it
 * while the commit that gives it work (and its lease) is still being flushed,
 * so that the worker's start and the flush overlap; go follows that commit.
 * Messages before go are kept: stop ends the worker, compact is queued.
 */
#ifndef AGENTD_IPC_H
#define AGENTD_IPC_H

#include <stddef.h>
#include <stdint.h>

#define IPC_MAX 65536

/* The worker's exit statuses, defined once for both sides (0: it stopped as
 * asked or had nothing to do). */
enum ipc_exit {
	IPC_EXIT_USAGE = 2,   /* a bad command line: it was not started by agentd */
	IPC_EXIT_GONE = 3,    /* its lease was superseded (fenced), or its conversation is gone (deleted) */
	IPC_EXIT_CORRUPT = 4, /* a record of its conversation cannot be decoded */
	IPC_EXIT_STORE = 5,   /* any other store or system failure */
	/* A write found the store full: its work cannot be stored, and running
	 * it again (another model call) would not change that, so the
	 * supervisor records an error instead of restarting. */
	IPC_EXIT_FULL = 6,
	/* A flush of the data file failed (or a commit's own, -EIO): nothing
	 * it held can be proven durable again, so the supervisor stops
	 * (supervisor/durable.h) instead of restarting it. */
	IPC_EXIT_FLUSH = 7,
};

enum ipc_type {
	IPC_WAKE = 1,
	IPC_STOP,
	IPC_COMPACT,
	IPC_READY,
	IPC_STATE,
	IPC_DELTA,
	IPC_COMPACTED,
	IPC_CHILD,
	IPC_WOKEN,
	IPC_WRITE,
	IPC_GRANT,
	IPC_WRITTEN,
	IPC_GO,
	IPC_MODEL,
};

struct ipc_msg {
	int type;          /* enum ipc_type */
	uint64_t seq;      /* wake, written */
	int64_t num;       /* ready: pid; compact/compacted: request number; model: attempts */
	int ok;            /* compacted; model: the call answered */
	const char *text;  /* state name, delta text, compacted text; not NUL-terminated */
	size_t text_len;
};

/* A close-on-exec SOCK_SEQPACKET pair. Returns 0 or -errno. */
int ipc_pair(int fds[2]);

/* Send one message. Returns 0, -EMSGSIZE, -EAGAIN (non-blocking socket full),
 * or -errno (-EPIPE when the peer is gone). */
int ipc_send(int fd, const struct ipc_msg *m);

/* Receive one message into buf (IPC_MAX bytes); m's text points into buf.
 * Returns 1 for a message, 0 on end of file (peer closed), -EAGAIN when none is
 * waiting on a non-blocking socket, -EPROTO for a malformed or truncated
 * message, or -errno. */
int ipc_recv(int fd, struct ipc_msg *m, char *buf);

/* Decode one message of len bytes (what ipc_recv does after reading it).
 * Returns 0, or -EPROTO for anything malformed; text points into buf. */
int ipc_decode(const char *buf, size_t len, struct ipc_msg *m);

const char *ipc_type_name(int type);

/* Open /dev/null on any of descriptors 0, 1 and 2 that is closed, before
 * anything else is opened: started with them closed, the store's files or a
 * socket would take those numbers, and log lines written to "stderr" would
 * land in the data file or the lock file. Returns 0, or a negative errno when
 * /dev/null cannot be opened. agentd and agentd-worker call it first. */
int ipc_stdio_guard(void);

#endif
