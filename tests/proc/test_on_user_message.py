"""on_user_message = keep | reject per human tool (docs/tools.md, "When a new message comes"): a user message
sent while approvals are pending settles those of reject tools in the send's own transaction, with the real
agentd, workers, agentctl, store and the built-in echo model (`/tool NAME` calls NAME; the next turn echoes the
new message and each settled call's result), and kill -9 of agentd right after the send's ack.
"""
import json

import harness
from harness import Agentd, wait_for
from turnsutil import conv_get, types

CONFIG = """
[tool.gate]
executor = human
prompt = Go ahead?
expires = 1h
on_user_message = reject

[tool.hold]
executor = human
prompt = Hold on?
expires = 1h
"""

REJECTED = {"approved": False, "on_user_message": "reject"}


def setup(a, extra=""):
    a.write_config(CONFIG + extra)
    a.start()
    return a


def new_conv(a, **settings):
    return a.create(settings={"model": "echo", "tools": ["gate", "hold"], **settings})


def pending(a, c):
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]


def ask(a, c, *tools):
    """The echo model calls each tool; returns {name: call} once the conversation waits on them."""
    a.ok({"op": "send", "conversation": c, "events": [{"content": f"/tool {t}"} for t in tools]})
    wait_for(lambda: conv_get(a, c)["status"] == "suspended", 20, "suspended")
    calls = wait_for(lambda: len(pending(a, c)) == len(tools) and pending(a, c), 10, "the pending calls")
    return {tc["name"]: tc for tc in calls}


def resolutions(a, c, call_id):
    return [e for e in a.events(c) if e["type"] == "resolution" and e["content"]["tool_call_id"] == call_id]


def answered(a, c):
    evs = a.events(c)
    return evs[-1]["type"] == "assistant_msg" and evs[-1]["content"]["text"].startswith("echo:") and evs[-1]


def check_store(a):
    a.stop()
    p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_reject_settles_and_the_next_turn_answers():
    """A send to a conversation waiting on a reject tool settles its call resolved, result {"approved": false,
    "on_user_message": "reject", "user_msg": SEQ}, by {"name": "user_message"}, in the send's transaction
    (the reply names it); the next turn answers the message and sees the result; a late approval is stale."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        gate = ask(a, c, "gate")["gate"]
        r = a.ok({"op": "send", "conversation": c, "content": "never mind"})
        assert r["rejected"] == [gate["id"]] and "on_busy" not in r, r
        res = resolutions(a, c, gate["id"])
        assert len(res) == 1 and res[0]["seq"] == r["seq"] + 1, a.events(c)
        assert res[0]["content"] == {"tool_call_id": gate["id"], "status": "resolved",
                                     "result": {**REJECTED, "user_msg": r["seq"]},
                                     "by": {"name": "user_message"}}, res[0]
        tc = a.ok({"op": "tool_call", "tool_call_id": gate["id"]})["tool_call"]
        assert tc["status"] == "resolved", tc
        last = wait_for(lambda: answered(a, c), 30, "the next turn")
        text = last["content"]["text"]
        assert "echo: never mind" in text and gate["id"] + " resolved: " in text and \
            '"on_user_message":"reject"' in text, text
        assert types(a, c) == ["user_msg", "assistant_msg", "tool_call", "suspension", "user_msg", "resolution",
                               "assistant_msg"], a.events(c)
        rc, out, err = a.ctl("approve", gate["id"], check=False)
        assert rc == 1 and "stale" in (out + err), (out, err)
        wait_for(lambda: conv_get(a, c)["status"] == "idle", 10, "idle")
        # Idle, nothing pending: a send rejects nothing, and its reply is as it always was.
        r = a.ok({"op": "send", "conversation": c, "content": "again"})
        assert "rejected" not in r, r
        check_store(a)


def test_keep_stays_pending():
    """A keep tool's call (the default) stays pending across a send, which is enqueued; with calls of both
    tools, only the reject tool's is settled and the conversation still waits on the other; its approval
    then lets one turn answer the message and both results. agentctl send prints what it rejected."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        calls = ask(a, c, "gate", "hold")
        gate, hold = calls["gate"], calls["hold"]
        rc, out, _ = a.ctl("send", c, "change of plan")
        f = dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in out.splitlines()))
        assert f == {"seq": "8", "rejected": json.dumps([gate["id"]])}, out
        assert [tc["id"] for tc in pending(a, c)] == [hold["id"]]
        assert conv_get(a, c)["status"] == "suspended"
        assert resolutions(a, c, hold["id"]) == []
        r = a.ok({"op": "send", "conversation": c, "content": "still there?"})
        assert "rejected" not in r, r  # nothing of a reject tool is pending any more
        a.ctl("approve", hold["id"])
        last = wait_for(lambda: answered(a, c), 30, "the answer")
        text = last["content"]["text"]
        assert "echo: change of plan" in text and "echo: still there?" in text, text
        assert gate["id"] + " resolved: " in text and hold["id"] + " resolved: " in text, text
        assert len(resolutions(a, c, gate["id"])) == 1 and len(resolutions(a, c, hold["id"])) == 1
        check_store(a)


