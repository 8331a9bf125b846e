"""Fork (docs/protocol.md, "Fork"): a new conversation whose log is another's events 1..seq, settings and
metadata copied unless given, tool calls unsettled at seq settled "cancelled" in the fork, a summary carried
when it fits (and then standing in for the events it covers: the fork's log begins after it), fsm_state and
status from the conversation rules, and the source untouched; through the socket and agentctl. Every bad
input is refused with a clear error and nothing written."""
import json
import os
import subprocess
import time

import harness
from harness import AGENTD_BIN, Agentd, wait_for

TOOLS = """
[tool.approve]
executor = human
prompt = Approve?
expires = 1h
"""


def snapshot(a, c):
    """Everything of c a fork must not change."""
    got = a.ok({"op": "get", "conversation": c})["conversation"]
    got.pop("worker", None)
    return (got, a.events(c, limit=10000), a.ok({"op": "tool_calls", "conversation": c})["tool_calls"],
            a.ok({"op": "summary", "conversation": c})["summary"])


def conv_ids(a):
    return [c["id"] for c in a.ok({"op": "list", "limit": 1000})["conversations"]]


def strip(evs):
    return [(e["seq"], e["type"], e["content"], e.get("event_id")) for e in evs]


def check_store(a):
    a.stop()
    p = subprocess.run([AGENTD_BIN, "check", *a.check_args()], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout


def test_fork_copies_the_prefix_and_leaves_the_source():
    with Agentd() as a:
        c = a.create(conversation="src", settings={"model": "echo", "system": "Be brief."},
                     metadata={"team": "red"})
        for i in range(3):
            a.send(c, f"m{i}", event_id=f"e{i}")
            wait_for(lambda: len(a.events(c)) >= 2 * (i + 1), 10, "the echo reply")
        before = snapshot(a, c)
        rc, out, err = a.ctl("fork", c, 4, "--id", "f1")
        assert out == "f1\n", (out, err)
        f = a.ok({"op": "get", "conversation": "f1"})["conversation"]
        assert f["forked_from"] == {"conversation": "src", "seq": 4}, f
        assert f["settings"] == {"model": "echo", "system": "Be brief."}, f
        assert f["metadata"] == {"team": "red"} and f["status"] == "idle" and f["last_seq"] == 4, f
        assert f["fsm_state"] == {"state": "idle", "pending": {}, "last_seq": 4}, f
        assert f["usage"] == {"input_tokens": 0, "output_tokens": 0, "cost": 0.0, "turns": 0}, f
        assert strip(a.events("f1")) == strip(before[1][:4])
        # the idempotency keys came along: a retried send into the fork answers the original seq
        r = a.ok({"op": "send", "conversation": "f1", "content": "again", "event_id": "e1"})
        assert r["seq"] == 3 and r["duplicate"] is True, r
        after = snapshot(a, c)
        assert after == before, [(x, y) for x, y in zip(before, after) if x != y]
        assert a.ok({"op": "get", "conversation": c})["conversation"]["forked_from"] is None
        # a generated id, overrides of settings and metadata, the whole reply
        r = a.ok({"op": "fork", "conversation": c, "seq": 6, "settings": {"system": "Be long."},
                  "metadata": {"team": "blue", "why": "try"}})
        g = r["conversation"]
        assert g.startswith("c-") and r["forked_from"] == {"conversation": "src", "seq": 6}, r
        assert r["copied"] == 6 and r["cancelled"] == 0 and r["status"] == "idle" and r["last_seq"] == 6, r
        got = a.ok({"op": "get", "conversation": g})["conversation"]
        assert got["settings"] == {"model": "echo", "system": "Be long."}, got
        assert got["metadata"] == {"team": "blue", "why": "try"}, got
        assert [x["id"] for x in a.ok({"op": "list", "metadata": {"team": "blue"}})["conversations"]] == [g]
        # a fork of a fork records its own origin; a fork is a conversation like any: it answers
        a.ok({"op": "fork", "conversation": "f1", "seq": 2, "new_conversation": "f2"})
        assert a.ok({"op": "get", "conversation": "f2"})["conversation"]["forked_from"] == {"conversation": "f1",
                                                                                              "seq": 2}
        a.send("f2", "hello fork")
        wait_for(lambda: len(a.events("f2")) >= 4, 10, "the fork's answer")
        assert a.events("f2")[3]["content"]["text"] == "echo: hello fork"
        after = snapshot(a, c)
        assert after == before, [(x, y) for x, y in zip(before, after) if x != y]
        out = check_store(a)
        assert "consistent" in out, out


def test_a_fork_that_owes_a_turn_runs_it():
    with Agentd() as a:
        c = a.create(conversation="src")
        a.send(c, "one")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        a.send(c, "two")
        wait_for(lambda: len(a.events(c)) >= 4, 10, "the echo reply")
        r = a.ok({"op": "fork", "conversation": c, "seq": 3, "new_conversation": "f"})
        assert r["status"] == "active" and r["last_seq"] == 3, r
        wait_for(lambda: len(a.events("f")) >= 4, 10, "the fork's owed turn")
        assert a.events("f")[3]["type"] == "assistant_msg" and a.events("f")[3]["content"]["context_seq"] == 3
        wait_for(lambda: a.ok({"op": "get", "conversation": "f"})["conversation"]["status"] == "idle", 10,
                 "the fork idle")
        assert len(a.events(c)) == 4
        check_store(a)


def test_unsettled_calls_end_cancelled_in_the_fork():
    with Agentd(config=TOOLS) as a:
        c = a.create(conversation="src", settings={"model": "echo", "tools": ["approve"]})
        a.send(c, "/tool approve")
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "suspended", 10,
                 "the suspension")
        evs = a.events(c)
        call = [e for e in evs if e["type"] == "tool_call"][0]["content"]
        n = evs[-1]["seq"]
        # the suspending turn's last commit (its run's end) may land just after the status shows
        prev = [None]

        def settled():  # two reads 0.1 s apart agree
            cur = snapshot(a, c)
            same, prev[0] = cur == prev[0], cur
            if not same:
                time.sleep(0.1)
            return same
        wait_for(settled, 10, "the source to settle")
        before = prev[0]
        r = a.ok({"op": "fork", "conversation": c, "seq": n, "new_conversation": "f"})
        assert r["cancelled"] == 1 and r["last_seq"] == n + 1, r
        fe = a.events("f")
        # the prefix, with the fork's own tool call id (ids are unique across the store)
        fcall = fe[n - 2]["content"]
        assert fe[n - 2]["type"] == "tool_call" and fcall["name"] == "approve", fe
        new_id = fcall["tool_call_id"]
        assert new_id != call["tool_call_id"]
        assert [e["type"] for e in fe[:n]] == [e["type"] for e in evs]
        last = fe[n]
        assert last["type"] == "resolution" and last["content"]["tool_call_id"] == new_id, last
        assert last["content"]["status"] == "cancelled", last
        assert last["content"]["result"] == {"forked_from": {"conversation": "src", "seq": n}}, last
        tcs = a.ok({"op": "tool_calls", "conversation": "f"})["tool_calls"]
        assert [(t["id"], t["status"]) for t in tcs] == [(new_id, "cancelled")], tcs
        assert tcs[0]["result"] == {"forked_from": {"conversation": "src", "seq": n}}, tcs
        # the source's call is still pending, and settling it reaches only the source
        after = snapshot(a, c)
        assert after == before, [(x, y) for x, y in zip(before, after) if x != y]
        a.ok({"op": "resolve", "tool_call_id": call["tool_call_id"], "result": {"approved": True}})
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 10,
                 "the source answered")
        r = a.request({"op": "resolve", "tool_call_id": new_id})
        assert r["error"] == "stale", r
        # the fork owed the model an answer to the cancelled call: it ran that turn
        wait_for(lambda: a.ok({"op": "get", "conversation": "f"})["conversation"]["status"] == "idle", 10,
                 "the fork's turn")
        # a fork after the settlement carries the call settled, as the log has it
        m = [e for e in a.events(c) if e["type"] == "resolution"][0]["seq"]
        r = a.ok({"op": "fork", "conversation": c, "seq": m, "new_conversation": "g"})
        assert r["cancelled"] == 0, r
        tcs = a.ok({"op": "tool_calls", "conversation": "g"})["tool_calls"]
        assert [t["status"] for t in tcs] == ["resolved"] and tcs[0]["result"] == {"approved": True}, tcs
        out = check_store(a)
        assert "consistent" in out, out


