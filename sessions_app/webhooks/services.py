"""Every write to webhook endpoints and, outside sending, to their deliveries."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from goaai.runtime.errors import GoaaiError, NotFound
from goaai.runtime.vocabulary import WEBHOOK_PING, WebhookDeliveryStatus, WebhookEvent
from sessions_app.models import WebhookDelivery, WebhookEndpoint
from sessions_app.webhooks import dispatcher
from sessions_app.webhooks.addresses import check_url
from sessions_app.webhooks.delivery import allow_list
from sessions_app.webhooks.outbox import message, message_id

# Each event fans out to every endpoint subscribed to it: a bound keeps one user
# from turning one run into thousands of requests.
MAX_ENDPOINTS_PER_USER = 20
SECRET_PREFIX = "whsec_"  # noqa: S105 (the specification's marker, not a secret)


class InvalidWebhook(GoaaiError):
    """An endpoint that cannot be saved as asked; ``field`` names what is wrong."""

    code = "invalid"

    def __init__(self, message: str, *, field: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.field = field
        self.code = code


def new_secret() -> str:
    """A signing secret as Standard Webhooks writes them: ``whsec_`` and base64 of
    32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _clean_events(events: Iterable[str]) -> list[str]:
    known = {str(event) for event in WebhookEvent}
    chosen = list(dict.fromkeys(events))
    unknown = [event for event in chosen if event not in known]
    if unknown or not chosen:
        raise InvalidWebhook(
            f"Subscribe to one or more of {', '.join(sorted(known))}.", field="events"
        )
    return chosen


def webhook_url_check(url: str) -> str:
    try:
        check_url(url, allow_list())
    except GoaaiError as refused:
        raise InvalidWebhook(str(refused), field="url", code="refused_url") from None
    return url


def webhook_endpoint_create(
    *, owner_id: int, url: str, events: Iterable[str], description: str = ""
) -> WebhookEndpoint:
    """Subscribe ``url`` to ``events`` for the user, with a new secret.
    :class:`InvalidWebhook` for a URL that is refused (not http(s), not public) or
    events that do not exist."""
    chosen = _clean_events(events)
    url = webhook_url_check(url)
    with transaction.atomic():
        # Counted under the owner's row lock: two concurrent creations cannot both
        # slip under the bound.
        if not get_user_model().objects.select_for_update().filter(pk=owner_id).exists():
            raise NotFound(f"No user {owner_id}.")
        if WebhookEndpoint.objects.filter(owner_id=owner_id).count() >= MAX_ENDPOINTS_PER_USER:
            raise InvalidWebhook(
                f"A user has at most {MAX_ENDPOINTS_PER_USER} webhook endpoints.",
                field="non_field_errors",
                code="too_many",
            )
        return WebhookEndpoint.objects.create(
            owner_id=owner_id,
            url=url,
            events=chosen,
            description=description.strip()[:200],
            secret=new_secret(),
        )


def webhook_endpoint_update(
    *,
    endpoint_id: UUID,
    url: str | None = None,
    events: Iterable[str] | None = None,
    description: str | None = None,
    active: bool | None = None,
) -> WebhookEndpoint:
    """Change what an endpoint is sent, where, or whether at all. Turning it on
    again clears why goaai had turned it off."""
    changes: dict[str, Any] = {}
    if url is not None:
        changes["url"] = webhook_url_check(url)
    if events is not None:
        changes["events"] = _clean_events(events)
    if description is not None:
        changes["description"] = description.strip()[:200]
    if active is not None:
        changes["active"] = active
        if active:
            changes["disabled_reason"] = ""
    with transaction.atomic():
        if changes:
            updated = WebhookEndpoint.objects.filter(pk=endpoint_id).update(
                updated_at=timezone.now(), **changes
            )
            if not updated:
                raise NotFound(f"No webhook endpoint {endpoint_id}.")
        return _endpoint(endpoint_id)


def _endpoint(endpoint_id: UUID) -> WebhookEndpoint:
    try:
        return WebhookEndpoint.objects.get(pk=endpoint_id)
    except WebhookEndpoint.DoesNotExist:
        raise NotFound(f"No webhook endpoint {endpoint_id}.") from None


def webhook_endpoint_delete(*, endpoint_id: UUID) -> None:
    """Delete an endpoint with its deliveries and their log; nothing more is sent."""
    deleted, _ = WebhookEndpoint.objects.filter(pk=endpoint_id).delete()
    if not deleted:
        raise NotFound(f"No webhook endpoint {endpoint_id}.")


def webhook_secret_rotate(*, endpoint_id: UUID) -> WebhookEndpoint:
    """Give the endpoint a new secret; every attempt from now on, retries of older
    messages too, is signed with it."""
    with transaction.atomic():
        if not WebhookEndpoint.objects.filter(pk=endpoint_id).update(
            secret=new_secret(), updated_at=timezone.now()
        ):
            raise NotFound(f"No webhook endpoint {endpoint_id}.")
        return _endpoint(endpoint_id)


def webhook_ping(*, endpoint_id: UUID) -> WebhookDelivery:
    """Queue a ``webhook.ping`` message for the endpoint (whatever it subscribes
    to), to try the receiver and its signature check; it is retried like any
    other."""
    now = timezone.now()
    with transaction.atomic():
        endpoint = _endpoint(endpoint_id)
        delivery = WebhookDelivery.objects.create(
            endpoint=endpoint,
            event_type=WEBHOOK_PING,
            message_id=message_id(),
            payload=message(
                type=WEBHOOK_PING,
                at=now,
                data={"endpoint": str(endpoint.pk), "url": endpoint.url},
            ),
            status=WebhookDeliveryStatus.PENDING,
            next_attempt_at=now,
        )
        transaction.on_commit(dispatcher.wake)
    return delivery


def webhook_delivery_redeliver(*, delivery_id: UUID) -> WebhookDelivery:
    """Send the message again now, with the same ``webhook-id`` (receivers that
    handled it already can tell). One more attempt: if the delivery had given up,
    a failed redelivery leaves it given up; otherwise its schedule goes on."""
    now = timezone.now()
    with transaction.atomic():
        if not WebhookDelivery.objects.filter(pk=delivery_id).update(
            status=WebhookDeliveryStatus.PENDING, next_attempt_at=now, redelivery_requested=True
        ):
            raise NotFound(f"No webhook delivery {delivery_id}.")
        transaction.on_commit(dispatcher.wake)
        return WebhookDelivery.objects.select_related("endpoint").get(pk=delivery_id)
