"""How many requests a model profile receives: at once, and per minute.

A profile's ``max_concurrency`` and ``requests_per_minute`` hold for this process
(``LocalLimits``), or for every server and worker together through the limits a
deployment installs (goaai's, on Redis: ``goaai.model_limits``). A run over a
limit waits for its turn
(queue, do not fail): fifty runs started at once against a provider that allows
ten requests at a time take turns instead of drawing fifty 429s.

Requests per minute are a moving window counted by the ``limits`` package, in
memory or in any storage it knows (:class:`MinuteWindow`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from limits import RateLimitItemPerMinute
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from goaai.runtime.config import ModelProfile

logger = logging.getLogger(__name__)

# How often a waiting run looks again for a free place.
POLL_SECONDS = 0.05

Wait = Callable[[float], None]


class ModelLimits(Protocol):
    def slot(self, profile: ModelProfile, wait: Wait = time.sleep) -> Any:
        """A context manager holding one of ``profile``'s places for the request
        made inside it; waits (through ``wait``, which may raise to give up) until
        a place is free and the minute's budget allows another request."""
        ...


class MinuteWindow:
    """Requests per minute, in a moving window kept by ``storage``."""

    def __init__(self, storage_uri: str, prefix: str) -> None:
        self._limiter = MovingWindowRateLimiter(storage_from_string(storage_uri))
        self._prefix = prefix

    def take(self, profile: ModelProfile, wait: Wait) -> None:
        if profile.requests_per_minute is None:
            return
        item = RateLimitItemPerMinute(profile.requests_per_minute)
        while not self._limiter.hit(item, self._prefix, profile.name):
            stats = self._limiter.get_window_stats(item, self._prefix, profile.name)
            wait(min(max(stats.reset_time - time.time(), POLL_SECONDS), 60.0))


class LocalLimits:
    """The limits of one process: a semaphore and a window per profile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._places: dict[str, threading.BoundedSemaphore] = {}
        self._window = MinuteWindow("memory://", "goaai")

    @contextmanager
    def slot(self, profile: ModelProfile, wait: Wait = time.sleep) -> Iterator[None]:
        places = self._semaphore(profile)
        if places is not None:
            while not places.acquire(timeout=POLL_SECONDS):
                wait(0)
        try:
            self._window.take(profile, wait)
            yield
        finally:
            if places is not None:
                places.release()

    def _semaphore(self, profile: ModelProfile) -> threading.BoundedSemaphore | None:
        if profile.max_concurrency is None:
            return None
        with self._lock:
            places = self._places.get(profile.name)
            if places is None:
                places = threading.BoundedSemaphore(profile.max_concurrency)
                self._places[profile.name] = places
            return places
