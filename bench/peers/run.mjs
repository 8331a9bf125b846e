// bench_peers: agentd beside the runtimes its users would pick instead (LangGraph.js with its SQLite and
// its PostgreSQL checkpointer, DBOS, Restate), on one closed-loop workload, from one Node driver process.
//
// The workload: C conversations, each a loop that durably records a user message, runs one echo "model
// step", durably records the reply and waits for it before its next message. For each C the systems run
// in turn within every round (the order rotated round by round), each cell on fresh conversations: a
// warm-up, then a timed window in which every finished turn is counted and timed; the CPU of each system's
// processes is read from /proc/PID/stat (utime+stime, and cutime+cstime of a tree's root) before and after
// the window. A ratio is agentd's turns/s over the peer's in the same round, printed as the median [range]
// over rounds. bench/peers/README.md says how to run it and what makes the comparison unfair to either side.
//
//   cd bench/peers && npm ci && node run.mjs [--c 1,16,64] [--rounds 2] [--seconds 5] [--warmup 2]
//       [--systems agentd,lg-sqlite,lg-pg,dbos,restate] [--agentd PATH] [--dir DIR] [--port-base 27000] [--keep]
import { spawn, execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { cpus, loadavg, release, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../..");

// ---- options
const opt = { c: [1, 16, 64], rounds: 2, seconds: 5, warmup: 2, systems: ["agentd", "lg-sqlite", "lg-pg", "dbos", "restate"],
  agentd: null, dir: null, portBase: 27000, keep: false };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i], v = () => process.argv[++i];
  if (a === "--c") opt.c = v().split(",").map(Number);
  else if (a === "--rounds") opt.rounds = Number(v());
  else if (a === "--seconds") opt.seconds = Number(v());
  else if (a === "--warmup") opt.warmup = Number(v());
  else if (a === "--systems") opt.systems = v().split(",");
  else if (a === "--agentd") opt.agentd = resolve(v());
  else if (a === "--dir") opt.dir = resolve(v());
  else if (a === "--port-base") opt.portBase = Number(v());
  else if (a === "--keep") opt.keep = true;
  else if (a === "-q") Object.assign(opt, { c: [1, 16], rounds: 1, seconds: 1, warmup: 0.5 });
  else { console.error(`run.mjs: unknown option ${a}`); process.exit(2); }
}
opt.agentd ??= [join(repo, "build-bench/agentd"), join(repo, "build/agentd")].find(existsSync);

// ---- helpers
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const TCK = 100; // USER_HZ: /proc/PID/stat counts clock ticks of 10 ms
function procStats() { // pid -> {ppid, ticks}
  const m = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    let s;
    try { s = readFileSync(`/proc/${d}/stat`, "utf8"); } catch { continue; }
    const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
    m.set(Number(d), { ppid: Number(f[1]), self: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]) });
  }
  return m;
}
// CPU seconds of the trees rooted at roots: every live process in them, and what each root has reaped.
function treeCpu(roots) {
  const m = procStats(), kids = new Map();
  for (const [pid, p] of m) { if (!kids.has(p.ppid)) kids.set(p.ppid, []); kids.get(p.ppid).push(pid); }
  let ticks = 0;
  for (const root of roots) {
    if (!m.has(root)) continue;
    ticks += m.get(root).reaped;
    const stack = [root];
    while (stack.length) {
      const pid = stack.pop();
      ticks += m.get(pid).self;
      for (const k of kids.get(pid) ?? []) stack.push(k);
    }
  }
  return ticks / TCK;
}
const selfCpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
function quantile(sorted, q) { return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN; }
function median(xs) { const s = [...xs].sort((a, b) => a - b); return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN; }
const fmt = (x, d = 3) => (Number.isFinite(x) ? (Math.abs(x) >= 100 ? x.toFixed(0) : x.toPrecision(d)) : "-");
async function until(what, ms, f) {
  const end = Date.now() + ms;
  for (;;) {
    try { if (await f()) return; } catch (e) { if (Date.now() > end) throw e; }
    if (Date.now() > end) throw new Error(`${what}: not ready after ${ms} ms`);
    await sleep(100);
  }
}
const children = [];
function start(cmd, args, o = {}) {
  const p = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"], ...o });
  p.stderrTail = "";
  p.stderr.on("data", (b) => { p.stderrTail = (p.stderrTail + b).slice(-4000); });
  children.push(p);
  return p;
}

