"""Who decided, in the audit trail (docs/protocol.md, `resolve`'s `by`): every resolution event made by
`resolve` records the uid of the client that sent it (SO_PEERCRED, not something a client can claim) and the
`by` name when one was given; an expiry records no one; a bad `by` is refused before anything is settled."""
import os

import harness
from harness import Agentd, wait_for

TOOLS = """
[tool.approve]
executor = human
prompt = Approve?
expires = 1h

[tool.quick]
executor = human
expires = 300ms
"""


def pending(a, c):
    return a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"]


def ask(a, c, tool="approve"):
    a.send(c, "/tool " + tool + ' {"amount": 5}')
    return wait_for(lambda: pending(a, c), 10, "a pending call")[0]["id"]


def resolution(a, c, tcid):
    evs = [e for e in a.events(c) if e["type"] == "resolution" and e["content"]["tool_call_id"] == tcid]
    assert len(evs) == 1, evs
    return evs[0]["content"]


def test_agentctl_resolve_records_the_uid_and_name():
    with Agentd(config=TOOLS) as a:
        c = a.ok({"op": "create", "settings": {"model": "echo", "tools": ["approve", "quick"]}})["conversation"]
        tc = ask(a, c)
        a.ctl("resolve", tc, "--result", '{"approved":true}')
        assert resolution(a, c, tc) == {"tool_call_id": tc, "status": "resolved", "result": {"approved": True},
                                        "by": {"uid": os.getuid()}}
        tc = ask(a, c)
        a.ctl("resolve", tc, "--status", "errored", "--by", "Zoë <ops>")
        assert resolution(a, c, tc)["by"] == {"uid": os.getuid(), "name": "Zoë <ops>"}
        tc = ask(a, c)
        a.ctl("deny", tc, "--comment", "no", "--by", "ops")
        assert resolution(a, c, tc) == {"tool_call_id": tc, "status": "resolved",
                                        "result": {"approved": False, "comment": "no"},
                                        "by": {"uid": os.getuid(), "name": "ops"}}
        # over the protocol directly: a client cannot claim another uid
        tc = ask(a, c)
        bad = a.request({"op": "resolve", "tool_call_id": tc, "by": {"uid": 0}})
        assert bad["error"] == "bad_request" and "'by' must be a string of 1-128 bytes" in bad["message"], bad
        assert pending(a, c)[0]["id"] == tc  # nothing settled
        a.ok({"op": "resolve", "tool_call_id": tc, "by": "x" * 128})
        assert resolution(a, c, tc)["by"] == {"uid": os.getuid(), "name": "x" * 128}
        # an expiry is nobody's decision (waited for as its event: under valgrind the call may be pending
        # for less time than one poll takes)
        a.send(c, "/tool quick")
        ev = wait_for(lambda: [e for e in a.events(c) if e["type"] == "resolution"
                               and e["content"]["status"] == "expired"], 10, "the expiry")
        assert len(ev) == 1 and "by" not in ev[0]["content"], ev


def test_bad_by_is_refused():
    with Agentd(config=TOOLS) as a:
        c = a.ok({"op": "create", "settings": {"model": "echo", "tools": ["approve"]}})["conversation"]
        tc = ask(a, c)
        for by, msg in [("", "1-128 bytes"), ("x" * 129, "1-128 bytes"), (7, "1-128 bytes"),
                        ("a\nb", "control characters"), ("a\x7fb", "control characters")]:
            r = a.request({"op": "resolve", "tool_call_id": tc, "by": by})
            assert r["ok"] is False and r["error"] == "bad_request" and msg in r["message"], (by, r)
        rc, out, err = a.ctl("resolve", tc, "--by", "", check=False)
        assert rc == 1 and "bad_request" in err and "'by'" in err, (rc, out, err)
        assert pending(a, c)[0]["id"] == tc
        assert [e for e in a.events(c) if e["type"] == "resolution"] == []


harness.main(globals())
