"""What to seed: how many sessions, runs, turns and calls, and the odds that shape
each of them (who the agent is, how a run ends, what it is asked)."""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass

from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.tools import Tool
from goaai.runtime.vocabulary import ErrorKind, RunStatus

MODELS = ("gpt-4o-mini", "claude-3-5-haiku", "gpt-4.1")
MEMORY_KEYS = ("favourite colour", "name", "home city", "preferred language", "coffee order")
MEMORY_VALUES = ("green", "Ada", "Lisbon", "Portuguese", "flat white", "blue", "Grace", "Oslo")
TIME_ZONES = ("UTC", "Europe/Rome", "America/New_York", "Asia/Tokyo", "Australia/Sydney")
QUESTIONS = (
    "what is {a} * ({b} + {c})?",
    "remember that my {key} is {value}",
    "what time is it in {tz}?",
    "do you remember my {key}?",
    "please forget my {key}",
    "repeat after me: {value}",
)
ANSWERS = (
    "Done.",
    "Here you are: {q}",
    "I looked it up for you. {q}",
    "Got it, I'll keep that in mind.",
)
# How a model provider fails a run: kind, message, whether trying again may help.
RUN_ERRORS = (
    (ErrorKind.UNAVAILABLE, "The model provider is unavailable (503).", True),
    (ErrorKind.RATE_LIMITED, "The model provider refused the request: rate limited.", True),
    (ErrorKind.TIMEOUT, "The model did not answer within 60 s.", True),
    (ErrorKind.INTERNAL, "The model's reply could not be read.", False),
)
# Why a seeded run was stopped, and who stopped it (a StopKind value).
CANCEL_REASONS = (
    ("canceled by the user", "user"),
    ("canceled by operator demo-admin", "operator"),
    ("session_ended", "user"),
)
SESSION_METADATA = {"source": "seed_demo"}
# Most conversations are with the main assistant.
MAIN_AGENT = "assistant"
MAIN_AGENT_WEIGHT = 8


