/*
 * agentctl: the command-line client of agentd's control protocol.
 *
 * The contract is docs/agentctl.md (command line) and docs/protocol.md (protocol): one
 * command per op, readable output by default, the raw reply line with --json,
 * `raw` to send any request. agentctl owns nothing and never touches the store:
 * it connects, writes one request line carrying an "id", reads lines until the
 * reply (the first JSON object with an "ok" member) and, for `watch`, goes on
 * printing what agentd streams until agentd closes or the user interrupts.
 *
 * Exit status, which scripts rely on: 0 when agentd replied ok:true; 1 when it
 * replied with an error (printed as "agentctl: CODE: message" on stderr); 2 for
 * usage errors and for connection failures (the reason on stderr).
 *
 * Each command is one row of a table (struct command). The request and the
 * help text are both built from it, so they cannot drift apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h> /* isfinite: a macro, no libm */
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "client/ctl.h"
#include "common/jsonmp.h"

#ifndef AGENTD_VERSION
#define AGENTD_VERSION "unknown"
#endif

enum {
	EXIT_OK = 0,    /* agentd replied ok:true */
	EXIT_REPLY = 1, /* agentd replied ok:false */
	EXIT_USAGE = 2, /* bad command line, or no usable connection */
};

/* Where agentctl looks when neither -s nor $AGENTD_SOCKET says: scripts/run.sh's
 * agentd, seen from the directory it runs in, then the installed service's
 * (packaging/agentd.service). */
#define DEFAULT_SOCKET "./agentd-data/agentd.sock"
#ifndef AGENTD_RUN_SOCKET
#define AGENTD_RUN_SOCKET "/run/agentd/agentd.sock"
#endif
#define DEFAULT_TIMEOUT_MS 60000

/* Real numbers: requests carry 17 significant digits so agentd gets exactly the
 * double that was parsed; readable output uses 15, which gives back the decimal
 * a person typed (0.1 rather than 0.10000000000000001). Text is made by
 * jsonmp_dumps: json_dumps can leave out an object key when an allocation
 * inside it fails, and a request short of a key is another request. */
#define SEND_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17))
#define SHOW_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15))

/* ------------------------------------------------------------------------ */
/* Command table                                                            */

enum kind {
	K_STR,      /* string field */
	K_UINT,     /* non-negative integer field */
	K_JSON,     /* any JSON value */
	K_ENUM,     /* one of `choices` ("a|b"), matched case-insensitively */
	K_CONST,    /* flag: sets `field` to the string `choices` */
	K_TRUE,     /* flag: sets `field` to true */
	K_SET_STR,  /* settings.<field>: string */
	K_SET_LIST, /* settings.<field>: array of strings, repeatable */
	K_SET_KV,   /* settings.<field>: object from KEY=VALUE, repeatable */
	K_CONTENT,  /* send's TEXT: a string, or a JSON object with --json-content */
	K_RAW,      /* raw's JSON: the whole request line */
	K_LOCAL,    /* flag read by agentctl itself (--json-content) */
	K_RES_STR,  /* result.<field>: string (approve and deny's --comment) */
	K_SET_JSON, /* settings.<field>: any JSON value */
	K_BATCH,    /* send's --batch FILE: a JSON array of events, in place of TEXT */
	K_META_KV,  /* metadata.KEY: string VALUE from KEY=VALUE, repeatable */
	K_META_DEL, /* metadata.KEY: null (update: delete the key), repeatable */
	K_PATH,     /* string field: a path, made absolute against agentctl's working directory */
};

struct param {
	const char *name;  /* "--after", or a positional's placeholder ("CONV") */
	const char *field; /* the request field it fills */
	enum kind kind;
	const char *meta;  /* the option's argument placeholder; NULL for flags */
	const char *choices;
	bool required;     /* options only: positionals are always required */
	const char *help;
};

enum {
	CMD_WATCH = 1 << 0,    /* stream after the reply */
	CMD_RAW = 1 << 1,      /* the request is the user's line */
	CMD_NEED_OPT = 1 << 2, /* at least one option must be given */
	CMD_SLOW = 1 << 3,     /* may take minutes (a model call): no default timeout */
	CMD_PENDING = 1 << 4,  /* agentctl's own: several requests (see run_pending) */
};

struct command {
	const char *name;
	const char *op;
	const char *summary; /* one line, for `agentctl --help` */
	const char *doc;     /* what it does and what it prints */
	const struct param *pos;
	const struct param *opt;
	void (*show)(const json_t *reply);
	unsigned flags;
	const char *example;
	const char *fixed; /* JSON object merged into the request first, or NULL */
	const char *ids;   /* -q prints this: "FIELD", or "ARRAY/FIELD" for each row; NULL: nothing */
};

static const struct param no_params[] = {{0}};

static const struct param pos_conv[] = {
	{"CONV", "conversation", K_STR, NULL, NULL, false, "conversation id"},
	{0},
};

static const struct param opt_create[] = {
	{"--id", "conversation", K_STR, "ID", NULL, false,
	 "conversation id: 1-128 of [A-Za-z0-9._:-] (generated when absent)"},
	{"--model", "model", K_SET_STR, "M", NULL, true, "model name from the configuration (`echo` is built in)"},
	{"--system", "system", K_SET_STR, "S", NULL, false, "system prompt"},
	{"--tool", "tools", K_SET_LIST, "T", NULL, false, "offer tool T, by its configured name (repeatable)"},
	{"--param", "params", K_SET_KV, "K=V", NULL, false,
	 "model parameter; V is taken as JSON when it parses (0.2, true, [1]), else as a string (repeatable)"},
	{"--budget", "budget", K_SET_JSON, "JSON", NULL, false,
	 "limits, e.g. '{\"max_tokens\":100000,\"max_cost\":2.5,\"max_turns\":50}': past one the conversation is paused"},
	{"--meta", "metadata", K_META_KV, "K=V", NULL, false,
	 "metadata: string V under key K, for your own bookkeeping and list filters (repeatable)"},
	{0},
};

static const struct param opt_runs[] = {
	{"--limit", "limit", K_UINT, "N", NULL, false, "at most N runs (agentd's default: 100)"},
	{"--before", "before", K_UINT, "ID", NULL, false, "only runs with an id below ID (the `next:` cursor of a previous page)"},
	{0},
};

static const struct param opt_list[] = {
	{"--status", "status", K_STR, "S", NULL, false,
	 "only conversations with status S (active, suspended, idle, ended, paused)"},
	{"--limit", "limit", K_UINT, "N", NULL, false, "at most N conversations (agentd's default: 100)"},
	{"--after", "after", K_STR, "ID", NULL, false, "start after conversation ID (the `next:` cursor of a previous page)"},
	{"--meta", "metadata", K_META_KV, "K=V", NULL, false, "only conversations whose metadata has K=V (repeatable: all must hold)"},
	{"--model", "model", K_STR, "M", NULL, false, "only conversations whose settings.model is M"},
	{"--updated-after", "updated_after", K_UINT, "MS", NULL, false,
	 "only conversations updated after MS (milliseconds since the epoch)"},
	{"--updated-before", "updated_before", K_UINT, "MS", NULL, false,
	 "only conversations updated before MS (milliseconds since the epoch)"},
	{0},
};

static const struct param opt_update[] = {
	{"--model", "model", K_SET_STR, "M", NULL, false, "switch to model M"},
	{"--system", "system", K_SET_STR, "S", NULL, false, "replace the system prompt"},
	{"--tool", "tools", K_SET_LIST, "T", NULL, false, "the tool list becomes the tools given (repeatable)"},
	{"--param", "params", K_SET_KV, "K=V", NULL, false, "model parameter, as for create (repeatable)"},
	{"--budget", "budget", K_SET_JSON, "JSON", NULL, false,
	 "replace the budget (null: the configured default); a larger one resumes a paused conversation"},
	{"--end", "status", K_CONST, NULL, "ended", false, "end the conversation: later sends are refused (conflict)"},
	{"--meta", "metadata", K_META_KV, "K=V", NULL, false, "set metadata key K to V; other keys are kept (repeatable)"},
	{"--unset-meta", "metadata", K_META_DEL, "K", NULL, false, "delete metadata key K (repeatable)"},
	{0},
};

static const struct param pos_send[] = {
	{"CONV", "conversation", K_STR, NULL, NULL, false, "conversation id"},
	{"TEXT", "content", K_CONTENT, NULL, NULL, false, "the message text, or - to read it from stdin"},
	{0},
};

static const struct param opt_send[] = {
	{"--event-id", "event_id", K_STR, "E", NULL, false,
	 "idempotency key: sending it again returns the original seq with duplicate: true"},
	{"--json-content", NULL, K_LOCAL, NULL, NULL, false, "TEXT is a JSON object, sent as the content unchanged"},
	{"--expected-seq", "expected_seq", K_UINT, "N", NULL, false,
	 "only if the conversation's last seq is N (0: its log is empty); else conflict, nothing written"},
	{"--batch", "events", K_BATCH, "FILE", NULL, false,
	 "instead of TEXT: append all events of FILE (- for stdin) or none; FILE is a JSON array of strings or "
	 "{\"content\": ..., \"event_id\": ...} objects"},
	{0},
};

static const struct param opt_events[] = {
	{"--after", "after", K_UINT, "N", NULL, false, "only events with seq > N"},
	{"--before", "before", K_UINT, "N", NULL, false, "only events with seq < N"},
	{"--limit", "limit", K_UINT, "N", NULL, false, "at most N events: the most recent in the range"},
	{"--type", "type", K_STR, "T", NULL, false, "only events of type T (user_msg, assistant_msg, tool_call, ...)"},
	{"--wait", "wait_ms", K_UINT, "MS", NULL, false,
	 "long-poll: wait up to MS milliseconds for an event after --after (extends --timeout)"},
	{0},
};

static const struct param opt_watch[] = {
	{"--after", "after", K_UINT, "N", NULL, false, "start after seq N (default: the current last seq: only new events)"},
	{"--runs", "runs", K_TRUE, NULL, NULL, false, "also print each run as it starts and ends (- run {...})"},
	{0},
};

