"""How an agent holds a long conversation: its context budget, how much of a tool's
result the model reads at once, how much memory it is shown, how many tool calls it
runs at the same time, what happens to a message sent while a run is active, and
the messages an empty chat suggests to start it.

Part of an agent's definition (``Agent.conversation``), so a run records the
settings it ran with, as it records the rest of its agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from goaai.runtime.config import ConfigError
from goaai.runtime.vocabulary import Multitask

# When neither the agent nor its model says how large the context is.
DEFAULT_CONTEXT_TOKENS = 32_000

# The conversation starters an agent may suggest, and how long each may be.
MAX_SUGGESTIONS = 8
MAX_SUGGESTION_LENGTH = 200

# What the agent's model is asked when earlier runs no longer fit the context
# (goaai.runtime.context), with the most words the summary may take.
SUMMARY_INSTRUCTIONS = (
    "You summarise the earlier part of a conversation between a user and an AI "
    "assistant, so that the assistant can carry on without it. Keep every fact the "
    "user stated about themselves or their work, every decision, name, number, date "
    "and commitment, what the assistant found with its tools, and any question left "
    "open. Leave out pleasantries. Write plain sentences, in the conversation's "
    "language, at most {words} words, and nothing but the summary."
)


@dataclass(frozen=True)
class ConversationSettings:
    """``context_tokens`` is the most one model request may carry (system prompt,
    memory, earlier runs, the run so far); ``None`` takes the model's window where
    the client knows it, else :data:`DEFAULT_CONTEXT_TOKENS`. ``tool_result_chars``
    is how much of one tool result reaches the model (the rest stays recorded and is
    read with ``read_tool_result``). ``memory_tokens`` bounds the remembered facts put
    in the prompt. ``parallel_tool_calls`` is how many of the calls a model asks for
    together run at once. ``multitask`` is what a message sent while a run is active
    does: ``enqueue``, ``reject`` or ``interrupt``. ``suggestions`` are messages the
    chat offers, as buttons, to start an empty conversation with this agent."""

    context_tokens: int | None = None
    tool_result_chars: int = 8_000
    memory_tokens: int = 1_000
    parallel_tool_calls: int = 4
    multitask: str = Multitask.ENQUEUE
    suggestions: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        # Numbers and names, read as they are (dataclasses.asdict copies deep).
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        # Only when there are some: the definitions (and fingerprints) of agents
        # without stay what they were.
        if self.suggestions:
            data["suggestions"] = list(self.suggestions)
        else:
            del data["suggestions"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConversationSettings:
        """Settings from their JSON form; :class:`ConfigError` naming the first one
        that is wrong."""
        if not isinstance(data, Mapping):
            raise ConfigError("conversation: must be an object.")
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"conversation: unknown setting {', '.join(map(repr, unknown))}.")
        checks = {
            "context_tokens": (1_000, 10_000_000),
            "tool_result_chars": (200, 10_000_000),
            "memory_tokens": (0, 1_000_000),
            "parallel_tool_calls": (1, 64),
        }
        for name, (least, most) in checks.items():
            value = data.get(name)
            if value is None and name == "context_tokens":
                continue
            if name in data and not _whole(value, least, most):
                raise ConfigError(f"conversation.{name}: a whole number from {least} to {most}.")
        if "multitask" in data and data["multitask"] not in set(Multitask):
            raise ConfigError(
                f"conversation.multitask: one of {', '.join(m.value for m in Multitask)}."
            )
        values: dict[str, Any] = {
            k: (int(v) if k in checks and v is not None else v) for k, v in data.items()
        }
        if "multitask" in values:
            values["multitask"] = Multitask(values["multitask"])
        if "suggestions" in values:
            values["suggestions"] = _suggestions(values["suggestions"])
        return cls(**values)


def _suggestions(value: Any) -> tuple[str, ...]:
    """Conversation starters: a list of at most :data:`MAX_SUGGESTIONS` messages,
    none blank, none longer than :data:`MAX_SUGGESTION_LENGTH` (repeats dropped)."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError("conversation.suggestions: must be a list of messages.")
    kept = tuple(dict.fromkeys(v.strip() for v in value))
    if len(kept) > MAX_SUGGESTIONS:
        raise ConfigError(f"conversation.suggestions: at most {MAX_SUGGESTIONS} messages.")
    if any(not v or len(v) > MAX_SUGGESTION_LENGTH or "\x00" in v for v in kept):
        raise ConfigError(
            "conversation.suggestions: each message is 1 to "
            f"{MAX_SUGGESTION_LENGTH} characters of text."
        )
    return kept


def _whole(value: Any, least: int, most: int) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return float(value).is_integer() and least <= value <= most
