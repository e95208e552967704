"""GET /api/v1/turns/, /turns/{id}/, /tool-calls/ and /tool-calls/{id}/."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs_app.models import ToolCall, Turn
from tests.factories import RunFactory, SessionFactory, ToolCallFactory, TurnFactory

TURNS = "/api/v1/turns/"
TOOL_CALLS = "/api/v1/tool-calls/"


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def attrs(response) -> list[str | None]:
    return [error["attr"] for error in response.json()["errors"]]


def turn_started(run, index: int, minutes_ago: float, **fields) -> Turn:
    turn = TurnFactory(run=run, index=index, **fields)
    Turn.objects.filter(pk=turn.pk).update(
        started_at=timezone.now() - dt.timedelta(minutes=minutes_ago)
    )
    turn.refresh_from_db()
    return turn


def call_created(minutes_ago: float, **fields) -> ToolCall:
    call = ToolCallFactory(**fields)
    ToolCall.objects.filter(pk=call.pk).update(
        created_at=timezone.now() - dt.timedelta(minutes=minutes_ago)
    )
    call.refresh_from_db()
    return call


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


@pytest.fixture
def run(session):
    return RunFactory(session=session, status="completed")


@pytest.fixture
def bobs_run(other_user):
    return RunFactory(session__owner=other_user, status="completed", input="bob's secret")


def same_queries_for_0_1_and_many(api, url, make_one, django_assert_num_queries) -> None:
    """The list's query count for 0, 1 and many rows is the same."""
    api.get(url)  # the token's first use is recorded once; keep it out of the count
    with CaptureQueriesContext(connection) as empty:
        assert ids(api.get(url)) == []

    make_one()
    with django_assert_num_queries(len(empty.captured_queries)):
        assert len(ids(api.get(url))) == 1

    for _ in range(6):
        make_one()
    with django_assert_num_queries(len(empty.captured_queries)):
        assert len(ids(api.get(url))) == 7


# Turns


@pytest.mark.django_db
def test_a_runs_turns_are_listed_oldest_first(api, run):
    second = turn_started(run, 1, 5)
    first = turn_started(run, 0, 10)
    third = turn_started(run, 2, 1)
    turn_started(RunFactory(session=run.session), 0, 3)  # another run's

    response = api.get(TURNS, {"run": str(run.pk)})

    assert ids(response) == [str(first.pk), str(second.pk), str(third.pk)]


@pytest.mark.django_db
def test_a_turn_shows_what_the_model_was_asked_and_answered(api, run):
    turn = TurnFactory(
        run=run,
        index=0,
        request_messages=[{"role": "user", "content": "calculate 2+3"}],
        response_text="",
        response_tool_calls=[{"id": "call_1", "name": "calculator", "arguments": {}}],
        input_tokens=40,
        output_tokens=6,
        latency_ms=12,
    )

    response = api.get(f"{TURNS}{turn.pk}/")

    assert response.status_code == 200
    body = response.json()
    assert body["run"] == str(run.pk)
    assert body["index"] == 0
    assert body["model"] == "scripted"
    assert body["request_messages"] == [{"role": "user", "content": "calculate 2+3"}]
    assert body["response"] == {
        "text": "",
        "tool_calls": [{"id": "call_1", "name": "calculator", "arguments": {}}],
    }
    assert body["usage"] == {
        "input_tokens": 40,
        "output_tokens": 6,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "total_tokens": 46,
        "cost": None,
    }
    assert body["latency_ms"] == 12


@pytest.mark.django_db
def test_turns_list_only_the_callers_own(api, other_api, run, bobs_run):
    mine = TurnFactory(run=run)
    bobs = TurnFactory(run=bobs_run)

    assert ids(api.get(TURNS)) == [str(mine.pk)]
    assert ids(other_api.get(TURNS)) == [str(bobs.pk)]


@pytest.mark.django_db
def test_filtering_turns_by_another_users_run_shows_nothing(other_api, run):
    TurnFactory(run=run)

    assert ids(other_api.get(TURNS, {"run": str(run.pk)})) == []


@pytest.mark.django_db
def test_another_users_turn_is_a_404(other_api, run):
    turn = TurnFactory(run=run, response_text="alice's secret answer")

    response = other_api.get(f"{TURNS}{turn.pk}/")

    assert response.status_code == 404
    assert "secret" not in response.content.decode()


@pytest.mark.django_db
def test_staff_see_every_turn(staff_api, run, bobs_run):
    mine = TurnFactory(run=run)
    bobs = TurnFactory(run=bobs_run)

    assert set(ids(staff_api.get(TURNS))) == {str(mine.pk), str(bobs.pk)}
    assert staff_api.get(f"{TURNS}{mine.pk}/").status_code == 200


