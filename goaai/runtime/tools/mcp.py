"""Tools of MCP servers, called with the official MCP SDK.

An agent names an MCP server in its toolsets as ``mcp:<name>``; the server is
declared in the runtime's config (``GOAAI_MCP_SERVERS``) or on the agent itself
(see :class:`~goaai.runtime.config.McpServer`). Each process keeps one live client
session per server, on an asyncio event loop in a thread of its own
(:class:`McpClients`): the loop's worker threads hand it their calls and wait for
the answer within the server's time limit. A server is started (or connected to)
on first use and its tool listing is kept for as long as the connection lives. A
connection that breaks (the process exited, the HTTP server went away) fails the
call it broke with ``unavailable``, and the next use starts the server again.

Arguments are checked by the server against the schema it published (the model
sees that schema as it is): a server that refuses them answers with an error the
model reads and can correct.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import logging
import os
import threading
from collections.abc import Coroutine, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2
import mcp_types
import pydantic
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT

from goaai.runtime.config import McpServer
from goaai.runtime.errors import ToolsetUnavailable
from goaai.runtime.tools.base import Tool, ToolContext
from goaai.runtime.types import ToolOutcome
from goaai.runtime.vocabulary import ErrorKind

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# The toolset an agent names an MCP server by: "mcp:<server name>".
MCP_TOOLSET_PREFIX = "mcp:"
# How many pages of a server's tool listing are read at most.
_MAX_LIST_PAGES = 50
# Extra time the waiting thread allows past the server's own limits, so that the
# limit the event loop enforces is the one that answers.
_GRACE_SECONDS = 2.0
# How long closing every connection may take when the process exits.
_SHUTDOWN_SECONDS = 10.0


def is_mcp_toolset(name: str) -> bool:
    return name.startswith(MCP_TOOLSET_PREFIX)


def server_name(toolset: str) -> str:
    """The server a toolset ``mcp:<name>`` names."""
    return toolset[len(MCP_TOOLSET_PREFIX) :]


class McpFailure(Exception):
    """A call to an MCP server that did not give a result: ``kind`` is the error
    kind the tool call is recorded with."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _describe(exc: BaseException) -> str:
    """The innermost meaningful message of ``exc`` (task groups wrap the error
    that stopped them)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Connection:
    """One live client session with one server, held open by a task of the event
    loop from the moment it starts until it is closed or breaks."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.client: Client | None = None
        self.tools: tuple[mcp_types.Tool, ...] = ()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.broken = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._hold(), name=f"goaai-mcp-{self.server.name}"
        )

    def close(self) -> None:
        """Stop using the connection; its task shuts the transport down (and, for a
        server goaai started, the server's process tree)."""
        self.broken = True
        self.stop.set()

    async def _hold(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(
                    Client(await self._target(stack), cache=None)
                )
                self.tools = await _list_tools(client)
                self.client = client
                self.ready.set_result(None)
                await self.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            else:
                logger.info("MCP server %r: connection ended: %s", self.server.name, _describe(exc))
        finally:
            self.broken = True
            self.client = None
            if not self.ready.done():
                self.ready.cancel()

    async def _target(self, stack: AsyncExitStack) -> Any:
        server = self.server
        if server.url:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(server.headers),
                    timeout=httpx2.Timeout(server.startup_seconds, read=300.0),
                )
            )
            return streamable_http_client(server.url, http_client=http)
        return StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=dict(server.env) or None,
            cwd=server.cwd,
        )


async def _list_tools(client: Client) -> tuple[mcp_types.Tool, ...]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(tools)


