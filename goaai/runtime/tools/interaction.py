"""Talking to the person behind the run."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

from goaai.runtime.questions import MAX_CHOICE_LENGTH, MAX_CHOICES, Question, normalised
from goaai.runtime.tools.base import tool

Choice = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_CHOICE_LENGTH)
]


def _distinct(choices: list[str]) -> list[str]:
    # An answer in words picks a choice case and spacing aside, so two choices
    # that differ only in those could not be told apart.
    seen: set[str] = set()
    for choice in choices:
        if normalised(choice) in seen:
            raise ValueError(f"{choice!r} is offered twice")
        seen.add(normalised(choice))
    return choices


@tool(asks_user=True, timeout_seconds=None)
def ask_user(
    question: Annotated[
        str, Field(description="The question for the user.", min_length=1, max_length=2000)
    ],
    choices: Annotated[
        list[Choice],
        Field(
            description="Answers the user can pick from (short, distinct); none: the "
            "user answers in words. The user may still answer in words.",
            max_length=MAX_CHOICES,
        ),
        AfterValidator(_distinct),
    ] = [],  # noqa: B006 - pydantic copies a field's default for every call
    multiple: Annotated[
        bool, Field(description="Whether the user may pick more than one of the choices.")
    ] = False,
) -> dict[str, Any]:
    """Ask the user a question, optionally offering choices, and wait for the answer
    (the run pauses until then). The result is ``answer`` (the answer in words, or
    the picked choices joined by commas) and, when the user picked choices,
    ``chosen`` (the list of them)."""
    # Called to check the question before the run pauses; the user's answer, not
    # this, becomes the call's result.
    return Question(text=question, choices=tuple(choices), multiple=multiple).awaiting()
