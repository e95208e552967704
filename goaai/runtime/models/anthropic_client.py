"""A client for Anthropic's Messages API.

Replies are always streamed and read as the API's raw events: ``message_start``
carries the model and the prompt's token counts, each content block (text,
``tool_use``, ``thinking`` or ``redacted_thinking``) is opened, filled by deltas and
closed, ``message_delta`` carries the stop reason and the cumulative counts, and
``message_stop`` ends the reply. A stream that ends before ``message_stop`` (the
connection broke, a proxy gave up) is a retryable error, never a reply cut short.
System messages travel in the ``system`` parameter, tool results as ``tool_result``
blocks of a user message (``is_error`` when the tool failed), as the API requires.

Thinking. An agent's ``reasoning_effort`` turns on extended thinking with a budget
of tokens for it (:data:`THINKING_BUDGETS`); the reply's cap grows by that budget
when it would not leave room for an answer, and no temperature is sent (the API
takes none with thinking). The thinking text is the reply's ``reasoning``; each
block, signed or redacted, is kept as the API sent it in ``reasoning_state`` and
goes back first in that assistant message's content on the next turn, as the API
requires when tool use follows thinking.

Prompt caching. Every request marks two cache breakpoints
(``cache_control: {"type": "ephemeral"}``): the last tool definition, and the first
system block. The contract with the turn loop: the first system message is the
agent's stable prompt, the same on every turn and every run; whatever changes from
run to run (the facts the agent remembers) comes in later system messages, which
become later system blocks after the breakpoint, so they never spoil the cached
prefix of tools and stable prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
from anthropic.types import (
    ContentBlock,
    ContentBlockParam,
    MessageParam,
    RawContentBlockDelta,
    RawMessageStreamEvent,
    TextBlockParam,
    ThinkingConfigParam,
    ToolParam,
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

# The Messages API requires a cap on the reply; this one when the agent sets none.
DEFAULT_MAX_TOKENS = 4096

# Tokens of extended thinking for each reasoning effort (the API's minimum is 1024).
THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}

# The API's stop reasons in goaai's words; any other is ``other``.
_STOP_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
}


def to_anthropic_messages(
    messages: Iterable[Message],
) -> tuple[list[TextBlockParam], list[MessageParam]]:
    """The ``system`` blocks and the conversation in the Messages API's shape.

    Each system message is one system block, the first marked as a cache
    breakpoint (see the module's docstring). Consecutive messages of one role
    become one message: the ``tool_result`` blocks answering one assistant turn must
    arrive together in a single user message. Empty text is left out, as the API
    rejects empty text blocks.
    """
    system: list[TextBlockParam] = []
    turns: list[tuple[str, list[ContentBlockParam]]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system.append({"type": "text", "text": message.content})
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
    if system:
        system[0]["cache_control"] = {"type": "ephemeral"}
    return system, [_message_param(role, blocks) for role, blocks in turns]


def _user_blocks(message: Message) -> list[ContentBlockParam]:
    return [{"type": "text", "text": message.content}] if message.content else []


def _assistant_blocks(message: Message) -> list[ContentBlockParam]:
    # Thinking first: the API wants the turn's thinking blocks back, unchanged and
    # ahead of the text and tool use they led to.
    blocks = [block for item in message.reasoning_state if (block := _thinking_param(item))]
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in message.tool_calls
    )
    return blocks


def _thinking_param(item: Mapping[str, Any]) -> ContentBlockParam | None:
    """A thinking block kept in ``reasoning_state``, as the API takes it back;
    ``None`` for items of another provider's."""
    if item.get("type") == "thinking":
        return {
            "type": "thinking",
            "thinking": str(item.get("thinking", "")),
            "signature": str(item.get("signature", "")),
        }
    if item.get("type") == "redacted_thinking":
        return {"type": "redacted_thinking", "data": str(item.get("data", ""))}
    return None


def _tool_result_blocks(message: Message) -> list[ContentBlockParam]:
    if message.is_error:
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
                "is_error": True,
            }
        ]
    return [
        {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
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
    """The tools as the API takes them; the last one is a cache breakpoint, so that
    the tool definitions are read from the prompt cache on later turns."""
    converted: list[ToolParam] = [
        {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}
        for spec in tools
    ]
    if converted:
        converted[-1]["cache_control"] = {"type": "ephemeral"}
    return converted


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
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    thinking_tokens: int = 0
    stop_reason: str | None = None
    started: bool = False
    # The server answered with an event stream (the request itself went through).
    opened: bool = False
    stopped: bool = False
    tool_uses: dict[int, _PartialToolUse] = field(default_factory=dict)
    # Thinking and redacted thinking blocks by index, as the API's own dicts.
    thinking: dict[int, dict[str, str]] = field(default_factory=dict)

    def usage(self) -> Usage:
        """The counts the stream has reported so far."""
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_input_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
            reasoning_tokens=self.thinking_tokens,
        )

    def count_prompt(
        self, plain: int | None, cache_write: int | None, cache_read: int | None
    ) -> None:
        # Each count is the whole so far; one missing from an event is unchanged.
        if plain is not None:
            self.input_tokens = plain
        if cache_write is not None:
            self.cache_write_tokens = cache_write
        if cache_read is not None:
            self.cache_read_tokens = cache_read


class AnthropicModel:
    """A Claude model, named ``<profile>:<model>`` in an agent's settings."""

    def __init__(self, model: str, *, profile: ModelProfile) -> None:
        self.model = model
        self.profile = profile
        self.name = f"{profile.name}:{model}"
        self.timeout = profile.timeout_seconds
        self._client = anthropic.Anthropic(**sdk_options(profile))

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        """Stream one reply. Provider failures are raised as :class:`ModelError`;
        an exception from ``on_delta`` is the caller's and passes through."""
        reply = _Reply()
        with reporting_usage(reply.usage):
            return self._stream(request, on_delta, reply)

    def _stream(
        self, request: ModelRequest, on_delta: DeltaCallback | None, reply: _Reply
    ) -> ModelReply:
        settings = request.settings
        system, messages = to_anthropic_messages(request.messages)
        budget = THINKING_BUDGETS.get(settings.reasoning_effort or "")
        max_tokens = settings.max_output_tokens or DEFAULT_MAX_TOKENS
        thinking: ThinkingConfigParam | anthropic.Omit = anthropic.omit
        if budget is not None:
            thinking = {"type": "enabled", "budget_tokens": budget}
            if max_tokens <= budget:
                # The cap counts the thinking too: leave the answer its own share.
                max_tokens += budget
        try:
            stream = self._client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                messages=messages,
                system=system or anthropic.omit,
                tools=to_anthropic_tools(request.tools) if request.tools else anthropic.omit,
                thinking=thinking,
                # This SDK has no ``temperature`` argument any more; the API still
                # takes it for the models that support sampling settings, but never
                # with thinking on.
                extra_body=(
                    {"temperature": settings.temperature}
                    if settings.temperature is not None and budget is None
                    else None
                ),
                stream=True,
                timeout=(
                    settings.timeout_seconds
                    if settings.timeout_seconds is not None
                    else anthropic.not_given
                ),
            )
            reply.opened = True
            with stream:
                for event in stream:
                    self._absorb(event, reply, on_delta)
        except anthropic.AnthropicError as exc:
            raise self._translate(exc, reply, settings) from exc
        # Depending on the SDK's version, transport errors raised while reading the
        # stream pass through unwrapped or arrive as APIConnectionError (as they
        # always do before the first byte).
        except httpx2.TimeoutException as exc:
            raise timeout_error(self.name, self._timeout(settings)) from exc
        except httpx2.TransportError as exc:
            if reply.opened:
                raise incomplete_error(self.name, str(exc)) from exc
            raise connection_error(self.name, str(self._client.base_url), str(exc)) from exc

        if not reply.started:
            raise ModelError(
                ErrorKind.INTERNAL, f"{self.name}: the server sent no message_start event."
            )
        if not reply.stopped:
            raise incomplete_error(self.name, "no message_stop event.")
        return self._reply(reply)

    def _reply(self, reply: _Reply) -> ModelReply:
        thinking = [block for _, block in sorted(reply.thinking.items())]
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
            usage=reply.usage(),
            model=reply.model or self.model,
            finish_reason=_STOP_REASONS.get(reply.stop_reason or "", FinishReason.OTHER),
            reasoning="\n\n".join(block["thinking"] for block in thinking if block.get("thinking")),
            reasoning_state=tuple(thinking),
        )

    def _absorb(
        self, event: RawMessageStreamEvent, reply: _Reply, on_delta: DeltaCallback | None
    ) -> None:
        if event.type == "message_start":
            reply.started = True
            reply.model = event.message.model or ""
            started = event.message.usage
            reply.count_prompt(
                started.input_tokens,
                started.cache_creation_input_tokens,
                started.cache_read_input_tokens,
            )
            reply.output_tokens = started.output_tokens
        elif event.type == "content_block_start":
            self._open_block(event.index, event.content_block, reply, on_delta)
        elif event.type == "content_block_delta":
            self._absorb_delta(event.index, event.delta, reply, on_delta)
        elif event.type == "message_delta":
            reply.stop_reason = event.delta.stop_reason or reply.stop_reason
            # Cumulative counts; the prompt's are only sent by newer servers.
            so_far = event.usage
            reply.output_tokens = so_far.output_tokens
            reply.count_prompt(
                so_far.input_tokens,
                so_far.cache_creation_input_tokens,
                so_far.cache_read_input_tokens,
            )
            if so_far.output_tokens_details is not None:
                reply.thinking_tokens = so_far.output_tokens_details.thinking_tokens
        elif event.type == "message_stop":
            reply.stopped = True
        # content_block_stop closes what is already complete, and server-tool blocks
        # are not part of goaai's reply.

    def _open_block(
        self, index: int, block: ContentBlock, reply: _Reply, on_delta: DeltaCallback | None
    ) -> None:
        if block.type == "text" and block.text:
            self._say(block.text, reply, on_delta)
        elif block.type == "tool_use":
            reply.tool_uses[index] = _PartialToolUse(
                id=block.id, name=block.name, initial=dict(block.input)
            )
        elif block.type == "thinking":
            reply.thinking[index] = {
                "type": "thinking",
                "thinking": block.thinking or "",
                "signature": block.signature or "",
            }
        elif block.type == "redacted_thinking":
            reply.thinking[index] = {"type": "redacted_thinking", "data": block.data}

    def _absorb_delta(
        self,
        index: int,
        delta: RawContentBlockDelta,
        reply: _Reply,
        on_delta: DeltaCallback | None,
    ) -> None:
        if delta.type == "text_delta":
            self._say(delta.text, reply, on_delta)
        elif delta.type == "input_json_delta" and index in reply.tool_uses:
            reply.tool_uses[index].partial_json += delta.partial_json
        elif delta.type == "thinking_delta" and index in reply.thinking:
            reply.thinking[index]["thinking"] += delta.thinking
        elif delta.type == "signature_delta" and index in reply.thinking:
            reply.thinking[index]["signature"] += delta.signature

    @staticmethod
    def _say(text: str, reply: _Reply, on_delta: DeltaCallback | None) -> None:
        if not text:
            return
        reply.text += text
        if on_delta is not None:
            on_delta(text)

    def _timeout(self, settings: ModelSettings) -> float:
        return settings.timeout_seconds if settings.timeout_seconds is not None else self.timeout

    def _translate(
        self, exc: anthropic.AnthropicError, reply: _Reply, settings: ModelSettings
    ) -> ModelError:
        if isinstance(exc, anthropic.APITimeoutError):
            return timeout_error(self.name, self._timeout(settings))
        if isinstance(exc, anthropic.APIConnectionError):
            cause = exc.__cause__
            detail = str(cause) if cause else exc.message
            if reply.opened:
                # A connection that broke mid-stream: what arrived is not the reply.
                return incomplete_error(self.name, detail)
            return connection_error(self.name, str(self._client.base_url), detail)
        if isinstance(exc, anthropic.APIStatusError):
            # An ``error`` event inside a stream arrives as a status error carrying
            # the stream's 200; status_error then goes by the body's error type.
            return status_error(
                self.name,
                exc.status_code,
                exc.body if exc.body is not None else exc.message,
                retry_after=retry_after_seconds(exc.response.headers),
            )
        return unexpected_error(self.name, exc)
