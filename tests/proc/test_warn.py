"""Expiry warnings (a human tool's warn_before) with the real agentd, workers and agentctl.

The model script asks for the human tool `approve` when the last message is a user_msg, and answers
"done" once the call is settled. Durations in the configuration scale with AGENTD_TEST_SLOW, so a slow
run (valgrind) keeps the same order of events.
"""
import json
import os
import signal
import time

import harness
from harness import Agentd, scaled, wait_for

MODEL = r'''
import json, sys
req = json.load(sys.stdin)
last = req["messages"][-1]
if last["type"] == "user_msg":
    print(json.dumps({"text": "asking", "tool_calls": [{"name": "approve", "args": {"n": last["seq"]}}]}))
else:
    print(json.dumps({"text": "done"}))
'''


def ms(secs):
    return int(scaled(secs) * 1000)


def start(expires, warn_before, extra=""):
    a = Agentd(start=False)
    m = a.script("model.py", MODEL)
    a.write_config(f"[model.m]\ncommand = python3 {m}\n[tool.approve]\nexecutor = human\n"
                   f"expires = {expires}ms\nwarn_before = {warn_before}ms\n{extra}")
    a.start()
    return a


def ask(a):
    c = a.ok({"op": "create", "settings": {"model": "m", "tools": ["approve"]}})["conversation"]
    a.send(c, "please")
    wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "suspended", 20,
             "the conversation suspended on approve")
    call = a.ok({"op": "tool_calls", "conversation": c})["tool_calls"][0]
    return c, call


def of_type(a, c, t):
    return [e for e in a.events(c) if e["type"] == t]


def test_warned_once_then_expired_seen_by_watch_and_long_poll():
    a = start(ms(2), ms(1.5))
    try:
        c, call = ask(a)
        deadline = call["deadline"]
        last = a.ok({"op": "events", "conversation": c})["last_seq"]
        w = a.watch(c)
        with a.conn() as poll:
            poll.send({"op": "events", "conversation": c, "after": last, "wait_ms": ms(20)})
            r = poll.recv(timeout=scaled(30))
        assert r["ok"] and [e["type"] for e in r["events"]] == ["expiry_warning"], r
        ev = r["events"][0]
        assert ev["content"]["tool_call_id"] == call["id"] and ev["content"]["name"] == "approve", ev
        assert ev["content"]["deadline"] == deadline, ev
        assert ev["inserted_at"] >= deadline - ms(1.5), (ev, deadline)
        assert 0 < ev["content"]["expires_in_ms"] <= ms(1.5), ev
        got = w.recv(timeout=scaled(30))
        assert got["event"]["type"] == "expiry_warning" and got["event"]["seq"] == ev["seq"], got
        # the expiry follows; the warning was given once
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the expiry")
        res = of_type(a, c, "resolution")[0]
        assert res["content"]["status"] == "expired" and res["seq"] > ev["seq"], res
        assert len(of_type(a, c, "expiry_warning")) == 1
        rc, out, _ = a.ctl("events", c, "--type", "expiry_warning", check=False)
        assert rc == 0 and "expiry_warning" in out, out
        w.close()
    finally:
        a.close()


def test_settled_first_is_never_warned():
    a = start(ms(2), ms(1.5))
    try:
        early, call = ask(a)
        a.ok({"op": "resolve", "tool_call_id": call["id"], "result": {"ok": True}})
        # a call made later warns later: once it has, the settled one would have been warned first
        later, call2 = ask(a)
        wait_for(lambda: of_type(a, later, "expiry_warning"), 30, "the later call's warning")
        assert not of_type(a, early, "expiry_warning"), a.events(early)
        assert a.ok({"op": "tool_call", "tool_call_id": call["id"]})["tool_call"]["status"] == "resolved"
    finally:
        a.close()


def test_durable_across_kills_and_restarts():
    # warned while agentd was down: given on start, before the expiry
    a = start(ms(5), ms(4))
    try:
        c, call = ask(a)
        warn_at = call["deadline"] - ms(4)
        a.kill(signal.SIGKILL)
        wait_for(lambda: time.time() * 1000 > warn_at + 50, 30, "the warning time to pass while agentd is down")
        a.start()
        wait_for(lambda: of_type(a, c, "expiry_warning"), 10, "the warning given on start")
        assert not of_type(a, c, "resolution"), a.events(c)
        # killed and restarted between the warning and the expiry: never warned twice
        a.kill(signal.SIGKILL)
        a.start()
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the expiry")
        assert len(of_type(a, c, "expiry_warning")) == 1, a.events(c)
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


def test_worker_killed_while_awaiting_keeps_the_warning():
    a = start(ms(2.5), ms(2))
    try:
        c, call = ask(a)
        wpid = a.worker_pid(c)
        assert wpid, a.ok({"op": "get", "conversation": c})
        os.kill(wpid, signal.SIGKILL)
        wait_for(lambda: of_type(a, c, "expiry_warning"), 30, "the warning")
        wait_for(lambda: of_type(a, c, "resolution"), 30, "the expiry")
        assert len(of_type(a, c, "expiry_warning")) == 1, a.events(c)
    finally:
        a.close()


def test_bad_warn_before_is_refused():
    cases = [
        ("[tool.t]\nexecutor = human\nexpires = 10m\nwarn_before = 10m\n",
         "[tool.t] warn_before (600000 ms) must be shorter than expires (600000 ms)"),
        ("[tool.t]\nexecutor = human\nexpires = 1m\nwarn_before = 2m\n",
         "[tool.t] warn_before (120000 ms) must be shorter than expires (60000 ms)"),
        ("[tool.t]\nexecutor = human\nexpires = 0\nwarn_before = 1m\n",
         "[tool.t] warn_before needs an expiry: expires is 0 (never)"),
        ("[tool.t]\ncommand = true\nwarn_before = 1m\n",
         "[tool.t] warn_before is for human tools (executor = human)"),
        ("[tool.t]\nexecutor = human\nwarn_before = 0\n", "bad value '0' for 'warn_before' in [tool.t]"),
        ("[tool.t]\nexecutor = human\nwarn_before = soon\n", "bad value 'soon' for 'warn_before' in [tool.t]"),
        ("[mcp.s]\ncommand = true\nwarn_before = 1m\n", "unknown key 'warn_before' in [mcp.s]"),
    ]
    for text, msg in cases:
        harness.config_refused(text, msg)
    # the default expires (1h) takes a shorter warn_before
    harness.config_starts("[tool.t]\nexecutor = human\nwarn_before = 10m\n")


harness.main(globals())
