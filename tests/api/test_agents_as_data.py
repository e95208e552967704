"""Agents kept as data: staff create and edit them through the API, every change a
new version, and every run records the version it executed.

The models are real clients of the official SDKs talking to two local servers that
speak OpenAI's protocol: one behind the built-in ``openai`` profile, one behind a
second profile of the deployment's own.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from rest_framework.test import APIClient

from goaai.runtime import rt
from goaai.runtime.agents import Agent, definition_fingerprint
from runs_app.models import AgentDefinition, AgentVersion, Run
from tests.factories import UserFactory
from tests.goaai.runtime.models.fake_providers import (
    OPENAI_PATH,
    FakeProviderServer,
    openai_text,
)

AGENTS = "/api/v1/agents/"

# A code agent on the first profile; the admin's agent goes on the second.
IN_CODE = Agent(
    id="code-writer",
    description="Writes, on OpenAI.",
    model="openai:gpt-code",
    system_prompt="You write code.",
)


@pytest.fixture
def servers(monkeypatch, settings):
    """Two provider servers: the built-in ``openai`` profile points at the first,
    the profile ``second`` at the other; goaai's runtime built on them."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    first, second = FakeProviderServer().start(), FakeProviderServer().start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-first")
    monkeypatch.setenv("OPENAI_BASE_URL", first.openai_base_url)
    monkeypatch.setenv("SECOND_KEY", "sk-second")
    settings.GOAAI_MODEL_PROFILES = {
        "second": {
            "kind": "openai",
            "base_url": second.openai_base_url,
            "api_key_env": "SECOND_KEY",
        }
    }
    settings.GOAAI_AGENTS = ["tests.api.test_agents_as_data.IN_CODE"]
    rt.reset()
    rt.configure(executor="inline")
    yield first, second
    rt.reset()
    first.stop()
    second.stop()


