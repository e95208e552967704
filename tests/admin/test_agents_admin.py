"""Agents kept as data in the admin: staff create and edit them, each change a new
version; versions are read-only."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from goaai.runtime import rt
from runs_app.models import AgentDefinition, AgentVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    rt.reset()
    yield client
    rt.reset()


def _form(**fields: object) -> dict[str, object]:
    form: dict[str, object] = {
        "agent": "helpdesk",
        "description": "Answers questions about the office.",
        "model": "scripted",
        "system_prompt": "You answer office questions.",
        "toolsets": json.dumps(["clock"]),
        "delegates": json.dumps([]),
        "policy": json.dumps({"max_turns": 4}),
        "model_settings": json.dumps({"temperature": 0.3}),
    }
    form.update(fields)
    return form


def test_staff_create_an_agent_in_the_admin_and_each_change_is_a_version(operator, staff):
    created = operator.post(reverse("admin:runs_app_agentdefinition_add"), _form())
    assert created.status_code == 302, created.content
    agent = AgentDefinition.objects.get(agent="helpdesk")
    assert (agent.version, agent.created_by_id) == (1, staff.pk)
    assert rt.agents.get("helpdesk").system_prompt == "You answer office questions."

    change = reverse("admin:runs_app_agentdefinition_change", args=[agent.pk])
    changed = operator.post(change, _form(system_prompt="You answer briefly."))
    assert changed.status_code == 302, changed.content

    agent.refresh_from_db()
    assert agent.version == 2
    versions = AgentVersion.objects.filter(agent="helpdesk").order_by("number")
    assert [v.definition["system_prompt"] for v in versions] == [
        "You answer office questions.",
        "You answer briefly.",
    ]
    assert {v.source for v in versions} == {"data"}
    # The versions page lists them and offers no way to change one.
    listing = operator.get(reverse("admin:runs_app_agentversion_changelist") + "?agent=helpdesk")
    assert listing.status_code == 200
    assert b"helpdesk" in listing.content
    assert operator.get(reverse("admin:runs_app_agentversion_add")).status_code == 403


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"model": "nowhere:x"}, "No model client for"),
        ({"toolsets": json.dumps(["shell"])}, "no toolset"),
        ({"model_settings": json.dumps({"temperature": 9})}, "between 0 and 2"),
        ({"agent": "assistant"}, "exists"),
    ],
)
def test_a_bad_agent_is_refused_by_the_form(operator, fields, said):
    response = operator.post(reverse("admin:runs_app_agentdefinition_add"), _form(**fields))

    assert response.status_code == 200
    assert said in response.content.decode()
    assert not AgentDefinition.objects.exists()
    assert not AgentVersion.objects.exists()
