"""The embedded default under concurrent writers: a SQLite *file* database, the
in-process executor's worker threads running runs, and other threads writing to
the same sessions at the same time (as web requests do). Nothing is lost, no
sequence number is skipped or repeated, and no "database is locked" reaches anyone.

The writers run in a child process with goaai's real settings on a fresh database
file (the suite's own SQLite database is in memory).
"""

from __future__ import annotations

from tests.sqlite_file import run_on_a_sqlite_file

WRITERS = r"""
import json, os, threading, traceback
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from django.db import connections
from goaai.runtime import rt
from memory_app.models import MemoryEntry
from runs_app.models import Run
from sessions_app.models import RunEvent, Session

call_command("migrate", verbosity=0)
user = get_user_model().objects.create_user("alice")
sessions = [rt.create_session(owner=user, agent="assistant").id for _ in range(3)]
rt.configure(executor="thread")  # the embedded default: worker threads in this process
errors, handles, lock = [], [], threading.Lock()
PROMPTS = ["calculate 2 * (3 + 4)", "remember my favourite colour is green", "echo hello"]

def starter(index):
    try:
        for n in range(8):
            session = sessions[(index + n) % len(sessions)]
            handle = rt.start("assistant", PROMPTS[n % len(PROMPTS)], session=session)
            with lock:
                handles.append(handle)
    except Exception:
        errors.append(traceback.format_exc())
    finally:
        connections.close_all()

def memory_writer(index):
    try:
        for n in range(15):
            session = sessions[n % len(sessions)]
            rt.store_memory(f"note {index}-{n}", n, scope="session", session=session)
    except Exception:
        errors.append(traceback.format_exc())
    finally:
        connections.close_all()

threads = [threading.Thread(target=starter, args=(i,)) for i in range(4)]
threads += [threading.Thread(target=memory_writer, args=(i,)) for i in range(2)]
for t in threads: t.start()
for t in threads: t.join(120)
finals = [handle.wait(timeout=120) for handle in handles]
rt.reset()
report = {
    "errors": errors,
    "runs": len(handles),
    "statuses": sorted({r.status for r in finals}),
    "run_errors": [r.error.message for r in finals if r.error],
    "notes": MemoryEntry.objects.filter(key__startswith="note ").count(),
    "sessions": [],
}
for session_id in sessions:
    events = RunEvent.objects.filter(session_id=session_id)
    seqs = list(events.order_by("seq").values_list("seq", flat=True))
    report["sessions"].append({
        "seqs_contiguous": seqs == list(range(1, len(seqs) + 1)),
        "events": len(seqs),
        "counter": Session.objects.get(pk=session_id).last_event_seq,
        "runs": Run.objects.filter(session_id=session_id).count(),
        "ended_events": events.filter(type="run.completed").count(),
    })
print("REPORT " + json.dumps(report))
"""


def test_concurrent_writers_on_a_sqlite_file_lose_nothing(tmp_path):
    report, stderr = run_on_a_sqlite_file(
        WRITERS, tmp_path, GOAAI_EXECUTOR="thread", GOAAI_EXECUTOR_THREADS="4"
    )

    assert report["errors"] == []
    assert "locked" not in stderr
    assert report["runs"] == 32
    assert report["statuses"] == ["completed"], report["run_errors"]
    assert report["notes"] == 30
    assert sum(s["runs"] for s in report["sessions"]) == 32
    for session in report["sessions"]:
        assert session["seqs_contiguous"], session
        assert session["counter"] == session["events"]
        assert session["ended_events"] == session["runs"]
