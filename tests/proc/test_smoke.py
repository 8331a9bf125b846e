"""The two-minute tour, end to end: echo turns, a server tool, a human tool resolved and one expired."""
import harness
from harness import Agentd, wait_for

CONFIG = """
[tool.approve]
executor = human
prompt = Approve?
expires = 1h
[tool.quick]
executor = human
prompt = Quick?
expires = 1s
[tool.add]
executor = server
command = python3 -c "import sys,json; d=json.load(sys.stdin); print(json.dumps({'sum': d['args']['a']+d['args']['b']}))"
"""


def types(a, c):
    return [e["type"] for e in a.events(c)]


def test_echo_tool_and_approval():
    with Agentd(config=CONFIG) as a:
        c = a.create(settings={"model": "echo", "tools": ["approve", "quick", "add"]})
        assert a.send(c, "hello") == 1
        wait_for(lambda: len(a.events(c)) >= 2, 10, "the echo reply")
        assert a.events(c)[1]["content"] == {"text": "echo: hello", "context_seq": 1}
        a.send(c, '/tool add {"a": 2, "b": 3}')
        wait_for(lambda: types(a, c)[-1:] == ["assistant_msg"] and len(a.events(c)) == 7, 10, "the tool turn")
        assert a.events(c)[5]["content"]["result"] == {"sum": 5}
        a.send(c, "/tool approve")
        pend = wait_for(lambda: a.ok({"op": "tool_calls", "conversation": c, "status": "pending"})["tool_calls"],
                        10, "a pending approval")
        r = a.ok({"op": "resolve", "tool_call_id": pend[0]["id"], "result": "yes"})
        stale = a.request({"op": "resolve", "tool_call_id": pend[0]["id"]})
        assert stale["error"] == "stale", stale
        wait_for(lambda: types(a, c)[-1] == "assistant_msg" and len(a.events(c)) > r["seq"], 10, "the answer")
        # A second approval nobody answers expires by its deadline (a tool of its own: the one resolved above
        # must not expire before this test, slow on a loaded machine, has seen and resolved it).
        a.send(c, "/tool quick")
        wait_for(lambda: "expired" in [e["content"].get("status") for e in a.events(c, type="resolution")], 10,
                 "the expiry")
        wait_for(lambda: a.ok({"op": "get", "conversation": c})["conversation"]["status"] == "idle", 10, "idle")


harness.main(globals())
