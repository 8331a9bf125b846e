"""Hostile clients and an unlucky operator: every pipelined request answered without the client's help,
a flood of slow readers neither stalls another client nor grows agentd's memory past its bound, and a
tool result finished while the supervisor is stopped and then killed is committed by its worker (the
tool does not run twice). Also: the `limit` range a message names is the range accepted, and a call
settled `interrupted` shows the same attempts on its row and in its result.
"""
import json
import os
import pathlib
import signal
import socket
import sys
import time

import harness
from harness import VALGRIND, Agentd, pid_alive, proc_stat, scaled, wait_for

PY = sys.executable or "python3"


def memory_measurable(pid):
    """agentd's resident memory means something: not under valgrind, nor ASan (whose quarantine keeps
    freed memory, and whose shadow memory grows with every allocation)."""
    if VALGRIND:
        return False
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" not in f.read()


def vm(pid, key):
    """VmRSS, VmHWM... of pid, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} for {pid}")


# ---------------------------------------------------------------------------------------------------
# The control socket


def test_one_write_of_good_and_bad_lines_gets_every_reply():
    """More lines than one wakeup parses, good and bad mixed, the last ones bad: each gets its reply,
    in order, without the client writing again."""
    with Agentd() as a:
        for n_bad_tail in (1, 70):
            lines = []
            for i in range(64):
                lines.append(json.dumps({"op": "ping", "id": i}) if i % 3 else "x")
            lines += ["x"] * n_bad_tail
            with a.conn() as k:
                k.raw(("\n".join(lines) + "\n").encode())
                for i, ln in enumerate(lines):
                    r = k.recv(10)
                    if ln == "x":
                        assert r["ok"] is False and r["error"] == "bad_request", (i, r)
                    else:
                        assert r["ok"] is True and r["id"] == i, (i, r)
        # and 65 lines of nothing but bad requests
        with a.conn() as k:
            k.raw(b"x\n" * 65)
            for i in range(65):
                r = k.recv(10)
                assert r["error"] == "bad_request", (i, r)


FLOODERS = 6
FLOOD_REQS = 30 if VALGRIND else 100  # each far past the output cap; under valgrind a reply is slow to build
BIG_EVENTS = 10        # events of BIG bytes each: one `events` reply is about 400 KB
BIG = 40000
OUT_CAP = 4 << 20      # docs/protocol.md: a connection's queued output that stops its reading


def test_a_flood_of_slow_readers_stalls_nobody_and_memory_stays_bounded():
    """FLOODERS connections each pipeline FLOOD_REQS `events` requests whose replies are ~400 KB and
    never read; meanwhile another client's pings are answered promptly, and agentd's peak memory grows
    by no more than the documented bound per connection (its output cap plus one reply, as buffers
    that may double)."""
    with Agentd(config="[agentd]\nmax_line = 64k\n") as a:
        c = a.create(conversation="big")
        with a.conn(timeout=60) as k:
            for i in range(BIG_EVENTS):
                assert k.request({"op": "send", "conversation": c, "content": {"n": i, "pad": "p" * BIG}})["ok"]
        req = {"op": "events", "conversation": c, "type": "user_msg"}
        one = len(json.dumps(a.ok(req)).encode())
        assert one > BIG * BIG_EVENTS, one
        pid = a.pid
        measure = memory_measurable(pid)
        if measure:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")  # VmHWM := VmRSS: the peak from here on
            base = vm(pid, "VmRSS")
        floods = []
        for n in range(FLOODERS):
            k = a.conn(timeout=60)
            k.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            k.raw(b"".join(json.dumps(dict(req, id=i)).encode() + b"\n" for i in range(FLOOD_REQS)))
            floods.append(k)
        worst = 0.0
        with a.conn() as p:
            for i in range(30):
                t0 = time.monotonic()
                r = p.request({"op": "ping", "id": i})
                took = time.monotonic() - t0
                assert r["ok"] is True and r["id"] == i, r
                worst = max(worst, took)
        # The flooders never read: only a loop stalled on them could take this long, not a loaded machine.
        assert worst < scaled(30), f"a ping took {worst:.3f} s beside the flood"
        if measure:
            # every flooder has met its cap by now: each has more queued than fits in it
            peak = vm(pid, "VmHWM") - base
            bound = FLOODERS * 2 * (OUT_CAP + 2 * one) + (16 << 20)
            assert peak < bound, f"agentd grew by {peak >> 20} MiB beside the flood (bound {bound >> 20} MiB)"
        # nothing lost: a flooder that reads at last gets every reply, in order
        k = floods.pop()
        for i in range(FLOOD_REQS):
            r = k.recv(60)
            assert r["ok"] is True and r["id"] == i and len(r["events"]) == BIG_EVENTS, (i, r.get("error"))
        for k in floods:
            k.close()
        assert a.ok({"op": "ping"})["ok"]


# ---------------------------------------------------------------------------------------------------
# A finished tool result and a dying supervisor

MODEL = r'''
import json, sys
req = json.load(sys.stdin)
msgs = req.get("messages", [])
last = -1
for i, m in enumerate(msgs):
    if m["type"] in ("assistant_msg", "error"):
        last = i
tail = msgs[last + 1:]
def answer(text, calls=()):
    print(json.dumps({"text": text, "tool_calls": list(calls), "usage": {"input_tokens": 1, "output_tokens": 1}}))
    sys.exit(0)
if req["task"] != "turn":
    answer("summary")
done = [m["content"] for m in tail if m["type"] == "tool_result"]
if done:
    answer("after " + ",".join("%s:%s" % (c["tool_call_id"], c["status"]) for c in done))
users = [m["content"].get("text", "") for m in tail if m["type"] == "user_msg"]
if users and users[-1].startswith("tool"):
    _, _, args = users[-1].partition(" ")
    answer("calling", [{"name": "work", "args": json.loads(args or "{}")}])
answer("ok")
'''

# Records each run of each tool_call_id ("start ID PID", "end ID PID"; one O_APPEND write per line).
TOOL = r'''
import json, os, sys, time
rec, d = sys.argv[1], sys.argv[2]
req = json.load(sys.stdin)
tcid = req["tool_call_id"]
def note(what):
    fd = os.open(rec, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, ("%s %s %d %d\n" % (what, tcid, os.getpid(), os.getppid())).encode())
    os.close(fd)
note("start")
args = req.get("args") or {}
if args.get("crash"):
    os.kill(os.getppid(), 9)
    time.sleep(60)
if args.get("block"):
    while not os.path.exists(os.path.join(d, args["block"])):
        time.sleep(0.01)
note("end")
print(json.dumps({"done": tcid}))
'''


def setup(a):
    model = a.script("model.py", MODEL)
    tool = a.script("tool.py", TOOL)
    a.rec = os.path.join(a.dir, "tool.rec")
    a.write_config(f"""
        [model.m]
        command = {PY} {model}
        retries = 0
        [tool.work]
        executor = server
        command = {PY} {tool} {a.rec} {a.dir}
        timeout = 120s
        # "crash" kills its own worker: the sandbox would refuse that signal
        sandbox = no
        # re-dispatch is tested here: the tool is safe to run twice
        idempotent = yes
        """)
    return a


def runs(a):
    try:
        with open(a.rec) as f:
            return [ln.split() for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def syscall_of(pid):
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0]
    except OSError:
        return None


def test_a_finished_tool_result_survives_a_stopped_then_killed_supervisor():
    with setup(Agentd(start=False)) as a:
        a.start()
        c = a.create(model="m", settings={"model": "m", "tools": ["work"]})
        a.send(c, 'tool {"block": "go"}')
        start = wait_for(lambda: [r for r in runs(a) if r[0] == "start"], 15, "the tool's start")[0]
        tcid, tool_pid, worker = start[1], int(start[2]), int(start[3])
        os.kill(a.pid, signal.SIGSTOP)  # busy, swapping or stopped: it answers nothing
        try:
            pathlib.Path(a.dir, "go").touch()
            wait_for(lambda: any(r[0] == "end" for r in runs(a)), 15, "the tool's end")
            wait_for(lambda: not pid_alive(tool_pid), 15, "the tool to exit")
            # the worker waits for the write grant (in poll, on its IPC socket): 7 is poll, 271 ppoll
            wait_for(lambda: syscall_of(worker) in ("7", "271"), 15, "the worker to wait for the grant")
        finally:
            a.kill(signal.SIGKILL)
        wait_for(lambda: not pid_alive(worker) or proc_stat(worker)[0] == "Z", 15, "the worker to exit")
        a.start()
        wait_for(lambda: any(e["type"] == "assistant_msg" and e["content"]["text"].startswith("after")
                             for e in a.events(c)), 15, "the turn after the tool")
        starts = [r for r in runs(a) if r[0] == "start"]
        assert [r[1] for r in starts] == [tcid], f"the tool ran {len(starts)} times: {starts}"
        results = [e["content"] for e in a.events(c) if e["type"] == "tool_result"]
        assert results == [{"tool_call_id": tcid, "status": "resolved", "result": {"done": tcid}}], results
        row = a.ok({"op": "tool_call", "tool_call_id": tcid})["tool_call"]
        assert row["status"] == "resolved" and row["attempts"] == 1, row


def test_a_tool_running_when_agentd_is_killed_runs_once():
    """agentd killed during a tool's run, and started again at once: the worker runs the tool to its end
    and commits its result, and the new agentd starts a worker for the conversation only once that one
    has exited, so the tool is not dispatched again."""
    with setup(Agentd(start=False)) as a:
        a.start()
        c = a.create(model="m", settings={"model": "m", "tools": ["work"]})
        a.send(c, 'tool {"block": "go"}')
        start = wait_for(lambda: [r for r in runs(a) if r[0] == "start"], 15, "the tool's start")[0]
        tcid, worker = start[1], int(start[3])
        a.kill(signal.SIGKILL)
        a.start()  # it finds the conversation active, and its old worker still running
        assert pid_alive(worker)
        pathlib.Path(a.dir, "go").touch()
        wait_for(lambda: any(e["type"] == "assistant_msg" and e["content"]["text"].startswith("after")
                             for e in a.events(c)), 15, "the turn after the tool")
        starts = [r for r in runs(a) if r[0] == "start"]
        assert [r[1] for r in starts] == [tcid], f"the tool ran {len(starts)} times: {starts}"
        results = [e["content"] for e in a.events(c) if e["type"] == "tool_result"]
        assert results == [{"tool_call_id": tcid, "status": "resolved", "result": {"done": tcid}}], results
        wait_for(lambda: not pid_alive(worker) or proc_stat(worker)[0] == "Z", 15, "the old worker to exit")


def test_an_interrupted_call_shows_the_same_attempts_on_its_row_and_in_its_result():
    with setup(Agentd(start=False)) as a:
        a.start()
        c = a.create(model="m", settings={"model": "m", "tools": ["work"]})
        a.send(c, 'tool {"crash": true}')
        wait_for(lambda: any(e["type"] == "tool_result" for e in a.events(c)), 30, "the call to be settled")
        res = [e["content"] for e in a.events(c) if e["type"] == "tool_result"][0]
        assert res["status"] == "errored" and res["result"]["error"] == "interrupted", res
        row = a.ok({"op": "tool_call", "tool_call_id": res["tool_call_id"]})["tool_call"]
        starts = [r for r in runs(a) if r[0] == "start"]
        assert row["attempts"] == res["result"]["attempts"] == len(starts), (row, res, starts)


# ---------------------------------------------------------------------------------------------------
# Messages


def test_the_limit_range_named_is_the_range_accepted():
    with Agentd() as a:
        c = a.create()
        for op, top in (("list", 1000), ("events", 10000)):
            base = {"op": op} if op == "list" else {"op": op, "conversation": c}
            for bad in (0, top + 1, -1):
                r = a.request(dict(base, limit=bad))
                assert r["error"] == "bad_request", r
                assert r["message"] == f"'limit' must be an integer from 1 to {top}", r
            for good in (1, top):
                a.ok(dict(base, limit=good))


harness.main(globals())
