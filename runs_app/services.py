"""Every write to runs, turns and tool calls.

Each service is atomic, takes keyword-only arguments, and records the events that
describe its change in the same transaction (``sessions_app.eventlog.recording``,
with payloads from ``goaai.runtime.payloads``). Status changes are compare-and-set
updates: a run moves only from a status that leads to the target, so two writers
racing (a cancel and a completion, say) cannot both win. Each state change of a
run, a turn or a tool call has one function here, which every path uses.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any, NamedTuple
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import DEFERRED, Q
from django.utils import timezone

from goaai import sql
from goaai.runtime import payloads
from goaai.runtime.endings import INTERRUPTION_REASONS, LEASE_EXPIRED, child_stop, stop_kind
from goaai.runtime.errors import (
    DuplicateIdempotencyKey,
    IllegalTransition,
    NotFound,
    RunActive,
    SessionEnded,
)
from goaai.runtime.policy import Decision
from goaai.runtime.questions import Question
from goaai.runtime.tools.client import awaited_outputs
from goaai.runtime.types import (
    USAGE_KINDS,
    Branch,
    ModelReply,
    PlannedCall,
    ToolCallRequest,
    TurnRecorded,
    Usage,
    known_cost,
)
from goaai.runtime.vocabulary import (
    OPEN_RUN_STATUSES,
    OPEN_TOOL_CALL_STATUSES,
    AwaitingKind,
    ErrorKind,
    Multitask,
    RunStatus,
    SessionStatus,
    StopKind,
    ToolCallStatus,
    TurnInterruption,
    sources_of,
)
from runs_app import agents, pricing, rollups, selectors, telemetry
from runs_app.metrics import observe_model_latency
from runs_app.models import HistorySummary, Run, SessionFork, ToolCall, Turn
from sessions_app import selectors as session_selectors
from sessions_app import services as session_services
from sessions_app.eventlog import EventBatch, recording
from sessions_app.models import Session

# Runs


def session_fork(*, source_run_id: UUID, owner_id: int, title: str = "") -> Session:
    """A new session of ``owner_id``'s with the source run's agent, whose history is
    the source's branch up to and including that run (its first run continues from
    it), linked for audit (:class:`SessionFork`); the source stays as it is."""
    source = (
        Run.objects.filter(pk=source_run_id, parent_run__isnull=True)
        .select_related("session")
        .first()
    )
    if source is None:
        raise NotFound(f"No run {source_run_id}.")
    original = source.session
    with transaction.atomic():
        session = session_services.session_create(
            owner_id=owner_id,
            agent=original.agent,
            title=title or _fork_title(original.title),
            metadata=original.metadata,
        )
        SessionFork.objects.create(
            session=session,
            source_session=original,
            source_run=source,
            created_by_id=owner_id,
        )
    return session


def _fork_title(title: str) -> str:
    return f"{title or 'Conversation'} (fork)"


def run_create(
    *,
    session_id: UUID,
    agent: str,
    input: str,
    labels: dict[str, str] | None = None,
    metadata: dict[str, Any] | None = None,
    policy: dict[str, Any] | None = None,
    created_by_id: int | None = None,
    parent_run_id: UUID | None = None,
    parent_tool_call_id: UUID | None = None,
    idempotency_key: str | None = None,
    fingerprint: str = "",
    policy_decisions: list[Decision] | None = None,
    definition: dict[str, Any] | None = None,
    branch: Branch | None = None,
    multitask: str = Multitask.ENQUEUE,
    client_tools: Sequence[dict[str, Any]] = (),
    instructions: str = "",
    queued: bool = False,
) -> Run:
    """Create a pending run in an active session (:class:`SessionEnded` otherwise).

    ``queued``: the run goes on the distributed queue once committed; unless it is
    queued behind another run of the session, it is recorded as put there
    (``queued_at``, as :func:`runs_app.tasks.run_mark_queued` records it) in this
    step.

    ``client_tools`` and ``instructions`` are what an OpenAI-compatible caller gave
    the run beside its message (tools it executes itself, its system messages).

    ``policy_decisions`` are the label rules that shaped ``policy``; each is recorded
    as a ``policy.decision`` event of the new run. ``definition`` is the agent as it
    is now: the run records that version of it, found (or written, for an agent in
    code run as it is for the first time) in the run's own transaction (see
    :mod:`runs_app.agents`). A top-level run continues
    from ``branch`` (by default from the session's head,
    :func:`runs_app.selectors.session_head`).

    While another top-level run of the session is open, ``multitask`` decides, under
    the session's lock (two messages at the same moment are taken one after the
    other): ``enqueue`` queues the new run behind the open ones (``run.queued``; it
    starts when they have ended, see :func:`run_claim`), ``interrupt`` asks them to
    stop and queues it behind them, ``reject`` raises :class:`RunActive` naming the
    open run and records nothing. A run called as a tool is never queued.
    """
    decisions = policy_decisions or []
    linked = parent_run_id is not None
    with recording(session_id, expect=1 + len(decisions) + linked) as batch:
        if batch.session_status != SessionStatus.ACTIVE:
            raise SessionEnded(f"Session {session_id} has ended; it accepts no new runs.")
        versioned = None if definition is None else agents.versioned(definition)
        latest = None
        # Read under the session's lock: two messages racing each continue from
        # the run created before them.
        ahead, newest_open = 0, None  # the session's open runs: how many, the newest
        if linked:
            branch = Branch(previous_run_id=None)
        else:
            found = selectors.new_message_reads(
                session_id=session_id,
                agent=versioned.agent_id if versioned else "",
                fingerprint=versioned.fingerprint if versioned else "",
            )
            ahead, newest_open, latest = found.open_runs, found.newest_open, found.version
            branch = branch or Branch(previous_run_id=found.head)
        if newest_open is not None and multitask == Multitask.REJECT:
            _refuse_beside(session_id, newest_open, idempotency_key)
        agent_version = None if versioned is None else agents.version_for(versioned, latest=latest)
        # A run put on the queue at once is recorded so by its insert, at the time
        # that gives updated_at (not before its last change: selectors.not_on_queue).
        created = timezone.now()
        run = Run(
            queued_at=created if queued and not ahead else None,
            previous_run_id=branch.previous_run_id,
            retry_of_id=branch.retry_of_id,
            regenerates_id=branch.regenerates_id,
            edit_of_id=branch.edit_of_id,
            session_id=session_id,
            agent=agent,
            input=input,
            labels=dict(labels or {}),
            metadata=dict(metadata or {}),
            policy=dict(policy or {}),
            created_by_id=created_by_id,
            parent_run_id=parent_run_id,
            parent_tool_call_id=parent_tool_call_id,
            idempotency_key=idempotency_key,
            request_fingerprint=fingerprint,
            agent_version=agent_version,
            agent_version_number=agent_version.number if agent_version else None,
            multitask=Multitask(multitask) if ahead else "",
            client_tools=[dict(spec) for spec in client_tools],
            instructions=instructions,
        )
        # Stopping the runs ahead reads the session's queue, which has it: inserted
        # at once. Otherwise with its events, in the statement that inserts them.
        if ahead and multitask == Multitask.INTERRUPT:
            with _idempotent(session_id, idempotency_key):
                sql.insert(run, now=created)
        else:
            batch.insert(run, now=created)
        batch.add(
            *payloads.run_created(
                agent=agent,
                input=input,
                labels=run.labels,
                parent_run=parent_run_id,
                previous_run=branch.previous_run_id,
                retry_of=branch.retry_of_id,
                regenerates=branch.regenerates_id,
                edit_of=branch.edit_of_id,
            ),
            run_id=run.id,
        )
        for decision in decisions:
            batch.add(
                *payloads.policy_decision(
                    rule=decision.rule, verdict=decision.verdict, reason=decision.reason
                ),
                run_id=run.id,
            )
        if parent_run_id is not None:
            batch.add(
                *payloads.run_child_linked(child_run=run.id, parent_tool_call=parent_tool_call_id),
                run_id=parent_run_id,
            )
        if newest_open is not None:
            behind = _queue(batch, run, ahead, newest_open[0], Multitask(multitask))
            # What it waits for is known: the runtime's answer reads no more.
            selectors.with_queue_known(run, behind)
        with _idempotent(session_id, idempotency_key):
            batch.flush()
    return run


@contextmanager
def _idempotent(session_id: UUID, key: str | None) -> Iterator[None]:
    """A new run's insert, where a unique key broken by ``key`` (when it has one)
    is :class:`DuplicateIdempotencyKey`."""
    try:
        yield
    except IntegrityError as exc:
        if key is None:
            raise
        raise DuplicateIdempotencyKey(
            f"Session {session_id} already has a run with idempotency key {key!r}."
        ) from exc


def _refuse_beside(session_id: UUID, active: tuple[UUID, str], key: str | None) -> None:
    """Refuse a message while ``active`` (id, status) is open (``multitask:
    reject``); a reused Idempotency-Key is told as such first, so that a retry
    racing its own first attempt finds the run that attempt created."""
    if key is not None and Run.objects.filter(session_id=session_id, idempotency_key=key).exists():
        raise DuplicateIdempotencyKey(
            f"Session {session_id} already has a run with idempotency key {key!r}."
        )
    active_id, status = active
    raise RunActive(
        f"Run {active_id} of session {session_id} is still {status}; this session takes "
        "one message at a time.",
        active_run_id=active_id,
    )


def _queue(
    batch: EventBatch, run: Run, ahead: int, newest: UUID, multitask: Multitask
) -> UUID | None:
    """The new ``run`` arrived while ``ahead`` runs of its session were open, the
    newest ``newest``: it waits behind those still open, after asking them all to
    stop for ``interrupt`` (one that no loop executes is canceled at once; a
    working one stops at its next step, keeping what it had said). Returns the run
    it waits for, the newest still open (``None`` if none is)."""
    if multitask == Multitask.INTERRUPT:
        reason = f"interrupted by a new message (run {run.id})"
        still_open = [
            run_id
            for run_id in selectors.session_open_runs(session_id=run.session_id)
            if run_id != run.id
            and not _cancel_or_flag(
                batch, run_id, reason, kind=StopKind.SUPERSEDED, by=run.created_by_id
            ).is_terminal
        ]
        if not still_open:
            return None
        ahead, newest = len(still_open), still_open[-1]
    batch.add(
        *payloads.run_queued(behind=newest, ahead=ahead, multitask=multitask),
        run_id=run.id,
    )
    return newest


@dataclass(frozen=True)
class Increment:
    """A change that adds to a column's current value instead of replacing it."""

    amount: float


