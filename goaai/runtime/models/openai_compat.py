"""A client for any server that speaks OpenAI's Chat Completions API.

That is OpenAI itself and, through ``base_url``, Ollama, vLLM, llama.cpp and most
self-hosted servers. Replies are always streamed: text reaches ``on_delta`` as it is
generated, tool calls are assembled from their fragments, and the token usage comes
from the final chunk (``stream_options.include_usage``).
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
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

from goaai.runtime.errors import ModelError
from goaai.runtime.models.base import DeltaCallback, ModelRequest, ToolSpec
from goaai.runtime.models.errors import (
    connection_error,
    parse_tool_arguments,
    status_error,
    timeout_error,
    unexpected_error,
)
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, Usage
from goaai.runtime.vocabulary import ErrorKind


def to_openai_messages(messages: Iterable[Message]) -> list[ChatCompletionMessageParam]:
    """goaai messages in the Chat Completions shape; tool call arguments as JSON text."""
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
    """A tool call while its fragments arrive; every field is concatenated, as the
    SDK's own accumulator does."""

    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _Reply:
    """What the stream has said so far."""

    text: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    chunks: int = 0
    calls: dict[int, _PartialToolCall] = field(default_factory=dict)


class OpenAICompatibleModel:
    """A Chat Completions model, named ``openai:<model>`` in an agent's settings."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60,
        max_retries: int = 0,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.model = model
        self.name = f"openai:{model}"
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=base_url or None,
            timeout=timeout,
            max_retries=max_retries,
        )

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        """Stream one reply. Provider failures are raised as :class:`ModelError`;
        an exception from ``on_delta`` is the caller's and passes through."""
        reply = _Reply()
        try:
            stream = self._client.chat.completions.create(
                model=self.model,
                messages=to_openai_messages(request.messages),
                # An empty tool list is rejected by OpenAI; no tools means no key.
                tools=to_openai_tools(request.tools) if request.tools else openai.omit,
                stream=True,
                stream_options={"include_usage": True},
                temperature=self.temperature if self.temperature is not None else openai.omit,
                max_tokens=self.max_tokens if self.max_tokens is not None else openai.omit,
            )
            with stream:
                for chunk in stream:
                    self._absorb(chunk, reply, on_delta)
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        except httpx2.TimeoutException as exc:
            raise timeout_error(self.name, self.timeout) from exc
        except httpx2.TransportError as exc:
            raise connection_error(self.name, str(self._client.base_url), str(exc)) from exc

        if reply.chunks == 0:
            # The SDK reads a plain JSON answer as an empty event stream.
            raise ModelError(
                ErrorKind.INTERNAL,
                f"{self.name}: the server sent no streamed chunks; "
                "does it support stream=True on /chat/completions?",
            )
        return ModelReply(
            text=reply.text,
            tool_calls=tuple(
                ToolCallRequest(
                    id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                    name=call.name,
                    arguments=parse_tool_arguments(call.arguments),
                )
                for _, call in sorted(reply.calls.items())
            ),
            usage=Usage(reply.input_tokens, reply.output_tokens),
            model=reply.model or self.model,
        )

    def _absorb(
        self, chunk: ChatCompletionChunk, reply: _Reply, on_delta: DeltaCallback | None
    ) -> None:
        reply.chunks += 1
        if chunk.model and not reply.model:
            reply.model = chunk.model
        if chunk.usage is not None:
            reply.input_tokens = chunk.usage.prompt_tokens
            reply.output_tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            # A refusal is what the model said instead of an answer.
            for piece in (delta.content, delta.refusal):
                if piece:
                    reply.text += piece
                    if on_delta is not None:
                        on_delta(piece)
            for fragment in delta.tool_calls or ():
                call = reply.calls.setdefault(fragment.index, _PartialToolCall())
                call.id += fragment.id or ""
                if fragment.function is not None:
                    call.name += fragment.function.name or ""
                    call.arguments += fragment.function.arguments or ""

    def _translate(self, exc: openai.OpenAIError) -> ModelError:
        if isinstance(exc, openai.APITimeoutError):
            return timeout_error(self.name, self.timeout)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            return connection_error(
                self.name, str(self._client.base_url), str(cause) if cause else exc.message
            )
        if isinstance(exc, openai.APIStatusError):
            return status_error(
                self.name,
                exc.status_code,
                exc.body if exc.body is not None else exc.message,
                retry_after=exc.response.headers.get("retry-after"),
            )
        if isinstance(exc, openai.APIError):
            # An error object sent inside the stream, after a 200.
            return status_error(self.name, 200, exc.body if exc.body is not None else exc.message)
        return unexpected_error(self.name, exc)
