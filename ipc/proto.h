/*
 * proto.h: the control protocol's request codec (docs/protocol.md).
 *
 * One line in, one validated request out. Everything a request carries is
 * checked here (JSON object, op, field types and ranges, id alphabet and
 * length, model and tool names through the caller's lookups) before anything
 * is looked up in the store, so a bad request is `bad_request` whatever exists.
 */
#ifndef AGENTD_PROTO_H
#define AGENTD_PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum proto_op {
	OP_PING, OP_CREATE, OP_GET, OP_LIST, OP_UPDATE, OP_DELETE, OP_SEND, OP_EVENTS, OP_WATCH,
	OP_RESOLVE, OP_TOOL_CALL, OP_TOOL_CALLS, OP_SUMMARY, OP_COMPACT, OP_AUDIT, OP_KILL, OP_STOP,
	OP_STATUS, OP_METRICS, OP_SHUTDOWN, OP_FORK, OP_BACKUP, OP_CANCEL, OP_RESUME, OP_RUNS, OP_NODES,
	OP_EXTEND, OP_SETTLE, OP_SCHEDULE, OP_SCHEDULES, OP_UNSCHEDULE,
	OP_COUNT
};

enum proto_err {
	PERR_OK = 0, PERR_BAD_REQUEST, PERR_UNKNOWN_OP, PERR_NOT_FOUND, PERR_CONFLICT, PERR_STALE,
	PERR_TOO_LARGE, PERR_STORE_FULL, PERR_UNAVAILABLE, PERR_INTERNAL, PERR_BUSY, PERR_UNSUPPORTED, PERR_COUNT
};

/* The statuses a request names, in the protocol's order: the same values
 * as the store's (the supervisor checks that at compile time). */
enum proto_conv_status { PROTO_IDLE = 0, PROTO_ACTIVE, PROTO_SUSPENDED, PROTO_ENDED, PROTO_PAUSED };
enum proto_tc_status { PROTO_TC_PENDING = 0, PROTO_TC_RESOLVED, PROTO_TC_ERRORED, PROTO_TC_EXPIRED,
		       PROTO_TC_CANCELLED, PROTO_TC_UNKNOWN };
/* settle's outcomes: the same values as conv.h's enum conv_outcome. */
enum proto_outcome { PROTO_RETRY = 0, PROTO_DONE, PROTO_FAILED };

/* What a send that finds a turn running does (settings.on_busy, send's
 * on_busy; docs/protocol.md, "Concurrent messages"). */
enum proto_on_busy { PROTO_ON_BUSY_ENQUEUE = 0, PROTO_ON_BUSY_REJECT, PROTO_ON_BUSY_INTERRUPT, PROTO_ON_BUSY_STEER,
		     PROTO_ON_BUSY_N };
extern const char *const proto_on_busy_names[PROTO_ON_BUSY_N];
/* name's enum proto_on_busy, or -1 when it names none (NULL included). */
int proto_on_busy(const char *name);

#define PROTO_LIST_MAX 1000       /* list limit, runs limit */
#define PROTO_EVENTS_MAX 10000    /* events limit */
#define PROTO_WAIT_MAX 3600000    /* wait_ms: one hour */
#define PROTO_BY_MAX 128          /* resolve's by: bytes */
#define PROTO_EXTEND_MAX_MS 31536000000LL /* extend's expires_in_ms: a year */
#define PROTO_DIGEST_LEN 64       /* resolve's args_digest: lowercase hex SHA-256 */
#define PROTO_META_MAX 16         /* metadata: keys of one conversation */
#define PROTO_META_KEY_MAX 64     /* metadata: bytes of a key (at least 1) */
#define PROTO_META_VAL_MAX 256    /* metadata: bytes of a value */
#define PROTO_PATH_MAX 4095       /* backup: bytes of a path */
#define PROTO_SCHEDULE_TEXT_MAX 65536 /* schedule's text: bytes (the store's STORE_SCHEDULE_TEXT_MAX) */
#define PROTO_SCHEDULE_AFTER_MAX 315360000000LL /* schedule's after: ten years of ms */