static const struct param pos_tool_call[] = {
	{"TOOL_CALL_ID", "tool_call_id", K_STR, NULL, NULL, false, "tool call id"},
	{0},
};

static const struct param opt_resolve[] = {
	{"--status", "status", K_ENUM, "STATUS", "resolved|errored", false, "resolved (default) or errored"},
	{"--result", "result", K_JSON, "JSON", NULL, false, "the result: any JSON value (quote strings: '\"yes\"')"},
	{"--by", "by", K_STR, "NAME", NULL, false, "who decides, recorded with your uid in the resolution event"},
	{0},
};

static const struct param opt_decide[] = {
	{"--comment", "comment", K_RES_STR, "TEXT", NULL, false, "a note kept with the decision (result.comment)"},
	{"--by", "by", K_STR, "NAME", NULL, false, "who decides, recorded with your uid in the resolution event"},
	{0},
};

static const struct param opt_tool_calls[] = {
	{"--status", "status", K_STR, "S", NULL, false, "only calls with status S (pending, resolved, errored, expired, cancelled)"},
	{0},
};

static const struct param opt_kill[] = {
	{"--signal", "signal", K_ENUM, "SIG", "KILL|TERM", false, "KILL (default) or TERM"},
	{0},
};

static const struct param pos_fork[] = {
	{"CONV", "conversation", K_STR, NULL, NULL, false, "the conversation to fork (it is not changed)"},
	{"SEQ", "seq", K_UINT, NULL, NULL, false, "the fork's log is the source's events 1..SEQ"},
	{0},
};

static const struct param opt_fork[] = {
	{"--id", "new_conversation", K_STR, "NEW", NULL, false, "the fork's id (generated when absent)"},
	{"--model", "model", K_SET_STR, "M", NULL, false, "the fork's model instead of the source's"},
	{"--system", "system", K_SET_STR, "S", NULL, false, "the fork's system prompt instead of the source's"},
	{"--tool", "tools", K_SET_LIST, "T", NULL, false, "the fork's tool list becomes the tools given (repeatable)"},
	{"--param", "params", K_SET_KV, "K=V", NULL, false, "model parameter, as for create (repeatable)"},
	{"--meta", "metadata", K_META_KV, "K=V", NULL, false,
	 "the fork's metadata is the pairs given instead of the source's (repeatable)"},
	{0},
};

static const struct param pos_backup[] = {
	{"PATH", "path", K_PATH, NULL, NULL, false, "a new or empty directory for the copy (relative: to here)"},
	{0},
};

static const struct param pos_raw[] = {
	{"JSON", NULL, K_RAW, NULL, NULL, false, "one JSON request, or - to read it from stdin"},
	{0},
};

static void show_ping(const json_t *reply);
static void show_create(const json_t *reply);
static void show_fields(const json_t *reply);
static void show_get(const json_t *reply);
static void show_list(const json_t *reply);
static void show_events(const json_t *reply);
static void show_tool_call(const json_t *reply);
static void show_tool_calls(const json_t *reply);
static void show_summary(const json_t *reply);
static void show_audit(const json_t *reply);
static void show_status(const json_t *reply);
static void show_metrics(const json_t *reply);
static void show_nodes(const json_t *reply);
static void show_pending(const json_t *reply);
static void show_runs(const json_t *reply);

