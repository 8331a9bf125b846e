"""The methods above single ops, against the real agentd: pending, approve and deny, resolve's by, and
send_and_wait / wait_turn ending in each way a turn can end, through the sync and the asyncio client."""
import asyncio
import os

import pytest

from agentd_client import (AsyncClient, BadRequest, Client, NotFound, Resolution, Stale, ToolCall, TurnResult)
from conftest import HUMAN_TOOL, streaming_model

FAILING = """
[model.broken]
command = /bin/false
retries = 0
"""


def resolution(c, conv, tcid):
    evs = [e for e in c.events(conv, type="resolution").events if e.content["tool_call_id"] == tcid]
    assert len(evs) == 1, evs
    return evs[0].content


def test_send_and_wait_an_echo(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        r = c.send_and_wait(conv, "hello")
        assert isinstance(r, TurnResult) and r.status == "completed", r
        assert r.seq == 1 and r.send.seq == 1 and r.send.duplicate is False
        assert [(e.seq, e.type) for e in r.events] == [(2, "assistant_msg")]
        assert r.text == "echo: hello" and r.last_seq == 2 and r.pending == [] and r.error is None
        # the next one waits after its own message, not the turn before
        r = c.send_and_wait(conv, "again")
        assert (r.status, r.seq, r.text, r.last_seq) == ("completed", 3, "echo: again", 4)
        # a turn already over is read back at once
        again = c.wait_turn(conv, 1)
        assert (again.status, again.text, again.last_seq) == ("completed", "echo: hello", 2)


def test_send_and_wait_through_a_server_tool_round(start_agentd):
    calc = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "tools", "calc.py")
    a = start_agentd(f"[tool.calc]\ncommand = /usr/bin/env python3 {os.path.abspath(calc)}\ntimeout = 10s\n")
    with Client(a.socket) as c:
        conv = c.create("echo", tools=["calc"])
        r = c.send_and_wait(conv, '/tool calc {"expr": "6*7"}')
        # the round that called the tool is not the end: the round that answers its result is
        assert r.status == "completed", r
        assert [e.type for e in r.events] == ["assistant_msg", "tool_call", "tool_result", "assistant_msg"]
        assert r.text.endswith('resolved: {"expr":"6*7","value":42}'), r.text


