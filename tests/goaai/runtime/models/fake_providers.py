"""A real HTTP server on 127.0.0.1 that speaks the OpenAI and Anthropic wire protocols.

The clients under test use the official SDKs unchanged, pointed at this server, so
the tests exercise the real request encoding, SSE parsing and error classes.

* ``POST /v1/chat/completions`` answers like OpenAI: a ``chat.completion`` JSON body,
  or ``text/event-stream`` with ``data: {chunk}`` frames ending in ``data: [DONE]``.
* ``POST /v1/messages`` answers like Anthropic: ``event: <type>`` / ``data: {json}``
  frames (message_start, content_block_start, ping, content_block_delta,
  content_block_stop, message_delta, message_stop), or an error event.
* ``POST /v1/responses`` answers like OpenAI's Responses API: ``event: <type>`` /
  ``data: {json}`` frames, each numbered by ``sequence_number``, from
  ``response.created`` to ``response.completed`` (or ``response.incomplete``,
  ``response.failed``, an ``error`` event).

Each test scripts the answers, in order, with :meth:`FakeProviderServer.script`,
and reads what the client sent from :attr:`FakeProviderServer.requests`. Streams are
sent with chunked transfer encoding, one frame per chunk, as the real APIs do.

Besides OpenAI's and Anthropic's own shapes, the builders below send what the
compatible servers really send (Ollama, vLLM, llama.cpp and others' quirks), one
builder per quirk, so that each test names the server whose behaviour it pins.
"""

from __future__ import annotations

import array
import fcntl
import json
import socket
import struct
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
RESPONSES_PATH = "/v1/responses"
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
    and then goes quiet for ``stall_seconds`` (a read timeout mid-stream); with
    ``reset_after`` set, it sends that many frames and then resets the connection
    (a server or proxy dying mid-answer)."""

    frames: list[str]
    headers: dict[str, str] = field(default_factory=dict)
    stall_after: int | None = None
    stall_seconds: float = 0.0
    reset_after: int | None = None


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

    def responses(self, *responses: Response) -> None:
        self.script(RESPONSES_PATH, *responses)

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
    # Set to end the connection with a TCP reset instead of an orderly close.
    _reset = False

    def finish(self) -> None:
        if not self._reset:
            super().finish()
            return
        # Linger 0 makes close send a reset, and a reset throws away what the
        # kernel has not sent yet: wait until the client has acknowledged every
        # frame written, so that it reads them all and then the reset, as from a
        # proxy dying between two frames. The files go first, as they hold the
        # socket open.
        self._wait_until_acknowledged()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.wfile.close()
        self.connection.close()

    def _wait_until_acknowledged(self, seconds: float = 5.0) -> None:
        unacknowledged = array.array("i", [0])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            # TIOCOUTQ on a TCP socket: bytes written and not yet acknowledged.
            fcntl.ioctl(self.connection.fileno(), termios.TIOCOUTQ, unacknowledged, True)
            if unacknowledged[0] == 0:
                return
            time.sleep(0.002)

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
            if response.reset_after is not None and number == response.reset_after:
                self._reset = True
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


def _openai_usage(
    prompt: int, completion: int, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """OpenAI's usage object: ``prompt_tokens`` counts the cached ones too, and
    ``completion_tokens`` the reasoning ones."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def openai_sse(
    chunks: Iterable[dict[str, Any]], *, done: bool = True, **options: Any
) -> SSEResponse:
    """Chunks as ``data:`` frames, then ``data: [DONE]`` unless ``done`` is false."""
    frames = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    if done:
        frames.append("data: [DONE]\n\n")
    return SSEResponse(frames, **options)


