"""Support for the multi-process live-updates test: a paced agent and a WebSocket client.

The ``paced`` agent calls its ``gate`` tool three times, one call per turn, and
then streams a final answer word by word. Call ``n`` blocks until the file
``gate-<n>`` appears in ``GOAAI_LIVE_GATE_DIR``, so the test decides when the run
moves on: it can disconnect a client at a known point of the run and have events
written while that client is away or catching up.

The client speaks just enough of RFC 6455 over asyncio streams for the test (text
frames, fragments, ping, close), so the test needs no WebSocket library beyond
what goaai itself depends on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import struct
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from goaai.runtime.agents import Agent
from goaai.runtime.models.base import DeltaCallback, ModelRequest
from goaai.runtime.policy import Policy
from goaai.runtime.tools import TOOLSETS, tool
from goaai.runtime.types import ModelReply, ToolCallRequest, Usage

GATES = 3
FINAL_ANSWER = "All three gates opened, one after the other, in order."


@tool(timeout_seconds=None)
def gate(n: int) -> dict[str, Any]:
    """Wait until the test opens gate ``n``."""
    opened = Path(os.environ["GOAAI_LIVE_GATE_DIR"]) / f"gate-{n}"
    # Bounded, so that a test that dies without opening the gate cannot leave a
    # worker thread blocked for ever.
    deadline = time.monotonic() + 60
    while not opened.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {n} was never opened")
        time.sleep(0.02)
    return {"gate": n, "open": True}


TOOLSETS["livetest"] = {"gate": replace(gate, toolset="livetest")}


class PacedModel:
    """Opens gates 1, 2 and 3 one turn after the other, then streams its answer."""

    name = "paced"

    def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelReply:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done < GATES:
            call = ToolCallRequest(id=f"gate-{done + 1}", name="gate", arguments={"n": done + 1})
            return ModelReply(tool_calls=(call,), usage=Usage(10, 5), model=self.name)
        if on_delta is not None:
            for word in FINAL_ANSWER.split(" "):
                on_delta(word if word.endswith(".") else f"{word} ")
        return ModelReply(text=FINAL_ANSWER, usage=Usage(10, 5), model=self.name)


PACED_AGENT = Agent(
    id="paced",
    description="Opens three gates the test controls, then answers.",
    model="python:tests.integration.live_support.PacedModel",
    toolsets=("livetest",),
    policy=Policy(time_budget_seconds=120),
)


class Closed(Exception):
    def __init__(self, code: int | None) -> None:
        super().__init__(f"WebSocket closed with code {code}")
        self.code = code


_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TEXT, _CLOSE, _PING, _PONG = 0x1, 0x8, 0x9, 0xA


class WebSocket:
    """A minimal client WebSocket: JSON text frames in and out."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, host: str, port: int, path: str, timeout: float = 10) -> WebSocket:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)).decode("latin1")
        status, *lines = head.split("\r\n")
        if " 101 " not in status:
            writer.close()
            raise ConnectionError(f"WebSocket handshake refused: {status}")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
        expected = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()  # noqa: S324
        if headers.get("sec-websocket-accept") != expected:
            writer.close()
            raise ConnectionError("WebSocket handshake: wrong Sec-WebSocket-Accept")
        return cls(reader, writer)

    async def _write(self, opcode: int, payload: bytes) -> None:
        # Client frames are masked (RFC 6455 5.3).
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(header + mask + masked)
        await self.writer.drain()

    async def send(self, frame: dict[str, Any]) -> None:
        await self._write(_TEXT, json.dumps(frame).encode())

    async def recv(self) -> dict[str, Any]:
        """The next JSON text frame; raises :class:`Closed` when the server closes."""
        message = b""
        while True:
            try:
                first, second = await self.reader.readexactly(2)
                length = second & 0x7F
                if length == 126:
                    (length,) = struct.unpack("!H", await self.reader.readexactly(2))
                elif length == 127:
                    (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
                mask = await self.reader.readexactly(4) if second & 0x80 else b""
                payload = await self.reader.readexactly(length)
            except (asyncio.IncompleteReadError, ConnectionError):
                raise Closed(None) from None
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = first & 0x0F
            if opcode == _CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                await self.close()
                raise Closed(code)
            if opcode == _PING:
                await self._write(_PONG, payload)
                continue
            if opcode == _PONG:
                continue
            message += payload
            if first & 0x80:
                return json.loads(message)

    async def close(self) -> None:
        if self.writer.is_closing():
            return
        with contextlib.suppress(ConnectionError):
            await self._write(_CLOSE, struct.pack("!H", 1000))
        self.writer.close()
