"""Scheduled wakeups (docs/protocol.md, schedule) with the real agentd, workers and agentctl: at, after and cron
wakes fire as `scheduled` events the echo model answers; listed and cancelled; every bad input refused with
nothing written; fired once across kill -9 of agentd and restarts, a wake missed while agentd was down fired
at start, once, marked late (a cron one once, moved to its next minute); on PostgreSQL two nodes firing the same
schedules fire each once. Lateness (the event's inserted_at minus the due time, as expiries' lateness is
measured) over 20 wakes is printed."""
import json
import os
import statistics
import time

import harness
from harness import Agentd, scaled, wait_for
from nodesutil import Node, new_database


def ms(secs):
    return int(scaled(secs) * 1000)


def now_ms():
    return int(time.time() * 1000)


def scheduled(a, c):
    return [e for e in a.events(c) if e["type"] == "scheduled"]


def answered(a, c, text):
    evs = a.events(c)
    return evs and evs[-1]["type"] == "assistant_msg" and evs[-1]["content"]["text"] == f"echo: {text}"


def new_conv(a):
    return a.ok({"op": "create", "settings": {"model": "echo"}})["conversation"]


def metric(a, name):
    for ln in a.ok({"op": "metrics"})["text"].splitlines():
        if ln.startswith(name + " "):
            return int(float(ln.split()[1]))
    raise AssertionError(f"no {name} in metrics")


def test_at_after_and_cron_fire_and_are_listed_and_cancelled():
    with Agentd() as a:
        c = new_conv(a)
        r = a.ok({"op": "schedule", "conversation": c, "text": "after one", "after": ms(0.3)})
        sid = r["schedule"]
        assert r["conversation"] == c and r["cron"] is None and r["due"] > now_ms() - 1000, r
        at = now_ms() + ms(0.6)
        ra = a.ok({"op": "schedule", "conversation": c, "text": "at one", "at": at})
        assert ra["due"] == at, ra
        # A cron schedule whose first time is given by at: it fires then, and moves to the spec's next minute.
        cat = now_ms() + ms(0.9)
        rc = a.ok({"op": "schedule", "conversation": c, "text": "cron one", "at": cat, "cron": "* * * * *"})
        assert rc["due"] == cat and rc["cron"] == "* * * * *", rc
        # One far off, listed, then cancelled with agentctl.
        _, out, _ = a.ctl("-q", "schedule", c, "far off", "--after", "86400000")
        far = out.strip()
        assert far.startswith("s-"), out
        rows = a.ok({"op": "schedules", "conversation": c})["schedules"]
        assert [x["schedule"] for x in rows] == [sid, ra["schedule"], rc["schedule"], far], rows
        assert rows[3]["text"] == "far off" and rows[2]["cron"] == "* * * * *", rows
        _, out, _ = a.ctl("schedules")
        assert out.splitlines()[0].split() == ["ID", "CONVERSATION", "DUE", "CRON", "TEXT"], out
        assert far in out and "far off" in out, out
        a.ctl("unschedule", far)
        rc2, _, err = a.ctl("unschedule", far, check=False)
        assert rc2 == 1 and f"schedule '{far}' not found" in err, err

        wait_for(lambda: len(scheduled(a, c)) == 3 and answered(a, c, "cron one"), 20, "the three wakes answered")
        evs = scheduled(a, c)
        assert [e["content"]["text"] for e in evs] == ["after one", "at one", "cron one"], evs
        assert [e["content"]["schedule"] for e in evs] == [sid, ra["schedule"], rc["schedule"]], evs
        assert all(e["content"]["late"] is False for e in evs), evs
        assert evs[2]["content"]["cron"] == "* * * * *" and "cron" not in evs[0]["content"], evs
        for e, due in zip(evs, (r["due"], at, cat)):
            assert e["content"]["due"] == due and e["inserted_at"] >= due, (e, due)
        # Every scheduled event is answered by a turn (the echo model answers its text).
        texts = [e["content"]["text"] for e in a.events(c) if e["type"] == "assistant_msg"]
        assert texts == ["echo: after one", "echo: at one", "echo: cron one"], a.events(c)
        # Once ones are gone; the cron one moved to the first whole minute after it fired.
        rows = a.ok({"op": "schedules"})["schedules"]
        assert [x["schedule"] for x in rows] == [rc["schedule"]], rows
        fired = evs[2]["inserted_at"]
        assert rows[0]["due"] % 60000 == 0 and fired < rows[0]["due"] <= fired + 60000, (rows, fired)
        a.ok({"op": "unschedule", "schedule": rc["schedule"]})
        assert a.ok({"op": "schedules"})["schedules"] == []
        assert metric(a, "agentd_scheduled_wakeups_fired_total") == 3
        assert metric(a, "agentd_scheduled_wakeups_late_total") == 0
        assert metric(a, "agentd_scheduled_wakeup_lateness_seconds_count") == 3


