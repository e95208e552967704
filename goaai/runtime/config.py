"""The runtime's settings, as one plain object.

The runtime reads no framework's settings: a deployment builds a
:class:`RuntimeConfig` once (goaai's Django project does it from its settings, see
``goaai.runtime_settings``) and hands it to the facade. The defaults are what an
embedded runtime needs: worker threads, the shipped agents, the built-in model
profiles without keys.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from goaai.runtime.policy import LabelRule

# The protocols a model profile may speak: OpenAI's Chat Completions (OpenAI itself,
# Ollama, vLLM, llama.cpp and most self-hosted servers), Anthropic's Messages API, and
# OpenAI's Responses API (``openai-responses``: the one where OpenAI's reasoning models
# keep their reasoning from one tool call to the next).
PROFILE_KINDS = ("openai", "anthropic", "openai-responses")
# The kinds whose servers answer OpenAI's embeddings endpoint.
EMBEDDING_PROFILE_KINDS = ("openai", "openai-responses")


class ConfigError(ValueError):
    """A setting the runtime cannot work with; the message names it."""


@dataclass(frozen=True)
class ModelProfile:
    """One named connection to a model provider; an agent's model is
    ``<profile>:<model>``.

    ``api_key_env`` names the environment variable that holds the key (the key itself
    is read when the config is built, and never shown). ``max_concurrency`` and
    ``requests_per_minute`` limit what every server and worker together send to it
    (through Redis when the deployment has one); ``None`` is no limit.
    ``context_window`` is how many tokens the models it serves take in one request
    (an agent's context budget when the agent sets none; see goaai.runtime.context).
    """

    name: str
    kind: str
    base_url: str | None = None
    api_key_env: str = ""
    api_key: str = field(default="", repr=False)
    timeout_seconds: float = 60.0
    connect_timeout_seconds: float = 10.0
    # Extra HTTP headers sent with every request, as (name, value) pairs.
    headers: tuple[tuple[str, str], ...] = ()
    max_concurrency: int | None = None
    requests_per_minute: int | None = None
    context_window: int | None = None

    @classmethod
    def from_dict(
        cls, name: str, data: Mapping[str, Any], environ: Mapping[str, str]
    ) -> ModelProfile:
        """A profile from its JSON; :class:`ConfigError` naming the profile if it is
        not one."""
        where = f"Model profile {name!r}"
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected an object, got {type(data).__name__}.")
        unknown = sorted(set(data) - _PROFILE_KEYS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown setting {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(_PROFILE_KEYS))}."
            )
        kind = data.get("kind")
        if kind not in PROFILE_KINDS:
            raise ConfigError(
                f"{where}: kind must be one of {', '.join(PROFILE_KINDS)}, not {kind!r}."
            )
        base_url = data.get("base_url") or None
        if base_url is not None and (
            not isinstance(base_url, str) or not base_url.startswith(("http://", "https://"))
        ):
            raise ConfigError(f"{where}: base_url must be an http(s) URL, not {base_url!r}.")
        key_env = data.get("api_key_env", "")
        if not isinstance(key_env, str):
            raise ConfigError(f"{where}: api_key_env must be the name of a variable.")
        headers = data.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ConfigError(f"{where}: headers must map header names to strings.")
        return cls(
            name=name,
            kind=kind,
            base_url=base_url,
            api_key_env=key_env,
            api_key=environ.get(key_env, "") if key_env else "",
            timeout_seconds=_number(where, data, "timeout_seconds", 60.0),
            connect_timeout_seconds=_number(where, data, "connect_timeout_seconds", 10.0),
            headers=tuple(sorted(headers.items())),
            max_concurrency=_limit(where, data, "max_concurrency"),
            requests_per_minute=_limit(where, data, "requests_per_minute"),
            context_window=_limit(where, data, "context_window"),
        )


_PROFILE_KEYS = {
    "kind",
    "base_url",
    "api_key_env",
    "timeout_seconds",
    "connect_timeout_seconds",
    "headers",
    "max_concurrency",
    "requests_per_minute",
    "context_window",
}


def _number(where: str, data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where}: {key} must be a positive number of seconds, not {value!r}.")
    return float(value)


def _limit(where: str, data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {key} must be a whole number of at least 1, not {value!r}.")
    return int(value)


def builtin_profiles(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The profiles every deployment has, from the variables goaai always read:
    ``openai`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``) and ``anthropic``
    (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``)."""
    return {
        "openai": {
            "kind": "openai",
            "api_key_env": "OPENAI_API_KEY",
            "base_url": environ.get("OPENAI_BASE_URL") or None,
        },
        "anthropic": {
            "kind": "anthropic",
            "api_key_env": "ANTHROPIC_API_KEY",
            "base_url": environ.get("ANTHROPIC_BASE_URL") or None,
        },
    }


def parse_profiles(
    declared: Mapping[str, Any] | None, environ: Mapping[str, str]
) -> Mapping[str, ModelProfile]:
    """The built-in profiles, replaced or joined by ``declared`` (as
    ``GOAAI_MODEL_PROFILES`` holds them)."""
    if declared is not None and not isinstance(declared, Mapping):
        raise ConfigError("Model profiles must be an object of profile name to settings.")
    profiles: dict[str, Any] = {**builtin_profiles(environ), **(declared or {})}
    parsed = {}
    for name, data in profiles.items():
        if not isinstance(name, str) or not _PROFILE_NAME.fullmatch(name) or name in _RESERVED:
            raise ConfigError(
                f"Model profile name {name!r}: use letters, digits, '-' and '_' "
                f"(and not {' or '.join(sorted(_RESERVED))})."
            )
        parsed[name] = ModelProfile.from_dict(name, data, environ)
    return MappingProxyType(parsed)


_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# Model names that are not a profile's: the offline model and a client class by path.
_RESERVED = frozenset({"scripted", "python"})


def _builtin_only() -> Mapping[str, ModelProfile]:
    return parse_profiles(None, {})


# The ways goaai reaches an MCP server: a command it starts and talks to over
# stdin/stdout, or a URL speaking MCP's streamable HTTP.
MCP_TRANSPORTS = ("stdio", "http")
# The toolset an agent names an MCP server by: "mcp:<server name>".
MCP_TOOLSET_PREFIX = "mcp:"


def is_mcp_toolset(name: str) -> bool:
    return name.startswith(MCP_TOOLSET_PREFIX)


def server_name(toolset: str) -> str:
    """The server a toolset ``mcp:<name>`` names."""
    return toolset[len(MCP_TOOLSET_PREFIX) :]


@dataclass(frozen=True)
class McpServer:
    """One MCP server whose tools agents may use, as toolset ``mcp:<name>``.

    Declared in the JSON shape MCP clients share: ``command``, ``args``, ``env``
    and ``cwd`` for a server goaai starts (stdio), or ``url`` and ``headers`` for
    one it calls over streamable HTTP. Its tools need a person's approval for every
    call unless the server is ``trusted``. ``timeout_seconds`` bounds each call,
    ``startup_seconds`` starting the server and listing its tools (each at most
    :data:`MCP_MAX_SECONDS`); ``tools``, when given, is the only tools of the
    server agents are offered. Values of ``env`` and ``headers`` may name
    variables of goaai's environment as ``${NAME}``, read when the server is
    started or connected to (the declaration keeps the name, not the value).
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    cwd: str | None = None
    url: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    trusted: bool = False
    timeout_seconds: float = 30.0
    startup_seconds: float = 30.0
    tools: tuple[str, ...] | None = None

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> McpServer:
        """A server from its JSON; :class:`ConfigError` naming the server if it is
        not one."""
        where = f"MCP server {name!r}"
        if not isinstance(name, str) or not _PROFILE_NAME.fullmatch(name):
            raise ConfigError(f"{where}: a name of letters, digits, '-' and '_'.")
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected an object, got {type(data).__name__}.")
        unknown = sorted(set(data) - _MCP_KEYS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown setting {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(_MCP_KEYS))}."
            )
        command, url = _mcp_transport(where, data)
        cwd = data.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigError(f"{where}: cwd must be a directory path.")
        trusted = data.get("trusted", False)
        if not isinstance(trusted, bool):
            raise ConfigError(f"{where}: trusted must be true or false.")
        return cls(
            name=name,
            command=command,
            args=_strings(where, data, "args"),
            env=_string_map(where, data, "env"),
            cwd=cwd,
            url=url,
            headers=_string_map(where, data, "headers"),
            trusted=trusted,
            timeout_seconds=_mcp_seconds(where, data, "timeout_seconds"),
            startup_seconds=_mcp_seconds(where, data, "startup_seconds"),
            tools=_strings(where, data, "tools") if data.get("tools") is not None else None,
        )

    def as_dict(self) -> dict[str, Any]:
        """The server as JSON declares it (settings that differ from the default)."""
        data: dict[str, Any] = (
            {"url": self.url, "headers": dict(self.headers)}
            if self.url
            else {"command": self.command, "args": list(self.args), "env": dict(self.env)}
        )
        if self.cwd is not None:
            data["cwd"] = self.cwd
        if self.trusted:
            data["trusted"] = True
        if self.timeout_seconds != 30.0:
            data["timeout_seconds"] = self.timeout_seconds
        if self.startup_seconds != 30.0:
            data["startup_seconds"] = self.startup_seconds
        if self.tools is not None:
            data["tools"] = list(self.tools)
        return data


def _mcp_transport(where: str, data: Mapping[str, Any]) -> tuple[str, str]:
    """The command or the URL of a server's JSON (exactly one of them), checked."""
    command, url = data.get("command") or "", data.get("url") or ""
    if bool(command) == bool(url):
        raise ConfigError(
            f"{where}: give either a command (a server goaai starts) or a url "
            "(a streamable HTTP server), not " + ("both." if command else "neither.")
        )
    kind = data.get("type", "http" if url else "stdio")
    if kind not in (*MCP_TRANSPORTS, "streamable-http", "streamableHttp") or (
        (kind == "stdio") != bool(command)
    ):
        raise ConfigError(
            f"{where}: type {kind!r} does not fit a {'command' if command else 'url'}."
        )
    if command and not isinstance(command, str):
        raise ConfigError(f"{where}: command must be text.")
    if url and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise ConfigError(f"{where}: url must be an http(s) URL, not {url!r}.")
    if url and ({"args", "env", "cwd"} & set(data)):
        raise ConfigError(f"{where}: args, env and cwd belong to a server goaai starts.")
    if command and "headers" in data:
        raise ConfigError(f"{where}: headers belong to a server reached by url.")
    return command, url


# The longest an MCP server's start or call may be given: a bound the clients'
# waits can always represent.
MCP_MAX_SECONDS = 3600.0


def _mcp_seconds(where: str, data: Mapping[str, Any], key: str) -> float:
    value = data.get(key, 30.0)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MCP_MAX_SECONDS
    ):
        raise ConfigError(
            f"{where}: {key} must be a number of seconds above 0 and at most "
            f"{MCP_MAX_SECONDS:g}, not {value!r}."
        )
    return float(value)


