"""The control protocol through the real socket (docs/protocol.md):
every op, pipelining with ids of every JSON type, bad input of every kind (each answered with the right
code, the connection still serving), too_large, misbehaving clients that must stall nobody, concurrent
clients and group commit, watch and long-poll woken by a worker's commits, and the socket file itself."""
import json
import os
import re
import signal
import socket
import threading
import time

import harness
from harness import Agentd, Client, scaled, wait_for, pid_alive

HUMAN_TOOLS = """
[tool.approve]
executor = human
prompt = Approve?
expires = 1h
"""


def expect_error(conn, req, code, what=None):
    """Send req (dict, or bytes sent as given) on conn; assert an error reply with `code`, then assert the
    same connection still answers a ping. Returns the error reply."""
    if isinstance(req, (bytes, bytearray)):
        conn.raw(req)
    else:
        conn.send(req)
    r = conn.recv()
    assert r.get("ok") is False and r.get("error") == code, f"{what or req!r}: expected {code}, got {r}"
    assert isinstance(r.get("message"), str) and r["message"], r
    if isinstance(req, dict) and "id" in req and not huge_int(req):
        assert "id" in r and r["id"] == req["id"], f"id not echoed: {req} -> {r}"
    p = conn.request({"op": "ping", "id": "after-bad"})
    assert p == {"id": "after-bad", "ok": True, "version": p.get("version")} and p["version"], p
    return r


def huge_int(v):
    """Whether v holds an integer beyond 64 bits: valid JSON that agentd's parser cannot read, so that
    request's id cannot be echoed (it is still bad_request)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return not -2 ** 63 <= v < 2 ** 63
    if isinstance(v, dict):
        return any(huge_int(x) for x in v.values())
    if isinstance(v, list):
        return any(huge_int(x) for x in v)
    return False


def metric(a, name, labels=None):
    text = a.ok({"op": "metrics"})["text"]
    key = name + ("{" + labels + "}" if labels else "")
    m = re.search(r"^" + re.escape(key) + r" (\S+)$", text, re.M)
    assert m, f"no {key} in metrics:\n{text[:2000]}"
    return float(m.group(1))


def conv(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]


# ---------------------------------------------------------------------------------------------------
# Ops


def test_ping_create_get_list():
    with Agentd() as a:
        r = a.ok({"op": "ping", "id": 7})
        assert r["id"] == 7 and isinstance(r["version"], str) and r["version"], r
        # create with an id, and without: a generated id in the alphabet
        r = a.ok({"op": "create", "conversation": "demo", "settings": {"model": "echo", "system": "Be brief.",
                                                                       "params": {"temperature": 0.2}}})
        assert r["conversation"] == "demo", r
        gen = a.ok({"op": "create", "settings": {"model": "echo"}})["conversation"]
        assert re.fullmatch(r"[A-Za-z0-9._:-]{1,128}", gen), gen
        assert gen != "demo"
        dup = a.request({"op": "create", "conversation": "demo", "settings": {"model": "echo"}})
        assert dup["ok"] is False and dup["error"] == "conflict", dup
        g = conv(a, "demo")
        for k in ("id", "settings", "status", "fsm_state", "last_seq", "usage", "created_at", "updated_at",
                  "worker"):
            assert k in g, (k, g)
        assert g["id"] == "demo" and g["status"] == "idle" and g["last_seq"] == 0 and g["worker"] is None, g
        assert g["settings"] == {"model": "echo", "system": "Be brief.", "params": {"temperature": 0.2}}, g
        assert g["created_at"] > 1.5e12 and g["updated_at"] >= g["created_at"], g
        nf = a.request({"op": "get", "conversation": "nope"})
        assert nf["ok"] is False and nf["error"] == "not_found", nf

        # list: status filter, limit, `after` cursor and `next`
        ids = sorted(["demo", gen] + [a.create(conversation=f"l{i:02d}") for i in range(5)])
        a.ok({"op": "update", "conversation": "l03", "status": "ended"})
        allc = a.ok({"op": "list"})
        assert [c["id"] for c in allc["conversations"]] == ids and "next" not in allc, allc
        assert all("status" in c and "last_seq" in c for c in allc["conversations"])
        seen, after = [], None
        while True:
            req = {"op": "list", "limit": 2}
            if after:
                req["after"] = after
            page = a.ok(req)
            assert len(page["conversations"]) <= 2
            seen += [c["id"] for c in page["conversations"]]
            if "next" not in page:
                break
            assert page["next"] == page["conversations"][-1]["id"], page
            after = page["next"]
        assert seen == ids, (seen, ids)
        ended = a.ok({"op": "list", "status": "ended"})["conversations"]
        assert [c["id"] for c in ended] == ["l03"], ended
        idle = a.ok({"op": "list", "status": "idle"})["conversations"]
        assert sorted(c["id"] for c in idle) == sorted(set(ids) - {"l03"}), idle
        assert a.ok({"op": "list", "status": "suspended"})["conversations"] == []
        # an after past the end, or a cursor that is not a conversation, is a valid page
        assert a.ok({"op": "list", "after": "zzz"})["conversations"] == []
        assert [c["id"] for c in a.ok({"op": "list", "after": "l011"})["conversations"]][0] == "l02"


def test_update_and_delete():
    with Agentd() as a:
        a.create(conversation="u1", settings={"model": "echo", "system": "A", "params": {"x": 1}})
        r = a.ok({"op": "update", "conversation": "u1", "settings": {"system": "B", "tools": []}})
        assert set(r) <= {"ok", "id"} | set(r), r
        s = conv(a, "u1")["settings"]
        assert s == {"model": "echo", "system": "B", "params": {"x": 1}, "tools": []}, s
        a.ok({"op": "update", "conversation": "u1", "settings": {"params": {"y": 2}}})
        assert conv(a, "u1")["settings"]["params"] == {"y": 2}
        assert conv(a, "u1")["settings"]["system"] == "B"
        nf = a.request({"op": "update", "conversation": "nope", "settings": {"system": "x"}})
        assert nf["error"] == "not_found", nf
        # ended: sends (and settings changes) are conflict; ending again is fine
        a.send("u1", "before the end")
        wait_for(lambda: len(a.events("u1")) >= 2, 10, "the echo reply")
        a.ok({"op": "update", "conversation": "u1", "status": "ended"})
        assert conv(a, "u1")["status"] == "ended"
        r = a.request({"op": "send", "conversation": "u1", "content": "after"})
        assert r["ok"] is False and r["error"] == "conflict", r
        r = a.request({"op": "update", "conversation": "u1", "settings": {"system": "C"}})
        assert r["ok"] is False and r["error"] == "conflict", r
        a.ok({"op": "update", "conversation": "u1", "status": "ended"})
        wait_for(lambda: conv(a, "u1")["worker"] is None, 10, "the ended conversation's worker to stop")

        # delete: stops the worker, removes every row, idempotent
        a.create(conversation="d1")
        a.send("d1", "hello")
        wait_for(lambda: len(a.events("d1")) >= 2, 10, "the echo reply")
        pid = a.worker_pid("d1")
        assert pid and pid_alive(pid), pid
        a.ok({"op": "delete", "conversation": "d1"})
        wait_for(lambda: not pid_alive(pid), 10, "the deleted conversation's worker to exit")
        for op in ("get", "events", "summary", "tool_calls", "audit"):
            r = a.request({"op": op, "conversation": "d1"})
            assert r["ok"] is False and r["error"] == "not_found", (op, r)
        r = a.request({"op": "send", "conversation": "d1", "content": "x"})
        assert r["error"] == "not_found", r
        a.ok({"op": "delete", "conversation": "d1"})
        a.ok({"op": "delete", "conversation": "never-existed"})
        assert "d1" not in [c["id"] for c in a.ok({"op": "list"})["conversations"]]
        # the id can be used again, with a fresh log
        a.create(conversation="d1")
        assert a.send("d1", "again") == 1
        wait_for(lambda: len(a.events("d1")) >= 2, 10, "the echo reply")
        assert [e["seq"] for e in a.events("d1")] == [1, 2]
        assert not a.zombies() or wait_for(lambda: not a.zombies(), 5, "no zombies")


def test_send_and_events():
    with Agentd() as a:
        c = a.create(conversation="s1")
        r = a.ok({"op": "send", "conversation": c, "content": "hello", "id": "x"})
        assert r["seq"] == 1 and "duplicate" not in r, r
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        r = a.ok({"op": "send", "conversation": c, "content": {"text": "see attachment", "attachment": "r.pdf"}})
        assert r["seq"] == 3, r
        wait_for(lambda: len(a.events(c)) >= 4, 10, "the second echo reply")
        r1 = a.ok({"op": "send", "conversation": c, "content": "once", "event_id": "m-1"})
        wait_for(lambda: len(a.events(c)) >= 6, 10, "the third echo reply")
        r2 = a.ok({"op": "send", "conversation": c, "content": "once", "event_id": "m-1"})
        assert r1["seq"] == 5 and r2 == {"ok": True, "seq": 5, "duplicate": True}, (r1, r2)
        # a duplicate is not a new event and triggers no new turn
        time.sleep(scaled(0.2))
        evs = a.events(c)
        assert [e["seq"] for e in evs] == list(range(1, 7)), evs
        assert [e["type"] for e in evs] == ["user_msg", "assistant_msg"] * 3, evs
        assert evs[0]["content"] == {"text": "hello"}, evs[0]
        assert evs[2]["content"] == {"text": "see attachment", "attachment": "r.pdf"}, evs[2]
        assert evs[4]["event_id"] == "m-1" and "event_id" not in evs[0], evs
        assert all(isinstance(e["inserted_at"], int) and e["inserted_at"] > 1.5e12 for e in evs)
        assert evs[1]["content"]["context_seq"] == 1

        full = a.ok({"op": "events", "conversation": c})
        assert full["last_seq"] == 6 and len(full["events"]) == 6, full
        assert [e["seq"] for e in a.events(c, after=2)] == [3, 4, 5, 6]
        assert [e["seq"] for e in a.events(c, before=3)] == [1, 2]
        assert [e["seq"] for e in a.events(c, after=1, before=5)] == [2, 3, 4]
        assert [e["seq"] for e in a.events(c, limit=2)] == [5, 6]          # the most recent, ascending
        assert [e["seq"] for e in a.events(c, after=1, before=6, limit=2)] == [4, 5]
        assert [e["seq"] for e in a.events(c, type="user_msg")] == [1, 3, 5]
        assert [e["seq"] for e in a.events(c, type="assistant_msg", limit=1)] == [6]
        assert a.events(c, type="tool_call") == []
        r = a.ok({"op": "events", "conversation": c, "after": 6})
        assert r == {"ok": True, "events": [], "last_seq": 6}, r
        assert a.events(c, after=100) == []
        nf = a.request({"op": "events", "conversation": "nope"})
        assert nf["error"] == "not_found", nf
        nf = a.request({"op": "send", "conversation": "nope", "content": "x"})
        assert nf["error"] == "not_found", nf


def test_watch_streams_worker_commits_and_deltas():
    with Agentd() as a:
        model = a.script("streamer.py", """
            import json, sys, time
            req = json.load(sys.stdin)
            if req["task"] == "summarize":
                print(json.dumps({"text": "summary"})); sys.exit(0)
            for part in ["Hel", "lo ", "world"]:
                print(json.dumps({"delta": part}), flush=True)
                time.sleep(0.02)
            print(json.dumps({"text": "Hello world", "usage": {"input_tokens": 3, "output_tokens": 2, "cost": 0}}))
        """)
        a.write_config(f"""
            [model.streamer]
            command = {model}
        """)
        a.restart()
        # echo: the watch starts at the current last seq; the user_msg comes from the send's commit and the
        # assistant_msg from the worker's own commit (its IPC "written" wakes the watcher).
        c = a.create(conversation="w1")
        a.send(c, "one")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        w = a.watch(c)
        a.send(c, "two")
        e3, e4 = w.recv()["event"], w.recv()["event"]
        assert (e3["seq"], e3["type"], e3["content"]) == (3, "user_msg", {"text": "two"}), e3
        assert (e4["seq"], e4["type"]) == (4, "assistant_msg") and e4["content"]["text"] == "echo: two", e4
        # several sends: in seq order, no gaps, nothing twice (each answered before the next, so the
        # count is exact: messages queued during a turn would be answered together)
        for i in range(10):
            a.send(c, f"m{i}")
            wait_for(lambda: a.events(c)[-1]["type"] == "assistant_msg", 10, f"the reply to m{i}")
        seqs = []
        while len(seqs) < 20:
            seqs.append(w.recv()["event"]["seq"])
        assert seqs == list(range(5, 25)), seqs
        w.close()

        # after=N replays from N, then goes on live without a gap
        w = a.watch(c, after=20)
        assert [w.recv()["event"]["seq"] for _ in range(4)] == [21, 22, 23, 24]
        a.send(c, "late")
        assert [w.recv()["event"]["seq"] for _ in range(2)] == [25, 26]
        w.close()
        # the reply carries last_seq
        with a.conn() as k:
            r = k.request({"op": "watch", "conversation": c, "id": {"w": 1}})
            assert r == {"ok": True, "id": {"w": 1}, "last_seq": 26}, r

        # a streaming model: deltas while the turn runs, then the event
        s = a.create("streamer", conversation="st")
        w = a.watch(s, after=0)
        a.send(s, "hi")
        lines = []
        while not lines or "event" not in lines[-1] or lines[-1]["event"]["type"] != "assistant_msg":
            lines.append(w.recv())
        assert lines[0]["event"]["type"] == "user_msg", lines
        deltas = [ln["delta"]["text"] for ln in lines if "delta" in ln]
        assert "".join(deltas) == "Hello world", lines
        assert lines[-1]["event"]["content"]["text"] == "Hello world", lines
        w.close()

        # a watch on an unknown conversation is not_found
        with a.conn() as k:
            expect_error(k, {"op": "watch", "conversation": "nope"}, "not_found")


def test_watch_closed_when_conversation_deleted():
    with Agentd() as a:
        c = a.create(conversation="gone")
        a.send(c, "x")
        w = a.watch(c, after=0)
        assert w.recv()["event"]["seq"] == 1
        a.ok({"op": "delete", "conversation": c})
        assert w.closed(5), "the watch of a deleted conversation was not closed"
        assert a.ok({"op": "ping"})


def test_watch_pipelined_behind_replies():
    """Streamed lines never overtake a reply still owed on the connection: a long-poll pipelined before
    the watch is answered first, then the watch's reply, then the events."""
    with Agentd() as a:
        c = a.create(conversation="wp")
        k = a.conn()
        k.send({"op": "events", "conversation": c, "after": 0, "wait_ms": 20000, "id": "lp"})
        k.send({"op": "watch", "conversation": c, "after": 0, "id": "w"})
        time.sleep(scaled(0.2))
        a.send(c, "hello")
        r1 = k.recv(10)
        # the long-poll answers with what exists when it is woken: the user_msg, and the echo reply too
        # when the worker committed it first (a slow supervisor, under valgrind say)
        assert r1["id"] == "lp" and [e["seq"] for e in r1["events"]] in ([1], [1, 2]), r1
        r2 = k.recv(10)
        assert r2 == {"id": "w", "ok": True, "last_seq": r2["last_seq"]}, r2
        assert [k.recv(10)["event"]["seq"] for _ in range(2)] == [1, 2]
        k.close()
        # a send and a watch pipelined on one connection: the watch reply, then the events from after=0
        k = a.conn()
        k.send({"op": "send", "conversation": c, "content": "again", "id": "s"})
        k.send({"op": "watch", "conversation": c, "after": 2, "id": "w2"})
        assert k.recv(10) == {"id": "s", "ok": True, "seq": 3}
        assert k.recv(10)["id"] == "w2"
        assert [k.recv(10)["event"]["seq"] for _ in range(2)] == [3, 4]
        k.close()


