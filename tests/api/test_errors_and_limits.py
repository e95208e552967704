"""What every endpoint shares: authentication, the error shape, body rules, throttling,
unknown paths, and the schema and docs pages."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.core.cache import cache
from django.test.client import FakePayload
from rest_framework.test import APIClient

from runs_app.api import throttles
from runs_app.models import Run
from sessions_app.models import ApiToken, Session
from sessions_app.services import api_token_create
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture(autouse=True)
def _empty_cache():
    """Throttle counters live in the cache: each test starts from zero."""
    cache.clear()
    yield
    cache.clear()


def _assert_error(response, status: int, code: str | None = None, attr: str | None = None):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert body["type"] in {"validation_error", "client_error", "server_error"}, body
    assert body["errors"], body
    for error in body["errors"]:
        assert set(error) >= {"code", "detail", "attr"}, error
        assert error["detail"]
    if code is not None:
        assert code in {error["code"] for error in body["errors"]}, body
    if attr is not None:
        assert attr in {error["attr"] for error in body["errors"]}, body
    return body


# authentication


def _list_paths(session_id: uuid.UUID, entry_id: str) -> list[str]:
    return [
        f"{API}/sessions/",
        f"{API}/sessions/{session_id}/runs/",
        f"{API}/sessions/{session_id}/events/",
        f"{API}/runs/",
        f"{API}/turns/",
        f"{API}/tool-calls/",
        f"{API}/memory/",
        f"{API}/memory/resolve/?key=colour&session={session_id}",
        f"{API}/memory/{entry_id}/revisions/",
        f"{API}/auth/tokens/",
        f"{API}/agents/",
    ]


def _session_with_memory(api, owner) -> tuple[Session, str]:
    session = SessionFactory(owner=owner, title="Alice's secret")
    created = api.post(
        f"{API}/memory/",
        {"key": "colour", "value": "green", "scope": "session", "session": str(session.pk)},
        format="json",
    )
    assert created.status_code == 201, created.content
    return session, created.json()["id"]


def test_every_list_endpoint_needs_authentication(api, owner):
    session, entry_id = _session_with_memory(api, owner)
    anonymous = APIClient()

    for path in _list_paths(session.pk, entry_id):
        response = anonymous.get(path)
        body = _assert_error(response, 401, code="not_authenticated")
        assert body["type"] == "client_error"
        assert b"secret" not in response.content
        assert b"green" not in response.content


def test_every_list_endpoint_answers_an_authenticated_caller(api, owner):
    session, entry_id = _session_with_memory(api, owner)

    for path in _list_paths(session.pk, entry_id):
        assert api.get(path).status_code == 200, path


def test_writes_need_authentication(owner):
    session = SessionFactory(owner=owner)
    anonymous = APIClient()

    _assert_error(anonymous.post(f"{API}/sessions/", {"agent": "assistant"}, format="json"), 401)
    _assert_error(
        anonymous.post(f"{API}/sessions/{session.pk}/runs/", {"input": "hi"}, format="json"), 401
    )
    _assert_error(anonymous.delete(f"{API}/sessions/{session.pk}/"), 401)
    assert Session.objects.count() == 1
    assert not Run.objects.exists()


# request bodies


def test_malformed_json_is_a_400_parse_error(api, owner):
    response = api.post(
        f"{API}/sessions/", data='{"agent": "assistant",', content_type="application/json"
    )

    body = _assert_error(response, 400, code="parse_error")
    assert body["type"] == "client_error"
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    "payload",
    ['["assistant"]', '"assistant"', "3", "null", "true"],
    ids=["array", "string", "number", "null", "boolean"],
)
def test_a_body_that_is_not_an_object_is_a_400(api, owner, payload):
    session = SessionFactory(owner=owner, title="Same")

    for method, path in (
        ("post", f"{API}/sessions/"),
        ("patch", f"{API}/sessions/{session.pk}/"),
        ("post", f"{API}/sessions/{session.pk}/runs/"),
        ("post", f"{API}/memory/"),
        ("post", f"{API}/auth/tokens/"),
    ):
        response = getattr(api, method)(path, data=payload, content_type="application/json")
        _assert_error(response, 400)

    assert Session.objects.count() == 1
    assert Session.objects.get().title == "Same"
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("content_type", "payload"),
    [
        ("application/x-www-form-urlencoded", "agent=assistant"),
        ("text/plain", '{"agent": "assistant"}'),
        (
            "multipart/form-data; boundary=xyz",
            '--xyz\r\nContent-Disposition: form-data; name="agent"\r\n\r\nassistant\r\n--xyz--\r\n',
        ),
        ("application/xml", "<agent>assistant</agent>"),
    ],
    ids=["form", "text", "multipart", "xml"],
)
def test_a_body_that_is_not_json_is_a_415(api, owner, content_type, payload):
    response = api.post(f"{API}/sessions/", data=payload, content_type=content_type)

    _assert_error(response, 415, code="unsupported_media_type")
    assert not Session.objects.exists()


def _oversized_targets(session: Session) -> list[tuple[str, str]]:
    return [
        ("post", f"{API}/sessions/"),
        ("patch", f"{API}/sessions/{session.pk}/"),
        ("post", f"{API}/sessions/{session.pk}/runs/"),
        ("post", f"{API}/memory/"),
        ("post", f"{API}/auth/tokens/"),
    ]


def test_a_body_over_the_limit_is_a_413(api, owner, settings):
    settings.GOAAI_API_MAX_BODY_BYTES = 200
    session = SessionFactory(owner=owner, title="Same")
    body = json.dumps({"agent": "assistant", "title": "x" * 150, "input": "y" * 150})
    assert len(body) > 200

    for method, path in _oversized_targets(session):
        response = getattr(api, method)(path, data=body, content_type="application/json")
        _assert_error(response, 413, code="payload_too_large")

    assert Session.objects.count() == 1
    assert Session.objects.get().title == "Same"
    assert not Run.objects.exists()


def test_a_body_at_the_limit_is_read(api, owner, settings):
    body = json.dumps({"agent": "assistant", "title": "x" * 100})
    settings.GOAAI_API_MAX_BODY_BYTES = len(body)

    response = api.post(f"{API}/sessions/", data=body, content_type="application/json")

    assert response.status_code == 201, response.content


def test_the_body_limit_is_the_configured_one(api, owner, settings):
    body = json.dumps({"agent": "assistant", "title": "x" * 150})
    settings.GOAAI_API_MAX_BODY_BYTES = 100
    _assert_error(api.post(f"{API}/sessions/", data=body, content_type="application/json"), 413)

    settings.GOAAI_API_MAX_BODY_BYTES = 1000
    assert (
        api.post(f"{API}/sessions/", data=body, content_type="application/json").status_code == 201
    )


class _CountingPayload(FakePayload):
    """A request body that remembers how many of its bytes the server read."""

    def __init__(self, content: bytes) -> None:
        super().__init__(content)
        self.bytes_read = 0

    def read(self, size: int = -1, /) -> bytes:
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk


def test_an_oversized_body_is_not_read_past_the_limit(api, owner, settings):
    settings.GOAAI_API_MAX_BODY_BYTES = 200
    body = json.dumps({"agent": "assistant", "title": "x" * 50_000}).encode()
    payload = _CountingPayload(body)

    # An oversized body is refused after at most the limit plus one byte, so a
    # large one never sits in memory whole (the parser's own promise).
    response = api.generic(
        "POST",
        f"{API}/sessions/",
        data=body,
        content_type="application/json",
        **{"wsgi.input": payload},
    )

    _assert_error(response, 413, code="payload_too_large")
    assert payload.bytes_read <= 201
    assert not Session.objects.exists()


def test_a_content_length_over_the_limit_is_a_413_before_reading(api, owner):
    body = json.dumps({"agent": "assistant"}).encode()
    payload = _CountingPayload(body)

    # A client announcing more than the server ever reads is refused up front.
    response = api.generic(
        "POST",
        f"{API}/sessions/",
        data=body,
        content_type="application/json",
        CONTENT_LENGTH=str(10**9),
        **{"wsgi.input": payload},
    )

    _assert_error(response, 413, code="payload_too_large")
    assert payload.bytes_read == 0
    assert not Session.objects.exists()


@pytest.mark.parametrize("content_length", ["16", ""], ids=["too-small", "absent"])
def test_an_oversized_body_with_a_wrong_or_absent_content_length_creates_nothing(
    api, owner, settings, content_length
):
    settings.GOAAI_API_MAX_BODY_BYTES = 200
    body = json.dumps({"agent": "assistant", "title": "x" * 5000})

    # Only as many bytes as Content-Length announces are read (none without it): the
    # rest never reaches the parser, and what was read is not a valid request.
    response = api.generic(
        "POST",
        f"{API}/sessions/",
        data=body,
        content_type="application/json",
        CONTENT_LENGTH=content_length,
    )

    assert response.status_code in {400, 411, 413}, response.content
    _assert_error(response, response.status_code)
    assert not Session.objects.exists()


# unknown paths, ids and query values


@pytest.mark.parametrize(
    "path",
    [
        f"{API}/nothing/",
        f"{API}/sessions/{uuid.uuid4()}/nothing/",
        f"{API}/v2/sessions/",
        "/api/v2/sessions/",
    ],
    ids=["unknown-collection", "unknown-action", "nested-version", "other-version"],
)
def test_an_unknown_path_under_the_api_is_a_404_in_the_error_shape(api, path):
    body = _assert_error(api.get(path), 404)

    assert body["type"] == "client_error"


def test_an_unknown_path_is_a_404_json_for_anonymous_callers_too(db):
    body = _assert_error(APIClient().get(f"{API}/nothing/"), 404)

    assert body["type"] == "client_error"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/sessions/not-a-uuid/"),
        ("patch", "/sessions/not-a-uuid/"),
        ("delete", "/sessions/not-a-uuid/"),
        ("post", "/sessions/not-a-uuid/end/"),
        ("get", "/sessions/not-a-uuid/export/"),
        ("get", "/sessions/not-a-uuid/runs/"),
        ("post", "/sessions/not-a-uuid/runs/"),
        ("get", "/sessions/not-a-uuid/events/"),
        ("get", "/runs/not-a-uuid/"),
        ("post", "/runs/not-a-uuid/cancel/"),
        ("post", "/runs/not-a-uuid/respond/"),
        ("get", "/turns/not-a-uuid/"),
        ("get", "/tool-calls/not-a-uuid/"),
        ("get", "/memory/not-a-uuid/"),
        ("get", "/memory/not-a-uuid/revisions/"),
        ("delete", "/auth/tokens/not-a-uuid/"),
        ("get", "/sessions/12345/"),
    ],
)
def test_an_invalid_id_in_a_path_is_a_404(api, owner, method, path):
    response = getattr(api, method)(f"{API}{path}", data={}, format="json")

    _assert_error(response, 404)


@pytest.mark.parametrize(
    ("path", "params", "attr"),
    [
        ("/sessions/", {"status": "bogus"}, "status"),
        ("/runs/", {"status": "bogus"}, "status"),
        ("/tool-calls/", {"status": "bogus"}, "status"),
        ("/memory/", {"scope": "bogus"}, "scope"),
        ("/runs/", {"session": "not-a-uuid"}, "session"),
        ("/sessions/", {"created_before": "last tuesday"}, "created_before"),
    ],
)
def test_an_unknown_query_value_is_a_400_naming_the_parameter(api, owner, path, params, attr):
    body = _assert_error(api.get(f"{API}{path}", params), 400, attr=attr)

    assert body["type"] == "validation_error"


def test_a_garbled_cursor_is_a_client_error(api, owner):
    SessionFactory(owner=owner)

    response = api.get(f"{API}/sessions/", {"cursor": "garbage!"})

    assert 400 <= response.status_code < 500
    _assert_error(response, response.status_code)


def test_an_unsupported_method_is_a_405_in_the_error_shape(api, owner):
    session = SessionFactory(owner=owner)

    _assert_error(api.put(f"{API}/sessions/{session.pk}/", {}, format="json"), 405)
    _assert_error(api.delete(f"{API}/sessions/"), 405)
    _assert_error(api.post(f"{API}/runs/", {"input": "hi"}, format="json"), 405)


# throttling of run creation


@pytest.fixture
def low_run_rates(settings):
    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "3/min", "run_create_token": "2/min"}


def _start(client, session: Session, text: str = "echo hi"):
    return client.post(f"{API}/sessions/{session.pk}/runs/", {"input": text}, format="json")


def test_a_tokens_run_limit_hits_before_its_users(api, owner, low_run_rates):
    session = SessionFactory(owner=owner)
    _, raw = api_token_create(user_id=owner.pk, name="second")
    second = APIClient()
    second.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    assert [_start(api, session).status_code for _ in range(2)] == [201, 201]
    limited = _start(api, session)
    body = _assert_error(limited, 429, code="throttled")
    assert body["type"] == "client_error"
    assert int(limited["Retry-After"]) > 0

    # The same user's other token still works, until the user's own limit.
    assert _start(second, session).status_code == 201
    _assert_error(_start(second, session), 429, code="throttled")
    assert Run.objects.filter(session=session).count() == 3


def test_the_user_limit_counts_the_browser_session_too(owner, low_run_rates):
    session = SessionFactory(owner=owner)
    browser = APIClient()
    browser.force_login(owner)

    assert [_start(browser, session).status_code for _ in range(3)] == [201, 201, 201]
    _assert_error(_start(browser, session), 429, code="throttled")
    assert Run.objects.filter(session=session).count() == 3


def test_one_users_run_limit_does_not_touch_another_users(
    api, other_api, owner, other_user, low_run_rates
):
    alices = SessionFactory(owner=owner)
    bobs = SessionFactory(owner=other_user)
    for _ in range(2):
        _start(api, alices)
    _assert_error(_start(api, alices), 429)

    assert _start(other_api, bobs).status_code == 201


def test_the_run_limit_leaves_reads_and_other_writes_alone(api, owner, low_run_rates):
    session = SessionFactory(owner=owner)
    for _ in range(2):
        _start(api, session)
    _assert_error(_start(api, session), 429)

    assert api.get(f"{API}/sessions/{session.pk}/runs/").status_code == 200
    assert api.get(f"{API}/runs/").status_code == 200
    assert api.post(f"{API}/sessions/", {"agent": "assistant"}, format="json").status_code == 201


def test_a_runaway_token_does_not_use_up_its_users_run_limit(api, owner, low_run_rates):
    session = SessionFactory(owner=owner)
    _, raw = api_token_create(user_id=owner.pk, name="browser extension")
    other_token = APIClient()
    other_token.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    # An integration keeps retrying long after its own limit refused it ...
    statuses = [_start(api, session).status_code for _ in range(10)]
    assert statuses == [201, 201] + [429] * 8

    # ... which leaves the rest of the user's allowance to their other credentials.
    assert _start(other_token, session).status_code == 201
    assert Run.objects.filter(session=session).count() == 3


def test_run_rates_are_read_when_a_request_is_checked(api, owner, settings):
    session = SessionFactory(owner=owner)
    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "100/min", "run_create_token": "1/min"}
    assert _start(api, session).status_code == 201
    _assert_error(_start(api, session), 429)

    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "100/min", "run_create_token": "5/min"}
    assert _start(api, session).status_code == 201


def test_revoked_token_does_not_reach_the_run_limit(owner, low_run_rates):
    session = SessionFactory(owner=owner)
    token, raw = api_token_create(user_id=owner.pk, name="gone")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=session.created_at)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    for _ in range(4):
        _assert_error(_start(client, session), 401)
    assert not Run.objects.exists()


# the schema and its docs page


def test_the_openapi_schema_is_served(api):
    response = api.get(f"{API}/schema/", {"format": "json"})

    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    assert f"{API}/sessions/" in schema["paths"]
    assert f"{API}/sessions/{{id}}/export/" in schema["paths"]
    assert "bearerAuth" in schema["components"]["securitySchemes"]


def test_the_docs_page_is_served_without_a_cdn(api):
    response = api.get(f"{API}/docs/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "swagger" in html.lower()
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    urls += re.findall(r"""url\(\s*["']?([^"')]+)""", html)
    assert urls, html
    external = [
        url
        for url in urls
        if re.match(r"^(https?:)?//", url) and not re.match(r"^(https?:)?//testserver[/:]", url)
    ]
    assert external == []
    # Its assets are served by this site.
    for url in re.findall(r"""<script[^>]+src\s*=\s*["']([^"']+)["']""", html):
        assert url.startswith("/"), url


class _CountedCache:
    """The cache, with each call the run limits make to it counted."""

    def __init__(self, cache) -> None:
        self.cache = cache
        self.calls: list[str] = []

    def __getattr__(self, name):
        found = getattr(self.cache, name)
        if name in {"get", "set", "get_many", "set_many"}:

            def counted(*args, **kwargs):
                self.calls.append(name)
                return found(*args, **kwargs)

            return counted
        return found


def test_a_start_reads_its_limits_in_one_call_and_counts_itself_in_one(
    api, owner, low_run_rates, monkeypatch, settings
):
    """With Redis, each call to the cache is a round trip: a start reads the user's
    and the token's counters together and writes them together."""
    counted = _CountedCache(throttles.cache)
    monkeypatch.setattr(throttles, "cache", counted)
    session = SessionFactory(owner=owner)

    assert _start(api, session).status_code == 201
    assert counted.calls == ["get_many", "set_many"]
    user_key = f"throttle:run_create_user:{owner.pk}"
    assert len(counted.cache.get(user_key)) == 1

    # Limits over different windows are written with their own expiry each.
    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "3/hour", "run_create_token": "2/min"}
    counted.calls.clear()
    assert _start(api, session).status_code == 201
    assert counted.calls == ["get_many", "set_many", "set_many"]
    assert len(counted.cache.get(user_key)) == 2

    # A refused start reads and writes nothing more.
    assert _start(api, session).status_code == 429
    assert counted.calls[-1] == "get_many"
    assert len(counted.cache.get(user_key)) == 2