def _transition(
    batch: EventBatch,
    run_id: UUID,
    target: RunStatus,
    *,
    only_from: RunStatus | None = None,
    **changes: Any,
) -> Run:
    """Move a run to ``target`` if its current status allows it, in ``batch``'s
    transaction, and return it as it is then; :class:`IllegalTransition` otherwise.

    A compare-and-set update: whichever of two racing writers comes second finds
    the status changed and fails cleanly."""
    # Starting and resuming both lead to running, each from one status only.
    allowed = [only_from] if only_from else sorted(sources_of(target))
    values = {"status": target, "updated_at": batch.now}
    added: dict[str, float] = {}
    for name, value in changes.items():
        if isinstance(value, Increment):
            added[name] = value.amount
        else:
            values[name] = value
    moved = sql.update(Run, run_id, values, add=added, status_in=allowed)
    try:
        run = Run.objects.get(pk=run_id)
    except Run.DoesNotExist:
        raise NotFound(f"No run {run_id}.") from None
    if not moved:
        raise IllegalTransition(run_id, run.status, target)
    return run


def _run_end(batch: EventBatch, run_id: UUID, status: RunStatus, **changes: Any) -> Run:
    """Move a run to a terminal ``status``, stop what it left open (agents it called
    that still work or wait, tool calls still scheduled or running) and record it."""
    run = _transition(batch, run_id, status, ended_at=batch.now, **changes)
    if status != RunStatus.COMPLETED:
        reason, kind = child_stop(
            parent_run=str(run_id), status=status, kind=run.cancel_kind, rule=run.cancel_reason
        )
        for child_id in Run.objects.filter(
            parent_run_id=run_id, status__in=OPEN_RUN_STATUSES
        ).values_list("id", flat=True):
            _cancel_or_flag(batch, child_id, reason, kind=kind, by=run.cancel_requested_by_id)
    stopped = payloads.told_stop(status, _stopped_by(run))
    # How its calls ended, for the rollups (read again if some were still open).
    calls = rollups.call_groups(run_id)
    if any(group.status in OPEN_TOOL_CALL_STATUSES for group in calls):
        still_open = ToolCall.objects.filter(run_id=run_id, status__in=OPEN_TOOL_CALL_STATUSES)
        for row in still_open.values_list(*_CallOf._fields):
            _tool_call_end(
                batch,
                _CallOf(*row),
                ToolCallStatus.CANCELED,
                reason=f"the run {status}",
                stopped=stopped,
            )
        calls = rollups.call_groups(run_id)
    rollups.run_ended(run, owner_id=_owner_of(batch, run.session_id), calls=calls)
    if run.parent_run_id is None:
        run.next_queued_id = selectors.session_next_queued(session_id=run.session_id)
    batch.add(
        *payloads.run_ended(
            status=status,
            output=run.output,
            usage=payloads.usage_totals(
                Usage.of(run),
                known_cost(run.cost, run.unpriced_turns),
                run.unpriced_turns,
            ),
            error_kind=run.error_kind,
            error_message=run.error_message,
            retryable=run.error_retryable,
            reason=run.cancel_reason,
            stopped=stopped,
        ),
        run_id=run_id,
    )
    # Its spans and metrics come from the committed record (runs_app.telemetry).
    transaction.on_commit(partial(telemetry.run_ended, run_id=run_id), robust=True)
    return run