def test_long_poll():
    with Agentd() as a:
        slow = a.script("slow.py", """
            import json, sys, time
            req = json.load(sys.stdin)
            time.sleep(0.5)
            print(json.dumps({"text": "slow answer"}))
        """)
        a.write_config(f"""
            [model.slow]
            command = {slow}
        """)
        a.restart()
        c = a.create("slow", conversation="lp")
        assert a.send(c, "question") == 1
        # parks (the slow model has not answered), then the WORKER's commit wakes it
        t0 = time.monotonic()
        # wait_ms far past the bound, so the bound only tells "woken by the commit" from "ran to its deadline"
        wait_ms = int(scaled(120) * 1000)
        r = a.ok({"op": "events", "conversation": c, "after": 1, "wait_ms": wait_ms, "id": "lp"}, timeout=180)
        took = time.monotonic() - t0
        assert r["id"] == "lp" and [e["type"] for e in r["events"]] == ["assistant_msg"], r
        assert r["last_seq"] == 2 and r["events"][0]["content"]["text"] == "slow answer", r
        assert took < scaled(60), f"the long-poll took {took:.2f}s: not woken by the commit"
        # nothing comes: empty events after about wait_ms
        t0 = time.monotonic()
        r = a.ok({"op": "events", "conversation": c, "after": 2, "wait_ms": 300})
        took = time.monotonic() - t0
        assert r["events"] == [] and r["last_seq"] == 2, r
        assert 0.25 <= took < scaled(30), took  # not before wait_ms; the upper bound only catches a stall
        # an event already there: answered at once
        t0 = time.monotonic()
        r = a.ok({"op": "events", "conversation": c, "after": 0, "wait_ms": wait_ms}, timeout=180)
        assert len(r["events"]) == 2 and time.monotonic() - t0 < scaled(60), r  # not held to wait_ms
        # woken by another client's send, with the type filter and limit applied to the answer
        with a.conn() as k:
            k.send({"op": "events", "conversation": c, "after": 2, "wait_ms": 20000, "type": "user_msg", "id": 1})
            k.send({"op": "ping", "id": 2})  # pipelined behind the long-poll: answered after it
            time.sleep(scaled(0.2))
            a.send(c, "next")
            r1, r2 = k.recv(15), k.recv(15)
            assert r1["id"] == 1 and [e["seq"] for e in r1["events"]] == [3], r1
            assert r2 == {"id": 2, "ok": True, "version": r2["version"]}, r2
        # a long-poll on a conversation deleted while waiting: not_found
        d = a.create(conversation="lp-del")
        with a.conn() as k:
            k.send({"op": "events", "conversation": d, "wait_ms": 20000})
            time.sleep(scaled(0.2))
            a.ok({"op": "delete", "conversation": d})
            r = k.recv(10)
            assert r["ok"] is False and r["error"] == "not_found", r
        # a client that hangs up while long-polling costs nothing
        k = a.conn()
        k.send({"op": "events", "conversation": c, "after": 1000, "wait_ms": 20000})
        time.sleep(scaled(0.1))
        k.close()
        assert a.ok({"op": "ping"})
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"] == 4, 10, "the reply")
        assert metric(a, "agentd_ops_total", 'op="events"') >= 5