def test_bad_inputs_are_refused_and_nothing_is_written():
    with Agentd() as a:
        c = new_conv(a)
        ended = new_conv(a)
        a.ok({"op": "update", "conversation": ended, "status": "ended"})
        base = {"op": "schedule", "conversation": c, "text": "x"}
        cases = [
            ({**base, "conversation": "nope", "after": 10}, "not_found", "conversation 'nope' not found"),
            (dict(base), "bad_request", "missing field 'at' (ms since the epoch), 'after' (ms from now) or 'cron'"),
            ({**base, "at": now_ms() + 60000, "after": 10}, "bad_request", "give one of 'at' and 'after', not both"),
            ({**base, "at": 1000}, "bad_request", "'at' 1000 is not in the future"),
            ({**base, "cron": "61 * * * *"}, "bad_request", "'cron' is not a cron expression: minute"),
            ({**base, "cron": "* * *"}, "bad_request", "'cron' is not a cron expression"),
            ({**base, "cron": "0 0 30 2 *"}, "bad_request", "never matches"),
            ({**base, "text": "y" * 65537, "after": 10}, "bad_request", "'text' is 65537 bytes: at most 65536"),
            ({**base, "text": "", "after": 10}, "bad_request", "'text' must be a non-empty string"),
            ({"op": "schedule", "conversation": c, "after": 10}, "bad_request", "missing field 'text'"),
            ({**base, "after": -1}, "bad_request", "'after' must be an integer"),
            ({**base, "after": 10, "every": 5}, "bad_request", "every"),
            ({**base, "conversation": ended, "after": 10}, "conflict", f"conversation {ended} is ended"),
            ({"op": "unschedule"}, "bad_request", "missing field 'schedule'"),
            ({"op": "unschedule", "schedule": "s-none"}, "not_found", "schedule 's-none' not found"),
            ({"op": "schedules", "conversation": "nope"}, "not_found", "conversation 'nope' not found"),
        ]
        for req, code, msg in cases:
            r = a.request(req)
            assert r.get("ok") is False and r["error"] == code and msg in r["message"], (req if len(str(req)) < 300
                                                                                        else code, r)
        rc, _, err = a.ctl("schedule", c, "x", check=False)
        assert rc == 2, err  # a usage error: one of --at, --after, --cron is needed
        rc, _, err = a.ctl("schedule", c, "x", "--cron", "bad", check=False)
        assert rc == 1 and "'cron' is not a cron expression" in err, err
        assert a.ok({"op": "schedules"})["schedules"] == []
        assert scheduled(a, c) == [] and a.events(ended) == []


def test_fired_once_across_kill9_and_missed_while_down_fires_late():
    with Agentd() as a:
        c = new_conv(a)
        a.ok({"op": "schedule", "conversation": c, "text": "first", "after": ms(0.2)})
        wait_for(lambda: answered(a, c, "first"), 20, "the first wake answered")
        # Missed while down: a once one and a cron one (its first time by at), due while agentd is dead.
        due = now_ms() + ms(0.8)
        once = a.ok({"op": "schedule", "conversation": c, "text": "missed", "at": due})["schedule"]
        cron = a.ok({"op": "schedule", "conversation": c, "text": "missed cron", "at": due, "cron": "*/5 * * * *"})
        later = a.ok({"op": "schedule", "conversation": c, "text": "later", "after": ms(4)})
        a.kill()
        assert now_ms() < due, "the wakes came due before agentd was killed: test too slow"
        wait_for(lambda: now_ms() > due + 200, 10, "the due time to pass")
        a.start()
        wait_for(lambda: len(scheduled(a, c)) >= 3, 20, "the missed wakes at start")
        assert "fired 2 scheduled wakeup(s) due while agentd was down" in a.log(), a.log_tail()
        evs = scheduled(a, c)
        evs[1:] = sorted(evs[1:], key=lambda e: e["content"]["text"])  # the same due time: in schedule id order
        assert [e["content"]["text"] for e in evs] == ["first", "missed", "missed cron"], evs
        assert [e["content"]["late"] for e in evs] == [False, True, True], evs
        assert evs[1]["content"]["schedule"] == once and evs[2]["inserted_at"] - due >= 200, evs
        # The cron one fired once for its missed time and moved on, past now.
        rows = {x["schedule"]: x for x in a.ok({"op": "schedules"})["schedules"]}
        assert set(rows) == {cron["schedule"], later["schedule"]}, rows
        assert rows[cron["schedule"]]["due"] % 300000 == 0 and rows[cron["schedule"]]["due"] > now_ms(), rows
        assert metric(a, "agentd_scheduled_wakeups_late_total") == 2
        # The later one fires on time after the restart (not late); kill -9 again right after it fired.
        wait_for(lambda: len(scheduled(a, c)) == 4, 20, "the later wake")
        a.kill()
        a.start()
        wait_for(lambda: answered(a, c, "later"), 20, "the later wake answered")
        evs = scheduled(a, c)
        assert sorted(e["content"]["text"] for e in evs) == ["first", "later", "missed", "missed cron"], evs
        assert evs[3]["content"]["late"] is False, evs
        a.restart()
        assert len(scheduled(a, c)) == 4 and "scheduled wakeup(s) due while agentd was down" not in a.log().split(
            "--- harness: starting")[-1], a.log_tail()
        assert [x["schedule"] for x in a.ok({"op": "schedules"})["schedules"]] == [cron["schedule"]]
        # agentd check reads the schedule rows too: the cron one left is consistent.
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0 and "consistent" in p.stdout, (p.stdout, p.stderr)
        # export carries it (a schedule line), import writes it back: the copy exports the same lines.
        e1, e2, back = (os.path.join(a.dir, n) for n in ("e1.jsonl", "e2.jsonl", "back"))
        assert harness.run_agentd("export", *a.check_args(), "--output", e1).returncode == 0
        with open(e1) as f:
            lines = f.read().splitlines()
        rows = [json.loads(x) for x in lines if '"kind":"schedule"' in x]
        assert [(x["id"], x["cron"]) for x in rows] == [(cron["schedule"], "*/5 * * * *")], rows
        assert json.loads(lines[0])["agentd_export"] == 3 and json.loads(lines[-1])["end"]["schedules"] == 1
        assert harness.run_agentd("import", "--data", back, "--input", e1, capture_output=True).returncode == 0
        assert harness.run_agentd("export", "--data", back, "--output", e2).returncode == 0
        with open(e2) as f:
            assert f.read().splitlines()[1:] == lines[1:]


