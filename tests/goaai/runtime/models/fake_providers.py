"""A real HTTP server on 127.0.0.1 that speaks the OpenAI and Anthropic wire protocols.

The clients under test use the official SDKs unchanged, pointed at this server, so
the tests exercise the real request encoding, SSE parsing and error classes.

* ``POST /v1/chat/completions`` answers like OpenAI: a ``chat.completion`` JSON body,
  or ``text/event-stream`` with ``data: {chunk}`` frames ending in ``data: [DONE]``.
* ``POST /v1/messages`` answers like Anthropic: ``event: <type>`` / ``data: {json}``
  frames (message_start, content_block_start, ping, content_block_delta,
  content_block_stop, message_delta, message_stop), or an error event.

Each test scripts the answers, in order, with :meth:`FakeProviderServer.script`,
and reads what the client sent from :attr:`FakeProviderServer.requests`. Streams are
sent with chunked transfer encoding, one frame per chunk, as the real APIs do.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
CREATED = 1_764_400_000


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class JsonResponse:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SSEResponse:
    """An event stream. With ``stall_after`` set, the server sends that many frames
    and then goes quiet for ``stall_seconds`` (a read timeout mid-stream)."""

    frames: list[str]
    headers: dict[str, str] = field(default_factory=dict)
    stall_after: int | None = None
    stall_seconds: float = 0.0


@dataclass
class SlowResponse:
    """Waits ``delay`` seconds before sending anything, then answers with ``then``."""

    delay: float
    then: JsonResponse | SSEResponse


Response = JsonResponse | SSEResponse | SlowResponse


class _Server(ThreadingHTTPServer):
    fake: FakeProviderServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops its connection (a timeout, an aborted stream, a pool
        # closing) is normal here; anything else still gets the default report.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeProviderServer:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._scripts: dict[str, deque[Response]] = {}
        self._lock = threading.Lock()
        # Set on stop, so that slow and stalled answers end at once.
        self.stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def start(self) -> FakeProviderServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def script(self, path: str, *responses: Response) -> None:
        """Answer the next requests to ``path`` with ``responses``, in order."""
        with self._lock:
            self._scripts.setdefault(path, deque()).extend(responses)

    def openai(self, *responses: Response) -> None:
        self.script(OPENAI_PATH, *responses)

    def anthropic(self, *responses: Response) -> None:
        self.script(ANTHROPIC_PATH, *responses)

    def bodies(self, path: str) -> list[Any]:
        return [r.body for r in self.requests if r.path == path]

    def _record(self, request: RecordedRequest) -> Response | None:
        with self._lock:
            self.requests.append(request)
            queue = self._scripts.get(request.path)
            return queue.popleft() if queue else None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-provider/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows the request list on failure through the tests' asserts."""

    @property
    def fake(self) -> FakeProviderServer:
        assert isinstance(self.server, _Server)
        return self.server.fake

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = self.path.split("?", 1)[0]
        response = self.fake._record(
            RecordedRequest(
                method="POST",
                path=path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
        )
        if response is None:
            response = JsonResponse(
                500, {"error": {"message": f"fake server: nothing scripted for {path}"}}
            )
        try:
            self._send(response)
        except ConnectionError:
            # The client gave up (its timeout), which is what some tests want.
            self.close_connection = True

    def _send(self, response: Response) -> None:
        if isinstance(response, SlowResponse):
            if self.fake.stopping.wait(response.delay):
                self.close_connection = True
                return
            response = response.then
        if isinstance(response, JsonResponse):
            payload = json.dumps(response.body).encode()
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for number, frame in enumerate(response.frames):
            if response.stall_after is not None and number == response.stall_after:
                self.fake.stopping.wait(response.stall_seconds)
                self.close_connection = True
                return
            data = frame.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ---------------------------------------------------------------------------
# OpenAI Chat Completions


def _chunk(
    delta: dict[str, Any] | None,
    *,
    model: str,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake0001",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage,
    }


def _openai_usage(prompt: int, completion: int) -> dict[str, Any]:
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


def openai_sse(chunks: Iterable[dict[str, Any]], **options: Any) -> SSEResponse:
    frames = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    frames.append("data: [DONE]\n\n")
    return SSEResponse(frames, **options)


def openai_text_chunks(
    pieces: Sequence[str],
    *,
    model: str = "gpt-fake-2025-01-01",
    usage: tuple[int, int] | None = (12, 5),
) -> list[dict[str, Any]]:
    """A streamed text answer: role, one chunk per piece, stop, then usage."""
    chunks = [_chunk({"role": "assistant", "content": "", "refusal": None}, model=model)]
    chunks += [_chunk({"content": piece}, model=model) for piece in pieces]
    chunks.append(_chunk({}, model=model, finish_reason="stop"))
    if usage is not None:
        chunks.append(_chunk(None, model=model, usage=_openai_usage(*usage)))
    return chunks


def openai_text(pieces: Sequence[str], **options: Any) -> SSEResponse:
    return openai_sse(openai_text_chunks(pieces, **options))


@dataclass
class StreamedCall:
    """A tool call as a provider streams it: its arguments split into fragments."""

    id: str
    name: str
    fragments: Sequence[str]


def openai_tool_calls(
    calls: Sequence[StreamedCall],
    *,
    model: str = "gpt-fake-2025-01-01",
    usage: tuple[int, int] | None = (40, 18),
) -> SSEResponse:
    """Tool calls streamed as OpenAI does: the first chunk of each call carries its
    id, type and name with empty arguments, the next ones argument fragments only."""
    chunks = [_chunk({"role": "assistant", "content": None, "refusal": None}, model=model)]
    for index, call in enumerate(calls):
        chunks.append(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                },
                model=model,
            )
        )
        chunks += [
            _chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]},
                model=model,
            )
            for fragment in call.fragments
        ]
    chunks.append(_chunk({}, model=model, finish_reason="tool_calls"))
    if usage is not None:
        chunks.append(_chunk(None, model=model, usage=_openai_usage(*usage)))
    return openai_sse(chunks)


