"""The synchronous client: one persistent connection, one request at a time (a lock makes it safe to
share between threads), and Watch, an iterator over a `watch` stream on a connection of its own."""

from __future__ import annotations

import errno
import select
import socket
import threading
import time
from typing import Optional, Union

from ._flows import Stepper
from ._ops import NO_LIMIT, _Backoff, _Call, _Ops, decode, encode, finish, socket_path, watch_item
from .errors import (AgentdConnectionError, AgentdError, AgentdTimeout, NotFound, TooLarge, Unavailable,
                     error_from_reply)
from .types import Delta, Event


class _Conn:
    """A connected socket with a line buffer."""

    def __init__(self, path: str, timeout: float):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(path)
        except socket.timeout:
            s.close()
            raise AgentdTimeout(f"cannot connect to {path}: timed out") from None
        except OSError as e:
            s.close()
            hint = " (is agentd running?)" if e.errno in (errno.ENOENT, errno.ECONNREFUSED) else ""
            raise AgentdConnectionError(f"cannot connect to {path}: {e.strerror or e}{hint}") from None
        self.sock = s
        self.buf = bytearray()
        self.scan = 0
        self.eof = False

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def closed_by_peer(self) -> bool:
        """Whether agentd has closed this idle connection (EOF or an error is pending): checked before a
        request that must not be sent twice, so it goes out on a live connection."""
        if self.eof:
            return True
        r, _, _ = select.select([self.sock], [], [], 0)
        if not r:
            return False
        try:
            data = self.sock.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not data:
            return True
        self.buf += data  # unsolicited bytes: kept, and the reply check will refuse them
        return False

    def send(self, data: bytes, timeout: Optional[float]):
        self.sock.settimeout(timeout)
        self.sock.sendall(data)

    def readline(self, deadline: float) -> Optional[bytes]:
        """The next line (without newline), None at end of stream; socket.timeout past the deadline
        (the partial line stays buffered)."""
        while True:
            nl = self.buf.find(b"\n", self.scan)
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                self.scan = 0
                return line
            self.scan = len(self.buf)
            if self.eof:
                return None
            if deadline == NO_LIMIT:
                self.sock.settimeout(None)
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
            self.buf += data


class Client(_Ops):
    """A client of agentd's control socket.

    socket: the socket path; else $AGENTD_SOCKET; else ./agentd-data/agentd.sock.
    timeout: seconds to wait for agentd to take a request and for its reply (events' wait_ms is added; compact and shutdown wait without a
      limit); AgentdTimeout past it.
    retry_for: after a lost connection (agentd restarted, killed, the connection closed), the ops safe to
      repeat (reads and send) reconnect and are sent again, with growing pauses, for up to this many
      seconds; 0 turns retrying off. A client that never got a reply fails at once instead: a wrong path
      or an agentd not started is reported without waiting.
    """

    def __init__(self, socket: Optional[str] = None, *, timeout: float = 60.0, retry_for: float = 30.0):
        self.socket_path = socket_path(socket)
        self.timeout = timeout
        self.retry_for = retry_for
        self._conn: Optional[_Conn] = None
        self._lock = threading.Lock()
        self._next_id = 0
        self._reached = False  # a reply came once: agentd exists at this path
        self.retries = 0  # requests sent again after a lost connection (for tests and logs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Close the connection (the next request opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _drop(self):
        self.close()

    def _run(self, call: _Call):
        with self._lock:
            backoff = _Backoff(self.retry_for)
            while True:
                try:
                    try:
                        return self._attempt(call)
                    except AgentdError:
                        raise
                    except BaseException:
                        # interrupted mid-request (KeyboardInterrupt, a cancelled task): the reply may
                        # still come, and must not be taken for the next request's
                        self._drop()
                        raise
                except (AgentdConnectionError, Unavailable) as e:
                    pause = backoff.next_pause(call, self._reached, e)
                    if pause is None:
                        raise
                    self.retries += 1
                    time.sleep(pause)

    def _flow(self, steps):
        s = Stepper(steps)
        while (call := s.next()) is not None:
            try:
                s.result = self._run(call)
            except AgentdError as e:
                s.error = e
        return s.value

    def _attempt(self, call: _Call):
        if self._conn is not None and self._conn.closed_by_peer():
            self._drop()
        if self._conn is None:
            self._conn = _Conn(self.socket_path, self.timeout)
        conn = self._conn
        self._next_id += 1
        req_id = self._next_id
        data = encode(call.op, call.fields, req_id)
        # A request over max_line: agentd answers too_large and closes the connection while the rest
        # is still being written. The write fails then, but the reply is there to read.
        send_error = None
        try:
            conn.send(data, self.timeout)
        except socket.timeout:
            self._drop()  # agentd stopped reading: part of the line may be in, the connection is unusable
            raise AgentdTimeout(f"agentd did not take the request within {self.timeout:g} s", call.op, True) from None
        except OSError as e:
            send_error = e
        if send_error is not None:
            deadline = time.monotonic() + 1.0
        elif call.timeout == NO_LIMIT:
            deadline = NO_LIMIT
        else:
            deadline = time.monotonic() + self.timeout + (call.timeout or 0)
        try:
            line = conn.readline(deadline)
        except socket.timeout:
            line = None
            if send_error is None:
                self._drop()
                raise AgentdTimeout(f"no reply from agentd within {self.timeout + (call.timeout or 0):g} s",
                                    call.op, True) from None
        except OSError as e:
            line = None
            send_error = send_error or e
        if line is None:
            self._drop()
            why = f"connection to agentd lost: {send_error}" if send_error else "agentd closed the connection before replying"
            raise AgentdConnectionError(why, call.op, True)
        try:
            reply = decode(line, call.op, req_id)
        except AgentdError:
            self._drop()
            raise
        self._reached = True
        if reply["ok"] is False and reply.get("error") in (TooLarge.code, Unavailable.code):
            self._drop()  # agentd closes the connection after too_large; unavailable: it is going away
        return finish(call, reply)

    def watch(self, conversation: str, *, after: Optional[int] = None, resume: bool = False) -> "Watch":
        """Follow the conversation: a Watch (an iterator of Event and Delta) on a connection of its own.
        after=None: only events committed from now; after=0: the whole log first, then live, with no
        gap. Errors of the request (NotFound, ...) are raised here. Iteration ends when agentd closes
        the stream (shutdown, the conversation deleted); with resume=True the stream is opened again
        after a lost connection (for up to retry_for seconds) and ends only with the conversation."""
        return Watch(self.socket_path, conversation, after, self.timeout, resume, self.retry_for)


