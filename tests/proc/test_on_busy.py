"""on_busy: what a send that finds a turn running does (docs/protocol.md, "Concurrent messages"), with the
real agentd, workers, agentctl and store, and kill -9 of the worker and of agentd in between.

The scripted model records each call (DIR/model.log: {"pid", "round", "owed", "seen"}: the texts of the
user messages its request owes an answer (after the last assistant_msg's context_seq) and of every user
message it sees) and acts on the messages owed:

    stream NAME   (owed) stream "part one " and "part two ", then wait for DIR/rel/NAME
    ask           (owed, no tool results) call the human tool `approve`
    big           (owed alone) stream 70,000 bytes, then wait for DIR/rel/big
    tool          (owed, no tool results) call the server tool `work` (turnsutil's: DIR/tool.log, it waits
                  for DIR/rel/t)
    then          answer "re: " + the owed texts joined with " + " (after tool results with none owed:
                  "after")
"""
import os

import harness
import turnsutil
from harness import Agentd, pid_alive, wait_for
from turnsutil import conv_get, last_is, release, types


MODEL = r'''
import json, os, sys, time
log, d = sys.argv[1], sys.argv[2]
req = json.load(sys.stdin)
msgs = req.get("messages", [])
if req["task"] != "turn":
    print(json.dumps({"text": "summary"}))
    sys.exit(0)
answered, rnd = 0, 1
for m in msgs:
    if m["type"] == "assistant_msg":
        answered = m["content"]["context_seq"]
        rnd = m["content"].get("round", 1)
users = [m for m in msgs if m["type"] == "user_msg"]
owed = [m["content"].get("text", "") for m in users if m["seq"] > answered]
seen = [m["content"].get("text", "") for m in users]
with open(log, "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "owed": owed, "seen": seen, "turn": req["turn"]}) + "\n")

def answer(text, calls=()):
    print(json.dumps({"text": text, "tool_calls": list(calls),
                      "usage": {"input_tokens": 1, "output_tokens": 1, "cost": 0}}), flush=True)
    sys.exit(0)

settled = msgs and msgs[-1]["type"] in ("tool_result", "resolution")
if settled and not owed:
    answer("after")
streams = [t for t in owed if t.startswith("stream ")]
if streams and not settled:
    print(json.dumps({"delta": "part one "}), flush=True)
    print(json.dumps({"delta": "part two "}), flush=True)
    while not os.path.exists(os.path.join(d, "rel", streams[0][7:])):
        time.sleep(0.01)
if owed == ["big"]:  # 70,000 bytes in 35 deltas (the last of "y"), then wait for DIR/rel/big
    for i in range(35):
        print(json.dumps({"delta": ("y" if i == 34 else "x") * 2000}), flush=True)
    while not os.path.exists(os.path.join(d, "rel", "big")):
        time.sleep(0.01)
if "ask" in owed and not settled:
    answer("asking", [{"name": "approve", "args": {}}])
if "tool" in owed and not settled:
    answer("working", [{"name": "work", "args": {"block": "t"}}])
answer("re: " + " + ".join(owed))
'''


def setup(a):
    """turnsutil's agentd (model m, tools work and approve) with this file's model."""
    return turnsutil.setup(a, model_script=MODEL)


def records(a):
    return turnsutil.records(a.model_log)


def new_conv(a, on_busy=None):
    s = {"model": "m", "tools": ["approve", "work"]}
    if on_busy:
        s["on_busy"] = on_busy
    return a.create(settings=s)


def users(a, c):
    return [e["content"]["text"] for e in a.events(c) if e["type"] == "user_msg"]


def idle(a, c):
    return conv_get(a, c)["status"] == "idle"


def streaming(a, c, n=1):
    """The model's n-th call has started (and streams)."""
    wait_for(lambda: len(records(a)) >= n, 20, f"model call {n}")
    return records(a)[n - 1]


def kill_worker(a, c):
    pid = wait_for(lambda: a.worker_pid(c), 10, "the worker")
    os.kill(pid, 9)
    wait_for(lambda: not pid_alive(pid), 10, "the worker dead")


