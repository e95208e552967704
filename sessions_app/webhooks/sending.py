"""One attempt at sending one message, signed as Standard Webhooks specifies.

The body is the message's JSON; the headers ``webhook-id`` (the message's id, the
same on every attempt), ``webhook-timestamp`` (this attempt's time, in seconds) and
``webhook-signature`` (``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` with the
endpoint's secret), computed by the reference implementation (``standardwebhooks``).
Redirects are not followed, and the attempt connects to the address the URL check
approved. An attempt takes at most its timeout from start to end, connecting,
sending and reading the answer included (one deadline over the whole exchange, not a
limit per read), so a receiver that drips its answer a byte at a time cannot hold a
sender longer than one that does not answer at all.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpx2
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


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The certificates every attempt checks against, loaded once per process."""
    return httpx2.create_ssl_context(trust_env=False)


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
    request = _Request(target.connect_url, body.encode(), headers, extensions)
    try:
        status, excerpt, complete = asyncio.run(_exchange(request, timeout))
    except (TimeoutError, httpx2.TimeoutException):
        return Outcome(None, elapsed(), f"No answer within {timeout:g} s.")
    except httpx2.HTTPError as exc:
        return Outcome(None, elapsed(), f"{type(exc).__name__}: {exc}"[:500])
    late = "" if complete else f"The rest of the answer did not come within {timeout:g} s."
    return Outcome(status, elapsed(), late, excerpt)


@dataclass(frozen=True)
class _Request:
    url: str
    body: bytes
    headers: dict[str, str]
    extensions: dict[str, str]


async def _exchange(request: _Request, timeout: float) -> tuple[int, str, bool]:
    """POST ``request`` and read the start of the answer, all of it within ``timeout``
    seconds: the receiver's status, the excerpt, and whether the excerpt came in time
    (the status counts either way: the receiver has answered)."""
    deadline = asyncio.get_running_loop().time() + timeout
    # No proxies from the environment: the request goes to the checked address.
    async with httpx2.AsyncClient(
        verify=_ssl_context(), timeout=timeout, follow_redirects=False, trust_env=False
    ) as client:
        async with asyncio.timeout_at(deadline):
            response = await client.send(
                client.build_request(
                    "POST",
                    request.url,
                    content=request.body,
                    headers=request.headers,
                    extensions=request.extensions,
                ),
                stream=True,
            )
        try:
            chunks: list[bytes] = []
            size = 0
            complete = True
            try:
                async with asyncio.timeout_at(deadline):
                    async for chunk in response.aiter_raw():
                        chunks.append(chunk)
                        size += len(chunk)
                        if size >= EXCERPT_BYTES:
                            break
            except (TimeoutError, httpx2.TimeoutException):
                complete = False
        finally:
            await response.aclose()
    text = b"".join(chunks)[:EXCERPT_BYTES].decode("utf-8", errors="replace")
    return response.status_code, text, complete
