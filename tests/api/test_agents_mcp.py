"""Agents with MCP servers in the agents API: their tools listed with the servers'
schemas, a server that cannot be reached noted (not a 500), secrets hidden, and
only superusers may declare a server goaai starts as a command."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from goaai.runtime import rt
from goaai.runtime.tools.mcp import MCP_CLIENTS
from runs_app.models import AgentDefinition
from tests.factories import UserFactory
from tests.goaai.runtime.tools.mcp_servers import TIME

AGENTS = "/api/v1/agents/"
TIME_WITH_SECRET = {**TIME, "env": {"TIME_TOKEN": "s3cret"}}


@pytest.fixture
def mcp_settings(settings):
    settings.GOAAI_MCP_SERVERS = {
        "time": TIME,
        "down": {"command": "/nonexistent/mcp-server", "startup_seconds": 5},
    }
    rt.reset()
    yield settings
    rt.reset()
    MCP_CLIENTS.shutdown()


@pytest.fixture
def editor_api(db) -> APIClient:
    """Dana: staff allowed to add and change agents, not a superuser."""
    user = UserFactory(username="dana", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["add_agentdefinition", "change_agentdefinition"])
    )
    client = APIClient()
    client.force_login(user)
    return client


def tools_by_name(agent: dict) -> dict:
    return {tool["name"]: tool for tool in agent["tools"]}


@pytest.mark.django_db
def test_an_agent_lists_its_servers_tools_and_notes_an_unreachable_one(mcp_settings, staff_api):
    created = staff_api.post(
        AGENTS,
        {
            "id": "clockwork",
            "description": "Tells the time.",
            "toolsets": ["mcp:time", "mcp:down", "mcp:own"],
            "mcp_servers": {"own": {**TIME_WITH_SECRET, "trusted": True}},
        },
        format="json",
    )
    assert created.status_code == 201, created.json()

    listed = staff_api.get(AGENTS)
    (agent,) = [a for a in listed.json()["results"] if a["id"] == "clockwork"]

    assert listed.status_code == 200
    tools = tools_by_name(agent)
    # Both time servers offer the same names: the agent's own comes last and clashes.
    assert tools["get_current_time"]["toolset"] == "mcp:time"
    assert tools["get_current_time"]["needs_approval"] is True
    assert tools["get_current_time"]["parameters"]["required"] == ["timezone"]
    notes = {note["toolset"]: note["detail"] for note in agent["unavailable_toolsets"]}
    assert set(notes) == {"mcp:down", "mcp:own"}
    assert "MCP server 'down' could not be started" in notes["mcp:down"]
    assert "'get_current_time'" in notes["mcp:own"]
    assert agent["mcp_servers"]["own"]["env"] == {"TIME_TOKEN": "********"}
    stored = AgentDefinition.objects.get(agent="clockwork")
    assert stored.mcp_servers["own"]["env"] == {"TIME_TOKEN": "s3cret"}
    versions = staff_api.get(f"{AGENTS}clockwork/versions/").json()["results"]
    assert versions[0]["definition"]["mcp_servers"]["own"]["env"] == {"TIME_TOKEN": "********"}


@pytest.mark.django_db
def test_a_change_read_back_keeps_the_hidden_secret(mcp_settings, staff_api):
    staff_api.post(
        AGENTS,
        {"id": "keeper", "toolsets": ["mcp:own"], "mcp_servers": {"own": TIME_WITH_SECRET}},
        format="json",
    )
    shown = staff_api.get(f"{AGENTS}keeper/").json()["mcp_servers"]

    changed = staff_api.patch(
        f"{AGENTS}keeper/",
        {"description": "Now described.", "mcp_servers": shown},
        format="json",
    )

    assert changed.status_code == 200, changed.json()
    stored = AgentDefinition.objects.get(agent="keeper")
    assert stored.mcp_servers["own"]["env"] == {"TIME_TOKEN": "s3cret"}


@pytest.mark.django_db
def test_only_a_superuser_declares_a_command(mcp_settings, editor_api):
    refused = editor_api.post(
        AGENTS,
        {"id": "sneaky", "toolsets": ["mcp:own"], "mcp_servers": {"own": TIME}},
        format="json",
    )
    by_url = editor_api.post(
        AGENTS,
        {
            "id": "reader",
            "toolsets": ["mcp:docs", "mcp:time"],
            "mcp_servers": {"docs": {"url": "http://127.0.0.1:9/mcp", "startup_seconds": 2}},
        },
        format="json",
    )

    assert refused.status_code == 400
    assert refused.json()["errors"][0]["attr"] == "mcp_servers"
    assert "only a superuser" in refused.json()["errors"][0]["detail"]
    assert not AgentDefinition.objects.filter(agent="sneaky").exists()
    assert by_url.status_code == 201, by_url.json()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "attr", "detail"),
    [
        ({"toolsets": ["mcp:nowhere"]}, "toolsets", "no MCP server 'nowhere'"),
        ({"mcp_servers": {"x": {}}}, "mcp_servers", "MCP server 'x': give either"),
        ({"mcp_servers": {"x": {"url": "file:///etc"}}}, "mcp_servers", "url must be an http"),
    ],
)
def test_a_bad_declaration_is_a_400_naming_it(mcp_settings, staff_api, body, attr, detail):
    response = staff_api.post(AGENTS, {"id": "broken", **body}, format="json")

    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["attr"] == attr
    assert detail in error["detail"]
