"""The durable frontier (supervisor/durable.c, docs/durability.md): each reply's wait for it is measured, and a
lone client's send is flushed by the writer thread. What happens when a flush fails is
tests/faults/test_diskfail.py's."""
import re

import harness
from harness import Agentd, wait_for


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


harness.main(globals())
