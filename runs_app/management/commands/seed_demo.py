"""Synthetic conversations in bulk, for demos and for measuring the admin at scale.

    python manage.py seed_demo --sessions 500 --runs-per-session 5 --turns-per-run 3 \\
        --calls-per-turn 2 [--users 3] [--seed 1] [--no-events] [--no-memory]

Every run has ``--turns-per-run`` turns: each turn but the last asks for
``--calls-per-turn`` tool calls, and the last one answers (or is where a failed or
canceled run stopped). So the data set has sessions * runs * (turns - 1) * calls
tool calls exactly. A run awaiting input stops at the approval its last tool call
waits for, one turn short.

The rows are what the runtime would have written: sessions owned by ``demo-user-N``
users, runs mostly completed with some failed (with an error kind), canceled or
awaiting input, labelled ``tier: free|paid``; turns with their request messages
and responses; tool calls of the agents' tools with arguments, results, errors
and durations; the session's event log numbered 1..n in the order a run writes it
(``last_event_seq`` set to match); session memory written by ``memory_store``
calls, with its revisions. Timestamps are spread over the past ``--days`` days.

It writes with ``COPY`` on PostgreSQL and with ``executemany`` on SQLite, one
transaction per chunk of sessions (about 20,000 tool calls), without going through
the services: it makes history, it does not run agents. On PostgreSQL a million
tool calls with their 6.6 million events take 6.5 minutes on a quiet 2-core machine
(13 on a busy one), the database's index maintenance being most of it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, models, transaction
from django.utils import timezone

from goaai.runtime import rt
from goaai.runtime.vocabulary import (
    ErrorKind,
    EventType,
    MemoryScope,
    RunStatus,
    ToolCallStatus,
)
from memory_app.models import MemoryEntry, MemoryRevision, RevisionAction, WriterKind
from runs_app.models import Run, RunEvent, ToolCall, Turn
from sessions_app.models import Session, SessionStatus

E = EventType

# Tools that start other runs or wait for a person do not fit a run that is
# replayed as finished; ``memory_forget_all`` (which needs approval) is what the
# runs awaiting input wait for.
_SKIPPED_TOOLS = ("ask_", "memory_forget_all")
APPROVAL_TOOL = "memory_forget_all"

MODELS = ("gpt-4o-mini", "claude-3-5-haiku", "gpt-4.1")
SYSTEM_PROMPT = (
    "You are goaai's {agent}. Use your tools when they help: memory for facts about "
    "the user, the calculator for arithmetic, the clock for the time. Answer briefly."
)
MEMORY_KEYS = ("favourite colour", "name", "home city", "preferred language", "coffee order")
MEMORY_VALUES = ("green", "Ada", "Lisbon", "Portuguese", "flat white", "blue", "Grace", "Oslo")
TIME_ZONES = ("UTC", "Europe/Rome", "America/New_York", "Asia/Tokyo", "Australia/Sydney")
QUESTIONS = (
    "what is {a} * ({b} + {c})?",
    "remember that my {key} is {value}",
    "what time is it in {tz}?",
    "do you remember my {key}?",
    "please forget my {key}",
    "repeat after me: {value}",
)
RUN_ERRORS = (
    (ErrorKind.UNAVAILABLE, "The model provider is unavailable (503).", True),
    (ErrorKind.RATE_LIMITED, "The model provider refused the request: rate limited.", True),
    (ErrorKind.TIMEOUT, "The model did not answer within 60 s.", True),
    (ErrorKind.INTERNAL, "The model's reply could not be read.", False),
)
CANCEL_REASONS = ("canceled by the user", "canceled by operator demo-admin", "session_ended")


class _Table:
    """Rows for one model's table, in the order of its columns, written in bulk."""

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        # Auto-incremented ids are left to the database.
        self.fields = [
            f
            for f in model._meta.concrete_fields
            if not (f.primary_key and isinstance(f, models.AutoField | models.BigAutoField))
        ]
        self.names = [f.attname for f in self.fields]
        # A blank string for text columns, the model's default where it has one.
        self.defaults: dict[str, Any] = {f.attname: f.get_default() for f in self.fields}
        self.json_positions = [
            i for i, f in enumerate(self.fields) if isinstance(f, models.JSONField)
        ]
        self.rows: list[list[Any]] = []

    def add(self, **values: Any) -> None:
        row = self.defaults | values
        if len(row) != len(self.defaults):
            unknown = set(values) - set(self.defaults)
            raise TypeError(f"{self.model.__name__} has no column {sorted(unknown)}")
        self.rows.append([row[name] for name in self.names])

    def flush(self) -> int:
        rows, self.rows = self.rows, []
        if not rows:
            return 0
        quote = connection.ops.quote_name
        table = quote(self.model._meta.db_table)
        columns = ", ".join(quote(f.column) for f in self.fields)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                    for row in rows:
                        for i in self.json_positions:
                            if row[i] is not None:
                                row[i] = json.dumps(row[i])
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(self.fields))
                sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"  # noqa: S608 (names from model metadata)
                prepared = [
                    [
                        f.get_db_prep_save(value, connection)
                        for f, value in zip(self.fields, row, strict=True)
                    ]
                    for row in rows
                ]
                cursor.executemany(sql, prepared)
        return len(rows)


