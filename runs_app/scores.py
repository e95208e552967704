"""Scores on runs: every write and read of them.

A user's feedback (thumbs up or down, with an optional comment) on the answers of
their runs is a :class:`~runs_app.models.Score` named ``feedback``, kind boolean
(value 1 for up, 0 for down), source ``feedback``, authored by the user. A user
keeps at most one on a run: giving another replaces it, taking it back deletes it.

Every other score is a judgement someone gave a run that has ended: a reviewer in
the admin's run timeline (source ``staff``) or an integration through the API (an
evaluation pipeline, source ``api``). It has a name (``helpfulness``), a kind
(numeric, boolean or category), the value or category and a comment; its author
may change or delete it. Both doors check what they are given with
:func:`score_input_checked` and write through :func:`score_add`,
:func:`score_change` and :func:`score_delete`, the one writer of those rows.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import (
    Avg,
    BigIntegerField,
    Count,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    UUIDField,
)

from goaai import sql
from goaai.runtime.errors import GoaaiError, NotFound
from goaai.runtime.vocabulary import RunStatus, ScoreKind, ScoreSource
from runs_app.models import Run, Score

FEEDBACK = "feedback"
MAX_COMMENT_LENGTH = 2000
MAX_NAME_LENGTH = 100
MAX_CATEGORY_LENGTH = 100
# The score filter (``helpfulness>=4``) reads these as its operators, so a name
# cannot hold them; control characters have no place in a name or a category.
_NOT_IN_NAME = re.compile(r"[=<>\x00-\x1f\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The categories the summary counts for each score name, most frequent first.
TOP_CATEGORIES = 5


class Thumb(StrEnum):
    UP = "up"
    DOWN = "down"

    @property
    def value_number(self) -> float:
        return 1.0 if self is Thumb.UP else 0.0


class RunNotEnded(GoaaiError):
    """Feedback is on an answer: a run that has not ended has none yet."""

    code = "run_not_ended"


def thumb_of(value: float | None) -> str | None:
    """How a stored feedback value reads: ``up``, ``down`` (``None``: no feedback)."""
    if value is None:
        return None
    return Thumb.UP.value if value >= 0.5 else Thumb.DOWN.value


def _feedback_of(user_id: Any) -> QuerySet[Score]:
    return Score.objects.filter(name=FEEDBACK, source=ScoreSource.FEEDBACK, author_id=user_id)


# One person's feedback on one run (a run's detail shows the caller's).
_CALLER_FEEDBACK = sql.Prepared(
    lambda: (
        _feedback_of(sql.Slot("user", BigIntegerField()))
        .filter(run_id=sql.Slot("run", UUIDField()))
        .order_by()
        .values_list("value", "comment")
    )
)


def feedback_give(
    *, run_id: UUID, user_id: int, thumb: Thumb, comment: str = ""
) -> tuple[Score, bool]:
    """Record ``user_id``'s thumb (and comment) on the answer of ``run_id``, replacing
    the one they gave before; returns it, and whether it is their first on the run.
    :class:`RunNotEnded` while the run is under way."""
    with transaction.atomic():
        # The run's row is the lock: one person's two clicks at once give one score.
        status = (
            Run.objects.select_for_update()
            .filter(pk=run_id)
            .values_list("status", flat=True)
            .first()
        )
        if status is None:
            raise NotFound(f"No run {run_id}.")
        if not RunStatus(status).is_terminal:
            raise RunNotEnded(f"Run {run_id} is {status}: give feedback once it has ended.")
        score, created = Score.objects.update_or_create(
            run_id=run_id,
            name=FEEDBACK,
            source=ScoreSource.FEEDBACK,
            author_id=user_id,
            defaults={
                "kind": ScoreKind.BOOLEAN,
                "value": thumb.value_number,
                "category": "",
                "comment": comment,
            },
        )
    return score, created


def feedback_remove(*, run_id: UUID, user_id: int) -> bool:
    """Take back ``user_id``'s feedback on ``run_id``; whether there was one."""
    deleted, _ = _feedback_of(user_id).filter(run_id=run_id).delete()
    return bool(deleted)


