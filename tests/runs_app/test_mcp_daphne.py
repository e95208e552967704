"""``/mcp`` under daphne, the server ``make run`` starts: daphne sends no ASGI
lifespan events, so the MCP transport must start on the first request, and go on
serving every later one. goaai runs in a subprocess on a SQLite file of its own."""

from __future__ import annotations

import asyncio
import json
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
