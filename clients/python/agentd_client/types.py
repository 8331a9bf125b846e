"""Typed results: dataclasses built from agentd's replies.

Each class lists the fields docs/protocol.md documents. A field agentd omits is None; fields a newer
agentd adds that a class does not know are kept in .extra (a dict) rather than dropped. JSON values that
are free-form (settings, content, args, result, fsm_state) stay plain Python values (dict, list, str...).
Times (`*_at`, `deadline`) are milliseconds since the Unix epoch, as agentd gives them.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def _build(cls, obj):
    """cls from the dict obj: known fields by name (nested dataclasses converted by each class's
    _nested map), the rest into .extra."""
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise TypeError(f"expected an object for {cls.__name__}, got {type(obj).__name__}")
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    nested = getattr(cls, "_nested", {})
    kw = {}
    extra = {}
    for k, v in obj.items():
        if k in names:
            conv = nested.get(k)
            if conv is not None and v is not None:
                v = [_build(conv[0], x) for x in v] if isinstance(conv, list) else _build(conv, v)
            kw[k] = v
        else:
            extra[k] = v
    return cls(**kw, extra=extra)


@dataclass
class Usage:
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    cost: Optional[float] = None
    turns: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Worker:
    """A conversation's live worker, as `get` shows it."""
    pid: Optional[int] = None
    state: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Run:
    """One model turn attempt (`runs`, and `get`'s active run). status: running, completed, failed,
    cancelled or interrupted; the run answers the events after from_seq up to to_seq, and appended
    first_seq..last_seq (None until it ends, or when it appended nothing)."""
    id: int = 0
    status: Optional[str] = None
    attempt: Optional[int] = None
    from_seq: Optional[int] = None
    to_seq: Optional[int] = None
    first_seq: Optional[int] = None
    last_seq: Optional[int] = None
    model: Optional[str] = None
    usage: Optional[Usage] = None
    started_at: Optional[int] = None
    ended_at: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)
    _nested = {"usage": Usage}


@dataclass
class RunPage:
    """`runs`: newest first; next is the cursor (`before=`) of the next page, None at the end."""
    runs: List[Run]
    next: Optional[int] = None


@dataclass
class Cancelled:
    """`cancel`: cancelled is False (with message) when the conversation was idle; else seq is the
    turn_cancelled event's and tool_calls the ids settled cancelled."""
    cancelled: bool = False
    seq: Optional[int] = None
    tool_calls: List[str] = field(default_factory=list)
    message: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Resumed:
    """`resume`: resumed is False (with message) when nothing is owed or a worker already runs; rerun
    is True when the turn a crash-loop give-up ended runs again."""
    resumed: bool = False
    rerun: Optional[bool] = None
    message: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Conversation:
    """`get`, and each item of `list`. status: idle, active, suspended, ended or paused. fsm_state is null
    before a worker first ran; worker is None when none runs."""
    id: str = ""
    settings: Dict[str, Any] = field(default_factory=dict)
    status: Optional[str] = None
    fsm_state: Any = None
    last_seq: Optional[int] = None
    usage: Optional[Usage] = None
    created_at: Optional[int] = None
    updated_at: Optional[int] = None
    worker: Optional[Worker] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    forked_from: Optional[Dict[str, Any]] = None
    run: Optional[Run] = None
    first_seq: Optional[int] = None  # `get` only: where the log begins (a fork's may begin after its summary)
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)
    _nested = {"usage": Usage, "worker": Worker, "run": Run}


@dataclass
class ConversationPage:
    """`list`: conversations in id order; next is the cursor (`after=`) of the next page, None at the end."""
    conversations: List[Conversation]
    next: Optional[str] = None


@dataclass
class SendResult:
    """`send`: the seq of the user message. duplicate is True when agentd had already seen event_id
    (seq is then the original's): after the client retried a send whose first reply was lost, this is
    how the first attempt's success shows. event_id is the one used (generated when not given). status
    is "paused" when the conversation is paused (the message waits for a larger budget), else None.
    on_busy is the mode applied when the send found a turn running ("enqueue", "interrupt", "steer")
    and on_busy was given (by the send or the settings), else None; interrupted the seq of the
    turn_cancelled an interrupting send wrote, else None; rejected the ids of the pending calls the send
    settled, those of tools with on_user_message = reject (docs/tools.md), else []."""
    seq: int
    duplicate: bool
    event_id: str
    status: Optional[str] = None
    on_busy: Optional[str] = None
    interrupted: Optional[int] = None
    rejected: List[str] = field(default_factory=list)


