"""The interface every model client implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from goaai.runtime.types import Message, ModelReply

DeltaCallback = Callable[[str], None]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a model is told about it."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()


class ModelClient(Protocol):
    """One model provider. ``complete`` sends the conversation and returns the reply;
    where the provider streams, each piece of text is passed to ``on_delta`` as it
    arrives. Provider failures are raised as :class:`goaai.runtime.errors.ModelError`."""

    name: str

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        """Answer one turn."""
        ...