@pytest.mark.django_db
def test_a_turn_that_does_not_exist_is_a_404(api):
    assert api.get(f"{TURNS}{uuid.uuid4()}/").status_code == 404


@pytest.mark.django_db
def test_a_malformed_run_filter_is_refused(api):
    response = api.get(TURNS, {"run": "not-a-uuid"})

    assert response.status_code == 400
    assert attrs(response) == ["run"]


@pytest.mark.django_db
def test_turns_are_paged_by_cursor(api, run):
    turns = [turn_started(run, index, 10 - index) for index in range(5)]

    first = api.get(TURNS, {"run": str(run.pk), "page_size": 2})
    second = api.get(first.json()["next"])
    third = api.get(second.json()["next"])

    assert ids(first) + ids(second) + ids(third) == [str(turn.pk) for turn in turns]
    assert third.json()["next"] is None


@pytest.mark.django_db
@pytest.mark.parametrize("filtered", [False, True], ids=["all", "by-run"])
def test_the_turns_list_takes_the_same_number_of_queries_for_0_1_and_many(
    api, run, django_assert_num_queries, filtered
):
    url = f"{TURNS}?run={run.pk}" if filtered else TURNS
    indexes = iter(range(100))

    same_queries_for_0_1_and_many(
        api, url, lambda: TurnFactory(run=run, index=next(indexes)), django_assert_num_queries
    )


# Tool calls


@pytest.mark.django_db
def test_tool_calls_are_listed_newest_first(api, run):
    turn = TurnFactory(run=run)
    old = call_created(30, turn=turn, index=0)
    new = call_created(10, turn=turn, index=1)
    middle = call_created(20, turn=turn, index=2)

    assert ids(api.get(TOOL_CALLS)) == [str(new.pk), str(middle.pk), str(old.pk)]


@pytest.mark.django_db
def test_a_tool_call_shows_its_arguments_result_and_decision(api, owner, run):
    call = ToolCallFactory(
        turn__run=run,
        name="memory_forget_all",
        arguments={},
        result={"forgotten": ["favourite colour"]},
        requires_approval=True,
        decision="approved",
        decided_by=owner,
        decided_at=timezone.now(),
        attempt=1,
    )

    response = api.get(f"{TOOL_CALLS}{call.pk}/")

    assert response.status_code == 200
    body = response.json()
    assert body["run"] == str(run.pk)
    assert body["turn"] == str(call.turn_id)
    assert body["name"] == "memory_forget_all"
    assert body["result"] == {"forgotten": ["favourite colour"]}
    assert body["error"] is None
    assert body["status"] == "succeeded"
    assert body["requires_approval"] is True
    assert body["decided_by"] == owner.pk
    assert body["attempt"] == 1


@pytest.mark.django_db
def test_a_failed_tool_call_shows_its_error(api, run):
    call = ToolCallFactory(
        turn__run=run,
        status="failed",
        result=None,
        error_kind="invalid_call",
        error_message="expression is required",
    )

    body = api.get(f"{TOOL_CALLS}{call.pk}/").json()

    assert body["status"] == "failed"
    assert body["error"] == {"kind": "invalid_call", "message": "expression is required"}


@pytest.mark.django_db
def test_tool_calls_list_only_the_callers_own(api, other_api, run, bobs_run):
    mine = ToolCallFactory(turn__run=run)
    bobs = ToolCallFactory(turn__run=bobs_run)

    assert ids(api.get(TOOL_CALLS)) == [str(mine.pk)]
    assert ids(other_api.get(TOOL_CALLS)) == [str(bobs.pk)]


@pytest.mark.django_db
@pytest.mark.parametrize("param", ["run", "session"])
def test_filtering_tool_calls_by_another_users_run_or_session_shows_nothing(other_api, run, param):
    ToolCallFactory(turn__run=run)
    value = run.pk if param == "run" else run.session_id

    assert ids(other_api.get(TOOL_CALLS, {param: str(value)})) == []


@pytest.mark.django_db
def test_another_users_tool_call_is_a_404(other_api, run):
    call = ToolCallFactory(turn__run=run, arguments={"text": "alice's secret"})

    response = other_api.get(f"{TOOL_CALLS}{call.pk}/")

    assert response.status_code == 404
    assert "secret" not in response.content.decode()


@pytest.mark.django_db
def test_staff_see_every_tool_call(staff_api, run, bobs_run):
    mine = ToolCallFactory(turn__run=run)
    bobs = ToolCallFactory(turn__run=bobs_run)

    assert set(ids(staff_api.get(TOOL_CALLS))) == {str(mine.pk), str(bobs.pk)}
    assert staff_api.get(f"{TOOL_CALLS}{bobs.pk}/").status_code == 200


