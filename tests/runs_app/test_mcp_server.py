"""goaai as an MCP server: ``/mcp`` served for real (uvicorn, in a thread, on the
test database) and used through the official ``mcp`` SDK's client with an API token.

Every tool acts as the token's user: their sessions only, memory scoped as the REST
API scopes it, writes recorded with them as writer (the admin shows it). Refusals
are tool results with ``isError``; requests without a working token are 401s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx2
import pytest
import uvicorn
from django.contrib.admin.models import LogEntry
from django.core.cache import cache
from django.utils import timezone
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from goaai.asgi import application
from memory_app.models import MemoryEntry, MemoryRevision
from sessions_app.models import RunEvent
from sessions_app.services import api_token_create, api_token_revoke
from tests.factories import MemoryEntryFactory, SessionFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = {
    "memory_store",
    "memory_get",
    "memory_search",
    "memory_delete",
    "sessions_list",
    "session_events",
    "run_start",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "tests", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def base_url(transactional_db) -> Iterator[str]:
    """goaai's ASGI application, as ``make run``'s servers serve it, on the test
    database (uvicorn sends no lifespan events to it either: ``lifespan="off"``)."""
    port = _free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _fresh_throttles() -> None:
    # Run starts are counted in the cache, which outlives a test.
    cache.clear()


def token_for(user: Any) -> str:
    _, raw = api_token_create(user_id=user.pk, name="mcp tests")
    return raw


Session = Callable[[Client], Awaitable[Any]]


def with_client(base_url: str, token: str, use: Session, *, mode: str = "auto") -> Any:
    """Connect the SDK's client to ``/mcp`` with ``token``, and run ``use`` with it."""

    async def main() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:  # type: ignore[arg-type]
                return await use(client)

    return asyncio.run(main())


def call(base_url: str, token: str, tool: str, **arguments: Any) -> Any:
    async def use(client: Client) -> Any:
        return await client.call_tool(tool, arguments)

    return with_client(base_url, token, use)


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    structured: dict[str, Any] = result.structured_content
    # The same object, as text, for clients that read only the content.
    assert json.loads(result.content[0].text) == structured
    return structured


def refused(result: Any) -> str:
    assert result.is_error, result.structured_content
    text: str = result.content[0].text
    return text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_tools_are_listed_with_their_schemas(base_url, owner, mode):
    async def use(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in with_client(base_url, token_for(owner), use, mode=mode)}
    assert set(tools) == TOOLS
    store = tools["memory_store"].input_schema
    assert set(store["required"]) == {"key", "value", "scope"}
    assert store["properties"]["scope"]["enum"] == ["session", "user", "agent", "global"]
    assert "version" in store["properties"]
    assert "ctx" not in store["properties"]
    assert set(tools["memory_delete"].input_schema["required"]) == {"key", "scope", "version"}
    assert tools["run_start"].input_schema["properties"]["wait_seconds"]["maximum"] == 60
    assert all(tool.output_schema is not None and tool.description for tool in tools.values())
    assert tools["memory_get"].annotations.read_only_hint is True


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_store_get_search_and_delete_with_versions(base_url, owner, mode):
    token = token_for(owner)

    async def use(client: Client) -> list[Any]:
        steps = [
            ("memory_store", {"key": "editor", "value": {"name": "vim"}, "scope": "user"}),
            ("memory_get", {"key": "editor"}),
            ("memory_search", {"query": "vim"}),
            ("memory_store", {"key": "editor", "value": "emacs", "scope": "user", "version": 1}),
            ("memory_store", {"key": "editor", "value": "nano", "scope": "user", "version": 1}),
            ("memory_delete", {"key": "editor", "scope": "user", "version": 1}),
            ("memory_delete", {"key": "editor", "scope": "user", "version": 2}),
            ("memory_get", {"key": "editor"}),
            ("memory_delete", {"key": "editor", "scope": "user", "version": 3}),
        ]
        return [await client.call_tool(name, arguments) for name, arguments in steps]

    stored, read, found, updated, stale, stale_delete, deleted, gone, again = with_client(
        base_url, token, use, mode=mode
    )
    entry = ok(stored)["entry"]
    assert (entry["scope"], entry["user"], entry["version"]) == ("user", owner.pk, 1)
    assert entry["written_by"] == {"kind": "user", "user": owner.pk, "run": None, "tool_call": None}
    assert ok(read) == {"key": "editor", "found": True, "entry": entry}
    assert ok(found)["results"] == [{"key": "editor", "value": {"name": "vim"}, "scope": "user"}]
    assert ok(updated)["entry"]["version"] == 2
    # A stale version writes nothing, and says what the entry is now.
    text = refused(stale)
    assert "version_conflict" in text
    assert "at version 2, not 1" in text
    assert '"emacs"' in text
    assert "version_conflict" in refused(stale_delete)
    assert ok(deleted) == {"deleted": True, "key": "editor", "scope": "user"}
    assert ok(gone) == {"key": "editor", "found": False, "entry": None}
    assert "No user entry 'editor'" in refused(again)
    history = list(MemoryRevision.objects.filter(key="editor").order_by("version"))
    assert [(r.version, r.action) for r in history] == [
        (1, "created"),
        (2, "updated"),
        (3, "deleted"),
    ]
    assert {r.actor_user_id for r in history} == {owner.pk}


