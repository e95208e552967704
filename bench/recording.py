"""Recording cost: a run of N turns x M tool calls written through goaai's real
services (what the turn loop does, step by step) against raw INSERT/UPDATE
statements writing the same rows, one transaction per step.

    .venv/bin/python bench/recording.py [--db sqlite|postgres|both] [--runs R]
        [--turns N] [--calls M]

Each step of the loop is a transaction, as the loop takes them: the run is
created; it is claimed; each turn starts; its reply is recorded with the M calls it
asks for, started; each call ends; a last turn starts and its answer is recorded
with the run's end (the run's counters and the dashboard's rollups included). Every
step writes its rows and its events. The raw baseline executes the same rows with
the driver and no ORM, no reads and no locking, each run in a session of its own
as the services' run is (a run's claim reads the history of its session). Target:
services <= 2.0x raw (one persistence layer).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import uuid

from _common import arguments, run_each_database, setup_django

ARGUMENTS = {"expression": "2 * (3 + 4)", "padding": "x" * 900}
RESULT = {"expression": "2 * (3 + 4)", "value": 14, "padding": "y" * 300}


def steps(turns: int, calls: int) -> int:
    """The transactions of one run: created, claimed, each turn's start, reply and
    calls' ends, the answering turn's start and its answer with the run's end."""
    return 2 + turns * (2 + calls) + 2


def through_services(session_id: uuid.UUID, turns: int, calls: int) -> None:
    from goaai.runtime.types import ModelReply, PlannedCall, ToolCallRequest, ToolOutcome, Usage
    from runs_app.store import OrmRunStore

    store = OrmRunStore()
    run = store.create_run(
        session_id=session_id, agent="assistant", input="go", labels={}, metadata={}, policy={}
    )
    store.claim_run(run.id, owner="bench", lease_seconds=60)
    messages = [{"role": "user", "content": "go"}]
    for t in range(turns):
        turn_id = store.start_turn(run_id=run.id, index=t, model="bench", messages=messages)
        requests = tuple(
            ToolCallRequest(id=f"c{t}-{c}", name="calculator", arguments=ARGUMENTS)
            for c in range(calls)
        )
        recorded = store.complete_turn(
            turn_id=turn_id,
            reply=ModelReply(text="", tool_calls=requests, usage=Usage(100, 20), model="bench"),
            latency_ms=5,
            calls=[PlannedCall(c, request, start=True) for c, request in enumerate(requests)],
        )
        for call_id in recorded.tool_call_ids:
            store.finish_tool_call(tool_call_id=call_id, outcome=ToolOutcome(result=RESULT))
    turn_id = store.start_turn(run_id=run.id, index=turns, model="bench", messages=messages)
    store.complete_turn_and_run(
        turn_id=turn_id,
        reply=ModelReply(text="done", usage=Usage(100, 20), model="bench"),
        latency_ms=5,
    )


