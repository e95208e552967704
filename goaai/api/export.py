"""A session as one JSON document: what the API's export and the admin's hand out."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from goaai.runtime.vocabulary import MemoryScope
from memory_app.api.serializers import MemoryEntrySerializer
from memory_app.models import MemoryEntry
from runs_app.api.serializers import (
    RunEventSerializer,
    RunSerializer,
    ToolCallSerializer,
    TurnSerializer,
)
from runs_app.models import Run, RunEvent, ToolCall, Turn
from runs_app.selectors import runs_with_steps
from sessions_app.api.serializers import SessionSerializer
from sessions_app.models import Session

EXPORT_FORMAT = "goaai.session.v1"
RUN_EXPORT_FORMAT = "goaai.run.v1"


def session_document(session: Session) -> dict[str, Any]:
    """Everything recorded about a session: the session, its runs (child runs too)
    with their turns and tool calls, its whole event log and its session memory.

    Each list is read in one query, so the cost grows with the rows, not with round
    trips; the rows are the same objects the API shows one by one.
    """
    runs = Run.objects.filter(session=session).order_by("created_at")
    turns = Turn.objects.filter(run__session=session).order_by("run_id", "index")
    calls = ToolCall.objects.filter(session=session).order_by("created_at", "index")
    events = RunEvent.objects.filter(session=session).order_by("seq")
    memory = MemoryEntry.objects.filter(scope=MemoryScope.SESSION, session=session)
    return {
        "format": EXPORT_FORMAT,
        "exported_at": timezone.now().isoformat(),
        "session": SessionSerializer(session).data,
        "runs": RunSerializer(runs, many=True).data,
        "turns": TurnSerializer(turns, many=True).data,
        "tool_calls": ToolCallSerializer(calls, many=True).data,
        "events": RunEventSerializer(events.iterator(chunk_size=2000), many=True).data,
        "memory": MemoryEntrySerializer(memory.order_by("key"), many=True).data,
    }


def run_document(run: Run) -> dict[str, Any]:
    """One run as a JSON document: the run with its turns and tool calls in order,
    its child runs and its events (what an operator downloads from the timeline)."""
    from runs_app.api.serializers import RunDetailSerializer

    detailed = runs_with_steps(Run.objects.filter(pk=run.pk)).get()
    events = RunEvent.objects.filter(run=run).order_by("seq")
    return {
        "format": RUN_EXPORT_FORMAT,
        "exported_at": timezone.now().isoformat(),
        "run": RunDetailSerializer(detailed).data,
        "events": RunEventSerializer(events.iterator(chunk_size=2000), many=True).data,
    }
