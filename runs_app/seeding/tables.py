"""Seeded rows, buffered per model and written in bulk through ``goaai.sql.bulk_load``."""

from __future__ import annotations

import operator
import random
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.db import models

from goaai.sql import bulk_load
from memory_app.models import MemoryEntry, MemoryRevision
from runs_app.models import Run, ToolCall, Turn
from sessions_app.models import RunEvent, Session

# In the order they are written: a row's references are written before it.
MODELS: tuple[type[models.Model], ...] = (
    Session,
    Run,
    Turn,
    ToolCall,
    RunEvent,
    MemoryEntry,
    MemoryRevision,
)


class Table:
    """Rows for one model's table, in the order ``bulk_load`` takes its columns."""

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        # Auto-incremented ids are left to the database.
        fields = [
            f
            for f in model._meta.concrete_fields
            if not (f.primary_key and isinstance(f, models.AutoField | models.BigAutoField))
        ]
        # A blank string for text columns, the model's default where it has one.
        self.defaults: dict[str, Any] = {f.attname: f.get_default() for f in fields}
        # A row's values in column order, picked in one step: millions of rows go
        # through here.
        self._in_order: Callable[[dict[str, Any]], Sequence[Any]] = operator.itemgetter(
            *(f.attname for f in fields)
        )
        self.rows: list[Sequence[Any]] = []

    def add(self, **values: Any) -> None:
        row = self.defaults | values
        if len(row) != len(self.defaults):
            unknown = set(values) - set(self.defaults)
            raise TypeError(f"{self.model.__name__} has no column {sorted(unknown)}")
        self.rows.append(self._in_order(row))

    def flush(self) -> int:
        rows, self.rows = self.rows, []
        return bulk_load(self.model, rows)


class Tables:
    """Every table the seeder writes, with how many rows each has been given."""

    def __init__(self) -> None:
        self._tables = {model: Table(model) for model in MODELS}
        self.counts = {model._meta.model_name or "": 0 for model in MODELS}

    def __getitem__(self, model: type[models.Model]) -> Table:
        return self._tables[model]

    def flush(self) -> None:
        for model, table in self._tables.items():
            self.counts[model._meta.model_name or ""] += table.flush()


class Ids:
    """Fresh ids for seeded rows: new on every invocation, whatever the seed."""

    def __init__(self) -> None:
        # System-seeded, unlike the content's generator.
        self._random = random.Random()  # noqa: S311 (ids of made-up data, not secrets)

    def new(self) -> uuid.UUID:
        return uuid.UUID(int=self._random.getrandbits(128), version=4)
