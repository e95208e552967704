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
claim to expire: the attempt is made again then (at least once, never lost). The
claim's value is its token: an attempt is recorded only while the delivery still
holds it, so a sender that comes back after another took over records nothing.
An attempt ends within ``GOAAI_WEBHOOK_TIMEOUT_SECONDS`` (see ``sending``), well
before its claim expires.

A claim may also give each endpoint at most ``per_endpoint`` of a process's
senders (counting those already ``busy`` with it): one slow receiver cannot tie
them all up and hold back everyone else's deliveries.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from goaai.database import retrying
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


@dataclass(frozen=True)
class Claim:
    """A delivery claimed for one attempt, held until ``held_until``."""

    delivery_id: UUID
    endpoint_id: UUID
    held_until: dt.datetime


class _Share:
    """Picks candidates, giving no endpoint more than ``per_endpoint`` senders."""

    def __init__(self, per_endpoint: int | None, busy: Mapping[UUID, int]) -> None:
        self.per_endpoint = per_endpoint
        self.taken: Counter[UUID] = Counter(busy)

    def full(self) -> list[UUID]:
        if self.per_endpoint is None:
            return []
        return [endpoint for endpoint, n in self.taken.items() if n >= self.per_endpoint]

    def take(self, endpoint_id: UUID) -> bool:
        if self.per_endpoint is not None and self.taken[endpoint_id] >= self.per_endpoint:
            return False
        self.taken[endpoint_id] += 1
        return True


def claim_due(
    *,
    now: dt.datetime,
    limit: int,
    per_endpoint: int | None = None,
    busy: Mapping[UUID, int] | None = None,
) -> list[Claim]:
    """Claim up to ``limit`` due deliveries for this sender, oldest first; with
    ``per_endpoint``, at most that many per endpoint, counting the attempts this
    process has under way (``busy``: endpoint id to how many)."""
    held_until = now + dt.timedelta(
        seconds=settings.GOAAI_WEBHOOK_TIMEOUT_SECONDS + CLAIM_GRACE_SECONDS
    )
    share = _Share(per_endpoint, busy or {})
    due = (
        WebhookDelivery.objects.filter(status__in=WEBHOOK_DUE_STATUSES, next_attempt_at__lte=now)
        .exclude(endpoint_id__in=share.full())
        .order_by("next_attempt_at")
    )
    # More candidates than places: some may be passed over for their endpoint.
    scan = limit if per_endpoint is None else limit * 4
    if connection.features.has_select_for_update_skip_locked:
        with transaction.atomic():
            found = due.select_for_update(skip_locked=True).values_list("pk", "endpoint_id")
            chosen = [
                Claim(pk, endpoint_id, held_until)
                for pk, endpoint_id in found[:scan]
                if share.take(endpoint_id)
            ][:limit]
            WebhookDelivery.objects.filter(pk__in=[c.delivery_id for c in chosen]).update(
                next_attempt_at=held_until
            )
        return chosen
    claimed: list[Claim] = []
    # One transaction: a look the database refuses halfway claims nothing.
    with transaction.atomic():
        for pk, endpoint_id, seen in due.values_list("pk", "endpoint_id", "next_attempt_at")[
            : scan * 2
        ]:
            if len(claimed) >= limit:
                break
            if not share.take(endpoint_id):
                continue
            taken = WebhookDelivery.objects.filter(
                pk=pk, next_attempt_at=seen, status__in=WEBHOOK_DUE_STATUSES
            ).update(next_attempt_at=held_until)
            if taken:
                claimed.append(Claim(pk, endpoint_id, held_until))
            else:
                share.taken[endpoint_id] -= 1
    return claimed


def attempt(*, claim: Claim, now: dt.datetime | None = None) -> WebhookAttempt | None:
    """Make one attempt at a claimed delivery and record it; ``None`` if the
    delivery is gone (its endpoint was deleted meanwhile) or the claim was lost
    (it expired and another sender took the delivery over)."""
    delivery_id = claim.delivery_id
    delivery = WebhookDelivery.objects.select_related("endpoint").filter(pk=delivery_id).first()
    if delivery is None or delivery.next_attempt_at != claim.held_until:
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
    # The receiver has the message: a database that refuses the record for a
    # moment gets a few retries rather than have the claim expire and the message
    # go out again.
    return retrying(
        lambda: attempt_record(
            delivery_id=delivery_id,
            started_at=started,
            outcome=outcome,
            now=now or timezone.now(),
            give_up=not endpoint.active,
            held_until=claim.held_until,
        ),
        what=f"Webhook delivery {delivery_id}",
    )


def attempt_record(
    *,
    delivery_id: UUID,
    started_at: dt.datetime,
    outcome: Outcome,
    now: dt.datetime,
    give_up: bool = False,
    held_until: dt.datetime | None = None,
) -> WebhookAttempt | None:
    """Log an attempt and move the delivery on: succeeded, failed with the next
    attempt scheduled from ``now``, or given up (the schedule is spent, the endpoint
    said 410 Gone and is turned off, or ``give_up``). Locks the delivery's row.

    With ``held_until`` (the attempt's claim), nothing is recorded, and ``None``
    returned, unless the delivery still holds that claim: another sender owns it."""
    with transaction.atomic():
        row = (
            WebhookDelivery.objects.select_for_update()
            .filter(pk=delivery_id)
            .values("attempts", "endpoint_id", "redelivery_requested", "next_attempt_at")
            .first()
        )
        if row is None:
            return None
        if held_until is not None and row["next_attempt_at"] != held_until:
            logger.warning(
                "Webhook delivery %s: the attempt's claim was lost; another sender has it",
                delivery_id,
            )
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
    for claim in claimed:
        try:
            attempt(claim=claim, now=at)
        except Exception:
            # The claim expires and the attempt is made again then.
            logger.exception("Webhook delivery %s failed to be attempted", claim.delivery_id)
    return len(claimed)
