"""Agents: what model they use, what they may do, and how far.

Agents are declared in code (the ones shipped here, and dotted paths to
:class:`Agent` objects in the config's ``agents``) or kept as data by the
deployment (goaai's admin and API, where each change is a new version): an
:class:`AgentSource` the registry asks for ids it does not know. An agent is also a
plain dict (:meth:`Agent.as_dict`), which is how a run records the definition it ran
with, and how data agents are stored.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from goaai.runtime.config import (
    ConfigError,
    McpServer,
    RuntimeConfig,
    import_string,
    is_mcp_toolset,
    parse_mcp_servers,
    server_name,
)
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.errors import ToolsetUnavailable, UnknownAgent
from goaai.runtime.models import ModelSettings, check_model
from goaai.runtime.models.base import MODEL_SETTING_NAMES, REASONING_EFFORTS
from goaai.runtime.policy import Policy
from goaai.runtime.tools import TOOLSETS, tools_for
from goaai.runtime.tools.agents import agent_tool
from goaai.runtime.tools.base import Tool

if TYPE_CHECKING:
    from goaai.runtime.tools.mcp import McpClients


def _mcp() -> ModuleType:
    """The MCP client module, loaded the first time an agent's MCP server is used:
    the SDK also loads its server side (a web framework and an ASGI server), which
    nothing else of the runtime needs."""
    return importlib.import_module("goaai.runtime.tools.mcp")


def definition_fingerprint(definition: Mapping[str, Any]) -> str:
    """The fingerprint of an agent whose definition is ``definition`` as
    :meth:`Agent.as_dict` gives it (:meth:`Agent.fingerprint`)."""
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


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
    # How the model is called: temperature, output limit, reasoning effort, timeout
    # and the retry budget.
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    # How it holds a long conversation: context budget, tool results, memory shown,
    # parallel tool calls, and a message sent while a run is active.
    conversation: ConversationSettings = field(default_factory=ConversationSettings)
    # MCP servers of its own, which its toolsets name as "mcp:<name>" (besides those
    # every agent may name, declared in the config).
    mcp_servers: tuple[McpServer, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The definition as JSON holds it (what a run records it ran with)."""
        definition: dict[str, Any] = {
            "id": self.id,
            "description": self.description,
            "model": self.model,
            "system_prompt": self.system_prompt,
            "toolsets": list(self.toolsets),
            "delegates": list(self.delegates),
            "policy": self.policy.as_dict(),
            "model_settings": self.model_settings.as_dict(),
            "conversation": self.conversation.as_dict(),
        }
        # Only when it has some: the definitions (and fingerprints) of agents
        # without stay what they were.
        if self.mcp_servers:
            definition["mcp_servers"] = {s.name: s.as_dict() for s in self.mcp_servers}
        return definition

    def mcp_server(self, name: str) -> McpServer | None:
        """The agent's own MCP server ``name``, if it declares one."""
        return next((s for s in self.mcp_servers if s.name == name), None)

    def fingerprint(self) -> str:
        """A digest of the definition: equal for equal definitions."""
        return definition_fingerprint(self.as_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Agent:
        """An agent from its definition; :class:`ConfigError` naming the first field
        that is wrong (the toolsets must exist; models and delegates are checked
        against a config by :func:`check_agent`)."""
        if not isinstance(data, Mapping):
            raise ConfigError("An agent definition must be an object.")
        unknown = sorted(set(data) - _DEFINITION_FIELDS)
        if unknown:
            raise ConfigError(f"Unknown agent field {', '.join(map(repr, unknown))}.")
        agent_id = data.get("id")
        if not isinstance(agent_id, str) or not _valid_id(agent_id):
            raise ConfigError(
                "id: letters, digits, '-' and '_', starting with a letter or digit "
                "(at most 100 characters)."
            )
        return cls(
            id=agent_id,
            description=_text(data, "description"),
            model=_text(data, "model", "scripted") or "scripted",
            system_prompt=_text(data, "system_prompt"),
            toolsets=_toolsets(data.get("toolsets", [])),
            delegates=_names(data.get("delegates", []), "delegates"),
            policy=_policy(data.get("policy", {})),
            model_settings=_model_settings(data.get("model_settings", {})),
            conversation=ConversationSettings.from_dict(data.get("conversation", {})),
            mcp_servers=_mcp_servers(data.get("mcp_servers")),
        )


_DEFINITION_FIELDS = {
    "id",
    "description",
    "model",
    "system_prompt",
    "toolsets",
    "delegates",
    "policy",
    "model_settings",
    "conversation",
    "mcp_servers",
}
_MAX_PROMPT = 100_000


def _valid_id(value: str) -> bool:
    return (
        0 < len(value) <= 100
        and value[0].isascii()
        and value[0].isalnum()
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in value)
    )


