"""agentd export and import: an LMDB store moved to PostgreSQL and back (ctest pg_proc_transfer;
docs/scale-out.md, "Moving a store").

LMDB -> PostgreSQL -> LMDB gives the same stream, `agentd check` passes on each, the moved store serves
(a pending approval resolved, its expiry kept), and a damaged stream or a non-empty target is refused with
nothing written.
"""
import json
import os
import sys

os.environ["AGENTD_TEST_STORE"] = "pg"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proc"))

import harness  # noqa: E402
from harness import Agentd, pg_sql, pg_target, run_agentd, wait_for  # noqa: E402

CONFIG = """
[agentd]
audit = on
[tool.approve]
executor = human
prompt = Approve?
expires = 1h
[tool.add]
executor = server
command = python3 -c "import sys,json; d=json.load(sys.stdin); print(json.dumps({'sum': d['args']['a']+d['args']['b']}))"
"""


def run(*args):
    p = run_agentd(*args, capture_output=True, text=True, timeout=harness.scaled(120))
    return p.returncode, p.stdout, p.stderr


def body(path):
    """The stream's lines without its header (which names the backend it came from)."""
    with open(path) as f:
        lines = f.read().splitlines()
    assert json.loads(lines[0])["agentd_export"] == 1, lines[0]
    assert "end" in json.loads(lines[-1]), lines[-1]
    return lines[1:]


def pending(a, c):
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]


def make_store(a):
    """Conversations with everything a store holds: events with and without event_id, a summary, server and
    human tool calls (settled, pending with a deadline), audit rows, an ended conversation."""
    a.write_config(CONFIG)
    a.start()
    s = a.create(conversation="sum", settings={"model": "echo", "tools": ["approve", "add"]})
    for i in range(3):
        a.send(s, f"m{i}", event_id=f"e-{i}")
        wait_for(lambda: len(a.events(s)) >= 2 * (i + 1), 10, "the echo reply")
    a.ok({"op": "compact", "conversation": s}, timeout=30)
    a.send(s, '/tool add {"a": 2, "b": 3}')
    wait_for(lambda: a.events(s)[-1]["type"] == "assistant_msg" and len(a.events(s)) >= 10, 10, "the tool turn")
    h = a.create(conversation="wait", settings={"model": "echo", "tools": ["approve"]})
    a.send(h, "/tool approve")
    wait_for(lambda: pending(a, h), 10, "a pending approval")
    r = a.create(conversation="done", settings={"model": "echo", "tools": ["approve"]})
    a.send(r, "/tool approve")
    call = wait_for(lambda: pending(a, r), 10, "a pending approval")[0]
    a.ok({"op": "resolve", "tool_call_id": call["id"], "result": "yes"})
    wait_for(lambda: a.events(r)[-1]["type"] == "assistant_msg" and len(a.events(r)) >= 5, 10, "the answer")
    e = a.create(conversation="end", metadata={"team": "a", "ticket": "T-1"})
    a.send(e, "bye")
    wait_for(lambda: len(a.events(e)) == 2, 10, "the echo reply")
    a.ok({"op": "update", "conversation": e, "status": "ended"})
    wait_for(lambda: all(a.ok({"op": "get", "conversation": c})["conversation"]["status"] in ("idle", "suspended",
                                                                                              "ended")
                         for c in (s, h, r, e)), 10, "every conversation at rest")
    a.stop()
    return h


