"""Three agentd nodes on one PostgreSQL store (docs/scale-out.md, "Several nodes, one database").

The test starts its own throwaway cluster (tests/pg/cluster.sh) and three nodes with short leases. Client threads
send to every node, each send with a unique event_id, retried with the same event_id on another node when a node
does not answer; some sends start a server tool call, some a human tool call nobody answers, which expires. While
they run one node is killed (kill -9) and another is stopped (SIGSTOP) past its lease time, then continued. At the
end, from the log: every acknowledged send is there exactly once at its acknowledged seq, seqs are 1..N, every
tool call is settled exactly once (one tool_result, or one resolution: `expired` for the human ones), nothing is
left active or pending, and every conversation, those of the killed node too, answers a last send on the node
that was stopped."""
import os
import shutil
import signal
import subprocess
import tempfile
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proc"))

import harness  # noqa: E402
from harness import Agentd, wait_for, scaled  # noqa: E402
from nodesutil import Clients, check_logs, settled  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "cluster.sh")
CONVS = 9
LEASE = "2s"

CONFIG = """
[agentd]
node_id = {node}
lease_time = {lease}
heartbeat = 300ms
notify_poll = 500ms
[tool.approve]
executor = human
prompt = Approve?
expires = 1s
[tool.add]
executor = server
command = python3 -c "import sys,json,time; d=json.load(sys.stdin); time.sleep(0.2); print(json.dumps({{'sum': d['args']['a']+d['args']['b']}}))"
idempotent = yes
"""


class Cluster:
    """A throwaway PostgreSQL cluster with one database, stopped by its pid however the test ends."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="agentd-pg-", dir="/tmp")
        self.prefix = subprocess.run([CLUSTER, "start", self.dir], check=True, capture_output=True,
                                     text=True).stdout.strip()
        subprocess.run(["psql", "-X", "-q", self.prefix + " dbname=postgres", "-c", "CREATE DATABASE nodes"],
                       check=True, capture_output=True)
        self.target = self.prefix + " dbname=nodes"

    def close(self):
        subprocess.run([CLUSTER, "stop", self.dir], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class Node(Agentd):
    """agentd on the cluster's store: --store and --run-dir instead of --data."""

    def __init__(self, target, node_id, lease=LEASE):
        self.target = target
        super().__init__(config=CONFIG.format(node=node_id, lease=lease), start=False)
        self.node_id = node_id

    def command(self):
        args = [harness.AGENTD_BIN, "--store", self.target, "--run-dir", self.dir, "--socket", self.socket]
        if self.config_path:
            args += ["--config", self.config_path]
        return args


def test_three_nodes_survive_a_kill_and_a_stop():
    cl = Cluster()
    nodes = []
    try:
        # The first node creates the schema; the others open it.
        nodes = [Node(cl.target, f"n{i}") for i in range(3)]
        nodes[0].start()
        nodes[1].start()
        nodes[2].start()
        r = nodes[0].ok({"op": "nodes"})
        wait_for(lambda: sum(n["live"] for n in nodes[0].ok({"op": "nodes"})["nodes"]) == 3, 10, "three live nodes")
        convs = [nodes[i % 3].create(settings={"model": "echo", "tools": ["approve", "add"]}) for i in range(CONVS)]
        cls = Clients(nodes, convs, 7)
        threads = [threading.Thread(target=cls.run, args=(t,), daemon=True) for t in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        # Whatever n1 owns now is the lost node's.
        lost = [c for c in convs]
        nodes[1].kill()  # kill -9: its leases lapse
        time.sleep(0.5)
        nodes[2].kill(signal.SIGSTOP, wait=False)
        time.sleep(3.5)  # past lease_time: n0 takes over both nodes' conversations
        # n0 sees the other two gone (n0's own beat may be late on a slow build: looked at until it is not)
        wait_for(lambda: {n["node"]: n["live"] for n in nodes[0].ok({"op": "nodes"})["nodes"]}
                 == {"n0": True, "n1": False, "n2": False}, 10, "n1 and n2 not live, n0 live, as n0 sees them")
        os.kill(nodes[2].pid, signal.SIGCONT)
        time.sleep(2)
        cls.stop.set()
        for t in threads:
            t.join(scaled(60))
        assert not cls.errors, cls.errors[:5]
        assert len(cls.acked) > 20, len(cls.acked)
        live = [nodes[0], nodes[2]]
        wait_for(lambda: settled(nodes[0], convs), 60, "every conversation idle, no call pending")
        check_logs(nodes[0], convs, cls.acked)
        # Every conversation is served again, the lost node's too, on the node that was stopped.
        for c in lost:
            seq = nodes[2].ok({"op": "send", "conversation": c, "content": "last", "event_id": "last-" + c})["seq"]
            wait_for(lambda: any(e["type"] == "assistant_msg" and e["content"]["context_seq"] >= seq
                                 for e in nodes[2].events(c, after=seq)), 20, f"{c} answered after the chaos")
        check_logs(nodes[2], convs, cls.acked)
        text = nodes[2].ok({"op": "metrics"})["text"]
        assert "agentd_node_info{node=\"n2\"} 1" in text
        for n in live:
            n.stop()
    finally:
        for n in nodes:
            n.close()
        cl.close()


harness.main(globals())
