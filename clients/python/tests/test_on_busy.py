"""on_busy through the Python client, against the real agentd: create/update set it, send and
send_and_wait override it, reject is Conflict with nothing written, interrupt's SendResult names the
turn_cancelled and send_and_wait waits past it for the turn that answers, steer is answered by the
running turn's next round (docs/protocol.md, "Concurrent messages")."""
import asyncio

import pytest

from agentd_client import AsyncClient, BadRequest, Client, Conflict, Stale
from conftest import HUMAN_TOOL


def suspended(c, conv, tool="approve"):
    r = c.send_and_wait(conv, f"/tool {tool}")
    assert r.status == "suspended", r
    return r.pending[0]


def test_reject_interrupt_steer(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo", tools=["approve"], on_busy="reject")
        assert c.get(conv).settings["on_busy"] == "reject"
        tc = suspended(c, conv)
        n = c.get(conv).last_seq
        with pytest.raises(Conflict, match="busy: a turn is running"):
            c.send(conv, "no")
        assert c.get(conv).last_seq == n
        # interrupt, for this send alone: the wait ends with the turn after the turn_cancelled
        r = c.send_and_wait(conv, "instead", on_busy="interrupt", timeout=30)
        assert r.status == "completed" and r.text.startswith("echo: instead"), r
        assert r.send.on_busy == "interrupt" and r.send.interrupted == r.send.seq + 2, r.send
        with pytest.raises(Stale):
            c.approve(tc)
        # steer, set on the conversation: answered by round 2 of the running turn
        c.update(conv, on_busy="steer")
        tc = suspended(c, conv)
        s = c.send(conv, "also")
        assert (s.on_busy, s.interrupted) == ("steer", None), s
        c.approve(tc)
        done = c.wait_turn(conv, s.seq, timeout=30)
        assert done.status == "completed" and "echo: also" in done.text, done
        assert done.events[-1].content["round"] == 2, done.events
        # nothing running: a plain send
        idle = c.send(conv, "idle")
        assert idle.on_busy is None


def test_bad_on_busy(agentd):
    with Client(agentd.socket) as c:
        with pytest.raises(BadRequest, match="settings.on_busy"):
            c.create("echo", on_busy="x")
        conv = c.create("echo")
        with pytest.raises(BadRequest, match="'on_busy' must be one of"):
            c.send(conv, "hi", on_busy="x")
        with pytest.raises(BadRequest, match="settings.on_busy"):
            c.update(conv, on_busy="later")
        assert c.get(conv).last_seq == 0


def test_async_reject(agentd):
    async def main():
        async with AsyncClient(agentd.socket) as c:
            conv = await c.create("echo", tools=["approve"])
            r = await c.send_and_wait(conv, "/tool approve")
            assert r.status == "suspended"
            with pytest.raises(Conflict):
                await c.send(conv, "no", on_busy="reject")
            s = await c.send(conv, "queued")
            assert s.on_busy is None  # not named: the reply says nothing
            s = await c.send(conv, "queued too", on_busy="enqueue")
            assert s.on_busy == "enqueue"
    asyncio.run(main())


GATE = HUMAN_TOOL + """
[tool.gate]
executor = human
expires = 1h
on_user_message = reject
"""


def test_on_user_message_reject(start_agentd):
    """A send to a conversation waiting on a tool with on_user_message = reject: SendResult.rejected names
    the call it settled (and BatchResult's likewise), and the next turn answers the message."""
    a = start_agentd(GATE)
    with Client(a.socket) as c:
        conv = c.create("echo", tools=["approve", "gate"])
        tc = suspended(c, conv, "gate")
        s = c.send(conv, "never mind")
        assert s.rejected == [tc], s
        done = c.wait_turn(conv, s.seq, timeout=30)
        assert done.status == "completed" and "echo: never mind" in done.text, done
        with pytest.raises(Stale):
            c.approve(tc)
        tc = suspended(c, conv, "gate")
        b = c.send_batch(conv, ["one", "two"])
        assert b.rejected == [tc], b
        assert c.send(conv, "idle").rejected == []
