"""Staff reach other users' data through the API only as far as their Django
permissions go.

Alice owns a session with a run waiting for approval, a turn, tool calls, events and
memory. Dave is staff with no permission at all: none of it exists for him (404),
whatever he tries. Erin is an Auditor: she reads all of it and may change none of it
(403). Oscar is an Operator: he may also cancel Alice's runs, answer them and end her
session, and every such action names him, in the run's record and in the admin log;
he may not delete, edit or speak in her chat.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION
from django.core.cache import cache
from rest_framework.test import APIClient

from memory_app.models import MemoryEntry
from memory_app.services import memory_store
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent, Session
from sessions_app.services import api_token_create
from tests.factories import RunFactory, SessionFactory, ToolCallFactory
from tests.permissions import log_entries, staff_user

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()


def client_for(user) -> APIClient:
    _, raw = api_token_create(user_id=user.pk, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def alices(owner, inline_runtime) -> dict[str, Any]:
    """Alice's session: a run waiting on a tool call's approval, with its turn and
    an event, and memory of her session and her own."""
    session = SessionFactory(owner=owner, title="Alice's chat")
    run = RunFactory(session=session, status="running")
    call = ToolCallFactory(
        turn__run=run,
        name="memory_forget_all",
        status="scheduled",
        requires_approval=True,
        result=None,
    )
    Run.objects.filter(pk=run.pk).update(
        status="awaiting_input", awaiting={"kind": "approval", "tool_call": str(call.pk)}
    )
    event = RunEvent.objects.create(session=session, run=run, seq=1, type="run.created")
    Session.objects.filter(pk=session.pk).update(last_event_seq=1)
    return {
        "session": session,
        "run": run,
        "call": call,
        "turn": call.turn,
        "event": event,
        "session_memory": memory_store(
            key="colour", value="green", scope="session", session_id=session.pk
        ),
        "user_memory": memory_store(key="name", value="Ada", scope="user", user_id=owner.pk),
    }


@pytest.fixture
def dave(db):
    return staff_user("dave")


@pytest.fixture
def erin(db):
    return staff_user("erin", groups=("Auditors",))


@pytest.fixture
def oscar(db):
    return staff_user("oscar", groups=("Operators",))


def reads(alices) -> dict[str, str]:
    session, run = alices["session"].pk, alices["run"].pk
    return {
        "session": f"{API}/sessions/{session}/",
        "run": f"{API}/runs/{run}/",
        "turn": f"{API}/turns/{alices['turn'].pk}/",
        "tool call": f"{API}/tool-calls/{alices['call'].pk}/",
        "session memory": f"{API}/memory/{alices['session_memory'].pk}/",
        "user memory": f"{API}/memory/{alices['user_memory'].pk}/",
        "revisions": f"{API}/memory/{alices['user_memory'].pk}/revisions/",
        "events": f"{API}/sessions/{session}/events/",
        "runs of the session": f"{API}/sessions/{session}/runs/",
        "export": f"{API}/sessions/{session}/export/",
        "resolve": f"{API}/memory/resolve/?key=name&session={session}",
    }


LISTS = ["sessions", "runs", "turns", "tool-calls"]


def ids(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {str(row["id"]) for row in response.json()["results"]}


def writes(alices) -> list[tuple[str, str, dict[str, Any]]]:
    session, run, call = alices["session"].pk, alices["run"].pk, alices["call"].pk
    entry = alices["session_memory"]
    return [
        ("post", f"{API}/runs/{run}/respond/", {"tool_call": str(call), "decision": "approve"}),
        ("post", f"{API}/runs/{run}/cancel/", {}),
        ("post", f"{API}/sessions/{session}/runs/", {"input": "echo hello"}),
        ("patch", f"{API}/sessions/{session}/", {"title": "mine now"}),
        ("post", f"{API}/sessions/{session}/end/", {}),
        ("delete", f"{API}/sessions/{session}/", {}),
        ("patch", f"{API}/memory/{entry.pk}/", {"value": "red", "version": entry.version}),
        ("delete", f"{API}/memory/{entry.pk}/", {}),
    ]


def send(client: APIClient, method: str, url: str, body: dict[str, Any]):
    return getattr(client, method)(url, body, format="json")


def assert_untouched(alices) -> None:
    run = Run.objects.get(pk=alices["run"].pk)
    session = Session.objects.get(pk=alices["session"].pk)
    entry = MemoryEntry.objects.get(pk=alices["session_memory"].pk)
    call = ToolCall.objects.get(pk=alices["call"].pk)
    assert (run.status, run.cancel_requested_at) == ("awaiting_input", None)
    assert (call.status, call.decision) == ("scheduled", "")
    assert (session.title, session.status) == ("Alice's chat", "active")
    assert (entry.value, entry.version) == ("green", alices["session_memory"].version)
    assert Run.objects.filter(session=session).count() == 1


# The finding: staff with no permission


def test_staff_without_permissions_cannot_find_alices_data(alices, dave):
    client = client_for(dave)
    for what, url in reads(alices).items():
        response = client.get(url)
        assert response.status_code == 404, (what, response.status_code)
        assert b"Ada" not in response.content
        assert b"green" not in response.content
    for name in LISTS:
        assert ids(client.get(f"{API}/{name}/")) == set(), name
    memory = {row["key"] for row in client.get(f"{API}/memory/").json()["results"]}
    assert memory.isdisjoint({"colour", "name"})


def test_staff_without_permissions_cannot_act_on_alices_data(alices, dave):
    client = client_for(dave)
    for method, url, body in writes(alices):
        response = send(client, method, url, body)
        assert response.status_code == 404, (method, url, response.status_code)
    created = client.post(
        f"{API}/memory/",
        {"key": "k", "value": 1, "scope": "session", "session": str(alices["session"].pk)},
        format="json",
    )
    assert created.status_code == 400
    assert created.json()["errors"][0]["attr"] == "session"
    for scope in ({"scope": "global"}, {"scope": "agent", "agent": "assistant"}):
        shared = client.post(f"{API}/memory/", {"key": "k", "value": 1, **scope}, format="json")
        assert shared.status_code == 403
    assert_untouched(alices)


# Auditors read, and act on nothing


def test_an_auditor_reads_everything(alices, erin):
    client = client_for(erin)
    for what, url in reads(alices).items():
        response = client.get(url)
        assert response.status_code == 200, (what, response.status_code)
    assert str(alices["session"].pk) in ids(client.get(f"{API}/sessions/"))
    # Each session in the list names its own owner, not the auditor who reads it.
    owners = {row["id"]: row["owner"] for row in client.get(f"{API}/sessions/").json()["results"]}
    alice = alices["session"].owner
    assert owners[str(alices["session"].pk)] == {"id": alice.pk, "username": alice.username}
    assert str(alices["run"].pk) in ids(client.get(f"{API}/runs/"))
    assert str(alices["call"].pk) in ids(client.get(f"{API}/tool-calls/"))
    detail = client.get(f"{API}/runs/{alices['run'].pk}/").json()
    assert [call["id"] for turn in detail["turns"] for call in turn["tool_calls"]] == [
        str(alices["call"].pk)
    ]
    memory = {row["key"] for row in client.get(f"{API}/memory/").json()["results"]}
    assert {"colour", "name"} <= memory
    # Credentials stay personal, even for an auditor.
    assert client.get(f"{API}/auth/tokens/").json()["results"][0]["name"] == "tests"
    assert len(client.get(f"{API}/auth/tokens/").json()["results"]) == 1


def test_an_auditor_may_change_nothing(alices, erin, owner):
    client = client_for(erin)
    for method, url, body in writes(alices):
        response = send(client, method, url, body)
        assert response.status_code == 403, (method, url, response.status_code)
        assert response.json()["errors"][0]["code"] == "permission_denied"
    session_entry = client.post(
        f"{API}/memory/",
        {"key": "k", "value": 1, "scope": "session", "session": str(alices["session"].pk)},
        format="json",
    )
    assert session_entry.status_code == 403
    user_entry = client.post(
        f"{API}/memory/", {"key": "k", "value": 1, "scope": "user", "user": owner.pk}, format="json"
    )
    assert user_entry.status_code == 400
    assert_untouched(alices)
    assert not MemoryEntry.objects.filter(key="k").exists()


def test_read_permissions_do_not_count_for_an_account_that_is_not_staff(alices):
    frank = client_for(staff_user("frank", groups=("Auditors",), is_staff=False))
    for url in reads(alices).values():
        assert frank.get(url).status_code == 404
    assert ids(frank.get(f"{API}/sessions/")) == set()


def test_reading_a_run_in_full_needs_its_turns_and_tool_calls_too(alices):
    client = client_for(staff_user("gina", perms=("runs_app.view_run",)))
    assert str(alices["run"].pk) in ids(client.get(f"{API}/runs/"))
    response = client.get(f"{API}/runs/{alices['run'].pk}/")
    assert response.status_code == 403
    assert b"memory_forget_all" not in response.content


# Operators cancel, answer and end, and each action names them


def test_an_operator_approves_alices_tool_call_and_is_named(alices, oscar):
    run, call = alices["run"], alices["call"]
    response = client_for(oscar).post(
        f"{API}/runs/{run.pk}/respond/",
        {"tool_call": str(call.pk), "decision": "approve"},
        format="json",
    )

    assert response.status_code == 200, response.content
    call.refresh_from_db()
    assert (call.decision, call.decided_by_id) == ("approved", oscar.pk)
    decided = RunEvent.objects.get(run=run, type="tool_call.decided")
    assert (decided.data["decided_by"], decided.data["decided_by_name"]) == (oscar.pk, "oscar")
    [entry] = log_entries(oscar, run)
    assert entry.action_flag == CHANGE
    assert "Approved" in entry.change_message


def test_an_operator_cancels_alices_run_and_is_named(alices, oscar):
    run = alices["run"]
    response = client_for(oscar).post(
        f"{API}/runs/{run.pk}/cancel/", {"reason": "stuck"}, format="json"
    )

    assert response.status_code == 200, response.content
    run.refresh_from_db()
    assert run.status == "canceled"
    assert run.cancel_reason == f"canceled by oscar (user {oscar.pk}): stuck"
    canceled = RunEvent.objects.get(run=run, type="run.canceled")
    assert canceled.data["reason"] == run.cancel_reason
    [entry] = log_entries(oscar, run)
    assert entry.action_flag == CHANGE
    assert "Canceled" in entry.change_message


def test_an_operator_ends_alices_session_and_it_is_logged(alices, oscar):
    session = alices["session"]
    response = client_for(oscar).post(f"{API}/sessions/{session.pk}/end/")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "ended"
    [entry] = log_entries(oscar, session)
    assert entry.change_message == "Ended the session (through the API)"
    # The session's own log names who ended it.
    ended = RunEvent.objects.get(session=session, type="session.ended")
    assert (ended.data["ended_by"], ended.data["ended_by_name"]) == (oscar.pk, oscar.username)


def test_an_operator_may_not_delete_edit_or_speak_in_alices_chat(alices, oscar):
    client = client_for(oscar)
    refused = [w for w in writes(alices) if "respond" not in w[1] and "cancel" not in w[1]]
    refused = [w for w in refused if not w[1].endswith("/end/")]
    for method, url, body in refused:
        response = send(client, method, url, body)
        assert response.status_code == 403, (method, url, response.status_code)
    assert_untouched(alices)


def test_an_owners_own_actions_are_not_in_the_admin_log(alices, owner):
    client = client_for(owner)
    assert (
        client.post(f"{API}/runs/{alices['run'].pk}/cancel/", {}, format="json").status_code == 200
    )
    alices["run"].refresh_from_db()
    assert alices["run"].cancel_reason == "user_requested"
    assert log_entries(owner, alices["run"]) == []


# Single permissions


def test_delete_session_permission_deletes_and_is_logged_first(alices):
    hank = staff_user("hank", perms=("sessions_app.view_session", "sessions_app.delete_session"))
    session = alices["session"]

    assert client_for(hank).delete(f"{API}/sessions/{session.pk}/").status_code == 204

    assert not Session.objects.filter(pk=session.pk).exists()
    [entry] = log_entries(hank, session)
    assert (entry.action_flag, entry.object_repr) == (DELETION, "Alice's chat")


def test_memory_change_permission_edits_and_the_revision_names_the_editor(alices):
    ivy = staff_user("ivy", perms=("memory_app.view_memoryentry", "memory_app.change_memoryentry"))
    entry = alices["user_memory"]

    response = client_for(ivy).patch(
        f"{API}/memory/{entry.pk}/", {"value": "Ada L.", "version": entry.version}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json()["written_by"]["user"] == ivy.pk
    [logged] = log_entries(ivy, entry)
    assert logged.action_flag == CHANGE
    assert client_for(ivy).delete(f"{API}/memory/{entry.pk}/").status_code == 403


def test_adding_runs_lets_staff_post_in_alices_chat_and_is_logged(alices, inline_runtime):
    jack = staff_user("jack", perms=("sessions_app.view_session", "runs_app.add_run"))
    session = alices["session"]

    response = client_for(jack).post(
        f"{API}/sessions/{session.pk}/runs/", {"input": "echo hi"}, format="json"
    )

    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.created_by_id == jack.pk
    assert [e.change_message for e in log_entries(jack, run)] == ["Started a run (through the API)"]


def test_a_superuser_may_do_all_of_it_and_is_logged(alices, staff):
    client = client_for(staff)
    for url in reads(alices).values():
        assert client.get(url).status_code == 200, url
    session = alices["session"]
    renamed = client.patch(f"{API}/sessions/{session.pk}/", {"title": "Renamed"}, format="json")
    assert renamed.status_code == 200
    assert client.delete(f"{API}/sessions/{session.pk}/").status_code == 204
    assert [e.action_flag for e in log_entries(staff, session)] == [CHANGE, DELETION]