// ---- the scratch directory: on a disk, never tmpfs, so that every flush is paid for
const base = opt.dir ?? mkdtempSync("/tmp/bench-peers-");
mkdirSync(base, { recursive: true });
chmodSync(base, 0o755); // the cluster runs as nobody (tests/pg/cluster.sh), who must reach pg/ in it
const pgDir = join(base, "pg");
let pgConn = null, pgPid = null; // a throwaway cluster (tests/pg/cluster.sh, durable: PostgreSQL's defaults)
function pgUrl(db) { return `postgresql://agentd@localhost:5432/${db}?host=${encodeURIComponent(join(pgDir, "sock"))}`; }
async function pgStart() {
  if (pgConn) return;
  pgConn = execFileSync(join(repo, "tests/pg/cluster.sh"), ["start", pgDir, "durable"], { encoding: "utf8" }).trim();
  pgPid = Number(readFileSync(join(pgDir, "data/postmaster.pid"), "utf8").split("\n")[0]);
  const { default: pg } = await import("pg");
  const c = new pg.Client({ connectionString: pgUrl("postgres") });
  await c.connect();
  for (const db of ["langgraph", "dbos_sys"]) await c.query(`CREATE DATABASE ${db}`);
  await c.end();
}

// ---- the systems: each has setup(), conv() -> an async turn(text), cpu() -> CPU seconds so far,
// counts (which processes its CPU column sums), durability (beside its row), stop()
const systems = {
  agentd: {
    durability: "agentd's default sync = full (LMDB; a reply, and an event a long-poll delivers, is durable)",
    counts: "agentd and its workers (process tree)",
    async setup() {
      if (!opt.agentd) throw new Error("no agentd binary: build it (cmake --build build) or pass --agentd");
      const { Client } = await import(join(repo, "clients/typescript/dist/index.js"));
      this.Client = Client;
      const data = join(base, "agentd");
      mkdirSync(data, { recursive: true });
      this.socket = join(data, "s.sock");
      this.proc = start(opt.agentd, ["--data", data, "--socket", this.socket]);
      await until("agentd", 20000, async () => {
        if (this.proc.exitCode !== null) throw new Error(`agentd exited: ${this.proc.stderrTail}`);
        if (!existsSync(this.socket)) return false;
        const c = new Client({ socket: this.socket, retryFor: 0 });
        try { await c.ping(); return true; } finally { c.close(); }
      });
      this.clients = [];
    },
    async conv() {
      const c = new this.Client({ socket: this.socket });
      this.clients.push(c);
      const id = await c.create("echo");
      // One turn: send (resolves once the message is durably committed), then long-poll the events after
      // it until the turn's assistant_msg (committed by the worker before it is visible).
      return async (text) => {
        let after = (await c.send(id, text)).seq;
        for (;;) {
          const page = await c.events(id, { after, waitMs: 30000 });
          for (const e of page.events) {
            if (e.type === "assistant_msg") return;
            if (e.type === "error") throw new Error(`agentd turn error: ${JSON.stringify(e.content)}`);
            after = e.seq;
          }
        }
      };
    },
    endCell() { for (const c of this.clients) c.close(); this.clients = []; },
    cpu() { return treeCpu([this.proc.pid]); },
    stop() { this.proc?.kill("SIGTERM"); },
  },

  "lg-sqlite": {
    durability: "SqliteSaver, WAL, synchronous=FULL; durability: \"sync\"",
    counts: "the driver's own Node process (LangGraph runs in it)",
    async setup() {
      const { StateGraph, MessagesAnnotation, START, END } = await import("@langchain/langgraph");
      const { AIMessage, HumanMessage } = await import("@langchain/core/messages");
      const { SqliteSaver } = await import("@langchain/langgraph-checkpoint-sqlite");
      const { default: Database } = await import("better-sqlite3");
      const db = new Database(join(base, "langgraph.sqlite"));
      const saver = new SqliteSaver(db);
      saver.setup(); // sets journal_mode=WAL and makes the tables
      db.pragma("synchronous = FULL"); // WAL's default NORMAL does not fsync at commit
      if (db.pragma("synchronous", { simple: true }) !== 2) throw new Error("synchronous is not FULL");
      this.Human = HumanMessage;
      this.app = echoGraph(StateGraph, MessagesAnnotation, START, END, AIMessage).compile({ checkpointer: saver });
      this.n = 0;
    },
    async conv() { return lgTurn(this, `t-${process.pid}-${this.n++}`); },
    cpu() { return selfCpu(); },
  },

  "lg-pg": {
    durability: "PostgresSaver on PostgreSQL 15 defaults (fsync, synchronous_commit on); durability: \"sync\"",
    counts: "PostgreSQL (postmaster tree) + the driver's own Node process (LangGraph runs in it)",
    async setup() {
      await pgStart();
      const { StateGraph, MessagesAnnotation, START, END } = await import("@langchain/langgraph");
      const { AIMessage, HumanMessage } = await import("@langchain/core/messages");
      const { PostgresSaver } = await import("@langchain/langgraph-checkpoint-postgres");
      const saver = PostgresSaver.fromConnString(pgUrl("langgraph"));
      await saver.setup();
      this.saver = saver;
      this.Human = HumanMessage;
      this.app = echoGraph(StateGraph, MessagesAnnotation, START, END, AIMessage).compile({ checkpointer: saver });
      this.n = 0;
    },
    async conv() { return lgTurn(this, `t-${process.pid}-${this.n++}`); },
    cpu() { return treeCpu([pgPid]) + selfCpu(); },
    async stop() { await this.saver?.end?.(); },
  },

  dbos: {
    durability: "DBOS system database on PostgreSQL 15 defaults (fsync, synchronous_commit on)",
    counts: "PostgreSQL (postmaster tree) + the driver's own Node process (DBOS runs in it)",
    async setup() {
      await pgStart();
      const { DBOS } = await import("@dbos-inc/dbos-sdk");
      DBOS.setConfig({ name: "bench-peers", systemDatabaseUrl: pgUrl("dbos_sys"), logLevel: "error" });
      // The workflow's input (the user message) is recorded when it starts, the echo step's output when
      // the step ends, the result (the reply) when it ends; the call returns after that.
      const echo = DBOS.registerStep(async (text) => ({ text }), { name: "echo" });
      this.turn = DBOS.registerWorkflow(async (conv, text) => echo(text), { name: "turn" });
      await DBOS.launch();
      this.DBOS = DBOS;
      this.n = 0;
    },
    async conv() { const id = `c-${this.n++}`, turn = this.turn; return (text) => turn(id, text); }, // unbound: DBOS takes a `this` for an instance
    cpu() { return treeCpu([pgPid]) + selfCpu(); },
    async stop() { await this.DBOS?.shutdown(); },
  },

  restate: {
    durability: "restate-server defaults (its log's RocksDB WAL fsynced: rocksdb-disable-wal-fsync = false)",
    counts: "restate-server + the Node service process",
    async setup() {
      const bin = join(here, "node_modules/@restatedev/restate-server-linux-x64/bin/restate-server");
      const p = opt.portBase;
      this.ingress = `http://127.0.0.1:${p + 80}`;
      const admin = `http://127.0.0.1:${p + 70}`;
      const env = { ...process.env, RESTATE_BASE_DIR: join(base, "restate"), RESTATE_NODE_NAME: "bench",
        RESTATE_BIND_ADDRESS: `127.0.0.1:${p + 122}`, RESTATE_ADMIN__BIND_ADDRESS: `127.0.0.1:${p + 70}`,
        RESTATE_INGRESS__BIND_ADDRESS: `127.0.0.1:${p + 80}`, RESTATE_DISABLE_TELEMETRY: "true" };
      this.server = start(bin, [], { env });
      this.service = start(process.execPath, [join(here, "restate_service.mjs")], { env: { ...process.env, PORT: String(p + 90) } });
      await until("restate admin", 60000, async () => {
        if (this.server.exitCode !== null) throw new Error(`restate-server exited: ${this.server.stderrTail}`);
        return (await fetch(`${admin}/health`)).ok;
      });
      await until("restate deployment", 30000, async () => {
        const r = await fetch(`${admin}/deployments`, { method: "POST", headers: { "content-type": "application/json" },
          body: JSON.stringify({ uri: `http://127.0.0.1:${p + 90}` }) });
        if (!r.ok) throw new Error(`register: ${r.status} ${await r.text()}`);
        return true;
      });
      await until("restate ingress", 30000, async () => (await fetch(`${this.ingress}/restate/health`)).ok);
      this.n = 0;
    },
    async conv() {
      const url = `${this.ingress}/conv/c-${this.n++}/turn`;
      return async (text) => {
        const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(text) });
        const body = await r.text();
        if (!r.ok) throw new Error(`restate: ${r.status} ${body}`);
      };
    },
    cpu() { return treeCpu([this.server.pid, this.service.pid]); },
    stop() { this.service?.kill("SIGTERM"); this.server?.kill("SIGTERM"); },
  },
};

