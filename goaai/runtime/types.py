"""The values that flow between the facade, the turn loop, model clients and storage.

Plain dataclasses: the runtime never sees an ORM object.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID


@dataclass(frozen=True)
class Usage:
    """The tokens of one model reply (or the sum of several), each kind kept apart,
    as providers bill them.

    ``input_tokens`` are the prompt tokens read at the full price: neither read from
    the provider's prompt cache (``cached_input_tokens``) nor written to it
    (``cache_write_tokens``). ``reasoning_tokens`` are the part of ``output_tokens``
    the model spent thinking before it answered.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every token of the prompt, whatever the cache did with it."""
        return self.input_tokens + self.cached_input_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, name) + getattr(other, name) for name in USAGE_KINDS))

    @classmethod
    def of(cls, row: Any) -> Usage:
        """The usage a record (a run's or turn's row) counts, by its fields' names."""
        return cls(*(getattr(row, name) for name in USAGE_KINDS))

    def as_dict(self) -> dict[str, int]:
        data = {name: getattr(self, name) for name in USAGE_KINDS}
        data["total_tokens"] = self.total_tokens
        return data


def known_cost(cost: Decimal, unpriced_turns: int) -> Decimal | None:
    """A sum of turns' costs, or ``None`` ("cost unknown") when none of the turns
    that cost anything had a price."""
    return None if unpriced_turns and not cost else Decimal(cost)


