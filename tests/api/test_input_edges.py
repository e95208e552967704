"""Inputs at the edges: NUL characters (PostgreSQL cannot store them), numbers too
large for a column, digits that are not ASCII, and what a refused run start costs."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from memory_app.services import memory_store
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def _error(response, status: int, attr: str | None = None) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] in ("validation_error", "client_error")
    if attr is not None:
        assert attr in {error["attr"] for error in body["errors"]}, body


@pytest.mark.parametrize(
    "metadata", [{"a": "x\u0000y"}, {"a\u0000": "x"}, {"a": ["ok", {"b": "\u0000"}]}]
)
def test_nul_in_session_metadata_is_a_400(api, metadata):
    response = api.post("/api/v1/sessions/", {"agent": "assistant", "metadata": metadata}, "json")
    _error(response, 400, "metadata")


def test_nul_in_run_labels_is_a_400(api, owner):
    session = SessionFactory(owner=owner)
    response = api.post(
        f"/api/v1/sessions/{session.pk}/runs/", {"input": "hi", "labels": {"a": "\u0000"}}, "json"
    )
    _error(response, 400, "labels.a")


def test_nul_in_a_memory_value_is_a_400(api):
    response = api.post(
        "/api/v1/memory/", {"key": "k", "value": {"deep": "\u0000"}, "scope": "user"}, "json"
    )
    _error(response, 400, "value")


def test_nul_in_filters_and_lookups_is_a_400(api, owner):
    session = SessionFactory(owner=owner)
    _error(api.get("/api/v1/sessions/?metadata.a=%00"), 400, "metadata.a")
    _error(api.get("/api/v1/runs/?label=tier:%00"), 400, "label")
    _error(api.get(f"/api/v1/memory/resolve/?key=a%00b&session={session.pk}"), 400, "key")


def test_a_user_id_too_large_for_the_column_is_a_400(api):
    for value in ("1e30", "99999999999999999999", "0", "1.5"):
        _error(api.get(f"/api/v1/memory/?user={value}"), 400, "user")


def test_a_version_in_other_digits_is_a_400(api, owner):
    entry = memory_store(key="tz", value="UTC", scope="user", user_id=owner.pk)
    for version in ("%C2%B2", "abc", "0", "1" * 30):
        _error(api.delete(f"/api/v1/memory/{entry.pk}/?version={version}"), 400, "version")


def test_refused_run_starts_do_not_use_up_the_allowance(api, owner, settings):
    cache.clear()
    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "2/min", "run_create_token": "2/min"}
    session = SessionFactory(owner=owner)
    url = f"/api/v1/sessions/{session.pk}/runs/"
    for _ in range(5):
        _error(api.post(url, {"input": ""}, "json"), 400, "input")
    assert api.post(url, {"input": "echo one"}, "json").status_code == 201
    assert api.post(url, {"input": "echo two"}, "json").status_code == 201
    assert api.post(url, {"input": "echo three"}, "json").status_code == 429
    cache.clear()
