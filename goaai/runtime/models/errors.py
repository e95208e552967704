"""Which goaai error kind a provider failure is, decided once for every client.

Both official SDKs fail in the same shapes: an HTTP status with a decoded error body,
an error event in the middle of a stream, a timeout, a connection that could not be
made, or one that broke before the reply was complete. Each client pulls those facts
out of its own SDK's exceptions and asks these functions for the :class:`ModelError`
to raise, so that "429 is rate_limited and worth retrying" is written in one place,
and so is reading how long the provider asked us to wait (:func:`retry_after_seconds`).
The one rule for tool arguments a model garbled (:func:`parse_tool_arguments`) lives
here too, for the same reason.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
from collections.abc import Mapping
from typing import Any

from goaai.runtime.errors import ModelError
from goaai.runtime.vocabulary import ErrorKind

# A provider's own words can be long (and may echo the request back); keep enough
# to be useful in a run's error without flooding it.
_MAX_DETAIL = 300

# HTTP status -> (kind, retryable, what it means for the reader).
_STATUS: dict[int, tuple[str, bool, str]] = {
    400: (ErrorKind.INVALID_CALL, False, "rejected the request"),
    401: (ErrorKind.UNAVAILABLE, False, "rejected the API key"),
    403: (ErrorKind.UNAVAILABLE, False, "denied permission"),
    404: (ErrorKind.INVALID_CALL, False, "does not know this model or endpoint"),
    408: (ErrorKind.TIMEOUT, True, "timed out on its side"),
    413: (ErrorKind.INVALID_CALL, False, "found the request too large"),
    422: (ErrorKind.INVALID_CALL, False, "could not process the request"),
    429: (ErrorKind.RATE_LIMITED, True, "is rate limiting us"),
    529: (ErrorKind.UNAVAILABLE, True, "is overloaded"),
}

# The ``type`` of an error body, for errors that arrive inside a stream (HTTP 200)
# where the status says nothing. Anthropic and OpenAI spellings both appear.
_ERROR_TYPES: dict[str, tuple[str, bool, str]] = {
    "invalid_request_error": (ErrorKind.INVALID_CALL, False, "rejected the request"),
    "authentication_error": (ErrorKind.UNAVAILABLE, False, "rejected the API key"),
    "permission_error": (ErrorKind.UNAVAILABLE, False, "denied permission"),
    "not_found_error": (ErrorKind.INVALID_CALL, False, "does not know this model or endpoint"),
    "request_too_large": (ErrorKind.INVALID_CALL, False, "found the request too large"),
    "rate_limit_error": (ErrorKind.RATE_LIMITED, True, "is rate limiting us"),
    "rate_limit_exceeded": (ErrorKind.RATE_LIMITED, True, "is rate limiting us"),
    "too_many_requests": (ErrorKind.RATE_LIMITED, True, "is rate limiting us"),
    "timeout_error": (ErrorKind.TIMEOUT, True, "timed out on its side"),
    "api_error": (ErrorKind.UNAVAILABLE, True, "failed on its side"),
    "server_error": (ErrorKind.UNAVAILABLE, True, "failed on its side"),
    "overloaded_error": (ErrorKind.UNAVAILABLE, True, "is overloaded"),
    "server_is_overloaded": (ErrorKind.UNAVAILABLE, True, "is overloaded"),
    # llama.cpp's words for a model still loading, and for a prompt too long.
    "unavailable_error": (ErrorKind.UNAVAILABLE, True, "is not ready"),
    "exceed_context_size_error": (ErrorKind.INVALID_CALL, False, "found the request too large"),
}


# Tool arguments a model sent that are not a JSON object are kept under this key, so
# the tool call is still recorded and the loop answers it with ``invalid_call``
# (the tool's schema forbids the key) instead of the run crashing.
RAW_ARGUMENTS_KEY = "_raw"


def parse_tool_arguments(text: str) -> dict[str, Any]:
    """A tool call's arguments from the JSON text the model streamed.

    Empty text is no arguments; anything that is not a JSON object is kept verbatim
    as ``{"_raw": text}`` for the loop to reject with ``invalid_call``.
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: text}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: text}


