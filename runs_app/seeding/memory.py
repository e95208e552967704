"""A seeded session's memory: what its runs' memory tools stored and forgot, each
change with its revision and its event, as ``memory_app.services`` records them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from goaai.runtime import payloads
from goaai.runtime.vocabulary import MemoryScope, WriterKind
from memory_app.models import MemoryEntry, MemoryRevision, RevisionAction
from runs_app.seeding.log import SessionLog
from runs_app.seeding.plan import Odds
from runs_app.seeding.tables import Ids, Tables


@dataclass
class Entry:
    """A session memory entry as the seeded runs left it."""

    id: UUID
    key: str
    value: str
    version: int
    created_at: dt.datetime
    updated_at: dt.datetime
    expires_at: dt.datetime | None
    run_id: UUID
    tool_call_id: UUID


@dataclass(frozen=True)
class Writer:
    """The tool call of a run that changed memory, and when."""

    run_id: UUID
    tool_call_id: UUID
    at: dt.datetime

    def as_written_by(self) -> dict[str, Any]:
        return payloads.memory_writer(
            user_id=None, run_id=self.run_id, tool_call_id=self.tool_call_id
        )


class SessionMemory:
    def __init__(
        self, *, session_id: UUID, tables: Tables, log: SessionLog, odds: Odds, ids: Ids
    ) -> None:
        self.session_id = session_id
        self.log, self.odds, self.ids = log, odds, ids
        self._entries, self._revisions = tables[MemoryEntry], tables[MemoryRevision]
        self.entries: dict[str, Entry] = {}
        # What each memory tool changes when it succeeds.
        self._changes: dict[str, Callable[[dict[str, Any], Writer], None]] = {
            "memory_store": self._store,
            "memory_forget": self._forget,
        }

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def keys(self) -> list[str]:
        return list(self.entries)

    def facts(self, at: dt.datetime) -> list[tuple[str, str, str]]:
        """What a run starting at ``at`` is told it remembers, as the runtime tells
        it: (scope, key, value) of the live entries, by key."""
        return [
            (MemoryScope.SESSION, entry.key, entry.value)
            for entry in sorted(self.entries.values(), key=lambda entry: entry.key)
            if entry.expires_at is None or entry.expires_at > at
        ]

    def apply(self, tool: str, arguments: dict[str, Any], writer: Writer) -> None:
        """What a call of ``tool`` that succeeded changed, if it changes memory."""
        change = self._changes.get(tool)
        if change is not None:
            change(arguments, writer)

    def _store(self, arguments: dict[str, Any], writer: Writer) -> None:
        key, value, at = arguments["key"], arguments["value"], writer.at
        entry = self.entries.get(key)
        if entry is None:
            expiry = self.odds.expiry()
            entry = self.entries[key] = Entry(
                id=self.ids.new(),
                key=key,
                value=value,
                version=1,
                created_at=at,
                updated_at=at,
                expires_at=None if expiry is None else at + expiry,
                run_id=writer.run_id,
                tool_call_id=writer.tool_call_id,
            )
            action = RevisionAction.CREATED
        else:
            entry.version += 1
            entry.value = value
            entry.updated_at = at
            entry.run_id, entry.tool_call_id = writer.run_id, writer.tool_call_id
            action = RevisionAction.UPDATED
        self._revise(entry.id, key, entry.version, value, action, writer)
        event = payloads.memory_stored(
            entry=entry.id,
            key=key,
            scope=MemoryScope.SESSION,
            version=entry.version,
            action=action,
            written_by=writer.as_written_by(),
        )
        self.log.add(event, run_id=writer.run_id, at=at)

    def _forget(self, arguments: dict[str, Any], writer: Writer) -> None:
        entry = self.entries.pop(arguments["key"])
        self._revise(entry.id, entry.key, entry.version + 1, None, RevisionAction.DELETED, writer)
        event = payloads.memory_deleted(entry=entry.id, key=entry.key, scope=MemoryScope.SESSION)
        self.log.add(event, run_id=writer.run_id, at=writer.at)

    def _revise(
        self,
        entry_id: UUID,
        key: str,
        version: int,
        value: str | None,
        action: RevisionAction,
        writer: Writer,
    ) -> None:
        self._revisions.add(
            entry_id=entry_id,
            key=key,
            scope=MemoryScope.SESSION,
            session_id=self.session_id,
            version=version,
            value=value,
            action=action,
            actor_kind=WriterKind.RUN,
            actor_run_id=writer.run_id,
            actor_tool_call_id=writer.tool_call_id,
            created_at=writer.at,
        )

    def write(self) -> None:
        """The entries' rows, as the session's last run left them."""
        for entry in self.entries.values():
            self._entries.add(
                id=entry.id,
                key=entry.key,
                value=entry.value,
                scope=MemoryScope.SESSION,
                session_id=self.session_id,
                version=entry.version,
                written_by_kind=WriterKind.RUN,
                written_by_run_id=entry.run_id,
                written_by_tool_call_id=entry.tool_call_id,
                expires_at=entry.expires_at,
                created_at=entry.created_at,
                updated_at=entry.updated_at,
            )
