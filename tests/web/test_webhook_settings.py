"""The webhooks settings page, reachable from every signed-in page's menu."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_page_offers_the_five_events_and_loads_its_module(client, owner):
    client.force_login(owner)
    response = client.get("/settings/webhooks/")
    assert response.status_code == 200
    page = response.content.decode()
    for event in (
        "run.completed",
        "run.failed",
        "run.awaiting_input",
        "session.ended",
        "memory.changed",
    ):
        assert f'value="{event}"' in page
    assert 'data-testid="webhook-form"' in page
    assert "sessions_app/js/webhooks.js" in page
    assert '"api": "/api/v1/webhooks/"' in page


def test_the_menu_links_to_it(client, owner):
    client.force_login(owner)
    assert 'href="/settings/webhooks/"' in client.get("/").content.decode()


def test_signed_out_visitors_are_sent_to_log_in(client):
    response = client.get("/settings/webhooks/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