def test_tool_calls_and_resolve():
    with Agentd(config=HUMAN_TOOLS) as a:
        c = a.create(settings={"model": "echo", "tools": ["approve"]}, conversation="t1")
        assert a.ok({"op": "tool_calls", "conversation": c})["tool_calls"] == []
        a.send(c, '/tool approve {"amount": 120}')
        pend = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"],
                        10, "a pending approval")
        tc = pend[0]
        wait_for(lambda: conv(a, c)["status"] == "suspended", 10, "suspended")
        one = a.ok({"op": "tool_call", "tool_call_id": tc["id"]})["tool_call"]
        for k in ("id", "conversation", "executor", "name", "status", "args", "result", "inserted_at",
                  "resolved_at"):
            assert k in one, (k, one)
        assert (one["conversation"], one["executor"], one["name"], one["status"]) == (c, "human", "approve",
                                                                                        "pending"), one
        assert one["args"] == {"amount": 120} and one["result"] is None and one["resolved_at"] is None, one
        assert a.ok({"op": "tool_calls", "conversation": c, "status": "resolved"})["tool_calls"] == []
        r = a.ok({"op": "resolve", "tool_call_id": tc["id"], "result": {"approved": True}})
        res = [e for e in a.events(c) if e["seq"] == r["seq"]][0]
        assert res["type"] == "resolution" and res["content"] == {"tool_call_id": tc["id"], "status": "resolved",
                                                                  "result": {"approved": True},
                                                                  "by": {"uid": os.getuid()}}, res
        stale = a.request({"op": "resolve", "tool_call_id": tc["id"]})
        assert stale["ok"] is False and stale["error"] == "stale", stale
        one = a.ok({"op": "tool_call", "tool_call_id": tc["id"]})["tool_call"]
        assert one["status"] == "resolved" and one["result"] == {"approved": True} and one["resolved_at"], one
        wait_for(lambda: a.events(c)[-1]["type"] == "assistant_msg" and a.events(c)[-1]["seq"] > r["seq"], 10,
                 "the answer after the resolution")
        # errored, with a string result
        a.send(c, "/tool approve")
        pend = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"],
                        10, "a second pending approval")
        a.ok({"op": "resolve", "tool_call_id": pend[0]["id"], "status": "errored", "result": "nobody may"})
        one = a.ok({"op": "tool_call", "tool_call_id": pend[0]["id"]})["tool_call"]
        assert one["status"] == "errored" and one["result"] == "nobody may", one
        alltc = a.ok({"op": "tool_calls", "conversation": c})["tool_calls"]
        assert sorted(t["status"] for t in alltc) == ["errored", "resolved"], alltc
        # unknown ids
        r = a.request({"op": "resolve", "tool_call_id": "no-such-call"})
        assert r["error"] in ("stale", "not_found"), r
        r = a.request({"op": "tool_call", "tool_call_id": "no-such-call"})
        assert r["error"] == "not_found", r
        r = a.request({"op": "tool_calls", "conversation": "nope"})
        assert r["error"] == "not_found", r


def test_summary_compact_audit():
    with Agentd() as a:
        c = a.create(conversation="sc")
        assert a.ok({"op": "summary", "conversation": c})["summary"] is None
        assert a.ok({"op": "audit", "conversation": c})["model_calls"] == []
        for i in range(3):
            a.send(c, f"m{i}")
            wait_for(lambda: len(a.events(c)) >= 2 * (i + 1), 10, "the echo reply")
        s = a.ok({"op": "compact", "conversation": c}, timeout=30)["summary"]
        assert s and s["from_seq"] >= 1 and s["to_seq"] >= s["from_seq"] and s["version"] >= 1, s
        assert "summary" in json.dumps(s["content"]), s
        s2 = a.ok({"op": "summary", "conversation": c})["summary"]
        assert s2 == s, (s, s2)  # compact shows the summary as `summary` does, inserted_at too
        # audit is off by default: nothing recorded
        assert a.ok({"op": "audit", "conversation": c})["model_calls"] == []
        r = a.request({"op": "compact", "conversation": "nope"})
        assert r["error"] == "not_found", r
        r = a.request({"op": "summary", "conversation": "nope"})
        assert r["error"] == "not_found", r

    with Agentd(config="[agentd]\naudit = on\n") as a:
        c = a.create(conversation="au")
        a.send(c, "recorded")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        rows = wait_for(lambda: a.ok({"op": "audit", "conversation": c})["model_calls"], 10, "an audit row")
        assert len(rows) == 1, rows
        r = rows[0]
        assert r["model"] == "echo" and "rendered_context" in r and "usage" in r and "inserted_at" in r, r
        assert "latency_ms" in r and "turn_ref" in r, r


def test_kill_stop_status_metrics():
    with Agentd() as a:
        c = a.create(conversation="k1")
        assert a.ok({"op": "kill", "conversation": c})["pid"] is None
        a.send(c, "hi")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        pid = a.worker_pid(c)
        assert pid and pid_alive(pid)
        st = a.ok({"op": "status"})
        for k in ("version", "uptime_ms", "workers", "store"):
            assert k in st, (k, st)
        assert st["uptime_ms"] >= 0
        ws = {w["conversation"]: w for w in st["workers"]}
        assert ws[c]["pid"] == pid and ws[c]["state"] in ("idle", "running") and ws[c]["since_ms"] >= 0, st
        for k in ("path", "size_bytes", "map_size", "readers", "sync"):
            assert k in st["store"], (k, st)
        assert st["store"]["sync"] == "full" and st["store"]["map_size"] >= st["store"]["size_bytes"] > 0, st

        r = a.ok({"op": "kill", "conversation": c, "signal": "TERM"})
        assert r["pid"] == pid, r
        wait_for(lambda: not pid_alive(pid), 10, "the TERMed worker to exit")
        wait_for(lambda: a.worker_pid(c) is None, 10, "get to show no worker")
        a.send(c, "revive")
        wait_for(lambda: len(a.events(c)) >= 4, 10, "the revived worker's reply")
        pid2 = a.worker_pid(c)
        assert pid2 and pid2 != pid
        assert a.ok({"op": "kill", "conversation": c})["pid"] == pid2
        wait_for(lambda: not pid_alive(pid2), 10, "the KILLed worker to exit")
        wait_for(lambda: a.worker_pid(c) is None, 10, "get to show no worker")

        a.send(c, "again")
        wait_for(lambda: len(a.events(c)) >= 6, 10, "the reply")
        pid3 = a.worker_pid(c)
        a.ok({"op": "stop", "conversation": c})
        wait_for(lambda: not pid_alive(pid3), 10, "the stopped worker to exit")
        wait_for(lambda: a.worker_pid(c) is None, 10, "no worker after stop")
        assert conv(a, c)["status"] == "idle"
        a.ok({"op": "stop", "conversation": c})  # nothing to stop: still ok
        for op in ("kill", "stop"):
            r = a.request({"op": op, "conversation": "nope"})
            assert r["error"] == "not_found", r

        a.request({"op": "get", "conversation": "nope"})
        a.request({"op": "frobnicate"})
        text = a.ok({"op": "metrics"})["text"]
        assert "# TYPE agentd_ops_total counter" in text, text
        assert metric(a, "agentd_ops_total", 'op="send"') == 3
        assert metric(a, "agentd_ops_total", 'op="kill"') == 4
        assert metric(a, "agentd_errors_total", 'code="not_found"') >= 3
        assert metric(a, "agentd_errors_total", 'code="unknown_op"') == 1
        assert metric(a, "agentd_worker_spawns_total") >= 3
        assert metric(a, "agentd_workers_live") == 0
        assert metric(a, "agentd_group_commits_total") >= 1
        assert metric(a, "agentd_store_size_bytes") > 0
        assert metric(a, "agentd_op_duration_seconds_count", 'op="send"') == 3
        assert metric(a, "agentd_op_duration_seconds_bucket", 'op="send",le="+Inf"') == 3
        # every sample line is `name{labels} number`; each family is
        # described once (a repeated HELP or TYPE is invalid exposition),
        # before its samples, and no sample repeats
        described, seen = set(), set()
        for ln in text.splitlines():
            if ln.startswith("# HELP ") or ln.startswith("# TYPE "):
                key = tuple(ln.split()[1:3])
                assert key not in described, f"described twice: {ln}"
                described.add(key)
            elif ln:
                assert re.fullmatch(r"[a-z_]+(\{[^}]*\})? [0-9.e+-]+", ln), ln
                name = re.match(r"[a-z_]+", ln).group(0)
                family = re.sub(r"_(bucket|sum|count)$", "", name)
                assert ("TYPE", name) in described or ("TYPE", family) in described, f"no TYPE before {ln}"
                sample = ln.rsplit(" ", 1)[0]
                assert sample not in seen, f"sample twice: {ln}"
                seen.add(sample)


