"""Scores in the operators' console: users' feedback listed with a link to its run,
filtered by name, source and value, read-only for everyone (an Auditor reads them
as she reads runs), and the run's page links to its scores."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Score
from runs_app.scores import Thumb, feedback_give
from tests.factories import RunFactory, SessionFactory, UserFactory
from tests.permissions import staff_user
from tests.web.test_content_security_policy import _check

pytestmark = pytest.mark.django_db

SCORES = reverse("admin:runs_app_score_changelist")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def rows(response) -> int:
    """How many scores the changelist shows (a value cell each)."""
    return response.content.decode().count('class="field-shown_value"')


@pytest.fixture
def staff_client(staff) -> Client:
    return signed_in(staff)


@pytest.fixture
def scored(owner, other_user):
    """Alice's thumb up with a comment, Bob's thumb down, and a reviewer's grade."""
    alices = RunFactory(session=SessionFactory(owner=owner), status="completed")
    bobs = RunFactory(session=SessionFactory(owner=other_user), status="completed")
    up, _ = feedback_give(run_id=alices.pk, user_id=owner.pk, thumb=Thumb.UP, comment="spot on")
    down, _ = feedback_give(run_id=bobs.pk, user_id=other_user.pk, thumb=Thumb.DOWN)
    graded = Score.objects.create(
        run=alices,
        name="accuracy",
        kind=ScoreKind.NUMERIC,
        value=0.75,
        source=ScoreSource.STAFF,
        author=UserFactory(username="rita"),
    )
    return {"alices": alices, "bobs": bobs, "up": up, "down": down, "graded": graded}


def test_the_list_shows_each_score_with_its_run(staff_client, scored):
    response = staff_client.get(SCORES)

    assert response.status_code == 200
    page = response.content.decode()
    assert rows(response) == 3
    # A run opens at its timeline, as in every list.
    run_page = reverse("admin:runs_app_run_timeline", args=[scored["alices"].pk])
    assert f'href="{run_page}"' in page
    for shown in ("spot on", "up", "down", "0.75", "accuracy", "alice", "bob", "rita"):
        assert shown in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"name": "feedback"}, {"up", "down"}),
        ({"name": "accuracy"}, {"graded"}),
        ({"source__exact": "staff"}, {"graded"}),
        ({"source__exact": "feedback"}, {"up", "down"}),
        ({"value": "up"}, {"up"}),
        ({"value": "down"}, {"down"}),
        ({"owner": "bob"}, {"down"}),
        ({"q": "spot"}, {"up"}),
    ],
)
def test_filters(staff_client, scored, query, expected):
    response = staff_client.get(SCORES, query)

    assert response.status_code == 200
    page = response.content.decode()
    shown = {name for name in ("up", "down", "graded") if str(scored[name].pk) in page}
    assert shown == expected


def test_a_score_is_read_only_even_for_a_superuser(staff_client, scored):
    change = reverse("admin:runs_app_score_change", args=[scored["up"].pk])
    page = staff_client.get(change)
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert staff_client.get(reverse("admin:runs_app_score_add")).status_code == 403
    delete = reverse("admin:runs_app_score_delete", args=[scored["up"].pk])
    assert staff_client.post(delete, {"post": "yes"}).status_code == 403
    assert Score.objects.count() == 3


def test_an_auditor_reads_them_as_she_reads_runs(scored):
    erin = signed_in(staff_user("erin", groups=("Auditors",)))

    assert rows(erin.get(SCORES)) == 3
    change = reverse("admin:runs_app_score_change", args=[scored["up"].pk])
    assert erin.get(change).status_code == 200
    assert "Scores" in erin.get(reverse("admin:index")).content.decode()


def test_staff_without_permission_see_none(scored):
    dave = signed_in(staff_user("dave"))
    assert dave.get(SCORES).status_code == 403


def test_the_view_permission_of_scores_alone_opens_them(scored):
    viewer = staff_user("vera")
    viewer.user_permissions.add(Permission.objects.get(codename="view_score"))
    assert rows(signed_in(viewer).get(SCORES)) == 3


def test_a_runs_page_links_to_its_scores(staff_client, scored):
    run = scored["alices"]
    page = staff_client.get(reverse("admin:runs_app_run_change", args=[run.pk])).content.decode()
    link = f"{SCORES}?run__id__exact={run.pk}"
    assert f'href="{link}"' in page

    listed = staff_client.get(link)
    assert listed.status_code == 200
    assert rows(listed) == 2


def test_the_list_takes_the_same_queries_for_1_and_many_scores(
    staff_client, owner, django_assert_num_queries
):
    session = SessionFactory(owner=owner)
    first = RunFactory(session=session, status="completed")
    feedback_give(run_id=first.pk, user_id=owner.pk, thumb=Thumb.UP)
    staff_client.get(SCORES)
    with CaptureQueriesContext(connection) as one:
        staff_client.get(SCORES)
    queries = len(one.captured_queries)
    for run in RunFactory.create_batch(5, session=session, status="completed"):
        feedback_give(run_id=run.pk, user_id=owner.pk, thumb=Thumb.DOWN)

    with django_assert_num_queries(queries):
        response = staff_client.get(SCORES)
    assert rows(response) == 6


def test_the_scores_pages_meet_the_content_security_policy(staff_client, scored):
    _check(staff_client.get(SCORES))
    _check(staff_client.get(reverse("admin:runs_app_score_change", args=[scored["up"].pk])))
