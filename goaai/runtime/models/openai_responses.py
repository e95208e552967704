"""A client for OpenAI's Responses API (``POST /v1/responses``), profile kind
``openai-responses``.

OpenAI's reasoning models (the o-series, gpt-5) think before they call a tool, and
only the Responses API lets that reasoning travel on to the next turn: with Chat
Completions the model starts every turn of a tool loop from scratch.

The request. Nothing is stored at OpenAI (``store: false``): each request carries
the whole conversation as input items, and the reasoning comes back encrypted
(``include: ["reasoning.encrypted_content"]``) so that it can be sent again. System
messages become ``instructions``, joined in their order: the agent's stable prompt
comes first and the facts that change from run to run after it, so the prompt
prefix OpenAI caches stays the same. A tool's result is a ``function_call_output``
(the API has no error flag: its content says what went wrong). An agent's
``reasoning_effort`` is sent with ``summary: "auto"``, to have a summary of the
reasoning to show.

Reasoning across tool turns. Each reasoning item and each function call item of a
reply is kept whole, as ``response.output_item.done`` gave it, in the reply's
``reasoning_state``. When that assistant message goes back, its reasoning items
come right before its function calls, and each call carries the item id the API
gave it: the API pairs a call with the reasoning that led to it by those ids. A
reasoning item that carries neither encrypted nor plain content is not sent (it
would name an item that was never stored), and then neither are the call ids.

The stream. Text arrives as ``response.output_text.delta`` (a refusal as
``response.refusal.delta``: what the model said instead of an answer) and reaches
``on_delta``; a function call opens with ``response.output_item.added`` (its
``call_id`` and name), grows by ``response.function_call_arguments.delta`` and is
whole at ``response.function_call_arguments.done`` and ``response.output_item.done``,
each call under its own ``output_index``. Reasoning summaries (and, from servers
that show it, the reasoning text itself) are the reply's ``reasoning``. The reply
ends with ``response.completed`` or ``response.incomplete`` (cut off by
``max_output_tokens``, or by the content filter), which carry the final response
and its usage. ``response.failed`` and ``error`` events are provider errors; a
stream that ends without a final response is a retryable error, never a reply cut
short.

Settings some accounts refuse. Reasoning summaries need a verified OpenAI
organization, and models that do not reason refuse encrypted reasoning; either is a
400 naming the parameter (``reasoning.summary``, ``include``). The client then asks
again without it, once, and leaves it out of its later requests too: the answer is
the account's or the model's, and the client is one per profile and model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
import openai
from openai import Stream
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseCompletedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCallParam,
    ResponseIncompleteEvent,
    ResponseInputParam,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseReasoningItemParam,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseReasoningTextDeltaEvent,
    ResponseRefusalDeltaEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_reasoning_item_param import (
    Content as ReasoningContentParam,
)
from openai.types.shared_params import Reasoning, ReasoningEffort

from goaai.runtime.config import ModelProfile
from goaai.runtime.errors import ModelError
from goaai.runtime.models.base import (
    DeltaCallback,
    ModelRequest,
    ModelSettings,
    ToolSpec,
    sdk_options,
)
from goaai.runtime.models.errors import (
    incomplete_error,
    parse_tool_arguments,
    status_error,
)
from goaai.runtime.models.openai_compat import translate_openai_error
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, Usage
from goaai.runtime.vocabulary import ErrorKind, FinishReason

# Why a response came back incomplete, in goaai's words; any other reason is ``other``.
_INCOMPLETE_REASONS = {
    "max_output_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}

# The request parameters the client may leave out when the server refuses them (see
# the module's docstring), by the name a 400 gives them in its ``param``.
_OPTIONAL_PARAMS = frozenset({"include", "reasoning.summary"})

# The kinds of item ``reasoning_state`` keeps.
_KEPT_ITEMS = ("reasoning", "function_call")


def to_responses_input(messages: Iterable[Message]) -> tuple[str, ResponseInputParam]:
    """The ``instructions`` (the system messages, joined in order) and the input
    items of a conversation."""
    instructions: list[str] = []
    items: ResponseInputParam = []
    for message in messages:
        if message.role == "system":
            if message.content:
                instructions.append(message.content)
        elif message.role == "user":
            items.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            items.extend(_assistant_items(message))
        elif message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content,
                }
            )
        else:
            raise ModelError(
                ErrorKind.INTERNAL, f"Cannot send a message with role {message.role!r} to a model."
            )
    return "\n\n".join(instructions), items


def _assistant_items(message: Message) -> ResponseInputParam:
    items: ResponseInputParam = []
    if message.content:
        # Before the reasoning, not after it: a reasoning item must be followed by
        # the call it led to.
        items.append({"role": "assistant", "content": message.content})
    reasoning_items = [item for item in message.reasoning_state if item.get("type") == "reasoning"]
    reasoning = [kept for item in reasoning_items if (kept := _reasoning_param(item))]
    items.extend(reasoning)
    # A call's item id asks the API for the reasoning before it: only when all of
    # that reasoning goes along.
    item_ids: dict[str, str] = {}
    if len(reasoning) == len(reasoning_items):
        item_ids = {
            str(item.get("call_id")): item["id"]
            for item in message.reasoning_state
            if item.get("type") == "function_call" and isinstance(item.get("id"), str)
        }
    for call in message.tool_calls:
        param: ResponseFunctionToolCallParam = {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.arguments),
        }
        if call.id in item_ids:
            param["id"] = item_ids[call.id]
        items.append(param)
    return items


def _reasoning_param(item: Mapping[str, Any]) -> ResponseReasoningItemParam | None:
    """A reasoning item kept in ``reasoning_state``, as the API takes it back;
    ``None`` when it carries nothing the API could read without having stored it."""
    encrypted = item.get("encrypted_content")
    content: list[ReasoningContentParam] = [
        {"type": "reasoning_text", "text": str(part.get("text", ""))}
        for part in item.get("content") or ()
        if isinstance(part, Mapping)
    ]
    if not isinstance(item.get("id"), str) or not (encrypted or content):
        return None
    param: ResponseReasoningItemParam = {
        "type": "reasoning",
        "id": item["id"],
        "summary": [
            {"type": "summary_text", "text": str(part.get("text", ""))}
            for part in item.get("summary") or ()
            if isinstance(part, Mapping)
        ],
    }
    if encrypted:
        param["encrypted_content"] = str(encrypted)
    if content:
        param["content"] = content
    return param


def to_responses_tools(tools: Iterable[ToolSpec]) -> list[FunctionToolParam]:
    """The tools as function tools. Not strict: strict mode wants every property
    required and no others allowed, which goaai's tool schemas do not promise."""
    return [
        {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
            "strict": False,
        }
        for spec in tools
    ]