def test_send_and_wait_until_a_person_then_approve(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo", tools=["approve"])
        r = c.send_and_wait(conv, '/tool approve {"amount": 5}')
        assert r.status == "suspended", r
        assert [e.type for e in r.events] == ["assistant_msg", "tool_call", "suspension"]
        assert len(r.pending) == 1 and r.last_seq == 4
        tc = r.pending[0]
        assert [t.id for t in c.pending()] == [tc] and [t.id for t in c.pending(conv)] == [tc]
        res = c.approve(tc, comment="within budget", by="ops")
        assert isinstance(res, Resolution) and res.conversation == conv
        assert resolution(c, conv, tc) == {"tool_call_id": tc, "status": "resolved",
                                           "result": {"approved": True, "comment": "within budget"},
                                           "by": {"uid": os.getuid(), "name": "ops"}}
        rest = c.wait_turn(conv, res.seq)
        assert rest.status == "completed" and rest.text == f'{tc} resolved: {{"approved":true,"comment":"within budget"}}'
        assert c.pending() == [] and c.pending(conv) == []


def test_pending_across_conversations_and_deny(agentd):
    with Client(agentd.socket) as c:
        convs = [c.create("echo", conversation=f"p{i}", tools=["approve"]) for i in (2, 1)]
        for conv in convs:
            assert c.send_and_wait(conv, '/tool approve {"n": 1}').status == "suspended"
        c.create("echo", conversation="p0")  # idle: not asked about
        calls = c.pending()
        assert [t.conversation for t in calls] == ["p1", "p2"]  # conversation id order
        assert all(isinstance(t, ToolCall) and t.executor == "human" and t.status == "pending" and
                   t.prompt == "Approve the payment?" for t in calls)
        res = c.deny(calls[0].id)
        assert resolution(c, "p1", calls[0].id)["result"] == {"approved": False}
        assert "name" not in resolution(c, "p1", calls[0].id)["by"]
        assert c.wait_turn("p1", res.seq).text == f'{calls[0].id} resolved: {{"approved":false}}'
        c.deny(calls[1].id, comment="no", by="Zoë")
        assert resolution(c, "p2", calls[1].id)["result"] == {"approved": False, "comment": "no"}
        assert c.pending() == []
        with pytest.raises(NotFound):
            c.pending("nope")


def test_approve_deny_resolve_bad_inputs(agentd):
    with Client(agentd.socket) as c:
        # a call that is not pending: unknown, or settled already
        for settle in (c.approve, c.deny):
            with pytest.raises(Stale) as e:
                settle("tc-unknown")
            assert e.value.code == "stale" and e.value.op == "resolve"
        conv = c.create("echo", tools=["approve"])
        tc = c.send_and_wait(conv, "/tool approve").pending[0]
        # a bad by is refused before anything is settled
        for by in ("", "x" * 129, "line\nbreak", 7):
            for settle in (lambda: c.approve(tc, by=by), lambda: c.deny(tc, by=by),
                           lambda: c.resolve(tc, "r", by=by)):
                with pytest.raises(BadRequest) as e:
                    settle()
                assert "'by'" in e.value.message, e.value.message
        with pytest.raises(BadRequest):
            c.resolve(tc, status="maybe")
        assert [t.id for t in c.pending(conv)] == [tc]
        c.resolve(tc, "r", by="x" * 128)
        assert resolution(c, conv, tc)["by"] == {"uid": os.getuid(), "name": "x" * 128}
        with pytest.raises(Stale):
            c.approve(tc)


def test_send_and_wait_times_out_and_waits_again(start_agentd):
    a = start_agentd()
    gate = streaming_model(a)
    a.restart()
    with Client(a.socket) as c:
        conv = c.create("stream")
        r = c.send_and_wait(conv, "hi", timeout=0.3)
        assert r.status == "timeout" and r.seq == 1 and r.text is None
        assert all(e.type != "assistant_msg" for e in r.events)
        open(gate, "w").close()
        r = c.wait_turn(conv, r.seq, timeout=30)
        assert (r.status, r.text) == ("completed", "Hello")
        # timeout=None waits without a limit; 0 reads what is there and gives up
        assert c.wait_turn(conv, 1, timeout=None).status == "completed"
        assert c.wait_turn(conv, 2, timeout=0).status == "timeout"


def test_send_and_wait_an_error_and_a_cancel(start_agentd):
    a = start_agentd(FAILING + HUMAN_TOOL)
    with Client(a.socket) as c:
        conv = c.create("broken")
        r = c.send_and_wait(conv, "hi", timeout=30)
        assert r.status == "error" and r.events[-1].type == "error", r
        assert r.error["attempts"] == 1 and r.error["context_seq"] == 1
        c.update(conv, model="echo", tools=["approve"])
        r = c.send_and_wait(conv, "/tool approve")
        assert r.status == "suspended"
        done = c.cancel(conv)
        r = c.wait_turn(conv, r.seq)
        assert r.status == "cancelled" and r.events[-1].seq == done.seq
        c.delete(conv)
        with pytest.raises(NotFound):
            c.send_and_wait(conv, "gone")
        with pytest.raises(NotFound):
            c.wait_turn(conv, 1)


def test_send_and_wait_on_a_paused_conversation(agentd):
    with Client(agentd.socket) as c:
        conv = c.request("create", settings={"model": "echo", "budget": {"max_turns": 1}})["conversation"]
        assert c.send_and_wait(conv, "one").status == "completed"
        r = c.send_and_wait(conv, "two")
        assert r.status == "paused" and r.events[-1].type == "budget_exceeded", r
        r = c.send_and_wait(conv, "three")  # already paused: the send says so, nothing to wait for
        assert (r.status, r.events, r.send.status) == ("paused", [], "paused")


def test_the_same_awaited(agentd):
    async def main():
        async with AsyncClient(agentd.socket) as c:
            conv = await c.create("echo", tools=["approve"])
            r = await c.send_and_wait(conv, "hello")
            assert (r.status, r.text) == ("completed", "echo: hello")
            r = await c.send_and_wait(conv, "/tool approve")
            assert r.status == "suspended"
            assert [t.id for t in await c.pending()] == r.pending
            assert [t.id for t in await c.pending(conv)] == r.pending
            with pytest.raises(BadRequest):
                await c.approve(r.pending[0], by="")
            res = await c.approve(r.pending[0], by="ops")
            assert (await c.wait_turn(conv, res.seq)).status == "completed"
            with pytest.raises(Stale):
                await c.deny(r.pending[0])
            r = await c.send_and_wait(conv, "/tool approve")
            res = await c.deny(r.pending[0], comment="no")
            assert (await c.wait_turn(conv, res.seq)).text.endswith('{"approved":false,"comment":"no"}')
            with pytest.raises(NotFound):
                await c.pending("nope")
            assert (await c.wait_turn(conv, 1, timeout=0)).status == "completed"
    asyncio.run(main())