def openai_completion(
    text: str, *, model: str = "gpt-fake-2025-01-01", usage: tuple[int, int] = (12, 5)
) -> JsonResponse:
    """A non-streamed ``chat.completion``, as a server that ignores ``stream`` sends."""
    return JsonResponse(
        200,
        {
            "id": "chatcmpl-fake0002",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": _openai_usage(*usage),
        },
    )


def openai_error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JsonResponse:
    return JsonResponse(
        status,
        {"error": {"message": message, "type": type, "param": None, "code": code}},
        headers or {},
    )


# ---------------------------------------------------------------------------
# Anthropic Messages


def anthropic_sse(events: Iterable[dict[str, Any]], **options: Any) -> SSEResponse:
    return SSEResponse(
        [f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events], **options
    )


@dataclass
class TextBlock:
    pieces: Sequence[str]


def anthropic_events(
    blocks: Sequence[TextBlock | StreamedCall],
    *,
    model: str = "claude-fake-4-5-20250929",
    input_tokens: int = 21,
    output_tokens: int = 9,
    stop_reason: str | None = None,
) -> list[dict[str, Any]]:
    """One message's events, as the Messages API streams them."""
    has_tool_use = any(isinstance(block, StreamedCall) for block in blocks)
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_fake0001",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 1,
                    "service_tier": "standard",
                },
            },
        }
    ]
    for index, block in enumerate(blocks):
        start: dict[str, Any]
        if isinstance(block, TextBlock):
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in block.pieces]
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": f} for f in block.fragments]
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        if index == 0:
            events.append({"type": "ping"})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": stop_reason or ("tool_use" if has_tool_use else "end_turn"),
                "stop_sequence": None,
            },
            "usage": {"output_tokens": output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


def anthropic_message(blocks: Sequence[TextBlock | StreamedCall], **options: Any) -> SSEResponse:
    return anthropic_sse(anthropic_events(blocks, **options))


def anthropic_error_body(type: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": type, "message": message},
        "request_id": "req_fake0001",
    }


def anthropic_error(
    status: int, type: str, message: str, *, headers: dict[str, str] | None = None
) -> JsonResponse:
    return JsonResponse(
        status,
        anthropic_error_body(type, message),
        {"request-id": "req_fake0001", **(headers or {})},
    )
