"""An exchange followed live, as Server-Sent Events in the shapes OpenAI sends.

The stream follows the run the way goaai's own event stream does (see
:mod:`sessions_app.streams`): it joins the session's channel-layer group, reads the
run's events after where the exchange began from the database, then takes live
events and the model's text as it is written (deltas). So it works whichever
process executes the run (a server thread or a Celery worker). Text whose deltas
did not reach the stream arrives with the turn's ``message.completed`` event. The
exchange is over when the run ends or waits (for the caller's tools, or for a
person); its last frames (tool calls, usage, the final object) are read from the
run's records. Like goaai's own streams, it ends once the token it was opened with
is revoked or stops giving access to the session (see
:class:`sessions_app.streams.Watcher`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer

from goaai.api.sse import KEEPALIVE, KEEPALIVE_SECONDS, frame
from goaai.runtime import rt
from goaai.runtime.vocabulary import RUN_END_EVENT_TYPES, EventType
from runs_app.openai_api import builders
from runs_app.openai_api.builders import State
from runs_app.openai_api.db import database_sync_to_async
from runs_app.openai_api.errors import OpenAIError
from runs_app.openai_api.exchange import Started
from sessions_app.api.sse import access_lost
from sessions_app.publisher import session_group
from sessions_app.streams import Sequencer, Watcher, stored_after, subscribe

# What a stream ends with once its credentials stop giving access.
_LOST = {
    "token_revoked": "The API key this stream was opened with was revoked.",
    "signed_out": "The credentials this stream was opened with signed out.",
    "session_deleted": "The session was deleted.",
    "access_revoked": "The API key no longer gives access to this session.",
}


class AccessLost(Exception):
    """The stream's credentials, or its session, are gone: ``code`` says which."""

    def __init__(self, code: str) -> None:
        super().__init__(_LOST.get(code, code))
        self.code = code

    def frame(self) -> str:
        return frame(OpenAIError(401, str(self), code=self.code).body())


@dataclass
class _Text:
    """The exchange's text as it is streamed: each turn's pieces in order."""

    emitted: str = ""
    by_turn: dict[str, str] = field(default_factory=dict)

    def add(self, turn: str, piece: str) -> str:
        """What to send for ``piece`` of ``turn``'s text."""
        if not piece:
            return ""
        out = piece
        if turn not in self.by_turn:
            self.by_turn[turn] = ""
            if self.emitted:
                out = builders.TURN_SEPARATOR + piece
        self.by_turn[turn] += piece
        self.emitted += out
        return out

    def completed(self, turn: str, text: str) -> str:
        """What is left to send of ``turn``'s text once the turn has ended."""
        said = self.by_turn.get(turn, "")
        if not text.startswith(said) or text == said:
            return ""
        return self.add(turn, text[len(said) :])


def _ends(event: dict[str, Any]) -> bool:
    # A run that waits, for the caller's tools or for a person, ends the exchange.
    return event["type"] in RUN_END_EVENT_TYPES or event["type"] == EventType.RUN_AWAITING_INPUT


class _Follower:
    """One exchange's part of the session's log and live messages, in order."""

    def __init__(self, started: Started) -> None:
        self.run = str(started.run_id)
        self.text = _Text()
        self.sequencer = Sequencer(session_id=started.session_id, last=started.after_seq)
        self.over = False

    def take(self, events: list[dict[str, Any]]) -> list[str]:
        """The text the run's events add (and whether the exchange ends with them)."""
        pieces = []
        for event in events:
            if self.over or event.get("run") != self.run:
                continue
            if event["type"] == EventType.MESSAGE_COMPLETED:
                data = event.get("data") or {}
                turn, said = str(data.get("turn")), str(data.get("text") or "")
                pieces.append(self.text.completed(turn, said))
            self.over = _ends(event)
        return [piece for piece in pieces if piece]

    async def stored(self) -> list[str]:
        """What the database holds that the stream has not had yet."""
        pieces: list[str] = []
        async for events in stored_after(self.sequencer):
            pieces += self.take(events)
        return pieces

    async def live(self, message: dict[str, Any]) -> list[str]:
        """What a message of the session's group adds."""
        if message["type"] == "run.delta":
            if message.get("run") != self.run:
                return []
            piece = self.text.add(str(message["turn"]), str(message["text"]))
            return [piece] if piece else []
        if message["type"] != "session.events":
            return []
        ready, gap = self.sequencer.take(message["events"])
        if gap:
            ready += await self.sequencer.fill()
        return self.take(ready)


async def _receive(layer: Any, channel: str, seconds: float) -> dict[str, Any] | None:
    try:
        message: dict[str, Any] = await asyncio.wait_for(layer.receive(channel), seconds)
    except TimeoutError:
        return None
    return message


