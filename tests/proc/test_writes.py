"""send's optimistic concurrency (expected_seq) and atomic batches (events), through the real socket and
agentctl: a refused send writes nothing, a retry after a lost reply gets the original seqs, and a batch that
fails inside a group commit leaves the other writes of that commit alone."""
import json
import os
import time

import harness
from harness import Agentd, scaled, wait_for


def gated(a):
    """A conversation whose model never answers: its log holds only what the test sends."""
    a.gated_model()
    a.start()
    return a.create(model="gated")


def last_seq(a, c):
    return a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"]


def texts(a, c):
    return [e["content"].get("text") for e in a.events(c)]


def test_expected_seq_conflict_writes_nothing():
    with Agentd(start=False) as a:
        c = gated(a)
        r = a.ok({"op": "send", "conversation": c, "content": "one", "expected_seq": 0})
        assert r["seq"] == 1, r
        r = a.request({"op": "send", "conversation": c, "content": "stale", "expected_seq": 0, "id": 7})
        assert r["ok"] is False and r["error"] == "conflict" and r["last_seq"] == 1 and r["id"] == 7, r
        assert "at seq 1, not the expected_seq 0" in r["message"], r
        assert texts(a, c) == ["one"]
        assert a.ok({"op": "send", "conversation": c, "content": "two", "expected_seq": 1})["seq"] == 2
        r = a.request({"op": "send", "conversation": c, "content": "ahead", "expected_seq": 9})
        assert r["error"] == "conflict" and r["last_seq"] == 2, r
        assert texts(a, c) == ["one", "two"]


def test_expected_seq_missing_or_ended_conversation():
    with Agentd(start=False) as a:
        c = gated(a)
        # send never creates a conversation: expected_seq 0 means "the log is empty", not "create it"
        r = a.request({"op": "send", "conversation": "nope", "content": "x", "expected_seq": 0})
        assert r["error"] == "not_found" and "last_seq" not in r, r
        a.ok({"op": "update", "conversation": c, "status": "ended"})
        r = a.request({"op": "send", "conversation": c, "content": "x", "expected_seq": 0})
        assert r["error"] == "conflict" and "ended" in r["message"] and "last_seq" not in r, r
        assert a.events(c) == []


def test_idempotency_wins_over_expected_seq():
    with Agentd(start=False) as a:
        c = gated(a)
        req = {"op": "send", "conversation": c, "content": "once", "event_id": "k1", "expected_seq": 0}
        assert a.ok(req)["seq"] == 1
        a.send(c, "someone else")
        # the reply was lost: the retry is answered with the original seq although last_seq moved on
        r = a.ok(req)
        assert r["seq"] == 1 and r["duplicate"] is True, r
        # a new event_id with the same stale expected_seq is a conflict
        r = a.request({**req, "event_id": "k2"})
        assert r["error"] == "conflict" and r["last_seq"] == 2, r
        assert texts(a, c) == ["once", "someone else"]


def test_batch_appends_in_order():
    with Agentd(start=False) as a:
        c = gated(a)
        a.send(c, "first")
        r = a.ok({"op": "send", "conversation": c, "expected_seq": 1,
                  "events": [{"content": "a", "event_id": "b-1"}, {"content": {"text": "b", "k": 1}},
                             {"content": "c", "event_id": "b-3"}]})
        assert r["seqs"] == [2, 3, 4] and "duplicates" not in r and "seq" not in r, r
        evs = a.events(c)
        assert [e["seq"] for e in evs] == [1, 2, 3, 4]
        assert [e["type"] for e in evs] == ["user_msg"] * 4
        assert evs[2]["content"] == {"text": "b", "k": 1} and evs[1].get("event_id") == "b-1", evs
        assert a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "active"


def test_batch_conflict_writes_nothing():
    with Agentd(start=False) as a:
        c = gated(a)
        a.send(c, "first")
        r = a.request({"op": "send", "conversation": c, "expected_seq": 0,
                       "events": [{"content": "a", "event_id": "x1"}, {"content": "b", "event_id": "x2"}]})
        assert r["error"] == "conflict" and r["last_seq"] == 1, r
        assert texts(a, c) == ["first"]
        # nothing of it was recorded: its event_ids are still free
        r = a.ok({"op": "send", "conversation": c, "events": [{"content": "a", "event_id": "x1"}]})
        assert r["seqs"] == [2] and "duplicates" not in r, r


