"""Live frames: what a session's live subscribers are sent, and how often.

Pieces of streamed text are joined per frame interval, longer the more subscribers a
group has (:class:`DeltaCoalescer`, :func:`frame_seconds`), and each message is
encoded once for every subscriber (:func:`encode`). Used where messages are
published (sessions_app.publisher) and where a Redis layer hands them to one
server's subscribers (goaai.channel_layers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

# Streamed pieces of one turn published within one frame of each other go to live
# subscribers as one message: the first at once, the rest together when the frame
# ends. Every message costs the server a WebSocket frame per subscriber (most of
# it in the server's writing to the socket), so a session followed by many keeps
# to a budget of frames: a frame is FRAME_SECONDS long for each SUBSCRIBERS_PER_FRAME
# subscribers (50 ms up to 100 of them, 250 ms for 500). Events are never held:
# an event flushes the text held before it, in order.
FRAME_SECONDS = 0.05
SUBSCRIBERS_PER_FRAME = 100


def frame_seconds(subscribers: int) -> float:
    """How long a frame of streamed text lasts for a group of ``subscribers``."""
    return FRAME_SECONDS * max(1, math.ceil(subscribers / SUBSCRIBERS_PER_FRAME))


def encode(value: Any) -> str:
    """JSON as live subscribers are sent it: compact, once for all of them."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def is_delta(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "run.delta"


def _follows(held: dict[str, Any], piece: dict[str, Any]) -> bool:
    """Whether ``piece`` continues ``held``'s text, in the same turn."""
    return (
        held["turn"] == piece["turn"]
        and isinstance(held.get("offset"), int)
        and piece.get("offset") == held["offset"] + len(held["text"])
    )


class DeltaCoalescer:
    """Joins the pieces of streamed text published to a group within one frame
    interval: the first piece is sent at once and opens the interval, those that
    follow during it are held and joined, and sent as one when it ends (:meth:`due`)
    or before anything else sent to the group, so that the order never changes.

    Not thread-safe: each publishing path keeps its own, on one thread.
    """

    def __init__(self, interval: Callable[[str], float] = lambda group: FRAME_SECONDS) -> None:
        # How long a group's interval lasts (see frame_seconds).
        self.interval = interval
        # group -> (when its interval ends, the piece held for then)
        self._open: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def take(self, group: str, item: Any, now: float) -> tuple[list[Any], float | None]:
        """What to send to ``group`` now, in order, for ``item``, and how long the
        interval that opened lasts, if one did (:meth:`due` is to be called when
        it ends)."""
        end, held = self._open.get(group, (None, None))
        if not is_delta(item):
            if held is None:
                return [item], None
            self._open[group] = (end, None)  # type: ignore[assignment]
            return [held, item], None
        if end is None or end <= now:
            interval = self.interval(group)
            self._open[group] = (now + interval, None)
            return ([held] if held is not None else []) + [item], interval
        if held is not None and _follows(held, item):
            held["text"] += item["text"]
            return [], None
        self._open[group] = (end, dict(item))
        return ([held] if held is not None else []), None

    def due(self, now: float) -> list[tuple[str, dict[str, Any], float]]:
        """The held pieces whose interval has ended, to send now, each with the
        interval its group opens again (the text goes on streaming). A group that
        held nothing is forgotten."""
        sent: list[tuple[str, dict[str, Any], float]] = []
        for group, (end, held) in list(self._open.items()):
            if end > now:
                continue
            if held is None:
                del self._open[group]
            else:
                interval = self.interval(group)
                sent.append((group, held, interval))
                self._open[group] = (now + interval, None)
        return sent

    def holds(self, group: str) -> bool:
        """Whether ``group`` has an interval open."""
        return group in self._open

    def next_due(self) -> float | None:
        """When the next interval ends, if one is open."""
        return min((end for end, _ in self._open.values()), default=None)

    def flush(self) -> list[tuple[str, dict[str, Any]]]:
        """Every held piece, to send now (the intervals close)."""
        held = [(group, piece) for group, (_, piece) in self._open.items() if piece is not None]
        self._open.clear()
        return held


def with_delta_frame(piece: dict[str, Any]) -> dict[str, Any]:
    """A ``run.delta`` message with the frame its subscribers pass on (``encoded``),
    encoded once for all of them."""
    frame = {"type": "delta", **{k: piece[k] for k in ("run", "turn", "offset", "text")}}
    return {**piece, "encoded": encode(frame)}