def feedback_by_run(*, session_id: UUID, user_id: int | None) -> dict[str, dict[str, Any]]:
    """``user_id``'s feedback on the runs of a session, by run id: what the chat page
    shows on its answers (one query)."""
    if user_id is None:
        return {}
    rows = _feedback_of(user_id).filter(run__session_id=session_id)
    return {
        str(run_id): {"value": thumb_of(value), "comment": comment}
        for run_id, value, comment in rows.values_list("run_id", "value", "comment")
    }


def with_caller_feedback(runs: QuerySet[Run], user: Any) -> QuerySet[Run]:
    """``runs`` with ``user``'s feedback on each, read in the same query
    (``caller_feedback_value``: 1, 0 or null; ``caller_feedback_comment``)."""
    if not getattr(user, "is_authenticated", False):
        return runs
    mine = _feedback_of(user.pk).filter(run_id=OuterRef("pk"))
    return runs.annotate(
        caller_feedback_value=Subquery(mine.values("value")[:1], output_field=FloatField()),
        caller_feedback_comment=Subquery(mine.values("comment")[:1], output_field=TextField()),
    )


def without_caller_feedback(run: Run) -> Run:
    """``run`` as :func:`with_caller_feedback` reads it, for a run known to have no
    feedback yet: one just made, whose id nobody else knew."""
    run.__dict__.update(caller_feedback_value=None, caller_feedback_comment="")
    return run


def caller_feedback(run: Run, user: Any) -> dict[str, Any] | None:
    """``user``'s feedback on ``run`` as the API shows it, or ``None``: from what
    :func:`with_caller_feedback` read with the run, else read now."""
    if hasattr(run, "caller_feedback_value"):
        value = getattr(run, "caller_feedback_value", None)
        comment = getattr(run, "caller_feedback_comment", "")
    elif getattr(user, "is_authenticated", False):
        found = _CALLER_FEEDBACK.first(user=user.pk, run=run.pk)
        value, comment = found if found is not None else (None, "")
    else:
        return None
    if value is None:
        return None
    return {"value": thumb_of(value), "comment": comment or ""}


# Scores given by staff and integrations


class InvalidScore(GoaaiError):
    """A score that cannot be recorded as given; ``field`` names what is wrong
    (``name``, ``kind``, ``value``, ``category`` or ``comment``). Nothing was written."""

    code = "invalid"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class FeedbackNotEditable(GoaaiError):
    """A user's feedback is theirs: it changes through the feedback endpoint only."""

    code = "permission_denied"


@dataclass(frozen=True)
class ScoreValue:
    """What a score says: ``value`` for a numeric or boolean one (1 or 0),
    ``category`` for a category one."""

    kind: ScoreKind
    value: float | None = None
    category: str = ""


@dataclass(frozen=True)
class ScoreInput:
    """A score checked and ready to record (see :func:`score_input_checked`)."""

    name: str
    score: ScoreValue
    comment: str = ""


def score_name_checked(name: Any) -> str:
    """A score's name: 1 to 100 characters (spaces around it dropped), not the
    users' ``feedback``, without the score filter's operators."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidScore("A score needs a name of 1 to 100 characters.", field="name")
    text = str(name).strip()
    if len(text) > MAX_NAME_LENGTH:
        raise InvalidScore(f"A score's name is at most {MAX_NAME_LENGTH} characters.", field="name")
    if text.casefold() == FEEDBACK:
        raise InvalidScore(
            "`feedback` is the name of users' thumbs up or down (POST /runs/{id}/feedback/): "
            "give this score another name.",
            field="name",
        )
    if _NOT_IN_NAME.search(text):
        raise InvalidScore(
            "A score's name cannot contain =, <, > or control characters.", field="name"
        )
    return text


def comment_checked(comment: Any) -> str:
    """A score's comment: text of at most 2000 characters (none is fine)."""
    if comment is None:
        return ""
    if not isinstance(comment, str):
        raise InvalidScore("A comment is text.", field="comment")
    if len(comment) > MAX_COMMENT_LENGTH:
        raise InvalidScore(
            f"A comment is at most {MAX_COMMENT_LENGTH} characters.", field="comment"
        )
    if "\x00" in comment:
        raise InvalidScore("A comment cannot contain NUL characters.", field="comment")
    return comment


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidScore("A numeric score's value is a number.", field="value")
    try:
        number = float(value)
    except OverflowError:  # an integer past what a float holds
        number = math.inf
    if not math.isfinite(number):
        raise InvalidScore("A numeric score's value is a finite number.", field="value")
    return number


