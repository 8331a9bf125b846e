"""pytest fixtures: the real agentd (tests/proc/harness.py) in a temporary directory per test, and the
client package from this checkout (not an installed copy)."""
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CLIENT_ROOT = HERE.parent
REPO = CLIENT_ROOT.parents[1]
sys.path.insert(0, str(CLIENT_ROOT))
sys.path.insert(0, str(REPO / "tests" / "proc"))

import harness  # noqa: E402

HUMAN_TOOL = """
[tool.approve]
executor = human
prompt = Approve the payment?
expires = 1h
"""


@pytest.fixture
def start_agentd():
    """start_agentd(config=None, **kw) -> harness.Agentd, started; every one is stopped (asserting a clean
    exit unless the test ended it) and removed after the test."""
    started = []

    def start(config=None, **kw):
        a = harness.Agentd(config=config, **kw)
        started.append(a)
        return a

    yield start
    try:
        for a in started:
            if a.running():
                a.stop()
            a.check_sanitizers()
    finally:
        for a in started:
            a.close()


@pytest.fixture
def agentd(start_agentd):
    """agentd with the human tool `approve` configured."""
    return start_agentd(HUMAN_TOOL)


def wait_for(pred, timeout=10, what="a condition"):
    return harness.wait_for(pred, timeout, what)


def scaled(secs):
    return harness.scaled(secs)


def streaming_model(a, name="stream"):
    """Configure (a.write_config; restart agentd to use it) a model NAME that streams the deltas "Hel"
    and "lo", then waits for the file DIR/go before answering "Hello". Returns the gate's path."""
    gate = os.path.join(a.dir, "go")
    script = a.script(name + ".py", f"""
        import json, os, sys, time
        json.load(sys.stdin)
        for d in ("Hel", "lo"):
            print(json.dumps({{"delta": d}}), flush=True)
        while not os.path.exists({gate!r}):
            time.sleep(0.02)
        print(json.dumps({{"text": "Hello"}}))
        """)
    a.write_config(f"[model.{name}]\ncommand = {script}\n")
    return gate


class Proxy:
    """A Unix socket that forwards connections to agentd's, for losing replies on purpose.
    drop_reply(op): on the next request of that op, agentd gets the request (and executes it), but its
    reply is swallowed and both connections closed: what a client sees when agentd dies, or the
    connection breaks, between committing and answering."""

    def __init__(self, target, path):
        import socket as _socket
        import threading
        self.target = target
        self.path = path
        self.drop_op = None
        self.dropped = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(16)
        self._threads = []
        self._socks = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()

    def drop_reply(self, op):
        with self._lock:
            self.drop_op = op

    def _accept(self):
        import socket as _socket
        import threading
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            upstream.connect(self.target)
            self.connections += 1
            self._socks += [client, upstream]
            state = {"drop_next_reply": False}
            for fn in (self._up, self._down):
                t = threading.Thread(target=fn, args=(client, upstream, state), daemon=True)
                t.start()

    def _up(self, client, upstream, state):
        import json as _json
        f = client.makefile("rb")
        try:
            for line in f:
                with self._lock:
                    try:
                        op = _json.loads(line).get("op")
                    except ValueError:
                        op = None
                    if op is not None and op == self.drop_op:
                        self.drop_op = None
                        state["drop_next_reply"] = True
                upstream.sendall(line)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _down(self, client, upstream, state):
        f = upstream.makefile("rb")
        try:
            for line in f:
                if state["drop_next_reply"]:
                    self.dropped += 1
                    break
                client.sendall(line)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)

    def close(self):
        self._listener.close()
        for s in self._socks:
            _close(s)


def _close(s):
    import socket as _socket
    try:
        s.shutdown(_socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


@pytest.fixture
def proxy(agentd):
    p = Proxy(agentd.socket, os.path.join(agentd.dir, "proxy.sock"))
    yield p
    p.close()


def outq(sock):
    """Bytes written to the socket that its peer has not read yet (SIOCOUTQ)."""
    import array
    import fcntl
    import termios
    buf = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, buf)
    return buf[0]
