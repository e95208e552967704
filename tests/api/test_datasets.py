"""The dataset of scored runs: GET /api/v1/datasets/scored-runs.jsonl, one JSON line
per run that has a score, holding what the run did; filtered by score, agent and
period; the caller's own runs unless they may read every user's runs, turns, tool
calls and scores; streamed a chunk of runs at a time."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncRequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient, force_authenticate

from goaai.runtime import rt
from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app import datasets
from runs_app.api.datasets import ScoredRunsDatasetView
from runs_app.models import Run, Score
from runs_app.scores import Thumb, feedback_give
from sessions_app.services import api_token_create
from tests.factories import RunFactory, SessionFactory, ToolCallFactory
from tests.permissions import staff_user

URL = "/api/v1/datasets/scored-runs.jsonl"
EVERY_RECORD = (
    "runs_app.view_run",
    "runs_app.view_turn",
    "runs_app.view_toolcall",
    "runs_app.view_score",
)


def lines(response) -> list[dict]:
    assert response.status_code == 200, getattr(response, "content", b"")
    assert response["Content-Type"] == "application/jsonl"
    body = b"".join(response.streaming_content).decode()
    return [json.loads(line) for line in body.splitlines()]


def score(run, name, *, kind=ScoreKind.NUMERIC, value=None, category="", author=None, comment=""):
    return Score.objects.create(
        run=run,
        name=name,
        kind=kind,
        value=value,
        category=category,
        source=ScoreSource.STAFF,
        author=author,
        comment=comment,
    )


def token_headers(user) -> dict[str, str]:
    _, raw = api_token_create(user_id=user.pk, name="tests")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


@pytest.mark.django_db(transaction=True)
def test_a_line_holds_what_the_run_did_with_its_scores(api, owner, inline_runtime):
    session = rt.create_session(owner=owner, title="maths")
    done = rt.run("assistant", "calculate 2 * (3 + 4)", session=session.id)
    reviewer = staff_user("rita")
    score(Run.objects.get(pk=done.id), "helpfulness", value=4, author=reviewer)
    feedback_give(run_id=done.id, user_id=owner.pk, thumb=Thumb.DOWN, comment="slow")
    Run.objects.filter(pk=done.id).update(labels={"tier": "free"})
    rt.run("assistant", "echo never scored", session=session.id)

    [line] = lines(api.get(URL))

    run = Run.objects.get(pk=done.id)
    assert line["run_id"] == str(run.pk)
    assert line["session_id"] == str(session.id)
    assert (line["agent"], line["status"], line["labels"]) == (
        "assistant",
        "completed",
        {"tier": "free"},
    )
    assert line["model"] == run.model != ""
    assert line["input"] == "calculate 2 * (3 + 4)"
    assert line["output"] == run.output
    assert "14" in line["output"]
    assert dt.datetime.fromisoformat(line["created_at"]) == run.created_at
    [call] = line["tool_calls"]
    assert call["name"] == "calculator"
    assert call["status"] == "succeeded"
    assert call["error_kind"] == ""
    assert call["arguments"]
    assert "14" in json.dumps(call["result"])
    assert line["scores"] == [
        {
            "name": "helpfulness",
            "kind": "numeric",
            "value": 4.0,
            "category": None,
            "source": "staff",
            "author": "rita",
            "comment": "",
        },
        {
            "name": "feedback",
            "kind": "boolean",
            "value": False,
            "category": None,
            "source": "feedback",
            "author": "alice",
            "comment": "slow",
        },
    ]


@pytest.fixture
def scored_runs(db, owner, other_user):
    """Alice's runs: a helpful one, a rude one, one unscored, one of the concierge;
    and Bob's scored run."""
    mine = SessionFactory(owner=owner)
    helpful = RunFactory(session=mine, status="completed", input="helpful")
    score(helpful, "helpfulness", value=5)
    rude = RunFactory(session=mine, status="completed", input="rude")
    score(rude, "tone", kind=ScoreKind.CATEGORY, category="rude")
    score(rude, "helpfulness", value=2)
    RunFactory(session=mine, status="completed", input="unscored")
    concierge = RunFactory(session=mine, status="failed", agent="concierge", input="concierge")
    score(concierge, "grounded", kind=ScoreKind.BOOLEAN, value=0.0)
    bobs = RunFactory(session=SessionFactory(owner=other_user), status="completed", input="bob")
    score(bobs, "helpfulness", value=5)
    return {"helpful": helpful, "rude": rude, "concierge": concierge, "bobs": bobs}


