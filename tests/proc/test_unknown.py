"""Calls whose outcome is unknown (docs/tools.md): a call to a tool that is not safe to run twice, interrupted
after its dispatch began, is not run again; it becomes `unknown` (a tool_unknown event), waits like an
approval, and `settle` (or the tool's reconcile command) decides it. Real agentd, real workers, real kill -9.

The side-effect tool appends its tool_call_id to effects.log (the effect), then waits for rel/NAME when its
args say {"block": NAME} (so a test can kill it after the effect and before its result), then prints its
result. The chaos test kills workers and agentd around its dispatches many times and counts executions per
tool_call_id against the dispatches people and reconcile granted (AGENTD_UNKNOWN_ROUNDS rounds, default 20;
AGENTD_CHAOS_SEED picks the kills).
"""
import json
import os
import pathlib
import random
import re
import signal
import sys
import time

import harness
from harness import Agentd, pid_alive, scaled, wait_for

PY = sys.executable or "python3"

TOOL = r'''
import json, os, sys, time
log, d = sys.argv[1], sys.argv[2]
req = json.load(sys.stdin)
with open(log, "a") as f:
    f.write(json.dumps({"id": req["tool_call_id"], "env": os.environ.get("AGENTD_TOOL_CALL_ID"),
                        "attempt": req.get("attempt")}) + "\n")
    f.flush()
    os.fsync(f.fileno())
a = req.get("args") or {}
if a.get("block"):
    while not os.path.exists(os.path.join(d, "rel", a["block"])):
        time.sleep(0.01)
if a.get("sleep"):
    time.sleep(a["sleep"])
print(json.dumps({"done": req["tool_call_id"]}))
'''

# reconcile: answers from the effects log, or as rel/answer says ("unsure", "fail").
RECONCILE = r'''
import json, os, sys
log, d, tcid = sys.argv[1], sys.argv[2], sys.argv[-1]
assert os.environ.get("AGENTD_TOOL_CALL_ID") == tcid
req = json.load(sys.stdin)
assert req["tool_call_id"] == tcid
with open(os.path.join(d, "reconciled.log"), "a") as f:
    f.write(tcid + "\n")
mode = open(os.path.join(d, "rel", "answer")).read().strip() if os.path.exists(os.path.join(d, "rel", "answer")) else ""
if mode == "fail":
    sys.exit(3)
if mode == "no":
    print(json.dumps({"happened": False}))
    sys.exit(0)
if mode == "unsure":
    print(json.dumps({"happened": None}))
    sys.exit(0)
ids = [json.loads(l)["id"] for l in open(log)] if os.path.exists(log) else []
if tcid in ids:
    print(json.dumps({"happened": True, "result": {"reconciled": tcid}}))
else:
    print(json.dumps({"happened": False}))
'''


def start(extra="", env=None):
    a = Agentd(start=False, env=env)
    # kills here are the test's, not a crash loop to give up on
    tool = a.script("tool.py", TOOL)
    rec = a.script("reconcile.py", RECONCILE)
    os.makedirs(os.path.join(a.dir, "rel"), exist_ok=True)
    a.effects = os.path.join(a.dir, "effects.log")
    a.write_config(f"""
[agentd]
restart_limit = 16
restart_window = 1s

[tool.side]
executor = server
command = {PY} {tool} {a.effects} {a.dir}
timeout = 120s

[tool.safe]
executor = server
command = {PY} {tool} {a.effects} {a.dir}
timeout = 120s
idempotent = yes

[tool.rside]
executor = server
command = {PY} {tool} {a.effects} {a.dir}
timeout = 120s
reconcile = {PY} {rec} {a.effects} {a.dir}
{extra}
""")
    a.start()
    return a


def effects(a, tcid=None):
    try:
        with open(a.effects) as f:
            recs = [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []
    return [r for r in recs if tcid is None or r["id"] == tcid]


def release(a, name):
    pathlib.Path(a.dir, "rel", name).touch()


def row(a, tcid):
    return a.ok({"op": "tool_call", "tool_call_id": tcid})["tool_call"]


def conv_get(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]


def ask(a, c, tool, args):
    """Send a message whose echo-model turn calls tool once; returns the call's tool_call_id."""
    before = len(a.events(c, type="tool_call"))
    a.send(c, "/tool %s %s" % (tool, json.dumps(args)))
    return wait_for(lambda: a.events(c, type="tool_call")[before:], 20, "the tool call")[0]["content"]["tool_call_id"]


def kill_worker_mid_call(a, c, tcid):
    """kill -9 the worker once the tool's effect happened (its line is in effects.log)."""
    wait_for(lambda: effects(a, tcid), 20, "the effect")
    pid = a.worker_pid(c)
    assert pid, "no worker while the tool runs"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (harness.proc_stat(pid) or ("Z",))[0] == "Z", 10, "the killed worker gone")