def has_references(server: McpServer) -> bool:
    """Whether ``server``'s env or headers name variables of goaai's environment
    (``${NAME}``), which are read when it is started or connected to."""
    return any("${" in value for _, value in (*server.env, *server.headers))


_MCP_KEYS = {
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "trusted",
    "timeout_seconds",
    "startup_seconds",
    "tools",
}


def _strings(where: str, data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of strings.")
    return tuple(value)


def _string_map(where: str, data: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{where}: {key} must map names to strings.")
    return tuple(sorted(value.items()))


def parse_mcp_servers(declared: Any, *, where: str = "MCP servers") -> Mapping[str, McpServer]:
    """The servers of ``declared`` (as ``GOAAI_MCP_SERVERS`` or an agent's
    ``mcp_servers`` hold them: an object of name to settings, or one with the
    ``mcpServers`` key MCP clients' files have)."""
    if declared is None:
        return MappingProxyType({})
    if not isinstance(declared, Mapping):
        raise ConfigError(f"{where} must be an object of server name to settings.")
    if set(declared) == {"mcpServers"}:
        return parse_mcp_servers(declared["mcpServers"], where=where)
    return MappingProxyType(
        {name: McpServer.from_dict(name, data) for name, data in declared.items()}
    )


def _no_mcp_servers() -> Mapping[str, McpServer]:
    return MappingProxyType({})


@dataclass(frozen=True)
class RuntimeConfig:
    # "thread" (a pool of worker threads in this process), "inline" (the caller's
    # thread) or the name of an executor the deployment installed ("celery").
    executor: str = "thread"
    # Each thread holds a run for as long as it executes, most of it waiting on the
    # model's network answer: sized for waiting, not for the cores.
    executor_threads: int = 64
    # Extra agents, as dotted paths to ``goaai.runtime.agents.Agent`` objects.
    agents: tuple[str, ...] = ()
    # How long ``rt.run()`` waits for a run before it stops waiting (the run goes on).
    run_wait_seconds: float = 300
    # A worker's lease on the run it executes (renewed every third of it).
    run_lease_seconds: float = 60
    # How often a process looks for runs whose worker died (0: never).
    reaper_interval: float = 15
    label_rules: tuple[LabelRule, ...] = ()
    profiles: Mapping[str, ModelProfile] = field(default_factory=_builtin_only)
    # The embedding model that ranks memory by meaning, "<profile>:<model>" of a
    # profile speaking OpenAI's API; empty: memory is ranked by full text alone.
    memory_embeddings: str = ""
    # MCP servers every agent may name in its toolsets as "mcp:<name>".
    mcp_servers: Mapping[str, McpServer] = field(default_factory=_no_mcp_servers)

    def __post_init__(self) -> None:
        self.embeddings_model()

    @classmethod
    def from_values(
        cls,
        *,
        label_rules: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
        profiles: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        agents: list[str] | tuple[str, ...] = (),
        mcp_servers: Mapping[str, Any] | None = None,
        **values: Any,
    ) -> RuntimeConfig:
        """A config from plain values (as settings or a JSON file hold them); model
        profiles' keys are read from ``environ`` (the process's environment)."""
        return cls(
            label_rules=tuple(LabelRule.from_dict(rule) for rule in label_rules),
            profiles=parse_profiles(profiles, os.environ if environ is None else environ),
            agents=tuple(agents),
            mcp_servers=parse_mcp_servers(mcp_servers, where="GOAAI_MCP_SERVERS"),
            **values,
        )

    def profile(self, name: str) -> ModelProfile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError(f"No model profile {name!r}; known: {known}.") from None

    def embeddings_model(self) -> tuple[ModelProfile, str] | None:
        """The profile and model of :attr:`memory_embeddings`, ``None`` when unset;
        :class:`ConfigError` when it names no profile, or one that does not speak
        OpenAI's API (the only one with an embeddings endpoint)."""
        if not self.memory_embeddings:
            return None
        name, _, model = self.memory_embeddings.partition(":")
        if not name or not model:
            raise ConfigError(
                f"GOAAI_MEMORY_EMBEDDINGS must be '<profile>:<model>', "
                f"not {self.memory_embeddings!r}."
            )
        profile = self.profile(name)
        if profile.kind not in EMBEDDING_PROFILE_KINDS:
            raise ConfigError(
                f"GOAAI_MEMORY_EMBEDDINGS: model profile {name!r} is of kind {profile.kind!r}; "
                f"embeddings need one of {', '.join(EMBEDDING_PROFILE_KINDS)}."
            )
        return profile, model


def import_string(dotted_path: str) -> Any:
    """The object a dotted path ``package.module.name`` names."""
    module_path, _, name = dotted_path.rpartition(".")
    if not module_path:
        raise ImportError(f"{dotted_path!r} is not a dotted path to an object.")
    module = importlib.import_module(module_path)
    try:
        return getattr(module, name)
    except AttributeError as exc:
        raise ImportError(f"Module {module_path!r} has no {name!r}.") from exc
