"""Every op from any node (docs/scale-out.md, "Ops on any node"): three nodes on one PostgreSQL store, each
conversation run by n1 (its worker there), every op sent to n0, which does not run it. kill, stop, compact and
get's worker are asked of n1 and their replies say what n1 did (`node`: n1); delete, cancel and update (ended,
or settings the running worker reads) are committed by n0 and n1 acts on its worker; resume wakes n1. An owner
that does not answer (stopped) fails kill `unavailable` naming it after lease_time, and get shows its worker as
unknown. PostgreSQL only (AGENTD_TEST_STORE=pg: an LMDB store has one node)."""
import atexit
import os
import shutil
import signal
import tempfile
import threading
import time

import harness
from harness import pid_alive, wait_for, write_script
from nodesutil import Node, new_database

DIR = tempfile.mkdtemp(prefix="agentd-nodes-ops-", dir="/tmp")
atexit.register(shutil.rmtree, DIR, True)
GATE = os.path.join(DIR, "go")
# A model that records its pid, then answers a turn only once GATE exists (a summary at once).
GATED = write_script(DIR, "gated.py", f"""
    import json, os, sys, time
    req = json.load(sys.stdin)
    open(os.path.join({DIR!r}, "model.%d" % os.getpid()), "w").close()
    if req.get("task") == "turn":
        while not os.path.exists({GATE!r}):
            time.sleep(0.02)
    print(json.dumps({{"text": "done"}}))
    """)
# A model that answers "tag: TEXT" to the last user message.
TAG = write_script(DIR, "tag.py", """
    import json, sys
    req = json.load(sys.stdin)
    msgs = [m for m in req.get("messages", []) if m["type"] == "user_msg"]
    print(json.dumps({"text": "tag: " + (msgs[-1]["content"].get("text", "") if msgs else "")}))
    """)
# A model that answers turns at once, and a summary only once GATE exists (recording its pid), or never when
# the conversation's params say "fail" (it exits 1).
SLOWSUM = write_script(DIR, "slowsum.py", f"""
    import json, os, sys, time
    req = json.load(sys.stdin)
    if req.get("task") == "summarize":
        if req.get("params", {{}}).get("fail"):
            sys.exit(1)
        open(os.path.join({DIR!r}, "sum.%d" % os.getpid()), "w").close()
        while not os.path.exists({GATE!r}):
            time.sleep(0.02)
    print(json.dumps({{"text": "ok"}}))
    """)
CONFIG = f"""
[model.gated]
command = python3 {GATED}
[model.tag]
command = python3 {TAG}
[model.slowsum]
command = python3 {SLOWSUM}
retries = 0
"""


def cluster():
    key = new_database()
    nodes = [Node(key, f"n{i}", CONFIG) for i in range(3)]
    wait_for(lambda: sum(n["live"] for n in nodes[0].ok({"op": "nodes"})["nodes"]) == 3, 10, "three live nodes")
    return nodes


def metric(node, name):
    for ln in node.ok({"op": "metrics"})["text"].splitlines():
        if ln.startswith(name + " "):
            return int(ln.split()[1])
    raise AssertionError(f"no {name} in {node.node_id}'s metrics")


def model_pids():
    return {int(n.split(".")[1]) for n in os.listdir(DIR) if n.startswith("model.")}


def types(node, c):
    return [e["type"] for e in node.events(c)]


def on_n1(n1, model="echo", text="hi"):
    """A conversation whose worker runs on n1: created and sent there (n1 claims it)."""
    c = n1.create(model=model)
    n1.send(c, text)
    pid = wait_for(lambda: n1.worker_pid(c), 10, "n1's worker")
    return c, pid


def stop_all(nodes):
    for n in nodes:
        n.stop()


def test_get_and_kill_from_another_node():
    nodes = cluster()
    n0, n1, n2 = nodes
    c, pid = on_n1(n1)
    wait_for(lambda: "assistant_msg" in types(n1, c), 10, "the echo reply")
    # get on n0 and n2 shows n1's worker, naming n1; on n1 it is its own
    for n in (n0, n2):
        w = n.ok({"op": "get", "conversation": c})["conversation"]["worker"]
        assert w["pid"] == pid and w["node"] == "n1" and w["state"] in ("idle", "running"), w
    assert "node" not in n1.ok({"op": "get", "conversation": c})["conversation"]["worker"]
    # n0 runs no worker for it
    assert c not in {w["conversation"] for w in n0.ok({"op": "status"})["workers"]}
    # kill through n0: n1 kills its worker and says which
    r = n0.ok({"op": "kill", "conversation": c, "signal": "TERM"})
    assert r["pid"] == pid and r["node"] == "n1", r
    wait_for(lambda: not pid_alive(pid), 10, "n1's worker killed")
    wait_for(lambda: n1.worker_pid(c) is None, 10, "n1 shows no worker")
    # with no worker anywhere, the lease is given back: kill acts here (nothing to kill)
    wait_for(lambda: n0.ok({"op": "kill", "conversation": c}).get("node") is None, 10, "no owner left")
    assert n0.ok({"op": "kill", "conversation": c})["pid"] is None
    # revived by a send on n1, killed again (SIGKILL) through n2
    n1.send(c, "again")
    pid2 = wait_for(lambda: n1.worker_pid(c), 10, "a new worker on n1")
    r = n2.ok({"op": "kill", "conversation": c})
    assert r["pid"] == pid2 and r["node"] == "n1", r
    wait_for(lambda: not pid_alive(pid2), 10, "the second worker killed")
    assert n0.request({"op": "kill", "conversation": "nope"})["error"] == "not_found"
    stop_all(nodes)


