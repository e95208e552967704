"""/healthz and /readyz: what a load balancer asks each server."""

from __future__ import annotations

import socket

import pytest
from django.db import OperationalError, connections
from django.test import override_settings

from tests.conftest import REDIS_TEST_URL

pytestmark = pytest.mark.django_db


def dead_redis_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def test_liveness_answers_without_touching_anything(client, django_assert_num_queries) -> None:
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-store" in response["Cache-Control"]
    assert not response.cookies


@override_settings(REDIS_URL="")
def test_ready_without_redis_checks_the_database_only(client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": "ok"}}


@pytest.mark.redis
def test_ready_with_redis_checks_both(client) -> None:
    with override_settings(REDIS_URL=REDIS_TEST_URL):
        response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok"}


def test_unreachable_redis_is_named_and_answers_503(client) -> None:
    with override_settings(REDIS_URL=dead_redis_url()):
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "checks": {"database": "ok", "redis": "failed"},
        "failed": ["redis"],
    }
    # Why it failed goes to the log, not to an anonymous caller.
    assert "Connection" not in response.content.decode()


@override_settings(REDIS_URL="")
def test_a_database_that_does_not_answer_is_named(client, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connections["default"], "cursor", refuse)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["database"]


def test_probes_take_no_writes(client) -> None:
    assert client.post("/healthz").status_code == 405
    assert client.post("/readyz").status_code == 405