class Raw:
    """The same rows through the driver: INSERTs and UPDATEs, one transaction a step."""

    def __init__(self, vendor: str, raw_connection: object, models: dict[str, type]) -> None:
        self.vendor = vendor
        self.conn = raw_connection
        self.mark = "?" if vendor == "sqlite" else "%s"
        self.seq = 0
        # Every column of each table with its default, prepared once: the raw rows
        # are the same rows the services write, whatever columns the models gain.
        self.defaults = {table: _column_defaults(model) for table, model in models.items()}
        # What a run's end adds to the rollups (rollup_statements).
        self.rollups: list[str] = []

    def insert(self, table: str, values: dict[str, object]) -> tuple[str, tuple[object, ...]]:
        """An INSERT of one row of ``table``: ``values`` over the columns' defaults."""
        row = {**self.defaults[table], **values}
        columns = ", ".join(f'"{name}"' for name in row)
        marks = ", ".join(["%s"] * len(row))
        return f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(row.values())

    def _id(self, value: uuid.UUID) -> object:
        return value.hex if self.vendor == "sqlite" else value

    def _now(self) -> object:
        now = dt.datetime.now(tz=dt.UTC)
        return now.replace(tzinfo=None).isoformat(sep=" ") if self.vendor == "sqlite" else now

    def _sql(self, text: str) -> str:
        return text.replace("%s", self.mark)

    def step(self, statements: list[tuple[str, tuple[object, ...]]]) -> None:
        cursor = self.conn.cursor()
        if self.vendor == "sqlite":
            cursor.execute("BEGIN IMMEDIATE")
        for sql, params in statements:
            cursor.execute(self._sql(sql), params)
        self.conn.commit()

    def events(
        self, session_id: uuid.UUID, run_id: uuid.UUID, types: list[str], data: dict
    ) -> list:
        rows = []
        for event_type in types:
            self.seq += 1
            rows.append(
                self.insert(
                    "sessions_app_runevent",
                    {
                        "session_id": self._id(session_id),
                        "run_id": self._id(run_id),
                        "seq": self.seq,
                        "type": event_type,
                        "data": json.dumps(data),
                        "created_at": self._now(),
                    },
                )
            )
        # The statement goaai's steps start with: the counter and the last activity.
        rows.append(
            (
                "UPDATE sessions_app_session SET last_event_seq = %s, last_activity_at = %s "
                "WHERE id = %s",
                (self.seq, self._now(), self._id(session_id)),
            )
        )
        return rows

    def run(self, session_id: uuid.UUID, turns: int, calls: int) -> None:
        run_id = uuid.uuid4()
        now = self._now
        self.step(
            [
                self.insert(
                    "runs_app_run",
                    {
                        "id": self._id(run_id),
                        "session_id": self._id(session_id),
                        "agent": "assistant",
                        "input": "go",
                        "status": "pending",
                        "created_at": now(),
                        "updated_at": now(),
                    },
                ),
                *self.events(session_id, run_id, ["run.created"], {"input": "go"}),
            ]
        )
        self.step(
            [
                (
                    "UPDATE runs_app_run SET status = 'running', started_at = %s, lease_owner = 'bench', "
                    "lease_expires_at = %s WHERE id = %s",
                    (now(), now(), self._id(run_id)),
                ),
                *self.events(session_id, run_id, ["run.started"], {}),
            ]
        )
        messages = json.dumps([{"role": "user", "content": "go"}])
        for t in range(turns):
            turn_id = uuid.uuid4()
            self.step(
                [self._turn(run_id, turn_id, t, messages), *self._started(session_id, run_id, t)]
            )
            requested = [
                {"id": f"c{t}-{c}", "name": "calculator", "arguments": ARGUMENTS}
                for c in range(calls)
            ]
            call_ids = [uuid.uuid4() for _ in range(calls)]
            self.step(
                [
                    *self._reply(run_id, turn_id, requested, ""),
                    *(
                        self.insert(
                            "runs_app_toolcall",
                            {
                                "id": self._id(call_id),
                                "run_id": self._id(run_id),
                                "turn_id": self._id(turn_id),
                                "session_id": self._id(session_id),
                                "call_id": f"c{t}-{c}",
                                "index": c,
                                "name": "calculator",
                                "arguments": json.dumps(ARGUMENTS),
                                "status": "running",
                                "attempt": 1,
                                "created_at": now(),
                                "started_at": now(),
                            },
                        )
                        for c, call_id in enumerate(call_ids)
                    ),
                    *self.events(
                        session_id,
                        run_id,
                        ["turn.completed", "usage"]
                        + ["tool_call.scheduled", "tool_call.started"] * calls,
                        {"arguments": ARGUMENTS},
                    ),
                ]
            )
            for call_id in call_ids:
                self.step(
                    [
                        (
                            "UPDATE runs_app_toolcall SET status = 'succeeded', result = %s, ended_at = %s, "
                            "duration_ms = 1 WHERE id = %s",
                            (json.dumps(RESULT), now(), self._id(call_id)),
                        ),
                        *self.events(
                            session_id, run_id, ["tool_call.succeeded"], {"result": RESULT}
                        ),
                    ]
                )
        turn_id = uuid.uuid4()
        self.step(
            [
                self._turn(run_id, turn_id, turns, messages),
                *self._started(session_id, run_id, turns),
            ]
        )
        self.step(
            [
                *self._reply(run_id, turn_id, [], "done"),
                (
                    "UPDATE runs_app_run SET status = 'completed', output = 'done', ended_at = %s "
                    "WHERE id = %s",
                    (now(), self._id(run_id)),
                ),
                *((statement, ()) for statement in self.rollups),
                *self.events(
                    session_id,
                    run_id,
                    ["turn.completed", "message.completed", "usage", "run.completed"],
                    {"output": "done"},
                ),
            ]
        )

    def _turn(
        self, run_id: uuid.UUID, turn_id: uuid.UUID, index: int, messages: str
    ) -> tuple[str, tuple[object, ...]]:
        return self.insert(
            "runs_app_turn",
            {
                "id": self._id(turn_id),
                "run_id": self._id(run_id),
                "index": index,
                "model": "bench",
                "request_messages": messages,
                "started_at": self._now(),
            },
        )

    def _started(self, session_id: uuid.UUID, run_id: uuid.UUID, index: int) -> list:
        return self.events(session_id, run_id, ["turn.started"], {"index": index})

    def _reply(
        self, run_id: uuid.UUID, turn_id: uuid.UUID, requested: list, text: str
    ) -> list[tuple[str, tuple[object, ...]]]:
        """A turn's reply and its usage added to its run's."""
        return [
            (
                "UPDATE runs_app_turn SET response_text = %s, response_tool_calls = %s, "
                "input_tokens = 100, output_tokens = 20, latency_ms = 5, ended_at = %s WHERE id = %s",
                (text, json.dumps(requested), self._now(), self._id(turn_id)),
            ),
            (
                "UPDATE runs_app_run SET input_tokens = input_tokens + 100, output_tokens = "
                "output_tokens + 20, total_tokens = total_tokens + 120 WHERE id = %s",
                (self._id(run_id),),
            ),
        ]


