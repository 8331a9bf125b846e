/* commands.c: agentctl's command table, one row per command, and the help
 * built from it (agentctl.h): the request and the help text come from the
 * same row, so they cannot drift apart. A new command is a row here and, if
 * its reply needs one, a show_ function in show.c. */
#include "agentctl/agentctl.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* Command table                                                            */

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
	{"--on-busy", "on_busy", K_SET_STR, "MODE", NULL, false,
	 "what a message sent while a turn runs does: enqueue (default), reject, interrupt or steer"},
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
	{"--on-busy", "on_busy", K_SET_STR, "MODE", NULL, false,
	 "what a message sent while a turn runs does: enqueue, reject, interrupt or steer"},
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
	{"--on-busy", "on_busy", K_ENUM, "MODE", "enqueue|reject|interrupt|steer", false,
	 "when a turn is running, instead of the conversation's on_busy: enqueue, reject (conflict, nothing "
	 "written), interrupt (cancel it; one turn answers both) or steer (into its next model round)"},
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
	{"--args-digest", "args_digest", K_STR, "HEX", NULL, false,
	 "only if the call's args have this digest (pending's ARGS_DIGEST): else conflict, nothing settled"},
	{0},
};

static const struct param opt_decide[] = {
	{"--comment", "comment", K_RES_STR, "TEXT", NULL, false, "a note kept with the decision (result.comment)"},
	{"--by", "by", K_STR, "NAME", NULL, false, "who decides, recorded with your uid in the resolution event"},
	{"--args-digest", "args_digest", K_STR, "HEX", NULL, false,
	 "the digest of the args you saw (pending's ARGS_DIGEST); without it, that of the args tool-call shows now"},
	{0},
};

static const struct param pos_extend[] = {
	{"CONV", "conversation", K_STR, NULL, NULL, false, "the call's conversation id"},
	{"TOOL_CALL_ID", "tool_call_id", K_STR, NULL, NULL, false, "tool call id"},
	{0},
};

static const struct param opt_extend[] = {
	{"--expires-in", "expires_in_ms", K_UINT, "MS", NULL, false, "the new deadline: MS milliseconds from now"},
	{"--deadline", "deadline", K_UINT, "MS", NULL, false,
	 "the new deadline: MS milliseconds since the epoch (give one of --expires-in and --deadline)"},
	{"--by", "by", K_STR, "NAME", NULL, false, "who extends, recorded with your uid in the deadline_extended event"},
	{0},
};

static const struct param pos_schedule[] = {
	{"CONV", "conversation", K_STR, NULL, NULL, false, "conversation id"},
	{"TEXT", "text", K_STR, NULL, NULL, false, "what the conversation is given when it fires (a `scheduled` event)"},
	{0},
};

static const struct param opt_schedule[] = {
	{"--at", "at", K_UINT, "MS", NULL, false, "fire at MS milliseconds since the epoch"},
	{"--after", "after", K_UINT, "MS", NULL, false, "fire MS milliseconds from now (give at most one of --at and --after)"},
	{"--cron", "cron", K_STR, "SPEC", NULL, false,
	 "repeat on a 5-field cron spec in UTC, e.g. '0 9 * * 1-5'; its first time is --at or --after when given"},
	{0},
};

static const struct param opt_schedules[] = {
	{"--conversation", "conversation", K_STR, "CONV", NULL, false, "only CONV's schedules"},
	{0},
};

static const struct param pos_unschedule[] = {
	{"SCHEDULE_ID", "schedule", K_STR, NULL, NULL, false, "schedule id (as schedule printed it)"},
	{0},
};

static const struct param pos_settle[] = {
	{"CONV", "conversation", K_STR, NULL, NULL, false, "the call's conversation"},
	{"TOOL_CALL_ID", "tool_call_id", K_STR, NULL, NULL, false, "the unknown call"},
	{"OUTCOME", "outcome", K_ENUM, NULL, "retry|done|failed", false,
	 "retry (run it again, same id), done (it happened) or failed (it did not)"},
	{0},
};

static const struct param opt_settle[] = {
	{"--result", "result", K_JSON, "JSON", NULL, false, "done: the tool's result; failed: the error the model sees"},
	{"--by", "by", K_STR, "NAME", NULL, false, "who decides, recorded with your uid in the event"},
	{0},
};

