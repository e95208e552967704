"""The words goaai records: statuses, legal transitions, error kinds, event types.

Plain Python, so that the runtime, the ORM models and the API all share one
definition and the loop can be tested without a database.
"""

from __future__ import annotations

from enum import StrEnum


class SessionStatus(StrEnum):
    ACTIVE = "active"
    # An ended session accepts no new runs.
    ENDED = "ended"


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


# A run that has not ended: what cancel, purge guards and "is anything running" look for.
OPEN_RUN_STATUSES = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.AWAITING_INPUT})


def sources_of(target: RunStatus) -> frozenset[RunStatus]:
    """The statuses from which a run may move to ``target``."""
    return frozenset(src for src, targets in RUN_TRANSITIONS.items() if target in targets)


class Multitask(StrEnum):
    """What a message sent to a session while one of its runs is active does."""

    # The new run waits, and starts when the active one ends (seeing its result).
    ENQUEUE = "enqueue"
    # The new run is refused (409, naming the active run).
    REJECT = "reject"
    # The active run is canceled, its partial answer kept, then the new one starts.
    INTERRUPT = "interrupt"


class Redo(StrEnum):
    """Ways to redo a run from the point before it (each a new, linked run)."""

    # A run that failed, timed out or was stopped, asked again.
    RETRY = "retry"
    # Another answer to the same message.
    REGENERATE = "regenerate"
    # The message changed, and the conversation goes on from there.
    EDIT = "edit"


# The runs each way may redo.
REDOABLE_STATUSES = {
    Redo.RETRY: frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELED}),
    Redo.REGENERATE: frozenset({RunStatus.COMPLETED, RunStatus.CANCELED}),
    Redo.EDIT: TERMINAL_RUN_STATUSES,
}


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

# A tool call that has not ended: what a run's end cancels.
OPEN_TOOL_CALL_STATUSES = frozenset({ToolCallStatus.SCHEDULED, ToolCallStatus.RUNNING})


class AwaitingKind(StrEnum):
    """What a waiting run waits for."""

    APPROVAL = "approval"  # a person to approve or deny a tool call
    QUESTION = "question"  # a person to answer the agent's question
    DELEGATED = "delegated"  # an agent it called, which itself waits for a person
    # The caller (an OpenAI-compatible client) to run tools it offered and send
    # their results; goaai never executes those tools itself.
    CLIENT_TOOL = "client_tool"


class StopKind(StrEnum):
    """Who or what stopped a run, for telling its ending ("Stopped by you")."""

    USER = "user"  # the person the run answers
    OPERATOR = "operator"  # a member of staff, acting on another user's run
    SUPERSEDED = "superseded"  # replaced by the next message (multitask "interrupt")
    POLICY = "policy"  # a rule: a time limit, a budget


class TurnInterruption(StrEnum):
    """How a turn ended before its model finished answering (blank: it finished).
    The turn keeps the text streamed so far and the usage of what was said."""

    CANCELED = "canceled"  # the run was stopped mid-answer
    FAILED = "failed"  # the model's stream broke off with an error
    CRASHED = "crashed"  # the worker died; the run was taken up again


class ScoreKind(StrEnum):
    NUMERIC = "numeric"
    BOOLEAN = "boolean"
    CATEGORY = "category"


class ScoreSource(StrEnum):
    """Where a score on a run came from."""

    FEEDBACK = "feedback"  # the run's user (thumbs up or down in the chat, or the API)
    STAFF = "staff"  # a member of staff reviewing the run
    API = "api"  # an integration (an evaluation pipeline)


class WriterKind(StrEnum):
    """Who changed a memory entry."""

    USER = "user"
    RUN = "run"
    # Code acting on no one's behalf: a script, a management command, a migration.
    SYSTEM = "system"


class ErrorKind(StrEnum):
    """Why a tool call or a run failed; the same words for both."""

    INVALID_CALL = "invalid_call"
    DOMAIN_REJECTION = "domain_rejection"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    INTERNAL = "internal"
    # A model's reply was cut off by its output limit (and asking again did not help).
    TRUNCATED = "truncated"


class FinishReason(StrEnum):
    """Why a model stopped writing a reply, in the same words for every provider."""

    STOP = "stop"  # it finished its answer (or reached a stop sequence)
    TOOL_CALLS = "tool_calls"  # it asks for tools
    LENGTH = "length"  # cut off by the output limit (or the context window)
    CONTENT_FILTER = "content_filter"  # the provider withheld the rest (or it refused)
    OTHER = "other"  # anything else a provider says


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
    # A run waits for the session's active run to end before it starts.
    RUN_QUEUED = "run.queued"
    RUN_STARTED = "run.started"
    TURN_STARTED = "turn.started"
    # Earlier runs of the session were summarised to keep the context within budget.
    HISTORY_SUMMARIZED = "history.summarized"
    TURN_COMPLETED = "turn.completed"
    # A model call failed in a way worth retrying and is asked again.
    MODEL_RETRY = "model.retry"
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
    # The worker executing the run was lost (its process died, its lease expired):
    # the run is taken up again from what was recorded.
    RUN_INTERRUPTED = "run.interrupted"
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