class McpClients:
    """The MCP connections of this process, one per server, on an event loop of
    their own. Thread-safe: any thread may list a server's tools or call one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        # Touched only by the event loop's thread.
        self._connections: dict[McpServer, _Connection] = {}

    def tools(self, server: McpServer) -> tuple[mcp_types.Tool, ...]:
        """The tools ``server`` offers (its listing, read when it started);
        :class:`McpFailure` when it cannot be started or reached in time."""
        return self._wait(self._tools(server), server.startup_seconds)

    def call(self, server: McpServer, name: str, arguments: dict[str, Any]) -> Any:
        """Call the tool ``name`` of ``server`` and return its ``CallToolResult``;
        :class:`McpFailure` saying why there is none."""
        return self._wait(
            self._call(server, name, arguments), server.startup_seconds + server.timeout_seconds
        )

    def shutdown(self) -> None:
        """Close every connection (ending the servers goaai started) and the loop."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None or self._pid != os.getpid():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(_SHUTDOWN_SECONDS)
        except Exception:
            logger.warning("Closing the MCP connections did not finish in time")
        loop.call_soon_threadsafe(loop.stop)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # A forked process (a Celery worker) cannot use its parent's loop thread.
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="goaai-mcp", daemon=True).start()
                self._loop, self._pid, self._connections = loop, os.getpid(), {}
            return self._loop

    def _wait(self, work: Coroutine[Any, Any, _T], seconds: float) -> _T:
        future = asyncio.run_coroutine_threadsafe(work, self._event_loop())
        try:
            return future.result(seconds + _GRACE_SECONDS)
        except FutureTimeout:
            future.cancel()
            raise McpFailure(
                ErrorKind.TIMEOUT, f"The MCP client did not answer within {seconds:g}s."
            ) from None

    async def _connected(self, server: McpServer) -> _Connection:
        connection = self._connections.get(server)
        if connection is None or connection.broken:
            connection = _Connection(server)
            self._connections[server] = connection
            connection.start()
        try:
            await asyncio.wait_for(asyncio.shield(connection.ready), server.startup_seconds)
        except TimeoutError:
            connection.close()
            raise McpFailure(
                ErrorKind.UNAVAILABLE,
                f"MCP server {server.name!r} did not start within {server.startup_seconds:g}s.",
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise McpFailure(
                ErrorKind.UNAVAILABLE,
                f"MCP server {server.name!r} could not be started: {_describe(exc)}",
            ) from None
        return connection

    async def _tools(self, server: McpServer) -> tuple[mcp_types.Tool, ...]:
        return (await self._connected(server)).tools

    async def _call(self, server: McpServer, name: str, arguments: dict[str, Any]) -> Any:
        connection = await self._connected(server)
        client = connection.client
        if client is None:
            raise McpFailure(ErrorKind.UNAVAILABLE, f"MCP server {server.name!r} stopped.")
        try:
            return await asyncio.wait_for(
                client.call_tool(name, arguments, read_timeout_seconds=server.timeout_seconds),
                server.timeout_seconds + _GRACE_SECONDS / 2,
            )
        except MCPError as exc:
            raise _call_failure(server, name, exc, connection) from None
        except TimeoutError:
            raise _timed_out(server, name) from None
        except pydantic.ValidationError as exc:
            raise McpFailure(
                ErrorKind.INTERNAL,
                f"MCP server {server.name!r} answered {name} with a result that is not MCP's: "
                f"{exc.error_count()} problems.",
            ) from None
        except Exception as exc:
            # The transport itself failed (a broken pipe, a dropped HTTP connection).
            connection.close()
            raise McpFailure(
                ErrorKind.UNAVAILABLE, f"MCP server {server.name!r} stopped: {_describe(exc)}"
            ) from None

    async def _close_all(self) -> None:
        tasks = []
        for connection in self._connections.values():
            connection.close()
            if connection.task is not None:
                tasks.append(connection.task)
        self._connections = {}
        if tasks:
            await asyncio.wait(tasks, timeout=_SHUTDOWN_SECONDS - 1)


def _timed_out(server: McpServer, name: str) -> McpFailure:
    return McpFailure(
        ErrorKind.TIMEOUT,
        f"{name} on MCP server {server.name!r} did not answer within {server.timeout_seconds:g}s.",
    )


def _call_failure(
    server: McpServer, name: str, exc: MCPError, connection: _Connection
) -> McpFailure:
    if exc.code == CONNECTION_CLOSED:
        connection.close()
        return McpFailure(
            ErrorKind.UNAVAILABLE, f"MCP server {server.name!r} stopped: {exc.message}."
        )
    if exc.code == REQUEST_TIMEOUT:
        return _timed_out(server, name)
    kind = (
        ErrorKind.INVALID_CALL
        if exc.code in (INVALID_PARAMS, METHOD_NOT_FOUND)
        else ErrorKind.DOMAIN_REJECTION
    )
    return McpFailure(kind, f"MCP server {server.name!r} refused {name}: {exc.message}")


# The process's connections; closed when the process exits, so that no server it
# started outlives it.
MCP_CLIENTS = McpClients()
atexit.register(MCP_CLIENTS.shutdown)


def _text_of(content: list[Any]) -> str:
    return "\n".join(item.text for item in content if isinstance(item, mcp_types.TextContent))


def _other_content(content: list[Any]) -> list[dict[str, Any]]:
    """Content that is not text (images, audio, resources), described without its
    bytes: the record keeps what it was, not a copy of it."""
    described = []
    for item in content:
        if isinstance(item, mcp_types.TextContent):
            continue
        data = item.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(data.get("data"), str):
            data["data"] = f"<{len(data['data'])} base64 characters>"
        described.append(data)
    return described


def outcome_of(name: str, result: mcp_types.CallToolResult) -> ToolOutcome:
    """What a tool call records for an MCP ``CallToolResult``: its structured
    content when it has some, else its text (and a description of anything else);
    a result marked ``isError`` is a refusal with the server's text."""
    text = _text_of(result.content)
    if result.is_error:
        return ToolOutcome(
            error_kind=ErrorKind.DOMAIN_REJECTION,
            error_message=text or f"{name} failed without saying why.",
        )
    if result.structured_content is not None:
        return ToolOutcome(result=result.structured_content)
    recorded: dict[str, Any] = {"text": text}
    other = _other_content(result.content)
    if other:
        recorded["content"] = other
    return ToolOutcome(result=recorded)


class _AnyArguments(pydantic.BaseModel):
    # The server checks the arguments against the schema it published.
    model_config = pydantic.ConfigDict(extra="allow")


@dataclass(frozen=True)
class McpTool(Tool):
    """A tool of an MCP server: its schema is the server's, and calling it calls
    the server."""

    server: McpServer | None = None
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    clients: McpClients = field(default=MCP_CLIENTS, compare=False, repr=False)

    def json_schema(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.input_schema))

    def invoke(self, arguments: Any, context: ToolContext) -> ToolOutcome:
        if not isinstance(arguments, dict):
            return ToolOutcome(
                error_kind=ErrorKind.INVALID_CALL,
                error_message=f"Arguments of {self.name} must be a JSON object.",
            )
        if self.server is None:
            raise RuntimeError(f"MCP tool {self.name} has no server.")
        try:
            result = self.clients.call(self.server, self.name, arguments)
        except McpFailure as failure:
            return ToolOutcome(error_kind=failure.kind, error_message=failure.message)
        return outcome_of(self.name, result)