def settled(a, c, tcid):
    return [e for e in a.events(c) if e["type"] in ("tool_result", "resolution")
            and e["content"]["tool_call_id"] == tcid]


def test_interrupted_call_becomes_unknown_and_retry_runs_it_again():
    """A non-idempotent call killed after its effect is not run again on revival: it is unknown (row, event,
    pending in fsm_state, conversation suspended); `settle retry` runs it once more with the same id."""
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["side"]})
        tcid = ask(a, c, "side", {"block": "b1"})
        kill_worker_mid_call(a, c, tcid)
        ev = wait_for(lambda: a.events(c, type="tool_unknown"), 20, "the tool_unknown event")
        assert ev[0]["content"] == {"tool_call_id": tcid, "name": "side", "attempts": 1}, ev
        wait_for(lambda: conv_get(a, c)["status"] == "suspended", 10, "the conversation waiting on it")
        r = row(a, tcid)
        assert r["status"] == "unknown" and r["attempts"] == 1, r
        fsm = conv_get(a, c)["fsm_state"]
        assert fsm["pending"][tcid] == {"executor": "server", "name": "side", "kind": "unknown"}, fsm
        unk = a.ok({"op": "tool_calls", "conversation": c, "status": "unknown"})["tool_calls"]
        assert [t["id"] for t in unk] == [tcid], unk
        # durable: a kill of agentd and a restart leave it unknown, and `agentd check` finds the store whole
        a.kill(signal.SIGKILL)
        chk = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True, timeout=scaled(60))
        assert chk.returncode == 0, chk.stdout + chk.stderr
        # export and import carry it unknown; the copy checks consistent and exports the same
        e1, e2, back = (os.path.join(a.dir, n) for n in ("e1.jsonl", "e2.jsonl", "back"))
        for args in (("export", *a.check_args(), "--output", e1), ("import", "--data", back, "--input", e1),
                     ("check", "--data", back), ("export", "--data", back, "--output", e2)):
            p = harness.run_agentd(*args, capture_output=True, text=True, timeout=scaled(60))
            assert p.returncode == 0, (args, p.stdout, p.stderr)
        rows = [json.loads(x) for x in open(e2) if '"unknown"' in x and tcid in x]
        assert any(r.get("status") == "unknown" for r in rows), open(e2).read()
        assert open(e2).read().splitlines()[1:] == open(e1).read().splitlines()[1:]
        a.start()
        assert row(a, tcid)["status"] == "unknown" and conv_get(a, c)["status"] == "suspended"
        release(a, "b1")
        time.sleep(scaled(0.5))  # nothing runs it while it is unknown
        assert len(effects(a, tcid)) == 1, effects(a)
        assert not settled(a, c, tcid)
        r = a.ok({"op": "settle", "conversation": c, "tool_call_id": tcid, "outcome": "retry", "by": "ops"})
        assert r["conversation"] == c and r["outcome"] == "retry", r
        res = wait_for(lambda: settled(a, c, tcid), 20, "the retried result")
        assert res[0]["type"] == "tool_result" and res[0]["content"]["status"] == "resolved", res
        runs = effects(a, tcid)
        assert len(runs) == 2 and runs[1]["attempt"] == 2 and runs[1]["env"] == tcid, runs
        retry = a.events(c, type="tool_retry")
        assert retry[0]["content"]["attempts"] == 1 and retry[0]["content"]["by"]["name"] == "ops", retry
        assert row(a, tcid)["status"] == "resolved"
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 20, "the turn answered")
        # decided once: a second settle is stale, and nothing is written
        n = len(a.events(c))
        r = a.request({"op": "settle", "conversation": c, "tool_call_id": tcid, "outcome": "retry"})
        assert r["ok"] is False and r["error"] == "stale", r
        assert len(a.events(c)) == n


