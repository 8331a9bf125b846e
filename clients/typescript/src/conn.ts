/**
 * One connection to agentd's control socket with a line buffer: what Client and Watch stand on.
 * Internal to the package.
 */
import * as net from "node:net";
import { AgentdConnectionError, AgentdTimeout } from "./errors.js";

/** The longest socket path Linux takes (sizeof(sockaddr_un.sun_path) - 1). */
export const SUN_PATH_MAX = 107;

export class Conn {
  private readonly sock: net.Socket;
  private buf: Buffer = Buffer.alloc(0);
  private readonly lines: Buffer[] = [];
  private eof = false;
  private failure: Error | null = null;
  private wake: (() => void) | null = null;

  private constructor(sock: net.Socket) {
    this.sock = sock;
    sock.on("data", (chunk: Buffer) => this.take(chunk));
    sock.on("end", () => this.finish(null));
    sock.on("error", (e: Error) => this.finish(e));
    sock.on("close", () => this.finish(null));
  }

  /** Connect to path within timeoutMs: AgentdConnectionError (with a hint when nothing listens there)
   * or AgentdTimeout. */
  static open(path: string, timeoutMs: number): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ path });
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new AgentdTimeout(`cannot connect to ${path}: timed out`));
      }, timeoutMs);
      const fail = (e: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        sock.destroy();
        const hint = e.code === "ENOENT" || e.code === "ECONNREFUSED" ? " (is agentd running?)" : "";
        reject(new AgentdConnectionError(`cannot connect to ${path}: ${e.message}${hint}`));
      };
      sock.once("error", fail);
      sock.once("connect", () => {
        clearTimeout(timer);
        sock.removeListener("error", fail);
        resolve(new Conn(sock));
      });
    });
  }

  private take(chunk: Buffer): void {
    let data = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    let nl: number;
    while ((nl = data.indexOf(10)) >= 0) {
      this.lines.push(data.subarray(0, nl));
      data = data.subarray(nl + 1);
    }
    this.buf = data;
    this.poke();
  }

  private finish(e: Error | null): void {
    this.eof = true;
    if (e && !this.failure) this.failure = e;
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = null;
    if (w) w();
  }

  /** Whether the peer has closed the connection (checked before a request that must not go out twice). */
  get closed(): boolean {
    return this.eof;
  }

  /** The error that ended the connection, if any. */
  get error(): Error | null {
    return this.failure;
  }

  /** Write data; rejects with the socket's error (a refusal may still be there to read). */
  write(data: string): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.eof) {
        reject(this.failure ?? new Error("the connection is closed"));
        return;
      }
      this.sock.write(data, (e) => (e ? reject(e) : resolve()));
    });
  }

  /** The next line (without its newline) as text; null at the end of the stream. timeoutMs null waits
   * without a limit; past it, AgentdTimeout (the partial line stays buffered). */
  async readLine(timeoutMs: number | null): Promise<string | null> {
    const deadline = timeoutMs === null ? null : Date.now() + timeoutMs;
    for (;;) {
      const line = this.lines.shift();
      if (line !== undefined) return line.toString("utf8");
      if (this.eof) return null;
      const left = deadline === null ? null : deadline - Date.now();
      if (left !== null && left <= 0) throw new AgentdTimeout("timed out");
      await new Promise<void>((resolve) => {
        const timer = left === null ? null : setTimeout(() => {
          this.wake = null;
          resolve();
        }, left);
        this.wake = () => {
          if (timer) clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  close(): void {
    this.eof = true;
    this.sock.destroy();
    this.poke();
  }
}