class Watch:
    """An iterator over a watch stream: yields Event (every event, in seq order, no gaps) and Delta (a
    model's streamed text, a preview). .last_seq is the conversation's last seq when the watch started,
    then the seq of the last event yielded. Close it (or use `with`) to end the watch.

    With resume=True a stream that ends (agentd restarted, the connection lost) is opened again after the
    last event yielded, retrying for up to retry_for seconds: no event is missed or repeated. It ends
    only when the conversation is gone (deleted), or raises AgentdConnectionError when agentd stays away."""

    def __init__(self, path: str, conversation: str, after: Optional[int], timeout: float,
                 resume: bool = False, retry_for: float = 30.0):
        self.conversation = conversation
        self.resumes = 0  # streams opened again after one ended
        self._path = path
        self._timeout = timeout
        self._resume = resume
        self._retry_for = retry_for
        self._conn: Optional[_Conn] = None
        self._closed = False
        reply = self._open(after)
        self.last_seq: int = reply.get("last_seq", 0)
        self._pos = self.last_seq if after is None else after  # the seq a resumed stream starts after

    def _open(self, after: Optional[int]) -> dict:
        fields = {"conversation": self.conversation}
        if after is not None:
            fields["after"] = after
        data = encode("watch", fields, 1)
        timeout = self._timeout
        self._conn = _Conn(self._path, timeout)
        try:
            try:
                self._conn.send(data, timeout)
            except socket.timeout:
                raise
            except OSError:
                pass  # a refusal may still be there to read
            line = self._conn.readline(time.monotonic() + timeout)
            if line is None:
                raise AgentdConnectionError("agentd closed the connection before replying", "watch", True)
            reply = decode(line, "watch", 1)
            if not reply["ok"]:
                raise error_from_reply(reply, "watch")
            return reply
        except socket.timeout:
            self._drop()
            raise AgentdTimeout(f"no reply from agentd within {timeout:g} s", "watch", True) from None
        except OSError as e:
            self._drop()
            if isinstance(e, AgentdError):
                raise
            raise AgentdConnectionError(f"connection to agentd lost: {e}", "watch", True) from None
        except BaseException:
            self._drop()
            raise

    def _reopen(self) -> bool:
        """Open the stream again after self._pos: True, or False when the conversation is gone."""
        give_up = time.monotonic() + self._retry_for
        pause = 0.02
        while True:
            try:
                self._open(self._pos)
                self.resumes += 1
                return True
            except NotFound:
                return False
            except (AgentdConnectionError, Unavailable):
                if self._closed or time.monotonic() >= give_up:
                    raise
            time.sleep(min(pause, max(0.0, give_up - time.monotonic())))
            pause = min(pause * 2, 1.0)

    def __iter__(self):
        return self

    def __next__(self) -> Union[Event, Delta]:
        item = self.next()
        if item is None:
            raise StopIteration
        return item

    def next(self, timeout: Optional[float] = None) -> Union[Event, Delta, None]:
        """The next Event or Delta; None when the stream ended. With timeout (seconds), AgentdTimeout
        when nothing came in time (the watch goes on: call again)."""
        while True:
            if self._conn is None:
                return None
            deadline = NO_LIMIT if timeout is None else time.monotonic() + timeout
            try:
                line = self._conn.readline(deadline)
            except socket.timeout:
                raise AgentdTimeout(f"nothing from the watch within {timeout:g} s", "watch", False) from None
            except OSError:
                line = None
            if line is None:
                self._drop()
                if self._resume and not self._closed and self._reopen():
                    continue
                self._closed = True
                return None
            item = watch_item(line)
            if item is None:
                continue  # a kind of line this client does not know
            if isinstance(item, Event):
                self.last_seq = self._pos = item.seq
            return item

    def events(self, timeout: Optional[float] = None):
        """Iterate over the events only (deltas skipped); timeout as in next()."""
        while True:
            item = self.next(timeout)
            if item is None:
                return
            if isinstance(item, Event):
                yield item

    def _drop(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self):
        """End the watch."""
        self._closed = True
        self._drop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
