"""Agents using MCP servers' tools, end to end: the scripted model calls a real
mcp-server-time through the turn loop, the ORM store records the call, approval
applies unless the server is trusted, and a killed server fails one call and is
started again for the next."""

from __future__ import annotations

import pytest

from goaai.runtime import rt
from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.config import parse_mcp_servers
from goaai.runtime.tools.mcp import MCP_CLIENTS
from goaai.runtime.vocabulary import ErrorKind, RunStatus, ToolCallStatus
from runs_app.models import Run, ToolCall
from tests.goaai.runtime.tools.mcp_servers import TIME, kill_server

ROME = 'call get_current_time {"timezone": "Europe/Rome"}'


def timekeeper(**servers: dict[str, object]) -> None:
    """The runtime with an agent ``timekeeper`` using the servers declared."""
    agent = Agent(id="timekeeper", description="Tells the time.", toolsets=("mcp:time",))
    rt.configure(agents=AgentRegistry([agent], mcp_servers=parse_mcp_servers(servers)))


@pytest.fixture(autouse=True)
def _servers_ended():
    yield
    MCP_CLIENTS.shutdown()


@pytest.mark.django_db(transaction=True)
def test_an_untrusted_server_asks_approval_then_answers(inline_runtime, owner):
    timekeeper(time=TIME)
    session = rt.create_session(owner=owner, agent="timekeeper")

    waiting = rt.run("timekeeper", ROME, session=session.id)
    call = ToolCall.objects.get(run_id=waiting.id)
    assert waiting.status == RunStatus.AWAITING_INPUT
    assert call.requires_approval
    assert call.status == ToolCallStatus.SCHEDULED

    rt.respond(waiting.id, tool_call=call.id, decision="approve", user=owner)
    done = rt.wait(waiting.id)

    call.refresh_from_db()
    assert done.status == RunStatus.COMPLETED
    assert call.name == "get_current_time"
    assert call.arguments == {"timezone": "Europe/Rome"}
    assert call.status == ToolCallStatus.SUCCEEDED
    assert call.result["timezone"] == "Europe/Rome"
    assert call.duration_ms is not None
    assert call.decided_by_id == owner.pk
    assert "Europe/Rome" in done.output


@pytest.mark.django_db(transaction=True)
def test_a_trusted_server_runs_without_approval(inline_runtime, owner):
    timekeeper(time={**TIME, "trusted": True})
    session = rt.create_session(owner=owner, agent="timekeeper")

    done = rt.run("timekeeper", ROME, session=session.id)

    call = ToolCall.objects.get(run_id=done.id)
    assert done.status == RunStatus.COMPLETED
    assert not call.requires_approval
    assert call.result["timezone"] == "Europe/Rome"


@pytest.mark.django_db(transaction=True)
def test_label_rules_still_require_approval_of_a_trusted_server(inline_runtime, owner):
    timekeeper(time={**TIME, "trusted": True})
    session = rt.create_session(owner=owner, agent="timekeeper")

    run = rt.run("timekeeper", ROME, session=session.id, labels={"review": "required"})

    assert run.status == RunStatus.AWAITING_INPUT
    assert ToolCall.objects.get(run_id=run.id).requires_approval


@pytest.mark.django_db(transaction=True)
def test_a_killed_server_is_a_recorded_failure_and_the_next_call_works(inline_runtime, owner):
    timekeeper(time={**TIME, "trusted": True})
    session = rt.create_session(owner=owner, agent="timekeeper")
    first = rt.run("timekeeper", ROME, session=session.id)
    assert first.status == RunStatus.COMPLETED

    kill_server("mcp_server_time")
    broken = rt.run("timekeeper", ROME, session=session.id)
    again = rt.run("timekeeper", ROME, session=session.id)

    failed = ToolCall.objects.get(run_id=broken.id)
    assert failed.status == ToolCallStatus.FAILED
    assert failed.error_kind == ErrorKind.UNAVAILABLE
    assert failed.error_message == "MCP server 'time' stopped: Connection closed."
    # The model was told, and answered; the run itself did not crash.
    assert broken.status == RunStatus.COMPLETED
    assert ToolCall.objects.get(run_id=again.id).status == ToolCallStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_a_server_that_cannot_start_fails_the_run_unavailable(inline_runtime, owner):
    timekeeper(time={"command": "/nonexistent/mcp-server-time"})
    session = rt.create_session(owner=owner, agent="timekeeper")

    run = rt.run("timekeeper", ROME, session=session.id)

    assert run.status == RunStatus.FAILED
    assert run.error.kind == ErrorKind.UNAVAILABLE
    assert "MCP server 'time' could not be started" in run.error.message
    assert Run.objects.get(pk=run.id).error_kind == ErrorKind.UNAVAILABLE
