/**
 * Errors: one class per error code of the control protocol (docs/protocol.md, "Errors"), all subclasses
 * of AgentdError. An error reply `{"ok": false, "error": CODE, "message": ...}` is thrown as the class of
 * CODE, carrying .code, .message and .op. A code this client does not know (a newer agentd) is thrown as
 * AgentdError itself with that .code. Failing to talk to agentd at all (no socket, the connection lost, no
 * reply in time) throws AgentdConnectionError, whose .code is null since agentd never replied.
 */

export class AgentdError extends Error {
  /** The protocol's error code, or null for a connection failure. */
  readonly code: string | null;
  /** The op that failed (null when not known). */
  readonly op: string | null;
  /** agentd's message, without the op and code this error's .message adds. */
  readonly detail: string;

  constructor(detail: string, code: string | null = null, op: string | null = null) {
    const where = op ? `${op}: ` : "";
    super(code ? `${where}${code}: ${detail}` : `${where}${detail}`);
    this.name = new.target.name;
    this.code = code;
    this.op = op;
    this.detail = detail;
  }
}

/** `bad_request`: a malformed or ill-typed request, an unknown field, model or tool; also thrown before
 * sending for a value that cannot be encoded as JSON. */
export class BadRequest extends AgentdError {}
/** `unknown_op`: the op names no op (only reachable through Client.request). */
export class UnknownOp extends AgentdError {}
/** `not_found`: no such conversation or tool call. */
export class NotFound extends AgentdError {}
/** `conflict`: the conversation exists (create), is ended (send, update), or a send's expectedSeq is not
 * its last seq: .lastSeq is then that seq. */
export class Conflict extends AgentdError {
  lastSeq: number | null = null;
}
/** `stale`: resolve of a tool call that is not pending (unknown, settled, expired). */
export class Stale extends AgentdError {}
/** `too_large`: the request line is over agentd's max_line; agentd closed the connection after it. */
export class TooLarge extends AgentdError {}
/** `store_full`: the store's map or the disk is full; nothing of the request was written. */
export class StoreFull extends AgentdError {}
/** `unavailable`: agentd is shutting down, refused this peer, or the store cannot take writes for now. */
export class Unavailable extends AgentdError {}
/** `internal`: anything else (the message says what). */
export class Internal extends AgentdError {}
/** `busy`: a backup while another backup runs. */
export class Busy extends AgentdError {}
/** `unsupported`: backup on a PostgreSQL store. */
export class Unsupported extends AgentdError {}

/** agentd could not be reached, the connection was lost, or no reply came in time. .sent tells whether
 * the request had been written: a request that was sent may have been executed. */
export class AgentdConnectionError extends AgentdError {
  readonly sent: boolean;
  constructor(detail: string, op: string | null = null, sent = false) {
    super(detail, null, op);
    this.sent = sent;
  }
}

/** No reply within the client's timeout (the connection is closed: a late reply is never taken for the
 * next request's). */
export class AgentdTimeout extends AgentdConnectionError {}

type ErrorClass = new (detail: string, code: string | null, op: string | null) => AgentdError;

export const ERRORS: Readonly<Record<string, ErrorClass>> = Object.freeze({
  bad_request: BadRequest,
  unknown_op: UnknownOp,
  not_found: NotFound,
  conflict: Conflict,
  stale: Stale,
  too_large: TooLarge,
  store_full: StoreFull,
  unavailable: Unavailable,
  internal: Internal,
  busy: Busy,
  unsupported: Unsupported,
});

/** The error for an error reply: the class of its code, or AgentdError for a code not known here. */
export function errorFromReply(reply: Record<string, unknown>, op: string | null): AgentdError {
  const code = reply.error;
  const message = typeof reply.message === "string" ? reply.message : "(no message)";
  if (typeof code !== "string") {
    return new AgentdError(`error reply without a code: ${JSON.stringify(reply).slice(0, 200)}`, "internal", op);
  }
  const cls = Object.prototype.hasOwnProperty.call(ERRORS, code) ? ERRORS[code] : undefined;
  if (!cls) return new AgentdError(message, code, op);
  const err = new cls(message, code, op);
  if (err instanceof Conflict && typeof reply.last_seq === "number") err.lastSeq = reply.last_seq;
  return err;
}