def test_shutdown():
    with Agentd() as a:
        slow = a.script("slow.py", """
            import json, sys, time
            json.load(sys.stdin)
            time.sleep(1.0)
            print(json.dumps({"text": "done"}))
        """)
        a.write_config(f"[model.slow]\ncommand = {slow}\n")
        a.restart()
        c = a.create("slow", conversation="sd")
        k = a.conn()
        a.send(c, "work")
        wait_for(lambda: a.worker_pid(c), 10, "a worker")
        r = a.ok({"op": "shutdown", "id": "bye"})
        assert r == {"ok": True, "id": "bye"}, r
        # while the worker finishes, an open connection is told `unavailable` (ping still answers)
        # (the worker stops at once, so agentd may already be gone: a closed connection is fine too)
        if k.send({"op": "get", "conversation": c}):
            try:
                r = k.recv(10)
            except AssertionError as e:
                assert "closed the connection" in str(e), e
                r = {}
            if r.get("ok") is False:
                assert r["error"] == "unavailable", r
        assert a.wait(20) == 0
        assert not os.path.exists(a.socket), "the socket file outlived agentd"
        k.close()
        a.check_sanitizers()


# ---------------------------------------------------------------------------------------------------
# Framing and pipelining


def test_pipelining_100_in_one_send():
    with Agentd() as a:
        c = a.create(conversation="p1")
        ids = [7, "seven", {"n": 7, "deep": [1, {"x": None}]}, None, [1, "two", 3.5], 0, -1, 1.25, True, False,
               "", "é ☃ \u2028"]
        reqs = []
        for i in range(100):
            kind = i % 4
            if kind == 0:
                r = {"op": "ping"}
            elif kind == 1:
                r = {"op": "send", "conversation": c, "content": f"msg {i}"}
            elif kind == 2:
                r = {"op": "events", "conversation": c, "type": "user_msg", "limit": 1}
            else:
                r = {"op": "get", "conversation": "missing" if i % 8 == 3 else c}
            r["id"] = ids[i % len(ids)] if i % 5 else i
            reqs.append(r)
        blob = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in reqs)
        with a.conn() as k:
            assert k.raw(blob)
            replies = [k.recv(20) for _ in range(100)]
        for i, (q, r) in enumerate(zip(reqs, replies)):
            assert "id" in r and r["id"] == q["id"] and type(r["id"]) is type(q["id"]), (i, q, r)
            if q["op"] == "get" and q["conversation"] == "missing":
                assert r["ok"] is False and r["error"] == "not_found", (i, r)
            else:
                assert r["ok"] is True, (i, q, r)
        # the sends got consecutive user_msg seqs in request order, and each pipelined read saw the
        # writes before it on the same connection
        sends = [(q, r) for q, r in zip(reqs, replies) if q["op"] == "send"]
        user = [e for e in a.events(c, type="user_msg")]
        assert [e["content"]["text"] for e in user] == [q["content"] for q, _ in sends]
        assert [e["seq"] for e in user] == [r["seq"] for _, r in sends]
        for i, (q, r) in enumerate(zip(reqs, replies)):
            if q["op"] == "events":
                assert r["events"][-1]["content"]["text"] == reqs[i - 1]["content"], (i, r)
        # no id: no id in the reply
        with a.conn() as k:
            r = k.request({"op": "ping"})
            assert "id" not in r, r
            # \r\n line ends are taken too
            k.raw(b'{"op":"ping","id":"crlf"}\r\n')
            assert k.recv()["id"] == "crlf"
            # one request split across many writes
            line = json.dumps({"op": "ping", "id": "split"}).encode() + b"\n"
            for i in range(len(line)):
                k.raw(line[i:i + 1])
                time.sleep(0.001)
            assert k.recv()["id"] == "split"