def kills_then_replay(a, c, n, content, event_id):
    """While model call n streams: kill -9 the worker, then (call n + 1 started) agentd, and send
    (content, event_id) again, which must be a pure replay; returns when call n + 2 has started."""
    kill_worker(a, c)
    streaming(a, c, n + 1)
    kill_agentd(a)
    again = a.ok({"op": "send", "conversation": c, "content": content, "event_id": event_id})
    assert again["duplicate"] is True and "on_busy" not in again and "interrupted" not in again, again
    streaming(a, c, n + 2)
    return again


def kill_agentd(a):
    a.kill()
    a.start()


def check_store(a):
    a.stop()
    p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def waiting_on_person(a, c):
    wait_for(lambda: conv_get(a, c)["status"] == "suspended", 20, "suspended")
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"][0]


# ---- bad values --------------------------------------------------------------------------------------------


def test_bad_values():
    """A bad on_busy in create, update or send is bad_request naming the values, and nothing is written."""
    with setup(Agentd(start=False)) as a:
        r = a.request({"op": "create", "settings": {"model": "m", "on_busy": "x"}})
        assert r["error"] == "bad_request" and "'settings.on_busy' must be one of: enqueue, reject, interrupt, " \
            "steer" in r["message"], r
        assert a.ok({"op": "list"})["conversations"] == []
        c = new_conv(a)
        for bad in ("x", 5, None, ""):
            r = a.request({"op": "update", "conversation": c, "settings": {"on_busy": bad}})
            assert r["error"] == "bad_request" and "on_busy" in r["message"], (bad, r)
            r = a.request({"op": "send", "conversation": c, "content": "hi", "on_busy": bad})
            assert r["error"] == "bad_request" and "'on_busy' must be one of: enqueue, reject, interrupt, " \
                "steer" in r["message"], (bad, r)
        r = a.request({"op": "send", "conversation": c, "events": [{"content": "a"}], "on_busy": "x"})
        assert r["error"] == "bad_request", r
        rc, out, err = a.ctl("send", c, "hi", "--on-busy", "x", check=False)
        assert rc != 0 and "on_busy" in err.replace("-", "_"), (rc, out, err)
        assert types(a, c) == []
        assert "on_busy" not in conv_get(a, c)["settings"]
        a.ok({"op": "update", "conversation": c, "settings": {"on_busy": "steer"}})
        assert conv_get(a, c)["settings"]["on_busy"] == "steer"


# ---- enqueue and reject ------------------------------------------------------------------------------------