static const struct command commands[] = {
	{"ping", "ping", "check that agentd answers", "Check that agentd answers. Prints: pong (agentd VERSION).",
	 no_params, no_params, show_ping, 0, "agentctl ping", NULL, NULL},
	{"create", "create", "create a conversation; prints its id",
	 "Create a conversation and print its id alone on a line, so a script can capture it.", no_params, opt_create,
	 show_create, 0, "agentctl create --id demo --model echo --system 'Be brief.' --param temperature=0.2", NULL, "conversation"},
	{"get", "get", "show a conversation",
	 "Show a conversation as key: value lines (nested objects flattened one level: settings.model, worker.pid):\n"
	 "settings, metadata, status, fsm_state, last_seq, usage, times, and its live worker or null.",
	 pos_conv, no_params, show_get, 0, "agentctl get demo", NULL, NULL},
	{"list", "list", "list conversations (table)",
	 "List conversations as a table: ID STATUS MODEL LAST_SEQ WORKER UPDATED.\n"
	 "When more remain, a last line `next: ID` gives the cursor for --after.",
	 no_params, opt_list, show_list, 0, "agentctl list --status suspended --meta team=red --limit 20", NULL,
	 "conversations/id"},
	{"update", "update", "change a conversation's settings, or end it",
	 "Change a conversation's settings or metadata (agentd merges them into the current ones) or end it.\n"
	 "Prints ok.", pos_conv,
	 opt_update, show_fields, CMD_NEED_OPT, "agentctl update demo --model echo --system 'Answer in French.'", NULL, NULL},
	{"delete", "delete", "delete a conversation and everything it holds",
	 "Delete a conversation: stop its worker and remove every row it has. Deleting a missing one is ok.\n"
	 "Prints `deleted: true`, or `deleted: false` when there was nothing to delete.",
	 pos_conv, no_params, show_fields, 0, "agentctl delete demo", NULL, NULL},
	{"send", "send", "append a user message; prints its seq",
	 "Append a user_msg and print `seq: N` once it is durably committed (with `duplicate: true` when --event-id\n"
	 "was seen before: N is then the original seq). Plain TEXT is stored as {\"text\": TEXT}. With --batch,\n"
	 "append several at once and print `seqs: [N,...]` (and `duplicates:` the indexes of events already sent).\n"
	 "With --expected-seq, a conversation that moved on is refused: exit 1, `conflict` naming its last seq.",
	 pos_send, opt_send, show_fields, 0, "agentctl send demo 'What is the weather in Paris?' --event-id msg-42", NULL, "seq,seqs"},
	{"events", "events", "print a conversation's events",
	 "Print events one per line: SEQ TYPE CONTENT (CONTENT as compact JSON). With --wait, block until an event\n"
	 "after --after exists or MS milliseconds pass (long-poll).",
	 pos_conv, opt_events, show_events, 0, "agentctl events demo --after 10 --wait 30000", NULL, "events/seq"},
	{"watch", "watch", "follow a conversation live",
	 "Follow a conversation live: print each event as it is committed (SEQ TYPE CONTENT) and each model delta\n"
"while a turn streams (- delta {\"text\":...}), and with --runs each run as it starts and ends\n"
	 "(- run {...}), until interrupted (exit 0) or agentd closes (exit 0).\n"
	 "With --json, print the reply line and every streamed line as received.",
	 pos_conv, opt_watch, NULL, CMD_WATCH, "agentctl watch demo --after 0", NULL, NULL},
	{"resolve", "resolve", "settle a pending human tool call",
	 "Settle a pending human tool call and print `seq: N` of its resolution event. A call that is not pending\n"
	 "(already settled, or expired) is refused with `stale`.",
	 pos_tool_call, opt_resolve, show_fields, 0, "agentctl resolve call_abc123 --result '{\"approved\":true}'", NULL, "seq"},
	{"approve", "resolve", "approve a pending human tool call",
	 "Settle a pending human tool call as approved: resolve it with the result {\"approved\": true} (and\n"
	 "\"comment\": TEXT with --comment). Prints `seq: N` of the resolution event; `stale` when it is not pending.",
	 pos_tool_call, opt_decide, show_fields, 0, "agentctl approve call_abc123 --comment 'within budget'",
	 "{\"status\":\"resolved\",\"result\":{\"approved\":true}}", "seq"},
	{"deny", "resolve", "deny a pending human tool call",
	 "Settle a pending human tool call as denied: resolve it with the result {\"approved\": false} (and\n"
	 "\"comment\": TEXT with --comment). Prints `seq: N` of the resolution event; `stale` when it is not pending.",
	 pos_tool_call, opt_decide, show_fields, 0, "agentctl deny call_abc123 --comment 'over the limit'",
	 "{\"status\":\"resolved\",\"result\":{\"approved\":false}}", "seq"},
	{"pending", "list", "list pending approvals across all conversations (table)",
	 "List every pending human tool call of every conversation as a table:\n"
	 "ID CONVERSATION NAME DEADLINE PROMPT ARGS (DEADLINE in UTC; - when it never expires).\n"
	 "agentctl asks agentd for the suspended conversations (list), then for each one's pending calls\n"
	 "(tool_calls); with --json it prints one line {\"ok\":true,\"tool_calls\":[...]} it assembled.",
	 no_params, no_params, show_pending, CMD_PENDING, "agentctl pending",
	 NULL, "tool_calls/id"},
	{"tool-call", "tool_call", "show a tool call",
	 "Show a tool call as key: value lines: conversation, executor, name, status, args, result, times.",
	 pos_tool_call, no_params, show_tool_call, 0, "agentctl tool-call call_abc123", NULL, NULL},
	{"tool-calls", "tool_calls", "list a conversation's tool calls (table)",
	 "List a conversation's tool calls as a table: ID NAME EXECUTOR STATUS INSERTED ARGS.", pos_conv,
	 opt_tool_calls, show_tool_calls, 0, "agentctl tool-calls demo --status pending", NULL, "tool_calls/id"},
	{"summary", "summary", "show the latest summary",
	 "Show the conversation's latest summary (from_seq, to_seq, version, content), or `no summary`.", pos_conv,
	 no_params, show_summary, 0, "agentctl summary demo", NULL, NULL},
	{"compact", "compact", "compact a conversation now",
	 "Force a compaction now: the model summarizes a prefix of the log. Prints the new summary.\n"
	 "It waits for the model without a time limit unless --timeout is given.",
	 pos_conv, no_params, show_summary, CMD_SLOW, "agentctl compact demo", NULL, NULL},
	{"audit", "audit", "list recorded model calls (table)",
	 "List the model calls recorded for a conversation (TURN TASK MODEL LATENCY_MS SUMMARY_V USAGE INSERTED).\n"
	 "Empty unless audit is on in agentd's configuration; --json shows the rendered contexts.",
	 pos_conv, no_params, show_audit, 0, "agentctl audit demo", NULL, NULL},
	{"kill", "kill", "signal a conversation's worker",
	 "Send a signal to the conversation's worker process (for operators and tests). Prints `pid: N`, or\n"
	 "`pid: null` when no worker was running.",
	 pos_conv, opt_kill, show_fields, 0, "agentctl kill demo --signal TERM", NULL, NULL},
	{"stop", "stop", "hibernate a conversation's worker",
	 "Hibernate a conversation: its worker persists its state and exits; the next event revives it.\n"
	 "Prints `stopping: true`, or `stopping: false` when no worker was running.",
	 pos_conv, no_params, show_fields, 0, "agentctl stop demo", NULL, NULL},
	{"cancel", "cancel", "cancel a conversation's running turn for good",
	 "Cancel the conversation's running (or owed) turn for good: a turn_cancelled event is committed, its model\n"
	 "or tool is killed, its pending tool calls are settled cancelled, and it waits for the next user message.\n"
	 "Prints `cancelled: true`, the event's seq and the calls cancelled; `cancelled: false` and why when idle.",
	 pos_conv, no_params, show_fields, 0, "agentctl cancel demo", NULL, NULL},
	{"runs", "runs", "list a conversation's runs, newest first (table)",
	 "List the conversation's runs (one per model turn attempt), newest first, as a table:\n"
	 "ID STATUS ATTEMPT MODEL FROM TO FIRST LAST STARTED ENDED (FROM/TO: the seqs it answered, after FROM up to TO;\n"
	 "FIRST/LAST: the seqs it appended). When more remain, a last line `next: ID` gives the cursor for --before.",
	 pos_conv, opt_runs, show_runs, 0, "agentctl runs demo --limit 10", NULL, "runs/id"},
	{"resume", "resume", "start a conversation's worker now",
	 "Start the conversation's worker now, without a new event: after `stop`, or after the crash-loop limit gave\n"
	 "up on it (the turn that ended in that error runs again). Prints `resumed: true`, or `resumed: false` and\n"
	 "why when nothing is owed or a worker already runs.",
	 pos_conv, no_params, show_fields, 0, "agentctl resume demo", NULL, NULL},
	{"status", "status", "show agentd's status",
	 "Show agentd's version, uptime and store (key: value lines), then its live workers as a table:\n"
	 "CONVERSATION PID STATE SINCE_MS.",
	 no_params, no_params, show_status, 0, "agentctl status", NULL, "workers/conversation"},
	{"metrics", "metrics", "print agentd's metrics",
	 "Print agentd's metrics in the Prometheus text exposition format, as agentd wrote them.", no_params,
	 no_params, show_metrics, 0, "agentctl metrics | grep agentd_ops_total", NULL, NULL},
	{"nodes", "nodes", "list the nodes sharing the store (table)",
	 "List the agentd nodes sharing this one's store, as their heartbeats left them: a first line `node: ID`\n"
	 "(the node answering), then NODE LIVE LEASES BEAT_AT EXPIRES_AT STARTED_AT. On an LMDB store there is one.",
	 no_params, no_params, show_nodes, 0, "agentctl nodes", NULL, "nodes/node"},
	{"shutdown", "shutdown", "stop agentd",
	 "Stop agentd: its workers hibernate, then it exits. Prints ok once agentd has accepted the request.\n"
	 "It waits without a time limit unless --timeout is given.",
	 no_params, no_params, show_fields, CMD_SLOW, "agentctl shutdown", NULL, NULL},
	{"fork", "fork", "make a new conversation from a prefix of another; prints its id",
	 "Make a new conversation whose log is CONV's events 1..SEQ, with CONV's settings and metadata unless\n"
	 "given; CONV is not changed. Prints the fork's id alone on a line (--json: the whole reply, with\n"
	 "copied, cancelled, summary_to and status).",
	 pos_fork, opt_fork, show_create, 0, "agentctl fork demo 12 --id demo-b --model echo", NULL, "conversation"},
	{"backup", "backup", "copy the store while agentd serves",
	 "Write a compacted, consistent copy of the store into PATH (a new or empty directory) while agentd\n"
	 "keeps serving. Prints path, bytes and ms once the copy is complete and on disk. One backup runs at a\n"
	 "time (a second is refused: busy); a PostgreSQL store is refused (unsupported: use pg_dump).\n"
	 "It waits without a time limit unless --timeout is given.",
	 pos_backup, no_params, show_fields, CMD_SLOW, "agentctl backup /var/backups/agentd/2026-11-26", NULL, "path"},
	{"raw", NULL, "send any request; print the reply line as received",
	 "Send one JSON request as is and print the reply line exactly as received (exit 1 if it is an error).\n"
	 "The JSON is checked locally; a request spread over several lines is sent as one line.",
	 pos_raw, no_params, NULL, CMD_RAW, "agentctl raw '{\"op\":\"events\",\"conversation\":\"demo\",\"limit\":1}'", NULL, NULL},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* ------------------------------------------------------------------------ */
/* Messages and small helpers                                               */

struct options {
	const char *socket;
	bool json;
	bool quiet;         /* -q: ids only (struct command's ids) */
	int64_t timeout_ms; /* 0: wait for ever */
	bool timeout_set;   /* given on the command line */
};

static const char *cur_cmd; /* the command being run, for messages */
static volatile sig_atomic_t interrupted;

/* What a run holds on the heap. agentctl exits from deep inside (a usage error,
 * a lost connection, the end of a watch); release_held() runs at exit and frees
 * whatever is recorded here, so leak checkers (the test suite's ASan pass runs
 * agentctl) stay quiet without each of those paths unwinding by hand. */
static struct {
	json_t *req;      /* the request being built */
	const char **pos; /* its positional arguments */
	char *input;      /* stdin, read for a TEXT or JSON of "-" */
	char *key;        /* a --param key being added */
	char *request;    /* the request line */
	json_t *reply;
	json_t *page;     /* pending: the list reply being walked */
	char *after;      /* pending: the next page's cursor */
} held;

__attribute__((format(printf, 1, 0))) static void vmsg(const char *fmt, va_list ap)
{
	fputs("agentctl: ", stderr);
	if (cur_cmd)
		fprintf(stderr, "%s: ", cur_cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

/* A usage error: exit 2 with a pointer to the help. Exiting from where the
 * error is found keeps the parsers simple; release_held() frees the rest. */
__attribute__((format(printf, 1, 2))) static _Noreturn void usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fprintf(stderr, "(see 'agentctl %s%s--help')\n", cur_cmd ? cur_cmd : "", cur_cmd ? " " : "");
	exit(EXIT_USAGE);
}

/* A connection or system failure: exit 2. Not the command's fault, so the
 * message does not name it ("agentctl: cannot connect to ..."). */
__attribute__((format(printf, 1, 2))) static _Noreturn void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cur_cmd = NULL;
	vmsg(fmt, ap);
	va_end(ap);
	exit(EXIT_USAGE);
}

__attribute__((format(printf, 1, 2))) static void warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

static void *must(void *p)
{
	if (!p)
		fail("out of memory");
	return p;
}

static char *xstrdup(const char *s)
{
	return must(strdup(s));
}

/* json_object_set_new that cannot fail quietly: a request sent short of a
 * field (out of memory) would be answered for something else. */
static void put(json_t *o, const char *key, json_t *v)
{
	if (json_object_set_new(o, key, v))
		fail("out of memory");
}

/* Read all of stdin (for TEXT or JSON given as "-"). */
static char *read_stdin(size_t *lenp)
{
	size_t len = 0, cap = 4096;
	char *buf = held.input = must(malloc(cap));
	for (;;) {
		if (cap - len < 2)
			buf = held.input = must(realloc(buf, cap *= 2));
		size_t n = fread(buf + len, 1, cap - len - 1, stdin);
		len += n;
		if (n == 0) {
			if (ferror(stdin))
				fail("cannot read stdin: %s", strerror(errno));
			break;
		}
	}
	buf[len] = '\0';
	*lenp = len;
	return buf;
}

/* ------------------------------------------------------------------------ */
/* Building the request                                                     */

/* A string field; jansson refuses invalid UTF-8, which we report as the
 * argument's fault rather than send something agentd would reject anyway. */
static json_t *arg_string(const struct param *p, const char *v, size_t len)
{
	json_t *s = json_stringn(v, len);
	if (!s)
		usage_error("%s: not valid UTF-8", p->name);
	return s;
}

static json_int_t parse_uint(const struct param *p, const char *v)
{
	const char *c = v;
	json_int_t n = 0;
	if (!*c)
		usage_error("%s: expected a non-negative integer, got ''", p->name);
	for (; *c; c++) {
		if (*c < '0' || *c > '9')
			usage_error("%s: expected a non-negative integer, got '%s'", p->name, v);
		if (n > (INT64_MAX - (*c - '0')) / 10)
			usage_error("%s: %s is too large (the limit is %lld)", p->name, v, (long long)INT64_MAX);
		n = n * 10 + (*c - '0');
	}
	return n;
}

static json_t *parse_json_arg(const struct param *p, const char *v, size_t flags)
{
	json_error_t e;
	json_t *j = json_loads(v, JSON_DECODE_ANY | flags, &e);
	if (!j)
		usage_error("%s: invalid JSON: %s (line %d, column %d)", p->name, e.text, e.line, e.column);
	return j;
}

static const char *pick_choice(const struct param *p, const char *v)
{
	static char buf[64];
	/* Also take a signal name with its SIG prefix (SIGTERM). */
	for (int pass = 0; pass < 2; pass++) {
		const char *want = v;
		if (pass == 1) {
			if (strncasecmp(v, "SIG", 3) != 0)
				break;
			want = v + 3;
		}
		const char *c = p->choices;
		while (*c) {
			size_t n = strcspn(c, "|");
			if (strlen(want) == n && strncasecmp(want, c, n) == 0 && n < sizeof buf) {
				memcpy(buf, c, n);
				buf[n] = '\0';
				return buf;
			}
			c += n + (c[n] == '|');
		}
	}
	usage_error("%s: expected one of %s, got '%s'", p->name, p->choices, v);
}

static json_t *child(json_t *parent, const char *key, json_t *(*make)(void))
{
	json_t *v = json_object_get(parent, key);
	if (!v) {
		v = must(make());
		put(parent, key, v);
	}
	return v;
}

static json_t *settings_of(json_t *req)
{
	return child(req, "settings", json_object);
}

/* --param K=V: V is JSON when it parses, so numbers and booleans keep their
 * type; anything else ("gpt-4o", "hello world") is a string. */
static void add_kv(const struct param *p, const char *v, json_t *obj)
{
	const char *eq = strchr(v, '=');
	if (!eq || eq == v)
		usage_error("%s: expected KEY=VALUE, got '%s'", p->name, v);
	char *key = held.key = must(strndup(v, (size_t)(eq - v)));
	json_t *val = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
	if (!val)
		val = arg_string(p, eq + 1, strlen(eq + 1));
	if (json_object_set_new(obj, key, val) < 0)
		usage_error("%s: key '%s' is not valid UTF-8", p->name, key);
	free(key);
	held.key = NULL;
}

static void add_content(const struct param *p, const char *v, json_t *req, bool json_content)
{
	size_t len = strlen(v);
	char *in = NULL;
	if (strcmp(v, "-") == 0) {
		v = in = read_stdin(&len);
		/* `echo hi | agentctl send c -` means "hi", not "hi\n". */
		if (!json_content && len > 0 && in[len - 1] == '\n')
			in[--len] = '\0';
	}
	json_t *content;
	if (json_content) {
		content = parse_json_arg(p, v, 0);
		if (!json_is_object(content)) {
			json_decref(content);
			usage_error("%s: --json-content needs a JSON object", p->name);
		}
	} else {
		content = arg_string(p, v, len);
	}
	put(req, p->field, content);
	free(in);
	held.input = NULL;
}

/* send --batch FILE: a JSON array whose strings become {"content": S}; the
 * rest is sent as it is, for agentd to check (it names the event at fault). */
static void add_batch(const struct param *p, const char *v, json_t *req)
{
	size_t len = 0;
	json_error_t e;
	json_t *a;
	if (strcmp(v, "-") == 0) {
		char *in = read_stdin(&len);
		a = json_loadb(in, len, 0, &e);
		free(in);
		held.input = NULL;
	} else {
		a = json_load_file(v, 0, &e);
	}
	if (!a)
		usage_error("%s %s: invalid JSON: %s (line %d, column %d)", p->name, v, e.text, e.line, e.column);
	if (!json_is_array(a)) {
		json_decref(a);
		usage_error("%s %s: expected a JSON array of events (strings or {\"content\": ...} objects)", p->name, v);
	}
	size_t i;
	json_t *ev;
	json_array_foreach(a, i, ev)
		if (json_is_string(ev))
			json_array_set_new(a, i, must(json_pack("{sO}", "content", ev)));
	json_object_set_new(req, p->field, a);
}

/* raw: check the line is JSON and make it one line. A raw CR or LF can only be
 * whitespace between tokens in valid JSON (inside strings they must be
 * escaped), so turning them into spaces keeps the request the same. Integers
 * past 64 bits are accepted: raw exists to send what agentctl would not. */
static char *raw_line(const struct param *p, const char *v)
{
	size_t len = strlen(v);
	char *line = held.input = strcmp(v, "-") == 0 ? read_stdin(&len) : xstrdup(v);
	json_error_t e;
	json_t *j = json_loads(line, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &e);
	/* A number even a double cannot hold stops the check there: pass it on
	 * (agentd answers it), as the integers past 64 bits. */
	if (!j && json_error_code(&e) != json_error_numeric_overflow)
		usage_error("%s: invalid JSON: %s (line %d, column %d)", p->name, e.text, e.line, e.column);
	json_decref(j);
	for (size_t i = 0; i < len; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	held.input = NULL;
	return line;
}

static void apply(const struct param *p, const char *v, json_t *req)
{
	switch (p->kind) {
	case K_STR:
		put(req, p->field, arg_string(p, v, strlen(v)));
		break;
	case K_UINT:
		put(req, p->field, must(json_integer(parse_uint(p, v))));
		break;
	case K_JSON:
		put(req, p->field, parse_json_arg(p, v, 0));
		break;
	case K_ENUM:
		put(req, p->field, must(json_string(pick_choice(p, v))));
		break;
	case K_CONST:
		put(req, p->field, must(json_string(p->choices)));
		break;
	case K_TRUE:
		json_object_set_new(req, p->field, json_true());
		break;
	case K_SET_STR:
		put(settings_of(req), p->field, arg_string(p, v, strlen(v)));
		break;
	case K_SET_LIST:
		if (json_array_append_new(child(settings_of(req), p->field, json_array), arg_string(p, v, strlen(v))))
			fail("out of memory");
		break;
	case K_SET_KV:
		add_kv(p, v, child(settings_of(req), p->field, json_object));
		break;
	case K_RES_STR:
		put(child(req, "result", json_object), p->field, arg_string(p, v, strlen(v)));
		break;
	case K_SET_JSON:
		json_object_set_new(settings_of(req), p->field, parse_json_arg(p, v, 0));
		break;
	case K_BATCH:
		add_batch(p, v, req);
		break;
	case K_META_KV: {
		const char *eq = strchr(v, '=');
		if (!eq || eq == v)
			usage_error("%s: expected KEY=VALUE, got '%s'", p->name, v);
		char *key = held.key = must(strndup(v, (size_t)(eq - v)));
		if (json_object_set_new(child(req, p->field, json_object), key, arg_string(p, eq + 1, strlen(eq + 1))) < 0)
			usage_error("%s: key '%s' is not valid UTF-8", p->name, key);
		free(key);
		held.key = NULL;
		break;
	}
	case K_META_DEL:
		if (!*v || json_object_set_new(child(req, p->field, json_object), v, json_null()) < 0)
			usage_error("%s: expected a key (non-empty UTF-8), got '%s'", p->name, v);
		break;
	case K_PATH: {
		/* agentd resolves nothing against its own working directory. */
		char cwd[4096];
		if (v[0] == '/' || !getcwd(cwd, sizeof cwd)) {
			json_object_set_new(req, p->field, arg_string(p, v, strlen(v)));
			break;
		}
		size_t n = strlen(cwd) + strlen(v) + 2;
		char *abs = held.key = must(malloc(n));
		snprintf(abs, n, "%s/%s", cwd, v);
		json_object_set_new(req, p->field, arg_string(p, abs, strlen(abs)));
		free(abs);
		held.key = NULL;
		break;
	}
	case K_CONTENT:
	case K_RAW:
	case K_LOCAL:
		break; /* handled by build_request */
	}
}

/* Global options may come before the command or among its arguments. Returns
 * true when argv[*i] was one (and advances *i past it and its value). */
static bool global_option(int argc, char **argv, int *i, struct options *o)
{
	const char *a = argv[*i];
	const char *val = NULL;
	const char *name = a;
	size_t nlen = strcspn(a, "=");

	if (strcmp(a, "--json") == 0) {
		o->json = true;
		(*i)++;
		return true;
	}
	if (strncmp(a, "--json=", 7) == 0)
		usage_error("option --json takes no value");
	if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
		o->quiet = true;
		(*i)++;
		return true;
	}
	if (strcmp(a, "-s") == 0 || strcmp(a, "--socket") == 0 || strcmp(a, "--timeout") == 0) {
		if (*i + 1 >= argc)
			usage_error("option %s needs an argument", a);
		val = argv[*i + 1];
		*i += 2;
	} else if ((nlen == 8 && strncmp(a, "--socket", 8) == 0) || (nlen == 9 && strncmp(a, "--timeout", 9) == 0)) {
		val = a + nlen + 1;
		name = a[2] == 's' ? "--socket" : "--timeout";
		(*i)++;
	} else if (strncmp(a, "-s", 2) == 0 && a[2] != '\0' && a[2] != '-') {
		val = a + 2; /* -sPATH */
		name = "-s";
		(*i)++;
	} else {
		return false;
	}

	if (strncmp(name, "--timeout", 9) == 0) {
		char *end;
		errno = 0;
		double secs = strtod(val, &end);
		if (!*val || *end || errno || !isfinite(secs) || secs < 0 || secs > 1e9)
			usage_error("--timeout: expected a number of seconds (0: no limit), got '%s'", val);
		/* Round up by hand: ceil() would pull in libm for one call. */
		o->timeout_ms = (int64_t)(secs * 1000.0);
		if ((double)o->timeout_ms < secs * 1000.0)
			o->timeout_ms++;
		o->timeout_set = true;
	} else {
		if (!*val)
			usage_error("%s: the socket path is empty", name);
		o->socket = val;
	}
	return true;
}

static const struct param *find_option(const struct param *opts, const char *name, size_t len)
{
	for (const struct param *p = opts; p->name; p++)
		if (strlen(p->name) == len && strncmp(p->name, name, len) == 0)
			return p;
	return NULL;
}

static void print_command_help(const struct command *cmd, FILE *f);
static void check_stdout(int code_if_gone);

/* What a command line held besides the options already applied to the
 * request. */
struct cmdline {
	const char **pos;  /* positional arguments, in order (held.pos) */
	int npos;
	int nopts;         /* the command's own options given (not the global ones) */
	bool json_content; /* --json-content: TEXT is JSON */
};

/* The request before its arguments: id and op, and for approve and deny
 * what the verb means, before the options add to it. */
static json_t *request_start(const struct command *cmd)
{
	json_t *req = held.req = must(json_object());
	if (cmd->op) {
		put(req, "id", must(json_integer(1)));
		put(req, "op", must(json_string(cmd->op)));
	}
	if (cmd->fixed) {
		json_t *f = must(json_loads(cmd->fixed, 0, NULL));
		json_object_update(req, f);
		json_decref(f);
	}
	return req;
}

/* -h/--help and --version answer at once wherever they stand among a
 * command's arguments: the rest need not be valid. */
static void exit_if_info(const struct command *cmd, const char *a)
{
	if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
		print_command_help(cmd, stdout);
		check_stdout(EXIT_OK);
		exit(EXIT_OK);
	}
	if (strcmp(a, "--version") == 0) {
		printf("agentctl %s\n", AGENTD_VERSION);
		check_stdout(EXIT_OK);
		exit(EXIT_OK);
	}
}

