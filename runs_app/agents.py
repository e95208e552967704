"""Agents kept as data, and the versions every run records.

Staff create and edit agents in the admin and through the API
(:func:`agent_save`); each change that alters the definition appends an immutable
:class:`~runs_app.models.AgentVersion`. A run records the version of its agent it
executes (:func:`version_for`): for an agent in code, the version is written the
first time a run executes that definition. :class:`DatabaseAgents` is the runtime's
source of the agents kept here.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from goaai.runtime import rt
from goaai.runtime.agents import Agent, check_agent
from goaai.runtime.config import ConfigError
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
)
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
        for name, value in changes.items():
            if name not in EDITABLE_FIELDS:
                raise ConfigError(f"{name}: not a field of an agent that can be changed.")
            setattr(row, name, value)
        agent = check_definition(row.as_definition())
        # Stored as the runtime reads it: defaults filled in, lists without repeats.
        normal = agent.as_dict()
        for name in EDITABLE_FIELDS:
            setattr(row, name, normal[name])
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


def version_for(definition: dict[str, Any]) -> AgentVersion:
    """The latest recorded version of an agent with exactly this definition, or a
    new one (for an agent in code run as it is now for the first time)."""
    agent = Agent.from_dict(definition)
    source = "data" if AgentDefinition.objects.filter(agent=agent.id).exists() else "code"
    fingerprint = agent.fingerprint()
    for attempt in range(_NUMBERING_ATTEMPTS):
        found = (
            AgentVersion.objects.filter(agent=agent.id, fingerprint=fingerprint)
            .order_by("-number")
            .first()
        )
        if found is not None:
            return found
        try:
            with transaction.atomic():
                return _append_version(agent, source=source, by=None)
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
