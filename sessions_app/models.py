"""A session is one conversation between a user and an agent; its event log is the
numbered record of everything that happened in it."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from goaai.runtime import payloads
from goaai.runtime.vocabulary import SESSION_STATUS_CHOICES, EventType, SessionStatus, choices


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