def test_a_key_resolves_session_then_user_then_agent_then_global(base_url, owner):
    session = SessionFactory(owner=owner, agent="assistant")
    MemoryEntryFactory(global_scoped=True, key="tz", value="UTC")
    MemoryEntryFactory(agent_scoped=True, key="tz", value="Europe/Berlin")
    token = token_for(owner)

    def value(**arguments: Any) -> Any:
        return ok(call(base_url, token, "memory_get", key="tz", **arguments))["entry"]["value"]

    assert value(session=str(session.pk)) == "Europe/Berlin"
    assert value() == "UTC"
    assert value(agent="assistant") == "Europe/Berlin"
    ok(call(base_url, token, "memory_store", key="tz", value="Asia/Tokyo", scope="user"))
    assert value(session=str(session.pk)) == "Asia/Tokyo"
    ok(
        call(
            base_url,
            token,
            "memory_store",
            key="tz",
            value="America/Lima",
            scope="session",
            session=str(session.pk),
        )
    )
    assert value(session=str(session.pk)) == "America/Lima"
    assert value() == "Asia/Tokyo"
    text = refused(
        call(base_url, token, "memory_get", key="tz", session=str(session.pk), agent="x")
    )
    assert "talks to agent 'assistant'" in text
    # The most specific entry hides the others of the same key, in search as well.
    found = ok(call(base_url, token, "memory_search", query="tz", session=str(session.pk)))
    assert found["results"] == [{"key": "tz", "value": "America/Lima", "scope": "session"}]
    found = ok(call(base_url, token, "memory_search", query="tz"))
    assert found["results"] == [{"key": "tz", "value": "Asia/Tokyo", "scope": "user"}]


def test_another_users_session_is_no_session(base_url, owner, other_user):
    theirs = SessionFactory(owner=other_user, agent="assistant")
    MemoryEntryFactory(session=theirs, key="secret", value="theirs")
    token = token_for(owner)
    attempts = [
        ("memory_store", {"key": "k", "value": 1, "scope": "session", "session": str(theirs.pk)}),
        ("memory_get", {"key": "secret", "session": str(theirs.pk)}),
        ("memory_search", {"query": "theirs", "session": str(theirs.pk)}),
        (
            "memory_delete",
            {"key": "secret", "scope": "session", "version": 1, "session": str(theirs.pk)},
        ),
        ("session_events", {"session": str(theirs.pk)}),
        ("run_start", {"session": str(theirs.pk), "input": "echo hi"}),
    ]

    async def use(client: Client) -> list[Any]:
        return [await client.call_tool(name, arguments) for name, arguments in attempts]

    for result in with_client(base_url, token, use):
        assert f"No session {theirs.pk}." in refused(result)
    assert list(MemoryEntry.objects.values_list("key", "value")) == [("secret", "theirs")]
    assert not theirs.runs.exists()
    listed = ok(call(base_url, token, "sessions_list"))["sessions"]
    assert listed == []


