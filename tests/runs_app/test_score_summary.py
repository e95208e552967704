"""What scores add up to per name (runs_app.scores.score_summary, what the operators'
dashboard shows): counts, averages, thumbs up and down, the top categories; two
aggregate queries whatever the number of runs and scores."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Run, Score
from runs_app.scores import ScoreSummary, Thumb, feedback_give, score_summary
from tests.factories import RunFactory, SessionFactory, UserFactory

pytestmark = pytest.mark.django_db


def score(run, name, *, kind=ScoreKind.NUMERIC, value=None, category=""):
    return Score.objects.create(
        run=run, name=name, kind=kind, value=value, category=category, source=ScoreSource.API
    )


def test_per_name_counts_averages_thumbs_and_top_categories(owner, django_assert_num_queries):
    session = SessionFactory(owner=owner)
    runs = RunFactory.create_batch(8, session=session, status="completed")
    for index, run in enumerate(runs):
        score(run, "helpfulness", value=index % 5)
        feedback_give(
            run_id=run.pk,
            user_id=UserFactory(username=f"user{index}").pk,
            thumb=Thumb.UP if index < 5 else Thumb.DOWN,
        )
    for category, times in [("polite", 4), ("curt", 3), ("rude", 2), ("warm", 2), ("dry", 1)]:
        for run in runs[:times]:
            score(run, "tone", kind=ScoreKind.CATEGORY, category=category)
    score(runs[0], "tone", kind=ScoreKind.CATEGORY, category="odd")
    score(runs[0], "grounded", kind=ScoreKind.BOOLEAN, value=1.0)
    score(runs[1], "grounded", kind=ScoreKind.BOOLEAN, value=0.0)
    score(runs[2], "grounded", kind=ScoreKind.BOOLEAN, value=1.0)
    score(RunFactory(status="completed"), "helpfulness", value=100)  # not among the runs

    with django_assert_num_queries(2):
        summary = score_summary(Run.objects.filter(session=session))

    by_name = {row.name: row for row in summary}
    assert [row.name for row in summary] == ["feedback", "grounded", "helpfulness", "tone"]
    assert by_name["helpfulness"] == ScoreSummary(
        name="helpfulness", count=8, average=pytest.approx(13 / 8)
    )
    assert (by_name["feedback"].count, by_name["feedback"].up, by_name["feedback"].down) == (
        8,
        5,
        3,
    )
    assert by_name["grounded"].average == pytest.approx(2 / 3)
    tone = by_name["tone"]
    assert (tone.count, tone.average) == (13, None)
    # The five most frequent, ties by name; "odd" (once, like "dry") is cut.
    assert tone.categories == [("polite", 4), ("curt", 3), ("rude", 2), ("warm", 2), ("dry", 1)]


def test_the_period_bounds_when_the_scores_were_given(owner):
    run = RunFactory(session=SessionFactory(owner=owner), status="completed")
    old = score(run, "helpfulness", value=1)
    score(run, "helpfulness", value=5)
    now = timezone.now()
    Score.objects.filter(pk=old.pk).update(created_at=now - dt.timedelta(days=10))

    recent = score_summary(Run.objects.all(), since=now - dt.timedelta(days=1))
    earlier = score_summary(Run.objects.all(), until=now - dt.timedelta(days=1))

    assert [(row.count, row.average) for row in recent] == [(1, 5.0)]
    assert [(row.count, row.average) for row in earlier] == [(1, 1.0)]
    assert score_summary(Run.objects.none()) == []


def test_the_query_count_stays_two_for_many_runs(owner, django_assert_num_queries):
    session = SessionFactory(owner=owner)
    for run in RunFactory.create_batch(30, session=session, status="completed"):
        score(run, "tone", kind=ScoreKind.CATEGORY, category=f"c{run.pk.hex[:2]}")

    with django_assert_num_queries(2):
        [tone] = score_summary(Run.objects.filter(session=session))
    assert tone.count == 30
    assert len(tone.categories) == 5
