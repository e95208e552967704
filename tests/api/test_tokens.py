"""/api/v1/auth/tokens/ and the two ways in: API tokens and the browser session."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from sessions_app.models import ApiToken, Session
from sessions_app.services import api_token_create

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/auth/tokens/"
SESSIONS = "/api/v1/sessions/"


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _assert_error(response, status: int, code: str | None = None, attr: str | None = None):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] in {"validation_error", "client_error", "server_error"}
    assert body["errors"], body
    for error in body["errors"]:
        assert set(error) >= {"code", "detail", "attr"}
    if code is not None:
        assert code in {error["code"] for error in body["errors"]}, body
    if attr is not None:
        assert attr in {error["attr"] for error in body["errors"]}, body
    return body


# create


def test_create_shows_the_token_once_and_it_works(api, owner):
    response = api.post(TOKENS, {"name": "ci"}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert {"id", "name", "token", "created_at", "expires_at"} <= set(body)
    assert body["name"] == "ci"
    assert body["expires_at"] is None
    raw = body["token"]
    assert raw.startswith("goa_")
    assert _bearer(raw).get(SESSIONS).status_code == 200

    listed = api.get(TOKENS).json()["results"]
    retrieved = api.get(f"{TOKENS}{body['id']}/").json()
    assert all("token" not in row for row in listed)
    assert "token" not in retrieved
    assert raw not in str(listed) + str(retrieved)


def test_create_stores_only_a_hash_of_the_token(api, owner):
    raw = api.post(TOKENS, {"name": "ci"}, format="json").json()["token"]

    token = ApiToken.objects.get(name="ci")
    stored = [str(value) for value in ApiToken.objects.filter(pk=token.pk).values().get().values()]
    assert all(raw not in value for value in stored)
    assert token.digest != raw
    assert token.user == owner


def test_create_with_an_expiry_in_the_future(api, owner):
    expires = timezone.now() + dt.timedelta(days=30)

    response = api.post(TOKENS, {"name": "temp", "expires_at": expires.isoformat()}, format="json")

    assert response.status_code == 201
    assert ApiToken.objects.get(pk=response.json()["id"]).expires_at == expires


def test_create_with_an_expiry_in_the_past_is_a_400(api, owner):
    expires = timezone.now() - dt.timedelta(minutes=1)

    response = api.post(TOKENS, {"name": "late", "expires_at": expires.isoformat()}, format="json")

    _assert_error(response, 400, attr="expires_at")
    assert not ApiToken.objects.filter(name="late").exists()


def test_create_without_a_name_is_a_400(api, owner):
    _assert_error(api.post(TOKENS, {}, format="json"), 400, attr="name")


def test_create_by_session_login_belongs_to_that_user(staff_api, staff):
    response = staff_api.post(TOKENS, {"name": "ops"}, format="json")

    assert response.status_code == 201
    assert ApiToken.objects.get(pk=response.json()["id"]).user == staff


# list and retrieve


def test_list_shows_only_the_callers_tokens_that_are_not_revoked(api, owner, other_user):
    api_token_create(user_id=owner.pk, name="kept")
    revoked, _ = api_token_create(user_id=owner.pk, name="revoked")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    api_token_create(user_id=other_user.pk, name="bob's")

    response = api.get(TOKENS)

    assert response.status_code == 200
    names = {row["name"] for row in response.json()["results"]}
    assert names == {"tests", "kept"}


def test_staff_list_shows_only_their_own_tokens(staff_api, staff, owner):
    api_token_create(user_id=owner.pk, name="alice's")
    api_token_create(user_id=staff.pk, name="charlie's")

    names = [row["name"] for row in staff_api.get(TOKENS).json()["results"]]

    assert names == ["charlie's"]


def test_retrieve_of_another_users_token_is_a_404(other_api, owner):
    token, _ = api_token_create(user_id=owner.pk, name="alice's")

    response = other_api.get(f"{TOKENS}{token.pk}/")

    _assert_error(response, 404)
    assert b"alice's" not in response.content


def test_retrieve_of_another_users_token_by_staff_is_a_404(staff_api, owner):
    token, _ = api_token_create(user_id=owner.pk, name="alice's")

    _assert_error(staff_api.get(f"{TOKENS}{token.pk}/"), 404)


# revoke


def test_delete_revokes_the_token_and_it_stops_working(api, owner):
    token, raw = api_token_create(user_id=owner.pk, name="doomed")
    client = _bearer(raw)
    assert client.get(SESSIONS).status_code == 200

    response = api.delete(f"{TOKENS}{token.pk}/")

    assert response.status_code == 204
    _assert_error(client.get(SESSIONS), 401)
    assert "doomed" not in {row["name"] for row in api.get(TOKENS).json()["results"]}
    # The row stays, for audit.
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None


def test_a_token_may_revoke_itself(owner):
    token, raw = api_token_create(user_id=owner.pk, name="self")
    client = _bearer(raw)

    assert client.delete(f"{TOKENS}{token.pk}/").status_code == 204
    _assert_error(client.get(SESSIONS), 401)


def test_delete_of_another_users_token_is_a_404_and_it_keeps_working(other_api, owner):
    token, raw = api_token_create(user_id=owner.pk, name="alice's")

    _assert_error(other_api.delete(f"{TOKENS}{token.pk}/"), 404)

    assert ApiToken.objects.get(pk=token.pk).revoked_at is None
    assert _bearer(raw).get(SESSIONS).status_code == 200


def test_staff_cannot_revoke_another_users_token(staff_api, owner):
    token, raw = api_token_create(user_id=owner.pk, name="alice's")

    _assert_error(staff_api.delete(f"{TOKENS}{token.pk}/"), 404)
    assert _bearer(raw).get(SESSIONS).status_code == 200


def test_delete_of_a_revoked_token_is_a_404(api, owner):
    token, _ = api_token_create(user_id=owner.pk, name="gone")
    api.delete(f"{TOKENS}{token.pk}/")

    _assert_error(api.delete(f"{TOKENS}{token.pk}/"), 404)


# credentials that do not work


def test_an_expired_token_is_a_401(owner):
    token, raw = api_token_create(
        user_id=owner.pk, name="short", expires_at=timezone.now() + dt.timedelta(hours=1)
    )
    client = _bearer(raw)
    assert client.get(SESSIONS).status_code == 200

    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))

    _assert_error(client.get(SESSIONS), 401)


def test_the_token_of_an_inactive_user_is_a_401(owner):
    _, raw = api_token_create(user_id=owner.pk, name="tests")
    owner.is_active = False
    owner.save(update_fields=["is_active"])

    _assert_error(_bearer(raw).get(SESSIONS), 401)


@pytest.mark.parametrize(
    "header",
    [
        "Bearer goa_not-a-real-token",
        "Bearer",
        "Bearer two parts",
        "Bearer " + "a" * 5000,
        "Bearer t\u00f6ken",
        "bearer goa_lowercase-scheme-and-unknown",
    ],
    ids=["unknown", "missing-token", "two-parts", "very-long", "non-ascii", "lowercase"],
)
def test_a_bad_bearer_header_is_a_401_in_the_error_shape(owner, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get(SESSIONS)

    body = _assert_error(response, 401)
    assert body["type"] == "client_error"
    assert response.has_header("WWW-Authenticate")


@pytest.mark.parametrize("header", ["Basic YWxpY2U6cHc=", "Token abc", "garbage"])
def test_another_authorization_scheme_does_not_authenticate(owner, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    _assert_error(client.get(SESSIONS), 401)


def test_a_bad_bearer_token_does_not_fall_back_to_the_session_login(staff):
    client = APIClient()
    client.force_login(staff)
    client.credentials(HTTP_AUTHORIZATION="Bearer goa_revoked-or-wrong")

    _assert_error(client.get(SESSIONS), 401)


def test_the_token_of_another_user_acts_as_that_user(other_api, owner, other_user):
    Session.objects.create(owner=owner, agent="assistant", title="alice's")

    response = other_api.post(SESSIONS, {"agent": "assistant"}, format="json")

    assert response.json()["owner"]["id"] == other_user.pk
    assert [row["owner"]["id"] for row in other_api.get(SESSIONS).json()["results"]] == [
        other_user.pk
    ]


def test_token_endpoints_need_authentication(db):
    client = APIClient()

    _assert_error(client.get(TOKENS), 401)
    _assert_error(client.post(TOKENS, {"name": "x"}, format="json"), 401)
    _assert_error(client.delete(f"{TOKENS}{uuid.uuid4()}/"), 401)
    assert not ApiToken.objects.exists()


# the browser session


def test_session_login_reads_without_a_csrf_token(staff):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(staff)

    assert client.get(SESSIONS).status_code == 200


def test_session_login_writes_need_a_csrf_token(owner):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)

    response = client.post(SESSIONS, {"agent": "assistant"}, format="json")

    body = _assert_error(response, 403)
    assert body["type"] == "client_error"
    assert not Session.objects.exists()
    _assert_error(client.post(TOKENS, {"name": "sneaky"}, format="json"), 403)
    assert not ApiToken.objects.filter(name="sneaky").exists()


def test_session_login_writes_with_a_csrf_token_work(owner):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)
    secret = "a" * 32
    client.cookies["csrftoken"] = secret

    response = client.post(SESSIONS, {"agent": "assistant"}, format="json", HTTP_X_CSRFTOKEN=secret)

    assert response.status_code == 201, response.content
    assert Session.objects.get().owner == owner


def test_session_login_deletes_need_a_csrf_token(owner):
    session = Session.objects.create(owner=owner, agent="assistant")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)

    _assert_error(client.delete(f"{SESSIONS}{session.pk}/"), 403)
    assert Session.objects.filter(pk=session.pk).exists()


def test_bearer_token_writes_need_no_csrf_token(owner):
    _, raw = api_token_create(user_id=owner.pk, name="ci")
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    assert client.post(SESSIONS, {"agent": "assistant"}, format="json").status_code == 201
