"""goaai's own ASGI application served by daphne behind the rendered nginx."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.conftest import BIN, Nginx, free_port, nginx_in_front, started


@pytest.fixture(scope="module")
def goaai_front(nginx: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    """goaai with Redis configured at an address where nothing listens."""
    folder = tmp_path_factory.mktemp("goaai")
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "GOAAI_REAPER_INTERVAL": "0",
    }
    command = [str(BIN / "daphne"), "--proxy-headers", "-b", "127.0.0.1", "-p", str(port)]
    with (
        started(
            [*command, "goaai.asgi:application"], port=port, log=folder / "daphne.log", env=env
        ),
        nginx_in_front(nginx, port) as front,
    ):
        yield front


def get(front: Nginx, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{front.port}{path}", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_liveness_needs_no_dependency(goaai_front: Nginx) -> None:
    assert get(goaai_front, "/healthz") == (200, {"status": "ok"})


def test_readiness_names_the_unreachable_redis(goaai_front: Nginx) -> None:
    status, body = get(goaai_front, "/readyz")
    assert status == 503
    assert body == {
        "status": "unavailable",
        "checks": {"database": "ok", "redis": "failed"},
        "failed": ["redis"],
    }


def test_an_oversized_api_body_never_reaches_goaai(goaai_front: Nginx, tmp_path: Path) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{goaai_front.port}/api/v1/auth/tokens/",
        data=b"{" + b" " * (300 * 1024) + b"}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310
    assert refused.value.code == 413
    assert json.loads(refused.value.read())["errors"][0]["code"] == "payload_too_large"
