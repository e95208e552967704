"""Runs per second: Celery workers against the in-process executor, at the same
concurrency.

    .venv/bin/python bench/executors.py [--runs 200] [--concurrency 2] [--rounds 3]

On PostgreSQL (a database of this run's own on ``--postgres``'s server) with Redis
(a redis-server of its own), as a deployment with ``REDIS_URL`` runs. Each round
starts ``--runs`` scripted runs ("calculate 2 * (3 + 4)": two turns, one tool
call), each in a session of its own made beforehand, through ``rt.start`` in this
process, and waits until every one has completed; runs per second is ``--runs``
over the time from the first start to the last run's end (as the runs recorded it).

- ``thread``: goaai's in-process executor, ``--concurrency`` worker threads in this
  process (``GOAAI_EXECUTOR_THREADS``);
- ``celery``: ``celery -A goaai worker --pool=prefork --concurrency=N``, started
  once and warmed up, the runs queued through Redis.

Rounds alternate the two (thread first in odd rounds, Celery first in even ones)
after a warm-up of each; printed: each round's figures, then the medians and
Celery / thread (target: at least 0.9).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_POSTGRES,
    ROOT,
    fresh_database,
    private_redis,
    server_environment,
    stop_process,
    wait_for_celery_worker,
)

PROMPT = "calculate 2 * (3 + 4)"
WARM_UP_RUNS = 20


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per round and executor")
    parser.add_argument("--concurrency", type=int, default=2, help="threads, or worker processes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL server URL; the benchmark makes a database of its own on it",
    )
    return parser.parse_args()


def environment(url: str, redis_url: str, concurrency: int) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "REDIS_URL": redis_url,
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        "GOAAI_REAPER_INTERVAL": "0",
        "GOAAI_EXECUTOR_THREADS": str(concurrency),
    }


def start_worker(env: dict[str, str], concurrency: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "celery", "-A", "goaai", "worker", "--loglevel", "WARNING"]
    command += ["--pool", "prefork", "--concurrency", str(concurrency)]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)


def runs_per_second(mode: str, runs: int, user: Any) -> float:
    """Start ``runs`` runs with the ``mode`` executor; runs per second."""
    from django.db.models import Max
    from django.utils import timezone

    from goaai.runtime import rt
    from runs_app.models import Run

    rt.reset()
    rt.configure(executor=mode)
    sessions = [rt.create_session(owner=user).id for _ in range(runs)]
    started = timezone.now()
    ids = [rt.start("assistant", PROMPT, session=session).run_id for session in sessions]
    deadline = time.monotonic() + 60 + runs
    done = Run.objects.filter(id__in=ids, status="completed")
    while done.count() < runs:
        if time.monotonic() > deadline:
            stuck = Run.objects.filter(id__in=ids).exclude(status="completed").count()
            raise RuntimeError(f"{mode}: {stuck} of {runs} runs did not complete")
        time.sleep(0.05)
    ended = Run.objects.filter(id__in=ids).aggregate(last=Max("ended_at"))["last"]
    rt.reset()
    return runs / (ended - started).total_seconds()


def main() -> None:
    args = arguments()
    url = fresh_database("postgres", args.postgres, "executors")
    with private_redis() as redis_url, tempfile.TemporaryDirectory() as folder:
        env = environment(url, redis_url, args.concurrency)
        os.environ.update(env, DJANGO_SETTINGS_MODULE="goaai.settings")
        os.environ.pop("DATABASE_POOL", None)
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        user = get_user_model().objects.create_user("bench")
        log = Path(folder) / "worker.log"
        worker = start_worker(server_environment(url, **env), args.concurrency, log)
        try:
            wait_for_celery_worker(worker, log)
            for mode in ("thread", "celery"):
                runs_per_second(mode, WARM_UP_RUNS, user)
            figures: dict[str, list[float]] = {"thread": [], "celery": []}
            for number in range(1, args.rounds + 1):
                order = ("thread", "celery") if number % 2 else ("celery", "thread")
                for mode in order:
                    figures[mode].append(runs_per_second(mode, args.runs, user))
                print(
                    f"round {number}: thread {figures['thread'][-1]:7.1f} runs/s   "
                    f"celery {figures['celery'][-1]:7.1f} runs/s",
                    flush=True,
                )
        finally:
            stop_process(worker)
    thread, celery = (statistics.median(figures[mode]) for mode in ("thread", "celery"))
    print(
        f"\n{args.runs} runs a round, concurrency {args.concurrency}, medians of {args.rounds}:"
        f"\n  thread {thread:.1f} runs/s   celery {celery:.1f} runs/s"
        f"   celery / thread {celery / thread:.2f} (target >= 0.90)"
    )


if __name__ == "__main__":
    main()
