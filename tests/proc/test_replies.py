"""What one reply may cost: an `events` reply stops at max_reply_bytes and says where to go on
(next_after; with a limit, next_before), so a conversation of 1 MiB events is read whole, each event once,
in pages under the cap; a long-poll obeys the cap too; and agentd's memory while 8 clients read such a log
at once stays near the documented bound (docs/operations.md)."""
import json
import threading

import harness
from harness import Agentd, wait_for

MIB = 1 << 20
CAP = 3 * MIB
SLACK = 256  # the reply's own fields around its events: id, ok, last_seq, next_after

CONFIG = f"""
    [agentd]
    max_line = 4m
    max_reply_bytes = {CAP}
    """


def big_log(a, n=8):
    """A conversation of n sends of 1 MiB each, answered by the echo model (its answers 1 MiB too)."""
    c = a.create()
    for i in range(n):
        a.ok({"op": "send", "conversation": c, "content": chr(ord("a") + i) * MIB}, timeout=30)
    wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 60, "idle")
    last = a.ok({"op": "get", "conversation": c})["conversation"]["last_seq"]
    return c, last


def read_line(conn, req):
    conn.send(req)
    line = conn.recv_line(60)
    return line, json.loads(line)


def page_all(conn, c, **fields):
    """Follow next_after from 0 to the end; returns (seqs, the largest reply line of several events, pages)."""
    seqs, biggest, pages, after = [], 0, 0, 0
    while True:
        line, r = read_line(conn, {"op": "events", "conversation": c, "after": after, **fields})
        assert r["ok"], r
        # under the cap, or one event alone that is larger (an echo of several sends)
        assert len(line) <= CAP + SLACK or len(r["events"]) == 1, (len(line), len(r["events"]))
        if len(r["events"]) > 1:
            biggest = max(biggest, len(line))
        pages += 1
        seqs += [e["seq"] for e in r["events"]]
        if "next_after" not in r:
            return seqs, biggest, pages
        assert r["events"], r.get("next_after")  # every page makes progress
        assert r["next_after"] == r["events"][-1]["seq"], (r["next_after"], r["events"][-1]["seq"])
        after = r["next_after"]


def test_events_reply_stops_at_the_byte_cap_and_pages_on():
    with Agentd(config=CONFIG) as a:
        c, last = big_log(a)
        assert last >= 9, last
        with a.conn(60) as conn:
            line, r = read_line(conn, {"op": "events", "conversation": c})
            assert (len(line) <= CAP + SLACK or len(r["events"]) == 1) and "next_after" in r, \
                (len(line), r.get("next_after"))
            # the whole log, page by page: every event exactly once, in order, each page under the cap
            seqs, biggest, pages = page_all(conn, c)
            assert seqs == list(range(1, last + 1)), seqs
            assert 0 < biggest <= CAP + SLACK and pages >= 3, (biggest, pages)
            # a long-poll gets the same capped page at once
            line, r = read_line(conn, {"op": "events", "conversation": c, "wait_ms": 5000})
            assert len(line) <= CAP + SLACK or len(r["events"]) == 1, len(line)
            assert r["next_after"] == r["events"][-1]["seq"], r["next_after"]
            # with a limit the newest stay: next_before says where the older ones are
            line, r = read_line(conn, {"op": "events", "conversation": c, "limit": 10})
            got = [e["seq"] for e in r["events"]]
            assert len(line) <= CAP + SLACK or len(got) == 1, len(line)
            assert got == list(range(last - len(got) + 1, last + 1)), got
            assert len(got) < 10 and r["next_before"] == got[0] and "next_after" not in r, (got, r.get("next_before"))
            older = got
            while "next_before" in r:
                want = 10 - len(older)
                if want <= 0:
                    break
                line, r = read_line(conn, {"op": "events", "conversation": c, "limit": want,
                                           "before": r["next_before"]})
                older = [e["seq"] for e in r["events"]] + older
            # the ten newest, or the whole log when the echo answered several sends at once
            assert older == list(range(max(1, last - 9), last + 1)), older


def test_one_event_over_the_cap_still_comes_alone():
    with Agentd(config="[agentd]\nmax_line = 4m\nmax_reply_bytes = 1k\n") as b:
            c2 = b.create()
            b.ok({"op": "send", "conversation": c2, "content": "y" * 4096, "event_id": "big"})
            r = b.ok({"op": "events", "conversation": c2, "limit": 1, "type": "user_msg"})
            assert [e["event_id"] for e in r["events"]] == ["big"] and "next_before" not in r, r
            r = b.ok({"op": "events", "conversation": c2, "before": 2})
            assert [e["seq"] for e in r["events"]] == [1] and "next_after" not in r, r


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


def test_memory_while_eight_clients_read_a_log_of_1_mib_events():
    with Agentd(config=CONFIG) as a:
        c, last = big_log(a)
        before = vm_kib(a.pid, "VmRSS")
        peak = [before]
        done = threading.Event()
        results = [None] * 8

        def reader(i):
            with a.conn(120) as conn:
                results[i] = page_all(conn, c)[0]

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], vm_kib(a.pid, "VmRSS"))
                done.wait(0.005)

        s = threading.Thread(target=sample)
        s.start()
        ts = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        done.set()
        s.join()
        after = vm_kib(a.pid, "VmRSS")
        for seqs in results:
            assert seqs == list(range(1, last + 1)), seqs
        grew = peak[0] - before
        print(f"agentd VmRSS: {before} KiB before, {peak[0]} KiB at the peak, {after} KiB after; "
              f"grew {grew} KiB for 8 clients (max_reply_bytes {CAP // 1024} KiB)")
        # The figure is printed, not asserted: memory is a benchmark's target, and a sanitizer's shadow
        # memory and quarantine (or memcheck's) make an instrumented agentd grow several times as much.


harness.main(globals())
