"""Retention: ``sessions_purge`` and ``manage.py purge_sessions`` delete ended
sessions older than the cutoff with everything under them, and nothing else."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from goaai.runtime.types import Usage
from goaai.runtime.vocabulary import MemoryScope
from memory_app import services as memory_services
from memory_app.models import MemoryEntry, MemoryRevision, RevisionAction
from runs_app import services as run_services
from runs_app import sessions as run_sessions
from runs_app.management.commands.purge_sessions import parse_age
from runs_app.models import (
    HistorySummary,
    LatencyRollup,
    Run,
    RunRollup,
    SessionFork,
    ToolCall,
    ToolRollup,
    Turn,
    UserLatencyRollup,
)
from sessions_app import services as session_services
from sessions_app.models import RunEvent, Session

pytestmark = pytest.mark.django_db

DAY = dt.timedelta(days=1)


def _conversation(owner, *, ended_days_ago: float | None, runs: int = 1, agent: str = "assistant"):
    """A session with ``runs`` finished runs (a turn and a tool call each), its event
    log, session memory with two revisions, and a user-scoped entry the last run
    wrote. Ended that many days ago, or still active (``None``)."""
    session = session_services.session_create(owner_id=owner.pk, agent="assistant")
    for number in range(runs):
        run = run_services.run_create(session_id=session.id, agent=agent, input="hi")
        run_services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=60)
        turn = run_services.turn_start(
            run_id=run.id, index=0, model="scripted", request_messages=[]
        )
        call = run_services.tool_call_start(
            turn_id=turn.id, index=0, call_id="call_1", name="memory_store", arguments={}
        )
        memory_services.memory_store(
            key=f"colour {number}",
            value="blue",
            scope=MemoryScope.SESSION,
            session_id=session.id,
            written_by_run_id=run.id,
            written_by_tool_call_id=call.id,
        )
        memory_services.memory_store(
            key=f"colour {number}",
            value="green",
            scope=MemoryScope.SESSION,
            session_id=session.id,
            written_by_run_id=run.id,
            written_by_tool_call_id=call.id,
        )
        run_services.tool_call_finish(tool_call_id=call.id, result={"ok": True})
        run_services.run_complete(run_id=run.id, output="Done.")
    memory_services.memory_store(
        key=f"name in {session.id}",
        value="Ada",
        scope=MemoryScope.USER,
        user_id=owner.pk,
        written_by_run_id=run.id,
        written_by_tool_call_id=call.id,
    )
    if ended_days_ago is not None:
        run_sessions.session_end(session_id=session.id)
        Session.objects.filter(pk=session.id).update(ended_at=timezone.now() - ended_days_ago * DAY)
    return Session.objects.get(pk=session.id), run, call


def _rows_of(session: Session) -> dict[str, int]:
    return {
        "runs": Run.objects.filter(session=session).count(),
        "turns": Turn.objects.filter(run__session=session).count(),
        "tool_calls": ToolCall.objects.filter(session=session).count(),
        "events": RunEvent.objects.filter(session=session).count(),
        "memory_entries": MemoryEntry.objects.filter(session=session).count(),
        "memory_revisions": MemoryRevision.objects.filter(session=session).count(),
    }


def _all_rows() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Session, Run, Turn, ToolCall, RunEvent, MemoryEntry, MemoryRevision)
    }


def test_purge_deletes_old_ended_sessions_with_everything_under_them(owner, other_user):
    old, _, _ = _conversation(owner, ended_days_ago=100, runs=2)
    old_rows = _rows_of(old)
    recent, _, _ = _conversation(owner, ended_days_ago=10)
    active, _, _ = _conversation(other_user, ended_days_ago=None)
    # Active for a long time: it never ended, so it is never purged.
    Session.objects.filter(pk=active.pk).update(created_at=timezone.now() - 400 * DAY)
    kept = {session.pk: _rows_of(session) for session in (recent, active)}

    counts = run_sessions.sessions_purge(older_than=90 * DAY)

    assert not Session.objects.filter(pk=old.pk).exists()
    assert _rows_of(old) == dict.fromkeys(old_rows, 0)
    assert counts == {
        "sessions": 1,
        "runs": 2,
        "turns": 2,
        "tool_calls": 2,
        "events": old_rows["events"],
        "memory_entries": 2,
        "memory_revisions": 4,
        "history_summaries": 0,
        "session_forks": 0,
        "expired_memory_entries": 0,
    }
    assert old_rows["events"] > 10
    for session_id, rows in kept.items():
        assert _rows_of(Session.objects.get(pk=session_id)) == rows
    assert Session.objects.get(pk=active.pk).last_event_seq == kept[active.pk]["events"]


def test_the_cutoff_is_the_time_the_session_ended(owner):
    just_older, _, _ = _conversation(owner, ended_days_ago=None)
    just_younger, _, _ = _conversation(owner, ended_days_ago=None)
    now = timezone.now()
    for session in (just_older, just_younger):
        run_sessions.session_end(session_id=session.id)
    Session.objects.filter(pk=just_older.pk).update(
        ended_at=now - 90 * DAY - dt.timedelta(seconds=1)
    )
    Session.objects.filter(pk=just_younger.pk).update(ended_at=now - 90 * DAY)

    counts = run_sessions.sessions_purge(older_than=90 * DAY, now=now)

    assert counts["sessions"] == 1
    assert list(Session.objects.values_list("pk", flat=True)) == [just_younger.pk]


def test_rows_elsewhere_that_pointed_at_purged_runs_are_kept_with_the_link_nulled(owner):
    old, old_run, old_call = _conversation(owner, ended_days_ago=100)
    kept, _, _ = _conversation(owner, ended_days_ago=None)
    # A run in another session started from the purged run's tool call.
    child = run_services.run_create(
        session_id=kept.id,
        agent="assistant",
        input="sub-task",
        parent_run_id=old_run.id,
        parent_tool_call_id=old_call.id,
    )
    user_entry = MemoryEntry.objects.get(scope=MemoryScope.USER, key=f"name in {old.id}")
    assert user_entry.written_by_run_id == old_run.id

    run_sessions.sessions_purge(older_than=90 * DAY)

    child.refresh_from_db()
    assert (child.parent_run_id, child.parent_tool_call_id) == (None, None)
    assert child.session_id == kept.id
    # The user's memory outlives the conversation that wrote it.
    user_entry.refresh_from_db()
    assert (user_entry.value, user_entry.user_id) == ("Ada", owner.pk)
    assert (user_entry.written_by_run_id, user_entry.written_by_tool_call_id) == (None, None)
    revision = MemoryRevision.objects.get(entry_id=user_entry.pk)
    assert (revision.action, revision.actor_run_id, revision.actor_tool_call_id) == (
        RevisionAction.CREATED,
        None,
        None,
    )
    # Nothing of the kept session's own records was touched.
    assert MemoryEntry.objects.filter(session=kept).count() == 1
    assert MemoryEntry.objects.filter(
        session=kept, written_by_run__isnull=False, written_by_tool_call__isnull=False
    ).exists()


def test_a_summarised_session_and_its_forks_are_purged_and_forks_elsewhere_kept(owner):
    old, old_run, _ = _conversation(owner, ended_days_ago=100, runs=2)
    first = Run.objects.filter(session=old).order_by("created_at").first()
    run_services.history_summary_record(
        run_id=old_run.id,
        through_run_id=first.id,
        previous_id=None,
        runs_covered=1,
        text="Earlier: colours.",
        model="scripted",
        usage=Usage(10, 2),
        latency_ms=1,
    )
    # A fork of the old session, still in use: it continues from one of its runs,
    # and summarised the history it inherited.
    fork = run_services.session_fork(source_run_id=old_run.id, owner_id=owner.pk)
    in_fork = run_services.run_create(session_id=fork.id, agent="assistant", input="go on")
    inherited = run_services.history_summary_record(
        run_id=in_fork.id,
        through_run_id=old_run.id,
        previous_id=None,
        runs_covered=2,
        text="Earlier: colours, twice.",
        model="scripted",
        usage=Usage(10, 2),
        latency_ms=1,
    )
    # And the old session was itself a fork of one that stays.
    kept, kept_run, _ = _conversation(owner, ended_days_ago=None)
    SessionFork.objects.create(session=old, source_session=kept, source_run=kept_run)

    counts = run_sessions.sessions_purge(older_than=90 * DAY)

    assert (counts["sessions"], counts["history_summaries"], counts["session_forks"]) == (1, 2, 1)
    assert not HistorySummary.objects.filter(pk=inherited.pk).exists()
    link = SessionFork.objects.get(session=fork)
    assert (link.source_session_id, link.source_run_id) == (None, None)
    in_fork.refresh_from_db()
    assert (in_fork.session_id, in_fork.previous_run_id) == (fork.id, None)
    assert Run.objects.filter(session=kept).exists()


def test_expired_memory_is_purged_and_unexpired_memory_kept(owner, other_user):
    now = timezone.now()
    kept_session, _, _ = _conversation(owner, ended_days_ago=None)
    old, _, _ = _conversation(other_user, ended_days_ago=100)
    expired_user = memory_services.memory_store(
        key="mood",
        value="sunny",
        scope=MemoryScope.USER,
        user_id=owner.pk,
        expires_at=now + dt.timedelta(minutes=1),
    )
    expired_session = memory_services.memory_store(
        key="draft", value="x", scope=MemoryScope.SESSION, session_id=kept_session.id
    )
    # Session memory of a purged session goes with the session, expired or not.
    expired_in_old = memory_services.memory_store(
        key="draft", value="y", scope=MemoryScope.SESSION, session_id=old.id
    )
    fresh = memory_services.memory_store(
        key="plan",
        value="z",
        scope=MemoryScope.USER,
        user_id=owner.pk,
        expires_at=now + dt.timedelta(hours=1),
    )
    MemoryEntry.objects.filter(
        pk__in=[expired_user.pk, expired_session.pk, expired_in_old.pk]
    ).update(expires_at=now - dt.timedelta(seconds=1))

    counts = run_sessions.sessions_purge(older_than=90 * DAY, now=now)

    assert counts["expired_memory_entries"] == 2
    assert counts["memory_entries"] == 2
    assert not MemoryEntry.objects.filter(
        pk__in=[expired_user.pk, expired_session.pk, expired_in_old.pk]
    ).exists()
    assert MemoryEntry.objects.filter(pk=fresh.pk).exists()
    # Each purged expired entry leaves a deletion in its history.
    assert MemoryRevision.objects.get(entry_id=expired_user.pk, version=2).action == (
        RevisionAction.DELETED
    )


def test_dry_run_deletes_nothing_and_reports_what_the_purge_then_deletes(owner, other_user):
    now = timezone.now()
    _conversation(owner, ended_days_ago=100, runs=3)
    _conversation(other_user, ended_days_ago=200)
    _conversation(owner, ended_days_ago=5)
    _conversation(owner, ended_days_ago=None)
    expired = memory_services.memory_store(
        key="mood",
        value="sunny",
        scope=MemoryScope.USER,
        user_id=owner.pk,
        expires_at=now + dt.timedelta(minutes=1),
    )
    MemoryEntry.objects.filter(pk=expired.pk).update(expires_at=now - DAY)
    before = _all_rows()

    would = run_sessions.sessions_purge(older_than=90 * DAY, dry_run=True, now=now)

    assert _all_rows() == before
    did = run_sessions.sessions_purge(older_than=90 * DAY, now=now)
    assert would == did
    assert did["sessions"] == 2
    assert did["expired_memory_entries"] == 1
    assert Session.objects.count() == 2


def test_sessions_go_in_batches_each_deleting_every_kind_of_row_in_one_statement(owner):
    for _ in range(5):
        _conversation(owner, ended_days_ago=100, runs=2)
    kept, _, _ = _conversation(owner, ended_days_ago=None)
    kept_rows = _rows_of(kept)

    with CaptureQueriesContext(connection) as captured:
        counts = run_sessions.sessions_purge(older_than=90 * DAY, batch_size=2)

    assert counts["sessions"] == 5
    assert counts["runs"] == counts["turns"] == counts["tool_calls"] == 10
    assert list(Session.objects.values_list("pk", flat=True)) == [kept.pk]
    assert _rows_of(kept) == kept_rows
    session_deletes = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith('DELETE FROM "sessions_app_session"')
    ]
    assert len(session_deletes) == 3  # 2 + 2 + 1


ROLLUP_TABLES = (
    "runs_app_runrollup",
    "runs_app_latencyrollup",
    "runs_app_userlatencyrollup",
    "runs_app_toolrollup",
)


def test_a_batch_costs_the_same_statements_whatever_it_holds(owner):
    """Whatever the batch holds, the same statements, the dashboard's rollups it
    takes its runs out of included: a few per rollup, not per run or per row."""

    def statements_to_purge(runs: int, sessions: int) -> tuple[int, int, int]:
        for number in range(sessions):
            # Runs of several agents: rows of several rollup keys to take them from.
            _conversation(owner, ended_days_ago=100, runs=runs, agent=f"agent-{number}")
        touched = sum(
            model.objects.count()
            for model in (RunRollup, LatencyRollup, UserLatencyRollup, ToolRollup)
        )
        with CaptureQueriesContext(connection) as captured:
            run_sessions.sessions_purge(older_than=90 * DAY)
        assert not Session.objects.filter(status="ended").exists()
        assert not RunRollup.objects.exists()
        assert not UserLatencyRollup.objects.exists()
        rollup = [q for q in captured.captured_queries if any(t in q["sql"] for t in ROLLUP_TABLES)]
        return len(captured.captured_queries) - len(rollup), len(rollup), touched

    few = statements_to_purge(runs=1, sessions=1)
    many = statements_to_purge(runs=3, sessions=4)
    assert few[0] == many[0]
    assert many[2] > few[2]
    # Each rollup: one statement that adds to (here, takes from) its rows, one that
    # drops the rows that count nothing any more.
    assert few[1] == many[1] == 2 * 4


def test_purge_refuses_nonsense_arguments():
    with pytest.raises(ValueError, match="negative"):
        run_sessions.sessions_purge(older_than=-DAY)
    with pytest.raises(ValueError, match="batch_size"):
        run_sessions.sessions_purge(older_than=DAY, batch_size=0)


# The command


def _purge(*args: str) -> str:
    out = io.StringIO()
    call_command("purge_sessions", *args, stdout=out, no_color=True)
    return out.getvalue()


def test_command_deletes_and_prints_the_counts(owner):
    old, _, _ = _conversation(owner, ended_days_ago=100, runs=2)
    events = RunEvent.objects.filter(session=old).count()
    _conversation(owner, ended_days_ago=None)

    output = _purge("--older-than", "90d", "--batch-size", "1")

    assert not Session.objects.filter(pk=old.pk).exists()
    assert output.splitlines()[0] == "Deleted sessions that ended more than 90d ago:"
    table = dict(line.strip().rsplit(None, 1) for line in output.splitlines()[1:])
    assert table == {
        "sessions": "1",
        "runs": "2",
        "turns": "2",
        "tool calls": "2",
        "events": str(events),
        "session memory entries": "2",
        "session memory revisions": "4",
        "history summaries": "0",
        "fork links": "0",
        "expired memory entries": "0",
    }


def test_command_dry_run_says_what_would_go_and_keeps_it(owner):
    _conversation(owner, ended_days_ago=15)
    before = _all_rows()

    output = _purge("--older-than", "2w", "--dry-run")

    assert _all_rows() == before
    assert output.startswith("Would delete sessions that ended more than 2w ago (dry run")
    assert "  sessions" in output
    assert output.splitlines()[1].split()[-1] == "1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90d", dt.timedelta(days=90)),
        ("12h", dt.timedelta(hours=12)),
        ("30m", dt.timedelta(minutes=30)),
        ("2w", dt.timedelta(weeks=2)),
        (" 7D ", dt.timedelta(days=7)),
    ],
)
def test_command_reads_ages_in_minutes_hours_days_and_weeks(text, expected):
    assert parse_age(text) == expected


@pytest.mark.parametrize("text", ["90", "d", "90x", "1.5d", "-3d", "90 days", "", "0d"])
def test_command_refuses_other_ages(text, owner):
    _conversation(owner, ended_days_ago=100)

    with pytest.raises(CommandError, match="--older-than"):
        _purge("--older-than", text)

    assert Session.objects.count() == 1


def test_command_refuses_a_batch_size_below_one():
    with pytest.raises(CommandError, match="--batch-size"):
        _purge("--older-than", "90d", "--batch-size", "0")
