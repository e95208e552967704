"""Scores in a run's timeline: the run's scores listed (name, value, source, author,
comment, time), a reviewer with ``runs_app.add_score`` adding one, its author (or
staff with the permission) changing or deleting it, every action in the admin log,
and what is refused said in the form, never a 500."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.models import Score
from runs_app.scores import Thumb, feedback_give
from tests.factories import RunFactory, SessionFactory
from tests.permissions import log_entries, staff_user
from tests.web.test_content_security_policy import _check

pytestmark = pytest.mark.django_db

# What reading a run's whole record takes (the timeline shows it all).
READ = (
    "runs_app.view_run",
    "runs_app.view_turn",
    "runs_app.view_toolcall",
    "sessions_app.view_runevent",
)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def timeline(run) -> str:
    return reverse("admin:runs_app_run_timeline", args=[run.pk])


def adding(name="helpfulness", kind="numeric", value="4", comment=""):
    """What the Add a score form posts."""
    return {
        "score_action": "add",
        "score-name": name,
        "score-kind": kind,
        "score-value": value,
        "score-comment": comment,
    }


def changing(score, name="helpfulness", kind="numeric", value="4", comment=""):
    """What a score's Change form posts."""
    prefix = f"score-{score.pk}"
    return {
        "score_action": "change",
        "score_id": str(score.pk),
        f"{prefix}-name": name,
        f"{prefix}-kind": kind,
        f"{prefix}-value": value,
        f"{prefix}-comment": comment,
    }


def deleting(score):
    return {"score_action": "delete", "score_id": str(score.pk)}


def score_rows(page: str) -> list[str]:
    """The text of each row of the scores table, tags dropped."""
    rows = re.findall(r'<tr data-testid="score".*?</tr>', page, flags=re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows]


@pytest.fixture
def answered(owner):
    return RunFactory(session=SessionFactory(owner=owner), status="completed", output="Paris.")


@pytest.fixture
def reviewer(db):
    """Rita reads every run's record and scores runs."""
    return staff_user("rita", perms=(*READ, "runs_app.add_score"))


def test_the_panel_lists_the_runs_scores(answered, owner, staff):
    feedback_give(run_id=answered.pk, user_id=owner.pk, thumb=Thumb.DOWN, comment="wrong city")
    Score.objects.create(
        run=answered,
        name="tone",
        kind=ScoreKind.CATEGORY,
        category="curt",
        source=ScoreSource.API,
        author=staff,
        comment="short & <b>sharp</b>",
    )

    page = signed_in(staff).get(timeline(answered)).content.decode()

    feedback, tone = score_rows(page)
    assert feedback.startswith("feedback down boolean feedback alice wrong city")
    assert tone.startswith("tone curt category api charlie short &amp; &lt;b&gt;sharp&lt;/b&gt;")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", tone)
    assert 'data-testid="score-form"' in page


