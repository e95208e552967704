"""Read goaai's configuration from the environment, in one place.

Every setting that may differ between a laptop and a production host goes through
these helpers, so that ``settings.py`` states the defaults that make ``make run``
work (SQLite, in-memory channel layer, in-process executor) and production states
its values as environment variables.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """The variable as a string, ``default`` when it is unset."""
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    """The variable as a boolean; anything but a clear yes/no is a configuration error."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def env_int(name: str, default: int) -> int:
    """The variable as an integer."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    """A comma-separated variable as a list of non-empty, stripped items."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_origin(name: str) -> str:
    """A URL-valued variable as its origin (``https://host[:port]``), ``""`` when it
    is unset; a value that is not an http(s) URL with a host is a configuration
    error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    parsed = urlsplit(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ImproperlyConfigured(
            f"{name} must be an http(s) URL such as https://host, not {raw!r}"
        )
    return f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}"


def env_json(name: str, default: Any) -> Any:
    """A JSON-valued variable, parsed; ``default`` when it is unset."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON: {exc}") from exc


def env_database(name: str, default: str) -> dict[str, Any]:
    """A ``DATABASE_URL``-style variable as a Django ``DATABASES`` entry.

    SQLite gets WAL and immediate transactions, so that the in-process executor's
    worker threads and the web requests do not fail with "database is locked" when
    they write at the same time. Under ASGI ``CONN_MAX_AGE`` does not reuse
    connections (every request has a thread of its own): PostgreSQL gets psycopg's
    connection pool, SQLite goaai's backend that keeps closed connections for reuse
    (``DATABASE_POOL=0`` turns either off).
    """
    url = os.environ.get(name) or default
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(url))
    except Exception as exc:  # dj-database-url raises several kinds for a bad URL.
        raise ImproperlyConfigured(f"{name} is not a database URL: {exc}") from exc
    engine = config.get("ENGINE", "")
    options: dict[str, Any] = dict(config.get("OPTIONS") or {})
    if engine == "django.db.backends.sqlite3":
        # Django's backend, with connections kept for the next request (goaai.sqlite).
        config["ENGINE"] = "goaai.sqlite"
        if not env_bool("DATABASE_POOL", default=True):
            options.setdefault("pool", False)
        options.setdefault("transaction_mode", "IMMEDIATE")
        options.setdefault("timeout", 20)
        options.setdefault(
            "init_command",
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
        )
    elif engine == "django.db.backends.postgresql":
        if env_bool("DATABASE_POOL", default=True):
            options.setdefault(
                "pool",
                {
                    "min_size": env_int("DATABASE_POOL_MIN", 1),
                    "max_size": env_int("DATABASE_POOL_MAX", 10),
                    "timeout": 10,
                },
            )
        config["CONN_MAX_AGE"] = 0
        # A connection the server dropped (a restart, a failover,
        # pg_terminate_backend) is replaced before it is used: the pool checks each
        # connection it hands out, a persistent connection is checked per request.
        # goaai's backend is Django's with a check that reads the socket before it
        # sends a statement (goaai.postgresql.base).
        config["CONN_HEALTH_CHECKS"] = True
        config["ENGINE"] = "goaai.postgresql"
        # Parameters bound on the server, so that PostgreSQL plans a statement the
        # connection runs again and again once, and psycopg prepares it after a few
        # runs (every step of every run repeats the same few statements). Set
        # DATABASE_PREPARED=0 behind a pooler that cannot keep prepared statements
        # (PgBouncer in transaction mode).
        if env_bool("DATABASE_PREPARED", default=True):
            options.setdefault("server_side_binding", True)
            options.setdefault("prepare_threshold", 5)
    config["OPTIONS"] = options
    return config


logger = logging.getLogger(__name__)

# The OTLP protocol goaai's exporters speak (opentelemetry-exporter-otlp-proto-http).
_OTLP_PROTOCOL = "http/protobuf"


def env_otlp_endpoint(signal: str) -> str:
    """Where OpenTelemetry's ``signal`` (``traces`` or ``metrics``) is exported over
    OTLP/HTTP, by the standard variables, or ``""`` for not at all.

    ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` is the full URL;
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` a base URL to which ``/v1/<signal>`` is added.
    Neither set, ``OTEL_SDK_DISABLED=true`` or ``OTEL_<SIGNAL>_EXPORTER=none``: no
    export. A protocol other than http/protobuf (grpc is a common injected
    default) leaves the signal off with a warning that says so: goaai never fails
    to start because of its telemetry, nor sends a collector what it cannot read."""
    upper = signal.upper()
    if env_bool("OTEL_SDK_DISABLED", default=False):
        return ""
    if os.environ.get(f"OTEL_{upper}_EXPORTER", "").strip().lower() == "none":
        return ""
    specific = os.environ.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "").strip()
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    endpoint = specific or (f"{base.rstrip('/')}/v1/{signal}" if base else "")
    if not endpoint:
        return ""
    for name in (f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = os.environ.get(name, "").strip()
        if protocol:
            if protocol != _OTLP_PROTOCOL:
                logger.warning(
                    "%s is %r, but goaai exports OTLP over %s only: %s are not exported.",
                    name,
                    protocol,
                    _OTLP_PROTOCOL,
                    signal,
                )
                return ""
            break
    parsed = urlsplit(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ImproperlyConfigured(
            f"The OTLP {signal} endpoint must be an http(s) URL, not {endpoint!r}"
        )
    return endpoint