def test_bad_input_every_kind():
    cfg = """
    [tool.approve]
    executor = human
    [model.other]
    command = /bin/false
    """
    with Agentd(config=cfg) as a:
        a.create(conversation="ok1")
        k = a.conn()
        BR = "bad_request"
        raw_cases = [
            (b"\n", BR, "empty line"),
            (b"\r\n", BR, "empty line with CR"),
            (b"   \n", BR, "blank line"),
            (b"not json\n", BR, "not JSON"),
            (b'{"op":"ping"\n', BR, "truncated JSON"),
            (b'{"op":"ping"}{"op":"ping"}\n', BR, "two objects on a line"),
            (b"[1,2,3]\n", BR, "array"),
            (b'[{"op":"ping"}]\n', BR, "array of a request"),
            (b"42\n", BR, "number"),
            (b'"ping"\n', BR, "string"),
            (b"null\n", BR, "null"),
            (b'{"op":"ping","id":"\xff\xfe"}\n', BR, "invalid UTF-8 in a string"),
            (b'{"op":"send","conversation":"ok1","content":"\xc3"}\n', BR, "truncated UTF-8 sequence"),
            (b'{"op":"send","conversation":"ok1","content":"\xed\xa0\x80"}\n', BR, "UTF-8 surrogate"),
            (b'{"op":"ping"\x00}\n', BR, "NUL byte outside a string"),
            (b'{"op":"send","conversation":"ok1","content":"a\x00b"}\n', BR, "NUL byte inside a string"),
            (b'{"op":"send","conversation":"ok1","content":"a\\u0000b"}\n', BR, "escaped NUL in a string"),
            (b'{"op":"ping","op":"ping"}\n', BR, "duplicate keys"),
            (b'{"op":"send","conversation":"ok1","content":"a","content":"b"}\n', BR, "duplicate content"),
            (b'{"op":"send","conversation":"ok1","content":{"a":1,"a":2}}\n', BR, "duplicate nested key"),
            (b"\xff\xfe\xfd\n", BR, "binary garbage"),
        ]
        for data, code, what in raw_cases:
            expect_error(k, data, code, what)

        cases = [
            ({"id": 1}, BR, "missing op"),
            ({"op": 1, "id": 2}, BR, "op a number"),
            ({"op": None, "id": 3}, BR, "op null"),
            ({"op": ["ping"], "id": 4}, BR, "op an array"),
            ({"op": "frobnicate", "id": 5}, "unknown_op", "unknown op"),
            ({"op": "PING", "id": 6}, "unknown_op", "op in the wrong case"),
            ({"op": "", "id": 7}, "unknown_op", "empty op"),
            ({"op": "x" * 5000, "id": 8}, "unknown_op", "long op"),
            ({"op": "é" * 100}, "unknown_op", "op with multibyte characters cut in the message"),
            # unknown fields
            ({"op": "ping", "extra": 1}, BR, "unknown field"),
            ({"op": "get", "conversation": "ok1", "conv": "x"}, BR, "a typo'd field"),
            ({"op": "send", "conversation": "ok1", "content": "x", "eventid": "e"}, BR, "unknown send field"),
            ({"op": "create", "settings": {"model": "echo", "temp": 1}}, BR, "unknown settings field"),
            # missing or ill-typed fields
            ({"op": "get"}, BR, "get without conversation"),
            ({"op": "get", "conversation": 5}, BR, "conversation a number"),
            ({"op": "get", "conversation": None}, BR, "conversation null"),
            ({"op": "create"}, BR, "create without settings"),
            ({"op": "create", "settings": {}}, BR, "settings without model"),
            ({"op": "create", "settings": "echo"}, BR, "settings a string"),
            ({"op": "create", "settings": {"model": 1}}, BR, "model a number"),
            ({"op": "create", "settings": {"model": "echo", "system": 1}}, BR, "system a number"),
            ({"op": "create", "settings": {"model": "echo", "tools": "approve"}}, BR, "tools a string"),
            ({"op": "create", "settings": {"model": "echo", "tools": [1]}}, BR, "tools of numbers"),
            ({"op": "create", "settings": {"model": "echo", "params": []}}, BR, "params an array"),
            ({"op": "send", "conversation": "ok1"}, BR, "send without content"),
            ({"op": "send", "content": "x"}, BR, "send without conversation"),
            ({"op": "send", "conversation": "ok1", "content": 5}, BR, "content a number"),
            ({"op": "send", "conversation": "ok1", "content": ["x"]}, BR, "content an array"),
            ({"op": "send", "conversation": "ok1", "content": None}, BR, "content null"),
            ({"op": "send", "conversation": "ok1", "content": "x", "event_id": 5}, BR, "event_id a number"),
            ({"op": "send", "conversation": "ok1", "content": "x", "event_id": ""}, BR, "empty event_id"),
            ({"op": "send", "conversation": "ok1", "content": "x", "event_id": "e" * 100000}, BR, "huge event_id"),
            ({"op": "update", "conversation": "ok1", "status": "idle"}, BR, "update to a status other than ended"),
            ({"op": "update", "conversation": "ok1", "status": 1}, BR, "status a number"),
            ({"op": "update", "conversation": "ok1", "settings": []}, BR, "settings an array"),
            ({"op": "list", "status": "sleeping"}, BR, "unknown list status"),
            ({"op": "list", "status": 1}, BR, "list status a number"),
            ({"op": "tool_calls", "conversation": "ok1", "status": "done"}, BR, "unknown tool call status"),
            ({"op": "resolve"}, BR, "resolve without tool_call_id"),
            ({"op": "resolve", "tool_call_id": "t1", "status": "expired"}, BR, "resolve to expired"),
            ({"op": "resolve", "tool_call_id": "t1", "status": "pending"}, BR, "resolve to pending"),
            ({"op": "resolve", "tool_call_id": 12}, BR, "tool_call_id a number"),
            ({"op": "tool_call"}, BR, "tool_call without id"),
            ({"op": "kill", "conversation": "ok1", "signal": "HUP"}, BR, "kill with another signal"),
            ({"op": "kill", "conversation": "ok1", "signal": 9}, BR, "signal a number"),
            ({"op": "events", "conversation": "ok1", "type": "bogus"}, BR, "unknown event type"),
            ({"op": "events", "conversation": "ok1", "type": 1}, BR, "type a number"),
            ({"op": "watch", "conversation": "ok1", "limit": 1}, BR, "watch with an events-only field"),
            # out-of-range numbers
            ({"op": "list", "limit": 0}, BR, "list limit 0"),
            ({"op": "list", "limit": -1}, BR, "list limit negative"),
            ({"op": "list", "limit": 1001}, BR, "list limit over the max"),
            ({"op": "list", "limit": 1.5}, BR, "list limit real"),
            ({"op": "list", "limit": "10"}, BR, "list limit a string"),
            ({"op": "list", "limit": True}, BR, "list limit a boolean"),
            ({"op": "list", "after": ""}, BR, "empty list cursor"),
            ({"op": "list", "after": 3}, BR, "list cursor a number"),
            ({"op": "events", "conversation": "ok1", "after": -1}, BR, "after negative"),
            ({"op": "events", "conversation": "ok1", "after": 1.0}, BR, "after real"),
            ({"op": "events", "conversation": "ok1", "after": "3"}, BR, "after a string"),
            ({"op": "events", "conversation": "ok1", "after": 2 ** 63}, BR, "after over int64"),
            ({"op": "events", "conversation": "ok1", "after": 2 ** 64}, BR, "after over uint64"),
            ({"op": "events", "conversation": "ok1", "after": 10 ** 30}, BR, "after huge"),
            ({"op": "events", "conversation": "ok1", "before": 0}, BR, "before 0"),
            ({"op": "events", "conversation": "ok1", "before": -5}, BR, "before negative"),
            ({"op": "events", "conversation": "ok1", "limit": 0}, BR, "events limit 0"),
            ({"op": "events", "conversation": "ok1", "limit": 10001}, BR, "events limit over the max"),
            ({"op": "events", "conversation": "ok1", "wait_ms": -1}, BR, "wait_ms negative"),
            ({"op": "events", "conversation": "ok1", "wait_ms": 3600001}, BR, "wait_ms over an hour"),
            ({"op": "events", "conversation": "ok1", "wait_ms": 0.5}, BR, "wait_ms real"),
            ({"op": "watch", "conversation": "ok1", "after": -1}, BR, "watch after negative"),
            # bad ids
            ({"op": "get", "conversation": ""}, BR, "empty conversation id"),
            ({"op": "get", "conversation": "a" * 129}, BR, "129-character id"),
            ({"op": "create", "conversation": "a" * 129, "settings": {"model": "echo"}}, BR, "create 129"),
            ({"op": "create", "conversation": "", "settings": {"model": "echo"}}, BR, "create empty id"),
            ({"op": "get", "conversation": "a b"}, BR, "space in id"),
            ({"op": "get", "conversation": "a/b"}, BR, "slash in id"),
            ({"op": "get", "conversation": "ünï"}, BR, "non-ASCII id"),
            ({"op": "get", "conversation": "a\nb"}, BR, "newline in id"),
            ({"op": "create", "conversation": "../x", "settings": {"model": "echo"}}, BR, "path in id"),
            ({"op": "tool_call", "tool_call_id": ""}, BR, "empty tool call id"),
            ({"op": "tool_call", "tool_call_id": "t" * 129}, BR, "129-character tool call id"),
            ({"op": "resolve", "tool_call_id": "t;rm"}, BR, "bad tool call id"),
            # bad_request takes precedence over not_found (and over conflict)
            ({"op": "create", "settings": {"model": "gpt-nope"}}, BR, "unknown model"),
            ({"op": "create", "settings": {"model": "echo", "tools": ["approve", "nope"]}}, BR, "unknown tool"),
            ({"op": "create", "conversation": "ok1", "settings": {"model": "nope"}}, BR, "unknown model, existing id"),
            ({"op": "update", "conversation": "missing", "settings": {"model": "nope"}}, BR,
             "unknown model on a missing conversation"),
            ({"op": "update", "conversation": "missing", "settings": {"tools": ["nope"]}}, BR,
             "unknown tool on a missing conversation"),
            ({"op": "send", "conversation": "missing", "content": 1}, BR, "bad content, missing conversation"),
            ({"op": "events", "conversation": "missing", "limit": 0}, BR, "bad limit, missing conversation"),
            ({"op": "get", "conversation": "missing", "bogus": 1}, BR, "unknown field, missing conversation"),
            ({"op": "resolve", "tool_call_id": "missing", "status": "bogus"}, BR, "bad status, missing call"),
        ]
        for i, (req, code, what) in enumerate(cases):
            if "id" not in req and i % 3 == 0:
                req = dict(req, id={"case": i})
            expect_error(k, req, code, what)

        # the name checks are against the configuration: a configured model and tool pass
        a.ok({"op": "create", "conversation": "cfg", "settings": {"model": "other", "tools": ["approve"]}})
        # ids at the limits pass: 128 characters of the whole alphabet
        long_id = ("Az09._:-" * 16)[:128]
        a.ok({"op": "create", "conversation": long_id, "settings": {"model": "echo"}})
        assert conv(a, long_id)["id"] == long_id
        # nothing above created, sent or changed anything
        assert a.events("ok1") == []
        ids = sorted(c["id"] for c in a.ok({"op": "list"})["conversations"])
        assert ids == sorted(["ok1", "cfg", long_id]), ids
        # every error was counted, and the connection is still the same one
        assert metric(a, "agentd_errors_total", 'code="bad_request"') >= len(raw_cases) + len(cases) - 10
        assert k.request({"op": "ping", "id": "end"})["ok"] is True
        k.close()


def test_line_over_the_limit():
    with Agentd(config="[agentd]\nmax_line = 64k\n") as a:
        c = a.create(conversation="big")
        other = a.conn()
        # a line of exactly the limit is accepted
        with a.conn() as k:
            prefix, suffix = b'{"op":"send","conversation":"big","content":"', b'"}'
            line = prefix + b"x" * (65536 - len(prefix) - len(suffix)) + suffix
            assert len(line) == 65536
            k.raw(line + b"\n")
            r = k.recv()
            assert r["ok"] is True and r["seq"] == 1, r
        # a complete line over the limit: too_large, then the connection is closed
        with a.conn() as k:
            k.send({"op": "ping", "id": "before"})
            k.raw(b'{"op":"send","conversation":"big","content":"' + b"y" * 70000 + b'"}\n')
            assert k.recv()["id"] == "before"
            r = k.recv()
            assert r["ok"] is False and r["error"] == "too_large", r
            assert k.closed(5), "the connection stayed open after too_large"
        # a line that never ends: too_large once the limit is passed, without waiting for a newline
        with a.conn() as k:
            ok = k.raw(b"{" + b" " * 200000)
            r = k.recv()
            assert r["ok"] is False and r["error"] == "too_large", (ok, r)
            assert k.closed(5)
        # a much larger flood: the server stops reading, answers, closes
        with a.conn() as k:
            k.sock.settimeout(scaled(10))
            try:
                k.sock.sendall(b"z" * (4 << 20))
            except (BrokenPipeError, ConnectionResetError):
                pass
            r = k.recv()
            assert r["error"] == "too_large", r
            assert k.closed(5)
        # others were served throughout, and nothing was appended by the rejected lines
        assert other.request({"op": "ping", "id": 1})["ok"] is True
        assert [e["seq"] for e in a.events(c, type="user_msg")] == [1]
        assert metric(a, "agentd_errors_total", 'code="too_large"') == 3
        other.close()


# ---------------------------------------------------------------------------------------------------
# Misbehaving and concurrent clients


def timed_ping(a, limit=30.0):
    """A ping answered beside clients that block indefinitely: the bound only catches a real stall (a loop
    waiting on one of them), never a loaded machine's slowness."""
    t0 = time.monotonic()
    with a.conn(timeout=limit * 2) as k:
        r = k.request({"op": "ping", "id": "probe"})
    took = time.monotonic() - t0
    assert r["ok"] is True, r
    assert took < scaled(limit), f"a ping took {took:.2f}s"
    return took


