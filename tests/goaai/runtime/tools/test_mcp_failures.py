"""MCP servers that fail: one that hangs on initialize is ended (no process or task
outlives the failed start) and not started again on every use for a while, time
limits are bounded, ``${VAR}`` references are read from goaai's environment when it
connects, and the clients' lock survives a fork."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import uuid

import pytest

from goaai.runtime.config import ConfigError, McpServer, parse_mcp_servers
from goaai.runtime.errors import ToolsetUnavailable
from goaai.runtime.tools.client import AnyArguments, client_tool
from goaai.runtime.tools.mcp import McpClients, McpFailure, expand, mcp_tools
from goaai.runtime.vocabulary import ErrorKind
from tests.goaai.runtime.tools.mcp_servers import HANGING, children, serving_http, time_server
from tests.goaai.runtime.tools.test_mcp import context


@pytest.fixture
def clients():
    made = McpClients()
    yield made
    made.shutdown()


def hanging_server(marker: str, **settings: object) -> McpServer:
    return McpServer.from_dict(
        "stuck",
        {
            "command": sys.executable,
            "args": ["-c", HANGING.format(marker=marker)],
            "startup_seconds": 1,
            **settings,
        },
    )


def _gone(marker: str, seconds: float = 15) -> list[int]:
    deadline = time.monotonic() + seconds
    while children(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return children(marker)


def _connection_tasks(clients: McpClients, seconds: float = 5) -> list[str]:
    """The connection tasks still running once ``seconds`` have passed (a task ends a
    moment after its server's process: it still closes the transport)."""
    loop = clients._loop
    if loop is None:
        return []

    async def names() -> list[str]:
        return [
            task.get_name()
            for task in asyncio.all_tasks()
            if task.get_name().startswith("goaai-mcp-") and not task.done()
        ]

    deadline = time.monotonic() + seconds
    running = asyncio.run_coroutine_threadsafe(names(), loop).result(5)
    while running and time.monotonic() < deadline:
        time.sleep(0.1)
        running = asyncio.run_coroutine_threadsafe(names(), loop).result(5)
    return running


def test_a_server_that_hangs_on_initialize_is_killed_and_not_restarted_at_once(clients):
    marker = f"hang-{uuid.uuid4().hex}"
    server = hanging_server(marker)

    started = time.monotonic()
    with pytest.raises(ToolsetUnavailable, match=r"'stuck' did not start within 1s"):
        mcp_tools(server, clients)
    first = time.monotonic() - started
    again = time.monotonic()
    for _ in range(2):
        with pytest.raises(ToolsetUnavailable, match=r"'stuck' did not start within 1s"):
            mcp_tools(server, clients)
    repeated = time.monotonic() - again

    assert first < 5
    # The failure is remembered for a while: no new process per use.
    assert repeated < 0.5
    assert _gone(marker) == []
    assert _connection_tasks(clients) == []


def test_a_remembered_failure_is_tried_again_after_its_backoff(clients, monkeypatch):
    monkeypatch.setattr("goaai.runtime.tools.mcp.FAILURE_BACKOFF_SECONDS", 0.0)
    marker = f"hang-{uuid.uuid4().hex}"
    server = hanging_server(marker)

    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(ToolsetUnavailable):
            mcp_tools(server, clients)
        # Each try starts the server again and waits out its startup time.
        assert time.monotonic() - started >= 0.9

    assert _gone(marker) == []


def test_a_short_wait_leaves_a_slow_start_going_and_it_is_ended_in_time(clients):
    marker = f"hang-{uuid.uuid4().hex}"
    server = hanging_server(marker, startup_seconds=2)

    started = time.monotonic()
    with pytest.raises(McpFailure, match=r"'stuck' is still starting"):
        clients.tools(server, within=0.2)
    waited = time.monotonic() - started

    assert waited < 1
    assert len(children(marker)) == 1
    # Its own startup limit still ends it.
    assert _gone(marker) == []
    assert _connection_tasks(clients) == []


def test_servers_started_together_start_in_parallel(clients):
    markers = [f"hang-{uuid.uuid4().hex}" for _ in range(3)]
    servers = [
        McpServer.from_dict(
            f"stuck{i}",
            {
                "command": sys.executable,
                "args": ["-c", HANGING.format(marker=marker)],
                "startup_seconds": 1,
            },
        )
        for i, marker in enumerate(markers)
    ]

    started = time.monotonic()
    clients.start(servers)
    for server in servers:
        with pytest.raises(ToolsetUnavailable):
            mcp_tools(server, clients)
    took = time.monotonic() - started

    assert took < 2.5
    assert all(_gone(marker) == [] for marker in markers)


@pytest.mark.parametrize("value", [1e300, float("inf"), float("nan"), 3601, 0, -1, True])
@pytest.mark.parametrize("key", ["timeout_seconds", "startup_seconds"])
def test_time_limits_are_bounded(key, value):
    with pytest.raises(ConfigError, match=rf"{key} must be"):
        McpServer.from_dict("time", {"command": "python", key: value})


def test_the_largest_time_limit_is_an_hour():
    server = McpServer.from_dict(
        "time", {"command": "python", "timeout_seconds": 3600, "startup_seconds": 3600}
    )

    assert (server.timeout_seconds, server.startup_seconds) == (3600.0, 3600.0)


def test_header_references_are_read_from_the_environment_when_connecting(clients, monkeypatch):
    monkeypatch.setenv("GOAAI_TEST_MCP_TOKEN", "from-the-environment")
    with serving_http() as url:
        server = McpServer.from_dict(
            "web", {"url": url, "headers": {"Authorization": "Bearer ${GOAAI_TEST_MCP_TOKEN}"}}
        )
        whoami = mcp_tools(server, clients)["whoami"].invoke({}, context())

    assert whoami.result == {"authorization": "Bearer from-the-environment"}
    # The definition keeps the reference, never the value.
    assert server.as_dict()["headers"] == {"Authorization": "Bearer ${GOAAI_TEST_MCP_TOKEN}"}


def test_env_references_are_read_from_the_environment_when_starting(clients, monkeypatch):
    monkeypatch.setenv("GOAAI_TEST_MCP_ZONE", "Europe/Paris")
    server = time_server(env={"TZ": "UTC", "ZONE_SEEN": "${GOAAI_TEST_MCP_ZONE}"}, trusted=True)

    tools = mcp_tools(server, clients)

    assert "get_current_time" in tools


def test_a_reference_to_a_missing_variable_is_unavailable_naming_it(clients, monkeypatch):
    monkeypatch.delenv("GOAAI_TEST_MCP_ABSENT", raising=False)
    server = McpServer.from_dict(
        "web",
        {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "${GOAAI_TEST_MCP_ABSENT}"}},
    )

    with pytest.raises(ToolsetUnavailable, match=r"GOAAI_TEST_MCP_ABSENT is not set"):
        mcp_tools(server, clients)


def test_an_escaped_reference_is_kept_as_written(monkeypatch):
    monkeypatch.setenv("GOAAI_TEST_MCP_TOKEN", "value")

    assert expand("$${GOAAI_TEST_MCP_TOKEN}-${GOAAI_TEST_MCP_TOKEN}") == (
        "${GOAAI_TEST_MCP_TOKEN}-value"
    )


def test_the_lock_is_usable_in_a_child_forked_while_it_was_held(clients):
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with clients._lock:
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(5)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            os._exit(0 if clients._lock.acquire(timeout=2) else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        thread.join(5)

    assert os.waitstatus_to_exitcode(status) == 0


def test_the_wrapper_of_mcp_clients_files_is_unwrapped():
    servers = parse_mcp_servers({"mcpServers": {"time": {"command": "python"}}})

    assert list(servers) == ["time"]


def test_caller_tools_and_mcp_tools_share_one_arguments_model(clients):
    tool = mcp_tools(time_server(), clients)["get_current_time"]

    assert tool.arguments_model is AnyArguments
    assert client_tool({"name": "x"}).arguments_model is AnyArguments
    assert tool.invoke([], context()).error_kind == ErrorKind.INVALID_CALL
