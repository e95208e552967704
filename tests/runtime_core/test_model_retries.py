"""Model calls that fail, and replies cut short: what the turn loop does with them.

A retryable provider error is retried with backoff (never sooner than the provider's
Retry-After) within the agent's budget, each retry a ``model.retry`` event; a reply
cut off by the output limit never runs its half-written tool calls. Time is a fake
clock that the loop's waits advance, so nothing here sleeps.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from goaai.runtime import retry
from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.errors import ModelError
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import CUT_SHORT_NOTE, TurnLoop
from goaai.runtime.models import ModelRequest, ModelSettings
from goaai.runtime.policy import Policy
from goaai.runtime.public_errors import ERROR_SENTENCES
from goaai.runtime.types import ModelReply, RunContext, ToolCallRequest, Usage
from goaai.runtime.vocabulary import ErrorKind, EventType, FinishReason, RunStatus
from tests.runtime_core.conftest import ALICE, LEASE_SECONDS

E = EventType
Step = ModelReply | ModelError | Callable[[Any], ModelReply]


def rate_limited(retry_after: float | None = None) -> ModelError:
    return ModelError(
        ErrorKind.RATE_LIMITED,
        "fake: the provider is rate limiting us (HTTP 429)",
        retryable=True,
        retry_after=retry_after,
    )


def overloaded() -> ModelError:
    return ModelError(ErrorKind.UNAVAILABLE, "fake: the provider is overloaded", retryable=True)


class ScriptedFailures:
    """A model that plays ``steps`` in order: a reply, an error to raise, or a
    callable given ``on_delta`` that streams and returns (or raises)."""

    name = "fake-model"

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_delta: Any = None) -> ModelReply:
        self.requests.append(request)
        step = self.steps.pop(0)
        if isinstance(step, ModelError):
            raise step
        if callable(step):
            return step(on_delta)
        if on_delta is not None and step.text:
            on_delta(step.text)
        return step


class Clock:
    """Monotonic seconds that only the loop's waits move on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Retries:
    def __init__(self, store: InMemoryRunStore) -> None:
        self.store = store
        self.clock = Clock()
        self.session_id = store.create_session(
            owner_id=ALICE, agent="tester", title="", metadata={}
        ).id
        self.deltas: list[str] = []

    def run(self, model: ScriptedFailures, **settings: Any) -> tuple[uuid.UUID, Any]:
        run_id = self.store.create_run(
            session_id=self.session_id,
            agent="tester",
            input="hello",
            labels={},
            metadata={},
            policy=Policy().as_dict(),
        ).id
        agent = Agent(
            id="tester",
            description="An agent for tests.",
            model="fake-model",
            toolsets=("text",),
            model_settings=ModelSettings(**settings),
        )

        def publish(context: RunContext, turn_id: uuid.UUID, text: str, offset: int) -> None:
            self.deltas.append(text)

        loop = TurnLoop(
            store=self.store,
            agents=AgentRegistry([agent]),
            model_factory=lambda name: model,
            publish_delta=publish,
            lease_seconds=LEASE_SECONDS,
            clock=self.clock,
            sleep=self.clock.sleep,
        )
        return run_id, loop.execute(run_id)

    def events(self, type: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.store.events(self.session_id) if e["type"] == type]


@pytest.fixture
def retries(store: InMemoryRunStore, monkeypatch: pytest.MonkeyPatch) -> Retries:
    # The schedule as deployed (the suite shortens it elsewhere).
    monkeypatch.setattr(retry, "FIRST_BACKOFF_SECONDS", 1.0)
    monkeypatch.setattr(retry, "MAX_BACKOFF_SECONDS", 30.0)
    return Retries(store)


def answer(text: str = "Done.") -> ModelReply:
    return ModelReply(text=text, usage=Usage(10, 3))


# Retrying