def test_bad_arguments_are_tool_errors_and_the_connection_goes_on(base_url, owner):
    session = SessionFactory(owner=owner)

    async def use(client: Client) -> list[Any]:
        bad = [
            ("memory_store", {"key": "k", "value": 1}),
            ("memory_store", {"key": "k" * 201, "value": 1, "scope": "user"}),
            ("memory_store", {"key": "k", "value": 1, "scope": "planet"}),
            ("memory_store", {"key": "k", "value": 1, "scope": "session"}),
            ("memory_store", {"key": "k", "value": 1, "scope": "user", "session": str(session.pk)}),
            ("memory_store", {"key": "k", "value": "a\x00b", "scope": "user"}),
            ("memory_store", {"key": "k", "value": "x" * 70_000, "scope": "user"}),
            (
                "memory_store",
                {"key": "k", "value": 1, "scope": "user", "expires_at": "2001-01-01T00:00:00Z"},
            ),
            ("memory_get", {"key": "k", "session": "not-a-uuid"}),
            ("memory_search", {"query": "k", "limit": 0}),
            ("memory_delete", {"key": "k", "scope": "user"}),
            ("sessions_list", {"cursor": "bm90IGEgY3Vyc29y"}),
            ("session_events", {"session": str(session.pk), "after": -1}),
            ("run_start", {"input": "echo hi"}),
            ("run_start", {"input": "echo hi", "agent": "assistant", "session": str(session.pk)}),
            ("run_start", {"input": "echo hi", "agent": "nobody"}),
            ("run_start", {"input": "   ", "session": str(session.pk)}),
            ("run_start", {"input": "echo hi", "agent": "assistant", "idempotency_key": "k"}),
            ("run_start", {"input": "echo hi", "session": str(session.pk), "labels": {"a": 1}}),
        ]
        results = [await client.call_tool(name, arguments) for name, arguments in bad]
        results.append(
            await client.call_tool("memory_store", {"key": "k", "value": 1, "scope": "user"})
        )
        return results

    *errors, fine = with_client(base_url, token_for(owner), use)
    texts = [refused(result) for result in errors]
    assert "No agent named 'nobody'." in texts[15]
    assert "Session scope needs `session`" in texts[3]
    assert "names no session" in texts[4]
    assert "Must be in the future." in texts[7]
    assert "not one sessions_list gave" in texts[11]
    assert "Name either `session`" in texts[13]
    assert ok(fine)["entry"]["version"] == 1
    assert list(MemoryEntry.objects.values_list("key", flat=True)) == ["k"]
    assert not session.runs.exists()


def test_sessions_are_listed_newest_first_a_page_at_a_time(base_url, owner, other_user):
    now = timezone.now()
    mine = [SessionFactory(owner=owner, title=f"chat {n}") for n in range(3)]
    for n, session in enumerate(mine):
        type(session).objects.filter(pk=session.pk).update(
            created_at=now - dt.timedelta(minutes=10 - n)
        )
    SessionFactory(owner=other_user, title="not yours")
    token = token_for(owner)
    first = ok(call(base_url, token, "sessions_list", limit=2))
    assert [s["title"] for s in first["sessions"]] == ["chat 2", "chat 1"]
    assert first["sessions"][0]["owner"] == {"id": owner.pk, "username": "alice"}
    second = ok(call(base_url, token, "sessions_list", limit=2, cursor=first["next_cursor"]))
    assert [s["title"] for s in second["sessions"]] == ["chat 0"]
    assert second["next_cursor"] is None
    ended = ok(call(base_url, token, "sessions_list", status="ended"))
    assert ended == {"sessions": [], "next_cursor": None}


