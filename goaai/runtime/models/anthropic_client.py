"""A client for Anthropic's Messages API.

Replies are always streamed and read as the API's raw events: ``message_start``
carries the model and the input tokens, each content block (text or ``tool_use``)
is opened, filled by deltas and closed, and ``message_delta`` carries the output
tokens. System messages travel in the ``system`` parameter, tool results as
``tool_result`` blocks of a user message, as the API requires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
from anthropic.types import (
    ContentBlockParam,
    MessageParam,
    RawMessageStreamEvent,
    ToolParam,
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


def to_anthropic_messages(messages: Iterable[Message]) -> tuple[str, list[MessageParam]]:
    """The ``system`` text and the conversation in the Messages API's shape.

    Consecutive messages of one role become one message: the ``tool_result`` blocks
    answering one assistant turn must arrive together in a single user message.
    Empty text is left out, as the API rejects empty text blocks.
    """
    system: list[str] = []
    turns: list[tuple[str, list[ContentBlockParam]]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
            continue
        if message.role not in _BLOCKS:
            raise ModelError(
                ErrorKind.INTERNAL, f"Cannot send a message with role {message.role!r} to a model."
            )
        role, blocks_of = _BLOCKS[message.role]
        blocks = blocks_of(message)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return "\n\n".join(system), [_message_param(role, blocks) for role, blocks in turns]


def _user_blocks(message: Message) -> list[ContentBlockParam]:
    return [{"type": "text", "text": message.content}] if message.content else []


def _assistant_blocks(message: Message) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in message.tool_calls
    )
    return blocks


def _tool_result_blocks(message: Message) -> list[ContentBlockParam]:
    return [
        {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
    ]


# The API's role for each of goaai's (a tool's result is the user's to send), and the
# blocks a message of that role becomes.
_BLOCKS: dict[str, tuple[str, Callable[[Message], list[ContentBlockParam]]]] = {
    "user": ("user", _user_blocks),
    "assistant": ("assistant", _assistant_blocks),
    "tool": ("user", _tool_result_blocks),
}


def _message_param(role: str, blocks: list[ContentBlockParam]) -> MessageParam:
    if role == "user":
        return {"role": "user", "content": blocks}
    return {"role": "assistant", "content": blocks}


def to_anthropic_tools(tools: Iterable[ToolSpec]) -> list[ToolParam]:
    return [
        {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}
        for spec in tools
    ]


@dataclass
class _PartialToolUse:
    id: str
    name: str
    # The input given when the block opened; used when no JSON deltas follow.
    initial: dict[str, Any]
    partial_json: str = ""


@dataclass
class _Reply:
    """What the stream has said so far."""

    text: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    started: bool = False
    tool_uses: dict[int, _PartialToolUse] = field(default_factory=dict)


class AnthropicModel:
    """A Claude model, named ``anthropic:<model>`` in an agent's settings."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60,
        max_retries: int = 0,
        max_tokens: int = 1024,
        temperature: float | None = None,
    ) -> None:
        self.model = model
        self.name = f"anthropic:{model}"
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._client = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url or None,
            timeout=timeout,
            max_retries=max_retries,
        )

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        """Stream one reply. Provider failures are raised as :class:`ModelError`;
        an exception from ``on_delta`` is the caller's and passes through."""
        system, messages = to_anthropic_messages(request.messages)
        reply = _Reply()
        try:
            stream = self._client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=messages,
                system=system or anthropic.omit,
                tools=to_anthropic_tools(request.tools) if request.tools else anthropic.omit,
                # This SDK has no ``temperature`` argument any more; the API still
                # takes it for the models that support sampling settings.
                extra_body=(
                    {"temperature": self.temperature} if self.temperature is not None else None
                ),
                stream=True,
            )
            with stream:
                for event in stream:
                    self._absorb(event, reply, on_delta)
        except anthropic.AnthropicError as exc:
            raise self._translate(exc) from exc
        # The SDK passes transport errors raised while reading the stream through
        # unwrapped; before the first byte they arrive as APITimeoutError and
        # APIConnectionError instead.
        except httpx2.TimeoutException as exc:
            raise timeout_error(self.name, self.timeout) from exc
        except httpx2.TransportError as exc:
            raise connection_error(self.name, str(self._client.base_url), str(exc)) from exc

        if not reply.started:
            raise ModelError(
                ErrorKind.INTERNAL, f"{self.name}: the server sent no message_start event."
            )
        return ModelReply(
            text=reply.text,
            tool_calls=tuple(
                ToolCallRequest(
                    id=use.id,
                    name=use.name,
                    arguments=(
                        parse_tool_arguments(use.partial_json)
                        if use.partial_json
                        else dict(use.initial)
                    ),
                )
                for _, use in sorted(reply.tool_uses.items())
            ),
            usage=Usage(reply.input_tokens, reply.output_tokens),
            model=reply.model or self.model,
        )

    def _absorb(
        self, event: RawMessageStreamEvent, reply: _Reply, on_delta: DeltaCallback | None
    ) -> None:
        if event.type == "message_start":
            reply.started = True
            reply.model = event.message.model or ""
            started = event.message.usage
            reply.input_tokens = _prompt_tokens(
                started.input_tokens,
                started.cache_creation_input_tokens,
                started.cache_read_input_tokens,
            )
            reply.output_tokens = started.output_tokens
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "text" and block.text:
                self._say(block.text, reply, on_delta)
            elif block.type == "tool_use":
                reply.tool_uses[event.index] = _PartialToolUse(
                    id=block.id, name=block.name, initial=dict(block.input)
                )
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                self._say(delta.text, reply, on_delta)
            elif delta.type == "input_json_delta" and event.index in reply.tool_uses:
                reply.tool_uses[event.index].partial_json += delta.partial_json
        elif event.type == "message_delta":
            # Both counts are cumulative; input_tokens is only sent by newer servers.
            so_far = event.usage
            reply.output_tokens = so_far.output_tokens
            if so_far.input_tokens is not None:
                reply.input_tokens = _prompt_tokens(
                    so_far.input_tokens,
                    so_far.cache_creation_input_tokens,
                    so_far.cache_read_input_tokens,
                )
        # content_block_stop and message_stop close what is already complete, and
        # thinking or server-tool blocks are not part of goaai's reply.

    @staticmethod
    def _say(text: str, reply: _Reply, on_delta: DeltaCallback | None) -> None:
        if not text:
            return
        reply.text += text
        if on_delta is not None:
            on_delta(text)

    def _translate(self, exc: anthropic.AnthropicError) -> ModelError:
        if isinstance(exc, anthropic.APITimeoutError):
            return timeout_error(self.name, self.timeout)
        if isinstance(exc, anthropic.APIConnectionError):
            cause = exc.__cause__
            return connection_error(
                self.name, str(self._client.base_url), str(cause) if cause else exc.message
            )
        if isinstance(exc, anthropic.APIStatusError):
            # An ``error`` event inside a stream arrives as a status error carrying
            # the stream's 200; status_error then goes by the body's error type.
            return status_error(
                self.name,
                exc.status_code,
                exc.body if exc.body is not None else exc.message,
                retry_after=exc.response.headers.get("retry-after"),
            )
        return unexpected_error(self.name, exc)


def _prompt_tokens(plain: int, cache_write: int | None, cache_read: int | None) -> int:
    # Anthropic counts cached prompt tokens apart from input_tokens; the prompt the
    # model read is all three.
    return plain + (cache_write or 0) + (cache_read or 0)
