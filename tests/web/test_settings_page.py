"""The settings page (/settings/): preferences (time zone, single-key shortcuts) and
API tokens (made with the value shown once, listed, revoked)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from sessions_app.models import ApiToken, UserPreferences
from sessions_app.services import api_token_create, user_preferences_update
from tests.factories import SessionFactory
from tests.web.test_content_security_policy import _check

pytestmark = pytest.mark.django_db

PAGE = "/settings/"
TOKENS = "/settings/tokens/"
TOKEN_VALUE = re.compile(r'data-testid="token-value">(goa_[^<]+)<')


def api_with(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def page_of(response) -> str:
    return response.content.decode()


def test_the_page_shows_the_preferences_and_the_tokens(alice_client, owner):
    api_token_create(user_id=owner.pk, name="nightly report")

    response = alice_client.get(PAGE)

    assert response.status_code == 200
    page = page_of(response)
    assert '<option value="" selected>Your browser&#x27;s time zone</option>' in page
    assert '<option value="Europe/Paris">Europe/Paris</option>' in page
    assert re.search(r'data-testid="shortcuts-enabled" checked', page)
    assert "nightly report" in page
    assert "sessions_app/js/settings.js" in page
    assert response["Cache-Control"] == "no-store"


def test_the_menu_of_every_page_links_to_it(alice_client):
    assert 'href="/settings/"' in page_of(alice_client.get("/"))


def test_signed_out_visitors_are_sent_to_sign_in(client):
    for url in (PAGE,):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    assert client.post(TOKENS, {"name": "x", "expires_in": "7"}).status_code == 302
    assert not ApiToken.objects.exists()


# Preferences


def test_saving_preferences(alice_client, owner):
    response = alice_client.post(PAGE, {"time_zone": "America/Los_Angeles"})

    assert response.status_code == 302
    assert response["Location"] == PAGE
    saved = UserPreferences.objects.get(user=owner)
    # An unticked box is a form's way of saying "off".
    assert (saved.time_zone, saved.shortcuts_enabled) == ("America/Los_Angeles", False)
    page = page_of(alice_client.get(PAGE))
    assert "Your preferences are saved." in page
    assert '<option value="America/Los_Angeles" selected>' in page
    assert not re.search(r'data-testid="shortcuts-enabled" checked', page)


def test_an_unknown_time_zone_is_refused_and_nothing_changes(alice_client, owner):
    user_preferences_update(user_id=owner.pk, time_zone="Europe/Rome")

    response = alice_client.post(PAGE, {"time_zone": "Mars/Olympus", "shortcuts_enabled": "on"})

    assert response.status_code == 400
    assert "Select a valid choice" in page_of(response)
    assert UserPreferences.objects.get(user=owner).time_zone == "Europe/Rome"


def test_shortcuts_off_is_written_on_every_page_the_scripts_read(alice_client, owner):
    session = SessionFactory(owner=owner)
    pages = ("/", f"/sessions/{session.pk}/", PAGE, "/sessions/new/")
    for url in pages:
        assert 'data-shortcuts="off"' not in page_of(alice_client.get(url)), url

    user_preferences_update(user_id=owner.pk, shortcuts_enabled=False)

    for url in pages:
        page = page_of(alice_client.get(url))
        assert '<body class="' in page
        assert re.search(r'<body [^>]*data-shortcuts="off"', page), url
        assert 'data-testid="shortcuts-off-note"' in page


def test_a_page_reads_the_preferences_once(alice_client, owner):
    user_preferences_update(user_id=owner.pk, shortcuts_enabled=False)
    for url in ("/", PAGE):
        with CaptureQueriesContext(connection) as captured:
            assert alice_client.get(url).status_code == 200
        reads = [q for q in captured.captured_queries if "userpreferences" in q["sql"]]
        assert len(reads) == 1, url


# API tokens


def test_a_new_token_is_shown_once_and_works_with_the_api(alice_client, owner):
    response = alice_client.post(TOKENS, {"name": "nightly report", "expires_in": "30"})

    assert response.status_code == 201
    page = page_of(response)
    match = TOKEN_VALUE.search(page)
    assert match, page
    raw = match.group(1)
    token = ApiToken.objects.get(user=owner)
    assert token.name == "nightly report"
    assert raw.startswith(token.prefix)
    # Only its digest is kept: the value is in no other page.
    assert raw not in page_of(alice_client.get(PAGE))
    assert raw not in {token.digest, token.prefix}
    assert response["Cache-Control"] == "no-store"
    # A script holding it is Alice.
    sessions = api_with(raw).get("/api/v1/sessions/")
    assert sessions.status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize(("choice", "days"), [("7", 7), ("365", 365), ("never", None)])
def test_a_token_expires_when_chosen(alice_client, owner, choice, days):
    before = timezone.now()
    alice_client.post(TOKENS, {"name": "script", "expires_in": choice})

    token = ApiToken.objects.get(user=owner)
    if days is None:
        assert token.expires_at is None
    else:
        assert token.expires_at is not None
        wanted = before + dt.timedelta(days=days)
        assert abs((token.expires_at - wanted).total_seconds()) < 60


@pytest.mark.parametrize(
    "form",
    [
        {"name": "", "expires_in": "7"},
        {"name": "   ", "expires_in": "7"},
        {"name": "x" * 101, "expires_in": "7"},
        {"name": "bad\x00name", "expires_in": "7"},
        {"name": "script", "expires_in": "forever"},
        {"name": "script"},
    ],
)
def test_a_bad_token_form_is_a_400_and_makes_nothing(alice_client, form):
    response = alice_client.post(TOKENS, form)

    assert response.status_code == 400
    assert 'role="alert"' in page_of(response)
    assert not ApiToken.objects.exists()


def test_a_revoked_token_is_rejected(alice_client, owner):
    token, raw = api_token_create(user_id=owner.pk, name="old script")
    assert api_with(raw).get("/api/v1/sessions/").status_code == 200

    response = alice_client.post(f"/settings/tokens/{token.pk}/revoke/")

    assert response.status_code == 302
    assert api_with(raw).get("/api/v1/sessions/").status_code == 401
    page = page_of(alice_client.get(PAGE))
    assert "Revoked “old script”" in page
    assert 'data-testid="token-row"' not in page


def test_another_users_token_cannot_be_revoked_here(alice_client, other_user):
    token, raw = api_token_create(user_id=other_user.pk, name="bob's")

    response = alice_client.post(f"/settings/tokens/{token.pk}/revoke/")

    assert response.status_code == 404
    assert api_with(raw).get("/api/v1/sessions/").status_code == 200
    assert "bob&#x27;s" not in page_of(alice_client.get(PAGE))


def test_revoking_takes_a_post(alice_client, owner):
    token, _ = api_token_create(user_id=owner.pk, name="script")
    assert alice_client.get(f"/settings/tokens/{token.pk}/revoke/").status_code == 405
    assert alice_client.get(TOKENS).status_code == 405
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_forms_need_the_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    token, _ = api_token_create(user_id=owner.pk, name="script")

    assert client.post(TOKENS, {"name": "x", "expires_in": "7"}).status_code == 403
    assert client.post(PAGE, {"time_zone": "Asia/Tokyo"}).status_code == 403
    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 403
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 1
    assert not UserPreferences.objects.exists()


def test_expired_tokens_are_marked(alice_client, owner):
    token, _ = api_token_create(user_id=owner.pk, name="stale")
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(days=1))

    assert "badge-expired" in page_of(alice_client.get(PAGE))


def test_the_page_meets_the_content_security_policy(alice_client, owner):
    api_token_create(user_id=owner.pk, name="script")
    _check(alice_client.get(PAGE))
    _check(alice_client.post(TOKENS, {"name": "another", "expires_in": "never"}))