def _text(data: Mapping[str, Any], name: str, default: str = "") -> str:
    value = data.get(name, default)
    if not isinstance(value, str):
        raise ConfigError(f"{name}: must be text.")
    if len(value) > _MAX_PROMPT:
        raise ConfigError(f"{name}: at most {_MAX_PROMPT} characters.")
    return value


def _names(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name}: must be a list of names.")
    return tuple(dict.fromkeys(value))


def _toolsets(value: Any) -> tuple[str, ...]:
    names = _names(value, "toolsets")
    # An MCP server's toolset is checked against the servers by check_agent.
    unknown = [name for name in names if name not in TOOLSETS and not is_mcp_toolset(name)]
    if unknown:
        raise ConfigError(
            f"toolsets: no toolset {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(TOOLSETS))}, and mcp:<server> for an MCP server."
        )
    return names


def _mcp_servers(value: Any) -> tuple[McpServer, ...]:
    try:
        return tuple(parse_mcp_servers(value or {}, where="MCP servers").values())
    except ConfigError as exc:
        raise ConfigError(f"mcp_servers: {exc}") from None


# Each cap of a policy: (kind, the smallest value allowed).
_POLICY_CAPS: dict[str, tuple[type, float]] = {
    "max_turns": (int, 1),
    "max_tool_calls": (int, 0),
    "max_consecutive_tool_failures": (int, 1),
    "time_budget_seconds": (float, 1),
}
_POLICY_SETS = ("approval_required", "blocked_toolsets", "blocked_tools")


def _policy(value: Any) -> Policy:
    if not isinstance(value, Mapping):
        raise ConfigError("policy: must be an object.")
    unknown = sorted(set(value) - set(_POLICY_CAPS) - set(_POLICY_SETS))
    if unknown:
        raise ConfigError(f"policy: unknown cap {', '.join(map(repr, unknown))}.")
    for name, (kind, least) in _POLICY_CAPS.items():
        if name in value and not _number(value[name], kind, least):
            raise ConfigError(f"policy.{name}: a number of at least {least:g}.")
    for name in _POLICY_SETS:
        if name in value:
            _names(value[name], f"policy.{name}")
    return Policy.from_dict(dict(value))


def _model_settings(value: Any) -> ModelSettings:
    if not isinstance(value, Mapping):
        raise ConfigError("model_settings: must be an object.")
    unknown = sorted(set(value) - set(MODEL_SETTING_NAMES))
    if unknown:
        raise ConfigError(f"model_settings: unknown setting {', '.join(map(repr, unknown))}.")
    checks: dict[str, tuple[bool, str]] = {
        "temperature": (_number(value.get("temperature"), float, 0, 2), "between 0 and 2"),
        "max_output_tokens": (
            _number(value.get("max_output_tokens"), int, 1),
            "a whole number of at least 1",
        ),
        "reasoning_effort": (
            value.get("reasoning_effort") in (None, *REASONING_EFFORTS),
            f"one of {', '.join(REASONING_EFFORTS)}",
        ),
        "timeout_seconds": (_number(value.get("timeout_seconds"), float, 1), "at least 1 second"),
        "retry_attempts": (
            _number(value.get("retry_attempts"), int, 1, 20),
            "a whole number from 1 to 20",
        ),
        "retry_seconds": (_number(value.get("retry_seconds"), float, 0, 3600), "0 to 3600 seconds"),
    }
    for name, (good, meaning) in checks.items():
        if name in value and value[name] is not None and not good:
            raise ConfigError(f"model_settings.{name}: {meaning}.")
    return ModelSettings.from_dict({k: v for k, v in value.items() if v is not None})


