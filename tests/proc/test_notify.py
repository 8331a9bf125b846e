"""agentd under a Type=notify unit (packaging/agentd.service, sd_notify(3)), with the test as systemd: a
datagram socket in $NOTIFY_SOCKET. READY=1 comes once the control socket answers, from agentd's own pid;
WATCHDOG=1 comes from the loop's tick at half $WATCHDOG_USEC, and not at all without it; STOPPING=1 when
shutdown begins."""
import os
import signal
import socket
import struct
import time

import harness
from harness import Agentd, Client, scaled, wait_for


class Systemd:
    """The manager's end of the notify socket: datagrams with the sender's credentials."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(self.path)
        self.messages = []  # (pid, {key: value}, monotonic time)

    def poll(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            return None
        pid = None
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", payload[:12])[0]
        fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
        self.messages.append((pid, fields, time.monotonic()))
        return self.messages[-1]

    def wait(self, key, timeout=10):
        deadline = time.monotonic() + scaled(timeout)
        for m in self.messages:
            if key in m[1]:
                return m
        while time.monotonic() < deadline:
            m = self.poll(max(0.01, deadline - time.monotonic()))
            if m and key in m[1]:
                return m
        raise AssertionError(f"no {key} within {scaled(timeout):g}s; got {self.messages}")

    def close(self):
        self.sock.close()


def notified(watchdog_usec=None):
    a = Agentd(start=False)
    sd = Systemd(a.dir)
    a.env["NOTIFY_SOCKET"] = sd.path
    a.env.pop("WATCHDOG_USEC", None)
    a.env.pop("WATCHDOG_PID", None)
    if watchdog_usec:
        a.env["WATCHDOG_USEC"] = str(watchdog_usec)
    return a, sd


def test_ready_once_listening_then_stopping():
    a, sd = notified()
    try:
        a._spawn("")
        pid, fields, _ = sd.wait("READY", 10)
        # Ready means ready: the socket answers now, without waiting.
        with Client(a.socket) as c:
            assert c.request({"op": "ping", "id": 1})["ok"] is True
        assert pid == a.pid, (pid, a.pid)
        assert fields["READY"] == "1" and fields["STATUS"] == f"listening on {a.socket}", fields
        # No watchdog was asked for: no pings.
        assert sd.poll(scaled(0.5)) is None, sd.messages
        a.kill(signal.SIGTERM, wait=False)
        pid, fields, _ = sd.wait("STOPPING", 10)
        assert pid == a.pid and fields["STOPPING"] == "1", fields
        assert a.wait(10) == 0
    finally:
        sd.close()
        a.close()


def test_watchdog_pings_from_the_loop():
    t_start = time.monotonic()  # before agentd starts: no ping can be older
    a, sd = notified(watchdog_usec=400000)  # 400 ms: a ping every 200 ms
    try:
        a._spawn("")
        sd.wait("READY", 10)
        c = a.create()
        a.send(c, "hello")  # the loop has other work too
        t0 = time.monotonic()
        def pings():
            return [m for m in sd.messages if m[1].get("WATCHDOG") == "1"]
        # Four pings come, however slow the machine (waited for, not counted in a fixed time) ...
        deadline = t0 + scaled(30)
        while len(pings()) < 4:
            assert time.monotonic() < deadline, f"fewer than 4 watchdog pings in {scaled(30):g}s: {sd.messages}"
            sd.poll(0.05)
        assert all(m[0] == a.pid for m in pings()), pings()
        # ... and not a flood: no more than one every 100 ms since agentd started (a loaded machine only makes
        # them fewer).
        assert len(pings()) <= (time.monotonic() - t_start) / 0.1 + 1, [m[2] - t0 for m in pings()]
        # A loop that stops turning stops the pings: SIGSTOP freezes it.
        os.kill(a.pid, signal.SIGSTOP)
        while sd.poll(0.05):
            pass
        assert sd.poll(scaled(0.6)) is None, "a ping from a stopped agentd"
        os.kill(a.pid, signal.SIGCONT)
        sd.wait("WATCHDOG", 5)
    finally:
        sd.close()
        a.close()


def test_a_watchdog_for_another_pid_is_not_ours():
    a, sd = notified(watchdog_usec=200000)
    a.env["WATCHDOG_PID"] = "1"  # systemd sets it to the main pid: a child must not ping
    try:
        a._spawn("")
        sd.wait("READY", 10)
        assert sd.poll(scaled(0.6)) is None, sd.messages
    finally:
        sd.close()
        a.close()


harness.main(globals())
