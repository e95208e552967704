"""Tool calls asked for together, through the ORM store, on both databases: each
runs in a worker thread of its own with its own connection, and every call and
every event is recorded, numbered without a gap, in the model's order.

On SQLite the runs go to a database *file* in a child process with goaai's real
settings (the suite's own SQLite database is in memory, and in-memory SQLite
shares one cache between threads, which concurrent writers cannot use); on
PostgreSQL they run here, outside any test transaction, as the turn loop does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from goaai.runtime import rt
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent, Session
from tests.sqlite_file import run_on_a_sqlite_file

# Five calls in one reply: two memory writes, three reads; four run at once (the
# assistant's parallel_tool_calls), the fifth as soon as one of them ends.
PROMPT = (
    "together: remember my favourite colour is green; always remember my name is Ada; "
    "echo hi; calculate 6*7; what time is it in Europe/Rome"
)
CALLS = ["memory_store", "memory_store", "echo", "calculator", "clock_now"]
RUNS = 4


def run_and_report(owner: Any) -> dict[str, Any]:
    """Runs the prompt ``RUNS`` times in one session of ``owner``'s and reports what
    was recorded."""
    session = rt.create_session(owner=owner, agent="assistant")
    results = [rt.run("assistant", PROMPT, session=session.id) for _ in range(RUNS)]
    events = list(RunEvent.objects.filter(session_id=session.id).order_by("seq"))
    seqs = [event.seq for event in events]
    runs = []
    for result in results:
        calls = list(ToolCall.objects.filter(run_id=result.id).order_by("index"))
        ids = {str(call.id) for call in calls}
        index_of = {str(call.id): call.index for call in calls}
        kinds: dict[str, list[str]] = {str(call.id): [] for call in calls}
        order = []
        for event in events:
            if event.data.get("tool_call") in ids:
                kinds[event.data["tool_call"]].append(event.type)
                order.append((event.type, index_of[event.data["tool_call"]]))
        runs.append(
            {
                "status": result.status,
                "output": result.output,
                "calls": [(call.index, call.name, call.status) for call in calls],
                "call_events": [kinds[str(call.id)] for call in calls],
                "order": order,
                "stored": sum(
                    1
                    for event in events
                    if event.type == "memory.stored" and event.run_id == result.id
                ),
            }
        )
    return {
        "runs": runs,
        "contiguous": seqs == list(range(1, len(seqs) + 1)),
        "counter": Session.objects.get(pk=session.id).last_event_seq,
        "events": len(seqs),
        "run_rows": Run.objects.filter(session_id=session.id).count(),
    }


def check(report: dict[str, Any]) -> None:
    assert report["run_rows"] == RUNS
    assert report["contiguous"]
    assert report["counter"] == report["events"]
    for run in report["runs"]:
        assert run["status"] == "completed", run
        assert [tuple(call) for call in run["calls"]] == [
            (index, name, "succeeded") for index, name in enumerate(CALLS)
        ]
        for kinds in run["call_events"]:
            assert kinds == ["tool_call.scheduled", "tool_call.started", "tool_call.succeeded"]
        # All were recorded, in the model's order, before the first of them ended.
        order = [tuple(step) for step in run["order"]]
        scheduled = [index for kind, index in order if kind == "tool_call.scheduled"]
        assert scheduled == list(range(len(CALLS)))
        first_end = next(n for n, (kind, _) in enumerate(order) if kind == "tool_call.succeeded")
        assert order.index(("tool_call.scheduled", len(CALLS) - 1)) < first_end
        assert run["stored"] == 2
        # The answer speaks of each call in the order the model asked for them.
        assert run["output"].startswith(
            "Got it. I'll remember in this conversation that your favourite colour is green. "
            "Got it. I'll remember in every conversation that your name is Ada. hi 6*7 = 42 "
        ), run["output"]


CHILD = r"""
import json
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from goaai.runtime import rt
from tests.runs_app.test_parallel_tool_calls import run_and_report

call_command("migrate", verbosity=0)
rt.configure(executor="inline")
report = run_and_report(get_user_model().objects.create_user("alice"))
print("REPORT " + json.dumps(report))
"""


def test_calls_asked_together_are_all_recorded_on_a_sqlite_file(tmp_path, on_postgres):
    if on_postgres:
        pytest.skip("the SQLite file database is the SQLite pass's to test")
    report, stderr = run_on_a_sqlite_file(CHILD, tmp_path)
    assert "locked" not in stderr
    check(report)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_calls_asked_together_are_all_recorded_on_postgresql(owner, inline_runtime):
    check(json.loads(json.dumps(run_and_report(owner), default=str)))
