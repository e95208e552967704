"""Request bodies: JSON only, and never more than the configured size."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from goaai.api.exceptions import PayloadTooLarge


class LimitedJSONParser(JSONParser):
    """Refuses a body over ``GOAAI_API_MAX_BODY_BYTES`` with a 413, before parsing it.

    It reads at most one byte more than the limit, so an oversized body (with or
    without a Content-Length) never gets into memory whole.
    """

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = settings.GOAAI_API_MAX_BODY_BYTES
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        return super().parse(io.BytesIO(body), media_type, parser_context)
