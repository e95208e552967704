"""An agent for the chat page's usage tests: its model fails its first attempt with a
rate limit after a few words, then answers with reasoning, cached prompt tokens and
a reply cut off by the length limit. Each attempt streams at a pace the page can be
watched at."""

from __future__ import annotations

import time

from goaai.runtime.agents import Agent
from goaai.runtime.errors import ModelError
from goaai.runtime.models.base import DeltaCallback, ModelRequest, ModelSettings
from goaai.runtime.types import ModelReply, Usage
from goaai.runtime.vocabulary import ErrorKind, FinishReason

PARTIAL = ["Half ", "a ", "thought ", "that ", "fails"]
ANSWER = ["The ", "answer ", "starts ", "well ", "but ", "runs ", "out ", "of ", "ro"]
REASONING = "The user wants a long answer. Start with the overview, then the details."
# What the priced answer used: 1,200 + 4,000 cached + 300 out (120 reasoning).
USAGE = Usage(input_tokens=1200, output_tokens=300, cached_input_tokens=4000, reasoning_tokens=120)
PACE = 0.25
RETRY_AFTER = 2.0


class FlakyModel:
    """A rate limit on the first attempt of each run, then a truncated answer."""

    name = "flaky:v1"

    def __init__(self) -> None:
        self.attempts = 0

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        self.attempts += 1
        words = PARTIAL if self.attempts == 1 else ANSWER
        for word in words:
            if on_delta is not None:
                on_delta(word)
            time.sleep(PACE)
        if self.attempts == 1:
            raise ModelError(
                ErrorKind.RATE_LIMITED,
                "429: slow down",
                retryable=True,
                retry_after=RETRY_AFTER,
            )
        return ModelReply(
            text="".join(words),
            usage=USAGE,
            model="flaky-v1-2026-01-01",
            finish_reason=FinishReason.LENGTH,
            reasoning=REASONING,
        )


FLAKY = Agent(
    id="flaky",
    description="Fails once, then answers too long (for the chat page's tests).",
    model="python:tests.browser.flaky_agent.FlakyModel",
    model_settings=ModelSettings(retry_attempts=3, retry_seconds=30),
)