def test_enqueue_mid_stream():
    """The default: a message sent while the model streams is kept and answered by the next turn; kill -9 of
    the worker and of agentd in between lose nothing and write nothing twice (the turn run again after the
    kill answers both, as one turn answers every message committed before it started)."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "stream b")
        streaming(a, c)
        r = a.ok({"op": "send", "conversation": c, "content": "next"})
        assert "on_busy" not in r, r  # neither the send nor the settings name it: the reply of old
        release(a, "b")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: next"), 30, "the next turn")
        assert [e["content"].get("text") for e in a.events(c)] == ["stream b", "next", "re: stream b", "re: next"]
        wait_for(lambda: idle(a, c), 10, "idle")
        a.send(c, "stream a")
        streaming(a, c, 3)
        r = a.ok({"op": "send", "conversation": c, "content": "second", "event_id": "e2", "on_busy": "enqueue"})
        assert r["on_busy"] == "enqueue", r
        assert kills_then_replay(a, c, 3, "second", "e2")["seq"] == r["seq"]
        release(a, "a")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: stream a + second"), 30, "the answer")
        assert types(a, c)[4:] == ["user_msg", "user_msg", "assistant_msg"], a.events(c)
        assert users(a, c) == ["stream b", "next", "stream a", "second"]
        wait_for(lambda: idle(a, c), 10, "idle")
        assert "on_busy" not in a.ok({"op": "send", "conversation": c, "content": "idle now"})
        check_store(a)


def test_reject_mid_stream():
    """on_busy = reject: a send while the model streams is conflict saying a turn runs, with nothing
    written, also after kill -9 of the worker and of agentd; once the turn ends a send is taken."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, "reject")
        a.send(c, "stream a")
        streaming(a, c)

        def refused():
            r = a.request({"op": "send", "conversation": c, "content": "second"})
            assert r["ok"] is False and r["error"] == "conflict", r
            assert "busy: a turn is running (on_busy = reject): nothing was written" in r["message"], r
            assert r["status"] == "active", r
            assert users(a, c) == ["stream a"]
        refused()
        rc, out, err = a.ctl("send", c, "second", check=False)
        assert rc == 1 and "conflict" in err and "busy" in err, (rc, out, err)
        kill_worker(a, c)
        refused()
        kill_agentd(a)
        refused()
        # A send may override the conversation's setting for itself.
        r = a.ok({"op": "send", "conversation": c, "content": "queued", "on_busy": "enqueue"})
        assert r["on_busy"] == "enqueue", r
        release(a, "a")
        wait_for(lambda: last_is(a, c, "assistant_msg") and a.events(c)[-1]["content"]["text"].endswith("queued"),
                 30, "the answers")
        wait_for(lambda: idle(a, c), 10, "idle")
        a.send(c, "third")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: third"), 30, "the answer")
        assert users(a, c) == ["stream a", "queued", "third"]
        check_store(a)


def test_reject_waiting_on_a_person():
    """reject while a human tool is pending: conflict (status suspended), also across kill -9 of agentd;
    after the approval the turn ends and a send is taken."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.ok({"op": "update", "conversation": c, "settings": {"on_busy": "reject"}})
        a.send(c, "ask")
        call = waiting_on_person(a, c)
        r = a.request({"op": "send", "conversation": c, "content": "second"})
        assert r["error"] == "conflict" and r["status"] == "suspended", r
        kill_worker(a, c)
        kill_agentd(a)
        r = a.request({"op": "send", "conversation": c, "events": [{"content": "b1"}, {"content": "b2"}]})
        assert r["error"] == "conflict", r
        assert users(a, c) == ["ask"]
        a.ctl("approve", call["id"])
        wait_for(lambda: last_is(a, c, "assistant_msg", "after"), 30, "the answer")
        wait_for(lambda: idle(a, c), 10, "idle")
        a.send(c, "now")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: now"), 30, "the answer")
        check_store(a)


# ---- interrupt ---------------------------------------------------------------------------------------------


def test_interrupt_mid_stream():
    """on_busy = interrupt while the model streams: the turn is cancelled as cancel does (its model killed,
    its run cancelled), the text it streamed kept in turn_cancelled, and one turn answers both messages,
    across kill -9 of the worker and of agentd while that turn runs."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, "interrupt")
        a.send(c, "stream a")
        w = a.watch(c)
        rec = streaming(a, c)
        seen = ""
        while seen != "part one part two ":
            line = w.recv(timeout=20)
            seen += line.get("delta", {}).get("text", "")
        w.close()
        r = a.ok({"op": "send", "conversation": c, "content": "second", "event_id": "i2"})
        assert r["on_busy"] == "interrupt" and r["seq"] == 2, r
        wait_for(lambda: not pid_alive(rec["pid"]), 10, "the interrupted model killed")
        evs = a.events(c)
        assert [e["type"] for e in evs[:3]] == ["user_msg", "user_msg", "turn_cancelled"], evs
        assert evs[2]["seq"] == r["interrupted"], (evs, r)
        assert evs[2]["content"] == {"context_seq": 2, "tool_calls": [], "interrupted_by": 2,
                                     "partial_text": "part one part two "}, evs[2]
        runs = a.ok({"op": "runs", "conversation": c})["runs"]
        assert [r["status"] for r in runs if r["id"] == 1] == ["cancelled"], runs
        rec2 = streaming(a, c, 2)
        assert rec2["owed"] == ["stream a", "second"], rec2
        kills_then_replay(a, c, 2, "second", "i2")
        release(a, "a")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: stream a + second"), 30, "one answer to both")
        assert types(a, c) == ["user_msg", "user_msg", "turn_cancelled", "assistant_msg"], a.events(c)
        wait_for(lambda: idle(a, c), 10, "idle")
        check_store(a)


