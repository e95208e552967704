"""Usage counts the users' feedback: GET /api/v1/usage/ gives each group the thumbs
up and down its runs got (``feedback: {up, down}``)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from goaai.runtime.types import Usage
from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Run, Score
from runs_app.scores import Thumb, feedback_give
from tests.api.test_staff_permissions import client_for
from tests.factories import RunFactory, SessionFactory, UserFactory, recorded_turn
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db

USAGE = "/api/v1/usage/"


def ended_run(session, *, agent="assistant", models=("openai:gpt-4.1",), day=None) -> Run:
    run = RunFactory(session=session, agent=agent, status="running")
    for index, model in enumerate(models):
        recorded_turn(run, index, Usage(5, 1), model=model)
    Run.objects.filter(pk=run.pk).update(status="completed", ended_at=timezone.now())
    if day is not None:
        Run.objects.filter(pk=run.pk).update(created_at=day)
    run.refresh_from_db()
    return run


def thumb(run, user, value: str) -> None:
    feedback_give(run_id=run.pk, user_id=user.pk, thumb=Thumb(value))


def feedback(response) -> dict[str, dict[str, int]]:
    assert response.status_code == 200, response.content
    return {row["group"]: row["feedback"] for row in response.json()["results"]}


@pytest.fixture
def alices(owner):
    """Alice's runs: two of the assistant (up, down), one of the concierge (up), one
    with no feedback, and a reviewer's score that is not feedback."""
    session = SessionFactory(owner=owner)
    yesterday = timezone.now() - dt.timedelta(days=1)
    runs = {
        "a1": ended_run(session, models=("openai:gpt-4.1", "openai:gpt-4.1"), day=yesterday),
        "a2": ended_run(session, models=("openai:gpt-4.1", "anthropic:claude")),
        "c1": ended_run(session, agent="concierge", models=("anthropic:claude",)),
        "quiet": ended_run(session),
    }
    thumb(runs["a1"], owner, "up")
    thumb(runs["a2"], owner, "down")
    thumb(runs["c1"], owner, "up")
    Score.objects.create(
        run=runs["quiet"],
        name="helpfulness",
        kind=ScoreKind.BOOLEAN,
        value=1.0,
        source=ScoreSource.STAFF,
        author=UserFactory(username="rita"),
    )
    return runs


def test_by_agent(api, alices):
    assert feedback(api.get(USAGE, {"group_by": "agent"})) == {
        "assistant": {"up": 1, "down": 1},
        "concierge": {"up": 1, "down": 0},
    }


def test_by_model_each_run_counts_once_for_each_model_it_used(api, alices):
    assert feedback(api.get(USAGE, {"group_by": "model"})) == {
        "openai:gpt-4.1": {"up": 1, "down": 1},
        "anthropic:claude": {"up": 1, "down": 1},
    }


def test_by_day(api, alices):
    today = timezone.now().astimezone(dt.UTC).date()
    yesterday = today - dt.timedelta(days=1)
    assert feedback(api.get(USAGE, {"group_by": "day"})) == {
        yesterday.isoformat(): {"up": 1, "down": 0},
        today.isoformat(): {"up": 1, "down": 1},
    }


def test_by_user_for_staff_who_read_every_run(alices, other_user):
    bobs = ended_run(SessionFactory(owner=other_user), agent="concierge")
    thumb(bobs, other_user, "down")
    auditor = client_for(staff_user("erin", groups=("Auditors",)))

    assert feedback(auditor.get(USAGE, {"group_by": "user"})) == {
        "alice": {"up": 2, "down": 1},
        "bob": {"up": 0, "down": 1},
    }


def test_a_user_counts_only_their_own_runs(other_api, alices):
    assert feedback(other_api.get(USAGE, {"group_by": "agent"})) == {}


def test_the_range_selects_the_runs_whose_feedback_counts(api, alices):
    since = (timezone.now() - dt.timedelta(hours=1)).isoformat()
    assert feedback(api.get(USAGE, {"group_by": "agent", "from": since})) == {
        "assistant": {"up": 0, "down": 1},
        "concierge": {"up": 1, "down": 0},
    }


@pytest.mark.parametrize("group_by", ["agent", "model", "user", "day"])
def test_feedback_adds_one_query_however_many_runs(api, owner, group_by, django_assert_num_queries):
    session = SessionFactory(owner=owner)
    api.get(USAGE)  # the token's first use of the minute is noted with a write
    expected = 3 if group_by == "model" else 4
    for rows in (1, 4):
        while Run.objects.count() < rows:
            thumb(ended_run(session, agent=f"agent{Run.objects.count()}"), owner, "up")

        with django_assert_num_queries(expected):
            response = api.get(USAGE, {"group_by": group_by})

        assert sum(row["feedback"]["up"] for row in response.json()["results"]) == rows
