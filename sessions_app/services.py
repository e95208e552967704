"""Every write to sessions."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from goaai.runtime import payloads
from goaai.runtime.errors import GoaaiError, NotFound
from goaai.runtime.vocabulary import SessionStatus
from sessions_app.eventlog import EventBatch, recording
from sessions_app.models import ApiToken, Session, UserPreferences
from sessions_app.publisher import publish_to, publish_user_change, token_group
from sessions_app.timezones import is_time_zone

MAX_TITLE_LENGTH = 200


def session_create(
    *, owner_id: int, agent: str, title: str = "", metadata: dict[str, Any] | None = None
) -> Session:
    """Start a conversation of a user with an agent."""
    if not get_user_model().objects.filter(pk=owner_id).exists():
        raise NotFound(f"No user {owner_id}.")
    with transaction.atomic():
        session = Session.objects.create(
            owner_id=owner_id,
            agent=agent,
            title=title[:MAX_TITLE_LENGTH],
            metadata=dict(metadata or {}),
        )
        with recording(session.id) as batch:
            batch.add(
                *payloads.session_created(
                    agent=agent, title=session.title, metadata=session.metadata
                )
            )
    return session


def session_update(
    *, session_id: UUID, title: str | None = None, metadata: dict[str, Any] | None = None
) -> Session:
    """Rename a session or replace its metadata."""
    with recording(session_id) as batch:
        changes: dict[str, Any] = {}
        if title is not None:
            changes["title"] = title[:MAX_TITLE_LENGTH]
        if metadata is not None:
            changes["metadata"] = dict(metadata)
        if changes:
            Session.objects.filter(pk=session_id).update(updated_at=timezone.now(), **changes)
            batch.add(*payloads.session_updated(changes=changes))
    return Session.objects.get(pk=session_id)


def session_mark_ended(
    *, batch: EventBatch, runs_canceled: int, ended_by: int | None = None
) -> None:
    """Mark the session ``batch`` holds locked as ended (it then refuses new runs),
    in ``batch``'s transaction. Ending a session also stops its runs: callers use
    ``runs_app.services.session_end``, which does both."""
    now = batch.now
    Session.objects.filter(pk=batch.session_id).update(
        status=SessionStatus.ENDED, ended_at=now, updated_at=now
    )
    batch.session_status = SessionStatus.ENDED
    name = None
    if ended_by is not None:
        name = (
            get_user_model().objects.filter(pk=ended_by).values_list("username", flat=True).first()
        )
    batch.add(
        *payloads.session_ended(
            ended_at=now.isoformat(),
            runs_canceled=runs_canceled,
            ended_by=ended_by,
            ended_by_name=name,
        )
    )


def session_delete(*, session_id: UUID) -> None:
    """Delete a session with its runs, turns, tool calls, events and session memory."""
    with transaction.atomic():
        owner_id = Session.objects.filter(pk=session_id).values_list("owner_id", flat=True).first()
        deleted, _ = Session.objects.filter(pk=session_id).delete()
        if not deleted or owner_id is None:
            raise NotFound(f"No session {session_id}.")
        # The log went with the session: the owner's session list hears it directly.
        change = payloads.session_deleted(session=session_id, at=timezone.now().isoformat())
        transaction.on_commit(lambda: publish_user_change(owner_id, change))


# API tokens

TOKEN_PREFIX = "goa_"  # noqa: S105 (a marker that makes leaked tokens easy to spot)


def token_digest(raw: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(raw.encode()).hexdigest()


class TokenOutlivesParent(GoaaiError):
    """A token made with another token may not stay valid longer than that token."""

    code = "after_parent_expiry"


class TokenRevoked(GoaaiError):
    """The token a new token was to be made with was revoked meanwhile."""

    code = "token_revoked"


def api_token_create(
    *,
    user_id: int,
    name: str,
    expires_at: dt.datetime | None = None,
    parent: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for a user; returns it with the token itself, which is not
    stored and cannot be shown again.

    A token made with another token (``parent``) is revoked along with it and
    expires no later than it: without an expiry of its own it takes the parent's,
    and a later one raises :class:`TokenOutlivesParent`.
    """
    if parent is not None and parent.expires_at is not None:
        if expires_at is None:
            expires_at = parent.expires_at
        elif expires_at > parent.expires_at:
            raise TokenOutlivesParent(
                "A token made with another token cannot expire after it "
                f"({parent.expires_at.isoformat()})."
            )
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        # The parent's row is locked as a revocation locks it: a child is made
        # before the parent's revocation (which then takes it along) or not at all.
        if (
            parent is not None
            and ApiToken.objects.select_for_update()
            .filter(pk=parent.pk, revoked_at__isnull=True)
            .values_list("pk", flat=True)
            .first()
            is None
        ):
            raise TokenRevoked("The token this request used was revoked.")
        token = ApiToken.objects.create(
            user_id=user_id,
            name=name.strip()[:100],
            prefix=raw[:12],
            digest=token_digest(raw),
            expires_at=expires_at,
            parent=parent,
        )
    return token, raw


