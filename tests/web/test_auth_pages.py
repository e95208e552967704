"""Signing in and out, and pages that need it."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/", "/sessions/new/", f"/sessions/{uuid.uuid4()}/"])
def test_pages_redirect_to_login_when_signed_out(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={path}"


def test_login_page_has_labelled_fields(client: Client) -> None:
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<label for="id_username">Username</label>' in html
    assert '<label for="id_password">Password</label>' in html
    assert 'autocomplete="current-password"' in html


def test_signing_in_leads_to_the_chat_list(client: Client, owner) -> None:
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": "correct horse battery staple"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_says_so(client: Client, owner) -> None:
    response = client.post("/accounts/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()


def test_logout_is_a_post_form_in_the_header(alice_client: Client) -> None:
    html = alice_client.get("/").content.decode()
    assert '<form method="post" action="/accounts/logout/">' in html
    response = alice_client.post("/accounts/logout/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert alice_client.get("/").status_code == 302


def test_logout_by_get_is_refused(alice_client: Client) -> None:
    assert alice_client.get("/accounts/logout/").status_code == 405
