"""Celery tasks: the distributed executor's one task."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from celery import shared_task
from celery.signals import worker_ready

from goaai.runtime import rt


@shared_task(name="goaai.execute_run", acks_late=True, reject_on_worker_lost=True)
def execute_run(run_id: str) -> str | None:
    """Execute one run until it ends or waits for input; its status, or ``None`` if
    the run was not this worker's to execute (finished, or held by a live worker)."""
    result = rt.execute(UUID(run_id))
    return result.status if result else None


@worker_ready.connect
def start_reaper(**_: Any) -> None:
    """A worker that starts takes up the runs dead workers left, then keeps looking."""
    rt.start_background()