def _owner_of(batch: EventBatch, session_id: UUID) -> int:
    """The owner of ``session_id``: the batch's session's, or (a run another
    session's run called, stopped with it) read once per process."""
    if session_id == batch.session_id:
        return batch.session_owner_id
    known = session_selectors.session_owner_and_agent(session_id)
    if known is None:
        raise NotFound(f"No session {session_id}.")
    return known[0]


def _stopped_by(run: Run) -> dict[str, Any] | None:
    """Who or what stopped ``run``, as its end event tells it (``None``: not known)."""
    return payloads.stopped_by(
        kind=run.cancel_kind, user=_username(run.cancel_requested_by_id), rule=run.cancel_reason
    )


def _policy_stop(rule: str) -> dict[str, Any]:
    """What a run stopped by a policy rule records: who stopped it, and the rule as
    its reason (the error says the rest)."""
    return {"cancel_kind": StopKind.POLICY, "cancel_reason": rule[:200]} if rule else {}


def run_complete(*, run_id: UUID, output: str) -> Run:
    """``running`` → ``completed`` with the final answer."""
    with recording(run_id, of=Run, expect=1) as batch:
        run = _run_end(batch, run_id, RunStatus.COMPLETED, output=output)
    return run


def run_fail(
    *,
    run_id: UUID,
    kind: str,
    message: str,
    retryable: bool = False,
    rule: str = "",
    output: str = "",
) -> Run:
    """The run failed: it records why (kind, message) and whether a retry may help;
    ``rule``, the policy rule that stopped it, if one did (a turn or tool-call cap);
    ``output``, what its model had said when its answer broke off, kept as its output."""
    kept = {"output": output} if output else {}
    with recording(run_id, of=Run) as batch:
        run = _run_end(
            batch,
            run_id,
            RunStatus.FAILED,
            error_kind=kind,
            error_message=message,
            error_retryable=retryable,
            **_policy_stop(rule),
            **kept,
        )
    return run


def run_time_out(*, run_id: UUID, message: str, rule: str = "") -> Run:
    """The run spent its time budget (``rule``: the policy rule that says so)."""
    with recording(run_id, of=Run) as batch:
        run = _run_end(
            batch,
            run_id,
            RunStatus.TIMED_OUT,
            error_kind=ErrorKind.TIMEOUT,
            error_message=message,
            **_policy_stop(rule),
        )
    return run


def run_cancel(*, run_id: UUID, reason: str = "", output: str = "") -> Run:
    """Cancel a run now (from pending, running or awaiting input); ``output`` is what
    it had said when it was stopped, kept as its output."""
    kept = {"output": output} if output else {}
    with recording(run_id, of=Run) as batch:
        run = _run_end(batch, run_id, RunStatus.CANCELED, cancel_reason=reason[:200], **kept)
    return run


def run_request_cancel(
    *, run_id: UUID, reason: str = "", by: int | None = None, kind: str = ""
) -> Run:
    """Ask a run to stop; ``by`` is the user who asks, ``kind`` who stops it (see
    :func:`goaai.runtime.endings.stop_kind`: by default the run's own user or an
    operator, as ``by`` is its owner or not).

    A pending or waiting run has no loop stepping through it, so it is canceled at
    once; a running run is flagged and its loop cancels it at the next step.
    Asking again, or asking a finished run, changes nothing.
    """
    with recording(run_id, of=Run) as batch:
        run = _cancel_or_flag(batch, run_id, reason, by=by, kind=kind)
    return run


def _cancel_or_flag(
    batch: EventBatch, run_id: UUID, reason: str, *, by: int | None = None, kind: str = ""
) -> Run:
    run = Run.objects.get(pk=run_id)
    if run.is_terminal:
        return run
    # Who stops it is who asked first.
    first = run.cancel_requested_at is None
    kind = (
        stop_kind(kind=kind, by=by, owner_id=batch.session_owner_id) if first else run.cancel_kind
    )
    by = by if first else run.cancel_requested_by_id
    if run.status in (RunStatus.PENDING, RunStatus.AWAITING_INPUT) or not _lease_live(run):
        # No loop is stepping through this run to see a flag: cancel it now.
        return _run_end(
            batch,
            run_id,
            RunStatus.CANCELED,
            cancel_reason=reason[:200],
            cancel_kind=kind,
            cancel_requested_by=by,
        )
    Run.objects.filter(pk=run_id, cancel_requested_at__isnull=True).update(
        cancel_requested_at=batch.now,
        cancel_reason=reason[:200],
        cancel_kind=kind,
        cancel_requested_by_id=by,
    )
    return Run.objects.get(pk=run_id)


def _lease_live(run: Run) -> bool:
    return run.lease_expires_at is not None and run.lease_expires_at > timezone.now()


def runs_cancel_in_session(*, batch: EventBatch, reason: str, by: int | None = None) -> int:
    """Stop every unfinished run of the session ``batch`` holds locked (``by``: the
    user who ended the session, if a person did)."""
    open_ids = list(
        Run.objects.filter(session_id=batch.session_id, status__in=OPEN_RUN_STATUSES).values_list(
            "id", flat=True
        )
    )
    for run_id in open_ids:
        _cancel_or_flag(batch, run_id, reason, by=by)
    return len(open_ids)


