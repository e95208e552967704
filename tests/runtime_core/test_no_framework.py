"""The runtime core imports no framework: the turn loop and the in-memory store load
in a process with no Django settings, and leave Django and Celery unloaded; the agents
and the facade load without the MCP SDK and the web framework it brings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import {modules}
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & {unwanted!r})
print(json.dumps(loaded))
"""


def _loaded_after_importing(modules: str, unwanted: set[str]) -> list[str]:
    """Which of ``unwanted`` a fresh interpreter with no Django settings has loaded
    once it has imported ``modules``."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", PROBE.format(modules=modules, unwanted=unwanted)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    ("modules", "unwanted"),
    [
        pytest.param(
            "goaai.runtime.inmemory_store, goaai.runtime.loop",
            {"django", "celery"},
            id="the loop and the in-memory store: no Django, no Celery",
        ),
        pytest.param(
            "goaai.runtime.agents, goaai.runtime.facade",
            {"starlette", "uvicorn", "sse_starlette", "mcp"},
            id="the agents and the facade: no web framework, no MCP SDK",
        ),
    ],
)
def test_the_runtime_core_loads_without_a_framework(modules, unwanted):
    assert _loaded_after_importing(modules, unwanted) == []
