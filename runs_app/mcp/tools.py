"""What each MCP tool does, as the user an API token stands for.

Plain synchronous Django code: :mod:`runs_app.mcp.server` runs each call in a worker
thread. The rules are the REST API's: input is checked by the API's own serializers,
writes go through the same services (recorded with the caller as writer), and an
error says what the REST API would say. Every tool reaches only the caller's own
sessions; another user's session is "no such session", exactly as one that does not
exist. Agent and global memory is read by everyone and written only by operators
with the memory permissions, as through the API.

A refusal is a :class:`ToolError`: the client gets it as a tool result with
``isError`` set and the reason as its text.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Q, QuerySet
from mcp.server.mcpserver.exceptions import ToolError
from rest_framework.exceptions import APIException
from rest_framework.serializers import Serializer
from rest_framework.utils.encoders import JSONEncoder

from goaai.access import ADDITION, CHANGE, DELETION, allowed, log_actions
from goaai.runtime import rt
from goaai.runtime.errors import DuplicateIdempotencyKey, GoaaiError, MemoryConflict, RunActive
from goaai.runtime.vocabulary import MemoryScope, RunStatus
from memory_app import services as memory_services
from memory_app.access import SHARED_SCOPES
from memory_app.api.serializers import MemoryCreateSerializer, MemoryEntrySerializer
from memory_app.models import MemoryEntry
from memory_app.selectors import (
    memory_get,
    memory_resolve,
    memory_resolve_user,
    memory_search,
    memory_search_user,
)
from runs_app.api.serializers import RunCreateSerializer, RunEventSerializer, RunSerializer
from runs_app.api.throttles import RunStartThrottled, run_start_throttle
from runs_app.idempotency import (
    KEY_RULE,
    InvalidIdempotencyKey,
    idempotency_key_checked,
    request_fingerprint,
)
from runs_app.models import Run
from runs_app.selectors import run_for_idempotency_key, with_queue
from runs_app.tasks import QueueUnavailable
from sessions_app.api.serializers import SessionSerializer
from sessions_app.eventlog import events_after
from sessions_app.models import ApiToken, Session
from sessions_app.selectors import sessions_with_usage

MAX_KEY_LENGTH = 200
MAX_QUERY_LENGTH = 1_000
# Writes to shared memory are recorded in the admin log with where they came from.
THROUGH = "(through MCP)"


@dataclass(frozen=True)
class Caller:
    """Whom a request to ``/mcp`` acts for: the user and the API token presented."""

    user: Any
    token: ApiToken


def _document(data: Any) -> Any:
    """A serializer's output as plain JSON values (ids and times as strings)."""
    return json.loads(json.dumps(data, cls=JSONEncoder))


def _messages(detail: Any, field: str = "") -> list[str]:
    if isinstance(detail, dict):
        return [m for name, inner in detail.items() for m in _messages(inner, str(name))]
    if isinstance(detail, list):
        return [m for inner in detail for m in _messages(inner, field)]
    prefix = f"{field}: " if field and field != "non_field_errors" else ""
    return [f"{prefix}{detail}"]


def _validated(serializer: Serializer[Any]) -> dict[str, Any]:
    """The serializer's validated data, or a tool error listing what is wrong."""
    if not serializer.is_valid():
        raise ToolError("; ".join(_messages(serializer.errors)))
    data: dict[str, Any] = serializer.validated_data
    return data


def _check_text(value: str, *, what: str, limit: int) -> str:
    cleaned = value.strip()
    if not cleaned or len(cleaned) > limit or "\x00" in cleaned:
        raise ToolError(f"{what}: 1 to {limit} characters (no NUL).")
    return cleaned


def _own_session(caller: Caller, session_id: UUID) -> Session:
    """The caller's session ``session_id``; someone else's is no session at all."""
    session = Session.objects.filter(pk=session_id, owner=caller.user).first()
    if session is None:
        raise ToolError(f"No session {session_id}.")
    return session


def _entry(entry: MemoryEntry | None) -> dict[str, Any] | None:
    return None if entry is None else _document(MemoryEntrySerializer(entry).data)


