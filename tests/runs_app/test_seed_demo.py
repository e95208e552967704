"""``manage.py seed_demo``: synthetic data that is consistent the way the runtime's
own records are, in the amounts asked for, and that the admin can show."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import Count, Max, Min
from django.urls import reverse
from django.utils import timezone

from goaai.runtime import rt
from goaai.runtime.vocabulary import RUN_END_EVENTS, EventType, RunStatus, ToolCallStatus
from memory_app.models import MemoryEntry, MemoryRevision
from runs_app.models import Run, ToolCall, Turn
from sessions_app.models import RunEvent, Session, SessionStatus

pytestmark = pytest.mark.django_db

SESSIONS, RUNS, TURNS, CALLS = 12, 4, 3, 2


def _seed(*extra: str, sessions: int = SESSIONS, seed: int = 7) -> str:
    out = io.StringIO()
    call_command(
        "seed_demo",
        "--sessions",
        str(sessions),
        "--runs-per-session",
        str(RUNS),
        "--turns-per-run",
        str(TURNS),
        "--calls-per-turn",
        str(CALLS),
        "--users",
        "3",
        "--seed",
        str(seed),
        "--active-fraction",
        "0.5",
        *extra,
        stdout=out,
    )
    return out.getvalue()


def test_counts_match_the_arguments_and_are_printed():
    output = _seed()

    awaiting = Run.objects.filter(status=RunStatus.AWAITING_INPUT).count()
    assert Session.objects.count() == SESSIONS
    assert Run.objects.count() == SESSIONS * RUNS
    assert ToolCall.objects.count() == SESSIONS * RUNS * (TURNS - 1) * CALLS
    # A run awaiting approval stops one turn short.
    assert Turn.objects.count() == SESSIONS * RUNS * TURNS - awaiting
    assert f"tool calls {SESSIONS * RUNS * (TURNS - 1) * CALLS:,}" in " ".join(output.split())
    for label, model in [("sessions", Session), ("runs", Run), ("events", RunEvent)]:
        assert f"{label} {model.objects.count():,}" in " ".join(output.split())
    assert set(Session.objects.values_list("owner__username", flat=True)) <= {
        "demo-user-1",
        "demo-user-2",
        "demo-user-3",
    }


def test_each_sessions_log_is_numbered_one_to_n_with_last_event_seq_matching():
    _seed()

    sessions = Session.objects.annotate(
        events_count=Count("events"), first=Min("events__seq"), last=Max("events__seq")
    )
    for session in sessions:
        assert session.events_count > 0
        assert (session.first, session.last) == (1, session.events_count)
        assert session.last_event_seq == session.events_count
        types = list(session.events.order_by("seq").values_list("type", flat=True))
        assert types[0] == EventType.SESSION_CREATED
        if session.status == SessionStatus.ENDED:
            assert types[-1] == EventType.SESSION_ENDED
            assert session.ended_at is not None
        else:
            assert EventType.SESSION_ENDED not in types


def test_each_run_is_logged_in_the_order_a_real_run_writes_it():
    _seed()

    for run in Run.objects.all():
        events = list(run.events.order_by("seq").values_list("type", "created_at"))
        types = [event_type for event_type, _ in events]
        # Created, the label rules that shaped its policy (if any fired), started.
        started = types.index(EventType.RUN_STARTED)
        assert types[0] == EventType.RUN_CREATED
        assert set(types[1:started]) <= {EventType.POLICY_DECISION}
        assert [moment for _, moment in events] == sorted(moment for _, moment in events)
        if run.status == RunStatus.AWAITING_INPUT:
            assert types[-2:] == [
                EventType.TOOL_CALL_APPROVAL_REQUESTED,
                EventType.RUN_AWAITING_INPUT,
            ]
            assert run.awaiting["tool_call"] == str(
                run.tool_calls.get(status=ToolCallStatus.SCHEDULED, requires_approval=True).pk
            )
            assert run.ended_at is None
        else:
            assert types[-1] == RUN_END_EVENTS[RunStatus(run.status)]
            assert run.ended_at is not None
        calls = run.tool_calls.count()
        assert types.count(EventType.TOOL_CALL_SCHEDULED) == calls
        finished = types.count(EventType.TOOL_CALL_SUCCEEDED) + types.count(
            EventType.TOOL_CALL_FAILED
        )
        assert finished == run.tool_calls.exclude(status=ToolCallStatus.SCHEDULED).count()
        assert types.count(EventType.TURN_STARTED) == run.turns.count()
        if run.status == RunStatus.FAILED:
            assert run.error_kind
        if run.status == RunStatus.COMPLETED:
            assert run.output
            assert run.total_tokens == run.input_tokens + run.output_tokens > 0


def test_the_data_looks_like_the_runtimes_own():
    _seed()
    now = timezone.now()

    statuses = set(Run.objects.values_list("status", flat=True))
    assert {RunStatus.COMPLETED, RunStatus.FAILED} <= statuses
    assert {label["tier"] for label in Run.objects.values_list("labels", flat=True)} == {
        "free",
        "paid",
    }
    registry = {name for agent in rt.agents.all() for name in rt.agents.tools_of(agent)}
    assert set(ToolCall.objects.values_list("name", flat=True)) <= registry
    assert ToolCall.objects.filter(status=ToolCallStatus.FAILED).exclude(error_kind="").exists()
    assert not ToolCall.objects.filter(status=ToolCallStatus.SUCCEEDED, result=None).exists()
    for call in ToolCall.objects.select_related("run", "turn"):
        assert (call.session_id, call.turn.run_id) == (call.run.session_id, call.run_id)
    assert Session.objects.filter(created_at__gt=now).count() == 0
    assert RunEvent.objects.filter(created_at__gt=now).count() == 0
    # Memory: what memory_store calls wrote, each change with its revision.
    assert MemoryEntry.objects.exists()
    for entry in MemoryEntry.objects.all():
        versions = list(
            MemoryRevision.objects.filter(entry_id=entry.pk)
            .order_by("version")
            .values_list("version", flat=True)
        )
        assert versions == list(range(1, entry.version + 1))
        assert ToolCall.objects.get(pk=entry.written_by_tool_call_id).name == "memory_store"


def test_seeding_again_adds_to_what_is_there_with_the_same_users():
    _seed(sessions=3)
    _seed(sessions=2)

    assert Session.objects.count() == 5
    assert get_user_model().objects.filter(username__startswith="demo-user-").count() == 3


def test_without_events_the_logs_are_left_empty():
    _seed("--no-events", sessions=3)

    assert not RunEvent.objects.exists()
    assert set(Session.objects.values_list("last_event_seq", flat=True)) == {0}
    assert ToolCall.objects.count() == 3 * RUNS * (TURNS - 1) * CALLS


@pytest.mark.parametrize(
    "url",
    [
        "/admin/runs_app/run/",
        "/admin/runs_app/run/?status__exact=failed&agent=assistant",
        "/admin/runs_app/run/?label=tier%3Apaid",
        "/admin/runs_app/toolcall/",
        "/admin/runs_app/toolcall/?name=calculator",
        "/admin/runs_app/turn/",
        "/admin/sessions_app/runevent/",
        "/admin/sessions_app/session/",
        "/admin/memory_app/memoryentry/",
        "/admin/memory_app/memoryrevision/",
    ],
)
def test_the_admin_changelists_render_over_the_seeded_data(client, staff, url):
    _seed()
    client.force_login(staff)

    response = client.get(url)

    assert response.status_code == 200
    assert response.context["cl"].result_count > 0


def test_a_seeded_runs_page_renders(client, staff):
    _seed(sessions=2)
    client.force_login(staff)
    run = Run.objects.filter(status=RunStatus.COMPLETED).first()

    response = client.get(reverse("admin:runs_app_run_change", args=[run.pk]))

    assert response.status_code == 200
    assert run.input in response.content.decode()