@pytest.mark.django_db
def test_a_tool_call_that_does_not_exist_is_a_404(api):
    assert api.get(f"{TOOL_CALLS}{uuid.uuid4()}/").status_code == 404


@pytest.mark.django_db
def test_tool_calls_filter_by_run(api, run, session):
    wanted = ToolCallFactory(turn__run=run)
    ToolCallFactory(turn__run=RunFactory(session=session))

    assert ids(api.get(TOOL_CALLS, {"run": str(run.pk)})) == [str(wanted.pk)]


@pytest.mark.django_db
def test_tool_calls_filter_by_session(api, owner, run):
    wanted = ToolCallFactory(turn__run=run)
    ToolCallFactory(turn__run=RunFactory(session__owner=owner))

    assert ids(api.get(TOOL_CALLS, {"session": str(run.session_id)})) == [str(wanted.pk)]


@pytest.mark.django_db
def test_tool_calls_filter_by_name(api, run):
    turn = TurnFactory(run=run)
    echo = ToolCallFactory(turn=turn, name="echo")
    ToolCallFactory(turn=turn, name="calculator")

    assert ids(api.get(TOOL_CALLS, {"name": "echo"})) == [str(echo.pk)]


@pytest.mark.django_db
def test_tool_calls_filter_by_several_statuses(api, run):
    turn = TurnFactory(run=run)
    failed = call_created(3, turn=turn, status="failed", result=None)
    call_created(2, turn=turn, status="succeeded")
    denied = call_created(1, turn=turn, status="denied", result=None)

    response = api.get(TOOL_CALLS, {"status": ["failed", "denied"]})

    assert ids(response) == [str(denied.pk), str(failed.pk)]


@pytest.mark.django_db
def test_tool_calls_filter_by_error_kind(api, run):
    turn = TurnFactory(run=run)
    invalid = ToolCallFactory(turn=turn, status="failed", error_kind="invalid_call")
    ToolCallFactory(turn=turn, status="failed", error_kind="timeout")
    ToolCallFactory(turn=turn)

    assert ids(api.get(TOOL_CALLS, {"error_kind": "invalid_call"})) == [str(invalid.pk)]


@pytest.mark.django_db
def test_tool_calls_filter_by_the_agent_of_their_run(api, session):
    concierge = ToolCallFactory(turn__run=RunFactory(session=session, agent="concierge"))
    ToolCallFactory(turn__run=RunFactory(session=session, agent="assistant"))

    assert ids(api.get(TOOL_CALLS, {"agent": "concierge"})) == [str(concierge.pk)]


@pytest.mark.django_db
def test_tool_calls_filter_by_creation_time(api, run):
    turn = TurnFactory(run=run)
    old = call_created(120, turn=turn)
    middle = call_created(60, turn=turn)
    recent = call_created(1, turn=turn)
    now = timezone.now()
    after = (now - dt.timedelta(minutes=90)).isoformat()
    before = (now - dt.timedelta(minutes=30)).isoformat()

    assert ids(api.get(TOOL_CALLS, {"created_after": after})) == [str(recent.pk), str(middle.pk)]
    assert ids(api.get(TOOL_CALLS, {"created_before": before})) == [str(middle.pk), str(old.pk)]
    assert ids(api.get(TOOL_CALLS, {"created_after": after, "created_before": before})) == [
        str(middle.pk)
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("status", "exploded"),
        ("error_kind", "cosmic_ray"),
        ("run", "not-a-uuid"),
        ("session", "42"),
        ("created_after", "last week"),
    ],
)
def test_a_malformed_tool_call_filter_is_refused(api, param, value):
    response = api.get(TOOL_CALLS, {param: value})

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert attrs(response) == [param]


@pytest.mark.django_db
@pytest.mark.parametrize("filtered", [None, "run", "session", "name"])
def test_the_tool_calls_list_takes_the_same_number_of_queries_for_0_1_and_many(
    api, run, django_assert_num_queries, filtered
):
    turn = TurnFactory(run=run)
    query = {
        None: "",
        "run": f"?run={run.pk}",
        "session": f"?session={run.session_id}",
        "name": "?name=calculator",
    }[filtered]
    indexes = iter(range(100))

    same_queries_for_0_1_and_many(
        api,
        f"{TOOL_CALLS}{query}",
        lambda: ToolCallFactory(turn=turn, index=next(indexes), decided_by=run.session.owner),
        django_assert_num_queries,
    )
