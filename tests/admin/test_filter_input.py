"""Every filter of the console says what is wrong with a value it cannot use (and
then lists nothing), and the filters the operators' dashboard links to take the URL
parameters it sends: on runs ``status``, ``agent``, ``model``, ``owner``, ``label``,
``created_at_from``/``_until``, ``error_kind`` and ``waiting_for``; on tool calls
``name``, ``status``, ``error_kind``, ``agent``, ``owner``, ``model`` and
``run_created_at_from``/``_until``."""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

import pytest
from django.urls import reverse

from goaai.runtime.vocabulary import RunStatus
from memory_app.services import memory_store
from runs_app.models import Run, ToolCall
from tests.admin.messages import error_messages
from tests.factories import RunFactory, ToolCallFactory

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:runs_app_run_changelist")
TOOL_CALLS = reverse("admin:runs_app_toolcall_changelist")
NOON = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    return client


def listed(client, url: str, query: dict | str) -> tuple[set, list[str]]:
    """The ids a filtered list shows, and the errors the page says."""
    query_string = query if isinstance(query, str) else urlencode(query)
    response = client.get(f"{url}?{query_string}")
    assert response.status_code == 200, query
    return {row.pk for row in response.context["cl"].result_list}, error_messages(response)


def _created(run: Run, moment: dt.datetime) -> Run:
    Run.objects.filter(pk=run.pk).update(created_at=moment)
    return run


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"label": "tier"}, "Filter label='tier' was not applied: expected a label as key:value"),
        ({"label": ":free"}, "expected a label as key:value"),
        ({"created_at_from": "2026-13-40"}, "month must be in 1..12"),
        ({"created_at_from": "2026-02-30"}, "day is out of range for month"),
        ({"created_at_until": "0000-01-01"}, "year 0 is out of range"),
        ({"created_at_until": "99999-01-01"}, "expected a date (YYYY-MM-DD) or an ISO 8601"),
        ({"created_at_from": "yesterday"}, "expected a date (YYYY-MM-DD) or an ISO 8601"),
        ({"created_at_from": "0001-01-01T00:00:00+05:00"}, "outside the years 1 to 9999"),
        ({"status": "done"}, "Filter status='done' was not applied: expected one of pending,"),
        ({"error_kind": "oops"}, "expected one of invalid_call, domain_rejection"),
        ({"waiting_for": "coffee"}, "expected one of approval, question, client_tool"),
        ({"owner": "x" * 151}, "a username, which has at most 150 characters"),
    ],
)
def test_a_value_a_runs_filter_cannot_use_is_named_and_nothing_is_listed(operator, query, said):
    RunFactory()
    rows, errors = listed(operator, RUNS, query)
    assert rows == set()
    assert len(errors) == 1, errors
    assert said in errors[0]
    assert "Nothing is listed until it is corrected or cleared." in errors[0]


def test_good_values_say_nothing(operator):
    run = RunFactory(labels={"tier": "free"})
    rows, errors = listed(operator, RUNS, {"label": "tier:free", "status": "pending"})
    assert (rows, errors) == ({run.pk}, [])


def test_a_long_refused_value_is_cut_in_the_message(operator):
    _, (said,) = listed(operator, RUNS, {"label": "x" * 500})
    assert "x" * 79 + "…" in said
    assert "x" * 81 not in said


def test_runs_by_the_dashboards_parameters(operator, owner, other_user):
    alices = _created(
        RunFactory(
            session__owner=owner,
            agent="assistant",
            model="scripted",
            status=RunStatus.FAILED,
            error_kind="timeout",
            labels={"tier": "free"},
        ),
        NOON,
    )
    bobs = _created(
        RunFactory(session__owner=other_user, agent="concierge", model="openai:gpt-4.1"),
        NOON + dt.timedelta(hours=2),
    )
    both = {alices.pk, bobs.pk}
    assert listed(operator, RUNS, {"status": "failed"}) == ({alices.pk}, [])
    assert listed(operator, RUNS, {"agent": "concierge"}) == ({bobs.pk}, [])
    assert listed(operator, RUNS, {"model": "openai:gpt-4.1"}) == ({bobs.pk}, [])
    assert listed(operator, RUNS, {"owner": "alice"}) == ({alices.pk}, [])
    assert listed(operator, RUNS, {"label": "tier:free"}) == ({alices.pk}, [])
    assert listed(operator, RUNS, {"error_kind": "timeout"}) == ({alices.pk}, [])
    # ISO 8601 with seconds and offset, encoded as a link encodes it...
    window = {
        "created_at_from": "2026-12-02T13:00:00+00:00",
        "created_at_until": "2026-12-02T15:30:00+01:00",
    }
    assert listed(operator, RUNS, window) == ({bobs.pk}, [])
    # ... or with its "+" left as it is, which a query string reads as a space.
    raw = "created_at_from=2026-12-02T11:00:00+00:00&created_at_until=2026-12-02T14:30:00+00:00"
    assert listed(operator, RUNS, raw) == (both, [])
    assert listed(operator, RUNS, "created_at_from=2026-12-02T13:00:00+00:00") == ({bobs.pk}, [])
    # A space that is the date and time's own separator stays one.
    assert listed(operator, RUNS, {"created_at_from": "2026-12-02 13:00"}) == ({bobs.pk}, [])
    # The filters together, as the dashboard combines them.
    combined = {"status": "failed", "agent": "assistant", "owner": "alice", **window}
    assert listed(operator, RUNS, combined) == (set(), [])


