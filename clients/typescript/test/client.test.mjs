// The TypeScript client against the real agentd: every op it has a method for, its errors, send-and-wait,
// approvals, and watch with resume across a kill -9 of agentd.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { Agentd, DIST, SLOW, waitFor } from "./harness.mjs";

const A = await import(path.join(DIST, "index.js"));
const { Client } = A;
let agentd;
let c;

before(async () => {
  agentd = await new Agentd().start();
  c = new Client({ socket: agentd.socket, timeout: 30000 * SLOW });
});

after(async () => {
  c.close();
  await agentd.close();
});

test("ping, create, get, list, update, delete", async () => {
  assert.match(await c.ping(), /^\d+\.\d+/);
  const id = await c.create("echo", { conversation: "c-ts1", system: "Be brief.", tools: ["approve"],
    metadata: { team: "ts" } });
  assert.equal(id, "c-ts1");
  const g = await c.get(id);
  assert.deepEqual(g.settings, { model: "echo", system: "Be brief.", tools: ["approve"] });
  assert.equal(g.status, "idle");
  assert.equal(g.last_seq, 0);
  assert.deepEqual(g.metadata, { team: "ts" });
  const page = await c.list({ metadata: { team: "ts" } });
  assert.deepEqual(page.conversations.map((x) => x.id), ["c-ts1"]);
  assert.equal(page.next, undefined);
  await c.update(id, { metadata: { team: null, owner: "ana" } });
  assert.deepEqual((await c.get(id)).metadata, { owner: "ana" });
  await c.update(id, { end: true });
  assert.equal((await c.get(id)).status, "ended");
  await assert.rejects(c.send(id, "late"), A.Conflict);
  assert.equal(await c.delete(id), true);
  assert.equal(await c.delete(id), false);
  await assert.rejects(c.get(id), (e) => e instanceof A.NotFound && e.code === "not_found" && e.op === "get");
});

test("send is idempotent by event id; expectedSeq; batches", async () => {
  const id = await c.create("echo");
  const r = await c.send(id, "hello", { eventId: "ts-e1", expectedSeq: 0 });
  assert.deepEqual([r.seq, r.duplicate, r.event_id], [1, false, "ts-e1"]);
  const again = await c.send(id, "hello", { eventId: "ts-e1" });
  assert.deepEqual([again.seq, again.duplicate], [1, true]);
  await waitFor(async () => (await c.get(id)).status === "idle", "the echo turn");
  const err = await c.send(id, "x", { expectedSeq: 1 }).catch((e) => e);
  assert.ok(err instanceof A.Conflict, String(err));
  assert.equal(err.lastSeq, 2);
  const b = await c.sendBatch(id, ["a", { text: "b" }]);
  assert.deepEqual(b.seqs, [3, 4]);
  assert.equal(b.event_ids.length, 2);
  assert.deepEqual(b.duplicates, []);
  await assert.rejects(c.sendBatch(id, ["a"], { eventIds: [] }), RangeError);
  const evs = await c.events(id, { limit: 2, after: 0, before: 5 });
  assert.deepEqual(evs.events.map((e) => e.seq), [3, 4]);
  assert.deepEqual(evs.events[1].content, { text: "b" });
});

test("sendAndWait returns the turn's reply; waitTurn finds an ended turn at once", async () => {
  const id = await c.create("echo");
  const t = await c.sendAndWait(id, "hi there");
  assert.equal(t.seq, 1);
  assert.equal(t.status, "completed");
  assert.equal(t.send.seq, 1);
  assert.equal(t.send.duplicate, false);
  assert.deepEqual(t.events.map((e) => e.type), ["assistant_msg"]);
  assert.equal(t.text, "echo: hi there");
  assert.equal(t.events[0].seq, 2);
  assert.equal(t.last_seq, 2);
  assert.deepEqual(t.pending, []);
  const again = await c.waitTurn(id, 1, { timeout: 0 });
  assert.equal(again.status, "completed");
  assert.equal(again.text, "echo: hi there");
  assert.equal(again.send, undefined);
});

