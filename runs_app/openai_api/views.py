"""The ``/v1/`` endpoints: async views (a streamed answer holds its connection
open without holding a thread), each authenticated by a goaai API token sent as
the Bearer key, and answering every refusal in OpenAI's error shape."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from goaai.runtime import rt
from runs_app.openai_api import builders
from runs_app.openai_api.conversation import Said, said
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

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Goaai-Session"
View = Callable[..., Coroutine[Any, Any, HttpResponseBase]]


def _authenticated(request: HttpRequest) -> tuple[Any, Any]:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise OpenAIError(
            401,
            "Send a goaai API token as the Bearer key (Authorization: Bearer <token>).",
            code="invalid_api_key",
        )
    raw = credentials.strip()
    found = token_user(raw) if raw.isascii() else None
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
                user, token = await sync_to_async(_authenticated)(request)
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


def _sse(frames: Any) -> StreamingHttpResponse:
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # tell nginx not to buffer the stream
    return response


_begin = sync_to_async(begin)
_state = sync_to_async(builders.state, thread_sensitive=False)


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
    agents = await sync_to_async(rt.agents.all)()
    return JsonResponse({"object": "list", "data": [_model(agent) for agent in agents]})


@endpoint("GET")
async def model_detail(request: HttpRequest, model: str) -> HttpResponseBase:
    name = await sync_to_async(agent_id)(model)
    return JsonResponse(_model(await sync_to_async(rt.agents.get)(name)))


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
    )
    return ask, chat


@endpoint("POST")
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    body = json_body(request)
    ask, chat = _chat_ask(request, body)
    started = await _begin(request.user, request.auth, ask)  # type: ignore[attr-defined]
    if chat.stream:
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        return _sse(chat_stream(started, include_usage))
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
    )
    return ask, asked


@endpoint("POST")
async def responses(request: HttpRequest) -> HttpResponseBase:
    body = json_body(request)
    ask, asked = _responses_ask(request, body)
    started = await _begin(request.user, request.auth, ask)  # type: ignore[attr-defined]
    if asked.stream:
        return _sse(responses_stream(started))
    current = await _settled(started)
    return JsonResponse(builders.response_object(current, started.model))


def _whole_run(user: Any, response_id: str) -> builders.State:
    run = _readable_run(user, response_id)
    return builders.state(run.pk)


@endpoint("GET")
async def response_detail(request: HttpRequest, response_id: str) -> HttpResponseBase:
    current = await sync_to_async(_whole_run)(request.user, response_id)
    return JsonResponse(builders.response_object(current, current.run.agent))


@csrf_exempt
async def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other path under ``/v1/``: a 404 in OpenAI's shape."""
    return not_found(f"Unknown path {request.path!r}.", code="unknown_url").response()
