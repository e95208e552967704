"""The base of every API view: each queryset is scoped to the caller here, once."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import Model, Q, QuerySet
from rest_framework import viewsets
from rest_framework.permissions import IsAuthenticated


class ScopedViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """A viewset whose rows are the caller's own, or everyone's for staff.

    Subclasses say what their rows are (:meth:`base_queryset`, eager-loading what
    their serializers read) and how a row leads to its owner (``owner_lookup``); they
    may not override ``get_queryset``, so no endpoint can forget the scoping. A row
    of someone else is then simply not found: 404, never its data.
    """

    permission_classes = [IsAuthenticated]
    owner_lookup: ClassVar[str] = ""
    # Credentials are personal: even staff see only their own API tokens.
    staff_sees_all: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(f"{cls.__name__} must define base_queryset(), not get_queryset().")

    def base_queryset(self) -> QuerySet[Any]:
        raise NotImplementedError

    def owner_filter(self, user: Any) -> Q:
        """The rows a user who is not staff may see (override for shared rows)."""
        return Q(**{self.owner_lookup: user.pk})

    def get_queryset(self) -> QuerySet[Any]:
        queryset = self.base_queryset()
        user = self.request.user
        if not getattr(user, "is_authenticated", False):
            return queryset.none()
        if self.staff_sees_all and user.is_staff:
            return queryset
        return queryset.filter(self.owner_filter(user))


def visible(model: type[Model], user: Any, owner_lookup: str) -> QuerySet[Any]:
    """Every row of ``model`` that ``user`` may see through ``owner_lookup``: the
    choices of a field that refers to another row (another user's is "not found")."""
    queryset = model._default_manager.all()
    if getattr(user, "is_staff", False):
        return queryset
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    return queryset.filter(**{owner_lookup: user.pk})
