"""Chaos: many conversations driven concurrently while workers, model and tool processes and the
supervisor itself are SIGKILLed at random, then every invariant of docs/protocol.md ("Semantics") checked
from the log and the records (docs/testing.md, "Chaos").

A real agentd runs with a scripted model and tool (Python scripts written into the test's directory and
named in its configuration), an MCP server (`mw`, a Python script speaking MCP over stdio) and, for every
fourth conversation, a built-in `openai` model (agentd-model) against a fake OpenAI server in the test. Client threads send to CONVS conversations through the control socket, each
send with a unique event_id, retried with the same event_id when the connection dies mid-request (agentd
killed): a retry answered `duplicate: true` with the original seq counts as acknowledged. The scripted
model decides from the request's messages, by the first word of the newest user_msg after the last turn:

    tool     one call of the server tool `work` (with the model's own id w-CONV-TURN), or on every third
             turn of the MCP server's `mw__work`
    ask      one call of the human tool `ask`  (expires after 1 s)
    ask2     one call of the human tool `ask2` (expires after 2 s)
    both     one `work` and one `ask`
    other    a text answer

and records each call ("CONV TURN PID") in model.rec. The tool records each run, its side effect, as
"start <tool_call_id from stdin> <AGENTD_TOOL_CALL_ID> <conversation> <pid> <worker pid> <ms>" in tool.rec
(one O_APPEND write), sleeps a little, and records "end <tool_call_id> <pid> <ms>" before it exits. The
MCP server records its calls the same way (the id from `_meta`'s `agentd/idempotency_key`, twice; its own
pid), one server per worker. The fake OpenAI server answers the conversations of the `openai` model (named
in their system prompt) the same way, after a delay (a window for kills of agentd-model); it cannot know a
turn's context_seq, so its answers are checked by their form ("http: N message(s)") and not against
model.rec.
A resolver thread finds pending human calls and resolves them at random times around their deadline
(some before, some after the expiry; some twice), each resolve with a unique result token, and records
which were accepted and which were `stale`. Meanwhile the main thread, for ROUNDS rounds, SIGKILLs a
random worker (pids from `status`), a random model, agentd-model, tool or MCP server process (children of
workers, from /proc/*/stat), or agentd itself (then starts it again on the same data directory; the last round kills
agentd when no earlier one did).

Every kill is logged with its time and target. A tool_call_id run twice is a duplicated side effect; the
invariant: every run followed by another run of its id was ended by a kill of that run's own tool process,
or of its worker (during the tool's run, or after its end and before the result was committed: the only
window a SIGKILL can lose a finished result in); an MCP server killed during a call errors it (it is not
retried: docs/tools.md). A kill of agentd alone never justifies one: the worker
finishes the tool and commits. The duplicates are reported beside the kills that justify them.

Then the chaos stops, agentd settles (no conversation `active`, no call pending) and the checks run:
sends in the log exactly once at their acknowledged seq, seqs 1..N, every tool call settled exactly once,
every dispatch with the id of a tool_call of its conversation, one answer per turn, expiries at most once
and never after an accepted resolve nor before the deadline, no resolve accepted twice, late resolves
`stale`, nothing owed, the records agreeing with the log, and after agentd stops: no process of the test
left (no zombie, no orphaned worker, model or tool), an empty LMDB reader table (`mdb_stat -r`; on
PostgreSQL, AGENTD_TEST_STORE=pg: no connection left to the store's database), and
`agentd check` (when this agentd has it).

Environment (besides the harness's AGENTD_TEST_SLOW and AGENTD_KEEP):
  AGENTD_CHAOS_SEED    the seed (default 42; printed first, so a failing run can be replayed)
  AGENTD_CHAOS_KILLS   kills to deliver (default 1000, divided by AGENTD_TEST_SLOW squared, at least 10;
                       a round that finds no target delivers none)
  AGENTD_CHAOS_ROUNDS  kill rounds instead (each one kill attempt)
  AGENTD_CHAOS_SECS    run the rounds for this long instead (a soak); with the others, whichever ends first
  AGENTD_CHAOS_CONVS   conversations (default 16)
  AGENTD_CHAOS_LOG_LEVEL  agentd's --log-level (debug: worker starts, exits and evictions too)
Thread scheduling is not seeded: a replay repeats the choices (what to send, what to kill, when to
resolve), not every interleaving.
"""
import collections
import heapq
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import harness
from fake_openai import FakeOpenAI
from harness import TIME_SCALE, Agentd, Client, scaled, wait_for

PY = sys.executable or "python3"

SEED = int(os.environ.get("AGENTD_CHAOS_SEED") or 42)
_ROUNDS_ENV = os.environ.get("AGENTD_CHAOS_ROUNDS")
_KILLS_ENV = os.environ.get("AGENTD_CHAOS_KILLS")
SECS = float(os.environ.get("AGENTD_CHAOS_SECS") or 0)
ROUNDS = int(_ROUNDS_ENV) if _ROUNDS_ENV else 10 ** 9
if _KILLS_ENV:
    KILLS = int(_KILLS_ENV)
elif _ROUNDS_ENV or SECS:
    KILLS = 10 ** 9  # the rounds or the time bound end it
else:
    # 1,000 at full speed; a slowed run (ASan x3, valgrind x10) is slower per kill too: 111 and 10.
    KILLS = max(10, int(1000 / TIME_SCALE ** 2))
NCONVS = int(os.environ.get("AGENTD_CHAOS_CONVS") or 16)
SENDERS = 4
EXPIRES = {"ask": 1.0 * TIME_SCALE, "ask2": 2.0 * TIME_SCALE}  # seconds, per human tool
MAX_ATTEMPTS = 4  # [tool.work] max_attempts
# What the clients send (first word) and how often.
KINDS = ["tool", "ask", "ask2", "both", "hello"]
KIND_WEIGHTS = [6, 2, 1, 2, 2]
# "... mid-tool": the worker, or agentd, chosen while a worker runs a tool that has begun (its start line
# is written): the window where a kill can make a side effect run twice, which random kills rarely hit.
KILL_KINDS = ["worker", "model", "tool", "supervisor", "worker mid-tool", "supervisor mid-tool", "agentd-model",
              "mcp server"]