def test_runs_waiting_for_a_person_or_a_caller(operator):
    approval = RunFactory(
        status=RunStatus.AWAITING_INPUT, awaiting={"kind": "approval", "tool_call": "x"}
    )
    question = RunFactory(
        status=RunStatus.AWAITING_INPUT, awaiting={"kind": "question", "question": "Which?"}
    )
    client_tool = RunFactory(status=RunStatus.AWAITING_INPUT, awaiting={"kind": "client_tool"})
    # What a run waited for is left behind once it goes on; it waits no more.
    RunFactory(status=RunStatus.RUNNING, awaiting={"kind": "approval"})
    RunFactory(status=RunStatus.COMPLETED)
    assert listed(operator, RUNS, {"waiting_for": "approval"}) == ({approval.pk}, [])
    assert listed(operator, RUNS, {"waiting_for": "question"}) == ({question.pk}, [])
    assert listed(operator, RUNS, {"waiting_for": "client_tool"}) == ({client_tool.pk}, [])
    page = operator.get(RUNS).content.decode()
    assert "?waiting_for=approval" in page


def test_tool_calls_by_the_dashboards_parameters(operator, owner, other_user):
    alices = ToolCallFactory(
        turn__run__session__owner=owner,
        turn__run__agent="assistant",
        turn__run__model="scripted",
        name="memory_store",
        status="failed",
        error_kind="timeout",
    )
    _created(alices.run, NOON)
    bobs = ToolCallFactory(
        turn__run__session__owner=other_user,
        turn__run__agent="concierge",
        turn__run__model="openai:gpt-4.1",
        name="calculator",
    )
    _created(bobs.run, NOON + dt.timedelta(days=1))
    assert listed(operator, TOOL_CALLS, {"name": "memory_store"}) == ({alices.pk}, [])
    assert listed(operator, TOOL_CALLS, {"status": "succeeded"}) == ({bobs.pk}, [])
    assert listed(operator, TOOL_CALLS, {"error_kind": "timeout"}) == ({alices.pk}, [])
    assert listed(operator, TOOL_CALLS, {"agent": "concierge"}) == ({bobs.pk}, [])
    assert listed(operator, TOOL_CALLS, {"owner": "alice"}) == ({alices.pk}, [])
    assert listed(operator, TOOL_CALLS, {"model": "openai:gpt-4.1"}) == ({bobs.pk}, [])
    assert listed(operator, TOOL_CALLS, {"model": "scripted"}) == ({alices.pk}, [])
    # By when their run was created (not the call itself: both calls are from today).
    day = {"run_created_at_from": "2026-12-02", "run_created_at_until": "2026-12-02"}
    assert listed(operator, TOOL_CALLS, day) == ({alices.pk}, [])
    after = {"run_created_at_from": "2026-12-02T12:00:01+00:00"}
    assert listed(operator, TOOL_CALLS, after) == ({bobs.pk}, [])
    page = operator.get(TOOL_CALLS).content.decode()
    for parameter in (
        "?agent=assistant",
        "?model=scripted",
        "?status=failed",
        "?error_kind=timeout",
    ):
        assert parameter in page, parameter


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"status": "exploded"}, "expected one of scheduled, running, succeeded"),
        ({"error_kind": "bad"}, "expected one of invalid_call"),
        ({"run_created_at_from": "2026-02-30"}, "day is out of range for month"),
        ({"run_created_at_until": "soon"}, "expected a date (YYYY-MM-DD)"),
    ],
)
def test_a_value_a_tool_calls_filter_cannot_use_is_named(operator, query, said):
    ToolCallFactory()
    rows, errors = listed(operator, TOOL_CALLS, query)
    assert rows == set()
    assert len(errors) == 1, errors
    assert said in errors[0], errors


def test_the_old_field_lookups_still_filter(operator):
    # Links written before the filters took their short names keep working.
    failed = RunFactory(status=RunStatus.FAILED, error_kind="timeout")
    RunFactory()
    assert listed(operator, RUNS, {"status__exact": "failed"}) == ({failed.pk}, [])
    assert listed(operator, RUNS, {"error_kind__exact": "timeout"}) == ({failed.pk}, [])
    assert ToolCall.objects.count() == 0


@pytest.mark.parametrize(
    ("url", "query", "said"),
    [
        (
            reverse("admin:memory_app_memoryentry_changelist"),
            {"scope__exact": "planet"},
            "Filter scope__exact='planet' was not applied: expected one of session, user,",
        ),
        (
            TOOL_CALLS,
            {"requires_approval__exact": "maybe"},
            "Filter requires_approval__exact='maybe' was not applied: “maybe” value must be",
        ),
        (RUNS, {"nonsense": "1"}, "Filter nonsense='1' was not applied: Cannot resolve keyword"),
        (
            reverse("admin:memory_app_memoryrevision_changelist"),
            {"action__exact": "exploded"},
            "expected one of created, updated, deleted.",
        ),
    ],
)
def test_djangos_own_field_filters_say_what_is_wrong_too(operator, owner, url, query, said):
    # Django would list every row: silently, or by sending the page back unfiltered.
    call = ToolCallFactory(turn__run__session__owner=owner)
    memory_store(key="k", value=1, scope="session", session_id=call.session_id)
    rows, errors = listed(operator, url, query)
    assert rows == set()
    assert len(errors) == 1, errors
    assert said in errors[0], errors


def test_a_refusal_is_said_once_when_the_filters_counts_are_shown(operator):
    RunFactory()
    rows, errors = listed(operator, RUNS, {"label": "tier", "_facets": "True"})
    assert rows == set()
    assert len(errors) == 1, errors
    rows, errors = listed(operator, RUNS, {"status": "done", "_facets": "True"})
    assert len(errors) == 1, errors