@dataclass
class _Memory:
    """A session memory entry as the seeded run left it."""

    id: uuid.UUID
    key: str
    value: str
    version: int
    created_at: dt.datetime
    updated_at: dt.datetime
    expires_at: dt.datetime | None
    run_id: uuid.UUID
    tool_call_id: uuid.UUID


@dataclass
class _SessionLog:
    """The events of one session, numbered when the session is written."""

    events: list[tuple[uuid.UUID | None, str, dict[str, Any], dt.datetime]] = field(
        default_factory=list
    )

    def add(
        self, run_id: uuid.UUID | None, type: str, data: dict[str, Any], at: dt.datetime
    ) -> None:
        self.events.append((run_id, type, data, at))


@dataclass
class Plan:
    sessions: int
    runs_per_session: int
    turns_per_run: int
    calls_per_turn: int
    users: int
    days: float
    active_fraction: float
    events: bool
    memory: bool


class Seeder:
    """Generates the rows of ``plan`` and writes them, a chunk of sessions per
    transaction. ``seed`` fixes the content; ids are always fresh, so seeding twice
    adds to what is there."""

    def __init__(self, plan: Plan, *, seed: int, now: dt.datetime | None = None) -> None:
        self.plan = plan
        self.rng = random.Random(seed)  # noqa: S311 (made-up data, not secrets)
        # System-seeded: new ids on every invocation, whatever the seed.
        self._ids = random.Random()  # noqa: S311
        self.now = now or timezone.now()
        self.tables = {
            model: _Table(model)
            for model in (Session, Run, Turn, ToolCall, RunEvent, MemoryEntry, MemoryRevision)
        }
        self.counts = {model._meta.model_name or "": 0 for model in self.tables}
        self.tools = {
            agent.id: [
                name
                for name in rt.agents.tools_of(agent)
                if not name.startswith(_SKIPPED_TOOLS)
                and (plan.memory or not name.startswith("memory_"))
            ]
            for agent in rt.agents.all()
        }
        self.agents = [agent for agent, tools in self.tools.items() if tools] or ["assistant"]
        self.agent_weights = [8 if agent == "assistant" else 1 for agent in self.agents]
        self.approval_agents = {
            agent.id for agent in rt.agents.all() if APPROVAL_TOOL in rt.agents.tools_of(agent)
        }
        self._policies: dict[tuple[str, str], tuple[dict[str, Any], list[Any]]] = {}

    # Helpers

    def new_id(self) -> uuid.UUID:
        return uuid.UUID(int=self._ids.getrandbits(128), version=4)

    def _policy(self, agent: str, tier: str) -> tuple[dict[str, Any], list[Any]]:
        key = (agent, tier)
        if key not in self._policies:
            policy, decisions = rt.policy_for(rt.agents.get(agent), {"tier": tier})
            self._policies[key] = (policy.as_dict(), decisions)
        return self._policies[key]

    # Writing

    def run(self, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        owners = self._owners()
        calls_per_session = max(
            1,
            self.plan.runs_per_session
            * max(self.plan.turns_per_run - 1, 1)
            * max(self.plan.calls_per_turn, 1),
        )
        # About 20,000 tool calls (and their turns and events) per transaction.
        chunk = max(1, 20_000 // calls_per_session)
        done = 0
        while done < self.plan.sessions:
            size = min(chunk, self.plan.sessions - done)
            with transaction.atomic():
                for number in range(done, done + size):
                    # Sessions start in order over the past days, as if recorded live:
                    # rows are stored in about the order of their times, as they are
                    # on a real database.
                    position = (number + self.rng.random()) / self.plan.sessions
                    self._session(self.rng.choice(owners), position)
                for model, table in self.tables.items():
                    self.counts[model._meta.model_name or ""] += table.flush()
            done += size
            if progress is not None:
                progress(done, self.plan.sessions)
        return self.counts

    def _owners(self) -> list[int]:
        user_model = get_user_model()
        owners = []
        for number in range(1, self.plan.users + 1):
            user, created = user_model.objects.get_or_create(
                username=f"demo-user-{number}",
                defaults={"email": f"demo-user-{number}@example.com"},
            )
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            owners.append(user.pk)
        return owners

    # Generation

    def _session(self, owner_id: int, position: float) -> None:
        plan, rng = self.plan, self.rng
        session_id = self.new_id()
        # Most conversations are with the main assistant.
        agent = rng.choices(self.agents, weights=self.agent_weights)[0]
        active = rng.random() < plan.active_fraction
        # Every run fits in ten minutes or so after the one before: start early
        # enough that the last one ends before now.
        span = dt.timedelta(minutes=11 * plan.runs_per_session + 5)
        age = dt.timedelta(days=plan.days * (1 - position))
        clock = self.now - span - age
        created_at = clock
        log = _SessionLog()
        title = f"Demo conversation {rng.randrange(1_000_000)}"
        metadata = {"source": "seed_demo"}
        log.add(
            None, E.SESSION_CREATED, {"agent": agent, "title": title, "metadata": metadata}, clock
        )
        memory: dict[str, _Memory] = {}
        for number in range(plan.runs_per_session):
            last = number == plan.runs_per_session - 1
            clock += dt.timedelta(seconds=rng.uniform(5, 600))
            status = self._run_status(agent, awaiting_allowed=active and last)
            clock = self._run(session_id, owner_id, agent, status, clock, log, memory)
        ended_at = None
        if not active:
            ended_at = min(clock + dt.timedelta(minutes=rng.uniform(1, 60)), self.now)
            log.add(
                None,
                E.SESSION_ENDED,
                {"ended_at": ended_at.isoformat(), "runs_canceled": 0},
                ended_at,
            )
        if plan.events:
            events = self.tables[RunEvent]
            for seq, (run_id, type, data, at) in enumerate(log.events, start=1):
                events.add(
                    session_id=session_id,
                    run_id=run_id,
                    seq=seq,
                    type=type,
                    data=data,
                    created_at=at,
                )
        for entry in memory.values():
            self.tables[MemoryEntry].add(
                id=entry.id,
                key=entry.key,
                value=entry.value,
                scope=MemoryScope.SESSION,
                session_id=session_id,
                version=entry.version,
                written_by_kind=WriterKind.RUN,
                written_by_run_id=entry.run_id,
                written_by_tool_call_id=entry.tool_call_id,
                expires_at=entry.expires_at,
                created_at=entry.created_at,
                updated_at=entry.updated_at,
            )
        self.tables[Session].add(
            id=session_id,
            owner_id=owner_id,
            agent=agent,
            title=title,
            metadata=metadata,
            status=SessionStatus.ACTIVE if active else SessionStatus.ENDED,
            last_event_seq=len(log.events) if plan.events else 0,
            created_at=created_at,
            updated_at=ended_at or clock,
            ended_at=ended_at,
        )

    def _run_status(self, agent: str, *, awaiting_allowed: bool) -> RunStatus:
        plan, roll = self.plan, self.rng.random()
        can_wait = (
            awaiting_allowed
            and agent in self.approval_agents
            and plan.turns_per_run >= 2
            and plan.calls_per_turn >= 1
        )
        if can_wait and roll < 0.5:
            return RunStatus.AWAITING_INPUT
        if roll > 0.95:
            return RunStatus.CANCELED
        if roll > 0.87:
            return RunStatus.FAILED
        return RunStatus.COMPLETED

    def _question(self) -> str:
        rng = self.rng
        return rng.choice(QUESTIONS).format(
            a=rng.randrange(2, 50),
            b=rng.randrange(1, 20),
            c=rng.randrange(1, 20),
            key=rng.choice(MEMORY_KEYS),
            value=rng.choice(MEMORY_VALUES),
            tz=rng.choice(TIME_ZONES),
        )

    def _run(
        self,
        session_id: uuid.UUID,
        owner_id: int,
        agent: str,
        status: RunStatus,
        clock: dt.datetime,
        log: _SessionLog,
        memory: dict[str, _Memory],
    ) -> dt.datetime:
        plan, rng = self.plan, self.rng
        run_id = self.new_id()
        tier = "paid" if rng.random() < 0.3 else "free"
        labels = {"tier": tier}
        policy, decisions = self._policy(agent, tier)
        question = self._question()
        model = rng.choice(MODELS)
        created_at = clock
        log.add(
            run_id,
            E.RUN_CREATED,
            {"agent": agent, "input": question, "labels": labels, "parent_run": None},
            clock,
        )
        for decision in decisions:
            log.add(
                run_id,
                E.POLICY_DECISION,
                {"rule": decision.rule, "verdict": decision.verdict, "reason": decision.reason},
                clock,
            )
        clock += dt.timedelta(milliseconds=rng.uniform(5, 400))
        started_at = clock
        log.add(run_id, E.RUN_STARTED, {"agent": agent, "worker": "demo-worker-1"}, clock)

        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT.format(agent=agent)},
            {"role": "user", "content": question},
        ]
        input_tokens = output_tokens = 0
        output = ""
        awaiting: dict[str, Any] | None = None
        run_changes: dict[str, Any] = {}
        turns = plan.turns_per_run
        if status == RunStatus.AWAITING_INPUT:
            turns -= 1
        for index in range(turns):
            final = index == plan.turns_per_run - 1
            turn_id = self.new_id()
            turn_started = clock
            log.add(
                run_id,
                E.TURN_STARTED,
                {"turn": str(turn_id), "index": index, "model": model},
                clock,
            )
            request = list(messages)
            if final and status in (RunStatus.FAILED, RunStatus.CANCELED):
                # The run stopped while the model was thinking: the turn never ended.
                clock += dt.timedelta(milliseconds=rng.uniform(200, 5000))
                self.tables[Turn].add(
                    id=turn_id,
                    run_id=run_id,
                    index=index,
                    model=model,
                    request_messages=request,
                    started_at=turn_started,
                )
                if status == RunStatus.FAILED:
                    kind, message, retryable = rng.choice(RUN_ERRORS)
                    run_changes = {
                        "error_kind": kind,
                        "error_message": message,
                        "error_retryable": retryable,
                    }
                    log.add(
                        run_id,
                        E.RUN_FAILED,
                        {"error": {"kind": kind, "message": message, "retryable": retryable}},
                        clock,
                    )
                else:
                    reason = rng.choice(CANCEL_REASONS)
                    run_changes = {"cancel_requested_at": clock, "cancel_reason": reason}
                    log.add(run_id, E.RUN_CANCELED, {"reason": reason}, clock)
                break
            latency = int(rng.uniform(300, 4000))
            clock += dt.timedelta(milliseconds=latency)
            turn_in = 40 + sum(len(str(m.get("content", ""))) for m in messages) // 4
            turn_out = int(rng.uniform(5, 60))
            input_tokens += turn_in
            output_tokens += turn_out
            usage = {
                "turn": str(turn_id),
                "input_tokens": turn_in,
                "output_tokens": turn_out,
                "total_tokens": turn_in + turn_out,
            }
            if final:
                output = self._answer(question)
                self.tables[Turn].add(
                    id=turn_id,
                    run_id=run_id,
                    index=index,
                    model=model,
                    request_messages=request,
                    response_text=output,
                    response_tool_calls=[],
                    input_tokens=turn_in,
                    output_tokens=turn_out,
                    latency_ms=latency,
                    started_at=turn_started,
                    ended_at=clock,
                )
                turn_done = {
                    "turn": str(turn_id),
                    "index": index,
                    "tool_calls": 0,
                    "latency_ms": latency,
                }
                log.add(run_id, E.TURN_COMPLETED, turn_done, clock)
                log.add(
                    run_id,
                    E.MESSAGE_COMPLETED,
                    {"turn": str(turn_id), "role": "assistant", "text": output},
                    clock,
                )
                log.add(run_id, E.USAGE, usage, clock)
                break
            waits_here = status == RunStatus.AWAITING_INPUT and index == turns - 1
            names = [rng.choice(self.tools[agent]) for _ in range(plan.calls_per_turn)]
            if waits_here:
                names[-1] = APPROVAL_TOOL
            requests = [
                {
                    "id": f"call_{index}_{position}",
                    "name": name,
                    "arguments": self._arguments(name, memory),
                }
                for position, name in enumerate(names)
            ]
            self.tables[Turn].add(
                id=turn_id,
                run_id=run_id,
                index=index,
                model=model,
                request_messages=request,
                response_text="",
                response_tool_calls=requests,
                input_tokens=turn_in,
                output_tokens=turn_out,
                latency_ms=latency,
                started_at=turn_started,
                ended_at=clock,
            )
            turn_done = {
                "turn": str(turn_id),
                "index": index,
                "tool_calls": len(requests),
                "latency_ms": latency,
            }
            log.add(run_id, E.TURN_COMPLETED, turn_done, clock)
            log.add(run_id, E.USAGE, usage, clock)
            messages.append({"role": "assistant", "content": "", "tool_calls": requests})
            for position, call in enumerate(requests):
                call_uuid = self.new_id()
                if waits_here and position == len(requests) - 1:
                    awaiting = {"kind": "approval", "tool_call": str(call_uuid)}
                    clock = self._awaiting_call(
                        run_id, turn_id, session_id, position, call, call_uuid, clock, log
                    )
                    log.add(run_id, E.RUN_AWAITING_INPUT, awaiting, clock)
                    break
                clock, outcome = self._call(
                    run_id, turn_id, session_id, position, call, call_uuid, clock, log, memory
                )
                messages.append(
                    {
                        "role": "tool",
                        "content": json.dumps(outcome),
                        "tool_call_id": call["id"],
                        "name": call["name"],
                    }
                )
        total = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }
        if status == RunStatus.COMPLETED:
            log.add(run_id, E.RUN_COMPLETED, {"output": output, "usage": total}, clock)
        self.tables[Run].add(
            id=run_id,
            session_id=session_id,
            agent=agent,
            input=question,
            output=output,
            status=status,
            labels=labels,
            metadata={},
            policy=policy,
            created_by_id=owner_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
            awaiting=awaiting,
            awaiting_since=clock if awaiting else None,
            created_at=created_at,
            started_at=started_at,
            ended_at=None if awaiting else clock,
            updated_at=clock,
            **run_changes,
        )
        return clock

    def _answer(self, question: str) -> str:
        return self.rng.choice(
            (
                "Done.",
                "Here you are: {q}",
                "I looked it up for you. {q}",
                "Got it, I'll keep that in mind.",
            )
        ).format(q=question.capitalize())

    def _arguments(self, name: str, memory: dict[str, _Memory]) -> dict[str, Any]:
        rng = self.rng
        if name == "calculator":
            divisor = 0 if rng.random() < 0.05 else rng.randrange(1, 9)
            return {
                "expression": f"{rng.randrange(2, 99)} * ({rng.randrange(1, 30)} + 4) / {divisor}"
            }
        if name == "clock_now":
            zone = "Mars/Olympus_Mons" if rng.random() < 0.03 else rng.choice(TIME_ZONES)
            return {"timezone": zone}
        if name == "echo":
            return {"text": f"Repeat after me: {rng.choice(MEMORY_VALUES)}"}
        if name == "memory_store":
            return {
                "key": rng.choice(MEMORY_KEYS),
                "value": rng.choice(MEMORY_VALUES),
                "scope": "session",
            }
        if name in ("memory_recall", "memory_forget"):
            # Mostly about something the session did store; sometimes not.
            known = list(memory)
            if known and rng.random() < 0.7:
                return {"key": rng.choice(known)}
            return {"key": rng.choice(MEMORY_KEYS)}
        return {}

    def _call(
        self,
        run_id: uuid.UUID,
        turn_id: uuid.UUID,
        session_id: uuid.UUID,
        position: int,
        call: dict[str, Any],
        call_uuid: uuid.UUID,
        clock: dt.datetime,
        log: _SessionLog,
        memory: dict[str, _Memory],
    ) -> tuple[dt.datetime, dict[str, Any]]:
        """One tool call, scheduled, started and finished; returns the clock after it
        and what the model was told."""
        rng = self.rng
        name, arguments = call["name"], call["arguments"]
        created_at = clock
        log.add(
            run_id,
            E.TOOL_CALL_SCHEDULED,
            {
                "tool_call": str(call_uuid),
                "name": name,
                "arguments": arguments,
                "requires_approval": False,
            },
            clock,
        )
        log.add(
            run_id,
            E.TOOL_CALL_STARTED,
            {"tool_call": str(call_uuid), "name": name, "attempt": 1},
            clock,
        )
        duration = int(rng.uniform(1, 800) if name != "memory_store" else rng.uniform(2, 40))
        clock += dt.timedelta(milliseconds=duration)
        result, error = self._outcome(name, arguments, memory)
        if rng.random() < 0.01:
            result, error = None, (ErrorKind.TIMEOUT, f"{name} took longer than 30 s.")
        if error is None and name in ("memory_store", "memory_forget"):
            self._remember(run_id, call_uuid, session_id, name, arguments, clock, log, memory)
        data: dict[str, Any] = {"tool_call": str(call_uuid), "name": name, "duration_ms": duration}
        if error is None:
            data["result"] = result
            log.add(run_id, E.TOOL_CALL_SUCCEEDED, data, clock)
        else:
            data["error"] = {"kind": error[0], "message": error[1]}
            log.add(run_id, E.TOOL_CALL_FAILED, data, clock)
        self.tables[ToolCall].add(
            id=call_uuid,
            run_id=run_id,
            turn_id=turn_id,
            session_id=session_id,
            call_id=call["id"],
            index=position,
            name=name,
            arguments=arguments,
            result=result,
            status=ToolCallStatus.SUCCEEDED if error is None else ToolCallStatus.FAILED,
            error_kind="" if error is None else error[0],
            error_message="" if error is None else error[1],
            attempt=1,
            created_at=created_at,
            started_at=created_at,
            ended_at=clock,
            duration_ms=duration,
        )
        told: dict[str, Any] = (
            {"ok": True, "result": result} if error is None else {"ok": False, "error": error[1]}
        )
        return clock, told

    def _outcome(
        self, name: str, arguments: dict[str, Any], memory: dict[str, _Memory]
    ) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
        if name == "calculator":
            expression = arguments["expression"]
            if expression.endswith("/ 0"):
                return None, (ErrorKind.DOMAIN_REJECTION, "Division by zero.")
            return {"expression": expression, "value": round(eval_simple(expression), 4)}, None
        if name == "clock_now":
            zone = arguments["timezone"]
            if zone.startswith("Mars/"):
                return None, (ErrorKind.DOMAIN_REJECTION, f"Unknown time zone {zone!r}.")
            now = self.now - dt.timedelta(minutes=self.rng.randrange(0, 60 * 24 * 28))
            return {
                "iso": now.isoformat(timespec="seconds"),
                "timezone": zone,
                "weekday": now.strftime("%A"),
            }, None
        if name == "echo":
            return {"text": arguments["text"]}, None
        if name == "memory_store":
            key = arguments["key"]
            version = memory[key].version + 1 if key in memory else 1
            return {
                "key": key,
                "value": arguments["value"],
                "scope": "session",
                "version": version,
            }, None
        if name == "memory_recall":
            key = arguments["key"]
            if key not in memory:
                return {"key": key, "found": False}, None
            return {"key": key, "found": True, "value": memory[key].value, "scope": "session"}, None
        if name == "memory_forget":
            key = arguments["key"]
            if key not in memory:
                message = f"Nothing is remembered under {key!r} in the session scope."
                return None, (ErrorKind.DOMAIN_REJECTION, message)
            return {"key": key, "scope": "session", "forgotten": True}, None
        return {"ok": True}, None

    def _remember(
        self,
        run_id: uuid.UUID,
        call_uuid: uuid.UUID,
        session_id: uuid.UUID,
        name: str,
        arguments: dict[str, Any],
        clock: dt.datetime,
        log: _SessionLog,
        memory: dict[str, _Memory],
    ) -> None:
        """What a memory tool call changes: the entry, a revision, an event."""
        key = arguments["key"]
        writer = {
            "kind": WriterKind.RUN,
            "user_id": None,
            "run_id": str(run_id),
            "tool_call_id": str(call_uuid),
        }
        revisions = self.tables[MemoryRevision]
        common = {
            "key": key,
            "scope": MemoryScope.SESSION,
            "session_id": session_id,
            "actor_kind": WriterKind.RUN,
            "actor_run_id": run_id,
            "actor_tool_call_id": call_uuid,
            "created_at": clock,
        }
        if name == "memory_forget":
            entry = memory.pop(key)
            revisions.add(
                entry_id=entry.id,
                version=entry.version + 1,
                value=None,
                action=RevisionAction.DELETED,
                **common,
            )
            log.add(
                run_id,
                E.MEMORY_DELETED,
                {"entry": str(entry.id), "key": key, "scope": "session"},
                clock,
            )
            return
        value = arguments["value"]
        entry_or_none = memory.get(key)
        if entry_or_none is None:
            # Some facts are kept for a while only; a few of those have expired
            # and wait for the next purge.
            expires_at = None
            if self.rng.random() < 0.1:
                expires_at = clock + dt.timedelta(days=self.rng.uniform(1, 30))
            entry = memory[key] = _Memory(
                id=self.new_id(),
                key=key,
                value=value,
                version=1,
                created_at=clock,
                updated_at=clock,
                expires_at=expires_at,
                run_id=run_id,
                tool_call_id=call_uuid,
            )
            action = RevisionAction.CREATED
        else:
            entry = entry_or_none
            entry.version += 1
            entry.value = value
            entry.updated_at = clock
            entry.run_id, entry.tool_call_id = run_id, call_uuid
            action = RevisionAction.UPDATED
        revisions.add(
            entry_id=entry.id, version=entry.version, value=value, action=action, **common
        )
        log.add(
            run_id,
            E.MEMORY_STORED,
            {
                "entry": str(entry.id),
                "key": key,
                "scope": "session",
                "version": entry.version,
                "action": action,
                "written_by": writer,
            },
            clock,
        )

    def _awaiting_call(
        self,
        run_id: uuid.UUID,
        turn_id: uuid.UUID,
        session_id: uuid.UUID,
        position: int,
        call: dict[str, Any],
        call_uuid: uuid.UUID,
        clock: dt.datetime,
        log: _SessionLog,
    ) -> dt.datetime:
        """A call that needs a person's approval: scheduled, and waiting."""
        name, arguments = call["name"], call["arguments"]
        log.add(
            run_id,
            E.TOOL_CALL_SCHEDULED,
            {
                "tool_call": str(call_uuid),
                "name": name,
                "arguments": arguments,
                "requires_approval": True,
            },
            clock,
        )
        log.add(
            run_id,
            E.TOOL_CALL_APPROVAL_REQUESTED,
            {"tool_call": str(call_uuid), "name": name, "arguments": arguments},
            clock,
        )
        self.tables[ToolCall].add(
            id=call_uuid,
            run_id=run_id,
            turn_id=turn_id,
            session_id=session_id,
            call_id=call["id"],
            index=position,
            name=name,
            arguments=arguments,
            status=ToolCallStatus.SCHEDULED,
            requires_approval=True,
            attempt=0,
            created_at=clock,
        )
        return clock