@dataclass
class _PartialCall:
    call_id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _Reply:
    """What the stream has said so far."""

    text: str = ""
    # The server answered with an event stream (the request itself went through).
    opened: bool = False
    events: int = 0
    # The final response, from response.completed or response.incomplete (then
    # ``incomplete``).
    final: Response | None = None
    incomplete: bool = False
    # Function calls, and the items reasoning_state keeps, by output_index.
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Reasoning text by (output_index, summary 0 or reasoning text 1, part index).
    reasoning: dict[tuple[int, int, int], str] = field(default_factory=dict)


class OpenAIResponsesModel:
    """A model behind OpenAI's Responses API, named ``<profile>:<model>`` in an
    agent's settings."""

    def __init__(self, model: str, *, profile: ModelProfile) -> None:
        self.model = model
        self.profile = profile
        self.name = f"{profile.name}:{model}"
        self.timeout = profile.timeout_seconds
        self._client = openai.OpenAI(**sdk_options(profile))
        # The optional parameters this server refused (replaced whole, never
        # changed in place, so that threads sharing the client may read it).
        self._declined: frozenset[str] = frozenset()

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        """Stream one reply. Provider failures are raised as :class:`ModelError`;
        an exception from ``on_delta`` is the caller's and passes through."""
        settings = request.settings
        reply = _Reply()
        try:
            stream = self._open(request)
            reply.opened = True
            with stream:
                for event in stream:
                    self._absorb(event, reply, on_delta)
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise self._translate(exc, reply, settings) from exc

        if reply.final is None:
            if reply.events == 0:
                # The SDK reads a plain JSON answer as an empty event stream.
                raise ModelError(
                    ErrorKind.INTERNAL,
                    f"{self.name}: the server sent no streamed events; "
                    "does it support stream=True on /responses?",
                )
            # Cut off (a proxy's timeout, a server restarting) after some events: what
            # arrived may be half an answer or half a tool call.
            raise incomplete_error(self.name, "no response.completed or response.incomplete event.")
        return self._reply(reply, reply.final)

    def _open(self, request: ModelRequest) -> Stream[ResponseStreamEvent]:
        """The event stream of one request, asked again without each optional
        parameter the server refuses."""
        settings = request.settings
        instructions, items = to_responses_input(request.messages)
        while True:
            declined = self._declined
            try:
                return self._client.responses.create(
                    model=self.model,
                    input=items,
                    instructions=instructions or openai.omit,
                    # An empty tool list says nothing; no tools means no key.
                    tools=to_responses_tools(request.tools) if request.tools else openai.omit,
                    stream=True,
                    store=False,
                    include=(
                        ["reasoning.encrypted_content"]
                        if "include" not in declined
                        else openai.omit
                    ),
                    reasoning=_reasoning(settings, summary="reasoning.summary" not in declined),
                    max_output_tokens=(
                        settings.max_output_tokens
                        if settings.max_output_tokens is not None
                        else openai.omit
                    ),
                    temperature=(
                        settings.temperature if settings.temperature is not None else openai.omit
                    ),
                    timeout=(
                        settings.timeout_seconds
                        if settings.timeout_seconds is not None
                        else openai.not_given
                    ),
                )
            except openai.BadRequestError as exc:
                refused = _refused_param(exc.body)
                if refused not in _OPTIONAL_PARAMS or refused in declined:
                    raise
                self._declined = declined | {refused}

    def _absorb(
        self, event: ResponseStreamEvent, reply: _Reply, on_delta: DeltaCallback | None
    ) -> None:
        reply.events += 1
        if isinstance(event, ResponseTextDeltaEvent | ResponseRefusalDeltaEvent):
            if event.delta:
                reply.text += event.delta
                if on_delta is not None:
                    on_delta(event.delta)
        elif isinstance(event, ResponseOutputItemAddedEvent | ResponseOutputItemDoneEvent):
            _absorb_item(event, reply)
        elif isinstance(
            event, ResponseFunctionCallArgumentsDeltaEvent | ResponseFunctionCallArgumentsDoneEvent
        ):
            _absorb_arguments(event, reply)
        elif isinstance(
            event, ResponseReasoningSummaryTextDeltaEvent | ResponseReasoningTextDeltaEvent
        ):
            _absorb_reasoning(event, reply)
        elif isinstance(event, ResponseCompletedEvent | ResponseIncompleteEvent):
            reply.final = event.response
            reply.incomplete = isinstance(event, ResponseIncompleteEvent)
        elif isinstance(event, ResponseFailedEvent):
            error = event.response.error
            body = error.to_dict(mode="json", exclude_none=True) if error is not None else {}
            raise status_error(self.name, 200, body)
        elif isinstance(event, ResponseErrorEvent):
            # The documented shape; the API has also been seen to nest these fields
            # under "error", which the SDK raises as an APIError (see _translate).
            raise status_error(
                self.name, 200, {"code": event.code, "message": event.message, "param": event.param}
            )

    def _reply(self, reply: _Reply, final: Response) -> ModelReply:
        calls = tuple(
            ToolCallRequest(
                id=call.call_id, name=call.name, arguments=parse_tool_arguments(call.arguments)
            )
            for _, call in sorted(reply.calls.items())
        )
        if reply.incomplete:
            reason = final.incomplete_details.reason if final.incomplete_details else None
            finish = _INCOMPLETE_REASONS.get(reason or "", FinishReason.OTHER)
        else:
            finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
        return ModelReply(
            text=reply.text,
            tool_calls=calls,
            usage=_usage(final.usage),
            # Typed as always there, but a compatible server may leave it out.
            model=getattr(final, "model", None) or self.model,
            finish_reason=finish,
            reasoning="\n\n".join(text for _, text in sorted(reply.reasoning.items()) if text),
            reasoning_state=tuple(item for _, item in sorted(reply.items.items())),
        )

    def _timeout(self, settings: ModelSettings) -> float:
        return settings.timeout_seconds if settings.timeout_seconds is not None else self.timeout

    def _translate(
        self,
        exc: openai.OpenAIError | httpx2.TransportError,
        reply: _Reply,
        settings: ModelSettings,
    ) -> ModelError:
        return translate_openai_error(
            exc,
            name=self.name,
            base_url=str(self._client.base_url),
            timeout=self._timeout(settings),
            opened=reply.opened,
        )