def run(*args):
    p = harness.run_agentd(*args, capture_output=True, text=True, timeout=harness.scaled(60))
    return p.returncode, p.stdout, p.stderr


def test_a_summary_that_fits_is_carried_and_the_fork_log_begins_after_it():
    with Agentd() as a:
        c = a.create(conversation="src")
        for i in range(4):
            a.send(c, f"m{i}", event_id=f"e{i}")
            wait_for(lambda: len(a.events(c)) >= 2 * (i + 1), 10, "the echo reply")
        s = a.ok({"op": "compact", "conversation": c}, timeout=30)["summary"]
        assert s and s["to_seq"] == 7, s
        to = 7
        for i in (4, 5):
            a.send(c, f"m{i}", event_id=f"e{i}")
            wait_for(lambda: len(a.events(c)) >= 2 * (i + 1), 10, "the echo reply")
        src = a.events(c, limit=10000)
        # The summary stands in for 1..7: only the events after it are copied.
        r = a.ok({"op": "fork", "conversation": c, "seq": 12, "new_conversation": "f"})
        assert r["summary_to"] == to and r["first_seq"] == to + 1 and r["copied"] == 12 - to, (r, s)
        assert r["last_seq"] == 12 and r["status"] == "idle", r
        fs = a.ok({"op": "summary", "conversation": "f"})["summary"]
        assert (fs["from_seq"], fs["to_seq"], fs["content"], fs["version"]) == (s["from_seq"], to, s["content"],
                                                                               1), fs
        assert strip(a.events("f", limit=10000)) == strip(src[to:12])
        got = a.ok({"op": "get", "conversation": "f"})["conversation"]
        assert got["first_seq"] == to + 1 and got["last_seq"] == 12, got
        assert got["fsm_state"] == {"state": "idle", "pending": {}, "last_seq": 12}, got
        assert a.ok({"op": "get", "conversation": c})["conversation"]["first_seq"] == 1
        # `events` from before the log's start delivers from it and says where it begins
        r = a.ok({"op": "events", "conversation": "f", "after": 0})
        assert r["first_seq"] == to + 1 and [e["seq"] for e in r["events"]] == list(range(to + 1, 13)), r
        r = a.ok({"op": "events", "conversation": "f", "after": to})
        assert "first_seq" not in r and len(r["events"]) == 12 - to, r
        # an event_id of the copied events answers its seq in the fork
        r = a.ok({"op": "send", "conversation": "f", "content": "again", "event_id": "e4"})
        assert r["seq"] == 9 and r["duplicate"] is True, r
        # a watch from 0 streams from the log's first seq
        w = a.watch("f", after=0)
        assert w.recv()["event"]["seq"] == to + 1
        w.close()
        # a fork that ends at or before the summary's end copies its prefix whole and carries no summary
        r = a.ok({"op": "fork", "conversation": c, "seq": to, "new_conversation": "g"})
        assert r["summary_to"] is None and r["first_seq"] == 1 and r["copied"] == to, r
        assert a.ok({"op": "summary", "conversation": "g"})["summary"] is None
        # the fork answers: its worker revives from the summary and the events after it
        a.send("f", "after")
        wait_for(lambda: a.events("f")[-1]["seq"] == 14, 10, "the fork's answer")
        assert a.events("f")[-1]["content"]["text"] == "echo: after"
        # compaction of the fork, and a fork of the fork at its end: the latest summary stands in again
        fs2 = a.ok({"op": "compact", "conversation": "f"}, timeout=30)["summary"]
        assert fs2 and fs2["to_seq"] == 13 and fs2["version"] == 2, fs2
        r = a.ok({"op": "fork", "conversation": "f", "seq": 14, "new_conversation": "ff"})
        assert r["summary_to"] == 13 and r["first_seq"] == 14 and r["copied"] == 1, r
        a.send("ff", "deeper")
        wait_for(lambda: a.events("ff")[-1]["seq"] == 16, 10, "the fork of the fork's answer")
        assert a.events("ff")[-1]["content"]["text"] == "echo: deeper"
        # a fork of f at a seq its latest summary does not cover needs events f does not hold: refused
        r = a.request({"op": "fork", "conversation": "f", "seq": 9, "new_conversation": "no"})
        assert r["error"] == "bad_request" and f"its log begins at seq {to + 1}" in r["message"], r
        assert a.request({"op": "get", "conversation": "no"})["error"] == "not_found"
        # an event_id the summary stands in for is not the fork's: the send is a new event
        r = a.ok({"op": "send", "conversation": "f", "content": "e0 again", "event_id": "e0"})
        assert r["seq"] == 15 and "duplicate" not in r, r
        wait_for(lambda: a.events("f")[-1]["seq"] == 16, 10, "the fork's answer")
        # deleting a fork frees it: the id made again begins at 1
        a.ok({"op": "delete", "conversation": "ff"})
        a.create(conversation="ff")
        assert a.ok({"op": "get", "conversation": "ff"})["conversation"]["first_seq"] == 1
        out = check_store(a)
        assert "consistent" in out, out
        # export and import carry a log that begins after 1, and check passes on the copy
        e1, e2 = (os.path.join(a.dir, f"e{i}.jsonl") for i in (1, 2))
        rc, out, err = run("export", *a.check_args(), "--output", e1)
        assert rc == 0, (rc, out, err)
        head = [json.loads(x) for x in open(e1) if '"kind":"conv"' in x]
        assert {x["id"]: x.get("first_seq") for x in head}["f"] == to + 1, head
        assert {x["id"]: x.get("first_seq") for x in head}["src"] is None, head
        back = os.path.join(a.dir, "back")
        rc, out, err = run("import", "--data", back, "--input", e1)
        assert rc == 0, (rc, out, err)
        rc, out, err = run("check", "--data", back)
        assert rc == 0 and "consistent" in out, (rc, out, err)
        rc, out, err = run("export", "--data", back, "--output", e2)
        assert rc == 0 and open(e2).read().splitlines()[1:] == open(e1).read().splitlines()[1:], (rc, err)