def openai_text_chunks(
    pieces: Sequence[str],
    *,
    model: str = "gpt-fake-2025-01-01",
    usage: tuple[int, int] | None = (12, 5),
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    finish_reason: str = "stop",
) -> list[dict[str, Any]]:
    """A streamed text answer: role, one chunk per piece, the finish reason, then
    usage in a last chunk with no choices (OpenAI's own shape)."""
    chunks = [_chunk({"role": "assistant", "content": "", "refusal": None}, model=model)]
    chunks += [_chunk({"content": piece}, model=model) for piece in pieces]
    chunks.append(_chunk({}, model=model, finish_reason=finish_reason))
    if usage is not None:
        details = {"cached": cached_tokens, "reasoning": reasoning_tokens}
        chunks.append(_chunk(None, model=model, usage=_openai_usage(*usage, **details)))
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


def openai_text_with_usage_on_finish(
    pieces: Sequence[str], *, model: str = "local-model", usage: tuple[int, int] = (12, 5)
) -> SSEResponse:
    """Some servers put usage on the chunk that carries the finish reason and send
    no usage chunk of its own."""
    chunks = [_chunk({"role": "assistant", "content": ""}, model=model)]
    chunks += [_chunk({"content": piece}, model=model) for piece in pieces]
    chunks.append(_chunk({}, model=model, finish_reason="stop", usage=_openai_usage(*usage)))
    return openai_sse(chunks)


def openai_tool_calls_without_index(
    calls: Sequence[StreamedCall], *, model: str = "local-model"
) -> SSEResponse:
    """Tool calls as OpenAI streams them, but with no ``index`` in any fragment (some
    compatible servers leave it out)."""
    chunks = [_chunk({"role": "assistant", "content": None}, model=model)]
    for call in calls:
        opening = {"id": call.id, "type": "function", "function": {"name": call.name}}
        chunks.append(_chunk({"tool_calls": [opening]}, model=model))
        chunks += [
            _chunk({"tool_calls": [{"function": {"arguments": fragment}}]}, model=model)
            for fragment in call.fragments
        ]
    chunks.append(_chunk({}, model=model, finish_reason="tool_calls"))
    chunks.append(_chunk(None, model=model, usage=_openai_usage(30, 12)))
    return openai_sse(chunks)


def openai_tool_calls_resending_id_and_name(
    calls: Sequence[StreamedCall], *, model: str = "local-model"
) -> SSEResponse:
    """Tool calls whose every fragment repeats the call's index, id, type and name
    (as some compatible servers and proxies send them)."""
    chunks = [_chunk({"role": "assistant", "content": None}, model=model)]
    for index, call in enumerate(calls):
        for fragment in ["", *call.fragments]:
            repeated = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": fragment},
            }
            chunks.append(_chunk({"tool_calls": [repeated]}, model=model))
    chunks.append(_chunk({}, model=model, finish_reason="tool_calls"))
    chunks.append(_chunk(None, model=model, usage=_openai_usage(30, 12)))
    return openai_sse(chunks)


@dataclass
class WholeCall:
    """A tool call a server sends in one fragment: id, name and all the arguments.
    ``id`` ``None`` leaves the id out (servers that assign none)."""

    id: str | None
    name: str
    arguments: str

    def fragment(self, index: int) -> dict[str, Any]:
        fragment: dict[str, Any] = {"index": index}
        if self.id is not None:
            fragment["id"] = self.id
        fragment["type"] = "function"
        fragment["function"] = {"name": self.name, "arguments": self.arguments}
        return fragment