@dataclass(frozen=True)
class Plan:
    """How much to seed, as the command was asked."""

    sessions: int
    runs_per_session: int
    turns_per_run: int
    calls_per_turn: int
    users: int
    days: float
    active_fraction: float
    events: bool
    memory: bool

    @property
    def sessions_per_transaction(self) -> int:
        """About 20,000 tool calls (and their turns and events) per transaction."""
        calls = self.runs_per_session * max(self.turns_per_run - 1, 1) * max(self.calls_per_turn, 1)
        return max(1, 20_000 // max(1, calls))


@dataclass(frozen=True)
class RunShape:
    """What one seeded run does: how it ends, its label, and the tools each of its
    tool-calling turns asks for. A completed, failed or canceled run has one more
    turn after those (its answer, or where it stopped); a run awaiting input waits
    at the last call of its last turn, for a person to approve it."""

    status: RunStatus
    tier: str
    tool_turns: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class SessionShape:
    agent: str
    active: bool
    runs: tuple[RunShape, ...]


class AgentTools:
    """The tools seeded runs of each agent call.

    Tools that start other runs (an agent asking another) or wait for a person do
    not fit a run that is replayed as finished; a tool that needs approval is what
    the runs awaiting input wait for.
    """

    def __init__(self, registry: AgentRegistry, *, memory: bool) -> None:
        self.callable: dict[str, list[str]] = {}
        self.approval: dict[str, str] = {}
        for agent in registry.all():
            tools = registry.tools_of(agent)
            self.callable[agent.id] = [
                name for name, tool in tools.items() if _replayable(agent, tool, memory=memory)
            ]
            waiting = [name for name, tool in tools.items() if _approval(tool)]
            if waiting:
                self.approval[agent.id] = waiting[0]
        self.agents = [agent for agent, names in self.callable.items() if names] or [MAIN_AGENT]


def _replayable(agent: Agent, tool: Tool, *, memory: bool) -> bool:
    # An agent's calls to other agents come from its ``delegates``, not its toolsets.
    delegates = tool.toolset not in agent.toolsets
    waits = tool.asks_user or tool.requires_approval
    return not (delegates or waits) and (memory or tool.toolset != "memory")


def _approval(tool: Tool) -> bool:
    return tool.requires_approval and not tool.asks_user


class Odds:
    """Every random choice of a seeded data set, from one seeded generator, so that
    the same seed gives the same content."""

    def __init__(self, plan: Plan, tools: AgentTools, rng: random.Random) -> None:
        self.plan = plan
        self.tools = tools
        self.rng = rng
        self.agent_weights = [
            MAIN_AGENT_WEIGHT if agent == MAIN_AGENT else 1 for agent in tools.agents
        ]

    # Sessions

    def session(self) -> SessionShape:
        plan, rng = self.plan, self.rng
        agent = rng.choices(self.tools.agents, weights=self.agent_weights)[0]
        active = rng.random() < plan.active_fraction
        runs = tuple(
            # Only a session still going has a run that still waits.
            self.run(agent, may_wait=active and number == plan.runs_per_session - 1)
            for number in range(plan.runs_per_session)
        )
        return SessionShape(agent=agent, active=active, runs=runs)

    def title(self) -> str:
        return f"Demo conversation {self.rng.randrange(1_000_000)}"

    def between_runs(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.rng.uniform(5, 600))

    def until_ended(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.rng.uniform(1, 60))

    # Runs

    def run(self, agent: str, *, may_wait: bool) -> RunShape:
        status = self._status(agent, may_wait=may_wait)
        tier = "paid" if self.rng.random() < 0.3 else "free"
        tool_turns = [
            [self.rng.choice(self.tools.callable[agent]) for _ in range(self.plan.calls_per_turn)]
            for _ in range(self.plan.turns_per_run - 1)
        ]
        if status == RunStatus.AWAITING_INPUT:
            tool_turns[-1][-1] = self.tools.approval[agent]
        return RunShape(
            status=status, tier=tier, tool_turns=tuple(tuple(names) for names in tool_turns)
        )

    def _status(self, agent: str, *, may_wait: bool) -> RunStatus:
        plan, roll = self.plan, self.rng.random()
        can_wait = (
            may_wait
            and agent in self.tools.approval
            and plan.turns_per_run >= 2
            and plan.calls_per_turn >= 1
        )
        if can_wait and roll < 0.5:
            return RunStatus.AWAITING_INPUT
        if roll > 0.95:
            return RunStatus.CANCELED
        if roll > 0.87:
            return RunStatus.FAILED
        return RunStatus.COMPLETED

    def question(self) -> str:
        rng = self.rng
        return rng.choice(QUESTIONS).format(
            a=rng.randrange(2, 50),
            b=rng.randrange(1, 20),
            c=rng.randrange(1, 20),
            key=rng.choice(MEMORY_KEYS),
            value=rng.choice(MEMORY_VALUES),
            tz=rng.choice(TIME_ZONES),
        )

    def model(self) -> str:
        return self.rng.choice(MODELS)

    def answer(self, question: str) -> str:
        return self.rng.choice(ANSWERS).format(q=question.capitalize())

    def partial(self, answer: str) -> str:
        """What the model had written of ``answer`` when it was stopped, streamed
        word by word as models stream."""
        words = re.findall(r"\S+\s*", answer)
        return "".join(words[: self.rng.randrange(1, len(words) + 1)]) if words else ""

    def run_error(self) -> tuple[str, str, bool]:
        return self.rng.choice(RUN_ERRORS)

    def cancel_reason(self) -> tuple[str, str]:
        """Why a run was stopped, and the kind of stopper who did."""
        return self.rng.choice(CANCEL_REASONS)

    # Timing

    def queued(self) -> dt.timedelta:
        return dt.timedelta(milliseconds=self.rng.uniform(5, 400))

    def latency_ms(self) -> int:
        return int(self.rng.uniform(300, 4000))

    def thinking(self) -> dt.timedelta:
        """How long a model had worked on a turn when its run stopped."""
        return dt.timedelta(milliseconds=self.rng.uniform(200, 5000))

    def backoff(self, attempt: int) -> float:
        """How long a retry of a model call waited: about a second, doubling."""
        return float(2 ** (attempt - 1) + self.rng.uniform(0, 1))

    def output_tokens(self) -> int:
        return int(self.rng.uniform(5, 60))

    def expiry(self) -> dt.timedelta | None:
        """Some facts are kept for a while only; a few of those have expired and
        wait for the next purge."""
        if self.rng.random() < 0.1:
            return dt.timedelta(days=self.rng.uniform(1, 30))
        return None
