"""Real MCP servers for the tests: the registry's mcp-server-time and mcp-server-git
over stdio, and a streamable-HTTP server built here with the SDK's server API,
served by uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from goaai.runtime.config import McpServer

GIT = shutil.which("git") or "/usr/bin/git"
TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
# A server that reads the initialize request and never answers; it ignores SIGTERM
# and the end of its stdin, so only a kill ends it. ``{marker}`` names it.
HANGING = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "sys.stdin.readline(); time.sleep(3600)  # {marker}"
)


def time_server(**settings: Any) -> McpServer:
    return McpServer.from_dict("time", {**TIME, **settings})


def git_repository(path: Path) -> Path:
    """A git repository with one commit and one file changed since."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com"}
    env |= {"GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}

    def git(*args: str) -> None:
        # The test's own fixed commands.
        subprocess.run(  # noqa: S603
            [GIT, *args], cwd=path, env=env, check=True, capture_output=True
        )

    git("init", "-q", "-b", "main")
    (path / "notes.txt").write_text("first\n")
    git("add", "notes.txt")
    git("commit", "-q", "-m", "Add the notes")
    (path / "notes.txt").write_text("first\nsecond\n")
    return path


def children(marker: str) -> list[int]:
    """Live processes of this process's children whose command line has ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and marker in command:
            found.append(int(entry))
    return found


def kill_server(marker: str) -> int:
    """Kill the one server process started with ``marker`` in its command line."""
    (pid,) = children(marker)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while children(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def http_app() -> Any:
    """An MCP server with tools that show what a client sees of it."""
    server = MCPServer("goaai-test")

    @server.tool()
    def whoami(ctx: Context) -> dict[str, str]:
        """The Authorization header the request carried."""
        headers = ctx.headers or {}
        return {"authorization": headers.get("authorization", "")}

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def refuse(reason: str) -> str:
        """Always fails with the reason."""
        raise ToolError(reason)

    @server.tool()
    def shout(text: str) -> str:
        """The text in capitals."""
        return text.upper()

    return server.streamable_http_app()


@contextmanager
def serving_http() -> Iterator[str]:
    """The test MCP server over streamable HTTP; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(http_app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)
