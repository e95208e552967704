"""ASGI entry point: HTTP through Django (``/mcp`` through the MCP server),
WebSockets through Channels."""

import asyncio
import gc
import os
from typing import Any

from channels.routing import ProtocolTypeRouter, URLRouter

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")

# Django's handler, its middleware and views entered in one thread hop (goaai.asgi_handler).
from goaai.asgi_handler import get_asgi_application

# Build the Django application before anything imports models (Channels' advice).
django_asgi_app = get_asgi_application()

from goaai.body_limit import BodyLimit  # noqa: E402
from goaai.start_gate import RunStartGate  # noqa: E402
from runs_app.mcp.app import application as mcp_application  # noqa: E402
from sessions_app.api.authentication import websocket_auth  # noqa: E402
from sessions_app.publisher import publisher  # noqa: E402
from sessions_app.routing import websocket_urlpatterns  # noqa: E402

# The MCP server (runs_app.mcp) answers /mcp itself; everything else is Django's.
MCP_PATHS = frozenset({"/mcp", "/mcp/"})
# Bodies are capped first; then requests that start a run go in one at a time.
_django_http = BodyLimit(RunStartGate(django_asgi_app))
_mcp_http = BodyLimit(mcp_application)


async def http_application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """HTTP: ``/mcp`` to the MCP server, every other path to Django. From the first
    request on, what the server's requests commit is published from the loop that
    serves them (sessions_app.publisher), not from a thread of its own."""
    publisher.attach_loop(asyncio.get_running_loop())
    if scope.get("path") in MCP_PATHS:
        await _mcp_http(scope, receive, send)
    else:
        await _django_http(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_application,
        # Origins are checked by the consumers, which close with a documented code.
        "websocket": websocket_auth(URLRouter(websocket_urlpatterns)),
    }
)

# A server that starts takes up the runs a crashed predecessor left behind.
from goaai.runtime import rt  # noqa: E402

rt.start_background()

# And sends the webhook deliveries that fall due (sessions_app.webhooks).
from sessions_app.webhooks import dispatcher  # noqa: E402

dispatcher.start()

# A server keeps the objects of every live socket (millions for 500 sockets). With
# Python's default thresholds, live traffic to that many made it collect all of
# its objects about once a second, 230 to 320 ms each, serving no socket meanwhile
# (bench/fanout.py). What loading the application made lives as long as the
# process: frozen, collections leave it out. And the youngest objects are collected
# after 50,000 allocations instead of 700: a message's short-lived objects (its
# tasks and frames) are then mostly gone, instead of surviving into the older
# generations whose growth sets off full collections.
gc.collect()
gc.freeze()
gc.set_threshold(50_000, 20, 10)
