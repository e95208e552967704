"""What a seeded tool call is asked, and what it returns or how it fails, in the
shapes the real tools give (``goaai.runtime.tools``)."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

from goaai.runtime.agents import AgentRegistry
from goaai.runtime.tools import ToolRejected
from goaai.runtime.tools.calculator import evaluate
from goaai.runtime.types import ToolOutcome
from goaai.runtime.vocabulary import ErrorKind, MemoryScope
from runs_app.seeding.memory import SessionMemory
from runs_app.seeding.plan import MEMORY_KEYS, MEMORY_VALUES, TIME_ZONES

# A made-up zone that a model might ask for, and the clock tool refuses.
UNKNOWN_ZONE = "Mars/Olympus_Mons"
Arguments = dict[str, Any]


class Outcomes:
    def __init__(self, registry: AgentRegistry, rng: random.Random) -> None:
        self.rng = rng
        self.timeouts = {
            name: tool.timeout_seconds
            for agent in registry.all()
            for name, tool in registry.tools_of(agent).items()
        }
        self._arguments: dict[str, Callable[[SessionMemory], Arguments]] = {
            "calculator": self._expression,
            "clock_now": self._zone,
            "echo": self._text,
            "memory_store": self._fact,
            "memory_recall": self._key,
            "memory_forget": self._key,
        }
        self._results: dict[str, Callable[[Arguments, SessionMemory, dt.datetime], Any]] = {
            "calculator": _calculated,
            "clock_now": _told_time,
            "echo": _echoed,
            "memory_store": _stored,
            "memory_recall": _recalled,
            "memory_forget": _forgotten,
        }

    # What the model asks

    def arguments(self, tool: str, memory: SessionMemory) -> Arguments:
        make = self._arguments.get(tool)
        return {} if make is None else make(memory)

    def _expression(self, memory: SessionMemory) -> Arguments:
        rng = self.rng
        divisor = 0 if rng.random() < 0.05 else rng.randrange(1, 9)
        return {"expression": f"{rng.randrange(2, 99)} * ({rng.randrange(1, 30)} + 4) / {divisor}"}

    def _zone(self, memory: SessionMemory) -> Arguments:
        zone = UNKNOWN_ZONE if self.rng.random() < 0.03 else self.rng.choice(TIME_ZONES)
        return {"timezone": zone}

    def _text(self, memory: SessionMemory) -> Arguments:
        return {"text": f"Repeat after me: {self.rng.choice(MEMORY_VALUES)}"}

    def _fact(self, memory: SessionMemory) -> Arguments:
        return {
            "key": self.rng.choice(MEMORY_KEYS),
            "value": self.rng.choice(MEMORY_VALUES),
            "scope": MemoryScope.SESSION.value,
        }

    def _key(self, memory: SessionMemory) -> Arguments:
        # Mostly about something the session did store; sometimes not.
        known = memory.keys()
        if known and self.rng.random() < 0.7:
            return {"key": self.rng.choice(known)}
        return {"key": self.rng.choice(MEMORY_KEYS)}

    # What comes back

    def duration_ms(self, tool: str) -> int:
        if tool == "memory_store":
            return int(self.rng.uniform(2, 40))
        return int(self.rng.uniform(1, 800))

    def call(
        self, tool: str, arguments: Arguments, memory: SessionMemory, at: dt.datetime
    ) -> tuple[ToolOutcome, int]:
        """How a call of ``tool`` that started ``at`` ended, and how long it took.

        A few calls run out of the tool's time limit, as the turn loop reports it.
        """
        limit = self.timeouts.get(tool)
        if limit is not None and self.rng.random() < 0.01:
            outcome = ToolOutcome(
                error_kind=ErrorKind.TIMEOUT,
                error_message=f"{tool} did not finish within {limit:g}s.",
            )
            return outcome, int(limit * 1000) + int(self.rng.uniform(1, 50))
        duration = self.duration_ms(tool)
        result = self._results.get(tool)
        if result is None:
            return ToolOutcome(result={"ok": True}), duration
        try:
            return ToolOutcome(result=result(arguments, memory, at)), duration
        except ToolRejected as refused:
            return ToolOutcome(error_kind=refused.kind, error_message=refused.message), duration


# Each tool's result, or its refusal (ToolRejected, as the tool raises it).


def _calculated(arguments: Arguments, memory: SessionMemory, at: dt.datetime) -> Any:
    # The calculator's own arithmetic, refusals included.
    return {"expression": arguments["expression"], "value": evaluate(arguments["expression"])}


def _told_time(arguments: Arguments, memory: SessionMemory, at: dt.datetime) -> Any:
    zone = arguments["timezone"]
    if zone == UNKNOWN_ZONE:
        raise ToolRejected(f"Unknown time zone {zone!r}.")
    current = at.astimezone(ZoneInfo(zone))
    return {
        "iso": current.isoformat(timespec="seconds"),
        "timezone": zone,
        "weekday": current.strftime("%A"),
    }


def _echoed(arguments: Arguments, memory: SessionMemory, at: dt.datetime) -> Any:
    return {"text": arguments["text"]}


def _stored(arguments: Arguments, memory: SessionMemory, at: dt.datetime) -> Any:
    entry = memory.get(arguments["key"])
    return {
        "key": arguments["key"],
        "value": arguments["value"],
        "scope": MemoryScope.SESSION.value,
        "version": 1 if entry is None else entry.version + 1,
    }


def _recalled(arguments: Arguments, memory: SessionMemory, at: dt.datetime) -> Any:
    key = arguments["key"]
    entry = memory.get(key)
    if entry is None:
        return {"key": key, "found": False}
    return {"key": key, "found": True, "value": entry.value, "scope": MemoryScope.SESSION.value}


def _forgotten(arguments: Arguments, memory: SessionMemory, at: dt.datetime) -> Any:
    key = arguments["key"]
    if memory.get(key) is None:
        raise ToolRejected(f"Nothing is remembered under {key!r} in the session scope.")
    return {"key": key, "scope": MemoryScope.SESSION.value, "forgotten": True}