KILL_WEIGHTS = [4, 3, 3, 1, 2, 1, 2, 2]
# What each kind of child of a worker is found by, in its command line.
CHILD_NEEDLE = {"model": "model.py", "tool": "tool.py", "agentd-model": "agentd-model", "mcp server": "mcp.py"}

MODEL = r'''
import json, os, random, sys, time
rec = sys.argv[1]
req = json.load(sys.stdin)
msgs = req.get("messages") or []
usage = {"input_tokens": len(msgs), "output_tokens": 1, "cost": 0}

def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

if req.get("task") != "turn":  # a summary: no output tokens, so usage counts answers alone
    out({"text": "summary of %d events" % len(msgs), "tool_calls": [], "usage": dict(usage, output_tokens=0)})
    sys.exit(0)
conv, turn = req["conversation"], req["turn"]
fd = os.open(rec, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, ("%s %d %d\n" % (conv, turn, os.getpid())).encode())
os.close(fd)
# What this turn answers: everything after the last turn's context (as agentd decides what is owed).
answered = 0
for m in msgs:
    if m["type"] in ("assistant_msg", "error"):
        answered = max(answered, m["content"].get("context_seq", 0))
new = [m for m in msgs if m["type"] == "user_msg" and m["seq"] > answered]
settled = [m for m in msgs if m["type"] in ("tool_result", "resolution") and m["seq"] > answered]
time.sleep(random.uniform(0.01, 0.12))  # a window for kills mid-turn
out({"delta": "thinking "})
cmd = str(new[-1]["content"].get("text", "")).split(" ")[0] if new else ""
calls = []
if cmd in ("tool", "both"):
    calls.append({"id": "w-%s-%d" % (conv, turn), "name": "mw__work" if turn % 3 == 0 else "work",
                  "args": {"turn": turn}})
if cmd in ("ask", "both"):
    calls.append({"name": "ask", "args": {"turn": turn}})
if cmd == "ask2":
    calls.append({"name": "ask2", "args": {"turn": turn}})
out({"text": "turn %d: %d message(s), %d result(s)" % (turn, len(new), len(settled)), "tool_calls": calls,
     "usage": usage})
'''

TOOL = r'''
import json, os, random, sys, time
rec = sys.argv[1]
req = json.load(sys.stdin)
def note(line):
    fd = os.open(rec, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())  # one write per line: lines of concurrent runs never interleave
    os.close(fd)
tcid = req.get("tool_call_id")
note("start %s %s %s %d %d %d\n" % (tcid, os.environ.get("AGENTD_TOOL_CALL_ID", "-"), req.get("conversation"),
                                    os.getpid(), os.getppid(), int(time.time() * 1000)))
time.sleep(random.uniform(0.1, 0.5))  # a window for kills mid-tool
note("end %s %d %d\n" % (tcid, os.getpid(), int(time.time() * 1000)))
print(json.dumps({"done": tcid}))
'''


MCP = r'''
import json, os, random, sys, time
rec = sys.argv[1]
def note(line):
    fd = os.open(rec, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)
def reply(mid, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
    sys.stdout.flush()
conv = os.environ.get("AGENTD_CONVERSATION", "-")
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue  # notifications
    if method == "initialize":
        reply(mid, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "chaos", "version": "1"}})
    elif method == "tools/list":
        reply(mid, {"tools": [{"name": "work", "description": "a side effect",
                               "inputSchema": {"type": "object"}, "annotations": {"idempotentHint": True}}]})
    elif method == "tools/call":
        tcid = msg["params"]["_meta"]["agentd/idempotency_key"]
        note("start %s %s %s %d %d %d\n" % (tcid, tcid, conv, os.getpid(), os.getppid(), int(time.time() * 1000)))
        time.sleep(random.uniform(0.1, 0.5))  # a window for kills mid-call
        note("end %s %d %d\n" % (tcid, os.getpid(), int(time.time() * 1000)))
        reply(mid, {"content": [{"type": "text", "text": tcid}], "structuredContent": {"done": tcid}})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid,
                                     "error": {"code": -32601, "message": "no such method"}}) + "\n")
        sys.stdout.flush()
'''


def http_conv(c):
    """Whether conversation c talks to the built-in openai model (every fourth)."""
    return int(c.rsplit("-", 1)[1]) % 4 == 3


class ChaosOpenAI(FakeOpenAI):
    """The scripted model's decisions, made by a fake OpenAI server: the newest user message after the last
    assistant message names what to do. Each answer comes after a delay, a window for kills of
    agentd-model; the rng is the fake's own (its choices depend on thread timing, not on the seed)."""

    def __init__(self):
        super().__init__(key="sk-chaos")
        self.rng = random.Random(SEED + 7)
        self.n = 0

    def default(self, body):
        msgs = body["messages"]
        self.n += 1
        delay = self.rng.uniform(0.01, 0.3)
        if not any(m["role"] == "system" and "chaos" in str(m.get("content")) for m in msgs):
            # A compaction's summary: no output tokens, so usage counts answers alone.
            return {"text": "summary of %d messages" % len(msgs), "usage": {"input": len(msgs), "output": 0},
                    "delay": delay}
        last_asst = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=-1)
        new = [m for m in msgs[last_asst + 1:] if m["role"] == "user"]
        results = [m for m in msgs[last_asst + 1:] if m["role"] == "tool"]
        cmd = str(new[-1].get("content") or "").split(" ")[0] if new else ""
        calls = []
        if cmd in ("tool", "both"):
            calls.append({"name": "mw__work" if self.n % 3 == 0 else "work", "arguments": "{}",
                          "id": "call_h%d" % self.n})
        if cmd in ("ask", "both"):
            calls.append({"name": "ask", "arguments": "{}", "id": "call_a%d" % self.n})
        if cmd == "ask2":
            calls.append({"name": "ask2", "arguments": "{}", "id": "call_b%d" % self.n})
        return {"text": "http: %d message(s), %d result(s)" % (len(new), len(results)), "tool_calls": calls,
                "usage": {"input": len(msgs), "output": 1}, "delay": delay}


class Down(Exception):
    """The connection to agentd failed (agentd killed, restarting, or too slow)."""


