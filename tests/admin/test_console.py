"""The operators' console: changelists that stay cheap, the filters and actions an
audit needs, and memory edits that leave a revision naming the staff user."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from goaai.admin_base import BoundedCountPaginator
from goaai.runtime.types import Usage
from goaai.runtime.vocabulary import RunStatus, SessionStatus
from memory_app.models import MemoryEntry, MemoryRevision
from memory_app.services import memory_store
from runs_app.export import session_document
from runs_app.models import HistorySummary, Run, SessionFork, ToolCall, Turn
from runs_app.services import history_summary_record, session_fork
from sessions_app.models import ApiToken, RunEvent, Session
from sessions_app.services import api_token_create, session_create
from tests.factories import RunFactory, SessionFactory, ToolCallFactory, UserFactory

pytestmark = pytest.mark.django_db


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def change(obj) -> str:
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    return client


def _rows(count: int, owner) -> None:
    """``count`` sessions, each with a run, a turn, a tool call, events and memory."""
    for index in range(count):
        session = session_create(owner_id=owner.pk, agent="assistant", title=f"s{index}")
        call = ToolCallFactory(turn__run__session=session, name="calculator")
        memory_store(key=f"k{index}", value=index, scope="session", session_id=session.id)
        assert call.run.session_id == session.id
        history_summary_record(
            run_id=call.run_id,
            through_run_id=call.run_id,
            previous_id=None,
            runs_covered=1,
            text=f"summary {index}",
            model="scripted",
            usage=Usage(10, 2),
            latency_ms=3,
        )
        session_fork(source_run_id=call.run_id, owner_id=owner.pk)
    api_token_create(user_id=owner.pk, name=f"t{count}")


CHANGELISTS = [
    Session,
    Run,
    Turn,
    ToolCall,
    RunEvent,
    MemoryEntry,
    MemoryRevision,
    ApiToken,
    HistorySummary,
    SessionFork,
]


@pytest.mark.parametrize("model", CHANGELISTS, ids=lambda m: m.__name__)
def test_changelist_query_count_is_the_same_for_0_1_and_many_rows(
    operator, owner, model, django_assert_num_queries
):
    counts = []
    for added in (0, 1, 6):
        _rows(added, owner)
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as captured:
            response = operator.get(changelist(model))
        assert response.status_code == 200
        counts.append(len(captured.captured_queries))
    # 0 rows may skip a query or two (nothing to annotate); 1 and many must match.
    assert counts[1] == counts[2], counts
    assert counts[0] <= counts[1]


def test_changelists_never_count_a_whole_table(operator, owner):
    _rows(2, owner)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for model in CHANGELISTS:
        with CaptureQueriesContext(connection) as captured:
            operator.get(changelist(model))
        counts = [
            q["sql"]
            for q in captured.captured_queries
            if q["sql"].upper().startswith("SELECT COUNT(")
        ]
        assert counts, f"{model.__name__}: the page count was not taken"
        for sql in counts:
            if "LIMIT" not in sql.upper():
                pytest.fail(f"{model.__name__}: an unbounded count: {sql}")


def test_the_bounded_paginator_stops_counting_at_its_cap(owner, monkeypatch):
    monkeypatch.setattr("goaai.admin_base.COUNT_CAP", 3)
    for _ in range(5):
        SessionFactory(owner=owner)
    paginator = BoundedCountPaginator(Session.objects.order_by("-created_at"), 2)
    assert paginator.count == 4  # the cap plus one: "more than 3"
    assert len(paginator.page(1).object_list) == 2


def test_run_filters_by_owner_label_agent_status_and_dates(operator, owner, other_user):
    mine = RunFactory(session__owner=owner, labels={"tier": "free"}, status=RunStatus.COMPLETED)
    theirs = RunFactory(session__owner=other_user, agent="concierge")
    url = changelist(Run)

    def listed(query: str) -> set[str]:
        response = operator.get(f"{url}?{query}")
        assert response.status_code == 200
        return {str(run.pk) for run in response.context["cl"].result_list}

    assert listed("owner=alice") == {str(mine.pk)}
    assert listed("label=tier:free") == {str(mine.pk)}
    assert listed("label=tier:paid") == set()
    assert listed("label=nonsense") == set()
    assert listed("agent=concierge") == {str(theirs.pk)}
    assert listed("status__exact=completed") == {str(mine.pk)}
    day = mine.created_at.date().isoformat()
    assert listed(f"created_at_from={day}&created_at_until={day}") == {
        str(mine.pk),
        str(theirs.pk),
    }
    assert listed("created_at_from=2999-01-01") == set()
    assert listed("created_at_from=not-a-date") == set()


def test_tool_call_filters_by_tool_name_error_kind_and_owner(operator, owner, other_user):
    failed = ToolCallFactory(
        turn__run__session__owner=owner, name="memory_store", status="failed", error_kind="timeout"
    )
    ToolCallFactory(turn__run__session__owner=other_user, name="calculator")
    url = changelist(ToolCall)
    for query in ("name=memory_store", "error_kind__exact=timeout", "owner=alice"):
        response = operator.get(f"{url}?{query}")
        assert [call.pk for call in response.context["cl"].result_list] == [failed.pk], query


def test_tool_name_choices_come_from_the_registry_not_the_table(operator):
    response = operator.get(changelist(ToolCall))
    content = response.content.decode()
    for tool in ("memory_store", "calculator", "ask_assistant"):
        assert f"?name={tool}" in content


def test_session_changelist_shows_run_counts(operator, owner):
    session = SessionFactory(owner=owner)
    RunFactory(session=session)
    RunFactory(session=session)
    response = operator.get(changelist(Session))
    row = next(s for s in response.context["cl"].result_list if s.pk == session.pk)
    assert row._runs == 2


def test_export_sessions_as_json_matches_the_api_document(operator, owner):
    session = session_create(owner_id=owner.pk, agent="assistant", title="exported")
    ToolCallFactory(turn__run__session=session)
    response = operator.post(
        changelist(Session),
        {"action": "export_json", "_selected_action": [str(session.pk)]},
    )
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment")
    document = json.loads(response.content)
    expected = json.loads(
        json.dumps(session_document(Session.objects.get(pk=session.pk)), default=str)
    )
    exported = document["sessions"][0]
    for part in ("session", "runs", "turns", "tool_calls", "events", "memory"):
        assert exported[part] == expected[part], part


def test_export_runs_as_csv(operator, owner):
    run = RunFactory(session__owner=owner, input="hello, world", labels={"tier": "free"})
    response = operator.post(
        changelist(Run), {"action": "export_csv", "_selected_action": [str(run.pk)]}
    )
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:4] == ["id", "session_id", "agent", "status"]
    assert rows[1][0] == str(run.pk)
    assert rows[1][4] == "hello, world"
    assert json.loads(rows[1][6]) == {"tier": "free"}


def test_export_runs_as_json(operator, owner):
    call = ToolCallFactory(turn__run__session__owner=owner)
    response = operator.post(
        changelist(Run), {"action": "export_json", "_selected_action": [str(call.run_id)]}
    )
    document = json.loads(response.content)
    (run,) = document["runs"]
    assert run["format"] == "goaai.run.v1"
    assert run["run"]["id"] == str(call.run_id)
    assert [turn["id"] for turn in run["turns"]] == [str(call.turn_id)]
    assert [c["id"] for c in run["tool_calls"]] == [str(call.pk)]


def test_cancel_action_cancels_open_runs_only(operator, owner):
    pending = RunFactory(session__owner=owner, status=RunStatus.PENDING)
    done = RunFactory(session__owner=owner, status=RunStatus.COMPLETED)
    response = operator.post(
        changelist(Run),
        {"action": "cancel_runs", "_selected_action": [str(pending.pk), str(done.pk)]},
        follow=True,
    )
    assert response.status_code == 200
    pending.refresh_from_db()
    done.refresh_from_db()
    assert pending.status == RunStatus.CANCELED
    assert done.status == RunStatus.COMPLETED
    assert RunEvent.objects.filter(run=pending, type="run.canceled").exists()


def test_end_sessions_action(operator, owner):
    session = session_create(owner_id=owner.pk, agent="assistant")
    pending = RunFactory(session=session, status=RunStatus.PENDING)
    operator.post(
        changelist(Session), {"action": "end_sessions", "_selected_action": [str(session.pk)]}
    )
    session.refresh_from_db()
    pending.refresh_from_db()
    assert session.status == SessionStatus.ENDED
    assert pending.status == RunStatus.CANCELED


def test_staff_edit_of_memory_is_a_revision_naming_them(operator, owner, staff):
    session = SessionFactory(owner=owner)
    entry = memory_store(key="colour", value="green", scope="session", session_id=session.id)
    response = operator.post(
        change(entry),
        {"value": '"blue"', "expires_at_0": "", "expires_at_1": "", "seen_version": 1},
    )
    assert response.status_code == 302, response.content
    entry.refresh_from_db()
    assert entry.value == "blue"
    assert entry.version == 2
    assert entry.written_by_user_id == staff.pk
    revision = MemoryRevision.objects.get(entry_id=entry.pk, version=2)
    assert (revision.actor_kind, revision.actor_user_id) == ("user", staff.pk)


def test_staff_edit_on_a_stale_version_is_refused(operator, owner):
    session = SessionFactory(owner=owner)
    entry = memory_store(key="colour", value="green", scope="session", session_id=session.id)
    memory_store(key="colour", value="red", scope="session", session_id=session.id)
    response = operator.post(
        change(entry),
        {"value": '"blue"', "expires_at_0": "", "expires_at_1": "", "seen_version": 1},
    )
    assert response.status_code == 200  # the form again, with the error
    assert "changed meanwhile" in response.content.decode()
    entry.refresh_from_db()
    assert entry.value == "red"


def test_staff_delete_of_memory_keeps_a_revision(operator, owner, staff):
    entry = memory_store(key="tz", value="UTC", scope="user", user_id=owner.pk)
    delete_url = change(entry).replace("/change/", "/delete/")
    assert operator.post(delete_url, {"post": "yes"}).status_code == 302
    assert not MemoryEntry.objects.filter(pk=entry.pk).exists()
    revision = MemoryRevision.objects.get(entry_id=entry.pk, action="deleted")
    assert revision.actor_user_id == staff.pk


def test_staff_add_memory_through_the_admin(operator, staff):
    response = operator.post(
        reverse("admin:memory_app_memoryentry_add"),
        {
            "key": "motto",
            "value": '"be kind"',
            "scope": "global",
            "agent": "",
            "session": "",
            "user": "",
        },
    )
    assert response.status_code == 302, response.content
    entry = MemoryEntry.objects.get(key="motto")
    assert (entry.scope, entry.value, entry.written_by_user_id) == ("global", "be kind", staff.pk)


def test_revoking_tokens_from_the_admin(operator, owner):
    token, raw = api_token_create(user_id=owner.pk, name="ci")
    operator.post(changelist(ApiToken), {"action": "revoke", "_selected_action": [str(token.pk)]})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert raw[:12] == token.prefix


def test_non_staff_cannot_use_the_console(client, other_user):
    client.force_login(other_user)
    for model in CHANGELISTS:
        response = client.get(changelist(model))
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]
    assert UserFactory  # the personas come from the shared factories


def test_csv_cells_that_a_spreadsheet_would_run_stay_text(operator, owner):
    run = RunFactory(session__owner=owner, input='=HYPERLINK("http://x","y")')
    response = operator.post(
        changelist(Run), {"action": "export_csv", "_selected_action": [str(run.pk)]}
    )
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[1][4] == '\'=HYPERLINK("http://x","y")'
