"""Tools the caller executes: offered by an OpenAI-compatible client with its request.

The caller names each tool, describes it and gives the JSON Schema of its
arguments. The model sees them beside the agent's own tools; when it calls one, the
run records the call and waits (``awaiting_input``, kind ``client_tool``) until the
caller sends the result. goaai never executes such a tool, so its arguments are
passed on as the model wrote them: checking them is the caller's business, as it
is with OpenAI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import pydantic

from goaai.runtime.errors import InvalidAnswer
from goaai.runtime.tools.base import Tool, ToolContext
from goaai.runtime.types import ToolOutcome
from goaai.runtime.vocabulary import ErrorKind

# The toolset every caller's tool belongs to (label rules may block it by this name).
CLIENT_TOOLSET = "client"


class AnyArguments(pydantic.BaseModel):
    """The arguments of a tool whose schema goaai does not check itself (a caller's
    tool, checked by the caller; an MCP server's, checked by the server): any
    object, passed on as the model wrote it."""

    model_config = pydantic.ConfigDict(extra="allow")


def _never_called(**_: Any) -> Any:
    raise RuntimeError("A caller's tool is executed by the caller, never by goaai.")


@dataclass(frozen=True)
class ClientTool(Tool):
    """A tool the caller offered: its schema is the caller's, as given."""

    parameters: dict[str, Any] = field(default_factory=dict)

    def json_schema(self) -> dict[str, Any]:
        return dict(self.parameters)

    def invoke(self, arguments: Any, context: ToolContext) -> ToolOutcome:
        return ToolOutcome(
            error_kind=ErrorKind.INTERNAL,
            error_message=f"{self.name} is executed by the caller that offered it.",
        )


def client_tool(spec: Mapping[str, Any]) -> ClientTool:
    """The tool a caller described as ``{name, description, parameters}``."""
    return ClientTool(
        name=str(spec["name"]),
        description=str(spec.get("description") or ""),
        func=_never_called,
        arguments_model=AnyArguments,
        toolset=CLIENT_TOOLSET,
        timeout_seconds=None,
        answered_by_caller=True,
        parameters=dict(spec.get("parameters") or {"type": "object", "properties": {}}),
    )


def client_tools(specs: Iterable[Mapping[str, Any]]) -> dict[str, Tool]:
    """The caller's tools by name."""
    tools: dict[str, Tool] = {}
    for spec in specs:
        made = client_tool(spec)
        tools[made.name] = made
    return tools


def awaited_outputs(
    awaiting: Mapping[str, Any], outputs: Mapping[Any, Any]
) -> list[tuple[UUID, Any]]:
    """The results ``outputs`` gives for the calls a run waiting for its caller's
    tools waits on (``awaiting``, as the run records it), in the order the model
    asked for them; :class:`InvalidAnswer` naming the calls it leaves out, or that
    the run does not wait on. Every call must be answered at once: the model is
    asked again only when it can see all of its calls' results."""
    waited = [UUID(str(call)) for call in awaiting.get("tool_calls") or [awaiting["tool_call"]]]
    given = {UUID(str(call)): result for call, result in outputs.items()}
    unknown = sorted(str(call) for call in given if call not in waited)
    if unknown:
        raise InvalidAnswer(
            f"The run does not wait on tool call(s) {', '.join(unknown)}.", field="tool_outputs"
        )
    missing = [str(call) for call in waited if call not in given]
    if missing:
        raise InvalidAnswer(
            f"Results are missing for tool call(s) {', '.join(missing)}: send the result "
            "of every call the run waits on.",
            field="tool_outputs",
        )
    return [(call, given[call]) for call in waited]
