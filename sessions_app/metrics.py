"""Live delivery's metrics: how long committed events wait before they are published.

The histogram is recorded in whichever process commits (a server, or a Celery
worker's child) and read by ``/metrics`` (``runs_app.metrics``); with
``PROMETHEUS_MULTIPROC_DIR`` set, every process of a host shares its values.
"""

from __future__ import annotations

from prometheus_client import Histogram

# From the commit (the transaction's on_commit hook) to the channel layer having
# accepted the events for the session's group: the wait a subscriber cannot avoid.
EVENT_PUBLISH_LAG = Histogram(
    "goaai_event_publish_lag_seconds",
    "Time from an event batch's commit to its publication on the channel layer.",
    ["layer"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


def observe_publish_lag(*, layer: str, seconds: float) -> None:
    """Record one event batch's wait between its commit and its publication."""
    EVENT_PUBLISH_LAG.labels(layer=layer).observe(max(seconds, 0.0))
