"""The turn loop: ask the model, run the tools it asks for, repeat until it answers.

Every step is committed through the store before the next one begins, and the loop
looks for a cancel request and the policy's caps between steps. The loop keeps no
state that is not also in the store: when it starts, it rebuilds the conversation
from what the run recorded, so the same code starts a new run, continues one after
a person answered, and takes over one whose worker died.

Picking a run up again follows three rules:

- a tool call that finished (succeeded, failed, denied) is never executed again;
  its recorded result is what the model sees;
- a tool call left ``running`` by a dead worker is executed again only if its tool
  is idempotent; otherwise it is marked failed (``internal``) and the model is told;
- a turn whose reply was lost is asked again with the messages it recorded.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.errors import GoaaiError, IllegalTransition, ModelError, NotFound
from goaai.runtime.limits import LocalLimits, ModelLimits
from goaai.runtime.models import ModelClient, ModelRequest, ToolSpec
from goaai.runtime.policy import LabelRule, Policy, apply_label_rules
from goaai.runtime.retry import model_retrying
from goaai.runtime.store import RunStore
from goaai.runtime.tools import Tool, ToolContext, ToolRejected
from goaai.runtime.tools.base import DelegationPaused
from goaai.runtime.types import (
    Message,
    ModelReply,
    RunContext,
    RunError,
    RunInfo,
    ToolCallRequest,
    ToolCallState,
    ToolOutcome,
    TurnState,
)
from goaai.runtime.vocabulary import ErrorKind, FinishReason, RunStatus, ToolCallStatus

logger = logging.getLogger(__name__)

DeltaPublisher = Callable[[RunContext, UUID, str], None]
ChildRunner = Callable[[UUID], RunInfo | None]

_FINAL_CALL_STATUSES = {
    ToolCallStatus.SUCCEEDED,
    ToolCallStatus.FAILED,
    ToolCallStatus.DENIED,
    ToolCallStatus.CANCELED,
}
# Agents calling agents calling agents...: a bound on how deep that may go.
MAX_DELEGATION_DEPTH = 3


def worker_name() -> str:
    """A name for the lease holder that says which process and thread it is."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:8]}"


