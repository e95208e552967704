"""The turn loop: ask the model, run the tools it asks for, repeat until it answers.

Every step is committed through the store before the next one begins, and the loop
looks for a cancel request and the policy's caps between steps. A step writes what
belongs together: a model's reply with the calls it asks for, the final answer with
the run's end; and it tells whether the run was asked to stop, as its transaction
found it, which the check that follows at once takes instead of a read. The loop keeps no
state that is not also in the store: when it starts, it rebuilds the conversation
from what the run recorded, so the same code starts a new run, continues one after
a person answered, and takes over one whose worker died.

Picking a run up again follows these rules:

- a tool call that finished (succeeded, failed, denied) is never executed again;
  its recorded result is what the model sees;
- a tool call left ``running`` by a dead worker is executed again only if its tool
  is idempotent; otherwise it is marked failed (``internal``) and the model is told;
- a tool call left ``scheduled`` (queued behind calls of the same reply that ran
  at the same time, or approved and not yet begun) is executed then;
- a turn whose reply was lost (its worker died while the model answered) is
  closed as crashed, keeping the text it had checkpointed and an estimate of its
  usage, and the model is asked again in a new turn with the same messages;
- an agent called as a tool whose call was left ``running`` goes on as the same
  child run (its own records replayed by these rules), never as a second one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from uuid import UUID

from goaai.runtime import context as budget
from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.conversation import DEFAULT_CONTEXT_TOKENS, ConversationSettings
from goaai.runtime.errors import (
    GoaaiError,
    IllegalTransition,
    ModelError,
    NotFound,
    ToolsetUnavailable,
)
from goaai.runtime.limits import LocalLimits, ModelLimits
from goaai.runtime.memory_ranking import fact_line
from goaai.runtime.models import ModelClient, ModelRequest, ToolSpec
from goaai.runtime.models.base import usage_so_far
from goaai.runtime.policy import LabelRule, Policy, apply_label_rules
from goaai.runtime.questions import Question
from goaai.runtime.retry import model_retrying
from goaai.runtime.store import RunStore
from goaai.runtime.tools import Tool, ToolContext, ToolRejected
from goaai.runtime.tools.base import DelegationPaused
from goaai.runtime.tools.client import client_tools
from goaai.runtime.types import (
    Message,
    ModelReply,
    PlannedCall,
    RunContext,
    RunError,
    RunInfo,
    ToolCallRequest,
    ToolCallState,
    ToolOutcome,
    TurnState,
)
from goaai.runtime.vocabulary import (
    AwaitingKind,
    ErrorKind,
    FinishReason,
    RunStatus,
    ToolCallStatus,
    TurnInterruption,
)
from goaai.runtime.workers import worker_name

logger = logging.getLogger(__name__)

# (the run, its turn, a piece of the turn's text, where it begins in that text).
DeltaPublisher = Callable[[RunContext, UUID, str, int], None]
ChildRunner = Callable[[UUID], RunInfo | None]

_FINAL_CALL_STATUSES = {
    ToolCallStatus.SUCCEEDED,
    ToolCallStatus.FAILED,
    ToolCallStatus.DENIED,
    ToolCallStatus.CANCELED,
}
# Turns that ended before their model finished and are asked again when a run is
# picked up: lost with their worker, or broken off by an error whose failure of the
# run was not recorded before the worker died.
_ASKED_AGAIN = frozenset({TurnInterruption.CRASHED, TurnInterruption.FAILED})
# Agents calling agents calling agents...: a bound on how deep that may go.
MAX_DELEGATION_DEPTH = 3


class _Stop(Exception):
    """The run must end now, before its model has answered."""

    def __init__(
        self,
        status: RunStatus,
        error: RunError | None = None,
        *,
        rule: str = "",
        reason: str = "",
        output: str = "",
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.rule = rule
        self.reason = reason
        # What the model had said when it was stopped, kept as the run's output.
        self.output = output


class _Paused(Exception):
    """The run waits for a person; the worker lets it go."""

    def __init__(self, run: RunInfo) -> None:
        super().__init__("paused")
        self.run = run


class _Interrupted(Exception):
    """A cancel request came while the model was still answering."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# While a model streams its answer, how often the loop looks for a cancel request.
CANCEL_CHECK_SECONDS = 0.5
# A step that found in its own transaction whether the run was asked to stop
# (claiming it, recording a reply, ending a tool call) answers the check that
# follows it, instead of a read of its own, if that check comes within this long
# (a cancel committed in between is then seen at the next check).
SEEN_FRESH_SECONDS = 0.05
# And how often it keeps the text said so far (what a crash may lose at most, and
# what a subscriber joining mid-answer first reads).
CHECKPOINT_SECONDS = 1.0


class _Streamed:
    """The text the current attempt of a model call has streamed so far."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self.length = 0

    def add(self, text: str) -> int:
        """Take the next piece; returns where it begins in the text."""
        offset = self.length
        self._parts.append(text)
        self.length += len(text)
        return offset

    def clear(self) -> None:
        self._parts.clear()
        self.length = 0

    @property
    def text(self) -> str:
        return "".join(self._parts)


@dataclass(frozen=True)
class _Answer:
    """A model's reply that asks for tool calls, not recorded yet: it is recorded
    with the calls, in one step."""

    reply: ModelReply
    latency_ms: int
    retries: int


class _LeaseLost(Exception):
    """Another worker took the run over; this one must stop touching it."""


class _LeaseKeeper:
    """Renews the run's lease in the background while the loop works on it."""

    def __init__(self, store: RunStore, run_id: UUID, owner: str, seconds: float) -> None:
        self.store, self.run_id, self.owner, self.seconds = store, run_id, owner, seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="goaai-lease", daemon=True)

    def __enter__(self) -> _LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _renew(self) -> None:
        renewed = time.monotonic()
        with self.store.worker():
            while not self._stop.wait(self.seconds / 3):
                try:
                    if not self.store.renew_lease(
                        self.run_id, owner=self.owner, lease_seconds=self.seconds
                    ):
                        self.lost.set()
                        return
                    renewed = time.monotonic()
                except Exception:
                    logger.exception("Renewing the lease of run %s failed", self.run_id)
                    if time.monotonic() - renewed > self.seconds:
                        # Unrenewed this long, the lease has expired: another worker
                        # may take the run, so this one must stop touching it.
                        self.lost.set()
                        return

    def check(self) -> None:
        if self.lost.is_set():
            raise _LeaseLost


