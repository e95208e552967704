"""Text tools."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from goaai.runtime.tools.base import tool


@tool(idempotent=True)
def echo(
    text: Annotated[str, Field(description="The text to say back.", max_length=10_000)],
) -> dict[str, Any]:
    """Say a text back exactly as given."""
    return {"text": text}
