"""An agent's MCP servers in the admin: its page lists the servers' tools with their
schemas and says which server cannot be reached; only a superuser may declare a
server goaai starts as a command."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from goaai.runtime import rt
from goaai.runtime.tools.mcp import MCP_CLIENTS
from runs_app.models import AgentDefinition, AgentVersion
from tests.factories import UserFactory
from tests.goaai.runtime.tools.mcp_servers import TIME

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_runtime():
    rt.reset()
    yield
    rt.reset()
    MCP_CLIENTS.shutdown()


def _form(servers: dict[str, object], toolsets: list[str]) -> dict[str, object]:
    return {
        "agent": "clockwork",
        "description": "Tells the time.",
        "model": "scripted",
        "system_prompt": "",
        "toolsets": json.dumps(toolsets),
        "delegates": "[]",
        "policy": "{}",
        "model_settings": "{}",
        "conversation": "{}",
        "mcp_servers": json.dumps(servers),
    }


def test_the_agent_page_lists_the_servers_tools(client, staff):
    client.force_login(staff)
    servers = {"time": TIME, "down": {"command": "/nonexistent/mcp", "startup_seconds": 5}}

    created = client.post(
        reverse("admin:runs_app_agentdefinition_add"), _form(servers, ["mcp:time", "mcp:down"])
    )
    assert created.status_code == 302, created.content
    agent = AgentDefinition.objects.get(agent="clockwork")
    page = client.get(reverse("admin:runs_app_agentdefinition_change", args=[agent.pk]))

    text = page.content.decode()
    assert page.status_code == 200
    assert "<code>get_current_time</code> (mcp:time, needs approval)" in text
    assert "&quot;timezone&quot;" in text
    assert "MCP server &#x27;down&#x27; could not be started" in text


def test_a_staff_member_who_is_not_superuser_cannot_declare_a_command(client):
    editor = UserFactory(username="dana", is_staff=True)
    editor.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["add_agentdefinition", "change_agentdefinition", "view_agentdefinition"]
        )
    )
    client.force_login(editor)

    response = client.post(
        reverse("admin:runs_app_agentdefinition_add"), _form({"time": TIME}, ["mcp:time"])
    )

    assert response.status_code == 200
    assert "only a superuser may declare an MCP server" in response.content.decode()
    assert not AgentDefinition.objects.exists()


def test_a_command_in_the_mcp_servers_wrapper_is_refused_in_the_form(client):
    editor = UserFactory(username="dana", is_staff=True)
    editor.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["add_agentdefinition", "change_agentdefinition", "view_agentdefinition"]
        )
    )
    client.force_login(editor)
    wrapped = {"mcpServers": {"evil": {"command": "sh", "args": ["-c", "id"]}}}

    response = client.post(
        reverse("admin:runs_app_agentdefinition_add"), _form(wrapped, ["mcp:evil"])
    )

    assert response.status_code == 200
    assert "only a superuser may declare an MCP server" in response.content.decode()
    assert not AgentDefinition.objects.exists()


SECRET_SERVERS = {
    "own": {**TIME, "args": [*TIME["args"], "--api-key=arg-secret"], "env": {"K": "env-secret"}},
    "web": {"url": "http://127.0.0.1:9/mcp?token=url-secret", "startup_seconds": 1},
}


def _viewer(*codenames: str):
    viewer = UserFactory(username="vic", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return viewer


def test_a_view_only_member_sees_no_secret_of_an_agent_or_its_versions(client, staff):
    client.force_login(staff)
    created = client.post(reverse("admin:runs_app_agentdefinition_add"), _form(SECRET_SERVERS, []))
    assert created.status_code == 302, created.content
    agent = AgentDefinition.objects.get(agent="clockwork")
    version = AgentVersion.objects.get(agent="clockwork")
    client.force_login(_viewer("view_agentdefinition", "view_agentversion"))

    page = client.get(reverse("admin:runs_app_agentdefinition_change", args=[agent.pk]))
    version_page = client.get(reverse("admin:runs_app_agentversion_change", args=[version.pk]))

    for response in (page, version_page):
        assert response.status_code == 200
        text = response.content.decode()
        assert "secret" not in text
        assert "********" in text


def test_an_editor_sees_the_servers_as_declared(client, staff):
    client.force_login(staff)
    client.post(reverse("admin:runs_app_agentdefinition_add"), _form(SECRET_SERVERS, []))
    agent = AgentDefinition.objects.get(agent="clockwork")
    version = AgentVersion.objects.get(agent="clockwork")
    client.force_login(
        _viewer("view_agentdefinition", "change_agentdefinition", "view_agentversion")
    )

    page = client.get(reverse("admin:runs_app_agentdefinition_change", args=[agent.pk]))
    version_page = client.get(reverse("admin:runs_app_agentversion_change", args=[version.pk]))

    assert "env-secret" in page.content.decode()
    assert "url-secret" in version_page.content.decode()