def test_settle_done_and_failed_record_results_the_model_sees():
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["side"]})
        t1 = ask(a, c, "side", {"block": "never"})
        kill_worker_mid_call(a, c, t1)
        wait_for(lambda: row(a, t1)["status"] == "unknown", 20, "unknown")
        r = a.ok({"op": "settle", "conversation": c, "tool_call_id": t1, "outcome": "done",
                  "result": {"charged": 42}, "by": "alice"})
        ev = [e for e in a.events(c) if e["seq"] == r["seq"]][0]
        assert ev["type"] == "resolution" and ev["content"]["status"] == "resolved", ev
        assert ev["content"]["result"] == {"charged": 42}, ev
        assert ev["content"]["by"]["name"] == "alice" and ev["content"]["by"]["outcome"] == "done", ev
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 20, "the turn answered")
        assert len(effects(a, t1)) == 1
        t2 = ask(a, c, "side", {"block": "never2"})
        kill_worker_mid_call(a, c, t2)
        wait_for(lambda: row(a, t2)["status"] == "unknown", 20, "unknown")
        # agentctl pending lists it beside approvals (once the conversation is suspended: the worker commits
        # that after the call's row); agentctl settle decides it
        out = wait_for(lambda: (lambda o: o if t2 in o else None)(a.ctl("pending")[1]), 30, "pending to list it")
        assert re.search(r"^ID +CONVERSATION +KIND +NAME", out, re.M), out
        assert re.search(r"^%s +%s +unknown +side " % (re.escape(t2), re.escape(c)), out, re.M), out
        rows = json.loads(a.ctl("--json", "pending")[1])["tool_calls"]
        assert [(r["id"], r["kind"], r["status"]) for r in rows] == [(t2, "unknown", "unknown")], rows
        rc, out, err = a.ctl("settle", c, t2, "maybe", check=False)
        assert rc != 0 and "retry" in err, (rc, out, err)
        rc, out, _ = a.ctl("settle", c, t2, "failed")
        assert out.startswith("seq: "), out
        rc, out, err = a.ctl("settle", c, t2, "failed", check=False)
        assert rc != 0 and "stale" in (out + err), (rc, out, err)
        res = settled(a, c, t2)
        assert res[0]["content"]["status"] == "errored", res
        assert "did not take effect" in res[0]["content"]["result"]["error"], res
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 20, "the turn answered")
        assert row(a, t2)["status"] == "errored" and len(effects(a, t2)) == 1


def test_settle_bad_requests():
    """Every bad settle is refused with a clear error and writes nothing."""
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["side", "safe"]})
        tcid = ask(a, c, "safe", {})
        wait_for(lambda: settled(a, c, tcid), 20, "the safe call's result")
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 20, "the turn answered")
        n = len(a.events(c))
        base = {"op": "settle", "conversation": c, "tool_call_id": tcid}
        cases = [
            ({}, "bad_request", "outcome"),
            ({"outcome": "maybe"}, "bad_request", "retry, done, failed"),
            ({"outcome": "retry", "result": 1}, "bad_request", "not retry"),
            ({"outcome": "done", "extra": 1}, "bad_request", "extra"),
            ({"outcome": "done", "by": ""}, "bad_request", "by"),
            ({"outcome": "done"}, "stale", "not unknown"),
            ({"outcome": "done", "tool_call_id": "nope"}, "not_found", "nope"),
            ({"outcome": "done", "conversation": "other"}, "not_found", "other"),
        ]
        for extra, code, words in cases:
            r = a.request({**base, **extra})
            assert r["ok"] is False and r["error"] == code and words in r["message"], (extra, r)
        r = a.request({"op": "settle", "tool_call_id": tcid, "outcome": "done"})
        assert r["ok"] is False and r["error"] == "bad_request" and "conversation" in r["message"], r
        assert len(a.events(c)) == n
        assert row(a, tcid)["status"] == "resolved"


def test_idempotent_tool_is_redispatched():
    """idempotent = yes keeps re-dispatch: the killed call runs again by itself."""
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["safe"]})
        tcid = ask(a, c, "safe", {"block": "s1"})
        kill_worker_mid_call(a, c, tcid)
        release(a, "s1")
        wait_for(lambda: settled(a, c, tcid), 20, "the re-dispatched result")
        assert len(effects(a, tcid)) == 2 and not a.events(c, type="tool_unknown")


