"""nginx as goaai's deployment configures it, run for real in front of daphne.

Bodies over the limits must be refused before anything stores them: a declared
length over the limit at once, a chunked body as soon as it crosses it, and in
neither case may the ASGI server see the request or nginx's body folder hold it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT, Nginx, Upstream

API_LIMIT = 256 * 1024
PAGE_LIMIT = 10 * 1024 * 1024
GIGABYTE = 1024**3


def read_response(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length: status, headers, body."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before the headers: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def request_head(method: str, path: str, port: int, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers, "", ""]
    return "\r\n".join(lines).encode()


@contextmanager
def watching_body_temp(front: Nginx) -> Iterator[list[int]]:
    """The largest amount of request body nginx held on disk while the block ran."""
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], front.body_temp_bytes())
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()


def send_chunked(sock: socket.socket, total: int, chunk: int = 64 * 1024) -> None:
    """Send ``total`` bytes as chunks, stopping when nginx closes the connection."""
    sent = 0
    payload = b"x" * chunk
    try:
        while sent < total:
            piece = payload[: min(chunk, total - sent)]
            sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            sent += len(piece)
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass


@pytest.fixture
def upstream(echo_upstream: Upstream) -> Upstream:
    echo_upstream.forget()
    return echo_upstream


def open_file_bytes(pid: int) -> int:
    """The largest regular file process ``pid`` holds open (deleted ones too)."""
    largest = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            info = fd.stat()
        except (FileNotFoundError, PermissionError):
            continue
        if stat.S_ISREG(info.st_mode):
            largest = max(largest, info.st_size)
    return largest


def test_daphne_alone_stores_a_body_before_goaai_can_refuse_it(upstream: Upstream) -> None:
    # Why nginx is in front: daphne writes the body to a temporary file, all of it,
    # before the application (and goaai's own limit) sees the request.
    with socket.create_connection(("127.0.0.1", upstream.port)) as sock:
        sock.sendall(
            request_head("POST", "/api/v1/sessions/", upstream.port, f"Content-Length: {GIGABYTE}")
        )
        sock.sendall(b"z" * 4 * 1024 * 1024)
        # Megabytes on disk (part may still be in socket and file buffers), far past
        # any limit goaai sets for the API, and the application has seen nothing.
        on_disk = 1024 * 1024
        deadline = time.monotonic() + 10
        while open_file_bytes(upstream.pid) < on_disk and time.monotonic() < deadline:
            time.sleep(0.02)
        assert open_file_bytes(upstream.pid) >= on_disk
    assert upstream.seen() == []


def test_the_limits_are_goaais_own_settings(tmp_path: Path) -> None:
    env = {**os.environ, "GOAAI_MAX_BODY_BYTES": "5000", "GOAAI_API_MAX_BODY_BYTES": "1000"}
    rendered = subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "deploy" / "nginx.py"), "--servers", "3"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "client_max_body_size 5000;" in rendered
    assert "client_max_body_size 1000;" in rendered
    assert "client_max_body_size 10485760;" not in rendered
    servers = [line.strip() for line in rendered.splitlines() if "max_fails" in line]
    assert servers == [
        f"server 127.0.0.1:{8100 + n} max_fails=1 fail_timeout=5s;" for n in (1, 2, 3)
    ]


def test_v1_requests_wait_longer_than_goaai_waits_for_a_run(tmp_path: Path) -> None:
    # An nginx 504 before goaai's answer would make OpenAI's SDKs send it again.
    env = {**os.environ, "GOAAI_RUN_WAIT_SECONDS": "420"}
    rendered = subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "deploy" / "nginx.py")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    block = rendered.split("location /v1/ {")[1].split("}")[0]
    assert "proxy_read_timeout 480s;" in block
    assert "proxy_buffering off;" in block
    assert "client_max_body_size 262144;" in block


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("/api/v1/sessions/", API_LIMIT),
        ("/mcp", API_LIMIT),
        ("/v1/chat/completions", API_LIMIT),
        ("/accounts/login/", PAGE_LIMIT),
    ],
)
def test_a_declared_gigabyte_is_refused_at_once_and_stored_nowhere(
    front: Nginx, upstream: Upstream, path: str, limit: int
) -> None:
    with (
        watching_body_temp(front) as peak,
        socket.create_connection(("127.0.0.1", front.port)) as sock,
    ):
        started = time.monotonic()
        sock.sendall(
            request_head(
                "POST",
                path,
                front.port,
                f"Content-Length: {GIGABYTE}",
                "Content-Type: application/json",
            )
        )
        sock.sendall(b"{" + b" " * 65536)  # the start of the body, as a client would send it
        status, headers, body = read_response(sock, timeout=5)
        elapsed = time.monotonic() - started
    assert status == 413
    assert elapsed < 2
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["errors"][0]
    assert error["code"] == "payload_too_large"
    assert str(limit) in error["detail"]
    assert peak[0] == 0
    time.sleep(0.2)
    assert upstream.seen() == []


def test_a_chunked_body_over_the_api_limit_is_cut_off_and_never_forwarded(
    front: Nginx, upstream: Upstream
) -> None:
    with (
        watching_body_temp(front) as peak,
        socket.create_connection(("127.0.0.1", front.port)) as sock,
    ):
        sock.sendall(
            request_head(
                "POST",
                "/api/v1/sessions/",
                front.port,
                "Transfer-Encoding: chunked",
                "Content-Type: application/json",
            )
        )
        send_chunked(sock, API_LIMIT + 64 * 1024)
        status, _, body = read_response(sock)
    assert status == 413
    assert json.loads(body)["errors"][0]["code"] == "payload_too_large"
    # API bodies are held in memory up to the limit: none of it touched the disk.
    assert peak[0] == 0
    time.sleep(0.2)
    assert upstream.seen() == []


def test_a_chunked_body_over_the_page_limit_never_reaches_the_server(
    front: Nginx, upstream: Upstream
) -> None:
    with (
        watching_body_temp(front) as peak,
        socket.create_connection(("127.0.0.1", front.port)) as sock,
    ):
        sock.sendall(
            request_head("POST", "/accounts/login/", front.port, "Transfer-Encoding: chunked")
        )
        send_chunked(sock, PAGE_LIMIT + 256 * 1024)
        status, _, _ = read_response(sock)
    assert status == 413
    # Page bodies past 1 MiB are buffered on disk while they arrive, never past the limit.
    assert peak[0] <= PAGE_LIMIT
    time.sleep(0.2)
    assert upstream.seen() == []
    assert front.body_temp_bytes() == 0


def test_bodies_within_the_limits_reach_the_server_whole(front: Nginx, upstream: Upstream) -> None:
    with socket.create_connection(("127.0.0.1", front.port)) as sock:
        sock.sendall(
            request_head("POST", "/api/v1/sessions/", front.port, f"Content-Length: {API_LIMIT}")
            + b"y" * API_LIMIT
        )
        assert read_response(sock)[0] == 200
    with socket.create_connection(("127.0.0.1", front.port)) as sock:
        sock.sendall(
            request_head("POST", "/api/v1/sessions/", front.port, "Transfer-Encoding: chunked")
        )
        send_chunked(sock, API_LIMIT - 1000)
        assert read_response(sock)[0] == 200
    assert [(r["path"], r["bytes"]) for r in upstream.seen()] == [
        ("/api/v1/sessions/", API_LIMIT),
        ("/api/v1/sessions/", API_LIMIT - 1000),
    ]


def test_the_body_folder_check_sees_what_nginx_buffers(front: Nginx, upstream: Upstream) -> None:
    # The control for the checks above: a 2 MiB page body (over the 1 MiB memory
    # buffer, under the limit) is held on disk while the slow server answers.
    size = 2 * 1024 * 1024
    with (
        watching_body_temp(front) as peak,
        socket.create_connection(("127.0.0.1", front.port)) as sock,
    ):
        sock.sendall(
            request_head("POST", "/slow/upload/", front.port, "Transfer-Encoding: chunked")
        )
        send_chunked(sock, size)
        assert read_response(sock)[0] == 200
    assert 0 < peak[0] <= size
    assert upstream.seen()[0]["bytes"] == size
    assert front.body_temp_bytes() == 0


def test_nginx_sets_the_proxy_headers_and_drops_a_forged_client_address(
    front: Nginx, upstream: Upstream
) -> None:
    with socket.create_connection(("127.0.0.1", front.port)) as sock:
        sock.sendall(
            request_head(
                "GET",
                "/healthz",
                front.port,
                "X-Forwarded-For: 10.9.9.9",
                "X-Forwarded-Proto: https",
            )
        )
        assert read_response(sock)[0] == 200
    (seen,) = upstream.seen()
    assert seen["x-forwarded-for"] == "127.0.0.1"
    assert seen["x-forwarded-proto"] == "http"
    assert seen["host"] == f"127.0.0.1:{front.port}"


def first_chunk_delay(front: Nginx, path: str) -> float:
    with socket.create_connection(("127.0.0.1", front.port)) as sock:
        sock.settimeout(10)
        started = time.monotonic()
        sock.sendall(request_head("GET", path, front.port))
        data = b""
        while b"data: first" not in data:
            data += sock.recv(65536)
        return time.monotonic() - started


def test_event_streams_are_delivered_as_written(front: Nginx, upstream: Upstream) -> None:
    session = "0b7a8e4e-8d8e-4a5e-9f3e-1d2c3b4a5f60"
    assert first_chunk_delay(front, f"/api/v1/sessions/{session}/events/stream/") < 1
    assert first_chunk_delay(front, "/api/v1/sessions/stream/") < 1
    assert first_chunk_delay(front, "/mcp") < 1
    assert first_chunk_delay(front, "/v1/chat/completions") < 1


def proxy_temp_peak(front: Nginx, path: str) -> int:
    """How much of a large answer nginx stored for a client that does not read."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", front.port))
        sock.sendall(request_head("GET", f"{path}?large", front.port))
        peak = 0
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            peak = max(peak, front.held_bytes("proxy_temp"))
            time.sleep(0.01)
    return peak


