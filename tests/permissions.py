"""Operator accounts for the permission tests: staff with no permission, Auditors,
Operators, and staff given single permissions.

The groups are the ones the migration creates (its own list of permissions is used,
so a test that runs after the database was emptied gets them back the same)."""

from __future__ import annotations

import importlib
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from tests.factories import UserFactory

GROUPS_MIGRATION = importlib.import_module("runs_app.migrations.0007_auditors_and_operators")


def group(name: str) -> Group:
    made, _ = Group.objects.get_or_create(name=name)
    for app_label, codename in GROUPS_MIGRATION.GROUPS[name]:
        made.permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return made


def staff_user(
    username: str,
    *,
    groups: tuple[str, ...] = (),
    perms: tuple[str, ...] = (),
    is_staff: bool = True,
) -> Any:
    """A staff account (not a superuser) in ``groups``, with ``perms``
    (``"app_label.codename"``)."""
    user = UserFactory(username=username, is_staff=is_staff)
    for name in groups:
        user.groups.add(group(name))
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def log_entries(user: Any, obj: Any) -> list[LogEntry]:
    """What the admin log says ``user`` did to ``obj``."""
    return list(
        LogEntry.objects.filter(
            user=user,
            content_type=ContentType.objects.get_for_model(obj),
            object_id=str(obj.pk),
        ).order_by("id")
    )
