"""Ctrl-C as a terminal chat reads it.

At a prompt, Ctrl-C interrupts the prompt (``KeyboardInterrupt``, as Python's own
handler does). While a run is followed it is only counted: the chat looks at the
count between the steps it prints, so that a stop never lands in the middle of a
database write or of a line being printed.

The kernel hands a terminal's SIGINT to any thread of the process that does not
block it, and a signal that lands in another thread does not wake the main thread
from reading the terminal. So the main thread blocks SIGINT except while it waits
(for the user's line, or for news of the run), and every thread the command starts
(the live feed's, the executor's workers) inherits the block: the signal stays
pending until the main thread waits again, and reaches it there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

_SIGINT = {signal.SIGINT}


class Interrupts:
    """SIGINT while the chat runs: a context manager that installs the handler and
    the block (in the main thread, the only one Python runs handlers in) and puts
    back what was there before."""

    def __init__(self) -> None:
        self._count = 0
        self._prompting = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
            self._installed = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._installed:
            self._installed = False
            self._prompting = False
            # A Ctrl-C still pending is counted, not raised, once it is unblocked.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._prompting:
            raise KeyboardInterrupt
        self._count += 1

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        """While the block waits, Ctrl-C reaches this thread (and is counted)."""
        if not self._installed:
            yield
            return
        try:
            # A Ctrl-C pending since the block began is handled here.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)

    @contextlib.contextmanager
    def prompting(self) -> Iterator[None]:
        """While the block reads the user's answer, Ctrl-C interrupts it; one that
        came just before is taken as interrupting it too."""
        if self.take():
            raise KeyboardInterrupt
        self._prompting = True
        try:
            with self.listening():
                yield
        finally:
            self._prompting = False

    def take(self) -> int:
        """How many times Ctrl-C was pressed since the last call."""
        count, self._count = self._count, 0
        return count


def end_at_once_on_interrupt() -> None:
    """From now on, Ctrl-C ends the process at once (exit status 130, as a shell
    reports SIGINT), without waiting for its worker threads and without the
    traceback Python would print while it waits for them."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _end_now)


def _end_now(signum: int, frame: FrameType | None) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signal.SIGINT)
