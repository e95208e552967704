"""Agents are declared in code: what model they use, what they may do, and how far.

A deployment may add agents: its config's ``agents`` lists dotted paths to :class:`Agent`
objects, which join the ones shipped here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from goaai.runtime.config import import_string
from goaai.runtime.errors import UnknownAgent
from goaai.runtime.policy import Policy
from goaai.runtime.tools import tools_for
from goaai.runtime.tools.agents import agent_tool
from goaai.runtime.tools.base import Tool


@dataclass(frozen=True)
class Agent:
    id: str
    description: str
    model: str = "scripted"
    system_prompt: str = ""
    toolsets: tuple[str, ...] = ()
    policy: Policy = field(default_factory=Policy)
    # Other agents this one may call as tools (each becomes a tool ``ask_<id>``).
    delegates: tuple[str, ...] = ()


ASSISTANT = Agent(
    id="assistant",
    description=(
        "A general assistant that remembers facts about you, does arithmetic, "
        "tells the time and repeats text back."
    ),
    model="scripted",
    system_prompt=(
        "You are goaai's assistant. Use the memory tools to remember and recall facts "
        "about the user, the calculator for arithmetic and the clock for the time. "
        "Answer briefly."
    ),
    toolsets=("memory", "clock", "calculator", "text", "interaction"),
)

CONCIERGE = Agent(
    id="concierge",
    description=(
        "A front desk that tells the time itself and hands everything else to the "
        "assistant agent, reporting its answer."
    ),
    model="scripted",
    system_prompt=(
        "You are goaai's concierge. Tell the time with the clock; for anything else, "
        "ask the assistant agent and report what it says."
    ),
    toolsets=("clock",),
    delegates=("assistant",),
)


class AgentRegistry:
    """The agents goaai knows, by id."""

    def __init__(self, agents: list[Agent] | None = None) -> None:
        self._agents: dict[str, Agent] = {}
        for agent in agents or []:
            self.register(agent)

    def register(self, agent: Agent) -> None:
        self._agents[agent.id] = agent

    def get(self, agent_id: str) -> Agent:
        try:
            return self._agents[agent_id]
        except KeyError:
            raise UnknownAgent(f"No agent named {agent_id!r}.") from None

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._agents

    def all(self) -> list[Agent]:
        return sorted(self._agents.values(), key=lambda agent: agent.id)

    def tools_of(self, agent: Agent) -> dict[str, Tool]:
        """Every tool ``agent`` declares: its toolsets' tools and ``ask_<id>`` for each
        agent it may call, by name (before a run's policy blocks any)."""
        tools = tools_for(agent.toolsets)
        for delegate in agent.delegates:
            delegated = agent_tool(self.get(delegate))
            tools[delegated.name] = delegated
        return tools


def default_registry(extra: list[str] | None = None) -> AgentRegistry:
    """The shipped agents plus those named by dotted path in ``extra``."""
    registry = AgentRegistry([ASSISTANT, CONCIERGE])
    for path in extra or []:
        agent = import_string(path)
        if not isinstance(agent, Agent):
            raise TypeError(f"{path} is not a goaai Agent")
        registry.register(agent)
    return registry
