"""Every page carries a Content-Security-Policy that allows no inline script or
style, and meets it: no inline <script>, no on* handler, no style attribute; the
inline parts of the API docs page carry the response's nonce."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import reverse

from goaai.runtime import rt
from runs_app.models import Run
from sessions_app.models import Session
from tests.factories import ToolCallFactory

pytestmark = pytest.mark.django_db

HEADER = "Content-Security-Policy"


class _Inline(HTMLParser):
    """What in a page a policy without 'unsafe-inline' would block (or allow only
    with a nonce)."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.nonced: list[str] = []
        self._open_script: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for name, _ in attrs:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...>")
            if name == "style":
                self.problems.append(f"<{tag} style=...>")
        if tag == "script":
            self._open_script = named
        if tag == "style":
            self._inline(tag, named)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._open_script is not None:
            named = self._open_script
            self._open_script = None
            data_block = (named.get("type") or "").endswith("json")
            if "src" not in named and not data_block:
                self._inline(tag, named)

    def _inline(self, tag: str, named: dict[str, str | None]) -> None:
        if named.get("nonce"):
            self.nonced.append(named["nonce"] or "")
        else:
            self.problems.append(f"inline <{tag}>")


def _policy(response) -> dict[str, list[str]]:
    assert HEADER in response, f"no {HEADER} on {response.wsgi_request.path}"
    directives = {}
    for part in response[HEADER].split(";"):
        name, *values = part.split()
        directives[name] = values
    return directives


def _check(response) -> _Inline:
    policy = _policy(response)
    for directive in ("script-src", "style-src"):
        assert "'unsafe-inline'" not in policy[directive]
        assert "'unsafe-eval'" not in policy.get(directive, [])
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    page = _Inline()
    page.feed(response.content.decode())
    assert page.problems == [], (response.wsgi_request.path, page.problems)
    for nonce in page.nonced:
        assert f"'nonce-{nonce}'" in policy["script-src"]
    return page


@pytest.fixture
def chat(owner):
    session = rt.create_session(owner=owner, agent="assistant")
    call = ToolCallFactory(turn__run__session=Session.objects.get(pk=session.id), name="calculator")
    assert call.run.session_id == session.id
    return session


def test_the_pages_people_use_meet_the_policy(owner, chat):
    client = Client()
    assert _check(client.get("/accounts/login/")).nonced == []
    client.force_login(owner)

    for path in ("/", "/sessions/new/", f"/sessions/{chat.id}/", "/accounts/password_change/"):
        response = client.get(path)
        assert response.status_code == 200, path
        _check(response)


def test_the_error_pages_meet_the_policy(owner, client):
    client.force_login(owner)

    response = client.get("/no/such/page/")

    assert response.status_code == 404
    _check(response)


def test_the_server_error_page_meets_the_policy(rf):
    from django.utils.module_loading import import_string

    from goaai.urls import handler500

    response = import_string(handler500)(rf.get("/sessions/"))

    assert response.status_code == 500
    page = _Inline()
    page.feed(response.content.decode())
    assert page.problems == []


def test_the_admin_meets_the_policy(staff, chat):
    client = Client()
    assert _check(client.get("/admin/login/")).nonced == []
    client.force_login(staff)
    run = Run.objects.filter(session_id=chat.id).first()
    pages = [
        "/admin/",
        reverse("admin:runs_app_run_changelist"),
        reverse("admin:runs_app_toolcall_changelist"),
        reverse("admin:memory_app_memoryentry_changelist"),
        reverse("admin:memory_app_memoryentry_add"),
        reverse("admin:runs_app_run_change", args=[run.pk]),
        reverse("admin:runs_app_run_timeline", args=[run.pk]),
        reverse("admin:sessions_app_session_timeline", args=[chat.id]),
    ]

    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        _check(response)


def test_the_api_docs_page_carries_the_nonce_on_its_inline_parts(owner):
    client = Client()
    client.force_login(owner)

    response = client.get("/api/v1/docs/")

    assert response.status_code == 200
    page = _check(response)
    # Its inline style and script, each with this response's nonce.
    assert len(page.nonced) == 2
    assert len(set(page.nonced)) == 1
    assert re.search(r"'nonce-[A-Za-z0-9+/=]+'", response[HEADER])


def test_api_responses_carry_the_policy_too(api_client_for_owner):
    response = api_client_for_owner.get("/api/v1/sessions/")

    assert response.status_code == 200
    assert "default-src 'self'" in response[HEADER]


@pytest.fixture
def api_client_for_owner(owner):
    client = Client()
    client.force_login(owner)
    return client