def api_token_revoke(*, token_id: UUID) -> ApiToken:
    """Revoke a token and every token made with it (their children too): they stop
    working at once, and the streams they opened close. The rows stay, for audit."""
    now = timezone.now()
    with transaction.atomic():
        revoked: list[UUID] = []
        level = list(
            ApiToken.objects.select_for_update()
            .filter(pk=token_id, revoked_at__isnull=True)
            .values_list("pk", flat=True)
        )
        while level:
            revoked += level
            # A revoked token can make no more children: those it has are all here.
            level = list(
                ApiToken.objects.select_for_update()
                .filter(parent_id__in=level, revoked_at__isnull=True)
                .values_list("pk", flat=True)
            )
        ApiToken.objects.filter(pk__in=revoked).update(revoked_at=now)
        # Streams the tokens opened close at once, not only new requests.
        groups = [token_group(revoked_id) for revoked_id in revoked]
        transaction.on_commit(lambda: _tell_revoked(groups))
    try:
        return ApiToken.objects.get(pk=token_id)
    except ApiToken.DoesNotExist:
        raise NotFound(f"No token {token_id}.") from None


def _tell_revoked(groups: list[str]) -> None:
    for group in groups:
        publish_to(group, {"type": "token.revoked"})


def api_token_touch(*, token: ApiToken, now: dt.datetime) -> None:
    """Note that a token was used, at most once a minute (a write per request would
    make every API read a write)."""
    if token.last_used_at is None or now - token.last_used_at > dt.timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


# Preferences


class UnknownTimeZone(GoaaiError):
    """A time zone that is not an IANA name this system knows."""

    code = "unknown_time_zone"


def user_preferences_update(
    *, user_id: int, time_zone: str | None = None, shortcuts_enabled: bool | None = None
) -> UserPreferences:
    """Save what a user chose on their settings page (``None``: leave as it is);
    their first choice creates their preferences. ``time_zone`` is an IANA name, or
    blank for the browser's own; another raises :class:`UnknownTimeZone`."""
    if time_zone is not None and time_zone and not is_time_zone(time_zone):
        raise UnknownTimeZone(
            f"{time_zone!r} is not a time zone (an IANA name such as Europe/Paris)."
        )
    changes: dict[str, Any] = {}
    if time_zone is not None:
        changes["time_zone"] = time_zone
    if shortcuts_enabled is not None:
        changes["shortcuts_enabled"] = shortcuts_enabled
    with transaction.atomic():
        preferences, created = UserPreferences.objects.select_for_update().get_or_create(
            user_id=user_id, defaults=changes
        )
        if not created and changes:
            for name, value in changes.items():
                setattr(preferences, name, value)
            preferences.save(update_fields=[*changes, "updated_at"])
    return preferences
