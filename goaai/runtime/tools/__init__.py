"""Tools and the toolsets agents are given."""

from __future__ import annotations

from dataclasses import replace

from goaai.runtime.errors import UnknownTool
from goaai.runtime.tools.base import Tool, ToolContext, ToolRejected, tool
from goaai.runtime.tools.calculator import calculator
from goaai.runtime.tools.clock import clock_now
from goaai.runtime.tools.interaction import ask_user
from goaai.runtime.tools.memory import (
    memory_forget,
    memory_forget_all,
    memory_recall,
    memory_search,
    memory_store,
)
from goaai.runtime.tools.results import read_tool_result
from goaai.runtime.tools.text import echo

__all__ = [
    "ALWAYS_AVAILABLE",
    "TOOLSETS",
    "Tool",
    "ToolContext",
    "ToolRejected",
    "tool",
    "tools_for",
]


def _toolset(name: str, *tools: Tool) -> dict[str, Tool]:
    return {t.name: replace(t, toolset=name) for t in tools}


TOOLSETS: dict[str, dict[str, Tool]] = {
    "memory": _toolset(
        "memory",
        memory_store,
        memory_recall,
        memory_search,
        memory_forget,
        memory_forget_all,
    ),
    "interaction": _toolset("interaction", ask_user),
    "clock": _toolset("clock", clock_now),
    "calculator": _toolset("calculator", calculator),
    "text": _toolset("text", echo),
}


# Tools every agent has, whatever its toolsets: reading on in a result that reached
# the model truncated.
ALWAYS_AVAILABLE: dict[str, Tool] = _toolset("results", read_tool_result)


def tools_for(toolsets: tuple[str, ...]) -> dict[str, Tool]:
    """Every tool of the named toolsets, then those every agent has, by tool name."""
    tools: dict[str, Tool] = {}
    for name in toolsets:
        if name not in TOOLSETS:
            raise UnknownTool(f"No toolset named {name!r}.")
        tools.update(TOOLSETS[name])
    tools.update(ALWAYS_AVAILABLE)
    return tools
