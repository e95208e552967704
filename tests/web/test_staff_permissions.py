"""Another user's chat page opens only for staff allowed to read the session and
its event log (the page rebuilds the conversation from the log)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import SessionFactory
from tests.permissions import staff_user

pytestmark = pytest.mark.django_db


def page_for(user, session) -> int:
    client = Client()
    client.force_login(user)
    return client.get(f"/sessions/{session.pk}/").status_code


def test_staff_without_permissions_do_not_find_alices_chat(owner) -> None:
    assert page_for(staff_user("dave"), SessionFactory(owner=owner)) == 404


def test_reading_the_session_without_its_events_is_not_enough(owner) -> None:
    gina = staff_user("gina", perms=("sessions_app.view_session",))
    assert page_for(gina, SessionFactory(owner=owner)) == 404


def test_an_auditor_opens_alices_chat(owner) -> None:
    assert page_for(staff_user("erin", groups=("Auditors",)), SessionFactory(owner=owner)) == 200


def test_the_list_shows_only_ones_own_chats_even_to_an_auditor(owner) -> None:
    SessionFactory(owner=owner, title="Alice's plans")
    client = Client()
    client.force_login(staff_user("erin", groups=("Auditors",)))
    assert "Alice's plans" not in client.get("/").content.decode()


def _chat(user, session):
    client = Client()
    client.force_login(user)
    response = client.get(f"/sessions/{session.pk}/")
    assert response.status_code == 200
    return response


def test_an_auditor_reads_alices_chat_without_the_controls_to_act_in_it(owner) -> None:
    response = _chat(staff_user("erin", groups=("Auditors",)), SessionFactory(owner=owner))
    page = response.content.decode()

    assert response.context["chat_data"]["may"] == dict.fromkeys(
        ("post", "respond", "cancel", "rename", "end", "delete", "memory", "forget"), False
    )
    assert 'data-testid="read-only-note"' in page
    assert 'data-testid="composer-form" novalidate hidden' in page
    assert 'data-testid="delete-session"' not in page


def test_an_operator_may_respond_and_end_but_not_write_or_delete(owner) -> None:
    response = _chat(staff_user("oscar", groups=("Operators",)), SessionFactory(owner=owner))
    may = response.context["chat_data"]["may"]
    assert (may["respond"], may["cancel"], may["end"]) == (True, True, True)
    assert (may["post"], may["delete"], may["memory"]) == (False, False, False)


def test_the_owner_may_do_everything_in_her_chat(owner) -> None:
    response = _chat(owner, SessionFactory(owner=owner))
    assert all(response.context["chat_data"]["may"].values())
    assert 'data-testid="read-only-note"' not in response.content.decode()
