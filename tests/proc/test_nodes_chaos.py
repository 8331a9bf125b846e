"""Node-level chaos on one PostgreSQL store (docs/scale-out.md, "What a client sees"): three nodes, client threads
sending to all of them (each send with a unique event_id, retried on another node when one does not answer; some
start a server tool call, some a human call nobody answers, which expires), while round after round one node is
killed (kill -9) and another stopped (SIGSTOP) past the lease time, then continued, and the killed one started
again. Each round takes other nodes, so every node is killed and stopped once. At the end, as every node sees it:
every acknowledged send is in the log exactly once at its acknowledged seq, seqs are 1..N, every tool call is
settled exactly once (server: one tool_result; human: one `expired` resolution, so each expiry fired once across
the cluster), nothing is pending or active, and every conversation, those of the lost nodes too, answers a last
send on each node. PostgreSQL only (AGENTD_TEST_STORE=pg); tests/pg/test_pg_nodes.py is the one-round version on
a cluster of its own. About 40 s."""
import os
import signal
import threading
import time

import harness
from harness import scaled, wait_for
from nodesutil import Clients, Node, check_logs, new_database, settled, try_request

CONVS = 9
ROUNDS = 3
LEASE = 1.5  # seconds
CONFIG = """
[tool.approve]
executor = human
prompt = Approve?
expires = 1s
[tool.add]
executor = server
command = python3 -c "import sys,json,time; d=json.load(sys.stdin); time.sleep(0.2); print(json.dumps({'sum': d['args']['a']+d['args']['b']}))"
idempotent = yes
"""


def live_as_seen_by(node):
    r = try_request(node, {"op": "nodes"})
    return {n["node"]: n["live"] for n in r["nodes"]} if r else {}


def test_nodes_killed_and_stopped_round_after_round():
    key = new_database()
    nodes = [Node(key, f"n{i}", CONFIG, lease=f"{int(LEASE * 1000)}ms", heartbeat="250ms") for i in range(3)]
    wait_for(lambda: sum(live_as_seen_by(nodes[0]).values()) == 3, 10, "three live nodes")
    convs = [nodes[i % 3].create(settings={"model": "echo", "tools": ["approve", "add"]}) for i in range(CONVS)]
    cls = Clients(nodes, convs, 11)
    threads = [threading.Thread(target=cls.run, args=(t,), daemon=True) for t in range(4)]
    for t in threads:
        t.start()
    taken_over = 0
    for r in range(ROUNDS):
        killed, stopped, survivor = nodes[r % 3], nodes[(r + 1) % 3], nodes[(r + 2) % 3]
        time.sleep(1.0)
        before = int(next(ln.split()[1] for ln in survivor.ok({"op": "metrics"})["text"].splitlines()
                          if ln.startswith("agentd_node_orphans_total ")))
        killed.kill()  # kill -9: its leases lapse, its clients' connections close
        stopped.kill(signal.SIGSTOP, wait=False)
        try:
            wait_for(lambda: live_as_seen_by(survivor) == {killed.node_id: False, stopped.node_id: False,
                                                           survivor.node_id: True},
                     10, f"round {r}: {killed.node_id} and {stopped.node_id} not live as {survivor.node_id} sees them")
            time.sleep(LEASE / 2)  # a beat or two of the survivor alone: it takes their conversations over
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        after = int(next(ln.split()[1] for ln in survivor.ok({"op": "metrics"})["text"].splitlines()
                         if ln.startswith("agentd_node_orphans_total ")))
        taken_over += after - before
        killed.start()
        wait_for(lambda: sum(live_as_seen_by(survivor).values()) == 3, 10, f"round {r}: three live nodes again")
    time.sleep(1.0)
    cls.stop.set()
    for t in threads:
        t.join(scaled(60))
    assert not cls.errors, cls.errors[:5]
    assert len(cls.acked) > 50, len(cls.acked)
    assert taken_over > 0, "no conversation was taken over from a lost node"
    print(f"{len(cls.acked)} sends acknowledged ({cls.retried_unavailable} answered `unavailable` first), "
          f"{taken_over} conversation(s) taken over from lost nodes", flush=True)
    wait_for(lambda: settled(nodes[0], convs), 60, "every conversation idle, no call pending")
    for n in nodes:
        check_logs(n, convs, cls.acked)
    # Every conversation is served again, on every node.
    for i, c in enumerate(convs):
        n = nodes[i % 3]
        seq = n.ok({"op": "send", "conversation": c, "content": "last", "event_id": "last-" + c})["seq"]
        wait_for(lambda: any(e["type"] == "assistant_msg" and e["content"]["context_seq"] >= seq
                             for e in n.events(c, after=seq)), 20, f"{c} answered after the chaos")
    for n in nodes:
        n.stop()


harness.main(globals())