def test_bad_forks_are_refused_and_write_nothing():
    with Agentd() as a:
        c = a.create(conversation="src")
        a.send(c, "one")
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        a.create(conversation="taken")
        ids = conv_ids(a)
        before = snapshot(a, c)
        cases = [
            ({"conversation": "nope", "seq": 1}, "not_found", "conversation 'nope' not found"),
            ({"conversation": c, "seq": 0}, "bad_request", "'seq' must be an integer from 1"),
            ({"conversation": c, "seq": 3}, "bad_request", "seq 3 is past the last seq of src (2)"),
            ({"conversation": c, "seq": -1}, "bad_request", "'seq' must be an integer"),
            ({"conversation": c, "seq": "1"}, "bad_request", "'seq' must be an integer"),
            ({"conversation": c}, "bad_request", "missing field 'seq'"),
            ({"seq": 1}, "bad_request", "missing field 'conversation'"),
            ({"conversation": c, "seq": 1, "new_conversation": "taken"}, "conflict",
             "conversation taken already exists"),
            ({"conversation": c, "seq": 1, "new_conversation": "src"}, "conflict", "conversation src already exists"),
            ({"conversation": c, "seq": 1, "new_conversation": "bad id!"}, "bad_request", "new_conversation"),
            ({"conversation": c, "seq": 1, "settings": {"model": "nosuch"}}, "bad_request", "unknown model 'nosuch'"),
            ({"conversation": c, "seq": 1, "settings": {"colour": 1}}, "bad_request", "unknown settings field"),
            ({"conversation": c, "seq": 1, "settings": {"forked_from": {}}}, "bad_request",
             "'settings.forked_from' is agentd's"),
            ({"conversation": c, "seq": 1, "settings": []}, "bad_request", "'settings' must be an object"),
            ({"conversation": c, "seq": 1, "metadata": {"k": 1}}, "bad_request", "'metadata.k' must be a string"),
            ({"conversation": c, "seq": 1, "metadata": {"k": None}}, "bad_request", "'metadata.k' must be a string"),
            ({"conversation": c, "seq": 1, "id2": 1}, "bad_request", "unknown field 'id2' for op 'fork'"),
        ]
        for fields, code, msg in cases:
            r = a.request(dict(op="fork", **fields))
            assert r["ok"] is False and r["error"] == code and msg in r["message"], (fields, r)
        assert conv_ids(a) == ids
        after = snapshot(a, c)
        assert after == before, [(x, y) for x, y in zip(before, after) if x != y]
        # agentctl: the same refusals, exit 1 with the code; usage errors exit 2
        rc, out, err = a.ctl("fork", c, 9, check=False)
        assert rc == 1 and "agentctl: bad_request: seq 9 is past the last seq of src (2)" in err, err
        rc, out, err = a.ctl("fork", c, 1, "--id", "taken", check=False)
        assert rc == 1 and err.startswith("agentctl: conflict: "), err
        rc, out, err = a.ctl("fork", c, check=False)
        assert rc == 2 and out == "", (out, err)
        rc, out, err = a.ctl("fork", c, "x", check=False)
        assert rc == 2 and out == "", (out, err)
        assert conv_ids(a) == ids
        after = snapshot(a, c)
        assert after == before, [(x, y) for x, y in zip(before, after) if x != y]


harness.main(globals())
