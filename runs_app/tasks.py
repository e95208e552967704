"""Celery: the distributed executor and its one task (``celery -A goaai worker``)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any
from uuid import UUID

from celery import Celery
from celery.signals import worker_ready
from django.conf import settings
from django.utils import timezone
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from goaai.celery import app
from goaai.runtime import rt
from runs_app import selectors
from runs_app.models import Run
from sessions_app.webhooks import dispatcher

logger = logging.getLogger(__name__)

TASK_NAME = "goaai.execute_run"
# What publishing a task raises when the broker cannot be reached (kombu wraps the
# transport's connection errors in OperationalError once its retries ran out).
BROKER_ERRORS = (OperationalError, RedisError, OSError)


@app.task(name=TASK_NAME, acks_late=True, reject_on_worker_lost=True)
def execute_run(run_id: str) -> str | None:
    """Execute one run until it ends or waits for input; its status, or ``None`` if
    the run was not this worker's to execute (finished, or held by a live worker)."""
    result = rt.execute(UUID(run_id))
    return result.status if result else None


@worker_ready.connect
def start_reaper(**_: Any) -> None:
    """A worker that starts takes up the runs dead workers left, then keeps looking;
    it also sends the webhook deliveries that fall due (its runs' among them)."""
    rt.start_background()
    dispatcher.start()


class QueueUnavailable(Exception):
    """The broker could not be reached to queue a run. The run stays recorded as it
    was; the reaper queues it once the broker is back."""

    def __init__(self, run_id: UUID) -> None:
        super().__init__(f"The run queue is unavailable; run {run_id} waits for it.")
        self.run_id = run_id


def run_mark_queued(*, run_id: UUID, now: dt.datetime, lease_seconds: float) -> bool:
    """Record that the run is being put on the queue now, if it needs a worker and is
    not on the queue already (:func:`~runs_app.selectors.not_on_queue`); ``False``
    otherwise. A compare-and-set: of two servers about to queue the same run, the
    second finds it queued and leaves it."""
    marked = (
        Run.objects.filter(pk=run_id)
        .filter(selectors.without_live_worker(now=now))
        .filter(selectors.not_on_queue(now=now, lease_seconds=lease_seconds))
        .update(queued_at=now)
    )
    return marked == 1


def run_unmark_queued(*, run_id: UUID, queued_at: dt.datetime) -> None:
    """Undo :func:`run_mark_queued` for a run that did not reach the queue, so that
    the reaper's next look takes it up."""
    Run.objects.filter(pk=run_id, queued_at=queued_at).update(queued_at=None)


class CeleryExecutor:
    """One Celery task per run, acknowledged only once the task has finished
    (``acks_late``), so a message whose worker died is delivered again.

    A run is put on the queue at most once per lease period while it waits for a
    worker (``Run.queued_at``): every server and worker looks for runs without a
    worker, and without that record each would queue another copy of every run
    still waiting behind others.
    """

    def __init__(self, celery_app: Celery | None = None) -> None:
        self.app = celery_app or app

    def submit(self, run_id: UUID) -> None:
        """Queue the run; nothing if it is on the queue already, has a live worker
        or has ended. :class:`QueueUnavailable` if the broker cannot be reached."""
        now = timezone.now()
        if not run_mark_queued(
            run_id=run_id, now=now, lease_seconds=settings.GOAAI_RUN_LEASE_SECONDS
        ):
            logger.debug("Run %s is queued or held already; not queued again", run_id)
            return
        self.send(run_id, now)

    def send(self, run_id: UUID, queued_at: dt.datetime) -> None:
        """Put a run recorded as queued at ``queued_at`` on the queue (a new run,
        recorded so when it was created); :class:`QueueUnavailable`, and the record
        undone, if the broker cannot be reached."""
        try:
            self.app.send_task(TASK_NAME, args=[str(run_id)])
        except BROKER_ERRORS as exc:
            run_unmark_queued(run_id=run_id, queued_at=queued_at)
            raise QueueUnavailable(run_id) from exc

    def wait(self, run_id: UUID, timeout: float) -> bool:
        return False