test("onBusy: reject, interrupt, steer while a person is awaited; bad values", async () => {
  const id = await c.create("echo", { tools: ["approve"], onBusy: "reject" });
  assert.equal((await c.get(id)).settings.on_busy, "reject");
  assert.equal((await c.sendAndWait(id, "/tool approve {}")).status, "suspended");
  const last = (await c.get(id)).last_seq;
  const no = await c.send(id, "no").catch((e) => e);
  assert.ok(no instanceof A.Conflict && /busy: a turn is running/.test(no.message), String(no));
  assert.equal((await c.get(id)).last_seq, last);
  const r = await c.send(id, "instead", { onBusy: "interrupt" });
  assert.equal(r.on_busy, "interrupt");
  assert.equal(r.interrupted, r.seq + 2);
  await waitFor(async () => (await c.get(id)).status === "idle", "the turn that answers");
  await c.update(id, { onBusy: "steer" });
  assert.equal((await c.sendAndWait(id, "/tool approve {}")).status, "suspended");
  const s = await c.send(id, "also");
  assert.equal(s.on_busy, "steer");
  const p = (await c.pending()).filter((x) => x.conversation === id)[0];
  await c.approve(p.id);
  await waitFor(async () => (await c.get(id)).status === "idle", "round 2");
  const answer = (await c.events(id, { type: "assistant_msg" })).events.at(-1);
  assert.equal(answer.content.round, 2);
  await assert.rejects(c.send(id, "x", { onBusy: "x" }), (e) => e instanceof A.BadRequest && /on_busy/.test(e.message));
  await assert.rejects(c.create("echo", { onBusy: "x" }), (e) => e instanceof A.BadRequest);
});

test("on_user_message = reject: a send settles the pending approval and says so", async () => {
  const id = await c.create("echo", { tools: ["gate"] });
  assert.equal((await c.sendAndWait(id, "/tool gate {}")).status, "suspended");
  const p = (await c.pending()).filter((x) => x.conversation === id)[0];
  const s = await c.send(id, "never mind");
  assert.deepEqual(s.rejected, [p.id]);
  await waitFor(async () => (await c.get(id)).status === "idle", "the turn that answers");
  const answer = (await c.events(id, { type: "assistant_msg" })).events.at(-1);
  assert.match(answer.content.text, /echo: never mind/);
  assert.deepEqual((await c.send(id, "idle")).rejected, []);
  const b = await c.sendBatch(id, ["a"]);
  assert.deepEqual(b.rejected, []);
});

test("sendAndWait ends at an approval; pending, approve, deny, by", async () => {
  const id = await c.create("echo", { tools: ["approve"] });
  const t = await c.sendAndWait(id, '/tool approve {"amount": 120}');
  assert.equal(t.status, "suspended");
  const types = t.events.map((e) => e.type);
  assert.ok(types.includes("tool_call") && types.includes("suspension"), types.join(","));
  const pend = (await c.pending()).filter((p) => p.conversation === id);
  assert.equal(pend.length, 1);
  assert.deepEqual(t.pending, [pend[0].id]);
  assert.equal(pend[0].name, "approve");
  assert.deepEqual(pend[0].args, { amount: 120 });
  assert.equal(pend[0].prompt, "Approve the payment?");
  const res = await c.approve(pend[0].id, { comment: "ok", by: "ana" });
  assert.equal(res.conversation, id);
  const call = await c.toolCall(pend[0].id);
  assert.equal(call.status, "resolved");
  assert.deepEqual(call.result, { approved: true, comment: "ok" });
  const resolution = (await c.events(id, { type: "resolution" })).events.at(-1);
  assert.equal(resolution.content.by.name, "ana");
  assert.equal(typeof resolution.content.by.uid, "number");
  await assert.rejects(c.deny(pend[0].id), (e) => e instanceof A.Stale);
  const rest = await c.waitTurn(id, res.seq);
  assert.equal(rest.status, "completed");
  assert.equal(rest.events.at(-1).type, "assistant_msg");
  // A second call, denied.
  const t2 = await c.sendAndWait(id, "/tool approve {}");
  assert.equal(t2.status, "suspended");
  const [p2] = await c.toolCalls(id, { status: "pending" });
  await c.deny(p2.id, { by: "bo" });
  assert.deepEqual((await c.toolCall(p2.id)).result, { approved: false });
  await assert.rejects(c.resolve(p2.id, null, { by: "" }), A.BadRequest);
  await assert.rejects(c.resolve("tc-nope", true), A.Stale);
});