def test_misbehaving_clients_stall_nobody():
    with Agentd(config="[agentd]\nmax_line = 64k\n") as a:
        c = a.create(conversation="bulk")
        # a large log: 200 events of ~60 KB (12 MB), far more than the socket buffers and the output cap
        blob = b"".join(json.dumps({"op": "send", "conversation": c, "content": {"n": i, "pad": "p" * 60000}})
                        .encode() + b"\n" for i in range(200))
        with a.conn(timeout=60) as k:
            k.raw(blob)
            for i in range(200):
                assert k.recv(60)["ok"] is True
        # the echo worker answers each batch; let it settle so the count is stable
        def settled():
            last = conv(a, c)["last_seq"]
            time.sleep(scaled(0.3))
            return conv(a, c)["last_seq"] == last and last
        total = wait_for(settled, 30, "the echo turns to settle", ignore=(AssertionError,))

        # 1. hangs up mid-line
        k1 = a.conn()
        k1.raw(b'{"op":"send","conversation":"bulk","content":"never finish')
        k1.close()
        # 2. never sends anything
        idle = [a.conn() for _ in range(5)]
        # 3. sends half a line and waits
        half = a.conn()
        half.raw(b'{"op":"ping"')
        # 4. never reads while a large watch streams to it
        hog = a.conn()
        hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.send({"op": "watch", "conversation": c, "after": 0})
        # 5. pipelines many requests (20 MB of replies) and never reads them: agentd stops reading its
        # requests once its output queue is over the cap
        deaf = a.conn()
        deaf.raw(b'{"op":"events","conversation":"bulk","limit":1,"type":"user_msg"}\n' * 350)
        time.sleep(scaled(0.5))
        for _ in range(5):
            timed_ping(a)
        # writes from others still commit promptly
        d = a.create(conversation="other")
        t0 = time.monotonic()
        a.send(d, "still served")
        assert time.monotonic() - t0 < scaled(30)  # a stall bound: the deaf clients never read
        # the half line, completed, is answered
        half.raw(b',"id":"half"}\n')
        assert half.recv()["id"] == "half"
        # the hog finally reads: every event, in order, no gap, nothing twice
        hog.sock.settimeout(scaled(30))
        r = hog.recv(30)
        assert r["ok"] is True, r
        seqs = [hog.recv(30)["event"]["seq"] for _ in range(total)]
        assert seqs == list(range(1, total + 1)), (seqs[:5], seqs[-5:], total)
        for k in idle + [half, hog, deaf]:
            k.close()
        timed_ping(a)
        wait_for(lambda: metric(a, "agentd_clients") <= 1, 10, "closed clients to be freed")


def test_concurrent_clients_and_group_commit():
    with Agentd() as a:
        N_THREADS, N_SENDS = 20, 50
        convs = [a.create(conversation=f"cc{i:02d}") for i in range(N_THREADS)]
        commits0 = metric(a, "agentd_group_commits_total")
        writes0 = metric(a, "agentd_group_writes_total")
        acks = {c: [] for c in convs}
        errors = []
        start = threading.Barrier(N_THREADS)

        def client(c):
            try:
                with a.conn(timeout=60) as k:
                    start.wait()
                    for i in range(N_SENDS):
                        r = k.request({"op": "send", "conversation": c, "content": f"{c}/{i}", "id": i})
                        assert r["ok"] is True and r["id"] == i, r
                        acks[c].append((r["seq"], f"{c}/{i}"))
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(c,)) for c in convs]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(scaled(60))
        took = time.monotonic() - t0
        assert not errors, errors[:3]
        assert all(len(v) == N_SENDS for v in acks.values())
        for c in convs:
            evs = a.events(c)
            seqs = [e["seq"] for e in evs]
            assert seqs == list(range(1, len(evs) + 1)), (c, seqs)
            user = [(e["seq"], e["content"]["text"]) for e in evs if e["type"] == "user_msg"]
            assert user == acks[c], (c, user[:3], acks[c][:3])      # each ack'd send exactly once, in order
            assert len({t for _, t in user}) == N_SENDS
        commits = metric(a, "agentd_group_commits_total") - commits0
        writes = metric(a, "agentd_group_writes_total") - writes0
        assert writes == N_THREADS * N_SENDS, writes
        assert commits < writes, f"no group commit: {commits} commits for {writes} writes in {took:.2f}s"
        # and deterministically: 50 sends pipelined in one write commit together
        c0 = metric(a, "agentd_group_commits_total")
        with a.conn() as k:
            k.raw(b"".join(json.dumps({"op": "send", "conversation": "cc00", "content": f"p{i}"}).encode()
                           + b"\n" for i in range(50)))
            for _ in range(50):
                assert k.recv()["ok"] is True
        assert metric(a, "agentd_group_commits_total") - c0 <= 3


def test_writer_thread_sends_beside_reads_watches_and_other_writes():
    """While groups of sends commit on the writer thread (LMDB, sync = full), the loop keeps reading: reads,
    a watch and writes of other kinds interleaved with the flood see exactly the acknowledged sends, in seq
    order, and nothing is answered before it is in the log. With AGENTD_WRITER_THREAD=0 every group commits
    on the loop and the same holds. The conversations' model never answers: no worker wants the write gate,
    which would send the groups to the loop."""
    for off in ("1", "0"):
        env = dict(os.environ, AGENTD_WRITER_THREAD="0") if off == "0" else None
        with Agentd(env=env, start=False) as a:
            a.gated_model()
            a.start()
            convs = [a.create(conversation=f"wt{i:02d}", model="gated") for i in range(8)]
            watcher = a.conn(timeout=60)
            watcher.send({"op": "watch", "conversation": "wt00"})
            assert watcher.recv()["ok"] is True
            acks = {c: [] for c in convs}
            errors = []
            stop = threading.Event()

            def sender(c):
                try:
                    with a.conn(timeout=60) as k:
                        for i in range(60):
                            r = k.request({"op": "send", "conversation": c, "content": f"{c}/{i}"})
                            assert r["ok"] is True, r
                            acks[c].append(r["seq"])
                except BaseException as e:  # noqa: BLE001 (reported below)
                    errors.append(repr(e))

            def other():
                # gets, creates, updates and deletes between the sends: they commit on the loop
                try:
                    with a.conn(timeout=60) as k:
                        n = 0
                        while not stop.is_set():
                            acked = len(acks["wt01"])  # every send acknowledged before the get is in its view
                            g = k.request({"op": "get", "conversation": "wt01"})
                            assert g["ok"] is True and g["conversation"]["last_seq"] >= acked, (acked, g)
                            c = k.request({"op": "create", "settings": {"model": "echo"}})
                            assert c["ok"] is True, c
                            u = k.request({"op": "update", "conversation": c["conversation"], "metadata": {"n": str(n)}})
                            assert u["ok"] is True, u
                            d = k.request({"op": "delete", "conversation": c["conversation"]})
                            assert d["ok"] is True, d
                            n += 1
                except BaseException as e:  # noqa: BLE001
                    errors.append(repr(e))

            threads = [threading.Thread(target=sender, args=(c,)) for c in convs]
            o = threading.Thread(target=other)
            o.start()
            for t in threads:
                t.start()
            for t in threads:
                t.join(scaled(120))
            stop.set()
            o.join(scaled(60))
            assert not errors, errors[:3]
            for c in convs:
                user = [e["seq"] for e in a.events(c) if e["type"] == "user_msg"]
                assert user == acks[c] and len(user) == 60, (c, user[:5], acks[c][:5])
            seen = []
            while len(seen) < 60:
                m = watcher.recv(30)
                if "event" in m and m["event"]["type"] == "user_msg":
                    seen.append(m["event"]["seq"])
            assert seen == acks["wt00"], (seen[:5], acks["wt00"][:5])
            watcher.close()
            thread = metric(a, "agentd_group_commits_thread_total")
            if off == "0" or harness.PG:
                assert thread == 0, thread
            else:
                assert thread > 0, thread