def test_lmdb_to_postgresql_and_back_is_the_same_store():
    with Agentd(start=False, lmdb=True) as a:
        waiting = make_store(a)
        e1, e2, e3 = (os.path.join(a.dir, f"e{i}.jsonl") for i in (1, 2, 3))
        rc, out, err = run("export", "--data", a.data_dir, "--output", e1)
        assert rc == 0 and not out, (rc, out, err)
        lines = [json.loads(x) for x in body(e1)]
        kinds = [x.get("kind", "end") for x in lines]
        for k in ("conv", "event", "summary", "tool_call", "model_call"):
            assert k in kinds, (k, kinds)
        assert any(x.get("event_id") == "e-1" for x in lines)
        assert sum(1 for x in lines if x.get("kind") == "conv" and x["metadata"]) == 1, lines
        assert any(x.get("kind") == "tool_call" and x["status"] == "pending" and x["deadline"] > 0 for x in lines)
        # Into PostgreSQL, checked, and out again: the same stream.
        target = pg_target(os.path.join(a.dir, "pg"))
        rc, out, err = run("import", "--store", target, "--input", e1)
        assert rc == 0 and "agentd import: 4 conversations into" in err, (rc, out, err)
        rc, out, err = run("check", "--store", target)
        assert rc == 0 and "4 conversations" in out and "consistent" in out, (rc, out, err)
        rc, out, err = run("export", "--store", target, "--output", e2)
        assert rc == 0, (rc, out, err)
        assert body(e2) == body(e1)
        # And back into a new LMDB directory: the same again.
        back = os.path.join(a.dir, "back")
        rc, out, err = run("import", "--data", back, "--input", e2)
        assert rc == 0, (rc, out, err)
        rc, out, err = run("check", "--data", back)
        assert rc == 0 and "consistent" in out, (rc, out, err)
        rc, out, err = run("export", "--data", back, "--output", e3)
        assert rc == 0 and body(e3) == body(e1), (rc, err)
        # To standard output, the same stream as to a file.
        rc, out, err = run("export", "--data", back)
        assert rc == 0 and out.splitlines()[1:] == body(e1)
        # Refused: a store that is not empty; nothing changes in it.
        rc, out, err = run("import", "--store", target, "--input", e1)
        assert rc == 1 and "is not empty" in err and "nothing was written" in err, (rc, err)
    # The moved store serves: agentd on PostgreSQL resolves the approval that was pending on LMDB.
    with Agentd(start=False) as b:
        b.extra_args = ["--store", target]
        b.write_config(CONFIG)
        b.start()
        got = b.ok({"op": "get", "conversation": "end"})["conversation"]
        assert got["metadata"] == {"team": "a", "ticket": "T-1"} and got["status"] == "ended", got
        call = pending(b, waiting)
        assert len(call) == 1 and call[0]["deadline"] > 0, call
        b.ok({"op": "resolve", "tool_call_id": call[0]["id"], "result": "yes"})
        wait_for(lambda: b.events(waiting)[-1]["type"] == "assistant_msg", 10, "the answer after the move")


def test_a_damaged_stream_or_store_refusal_writes_nothing():
    with Agentd(start=False, lmdb=True) as a:
        a.start()
        for i in range(3):
            c = a.create(conversation=f"c{i}")
            a.send(c, "hi")
            wait_for(lambda: len(a.events(c)) == 2, 10, "the echo reply")
        a.stop()
        good = os.path.join(a.dir, "good.jsonl")
        assert run("export", "--data", a.data_dir, "--output", good)[0] == 0
        with open(good) as f:
            lines = f.read().splitlines()

        def stream(name, ls):
            p = os.path.join(a.dir, name)
            with open(p, "w") as f:
                f.write("".join(x + "\n" for x in ls))
            return p

        ev = next(i for i, x in enumerate(lines) if '"kind":"event"' in x)
        bad_b64 = json.loads(lines[ev])
        bad_b64["content"] = "!!not base64"
        newer = json.loads(lines[0])
        newer["agentd_export"] = 2
        cases = [
            ("truncated", lines[:-2], "ends without its end line"),
            ("garbled", lines[:ev] + ["{not json"] + lines[ev + 1:], f"line {ev + 1}: not a JSON object"),
            ("base64", lines[:ev] + [json.dumps(bad_b64)] + lines[ev + 1:], f"line {ev + 1}: a event record"),
            ("newer", [json.dumps(newer)] + lines[1:], "export format version 2; this agentd reads version 1"),
            ("counts", lines[:ev] + lines[ev + 1:], "the end line's count of events is not"),
            ("unknown", lines[:ev] + ['{"kind":"bogus"}'] + lines[ev:], "an unknown kind of record 'bogus'"),
            ("empty", [], "an empty stream"),
        ]
        for i, (name, ls, said) in enumerate(cases):
            target = pg_target(os.path.join(a.dir, f"db{i}"))
            rc, out, err = run("import", "--store", target, "--input", stream(name, ls))
            assert rc == 1 and said in err and "nothing was written" in err, (name, rc, err)
            db = target.rsplit("dbname=", 1)[1]
            assert pg_sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", db) == "0", name
        # A stream that is well formed but that the store refuses halfway (an event type the store does not
        # take): what was written is removed again.
        lateev = max(i for i, x in enumerate(lines) if '"kind":"event"' in x)
        bad = json.loads(lines[lateev])
        bad["type"] = "Not A Type"
        target = pg_target(os.path.join(a.dir, "late"))
        rc, out, err = run("import", "--store", target, "--input", stream("late", lines[:lateev] + [json.dumps(bad)] +
                                                                             lines[lateev + 1:]))
        assert rc == 1 and "removing the 3 conversation(s) written" in err, (rc, err)
        rc, out, err = run("check", "--store", target)
        assert rc == 0 and "0 conversations, 0 events, 0 tool calls" in out, (rc, out)
        # Usage errors.
        assert run("import", "--store", target)[0] == 2
        assert run("import", "--data", "postgresql:///x", "--input", good)[0] == 2
        assert run("export", "--store", a.data_dir)[0] == 2
        rc, out, err = run("import", "--data", os.path.join(a.dir, "fifo-target"), "--input", "/dev/null")
        assert rc == 1 and "is not a regular file" in err, (rc, err)


harness.main(globals())
