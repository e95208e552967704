"""One seeded session: created, its runs one after the other, ended unless it is
still going, with its event log numbered and its memory as its runs left it."""

from __future__ import annotations

import datetime as dt

from goaai.runtime import payloads
from goaai.runtime.vocabulary import SessionStatus
from runs_app.seeding.log import SessionLog
from runs_app.seeding.memory import SessionMemory
from runs_app.seeding.plan import SESSION_METADATA, Odds, Plan, SessionShape
from runs_app.seeding.runs import Conversation, RunWriter
from runs_app.seeding.tables import Ids, Tables
from sessions_app.models import Session


class SessionWriter:
    def __init__(
        self,
        *,
        plan: Plan,
        tables: Tables,
        odds: Odds,
        ids: Ids,
        runs: RunWriter,
        now: dt.datetime,
    ) -> None:
        self.plan, self.tables, self.odds, self.ids, self.runs = plan, tables, odds, ids, runs
        self.now = now
        self._sessions = tables[Session]

    def write(self, shape: SessionShape, *, owner_id: int, position: float) -> None:
        """Write a session of ``shape``; ``position`` (0 to 1) places its start
        over the plan's past days, the last sessions the most recent."""
        session_id = self.ids.new()
        # Every run fits in ten minutes or so after the one before: start early
        # enough that the last one ends before now.
        span = dt.timedelta(minutes=11 * len(shape.runs) + 5)
        age = dt.timedelta(days=self.plan.days * (1 - position))
        created_at = clock = self.now - span - age
        log = SessionLog(session_id)
        title, metadata = self.odds.title(), dict(SESSION_METADATA)
        created = payloads.session_created(agent=shape.agent, title=title, metadata=metadata)
        log.add(created, run_id=None, at=clock)
        memory = SessionMemory(
            session_id=session_id, tables=self.tables, log=log, odds=self.odds, ids=self.ids
        )
        conversation = Conversation(
            session_id=session_id, owner_id=owner_id, agent=shape.agent, log=log, memory=memory
        )
        for run in shape.runs:
            clock += self.odds.between_runs()
            clock = self.runs.write(run, conversation, clock)
        ended_at = None
        if not shape.active:
            ended_at = min(clock + self.odds.until_ended(), self.now)
            ended = payloads.session_ended(ended_at=ended_at.isoformat(), runs_canceled=0)
            log.add(ended, run_id=None, at=ended_at)
        last_event_seq = log.write(self.tables) if self.plan.events else 0
        memory.write()
        self._sessions.add(
            id=session_id,
            owner_id=owner_id,
            agent=shape.agent,
            title=title,
            metadata=metadata,
            status=SessionStatus.ACTIVE if shape.active else SessionStatus.ENDED,
            last_event_seq=last_event_seq,
            created_at=created_at,
            updated_at=ended_at or clock,
            ended_at=ended_at,
            # Its newest event: its end, else the end of its last run.
            last_activity_at=ended_at or clock,
        )
