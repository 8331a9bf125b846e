"""Each error code of the protocol raises its own exception class (all AgentdError), with the code and
agentd's message; a bad request writes nothing, and the client goes on working after it."""
import re
import socket
import subprocess
import threading

import pytest

import agentd_client
from agentd_client import (ERRORS, AgentdConnectionError, AgentdError, AgentdTimeout, BadRequest, Client,
                           Conflict, Internal, NotFound, Stale, StoreFull, TooLarge, UnknownOp, Unavailable)
from conftest import outq, scaled, wait_for

CODES = ["bad_request", "unknown_op", "not_found", "conflict", "stale", "too_large", "store_full",
         "unavailable", "internal", "busy", "unsupported"]


def test_one_class_per_code():
    assert sorted(ERRORS) == sorted(CODES)
    assert len(set(ERRORS.values())) == len(CODES)
    for code, cls in ERRORS.items():
        assert issubclass(cls, AgentdError) and cls.code == code
    assert issubclass(AgentdConnectionError, AgentdError) and issubclass(AgentdConnectionError, ConnectionError)
    assert issubclass(AgentdTimeout, AgentdConnectionError) and issubclass(AgentdTimeout, TimeoutError)
    # a code this client does not know still raises, as the base class with that code
    e = agentd_client.error_from_reply({"ok": False, "error": "newcode", "message": "m"}, "get")
    assert type(e) is AgentdError and e.code == "newcode" and str(e) == "get: newcode: m"


def ops_sent(c, op):
    m = re.search(r'^agentd_ops_total\{op="%s"\} (\d+)$' % op, c.metrics(), re.M)
    return int(m.group(1))


def test_bad_request_writes_nothing(agentd):
    with Client(agentd.socket) as c:
        with pytest.raises(BadRequest) as ei:
            c.create("no-such-model", conversation="x")
        assert ei.value.code == "bad_request" and ei.value.op == "create"
        assert "unknown model 'no-such-model'" in ei.value.message
        with pytest.raises(BadRequest, match="unknown tool 'nope'"):
            c.create("echo", tools=["nope"])
        with pytest.raises(BadRequest, match=r"'conversation' must be 1-128 characters"):
            c.create("echo", conversation="bad id!")
        assert c.list().conversations == []
        conv = c.create("echo")
        with pytest.raises(BadRequest, match="'content' must be a string or an object"):
            c.send(conv, ["a", "list"])
        with pytest.raises(BadRequest, match=r"'event_id' must be a string of 1-200 bytes"):
            c.send(conv, "hi", event_id="x" * 201)
        with pytest.raises(BadRequest, match="unknown field 'bogus' for op 'get'"):
            c.request("get", conversation=conv, bogus=1)
        with pytest.raises(BadRequest, match="'limit' must be an integer"):
            c.events(conv, limit=0)
        with pytest.raises(BadRequest, match="'status' must be one of"):
            c.resolve("tc-1", status="maybe")
        # values that are not JSON never leave the client: nothing is sent at all
        before = ops_sent(c, "send")
        for bad in ({"x": {1, 2}}, {"x": float("nan")}, "lone \ud800 surrogate"):
            with pytest.raises(BadRequest, match="cannot be encoded as JSON"):
                c.send(conv, bad)
        assert ops_sent(c, "send") == before
        assert c.events(conv).events == [] and c.get(conv).last_seq == 0


def test_unknown_op_not_found_conflict_stale(agentd):
    with Client(agentd.socket) as c:
        with pytest.raises(UnknownOp, match="unknown op 'frobnicate'") as ei:
            c.request("frobnicate")
        assert ei.value.code == "unknown_op"
        for call in (lambda: c.get("none"), lambda: c.send("none", "hi"), lambda: c.tool_call("tc-none"),
                     lambda: c.events("none"), lambda: c.watch("none")):
            with pytest.raises(NotFound) as ei:
                call()
            assert ei.value.code == "not_found"
        conv = c.create("echo", conversation="c1", tools=["approve"])
        with pytest.raises(Conflict, match="exists"):
            c.create("echo", conversation="c1")
        with pytest.raises(Stale, match="not pending"):
            c.resolve("tc-none", True)
        c.send(conv, "/tool approve {}")
        tc = wait_for(lambda: c.tool_calls(conv, status="pending"), 10, "the approval")[0]
        c.resolve(tc.id, "yes")
        with pytest.raises(Stale) as ei:  # a second answer (a double click) settles nothing
            c.resolve(tc.id, "no")
        assert ei.value.code == "stale"
        assert [e.content["result"] for e in c.events(conv, type="resolution").events] == ["yes"]
        c.update(conv, end=True)
        with pytest.raises(Conflict, match="ended"):
            c.send(conv, "too late")
        assert c.get(conv).status == "ended"
        assert all(e.content != {"text": "too late"} for e in c.events(conv).events)


def test_too_large_writes_nothing_and_the_client_reconnects(start_agentd):
    a = start_agentd("[agentd]\nmax_line = 1k\n")
    with Client(a.socket) as c:
        conv = c.create("echo")
        with pytest.raises(TooLarge) as ei:
            c.send(conv, "x" * 2000)
        assert ei.value.code == "too_large"
        assert c.events(conv).events == []  # a new connection: agentd closed the old one
        # Far over the socket's buffer: agentd answers and closes while the client is still writing.
        # The write fails, the reply is read anyway, and the send is not retried.
        with pytest.raises(TooLarge):
            c.send(conv, "x" * (4 << 20))
        assert c.retries == 0
        assert c.send(conv, "small").seq == 1
        assert [e.content for e in c.events(conv).events][:1] == [{"text": "small"}]