def test_nesting_limits_are_bad_requests_that_spoil_nothing():
    # The store keeps JSON 65 levels of objects and arrays deep, counted from the record: a send's
    # content is a whole event; a resolve's result sits one level into its resolution event. Deeper is
    # bad_request before anything is looked up, and never fails a write committed beside it.
    def nest(n):
        return json.loads("[" * n + "]" * n)

    with Agentd(config=HUMAN_TOOLS) as a:
        c = a.create(settings={"model": "echo", "tools": ["approve"]}, conversation="deep")
        other = a.create(conversation="bystander")
        with a.conn() as k:
            r = expect_error(k, {"op": "send", "conversation": c, "content": {"a": nest(65)}}, "bad_request")
            assert r["message"] == "'content' nests more than 65 levels of objects and arrays", r
            expect_error(k, {"op": "send", "conversation": "nobody", "content": {"a": nest(65)}}, "bad_request")
            r = expect_error(k, {"op": "create", "settings": {"model": "echo", "params": {"p": nest(64)}}},
                             "bad_request")
            assert r["message"] == "'settings' nests more than 65 levels of objects and arrays", r
            a.ok({"op": "create", "conversation": "p63", "settings": {"model": "echo", "params": {"p": nest(63)}}})
            assert a.ok({"op": "get", "conversation": "p63"})["conversation"]["settings"]["params"]["p"] == nest(63)
        seq = a.send(c, {"a": nest(64)})
        assert a.events(c)[seq - 1]["content"] == {"a": nest(64)}
        wait_for(lambda: a.events(c)[-1]["type"] == "assistant_msg", 10, "the echo's answer")
        a.send(c, '/tool approve {"n": 1}')
        pend = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"],
                        10, "a pending approval")
        with a.conn() as k:  # pipelined: one group commit for both
            k.raw((json.dumps({"op": "send", "conversation": other, "content": "innocent", "id": 1}) + "\n" +
                   json.dumps({"op": "resolve", "tool_call_id": pend[0]["id"], "result": nest(65), "id": 2})
                   + "\n").encode())
            r1, r2 = k.recv(), k.recv()
        assert r1["ok"] is True and r1["seq"] == 1, r1
        assert r2["ok"] is False and r2["error"] == "bad_request", r2
        assert r2["message"] == "'result' nests more than 64 levels of objects and arrays", r2
        assert a.events(other)[0]["content"] == {"text": "innocent"}
        assert a.ok({"op": "tool_call", "tool_call_id": pend[0]["id"]})["tool_call"]["status"] == "pending"
        r = a.ok({"op": "resolve", "tool_call_id": pend[0]["id"], "result": nest(64)})
        assert a.events(c)[r["seq"] - 1]["content"]["result"] == nest(64)
        assert a.ok({"op": "tool_call", "tool_call_id": pend[0]["id"]})["tool_call"]["result"] == nest(64)


def test_events_ranges_pages_and_agentctl_prints_a_long_log_whole():
    with Agentd() as a:
        c = a.create(conversation="big")
        for i in range(3):
            a.send(c, f"m{i}")
            wait_for(lambda: len(a.events(c)) >= 2 * (i + 1), 10, "the echo's answer")
        # after and before are exclusive: before <= after + 1 is empty, also without a limit (an
        # unsigned wrap made it 10,000 seqs past `before`) and as a long-poll, which waits
        assert a.ok({"op": "events", "conversation": c, "after": 5, "before": 3})["events"] == []
        assert a.ok({"op": "events", "conversation": c, "after": 5, "before": 6})["events"] == []
        t0 = time.monotonic()
        r = a.ok({"op": "events", "conversation": c, "after": 5, "before": 2, "wait_ms": 300})
        assert r["events"] == [] and time.monotonic() - t0 >= 0.29, r

        with a.conn(timeout=60) as k:  # 11,000 more sends, pipelined
            for _ in range(11):
                k.raw(b"".join(json.dumps({"op": "send", "conversation": c, "content": "x"}).encode() + b"\n"
                               for _ in range(1000)))
                for _ in range(1000):
                    assert k.recv(30)["ok"] is True
        a.ok({"op": "update", "conversation": c, "status": "ended"})  # no more turns: a stable log
        wait_for(lambda: a.worker_pid(c) is None, 20, "the worker to stop")
        last = a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"]
        assert last > 11000, last
        # a reply covers 10,000 seqs at most; next_after says where to go on
        r = a.ok({"op": "events", "conversation": c})
        assert [e["seq"] for e in r["events"]] == list(range(1, 10001)) and r["next_after"] == 10000, \
            (len(r["events"]), r.get("next_after"))
        r2 = a.ok({"op": "events", "conversation": c, "after": 10000, "wait_ms": 5000})
        assert [e["seq"] for e in r2["events"]] == list(range(10001, last + 1)) and "next_after" not in r2
        # with a type filter a page may hold none of that type, and still says where to go on
        r3 = a.ok({"op": "events", "conversation": c, "type": "error"})
        assert r3["events"] == [] and r3["next_after"] == 10000, r3
        assert "next_after" not in a.ok({"op": "events", "conversation": c, "limit": 10000})
        # agentctl pages on: the whole log, in order
        rc, out, err = a.ctl("events", c, timeout=60)
        seqs = [int(line.split()[0]) for line in out.splitlines()]
        assert seqs == list(range(1, last + 1)) and err == "", (len(seqs), err)
        rc, out, err = a.ctl("events", c, "--after", str(last - 2), timeout=60)
        assert [int(line.split()[0]) for line in out.splitlines()] == [last - 1, last], out


def test_shutdown_answers_every_request_it_read():
    a = Agentd(config="[agentd]\nmax_line = 1k\n")
    try:
        c = a.create(conversation="s")
        lp = a.conn()
        lp.send({"op": "events", "conversation": c, "after": 0, "wait_ms": 60000, "id": "lp"})
        wait_for(lambda: metric(a, "agentd_ops_total", 'op="events"') >= 1, 10, "the long-poll parked")
        k = a.conn()
        # 100 pings, shutdown, 100 gets, an empty line, then a line over the limit, in one write
        k.raw(b"".join(json.dumps({"op": "ping", "id": i}).encode() + b"\n" for i in range(100))
              + json.dumps({"op": "shutdown", "id": "sd"}).encode() + b"\n"
              + b"".join(json.dumps({"op": "get", "conversation": "s", "id": 1000 + i}).encode() + b"\r\n"
                         for i in range(100))
              + b"\n" + b"x" * 2000 + b"\n")
        got = [k.recv(10) for _ in range(203)]
        assert a.wait(20) == 0
        assert [g["id"] for g in got[:101]] == list(range(100)) + ["sd"] and all(g["ok"] for g in got[:101])
        gets = got[101:201]
        assert [g["id"] for g in gets] == list(range(1000, 1100)), [g.get("id") for g in gets]
        for g in gets:  # served before the shutdown took effect, or refused after
            assert g["ok"] is True or g["error"] == "unavailable", g
        assert gets[-1]["error"] == "unavailable", gets[-1]
        assert got[201]["error"] == "bad_request" and got[202]["error"] == "too_large", got[201:]
        r = lp.recv(10)
        assert r["id"] == "lp" and r["error"] == "unavailable", r
    finally:
        a.close()


def test_a_crlf_line_of_exactly_max_line_is_accepted():
    with Agentd(config="[agentd]\nmax_line = 1k\n") as a:
        a.create(conversation="m")
        prefix, suffix = b'{"op":"send","conversation":"m","content":"', b'"}'
        line = prefix + b"x" * (1024 - len(prefix) - len(suffix)) + suffix
        with a.conn() as k:
            k.raw(line + b"\r\n")
            assert k.recv()["ok"] is True
            k.raw(line[:-1] + b"xx\r\n")  # one byte over
            assert k.recv()["error"] == "too_large"
        with a.conn() as k:  # the same, arriving in pieces: the \r waits for its \n
            k.raw(line + b"\r")
            time.sleep(scaled(0.1))
            k.raw(b"\n")
            assert k.recv()["ok"] is True


def test_compact_pipelined_before_stop_is_done_first():
    with Agentd() as a:
        c = a.create(conversation="cs")
        for i in range(3):
            a.send(c, f"m{i}")
            wait_for(lambda: len(a.events(c)) >= 2 * (i + 1), 10, "the echo's answer")
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["worker"]["state"] == "idle", 10,
                 "an idle worker")
        with a.conn(timeout=30) as k:
            k.send({"op": "compact", "conversation": c, "id": 1})
            k.send({"op": "stop", "conversation": c, "id": 2})
            r1, r2 = k.recv(20), k.recv(20)
        assert r1["ok"] is True and r1["summary"]["to_seq"] == 5, r1
        assert r2["ok"] is True, r2
        wait_for(lambda: a.worker_pid(c) is None, 10, "the worker to stop")


def test_input_after_a_watch_is_ignored_and_a_deleted_watch_gets_no_new_conversation():
    with Agentd() as a:
        c = a.create(conversation="wp")
        k = a.conn()
        # requests written with the watch, in one write: ignored (protocol.md), not executed
        k.raw((json.dumps({"op": "watch", "conversation": c, "id": "w"}) + "\n" +
               json.dumps({"op": "send", "conversation": c, "content": "smuggled", "id": "s"}) + "\n" +
               json.dumps({"op": "ping", "id": "p"}) + "\n").encode())
        assert k.recv(5) == {"id": "w", "ok": True, "last_seq": 0}
        a.send(c, "real")
        first = k.recv(5)
        assert first == {"event": {"seq": 1, "type": "user_msg", "content": {"text": "real"},
                                   "inserted_at": first["event"]["inserted_at"]}}, first
        assert [e["content"] for e in a.events(c)][0] == {"text": "real"}
        # a failed watch leaves the connection serving
        with a.conn() as k2:
            k2.raw((json.dumps({"op": "watch", "conversation": "nobody", "id": 1}) + "\n" +
                    json.dumps({"op": "ping", "id": 2}) + "\n").encode())
            assert k2.recv()["error"] == "not_found" and k2.recv()["id"] == 2
        k.close()
        # A slow watcher of a deleted conversation: its stream ends with the deleted one's events, never
        # the events of a conversation created again with the same id (it stayed on the reused record).
        d = a.create(conversation="dr")
        for i in range(4):
            a.send(d, "x" * 900_000)
            wait_for(lambda: a.ok({"op": "get", "conversation": d})["conversation"]["last_seq"] >= 2 * (i + 1),
                     20, "the echo")
        w = a.watch(d, after=0)  # not read yet: its output backs up
        time.sleep(scaled(0.3))
        a.ok({"op": "delete", "conversation": d})
        a.create(conversation="dr")
        for i in range(5):
            a.send(d, f"NEW{i}")
        # one turn may answer several queued messages: wait for the answer after the last
        wait_for(lambda: a.events(d)[-1]["type"] == "assistant_msg" and a.events(d)[-1]["seq"] >= 6, 20, "echoes")
        got = []
        while True:
            try:
                line = w.recv(5)
            except AssertionError:
                break  # closed
            got.append(line["event"])
        w.close()
        assert got and not any("NEW" in json.dumps(e["content"]) for e in got), [e["seq"] for e in got]


