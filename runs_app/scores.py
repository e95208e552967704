"""Scores on runs: every write and read of a user's feedback (thumbs up or down, with
an optional comment) on the answers of their runs.

Feedback is a :class:`~runs_app.models.Score` named ``feedback``, kind boolean
(value 1 for up, 0 for down), source ``feedback``, authored by the user. A user
keeps at most one on a run: giving another replaces it, taking it back deletes it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import FloatField, OuterRef, QuerySet, Subquery, TextField

from goaai.runtime.errors import GoaaiError, NotFound
from goaai.runtime.vocabulary import RunStatus, ScoreKind, ScoreSource
from runs_app.models import Run, Score

FEEDBACK = "feedback"
MAX_COMMENT_LENGTH = 2000


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


def _feedback_of(user_id: int) -> QuerySet[Score]:
    return Score.objects.filter(name=FEEDBACK, source=ScoreSource.FEEDBACK, author_id=user_id)


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


def caller_feedback(run: Run, user: Any) -> dict[str, Any] | None:
    """``user``'s feedback on ``run`` as the API shows it, or ``None``: from what
    :func:`with_caller_feedback` read with the run, else read now."""
    if hasattr(run, "caller_feedback_value"):
        value = getattr(run, "caller_feedback_value", None)
        comment = getattr(run, "caller_feedback_comment", "")
    elif getattr(user, "is_authenticated", False):
        found = _feedback_of(user.pk).filter(run_id=run.pk).values_list("value", "comment").first()
        value, comment = found if found is not None else (None, "")
    else:
        return None
    if value is None:
        return None
    return {"value": thumb_of(value), "comment": comment or ""}
