"""One attempt at sending one message, signed as Standard Webhooks specifies.

The body is the message's JSON; the headers ``webhook-id`` (the message's id, the
same on every attempt), ``webhook-timestamp`` (this attempt's time, in seconds) and
``webhook-signature`` (``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` with the
endpoint's secret), computed by the reference implementation (``standardwebhooks``).
Redirects are not followed, and the attempt connects to the address the URL check
approved.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
from standardwebhooks import Webhook

from sessions_app.webhooks.addresses import AllowList, RefusedUrl, check_url

# How much of the receiver's answer is kept in the log.
EXCERPT_BYTES = 1024
USER_AGENT = "goaai-webhooks/1"


@dataclass(frozen=True)
class Outcome:
    """What an attempt found: the receiver's status (``None`` without an answer),
    how long it took, and what went wrong."""

    status: int | None
    latency_ms: int
    error: str = ""
    excerpt: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def body_of(payload: dict[str, Any]) -> str:
    """The exact text that is sent and signed."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def signed_headers(*, secret: str, message_id: str, at: dt.datetime, body: str) -> dict[str, str]:
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, at, body),
    }


def send(
    *,
    url: str,
    secret: str,
    message_id: str,
    payload: dict[str, Any],
    allow: AllowList,
    timeout: float,
) -> Outcome:
    """POST the message to ``url`` once; never raises for what the network or the
    receiver does (that is the outcome)."""
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        target = check_url(url, allow)
    except RefusedUrl as refused:
        return Outcome(None, elapsed(), str(refused))
    body = body_of(payload)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "host": target.host_header,
        **signed_headers(
            secret=secret, message_id=message_id, at=dt.datetime.now(dt.UTC), body=body
        ),
    }
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    try:
        # No proxies from the environment: the request goes to the checked address.
        with (
            httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST",
                target.connect_url,
                content=body.encode(),
                headers=headers,
                extensions=extensions,
            ) as response,
        ):
            excerpt = _excerpt(response)
            return Outcome(response.status_code, elapsed(), "", excerpt)
    except httpx.TimeoutException:
        return Outcome(None, elapsed(), f"No answer within {timeout:g} s.")
    except httpx.HTTPError as exc:
        return Outcome(None, elapsed(), f"{type(exc).__name__}: {exc}"[:500])


def _excerpt(response: httpx.Response) -> str:
    """The start of the answer, without reading more of a big one."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_raw():
        chunks.append(chunk)
        size += len(chunk)
        if size >= EXCERPT_BYTES:
            break
    return b"".join(chunks)[:EXCERPT_BYTES].decode("utf-8", errors="replace")
