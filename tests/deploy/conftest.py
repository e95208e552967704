"""Debian's nginx, for real, in front of ASGI servers started by the tests.

nginx runs as a master of its own (deploy/nginx.py --standalone) in a folder of
the test's, on a free loopback port. Without nginx the tests that need it are
skipped with the reason, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def nginx_binary() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


@pytest.fixture(scope="session")
def nginx() -> str:
    found = nginx_binary()
    if found is None:
        reason = "needs Debian's nginx (make nginx, or apt-get install nginx)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and nginx is missing: {reason}")
        pytest.skip(reason)
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}:\n{log.read_text()}")


@contextlib.contextmanager
def started(
    command: list[str], *, port: int, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(  # noqa: S603
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_for_port(port, process, log)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_dir() -> Path:
    # nginx's workers run as "nobody" when the test runs as root: the folder they
    # keep request bodies in must be reachable from /, which pytest's is not.
    path = Path(tempfile.mkdtemp(prefix="goaai-deploy-"))
    path.chmod(0o755)
    return path


@dataclass
class Upstream:
    port: int
    record: Path
    pid: int

    def seen(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def forget(self) -> None:
        self.record.unlink(missing_ok=True)


@dataclass
class Nginx:
    port: int
    prefix: Path
    master: int

    def processes(self) -> list[int]:
        children = Path(f"/proc/{self.master}/task/{self.master}/children").read_text()
        return [self.master, *(int(pid) for pid in children.split())]

    def body_temp_bytes(self) -> int:
        """What nginx holds on disk of request bodies right now."""
        return self.held_bytes("client_body_temp")

    def held_bytes(self, temp: str) -> int:
        """What nginx holds in its temporary folder ``temp`` right now.

        nginx unlinks a temporary file as soon as it has opened it, so the folder
        alone shows nothing: the files its processes hold open count too."""
        total = 0
        folder = str(self.prefix / temp)
        for pid in self.processes():
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    if os.readlink(fd).startswith(folder):
                        total += fd.stat().st_size
        for path in (self.prefix / temp).rglob("*"):
            with contextlib.suppress(FileNotFoundError):
                if path.is_file():
                    total += path.stat().st_size
        return total


def render_nginx(
    prefix: Path, *, port: int, upstreams: list[str], extra: tuple[str, ...] = ()
) -> Path:
    config = prefix / "nginx.conf"
    subprocess.run(  # noqa: S603
        [
            sys.executable,
            str(ROOT / "deploy" / "nginx.py"),
            "--standalone",
            f"--prefix={prefix}",
            f"--listen=127.0.0.1:{port}",
            *[f"--upstream={u}" for u in upstreams],
            f"--access-log={prefix / 'access.log'}",
            f"--output={config}",
            *extra,
        ],
        check=True,
    )
    return config


@contextlib.contextmanager
def nginx_in_front(nginx: str, upstream_port: int) -> Iterator[Nginx]:
    prefix = run_dir()
    port = free_port()
    config = render_nginx(prefix, port=port, upstreams=[f"127.0.0.1:{upstream_port}"])
    try:
        with started(
            [nginx, "-p", str(prefix), "-c", str(config), "-g", "daemon off;"],
            port=port,
            log=prefix / "nginx.log",
        ) as master:
            yield Nginx(port=port, prefix=prefix, master=master.pid)
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


@pytest.fixture(scope="module")
def echo_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    """daphne serving tests/deploy/echo_asgi.py, which records what reaches it."""
    folder = tmp_path_factory.mktemp("echo")
    port = free_port()
    record = folder / "record.jsonl"
    env = {**os.environ, "GOAAI_ECHO_RECORD": str(record)}
    command = [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port)]
    with started(
        [*command, "--proxy-headers", "tests.deploy.echo_asgi:app"],
        port=port,
        log=folder / "daphne.log",
        env=env,
    ) as daphne:
        yield Upstream(port=port, record=record, pid=daphne.pid)


@pytest.fixture(scope="module")
def front(nginx: str, echo_upstream: Upstream) -> Iterator[Nginx]:
    """nginx, with goaai's configuration, in front of the recording upstream."""
    with nginx_in_front(nginx, echo_upstream.port) as server:
        yield server
