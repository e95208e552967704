"""Feedback on a run's answer: POST/DELETE /api/v1/runs/{id}/feedback/, and the
caller's feedback in the run API.

Alice owns the runs. Bob's ids of her runs are 404s; staff who may read her runs
(an Auditor, an Operator, a superuser) get a 403: feedback is the owner's to give.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Score
from sessions_app.services import api_token_create
from tests.factories import RunFactory, SessionFactory, UserFactory
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db

API = "/api/v1"


def feedback_url(run) -> str:
    return f"{API}/runs/{run.pk}/feedback/"


def client_for(user) -> APIClient:
    _, raw = api_token_create(user_id=user.pk, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def codes(response) -> set[str]:
    return {error["code"] for error in response.json()["errors"]}


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


@pytest.fixture
def answered(session):
    return RunFactory(session=session, status="completed", output="Paris.")


def test_a_thumb_up_is_stored_as_a_feedback_score(api, owner, answered):
    response = api.post(feedback_url(answered), {"value": "up"}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["run"] == str(answered.pk)
    assert body["name"] == "feedback"
    assert body["value"] == "up"
    assert body["comment"] == ""
    score = Score.objects.get()
    assert score.run_id == answered.pk
    assert score.author_id == owner.pk
    assert (score.name, score.kind, score.source, score.value) == (
        "feedback",
        ScoreKind.BOOLEAN,
        ScoreSource.FEEDBACK,
        1.0,
    )


def test_another_thumb_replaces_the_first_comment_and_all(api, answered):
    first = api.post(feedback_url(answered), {"value": "up", "comment": "clear"}, format="json")
    assert first.status_code == 201

    second = api.post(
        feedback_url(answered), {"value": "down", "comment": "wrong city"}, format="json"
    )

    assert second.status_code == 200, second.content
    assert second.json()["id"] == first.json()["id"]
    score = Score.objects.get()
    assert (score.value, score.comment) == (0.0, "wrong city")
    # The same thumb again keeps one score and replaces the comment.
    again = api.post(feedback_url(answered), {"value": "down"}, format="json")
    assert again.status_code == 200
    assert Score.objects.get().comment == ""


def test_taking_feedback_back_deletes_it_and_is_idempotent(api, answered):
    api.post(feedback_url(answered), {"value": "down"}, format="json")

    assert api.delete(feedback_url(answered)).status_code == 204
    assert not Score.objects.exists()
    assert api.delete(feedback_url(answered)).status_code == 204


def test_each_user_keeps_their_own_and_the_run_shows_the_callers(api, owner, answered):
    # Another person's judgement of the same run (a reviewer's, kept as feedback).
    reviewer = UserFactory(username="rita")
    Score.objects.create(
        run=answered,
        name="feedback",
        kind=ScoreKind.BOOLEAN,
        value=0.0,
        source=ScoreSource.FEEDBACK,
        author=reviewer,
    )
    assert api.get(f"{API}/runs/{answered.pk}/").json()["feedback"] is None

    api.post(feedback_url(answered), {"value": "up", "comment": "spot on"}, format="json")

    shown = {"value": "up", "comment": "spot on"}
    assert api.get(f"{API}/runs/{answered.pk}/").json()["feedback"] == shown
    listed = api.get(f"{API}/runs/").json()["results"]
    assert [run["feedback"] for run in listed] == [shown]
    in_session = api.get(f"{API}/sessions/{answered.session_id}/runs/").json()["results"]
    assert [run["feedback"] for run in in_session] == [shown]
    assert Score.objects.count() == 2


def test_a_run_still_under_way_has_no_answer_to_judge(api, session):
    running = RunFactory(session=session, status="running")

    response = api.post(feedback_url(running), {"value": "up"}, format="json")

    assert response.status_code == 409
    assert codes(response) == {"run_not_ended"}
    assert not Score.objects.exists()


@pytest.mark.parametrize("status", ["failed", "canceled", "timed_out"])
def test_every_ended_run_takes_feedback(api, session, status):
    ended = RunFactory(session=session, status=status)

    assert api.post(feedback_url(ended), {"value": "down"}, format="json").status_code == 201


def test_another_users_run_is_not_found(other_api, answered):
    assert other_api.post(feedback_url(answered), {"value": "up"}, format="json").status_code == 404
    assert other_api.delete(feedback_url(answered)).status_code == 404
    assert not Score.objects.exists()


def test_an_unknown_run_is_not_found(api):
    url = f"{API}/runs/6e7969c6-df6f-4e3c-8178-d023f40c633e/feedback/"
    assert api.post(url, {"value": "up"}, format="json").status_code == 404


@pytest.mark.parametrize("groups", [("Auditors",), ("Operators",)])
def test_staff_who_may_read_the_run_may_not_judge_it_for_its_owner(groups, answered):
    staff = client_for(staff_user("erin", groups=groups))
    Score.objects.create(
        run=answered,
        name="feedback",
        kind=ScoreKind.BOOLEAN,
        value=1.0,
        source=ScoreSource.FEEDBACK,
        author=answered.session.owner,
    )

    given = staff.post(feedback_url(answered), {"value": "down"}, format="json")
    taken = staff.delete(feedback_url(answered))

    assert given.status_code == 403
    assert codes(given) == {"permission_denied"}
    assert taken.status_code == 403
    # Alice's stays as she gave it.
    assert Score.objects.get().value == 1.0


def test_a_superuser_is_refused_too(staff_api, answered):
    assert staff_api.post(feedback_url(answered), {"value": "up"}, format="json").status_code == 403


def test_without_credentials_it_is_a_401(answered):
    response = APIClient().post(feedback_url(answered), {"value": "up"}, format="json")
    assert response.status_code == 401


HOSTILE_BODIES = [
    ({}, "required"),
    ({"value": "sideways"}, "invalid_choice"),
    ({"value": 1}, "invalid_choice"),
    ({"value": None}, "null"),
    ({"value": ["up"]}, "invalid_choice"),
    ({"value": "up", "comment": 42}, "invalid"),
    ({"value": "up", "comment": None}, "null"),
    ({"value": "up", "comment": "x" * 2001}, "max_length"),
    ({"value": "up", "comment": "bad\x00byte"}, "null_characters_not_allowed"),
    ({"value": "up", "comment": {"$gt": ""}}, "invalid"),
]


@pytest.mark.parametrize(("body", "code"), HOSTILE_BODIES)
def test_hostile_bodies_are_a_400_and_store_nothing(api, answered, body, code):
    response = api.post(feedback_url(answered), body, format="json")

    assert response.status_code == 400, response.content
    assert code in codes(response)
    assert not Score.objects.exists()


def test_a_body_that_is_not_an_object_is_a_400(api, answered):
    for raw in ('["up"]', '"up"', "{not json", "null"):
        response = api.post(feedback_url(answered), raw, content_type="application/json")
        assert response.status_code == 400, (raw, response.content)
    assert not Score.objects.exists()


def test_run_lists_with_feedback_take_the_same_number_of_queries_for_1_and_many_runs(
    api, session, django_assert_num_queries
):
    url = f"{API}/runs/"
    first = RunFactory(session=session, status="completed")
    api.post(feedback_url(first), {"value": "up"}, format="json")
    with CaptureQueriesContext(connection) as one:
        assert len(api.get(url).json()["results"]) == 1
    # Counted now: the next request empties the connection's log of queries.
    queries = len(one.captured_queries)

    for run in RunFactory.create_batch(4, session=session, status="completed"):
        api.post(feedback_url(run), {"value": "down", "comment": "no"}, format="json")
    with django_assert_num_queries(queries):
        results = api.get(url).json()["results"]

    assert sorted(run["feedback"]["value"] for run in results) == ["down"] * 4 + ["up"]
