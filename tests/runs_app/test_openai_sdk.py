"""The OpenAI-compatible endpoints at ``/v1/`` with the official ``openai`` SDK as
the client, against goaai served by daphne (a subprocess, on a SQLite file of its
own): models, chat completions and responses, streamed and not, the caller's own
tools, errors, sessions, and every exchange recorded as a run."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from tests.browser.server import PASSWORD, Api, LiveServer

CALCULATE = "calculate 2 * (3 + 4)"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
RESPONSES_WEATHER_TOOL = {"type": "function", **WEATHER_TOOL["function"]}


@pytest.fixture(scope="module")
def daphne(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(
        workdir=Path(tmp_path_factory.mktemp("openai-daphne")),
        # Low enough for the rate limit test to reach, high enough for the others.
        extra_env={"GOAAI_RUN_RATE_PER_TOKEN": "40/min"},
    )
    server.prepare()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def alice(daphne: LiveServer) -> Api:
    return Api.login(daphne, "alice")


@pytest.fixture(scope="module")
def bob(daphne: LiveServer) -> Api:
    return Api.login(daphne, "bob")


def _client(daphne: LiveServer, api: Api, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{daphne.url}/v1", api_key=api.token, max_retries=0, timeout=30, **options
    )


@pytest.fixture(scope="module")
def client(daphne: LiveServer, alice: Api) -> openai.OpenAI:
    return _client(daphne, alice)


def _run(api: Api, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"runs/{run_id}/")
    return found


def test_models_are_the_agents(client: openai.OpenAI) -> None:
    ids = [model.id for model in client.models.list()]

    assert "assistant" in ids
    assert client.models.retrieve("assistant").owned_by == "goaai"


def test_a_chat_completion_is_a_recorded_run(client: openai.OpenAI, alice: Api) -> None:
    completion = client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": CALCULATE}]
    )

    assert "14" in (completion.choices[0].message.content or "")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens > 0
    recorded = completion.model_extra["goaai"]  # type: ignore[index]
    run = _run(alice, recorded["run"])
    assert run["status"] == "completed"
    assert run["input"] == CALCULATE
    assert run["metadata"] == {"via": "openai", "endpoint": "chat.completions"}
    assert [c["name"] for turn in run["turns"] for c in turn["tool_calls"]] == ["calculator"]
    assert run["usage"]["total_tokens"] == completion.usage.total_tokens


def test_a_streamed_chat_completion_with_usage(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="assistant",
            messages=[{"role": "user", "content": CALCULATE}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "14" in text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_a_response_and_its_stream(client: openai.OpenAI, alice: Api) -> None:
    response = client.responses.create(model="assistant", input=CALCULATE)

    assert response.status == "completed"
    assert "14" in response.output_text
    assert response.usage is not None
    assert response.usage.input_tokens > 0
    again = client.responses.retrieve(response.id)
    assert again.output_text == response.output_text
    run = _run(alice, response.model_extra["goaai"]["run"])  # type: ignore[index]
    assert run["metadata"]["endpoint"] == "responses"

    events = list(client.responses.create(model="assistant", input=CALCULATE, stream=True))
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    for expected in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ):
        assert expected in types
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert "14" in deltas
    assert events[-1].response.output_text == deltas  # type: ignore[union-attr]


def test_previous_response_id_and_conversation_continue_the_session(
    client: openai.OpenAI,
) -> None:
    first = client.responses.create(model="assistant", input="remember my favourite colour is teal")
    second = client.responses.create(
        model="assistant", input="what is my favourite colour?", previous_response_id=first.id
    )
    session = first.model_extra["goaai"]["session"]  # type: ignore[index]

    assert "teal" in second.output_text
    assert second.model_extra["goaai"]["session"] == session  # type: ignore[index]
    third = client.responses.create(
        model="assistant",
        input="what is my favourite colour?",
        extra_body={"conversation": session},
    )
    assert "teal" in third.output_text
    assert third.conversation is not None
    assert third.conversation.id == session


def test_a_callers_tool_round_trip_through_chat(client: openai.OpenAI, alice: Api) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": 'call get_weather {"city": "Rome"}'}
    ]
    asked = client.chat.completions.create(
        model="assistant", messages=messages, tools=[WEATHER_TOOL]
    )

    choice = asked.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Rome"}
    run_id = asked.model_extra["goaai"]["run"]  # type: ignore[index]
    assert _run(alice, run_id)["awaiting"]["kind"] == "client_tool"

    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'},
    ]
    answered = client.chat.completions.create(
        model="assistant", messages=messages, tools=[WEATHER_TOOL]
    )

    assert answered.model_extra["goaai"]["run"] == run_id  # type: ignore[index]
    assert "sunny" in (answered.choices[0].message.content or "")
    run = _run(alice, run_id)
    assert run["status"] == "completed"
    (recorded,) = [c for turn in run["turns"] for c in turn["tool_calls"]]
    assert recorded["name"] == "get_weather"
    assert recorded["result"] == {"sky": "sunny"}


def test_a_callers_tool_round_trip_through_responses_streamed(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(
            model="assistant",
            input='call get_weather {"city": "Rome"}',
            tools=[RESPONSES_WEATHER_TOOL],  # type: ignore[list-item]
            stream=True,
        )
    )
    final = events[-1].response  # type: ignore[union-attr]
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.name == "get_weather"
    assert "response.function_call_arguments.done" in [e.type for e in events]

    answered = client.responses.create(
        model="assistant",
        previous_response_id=final.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rain"}],
        tools=[RESPONSES_WEATHER_TOOL],  # type: ignore[list-item]
    )

    assert answered.id == final.id
    assert "rain" in answered.output_text


def test_parallel_tool_calls_must_all_be_answered(client: openai.OpenAI) -> None:
    tools = [
        WEATHER_TOOL,
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "together: call get_weather; call get_time"}
    ]
    asked = client.chat.completions.create(model="assistant", messages=messages, tools=tools)
    calls = asked.choices[0].message.tool_calls or []
    assert len(calls) == 2

    messages += [
        asked.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0].id, "content": "20C"},
    ]
    with pytest.raises(openai.BadRequestError, match=calls[1].id):
        client.chat.completions.create(model="assistant", messages=messages, tools=tools)

    messages.append({"role": "tool", "tool_call_id": calls[1].id, "content": "noon"})
    done = client.chat.completions.create(model="assistant", messages=messages, tools=tools)
    assert done.choices[0].finish_reason == "stop"


def test_a_front_end_resending_the_conversation_stays_in_one_session(
    client: openai.OpenAI, alice: Api
) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    sessions = set()
    for text in ("remember my favourite colour is green", "echo hello", CALCULATE):
        messages.append({"role": "user", "content": text})
        completion = client.chat.completions.create(model="assistant", messages=messages)
        messages.append({"role": "assistant", "content": completion.choices[0].message.content})
        sessions.add(completion.model_extra["goaai"]["session"])  # type: ignore[index]
    assert len(sessions) == 1
    (session,) = sessions
    runs = alice.get(f"sessions/{session}/runs/")["results"]
    assert len(runs) == 3

    edited = [*messages[:1], {"role": "user", "content": "remember my favourite colour is red"}]
    edited += [*messages[2:], {"role": "user", "content": "what is my favourite colour?"}]
    moved = client.chat.completions.create(model="assistant", messages=edited)
    assert moved.model_extra["goaai"]["session"] != session  # type: ignore[index]


def test_another_users_session_is_refused(
    daphne: LiveServer, client: openai.OpenAI, bob: Api
) -> None:
    theirs = bob.post("sessions/", {"agent": "assistant"})["id"]

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="assistant",
            messages=[{"role": "user", "content": "echo hi"}],
            extra_headers={"X-Goaai-Session": theirs},
        )


def test_errors_are_the_sdks_errors(daphne: LiveServer, client: openai.OpenAI) -> None:
    wrong = openai.OpenAI(base_url=f"{daphne.url}/v1", api_key="goa_nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "x"}])
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="assistant", messages=[{"role": "user", "content": 7}])  # type: ignore[misc]
    assert bad.value.param == "messages[0].content"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_0123")


def test_an_idempotency_key_replays_the_same_run(client: openai.OpenAI) -> None:
    body = {"model": "assistant", "messages": [{"role": "user", "content": "echo once"}]}
    headers = {"Idempotency-Key": "openai-replay-1"}
    first = client.chat.completions.create(**body, extra_headers=headers)  # type: ignore[call-overload]
    again = client.chat.completions.create(**body, extra_headers=headers)  # type: ignore[call-overload]

    assert again.id == first.id
    with pytest.raises(openai.ConflictError):
        client.chat.completions.create(  # type: ignore[call-overload]
            model="assistant",
            messages=[{"role": "user", "content": "echo twice"}],
            extra_headers=headers,
        )


def test_every_exchange_is_in_the_admin(daphne: LiveServer, client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "echo admin"}]
    )
    run_id = completion.model_extra["goaai"]["run"]  # type: ignore[index]
    daphne.shell(
        "from django.contrib.auth import get_user_model; "
        "get_user_model().objects.create_superuser('root', password='root-pass-42')"
    )

    with httpx2.Client(base_url=daphne.url, follow_redirects=True, timeout=30) as browser:
        browser.get("/admin/login/")
        browser.post(
            "/admin/login/?next=/admin/",
            data={
                "username": "root",
                "password": "root-pass-42",
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
            headers={"Referer": f"{daphne.url}/admin/login/"},
        )
        page = browser.get(f"/admin/runs_app/run/{run_id}/change/")
        timeline = browser.get(f"/admin/runs_app/run/{run_id}/timeline/")

    assert page.status_code == 200
    assert "echo admin" in page.text
    assert timeline.status_code == 200


def test_too_many_runs_is_a_rate_limit_error(daphne: LiveServer, alice: Api) -> None:
    # A token of its own, so that the other tests' runs do not count.
    limited = _client(daphne, Api.login(daphne, "alice"))

    def start_until_refused() -> None:
        for _ in range(60):
            limited.chat.completions.create(
                model="assistant", messages=[{"role": "user", "content": "echo hi"}]
            )

    with pytest.raises(openai.RateLimitError) as limit:
        start_until_refused()
    assert int(limit.value.response.headers["Retry-After"]) >= 1


def test_a_failed_run_is_not_sent_again_by_the_sdks_retries(daphne: LiveServer, alice: Api) -> None:
    retrying = openai.OpenAI(
        base_url=f"{daphne.url}/v1", api_key=alice.token, max_retries=2, timeout=30
    )
    text = f"flaky echo {uuid.uuid4().hex}"

    with pytest.raises(openai.UnprocessableEntityError) as failed:
        retrying.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": text}]
        )

    run_id = str(failed.value.message).split("run ")[1].split(" ")[0]
    session = _run(alice, run_id)["session"]
    assert [run["input"] for run in alice.get(f"sessions/{session}/runs/")["results"]] == [text]


def test_a_stream_ends_when_its_key_is_revoked(daphne: LiveServer, alice: Api) -> None:
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    created = httpx2.post(
        f"{daphne.url}/api/v1/auth/tokens/",
        json={"name": "revoked mid-stream"},
        headers={"Authorization": f"Basic {basic}"},
    ).json()
    streaming = openai.OpenAI(
        base_url=f"{daphne.url}/v1", api_key=created["token"], max_retries=0, timeout=30
    )
    stream = streaming.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "tell me a story"}], stream=True
    )
    chunks = iter(stream)
    while not (next(chunks).choices[0].delta.content or ""):
        pass

    alice.call("DELETE", f"auth/tokens/{created['id']}/")
    started = time.monotonic()
    with pytest.raises(openai.APIError, match="revoked"):
        for _ in chunks:
            pass

    # The story takes some 9 s; the stream ended with the key, not with it.
    assert time.monotonic() - started < 4
