"""The README's first steps, as a newcomer follows them: ``make run`` on another port
(``PORT`` from the environment) serves there and says so, then the README's own
commands are run as written (its address aside): the user its examples sign in
as is created, a token is made, a session and a run are started and read.

``make run`` runs with its set-up step taken as done (``-o .venv/.installed``: no
package is installed), on a SQLite file of the test's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# A placeholder of the README's examples: an id or a token cut short ("967b525e-…";
# a value that is "…" alone is anything at all).
_PLACEHOLDER = re.compile(r'"(\w+)":"([^"…]+…)"')


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _environment(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # The suite's own settings, database and Redis must not leak in.
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "HOST", "PORT"}
        and not key.startswith("GOAAI_")
        and key not in {"ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "DEBUG", "SECRET_KEY"}
    }
    return {**env, "GOAAI_REAPER_INTERVAL": "0", **extra}


@dataclass
class Served:
    """``make run`` at work: its port, its database and what it printed."""

    port: int
    database: Path
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}/healthz", timeout=2
            ) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("needs make")
    folder = tmp_path_factory.mktemp("make-run")
    database = folder / "goaai.sqlite3"
    port = _free_port()
    process = subprocess.Popen(  # noqa: S603 (make, with fixed arguments)
        [make, "--no-print-directory", "-o", ".venv/.installed", "run"],
        cwd=ROOT,
        env=_environment(DATABASE_URL=f"sqlite:///{database}", PORT=str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    server = Served(port=port, database=database, process=process)
    threading.Thread(target=server.read, daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not server.answers():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"make run did not serve on port {port}:\n{server.output}")
            time.sleep(0.25)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def test_make_run_serves_on_the_port_it_says(served):
    url = f"http://127.0.0.1:{served.port}/"
    assert f"Sign in at {url}admin/ and change it there." in served.output
    assert f"goaai is at {url} (the admin at {url}admin/)" in served.output
    assert f"Listening on TCP address 127.0.0.1:{served.port}" in served.output
    assert ":8000" not in served.output


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def _blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def _commands(block: str) -> list[tuple[str, str]]:
    """A block's commands (continued lines joined), each with the comment lines
    after it (the answer it shows)."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in block.splitlines():
        if pending:
            pending += "\n" + line
        elif line.startswith("#") and found:
            found[-1] = (found[-1][0], found[-1][1] + line.lstrip("# ") + "\n")
            continue
        elif line.strip():
            pending = line
        if pending and not pending.endswith("\\"):
            found.append((pending, ""))
            pending = ""
    return found


class Follower:
    """Runs the README's shell commands in order, as written, with the ids and
    tokens its placeholders stand for taken from the answers before them."""

    def __init__(self, port: int, database: Path) -> None:
        self.env = _environment(DATABASE_URL=f"sqlite:///{database}")
        self.port = port
        self.exports: list[str] = []
        self.values: dict[str, str] = {}

    def _as_run(self, command: str) -> str:
        command = command.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        for placeholder in sorted(self.values, key=len, reverse=True):
            command = command.replace(placeholder, self.values[placeholder])
        assert "…" not in command, f"nothing to put for a placeholder in {command!r}"
        return command

    def run(self, command: str, shown: str) -> Any:
        command = self._as_run(command)
        if command.startswith("export "):
            self.exports.append(command)
            return None
        done = subprocess.run(  # noqa: S603 (the README's own commands)
            ["bash", "-c", "\n".join([*self.exports, command])],  # noqa: S607
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
        answer = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
        assert not (isinstance(answer, dict) and answer.get("errors")), (command, answer)
        for key, placeholder in _PLACEHOLDER.findall(shown):
            assert isinstance(answer, dict), (command, answer)
            assert key in answer, (command, answer)
            self.values.setdefault(placeholder, str(answer[key]))
        return answer


def test_the_readmes_first_api_steps_work_as_written(served):
    rest = _section("The REST API")
    create_user, tokens, session_and_run = _blocks(rest)[:3]
    # The user the examples sign in as is created as "Two commands" says.
    assert create_user in _blocks(_section("Two commands"))
    follower = Follower(served.port, served.database)
    for command, shown in _commands(create_user):
        follower.run(command, shown)

    answers = [follower.run(command, shown) for command, shown in _commands(tokens)]
    token, _, listed, child, revoked = answers
    assert token["name"] == "my script"
    assert token["token"].startswith("goa_")
    assert token["id"] in {t["id"] for t in listed["results"]}
    assert child["parent"] == token["id"]
    assert revoked is None  # 204, no body

    answers = [follower.run(command, shown) for command, shown in _commands(session_and_run)]
    session, run, _ = answers
    assert (session["agent"], session["owner"]["username"]) == ("assistant", "alice")
    assert run["input"] == "remember my favourite colour is green"

    # The run completes as the README shows, read with the README's token.
    request = urllib.request.Request(
        f"http://127.0.0.1:{served.port}/api/v1/runs/{run['id']}/",
        headers={"Authorization": f"Bearer {token['token']}"},
    )
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            current = json.loads(response.read())
        if current["status"] == "completed" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert current["status"] == "completed"
    assert current["output"].startswith("Got it. I'll remember")