def _ollama_chunk(
    delta: dict[str, Any] | None, *, model: str, finish_reason: str | None = None
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-718",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return chunk


def ollama_stream(
    *,
    reasoning: Sequence[str] = (),
    pieces: Sequence[str] = (),
    calls: Sequence[WholeCall] = (),
    model: str = "qwen3:8b",
    finish_reason: str = "stop",
    usage: tuple[int, int] = (85, 31),
) -> SSEResponse:
    """Ollama's /v1/chat/completions: a thinking model's ``reasoning`` deltas, the
    text, then each tool call whole in its own chunk and every one at ``index`` 0;
    ``finish_reason`` "stop" even after tool calls; usage in a last chunk."""
    chunks = [
        _ollama_chunk({"role": "assistant", "content": "", "reasoning": piece}, model=model)
        for piece in reasoning
    ]
    chunks += [
        _ollama_chunk({"role": "assistant", "content": piece}, model=model) for piece in pieces
    ]
    for call in calls:
        chunks.append(
            _ollama_chunk(
                {"role": "assistant", "content": "", "tool_calls": [call.fragment(0)]},
                model=model,
            )
        )
    chunks.append(
        _ollama_chunk(
            {"role": "assistant", "content": ""}, model=model, finish_reason=finish_reason
        )
    )
    usage_chunk = _ollama_chunk(None, model=model)
    usage_chunk["usage"] = {
        "prompt_tokens": usage[0],
        "completion_tokens": usage[1],
        "total_tokens": sum(usage),
    }
    chunks.append(usage_chunk)
    return openai_sse(chunks)


def _vllm_chunk(
    delta: dict[str, Any] | None, *, model: str, finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-7c1e0b6f4a2d4b8e9f3a5c6d7e8f9a0b",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def vllm_stream(
    *,
    reasoning: Sequence[str] = (),
    pieces: Sequence[str] = (),
    calls: Sequence[StreamedCall] = (),
    reasoning_field: str = "reasoning_content",
    model: str = "Qwen/Qwen3-8B",
    usage: tuple[int, int] = (120, 64),
) -> SSEResponse:
    """vLLM with a reasoning parser and a tool parser: ``reasoning_content`` (newer
    versions: ``reasoning``) deltas, the text, then tool calls opened with their
    name and no id (the parsers that assign none), argument fragments after, and
    usage in a last chunk with ``prompt_tokens_details`` null."""
    chunks = [_vllm_chunk({"role": "assistant", "content": ""}, model=model)]
    chunks += [_vllm_chunk({reasoning_field: piece}, model=model) for piece in reasoning]
    chunks += [_vllm_chunk({"content": piece}, model=model) for piece in pieces]
    for index, call in enumerate(calls):
        opening = {"index": index, "type": "function", "function": {"name": call.name}}
        chunks.append(_vllm_chunk({"tool_calls": [opening]}, model=model))
        chunks += [
            _vllm_chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]},
                model=model,
            )
            for fragment in call.fragments
        ]
    finish = "tool_calls" if calls else "stop"
    chunks.append(_vllm_chunk({"content": ""}, model=model, finish_reason=finish))
    usage_chunk = _vllm_chunk(None, model=model)
    usage_chunk["usage"] = {
        "prompt_tokens": usage[0],
        "total_tokens": sum(usage),
        "completion_tokens": usage[1],
        "prompt_tokens_details": None,
    }
    chunks.append(usage_chunk)
    return openai_sse(chunks)


def _llamacpp_chunk(choices: list[dict[str, Any]], *, model: str) -> dict[str, Any]:
    return {
        "choices": choices,
        "created": CREATED,
        "id": "chatcmpl-q8tC3pZ1mK7vX2bN9wE4rT6yU0iO5aS",
        "model": model,
        "system_fingerprint": "b6097-9515c613",
        "object": "chat.completion.chunk",
    }


