"""Everything the runtime records, kept in this process's memory.

:class:`InMemoryRunStore` is a :class:`~goaai.runtime.store.RunStore` in plain Python
that behaves like the database-backed store: the same statuses and legal moves, the
same errors, leases, cancel requests and answers, the same memory scopes and
versions, and the same event log (events built by :mod:`goaai.runtime.payloads`,
numbered per session from 1 with no gap). Nothing outlives the process: it is for
running the turn loop without a database, in tests, scripts and demos.

Every method holds one lock for its whole change and checks everything it needs
before it changes anything, so a change is seen whole or not at all, as a
transaction's would be.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

from goaai.runtime import payloads
from goaai.runtime.context import MAX_HISTORY_RUNS
from goaai.runtime.embeddings import Embedder, EmbeddingError, cosine
from goaai.runtime.endings import INTERRUPTION_REASONS, LEASE_EXPIRED, child_stop, stop_kind
from goaai.runtime.errors import (
    DuplicateIdempotencyKey,
    IllegalTransition,
    InvalidMemoryScope,
    MemoryConflict,
    NotFound,
    RunActive,
    SessionEnded,
)
from goaai.runtime.memory_ranking import (
    bm25_rank,
    candidate_limit,
    choose_facts,
    fact_text,
    fuse,
    memory_budget,
    search_terms,
)
from goaai.runtime.policy import Decision
from goaai.runtime.pricing import Price, cost_of
from goaai.runtime.questions import Question
from goaai.runtime.tools.client import awaited_outputs
from goaai.runtime.types import (
    USAGE_KINDS,
    Branch,
    EarlierRun,
    MemoryRecord,
    Message,
    ModelReply,
    PlannedCall,
    RunContext,
    RunError,
    RunInfo,
    SessionInfo,
    StreamedText,
    SummaryState,
    ToolCallRequest,
    ToolCallState,
    ToolOutcome,
    TurnRecorded,
    TurnState,
    Usage,
    known_cost,
)
from goaai.runtime.vocabulary import (
    MEMORY_RESOLUTION_ORDER,
    OPEN_RUN_STATUSES,
    OPEN_TOOL_CALL_STATUSES,
    AwaitingKind,
    ErrorKind,
    MemoryScope,
    Multitask,
    RunStatus,
    SessionStatus,
    StopKind,
    ToolCallStatus,
    sources_of,
)

MAX_TITLE_LENGTH = 200
MAX_CANCEL_REASON_LENGTH = 200
MAX_MEMORY_KEY_LENGTH = 200
# A pending run nobody claimed for this long lost its hand-off to an executor; a run
# released after an answer and not claimed for this long lost its hand-off too.
HAND_OFF_GRACE_SECONDS = 30.0
# How far up a chain of parent runs the depth of a run is counted.
MAX_DEPTH_COUNTED = 10


class Delta(NamedTuple):
    """A piece of model text streamed to live subscribers (never part of the log)."""

    session_id: UUID
    run_id: UUID
    turn_id: UUID
    text: str
    # Where the piece begins in the text the turn has streamed.
    offset: int = 0


def _utc_now() -> dt.datetime:
    return dt.datetime.now(tz=dt.UTC)


def _json(value: Any) -> Any:
    """``value`` as a JSON column gives it back: a copy, with tuples as lists and
    what JSON cannot hold as text (the encoding the database store writes)."""
    return json.loads(json.dumps(value, default=str))


# What a memory entry belongs to: (scope, its owner, key). The owner is the session
# id, the user id, the agent id, or None for global entries.
MemoryOwner = UUID | int | str | None
_MemoryKey = tuple[str, MemoryOwner, str]


@dataclass
class _Session:
    id: UUID
    owner_id: int
    agent: str
    title: str
    metadata: dict[str, Any]
    created_at: dt.datetime
    status: str = SessionStatus.ACTIVE
    ended_at: dt.datetime | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    # Its runs in the order they were created.
    run_ids: list[UUID] = field(default_factory=list)


@dataclass
class _Run:
    id: UUID
    session_id: UUID
    agent: str
    input: str
    labels: dict[str, str]
    metadata: dict[str, Any]
    policy: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime
    created_by_id: int | None = None
    parent_run_id: UUID | None = None
    parent_tool_call_id: UUID | None = None
    # Its place on the session's branches (see runs_app.models.Run).
    previous_run_id: UUID | None = None
    retry_of_id: UUID | None = None
    regenerates_id: UUID | None = None
    edit_of_id: UUID | None = None
    # What a message sent while a run of the session was active did (enqueue,
    # interrupt; empty when none was), and while the run waits for its turn, the
    # open top-level run just before it (kept as runs of the session end).
    multitask: str = ""
    queued_behind_id: UUID | None = None
    idempotency_key: str | None = None
    fingerprint: str = ""
    status: RunStatus = RunStatus.PENDING
    output: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal = Decimal(0)
    unpriced_turns: int = 0
    agent_version_number: int | None = None
    definition: dict[str, Any] | None = None
    error_kind: str = ""
    error_message: str = ""
    error_retryable: bool = False
    cancel_requested_at: dt.datetime | None = None
    cancel_reason: str = ""
    # Who stopped it (a StopKind value) and the user who asked, if one did.
    cancel_kind: str = ""
    cancel_requested_by_id: int | None = None
    awaiting: dict[str, Any] | None = None
    awaiting_since: dt.datetime | None = None
    paused_seconds: float = 0.0
    lease_owner: str = ""
    lease_expires_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    # Its turns, by index.
    turns: dict[int, UUID] = field(default_factory=dict)
    # What its caller gave it beside its message (see RunContext.client_tools).
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    instructions: str = ""


@dataclass
class _Turn:
    id: UUID
    run_id: UUID
    index: int
    model: str
    request_messages: list[dict[str, Any]]
    started_at: dt.datetime
    response_text: str = ""
    response_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    response_model: str = ""
    finish_reason: str = ""
    reasoning: str = ""
    reasoning_state: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal | None = None
    retries: int = 0
    latency_ms: int | None = None
    interruption: str = ""
    usage_estimated: bool = False
    ended_at: dt.datetime | None = None
    # Its tool calls, by index.
    tool_calls: dict[int, UUID] = field(default_factory=dict)


@dataclass
class _ToolCall:
    id: UUID
    run_id: UUID
    turn_id: UUID
    call_id: str
    index: int
    name: str
    arguments: dict[str, Any]
    requires_approval: bool
    created_at: dt.datetime
    status: ToolCallStatus = ToolCallStatus.SCHEDULED
    result: Any = None
    error_kind: str = ""
    error_message: str = ""
    decided_by_id: int | None = None
    decided_at: dt.datetime | None = None
    decision: str = ""
    decision_reason: str = ""
    attempt: int = 0
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    duration_ms: int | None = None


@dataclass
class _Summary:
    id: UUID
    run_id: UUID
    through_run_id: UUID
    previous_id: UUID | None
    runs_covered: int
    text: str
    model: str
    usage: Usage
    cost: Decimal | None
    latency_ms: int
    created_at: dt.datetime


@dataclass
class _Entry:
    id: UUID
    key: str
    value: Any
    scope: str
    session_id: UUID | None
    user_id: int | None
    agent: str
    written_by: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime
    version: int = 1
    # (embedder name, unit vector) of its key and value, when the store has an embedder.
    vector: tuple[str, list[float]] | None = None


_Row = TypeVar("_Row")


def _found(rows: Mapping[UUID, _Row], row_id: UUID, what: str) -> _Row:
    """The row with ``row_id``; :class:`NotFound` (as the database store says it)."""
    row = rows.get(row_id)
    if row is None:
        raise NotFound(f"No {what} {row_id}.")
    return row


def _clean_key(key: str) -> str:
    cleaned = key.strip()
    if not cleaned:
        raise InvalidMemoryScope("A memory key cannot be empty.")
    if len(cleaned) > MAX_MEMORY_KEY_LENGTH:
        raise InvalidMemoryScope(f"A memory key is at most {MAX_MEMORY_KEY_LENGTH} characters.")
    return cleaned


def _memory_owner(
    scope: str, session_id: UUID | None, user_id: int | None, agent: str
) -> tuple[str, MemoryOwner]:
    """The scope (as text) and the owner its entries belong to; checks that the owner
    given is the one the scope needs and nothing else."""
    if scope not in MemoryScope.__members__.values():
        raise InvalidMemoryScope(
            f"Unknown memory scope {scope!r}; use session, user, agent or global."
        )
    needed = MemoryScope(scope)
    given: dict[MemoryScope, MemoryOwner] = {
        MemoryScope.SESSION: session_id,
        MemoryScope.USER: user_id,
        MemoryScope.AGENT: agent or None,
    }
    for owner_scope, owner in given.items():
        if owner_scope == needed and owner is None:
            raise InvalidMemoryScope(f"A {scope}-scoped entry needs a {scope}.")
        if owner_scope != needed and owner is not None:
            raise InvalidMemoryScope(f"A {scope}-scoped entry cannot name a {owner_scope}.")
    return needed.value, given.get(needed)


def _charge(run: _Run, used: Usage, cost: Decimal | None) -> None:
    """Add what a model call used, and cost (``None``: it had no price), to its run."""
    for kind in USAGE_KINDS:
        setattr(run, kind, getattr(run, kind) + getattr(used, kind))
    if cost is None:
        run.unpriced_turns += 1
    else:
        run.cost += cost


def _lease_live(run: _Run, now: dt.datetime) -> bool:
    return run.lease_expires_at is not None and run.lease_expires_at > now


def _without_worker(
    run: _Run, now: dt.datetime, stale: dt.datetime, parent: _Run | None = None
) -> bool:
    """Whether no live worker holds a run that should be executing (one called as a
    tool counts only while ``parent`` does not run: a running parent takes it up)."""
    if parent is not None and parent.status == RunStatus.RUNNING:
        return False
    if run.status == RunStatus.PENDING:
        # One waiting for its turn is handed over when the run before it ends.
        return run.created_at < stale and run.queued_behind_id is None
    if run.status != RunStatus.RUNNING:
        return False
    if run.lease_expires_at is None:
        return run.updated_at < stale
    return run.lease_expires_at < now


def _interrupted(cause: str, worker: str) -> payloads.Event:
    return payloads.run_interrupted(cause=cause, reason=INTERRUPTION_REASONS[cause], worker=worker)


def _waits_for(parent: _Run, child: _Run) -> bool:
    awaiting = parent.awaiting or {}
    return (
        parent.status == RunStatus.AWAITING_INPUT
        and awaiting.get("kind") == AwaitingKind.DELEGATED
        and awaiting.get("child_run") == str(child.id)
    )


class InMemoryRunStore:
    """A :class:`~goaai.runtime.store.RunStore` that keeps everything in memory.

    ``users`` maps user ids to names: when given, only those users may own sessions,
    and the log names whoever decided a tool call; without it any id is a user and
    deciders go unnamed. ``clock`` tells the time (leases, durations, timestamps).

    Besides the protocol it offers what a caller wants to read back:
    :meth:`events` (a session's log), :meth:`turns` (what a run recorded, as a run
    picked up again sees it), :meth:`child_runs` and :attr:`deltas` (streamed text).
    """

    def __init__(
        self,
        *,
        users: Mapping[int, str] | None = None,
        clock: Callable[[], dt.datetime] = _utc_now,
        prices: Sequence[tuple[str, dt.datetime, Price]] = (),
        embedder: Embedder | None = None,
    ) -> None:
        self._users = dict(users) if users is not None else None
        # Ranks memory by meaning as well as by words, as the database store does
        # when embeddings are configured.
        self._embedder = embedder
        self._clock = clock
        # (model as agents name it, in force from, price): what turns cost.
        self._prices = tuple(prices)
        # One lock for everything: a change of a run touches its session's log, its
        # tool calls and its child runs, and all of it must be seen together.
        self._lock = threading.RLock()
        self._sessions: dict[UUID, _Session] = {}
        self._runs: dict[UUID, _Run] = {}
        self._turns: dict[UUID, _Turn] = {}
        self._calls: dict[UUID, _ToolCall] = {}
        self._memory: dict[_MemoryKey, _Entry] = {}
        # History summaries, by the run they cover the branch through.
        self._summaries: dict[UUID, list[_Summary]] = {}
        # Where forked sessions start: the run each was forked at.
        self._fork_points: dict[UUID, UUID | None] = {}
        # Each agent's recorded versions (definitions), oldest first.
        self._versions: dict[str, list[dict[str, Any]]] = {}
        self.deltas: list[Delta] = []

    # Reading back

    def events(self, session_id: UUID) -> list[dict[str, Any]]:
        """The session's log, oldest first, each event as the API shows it: ``seq``,
        ``type``, ``run`` (its id as text, or ``None``), ``data``, ``created_at``."""
        with self._lock:
            events: list[dict[str, Any]] = _json(self._session(session_id).events)
            return events

    def turns(self, run_id: UUID) -> tuple[TurnState, ...]:
        """Every turn the run recorded, in order, each with its tool calls in order."""
        with self._lock:
            return self._turn_states(self._run(run_id))

    def child_runs(self, run_id: UUID) -> list[RunInfo]:
        """The runs ``run_id`` started by calling agents as tools, oldest first."""
        with self._lock:
            return [RunInfo.of(child, _json) for child in self._children(self._run(run_id))]

    # Sessions

    def create_session(
        self, *, owner_id: int, agent: str, title: str, metadata: dict[str, Any]
    ) -> SessionInfo:
        with self._lock:
            if self._users is not None and owner_id not in self._users:
                raise NotFound(f"No user {owner_id}.")
            now = self._clock()
            session = _Session(
                id=uuid.uuid4(),
                owner_id=owner_id,
                agent=agent,
                title=title[:MAX_TITLE_LENGTH],
                metadata=_json(dict(metadata or {})),
                created_at=now,
            )
            self._sessions[session.id] = session
            self._log(
                session,
                payloads.session_created(
                    agent=agent, title=session.title, metadata=session.metadata
                ),
                now,
            )
            return SessionInfo.of(session, _json)

    def fork_session(self, *, source_run_id: UUID, owner_id: int, title: str) -> SessionInfo:
        with self._lock:
            source = self._run(source_run_id)
            if source.parent_run_id is not None:
                raise NotFound(f"No run {source_run_id}.")
            original = self._session(source.session_id)
            forked = self.create_session(
                owner_id=owner_id,
                agent=original.agent,
                title=title or f"{original.title or 'Conversation'} (fork)",
                metadata=original.metadata,
            )
            self._fork_points[forked.id] = source.id
            return forked

    def get_session(self, session_id: UUID) -> SessionInfo:
        with self._lock:
            return SessionInfo.of(self._session(session_id), _json)

    def end_session(self, session_id: UUID, *, ended_by: int | None = None) -> SessionInfo:
        """End a session: runs in flight are canceled (a run a live worker executes
        is asked to stop) and later runs are refused. Ending it again changes nothing."""
        with self._lock:
            session = self._session(session_id)
            if session.status == SessionStatus.ENDED:
                return SessionInfo.of(session, _json)
            now = self._clock()
            session.status, session.ended_at = SessionStatus.ENDED, now
            open_runs = [run for run in self._runs_of(session) if run.status in OPEN_RUN_STATUSES]
            for run in open_runs:
                self._cancel_or_flag(run, "session_ended", now, by=ended_by)
            self._log(
                session,
                payloads.session_ended(
                    ended_at=now.isoformat(), runs_canceled=len(open_runs), ended_by=ended_by
                ),
                now,
            )
            return SessionInfo.of(session, _json)

    # Runs

    def create_run(
        self,
        *,
        session_id: UUID,
        agent: str,
        input: str,
        labels: dict[str, str],
        metadata: dict[str, Any],
        policy: dict[str, Any],
        policy_decisions: list[Decision] | None = None,
        created_by_id: int | None = None,
        idempotency_key: str | None = None,
        fingerprint: str = "",
        definition: dict[str, Any] | None = None,
        branch: Branch | None = None,
        multitask: str = Multitask.ENQUEUE,
        client_tools: Sequence[dict[str, Any]] = (),
        instructions: str = "",
        queued: bool = False,
    ) -> RunInfo:
        """A pending run (:class:`SessionEnded` if the session has ended,
        :class:`DuplicateIdempotencyKey` if the key was used in the session),
        continuing from ``branch`` (by default from the session's head). While an
        earlier run of the session is open, ``multitask`` queues it behind that run,
        interrupts that run and queues it, or refuses it (:class:`RunActive`)."""
        with self._lock:
            now = self._clock()
            ahead = self._open_runs(self._session(session_id))
            if ahead and multitask == Multitask.REJECT:
                self._refuse_beside(self._session(session_id), ahead[-1], idempotency_key)
            if branch is None:
                branch = Branch(previous_run_id=self._head(session_id))
            run = _Run(
                previous_run_id=branch.previous_run_id,
                retry_of_id=branch.retry_of_id,
                regenerates_id=branch.regenerates_id,
                edit_of_id=branch.edit_of_id,
                id=uuid.uuid4(),
                session_id=session_id,
                agent=agent,
                input=input,
                labels=_json(dict(labels or {})),
                metadata=_json(dict(metadata or {})),
                policy=_json(dict(policy or {})),
                created_at=now,
                updated_at=now,
                created_by_id=created_by_id,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                client_tools=_json([dict(spec) for spec in client_tools]),
                instructions=instructions,
            )
            self._record_definition(run, definition)
            self._add_run(run, policy_decisions or [])
            if ahead:
                self._queue(run, ahead, Multitask(multitask), now)
            return RunInfo.of(run, _json)

    def _record_definition(self, run: _Run, definition: dict[str, Any] | None) -> None:
        """The run's agent version: the latest recorded version of its agent with
        the same definition, or the next one."""
        if definition is None:
            return
        versions = self._versions.setdefault(run.agent, [])
        same = [number for number, known in enumerate(versions, 1) if known == definition]
        if not same:
            versions.append(_json(definition))
            same = [len(versions)]
        run.agent_version_number = same[-1]
        run.definition = _json(definition)

    def get_run(self, run_id: UUID) -> RunInfo:
        with self._lock:
            return RunInfo.of(self._run(run_id), _json)

    def request_cancel(
        self, run_id: UUID, reason: str, *, by: int | None = None, kind: str = ""
    ) -> RunInfo:
        """Ask a run to stop: a run no loop steps through is canceled at once, a
        running one is flagged for its loop; ``by`` and ``kind`` say who stops it
        (see :func:`~goaai.runtime.endings.stop_kind`). A finished run stays as it is."""
        with self._lock:
            run = self._run(run_id)
            self._cancel_or_flag(run, reason, self._clock(), by=by, kind=kind)
            return RunInfo.of(run, _json)

    def respond(
        self,
        run_id: UUID,
        *,
        tool_call_id: UUID | None,
        decision: str,
        reason: str,
        answer: str | None,
        decided_by_id: int | None,
        choices: Sequence[str] | None = None,
    ) -> RunInfo:
        """Record a person's approval, denial or answer; the run becomes claimable.

        :class:`IllegalTransition` when the run does not wait, or waits for
        something other than what the answer addresses (an answer that came too
        late, or one meant for its child run); :class:`InvalidAnswer` when the
        question does not accept the answer."""
        with self._lock:
            run = self._run(run_id)
            call = self._waited_call(run, tool_call_id)
            kind = (run.awaiting or {}).get("kind")
            now = self._clock()
            if kind == AwaitingKind.QUESTION:
                if answer is None and choices is None:
                    raise IllegalTransition(run_id, "waiting for an answer", "a decision")
                result = Question.of(run.awaiting or {}).result(answer=answer, choices=choices)
                self._decide_call(
                    call, "answered", "", decided_by_id, now, record_reason=False, answer=result
                )
                self._end_call(call, ToolCallStatus.SUCCEEDED, now, result=result)
            else:
                self._approve_or_deny(run, call, decision, reason, decided_by_id, now)
            self._resume(run, now, answered=kind)
            return RunInfo.of(run, _json)

    def create_child_run(
        self,
        *,
        parent_run_id: UUID,
        parent_tool_call_id: UUID,
        agent: str,
        input: str,
        labels: dict[str, str],
        policy: dict[str, Any],
        policy_decisions: list[Decision] | None = None,
        definition: dict[str, Any] | None = None,
    ) -> RunInfo:
        """A run of ``agent`` called as a tool, in the parent's session, linked to it,
        under ``policy`` (which ``policy_decisions`` shaped)."""
        with self._lock:
            parent = self._run(parent_run_id)
            now = self._clock()
            child = _Run(
                id=uuid.uuid4(),
                session_id=parent.session_id,
                agent=agent,
                input=input,
                labels=_json(dict(labels or {})),
                metadata={},
                policy=_json(dict(policy or {})),
                created_at=now,
                updated_at=now,
                parent_run_id=parent_run_id,
                parent_tool_call_id=parent_tool_call_id,
            )
            self._record_definition(child, definition)
            self._add_run(child, policy_decisions or [])
            return RunInfo.of(child, _json)

    # The turn loop

    def claim_run(self, run_id: UUID, *, owner: str, lease_seconds: float) -> RunContext | None:
        """Take a run under a lease held by ``owner``: a pending run starts (unless
        it waits for an earlier run of its session); a running run no live worker
        holds is taken over. ``None`` for any other run. The facts the run is told
        are chosen once the claim is made, with the lock let go while the embedder
        (if any) embeds the run's input."""
        context = self._claim(run_id, owner=owner, lease_seconds=lease_seconds)
        if context is None or context.turns:
            return context
        vector = self._embedded(context.input)
        with self._lock:
            session = self._sessions.get(context.session_id)
            if session is None:
                return context
            budget = memory_budget(context.definition)
            facts = self._memory_facts(session, context.input, budget, vector)
        return replace(context, memory=facts)

    def _claim(self, run_id: UUID, *, owner: str, lease_seconds: float) -> RunContext | None:
        with self._lock:
            run = self._run(run_id)
            now = self._clock()
            expires = now + dt.timedelta(seconds=lease_seconds)
            if run.status == RunStatus.PENDING:
                if run.queued_behind_id is not None:
                    return None
                self._move(run, RunStatus.RUNNING, now, only_from=RunStatus.PENDING)
                run.started_at, run.lease_owner, run.lease_expires_at = now, owner, expires
                self._log_run(run, payloads.run_started(agent=run.agent, worker=owner), now)
                return self._context(run, owner, fresh=True, now=now)
            if run.status != RunStatus.RUNNING or _lease_live(run, now):
                return None
            previous, told = run.lease_owner, run.lease_expires_at
            run.lease_owner, run.lease_expires_at = owner, expires
            if previous:
                # Its worker is lost, and this one takes its place. A lease that ran
                # out says so now; one without an expiry was told lost already.
                if told is not None:
                    self._log_run(run, _interrupted(LEASE_EXPIRED, previous), now)
                self._log_run(
                    run, payloads.run_resumed_by_worker(previous_worker=previous, worker=owner), now
                )
            return self._context(run, owner, fresh=False, now=now)

    def next_queued_run(self, session_id: UUID) -> UUID | None:
        with self._lock:
            ahead = self._open_runs(self._session(session_id))
            if ahead and ahead[0].status == RunStatus.PENDING:
                return ahead[0].id
            return None

    def renew_lease(self, run_id: UUID, *, owner: str, lease_seconds: float) -> bool:
        with self._lock:
            run = self._runs.get(run_id)
            if (
                run is None
                or run.lease_owner != owner
                or run.status != RunStatus.RUNNING
                or run.lease_expires_at is None
            ):
                return False
            run.lease_expires_at = self._clock() + dt.timedelta(seconds=lease_seconds)
            return True

    def expired_runs(self, *, limit: int = 100) -> list[UUID]:
        with self._lock:
            now = self._clock()
            stale = now - dt.timedelta(seconds=HAND_OFF_GRACE_SECONDS)
            lost = [
                run
                for run in self._runs.values()
                if _without_worker(run, now, stale, self._parent(run))
            ]
            lost.sort(key=lambda run: run.created_at)
            return [run.id for run in lost[:limit]]

    def held_runs(self, *, host: str, limit: int = 100) -> list[tuple[UUID, str]]:
        with self._lock:
            held = sorted(
                (
                    run
                    for run in self._runs.values()
                    if run.status == RunStatus.RUNNING
                    and run.lease_owner.startswith(f"{host}:")
                    and run.lease_expires_at is not None
                ),
                key=lambda run: run.created_at,
            )
            return [(run.id, run.lease_owner) for run in held[:limit]]

    def interrupt_run(self, run_id: UUID, *, owner: str, cause: str) -> RunInfo | None:
        """Record that the worker holding the run as ``owner`` is lost and take its
        lease from it; ``None``, recording nothing, if ``owner`` holds it no more."""
        with self._lock:
            run = self._run(run_id)
            if (
                run.status != RunStatus.RUNNING
                or run.lease_owner != owner
                or run.lease_expires_at is None
            ):
                return None
            now = self._clock()
            # The lease keeps its owner without an expiry: told lost (see the ORM
            # store's services.run_interrupt).
            run.lease_expires_at, run.updated_at = None, now
            self._log_run(run, _interrupted(cause, owner), now)
            return RunInfo.of(run, _json)

    def tool_call_child(self, tool_call_id: UUID) -> RunInfo | None:
        with self._lock:
            call = self._call(tool_call_id)
            children = [
                child
                for child in self._children(self._runs[call.run_id])
                if child.parent_tool_call_id == tool_call_id
            ]
            return RunInfo.of(children[0], _json) if children else None

    def cancel_requested(self, run_id: UUID) -> str | None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return "run deleted"
            return self._cancel_reason(run)

    def start_turn(
        self, *, run_id: UUID, index: int, model: str, messages: list[dict[str, Any]]
    ) -> UUID:
        with self._lock:
            run = self._run(run_id)
            if index in run.turns:
                raise IllegalTransition(run_id, f"already at turn {index}", f"turn {index}")
            now = self._clock()
            turn = _Turn(
                id=uuid.uuid4(),
                run_id=run_id,
                index=index,
                model=model,
                request_messages=_json(messages),
                started_at=now,
            )
            self._turns[turn.id] = turn
            run.turns[index] = turn.id
            self._log_run(run, payloads.turn_started(turn=turn.id, index=index, model=model), now)
            return turn.id

    def complete_turn(
        self,
        *,
        turn_id: UUID,
        reply: ModelReply,
        latency_ms: int,
        retries: int = 0,
        interruption: str = "",
        usage_estimated: bool = False,
        calls: Sequence[PlannedCall] = (),
    ) -> TurnRecorded:
        with self._lock:
            turn = self._turn(turn_id)
            run = self._runs[turn.run_id]
            now = self._clock()
            used = reply.usage
            cost = self._cost(turn.model, used, now)
            turn.response_text = reply.text
            turn.response_tool_calls = _json([call.as_dict() for call in reply.tool_calls])
            turn.response_model = reply.model
            turn.finish_reason = reply.finish_reason
            turn.reasoning = reply.reasoning
            turn.reasoning_state = _json(list(reply.reasoning_state))
            for kind in USAGE_KINDS:
                setattr(turn, kind, getattr(used, kind))
            _charge(run, used, cost)
            turn.cost, turn.retries = cost, retries
            turn.interruption, turn.usage_estimated = interruption, usage_estimated
            turn.latency_ms, turn.ended_at = latency_ms, now
            self._log_run(
                run,
                payloads.turn_completed(
                    turn=turn.id,
                    index=turn.index,
                    tool_calls=len(reply.tool_calls),
                    latency_ms=latency_ms,
                    finish_reason=reply.finish_reason,
                    interruption=interruption,
                    usage_estimated=usage_estimated,
                ),
                now,
            )
            if payloads.is_message(reply.text, interruption):
                self._log_run(run, payloads.message_completed(turn=turn.id, text=reply.text), now)
            self._log_run(
                run,
                payloads.usage(turn=turn.id, used=used, cost=cost, estimated=usage_estimated),
                now,
            )
            cancel = self._cancel_reason(run)
            ids = tuple(
                self._new_call(
                    turn_id,
                    call.position,
                    call.request,
                    requires_approval=call.requires_approval,
                    start=call.start,
                )
                for call in (calls if cancel is None else ())
            )
            return TurnRecorded(cancel, ids)

    def complete_turn_and_run(
        self, *, turn_id: UUID, reply: ModelReply, latency_ms: int, retries: int = 0
    ) -> RunInfo:
        with self._lock:
            run = self._runs[self._turn(turn_id).run_id]
            if run.status != RunStatus.RUNNING:
                raise IllegalTransition(run.id, run.status, RunStatus.COMPLETED)
            self.complete_turn(turn_id=turn_id, reply=reply, latency_ms=latency_ms, retries=retries)
            return self.finish_run(run_id=run.id, status=RunStatus.COMPLETED, output=reply.text)

    def checkpoint_turn(self, *, turn_id: UUID, text: str) -> None:
        with self._lock:
            turn = self._turns.get(turn_id)
            if turn is not None and turn.ended_at is None:
                turn.response_text = text

    def streaming_turns(self, session_id: UUID) -> list[StreamedText]:
        with self._lock:
            found = []
            for run_id in self._session(session_id).run_ids:
                run = self._runs[run_id]
                if run.status not in OPEN_RUN_STATUSES:
                    continue
                for _, turn_id in sorted(run.turns.items()):
                    turn = self._turns[turn_id]
                    if turn.ended_at is None and turn.response_text:
                        found.append(StreamedText(run.id, turn.id, turn.response_text))
            return found

    def _cost(self, model: str, used: Usage, at: dt.datetime) -> Decimal | None:
        """The cost of a turn by this store's price list (the latest price of the
        model that took effect by ``at``), or ``None``."""
        in_force = [
            (since, price) for name, since, price in self._prices if name == model and since <= at
        ]
        if not in_force:
            return None
        return cost_of(used, max(in_force, key=lambda item: item[0])[1])

    def model_retry(
        self,
        *,
        turn_id: UUID,
        attempt: int,
        error_kind: str,
        message: str,
        delay_seconds: float,
    ) -> None:
        with self._lock:
            turn = self._turn(turn_id)
            if turn.ended_at is None:
                turn.response_text = ""
            self._log_run(
                self._runs[turn.run_id],
                payloads.model_retry(
                    turn=turn.id,
                    attempt=attempt,
                    error_kind=error_kind,
                    message=message,
                    delay_seconds=delay_seconds,
                ),
                self._clock(),
            )

    def schedule_tool_call(
        self, *, turn_id: UUID, index: int, request: ToolCallRequest, requires_approval: bool
    ) -> UUID:
        """Record a tool call the model asked for (and, if needed, ask for approval)."""
        with self._lock:
            return self._new_call(turn_id, index, request, requires_approval=requires_approval)

    def start_tool_call(self, *, turn_id: UUID, index: int, request: ToolCallRequest) -> UUID:
        """Record a call that needs no approval as scheduled and running, in one step."""
        with self._lock:
            return self._new_call(turn_id, index, request, requires_approval=False, start=True)

    def begin_tool_call(self, *, tool_call_id: UUID) -> int:
        """Mark a scheduled (or interrupted) call running; returns its attempt number."""
        with self._lock:
            call = self._call(tool_call_id)
            if call.status not in OPEN_TOOL_CALL_STATUSES:
                raise IllegalTransition(
                    tool_call_id, call.status, ToolCallStatus.RUNNING, what="Tool call"
                )
            now = self._clock()
            call.status, call.started_at = ToolCallStatus.RUNNING, now
            call.attempt += 1
            self._log_run(
                self._runs[call.run_id],
                payloads.tool_call_started(tool_call=call.id, name=call.name, attempt=call.attempt),
                now,
            )
            return call.attempt

    def await_input(
        self,
        *,
        run_id: UUID,
        kind: str,
        tool_call_id: UUID,
        question: str = "",
        choices: Sequence[str] = (),
        multiple: bool = False,
        child_run_id: UUID | None = None,
        tool_call_ids: Sequence[UUID] = (),
    ) -> RunInfo:
        """Pause the run until a person approves/denies the call or answers the
        question (``kind="delegated"``: until the child run the call started ends;
        ``kind="client_tool"``: until the caller sends its tools' results)."""
        with self._lock:
            run = self._run(run_id)
            awaiting = payloads.awaiting(
                kind=AwaitingKind(kind),
                tool_call=tool_call_id,
                question=question,
                choices=choices,
                multiple=multiple,
                child_run=child_run_id,
                tool_calls=tool_call_ids,
            )
            now = self._clock()
            self._move(run, RunStatus.AWAITING_INPUT, now)
            # Nobody executes a waiting run: the worker's lease is released.
            run.awaiting, run.awaiting_since = awaiting, now
            run.lease_owner, run.lease_expires_at = "", None
            self._log_run(run, payloads.run_awaiting_input(awaiting=awaiting), now)
            return RunInfo.of(run, _json)

    def submit_tool_outputs(
        self, run_id: UUID, *, outputs: Mapping[UUID, Any], submitted_by_id: int | None
    ) -> RunInfo:
        """Record the caller's results for every call of its tools the run waits on
        (:class:`InvalidAnswer` if any is missing or not waited on); the run becomes
        claimable."""
        with self._lock:
            run = self._run(run_id)
            awaiting = run.awaiting or {}
            if run.status != RunStatus.AWAITING_INPUT or (
                awaiting.get("kind") != AwaitingKind.CLIENT_TOOL
            ):
                raise IllegalTransition(run.id, run.status, "given the caller's tool results")
            answered = awaited_outputs(awaiting, outputs)
            now = self._clock()
            for call_id, result in answered:
                call = self._calls[call_id]
                self._decide_call(
                    call, "answered", "", submitted_by_id, now, record_reason=False, answer=None
                )
                self._end_call(call, ToolCallStatus.SUCCEEDED, now, result=result)
            self._resume(run, now, answered=AwaitingKind.CLIENT_TOOL)
            return RunInfo.of(run, _json)

    def settle_child(self, run_id: UUID) -> UUID | None:
        """A child run ended: if its parent waits for it, its answer (or failure)
        becomes the parent's tool-call result and the parent may continue. Returns
        the parent to hand to the executor, or ``None``."""
        with self._lock:
            child = self._runs.get(run_id)
            if child is None or child.parent_run_id is None or not child.status.is_terminal:
                return None
            parent = self._runs.get(child.parent_run_id)
            if parent is None or not _waits_for(parent, child):
                return None
            call = self._calls[UUID(str((parent.awaiting or {})["tool_call"]))]
            now = self._clock()
            if child.status == RunStatus.COMPLETED:
                result = {"agent": child.agent, "run": str(child.id), "answer": child.output}
                self._end_call(call, ToolCallStatus.SUCCEEDED, now, result=result)
            else:
                detail = child.error_message or child.cancel_reason or child.status
                self._end_call(
                    call,
                    ToolCallStatus.FAILED,
                    now,
                    error_kind=ErrorKind.DOMAIN_REJECTION,
                    error_message=f"The {child.agent} agent did not answer: {detail}",
                )
            self._resume(parent, now, answered=AwaitingKind.DELEGATED, child_run=str(child.id))
            return parent.id

    def finish_tool_call(self, *, tool_call_id: UUID, outcome: ToolOutcome) -> str | None:
        with self._lock:
            call = self._call(tool_call_id)
            self._end_call(
                call,
                ToolCallStatus.FAILED if outcome.error_kind else ToolCallStatus.SUCCEEDED,
                self._clock(),
                result=None if outcome.error_kind else outcome.result,
                error_kind=outcome.error_kind,
                error_message=outcome.error_message,
                only_from=frozenset({ToolCallStatus.RUNNING}),
            )
            run = self._runs.get(call.run_id)
            return "run deleted" if run is None else self._cancel_reason(run)

    def finish_run(
        self,
        *,
        run_id: UUID,
        status: str,
        output: str = "",
        error: RunError | None = None,
        rule: str = "",
    ) -> RunInfo:
        with self._lock:
            run = self._run(run_id)
            now = self._clock()
            # A policy rule that ended the run stopped it; the rule is its reason.
            stop = {"cancel_kind": StopKind.POLICY.value, "cancel_reason": rule} if rule else {}
            if status == RunStatus.COMPLETED:
                self._run_end(run, RunStatus.COMPLETED, now, output=output)
            elif status == RunStatus.CANCELED:
                self._cancel(run, self._cancel_reason(run) or "", now, output=output)
            elif status == RunStatus.TIMED_OUT:
                message = error.message if error else ""
                self._run_end(
                    run,
                    RunStatus.TIMED_OUT,
                    now,
                    error_kind=ErrorKind.TIMEOUT,
                    error_message=message,
                    **stop,
                )
            else:
                failure = error or RunError(kind="internal", message="The run failed.")
                self._run_end(
                    run,
                    RunStatus.FAILED,
                    now,
                    error_kind=failure.kind,
                    error_message=failure.message,
                    error_retryable=failure.retryable,
                    **stop,
                    **({"output": output} if output else {}),
                )
            return RunInfo.of(run, _json)

    def policy_decision(self, *, run_id: UUID, rule: str, verdict: str, reason: str) -> None:
        with self._lock:
            self._log_run(
                self._run(run_id),
                payloads.policy_decision(rule=rule, verdict=verdict, reason=reason),
                self._clock(),
            )

    def record_summary(
        self,
        *,
        run_id: UUID,
        through_run_id: UUID,
        previous_id: UUID | None,
        runs_covered: int,
        text: str,
        model: str,
        reply: ModelReply,
        latency_ms: int,
    ) -> UUID:
        with self._lock:
            run = self._run(run_id)
            now = self._clock()
            used = reply.usage
            cost = self._cost(model, used, now)
            summary = _Summary(
                id=uuid.uuid4(),
                run_id=run_id,
                through_run_id=through_run_id,
                previous_id=previous_id,
                runs_covered=runs_covered,
                text=text,
                model=model,
                usage=used,
                cost=cost,
                latency_ms=latency_ms,
                created_at=now,
            )
            self._summaries.setdefault(through_run_id, []).append(summary)
            _charge(run, used, cost)
            self._log_run(
                run,
                payloads.history_summarized(
                    summary=summary.id,
                    through_run=through_run_id,
                    runs_covered=runs_covered,
                    model=model,
                    used=used,
                    cost=cost,
                    latency_ms=latency_ms,
                ),
                now,
            )
            return summary.id

    def summaries(self, session_id: UUID) -> list[dict[str, Any]]:
        """The history summaries written in a session, oldest first."""
        with self._lock:
            runs = set(self._session(session_id).run_ids)
            found = [s for group in self._summaries.values() for s in group if s.run_id in runs]
            return [
                {
                    "id": s.id,
                    "run": s.run_id,
                    "through_run": s.through_run_id,
                    "runs_covered": s.runs_covered,
                    "text": s.text,
                    "input_tokens": s.usage.input_tokens,
                    "output_tokens": s.usage.output_tokens,
                }
                for s in sorted(found, key=lambda s: s.created_at)
            ]

    def tool_result(self, *, tool_call_id: UUID, owner_id: int) -> ToolOutcome | None:
        with self._lock:
            call = self._calls.get(tool_call_id)
            if call is None or call.status not in (
                ToolCallStatus.SUCCEEDED,
                ToolCallStatus.FAILED,
            ):
                return None
            session = self._sessions.get(self._runs[call.run_id].session_id)
            if session is None or session.owner_id != owner_id:
                return None
            return ToolOutcome(
                result=_json(call.result),
                error_kind=call.error_kind,
                error_message=call.error_message,
            )

    def publish_delta(self, context: RunContext, turn_id: UUID, text: str, offset: int) -> None:
        """Stream a piece of model text to live subscribers (never stored)."""
        with self._lock:
            self.deltas.append(Delta(context.session_id, context.run_id, turn_id, text, offset))

    # Memory

    def store_memory(
        self,
        *,
        key: str,
        value: Any,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
        expected_version: int | None = None,
        written_by_user: int | None = None,
        written_by_run: UUID | None = None,
        written_by_tool_call: UUID | None = None,
    ) -> MemoryRecord:
        """Create or update the entry (scope, owner, key); ``expected_version``: see
        :meth:`_check_version`. Each change is an event in the entry's session's
        log, or, for another scope, in that of the run that made it."""
        key = _clean_key(key)
        vector = self._embedded(fact_text(key, _json(value)))
        with self._lock:
            scope, owner = _memory_owner(scope, session_id, user_id, agent)
            log = self._memory_log(session_id, written_by_run)
            entry = self._memory.get((scope, owner, key))
            self._check_version(entry, expected_version, scope, key)
            now = self._clock()
            writer = payloads.memory_writer(
                user_id=written_by_user, run_id=written_by_run, tool_call_id=written_by_tool_call
            )
            if entry is None:
                entry = _Entry(
                    id=uuid.uuid4(),
                    key=key,
                    value=_json(value),
                    scope=scope,
                    session_id=session_id,
                    user_id=user_id,
                    agent=agent,
                    written_by=writer,
                    created_at=now,
                    updated_at=now,
                )
                self._memory[(scope, owner, key)] = entry
                action = "created"
            else:
                entry.value, entry.written_by, entry.updated_at = _json(value), writer, now
                entry.version += 1
                action = "updated"
            if self._embedder is not None:
                entry.vector = None if vector is None else (self._embedder.name, vector)
            if log is not None:
                event = payloads.memory_stored(
                    entry=entry.id,
                    key=key,
                    scope=scope,
                    version=entry.version,
                    action=action,
                    written_by=writer,
                )
                self._log(log, event, now, run_id=written_by_run)
            return MemoryRecord.of(entry, _json)

    def resolve_memory(self, *, key: str, session_id: UUID) -> MemoryRecord | None:
        with self._lock:
            session = self._session(session_id)
            for scope in MEMORY_RESOLUTION_ORDER:
                entry = self._memory.get((scope.value, self._scope_owner(scope, session), key))
                if entry is not None:
                    return MemoryRecord.of(entry, _json)
            return None

    def memory_keys(
        self,
        *,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
    ) -> list[str]:
        with self._lock:
            wanted = _memory_owner(scope, session_id, user_id, agent)
            return sorted(key for (s, o, key) in self._memory if (s, o) == wanted)

    def get_memory(
        self,
        *,
        key: str,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
    ) -> MemoryRecord | None:
        with self._lock:
            scope, owner = _memory_owner(scope, session_id, user_id, agent)
            entry = self._memory.get((scope, owner, key))
            return MemoryRecord.of(entry, _json) if entry is not None else None

    def delete_memory(
        self,
        *,
        key: str,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
        expected_version: int | None = None,
        written_by_user: int | None = None,
        written_by_run: UUID | None = None,
        written_by_tool_call: UUID | None = None,
    ) -> bool:
        """Delete the entry; ``False`` if there is none (whatever the version named)."""
        with self._lock:
            key = _clean_key(key)
            scope, owner = _memory_owner(scope, session_id, user_id, agent)
            log = self._memory_log(session_id, written_by_run)
            entry = self._memory.get((scope, owner, key))
            if entry is None:
                return False
            self._check_version(entry, expected_version, scope, key)
            del self._memory[(scope, owner, key)]
            if log is not None:
                self._log(
                    log,
                    payloads.memory_deleted(entry=entry.id, key=key, scope=scope),
                    self._clock(),
                    run_id=written_by_run,
                )
            return True

    # Housekeeping

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` now: every change here is whole once its method returns."""
        callback()

    @contextmanager
    def worker(self) -> Iterator[None]:
        """A worker thread has nothing to open or close here."""
        yield

    # Lookups

    def _session(self, session_id: UUID) -> _Session:
        return _found(self._sessions, session_id, "session")

    def _run(self, run_id: UUID) -> _Run:
        return _found(self._runs, run_id, "run")

    def _turn(self, turn_id: UUID) -> _Turn:
        return _found(self._turns, turn_id, "turn")

    def _call(self, tool_call_id: UUID) -> _ToolCall:
        return _found(self._calls, tool_call_id, "tool call")

    def _runs_of(self, session: _Session) -> list[_Run]:
        return [self._runs[run_id] for run_id in session.run_ids]

    def _parent(self, run: _Run) -> _Run | None:
        return self._runs.get(run.parent_run_id) if run.parent_run_id is not None else None

    def _children(self, run: _Run) -> list[_Run]:
        return [
            r for r in self._runs_of(self._sessions[run.session_id]) if r.parent_run_id == run.id
        ]

    def _calls_of(self, run: _Run) -> list[_ToolCall]:
        turns = [self._turns[turn_id] for _, turn_id in sorted(run.turns.items())]
        return [
            self._calls[call_id] for turn in turns for _, call_id in sorted(turn.tool_calls.items())
        ]

    # The event log

    def _log(
        self,
        session: _Session,
        event: payloads.Event,
        now: dt.datetime,
        *,
        run_id: UUID | None = None,
    ) -> None:
        event_type, data = event
        session.events.append(
            payloads.logged(
                seq=len(session.events) + 1,
                type=event_type,
                run=run_id,
                data=_json(data),
                created_at=now,
            )
        )

    def _log_run(self, run: _Run, event: payloads.Event, now: dt.datetime) -> None:
        self._log(self._sessions[run.session_id], event, now, run_id=run.id)

    # Runs: creation and status

    def _add_run(self, run: _Run, decisions: list[Decision]) -> None:
        """Record a new run in its session, with the events that announce it."""
        session = self._session(run.session_id)
        if session.status != SessionStatus.ACTIVE:
            raise SessionEnded(f"Session {session.id} has ended; it accepts no new runs.")
        key = run.idempotency_key
        if key is not None and any(r.idempotency_key == key for r in self._runs_of(session)):
            raise DuplicateIdempotencyKey(
                f"Session {session.id} already has a run with idempotency key {key!r}."
            )
        self._runs[run.id] = run
        session.run_ids.append(run.id)
        now = run.created_at
        self._log_run(
            run,
            payloads.run_created(
                agent=run.agent,
                input=run.input,
                labels=run.labels,
                parent_run=run.parent_run_id,
                previous_run=run.previous_run_id,
                retry_of=run.retry_of_id,
                regenerates=run.regenerates_id,
                edit_of=run.edit_of_id,
            ),
            now,
        )
        for decision in decisions:
            self._log_run(
                run,
                payloads.policy_decision(
                    rule=decision.rule, verdict=decision.verdict, reason=decision.reason
                ),
                now,
            )
        if run.parent_run_id is not None:
            self._log_run(
                self._run(run.parent_run_id),
                payloads.run_child_linked(
                    child_run=run.id, parent_tool_call=run.parent_tool_call_id
                ),
                now,
            )

    def _move(
        self, run: _Run, target: RunStatus, now: dt.datetime, *, only_from: RunStatus | None = None
    ) -> None:
        """Move a run to ``target`` if its current status leads there (starting and
        resuming both lead to running, each from one status only)."""
        allowed = {only_from} if only_from else sources_of(target)
        if run.status not in allowed:
            raise IllegalTransition(run.id, run.status, target)
        run.status, run.updated_at = target, now

    def _run_end(self, run: _Run, status: RunStatus, now: dt.datetime, **changes: Any) -> None:
        """Move a run to a terminal ``status`` with ``changes``, stop what it left open
        (agents it called that still work or wait, tool calls still scheduled or
        running) and record it."""
        self._move(run, status, now)
        run.ended_at = now
        for name, value in changes.items():
            setattr(run, name, value)
        if status != RunStatus.COMPLETED:
            reason, kind = child_stop(
                parent_run=str(run.id), status=status, kind=run.cancel_kind, rule=run.cancel_reason
            )
            for child in self._children(run):
                if child.status in OPEN_RUN_STATUSES:
                    self._cancel_or_flag(
                        child, reason, now, by=run.cancel_requested_by_id, kind=kind
                    )
        stopped = payloads.told_stop(status, self._stopped_by(run))
        for call in self._calls_of(run):
            if call.status in OPEN_TOOL_CALL_STATUSES:
                self._end_call(
                    call,
                    ToolCallStatus.CANCELED,
                    now,
                    reason=f"the run {status}",
                    stopped=stopped,
                )
        event = payloads.run_ended(
            status=status,
            output=run.output,
            usage=payloads.usage_totals(
                Usage.of(run), known_cost(run.cost, run.unpriced_turns), run.unpriced_turns
            ),
            error_kind=run.error_kind,
            error_message=run.error_message,
            retryable=run.error_retryable,
            reason=run.cancel_reason,
            stopped=stopped,
        )
        self._log_run(run, event, now)
        if run.parent_run_id is None:
            run.queued_behind_id = None
            self._requeue(self._sessions[run.session_id])

    def _stopped_by(self, run: _Run) -> dict[str, Any] | None:
        """Who or what stopped ``run``, as its end event tells it."""
        by = run.cancel_requested_by_id
        name = self._users.get(by) if self._users is not None and by is not None else None
        return payloads.stopped_by(kind=run.cancel_kind, user=name, rule=run.cancel_reason)

    def _cancel(self, run: _Run, reason: str, now: dt.datetime, *, output: str = "") -> None:
        """End a run canceled; ``output`` is what it had said when it was stopped."""
        kept = {"output": output} if output else {}
        reason = reason[:MAX_CANCEL_REASON_LENGTH]
        self._run_end(run, RunStatus.CANCELED, now, cancel_reason=reason, **kept)

    # Runs: one at a time in a session

    def _open_runs(self, session: _Session) -> list[_Run]:
        """The session's top-level runs that have not ended, oldest first: the first
        is the one at work (or waiting for a person), the others wait their turn."""
        return [
            run
            for run in self._runs_of(session)
            if run.parent_run_id is None and run.status in OPEN_RUN_STATUSES
        ]

    def _refuse_beside(self, session: _Session, active: _Run, key: str | None) -> None:
        """Refuse a message while ``active`` works (``multitask: reject``), after the
        refusals any message gets (an ended session, a key used already)."""
        if session.status != SessionStatus.ACTIVE:
            raise SessionEnded(f"Session {session.id} has ended; it accepts no new runs.")
        if key is not None and any(r.idempotency_key == key for r in self._runs_of(session)):
            raise DuplicateIdempotencyKey(
                f"Session {session.id} already has a run with idempotency key {key!r}."
            )
        raise RunActive(
            f"Run {active.id} of session {session.id} is still {active.status}; this "
            "session takes one message at a time.",
            active_run_id=active.id,
        )

    def _queue(self, run: _Run, ahead: list[_Run], multitask: Multitask, now: dt.datetime) -> None:
        """A new run arrived while ``ahead`` were open: it waits behind them, after
        asking them to stop for ``interrupt``, and records the policy applied."""
        run.multitask = multitask
        if multitask == Multitask.INTERRUPT:
            for earlier in ahead:
                self._cancel_or_flag(
                    earlier,
                    f"interrupted by a new message (run {run.id})",
                    now,
                    by=run.created_by_id,
                    kind=StopKind.SUPERSEDED,
                )
            ahead = [earlier for earlier in ahead if earlier.status in OPEN_RUN_STATUSES]
        if not ahead:
            return
        run.queued_behind_id = ahead[-1].id
        self._log_run(
            run,
            payloads.run_queued(behind=ahead[-1].id, ahead=len(ahead), multitask=multitask),
            now,
        )

    def _requeue(self, session: _Session) -> None:
        """After a run of the session ended: each run still waiting waits behind the
        open run just before it now, and the first open run waits for nobody."""
        previous: _Run | None = None
        for run in self._open_runs(session):
            if run.status == RunStatus.PENDING:
                run.queued_behind_id = previous.id if previous is not None else None
            previous = run

    def _cancel_or_flag(
        self, run: _Run, reason: str, now: dt.datetime, *, by: int | None = None, kind: str = ""
    ) -> None:
        """Cancel a run that no loop steps through; flag one a live worker executes,
        for its loop to cancel at its next step; either way, record who stops it. A
        finished run, or one asked to stop already, stays as it is."""
        if run.status.is_terminal:
            return
        flagged = run.cancel_requested_at is not None
        if not flagged:
            owner_id = self._sessions[run.session_id].owner_id
            run.cancel_kind = stop_kind(kind=kind, by=by, owner_id=owner_id)
            run.cancel_requested_by_id = by
        if run.status != RunStatus.RUNNING or not _lease_live(run, now):
            self._cancel(run, reason, now)
        elif not flagged:
            run.cancel_requested_at = now
            run.cancel_reason = reason[:MAX_CANCEL_REASON_LENGTH]

    @staticmethod
    def _cancel_reason(run: _Run) -> str | None:
        if run.cancel_requested_at is not None or run.status == RunStatus.CANCELED:
            return run.cancel_reason or "cancel requested"
        return None

    def _resume(self, run: _Run, now: dt.datetime, **answered: Any) -> None:
        """``awaiting_input`` → ``running``: the answer arrived. The run has no worker
        until one claims it; the wait is added to its paused time."""
        paused = (now - run.awaiting_since).total_seconds() if run.awaiting_since else 0.0
        self._move(run, RunStatus.RUNNING, now, only_from=RunStatus.AWAITING_INPUT)
        run.awaiting, run.awaiting_since = None, None
        run.paused_seconds += paused
        run.lease_owner, run.lease_expires_at = "", None
        self._log_run(run, payloads.run_resumed_after_wait(waited_seconds=paused, **answered), now)

    # Answers from people

    def _waited_call(self, run: _Run, tool_call_id: UUID | None) -> _ToolCall:
        """The tool call a waiting run waits on, checked against what an answer names."""
        awaiting = run.awaiting or {}
        if run.status != RunStatus.AWAITING_INPUT:
            raise IllegalTransition(run.id, run.status, "answered")
        if awaiting.get("kind") == AwaitingKind.DELEGATED:
            raise IllegalTransition(
                run.id,
                f"waiting for its child run {awaiting.get('child_run')}",
                "answered here; answer the child run",
            )
        waited = UUID(str(awaiting.get("tool_call")))
        if tool_call_id is not None and tool_call_id != waited:
            raise IllegalTransition(
                run.id, f"waiting on tool call {waited}", f"an answer for {tool_call_id}"
            )
        return self._calls[waited]

    def _approve_or_deny(
        self,
        run: _Run,
        call: _ToolCall,
        decision: str,
        reason: str,
        decided_by_id: int | None,
        now: dt.datetime,
    ) -> None:
        if decision not in ("approve", "deny"):
            raise IllegalTransition(run.id, "waiting for approval", f"decision {decision!r}")
        verdict = "approved" if decision == "approve" else "denied"
        self._decide_call(call, verdict, reason, decided_by_id, now, record_reason=True)
        if verdict == "denied":
            self._end_call(
                call,
                ToolCallStatus.DENIED,
                now,
                error_kind=ErrorKind.DOMAIN_REJECTION,
                error_message="Denied" + (f": {reason}" if reason else "."),
            )

    def _decide_call(
        self,
        call: _ToolCall,
        decision: str,
        reason: str,
        decided_by_id: int | None,
        now: dt.datetime,
        *,
        record_reason: bool,
        answer: Mapping[str, Any] | None = None,
    ) -> None:
        """Record what a person decided about a tool call that asked them."""
        call.decision, call.decision_reason = decision, reason
        call.decided_by_id, call.decided_at = decided_by_id, now
        # By name too: the log is read by people who do not know user ids.
        name = self._users.get(decided_by_id) if self._users and decided_by_id else None
        event = payloads.tool_call_decided(
            tool_call=call.id,
            name=call.name,
            decision=decision,
            reason=reason if record_reason else None,
            decided_by=decided_by_id,
            decided_by_name=name,
            answer=answer,
        )
        self._log_run(self._runs[call.run_id], event, now)

    # Tool calls

    def _new_call(
        self,
        turn_id: UUID,
        index: int,
        request: ToolCallRequest,
        *,
        requires_approval: bool,
        start: bool = False,
    ) -> UUID:
        turn = self._turn(turn_id)
        if index in turn.tool_calls:
            raise IllegalTransition(
                turn_id, f"already at tool call {index}", f"tool call {index}", what="Turn"
            )
        run = self._runs[turn.run_id]
        now = self._clock()
        call = _ToolCall(
            id=uuid.uuid4(),
            run_id=run.id,
            turn_id=turn_id,
            call_id=request.id,
            index=index,
            name=request.name,
            arguments=_json(request.arguments),
            requires_approval=requires_approval,
            created_at=now,
            status=ToolCallStatus.RUNNING if start else ToolCallStatus.SCHEDULED,
            attempt=1 if start else 0,
            started_at=now if start else None,
        )
        self._calls[call.id] = call
        turn.tool_calls[index] = call.id
        self._log_run(
            run,
            payloads.tool_call_scheduled(
                tool_call=call.id,
                name=call.name,
                arguments=call.arguments,
                requires_approval=requires_approval,
            ),
            now,
        )
        if requires_approval:
            self._log_run(
                run,
                payloads.tool_call_approval_requested(
                    tool_call=call.id, name=call.name, arguments=call.arguments
                ),
                now,
            )
        if start:
            self._log_run(
                run, payloads.tool_call_started(tool_call=call.id, name=call.name, attempt=1), now
            )
        return call.id

    def _end_call(
        self,
        call: _ToolCall,
        status: ToolCallStatus,
        now: dt.datetime,
        *,
        result: Any = None,
        error_kind: str = "",
        error_message: str = "",
        reason: str = "",
        stopped: dict[str, Any] | None = None,
        only_from: frozenset[ToolCallStatus] = OPEN_TOOL_CALL_STATUSES,
    ) -> None:
        """The one way a tool call ends (succeeded, failed, canceled, denied), from an
        open status, its duration counted from its start (or, never started, from its
        creation). :class:`IllegalTransition` if it is not in ``only_from``."""
        if call.status not in only_from:
            raise IllegalTransition(call.id, call.status, status, what="Tool call")
        duration = payloads.tool_call_duration_ms(
            created_at=call.created_at, started_at=call.started_at, ended_at=now
        )
        call.status, call.ended_at, call.duration_ms = status, now, duration
        call.error_kind, call.error_message = error_kind, error_message
        if status == ToolCallStatus.SUCCEEDED:
            call.result = _json(result)
            if call.started_at is None:
                # Answered by a person (a question): the answer was its one attempt.
                call.started_at = call.created_at
                call.attempt += 1
        event = payloads.tool_call_ended(
            status=status,
            tool_call=call.id,
            name=call.name,
            duration_ms=duration,
            result=result,
            error_kind=error_kind,
            error_message=error_message,
            reason=reason,
            stopped=stopped,
        )
        if event is not None:
            self._log_run(self._runs[call.run_id], event, now)

    # Claiming

    def _context(self, run: _Run, owner: str, *, fresh: bool, now: dt.datetime) -> RunContext:
        session = self._sessions[run.session_id]
        history, summary, cut = self._history(run)
        started = run.started_at or now
        elapsed = max(0.0, (now - started).total_seconds() - run.paused_seconds)
        return RunContext(
            run_id=run.id,
            session_id=run.session_id,
            owner_id=session.owner_id,
            agent=run.agent,
            input=run.input,
            labels=dict(run.labels),
            history=history,
            summary=summary,
            history_cut=cut,
            policy=_json(run.policy),
            elapsed_seconds=elapsed,
            # A run that has just started has recorded nothing to replay.
            turns=() if fresh else self._turn_states(run),
            lease_owner=owner,
            parent_run_id=run.parent_run_id,
            depth=self._depth(run),
            definition=_json(run.definition),
            client_tools=tuple(_json(run.client_tools)),
            instructions=run.instructions,
            cancel_reason=self._cancel_reason(run),
        )

    def _head(self, session_id: UUID) -> UUID | None:
        """The run a new message continues from: the session's newest top-level
        run, or for a fork with none yet, the run it was forked at."""
        for run_id in reversed(self._session(session_id).run_ids):
            if self._runs[run_id].parent_run_id is None:
                return run_id
        return self._fork_points.get(session_id)

    def _history(self, run: _Run) -> tuple[tuple[EarlierRun, ...], SummaryState | None, bool]:
        """The runs before ``run`` on its branch back to the latest summary (or the
        branch's start, or MAX_HISTORY_RUNS), oldest first; that summary; whether
        the walk was cut short. A run called as a tool sees only its prompt."""
        if run.parent_run_id is not None:
            return (), None, False
        walked: list[_Run] = []
        summary: _Summary | None = None
        previous = run.previous_run_id
        while previous is not None and len(walked) < MAX_HISTORY_RUNS:
            if previous in self._summaries:
                summary = self._summaries[previous][-1]
                break
            earlier = self._runs.get(previous)
            if earlier is None:
                break
            walked.append(earlier)
            previous = earlier.previous_run_id
        if summary is None and previous is not None and previous in self._summaries:
            summary = self._summaries[previous][-1]  # the walk ended just at it
        cut = summary is None and previous is not None and len(walked) == MAX_HISTORY_RUNS
        history = tuple(
            EarlierRun(
                id=earlier.id,
                input=earlier.input,
                status=earlier.status,
                error_message=earlier.error_message,
                turns=self._turn_states(earlier, with_requests=False),
            )
            for earlier in reversed(walked)
        )
        state = (
            None
            if summary is None
            else SummaryState(
                id=summary.id,
                through_run_id=summary.through_run_id,
                text=summary.text,
                runs_covered=summary.runs_covered,
            )
        )
        return history, state, cut

    def _depth(self, run: _Run) -> int:
        """How many parent runs stand above ``run`` (0 for a run a person started)."""
        depth, parent_id = 0, run.parent_run_id
        while parent_id is not None and depth < MAX_DEPTH_COUNTED:
            depth += 1
            parent = self._runs.get(parent_id)
            parent_id = parent.parent_run_id if parent is not None else None
        return depth

    def _turn_states(self, run: _Run, *, with_requests: bool = True) -> tuple[TurnState, ...]:
        states = []
        for _, turn_id in sorted(run.turns.items()):
            turn = self._turns[turn_id]
            calls = [self._calls[call_id] for _, call_id in sorted(turn.tool_calls.items())]
            states.append(
                TurnState(
                    id=turn.id,
                    index=turn.index,
                    request_messages=tuple(Message.from_dict(m) for m in turn.request_messages)
                    if with_requests
                    else (),
                    ended=turn.ended_at is not None,
                    response_text=turn.response_text,
                    response_tool_calls=tuple(
                        ToolCallRequest.from_dict(c) for c in turn.response_tool_calls
                    ),
                    tool_calls=tuple(ToolCallState.of(call, _json) for call in calls),
                    finish_reason=turn.finish_reason,
                    reasoning_state=tuple(_json(turn.reasoning_state)),
                    output_tokens=turn.output_tokens - turn.reasoning_tokens,
                    interruption=turn.interruption,
                )
            )
        return tuple(states)

    # Memory

    def _memory_log(self, session_id: UUID | None, run_id: UUID | None) -> _Session | None:
        """The session whose log records a memory change: the entry's own, or the
        session of the run that made it. A change made outside any session has none."""
        if session_id is not None:
            return self._session(session_id)
        run = self._runs.get(run_id) if run_id is not None else None
        return self._sessions[run.session_id] if run is not None else None

    @staticmethod
    def _check_version(
        entry: _Entry | None, expected_version: int | None, scope: str, key: str
    ) -> None:
        """``None`` writes whatever is there, ``0`` only creates, ``n`` only changes an
        entry still at version ``n``; any other write is a :class:`MemoryConflict`
        carrying the entry as it is, and changes nothing."""
        if expected_version is None:
            return
        if entry is None:
            if expected_version != 0:
                raise MemoryConflict(f"No {scope} entry {key!r} exists to update.", current=None)
            return
        if expected_version != entry.version:
            raise MemoryConflict(
                f"The {scope} entry {key!r} is at version {entry.version}, not {expected_version}.",
                current=MemoryRecord.of(entry, _json),
            )

    @staticmethod
    def _scope_owner(scope: MemoryScope, session: _Session) -> MemoryOwner:
        owners: dict[MemoryScope, MemoryOwner] = {
            MemoryScope.SESSION: session.id,
            MemoryScope.USER: session.owner_id,
            MemoryScope.AGENT: session.agent,
            MemoryScope.GLOBAL: None,
        }
        return owners[scope]

    def _embedded(self, text: str) -> list[float] | None:
        """``text``'s embedding, or ``None`` (no embedder, or it failed: ranking is
        then by words alone, as the database store does)."""
        if self._embedder is None or not text.strip():
            return None
        try:
            return self._embedder.embed([text])[0]
        except EmbeddingError:
            return None

    def _readable(self, session: _Session) -> list[_Entry]:
        """The entries a run in the session reads, a key set in a more specific scope
        hiding the same key further out, as resolution does."""
        by_key: dict[str, _Entry] = {}
        for scope in MEMORY_RESOLUTION_ORDER:
            wanted = (scope.value, self._scope_owner(scope, session))
            for (s, o, key), entry in self._memory.items():
                if (s, o) == wanted:
                    by_key.setdefault(key, entry)
        return list(by_key.values())

    def _relevant(
        self, entries: list[_Entry], query: str, vector: list[float] | None, limit: int
    ) -> list[_Entry]:
        """The entries relevant to ``query``, best first: :func:`bm25_rank` over their
        text in place of the database's full-text ranking, and with an embedder the
        nearest vectors (cosine similarity), the two fused as the database store
        fuses them."""
        documents = [fact_text(entry.key, entry.value) for entry in entries]
        matching = [entries[i] for i, _ in bm25_rank(search_terms(query), documents)][:limit]
        if vector is None or self._embedder is None:
            return matching
        name = self._embedder.name
        similarity = {
            entry.key: cosine(vector, entry.vector[1])
            for entry in entries
            if entry.vector is not None and entry.vector[0] == name
        }
        # A vector pointing away from the query's (or across it) is no match.
        similarity = {key: value for key, value in similarity.items() if value > 0}
        near = sorted(
            (entry for entry in entries if entry.key in similarity),
            key=lambda entry: (-similarity[entry.key], entry.key),
        )[:limit]
        by_key = {entry.key: entry for entry in (*matching, *near)}
        order = fuse([[e.key for e in matching], [e.key for e in near]])
        return [by_key[key] for key in order]

    def _memory_facts(
        self, session: _Session, query: str, budget: int, vector: list[float] | None
    ) -> tuple[tuple[str, str, Any], ...]:
        """The facts a run in the session starts with, as the database store chooses
        them (:func:`~goaai.runtime.memory_ranking.choose_facts`): those relevant to
        ``query`` first, then the most recently updated, within ``budget`` tokens."""
        if budget <= 0:
            return ()
        entries = self._readable(session)
        limit = candidate_limit(budget)
        relevant = self._relevant(entries, query, vector, limit)
        by_key = sorted(entries, key=lambda entry: entry.key)
        recent = sorted(by_key, key=lambda entry: entry.updated_at, reverse=True)
        return choose_facts(
            (_fact(entry) for entry in relevant), (_fact(entry) for entry in recent), budget
        )

    def search_memory(
        self, *, session_id: UUID, query: str, limit: int = 5
    ) -> list[tuple[str, str, Any]]:
        """The facts the session reads that match ``query``, best first, ranked as
        the facts a run starts with are."""
        vector = self._embedded(query)
        with self._lock:
            entries = self._readable(self._session(session_id))
            return [_fact(entry) for entry in self._relevant(entries, query, vector, limit)]


def _fact(entry: _Entry) -> tuple[str, str, Any]:
    return (entry.scope, entry.key, _json(entry.value))


__all__ = ["Delta", "InMemoryRunStore"]