def test_a_429_with_retry_after_is_waited_out_and_the_run_completes(retries, caplog):
    model = ScriptedFailures(rate_limited(retry_after=3), answer("Hello."))

    run_id, info = retries.run(model)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Hello.")
    (retry,) = retries.events(E.MODEL_RETRY)
    assert (retry["attempt"], retry["error_kind"]) == (1, "rate_limited")
    # The event, which the run's owner reads, says it in plain words; the
    # provider's own are for operators, in the log.
    assert retry["message"] == ERROR_SENTENCES["rate_limited"]
    assert "429" not in retry["message"]
    assert any("rate limiting us (HTTP 429)" in record.getMessage() for record in caplog.records)
    # Never sooner than the provider asked, and not much later.
    assert 3 <= retry["delay_seconds"] <= 3.3
    assert sum(retries.clock.slept) == pytest.approx(retry["delay_seconds"], abs=1e-3)
    (turn,) = retries.store.turns(run_id)
    assert turn.ended
    # The retry is part of the same turn, not a new one.
    assert [e["index"] for e in retries.events(E.TURN_STARTED)] == [0]
    assert len(model.requests) == 2


def test_backoff_grows_with_each_attempt_and_the_run_completes_within_the_budget(retries):
    model = ScriptedFailures(overloaded(), overloaded(), overloaded(), answer())

    _, info = retries.run(model, retry_attempts=5)

    assert info.status == RunStatus.COMPLETED
    delays = [retry["delay_seconds"] for retry in retries.events(E.MODEL_RETRY)]
    assert [retry["attempt"] for retry in retries.events(E.MODEL_RETRY)] == [1, 2, 3]
    # Exponential from about a second, with up to a second of jitter.
    assert 1 <= delays[0] <= 2
    assert 2 <= delays[1] <= 3
    assert 4 <= delays[2] <= 5


def test_the_run_fails_with_the_providers_error_once_the_attempts_are_spent(retries):
    model = ScriptedFailures(*[overloaded() for _ in range(3)])

    _, info = retries.run(model, retry_attempts=3)

    assert info.status == RunStatus.FAILED
    assert info.error.kind == ErrorKind.UNAVAILABLE
    assert info.error.message == "fake: the provider is overloaded"
    assert info.error.retryable
    assert [retry["attempt"] for retry in retries.events(E.MODEL_RETRY)] == [1, 2]
    assert len(model.requests) == 3


def test_a_wait_that_would_end_past_the_budget_in_seconds_is_not_taken(retries):
    model = ScriptedFailures(rate_limited(retry_after=90), answer())

    _, info = retries.run(model, retry_seconds=60)

    assert (info.status, info.error.kind) == (RunStatus.FAILED, ErrorKind.RATE_LIMITED)
    assert retries.events(E.MODEL_RETRY) == []
    assert retries.clock.slept == []


def test_an_error_that_is_not_retryable_fails_the_run_at_once(retries):
    refused = ModelError(ErrorKind.UNAVAILABLE, "fake: the provider rejected the API key")
    model = ScriptedFailures(refused, answer())

    _, info = retries.run(model)

    assert (info.status, info.error.message) == (
        RunStatus.FAILED,
        "fake: the provider rejected the API key",
    )
    assert retries.events(E.MODEL_RETRY) == []
    assert len(model.requests) == 1


def test_a_cancel_request_during_a_backoff_ends_the_wait_and_the_run(retries):
    store = retries.store

    def cancel_then_fail(on_delta: Any) -> ModelReply:
        (run_id,) = store._session(retries.session_id).run_ids
        store.request_cancel(run_id, "user_requested")
        raise rate_limited(retry_after=30)

    model = ScriptedFailures(cancel_then_fail, answer())

    _, info = retries.run(model)

    assert info.status == RunStatus.CANCELED
    # The wait ended at once: the cancel was seen before any of it was slept.
    assert sum(retries.clock.slept) < 1
    assert len(model.requests) == 1


