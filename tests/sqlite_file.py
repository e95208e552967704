"""Running a script against the embedded default's database, a SQLite file.

The suite's own SQLite database is in memory, shared between threads through one
cache, which concurrent writers cannot use as a file can: tests of concurrent
writers run a script of their own in a child process, on a fresh file, and read the
``REPORT <json>`` line it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_on_a_sqlite_file(script: str, folder: Path, **settings: str) -> tuple[Any, str]:
    """Run ``script`` with goaai's settings on a new SQLite file in ``folder`` (and
    ``settings`` as environment variables); return what its REPORT line says and
    what it wrote to stderr. Fails if it failed."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "DATABASE_URL": f"sqlite:///{folder / 'goaai.sqlite3'}",
        "GOAAI_REAPER_INTERVAL": "0",
        **settings,
    }
    env.pop("REDIS_URL", None)
    done = subprocess.run(  # noqa: S603 (our own interpreter and script)
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT ")), done.stderr
