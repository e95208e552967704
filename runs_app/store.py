"""The runtime's storage, implemented with the ORM and the services.

The turn loop sees plain dataclasses; every write goes through a service, so the
loop's records are the same rows, events and checks the API and admin produce.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from uuid import UUID

from django.db import close_old_connections, transaction
from django.db.models import BigIntegerField
from django.utils import timezone

from goaai import sql
from goaai.runtime.errors import NotFound
from goaai.runtime.memory_ranking import memory_budget
from goaai.runtime.policy import Decision
from goaai.runtime.types import (
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
)
from goaai.runtime.vocabulary import AwaitingKind, Multitask, RunStatus, ToolCallStatus
from memory_app import selectors as memory_selectors
from memory_app import services as memory_services
from memory_app.models import MemoryEntry
from runs_app import selectors, services
from runs_app.models import AgentVersion, HistorySummary, Run, ToolCall, Turn
from runs_app.sessions import session_end
from sessions_app import services as session_services
from sessions_app.publisher import publish_delta
from sessions_app.selectors import session_get


def _turn_state(turn: Turn) -> TurnState:
    return TurnState(
        id=turn.id,
        index=turn.index,
        request_messages=tuple(Message.from_dict(m) for m in turn.request_messages),
        ended=turn.ended_at is not None,
        response_text=turn.response_text,
        response_tool_calls=tuple(ToolCallRequest.from_dict(c) for c in turn.response_tool_calls),
        tool_calls=tuple(ToolCallState.of(call) for call in turn.tool_calls.all()),
        finish_reason=turn.finish_reason,
        reasoning_state=tuple(turn.reasoning_state),
        interruption=turn.interruption,
    )


def _earlier_run(earlier: selectors.BranchRun) -> EarlierRun:
    run = earlier.run
    return EarlierRun(
        id=run["id"],
        input=run["input"],
        status=run["status"],
        error_message=run["error_message"],
        turns=tuple(
            TurnState(
                id=turn["id"],
                index=turn["index"],
                request_messages=(),
                ended=turn["ended_at"] is not None,
                response_text=turn["response_text"],
                response_tool_calls=tuple(
                    ToolCallRequest.from_dict(c) for c in turn["response_tool_calls"]
                ),
                tool_calls=tuple(ToolCallState(**call) for call in turn["tool_calls"]),
                finish_reason=turn["finish_reason"],
                output_tokens=turn["output_tokens"] - turn["reasoning_tokens"],
                interruption=turn["interruption"],
            )
            for turn in earlier.turns
        ),
    )


def _summary_state(summary: HistorySummary | None) -> SummaryState | None:
    if summary is None:
        return None
    return SummaryState(
        id=summary.id,
        through_run_id=summary.through_run_id,
        text=summary.text,
        runs_covered=summary.runs_covered,
    )


def _info(run: Run) -> RunInfo:
    """The run as the runtime sees it, with the run it waits for while it is queued
    (read only for a top-level run that has not started)."""
    return replace(RunInfo.of(run), queued_behind=selectors.run_queued_behind(run))


_DEFINITION = sql.Prepared(
    lambda: (
        AgentVersion.objects.filter(pk=sql.Slot("version", BigIntegerField()))
        .order_by()
        .values_list("definition")
    )
)


def _definition(agent_version_id: int | None) -> dict[str, Any] | None:
    """The agent definition a run was started with, read by its key alone."""
    if agent_version_id is None:
        return None
    found = _DEFINITION.first(version=agent_version_id)
    return None if found is None else found[0]


def _with_memory(context: RunContext) -> RunContext:
    """The context with the facts the run is told: those most relevant to its input
    within its agent's memory budget (:func:`memory_app.selectors.memory_context`).
    A run that recorded turns already sent them, and replays what it sent."""
    if context.turns:
        return context
    memory = memory_selectors.memory_context(
        session_id=context.session_id,
        query=context.input,
        budget=memory_budget(context.definition),
    )
    return replace(context, memory=memory)


class OrmRunStore:
    """:class:`goaai.runtime.store.RunStore` on goaai's database."""

    # Sessions

    def create_session(
        self, *, owner_id: int, agent: str, title: str, metadata: dict[str, Any]
    ) -> SessionInfo:
        return SessionInfo.of(
            session_services.session_create(
                owner_id=owner_id, agent=agent, title=title, metadata=metadata
            )
        )

    def get_session(self, session_id: UUID) -> SessionInfo:
        return SessionInfo.of(session_get(session_id=session_id))

    def end_session(self, session_id: UUID, *, ended_by: int | None = None) -> SessionInfo:
        return SessionInfo.of(session_end(session_id=session_id, ended_by=ended_by))

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
        multitask: str = Multitask.ENQUEUE,
        branch: Branch | None = None,
        client_tools: Sequence[dict[str, Any]] = (),
        instructions: str = "",
        queued: bool = False,
    ) -> RunInfo:
        run = services.run_create(
            client_tools=client_tools,
            instructions=instructions,
            queued=queued,
            branch=branch,
            definition=definition,
            session_id=session_id,
            agent=agent,
            input=input,
            labels=labels,
            metadata=metadata,
            policy=policy,
            policy_decisions=policy_decisions,
            created_by_id=created_by_id,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            multitask=multitask,
        )
        # A run that found no other open is not queued: nothing more to read.
        return replace(_info(run) if run.multitask else RunInfo.of(run), record=run)

    def fork_session(self, *, source_run_id: UUID, owner_id: int, title: str) -> SessionInfo:
        return SessionInfo.of(
            services.session_fork(source_run_id=source_run_id, owner_id=owner_id, title=title)
        )

    def get_run(self, run_id: UUID) -> RunInfo:
        return _info(selectors.run_get(run_id=run_id))

    def request_cancel(
        self, run_id: UUID, reason: str, *, by: int | None = None, kind: str = ""
    ) -> RunInfo:
        return _info(services.run_request_cancel(run_id=run_id, reason=reason, by=by, kind=kind))

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
        run = services.run_respond(
            run_id=run_id,
            tool_call_id=tool_call_id,
            decision=decision,
            reason=reason,
            answer=answer,
            choices=choices,
            decided_by_id=decided_by_id,
        )
        return RunInfo.of(run)

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
        session_id = Run.objects.filter(pk=parent_run_id).values_list("session_id", flat=True)
        if not session_id:
            raise NotFound(f"No run {parent_run_id}.")
        run = services.run_create(
            definition=definition,
            session_id=session_id[0],
            agent=agent,
            input=input,
            labels=labels,
            policy=policy,
            parent_run_id=parent_run_id,
            parent_tool_call_id=parent_tool_call_id,
            policy_decisions=policy_decisions,
        )
        return RunInfo.of(run)

    # The turn loop

    def claim_run(self, run_id: UUID, *, owner: str, lease_seconds: float) -> RunContext | None:
        # The claim, what the run starts from and the facts it is told, read in the
        # same transaction; the facts after it when ranking them asks an embedding
        # model (no transaction should wait for that).
        with transaction.atomic():
            claim = services.run_claim(run_id=run_id, owner=owner, lease_seconds=lease_seconds)
            if claim is None:
                return None
            context = self._context(claim, owner)
            if not memory_selectors.memory_context_asks_a_model():
                return _with_memory(context)
        return _with_memory(context)

    def _context(self, claim: services.Claim, owner: str) -> RunContext:
        run, fresh = claim.run, claim.fresh
        # A run called as a tool sees only its prompt; a top-level run its branch.
        branch = selectors.branch_history(
            previous_run_id=run.previous_run_id if run.parent_run_id is None else None
        )
        started = run.started_at or timezone.now()
        elapsed = max(0.0, (timezone.now() - started).total_seconds() - run.paused_seconds)
        return RunContext(
            run_id=run.id,
            session_id=run.session_id,
            owner_id=claim.owner_id,
            agent=run.agent,
            input=run.input,
            labels=run.labels,
            history=tuple(_earlier_run(earlier) for earlier in branch.runs),
            summary=_summary_state(branch.summary),
            history_cut=branch.cut,
            policy=run.policy,
            elapsed_seconds=elapsed,
            # A run that has just started has recorded nothing to replay.
            turns=()
            if fresh
            else tuple(_turn_state(turn) for turn in selectors.run_turns(run_id=run.id)),
            lease_owner=owner,
            parent_run_id=run.parent_run_id,
            depth=selectors.run_depth(run=run) if run.parent_run_id else 0,
            definition=_definition(run.agent_version_id),
            client_tools=tuple(run.client_tools or ()),
            instructions=run.instructions,
            cancel_reason=selectors.cancel_reason_of(
                run.cancel_requested_at, run.cancel_reason, run.status
            ),
        )

    def renew_lease(self, run_id: UUID, *, owner: str, lease_seconds: float) -> bool:
        return services.run_renew_lease(run_id=run_id, owner=owner, lease_seconds=lease_seconds)

    def next_queued_run(self, session_id: UUID) -> UUID | None:
        return selectors.session_next_queued(session_id=session_id)

    def expired_runs(self, *, limit: int = 100) -> list[UUID]:
        return selectors.runs_without_worker(limit=limit)

    def held_runs(self, *, host: str, limit: int = 100) -> list[tuple[UUID, str]]:
        return selectors.runs_held_on(host=host, limit=limit)

    def interrupt_run(self, run_id: UUID, *, owner: str, cause: str) -> RunInfo | None:
        run = services.run_interrupt(run_id=run_id, owner=owner, cause=cause)
        return None if run is None else RunInfo.of(run)

    def tool_call_child(self, tool_call_id: UUID) -> RunInfo | None:
        run = selectors.tool_call_child(tool_call_id=tool_call_id)
        return None if run is None else RunInfo.of(run)

    def cancel_requested(self, run_id: UUID) -> str | None:
        return selectors.run_cancel_reason(run_id=run_id)

    def start_turn(
        self, *, run_id: UUID, index: int, model: str, messages: list[dict[str, Any]]
    ) -> UUID:
        turn = services.turn_start(
            run_id=run_id, index=index, model=model, request_messages=messages
        )
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
        return services.turn_complete(
            turn_id=turn_id,
            reply=reply,
            latency_ms=latency_ms,
            retries=retries,
            interruption=interruption,
            usage_estimated=usage_estimated,
            calls=calls,
        )

    def complete_turn_and_run(
        self, *, turn_id: UUID, reply: ModelReply, latency_ms: int, retries: int = 0
    ) -> RunInfo:
        run = services.turn_complete_run(
            turn_id=turn_id, reply=reply, latency_ms=latency_ms, retries=retries
        )
        return RunInfo.of(run)

    def checkpoint_turn(self, *, turn_id: UUID, text: str) -> None:
        services.turn_checkpoint(turn_id=turn_id, text=text)

    def streaming_turns(self, session_id: UUID) -> list[StreamedText]:
        return selectors.turns_streaming(session_id=session_id)

    def model_retry(
        self,
        *,
        turn_id: UUID,
        attempt: int,
        error_kind: str,
        message: str,
        delay_seconds: float,
    ) -> None:
        services.model_retry_record(
            turn_id=turn_id,
            attempt=attempt,
            error_kind=error_kind,
            message=message,
            delay_seconds=delay_seconds,
        )

    def schedule_tool_call(
        self, *, turn_id: UUID, index: int, request: ToolCallRequest, requires_approval: bool
    ) -> UUID:
        call = services.tool_call_schedule(
            turn_id=turn_id,
            index=index,
            call_id=request.id,
            name=request.name,
            arguments=request.arguments,
            requires_approval=requires_approval,
        )
        return call.id

    def start_tool_call(self, *, turn_id: UUID, index: int, request: ToolCallRequest) -> UUID:
        call = services.tool_call_start(
            turn_id=turn_id,
            index=index,
            call_id=request.id,
            name=request.name,
            arguments=request.arguments,
        )
        return call.id

    def begin_tool_call(self, *, tool_call_id: UUID) -> int:
        return services.tool_call_begin(tool_call_id=tool_call_id)

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
        run = services.run_await_input(
            tool_call_ids=tool_call_ids,
            run_id=run_id,
            kind=AwaitingKind(kind),
            tool_call_id=tool_call_id,
            question=question,
            choices=choices,
            multiple=multiple,
            child_run_id=child_run_id,
        )
        return RunInfo.of(run)

    def submit_tool_outputs(
        self, run_id: UUID, *, outputs: Mapping[UUID, Any], submitted_by_id: int | None
    ) -> RunInfo:
        return RunInfo.of(
            services.run_submit_tool_outputs(
                run_id=run_id, outputs=outputs, submitted_by_id=submitted_by_id
            )
        )

    def settle_child(self, run_id: UUID) -> UUID | None:
        return services.run_settle_child(child_run_id=run_id)

    def finish_tool_call(self, *, tool_call_id: UUID, outcome: ToolOutcome) -> str | None:
        return services.tool_call_finish(
            tool_call_id=tool_call_id,
            result=outcome.result,
            error_kind=outcome.error_kind,
            error_message=outcome.error_message,
        )

    def finish_run(
        self,
        *,
        run_id: UUID,
        status: str,
        output: str = "",
        error: RunError | None = None,
        rule: str = "",
    ) -> RunInfo:
        if status == RunStatus.COMPLETED:
            run = services.run_complete(run_id=run_id, output=output)
        elif status == RunStatus.CANCELED:
            reason = self.cancel_requested(run_id) or ""
            run = services.run_cancel(run_id=run_id, reason=reason, output=output)
        elif status == RunStatus.TIMED_OUT:
            message = error.message if error else ""
            run = services.run_time_out(run_id=run_id, message=message, rule=rule)
        else:
            error = error or RunError(kind="internal", message="The run failed.")
            run = services.run_fail(
                run_id=run_id,
                kind=error.kind,
                message=error.message,
                retryable=error.retryable,
                rule=rule,
                output=output,
            )
        return RunInfo.of(run)

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
        return services.history_summary_record(
            run_id=run_id,
            through_run_id=through_run_id,
            previous_id=previous_id,
            runs_covered=runs_covered,
            text=text,
            model=model,
            usage=reply.usage,
            latency_ms=latency_ms,
        ).id

    def tool_result(self, *, tool_call_id: UUID, owner_id: int) -> ToolOutcome | None:
        row = (
            ToolCall.objects.filter(
                pk=tool_call_id,
                session__owner_id=owner_id,
                status__in=[ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED],
            )
            .values_list("result", "error_kind", "error_message")
            .first()
        )
        if row is None:
            return None
        result, error_kind, error_message = row
        return ToolOutcome(result=result, error_kind=error_kind, error_message=error_message)

    def policy_decision(self, *, run_id: UUID, rule: str, verdict: str, reason: str) -> None:
        services.policy_decision_record(run_id=run_id, rule=rule, verdict=verdict, reason=reason)

    def publish_delta(self, context: RunContext, turn_id: UUID, text: str, offset: int) -> None:
        publish_delta(context.session_id, context.run_id, turn_id, text, offset)

    def _log_session(self, session_id: UUID | None, run_id: UUID | None) -> UUID | None:
        """Whose log records a memory change: the entry's session, or the session of
        the run that made it."""
        if session_id is not None or run_id is None:
            return session_id
        return Run.objects.filter(pk=run_id).values_list("session_id", flat=True).first()

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
        entry = memory_services.memory_store(
            key=key,
            value=value,
            scope=scope,
            session_id=session_id,
            user_id=user_id,
            agent=agent,
            expected_version=expected_version,
            written_by_user_id=written_by_user,
            written_by_run_id=written_by_run,
            written_by_tool_call_id=written_by_tool_call,
            log_session_id=self._log_session(session_id, written_by_run),
        )
        return MemoryRecord.of(entry)

    def memory_keys(
        self,
        *,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
    ) -> list[str]:
        where = memory_selectors.owner_filter(
            scope=scope, session_id=session_id, user_id=user_id, agent=agent
        )
        return list(MemoryEntry.objects.filter(where).values_list("key", flat=True))

    def resolve_memory(self, *, key: str, session_id: UUID) -> MemoryRecord | None:
        return memory_selectors.memory_resolve_record(key=key, session_id=session_id)

    def search_memory(
        self, *, session_id: UUID, query: str, limit: int = 5
    ) -> list[tuple[str, str, Any]]:
        return memory_selectors.memory_search(session_id=session_id, query=query, limit=limit)

    def get_memory(
        self,
        *,
        key: str,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
    ) -> MemoryRecord | None:
        entry = memory_selectors.memory_get(
            key=key, scope=scope, session_id=session_id, user_id=user_id, agent=agent
        )
        return MemoryRecord.of(entry) if entry else None

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
        return memory_services.memory_delete(
            key=key,
            scope=scope,
            session_id=session_id,
            user_id=user_id,
            agent=agent,
            expected_version=expected_version,
            written_by_user_id=written_by_user,
            written_by_run_id=written_by_run,
            written_by_tool_call_id=written_by_tool_call,
            log_session_id=self._log_session(session_id, written_by_run),
        )

    # Housekeeping

    def after_commit(self, callback: Callable[[], None]) -> None:
        transaction.on_commit(callback)

    @contextmanager
    def worker(self) -> Iterator[None]:
        close_old_connections()
        try:
            yield
        finally:
            close_old_connections()