def run_await_input(
    *,
    run_id: UUID,
    kind: AwaitingKind,
    tool_call_id: UUID,
    question: str = "",
    choices: Sequence[str] = (),
    multiple: bool = False,
    child_run_id: UUID | None = None,
    tool_call_ids: Sequence[UUID] = (),
) -> Run:
    """``running`` → ``awaiting_input``: a tool needs approval, the agent asks a
    question (offering ``choices``, one or ``multiple`` to pick, if any), an
    agent it called waits for a person (``child_run_id``), or the caller is to run
    its own tools (``tool_call_ids``, kind ``client_tool``). The worker's lease is
    released: nobody executes a waiting run."""
    with recording(run_id, of=Run, expect=1) as batch:
        awaiting = payloads.awaiting(
            kind=kind,
            tool_call=tool_call_id,
            question=question,
            choices=choices,
            multiple=multiple,
            child_run=child_run_id,
            tool_calls=tool_call_ids,
        )
        run = _transition(
            batch,
            run_id,
            RunStatus.AWAITING_INPUT,
            awaiting=awaiting,
            awaiting_since=batch.now,
            lease_owner="",
            lease_expires_at=None,
        )
        batch.add(*payloads.run_awaiting_input(awaiting=awaiting), run_id=run_id)
    return run


def _resume(batch: EventBatch, run: Run, **answered: Any) -> Run:
    """``awaiting_input`` → ``running``: the answer arrived. The run has no worker
    until an executor claims it again; the wait is added to its paused time."""
    since = run.awaiting_since
    paused = (batch.now - since).total_seconds() if since else 0.0
    resumed = _transition(
        batch,
        run.pk,
        RunStatus.RUNNING,
        only_from=RunStatus.AWAITING_INPUT,
        awaiting=None,
        awaiting_since=None,
        paused_seconds=Increment(paused),
        lease_owner="",
        lease_expires_at=None,
    )
    batch.add(*payloads.run_resumed_after_wait(waited_seconds=paused, **answered), run_id=run.pk)
    return resumed


def _username(user_id: int | None) -> str | None:
    if user_id is None:
        return None
    name: str | None = (
        get_user_model().objects.filter(pk=user_id).values_list("username", flat=True).first()
    )
    return name


def _waited_call(run: Run, tool_call_id: UUID | None) -> _CallOf:
    """The tool call a waiting run waits on, checked against what an answer names."""
    awaiting = run.awaiting or {}
    if run.status != RunStatus.AWAITING_INPUT:
        raise IllegalTransition(run.pk, run.status, "answered")
    if awaiting.get("kind") == "delegated":
        raise IllegalTransition(
            run.pk,
            f"waiting for its child run {awaiting.get('child_run')}",
            "answered here; answer the child run",
        )
    waited = UUID(str(awaiting.get("tool_call")))
    if tool_call_id is not None and tool_call_id != waited:
        raise IllegalTransition(
            run.pk, f"waiting on tool call {waited}", f"an answer for {tool_call_id}"
        )
    return _tool_call(waited)


def run_respond(
    *,
    run_id: UUID,
    tool_call_id: UUID | None = None,
    decision: str = "",
    reason: str = "",
    answer: str | None = None,
    choices: Sequence[str] | None = None,
    decided_by_id: int | None = None,
) -> Run:
    """Answer what a waiting run asks: approve or deny a tool call, or answer a
    question in words (``answer``) or with the ``choices`` it offers. The run
    becomes ``running`` again, ready to be claimed.

    Raises :class:`IllegalTransition` when the run is not waiting, or waits for
    something other than what the answer addresses (an answer that came too late),
    and :class:`~goaai.runtime.errors.InvalidAnswer` when the question does not
    accept the answer.
    """
    with recording(run_id, of=Run) as batch:
        run = Run.objects.get(pk=run_id)
        call = _waited_call(run, tool_call_id)
        kind = (run.awaiting or {}).get("kind")
        if kind == AwaitingKind.QUESTION:
            if answer is None and choices is None:
                raise IllegalTransition(run_id, "waiting for an answer", "a decision")
            result = Question.of(run.awaiting or {}).result(answer=answer, choices=choices)
            _tool_call_decide(
                batch, call, "answered", "", decided_by_id, record_reason=False, answer=result
            )
            _tool_call_end(batch, call, ToolCallStatus.SUCCEEDED, result=result)
        else:
            if decision not in ("approve", "deny"):
                raise IllegalTransition(run_id, "waiting for approval", f"decision {decision!r}")
            verdict = "approved" if decision == "approve" else "denied"
            _tool_call_decide(batch, call, verdict, reason, decided_by_id, record_reason=True)
            if verdict == "denied":
                _tool_call_end(
                    batch,
                    call,
                    ToolCallStatus.DENIED,
                    error_kind=ErrorKind.DOMAIN_REJECTION,
                    error_message="Denied" + (f": {reason}" if reason else "."),
                )
        return _resume(batch, run, answered=kind)


def run_submit_tool_outputs(
    *, run_id: UUID, outputs: Mapping[UUID, Any], submitted_by_id: int | None = None
) -> Run:
    """Record the caller's results for the calls of its own tools a run waits on
    (``awaiting.kind`` ``client_tool``): every one of them at once, each ending
    succeeded with its result and answered by ``submitted_by_id``. The run becomes
    ``running`` again, ready to be claimed.

    :class:`~goaai.runtime.errors.InvalidAnswer` naming calls left out or not
    waited on, :class:`IllegalTransition` if the run does not wait for the
    caller's tools; nothing is recorded then."""
    with recording(run_id, of=Run) as batch:
        run = Run.objects.get(pk=run_id)
        awaiting = run.awaiting or {}
        if run.status != RunStatus.AWAITING_INPUT or awaiting.get("kind") != (
            AwaitingKind.CLIENT_TOOL
        ):
            raise IllegalTransition(run_id, run.status, "given the caller's tool results")
        for call_id, result in awaited_outputs(awaiting, outputs):
            call = _tool_call(call_id)
            _tool_call_decide(batch, call, "answered", "", submitted_by_id, record_reason=False)
            _tool_call_end(batch, call, ToolCallStatus.SUCCEEDED, result=result)
        return _resume(batch, run, answered=AwaitingKind.CLIENT_TOOL)


