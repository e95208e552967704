"""The scores panel of a run's timeline: the run's scores, the form a reviewer adds
one with (``runs_app.add_score``), and for each staff or API score its viewer may
change or delete (their own, or anyone's with the permission) the forms to do so.

The forms only read what was typed; what a score may be is checked once, by
``runs_app.scores`` (the API checks the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms

from goaai.access import has_permission
from goaai.runtime.vocabulary import ScoreKind, choices
from runs_app.access import may_edit_score
from runs_app.models import Run, Score
from runs_app.scores import (
    MAX_COMMENT_LENGTH,
    MAX_NAME_LENGTH,
    InvalidScore,
    ScoreInput,
    score_input_checked,
    score_shown,
    scores_of,
)

# A run is scored a handful of times; past this the panel says how many it left out.
SCORES_SHOWN = 100
_TRUE = frozenset({"true", "yes", "up", "1"})
_FALSE = frozenset({"false", "no", "down", "0"})


def _typed(kind: str, text: str) -> Any:
    """What was typed in the value box, as the kind reads it: a number, true or
    false, or the category's text."""
    if kind == ScoreKind.NUMERIC:
        try:
            return float(text)
        except ValueError:
            raise InvalidScore(
                "A numeric score's value is a number, such as 4 or 0.75.", field="value"
            ) from None
    if kind == ScoreKind.BOOLEAN:
        word = text.strip().casefold()
        if word in _TRUE | _FALSE:
            return word in _TRUE
        raise InvalidScore("A boolean score's value is true or false.", field="value")
    return text


class ScoreForm(forms.Form):
    """A score as a reviewer types it: a name, a kind, one value box (a number,
    true or false, or the category) and a comment."""

    name = forms.CharField(max_length=MAX_NAME_LENGTH, help_text="e.g. helpfulness, tone")
    kind = forms.ChoiceField(choices=choices(ScoreKind), initial=ScoreKind.NUMERIC)
    value = forms.CharField(
        max_length=100, help_text="A number; true or false; or the category (e.g. rude)."
    )
    comment = forms.CharField(
        required=False,
        max_length=MAX_COMMENT_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
    )

    entry: ScoreInput

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            self.entry = score_input_checked(
                name=data["name"],
                kind=data["kind"],
                value=_typed(data["kind"], data["value"]),
                comment=data.get("comment", ""),
            )
        except InvalidScore as invalid:
            where = invalid.field if invalid.field in self.fields else "value"
            self.add_error(where, str(invalid))
        return data


def add_form(data: Any = None) -> ScoreForm:
    return ScoreForm(data, prefix="score")


def _exact(number: float) -> str:
    """A number as the value box shows it to be changed: every digit it has (a
    comment changed alone must not round the value)."""
    return str(int(number)) if number.is_integer() and abs(number) < 1e15 else repr(number)


def edit_form(score: Score, data: Any = None) -> ScoreForm:
    """The form that changes ``score``, filled with what it says now."""
    value = score_shown(score)
    if score.kind == ScoreKind.NUMERIC and score.value is not None:
        value = _exact(score.value)
    initial = {"name": score.name, "kind": score.kind, "value": value, "comment": score.comment}
    return ScoreForm(data, prefix=f"score-{score.pk}", initial=initial)


@dataclass
class ScoreRow:
    score: Score
    shown: str
    may_change: bool
    may_delete: bool
    form: ScoreForm | None
    # Reopened when what was typed in its form was refused.
    open: bool = False


def score_panel(
    user: Any, run: Run, *, adding: ScoreForm | None = None, editing: ScoreForm | None = None
) -> dict[str, Any]:
    """What the panel shows ``user`` of ``run``'s scores (one query, their
    authors with them): ``adding`` and ``editing`` are forms sent back with what
    was refused."""
    found = list(scores_of(run.pk)[: SCORES_SHOWN + 1])
    rows = []
    for score in found[:SCORES_SHOWN]:
        may_change = may_edit_score(user, score, "change")
        reopened = editing is not None and editing.prefix == f"score-{score.pk}"
        form = editing if reopened else (edit_form(score) if may_change else None)
        rows.append(
            ScoreRow(
                score=score,
                shown=score_shown(score),
                may_change=may_change,
                may_delete=may_edit_score(user, score, "delete"),
                form=form,
                open=reopened,
            )
        )
    return {
        "rows": rows,
        "cut": len(found) > SCORES_SHOWN,
        "may_add": has_permission(user, Score, "add"),
        "ended": run.is_terminal,
        "form": adding if adding is not None else add_form(),
    }
