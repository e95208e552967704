"""Runs found by their scores in the operators' console (the runs list's ``score``
filter), the scores list's filters (author, run agent, value range), and the runs
list's action exporting the selected scored runs as a dataset of JSON lines."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Score
from runs_app.scores import Thumb, feedback_give
from tests.factories import RunFactory, SessionFactory, UserFactory
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:runs_app_run_changelist")
SCORES = reverse("admin:runs_app_score_changelist")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def score(run, name, *, kind=ScoreKind.NUMERIC, value=None, category="", author=None):
    return Score.objects.create(
        run=run,
        name=name,
        kind=kind,
        value=value,
        category=category,
        source=ScoreSource.STAFF,
        author=author,
    )


@pytest.fixture
def runs(owner):
    """A run thumbed down and graded 2 and curt, one graded 5, one with no score."""
    session = SessionFactory(owner=owner)
    panned = RunFactory(session=session, status="completed")
    feedback_give(run_id=panned.pk, user_id=owner.pk, thumb=Thumb.DOWN)
    score(panned, "helpfulness", value=2)
    score(panned, "tone", kind=ScoreKind.CATEGORY, category="curt")
    praised = RunFactory(session=session, status="completed", agent="concierge")
    score(praised, "helpfulness", value=5)
    score(praised, "grounded", kind=ScoreKind.BOOLEAN, value=1.0)
    plain = RunFactory(session=session, status="completed")
    return {"panned": panned, "praised": praised, "plain": plain}


def listed(response, rows: dict) -> set[str]:
    page = response.content.decode()
    return {name for name, row in rows.items() if str(row.pk) in page}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("feedback=down", {"panned"}),
        ("feedback=up", set()),
        ("helpfulness", {"panned", "praised"}),
        ("helpfulness>=4", {"praised"}),
        ("helpfulness<4", {"panned"}),
        ("helpfulness <= 2", {"panned"}),
        ("helpfulness=5", {"praised"}),
        ("tone=curt", {"panned"}),
        ("tone=rude", set()),
        ("grounded=true", {"praised"}),
        ("grounded>0.5", {"praised"}),
    ],
)
def test_the_runs_list_filters_by_score(staff, runs, value, expected):
    response = signed_in(staff).get(RUNS, {"score": value})

    assert response.status_code == 200
    assert listed(response, runs) == expected


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("helpfulness>=x", "compares with a number"),
        (">=4", "is not a score filter"),
        ("tone=", "needs something to compare with"),
        ("x" * 101, "at most 100 characters"),
    ],
)
def test_a_score_filter_that_is_none_lists_nothing_and_says_what_is_expected(
    staff, runs, value, said
):
    response = signed_in(staff).get(RUNS, {"score": value})

    assert response.status_code == 200
    assert listed(response, runs) == set()
    messages = [str(message) for message in get_messages(response.wsgi_request)]
    assert any(said in message and "name>=number" in message for message in messages), messages


def test_the_score_filter_takes_the_same_queries_for_1_and_many_runs(
    staff, owner, django_assert_max_num_queries
):
    client = signed_in(staff)
    session = SessionFactory(owner=owner)
    score(RunFactory(session=session, status="completed"), "helpfulness", value=5)
    client.get(RUNS, {"score": "helpfulness>=4"})
    with CaptureQueriesContext(connection) as one:
        client.get(RUNS, {"score": "helpfulness>=4"})
    for _ in range(5):
        score(RunFactory(session=session, status="completed"), "helpfulness", value=5)

    with django_assert_max_num_queries(len(one.captured_queries)):
        client.get(RUNS, {"score": "helpfulness>=4"})


# The scores list


@pytest.fixture
def given(runs):
    rita, olga = UserFactory(username="rita"), UserFactory(username="olga")
    Score.objects.filter(name="helpfulness", value=2).update(author=rita)
    Score.objects.filter(name="helpfulness", value=5).update(author=olga)
    return Score.objects.all()


def shown_scores(response) -> set[str]:
    page = response.content.decode()
    return {
        f"{s.name}={s.value if s.kind != 'category' else s.category}"
        for s in Score.objects.all()
        if str(s.pk) in page
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"author": "rita"}, {"helpfulness=2.0"}),
        ({"agent": "concierge"}, {"helpfulness=5.0", "grounded=1.0"}),
        ({"value_from": "2", "value_to": "4"}, {"helpfulness=2.0"}),
        ({"value_from": "1"}, {"helpfulness=2.0", "helpfulness=5.0", "grounded=1.0"}),
        ({"value_to": "0.5"}, {"feedback=0.0"}),
        ({"kind__exact": "category"}, {"tone=curt"}),
        ({"source__exact": "feedback"}, {"feedback=0.0"}),
    ],
)
def test_the_scores_list_filters(staff, given, query, expected):
    response = signed_in(staff).get(SCORES, query)

    assert response.status_code == 200
    assert shown_scores(response) == expected


def test_a_value_range_that_is_no_number_lists_nothing_and_says_so(staff, given):
    response = signed_in(staff).get(SCORES, {"value_from": "lots"})

    assert shown_scores(response) == set()
    messages = [str(message) for message in get_messages(response.wsgi_request)]
    assert any("expected a number" in message for message in messages), messages


# The dataset action


def export(client, runs, *, select_across: bool = False):
    return client.post(
        RUNS,
        {
            "action": "export_dataset",
            ACTION_CHECKBOX_NAME: [str(run.pk) for run in runs],
            "select_across": "1" if select_across else "0",
            "index": "0",
        },
    )


def test_the_action_exports_the_selected_scored_runs_and_says_how_many_it_skipped(staff, runs):
    client = signed_in(staff)

    response = export(client, [runs["panned"], runs["plain"]])

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="scored-runs.jsonl"'
    body = b"".join(response.streaming_content).decode()
    [line] = [json.loads(text) for text in body.splitlines()]
    assert line["run_id"] == str(runs["panned"].pk)
    assert {(s["name"], s["value"], s["category"]) for s in line["scores"]} == {
        ("feedback", False, None),
        ("helpfulness", 2.0, None),
        ("tone", None, "curt"),
    }
    messages = [str(message) for message in get_messages(response.wsgi_request)]
    assert "1 of the 2 selected runs have no score" in messages[0]


def test_no_scored_run_selected_exports_nothing(staff, runs):
    response = export(signed_in(staff), [runs["plain"]])

    assert response.status_code == 302
    messages = [str(message) for message in get_messages(response.wsgi_request)]
    assert "None of the selected runs has a score" in messages[0]


def test_the_action_takes_every_view_permission_of_a_dataset(runs):
    partial = signed_in(
        staff_user(
            "dave", perms=("runs_app.view_run", "runs_app.view_turn", "runs_app.view_toolcall")
        )
    )
    whole = signed_in(
        staff_user(
            "erin",
            perms=(
                "runs_app.view_run",
                "runs_app.view_turn",
                "runs_app.view_toolcall",
                "runs_app.view_score",
            ),
        )
    )

    assert "export_dataset" not in partial.get(RUNS).content.decode()
    assert export(partial, [runs["panned"]]).status_code != 200
    assert "export_dataset" in whole.get(RUNS).content.decode()
    assert export(whole, [runs["panned"]]).status_code == 200