def test_store_full_writes_nothing(start_agentd):
    a = start_agentd("[agentd]\nmap_size = 2m\nmax_map_size = 2m\n")
    with Client(a.socket) as c:
        conv = c.create("echo")
        acked = []
        for i in range(200):
            try:
                acked.append(c.send(conv, "x" * 60000, event_id=f"e{i}"))
            except StoreFull as e:
                assert e.code == "store_full" and "full" in e.message
                failed = f"e{i}"
                break
        else:
            raise AssertionError("the store never filled")
        assert len(acked) > 5
        ids = [e.event_id for e in c.events(conv, type="user_msg").events]
        assert ids == [r.event_id for r in acked] and failed not in ids
        assert c.ping()


def test_unavailable_during_shutdown(agentd):
    c = Client(agentd.socket, retry_for=0)
    conv = c.create("echo")
    got = []

    def long_poll():
        try:
            got.append(c.events(conv, after=0, wait_ms=60000))
        except AgentdError as e:
            got.append(e)

    # The long-poll is waiting once it was written and agentd has read it: nothing left in the socket's
    # queue to agentd (an empty queue before the write proves nothing).
    sent = threading.Event()
    conn, send = c._conn, c._conn.send

    def send_then_tell(data, timeout):
        send(data, timeout)
        sent.set()
    conn.send = send_then_tell
    t = threading.Thread(target=long_poll)
    t.start()
    wait_for(lambda: sent.is_set() and outq(conn.sock) == 0, 10, "the long-poll read")
    Client(agentd.socket).shutdown()
    t.join(scaled(20))
    assert not t.is_alive()
    assert isinstance(got[0], Unavailable) and got[0].code == "unavailable", got
    assert agentd.wait(20) == 0


def test_internal_on_a_damaged_record(agentd):
    with Client(agentd.socket) as c:
        c.create("echo", conversation="ok")
        c.create("echo", conversation="bad")
    agentd.stop()
    damage_conv(agentd.data_dir, "bad")
    agentd.start()
    with Client(agentd.socket) as c:
        with pytest.raises(Internal, match="corrupt record") as ei:
            c.get("bad")
        assert ei.value.code == "internal"
        assert c.get("ok").id == "ok"


def test_connection_errors(tmp_path):
    missing = str(tmp_path / "none.sock")
    with pytest.raises(AgentdConnectionError, match=r"cannot connect to .*none\.sock: No such file or directory "
                                                    r"\(is agentd running\?\)") as ei:
        Client(missing).ping()  # never reached: fails at once, no retrying
    assert ei.value.code is None
    # a listener that never answers: AgentdTimeout after the client's timeout
    path = str(tmp_path / "mute.sock")
    mute = socket.socket(socket.AF_UNIX)
    mute.bind(path)
    mute.listen()
    try:
        with pytest.raises(AgentdTimeout, match="no reply from agentd within 0.2 s") as ei:
            Client(path, timeout=0.2).ping()
        assert ei.value.sent is True
    finally:
        mute.close()


# The store's record layout, as tests/proc/test_store.py damages it (LMDB's own mdb_dump and mdb_load).
def db_get(data, db, key):
    out = subprocess.run(["mdb_dump", "-s", db, data], capture_output=True, text=True, check=True).stdout
    lines = out.split("HEADER=END\n", 1)[1].splitlines()
    for k, v in zip(lines[0::2], lines[1::2]):
        if k.strip() == key:
            return v.strip()
    raise AssertionError(f"no key {key} in {db}")


def damage_conv(data, conv):
    """Make the conversation's record undecodable: a msgpack string where the record's array is."""
    v = bytes.fromhex(db_get(data, "conv_ids", conv.encode().hex()))
    n = v[0] if v[0] < 0x80 else int.from_bytes(v[1:], "big")
    dump = ("VERSION=3\nformat=bytevalue\ndatabase=convs\ntype=btree\nHEADER=END\n"
            f" {n.to_bytes(8, 'big').hex()}\n a178\nDATA=END\n")
    subprocess.run(["mdb_load", "-s", "convs", data], input=dump, text=True, check=True)


def test_a_reply_without_the_promised_fields_is_an_agentd_error(tmp_path):
    path = str(tmp_path / "odd.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen()

    def answer():
        conn, _ = srv.accept()
        with conn, conn.makefile("rb") as f:
            f.readline()
            conn.sendall(b'{"id":1,"ok":true}\n')  # ping without "version"
            f.readline()
            conn.sendall(b'{"id":99,"ok":true,"version":"x"}\n')  # another request's id

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        c = Client(path, timeout=scaled(10))
        with pytest.raises(AgentdError, match=r"unexpected reply \(KeyError: 'version'\)") as ei:
            c.ping()
        assert type(ei.value) is AgentdError and ei.value.code is None
        with pytest.raises(AgentdConnectionError, match="reply for request 99 while waiting for 2"):
            c.create("echo")  # not retried: create is not idempotent
        t.join(scaled(10))
    finally:
        srv.close()
