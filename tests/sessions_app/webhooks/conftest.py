"""Webhook tests' receiver: a real HTTP server (http.server on 127.0.0.1 in a thread)
answering each request with the next status of its script, recording what came."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    # The statuses to answer with, in order; the last is repeated.
    script: list[int] = field(default_factory=lambda: [200])
    requests: list[Received] = field(default_factory=list)
    # Seconds to wait before answering (a slow receiver).
    delay: float = 0.0
    # Seconds between the bytes of a receiver that drips its answer (0: at once),
    # and whether the drip starts with the headers rather than the body.
    drip_every: float = 0.0
    drip_headers: bool = False
    # How many requests it is answering now, and the most it ever answered at once.
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_status(self) -> int:
        index = min(len(self.requests) - 1, len(self.script) - 1)
        return self.script[index]


@pytest.fixture
def receiver(settings) -> Iterator[Receiver]:
    """A receiver on the loopback interface, which the allow-list then permits."""
    state: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            state.requests.append(
                Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            with state.lock:
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
            try:
                if state.delay:
                    threading.Event().wait(state.delay)
                self._answer(state.next_status())
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _answer(self, status: int) -> None:
            body = f"answered {status}".encode()
            if not state.drip_every:
                self.send_response(status)
                self.send_header("content-type", "text/plain")
                self.end_headers()
                self.wfile.write(body)
                return
            head = f"HTTP/1.1 {status} OK\r\ncontent-length: 2048\r\n\r\n".encode()
            if not state.drip_headers:
                self.wfile.write(head)
                head = b""
            # One byte at a time, each well within a read timeout, for ever longer
            # than any attempt may take (until the sender hangs up).
            try:
                for byte in head + body * 200:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    threading.Event().wait(state.drip_every)
            except OSError:
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = Receiver(url=f"http://127.0.0.1:{server.server_port}/hooks/goaai")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