def run_record_conversation(*, run_id: UUID, digest: str) -> None:
    """Record the digest of the conversation an OpenAI-compatible client sent up
    to and including the run's message, by which its next request finds the run's
    session (:mod:`runs_app.openai_api.conversation`)."""
    Run.objects.filter(pk=run_id).update(conversation_digest=digest)


def run_settle_child(*, child_run_id: UUID) -> UUID | None:
    """A child run ended after waiting for a person. If its parent waits for it,
    the child's answer (or why it has none) becomes the result of the parent's tool
    call and the parent is ready to continue; returns the parent's id, or ``None``.
    """
    child = Run.objects.filter(pk=child_run_id).first()
    if child is None or child.parent_run_id is None or not child.is_terminal:
        return None
    with recording(child.session_id) as batch:
        parent = Run.objects.filter(pk=child.parent_run_id).first()
        awaiting = (parent.awaiting or {}) if parent else {}
        if (
            parent is None
            or parent.status != RunStatus.AWAITING_INPUT
            or awaiting.get("kind") != AwaitingKind.DELEGATED
            or awaiting.get("child_run") != str(child.pk)
        ):
            return None
        call = _tool_call(UUID(str(awaiting["tool_call"])))
        if child.status == RunStatus.COMPLETED:
            result = {"agent": child.agent, "run": str(child.pk), "answer": child.output}
            _tool_call_end(batch, call, ToolCallStatus.SUCCEEDED, result=result)
        else:
            detail = child.error_message or child.cancel_reason or child.status
            _tool_call_end(
                batch,
                call,
                ToolCallStatus.FAILED,
                error_kind=ErrorKind.DOMAIN_REJECTION,
                error_message=f"The {child.agent} agent did not answer: {detail}",
            )
        _resume(batch, parent, answered=AwaitingKind.DELEGATED, child_run=str(child.pk))
    return parent.pk


class Claim(NamedTuple):
    """A run taken for execution: the run, whether it has just started (``False``:
    it was taken over), and the user its session belongs to."""

    run: Run
    fresh: bool
    owner_id: int


# What a claim and the run's start read of the run, with the statement that locks
# its session (on SQLite in the same statement): building a queryset of the whole
# row cost more than the rest of the claim. The run is made of these as if read by
# the ORM; any other field it is asked for is read then.
_CLAIM_READ = (
    "id",
    "session_id",
    "agent",
    "agent_version_id",
    "input",
    "labels",
    "policy",
    "status",
    "multitask",
    "parent_run_id",
    "previous_run_id",
    "created_at",
    "started_at",
    "paused_seconds",
    "lease_owner",
    "lease_expires_at",
    "client_tools",
    "instructions",
    "cancel_requested_at",
    "cancel_reason",
)


def _claimed(batch: EventBatch) -> Run:
    """The run ``batch`` records a step of, as :data:`_CLAIM_READ` found it."""
    found = dict(zip(_CLAIM_READ, batch.row[: len(_CLAIM_READ)], strict=True))
    # In the model's order of fields, the others left to be read when asked for.
    values = [found.get(field.attname, DEFERRED) for field in Run._meta.concrete_fields]
    return Run.from_db(DEFAULT_DB_ALIAS, list(found), values)


def run_claim(*, run_id: UUID, owner: str, lease_seconds: float) -> Claim | None:
    """Take a run for execution under a lease (:class:`Claim`); ``None`` if it is
    not claimable.

    A pending run starts (``run.started``), unless it is a top-level run and an
    earlier top-level run of its session is still open: then it waits for its turn
    (checked under the session's lock, so no hand-off, however early or repeated,
    starts it before then). A running run that no live worker holds (its lease
    expired, or it was released after an answer) is taken over, and taking over
    from a dead worker is recorded as ``run.resumed``.

    Called inside a transaction (the store's, which reads what the run starts from
    in it), the claim is part of it: it takes no savepoint, and if it fails, the
    caller's transaction fails with it.
    """
    with recording(run_id, of=Run, expect=1, savepoint=False, read=_CLAIM_READ) as batch:
        # Read with its session locked: no other step changes it until the commit.
        run = _claimed(batch)
        # A run that found no other open when it was created (blank ``multitask``)
        # waits for none: the runs created before it had ended, and an ended run
        # stays ended.
        if run.multitask and selectors.run_queued_behind(run) is not None:
            # Its mark of being on the distributed queue goes: the hand-off that
            # comes when its turn does must not be taken for a copy of this one.
            Run.objects.filter(pk=run_id, queued_at__isnull=False).update(queued_at=None)
            return None
        now = batch.now
        expires = now + dt.timedelta(seconds=lease_seconds)
        started = {
            "status": RunStatus.RUNNING,
            "started_at": now,
            "lease_owner": owner,
            "lease_expires_at": expires,
            "updated_at": now,
        }
        if sql.update(Run, run_id, started, status_in=(RunStatus.PENDING,)):
            for name, value in started.items():
                setattr(run, name, value)
            batch.add(*payloads.run_started(agent=run.agent, worker=owner), run_id=run_id)
            return Claim(run, True, batch.session_owner_id)
        if run.status != RunStatus.RUNNING or _lease_live(run):
            return None
        # Compare-and-set on the lease as it was seen expired: if its holder renewed
        # it in the meantime, the takeover fails instead of two workers running it.
        taken = (
            Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=run.lease_owner)
            .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now))
            .update(lease_owner=owner, lease_expires_at=expires)
        )
        if not taken:
            return None
        if run.lease_owner:
            # Its worker is lost, and this one takes its place. A lease that ran out
            # says so now; one without an expiry was told lost already (run_interrupt).
            if run.lease_expires_at is not None:
                batch.add(*_interrupted(LEASE_EXPIRED, run.lease_owner), run_id=run_id)
            batch.add(
                *payloads.run_resumed_by_worker(previous_worker=run.lease_owner, worker=owner),
                run_id=run_id,
            )
        run.lease_owner, run.lease_expires_at = owner, expires
    return Claim(run, False, batch.session_owner_id)


def _interrupted(cause: str, worker: str) -> payloads.Event:
    return payloads.run_interrupted(cause=cause, reason=INTERRUPTION_REASONS[cause], worker=worker)


