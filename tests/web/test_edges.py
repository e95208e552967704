"""The pages with input at the edges: NUL characters and page numbers past any list."""

from __future__ import annotations

import pytest

from sessions_app.models import Session

pytestmark = pytest.mark.django_db


def test_a_search_with_nul_answers_the_list(client, owner):
    client.force_login(owner)
    assert client.get("/?q=%00").status_code == 200


def test_a_page_number_past_any_list_is_an_empty_page(client, owner):
    client.force_login(owner)
    response = client.get("/?page=99999999999999999999")
    assert response.status_code == 200


def test_a_title_with_nul_is_stored_without_it(client, owner):
    client.force_login(owner)
    response = client.post("/sessions/new/", {"agent": "assistant", "title": "a\x00b"})
    assert response.status_code == 302
    assert Session.objects.get(owner=owner).title == "ab"
