"""agentd export and import: an LMDB store moved to PostgreSQL and back (ctest pg_proc_transfer;
docs/scale-out.md, "Moving a store").

LMDB -> PostgreSQL -> LMDB gives the same stream, `agentd check` passes on each, the moved store serves
(a pending approval resolved, its expiry kept), and a damaged stream or a non-empty target is refused with
nothing written.
"""
import json
import os
import subprocess
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
    assert json.loads(lines[0])["agentd_export"] == 3, lines[0]
    assert "end" in json.loads(lines[-1]), lines[-1]
    return lines[1:]


def pending(a, c):
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]


def summarised(a, name, tools):
    """A conversation of three echoed sends (with event_ids), compacted."""
    s = a.create(conversation=name, settings={"model": "echo", "tools": tools})
    for i in range(3):
        a.send(s, f"m{i}", event_id=f"e-{i}")
        wait_for(lambda: len(a.events(s)) >= 2 * (i + 1), 10, "the echo reply")
    a.ok({"op": "compact", "conversation": s}, timeout=30)
    return s


def approvals(a, waiting, answered):
    """One conversation whose approval is pending (with its expiry and warning), one whose was answered."""
    h = a.create(conversation=waiting, settings={"model": "echo", "tools": ["approve"]})
    a.send(h, "/tool approve")
    wait_for(lambda: pending(a, h), 10, "a pending approval")
    r = a.create(conversation=answered, settings={"model": "echo", "tools": ["approve"]})
    a.send(r, "/tool approve")
    call = wait_for(lambda: pending(a, r), 10, "a pending approval")[0]
    a.ok({"op": "resolve", "tool_call_id": call["id"], "result": "yes"})
    wait_for(lambda: a.events(r)[-1]["type"] == "assistant_msg" and len(a.events(r)) >= 5, 10, "the answer")
    return h, r


def ended(a, name):
    """A conversation with metadata, ended after one echoed send."""
    e = a.create(conversation=name, metadata={"team": "a", "ticket": "T-1"})
    a.send(e, "bye")
    wait_for(lambda: len(a.events(e)) == 2, 10, "the echo reply")
    a.ok({"op": "update", "conversation": e, "status": "ended"})
    return e


def stop_at_rest(a, convs):
    wait_for(lambda: all(a.ok({"op": "get", "conversation": c})["conversation"]["status"] in ("idle", "suspended",
                                                                                              "ended")
                         for c in convs), 10, "every conversation at rest")
    a.stop()


def make_store(a):
    """Conversations with everything a store holds: events with and without event_id, a summary, server and
    human tool calls (settled, pending with a deadline), audit rows, an ended conversation."""
    a.write_config(CONFIG)
    a.start()
    s = summarised(a, "sum", ["approve", "add"])
    a.send(s, '/tool add {"a": 2, "b": 3}')
    wait_for(lambda: a.events(s)[-1]["type"] == "assistant_msg" and len(a.events(s)) >= 10, 10, "the tool turn")
    h, r = approvals(a, "wait", "done")
    e = ended(a, "end")
    stop_at_rest(a, (s, h, r, e))
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


# ---- every table, every field: dumps of the stores on both sides of a move ---------------------------------

FULL_CONFIG = """
[agentd]
audit = on
[tool.approve]
executor = human
prompt = Approve?
expires = 1h
warn_before = 30m
"""

# What a move does not carry (runtime state: leases, nodes) or keeps elsewhere (LMDB's counters).
LMDB_SKIP = {"meta", "nodes", "owners"}
PG_SKIP_COLS = {"convs": {"lease", "owner", "lease_expires"}}
PG_TABLES = ("convs", "conv_meta", "events", "summaries", "tool_calls", "expiries", "warnings", "model_calls",
             "runs")


def _mp_scalar_end(b, i):
    """Where the msgpack integer or string at b[i] ends."""
    t = b[i]
    if t <= 0x7f or t >= 0xe0:
        return i + 1
    if 0xa0 <= t <= 0xbf:
        return i + 1 + (t & 0x1f)
    width = {0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}
    if t in width:
        return i + 1 + width[t]
    lens = {0xd9: 1, 0xda: 2, 0xdb: 4}
    n = int.from_bytes(b[i + 1:i + 1 + lens[t]], "big")
    return i + 1 + lens[t] + n


