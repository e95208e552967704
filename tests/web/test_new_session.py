"""Starting a chat with an agent of one's choice."""

from __future__ import annotations

import pytest
from django.test import Client

from goaai.runtime import rt
from sessions_app.models import Session

pytestmark = pytest.mark.django_db


def test_new_chat_page_offers_every_agent_with_its_description(alice_client: Client) -> None:
    html = alice_client.get("/sessions/new/").content.decode()
    for agent in rt.agents.all():
        assert f'value="{agent.id}"' in html
        assert agent.description in html
    assert 'value="assistant" checked' in html


def test_starting_a_chat_creates_the_session_and_opens_it(alice_client: Client, owner) -> None:
    response = alice_client.post("/sessions/new/", {"agent": "concierge", "title": " Trip "})
    session = Session.objects.get(owner=owner)
    assert (session.agent, session.title) == ("concierge", "Trip")
    assert response.status_code == 302
    assert response["Location"] == f"/sessions/{session.pk}/"


def test_an_unknown_agent_is_refused(alice_client: Client) -> None:
    response = alice_client.post("/sessions/new/", {"agent": "nobody"})
    assert response.status_code == 400
    assert "No agent named" in response.content.decode()
    assert not Session.objects.exists()


def test_starting_a_chat_needs_the_csrf_token(owner) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post("/sessions/new/", {"agent": "assistant"}).status_code == 403
    assert not Session.objects.exists()
