"""The durable frontier when flushes fail (supervisor/durable.c, docs/durability.md): while every flush of the
data file fails (a disk error), a write is committed but never answered and a watcher is shown nothing; the
flusher retries on its own about every 100 ms without spinning; once a flush succeeds the held reply goes out
with its seq and the watcher gets the event; the log says both.

The failure is injected with AGENTD_TEST_FLUSH_FAIL (test-only, docs/testing.md): while the file it names
exists, each of the supervisor's frontier flushes fails with EIO instead of flushing."""
import os
import re
import socket
import tempfile
import time

import harness
from harness import Agentd, wait_for


def silent(c, secs):
    """Assert that nothing arrives on Client c for secs seconds."""
    assert not c._buf, f"already received {bytes(c._buf)[:200]!r}"
    c.sock.settimeout(secs)
    try:
        data = c.sock.recv(1 << 16)
    except socket.timeout:
        return
    raise AssertionError(f"expected nothing while flushes fail, got {data[:200]!r}")


def flushes(a, name="agentd_durable_flushes_total"):
    text = a.ok({"op": "metrics"})["text"]
    return int(re.search(r"^" + name + r" (\d+)$", text, re.M).group(1))


def waits(a):
    """agentd_reply_durable_wait_seconds: (count, sum, observations over 0.5 s)."""
    text = a.ok({"op": "metrics"})["text"]
    name = "agentd_reply_durable_wait_seconds"

    def num(pattern):
        return float(re.search(r"^" + pattern + r" ([0-9.]+)$", text, re.M).group(1))

    count = num(name + "_count")
    return count, num(name + "_sum"), count - num(name + r'_bucket\{le="0.5"\}')


@harness.lmdb_only("the durable frontier flushes data.mdb; a PostgreSQL commit is durable when it returns")
def test_reply_wait_for_the_frontier_is_measured():
    with Agentd() as a:
        c = a.create()
        n0, s0, _ = waits(a)
        for i in range(3):
            assert a.ok({"op": "send", "conversation": c, "content": f"m{i}"})["seq"] >= 1
        n1, s1, _ = waits(a)
        # Each send's reply shows a lazy commit, which its own page flush does not make durable: it waits for
        # the next flush, and that wait is counted (the reads around it may wait too).
        assert n1 - n0 >= 3, (n0, n1)
        assert s1 > s0, (s0, s1)


@harness.lmdb_only("the durable frontier flushes data.mdb; a PostgreSQL commit is durable when it returns")
def test_a_lone_clients_send_is_flushed_by_the_writer_thread():
    # One client's send while no other client is free to send: the writer thread flushes right after the
    # commit, and the reply leaves without the flusher (agentd_group_commits_flushed_total). With another
    # client connected and free, the flusher makes the flush, as it may commit beside the next group.
    name = "agentd_group_commits_flushed_total"
    with Agentd() as a:
        c = a.create()

        def answered(n):
            ev = a.events(c)
            return len(ev) >= 2 * n and ev[-1]["type"] == "assistant_msg"

        f0 = flushes(a, name)
        for i in range(5):
            # each on a connection of its own, the only one; the worker's turn done before the next (a
            # worker waiting for the write gate keeps a group off the writer thread)
            assert a.send(c, f"alone {i}") == 2 * i + 1
            wait_for(lambda: answered(i + 1), 10, "the echo's answer")
        f1 = flushes(a, name)
        assert f1 - f0 >= 3, (f0, f1)
        with a.conn() as idle:  # connected, waiting on nothing: free to send
            idle.request({"op": "ping"})
            for i in range(3):
                assert a.send(c, f"beside {i}") == 2 * (5 + i) + 1
                wait_for(lambda: answered(6 + i), 10, "the echo's answer")
            assert flushes(a, name) == f1
        assert [e["content"]["text"] for e in a.events(c) if e["type"] == "user_msg"] == \
            [f"alone {i}" for i in range(5)] + [f"beside {i}" for i in range(3)]


@harness.lmdb_only("the durable frontier flushes data.mdb; a PostgreSQL commit is durable when it returns")
def test_failed_flush_holds_replies_until_one_succeeds():
    with tempfile.TemporaryDirectory() as d, \
            Agentd(env=dict(os.environ, AGENTD_TEST_FLUSH_FAIL=os.path.join(d, "flush-fails"))) as a:
        fail = os.path.join(d, "flush-fails")
        c = a.create()
        w = a.watch(c)
        before, failed_before = flushes(a), flushes(a, "agentd_durable_flush_failures_total")
        _, wait_sum0, slow0 = waits(a)
        open(fail, "w").close()
        sender = a.conn()
        sender.send({"op": "send", "conversation": c, "content": "held", "id": 1})
        failing_since = time.monotonic()
        # Committed, yet not durable: no reply, no event, for as long as flushes fail.
        silent(sender, harness.scaled(1.0))
        silent(w, 0.05)
        wait_for(lambda: "flushing the store failed: " in a.log(), 10, "the failed flush in the log")
        # The loop does not stall while the flusher retries: a ping (no transaction) is answered.
        assert a.ok({"op": "ping"})
        silent(sender, 0.3)
        os.unlink(fail)
        window = time.monotonic() - failing_since
        r = sender.recv()
        assert r.get("ok") is True and r.get("id") == 1 and r.get("seq") == 1, r
        got = w.recv()
        assert got.get("event", {}).get("seq") == 1 and got["event"]["content"] == {"text": "held"}, got
        # The echo worker's answer, committed meanwhile, is delivered after it.
        got = w.recv()
        assert got.get("event", {}).get("seq") == 2, got
        assert [e["seq"] for e in a.events(c)] == [1, 2]
        # Retried about every 100 ms: several tries during the window, never a spin.
        tries = flushes(a, "agentd_durable_flush_failures_total") - failed_before
        assert 3 <= tries <= window / 0.1 + 5, f"{tries} failed flushes in {window:.2f}s of failing"
        # The failed ones are not counted as flushes; the one that let the write out is.
        assert flushes(a) - before >= 1
        # The held reply's wait is in the histogram, longer than the time it was seen to be held.
        _, wait_sum1, slow1 = waits(a)
        assert slow1 - slow0 >= 1, (slow0, slow1)
        assert wait_sum1 - wait_sum0 >= harness.scaled(1.0), (wait_sum0, wait_sum1)
        wait_for(lambda: re.search(r"flushing the store works again after \d+ failed flushes", a.log()), 10,
                 "the recovery in the log")
        sender.close()
        w.close()


harness.main(globals())