/* Option p's value: "--opt=V", or "--opt V" (then *i moves onto V); NULL
 * for a flag. */
static const char *option_value(const struct param *p, const char *a, size_t nlen, int argc, char **argv, int *i)
{
	if (p->meta) {
		if (a[nlen] == '=')
			return a + nlen + 1;
		if (*i + 1 < argc)
			return argv[++*i];
		usage_error("option %s needs an argument (%s)", p->name, p->meta);
	}
	if (a[nlen] == '=')
		usage_error("option %s takes no argument", p->name);
	return NULL;
}

/* Sort argv: positionals into cl, global options into o, the command's
 * options applied to req as they come. */
static void parse_command_line(const struct command *cmd, int argc, char **argv, struct options *o, json_t *req,
			       struct cmdline *cl)
{
	bool only_pos = false;
	for (int i = 0; i < argc;) {
		const char *a = argv[i];
		if (only_pos || a[0] != '-' || a[1] == '\0') {
			cl->pos[cl->npos++] = a;
			i++;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_pos = true;
			i++;
			continue;
		}
		exit_if_info(cmd, a);
		if (global_option(argc, argv, &i, o))
			continue;
		size_t nlen = strcspn(a, "=");
		const struct param *p = find_option(cmd->opt, a, nlen);
		if (!p)
			usage_error("unknown option '%.*s'%s", (int)nlen, a,
				    a[1] != '-' ? " (a value starting with '-' goes after --)" : "");
		const char *val = option_value(p, a, nlen, argc, argv, &i);
		i++;
		cl->nopts++;
		if (p->kind == K_LOCAL)
			cl->json_content = true;
		else
			apply(p, val, req);
	}
}