@dataclass
class BatchResult:
    """`send` with several events (send_batch): their seqs in order; duplicates lists the indexes of the
    events whose event_id agentd had already seen (their seqs are the originals'); event_ids are the ones
    used (generated when not given); rejected as SendResult's."""
    seqs: List[int]
    duplicates: List[int]
    event_ids: List[str]
    rejected: List[str] = field(default_factory=list)


@dataclass
class Event:
    """One event of a conversation's log (`events`, `watch`). type: user_msg, assistant_msg, tool_call,
    tool_result, suspension, resolution, error. event_id is set on events sent with one."""
    seq: int = 0
    type: str = ""
    content: Any = None
    inserted_at: Optional[int] = None
    event_id: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class TurnResult:
    """`wait_turn` and `send_and_wait`: how the wait for the turn that answers seq ended, and the events
    after seq up to that point, in seq order (every event of the log there, another client's too).

    status:
      completed  the turn's last model round (an assistant_msg that called no tool): .text is its text
      suspended  the turn waits for someone: every unsettled call of its last round is a human tool
                 call or a call whose outcome is unknown; .pending lists their ids (approve/deny/resolve
                 or settle them, then wait_turn after that event's seq for the rest of the turn)
      error      an error event ended the turn (the model failed after its retries, a crash loop given
                 up, a full store, the loop cap): .error is its content
      cancelled  a cancel ended the turn (its turn_cancelled event)
      paused     the budget refused the turn (its budget_exceeded event, or the send answered paused):
                 the turn stays owed until a larger budget resumes the conversation
      timeout    none of these within the timeout: events holds what came; wait_turn(conversation, seq)
                 waits again
    last_seq is the seq of the last event in events (seq when none). send is the send's SendResult
    (send_and_wait), else None."""
    status: str
    seq: int
    events: List["Event"]
    last_seq: int
    send: Optional[SendResult] = None

    @property
    def text(self) -> Optional[str]:
        """The text of the last assistant_msg in events, or None."""
        for ev in reversed(self.events):
            if ev.type == "assistant_msg" and isinstance(ev.content, dict):
                return ev.content.get("text")
        return None

    @property
    def pending(self) -> List[str]:
        """status suspended: the ids of the calls the turn waits for (oldest first): human tool calls, and
        calls whose outcome is unknown (settle them); else []."""
        if self.status != "suspended":
            return []
        settled = {e.content.get("tool_call_id") for e in self.events
                   if e.type in ("resolution", "tool_result", "tool_retry") and isinstance(e.content, dict)}
        start = max((i for i, e in enumerate(self.events) if e.type == "assistant_msg"), default=0)
        out = []
        for e in self.events[start:]:
            tcid = e.content.get("tool_call_id") if isinstance(e.content, dict) else None
            if e.type in ("suspension", "tool_unknown") and tcid not in settled and tcid not in out:
                out.append(tcid)
        return out

    @property
    def error(self) -> Optional[Dict[str, Any]]:
        """status error: the error event's content ({"message", "attempts", ...}); else None."""
        if self.status != "error" or not self.events:
            return None
        return self.events[-1].content


@dataclass
class EventPage:
    """`events`. next_after is set when a reply without limit stopped at 10,000 seqs or at agentd's
    max_reply_bytes: ask again with after=next_after (paging on is the caller's job). next_before is set
    when a reply with limit kept only the newest events under max_reply_bytes: the older ones are before
    it (ask with before=next_before). first_seq is set when the log begins after seq 1 (a fork's, after
    its summary) and after was before it: the events begin there."""
    events: List[Event]
    last_seq: int
    next_after: Optional[int] = None
    first_seq: Optional[int] = None
    next_before: Optional[int] = None


@dataclass
class Delta:
    """A streamed piece of a model's answer during `watch` (a preview: a slow reader may miss some; the
    assistant_msg event that follows holds the whole text)."""
    text: str