def test_interrupt_waiting_on_a_person():
    """interrupt while a human tool is pending: the call is settled cancelled (a late approval is stale),
    and the next turn answers the new message; across kill -9 of agentd before the send."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "ask")
        call = waiting_on_person(a, c)
        kill_agentd(a)
        rc, out, _ = a.ctl("send", c, "changed my mind", "--on-busy", "interrupt")
        f = dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in out.splitlines()))
        assert f == {"seq": "5", "on_busy": "interrupt", "interrupted": "7"}, out
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: changed my mind"), 30, "the answer")
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg", "assistant_msg", "tool_call", "suspension", "user_msg",
                                           "resolution", "turn_cancelled", "assistant_msg"], evs
        assert evs[5]["content"]["status"] == "cancelled" and evs[6]["content"]["tool_calls"] == [call["id"]]
        assert evs[6]["content"]["interrupted_by"] == evs[4]["seq"] and evs[6]["content"]["partial_text"] == ""
        rc, out, err = a.ctl("approve", call["id"], check=False)
        assert rc == 1 and "stale" in (out + err), (out, err)
        assert len(records(a)) == 2
        wait_for(lambda: idle(a, c), 10, "idle")
        check_store(a)


def test_interrupt_keeps_at_most_64_kib_of_streamed_text():
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, "interrupt")
        a.send(c, "big")
        w = a.watch(c)
        # Deltas reach a watcher in order, after agentd took them: the last one seen, agentd has them all.
        while "y" not in w.recv(timeout=30).get("delta", {}).get("text", ""):
            pass
        w.close()
        a.send(c, "enough")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: big + enough"), 30, "the answer")
        cancelled = [e for e in a.events(c) if e["type"] == "turn_cancelled"]
        assert len(cancelled) == 1 and cancelled[0]["content"]["partial_text"] == "x" * 65536, len(
            cancelled[0]["content"]["partial_text"])


def test_interrupt_a_running_server_tool():
    """interrupt while a server tool runs: its process is killed, its call settled cancelled, and it is never
    dispatched again, not after the tool's release nor after kill -9 of agentd; the next turn answers."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, "interrupt")
        a.send(c, "tool")
        tool = wait_for(lambda: turnsutil.records(a.tool_log), 20, "the tool dispatch")[0]
        r = a.ok({"op": "send", "conversation": c, "content": "stop that"})
        assert r["on_busy"] == "interrupt", r
        wait_for(lambda: not pid_alive(tool["pid"]), 10, "the tool killed")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: stop that"), 30, "the answer")
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg", "assistant_msg", "tool_call", "user_msg", "resolution",
                                           "turn_cancelled", "assistant_msg"], evs
        assert evs[4]["content"]["status"] == "cancelled" and evs[5]["content"]["tool_calls"] == [tool["id"]]
        release(a, "t")
        kill_agentd(a)
        wait_for(lambda: idle(a, c), 10, "idle")
        tc = a.ok({"op": "tool_call", "tool_call_id": tool["id"]})["tool_call"]
        assert tc["status"] == "cancelled", tc
        assert len(turnsutil.records(a.tool_log)) == 1
        check_store(a)