def _category(category: Any, where: str) -> str:
    if not isinstance(category, str) or not category.strip():
        raise InvalidScore(
            f"A category score's category is text of 1 to {MAX_CATEGORY_LENGTH} characters.",
            field=where,
        )
    text = str(category).strip()
    if len(text) > MAX_CATEGORY_LENGTH:
        raise InvalidScore(f"A category is at most {MAX_CATEGORY_LENGTH} characters.", field=where)
    if _CONTROL.search(text):
        raise InvalidScore("A category cannot contain control characters.", field=where)
    return text


def _kind_of(kind: Any, value: Any, category: Any) -> ScoreKind:
    """The kind asked for, or the one the value spells: true or false is boolean, a
    number numeric, text (or a category) a category."""
    if kind is not None:
        if kind not in ScoreKind.__members__.values():
            raise InvalidScore("The kind is numeric, boolean or category.", field="kind")
        return ScoreKind(kind)
    if category is not None or isinstance(value, str):
        return ScoreKind.CATEGORY
    if isinstance(value, bool):
        return ScoreKind.BOOLEAN
    if value is None:
        raise InvalidScore(
            "Send a value (a number, or true or false) or a category.", field="value"
        )
    return ScoreKind.NUMERIC


def score_value_checked(*, kind: Any = None, value: Any = None, category: Any = None) -> ScoreValue:
    """What a score says, from a kind (``None``: the one ``value`` spells), a value
    and a category, as JSON gives them. A numeric value is a finite number, a
    boolean one true or false, a category 1 to 100 characters; a category score
    takes its text as ``category`` or as ``value``, the others take no category."""
    chosen = _kind_of(kind, value, category)
    if chosen == ScoreKind.CATEGORY:
        if category is not None and value is not None:
            raise InvalidScore("Send a category or a value, not both.", field="value")
        given = category if category is not None else value
        return ScoreValue(
            chosen, category=_category(given, "value" if category is None else "category")
        )
    if category is not None:
        raise InvalidScore(f"A {chosen} score has a value, not a category.", field="category")
    if value is None:
        raise InvalidScore(f"A {chosen} score needs a value.", field="value")
    if chosen == ScoreKind.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidScore("A boolean score's value is true or false.", field="value")
        return ScoreValue(chosen, value=1.0 if value else 0.0)
    return ScoreValue(chosen, value=_number(value))


def score_input_checked(
    *, name: Any, kind: Any = None, value: Any = None, category: Any = None, comment: Any = None
) -> ScoreInput:
    """A new score as given (by the API or the timeline's form), checked: raises
    :class:`InvalidScore` naming the first thing wrong."""
    return ScoreInput(
        name=score_name_checked(name),
        score=score_value_checked(kind=kind, value=value, category=category),
        comment=comment_checked(comment),
    )


def score_add(
    *, run_id: UUID, author_id: int | None, source: ScoreSource, entry: ScoreInput
) -> Score:
    """Record ``entry`` on the run ``run_id`` as given by ``author_id`` through
    ``source`` (``staff`` or ``api``). :class:`RunNotEnded` while the run is under
    way: a score judges what a run did."""
    if source == ScoreSource.FEEDBACK:
        raise ValueError("Feedback is given with feedback_give().")
    with transaction.atomic():
        status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
        if status is None:
            raise NotFound(f"No run {run_id}.")
        if not RunStatus(status).is_terminal:
            raise RunNotEnded(f"Run {run_id} is {status}: score it once it has ended.")
        return Score.objects.create(
            run_id=run_id,
            name=entry.name,
            kind=entry.score.kind,
            value=entry.score.value,
            category=entry.score.category,
            source=source,
            author_id=author_id,
            comment=entry.comment,
        )


def score_change(
    *,
    score_id: UUID,
    name: str | None = None,
    score: ScoreValue | None = None,
    comment: str | None = None,
) -> Score:
    """Change what a staff or API score says: its name, its kind and value (or
    category) or its comment; what is ``None`` stays. The row is locked while it
    changes, and only the fields given are written. A user's feedback is not
    changed here (:class:`FeedbackNotEditable`)."""
    with transaction.atomic():
        found = Score.objects.select_for_update().filter(pk=score_id).first()
        if found is None:
            raise NotFound(f"No score {score_id}.")
        if found.source == ScoreSource.FEEDBACK:
            raise FeedbackNotEditable("A user's feedback is theirs to change.")
        changed = ["updated_at"]
        if name is not None:
            found.name = name
            changed.append("name")
        if score is not None:
            found.kind, found.value, found.category = score.kind, score.value, score.category
            changed += ["kind", "value", "category"]
        if comment is not None:
            found.comment = comment
            changed.append("comment")
        found.save(update_fields=changed)
    return found