@dataclass
class ForkResult:
    """`fork`: the new conversation's id, where it came from ({"conversation", "seq"}), its last seq, the
    events copied, the tool calls settled cancelled in it, the to_seq of the summary it carries (None:
    none), its status (idle, or active when its log owes a turn, which it then runs), and where its log
    begins (1, or summary_to + 1: the carried summary stands in for the events before it)."""
    conversation: str
    forked_from: Dict[str, Any]
    last_seq: int
    copied: int
    cancelled: int
    summary_to: Optional[int]
    status: str
    first_seq: int = 1


@dataclass
class BackupResult:
    """`backup`: the directory of the copy, the size of its data.mdb in bytes, and how long it took."""
    path: str
    bytes: int
    ms: int


@dataclass
class Extension:
    """`extend`: the seq of the deadline_extended event, the new deadline (ms since the epoch) and the
    conversation."""
    seq: int
    deadline: int
    conversation: Optional[str] = None


@dataclass
class Schedule:
    """`schedule` and `schedules`: a conversation's durable wakeup: its id, conversation, due time (ms since
    the epoch; a cron one's next), cron spec (None: once) and text (None in schedule's reply, which does not
    repeat it)."""
    schedule: str
    conversation: str
    due: int
    cron: Optional[str] = None
    text: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Resolution:
    """`resolve`: the seq of the resolution event and the conversation it is in. For a tool with approvers
    = N (docs/tools.md): settled False when the approval was counted short of N (seq is then its
    approval_vote event's), approvals the count with this one and approvers N; else None."""
    seq: int
    conversation: Optional[str] = None
    settled: Optional[bool] = None
    approvals: Optional[int] = None
    approvers: Optional[int] = None


@dataclass
class Settlement:
    """`settle`: the seq of the event written (tool_retry, or the resolution), its conversation and the
    outcome (retry, done or failed)."""
    seq: int
    conversation: Optional[str] = None
    outcome: Optional[str] = None


@dataclass
class ToolCall:
    """`tool_call`, and each item of `tool_calls`. executor: server or human; status: pending, resolved,
    errored, expired, cancelled or unknown (a call whose outcome is unknown, waiting for settle). args_digest:
    the digest of args (what resolve's args_digest takes). deadline: when a pending human call expires (ms),
    or None. prompt: human tools. kind: set by pending() only, "approval" or "unknown". approvers and
    approved_by (a pending human call): the approvals by different names that settle it, and the names
    counted so far."""
    id: str = ""
    conversation: Optional[str] = None
    executor: Optional[str] = None
    name: Optional[str] = None
    status: Optional[str] = None
    args: Any = None
    args_digest: Optional[str] = None
    result: Any = None
    inserted_at: Optional[int] = None
    resolved_at: Optional[int] = None
    deadline: Optional[int] = None
    attempts: Optional[int] = None
    prompt: Optional[str] = None
    kind: Optional[str] = None
    approvers: Optional[int] = None
    approved_by: Optional[List[str]] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Summary:
    """`summary`, `compact`: the events from_seq..to_seq summarised into content."""
    from_seq: Optional[int] = None
    to_seq: Optional[int] = None
    content: Any = None
    version: Optional[int] = None
    inserted_at: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ModelCall:
    """One row of `audit`. task: turn or summarize; turn_ref: the turn's assistant_msg seq (for a
    summarize call, the summary's to_seq)."""
    task: Optional[str] = None
    turn_ref: Optional[int] = None
    model: Optional[str] = None
    usage: Optional[Usage] = None
    latency_ms: Optional[int] = None
    summary_version: Optional[int] = None
    inserted_at: Optional[int] = None
    rendered_context: Any = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)
    _nested = {"usage": Usage}


@dataclass
class WorkerStatus:
    """A worker in `status`: state starting, running, idle, awaiting_input, stopping, queued or backoff."""
    conversation: Optional[str] = None
    pid: Optional[int] = None
    state: Optional[str] = None
    since_ms: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class StoreStatus:
    path: Optional[str] = None
    size_bytes: Optional[int] = None
    file_bytes: Optional[int] = None
    map_size: Optional[int] = None
    readers: Optional[int] = None
    sync: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Status:
    """`status`."""
    version: Optional[str] = None
    uptime_ms: Optional[int] = None
    workers: List[WorkerStatus] = field(default_factory=list)
    store: Optional[StoreStatus] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False)
    _nested = {"workers": [WorkerStatus], "store": StoreStatus}
