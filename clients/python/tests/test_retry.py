"""Idempotent send: a lost connection is retried with the same event_id, and the message is in the log
exactly once, whether agentd had committed it (the reply lost) or never read it (agentd killed)."""
import os
import signal
import threading

import pytest

from agentd_client import AgentdConnectionError, AgentdTimeout, Client, Conflict
from conftest import outq, scaled, wait_for


def user_texts(c, conv):
    return [(e.content["text"], e.event_id) for e in c.events(conv, type="user_msg").events]


def test_a_send_whose_reply_was_lost_is_not_doubled(agentd, proxy):
    c = Client(proxy.path)
    conv = c.create("echo")
    proxy.drop_reply("send")
    r = c.send(conv, "pay once")
    assert proxy.dropped == 1 and c.retries == 1 and proxy.connections == 2
    # agentd had committed the first attempt: the resend is answered with its seq
    assert (r.seq, r.duplicate) == (1, True)
    assert user_texts(c, conv) == [("pay once", r.event_id)]
    # the connection the client made for the retry goes on serving
    nxt = c.send(conv, "next")
    assert nxt.seq > r.seq and not nxt.duplicate
    assert user_texts(c, conv) == [("pay once", r.event_id), ("next", nxt.event_id)]
    c.close()


def test_a_lost_reply_to_create_is_not_retried(agentd, proxy):
    # create is not idempotent (a second one would be a conflict): the error says it may have run
    c = Client(proxy.path)
    c.ping()
    proxy.drop_reply("create")
    with pytest.raises(AgentdConnectionError, match="closed the connection before replying") as ei:
        c.create("echo", conversation="once")
    assert ei.value.sent is True and ei.value.op == "create" and c.retries == 0
    assert c.get("once").id == "once"  # it ran; the next request reconnects
    with pytest.raises(Conflict):
        c.create("echo", conversation="once")
    c.close()


def test_send_survives_agentd_killed_and_restarted(agentd):
    c = Client(agentd.socket, retry_for=scaled(30))
    conv = c.create("echo")
    c.send(conv, "before", event_id="b")
    wait_for(lambda: c.get(conv).last_seq == 2, 10, "the echo")
    os.kill(agentd.pid, signal.SIGSTOP)
    out = []

    def send():
        try:
            out.append(c.send(conv, "during", event_id="d"))
        except BaseException as e:  # noqa: BLE001 (reported by the assertion below)
            out.append(e)

    t = threading.Thread(target=send)
    t.start()
    # The request sits in agentd's socket, unread; then agentd dies without reading it.
    wait_for(lambda: c._conn is not None and outq(c._conn.sock) > 0, 10, "the send to be queued")
    agentd.kill(signal.SIGKILL)
    wait_for(lambda: c.retries >= 2, 10, "the client to retry while agentd is down")
    assert t.is_alive()
    agentd.start()  # same data directory and socket (from this thread: the harness needs it)
    t.join(scaled(30))
    assert not t.is_alive()
    r = out[0]
    assert not isinstance(r, BaseException), r
    assert (r.seq, r.duplicate, r.event_id) == (3, False, "d")
    assert user_texts(c, conv) == [("before", "b"), ("during", "d")]
    c.close()


def test_a_connection_agentd_closed_is_replaced_before_sending(agentd):
    # After a restart the old connection is dead: even create (never retried) goes out on a new one.
    c = Client(agentd.socket, retry_for=0)
    c.ping()
    agentd.restart()
    assert c.create("echo", conversation="fresh") == "fresh"
    assert c.retries == 0
    c.close()


def test_a_timeout_is_not_retried_and_a_cut_request_is_never_executed(agentd):
    c = Client(agentd.socket, timeout=0.3)
    conv = c.create("echo")
    os.kill(agentd.pid, signal.SIGSTOP)
    try:
        # agentd reads nothing: the big request fills the socket and the write times out, half sent
        with pytest.raises(AgentdTimeout, match="did not take the request within 0.3 s") as ei:
            c.send(conv, "x" * (4 << 20))
        assert ei.value.sent is True and c.retries == 0
        with pytest.raises(AgentdTimeout, match="no reply from agentd within 0.3 s"):
            c.get(conv)  # a small request is written, its reply does not come
        assert c.retries == 0
    finally:
        os.kill(agentd.pid, signal.SIGCONT)
    c.timeout = scaled(10)
    assert c.get(conv).last_seq == 0  # the cut line was never executed
    assert c.events(conv).events == []
    c.close()


class Interrupted(Exception):
    pass


def test_an_interrupted_request_does_not_leave_its_reply_for_the_next(agentd):
    # Ctrl-C during a long-poll: the late reply must not be read as the next request's.
    c = Client(agentd.socket)
    conv = c.create("echo")

    def interrupt(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted):
            c.events(conv, after=0, wait_ms=60000)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    # this send commits seq 1, which answers the abandoned long-poll too (on the old connection)
    assert c.send(conv, "hi").seq == 1
    assert c.retries == 0
    c.close()
