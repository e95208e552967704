"""An agent for the terminal chat's tests: the scripted model with a tool that takes
its time, so that a run can be stopped while the tool works (the loop sees a stop
only once the tool has returned)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from goaai.runtime.agents import Agent
from goaai.runtime.tools import TOOLSETS, tool


@tool(timeout_seconds=None)
def pause(seconds: float) -> dict[str, Any]:
    """Wait ``seconds`` seconds, then say so."""
    time.sleep(seconds)
    return {"paused": seconds}


TOOLSETS["pausing"] = {"pause": replace(pause, toolset="pausing")}

PAUSER = Agent(
    id="pauser",
    description="Waits when asked to ('call pause {\"seconds\": 3}').",
    model="scripted",
    toolsets=("pausing", "text"),
)
