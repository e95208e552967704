"""Input crafted to break the API: forged pagination cursors, JSON nested deeper than
anything needs, and escapes of half a UTF-16 pair (which no database stores). Each
is a 4xx in the API's error shape, never a 500, and stores nothing."""

from __future__ import annotations

import base64
import json
from urllib.parse import urlencode

import pytest

from goaai.api.fields import has_nul
from memory_app.models import MemoryEntry
from runs_app.models import Run
from sessions_app.models import Session
from tests.factories import RunFactory, SessionFactory, ToolCallFactory, TurnFactory

pytestmark = pytest.mark.django_db

API = "/api/v1"


def _assert_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] in {"validation_error", "client_error"}, body
    assert body["errors"], body
    assert all(error["detail"] for error in body["errors"]), body
    if code is not None:
        assert code in {error["code"] for error in body["errors"]}, body
    return body


# Forged cursors


def _cursor(query: dict[str, str]) -> str:
    return base64.b64encode(urlencode(query).encode()).decode()


@pytest.fixture
def paged_lists(api, owner) -> list[str]:
    """Every cursor-paged list, each with a row in it."""
    session = SessionFactory(owner=owner)
    run = RunFactory(session=session)
    ToolCallFactory(turn=TurnFactory(run=run))
    created = api.post(
        f"{API}/memory/",
        {"key": "colour", "value": "green", "scope": "session", "session": str(session.pk)},
        format="json",
    )
    assert created.status_code == 201, created.content
    entry = created.json()["id"]
    return [
        f"{API}/sessions/",
        f"{API}/sessions/{session.pk}/runs/",
        f"{API}/runs/",
        f"{API}/turns/",
        f"{API}/tool-calls/",
        f"{API}/memory/",
        f"{API}/memory/{entry}/revisions/",
        f"{API}/auth/tokens/",
    ]


FORGED_POSITIONS = [
    "xxx",
    "\x00",
    "2024-01-01\x0012:00",
    # Moments the database cannot hold once in UTC, or an offset it does not take.
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    # Numbers no column holds.
    "99999999999999999999999",
    "-99999999999999999999999",
    "1.5",
    "1e400",
    "",
]


def test_the_forged_cursor_of_the_finding_is_a_404_on_every_paged_list(api, paged_lists):
    assert _cursor({"p": "xxx"}) == "cD14eHg="

    for path in paged_lists:
        body = _assert_error(api.get(path, {"cursor": "cD14eHg="}), 404, "not_found")
        assert body["errors"][0]["detail"] == "Invalid cursor", path


@pytest.mark.parametrize("position", FORGED_POSITIONS)
def test_a_cursor_with_a_position_no_row_can_have_is_a_404(api, paged_lists, position):
    for reverse in ("0", "1"):
        cursor = _cursor({"p": position, "r": reverse})
        for path in paged_lists:
            _assert_error(api.get(path, {"cursor": cursor}), 404, "not_found")


def test_a_staff_operator_s_forged_cursor_is_a_404_too(staff_api, paged_lists):
    for path in paged_lists[:-1]:
        _assert_error(staff_api.get(path, {"cursor": "cD14eHg="}), 404, "not_found")


def test_positions_a_row_could_have_still_page(api, paged_lists):
    moment = _cursor({"p": "2999-01-01 00:00:00+00:00"})
    for path in paged_lists:
        if path.endswith("/revisions/"):
            continue
        response = api.get(path, {"cursor": moment})
        assert response.status_code == 200, (path, response.content)
    revisions = paged_lists[6]
    response = api.get(revisions, {"cursor": _cursor({"p": "0"})})
    assert response.status_code == 200, response.content
    assert [row["version"] for row in response.json()["results"]] == [1]


def test_real_cursors_still_lead_through_every_page(api, owner):
    for _ in range(5):
        SessionFactory(owner=owner)
    seen = []
    url: str | None = f"{API}/sessions/?page_size=2"
    while url:
        page = api.get(url).json()
        seen += [row["id"] for row in page["results"]]
        url = page["next"]
    assert len(seen) == len(set(seen)) == 5


# JSON nested too deep


def _nested(depth: int, *, inner: str = "1", kind: str = "list") -> str:
    if kind == "list":
        return "[" * depth + inner + "]" * depth
    return '{"a":' * depth + inner + "}" * depth


def _post(api, path: str, body: str):
    return api.generic("POST", path, body, content_type="application/json")


def _patch(api, path: str, body: str):
    return api.generic("PATCH", path, body, content_type="application/json")


def test_the_nested_body_of_the_finding_is_a_400(api):
    body = '{"agent":"assistant","metadata":{"a":' + _nested(325) + "}}"
    assert len(body) < 700

    _assert_error(_post(api, f"{API}/sessions/", body), 400, "parse_error")
    assert not Session.objects.exists()