class Conn:
    """A persistent connection that reconnects on the next request after a failure."""

    def __init__(self, path):
        self.path = path
        self.c = None

    def request(self, obj, timeout=10):
        try:
            if self.c is None:
                self.c = Client(self.path, timeout)
            if not self.c.send(obj):
                raise AssertionError(f"agentd closed the connection ({self.c.send_error!r})")
            return self.c.recv()
        except (OSError, AssertionError) as e:
            self.close()  # the next request reconnects
            raise Down(str(e)) from None

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None


class Violations:
    """Collects failed invariants (all of them, not only the first) and counts every check made."""

    def __init__(self):
        self.failed = []
        self.checks = collections.Counter()
        self.lock = threading.Lock()

    def check(self, name, cond, detail=""):
        with self.lock:
            self.checks[name] += 1
            if not cond:
                self.failed.append(f"[{name}] {detail}")
        return cond


def now_ms():
    return int(time.time() * 1000)


class Chaos:
    def __init__(self, a):
        self.a = a
        self.v = Violations()
        self.lock = threading.Lock()
        self.stop_senders = threading.Event()
        self.stop_resolver = threading.Event()
        self.convs = [f"chaos-{i:02d}" for i in range(NCONVS)]
        self.acked = {}  # event_id -> (conv, seq, content)
        self.sent = collections.Counter()  # retried, duplicates, unavailable
        self.resolves = []  # dicts: tcid, token, status, sent_ms, outcome, seq, after_ok
        self.kills = collections.Counter()
        self.kill_log = []  # (ms, kind, pid): when each kill was sent, and to whom
        self.restart_refused = 0  # starts refused "already running" just after a kill
        self.missed = collections.Counter()
        self.agentd_pids = []
        self.errors = []  # unexpected exceptions in threads

    # ---- driving ----------------------------------------------------------------------------------

    def send_acked(self, conn, rng, conv, content, eid):
        """Send until acknowledged, retrying with the same event_id across dead connections."""
        req = {"op": "send", "conversation": conv, "content": content, "event_id": eid}
        attempts = 0
        deadline = time.monotonic() + scaled(120)
        while True:
            attempts += 1
            try:
                r = conn.request(req)
            except Down as e:
                r, why = None, f"connection: {e}"
            else:
                why = f"reply {r}"
            if r is not None and r.get("ok") is True:
                dup = bool(r.get("duplicate"))
                self.v.check("duplicate only on a retry", not dup or attempts > 1,
                             f"send {eid} to {conv} answered duplicate on its first attempt: {r}")
                with self.lock:
                    self.acked[eid] = (conv, r["seq"], content)
                    if attempts > 1:
                        self.sent["retried"] += 1
                    if dup:
                        self.sent["duplicate replies"] += 1
                return
            if r is not None and r.get("error") not in ("unavailable", "internal"):
                self.v.check("send accepted", False, f"send {eid} to {conv} refused: {r}")
                return
            if r is not None:
                # Retried either way (the send is still owed an acknowledgement), but nothing in this
                # test should make agentd fail internally.
                self.v.check("no internal errors", r.get("error") != "internal", f"send {eid} to {conv}: {r}")
                with self.lock:
                    self.sent[r.get("error")] += 1
            if time.monotonic() > deadline:
                self.v.check("send acknowledged", False, f"send {eid} to {conv} never acknowledged ({attempts} attempts; last {why})")
                return
            time.sleep(rng.uniform(0.02, 0.15))

    def sender(self, idx):
        rng = random.Random(SEED * 1000 + idx)
        conn = Conn(self.a.socket)
        n = 0
        try:
            while not self.stop_senders.is_set():
                conv = rng.choice(self.convs)
                kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
                n += 1
                eid = f"e{idx}-{n}"
                self.send_acked(conn, rng, conv, f"{kind} {eid}", eid)
                self.stop_senders.wait(rng.uniform(0.05, 0.5) * TIME_SCALE)
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            self.errors.append(f"sender {idx}: {e!r}")
        finally:
            conn.close()

    def resolve_once(self, conn, tcid, rng, after_ok):
        token = f"r-{tcid}-{rng.random():.12f}"
        status = "errored" if rng.random() < 0.1 else "resolved"
        rec = {"tcid": tcid, "token": token, "status": status, "sent_ms": now_ms(), "after_ok": after_ok,
               "outcome": "unknown", "seq": None}
        try:
            r = conn.request({"op": "resolve", "tool_call_id": tcid, "status": status, "result": {"token": token}})
        except Down:
            r = None  # agentd died with it in flight: it may or may not have committed
        if r is not None:
            if r.get("ok") is True:
                rec["outcome"], rec["seq"] = "ok", r["seq"]
            elif r.get("error") in ("unavailable", "internal"):
                self.v.check("no internal errors", r.get("error") != "internal", f"resolve {tcid}: {r}")
                rec["outcome"] = "unknown"
            else:
                rec["outcome"] = r.get("error")
        with self.lock:
            self.resolves.append(rec)
        return rec

    def resolver(self):
        rng = random.Random(SEED * 1000 + 99)
        conn = Conn(self.a.socket)
        seen = set()
        plan = []  # heap of (monotonic due time, n, tcid, after_ok)
        n = 0
        try:
            while not self.stop_resolver.is_set():
                for conv in self.convs:
                    try:
                        r = conn.request({"op": "tool_calls", "conversation": conv, "status": "pending"})
                    except Down:
                        time.sleep(0.05)
                        continue
                    for row in r.get("tool_calls", []):
                        if row["executor"] != "human" or row["id"] in seen:
                            continue
                        seen.add(row["id"])
                        if rng.random() < 0.25:
                            continue  # nobody answers: it must expire
                        exp = EXPIRES.get(row["name"], 1.0)
                        dl = row.get("deadline") or (now_ms() + exp * 1000)
                        at = dl / 1000 - exp + rng.uniform(0, 1.5 * exp)  # before or after the deadline
                        n += 1
                        heapq.heappush(plan, (time.monotonic() + at - time.time(), n, row["id"], False))
                while plan and plan[0][0] <= time.monotonic():
                    _, _, tcid, after_ok = heapq.heappop(plan)
                    rec = self.resolve_once(conn, tcid, rng, after_ok)
                    if not after_ok and rng.random() < 0.3:
                        # Answer it again: late, so `stale` whenever the first was accepted.
                        n += 1
                        heapq.heappush(plan, (time.monotonic() + rng.uniform(0, 0.3), n, tcid,
                                              rec["outcome"] == "ok"))
                time.sleep(0.02)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"resolver: {e!r}")
        finally:
            conn.close()

    # ---- killing ----------------------------------------------------------------------------------

    @staticmethod
    def proc(pid):
        """(state, ppid, sid, cmdline) of pid, or None."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
        rest = data[data.rindex(b")") + 2:].split()
        return (rest[0].decode(), int(rest[1]), int(rest[3]), cmd)

    def procs(self, pids=None):
        """{pid: (state, ppid, sid, cmdline)} of every process we can read (or of pids)."""
        out = {}
        for pid in pids if pids is not None else (int(n) for n in os.listdir("/proc") if n.isdigit()):
            st = self.proc(pid)
            if st is not None:
                out[pid] = st
        return out

    @staticmethod
    def children(pid):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    def signal_verified(self, pid, ppid, needle, kind):
        """SIGKILL pid through a pidfd, after checking (on that pidfd) it is still the process we chose:
        a pid is never signalled after it was recycled. The kill is logged."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return False
        try:
            st = self.proc(pid)
            if st is None or st[1] != ppid or needle not in st[3] or st[0] in ("Z", "X"):
                return False
            t = now_ms()
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            self.kill_log.append((t, kind, pid))
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def workers(self):
        try:
            return [w["pid"] for w in self.a.request({"op": "status"}, timeout=5)["workers"] if w.get("pid")]
        except (OSError, AssertionError, KeyError):
            return []

    def running_tools(self):
        """[(tool pid, worker pid)] of tools that have written their start line, under a live worker."""
        started = {int(r[4]) for r in self.read_records("tool.rec") if r[0] == "start" and len(r) == 7}
        ws = set(self.workers())
        kids = [k for w in ws for k in self.children(w) if k in started]
        return sorted((pid, st[1]) for pid, st in self.procs(kids).items()
                      if st[1] in ws and "tool.py" in st[3] and st[0] not in ("Z", "X"))

    def kill_one(self, rng, kind):
        a = self.a
        if kind.endswith("mid-tool"):
            deadline = time.monotonic() + 0.1 * TIME_SCALE
            while not (cands := self.running_tools()):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
            if kind == "worker mid-tool":
                _, wpid = rng.choice(cands)
                if self.signal_verified(wpid, a.pid, "agentd-worker", "worker"):
                    self.kills[kind] += 1
                    return True
                return False
        if kind.startswith("supervisor"):
            self.kill_log.append((now_ms(), "supervisor", a.pid))
            a.kill(signal.SIGKILL)
            self.kills[kind] += 1
            time.sleep(rng.uniform(0, 0.3) * TIME_SCALE)
            for attempt in range(40):
                try:
                    a.start()
                    break
                except AssertionError:
                    # The killed agentd's pidfile lock (and listening socket) can outlive it for a
                    # moment: a child it forked an instant before holds them until it execs the worker.
                    if attempt == 39 or "is already running" not in a.log()[-3000:]:
                        raise
                    self.restart_refused += 1
                    time.sleep(0.05)
            self.agentd_pids.append(a.pid)
            return True
        if kind == "worker":
            pids = self.workers()
            if not pids:
                return False
            pid = rng.choice(sorted(pids))
            if self.signal_verified(pid, a.pid, "agentd-worker", kind):
                self.kills[kind] += 1
                return True
            return False
        # A model, agentd-model, tool or MCP server process: a child of a worker (most are short-lived, so
        # look a few times).
        script = CHILD_NEEDLE[kind]
        deadline = time.monotonic() + 0.1 * TIME_SCALE
        while time.monotonic() < deadline:
            ws = set(self.workers())
            kids = [k for w in ws for k in self.children(w)]
            cands = sorted((pid, st[1]) for pid, st in self.procs(kids).items()
                           if st[1] in ws and script in st[3] and st[0] not in ("Z", "X"))
            if cands:
                pid, ppid = rng.choice(cands)
                if self.signal_verified(pid, ppid, script, kind):
                    self.kills[kind] += 1
                    return True
            time.sleep(0.02)
        return False

    # ---- the run ----------------------------------------------------------------------------------

    def run(self):
        a = self.a
        rng = random.Random(SEED)
        self.agentd_pids.append(a.pid)
        for c in self.convs:
            a.ok({"op": "create", "conversation": c,
                  "settings": {"model": "h" if http_conv(c) else "m", "tools": ["work", "mw", "ask", "ask2"],
                               "system": "chaos"}})
        threads = [threading.Thread(target=self.sender, args=(i,), daemon=True) for i in range(SENDERS)]
        res = threading.Thread(target=self.resolver, daemon=True)
        for t in threads + [res]:
            t.start()
        t0 = time.monotonic()
        rounds = 0
        while (sum(self.kills.values()) < KILLS and rounds < ROUNDS and
               (not SECS or time.monotonic() - t0 < SECS)):
            time.sleep(rng.uniform(0.02, 0.15) * TIME_SCALE)
            kind = rng.choices(KILL_KINDS, KILL_WEIGHTS)[0]
            if ((rounds == ROUNDS - 1 or sum(self.kills.values()) == KILLS - 1) and
                    not self.kills["supervisor"] + self.kills["supervisor mid-tool"]):
                # Every bounded run restarts agentd at least once: a short one (10 rounds under
                # valgrind) may not draw it, and then the restarted agentd's clean stop goes unchecked.
                kind = "supervisor"
            if not self.kill_one(rng, kind):
                self.missed[kind] += 1
            rounds += 1
        self.rounds, self.chaos_secs = rounds, time.monotonic() - t0
        self.stop_senders.set()
        for t in threads:
            t.join(scaled(180))
            assert not t.is_alive(), "a sender did not finish its last send"
        self.stop_resolver.set()
        res.join(scaled(60))
        assert not res.is_alive(), "the resolver did not stop"
        assert not self.errors, self.errors

    # ---- settling ---------------------------------------------------------------------------------

    def unsettled(self):
        busy = []
        for c in self.convs:
            # Three reads, not one: an expiry committed between a `get` that saw `suspended` and a
            # `tool_calls` that saw nothing pending looked settled (seen in CI under valgrind). Any commit
            # in between moves last_seq, so the two gets must agree.
            g0 = self.a.ok({"op": "get", "conversation": c})["conversation"]
            pend = self.a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]
            g = self.a.ok({"op": "get", "conversation": c})["conversation"]
            if g["status"] == "active" or pend or g0["last_seq"] != g["last_seq"] or g0["status"] == "active":
                busy.append(f"{c}: {g['status']}, pending {[p['id'] for p in pend]}")
        return busy

    def settle(self):
        if not self.a.running():
            self.a.start()
            self.agentd_pids.append(self.a.pid)
        left = []
        try:
            wait_for(lambda: not (left.__setitem__(slice(None), self.unsettled()) or left), 90,
                     "every conversation to settle")
            self.v.check("settles", True)
        except AssertionError as e:
            self.v.check("settles", False, f"{e}: {left}")
        self.v.check("no zombies", bool(wait_for(lambda: not self.a.zombies(), 10, "agentd to reap its children")))

    # ---- checking ---------------------------------------------------------------------------------

    def read_records(self, name):
        try:
            with open(os.path.join(self.a.dir, name)) as f:
                return [ln.split() for ln in f if ln.strip()]
        except FileNotFoundError:
            return []

    def check_store(self):
        a, v = self.a, self.v
        logs = {c: a.events(c) for c in self.convs}
        rows = {c: {r["id"]: r for r in a.ok({"op": "tool_calls", "conversation": c})["tool_calls"]}
                for c in self.convs}
        gets = {c: a.ok({"op": "get", "conversation": c})["conversation"] for c in self.convs}
        st = collections.Counter()
        by_eid = collections.defaultdict(list)
        calls = {}  # tool_call_id -> (conv, event)
        settlements = collections.defaultdict(list)  # tool_call_id -> [(conv, event)]
        for c, evs in logs.items():
            st["events"] += len(evs)
            seqs = [e["seq"] for e in evs]
            v.check("seqs 1..N", seqs == list(range(1, len(evs) + 1)), f"{c}: seqs {seqs}")
            v.check("last_seq", gets[c]["last_seq"] == len(evs), f"{c}: get last_seq {gets[c]['last_seq']}, {len(evs)} events")
            for e in evs:
                if e["type"] == "user_msg":
                    v.check("user_msg has an event_id", bool(e.get("event_id")), f"{c}: {e}")
                    by_eid[e.get("event_id")].append((c, e))
                elif e["type"] == "tool_call":
                    tcid = e["content"]["tool_call_id"]
                    v.check("tool call ids unique", tcid not in calls, f"{tcid} in {c} and {calls.get(tcid, ('?',))[0]}")
                    calls[tcid] = (c, e)
                elif e["type"] in ("tool_result", "resolution"):
                    settlements[e["content"]["tool_call_id"]].append((c, e))
            self.check_turns(c, evs, rows[c], gets[c])

        # 1. Every acknowledged send is in the log exactly once, at its seq, with its content.
        for eid, (c, seq, content) in self.acked.items():
            got = by_eid.get(eid, [])
            if v.check("acked send logged once", len(got) == 1, f"{eid} ({c} seq {seq}): {len(got)} times: {got}"):
                gc, ge = got[0]
                v.check("acked send at its seq", (gc, ge["seq"], ge["content"]) == (c, seq, {"text": content}),
                        f"{eid}: acked {c}:{seq} {content!r}, logged {gc}:{ge['seq']} {ge['content']}")
        for eid in by_eid:
            v.check("logged send was sent", eid in self.acked, f"user_msg with unknown event_id {eid}")
        st["sends"] = len(self.acked)

        # 2. Every tool call is settled exactly once, by the right kind of event, after it.
        for tcid, (c, e) in calls.items():
            s = settlements.get(tcid, [])
            human = e["content"]["executor"] == "human"
            st["human calls" if human else "server calls"] += 1
            if not v.check("settled exactly once", len(s) == 1, f"{c}: {tcid} settled {len(s)} times: {s}"):
                continue
            sc, se = s[0]
            v.check("settled in its conversation, after the call", sc == c and se["seq"] > e["seq"],
                    f"{tcid}: call {c}:{e['seq']}, settlement {sc}:{se['seq']}")
            v.check("settled by its kind", se["type"] == ("resolution" if human else "tool_result"), f"{tcid}: {se}")
            status = se["content"]["status"]
            st[f"{'human' if human else 'server'} {status}"] += 1
            row = rows[c].get(tcid)
            if v.check("a row per call", row is not None, f"{c}: no tool_calls row for {tcid}"):
                v.check("row agrees with the log", row["status"] == status and row["conversation"] == c,
                        f"{tcid}: row {row['status']} in {row['conversation']}, log {status} in {c}")
                if status == "expired":
                    v.check("expiry not before its deadline", se["inserted_at"] >= (row.get("deadline") or 0),
                            f"{tcid}: expired at {se['inserted_at']}, deadline {row.get('deadline')}")
            if not human and status == "resolved":
                res = se["content"]["result"]
                if e["content"]["name"] == "mw__work":
                    res = res.get("structuredContent") if res.get("text") == tcid else res
                v.check("the tool's result is its own", res == {"done": tcid}, f"{tcid}: result {se['content']['result']}")
        for tcid in settlements:
            v.check("settlement of a logged call", tcid in calls, f"settlement of unknown call {tcid}")
        for c in self.convs:
            extra = set(rows[c]) - {t for t, (cc, _) in calls.items() if cc == c}
            v.check("every row has its tool_call event", not extra, f"{c}: rows without events: {extra}")

        # 3. Dispatches: stdin id == env id, of a server tool_call of that conversation.
        disp = collections.Counter()
        for ln in self.read_records("tool.rec"):
            if ln[0] != "start":
                continue
            tcid, env_id, conv = (ln[1:] + ["?", "?", "?"])[:3]
            disp[tcid] += 1
            v.check("dispatch ids agree", tcid == env_id, f"dispatch with stdin id {tcid}, env id {env_id}")
            c_e = calls.get(tcid)
            v.check("dispatch of a logged server call",
                    c_e is not None and c_e[0] == conv and c_e[1]["content"]["executor"] == "server",
                    f"dispatch of {tcid} in {conv}: {c_e}")
        for tcid, n in disp.items():
            v.check("dispatches within max_attempts", n <= MAX_ATTEMPTS, f"{tcid} dispatched {n} times")
        for tcid, (c, e) in calls.items():
            s = settlements.get(tcid)
            if e["content"]["executor"] == "server" and s and s[0][1]["content"]["status"] == "resolved":
                v.check("a resolved call was dispatched", disp[tcid] >= 1, f"{tcid} resolved without a dispatch")
        st["dispatches"] = sum(disp.values())
        st["redispatches"] = sum(n - 1 for n in disp.values())
        self.check_side_effects(st)

        # 4. Resolves: accepted at most once, accepted => that is the settlement, stale => not applied,
        #    late => stale.
        tokens = {}
        accepted = collections.Counter()
        for r in self.resolves:
            tokens[r["token"]] = r
            st[f"resolves {r['outcome']}"] += 1
            s = settlements.get(r["tcid"], [])
            sett = s[0][1] if len(s) == 1 else None
            applied = sett is not None and sett["content"].get("result") == {"token": r["token"]}
            if r["outcome"] == "ok":
                accepted[r["tcid"]] += 1
                v.check("accepted resolve is the settlement",
                        applied and sett["seq"] == r["seq"] and sett["content"]["status"] == r["status"],
                        f"{r}: settlement {sett}")
            elif r["outcome"] == "stale":
                v.check("stale resolve not applied", not applied, f"{r}: settlement {sett}")
            elif r["outcome"] != "unknown":
                v.check("resolve answered ok or stale", False, f"{r}")
            if r["after_ok"]:
                v.check("resolve after an accepted one is stale", r["outcome"] in ("stale", "unknown"), f"{r}")
            row = None
            if r["tcid"] in calls:
                row = rows[calls[r["tcid"]][0]].get(r["tcid"])
            if row and row.get("resolved_at") and r["sent_ms"] > row["resolved_at"] + 50:
                st["late resolves"] += 1
                v.check("late resolve is stale", r["outcome"] in ("stale", "unknown"),
                        f"{r} sent after the call was settled at {row['resolved_at']}")
        for tcid, n in accepted.items():
            v.check("no resolve accepted twice", n == 1, f"{tcid} accepted {n} times")
        # 5. Expiries as agentd logged them (every incarnation, one log): each fired at most once, and
        #    each one logged is an `expired` resolution in the log. (A kill between the commit and the
        #    log line can make the log count fewer, never more.)
        fired = collections.Counter(re.findall(r"tool call (\S+) expired", a.log()))
        for tcid, n in fired.items():
            s = settlements.get(tcid, [])
            v.check("expiry fired at most once", n == 1, f"{tcid}: agentd logged its expiry {n} times")
            v.check("logged expiry is in the log",
                    len(s) == 1 and s[0][1]["type"] == "resolution" and s[0][1]["content"]["status"] == "expired",
                    f"{tcid}: logged expired, settled by {s}")
        # 6. Every answer in the log came from a model call for that turn (model.rec).
        asked = {(r[0], int(r[1])) for r in self.read_records("model.rec") if len(r) >= 2}
        for c, evs in logs.items():
            for e in evs:
                if e["type"] == "assistant_msg" and not http_conv(c):
                    v.check("answer from a model call for its turn", (c, e["content"]["context_seq"]) in asked,
                            f"{c}: {e} without a model call for turn {e['content']['context_seq']}")
        for tcid, s in settlements.items():
            se = s[0][1]
            if se["type"] == "resolution" and se["content"]["status"] != "expired":
                tok = (se["content"].get("result") or {}).get("token")
                v.check("resolution from a resolve", tok in tokens, f"{tcid}: resolution {se} not from our resolves")
            if se["type"] == "resolution" and se["content"]["status"] == "expired":
                v.check("no expiry after an accepted resolve", accepted[tcid] == 0, f"{tcid} expired yet a resolve was accepted")
        self.stats = st

    def check_turns(self, c, evs, rows, conv):
        """One conversation: turns answered once, in order, tool calls right after their turn, nothing
        owed at the end, records and fsm_state agreeing."""
        v = self.v
        markers = [e for e in evs if e["type"] in ("assistant_msg", "error")]
        # Usage counted once per committed answer (each answer's usage says 1 output token, a summary's
        # 0), however many attempts a kill interrupted: an interrupted attempt adds nothing.
        answers = sum(1 for e in markers if e["type"] == "assistant_msg")
        u = conv.get("usage") or {}
        v.check("usage counted once per answer", (u.get("turns"), u.get("output_tokens")) == (answers, answers),
                f"{c}: usage {u}, {answers} answers in the log")
        ctx = [e["content"]["context_seq"] for e in markers if e["type"] == "assistant_msg"]
        v.check("assistant context_seqs strictly increase", all(x < y for x, y in zip(ctx, ctx[1:])),
                f"{c}: assistant_msg context_seqs {ctx}")
        allctx = [e["content"]["context_seq"] for e in markers]
        v.check("turn markers in order", all(x <= y for x, y in zip(allctx, allctx[1:])), f"{c}: {allctx}")
        for m in markers:
            v.check("context before the turn", m["content"]["context_seq"] < m["seq"], f"{c}: {m}")
            if m["type"] == "assistant_msg" and http_conv(c):
                v.check("answer made by the fake OpenAI server",
                        re.fullmatch(r"http: \d+ message\(s\), \d+ result\(s\)", m["content"]["text"]),
                        f"{c}: {m}")
            elif m["type"] == "assistant_msg":
                t = re.match(r"turn (\d+):", m["content"]["text"])
                v.check("answer made for its context", t and int(t.group(1)) == m["content"]["context_seq"],
                        f"{c}: {m}")
        # Each turn's tool calls follow its assistant_msg in the same commit; the next turn starts only
        # when every one of them is settled (never a second model answer for unsettled calls).
        by_seq = {e["seq"]: e for e in evs}
        turn_of = {}
        cur = None
        for e in evs:
            if e["type"] == "assistant_msg":
                cur = e
            elif e["type"] in ("tool_call", "suspension"):
                prev = by_seq.get(e["seq"] - 1)
                v.check("tool calls committed with their turn",
                        prev is not None and prev["type"] in ("assistant_msg", "tool_call", "suspension"),
                        f"{c}: {e} follows {prev}")
                if e["type"] == "tool_call":
                    turn_of[e["content"]["tool_call_id"]] = cur
            else:
                if e["type"] not in ("tool_call", "suspension"):
                    pass
        settle_seq = {e["content"]["tool_call_id"]: e["seq"] for e in evs if e["type"] in ("tool_result", "resolution")}
        for i, m in enumerate(markers):
            if m["type"] != "assistant_msg":
                continue
            mine = [t for t, tm in turn_of.items() if tm is m]
            nxt = markers[i + 1] if i + 1 < len(markers) else None
            if mine and nxt is not None:
                last = max(settle_seq.get(t, 10 ** 12) for t in mine)
                v.check("next turn after every call settled", nxt["content"]["context_seq"] >= last,
                        f"{c}: turn {m['seq']} calls {mine} settled by seq {last}, next marker {nxt}")
        # Nothing owed at the end: every user_msg and every settlement is in some turn's context.
        lastctx = markers[-1]["content"]["context_seq"] if markers else 0
        owed = [e["seq"] for e in evs if e["type"] in ("user_msg", "tool_result", "resolution") and e["seq"] > lastctx]
        v.check("nothing owed when settled", not owed, f"{c}: events {owed} after the last turn's context {lastctx}")
        v.check("conversation idle when settled", conv["status"] == "idle", f"{c}: status {conv['status']}")
        fsm = conv.get("fsm_state") or {}
        # (never persisted, {}, when no worker has had to: a conversation nobody wrote to)
        v.check("fsm_state idle when settled", not fsm or (fsm.get("state") == "idle" and not fsm.get("pending")),
                f"{c}: fsm_state {fsm}")
        v.check("no pending rows when settled", not [r for r in rows.values() if r["status"] == "pending"],
                f"{c}: {[r for r in rows.values() if r['status'] == 'pending']}")

    def check_side_effects(self, st):
        """Every run of a tool_call_id followed by another run was ended by a kill of that run's tool
        process or of its worker; a kill of agentd alone never justifies one."""
        runs = collections.defaultdict(list)  # tcid -> [{pid, ppid, start, end}]
        ends = {}
        for ln in self.read_records("tool.rec"):
            if ln[0] == "start" and len(ln) == 7:
                runs[ln[1]].append({"pid": int(ln[4]), "ppid": int(ln[5]), "start": int(ln[6]), "end": None})
            elif ln[0] == "end" and len(ln) == 4:
                ends[(ln[1], int(ln[2]))] = int(ln[3])
        killed = collections.defaultdict(list)  # (kind, pid) -> [ms]
        for t, kind, pid in self.kill_log:
            killed[(kind, pid)].append(t)
        sups = sorted(t for t, kind, _ in self.kill_log if kind == "supervisor")  # mid-tool ones too
        for tcid, rs in runs.items():
            rs.sort(key=lambda r: r["start"])
            for r in rs:
                r["end"] = ends.get((tcid, r["pid"]))
            for r, nxt in zip(rs, rs[1:]):
                st["second runs"] += 1
                # A kill is logged just before it is sent: allow it to be logged a moment before the run's
                # own clock read its start. It must come before the next run starts.
                lo, hi = r["start"] - 1000, nxt["start"]
                why = None
                if any(lo <= t <= hi for t in killed[("tool", r["pid"])] + killed[("mcp server", r["pid"])]):
                    why = "its tool killed"
                else:
                    tw = [t for t in killed[("worker", r["ppid"])] if lo <= t <= hi]
                    if tw:
                        why = ("its worker killed during the run" if r["end"] is None or min(tw) <= r["end"]
                               else "its worker killed after the tool's end, before the commit")
                if why:
                    st[f"second runs: {why}"] += 1
                sup = [t for t in sups if r["start"] <= t <= hi]
                if not why and sup:
                    st["second runs: unjustified, after a kill of agentd"] += 1
                self.v.check("a second run follows a kill of the tool or its worker", why is not None,
                             f"{tcid} ran again at {nxt['start']} after the run {r} (pid {r['pid']}, worker "
                             f"{r['ppid']}); kills of agentd between: {sup}")
        st["calls run twice or more"] = sum(1 for rs in runs.values() if len(rs) > 1)
        st["kills that could justify a second run"] = sum(
            1 for t, kind, pid in self.kill_log if kind in ("tool", "mcp server", "worker"))

    def check_after_stop(self):
        a, v = self.a, self.v
        # Nothing of the test's left running: agentds, workers (found by their session, their open
        # store files, or the test's directory in their command line), models and tools, zombies.
        sids = set(self.agentd_pids)

        def leftovers():
            out = []
            for pid, (state, ppid, sid, cmd) in self.procs().items():
                if pid == os.getpid():
                    continue
                mine = sid in sids or a.dir in cmd
                if not mine:
                    try:
                        mine = any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(a.dir)
                                   for fd in os.listdir(f"/proc/{pid}/fd"))
                    except OSError:
                        pass
                if mine:
                    out.append(f"{pid} ({state}, ppid {ppid}): {cmd}")
            return out

        left = []
        try:
            wait_for(lambda: not (left.__setitem__(slice(None), leftovers()) or left), 10,
                     "every process of the test to exit")
        except AssertionError:
            pass
        v.check("nothing left running", not left, f"left running: {left}")
        # The reader table: empty once every process has closed the store. On PostgreSQL, its
        # equivalent: no connection left to the store's database.
        if harness.PG:
            db = harness.pg_target(a.data_dir).rsplit("dbname=", 1)[1]
            n = harness.pg_sql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' "
                               "AND pid <> pg_backend_pid()")
            v.check("no connections left", n == "0", f"{n} connection(s) to {db} after stop")
            self.mdb_stat = f"connections to {db} after stop: {n}"
        else:
            self.reader_table(a, v)
        # agentd's own consistency check, when this agentd has one.
        h = harness.run_agentd("--help", capture_output=True, text=True)
        self.has_check = re.search(r"\bcheck\b", h.stdout + h.stderr) is not None
        if self.has_check:
            p = harness.run_agentd("check", "--data", a.data_dir, capture_output=True, text=True,
                                   timeout=scaled(120))
            v.check("agentd check", p.returncode == 0, f"agentd check exited {p.returncode}:\n{p.stdout}{p.stderr}")
            v.check("agentd check clean under sanitizers", not harness.sanitizer_reports(p.stderr), p.stderr)

    def reader_table(self, a, v):
        p = subprocess.run(["mdb_stat", "-r", a.data_dir], capture_output=True, text=True)
        # (mdb_stat -r exits 1 even when all is well: it returns what its last printf did.)
        v.check("mdb_stat -r runs", "Reader Table Status" in p.stdout, p.stdout + p.stderr)
        readers = [ln for ln in p.stdout.splitlines() if re.match(r"\s*\d+\s+[0-9a-f]+\s+(\d+|-)\s*$", ln)]
        v.check("no reader slots", not readers, f"reader table after stop:\n{p.stdout}")
        self.mdb_stat = p.stdout.strip()

    def report(self):
        st = self.stats
        kills = ", ".join(f"{k} {self.kills[k]}" for k in KILL_KINDS)
        missed = ", ".join(f"{k} {n}" for k, n in self.missed.items() if n) or "none"
        model_calls = collections.Counter((r[0], r[1]) for r in self.read_records("model.rec") if len(r) >= 2)
        print(f"chaos: seed {SEED}: {self.rounds} rounds in {self.chaos_secs:.1f}s, {NCONVS} conversations, "
              f"{SENDERS} senders (AGENTD_TEST_SLOW {TIME_SCALE:g})")
        print(f"chaos: kills delivered: {kills} (no target found: {missed}); restarts refused as "
              f"\"already running\" and retried: {self.restart_refused}")
        print(f"chaos: sends acknowledged {st['sends']} (retried {self.sent['retried']}, "
              f"answered duplicate {self.sent['duplicate replies']}), events {st['events']}")
        print(f"chaos: model calls {sum(model_calls.values())} for {len(model_calls)} turns "
              f"({sum(n - 1 for n in model_calls.values())} re-runs)")
        print(f"chaos: tool calls {st['server calls'] + st['human calls']}: server {st['server calls']} "
              f"(resolved {st['server resolved']}, errored {st['server errored']}; dispatches {st['dispatches']}, "
              f"re-dispatches {st['redispatches']}), human {st['human calls']} (resolved {st['human resolved']}, "
              f"errored {st['human errored']}, expired {st['human expired']})")
        why = ", ".join(f"{k.split(': ', 1)[1]} {n}" for k, n in sorted(st.items()) if k.startswith("second runs: "))
        print(f"chaos: duplicated side effects: {st['calls run twice or more']} tool call(s) ran more than once, "
              f"{st['second runs']} second run(s) ({why or 'none'}); kills of tools or workers "
              f"{st['kills that could justify a second run']}, of agentd "
              f"{self.kills['supervisor'] + self.kills['supervisor mid-tool']} "
              f"({self.kills['supervisor mid-tool']} while a tool ran)")
        print(f"chaos: resolves: accepted {st['resolves ok']}, stale {st['resolves stale']} "
              f"(late {st['late resolves']}), unknown (agentd died) {st['resolves unknown']}")
        print(f"chaos: invariants checked: {len(self.v.checks)} kinds, {sum(self.v.checks.values())} checks, "
              f"{len(self.v.failed)} violated")
        for name, n in sorted(self.v.checks.items()):
            print(f"chaos:   {n:6d}  {name}")
        if not self.has_check:
            print("chaos: `agentd check` not available in this build: skipped")
        sys.stdout.flush()


