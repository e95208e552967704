"""Prometheus metrics and the ``/metrics`` endpoint.

Two kinds of metric, each kept where it is true:

- what processes observe (the model's latency per turn, here; live delivery's lag,
  ``sessions_app.metrics``) are histograms in the process that observed them. With
  ``PROMETHEUS_MULTIPROC_DIR`` set (``make cluster`` and the deployment units set
  it), every process of a host, Celery's pool children included, writes them to
  that directory and any server's ``/metrics`` reports their sum for the host;
  without it, each process reports its own.
- what the system is (runs by status, the Celery queue's length) is read from the
  database and Redis at scrape time, by collectors, so that every server reports
  the same truth and nothing drifts when a process dies.

``/metrics`` answers clients on the loopback interface (as the ASGI server sees
them: behind nginx, with ``--proxy-headers``, the real client) or, when
``GOAAI_METRICS_TOKEN`` is set, only requests that bring it as a bearer token.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from collections.abc import Iterator
from functools import cache
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from kombu.transport.redis import PRIORITY_STEPS
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, multiprocess
from prometheus_client.django import PrometheusDjangoView
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from goaai.celery import app as celery_app
from goaai.health import redis_client
from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Run

logger = logging.getLogger(__name__)

MODEL_LATENCY = Histogram(
    "goaai_model_latency_seconds",
    "Time the model took to answer one turn (the turn's latency_ms).",
    ["model"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0),
)

# Kombu's Redis transport keeps a queue as a list per priority step ("celery",
# "celery\x06\x163", ...) and the messages workers took but did not acknowledge yet
# (acks_late: the runs being executed) in one hash.
_KOMBU_PRIORITY_SEPARATOR = "\x06\x16"
_KOMBU_UNACKED_KEY = "unacked"


def observe_model_latency(*, model: str, latency_ms: int) -> None:
    """Record how long the model took for one turn."""
    MODEL_LATENCY.labels(model=model or "unknown").observe(max(latency_ms, 0) / 1000)


class RunsByStatusCollector(Collector):
    """``goaai_runs{status}``: the runs in the database in each status, counted at
    scrape time (one grouped count, an index-only scan of ``run_status_created``)."""

    def collect(self) -> Iterator[Metric]:
        try:
            counts = dict(
                Run.objects.order_by()
                .values("status")
                .annotate(n=Count("pk"))
                .values_list("status", "n")
            )
        except DatabaseError:
            logger.warning("Metrics: counting runs failed", exc_info=True)
            return
        family = GaugeMetricFamily(
            "goaai_runs", "Runs in the database, by status.", labels=["status"]
        )
        for status in RunStatus:
            family.add_metric([status.value], counts.get(status.value, 0))
        yield family


class CeleryQueueCollector(Collector):
    """``goaai_celery_queue_length{queue}``: tasks (runs) waiting for a worker, and
    ``goaai_celery_unacked``: tasks that workers hold (executing, or lost with a
    worker that died and not yet delivered again), read from the Redis broker."""

    def collect(self) -> Iterator[Metric]:
        broker = str(settings.CELERY_BROKER_URL)
        if not broker.startswith(("redis://", "rediss://", "unix://")):
            return
        queue = str(celery_app.conf.task_default_queue)
        options: dict[str, Any] = dict(celery_app.conf.broker_transport_options or {})
        steps = options.get("priority_steps", PRIORITY_STEPS)
        separator = options.get("sep", _KOMBU_PRIORITY_SEPARATOR)
        pipe = redis_client(broker).pipeline(transaction=False)
        for step in steps:
            pipe.llen(f"{queue}{separator}{step}" if step else queue)
        pipe.hlen(options.get("unacked_key", _KOMBU_UNACKED_KEY))
        try:
            *lengths, unacked = pipe.execute()
        except (redis.RedisError, OSError):
            logger.warning("Metrics: reading the Celery queue from Redis failed", exc_info=True)
            return
        waiting = GaugeMetricFamily(
            "goaai_celery_queue_length",
            "Tasks waiting in the Celery queue (the Redis lists of every priority).",
            labels=["queue"],
        )
        waiting.add_metric([queue], sum(int(n) for n in lengths))
        yield waiting
        yield GaugeMetricFamily(
            "goaai_celery_unacked",
            "Tasks taken by workers and not acknowledged yet (runs being executed).",
            value=int(unacked),
        )


class _ProcessMetrics(Collector):
    """This process's own metrics (when processes do not share a directory)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


@cache
def scrape_registry() -> CollectorRegistry:
    """What ``/metrics`` reports: every process's histograms (shared through
    ``PROMETHEUS_MULTIPROC_DIR``, or this process's alone) and the collectors that
    read the database and Redis."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_ProcessMetrics())
    registry.register(RunsByStatusCollector())
    registry.register(CeleryQueueCollector())
    return registry


def _is_loopback(address: str | None) -> bool:
    if not address:
        # No peer address: a client on the server's own Unix socket.
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """Why ``request`` may not read the metrics, or ``None`` when it may."""
    token = str(settings.GOAAI_METRICS_TOKEN or "")
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return None
        refusal = JsonResponse({"detail": "The metrics need the bearer token."}, status=401)
        refusal["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return refusal
    if _is_loopback(request.META.get("REMOTE_ADDR")):
        return None
    return JsonResponse({"detail": "The metrics answer local clients only."}, status=403)


class MetricsView(PrometheusDjangoView):
    """``/metrics`` in Prometheus' text format, for allowed clients only."""

    http_method_names = ["get", "head"]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        refusal = _refusal(request)
        if refusal is not None:
            return refusal
        self.registry = scrape_registry()
        response = super().dispatch(request, *args, **kwargs)
        response["Cache-Control"] = "no-store"
        return response
