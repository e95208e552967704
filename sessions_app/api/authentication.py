"""API tokens: ``Authorization: Bearer <token>``."""

from __future__ import annotations

from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.sessions import CookieMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import (
    BaseAuthentication,
    BasicAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from goaai.api.credentials import bearer_token
from goaai.security import LOCKED_OUT, cool_off_seconds, lockout_message
from sessions_app.models import ApiToken
from sessions_app.selectors import api_token_active
from sessions_app.services import api_token_touch, token_digest

# Tokens are "goa_" plus 43 URL-safe characters; anything much longer is not one.
MAX_TOKEN_LENGTH = 200


def token_user(raw: str) -> tuple[Any, ApiToken] | None:
    """The user and token a raw token stands for, or ``None`` if it is unknown,
    revoked or expired (also used by the live streams)."""
    if not raw or len(raw) > MAX_TOKEN_LENGTH:
        return None
    token = api_token_active(digest=token_digest(raw))
    if token is None:
        return None
    api_token_touch(token=token, now=timezone.now())
    return token.user, token


class BearerTokenAuthentication(BaseAuthentication):
    """Authenticates integrations by an API token a user created."""

    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        raw = bearer_token(get_authorization_header(request))
        if raw is None:
            return None
        if not raw:
            raise AuthenticationFailed(
                "The Authorization header must be 'Bearer <token>' (one ASCII word)."
            )
        found = token_user(raw)
        if found is None:
            raise AuthenticationFailed("The token is unknown, revoked or expired.")
        return found

    def authenticate_header(self, request: Request) -> str:
        # Makes an unauthenticated request a 401 (with this challenge), not a 403.
        return 'Bearer realm="goaai"'


class PasswordAuthentication(BasicAuthentication):
    """HTTP Basic, where an account or address that guessed wrong too often is
    locked out for a while (django-axes counts the failures): a 429 in the API's
    error shape, with ``Retry-After``."""

    def authenticate_credentials(
        self, userid: str, password: str, request: Request | None = None
    ) -> tuple[Any, None]:
        try:
            return super().authenticate_credentials(userid, password, request)
        except AuthenticationFailed:
            # Set by django-axes on the request it was given when it refused.
            if getattr(request, "axes_locked_out", False):
                raise Throttled(
                    wait=cool_off_seconds(), detail=lockout_message(), code=LOCKED_OUT
                ) from None
            raise


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Describes API tokens in the OpenAPI schema."""

    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token from POST /api/v1/auth/tokens/.",
        }


class PasswordScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Describes HTTP Basic (token creation only) in the OpenAPI schema."""

    target_class = PasswordAuthentication
    name = "basicAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "basic",
            "description": "A username and password, to create a token; after "
            f"{settings.AXES_FAILURE_LIMIT} failures in a row an account or address is "
            "locked out for a while (429).",
        }


class WebSocketSessionMiddleware:
    """The browser session of a WebSocket connection in ``scope["session"]``, from
    its session cookie (read from the database only when looked at), as channels'
    ``SessionMiddleware`` puts it there, without wrapping ``send``: channels' wrapper
    saves a modified session only at ``http.response.start``, which a WebSocket never
    sends, yet looked the session up twice through a lazy object for every frame,
    a quarter of what a frame to one of a session's subscribers cost goaai."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.store = import_module(settings.SESSION_ENGINE).SessionStore

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if "cookies" not in scope:
            raise ValueError("WebSocketSessionMiddleware runs inside channels' CookieMiddleware.")
        key = scope["cookies"].get(settings.SESSION_COOKIE_NAME)
        return await self.inner({**scope, "session": self.store(key)}, receive, send)


def websocket_auth(inner: Any) -> Any:
    """channels' ``AuthMiddlewareStack`` for WebSockets (the cookie, the browser
    session, its user), with the session read as :class:`WebSocketSessionMiddleware`
    reads it and an API token taking precedence (:class:`WebSocketTokenMiddleware`)."""
    return CookieMiddleware(
        WebSocketSessionMiddleware(AuthMiddleware(WebSocketTokenMiddleware(inner)))
    )


class WebSocketTokenMiddleware:
    """Lets non-browser WebSocket clients authenticate with an API token, given as
    ``Authorization: Bearer <token>`` or ``?token=<token>``; it takes precedence over
    the session cookie. A token that does not work leaves the connection anonymous
    (it is then closed with 4401)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        raw = _websocket_token(scope)
        if raw is not None:
            found = await database_sync_to_async(token_user)(raw)
            scope = {
                **scope,
                "user": found[0] if found else AnonymousUser(),
                # The consumer listens for the token's revocation and closes then.
                "api_token_id": found[1].pk if found else None,
            }
        return await self.inner(scope, receive, send)


def _websocket_token(scope: dict[str, Any]) -> str | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for name, value in headers:
        if name == b"authorization" and (raw := bearer_token(value)) is not None:
            return raw
    query = parse_qs(scope.get("query_string", b"").decode("latin1"))
    tokens: list[str] = query.get("token", [])
    return tokens[0] if tokens else None
