"""The asyncio client: the same methods as Client, each a coroutine (`await client.get(c)`), and
AsyncWatch, an async iterator over a `watch` stream."""

from __future__ import annotations

import asyncio
import errno
import os
import select
import socket
import time
from typing import List, Optional, Union

from ._flows import Stepper
from ._ops import NO_LIMIT, _Backoff, _Call, _Ops, decode, encode, finish, socket_path, watch_item
from .errors import (AgentdConnectionError, AgentdError, AgentdTimeout, NotFound, TooLarge, Unavailable,
                     error_from_reply)
from .types import Delta, Event


class _Conn(asyncio.Protocol):
    """One connection: a line buffer that stays readable after the connection failed (asyncio's
    StreamReader hides buffered data once it has an error: agentd's too_large reply to a request it
    stopped reading would be lost), and a readline that a cancellation (a timeout) leaves intact."""

    def __init__(self):
        self.transport: Optional[asyncio.Transport] = None
        self.buf = bytearray()
        self.scan = 0
        self.lost = False  # no more data will come (EOF, error, closed)
        self.error: Optional[BaseException] = None
        self._paused = False
        self._waiters: List[asyncio.Future] = []

    # -- asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buf += data
        self._wake()

    def eof_received(self):
        self.lost = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc):
        self.lost = True
        self.error = exc
        self._wake()

    def pause_writing(self):
        self._paused = True

    def resume_writing(self):
        self._paused = False
        self._wake()

    def _wake(self):
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _wait(self):
        w = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        await w

    # -- for the client
    async def write(self, data: bytes):
        if self.lost or self.transport.is_closing():
            raise ConnectionResetError(str(self.error or "the connection is closed"))
        self.transport.write(data)
        while self._paused and not self.lost:
            await self._wait()
        if self.lost and self.error is not None:
            raise self.error if isinstance(self.error, OSError) else ConnectionResetError(str(self.error))

    async def readline(self) -> Optional[bytes]:
        """The next line without its newline; None when no more will come."""
        while True:
            nl = self.buf.find(b"\n", self.scan)
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                self.scan = 0
                return line
            self.scan = len(self.buf)
            if self.lost:
                return None
            await self._wait()

    def peer_closed(self) -> bool:
        """Whether agentd closed the connection, even when the loop has not noticed yet (it learns of an
        EOF only when it next polls: after a restart while the loop was busy, say)."""
        if self.lost or self.transport.is_closing():
            return True
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        r, _, _ = select.select([sock.fileno()], [], [], 0)
        if not r:
            return False
        dup = socket.socket(fileno=os.dup(sock.fileno()))
        try:
            return dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            dup.close()

    def close(self):
        if self.transport is not None:
            self.transport.close()
        self.lost = True
        self._wake()


async def _open(path: str, timeout: float) -> _Conn:
    loop = asyncio.get_running_loop()
    try:
        _, conn = await asyncio.wait_for(loop.create_unix_connection(_Conn, path), timeout)
        return conn
    except asyncio.TimeoutError:
        raise AgentdTimeout(f"cannot connect to {path}: timed out") from None
    except OSError as e:
        hint = " (is agentd running?)" if e.errno in (errno.ENOENT, errno.ECONNREFUSED) else ""
        raise AgentdConnectionError(f"cannot connect to {path}: {e.strerror or e}{hint}") from None


