"""One seeded run: its turns, tool calls and events, in the order the turn loop
(``goaai.runtime.loop``) and the services write them, with the messages the loop
sends the model at each turn."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from goaai.runtime import payloads
from goaai.runtime.agents import AgentRegistry
from goaai.runtime.context import estimate_tokens, run_messages
from goaai.runtime.loop import memory_message
from goaai.runtime.payloads import Event
from goaai.runtime.policy import Decision, Policy
from goaai.runtime.types import (
    EarlierRun,
    Message,
    ToolCallRequest,
    ToolCallState,
    ToolOutcome,
    TurnState,
    Usage,
)
from goaai.runtime.vocabulary import FinishReason, RunStatus, ToolCallStatus, TurnInterruption
from runs_app.models import Run, ToolCall, Turn
from runs_app.seeding.log import SessionLog
from runs_app.seeding.memory import SessionMemory, Writer
from runs_app.seeding.outcomes import Outcomes
from runs_app.seeding.plan import Odds, RunShape
from runs_app.seeding.tables import Ids, Tables

# The worker a seeded run was executed by.
WORKER = "demo-worker-1"

PolicyFor = Callable[[str, dict[str, str]], tuple[Policy, list[Decision]]]


@dataclass
class Conversation:
    """The session a run belongs to, as its earlier runs left it."""

    session_id: UUID
    owner_id: int
    agent: str
    log: SessionLog
    memory: SessionMemory
    # Earlier answered runs, as the next run's model is sent them.
    history: list[dict[str, Any]] = field(default_factory=list)
    # The newest run: the one the next continues from.
    last_run: UUID | None = None


@dataclass
class _Run:
    """A run being written: where its clock is, what its model is sent at the next
    turn, and what it has spent."""

    id: UUID
    shape: RunShape
    conversation: Conversation
    question: str
    model: str
    clock: dt.datetime
    # As the turn loop records them (``Message.as_dict``).
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The length of their contents, which the model is charged for.
    sent: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    # The seeded model has no price: every turn is unpriced.
    unpriced_turns: int = 0
    output: str = ""
    awaiting: dict[str, Any] | None = None
    # Columns of the run's row that only some endings set.
    ending: dict[str, Any] = field(default_factory=dict)
    # Its turns and their calls as recorded, for the runs after it to be shown.
    turns: list[TurnState] = field(default_factory=list)
    calls: dict[UUID, list[ToolCallState]] = field(default_factory=dict)

    def recorded(self, status: str) -> EarlierRun:
        """The run as the history of the runs after it shows it."""
        return EarlierRun(
            id=self.id,
            input=self.question,
            status=status,
            error_message=str(self.ending.get("error_message", "")),
            turns=tuple(
                replace(turn, tool_calls=tuple(self.calls.get(turn.id, ()))) for turn in self.turns
            ),
        )

    def event(self, event: Event | None) -> None:
        if event is not None:
            self.conversation.log.add(event, run_id=self.id, at=self.clock)

    def say(self, *messages: dict[str, Any]) -> None:
        """Add to what the model is sent from the next turn on."""
        self.messages += messages
        self.sent += sum(len(message["content"]) for message in messages)


@dataclass(frozen=True)
class _Turn:
    id: UUID
    index: int
    started_at: dt.datetime
    request: list[dict[str, Any]]


class RunWriter:
    def __init__(
        self,
        *,
        tables: Tables,
        odds: Odds,
        outcomes: Outcomes,
        ids: Ids,
        registry: AgentRegistry,
        policy_for: PolicyFor,
    ) -> None:
        self.odds, self.outcomes, self.ids = odds, outcomes, ids
        self._runs, self._turns, self._tool_calls = tables[Run], tables[Turn], tables[ToolCall]
        self.registry = registry
        self.policy_for = policy_for
        self._policies: dict[tuple[str, str], tuple[dict[str, Any], list[Decision]]] = {}
        # When the first and the last of the runs written were created.
        self.created: tuple[dt.datetime, dt.datetime] | None = None
        # How each kind of run ends after its tool-calling turns.
        self._endings: dict[RunStatus, Callable[[_Run, int], None]] = {
            RunStatus.COMPLETED: self._answer,
            RunStatus.FAILED: self._fail,
            RunStatus.CANCELED: self._cancel,
        }

    def write(self, shape: RunShape, conversation: Conversation, clock: dt.datetime) -> dt.datetime:
        """Write a run of ``shape`` created at ``clock``; returns the time it
        ended (or began to wait)."""
        ending = self._endings.get(shape.status)
        if ending is None and not (shape.status == RunStatus.AWAITING_INPUT and shape.tool_turns):
            raise ValueError(f"A seeded run cannot end {shape.status} after {shape.tool_turns}.")
        run = self._start(shape, conversation, clock)
        created_at, started_at = clock, run.clock
        last = len(shape.tool_turns) - 1
        for index, names in enumerate(shape.tool_turns):
            waits = shape.status == RunStatus.AWAITING_INPUT and index == last
            self._tool_turn(run, index, names, waits=waits)
        if ending is not None:
            ending(run, len(shape.tool_turns))
        self._row(run, created_at, started_at)
        conversation.last_run = run.id
        # The next run sees this one in full, as the loop shows it (context.py).
        limit = self.registry.get(conversation.agent).conversation.tool_result_chars
        conversation.history += [
            message.as_dict() for message in run_messages(run.recorded(shape.status), limit)
        ]
        return run.clock

    def _policy(self, agent: str, tier: str) -> tuple[dict[str, Any], list[Decision]]:
        key = (agent, tier)
        if key not in self._policies:
            policy, decisions = self.policy_for(agent, {"tier": tier})
            self._policies[key] = (policy.as_dict(), decisions)
        return self._policies[key]

    def _start(self, shape: RunShape, conversation: Conversation, clock: dt.datetime) -> _Run:
        """Created (with the label rules that shaped its policy), then started."""
        agent = conversation.agent
        question = self.odds.question()
        run = _Run(
            id=self.ids.new(),
            shape=shape,
            conversation=conversation,
            question=question,
            model=self.odds.model(),
            clock=clock,
        )
        # The agent's instructions, the session's earlier exchanges, the question.
        system = self.registry.get(agent).system_prompt
        if system:
            run.say(Message(role="system", content=system).as_dict())
        facts = conversation.memory.facts(clock)
        if facts:
            run.say(memory_message(facts).as_dict())
        run.say(*conversation.history, Message(role="user", content=question).as_dict())
        labels = {"tier": shape.tier}
        run.event(
            payloads.run_created(
                agent=agent,
                input=question,
                labels=labels,
                parent_run=None,
                previous_run=conversation.last_run,
            )
        )
        for decision in self._policy(agent, shape.tier)[1]:
            run.event(
                payloads.policy_decision(
                    rule=decision.rule, verdict=decision.verdict, reason=decision.reason
                )
            )
        run.clock += self.odds.queued()
        run.event(payloads.run_started(agent=agent, worker=WORKER))
        return run

    # Turns

    def _begin_turn(self, run: _Run, index: int) -> _Turn:
        turn = _Turn(
            id=self.ids.new(),
            index=index,
            started_at=run.clock,
            request=list(run.messages),
        )
        run.event(payloads.turn_started(turn=turn.id, index=index, model=run.model))
        return turn

    def _end_turn(
        self,
        run: _Run,
        turn: _Turn,
        *,
        text: str,
        calls: tuple[ToolCallRequest, ...] = (),
        spent: tuple[int, int] | None = None,
        interruption: str = "",
    ) -> None:
        """The model's reply arrived (or what it had said when it was stopped):
        recorded with its token usage. ``spent`` is the turn's tokens in and out;
        by default, what the messages sent and a short reply cost. A turn with an
        ``interruption`` was cut off mid-answer: its usage is an estimate, as the
        loop records it."""
        latency = self.odds.latency_ms()
        run.clock += dt.timedelta(milliseconds=latency)
        tokens_in, tokens_out = spent or (
            40 + run.sent // 4,
            self.odds.output_tokens(),
        )
        run.input_tokens += tokens_in
        run.output_tokens += tokens_out
        if interruption:
            finish = FinishReason.OTHER
        else:
            finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
        estimated = bool(interruption)
        run.turns.append(
            TurnState(
                id=turn.id,
                index=turn.index,
                request_messages=(),
                ended=True,
                response_text=text,
                response_tool_calls=calls,
                finish_reason=finish,
                output_tokens=tokens_out,
            )
        )
        self._turns.add(
            id=turn.id,
            run_id=run.id,
            index=turn.index,
            model=run.model,
            request_messages=turn.request,
            response_text=text,
            response_tool_calls=[call.as_dict() for call in calls],
            finish_reason=finish,
            interruption=interruption,
            usage_estimated=estimated,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            latency_ms=latency,
            started_at=turn.started_at,
            ended_at=run.clock,
        )
        run.unpriced_turns += 1
        run.event(
            payloads.turn_completed(
                turn=turn.id,
                index=turn.index,
                tool_calls=len(calls),
                latency_ms=latency,
                finish_reason=finish,
                interruption=interruption,
                usage_estimated=estimated,
            )
        )
        if text:
            run.event(payloads.message_completed(turn=turn.id, text=text))
        run.event(
            payloads.usage(
                turn=turn.id, used=Usage(tokens_in, tokens_out), cost=None, estimated=estimated
            )
        )

    def _tool_turn(self, run: _Run, index: int, names: tuple[str, ...], *, waits: bool) -> None:
        """A turn whose reply asks for tools, then its calls, each answered to the
        model as the loop answers it; a run that waits stops at its last call."""
        turn = self._begin_turn(run, index)
        memory = run.conversation.memory
        calls = tuple(
            ToolCallRequest(
                id=f"call_{index}_{position}",
                name=name,
                arguments=self.outcomes.arguments(name, memory),
            )
            for position, name in enumerate(names)
        )
        self._end_turn(run, turn, text="", calls=calls)
        run.say(Message(role="assistant", content="", tool_calls=calls).as_dict())
        for position, call in enumerate(calls):
            if waits and position == len(calls) - 1:
                self._await_approval(run, turn, position, call)
                return
            outcome = self._call(run, turn, position, call)
            run.say(
                Message(
                    role="tool",
                    content=json.dumps(outcome.for_model(), default=str),
                    tool_call_id=call.id,
                    name=call.name,
                    is_error=not outcome.ok,
                ).as_dict()
            )

    # How a run ends

    def _answer(self, run: _Run, index: int) -> None:
        turn = self._begin_turn(run, index)
        run.output = self.odds.answer(run.question)
        self._end_turn(run, turn, text=run.output)
        run.event(
            payloads.run_ended(
                status=RunStatus.COMPLETED,
                output=run.output,
                usage=payloads.usage_totals(
                    Usage(run.input_tokens, run.output_tokens), None, run.unpriced_turns
                ),
            )
        )

    def _fail(self, run: _Run, index: int) -> None:
        """The model provider failed while the model was thinking: the turn never
        ended."""
        turn = self._begin_turn(run, index)
        run.clock += self.odds.thinking()
        run.turns.append(TurnState(id=turn.id, index=index, request_messages=(), ended=False))
        self._turns.add(
            id=turn.id,
            run_id=run.id,
            index=index,
            model=run.model,
            request_messages=turn.request,
            started_at=turn.started_at,
        )
        kind, message, retryable = self.odds.run_error()
        if retryable:
            # Asked again within the agent's budget, each retry said in the log.
            attempts = self.registry.get(run.conversation.agent).model_settings.retry_attempts
            for attempt in range(1, attempts):
                delay = self.odds.backoff(attempt)
                run.event(
                    payloads.model_retry(
                        turn=turn.id,
                        attempt=attempt,
                        error_kind=kind,
                        message=message,
                        delay_seconds=delay,
                    )
                )
                run.clock += dt.timedelta(seconds=delay) + self.odds.thinking()
        run.ending = {"error_kind": kind, "error_message": message, "error_retryable": retryable}
        run.event(
            payloads.run_ended(
                status=RunStatus.FAILED,
                error_kind=kind,
                error_message=message,
                retryable=retryable,
            )
        )

    def _cancel(self, run: _Run, index: int) -> None:
        """Someone stopped the run while the model was writing its answer: the turn
        keeps what was written so far (they saw it), with its usage estimated."""
        turn = self._begin_turn(run, index)
        partial = self.odds.partial(self.odds.answer(run.question))
        reason, kind = self.odds.cancel_reason()
        spent = (40 + run.sent // 4, estimate_tokens(partial))
        self._end_turn(run, turn, text=partial, spent=spent, interruption=TurnInterruption.CANCELED)
        run.ending = {
            "cancel_requested_at": run.clock,
            "cancel_reason": reason,
            "cancel_kind": kind,
        }
        run.event(
            payloads.run_ended(
                status=RunStatus.CANCELED, reason=reason, stopped=payloads.stopped_by(kind=kind)
            )
        )

    # Tool calls

    def _call(self, run: _Run, turn: _Turn, position: int, call: ToolCallRequest) -> ToolOutcome:
        """A call that needs no approval: scheduled and started in one step,
        executed, and ended with its result or its error."""
        call_uuid, started = self.ids.new(), run.clock
        run.event(
            payloads.tool_call_scheduled(
                tool_call=call_uuid,
                name=call.name,
                arguments=call.arguments,
                requires_approval=False,
            )
        )
        run.event(payloads.tool_call_started(tool_call=call_uuid, name=call.name, attempt=1))
        memory = run.conversation.memory
        outcome, duration = self.outcomes.call(call.name, call.arguments, memory, started)
        run.clock += dt.timedelta(milliseconds=duration)
        if outcome.ok:
            memory.apply(
                call.name,
                call.arguments,
                Writer(run_id=run.id, tool_call_id=call_uuid, at=run.clock),
            )
        status = ToolCallStatus.SUCCEEDED if outcome.ok else ToolCallStatus.FAILED
        run.calls.setdefault(turn.id, []).append(
            ToolCallState(
                id=call_uuid,
                index=position,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                status=status,
                result=outcome.result,
                error_kind=outcome.error_kind,
                error_message=outcome.error_message,
                attempt=1,
            )
        )
        run.event(
            payloads.tool_call_ended(
                status=status,
                tool_call=call_uuid,
                name=call.name,
                duration_ms=duration,
                result=outcome.result,
                error_kind=outcome.error_kind,
                error_message=outcome.error_message,
            )
        )
        self._tool_calls.add(
            id=call_uuid,
            run_id=run.id,
            turn_id=turn.id,
            session_id=run.conversation.session_id,
            call_id=call.id,
            index=position,
            name=call.name,
            arguments=call.arguments,
            result=outcome.result,
            status=status,
            error_kind=outcome.error_kind,
            error_message=outcome.error_message,
            attempt=1,
            created_at=started,
            started_at=started,
            ended_at=run.clock,
            duration_ms=duration,
        )
        return outcome

    def _await_approval(self, run: _Run, turn: _Turn, position: int, call: ToolCallRequest) -> None:
        """A call that needs a person's approval: scheduled, asking, and the run
        waiting for the answer."""
        call_uuid = self.ids.new()
        run.event(
            payloads.tool_call_scheduled(
                tool_call=call_uuid,
                name=call.name,
                arguments=call.arguments,
                requires_approval=True,
            )
        )
        run.event(
            payloads.tool_call_approval_requested(
                tool_call=call_uuid, name=call.name, arguments=call.arguments
            )
        )
        self._tool_calls.add(
            id=call_uuid,
            run_id=run.id,
            turn_id=turn.id,
            session_id=run.conversation.session_id,
            call_id=call.id,
            index=position,
            name=call.name,
            arguments=call.arguments,
            status=ToolCallStatus.SCHEDULED,
            requires_approval=True,
            attempt=0,
            created_at=run.clock,
        )
        run.calls.setdefault(turn.id, []).append(
            ToolCallState(
                id=call_uuid,
                index=position,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                status=ToolCallStatus.SCHEDULED,
                requires_approval=True,
            )
        )
        # What the run waits for, as the run store describes it.
        run.awaiting = {"kind": "approval", "tool_call": str(call_uuid)}
        run.event(payloads.run_awaiting_input(awaiting=run.awaiting))

    # The run's row

    def _row(self, run: _Run, created_at: dt.datetime, started_at: dt.datetime) -> None:
        shape, conversation = run.shape, run.conversation
        waiting = run.awaiting is not None
        first, last = self.created or (created_at, created_at)
        self.created = (min(first, created_at), max(last, created_at))
        self._runs.add(
            id=run.id,
            session_id=conversation.session_id,
            agent=conversation.agent,
            model=run.model,
            input=run.question,
            output=run.output,
            status=shape.status,
            labels={"tier": shape.tier},
            metadata={},
            policy=self._policy(conversation.agent, shape.tier)[0],
            created_by_id=conversation.owner_id,
            previous_run_id=conversation.last_run,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            total_tokens=run.input_tokens + run.output_tokens,
            unpriced_turns=run.unpriced_turns,
            awaiting=run.awaiting,
            awaiting_since=run.clock if waiting else None,
            created_at=created_at,
            started_at=started_at,
            ended_at=None if waiting else run.clock,
            updated_at=run.clock,
            **run.ending,
        )
