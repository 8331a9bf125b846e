/**
 * The client: one persistent connection, one request at a time (requests made at once are queued and
 * sent in order), and watch(), an async iterator over a `watch` stream on a connection of its own.
 * One method per op of the control protocol (docs/protocol.md); options left undefined are not sent, so
 * agentd's defaults apply.
 */
import { randomBytes } from "node:crypto";
import * as path from "node:path";
import { Conn, SUN_PATH_MAX } from "./conn.js";
import {
  AgentdConnectionError, AgentdError, AgentdTimeout, BadRequest, NotFound, Unavailable, errorFromReply,
} from "./errors.js";
import type {
  BackupResult, BatchResult, Cancelled, Conversation, ConversationPage, ConversationStatus, EventPage,
  Extension, ForkResult, Json, Resolution, Resumed, Schedule, Settlement, RunPage, SendResult, Status, Summary,
  ToolCall, ToolCallStatus, TurnResult,
} from "./types.js";
import { Turn, turnResult } from "./turn.js";
import { Watch, type WatchOptions } from "./watch.js";

export const DEFAULT_SOCKET = "./agentd-data/agentd.sock";

/** The protocol's bound on events' wait_ms. */
const LONG_POLL_MAX_MS = 3_600_000;

/** The ops safe to repeat: reads, and send (a repeated event_id is answered with the original seq).
 * After a lost connection these are sent again; the others throw AgentdConnectionError with .sent. */
export const IDEMPOTENT: ReadonlySet<string> = new Set([
  "ping", "get", "list", "events", "tool_call", "tool_calls", "summary", "audit", "status", "metrics", "send",
  "runs", "nodes", "schedules",
]);

export interface ClientOptions {
  /** The socket path; else $AGENTD_SOCKET when set and not empty; else ./agentd-data/agentd.sock. */
  socket?: string;
  /** Milliseconds to wait for agentd to take a request and for its reply (events' waitMs is added;
   * compact, backup and shutdown wait without a limit). Default 60000. */
  timeout?: number;
  /** After a lost connection, the ops safe to repeat reconnect and are sent again, with pauses growing
   * from 20 ms to 1 s, for up to this many milliseconds; 0 turns retrying off. A client that never got
   * a reply fails at once (a wrong path is reported without waiting). Default 30000. */
  retryFor?: number;
}

/** The socket to use: path when given, else $AGENTD_SOCKET when set and not empty, else the default.
 * Throws RangeError for an empty path or one longer than Linux takes. */
export function socketPath(p?: string): string {
  const s = p ?? (process.env.AGENTD_SOCKET || DEFAULT_SOCKET);
  if (!s) throw new RangeError("the socket path is empty");
  if (Buffer.byteLength(s) > SUN_PATH_MAX) {
    throw new RangeError(`the socket path is longer than ${SUN_PATH_MAX} bytes: ${s}`);
  }
  return s;
}

/** A fresh event id for send: "ts-" and 32 hex digits. */
export function newEventId(): string {
  return "ts-" + randomBytes(16).toString("hex");
}

/** The request line; BadRequest for a value JSON cannot carry (a BigInt, NaN, Infinity, a cycle). */
export function encode(op: string, fields: Record<string, unknown>, id: number): string {
  try {
    return JSON.stringify({ op, ...fields, id }, (_k, v) => {
      if (typeof v === "number" && !Number.isFinite(v)) throw new TypeError(`${v} is not a JSON number`);
      return v;
    }) + "\n";
  } catch (e) {
    throw new BadRequest(`the request cannot be encoded as JSON: ${(e as Error).message}`, "bad_request", op);
  }
}

/** A reply line as an object; AgentdConnectionError for a line that is not the reply to id (the
 * connection cannot be trusted after that). */
