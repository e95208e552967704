"""A seeded session's event log: events built by ``goaai.runtime.payloads``, as the
services build them, numbered 1..n in the order they were added."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from goaai.runtime.payloads import Event
from runs_app.seeding.tables import Tables
from sessions_app.models import RunEvent


@dataclass
class SessionLog:
    session_id: UUID
    events: list[tuple[UUID | None, str, dict[str, Any], dt.datetime]] = field(default_factory=list)

    def add(self, event: Event, *, run_id: UUID | None, at: dt.datetime) -> None:
        event_type, data = event
        self.events.append((run_id, event_type, data, at))

    def write(self, tables: Tables) -> int:
        """Give the events their numbers and rows; returns the last number."""
        events = tables[RunEvent]
        for seq, (run_id, event_type, data, at) in enumerate(self.events, start=1):
            events.add(
                session_id=self.session_id,
                run_id=run_id,
                seq=seq,
                type=event_type,
                data=data,
                created_at=at,
            )
        return len(self.events)