def _conflict(exc: MemoryConflict) -> ToolError:
    """A version conflict, with the entry as it is now for the caller to retry on."""
    current = _entry(exc.current)
    return ToolError(f"version_conflict: {exc} The entry now: {json.dumps(current)}")


def _memory_owner(
    caller: Caller, *, scope: str, session: UUID | None, agent: str
) -> tuple[dict[str, Any], int | None]:
    """The owner fields of an entry of ``scope`` the caller names, and the user it
    belongs to (``None`` for agent and global memory)."""
    if scope != MemoryScope.SESSION and session is not None:
        raise ToolError(f"A {scope}-scoped entry names no session; leave `session` out.")
    if scope != MemoryScope.AGENT and agent:
        raise ToolError(f"A {scope}-scoped entry names no agent; leave `agent` out.")
    if scope == MemoryScope.SESSION:
        if session is None:
            raise ToolError("Session scope needs `session`: one of your sessions.")
        return {"session_id": _own_session(caller, session).pk}, caller.user.pk
    if scope == MemoryScope.USER:
        return {"user_id": caller.user.pk}, caller.user.pk
    if scope == MemoryScope.AGENT:
        if not agent:
            raise ToolError("Agent scope needs `agent`.")
        return {"agent": agent}, None
    return {}, None


def _require(caller: Caller, action: str, owner_id: int | None, scope: str) -> None:
    if not allowed(caller.user, MemoryEntry, action, owner_id):
        raise ToolError(
            f"You may not {action} {scope} memory: that takes the "
            f"memory_app.{action}_memoryentry permission."
        )


def memory_store(
    caller: Caller,
    *,
    key: str,
    value: Any,
    scope: str,
    session: UUID | None,
    agent: str,
    version: int | None,
    expires_at: dt.datetime | None,
) -> dict[str, Any]:
    """Create or update an entry; ``version`` as the service takes it (``None``
    writes whatever is there, ``0`` only creates, ``n`` only updates version n)."""
    data = _validated(
        MemoryCreateSerializer(
            data={
                "key": key,
                "value": value,
                "scope": scope,
                "agent": agent,
                "expires_at": expires_at,
            }
        )
    )
    owner, owner_id = _memory_owner(caller, scope=scope, session=session, agent=data["agent"])
    if scope in SHARED_SCOPES:
        exists = memory_get(key=data["key"].strip(), scope=scope, **owner) is not None
        _require(caller, "change" if exists else "add", None, scope)
    try:
        entry = memory_services.memory_store(
            key=data["key"],
            value=data["value"],
            scope=scope,
            expected_version=version,
            expires_at=data["expires_at"],
            written_by_user_id=caller.user.pk,
            **owner,
        )
    except MemoryConflict as exc:
        raise _conflict(exc) from None
    except GoaaiError as exc:
        raise ToolError(str(exc)) from None
    if owner_id is None:
        flag = ADDITION if entry.version == 1 else CHANGE
        log_actions(caller.user, [entry], flag, f"Stored version {entry.version} {THROUGH}")
    return {"entry": _entry(entry)}


def memory_get_tool(
    caller: Caller, *, key: str, session: UUID | None, agent: str
) -> dict[str, Any]:
    """The entry read for ``key``: in a session, the session's own, else its user's,
    its agent's or the global one; outside any session, the caller's own, else
    ``agent``'s, else the global one."""
    key = _check_text(key, what="key", limit=MAX_KEY_LENGTH)
    if session is not None:
        found = _own_session(caller, session)
        if agent and agent != found.agent:
            raise ToolError(
                f"Session {found.pk} talks to agent {found.agent!r}: its agent memory is "
                f"that one's; leave `agent` out."
            )
        entry = memory_resolve(key=key, session_id=found.pk)
    else:
        entry = memory_resolve_user(key=key, user_id=caller.user.pk, agent=agent)
    return {"key": key, "found": entry is not None, "entry": _entry(entry)}