@dataclass
class _Progress:
    """Counts the policy caps are checked against, rebuilt from the records."""

    started: float
    tool_calls: int = 0
    consecutive_failures: int = 0
    # Replies cut off by the output limit before they said anything usable.
    truncated: int = 0
    messages: list[Message] = field(default_factory=list)
    # The most tokens a request's input may hold, and where the history of earlier
    # runs lies in ``messages`` (its messages per run, oldest first), known when the
    # run builds its first request (not when it resumes from recorded turns).
    input_budget: int = DEFAULT_CONTEXT_TOKENS
    # How much of one tool result the model is shown.
    result_chars: int = ConversationSettings.tool_result_chars
    history_at: int = 0
    history_runs: list[int] = field(default_factory=list)
    # How many of the calls a model asks for together run at the same time.
    parallel_tool_calls: int = 1
    # The run's cancel request (its reason, or None) as the last step found it,
    # and when (time.monotonic()), for the check that follows (SEEN_FRESH_SECONDS).
    seen: tuple[str | None, float] | None = None

    def saw(self, cancel_reason: str | None) -> None:
        self.seen = (cancel_reason, time.monotonic())

    def fresh_view(self) -> tuple[str | None] | None:
        """What the last step saw, if it is fresh (once: a second check reads)."""
        seen, self.seen = self.seen, None
        if seen is None or time.monotonic() - seen[1] > SEEN_FRESH_SECONDS:
            return None
        return (seen[0],)


@dataclass
class _Call:
    """One call of a model's reply as the loop works through it: what was recorded
    of it before this pass (``state``), its tool (``None``: no such tool among
    ``offered``), its id once recorded, whether this pass recorded it started, and
    how it ended once it has (``outcome``)."""

    position: int
    request: ToolCallRequest
    state: ToolCallState | None
    tool: Tool | None
    offered: tuple[str, ...]
    needs_approval: bool
    tool_call_id: UUID | None = None
    started: bool = False
    outcome: ToolOutcome | None = None

    @classmethod
    def of(
        cls,
        position: int,
        request: ToolCallRequest,
        state: ToolCallState | None,
        tools: dict[str, Tool],
        policy: Policy,
    ) -> _Call:
        found = tools.get(request.name)
        if state is None:
            # A caller's tool is the caller's to run: approving it is theirs too.
            needs_approval = (
                found is not None
                and not found.answered_by_caller
                and policy.needs_approval(request.name, found.requires_approval)
            )
        else:
            needs_approval = state.requires_approval
        call = cls(
            position,
            request,
            state,
            found,
            tuple(tools),
            needs_approval,
            tool_call_id=state.id if state is not None else None,
        )
        if state is not None and state.status in _FINAL_CALL_STATUSES:
            call.outcome = (
                _denied(state.decision_reason)
                if state.status == ToolCallStatus.DENIED
                else state.outcome
            )
        return call

    @property
    def recorded_id(self) -> UUID:
        if self.tool_call_id is None:
            raise RuntimeError(f"Tool call {self.request.id} is executed before it is recorded.")
        return self.tool_call_id

    @property
    def waits_for_person(self) -> bool:
        """A question, or a call that needs an approval it does not have yet."""
        if self.tool is None:
            return False
        if self.tool.asks_user or self.tool.answered_by_caller:
            return True
        return self.needs_approval and (self.state is None or self.state.decision != "approved")

    @property
    def runs_together(self) -> bool:
        """Whether the call runs with the others of its reply: not one that waits
        for a person, nor one that runs in the loop's own thread (a tool without a
        time limit: an agent asked, whose child run may itself wait for a person)."""
        if self.outcome is not None or self.waits_for_person:
            return False
        return self.tool is None or self.tool.timeout_seconds is not None


def _within_cap(policy: Policy, used: int, calls: Sequence[_Call]) -> int:
    """How many of a reply's calls, from the first, the run may make after ``used``
    calls: one not recorded yet is over the cap once ``max_tool_calls`` were made."""
    for call in calls:
        if call.state is None and used >= policy.max_tool_calls:
            return call.position
        used += 1
    return len(calls)


