"""The chaos benchmark's load: chats that start runs through the API and follow
their sessions over WebSocket, and the checks that nothing was lost.

Each chat is one session with one WebSocket subscriber. It starts a run (with an
``Idempotency-Key``, so a retry after an error or a timeout is the same run), waits
for the run's end on its socket, and starts the next. The subscriber reconnects
with ``?after=<last seq>`` whenever its socket drops, and counts every event whose
``seq`` is not the one after the last (a gap: lost) or is not new (a duplicate).
At the end every chat compares what it received with the session's stored log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets

PROMPT = "calculate 2 * (3 + 4)"
RUN_ENDS = {"run.completed", "run.failed", "run.canceled", "run.timed_out"}


@dataclass
class Sample:
    """One request or run, when it happened and how it went."""

    at: float
    seconds: float
    ok: bool
    status: int = 0


@dataclass
class Tally:
    """What every chat saw, together."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    requests: list[Sample] = field(default_factory=list)
    runs: list[Sample] = field(default_factory=list)
    gaps: int = 0
    duplicates: int = 0
    lost: int = 0
    reconnects: int = 0
    throttled: int = 0
    resyncs: int = 0
    # 503 with Retry-After: a dependency is down and the client is told when to
    # try again (the run was not started, or is recorded and will be queued).
    status_503: list[float] = field(default_factory=list)
    # Any other 5xx: an error nobody planned for.
    status_5xx: list[float] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)