# The kinds of token a :class:`Usage` counts, in its fields' order.
USAGE_KINDS = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call as a model asked for it."""

    id: str
    name: str
    arguments: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCallRequest:
        return cls(id=str(data["id"]), name=str(data["name"]), arguments=dict(data["arguments"]))


class PlannedCall(NamedTuple):
    """A call of a model's reply recorded in the step that records the reply
    (:meth:`~goaai.runtime.store.RunStore.complete_turn`): started at once
    (``start``: nothing to wait for), or scheduled, waiting for a person's approval
    (``requires_approval``) or for a place among the calls that run together."""

    position: int
    request: ToolCallRequest
    start: bool
    requires_approval: bool = False


class TurnRecorded(NamedTuple):
    """What recording a model's reply found and made: the reason a cancel was
    asked for (as the step's own transaction found the run; ``None``: none), and
    the ids of the calls recorded with the reply, in the order given."""

    cancel_reason: str | None
    tool_call_ids: tuple[UUID, ...] = ()


@dataclass(frozen=True)
class Message:
    """One message of a conversation, in a provider-neutral shape.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool``. An assistant message
    may carry tool calls, and the provider's reasoning items that must travel back
    with it (``reasoning_state``, see :class:`ModelReply`); a tool message answers
    the call named by ``tool_call_id``, with ``is_error`` when the call failed.
    """

    role: str
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    is_error: bool = False
    reasoning_state: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        if self.tool_call_id:
            data["tool_call_id"] = self.tool_call_id
        if self.name:
            data["name"] = self.name
        if self.is_error:
            data["is_error"] = True
        if self.reasoning_state:
            data["reasoning_state"] = [dict(item) for item in self.reasoning_state]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=str(data["role"]),
            content=str(data.get("content") or ""),
            tool_calls=tuple(ToolCallRequest.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=str(data.get("tool_call_id") or ""),
            name=str(data.get("name") or ""),
            is_error=bool(data.get("is_error")),
            reasoning_state=tuple(dict(item) for item in data.get("reasoning_state") or ()),
        )


@dataclass(frozen=True)
class ModelReply:
    """What a model answered in one turn.

    ``finish_reason`` is why it stopped (:class:`~goaai.runtime.vocabulary.FinishReason`);
    ``reasoning`` the thinking it showed (Anthropic thinking blocks, a compatible
    server's ``reasoning_content``, a Responses API reasoning summary), and
    ``reasoning_state`` the provider's own items that must be sent back with the
    conversation on the next turn (signed thinking blocks, encrypted reasoning items).
    """

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = "stop"
    reasoning: str = ""
    reasoning_state: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RunError:
    kind: str
    message: str
    retryable: bool = False


def _same(value: Any) -> Any:
    return value


# The records below are built by a store from its own rows (database rows, or the
# in-memory store's), whose attributes carry the same names. ``copy`` is applied to
# their JSON values: a store that hands out its own objects passes a deep copy.
Copy = Callable[[Any], Any]


@dataclass(frozen=True)
class SessionInfo:
    id: UUID
    owner_id: int
    agent: str
    title: str
    status: str
    metadata: dict[str, Any]
    created_at: dt.datetime
    ended_at: dt.datetime | None = None

    @classmethod
    def of(cls, session: Any, copy: Copy = _same) -> SessionInfo:
        return cls(
            id=session.id,
            owner_id=session.owner_id,
            agent=session.agent,
            title=session.title,
            status=session.status,
            metadata=copy(session.metadata),
            created_at=session.created_at,
            ended_at=session.ended_at,
        )


@dataclass(frozen=True)
class RunInfo:
    id: UUID
    session_id: UUID
    agent: str
    status: str
    input: str
    output: str
    labels: dict[str, str]
    usage: Usage
    error: RunError | None
    created_at: dt.datetime
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    parent_run_id: UUID | None = None
    # In US dollars; None while no turn that cost anything had a price.
    cost: Decimal | None = None
    # The version of its agent the run executes (numbered per agent from 1), if
    # its store records versions.
    agent_version: int | None = None
    # What a message sent while another run of the session was active did to this
    # run (enqueue, interrupt; empty when none was active), and, while it waits for
    # its turn, the open run just before it.
    multitask: str = ""
    queued_behind: UUID | None = None
    # Its place on the session's branches: the run it continues from, and the run
    # it redoes, if any (see :class:`Branch`).
    previous_run_id: UUID | None = None
    retry_of_id: UUID | None = None
    regenerates_id: UUID | None = None
    edit_of_id: UUID | None = None
    # Of a top-level run as the step that ended it left it, when its store says:
    # the session's run whose turn has come (``next_run_id``, ``None`` when none
    # waits), found in that step's transaction. Not known otherwise (read it then,
    # :meth:`~goaai.runtime.store.RunStore.next_queued_run`). Not part of the run's
    # state: two reads of one run compare equal whichever step made them.
    next_run_known: bool = field(default=False, compare=False)
    next_run_id: UUID | None = field(default=None, compare=False)
    # When it was last put on a distributed queue, if its store records that (see
    # RunStore.create_run's ``queued``).
    queued_at: dt.datetime | None = field(default=None, compare=False)
    # The store's own record of the run as the step that read it left it, where
    # the store gives one (the database store: a created run's row, which the
    # REST API answers a start with). Not part of the run's state.
    record: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, run: Any, copy: Copy = _same) -> RunInfo:
        error = (
            RunError(kind=run.error_kind, message=run.error_message, retryable=run.error_retryable)
            if run.error_kind
            else None
        )
        return cls(
            id=run.id,
            session_id=run.session_id,
            agent=run.agent,
            status=run.status,
            input=run.input,
            output=run.output,
            labels=copy(run.labels),
            usage=Usage.of(run),
            error=error,
            created_at=run.created_at,
            started_at=run.started_at,
            ended_at=run.ended_at,
            parent_run_id=run.parent_run_id,
            cost=known_cost(run.cost, run.unpriced_turns),
            agent_version=getattr(run, "agent_version_number", None),
            multitask=getattr(run, "multitask", ""),
            queued_behind=getattr(run, "queued_behind_id", None),
            previous_run_id=run.previous_run_id,
            retry_of_id=run.retry_of_id,
            regenerates_id=run.regenerates_id,
            edit_of_id=run.edit_of_id,
            next_run_known=hasattr(run, "next_queued_id"),
            next_run_id=getattr(run, "next_queued_id", None),
            queued_at=getattr(run, "queued_at", None),
        )


@dataclass(frozen=True)
class ToolCallState:
    """A tool call as recorded, for a loop that picks a run up again."""

    id: UUID
    index: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    status: str
    result: Any = None
    error_kind: str = ""
    error_message: str = ""
    requires_approval: bool = False
    decision: str = ""
    decision_reason: str = ""
    attempt: int = 0

    @classmethod
    def of(cls, call: Any, copy: Copy = _same) -> ToolCallState:
        return cls(
            id=call.id,
            index=call.index,
            call_id=call.call_id,
            name=call.name,
            arguments=copy(call.arguments),
            status=call.status,
            result=copy(call.result),
            error_kind=call.error_kind,
            error_message=call.error_message,
            requires_approval=call.requires_approval,
            decision=call.decision,
            decision_reason=call.decision_reason,
            attempt=call.attempt,
        )

    @property
    def outcome(self) -> ToolOutcome:
        return ToolOutcome(
            result=self.result, error_kind=self.error_kind, error_message=self.error_message
        )


@dataclass(frozen=True)
class TurnState:
    """A turn as recorded: what was sent, what came back (if it did), its tool calls."""

    id: UUID
    index: int
    request_messages: tuple[Message, ...]
    ended: bool
    response_text: str = ""
    response_tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_calls: tuple[ToolCallState, ...] = ()
    finish_reason: str = ""
    reasoning_state: tuple[dict[str, Any], ...] = ()
    # The reply's output tokens as the provider reported them, less those it spent
    # reasoning (which are not sent back with the conversation); 0: not known.
    output_tokens: int = 0
    # How it ended before its model finished (a TurnInterruption value; "" if it
    # finished): a crashed turn was asked again in a turn after it.
    interruption: str = ""


class StreamedText(NamedTuple):
    """The text a turn still being answered has streamed so far, as the loop last
    checkpointed it (about once a second): what a subscriber that joins mid-answer
    is sent first."""

    run_id: UUID
    turn_id: UUID
    text: str


@dataclass(frozen=True)
class EarlierRun:
    """A run before this one on its branch, as its history shows it: what the user
    said, every turn with its tool calls and their results, and how it ended."""

    id: UUID
    input: str
    status: str
    error_message: str = ""
    turns: tuple[TurnState, ...] = ()


@dataclass(frozen=True)
class SummaryState:
    """The summary that stands for a branch up to and including ``through_run_id``."""

    id: UUID
    through_run_id: UUID
    text: str
    runs_covered: int


@dataclass(frozen=True)
class RunContext:
    """What the turn loop needs to know about a run it is about to execute."""

    run_id: UUID
    session_id: UUID
    owner_id: int
    agent: str
    input: str
    labels: dict[str, str]
    # The runs before this one on its branch since the latest summary, oldest
    # first (at most a store's walk; see ``history_cut``), and that summary.
    history: tuple[EarlierRun, ...] = ()
    summary: SummaryState | None = None
    # Whether older runs were left out because the walk stopped before it reached
    # the branch's start or a summary.
    history_cut: bool = False
    # The policy in force, as stored on the run.
    policy: dict[str, Any] = field(default_factory=dict)
    # Seconds the run has already been working (a resumed run continues its budget).
    elapsed_seconds: float = 0.0
    # What the run recorded before this execution began (empty for a new run).
    turns: tuple[TurnState, ...] = ()
    # Facts the agent remembers that apply to this session, (scope, key, value):
    # those most relevant to the input first, within the agent's memory budget
    # (goaai.runtime.memory_ranking). Empty for a run that recorded turns: it
    # replays the messages it sent, the facts it was told among them.
    memory: tuple[tuple[str, str, Any], ...] = ()
    # The lease this execution holds; every renewal must name it.
    lease_owner: str = ""
    parent_run_id: UUID | None = None
    depth: int = 0
    # The agent as the run recorded it when it was created (Agent.as_dict), which it
    # executes even if the agent has changed since; None: the agent as it is now.
    definition: dict[str, Any] | None = None
    # What the caller gave the run beside its message (an OpenAI-compatible client):
    # tools it executes itself ({name, description, parameters}), offered to the
    # model beside the agent's own, and instructions of its own (its system
    # messages), told to the model after the agent's system prompt.
    client_tools: tuple[dict[str, Any], ...] = ()
    instructions: str = ""
    # The reason a cancel was asked for, as the claim found the run (a run that
    # was asked to stop while its worker died), or None.
    cancel_reason: str | None = None


class MemoryRecord(NamedTuple):
    """A memory entry as the runtime reads it (a named tuple: built on a hot path)."""

    id: UUID
    key: str
    value: Any
    scope: str
    session_id: UUID | None
    user_id: int | None
    agent: str
    version: int
    updated_at: dt.datetime
    expires_at: dt.datetime | None = None

    @classmethod
    def of(cls, entry: Any, copy: Copy = _same) -> MemoryRecord:
        return cls(
            id=entry.id,
            key=entry.key,
            value=copy(entry.value),
            scope=entry.scope,
            session_id=entry.session_id,
            user_id=entry.user_id,
            agent=entry.agent,
            version=entry.version,
            updated_at=entry.updated_at,
            expires_at=getattr(entry, "expires_at", None),
        )


@dataclass(frozen=True)
class ToolOutcome:
    """How one tool call ended: a JSON result, or an error of a known kind."""

    result: Any = None
    error_kind: str = ""
    error_message: str = ""

    @property
    def ok(self) -> bool:
        return not self.error_kind

    def for_model(self) -> dict[str, Any]:
        """The payload sent back to the model as the tool's answer."""
        if self.ok:
            return {"ok": True, "result": self.result}
        return {"ok": False, "error": {"kind": self.error_kind, "message": self.error_message}}


@dataclass(frozen=True)
class Branch:
    """Where a new top-level run continues from (the history it sees), and which
    run it redoes, if any: a retry of a failed or canceled run, a regenerated
    answer, or an edited message, each continuing from the point before that run."""

    previous_run_id: UUID | None
    retry_of_id: UUID | None = None
    regenerates_id: UUID | None = None
    edit_of_id: UUID | None = None
