"""Sessions and API tokens."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import mixins, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.access import CHANGE, DELETION, allowed, has_permission
from goaai.api.pagination import Cursor
from goaai.api.views import ScopedViewSet
from goaai.runtime import rt
from sessions_app import services
from sessions_app.api.authentication import BearerTokenAuthentication, PasswordAuthentication
from sessions_app.api.filters import SessionFilter
from sessions_app.api.serializers import (
    ApiTokenCreatedSerializer,
    ApiTokenCreateSerializer,
    ApiTokenSerializer,
    SessionCreateSerializer,
    SessionSerializer,
    SessionUpdateSerializer,
)
from sessions_app.models import ApiToken, Session
from sessions_app.selectors import session_with_owner, sessions_add_run_totals

_SESSION_COLUMNS = tuple(field.name for field in Session._meta.concrete_fields)


class ActivityCursor(Cursor):
    """Sessions the most recently active first (``last_activity_at``, moved by every
    event recorded in the session), as a chat list shows them; ``?ordering=`` picks
    ``created_at`` or ``last_activity_at``, either way round, instead."""

    ordering = "-last_activity_at"


@extend_validation_errors(["unknown_agent"], field_name="agent", actions=["create"])
@extend_validation_errors(
    ["invalid", "too_large", "null_characters_not_allowed"],
    field_name="metadata",
    actions=["create", "partial_update"],
)
@extend_validation_errors(["empty"], field_name="non_field_errors", actions=["partial_update"])
@extend_validation_errors(["invalid"], field_name="created_after", actions=["list"])
@extend_validation_errors(["invalid"], field_name="created_before", actions=["list"])
@extend_schema_view(
    list=extend_schema(
        summary="List sessions",
        description="Your sessions, the most recently active first (by "
        "`last_activity_at`, the time of the session's newest event: a message sent "
        "moves its session to the top). `?ordering=created_at` (or `-created_at`, "
        "`last_activity_at`) orders them otherwise. A session that becomes active "
        "while a client pages may show again on an earlier page.",
    ),
    retrieve=extend_schema(summary="Get a session"),
    destroy=extend_schema(
        summary="Delete a session",
        description="Deletes the session with its runs, turns, tool calls, events and "
        "session memory. This cannot be undone.",
    ),
)
class SessionViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ScopedViewSet,
):
    owner_lookup = "owner"
    serializer_class = SessionSerializer
    pagination_class = ActivityCursor
    filterset_class = SessionFilter
    ordering_fields = ["created_at", "last_activity_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def base_queryset(self) -> QuerySet[Session]:
        if self.action == "list" and self._own_only():
            # The caller's own sessions: their owner is the caller (paginate_queryset).
            return Session.objects.all()
        sessions = Session.objects.select_related("owner")
        if self.action == "list":
            # A page of fifty: of each owner, only what the list shows.
            return sessions.only(*_SESSION_COLUMNS, "owner__username")
        return sessions

    def _own_only(self) -> bool:
        """Whether the caller lists only their own sessions (no permission to see
        other users')."""
        return not has_permission(self.request.user, Session, "view")

    def paginate_queryset(self, queryset: QuerySet[Any]) -> list[Any] | None:
        page = super().paginate_queryset(queryset)
        if page is not None:
            if self._own_only():
                for session in page:
                    session.owner = self.request.user
            # What each session's runs add up to, for the whole page at once.
            sessions_add_run_totals(page)
        return page

    def retrieve(self, request: Request, pk: str) -> Response:
        # The session as get_object() finds one (another user's only with the
        # permission to read it, else not found), read in a statement built once.
        try:
            session = session_with_owner(session_id=UUID(pk))
        except ValueError:
            session = None
        if session is None or not allowed(request.user, Session, "view", session.owner_id):
            raise Http404("No Session matches the given query.")
        self.check_object_permissions(request, session)
        return Response(self.get_serializer(session).data)

    @extend_schema(
        summary="Start a session",
        request=SessionCreateSerializer,
        responses={201: SessionSerializer},
        examples=[
            OpenApiExample(
                "A session with the assistant",
                value={
                    "agent": "assistant",
                    "title": "Colours",
                    "metadata": {"user_id": "user-123"},
                },
                request_only=True,
            )
        ],
    )
    def create(self, request: Request) -> Response:
        body = SessionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        created = rt.create_session(owner=request.user, **body.validated_data)
        session = self.base_queryset().get(pk=created.id)
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Rename a session or replace its metadata",
        request=SessionUpdateSerializer,
        responses={200: SessionSerializer},
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        self.require(Session, "change", session.owner_id)
        body = SessionUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.session_update(session_id=session.pk, **body.validated_data)
        changed = ", ".join(sorted(body.validated_data))
        self.log_for_others(session, session.owner_id, CHANGE, f"Changed {changed}")
        return Response(SessionSerializer(self.base_queryset().get(pk=session.pk)).data)

    def destroy(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        self.require(Session, "delete", session.owner_id)
        with transaction.atomic():
            # Logged first, while the session is still there to be named.
            self.log_for_others(session, session.owner_id, DELETION, "Deleted")
            services.session_delete(session_id=session.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="End a session",
        description="The session becomes `ended`: runs in flight are canceled and new "
        "runs are refused with 409. Ending an ended session changes nothing.",
        request=None,
        responses={200: SessionSerializer},
    )
    @action(detail=True, methods=["post"])
    def end(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        self.require(Session, "end", session.owner_id)
        was_active = session.is_active
        rt.end_session(session.pk, by=request.user.pk)
        if was_active:
            self.log_for_others(session, session.owner_id, CHANGE, "Ended the session")
        return Response(SessionSerializer(self.base_queryset().get(pk=session.pk)).data)


@extend_validation_errors(
    ["in_past", "after_parent_expiry"], field_name="expires_at", actions=["create"]
)
@extend_schema_view(
    list=extend_schema(summary="List your API tokens", description="Tokens not revoked."),
    retrieve=extend_schema(summary="Get one of your API tokens"),
)
class ApiTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    # A script gets its first token with the account's username and password
    # (HTTP Basic); every other endpoint takes only tokens and the browser session.
    authentication_classes = [
        BearerTokenAuthentication,
        SessionAuthentication,
        PasswordAuthentication,
    ]
    owner_lookup = "user"
    others_readable = False
    serializer_class = ApiTokenSerializer
    pagination_class = Cursor
    filterset_class = None

    def base_queryset(self) -> QuerySet[ApiToken]:
        return ApiToken.objects.filter(revoked_at__isnull=True)

    @extend_schema(
        summary="Create an API token",
        description="The response holds the token itself, shown only this once; "
        "goaai stores a hash of it. Send it as `Authorization: Bearer <token>`. "
        "A token made with another token is its child (`parent`): revoking the "
        "parent revokes it too, and it expires no later than the parent (without "
        "`expires_at` it takes the parent's; a later one is a 400).",
        request=ApiTokenCreateSerializer,
        responses={201: ApiTokenCreatedSerializer},
        examples=[
            OpenApiExample(
                "A token for a script",
                value={"name": "nightly report", "expires_at": "2027-06-30T00:00:00Z"},
                request_only=True,
            )
        ],
    )
    def create(self, request: Request) -> Response:
        body = ApiTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # A token made with a token is its child: revoked with it, expiring with it.
        parent = request.auth if isinstance(request.auth, ApiToken) else None
        try:
            token, raw = services.api_token_create(
                user_id=request.user.pk,  # type: ignore[arg-type]
                parent=parent,
                **body.validated_data,
            )
        except services.TokenOutlivesParent as exc:
            raise ValidationError({"expires_at": [str(exc)]}, code=exc.code) from None
        except services.TokenRevoked as exc:
            raise AuthenticationFailed(str(exc), code=exc.code) from None
        token.token = raw  # type: ignore[attr-defined]
        return Response(ApiTokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Revoke an API token",
        description="The token, and every token made with it, stop working at once; "
        "the live streams they opened close.",
        responses={204: None},
    )
    def destroy(self, request: Request, pk: str) -> Response:
        token = self.get_object()
        services.api_token_revoke(token_id=token.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