class Chat:
    """One session: its subscriber and the runs it starts one after the other."""

    def __init__(
        self, base: str, token: str, tally: Tally, deadline: float, pause: float = 1.0
    ) -> None:
        self.pause = pause
        self.base = base.rstrip("/")
        self.token = token
        self.tally = tally
        self.deadline = deadline
        self.session = ""
        self.last_seq = 0
        self.seen: set[int] = set()
        self.ended: dict[str, str] = {}
        self.changed = asyncio.Event()
        self.stop = False

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def request(
        self, client: httpx.AsyncClient, method: str, path: str, **kwargs: Any
    ) -> httpx.Response | None:
        """A request, timed and counted; ``None`` when the connection failed."""
        start = time.monotonic()
        headers = {**self.headers, **kwargs.pop("headers", {})}
        try:
            response = await client.request(
                method, f"{self.base}{path}", headers=headers, timeout=30, **kwargs
            )
        except httpx.HTTPError:
            self.tally.requests.append(Sample(start, time.monotonic() - start, False))
            return None
        ok = response.status_code < 500
        if response.status_code == 503 and "Retry-After" in response.headers:
            self.tally.status_503.append(start)
        elif not ok:
            self.tally.status_5xx.append(start)
        self.tally.requests.append(
            Sample(start, time.monotonic() - start, ok, response.status_code)
        )
        return response

    async def run(self, client: httpx.AsyncClient) -> None:
        while self.session == "" and time.monotonic() < self.deadline:
            response = await self.request(
                client, "POST", "/api/v1/sessions/", json={"agent": "assistant"}
            )
            if response is not None and response.status_code == 201:
                self.session = response.json()["id"]
            else:
                await asyncio.sleep(1)
        listener = asyncio.create_task(self.listen())
        try:
            while time.monotonic() < self.deadline:
                await self.one_run(client)
                await asyncio.sleep(self.pause)
        finally:
            self.stop = True
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    async def one_run(self, client: httpx.AsyncClient) -> None:
        key = str(uuid.uuid4())
        start = time.monotonic()
        run_id = ""
        # The same key until the server answers: a retry is the same run.
        while not run_id and time.monotonic() < self.deadline + 60:
            response = await self.request(
                client,
                "POST",
                f"/api/v1/sessions/{self.session}/runs/",
                json={"input": PROMPT},
                headers={"Idempotency-Key": key},
            )
            if response is not None and response.status_code in (200, 201):
                run_id = response.json()["id"]
            elif response is not None and response.status_code == 429:
                self.tally.throttled += 1
                await asyncio.sleep(float(response.headers.get("Retry-After", 1)))
            else:
                await asyncio.sleep(0.5)
        if not run_id:
            return
        self.tally.started += 1
        start = time.monotonic()
        status = await self.wait_for_end(client, run_id, timeout=180)
        seconds = time.monotonic() - start
        if status == "completed":
            self.tally.completed += 1
        elif status:
            self.tally.failed += 1
        else:
            self.tally.unfinished.append(run_id)
        self.tally.runs.append(Sample(start, seconds, status == "completed"))

    async def wait_for_end(self, client: httpx.AsyncClient, run_id: str, timeout: float) -> str:
        """The run's final status, from the stream (or, every 10 s, from the API)."""
        give_up = time.monotonic() + timeout
        while time.monotonic() < give_up:
            if run_id in self.ended:
                return self.ended[run_id]
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 10)
            if run_id not in self.ended:
                response = await self.request(client, "GET", f"/api/v1/runs/{run_id}/")
                if response is not None and response.status_code == 200:
                    status = response.json()["status"]
                    if status in ("completed", "failed", "canceled", "timed_out"):
                        return str(status)
        return ""

    def ws_url(self) -> str:
        scheme = "wss" if self.base.startswith("https") else "ws"
        host = self.base.split("://", 1)[1]
        return (
            f"{scheme}://{host}/ws/sessions/{self.session}/"
            f"?after={self.last_seq}&token={self.token}"
        )

    async def listen(self) -> None:
        first = True
        while not self.stop:
            if not first:
                self.tally.reconnects += 1
                await asyncio.sleep(0.5)
            first = False
            try:
                async with websockets.connect(self.ws_url(), open_timeout=10) as socket:
                    async for raw in socket:
                        self.receive(json.loads(raw))
            except (OSError, websockets.WebSocketException, TimeoutError):
                continue

    def receive(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "resync":
            self.tally.resyncs += 1
            return
        if kind != "event":
            return
        event = frame["event"]
        seq = int(event["seq"])
        if seq in self.seen or seq <= self.last_seq:
            self.tally.duplicates += 1
            return
        if seq != self.last_seq + 1:
            self.tally.gaps += seq - self.last_seq - 1
        self.seen.add(seq)
        self.last_seq = seq
        if event["type"] in RUN_ENDS and event.get("run"):
            self.ended[str(event["run"])] = event["type"].split(".", 1)[1]
            self.changed.set()

    async def audit(self, client: httpx.AsyncClient) -> None:
        """Every stored event of the session must have reached the subscriber."""
        after, stored = 0, set()
        while True:
            response = await self.request(
                client,
                "GET",
                f"/api/v1/sessions/{self.session}/events/",
                params={"after": after, "limit": 1000},
            )
            if response is None or response.status_code != 200:
                await asyncio.sleep(1)
                continue
            body = response.json()
            rows = body["results"] if isinstance(body, dict) else body
            if not rows:
                break
            stored.update(int(row["seq"]) for row in rows)
            after = max(int(row["seq"]) for row in rows)
        self.tally.lost += len(stored - self.seen)


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def window(samples: list[Sample], start: float, end: float) -> dict[str, float]:
    inside = [s for s in samples if start <= s.at < end]
    seconds = [s.seconds for s in inside if s.ok]
    return {
        "count": len(inside),
        "errors": sum(1 for s in inside if not s.ok),
        "p50_ms": statistics.median(seconds) * 1000 if seconds else float("nan"),
        "p99_ms": percentile(seconds, 0.99) * 1000,
    }


async def token_for(base: str, username: str, password: str) -> str:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{base.rstrip('/')}/api/v1/auth/tokens/",
            json={"name": f"chaos {uuid.uuid4().hex[:8]}"},
            auth=(username, password),
        )
        response.raise_for_status()
        return str(response.json()["token"])
