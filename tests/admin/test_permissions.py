"""The operators' console shows and does only what a staff account's Django
permissions allow: changelists, change pages, the timelines and their buttons, and
the admin actions.

Alice owns a session with a running run, a turn, a tool call, events, memory and a
token. Dave is staff with no permission: the console is empty for him and every
page of hers is refused. Erin (Auditors) reads everything and can act on nothing.
Oscar (Operators) also cancels runs and ends sessions, each logged in his name, but
cannot delete or revoke.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, DELETION
from django.contrib.auth.models import Group
from django.urls import reverse

from memory_app.models import MemoryEntry, MemoryRevision
from memory_app.services import memory_store
from runs_app.models import Run, ToolCall, Turn
from sessions_app.eventlog import event_append
from sessions_app.models import ApiToken, RunEvent, Session
from sessions_app.services import api_token_create
from tests.factories import RunFactory, SessionFactory, ToolCallFactory, TurnFactory
from tests.permissions import GROUPS_MIGRATION, log_entries, staff_user

pytestmark = pytest.mark.django_db

MODELS = [Session, Run, Turn, ToolCall, RunEvent, MemoryEntry, MemoryRevision, ApiToken]


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def change(obj) -> str:
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])


def timelines(records) -> dict[str, str]:
    run, turn, event = records[Run], records[Turn], records[RunEvent]
    return {
        "run": reverse("admin:runs_app_run_timeline", args=[run.pk]),
        "session": reverse("admin:sessions_app_session_timeline", args=[run.session_id]),
        "download": reverse("admin:runs_app_run_timeline_download", args=[run.pk]),
        "event": reverse("admin:runs_app_timeline_payload", args=["event", event.pk]),
        "turn": reverse("admin:runs_app_timeline_payload", args=["turn", turn.pk]),
        "tool call": reverse(
            "admin:runs_app_timeline_payload", args=["tool_call", records[ToolCall].pk]
        ),
        "run payload": reverse("admin:runs_app_timeline_payload", args=["run", run.pk]),
    }


@pytest.fixture
def records(owner):
    session = SessionFactory(owner=owner, title="Alice's chat")
    run = RunFactory(session=session, status="running", input="a secret plan")
    call = ToolCallFactory(turn__run=run)
    event_append(session_id=session.id, run_id=run.id, type="run.started", data={"x": 1})
    memory_store(key="colour", value="green", scope="session", session_id=session.id)
    return {
        Session: session,
        Run: run,
        Turn: call.turn,
        ToolCall: call,
        RunEvent: RunEvent.objects.filter(session=session).first(),
        MemoryEntry: MemoryEntry.objects.get(session=session),
        MemoryRevision: MemoryRevision.objects.get(session=session),
        ApiToken: api_token_create(user_id=owner.pk, name="alice's script")[0],
    }


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


def actions_offered(client, model) -> set[str]:
    page = client.get(changelist(model))
    assert page.status_code == 200
    form = page.context["action_form"]  # None when no action is offered
    return {name for name, _ in form.fields["action"].choices if name} if form else set()


# The groups


def test_the_migration_creates_auditors_and_operators():
    def perms(name):
        found = Group.objects.get(name=name).permissions.select_related("content_type")
        return {f"{p.content_type.app_label}.{p.codename}" for p in found}

    views = {
        "sessions_app.view_session",
        "sessions_app.view_runevent",
        "sessions_app.view_apitoken",
        "runs_app.view_run",
        "runs_app.view_turn",
        "runs_app.view_toolcall",
        "runs_app.view_score",
        "memory_app.view_memoryentry",
        "memory_app.view_memoryrevision",
    }
    assert perms("Auditors") == views
    assert perms("Operators") == views | {
        "runs_app.cancel_run",
        "runs_app.respond_run",
        "sessions_app.end_session",
    }
    assert set(GROUPS_MIGRATION.GROUPS) == {"Auditors", "Operators"}


# The finding: staff with no permission


def test_staff_without_permissions_see_an_empty_console(as_user, records):
    client = as_user(staff_user("dave"))
    index = client.get(reverse("admin:index"))
    assert index.status_code == 200
    assert index.context["app_list"] == []
    for model in MODELS:
        assert client.get(changelist(model)).status_code == 403, model.__name__
        assert client.get(change(records[model])).status_code == 403, model.__name__


def test_staff_without_permissions_cannot_open_timelines_or_cancel(as_user, records):
    client = as_user(staff_user("dave"))
    for what, url in timelines(records).items():
        response = client.get(url)
        assert response.status_code == 404, what
        assert b"a secret plan" not in response.content
    run = records[Run]
    cancel = reverse("admin:runs_app_run_timeline_cancel", args=[run.pk])
    assert client.post(cancel).status_code == 404
    run.refresh_from_db()
    assert (run.status, run.cancel_requested_at) == ("running", None)


def test_staff_without_permissions_cannot_run_admin_actions(as_user, records):
    client = as_user(staff_user("dave"))
    posts = [
        (Session, "end_sessions", records[Session]),
        (Run, "cancel_runs", records[Run]),
        (ApiToken, "revoke", records[ApiToken]),
        (Session, "delete_selected", records[Session]),
    ]
    for model, action, obj in posts:
        response = client.post(
            changelist(model), {"action": action, "_selected_action": [str(obj.pk)]}
        )
        assert response.status_code == 403, action
    assert_untouched(records)


def assert_untouched(records) -> None:
    session = Session.objects.get(pk=records[Session].pk)
    run = Run.objects.get(pk=records[Run].pk)
    token = ApiToken.objects.get(pk=records[ApiToken].pk)
    assert session.status == "active"
    assert (run.status, run.cancel_requested_at) == ("running", None)
    assert token.revoked_at is None


# Auditors


def test_an_auditor_reads_every_page(as_user, records):
    client = as_user(staff_user("erin", groups=("Auditors",)))
    for model in MODELS:
        assert client.get(changelist(model)).status_code == 200, model.__name__
        assert client.get(change(records[model])).status_code == 200, model.__name__
    for what, url in timelines(records).items():
        assert client.get(url).status_code == 200, what
    assert b"a secret plan" in client.get(timelines(records)["run"]).content


def test_an_auditor_gets_no_action_and_no_button(as_user, records):
    client = as_user(staff_user("erin", groups=("Auditors",)))
    assert actions_offered(client, Session) == {"export_json", "export_csv"}
    # Exports only: she reads every record, scores included (a dataset of them).
    assert actions_offered(client, Run) == {"export_json", "export_csv", "export_dataset"}
    assert actions_offered(client, ApiToken) == set()
    assert actions_offered(client, MemoryEntry) == set()
    page = client.get(timelines(records)["run"]).content.decode()
    assert "Cancel run" not in page
    memory_page = client.get(change(records[MemoryEntry])).content.decode()
    assert 'name="_save"' not in memory_page


def test_an_auditors_actions_are_refused_when_posted_anyway(as_user, records):
    client = as_user(staff_user("erin", groups=("Auditors",)))
    for model, action, obj in [
        (Session, "end_sessions", records[Session]),
        (Run, "cancel_runs", records[Run]),
        (ApiToken, "revoke", records[ApiToken]),
        (Session, "delete_selected", records[Session]),
    ]:
        client.post(changelist(model), {"action": action, "_selected_action": [str(obj.pk)]})
    cancel = reverse("admin:runs_app_run_timeline_cancel", args=[records[Run].pk])
    assert client.post(cancel).status_code == 403
    delete = change(records[Session]).replace("/change/", "/delete/")
    assert client.post(delete, {"post": "yes"}).status_code == 403
    entry = records[MemoryEntry]
    edit = client.post(change(entry), {"value": '"red"', "seen_version": entry.version})
    assert edit.status_code == 403
    assert MemoryEntry.objects.get(pk=entry.pk).value == "green"
    assert_untouched(records)


def test_the_timeline_needs_every_part_of_the_run(as_user, records):
    # The run and its events, but not its turns and tool calls: the page would
    # show them, so it is not found; the run's own value still loads.
    client = as_user(staff_user("gina", perms=("runs_app.view_run", "sessions_app.view_runevent")))
    urls = timelines(records)
    assert client.get(urls["run"]).status_code == 404
    assert client.get(urls["download"]).status_code == 404
    assert client.get(urls["turn"]).status_code == 404
    assert client.get(urls["tool call"]).status_code == 404
    assert client.get(urls["event"]).status_code == 200
    assert client.get(urls["run payload"]).status_code == 200


# Operators


def test_an_operator_cancels_from_the_changelist_and_is_logged(as_user, records):
    oscar = staff_user("oscar", groups=("Operators",))
    client = as_user(oscar)
    assert "cancel_runs" in actions_offered(client, Run)
    run = records[Run]

    client.post(changelist(Run), {"action": "cancel_runs", "_selected_action": [str(run.pk)]})

    run.refresh_from_db()
    assert run.cancel_requested_at is not None or run.status == "canceled"
    assert run.cancel_reason == f"canceled by oscar (user {oscar.pk})"
    [entry] = log_entries(oscar, run)
    assert (entry.action_flag, entry.change_message) == (CHANGE, "Canceled (admin action)")


def test_an_operator_cancels_from_the_timeline_and_is_logged(as_user, records):
    oscar = staff_user("oscar", groups=("Operators",))
    client = as_user(oscar)
    run = records[Run]
    assert "Cancel run" in client.get(timelines(records)["run"]).content.decode()

    cancel = reverse("admin:runs_app_run_timeline_cancel", args=[run.pk])
    assert client.post(cancel).status_code == 302

    run.refresh_from_db()
    assert run.cancel_reason == f"canceled by oscar (user {oscar.pk})"
    [entry] = log_entries(oscar, run)
    assert entry.change_message == "Canceled (from its timeline)"


def test_an_operator_ends_sessions_and_their_runs_say_who(as_user, records):
    oscar = staff_user("oscar", groups=("Operators",))
    client = as_user(oscar)
    session, run = records[Session], records[Run]
    Run.objects.filter(pk=run.pk).update(status="pending", started_at=None)
    assert "end_sessions" in actions_offered(client, Session)

    client.post(
        changelist(Session), {"action": "end_sessions", "_selected_action": [str(session.pk)]}
    )

    session.refresh_from_db()
    run.refresh_from_db()
    assert (session.status, run.status) == ("ended", "canceled")
    assert run.cancel_reason == f"session ended by oscar (user {oscar.pk})"
    [entry] = log_entries(oscar, session)
    assert entry.change_message == "Ended the session (admin action)"


def test_an_operator_cannot_delete_or_revoke(as_user, records):
    client = as_user(staff_user("oscar", groups=("Operators",)))
    assert "delete_selected" not in actions_offered(client, Session)
    assert actions_offered(client, ApiToken) == set()
    delete = change(records[Session]).replace("/change/", "/delete/")
    assert client.post(delete, {"post": "yes"}).status_code == 403
    client.post(
        changelist(ApiToken), {"action": "revoke", "_selected_action": [str(records[ApiToken].pk)]}
    )
    assert Session.objects.filter(pk=records[Session].pk).exists()
    assert ApiToken.objects.get(pk=records[ApiToken].pk).revoked_at is None


# Single permissions


def test_delete_session_is_the_one_permission_deleting_a_session_takes(as_user, records):
    hank = staff_user("hank", perms=("sessions_app.view_session", "sessions_app.delete_session"))
    client = as_user(hank)
    session = records[Session]
    delete = change(session).replace("/change/", "/delete/")
    confirm = client.get(delete)
    assert confirm.status_code == 200
    assert not confirm.context["perms_lacking"]

    assert client.post(delete, {"post": "yes"}).status_code == 302

    assert not Session.objects.filter(pk=session.pk).exists()
    [entry] = log_entries(hank, session)
    assert (entry.action_flag, entry.object_repr) == (DELETION, "Alice's chat")


def test_revoking_tokens_takes_delete_apitoken(as_user, records):
    kim = staff_user("kim", perms=("sessions_app.view_apitoken", "sessions_app.delete_apitoken"))
    client = as_user(kim)
    token = records[ApiToken]
    assert actions_offered(client, ApiToken) == {"revoke"}

    client.post(changelist(ApiToken), {"action": "revoke", "_selected_action": [str(token.pk)]})

    token.refresh_from_db()
    assert token.revoked_at is not None
    [entry] = log_entries(kim, token)
    assert entry.change_message == "Revoked (admin action)"


def test_staff_may_read_their_own_run_timeline_without_permissions(as_user):
    dave = staff_user("dave")
    run = TurnFactory(run__session__owner=dave).run
    client = as_user(dave)
    assert client.get(reverse("admin:runs_app_run_timeline", args=[run.pk])).status_code == 200