def test_a_run_started_through_mcp_answers_and_is_audited(base_url, owner, inline_runtime):
    token = token_for(owner)
    started = ok(
        call(
            base_url,
            token,
            "run_start",
            agent="assistant",
            input="remember my favourite colour is green",
            wait_seconds=10,
        )
    )
    run = started["run"]
    assert (run["status"], started["finished"]) == ("completed", True)
    assert run["output"]
    session = started["session"]
    # The run's memory is read back through MCP, in the session it wrote it for.
    entry = ok(call(base_url, token, "memory_get", key="favourite colour", session=session))
    assert entry["entry"]["value"] == "green"
    assert entry["entry"]["written_by"]["run"] == run["id"]
    answered = ok(
        call(base_url, token, "run_start", session=session, input="what is my favourite colour")
    )
    assert "green" in answered["run"]["output"]
    events = ok(call(base_url, token, "session_events", session=session, limit=500))
    types = [event["type"] for event in events["events"]]
    assert types.count("run.completed") == 2
    assert "memory.stored" in types
    assert events["caught_up"] is True
    assert [e["seq"] for e in events["events"]] == list(range(1, len(types) + 1))
    later = ok(call(base_url, token, "session_events", session=session, after=events["next_after"]))
    assert later["events"] == []
    assert later["next_after"] == events["next_after"]
    assert RunEvent.objects.filter(session_id=session).count() == len(types)


def test_an_idempotency_key_gives_the_same_run(base_url, owner, inline_runtime):
    session = SessionFactory(owner=owner, agent="assistant")
    token = token_for(owner)
    arguments = {"session": str(session.pk), "input": "echo hi", "idempotency_key": "retry-1"}
    first = ok(call(base_url, token, "run_start", **arguments))
    again = ok(call(base_url, token, "run_start", **arguments))
    assert first["run"]["id"] == again["run"]["id"]
    assert session.runs.count() == 1
    other = refused(call(base_url, token, "run_start", **{**arguments, "input": "echo bye"}))
    assert "idempotency_key_reused" in other


def test_run_starts_are_rate_limited_as_through_the_api(base_url, owner, settings, inline_runtime):
    settings.GOAAI_THROTTLE_RATES = {"run_create_user": "1/min", "run_create_token": "5/min"}
    session = SessionFactory(owner=owner, agent="assistant")
    token = token_for(owner)
    ok(call(base_url, token, "run_start", session=str(session.pk), input="echo one"))
    text = refused(call(base_url, token, "run_start", session=str(session.pk), input="echo two"))
    assert "rate_limited" in text
    assert session.runs.count() == 1


def test_agent_and_global_memory_take_the_permission(base_url, owner, staff):
    text = refused(
        call(base_url, token_for(owner), "memory_store", key="k", value=1, scope="global")
    )
    assert "memory_app.add_memoryentry" in text
    text = refused(
        call(base_url, token_for(owner), "memory_store", key="k", value=1, scope="agent", agent="a")
    )
    assert "memory_app.add_memoryentry" in text
    assert not MemoryEntry.objects.exists()
    operator = token_for(staff)
    entry = ok(call(base_url, operator, "memory_store", key="motd", value="hi", scope="global"))
    assert entry["entry"]["written_by"]["user"] == staff.pk
    # Everyone reads it; only the permission deletes it.
    assert ok(call(base_url, token_for(owner), "memory_get", key="motd"))["entry"]["value"] == "hi"
    text = refused(
        call(base_url, token_for(owner), "memory_delete", key="motd", scope="global", version=1)
    )
    assert "memory_app.delete_memoryentry" in text
    ok(call(base_url, operator, "memory_delete", key="motd", scope="global", version=1))
    logged = list(
        LogEntry.objects.filter(user=staff)
        .order_by("action_time")
        .values_list("change_message", flat=True)
    )
    assert logged == ["Stored version 1 (through MCP)", "Deleted version 1 (through MCP)"]