def llamacpp_tool_calls(
    calls: Sequence[WholeCall],
    *,
    model: str = "gpt-3.5-turbo",
    usage: tuple[int, int] = (1085, 47),
    cached_tokens: int = 1024,
) -> SSEResponse:
    """llama.cpp's llama-server: a first chunk with the role and null content, each
    tool call whole in the chunk that opens it (id, type, name and arguments), the
    finish reason "tool_calls" with an empty delta, then usage (with the prompt
    tokens it had cached) and its own ``timings`` in a last chunk with no choices."""
    chunks = [
        _llamacpp_chunk(
            [
                {
                    "finish_reason": None,
                    "index": 0,
                    "delta": {"role": "assistant", "content": None},
                }
            ],
            model=model,
        )
    ]
    for index, call in enumerate(calls):
        delta = {"tool_calls": [call.fragment(index)]}
        chunks.append(
            _llamacpp_chunk([{"finish_reason": None, "index": 0, "delta": delta}], model=model)
        )
    chunks.append(
        _llamacpp_chunk([{"finish_reason": "tool_calls", "index": 0, "delta": {}}], model=model)
    )
    last = _llamacpp_chunk([], model=model)
    last["usage"] = {
        "completion_tokens": usage[1],
        "prompt_tokens": usage[0],
        "total_tokens": sum(usage),
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    last["timings"] = {
        "cache_n": cached_tokens,
        "prompt_n": usage[0] - cached_tokens,
        "prompt_ms": 203.378,
        "predicted_n": usage[1],
        "predicted_ms": 933.63,
    }
    chunks.append(last)
    return openai_sse(chunks)


def openai_stream_error(
    error: dict[str, Any], *, pieces: Sequence[str] = ("Partial",)
) -> SSEResponse:
    """Some text, then an error object inside the stream (after the 200), as
    OpenAI, Ollama, vLLM and llama.cpp all do when generation fails midway."""
    chunks = openai_text_chunks(pieces, usage=None)[: 1 + len(pieces)]
    chunks.append({"error": error})
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
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JsonResponse:
    """An error answer as OpenAI sends it, for both of its APIs; ``param`` names the
    request parameter it is about."""
    return JsonResponse(
        status,
        {"error": {"message": message, "type": type, "param": param, "code": code}},
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


@dataclass
class ThinkingBlock:
    """Extended thinking: ``thinking_delta`` pieces, then one ``signature_delta``."""

    pieces: Sequence[str]
    signature: str


@dataclass
class RedactedThinkingBlock:
    """Thinking the API withheld: opaque data, complete in ``content_block_start``."""

    data: str


AnthropicBlock = TextBlock | StreamedCall | ThinkingBlock | RedactedThinkingBlock


def _anthropic_block(block: AnthropicBlock) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A block's ``content_block_start`` payload and its deltas."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": ""}, [
            {"type": "text_delta", "text": piece} for piece in block.pieces
        ]
    if isinstance(block, ThinkingBlock):
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in block.pieces]
        deltas.append({"type": "signature_delta", "signature": block.signature})
        return {"type": "thinking", "thinking": "", "signature": ""}, deltas
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}, []
    deltas = [{"type": "input_json_delta", "partial_json": ""}]
    deltas += [{"type": "input_json_delta", "partial_json": f} for f in block.fragments]
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}, deltas


