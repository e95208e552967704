"""Real processes for the integration tests: Celery workers on the test database,
and a Redis server of a test's own that it can stop and start again."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The test database, as a URL for a process of its own."""
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    host = f"{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}"
    return f"postgres://{user}{password}@{host}/{s['NAME']}"


def start_worker(env: dict[str, str], log: Path, *options: str) -> subprocess.Popen[bytes]:
    """``celery -A goaai worker`` with ``options`` (``--pool=solo`` by default),
    its output appended to ``log``."""
    return subprocess.Popen(  # noqa: S603 (our own interpreter, fixed arguments)
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "goaai",
            "worker",
            "--loglevel=INFO",
            *(options or ("--pool=solo",)),
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """A warm shutdown, or a kill if it takes too long."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=15)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(timeout=5)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"Timed out waiting for {what}. Log:\n{log.read_text()[-6000:]}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """A ``redis-server`` on a free port that saves nothing: stopped and started
    again, it comes back on the same port and empty, as a Redis without
    persistence does after a restart."""

    def __init__(self, program: str, workdir: Path) -> None:
        self.program = program
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.log = workdir / "redis.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(  # noqa: S603 (fixed arguments, no shell)
            [
                self.program,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_for(self._answers, 10, f"redis-server on port {self.port}", self.log)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)
        self._process = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=1)

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False
