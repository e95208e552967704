"""``/v1/`` exchanges that do not go straight from a question to its answer: a
client that resends everything after using its own tools, runs that wait for a
person, waits for the caller's tools that are dropped, the SDK's own retries, and
idempotency across the ways a run is started. Django's test client; the official
SDK against a live server is in test_openai_sdk.py."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.test import AsyncClient, Client, override_settings
from django.utils import timezone

from goaai.runtime import rt
from runs_app.models import Run
from sessions_app.services import api_token_create

WEATHER = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
CHAT_WEATHER = [{"type": "function", "function": {"name": "get_weather"}}]

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(owner: Any) -> str:
    return api_token_create(user_id=owner.pk, name="openai")[1]


@pytest.fixture
def short_wait(inline_runtime: Any) -> Any:
    """The runtime, with a wait for runs short enough for a test to sit through."""
    rt.configure(config=dataclasses.replace(rt.config, run_wait_seconds=2))
    return rt


def _post(client: Client, path: str, body: Any, token: str, **headers: str) -> Any:
    return client.post(
        f"/v1/{path}",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()},
    )


def _chat(content: str, **more: Any) -> dict[str, Any]:
    return {"model": "assistant", "messages": [{"role": "user", "content": content}], **more}


def _responses(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "assistant", "input": items, "tools": WEATHER}


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def _tool_round(client: Client, token: str, items: list[dict[str, Any]], sky: str) -> str:
    """One exchange in which the run calls the caller's tool: ``items`` grows by the
    call, its result and the answer, as a client that resends everything keeps it."""
    asked = _post(client, "responses", _responses(items), token)
    assert asked.status_code == 200, asked.content
    (call,) = [item for item in asked.json()["output"] if item["type"] == "function_call"]
    items += [call, {"type": "function_call_output", "call_id": call["call_id"], "output": sky}]
    answered = _post(client, "responses", _responses(items), token)
    assert answered.status_code == 200, answered.content
    text = answered.json()["output"][0]["content"][0]["text"]
    items.append({"type": "message", "role": "assistant", "content": text})
    return str(answered.json()["goaai"]["session"])


def test_the_message_after_a_tool_exchange_starts_the_next_run(
    client: Client, token: str, inline_runtime: Any
) -> None:
    items = [_user("call get_weather")]
    session = _tool_round(client, token, items, "sunny")
    items.append(_user("call get_weather"))
    # Two exchanges with tool results in the history, then a new message.
    assert _tool_round(client, token, items, "rain") == session
    items.append(_user("echo goodbye"))

    last = _post(client, "responses", _responses(items), token)

    assert last.status_code == 200, last.content
    assert "goodbye" in last.json()["output"][0]["content"][0]["text"]
    assert last.json()["goaai"]["session"] == session
    assert Run.objects.filter(session_id=session).count() == 3


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("chat/completions", _chat("")),
        ("chat/completions", _chat("  \n ")),
        ("responses", {"model": "assistant", "input": "   "}),
        ("responses", {"model": "assistant", "input": [_user(" ")]}),
    ],
)
def test_a_blank_message_starts_no_run(client: Client, token: str, path: str, body: Any) -> None:
    response = _post(client, path, body, token)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "empty_message"
    assert not Run.objects.exists()


def test_a_run_that_waits_for_a_person_ends_the_chat_exchange_saying_so(
    client: Client, token: str, short_wait: Any
) -> None:
    response = _post(client, "chat/completions", _chat("ask me for my name"), token)

    assert response.status_code == 200, response.content
    completion = response.json()
    run = completion["goaai"]["run"]
    assert completion["goaai"]["status"] == "awaiting_input"
    assert completion["goaai"]["awaiting"] == "question"
    content = completion["choices"][0]["message"]["content"]
    assert run in content
    assert f"/api/v1/runs/{run}/respond/" in content
    assert completion["choices"][0]["finish_reason"] == "stop"


def test_a_run_that_waits_for_a_person_makes_the_response_incomplete(
    client: Client, token: str, short_wait: Any
) -> None:
    asked = {"model": "assistant", "input": "forget everything"}

    body = _post(client, "responses", asked, token).json()

    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "awaiting_input"}
    text = body["output"][0]["content"][0]["text"]
    assert f"/api/v1/runs/{body['goaai']['run']}/respond/" in text


async def test_a_streamed_exchange_ends_when_the_run_waits_for_a_person(
    token: str, short_wait: Any
) -> None:
    client = AsyncClient()
    started = asyncio.get_running_loop().time()

    response = await client.post(
        "/v1/chat/completions",
        data=json.dumps(_chat("ask me for my name", stream=True)),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.content
    text = b"".join([chunk async for chunk in response.streaming_content]).decode()

    assert asyncio.get_running_loop().time() - started < 1.5
    assert "/respond/" in text
    assert text.endswith("data: [DONE]\n\n")


def _waiting_for_tools(client: Client, token: str) -> dict[str, Any]:
    asked = _post(client, "chat/completions", _chat("call get_weather", tools=CHAT_WEATHER), token)
    assert asked.json()["choices"][0]["finish_reason"] == "tool_calls"
    completion: dict[str, Any] = asked.json()
    return completion


def test_a_new_message_in_the_session_cancels_the_wait_for_the_callers_tools(
    client: Client, token: str, inline_runtime: Any
) -> None:
    waiting = _waiting_for_tools(client, token)
    session = waiting["goaai"]["session"]

    moved_on = _post(client, "chat/completions", _chat("echo hi"), token, X_Goaai_Session=session)

    assert moved_on.status_code == 200, moved_on.content
    assert moved_on.json()["goaai"]["session"] == session
    dropped = Run.objects.get(pk=waiting["goaai"]["run"])
    assert dropped.status == "canceled"


def test_a_run_waiting_for_a_person_still_keeps_its_session_busy(
    client: Client, token: str, short_wait: Any
) -> None:
    asked = _post(client, "chat/completions", _chat("ask me for my name"), token)
    session = asked.json()["goaai"]["session"]

    busy = _post(client, "chat/completions", _chat("echo hi"), token, X_Goaai_Session=session)

    assert busy.status_code == 409
    assert busy.json()["error"]["code"] == "session_busy"
    assert Run.objects.get(pk=asked.json()["goaai"]["run"]).status == "awaiting_input"


@override_settings(GOAAI_CLIENT_TOOL_WAIT_SECONDS=600)
def test_a_wait_for_the_callers_tools_expires(
    client: Client, token: str, inline_runtime: Any
) -> None:
    waiting = _waiting_for_tools(client, token)
    run = Run.objects.get(pk=waiting["goaai"]["run"])
    fresh = _waiting_for_tools(client, token)
    Run.objects.filter(pk=run.pk).update(awaiting_since=timezone.now() - dt.timedelta(seconds=601))
    call = waiting["choices"][0]["message"]["tool_calls"][0]
    late = {
        "model": "assistant",
        "messages": [
            {"role": "user", "content": "call get_weather"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ],
    }

    refused = _post(client, "chat/completions", late, token)

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "tool_wait_expired"
    run.refresh_from_db()
    assert run.status == "canceled"
    assert Run.objects.get(pk=fresh["goaai"]["run"]).status == "awaiting_input"


def test_tool_results_sent_again_replay_the_answer(
    client: Client, token: str, inline_runtime: Any
) -> None:
    waiting = _waiting_for_tools(client, token)
    call = waiting["choices"][0]["message"]["tool_calls"][0]
    results = {
        "model": "assistant",
        "messages": [
            {"role": "user", "content": "call get_weather"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ],
    }
    first = _post(client, "chat/completions", results, token)

    again = _post(client, "chat/completions", results, token)

    assert again.status_code == 200, again.content
    assert again.json()["choices"] == first.json()["choices"]
    changed = json.loads(json.dumps(results))
    changed["messages"][-1]["content"] = "snow"
    assert _post(client, "chat/completions", changed, token).status_code == 409


def test_a_key_a_rest_run_used_in_the_session_is_a_409_not_a_500(
    client: Client, token: str, inline_runtime: Any
) -> None:
    first = _post(client, "chat/completions", _chat("echo one"), token)
    session = first.json()["goaai"]["session"]
    rest = client.post(
        f"/api/v1/sessions/{session}/runs/",
        data={"input": "echo two"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_IDEMPOTENCY_KEY="shared-key",
    )
    assert rest.status_code == 201, rest.content

    reused = _post(
        client,
        "chat/completions",
        _chat("echo three"),
        token,
        X_Goaai_Session=session,
        Idempotency_Key="shared-key",
    )

    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"


def test_the_sdks_retry_follows_the_run_the_first_attempt_started(
    client: Client, token: str, inline_runtime: Any
) -> None:
    body = _chat("echo retried")
    first = _post(client, "chat/completions", body, token, X_Stainless_Retry_Count="0")

    retry = _post(client, "chat/completions", body, token, X_Stainless_Retry_Count="1")
    fresh = _post(client, "chat/completions", body, token, X_Stainless_Retry_Count="0")

    assert retry.json()["goaai"]["run"] == first.json()["goaai"]["run"]
    assert fresh.json()["goaai"]["run"] != first.json()["goaai"]["run"]
    assert Run.objects.count() == 2


def test_a_failed_run_is_an_answer_the_sdk_does_not_retry(
    client: Client, token: str, inline_runtime: Any
) -> None:
    response = _post(client, "chat/completions", _chat(f"flaky echo {uuid.uuid4().hex}"), token)

    assert response.status_code == 422, response.content
    assert response["x-should-retry"] == "false"
    error = response.json()["error"]
    run = Run.objects.get()
    assert run.status == "failed"
    assert str(run.pk) in error["message"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_requests_with_one_key_start_one_run(
    token: str, inline_runtime: Any, on_postgres: bool
) -> None:
    if not on_postgres:
        pytest.skip("SQLite runs one writing transaction at a time")
    barrier = threading.Barrier(3)
    answers: list[Any] = []

    def ask() -> None:
        barrier.wait()
        answers.append(
            _post(Client(), "chat/completions", _chat("echo once"), token, Idempotency_Key="k-1")
        )

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [a.status_code for a in answers] == [200, 200, 200]
    assert len({a.json()["goaai"]["run"] for a in answers}) == 1
    assert Run.objects.count() == 1


class _Recording(ThreadPoolExecutor):
    """The loop's default executor, noting what is handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.handed: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.handed.append(repr((fn, args)))
        return super().submit(fn, *args, **kwargs)


async def test_waiting_for_a_run_does_not_use_the_shared_thread_pool(
    token: str, short_wait: Any
) -> None:
    """The loop's default executor (a few threads for the whole process) is not
    where /v1/ authenticates, starts runs or polls them."""
    loop = asyncio.get_running_loop()
    shared = _Recording()
    loop.set_default_executor(shared)
    try:
        response = await AsyncClient().post(
            "/v1/chat/completions",
            data=json.dumps(_chat("echo unshared")),
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )
    finally:
        shared.shutdown()
    assert response.status_code == 200
    assert "unshared" in response.json()["choices"][0]["message"]["content"]
    # Only the test client's own closing of the response.
    assert all(".close of <JsonResponse" in handed for handed in shared.handed), shared.handed
