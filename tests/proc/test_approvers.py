"""A second pair of eyes (docs/tools.md, `approvers`) with the real agentd, workers, store, agentctl and the
Python client: a human tool with approvers = 2 settles a call on the second approval by a different name,
each approval before it a durable approval_vote event (a kill -9 between the two loses no vote); a name
approves once; one deny settles it denied; an approval without by is refused; pending shows the count and
the names. Every refusal writes nothing. Bad configurations are refused at start with a clear message.
"""
import os
import signal
import sys

import harness
from harness import Agentd, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from agentd_client import BadRequest, Client, Conflict  # noqa: E402

CONFIG = """[tool.pay]
executor = human
prompt = Two people approve this payment?
expires = 0
approvers = 2

[tool.one]
executor = human
expires = 0
"""


def start(text=CONFIG):
    a = Agentd(start=False)
    a.write_config(text)
    a.start()
    return a


def conv(a):
    return a.ok({"op": "create", "settings": {"model": "echo", "tools": ["pay", "one"]}})["conversation"]


def pending(a, c):
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]


def ask(a, c, tool="pay"):
    a.send(c, '/tool %s {"amount": 5}' % tool)
    return wait_for(lambda: pending(a, c) and pending(a, c)[-1], 20, "a pending call")


def of_type(a, c, t):
    return [e for e in a.events(c) if e["type"] == t]


def call(a, tcid):
    return a.ok({"op": "tool_call", "tool_call_id": tcid})["tool_call"]


def approve(a, tcid, by=None, **kw):
    rq = {"op": "resolve", "tool_call_id": tcid, "result": {"approved": True}, **kw}
    if by:
        rq["by"] = by
    return a.request(rq)


def last_seq(a, c):
    return a.ok({"op": "events", "conversation": c, "limit": 1})["last_seq"]


def test_two_names_settle_it_and_a_name_counts_once():
    a = start()
    try:
        c = conv(a)
        tc = ask(a, c)
        assert tc["approvers"] == 2 and tc["approved_by"] == [], tc
        r = approve(a, tc["id"], "alice")
        assert r["ok"] and r["settled"] is False and r["approvals"] == 1 and r["approvers"] == 2, r
        votes = of_type(a, c, "approval_vote")
        assert len(votes) == 1 and votes[0]["seq"] == r["seq"], votes
        assert votes[0]["content"] == {"tool_call_id": tc["id"], "name": "pay", "by": {"uid": os.getuid(),
                                       "name": "alice"}, "approvals": 1, "approvers": 2}, votes
        assert call(a, tc["id"])["status"] == "pending" and call(a, tc["id"])["approved_by"] == ["alice"]
        assert a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "suspended"
        # The same name again: conflict, nothing written.
        seq = last_seq(a, c)
        r = approve(a, tc["id"], "alice")
        assert r["error"] == "conflict" and "'alice' has approved it already (1 of 2 approvals" in r["message"], r
        assert r["approved_by"] == ["alice"] and r["approvals"] == 1, r
        # No by: it cannot be counted.
        r = approve(a, tc["id"])
        assert r["error"] == "bad_request" and "needs 2 approvals by different names" in r["message"], r
        assert last_seq(a, c) == seq and call(a, tc["id"])["status"] == "pending"
        # agentctl: the count and the names in pending, then the second name settles it.
        rc, out, err = a.ctl("pending")
        assert "APPROVALS" in out.splitlines()[0] and "1/2:alice" in out, out
        rc, out, err = a.ctl("approve", tc["id"], "--by", "alice", check=False)
        assert rc != 0 and "has approved it already" in err, (out, err)
        rc, out, err = a.ctl("approve", tc["id"], "--by", "bob")
        fields = dict(line.split(None, 1) for line in out.splitlines())
        assert fields["settled:"] == "true" and fields["approvals:"] == "2", out
        wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 30, "the turn after the approval")
        res = of_type(a, c, "resolution")
        assert len(res) == 1 and res[0]["content"]["by"]["name"] == "bob", res
        assert [v["content"]["by"]["name"] for v in of_type(a, c, "approval_vote")] == ["alice", "bob"]
        r = approve(a, tc["id"], "carol")
        assert r["error"] == "stale", r
        # A tool without approvers: one approval settles it, as before, by or not.
        tc1 = ask(a, c, "one")
        assert tc1["approvers"] == 1, tc1
        r = approve(a, tc1["id"])
        assert r["ok"] and r["settled"] is True and "approvals" not in r, r
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