export function decode(line: string, op: string, id: number | null): Record<string, unknown> {
  let reply: unknown;
  try {
    reply = JSON.parse(line);
  } catch (e) {
    throw new AgentdConnectionError(`agentd sent a line that is not JSON (${(e as Error).message}): ${line.slice(0, 200)}`, op, true);
  }
  if (typeof reply !== "object" || reply === null || Array.isArray(reply) ||
      typeof (reply as Record<string, unknown>).ok !== "boolean") {
    throw new AgentdConnectionError(`agentd sent a line that is not a reply: ${line.slice(0, 200)}`, op, true);
  }
  const r = reply as Record<string, unknown>;
  // A refusal at connect time (the peer's uid) comes without an id: it is still this request's answer.
  if (id !== null && r.id !== id && !(r.ok === false && !("id" in r))) {
    throw new AgentdConnectionError(`reply for request ${JSON.stringify(r.id)} while waiting for ${id}`, op, true);
  }
  return r;
}

const NO_LIMIT = Infinity;

interface Call<T> {
  op: string;
  fields: Record<string, unknown>;
  parse: (reply: Record<string, unknown>) => T;
  /** Extra milliseconds on top of the client's timeout, or NO_LIMIT. */
  extra?: number;
}

function opt(o: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out;
}

function rest(r: Record<string, unknown>): Record<string, unknown> {
  const { ok: _ok, id: _id, ...others } = r;
  return others;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface CreateOptions {
  conversation?: string;
  system?: string;
  tools?: string[];
  params?: Record<string, Json>;
  budget?: { max_tokens?: number; max_cost?: number; max_turns?: number };
  maxToolRounds?: number;
  metadata?: Record<string, string>;
  /** What a message sent while a turn runs does: "enqueue" (agentd's default), "reject", "interrupt",
   * "steer" (docs/protocol.md, "Concurrent messages"). */
  onBusy?: OnBusy;
}

/** settings.on_busy and a send's on_busy. */
export type OnBusy = "enqueue" | "reject" | "interrupt" | "steer";

export interface ListOptions {
  status?: ConversationStatus;
  limit?: number;
  after?: string;
  metadata?: Record<string, string>;
  model?: string;
  updatedAfter?: number;
  updatedBefore?: number;
}

export interface UpdateOptions {
  model?: string;
  system?: string;
  tools?: string[];
  params?: Record<string, Json>;
  /** true: end the conversation (later sends are Conflict). */
  end?: boolean;
  /** Merged key by key: a string sets its key, null deletes it. */
  metadata?: Record<string, string | null>;
  onBusy?: OnBusy;
}

export interface SendOptions {
  /** Generated when not given; a retry after a lost connection reuses it, so the message lands once. */
  eventId?: string;
  /** The last seq you saw (0: the log must be empty): Conflict with .lastSeq when it moved on. */
  expectedSeq?: number;
  /** For this send alone, instead of the conversation's on_busy: "reject" is Conflict (nothing written)
   * while a turn runs, "interrupt" cancels it (SendResult.interrupted), "steer" joins it. */
  onBusy?: OnBusy;
}

export interface EventsOptions {
  after?: number;
  before?: number;
  limit?: number;
  type?: string;
  /** Long-poll: the reply comes once an event after `after` exists, or empty when this passes. */
  waitMs?: number;
}

export interface ResolveOptions {
  /** "resolved" (agentd's default) or "errored". */
  status?: "resolved" | "errored";
  /** Who decides, recorded in the resolution event (1-128 bytes, no control characters). */
  by?: string;
  /** The digest of the args the person saw (ToolCall.args_digest, or argsDigest(args)): the call is settled
   * only if its args are still those (Conflict otherwise, nothing settled). */
  argsDigest?: string;
}

export interface DecisionOptions {
  comment?: string;
  by?: string;
  /** As ResolveOptions.argsDigest. */
  argsDigest?: string;
}

export interface ExtendOptions {
  /** The new deadline, that long from now (ms); or */
  expiresInMs?: number;
  /** the new deadline, ms since the epoch. One of the two. */
  deadline?: number;
  /** Who extends, recorded in the deadline_extended event. */
  by?: string;
}

export interface ScheduleOptions {
  /** Fire at this time, ms since the epoch; or */
  at?: number;
  /** this long from now (ms). At most one of the two; */
  after?: number;
  /** and/or repeat on a 5-field cron spec in UTC (its first time at or after when one is given). */
  cron?: string;
}

export interface ForkOptions {
  newConversation?: string;
  model?: string;
  system?: string;
  tools?: string[];
  params?: Record<string, Json>;
  metadata?: Record<string, string>;
}

export class Client {
  readonly socketPath: string;
  readonly timeout: number;
  readonly retryFor: number;
  /** Requests sent again after a lost connection. */
  retries = 0;
  private conn: Conn | null = null;
  private nextId = 0;
  private reached = false;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(options: ClientOptions = {}) {
    this.socketPath = socketPath(options.socket);
    this.timeout = options.timeout ?? 60000;
    this.retryFor = options.retryFor ?? 30000;
  }

  /** Close the connection (the next request opens a new one). */
  close(): void {
    if (this.conn) this.conn.close();
    this.conn = null;
  }

  private run<T>(call: Call<T>): Promise<T> {
    const p = this.queue.then(() => this.withRetry(call));
    this.queue = p.catch(() => undefined);
    return p;
  }

  private async withRetry<T>(call: Call<T>): Promise<T> {
    const idempotent = IDEMPOTENT.has(call.op);
    const giveUp = Date.now() + this.retryFor;
    let pause = 20;
    for (;;) {
      try {
        return await this.attempt(call);
      } catch (e) {
        const retry = (e instanceof AgentdConnectionError && !(e instanceof AgentdTimeout)) || e instanceof Unavailable;
        if (!retry || !idempotent || !this.reached || this.retryFor <= 0 || Date.now() >= giveUp) throw e;
        this.retries++;
        await sleep(Math.min(pause, Math.max(0, giveUp - Date.now())));
        pause = Math.min(pause * 2, 1000);
      }
    }
  }

  private async attempt<T>(call: Call<T>): Promise<T> {
    if (this.conn && this.conn.closed) this.close();
    if (!this.conn) this.conn = await Conn.open(this.socketPath, this.timeout);
    const conn = this.conn;
    const id = ++this.nextId;
    const data = encode(call.op, call.fields, id);
    // A request over max_line: agentd answers too_large and closes the connection while the rest is
    // still being written. The write fails then, but the reply is there to read.
    let sendError: Error | null = null;
    try {
      await conn.write(data);
    } catch (e) {
      sendError = e as Error;
    }
    const wait = sendError ? 1000 : call.extra === NO_LIMIT ? null : this.timeout + (call.extra ?? 0);
    let line: string | null;
    try {
      line = await conn.readLine(wait);
    } catch (e) {
      if (!(e instanceof AgentdTimeout)) throw e;
      this.close();
      if (!sendError) throw new AgentdTimeout(`no reply from agentd within ${wait} ms`, call.op, true);
      line = null;
    }
    if (line === null) {
      this.close();
      const err = sendError ?? conn.error;
      throw new AgentdConnectionError(err ? `connection to agentd lost: ${err.message}`
        : "agentd closed the connection before replying", call.op, true);
    }
    let reply: Record<string, unknown>;
    try {
      reply = decode(line, call.op, id);
    } catch (e) {
      this.close();
      throw e;
    }
    this.reached = true;
    if (reply.ok === false) {
      // agentd closes the connection after too_large; unavailable: it is going away.
      if (reply.error === "too_large" || reply.error === "unavailable") this.close();
      throw errorFromReply(reply, call.op);
    }
    try {
      return call.parse(reply);
    } catch (e) {
      throw new AgentdError(`unexpected reply (${(e as Error).message}): ${line.slice(0, 200)}`, null, call.op);
    }
  }

  /** Any request, for ops or fields this client has no method for: the reply (ok: true), or the error
   * thrown. Not sent again after a lost connection unless op is a read or send. */
  request(op: string, fields: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    return this.run({ op, fields, parse: (r) => r });
  }

  /** agentd's version. */
  ping(): Promise<string> {
    return this.run({ op: "ping", fields: {}, parse: (r) => need(r, "version") as string });
  }

  /** Create a conversation; its id (generated as c- and 16 hex digits unless given). Conflict when it
   * exists; BadRequest for an unknown model or tool, or metadata out of bounds. */
  create(model: string, o: CreateOptions = {}): Promise<string> {
    const settings = opt({ model, system: o.system, tools: o.tools, params: o.params, budget: o.budget,
      max_tool_rounds: o.maxToolRounds, on_busy: o.onBusy });
    return this.run({ op: "create", fields: opt({ conversation: o.conversation, settings, metadata: o.metadata }),
      parse: (r) => need(r, "conversation") as string });
  }

  /** The conversation. NotFound when there is none. */
  get(conversation: string): Promise<Conversation> {
    return this.run({ op: "get", fields: { conversation }, parse: (r) => need(r, "conversation") as Conversation });
  }

  /** One page of conversations in id order; pass page.next as `after` (with the same filters) for the next. */
  list(o: ListOptions = {}): Promise<ConversationPage> {
    return this.run({
      op: "list",
      fields: opt({ status: o.status, limit: o.limit, after: o.after, metadata: o.metadata, model: o.model,
        updated_after: o.updatedAfter, updated_before: o.updatedBefore }),
      parse: (r) => opt({ conversations: need(r, "conversations"), next: r.next }) as unknown as ConversationPage,
    });
  }

  /** Merge settings into the conversation's, and/or end it, and/or merge metadata. */
  async update(conversation: string, o: UpdateOptions = {}): Promise<void> {
    const settings = opt({ model: o.model, system: o.system, tools: o.tools, params: o.params, on_busy: o.onBusy });
    const fields: Record<string, unknown> = { conversation };
    if (Object.keys(settings).length) fields.settings = settings;
    if (o.metadata !== undefined) fields.metadata = o.metadata;
    if (o.end) fields.status = "ended";
    await this.run({ op: "update", fields, parse: () => undefined });
  }

  /** Remove the conversation and everything of it: true, or false when it did not exist. */
  delete(conversation: string): Promise<boolean> {
    return this.run({ op: "delete", fields: { conversation }, parse: (r) => need(r, "deleted") as boolean });
  }

  /** Append a user message (a string is stored as {"text": ...}); resolves once it is durably committed.
   * Safe to retry: the same eventId lands once (duplicate: true says an earlier attempt had landed). */
  send(conversation: string, content: string | Record<string, Json>, o: SendOptions = {}): Promise<SendResult> {
    const eventId = o.eventId ?? newEventId();
    return this.run({
      op: "send",
      fields: opt({ conversation, content, event_id: eventId, expected_seq: o.expectedSeq, on_busy: o.onBusy }),
      parse: (r) => opt({ seq: need(r, "seq"), duplicate: r.duplicate === true, event_id: eventId,
        status: r.status, on_busy: r.on_busy, interrupted: r.interrupted,
        rejected: (r.rejected as string[]) ?? [] }) as unknown as SendResult,
    });
  }

  /** Append several user messages in one transaction (all or none). */
  sendBatch(conversation: string, contents: (string | Record<string, Json>)[],
    o: { eventIds?: string[]; expectedSeq?: number; onBusy?: OnBusy } = {}): Promise<BatchResult> {
    const eventIds = o.eventIds ?? contents.map(() => newEventId());
    if (eventIds.length !== contents.length) {
      return Promise.reject(new RangeError(`eventIds has ${eventIds.length} entries for ${contents.length} contents`));
    }
    const events = contents.map((content, i) => ({ content, event_id: eventIds[i] }));
    return this.run({
      op: "send",
      fields: opt({ conversation, events, expected_seq: o.expectedSeq, on_busy: o.onBusy }),
      parse: (r) => ({ seqs: need(r, "seqs") as number[], duplicates: (r.duplicates as number[]) ?? [],
        event_ids: eventIds, rejected: (r.rejected as string[]) ?? [] }),
    });
  }

  /** send, then wait for the turn it causes to end: a TurnResult whose status says how (completed,
   * suspended, error, cancelled, paused, or timeout after timeout ms counted from before the send;
   * Infinity: no limit; default the client's timeout). Throws what send throws, and NotFound when the
   * conversation is deleted while waiting. A message sent while the conversation waits for a person is
   * answered only after that call is settled, and a conversation ended while waiting runs no turn: both
   * wait until the timeout. It long-polls `events` on this connection: other calls on this client wait
   * behind it. */
  async sendAndWait(conversation: string, content: string | Record<string, Json>,
    o: SendOptions & { timeout?: number } = {}): Promise<TurnResult> {
    const deadline = Date.now() + (o.timeout ?? this.timeout);
    const sent = await this.send(conversation, content, o);
    if (sent.status === "paused") return turnResult("paused", sent.seq, [], sent);
    const r = await this.waitUntil(conversation, sent.seq, deadline);
    r.send = sent;
    return r;
  }

  /** Wait for the turn that answers the events up to seq (a user_msg's seq, or a resolution's after an
   * approval) to end: a TurnResult as sendAndWait's (timeout past timeout ms; Infinity: no limit; default
   * the client's timeout). Resolves at once when the log already holds the end. */
  waitTurn(conversation: string, seq: number, o: { timeout?: number } = {}): Promise<TurnResult> {
    return this.waitUntil(conversation, seq, Date.now() + (o.timeout ?? this.timeout));
  }

  private async waitUntil(conversation: string, seq: number, deadline: number): Promise<TurnResult> {
    const turn = new Turn(seq);
    let after = seq;
    for (let polled = false; ; polled = true) {
      const left = deadline - Date.now();
      if (left <= 0 && polled) return turnResult("timeout", seq, turn.events);
      const waitMs = Math.max(0, Math.min(LONG_POLL_MAX_MS, Math.ceil(left)));
      const page = await this.events(conversation, { after, waitMs });
      const end = turn.feed(page.events, page.next_after !== undefined);
      if (end) return turnResult(end[0], seq, end[1]);
      if (page.next_after !== undefined) after = page.next_after;
      else if (page.events.length) after = page.events[page.events.length - 1].seq;
    }
  }

  /** Events of the log: after/before are exclusive seq bounds, limit keeps the newest in range, type
   * filters, waitMs long-polls (the client's timeout is extended by it). */
  events(conversation: string, o: EventsOptions = {}): Promise<EventPage> {
    return this.run({
      op: "events",
      fields: opt({ conversation, after: o.after, before: o.before, limit: o.limit, type: o.type, wait_ms: o.waitMs }),
      parse: (r) => opt({ events: need(r, "events"), last_seq: need(r, "last_seq"), next_after: r.next_after,
        first_seq: r.first_seq }) as unknown as EventPage,
      extra: o.waitMs ?? 0,
    });
  }

  /** Settle a pending human tool call with result (any JSON value). Stale when it is not pending. */
  resolve(toolCallId: string, result?: Json, o: ResolveOptions = {}): Promise<Resolution> {
    const fields = opt({ tool_call_id: toolCallId, status: o.status, by: o.by, args_digest: o.argsDigest });
    if (result !== undefined) fields.result = result;
    return this.run({ op: "resolve", fields,
      parse: (r) => opt({ seq: need(r, "seq"), conversation: r.conversation, settled: r.settled,
        approvals: r.approvals, approvers: r.approvers }) as unknown as Resolution });
  }

  /** A person's yes: resolve with {"approved": true} (and "comment" when given), as agentctl approve does. */
  approve(toolCallId: string, o: DecisionOptions = {}): Promise<Resolution> {
    return this.resolve(toolCallId, opt({ approved: true, comment: o.comment }) as Json,
      { by: o.by, argsDigest: o.argsDigest });
  }

  /** A person's no: resolve with {"approved": false} (and "comment" when given), as agentctl deny does. */
  deny(toolCallId: string, o: DecisionOptions = {}): Promise<Resolution> {
    return this.resolve(toolCallId, opt({ approved: false, comment: o.comment }) as Json,
      { by: o.by, argsDigest: o.argsDigest });
  }

  /** Move a pending human tool call's deadline (durably): o.expiresInMs from now or to o.deadline. NotFound
   * (no such call in that conversation), Stale (not pending), Conflict (it never expires), BadRequest (a
   * deadline not in the future; both or neither given). */
  extend(conversation: string, toolCallId: string, o: ExtendOptions): Promise<Extension> {
    const fields = opt({ conversation, tool_call_id: toolCallId, expires_in_ms: o.expiresInMs, deadline: o.deadline,
      by: o.by });
    return this.run({ op: "extend", fields,
      parse: (r) => opt({ seq: need(r, "seq"), deadline: need(r, "deadline"), conversation: r.conversation }) as
        unknown as Extension });
  }

  /** Give the conversation a durable wakeup: o.at, o.after or o.cron (docs/protocol.md, schedule). When it
   * fires the conversation gets a `scheduled` event with text and runs a turn. NotFound (no such
   * conversation), Conflict (ended), BadRequest (none of at, after and cron; both at and after; at in the
   * past; a bad cron spec; text empty or over 65,536 bytes). Not retried on a lost reply. */
  schedule(conversation: string, text: string, o: ScheduleOptions): Promise<Schedule> {
    return this.run({ op: "schedule", fields: opt({ conversation, text, at: o.at, after: o.after, cron: o.cron }),
      parse: (r) => ({ schedule: need(r, "schedule"), conversation: need(r, "conversation"), due: need(r, "due"),
        cron: r.cron ?? null }) as unknown as Schedule });
  }

  /** The scheduled wakeups, of one conversation when given (NotFound when it does not exist), earliest first. */
  schedules(o: { conversation?: string } = {}): Promise<Schedule[]> {
    return this.run({ op: "schedules", fields: opt({ conversation: o.conversation }),
      parse: (r) => need(r, "schedules") as Schedule[] });
  }

  /** Remove a scheduled wakeup before it fires. NotFound when there is none (a once one that fired is gone). */
  unschedule(scheduleId: string): Promise<void> {
    return this.run({ op: "unschedule", fields: { schedule: scheduleId }, parse: () => undefined });
  }

  /** Decide a tool call whose outcome is unknown (docs/tools.md): "retry" dispatches it again (same id),
   * "done" records result as its result, "failed" a failure the model sees (result, when given). Stale
   * when it is not unknown; NotFound when the conversation has no such call. Not retried on a lost reply. */
  settle(conversation: string, toolCallId: string, outcome: "retry" | "done" | "failed", result?: Json,
    o: { by?: string } = {}): Promise<Settlement> {
    const fields = opt({ conversation, tool_call_id: toolCallId, outcome, by: o.by });
    if (result !== undefined) fields.result = result;
    return this.run({ op: "settle", fields,
      parse: (r) => ({ seq: need(r, "seq"), conversation: need(r, "conversation"), outcome: need(r, "outcome") }) as
        unknown as Settlement });
  }

  /** What waits for someone, of every conversation, conversations in id order: the pending human tool calls
   * (kind "approval") and the calls whose outcome is unknown (kind "unknown"). The protocol has no op for
   * it: as agentctl pending, the suspended conversations (list, page by page), then each one's pending
   * and unknown calls; a conversation deleted meanwhile is skipped. */
  async pending(): Promise<ToolCall[]> {
    const out: ToolCall[] = [];
    let after: string | undefined;
    do {
      const page = await this.list({ status: "suspended", limit: 1000, after });
      for (const c of page.conversations) {
        try {
          const approvals = await this.toolCalls(c.id, { status: "pending" });
          const unknown = await this.toolCalls(c.id, { status: "unknown" });
          out.push(...approvals.map((t) => ({ ...t, kind: "approval" as const })),
            ...unknown.map((t) => ({ ...t, kind: "unknown" as const })));
        } catch (e) {
          if (!(e instanceof NotFound)) throw e;
        }
      }
      after = page.next;
    } while (after !== undefined);
    return out;
  }

  /** One tool call. NotFound when there is none. */
  toolCall(toolCallId: string): Promise<ToolCall> {
    return this.run({ op: "tool_call", fields: { tool_call_id: toolCallId },
      parse: (r) => need(r, "tool_call") as ToolCall });
  }

  /** The conversation's tool calls in id order, of one status when given. */
  toolCalls(conversation: string, o: { status?: ToolCallStatus } = {}): Promise<ToolCall[]> {
    return this.run({ op: "tool_calls", fields: opt({ conversation, status: o.status }),
      parse: (r) => need(r, "tool_calls") as ToolCall[] });
  }

  /** The latest summary, or null. */
  summary(conversation: string): Promise<Summary | null> {
    return this.run({ op: "summary", fields: { conversation }, parse: (r) => need(r, "summary") as Summary | null });
  }

  /** Compact now; the latest summary (null when the log is too short). No time limit. */
  compact(conversation: string): Promise<Summary | null> {
    return this.run({ op: "compact", fields: { conversation }, parse: (r) => need(r, "summary") as Summary | null,
      extra: NO_LIMIT });
  }

  /** The recorded model calls (empty unless audit is on). */
  audit(conversation: string): Promise<Record<string, Json>[]> {
    return this.run({ op: "audit", fields: { conversation },
      parse: (r) => need(r, "model_calls") as Record<string, Json>[] });
  }

  /** Signal the conversation's worker (KILL by default, or TERM): the pid signalled, or null. */
  kill(conversation: string, o: { signal?: "KILL" | "TERM" } = {}): Promise<number | null> {
    return this.run({ op: "kill", fields: opt({ conversation, signal: o.signal }),
      parse: (r) => need(r, "pid") as number | null });
  }

  /** Hibernate the conversation's worker: true when one was told to. */
  stop(conversation: string): Promise<boolean> {
    return this.run({ op: "stop", fields: { conversation }, parse: (r) => need(r, "stopping") as boolean });
  }

  /** The conversation's runs, newest first; page on with before = page.next. */
  runs(conversation: string, o: { limit?: number; before?: number } = {}): Promise<RunPage> {
    return this.run({ op: "runs", fields: opt({ conversation, limit: o.limit, before: o.before }),
      parse: (r) => opt({ runs: need(r, "runs"), next: r.next }) as unknown as RunPage });
  }

  /** Cancel the running (or owed) turn for good. Conflict when the conversation is ended. */
  cancel(conversation: string): Promise<Cancelled> {
    return this.run({ op: "cancel", fields: { conversation }, parse: (r) => rest(r) as unknown as Cancelled });
  }

  /** Start the conversation's worker now, without a new event. Conflict when it is ended. */
  resume(conversation: string): Promise<Resumed> {
    return this.run({ op: "resume", fields: { conversation }, parse: (r) => rest(r) as unknown as Resumed });
  }

  /** agentd's status: version, uptime, workers, store (and node on a shared store). */
  status(): Promise<Status> {
    return this.run({ op: "status", fields: {}, parse: (r) => rest(r) as unknown as Status });
  }

  /** The Prometheus text exposition. */
  metrics(): Promise<string> {
    return this.run({ op: "metrics", fields: {}, parse: (r) => need(r, "text") as string });
  }

  /** The nodes sharing the store (one on LMDB). */
  nodes(): Promise<Record<string, unknown>> {
    return this.run({ op: "nodes", fields: {}, parse: (r) => rest(r) });
  }

  /** A new conversation whose log is conversation's events 1..seq. Not sent again after a lost
   * connection (a retry would fork twice): on AgentdConnectionError with .sent, get() the id to see. */
  fork(conversation: string, seq: number, o: ForkOptions = {}): Promise<ForkResult> {
    const settings = opt({ model: o.model, system: o.system, tools: o.tools, params: o.params });
    const fields = opt({ conversation, seq, new_conversation: o.newConversation, metadata: o.metadata });
    if (Object.keys(settings).length) fields.settings = settings;
    return this.run({ op: "fork", fields, parse: (r) => rest(r) as unknown as ForkResult });
  }

  /** Copy the store into dir (new or empty; made absolute here) while agentd serves. No time limit. */
  backup(dir: string): Promise<BackupResult> {
    return this.run({ op: "backup", fields: { path: path.resolve(dir) }, extra: NO_LIMIT,
      parse: (r) => ({ path: need(r, "path") as string, bytes: need(r, "bytes") as number, ms: need(r, "ms") as number }) });
  }

  /** Stop agentd (workers hibernate first); resolves once agentd acknowledged it. */
  async shutdown(): Promise<void> {
    await this.run({ op: "shutdown", fields: {}, parse: () => undefined, extra: NO_LIMIT });
  }

  /** Follow the conversation on a connection of its own (see Watch). Errors of the request (NotFound,
   * ...) are thrown here. */
  watch(conversation: string, o: WatchOptions = {}): Promise<Watch> {
    return Watch.open(this.socketPath, conversation, o, this.timeout, this.retryFor);
  }
}

function need(r: Record<string, unknown>, key: string): unknown {
  if (!(key in r)) throw new Error(`the reply has no "${key}"`);
  return r[key];
}

