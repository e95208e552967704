"""The chat page of a session: who may open it, and what its script starts from."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid

import pytest
from django.test import Client
from django.utils import timezone

from goaai.runtime.vocabulary import RunStatus
from tests.factories import RunFactory, SessionFactory

pytestmark = pytest.mark.django_db


def _chat_data(response) -> dict:
    match = re.search(
        r'<script id="chat-data" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the page carries its data as JSON"
    return json.loads(match.group(1))


def test_owner_sees_the_chat_with_what_the_script_needs(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner, agent="concierge", title="Plans")
    response = alice_client.get(f"/sessions/{session.pk}/")
    assert response.status_code == 200
    data = _chat_data(response)
    assert data["session"]["id"] == str(session.pk)
    assert data["session"]["agent"] == "concierge"
    assert data["session"]["status"] == "active"
    assert data["session"]["owner"] == {"id": owner.pk, "username": "alice"}
    assert data["user"] == {"id": owner.pk, "username": "alice"}
    assert data["urls"]["websocket"] == f"/ws/sessions/{session.pk}/"
    assert data["urls"]["api"] == "/api/v1/"
    assert data["urls"]["export"] == f"/api/v1/sessions/{session.pk}/export/"
    assert data["open_runs"] == []
    html = response.content.decode()
    assert "<title>Plans · goaai</title>" in html
    assert '<script type="module" src="/static/sessions_app/js/chat.js"></script>' in html


def test_another_users_chat_is_not_found(bob_client: Client, owner) -> None:
    session = SessionFactory(owner=owner)
    assert bob_client.get(f"/sessions/{session.pk}/").status_code == 404


def test_an_unknown_chat_is_not_found(alice_client: Client) -> None:
    assert alice_client.get(f"/sessions/{uuid.uuid4()}/").status_code == 404


def test_staff_may_open_any_chat(staff_client: Client, owner, staff) -> None:
    session = SessionFactory(owner=owner)
    response = staff_client.get(f"/sessions/{session.pk}/")
    assert response.status_code == 200
    data = _chat_data(response)
    assert data["user"]["id"] == staff.pk
    assert data["session"]["owner"]["username"] == "alice"
    assert "alice's chat" in response.content.decode()


def test_runs_in_flight_are_handed_to_the_script(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner)
    RunFactory(session=session, status=RunStatus.COMPLETED)
    waiting = RunFactory(session=session, status=RunStatus.AWAITING_INPUT)
    # A running run whose worker's lease ran out: its worker died (a restart).
    orphan = RunFactory(
        session=session,
        status=RunStatus.RUNNING,
        lease_owner="gone",
        lease_expires_at=timezone.now() - dt.timedelta(minutes=1),
    )
    alive = RunFactory(
        session=session,
        status=RunStatus.RUNNING,
        lease_owner="worker",
        lease_expires_at=timezone.now() + dt.timedelta(minutes=1),
    )
    # Told interrupted (its worker's process ended), not taken up yet.
    told = RunFactory(session=session, status=RunStatus.RUNNING, lease_owner="gone")
    # Released after an answer, for the next worker: nothing was lost.
    released = RunFactory(session=session, status=RunStatus.RUNNING, lease_owner="")
    runs = {
        r["id"]: r for r in _chat_data(alice_client.get(f"/sessions/{session.pk}/"))["open_runs"]
    }
    assert runs == {
        str(waiting.pk): {"id": str(waiting.pk), "status": "awaiting_input", "interrupted": False},
        str(orphan.pk): {"id": str(orphan.pk), "status": "running", "interrupted": True},
        str(alive.pk): {"id": str(alive.pk), "status": "running", "interrupted": False},
        str(told.pk): {"id": str(told.pk), "status": "running", "interrupted": True},
        str(released.pk): {"id": str(released.pk), "status": "running", "interrupted": False},
    }


def test_the_page_can_be_driven_by_tests_and_assistive_technology(
    alice_client: Client, owner
) -> None:
    session = SessionFactory(owner=owner)
    html = alice_client.get(f"/sessions/{session.pk}/").content.decode()
    for testid in (
        "transcript",
        "composer",
        "send-button",
        "stop-button",
        "connection-banner",
        "memory-panel",
        "memory-toggle",
        "announcer",
        "export-link",
        "end-session",
        "delete-session",
    ):
        assert f'data-testid="{testid}"' in html, testid
    assert 'role="log"' in html
    assert 'aria-live="polite"' in html
    assert '<label for="composer" class="sr-only">Message</label>' in html
    assert 'class="skip-link" href="#main"' in html


def test_the_sidebar_lists_only_own_chats_and_marks_this_one(
    alice_client: Client, owner, other_user
) -> None:
    session = SessionFactory(owner=owner, title="This one")
    SessionFactory(owner=owner, title="Another of mine")
    SessionFactory(owner=other_user, title="Not for Alice")
    html = alice_client.get(f"/sessions/{session.pk}/").content.decode()
    assert "Another of mine" in html
    assert "Not for Alice" not in html
    assert f'href="/sessions/{session.pk}/" aria-current="page"' in html


def test_an_ended_chat_says_so(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner, status="ended", ended_at=timezone.now())
    response = alice_client.get(f"/sessions/{session.pk}/")
    assert _chat_data(response)["session"]["status"] == "ended"
    assert 'class="badge badge-ended"' in response.content.decode()


def test_titles_are_escaped(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner, title="<script>alert(1)</script>")
    html = alice_client.get(f"/sessions/{session.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in html
    data = _chat_data(alice_client.get(f"/sessions/{session.pk}/"))
    assert data["session"]["title"] == "<script>alert(1)</script>"


def test_static_files_are_served(alice_client: Client) -> None:
    for name in ("app.css", "js/chat.js", "js/sessions.js"):
        response = alice_client.get(f"/static/sessions_app/{name}")
        assert response.status_code == 200, name


def test_the_not_found_page_renders(bob_client: Client, owner) -> None:
    session = SessionFactory(owner=owner, title="Alice's plans")
    response = bob_client.get(f"/sessions/{session.pk}/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "There is nothing here, or it is not yours to see." in html
    assert "Alice" not in html
