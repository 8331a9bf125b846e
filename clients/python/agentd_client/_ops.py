"""What the sync and asyncio clients share: the socket path, request encoding, reply parsing, and the
methods themselves (one per op). Each method builds a _Call and returns self._run(call): the sync
client's _run returns the result, the asyncio client's returns a coroutine, so one definition serves both.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from typing import Any, Callable, Dict, Optional

from . import _flows
from .errors import AgentdConnectionError, AgentdTimeout, BadRequest
from .types import (BackupResult, BatchResult, Cancelled, Conversation, ConversationPage, Event, EventPage, ForkResult,
                    Extension, ModelCall, Resolution, Resumed, Run, RunPage, Schedule, SendResult, Settlement, Status,
                    Summary,
                    ToolCall, _build)

DEFAULT_SOCKET = "./agentd-data/agentd.sock"
SUN_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux
NO_LIMIT = math.inf

# The ops that are safe to repeat: reads, and send (agentd answers a repeated event_id with the original
# seq). After a lost connection these are sent again; the others raise AgentdConnectionError with .sent.
IDEMPOTENT = frozenset({"ping", "get", "list", "events", "tool_call", "tool_calls", "summary", "audit",
                        "status", "metrics", "send", "runs", "schedules"})


def socket_path(path: Optional[str] = None) -> str:
    """The socket to use: path when given, else $AGENTD_SOCKET when set and not empty, else agentd's
    default, ./agentd-data/agentd.sock (relative to the current directory)."""
    if path is None:
        path = os.environ.get("AGENTD_SOCKET") or DEFAULT_SOCKET
    path = os.fspath(path)
    if not path:
        raise ValueError("the socket path is empty")
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise ValueError(f"the socket path is longer than {SUN_PATH_MAX} bytes: {path}")
    return path


def new_event_id() -> str:
    """A fresh event id for send: 'py-' and 32 hex digits."""
    return "py-" + uuid.uuid4().hex


def encode(op: str, fields: Dict[str, Any], req_id: int) -> bytes:
    """The request line. A value that is not JSON (a set, NaN, a lone surrogate) is BadRequest here,
    before anything is sent."""
    req = {"op": op, **fields, "id": req_id}
    try:
        text = json.dumps(req, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except (TypeError, ValueError) as e:  # UnicodeEncodeError is a ValueError
        raise BadRequest(f"the request cannot be encoded as JSON: {e}", "bad_request", op) from None


def decode(line: bytes, op: str, req_id: Optional[int]) -> dict:
    """A reply line as a dict; AgentdConnectionError for one that is not a reply to req_id (the
    connection cannot be trusted after that)."""
    try:
        reply = json.loads(line)
    except ValueError as e:
        raise AgentdConnectionError(f"agentd sent a line that is not JSON ({e}): {line[:200]!r}", op, True) from None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise AgentdConnectionError(f"agentd sent a line that is not a reply: {line[:200]!r}", op, True)
    # A refusal at connect time (the peer's uid) comes without an id: it is still this request's answer.
    if req_id is not None and reply.get("id") != req_id and not (reply["ok"] is False and "id" not in reply):
        raise AgentdConnectionError(f"reply for request {reply.get('id')!r} while waiting for {req_id}", op, True)
    return reply


def finish(call: "_Call", reply: dict):
    """The result of an ok reply, or the exception of an error reply raised. A reply that lacks what the op
    promises (a different agentd) is AgentdError, not a KeyError from deep inside."""
    from .errors import AgentdError, error_from_reply
    if not reply["ok"]:
        raise error_from_reply(reply, call.op)
    try:
        return call.parse(reply)
    except (KeyError, TypeError, AttributeError) as e:
        raise AgentdError(f"unexpected reply ({type(e).__name__}: {e}): {str(reply)[:200]}", None, call.op) from None


def _opt(**kw) -> Dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


class _Backoff:
    """The retry rule of both clients: an idempotent call on a connection that once reached agentd is tried
    again after a lost connection or an `unavailable`, not after a timeout, with pauses of 20 ms doubling to
    1 s, until retry_for seconds have passed since the first try."""

    def __init__(self, retry_for: float):
        self.retry_for = retry_for
        self.give_up = time.monotonic() + retry_for
        self.pause = 0.02

    def next_pause(self, call: "_Call", reached: bool, e: Exception) -> Optional[float]:
        """Seconds to wait before the next try, or None when e stands."""
        if not (call.idempotent and reached and self.retry_for > 0 and not isinstance(e, AgentdTimeout)
                and time.monotonic() < self.give_up):
            return None
        pause = min(self.pause, max(0.0, self.give_up - time.monotonic()))
        self.pause = min(self.pause * 2, 1.0)
        return pause


class _Call:
    __slots__ = ("op", "fields", "parse", "idempotent", "timeout")

    def __init__(self, op: str, fields: Dict[str, Any], parse: Callable[[dict], Any],
                 timeout: Optional[float] = None):
        self.op = op
        self.fields = fields
        self.parse = parse
        self.idempotent = op in IDEMPOTENT
        self.timeout = timeout  # None: the client's; NO_LIMIT: none; else extra seconds on top


def _page(reply):
    return ConversationPage([_build(Conversation, c) for c in reply["conversations"]], reply.get("next"))


def _events(reply):
    return EventPage([_build(Event, e) for e in reply["events"]], reply["last_seq"], reply.get("next_after"),
                     reply.get("first_seq"), reply.get("next_before"))


class _Ops:
    """One method per op of the control protocol (docs/protocol.md). Optional arguments left None are
    not sent (agentd's default applies)."""

    def _run(self, call: _Call):  # pragma: no cover - provided by the clients
        raise NotImplementedError

    def _flow(self, steps):  # pragma: no cover - provided by the clients
        """Drive a generator of _flows: run each _Call it yields, send it the result (or throw it the
        AgentdError), and give back what it returns."""
        raise NotImplementedError

    # The calls the methods below build, also yielded by the flows of _flows.
    def _list_call(self, **filters) -> _Call:
        return _Call("list", _opt(**filters), _page)

    def _send_call(self, conversation: str, content, event_id: Optional[str], expected_seq: Optional[int],
                   on_busy: Optional[str] = None) -> _Call:
        eid = new_event_id() if event_id is None else event_id
        fields = {"conversation": conversation, "content": content, "event_id": eid,
                  **_opt(expected_seq=expected_seq, on_busy=on_busy)}
        return _Call("send", fields, lambda r: SendResult(r["seq"], bool(r.get("duplicate", False)), eid,
                                                          r.get("status"), r.get("on_busy"), r.get("interrupted"),
                                                          list(r.get("rejected", []))))

    def _events_call(self, conversation: str, **kw) -> _Call:
        extra = (kw.get("wait_ms") or 0) / 1000.0
        return _Call("events", _opt(conversation=conversation, **kw), _events, extra)

    def _tool_calls_call(self, conversation: str, status: Optional[str]) -> _Call:
        return _Call("tool_calls", _opt(conversation=conversation, status=status),
                     lambda r: [_build(ToolCall, t) for t in r["tool_calls"]])

    def request(self, op: str, **fields):
        """Any request, for ops or fields this client has no method for: the reply as a dict
        (ok:true), or the error raised. Not retried after a lost connection unless op is a read or send."""
        return self._run(_Call(op, fields, lambda r: r))

    def ping(self):
        """agentd's version (a string)."""
        return self._run(_Call("ping", {}, lambda r: r["version"]))

    def create(self, model: str, *, conversation: Optional[str] = None, system: Optional[str] = None,
               tools: Optional[list] = None, params: Optional[dict] = None, metadata: Optional[dict] = None,
               on_busy: Optional[str] = None):
        """Create a conversation with settings {model, system, tools, params, on_busy}; returns its id
        (generated by agentd as c- and 16 hex digits when conversation is not given). metadata: {key:
        string} for your own bookkeeping and list filters (at most 16 keys of 1-64 bytes, values of at most
        256). on_busy: what a message sent while a turn runs does, "enqueue" (agentd's default), "reject",
        "interrupt" or "steer" (docs/protocol.md, "Concurrent messages"). Conflict when it exists;
        BadRequest for an unknown model or tool, metadata out of bounds, or another on_busy."""
        settings = {"model": model, **_opt(system=system, tools=tools, params=params, on_busy=on_busy)}
        return self._run(_Call("create", _opt(conversation=conversation, settings=settings, metadata=metadata),
                               lambda r: r["conversation"]))

    def get(self, conversation: str):
        """The conversation (Conversation). NotFound when there is none."""
        return self._run(_Call("get", {"conversation": conversation},
                               lambda r: _build(Conversation, r["conversation"])))

    def list(self, *, status: Optional[str] = None, limit: Optional[int] = None, after: Optional[str] = None,
             metadata: Optional[dict] = None, model: Optional[str] = None, updated_after: Optional[int] = None,
             updated_before: Optional[int] = None):
        """One page of conversations in id order (ConversationPage): status filters (idle, active,
        suspended, ended), limit 1-1000 (agentd's default 100), after is the previous page's .next.
        Filters, all of which must hold: metadata {key: value} (every pair in the conversation's
        metadata), model (settings.model), updated_after / updated_before (ms since the epoch, exclusive).
        Pass the same filters with after= for the next page."""
        return self._run(self._list_call(status=status, limit=limit, after=after, metadata=metadata, model=model,
                                         updated_after=updated_after, updated_before=updated_before))

    def update(self, conversation: str, *, model: Optional[str] = None, system: Optional[str] = None,
               tools: Optional[list] = None, params: Optional[dict] = None, end: bool = False,
               metadata: Optional[dict] = None, on_busy: Optional[str] = None):
        """Merge the given settings into the conversation's (on_busy as for create), and/or end it
        (end=True: later sends are Conflict). metadata is merged key by key: a string sets its key, None
        deletes it, keys not given are kept (allowed on an ended conversation). Returns None."""
        settings = _opt(model=model, system=system, tools=tools, params=params, on_busy=on_busy)
        fields = {"conversation": conversation}
        if settings:
            fields["settings"] = settings
        if metadata is not None:
            fields["metadata"] = metadata
        if end:
            fields["status"] = "ended"
        return self._run(_Call("update", fields, lambda r: None))

    def delete(self, conversation: str):
        """Remove the conversation and everything of it; True, or False when it did not exist."""
        return self._run(_Call("delete", {"conversation": conversation}, lambda r: r["deleted"]))

    def send(self, conversation: str, content, *, event_id: Optional[str] = None,
             expected_seq: Optional[int] = None, on_busy: Optional[str] = None):
        """Append a user message (content: a string, stored as {"text": ...}, or a dict); returns
        SendResult(seq, duplicate, event_id) once it is durably committed. Idempotent: an event_id is
        generated when not given, and after a lost connection the client reconnects and sends again with
        the same one, so the message is in the log once (duplicate=True then says the first attempt had
        landed). Conflict when the conversation is ended. With expected_seq (the last seq you saw; 0: the
        log must be empty), Conflict with .last_seq when the conversation moved on: nothing was written.
        A repeated event_id still gets its original seq (idempotency wins over the check). SendResult.status
        is "paused" when the conversation is paused (the message waits for a larger budget). on_busy, for
        this send alone, overrides the conversation's: with "reject", Conflict (nothing written) while a
        turn runs; with "interrupt", SendResult.interrupted is the seq of the turn_cancelled it wrote; with
        "steer" the running turn's next model round answers it. SendResult.on_busy names the mode applied
        when a turn was running and on_busy was given (here or in the settings). SendResult.rejected lists
        the pending calls it settled, those of tools with on_user_message = reject."""
        return self._run(self._send_call(conversation, content, event_id, expected_seq, on_busy))

    def send_and_wait(self, conversation: str, content, *, timeout: Optional[float] = 60.0,
                      event_id: Optional[str] = None, expected_seq: Optional[int] = None,
                      on_busy: Optional[str] = None):
        """send, then wait for the turn it causes to end: a TurnResult whose status says how (completed,
        suspended on a human tool call, error, cancelled, paused, or timeout after timeout seconds counted
        from before the send; None: no limit) and whose events are the log after the message up to there.
        Raises what send raises (Conflict, NotFound, ...), and NotFound when the conversation is deleted
        while waiting. A conversation ended while waiting runs no turn: the wait ends in timeout. on_busy as
        for send (an interrupt's turn_cancelled does not end the wait: the turn after it answers)."""
        return self._flow(_flows.send_and_wait_steps(self, conversation, content, timeout, event_id, expected_seq,
                                                     on_busy))

    def wait_turn(self, conversation: str, seq: int, *, timeout: Optional[float] = 60.0):
        """Wait for the turn that answers the events up to seq (a user_msg's seq, or a resolution's after
        approve) to end: a TurnResult as send_and_wait's (status timeout past timeout seconds; None: no
        limit). Returns at once when the log already holds the end. NotFound when the conversation is
        gone."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._flow(_flows.wait_turn_steps(self, conversation, seq, deadline))

    def send_batch(self, conversation: str, contents, *, event_ids: Optional[list] = None,
                   expected_seq: Optional[int] = None, on_busy: Optional[str] = None):
        """Append several user messages in order, in one transaction: all or none. contents is a list of
        strings or dicts (as send's content); event_ids, when given, one per content (else generated, so a
        retry after a lost connection is answered with the original seqs). Returns BatchResult(seqs,
        duplicates: indexes of events already in the log, event_ids). expected_seq applies to the batch
        as a whole (Conflict with .last_seq). agentd's batch_max_events and batch_max_bytes bound it
        (BadRequest past them)."""
        contents = list(contents)
        eids = [new_event_id() for _ in contents] if event_ids is None else list(event_ids)
        if len(eids) != len(contents):
            raise ValueError(f"event_ids has {len(eids)} entries for {len(contents)} contents")
        events = [{"content": c, "event_id": e} for c, e in zip(contents, eids)]
        fields = {"conversation": conversation, "events": events, **_opt(expected_seq=expected_seq, on_busy=on_busy)}
        return self._run(_Call("send", fields,
                               lambda r: BatchResult(list(r["seqs"]), list(r.get("duplicates", [])), eids,
                                                     list(r.get("rejected", [])))))

    def events(self, conversation: str, *, after: Optional[int] = None, before: Optional[int] = None,
               limit: Optional[int] = None, type: Optional[str] = None, wait_ms: Optional[int] = None):
        """Events of the log (EventPage). after/before are exclusive seq bounds, limit keeps the most
        recent ones in range (1-10000), type filters, wait_ms long-polls: the reply comes as soon as an
        event after `after` exists, or with no events when wait_ms passes (the client's timeout is
        extended by wait_ms)."""
        return self._run(self._events_call(conversation, after=after, before=before, limit=limit, type=type,
                                           wait_ms=wait_ms))

    def resolve(self, tool_call_id: str, result: Any = None, *, status: Optional[str] = None,
                by: Optional[str] = None, args_digest: Optional[str] = None):
        """Settle a pending human tool call with result (any JSON value); status is resolved (agentd's
        default) or errored; by names who decided (1-128 bytes, no control characters), recorded in the
        resolution event beside the uid agentd sees; args_digest (the digest of the args the person saw:
        ToolCall.args_digest, or digest.args_digest(args)) settles it only if its args are still those.
        Returns Resolution(seq, conversation, settled, approvals, approvers). Stale when the call is not
        pending (unknown, settled, expired); Conflict when args_digest is not its args' or by has approved
        it already (a tool with approvers > 1; nothing settled); BadRequest for a bad status, by or
        args_digest, or an approval without by that a tool with approvers > 1 cannot count."""
        fields = _opt(tool_call_id=tool_call_id, status=status, by=by, args_digest=args_digest)
        if result is not None:
            fields["result"] = result
        return self._run(_Call("resolve", fields, lambda r: Resolution(r["seq"], r.get("conversation"), r.get("settled"),
                                                                 r.get("approvals"), r.get("approvers"))))

    def approve(self, tool_call_id: str, *, comment: Optional[str] = None, by: Optional[str] = None,
                args_digest: Optional[str] = None):
        """A person's yes to a pending human tool call: resolve with the result {"approved": true} (and
        "comment" when given), as `agentctl approve`. Returns Resolution; errors as resolve's."""
        return self.resolve(tool_call_id, {"approved": True, **_opt(comment=comment)}, by=by,
                            args_digest=args_digest)

    def deny(self, tool_call_id: str, *, comment: Optional[str] = None, by: Optional[str] = None,
             args_digest: Optional[str] = None):
        """A person's no: resolve with the result {"approved": false} (and "comment"), status resolved,
        as `agentctl deny`. Returns Resolution; errors as resolve's."""
        return self.resolve(tool_call_id, {"approved": False, **_opt(comment=comment)}, by=by,
                            args_digest=args_digest)

    def extend(self, conversation: str, tool_call_id: str, *, expires_in_ms: Optional[int] = None,
               deadline: Optional[int] = None, by: Optional[str] = None):
        """Move a pending human tool call's deadline: expires_in_ms from now, or to deadline (ms since the
        epoch); one of the two. by as resolve's, recorded in the deadline_extended event. Returns
        Extension(seq, deadline, conversation). NotFound (no such call in that conversation), Stale (not
        pending), Conflict (it has no deadline), BadRequest (a deadline not in the future, both or
        neither given)."""
        fields = _opt(conversation=conversation, tool_call_id=tool_call_id, expires_in_ms=expires_in_ms,
                      deadline=deadline, by=by)
        return self._run(_Call("extend", fields,
                               lambda r: Extension(r["seq"], r["deadline"], r.get("conversation"))))

    def settle(self, conversation: str, tool_call_id: str, outcome: str, result: Any = None, *,
               by: Optional[str] = None):
        """Decide a tool call whose outcome is unknown (docs/tools.md): outcome "retry" (dispatch it again,
        same id), "done" (it happened: result is its result) or "failed" (it did not: result, when given,
        is the failure the model sees). by as resolve's. Returns Settlement(seq, conversation, outcome).
        Stale when the call is not unknown; NotFound when the conversation has no such call; BadRequest
        for a bad outcome, a result with retry, or a bad by."""
        fields = _opt(conversation=conversation, tool_call_id=tool_call_id, outcome=outcome, by=by)
        if result is not None:
            fields["result"] = result
        return self._run(_Call("settle", fields,
                               lambda r: Settlement(r["seq"], r.get("conversation"), r.get("outcome"))))

    def schedule(self, conversation: str, text: str, *, at: Optional[int] = None, after: Optional[int] = None,
                 cron: Optional[str] = None):
        """Give the conversation a durable wakeup (docs/protocol.md, schedule): at (ms since the epoch),
        after (ms from now), or on cron (a 5-field spec in UTC; its first time at or after when one is
        given). When it fires the conversation gets a `scheduled` event with text and runs a turn. Returns
        Schedule (its id in .schedule, its first .due). NotFound (no such conversation), Conflict (it is
        ended), BadRequest (none of at, after and cron, both at and after, at in the past, a bad cron spec,
        text empty or over 65,536 bytes). Not repeated after a lost connection: a retry could add two."""
        fields = _opt(conversation=conversation, text=text, at=at, after=after, cron=cron)
        return self._run(_Call("schedule", fields, lambda r: _build(Schedule, r)))

    def schedules(self, conversation: Optional[str] = None):
        """The scheduled wakeups (of conversation only, when given: NotFound when it does not exist),
        earliest first: a list of Schedule."""
        return self._run(_Call("schedules", _opt(conversation=conversation),
                               lambda r: [_build(Schedule, x) for x in r["schedules"]]))

    def unschedule(self, schedule_id: str):
        """Remove a scheduled wakeup before it fires (a cron one stops repeating). NotFound when there is
        none (a once one that fired is gone)."""
        return self._run(_Call("unschedule", {"schedule": schedule_id}, lambda r: None))

    def pending(self, conversation: Optional[str] = None):
        """What waits for someone (a list of ToolCall, each with kind "approval" or "unknown"): the pending
        human tool calls and the calls whose outcome is unknown, of every conversation (the suspended
        ones, in conversation id order, as `agentctl pending`), or of the one given (NotFound when it does
        not exist). Not one op: a list of the suspended conversations, page by page, and tool_calls for
        each (a conversation deleted meanwhile is skipped)."""
        return self._flow(_flows.pending_steps(self, conversation))

    def tool_call(self, tool_call_id: str):
        """One tool call (ToolCall). NotFound when there is none."""
        return self._run(_Call("tool_call", {"tool_call_id": tool_call_id},
                               lambda r: _build(ToolCall, r["tool_call"])))

    def tool_calls(self, conversation: str, *, status: Optional[str] = None):
        """The conversation's tool calls in id order (a list of ToolCall); status filters (pending,
        resolved, errored, expired, cancelled, unknown)."""
        return self._run(self._tool_calls_call(conversation, status))

    def summary(self, conversation: str):
        """The latest Summary, or None."""
        return self._run(_Call("summary", {"conversation": conversation},
                               lambda r: _build(Summary, r["summary"])))

    def compact(self, conversation: str):
        """Compact now and return the latest Summary (None when the log is too short). Waits for the
        model with no time limit."""
        return self._run(_Call("compact", {"conversation": conversation},
                               lambda r: _build(Summary, r["summary"]), NO_LIMIT))

    def audit(self, conversation: str):
        """The recorded model calls (a list of ModelCall); empty unless audit is on."""
        return self._run(_Call("audit", {"conversation": conversation},
                               lambda r: [_build(ModelCall, m) for m in r["model_calls"]]))

    def kill(self, conversation: str, *, signal: Optional[str] = None):
        """Signal the conversation's worker (signal KILL, agentd's default, or TERM); the pid signalled,
        or None when no worker ran."""
        return self._run(_Call("kill", _opt(conversation=conversation, signal=signal), lambda r: r["pid"]))

    def stop(self, conversation: str):
        """Hibernate the conversation's worker: True when one was told to, False when none ran."""
        return self._run(_Call("stop", {"conversation": conversation}, lambda r: r["stopping"]))

    def runs(self, conversation: str, *, limit: Optional[int] = None, before: Optional[int] = None):
        """The conversation's runs (one per model turn attempt), newest first, as a RunPage; page on with
        before=page.next."""
        return self._run(_Call("runs", _opt(conversation=conversation, limit=limit, before=before),
                               lambda r: RunPage([_build(Run, x) for x in r["runs"]], r.get("next"))))

    def cancel(self, conversation: str):
        """Cancel the conversation's running (or owed) turn for good: a Cancelled (cancelled False, with
        agentd's message, when it was idle)."""
        return self._run(_Call("cancel", {"conversation": conversation},
                               lambda r: _build(Cancelled, {k: v for k, v in r.items() if k not in ("ok", "id")})))

    def resume(self, conversation: str):
        """Start the conversation's worker now, without a new event: a Resumed (resumed False, with agentd's
        message, when nothing is owed or a worker already runs)."""
        return self._run(_Call("resume", {"conversation": conversation},
                               lambda r: _build(Resumed, {k: v for k, v in r.items() if k not in ("ok", "id")})))

    def status(self):
        """agentd's Status: version, uptime, workers, store."""
        return self._run(_Call("status", {}, lambda r: _build(Status, {k: v for k, v in r.items()
                                                                         if k not in ("ok", "id")})))

    def metrics(self):
        """The Prometheus text exposition (a string)."""
        return self._run(_Call("metrics", {}, lambda r: r["text"]))

    def fork(self, conversation: str, seq: int, *, new_conversation: Optional[str] = None,
             model: Optional[str] = None, system: Optional[str] = None, tools: Optional[list] = None,
             params: Optional[dict] = None, metadata: Optional[dict] = None):
        """A new conversation whose log is conversation's events 1..seq (ForkResult; when the source's
        summary is carried, it stands in for the events it covers and the fork's log begins after it);
        the source is not changed. new_conversation is its id (generated when None); model, system,
        tools and params override the copied settings; metadata replaces the copied metadata. Tool calls
        unsettled at seq are settled cancelled in the fork. NotFound (no source), BadRequest (seq 0 or past the
        source's last seq, bad settings), Conflict (new_conversation exists). Not retried after a lost
        connection (a retry would fork twice): on AgentdConnectionError with .sent, get() the id to see."""
        settings = _opt(model=model, system=system, tools=tools, params=params)
        fields = _opt(conversation=conversation, seq=seq, new_conversation=new_conversation, metadata=metadata)
        if settings:
            fields["settings"] = settings
        return self._run(_Call("fork", fields, lambda r: ForkResult(
            r["conversation"], r["forked_from"], r["last_seq"], r["copied"], r["cancelled"], r.get("summary_to"),
            r["status"], r.get("first_seq", 1))))

    def backup(self, path: str):
        """Copy the store into path (a new or empty directory; made absolute against this process's
        working directory) while agentd serves; returns BackupResult(path, bytes, ms) once the copy is on
        disk. No time limit. Busy while another backup runs; Unsupported on PostgreSQL; BadRequest for a
        path that is not new or empty."""
        return self._run(_Call("backup", {"path": os.path.abspath(path)},
                               lambda r: BackupResult(r["path"], r["bytes"], r["ms"]), NO_LIMIT))

    def shutdown(self):
        """Stop agentd (workers hibernate first). Returns None once agentd acknowledged it."""
        return self._run(_Call("shutdown", {}, lambda r: None, NO_LIMIT))


def watch_item(line: bytes):
    """A streamed watch line as Event or Delta; None for a line of a kind this client does not know."""
    from .types import Delta
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise AgentdConnectionError(f"agentd sent a watch line that is not JSON ({e}): {line[:200]!r}",
                                    "watch", True) from None
    if isinstance(obj, dict):
        if isinstance(obj.get("event"), dict):
            return _build(Event, obj["event"])
        if isinstance(obj.get("delta"), dict):
            return Delta(obj["delta"].get("text", ""))
    return None
