/**
 * The records agentd's replies carry (docs/protocol.md, "Ops"), as it sends them: field names are the
 * protocol's own (snake_case), so a record reads the same here, in agentctl --json and in the docs.
 * Fields an older agentd does not send are optional.
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export type ConversationStatus = "idle" | "active" | "suspended" | "ended" | "paused";
export type ToolCallStatus = "pending" | "resolved" | "errored" | "expired" | "cancelled" | "unknown";

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cost: number;
  turns?: number;
}

export interface Settings {
  model: string;
  system?: string;
  tools?: string[];
  params?: { [key: string]: Json };
  budget?: { max_tokens?: number; max_cost?: number; max_turns?: number };
  max_tool_rounds?: number;
}

export interface Run {
  id: number;
  status: string;
  [key: string]: Json | undefined;
}

export interface Conversation {
  id: string;
  settings: Settings;
  status: ConversationStatus;
  fsm_state: { [key: string]: Json } | null;
  last_seq: number;
  usage: Usage;
  created_at: number;
  updated_at: number;
  metadata: { [key: string]: string };
  forked_from: { conversation: string; seq: number } | null;
  worker: { pid: number | null; state: string; node?: string } | null;
  run?: Run | null;
  first_seq?: number;
}

export interface ConversationPage {
  conversations: Conversation[];
  /** The cursor for the next page (pass as `after`), or undefined on the last page. */
  next?: string;
}

export interface Event {
  seq: number;
  type: string;
  content: Json;
  event_id?: string;
  inserted_at: number;
}

export interface EventPage {
  events: Event[];
  last_seq: number;
  next_after?: number;
  first_seq?: number;
}

export interface SendResult {
  seq: number;
  duplicate: boolean;
  /** The event_id sent (generated when none was given): a retry with it is answered with this seq. */
  event_id: string;
  /** "paused" when the conversation's budget is spent (the message is kept). */
  status?: string;
  /** The on_busy mode applied when the send found a turn running and on_busy was given (send or settings). */
  on_busy?: string;
  /** An interrupting send: the seq of the turn_cancelled it wrote. */
  interrupted?: number;
  /** The ids of the pending calls the send settled, those of tools with on_user_message = reject; [] when none. */
  rejected: string[];
}

export interface BatchResult {
  seqs: number[];
  duplicates: number[];
  event_ids: string[];
  /** As SendResult's. */
  rejected: string[];
}

export interface ToolCall {
  id: string;
  conversation: string;
  executor: string;
  name: string;
  status: ToolCallStatus;
  args: Json;
  /** The digest of args (docs/protocol.md, "Arguments digest"): what resolve's argsDigest takes. */
  args_digest?: string;
  result: Json;
  inserted_at: number;
  resolved_at: number | null;
  deadline?: number | null;
  attempts?: number;
  prompt?: string;
  /** Set by pending() only: "approval" (a pending human call) or "unknown" (a call whose outcome is unknown). */
  kind?: "approval" | "unknown";
  /** A pending human call: the approvals by different names that settle it (its tool's approvers). */
  approvers?: number;
  /** A pending human call: the by names of the approvals counted so far, in order. */
  approved_by?: string[];
}

export interface Extension {
  /** The deadline_extended event's seq. */
  seq: number;
  /** The new deadline, ms since the epoch. */
  deadline: number;
  conversation?: string;
}

/** A conversation's durable wakeup (schedule, schedules). */
export interface Schedule {
  /** Its id, for unschedule. */
  schedule: string;
  conversation: string;
  /** When it fires next, ms since the epoch. */
  due: number;
  /** Its 5-field cron spec (UTC), or null for a once one. */
  cron: string | null;
  /** What the conversation is given when it fires (schedules only). */
  text?: string;
}

export interface Resolution {
  seq: number;
  conversation?: string;
  /** False for an approval counted short of its tool's approvers (seq is then its approval_vote event's). */
  settled?: boolean;
  /** A tool with approvers > 1: the count with this approval, and the approvals that settle the call. */
  approvals?: number;
  approvers?: number;
}

/** settle: the event written (tool_retry, or the resolution), its conversation and the outcome. */
export interface Settlement {
  seq: number;
  conversation: string;
  outcome: "retry" | "done" | "failed";
}

export interface Summary {
  from_seq: number;
  to_seq: number;
  content: Json;
  version: number;
  inserted_at: number;
}

export interface RunPage {
  runs: Run[];
  next?: number;
}

export interface Cancelled {
  cancelled: boolean;
  seq?: number;
  tool_calls?: string[];
  message?: string;
}

export interface Resumed {
  resumed: boolean;
  rerun?: boolean;
  node?: string;
  message?: string;
}

export interface ForkResult {
  conversation: string;
  forked_from: { conversation: string; seq: number };
  last_seq: number;
  copied: number;
  cancelled: number;
  summary_to: number | null;
  first_seq: number;
  status: string;
}

export interface BackupResult {
  path: string;
  bytes: number;
  ms: number;
}

export interface Status {
  version: string;
  uptime_ms: number;
  workers: { conversation: string; pid: number; state: string; since_ms: number }[];
  store: { [key: string]: Json };
  node?: { [key: string]: Json };
}

/** A model's streamed text on a watch: a preview, which a slow reader may miss (never an event). */
export interface Delta {
  delta: string;
}

/** How a wait for the turn that answers a seq ended (waitTurn, sendAndWait):
 * - completed: the turn's last model round (an assistant_msg that called no tool); `text` is its text;
 * - suspended: every unsettled call of its last round is a human tool call or a call whose outcome is
 *   unknown; `pending` lists their ids (approve, deny, resolve or settle them, then waitTurn after that
 *   event's seq for the rest of the turn);
 * - error: an error event ended the turn (`error` is its content);
 * - cancelled: a cancel ended it (its turn_cancelled event; an interrupting send's is no end);
 * - paused: the budget refused the turn (budget_exceeded, or the send answered paused);
 * - timeout: none of these within the timeout; waitTurn(conversation, seq) waits again. */
export type TurnStatus = "completed" | "suspended" | "error" | "cancelled" | "paused" | "timeout";

/** The result of waitTurn and sendAndWait: the status, the events after seq up to that point in seq
 * order (every event of the log there, another client's too), last_seq (the last of them, seq when
 * none), and send (sendAndWait: the send's result). */
export interface TurnResult {
  status: TurnStatus;
  seq: number;
  events: Event[];
  last_seq: number;
  pending: string[];
  text?: string;
  error?: Json;
  send?: SendResult;
}