def test_batch_retry_after_lost_reply():
    """Idempotency in a batch: each event_id is a key as in a single send. A batch whose every event has
    an event_id already in the log is a replay: it writes nothing, expected_seq is not checked, and the
    reply gives the original seqs with every index in `duplicates`."""
    with Agentd(start=False) as a:
        c = gated(a)
        req = {"op": "send", "conversation": c, "expected_seq": 0,
               "events": [{"content": "a", "event_id": "r1"}, {"content": "b", "event_id": "r2"},
                          {"content": "c", "event_id": "r3"}]}
        assert a.ok(req)["seqs"] == [1, 2, 3]
        a.send(c, "later")
        r = a.ok(req)
        assert r["seqs"] == [1, 2, 3] and r["duplicates"] == [0, 1, 2], r
        assert texts(a, c) == ["a", "b", "c", "later"]
        # an event without event_id cannot be recognised: with expected_seq the replay is a conflict,
        # so nothing is appended twice
        r = a.request({**req, "events": req["events"] + [{"content": "d"}]})
        assert r["error"] == "conflict" and r["last_seq"] == 4, r
        # without expected_seq, known event_ids are duplicates and the rest are appended
        r = a.ok({"op": "send", "conversation": c,
                  "events": [{"content": "a", "event_id": "r1"}, {"content": "e", "event_id": "r5"}]})
        assert r["seqs"] == [1, 5] and r["duplicates"] == [0], r
        assert texts(a, c) == ["a", "b", "c", "later", "e"]


def test_bad_inputs_are_refused_and_write_nothing():
    with Agentd(start=False) as a:
        a.gated_model()
        a.write_config(open(a.config_path).read() + "[agentd]\nbatch_max_events = 3\nbatch_max_bytes = 2k\n")
        a.start()
        c = a.create(model="gated")
        a.send(c, "first")
        ok_ev = {"content": "fine", "event_id": "fine"}
        cases = [
            ({"expected_seq": "1", "content": "x"}, "'expected_seq' must be an integer from 0 to"),
            ({"expected_seq": -1, "content": "x"}, "'expected_seq' must be an integer from 0 to"),
            ({"expected_seq": 1.5, "content": "x"}, "'expected_seq' must be an integer from 0 to"),
            ({"expected_seq": None, "content": "x"}, "'expected_seq' must be an integer from 0 to"),
            ({"events": []}, "'events' is empty"),
            ({"events": {"content": "x"}}, "'events' must be an array of objects"),
            ({"events": [ok_ev, "x"]}, "'events[1]' must be an object"),
            ({"events": [ok_ev, {"content": 5}]}, "'events[1].content' must be a string or an object"),
            ({"events": [ok_ev, {"event_id": "y"}]}, "missing field 'events[1].content'"),
            ({"events": [ok_ev, {"content": "y", "event_id": ""}]}, "'events[1].event_id' must be a string of 1-200"),
            ({"events": [ok_ev, {"content": "y", "event_id": 7}]}, "'events[1].event_id' must be a string of 1-200"),
            ({"events": [ok_ev, {"content": "y", "seq": 1}]}, "unknown field 'events[1].seq'"),
            ({"events": [ok_ev, {"content": "y", "event_id": "fine"}]},
             "'events[1].event_id' repeats 'events[0].event_id'"),
            ({"events": [ok_ev], "content": "x"}, "'events' replaces 'content' and 'event_id'"),
            ({"events": [ok_ev], "event_id": "z"}, "'events' replaces 'content' and 'event_id'"),
            ({"events": [{"content": str(i)} for i in range(4)]}, "holds 4 events: at most 3 in one batch (batch_max_events)"),
            ({"events": [{"content": "x" * 1500}, {"content": "y" * 1500}]},
             "at most 2048 in one batch (batch_max_bytes)"),
            ({"events": [ok_ev, {"content": {"a": json.loads("[" * 70 + "]" * 70)}}]},
             "'events[1].content' nests more than 65 levels"),
        ]
        for fields, want in cases:
            # also for a conversation that does not exist: the request is checked whole first
            for conv in (c, "missing"):
                r = a.request({"op": "send", "conversation": conv, **fields})
                assert r["ok"] is False and r["error"] == "bad_request" and want in r["message"], (fields, r)
        assert texts(a, c) == ["first"]
        # the limits hold exactly: 3 events of 2k in total pass
        r = a.ok({"op": "send", "conversation": c, "events": [{"content": "x" * 600} for _ in range(3)]})
        assert r["seqs"] == [2, 3, 4], r


