"""Talking to the person behind the run."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from goaai.runtime.tools.base import tool


@tool(asks_user=True, timeout_seconds=None)
def ask_user(
    question: Annotated[
        str, Field(description="The question for the user.", min_length=1, max_length=2000)
    ],
) -> dict[str, Any]:
    """Ask the user a question and wait for the answer (the run pauses until then)."""
    # Never called: the loop pauses the run, and the user's answer becomes the result.
    return {"question": question}
