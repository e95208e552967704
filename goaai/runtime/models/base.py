"""The interface every model client implements."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2

from goaai.runtime.config import ModelProfile
from goaai.runtime.types import Message, ModelReply, Usage

DeltaCallback = Callable[[str], None]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a model is told about it."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ModelSettings:
    """How an agent wants its model called; ``None`` leaves a setting to the provider.

    ``max_output_tokens`` caps the reply (Anthropic requires a cap: its client sends
    4096 when none is set); ``reasoning_effort`` is ``minimal``, ``low``, ``medium``
    or ``high`` for models that reason (OpenAI's effort, Anthropic's thinking budget);
    ``timeout_seconds`` bounds one request. ``retry_attempts`` and
    ``retry_seconds`` are the budget for retrying retryable provider errors: at most
    that many attempts in all, and no retry that would end after that many seconds.
    """

    temperature: float | None = None
    max_output_tokens: int | None = None
    reasoning_effort: str | None = None
    timeout_seconds: float | None = None
    retry_attempts: int = 5
    retry_seconds: float = 120.0

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in MODEL_SETTING_NAMES}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ModelSettings:
        values = {k: v for k, v in (data or {}).items() if k in MODEL_SETTING_NAMES}
        return cls(**values)


MODEL_SETTING_NAMES = (
    "temperature",
    "max_output_tokens",
    "reasoning_effort",
    "timeout_seconds",
    "retry_attempts",
    "retry_seconds",
)
REASONING_EFFORTS = ("minimal", "low", "medium", "high")


@dataclass(frozen=True)
class ModelRequest:
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    settings: ModelSettings = field(default_factory=ModelSettings)


class ModelClient(Protocol):
    """One model provider. ``complete`` sends the conversation and returns the reply;
    where the provider streams, each piece of text is passed to ``on_delta`` as it
    arrives. Provider failures are raised as :class:`goaai.runtime.errors.ModelError`."""

    name: str

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        """Answer one turn."""
        ...


# Where an exception that ends a reply early carries the provider's usage so far.
_USAGE_SO_FAR = "goaai_usage_so_far"


@contextmanager
def reporting_usage(so_far: Callable[[], Usage]) -> Iterator[None]:
    """Around a reply's stream: an exception that ends it early (a provider error,
    or the caller's own from ``on_delta``: the run was stopped) carries the usage
    the provider had reported by then, if it reported any (:func:`usage_so_far`),
    so that the turn records the provider's counts rather than an estimate."""
    try:
        yield
    except Exception as exc:
        used = so_far()
        if used.total_tokens:
            setattr(exc, _USAGE_SO_FAR, used)
        raise


def usage_so_far(exc: BaseException) -> Usage | None:
    """The usage the provider had reported when ``exc`` ended its reply, if any."""
    used = getattr(exc, _USAGE_SO_FAR, None)
    return used if isinstance(used, Usage) else None


def sdk_options(profile: ModelProfile) -> dict[str, Any]:
    """How the official SDKs' clients are built for ``profile``: its key, URL,
    timeouts and headers, and no retries of their own (goaai retries, with events a
    person can see: :mod:`goaai.runtime.retry`)."""
    return {
        "api_key": profile.api_key,
        "base_url": profile.base_url or None,
        "timeout": httpx2.Timeout(profile.timeout_seconds, connect=profile.connect_timeout_seconds),
        "max_retries": 0,
        "default_headers": dict(profile.headers) or None,
    }
