"""The console's lists are dense and scannable: ids cut to eight characters (whole
on hover, with a copy button), times to the millisecond in the viewer's zone,
durations in ms, a run's tokens, cost and model, and every run opening at its
timeline (from its own row and from its turns', tool calls', events' and scores')."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from goaai.runtime.vocabulary import RunStatus
from memory_app.services import memory_store
from runs_app.models import Run, Score, ToolCall, Turn
from sessions_app.models import RunEvent, Session, UserPreferences
from tests.factories import RunFactory, ToolCallFactory, TurnFactory

pytestmark = pytest.mark.django_db

STARTED = dt.datetime(2026, 12, 2, 13, 3, 7, 412_000, tzinfo=dt.UTC)


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    # The viewer's zone: the lists show times in it (14:03 in Paris is 13:03 UTC).
    UserPreferences.objects.create(user=staff, time_zone="Europe/Paris")
    return client


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def timeline(run_id) -> str:
    return reverse("admin:runs_app_run_timeline", args=[run_id])


def change(model, pk) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[pk])


def short(pk) -> str:
    return str(pk)[:8]


def assert_short_id(page: str, pk, url: str) -> None:
    """The id shows as its first eight characters, linked to ``url``, whole on hover
    and in its copy button, and never whole as the text of the page."""
    full = str(pk)
    link = re.search(
        rf'<a class="goaai-id" href="{re.escape(url)}" title="{full}">([^<]*)</a>', page
    )
    assert link, f"no short link for {full} to {url}"
    assert link.group(1) == short(pk)
    assert f'data-copy="{full}"' in page
    assert f">{full}<" not in page


@pytest.fixture
def finished_run(owner):
    run = RunFactory(
        session__owner=owner,
        status=RunStatus.COMPLETED,
        model="openai:gpt-4.1-mini",
        input="remember that my favourite colour is blue " * 5,
        total_tokens=12345,
        cost="0.0123",
    )
    Run.objects.filter(pk=run.pk).update(
        created_at=STARTED,
        started_at=STARTED,
        ended_at=STARTED + dt.timedelta(milliseconds=48),
    )
    run.refresh_from_db()
    return run


def test_the_runs_list_is_one_short_line_a_run(operator, finished_run):
    child = RunFactory(session=finished_run.session, parent_run=finished_run)
    page = operator.get(changelist(Run)).content.decode()

    assert_short_id(page, finished_run.pk, timeline(finished_run.pk))
    assert_short_id(page, child.pk, timeline(child.pk))
    # The parent opens at its timeline too; the session at its page.
    assert page.count(f'href="{timeline(finished_run.pk)}"') == 2
    assert_short_id(page, finished_run.session_id, change(Session, finished_run.session_id))
    # Tokens and cost, one column each, and the model that answered.
    assert "12,345" in page
    assert "$0.0123" in page
    assert ">openai:gpt-4.1-mini</span>" in page
    # Sub-second durations in ms (not "0.0 s"), times to the ms in the viewer's zone.
    assert ">48 ms<" in page
    assert "0.0 s" not in page
    assert ">2026-12-02 14:03:07.412</time>" in page
    # The input is one line, cut by the stylesheet (the whole of it on hover).
    assert 'class="goaai-excerpt" title="remember that my favourite colour' in page


def test_a_run_opens_at_its_timeline_and_its_raw_record_is_one_click_further(
    operator, finished_run
):
    page = operator.get(changelist(Run)).content.decode()
    assert f'href="{change(Run, finished_run.pk)}"' not in page

    timeline_page = operator.get(timeline(finished_run.pk)).content.decode()
    raw = re.search(
        r'<a href="([^"]+)"[^>]*data-testid="raw-record"[^>]*>Raw record</a>', timeline_page
    )
    assert raw
    assert raw.group(1) == change(Run, finished_run.pk)
    assert operator.get(raw.group(1)).status_code == 200


def test_turns_and_tool_calls_open_their_runs_timeline(operator, finished_run):
    turn = TurnFactory(run=finished_run, latency_ms=48)
    call = ToolCallFactory(turn=turn, duration_ms=1270)
    Turn.objects.filter(pk=turn.pk).update(started_at=STARTED)
    ToolCall.objects.filter(pk=call.pk).update(created_at=STARTED)

    turns = operator.get(changelist(Turn)).content.decode()
    assert_short_id(turns, turn.pk, change(Turn, turn.pk))
    assert_short_id(turns, finished_run.pk, timeline(finished_run.pk))
    assert ">48 ms<" in turns
    assert ">2026-12-02 14:03:07.412</time>" in turns

    calls = operator.get(changelist(ToolCall)).content.decode()
    assert_short_id(calls, call.pk, change(ToolCall, call.pk))
    assert_short_id(calls, finished_run.pk, timeline(finished_run.pk))
    assert ">1.27 s<" in calls
    assert ">2026-12-02 14:03:07.412</time>" in calls


def test_events_sessions_scores_memory_and_revisions_show_short_ids(operator, finished_run):
    session = finished_run.session
    RunEvent.objects.create(session=session, run=finished_run, seq=999, type="run.created", data={})
    Score.objects.create(run=finished_run, name="accuracy", kind="numeric", value=1)
    memory_store(
        key="colour",
        value="blue",
        scope="session",
        session_id=session.pk,
        written_by_run_id=finished_run.pk,
    )
    run_page = timeline(finished_run.pk)
    session_page = change(Session, session.pk)

    events = operator.get(changelist(RunEvent)).content.decode()
    assert_short_id(events, session.pk, session_page)
    assert_short_id(events, finished_run.pk, run_page)
    sessions = operator.get(changelist(Session)).content.decode()
    assert_short_id(sessions, session.pk, session_page)
    scores = operator.get(changelist(Score)).content.decode()
    assert_short_id(scores, finished_run.pk, run_page)
    memory = operator.get(reverse("admin:memory_app_memoryentry_changelist")).content.decode()
    assert_short_id(memory, session.pk, session_page)
    assert_short_id(memory, finished_run.pk, run_page)
    revisions = operator.get(reverse("admin:memory_app_memoryrevision_changelist"))
    assert_short_id(revisions.content.decode(), finished_run.pk, run_page)


def test_the_model_filter_lists_the_agents_models_and_filters_by_model(operator, owner):
    scripted = RunFactory(session__owner=owner, model="scripted")
    gpt = RunFactory(session__owner=owner, model="openai:gpt-4.1")
    with CaptureQueriesContext(connection) as captured:
        response = operator.get(changelist(Run))
    page = response.content.decode()
    # The choices come from the agents' settings, not from the table.
    assert "?model=scripted" in page
    assert "?model=openai%3Agpt-4.1" not in page
    assert not [q["sql"] for q in captured.captured_queries if "DISTINCT" in q["sql"].upper()]

    def listed(query) -> set:
        response = operator.get(changelist(Run), query)
        assert response.status_code == 200
        return {run.pk for run in response.context["cl"].result_list}

    assert listed({"model": "scripted"}) == {scripted.pk}
    # A model no agent uses now (the dashboard links to it) still filters.
    assert listed({"model": "openai:gpt-4.1"}) == {gpt.pk}
    assert listed({"model": "nothing:none"}) == set()


def test_the_turns_model_filter_reads_no_distinct_models_from_the_table(operator, finished_run):
    TurnFactory(run=finished_run, model="scripted")
    with CaptureQueriesContext(connection) as captured:
        page = operator.get(changelist(Turn)).content.decode()
    assert "?model=scripted" in page
    assert not [q["sql"] for q in captured.captured_queries if "DISTINCT" in q["sql"].upper()]
