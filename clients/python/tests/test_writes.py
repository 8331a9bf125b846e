"""send's expected_seq and send_batch against the real agentd: Conflict carries last_seq and writes
nothing, a replay gets the original seqs, and a batch whose reply was lost is retried without doubling."""
import asyncio

import pytest

from agentd_client import AsyncClient, BadRequest, BatchResult, Client, Conflict
from conftest import wait_for


def settled(c, conv, n):
    """Wait until the echo model answered: the log is at seq n and the conversation idle."""
    return wait_for(lambda: c.get(conv).last_seq == n and c.get(conv).status == "idle", 10, f"{conv} at {n}")


def texts(c, conv):
    return [e.content["text"] for e in c.events(conv, type="user_msg").events]


def test_expected_seq(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        r = c.send(conv, "first", event_id="k1", expected_seq=0)
        assert (r.seq, r.duplicate) == (1, False)
        settled(c, conv, 2)
        with pytest.raises(Conflict, match="at seq 2, not the expected_seq 0") as ei:
            c.send(conv, "stale", expected_seq=0)
        assert ei.value.last_seq == 2
        # the replay of k1 is answered with its seq although the log moved on
        again = c.send(conv, "first", event_id="k1", expected_seq=0)
        assert (again.seq, again.duplicate) == (1, True)
        assert c.send(conv, "second", expected_seq=2).seq == 3
        assert texts(c, conv) == ["first", "second"]
        # an ended conversation is a Conflict without last_seq
        settled(c, conv, 4)
        c.update(conv, end=True)
        with pytest.raises(Conflict, match="ended") as ei:
            c.send(conv, "x", expected_seq=4)
        assert ei.value.last_seq is None


def test_send_batch(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        r = c.send_batch(conv, ["a", {"text": "b", "n": 2}], expected_seq=0)
        assert isinstance(r, BatchResult) and r.seqs == [1, 2] and r.duplicates == []
        assert len(r.event_ids) == 2 and all(e.startswith("py-") for e in r.event_ids)
        settled(c, conv, 3)
        with pytest.raises(Conflict) as ei:
            c.send_batch(conv, ["c", "d"], expected_seq=2)
        assert ei.value.last_seq == 3
        assert texts(c, conv) == ["a", "b"]
        # given event_ids: known ones are duplicates with their original seqs, the others appended
        r2 = c.send_batch(conv, ["a again", "c"], event_ids=[r.event_ids[0], "c-1"])
        assert r2.seqs == [1, 4] and r2.duplicates == [0] and r2.event_ids == [r.event_ids[0], "c-1"]
        with pytest.raises(BadRequest, match="'events' is empty"):
            c.send_batch(conv, [])
        with pytest.raises(BadRequest, match=r"'events\[1\].content' must be a string or an object"):
            c.send_batch(conv, ["ok", 5])
        with pytest.raises(ValueError, match="event_ids has 1 entries for 2 contents"):
            c.send_batch(conv, ["x", "y"], event_ids=["one"])
        assert texts(c, conv) == ["a", "b", "c"]


def test_a_batch_whose_reply_was_lost_is_not_doubled(agentd, proxy):
    c = Client(proxy.path)
    conv = c.create("echo")
    proxy.drop_reply("send")
    r = c.send_batch(conv, ["one", "two", "three"], expected_seq=0)
    assert proxy.dropped == 1 and c.retries == 1
    # agentd had committed the first attempt: the retry is a replay, answered with the original seqs
    assert r.seqs == [1, 2, 3] and r.duplicates == [0, 1, 2]
    assert texts(c, conv) == ["one", "two", "three"]
    c.close()


def test_send_batch_awaited(agentd):
    async def go():
        async with AsyncClient(agentd.socket) as c:
            conv = await c.create("echo")
            r = await c.send_batch(conv, ["x", "y"], expected_seq=0)
            assert r.seqs == [1, 2]
            with pytest.raises(Conflict) as ei:
                await c.send(conv, "z", expected_seq=0)
            assert ei.value.last_seq >= 2
    asyncio.run(go())
