"""Deliveries written in the transaction of the change they announce (an outbox):
a change that commits has its messages waiting, one that rolls back has none, and a
crash between the two loses nothing.

Only the five webhook event types cost anything here: any other event, and an
owner without an active endpoint for the type, add no row (the latter costs one
indexed query, only for those types).
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import BigIntegerField

from goaai import sql
from goaai.runtime.vocabulary import (
    RUN_END_EVENTS,
    WEBHOOK_LOGGED_EVENTS,
    EventType,
    WebhookDeliveryStatus,
)
from sessions_app.models import WebhookDelivery, WebhookEndpoint
from sessions_app.publisher import Written
from sessions_app.webhooks import dispatcher

# What each logged event says the run (or session) now is.
_STATUS_OF = {str(event): str(status) for status, event in RUN_END_EVENTS.items()} | {
    EventType.RUN_AWAITING_INPUT: "awaiting_input",
    EventType.SESSION_ENDED: "ended",
}


def message_id() -> str:
    """A new ``webhook-id``: ``msg_`` and 24 random URL-safe characters."""
    return "msg_" + secrets.token_urlsafe(18)


def message(*, type: str, at: dt.datetime, data: dict[str, Any]) -> dict[str, Any]:
    """A message as the specification recommends: ``{type, timestamp, data}``."""
    return {"type": type, "timestamp": at.isoformat(), "data": data}


_SUBSCRIBED = sql.Prepared(
    lambda: (
        WebhookEndpoint.objects.filter(owner_id=sql.Slot("owner", BigIntegerField()), active=True)
        .order_by()
        .values_list("pk", "events")
    )
)


def _subscribed(owner_id: int) -> list[tuple[UUID, list[str]]]:
    """The owner's active endpoints and the events each subscribes to (every run's
    end asks: a statement built once)."""
    return [(endpoint, events) for endpoint, events in _SUBSCRIBED.rows(owner=owner_id)]


def _write(rows: list[WebhookDelivery]) -> None:
    if rows:
        WebhookDelivery.objects.bulk_create(rows)
        transaction.on_commit(dispatcher.wake)


def _delivery(endpoint_id: UUID, payload: dict[str, Any], at: dt.datetime) -> WebhookDelivery:
    return WebhookDelivery(
        endpoint_id=endpoint_id,
        event_type=payload["type"],
        message_id=message_id(),
        payload=payload,
        status=WebhookDeliveryStatus.PENDING,
        next_attempt_at=at,
    )


def webhook_enqueue(*, owner_id: int, type: str, data: dict[str, Any], at: dt.datetime) -> int:
    """Queue a message of ``type`` for each of the owner's active endpoints that
    subscribe to it, in the caller's transaction; how many were queued."""
    payload = message(type=type, at=at, data=data)
    rows = [
        _delivery(endpoint_id, payload, at)
        for endpoint_id, events in _subscribed(owner_id)
        if type in events
    ]
    _write(rows)
    return len(rows)


def webhook_enqueue_logged(
    *, owner_id: int, agent: str, events: Iterable[Written], at: dt.datetime
) -> int:
    """Queue the messages that a session's newly logged ``events`` are (run
    completed, failed or timed out, awaiting input; session ended)."""
    messages = [
        message(type=WEBHOOK_LOGGED_EVENTS[event.type], at=at, data=_logged_data(event, agent))
        for event in events
        if event.type in WEBHOOK_LOGGED_EVENTS
    ]
    if not messages:
        return 0
    endpoints = _subscribed(owner_id)
    rows = [
        _delivery(endpoint_id, payload, at)
        for payload in messages
        for endpoint_id, subscribed in endpoints
        if payload["type"] in subscribed
    ]
    _write(rows)
    return len(rows)


def _logged_data(event: Written, agent: str) -> dict[str, Any]:
    """A logged event as a message's data: where it happened, then what the log
    says of it (a run's output and usage, its error, what it waits for)."""
    return {
        "session": str(event.session_id),
        "run": str(event.run_id) if event.run_id else None,
        "seq": event.seq,
        "agent": agent,
        "status": _STATUS_OF.get(event.type, ""),
        **event.data,
    }
