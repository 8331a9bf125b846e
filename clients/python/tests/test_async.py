"""AsyncClient: the same methods awaited, AsyncWatch, errors and the send retry, against the real agentd."""
import asyncio
import pathlib

import pytest

from agentd_client import (AgentdConnectionError, AsyncClient, BadRequest, Conflict, Delta, Event, NotFound,
                           SendResult, Stale, Status, ToolCall, TooLarge, UnknownOp)
from conftest import HUMAN_TOOL, scaled, streaming_model


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, scaled(60)))


async def until(pred, what, timeout=10):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + scaled(timeout)
    while True:
        v = await pred()
        if v:
            return v
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_every_op_awaited(start_agentd):
    a = start_agentd(HUMAN_TOOL + "[agentd]\naudit = on\n")

    async def main():
        async with AsyncClient(a.socket) as c:
            assert await c.ping() == "0.1.0"
            conv = await c.create("echo", conversation="ac", tools=["approve"], system="s")
            assert (await c.get(conv)).settings["system"] == "s"
            assert [x.id for x in (await c.list(limit=10)).conversations] == ["ac"]
            await c.update(conv, system="t")
            r = await c.send(conv, '/tool approve {"amount": 5}')
            assert isinstance(r, SendResult) and r.seq == 1
            tc = (await until(lambda: c.tool_calls(conv, status="pending"), "the approval"))[0]
            assert isinstance(tc, ToolCall) and (await c.tool_call(tc.id)).prompt == "Approve the payment?"
            res = await c.resolve(tc.id, {"approved": True})
            assert res.seq == 5 and res.conversation == conv
            await until(lambda: _idle_at(c, conv, 6), "the answer")
            page = await c.events(conv, after=4)
            assert [e.type for e in page.events] == ["resolution", "assistant_msg"] and page.last_seq == 6
            assert (await c.events(conv, after=6, wait_ms=30)).events == []
            assert await c.summary(conv) is None
            s = await c.compact(conv)
            assert s.from_seq == 1 and (await c.summary(conv)).to_seq == s.to_seq
            assert [m.task for m in await c.audit(conv)][:2] == ["turn", "turn"]
            st = await c.status()
            assert isinstance(st, Status) and st.store.path == a.data_dir
            pid = (await c.get(conv)).worker.pid
            assert await c.stop(conv) is True
            await until(lambda: _no_worker(c, conv), "the worker gone")
            assert await c.kill(conv) is None and pid > 0
            assert 'agentd_ops_total{op="resolve"} 1\n' in await c.metrics()
            assert (await c.request("get", conversation=conv))["conversation"]["id"] == conv
            await c.update(conv, end=True)
            assert await c.delete(conv) is True and await c.delete(conv) is False
            await c.shutdown()

    run(main())
    assert a.wait(20) == 0


async def _idle_at(c, conv, seq):
    g = await c.get(conv)
    return g.last_seq >= seq and g.status == "idle"


async def _no_worker(c, conv):
    return (await c.get(conv)).worker is None


def test_errors_awaited(start_agentd):
    a = start_agentd(HUMAN_TOOL + "[agentd]\nmax_line = 1k\n")

    async def main():
        async with AsyncClient(a.socket) as c:
            conv = await c.create("echo", conversation="e1")
            with pytest.raises(Conflict):
                await c.create("echo", conversation="e1")
            with pytest.raises(NotFound):
                await c.get("none")
            with pytest.raises(UnknownOp):
                await c.request("frobnicate")
            with pytest.raises(Stale):
                await c.resolve("tc-none")
            with pytest.raises(BadRequest, match="unknown model"):
                await c.create("nope")
            with pytest.raises(BadRequest, match="cannot be encoded as JSON"):
                await c.send(conv, {"x": {1}})
            with pytest.raises(TooLarge):
                await c.send(conv, "x" * 2000)
            with pytest.raises(TooLarge):  # still being written when agentd closes: not retried
                await c.send(conv, "x" * (4 << 20))
            assert c.retries == 0
            with pytest.raises(NotFound):
                await c.watch("none")
            assert (await c.events(conv)).events == []  # nothing written, and a new connection works
        with pytest.raises(AgentdConnectionError, match="is agentd running"):
            await AsyncClient(a.socket + ".none").ping()

    run(main())


def test_async_watch_with_deltas(start_agentd):
    a = start_agentd(start=False)
    gate = streaming_model(a)
    a.start()

    async def main():
        async with AsyncClient(a.socket) as c:
            conv = await c.create("stream")
            w = await c.watch(conv)
            with pytest.raises(AgentdConnectionError, match="nothing from the watch"):
                await w.next(timeout=0.05)  # a timeout loses nothing: the next line still arrives
            await c.send(conv, "hi")
            got = [await w.next(scaled(10)) for _ in range(3)]
            assert isinstance(got[0], Event) and got[0].seq == 1
            assert got[1:] == [Delta("Hel"), Delta("lo")]
            pathlib.Path(gate).touch()
            e = await w.next(scaled(10))
            assert (e.seq, e.type, e.content["text"]) == (2, "assistant_msg", "Hello") and w.last_seq == 2
            async with await c.watch(conv, after=0) as replay:
                seqs = []
                async for ev in replay.events(timeout=scaled(10)):
                    seqs.append(ev.seq)
                    if ev.seq == 2:
                        break
                assert seqs == [1, 2]
            await c.delete(conv)
            assert [item async for item in w] == []

    run(main())


def test_async_send_whose_reply_was_lost_is_not_doubled(agentd, proxy):
    async def main():
        async with AsyncClient(proxy.path) as c:
            conv = await c.create("echo")
            proxy.drop_reply("send")
            r = await c.send(conv, "pay once")
            assert proxy.dropped == 1 and c.retries == 1
            assert (r.seq, r.duplicate) == (1, True)
            msgs = [e.event_id for e in (await c.events(conv, type="user_msg")).events]
            assert msgs == [r.event_id]
            proxy.drop_reply("create")
            with pytest.raises(AgentdConnectionError) as ei:
                await c.create("echo", conversation="once")
            assert ei.value.sent is True and c.retries == 1
            assert (await c.get("once")).id == "once"

    run(main())


def test_async_reconnects_after_a_restart(agentd):
    async def main():
        c = AsyncClient(agentd.socket, retry_for=0)
        await c.ping()
        agentd.restart()  # blocks the loop: the client's connection is dead when it resumes
        assert await c.create("echo", conversation="fresh") == "fresh"
        await c.close()

    run(main())


def test_a_cancelled_request_does_not_leave_its_reply_for_the_next(agentd):
    async def main():
        async with AsyncClient(agentd.socket) as c:
            conv = await c.create("echo")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.events(conv, after=0, wait_ms=60000), 0.2)
            assert (await c.send(conv, "hi")).seq == 1  # answers the abandoned long-poll too
            assert c.retries == 0

    run(main())


def test_async_resumed_watch_goes_on_across_an_agentd_restart(agentd):
    async def main():
        async with AsyncClient(agentd.socket) as c:
            conv = await c.create("echo")
            w = await c.watch(conv, resume=True)
            agentd.restart()  # blocks the loop; the watch finds its stream ended when it next reads
            await c.send(conv, "two")
            got = [await w.next(scaled(10)) for _ in range(2)]
            assert [(e.seq, e.type) for e in got] == [(1, "user_msg"), (2, "assistant_msg")] and w.resumes == 1
            await c.delete(conv)
            assert await w.next(scaled(10)) is None

    run(main())
