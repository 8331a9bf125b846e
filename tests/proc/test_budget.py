"""Budgets (settings.budget, [agentd] budget_*) with the real agentd, workers and agentctl.

The model is a script that appends one JSON line per call to DIR/calls.log (its turn and the seq of the
last message it was given) and answers with usage {input_tokens: 20, output_tokens: 10, cost: 0.25}. While
DIR/hold exists it waits, after recording the call, until DIR/hold is removed: a test can kill the worker
while the model holds its answer.
"""
import json
import os
import signal

import harness
from harness import Agentd, pid_alive, wait_for

MODEL = r'''
import json, os, sys, time
d = sys.argv[1]
req = json.load(sys.stdin)
msgs = req["messages"]
with open(os.path.join(d, "calls.log"), "a") as f:
    f.write(json.dumps({"turn": req["turn"], "task": req["task"], "conv": req["conversation"]}) + "\n")
while os.path.exists(os.path.join(d, "hold")):
    time.sleep(0.02)
print(json.dumps({"text": "ok %d" % req["turn"],
                  "usage": {"input_tokens": 20, "output_tokens": 10, "cost": 0.25}}))
'''


def start(extra=""):
    a = Agentd(start=False)
    m = a.script("model.py", MODEL)
    a.write_config(f"[model.m]\ncommand = python3 {m} {a.dir}\n{extra}")
    a.start()
    return a


def calls(a):
    try:
        with open(os.path.join(a.dir, "calls.log")) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


def conv(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]


def of_type(a, c, t):
    return [e for e in a.events(c) if e["type"] == t]


def answered(a, c, n):
    """Wait for n assistant_msg events and the conversation idle again."""
    wait_for(lambda: len(of_type(a, c, "assistant_msg")) == n and conv(a, c)["status"] == "idle", 20,
             f"{n} answered turns")


def paused(a, c, n):
    """Wait for the n-th budget_exceeded event and status paused; return that event's content."""
    wait_for(lambda: len(of_type(a, c, "budget_exceeded")) == n and conv(a, c)["status"] == "paused", 20,
             f"budget_exceeded #{n} and status paused")
    return of_type(a, c, "budget_exceeded")[-1]["content"]


def test_tokens_pause_send_and_resume():
    a = start()
    try:
        c = a.ok({"op": "create", "settings": {"model": "m", "budget": {"max_tokens": 60}}})["conversation"]
        a.send(c, "one")
        answered(a, c, 1)
        a.send(c, "two")
        answered(a, c, 2)
        u = conv(a, c)["usage"]
        assert (u["input_tokens"], u["output_tokens"], u["turns"]) == (40, 20, 2), u
        s3 = a.send(c, "three")
        why = paused(a, c, 1)
        assert why["limit"] == "max_tokens" and why["used"] == 60 and why["max"] == 60, why
        assert why["usage"]["turns"] == 2 and why["usage"]["cost"] == 0.5, why
        assert len(calls(a)) == 2, calls(a)  # refused before the model was called
        g = conv(a, c)
        assert g["fsm_state"]["state"] == "paused", g
        # agentctl lists it by its status
        rc, out, _ = a.ctl("list", "--status", "paused")
        assert c in out, out
        rc, out, _ = a.ctl("list", "--status", "idle")
        assert c not in out, out
        # a send while paused is kept and says so; it wakes nothing
        r = a.ok({"op": "send", "conversation": c, "content": "four"})
        assert r["status"] == "paused" and r["seq"] > s3, r
        assert conv(a, c)["status"] == "paused"
        # an update that leaves the budget spent: still paused, no second event
        r = a.ok({"op": "update", "conversation": c, "settings": {"system": "s", "budget": {"max_tokens": 60}}})
        assert r["status"] == "paused", r
        # a compaction is a model call too: refused while the budget is spent
        r = a.request({"op": "compact", "conversation": c}, timeout=30)
        assert not r["ok"] and "the budget's max_tokens is reached" in r["message"], r
        assert len(calls(a)) == 2 and a.ok({"op": "summary", "conversation": c})["summary"] is None
        # paused survives a restart of agentd, and gets no worker from it
        a.restart()
        g = conv(a, c)
        assert g["status"] == "paused" and g["worker"] is None, g
        # raising the budget resumes it: one turn answers both messages
        r = a.ok({"op": "update", "conversation": c, "settings": {"budget": {"max_tokens": 90}}})
        assert r["status"] == "active", r
        answered(a, c, 3)
        assert len(calls(a)) == 3, calls(a)
        last = of_type(a, c, "assistant_msg")[-1]["content"]
        assert last["context_seq"] == r_seq(a, c, "four"), last
        assert len(of_type(a, c, "budget_exceeded")) == 1
        u = conv(a, c)["usage"]
        assert (u["input_tokens"] + u["output_tokens"], u["turns"]) == (90, 3), u
        # spent again: the next send pauses it with the new figures
        a.send(c, "five")
        why = paused(a, c, 2)
        assert (why["limit"], why["used"], why["max"]) == ("max_tokens", 90, 90), why
        # ending a paused conversation ends it
        a.ok({"op": "update", "conversation": c, "status": "ended"})
        assert conv(a, c)["status"] == "ended"
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


