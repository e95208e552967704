"""Scores through the API: GET/POST /api/v1/runs/{id}/scores/ and GET/PATCH/DELETE
/api/v1/runs/{id}/scores/{score_id}/.

Alice owns the runs and scores them (source ``api``). Bob's ids of her runs are
404s. Staff who may read her runs list their scores; scoring them takes
``runs_app.add_score``, changing or deleting another's score ``change_score`` or
``delete_score``; users' feedback is never changed here.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Score
from runs_app.scores import Thumb, feedback_give
from sessions_app.services import api_token_create
from tests.factories import RunFactory, SessionFactory
from tests.permissions import log_entries, staff_user

pytestmark = pytest.mark.django_db

API = "/api/v1"
UNKNOWN = "6e7969c6-df6f-4e3c-8178-d023f40c633e"
# What reading another user's run and its scores takes.
READ = ("runs_app.view_run", "runs_app.view_turn", "runs_app.view_toolcall")


def scores_url(run) -> str:
    return f"{API}/runs/{run.pk}/scores/"


def score_url(run, score) -> str:
    return f"{API}/runs/{run.pk}/scores/{score.pk if hasattr(score, 'pk') else score}/"


def client_for(user) -> APIClient:
    _, raw = api_token_create(user_id=user.pk, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def errors(response) -> set[tuple[str | None, str]]:
    return {(error["attr"], error["code"]) for error in response.json()["errors"]}


@pytest.fixture
def answered(owner):
    return RunFactory(session=SessionFactory(owner=owner), status="completed", output="Paris.")


@pytest.fixture
def graded(answered, owner):
    """Alice's own grade of her run, through the API."""
    return Score.objects.create(
        run=answered,
        name="helpfulness",
        kind=ScoreKind.NUMERIC,
        value=3.0,
        source=ScoreSource.API,
        author=owner,
    )


@pytest.mark.parametrize(
    ("body", "kind", "value", "category"),
    [
        ({"name": "helpfulness", "value": 4}, "numeric", 4.0, None),
        ({"name": "helpfulness", "kind": "numeric", "value": 0.75}, "numeric", 0.75, None),
        ({"name": "grounded", "value": True}, "boolean", True, None),
        ({"name": "grounded", "kind": "boolean", "value": False}, "boolean", False, None),
        ({"name": "tone", "value": "rude"}, "category", None, "rude"),
        ({"name": "tone", "category": "polite"}, "category", None, "polite"),
        ({"name": "tone", "kind": "category", "category": " curt "}, "category", None, "curt"),
    ],
)
def test_the_owner_scores_her_run_each_kind_inferred_or_given(
    api, owner, answered, body, kind, value, category
):
    response = api.post(scores_url(answered), {**body, "comment": "checked"}, format="json")

    assert response.status_code == 201, response.content
    shown = response.json()
    assert (shown["name"], shown["kind"], shown["value"], shown["category"]) == (
        body["name"],
        kind,
        value,
        category,
    )
    assert (shown["source"], shown["author"], shown["comment"]) == ("api", "alice", "checked")
    assert shown["run"] == str(answered.pk)
    stored = Score.objects.get(pk=shown["id"])
    assert (stored.kind, stored.source, stored.author_id) == (kind, ScoreSource.API, owner.pk)
    # Her own run: nothing to log in the operators' audit.
    assert log_entries(owner, stored) == []


def test_the_list_holds_every_score_of_the_run_oldest_first(api, owner, answered, graded):
    feedback_give(run_id=answered.pk, user_id=owner.pk, thumb=Thumb.DOWN, comment="wrong")
    api.post(scores_url(answered), {"name": "tone", "value": "curt"}, format="json")
    other_run = RunFactory(session=answered.session, status="completed")
    api.post(scores_url(other_run), {"name": "elsewhere", "value": 1}, format="json")

    response = api.get(scores_url(answered))

    assert response.status_code == 200
    listed = response.json()["results"]
    assert [(s["name"], s["value"], s["category"], s["source"]) for s in listed] == [
        ("helpfulness", 3.0, None, "api"),
        ("feedback", False, None, "feedback"),
        ("tone", None, "curt", "api"),
    ]
    assert listed[1]["comment"] == "wrong"
    assert api.get(score_url(answered, graded)).json()["value"] == 3.0


def test_the_list_takes_the_same_queries_for_1_and_many_scores(api, owner, answered):
    api.post(scores_url(answered), {"name": "a", "value": 1}, format="json")
    with CaptureQueriesContext(connection) as one:
        assert len(api.get(scores_url(answered)).json()["results"]) == 1
    for index in range(5):
        api.post(scores_url(answered), {"name": f"n{index}", "value": index}, format="json")

    with CaptureQueriesContext(connection) as many:
        assert len(api.get(scores_url(answered)).json()["results"]) == 6
    assert len(many.captured_queries) == len(one.captured_queries)


