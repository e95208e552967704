"""Questions an agent asks a person, and the answers they accept.

A question is free text, or offers choices: one to pick (``multiple`` false) or
any number of them. The answer is checked here, once, for every store: a person
answers in words (``answer``), or picks offered choices (``choices``, each exactly
as offered); words that name one of the choices (case and spacing aside) count as
picking it, and other words are an answer of their own, choices or not. What the
store records as the tool call's result, and what the model reads, is
:meth:`Question.result`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from goaai.runtime.errors import InvalidAnswer

# How many choices a question may offer, and how long each may be.
MAX_CHOICES = 20
MAX_CHOICE_LENGTH = 200
# The longest answer in words (the same as the longest message a run starts with).
MAX_ANSWER_LENGTH = 32_000


def normalised(text: str) -> str:
    """How an answer in words is compared with a choice: case and spacing aside."""
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class Question:
    """What the agent asks, and the choices it offers (none: answer in words)."""

    text: str
    choices: tuple[str, ...] = ()
    multiple: bool = False

    def awaiting(self) -> dict[str, Any]:
        """The question as a waiting run shows it (its ``awaiting`` fields)."""
        data: dict[str, Any] = {"question": self.text}
        if self.choices:
            data.update(choices=list(self.choices), multiple=self.multiple)
        return data

    @classmethod
    def of(cls, awaiting: Mapping[str, Any]) -> Question:
        """The question a waiting run asks, from its ``awaiting``."""
        choices = awaiting.get("choices") or ()
        return cls(
            text=str(awaiting.get("question", "")),
            choices=tuple(str(choice) for choice in choices),
            multiple=bool(awaiting.get("multiple", False)),
        )

    def result(self, *, answer: str | None, choices: Sequence[str] | None) -> dict[str, Any]:
        """The recorded result of the question's tool call for this answer:
        ``{"answer": text}``, with ``"chosen"`` (the choices picked, as offered)
        when the answer picks choices. :class:`InvalidAnswer` if the question does
        not accept it."""
        if answer is not None and choices is None:
            return self._in_words(answer)
        if choices is not None and answer is None:
            chosen = self._picked(list(choices))
            return {"answer": ", ".join(chosen), "chosen": chosen}
        raise InvalidAnswer(
            "Answer the question in words (answer) or with its choices (choices), not both.",
            field="answer",
        )

    def _in_words(self, answer: str) -> dict[str, Any]:
        if not answer.strip():
            raise InvalidAnswer("The answer is empty.", field="answer")
        if len(answer) > MAX_ANSWER_LENGTH:
            raise InvalidAnswer(
                f"The answer is longer than {MAX_ANSWER_LENGTH} characters.", field="answer"
            )
        named = [choice for choice in self.choices if normalised(choice) == normalised(answer)]
        if named:
            return {"answer": named[0], "chosen": named[:1]}
        return {"answer": answer}

    def _picked(self, choices: list[str]) -> list[str]:
        if not self.choices:
            raise InvalidAnswer(
                "This question offers no choices: answer it in words (answer).", field="choices"
            )
        if not choices:
            raise InvalidAnswer("Pick at least one of the choices.", field="choices")
        if not self.multiple and len(choices) > 1:
            raise InvalidAnswer(
                f"Pick exactly one of the choices, not {len(choices)}.", field="choices"
            )
        chosen: list[str] = []
        for choice in choices:
            if not isinstance(choice, str):
                raise InvalidAnswer("Each choice must be a string.", field="choices")
            if choice not in self.choices:
                raise InvalidAnswer(
                    f"{choice[:MAX_CHOICE_LENGTH]!r} is not one of the choices "
                    f"({', '.join(map(repr, self.choices))}).",
                    field="choices",
                )
            if choice in chosen:
                raise InvalidAnswer(f"{choice!r} is picked twice.", field="choices")
            chosen.append(choice)
        # In the order the question offered them, whatever order they were picked in.
        return sorted(chosen, key=self.choices.index)
