"""The asyncio client: the same methods as Client, each a coroutine (`await client.get(c)`), and
AsyncWatch, an async iterator over a `watch` stream."""

from __future__ import annotations

import asyncio
import errno
import os
import select
import socket
import time
from typing import Optional, Union

from ._ops import NO_LIMIT, _Call, _Ops, decode, encode, socket_path, watch_item
from .errors import AgentdConnectionError, AgentdError, AgentdTimeout, TooLarge, Unavailable, error_from_reply
from .types import Delta, Event

_LIMIT = 1 << 30  # replies can be long (an events page, an audit): the reader's line limit


async def _open(path: str, timeout: float):
    try:
        return await asyncio.wait_for(asyncio.open_unix_connection(path, limit=_LIMIT), timeout)
    except asyncio.TimeoutError:
        raise AgentdTimeout(f"cannot connect to {path}: timed out") from None
    except OSError as e:
        hint = " (is agentd running?)" if e.errno in (errno.ENOENT, errno.ECONNREFUSED) else ""
        raise AgentdConnectionError(f"cannot connect to {path}: {e.strerror or e}{hint}") from None


async def _readline(reader: asyncio.StreamReader) -> Optional[bytes]:
    """The next line without its newline; None at end of stream (a partial last line is dropped: agentd
    never sends one)."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        return None
    except (ConnectionResetError, BrokenPipeError):
        return None
    return line[:-1]


def _peer_closed(writer: asyncio.StreamWriter) -> bool:
    """Whether agentd closed the connection and the loop has not noticed yet (it learns of an EOF only
    when it next polls: after a restart while the loop was busy, at_eof() is still False)."""
    sock = writer.get_extra_info("socket")
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


class AsyncClient(_Ops):
    """The asyncio twin of Client: same arguments (socket, timeout, retry_for), same methods, each
    awaited. One request at a time per client (an asyncio.Lock); use several clients for concurrency."""

    def __init__(self, socket: Optional[str] = None, *, timeout: float = 60.0, retry_for: float = 30.0):
        self.socket_path = socket_path(socket)
        self.timeout = timeout
        self.retry_for = retry_for
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
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
        w = self._writer
        self._reader = self._writer = None
        if w is not None:
            w.close()
            try:
                await w.wait_closed()
            except OSError:
                pass

    def _drop(self):
        w = self._writer
        self._reader = self._writer = None
        if w is not None:
            w.close()

    async def _run(self, call: _Call):
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            give_up = time.monotonic() + self.retry_for
            pause = 0.02
            while True:
                try:
                    return await self._attempt(call)
                except (AgentdConnectionError, Unavailable) as e:
                    retry = (call.idempotent and self._reached and self.retry_for > 0
                             and not isinstance(e, AgentdTimeout) and time.monotonic() < give_up)
                    if not retry:
                        raise
                    self.retries += 1
                    await asyncio.sleep(min(pause, max(0.0, give_up - time.monotonic())))
                    pause = min(pause * 2, 1.0)

    async def _attempt(self, call: _Call):
        # A connection agentd closed while idle shows as EOF already received: replace it before a
        # request that must not be sent twice goes out on it.
        if self._reader is not None and (self._reader.at_eof() or self._writer.is_closing()
                                         or _peer_closed(self._writer)):
            self._drop()
        if self._reader is None:
            self._reader, self._writer = await _open(self.socket_path, self.timeout)
        reader, writer = self._reader, self._writer
        self._next_id += 1
        req_id = self._next_id
        data = encode(call.op, call.fields, req_id)
        try:
            writer.write(data)
            await writer.drain()
        except OSError as e:
            self._drop()
            raise AgentdConnectionError(f"connection to agentd lost while sending: {e}", call.op, True) from None
        limit = None if call.timeout == NO_LIMIT else self.timeout + (call.timeout or 0)
        try:
            line = await asyncio.wait_for(_readline(reader), limit)
        except asyncio.TimeoutError:
            self._drop()
            raise AgentdTimeout(f"no reply from agentd within {limit:g} s", call.op, True) from None
        except OSError as e:
            self._drop()
            raise AgentdConnectionError(f"connection to agentd lost: {e}", call.op, True) from None
        if line is None:
            self._drop()
            raise AgentdConnectionError("agentd closed the connection before replying", call.op, True)
        try:
            reply = decode(line, call.op, req_id)
        except AgentdError:
            self._drop()
            raise
        self._reached = True
        if reply["ok"]:
            return call.parse(reply)
        err = error_from_reply(reply, call.op)
        if isinstance(err, (TooLarge, Unavailable)):
            self._drop()
        raise err

    async def watch(self, conversation: str, *, after: Optional[int] = None) -> "AsyncWatch":
        """Follow the conversation: an AsyncWatch (`async for item in w`: Event and Delta) on a
        connection of its own; as Client.watch."""
        w = AsyncWatch(conversation)
        await w._start(self.socket_path, after, self.timeout)
        return w


class AsyncWatch:
    """The async iterator over a watch stream; as Watch (.last_seq, next(timeout), close())."""

    def __init__(self, conversation: str):
        self.conversation = conversation
        self.last_seq = 0
        self._reader = self._writer = None

    async def _start(self, path: str, after: Optional[int], timeout: float):
        fields = {"conversation": self.conversation}
        if after is not None:
            fields["after"] = after
        data = encode("watch", fields, 1)
        self._reader, self._writer = await _open(path, timeout)
        try:
            self._writer.write(data)
            await self._writer.drain()
            line = await asyncio.wait_for(_readline(self._reader), timeout)
            if line is None:
                raise AgentdConnectionError("agentd closed the connection before replying", "watch", True)
            reply = decode(line, "watch", 1)
            if not reply["ok"]:
                raise error_from_reply(reply, "watch")
        except asyncio.TimeoutError:
            await self.aclose()
            raise AgentdTimeout(f"no reply from agentd within {timeout:g} s", "watch", True) from None
        except AgentdError:
            await self.aclose()
            raise
        except OSError as e:
            await self.aclose()
            raise AgentdConnectionError(f"connection to agentd lost: {e}", "watch", True) from None
        self.last_seq = reply.get("last_seq", 0)

    def __aiter__(self):
        return self

    async def __anext__(self) -> Union[Event, Delta]:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def next(self, timeout: Optional[float] = None) -> Union[Event, Delta, None]:
        """The next Event or Delta; None when the stream ended; AgentdTimeout when nothing came within
        timeout seconds (the watch goes on)."""
        while True:
            if self._reader is None:
                return None
            try:
                # shield: a timeout must not cancel readuntil halfway and lose buffered bytes
                line = await asyncio.wait_for(asyncio.shield(self._pending()), timeout)
            except asyncio.TimeoutError:
                raise AgentdTimeout(f"nothing from the watch within {timeout:g} s", "watch", False) from None
            self._read_task = None
            if line is None:
                await self.aclose()
                return None
            item = watch_item(line)
            if item is None:
                continue
            if isinstance(item, Event):
                self.last_seq = item.seq
            return item

    def _pending(self):
        # The read in progress survives a timeout: the next call waits for the same line.
        task = getattr(self, "_read_task", None)
        if task is None:
            task = self._read_task = asyncio.ensure_future(_readline(self._reader))
        return task

    async def events(self, timeout: Optional[float] = None):
        """Async-iterate over the events only (deltas skipped)."""
        while True:
            item = await self.next(timeout)
            if item is None:
                return
            if isinstance(item, Event):
                yield item

    async def aclose(self):
        task = getattr(self, "_read_task", None)
        self._read_task = None
        if task is not None and not task.done():
            task.cancel()
        w = self._writer
        self._reader = self._writer = None
        if w is not None:
            w.close()
            try:
                await w.wait_closed()
            except OSError:
                pass

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
