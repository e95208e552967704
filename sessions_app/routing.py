"""WebSocket routes."""

from __future__ import annotations

from django.urls import path, re_path

from sessions_app.consumers import NoSuchStream, SessionConsumer, SessionListConsumer

websocket_urlpatterns = [
    path("ws/sessions/", SessionListConsumer.as_asgi()),
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
    # Anything else (a malformed session id too) is closed with 4404.
    re_path(r"", NoSuchStream.as_asgi()),
]
