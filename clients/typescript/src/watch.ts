/**
 * Watch: an async iterator over a `watch` stream on a connection of its own. It yields
 * {event} (every event, in seq order, no gaps), {delta} (a model's streamed text: a preview a slow
 * reader may miss) and, with runs: true, {run} (a run starting or ending).
 */
import { Conn } from "./conn.js";
import { AgentdConnectionError, AgentdTimeout, NotFound, Unavailable, errorFromReply } from "./errors.js";
import type { Event, Run } from "./types.js";

export interface WatchOptions {
  /** undefined: only events committed from now; 0: the whole log first, then live, with no gap. */
  after?: number;
  /** Open the stream again after a lost connection (for up to the client's retryFor), after the last
   * event yielded: none is missed or repeated; the watch then ends only with the conversation. */
  resume?: boolean;
  /** Also stream runs. */
  runs?: boolean;
}

export type WatchItem = { event: Event } | { delta: string } | { run: Run };

export class Watch implements AsyncIterable<WatchItem> {
  readonly conversation: string;
  /** The conversation's last seq when the watch started, then the seq of the last event yielded. */
  lastSeq = 0;
  /** Streams opened again after one ended. */
  resumes = 0;
  private conn: Conn | null = null;
  private closed = false;
  private pos = 0;

  private constructor(
    private readonly socket: string,
    conversation: string,
    private readonly options: WatchOptions,
    private readonly timeout: number,
    private readonly retryFor: number,
  ) {
    this.conversation = conversation;
  }

  static async open(socket: string, conversation: string, o: WatchOptions, timeout: number,
    retryFor: number): Promise<Watch> {
    const w = new Watch(socket, conversation, o, timeout, retryFor);
    const reply = await w.start(o.after);
    w.lastSeq = typeof reply.last_seq === "number" ? reply.last_seq : 0;
    w.pos = o.after === undefined ? w.lastSeq : o.after;
    return w;
  }

  private async start(after: number | undefined): Promise<Record<string, unknown>> {
    const fields: Record<string, unknown> = { op: "watch", conversation: this.conversation, id: 1 };
    if (after !== undefined) fields.after = after;
    if (this.options.runs) fields.runs = true;
    const conn = await Conn.open(this.socket, this.timeout);
    try {
      await conn.write(JSON.stringify(fields) + "\n").catch(() => undefined); // a refusal may be there to read
      let line: string | null;
      try {
        line = await conn.readLine(this.timeout);
      } catch (e) {
        if (e instanceof AgentdTimeout) throw new AgentdTimeout(`no reply from agentd within ${this.timeout} ms`, "watch", true);
        throw e;
      }
      if (line === null) throw new AgentdConnectionError("agentd closed the connection before replying", "watch", true);
      let reply: Record<string, unknown>;
      try {
        reply = JSON.parse(line);
      } catch {
        throw new AgentdConnectionError(`agentd sent a line that is not JSON: ${line.slice(0, 200)}`, "watch", true);
      }
      if (reply.ok !== true) throw errorFromReply(reply, "watch");
      this.conn = conn;
      return reply;
    } catch (e) {
      conn.close();
      throw e;
    }
  }

  /** Open the stream again after pos: true, or false when the conversation is gone. */
  private async reopen(): Promise<boolean> {
    const giveUp = Date.now() + this.retryFor;
    let pause = 20;
    for (;;) {
      try {
        await this.start(this.pos);
        this.resumes++;
        return true;
      } catch (e) {
        if (e instanceof NotFound) return false;
        if (!(e instanceof AgentdConnectionError || e instanceof Unavailable) || this.closed || Date.now() >= giveUp) {
          throw e;
        }
      }
      await new Promise((r) => setTimeout(r, Math.min(pause, Math.max(0, giveUp - Date.now()))));
      pause = Math.min(pause * 2, 1000);
    }
  }

  /** The next item; null when the stream ended. With timeoutMs, AgentdTimeout when nothing came in
   * time (the watch goes on: call again). */
  async next(timeoutMs: number | null = null): Promise<WatchItem | null> {
    for (;;) {
      if (!this.conn) return null;
      let line: string | null;
      try {
        line = await this.conn.readLine(timeoutMs);
      } catch (e) {
        if (e instanceof AgentdTimeout) throw new AgentdTimeout(`nothing from the watch within ${timeoutMs} ms`, "watch", false);
        throw e;
      }
      if (line === null) {
        this.conn.close();
        this.conn = null;
        if (this.options.resume && !this.closed && await this.reopen()) continue;
        this.closed = true;
        return null;
      }
      let obj: Record<string, unknown>;
      try {
        obj = JSON.parse(line);
      } catch {
        throw new AgentdConnectionError(`agentd sent a watch line that is not JSON: ${line.slice(0, 200)}`, "watch", true);
      }
      const ev = obj.event as Event | undefined;
      if (ev && typeof ev === "object" && typeof ev.seq === "number") {
        this.lastSeq = this.pos = ev.seq;
        return { event: ev };
      }
      const d = obj.delta as { text?: string } | undefined;
      if (d && typeof d === "object") return { delta: typeof d.text === "string" ? d.text : "" };
      const run = obj.run as Run | undefined;
      if (run && typeof run === "object") return { run };
      // a kind of line this client does not know: skipped
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<WatchItem> {
    try {
      for (;;) {
        const item = await this.next();
        if (item === null) return;
        yield item;
      }
    } finally {
      this.close();
    }
  }

  /** The events only (deltas and runs skipped). */
  async *events(): AsyncGenerator<Event> {
    for await (const item of this) if ("event" in item) yield item.event;
  }

  /** End the watch. */
  close(): void {
    this.closed = true;
    if (this.conn) this.conn.close();
    this.conn = null;
  }
}
