"""Agents, model clients and tools for the engine tests, reached by dotted path.

The runtime builds a model client from an agent's ``model`` string
(``python:<dotted path>``), so the test models live in a module of their own that
``import_string`` finds. The tools are plain functions; ``engine_toolsets`` makes
them toolsets, which the tests register in ``TOOLSETS`` for one test at a time.

Every tool execution is appended to ``EXECUTED``, so a test can count how often a
tool really ran (a resumed run must not run a finished call again).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from goaai.runtime.agents import Agent
from goaai.runtime.models.base import DeltaCallback, ModelRequest
from goaai.runtime.policy import Policy
from goaai.runtime.tools import Tool, ToolRejected, tool
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, Usage

# Every model reply here costs this much, so token sums are exact numbers.
TURN_USAGE = Usage(input_tokens=11, output_tokens=4)


@dataclass
class Probe:
    """What the tools did, and the switches the tests hold them with."""

    executed: list[str] = field(default_factory=list)
    # Set by ``blocking`` when it starts; ``blocking`` and ``slow`` wait for ``release``.
    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    # Called from inside ``blocking`` once it has started (e.g. to cancel its run).
    on_start: Any = None

    def reset(self) -> None:
        self.executed.clear()
        self.started = threading.Event()
        self.release = threading.Event()
        self.on_start = None


PROBE = Probe()


def _since_user(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    return messages[last_user + 1 :]


def _describe(message: Message) -> str:
    outcome = json.loads(message.content)
    if outcome["ok"]:
        return f"{message.name} ok"
    error = outcome["error"]
    return f"{message.name} failed ({error['kind']}): {error['message']}"


class OneCallModel:
    """Calls the first tool it is offered once, then says how the call went."""

    name = "one-call"

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        results = [m for m in _since_user(request.messages) if m.role == "tool"]
        if not results:
            call = ToolCallRequest(id="call-1", name=request.tools[0].name, arguments={})
            return ModelReply(tool_calls=(call,), usage=TURN_USAGE, model=self.name)
        return ModelReply(text=_describe(results[-1]), usage=TURN_USAGE, model=self.name)


class EndlessCallsModel:
    """Calls the first tool it is offered, turn after turn, and never answers."""

    name = "endless"

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        done = sum(1 for m in _since_user(request.messages) if m.role == "tool")
        call = ToolCallRequest(id=f"call-{done + 1}", name=request.tools[0].name, arguments={})
        return ModelReply(tool_calls=(call,), usage=TURN_USAGE, model=self.name)


class PlanModel:
    """Follows the plan in the user's message, one tool per turn: "note peek note"
    calls ``note(label="step1")``, then ``peek(label="step2")``, then
    ``note(label="step3")``, and finally lists how each call went."""

    name = "plan"

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        since = _since_user(request.messages)
        user = [m for m in request.messages if m.role == "user"][-1]
        plan = user.content.split()
        results = [m for m in since if m.role == "tool"]
        if len(results) < len(plan):
            step = len(results) + 1
            call = ToolCallRequest(
                id=f"step-{step}", name=plan[step - 1], arguments={"label": f"step{step}"}
            )
            return ModelReply(tool_calls=(call,), usage=TURN_USAGE, model=self.name)
        summary = "; ".join(_describe(m) for m in results)
        return ModelReply(text=f"done: {summary}", usage=TURN_USAGE, model=self.name)


# Tools


@tool(timeout_seconds=0.2)
def slow() -> dict[str, Any]:
    """Takes up to two seconds: longer than its own time limit."""
    PROBE.executed.append("slow")
    PROBE.release.wait(2)
    return {"late": True}


@tool()
def broken() -> dict[str, Any]:
    """Fails with a bug."""
    PROBE.executed.append("broken")
    raise RuntimeError("the flux capacitor is empty")


@tool()
def refuse() -> dict[str, Any]:
    """Always refuses."""
    PROBE.executed.append("refuse")
    raise ToolRejected("Not today.")


@tool()
def tick() -> dict[str, Any]:
    """Succeeds at once."""
    PROBE.executed.append("tick")
    return {"ticked": len(PROBE.executed)}


@tool()
def dawdle() -> dict[str, Any]:
    """Succeeds after a moment."""
    PROBE.executed.append("dawdle")
    time.sleep(1.2)
    return {"dawdled": True}


@tool(timeout_seconds=10)
def blocking() -> dict[str, Any]:
    """Waits until the test releases it."""
    PROBE.executed.append("blocking")
    PROBE.started.set()
    if PROBE.on_start is not None:
        PROBE.on_start()
    if not PROBE.release.wait(10):
        raise RuntimeError("never released")
    return {"released": True}


@tool()
def note(label: str) -> dict[str, Any]:
    """Writes a note: not idempotent, running it twice writes two notes."""
    PROBE.executed.append(f"note:{label}")
    return {"noted": label}


@tool(idempotent=True)
def peek(label: str) -> dict[str, Any]:
    """Looks something up: idempotent, safe to run again."""
    PROBE.executed.append(f"peek:{label}")
    return {"peeked": label}


def _toolset(name: str, *tools: Tool) -> dict[str, Tool]:
    return {t.name: replace(t, toolset=name) for t in tools}


def engine_toolsets() -> dict[str, dict[str, Tool]]:
    """One toolset per tool (the models call the first tool they are offered)."""
    toolsets = {
        f"engine_{t.name}": _toolset(f"engine_{t.name}", t)
        for t in (slow, broken, refuse, tick, dawdle, blocking)
    }
    toolsets["engine_plan"] = _toolset("engine_plan", note, peek)
    return toolsets


def _agent(
    agent_id: str, model: str, toolset: str, policy: Policy | None = None, **extra: Any
) -> Agent:
    return Agent(
        id=agent_id,
        description=f"Test agent {agent_id}.",
        model=f"python:tests.runtime_core.engine_agents.{model}",
        toolsets=(toolset,),
        policy=policy or Policy(),
        **extra,
    )


SLOW = _agent("slowpoke", "OneCallModel", "engine_slow")
BROKEN = _agent("breaker", "OneCallModel", "engine_broken")
BLOCKER = _agent("blocker", "OneCallModel", "engine_blocking")
PLANNER = _agent("planner", "PlanModel", "engine_plan")
# Every cap but the one under test is generous, so only that one can stop the run.
TURN_CAPPED = _agent(
    "turn_capped", "EndlessCallsModel", "engine_tick", Policy(max_turns=3, max_tool_calls=50)
)
CALL_CAPPED = _agent(
    "call_capped", "EndlessCallsModel", "engine_tick", Policy(max_turns=50, max_tool_calls=2)
)
FAILURE_CAPPED = _agent(
    "failure_capped",
    "EndlessCallsModel",
    "engine_refuse",
    Policy(max_turns=50, max_tool_calls=50, max_consecutive_tool_failures=2),
)
TIME_CAPPED = _agent(
    "time_capped",
    "EndlessCallsModel",
    "engine_dawdle",
    Policy(max_turns=50, max_tool_calls=50, time_budget_seconds=1.0),
)
UNCAPPED = _agent(
    "uncapped", "EndlessCallsModel", "engine_tick", Policy(max_turns=50, max_tool_calls=50)
)

ENGINE_AGENTS = [
    SLOW,
    BROKEN,
    BLOCKER,
    PLANNER,
    TURN_CAPPED,
    CALL_CAPPED,
    FAILURE_CAPPED,
    TIME_CAPPED,
    UNCAPPED,
]
