"""A live goaai for the browser: daphne (HTTP and WebSockets) in a subprocess, on a
SQLite file database of its own, and a small REST client that talks to it.

The test process never touches this database through Django: it reaches the app
only through the browser, HTTP, and ``manage.py`` subprocesses. Used by the browser
tests' conftest and by ``docs/screenshots.py``.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PASSWORD = "wonderland-42"
USERS = ("alice", "bob")

# A fresh user set-up: migrate, then the personas (passwords hashed for real: the
# login page is exercised as users see it).
_SETUP = f"""
from django.contrib.auth import get_user_model
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
users = get_user_model()
for name in {USERS!r}:
    users.objects.create_user(username=name, password={PASSWORD!r})
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LiveServer:
    """daphne serving ``goaai.asgi`` on ``port``, logging to ``log_path``."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def database(self) -> Path:
        return self.workdir / "goaai-browser.sqlite3"

    @property
    def log_path(self) -> Path:
        return self.workdir / "daphne.log"

    def env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            # The suite's PostgreSQL pass and a developer's Redis must not leak in.
            if key not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "goaai.settings",
                "DATABASE_URL": f"sqlite:///{self.database}",
                "DEBUG": "1",
                "GOAAI_EXECUTOR": "thread",
                "GOAAI_REAPER_INTERVAL": "1",
                "GOAAI_RUN_LEASE_SECONDS": "3",
                # The browser tests start many runs in a few seconds.
                "GOAAI_RUN_RATE_PER_USER": "10000/min",
                "GOAAI_RUN_RATE_PER_TOKEN": "10000/min",
                "LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def manage(self, *args: str, timeout: float = 60) -> str:
        """Runs ``manage.py`` on the server's database; returns its output."""
        done = subprocess.run(  # noqa: S603 (fixed arguments, no shell)
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def shell(self, code: str, *, timeout: float = 60) -> str:
        return self.manage("shell", "-c", code, timeout=timeout)

    def prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.shell(_SETUP, timeout=120)

    def start(self, timeout: float = 30) -> None:
        assert self.process is None, "already running"
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: S603 (fixed arguments, no shell)
            [
                str(BIN / "daphne"),
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "goaai.asgi:application",
            ],
            cwd=ROOT,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daphne exited at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"daphne did not answer within {timeout} s:\n{self.log_tail()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def kill(self) -> None:
        """Ends the server as a crash does (SIGKILL): nothing it was doing is wound
        down, its runs are left as they were recorded. ``start()`` brings it back."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_tail(self, since: int = 0, limit: int = 20000) -> str:
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(max(since, self.log_size() - limit))
            return log.read().decode(errors="replace")


class ApiError(AssertionError):
    pass


@dataclass
class Api:
    """The REST API as one user, with an API token (created with HTTP Basic)."""

    base: str
    token: str

    @classmethod
    def login(cls, server: LiveServer, username: str, password: str = PASSWORD) -> Api:
        basic = base64.b64encode(f"{username}:{password}".encode()).decode()
        created = _request(
            f"{server.url}/api/v1/auth/tokens/",
            "POST",
            {"name": "browser tests"},
            {"Authorization": f"Basic {basic}"},
        )
        return cls(base=f"{server.url}/api/v1/", token=created["token"])

    def call(self, method: str, path: str, body: Any = None) -> Any:
        return _request(self.base + path, method, body, {"Authorization": f"Bearer {self.token}"})

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, {} if body is None else body)

    def new_session(self, title: str = "", agent: str = "assistant") -> str:
        return str(self.post("sessions/", {"agent": agent, "title": title})["id"])

    def start_run(self, session_id: str, text: str, **extra: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.post(f"sessions/{session_id}/runs/", {"input": text, **extra})
        return result

    def wait_run(self, run_id: str, statuses: set[str], timeout: float = 15) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run: dict[str, Any] = self.get(f"runs/{run_id}/")
            if run["status"] in statuses:
                return run
            if time.monotonic() > deadline:
                raise ApiError(f"run {run_id} is {run['status']}, not one of {statuses}")
            time.sleep(0.1)


def _request(url: str, method: str, body: Any, headers: dict[str, str]) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 (http to the test server)
        url,
        data=data,
        method=method,
        headers={"Accept": "application/json", "Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:  # noqa: S310
            raw = answer.read()
    except urllib.error.HTTPError as error:
        raise ApiError(f"{method} {url}: {error.code} {error.read().decode()}") from error
    return json.loads(raw) if raw else None