def run_interrupt(*, run_id: UUID, owner: str, cause: str) -> Run | None:
    """The worker holding the run as ``owner`` is lost (``cause``, see
    :mod:`goaai.runtime.endings`): record ``run.interrupted`` and end its lease, so
    that it cannot renew it and the next claim takes the run up at once, as a
    takeover (``run.resumed``; its executor is handed the run by the caller).
    ``None``, recording nothing, if ``owner`` holds the run no more.

    The lease keeps its owner without an expiry: nothing else leaves a running run
    so, and that is how a claim knows the loss was told already."""
    with recording(run_id, of=Run, expect=1) as batch:
        taken = (
            Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner)
            .exclude(lease_expires_at__isnull=True)
            .update(lease_expires_at=None, updated_at=batch.now)
        )
        if not taken:
            return None
        batch.add(*_interrupted(cause, owner), run_id=run_id)
    return Run.objects.get(pk=run_id)


def run_renew_lease(*, run_id: UUID, owner: str, lease_seconds: float) -> bool:
    """Extend the lease ``owner`` holds; ``False`` if it holds it no more (another
    worker took the run, or it was told interrupted: see :func:`run_interrupt`)."""
    expires = timezone.now() + dt.timedelta(seconds=lease_seconds)
    return bool(
        Run.objects.filter(
            pk=run_id,
            lease_owner=owner,
            status=RunStatus.RUNNING,
            lease_expires_at__isnull=False,
        ).update(lease_expires_at=expires)
    )


def policy_decision_record(*, run_id: UUID, rule: str, verdict: str, reason: str) -> None:
    """Record that a policy rule decided something about a run."""
    with recording(run_id, of=Run, expect=1) as batch:
        batch.add(
            *payloads.policy_decision(rule=rule, verdict=verdict, reason=reason), run_id=run_id
        )


def _charge(run_id: UUID, usage: Usage, cost: Decimal | None, *, answered_by: str = "") -> None:
    """Add what a model call used, and cost (``None``: it had no price), to its run;
    a turn's call names the model that answered it (the run's model from then on)."""
    sql.update(
        Run,
        run_id,
        {"model": answered_by} if answered_by else {},
        add={
            **{kind: getattr(usage, kind) for kind in USAGE_KINDS},
            "total_tokens": usage.total_tokens,
            "cost": cost or 0,
            "unpriced_turns": 0 if cost is not None else 1,
        },
    )


def history_summary_record(
    *,
    run_id: UUID,
    through_run_id: UUID,
    previous_id: UUID | None,
    runs_covered: int,
    text: str,
    model: str,
    usage: Usage,
    latency_ms: int,
) -> HistorySummary:
    """Record the summary a run's model wrote of the branch up to and including
    ``through_run_id``; add its usage and cost (at ``model``'s price in force now)
    to the run's, which asked for it."""
    with recording(run_id, of=Run, expect=1) as batch:
        cost = pricing.turn_cost(model, usage, batch.now)
        summary = HistorySummary(
            session_id=batch.session_id,
            run_id=run_id,
            through_run_id=through_run_id,
            previous_id=previous_id,
            runs_covered=runs_covered,
            text=text,
            model=model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=cost,
            latency_ms=latency_ms,
        )
        sql.insert(summary)
        _charge(run_id, usage, cost)
        batch.add(
            *payloads.history_summarized(
                summary=summary.id,
                through_run=through_run_id,
                runs_covered=runs_covered,
                model=model,
                used=usage,
                cost=cost,
                latency_ms=latency_ms,
            ),
            run_id=run_id,
        )
    return summary


# Turns


def turn_start(
    *, run_id: UUID, index: int, model: str, request_messages: list[dict[str, Any]]
) -> Turn:
    """Record that a turn began with these messages sent to the model."""
    with recording(run_id, of=Run, expect=1) as batch:
        turn = Turn(run_id=run_id, index=index, model=model, request_messages=request_messages)
        try:
            sql.insert(turn)
        except IntegrityError as exc:
            raise IllegalTransition(run_id, f"already at turn {index}", f"turn {index}") from exc
        batch.add(*payloads.turn_started(turn=turn.id, index=index, model=model), run_id=run_id)
    return turn


class _TurnOf(NamedTuple):
    """What a step on a turn needs to know of it: its run and session, index, model."""

    run_id: UUID
    session_id: UUID
    position: int
    model: str


# The fields of a turn its steps read, with the session lock (``recording(read=)``).
_TURN_READ = ("run_id", "index", "model")
# What a step that the loop's check for a cancel request follows reads of its
# row's run, with the same statements (selectors.cancel_reason_of).
_CANCEL_READ = ("run__cancel_requested_at", "run__cancel_reason", "run__status")


def _turn(batch: EventBatch) -> _TurnOf:
    run_id, position, model = batch.row[: len(_TURN_READ)]
    return _TurnOf(run_id, batch.session_id, position, model)


def _cancel_found(batch: EventBatch) -> str | None:
    """The reason a cancel was asked for the step's run, as ``_CANCEL_READ``, read
    last, found it (the session locked: no request comes while the step runs)."""
    return selectors.cancel_reason_of(*batch.row[-len(_CANCEL_READ) :])


def turn_complete(
    *,
    turn_id: UUID,
    reply: ModelReply,
    latency_ms: int,
    retries: int = 0,
    interruption: str = "",
    usage_estimated: bool = False,
    calls: Sequence[PlannedCall] = (),
) -> TurnRecorded:
    """Record the model's reply to a turn (its text, tool calls, why it stopped, its
    reasoning), and add its token usage and its cost (at the price in force now, see
    :mod:`runs_app.pricing`) to the run's. A reply cut short (stopped, failed or
    lost mid-answer) is the text said until then, with ``interruption`` saying how
    it ended and ``usage_estimated`` whether its usage is (in part) an estimate.
    ``calls`` of the reply are recorded in the same step, as
    :func:`tool_call_schedule` records one, unless the run was asked to stop (then
    none is). Returns their ids and the reason a cancel was asked for, as the step's
    transaction found the run (:func:`selectors.cancel_reason_of`)."""
    said = payloads.is_message(reply.text, interruption)
    expect = (3 if said else 2) + sum(_call_events(call) for call in calls)
    read = _TURN_READ + _CANCEL_READ
    with recording(turn_id, of=Turn, expect=expect, read=read) as batch:
        turn = _turn(batch)
        _turn_reply(batch, turn_id, turn, reply, latency_ms, retries, interruption, usage_estimated)
        cancel = _cancel_found(batch)
        if cancel is not None:
            calls = ()
        ids = tuple(_tool_call_record(batch, turn_id, turn, call).id for call in calls)
    if interruption != TurnInterruption.CRASHED:
        # A turn lost with its worker has no latency that was measured.
        observe_model_latency(model=reply.model or turn.model, latency_ms=latency_ms)
    return TurnRecorded(cancel, ids)