def _number(value: Any, kind: type, least: float, most: float | None = None) -> bool:
    """Whether ``value`` is absent or a number of ``kind`` within the bounds."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind is int and not float(value).is_integer():
        return False
    return value >= least and (most is None or value <= most)


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
    conversation=ConversationSettings(
        suggestions=(
            "remember my favourite colour is green",
            "what is my favourite colour?",
            "calculate 2 * (3 + 4)",
            "what time is it in Europe/Rome?",
            "ask me for my name",
        )
    ),
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
    conversation=ConversationSettings(
        suggestions=(
            "what time is it in Asia/Tokyo?",
            "ask the assistant to calculate 12 * 7",
            "ask the assistant to remember my favourite colour is blue",
        )
    ),
)


class AgentSource(Protocol):
    """Agents kept as data by the deployment, in their current version."""

    def get(self, agent_id: str) -> Agent | None: ...

    def all(self) -> list[Agent]: ...


class AgentRegistry:
    """The agents goaai knows, by id: those in code, then those of ``source``."""

    def __init__(
        self,
        agents: list[Agent] | None = None,
        source: AgentSource | None = None,
        *,
        mcp_servers: Mapping[str, McpServer] | None = None,
        mcp_clients: McpClients | None = None,
    ) -> None:
        self._agents: dict[str, Agent] = {}
        self.source = source
        # The MCP servers every agent may name (an agent's own come first).
        self.mcp_servers: Mapping[str, McpServer] = mcp_servers or {}
        self.mcp_clients = mcp_clients
        for agent in agents or []:
            self.register(agent)

    def register(self, agent: Agent) -> None:
        self._agents[agent.id] = agent

    def in_code(self, agent_id: str) -> bool:
        return agent_id in self._agents

    def get(self, agent_id: str) -> Agent:
        agent = self._agents.get(agent_id)
        if agent is None and self.source is not None:
            agent = self.source.get(agent_id)
        if agent is None:
            raise UnknownAgent(f"No agent named {agent_id!r}.")
        return agent

    def __contains__(self, agent_id: object) -> bool:
        if not isinstance(agent_id, str):
            return False
        return agent_id in self._agents or (
            self.source is not None and self.source.get(agent_id) is not None
        )

    def all(self) -> list[Agent]:
        agents = dict(self._agents)
        for agent in self.source.all() if self.source is not None else ():
            agents.setdefault(agent.id, agent)
        return sorted(agents.values(), key=lambda agent: agent.id)

    def tools_of(
        self,
        agent: Agent,
        *,
        unavailable: dict[str, str] | None = None,
        within: float | None = None,
    ) -> dict[str, Tool]:
        """Every tool ``agent`` declares: its toolsets' tools (an MCP server's as it
        lists them) and ``ask_<id>`` for each agent it may call, by name (before a
        run's policy blocks any).

        :class:`ToolsetUnavailable` when an MCP server cannot be reached, or two
        toolsets offer a tool of the same name; with ``unavailable``, that toolset
        is left out and what is wrong is noted there by toolset instead. With
        ``within``, each MCP server is waited for at most that long (one still
        starting is noted as such).
        """
        tools = tools_for(tuple(name for name in agent.toolsets if not is_mcp_toolset(name)))
        for delegate in agent.delegates:
            delegated = agent_tool(self.get(delegate))
            tools[delegated.name] = delegated
        for toolset in agent.toolsets:
            if not is_mcp_toolset(toolset):
                continue
            try:
                tools.update(self._mcp_tools(agent, toolset, tools, within))
            except ToolsetUnavailable as exc:
                if unavailable is None:
                    raise
                unavailable[toolset] = str(exc)
        return tools

    def mcp_server(self, agent: Agent, name: str) -> McpServer | None:
        """The MCP server ``name`` as ``agent`` sees it: its own, or the config's."""
        return agent.mcp_server(name) or self.mcp_servers.get(name)

    def start_mcp_servers(self, agents: Iterable[Agent]) -> None:
        """Start the MCP servers ``agents`` name, all at once and without waiting,
        so that listing their tools next waits for the slowest, not for the sum."""
        servers = {
            server
            for agent in agents
            for toolset in agent.toolsets
            if is_mcp_toolset(toolset)
            and (server := self.mcp_server(agent, server_name(toolset))) is not None
        }
        if servers:
            clients = self.mcp_clients or _mcp().MCP_CLIENTS
            clients.start(sorted(servers, key=lambda server: server.name))

    def _mcp_tools(
        self, agent: Agent, toolset: str, taken: dict[str, Tool], within: float | None
    ) -> dict[str, Tool]:
        name = server_name(toolset)
        server = self.mcp_server(agent, name)
        if server is None:
            raise ToolsetUnavailable(f"No MCP server {name!r} is declared (toolset {toolset!r}).")
        found: dict[str, Tool] = _mcp().mcp_tools(server, self.mcp_clients, within=within)
        # A tool the model calls by a name two toolsets offer would be a guess.
        clash = sorted(set(found) & set(taken))
        if clash:
            raise ToolsetUnavailable(
                f"MCP server {name!r} offers {', '.join(map(repr, clash))}, a name another "
                f"toolset of agent {agent.id!r} has; leave it out with the server's 'tools' list."
            )
        return found


def default_registry(
    extra: list[str] | None = None,
    source: AgentSource | None = None,
    *,
    mcp_servers: Mapping[str, McpServer] | None = None,
) -> AgentRegistry:
    """The shipped agents plus those named by dotted path in ``extra``, and those
    of ``source``, with the MCP servers every agent may name; :class:`ConfigError`
    naming the path that is not an agent."""
    registry = AgentRegistry([ASSISTANT, CONCIERGE], source, mcp_servers=mcp_servers)
    for path in extra or []:
        try:
            agent = import_string(path)
        except ImportError as exc:
            raise ConfigError(f"Agent {path!r} cannot be imported: {exc}") from exc
        if not isinstance(agent, Agent):
            raise ConfigError(f"Agent {path!r} is a {type(agent).__name__}, not a goaai Agent.")
        registry.register(agent)
    return registry


def check_agent(agent: Agent, registry: AgentRegistry, config: RuntimeConfig) -> None:
    """:class:`ConfigError` naming what is wrong unless ``agent``'s model is one the
    config can reach and every agent it delegates to is known."""
    try:
        check_model(agent.model, config.profiles)
    except (UnknownAgent, ImportError) as exc:
        raise ConfigError(f"Agent {agent.id!r}: {exc}") from exc
    for delegate in agent.delegates:
        if delegate not in registry:
            raise ConfigError(f"Agent {agent.id!r} delegates to unknown agent {delegate!r}.")
    for toolset in agent.toolsets:
        name = server_name(toolset)
        if is_mcp_toolset(toolset) and not (agent.mcp_server(name) or name in config.mcp_servers):
            declared = sorted({s.name for s in agent.mcp_servers} | set(config.mcp_servers))
            raise ConfigError(
                f"Agent {agent.id!r}: toolsets: no MCP server {name!r} for {toolset!r}; "
                f"declared: {', '.join(declared) or 'none'}."
            )


def check_agents(config: RuntimeConfig) -> AgentRegistry:
    """The config's agents, each checked as :func:`check_agent` does;
    :class:`ConfigError` naming the first bad agent."""
    registry = default_registry(list(config.agents), mcp_servers=config.mcp_servers)
    for agent in registry.all():
        check_agent(agent, registry, config)
    return registry
