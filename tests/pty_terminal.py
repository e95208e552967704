"""A command in a pseudo-terminal, as a person's shell runs it.

The terminal is the command's controlling terminal, so Ctrl-C typed there is a
SIGINT from the terminal's line discipline and Ctrl-D ends its input, exactly as at
a keyboard. What it prints is read as it comes, each read kept with its time, with
colours taken out and line ends as ``\\n``.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import re
import select
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

# How long after the last thing seen a key is pressed.
PAUSE_SECONDS = 0.2
_COLOUR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _take_terminal() -> None:
    # In the child, before the command starts: a session of its own, whose
    # controlling terminal is the pseudo-terminal on its standard input.
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``args`` running in a pseudo-terminal of their own."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        self.process = subprocess.Popen(  # noqa: S603 (our own interpreter and command)
            list(args),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=env,
            preexec_fn=_take_terminal,
            close_fds=True,
        )
        os.close(slave)
        self._master = master
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # Every read: (time.monotonic(), the text it brought).
        self.reads: list[tuple[float, str]] = []
        self._seen = 0
        self._closed = False

    @property
    def text(self) -> str:
        return "".join(chunk for _, chunk in self.reads)

    def _read(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; ``False`` once the terminal is
        closed (the command ended)."""
        if self._closed:
            return False
        ready, _, _ = select.select([self._master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: no process has the terminal open any more
            data = b""
        if not data:
            self._closed = True
            return False
        chunk = _COLOUR.sub("", self._decoder.decode(data)).replace("\r\n", "\n")
        self.reads.append((time.monotonic(), chunk))
        return True

    def expect(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """Wait for ``pattern`` (a regular expression) in what was printed after
        the last match; the match."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = compiled.search(self.text, self._seen)
            if found:
                self._seen = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0 or self._closed:
                pytest.fail(f"{pattern!r} never came. The terminal showed:\n{self.text}")
            self._read(min(left, 0.5))

    def type(self, text: str) -> None:
        os.write(self._master, text.encode())

    def ctrl_c(self) -> None:
        # A moment after what the test saw, as a person's key comes: Python, like
        # any program, can miss a SIGINT that lands within microseconds of a
        # prompt being written, between the write and the read.
        time.sleep(PAUSE_SECONDS)
        os.write(self._master, b"\x03")

    def ctrl_d(self) -> None:
        time.sleep(PAUSE_SECONDS)
        os.write(self._master, b"\x04")

    def wait(self, timeout: float = 30) -> int:
        """Wait for the command to end, reading what it prints; its exit status."""
        deadline = time.monotonic() + timeout
        while self._read(0.2) and time.monotonic() < deadline:
            pass
        try:
            return self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"The command did not end. The terminal showed:\n{self.text}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        os.close(self._master)
