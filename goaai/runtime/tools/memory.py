"""Memory tools: what the agent remembers about the session and its user.

Entries written here are attributed to the run and the tool call that wrote them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from goaai.runtime.tools.base import ToolContext, ToolRejected, tool

Key = Annotated[
    str,
    Field(
        description="A short name for the fact, e.g. 'favourite colour'.",
        min_length=1,
        max_length=200,
    ),
]
WritableScope = Annotated[
    Literal["session", "user"],
    Field(description="'session' for this conversation only, 'user' for every conversation."),
]


def normalise_key(key: str) -> str:
    """Keys are case- and space-insensitive: 'Favourite  Colour' is 'favourite colour'."""
    return " ".join(key.lower().split())


@tool(name="memory_store")
def memory_store(
    key: Key,
    value: Annotated[str, Field(description="What to remember.", max_length=10_000)],
    context: ToolContext,
    scope: WritableScope = "session",
) -> dict[str, Any]:
    """Remember a fact under a key, for this session or for the user."""
    record = context.store.store_memory(
        key=normalise_key(key),
        value=value,
        scope=scope,
        session_id=context.session_id if scope == "session" else None,
        user_id=context.owner_id if scope == "user" else None,
        written_by_run=context.run_id,
        written_by_tool_call=context.tool_call_id,
    )
    return {
        "key": record.key,
        "value": record.value,
        "scope": record.scope,
        "version": record.version,
    }


@tool(name="memory_recall", idempotent=True)
def memory_recall(key: Key, context: ToolContext) -> dict[str, Any]:
    """Recall a remembered fact: session first, then the user, the agent, everyone."""
    record = context.store.resolve_memory(key=normalise_key(key), session_id=context.session_id)
    if record is None:
        return {"key": normalise_key(key), "found": False}
    return {"key": record.key, "found": True, "value": record.value, "scope": record.scope}


@tool(name="memory_search", idempotent=True)
def memory_search(
    query: Annotated[
        str,
        Field(
            description="What to look for, in your own words: 'dog', 'where the user lives'.",
            min_length=1,
            max_length=1_000,
        ),
    ],
    context: ToolContext,
    limit: Annotated[int, Field(description="How many facts at most.", ge=1, le=20)] = 5,
) -> dict[str, Any]:
    """Search what is remembered (this session, the user, the agent, everyone) for
    facts about something, best match first: for when the exact key is not known."""
    found = context.store.search_memory(session_id=context.session_id, query=query, limit=limit)
    return {
        "query": query,
        "facts": [{"key": key, "value": value, "scope": scope} for scope, key, value in found],
    }


@tool(name="memory_forget")
def memory_forget(
    key: Key, context: ToolContext, scope: WritableScope = "session"
) -> dict[str, Any]:
    """Forget a remembered fact."""
    deleted = context.store.delete_memory(
        key=normalise_key(key),
        scope=scope,
        session_id=context.session_id if scope == "session" else None,
        user_id=context.owner_id if scope == "user" else None,
        written_by_run=context.run_id,
        written_by_tool_call=context.tool_call_id,
    )
    if not deleted:
        raise ToolRejected(
            f"Nothing is remembered under {normalise_key(key)!r} in the {scope} scope."
        )
    return {"key": normalise_key(key), "scope": scope, "forgotten": True}


@tool(name="memory_forget_all", requires_approval=True)
def memory_forget_all(context: ToolContext) -> dict[str, Any]:
    """Forget everything remembered in this session. A person must approve it first."""
    keys = context.store.memory_keys(scope="session", session_id=context.session_id)
    for key in keys:
        context.store.delete_memory(
            key=key,
            scope="session",
            session_id=context.session_id,
            written_by_run=context.run_id,
            written_by_tool_call=context.tool_call_id,
        )
    return {"forgotten": sorted(keys)}
