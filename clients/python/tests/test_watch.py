"""Client.watch: an iterator of Event and Delta over the real stream."""
import pathlib

import pytest

from agentd_client import AgentdTimeout, Client, Delta, Event
from conftest import scaled, streaming_model


def test_watch_yields_events_and_deltas_until_the_stream_ends(start_agentd):
    a = start_agentd(start=False)
    gate = streaming_model(a)
    a.start()
    with Client(a.socket) as c:
        conv = c.create("stream")
        w = c.watch(conv)  # only new events
        assert w.last_seq == 0
        with pytest.raises(AgentdTimeout, match="nothing from the watch"):
            w.next(timeout=0.05)  # nothing yet; the watch goes on
        c.send(conv, "hi", event_id="m1")
        e = w.next(scaled(10))
        assert isinstance(e, Event) and (e.seq, e.type, e.content, e.event_id) == (1, "user_msg", {"text": "hi"}, "m1")
        assert w.last_seq == 1
        deltas = [w.next(scaled(10)), w.next(scaled(10))]
        assert deltas == [Delta("Hel"), Delta("lo")]
        pathlib.Path(gate).touch()
        e = w.next(scaled(10))
        assert (e.seq, e.type, e.content) == (2, "assistant_msg", {"text": "Hello", "context_seq": 1})
        # a second watch from seq 0 replays the log first; events() leaves deltas out
        with c.watch(conv, after=0) as replay:
            assert replay.last_seq == 2
            it = replay.events(timeout=scaled(10))
            assert [next(it).seq, next(it).seq] == [1, 2]
        # deleting the conversation ends the stream: the for loop stops by itself
        c.delete(conv)
        seen = [item for item in w]
        assert seen == []
        assert w.next() is None


def test_a_resumed_watch_goes_on_across_an_agentd_restart(agentd):
    with Client(agentd.socket) as c:
        conv = c.create("echo")
        c.send(conv, "one")
        plain = c.watch(conv)
        w = c.watch(conv, after=1, resume=True)
        assert w.next(scaled(10)).seq == 2  # the echo, replayed or live
        agentd.restart()
        c.send(conv, "two")  # committed while no watch is connected
        # a plain watch ends with the stream (after the echo, if it started before the echo was in)
        assert [e.seq for e in plain] in ([], [2])
        got = [w.next(scaled(10)) for _ in range(2)]
        assert [(e.seq, e.type) for e in got] == [(3, "user_msg"), (4, "assistant_msg")]
        assert got[0].content == {"text": "two"} and w.resumes == 1 and w.last_seq == 4
        c.delete(conv)  # the conversation gone: the resumed watch ends too
        assert w.next(scaled(10)) is None and w.next() is None
