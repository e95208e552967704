"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")

# Build the Django application before anything imports models (Channels' advice).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402

from goaai.body_limit import BodyLimit  # noqa: E402
from sessions_app.api.authentication import WebSocketTokenMiddleware  # noqa: E402
from sessions_app.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodyLimit(django_asgi_app),
        # Origins are checked by the consumers, which close with a documented code.
        "websocket": AuthMiddlewareStack(
            WebSocketTokenMiddleware(URLRouter(websocket_urlpatterns))
        ),
    }
)

# A server that starts takes up the runs a crashed predecessor left behind.
from goaai.runtime import rt  # noqa: E402

rt.start_background()