def anthropic_events(
    blocks: Sequence[AnthropicBlock],
    *,
    model: str = "claude-fake-4-5-20250929",
    input_tokens: int = 21,
    output_tokens: int = 9,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    stop_reason: str | None = None,
    final_usage: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One message's events, as the Messages API streams them. ``final_usage`` is
    what ``message_delta`` counts (cumulative); by default the output tokens only,
    as older servers send; newer ones repeat the prompt's counts there too."""
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
                    "cache_creation_input_tokens": cache_write_tokens,
                    "cache_read_input_tokens": cache_read_tokens,
                    "output_tokens": 1,
                    "service_tier": "standard",
                },
            },
        }
    ]
    for index, block in enumerate(blocks):
        start, deltas = _anthropic_block(block)
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
            "usage": final_usage or {"output_tokens": output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


def anthropic_message(blocks: Sequence[AnthropicBlock], **options: Any) -> SSEResponse:
    return anthropic_sse(anthropic_events(blocks, **options))


def anthropic_cut_before_stop(blocks: Sequence[AnthropicBlock], **options: Any) -> SSEResponse:
    """A message whose stream ends cleanly but early: after ``message_delta``, with
    no ``message_stop`` (a proxy that gave up, a server restarting)."""
    return anthropic_sse(anthropic_events(blocks, **options)[:-1])


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


# ---------------------------------------------------------------------------
# OpenAI Responses

RESPONSES_MODEL = "gpt-fake-5-2025-08-07"


@dataclass
class ResponsesText:
    """A message item: one ``output_text`` part, streamed in pieces."""

    pieces: Sequence[str]


@dataclass
class ResponsesReasoning:
    """A reasoning item: summary parts streamed in pieces, and the encrypted
    reasoning, which only ``response.output_item.done`` carries whole (the added
    item has the start of it, as the API sends it). ``text`` is the reasoning itself,
    as servers that show it stream it (``response.reasoning_text.delta``)."""

    id: str
    summary: Sequence[Sequence[str]] = ()
    encrypted_content: str | None = None
    text: Sequence[str] = ()


ResponsesItem = ResponsesText | ResponsesReasoning | StreamedCall


def responses_usage(
    input_tokens: int, output_tokens: int, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """The Responses API's usage: ``input_tokens`` counts the cached ones too, and
    ``output_tokens`` the reasoning ones. OpenAI sends no cache writes here."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def responses_object(
    *,
    status: str,
    model: str = RESPONSES_MODEL,
    output: Sequence[dict[str, Any]] = (),
    usage: dict[str, Any] | None = None,
    incomplete_reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``response`` object, with the fields OpenAI fills in for a streamed,
    unstored request."""
    return {
        "id": "resp_fake0001",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": model,
        "output": list(output),
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": "medium", "summary": None},
        "safety_identifier": None,
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def _obfuscation(delta: str) -> str:
    # OpenAI pads every delta event with random characters so that its size says
    # nothing about the token; clients ignore the field.
    return "Qx7" * (1 + (16 - len(delta) % 16) // 3)


def _responses_text_events(
    index: int, item: ResponsesText, status: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    item_id = f"msg_fake{index:04d}"
    text = "".join(item.pieces)
    where = {"item_id": item_id, "output_index": index, "content_index": 0}
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    done = {
        "id": item_id,
        "type": "message",
        "status": status,
        "content": [{**part, "text": text}],
        "role": "assistant",
    }
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**done, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **where, "part": part},
    ]
    events += [
        {
            "type": "response.output_text.delta",
            **where,
            "delta": piece,
            "logprobs": [],
            "obfuscation": _obfuscation(piece),
        }
        for piece in item.pieces
    ]
    events += [
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]
    return events, done


def _responses_reasoning_events(
    index: int, item: ResponsesReasoning
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    where = {"item_id": item.id, "output_index": index}
    done: dict[str, Any] = {"id": item.id, "type": "reasoning"}
    added = dict(done)
    if item.encrypted_content is not None:
        done["encrypted_content"] = item.encrypted_content
        added["encrypted_content"] = item.encrypted_content[: len(item.encrypted_content) // 2]
    summaries = ["".join(pieces) for pieces in item.summary]
    done["summary"] = [{"type": "summary_text", "text": text} for text in summaries]
    added["summary"] = []
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": index, "item": added}
    ]
    for number, pieces in enumerate(item.summary):
        at = {**where, "summary_index": number}
        empty = {"type": "summary_text", "text": ""}
        events.append({"type": "response.reasoning_summary_part.added", **at, "part": empty})
        events += [
            {
                "type": "response.reasoning_summary_text.delta",
                **at,
                "delta": piece,
                "obfuscation": _obfuscation(piece),
            }
            for piece in pieces
        ]
        whole = summaries[number]
        events += [
            {"type": "response.reasoning_summary_text.done", **at, "text": whole},
            {
                "type": "response.reasoning_summary_part.done",
                **at,
                "part": {"type": "summary_text", "text": whole},
            },
        ]
    if item.text:
        text = "".join(item.text)
        done["content"] = [{"type": "reasoning_text", "text": text}]
        at = {**where, "content_index": 0}
        events += [
            {"type": "response.reasoning_text.delta", **at, "delta": piece} for piece in item.text
        ]
        events.append({"type": "response.reasoning_text.done", **at, "text": text})
    events.append({"type": "response.output_item.done", "output_index": index, "item": done})
    return events, done


def _responses_call_events(
    index: int, call: StreamedCall, status: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    item_id = f"fc_fake{index:04d}"
    arguments = "".join(call.fragments)
    where = {"item_id": item_id, "output_index": index}
    done = {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call.id,
        "name": call.name,
    }
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**done, "status": "in_progress", "arguments": ""},
        }
    ]
    events += [
        {
            "type": "response.function_call_arguments.delta",
            **where,
            "delta": fragment,
            "obfuscation": _obfuscation(fragment),
        }
        for fragment in call.fragments
    ]
    events += [
        {"type": "response.function_call_arguments.done", **where, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]
    return events, done


def responses_events(
    items: Sequence[ResponsesItem],
    *,
    model: str = RESPONSES_MODEL,
    usage: dict[str, Any] | None = None,
    incomplete_reason: str | None = None,
) -> list[dict[str, Any]]:
    """One response's events, as the Responses API streams them (without their
    ``sequence_number``, which :func:`responses_sse` adds): ``response.created`` and
    ``response.in_progress``, each output item opened, filled and done, then
    ``response.completed`` with the whole response, or ``response.incomplete`` when
    ``incomplete_reason`` says why it was cut off (its last item is then
    ``incomplete``)."""
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": responses_object(status="in_progress", model=model),
        },
        {
            "type": "response.in_progress",
            "response": responses_object(status="in_progress", model=model),
        },
    ]
    output = []
    for index, item in enumerate(items):
        last = index == len(items) - 1
        status = "incomplete" if incomplete_reason and last else "completed"
        if isinstance(item, ResponsesText):
            item_events, done = _responses_text_events(index, item, status)
        elif isinstance(item, ResponsesReasoning):
            item_events, done = _responses_reasoning_events(index, item)
        else:
            item_events, done = _responses_call_events(index, item, status)
        events += item_events
        output.append(done)
    final = responses_object(
        status="incomplete" if incomplete_reason else "completed",
        model=model,
        output=output,
        usage=usage or responses_usage(19, 7),
        incomplete_reason=incomplete_reason,
    )
    events.append(
        {
            "type": "response.incomplete" if incomplete_reason else "response.completed",
            "response": final,
        }
    )
    return events


def responses_sse(events: Iterable[dict[str, Any]], **options: Any) -> SSEResponse:
    """Events as ``event:``/``data:`` frames, numbered in order by ``sequence_number``."""
    frames = []
    for number, event in enumerate(events):
        data = {"type": event["type"], "sequence_number": number}
        data.update((key, value) for key, value in event.items() if key != "type")
        frames.append(f"event: {event['type']}\ndata: {json.dumps(data)}\n\n")
    return SSEResponse(frames, **options)


def responses_stream(items: Sequence[ResponsesItem], **options: Any) -> SSEResponse:
    return responses_sse(responses_events(items, **options))


def responses_cut_before_end(items: Sequence[ResponsesItem], **options: Any) -> SSEResponse:
    """A response whose stream ends cleanly but early: every item done, and no
    ``response.completed`` (a proxy that gave up, a server restarting)."""
    return responses_sse(responses_events(items, **options)[:-1])


def responses_failed(
    code: str, message: str, *, items: Sequence[ResponsesItem] = ()
) -> SSEResponse:
    """A response that fails after it began: ``response.failed`` with the error."""
    events = responses_events(items)[:-1]
    events.append(
        {
            "type": "response.failed",
            "response": responses_object(
                status="failed",
                output=[event["item"] for event in events if event["type"].endswith("item.done")],
                error={"code": code, "message": message},
            ),
        }
    )
    return responses_sse(events)


def responses_error_event(
    code: str,
    message: str,
    *,
    items: Sequence[ResponsesItem] = (ResponsesText(["Partial"]),),
    nested: bool = False,
) -> SSEResponse:
    """Some output, then an ``error`` event. By default in the documented shape
    (``code``, ``message`` and ``param`` beside ``type``); ``nested`` puts them under
    ``error``, as the API has also been seen to send them."""
    events = responses_events(items)[:-1]
    if nested:
        error = {"type": code, "code": code, "message": message, "param": None}
        events.append({"type": "error", "error": error})
    else:
        events.append({"type": "error", "code": code, "message": message, "param": None})
    return responses_sse(events)