test("argsDigest equals agentd's; resolve refuses other args; extend moves the deadline", async () => {
  assert.equal(A.canonicalJson({ b: [1, 2.5, 1e30, 4.5e-7, -0], a: "x\ty\"\\\u0001", "": null }),
    '{"":null,"a":"x\\ty\\"\\\\\\u0001","b":[1,2.5,1e+30,4.5e-7,0]}');
  assert.equal(A.argsDigest({ amount: 5 }), "7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf");
  const args = { to: "Zoë", amount: 12.5, items: [1, 1e21, 1e-7, { b: true, a: null }], "😀": 0, "\ufb33": 1 };
  const id = await c.create("echo", { tools: ["approve"] });
  const t = await c.sendAndWait(id, "/tool approve " + JSON.stringify(args));
  assert.equal(t.status, "suspended");
  const [p] = await c.toolCalls(id, { status: "pending" });
  assert.equal(p.args_digest, A.argsDigest(p.args));
  assert.equal(p.args_digest, A.argsDigest(args));
  const last = (await c.events(id)).last_seq;
  await assert.rejects(c.approve(p.id, { argsDigest: A.argsDigest({ amount: 1 }) }), A.Conflict);
  await assert.rejects(c.deny(p.id, { argsDigest: "nope" }), A.BadRequest);
  assert.equal((await c.events(id)).last_seq, last);
  const x = await c.extend(id, p.id, { expiresInMs: 7200000, by: "ana" });
  assert.equal(x.conversation, id);
  assert.ok(x.deadline > p.deadline);
  assert.equal((await c.toolCall(p.id)).deadline, x.deadline);
  const ev = (await c.events(id, { type: "deadline_extended" })).events.at(-1);
  assert.equal(ev.seq, x.seq);
  assert.equal(ev.content.by.name, "ana");
  await assert.rejects(c.extend(id, p.id, { deadline: 1000 }), A.BadRequest);
  await assert.rejects(c.extend(id, "tc-nope", { expiresInMs: 1000 }), A.NotFound);
  await c.approve(p.id, { argsDigest: p.args_digest });
  assert.equal((await c.toolCall(p.id)).status, "resolved");
  await assert.rejects(c.extend(id, p.id, { expiresInMs: 1000 }), A.Stale);
});

test("sendAndWait times out with the message kept", async () => {
  const id = await c.create("echo", { tools: ["approve"] });
  await c.sendAndWait(id, "/tool approve {}");
  // A message sent while a call is pending is answered after it: nothing more runs now, the wait
  // ends at its timeout with the message kept.
  const t = await c.sendAndWait(id, "meanwhile", { timeout: 300 });
  assert.equal(t.status, "timeout");
  assert.deepEqual(t.events, []);
  assert.equal((await c.events(id)).events.at(-1).content.text, "meanwhile");
  // A timeout: a turn that stays active (the worker is stopped by SIGSTOP) past the bound.
  const id2 = await c.create("echo");
  const t2 = await c.sendAndWait(id2, "warm up");
  assert.equal(t2.status, "completed");
  const st = await c.status();
  const w = st.workers.find((x) => x.conversation === id2);
  assert.ok(w, "a live worker");
  process.kill(w.pid, "SIGSTOP");
  try {
    const stuck = await c.sendAndWait(id2, "stuck", { timeout: 300 });
    assert.equal(stuck.status, "timeout");
    const evs = await c.events(id2);
    assert.equal(evs.events.at(-1).content.text, "stuck");
    assert.equal(stuck.last_seq, stuck.seq);
  } finally {
    process.kill(w.pid, "SIGCONT");
  }
  await waitFor(async () => (await c.get(id2)).status === "idle", "the turn after SIGCONT");
  const after = await c.waitTurn(id2, (await c.events(id2, { type: "user_msg" })).events.at(-1).seq);
  assert.equal(after.status, "completed");
  assert.equal(after.text, "echo: stuck");
});

