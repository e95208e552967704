"""The agent bench/capacity.py chats with: no tools, a model on the benchmark's
slow provider (the model profile ``local``, which the benchmark configures)."""

from __future__ import annotations

from goaai.runtime.agents import Agent

CAPACITY = Agent(
    id="capacity",
    description="Answers every message after the slow provider's two seconds.",
    model="local:slow",
    system_prompt="Answer briefly.",
    toolsets=(),
)
