"""What a reply that ends early carries of the provider's counts: a stop (the
caller's own exception from ``on_delta``) or a broken stream leaves ``complete``
with the usage the provider had reported by then, for the turn to record instead
of an estimate; a provider that reports only at the end leaves nothing."""

from __future__ import annotations

import pytest

from goaai.runtime.errors import ModelError
from goaai.runtime.models.base import usage_so_far
from goaai.runtime.types import Usage
from tests.goaai.runtime.models import test_anthropic_client as anthropic
from tests.goaai.runtime.models import test_openai_compat as openai
from tests.goaai.runtime.models.fake_providers import (
    TextBlock,
    _chunk,
    _openai_usage,
    anthropic_cut_before_stop,
    anthropic_message,
    openai_sse,
    openai_text,
)


class Stopped(Exception):
    """What the turn loop raises from ``on_delta`` when the run is stopped."""


def stop_at(piece: str):
    def on_delta(text: str) -> None:
        if text == piece:
            raise Stopped

    return on_delta


def test_a_stopped_anthropic_reply_carries_the_prompt_count_of_its_message_start(fake_server):
    fake_server.anthropic(
        anthropic_message(
            [TextBlock(["Once ", "upon ", "a time"])],
            input_tokens=210,
            cache_read_tokens=40,
            cache_write_tokens=3,
        )
    )

    with pytest.raises(Stopped) as stopped:
        anthropic.client_for(fake_server).complete(anthropic.ask("a story"), stop_at("upon "))

    assert usage_so_far(stopped.value) == Usage(
        input_tokens=210, output_tokens=1, cached_input_tokens=40, cache_write_tokens=3
    )


def test_an_anthropic_stream_cut_short_carries_what_it_had_counted(fake_server):
    fake_server.anthropic(
        anthropic_cut_before_stop([TextBlock(["Once ", "upon"])], input_tokens=50, output_tokens=7)
    )

    with pytest.raises(ModelError) as failed:
        anthropic.client_for(fake_server).complete(anthropic.ask("a story", retry_attempts=1))

    assert usage_so_far(failed.value) == Usage(input_tokens=50, output_tokens=7)


def test_a_stopped_openai_reply_carries_nothing_when_usage_comes_only_at_the_end(fake_server):
    fake_server.openai(openai_text(["Once ", "upon ", "a time"]))

    with pytest.raises(Stopped) as stopped:
        openai.client_for(fake_server).complete(openai.ask("a story"), stop_at("upon "))

    assert usage_so_far(stopped.value) is None


def test_a_stopped_reply_of_a_server_that_counts_as_it_goes_carries_its_count(fake_server):
    # vLLM's continuous usage: every chunk carries the counts so far.
    model = "local-model"
    chunks = [_chunk({"role": "assistant", "content": ""}, model=model)]
    for count, piece in enumerate(["Once ", "upon ", "a time"], start=1):
        chunks.append(_chunk({"content": piece}, model=model, usage=_openai_usage(30, count)))
    chunks.append(_chunk({}, model=model, finish_reason="stop", usage=_openai_usage(30, 3)))
    fake_server.openai(openai_sse(chunks))

    with pytest.raises(Stopped) as stopped:
        openai.client_for(fake_server).complete(openai.ask("a story"), stop_at("upon "))

    assert usage_so_far(stopped.value) == Usage(input_tokens=30, output_tokens=2)
