"""Errors: one exception class per error code of the control protocol, all subclasses of AgentdError.

An error reply `{"ok": false, "error": CODE, "message": ...}` raises the class of CODE (BadRequest for
`bad_request`, ...), carrying .code, .message and .op. A code this client does not know (a newer agentd)
raises AgentdError itself with that .code. Failures to talk to agentd at all (no socket, the connection
lost, no reply in time) raise AgentdConnectionError, also a subclass of AgentdError (and of the built-in
ConnectionError); its .code is None since agentd never replied.
"""

from typing import Dict, Optional, Type


class AgentdError(Exception):
    """Base of every error this client raises. .code is the protocol's error code (None for a
    connection failure), .message agentd's message, .op the op that failed."""

    code: Optional[str] = None

    def __init__(self, message: str, code: Optional[str] = None, op: Optional[str] = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.op = op

    def __str__(self) -> str:
        where = f"{self.op}: " if self.op else ""
        return f"{where}{self.code}: {self.message}" if self.code else f"{where}{self.message}"


class BadRequest(AgentdError):
    """`bad_request`: malformed or ill-typed request, unknown field, invalid id, unknown model or tool.
    Also raised before sending for a value that cannot be encoded as JSON."""
    code = "bad_request"


class UnknownOp(AgentdError):
    """`unknown_op`: the op names no op (only reachable through Client.request)."""
    code = "unknown_op"


class NotFound(AgentdError):
    """`not_found`: no such conversation or tool call."""
    code = "not_found"


class Conflict(AgentdError):
    """`conflict`: the conversation exists (create), or is ended (send, settings update), or a send's
    expected_seq is not the conversation's last seq: .last_seq is then that seq (None otherwise)."""
    code = "conflict"
    last_seq: Optional[int] = None


class Stale(AgentdError):
    """`stale`: resolve of a tool call that is not pending (unknown, settled, expired)."""
    code = "stale"


class TooLarge(AgentdError):
    """`too_large`: the request line is over agentd's max_line; agentd closed the connection after it
    (the client reconnects for the next request)."""
    code = "too_large"


class StoreFull(AgentdError):
    """`store_full`: the store's map or the disk is full; nothing of the request was written."""
    code = "store_full"


class Unavailable(AgentdError):
    """`unavailable`: agentd is shutting down, or refused this peer's uid."""
    code = "unavailable"


class Internal(AgentdError):
    """`internal`: anything else (the message says what)."""
    code = "internal"


class AgentdConnectionError(AgentdError, ConnectionError):
    """agentd could not be reached, the connection was lost, or no reply came within the timeout.
    .code is None. .sent tells whether the request had been written when it happened: a request that
    was sent may have been executed (send's event_id makes retrying it safe; the client retries the ops
    that are safe to repeat by itself)."""

    def __init__(self, message: str, op: Optional[str] = None, sent: bool = False):
        AgentdError.__init__(self, message, None, op)
        self.sent = sent


class AgentdTimeout(AgentdConnectionError, TimeoutError):
    """No reply within the client's timeout (the connection is closed: a late reply is never taken for
    the next request's)."""


ERRORS: Dict[str, Type[AgentdError]] = {
    cls.code: cls
    for cls in (BadRequest, UnknownOp, NotFound, Conflict, Stale, TooLarge, StoreFull, Unavailable, Internal)
}


def error_from_reply(reply: dict, op: Optional[str] = None) -> AgentdError:
    """The exception for an error reply: the class of its code, or AgentdError for a code not known here."""
    code = reply.get("error")
    message = reply.get("message")
    if not isinstance(message, str):
        message = "(no message)"
    if not isinstance(code, str):
        return AgentdError(f"error reply without a code: {reply!r}", "internal", op)
    cls = ERRORS.get(code)
    if cls is None:
        return AgentdError(message, code, op)
    err = cls(message, code, op)
    if isinstance(reply.get("last_seq"), int):
        err.last_seq = reply["last_seq"]
    return err