def memory_search_tool(
    caller: Caller, *, query: str, limit: int, session: UUID | None
) -> dict[str, Any]:
    """The facts matching ``query``, best first: those a run in ``session`` reads,
    or outside any session the caller's own and the global ones."""
    query = _check_text(query, what="query", limit=MAX_QUERY_LENGTH)
    if session is not None:
        found = memory_search(session_id=_own_session(caller, session).pk, query=query, limit=limit)
    else:
        found = memory_search_user(user_id=caller.user.pk, query=query, limit=limit)
    results = [{"key": key, "value": value, "scope": scope} for scope, key, value in found]
    return {"query": query, "results": results}


def memory_delete(
    caller: Caller,
    *,
    key: str,
    scope: str,
    version: int,
    session: UUID | None,
    agent: str,
) -> dict[str, Any]:
    """Delete an entry still at ``version``; its history is kept."""
    key = _check_text(key, what="key", limit=MAX_KEY_LENGTH)
    owner, owner_id = _memory_owner(caller, scope=scope, session=session, agent=agent)
    if owner_id is None:
        _require(caller, "delete", None, scope)
    try:
        with transaction.atomic():
            # Logged first, while the entry is still there to be named; a delete
            # that is refused rolls the record back.
            entry = memory_get(key=key, scope=scope, **owner) if owner_id is None else None
            if entry is not None:
                message = f"Deleted version {entry.version} {THROUGH}"
                log_actions(caller.user, [entry], DELETION, message)
            deleted = memory_services.memory_delete(
                key=key,
                scope=scope,
                expected_version=version,
                written_by_user_id=caller.user.pk,
                **owner,
            )
            if not deleted:
                raise ToolError(f"No {scope} entry {key!r}.")
    except MemoryConflict as exc:
        raise _conflict(exc) from None
    except GoaaiError as exc:
        raise ToolError(str(exc)) from None
    return {"deleted": True, "key": key, "scope": scope}


def _cursor(session: Session) -> str:
    position = json.dumps([session.created_at.isoformat(), str(session.pk)])
    return base64.urlsafe_b64encode(position.encode()).decode()


def _after_cursor(sessions: QuerySet[Session], cursor: str) -> QuerySet[Session]:
    """The sessions after the one ``cursor`` points at (newest first)."""
    try:
        created, pk = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        created_at, session_id = dt.datetime.fromisoformat(created), UUID(pk)
    except (ValueError, TypeError, binascii.Error, UnicodeEncodeError):
        raise ToolError("`cursor` is not one sessions_list gave.") from None
    if created_at.tzinfo is None:
        raise ToolError("`cursor` is not one sessions_list gave.")
    return sessions.filter(
        Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=session_id)
    )