def test_a_reviewer_adds_a_score_and_the_log_says_so(answered, reviewer):
    client = signed_in(reviewer)

    response = client.post(timeline(answered), adding(value="4.5", comment="clear answer"))

    assert response.status_code == 302
    assert response["Location"] == timeline(answered) + "#tl-scores"
    score = Score.objects.get()
    assert (score.name, score.kind, score.value, score.comment) == (
        "helpfulness",
        ScoreKind.NUMERIC,
        4.5,
        "clear answer",
    )
    assert (score.source, score.author_id) == (ScoreSource.STAFF, reviewer.pk)
    [entry] = log_entries(reviewer, score)
    assert entry.action_flag == ADDITION
    assert f"Scored run {answered.pk}: helpfulness = 4.5" in entry.change_message
    page = client.get(timeline(answered)).content.decode()
    assert "Score helpfulness = 4.5 added." in page
    assert score_rows(page)[0].startswith("helpfulness 4.5 numeric staff rita clear answer")


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        (adding(name="grounded", kind="boolean", value="yes"), (ScoreKind.BOOLEAN, 1.0, "")),
        (adding(name="grounded", kind="boolean", value="false"), (ScoreKind.BOOLEAN, 0.0, "")),
        (adding(name="tone", kind="category", value=" rude "), (ScoreKind.CATEGORY, None, "rude")),
        (adding(value="-2"), (ScoreKind.NUMERIC, -2.0, "")),
    ],
)
def test_each_kind_is_read_from_the_value_box(answered, reviewer, typed, stored):
    assert signed_in(reviewer).post(timeline(answered), typed).status_code == 302
    score = Score.objects.get()
    assert (score.kind, score.value, score.category) == stored


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        (adding(name="feedback", kind="boolean", value="true"), "`feedback` is the name"),
        (adding(name="a<b"), "cannot contain =, &lt;, &gt;"),
        (adding(name=""), "This field is required."),
        (adding(value="four"), "is a number, such as 4 or 0.75"),
        (adding(value="nan"), "is a finite number"),
        (adding(value="inf"), "is a finite number"),
        (adding(kind="boolean", value="maybe"), "true or false"),
        (adding(kind="grade"), "Select a valid choice."),
        (adding(kind="category", value="x" * 101), "at most 100 characters"),
        (adding(comment="x" * 2001), "at most 2000 characters"),
    ],
)
def test_what_is_refused_is_said_in_the_form(answered, reviewer, typed, message):
    response = signed_in(reviewer).post(timeline(answered), typed)

    assert response.status_code == 400
    page = response.content.decode()
    assert message in page
    assert "The score was not saved" in page
    # What was typed is kept for correcting.
    assert f'value="{escape(typed["score-name"])}"' in page or not typed["score-name"]
    assert not Score.objects.exists()


def test_a_run_under_way_takes_no_score(owner, reviewer):
    running = RunFactory(session=SessionFactory(owner=owner), status="running")
    client = signed_in(reviewer)

    page = client.get(timeline(running)).content.decode()
    assert 'data-testid="score-form"' not in page
    assert "A score can be added once the run has ended." in page

    response = client.post(timeline(running), adding(), follow=True)
    assert "score it once it has ended" in response.content.decode()
    assert not Score.objects.exists()


def test_reading_the_run_without_add_score_shows_no_form_and_refuses_a_post(answered):
    auditor = signed_in(staff_user("erin", perms=READ))

    assert 'data-testid="score-form"' not in auditor.get(timeline(answered)).content.decode()
    assert auditor.post(timeline(answered), adding()).status_code == 403
    assert not Score.objects.exists()


def test_add_score_without_reading_the_run_finds_nothing(answered):
    scorer = signed_in(staff_user("sam", perms=("runs_app.add_score",)))

    assert scorer.post(timeline(answered), adding()).status_code == 404
    assert not Score.objects.exists()


def test_the_post_needs_its_csrf_token(answered, reviewer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)

    assert client.post(timeline(answered), adding()).status_code == 403
    assert not Score.objects.exists()


@pytest.fixture
def ritas(answered, reviewer):
    signed_in(reviewer).post(timeline(answered), adding(value="3"))
    return Score.objects.get()


def offers(page: str, action: str, score) -> bool:
    """Whether the page has the form that would ``action`` (change, delete) ``score``."""
    return (
        f'name="score_action" value="{action}"><input type="hidden" name="score_id" '
        f'value="{score.pk}">'
    ) in page


def test_the_author_changes_her_score(answered, reviewer, ritas):
    client = signed_in(reviewer)
    assert offers(client.get(timeline(answered)).content.decode(), "change", ritas)

    response = client.post(timeline(answered), changing(ritas, value="5", comment="on reflection"))

    assert response.status_code == 302
    ritas.refresh_from_db()
    assert (ritas.value, ritas.comment, ritas.source) == (5.0, "on reflection", ScoreSource.STAFF)
    entry = log_entries(reviewer, ritas)[-1]
    assert entry.action_flag == CHANGE
    assert "helpfulness = 3 to helpfulness = 5" in entry.change_message