def _unsupported(*_: Any, **__: Any) -> Any:
    raise RuntimeError("An MCP tool is called through its server.")


def _as_tool(server: McpServer, listed: mcp_types.Tool, clients: McpClients) -> McpTool:
    hints = listed.annotations
    idempotent = bool(hints and (hints.read_only_hint or hints.idempotent_hint))
    return McpTool(
        name=listed.name,
        description=listed.description or listed.title or listed.name,
        func=_unsupported,
        arguments_model=_AnyArguments,
        toolset=f"{MCP_TOOLSET_PREFIX}{server.name}",
        requires_approval=not server.trusted,
        idempotent=idempotent,
        # The most one call may take: starting the server again, then the call.
        timeout_seconds=server.startup_seconds + server.timeout_seconds + _GRACE_SECONDS,
        server=server,
        input_schema=listed.input_schema,
        clients=clients,
    )


def mcp_tools(server: McpServer, clients: McpClients | None = None) -> dict[str, Tool]:
    """The tools of ``server`` (only those of its ``tools`` list when it has one),
    by name; :class:`ToolsetUnavailable` when the server cannot be reached."""
    clients = clients or MCP_CLIENTS
    try:
        listed = clients.tools(server)
    except McpFailure as failure:
        raise ToolsetUnavailable(failure.message) from None
    return {
        tool.name: _as_tool(server, tool, clients)
        for tool in listed
        if server.tools is None or tool.name in server.tools
    }
