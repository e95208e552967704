"""The ``/v1/`` endpoints: async views (a streamed answer holds its connection
open without holding a thread), each authenticated by a goaai API token sent as
the Bearer key, and answering every refusal in OpenAI's error shape."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from goaai.api.credentials import bearer_token
from goaai.api.sse import event_stream
from goaai.runtime import rt
from runs_app.openai_api import builders
from runs_app.openai_api.conversation import Said, said
from runs_app.openai_api.db import database_sync_to_async
from runs_app.openai_api.errors import OpenAIError, invalid, not_found
from runs_app.openai_api.exchange import Ask, Started, agent_id, begin, idempotency_key
from runs_app.openai_api.exchange import readable_run as _readable_run
from runs_app.openai_api.requests import (
    ChatCompletionRequest,
    InputItem,
    ResponsesRequest,
    json_body,
    parse,
    text_of,
)
from runs_app.openai_api.streaming import chat_stream, responses_stream
from sessions_app.api.authentication import token_user
from sessions_app.streams import Watcher

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Goaai-Session"
# The attempt OpenAI's SDKs are at (0 first), sent with every request.
RETRY_COUNT_HEADER = "X-Stainless-Retry-Count"
View = Callable[..., Coroutine[Any, Any, HttpResponseBase]]


def _authenticated(request: HttpRequest) -> tuple[Any, Any]:
    raw = bearer_token(request.headers.get("Authorization"))
    if not raw:
        raise OpenAIError(
            401,
            "Send a goaai API token as the Bearer key (Authorization: Bearer <token>).",
            code="invalid_api_key",
        )
    found = token_user(raw)
    if found is None:
        raise OpenAIError(
            401, "The API key is unknown, revoked or expired.", code="invalid_api_key"
        )
    user, token = found
    if not user.is_active:
        raise OpenAIError(401, "The API key's user is deactivated.", code="invalid_api_key")
    return user, token


def endpoint(*methods: str) -> Callable[[View], View]:
    """An OpenAI-compatible endpoint: only ``methods``, a token's user as
    ``request.user``, every refusal (and any crash) in OpenAI's error shape."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            try:
                if request.method not in methods:
                    raise OpenAIError(
                        405,
                        f"{request.method} is not allowed here; use {', '.join(methods)}.",
                        code="method_not_allowed",
                    )
                user, token = await database_sync_to_async(_authenticated)(request)
                request.user, request.auth = user, token  # type: ignore[attr-defined]
                return await view(request, *args, **kwargs)
            except OpenAIError as refused:
                return refused.response()
            except Exception:
                logger.exception("The OpenAI-compatible endpoint %s failed", request.path)
                return OpenAIError(
                    500, "goaai failed to answer; the error is logged.", type="server_error"
                ).response()

        wrapped.csrf_exempt = True  # type: ignore[attr-defined]
        return wrapped

    return decorate


# Each in a thread of the request's own that closes its database connection
# like any request's: not the loop's shared pool, which many waiting requests
# would use up for everyone.
_begin: Callable[..., Awaitable[Started]] = database_sync_to_async(begin)
_state: Callable[..., Awaitable[builders.State]] = database_sync_to_async(builders.state)


def _watcher(request: HttpRequest) -> Watcher:
    """What a stream listens to for the end of its credentials."""
    caller: Any = request
    return Watcher(user_id=caller.user.pk, token_id=caller.auth.pk)


def _retry(request: HttpRequest) -> bool:
    """Whether the client says this is its retry of a request that failed."""
    count = request.headers.get(RETRY_COUNT_HEADER, "").strip()
    return count.isdigit() and int(count) > 0


async def _settled(started: Started) -> builders.State:
    """The exchange once it is over (or the wait for it is spent)."""
    deadline = time.monotonic() + rt.config.run_wait_seconds
    delay = 0.02
    while True:
        current = await _state(started.run_id, started.first_turn)
        if current.settled or time.monotonic() >= deadline:
            return current
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)


# Models


def _model(agent: Any) -> dict[str, Any]:
    return {"id": agent.id, "object": "model", "created": 0, "owned_by": "goaai"}


@endpoint("GET")
async def models(request: HttpRequest) -> HttpResponseBase:
    agents = await database_sync_to_async(rt.agents.all)()
    return JsonResponse({"object": "list", "data": [_model(agent) for agent in agents]})


@endpoint("GET")
async def model_detail(request: HttpRequest, model: str) -> HttpResponseBase:
    name = await database_sync_to_async(agent_id)(model)
    return JsonResponse(_model(await database_sync_to_async(rt.agents.get)(name)))


# Chat completions


