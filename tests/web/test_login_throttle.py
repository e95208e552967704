"""Password guessing is throttled: after a few failed sign-ins an account, and an
address, is locked out for a while, on the login page, the admin's login and HTTP
Basic alike (the API's lockout is in tests/api/test_basic_auth_throttle.py)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.utils import timezone

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
LIMIT = 3


@pytest.fixture(autouse=True)
def _low_limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT


def _client(address: str = "203.0.113.7") -> Client:
    return Client(REMOTE_ADDR=address)


def _fail(client: Client, path: str, username: str = "alice", times: int = LIMIT) -> None:
    for _ in range(times):
        response = client.post(path, {"username": username, "password": "guess"})
        assert response.status_code in (200, 429), response.status_code


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_after_the_limit_even_the_right_password_is_refused_with_a_message(path, staff):
    client = _client()
    _fail(client, path, "charlie")

    response = client.post(path, {"username": "charlie", "password": PASSWORD})

    assert response.status_code == 429
    html = response.content.decode()
    assert "Too many failed sign-ins" in html
    assert re.search(r'<form[^>]* method="post"', html)
    assert "_auth_user_id" not in client.session


def test_an_account_is_locked_whatever_address_guesses(owner):
    for index in range(LIMIT):
        _fail(_client(f"198.51.100.{index + 1}"), "/accounts/login/", times=1)

    response = _client("192.0.2.99").post(
        "/accounts/login/", {"username": "alice", "password": PASSWORD}
    )

    assert response.status_code == 429


def test_an_address_is_locked_whatever_account_it_guesses(owner, other_user):
    client = _client()
    for index in range(LIMIT):
        _fail(client, "/accounts/login/", f"nobody{index}", times=1)

    response = client.post("/accounts/login/", {"username": "bob", "password": PASSWORD})

    assert response.status_code == 429


def test_others_still_sign_in_while_one_account_and_address_are_locked(owner, other_user):
    _fail(_client(), "/accounts/login/")

    response = _client("192.0.2.50").post(
        "/accounts/login/", {"username": "bob", "password": PASSWORD}
    )

    assert response.status_code == 302


def test_the_lockout_ends_after_the_cool_off(owner):
    from axes.models import AccessAttempt

    _fail(_client(), "/accounts/login/")
    AccessAttempt.objects.update(attempt_time=timezone.now() - dt.timedelta(days=1))

    response = _client().post("/accounts/login/", {"username": "alice", "password": PASSWORD})

    assert response.status_code == 302


@pytest.mark.django_db(transaction=True)
async def test_the_lockout_answers_the_same_through_the_asgi_server(owner):
    from django.test import AsyncClient

    client = AsyncClient(REMOTE_ADDR="203.0.113.8")
    for _ in range(LIMIT):
        await client.post("/accounts/login/", {"username": "alice", "password": "guess"})

    response = await client.post("/accounts/login/", {"username": "alice", "password": PASSWORD})

    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()
