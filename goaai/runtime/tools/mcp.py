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

A server that does not start within its ``startup_seconds`` (or cannot be started
at all) is ended there and then, process tree and all, and its failure is
remembered for :data:`FAILURE_BACKOFF_SECONDS`: uses in that time fail at once
with the same message instead of starting it again each time.

Values of ``env`` and ``headers`` may name variables of goaai's environment as
``${NAME}``; they are read each time the server is started or connected to, so a
declaration need not hold the secret itself (``$${`` is a literal ``${``).

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
import re
import threading
import weakref
from collections.abc import Coroutine, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types
import pydantic
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT

from goaai.runtime.config import MCP_TOOLSET_PREFIX, McpServer
from goaai.runtime.errors import ToolsetUnavailable
from goaai.runtime.tools.base import Tool, ToolContext
from goaai.runtime.tools.client import AnyArguments
from goaai.runtime.types import ToolOutcome
from goaai.runtime.vocabulary import ErrorKind

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# How many pages of a server's tool listing are read at most.
_MAX_LIST_PAGES = 50
# Extra time the waiting thread allows past the server's own limits, so that the
# limit the event loop enforces is the one that answers.
_GRACE_SECONDS = 2.0
# How long closing every connection may take when the process exits.
_SHUTDOWN_SECONDS = 10.0
# How long a server that failed to start is not tried again: listing agents or
# starting runs then fails at once rather than waiting out its startup each time.
FAILURE_BACKOFF_SECONDS = 15.0
# "${NAME}" in an env or header value, or "$${" for a literal "${".
_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpFailure(Exception):
    """A call to an MCP server that did not give a result: ``kind`` is the error
    kind the tool call is recorded with."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def expand(value: str) -> str:
    """``value`` with each ``${NAME}`` replaced by the variable ``NAME`` of goaai's
    environment; :class:`McpFailure` (unavailable) naming a variable that is not
    set, never showing a value."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "${"
        found = os.environ.get(name)
        if found is None:
            raise McpFailure(ErrorKind.UNAVAILABLE, f"environment variable {name} is not set")
        return found

    return _REFERENCE.sub(replace, value)


def _expanded(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return {key: expand(value) for key, value in pairs}


# Every McpClients of the process, reset in a forked child (see _after_fork).
_ALL_CLIENTS: weakref.WeakSet[McpClients] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for clients in list(_ALL_CLIENTS):
        clients._after_fork()


os.register_at_fork(after_in_child=_reset_after_fork)


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
    loop from the moment it starts until it is closed or breaks.

    Its start is bounded by the server's ``startup_seconds`` from inside: past it,
    ``ready`` fails and the task is cancelled, which unwinds the transport (for a
    server goaai started, its process tree is killed), so nothing outlives a start
    that failed.
    """

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.client: Client | None = None
        self.tools: tuple[mcp_types.Tool, ...] = ()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.broken = False
        self.task: asyncio.Task[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None
        # The SDK is written for anyio: its own cancellation is what unwinds it
        # (a plain task.cancel() can be absorbed by the handshake's waits).
        self._scope = anyio.CancelScope()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._hold(), name=f"goaai-mcp-{self.server.name}")
        self._deadline = loop.call_later(self.server.startup_seconds, self._too_slow)

    def close(self) -> None:
        """Stop using the connection; its task shuts the transport down (and, for a
        server goaai started, the server's process tree)."""
        self.broken = True
        self.stop.set()
        if self.client is None:
            # Still starting: the task is inside the SDK's handshake, not at stop.
            self._scope.cancel()

    def _too_slow(self) -> None:
        if self.ready.done():
            return
        self.ready.set_exception(
            McpFailure(
                ErrorKind.UNAVAILABLE,
                f"MCP server {self.server.name!r} did not start within "
                f"{self.server.startup_seconds:g}s.",
            )
        )
        self.close()

    async def _hold(self) -> None:
        try:
            with self._scope:
                await self._serve()
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
            if self._deadline is not None:
                self._deadline.cancel()
            if not self.ready.done():
                self.ready.cancel()

    async def _serve(self) -> None:
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                Client(
                    await self._target(stack),
                    cache=None,
                    # Bounds each request of the handshake and the listing.
                    read_timeout_seconds=self.server.startup_seconds,
                )
            )
            self.tools = await _list_tools(client)
            self.client = client
            if self._deadline is not None:
                self._deadline.cancel()
            self.ready.set_result(None)
            await self.stop.wait()

    async def _target(self, stack: AsyncExitStack) -> Any:
        server = self.server
        if server.url:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=_expanded(server.headers),
                    timeout=httpx2.Timeout(server.startup_seconds, read=300.0),
                )
            )
            return streamable_http_client(server.url, http_client=http)
        return StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=_expanded(server.env) or None,
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
        # Servers whose start failed: until when (the loop's clock) it stands.
        self._failed: dict[McpServer, tuple[float, McpFailure]] = {}
        _ALL_CLIENTS.add(self)

    def tools(
        self, server: McpServer, *, within: float | None = None
    ) -> tuple[mcp_types.Tool, ...]:
        """The tools ``server`` offers (its listing, read when it started);
        :class:`McpFailure` when it cannot be started or reached in time. With
        ``within``, waits at most that long: a server still starting then goes on
        starting (within its own limit) for the next use."""
        seconds = server.startup_seconds if within is None else min(within, server.startup_seconds)
        return self._wait(self._tools(server, within), seconds)

    def start(self, servers: list[McpServer]) -> None:
        """Start (or connect to) each of ``servers`` not yet connected, all at once
        and without waiting, so that listing them one by one afterwards waits for
        the slowest rather than for their sum."""
        asyncio.run_coroutine_threadsafe(self._start_all(servers), self._event_loop())

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

    def _after_fork(self) -> None:
        # A child forked while another thread held the lock would inherit it held;
        # the parent's loop thread does not exist in the child either.
        self._lock = threading.Lock()
        self._loop = None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # A forked process (a Celery worker) cannot use its parent's loop thread.
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="goaai-mcp", daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
                self._connections, self._failed = {}, {}
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

    def _connection(self, server: McpServer) -> _Connection:
        """The connection to ``server``, started now if there is none that lives;
        :class:`McpFailure` while a failed start of it is remembered."""
        failed = self._failed.get(server)
        if failed is not None:
            until, failure = failed
            if asyncio.get_running_loop().time() < until:
                raise McpFailure(failure.kind, failure.message)
            del self._failed[server]
        connection = self._connections.get(server)
        if connection is None or connection.broken:
            connection = _Connection(server)
            self._connections[server] = connection
            connection.ready.add_done_callback(lambda ready: self._settled(connection, ready))
            connection.start()
        return connection

    def _settled(self, connection: _Connection, ready: asyncio.Future[None]) -> None:
        """Remember a start that failed (whether or not anyone still waits on it)."""
        if ready.cancelled() or ready.exception() is None:
            return
        failure = _start_failure(connection.server, ready.exception())
        until = asyncio.get_running_loop().time() + FAILURE_BACKOFF_SECONDS
        self._failed[connection.server] = (until, failure)

    async def _start_all(self, servers: list[McpServer]) -> None:
        for server in servers:
            try:
                self._connection(server)
            except McpFailure:
                continue

    async def _connected(self, server: McpServer, within: float | None = None) -> _Connection:
        connection = self._connection(server)
        # The connection's own deadline answers first; this is a backstop.
        limit = server.startup_seconds + _GRACE_SECONDS / 2
        try:
            await asyncio.wait_for(
                asyncio.shield(connection.ready), limit if within is None else min(within, limit)
            )
        except TimeoutError:
            if within is not None and within < server.startup_seconds:
                raise McpFailure(
                    ErrorKind.UNAVAILABLE,
                    f"MCP server {server.name!r} is still starting; try again shortly.",
                ) from None
            connection.close()
            raise McpFailure(
                ErrorKind.UNAVAILABLE,
                f"MCP server {server.name!r} did not start within {server.startup_seconds:g}s.",
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _start_failure(server, exc) from None
        return connection

    async def _tools(
        self, server: McpServer, within: float | None = None
    ) -> tuple[mcp_types.Tool, ...]:
        return (await self._connected(server, within)).tools

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
        self._connections, self._failed = {}, {}
        if tasks:
            await asyncio.wait(tasks, timeout=_SHUTDOWN_SECONDS - 1)


def _start_failure(server: McpServer, exc: BaseException | None) -> McpFailure:
    """What a use of ``server`` fails with when its start failed with ``exc``."""
    if isinstance(exc, McpFailure):
        if exc.message.startswith("MCP server "):
            return McpFailure(exc.kind, exc.message)
        return McpFailure(
            exc.kind, f"MCP server {server.name!r} could not be started: {exc.message}."
        )
    return McpFailure(
        ErrorKind.UNAVAILABLE,
        f"MCP server {server.name!r} could not be started: {_describe(exc or Exception())}",
    )


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
        # The server checks the arguments against the schema it published.
        arguments_model=AnyArguments,
        toolset=f"{MCP_TOOLSET_PREFIX}{server.name}",
        requires_approval=not server.trusted,
        idempotent=idempotent,
        # The most one call may take: starting the server again, then the call.
        timeout_seconds=server.startup_seconds + server.timeout_seconds + _GRACE_SECONDS,
        server=server,
        input_schema=listed.input_schema,
        clients=clients,
    )


def mcp_tools(
    server: McpServer, clients: McpClients | None = None, *, within: float | None = None
) -> dict[str, Tool]:
    """The tools of ``server`` (only those of its ``tools`` list when it has one),
    by name; :class:`ToolsetUnavailable` when the server cannot be reached (within
    ``within`` seconds, when given)."""
    clients = clients or MCP_CLIENTS
    try:
        listed = clients.tools(server, within=within)
    except McpFailure as failure:
        raise ToolsetUnavailable(failure.message) from None
    return {
        tool.name: _as_tool(server, tool, clients)
        for tool in listed
        if server.tools is None or tool.name in server.tools
    }
