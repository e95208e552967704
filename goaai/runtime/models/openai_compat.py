"""A client for any server that speaks OpenAI's Chat Completions API.

That is OpenAI itself and, through ``base_url``, Ollama, vLLM, llama.cpp and most
self-hosted servers. Replies are always streamed: text reaches ``on_delta`` as it is
generated, tool calls are assembled from their fragments, and the token usage comes
from the chunk that carries it (``stream_options.include_usage``).

Compatible servers stream the same reply in different shapes, and this client reads
all of them:

* Tool call fragments. OpenAI sends each call's id and name once, then argument
  fragments under the call's ``index``. Ollama sends every call whole in its own
  chunk, all of them at ``index`` 0; some servers leave ``index`` out, some resend
  the id and name with every fragment, vLLM may send no id at all. A fragment
  starts a new call when it carries an id other than the current call's at that
  index, or (without an id) a name while the current call already has a name and
  arguments that look whole; anything else continues the latest call. A call left
  without an id gets one (``call_<24 hex>``).
* Reasoning. vLLM, llama.cpp and Ollama stream a thinking model's reasoning as
  ``reasoning_content`` (or ``reasoning``) deltas: it is kept apart in
  :attr:`ModelReply.reasoning`, never mixed into the answer nor sent to
  ``on_delta``. Chat Completions servers take no reasoning back, so the reply's
  ``reasoning_state`` stays empty and an assistant message's is not sent.
* Usage, in the last chunk (``choices: []``) or on the chunk with the
  ``finish_reason``; cached prompt tokens and reasoning tokens from its details.
* The end. A stream with tool calls is a ``tool_calls`` reply whatever
  ``finish_reason`` says (Ollama says ``stop``); a stream that ends without any
  ``finish_reason``, or whose connection breaks, is a retryable error rather than
  a reply cut short.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx2
import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

from goaai.runtime.config import ModelProfile
from goaai.runtime.errors import ModelError
from goaai.runtime.models.base import (
    DeltaCallback,
    ModelRequest,
    ModelSettings,
    ToolSpec,
    reporting_usage,
    sdk_options,
)
from goaai.runtime.models.errors import (
    connection_error,
    incomplete_error,
    parse_tool_arguments,
    retry_after_seconds,
    status_error,
    timeout_error,
    unexpected_error,
)
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, Usage
from goaai.runtime.vocabulary import ErrorKind, FinishReason


def to_openai_messages(messages: Iterable[Message]) -> list[ChatCompletionMessageParam]:
    """goaai messages in the Chat Completions shape; tool call arguments as JSON text.

    A failed tool's message goes as it is (the API has no error flag; its content
    says what went wrong), and an assistant message's ``reasoning_state`` is left
    out: Chat Completions servers reject fields they do not know.
    """
    converted: list[ChatCompletionMessageParam] = []
    for message in messages:
        if message.role == "system":
            converted.append({"role": "system", "content": message.content})
        elif message.role == "user":
            converted.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            assistant: ChatCompletionAssistantMessageParam = {"role": "assistant"}
            if message.tool_calls:
                # Content is null, not "", when the assistant only called tools: the
                # shape OpenAI itself returns, and the one compatible servers expect.
                assistant["content"] = message.content or None
                assistant["tool_calls"] = [_tool_call_param(call) for call in message.tool_calls]
            else:
                assistant["content"] = message.content
            converted.append(assistant)
        elif message.role == "tool":
            converted.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        else:
            raise ModelError(
                ErrorKind.INTERNAL, f"Cannot send a message with role {message.role!r} to a model."
            )
    return converted


def _tool_call_param(call: ToolCallRequest) -> ChatCompletionMessageFunctionToolCallParam:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


def to_openai_tools(tools: Iterable[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in tools
    ]


@dataclass
class _PartialToolCall:
    """A tool call while its fragments arrive. ``index`` is the one the server gave
    (``None`` when it gave none)."""

    index: int | None
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _Reply:
    """What the stream has said so far."""

    text: str = ""
    reasoning: str = ""
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    # The server answered with an event stream (the request itself went through).
    opened: bool = False
    chunks: int = 0
    calls: list[_PartialToolCall] = field(default_factory=list)


# The Chat Completions finish reasons in goaai's words; any other is ``other``.
_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}

# Where compatible servers put a reasoning model's thinking in a delta: vLLM,
# llama.cpp and DeepSeek say ``reasoning_content``, Ollama and newer vLLM ``reasoning``.
_REASONING_FIELDS = ("reasoning_content", "reasoning")


class OpenAICompatibleModel:
    """A Chat Completions model, named ``<profile>:<model>`` in an agent's settings."""

    def __init__(self, model: str, *, profile: ModelProfile) -> None:
        self.model = model
        self.profile = profile
        self.name = f"{profile.name}:{model}"
        self.timeout = profile.timeout_seconds
        self._client = openai.OpenAI(**sdk_options(profile))

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        """Stream one reply. Provider failures are raised as :class:`ModelError`;
        an exception from ``on_delta`` is the caller's and passes through."""
        reply = _Reply()
        with reporting_usage(lambda: reply.usage):
            return self._stream(request, on_delta, reply)

    def _stream(
        self, request: ModelRequest, on_delta: DeltaCallback | None, reply: _Reply
    ) -> ModelReply:
        settings = request.settings
        try:
            # Through the SDK's client (its connections, headers, event stream and
            # errors), with each chunk read as the JSON object it is: building the
            # SDK's typed chunks, and checking the request against its types, took
            # half the CPU of a streamed reply (bench/capacity.py).
            stream = self._client.post(
                "/chat/completions",
                body=_request_body(self.model, request),
                cast_to=object,
                options=(
                    {"timeout": settings.timeout_seconds}
                    if settings.timeout_seconds is not None
                    else {}
                ),
                stream=True,
                stream_cls=openai.Stream[object],
            )
            reply.opened = True
            with stream:
                for chunk in stream:
                    self._absorb(chunk, reply, on_delta)
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise self._translate(exc, reply, settings) from exc

        if reply.chunks == 0:
            # The SDK reads a plain JSON answer as an empty event stream.
            raise ModelError(
                ErrorKind.INTERNAL,
                f"{self.name}: the server sent no streamed chunks; "
                "does it support stream=True on /chat/completions?",
            )
        if reply.finish_reason is None:
            # Cut off (a proxy's timeout, a server restarting) after some chunks: what
            # arrived may be half an answer or half a tool call.
            raise incomplete_error(self.name, "no chunk said why the reply finished.")
        calls = tuple(
            ToolCallRequest(
                id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                name=call.name,
                arguments=parse_tool_arguments(call.arguments),
            )
            for call in reply.calls
        )
        finish = _FINISH_REASONS.get(reply.finish_reason, FinishReason.OTHER)
        if calls and finish == FinishReason.STOP:
            finish = FinishReason.TOOL_CALLS
        return ModelReply(
            text=reply.text,
            tool_calls=calls,
            usage=reply.usage,
            model=reply.model or self.model,
            finish_reason=finish,
            reasoning=reply.reasoning,
        )

    def _absorb(self, chunk: object, reply: _Reply, on_delta: DeltaCallback | None) -> None:
        if not isinstance(chunk, dict):
            raise ModelError(
                ErrorKind.INTERNAL,
                f"{self.name}: the server streamed a chunk that is not a JSON object: "
                f"{str(chunk)[:200]!r}",
            )
        reply.chunks += 1
        model = chunk.get("model")
        if model and isinstance(model, str) and not reply.model:
            reply.model = model
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            # Sent once, or (vLLM's continuous usage) growing with every chunk.
            reply.usage = _usage(usage)
        for choice in _objects(chunk.get("choices")):
            if (_int(choice.get("index")) or 0) != 0:
                continue
            finish_reason = choice.get("finish_reason")
            if finish_reason and isinstance(finish_reason, str):
                reply.finish_reason = finish_reason
            delta = choice.get("delta")
            if isinstance(delta, dict):
                _absorb_delta(delta, reply, on_delta)

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