def test_reconcile_decides():
    """reconcile answers from the effect's record: happened -> done with its result (no second run);
    not happened -> dispatched again; unsure or failing -> it stays unknown for a person."""
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["rside"]})
        t1 = ask(a, c, "rside", {"block": "never"})
        kill_worker_mid_call(a, c, t1)
        res = wait_for(lambda: settled(a, c, t1), 20, "reconcile's settlement")
        assert res[0]["content"]["status"] == "resolved" and res[0]["content"]["result"] == {"reconciled": t1}, res
        assert res[0]["content"]["by"] == {"reconcile": True, "outcome": "done"}, res
        assert len(effects(a, t1)) == 1
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 20, "the turn answered")
        for mode in ("unsure", "fail"):
            pathlib.Path(a.dir, "rel", "answer").write_text(mode)
            t = ask(a, c, "rside", {"block": "never"})
            kill_worker_mid_call(a, c, t)
            wait_for(lambda: conv_get(a, c)["status"] == "suspended", 20, "waiting for a person")
            assert row(a, t)["status"] == "unknown", mode
            assert t in pathlib.Path(a.dir, "reconciled.log").read_text().split(), mode
            a.ok({"op": "settle", "conversation": c, "tool_call_id": t, "outcome": "failed"})
            wait_for(lambda: conv_get(a, c)["status"] == "idle", 20, "the turn answered")
        # not happened: reconcile's answer grants one more dispatch, run with the same id
        pathlib.Path(a.dir, "rel", "answer").write_text("no")
        t = ask(a, c, "rside", {"block": "r3"})
        kill_worker_mid_call(a, c, t)
        release(a, "r3")
        res = wait_for(lambda: settled(a, c, t), 20, "the dispatch reconcile granted")
        assert res[0]["type"] == "tool_result" and res[0]["content"]["status"] == "resolved", res
        retry = [e for e in a.events(c, type="tool_retry") if e["content"]["tool_call_id"] == t]
        assert len(retry) == 1 and retry[0]["content"]["by"] == {"reconcile": True}, retry
        assert len(effects(a, t)) == 2


def test_mcp_idempotency_key_in_meta():
    """tools/call carries params._meta {"agentd/idempotency_key": tool_call_id, "agentd/attempt": N}: the
    real server-everything receives it (recorded between worker and server)."""
    server = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcp", "node_modules",
                                           "@modelcontextprotocol", "server-everything", "dist", "index.js"))
    if not os.path.exists(server):
        print("skip: no server-everything", file=sys.stderr)
        return
    a = Agentd(start=False)
    rec = a.script("rec.py", r'''
import json, subprocess, sys, threading
log = sys.argv[1]
p = subprocess.Popen(["node", SERVER, "stdio"], stdin=subprocess.PIPE, stdout=sys.stdout)
for line in sys.stdin.buffer:
    with open(log, "ab") as f:
        f.write(line)
    p.stdin.write(line)
    p.stdin.flush()
'''.replace("SERVER", repr(server)))
    a.write_config(f"[mcp.ev]\ncommand = {PY} {rec} {a.dir}/sent.jsonl\n")
    a.start()
    with a:
        c = a.create(settings={"model": "echo", "tools": ["ev"]})
        a.send(c, '/tool ev__echo {"message": "hi"}')
        res = wait_for(lambda: a.events(c, type="tool_result"), 60, "the echo result")
        tcid = res[0]["content"]["tool_call_id"]
        assert res[0]["content"]["status"] == "resolved", res

        def calls():
            try:
                msgs = [json.loads(ln) for ln in open(os.path.join(a.dir, "sent.jsonl"))]
            except FileNotFoundError:
                return []
            return [m for m in msgs if m.get("method") == "tools/call"]
        m = wait_for(calls, 10, "the recorded tools/call")[0]
        assert m["params"]["_meta"] == {"agentd/idempotency_key": tcid, "agentd/attempt": 1}, m


def test_mcp_annotations_and_lists_decide():
    """An MCP tool's annotations decide when the configuration is silent (readOnlyHint or idempotentHint:
    re-dispatched; destructiveHint or none: unknown); idempotent_tools and non_idempotent_tools win over
    them. Each call killed mid-call (after the server recorded it) with a tiny server of tests/mcp."""
    srv = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcp", "annotated_server.py"))
    a = Agentd(start=False)
    log = os.path.join(a.dir, "calls.jsonl")
    a.write_config(f"""
[agentd]
restart_limit = 16
restart_window = 1s

[mcp.an]
command = {PY} {srv} {log}
timeout = 60s

[mcp.lists]
command = {PY} {srv} {log}
prefix = l_
idempotent_tools = plain
non_idempotent_tools = ro, idem
""")
    a.start()
    with a:
        c = a.create(settings={"model": "echo", "tools": ["an", "lists"]})

        def calls():
            try:
                return [json.loads(ln) for ln in open(log)]
            except FileNotFoundError:
                return []
        expect = {"an__ro": False, "an__idem": False, "an__destroy": True, "an__plain": True,
                  "l_plain": False, "l_ro": True, "l_idem": True}
        for tool, unknown in expect.items():
            n = len(calls())
            if os.path.exists(log + ".go"):
                os.remove(log + ".go")
            tcid = ask(a, c, tool, {})
            wait_for(lambda: len(calls()) > n, 30, f"{tool} called")
            got = calls()[n]
            assert got["_meta"] == {"agentd/idempotency_key": tcid, "agentd/attempt": 1}, got
            pid = a.worker_pid(c)
            os.kill(pid, signal.SIGKILL)
            if unknown:
                wait_for(lambda: row(a, tcid)["status"] == "unknown", 30, f"{tool} unknown")
                a.ok({"op": "settle", "conversation": c, "tool_call_id": tcid, "outcome": "failed"})
            else:
                wait_for(lambda: len(calls()) > n + 1, 30, f"{tool} dispatched again")
                assert calls()[n + 1]["_meta"] == {"agentd/idempotency_key": tcid, "agentd/attempt": 2}, calls()
                pathlib.Path(log + ".go").touch()
                wait_for(lambda: row(a, tcid)["status"] == "resolved", 30, f"{tool} resolved")
            wait_for(lambda: conv_get(a, c)["status"] == "idle", 30, "the turn answered")
            assert not [e for e in a.events(c, type="tool_unknown") if e["content"]["tool_call_id"] == tcid] or unknown


