"""The base of every API view: each queryset is scoped to the caller here, once."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import Model, Q, QuerySet
from rest_framework import viewsets
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated

from goaai.access import allowed, log_actions, scoped


class ScopedViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """A viewset whose rows are the caller's own, or every user's for a caller with
    the model's ``view`` permission (see goaai.access).

    Subclasses say what their rows are (:meth:`base_queryset`, eager-loading what
    their serializers read) and how a row leads to its owner (``owner_lookup``); they
    may not override ``get_queryset``, so no endpoint can forget the scoping. A row
    the caller may not read is then simply not found: 404, never its data. A row the
    caller may read but not act on is a 403 (:meth:`require`).
    """

    permission_classes = [IsAuthenticated]
    owner_lookup: ClassVar[str] = ""
    # Whether the view permission shows other users' rows. Credentials are
    # personal: nobody sees another user's API tokens through the API.
    others_readable: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(f"{cls.__name__} must define base_queryset(), not get_queryset().")

    def base_queryset(self) -> QuerySet[Any]:
        raise NotImplementedError

    def owner_filter(self, user: Any) -> Q:
        """The rows that are the user's own (override for shared rows)."""
        return Q(**{self.owner_lookup: user.pk})

    def get_queryset(self) -> QuerySet[Any]:
        queryset = self.base_queryset()
        user = self.request.user
        if not getattr(user, "is_authenticated", False):
            return queryset.none()
        if not self.others_readable:
            return queryset.filter(self.owner_filter(user))
        return scoped(queryset, user, self.owner_filter(user))

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The list's filters, search and ordering; a route on one row (``detail``)
        finds it by its id alone and builds no filter set."""
        if self.detail:
            return queryset
        return super().filter_queryset(queryset)

    def require(self, model: type[Model], action: str, owner_id: int | None) -> None:
        """Refuse (403) an ``action`` on a row of ``model`` owned by ``owner_id``
        (``None``: nobody's) that the caller may read but not act on."""
        if not allowed(self.request.user, model, action, owner_id):
            whose = "another user's" if owner_id is not None else "this"
            raise PermissionDenied(
                f"You may not {action} {whose} {model._meta.verbose_name}.",
                code="permission_denied",
            )

    def log_for_others(self, obj: Model, owner_id: int | None, flag: int, message: str) -> None:
        """Record in the admin log an action the caller took on a row that is not
        their own (``owner_id`` someone else or nobody)."""
        user = self.request.user
        if owner_id != user.pk:
            log_actions(user, [obj], flag, f"{message} (through the API)")