def turn_complete_run(
    *, turn_id: UUID, reply: ModelReply, latency_ms: int, retries: int = 0
) -> Run:
    """Record the model's reply to a turn, which asks for no tool call, as
    :func:`turn_complete` does, and complete the run with its text, as
    :func:`run_complete` does: one step (:class:`IllegalTransition`, and nothing
    recorded, if the run is not running)."""
    expect = (3 if payloads.is_message(reply.text, "") else 2) + 1
    with recording(turn_id, of=Turn, expect=expect, read=_TURN_READ) as batch:
        turn = _turn(batch)
        _turn_reply(batch, turn_id, turn, reply, latency_ms, retries, "", False)
        run = _run_end(batch, turn.run_id, RunStatus.COMPLETED, output=reply.text)
    observe_model_latency(model=reply.model or turn.model, latency_ms=latency_ms)
    return run


def _turn_reply(
    batch: EventBatch,
    turn_id: UUID,
    turn: _TurnOf,
    reply: ModelReply,
    latency_ms: int,
    retries: int,
    interruption: str,
    usage_estimated: bool,
) -> None:
    """Record ``reply`` on the turn and its usage and cost on the run, in ``batch``'s
    step."""
    run_id, usage = turn.run_id, reply.usage
    cost = pricing.turn_cost(turn.model, usage, batch.now)
    sql.update(
        Turn,
        turn_id,
        {
            "response_text": reply.text,
            "response_tool_calls": [call.as_dict() for call in reply.tool_calls],
            "response_model": reply.model,
            "finish_reason": reply.finish_reason,
            "reasoning": reply.reasoning,
            "reasoning_state": [dict(item) for item in reply.reasoning_state],
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "cost": cost,
            "retries": retries,
            "latency_ms": latency_ms,
            "interruption": interruption,
            "usage_estimated": usage_estimated,
            "ended_at": batch.now,
        },
    )
    _charge(run_id, usage, cost, answered_by=turn.model)
    batch.add(
        *payloads.turn_completed(
            turn=turn_id,
            index=turn.position,
            tool_calls=len(reply.tool_calls),
            latency_ms=latency_ms,
            finish_reason=reply.finish_reason,
            interruption=interruption,
            usage_estimated=usage_estimated,
        ),
        run_id=run_id,
    )
    if payloads.is_message(reply.text, interruption):
        batch.add(*payloads.message_completed(turn=turn_id, text=reply.text), run_id=run_id)
    batch.add(
        *payloads.usage(turn=turn_id, used=usage, cost=cost, estimated=usage_estimated),
        run_id=run_id,
    )


def turn_checkpoint(*, turn_id: UUID, text: str) -> None:
    """Keep ``text``, what the model has streamed so far, as the reply of a turn
    still open: one UPDATE, no event (nothing happens to a turn that ended). The
    loop calls it about once a second while a reply streams."""
    Turn.objects.filter(pk=turn_id, ended_at__isnull=True).update(response_text=text)


def model_retry_record(
    *, turn_id: UUID, attempt: int, error_kind: str, message: str, delay_seconds: float
) -> None:
    """Record that a turn's model call failed, retryably, and is asked again. What
    the failed attempt checkpointed goes with it: the next attempt streams anew."""
    with recording(turn_id, of=Turn, expect=1, read=_TURN_READ) as batch:
        turn = _turn(batch)
        failed = {
            "attempt": attempt,
            "error_kind": error_kind,
            "message": message,
            "at": batch.now.isoformat(),
        }
        # The session's row is locked for the step: nothing else writes the turn.
        earlier = Turn.objects.filter(pk=turn_id).values_list("retry_errors", flat=True).first()
        Turn.objects.filter(pk=turn_id, ended_at__isnull=True).update(
            response_text="", retry_errors=[*(earlier or []), failed]
        )
        batch.add(
            *payloads.model_retry(
                turn=turn_id,
                attempt=attempt,
                error_kind=error_kind,
                message=message,
                delay_seconds=delay_seconds,
            ),
            run_id=turn.run_id,
        )


# Tool calls


def tool_call_schedule(
    *,
    turn_id: UUID,
    index: int,
    call_id: str,
    name: str,
    arguments: dict[str, Any],
    requires_approval: bool = False,
    start: bool = False,
) -> ToolCall:
    """Record a tool call the model asked for; one that needs approval asks for it.

    With ``start`` (a call that needs no approval), the call is recorded as running
    its first attempt in the same transaction: one step instead of two.
    """
    planned = PlannedCall(
        index,
        ToolCallRequest(id=call_id, name=name, arguments=arguments),
        start=start,
        requires_approval=requires_approval,
    )
    with recording(turn_id, of=Turn, expect=_call_events(planned), read=_TURN_READ) as batch:
        return _tool_call_record(batch, turn_id, _turn(batch), planned)


def _call_events(call: PlannedCall) -> int:
    """How many events recording ``call`` writes."""
    return 2 if call.requires_approval or call.start else 1