def test_event_streams_are_not_buffered_for_slow_clients(front: Nginx, upstream: Upstream) -> None:
    # Unbuffered, a stream costs nginx no disk, and goaai sees the client's pace.
    assert proxy_temp_peak(front, "/api/v1/sessions/stream/") == 0
    assert proxy_temp_peak(front, "/mcp") == 0
    assert proxy_temp_peak(front, "/v1/responses") == 0
    # The control: any other answer nginx reads ahead into its temporary files.
    assert proxy_temp_peak(front, "/api/v1/other/stream/") > 0


def websocket_frame(text: str) -> bytes:
    payload = text.encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BB", 0x81, 0x80 | len(payload)) + mask + masked


def test_a_websocket_upgrade_passes_through(front: Nginx, upstream: Upstream) -> None:
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection(("127.0.0.1", front.port)) as sock:
        sock.settimeout(10)
        sock.sendall(
            request_head(
                "GET",
                "/ws/sessions/",
                front.port,
                "Upgrade: websocket",
                "Connection: Upgrade",
                f"Sec-WebSocket-Key: {key}",
                "Sec-WebSocket-Version: 13",
            )
        )
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(4096)
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        sock.sendall(websocket_frame("hello through nginx"))
        while len(rest) < 2 or len(rest) < 2 + rest[1]:
            rest += sock.recv(4096)
    assert rest[0] == 0x81  # a final text frame
    assert rest[2 : 2 + rest[1]] == b"hello through nginx"
    assert upstream.seen() == [{"websocket": "/ws/sessions/"}]
