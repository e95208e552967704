"""Sending due deliveries: claim, attempt, record, schedule the next attempt.

The schedule is Standard Webhooks' (Svix's): at once, then 5 seconds, 5 minutes,
30 minutes, 2 hours, 5 hours, 10 hours and 10 hours after each failure, about a
day in all; a 2xx answer is a success, anything else (another status, no answer
within the timeout, a refused address) a failure. A 410 Gone answer turns the
endpoint off: the receiver said it is gone for good.

Every server and worker may look for due deliveries at once. A delivery is
*claimed* by moving its ``next_attempt_at`` past the attempt (a compare-and-set
on the value it was found with; on PostgreSQL the rows are also locked with SKIP
LOCKED, so concurrent claimers pass over each other's instead of queueing), so two
processes never send the same attempt. A sender that dies mid-attempt leaves the
claim to expire: the attempt is made again then (at least once, never lost).
"""

from __future__ import annotations

import datetime as dt
import logging
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from goaai.runtime.vocabulary import WEBHOOK_DUE_STATUSES, WebhookDeliveryStatus
from sessions_app.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from sessions_app.webhooks.addresses import AllowList
from sessions_app.webhooks.sending import Outcome, send

logger = logging.getLogger(__name__)

# Seconds to wait before each attempt (the first goes at once).
SCHEDULE: tuple[int, ...] = (0, 5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600)
# How long past the attempt's timeout a claim holds before another sender may
# take the delivery up again (its sender died).
CLAIM_GRACE_SECONDS = 60
GONE = 410


def allow_list() -> AllowList:
    return AllowList.parse(settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS)


def claim_due(*, now: dt.datetime, limit: int) -> list[UUID]:
    """Claim up to ``limit`` due deliveries for this sender; their ids."""
    held_until = now + dt.timedelta(
        seconds=settings.GOAAI_WEBHOOK_TIMEOUT_SECONDS + CLAIM_GRACE_SECONDS
    )
    due = WebhookDelivery.objects.filter(
        status__in=WEBHOOK_DUE_STATUSES, next_attempt_at__lte=now
    ).order_by("next_attempt_at")
    if connection.features.has_select_for_update_skip_locked:
        with transaction.atomic():
            ids = list(due.select_for_update(skip_locked=True).values_list("pk", flat=True)[:limit])
            WebhookDelivery.objects.filter(pk__in=ids).update(next_attempt_at=held_until)
        return ids
    claimed: list[UUID] = []
    for pk, seen in due.values_list("pk", "next_attempt_at")[: limit * 2]:
        if len(claimed) >= limit:
            break
        taken = WebhookDelivery.objects.filter(
            pk=pk, next_attempt_at=seen, status__in=WEBHOOK_DUE_STATUSES
        ).update(next_attempt_at=held_until)
        if taken:
            claimed.append(pk)
    return claimed


def attempt(*, delivery_id: UUID, now: dt.datetime | None = None) -> WebhookAttempt | None:
    """Make one attempt at a claimed delivery and record it; ``None`` if the
    delivery is gone (its endpoint was deleted meanwhile)."""
    delivery = WebhookDelivery.objects.select_related("endpoint").filter(pk=delivery_id).first()
    if delivery is None:
        return None
    endpoint = delivery.endpoint
    started = timezone.now()
    if not endpoint.active:
        outcome = Outcome(None, 0, "The endpoint is disabled.")
    else:
        outcome = send(
            url=endpoint.url,
            secret=endpoint.secret,
            message_id=delivery.message_id,
            payload=delivery.payload,
            allow=allow_list(),
            timeout=float(settings.GOAAI_WEBHOOK_TIMEOUT_SECONDS),
        )
    return attempt_record(
        delivery_id=delivery_id,
        started_at=started,
        outcome=outcome,
        now=now or timezone.now(),
        give_up=not endpoint.active,
    )


def attempt_record(
    *,
    delivery_id: UUID,
    started_at: dt.datetime,
    outcome: Outcome,
    now: dt.datetime,
    give_up: bool = False,
) -> WebhookAttempt | None:
    """Log an attempt and move the delivery on: succeeded, failed with the next
    attempt scheduled from ``now``, or given up (the schedule is spent, the endpoint
    said 410 Gone and is turned off, or ``give_up``). Locks the delivery's row."""
    with transaction.atomic():
        row = (
            WebhookDelivery.objects.select_for_update()
            .filter(pk=delivery_id)
            .values("attempts", "endpoint_id", "redelivery_requested")
            .first()
        )
        if row is None:
            return None
        number = row["attempts"] + 1
        logged = WebhookAttempt.objects.create(
            delivery_id=delivery_id,
            number=number,
            started_at=started_at,
            response_status=outcome.status,
            latency_ms=outcome.latency_ms,
            succeeded=outcome.succeeded,
            error=outcome.error[:500],
            response_excerpt=outcome.excerpt,
            manual=row["redelivery_requested"],
        )
        status, next_at = _next(outcome, number, now, give_up)
        if outcome.status == GONE:
            WebhookEndpoint.objects.filter(pk=row["endpoint_id"]).update(
                active=False, disabled_reason="The receiver answered 410 Gone.", updated_at=now
            )
        WebhookDelivery.objects.filter(pk=delivery_id).update(
            attempts=F("attempts") + 1,
            status=status,
            next_attempt_at=next_at,
            last_attempt_at=started_at,
            last_response_status=outcome.status,
            redelivery_requested=False,
        )
    return logged


def _next(
    outcome: Outcome, number: int, now: dt.datetime, give_up: bool
) -> tuple[str, dt.datetime | None]:
    if outcome.succeeded:
        return WebhookDeliveryStatus.SUCCEEDED, None
    if give_up or outcome.status == GONE or number >= len(SCHEDULE):
        return WebhookDeliveryStatus.GAVE_UP, None
    return WebhookDeliveryStatus.FAILED, now + dt.timedelta(seconds=SCHEDULE[number])


def deliver_due(*, now: dt.datetime | None = None, limit: int = 100) -> int:
    """Claim and send, one after the other, the deliveries due at ``now``; how many
    were attempted. (The background dispatcher sends in parallel; this is for
    commands and tests.)"""
    at = now or timezone.now()
    claimed = claim_due(now=at, limit=limit)
    for delivery_id in claimed:
        try:
            attempt(delivery_id=delivery_id, now=at)
        except Exception:
            # The claim expires and the attempt is made again then.
            logger.exception("Webhook delivery %s failed to be attempted", delivery_id)
    return len(claimed)
