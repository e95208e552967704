"""Requests that start a run go through one at a time; reads are never held.

When many users send a message at once, a server that took their requests all
together ran them on as many threads taking turns on one interpreter: each run was
recorded only once all the others had been, so even the first reached its model
after all of them (0.85 s for the first of 50 chats, ``bench/capacity.py``), and
a page asked for meanwhile waited its turn among them (p99 200 to 300 ms). This
ASGI middleware lets ``GOAAI_RUN_STARTS_AT_ONCE`` requests that start a run (1 by
default; 0: no limit) into Django at a time, per server process; the others wait
in the server's event loop, which costs nothing. The runs then start in the order
their requests came, each reaching its model as soon as it is recorded, and the
pages and live streams are served beside them.

The requests it holds are those that start a run and answer at once, without
waiting for it: ``POST /api/v1/sessions/<id>/runs/`` (the chat page's send) and
the run actions ``retry``, ``regenerate``, ``edit`` and ``fork``. The
OpenAI-compatible endpoints (``/v1/``) are not held: their answer may be the whole
run. A request's body is read before it waits, so a client slow to send one does
not hold the others up; the next goes in once the answer is sent, without waiting
for the request's end in Django (its response closed, its connection given back).
"""

from __future__ import annotations

import asyncio
import re
import weakref
from typing import Any

from django.conf import settings

START_PATHS = re.compile(
    r"^/api/v1/(?:sessions/[^/]+/runs|runs/[^/]+/(?:retry|regenerate|edit|fork))/$"
)


def starts_a_run(scope: dict[str, Any]) -> bool:
    """Whether the HTTP request of ``scope`` is one that starts a run."""
    return scope.get("method") == "POST" and bool(START_PATHS.match(scope.get("path", "")))


class RunStartGate:
    """ASGI middleware: requests that start a run enter ``app`` a few at a time."""

    def __init__(self, app: Any) -> None:
        self.app = app
        # A semaphore belongs to the event loop it is first awaited in: one per loop
        # (and a new one if the setting changed).
        self._gates: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()

    def _gate(self, at_once: int) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        known = self._gates.get(loop)
        if known is None or known[0] != at_once:
            known = self._gates[loop] = (at_once, asyncio.Semaphore(at_once))
        return known[1]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        at_once = int(settings.GOAAI_RUN_STARTS_AT_ONCE)
        if scope["type"] != "http" or at_once <= 0 or not starts_a_run(scope):
            await self.app(scope, receive, send)
            return
        # The whole body first (the body limit, outside, caps it).
        received: list[dict[str, Any]] = []
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        if received[-1]["type"] == "http.disconnect":
            # Gone before its body was whole, or over the limit (answered outside).
            return

        async def replay() -> dict[str, Any]:
            if received:
                return received.pop(0)
            message: dict[str, Any] = await receive()
            return message

        await self._in_turn(self._gate(at_once), scope, replay, send)

    async def _in_turn(
        self, gate: asyncio.Semaphore, scope: dict[str, Any], receive: Any, send: Any
    ) -> None:
        """``app`` with ``gate`` held until its answer is sent (or it ends)."""
        await gate.acquire()
        held = True

        def let_next_in() -> None:
            nonlocal held
            if held:
                held = False
                gate.release()

        async def answer(message: dict[str, Any]) -> None:
            await send(message)
            # Answered: what is left (closing the response, Django's end-of-request
            # signal) does not hold the next start up.
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                let_next_in()

        try:
            await self.app(scope, receive, answer)
        finally:
            let_next_in()