/* Usage errors for arguments missing, extra or clashing, before the
 * positionals are applied. */
static void check_command_line(const struct command *cmd, json_t *req, const struct cmdline *cl)
{
	int want = 0;
	const struct param *p;
	for (p = cmd->pos; p->name; p++)
		want++;
	if (json_object_get(req, "events")) { /* send --batch: it replaces TEXT */
		if (cl->npos == want)
			usage_error("--batch replaces TEXT: give one or the other");
		if (cl->json_content || json_object_get(req, "event_id"))
			usage_error("--batch: each event carries its own content and event_id (no --json-content, --event-id)");
		want--;
	}
	if (cl->npos < want)
		usage_error("missing %s", cmd->pos[cl->npos].name);
	if (cl->npos > want)
		usage_error("unexpected argument '%s'", cl->pos[want]);
	for (p = cmd->opt; p->name; p++) {
		bool in_settings = p->kind == K_SET_STR || p->kind == K_SET_LIST || p->kind == K_SET_KV;
		if (p->required && !json_object_get(in_settings ? json_object_get(req, "settings") : req, p->field))
			usage_error("%s %s is required", p->name, p->meta);
	}
	if ((cmd->flags & CMD_NEED_OPT) && cl->nopts == 0)
		usage_error("nothing to do: give at least one option");
}

/* The positionals into req, then the line to send: raw's is the user's
 * own line, every other command's is req. */
static char *request_line(const struct command *cmd, json_t *req, const struct cmdline *cl)
{
	char *line = NULL;
	for (int k = 0; k < cl->npos; k++) {
		const struct param *p = &cmd->pos[k];
		if (p->kind == K_RAW)
			line = raw_line(p, cl->pos[k]);
		else if (p->kind == K_CONTENT)
			add_content(p, cl->pos[k], req, cl->json_content);
		else
			apply(p, cl->pos[k], req);
	}
	return line ? line : must(jsonmp_dumps(req, SEND_FLAGS, 0, NULL));
}

/* Parse a command's arguments into its request: a JSON object, or for raw the
 * user's line. Exits on usage errors and on --help. */
static char *build_request(const struct command *cmd, int argc, char **argv, struct options *o,
			   int64_t *extra_ms)
{
	struct cmdline cl = { .pos = held.pos = must(calloc((size_t)argc + 1, sizeof *cl.pos)) };
	json_t *req = request_start(cmd);
	parse_command_line(cmd, argc, argv, o, req, &cl);
	check_command_line(cmd, req, &cl);
	char *line = request_line(cmd, req, &cl);

	/* A long-poll legitimately takes up to wait_ms: the reply deadline grows by it. */
	json_t *w = json_object_get(req, "wait_ms");
	*extra_ms = w ? (int64_t)json_integer_value(w) : 0;
	json_decref(req);
	free(cl.pos);
	held.req = NULL;
	held.pos = NULL;
	return line;
}

/* ------------------------------------------------------------------------ */
/* Help                                                                     */

static void print_main_help(FILE *f)
{
	fputs("usage: agentctl [-s SOCKET] [--json] [-q] [--timeout SECS] COMMAND [ARGS...]\n"
	      "\n"
	      "Drive agentd through its control socket: one request per command.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
		"\n"
		"Options (before the command or among its arguments):\n"
		"  -s, --socket SOCKET  agentd's control socket\n"
		"  --json               print the raw JSON reply line instead of readable output\n"
		"  -q, --quiet          print only ids, one a line, for scripts (list: conversations;\n"
		"                       pending, tool-calls: tool calls; create: the id; send, resolve,\n"
		"                       approve, deny: the seq; other commands: nothing)\n"
		"  --timeout SECS       give up waiting for the reply after SECS seconds (default %d; 0: no\n"
		"                       limit; compact, backup, shutdown: no limit unless given)\n"
		"  -h, --help           this help; 'agentctl COMMAND --help' describes a command\n"
		"  --version            print agentctl's version\n"
		"\n"
		"Socket: -s SOCKET, else $AGENTD_SOCKET, else %s if it exists, else\n"
		"%s (the installed service's).\n"
		"Exit status: 0 ok; 1 agentd replied with an error (\"agentctl: CODE: message\" on stderr);\n"
		"2 usage error or no connection.\n",
		DEFAULT_TIMEOUT_MS / 1000, DEFAULT_SOCKET, AGENTD_RUN_SOCKET);
}

static void print_params(FILE *f, const char *title, const struct param *ps)
{
	if (!ps->name)
		return;
	fprintf(f, "\n%s:\n", title);
	for (const struct param *p = ps; p->name; p++) {
		char left[64];
		snprintf(left, sizeof left, "%s%s%s", p->name, p->meta ? " " : "", p->meta ? p->meta : "");
		fprintf(f, "  %-18s %s\n", left, p->help);
	}
}

static void print_command_help(const struct command *cmd, FILE *f)
{
	const struct param *p;
	fprintf(f, "usage: agentctl [-s SOCKET] [--json] [-q] [--timeout SECS] %s", cmd->name);
	for (p = cmd->pos; p->name; p++)
		fprintf(f, " %s", p->name);
	for (p = cmd->opt; p->name; p++) {
		const char *more = (p->kind == K_SET_LIST || p->kind == K_SET_KV || p->kind == K_META_KV ||
				    p->kind == K_META_DEL) ? "..." : "";
		if (p->required)
			fprintf(f, " %s %s", p->name, p->meta);
		else
			fprintf(f, " [%s%s%s]%s", p->name, p->meta ? " " : "", p->meta ? p->meta : "", more);
	}
	fprintf(f, "\n\n%s\n", cmd->doc);
	print_params(f, "Arguments", cmd->pos);
	print_params(f, "Options", cmd->opt);
	if (cmd->flags & CMD_PENDING)
		fprintf(f, "\nSends {\"op\":\"list\",\"status\":\"suspended\"} and {\"op\":\"tool_calls\",\"status\":\"pending\"}:\n"
			   "see docs/protocol.md.\n");
	else if (cmd->op)
		fprintf(f, "\nSends {\"op\":\"%s\", ...}: see docs/protocol.md.\n", cmd->op);
	fprintf(f, "\nExample:\n  %s\n", cmd->example);
}

/* ------------------------------------------------------------------------ */
/* The connection                                                           */

static struct conn {
	ctl_conn *c;      /* client/ctl.h */
	const char *path;
	int64_t budget;   /* ms the deadline allowed, for the message */
} conn;                   /* file scope: see `held` */

/* ------------------------------------------------------------------------ */
/* Readable output                                                          */

/* stdout failing is not agentd's fault but the user must know: exit 2. A
 * reader that went away (agentctl watch c | head) is not an error. */
static void check_stdout(int code_if_gone)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return;
	if (errno == EPIPE)
		exit(code_if_gone);
	fail("cannot write to stdout: %s", strerror(errno));
}

static char *dump(const json_t *v)
{
	return must(jsonmp_dumps(v, SHOW_FLAGS, 0, NULL));
}

/* A string shows as itself unless it would not read as one token on one line
 * (empty, or holding control characters): then as a JSON string. */