function echoGraph(StateGraph, MessagesAnnotation, START, END, AIMessage) {
  return new StateGraph(MessagesAnnotation)
    .addNode("model", (s) => ({ messages: [new AIMessage(String(s.messages[s.messages.length - 1].content))] }))
    .addEdge(START, "model").addEdge("model", END);
}
function lgTurn(sys, thread) {
  const config = { configurable: { thread_id: thread }, durability: "sync" };
  return (text) => sys.app.invoke({ messages: [new sys.Human(text)] }, config);
}

// ---- one cell: C loops on fresh conversations, a warm-up, then the timed window
async function cell(sys, C) {
  const turns = [];
  for (let i = 0; i < C; i++) turns.push(await sys.conv());
  let t0 = Infinity, t1 = Infinity, stop = false;
  const lat = [];
  let failed = null;
  const served = new Set(); // the conversations that ended a turn in the window
  const loop = async (turn, i) => {
    // A turn's latency runs from the end of the one before (when its client is ready to send) to its
    // reply, so that the time a loop waits for the driver's event loop counts too.
    let a = performance.now();
    for (let k = 0; !stop; k++) {
      try { await turn(`message ${k}`); } catch (e) { failed ??= e; stop = true; return; }
      // A turn of LangGraph on SQLite can finish in microtasks alone (better-sqlite3 is synchronous):
      // yield to the event loop so that timers (the window's end) and the other loops run.
      await new Promise(setImmediate);
      const b = performance.now();
      if (b >= t0 && b <= t1) { lat.push(b - a); served.add(i); }
      a = b;
    }
  };
  const running = turns.map((t, i) => loop(t, i));
  await sleep(opt.warmup * 1000);
  const cpu0 = sys.cpu();
  t0 = performance.now();
  await sleep(opt.seconds * 1000);
  t1 = performance.now();
  const cpu1 = sys.cpu();
  stop = true;
  await Promise.all(running);
  sys.endCell?.();
  if (failed) throw failed;
  lat.sort((x, y) => x - y);
  return { rate: lat.length / ((t1 - t0) / 1000), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99),
    cpuMs: ((cpu1 - cpu0) * 1000) / lat.length, turns: lat.length, lat, served: served.size };
}

