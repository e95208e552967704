"""Agents as tools: one agent asks another, which runs as a linked child run."""

# No ``from __future__ import annotations`` here: the tool's argument annotation is
# built from the agent at run time and must be a real object, not a string.
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from goaai.runtime.tools.base import DelegationPaused, Tool, ToolContext, ToolRejected, tool
from goaai.runtime.vocabulary import RunStatus

if TYPE_CHECKING:
    from goaai.runtime.agents import Agent


def agent_tool(agent: "Agent") -> Tool:
    """The tool ``ask_<agent id>`` that runs ``agent`` on a prompt as a child run."""
    prompt_type = Annotated[
        str, Field(description=f"What to ask the {agent.id} agent.", min_length=1)
    ]

    def ask(prompt: prompt_type, context: ToolContext) -> dict[str, Any]:
        if context.call_agent is None:
            raise ToolRejected("Calling other agents is not available here.")
        child = context.call_agent(agent.id, prompt)
        if child.status == RunStatus.AWAITING_INPUT:
            raise DelegationPaused(child)
        if child.status != RunStatus.COMPLETED:
            detail = child.error.message if child.error else child.status
            raise ToolRejected(f"The {agent.id} agent did not answer: {detail}")
        return {"agent": agent.id, "run": str(child.id), "answer": child.output}

    made = tool(
        name=f"ask_{agent.id}",
        description=f"Ask the {agent.id} agent. {agent.description}",
        timeout_seconds=None,
        # Executed again after its worker died, the call goes on with the child run
        # it started (the loop finds it), and never starts a second one.
        idempotent=True,
    )(ask)
    return replace(made, toolset="agents")