def score_delete(*, score_id: UUID) -> bool:
    """Delete a staff or API score; whether there was one. A user's feedback is
    taken back by its user (:class:`FeedbackNotEditable`)."""
    with transaction.atomic():
        found = Score.objects.select_for_update().filter(pk=score_id).first()
        if found is None:
            return False
        if found.source == ScoreSource.FEEDBACK:
            raise FeedbackNotEditable("A user's feedback is theirs to take back.")
        found.delete()
    return True


def scores_of(run_id: UUID) -> QuerySet[Score]:
    """The scores of a run, feedback included, oldest first, with their authors."""
    return Score.objects.filter(run_id=run_id).select_related("author").order_by("created_at", "id")


def score_json_value(kind: str, value: float | None) -> float | bool | None:
    """A score's value as JSON shows it: a number, true or false, or null for a
    category score."""
    if kind == ScoreKind.CATEGORY or value is None:
        return None
    if kind == ScoreKind.BOOLEAN:
        return value >= 0.5
    return value


def score_shown(score: Score) -> str:
    """A score's value in words: its category, up or down (feedback), true or
    false (other booleans), or its number."""
    if score.kind == ScoreKind.CATEGORY:
        return score.category
    if score.value is None:
        return ""
    if score.kind == ScoreKind.BOOLEAN:
        if score.name == FEEDBACK:
            return thumb_of(score.value) or ""
        return "true" if score.value >= 0.5 else "false"
    return f"{score.value:.15g}"


# What the scores of many runs add up to


@dataclass(frozen=True)
class ScoreSummary:
    """What the scores of one name given in a period add up to: how many there
    are, the average of the numeric and boolean ones (a boolean's is the share of
    true), the thumbs up and down of ``feedback``, and the most frequent categories
    with their counts."""

    name: str
    count: int
    average: float | None
    up: int = 0
    down: int = 0
    categories: list[tuple[str, int]] = field(default_factory=list)


def _scores_in(
    runs: QuerySet[Run], since: dt.datetime | None, until: dt.datetime | None
) -> QuerySet[Score]:
    scores = Score.objects.filter(run__in=runs.order_by().values("id"))
    if since is not None:
        scores = scores.filter(created_at__gte=since)
    if until is not None:
        scores = scores.filter(created_at__lt=until)
    return scores.order_by()


def score_summary(
    runs: QuerySet[Run], since: dt.datetime | None = None, until: dt.datetime | None = None
) -> list[ScoreSummary]:
    """Per score name, what the scores of ``runs`` given from ``since`` until
    ``until`` add up to (see :class:`ScoreSummary`), names in order. Two aggregate
    queries whatever the number of runs or scores: one grouped by name, one by name
    and category."""
    scores = _scores_in(runs, since, until)
    valued = Q(kind__in=[ScoreKind.NUMERIC, ScoreKind.BOOLEAN])
    thumbs = Q(name=FEEDBACK, source=ScoreSource.FEEDBACK)
    totals = (
        scores.values("name")
        .annotate(
            n=Count("id"),
            average=Avg("value", filter=valued),
            up=Count("id", filter=thumbs & Q(value__gte=0.5)),
            down=Count("id", filter=thumbs & Q(value__lt=0.5)),
        )
        .order_by("name")
    )
    # Each name's categories, most frequent first: one row per (name, category),
    # the short lists of labels categories are.
    counted = (
        scores.filter(kind=ScoreKind.CATEGORY)
        .values("name", "category")
        .annotate(n=Count("id"))
        .order_by("name", "-n", "category")
    )
    categories: dict[str, list[tuple[str, int]]] = {}
    for row in counted:
        top = categories.setdefault(row["name"], [])
        if len(top) < TOP_CATEGORIES:
            top.append((row["category"], row["n"]))
    return [
        ScoreSummary(
            name=row["name"],
            count=row["n"],
            average=row["average"],
            up=row["up"],
            down=row["down"],
            categories=categories.get(row["name"], []),
        )
        for row in totals
    ]
