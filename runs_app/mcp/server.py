"""The MCP tools goaai offers at ``/mcp``, declared with the official SDK's MCPServer.

Each tool's input schema comes from its type hints and its description from its
docstring; each answers with structured content (a JSON object) and the same object
as text. The names and arguments are a contract documented in the README.

A call runs :mod:`runs_app.mcp.tools` in a worker thread of its own (not the one
thread Django's async views share), closing the thread's stale database
connections before and after, as Channels' consumers do. Those threads are the
event loop's few default ones, which /v1/ and every other call share: nothing holds
one for long. ``run_start`` waits for its run on the event loop, looking at the
run now and then in a short query, not in a thread that sleeps until it is done.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Annotated, Any, Literal
from uuid import UUID

from channels.db import DatabaseSyncToAsync
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from runs_app.mcp import tools
from runs_app.mcp.tools import Caller

# Set on the ASGI scope by runs_app.mcp.app once the token is checked.
CALLER_SCOPE_KEY = "goaai.mcp_caller"
# How long run_start may wait for the run's answer: nginx waits longer than this
# for a response (deploy/nginx.conf.template, location /mcp).
MAX_WAIT_SECONDS = 60
# How often a waiting run_start looks at its run: soon at first (most answers are
# quick), then at most every half second.
FIRST_LOOK_SECONDS = 0.05
LOOK_EVERY_SECONDS = 0.5

Scope = Literal["session", "user", "agent", "global"]
SessionId = Annotated[
    UUID | None, Field(description="One of your sessions (its id, as sessions_list shows it).")
]
AgentId = Annotated[str, Field(max_length=100, description="An agent id, for agent scope.")]
Key = Annotated[str, Field(min_length=1, max_length=200, description="The entry's key.")]

server: MCPServer = MCPServer(
    "goaai",
    title="goaai",
    instructions="goaai's memory and sessions, as the user whose API token you present: "
    "store, read, search and delete memory (session, user, agent or global scope), "
    "list your sessions, read what happened in them, and start runs of goaai's agents.",
)


def _caller(ctx: Context) -> Caller:
    request = ctx.request_context.request
    caller = getattr(request, "scope", {}).get(CALLER_SCOPE_KEY)
    if not isinstance(caller, Caller):
        # Only reachable if the app were served without goaai's authentication.
        raise ToolError("Not authenticated.")
    return caller


async def _in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await DatabaseSyncToAsync(function, thread_sensitive=False)(*args, **kwargs)


async def _call(ctx: Context, function: Callable[..., dict[str, Any]], **kwargs: Any) -> Any:
    return await _in_thread(function, _caller(ctx), **kwargs)


async def _wait_for(run_id: UUID, seconds: float) -> None:
    """Until the run has ended or waits for a person, or ``seconds`` have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    pause = FIRST_LOOK_SECONDS
    while seconds > 0 and not await _in_thread(tools.run_settled, run_id):
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, LOOK_EVERY_SECONDS)


WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)


@server.tool(annotations=WRITES)
async def memory_store(
    key: Key,
    value: Annotated[Any, Field(description="Any JSON value (at most 64 KiB encoded).")],
    scope: Annotated[
        Scope,
        Field(
            description="session: one session's (name `session`); user: yours; agent: "
            "an agent's (name `agent`); global: everyone's. Agent and global memory "
            "take the memory_app permissions."
        ),
    ],
    ctx: Context,
    session: SessionId = None,
    agent: AgentId = "",
    version: Annotated[
        int | None,
        Field(
            ge=0,
            description="Omitted: create or overwrite. 0: only create. n: only if the "
            "entry is still at version n (else a version_conflict error showing it).",
        ),
    ] = None,
    expires_at: Annotated[
        dt.datetime | None,
        Field(description="When the entry is forgotten (ISO 8601, in the future)."),
    ] = None,
) -> dict[str, Any]:
    """Store a value in goaai's memory, recorded as written by you. Answers
    {"entry": {id, key, value, scope, session, user, agent, version, written_by,
    expires_at, created_at, updated_at}}."""
    result: dict[str, Any] = await _call(
        ctx,
        tools.memory_store,
        key=key,
        value=value,
        scope=scope,
        session=session,
        agent=agent,
        version=version,
        expires_at=expires_at,
    )
    return result