class TurnLoop:
    def __init__(
        self,
        *,
        store: RunStore,
        agents: AgentRegistry,
        model_factory: Callable[[str], ModelClient],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        limits: ModelLimits | None = None,
        publish_delta: DeltaPublisher | None = None,
        run_child: ChildRunner | None = None,
        lease_seconds: float = 60.0,
        label_rules: Sequence[LabelRule] = (),
    ) -> None:
        self.store = store
        self.agents = agents
        self.model_factory = model_factory
        self.clock = clock
        self.sleep = sleep
        self.limits = limits or LocalLimits()
        self.publish_delta = publish_delta
        self.run_child = run_child
        self.lease_seconds = lease_seconds
        self.label_rules = list(label_rules)

    def execute(self, run_id: UUID) -> RunInfo | None:
        """Execute a run until it ends or waits for a person, and return it then.

        Returns ``None`` when the run is not this worker's to execute: it already
        ended, waits for input, or another live worker holds it.
        """
        owner = worker_name()
        context = self.store.claim_run(run_id, owner=owner, lease_seconds=self.lease_seconds)
        if context is None:
            return None
        with _LeaseKeeper(self.store, run_id, owner, self.lease_seconds) as lease:
            return self._execute(context, lease)

    def _execute(self, context: RunContext, lease: _LeaseKeeper) -> RunInfo | None:
        try:
            return self._run_to_an_end(context, lease)
        except NotFound as exc:
            # Deleted while it executed (with its session, or on its own): nothing is
            # left to record, and that is no crash.
            if self._gone(context.run_id):
                return None
            return self._crashed(context.run_id, exc, lease)

    def _run_to_an_end(self, context: RunContext, lease: _LeaseKeeper) -> RunInfo | None:
        run_id = context.run_id
        try:
            return self._drive(context, lease)
        except _Paused as paused:
            return paused.run
        except _LeaseLost:
            if not self._gone(run_id):
                logger.warning("Run %s was taken over by another worker; this one stops", run_id)
            return None
        except _Stop as stop:
            return self._stopped(run_id, stop, lease)
        except ModelError as exc:
            if lease.lost.is_set():
                return None
            error = RunError(kind=exc.kind, message=exc.message, retryable=exc.retryable)
            return self._finish(run_id, RunStatus.FAILED, error)
        except NotFound:
            raise  # _execute tells a deleted run from a missing row of a live one
        except Exception as exc:
            return self._crashed(run_id, exc, lease)

    def _stopped(self, run_id: UUID, stop: _Stop, lease: _LeaseKeeper) -> RunInfo | None:
        if lease.lost.is_set():
            return None
        if stop.rule:
            self.store.policy_decision(
                run_id=run_id, rule=stop.rule, verdict="stop", reason=stop.reason
            )
        return self._finish(run_id, stop.status, stop.error, output=stop.output, rule=stop.rule)

    def _crashed(self, run_id: UUID, exc: Exception, lease: _LeaseKeeper) -> RunInfo | None:
        if lease.lost.is_set():
            # Another worker holds the run now; failing it would undo its work.
            return None
        if isinstance(exc, ToolsetUnavailable):
            # An MCP server that does not start or answer: no crash of goaai's, and
            # the same run may work once the server is back.
            logger.warning("Run %s: %s", run_id, exc)
            error = RunError(kind=ErrorKind.UNAVAILABLE, message=str(exc), retryable=True)
            return self._finish(run_id, RunStatus.FAILED, error)
        logger.exception("Run %s crashed", run_id)
        error = RunError(kind=ErrorKind.INTERNAL, message=f"{type(exc).__name__}: {exc}")
        return self._finish(run_id, RunStatus.FAILED, error)

    def _finish(
        self,
        run_id: UUID,
        status: RunStatus,
        error: RunError | None,
        *,
        output: str = "",
        rule: str = "",
    ) -> RunInfo:
        """End the run, unless it already ended (a cancel that took effect at once);
        ``rule``: the policy rule that stopped it, if one did."""
        try:
            return self.store.finish_run(
                run_id=run_id, status=status, output=output, error=error, rule=rule
            )
        except IllegalTransition:
            return self.store.get_run(run_id)

    def _gone(self, run_id: UUID) -> bool:
        """Whether the run was deleted (with its session, or on its own) while this
        worker executed it: nothing is left to record, and that is no crash. Says so
        once, without a traceback."""
        try:
            self.store.get_run(run_id)
        except NotFound:
            logger.info("Run %s was deleted while it executed; this worker stops", run_id)
            return True
        return False

    # The conversation

    def _drive(self, context: RunContext, lease: _LeaseKeeper) -> RunInfo:
        # The agent as the run recorded it, if it did: a change since does not
        # change a run already under way.
        agent = (
            Agent.from_dict(context.definition)
            if context.definition is not None
            else self.agents.get(context.agent)
        )
        policy = Policy.from_dict(context.policy) if context.policy else agent.policy
        model = self.model_factory(agent.model)
        tools = self._tools(agent, policy, context)
        specs = tuple(
            ToolSpec(name=t.name, description=t.description, parameters=t.json_schema())
            for t in tools.values()
        )
        progress = _Progress(
            started=self.clock() - context.elapsed_seconds,
            input_budget=budget.input_budget(
                agent.conversation, agent.model_settings, _window(model)
            ),
            result_chars=agent.conversation.tool_result_chars,
        )
        progress.parallel_tool_calls = agent.conversation.parallel_tool_calls
        progress.saw(context.cancel_reason)
        if not context.turns:
            progress.messages = self._initial_messages(agent, context, model, specs, progress)

        replayed = self._replay(context, agent, policy, tools, specs, progress, lease)
        if isinstance(replayed, RunInfo):
            return replayed
        next_index, lost = replayed
        # A turn lost with its worker is asked again: it does not count against the cap.
        for index in range(next_index, policy.max_turns + lost):
            self._check_between_steps(context, policy, progress, lease)
            turn_id = self.store.start_turn(
                run_id=context.run_id,
                index=index,
                model=model.name,
                messages=[m.as_dict() for m in progress.messages],
            )
            answer = self._ask_model(context, agent, model, specs, progress, turn_id)
            if isinstance(answer, RunInfo):
                return answer
            if answer is not None:
                calls = answer.reply.tool_calls
                self._run_calls(context, policy, tools, progress, lease, turn_id, calls, (), answer)

        raise _Stop(
            RunStatus.FAILED,
            RunError(
                kind=ErrorKind.DOMAIN_REJECTION,
                message=f"The agent did not answer within {policy.max_turns} turns.",
            ),
            rule="max_turns",
            reason=f"Limit of {policy.max_turns} turns reached.",
        )

    def _replay(
        self,
        context: RunContext,
        agent: Agent,
        policy: Policy,
        tools: dict[str, Tool],
        specs: tuple[ToolSpec, ...],
        progress: _Progress,
        lease: _LeaseKeeper,
    ) -> tuple[int, int] | RunInfo:
        """Go through what the run recorded, as :mod:`this module <goaai.runtime.loop>`
        says: the calls of each reply run (or replay their results), and a turn left
        open, whose worker was lost while its model answered, is closed as crashed
        with the text it had checkpointed and an estimate of its usage; the model is
        asked again in a new turn, with the same messages. Returns the index of the
        next turn and how many turns were lost, or the run if it has ended."""
        next_index = lost = 0
        for turn in context.turns:
            progress.messages = list(turn.request_messages)
            next_index = turn.index + 1
            if not turn.ended or turn.interruption in _ASKED_AGAIN:
                if not turn.ended:
                    lease.check()
                    self._close_lost_turn(turn, specs)
                lost += 1
            elif turn.interruption == TurnInterruption.CANCELED:
                # Stopped mid-answer; only recording the run's end was lost.
                raise _Stop(RunStatus.CANCELED, output=turn.response_text)
            elif _cut_short(turn.finish_reason, turn.response_text, turn.response_tool_calls):
                # Cut off by the output limit: its calls were never run; the model was
                # told, as it is told below.
                self._told_cut_short(agent, progress, turn.response_text)
            elif not turn.response_tool_calls:
                # The model had answered; only recording the run's end was lost.
                return self.store.finish_run(
                    run_id=context.run_id, status=RunStatus.COMPLETED, output=turn.response_text
                )
            else:
                progress.messages.append(
                    Message(
                        role="assistant",
                        content=turn.response_text,
                        tool_calls=turn.response_tool_calls,
                        reasoning_state=turn.reasoning_state,
                    )
                )
                self._run_calls(
                    context,
                    policy,
                    tools,
                    progress,
                    lease,
                    turn.id,
                    turn.response_tool_calls,
                    turn.tool_calls,
                )
        return next_index, lost

    def _close_lost_turn(self, turn: TurnState, specs: tuple[ToolSpec, ...]) -> None:
        """End a turn whose worker died while its model answered: it keeps the text
        checkpointed until then, with the usage that text and its request are
        estimated at (the provider's own count died with the worker)."""
        self.store.complete_turn(
            turn_id=turn.id,
            reply=ModelReply(
                text=turn.response_text,
                usage=budget.estimated_usage(turn.request_messages, turn.response_text, specs),
                finish_reason=FinishReason.OTHER,
            ),
            latency_ms=0,
            interruption=TurnInterruption.CRASHED,
            usage_estimated=True,
        )

    def _ask_model(
        self,
        context: RunContext,
        agent: Agent,
        model: ModelClient,
        specs: tuple[ToolSpec, ...],
        progress: _Progress,
        turn_id: UUID,
    ) -> _Answer | RunInfo | None:
        """One model round-trip, retried within the agent's budget: the reply that
        asks for tool calls, not recorded yet; or, when the model answered, the
        completed run; ``None`` when its reply was cut short (recorded) and it is
        asked again."""
        self._fit(progress, specs)
        turn_started = self.clock()
        streamed = _Streamed()
        request = ModelRequest(
            messages=tuple(progress.messages), tools=specs, settings=agent.model_settings
        )
        sink = self._delta_sink(context, turn_id, streamed)
        retries = 0

        def keep_partial(exc: BaseException, interruption: TurnInterruption) -> str:
            """Close the turn with what it said until ``exc`` ended it."""
            partial = streamed.text
            used, estimated = budget.partial_usage(
                usage_so_far(exc), request.messages, partial, specs
            )
            self.store.complete_turn(
                turn_id=turn_id,
                reply=ModelReply(
                    text=partial, usage=used, model=model.name, finish_reason=FinishReason.OTHER
                ),
                latency_ms=int((self.clock() - turn_started) * 1000),
                retries=retries,
                interruption=interruption,
                usage_estimated=estimated,
            )
            return partial

        def on_retry(attempt: int, error: ModelError, delay: float) -> None:
            nonlocal retries
            retries = attempt
            # The provider's words are for operators: the event gives its owner the
            # kind in plain words (goaai.runtime.public_errors).
            logger.warning(
                "Run %s: model call failed (%s), asked again in %.1f s: %s",
                context.run_id,
                error.kind,
                delay,
                error.message,
            )
            self.store.model_retry(
                turn_id=turn_id,
                attempt=attempt,
                error_kind=error.kind,
                message=error.message,
                delay_seconds=delay,
            )

        try:
            for attempt in model_retrying(
                agent.model_settings,
                sleep=self._pause(context),
                on_retry=on_retry,
            ):
                with attempt:
                    # What a failed attempt streamed is not part of the reply.
                    streamed.clear()
                    reply = self._complete(context, model, request, sink)
        except _Interrupted as interrupted:
            # Stopped halfway through its answer: the turn keeps what was said so far
            # (the person saw it) and what saying it used, and the run ends canceled.
            partial = keep_partial(interrupted, TurnInterruption.CANCELED)
            raise _Stop(RunStatus.CANCELED, reason=interrupted.reason, output=partial) from None
        except ModelError as exc:
            # The stream broke off after some text, and asking again did not help (or
            # may not): the turn keeps that text and its usage; the run fails.
            if not streamed.length:
                raise
            partial = keep_partial(exc, TurnInterruption.FAILED)
            error = RunError(kind=exc.kind, message=exc.message, retryable=exc.retryable)
            raise _Stop(RunStatus.FAILED, error, output=partial) from exc
        latency_ms = int((self.clock() - turn_started) * 1000)
        if _cut_short(reply.finish_reason, reply.text, reply.tool_calls):
            recorded = self.store.complete_turn(
                turn_id=turn_id, reply=reply, latency_ms=latency_ms, retries=retries
            )
            progress.saw(recorded.cancel_reason)
            self._told_cut_short(agent, progress, reply.text)
            return None
        if not reply.tool_calls:
            # The answer: the reply and the run's end are one step.
            return self.store.complete_turn_and_run(
                turn_id=turn_id, reply=reply, latency_ms=latency_ms, retries=retries
            )
        progress.messages.append(
            Message(
                role="assistant",
                content=reply.text,
                tool_calls=reply.tool_calls,
                reasoning_state=reply.reasoning_state,
            )
        )
        # Recorded with the calls it asks for, in one step (_run_together).
        return _Answer(reply, latency_ms, retries)

    def _complete(
        self,
        context: RunContext,
        model: ModelClient,
        request: ModelRequest,
        sink: Callable[[str], None] | None,
    ) -> ModelReply:
        """One attempt, once the profile's limits give it a place (waiting for one
        looks for a cancel request as any wait does)."""
        profile = getattr(model, "profile", None)
        if profile is None:
            return model.complete(request, sink)
        with self.limits.slot(profile, wait=self._pause(context)):
            return model.complete(request, sink)

    def _told_cut_short(self, agent: Agent, progress: _Progress, text: str) -> None:
        """A reply cut off by the output limit before it was usable (a tool call
        half written, or nothing said): its calls are not run; the model is told
        and asked again, as many times as the agent's retry budget allows."""
        progress.truncated += 1
        settings = agent.model_settings
        if progress.truncated >= max(1, settings.retry_attempts):
            limit = settings.max_output_tokens
            raise _Stop(
                RunStatus.FAILED,
                RunError(
                    kind=ErrorKind.TRUNCATED,
                    message=f"The model's reply was cut off by the length limit "
                    f"({f'{limit} output tokens' if limit else 'the provider default'}) "
                    f"{progress.truncated} times before it was complete.",
                ),
            )
        progress.messages.append(Message(role="assistant", content=text))
        progress.messages.append(Message(role="user", content=CUT_SHORT_NOTE))

    def _pause(self, context: RunContext) -> Callable[[float], None]:
        """A wait (before a retry, or for a model's limits) that a cancel request
        or a lost lease ends early."""

        def pause(seconds: float) -> None:
            deadline = self.clock() + seconds
            while True:
                reason = self.store.cancel_requested(context.run_id)
                if reason is not None:
                    raise _Stop(RunStatus.CANCELED, reason=reason)
                left = deadline - self.clock()
                if left <= 0:
                    return
                self.sleep(min(left, CANCEL_CHECK_SECONDS))

        return pause

    def _run_calls(
        self,
        context: RunContext,
        policy: Policy,
        tools: dict[str, Tool],
        progress: _Progress,
        lease: _LeaseKeeper,
        turn_id: UUID,
        requests: tuple[ToolCallRequest, ...],
        recorded: tuple[ToolCallState, ...],
        answer: _Answer | None = None,
    ) -> None:
        """Run the calls of one reply and tell the model how each went, in its order.

        The calls are recorded in the model's order first (with the reply, when it
        is ``answer``, not recorded yet). Those that need no person
        then run together (at most the agent's ``parallel_tool_calls`` at a time);
        the others (a question, a call waiting for approval, an agent asked, which
        runs in the loop's own thread) follow one by one in the model's order, and
        the run pauses at the first that waits for a person. A failed call cancels
        none of the others; the caps count the calls in the model's order."""
        by_index = {state.index: state for state in recorded}
        calls = [
            _Call.of(position, request, by_index.get(position), tools, policy)
            for position, request in enumerate(requests)
        ]
        allowed = _within_cap(policy, progress.tool_calls, calls)
        self._run_together(context, policy, progress, lease, turn_id, calls[:allowed], answer)
        for call in calls:
            request = call.request
            outcome = call.outcome
            if outcome is None:
                self._check_between_steps(context, policy, progress, lease)
                if call.position >= allowed:
                    raise _Stop(
                        RunStatus.FAILED,
                        RunError(
                            kind=ErrorKind.DOMAIN_REJECTION,
                            message=f"The run used its {policy.max_tool_calls} tool calls.",
                        ),
                        rule="max_tool_calls",
                        reason=f"Limit of {policy.max_tool_calls} tool calls reached.",
                    )
                if call.tool is not None and call.tool.answered_by_caller:
                    raise _Paused(self._await_caller(context, calls))
                outcome = self._call_tool(context, progress, call)
            progress.tool_calls += 1
            progress.consecutive_failures = 0 if outcome.ok else progress.consecutive_failures + 1
            # The result reaches the model bounded; all of it stays recorded.
            progress.messages.append(
                budget.tool_message(
                    request=request,
                    outcome=outcome.for_model(),
                    is_error=not outcome.ok,
                    tool_call_id=call.tool_call_id or (call.state.id if call.state else None),
                    limit=progress.result_chars,
                )
            )
            if progress.consecutive_failures >= policy.max_consecutive_tool_failures:
                raise _Stop(
                    RunStatus.FAILED,
                    RunError(
                        kind=outcome.error_kind or ErrorKind.INTERNAL,
                        message=f"{progress.consecutive_failures} tool calls failed in a row; "
                        f"the last: {outcome.error_message}",
                    ),
                    rule="max_consecutive_tool_failures",
                    reason=f"{progress.consecutive_failures} consecutive failed tool calls.",
                )

    def _run_together(
        self,
        context: RunContext,
        policy: Policy,
        progress: _Progress,
        lease: _LeaseKeeper,
        turn_id: UUID,
        calls: list[_Call],
        answer: _Answer | None,
    ) -> None:
        """Record the calls not recorded yet, in the model's order (with the reply
        that asks for them, when it is ``answer``: one step), then execute those
        that need no person, each in a thread of its own, at most
        ``parallel_tool_calls`` at a time; each one's outcome is set on it. Calls
        queued behind others begin only if the run may still go on; the running
        ones finish (or time out) whatever happens meanwhile."""
        open_calls = [call for call in calls if call.outcome is None]
        together = _to_run_together(open_calls, progress.parallel_tool_calls)
        at_once = max(1, min(progress.parallel_tool_calls, len(together)))
        starting = {call.position for call in together[:at_once]}
        if answer is not None:
            # What the check between steps asks, the step asks itself: a run asked
            # to stop records the reply and none of its calls.
            lease.check()
            self._check_time(policy, progress)
            self._record_answer(turn_id, answer, open_calls, starting, progress)
        if not open_calls:
            return
        self._check_between_steps(context, policy, progress, lease)
        for call in open_calls:
            if call.state is None and call.tool_call_id is None:
                self._record_call(turn_id, call, start=call.position in starting)
        if at_once == 1:
            # One at a time, in the loop's own thread.
            for call in together:
                if not call.started:
                    self._check_between_steps(context, policy, progress, lease)
                call.outcome = self._execute_call(context, progress, call)
            return
        with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="goaai-tools") as pool:
            jobs = [
                pool.submit(self._execute_in_worker, context, policy, progress, lease, call)
                for call in together
            ]
        for job in jobs:
            failure = job.exception()
            if failure is not None:
                raise failure

    def _execute_in_worker(
        self,
        context: RunContext,
        policy: Policy,
        progress: _Progress,
        lease: _LeaseKeeper,
        call: _Call,
    ) -> None:
        """One call of those that run together, in a worker thread. The thread holds
        the store's per-thread resources (a database connection) only to record the
        call's start and end: the tool runs in a thread of its own, with its own."""
        with self.store.worker():
            if not call.started:
                try:
                    self._check_between_steps(context, policy, progress, lease)
                except (_Stop, _LeaseLost):
                    # The loop stops the run once the running calls have finished.
                    return
            found = self._tool_to_run(call)
            if isinstance(found, ToolOutcome):
                call.outcome = found
                return
            if not call.started:
                self.store.begin_tool_call(tool_call_id=call.recorded_id)
        # Only tools with a time limit run together, and those run in a thread of
        # their own (an agent asked, which may pause, runs in the loop's thread).
        outcome = self._invoke(found, call.request, context, call.recorded_id)
        with self.store.worker():
            progress.saw(
                self.store.finish_tool_call(tool_call_id=call.recorded_id, outcome=outcome)
            )
        call.outcome = outcome

    def _record_answer(
        self,
        turn_id: UUID,
        answer: _Answer,
        calls: list[_Call],
        starting: set[int],
        progress: _Progress,
    ) -> None:
        """Record the model's reply and the calls of it to record now, as
        :meth:`_record_call` records each, in one step; or, if the run was asked to
        stop, the reply alone, and stop."""
        plans = [
            PlannedCall(
                position=call.position,
                request=call.request,
                start=not call.waits_for_person and call.position in starting,
                requires_approval=call.needs_approval,
            )
            for call in calls
        ]
        recorded = self.store.complete_turn(
            turn_id=turn_id,
            reply=answer.reply,
            latency_ms=answer.latency_ms,
            retries=answer.retries,
            calls=plans,
        )
        if recorded.cancel_reason is not None:
            raise _Stop(RunStatus.CANCELED, reason=recorded.cancel_reason)
        for call, plan, tool_call_id in zip(calls, plans, recorded.tool_call_ids, strict=True):
            call.tool_call_id, call.started = tool_call_id, plan.start
        progress.saw(None)

    def _record_call(self, turn_id: UUID, call: _Call, *, start: bool) -> None:
        """Record a call the model asked for: waiting for a person (it may need
        approval), started (nothing to wait for: scheduled and started in one
        step), or scheduled to begin when a place among the running calls frees."""
        if call.waits_for_person or not start:
            call.tool_call_id = self.store.schedule_tool_call(
                turn_id=turn_id,
                index=call.position,
                request=call.request,
                requires_approval=call.needs_approval,
            )
        else:
            call.tool_call_id = self.store.start_tool_call(
                turn_id=turn_id, index=call.position, request=call.request
            )
            call.started = True

    def _call_tool(self, context: RunContext, progress: _Progress, call: _Call) -> ToolOutcome:
        """A call that waits for a person (the run pauses), or that runs in the
        loop's own thread, in the model's order after the calls run together."""
        found, tool_call_id = call.tool, call.recorded_id
        if found is not None and found.asks_user:
            return self._ask(context, found, call)
        if call.waits_for_person:
            raise _Paused(
                self.store.await_input(
                    run_id=context.run_id, kind=AwaitingKind.APPROVAL, tool_call_id=tool_call_id
                )
            )
        return self._execute_call(context, progress, call)

    def _ask(self, context: RunContext, found: Tool, call: _Call) -> ToolOutcome:
        """Pause the run with the call's question. Its arguments are checked as any
        tool's are first: a bad question comes back to the model to correct."""
        tool_call_id = call.recorded_id
        checked = self._invoke(found, call.request, context, tool_call_id)
        if not checked.ok:
            self.store.begin_tool_call(tool_call_id=tool_call_id)
            self.store.finish_tool_call(tool_call_id=tool_call_id, outcome=checked)
            return checked
        # The answer arrives through the store; until then the run waits.
        question = Question.of(checked.result)
        raise _Paused(
            self.store.await_input(
                run_id=context.run_id,
                kind=AwaitingKind.QUESTION,
                tool_call_id=tool_call_id,
                question=question.text,
                choices=question.choices,
                multiple=question.multiple,
            )
        )

    def _tool_to_run(self, call: _Call) -> Tool | ToolOutcome:
        """The tool a call runs; or, for a call that cannot run (no such tool, or
        one left running by a dead worker that is not safe to run again), how it
        ended, recorded."""
        found, request, state = call.tool, call.request, call.state
        tool_call_id = call.recorded_id
        if found is None:
            outcome = ToolOutcome(
                error_kind=ErrorKind.INVALID_CALL,
                error_message=f"There is no tool named {request.name!r}; "
                f"available: {', '.join(sorted(call.offered)) or 'none'}.",
            )
            if not call.started:
                self.store.begin_tool_call(tool_call_id=tool_call_id)
            self.store.finish_tool_call(tool_call_id=tool_call_id, outcome=outcome)
            return outcome
        if state is not None and state.status == ToolCallStatus.RUNNING and not found.idempotent:
            # Its worker died mid-call: the tool may or may not have acted, and
            # running it again could act twice. Tell the model instead.
            outcome = ToolOutcome(
                error_kind=ErrorKind.INTERNAL,
                error_message=f"The worker executing {request.name} stopped during the call; "
                "it was not retried because the tool is not idempotent. Its effect is unknown.",
            )
            self.store.finish_tool_call(tool_call_id=tool_call_id, outcome=outcome)
            return outcome
        return found

    def _execute_call(self, context: RunContext, progress: _Progress, call: _Call) -> ToolOutcome:
        """Execute a recorded call that needs no person (now) in the loop's thread,
        record how it ended, and return that."""
        found = self._tool_to_run(call)
        if isinstance(found, ToolOutcome):
            return found
        tool_call_id = call.recorded_id
        if not call.started:
            self.store.begin_tool_call(tool_call_id=tool_call_id)
        try:
            outcome = self._invoke(found, call.request, context, tool_call_id)
        except DelegationPaused as waiting:
            # The agent this run called waits for a person; so does this run. When
            # the child ends, its answer becomes this call's result and we go on.
            raise _Paused(
                self.store.await_input(
                    run_id=context.run_id,
                    kind="delegated",
                    tool_call_id=tool_call_id,
                    child_run_id=waiting.child.id,
                )
            ) from None
        progress.saw(self.store.finish_tool_call(tool_call_id=tool_call_id, outcome=outcome))
        return outcome

    def _invoke(
        self, found: Tool, request: ToolCallRequest, context: RunContext, tool_call_id: UUID
    ) -> ToolOutcome:
        tool_context = ToolContext(
            store=self.store,
            run_id=context.run_id,
            session_id=context.session_id,
            owner_id=context.owner_id,
            agent=context.agent,
            tool_call_id=tool_call_id,
            call_agent=self._child_caller(context, tool_call_id),
        )

        def invoke() -> ToolOutcome:
            with self.store.worker():
                return found.invoke(request.arguments, tool_context)

        if found.timeout_seconds is None:
            return invoke()
        # A thread of its own, so that the time limit counts from the moment the tool
        # starts, and a tool that hangs is abandoned without holding up the run (a
        # Python thread cannot be killed; the hung tool's thread ends when it does).
        outcome: list[ToolOutcome] = []
        failure: list[BaseException] = []

        def run_tool() -> None:
            try:
                outcome.append(invoke())
            except BaseException as exc:
                failure.append(exc)

        worker = threading.Thread(target=run_tool, name=f"goaai-tool-{found.name}", daemon=True)
        worker.start()
        worker.join(found.timeout_seconds)
        if worker.is_alive():
            return ToolOutcome(
                error_kind=ErrorKind.TIMEOUT,
                error_message=f"{found.name} did not finish within {found.timeout_seconds:g}s.",
            )
        if failure:
            if isinstance(failure[0], GoaaiError):
                return ToolOutcome(error_kind=ErrorKind.INTERNAL, error_message=str(failure[0]))
            raise failure[0]
        return outcome[0]

    def _child_caller(
        self, context: RunContext, tool_call_id: UUID
    ) -> Callable[[str, str], RunInfo]:
        def call_agent(agent_id: str, prompt: str) -> RunInfo:
            if context.depth >= MAX_DELEGATION_DEPTH:
                raise ToolRejected(
                    f"Agents may call agents at most {MAX_DELEGATION_DEPTH} levels deep."
                )
            runner = self.run_child or self.execute
            earlier = self.store.tool_call_child(tool_call_id)
            if earlier is not None:
                # The call began under a worker that died: the run it started goes on.
                return self._continue_child(context, earlier, runner)
            # The child runs under its own agent's policy, tightened by the same label
            # rules as its parent (it carries the parent's labels).
            policy, decisions = apply_label_rules(
                self.agents.get(agent_id).policy, context.labels, self.label_rules
            )
            child = self.store.create_child_run(
                definition=self.agents.get(agent_id).as_dict(),
                parent_run_id=context.run_id,
                parent_tool_call_id=tool_call_id,
                agent=agent_id,
                input=prompt,
                labels=context.labels,
                policy=policy.as_dict(),
                policy_decisions=decisions,
            )
            finished = runner(child.id)
            return finished if finished is not None else self.store.get_run(child.id)

        return call_agent

    def _continue_child(self, context: RunContext, child: RunInfo, runner: ChildRunner) -> RunInfo:
        """Take up the run an agent called as a tool became, whose worker died with
        this run's: it goes on from what it recorded. While the lease of that
        worker has not run out yet (it renewed it a moment after this run's), it is
        waited for, at most a lease period."""
        deadline = self.clock() + self.lease_seconds
        pause = self._pause(context)
        while True:
            if child.status == RunStatus.AWAITING_INPUT or RunStatus(child.status).is_terminal:
                return child
            finished = runner(child.id)
            if finished is not None:
                return finished
            child = self.store.get_run(child.id)
            if child.status != RunStatus.RUNNING or self.clock() >= deadline:
                return child
            pause(CANCEL_CHECK_SECONDS)

    # Helpers

    def _tools(self, agent: Agent, policy: Policy, context: RunContext) -> dict[str, Tool]:
        # The caller's tools (if it offered any) come second: a name the agent
        # already uses keeps the agent's own tool.
        tools = {**client_tools(context.client_tools), **self.agents.tools_of(agent)}
        return {name: t for name, t in tools.items() if policy.allows(name, t.toolset)}

    def _await_caller(self, context: RunContext, calls: Sequence[_Call]) -> RunInfo:
        """Pause the run until the caller sends the results of every call of this
        reply to one of its own tools that has none yet."""
        # Calls past the policy's cap were never recorded; the run stops at those.
        waiting = [
            call.recorded_id
            for call in calls
            if call.outcome is None
            and call.tool_call_id is not None
            and call.tool is not None
            and call.tool.answered_by_caller
        ]
        return self.store.await_input(
            run_id=context.run_id,
            kind=AwaitingKind.CLIENT_TOOL,
            tool_call_id=waiting[0],
            tool_call_ids=waiting,
        )

    def _delta_sink(
        self, context: RunContext, turn_id: UUID, streamed: _Streamed
    ) -> Callable[[str], None] | None:
        """Where the model's text goes as it is written: into ``streamed``, to live
        subscribers with its offset, and about once a second (before the piece that
        triggers it is published) into the store as the turn's text so far; a
        cancel request (looked for every half second) stops the answer there."""
        publish = self.publish_delta
        if publish is None:
            return None
        checked = saved = self.clock()

        def sink(text: str) -> None:
            nonlocal checked, saved
            offset = streamed.add(text)
            now = self.clock()
            if now - saved >= CHECKPOINT_SECONDS:
                saved = now
                self._checkpoint(turn_id, streamed.text)
            publish(context, turn_id, text, offset)
            if now - checked >= CANCEL_CHECK_SECONDS:
                checked = now
                reason = self.store.cancel_requested(context.run_id)
                if reason is not None:
                    raise _Interrupted(reason)

        return sink

    def _checkpoint(self, turn_id: UUID, text: str) -> None:
        """Keep the text so far, if the store can: a checkpoint it refuses for a
        moment (a locked table, a dropped connection) is skipped, not the answer;
        the next one, a second later, carries the whole text again."""
        try:
            self.store.checkpoint_turn(turn_id=turn_id, text=text)
        except Exception:
            logger.warning(
                "turn %s: checkpoint not kept, the next one will be", turn_id, exc_info=True
            )

    def _initial_messages(
        self,
        agent: Agent,
        context: RunContext,
        model: ModelClient,
        specs: tuple[ToolSpec, ...],
        progress: _Progress,
    ) -> list[Message]:
        """The agent's system prompt, then what it remembers for this session as a
        second system message (the first stays the same from run to run, which is
        what a provider's prompt cache keys on), the conversation so far on the
        run's branch within the context budget, the input."""
        head: list[Message] = []
        if agent.system_prompt:
            head.append(Message(role="system", content=agent.system_prompt))
        if context.instructions:
            # The caller's own instructions, after the agent's: the agent's rules
            # stay first (and its prompt the same from run to run, for the cache).
            head.append(Message(role="system", content=context.instructions))
        if context.memory:
            head.append(memory_message(context.memory))
        current = Message(role="user", content=context.input)
        fixed = budget.messages_tokens([*head, current]) + budget.tools_tokens(specs)
        # Half of what is left for the earlier runs, half for this run's own turns.
        history_tokens = max(0, (progress.input_budget - fixed) // 2)
        plan = budget.plan_history(
            context.history,
            context.summary,
            history_tokens=history_tokens,
            result_chars=agent.conversation.tool_result_chars,
        )
        summary = context.summary
        text, covered = (summary.text, summary.runs_covered) if summary else (None, 0)
        if context.history_cut:
            # A session older than summaries: what lies past the store's walk is out.
            self.store.policy_decision(
                run_id=context.run_id,
                rule="context_budget",
                verdict="trimmed",
                reason=f"Only the last {len(context.history)} earlier runs were read; "
                "the ones before them were never summarised and are left out.",
            )
        if plan.fold:
            written = self._summarize(context, agent, model, plan, progress.input_budget)
            if written is not None:
                text, covered = written
        history = plan.messages(text, covered)
        progress.history_at = len(head) + (1 if text else 0)
        progress.history_runs = [len(messages) for _, messages in plan.kept]
        return [*head, *history, current]

    def _summarize(
        self,
        context: RunContext,
        agent: Agent,
        model: ModelClient,
        plan: budget.HistoryPlan,
        input_budget: int,
    ) -> tuple[str, int] | None:
        """Have the agent's model fold the runs ``plan`` leaves out into a new
        summary (with the one in force), record it, and return its text and how many
        runs it covers; ``None`` (the runs are left out, and the run says so) if
        the model failed."""
        previous = context.summary
        words = plan.summary_tokens * 3 // 4
        request = ModelRequest(
            # The request leaves room for the summary it asks for.
            messages=budget.summary_request_messages(
                previous, plan.fold, words=words, budget=input_budget - plan.summary_tokens
            ),
            tools=(),
            # No reasoning: on a model that reasons, it would spend the summary's
            # output limit before a word of the summary is written.
            settings=replace(
                agent.model_settings,
                max_output_tokens=plan.summary_tokens,
                reasoning_effort=None,
            ),
        )
        started = self.clock()
        try:
            for attempt in model_retrying(
                agent.model_settings, sleep=self._pause(context), on_retry=_not_recorded
            ):
                with attempt:
                    reply = self._complete(context, model, request, None)
                    if not reply.text.strip():
                        # Kept, an empty summary would stand for those runs for good.
                        raise ModelError(ErrorKind.TRUNCATED, "the model wrote no summary")
        except ModelError as exc:
            self.store.policy_decision(
                run_id=context.run_id,
                rule="context_budget",
                verdict="trimmed",
                reason=f"{len(plan.fold)} earlier runs left out of the context: "
                f"summarising them failed ({exc.kind}: {exc.message}).",
            )
            return None
        text = reply.text.strip()[: plan.summary_tokens * budget.CHARS_PER_TOKEN]
        covered = (previous.runs_covered if previous else 0) + len(plan.fold)
        self.store.record_summary(
            run_id=context.run_id,
            through_run_id=plan.fold[-1].id,
            previous_id=previous.id if previous else None,
            runs_covered=covered,
            text=text,
            model=model.name,
            reply=reply,
            latency_ms=int((self.clock() - started) * 1000),
        )
        return text, covered

    def _fit(self, progress: _Progress, specs: tuple[ToolSpec, ...]) -> None:
        """Keep the next request within the input budget: shorten this run's longest
        tool results first, then leave out the oldest earlier runs; a run whose own
        turns cannot fit ends failed rather than overflow the model."""
        room = progress.input_budget - budget.tools_tokens(specs)
        messages = progress.messages
        if budget.messages_tokens(messages) <= room:
            return
        shortest = max(FIT_RESULT_CHARS, 1)
        for position in sorted(
            (i for i, m in enumerate(messages) if m.role == "tool"),
            key=lambda i: -len(messages[i].content),
        ):
            if budget.messages_tokens(messages) <= room:
                return
            message = messages[position]
            if len(message.content) > shortest:
                messages[position] = replace(
                    message, content=budget.shortened(message.content, shortest)
                )
        while progress.history_runs and budget.messages_tokens(messages) > room:
            count = progress.history_runs.pop(0)
            del messages[progress.history_at : progress.history_at + count]
        if budget.messages_tokens(messages) > room:
            raise _Stop(
                RunStatus.FAILED,
                RunError(
                    kind=ErrorKind.DOMAIN_REJECTION,
                    message="The run no longer fits the context budget of "
                    f"{progress.input_budget} input tokens, even with its tool results "
                    "shortened and earlier runs left out.",
                ),
                rule="context_budget",
                reason="The run's own turns exceed the context budget.",
            )

    def _check_between_steps(
        self, context: RunContext, policy: Policy, progress: _Progress, lease: _LeaseKeeper
    ) -> None:
        lease.check()
        view = progress.fresh_view()
        reason = view[0] if view is not None else self.store.cancel_requested(context.run_id)
        if reason is not None:
            raise _Stop(RunStatus.CANCELED, reason=reason)
        self._check_time(policy, progress)

    def _check_time(self, policy: Policy, progress: _Progress) -> None:
        if self.clock() - progress.started > policy.time_budget_seconds:
            raise _Stop(
                RunStatus.TIMED_OUT,
                RunError(
                    kind=ErrorKind.TIMEOUT,
                    message=f"The run exceeded its time budget of {policy.time_budget_seconds:g}s.",
                ),
                rule="time_budget_seconds",
                reason=f"Time budget of {policy.time_budget_seconds:g}s spent.",
            )


def memory_message(facts: Sequence[tuple[str, str, object]]) -> Message:
    """What the agent remembers for a session, (scope, key, value) each, as the
    system message that follows its prompt: the facts the store chose for the run,
    most relevant first, one line each (:func:`~goaai.runtime.memory_ranking.fact_line`,
    the line the memory budget counts)."""
    lines = "\n".join(fact_line(scope, key, value) for scope, key, value in facts)
    return Message(role="system", content=f"What you remember that applies here:\n{lines}")


def _window(model: ModelClient) -> int | None:
    """How many tokens the model takes in one request, where its profile says."""
    profile = getattr(model, "profile", None)
    window = getattr(profile, "context_window", None)
    return window if isinstance(window, int) else None


# How short the loop may make one of a run's own tool results to stay in budget.
FIT_RESULT_CHARS = 500


def _to_run_together(open_calls: list[_Call], parallel: int) -> list[_Call]:
    """The open calls of a reply that run together. One at a time is the model's
    order: no call runs ahead of one that waits for a person (or runs in the loop's
    thread); the loop takes those, and what follows them, in turn."""
    together = [call for call in open_calls if call.runs_together]
    if parallel == 1:
        first_apart = next((c.position for c in open_calls if not c.runs_together), None)
        if first_apart is not None:
            together = [c for c in together if c.position < first_apart]
    return together


def _not_recorded(attempt: int, error: ModelError, delay: float) -> None:
    """A summary's retries are not turns of the run; the log says why each failed."""
    logger.info(
        "Summarising history: attempt %d failed (%s), retried in %.1fs", attempt, error.kind, delay
    )


# What the model is told when its reply was cut off by the output limit.
CUT_SHORT_NOTE = (
    "Your previous reply was cut off by the output length limit before it was complete, "
    "so none of its tool calls were run. Answer again, more briefly: make one tool call "
    "at a time with short arguments, or give a shorter answer."
)


def _cut_short(finish_reason: str, text: str, tool_calls: Sequence[ToolCallRequest]) -> bool:
    """Whether a reply stopped by the output limit is unusable as it is: a tool
    call in it may be half written, and an empty reply says nothing. (Text cut off
    is kept, and marked, as the answer.)"""
    return finish_reason == FinishReason.LENGTH and (bool(tool_calls) or not text)


def _denied(reason: str) -> ToolOutcome:
    return ToolOutcome(
        error_kind=ErrorKind.DOMAIN_REJECTION,
        error_message="A person denied this call" + (f": {reason}" if reason else "."),
    )


__all__ = ["MAX_DELEGATION_DEPTH", "TurnLoop", "TurnState", "worker_name"]