async def follow(started: Started, watcher: Watcher) -> AsyncIterator[str | None]:
    """The exchange's text, piece by piece, as it is written; ``None`` while it is
    quiet (for a keep-alive). Returns when the exchange is over (or the wait for
    it, ``GOAAI_RUN_WAIT_SECONDS``, is spent); :class:`AccessLost` once
    ``watcher``'s credentials stop giving access."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    groups = (session_group(started.session_id), *watcher.groups())
    follower = _Follower(started)
    deadline = time.monotonic() + rt.config.run_wait_seconds
    try:
        # Joined before the backlog is read: nothing committed after it is missed.
        for group in groups:
            await subscribe(layer, group, channel)
        for stored in await follower.stored():
            yield stored
        while not follower.over and time.monotonic() < deadline:
            wait = min(KEEPALIVE_SECONDS, max(0.0, deadline - time.monotonic()))
            message = await _receive(layer, channel, wait)
            pieces: list[str | None] = []
            if message is None:
                # Quiet for a while: look for events the layer may have dropped.
                pieces += [*await follower.stored(), None]
            elif (lost := await access_lost(message, watcher, started.session_id)) is not None:
                raise AccessLost(lost)
            else:
                pieces += await follower.live(message)
            for piece in pieces:
                yield piece
    finally:
        for group in groups:
            await layer.group_discard(group, channel)


_state: Callable[..., Awaitable[State]] = database_sync_to_async(builders.state)


async def _final(started: Started) -> State:
    return await _state(started.run_id, started.first_turn)


async def _pieces(started: Started, watcher: Watcher) -> AsyncIterator[str | None]:
    """The exchange's text, then, once it is over, what the record adds to what
    was streamed (``None``: keep-alive)."""
    streamed = ""
    async for piece in follow(started, watcher):
        if piece is not None:
            streamed += piece
        yield piece
    current = await _final(started)
    if current.text.startswith(streamed) and current.text != streamed:
        yield current.text[len(streamed) :]


# Chat completions


async def chat_stream(
    started: Started, watcher: Watcher, include_usage: bool
) -> AsyncIterator[str]:
    run = (await _final(started)).run
    model = started.model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        data = builders.chat_chunk(run, model, delta, finish)
        if include_usage:
            data["usage"] = None
        return frame(data)

    yield chunk({"role": "assistant", "content": ""})
    try:
        async for piece in _pieces(started, watcher):
            yield KEEPALIVE if piece is None else chunk({"content": piece})
    except AccessLost as lost:
        yield lost.frame()
        return
    current = await _final(started)
    failure = builders.refusal(current)
    if failure is not None:
        yield frame(failure.body())
        return
    if current.calls:
        yield chunk({"tool_calls": builders.chat_tool_calls(current.calls, indexed=True)})
    yield chunk({}, current.finish_reason)
    if include_usage:
        data = builders.chat_chunk(current.run, model, {}, None)
        data["choices"] = []
        data["usage"] = builders.chat_usage(current.usage)
        yield frame(data)
    yield "data: [DONE]\n\n"


# Responses


class _Sequenced:
    """Typed Responses events, numbered in the order they are sent."""

    def __init__(self) -> None:
        self.number = 0

    def __call__(self, type: str, **fields: Any) -> str:
        data = {"type": type, "sequence_number": self.number, **fields}
        self.number += 1
        return frame(data, event=type)


async def responses_stream(started: Started, watcher: Watcher) -> AsyncIterator[str]:
    event = _Sequenced()
    current = await _final(started)
    model = started.model
    shell = builders.response_object(current, model, status="in_progress", with_output=False)
    yield event("response.created", response=shell)
    yield event("response.in_progress", response=shell)
    item_id = current.message_id
    opened = False
    text = ""
    pieces = _pieces(started, watcher)
    while True:
        try:
            piece = await anext(pieces)
        except StopAsyncIteration:
            break
        except AccessLost as lost:
            yield event("error", code=lost.code, message=str(lost), param=None)
            return
        if piece is None:
            yield KEEPALIVE
            continue
        if not opened:
            opened = True
            yield event(
                "response.output_item.added",
                output_index=0,
                item=builders.message_item(current, done=False),
            )
            yield event(
                "response.content_part.added",
                item_id=item_id,
                output_index=0,
                content_index=0,
                part=builders.output_text(""),
            )
        text += piece
        yield event(
            "response.output_text.delta",
            item_id=item_id,
            output_index=0,
            content_index=0,
            delta=piece,
            logprobs=[],
        )
    current = await _final(started)
    if opened:
        part = builders.output_text(text)
        yield event(
            "response.output_text.done",
            item_id=item_id,
            output_index=0,
            content_index=0,
            text=text,
            logprobs=[],
        )
        yield event(
            "response.content_part.done",
            item_id=item_id,
            output_index=0,
            content_index=0,
            part=part,
        )
        yield event(
            "response.output_item.done", output_index=0, item=builders.message_item(current)
        )
    for index, call in enumerate(current.calls, start=1 if opened else 0):
        yield event(
            "response.output_item.added",
            output_index=index,
            item=builders.function_call_item(call, done=False),
        )
        yield event(
            "response.function_call_arguments.delta",
            item_id=call.item_id,
            output_index=index,
            delta=call.arguments,
        )
        yield event(
            "response.function_call_arguments.done",
            item_id=call.item_id,
            output_index=index,
            name=call.name,
            arguments=call.arguments,
        )
        yield event(
            "response.output_item.done",
            output_index=index,
            item=builders.function_call_item(call),
        )
    final = builders.response_object(current, model)
    ending = {
        "completed": "response.completed",
        "failed": "response.failed",
        "in_progress": "response.incomplete",
        "incomplete": "response.incomplete",
    }.get(final["status"], "response.completed")
    if ending == "response.incomplete":
        final["status"] = "incomplete"
    yield event(ending, response=final)