def test_bad_batch_settings_are_startup_errors():
    d = harness._mkdtemp()
    try:
        for line, want in (("batch_max_events = 0", "batch_max_events"), ("batch_max_events = 10001", "batch_max_events"),
                           ("batch_max_bytes = 1000", "batch_max_bytes"), ("batch_max_bytes = 2x", "batch_max_bytes")):
            cfg = os.path.join(d, "a.ini")
            with open(cfg, "w") as f:
                f.write(f"[agentd]\n{line}\n")
            p = harness.run_agentd("--config", cfg, "--data", os.path.join(d, "data"), capture_output=True,
                                   text=True, cwd=d, timeout=scaled(5))
            assert p.returncode == 2 and f"for '{want}' in [agentd]" in p.stderr, (line, p)
    finally:
        harness.shutil.rmtree(d, ignore_errors=True)


def group_commits(a):
    text = a.ok({"op": "metrics"})["text"]
    return int(next(l.split()[1] for l in text.splitlines() if l.startswith("agentd_group_commits_total ")))


def test_failing_batch_leaves_its_group_commit_alone():
    """Writes pipelined on one connection are read in one iteration and commit in one transaction; a batch
    refused inside it (a conflict) writes nothing and the writes around it commit."""
    with Agentd(start=False) as a:
        c1 = gated(a)
        c2 = a.create(model="gated")
        a.send(c2, "c2 first")
        before = group_commits(a)
        reqs = [
            {"op": "send", "conversation": c1, "content": "before", "id": 1},
            {"op": "send", "conversation": c2, "expected_seq": 0, "id": 2,
             "events": [{"content": "bad-1"}, {"content": "bad-2"}]},
            {"op": "send", "conversation": c2, "content": "after", "id": 3},
            {"op": "send", "conversation": c1, "expected_seq": 1, "id": 4,
             "events": [{"content": "good-1"}, {"content": "good-2"}]},
        ]
        with a.conn() as conn:
            conn.raw(b"".join(json.dumps(r).encode() + b"\n" for r in reqs))
            replies = [conn.recv() for _ in reqs]
        assert [r["id"] for r in replies] == [1, 2, 3, 4], replies
        assert replies[0]["seq"] == 1 and replies[2]["seq"] == 2 and replies[3]["seqs"] == [2, 3], replies
        assert replies[1]["error"] == "conflict" and replies[1]["last_seq"] == 1, replies
        assert texts(a, c1) == ["before", "good-1", "good-2"]
        assert texts(a, c2) == ["c2 first", "after"]
        # one transaction held them (each reply's write committed with the others)
        assert group_commits(a) - before <= 2, (before, group_commits(a))


@harness.lmdb_only("LMDB's map full to max_map_size")
def test_batch_too_large_for_the_map_fails_alone():
    """A batch that can never fit the map (at max_map_size) is refused store_full by itself: the small
    send pipelined beside it, in the same group commit, commits."""
    with Agentd(start=False) as a:
        a.gated_model()
        a.write_config(open(a.config_path).read() +
                       "[agentd]\nmap_size = 1m\nmax_map_size = 1m\nmax_line = 4m\nbatch_max_bytes = 4m\n")
        a.start()
        c = a.create(model="gated")
        big = {"op": "send", "conversation": c, "id": "big",
               "events": [{"content": "x" * (600 << 10), "event_id": f"big{i}"} for i in range(3)]}
        small = {"op": "send", "conversation": c, "content": "small", "id": "small"}
        with a.conn() as conn:
            conn.raw(json.dumps(big).encode() + b"\n" + json.dumps(small).encode() + b"\n")
            r1, r2 = conn.recv(), conn.recv()
        assert r1["id"] == "big" and r1["error"] == "store_full", r1
        assert r2["id"] == "small" and r2["ok"] is True and r2["seq"] == 1, r2
        assert texts(a, c) == ["small"]
        # nothing of the batch: its event_ids are free
        r = a.ok({"op": "send", "conversation": c, "events": [{"content": "y", "event_id": "big0"}]})
        assert r["seqs"] == [2] and "duplicates" not in r, r


