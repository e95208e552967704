"""``/v1/`` with Django's test client: what a request may say, and how every bad
one is refused in OpenAI's error shape with the status its SDKs expect (never a
500). The official SDK against a live server is in test_openai_sdk.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client, override_settings

from runs_app.models import Run
from sessions_app.services import api_token_create
from tests.factories import UserFactory


@pytest.fixture
def token(owner) -> str:
    return api_token_create(user_id=owner.pk, name="openai")[1]


def _post(client: Client, path: str, body: Any, token: str, **headers: str) -> Any:
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(
        f"/v1/{path}",
        data=raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()},
    )


def _error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def _chat(content: Any = "echo hi", **more: Any) -> dict[str, Any]:
    return {"model": "assistant", "messages": [{"role": "user", "content": content}], **more}


@pytest.mark.django_db
def test_no_key_or_a_wrong_one_is_a_401(client: Client) -> None:
    missing = client.get("/v1/models")
    wrong = client.get("/v1/models", HTTP_AUTHORIZATION="Bearer goa_wrong")

    assert missing.status_code == wrong.status_code == 401
    assert _error(wrong)["code"] == "invalid_api_key"
    assert missing["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
def test_a_deactivated_users_key_is_a_401(client: Client) -> None:
    user = UserFactory(username="dora")
    raw = api_token_create(user_id=user.pk, name="x")[1]
    user.is_active = False
    user.save(update_fields=["is_active"])

    assert client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_models_list_the_agents(client: Client, token: str) -> None:
    listed = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {token}").json()

    assert listed["object"] == "list"
    assert {"id": "assistant", "object": "model", "created": 0, "owned_by": "goaai"} in listed[
        "data"
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ("{not json", None),
        ("[]", None),
        ('"text"', None),
        ({"model": "assistant"}, "messages"),
        ({"model": 7, "messages": [{"role": "user", "content": "x"}]}, "model"),
        (_chat(7), "messages[0].content"),
        (_chat(["a"]), "messages[0].content"),
        (_chat(stream="yes"), "stream"),
        ({"model": "assistant", "messages": []}, "messages"),
        ({"model": "assistant", "messages": [{"role": "wizard", "content": "x"}]}, None),
        (_chat(tools=[{"type": "function", "function": {"name": "bad name!"}}]), None),
        (_chat(tools="all"), "tools"),
        (_chat([{"type": "image_url", "image_url": {"url": "x"}}]), "messages[0].content[0].type"),
        ({"model": "assistant", "messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
        ({"model": "assistant", "messages": [{"role": "tool", "content": "x"}]}, None),
        (_chat("nul \u0000 here"), None),
        ('{"model": "assistant", "messages": [{"role": "user", "content": "\\ud800"}]}', None),
    ],
)
def test_a_bad_body_is_a_400_naming_what_is_wrong(
    client: Client, token: str, body: Any, param: str | None
) -> None:
    response = _post(client, "chat/completions", body, token)

    assert response.status_code == 400, response.content
    error = _error(response)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param


def test_json_nested_too_deep_is_a_400(client: Client, token: str) -> None:
    deep = '{"model": "assistant", "messages": ' + "[" * 5000 + "]" * 5000 + "}"

    response = _post(client, "chat/completions", deep, token)

    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_json"


@override_settings(GOAAI_API_MAX_BODY_BYTES=1000)
def test_an_oversized_body_is_a_413(client: Client, token: str) -> None:
    response = _post(client, "chat/completions", _chat("x" * 2000), token)

    assert response.status_code == 413
    assert _error(response)["code"] == "payload_too_large"
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"model": "assistant"},
        {"model": "assistant", "input": 5},
        {"model": "assistant", "input": [{"type": "function_call_output", "output": "x"}]},
        {"model": "assistant", "input": [{"content": "no role"}]},
        {"model": "assistant", "input": "x", "conversation": ["a"]},
        {"model": "assistant", "input": "x", "previous_response_id": "resp_zzz"},
    ],
)
def test_a_bad_responses_body_is_a_4xx(client: Client, token: str, body: Any) -> None:
    response = _post(client, "responses", body, token)

    assert response.status_code in (400, 404), response.content
    _error(response)


def test_unknown_paths_and_methods_are_openai_errors(client: Client, token: str) -> None:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    unknown = client.post("/v1/embeddings", data="{}", content_type="application/json", **auth)
    wrong_method = client.get("/v1/chat/completions", **auth)
    delete = client.delete("/v1/models", **auth)

    assert unknown.status_code == 404
    assert _error(unknown)["code"] == "unknown_url"
    assert wrong_method.status_code == delete.status_code == 405
    assert _error(wrong_method)["code"] == "method_not_allowed"


def test_an_unknown_model_is_a_404(client: Client, token: str) -> None:
    response = _post(client, "chat/completions", {**_chat(), "model": "nobody"}, token)

    assert response.status_code == 404
    assert _error(response) == {
        "message": "The model 'nobody' does not exist: models are goaai's agents (GET /v1/models).",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


@pytest.mark.parametrize("session", ["not-a-uuid", "4fc7fd2a-0000-4000-8000-000000000000"])
def test_an_unknown_session_is_a_404(client: Client, token: str, session: str) -> None:
    response = _post(client, "chat/completions", _chat(), token, **{"X-Goaai-Session": session})

    assert response.status_code == 404
    assert _error(response)["code"] == "session_not_found"


def test_results_for_unknown_tool_calls_are_a_404(client: Client, token: str) -> None:
    body = {
        "model": "assistant",
        "messages": [
            {"role": "user", "content": "call get_weather"},
            {"role": "assistant", "tool_calls": [_call("call_x")]},
            {"role": "tool", "tool_call_id": "call_x", "content": "sunny"},
        ],
    }

    response = _post(client, "chat/completions", body, token)

    assert response.status_code == 404
    assert _error(response)["code"] == "tool_call_not_found"


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather"}}


@pytest.mark.django_db(transaction=True)
def test_an_exchange_is_a_run_and_a_system_message_its_instructions(
    client: Client, token: str, inline_runtime: Any
) -> None:
    body = {
        "model": "assistant",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": [{"type": "text", "text": "calculate 6*7"}]},
        ],
    }

    response = _post(client, "chat/completions", body, token)

    assert response.status_code == 200, response.content
    completion = response.json()
    assert "42" in completion["choices"][0]["message"]["content"]
    run = Run.objects.get(pk=completion["goaai"]["run"])
    assert run.instructions == "Answer briefly."
    assert run.conversation_digest
    first = run.turns.order_by("index").first()
    assert first is not None
    assert {"role": "system", "content": "Answer briefly."} in first.request_messages


@pytest.mark.django_db(transaction=True)
def test_results_for_another_users_tool_call_are_refused(
    client: Client, token: str, inline_runtime: Any, other_user: Any
) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    asked = _post(client, "chat/completions", _chat("call get_weather", tools=tools), token)
    call_id = asked.json()["choices"][0]["message"]["tool_calls"][0]["id"]
    theirs = api_token_create(user_id=other_user.pk, name="bob")[1]
    body = {
        "model": "assistant",
        "messages": [
            {"role": "user", "content": "call get_weather"},
            {"role": "assistant", "tool_calls": [_call(call_id)]},
            {"role": "tool", "tool_call_id": call_id, "content": "sunny"},
        ],
    }

    refused = _post(client, "chat/completions", body, theirs)

    assert refused.status_code == 404
    assert Run.objects.get().status == "awaiting_input"


@pytest.mark.django_db(transaction=True)
def test_the_admin_timeline_says_the_run_waits_for_the_callers_result(
    client: Client, token: str, inline_runtime: Any, staff: Any
) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    asked = _post(client, "chat/completions", _chat("call get_weather", tools=tools), token)
    run_id = asked.json()["goaai"]["run"]
    client.force_login(staff)

    page = client.get(f"/admin/runs_app/run/{run_id}/timeline/")

    assert page.status_code == 200
    banner = page.content.decode().split('class="tl-banner tl-banner-waiting"')[1][:200]
    assert "<strong>Waiting for the caller's tool result</strong> (client_tool)" in banner
