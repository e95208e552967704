"""An agent kept as data says what the chat suggests for it: ``conversation.suggestions``
in POST/PATCH /api/v1/agents/, checked like the rest of its definition."""

from __future__ import annotations

import pytest

from runs_app.models import AgentDefinition, AgentVersion

pytestmark = pytest.mark.django_db

AGENTS = "/api/v1/agents/"


def test_suggestions_are_part_of_the_definition_and_its_versions(staff_api, inline_runtime):
    body = {
        "id": "tutor",
        "description": "Quizzes you.",
        "conversation": {"suggestions": ["quiz me on capitals", "echo ready"]},
    }

    created = staff_api.post(AGENTS, body, format="json")

    assert created.status_code == 201, created.content
    assert created.json()["conversation"]["suggestions"] == ["quiz me on capitals", "echo ready"]
    version = AgentVersion.objects.get(agent="tutor")
    assert version.definition["conversation"]["suggestions"] == [
        "quiz me on capitals",
        "echo ready",
    ]

    changed = staff_api.patch(
        f"{AGENTS}tutor/", {"conversation": {"suggestions": ["echo hi"]}}, format="json"
    )
    assert changed.status_code == 200, changed.content
    assert staff_api.get(f"{AGENTS}tutor/").json()["conversation"]["suggestions"] == ["echo hi"]
    assert AgentVersion.objects.filter(agent="tutor").count() == 2


def test_bad_suggestions_are_a_400_naming_them(staff_api, inline_runtime):
    body = {"id": "tutor", "conversation": {"suggestions": ["fine", ""]}}

    response = staff_api.post(AGENTS, body, format="json")

    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["attr"] == "conversation"
    assert "conversation.suggestions" in error["detail"]
    assert not AgentDefinition.objects.exists()


def test_the_built_in_agents_list_their_suggestions(api, inline_runtime):
    agents = {agent["id"]: agent for agent in api.get(AGENTS).json()["results"]}
    assert "ask me for my name" in agents["assistant"]["conversation"]["suggestions"]
    assert agents["concierge"]["conversation"]["suggestions"]