def lmdb_dump(data):
    """Every named database of an LMDB store but LMDB_SKIP, key -> value (hex), with the writer lease of
    each conversation record (its 5th field) zeroed."""
    out = subprocess.run(["mdb_dump", "-a", data], capture_output=True, text=True, check=True).stdout
    dump = {}
    for part in out.split("VERSION=3\n")[1:]:
        head, body = part.split("HEADER=END\n", 1)
        name = next(x.split("=", 1)[1] for x in head.splitlines() if x.startswith("database="))
        if name in LMDB_SKIP:
            continue
        lines = body.split("DATA=END")[0].splitlines()
        rows = dict(zip((k.strip() for k in lines[0::2]), (v.strip() for v in lines[1::2])))
        if name == "convs":
            for k, v in rows.items():
                b = bytes.fromhex(v)
                assert b[0] == 0x9b, v  # an array of 11
                i = 1
                for _ in range(4):
                    i = _mp_scalar_end(b, i)
                rows[k] = (b[:i] + b"\x00" + b[_mp_scalar_end(b, i):]).hex()
        dump[name] = rows
    return dump


def pg_dump(target):
    """Every row of every table of a PostgreSQL store, every column but PG_SKIP_COLS, in a fixed order."""
    db = target.rsplit("dbname=", 1)[1]
    dump = {}
    for t in PG_TABLES:
        rows = [json.loads(x) for x in pg_sql(f"SELECT row_to_json(r)::text FROM {t} r", db).splitlines()]
        for r in rows:
            for c in PG_SKIP_COLS.get(t, ()):
                del r[c]
        dump[t] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))
    return dump


def make_full_store(a):
    """Conversations created in id order (so a fresh LMDB store numbers them alike), holding every kind of
    record: several summaries (export carries the superseded ones too), runs, turns, a pending call with its expiry and
    warning, a settled call, audit rows, metadata, an ended conversation, scheduled wakeups (once and cron)."""
    a.write_config(FULL_CONFIG)
    a.start()
    s = summarised(a, "a-sum", ["approve"])
    a.send(s, "m3")
    wait_for(lambda: len(a.events(s)) >= 8, 10, "the echo reply")
    a.ok({"op": "compact", "conversation": s}, timeout=30)
    w, d = approvals(a, "b-wait", "c-done")
    a.ok({"op": "schedule", "conversation": d, "text": "later", "after": 86400000})
    a.ok({"op": "schedule", "conversation": d, "text": "daily", "cron": "0 9 * * *"})
    e = ended(a, "d-end")
    stop_at_rest(a, (s, w, d, e))


def test_every_table_and_field_survives_lmdb_to_postgresql_and_back():
    with Agentd(start=False, lmdb=True) as a:
        make_full_store(a)
        src = lmdb_dump(a.data_dir)
        e1, e2, e3 = (os.path.join(a.dir, f"f{i}.jsonl") for i in (1, 2, 3))
        assert run("export", "--data", a.data_dir, "--output", e1)[0] == 0
        lines = [json.loads(x) for x in body(e1)]
        sums = [(x["to_seq"], x["version"]) for x in lines if x.get("kind") == "summary"]
        assert len(sums) >= 2 and [v for _, v in sums] == list(range(1, len(sums) + 1)), sums
        assert any(x.get("kind") == "run" for x in lines), lines
        assert [x["warn_at"] > 0 for x in lines if x.get("kind") == "tool_call" and x["status"] == "pending"] == \
            [True], lines
        assert all(x["turns"] > 0 for x in lines if x.get("kind") == "conv"), lines
        assert sorted(x["cron"] or "" for x in lines if x.get("kind") == "schedule") == ["", "0 9 * * *"], lines
        # LMDB -> PostgreSQL: the tables hold every record.
        pg1 = pg_target(os.path.join(a.dir, "pg1"))
        rc, out, err = run("import", "--store", pg1, "--input", e1)
        assert rc == 0, (rc, out, err)
        d1 = pg_dump(pg1)
        assert len(d1["runs"]) == len([x for x in lines if x.get("kind") == "run"]) and d1["warnings"], \
            {t: len(rows) for t, rows in d1.items()}
        assert sorted((r["to_seq"], r["version"]) for r in d1["summaries"]) == sorted(sums), d1["summaries"]
        assert {r["id"]: r["turns"] for r in d1["convs"]} == \
            {x["id"]: x["turns"] for x in lines if x.get("kind") == "conv"}
        # -> LMDB: every database of the new store, byte for byte, is the source's.
        assert run("export", "--store", pg1, "--output", e2)[0] == 0
        back = os.path.join(a.dir, "back")
        assert run("import", "--data", back, "--input", e2)[0] == 0
        got = lmdb_dump(back)
        assert set(got) == set(src), (set(got), set(src))
        for name in src:
            assert got[name] == src[name], (name, src[name], got[name])
        # -> PostgreSQL again: every row and column as in the first.
        assert run("export", "--data", back, "--output", e3)[0] == 0
        assert body(e3) == body(e2) == body(e1)
        pg2 = pg_target(os.path.join(a.dir, "pg2"))
        assert run("import", "--store", pg2, "--input", e3)[0] == 0
        assert pg_dump(pg2) == d1
        for target in (pg1, pg2):
            rc, out, err = run("check", "--store", target)
            assert rc == 0 and "consistent" in out, (rc, out, err)
        rc, out, err = run("check", "--data", back)
        assert rc == 0 and "consistent" in out, (rc, out, err)