def error_detail(body: object) -> str:
    """The human message inside a provider's error body, shortened."""
    text = ""
    if isinstance(body, Mapping):
        inner = body.get("error")
        source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
        message = source.get("message")
        text = message if isinstance(message, str) else ""
    elif isinstance(body, str):
        text = body
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "\u2026"


def error_type(body: object) -> str:
    """The machine ``type`` (or OpenAI ``code``) of a provider's error body, if any."""
    if not isinstance(body, Mapping):
        return ""
    inner = body.get("error")
    source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
    for key in ("type", "code"):
        value = source.get(key)
        if isinstance(value, str) and value in _ERROR_TYPES:
            return value
    value = source.get("type")
    return value if isinstance(value, str) and value != "error" else ""


def _status_in_body(body: object) -> int | None:
    """The HTTP status a compatible server wrote into an error it sent inside a
    stream (llama.cpp and vLLM put it in ``code``), if there is one."""
    if not isinstance(body, Mapping):
        return None
    inner = body.get("error")
    source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
    code = source.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    return None


def retry_after_seconds(
    headers: Mapping[str, str], *, now: dt.datetime | None = None
) -> float | None:
    """How long the provider asked us to wait, in seconds, from its headers.

    ``retry-after-ms`` (OpenAI's, in milliseconds) wins over ``retry-after``, which
    is a number of seconds or an HTTP date. ``None`` when neither says anything
    usable; a date already past is no wait at all.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    milliseconds = _number(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    wait = (when - (now or dt.datetime.now(tz=dt.UTC))).total_seconds()
    # An HTTP date is precise to the second: round up, never ask again too early.
    return float(max(0, math.ceil(wait)))


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def status_error(
    provider: str, status: int, body: object, *, retry_after: float | None = None
) -> ModelError:
    """The error for a failed HTTP answer, or an error event inside a stream.

    ``status`` is the HTTP status; an error event inside a stream arrives with the
    stream's 200, and then the status the body names (compatible servers put one in
    ``code``) or the body's error ``type`` decides. ``retry_after`` is the wait the
    provider asked for (:func:`retry_after_seconds`); a retryable error carries it.
    """
    detail = error_detail(body)
    kind_type = error_type(body)
    in_stream = status < 400
    if in_stream:
        status = _status_in_body(body) or status
    if status in _STATUS:
        kind, retryable, meaning = _STATUS[status]
    elif status >= 500:
        kind, retryable, meaning = ErrorKind.UNAVAILABLE, True, "failed on its side"
    elif status < 400 and kind_type in _ERROR_TYPES:
        kind, retryable, meaning = _ERROR_TYPES[kind_type]
    else:
        kind, retryable, meaning = ErrorKind.INTERNAL, False, "answered with an unexpected error"
    if in_stream:
        where = "error in the stream" + (f", HTTP {status}" if status >= 400 else "")
    else:
        where = f"HTTP {status}"
    if kind_type:
        where += f", {kind_type}"
    message = f"{provider}: the provider {meaning} ({where})"
    if not retryable:
        retry_after = None
    if retry_after is not None:
        message += f"; retry after {retry_after:g} s"
    if detail:
        message += f": {detail}"
    return ModelError(kind, message, retryable=retryable, retry_after=retry_after)


def timeout_error(provider: str, timeout: float) -> ModelError:
    return ModelError(
        ErrorKind.TIMEOUT,
        f"{provider}: no answer within {timeout:g} s.",
        retryable=True,
    )


def connection_error(provider: str, base_url: str, detail: str = "") -> ModelError:
    message = f"{provider}: cannot reach {base_url}"
    return ModelError(
        ErrorKind.UNAVAILABLE, f"{message}: {detail}" if detail else f"{message}.", retryable=True
    )


def incomplete_error(provider: str, detail: str = "") -> ModelError:
    """The stream stopped (the connection broke, or the server just stopped sending)
    before the provider said the reply was finished: what arrived is not the reply,
    and asking again usually gets a whole one."""
    message = f"{provider}: the stream ended before the reply was complete"
    return ModelError(
        ErrorKind.UNAVAILABLE, f"{message}: {detail}" if detail else f"{message}.", retryable=True
    )


def unexpected_error(provider: str, exc: BaseException) -> ModelError:
    return ModelError(
        ErrorKind.INTERNAL,
        f"{provider}: unexpected failure: {type(exc).__name__}: {exc}",
        retryable=False,
    )
