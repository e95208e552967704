"""The ASGI application behind ``/mcp``: Streamable HTTP, authenticated by API token.

Before the SDK's transport sees a request, it must come to a host goaai serves
(Django's ``ALLOWED_HOSTS``, with Django's own matching: a DNS-rebinding page's
requests carry its own host name) from no origin or an allowed one (a browser's
cross-site request carries its page's), and carry ``Authorization: Bearer <token>``
for a live API token, checked as the REST API checks it (unknown, revoked or expired
tokens and inactive users are refused). Refusals are plain HTTP: 421 for a host,
403 for an origin, 401 with ``WWW-Authenticate: Bearer`` for the token.

The transport is stateless: every POST is answered on its own, so any of several
servers behind nginx may take any request. The SDK's session manager keeps a task
group that must run before the first request; daphne sends no ASGI lifespan
events, so it is started on the first request, once per event loop, and runs
until that loop ends.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from goaai.api.credentials import bearer_token
from runs_app.mcp.server import CALLER_SCOPE_KEY, server
from runs_app.mcp.tools import Caller
from sessions_app.api.authentication import token_user

PATH = "/mcp"
CHALLENGE = 'Bearer realm="goaai"'


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    # Django's own fallback while developing (HttpRequest.get_host).
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _host_allowed(host: str) -> bool:
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, _allowed_hosts())


def _origin_allowed(origin: str) -> bool:
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and _host_allowed(parts.netloc)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _bearer(scope: dict[str, Any]) -> str | None:
    """The token of an ``Authorization: Bearer`` header ("" when it is malformed)."""
    return bearer_token(_header(scope, b"authorization"))


async def _refuse(send: Any, status: int, detail: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _unauthorized(send: Any, detail: str, *, invalid: bool) -> None:
    # RFC 6750: a request without credentials gets the bare challenge, one with a
    # token that does not work also learns that it is the token.
    challenge = f'{CHALLENGE}, error="invalid_token"' if invalid else CHALLENGE
    await _refuse(send, 401, detail, [(b"www-authenticate", challenge.encode())])


def _transport() -> Starlette:
    """The SDK's Streamable HTTP application, with a session manager of its own."""
    return server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        max_request_body_size=int(settings.GOAAI_API_MAX_BODY_BYTES),
        # Host and Origin are checked above with Django's rules, which the SDK's
        # lists cannot express (".example.com", "*"); it still checks Content-Type.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )


class McpApplication:
    """ASGI: ``/mcp`` (and ``/mcp/``) for MCP clients with a goaai API token."""

    def __init__(self) -> None:
        self._ready: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Future[Starlette]
        ] = weakref.WeakKeyDictionary()
        # Holds the tasks that run each loop's session manager: a task nobody
        # refers to may be collected while it runs.
        self._running: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )

    async def _started(self) -> Starlette:
        loop = asyncio.get_running_loop()
        ready = self._ready.get(loop)
        if ready is None:
            ready = self._ready[loop] = loop.create_future()
            self._running[loop] = loop.create_task(self._serve(ready))
        return await asyncio.shield(ready)

    async def _serve(self, ready: asyncio.Future[Starlette]) -> None:
        app = _transport()
        try:
            async with app.router.lifespan_context(app):
                ready.set_result(app)
                await asyncio.Event().wait()  # until the loop is closed
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if not _host_allowed(_header(scope, b"host") or ""):
            await _refuse(send, 421, "This host is not served here.", [])
            return
        origin = _header(scope, b"origin")
        if origin is not None and not _origin_allowed(origin):
            await _refuse(send, 403, "Requests from this origin are not accepted.", [])
            return
        raw = _bearer(scope)
        if raw is None:
            await _unauthorized(send, "An API token is needed: Bearer <token>.", invalid=False)
            return
        found = await database_sync_to_async(token_user)(raw) if raw else None
        if found is None:
            await _unauthorized(send, "The token is unknown, revoked or expired.", invalid=True)
            return
        app = await self._started()
        scope = {
            **scope,
            "path": PATH,
            "raw_path": PATH.encode(),
            CALLER_SCOPE_KEY: Caller(user=found[0], token=found[1]),
        }
        await app(scope, receive, send)


application = McpApplication()