def setup(a, fake):
    model = a.script("model.py", MODEL)
    tool = a.script("tool.py", TOOL)
    mcp = a.script("mcp.py", MCP)
    a.write_config(f"""
        [agentd]
        idle_timeout = {2 * TIME_SCALE:.3f}s
        restart_limit = 10
        restart_window = 5s

        [model.m]
        command = {PY} {model} {os.path.join(a.dir, "model.rec")}
        timeout = {30 * TIME_SCALE:.0f}s
        retries = 3

        [model.h]
        kind = openai
        base_url = {fake.url}
        model = gpt-chaos
        api_key_env = CHAOS_OPENAI_KEY
        timeout = {30 * TIME_SCALE:.0f}s
        retries = 3
        backoff = 50ms

        [mcp.mw]
        command = {PY} {mcp} {os.path.join(a.dir, "tool.rec")}
        timeout = {30 * TIME_SCALE:.0f}s
        max_attempts = {MAX_ATTEMPTS}
        idempotent = yes

        [tool.work]
        executor = server
        command = {PY} {tool} {os.path.join(a.dir, "tool.rec")}
        timeout = {30 * TIME_SCALE:.0f}s
        max_attempts = {MAX_ATTEMPTS}
        idempotent = yes

        [tool.ask]
        executor = human
        prompt = Approve?
        expires = {EXPIRES['ask']:.3f}s

        [tool.ask2]
        executor = human
        prompt = Approve, slowly?
        expires = {EXPIRES['ask2']:.3f}s
        """)
    return a


def test_chaos():
    print(f"chaos: seed {SEED} (replay with AGENTD_CHAOS_SEED={SEED}), "
          f"{'%g s' % SECS if SECS else '%d rounds' % ROUNDS if _ROUNDS_ENV else '%d kills' % KILLS}", flush=True)
    extra = ["--log-level", os.environ["AGENTD_CHAOS_LOG_LEVEL"]] if os.environ.get("AGENTD_CHAOS_LOG_LEVEL") else []
    os.environ["CHAOS_OPENAI_KEY"] = "sk-chaos"
    with ChaosOpenAI() as fake, setup(Agentd(start=False, extra_args=extra), fake) as a:
        a.start()
        ch = Chaos(a)
        try:
            ch.run()
            ch.settle()
            ch.check_store()
            a.stop()
            ch.check_after_stop()
        finally:
            if ch.v.failed:
                print(f"chaos: seed {SEED}: {len(ch.v.failed)} violation(s):", file=sys.stderr)
                for f in ch.v.failed[:40]:
                    print("  " + f, file=sys.stderr)
        ch.report()
        assert not ch.v.failed, f"{len(ch.v.failed)} invariant(s) violated (seed {SEED}); first: {ch.v.failed[0]}"


harness.main(globals())