def r_seq(a, c, text):
    return [e["seq"] for e in a.events(c) if e["type"] == "user_msg" and e["content"]["text"] == text][0]


def test_turns_and_cost_limits_and_removing_one():
    a = start()
    try:
        t = a.ok({"op": "create", "settings": {"model": "m", "budget": {"max_turns": 1, "max_cost": 100}}})[
            "conversation"]
        a.send(t, "one")
        answered(a, t, 1)
        a.send(t, "two")
        why = paused(a, t, 1)
        assert (why["limit"], why["used"], why["max"]) == ("max_turns", 1, 1), why
        # null removes a limit: the conversation resumes
        r = a.ok({"op": "update", "conversation": t, "settings": {"budget": {"max_turns": None}}})
        assert r["status"] == "active", r
        answered(a, t, 2)

        c = a.ok({"op": "create", "settings": {"model": "m", "budget": {"max_cost": 0.5}}})["conversation"]
        for i, text in enumerate(["a", "b"]):
            a.send(c, text)
            answered(a, c, i + 1)
        a.send(c, "c")
        why = paused(a, c, 1)
        assert (why["limit"], why["used"], why["max"]) == ("max_cost", 0.5, 0.5), why
        # agentctl sets a budget through update's settings too
        a.ctl("update", c, "--budget", '{"max_cost": 0.75}')
        answered(a, c, 3)
        assert conv(a, c)["settings"]["budget"] == {"max_cost": 0.75}
    finally:
        a.close()


def test_config_default_and_override():
    a = start("[agentd]\nbudget_max_turns = 1\n")
    try:
        d = a.ok({"op": "create", "settings": {"model": "m"}})["conversation"]
        free = a.ok({"op": "create", "settings": {"model": "m", "budget": {"max_turns": None}}})["conversation"]
        for c in (d, free):
            a.send(c, "one")
            answered(a, c, 1)
            a.send(c, "two")
        why = paused(a, d, 1)
        assert why["limit"] == "max_turns" and why["max"] == 1, why
        answered(a, free, 2)
        # a zero budget refuses the first turn
        z = a.ok({"op": "create", "settings": {"model": "m", "budget": {"max_tokens": 0}}})["conversation"]
        a.send(z, "x")
        why = paused(a, z, 1)
        assert (why["limit"], why["used"], why["max"]) == ("max_tokens", 0, 0), why
        assert not [x for x in calls(a) if x["conv"] == z], calls(a)
    finally:
        a.close()


