"""A node alone on its store (docs/scale-out.md), LMDB's case (and PostgreSQL's, under AGENTD_TEST_STORE=pg): one node, named by node_id, heartbeating and holding the leases of
the conversations it runs; listed by the `nodes` op and `agentctl nodes`, shown by status and metrics; a node id
that changes on the same data directory takes over at once; bad node settings are refused."""
import re

import harness
from harness import Agentd, wait_for


def node_config(a, node_id, lease="1s", heartbeat="200ms"):
    """A gated model (answers once DIR/go exists) and the node settings."""
    gate = a.gated_model()
    with open(a.config_path) as f:
        text = f.read()
    a.write_config(f"[agentd]\nnode_id = {node_id}\nlease_time = {lease}\nheartbeat = {heartbeat}\n" + text)
    return gate


def nodes(a):
    return a.ok({"op": "nodes"})


def test_one_node_lists_itself_and_its_leases():
    with Agentd(start=False) as a:
        gate = node_config(a, "alpha")
        a.start()
        r = nodes(a)
        assert r["node"] == "alpha" and r["lease_ms"] == 1000 and r["heartbeat_ms"] == 200, r
        assert [n["node"] for n in r["nodes"]] == ["alpha"], r
        me = r["nodes"][0]
        assert me["live"] is True and me["self"] is True and me["leases"] == 0, me
        assert me["expires_at"] > me["beat_at"] >= me["started_at"] > 0, me
        # A worker runs (held at the gate): the node holds its conversation's lease, renewed by each beat.
        c = a.create(model="gated")
        a.send(c, "hi")
        wait_for(lambda: nodes(a)["nodes"][0]["leases"] == 1, 10, "the lease of the running conversation")
        first = nodes(a)["nodes"][0]
        wait_for(lambda: nodes(a)["nodes"][0]["beat_at"] > first["beat_at"], 10, "a later heartbeat")
        assert nodes(a)["nodes"][0]["expires_at"] - nodes(a)["nodes"][0]["beat_at"] == 1000
        st = a.ok({"op": "status"})["node"]
        assert st["id"] == "alpha" and st["lease_ms"] == 1000 and st["leases"] == 1, st
        assert st["other_nodes"] == 0 and st["other_nodes_live"] == 0 and 0 <= st["last_beat_ms_ago"] < 5000, st
        text = a.ok({"op": "metrics"})["text"]
        assert 'agentd_node_info{node="alpha"} 1' in text, text
        assert re.search(r"^agentd_node_leases 1$", text, re.M), text
        assert int(re.search(r"^agentd_node_beats_total (\d+)$", text, re.M).group(1)) >= 2, text
        rc, out, err = a.ctl("nodes")
        lines = out.splitlines()
        assert lines[0] == "node: alpha", out
        assert lines[1].split() == ["NODE", "LIVE", "LEASES", "BEAT_AT", "EXPIRES_AT", "STARTED_AT"], out
        assert lines[2].split()[:3] == ["alpha", "true", "1"], out
        rc, out, err = a.ctl("-q", "nodes")
        assert out.split() == ["alpha"], out
        rc, out, err = a.ctl("status")
        assert re.search(r"^node\.id: +alpha$", out, re.M), out
        open(gate, "w").close()
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 10, "idle")


def test_a_new_node_id_takes_over_at_once():
    """The data directory's earlier node (another node_id) leaves when the new one starts: its leases, long
    as they are, do not keep the conversations from being served."""
    with Agentd(start=False, lmdb=True) as a:  # on PostgreSQL a killed node's leases run out instead
        gate = node_config(a, "alpha", lease="60s", heartbeat="20s")
        a.start()
        c = a.create(model="gated")
        a.send(c, "first")
        wait_for(lambda: nodes(a)["nodes"][0]["leases"] == 1, 10, "alpha's lease")
        a.kill()  # kill -9: alpha leaves nothing behind but its rows
        with open(a.config_path) as f:
            a.write_config(f.read().replace("node_id = alpha", "node_id = beta"))
        open(gate, "w").close()
        a.start()
        r = nodes(a)
        assert r["node"] == "beta" and [n["node"] for n in r["nodes"]] == ["beta"], r
        # alpha's 60 s lease is gone: beta revives the conversation now (the wait is far shorter)
        wait_for(lambda: [e["type"] for e in a.events(c)][-1] == "assistant_msg", 10, "the revived turn")
        a.send(c, "second")
        wait_for(lambda: len(a.events(c)) >= 4, 10, "the next turn, on beta")


def test_bad_node_settings_are_refused():
    for text, want in [
        ("node_id = bad id", "bad value 'bad id' for 'node_id' in [agentd]"),
        ("node_id = " + "n" * 129, "for 'node_id' in [agentd]"),
        ("lease_time = 500ms", "bad value '500ms' for 'lease_time' in [agentd]"),
        ("lease_time = 1s\nheartbeat = 600ms", "heartbeat (600 ms) must be at most half of lease_time (1000 ms)"),
        ("notify_poll = 10ms", "bad value '10ms' for 'notify_poll' in [agentd]"),
    ]:
        with Agentd(config="[agentd]\n" + text + "\n", start=False) as a:
            assert a.expect_exit() != 0
            assert want in a.log(), (want, a.log_tail())


harness.main(globals())