@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("depth", [65, 325, 1000, 40_000])
def test_deeply_nested_json_is_a_400_on_every_body(api, owner, kind, depth):
    session = SessionFactory(owner=owner)
    entry = MemoryEntry.objects.create(key="k", value=1, scope="user", user=owner)
    deep = _nested(depth, kind=kind)
    attempts = [
        (_post, f"{API}/sessions/", '{"agent":"assistant","metadata":{"a":' + deep + "}}"),
        (_patch, f"{API}/sessions/{session.pk}/", '{"metadata":{"a":' + deep + "}}"),
        (
            _post,
            f"{API}/sessions/{session.pk}/runs/",
            '{"input":"hi","metadata":{"a":' + deep + "}}",
        ),
        (_post, f"{API}/memory/", '{"key":"k2","scope":"user","value":' + deep + "}"),
        (_patch, f"{API}/memory/{entry.pk}/", '{"version":1,"value":' + deep + "}"),
        (_post, f"{API}/sessions/", deep),
    ]

    for send, path, body in attempts:
        _assert_error(send(api, path, body), 400, "parse_error")

    assert Session.objects.get().metadata == {}
    assert not Run.objects.exists()
    assert list(MemoryEntry.objects.values_list("key", "value", "version")) == [("k", 1, 1)]


def test_json_nested_as_deep_as_the_limit_is_read(api):
    metadata = _nested(62)  # the body and metadata objects make 64 levels
    response = _post(
        api, f"{API}/sessions/", '{"agent":"assistant","metadata":{"a":' + metadata + "}}"
    )

    assert response.status_code == 201, response.content
    assert response.json()["metadata"] == {"a": json.loads(metadata)}
    deeper = '{"agent":"assistant","metadata":{"a":' + _nested(63) + "}}"
    _assert_error(_post(api, f"{API}/sessions/", deeper), 400, "parse_error")


# Escapes of half a UTF-16 pair


LONE_SURROGATES = ["\\ud800", "\\udfff", "x\\udbffy", "\\ude00\\ud83d"]


@pytest.mark.parametrize("escape", LONE_SURROGATES)
def test_a_lone_surrogate_in_run_metadata_is_a_400(api, owner, escape):
    session = SessionFactory(owner=owner)
    path = f"{API}/sessions/{session.pk}/runs/"

    for body in (
        '{"input":"hi","metadata":{"note":"' + escape + '"}}',
        '{"input":"hi","metadata":{"' + escape + '":1}}',
        '{"input":"hi","metadata":{"a":[1,{"b":"' + escape + '"}]}}',
    ):
        body_json = _assert_error(_post(api, path, body), 400, "parse_error")
        assert "surrogate" in body_json["errors"][0]["detail"]
        assert "metadata" in body_json["errors"][0]["detail"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("escape", LONE_SURROGATES)
def test_a_lone_surrogate_in_a_memory_value_is_a_400(api, owner, escape):
    entry = MemoryEntry.objects.create(key="k", value="v", scope="user", user=owner)

    created = _post(api, f"{API}/memory/", '{"key":"k2","scope":"user","value":"' + escape + '"}')
    updated = _patch(api, f"{API}/memory/{entry.pk}/", '{"version":1,"value":["' + escape + '"]}')

    _assert_error(created, 400, "parse_error")
    _assert_error(updated, 400, "parse_error")
    assert list(MemoryEntry.objects.values_list("key", "value", "version")) == [("k", "v", 1)]


def test_a_lone_surrogate_in_any_text_field_is_a_400(api, owner):
    session = SessionFactory(owner=owner, title="kept")
    attempts = [
        (_post, f"{API}/sessions/", '{"agent":"assistant","title":"\\ud800"}'),
        (_patch, f"{API}/sessions/{session.pk}/", '{"title":"\\ud800"}'),
        (_post, f"{API}/sessions/{session.pk}/runs/", '{"input":"hi \\ud800"}'),
        (_post, f"{API}/sessions/{session.pk}/runs/", '{"input":"hi","labels":{"a":"\\udc00"}}'),
        (_post, f"{API}/memory/", '{"key":"\\ud800","scope":"user","value":1}'),
        (_post, f"{API}/auth/tokens/", '{"name":"\\ud800"}'),
    ]

    for send, path, body in attempts:
        _assert_error(send(api, path, body), 400, "parse_error")

    assert list(Session.objects.values_list("title", flat=True)) == ["kept"]
    assert not Run.objects.exists()
    assert not MemoryEntry.objects.exists()


def test_a_surrogate_pair_is_one_character_and_is_stored(api, owner):
    response = _post(
        api,
        f"{API}/memory/",
        '{"key":"mood","scope":"user","value":{"face":"\\ud83d\\ude00","\\ud83c\\udf0d":1}}',
    )

    assert response.status_code == 201, response.content
    assert MemoryEntry.objects.get().value == {"face": "\U0001f600", "\U0001f30d": 1}


def test_the_nul_check_walks_a_value_of_any_depth():
    # Serializers are used outside the API too (the console, the runtime): the
    # check itself must not recurse.
    deep: object = "\x00"
    fine: object = "fine"
    for _ in range(20_000):
        deep = [{"a": deep}]
        fine = [{"a": fine}]

    assert has_nul(deep)
    assert not has_nul(fine)


def test_a_deeply_nested_metadata_filter_value_is_matched_as_text(api, owner):
    SessionFactory(owner=owner, metadata={"k": "v"})
    deep = "[" * 5000 + "]" * 5000

    for path in (f"{API}/sessions/", f"{API}/runs/"):
        response = api.get(path, {"metadata.k": deep})
        assert response.status_code == 200, response.content
        assert response.json()["results"] == []