// ---- main
function machine() {
  const fs = (() => { try { return execFileSync("df", ["-T", base], { encoding: "utf8" }).split("\n")[1].split(/\s+/).slice(0, 2).join(" "); } catch { return "?"; } })();
  const ver = (p) => { try { return JSON.parse(readFileSync(join(here, "node_modules", p, "package.json"), "utf8")).version; } catch { return "?"; } };
  return [`machine: ${cpus().length} vCPU ${cpus()[0]?.model ?? "?"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Linux ${release()}, node ${process.version}`,
    `scratch: ${base} on ${fs}; load average ${loadavg().map((x) => x.toFixed(2)).join(" ")}`,
    `peers: @langchain/langgraph ${ver("@langchain/langgraph")}, checkpoint-sqlite ${ver("@langchain/langgraph-checkpoint-sqlite")}, ` +
    `checkpoint-postgres ${ver("@langchain/langgraph-checkpoint-postgres")}, better-sqlite3 ${ver("better-sqlite3")}, ` +
    `@dbos-inc/dbos-sdk ${ver("@dbos-inc/dbos-sdk")}, restate-server ${ver("@restatedev/restate-server")}, ` +
    `restate-sdk ${ver("@restatedev/restate-sdk")}; PostgreSQL ${(() => { try { return execFileSync("/usr/lib/postgresql/15/bin/postgres", ["--version"], { encoding: "utf8" }).trim().split(" ").pop(); } catch { return "?"; } })()}`,
    `agentd: ${opt.agentd ?? "(none)"}`,
    `cells: C = ${opt.c.join(", ")}; ${opt.rounds} rounds, ${opt.warmup} s warm-up + ${opt.seconds} s timed per cell, systems rotated per round`];
}

