"""nodesutil.py: several agentd nodes on one PostgreSQL store, for the process tests of docs/scale-out.md.

Used by test_nodes_ops.py, test_nodes_chaos.py (run with AGENTD_TEST_STORE=pg: the harness's throwaway cluster)
and tests/pg/test_pg_nodes.py (a cluster of its own).

  Node(key, node_id, config="")      an Agentd on the database that `key` (any path) stands for, with a run
                                     directory of its own; config is INI text put after the node's [agentd] lines
  new_database()                     a key that stands for a database no earlier call's key does
  try_request(node, obj, timeout)    one request; None when the node does not answer (killed, stopped)
  Clients(nodes, convs, seed)        client threads sending with unique event_ids, retried on another node
  settled(node, convs)               every conversation idle and no call pending, as node sees it
  check_logs(node, convs, acked)     the invariants: seqs 1..N, each acknowledged send once at its seq, each tool
                                     call settled once (server: one tool_result; human: one resolution, expired)
"""
import itertools
import random
import threading
import time

import harness
from harness import Agentd, Client, scaled


_databases = itertools.count(1)


def new_database():
    """A key for Node: a path that is never made, for a database of its own (harness.pg_target)."""
    return f"/nonexistent/agentd-nodes-db-{next(_databases)}"


class Node(Agentd):
    """agentd as one node of a shared PostgreSQL store: --store (the database that `key` stands for) and
    --run-dir (its own directory) instead of --data."""

    def __init__(self, key, node_id, config="", lease="2s", heartbeat="300ms", notify_poll="500ms", start=True,
                 store=None):
        self.key, self.node_id, self.target = key, node_id, store
        text = (f"[agentd]\nnode_id = {node_id}\nlease_time = {lease}\nheartbeat = {heartbeat}\n"
                f"notify_poll = {notify_poll}\n" + config)
        super().__init__(config=text, start=start)

    def store_args(self):
        return ["--store", self.target or harness.pg_target(self.key), "--run-dir", self.dir]

    def check_args(self):
        return ["--store", self.target or harness.pg_target(self.key)]


def try_request(node, obj, timeout=5):
    """One request; None when the node does not answer (killed, stopped, or cut off)."""
    try:
        with Client(node.socket, timeout=timeout) as c:
            return c.request(obj)
    except (OSError, AssertionError):
        return None


class Clients:
    """Client threads: each sends to a random conversation on a random node, each send with a unique event_id,
    retried with the same event_id on another node when a node does not answer or answers `unavailable`. Some sends start a server tool
    call (`add`), some a human one (`approve`) that nobody answers and that expires."""

    def __init__(self, nodes, convs, seed):
        self.nodes, self.convs = nodes, convs
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.acked = {}  # event_id -> (conv, seq)
        self.stop = threading.Event()
        self.errors = []
        self.retried_unavailable = 0

    def send_one(self, rng, tid, i):
        conv = rng.choice(self.convs)
        eid = f"e-{tid}-{i}"
        r = rng.random()
        text = ('/tool add {"a": %d, "b": 1}' % i) if r < 0.2 else "/tool approve {}" if r < 0.3 else f"hi {eid}"
        deadline = time.monotonic() + scaled(30)
        while time.monotonic() < deadline:
            node = rng.choice(self.nodes)
            rep = try_request(node, {"op": "send", "conversation": conv, "content": text, "event_id": eid}, 3)
            if rep is None:
                continue  # that node is down or stopped: the same send on another one
            if rep.get("error") == "unavailable":
                # the store could not be reached, or a node stopped past the lease time had its session ended
                # by the server: the same send again, as docs/protocol.md tells a client to do
                self.retried_unavailable += 1
                time.sleep(0.05)
                continue
            if not rep.get("ok"):
                self.errors.append((eid, rep))
                return
            with self.lock:
                self.acked[eid] = (conv, rep["seq"])
            return
        self.errors.append((eid, "never acknowledged"))

    def run(self, tid):
        rng = random.Random(self.rng.random())
        i = 0
        while not self.stop.is_set():
            self.send_one(rng, tid, i)
            i += 1
            time.sleep(rng.uniform(0.01, 0.06))


def settled(node, convs):
    for c in convs:
        r = try_request(node, {"op": "get", "conversation": c})
        if r is None or r["conversation"]["status"] not in ("idle",):
            return False
        p = try_request(node, {"op": "tool_calls", "conversation": c, "status": "pending"})
        if p is None or p["tool_calls"]:
            return False
    return True


def check_logs(node, convs, acked):
    sends_seen = {}
    for c in convs:
        evs = node.ok({"op": "events", "conversation": c})["events"]
        assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1)), f"{c}: seqs not 1..N"
        calls, results, resolutions = {}, {}, {}
        for e in evs:
            if e["type"] == "user_msg" and e.get("event_id"):
                assert e["event_id"] not in sends_seen, f"send {e['event_id']} twice"
                sends_seen[e["event_id"]] = (c, e["seq"])
            elif e["type"] == "tool_call":
                calls[e["content"]["tool_call_id"]] = e["content"]["executor"]
            elif e["type"] == "tool_result":
                results.setdefault(e["content"]["tool_call_id"], []).append(e)
            elif e["type"] == "resolution":
                resolutions.setdefault(e["content"]["tool_call_id"], []).append(e)
        for tc, executor in calls.items():
            if executor == "server":
                assert len(results.get(tc, [])) == 1 and tc not in resolutions, f"{c}: {tc} settled {results.get(tc)}"
            else:
                rs = resolutions.get(tc, [])
                assert len(rs) == 1 and rs[0]["content"]["status"] == "expired", f"{c}: {tc}: {rs}"
        stored = node.ok({"op": "tool_calls", "conversation": c})["tool_calls"]
        assert {t["id"] for t in stored} == set(calls), f"{c}: tool call rows {stored} vs log {calls}"
        assert all(t["status"] != "pending" for t in stored), stored
    for eid, where in acked.items():
        assert sends_seen.get(eid) == where, f"acknowledged send {eid} at {where}, in the log at {sends_seen.get(eid)}"
    return sends_seen