def test_what_a_failed_attempt_streamed_is_not_part_of_the_reply(retries):
    def half_then_cut(on_delta: Any) -> ModelReply:
        on_delta("The answ")
        raise ModelError(ErrorKind.UNAVAILABLE, "fake: stream cut", retryable=True)

    model = ScriptedFailures(half_then_cut, answer("The answer is 42."))

    _, info = retries.run(model)

    assert info.output == "The answer is 42."
    # Live subscribers saw both attempts; the retry event tells them to start again.
    assert retries.deltas == ["The answ", "The answer is 42."]
    assert [e["text"] for e in retries.events(E.MESSAGE_COMPLETED)] == ["The answer is 42."]


# Replies cut off by the output limit


def cut_off_call() -> ModelReply:
    return ModelReply(
        tool_calls=(ToolCallRequest(id="c1", name="echo", arguments={"_raw": '{"text": "ab'}),),
        usage=Usage(10, 64),
        finish_reason=FinishReason.LENGTH,
    )


def test_a_tool_call_cut_off_by_the_length_limit_is_never_run_and_the_model_is_told(retries):
    model = ScriptedFailures(cut_off_call(), answer("Short answer."))

    run_id, info = retries.run(model, max_output_tokens=64)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Short answer.")
    first, second = retries.store.turns(run_id)
    assert first.finish_reason == FinishReason.LENGTH
    assert first.tool_calls == ()
    assert second.finish_reason == FinishReason.STOP
    assert retries.events(E.TOOL_CALL_SCHEDULED) == []
    told = model.requests[1].messages[-2:]
    assert [(m.role, m.content) for m in told] == [("assistant", ""), ("user", CUT_SHORT_NOTE)]
    completed = retries.events(E.TURN_COMPLETED)
    assert (completed[0]["finish_reason"], completed[0]["truncated"]) == ("length", True)


def test_replies_cut_off_again_and_again_fail_the_run_as_truncated(retries):
    model = ScriptedFailures(cut_off_call(), cut_off_call())

    _, info = retries.run(model, max_output_tokens=64, retry_attempts=2)

    assert (info.status, info.error.kind) == (RunStatus.FAILED, ErrorKind.TRUNCATED)
    assert info.error.message == (
        "The model's reply was cut off by the length limit (64 output tokens) "
        "2 times before it was complete."
    )
    assert retries.events(E.TOOL_CALL_SCHEDULED) == []


def test_an_answer_cut_off_by_the_length_limit_is_kept_and_marked(retries):
    cut = ModelReply(text="The first part of a long", finish_reason=FinishReason.LENGTH)
    model = ScriptedFailures(cut)

    run_id, info = retries.run(model)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "The first part of a long")
    (turn,) = retries.store.turns(run_id)
    assert turn.finish_reason == FinishReason.LENGTH
    assert retries.events(E.TURN_COMPLETED)[0]["truncated"] is True


def test_a_run_picked_up_after_a_cut_off_turn_does_not_run_its_calls(retries):
    store = retries.store
    model = ScriptedFailures(cut_off_call(), answer("Recovered."))

    # The first worker recorded the cut-off turn, then died.
    run_id = store.create_run(
        session_id=retries.session_id,
        agent="tester",
        input="hello",
        labels={},
        metadata={},
        policy=Policy().as_dict(),
    ).id
    assert store.claim_run(run_id, owner="w1", lease_seconds=LEASE_SECONDS) is not None
    turn = store.start_turn(
        run_id=run_id, index=0, model="fake-model", messages=[{"role": "user", "content": "hi"}]
    )
    store.complete_turn(turn_id=turn, reply=cut_off_call(), latency_ms=1)
    store._runs[run_id].lease_expires_at = store._clock() - dt.timedelta(seconds=5)
    model.steps.pop(0)
    agent = Agent(id="tester", description="", model="fake-model", toolsets=("text",))
    loop = TurnLoop(
        store=store,
        agents=AgentRegistry([agent]),
        model_factory=lambda name: model,
        lease_seconds=LEASE_SECONDS,
        clock=retries.clock,
        sleep=retries.clock.sleep,
    )

    info = loop.execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Recovered.")
    assert retries.events(E.TOOL_CALL_SCHEDULED) == []
    assert model.requests[0].messages[-1].content == CUT_SHORT_NOTE
