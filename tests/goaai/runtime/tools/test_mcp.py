"""MCP tools against real servers: mcp-server-time and mcp-server-git over stdio,
and a streamable-HTTP server built with the SDK."""

from __future__ import annotations

import sys
import uuid

import pytest

from goaai.runtime.config import McpServer
from goaai.runtime.errors import ToolsetUnavailable
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.tools.base import ToolContext
from goaai.runtime.tools.mcp import McpClients, mcp_tools
from goaai.runtime.vocabulary import ErrorKind
from tests.goaai.runtime.tools.mcp_servers import (
    children,
    git_repository,
    kill_server,
    serving_http,
    time_server,
)


@pytest.fixture
def clients():
    """Connections of the test's own, closed (their servers ended) after it."""
    made = McpClients()
    yield made
    made.shutdown()


def context() -> ToolContext:
    return ToolContext(
        store=InMemoryRunStore(),
        run_id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        owner_id=1,
        agent="a",
        tool_call_id=uuid.uuid4(),
    )


def test_time_server_lists_its_tools_with_their_schemas(clients):
    tools = mcp_tools(time_server(), clients)

    assert set(tools) == {"get_current_time", "convert_time"}
    current = tools["get_current_time"]
    assert current.toolset == "mcp:time"
    assert current.json_schema()["required"] == ["timezone"]
    assert "timezone" in current.json_schema()["properties"]
    assert current.requires_approval  # untrusted by default
    trusted = mcp_tools(time_server(trusted=True), clients)["get_current_time"]
    assert trusted.requires_approval is False


def test_a_call_returns_the_structured_result(clients):
    tool = mcp_tools(time_server(), clients)["get_current_time"]

    outcome = tool.invoke({"timezone": "Europe/Rome"}, context())

    assert outcome.ok, outcome
    assert outcome.result["timezone"] == "Europe/Rome"
    assert outcome.result["datetime"][-6:] in ("+01:00", "+02:00")


def test_a_refusal_of_the_server_is_a_domain_rejection_with_its_text(clients):
    tool = mcp_tools(time_server(), clients)["get_current_time"]

    bad_zone = tool.invoke({"timezone": "Nowhere/Atlantis"}, context())
    missing = tool.invoke({}, context())
    not_an_object = tool.invoke(["Europe/Rome"], context())

    assert bad_zone.error_kind == ErrorKind.DOMAIN_REJECTION
    assert "Nowhere/Atlantis" in bad_zone.error_message
    assert missing.error_kind == ErrorKind.DOMAIN_REJECTION
    assert "timezone" in missing.error_message
    assert not_an_object.error_kind == ErrorKind.INVALID_CALL


def test_a_killed_server_fails_the_call_unavailable_and_starts_again(clients):
    tool = mcp_tools(time_server(), clients)["get_current_time"]
    assert tool.invoke({"timezone": "UTC"}, context()).ok
    first = kill_server("mcp_server_time")

    broken = tool.invoke({"timezone": "UTC"}, context())
    again = tool.invoke({"timezone": "UTC"}, context())

    assert broken.error_kind == ErrorKind.UNAVAILABLE
    assert broken.error_message == "MCP server 'time' stopped: Connection closed."
    assert again.ok, again
    assert children("mcp_server_time") not in ([], [first])


def test_shutdown_ends_the_servers_it_started():
    clients = McpClients()
    mcp_tools(time_server(), clients)
    assert len(children("mcp_server_time")) == 1

    clients.shutdown()

    assert children("mcp_server_time") == []


def test_a_server_that_cannot_start_is_unavailable_with_its_name(clients):
    missing = McpServer.from_dict("ghost", {"command": "/nonexistent/mcp-server"})
    crashing = McpServer.from_dict("crash", {"command": sys.executable, "args": ["-c", "exit(3)"]})

    with pytest.raises(ToolsetUnavailable, match=r"MCP server 'ghost' could not be started"):
        mcp_tools(missing, clients)
    with pytest.raises(ToolsetUnavailable, match=r"MCP server 'crash' could not be started"):
        mcp_tools(crashing, clients)


def test_an_allow_list_leaves_the_other_tools_out(clients):
    tools = mcp_tools(time_server(tools=["convert_time"]), clients)

    assert list(tools) == ["convert_time"]


def test_git_server_on_a_repository(clients, tmp_path):
    repository = git_repository(tmp_path)
    server = McpServer.from_dict(
        "git",
        {
            "command": sys.executable,
            "args": ["-m", "mcp_server_git", "--repository", str(repository)],
        },
    )
    tools = mcp_tools(server, clients)

    status = tools["git_status"].invoke({"repo_path": str(repository)}, context())
    log = tools["git_log"].invoke({"repo_path": str(repository)}, context())

    assert {"git_status", "git_log", "git_diff_unstaged"} <= set(tools)
    assert status.ok, status
    assert "notes.txt" in str(status.result)
    assert log.ok, log
    assert "Add the notes" in str(log.result)


def test_streamable_http_server_with_headers_results_and_timeouts(clients):
    with serving_http() as url:
        server = McpServer.from_dict(
            "web",
            {"url": url, "headers": {"Authorization": "Bearer s3cret"}, "timeout_seconds": 1},
        )
        tools = mcp_tools(server, clients)

        whoami = tools["whoami"].invoke({}, context())
        shout = tools["shout"].invoke({"text": "hello"}, context())
        refused = tools["refuse"].invoke({"reason": "not today"}, context())
        slow = tools["slow"].invoke({"seconds": 5}, context())
        after = tools["shout"].invoke({"text": "still here"}, context())

    assert whoami.result == {"authorization": "Bearer s3cret"}
    # The SDK's server gives a function's return value as structured content.
    assert shout.result == {"result": "HELLO"}
    assert refused.error_kind == ErrorKind.DOMAIN_REJECTION
    assert "not today" in refused.error_message
    assert slow.error_kind == ErrorKind.TIMEOUT
    assert slow.error_message == "slow on MCP server 'web' did not answer within 1s."
    # A call that timed out leaves the connection usable.
    assert after.result == {"result": "STILL HERE"}


def test_an_http_server_that_is_not_there_is_unavailable(clients):
    server = McpServer.from_dict("gone", {"url": "http://127.0.0.1:9/mcp", "startup_seconds": 5})

    with pytest.raises(ToolsetUnavailable, match=r"MCP server 'gone' could not be started"):
        mcp_tools(server, clients)
