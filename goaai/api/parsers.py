"""Request bodies: JSON only, and never more than the configured size."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.renderers import JSONRenderer

from goaai.api.exceptions import PayloadTooLarge
from goaai.api.fields import json_nodes, json_path, nested_deeper_than

# Deeper than any document the API takes needs; well inside what the serializers,
# the JSON encoder and the database drivers handle (they recurse, once per level).
MAX_JSON_DEPTH = 64
_SURROGATE = re.compile(r"[\ud800-\udfff]")


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
        try:
            data = JSONParser().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:
            raise _too_deep() from None
        check_parsed(data)
        return data


def _too_deep() -> ParseError:
    return ParseError(f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep.")


def check_parsed(data: Any) -> None:
    """Refuses what JSON can spell but nothing downstream can take: nesting past
    :data:`MAX_JSON_DEPTH`, and a string or key with an escape of half a UTF-16
    surrogate pair (``"\\ud800"`` alone), which is no character: UTF-8, the JSON
    encoder and PostgreSQL's ``jsonb`` all refuse it. (A whole pair is one
    character and is fine.)"""
    if nested_deeper_than(data, MAX_JSON_DEPTH):
        raise _too_deep()
    for node, _, place in json_nodes(data):
        if isinstance(node, str) and not node.isascii() and (half := _SURROGATE.search(node)):
            where = f" in {json_path(place)}" if place is not None else ""
            raise ParseError(
                f"JSON parse error - \\u{ord(half.group()):04x}{where} is half of a UTF-16 "
                "surrogate pair, not a character."
            )