def _absorb_item(
    event: ResponseOutputItemAddedEvent | ResponseOutputItemDoneEvent, reply: _Reply
) -> None:
    item = event.item
    if item.type == "function_call":
        call = reply.calls.setdefault(event.output_index, _PartialCall())
        call.call_id = item.call_id or call.call_id
        call.name = item.name or call.name
        if isinstance(event, ResponseOutputItemDoneEvent):
            # The whole call: it wins over the fragments that built it.
            call.arguments = item.arguments
    if isinstance(event, ResponseOutputItemDoneEvent) and item.type in _KEPT_ITEMS:
        # The done item, not the added one: only its encrypted content is whole.
        reply.items[event.output_index] = item.to_dict(mode="json", exclude_none=True)


def _absorb_arguments(
    event: ResponseFunctionCallArgumentsDeltaEvent | ResponseFunctionCallArgumentsDoneEvent,
    reply: _Reply,
) -> None:
    call = reply.calls.setdefault(event.output_index, _PartialCall())
    if isinstance(event, ResponseFunctionCallArgumentsDoneEvent):
        call.arguments = event.arguments
    else:
        call.arguments += event.delta


def _absorb_reasoning(
    event: ResponseReasoningSummaryTextDeltaEvent | ResponseReasoningTextDeltaEvent,
    reply: _Reply,
) -> None:
    if isinstance(event, ResponseReasoningSummaryTextDeltaEvent):
        key = (event.output_index, 0, event.summary_index)
    else:
        key = (event.output_index, 1, event.content_index)
    reply.reasoning[key] = reply.reasoning.get(key, "") + event.delta


