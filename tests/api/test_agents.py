"""/api/v1/agents/: the agents a session can talk to, their tools and policies."""

from __future__ import annotations

import jsonschema
import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

AGENTS = "/api/v1/agents/"


def _agents(client) -> dict[str, dict]:
    response = client.get(AGENTS)
    assert response.status_code == 200, response.content
    return {agent["id"]: agent for agent in response.json()["results"]}


def _tools(agent: dict) -> dict[str, dict]:
    return {tool["name"]: tool for tool in agent["tools"]}


def test_lists_the_assistant_and_the_concierge(api):
    agents = _agents(api)

    assert {"assistant", "concierge"} <= set(agents)
    for agent in agents.values():
        assert agent["description"]
        assert agent["tools"]
        assert isinstance(agent["policy"], dict)


def test_the_assistant_has_its_tools_with_argument_schemas(api):
    tools = _tools(_agents(api)["assistant"])

    assert {
        "memory_store",
        "memory_recall",
        "memory_forget",
        "memory_forget_all",
        "calculator",
        "clock_now",
        "echo",
        "ask_user",
    } <= set(tools)
    for tool in tools.values():
        assert {"name", "description", "parameters", "needs_approval"} <= set(tool)
        assert tool["description"]
        jsonschema.Draft202012Validator.check_schema(tool["parameters"])
        assert tool["parameters"]["type"] == "object"


def test_a_tool_schema_describes_the_arguments_the_tool_takes(api):
    schema = _tools(_agents(api)["assistant"])["calculator"]["parameters"]

    jsonschema.validate({"expression": "2 * (3 + 4)"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"expression": 3}, schema)


def test_tools_say_which_need_a_persons_approval(api):
    tools = _tools(_agents(api)["assistant"])

    assert tools["memory_forget_all"]["needs_approval"] is True
    assert tools["calculator"]["needs_approval"] is False
    assert tools["memory_store"]["needs_approval"] is False


def test_the_concierge_may_ask_the_assistant(api):
    concierge = _agents(api)["concierge"]
    tools = _tools(concierge)

    assert "ask_assistant" in tools
    assert "clock_now" in tools
    # It hands memory work to the assistant instead of doing it itself.
    assert "memory_store" not in tools
    jsonschema.Draft202012Validator.check_schema(tools["ask_assistant"]["parameters"])


def test_each_agent_shows_its_policy_caps(api):
    policy = _agents(api)["assistant"]["policy"]

    assert {"max_turns", "max_tool_calls", "time_budget_seconds"} <= set(policy)
    assert policy["max_turns"] > 0
    assert policy["max_tool_calls"] > 0


def test_every_listed_agent_can_start_a_session(api):
    for agent_id in _agents(api):
        response = api.post("/api/v1/sessions/", {"agent": agent_id}, format="json")
        assert response.status_code == 201, (agent_id, response.content)


def test_every_user_sees_the_same_agents(api, other_api, staff_api):
    assert _agents(api) == _agents(other_api) == _agents(staff_api)


def test_listing_agents_needs_authentication(db):
    response = APIClient().get(AGENTS)

    assert response.status_code == 401
    body = response.json()
    assert body["type"] == "client_error"
    assert body["errors"][0]["code"] == "not_authenticated"


def test_only_staff_may_create_agents(api):
    response = api.post(AGENTS, {"id": "mine"}, format="json")

    assert response.status_code == 403
    assert response.json()["type"] == "client_error"
