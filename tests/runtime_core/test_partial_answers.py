"""Partial answers on the in-memory store: what a model streamed is checkpointed
about once a second while it streams, every piece says where it begins, and a reply
that ends early (stopped, failed) keeps what it said and what saying it used.

The clock is the loop's, moved by the fake model as it streams: no test waits.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.context import estimated_usage
from goaai.runtime.errors import ModelError
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import ModelRequest, ModelSettings
from goaai.runtime.models.base import reporting_usage
from goaai.runtime.policy import Policy
from goaai.runtime.types import Message, ModelReply, RunContext, StreamedText, Usage
from goaai.runtime.vocabulary import ErrorKind, EventType, RunStatus, TurnInterruption
from tests.runtime_core.conftest import ALICE, LEASE_SECONDS

E = EventType
# A piece every 0.3 s: checkpoints fall on the 4th, 8th, 12th... piece (1.2 s apart).
PACE = 0.3
WORDS = [f"word{n} " for n in range(1, 15)]
# What the fake provider reports for a reply it finished.
REPORTED = Usage(40, 30)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Streamer:
    """A model that streams ``pieces`` one every :data:`PACE` seconds of the fake
    clock, then answers with them (``usage``) or raises ``failure``; ``reported``
    is what the provider has counted while it streams (none: it counts at the end)."""

    name = "fake-model"

    def __init__(
        self,
        clock: Clock,
        pieces: list[str] | Callable[[int], list[str]],
        *,
        usage: Usage = REPORTED,
        failure: Callable[[int], ModelError | None] | None = None,
        reported: Usage | None = None,
    ) -> None:
        self.clock, self.pieces, self.usage = clock, pieces, usage
        self.failure, self.reported = failure, reported
        self.attempts = 0
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_delta: Any = None) -> ModelReply:
        self.requests.append(request)
        self.attempts += 1
        pieces = self.pieces(self.attempts) if callable(self.pieces) else self.pieces
        with reporting_usage(lambda: self.reported or Usage()):
            for piece in pieces:
                self.clock.now += PACE
                on_delta(piece)
            failure = self.failure(self.attempts) if self.failure else None
            if failure is not None:
                raise failure
        return ModelReply(text="".join(pieces), usage=self.usage, model="fake-1")


class Recorder(InMemoryRunStore):
    """The in-memory store, noting checkpoints and published pieces in the order
    they happen (and what a subscriber joining at each piece would read)."""

    def __init__(self) -> None:
        super().__init__(users={ALICE: "alice"})
        self.log: list[tuple[Any, ...]] = []
        self.watched = uuid.uuid4()  # the session the bench runs in
        self.on_delta: Callable[[RunContext, uuid.UUID, str, int], None] | None = None

    def checkpoint_turn(self, *, turn_id: uuid.UUID, text: str) -> None:
        super().checkpoint_turn(turn_id=turn_id, text=text)
        self.log.append(("checkpoint", text))

    def model_retry(self, *, turn_id: uuid.UUID, **retry: Any) -> None:
        super().model_retry(turn_id=turn_id, **retry)
        self.log.append(("retry", self.streaming_turns(self.watched)))

    def publish_delta(
        self, context: RunContext, turn_id: uuid.UUID, text: str, offset: int
    ) -> None:
        super().publish_delta(context, turn_id, text, offset)
        self.log.append(("delta", offset, text, self.streaming_turns(context.session_id)))
        if self.on_delta is not None:
            self.on_delta(context, turn_id, text, offset)


class Bench:
    def __init__(self) -> None:
        self.store = Recorder()
        self.clock = Clock()
        self.session_id = self.store.create_session(
            owner_id=ALICE, agent="tester", title="", metadata={}
        ).id
        self.store.watched = self.session_id

    def sleep(self, seconds: float) -> None:
        self.clock.now += seconds

    def run(self, model: Streamer, **settings: Any) -> tuple[uuid.UUID, Any]:
        run_id = self.store.create_run(
            session_id=self.session_id,
            agent="tester",
            input="tell me a story",
            labels={},
            metadata={},
            policy=Policy().as_dict(),
        ).id
        agent = Agent(
            id="tester",
            description="An agent for tests.",
            model="fake-model",
            system_prompt="Be brief.",
            toolsets=(),
            model_settings=ModelSettings(**settings),
        )
        loop = TurnLoop(
            store=self.store,
            agents=AgentRegistry([agent]),
            model_factory=lambda name: model,
            clock=self.clock,
            sleep=self.sleep,
            publish_delta=self.store.publish_delta,
            lease_seconds=LEASE_SECONDS,
        )
        return run_id, loop.execute(run_id)

    def events(self, run_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
        return [
            e["data"]
            for e in self.store.events(self.session_id)
            if e["run"] == str(run_id) and e["type"] == kind
        ]


@pytest.fixture
def bench() -> Bench:
    return Bench()


def _checkpoints(log: list[tuple[Any, ...]]) -> list[str]:
    return [entry[1] for entry in log if entry[0] == "checkpoint"]


def test_a_streaming_answer_is_checkpointed_about_once_a_second_before_its_piece_is_published(
    bench,
):
    run_id, info = bench.run(Streamer(bench.clock, WORDS))

    assert info.status == RunStatus.COMPLETED
    # One checkpoint per elapsed second (pieces 4, 8 and 12 at 0.3 s each), each the
    # whole text so far, the piece that triggered it included.
    assert _checkpoints(bench.store.log) == [
        "".join(WORDS[:4]),
        "".join(WORDS[:8]),
        "".join(WORDS[:12]),
    ]
    for position, entry in enumerate(bench.store.log):
        if entry[0] == "checkpoint":
            # Written before that piece was published: a subscriber that gets the
            # piece and reads the checkpoint finds everything up to its end.
            following = bench.store.log[position + 1]
            assert following[0] == "delta"
            assert following[1] + len(following[2]) == len(entry[1])
    (turn,) = bench.store.turns(run_id)
    assert turn.ended
    assert turn.response_text == "".join(WORDS)
    # A finished turn is no partial answer: nothing marks it, its usage is the provider's.
    (completed,) = bench.events(run_id, E.TURN_COMPLETED)
    assert "interruption" not in completed
    assert "usage_estimated" not in completed
    (used,) = bench.events(run_id, E.USAGE)
    assert "estimated" not in used
    assert (used["input_tokens"], used["output_tokens"]) == (40, 30)
    # Once it ended, nothing is being answered.
    assert bench.store.streaming_turns(bench.session_id) == []


def test_a_checkpoint_the_store_refuses_is_skipped_and_the_answer_goes_on(bench, caplog):
    """A checkpoint serves a late subscriber and a worker taking over; a store that
    cannot keep one for a moment (a locked table, a dropped connection) costs that
    checkpoint, not the answer: the next one is kept, and the reply ends whole."""
    kept = bench.store.checkpoint_turn
    refused: list[str] = []

    def flaky(*, turn_id: uuid.UUID, text: str) -> None:
        if not refused:
            refused.append(text)
            raise RuntimeError("database table is locked")
        kept(turn_id=turn_id, text=text)

    bench.store.checkpoint_turn = flaky  # type: ignore[method-assign]
    run_id, info = bench.run(Streamer(bench.clock, WORDS))

    assert info.status == RunStatus.COMPLETED
    assert refused == ["".join(WORDS[:4])]
    assert _checkpoints(bench.store.log) == ["".join(WORDS[:8]), "".join(WORDS[:12])]
    (turn,) = bench.store.turns(run_id)
    assert turn.response_text == "".join(WORDS)
    assert "checkpoint" in caplog.text


def test_a_subscriber_joining_mid_answer_reads_the_text_so_far(bench):
    run_id, _ = bench.run(Streamer(bench.clock, WORDS))

    (turn,) = bench.store.turns(run_id)
    deltas = [entry for entry in bench.store.log if entry[0] == "delta"]
    # Before the first checkpoint there is nothing to read; after it, the text it
    # kept, under its run and turn.
    assert [d[3] for d in deltas[:3]] == [[], [], []]
    assert deltas[3][3] == [StreamedText(run_id, turn.id, "".join(WORDS[:4]))]
    assert deltas[6][3] == [StreamedText(run_id, turn.id, "".join(WORDS[:4]))]
    assert deltas[7][3] == [StreamedText(run_id, turn.id, "".join(WORDS[:8]))]


def test_each_piece_says_where_it_begins_in_characters(bench):
    pieces = ["Once ", "upon 🐉 a ", "time, ", "a dragon…"]

    run_id, _ = bench.run(Streamer(bench.clock, pieces))

    deltas = [delta for delta in bench.store.deltas if delta.run_id == run_id]
    assert [(delta.offset, delta.text) for delta in deltas] == [
        (0, "Once "),
        (5, "upon 🐉 a "),
        (14, "time, "),
        (20, "a dragon…"),
    ]
    assert all(
        "".join(pieces)[delta.offset : delta.offset + len(delta.text)] == delta.text
        for delta in deltas
    )


def test_a_stop_mid_answer_keeps_what_was_said_and_its_estimated_usage(bench, monkeypatch):
    def stop_after_five(context: RunContext, turn_id: uuid.UUID, text: str, offset: int) -> None:
        if offset == len("".join(WORDS[:4])):
            bench.store.request_cancel(context.run_id, "user_requested")

    bench.store.on_delta = stop_after_five
    model = Streamer(bench.clock, WORDS)

    run_id, info = bench.run(model)

    said = "".join(WORDS[:6])  # the next cancel check (each 0.5 s) stops it there
    assert (info.status, info.output) == (RunStatus.CANCELED, said)
    (turn,) = bench.store.turns(run_id)
    assert turn.ended
    assert turn.response_text == said
    (completed,) = bench.events(run_id, E.TURN_COMPLETED)
    assert completed["interruption"] == TurnInterruption.CANCELED
    assert completed["usage_estimated"] is True
    # The provider reported nothing before the stop: the usage is the request and
    # the words said, estimated, and the run counts it.
    request = model.requests[0]
    expected = estimated_usage(request.messages, said, request.tools)
    assert expected.input_tokens > 0
    assert expected.output_tokens > 0
    (used,) = bench.events(run_id, E.USAGE)
    assert used["estimated"] is True
    assert (used["input_tokens"], used["output_tokens"]) == (
        expected.input_tokens,
        expected.output_tokens,
    )
    assert bench.store.get_run(run_id).usage == expected
    assert bench.events(run_id, E.MESSAGE_COMPLETED)[0]["text"] == said


def test_a_stop_keeps_the_prompt_count_the_provider_reported_and_estimates_the_rest(
    bench,
):
    # As Anthropic does: the prompt is counted when the stream opens (with an output
    # count of 1), the output only at its end.
    def stop_at_once(context: RunContext, turn_id: uuid.UUID, text: str, offset: int) -> None:
        bench.store.request_cancel(context.run_id, "user_requested")

    bench.store.on_delta = stop_at_once
    model = Streamer(bench.clock, WORDS, reported=Usage(input_tokens=321, output_tokens=1))

    run_id, info = bench.run(model)

    assert info.status == RunStatus.CANCELED
    said = info.output
    assert said
    used = bench.store.get_run(run_id).usage
    assert used.input_tokens == 321
    assert used.output_tokens == estimated_usage((), said).output_tokens > 1
    assert bench.events(run_id, E.TURN_COMPLETED)[0]["usage_estimated"] is True


def test_a_stop_with_the_providers_running_count_is_not_estimated(bench):
    # Servers that count as they go (vLLM's continuous usage): nothing to estimate.
    def stop_at_once(context: RunContext, turn_id: uuid.UUID, text: str, offset: int) -> None:
        bench.store.request_cancel(context.run_id, "user_requested")

    bench.store.on_delta = stop_at_once
    model = Streamer(bench.clock, WORDS, reported=Usage(input_tokens=321, output_tokens=99))

    run_id, _ = bench.run(model)

    assert bench.store.get_run(run_id).usage == Usage(321, 99)
    (completed,) = bench.events(run_id, E.TURN_COMPLETED)
    assert completed["interruption"] == TurnInterruption.CANCELED
    assert "usage_estimated" not in completed
    assert "estimated" not in bench.events(run_id, E.USAGE)[0]


def test_a_stream_that_breaks_off_after_some_text_keeps_it_as_a_failed_turn(bench):
    broke = ModelError(ErrorKind.INTERNAL, "the stream broke off")
    model = Streamer(bench.clock, WORDS[:3], failure=lambda attempt: broke)

    run_id, info = bench.run(model, retry_attempts=1)

    assert info.status == RunStatus.FAILED
    assert (info.error.kind, info.error.message) == (ErrorKind.INTERNAL, "the stream broke off")
    (turn,) = bench.store.turns(run_id)
    assert turn.ended
    assert turn.response_text == "".join(WORDS[:3])
    (completed,) = bench.events(run_id, E.TURN_COMPLETED)
    assert (completed["interruption"], completed["usage_estimated"]) == (
        TurnInterruption.FAILED,
        True,
    )
    request = model.requests[0]
    said = estimated_usage(request.messages, "".join(WORDS[:3]), request.tools)
    assert bench.store.get_run(run_id).usage == said
    assert bench.events(run_id, E.MESSAGE_COMPLETED)[0]["text"] == "".join(WORDS[:3])
    # The failed run keeps what was said as its output, as a stopped one does.
    assert info.output == "".join(WORDS[:3])


def test_a_model_that_fails_before_saying_anything_records_no_partial_answer(bench):
    class Silent(Streamer):
        def complete(self, request: ModelRequest, on_delta: Any = None) -> ModelReply:
            raise ModelError(ErrorKind.INTERNAL, "refused")

    run_id, info = bench.run(Silent(bench.clock, []), retry_attempts=1)

    assert info.status == RunStatus.FAILED
    assert bench.events(run_id, E.TURN_COMPLETED) == []
    assert bench.store.get_run(run_id).usage == Usage()


def test_a_retried_call_drops_the_failed_attempts_text_and_streams_anew(bench):
    failed = [f"lost{n} " for n in range(1, 6)]
    model = Streamer(
        bench.clock,
        lambda attempt: failed if attempt == 1 else WORDS[:5],
        failure=lambda attempt: (
            ModelError(ErrorKind.UNAVAILABLE, "reset", retryable=True) if attempt == 1 else None
        ),
    )

    run_id, info = bench.run(model, retry_attempts=2)

    assert info.status == RunStatus.COMPLETED
    (turn,) = bench.store.turns(run_id)
    assert turn.response_text == "".join(WORDS[:5])
    log = bench.store.log
    retry = next(i for i, entry in enumerate(log) if entry[0] == "retry")
    # The failed attempt had checkpointed its text; model.retry dropped it.
    assert _checkpoints(log[:retry]) == ["".join(failed[:4])]
    assert log[retry] == ("retry", [])
    # The next attempt streams from offset 0 again, and nothing of the failed one
    # is ever read back.
    second = [entry for entry in log[retry:] if entry[0] == "delta"]
    assert [entry[1] for entry in second] == [0, 6, 12, 18, 24]
    assert all(text.text.startswith("word1") for entry in second for text in entry[3])
    assert all(not text.startswith("lost") for text in _checkpoints(log[retry:]))


def test_checkpoints_are_only_kept_for_a_turn_still_open():
    store = InMemoryRunStore(users={ALICE: "alice"})
    session = store.create_session(owner_id=ALICE, agent="tester", title="", metadata={})
    run = store.create_run(
        session_id=session.id, agent="tester", input="hi", labels={}, metadata={}, policy={}
    )
    store.claim_run(run.id, owner="w1", lease_seconds=LEASE_SECONDS)
    turn = store.start_turn(
        run_id=run.id, index=0, model="m", messages=[Message("user", "hi").as_dict()]
    )
    logged = store.events(session.id)

    store.checkpoint_turn(turn_id=turn, text="Once upon")

    # A checkpoint is no event.
    assert store.events(session.id) == logged
    assert store.streaming_turns(session.id) == [StreamedText(run.id, turn, "Once upon")]
    store.complete_turn(turn_id=turn, reply=ModelReply(text="Once upon a time."), latency_ms=5)
    store.checkpoint_turn(turn_id=turn, text="Once")
    assert store.turns(run.id)[0].response_text == "Once upon a time."
    assert store.streaming_turns(session.id) == []