HOSTILE = [
    ({}, ("name", "required")),
    ({"name": ""}, ("name", "blank")),
    ({"name": 7, "value": 1}, ("name", "invalid")),
    ({"name": "x" * 101, "value": 1}, ("name", "max_length")),
    ({"name": "feedback", "value": True}, ("name", "invalid")),
    ({"name": "Feedback", "value": True}, ("name", "invalid")),
    ({"name": "a>=b", "value": 1}, ("name", "invalid")),
    ({"name": "x\x00y", "value": 1}, ("name", "null_characters_not_allowed")),
    ({"name": "helpfulness"}, ("value", "invalid")),
    ({"name": "helpfulness", "value": None}, ("value", "invalid")),
    ({"name": "helpfulness", "kind": "grade", "value": 1}, ("kind", "invalid_choice")),
    ({"name": "helpfulness", "kind": "numeric", "value": "4"}, ("value", "invalid")),
    ({"name": "helpfulness", "kind": "numeric", "value": True}, ("value", "invalid")),
    ({"name": "helpfulness", "kind": "numeric", "value": 10**400}, ("value", "invalid")),
    ({"name": "helpfulness", "value": [1]}, ("value", "invalid")),
    ({"name": "helpfulness", "value": {"$gt": 0}}, ("value", "invalid")),
    ({"name": "grounded", "kind": "boolean", "value": 1}, ("value", "invalid")),
    ({"name": "grounded", "kind": "boolean", "value": "true"}, ("value", "invalid")),
    ({"name": "tone", "kind": "category", "value": ""}, ("value", "invalid")),
    ({"name": "tone", "category": ""}, ("category", "blank")),
    ({"name": "tone", "category": "x" * 101}, ("category", "max_length")),
    ({"name": "tone", "category": 5}, ("category", "invalid")),
    ({"name": "tone", "value": "rude", "category": "rude"}, ("value", "invalid")),
    ({"name": "helpfulness", "kind": "numeric", "category": "x"}, ("category", "invalid")),
    ({"name": "tone", "value": "rude", "comment": "x" * 2001}, ("comment", "max_length")),
    ({"name": "tone", "value": "rude", "comment": 42}, ("comment", "invalid")),
]


@pytest.mark.parametrize(("body", "error"), HOSTILE)
def test_bad_input_is_a_400_naming_the_field(api, answered, body, error):
    response = api.post(scores_url(answered), body, format="json")

    assert response.status_code == 400, response.content
    assert error in errors(response)
    assert not Score.objects.exists()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_are_refused(api, answered, number):
    body = f'{{"name": "helpfulness", "value": {number}}}'
    response = api.post(scores_url(answered), body, content_type="application/json")

    assert response.status_code == 400, response.content
    assert not Score.objects.exists()


def test_a_huge_body_is_a_413(api, answered, settings):
    body = {"name": "tone", "value": "rude", "comment": "x" * (settings.GOAAI_API_MAX_BODY_BYTES)}
    response = api.post(scores_url(answered), body, format="json")

    assert response.status_code == 413
    assert not Score.objects.exists()


def test_a_run_under_way_is_a_409(api, owner):
    running = RunFactory(session=SessionFactory(owner=owner), status="running")

    response = api.post(scores_url(running), {"name": "tone", "value": "rude"}, format="json")

    assert response.status_code == 409
    assert errors(response) == {(None, "run_not_ended")}


def test_unknown_runs_and_other_users_runs_are_not_found(other_api, answered, graded):
    unknown = f"{API}/runs/{UNKNOWN}/scores/"
    assert other_api.get(unknown).status_code == 404
    assert other_api.post(unknown, {"name": "x", "value": 1}, format="json").status_code == 404
    assert other_api.get(scores_url(answered)).status_code == 404
    posted = other_api.post(scores_url(answered), {"name": "x", "value": 1}, format="json")
    assert posted.status_code == 404
    assert (
        other_api.patch(score_url(answered, graded), {"value": 1}, format="json").status_code == 404
    )
    assert other_api.delete(score_url(answered, graded)).status_code == 404
    assert Score.objects.get().value == 3.0


def test_a_score_of_another_run_is_not_found_under_this_one(api, answered, graded):
    elsewhere = RunFactory(session=answered.session, status="completed")

    assert api.get(score_url(elsewhere, graded)).status_code == 404
    assert api.delete(score_url(elsewhere, graded)).status_code == 404
    assert api.delete(score_url(answered, UNKNOWN)).status_code == 404
    assert Score.objects.filter(pk=graded.pk).exists()