class _Stop(Exception):
    """The run must end now, before its model has answered."""

    def __init__(
        self, status: RunStatus, error: RunError | None = None, *, rule: str = "", reason: str = ""
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.rule = rule
        self.reason = reason


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
        return self._finish(run_id, stop.status, stop.error)

    def _crashed(self, run_id: UUID, exc: Exception, lease: _LeaseKeeper) -> RunInfo | None:
        logger.exception("Run %s crashed", run_id)
        if lease.lost.is_set():
            # Another worker holds the run now; failing it would undo its work.
            return None
        error = RunError(kind=ErrorKind.INTERNAL, message=f"{type(exc).__name__}: {exc}")
        return self._finish(run_id, RunStatus.FAILED, error)

    def _finish(self, run_id: UUID, status: RunStatus, error: RunError | None) -> RunInfo:
        """End the run, unless it already ended (a cancel that took effect at once)."""
        try:
            return self.store.finish_run(run_id=run_id, status=status, error=error)
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
        tools = self._tools(agent, policy)
        specs = tuple(
            ToolSpec(name=t.name, description=t.description, parameters=t.json_schema())
            for t in tools.values()
        )
        progress = _Progress(started=self.clock() - context.elapsed_seconds)
        progress.messages = self._initial_messages(agent, context)
        next_index = 0

        # Replay what was recorded; finish the last turn if it was left open.
        for turn in context.turns:
            progress.messages = list(turn.request_messages)
            next_index = turn.index + 1
            if not turn.ended:
                self._check_between_steps(context, policy, progress, lease)
                self.store.restart_turn(turn_id=turn.id)
                reply_calls = self._ask_model(context, agent, model, specs, progress, turn.id)
            elif _cut_short(turn.finish_reason, turn.response_text, turn.response_tool_calls):
                # Cut off by the output limit: its calls were never run; the model was
                # told, as it is told below.
                self._told_cut_short(agent, progress, turn.response_text)
                continue
            elif not turn.response_tool_calls:
                # The model had answered; only recording the run's end was lost.
                return self.store.finish_run(
                    run_id=context.run_id, status=RunStatus.COMPLETED, output=turn.response_text
                )
            else:
                reply_calls = turn.response_tool_calls
                progress.messages.append(
                    Message(
                        role="assistant",
                        content=turn.response_text,
                        tool_calls=reply_calls,
                        reasoning_state=turn.reasoning_state,
                    )
                )
            if isinstance(reply_calls, RunInfo):
                return reply_calls
            self._run_calls(
                context, policy, tools, progress, lease, turn.id, reply_calls, turn.tool_calls
            )

        for index in range(next_index, policy.max_turns):
            self._check_between_steps(context, policy, progress, lease)
            turn_id = self.store.start_turn(
                run_id=context.run_id,
                index=index,
                model=model.name,
                messages=[m.as_dict() for m in progress.messages],
            )
            reply_calls = self._ask_model(context, agent, model, specs, progress, turn_id)
            if isinstance(reply_calls, RunInfo):
                return reply_calls
            self._run_calls(context, policy, tools, progress, lease, turn_id, reply_calls, ())

        raise _Stop(
            RunStatus.FAILED,
            RunError(
                kind=ErrorKind.DOMAIN_REJECTION,
                message=f"The agent did not answer within {policy.max_turns} turns.",
            ),
            rule="max_turns",
            reason=f"Limit of {policy.max_turns} turns reached.",
        )

    def _ask_model(
        self,
        context: RunContext,
        agent: Agent,
        model: ModelClient,
        specs: tuple[ToolSpec, ...],
        progress: _Progress,
        turn_id: UUID,
    ) -> tuple[ToolCallRequest, ...] | RunInfo:
        """One model round-trip, retried within the agent's budget: the tool calls
        the model wants (none when its reply was cut short and it is asked again),
        or, when it answered, the completed run."""
        turn_started = self.clock()
        streamed: list[str] = []
        request = ModelRequest(
            messages=tuple(progress.messages), tools=specs, settings=agent.model_settings
        )
        sink = self._delta_sink(context, turn_id, streamed)
        retries = 0

        def on_retry(attempt: int, error: ModelError, delay: float) -> None:
            nonlocal retries
            retries = attempt
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
            # (the person saw it), and the run ends canceled.
            partial = "".join(streamed)
            self.store.complete_turn(
                turn_id=turn_id,
                reply=ModelReply(text=partial, model=model.name, finish_reason=FinishReason.OTHER),
                latency_ms=int((self.clock() - turn_started) * 1000),
                retries=retries,
            )
            raise _Stop(RunStatus.CANCELED, reason=interrupted.reason) from None
        self.store.complete_turn(
            turn_id=turn_id,
            reply=reply,
            latency_ms=int((self.clock() - turn_started) * 1000),
            retries=retries,
        )
        if _cut_short(reply.finish_reason, reply.text, reply.tool_calls):
            self._told_cut_short(agent, progress, reply.text)
            return ()
        if not reply.tool_calls:
            return self.store.finish_run(
                run_id=context.run_id, status=RunStatus.COMPLETED, output=reply.text
            )
        progress.messages.append(
            Message(
                role="assistant",
                content=reply.text,
                tool_calls=reply.tool_calls,
                reasoning_state=reply.reasoning_state,
            )
        )
        return reply.tool_calls

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
    ) -> None:
        by_index = {state.index: state for state in recorded}
        for position, request in enumerate(requests):
            state = by_index.get(position)
            if state is not None and state.status in _FINAL_CALL_STATUSES:
                outcome = state.outcome
                if state.status == ToolCallStatus.DENIED:
                    outcome = _denied(state.decision_reason)
                progress.tool_calls += 1
            else:
                self._check_between_steps(context, policy, progress, lease)
                if state is None and progress.tool_calls >= policy.max_tool_calls:
                    raise _Stop(
                        RunStatus.FAILED,
                        RunError(
                            kind=ErrorKind.DOMAIN_REJECTION,
                            message=f"The run used its {policy.max_tool_calls} tool calls.",
                        ),
                        rule="max_tool_calls",
                        reason=f"Limit of {policy.max_tool_calls} tool calls reached.",
                    )
                progress.tool_calls += 1
                outcome = self._call_tool(context, policy, tools, turn_id, position, request, state)
            progress.consecutive_failures = 0 if outcome.ok else progress.consecutive_failures + 1
            progress.messages.append(
                Message(
                    role="tool",
                    content=json.dumps(outcome.for_model(), default=str),
                    tool_call_id=request.id,
                    name=request.name,
                    is_error=not outcome.ok,
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

    def _call_tool(
        self,
        context: RunContext,
        policy: Policy,
        tools: dict[str, Tool],
        turn_id: UUID,
        position: int,
        request: ToolCallRequest,
        state: ToolCallState | None,
    ) -> ToolOutcome:
        found = tools.get(request.name)
        started = False
        if state is None:
            needs_approval = bool(found) and policy.needs_approval(
                request.name, bool(found and found.requires_approval)
            )
            if needs_approval or (found is not None and found.asks_user):
                tool_call_id = self.store.schedule_tool_call(
                    turn_id=turn_id,
                    index=position,
                    request=request,
                    requires_approval=needs_approval,
                )
            else:
                # Nothing to wait for: scheduled and started in one step.
                tool_call_id = self.store.start_tool_call(
                    turn_id=turn_id, index=position, request=request
                )
                started = True
        else:
            tool_call_id = state.id
            needs_approval = state.requires_approval

        if found is None:
            outcome = ToolOutcome(
                error_kind=ErrorKind.INVALID_CALL,
                error_message=f"There is no tool named {request.name!r}; "
                f"available: {', '.join(sorted(tools)) or 'none'}.",
            )
            if not started:
                self.store.begin_tool_call(tool_call_id=tool_call_id)
            self.store.finish_tool_call(tool_call_id=tool_call_id, outcome=outcome)
            return outcome

        if found.asks_user:
            # The answer arrives through the store; until then the run waits.
            question = str(request.arguments.get("question", ""))
            raise _Paused(
                self.store.await_input(
                    run_id=context.run_id,
                    kind="question",
                    tool_call_id=tool_call_id,
                    question=question,
                )
            )
        if needs_approval and (state is None or state.decision != "approved"):
            raise _Paused(
                self.store.await_input(
                    run_id=context.run_id, kind="approval", tool_call_id=tool_call_id
                )
            )
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

        if not started:
            self.store.begin_tool_call(tool_call_id=tool_call_id)
        try:
            outcome = self._invoke(found, request, context, tool_call_id)
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
        self.store.finish_tool_call(tool_call_id=tool_call_id, outcome=outcome)
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
            runner = self.run_child or self.execute
            finished = runner(child.id)
            return finished if finished is not None else self.store.get_run(child.id)

        return call_agent

    # Helpers

    def _tools(self, agent: Agent, policy: Policy) -> dict[str, Tool]:
        tools = self.agents.tools_of(agent)
        return {name: t for name, t in tools.items() if policy.allows(name, t.toolset)}

    def _delta_sink(
        self, context: RunContext, turn_id: UUID, streamed: list[str]
    ) -> Callable[[str], None] | None:
        """Where the model's text goes as it is written: to live subscribers, and
        into ``streamed``; a cancel request (looked for every half second) stops
        the answer there."""
        publish = self.publish_delta
        if publish is None:
            return None
        checked = self.clock()

        def sink(text: str) -> None:
            nonlocal checked
            streamed.append(text)
            publish(context, turn_id, text)
            if self.clock() - checked >= CANCEL_CHECK_SECONDS:
                checked = self.clock()
                reason = self.store.cancel_requested(context.run_id)
                if reason is not None:
                    raise _Interrupted(reason)

        return sink

    def _initial_messages(self, agent: Agent, context: RunContext) -> list[Message]:
        """The agent's system prompt, then what it remembers for this session as a
        second system message (the first stays the same from run to run, which is
        what a provider's prompt cache keys on), the session so far, the input."""
        messages: list[Message] = []
        if agent.system_prompt:
            messages.append(Message(role="system", content=agent.system_prompt))
        if context.memory:
            messages.append(memory_message(context.memory))
        messages.extend(context.history)
        messages.append(Message(role="user", content=context.input))
        return messages

    def _check_between_steps(
        self, context: RunContext, policy: Policy, progress: _Progress, lease: _LeaseKeeper
    ) -> None:
        lease.check()
        reason = self.store.cancel_requested(context.run_id)
        if reason is not None:
            raise _Stop(RunStatus.CANCELED, reason=reason)
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
    system message that follows its prompt."""
    lines = "\n".join(f"- {key}: {value} ({scope})" for scope, key, value in facts)
    return Message(role="system", content=f"What you remember that applies here:\n{lines}")


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