async function main() {
  console.log("bench_peers: one closed-loop turn (record the user message, echo, record the reply) per conversation");
  for (const l of machine()) console.log(l);
  const live = [];
  for (const name of opt.systems) {
    const sys = systems[name];
    if (!sys) throw new Error(`unknown system ${name}`);
    process.stderr.write(`  starting ${name}\n`);
    try { await sys.setup(); live.push(name); } catch (e) {
      console.log(`${name}: did not start: ${e.message.split("\n")[0]}`);
      sys.broken = e.message.split("\n")[0];
    }
  }
  const results = {}; // C -> name -> [per-round result]
  for (const C of opt.c) {
    results[C] = {};
    for (const n of live) results[C][n] = [];
    for (let r = 0; r < opt.rounds; r++) {
      const order = live.map((_, i) => live[(i + r) % live.length]);
      for (const n of order) {
        if (systems[n].broken) continue;
        try {
          const res = await cell(systems[n], C);
          results[C][n].push(res);
          process.stderr.write(`  C=${C} round ${r + 1} ${n}: ${fmt(res.rate)} turns/s, p50 ${fmt(res.p50)} ms, cpu ${fmt(res.cpuMs)} ms/turn\n`);
        } catch (e) {
          systems[n].broken = `failed at C = ${C}: ${e.message.split("\n")[0]}`;
          console.log(`${n}: ${systems[n].broken}`);
        }
      }
    }
    report(C, results[C]);
  }
  console.log(`\nserved: the fewest conversations (of C, over the rounds) that ended a turn within a window; ` +
    `load average at the end ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
  verdicts(results);
}

function ratios(a, b) { // agentd over the peer, round by round
  const xs = [];
  for (let i = 0; i < Math.min(a.length, b.length); i++) xs.push(a[i].rate / b[i].rate);
  return xs;
}
function summary(rs) {
  const lat = rs.flatMap((r) => r.lat).sort((x, y) => x - y);
  const rates = rs.map((r) => r.rate);
  const cpu = rs.reduce((s, r) => s + r.cpuMs * r.turns, 0) / rs.reduce((s, r) => s + r.turns, 0);
  return { rate: median(rates), lo: Math.min(...rates), hi: Math.max(...rates), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), cpu,
    served: Math.min(...rs.map((r) => r.served)) };
}
function report(C, res) {
  console.log(`\nC = ${C}`);
  console.log("| system | turns/s median [range] | p50 ms | p99 ms | served | CPU ms/turn | agentd/system median [range] | durability | CPU counts |");
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  const a = res.agentd;
  for (const n of opt.systems) {
    const rs = res[n];
    if (!rs || !rs.length) { console.log(`| ${n} | did not run: ${systems[n].broken ?? "?"} | | | | | | ${systems[n].durability} | |`); continue; }
    const s = summary(rs);
    let ratio = "";
    if (n !== "agentd" && a?.length) { const x = ratios(a, rs); ratio = `${fmt(median(x))}x [${fmt(Math.min(...x))}-${fmt(Math.max(...x))}]`; }
    console.log(`| ${n} | ${fmt(s.rate)} [${fmt(s.lo)}-${fmt(s.hi)}] | ${fmt(s.p50)} | ${fmt(s.p99)} | ${s.served}/${C} | ${fmt(s.cpu)} | ${ratio} | ${systems[n].durability} | ${systems[n].counts} |`);
  }
}
function verdicts(results) {
  console.log("\ntargets (issue 33):");
  const line = (ok, what) => console.log(`  ${ok === null ? "n/a " : ok ? "PASS" : "MISS"} ${what}`);
  const C64 = results[64], C1 = results[1];
  for (const [peer, k] of [["restate", 3], ["dbos", 10], ["lg-sqlite", 10], ["lg-pg", 10]]) {
    if (!C64?.agentd?.length || !C64?.[peer]?.length) { line(null, `C = 64: agentd >= ${k}x ${peer} in turns/s (not measured)`); continue; }
    const m = median(ratios(C64.agentd, C64[peer]));
    line(m >= k, `C = 64: agentd >= ${k}x ${peer} in turns/s: ${fmt(m)}x`);
  }
  for (const peer of ["lg-sqlite", "lg-pg", "dbos", "restate"]) {
    if (!C1?.agentd?.length || !C1?.[peer]?.length) { line(null, `C = 1: agentd p50 <= 1/4 of ${peer}'s (not measured)`); continue; }
    const a = summary(C1.agentd).p50, b = summary(C1[peer]).p50;
    line(a <= b / 4, `C = 1: agentd p50 <= 1/4 of ${peer}'s: ${fmt(a)} / ${fmt(b)} ms = ${fmt(a / b)}`);
  }
  for (const C of opt.c) {
    if (!results[C]?.agentd?.length || !results[C]?.restate?.length) { line(null, `C = ${C}: agentd CPU/turn <= 1/10 of Restate's (not measured)`); continue; }
    const a = summary(results[C].agentd).cpu, b = summary(results[C].restate).cpu;
    line(a <= b / 10, `C = ${C}: agentd server CPU/turn <= 1/10 of Restate's: ${fmt(a)} / ${fmt(b)} ms = ${fmt(a / b)}`);
  }
}

async function cleanup() {
  for (const n of opt.systems) { try { await systems[n]?.stop?.(); } catch { /* stopping anyway */ } }
  for (const p of children) if (p.exitCode === null) p.kill("SIGTERM");
  if (pgConn) { try { execFileSync(join(repo, "tests/pg/cluster.sh"), ["stop", pgDir]); } catch { /* gone */ } }
  await sleep(500);
  for (const p of children) if (p.exitCode === null) p.kill("SIGKILL");
  if (!opt.keep && !opt.dir) rmSync(base, { recursive: true, force: true });
}

let code = 0;
try { await main(); } catch (e) { console.error(`run.mjs: ${e.stack ?? e}`); code = 1; }
await cleanup();
process.exit(code);
