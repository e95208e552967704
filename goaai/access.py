"""Who may read and act on records that belong to someone else: one rule for the
admin, the API, the web pages and the live streams.

A user may always read and act on what is theirs. Everyone else's records take the
model's Django permission for the action: ``view`` to read, ``change`` to edit,
``delete`` to delete, ``add`` to create, and the actions an app declares as custom
permissions on its models (``runs_app.cancel_run``, ``runs_app.respond_run``,
``sessions_app.end_session``). A superuser has every permission.

Permissions count for staff accounts only, the operators' accounts: ``is_staff``
alone grants nothing but entry to the admin, and a user who is not staff reaches only
their own records whatever permissions they were given (so a permission granted to
an ordinary account by mistake opens nothing, and checking a plain user's request
costs no query).

Each app's ``access`` module says who owns its records and which permissions reading
or acting on them takes; this module holds what they share, and the admin log that
records every action taken on someone else's records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db.models import Model, Q, QuerySet

__all__ = [
    "ADDITION",
    "CHANGE",
    "DELETION",
    "allowed",
    "has_permission",
    "log_actions",
    "permission",
    "scoped",
]


def permission(model: type[Model] | Model, action: str) -> str:
    """The name of the permission for ``action`` on ``model``: ``app.action_model``."""
    meta = model._meta
    return f"{meta.app_label}.{action}_{meta.model_name}"


def _signed_in(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_active", False))


def has_permission(user: Any, model: type[Model] | Model, action: str) -> bool:
    """Whether ``user`` may take ``action`` on every user's rows of ``model``."""
    return (
        _signed_in(user)
        and bool(getattr(user, "is_staff", False))
        and bool(user.has_perm(permission(model, action)))
    )


def allowed(user: Any, model: type[Model] | Model, action: str, owner_id: int | None) -> bool:
    """Whether ``user`` may take ``action`` on a row of ``model`` owned by the user
    ``owner_id`` (``None``: a row nobody owns, such as agent or global memory)."""
    if not _signed_in(user):
        return False
    if owner_id is not None and owner_id == user.pk:
        return True
    return has_permission(user, model, action)


def scoped(queryset: QuerySet[Any], user: Any, own: Q, action: str = "view") -> QuerySet[Any]:
    """The rows of ``queryset`` that ``user`` may take ``action`` on: every row with
    the model's permission, else those matching ``own`` (the user's own rows)."""
    if not _signed_in(user):
        return queryset.none()
    if has_permission(user, queryset.model, action):
        return queryset
    return queryset.filter(own)


def log_actions(user: Any, objects: Iterable[Model], flag: int, message: str) -> None:
    """Record in the admin log that ``user`` did ``message`` to each of ``objects``
    (``flag``: ``ADDITION``, ``CHANGE`` or ``DELETION``), whichever door the action
    came through. Call it before a deletion: the log names the row as it was."""
    rows = list(objects)
    if rows:
        LogEntry.objects.log_actions(
            user_id=user.pk, queryset=rows, action_flag=flag, change_message=message
        )
