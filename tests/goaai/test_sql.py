"""The turn loop's hand-written statements write and read what the ORM would: the
same row as ``save()``, the same values as a queryset, Django's errors, and the
query counts that tests see."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import IntegrityError, connection, models, transaction
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from goaai import sql
from goaai.runtime.errors import NotFound
from runs_app.models import Run, ToolCall
from sessions_app.eventlog import recording
from tests.factories import RunFactory, ToolCallFactory, TurnFactory

pytestmark = pytest.mark.django_db

CALL_FIELDS = ("run_id", "name", "status", "attempt", "created_at", "started_at")
STARTED = dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)


def _call(run: Run, index: int) -> ToolCall:
    turn = run.turns.first() or TurnFactory(run=run, index=0)
    return ToolCall(
        run=run,
        turn=turn,
        session_id=run.session_id,
        call_id=f"c{index}",
        index=index,
        name="calculator",
        arguments={"expression": "2 * (3 + 4)", "nested": {"list": [1, "two", None]}},
        status="running",
        attempt=1,
        started_at=STARTED,
    )


def test_insert_writes_the_row_save_writes() -> None:
    run = RunFactory()
    by_save, by_statement = _call(run, 0), _call(run, 1)
    by_save.save(force_insert=True)
    sql.insert(by_statement)

    assert not by_statement._state.adding
    saved = model_to_dict(ToolCall.objects.get(pk=by_save.pk), exclude=["id", "call_id", "index"])
    inserted = model_to_dict(
        ToolCall.objects.get(pk=by_statement.pk), exclude=["id", "call_id", "index"]
    )
    assert inserted == saved
    # pre_save ran: auto_now_add set the creation time, on the instance and the row.
    stored = ToolCall.objects.get(pk=by_statement.pk)
    assert by_statement.created_at is not None
    assert stored.created_at == by_statement.created_at


def test_insert_raises_djangos_integrity_error_and_keeps_what_was_stored() -> None:
    run = RunFactory()
    sql.insert(_call(run, 0))
    with pytest.raises(IntegrityError), transaction.atomic():
        sql.insert(_call(run, 0))  # the same (turn, index) again
    assert ToolCall.objects.filter(run=run).count() == 1


def test_insert_is_one_query_that_query_counts_see() -> None:
    run = RunFactory()
    call = _call(run, 0)
    with CaptureQueriesContext(connection) as queries:
        sql.insert(call)
    assert len(queries) == 1
    assert queries[0]["sql"].startswith("INSERT INTO")


def test_update_sets_adds_and_guards_on_status() -> None:
    call = ToolCallFactory(status="running", attempt=1)
    ended = timezone.now()

    # A guard that does not match changes nothing.
    assert sql.update(ToolCall, call.pk, {"status": "failed"}, status_in=("scheduled",)) == 0
    changed = sql.update(
        ToolCall,
        call.pk,
        {"status": "succeeded", "ended_at": ended, "result": {"value": 14, "list": [1, 2]}},
        add={"attempt": 2},
        status_in=("scheduled", "running"),
    )
    assert changed == 1
    call.refresh_from_db()
    assert (call.status, call.ended_at, call.result, call.attempt) == (
        "succeeded",
        ended,
        {"value": 14, "list": [1, 2]},
        3,
    )
    assert sql.update(ToolCall, uuid.uuid4(), {"status": "failed"}) == 0


def test_update_adds_to_float_counters() -> None:
    run = RunFactory(paused_seconds=1.5)
    assert sql.update(Run, run.pk, {}, add={"paused_seconds": 2.25, "input_tokens": 7}) == 1
    run.refresh_from_db()
    assert (run.paused_seconds, run.input_tokens) == (3.75, 7)


def test_read_row_gives_what_the_orm_gives() -> None:
    call = ToolCallFactory(started_at=timezone.now() - dt.timedelta(seconds=3))
    row = sql.read_row(ToolCall, call.pk, CALL_FIELDS)
    expected = ToolCall.objects.values_list(*CALL_FIELDS).get(pk=call.pk)
    assert row == expected
    assert isinstance(row[0], uuid.UUID)
    assert row[4].tzinfo is not None
    assert sql.read_row(ToolCall, uuid.uuid4(), CALL_FIELDS) is None


_CALLS_OF_RUN = sql.Prepared(
    lambda: (
        ToolCall.objects.filter(
            run_id=sql.Slot("run", models.UUIDField()),
            attempt__gte=sql.Slot("attempt", models.IntegerField()),
            status__in=["running", "completed"],
        )
        .order_by("index")
        .values_list(*CALL_FIELDS, "arguments")
    )
)


def test_a_prepared_read_gives_what_its_queryset_gives_for_each_value() -> None:
    run = RunFactory()
    other = RunFactory()
    calls = [_call(run, index) for index in range(3)]
    calls[1].attempt, calls[2].status = 3, "failed"
    ToolCall.objects.bulk_create([*calls, _call(other, 0)])

    def queryset(run_id, attempt):
        return list(
            ToolCall.objects.filter(
                run_id=run_id, attempt__gte=attempt, status__in=["running", "completed"]
            )
            .order_by("index")
            .values_list(*CALL_FIELDS, "arguments")
        )

    for run_id, attempt in [(run.pk, 1), (run.pk, 2), (other.pk, 1), (uuid.uuid4(), 1)]:
        with CaptureQueriesContext(connection) as queries:
            rows = _CALLS_OF_RUN.rows(run=run_id, attempt=attempt)
        assert len(queries) == 1
        assert rows == queryset(run_id, attempt), (run_id, attempt)
    first = _CALLS_OF_RUN.first(run=run.pk, attempt=1)
    # Converted as the ORM converts: a UUID, an aware datetime, JSON.
    assert isinstance(first[0], uuid.UUID)
    assert first[4].tzinfo is not None
    assert first[-1]["nested"] == {"list": [1, "two", None]}
    assert _CALLS_OF_RUN.first(run=uuid.uuid4(), attempt=1) is None


def test_a_step_reads_its_row_with_the_session_lock() -> None:
    call = ToolCallFactory(started_at=None)
    expected = ToolCall.objects.values_list(*CALL_FIELDS).get(pk=call.pk)
    with recording(call.pk, of=ToolCall, read=CALL_FIELDS) as batch:
        assert batch.row == expected
        assert batch.session_id == call.session_id
    # What it reads is the row as it is once the session is locked, not before.
    with recording(call.pk, of=ToolCall) as batch:
        sql.update(ToolCall, call.pk, {"status": "running"}, add={"attempt": 1})
    with recording(call.pk, of=ToolCall, read=("status", "attempt")) as batch:
        assert batch.row == ("running", call.attempt + 1)


def test_a_step_on_a_missing_row_finds_nothing() -> None:
    with pytest.raises(NotFound), recording(uuid.uuid4(), of=ToolCall, read=CALL_FIELDS):
        pass


@pytest.mark.django_db(transaction=True)
def test_statements_are_planned_for_their_values_until_the_transaction_ends(on_postgres) -> None:
    def plan_cache_mode() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            return str(cursor.fetchone()[0])

    if not on_postgres:
        with transaction.atomic():
            sql.plan_with_values()  # SQLite plans every statement anyway
        return
    before = plan_cache_mode()
    with transaction.atomic():
        sql.plan_with_values()
        assert plan_cache_mode() == "force_custom_plan"
    assert plan_cache_mode() == before == "auto"