struct request {
	json_t *root;           /* owned */
	json_t *id;             /* borrowed from root; NULL when absent */
	int op;                 /* enum proto_op */
	const char *conv;       /* conversation id (validated), or NULL */
	const char *tool_call_id;
	json_t *settings;       /* create: full; update: the patch */
	json_t *content;        /* send: an object ({"text":...} for a string) */
	const char *event_id;
	int status;             /* list / tool_calls filter, update (ended), resolve; -1: none */
	int has_after;
	uint64_t after, before; /* before 0: unbounded */
	size_t limit;           /* 0: default */
	const char *type;       /* events type filter */
	int64_t wait_ms;        /* events long-poll, 0: none */
	json_t *result;         /* resolve, settle (borrowed), NULL: none */
	int outcome;            /* settle: enum proto_outcome */
	const char *by;         /* resolve, extend, settle: who decided (PROTO_BY_MAX bytes at most), NULL: not given */
	const char *args_digest; /* resolve: the digest of the args the person saw (PROTO_DIGEST_LEN
				  * lowercase hex digits), NULL: not given */
	/* extend: the new deadline, one of the two (the other 0): ms from the
	 * commit, or ms since the epoch */
	int64_t expires_in_ms;
	int64_t deadline;
	int signal;             /* kill: SIGKILL or SIGTERM */
	int runs;               /* watch: stream run starts and ends too */
	/* send: optimistic concurrency and atomic batches (docs/protocol.md, send) */
	int has_expected_seq;
	uint64_t expected_seq;  /* the last seq the client saw; 0: the log must be empty */
	int on_busy;            /* send: enum proto_on_busy, -1: the conversation's setting */
	json_t *events;         /* owned; a batch: [{"content": object, "event_id"?: string}], else NULL */
	/* create: the metadata (strings); update: the patch (a null value
	 * deletes its key); list: the pairs a conversation must all hold.
	 * Borrowed from root; NULL when absent. */
	json_t *metadata;
	const char *model;      /* list: settings.model must equal it; NULL: any */
	int64_t updated_after;  /* list: updated_at > this; 0: unbounded */
	int64_t updated_before; /* list: updated_at < this; 0: unbounded */
	/* fork: the seq forked at (1..), the new conversation's id (NULL:
	 * generated); settings (the overrides) and metadata above. */
	uint64_t seq;
	const char *new_conv;
	const char *path;       /* backup: an absolute directory path (no NUL) */
	/* schedule: its text (1-PROTO_SCHEDULE_TEXT_MAX bytes, text_len of
	 * them), and when: at (ms since the epoch; 0: not given) or in (ms
	 * from the commit; -1: not given), at most one of them, and cron (NULL:
	 * once; a spec common/cron.h parses). Neither at nor in: cron's next
	 * minute.
	 * unschedule: schedule_id. */
	const char *text;
	size_t text_len;
	int64_t at_ms, in_ms;
	const char *cron;
	const char *schedule_id;
};

/* The configuration's names, for validating models and tools. */
struct proto_names {
	int (*model_ok)(void *arg, const char *name);
	int (*tool_ok)(void *arg, const char *name);
	void *arg;
	/* A send batch's limits (the configuration's batch_max_events and
	 * batch_max_bytes: its events' content as stored, in msgpack bytes);
	 * 0: no limit. */
	size_t batch_max_events;
	size_t batch_max_bytes;
};

/* Parse and validate one request line (without its '\n'). On success returns
 * PERR_OK and rq holds the request (free with proto_request_free). Otherwise
 * returns the error code and writes a message naming what was wrong into msg;
 * rq->id is still set when the line was a JSON object with an id, so the error
 * reply can echo it (free rq in every case). PERR_INTERNAL ("out of
 * memory") is never the line's fault. */
int proto_parse(const char *line, size_t len, const struct proto_names *names, struct request *rq,
		char *msg, size_t msglen);
void proto_request_free(struct request *rq);

const char *proto_op_name(int op);
const char *proto_err_code(int err);

/* {"id":..., "ok":false, "error":CODE, "message":MSG} as one line with '\n'.
 * Returns a malloc'd string (length in *len) or NULL (out of memory: never a
 * line short of a field). */
char *proto_error_line(json_t *id, int err, const char *msg, size_t *len);
/* The same with extra's fields added (extra: an object, stolen, may be NULL;
 * it cannot replace id, ok, error or message). NULL when out of memory. */
char *proto_error_line_with(json_t *id, int err, const char *msg, json_t *extra, size_t *len);
/* The line that stands in for a reply that cannot be built (out of memory):
 * {"id":ID,"ok":false,"error":"internal","message":"out of memory"} and '\n',
 * ID the request's id as JSON text (no "id" when id is NULL), byte for byte
 * proto_error_line's. Made when the request is parsed, so that the reply
 * needs no memory when it is written: into buf when it fits in cap bytes,
 * else into a block allocated here. 0 with *line (buf or that block, which
 * the caller frees) and *len, or -ENOMEM (*line NULL). */
int proto_oom_line(json_t *id, char *buf, size_t cap, char **line, size_t *len);
/* Another error for the request an out-of-memory line (proto_oom_line's,
 * oom_len bytes) stands for, with its id: {"id":ID,"ok":false,"error":
 * proto_err_code(err),"message":msg} and '\n'. NULL when out of memory. */
char *proto_error_for_oom_line(const char *oom, size_t oom_len, int err, const char *msg, size_t *len);
/* Add "id" and "ok":true to obj (stolen; NULL: an empty object) and dump it
 * as one line with '\n'. NULL when out of memory. */
char *proto_ok_line(json_t *id, json_t *obj, size_t *len);

#endif
