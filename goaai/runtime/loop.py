"""The turn loop: ask the model, run the tools it asks for, repeat until it answers.

Every step is committed through the store before the next one begins, and the loop
looks for a cancel request and the policy's caps between steps. The loop holds no
state that is not also in the store, which is what lets a run be inspected while
it is going and picked up again after its worker died.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from uuid import UUID

from goaai.runtime.agents import Agent, AgentRegistry, Policy
from goaai.runtime.errors import GoaaiError, ModelError
from goaai.runtime.models import ModelClient, ModelRequest, ToolSpec, get_model_client
from goaai.runtime.store import RunStore
from goaai.runtime.tools import Tool, ToolContext, tools_for
from goaai.runtime.types import (
    Message,
    RunContext,
    RunError,
    RunInfo,
    ToolCallRequest,
    ToolOutcome,
)
from goaai.runtime.vocabulary import ErrorKind, RunStatus

logger = logging.getLogger(__name__)

DeltaPublisher = Callable[[RunContext, UUID, str], None]


class _Stop(Exception):
    """Raised inside the loop when a run must end before its model has answered."""

    def __init__(
        self, status: RunStatus, error: RunError | None = None, *, rule: str = "", reason: str = ""
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.rule = rule
        self.reason = reason


class TurnLoop:
    def __init__(
        self,
        *,
        store: RunStore,
        agents: AgentRegistry,
        model_factory: Callable[[str], ModelClient] = get_model_client,
        clock: Callable[[], float] = time.monotonic,
        publish_delta: DeltaPublisher | None = None,
    ) -> None:
        self.store = store
        self.agents = agents
        self.model_factory = model_factory
        self.clock = clock
        self.publish_delta = publish_delta

    def execute(self, run_id: UUID) -> RunInfo | None:
        """Run one run to its end. Returns ``None`` if the run was not startable
        (already finished, or canceled before it began)."""
        context = self.store.begin_run(run_id)
        if context is None:
            return None
        try:
            return self._drive(context)
        except _Stop as stop:
            if stop.rule:
                self.store.policy_decision(
                    run_id=run_id, rule=stop.rule, verdict="stop", reason=stop.reason
                )
            return self.store.finish_run(run_id=run_id, status=stop.status, error=stop.error)
        except ModelError as exc:
            return self.store.finish_run(
                run_id=run_id,
                status=RunStatus.FAILED,
                error=RunError(kind=exc.kind, message=exc.message, retryable=exc.retryable),
            )
        except Exception as exc:
            logger.exception("Run %s crashed", run_id)
            return self.store.finish_run(
                run_id=run_id,
                status=RunStatus.FAILED,
                error=RunError(kind=ErrorKind.INTERNAL, message=f"{type(exc).__name__}: {exc}"),
            )

    def _drive(self, context: RunContext) -> RunInfo:
        agent = self.agents.get(context.agent)
        policy = agent.policy
        model = self.model_factory(agent.model)
        tools = tools_for(agent.toolsets)
        specs = tuple(
            ToolSpec(name=t.name, description=t.description, parameters=t.json_schema())
            for t in tools.values()
        )
        messages = self._initial_messages(agent, context)
        started = self.clock()
        tool_calls_made = 0
        consecutive_failures = 0

        for index in range(policy.max_turns):
            self._check_between_steps(context, policy, started)
            turn_id = self.store.start_turn(
                run_id=context.run_id,
                index=index,
                model=model.name,
                messages=[m.as_dict() for m in messages],
            )
            turn_started = self.clock()
            reply = model.complete(
                ModelRequest(messages=tuple(messages), tools=specs),
                self._delta_sink(context, turn_id),
            )
            self.store.complete_turn(
                turn_id=turn_id,
                reply=reply,
                latency_ms=int((self.clock() - turn_started) * 1000),
            )
            if not reply.tool_calls:
                return self.store.finish_run(
                    run_id=context.run_id, status=RunStatus.COMPLETED, output=reply.text
                )
            messages.append(
                Message(role="assistant", content=reply.text, tool_calls=reply.tool_calls)
            )

            for position, request in enumerate(reply.tool_calls):
                self._check_between_steps(context, policy, started)
                if tool_calls_made >= policy.max_tool_calls:
                    raise _Stop(
                        RunStatus.FAILED,
                        RunError(
                            kind=ErrorKind.DOMAIN_REJECTION,
                            message=f"The run used its {policy.max_tool_calls} tool calls.",
                        ),
                        rule="max_tool_calls",
                        reason=f"Limit of {policy.max_tool_calls} tool calls reached.",
                    )
                tool_calls_made += 1
                outcome = self._call_tool(context, turn_id, position, request, tools)
                consecutive_failures = 0 if outcome.ok else consecutive_failures + 1
                messages.append(
                    Message(
                        role="tool",
                        content=json.dumps(outcome.for_model(), default=str),
                        tool_call_id=request.id,
                        name=request.name,
                    )
                )
                if consecutive_failures >= policy.max_consecutive_tool_failures:
                    raise _Stop(
                        RunStatus.FAILED,
                        RunError(
                            kind=outcome.error_kind or ErrorKind.INTERNAL,
                            message=f"{consecutive_failures} tool calls failed in a row; "
                            f"the last: {outcome.error_message}",
                        ),
                        rule="max_consecutive_tool_failures",
                        reason=f"{consecutive_failures} consecutive failed tool calls.",
                    )

        raise _Stop(
            RunStatus.FAILED,
            RunError(
                kind=ErrorKind.DOMAIN_REJECTION,
                message=f"The agent did not answer within {policy.max_turns} turns.",
            ),
            rule="max_turns",
            reason=f"Limit of {policy.max_turns} turns reached.",
        )

    def _delta_sink(self, context: RunContext, turn_id: UUID) -> Callable[[str], None] | None:
        publish = self.publish_delta
        if publish is None:
            return None
        return lambda text: publish(context, turn_id, text)

    def _initial_messages(self, agent: Agent, context: RunContext) -> list[Message]:
        messages: list[Message] = []
        if agent.system_prompt:
            messages.append(Message(role="system", content=agent.system_prompt))
        messages.extend(context.history)
        messages.append(Message(role="user", content=context.input))
        return messages

    def _check_between_steps(self, context: RunContext, policy: Policy, started: float) -> None:
        reason = self.store.cancel_requested(context.run_id)
        if reason is not None:
            raise _Stop(RunStatus.CANCELED, reason=reason)
        if self.clock() - started > policy.time_budget_seconds:
            raise _Stop(
                RunStatus.TIMED_OUT,
                RunError(
                    kind=ErrorKind.TIMEOUT,
                    message=f"The run exceeded its time budget of {policy.time_budget_seconds:g}s.",
                ),
                rule="time_budget_seconds",
                reason=f"Time budget of {policy.time_budget_seconds:g}s spent.",
            )

    def _call_tool(
        self,
        context: RunContext,
        turn_id: UUID,
        position: int,
        request: ToolCallRequest,
        tools: dict[str, Tool],
    ) -> ToolOutcome:
        found = tools.get(request.name)
        tool_call_id = self.store.start_tool_call(
            turn_id=turn_id,
            index=position,
            request=request,
            requires_approval=bool(found and found.requires_approval),
        )
        if found is None:
            outcome = ToolOutcome(
                error_kind=ErrorKind.INVALID_CALL,
                error_message=f"There is no tool named {request.name!r}; "
                f"available: {', '.join(sorted(tools)) or 'none'}.",
            )
        else:
            tool_context = ToolContext(
                store=self.store,
                run_id=context.run_id,
                session_id=context.session_id,
                owner_id=context.owner_id,
                agent=context.agent,
                tool_call_id=tool_call_id,
            )
            try:
                outcome = found.invoke(request.arguments, tool_context)
            except GoaaiError as exc:
                outcome = ToolOutcome(error_kind=ErrorKind.INTERNAL, error_message=str(exc))
        self.store.finish_tool_call(tool_call_id=tool_call_id, outcome=outcome)
        return outcome