static const struct param opt_tool_calls[] = {
	{"--status", "status", K_STR, "S", NULL, false,
	 "only calls with status S (pending, resolved, errored, expired, cancelled, unknown)"},
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

const struct command commands[] = {
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
	 "With --expected-seq, a conversation that moved on is refused: exit 1, `conflict` naming its last seq.\n"
	 "While a turn runs, --on-busy (or the conversation's on_busy) decides: `on_busy: MODE` is printed, and\n"
	 "`interrupted: N` (the turn_cancelled's seq) when it cancelled the turn; reject is exit 1, `conflict`.\n"
	 "`rejected: [IDS]`: the pending approvals it settled (their tools have on_user_message = reject).",
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
	 "\"comment\": TEXT with --comment). Prints `seq: N` of the resolution event; `stale` when it is not pending.\n"
	 "A tool with approvers = N counts the approval of each --by name once: before the Nth it prints\n"
	 "`settled: false` and the count (`approvals`, `approvers`), the seq being its approval_vote event's.\n"
	 "It always sends the args' digest (--args-digest, or the one agentd shows for the call now): args that are\n"
	 "not those are `conflict`, nothing settled.",
	 pos_tool_call, opt_decide, show_fields, CMD_DIGEST, "agentctl approve call_abc123 --comment 'within budget'",
	 "{\"status\":\"resolved\",\"result\":{\"approved\":true}}", "seq"},
	{"deny", "resolve", "deny a pending human tool call",
	 "Settle a pending human tool call as denied: resolve it with the result {\"approved\": false} (and\n"
	 "\"comment\": TEXT with --comment). Prints `seq: N` of the resolution event; `stale` when it is not pending.\n"
	 "It sends the args' digest as approve does.",
	 pos_tool_call, opt_decide, show_fields, CMD_DIGEST, "agentctl deny call_abc123 --comment 'over the limit'",
	 "{\"status\":\"resolved\",\"result\":{\"approved\":false}}", "seq"},
	{"extend", "extend", "move a pending human tool call's deadline",
	 "Move a pending human tool call's deadline (durable: a deadline_extended event records who moved it and\n"
	 "to when) and print `seq: N` of that event and the new `deadline`. A call that is not pending is `stale`;\n"
	 "one that never expires is `conflict`; a deadline that is not in the future is `bad_request`.",
	 pos_extend, opt_extend, show_fields, CMD_NEED_OPT, "agentctl extend demo call_abc123 --expires-in 3600000",
	 NULL, "seq"},
	{"settle", "settle", "decide a tool call whose outcome is unknown",
	 "Decide a call whose outcome is unknown (a tool not safe to run twice, interrupted after its dispatch\n"
	 "began): retry dispatches it again with the same id, done records --result as its result, failed records\n"
	 "a failure the model sees (--result: its own). Prints `seq: N` of the event; `stale` when it is not unknown.",
	 pos_settle, opt_settle, show_fields, 0, "agentctl settle demo call_abc123 done --result '{\"charged\":true}'", NULL,
	 "seq"},
	{"schedule", "schedule", "wake a conversation later, or on a cron spec",
	 "Give a conversation a durable wakeup: at --at, after --after, or on --cron (its first time --at or --after\n"
	 "when given, else the spec's next minute). When it fires, the conversation gets a `scheduled` event with TEXT\n"
	 "and runs a turn as for a message. Prints the `schedule` id and its `due` time (ms since the epoch).",
	 pos_schedule, opt_schedule, show_fields, CMD_NEED_OPT, "agentctl schedule demo 'check the build' --after 3600000",
	 NULL, "schedule"},
	{"schedules", "schedules", "list scheduled wakeups (table)",
	 "List the scheduled wakeups, earliest first, as a table: ID CONVERSATION DUE CRON TEXT (DUE in UTC; CRON -\n"
	 "for a once one).",
	 no_params, opt_schedules, show_schedules, 0, "agentctl schedules --conversation demo", NULL, "schedules/schedule"},
	{"unschedule", "unschedule", "cancel a scheduled wakeup",
	 "Remove a scheduled wakeup before it fires (a cron one stops repeating). `not_found` when there is none\n"
	 "(a once one that fired is gone).",
	 pos_unschedule, no_params, show_fields, 0, "agentctl unschedule s-1f2e3d4c5b6a7988", NULL, NULL},
	{"pending", "list", "list pending approvals and unknown calls across all conversations (table)",
	 "List every pending human tool call and every call whose outcome is unknown, of every conversation, as a\n"
	 "table: ID CONVERSATION KIND NAME DEADLINE PROMPT ARGS ARGS_DIGEST (KIND approval or unknown; DEADLINE in\n"
	 "UTC; - when it never expires; ARGS_DIGEST what approve --args-digest takes). agentctl asks agentd for the\n"
	 "suspended conversations (list), then for each one's pending and unknown calls (tool_calls); with --json it\n"
	 "prints one line {\"ok\":true,\"tool_calls\":[...]} it assembled, each row with its \"kind\".",
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

const size_t ncommands = sizeof commands / sizeof commands[0];

/* ------------------------------------------------------------------------ */
/* Help                                                                     */

void print_main_help(FILE *f)
{
	fputs("usage: agentctl [-s SOCKET] [--json] [-q] [--timeout SECS] COMMAND [ARGS...]\n"
	      "\n"
	      "Drive agentd through its control socket: one request per command.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (size_t i = 0; i < ncommands; i++)
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

void print_command_help(const struct command *cmd, FILE *f)
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

const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < ncommands; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}
