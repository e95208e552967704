"""HTTP Basic on the token endpoint is throttled like the login page: after a few
wrong passwords the account and the address are locked out for a while, with a
429 in the API's error shape (never a 500 or an HTML page)."""

from __future__ import annotations

import base64

import pytest
from rest_framework.test import APIClient

from sessions_app.models import ApiToken

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/auth/tokens/"
PASSWORD = "correct horse battery staple"
LIMIT = 3


@pytest.fixture(autouse=True)
def _low_limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT


def _basic(username: str, password: str, address: str = "203.0.113.7") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    credentials = base64.b64encode(f"{username}:{password}".encode()).decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {credentials}")
    return client


def _create(client: APIClient):
    return client.post(TOKENS, {"name": "script"}, format="json")


def test_wrong_passwords_are_401s_until_the_limit_locks_the_account_with_a_429(owner):
    statuses = [_create(_basic("alice", f"guess{i}")).status_code for i in range(LIMIT)]
    locked = _create(_basic("alice", PASSWORD))

    # The guess that reaches the limit is already answered as locked out.
    assert statuses == [401] * (LIMIT - 1) + [429]
    assert locked.status_code == 429, locked.content
    assert locked["Content-Type"] == "application/json"
    body = locked.json()
    assert body["type"] == "client_error"
    assert [error["code"] for error in body["errors"]] == ["locked_out"]
    assert int(locked["Retry-After"]) > 0
    assert not ApiToken.objects.exists()


def test_fifty_guesses_do_not_all_get_an_answer(owner):
    statuses = {_create(_basic("alice", f"guess{i}")).status_code for i in range(50)}

    assert 429 in statuses


def test_the_account_is_locked_from_every_address(owner):
    for index in range(LIMIT):
        _create(_basic("alice", "guess", address=f"198.51.100.{index + 1}"))

    assert _create(_basic("alice", PASSWORD, address="192.0.2.9")).status_code == 429


def test_the_address_is_locked_for_every_account(owner, other_user):
    for index in range(LIMIT):
        _create(_basic(f"nobody{index}", "guess"))

    assert _create(_basic("bob", PASSWORD)).status_code == 429


def test_the_right_password_before_the_limit_still_works(owner):
    for index in range(LIMIT - 1):
        _create(_basic("alice", f"guess{index}"))

    assert _create(_basic("alice", PASSWORD)).status_code == 201


def test_bearer_tokens_are_not_locked_out_by_password_guesses(api, owner):
    for index in range(LIMIT + 1):
        _create(_basic("alice", f"guess{index}"))

    assert api.get(TOKENS).status_code == 200
