"""The runtime core imports no framework: the turn loop and the in-memory store load
in a process with no Django settings, and leave Django and Celery unloaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import goaai.runtime.inmemory_store, goaai.runtime.loop
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"django", "celery"})
print(json.dumps(loaded))
"""


def test_the_loop_and_the_in_memory_store_load_without_django_or_celery():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


WEB_PROBE = """
import json, sys
import goaai.runtime.agents, goaai.runtime.facade
loaded = sorted(
    {name.split(".")[0] for name in sys.modules} & {"starlette", "uvicorn", "sse_starlette", "mcp"}
)
print(json.dumps(loaded))
"""


def test_the_agents_load_without_a_web_framework_or_the_mcp_sdk():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", WEB_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
