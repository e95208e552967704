"""The dashboard's rollups equal a count over the runs that exist, however runs end
or go: kept as each run ends (with its tool calls), taken back when a session is
deleted or purged, counted again after rows were written in bulk."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum
from django.utils import timezone

from goaai.runtime import rt
from goaai.runtime.vocabulary import RunStatus
from runs_app import rollups
from runs_app.models import LatencyRollup, Run, RunRollup, ToolRollup, UserLatencyRollup
from runs_app.seeding import Plan, Seeder
from runs_app.sessions import session_end, sessions_purge
from sessions_app.services import session_delete

pytestmark = pytest.mark.django_db(transaction=True)


def _span() -> tuple[dt.datetime, dt.datetime]:
    now = timezone.now()
    return now - dt.timedelta(days=40), now + dt.timedelta(days=1)


def _run(owner, message: str, session=None):
    session = session or rt.create_session(owner=owner)
    info = rt.start("assistant", message, session=session.id)
    return session, Run.objects.get(pk=info.run_id)


def test_each_ended_run_is_counted_in_its_hour_and_day_with_its_tool_calls(inline_runtime, owner):
    session, echoed = _run(owner, "echo hello")
    _run(owner, "calculate 1/0", session)
    _run(owner, "what is 6*7", session)
    asking = rt.start("assistant", "ask me for my name", session=session.id)

    assert rollups.differences(*_span()) == []
    hourly = RunRollup.objects.filter(span="hour")
    daily = RunRollup.objects.filter(span="day")
    # The run waiting for an answer is not counted: it has not ended.
    assert hourly.aggregate(n=Sum("runs"))["n"] == 3
    assert daily.aggregate(n=Sum("runs"))["n"] == 3
    row = hourly.get(status=RunStatus.COMPLETED, agent="assistant", owner=owner)
    echoed.refresh_from_db()
    assert echoed.model
    assert row.model == echoed.model
    assert row.period == echoed.created_at.replace(minute=0, second=0, microsecond=0)
    assert row.timed_runs == row.runs
    assert row.total_tokens == sum(
        r.total_tokens for r in Run.objects.filter(status=RunStatus.COMPLETED)
    )
    tools = dict(
        ToolRollup.objects.filter(span="hour").values_list("tool").annotate(n=Sum("calls"))
    )
    assert tools == {"echo": 1, "calculator": 2}
    assert (
        LatencyRollup.objects.filter(span="hour", measure="duration").aggregate(n=Sum("runs"))["n"]
        == 3
    )

    # Answered, the waiting run ends and is counted too.
    rt.respond(asking.run_id, answer="Ada", user=owner)
    assert hourly.aggregate(n=Sum("runs"))["n"] == 4
    assert rollups.differences(*_span()) == []


def test_latency_is_counted_for_every_user_together_and_for_each_apart(
    inline_runtime, owner, django_user_model
):
    other = django_user_model.objects.create_user("other-owner", password="pw")
    _run(owner, "echo one")
    _run(owner, "echo two")
    _run(other, "what is 6*7")

    assert rollups.differences(*_span()) == []
    keys = ("span", "period", "agent", "model", "measure", "bucket")
    apart = UserLatencyRollup.objects.values_list(*keys).annotate(n=Sum("runs")).order_by()
    together = LatencyRollup.objects.values_list(*keys, "runs")
    assert sorted(apart) == sorted(together)
    hourly = UserLatencyRollup.objects.filter(span="hour", measure="duration")
    assert dict(hourly.values_list("owner").annotate(n=Sum("runs")).order_by()) == {
        owner.pk: 2,
        other.pk: 1,
    }

    # A deleted session is taken out of both.
    gone = Run.objects.filter(session__owner=other).get().session_id
    session_delete(session_id=gone)
    assert rollups.differences(*_span()) == []
    assert set(UserLatencyRollup.objects.values_list("owner", flat=True)) == {owner.pk}
    assert (
        LatencyRollup.objects.filter(span="day", measure="working").aggregate(n=Sum("runs"))["n"]
        == 2
    )


def test_a_deleted_session_takes_its_runs_out_of_the_rollups(inline_runtime, owner):
    _run(owner, "echo kept")
    gone, _ = _run(owner, "echo gone")
    _run(owner, "calculate 2+2", gone)

    session_delete(session_id=gone.id)

    assert rollups.differences(*_span()) == []
    assert RunRollup.objects.filter(span="hour").aggregate(n=Sum("runs"))["n"] == 1
    assert set(ToolRollup.objects.values_list("tool", flat=True)) == {"echo"}


def test_the_purge_takes_its_runs_out_of_the_rollups(inline_runtime, owner):
    old, _ = _run(owner, "echo old")
    _run(owner, "echo new")
    session_end(session_id=old.id)

    sessions_purge(older_than=dt.timedelta(0), now=timezone.now() + dt.timedelta(seconds=1))

    assert rollups.differences(*_span()) == []
    assert RunRollup.objects.filter(span="day").aggregate(n=Sum("runs"))["n"] == 1


def test_seeded_runs_are_counted_and_a_recount_repairs_what_was_lost(db):
    Seeder(
        Plan(
            sessions=12,
            runs_per_session=3,
            turns_per_run=2,
            calls_per_turn=1,
            users=2,
            days=3,
            active_fraction=0.2,
            events=False,
            memory=False,
        ),
        seed=4,
    ).run()
    ended = Run.objects.filter(status__in=rollups.ENDED).count()
    assert ended > 0
    assert RunRollup.objects.filter(span="day").aggregate(n=Sum("runs"))["n"] == ended
    assert rollups.differences(*_span()) == []

    # Damage: a row lost, another wrong. A recount of the days puts them right.
    RunRollup.objects.filter(span="hour").first().delete()
    RunRollup.objects.filter(span="day").update(cost=Decimal("9"))
    assert rollups.differences(*_span())
    rollups.recount(*_span())
    assert rollups.differences(*_span()) == []


def test_latency_buckets_hold_what_their_bounds_say():
    for ms in (0, 0.5, 1, 1.1, 1.21, 2, 9.99, 10, 48, 1000, 86_400_000):
        low, high = rollups.bucket_bounds(rollups.latency_bucket(ms))
        assert low <= ms < high


def test_a_database_from_before_the_rollups_has_them_counted_after_migrating(inline_runtime, owner):
    _run(owner, "echo hello")
    for model in (RunRollup, LatencyRollup, UserLatencyRollup, ToolRollup):
        model.objects.all().delete()

    rollups.count_if_missing()

    assert RunRollup.objects.filter(span="hour").aggregate(n=Sum("runs"))["n"] == 1
    assert rollups.differences(*_span()) == []


def test_the_command_checks_and_counts_again(inline_runtime, owner):
    _run(owner, "echo hello")
    out = StringIO()
    call_command("rollups", "--check", stdout=out)
    assert "equal" in out.getvalue()
    RunRollup.objects.filter(span="day").delete()
    with pytest.raises(CommandError, match="differ"):
        call_command("rollups", "--check", stdout=StringIO())
    call_command("rollups", stdout=StringIO())
    call_command("rollups", "--check", stdout=StringIO())
    with pytest.raises(CommandError, match="not a date"):
        call_command("rollups", "--since", "2026-13-01", stdout=StringIO())
