"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")

# Build the Django application before anything imports models (Channels' advice).
django_asgi_app = get_asgi_application()

application = ProtocolTypeRouter({"http": django_asgi_app})

# A server that starts takes up the runs a crashed predecessor left behind.
from goaai.runtime import rt  # noqa: E402

rt.start_background()