def sessions_list(
    caller: Caller, *, limit: int, cursor: str | None, status: str | None
) -> dict[str, Any]:
    """The caller's sessions, newest first, a page at a time."""
    sessions = sessions_with_usage(
        Session.objects.filter(owner=caller.user).select_related("owner")
    ).order_by("-created_at", "-pk")
    if status is not None:
        sessions = sessions.filter(status=status)
    if cursor:
        sessions = _after_cursor(sessions, cursor)
    page = list(sessions[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return {
        "sessions": _document(SessionSerializer(page, many=True).data),
        "next_cursor": _cursor(page[-1]) if more else None,
    }


def session_events(caller: Caller, *, session: UUID, after: int, limit: int) -> dict[str, Any]:
    """The session's events with ``seq > after``, oldest first."""
    found = _own_session(caller, session)
    events = list(events_after(session_id=found.pk, after=after, limit=limit))
    return {
        "session": str(found.pk),
        "events": _document(RunEventSerializer(events, many=True).data),
        # Where to go on from; the same ``after`` when there was nothing new.
        "next_after": events[-1].seq if events else after,
        "caught_up": len(events) < limit,
    }


def _check_throttles(caller: Caller) -> None:
    """The REST API's limits on starting runs (per user, per token), counted alike."""
    try:
        run_start_throttle(user=caller.user, token=caller.token)
    except RunStartThrottled as refused:
        later = f" Retry in {int(refused.wait) + 1} s." if refused.wait is not None else ""
        raise ToolError(f"rate_limited: too many runs started.{later}") from None
    except APIException as exc:  # the counters are unavailable (503 in the API)
        raise ToolError(str(exc.detail)) from None


def _check_idempotency_key(key: str | None, session: UUID | None) -> None:
    try:
        idempotency_key_checked(key)
    except InvalidIdempotencyKey:
        raise ToolError(f"idempotency_key: {KEY_RULE}.") from None
    if key is not None and session is None:
        raise ToolError("idempotency_key: keys are per session; name the `session`.")


def _run_session(caller: Caller, session: UUID | None, agent: str | None) -> Session:
    if (session is None) == (agent is None):
        raise ToolError("Name either `session` (to continue it) or `agent` (to start one).")
    if session is not None:
        return _own_session(caller, session)
    try:
        info = rt.create_session(owner=caller.user, agent=agent or "")
    except GoaaiError as exc:
        raise ToolError(str(exc)) from None
    return Session.objects.get(pk=info.id)


def _replay(run: Run, fingerprint: str) -> UUID:
    if run.request_fingerprint != fingerprint:
        raise ToolError(
            "idempotency_key_reused: this key was used for a different request in this session."
        )
    return run.pk


def run_start(
    caller: Caller,
    *,
    input: str,
    session: UUID | None,
    agent: str | None,
    labels: dict[str, str] | None,
    metadata: dict[str, Any] | None,
    multitask: str | None,
    idempotency_key: str | None,
) -> UUID:
    """Start a run in the caller's session, or in a new session with ``agent``;
    returns its id. The same ``idempotency_key`` and arguments give the same run."""
    body: dict[str, Any] = {"input": input, "labels": labels or {}, "metadata": metadata or {}}
    if multitask is not None:
        body["multitask"] = multitask
    data = _validated(RunCreateSerializer(data=body))
    _check_idempotency_key(idempotency_key, session)
    fingerprint = request_fingerprint(data) if idempotency_key else ""
    if session is not None and idempotency_key is not None:
        earlier = run_for_idempotency_key(
            session_id=_own_session(caller, session).pk, key=idempotency_key
        )
        if earlier is not None:
            return _replay(earlier, fingerprint)
    _check_throttles(caller)
    try:
        # A session made for this run goes with it if the run cannot start. (The
        # run is handed to the queue once this commits: a queue that is down
        # leaves both recorded, and the run starts once it is back.)
        with transaction.atomic():
            found = _run_session(caller, session, agent)
            handle = rt.start(
                found.agent,
                data["input"],
                session=found.pk,
                labels=data["labels"],
                metadata=data["metadata"],
                created_by=caller.user,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                multitask=data.get("multitask"),
            )
    except DuplicateIdempotencyKey:
        # Two calls with the same key raced; the other one created the run (in the
        # caller's own session: a key needs one, so none was made here).
        earlier = run_for_idempotency_key(session_id=found.pk, key=idempotency_key or "")
        if earlier is None:
            raise
        return _replay(earlier, fingerprint)
    except RunActive as exc:
        raise ToolError(f"run_active: {exc} The active run: {exc.active_run_id}.") from None
    except QueueUnavailable as exc:
        raise ToolError(
            f"The run queue is unavailable for a moment. Run {exc.run_id} is recorded and "
            "starts once the queue is back."
        ) from None
    except GoaaiError as exc:
        raise ToolError(str(exc)) from None
    return handle.run_id


def run_settled(run_id: UUID) -> bool:
    """Whether the run has ended or waits for a person (what ``run_start`` waits
    for); one short query, so that a waiting call holds no thread between looks."""
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    return status is None or status == RunStatus.AWAITING_INPUT or RunStatus(status).is_terminal


def run_document(run_id: UUID) -> dict[str, Any]:
    """The run as ``GET /api/v1/runs/{id}/`` shows it, without its turns."""
    run = with_queue(Run.objects.filter(pk=run_id)).get()
    return {
        "run": _document(RunSerializer(run).data),
        "session": str(run.session_id),
        "finished": run.ended_at is not None,
    }
