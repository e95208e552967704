"""Agents kept as data, and the versions every run records.

Staff create and edit agents in the admin and through the API
(:func:`agent_save`); each change that alters the definition appends an immutable
:class:`~runs_app.models.AgentVersion`. A run records the version of its agent it
executes (:func:`version_for`): for an agent in code, the version is written the
first time a run executes that definition. :class:`DatabaseAgents` is the runtime's
source of the agents kept here.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import CharField, Max

from goaai import sql
from goaai.runtime import rt
from goaai.runtime.agents import Agent, check_agent, definition_fingerprint
from goaai.runtime.config import ConfigError, McpServer, has_references, parse_mcp_servers
from runs_app import selectors
from runs_app.models import AgentDefinition, AgentVersion

# The fields of an agent a person edits (the id is set once, when it is created).
EDITABLE_FIELDS = (
    "description",
    "model",
    "system_prompt",
    "toolsets",
    "delegates",
    "policy",
    "model_settings",
    "conversation",
    "mcp_servers",
)
# What an agent's MCP servers show of their env and headers to those who may not
# edit the agent: they often hold keys.
HIDDEN = "********"
# Attempts at numbering a new version while other processes number theirs.
_NUMBERING_ATTEMPTS = 5


class DatabaseAgents:
    """The agents of :class:`AgentDefinition`, each in its current version."""

    def get(self, agent_id: str) -> Agent | None:
        row = AgentDefinition.objects.filter(agent=agent_id).first()
        return None if row is None else Agent.from_dict(row.as_definition())

    def all(self) -> list[Agent]:
        return [Agent.from_dict(row.as_definition()) for row in AgentDefinition.objects.all()]


def check_definition(data: dict[str, Any]) -> Agent:
    """The agent ``data`` defines, checked as goaai checks agents at start (its
    model's profile, its toolsets and delegates, every setting); :class:`ConfigError`
    naming what is wrong. An id of an agent in code is refused: code comes first."""
    agent = Agent.from_dict(data)
    if rt.agents.in_code(agent.id):
        raise ConfigError(f"id: {agent.id!r} is an agent defined in code.")
    check_agent(agent, rt.agents, rt.config)
    return agent


def agent_save(agent_id: str, changes: dict[str, Any], *, by: int | None) -> AgentDefinition:
    """Create the agent ``agent_id`` or change it with ``changes`` (fields of
    :data:`EDITABLE_FIELDS`), checked; a change that alters the definition is a new
    version. :class:`ConfigError` when the result is not a valid agent."""
    with transaction.atomic():
        row = AgentDefinition.objects.select_for_update().filter(agent=agent_id).first()
        if row is None:
            row = AgentDefinition(agent=agent_id, created_by_id=by)
        old_servers = row.mcp_servers
        for name, value in changes.items():
            if name not in EDITABLE_FIELDS:
                raise ConfigError(f"{name}: not a field of an agent that can be changed.")
            setattr(row, name, value)
        row.mcp_servers = _keep_hidden(old_servers, _unwrapped(row.mcp_servers))
        # Without a person (``by`` None) it is goaai's own code that saves.
        check_commands(old_servers, row.mcp_servers, superuser=by is None or _is_superuser(by))
        agent = check_definition(row.as_definition())
        # Stored as the runtime reads it: defaults filled in, lists without repeats.
        normal = agent.as_dict()
        for name in EDITABLE_FIELDS:
            # An agent without MCP servers leaves them out of its definition.
            setattr(row, name, normal.get(name, {}))
        latest = (
            AgentVersion.objects.filter(agent=agent_id)
            .order_by("-number")
            .only("fingerprint")
            .first()
        )
        if latest is None or latest.fingerprint != agent.fingerprint():
            version = _append_version(agent, source="data", by=by)
            row.version = version.number
        row.updated_by_id = by
        row.save()
    return row


def _is_superuser(user_id: int | None) -> bool:
    return (
        user_id is not None
        and get_user_model().objects.filter(pk=user_id, is_superuser=True, is_active=True).exists()
    )


def redacted(definition: dict[str, Any], *, editor: bool = False) -> dict[str, Any]:
    """``definition`` with what its MCP servers may hold of secrets hidden: the
    values of env and headers from everyone; for those who may not edit the agent
    (not ``editor``) also its args, cwd, and its URL's credentials and query."""
    servers = definition.get("mcp_servers")
    if not isinstance(servers, dict) or not servers:
        return definition
    shown = {}
    for name, server in servers.items():
        server = dict(server) if isinstance(server, dict) else server
        if isinstance(server, dict):
            for secret in ("env", "headers"):
                if isinstance(server.get(secret), dict):
                    server[secret] = dict.fromkeys(server[secret], HIDDEN)
            if not editor:
                _hide_launch(server)
        shown[name] = server
    return {**definition, "mcp_servers": shown}


def _hide_launch(server: dict[str, Any]) -> None:
    """Hide the parts of a server's declaration that commonly carry keys
    (``--api-key=...``, ``?token=...``, a user's directory)."""
    if isinstance(server.get("args"), list) and server["args"]:
        server["args"] = [HIDDEN]
    if server.get("cwd") is not None:
        server["cwd"] = HIDDEN
    if isinstance(server.get("url"), str):
        server["url"] = _bare_url(server["url"])


def _bare_url(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    query = HIDDEN if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _unwrapped(servers: Any) -> Any:
    """``servers`` without the ``{"mcpServers": {...}}`` wrapper of MCP clients'
    files, which an agent's servers may be given in."""
    if isinstance(servers, dict) and set(servers) == {"mcpServers"}:
        return servers["mcpServers"]
    return servers


def _privileged(servers: Any) -> dict[str, McpServer]:
    """The servers of ``servers`` (parsed as the runtime reads them, wrapper and
    all) that only a superuser may declare: those goaai starts as a command, and
    those whose env or headers read goaai's environment (``${NAME}``)."""
    parsed = parse_mcp_servers(servers, where="mcp_servers")
    return {
        name: server
        for name, server in parsed.items()
        if server.transport == "stdio" or has_references(server)
    }


def _launch(server: McpServer) -> tuple[Any, ...]:
    """What decides what a server runs or what it is sent of goaai's environment."""
    return (server.command, server.args, server.env, server.cwd, server.url, server.headers)


def check_commands(old: Any, new: Any, *, superuser: bool) -> None:
    """:class:`ConfigError` unless each MCP server of ``new`` that goaai starts as
    a command (or that reads goaai's environment) is declared as it is in ``old``,
    or a superuser declares it: such a server runs a program on goaai's machines,
    or sends goaai's secrets wherever its URL points. Checked on the servers as
    the runtime parses them, so no form of the declaration slips past."""
    if superuser:
        return
    try:
        before = _privileged(old)
    except ConfigError:
        before = {}
    try:
        after = _privileged(new)
    except ConfigError as exc:
        raise ConfigError(f"mcp_servers: {exc}") from None
    if any(
        name not in before or _launch(before[name]) != _launch(server)
        for name, server in after.items()
    ):
        raise ConfigError(
            "mcp_servers: only a superuser may declare an MCP server that goaai starts "
            "as a command, or one whose env or headers read goaai's environment "
            "(${NAME}); declare it by url, or ask a superuser."
        )


def _keep_hidden(old: Any, new: Any) -> Any:
    """``new`` MCP servers, with each env or header value still shown hidden (as
    read back from the API) restored from ``old``."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return new
    kept = {}
    for name, server in new.items():
        before = old.get(name)
        if isinstance(server, dict) and isinstance(before, dict):
            server = dict(server)
            for secret in ("env", "headers"):
                values, previous = server.get(secret), before.get(secret)
                if isinstance(values, dict) and isinstance(previous, dict):
                    server[secret] = {
                        key: previous.get(key, value) if value == HIDDEN else value
                        for key, value in values.items()
                    }
        kept[name] = server
    return kept


_VERSION_KEY = ["id", "number"]
_LATEST_WITH_FINGERPRINT = sql.Prepared(
    lambda: selectors.agent_versions_like(
        sql.Slot("agent", CharField()), sql.Slot("fingerprint", CharField())
    ).values_list(*_VERSION_KEY)[:1]
)


class Versioned(NamedTuple):
    """An agent's definition as the runtime gives it (:meth:`Agent.as_dict`), with
    its agent's id and the fingerprint that tells one definition from another."""

    agent_id: str
    fingerprint: str
    definition: dict[str, Any]


def versioned(definition: dict[str, Any]) -> Versioned:
    # Its digest as it is: the agent is built (and the definition checked) only
    # for a version to record.
    return Versioned(str(definition["id"]), definition_fingerprint(definition), definition)


def version_for(definition: Versioned, *, latest: tuple[int, int] | None = None) -> AgentVersion:
    """The latest recorded version of an agent with exactly this definition, or a
    new one (for an agent in code run as it is now for the first time).
    ``latest``: that version's (id, number), when a read made beside others found
    it (:func:`runs_app.selectors.new_message_reads`); read here otherwise."""
    agent_id, fingerprint, _ = definition
    for attempt in range(_NUMBERING_ATTEMPTS):
        found = latest or _LATEST_WITH_FINGERPRINT.first(agent=agent_id, fingerprint=fingerprint)
        latest = None
        if found is not None:
            # The usual case, one read: where the agent is kept matters only to a
            # version not recorded yet. What a run records of it is its key and
            # number; the rest is read if asked for.
            return AgentVersion.from_db(DEFAULT_DB_ALIAS, _VERSION_KEY, found)
        try:
            agent = Agent.from_dict(definition.definition)
            with transaction.atomic():
                kept_as_data = AgentDefinition.objects.filter(agent=agent_id).exists()
                return _append_version(agent, source="data" if kept_as_data else "code", by=None)
        except IntegrityError:
            # Another process wrote the next number first; look again.
            if attempt == _NUMBERING_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _append_version(agent: Agent, *, source: str, by: int | None) -> AgentVersion:
    last = AgentVersion.objects.filter(agent=agent.id).aggregate(last=Max("number"))["last"]
    return AgentVersion.objects.create(
        agent=agent.id,
        number=(last or 0) + 1,
        source=source,
        definition=agent.as_dict(),
        fingerprint=agent.fingerprint(),
        created_by_id=by,
    )