class AsyncClient(_Ops):
    """The asyncio twin of Client: same arguments (socket, timeout, retry_for), same methods, each
    awaited. One request at a time per client (an asyncio.Lock); use several clients for concurrency."""

    def __init__(self, socket: Optional[str] = None, *, timeout: float = 60.0, retry_for: float = 30.0):
        self.socket_path = socket_path(socket)
        self.timeout = timeout
        self.retry_for = retry_for
        self._conn: Optional[_Conn] = None
        self._lock: Optional[asyncio.Lock] = None
        self._next_id = 0
        self._reached = False
        self.retries = 0

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self):
        """Close the connection (the next request opens a new one)."""
        self._drop()

    def _drop(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def _run(self, call: _Call):
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            backoff = _Backoff(self.retry_for)
            while True:
                try:
                    try:
                        return await self._attempt(call)
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
                    await asyncio.sleep(pause)

    async def _flow(self, steps):
        s = Stepper(steps)
        while (call := s.next()) is not None:
            try:
                s.result = await self._run(call)
            except AgentdError as e:
                s.error = e
        return s.value

    async def _attempt(self, call: _Call):
        # A connection agentd closed while idle is replaced before a request that must not be sent
        # twice goes out on it.
        if self._conn is not None and self._conn.peer_closed():
            self._drop()
        if self._conn is None:
            self._conn = await _open(self.socket_path, self.timeout)
        conn = self._conn
        self._next_id += 1
        req_id = self._next_id
        data = encode(call.op, call.fields, req_id)
        # A request over max_line: agentd answers too_large and closes the connection while the rest
        # is still being written. The write fails then, but the reply is there to read.
        send_error = None
        try:
            await asyncio.wait_for(conn.write(data), self.timeout)
        except asyncio.TimeoutError:
            self._drop()  # agentd stopped reading: part of the line may be in, the connection is unusable
            raise AgentdTimeout(f"agentd did not take the request within {self.timeout:g} s", call.op, True) from None
        except OSError as e:
            send_error = e
        if send_error is not None:
            limit = 1.0
        else:
            limit = None if call.timeout == NO_LIMIT else self.timeout + (call.timeout or 0)
        try:
            line = await asyncio.wait_for(conn.readline(), limit)
        except asyncio.TimeoutError:
            line = None
            if send_error is None:
                self._drop()
                raise AgentdTimeout(f"no reply from agentd within {limit:g} s", call.op, True) from None
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

    async def watch(self, conversation: str, *, after: Optional[int] = None, resume: bool = False) -> "AsyncWatch":
        """Follow the conversation: an AsyncWatch (`async for item in w`: Event and Delta) on a
        connection of its own; as Client.watch."""
        w = AsyncWatch(conversation, self.socket_path, self.timeout, resume, self.retry_for)
        await w._start(after)
        return w


class AsyncWatch:
    """The async iterator over a watch stream; as Watch (.last_seq, .resumes, next(timeout), events(),
    resume), aclose() to end it."""

    def __init__(self, conversation: str, path: str, timeout: float, resume: bool = False,
                 retry_for: float = 30.0):
        self.conversation = conversation
        self.last_seq = 0
        self.resumes = 0
        self._path = path
        self._timeout = timeout
        self._resume = resume
        self._retry_for = retry_for
        self._conn: Optional[_Conn] = None
        self._closed = False
        self._pos = 0

    async def _start(self, after: Optional[int]):
        reply = await self._open(after)
        self.last_seq = reply.get("last_seq", 0)
        self._pos = self.last_seq if after is None else after

    async def _open(self, after: Optional[int]) -> dict:
        fields = {"conversation": self.conversation}
        if after is not None:
            fields["after"] = after
        data = encode("watch", fields, 1)
        timeout = self._timeout
        self._conn = await _open(self._path, timeout)
        try:
            try:
                await asyncio.wait_for(self._conn.write(data), timeout)
            except OSError:
                pass  # a refusal may still be there to read
            line = await asyncio.wait_for(self._conn.readline(), timeout)
            if line is None:
                raise AgentdConnectionError("agentd closed the connection before replying", "watch", True)
            reply = decode(line, "watch", 1)
            if not reply["ok"]:
                raise error_from_reply(reply, "watch")
            return reply
        except asyncio.TimeoutError:
            self._drop()
            raise AgentdTimeout(f"no reply from agentd within {timeout:g} s", "watch", True) from None
        except BaseException:
            self._drop()
            raise

    async def _reopen(self) -> bool:
        give_up = time.monotonic() + self._retry_for
        pause = 0.02
        while True:
            try:
                await self._open(self._pos)
                self.resumes += 1
                return True
            except NotFound:
                return False
            except (AgentdConnectionError, Unavailable):
                if self._closed or time.monotonic() >= give_up:
                    raise
            await asyncio.sleep(min(pause, max(0.0, give_up - time.monotonic())))
            pause = min(pause * 2, 1.0)

    def __aiter__(self):
        return self

    async def __anext__(self) -> Union[Event, Delta]:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def next(self, timeout: Optional[float] = None) -> Union[Event, Delta, None]:
        """The next Event or Delta; None when the stream ended; AgentdTimeout when nothing came within
        timeout seconds (the watch goes on, and a line that was arriving is still delivered next)."""
        while True:
            if self._conn is None:
                return None
            try:
                line = await asyncio.wait_for(self._conn.readline(), timeout)
            except asyncio.TimeoutError:
                raise AgentdTimeout(f"nothing from the watch within {timeout:g} s", "watch", False) from None
            if line is None:
                self._drop()
                if self._resume and not self._closed and await self._reopen():
                    continue
                self._closed = True
                return None
            item = watch_item(line)
            if item is None:
                continue  # a kind of line this client does not know
            if isinstance(item, Event):
                self.last_seq = self._pos = item.seq
            return item

    async def events(self, timeout: Optional[float] = None):
        """Async-iterate over the events only (deltas skipped); timeout as in next()."""
        while True:
            item = await self.next(timeout)
            if item is None:
                return
            if isinstance(item, Event):
                yield item

    def _drop(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def aclose(self):
        """End the watch (close its connection)."""
        self._closed = True
        self._drop()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