# ---------------------------------------------------------------------------------------------------
# The socket file


def test_socket_mode_stale_file_and_long_path():
    a = Agentd()
    try:
        st = os.stat(a.socket)
        assert (st.st_mode & 0o777) == 0o600, oct(st.st_mode)
        a.create(conversation="survivor")
        a.send("survivor", "kept")
        a.kill(signal.SIGKILL)
        assert os.path.exists(a.socket), "expected the SIGKILLed agentd to leave its socket file"
        # nothing listens on it now
        try:
            Client(a.socket, timeout=1)
            raise AssertionError("something still listens on the stale socket")
        except ConnectionRefusedError:
            pass
        # a restart replaces it; the data is still there
        a.start()
        st2 = os.stat(a.socket)
        assert (st2.st_mode & 0o777) == 0o600, oct(st2.st_mode)
        assert a.events("survivor")[0]["content"] == {"text": "kept"}
        # a second agentd on the same data directory does not steal the socket
        b = Agentd(data_dir=a.data_dir, start=False)
        b.socket = a.socket
        rc = b.expect_exit()
        assert rc != 0, rc
        assert a.ok({"op": "ping"})
        b.close()
        a.stop()
    finally:
        a.close()

    a = Agentd(start=False)
    try:
        deep = os.path.join(a.dir, "d" * 60, "e" * 60)
        os.makedirs(deep)
        longpath = os.path.join(deep, "agentd.sock")
        assert len(longpath) > 108
        a.extra_args = ["--socket", longpath]
        rc = a.expect_exit()
        assert rc != 0, rc
        log = a.log()
        assert "socket" in log and ("sun_path" in log or "shorter" in log or "too long" in log), log
        assert not os.path.exists(longpath)
    finally:
        a.close()


def test_socket_path_that_is_not_a_dead_agentds_is_left_alone():
    # A --socket outside the data directory is not covered by the data
    # directory's lock: a live socket (another agentd) or a file that is no
    # socket is refused, never deleted; an ephemeral store is removed even so.
    a = Agentd(start=False)
    try:
        shared = os.path.join(a.dir, "shared.sock")
        a.extra_args = ["--socket", shared]
        a.socket = shared
        a.start()
        a.create(conversation="first")
        b = Agentd(start=False, lmdb=True)  # its own data directory, the same socket path; --ephemeral is LMDB's
        try:
            b.extra_args = ["--socket", shared]
            assert b.expect_exit() == 1
            assert "another process listens on " + shared + ": not replacing it" in b.log(), b.log()
            assert a.ok({"op": "status"})["store"]["path"] == (harness.pg_target(a.data_dir) if harness.PG else
                                                               os.path.realpath(a.data_dir))
            assert a.ok({"op": "get", "conversation": "first"})

            precious = os.path.join(b.dir, "precious.txt")
            with open(precious, "w") as f:
                f.write("keep me\n")
            shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
            b.extra_args = ["--socket", precious, "--ephemeral"]
            assert b.expect_exit() == 1
            assert "socket path " + precious + " exists and is not a socket: not replacing it" in b.log()
            with open(precious) as f:
                assert f.read() == "keep me\n"
            if shm:
                left = {d for d in set(os.listdir("/dev/shm")) - shm if d.startswith("agentd-")}
                assert not left, f"a failed --ephemeral start left {left} behind"
        finally:
            b.close()
    finally:
        a.close()

def test_a_connection_ended_inside_a_line_gets_an_error_not_an_execution():
    # A client that wrote its last request without the newline and shut its side (printf '...' | socat,
    # nc -N) got nothing at all: the line was dropped in silence.
    with Agentd() as a:
        c = a.create()
        def exchange(data):
            s = socket.socket(socket.AF_UNIX)
            s.connect(a.socket)
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(scaled(10))
            out = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                out += d
            s.close()
            return [json.loads(l) for l in out.splitlines()]
        r = exchange(b'{"op":"ping","id":1}\n{"op":"send","conversation":"' + c.encode() + b'","content":"x"}')
        assert r[0]["id"] == 1 and r[0]["ok"] is True, r
        assert len(r) == 2 and r[1]["error"] == "bad_request" and "ended inside a line" in r[1]["message"], r
        assert a.events(c) == [], a.events(c)  # not executed
        # behind a write and a read of it (which holds the lines after it until the commit), the same
        r = exchange(b'{"op":"create","conversation":"w2","settings":{"model":"echo"},"id":2}\n'
                     b'{"op":"get","conversation":"w2","id":3}\n{"op":"ping"')
        assert [x.get("id") for x in r[:2]] == [2, 3] and r[0]["ok"] and r[1]["ok"], r
        assert len(r) == 3 and r[2]["error"] == "bad_request" and "ended inside a line" in r[2]["message"], r
        # terminated, the same request is served, and a half-closed connection still gets its replies
        r = exchange(b'{"op":"send","conversation":"' + c.encode() + b'","content":"x"}\n')
        assert r == [{"seq": 1, "ok": True}], r



# ---------------------------------------------------------------------------------------------------
# What an operator sees (found by a review of the metrics, status and logs)


def test_deaths_agentd_did_not_ask_for_are_warned_and_counted():
    # A worker killed by a signal was an `info` line whoever sent it (invisible at --log-level warn), and one
    # that owed nothing (an OOM kill of an idle worker) was not counted as a crash.
    with Agentd(extra_args=["--log-level", "warn"]) as a:
        c = a.create(conversation="idle1")
        a.send(c, "hi")
        wait_for(lambda: len(a.events(c)) == 2 and (conv(a, c).get("worker") or {}).get("state") == "idle", 10,
                 "an idle worker")
        pid = a.worker_pid(c)
        crashes = metric(a, "agentd_worker_crashes_total")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: f"idle1: worker {pid} killed by signal 9" in a.log(), 10, "the death logged")
        assert f"warn: idle1: worker {pid} killed by signal 9" in a.log(), a.log()
        assert metric(a, "agentd_worker_crashes_total") == crashes + 1
        # one agentd was asked to kill: info, filtered out here
        a.send(c, "again")
        wait_for(lambda: len(a.events(c)) == 4, 10, "the answer")
        pid = a.worker_pid(c)
        a.ok({"op": "kill", "conversation": c})
        wait_for(lambda: not pid_alive(pid), 10, "the killed worker gone")
        time.sleep(scaled(0.2))
        assert f"worker {pid} killed" not in a.log(), a.log()


def test_a_shutdown_op_is_logged_with_its_client():
    with Agentd() as a:
        a.ok({"op": "shutdown"})
        assert a.wait(timeout=10) == 0
        assert re.search(r"info: shutdown asked by a client \(pid \d+, uid \d+\): shutting down", a.log()), a.log()


def test_a_long_poll_is_timed_to_its_reply():
    # agentd_op_duration_seconds stopped timing a long-poll when it was parked: a 700 ms wait showed 26 us.
    with Agentd() as a:
        c = a.create(conversation="lp")
        before = metric(a, "agentd_op_duration_seconds_sum", 'op="events"')
        r = a.ok({"op": "events", "conversation": c, "after": 0, "wait_ms": 700})
        assert r["events"] == []
        took = metric(a, "agentd_op_duration_seconds_sum", 'op="events"') - before
        assert took >= 0.6, took


@harness.lmdb_only("LMDB's map and its growth")
def test_the_map_grows_as_often_as_a_write_needs():
    # A group commit grew the map once, then refused: with map_size 64k a 600 KB send was store_full although
    # max_map_size allowed 64 GiB. And each refused write logged a false "retrying after growing the map".
    with Agentd(config="[agentd]\nmap_size = 64k\n") as a:
        c = a.create(conversation="big")
        seq = a.ok({"op": "send", "conversation": c, "content": "z" * 600000})["seq"]
        assert a.events(c)[0]["seq"] == seq and len(a.events(c)[0]["content"]["text"]) == 600000
        assert a.log().count("the map is full during a group commit of 1 writes: growing it from") == 1, a.log()
    with Agentd(config="[agentd]\nmap_size = 64k\nmax_map_size = 256k\n") as a:
        c = a.create(conversation="full")
        refused = 0
        for _ in range(400):
            r = a.request({"op": "send", "conversation": c, "content": "y" * 2000})
            if not r.get("ok"):
                assert r["error"] == "store_full", r
                refused += 1
                if refused == 5:
                    break
        assert refused == 5
        log = a.log()
        assert "retrying" not in log, log
        # five refusals within a second: one line
        assert log.count("failed: the store is full (map at max_map_size, or the disk is full)") == 1, log


harness.main(globals())