def test_agentctl_expected_seq_and_batch():
    with Agentd(start=False) as a:
        c = gated(a)
        rc, out, err = a.ctl("send", c, "one", "--expected-seq", "0")
        assert out == "seq: 1\n", out
        rc, out, err = a.ctl("send", c, "late", "--expected-seq", "0", check=False)
        assert rc == 1 and out == "" and err == (
            f"agentctl: conflict: conversation {c} is at seq 1, not the expected_seq 0: nothing was written\n"), err
        rc, out, err = a.ctl("--json", "send", c, "late", "--expected-seq", "0", check=False)
        assert rc == 1 and json.loads(out)["last_seq"] == 1, out
        # a batch from stdin: strings and objects
        batch = json.dumps(["two", {"content": {"text": "three", "n": 3}, "event_id": "e3"}])
        rc, out, err = a.ctl("send", c, "--batch", "-", "--expected-seq", "1", input=batch)
        assert out == "seqs: [2,3]\n", out
        # from a file, -q: one seq a line; the replay prints the original seqs
        path = os.path.join(a.dir, "batch.json")
        with open(path, "w") as f:
            json.dump([{"content": "four", "event_id": "e4"}, {"content": "five", "event_id": "e5"}], f)
        rc, out, err = a.ctl("-q", "send", c, "--batch", path)
        assert out == "4\n5\n", out
        rc, out, err = a.ctl("send", c, "--batch", path, "--expected-seq", "1")
        assert "seqs:" in out and "[4,5]" in out and "duplicates:" in out and "[0,1]" in out, out
        # single sends keep printing seq with -q
        assert a.ctl("-q", "send", c, "six")[1] == "6\n"
        assert texts(a, c) == ["one", "two", "three", "four", "five", "six"]
        # agentd's checks reach agentctl: exit 1, the event named, nothing written
        rc, out, err = a.ctl("send", c, "--batch", "-", input='["ok", 5]', check=False)
        assert rc == 1 and "bad_request: 'events[1]' must be an object" in err, err
        rc, out, err = a.ctl("send", c, "--batch", "-", input='["ok", {"content": 5}]', check=False)
        assert rc == 1 and "bad_request: 'events[1].content' must be a string or an object" in err, err
        rc, out, err = a.ctl("send", c, "--batch", "-", input="[]", check=False)
        assert rc == 1 and "'events' is empty" in err, err
        assert len(a.events(c)) == 6


def test_agentctl_batch_usage_errors():
    with Agentd(start=False) as a:
        c = gated(a)
        bad = [
            (("send", c, "text", "--batch", "-"), "--batch replaces TEXT"),
            (("send", c, "--batch", "-", "--event-id", "x"), "each event carries its own"),
            (("send", c, "--batch", "-", "--json-content"), "each event carries its own"),
            (("send", c, "--batch", "/nonexistent/file.json"), "--batch /nonexistent/file.json: invalid JSON"),
            (("send", c, "--expected-seq", "-1", "x"), "--expected-seq: expected a non-negative integer"),
            (("send", c, "--expected-seq", "x", "x"), "--expected-seq: expected a non-negative integer"),
        ]
        for args, want in bad:
            rc, out, err = a.ctl(*args, check=False, input="[]")
            assert rc == 2 and out == "" and want in err, (args, rc, out, err)
        rc, out, err = a.ctl("send", c, "--batch", "-", check=False, input='{"content": "x"}')
        assert rc == 2 and "expected a JSON array of events" in err, err
        rc, out, err = a.ctl("send", c, "--batch", "-", check=False, input='["x"')
        assert rc == 2 and "--batch -: invalid JSON" in err, err
        assert a.events(c) == []


