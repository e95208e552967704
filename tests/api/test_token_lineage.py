"""A token made with another token is that token's child: revoking the parent (or
any ancestor) revokes it too, and it never outlives the parent's expiry. Tokens
made with a password (HTTP Basic) or the browser session have no parent."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from sessions_app.models import ApiToken
from sessions_app.services import api_token_create, api_token_revoke

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/auth/tokens/"
SESSIONS = "/api/v1/sessions/"
PASSWORD = "wonderland-42"


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _mint(client: APIClient, name: str, **extra) -> tuple[str, str]:
    response = client.post(TOKENS, {"name": name, **extra}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    return body["id"], body["token"]


def test_revoking_a_token_revokes_the_tokens_it_made(owner):
    parent, parent_raw = api_token_create(user_id=owner.pk, name="leaked")
    child_id, child_raw = _mint(_bearer(parent_raw), "child")
    grandchild_id, grandchild_raw = _mint(_bearer(child_raw), "grandchild")
    assert _bearer(grandchild_raw).get(SESSIONS).status_code == 200

    response = _bearer(parent_raw).delete(f"{TOKENS}{parent.pk}/")

    assert response.status_code == 204
    for raw in (parent_raw, child_raw, grandchild_raw):
        assert _bearer(raw).get(SESSIONS).status_code == 401
    revoked = ApiToken.objects.filter(pk__in=[parent.pk, child_id, grandchild_id])
    assert all(token.revoked_at is not None for token in revoked)


def test_revoking_a_child_leaves_its_parent_and_siblings_working(owner):
    _, parent_raw = api_token_create(user_id=owner.pk, name="parent")
    first_id, first_raw = _mint(_bearer(parent_raw), "first")
    _, second_raw = _mint(_bearer(parent_raw), "second")

    api_token_revoke(token_id=first_id)

    assert _bearer(first_raw).get(SESSIONS).status_code == 401
    assert _bearer(parent_raw).get(SESSIONS).status_code == 200
    assert _bearer(second_raw).get(SESSIONS).status_code == 200


def test_the_api_shows_which_token_made_a_token(owner):
    parent, parent_raw = api_token_create(user_id=owner.pk, name="parent")

    child_id, _ = _mint(_bearer(parent_raw), "child")

    shown = _bearer(parent_raw).get(f"{TOKENS}{child_id}/").json()
    assert shown["parent"] == str(parent.pk)
    assert _bearer(parent_raw).get(f"{TOKENS}{parent.pk}/").json()["parent"] is None


def test_a_child_never_outlives_its_parents_expiry(owner):
    expires = timezone.now() + dt.timedelta(days=1)
    _, parent_raw = api_token_create(user_id=owner.pk, name="parent", expires_at=expires)
    client = _bearer(parent_raw)

    child_id, _ = _mint(client, "no expiry asked")
    sooner = expires - dt.timedelta(hours=1)
    sooner_id, _ = _mint(client, "sooner", expires_at=sooner.isoformat())
    later = client.post(
        TOKENS,
        {"name": "later", "expires_at": (expires + dt.timedelta(days=1)).isoformat()},
        format="json",
    )

    assert ApiToken.objects.get(pk=child_id).expires_at == expires
    assert ApiToken.objects.get(pk=sooner_id).expires_at == sooner
    assert later.status_code == 400, later.content
    assert later.json()["errors"][0]["code"] == "after_parent_expiry"
    assert later.json()["errors"][0]["attr"] == "expires_at"
    assert not ApiToken.objects.filter(name="later").exists()


def test_tokens_made_with_a_password_or_the_session_have_no_parent(owner):
    owner.set_password(PASSWORD)
    owner.save(update_fields=["password"])
    basic = APIClient()
    credentials = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    basic.credentials(HTTP_AUTHORIZATION=f"Basic {credentials}")
    browser = APIClient()
    browser.force_login(owner)

    by_password, _ = _mint(basic, "by password")
    by_session, _ = _mint(browser, "by session")

    assert ApiToken.objects.get(pk=by_password).parent_id is None
    assert ApiToken.objects.get(pk=by_session).parent_id is None


def test_revoking_from_the_admin_revokes_the_children_too(owner, staff):
    parent, parent_raw = api_token_create(user_id=owner.pk, name="parent")
    _, child_raw = _mint(_bearer(parent_raw), "child")
    admin = APIClient()
    admin.force_login(staff)

    response = admin.post(
        "/admin/sessions_app/apitoken/",
        {"action": "revoke", "_selected_action": [str(parent.pk)]},
    )

    assert response.status_code == 302, response.content[:500]
    assert _bearer(child_raw).get(SESSIONS).status_code == 401


def test_no_child_is_made_with_a_token_revoked_meanwhile(owner):
    from sessions_app.services import TokenRevoked

    parent, _ = api_token_create(user_id=owner.pk, name="parent")
    # Authenticated, then revoked before the child is written.
    api_token_revoke(token_id=parent.pk)

    with pytest.raises(TokenRevoked):
        api_token_create(user_id=owner.pk, name="child", parent=parent)
    assert not ApiToken.objects.filter(name="child").exists()
