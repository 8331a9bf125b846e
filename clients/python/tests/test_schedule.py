"""schedule, schedules and unschedule against the real agentd (sync and async): a wake fires as a
`scheduled` event the echo model answers, is listed until then and gone after; a cron one is listed with
its spec and cancelled; bad schedules raise the protocol's errors with nothing written."""
import asyncio
import time

import pytest

from agentd_client import AsyncClient, BadRequest, Client, Conflict, NotFound, Schedule
from conftest import scaled, wait_for


def test_schedule_fires_lists_and_cancels(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        s = c.schedule(conv, "wake up", after=int(scaled(0.3) * 1000))
        assert isinstance(s, Schedule) and s.schedule.startswith("s-") and s.conversation == conv and s.cron is None
        at = int(time.time() * 1000) + 86400000
        r = c.schedule(conv, "daily", at=at, cron="0 9 * * *")
        assert r.due == at and r.cron == "0 9 * * *", r
        listed = c.schedules(conv)
        assert [x.schedule for x in listed] == [s.schedule, r.schedule] and listed[1].text == "daily", listed
        wait_for(lambda: [e for e in c.events(conv).events if e.type == "assistant_msg"], 20, "the answer")
        ev = [e for e in c.events(conv).events if e.type == "scheduled"]
        assert len(ev) == 1 and ev[0].content["text"] == "wake up" and ev[0].content["late"] is False, ev
        assert [e.content["text"] for e in c.events(conv).events if e.type == "assistant_msg"] == ["echo: wake up"]
        assert [x.schedule for x in c.schedules()] == [r.schedule]
        assert c.unschedule(r.schedule) is None
        assert c.schedules(conv) == []
        with pytest.raises(NotFound):
            c.unschedule(r.schedule)


def test_bad_schedules_raise(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        with pytest.raises(NotFound):
            c.schedule("nope", "x", after=10)
        with pytest.raises(NotFound):
            c.schedules("nope")
        with pytest.raises(BadRequest, match="missing field 'at'"):
            c.schedule(conv, "x")
        with pytest.raises(BadRequest, match="not both"):
            c.schedule(conv, "x", at=int(time.time() * 1000) + 60000, after=10)
        with pytest.raises(BadRequest, match="not in the future"):
            c.schedule(conv, "x", at=1000)
        with pytest.raises(BadRequest, match="not a cron expression"):
            c.schedule(conv, "x", cron="* *")
        with pytest.raises(BadRequest, match="at most 65536"):
            c.schedule(conv, "y" * 65537, after=10)
        c.update(conv, end=True)
        with pytest.raises(Conflict, match="ended"):
            c.schedule(conv, "x", after=10)
        assert c.schedules() == []


def test_async_schedule(agentd):
    async def run():
        async with AsyncClient(agentd.socket) as c:
            conv = await c.create("echo")
            s = await c.schedule(conv, "later", after=3600000)
            assert [x.schedule for x in await c.schedules()] == [s.schedule]
            await c.unschedule(s.schedule)
            assert await c.schedules(conv) == []
    asyncio.run(run())
