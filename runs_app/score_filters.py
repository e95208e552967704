"""Runs chosen by their scores, in the words operators type: ``helpfulness`` (runs
with any score of that name), ``feedback=down``, ``tone=rude``, ``helpfulness>=4``,
``latency<2.5``. One reading for the runs changelist's filter, the dataset export's
``score`` parameter and ``manage.py export_dataset --score``.

``name=value`` matches a boolean score by true or false (``up`` and ``down``, ``yes``
and ``no`` too), a numeric one by its number, a category one by its category;
``>=``, ``<=``, ``>`` and ``<`` compare numbers (a boolean is 1 or 0). Each
condition is an ``EXISTS`` on the scores of the run, which the (run, name) index
answers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Q, QuerySet

from goaai.runtime.errors import GoaaiError
from goaai.runtime.vocabulary import ScoreKind
from runs_app.models import Run, Score
from runs_app.scores import MAX_CATEGORY_LENGTH, MAX_NAME_LENGTH

EXPECTED = (
    "a score filter is name, name=value, name>=number or name<number "
    "(e.g. feedback=down, helpfulness>=4, tone=rude)"
)
_EXPRESSION = re.compile(r"(?P<name>[^=<>]+?)\s*(?:(?P<op>>=|<=|=|>|<)\s*(?P<operand>.*))?")
_TRUE = frozenset({"true", "up", "yes"})
_FALSE = frozenset({"false", "down", "no"})
_COMPARISONS = {">=": "gte", "<=": "lte", ">": "gt", "<": "lt"}


class InvalidScoreFilter(GoaaiError):
    """A score filter that does not read as one; its message says what is expected."""

    code = "invalid"


@dataclass(frozen=True)
class ScoreCondition:
    """One score filter, read: the score's name, and the comparison (``None``: any
    score of that name) with what it compares to."""

    name: str
    op: str | None = None
    operand: str = ""

    def scores(self) -> Q:
        """The scores that meet the condition (on ``Score``)."""
        named = Q(name=self.name)
        if self.op is None:
            return named
        if self.op != "=":
            lookup = f"value__{_COMPARISONS[self.op]}"
            number = _finite(self.operand)
            if number is None:
                raise InvalidScoreFilter(
                    f"{self.name}{self.op} compares with a number; {EXPECTED}."
                )
            valued = [ScoreKind.NUMERIC, ScoreKind.BOOLEAN]
            return named & Q(kind__in=valued, **{lookup: number})
        return named & self._equal()

    def _equal(self) -> Q:
        as_category = Q(kind=ScoreKind.CATEGORY, category=self.operand)
        word = self.operand.casefold()
        if word in _TRUE:
            return Q(kind=ScoreKind.BOOLEAN, value__gte=0.5) | as_category
        if word in _FALSE:
            return Q(kind=ScoreKind.BOOLEAN, value__lt=0.5) | as_category
        number = _finite(self.operand)
        if number is not None:
            valued = [ScoreKind.NUMERIC, ScoreKind.BOOLEAN]
            return Q(kind__in=valued, value=number) | as_category
        return as_category


def _finite(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def score_condition(text: str) -> ScoreCondition:
    """``text`` read as a score filter; :class:`InvalidScoreFilter` when it is none."""
    match = _EXPRESSION.fullmatch(text.strip())
    if match is None or "\x00" in text:
        raise InvalidScoreFilter(f"{text!r} is not a score filter: {EXPECTED}.")
    name, op, operand = match["name"].strip(), match["op"], (match["operand"] or "").strip()
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidScoreFilter(
            f"a score's name is at most {MAX_NAME_LENGTH} characters; {EXPECTED}."
        )
    if op is not None and not operand:
        raise InvalidScoreFilter(f"{name}{op} needs something to compare with: {EXPECTED}.")
    if len(operand) > MAX_CATEGORY_LENGTH:
        raise InvalidScoreFilter(
            f"a category is at most {MAX_CATEGORY_LENGTH} characters; {EXPECTED}."
        )
    condition = ScoreCondition(name=name, op=op, operand=operand)
    condition.scores()  # a comparison with what is not a number is refused here
    return condition


def runs_scored(runs: QuerySet[Run], filters: Iterable[str]) -> QuerySet[Run]:
    """The runs of ``runs`` that have a score meeting each of ``filters`` (each a
    score filter, see the module); :class:`InvalidScoreFilter` for one that is none."""
    for text in filters:
        wanted = score_condition(text).scores()
        runs = runs.filter(Exists(Score.objects.filter(wanted, run_id=OuterRef("pk"))))
    return runs


def scored_runs(runs: QuerySet[Run]) -> QuerySet[Run]:
    """The runs of ``runs`` with at least one score."""
    return runs.filter(Exists(Score.objects.filter(run_id=OuterRef("pk"))))