test("errors: typed, with code and op; bad input never sent", async () => {
  await assert.rejects(c.create("no-such-model"), (e) => e instanceof A.BadRequest && e.code === "bad_request");
  await assert.rejects(c.request("frobnicate"), (e) => e instanceof A.UnknownOp);
  await assert.rejects(c.send("c-x", { n: NaN }), (e) => e instanceof A.BadRequest && /JSON/.test(e.message));
  await assert.rejects(c.send("c-x", { n: 1n }), A.BadRequest);
  await assert.rejects(c.toolCall("tc-nope"), A.NotFound);
  assert.throws(() => new Client({ socket: "/" + "x".repeat(120) }), RangeError);
  const nobody = new Client({ socket: path.join(agentd.dir, "nobody.sock") });
  await assert.rejects(nobody.ping(), (e) => e instanceof A.AgentdConnectionError && /is agentd running/.test(e.message));
  // The connection still works after errors.
  assert.match(await c.ping(), /\d/);
});

test("reads: tool_calls, summary, runs, status, metrics, nodes, fork, cancel, resume, stop, kill", async () => {
  const id = await c.create("echo");
  await c.sendAndWait(id, "one");
  assert.deepEqual(await c.toolCalls(id), []);
  assert.equal(await c.summary(id), null);
  const runs = await c.runs(id);
  assert.equal(runs.runs.length, 1);
  assert.equal(runs.runs[0].status, "completed");
  const st = await c.status();
  assert.equal(typeof st.version, "string");
  assert.ok(Array.isArray(st.workers));
  assert.match(await c.metrics(), /agentd_/);
  const n = await c.nodes();
  assert.equal(n.nodes.length, 1);
  const f = await c.fork(id, 1, { newConversation: "c-tsfork" });
  assert.equal(f.conversation, "c-tsfork");
  assert.deepEqual(f.forked_from, { conversation: id, seq: 1 });
  const cz = await c.cancel(id);
  assert.equal(cz.cancelled, false);
  assert.equal(typeof cz.message, "string");
  const rz = await c.resume(id);
  assert.equal(rz.resumed, false);
  assert.equal(typeof (await c.stop(id)), "boolean");
  const pid = await c.kill(id);
  assert.ok(pid === null || typeof pid === "number");
  assert.deepEqual(await c.audit(id), []);
});

test("schedule fires as a scheduled event; schedules lists; unschedule cancels; bad ones refused", async () => {
  const id = await c.create("echo");
  const s = await c.schedule(id, "wake up", { after: 300 * SLOW });
  assert.match(s.schedule, /^s-/);
  assert.equal(s.conversation, id);
  assert.equal(s.cron, null);
  const at = Date.now() + 86400000;
  const r = await c.schedule(id, "daily", { at, cron: "0 9 * * *" });
  assert.equal(r.due, at);
  assert.equal(r.cron, "0 9 * * *");
  assert.deepEqual((await c.schedules({ conversation: id })).map((x) => x.schedule), [s.schedule, r.schedule]);
  await waitFor(async () => (await c.events(id, { type: "assistant_msg" })).events.length === 1, "the answer");
  const ev = (await c.events(id, { type: "scheduled" })).events;
  assert.equal(ev.length, 1);
  assert.equal(ev[0].content.text, "wake up");
  assert.equal(ev[0].content.late, false);
  assert.equal((await c.events(id, { type: "assistant_msg" })).events[0].content.text, "echo: wake up");
  const left = await c.schedules({ conversation: id });
  assert.deepEqual(left.map((x) => [x.schedule, x.text]), [[r.schedule, "daily"]]);
  await c.unschedule(r.schedule);
  assert.deepEqual(await c.schedules({ conversation: id }), []);
  await assert.rejects(c.unschedule(r.schedule), A.NotFound);
  await assert.rejects(c.schedule("nope", "x", { after: 10 }), A.NotFound);
  await assert.rejects(c.schedule(id, "x", {}), /missing field 'at'/);
  await assert.rejects(c.schedule(id, "x", { at: 1000 }), A.BadRequest);
  await assert.rejects(c.schedule(id, "x", { cron: "* *" }), /not a cron expression/);
  assert.deepEqual(await c.schedules({ conversation: id }), []);
});