def eval_simple(expression: str) -> float:
    """The value of ``a * (b + c) / d`` as the seeder writes it."""
    a, rest = expression.split(" * (")
    b, rest = rest.split(" + ")
    c, d = rest.split(") / ")
    return int(a) * (int(b) + int(c)) / int(d)


def _positive(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = (
        "Generate synthetic sessions, runs, turns, tool calls, events and memory in bulk "
        "(COPY on PostgreSQL), for demos and for measuring the admin on large tables."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sessions", type=_positive, default=10)
        parser.add_argument("--runs-per-session", type=_positive, default=5)
        parser.add_argument(
            "--turns-per-run",
            type=_positive,
            default=3,
            help="turns per run; all but the last call tools (default 3)",
        )
        parser.add_argument("--calls-per-turn", type=_positive, default=2)
        parser.add_argument("--users", type=_positive, default=3, help="demo-user-1..N")
        parser.add_argument("--seed", type=int, default=1, help="fixes the content, not the ids")
        parser.add_argument(
            "--days", type=float, default=28.0, help="spread sessions over this many past days"
        )
        parser.add_argument(
            "--active-fraction",
            type=float,
            default=0.1,
            help="share of sessions still active (the others ended); default 0.1",
        )
        parser.add_argument(
            "--events",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="write each session's event log (--no-events is faster, leaves it empty)",
        )
        parser.add_argument(
            "--memory",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="use the memory tools and write session memory with revisions",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["users"] < 1:
            raise CommandError("--users must be at least 1.")
        if options["turns_per_run"] < 1:
            raise CommandError("--turns-per-run must be at least 1.")
        if not 0 <= options["active_fraction"] <= 1:
            raise CommandError("--active-fraction must be between 0 and 1.")
        plan = Plan(
            sessions=options["sessions"],
            runs_per_session=options["runs_per_session"],
            turns_per_run=options["turns_per_run"],
            calls_per_turn=options["calls_per_turn"],
            users=options["users"],
            days=options["days"],
            active_fraction=options["active_fraction"],
            events=options["events"],
            memory=options["memory"],
        )
        started = time.perf_counter()
        verbose = options["verbosity"] >= 2

        def progress(done: int, total: int) -> None:
            if verbose:
                elapsed = time.perf_counter() - started
                self.stdout.write(f"  {done:,}/{total:,} sessions ({elapsed:.1f} s)")

        counts = Seeder(plan, seed=options["seed"]).run(progress)
        elapsed = time.perf_counter() - started
        self.stdout.write(
            f"Seeded on {connection.vendor} in {elapsed:.1f} s "
            f"({counts['toolcall'] / elapsed if elapsed else 0:,.0f} tool calls/s):"
        )
        for label, key in _LABELS:
            self.stdout.write(f"  {label:<18} {counts[key]:>12,}")


_LABELS = (
    ("sessions", "session"),
    ("runs", "run"),
    ("turns", "turn"),
    ("tool calls", "toolcall"),
    ("events", "runevent"),
    ("memory entries", "memoryentry"),
    ("memory revisions", "memoryrevision"),
)
