"""The background sender: a thread in every server and worker process that claims
due deliveries and sends them from a small pool, so that no run ever waits for a
receiver.

It looks every ``GOAAI_WEBHOOK_POLL_SECONDS`` (retries fall due; deliveries made in
another process), and at once when a transaction of this process committed new
deliveries (:func:`wake`). Claims are atomic (see ``delivery``), so any number of
processes share the work. ``GOAAI_WEBHOOK_POLL_SECONDS=0`` starts no thread.
No endpoint gets more than ``GOAAI_WEBHOOK_SENDERS_PER_ENDPOINT`` of the senders at
once, so a slow receiver delays its own deliveries only.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from uuid import UUID

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from goaai.database import retrying
from sessions_app.webhooks import delivery

logger = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, *, interval: float, senders: int, per_endpoint: int) -> None:
        self.interval = interval
        self.senders = max(1, senders)
        self.per_endpoint = max(1, min(per_endpoint, self.senders))
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = 0
        # Attempts under way, by endpoint.
        self._busy: Counter[UUID] = Counter()
        self._pool = ThreadPoolExecutor(max_workers=self.senders, thread_name_prefix="goaai-hook")
        self._thread = threading.Thread(target=self._loop, name="goaai-webhooks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._pool.shutdown(wait=False)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._claim()
            except Exception:
                logger.exception("Looking for due webhook deliveries failed")
            finally:
                close_old_connections()
            self._wake.wait(self.interval)

    def _claim(self) -> None:
        with self._lock:
            free = self.senders - self._in_flight
            busy = +self._busy
        if free <= 0:
            return
        claims = retrying(
            lambda: delivery.claim_due(
                now=timezone.now(), limit=free, per_endpoint=self.per_endpoint, busy=busy
            ),
            what="Looking for due webhook deliveries",
        )
        for claim in claims:
            with self._lock:
                self._in_flight += 1
                self._busy[claim.endpoint_id] += 1
            self._pool.submit(self._send, claim)

    def _send(self, claim: delivery.Claim) -> None:
        close_old_connections()
        try:
            delivery.attempt(claim=claim)
        except Exception:
            # The claim expires and the attempt is made again then.
            logger.exception("Webhook delivery %s failed to be attempted", claim.delivery_id)
        finally:
            close_old_connections()
            with self._lock:
                self._in_flight -= 1
                self._busy[claim.endpoint_id] -= 1
                if self._busy[claim.endpoint_id] <= 0:
                    del self._busy[claim.endpoint_id]
            # A sender is free again: more may be waiting.
            self._wake.set()


_dispatcher: Dispatcher | None = None
_started = threading.Lock()


def start() -> None:
    """Start this process's dispatcher, once (servers and Celery workers call this
    next to the runtime's reaper)."""
    global _dispatcher
    interval = settings.GOAAI_WEBHOOK_POLL_SECONDS
    with _started:
        if _dispatcher is not None or interval <= 0:
            return
        _dispatcher = Dispatcher(
            interval=interval,
            senders=settings.GOAAI_WEBHOOK_SENDERS,
            per_endpoint=settings.GOAAI_WEBHOOK_SENDERS_PER_ENDPOINT,
        )
    _dispatcher.start()


def stop() -> None:
    global _dispatcher
    with _started:
        running, _dispatcher = _dispatcher, None
    if running is not None:
        running.stop()


def wake() -> None:
    """New deliveries committed: send them now rather than at the next look."""
    running = _dispatcher
    if running is not None:
        running.wake()
