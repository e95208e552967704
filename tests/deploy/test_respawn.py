"""deploy/bin/respawn: `make cluster`'s servers and workers come back after they
die, as the systemd units' Restart=always brings them back, and stop with honcho."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESPAWN = ROOT / "deploy" / "bin" / "respawn"


def _wait(predicate, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_command_is_started_again_and_a_stop_stops_both(tmp_path):
    pids = tmp_path / "pids"
    command = f"echo $$ >> {pids}; exec sleep 60"
    loop = subprocess.Popen([str(RESPAWN), "sh", "-c", command])  # noqa: S603
    try:
        assert _wait(lambda: pids.exists() and len(pids.read_text().split()) == 1)
        first = int(pids.read_text().split()[0])
        os.kill(first, signal.SIGKILL)
        assert _wait(lambda: len(pids.read_text().split()) == 2), "not started again"
        second = int(pids.read_text().split()[1])
        assert second != first
        assert _alive(second)

        loop.send_signal(signal.SIGTERM)
        assert loop.wait(10) == 0
        assert _wait(lambda: not _alive(second)), "the command outlived its loop"
    finally:
        if loop.poll() is None:
            loop.kill()
