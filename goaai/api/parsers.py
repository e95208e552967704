"""Request bodies: JSON only, and never more than the configured size."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.renderers import JSONRenderer

from goaai.api.exceptions import PayloadTooLarge


class LimitedJSONParser(BaseParser):
    """Refuses a body over ``GOAAI_API_MAX_BODY_BYTES`` with a 413, before parsing it.

    A body announced larger is refused without reading it; otherwise at most one
    byte more than the limit is read, so an oversized body never gets into memory
    whole. It is not a JSONParser subclass on purpose: DRF reads the whole
    ``request.body`` before calling one.
    """

    media_type = "application/json"
    renderer_class = JSONRenderer

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = settings.GOAAI_API_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        too_large = PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        if declared and declared.isdigit() and int(declared) > limit:
            raise too_large
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise too_large
        return JSONParser().parse(io.BytesIO(body), media_type, parser_context)
