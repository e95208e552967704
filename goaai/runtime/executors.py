"""Executors run a run's turn loop once the run has been committed.

``thread`` (the default) uses a pool of worker threads inside the server process;
``inline`` runs the loop in the caller's thread, for scripts and tests. A deployment
installs others (goaai's ``celery`` sends one task per run to Celery workers, see
``runs_app.tasks``). All of them hand the run id to the same
:class:`~goaai.runtime.loop.TurnLoop`.

A :class:`Reaper` in each server and worker process looks for runs that no live
worker holds (the worker died and its lease expired) and submits them again.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, runtime_checkable
from uuid import UUID

from goaai.runtime.types import RunInfo

logger = logging.getLogger(__name__)

Job = Callable[[UUID], object]


class Executor(Protocol):
    def submit(self, run_id: UUID) -> None:
        """Have the run executed; returns without waiting unless the executor is inline."""
        ...

    def wait(self, run_id: UUID, timeout: float) -> RunInfo | bool:
        """Wait for a run this executor holds (:class:`TimeoutError` when time runs
        out): the run as executing it left it (ended, or waiting for a person) when
        the executor has it, so that the caller need not read it again; else whether
        it held the run."""
        ...


@runtime_checkable
class QueueingExecutor(Executor, Protocol):
    """An executor that puts runs on a distributed queue and records when it did
    (so that no other process queues them again meanwhile): a new run is recorded
    as queued when it is created (``RunStore.create_run(queued=True)``) and then
    only sent."""

    def send(self, run_id: UUID, queued_at: dt.datetime) -> None:
        """Put a run recorded as queued at ``queued_at`` on the queue."""
        ...


class InlineExecutor:
    def __init__(self, job: Job) -> None:
        self.job = job
        # What the last run this thread submitted came to, until taken.
        self._last = threading.local()

    def submit(self, run_id: UUID) -> None:
        self._last.result = self.job(run_id)

    def wait(self, run_id: UUID, timeout: float) -> RunInfo | bool:
        # The run was executed when it was submitted.
        return False

    def executed(self, run_id: UUID) -> RunInfo | None:
        """The run as executing it left it, if it is the last run this thread
        submitted (``rt.run`` right after starting it); once."""
        result, self._last.result = getattr(self._last, "result", None), None
        return result if isinstance(result, RunInfo) and result.id == run_id else None


class ThreadExecutor:
    def __init__(self, job: Job, *, threads: int = 4) -> None:
        self.job = job
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="goaai-run")
        self._futures: dict[UUID, Future[object]] = {}
        self._lock = threading.Lock()

    def submit(self, run_id: UUID) -> None:
        future = self._pool.submit(self._run, run_id)
        with self._lock:
            self._futures[run_id] = future

    def _run(self, run_id: UUID) -> object:
        try:
            return self.job(run_id)
        except Exception:
            # The loop records its own failures; this catches a store that is down.
            logger.exception("Executing run %s failed", run_id)
            return None
        finally:
            with self._lock:
                self._futures.pop(run_id, None)

    def wait(self, run_id: UUID, timeout: float) -> RunInfo | bool:
        with self._lock:
            future = self._futures.get(run_id)
        if future is None:
            return False
        result = future.result(timeout=timeout)
        return result if isinstance(result, RunInfo) else True

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


class Reaper:
    """A daemon thread that calls ``reap`` every ``interval`` seconds."""

    def __init__(self, reap: Callable[[], int], *, interval: float) -> None:
        self.reap = reap
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="goaai-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        # The first pass runs at once: a process that starts after a crash takes up
        # the runs its predecessor left.
        while True:
            try:
                found = self.reap()
                if found:
                    logger.info("Reaper handed %d orphaned run(s) to the executor", found)
            except Exception:
                logger.exception("Reaping orphaned runs failed")
            if self._stop.wait(self.interval):
                return