static bool plain_string(const json_t *v)
{
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (n == 0 || strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* Times in the store are milliseconds since the epoch: show them in UTC. */
static bool format_time(const json_t *v, char *buf, size_t n)
{
	if (!json_is_integer(v))
		return false;
	json_int_t ms = json_integer_value(v);
	if (ms < 100000000000LL || ms > 32503680000000LL) /* 1973..3000: not a time otherwise */
		return false;
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	if (!gmtime_r(&secs, &tm))
		return false;
	size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
	if (k == 0)
		return false;
	snprintf(buf + k, n - k, ".%03dZ", (int)(ms % 1000));
	return true;
}

static bool is_time_key(const char *key)
{
	size_t n = strlen(key);
	return (n > 3 && strcmp(key + n - 3, "_at") == 0) || strcmp(key, "deadline") == 0;
}

/* How a value reads in a table cell or after "key: ". */
static char *text_of(const json_t *v, const char *null_text)
{
	if (!v || json_is_null(v))
		return xstrdup(null_text);
	if (json_is_string(v) && plain_string(v))
		return xstrdup(json_string_value(v));
	return dump(v);
}

/* Display width of UTF-8 text: code points, close enough for aligning. */
static size_t width_of(const char *s)
{
	size_t w = 0;
	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

struct kvlist {
	char **key, **val;
	size_t n, cap;
};

static void kv_add(struct kvlist *l, const char *prefix, const char *key, char *val)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->key = must(realloc(l->key, l->cap * sizeof *l->key));
		l->val = must(realloc(l->val, l->cap * sizeof *l->val));
	}
	size_t n = (prefix ? strlen(prefix) + 1 : 0) + strlen(key) + 1;
	l->key[l->n] = must(malloc(n));
	snprintf(l->key[l->n], n, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", key);
	l->val[l->n++] = val;
}

static void kv_add_json(struct kvlist *l, const char *prefix, const char *key, const json_t *v)
{
	char *text = text_of(v, "null");
	char when[64];
	if (is_time_key(key) && format_time(v, when, sizeof when)) {
		size_t n = strlen(text) + strlen(when) + 4;
		char *both = must(malloc(n));
		snprintf(both, n, "%s (%s)", text, when);
		free(text);
		text = both;
	}
	kv_add(l, prefix, key, text);
}

/* Collect an object's members; objects one level down are flattened
 * (settings.model), deeper ones shown as compact JSON. `envelope` skips the
 * reply's own id and ok. */
static void kv_collect(struct kvlist *l, const json_t *obj, const char *prefix, bool envelope, const char *skip)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)obj, k, v) {
		if (envelope && (strcmp(k, "id") == 0 || strcmp(k, "ok") == 0))
			continue;
		if (skip && strcmp(k, skip) == 0)
			continue;
		if (!prefix && json_is_object(v) && json_object_size(v) > 0)
			kv_collect(l, v, k, false, NULL);
		else
			kv_add_json(l, prefix, k, v);
	}
}

static void kv_print(struct kvlist *l)
{
	size_t w = 0;
	for (size_t i = 0; i < l->n; i++)
		if (strlen(l->key[i]) > w)
			w = strlen(l->key[i]);
	for (size_t i = 0; i < l->n; i++) {
		printf("%s:%*s %s\n", l->key[i], (int)(w - strlen(l->key[i])), "", l->val[i]);
		free(l->key[i]);
		free(l->val[i]);
	}
	free(l->key);
	free(l->val);
	memset(l, 0, sizeof *l);
}

static void show_object(const json_t *obj)
{
	struct kvlist l = {0};
	kv_collect(&l, obj, NULL, false, NULL);
	kv_print(&l);
}

/* Any reply: its fields as key: value, or "ok" when it has none. */
static void show_fields(const json_t *reply)
{
	struct kvlist l = {0};
	kv_collect(&l, reply, NULL, true, NULL);
	if (l.n == 0)
		puts("ok");
	kv_print(&l);
}

struct column {
	const char *header;
	const char *path; /* dotted path into the row; "a|b": the first present */
	bool time;
};

static const json_t *lookup(const json_t *row, const char *path)
{
	char buf[128];
	const char *alt = path;
	while (*alt) {
		size_t n = strcspn(alt, "|");
		if (n >= sizeof buf)
			return NULL;
		memcpy(buf, alt, n);
		buf[n] = '\0';
		const json_t *v = row;
		for (char *save = NULL, *part = strtok_r(buf, ".", &save); part && v;
		     part = strtok_r(NULL, ".", &save))
			v = json_is_object(v) ? json_object_get(v, part) : NULL;
		if (v)
			return v;
		alt += n + (alt[n] == '|');
	}
	return NULL;
}

/* A table: a header row, columns padded to their widest cell, two spaces
 * apart, the last column unpadded. */
static void show_table(const json_t *rows, const struct column *cols, size_t ncols)
{
	size_t nrows = json_array_size(rows) + 1;
	char **cell = must(calloc(nrows * ncols, sizeof *cell));
	size_t *w = must(calloc(ncols, sizeof *w));

	for (size_t c = 0; c < ncols; c++)
		cell[c] = xstrdup(cols[c].header);
	for (size_t r = 1; r < nrows; r++) {
		const json_t *row = json_array_get(rows, r - 1);
		for (size_t c = 0; c < ncols; c++) {
			const json_t *v = json_is_object(row) ? lookup(row, cols[c].path) : NULL;
			char when[64];
			if (cols[c].time && format_time(v, when, sizeof when))
				cell[r * ncols + c] = xstrdup(when);
			else
				cell[r * ncols + c] = text_of(v, "-");
		}
	}
	for (size_t i = 0; i < nrows * ncols; i++)
		if (width_of(cell[i]) > w[i % ncols])
			w[i % ncols] = width_of(cell[i]);
	for (size_t r = 0; r < nrows; r++) {
		for (size_t c = 0; c < ncols; c++) {
			const char *s = cell[r * ncols + c];
			if (c + 1 < ncols)
				printf("%s%*s  ", s, (int)(w[c] - width_of(s)), "");
			else
				printf("%s\n", s);
		}
	}
	for (size_t i = 0; i < nrows * ncols; i++)
		free(cell[i]);
	free(cell);
	free(w);
}

#define TABLE(rows, cols) show_table(rows, cols, sizeof cols / sizeof cols[0])

static void show_ping(const json_t *reply)
{
	const char *v = json_string_value(json_object_get(reply, "version"));
	printf("pong (agentd %s)\n", v ? v : "?");
}

static void show_create(const json_t *reply)
{
	const json_t *c = json_object_get(reply, "conversation");
	if (json_is_object(c)) /* tolerate a server that returns the record */
		c = json_object_get(c, "id");
	if (json_is_string(c))
		printf("%s\n", json_string_value(c));
	else
		show_fields(reply);
}

static void show_member(const json_t *reply, const char *key)
{
	const json_t *v = json_object_get(reply, key);
	if (json_is_object(v))
		show_object(v);
	else
		show_fields(reply);
}

static void show_get(const json_t *reply)
{
	show_member(reply, "conversation");
}

static void show_tool_call(const json_t *reply)
{
	show_member(reply, "tool_call");
}

static void show_summary(const json_t *reply)
{
	const json_t *v = json_object_get(reply, "summary");
	if (json_is_null(v))
		puts("no summary");
	else
		show_member(reply, "summary");
}

static void show_list(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id", false},	       {"STATUS", "status", false},  {"MODEL", "settings.model", false},
		{"LAST_SEQ", "last_seq", false}, {"WORKER", "worker.pid", false}, {"UPDATED", "updated_at", true},
	};
	const json_t *rows = json_object_get(reply, "conversations");
	if (!json_is_array(rows)) {
		show_fields(reply);
		return;
	}
	TABLE(rows, cols);
	const json_t *next = json_object_get(reply, "next");
	if (next && !json_is_null(next)) {
		char *t = text_of(next, "null");
		printf("next: %s\n", t);
		free(t);
	}
}

static void show_tool_calls(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id|tool_call_id", false}, {"NAME", "name", false},	    {"EXECUTOR", "executor", false},
		{"STATUS", "status", false},	  {"INSERTED", "inserted_at", true}, {"ARGS", "args", false},
	};
	const json_t *rows = json_object_get(reply, "tool_calls");
	if (json_is_array(rows))
		TABLE(rows, cols);
	else
		show_fields(reply);
}

static void show_runs(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id", false},	       {"STATUS", "status", false},	  {"ATTEMPT", "attempt", false},
		{"MODEL", "model", false},     {"FROM", "from_seq", false},	  {"TO", "to_seq", false},
		{"FIRST", "first_seq", false}, {"LAST", "last_seq", false},	  {"STARTED", "started_at", true},
		{"ENDED", "ended_at", true},
	};
	const json_t *rows = json_object_get(reply, "runs");
	if (!json_is_array(rows)) {
		show_fields(reply);
		return;
	}
	TABLE(rows, cols);
	const json_t *next = json_object_get(reply, "next");
	if (next && !json_is_null(next)) {
		char *t = text_of(next, "null");
		printf("next: %s\n", t);
		free(t);
	}
}

static void show_audit(const json_t *reply)
{
	static const struct column cols[] = {
		{"TURN", "turn_ref|turn", false},
		{"TASK", "task", false},
		{"MODEL", "model", false},
		{"LATENCY_MS", "latency_ms", false},
		{"SUMMARY_V", "summary_version", false},
		{"USAGE", "usage", false},
		{"INSERTED", "inserted_at", true},
	};
	const json_t *rows = json_object_get(reply, "model_calls");
	if (json_is_array(rows))
		TABLE(rows, cols);
	else
		show_fields(reply);
}

static void show_status(const json_t *reply)
{
	static const struct column cols[] = {
		{"CONVERSATION", "conversation", false},
		{"PID", "pid", false},
		{"STATE", "state", false},
		{"SINCE_MS", "since_ms", false},
	};
	const json_t *workers = json_object_get(reply, "workers");
	struct kvlist l = {0};
	kv_collect(&l, reply, NULL, true, json_is_array(workers) ? "workers" : NULL);
	if (json_is_array(workers)) {
		char n[32];
		snprintf(n, sizeof n, "%zu", json_array_size(workers));
		kv_add(&l, NULL, "workers", xstrdup(n));
	}
	kv_print(&l);
	if (json_array_size(workers) > 0) {
		putchar('\n');
		TABLE(workers, cols);
	}
}

static void show_nodes(const json_t *reply)
{
	static const struct column cols[] = {
		{"NODE", "node", false},	   {"LIVE", "live", false},	     {"LEASES", "leases", false},
		{"BEAT_AT", "beat_at", true}, {"EXPIRES_AT", "expires_at", true}, {"STARTED_AT", "started_at", true},
	};
	const json_t *rows = json_object_get(reply, "nodes");
	const json_t *self = json_object_get(reply, "node");
	if (!json_is_array(rows) || !json_is_string(self)) {
		show_fields(reply);
		return;
	}
	printf("node: %s\n", json_string_value(self));
	TABLE(rows, cols);
}

static void show_metrics(const json_t *reply)
{
	const json_t *t = json_object_get(reply, "text");
	if (!json_is_string(t)) {
		show_fields(reply);
		return;
	}
	size_t n = json_string_length(t);
	fwrite(json_string_value(t), 1, n, stdout);
	if (n > 0 && json_string_value(t)[n - 1] != '\n')
		putchar('\n');
}

