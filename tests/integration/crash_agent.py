"""An agent for the crash test: three numbered steps, the second of which blocks.

Each execution of a step appends its number to the file named by
``GOAAI_CRASH_DIR``/side_effects, so the test can count how often each step
really ran. Step 2 blocks until the file ``release`` appears, which gives the test
time to kill the worker in the middle of the call.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from goaai.runtime.agents import Agent
from goaai.runtime.models.base import DeltaCallback, ModelRequest
from goaai.runtime.policy import Policy
from goaai.runtime.tools import TOOLSETS, tool
from goaai.runtime.types import ModelReply, ToolCallRequest, Usage


def _dir() -> Path:
    return Path(os.environ["GOAAI_CRASH_DIR"])


@tool(timeout_seconds=None)
def step(n: int) -> dict[str, Any]:
    """Do numbered step ``n`` of the job."""
    with (_dir() / "side_effects").open("a") as record:
        record.write(f"{n}\n")
    if n == 2:
        while not (_dir() / "release").exists():
            time.sleep(0.05)
    return {"step": n, "done": True}


TOOLSETS["crashtest"] = {"step": replace(step, toolset="crashtest")}


class StepsModel:
    """Calls step 1, 2 and 3 one after the other, then reports what happened."""

    name = "steps"

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        results = [m for m in request.messages if m.role == "tool"]
        if len(results) < 3:
            call = ToolCallRequest(
                id=f"step-{len(results) + 1}", name="step", arguments={"n": len(results) + 1}
            )
            return ModelReply(tool_calls=(call,), usage=Usage(10, 5), model=self.name)
        outcomes = [json.loads(m.content) for m in results]
        summary = ", ".join("ok" if o["ok"] else o["error"]["kind"] for o in outcomes)
        return ModelReply(text=f"steps: {summary}", usage=Usage(10, 5), model=self.name)


CRASH_AGENT = Agent(
    id="stepper",
    description="Runs three steps; the crash test kills its worker during the second.",
    model="python:tests.integration.crash_agent.StepsModel",
    toolsets=("crashtest",),
    policy=Policy(time_budget_seconds=120),
)