def test_the_admin_shows_who_wrote_an_entry_through_mcp(base_url, owner, staff, client):
    entry = ok(
        call(base_url, token_for(owner), "memory_store", key="pet", value="cat", scope="user")
    )
    client.force_login(staff)
    page = client.get(f"/admin/memory_app/memoryentry/{entry['entry']['id']}/change/")
    assert page.status_code == 200
    assert b"alice" in page.content
    assert b"cat" in page.content
    revisions = client.get("/admin/memory_app/memoryrevision/")
    assert revisions.status_code == 200
    assert b"alice" in revisions.content
    assert b"pet" in revisions.content


def _post(base_url: str, headers: dict[str, str], path: str = "/mcp") -> httpx2.Response:
    return httpx2.post(
        f"{base_url}{path}", json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=10
    )


def test_requests_without_a_working_token_are_401(base_url, owner):
    missing = _post(base_url, {})
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="goaai"'
    assert _post(base_url, {"Authorization": "Basic YWxpY2U6eA=="}).status_code == 401
    unknown = _post(base_url, {"Authorization": "Bearer goa_nonsense"})
    assert unknown.status_code == 401
    assert 'error="invalid_token"' in unknown.headers["www-authenticate"]
    assert _post(base_url, {"Authorization": "Bearer " + "x" * 5000}).status_code == 401

    revoked, raw_revoked = api_token_create(user_id=owner.pk, name="revoked")
    api_token_revoke(token_id=revoked.pk)
    expired, raw_expired = api_token_create(
        user_id=owner.pk, name="expired", expires_at=timezone.now() + dt.timedelta(seconds=1)
    )
    type(expired).objects.filter(pk=expired.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    inactive = UserFactory(username="dinah", is_active=False)
    for raw in (raw_revoked, raw_expired, token_for(inactive)):
        assert _post(base_url, {"Authorization": f"Bearer {raw}"}).status_code == 401

    live = token_for(owner)
    for path in ("/mcp", "/mcp/"):
        answer = _post(base_url, {"Authorization": f"Bearer {live}"}, path)
        assert answer.status_code == 200, answer.text
        assert '"serverInfo"' in answer.text
        assert '"goaai"' in answer.text


def test_a_revoked_token_stops_working_at_once(base_url, owner):
    token, raw = api_token_create(user_id=owner.pk, name="soon revoked")
    ok(call(base_url, raw, "memory_store", key="a", value=1, scope="user"))
    api_token_revoke(token_id=token.pk)
    with pytest.raises(BaseException):  # noqa: B017, PT011 (the SDK raises a group)
        call(base_url, raw, "memory_store", key="b", value=2, scope="user")
    assert list(MemoryEntry.objects.values_list("key", flat=True)) == ["a"]


def test_other_hosts_and_origins_are_refused(base_url, owner):
    bearer = {"Authorization": f"Bearer {token_for(owner)}"}
    # A DNS-rebinding page reaches the server under its own host name.
    assert _post(base_url, {**bearer, "Host": "evil.example"}).status_code == 421
    assert _post(base_url, {**bearer, "Origin": "http://evil.example"}).status_code == 403
    assert _post(base_url, {**bearer, "Origin": "null"}).status_code == 403
    assert _post(base_url, {**bearer, "Origin": base_url}).status_code == 200


def test_an_oversized_body_is_refused_before_it_is_read(base_url, owner, settings):
    settings.GOAAI_API_MAX_BODY_BYTES = 1024
    answer = httpx2.post(
        f"{base_url}/mcp",
        content=b"{" + b" " * 4096 + b"}",
        headers={**MCP_HEADERS, "Authorization": f"Bearer {token_for(owner)}"},
        timeout=10,
    )
    assert answer.status_code == 413
    assert answer.json()["errors"][0]["code"] == "payload_too_large"