def test_lateness_over_twenty_wakes():
    with Agentd() as a:
        convs = [new_conv(a) for _ in range(4)]
        dues = []
        for i in range(20):
            c = convs[i % 4]
            r = a.ok({"op": "schedule", "conversation": c, "text": f"w{i}", "after": ms(0.3) + 60 * i})
            dues.append((c, r["schedule"], r["due"]))
        wait_for(lambda: sum(len(scheduled(a, c)) for c in convs) == 20, 30, "the 20 wakes")
        late = []
        for c in convs:
            for e in scheduled(a, c):
                late.append(e["inserted_at"] - e["content"]["due"])
                assert e["content"]["late"] is False, e
        assert len(late) == 20 and min(late) >= 0, late
        assert sorted(e["content"]["schedule"] for c in convs for e in scheduled(a, c)) == sorted(s for _, s, _ in dues)
        print(f"scheduled wakeup lateness over 20 wakes: median {statistics.median(late):.0f} ms, "
              f"max {max(late)} ms", flush=True)
        wait_for(lambda: all(a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle"
                             for c in convs), 20, "every turn answered")


def test_two_nodes_fire_each_wake_once():
    if not harness.PG:
        print("n/a  two nodes need PostgreSQL (AGENTD_TEST_STORE=pg)", flush=True)
        return
    key = new_database()
    nodes = [Node(key, f"n{i}") for i in range(2)]
    try:
        wait_for(lambda: sum(n["live"] for n in nodes[0].ok({"op": "nodes"})["nodes"]) == 2, 10, "two live nodes")
        c = nodes[0].ok({"op": "create", "settings": {"model": "echo"}})["conversation"]
        ids = [nodes[i % 2].ok({"op": "schedule", "conversation": c, "text": f"n{i}", "after": ms(0.5) + 50 * i})
               ["schedule"] for i in range(10)]
        wait_for(lambda: len(scheduled(nodes[0], c)) == 10, 30, "the 10 wakes")
        wait_for(lambda: answered(nodes[1], c, "n9"), 30, "the last wake answered")
        wait_for(lambda: nodes[1].ok({"op": "schedules"})["schedules"] == [], 10, "every row gone")
        evs = scheduled(nodes[1], c)
        assert sorted(e["content"]["schedule"] for e in evs) == sorted(ids), evs
        fired = [metric(n, "agentd_scheduled_wakeups_fired_total") for n in nodes]
        assert sum(fired) == 10, fired
        print(f"two nodes fired {fired[0]} and {fired[1]} of 10 wakes", flush=True)
        time.sleep(scaled(1.5))  # both nodes' polls come round again: nothing fires twice
        assert len(scheduled(nodes[0], c)) == 10
    finally:
        for n in nodes:
            n.close()


harness.main(globals())