def test_one_deny_settles_it_denied():
    a = start()
    try:
        c = conv(a)
        tc = ask(a, c)
        assert approve(a, tc["id"], "alice")["settled"] is False
        rc, out, err = a.ctl("deny", tc["id"], "--by", "bob", "--comment", "no")
        wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 30, "the turn after the deny")
        res = of_type(a, c, "resolution")
        assert len(res) == 1 and res[0]["content"]["result"] == {"approved": False, "comment": "no"}, res
        assert call(a, tc["id"])["status"] == "resolved"
        # A deny needs no by, and the approver who approved may deny (the deny settles).
        tc2 = ask(a, c)
        assert approve(a, tc2["id"], "alice")["settled"] is False
        r = a.request({"op": "resolve", "tool_call_id": tc2["id"], "result": {"approved": False}})
        assert r["ok"] and r["settled"] is True, r
        assert call(a, tc2["id"])["status"] == "resolved"
    finally:
        a.close()


def test_a_vote_survives_kill_9_and_the_call_settles_once():
    a = start()
    try:
        c = conv(a)
        tc = ask(a, c)
        assert approve(a, tc["id"], "alice")["settled"] is False
        a.kill(signal.SIGKILL)
        a.start()
        t = call(a, tc["id"])
        assert t["status"] == "pending" and t["approved_by"] == ["alice"], t
        assert approve(a, tc["id"], "alice")["error"] == "conflict"
        r = approve(a, tc["id"], "bob", args_digest=tc["args_digest"])
        assert r["ok"] and r["settled"] is True and r["approvals"] == 2, r
        a.kill(signal.SIGKILL)
        a.start()
        wait_for(lambda: len(of_type(a, c, "assistant_msg")) >= 2, 30, "the turn after the approval")
        assert len(of_type(a, c, "resolution")) == 1 and len(of_type(a, c, "approval_vote")) == 2
        assert call(a, tc["id"])["status"] == "resolved"
        a.stop()
        p = harness.run_agentd("check", *a.check_args(), capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        a.close()


def test_python_client_approves_with_by():
    a = start()
    try:
        c = conv(a)
        tc = ask(a, c)
        with Client(a.socket) as cl:
            p = [t for t in cl.pending() if t.id == tc["id"]][0]
            assert p.approvers == 2 and p.approved_by == [], p
            r = cl.approve(tc["id"], by="alice", args_digest=p.args_digest)
            assert r.settled is False and r.approvals == 1 and r.approvers == 2, r
            assert cl.tool_call(tc["id"]).approved_by == ["alice"]
            try:
                cl.approve(tc["id"], by="alice")
                raise AssertionError("a second approval by alice was counted")
            except Conflict as e:
                assert "has approved it already" in str(e), e
            try:
                cl.approve(tc["id"])
                raise AssertionError("an approval without by was counted")
            except BadRequest as e:
                assert "without 'by'" in str(e), e
            r = cl.approve(tc["id"], by="bob", comment="ok")
            assert r.settled is True and r.approvals == 2, r
            assert cl.tool_call(tc["id"]).status == "resolved"
    finally:
        a.close()


def test_bad_approvers_are_refused():
    cases = [
        ("[tool.t]\nexecutor = human\napprovers = 0\n", "bad value '0' for 'approvers' in [tool.t]"),
        ("[tool.t]\nexecutor = human\napprovers = two\n", "bad value 'two' for 'approvers' in [tool.t]"),
        ("[tool.t]\nexecutor = human\napprovers = 101\n", "bad value '101' for 'approvers' in [tool.t]"),
        ("[tool.t]\ncommand = true\napprovers = 2\n", "[tool.t] approvers is for human tools (executor = human)"),
        ("[mcp.s]\ncommand = true\napprovers = 2\n", "unknown key 'approvers' in [mcp.s]"),
    ]
    for text, msg in cases:
        harness.config_refused(text, msg)
    harness.config_starts("[tool.t]\nexecutor = human\napprovers = 1\n")


harness.main(globals())