def test_chaos_kills_around_side_effects():
    """kill -9 the worker or agentd at random points around dispatches of the side-effect tool, many times.
    Afterwards: every call is done, failed or unknown (none in no state), and no call ran more often than
    1 + the retries a person (settle) or reconcile granted."""
    rounds = int(os.environ.get("AGENTD_UNKNOWN_ROUNDS", "20"))
    rng = random.Random(int(os.environ.get("AGENTD_CHAOS_SEED", "35")))
    with start() as a:
        c = a.create(settings={"model": "echo", "tools": ["side", "rside"]})
        for i in range(rounds):
            tool = "side" if i % 3 else "rside"
            before = len(a.events(c, type="tool_call"))
            try:
                a.send(c, "/tool %s %s" % (tool, json.dumps({"sleep": rng.choice([0, 0.05, 0.2, 0.5])})))
            except AssertionError:
                pass
            time.sleep(rng.random() * 0.4)
            what = rng.choice(["worker", "worker", "agentd", "none"])
            if what == "worker":
                pid = a.worker_pid(c)
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            elif what == "agentd":
                a.kill(signal.SIGKILL)
                a.start()
            # let the round come to rest: settled, or unknown and waiting
            def rest():
                calls = a.events(c, type="tool_call")[before:]
                if not calls:
                    return False
                st = conv_get(a, c)["status"]
                return st in ("idle", "suspended")
            wait_for(rest, 60, f"round {i} at rest")
            # decide what is unknown, at random: retry, done or failed
            for t in a.ok({"op": "tool_calls", "conversation": c, "status": "unknown"})["tool_calls"]:
                outcome = rng.choice(["retry", "done", "failed"])
                a.ok({"op": "settle", "conversation": c, "tool_call_id": t["id"], "outcome": outcome})
            wait_for(lambda: conv_get(a, c)["status"] in ("idle", "suspended"), 60, f"round {i} decided")
        # let everything settle: retries decided above run; decide any new unknown as failed
        def quiet():
            for t in a.ok({"op": "tool_calls", "conversation": c, "status": "unknown"})["tool_calls"]:
                a.ok({"op": "settle", "conversation": c, "tool_call_id": t["id"], "outcome": "failed"})
            return conv_get(a, c)["status"] == "idle"
        wait_for(quiet, 60, "the conversation idle")
        rows = a.ok({"op": "tool_calls", "conversation": c})["tool_calls"]
        evs = a.events(c)
        grants = {}
        for e in evs:
            if e["type"] == "tool_retry":
                grants[e["content"]["tool_call_id"]] = grants.get(e["content"]["tool_call_id"], 0) + 1
        calls = [e["content"]["tool_call_id"] for e in evs if e["type"] == "tool_call"]
        assert len(calls) >= rounds, (len(calls), rounds)
        for r in rows:
            assert r["status"] in ("resolved", "errored", "unknown"), r  # no call in no state
        assert {r["id"] for r in rows} == set(calls), "a call without its row"
        over = {t: (len(effects(a, t)), grants.get(t, 0)) for t in calls
                if len(effects(a, t)) > 1 + grants.get(t, 0)}
        assert not over, f"second executions nobody decided: {over}"
        a.stop()
        chk = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True, timeout=scaled(60))
        assert chk.returncode == 0, chk.stdout + chk.stderr
        n_unknown = len([e for e in evs if e["type"] == "tool_unknown"])
        print(f"chaos: {rounds} rounds, {len(calls)} calls, {n_unknown} became unknown, "
              f"{sum(grants.values())} retries granted, {len(effects(a))} executions", file=sys.stderr)


if __name__ == "__main__":
    harness.main(globals())