def _reasoning(settings: ModelSettings, *, summary: bool) -> Reasoning | openai.Omit:
    if settings.reasoning_effort is None:
        return openai.omit
    reasoning: Reasoning = {"effort": cast(ReasoningEffort, settings.reasoning_effort)}
    if summary:
        reasoning["summary"] = "auto"
    return reasoning


def _refused_param(body: object) -> str:
    """The request parameter a 400's error body names, or ``""``."""
    if not isinstance(body, Mapping):
        return ""
    inner = body.get("error")
    source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
    param = source.get("param")
    return param if isinstance(param, str) else ""


def _usage(usage: ResponseUsage | None) -> Usage:
    if usage is None:
        return Usage()
    # Servers leave some details out (OpenAI itself sends no cache writes); the SDK
    # then has no attribute at all.
    prompt_details = getattr(usage, "input_tokens_details", None)
    cached = getattr(prompt_details, "cached_tokens", None) or 0
    cache_write = getattr(prompt_details, "cache_write_tokens", None) or 0
    output_details = getattr(usage, "output_tokens_details", None)
    prompt = getattr(usage, "input_tokens", None) or 0
    return Usage(
        input_tokens=max(0, prompt - cached - cache_write),
        output_tokens=getattr(usage, "output_tokens", None) or 0,
        cached_input_tokens=cached,
        cache_write_tokens=cache_write,
        reasoning_tokens=getattr(output_details, "reasoning_tokens", None) or 0,
    )