def test_stop_from_another_node_ends_the_turn():
    nodes = cluster()
    n0, n1, _ = nodes
    before = model_pids()
    c, pid = on_n1(n1, model="gated")
    model = wait_for(lambda: model_pids() - before, 10, "the model call on n1")
    r = n0.ok({"op": "stop", "conversation": c})
    assert r["stopping"] is True and r["node"] == "n1", r
    wait_for(lambda: not pid_alive(pid), 10, "n1's worker stopped")
    wait_for(lambda: not any(pid_alive(p) for p in model), 10, "the model call killed")
    # the turn ended unanswered: nothing of it was committed
    assert types(n0, c) == ["user_msg"], types(n0, c)
    assert n0.ok({"op": "get", "conversation": c})["conversation"]["status"] == "active"
    # and it stays quiet: n1 keeps its lease, so no node takes it up as an orphan, nor n1's poll
    deadline = time.monotonic() + 1.5  # five heartbeats, three polls
    while time.monotonic() < deadline:
        assert all(n.worker_pid(c) is None for n in nodes), [n.worker_pid(c) for n in nodes]
        time.sleep(0.1)
    assert {x["node"]: x["leases"] for x in n0.ok({"op": "nodes"})["nodes"]} == {"n0": 0, "n1": 1, "n2": 0}
    # resume through n0: n1 (woken) runs the turn again
    r = n0.ok({"op": "resume", "conversation": c})
    assert r["resumed"] is True and r["node"] == "n1", r
    pid2 = wait_for(lambda: n1.request({"op": "get", "conversation": c})["conversation"]["worker"], 10,
                    "a worker on n1 again")["pid"]
    assert pid2 != pid and "node" not in n1.ok({"op": "get", "conversation": c})["conversation"]["worker"]
    assert c not in {w["conversation"] for w in n0.ok({"op": "status"})["workers"]}
    stop_all(nodes)


def test_cancel_from_another_node_kills_the_worker_and_its_model():
    nodes = cluster()
    n0, n1, _ = nodes
    before = model_pids()
    c, pid = on_n1(n1, model="gated")
    model = wait_for(lambda: model_pids() - before, 10, "the model call on n1")
    r = n0.ok({"op": "cancel", "conversation": c})
    assert r["cancelled"] is True, r
    wait_for(lambda: not pid_alive(pid), 10, "n1's worker killed")
    wait_for(lambda: not any(pid_alive(p) for p in model), 10, "the model call killed")
    assert types(n0, c) == ["user_msg", "turn_cancelled"], types(n0, c)
    assert n1.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle"
    stop_all(nodes)


def test_compact_from_another_node():
    nodes = cluster()
    n0, n1, n2 = nodes
    c, pid = on_n1(n1)
    wait_for(lambda: "assistant_msg" in types(n1, c), 10, "the echo reply")
    for i in range(3):
        n1.send(c, f"m{i}")
        wait_for(lambda: types(n1, c).count("assistant_msg") == i + 2, 10, "the echo reply")
    r = n0.ok({"op": "compact", "conversation": c}, timeout=30)
    s = r["summary"]
    assert r["node"] == "n1" and s["version"] >= 1 and s["to_seq"] >= s["from_seq"] >= 1, r
    assert n2.ok({"op": "summary", "conversation": c})["summary"] == s  # as `summary` shows it, on any node
    assert n1.worker_pid(c) == pid  # n1's own worker compacted: n0 started none
    assert c not in {w["conversation"] for w in n0.ok({"op": "status"})["workers"]}
    stop_all(nodes)


def test_compact_whose_owner_fails_or_dies():
    nodes = cluster()
    n0, n1, _ = nodes
    # a compaction that fails on n1: internal, naming n1
    c = n1.create(settings={"model": "slowsum", "params": {"fail": True}})
    for i in range(3):
        n1.send(c, f"m{i}")
        wait_for(lambda: types(n1, c).count("assistant_msg") == i + 1, 10, "the reply")
    r = n0.request({"op": "compact", "conversation": c}, timeout=30)
    assert r["ok"] is False and r["error"] == "internal" and "node n1" in r["message"], r
    # a compaction accepted by n1, which dies before it reports: unavailable, naming n1
    c = n1.create(model="slowsum")
    for i in range(3):
        n1.send(c, f"m{i}")
        wait_for(lambda: types(n1, c).count("assistant_msg") == i + 1, 10, "the reply")
    out = []
    t = threading.Thread(target=lambda: out.append(n0.request({"op": "compact", "conversation": c}, timeout=30)))
    t.start()
    wait_for(lambda: any(n.startswith("sum.") for n in os.listdir(DIR)), 10, "the summary call on n1")
    n1.kill()
    t.join()
    r = out[0]
    assert r["ok"] is False and r["error"] == "unavailable" and r["node"] == "n1", r
    assert "stopped beating" in r["message"], r
    for n in (n0, nodes[2]):
        n.stop()