def rollup_statements(session_id: uuid.UUID, turns: int, calls: int) -> list[str]:
    """The statements with which a run's end adds it to the dashboard's rollups, as
    the services run them (values in place): the raw path runs them too."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        through_services(session_id, turns, calls)
    return [query["sql"] for query in captured.captured_queries if "ON CONFLICT" in query["sql"]]


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    extra = ["--runs", str(args.runs), "--turns", str(args.turns), "--calls", str(args.calls)]
    if run_each_database(__file__, args, extra):
        return
    setup_django(args.db, args.postgres)
    from django.contrib.auth import get_user_model
    from django.db import connection

    from sessions_app.models import Session

    owner = get_user_model().objects.create(username="bench")
    connection.ensure_connection()
    raw_conn = connection.connection
    if args.db == "postgres":
        import psycopg

        raw_conn = psycopg.connect(connection.settings_dict["NAME"] and _pg_url(connection))
    from runs_app.models import Run, ToolCall, Turn
    from sessions_app.models import RunEvent

    tables = {model._meta.db_table: model for model in (Run, Turn, ToolCall, RunEvent)}
    raw = Raw(args.db, raw_conn, tables)

    def session() -> uuid.UUID:
        return Session.objects.create(owner=owner, agent="assistant").id

    # Warm up both paths, then alternate them so that drift hits both alike.
    raw.rollups = rollup_statements(session(), args.turns, args.calls)
    raw.run(session(), args.turns, args.calls)
    ours, theirs = [], []
    service_time = raw_time = 0.0
    for _ in range(args.runs):
        ours.append(session())
        start = time.perf_counter()
        through_services(ours[-1], args.turns, args.calls)
        service_time += time.perf_counter() - start
        theirs.append(session())
        start = time.perf_counter()
        raw.run(theirs[-1], args.turns, args.calls)
        raw_time += time.perf_counter() - start
    written = [
        RunEvent.objects.filter(session_id__in=sessions).count() for sessions in (ours, theirs)
    ]
    if written[0] != written[1]:
        raise SystemExit(
            f"The paths wrote {written[0]} and {written[1]} events: not the same rows."
        )

    rows = args.runs * steps(args.turns, args.calls)
    print(
        f"\n== recording, {args.db}: {args.runs} runs x {args.turns} turns x {args.calls} tool calls "
        f"({rows} transactions and {written[0]} events per path) =="
    )
    print(f"services  {service_time:7.3f} s  {service_time / rows * 1e6:8.1f} us per step")
    print(f"raw       {raw_time:7.3f} s  {raw_time / rows * 1e6:8.1f} us per step")
    print(f"services / raw  {service_time / raw_time:5.2f}x  (target <= 2.0)")


def _column_defaults(model: type) -> dict[str, object]:
    """Each column of ``model`` that has a default (or may be null), with that value
    as the database takes it; the columns without one are given by each row."""
    from django.db import connection

    defaults: dict[str, object] = {}
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        if field.has_default() or (field.empty_strings_allowed and not field.null):
            # What Django writes when a field is not given: its default, or "" for text.
            defaults[field.column] = field.get_db_prep_save(field.get_default(), connection)
        elif field.null:
            defaults[field.column] = None
    return defaults


def _pg_url(connection) -> str:
    s = connection.settings_dict
    return f"postgresql://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


if __name__ == "__main__":
    sys.exit(main())
