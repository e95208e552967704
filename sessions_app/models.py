"""A session is one conversation between a user and an agent; its event log is the
numbered record of everything that happened in it."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from goaai.runtime import payloads
from goaai.runtime.vocabulary import (
    SESSION_STATUS_CHOICES,
    EventType,
    SessionStatus,
    WebhookDeliveryStatus,
    choices,
)


class Session(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Deleting a user deletes their conversations: a session has no meaning, and no
    # one allowed to read it, without its owner.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions"
    )
    agent = models.CharField(max_length=100)
    title = models.CharField(max_length=200, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=SESSION_STATUS_CHOICES, default=SessionStatus.ACTIVE
    )
    # The sequence number of the session's newest RunEvent. Appending an event
    # increments it in the same transaction, which serialises concurrent writers on
    # this one row and gives gap-free, duplicate-free numbers.
    last_event_seq = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # When the session's newest event was recorded: chats are listed by it.
    last_activity_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        # Ending another user's session (see goaai.access); a user may always end
        # their own.
        permissions = [("end_session", "Can end any user's session")]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="session_owner_created"),
            models.Index(fields=["status", "-created_at"], name="session_status_created"),
            models.Index(fields=["agent", "-created_at"], name="session_agent_created"),
            models.Index(fields=["-created_at"], name="session_created"),
            models.Index(fields=["owner", "-last_activity_at"], name="session_owner_activity"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=[s.value for s in SessionStatus]),
                name="session_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(status=SessionStatus.ACTIVE, ended_at__isnull=True)
                | models.Q(status=SessionStatus.ENDED, ended_at__isnull=False),
                name="session_ended_at_matches_status",
            ),
            models.CheckConstraint(
                condition=models.Q(last_event_seq__gte=0), name="session_event_seq_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"Session {self.id}"

    @property
    def is_active(self) -> bool:
        return self.status == SessionStatus.ACTIVE


class RunEvent(models.Model):
    """One entry of a session's append-only event log.

    ``seq`` increases by one within the session, with no gap and no duplicate; it is
    what live subscribers resume from. Events of a run also point at it (events
    about the session itself have no run).
    """

    id = models.BigAutoField(primary_key=True)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events")
    run = models.ForeignKey(
        "runs_app.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=40, choices=choices(EventType))
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "seq"]
        indexes = [
            models.Index(fields=["run", "seq"], name="event_run_seq"),
            models.Index(fields=["type", "-created_at"], name="event_type_created"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="event_seq_unique_per_session"),
            models.CheckConstraint(condition=models.Q(seq__gt=0), name="event_seq_positive"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.type}"

    def as_dict(self) -> dict[str, Any]:
        """The event as the API, the live streams and exports show it."""
        return payloads.logged(
            seq=self.seq,
            type=self.type,
            run=self.run_id,
            data=self.data,
            created_at=self.created_at,
        )


class ApiToken(models.Model):
    """A named credential an integration sends as ``Authorization: Bearer <token>``.

    Only a SHA-256 digest of the token is stored: the token is shown once, when it
    is created, and a copy of the database does not hand out working credentials.
    A fast hash is enough because tokens are long random strings, not passwords.

    A token made with another token is that token's child: revoking a token revokes
    every token made with it, so a leaked token cannot leave working ones behind.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    # The first characters of the token, kept in clear so a user can tell tokens apart.
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The token this one was made with (none when made with a password or the
    # browser session).
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "-created_at"], name="apitoken_user_created")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class WebhookEndpoint(models.Model):
    """A URL of a user's that goaai sends the events it subscribes to, signed with
    its secret as the Standard Webhooks specification describes."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    # The WebhookEvent types it subscribes to.
    events = models.JSONField(default=list)
    # ``whsec_`` and base64 of 32 random bytes. Kept in clear: signing needs it.
    secret = models.CharField(max_length=100, editable=False)
    active = models.BooleanField(default=True)
    # Why goaai turned it off (the receiver answered 410 Gone), when it did.
    disabled_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # What every event that may be a message asks: the owner's active endpoints.
            models.Index(fields=["owner", "active"], name="webhook_owner_active"),
        ]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One message for one endpoint: the outbox row written in the transaction of
    the change it announces, then sent (and sent again) until it succeeds or its
    attempts run out."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    event_type = models.CharField(max_length=40)
    # The ``webhook-id`` header: the same for every attempt, so receivers can skip
    # a message they already handled.
    message_id = models.CharField(max_length=40, unique=True)
    # What is sent: {"type", "timestamp", "data"}.
    payload = models.JSONField()
    status = models.CharField(
        max_length=16,
        choices=choices(WebhookDeliveryStatus),
        default=WebhookDeliveryStatus.PENDING.value,
    )
    attempts = models.PositiveIntegerField(default=0)
    # When the next attempt is due (a sender that claims it moves it past its own
    # attempt); null once the delivery succeeded or gave up.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # A person asked for the next attempt (redelivery): the log says so.
    redelivery_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["endpoint", "-created_at"], name="webhook_delivery_endpoint"),
            models.Index(fields=["next_attempt_at"], name="webhook_delivery_due"),
            models.Index(fields=["-created_at"], name="webhook_delivery_created"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=[s.value for s in WebhookDeliveryStatus]),
                name="webhook_delivery_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id}"


class WebhookAttempt(models.Model):
    """One try at sending a delivery: what the receiver answered, and how fast."""

    id = models.BigAutoField(primary_key=True)
    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    # Null when no answer came (refused address, connection error, timeout).
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    succeeded = models.BooleanField(default=False)
    error = models.CharField(max_length=500, blank=True)
    # The start of the receiver's answer, for whoever debugs it.
    response_excerpt = models.TextField(blank=True)
    # A person asked for it (redelivery) rather than the schedule.
    manual = models.BooleanField(default=False)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "number"], name="webhook_attempt_unique_number"
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} ({self.response_status or self.error or '?'})"


class UserPreferences(models.Model):
    """What a user chose on their settings page."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="goaai_preferences"
    )
    # An IANA name ("Europe/Paris"); blank: the browser's own time zone.
    time_zone = models.CharField(max_length=64, blank=True)
    # Single-key shortcuts in the chat (WCAG 2.1.4: they can be turned off).
    shortcuts_enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "user preferences"
        verbose_name_plural = "user preferences"

    def __str__(self) -> str:
        return f"Preferences of {self.user}"
