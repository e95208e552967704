"""Memory: what agents remember, by scope, with every change kept."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.access import ADDITION, CHANGE, DELETION, allowed
from goaai.api.exceptions import VersionConflict
from goaai.api.pagination import Cursor
from goaai.api.views import ScopedViewSet
from goaai.runtime.errors import MemoryConflict
from goaai.runtime.vocabulary import MemoryScope
from memory_app import services
from memory_app.access import (
    SHARED_SCOPES,
    may_create,
    own_memory,
    owner_id_of,
    revisions_readable,
)
from memory_app.api.filters import MemoryFilter
from memory_app.api.serializers import (
    MemoryCreateSerializer,
    MemoryEntrySerializer,
    MemoryRevisionSerializer,
    MemorySearchSerializer,
    MemoryUpdateSerializer,
)
from memory_app.models import MemoryEntry, MemoryRevision
from memory_app.selectors import memory_resolve, memory_search
from sessions_app.access import session_readable, sessions_readable


class RevisionCursor(Cursor):
    """An entry's history reads oldest first; versions are unique within an entry."""

    ordering = "version"


def _new_entry_owner(user: Any, data: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """Whom a new entry belongs to: its owner fields, and the user who owns it
    (``None`` for agent and global memory)."""
    scope = data["scope"]
    if scope == MemoryScope.SESSION:
        if data.get("session") is None:
            raise ValidationError({"session": ["Session scope needs a session."]})
        owners = sessions_readable(user).filter(pk=data["session"])
        owner_id = owners.values_list("owner_id", flat=True).first()
        if owner_id is None:
            raise ValidationError({"session": ["No such session."]}, code="does_not_exist")
        return {"session_id": data["session"]}, owner_id
    if scope == MemoryScope.USER:
        named = data.get("user")
        user_id = user.pk if named is None else named
        if not may_create(user, user_id):
            raise ValidationError({"user": ["You can write only your own user memory."]})
        if not get_user_model().objects.filter(pk=user_id).exists():
            raise ValidationError({"user": ["No such user."]}, code="does_not_exist")
        return {"user_id": user_id}, user_id
    if scope == MemoryScope.AGENT:
        if not data["agent"]:
            raise ValidationError({"agent": ["Agent scope needs an agent."]})
        return {"agent": data["agent"]}, None
    return {}, None


def _owner(entry: MemoryEntry | MemoryRevision) -> dict[str, Any]:
    return {"session_id": entry.session_id, "user_id": entry.user_id, "agent": entry.agent}


@extend_validation_errors(["invalid"], field_name="key", actions=["resolve"])
@extend_validation_errors(["invalid"], field_name="session", actions=["resolve", "search"])
@extend_validation_errors(["invalid"], field_name="q", actions=["search"])
@extend_validation_errors(["invalid"], field_name="limit", actions=["search"])
@extend_validation_errors(["invalid"], field_name="version", actions=["destroy"])
@extend_validation_errors(["does_not_exist"], field_name="user", actions=["create"])
@extend_validation_errors(["does_not_exist"], field_name="session", actions=["create"])
@extend_validation_errors(
    ["in_past"], field_name="expires_at", actions=["create", "partial_update"]
)
@extend_validation_errors(
    ["too_large", "null_characters_not_allowed"],
    field_name="value",
    actions=["create", "partial_update"],
)
@extend_schema_view(
    list=extend_schema(
        summary="List memory entries",
        description="Your sessions' and your own entries, and the agent and global "
        "entries runs read; with the `memory_app.view_memoryentry` permission, every "
        "entry.",
    ),
    retrieve=extend_schema(summary="Get a memory entry"),
)
class MemoryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    serializer_class = MemoryEntrySerializer
    pagination_class = Cursor
    filterset_class = MemoryFilter
    conflict_actions = ("create", "partial_update", "destroy")
    # Agent and global memory, and other users': only with the permission.
    forbidden_actions = ("create", "partial_update", "destroy")
    ordering_fields = ["created_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def owner_filter(self, user: Any) -> Q:
        return own_memory(user)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, MemoryConflict):
            # The 409 shows the entry as it is now, for the client to retry on top of.
            current = exc.current
            shown = MemoryEntrySerializer(current).data if current is not None else None
            exc = VersionConflict(str(exc), shown)
        return super().handle_exception(exc)

    def base_queryset(self) -> QuerySet[MemoryEntry]:
        return MemoryEntry.objects.all()

    @extend_schema(
        summary="Create a memory entry",
        description="One entry per (scope, owner, key): an entry that exists already is "
        "a 409 showing it (change it with PATCH and its version). Session scope needs "
        "one of your sessions; user scope is your own; another user's, and agent and "
        "global scope, need the `memory_app.add_memoryentry` permission.",
        request=MemoryCreateSerializer,
        responses={201: MemoryEntrySerializer},
        examples=[
            OpenApiExample(
                "Your own preference",
                value={"key": "timezone", "value": "Europe/Paris", "scope": "user"},
                request_only=True,
            ),
            OpenApiExample(
                "A fact for one session",
                value={
                    "key": "favourite colour",
                    "value": "green",
                    "scope": "session",
                    "session": "967b525e-5623-426f-9ad7-31f603c0020c",
                },
                request_only=True,
            ),
        ],
    )
    def create(self, request: Request) -> Response:
        body = MemoryCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        user = request.user
        scope = data["scope"]
        if scope in SHARED_SCOPES:
            self.require(MemoryEntry, "add", None)
        owner, owner_id = _new_entry_owner(user, data)
        self.require(MemoryEntry, "add", owner_id)
        entry = services.memory_store(
            key=data["key"],
            value=data["value"],
            scope=scope,
            expected_version=0,
            expires_at=data["expires_at"],
            written_by_user_id=user.pk,
            **owner,
        )
        self.log_for_others(entry, owner_id, ADDITION, f"Stored version {entry.version}")
        return Response(MemoryEntrySerializer(entry).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a memory entry's value",
        description="Send the version you read: if the entry changed since, nothing is "
        "written and the answer is a 409 with the entry as it is now.",
        request=MemoryUpdateSerializer,
        responses={200: MemoryEntrySerializer},
        examples=[
            OpenApiExample(
                "Change a value", value={"value": "blue", "version": 1}, request_only=True
            )
        ],
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        entry = self.get_object()
        owner_id = owner_id_of(entry)
        self.require(MemoryEntry, "change", owner_id)
        body = MemoryUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        expires_at = data["expires_at"] if "expires_at" in request.data else entry.expires_at
        updated = services.memory_store(
            key=entry.key,
            value=data["value"],
            scope=entry.scope,
            expected_version=data["version"],
            expires_at=expires_at,
            written_by_user_id=request.user.pk,
            **_owner(entry),
        )
        self.log_for_others(updated, owner_id, CHANGE, f"Stored version {updated.version}")
        return Response(MemoryEntrySerializer(updated).data)

    @extend_schema(
        summary="Delete a memory entry",
        description="Its revisions are kept. With `?version=n`, only if the entry is "
        "still at version n (409 otherwise).",
        parameters=[OpenApiParameter("version", OpenApiTypes.INT, required=False)],
        responses={204: None},
    )
    def destroy(self, request: Request, pk: str) -> Response:
        entry = self.get_object()
        owner_id = owner_id_of(entry)
        self.require(MemoryEntry, "delete", owner_id)
        raw = request.query_params.get("version")
        expected: int | None = None
        if raw is not None:
            if not (raw.isascii() and raw.isdigit()) or len(raw) > 18 or int(raw) < 1:
                raise ValidationError({"version": ["A positive integer."]})
            expected = int(raw)
        with transaction.atomic():
            # Logged first, while the entry is still there to be named; a delete
            # that finds nothing rolls the record back.
            self.log_for_others(entry, owner_id, DELETION, f"Deleted version {entry.version}")
            deleted = services.memory_delete(
                key=entry.key,
                scope=entry.scope,
                expected_version=expected,
                written_by_user_id=request.user.pk,
                **_owner(entry),
            )
            if not deleted:
                raise NotFound("The entry was deleted meanwhile.")
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Resolve a key for a session",
        description="The entry a run in the session reads for `key`: the session's "
        "own, else its user's, its agent's, or the global one. 404 if none.",
        parameters=[
            OpenApiParameter("key", OpenApiTypes.STR, required=True),
            OpenApiParameter("session", OpenApiTypes.UUID, required=True),
        ],
        responses={200: MemoryEntrySerializer, 404: OpenApiResponse(description="No entry.")},
        filters=False,
    )
    @action(detail=False, methods=["get"], filterset_class=None, pagination_class=None)
    def resolve(self, request: Request) -> Response:
        key = request.query_params.get("key", "").strip()
        raw_session = request.query_params.get("session", "")
        errors: dict[str, list[str]] = {}
        if not key or len(key) > 200 or "\x00" in key:
            errors["key"] = ["A key of 1 to 200 characters (no NUL)."]
        try:
            session_id = UUID(raw_session)
        except ValueError:
            errors["session"] = ["A session id."]
        if errors:
            raise ValidationError(errors)
        session = session_readable(request.user, session_id)
        # What a run reads includes its owner's user memory: someone else's session
        # also needs the permission to read their memory.
        if session is None or not allowed(request.user, MemoryEntry, "view", session.owner_id):
            raise NotFound("No such session.")
        entry = memory_resolve(key=key, session_id=session.pk)
        if entry is None:
            raise NotFound(f"No entry {key!r} for this session.")
        return Response(MemoryEntrySerializer(entry).data)

    @extend_schema(
        summary="The revisions of an entry",
        description="Every change, oldest first: version, value, action and who made "
        "it. Also answers for an entry that has been deleted.",
        responses={200: MemoryRevisionSerializer(many=True)},
        filters=False,
    )
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=RevisionCursor)
    def revisions(self, request: Request, pk: str) -> Response:
        try:
            entry_id = UUID(pk)
        except ValueError:
            raise NotFound("No such memory entry.") from None
        revisions = revisions_readable(request.user).filter(entry_id=entry_id)
        page = self.paginate_queryset(revisions)
        # An empty first page means no revision the caller may see: no such entry.
        if not page and "cursor" not in request.query_params:
            raise NotFound("No such memory entry.")
        return self.get_paginated_response(MemoryRevisionSerializer(page, many=True).data)

    @extend_schema(
        summary="Search a session's memory",
        description="The facts a run in the session reads that match `q` (its words, "
        "stemmed; with embeddings configured also its meaning), best first: what the "
        "agent's `memory_search` tool finds, and how a run's memory is ranked. A more "
        "specific scope hides the same key further out; expired entries are left out. "
        "At most `limit` facts (1 to 50, default 10).",
        parameters=[
            OpenApiParameter("q", OpenApiTypes.STR, required=True),
            OpenApiParameter("session", OpenApiTypes.UUID, required=True),
            OpenApiParameter("limit", OpenApiTypes.INT, required=False),
        ],
        responses={200: MemorySearchSerializer, 404: OpenApiResponse(description="No session.")},
        filters=False,
    )
    @action(detail=False, methods=["get"], filterset_class=None, pagination_class=None)
    def search(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        errors: dict[str, list[str]] = {}
        if not query or len(query) > 1_000 or "\x00" in query:
            errors["q"] = ["A query of 1 to 1000 characters (no NUL)."]
        try:
            session_id = UUID(request.query_params.get("session", ""))
        except ValueError:
            errors["session"] = ["A session id."]
        raw_limit = request.query_params.get("limit", "10")
        # ASCII digits only: "²" is a digit to str.isdigit, and not to int().
        limit = (
            int(raw_limit)
            if raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) < 4
            else 0
        )
        if not 1 <= limit <= 50:
            errors["limit"] = ["A whole number from 1 to 50."]
        if errors:
            raise ValidationError(errors)
        session = session_readable(request.user, session_id)
        # As for resolve: someone else's session takes the permission to read their memory.
        if session is None or not allowed(request.user, MemoryEntry, "view", session.owner_id):
            raise NotFound("No such session.")
        found = memory_search(session_id=session.pk, query=query, limit=limit)
        results = [{"key": key, "value": value, "scope": scope} for scope, key, value in found]
        return Response(MemorySearchSerializer({"query": query, "results": results}).data)
