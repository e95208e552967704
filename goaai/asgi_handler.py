"""Django's ASGI handler with a request's middleware and view run in one thread.

For an ASGI server Django builds its middleware chain in async mode: each middleware
that can run async does so on the event loop, and a middleware that cannot (here
WhiteNoise's and the time zone's) is reached by hopping to a thread, which hops back
to the loop for the async ones inside it; an async-capable ``MiddlewareMixin``
middleware (messages, clickjacking) hops to a thread for its ``process_request`` and
again for its ``process_response``, and a sync view hops once more. goaai's views
and middleware are sync, so a request crossed between the loop and a thread about
nine times, each crossing a turn of a loop that is also serving every live stream.

:class:`ASGIHandler` builds the chain in sync mode, as a WSGI server would, and runs
it in one hop to the request's thread (``sync_to_async``, thread-sensitive: the
thread Django gives each request). An async view (the event streams, the
OpenAI-compatible endpoints) is called from that thread on the loop, as Django calls
one from a sync chain, and its streamed answer is sent from the loop as before.
"""

from __future__ import annotations

from collections.abc import Callable

import django
from asgiref.sync import sync_to_async
from django.core.handlers import asgi
from django.http import HttpRequest, HttpResponseBase


class ASGIHandler(asgi.ASGIHandler):
    """Django's ASGI handler, its middleware chain sync and entered in one hop."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain: Callable[[HttpRequest], HttpResponseBase] = self._middleware_chain  # type: ignore[has-type]
        # Django's own adapter from a sync handler to an async caller.
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)


def get_asgi_application() -> ASGIHandler:
    """As ``django.core.asgi.get_asgi_application``, with :class:`ASGIHandler`."""
    django.setup(set_prefix=False)
    return ASGIHandler()