def _chat_ask(request: HttpRequest, body: dict[str, Any]) -> tuple[Ask, ChatCompletionRequest]:
    chat = parse(ChatCompletionRequest, body)
    instructions: list[str] = []
    conversation: list[Said] = []
    outputs: dict[str, Any] = {}
    for index, message in enumerate(chat.messages):
        text = text_of(message.content, f"messages[{index}].content")
        if message.role in ("system", "developer"):
            if text.strip():
                instructions.append(text.strip())
        elif message.role == "tool":
            if not message.tool_call_id:
                raise invalid(
                    "A tool message needs the tool_call_id it answers.",
                    param=f"messages[{index}].tool_call_id",
                )
            outputs[message.tool_call_id] = text
        else:
            # Results count only at the end: earlier ones answered earlier requests.
            outputs = {}
            kept = said(message.role, text, calls_tools=bool(message.tool_calls))
            if kept is not None:
                conversation.append(kept)
    offered = chat.tools if chat.tool_choice != "none" else None
    ask = Ask(
        endpoint="chat.completions",
        model=chat.model,
        said=conversation,
        tool_outputs=outputs,
        instructions="\n\n".join(instructions),
        tools=[
            {
                "name": t.function.name,
                "description": t.function.description or "",
                "parameters": t.function.parameters or {"type": "object", "properties": {}},
            }
            for t in offered or ()
        ],
        session=request.headers.get(SESSION_HEADER) or chat.session,
        body=body,
        idempotency_key=idempotency_key(request.headers.get("Idempotency-Key")),
        retry=_retry(request),
    )
    return ask, chat


@endpoint("POST")
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    body = json_body(request)
    ask, chat = _chat_ask(request, body)
    started = await _begin(request.user, request.auth, ask)  # type: ignore[attr-defined]
    if chat.stream:
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        return event_stream(chat_stream(started, _watcher(request), include_usage))
    current = await _settled(started)
    failure = builders.refusal(current)
    if failure is not None:
        raise failure
    return JsonResponse(builders.chat_completion(current, started.model))


# Responses


def _input_items(
    items: list[InputItem], instructions: list[str]
) -> tuple[list[Said], dict[str, Any]]:
    """The conversation a Responses ``input`` holds and the tool results it brings
    (system and developer messages are added to ``instructions``)."""
    conversation: list[Said] = []
    outputs: dict[str, Any] = {}
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if item.role is not None:
            # Results count only after the last message: earlier ones answered
            # earlier requests (a client that resends the whole input sends them).
            outputs = {}
        if item.type == "function_call_output":
            if not item.call_id:
                raise invalid("A function_call_output needs its call_id.", param=where)
            output = item.output
            outputs[item.call_id] = (
                output if isinstance(output, str) else text_of(output, f"{where}.output")
            )
            continue
        if item.type == "function_call":
            continue
        if item.role is None:
            raise invalid(f"{where}: a message needs its role.", param=f"{where}.role")
        text = text_of(item.content, f"{where}.content")
        if item.role in ("system", "developer"):
            if text.strip():
                instructions.append(text.strip())
        elif (kept := said(item.role, text)) is not None:
            conversation.append(kept)
    # With tool results, the request continues the run that waits for them.
    return ([] if outputs else conversation), outputs


def _responses_ask(request: HttpRequest, body: dict[str, Any]) -> tuple[Ask, ResponsesRequest]:
    asked = parse(ResponsesRequest, body)
    instructions = [asked.instructions.strip()] if asked.instructions else []
    outputs: dict[str, Any] = {}
    if isinstance(asked.input, str):
        conversation = [Said("user", asked.input.strip())]
    else:
        conversation, outputs = _input_items(asked.input, instructions)
    conversation_id = (
        asked.conversation if isinstance(asked.conversation, str | None) else asked.conversation.id
    )
    offered = asked.tools if asked.tool_choice != "none" else None
    ask = Ask(
        endpoint="responses",
        model=asked.model,
        said=conversation,
        tool_outputs=outputs,
        instructions="\n\n".join(instructions),
        tools=[
            {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.parameters or {"type": "object", "properties": {}},
            }
            for t in offered or ()
        ],
        session=request.headers.get(SESSION_HEADER) or asked.session or conversation_id,
        previous_response=asked.previous_response_id,
        body=body,
        idempotency_key=idempotency_key(request.headers.get("Idempotency-Key")),
        retry=_retry(request),
    )
    return ask, asked


@endpoint("POST")
async def responses(request: HttpRequest) -> HttpResponseBase:
    body = json_body(request)
    ask, asked = _responses_ask(request, body)
    started = await _begin(request.user, request.auth, ask)  # type: ignore[attr-defined]
    if asked.stream:
        return event_stream(responses_stream(started, _watcher(request)))
    current = await _settled(started)
    return JsonResponse(builders.response_object(current, started.model))


def _whole_run(user: Any, response_id: str) -> builders.State:
    run = _readable_run(user, response_id)
    return builders.state(run.pk)


@endpoint("GET")
async def response_detail(request: HttpRequest, response_id: str) -> HttpResponseBase:
    current = await database_sync_to_async(_whole_run)(request.user, response_id)
    return JsonResponse(builders.response_object(current, current.run.agent))


@csrf_exempt
async def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other path under ``/v1/``: a 404 in OpenAI's shape."""
    return not_found(f"Unknown path {request.path!r}.", code="unknown_url").response()
