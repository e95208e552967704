"""The stitcher of streamed text: each turn's text reaches a subscriber whole, in
order and once, from the checkpoint it joined at and the live deltas after it."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest

from goaai.runtime.types import StreamedText
from sessions_app.streams import REREAD_SECONDS, Stitcher

RUN, TURN, OTHER = uuid4(), uuid4(), uuid4()
STORY = "Once upon a time, in a valley full of clocks, there lived a dragon."


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def stitcher(clock) -> Stitcher:
    return Stitcher(clock=clock)


def delta(offset: int, text: str, turn: UUID = TURN, run: UUID = RUN) -> dict[str, Any]:
    """A ``run.delta`` message as the publisher sends it."""
    return {"type": "run.delta", "run": str(run), "turn": str(turn), "offset": offset, "text": text}


def piece(start: int, end: int, turn: UUID = TURN) -> dict[str, Any]:
    return delta(start, STORY[start:end], turn)


def sent(frames: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(frame["offset"], frame["text"]) for frame in frames]


def event(kind: str, turn: UUID = TURN, run: UUID = RUN) -> dict[str, Any]:
    return {"seq": 1, "type": kind, "run": str(run), "data": {"turn": str(turn)}}


def test_the_catch_up_sends_each_open_turns_text_from_its_start(stitcher):
    frames = stitcher.caught_up(
        [StreamedText(RUN, TURN, STORY[:10]), StreamedText(RUN, OTHER, "Hello")]
    )

    assert frames == [
        {"type": "delta", "run": str(RUN), "turn": str(TURN), "offset": 0, "text": STORY[:10]},
        {"type": "delta", "run": str(RUN), "turn": str(OTHER), "offset": 0, "text": "Hello"},
    ]


def test_live_pieces_that_follow_on_pass_as_they_are(stitcher):
    stitcher.caught_up([StreamedText(RUN, TURN, STORY[:10])])

    assert sent(stitcher.delta(piece(10, 15))) == [(10, STORY[10:15])]
    assert sent(stitcher.delta(piece(15, 30))) == [(15, STORY[15:30])]


def test_a_piece_already_sent_is_dropped_and_one_that_overlaps_is_trimmed(stitcher):
    # Pieces published after the checkpoint was written and before it was read
    # arrive live too: the subscriber has them already.
    stitcher.caught_up([StreamedText(RUN, TURN, STORY[:20])])

    assert stitcher.delta(piece(5, 12)) == []
    assert stitcher.delta(piece(12, 20)) == []
    assert sent(stitcher.delta(piece(16, 26))) == [(20, STORY[20:26])]
    assert sent(stitcher.delta(piece(26, 30))) == [(26, STORY[26:30])]


def test_a_piece_beyond_a_hole_is_held_until_the_checkpoint_read_again_covers_it(stitcher, clock):
    # Joined at a checkpoint of 10 characters; the pieces up to 25 were published
    # before the subscriber joined the group: a hole.
    stitcher.caught_up([StreamedText(RUN, TURN, STORY[:10])])

    assert stitcher.delta(piece(25, 30)) == []
    assert stitcher.delta(piece(30, 34)) == []
    # Read again too soon: not yet.
    assert not stitcher.wants_checkpoints()
    clock.now += REREAD_SECONDS
    assert stitcher.wants_checkpoints()
    # The checkpoint has not moved yet: still held, and not asked again at once.
    assert stitcher.checkpoints([StreamedText(RUN, TURN, STORY[:10])]) == []
    assert not stitcher.wants_checkpoints()
    assert stitcher.delta(piece(34, 40)) == []
    clock.now += REREAD_SECONDS
    # The next checkpoint (written before piece 34-40 was published) covers it all.
    frames = stitcher.checkpoints([StreamedText(RUN, TURN, STORY[:40])])

    assert sent(frames) == [(10, STORY[10:40])]
    assert not stitcher.wants_checkpoints()
    assert sent(stitcher.delta(piece(40, 45))) == [(40, STORY[40:45])]


def test_held_pieces_after_a_checkpoint_follow_on_in_order(stitcher, clock):
    stitcher.caught_up([])
    assert stitcher.delta(piece(30, 35)) == []
    assert stitcher.delta(piece(20, 30)) == []
    assert stitcher.delta(piece(40, 50)) == []
    clock.now += REREAD_SECONDS

    frames = stitcher.checkpoints([StreamedText(RUN, TURN, STORY[:25])])

    # The checkpoint, then the held pieces that join up with it (trimmed); the one
    # beyond the next hole (35-40) stays held.
    assert sent(frames) == [(0, STORY[:25]), (25, STORY[25:30]), (30, STORY[30:35])]
    assert stitcher.wants_checkpoints() is False  # just read
    assert sent(stitcher.delta(piece(35, 40))) == [(35, STORY[35:40]), (40, STORY[40:50])]


def test_message_completed_ends_the_turns_stream(stitcher, clock):
    stitcher.caught_up([StreamedText(RUN, TURN, STORY[:10])])
    assert stitcher.delta(piece(30, 40)) == []

    stitcher.observe([event("turn.completed"), event("message.completed")])

    # Its text is whole in the event: nothing held, nothing more sent for it.
    clock.now += REREAD_SECONDS
    assert not stitcher.wants_checkpoints()
    assert stitcher.delta(piece(10, 20)) == []
    assert stitcher.caught_up([StreamedText(RUN, TURN, STORY[:20])]) == []


def test_a_catch_up_of_a_turn_that_ended_meanwhile_is_not_sent(stitcher):
    # The checkpoint was read, then the events stored meanwhile were sent, among
    # them the turn's end: the text the checkpoint held is in that event already.
    texts = [StreamedText(RUN, TURN, STORY[:10])]
    stitcher.observe([event("message.completed")])

    assert stitcher.caught_up(texts) == []


def test_a_runs_end_ends_the_streams_of_its_turns(stitcher):
    stitcher.caught_up([StreamedText(RUN, TURN, STORY[:10]), StreamedText(OTHER, OTHER, "Hi")])

    stitcher.observe([event("run.canceled", turn=uuid4())])

    assert stitcher.delta(piece(10, 20)) == []
    assert sent(stitcher.delta(delta(2, " there", OTHER, OTHER))) == [(2, " there")]


def test_a_retried_model_call_streams_its_text_anew(stitcher):
    stitcher.caught_up([StreamedText(RUN, TURN, "The failed attempt said this")])

    stitcher.observe([event("model.retry")])

    assert sent(stitcher.delta(delta(0, "Once "))) == [(0, "Once ")]
    assert sent(stitcher.delta(delta(5, "upon"))) == [(5, "upon")]


def test_a_turn_that_starts_after_the_subscriber_joined_streams_from_its_first_piece(
    stitcher,
):
    stitcher.caught_up([])

    assert sent(stitcher.delta(piece(0, 4))) == [(0, STORY[:4])]
    assert sent(stitcher.delta(piece(4, 9))) == [(4, STORY[4:9])]


def test_a_reread_leaves_turns_it_holds_nothing_of_to_their_deltas(stitcher, clock):
    stitcher.caught_up([])
    assert stitcher.delta(piece(20, 25)) == []
    clock.now += REREAD_SECONDS

    # A turn newly begun shows in the checkpoints before its events reached the
    # subscriber: its own deltas bring it.
    frames = stitcher.checkpoints(
        [StreamedText(RUN, TURN, STORY[:25]), StreamedText(RUN, OTHER, "Hi")]
    )

    assert sent(frames) == [(0, STORY[:25])]
    assert sent(stitcher.delta(delta(0, "Hi", OTHER))) == [(0, "Hi")]


def test_offsets_count_characters_not_bytes(stitcher):
    stitcher.caught_up([StreamedText(RUN, TURN, "Dragons 🐉 ")])

    assert sent(stitcher.delta(delta(8, "🐉 fly"))) == [(10, "fly")]


def test_a_delta_without_an_offset_is_passed_on_as_it_is(stitcher):
    message = {"type": "run.delta", "run": str(RUN), "turn": str(TURN), "text": "Hi"}

    assert stitcher.delta(message) == [
        {"type": "delta", "run": str(RUN), "turn": str(TURN), "text": "Hi"}
    ]