def test_an_ended_conversations_fsm_state_drops_calls_settled_after_the_end():
    """A call settled after the end (by resolve; an expiry takes the same path) starts no worker, so
    the rule that settles it keeps fsm_state.pending true: the call leaves it."""
    with Agentd(config="[tool.approve]\nexecutor = human\nexpires = 1h\n") as a:
        c = a.create(settings={"model": "echo", "tools": ["approve"]})
        a.send(c, '/tool approve {"amount": 5}')
        conv = wait_for(lambda: (g := a.ok({"op": "get", "conversation": c})["conversation"])["status"] == "suspended"
                        and g["fsm_state"] and g, 10, "suspended on the approval")
        pending = conv["fsm_state"]["pending"]
        assert conv["fsm_state"]["state"] == "awaiting_input" and len(pending) == 1, conv
        call_id = next(iter(pending))
        a.ok({"op": "update", "conversation": c, "status": "ended"})
        wait_for(lambda: a.worker_pid(c) is None, 10, "the worker to stop")
        r = a.ok({"op": "resolve", "tool_call_id": call_id, "result": {"approved": True}})
        g = a.ok({"op": "get", "conversation": c})["conversation"]
        assert g["status"] == "ended" and g["worker"] is None, g
        assert g["fsm_state"]["pending"] == {}, g["fsm_state"]
        assert g["fsm_state"]["state"] == "idle" and g["fsm_state"]["last_seq"] == r["seq"], g["fsm_state"]
        assert a.ok({"op": "tool_call", "tool_call_id": call_id})["tool_call"]["status"] == "resolved"


def fill_to_the_last_page(a, convs):
    """Send ever smaller messages round the conversations until even a tiny one is store_full, and still is
    after a pause: LMDB reuses the pages a commit freed only once no reader's snapshot is older than it, so
    while a worker reads (it does on each send's wake) a write the map has room for can be refused."""
    n = 0
    for size in (60000, 4000, 200, 1):
        while True:
            c = convs[n % len(convs)]
            r = a.request({"op": "send", "conversation": c, "content": "x" * size})
            n += 1
            if not r["ok"]:
                assert r["error"] == "store_full", r
                if size > 1:
                    break
                time.sleep(0.2)
                r = a.request({"op": "send", "conversation": c, "content": "x"})
                n += 1
                if not r["ok"]:
                    assert r["error"] == "store_full", r
                    break
    return n


@harness.lmdb_only("the delete reserve past a full LMDB map (PostgreSQL keeps a deleted row's bytes until VACUUM FULL: docs/operations.md)")
def test_delete_in_a_full_map_then_send_again():
    """A map full to its last page refuses every write, but a delete must still pass, so that an operator
    frees space without a restart; then sends fit again."""
    with Agentd(start=False) as a:
        a.gated_model()
        a.write_config(open(a.config_path).read() + "[agentd]\nmap_size = 1m\nmax_map_size = 1m\n")
        a.start()
        convs = [a.create(model="gated") for _ in range(3)]
        fill_to_the_last_page(a, convs)
        # full: even creating a conversation is refused
        assert a.request({"op": "create", "settings": {"model": "echo"}})["error"] == "store_full"
        rc, out, err = a.ctl("delete", convs[0])
        assert out == "deleted: true\n", (out, err)
        assert a.request({"op": "get", "conversation": convs[0]})["error"] == "not_found"
        # the room it held serves new writes
        r = a.request({"op": "send", "conversation": convs[1], "content": "y" * 20000})
        assert r["ok"] is True, r["message"]
        c = a.create(model="echo")
        a.ok({"op": "send", "conversation": c, "content": "after the delete"})
        # full again: deleting still works, every time
        fill_to_the_last_page(a, convs[1:])
        for conv in convs[1:]:
            assert a.ctl("delete", conv)[1] == "deleted: true\n"
        r = a.request({"op": "send", "conversation": c, "content": "z" * 20000})
        assert r["ok"] is True, r["message"]
        # the deletes wrote within the reserve (max_map_size / 16, at least 256 KiB) and nothing else did
        store = a.ok({"op": "status"})["store"]
        assert store["size_bytes"] <= (1 << 20) + (256 << 10), store
        assert "delete(s) run alone with the delete reserve" in a.log()
        a.stop()
        rc = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert rc.returncode == 0, rc.stdout


harness.main(globals())