static void show_pending(const json_t *reply)
{
	static const struct column cols[] = {
		{"ID", "id", false},	       {"CONVERSATION", "conversation", false}, {"NAME", "name", false},
		{"DEADLINE", "deadline", true}, {"PROMPT", "prompt", false},		 {"ARGS", "args", false},
	};
	const json_t *rows = json_object_get(reply, "tool_calls");
	if (json_array_size(rows) == 0)
		puts("no pending approvals");
	else
		TABLE(rows, cols);
}

/* SEQ TYPE CONTENT: the line format of events and watch. */
static void print_event(const json_t *ev)
{
	const json_t *c = json_object_get(ev, "content");
	char *seq = text_of(json_object_get(ev, "seq"), "-");
	char *type = text_of(json_object_get(ev, "type"), "-");
	char *content = c ? dump(c) : xstrdup("null"); /* always JSON here, strings quoted */
	printf("%s %s %s\n", seq, type, content);
	free(seq);
	free(type);
	free(content);
}

static void show_events(const json_t *reply)
{
	const json_t *evs = json_object_get(reply, "events");
	size_t i;
	json_t *ev;
	if (!json_is_array(evs)) {
		show_fields(reply);
		return;
	}
	json_array_foreach(evs, i, ev)
		print_event(ev);
}

/* ------------------------------------------------------------------------ */
/* Running a command                                                        */

/* Milliseconds as seconds for a message: "60", "1.5", "3660". */
static const char *secs_text(int64_t ms)
{
	static char buf[48];
	int n = snprintf(buf, sizeof buf, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
	while (n > 0 && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && buf[n - 1] == '.')
		buf[--n] = '\0';
	return buf;
}

/* The line as JSON, or NULL when it is none. */
static json_t *parse_line(const char *line, size_t len)
{
	json_t *v;
	return ctl_parse_line(line, len, &v) == 0 ? v : NULL;
}

static void print_line(const char *line, size_t len)
{
	fwrite(line, 1, len, stdout);
	putchar('\n');
}

/* While a watch writes (signals let in, see stream), a signal ends it at
 * once: a write to a reader that stopped reading may never return, and one
 * that returns part of its bytes is simply retried by stdio. */
static volatile sig_atomic_t in_output;

static void on_signal(int sig)
{
	(void)sig;
	if (in_output)
		_exit(EXIT_OK);
	interrupted = 1;
}

static _Noreturn void conn_fail(const struct conn *c, const char *what, int err)
{
	if (err == -ENOMEM)
		fail("out of memory");
	if (err == -ETIMEDOUT)
		fail("no reply from agentd within %s s (see --timeout)", secs_text(c->budget));
	fail("%s %s: %s", what, c->path, strerror(-err));
}

/* Where agentd may be listening, in the order tried: -s, else
 * $AGENTD_SOCKET, else the defaults (DEFAULT_SOCKET, AGENTD_RUN_SOCKET). */
struct sockets {
	const char *path[2];
	int n;
	const char *from; /* "-s", "$AGENTD_SOCKET", or NULL for the defaults */
};

static void open_one(struct conn *c, const char *path, const struct options *o);

/* The defaults: the first that accepts a connection. A path with nothing
 * there, or only a dead agentd's socket file, is passed over; any other
 * failure (a permission, a full backlog) is that agentd's and is reported. */
static void open_or_fail(struct conn *c, const struct sockets *ss, const struct options *o)
{
	if (ss->n == 1) {
		open_one(c, ss->path[0], o);
		return;
	}
	int err[2];
	for (int k = 0; k < ss->n; k++) {
		err[k] = ctl_connect(ss->path[k], o->timeout_ms, &c->c);
		c->path = ss->path[k];
		if (err[k] == 0)
			return;
		if (err[k] != -ENOENT && err[k] != -ECONNREFUSED) {
			open_one(c, ss->path[k], o); /* says why, and exits */
			return;
		}
	}
	fail("cannot connect to agentd: tried %s (%s) and %s (%s); is agentd running? Give its socket with -s "
	     "SOCKET or $AGENTD_SOCKET", ss->path[0], strerror(-err[0]), ss->path[1], strerror(-err[1]));
}

static void open_one(struct conn *c, const char *path, const struct options *o)
{
	int r = ctl_connect(path, o->timeout_ms, &c->c);
	c->path = path;
	if (r == -ENAMETOOLONG)
		fail("socket path too long (%zu bytes; a Unix socket path holds at most %zu): %s", strlen(path),
		     sizeof(((struct sockaddr_un *)0)->sun_path) - 1, path);
	if (r == -EAGAIN)
		fail("cannot connect to %s: timed out (agentd is not accepting connections)", path);
	if (r < 0)
		fail("cannot connect to %s: %s%s", path, strerror(-r),
		     r == -ENOENT || r == -ECONNREFUSED ? " (is agentd running?)"
		     : r == -EACCES			? " (the socket is mode 0600: run agentctl as agentd's user)"
							: "");
}

/* After the watch reply: print each streamed line until agentd closes the
 * stream or the user interrupts. Both end the watch normally. */
static _Noreturn void stream(struct conn *c, const sigset_t *mask, bool raw)
{
	for (;;) {
		const char *line;
		size_t len;
		int r = ctl_watch_next(c->c, -1, -1, &line, &len);
		if (r == -EINTR)
			exit(EXIT_OK);
		if (r == -ECONNRESET) {
			/* Not the user's doing: say so, or a script cannot tell this
			 * end from a quiet conversation. */
			check_stdout(EXIT_OK);
			warn("agentd ended the watch (it stopped, or the conversation was deleted)");
			exit(EXIT_OK);
		}
		if (r < 0)
			conn_fail(c, "reading from", r);
		/* Writing may block on a reader that does not read: SIGINT and
		 * SIGTERM get in meanwhile (they interrupt the write). */
		sigset_t blocked;
		in_output = 1;
		sigprocmask(SIG_SETMASK, mask, &blocked);
		json_t *v = raw ? NULL : parse_line(line, len);
		const json_t *ev = json_object_get(v, "event");
		const json_t *delta = json_object_get(v, "delta");
		const json_t *run = json_object_get(v, "run");
		if (json_is_object(ev)) {
			print_event(ev);
		} else if (delta) {
			char *t = dump(delta);
			printf("- delta %s\n", t);
			free(t);
		} else if (json_is_object(run)) {
			char *t = dump(run);
			printf("- run %s\n", t);
			free(t);
		} else {
			print_line(line, len);
		}
		json_decref(v);
		check_stdout(EXIT_OK);
		sigprocmask(SIG_SETMASK, &blocked, NULL);
		in_output = 0;
	}
}

/* Send one request line and read its reply (held, for the exit paths). */
static json_t *exchange(struct conn *c, const char *request, const char **line, size_t *len)
{
	int r = ctl_send_line(c->c, request);
	if (r == -EINTR)
		exit(EXIT_OK);
	if (r < 0 && r != -EPIPE) /* after EPIPE agentd may still have replied: read on */
		conn_fail(c, "writing to", r);
	json_t *reply = NULL;
	while (!reply) {
		r = ctl_read_line(c->c, line, len);
		if (r == -EINTR)
			exit(EXIT_OK);
		if (r == -ECONNRESET)
			fail("agentd closed the connection without replying");
		if (r < 0)
			conn_fail(c, "reading from", r);
		reply = held.reply = parse_line(*line, *len);
		if (!json_is_object(reply) || !json_object_get(reply, "ok")) {
			warn("ignoring a line that is not a reply: %.80s%s", *line, *len > 80 ? "..." : "");
			json_decref(reply);
			reply = held.reply = NULL;
		}
	}
	return reply;
}

static void print_ids(const json_t *reply, const char *spec);
static void print_reply_error(const json_t *reply);
static void word_after(const struct command *cmd, const char *request, const json_t *reply);

static int run(const struct command *cmd, const struct sockets *ss, const char *request, int64_t extra_ms,
	       const struct options *o)
{
	struct conn *c = &conn;
	sigset_t block, orig;
	bool watch = cmd->flags & CMD_WATCH;

	if (watch) {
		/* SIGINT and SIGTERM stay blocked except inside ppoll, so one that
		 * arrives between two waits is not lost: it interrupts the next. */
		struct sigaction sa = {.sa_handler = on_signal};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigemptyset(&block);
		sigaddset(&block, SIGINT);
		sigaddset(&block, SIGTERM);
		sigprocmask(SIG_BLOCK, &block, &orig);
	}
	open_or_fail(c, ss, o);
	ctl_set_signals(c->c, watch ? &orig : NULL, &interrupted);
	if (o->timeout_ms > 0) {
		c->budget = o->timeout_ms + extra_ms;
		ctl_set_timeout(c->c, c->budget);
	}

	const char *line = NULL;
	size_t len = 0;
	json_t *reply = exchange(c, request, &line, &len);
	bool ok = json_is_true(json_object_get(reply, "ok"));
	if (o->json || (cmd->flags & CMD_RAW))
		print_line(line, len);
	else if (ok && o->quiet)
		print_ids(reply, cmd->ids);
	else if (ok && cmd->show)
		cmd->show(reply);
	/* A long log comes in pages (next_after): readable output shows it
	 * all; --json prints the one reply, next_after included. */
	while (ok && cmd->show == show_events && !o->json && json_integer_value(json_object_get(reply, "next_after")) > 0) {
		json_t *rq = must(json_loads(request, 0, NULL));
		if (json_object_set(rq, "after", json_object_get(reply, "next_after")))
			fail("out of memory"); /* the same page again, for ever */
		json_object_del(rq, "wait_ms"); /* the wait was met by the first page */
		char *next = must(jsonmp_dumps(rq, JSON_COMPACT, 0, NULL));
		json_decref(rq);
		json_decref(reply);
		reply = exchange(c, next, &line, &len);
		free(next);
		ok = json_is_true(json_object_get(reply, "ok"));
		if (ok && o->quiet)
			print_ids(reply, cmd->ids);
		else if (ok)
			cmd->show(reply);
	}
	if (ok)
		word_after(cmd, request, reply);
	if (!ok)
		print_reply_error(reply);
	check_stdout(ok ? EXIT_OK : EXIT_REPLY);
	if (ok && watch)
		stream(c, &orig, o->json); /* does not return */
	json_decref(reply);
	held.reply = NULL;
	ctl_close(c->c);
	c->c = NULL;
	return ok ? EXIT_OK : EXIT_REPLY;
}

/* -q: the ids a script wants, one a line. spec "FIELD" prints that member;
 * "ARRAY/FIELD" prints FIELD of each row of ARRAY. */
static void print_ids(const json_t *reply, const char *spec)
{
	char arr[64];
	const char *slash = spec ? strchr(spec, '/') : NULL;
	if (!spec)
		return;
	if (!slash && strchr(spec, ',')) { /* "a,b": the first field the reply has */
		size_t n = strcspn(spec, ",");
		snprintf(arr, sizeof arr, "%.*s", (int)n, spec);
		print_ids(reply, json_object_get(reply, arr) ? arr : spec + n + 1);
		return;
	}
	if (!slash && json_is_array(json_object_get(reply, spec))) { /* one per line */
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(reply, spec), i, v) {
			char *t = text_of(v, "null");
			puts(t);
			free(t);
		}
		return;
	}
	if (!slash) {
		const json_t *v = json_object_get(reply, spec);
		if (v && !json_is_null(v)) {
			char *t = text_of(v, "null");
			puts(t);
			free(t);
		}
		return;
	}
	snprintf(arr, sizeof arr, "%.*s", (int)(slash - spec), spec);
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(reply, arr), i, row) {
		char *t = text_of(json_object_get(row, slash + 1), "-");
		puts(t);
		free(t);
	}
}

