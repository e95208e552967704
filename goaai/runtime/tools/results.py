"""Reading a long tool result a piece at a time.

A result longer than the agent's ``tool_result_chars`` reaches the model cut short,
with a marker naming the call and the offset to read on from (see
``goaai.runtime.context.bounded``); the whole result stays recorded, and this tool
reads it. Every agent has it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from uuid import UUID

from pydantic import Field

from goaai.runtime.context import READ_RESULT_TOOL
from goaai.runtime.tools.base import ToolContext, ToolRejected, tool

# The most one read returns.
MAX_READ_CHARS = 20_000


@tool(name=READ_RESULT_TOOL, idempotent=True)
def read_tool_result(
    tool_call_id: Annotated[
        UUID, Field(description="The id the truncation marker names (tool_call_id=...).")
    ],
    context: ToolContext,
    offset: Annotated[
        int, Field(ge=0, description="Where to start, in characters (the marker's offset).")
    ] = 0,
    length: Annotated[
        int, Field(ge=1, le=MAX_READ_CHARS, description="How many characters to read.")
    ] = 8_000,
) -> dict[str, Any]:
    """Read more of a tool result that was truncated: ``length`` characters of it
    from ``offset`` on, as the model was shown it (the outcome as JSON text)."""
    outcome = context.store.tool_result(tool_call_id=tool_call_id, owner_id=context.owner_id)
    if outcome is None:
        raise ToolRejected(f"There is no finished tool call {tool_call_id} in this conversation.")
    text = json.dumps(outcome.for_model(), default=str)
    if offset > len(text):
        raise ToolRejected(f"The result has {len(text)} characters; offset {offset} is past it.")
    piece = text[offset : offset + length]
    end = offset + len(piece)
    return {
        "text": piece,
        "offset": offset,
        "total_chars": len(text),
        "next_offset": end if end < len(text) else None,
    }