def test_the_change_form_holds_every_digit_so_a_comment_alone_rounds_nothing(
    answered, reviewer, ritas
):
    Score.objects.filter(pk=ritas.pk).update(value=0.1 + 0.2)
    client = signed_in(reviewer)
    page = client.get(timeline(answered)).content.decode()
    shown = re.search(rf'name="score-{ritas.pk}-value" value="([^"]*)"', page)

    assert shown is not None
    assert shown.group(1) == "0.30000000000000004"
    client.post(timeline(answered), changing(ritas, value=shown.group(1), comment="reworded"))
    ritas.refresh_from_db()
    assert (ritas.value, ritas.comment) == (0.1 + 0.2, "reworded")


def test_a_refused_change_reopens_its_form_at_the_timelines_address(answered, reviewer, ritas):
    response = signed_in(reviewer).post(timeline(answered), changing(ritas, value="lots"))

    assert response.status_code == 400
    page = response.content.decode()
    assert '<details class="tl-score-change" open>' in page
    assert "is a number, such as 4 or 0.75" in page
    # The page is the timeline's: its links (views, paging) lead where they should.
    assert response.wsgi_request.path == timeline(answered)
    ritas.refresh_from_db()
    assert ritas.value == 3.0


def test_the_author_deletes_her_score_and_the_log_names_it(answered, reviewer, ritas):
    response = signed_in(reviewer).post(timeline(answered), deleting(ritas))

    assert response.status_code == 302
    assert not Score.objects.exists()
    entry = log_entries(reviewer, ritas)[-1]
    assert entry.action_flag == DELETION
    assert "Deleted score helpfulness = 3" in entry.change_message


def test_another_reviewers_score_takes_the_change_and_delete_permissions(answered, ritas):
    other = signed_in(staff_user("olga", perms=(*READ, "runs_app.add_score")))
    editor_user = staff_user("ed", perms=(*READ, "runs_app.change_score", "runs_app.delete_score"))
    editor = signed_in(editor_user)

    page = other.get(timeline(answered)).content.decode()
    assert not offers(page, "change", ritas)
    assert not offers(page, "delete", ritas)
    assert other.post(timeline(answered), changing(ritas, value="1")).status_code == 403
    assert other.post(timeline(answered), deleting(ritas)).status_code == 403

    assert editor.post(timeline(answered), changing(ritas, value="1")).status_code == 302
    ritas.refresh_from_db()
    assert (ritas.value, ritas.author.username) == (1.0, "rita")
    assert editor.post(timeline(answered), deleting(ritas)).status_code == 302
    assert not Score.objects.exists()
    assert [e.action_flag for e in log_entries(editor_user, ritas)] == [CHANGE, DELETION]


def test_a_users_feedback_is_never_changed_from_the_panel(answered, owner, staff):
    thumb, _ = feedback_give(run_id=answered.pk, user_id=owner.pk, thumb=Thumb.UP)
    client = signed_in(staff)

    page = client.get(timeline(answered)).content.decode()
    assert not offers(page, "change", thumb)
    assert client.post(timeline(answered), changing(thumb)).status_code == 403
    assert client.post(timeline(answered), deleting(thumb)).status_code == 403
    assert Score.objects.get().value == 1.0


@pytest.mark.parametrize(
    "posted",
    [
        {"score_action": "delete", "score_id": "not-an-id"},
        {"score_action": "delete", "score_id": "6e7969c6-df6f-4e3c-8178-d023f40c633e"},
        {"score_action": "delete"},
    ],
)
def test_a_score_id_that_names_no_score_of_the_run_is_not_found(answered, reviewer, posted):
    assert signed_in(reviewer).post(timeline(answered), posted).status_code == 404


def test_a_score_of_another_run_is_not_found_under_this_one(answered, reviewer, ritas):
    elsewhere = RunFactory(session=answered.session, status="completed")

    assert signed_in(reviewer).post(timeline(elsewhere), deleting(ritas)).status_code == 404
    assert Score.objects.exists()


@pytest.mark.parametrize("action", ["", "promote"])
def test_an_unknown_action_is_a_400(answered, reviewer, action):
    response = signed_in(reviewer).post(timeline(answered), {"score_action": action})

    assert response.status_code == 400
    assert not Score.objects.exists()


def test_the_timeline_with_scores_meets_the_content_security_policy(answered, reviewer, ritas):
    _check(signed_in(reviewer).get(timeline(answered)))
