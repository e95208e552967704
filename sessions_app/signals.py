"""What live streams hear of changes made outside goaai's services: to users, their
groups and permissions (Django's auth models and admin change them), to browser
sessions signing out, and to sessions deleted along with their owner.

Each receiver only tells the streams concerned, once the change has committed
(:mod:`sessions_app.publisher`); a stream then asks again whether it may stay open
(:func:`sessions_app.streams.still_allowed`), so the rule for who may read what is
never repeated here. Connected in :meth:`SessionsAppConfig.ready`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete

from sessions_app.models import Session
from sessions_app.publisher import (
    publish_access_changed,
    publish_sessions_deleted,
    publish_signed_out,
)


def _recheck_on_commit(user_ids: Iterable[int]) -> None:
    users = set(user_ids)
    if users:
        transaction.on_commit(lambda: publish_access_changed(users))


def user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    """Any saved change may take access away (``is_active``, ``is_staff``,
    ``is_superuser``, the password, a custom field a rule reads); only signing in,
    which touches ``last_login`` alone, certainly does not."""
    update_fields = kwargs.get("update_fields")
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    _recheck_on_commit([instance.pk])


def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    _recheck_on_commit([instance.pk])


def signed_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """A browser session signs out: the streams it opened end (before the session
    is flushed, its key is still known here)."""
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    if key:
        transaction.on_commit(lambda: publish_signed_out(key))


def memberships_changed(
    sender: Any,
    instance: Any,
    action: str,
    model: Any,
    pk_set: set[Any] | None,
    **kwargs: Any,
) -> None:
    """A user left a group or lost a permission, or a group lost a permission
    (from either side of the relation): its users' streams ask again. Adding grants
    more, and changes nothing for an open stream."""
    if action not in ("post_remove", "pre_clear"):
        return
    _recheck_on_commit(_users_concerned(instance, model, pk_set))


def _users_concerned(instance: Any, model: Any, pk_set: set[Any] | None) -> list[int]:
    user_model = get_user_model()
    if isinstance(instance, user_model):
        return [instance.pk]
    if model is user_model:
        # group.user_set or permission.user_set: the users named, or all of them
        # when the relation is cleared (before it is, so that they can be found).
        return list(pk_set) if pk_set is not None else _pks(instance.user_set.all())
    # Group.permissions: the group's members, or, from the permission's side, the
    # members of the groups named (all of its groups when cleared).
    if isinstance(instance, Group):
        groups = Group.objects.filter(pk=instance.pk)
    elif pk_set is not None:
        groups = Group.objects.filter(pk__in=pk_set)
    else:
        groups = instance.group_set.all()
    return _pks(user_model._default_manager.filter(groups__in=groups))


def _pks(queryset: Any) -> list[int]:
    return list(queryset.values_list("pk", flat=True).distinct())


def group_deleted(sender: Any, instance: Group, **kwargs: Any) -> None:
    _recheck_on_commit(_pks(instance.user_set.all()))


def permission_deleted(sender: Any, instance: Permission, **kwargs: Any) -> None:
    user_model = get_user_model()
    holders = user_model._default_manager.filter(user_permissions=instance)
    members = user_model._default_manager.filter(groups__permissions=instance)
    _recheck_on_commit([*_pks(holders), *_pks(members)])


def session_deleted(sender: Any, instance: Session, **kwargs: Any) -> None:
    """However a session goes (the API, the admin, with its owner), its streams
    end. The purge, which deletes without the ORM, tells them itself."""
    session_id: UUID = instance.pk
    transaction.on_commit(lambda: publish_sessions_deleted([session_id]))


def connect() -> None:
    user_model = get_user_model()
    post_save.connect(user_saved, sender=user_model, dispatch_uid="streams_user_saved")
    post_delete.connect(user_deleted, sender=user_model, dispatch_uid="streams_user_deleted")
    user_logged_out.connect(signed_out, dispatch_uid="streams_signed_out")
    for through in (
        user_model.groups.through,
        user_model.user_permissions.through,
        Group.permissions.through,
    ):
        m2m_changed.connect(
            memberships_changed, sender=through, dispatch_uid=f"streams_{through.__name__}"
        )
    pre_delete.connect(group_deleted, sender=Group, dispatch_uid="streams_group_deleted")
    pre_delete.connect(
        permission_deleted, sender=Permission, dispatch_uid="streams_permission_deleted"
    )
    post_delete.connect(session_deleted, sender=Session, dispatch_uid="streams_session_deleted")
