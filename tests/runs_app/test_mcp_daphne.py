"""``/mcp`` under daphne, the server ``make run`` starts: daphne sends no ASGI
lifespan events, so the MCP transport must start on the first request, and go on
serving every later one. goaai runs in a subprocess on a SQLite file of its own."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.browser.server import Api, LiveServer


@pytest.fixture(scope="module")
def daphne(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(workdir=Path(tmp_path_factory.mktemp("mcp-daphne")))
    server.prepare()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _session(server: LiveServer, token: str, steps: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def main() -> list[Any]:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            async with Client(transport) as client:  # type: ignore[arg-type]
                return [await client.call_tool(name, arguments) for name, arguments in steps]

    return asyncio.run(main())


def test_memory_and_runs_through_mcp_under_daphne(daphne: LiveServer) -> None:
    token = Api.login(daphne, "alice").token
    stored, read, started = _session(
        daphne,
        token,
        [
            ("memory_store", {"key": "language", "value": "Python", "scope": "user"}),
            ("memory_get", {"key": "language"}),
            ("run_start", {"agent": "assistant", "input": "what is 6*7", "wait_seconds": 20}),
        ],
    )
    assert not stored.is_error, stored.content
    assert read.structured_content["entry"]["value"] == "Python"
    run = started.structured_content["run"]
    assert run["status"] == "completed"
    assert "42" in run["output"]
    # A second client, a second connection: the transport started once keeps serving.
    (again,) = _session(daphne, token, [("memory_get", {"key": "language"})])
    assert again.structured_content["found"] is True
    writer = daphne.shell(
        "from memory_app.models import MemoryEntry;"
        "print(MemoryEntry.objects.get(key='language').written_by_user.username)"
    )
    assert writer.strip().splitlines()[-1] == "alice"


def test_a_request_without_a_token_is_a_401_under_daphne(daphne: LiveServer) -> None:
    request = urllib.request.Request(  # noqa: S310 (http to the test server)
        f"{daphne.url}/mcp",
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310
    assert refused.value.code == 401
    assert refused.value.headers["WWW-Authenticate"] == 'Bearer realm="goaai"'


def test_runs_waited_for_do_not_hold_up_other_calls_under_daphne(daphne: LiveServer) -> None:
    # More run_start calls waiting for their runs than the event loop has threads
    # for blocking work (min(32, cores + 4)): another call still answers at once.
    api = Api.login(daphne, "bob")
    token = api.token
    (first,) = _session(
        daphne,
        token,
        [("run_start", {"agent": "assistant", "input": "ask me my name", "wait_seconds": 20})],
    )
    assert first.structured_content["run"]["status"] == "awaiting_input"
    session = first.structured_content["session"]
    waiters = 12
    answers: list[Any] = []

    def wait_for_a_queued_run() -> None:
        arguments = {"session": session, "input": "echo later", "multitask": "enqueue"}
        answers.extend(_session(daphne, token, [("run_start", {**arguments, "wait_seconds": 8})]))

    threads = [threading.Thread(target=wait_for_a_queued_run) for _ in range(waiters)]
    deadline = time.monotonic() + 20
    for started, thread in enumerate(threads, start=2):
        thread.start()
        # One start at a time (SQLite takes one writer), all of them then waiting.
        while len(api.get(f"sessions/{session}/runs/")["results"]) < started:
            assert time.monotonic() < deadline, "the runs were not started"
            time.sleep(0.05)
    before = time.monotonic()
    (listed,) = _session(daphne, token, [("sessions_list", {})])
    assert time.monotonic() - before < 3.0
    assert [s["id"] for s in listed.structured_content["sessions"]] == [session]
    for thread in threads:
        thread.join(timeout=30)
    # Each waited its full time for a run queued behind the one awaiting an answer.
    assert len(answers) == waiters
    assert {a.structured_content["run"]["status"] for a in answers} == {"pending"}
    assert not any(a.structured_content["finished"] for a in answers)