def test_interrupt_idle_is_a_plain_send():
    """Nothing running: an interrupting send cancels nothing and is answered as any."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, "interrupt")
        r = a.ok({"op": "send", "conversation": c, "content": "x"})
        assert "on_busy" not in r and "interrupted" not in r, r
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: x"), 30, "the answer")
        assert types(a, c) == ["user_msg", "assistant_msg"]


# ---- steer -------------------------------------------------------------------------------------------------


def test_steer_mid_stream():
    """on_busy = steer while the model streams: the message (named by a steer event) is answered by the running
    turn's next model round, round 2 of the same turn, not a new turn at round 1; kill -9 of the worker and
    of agentd during that round run round 2 again, and nothing is answered twice."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, "steer")
        a.send(c, "stream a")
        streaming(a, c)
        r = a.ok({"op": "send", "conversation": c, "content": "stream b", "event_id": "s2"})
        assert r["on_busy"] == "steer" and r["seq"] == 2, r
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg", "user_msg", "steer"] and evs[2]["content"] == {"seqs": [2]}
        release(a, "a")
        wait_for(lambda: len(records(a)) >= 2, 20, "round 2")
        assert records(a)[1]["owed"] == ["stream b"] and records(a)[1]["seen"] == ["stream a", "stream b"]
        kills_then_replay(a, c, 2, "stream b", "s2")
        release(a, "b")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: stream b"), 30, "round 2's answer")
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg", "user_msg", "steer", "assistant_msg", "assistant_msg"], evs
        assert evs[3]["content"]["text"] == "re: stream a" and "round" not in evs[3]["content"], evs[3]
        assert evs[4]["content"]["round"] == 2 and evs[4]["content"]["context_seq"] == 4, evs[4]
        assert [r["owed"] for r in records(a)[1:]] == [["stream b"]] * 3, records(a)
        wait_for(lambda: idle(a, c), 10, "idle")
        check_store(a)


def test_steer_while_a_server_tool_runs():
    """steer while a server tool runs: round 2 answers the tool's result and the message; kill -9 of the worker
    mid-tool re-dispatches the call (same id), and the message is answered once."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a, "steer")
        a.send(c, "tool")
        tool = wait_for(lambda: turnsutil.records(a.tool_log), 20, "the tool dispatch")[0]
        assert a.ok({"op": "send", "conversation": c, "content": "and more"})["on_busy"] == "steer"
        kill_worker(a, c)
        again = wait_for(lambda: turnsutil.records(a.tool_log)[1:], 20, "the re-dispatch")[0]
        assert again["id"] == tool["id"], (tool, again)
        release(a, "t")
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: and more"), 30, "round 2")
        evs = a.events(c)
        assert [e["type"] for e in evs] == ["user_msg", "assistant_msg", "tool_call", "user_msg", "steer",
                                           "tool_result", "assistant_msg"], evs
        assert evs[-1]["content"]["round"] == 2, evs[-1]
        assert records(a)[-1]["owed"] == ["and more"]
        wait_for(lambda: idle(a, c), 10, "idle")
        check_store(a)


def test_steer_waiting_on_a_person():
    """steer while a human tool is pending (agentctl send --on-busy steer, overriding enqueue): the message
    reaches the turn's next round, after the tool's result, as round 2; an enqueued one would start a new
    turn at round 1. kill -9 of the worker and of agentd before the approval lose nothing."""
    with setup(Agentd(start=False)) as a:
        c = new_conv(a)
        a.send(c, "ask")
        call = waiting_on_person(a, c)
        rc, out, _ = a.ctl("send", c, "and also this", "--on-busy", "steer")
        assert "on_busy: steer" in out, out
        kill_worker(a, c)
        kill_agentd(a)
        assert conv_get(a, c)["status"] == "suspended"
        a.ctl("approve", call["id"])
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: and also this"), 30, "the answer")
        last = a.events(c)[-1]
        assert last["content"]["round"] == 2, last
        assert records(a)[-1]["owed"] == ["and also this"]
        assert users(a, c) == ["ask", "and also this"]
        wait_for(lambda: idle(a, c), 10, "idle")
        # The same with enqueue: a new turn, round 1.
        a.send(c, "ask")
        call = waiting_on_person(a, c)
        a.send(c, "queued")
        a.ctl("approve", call["id"])
        wait_for(lambda: last_is(a, c, "assistant_msg", "re: queued"), 30, "the answer")
        assert "round" not in a.events(c)[-1]["content"]
        check_store(a)


harness.main(globals())
