"""Datasets of scored runs: JSON lines, one per run, with what the run was asked,
what it answered, the tools it called and every score it was given. What
evaluation and fine-tuning pipelines read; the admin's action, the API's
``/datasets/scored-runs.jsonl`` and ``manage.py export_dataset`` write the same.

A line::

    {"run_id", "session_id", "agent", "model", "created_at", "input", "output",
     "status", "tool_calls": [{"name", "arguments", "result", "status",
     "error_kind"}], "scores": [{"name", "kind", "value", "category", "source",
     "author", "comment"}], "labels"}

Runs are read oldest first, a chunk at a time (by keyset: each chunk starts after
the last run of the one before), and each chunk's tool calls and scores in one
query each, so a dataset of any size takes three queries per chunk and the memory
of one chunk.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Q, QuerySet

from runs_app.export import TOOL_CALL_ORDER
from runs_app.models import Run, Score, ToolCall
from runs_app.score_filters import runs_scored, scored_runs
from runs_app.scores import score_json_value

# Runs read at a time.
CHUNK_SIZE = 200
_RUN_FIELDS = (
    "id",
    "session_id",
    "agent",
    "model",
    "created_at",
    "input",
    "output",
    "status",
    "labels",
)
_CALL_FIELDS = ("run_id", "name", "arguments", "result", "status", "error_kind")
_SCORE_FIELDS = (
    "run_id",
    "name",
    "kind",
    "value",
    "category",
    "source",
    "author__username",
    "comment",
)


@dataclass(frozen=True)
class DatasetFilter:
    """Which scored runs a dataset holds: those meeting every score filter (see
    runs_app.score_filters), of one agent, created from ``since`` until ``until``."""

    scores: list[str] = field(default_factory=list)
    agent: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    def apply(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        """The runs of ``runs`` the dataset holds (:class:`InvalidScoreFilter` for a
        score filter that is none)."""
        chosen = runs_scored(scored_runs(runs), self.scores)
        if self.agent:
            chosen = chosen.filter(agent=self.agent)
        if self.since is not None:
            chosen = chosen.filter(created_at__gte=self.since)
        if self.until is not None:
            chosen = chosen.filter(created_at__lt=self.until)
        return chosen


def _chunks(runs: QuerySet[Run], size: int) -> Iterator[list[dict[str, Any]]]:
    ordered = runs.select_related(None).order_by("created_at", "id").values(*_RUN_FIELDS)
    last: tuple[dt.datetime, UUID] | None = None
    while True:
        page = ordered
        if last is not None:
            page = page.filter(Q(created_at__gt=last[0]) | Q(created_at=last[0], id__gt=last[1]))
        chunk = list(page[:size])
        if chunk:
            yield chunk
        if len(chunk) < size:
            return
        last = (chunk[-1]["created_at"], chunk[-1]["id"])


def _by_run(rows: Iterable[dict[str, Any]]) -> dict[UUID, list[dict[str, Any]]]:
    grouped: dict[UUID, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row.pop("run_id")].append(row)
    return grouped


def _score_document(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": row["name"],
        "kind": row["kind"],
        "value": score_json_value(row["kind"], row["value"]),
        "category": row["category"] or None,
        "source": row["source"],
        "author": row["author__username"],
        "comment": row["comment"],
    }


def dataset_line(
    run: dict[str, Any], calls: list[dict[str, Any]], scores: list[dict[str, Any]]
) -> dict[str, Any]:
    """One run's line (see the module), from its row and those of its tool calls
    and scores."""
    return {
        "run_id": run["id"],
        "session_id": run["session_id"],
        "agent": run["agent"],
        "model": run["model"],
        # To the microsecond, as the API writes moments.
        "created_at": run["created_at"].astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "input": run["input"],
        "output": run["output"],
        "status": run["status"],
        "tool_calls": calls,
        "scores": [_score_document(score) for score in scores],
        "labels": run["labels"],
    }


def dataset_lines(runs: QuerySet[Run], *, chunk_size: int | None = None) -> Iterator[str]:
    """``runs`` as JSON lines, oldest first, read ``chunk_size`` runs at a time
    (:data:`CHUNK_SIZE` unless given); each chunk's lines come as one piece."""
    for chunk in _chunks(runs, chunk_size or CHUNK_SIZE):
        ids = [run["id"] for run in chunk]
        calls = _by_run(
            ToolCall.objects.filter(run_id__in=ids).order_by(*TOOL_CALL_ORDER).values(*_CALL_FIELDS)
        )
        scores = _by_run(
            Score.objects.filter(run_id__in=ids).order_by("created_at", "id").values(*_SCORE_FIELDS)
        )
        yield "".join(
            json.dumps(
                dataset_line(run, calls.get(run["id"], []), scores.get(run["id"], [])),
                cls=DjangoJSONEncoder,
                ensure_ascii=False,
            )
            + "\n"
            for run in chunk
        )