test("concurrent calls on one client are answered in order", async () => {
  const id = await c.create("echo");
  const rs = await Promise.all([1, 2, 3, 4, 5].map((i) => c.send(id, `m${i}`)));
  assert.deepEqual(rs.map((r) => r.seq).sort((a, b) => a - b), rs.map((r) => r.seq));
  const texts = (await c.events(id, { type: "user_msg" })).events.map((e) => e.content.text);
  assert.deepEqual(texts, ["m1", "m2", "m3", "m4", "m5"]);
});

test("backup copies the store", async () => {
  const dir = path.join(agentd.dir, "backup");
  const b = await c.backup(dir);
  assert.equal(b.path, dir);
  assert.ok(b.bytes > 0);
  assert.ok(fs.existsSync(path.join(dir, "data.mdb")));
  await assert.rejects(c.backup(dir), A.BadRequest);
});

test("watch streams every event, and resumes across a kill -9 of agentd", async () => {
  const id = await c.create("echo");
  await c.send(id, "before");
  const w = await c.watch(id, { after: 0, resume: true });
  const seen = [];
  const reader = (async () => {
    for await (const ev of w.events()) {
      seen.push(ev);
      if (ev.type === "assistant_msg" && ev.content.text === "echo: after restart") break;
    }
  })();
  await waitFor(() => seen.some((e) => e.type === "assistant_msg"), "the first reply on the watch");
  await agentd.kill9();
  await agentd.start();
  await c.send(id, "after restart"); // the client reconnects (send is safe to repeat)
  await reader;
  assert.deepEqual(seen.map((e) => e.seq), [1, 2, 3, 4]);
  assert.ok(w.resumes >= 1);
  assert.ok(c.retries >= 0);
  await assert.rejects(c.watch("c-none"), A.NotFound);
});

test("settle: an unknown call listed by pending (kind unknown), decided, refused when not unknown", async () => {
  const dir = fs.mkdtempSync(path.join(agentd.dir, "side-"));
  const eff = path.join(dir, "effects"), tool = path.join(dir, "side.py");
  fs.writeFileSync(tool, "import json, os, sys, time\nreq = json.load(sys.stdin)\n" +
    "open(sys.argv[1], 'a').write(req['tool_call_id'] + '\\n')\n" +
    "while not os.path.exists(sys.argv[1] + '.go'):\n    time.sleep(0.01)\nprint('{}')\n");
  const b = await new Agentd(`[tool.side]\nexecutor = server\ncommand = python3 ${tool} ${eff}\ntimeout = 60s\n`).start();
  const bc = new Client({ socket: b.socket, timeout: 30000 * SLOW });
  try {
    const id = await bc.create("echo", { tools: ["side"] });
    await bc.send(id, "/tool side {}");
    await waitFor(() => fs.existsSync(eff), "the side effect");
    process.kill((await bc.get(id)).worker.pid, "SIGKILL");
    const [u] = await waitFor(async () => {
      const p = await bc.pending();
      return p.length ? p : null;
    }, "the unknown call");
    assert.equal(u.kind, "unknown");
    assert.equal(u.status, "unknown");
    await assert.rejects(bc.settle(id, u.id, "retry", { x: 1 }), (e) => e instanceof A.BadRequest);
    await assert.rejects(bc.settle("nope", u.id, "done"), (e) => e instanceof A.NotFound);
    const s = await bc.settle(id, u.id, "failed", undefined, { by: "ana" });
    assert.equal(s.conversation, id);
    assert.equal(s.outcome, "failed");
    assert.equal((await bc.toolCall(u.id)).status, "errored");
    await assert.rejects(bc.settle(id, u.id, "done"), (e) => e instanceof A.Stale);
    fs.writeFileSync(eff + ".go", "");
  } finally {
    bc.close();
    await b.close();
  }
});