# Groups of event types, for whoever reads the log (the timeline, the chat page,
# exports): one definition, so that a new event type is placed once.
RUN_END_EVENT_TYPES = frozenset(RUN_END_EVENTS.values())
TOOL_CALL_END_EVENT_TYPES = frozenset(
    {EventType.TOOL_CALL_SUCCEEDED, EventType.TOOL_CALL_FAILED, EventType.TOOL_CALL_CANCELED}
)
FAILURE_EVENT_TYPES = frozenset(
    {
        EventType.TOOL_CALL_FAILED,
        EventType.TOOL_CALL_CANCELED,
        EventType.RUN_FAILED,
        EventType.RUN_TIMED_OUT,
        EventType.RUN_CANCELED,
    }
)
# Ended by someone or something stopping it rather than by an error.
STOPPED_EVENT_TYPES = frozenset({EventType.RUN_CANCELED, EventType.TOOL_CALL_CANCELED})
SUCCESS_EVENT_TYPES = frozenset({EventType.TOOL_CALL_SUCCEEDED, EventType.RUN_COMPLETED})
WAITING_EVENT_TYPES = frozenset(
    {
        EventType.RUN_AWAITING_INPUT,
        EventType.RUN_RESUMED,
        EventType.TOOL_CALL_APPROVAL_REQUESTED,
    }
)
# Events about a session itself rather than one of its runs.
SESSION_EVENT_TYPES = frozenset(
    {EventType.SESSION_CREATED, EventType.SESSION_UPDATED, EventType.SESSION_ENDED}
)

# Sent to the owner's stream of session changes when a session is deleted; never in
# a log (the log goes with the session).
SESSION_DELETED = "session.deleted"

# What a session list shows: these also go to the owner's stream of session changes.
SESSION_LIST_EVENT_TYPES = frozenset(
    SESSION_EVENT_TYPES
    | RUN_END_EVENT_TYPES
    | {
        EventType.RUN_CREATED,
        EventType.RUN_STARTED,
        EventType.RUN_AWAITING_INPUT,
        EventType.RUN_RESUMED,
    }
)
# A run that ended in an error (running out of time is one), rather than completing
# or being stopped: what the run's timeline shows a failure banner for.
FAILED_RUN_STATUSES = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT})


def choices(enum: type[StrEnum]) -> list[tuple[str, str]]:
    """Django ``choices`` for one of these enums."""
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]


# The same choices everywhere a model, a filter or the API schema lists them.
SESSION_STATUS_CHOICES = choices(SessionStatus)
WRITER_KIND_CHOICES = choices(WriterKind)
RUN_STATUS_CHOICES = choices(RunStatus)
TOOL_CALL_STATUS_CHOICES = choices(ToolCallStatus)
MEMORY_SCOPE_CHOICES = choices(MemoryScope)
SCORE_KIND_CHOICES = choices(ScoreKind)
SCORE_SOURCE_CHOICES = choices(ScoreSource)


# Webhooks


class WebhookEvent(StrEnum):
    """What a webhook endpoint subscribes to: the ``type`` of the messages it gets."""

    RUN_COMPLETED = "run.completed"
    # A run that failed or ran out of time (``data.status`` says which).
    RUN_FAILED = "run.failed"
    RUN_AWAITING_INPUT = "run.awaiting_input"
    SESSION_ENDED = "session.ended"
    # A memory entry was created, updated or deleted, by a run or by a person.
    MEMORY_CHANGED = "memory.changed"


# The message an endpoint's owner sends to try it out; it needs no subscription.
WEBHOOK_PING = "webhook.ping"

# The logged events that are webhook messages, and the message each one is.
WEBHOOK_LOGGED_EVENTS: dict[str, WebhookEvent] = {
    EventType.RUN_COMPLETED: WebhookEvent.RUN_COMPLETED,
    EventType.RUN_FAILED: WebhookEvent.RUN_FAILED,
    EventType.RUN_TIMED_OUT: WebhookEvent.RUN_FAILED,
    EventType.RUN_AWAITING_INPUT: WebhookEvent.RUN_AWAITING_INPUT,
    EventType.SESSION_ENDED: WebhookEvent.SESSION_ENDED,
}


class WebhookDeliveryStatus(StrEnum):
    # Waiting for its first attempt.
    PENDING = "pending"
    # The last attempt failed; the next one is scheduled (``next_attempt_at``).
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    # Every scheduled attempt failed, or the endpoint went away (410, disabled).
    GAVE_UP = "gave_up"


WEBHOOK_DUE_STATUSES = frozenset({WebhookDeliveryStatus.PENDING, WebhookDeliveryStatus.FAILED})