def test_bad_budgets_are_refused():
    a = start()
    try:
        c = a.ok({"op": "create", "settings": {"model": "m", "budget": {"max_turns": 5}}})["conversation"]
        bad = [
            ("x", "'settings.budget' must be an object"),
            ([1], "'settings.budget' must be an object"),
            ({"max_tokens": -1}, "'settings.budget.max_tokens' must be an integer from 0"),
            ({"max_tokens": 1.5}, "'settings.budget.max_tokens' must be an integer from 0"),
            ({"max_turns": "3"}, "'settings.budget.max_turns' must be an integer from 0"),
            ({"max_cost": "1"}, "'settings.budget.max_cost' must be a number of at least 0"),
            ({"max_cost": -0.5}, "'settings.budget.max_cost' must be a number of at least 0"),
            ({"max_calls": 1}, "unknown field 'settings.budget.max_calls' (max_tokens, max_cost, max_turns)"),
        ]
        for b, msg in bad:
            r = a.request({"op": "create", "conversation": "nope", "settings": {"model": "m", "budget": b}})
            assert not r["ok"] and r["error"] == "bad_request" and msg in r["message"], (b, r)
            r = a.request({"op": "update", "conversation": c, "settings": {"budget": b}})
            assert not r["ok"] and r["error"] == "bad_request" and msg in r["message"], (b, r)
        assert a.request({"op": "get", "conversation": "nope"})["error"] == "not_found"
        assert conv(a, c)["settings"]["budget"] == {"max_turns": 5}
        r = a.request({"op": "list", "status": "stopped"})
        assert not r["ok"] and "paused" in r["message"], r
        rc, _, err = a.ctl("update", c, "--budget", "{nope", check=False)
        assert rc != 0 and "budget" in err, err
    finally:
        a.close()
    for line, what in [("budget_max_tokens = -1", "budget_max_tokens"), ("budget_max_turns = 1.5", "budget_max_turns"),
                       ("budget_max_cost = 1e3", "budget_max_cost"), ("budget_max_cost = nan", "budget_max_cost"),
                       ("budget_max_cost = 1.2.3", "budget_max_cost"), ("budget_max_toks = 3", "budget_max_toks")]:
        b = Agentd(start=False)
        try:
            b.write_config(f"[agentd]\n{line}\n")
            assert b.expect_exit() == 2
            assert f"'{what}'" in b.log() and "[agentd]" in b.log(), b.log()
        finally:
            b.close()


def test_kill_mid_turn_counts_usage_once():
    """A worker killed while the model holds its answer leaves no usage behind; the turn's re-run is
    counted once, so the budget decision afterwards is exact."""
    a = start()
    try:
        c = a.ok({"op": "create", "settings": {"model": "m", "budget": {"max_tokens": 60}}})["conversation"]
        a.send(c, "one")
        answered(a, c, 1)
        hold = os.path.join(a.dir, "hold")
        open(hold, "w").close()
        a.send(c, "two")
        wait_for(lambda: len(calls(a)) == 2, 20, "the model holding the second turn")
        wpid = a.worker_pid(c)
        assert wpid
        os.kill(wpid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(wpid), 10, "the worker dead")
        # revived, the turn runs again: the model is called a third time
        wait_for(lambda: len(calls(a)) == 3, 20, "the re-run of the killed turn")
        assert conv(a, c)["usage"]["input_tokens"] == 20  # the killed call counted nowhere
        os.unlink(hold)
        answered(a, c, 2)
        g = conv(a, c)
        assert (g["usage"]["input_tokens"], g["usage"]["output_tokens"], g["usage"]["turns"]) == (40, 20, 2), g
        assert g["usage"]["cost"] == 0.5, g
        # exactly at the limit: the next turn is refused before any model call
        a.send(c, "three")
        why = paused(a, c, 1)
        assert (why["limit"], why["used"], why["max"]) == ("max_tokens", 60, 60), why
        assert len(calls(a)) == 3, calls(a)
        # a kill of a paused conversation's worker (if any) revives nothing
        a.kill(signal.SIGKILL)
        a.start()
        g = conv(a, c)
        assert g["status"] == "paused" and g["usage"]["turns"] == 2 and g["worker"] is None, g
        assert len(calls(a)) == 3
        # a paused conversation is a consistent state for agentd check
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


harness.main(globals())
