"""Fixtures of the integration tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.celery_support import RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A running :class:`RedisServer` of the test's own, stopped at its end. Skipped
    without the ``redis-server`` program, except in CI (``CI=true``), where its
    absence fails the test."""
    program = shutil.which("redis-server")
    if program is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed")
        pytest.skip("needs the redis-server program")
    server = RedisServer(program, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
