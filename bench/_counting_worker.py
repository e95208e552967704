"""Loaded by the Celery worker that bench/transactions.py starts (``CELERY_IMPORTS``
in bench/transactions_settings.py): counts the statements and transactions of each
worker process, and adds them after every task to a hash in the benchmark's Redis
database, where the benchmark reads them."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from celery.signals import task_postrun, worker_process_init

from bench._counting import Counter, Tally

KEY = "goaai-bench:worker-tally"

counter = Counter()
counter.install()
_pushed = Tally()


@worker_process_init.connect
def _started(**_: Any) -> None:
    """A pool process starts counting from zero (not from what its parent ran)."""
    global _pushed
    counter.reset()
    _pushed = Tally()


@task_postrun.connect
def _task_done(**_: Any) -> None:
    global _pushed
    import redis

    now = counter.snapshot()
    delta, _pushed = now.minus(_pushed), now
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    for name, value in asdict(delta).items():
        client.hincrby(KEY, name, value)
    client.close()
