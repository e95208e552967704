"""The words goaai records: statuses, legal transitions, error kinds, event types.

Plain Python, so that the runtime, the ORM models and the API all share one
definition and the loop can be tested without a database.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TIMED_OUT = "timed_out"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_RUN_STATUSES


TERMINAL_RUN_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.TIMED_OUT}
)

# Every legal move of a run, and nothing else. Terminal states are final.
RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.PENDING: frozenset(
        {RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.TIMED_OUT}
    ),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.AWAITING_INPUT,
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.CANCELED,
            RunStatus.TIMED_OUT,
        }
    ),
    RunStatus.AWAITING_INPUT: frozenset(
        {RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.TIMED_OUT}
    ),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELED: frozenset(),
    RunStatus.TIMED_OUT: frozenset(),
}


def sources_of(target: RunStatus) -> frozenset[RunStatus]:
    """The statuses from which a run may move to ``target``."""
    return frozenset(src for src, targets in RUN_TRANSITIONS.items() if target in targets)


class ToolCallStatus(StrEnum):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    DENIED = "denied"


TERMINAL_TOOL_CALL_STATUSES = frozenset(
    {
        ToolCallStatus.SUCCEEDED,
        ToolCallStatus.FAILED,
        ToolCallStatus.CANCELED,
        ToolCallStatus.DENIED,
    }
)


class ErrorKind(StrEnum):
    """Why a tool call or a run failed; the same words for both."""

    INVALID_CALL = "invalid_call"
    DOMAIN_REJECTION = "domain_rejection"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    INTERNAL = "internal"


class MemoryScope(StrEnum):
    SESSION = "session"
    USER = "user"
    AGENT = "agent"
    GLOBAL = "global"


# Reading a key for a session looks here, most specific first.
MEMORY_RESOLUTION_ORDER = (
    MemoryScope.SESSION,
    MemoryScope.USER,
    MemoryScope.AGENT,
    MemoryScope.GLOBAL,
)


class EventType(StrEnum):
    SESSION_CREATED = "session.created"
    SESSION_UPDATED = "session.updated"
    SESSION_ENDED = "session.ended"
    RUN_CREATED = "run.created"
    RUN_STARTED = "run.started"
    TURN_STARTED = "turn.started"
    TURN_COMPLETED = "turn.completed"
    MESSAGE_COMPLETED = "message.completed"
    TOOL_CALL_SCHEDULED = "tool_call.scheduled"
    TOOL_CALL_STARTED = "tool_call.started"
    TOOL_CALL_SUCCEEDED = "tool_call.succeeded"
    TOOL_CALL_FAILED = "tool_call.failed"
    TOOL_CALL_APPROVAL_REQUESTED = "tool_call.approval_requested"
    TOOL_CALL_DECIDED = "tool_call.decided"
    # A call still scheduled or running when its run ended (canceled, failed, timed out).
    TOOL_CALL_CANCELED = "tool_call.canceled"
    RUN_AWAITING_INPUT = "run.awaiting_input"
    RUN_RESUMED = "run.resumed"
    MEMORY_STORED = "memory.stored"
    MEMORY_DELETED = "memory.deleted"
    POLICY_DECISION = "policy.decision"
    USAGE = "usage"
    RUN_CHILD_LINKED = "run.child_linked"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELED = "run.canceled"
    RUN_TIMED_OUT = "run.timed_out"


# The event that announces each terminal run status.
RUN_END_EVENTS = {
    RunStatus.COMPLETED: EventType.RUN_COMPLETED,
    RunStatus.FAILED: EventType.RUN_FAILED,
    RunStatus.CANCELED: EventType.RUN_CANCELED,
    RunStatus.TIMED_OUT: EventType.RUN_TIMED_OUT,
}


def choices(enum: type[StrEnum]) -> list[tuple[str, str]]:
    """Django ``choices`` for one of these enums."""
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]


# The same choices everywhere a model, a filter or the API schema lists them.
RUN_STATUS_CHOICES = choices(RunStatus)
TOOL_CALL_STATUS_CHOICES = choices(ToolCallStatus)
MEMORY_SCOPE_CHOICES = choices(MemoryScope)
