"""Long downloads written as they are read, in constant memory, under ASGI too.

Django serves a ``StreamingHttpResponse`` of a plain (synchronous) iterator under
ASGI by reading the whole iterator into a list first. goaai runs on daphne, so a
download that must stay small in memory hands Django an asynchronous iterator
there, which pulls one piece at a time from the synchronous one in the request's
own thread (where its database connection lives); under WSGI (the test client,
``manage.py runserver``) it hands over the iterator itself.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, StreamingHttpResponse
from rest_framework.renderers import BaseRenderer

JSON_LINES = "application/jsonl"


async def _pulled(pieces: Iterator[str]) -> AsyncIterator[str]:
    def following() -> str | None:
        return next(pieces, None)

    pull = sync_to_async(following, thread_sensitive=True)
    while (piece := await pull()) is not None:
        yield piece


def streamed(
    request: HttpRequest, pieces: Iterator[str], *, content_type: str, filename: str = ""
) -> StreamingHttpResponse:
    """A response that sends ``pieces`` as they are made (an attachment named
    ``filename``, if given), never holding them all."""
    content: Any = _pulled(pieces) if isinstance(request, ASGIRequest) else pieces
    response = StreamingHttpResponse(content, content_type=content_type)
    if filename:
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class JsonLinesRenderer(BaseRenderer):
    """``application/jsonl``: what a download of JSON lines answers a client that
    asks for it; an error is then one JSON line, in the API's error shape."""

    media_type = JSON_LINES
    format = "jsonl"
    charset = None

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if data is None:
            return b""
        return (json.dumps(data, cls=DjangoJSONEncoder, ensure_ascii=False) + "\n").encode()