@server.tool(annotations=READS)
async def memory_get(
    key: Key, ctx: Context, session: SessionId = None, agent: AgentId = ""
) -> dict[str, Any]:
    """Read a key as a run reads it, the most specific entry first: with `session`,
    the session's own, else yours, else the session's agent's, else the global one;
    without, yours, else `agent`'s (when named), else the global one. Answers
    {"key", "found", "entry": {...} | null}."""
    result: dict[str, Any] = await _call(
        ctx, tools.memory_get_tool, key=key, session=session, agent=agent
    )
    return result


@server.tool(annotations=READS)
async def memory_search(
    query: Annotated[str, Field(min_length=1, max_length=1000, description="Words to look for.")],
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=50, description="At most this many facts.")] = 10,
    session: SessionId = None,
) -> dict[str, Any]:
    """Search memory by its words (and, with embeddings configured, its meaning),
    best first: with `session`, what a run in it reads; without, your own and the
    global entries. A more specific scope hides the same key further out. Answers
    {"query", "results": [{"key", "value", "scope"}]}."""
    result: dict[str, Any] = await _call(
        ctx, tools.memory_search_tool, query=query, limit=limit, session=session
    )
    return result


@server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
async def memory_delete(
    key: Key,
    scope: Scope,
    version: Annotated[
        int,
        Field(ge=1, description="The version you read: a stale one is a version_conflict."),
    ],
    ctx: Context,
    session: SessionId = None,
    agent: AgentId = "",
) -> dict[str, Any]:
    """Delete a memory entry if it is still at `version`; its history is kept.
    Answers {"deleted": true, "key", "scope"}."""
    result: dict[str, Any] = await _call(
        ctx,
        tools.memory_delete,
        key=key,
        scope=scope,
        version=version,
        session=session,
        agent=agent,
    )
    return result


@server.tool(annotations=READS)
async def sessions_list(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=100, description="Sessions per page.")] = 20,
    cursor: Annotated[
        str | None, Field(max_length=500, description="`next_cursor` of the previous page.")
    ] = None,
    status: Literal["active", "ended"] | None = None,
) -> dict[str, Any]:
    """Your sessions, newest first. Answers {"sessions": [{id, agent, title, status,
    metadata, owner, last_event_seq, usage, created_at, updated_at, ended_at}],
    "next_cursor": str | null}."""
    result: dict[str, Any] = await _call(
        ctx, tools.sessions_list, limit=limit, cursor=cursor, status=status
    )
    return result


@server.tool(annotations=READS)
async def session_events(
    session: Annotated[UUID, Field(description="One of your sessions.")],
    ctx: Context,
    after: Annotated[int, Field(ge=0, description="Only events with a greater seq.")] = 0,
    limit: Annotated[int, Field(ge=1, le=500, description="At most this many events.")] = 100,
) -> dict[str, Any]:
    """A session's recorded events (runs, turns, tool calls, memory changes) with
    `seq > after`, oldest first: the audit log. Answers {"session", "events": [{seq,
    type, run, data, created_at}], "next_after", "caught_up"}."""
    result: dict[str, Any] = await _call(
        ctx, tools.session_events, session=session, after=after, limit=limit
    )
    return result


@server.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=True))
async def run_start(
    input: Annotated[str, Field(min_length=1, description="The message to the agent.")],
    ctx: Context,
    session: SessionId = None,
    agent: Annotated[
        str | None,
        Field(max_length=100, description="Start a new session with this agent instead."),
    ] = None,
    wait_seconds: Annotated[
        float,
        Field(
            ge=0,
            le=MAX_WAIT_SECONDS,
            description="Wait up to this long for the answer (0: return at once).",
        ),
    ] = 0,
    labels: Annotated[
        dict[str, str] | None, Field(description="String labels (label rules may apply).")
    ] = None,
    metadata: dict[str, Any] | None = None,
    multitask: Annotated[
        Literal["enqueue", "reject", "interrupt"] | None,
        Field(description="If another run of the session is active; the agent's default."),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Field(description="Retries with the same key and arguments give the same run."),
    ] = None,
) -> dict[str, Any]:
    """Start a run: send a message to one of your sessions, or to `agent` in a new
    session. Answers {"run": {id, session, agent, status, input, output, usage,
    error, awaiting, ...}, "session", "finished"}; `output` is the answer once the
    run has finished within `wait_seconds`."""
    caller = _caller(ctx)
    run_id: UUID = await _in_thread(
        tools.run_start,
        caller,
        input=input,
        session=session,
        agent=agent,
        labels=labels,
        metadata=metadata,
        multitask=multitask,
        idempotency_key=idempotency_key,
    )
    await _wait_for(run_id, wait_seconds)
    result: dict[str, Any] = await _in_thread(tools.run_document, run_id)
    return result