def test_kill_after_the_ack_loses_nothing():
    """kill -9 of agentd right after the send's ack: after the restart the call is settled, with exactly
    one resolution; a replay of the send (same event_id) writes nothing and rejects nothing; the next turn
    answers."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        gate = ask(a, c, "gate")["gate"]
        r = a.ok({"op": "send", "conversation": c, "content": "stop", "event_id": "u-1"})
        a.kill()
        a.start()
        tc = a.ok({"op": "tool_call", "tool_call_id": gate["id"]})["tool_call"]
        assert tc["status"] == "resolved" and tc["result"] == {**REJECTED, "user_msg": r["seq"]}, tc
        again = a.ok({"op": "send", "conversation": c, "content": "stop", "event_id": "u-1"})
        assert again["duplicate"] is True and again["seq"] == r["seq"] and "rejected" not in again, again
        wait_for(lambda: answered(a, c), 30, "the next turn")
        assert len(resolutions(a, c, gate["id"])) == 1, a.events(c)
        assert [e["content"].get("text") for e in a.events(c) if e["type"] == "user_msg"] == ["/tool gate", "stop"]
        check_store(a)


def test_on_busy_modes():
    """on_busy = reject refuses the send: nothing written, nothing settled. steer settles the reject tool's
    call and the turn's next round (round 2) answers both. interrupt cancels every pending call, reject
    tools' too (turn_cancelled lists them; the reply has no `rejected`)."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, on_busy="reject")
        gate = ask(a, c, "gate")["gate"]
        before = a.events(c)
        r = a.request({"op": "send", "conversation": c, "content": "no"})
        assert r["error"] == "conflict" and "nothing was written" in r["message"], r
        assert a.events(c) == before and [tc["id"] for tc in pending(a, c)] == [gate["id"]]
        r = a.ok({"op": "send", "conversation": c, "content": "steered", "on_busy": "steer"})
        assert r["on_busy"] == "steer" and r["rejected"] == [gate["id"]], r
        last = wait_for(lambda: answered(a, c), 30, "round 2")
        assert last["content"].get("round") == 2 and "echo: steered" in last["content"]["text"], last
        assert types(a, c)[4:] == ["user_msg", "steer", "resolution", "assistant_msg"], a.events(c)

        c = new_conv(a, on_busy="interrupt")
        gate = ask(a, c, "gate")["gate"]
        r = a.ok({"op": "send", "conversation": c, "content": "drop it"})
        assert r["on_busy"] == "interrupt" and "rejected" not in r, r
        res = resolutions(a, c, gate["id"])
        assert len(res) == 1 and res[0]["content"]["status"] == "cancelled", res
        cancelled = [e for e in a.events(c) if e["type"] == "turn_cancelled"]
        assert cancelled[0]["content"]["tool_calls"] == [gate["id"]], cancelled
        wait_for(lambda: answered(a, c), 30, "the answer")
        check_store(a)


def test_config_errors():
    """A bad value, the key on a server tool or in [mcp.NAME]: agentd refuses to start, naming it."""
    harness.config_refused(CONFIG.replace("on_user_message = reject", "on_user_message = maybe"),
                           "bad value 'maybe' for 'on_user_message' in [tool.gate]")
    harness.config_refused(CONFIG + "\n[tool.run]\nexecutor = server\ncommand = /bin/true\non_user_message = reject\n",
                           "[tool.run] on_user_message is for human tools (executor = human)")
    harness.config_refused(CONFIG + "\n[mcp.ev]\ncommand = /bin/true\non_user_message = reject\n",
                           "unknown key 'on_user_message' in [mcp.ev]")
    harness.config_starts(CONFIG.replace("on_user_message = reject", "on_user_message = keep"))


harness.main(globals())