def translate_openai_error(
    exc: openai.OpenAIError | httpx2.TransportError,
    *,
    name: str,
    base_url: str,
    timeout: float,
    opened: bool,
) -> ModelError:
    """The :class:`ModelError` for a failure of a call through the ``openai`` SDK,
    whichever of its APIs (Chat Completions, Responses) was called: what the SDK
    raised, or a transport error it let through while the stream was read;
    ``opened`` when the stream had begun."""
    if isinstance(exc, httpx2.TimeoutException):
        return timeout_error(name, timeout)
    if isinstance(exc, httpx2.TransportError):
        if opened:
            return incomplete_error(name, str(exc))
        return connection_error(name, base_url, str(exc))
    if isinstance(exc, openai.APITimeoutError):
        return timeout_error(name, timeout)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = str(cause) if cause else exc.message
        if opened:
            # The SDK reports a connection that broke mid-stream the same way as
            # one that could not be made.
            return incomplete_error(name, detail)
        return connection_error(name, base_url, detail)
    if isinstance(exc, openai.APIStatusError):
        return status_error(
            name,
            exc.status_code,
            exc.body if exc.body is not None else exc.message,
            retry_after=retry_after_seconds(exc.response.headers),
        )
    if isinstance(exc, openai.APIError):
        # An error sent inside the stream, after the 200 (Chat Completions' error
        # object, or a Responses error event with its fields nested under "error").
        return status_error(name, 200, exc.body if exc.body is not None else exc.message)
    return unexpected_error(name, exc)


