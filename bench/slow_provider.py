"""A model provider on 127.0.0.1 that speaks OpenAI's Chat Completions, slowly.

``POST /v1/chat/completions`` with ``"stream": true`` answers as OpenAI streams: a
role chunk, ``--chunks`` content chunks spread evenly over ``--seconds``, a chunk
with ``finish_reason: "stop"``, a usage chunk with ``choices: []``, then ``data:
[DONE]``, each frame a chunk of a chunked HTTP/1.1 response. It takes as long for
every caller however many stream at once (a thread per connection), which is what a
remote provider looks like from goaai: time spent waiting on the network.

``GET /stats`` answers what it served since the last ``GET /stats?reset=1``: the
streams started and finished, the most at once, and when each began and ended
(Unix seconds), so that a benchmark can tell the provider's time from goaai's.

Run it as ``python bench/slow_provider.py --port 8765``; it prints ``ready <port>``
once it listens.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"
CREATED = 1_764_400_000


@dataclass
class Stats:
    active: int = 0
    peak: int = 0
    began: list[float] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self) -> None:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.began.append(time.time())

    def end(self) -> None:
        with self.lock:
            self.active -= 1
            self.ended.append(time.time())

    def document(self, *, reset: bool) -> dict[str, Any]:
        with self.lock:
            answer = {
                "active": self.active,
                "peak": self.peak,
                "began": list(self.began),
                "ended": list(self.ended),
            }
            if reset:
                self.peak = self.active
                self.began.clear()
                self.ended.clear()
        return answer


class SlowProvider(ThreadingHTTPServer):
    daemon_threads = True
    # 50 callers connecting in the same millisecond overflow the default backlog of 5,
    # and the kernel then makes the ones left out retry their SYN a second later.
    request_queue_size = 1024

    def __init__(self, port: int, *, seconds: float, chunks: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.seconds = seconds
        self.chunks = chunks
        self.stats = Stats()


def chunk(
    model: str,
    delta: dict[str, Any] | None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as OpenAI sends it; ``delta=None`` is the usage
    chunk, which has no choices."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    )
    return {
        "id": "chatcmpl-bench0001",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_bench",
        "choices": choices,
        "usage": usage,
    }


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "slow-provider/1.0"

    @property
    def provider(self) -> SlowProvider:
        assert isinstance(self.server, SlowProvider)
        return self.server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a benchmark reads /stats instead."""

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path != "/stats":
            self._json(404, {"error": {"message": f"no {path} here", "type": "not_found"}})
            return
        self._json(200, self.provider.stats.document(reset=query == "reset=1"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.partition("?")[0] != CHAT_PATH:
            self._json(404, {"error": {"message": f"no {self.path} here", "type": "not_found"}})
            return
        if not body.get("stream"):
            message = "this provider only streams: send stream=true"
            self._json(400, {"error": {"message": message, "type": "invalid_request_error"}})
            return
        self.provider.stats.begin()
        try:
            self._stream(str(body.get("model", "slow")), len(body.get("messages", ())))
        except ConnectionError:
            self.close_connection = True
        finally:
            self.provider.stats.end()

    def _stream(self, model: str, messages: int) -> None:
        provider = self.provider
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        start = time.monotonic()
        self._frame(chunk(model, {"role": "assistant", "content": "", "refusal": None}))
        interval = provider.seconds / provider.chunks
        for number in range(provider.chunks):
            # On a schedule from the start, so that a late write does not push the
            # rest later: the answer takes --seconds whatever the load.
            delay = start + (number + 1) * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._frame(chunk(model, {"content": f"word{number} "}))
        self._frame(chunk(model, {}, finish_reason="stop"))
        self._frame(chunk(model, None, usage=usage(10 * messages, provider.chunks)))
        self._write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _frame(self, data: dict[str, Any]) -> None:
        self._write(f"data: {json.dumps(data)}\n\n".encode())

    def _write(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, body: object) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--seconds", type=float, default=2.0, help="how long an answer takes")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks in an answer")
    args = parser.parse_args()
    server = SlowProvider(args.port, seconds=args.seconds, chunks=args.chunks)
    print(f"ready {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
