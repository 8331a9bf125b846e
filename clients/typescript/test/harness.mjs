// The real agentd for the client's tests: started in a temporary directory (agentd- prefix, removed
// after), from AGENTD_BUILD_DIR (default: ../../build). Waits for conditions, never for a fixed time.
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, "../../..");
export const BUILD = process.env.AGENTD_BUILD_DIR || path.join(REPO, "build");
// The compiled client: AGENTD_TS_DIST (the build directory's copy, as ctest compiles it) or ../dist.
export const DIST = process.env.AGENTD_TS_DIST || path.resolve(here, "../dist");
// Sanitizer and valgrind builds are slower: every bound grows with AGENTD_TEST_SLOW.
export const SLOW = Number(process.env.AGENTD_TEST_SLOW || 1);

export const HUMAN_TOOL = `
[tool.approve]
executor = human
prompt = Approve the payment?
expires = 1h

[tool.gate]
executor = human
expires = 1h
on_user_message = reject
`;

export async function waitFor(pred, what, timeoutMs = 20000) {
  const end = Date.now() + timeoutMs * SLOW;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export class Agentd {
  constructor(config = HUMAN_TOOL) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "agentd-ts-"));
    this.data = path.join(this.dir, "data");
    this.socket = path.join(this.dir, "agentd.sock");
    this.config = path.join(this.dir, "agentd.ini");
    this.log = path.join(this.dir, "agentd.log");
    fs.writeFileSync(this.config, config);
    this.proc = null;
    this.exited = null;
  }

  async start() {
    const out = fs.openSync(this.log, "a");
    this.proc = spawn(path.join(BUILD, "agentd"),
      ["--data", this.data, "--socket", this.socket, "--config", this.config], { stdio: ["ignore", out, out] });
    fs.closeSync(out);
    this.exited = new Promise((resolve) => this.proc.once("exit", (code, signal) => resolve({ code, signal })));
    const { Client } = await import(path.join(DIST, "index.js"));
    await waitFor(async () => {
      if (this.proc.exitCode !== null) throw new Error(`agentd exited: ${this.tail()}`);
      const c = new Client({ socket: this.socket, retryFor: 0, timeout: 2000 * SLOW });
      try {
        return await c.ping();
      } catch {
        return false;
      } finally {
        c.close();
      }
    }, "agentd to answer ping");
    return this;
  }

  kill9() {
    this.proc.kill("SIGKILL");
    return this.exited;
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGTERM");
      const r = await this.exited;
      if (r.code !== 0) throw new Error(`agentd exited ${r.code} ${r.signal}: ${this.tail()}`);
    }
  }

  tail() {
    try {
      return fs.readFileSync(this.log, "utf8").split("\n").slice(-20).join("\n");
    } catch {
      return "(no log)";
    }
  }

  async close() {
    try {
      await this.stop();
    } finally {
      fs.rmSync(this.dir, { recursive: true, force: true });
    }
  }
}