def test_a_version_1_stream_still_imports():
    """A stream of the first format (no runs, no turns, no warn_at, the latest summary only) imports: what
    it lacks is absent, the rest as before."""
    with Agentd(start=False, lmdb=True) as a:
        make_full_store(a)
        e2 = os.path.join(a.dir, "v2.jsonl")
        assert run("export", "--data", a.data_dir, "--output", e2)[0] == 0
        with open(e2) as f:
            v2 = [json.loads(x) for x in f.read().splitlines()]
        v1, latest = [], {}
        for x in v2:
            if x.get("kind") == "summary":
                latest[x["conv"]] = x
        for x in v2:
            x = dict(x)
            if "agentd_export" in x:
                x["agentd_export"] = 1
            elif "end" in x:
                del x["end"]["runs"]
                del x["end"]["schedules"]
                x["end"]["summaries"] = len(latest)
            elif x["kind"] in ("run", "schedule") or (x["kind"] == "summary" and latest[x["conv"]] is not x and
                                        latest[x["conv"]] != x):
                continue
            elif x["kind"] == "conv":
                del x["turns"]
            elif x["kind"] == "tool_call":
                del x["warn_at"]
            v1.append(x)
        e1 = os.path.join(a.dir, "v1.jsonl")
        with open(e1, "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in v1))
        target = pg_target(os.path.join(a.dir, "old"))
        rc, out, err = run("import", "--store", target, "--input", e1)
        assert rc == 0, (rc, out, err)
        d = pg_dump(target)
        assert not d["runs"] and not d["warnings"] and all(r["turns"] == 0 for r in d["convs"]), d
        assert [(r["conv"], r["version"]) for r in d["summaries"]] == \
            [(c, x["version"]) for c, x in sorted(latest.items())], d["summaries"]
        assert len(d["events"]) == sum(1 for x in v2 if x.get("kind") == "event") and len(d["expiries"]) == 1
        # The v2 fields are required in a v2 stream: one missing is refused, naming its line.
        bad = [dict(x) for x in v2]
        i = next(i for i, x in enumerate(bad) if x.get("kind") == "conv")
        del bad[i]["turns"]
        p = os.path.join(a.dir, "bad.jsonl")
        with open(p, "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in bad))
        rc, out, err = run("import", "--store", pg_target(os.path.join(a.dir, "bad")), "--input", p)
        assert rc == 1 and f"line {i + 1}: a conv record with a missing or bad field" in err, (rc, err)


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
        newer["agentd_export"] = 4
        cases = [
            ("truncated", lines[:-2], "ends without its end line"),
            ("garbled", lines[:ev] + ["{not json"] + lines[ev + 1:], f"line {ev + 1}: not a JSON object"),
            ("base64", lines[:ev] + [json.dumps(bad_b64)] + lines[ev + 1:], f"line {ev + 1}: a event record"),
            ("newer", [json.dumps(newer)] + lines[1:], "export format version 4; this agentd reads versions 1 to 3"),
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
