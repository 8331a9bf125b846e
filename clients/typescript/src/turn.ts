/**
 * Where the turn that answers a seq ends, read from the log alone: the rule the Python client's
 * wait_turn follows, so both clients end the same wait at the same event.
 *
 * The turn that answers seq is made of the model rounds whose assistant_msg has context_seq >= seq (a
 * round that started before seq answers an earlier message, and its tool calls are that turn's). A
 * round's assistant_msg, its tool_call and suspension events commit in one transaction, and every events
 * reply holds whole transactions, so a round is seen whole: one with no tool_call is the turn's last.
 */
import type { Event, Json, SendResult, TurnResult, TurnStatus } from "./types.js";

type Content = Record<string, Json>;

function contentOf(ev: Event): Content {
  const c = ev.content;
  return c !== null && typeof c === "object" && !Array.isArray(c) ? (c as Content) : {};
}

/** The ids of the calls a suspended turn waits for, oldest first: those of its last round with a
 * suspension or a tool_unknown that no resolution, tool_result or tool_retry settled. */
function waitingFor(events: Event[]): string[] {
  const settled = new Set<Json>();
  let start = 0;
  events.forEach((e, i) => {
    if (e.type === "assistant_msg") start = i;
    if (e.type === "resolution" || e.type === "tool_result" || e.type === "tool_retry") {
      settled.add(contentOf(e).tool_call_id);
    }
  });
  const out: string[] = [];
  for (const e of events.slice(start)) {
    const id = contentOf(e).tool_call_id;
    if ((e.type === "suspension" || e.type === "tool_unknown") && typeof id === "string" &&
      !settled.has(id) && !out.includes(id)) out.push(id);
  }
  return out;
}

/** The result of a wait that ended with status, over events (and the send that began it, if any). */
export function turnResult(status: TurnStatus, seq: number, events: Event[], send?: SendResult): TurnResult {
  let text: string | undefined;
  for (let i = events.length - 1; i >= 0 && text === undefined; i--) {
    const t = contentOf(events[i]).text;
    if (events[i].type === "assistant_msg" && typeof t === "string") text = t;
  }
  const r: TurnResult = {
    status, seq, events, last_seq: events.length ? events[events.length - 1].seq : seq,
    pending: status === "suspended" ? waitingFor(events) : [],
  };
  if (text !== undefined) r.text = text;
  if (status === "error" && events.length) r.error = events[events.length - 1].content;
  if (send) r.send = send;
  return r;
}

/** Follows a conversation's log after seq; feed() gives the status once the turn has ended. */
export class Turn {
  readonly events: Event[] = [];
  private answering = false; // a round of the turn was seen
  private roundOpen = false; // its assistant_msg was the last event but for its tool calls
  private roundCalls = 0;
  private readonly open = new Set<Json>(); // the latest round's calls not settled yet
  private readonly suspended = new Set<Json>(); // those of them waiting for someone
  private waitingAt: number | undefined; // events.length when every open call came to wait

  constructor(readonly seq: number) {}

  /** Take the next events of the log: the ending [status, events up to the end], or undefined while the
   * turn goes on. more: the reply stopped at its cap with events left (a round may go on in the next). */
  feed(events: Event[], more: boolean): [TurnStatus, Event[]] | undefined {
    for (const ev of events) {
      const c = contentOf(ev);
      if (this.roundOpen && ev.type !== "tool_call" && ev.type !== "suspension") {
        this.roundOpen = false;
        if (this.roundCalls === 0) return ["completed", this.events];
      }
      const afterSeq = typeof c.context_seq === "number" && c.context_seq >= this.seq;
      const call = c.tool_call_id;
      this.events.push(ev);
      if (ev.type === "assistant_msg" && afterSeq) {
        this.answering = this.roundOpen = true;
        this.roundCalls = 0;
        this.open.clear();
        this.suspended.clear();
      } else if (ev.type === "tool_call" && this.answering) {
        this.roundCalls++;
        this.open.add(call);
      } else if ((ev.type === "suspension" || ev.type === "tool_unknown") && this.open.has(call)) {
        this.suspended.add(call); // a person's call, or one whose outcome is unknown: both wait
      } else if (ev.type === "tool_retry") {
        this.suspended.delete(call); // decided: it runs again
      } else if (ev.type === "tool_result" || ev.type === "resolution") {
        this.open.delete(call);
        this.suspended.delete(call);
      } else if (ev.type === "error" && afterSeq) {
        return ["error", this.events];
      } else if (ev.type === "turn_cancelled" && afterSeq && !("interrupted_by" in c)) {
        return ["cancelled", this.events]; // an interrupting send's is no end: the next turn answers
      } else if (ev.type === "budget_exceeded") {
        return ["paused", this.events];
      }
      if (this.open.size && [...this.open].every((x) => this.suspended.has(x))) {
        if (this.waitingAt === undefined) this.waitingAt = this.events.length;
      } else {
        this.waitingAt = undefined;
      }
    }
    if (more) return undefined;
    if (this.roundOpen && this.roundCalls === 0) return ["completed", this.events];
    if (this.waitingAt !== undefined) return ["suspended", this.events.slice(0, this.waitingAt)];
    return undefined;
  }
}