def _tool_call_record(
    batch: EventBatch, turn_id: UUID, turn: _TurnOf, call: PlannedCall
) -> ToolCall:
    """Record a call of the turn's reply, in ``batch``'s step (see
    :func:`tool_call_schedule`)."""
    index, request, start, requires_approval = call
    if requires_approval and start:
        raise IllegalTransition(request.id, "waiting for approval", "running", what="Tool call")
    run_id, name, arguments = turn.run_id, request.name, request.arguments
    recorded = ToolCall(
        run_id=run_id,
        turn_id=turn_id,
        session_id=turn.session_id,
        call_id=request.id,
        index=index,
        name=name,
        arguments=arguments,
        requires_approval=requires_approval,
        status=ToolCallStatus.RUNNING if start else ToolCallStatus.SCHEDULED,
        attempt=1 if start else 0,
        started_at=batch.now if start else None,
    )
    try:
        sql.insert(recorded)
    except IntegrityError as exc:
        raise IllegalTransition(
            turn_id, f"already at tool call {index}", f"tool call {index}", what="Turn"
        ) from exc
    batch.add(
        *payloads.tool_call_scheduled(
            tool_call=recorded.id,
            name=name,
            arguments=arguments,
            requires_approval=requires_approval,
        ),
        run_id=run_id,
    )
    if requires_approval:
        batch.add(
            *payloads.tool_call_approval_requested(
                tool_call=recorded.id, name=name, arguments=arguments
            ),
            run_id=run_id,
        )
    if start:
        batch.add(
            *payloads.tool_call_started(tool_call=recorded.id, name=name, attempt=1),
            run_id=run_id,
        )
    return recorded


def tool_call_start(
    *, turn_id: UUID, index: int, call_id: str, name: str, arguments: dict[str, Any]
) -> ToolCall:
    """Record a tool call that needs no approval as scheduled and started, in one step."""
    return tool_call_schedule(
        turn_id=turn_id, index=index, call_id=call_id, name=name, arguments=arguments, start=True
    )


class _CallOf(NamedTuple):
    """What a step reads of the tool call it changes (not its arguments or result)."""

    id: UUID
    run_id: UUID
    session_id: UUID
    name: str
    status: str
    attempt: int
    created_at: dt.datetime
    started_at: dt.datetime | None


# The fields of a tool call its steps read (``_CallOf`` after its id).
_CALL_READ = _CallOf._fields[1:]


def _tool_call(tool_call_id: UUID) -> _CallOf:
    row = sql.read_row(ToolCall, tool_call_id, _CALL_READ)
    if row is None:
        raise NotFound(f"No tool call {tool_call_id}.")
    return _CallOf(tool_call_id, *row)


def _locked_call(tool_call_id: UUID, batch: EventBatch) -> _CallOf:
    """The tool call a step changes, as its ``recording(read=_CALL_READ)`` read it."""
    return _CallOf(tool_call_id, *batch.row[: len(_CALL_READ)])


def tool_call_begin(*, tool_call_id: UUID) -> int:
    """A scheduled call starts executing (or an interrupted one starts again);
    returns its attempt number."""
    with recording(tool_call_id, of=ToolCall, expect=1, read=_CALL_READ) as batch:
        call = _locked_call(tool_call_id, batch)
        begun = sql.update(
            ToolCall,
            tool_call_id,
            {"status": ToolCallStatus.RUNNING, "started_at": batch.now},
            add={"attempt": 1},
            status_in=tuple(OPEN_TOOL_CALL_STATUSES),
        )
        if not begun:
            current = _tool_call(tool_call_id).status
            raise IllegalTransition(tool_call_id, current, ToolCallStatus.RUNNING, what="Tool call")
        attempt = call.attempt + 1
        batch.add(
            *payloads.tool_call_started(tool_call=tool_call_id, name=call.name, attempt=attempt),
            run_id=call.run_id,
        )
    return attempt


def tool_call_finish(
    *,
    tool_call_id: UUID,
    result: Any = None,
    error_kind: str = "",
    error_message: str = "",
) -> str | None:
    """Record how a running tool call ended: its result, or its error. Returns the
    reason a cancel was asked for, as the step's transaction found the call's run
    (:func:`selectors.cancel_reason_of`)."""
    target = ToolCallStatus.FAILED if error_kind else ToolCallStatus.SUCCEEDED
    read = _CALL_READ + _CANCEL_READ
    with recording(tool_call_id, of=ToolCall, expect=1, read=read) as batch:
        call = _locked_call(tool_call_id, batch)
        _tool_call_end(
            batch,
            call,
            target,
            result=None if error_kind else result,
            error_kind=error_kind,
            error_message=error_message,
            only_from=(ToolCallStatus.RUNNING,),
        )
        return _cancel_found(batch)


def _tool_call_decide(
    batch: EventBatch,
    call: _CallOf,
    decision: str,
    reason: str,
    decided_by_id: int | None,
    *,
    record_reason: bool,
    answer: Mapping[str, Any] | None = None,
) -> None:
    """Record what a person decided about a tool call that asked them (for a
    question, ``answer``: the call's result)."""
    ToolCall.objects.filter(pk=call.id).update(
        decision=decision,
        decision_reason=reason,
        decided_by_id=decided_by_id,
        decided_at=batch.now,
    )
    batch.add(
        *payloads.tool_call_decided(
            tool_call=call.id,
            name=call.name,
            decision=decision,
            reason=reason if record_reason else None,
            decided_by=decided_by_id,
            # By name too: the log is read by people who do not know user ids.
            decided_by_name=_username(decided_by_id),
            answer=answer,
        ),
        run_id=call.run_id,
    )


def _tool_call_end(
    batch: EventBatch,
    call: _CallOf,
    status: ToolCallStatus,
    *,
    result: Any = None,
    error_kind: str = "",
    error_message: str = "",
    reason: str = "",
    stopped: dict[str, Any] | None = None,
    only_from: tuple[ToolCallStatus, ...] = tuple(OPEN_TOOL_CALL_STATUSES),
) -> None:
    """The one way a tool call ends (succeeded, failed, canceled, denied), from an
    open status, with its duration counted from its start (or, never started, from
    its creation) and the event that says so. :class:`IllegalTransition` if the
    call had already ended."""
    now = batch.now
    duration = payloads.tool_call_duration_ms(
        created_at=call.created_at, started_at=call.started_at, ended_at=now
    )
    changes: dict[str, Any] = {
        "status": status,
        "ended_at": now,
        "duration_ms": duration,
        "error_kind": error_kind,
        "error_message": error_message,
    }
    if status == ToolCallStatus.SUCCEEDED:
        changes["result"] = result
    answered = call.started_at is None and status == ToolCallStatus.SUCCEEDED
    if answered:
        # Answered by a person (a question): the answer was its one attempt.
        changes["started_at"] = call.created_at
    ended = sql.update(
        ToolCall, call.id, changes, add={"attempt": 1} if answered else None, status_in=only_from
    )
    if not ended:
        current = _tool_call(call.id).status
        raise IllegalTransition(call.id, current, status, what="Tool call")
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
        batch.add(*event, run_id=call.run_id)