def _absorb_delta(delta: dict[str, object], reply: _Reply, on_delta: DeltaCallback | None) -> None:
    reply.reasoning += _reasoning(delta)
    # A refusal is what the model said instead of an answer.
    for piece in (delta.get("content"), delta.get("refusal")):
        if piece and isinstance(piece, str):
            reply.text += piece
            if on_delta is not None:
                on_delta(piece)
    for fragment in _objects(delta.get("tool_calls")):
        _absorb_tool_call(reply.calls, fragment)


def _absorb_tool_call(calls: list[_PartialToolCall], fragment: dict[str, object]) -> None:
    """Add one streamed tool call fragment to the calls assembled so far."""
    # Always there in OpenAI's stream, but some servers leave it out.
    index = _int(fragment.get("index"))
    call_id = _str(fragment.get("id"))
    function = fragment.get("function")
    function = function if isinstance(function, dict) else {}
    name = _str(function.get("name"))
    arguments = _str(function.get("arguments"))
    current = _latest_call(calls, index)
    if current is None or _starts_new_call(current, call_id, name):
        current = _PartialToolCall(index=index)
        calls.append(current)
    # An id or name sent again is the same call's, not more of it.
    if call_id and not current.id:
        current.id = call_id
    if name and not current.name:
        current.name = name
    current.arguments += arguments


def _objects(value: object) -> list[dict[str, object]]:
    """The JSON objects of a list in a chunk (none if it is not a list)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _latest_call(calls: list[_PartialToolCall], index: int | None) -> _PartialToolCall | None:
    """The call a fragment continues unless it starts one: the latest at its index,
    or the latest of all for a fragment without an index."""
    if index is None:
        return calls[-1] if calls else None
    return next((call for call in reversed(calls) if call.index == index), None)


def _starts_new_call(current: _PartialToolCall, call_id: str, name: str) -> bool:
    if call_id and current.id:
        return call_id != current.id
    if not name or not current.name:
        return False
    # Without ids to go by: a name once the arguments look whole is the next call
    # (the same name resent with every fragment of one call is not), and so is
    # another name when the current call has no arguments at all.
    if _looks_whole(current.arguments):
        return True
    return name != current.name and not current.arguments.strip()


def _looks_whole(arguments: str) -> bool:
    if not arguments.strip():
        return False
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


def _reasoning(delta: dict[str, object]) -> str:
    """The reasoning text a compatible server put in a delta, or ``""``."""
    for name in _REASONING_FIELDS:
        value = delta.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _usage(usage: dict[str, object]) -> Usage:
    """Chat Completions' ``usage`` object, the cached and cache-write tokens out of
    the input (``prompt_tokens`` counts them)."""
    prompt = _int(usage.get("prompt_tokens")) or 0
    prompt_details = usage.get("prompt_tokens_details")
    prompt_details = prompt_details if isinstance(prompt_details, dict) else {}
    cached = _int(prompt_details.get("cached_tokens")) or 0
    cache_write = _int(prompt_details.get("cache_write_tokens")) or 0
    completion_details = usage.get("completion_tokens_details")
    completion_details = completion_details if isinstance(completion_details, dict) else {}
    return Usage(
        input_tokens=max(0, prompt - cached - cache_write),
        output_tokens=_int(usage.get("completion_tokens")) or 0,
        cached_input_tokens=cached,
        cache_write_tokens=cache_write,
        reasoning_tokens=_int(completion_details.get("reasoning_tokens")) or 0,
    )


def _request_body(model: str, request: ModelRequest) -> dict[str, object]:
    """The JSON body of a streamed Chat Completions request; a setting left unset
    is left out (the server's default)."""
    settings = request.settings
    body: dict[str, object] = {
        "model": model,
        "messages": to_openai_messages(request.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        # An empty tool list is rejected by OpenAI; no tools means no key.
        body["tools"] = to_openai_tools(request.tools)
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.max_output_tokens is not None:
        # ``max_tokens`` rather than OpenAI's newer ``max_completion_tokens``:
        # Ollama, vLLM and llama.cpp all read it, and OpenAI still does.
        body["max_tokens"] = settings.max_output_tokens
    if settings.reasoning_effort is not None:
        body["reasoning_effort"] = settings.reasoning_effort
    return body