def inputs(response) -> list[str]:
    return [line["input"] for line in lines(response)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["helpful", "rude", "concierge"]),
        ({"score": "helpfulness"}, ["helpful", "rude"]),
        ({"score": "helpfulness>=4"}, ["helpful"]),
        ({"score": "helpfulness<4"}, ["rude"]),
        ({"score": "tone=rude"}, ["rude"]),
        ({"score": "grounded=false"}, ["concierge"]),
        ({"score": ["helpfulness", "tone=rude"]}, ["rude"]),
        ({"score": "missing"}, []),
        ({"agent": "concierge"}, ["concierge"]),
        ({"agent": "assistant", "score": "helpfulness>4.5"}, ["helpful"]),
    ],
)
def test_only_scored_runs_filtered_by_score_and_agent(api, scored_runs, query, expected):
    assert inputs(api.get(URL, query)) == expected


def test_the_period_bounds_the_runs_creation(api, scored_runs):
    long_ago = timezone.now() - dt.timedelta(days=30)
    Run.objects.filter(pk=scored_runs["helpful"].pk).update(created_at=long_ago)
    since = (long_ago + dt.timedelta(days=1)).isoformat()

    assert inputs(api.get(URL, {"since": since})) == ["rude", "concierge"]
    assert inputs(api.get(URL, {"until": since})) == ["helpful"]
    assert inputs(api.get(URL, {"since": "2000-01-01", "until": "2000-01-02"})) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"score": "helpfulness>=x"}, "score"),
        ({"score": ">=4"}, "score"),
        ({"score": "tone="}, "score"),
        ({"score": "x" * 300}, "score"),
        ({"score": "a\x00b"}, "score"),
        ({"since": "yesterday"}, "since"),
        ({"until": "9999-12-31T23:00:00-05:00"}, "until"),
        ({"agent": "a" * 101}, "agent"),
    ],
)
@pytest.mark.django_db
def test_a_bad_filter_is_a_400_naming_it(api, query, field):
    response = api.get(URL, query)

    assert response.status_code == 400, response.content
    assert {error["attr"] for error in response.json()["errors"]} == {field}


def test_other_users_runs_take_every_view_permission(scored_runs):
    everything = staff_user("erin", perms=EVERY_RECORD)
    runs_only = staff_user("dave", perms=EVERY_RECORD[:3])

    listed = inputs(_client_get(everything))
    assert sorted(listed) == ["bob", "concierge", "helpful", "rude"]
    # Without view_score, dave's own runs only: he has none.
    assert inputs(_client_get(runs_only)) == []


def test_another_user_sees_only_his_own(other_api, scored_runs):
    assert inputs(other_api.get(URL)) == ["bob"]


def _client_get(user, **query):
    client = APIClient()
    client.credentials(**token_headers(user))
    return client.get(URL, query)


@pytest.mark.django_db
def test_without_credentials_it_is_a_401():
    assert APIClient().get(URL).status_code == 401


def test_it_streams_a_chunk_of_runs_at_a_time(api, owner, monkeypatch):
    """Three queries a chunk (its runs, their tool calls, their scores), each chunk
    sent before the next is read: the runs are never all loaded at once."""
    monkeypatch.setattr(datasets, "CHUNK_SIZE", 2)
    session = SessionFactory(owner=owner)
    for index in range(5):
        run = RunFactory(session=session, status="completed", input=f"run {index}")
        ToolCallFactory(turn__run=run)
        score(run, "helpfulness", value=index)

    response = api.get(URL)
    assert response.streaming
    pieces = iter(response.streaming_content)
    with CaptureQueriesContext(connection) as first:
        piece = next(pieces)
    assert len(piece.decode().splitlines()) == 2
    assert len(first.captured_queries) == 3
    with CaptureQueriesContext(connection) as rest:
        remaining = list(pieces)
    assert [len(p.decode().splitlines()) for p in remaining] == [2, 1]
    assert len(rest.captured_queries) == 6
    every = b"".join([piece, *remaining]).decode().splitlines()
    assert [json.loads(line)["input"] for line in every] == [f"run {i}" for i in range(5)]
    assert all(len(json.loads(line)["tool_calls"]) == 1 for line in every)


def test_under_asgi_it_hands_django_an_iterator_that_reads_as_it_goes(owner, monkeypatch):
    """On daphne, Django would read a plain iterator whole before sending it: the
    view hands it one that pulls a chunk of runs at a time from the database."""
    monkeypatch.setattr(datasets, "CHUNK_SIZE", 2)
    session = SessionFactory(owner=owner)
    for index in range(3):
        score(RunFactory(session=session, status="completed", input=f"run {index}"), "x", value=1)
    request = AsyncRequestFactory().get(URL)
    force_authenticate(request, user=owner)

    response = ScoredRunsDatasetView.as_view()(request)

    assert response.status_code == 200
    assert response.is_async

    async def pieces() -> list[bytes]:
        return [piece async for piece in response.streaming_content]

    read = async_to_sync(pieces)()
    assert [len(piece.splitlines()) for piece in read] == [2, 1]
    assert [json.loads(line)["input"] for line in b"".join(read).splitlines()] == [
        "run 0",
        "run 1",
        "run 2",
    ]
