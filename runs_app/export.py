"""A session as one JSON document: what the API's export and the admin's hand out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
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
from runs_app.models import HistorySummary, Run, SessionFork, ToolCall, Turn
from runs_app.selectors import with_queue
from sessions_app.api.serializers import SessionSerializer
from sessions_app.models import RunEvent, Session

EXPORT_FORMAT = "goaai.session.v1"
RUN_EXPORT_FORMAT = "goaai.run.v1"
# Rows read from the database at a time while a document is written.
_CHUNK = 1000
# The order a run's tool calls are read in, in every export (datasets too).
TOOL_CALL_ORDER = ("created_at", "index")


def _session_parts(
    session: Session,
) -> tuple[dict[str, Any], list[tuple[str, Iterator[Any]]]]:
    """The head of a session's document and its lists, each read in order, in chunks."""
    fork = SessionFork.objects.filter(session=session).first()
    head: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "exported_at": timezone.now().isoformat(),
        "session": SessionSerializer(session).data,
        # A fork's history begins in the session it was forked from.
        "forked_from": {"session": fork.source_session_id, "run": fork.source_run_id}
        if fork is not None
        else None,
    }
    # With the run each queued one waits for, read with the rows.
    runs = with_queue(
        Run.objects.filter(session=session).select_related("cancel_requested_by")
    ).order_by("created_at")
    summaries = HistorySummary.objects.filter(session=session).order_by("created_at")
    turns = Turn.objects.filter(run__session=session).order_by("run_id", "index")
    calls = ToolCall.objects.filter(session=session).order_by(*TOOL_CALL_ORDER)
    events = RunEvent.objects.filter(session=session).order_by("seq")
    memory = MemoryEntry.objects.filter(scope=MemoryScope.SESSION, session=session)
    lists: list[tuple[str, Iterator[Any]]] = [
        ("runs", (RunSerializer(r).data for r in runs.iterator(chunk_size=_CHUNK))),
        ("turns", (TurnSerializer(t).data for t in turns.iterator(chunk_size=_CHUNK))),
        ("tool_calls", (ToolCallSerializer(c).data for c in calls.iterator(chunk_size=_CHUNK))),
        ("events", (RunEventSerializer(e).data for e in events.iterator(chunk_size=_CHUNK))),
        ("memory", (MemoryEntrySerializer(m).data for m in memory.order_by("key"))),
        ("history_summaries", (summary_document(s) for s in summaries.iterator())),
    ]
    return head, lists


def summary_document(summary: HistorySummary) -> dict[str, Any]:
    """A history summary as an export shows it."""
    return {
        "id": summary.id,
        "run": summary.run_id,
        "through_run": summary.through_run_id,
        "previous": summary.previous_id,
        "runs_covered": summary.runs_covered,
        "text": summary.text,
        "model": summary.model,
        "input_tokens": summary.input_tokens,
        "output_tokens": summary.output_tokens,
        "cost": None if summary.cost is None else str(summary.cost),
        "latency_ms": summary.latency_ms,
        "created_at": summary.created_at,
    }


def session_document(session: Session) -> dict[str, Any]:
    """Everything recorded about a session: the session (and where it was forked
    from), its runs (child runs too, each with its place on the branches), their
    turns and tool calls, its whole event log, its session memory and the summaries
    of its history; each
    list in order and read in chunks, the rows as the API shows them one by one."""
    head, lists = _session_parts(session)
    return {**head, **{name: list(items) for name, items in lists}}


def session_document_stream(session: Session) -> Iterator[str]:
    """:func:`session_document` written out piece by piece, never held whole."""
    return _stream(*_session_parts(session))


def _run_parts(run: Run) -> tuple[dict[str, Any], list[tuple[str, Iterator[Any]]]]:
    """The head of a run's document and its lists, each read in order, in chunks."""
    head: dict[str, Any] = {
        "format": RUN_EXPORT_FORMAT,
        "exported_at": timezone.now().isoformat(),
        "run": RunSerializer(run).data,
        "child_runs": [
            str(pk)
            for pk in Run.objects.filter(parent_run_id=run.pk)
            .order_by("created_at")
            .values_list("id", flat=True)
        ],
    }
    turns = Turn.objects.filter(run_id=run.pk).order_by("index")
    calls = ToolCall.objects.filter(run_id=run.pk).order_by(*TOOL_CALL_ORDER)
    events = RunEvent.objects.filter(run_id=run.pk).order_by("seq")
    lists: list[tuple[str, Iterator[Any]]] = [
        ("turns", (TurnSerializer(t).data for t in turns.iterator(chunk_size=_CHUNK))),
        ("tool_calls", (ToolCallSerializer(c).data for c in calls.iterator(chunk_size=_CHUNK))),
        ("events", (RunEventSerializer(e).data for e in events.iterator(chunk_size=_CHUNK))),
    ]
    return head, lists


def run_document(run: Run) -> dict[str, Any]:
    """One run as a JSON document: the run, its child runs' ids, its turns, tool
    calls and events, each in order (the shape of a session's export, for one run)."""
    head, lists = _run_parts(run)
    return {**head, **{name: list(items) for name, items in lists}}


def run_document_stream(run: Run) -> Iterator[str]:
    """:func:`run_document` written out piece by piece: a run with a million tool
    calls is never held whole in memory."""
    return _stream(*_run_parts(run))


def _stream(head: dict[str, Any], lists: list[tuple[str, Iterator[Any]]]) -> Iterator[str]:
    """A document's head, then each list, as JSON text a piece at a time."""
    yield _dumps(head)[:-1]
    for name, items in lists:
        yield f', "{name}": ['
        for index, item in enumerate(items):
            yield ("" if index == 0 else ",\n") + _dumps(item)
        yield "]"
    yield "}\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)