/* A long-poll that timed out is a success with nothing in it: say so on
 * stderr, so a person sees the wait ended and a script's stdout stays empty. */
static void word_after(const struct command *cmd, const char *request, const json_t *reply)
{
	if (cmd->show != show_events || json_array_size(json_object_get(reply, "events")) > 0)
		return;
	json_t *rq = json_loads(request, 0, NULL);
	const json_t *w = json_object_get(rq, "wait_ms");
	if (w && json_integer_value(w) > 0)
		warn("no event after seq %lld within %s s", (long long)json_integer_value(json_object_get(rq, "after")),
		     secs_text(json_integer_value(w)));
	json_decref(rq);
}

static void print_reply_error(const json_t *reply)
{
	const char *code = json_string_value(json_object_get(reply, "error"));
	const char *msg = json_string_value(json_object_get(reply, "message"));
	/* Exactly "agentctl: CODE: message": scripts match on it. */
	fprintf(stderr, "agentctl: %s%s%s\n", code ? code : "error", msg ? ": " : "", msg ? msg : "");
}

/* One request of pending's; the reply (held), or NULL after printing its
 * error when it is not ok (not_found too, when not_found_ok is unset). */
static json_t *pending_ask(struct conn *c, json_t *rq, bool not_found_ok)
{
	char *req = must(jsonmp_dumps(rq, SEND_FLAGS, 0, NULL));
	const char *line;
	size_t len;
	json_decref(rq);
	json_t *reply = exchange(c, req, &line, &len);
	free(req);
	if (json_is_true(json_object_get(reply, "ok")))
		return reply;
	const char *code = json_string_value(json_object_get(reply, "error"));
	if (!not_found_ok || !code || strcmp(code, "not_found") != 0)
		print_reply_error(reply);
	json_decref(reply);
	held.reply = NULL;
	return NULL;
}

/* pending: no op lists pending calls across conversations, so agentctl asks
 * for the suspended conversations (a conversation with a pending human call
 * is suspended until it is settled), page by page, and for each one's pending
 * calls, on one connection. A conversation deleted in between is skipped. */
static int run_pending(const struct sockets *ss, const struct options *o)
{
	struct conn *c = &conn;
	open_or_fail(c, ss, o);
	if (o->timeout_ms > 0) {
		c->budget = o->timeout_ms;
		ctl_set_timeout(c->c, c->budget);
	}
	json_t *all = held.req = must(json_array());
	int rc = EXIT_OK;
	for (;;) {
		json_t *rq = must(json_pack("{sisssssi}", "id", 1, "op", "list", "status", "suspended", "limit", 1000));
		if (held.after)
			put(rq, "after", must(json_string(held.after)));
		free(held.after);
		held.after = NULL;
		json_t *page = held.page = pending_ask(c, rq, false);
		if (!page) {
			rc = EXIT_REPLY;
			break;
		}
		held.reply = NULL; /* held.page now: the next exchange replaces held.reply */
		const json_t *next = json_object_get(page, "next");
		if (json_is_string(next))
			held.after = xstrdup(json_string_value(next));
		size_t i;
		json_t *conv;
		json_array_foreach(json_object_get(page, "conversations"), i, conv) {
			const json_t *id = json_object_get(conv, "id");
			if (!json_is_string(id))
				continue;
			json_t *r = pending_ask(c, must(json_pack("{sisssOss}", "id", 2, "op", "tool_calls", "conversation",
								  id, "status", "pending")), true);
			if (!r)
				continue;
			if (json_array_extend(all, json_object_get(r, "tool_calls")))
				fail("out of memory"); /* a pending call left out of the list */
			json_decref(r);
			held.reply = NULL;
		}
		json_decref(page);
		held.page = NULL;
		if (!held.after)
			break;
	}
	if (rc == EXIT_OK) {
		json_t *out = must(json_pack("{sbsO}", "ok", 1, "tool_calls", all));
		if (o->json) {
			char *t = must(jsonmp_dumps(out, SEND_FLAGS, 0, NULL));
			puts(t);
			free(t);
		} else if (o->quiet) {
			print_ids(out, "tool_calls/id");
		} else {
			show_pending(out);
		}
		json_decref(out);
	}
	json_decref(all);
	held.req = NULL;
	check_stdout(rc);
	ctl_close(c->c);
	c->c = NULL;
	return rc;
}

static void release_held(void)
{
	json_decref(held.req);
	free(held.pos);
	free(held.input);
	free(held.key);
	free(held.request);
	json_decref(held.reply);
	json_decref(held.page);
	free(held.after);
	ctl_close(conn.c);
	memset(&held, 0, sizeof held);
	conn.c = NULL;
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/* Edit distance (insertions, deletions, substitutions, and swaps of two
 * neighbours: "tool-clals"), capped: only small ones matter. */
static size_t distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	if (n > 32 || m > 32)
		return 99;
	size_t d[33][33];
	for (size_t i = 0; i <= n; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[n][m];
}

/* "unknown command 'x'", with the nearest command when one is near: within
 * two edits (one for names of three letters or less), or the only command
 * the name begins. */
static _Noreturn void unknown_command(const char *name)
{
	const char *best = NULL, *prefix = NULL;
	size_t bd = 99, nprefix = 0, len = strlen(name);
	for (size_t i = 0; i < NCOMMANDS; i++) {
		size_t d = distance(name, commands[i].name);
		if (d < bd) {
			bd = d;
			best = commands[i].name;
		}
		if (len >= 2 && strncmp(commands[i].name, name, len) == 0) {
			prefix = commands[i].name;
			nprefix++;
		}
	}
	if (nprefix == 1)
		best = prefix; /* "pend" is pending, not send */
	else if (bd > (len <= 3 ? 1u : 2u))
		best = NULL;
	if (best)
		usage_error("unknown command '%s'; did you mean '%s'?", name, best);
	usage_error("unknown command '%s'", name);
}

int main(int argc, char **argv)
{
	struct options o = {.socket = NULL, .json = false, .timeout_ms = DEFAULT_TIMEOUT_MS};
	int i = 1;

	/* A closed socket or stdout must be an error return, never a silent death. */
	signal(SIGPIPE, SIG_IGN);
	/* Started with 0, 1 or 2 closed (`agentctl ping >&-`), the socket would
	 * take that number and the reply would be written back into it. Hold
	 * each closed one with /dev/null opened read-only: output written there
	 * fails (EBADF), and check_stdout says so. */
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDONLY) != fd)
			return EXIT_USAGE;
	atexit(release_held);

	while (i < argc && argv[i][0] == '-' && argv[i][1] != '\0') {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			print_main_help(stdout);
			check_stdout(EXIT_OK);
			return EXIT_OK;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("agentctl %s\n", AGENTD_VERSION);
			check_stdout(EXIT_OK);
			return EXIT_OK;
		}
		if (!global_option(argc, argv, &i, &o))
			usage_error("unknown option '%s'", argv[i]);
	}
	if (i >= argc) {
		fputs("usage: agentctl [-s SOCKET] [--json] [-q] [--timeout SECS] COMMAND [ARGS...]\n"
		      "(see 'agentctl --help' for the commands)\n",
		      stderr);
		return EXIT_USAGE;
	}

	const char *name = argv[i++];
	if (strcmp(name, "help") == 0) {
		const struct command *h = i < argc ? find_command(argv[i]) : NULL;
		if (i < argc && !h)
			unknown_command(argv[i]);
		if (h)
			print_command_help(h, stdout);
		else
			print_main_help(stdout);
		check_stdout(EXIT_OK);
		return EXIT_OK;
	}
	const struct command *cmd = find_command(name);
	if (!cmd)
		unknown_command(name);
	cur_cmd = cmd->name;

	int64_t extra_ms = 0;
	if ((cmd->flags & CMD_SLOW) && !o.timeout_set)
		o.timeout_ms = 0;
	char *request = held.request = build_request(cmd, argc - i, argv + i, &o, &extra_ms);

	struct sockets ss = {.path = {o.socket}, .n = 1, .from = "-s"};
	const char *env = getenv("AGENTD_SOCKET");
	if (!o.socket && env && *env) {
		ss.path[0] = env;
		ss.from = "$AGENTD_SOCKET";
	} else if (!o.socket) {
		ss = (struct sockets){.path = {DEFAULT_SOCKET, AGENTD_RUN_SOCKET}, .n = 2, .from = NULL};
	}
	int rc = (cmd->flags & CMD_PENDING) ? run_pending(&ss, &o) : run(cmd, &ss, request, extra_ms, &o);
	free(request);
	held.request = NULL;
	return rc;
}
