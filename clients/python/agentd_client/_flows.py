"""The methods that take more than one request (pending, wait_turn, send_and_wait), written once for both
clients: each is a generator that yields the _Call of each request and is sent its result back (or has its
error thrown in). The sync client's _flow drives it with plain calls, the asyncio client's with awaits.
"""

from __future__ import annotations

import math
import time
from typing import List, Optional

from .errors import NotFound
from .types import Event, TurnResult

LONG_POLL_MAX_MS = 3_600_000  # the protocol's bound on events' wait_ms


class Stepper:
    """Walks a flow for a client's _flow: next() is the next _Call (None once the flow returned, its value
    in .value); set .result, or .error (an AgentdError, thrown into the flow), before the next next()."""

    def __init__(self, steps):
        self.steps = steps
        self.started = False
        self.result = None
        self.error = None
        self.value = None

    def next(self):
        try:
            if not self.started:
                self.started = True
                return next(self.steps)
            if self.error is not None:
                error, self.error = self.error, None
                return self.steps.throw(error)
            result, self.result = self.result, None
            return self.steps.send(result)
        except StopIteration as done:
            self.value = done.value
            return None


def pending_steps(ops, conversation: Optional[str]):
    """What waits for someone: the pending human tool calls (kind "approval") and the calls whose outcome is
    unknown (kind "unknown", docs/tools.md), of one conversation, or of every suspended one (a conversation
    with either is suspended until it is settled), conversation id order, page by page. A conversation
    deleted between the list and its tool_calls is skipped."""
    def of(calls, kind):
        out = [t for t in calls if kind == "unknown" or t.executor == "human"]
        for t in out:
            t.kind = kind
        return out

    if conversation is not None:
        calls = yield ops._tool_calls_call(conversation, "pending")
        unknown = yield ops._tool_calls_call(conversation, "unknown")
        return of(calls, "approval") + of(unknown, "unknown")
    found = []
    after = None
    while True:
        page = yield ops._list_call(status="suspended", limit=1000, after=after)
        for conv in page.conversations:
            try:
                calls = yield ops._tool_calls_call(conv.id, "pending")
                unknown = yield ops._tool_calls_call(conv.id, "unknown")
            except NotFound:
                continue
            found += of(calls, "approval") + of(unknown, "unknown")
        if page.next is None:
            return found
        after = page.next


class _Turn:
    """Follows a conversation's log after seq and tells when the turn that answers it has ended.

    The turn that answers seq is made of the model rounds whose assistant_msg has context_seq >= seq (a
    round that started before seq answers an earlier message, and its tool calls are that turn's). A round's
    assistant_msg, its tool_call and suspension events commit in one transaction, and every events reply
    holds whole transactions, so a round is seen whole: one with no tool_call is the turn's last."""

    def __init__(self, seq: int):
        self.seq = seq
        self.events: List[Event] = []
        self.answering = False  # a round of the turn was seen
        self.round_open = False  # its assistant_msg was the last event but for its tool calls
        self.round_calls = 0
        self.open = {}  # the latest round's calls not settled yet: id -> executor
        self.suspended = set()  # those of them with a suspension or a tool_unknown: waiting for someone
        self.waiting_at: Optional[int] = None  # len(events) when all open calls came to wait for a person

    def _result(self, status: str, upto: Optional[int] = None) -> TurnResult:
        events = self.events if upto is None else self.events[:upto]
        return TurnResult(status, self.seq, events, events[-1].seq if events else self.seq)

    def feed(self, events: List[Event], more: bool) -> Optional[TurnResult]:
        """Take the next events of the log; the result once the turn has ended, else None. more: the reply
        stopped at its cap with events left (a round may go on in the next reply)."""
        for ev in events:
            content = ev.content if isinstance(ev.content, dict) else {}
            if self.round_open and ev.type not in ("tool_call", "suspension"):
                self.round_open = False
                if self.round_calls == 0:
                    return self._result("completed")
            ctx = content.get("context_seq")
            after_seq = isinstance(ctx, int) and ctx >= self.seq
            call = content.get("tool_call_id")
            self.events.append(ev)
            if ev.type == "assistant_msg" and after_seq:
                self.answering = self.round_open = True
                self.round_calls = 0
                self.open.clear()
                self.suspended.clear()
            elif ev.type == "tool_call" and self.answering:
                self.round_calls += 1
                self.open[call] = content.get("executor")
            elif ev.type in ("suspension", "tool_unknown") and call in self.open:
                self.suspended.add(call)  # a person's call, or one whose outcome is unknown: both wait
            elif ev.type == "tool_retry":
                self.suspended.discard(call)  # decided: it runs again
            elif ev.type in ("tool_result", "resolution"):
                self.open.pop(call, None)
                self.suspended.discard(call)
            elif ev.type == "error" and after_seq:
                return self._result("error")
            elif ev.type == "turn_cancelled" and after_seq and "interrupted_by" not in content:
                return self._result("cancelled")  # an interrupting send's is no end: the next turn answers
            elif ev.type == "budget_exceeded":
                return self._result("paused")
            if self.open and all(c in self.suspended for c in self.open):
                if self.waiting_at is None:
                    self.waiting_at = len(self.events)
            else:
                self.waiting_at = None
        if more:
            return None
        if self.round_open and self.round_calls == 0:
            return self._result("completed")
        if self.waiting_at is not None:
            return self._result("suspended", self.waiting_at)
        return None


def wait_turn_steps(ops, conversation: str, seq: int, deadline: Optional[float]):
    """Long-poll the events after seq until the turn that answers seq ends, or the deadline (a
    time.monotonic() value; None: none) passes. The log is read at least once, so a deadline already
    past still finds an end that is there."""
    turn = _Turn(seq)
    after = seq
    polled = False
    while True:
        if deadline is None:
            wait_ms = LONG_POLL_MAX_MS
        else:
            left = deadline - time.monotonic()
            if left <= 0 and polled:
                return turn._result("timeout")
            wait_ms = max(0, min(LONG_POLL_MAX_MS, math.ceil(left * 1000)))
        polled = True
        page = yield ops._events_call(conversation, after=after, wait_ms=wait_ms)
        done = turn.feed(page.events, page.next_after is not None)
        if done is not None:
            return done
        if page.next_after is not None:
            after = page.next_after
        elif page.events:
            after = page.events[-1].seq


def send_and_wait_steps(ops, conversation: str, content, timeout: Optional[float], event_id: Optional[str],
                        expected_seq: Optional[int], on_busy: Optional[str] = None):
    """send, then wait_turn after its seq; the deadline counts from before the send."""
    deadline = None if timeout is None else time.monotonic() + timeout
    sent = yield ops._send_call(conversation, content, event_id, expected_seq, on_busy)
    if sent.status == "paused":
        result = TurnResult("paused", sent.seq, [], sent.seq)
    else:
        result = yield from wait_turn_steps(ops, conversation, sent.seq, deadline)
    result.send = sent
    return result