def _create(client: APIClient, **fields: object) -> dict:
    body = {
        "id": "support",
        "description": "Answers support questions.",
        "model": "second:qwen3",
        "system_prompt": "You answer support questions. Version one.",
        "model_settings": {"temperature": 0.2, "max_output_tokens": 300},
        **fields,
    }
    response = client.post(AGENTS, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.django_db(transaction=True)
def test_an_admin_agent_on_a_second_profile_runs_beside_a_code_agent(servers, staff, owner):
    first, second = servers
    staff_api = APIClient()
    staff_api.force_login(staff)
    created = _create(staff_api)
    assert (created["source"], created["version"]) == ("data", 1)
    first.openai(openai_text(["From ", "the first."]))
    second.openai(openai_text(["From ", "the second."]), openai_text(["Again."]))

    session = rt.create_session(owner=owner, agent="support")
    code_run = rt.run("code-writer", "hello", session=session.id)
    data_run = rt.run("support", "hello", session=session.id)

    assert (code_run.status, code_run.output) == ("completed", "From the first.")
    assert (data_run.status, data_run.output) == ("completed", "From the second.")
    (code_request,) = first.bodies(OPENAI_PATH)
    (data_request,) = second.bodies(OPENAI_PATH)
    assert code_request["model"] == "gpt-code"
    assert (data_request["model"], data_request["temperature"], data_request["max_tokens"]) == (
        "qwen3",
        0.2,
        300,
    )
    assert data_request["messages"][0]["content"] == "You answer support questions. Version one."
    assert second.requests[0].header("authorization") == "Bearer sk-second"

    # Editing the agent makes version 2; the older run still shows version 1.
    changed = staff_api.patch(
        f"{AGENTS}support/",
        {"system_prompt": "You answer support questions. Version two."},
        format="json",
    )
    assert changed.status_code == 200, changed.content
    assert changed.json()["version"] == 2
    later = rt.run("support", "hello again", session=session.id)
    assert later.agent_version == 2
    assert second.bodies(OPENAI_PATH)[1]["messages"][0]["content"].endswith("Version two.")

    runs = {run.id: run for run in Run.objects.filter(session_id=session.id)}
    assert runs[data_run.id].agent_version_number == 1
    assert runs[later.id].agent_version_number == 2
    assert runs[data_run.id].agent_version.definition["system_prompt"].endswith("Version one.")
    # The code agent has a version too: the definition the run executed.
    assert runs[code_run.id].agent_version.source == "code"
    assert runs[code_run.id].agent_version.definition == IN_CODE.as_dict()

    # The run API and the run timeline say which version each run executed.
    shown = staff_api.get(f"/api/v1/runs/{data_run.id}/").json()
    assert (shown["agent"], shown["agent_version"]) == ("support", 1)
    timeline = staff_api.get(reverse("admin:runs_app_run_timeline", args=[data_run.id]))
    assert timeline.status_code == 200
    assert b'data-testid="agent-version"' in timeline.content
    assert b"version 1" in timeline.content

    versions = staff_api.get(f"{AGENTS}support/versions/").json()["results"]
    assert [(v["number"], v["source"], v["created_by"]) for v in versions] == [
        (2, "data", staff.pk),
        (1, "data", staff.pk),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_run_started_before_an_edit_executes_the_version_it_recorded(servers, staff, owner):
    _, second = servers
    staff_api = APIClient()
    staff_api.force_login(staff)
    _create(staff_api)
    second.openai(openai_text(["Answered."]))
    session = rt.create_session(owner=owner, agent="support")
    rt.configure(executor=_Held())
    handle = rt.start("support", "hello", session=session.id)

    staff_api.patch(f"{AGENTS}support/", {"system_prompt": "Version two."}, format="json")
    rt.execute(handle.run_id)

    (request,) = second.bodies(OPENAI_PATH)
    assert request["messages"][0]["content"].endswith("Version one.")
    assert Run.objects.get(pk=handle.run_id).agent_version_number == 1


class _Held:
    """An executor that keeps runs until the test executes them."""

    def submit(self, run_id: object) -> None:
        pass

    def wait(self, run_id: object, timeout: float) -> bool:
        return False


@pytest.mark.django_db
def test_saving_the_same_definition_again_makes_no_new_version(servers, staff_api):
    _create(staff_api)

    response = staff_api.patch(
        f"{AGENTS}support/", {"description": "Answers support questions."}, format="json"
    )

    assert response.json()["version"] == 1
    assert AgentVersion.objects.filter(agent="support").count() == 1


@pytest.mark.parametrize(
    ("fields", "attr", "said"),
    [
        ({"model": "nowhere:qwen3"}, "model", "No model client for 'nowhere:qwen3'"),
        ({"toolsets": ["clock", "shell"]}, "toolsets", "no toolset 'shell'"),
        ({"delegates": ["ghost"]}, "delegates", "unknown agent 'ghost'"),
        ({"model_settings": {"temperature": 3}}, "model_settings", "between 0 and 2"),
        ({"model_settings": {"reasoning_effort": "max"}}, "model_settings", "one of minimal"),
        ({"model_settings": {"retry_attempts": 0}}, "model_settings", "from 1 to 20"),
        ({"model_settings": {"top_k": 3}}, "model_settings", "unknown setting 'top_k'"),
        ({"policy": {"max_turns": 0}}, "policy", "at least 1"),
        ({"policy": {"max_turns": "many"}}, "policy", "at least 1"),
        ({"id": "has spaces"}, "id", "letters, digits"),
        ({"id": "assistant"}, "id", "exists"),
        ({"id": "code-writer"}, "id", "exists"),
    ],
)
@pytest.mark.django_db
def test_a_bad_agent_is_refused_with_what_is_wrong(servers, staff_api, fields, attr, said):
    body = {"id": "support", "model": "second:qwen3", **fields}

    response = staff_api.post(AGENTS, body, format="json")

    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["attr"] == attr
    assert said in error["detail"]
    assert not AgentDefinition.objects.exists()


@pytest.mark.django_db
def test_only_staff_with_the_permission_create_and_change_agents(servers, api, staff_api):
    _create(staff_api)
    clerk = UserFactory(username="clerk", is_staff=True)
    clerk_api = APIClient()
    clerk_api.force_login(clerk)

    assert api.post(AGENTS, {"id": "mine"}, format="json").status_code == 403
    assert clerk_api.post(AGENTS, {"id": "mine"}, format="json").status_code == 403
    assert (
        clerk_api.patch(f"{AGENTS}support/", {"description": "x"}, format="json").status_code == 403
    )
    clerk.user_permissions.add(Permission.objects.get(codename="change_agentdefinition"))
    clerk_api.force_login(UserFactory._meta.model.objects.get(pk=clerk.pk))
    changed = clerk_api.patch(f"{AGENTS}support/", {"description": "Changed."}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["version"] == 2
    # Everyone signed in sees it, with its version.
    listed = {agent["id"]: agent for agent in api.get(AGENTS).json()["results"]}
    assert (listed["support"]["source"], listed["support"]["version"]) == ("data", 2)


@pytest.mark.django_db
def test_agents_in_code_change_with_the_code(servers, staff_api):
    response = staff_api.patch(f"{AGENTS}assistant/", {"description": "x"}, format="json")

    assert response.status_code == 400
    assert response.json()["errors"][0]["code"] == "agent_in_code"


@pytest.mark.django_db
def test_unknown_agents_and_hostile_bodies_are_4xx(servers, staff_api):
    assert staff_api.get(f"{AGENTS}nobody/").status_code == 404
    assert staff_api.get(f"{AGENTS}nobody/versions/").status_code == 404
    assert staff_api.patch(f"{AGENTS}nobody/", {}, format="json").status_code == 404
    for body in ([1, 2], "text", {"id": "x", "toolsets": "clock"}, {"id": ["x"]}):
        response = staff_api.post(AGENTS, json.dumps(body), content_type="application/json")
        assert response.status_code == 400, (body, response.content)


@pytest.mark.django_db(transaction=True)
def test_starts_record_the_newest_version_of_their_definition_and_write_none(servers, staff, owner):
    """A start finds its version by the digest of the definition it was given, as
    the agent would compute it: starts of an unchanged agent write no version, and
    after an edit and its undoing a start records the newest version of the
    definition it runs (not the first that had it)."""
    staff_api = APIClient()
    staff_api.force_login(staff)
    _create(
        staff_api,
        toolsets=["clock"],
        policy={"max_turns": 3, "approval_required": ["clock.now"]},
        conversation={"multitask": "reject"},
    )
    session = rt.create_session(owner=owner, agent="support")
    rt.configure(executor=_Held())

    def started() -> int | None:
        run = Run.objects.get(pk=rt.start("support", "hello", session=session.id).run_id)
        Run.objects.filter(pk=run.pk).update(status="completed")
        return run.agent_version_number

    assert [started() for _ in range(3)] == [1, 1, 1]
    staff_api.patch(f"{AGENTS}support/", {"system_prompt": "Version two."}, format="json")
    assert started() == 2
    original = "You answer support questions. Version one."
    staff_api.patch(f"{AGENTS}support/", {"system_prompt": original}, format="json")
    assert [started() for _ in range(2)] == [3, 3]
    assert AgentVersion.objects.filter(agent="support").count() == 3
    code = rt.create_session(owner=owner, agent="code-writer")
    for _ in range(2):
        rt.start("code-writer", "hello", session=code.id)
    assert AgentVersion.objects.filter(agent="code-writer").count() == 1

    for spec in (rt.agents.get("support"), rt.agents.get("code-writer"), IN_CODE):
        definition = spec.as_dict()
        assert definition_fingerprint(definition) == Agent.from_dict(definition).fingerprint()
        assert Agent.from_dict(definition).as_dict() == definition