def test_delete_from_another_node_leaves_nothing_anywhere():
    nodes = cluster()
    n0, n1, n2 = nodes
    c, pid = on_n1(n1, model="gated")
    w = n2.watch(c)  # a watch on a third node ends too
    r = n0.ok({"op": "delete", "conversation": c})
    assert r["deleted"] is True, r
    wait_for(lambda: not pid_alive(pid), 10, "n1's worker killed")
    assert w.closed(timeout=10), "the watch on n2 was not closed"
    w.close()
    for n in nodes:
        assert n.request({"op": "get", "conversation": c})["error"] == "not_found"
        assert n.request({"op": "events", "conversation": c})["error"] == "not_found"
        wait_for(lambda: c not in {x["conversation"] for x in n.ok({"op": "status"})["workers"]}, 10,
                 f"no worker record on {n.node_id}")
    assert not any(x["leases"] for x in n0.ok({"op": "nodes"})["nodes"]), n0.ok({"op": "nodes"})
    assert metric(n0, "agentd_node_tells_total") == 2  # n1 and n2
    stop_all(nodes)


def test_update_from_another_node():
    nodes = cluster()
    n0, n1, _ = nodes
    c, pid = on_n1(n1)
    wait_for(lambda: "assistant_msg" in types(n1, c), 10, "the echo reply")
    # settings changed through n0: n1's running worker answers the next send with the new model
    n0.ok({"op": "update", "conversation": c, "settings": {"model": "tag"}})
    n0.send(c, "ping")
    wait_for(lambda: n0.events(c)[-1]["content"].get("text") == "tag: ping", 10, "the new model's answer")
    assert n1.worker_pid(c) == pid, "the same worker on n1 read the new settings"
    # ended through n0: n1 stops its worker
    n0.ok({"op": "update", "conversation": c, "status": "ended"})
    wait_for(lambda: not pid_alive(pid), 10, "n1's worker stopped")
    assert n0.request({"op": "send", "conversation": c, "content": "x"})["error"] == "conflict"
    stop_all(nodes)


def test_resume_from_another_node_wakes_the_owner():
    nodes = cluster()
    n0, n1, _ = nodes
    c, pid = on_n1(n1, model="gated")
    r = n0.ok({"op": "resume", "conversation": c})
    assert r["resumed"] is True and r["node"] == "n1", r
    time.sleep(0.3)  # n1 was woken: its worker still runs the same turn (no second worker anywhere)
    assert n1.worker_pid(c) == pid and n0.worker_pid(c) == pid
    assert c not in {w["conversation"] for w in n0.ok({"op": "status"})["workers"]}
    open(GATE, "w").close()
    wait_for(lambda: types(n0, c) == ["user_msg", "assistant_msg"], 10, "the turn answered once")
    os.unlink(GATE)
    stop_all(nodes)


def test_an_owner_that_does_not_answer():
    nodes = cluster()
    n0, n1, _ = nodes
    c, pid = on_n1(n1)
    wait_for(lambda: "assistant_msg" in types(n1, c), 10, "the echo reply")
    out = {}

    def ask(name, req):
        t0 = time.monotonic()
        out[name] = (n0.request(req, timeout=20), time.monotonic() - t0)

    n1.kill(signal.SIGSTOP, wait=False)
    try:
        ts = [threading.Thread(target=ask, args=("kill", {"op": "kill", "conversation": c})),
              threading.Thread(target=ask, args=("get", {"op": "get", "conversation": c}))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        os.kill(n1.pid, signal.SIGCONT)
    r, took = out["kill"]
    assert r["ok"] is False and r["error"] == "unavailable" and r["node"] == "n1", r
    assert "n1" in r["message"] and "did not answer" in r["message"], r
    assert 1.5 <= took < harness.scaled(8), took
    r, took = out["get"]
    assert r["conversation"]["worker"] == {"node": "n1", "pid": None, "state": "unknown"}, r
    # n1 heard the kill too late and did not do it: its worker still runs, and answers again
    time.sleep(0.5)
    assert pid_alive(pid) and n1.worker_pid(c) == pid
    w = n0.ok({"op": "get", "conversation": c})["conversation"]["worker"]
    assert w["pid"] == pid and w["node"] == "n1", w
    assert metric(n0, "agentd_node_asks_total") >= 3 and metric(n0, "agentd_node_asks_unanswered_total") == 2
    assert metric(n1, "agentd_node_asks_served_total") >= 1 and metric(n1, "agentd_node_asks_unanswered_total") == 0
    stop_all(nodes)


harness.main(globals())
