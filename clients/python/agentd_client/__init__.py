"""agentd_client: a client of agentd's control socket (docs/python.md).

    from agentd_client import Client, AsyncClient, NotFound
"""

from ._ops import DEFAULT_SOCKET, IDEMPOTENT, new_event_id, socket_path
from .aio import AsyncClient, AsyncWatch
from .digest import args_digest, canonical_json
from .client import Client, Watch
from .errors import (ERRORS, AgentdConnectionError, AgentdError, AgentdTimeout, BadRequest, Busy, Conflict,
                     Internal, NotFound, Stale, StoreFull, TooLarge, UnknownOp, Unavailable, Unsupported,
                     error_from_reply)
from .types import (BackupResult, BatchResult, Cancelled, Conversation, ConversationPage, Delta, Event, EventPage,
                    Extension, ForkResult, ModelCall, Resolution, Resumed, Run, RunPage, Schedule, SendResult,
                    Settlement, Status, StoreStatus, Summary, ToolCall, TurnResult, Usage, Worker, WorkerStatus)

__version__ = "0.1.0"

__all__ = [
    "Client", "Watch", "AsyncClient", "AsyncWatch", "socket_path", "new_event_id", "DEFAULT_SOCKET", "IDEMPOTENT",
    "AgentdError", "AgentdConnectionError", "AgentdTimeout", "BadRequest", "UnknownOp", "NotFound", "Conflict",
    "Stale", "TooLarge", "StoreFull", "Unavailable", "Internal", "Busy", "Unsupported", "ERRORS", "error_from_reply",
    "BackupResult", "BatchResult", "ForkResult", "Conversation", "ConversationPage", "Delta", "Event", "EventPage",
    "ModelCall", "Resolution", "SendResult", "Settlement", "Extension", "args_digest", "canonical_json",
    "Status", "StoreStatus", "Summary", "ToolCall", "Usage", "Worker", "WorkerStatus",
    "Run", "RunPage", "Cancelled", "Resumed", "TurnResult", "Schedule",
]