def test_staff_who_read_the_run_list_its_scores_but_score_it_only_with_add_score(answered, graded):
    reader = client_for(staff_user("erin", perms=READ))
    reviewer_user = staff_user("rita", perms=(*READ, "runs_app.add_score"))
    reviewer = client_for(reviewer_user)

    assert [s["name"] for s in reader.get(scores_url(answered)).json()["results"]] == [
        "helpfulness"
    ]
    refused = reader.post(scores_url(answered), {"name": "tone", "value": "rude"}, format="json")
    assert refused.status_code == 403
    assert errors(refused) == {(None, "permission_denied")}

    given = reviewer.post(scores_url(answered), {"name": "tone", "value": "rude"}, format="json")

    assert given.status_code == 201, given.content
    assert given.json()["author"] == "rita"
    score = Score.objects.get(pk=given.json()["id"])
    [entry] = log_entries(reviewer_user, score)
    assert entry.action_flag == ADDITION
    assert "tone = rude" in entry.change_message


def test_add_score_alone_does_not_open_another_users_run(answered):
    scorer = client_for(staff_user("sam", perms=("runs_app.add_score",)))

    response = scorer.post(scores_url(answered), {"name": "tone", "value": "rude"}, format="json")

    assert response.status_code == 404


def test_the_author_changes_her_score_and_what_is_left_out_stays(api, answered, graded):
    response = api.patch(score_url(answered, graded), {"value": 5}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["value"], response.json()["name"]) == (5.0, "helpfulness")
    graded.refresh_from_db()
    assert (graded.value, graded.kind, graded.source) == (5.0, ScoreKind.NUMERIC, ScoreSource.API)

    renamed = api.patch(
        score_url(answered, graded),
        {"name": "tone", "kind": "category", "category": "warm", "comment": "kind words"},
        format="json",
    )
    assert renamed.status_code == 200
    assert (renamed.json()["kind"], renamed.json()["value"], renamed.json()["category"]) == (
        "category",
        None,
        "warm",
    )
    graded.refresh_from_db()
    assert (graded.name, graded.value, graded.category, graded.comment) == (
        "tone",
        None,
        "warm",
        "kind words",
    )


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"kind": "category"}, ("value", "invalid")),
        ({"value": "five"}, ("value", "invalid")),
        ({"category": "warm"}, ("category", "invalid")),
        ({"name": "feedback"}, ("name", "invalid")),
        ({"value": 10**400}, ("value", "invalid")),
        ({"comment": None}, ("comment", "null")),
    ],
)
def test_a_change_that_does_not_fit_is_a_400_and_changes_nothing(
    api, answered, graded, body, error
):
    response = api.patch(score_url(answered, graded), body, format="json")

    assert response.status_code == 400, response.content
    assert error in errors(response)
    graded.refresh_from_db()
    assert (graded.name, graded.value, graded.kind) == ("helpfulness", 3.0, ScoreKind.NUMERIC)


def test_another_authors_score_takes_the_change_or_delete_permission(answered, graded):
    reader = client_for(staff_user("erin", perms=(*READ, "runs_app.add_score")))
    editor_user = staff_user("ed", perms=(*READ, "runs_app.change_score", "runs_app.delete_score"))
    editor = client_for(editor_user)

    assert reader.patch(score_url(answered, graded), {"value": 1}, format="json").status_code == 403
    assert reader.delete(score_url(answered, graded)).status_code == 403

    changed = editor.patch(score_url(answered, graded), {"value": 1}, format="json")
    assert changed.status_code == 200
    assert changed.json()["author"] == "alice"  # still hers: he corrected it
    assert editor.delete(score_url(answered, graded)).status_code == 204

    assert not Score.objects.exists()
    flags = [entry.action_flag for entry in log_entries(editor_user, graded)]
    assert flags == [CHANGE, DELETION]


def test_the_author_deletes_her_score(api, answered, graded):
    assert api.delete(score_url(answered, graded)).status_code == 204
    assert not Score.objects.exists()


def test_feedback_is_listed_but_never_changed_here_even_by_a_superuser(
    api, staff_api, owner, answered
):
    thumb, _ = feedback_give(run_id=answered.pk, user_id=owner.pk, thumb=Thumb.UP)

    for client in (api, staff_api):
        patched = client.patch(score_url(answered, thumb), {"value": False}, format="json")
        assert patched.status_code == 403
        assert client.delete(score_url(answered, thumb)).status_code == 403
    assert Score.objects.get().value == 1.0


def test_without_credentials_it_is_a_401(answered):
    assert APIClient().get(scores_url(answered)).status_code == 401
