"""What every :class:`~goaai.runtime.store.RunStore` promises, checked against both:
the ORM store (``runs_app.store.OrmRunStore``, on the test database) and the
in-memory store (``goaai.runtime.inmemory_store.InMemoryRunStore``).

Each test runs once per store (``[memory]`` and ``[orm]``). The few things the
protocol cannot express (reading a session's log, a run's recorded steps, making a
lease run out or a run look old) go through :class:`Harness`, one small adapter per
store. A behaviour that differs between the stores fails one of the two runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import pytest
from django.utils import timezone

from goaai.runtime.agents import ASSISTANT, AgentRegistry
from goaai.runtime.errors import (
    DuplicateIdempotencyKey,
    IllegalTransition,
    InvalidAnswer,
    InvalidMemoryScope,
    MemoryConflict,
    NotFound,
    RunActive,
    SessionEnded,
)
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.policy import Decision
from goaai.runtime.pricing import Price, cost_of
from goaai.runtime.public_errors import ERROR_SENTENCES
from goaai.runtime.store import RunStore
from goaai.runtime.types import (
    Branch,
    Message,
    ModelReply,
    PlannedCall,
    RunContext,
    RunError,
    RunInfo,
    SessionInfo,
    StreamedText,
    ToolCallRequest,
    ToolCallState,
    ToolOutcome,
    TurnRecorded,
    TurnState,
    Usage,
)
from goaai.runtime.vocabulary import EventType, FinishReason, RunStatus, ToolCallStatus
from runs_app.models import ModelPrice, Run, Turn
from runs_app.store import OrmRunStore
from sessions_app.models import RunEvent
from tests.factories import UserFactory

E = EventType
LEASE = 60.0
# What a usage event says of its turn: each kind of token, the total, the cost.
USAGE_KEYS = sorted(["turn", *Usage().as_dict(), "cost"])


@dataclass
class Harness:
    """One store under test, with what the protocol does not say how to do."""

    kind: str
    store: RunStore
    alice: int
    bob: int
    # The session's log, oldest first: dicts of seq, type, run, data, created_at.
    events: Callable[[UUID], list[dict[str, Any]]]
    # What the run recorded, as a run picked up again would see it.
    turns: Callable[[UUID], tuple[TurnState, ...]]
    # Let the run's lease run out, as when its worker dies.
    lose_worker: Callable[[UUID], None]
    # Make the run look ``seconds`` older: created and last changed that long ago.
    age: Callable[[UUID, float], None]
    # Put a price for a model (as agents name it) in force from a moment on.
    price: Callable[[str, dt.datetime, Price], None]

    # Shortcuts for the steps most tests need

    def session(self, owner: int | None = None, agent: str = "assistant") -> SessionInfo:
        return self.store.create_session(
            owner_id=owner or self.alice, agent=agent, title="A chat", metadata={}
        )

    def run(
        self, session: SessionInfo | None = None, prompt: str = "hello", **extra: Any
    ) -> RunInfo:
        extra.setdefault("labels", {})
        extra.setdefault("metadata", {})
        extra.setdefault("policy", {"max_turns": 4})
        return self.store.create_run(
            session_id=(session or self.session()).id, agent="assistant", input=prompt, **extra
        )

    def claimed(self, session: SessionInfo | None = None, prompt: str = "hello") -> RunInfo:
        """A run started by a live worker named ``w1``."""
        run = self.run(session, prompt)
        assert self.store.claim_run(run.id, owner="w1", lease_seconds=LEASE) is not None
        return self.store.get_run(run.id)

    def turn(self, run_id: UUID, index: int = 0, model: str = "scripted") -> UUID:
        return self.store.start_turn(
            run_id=run_id,
            index=index,
            model=model,
            messages=[{"role": "user", "content": "hello"}],
        )

    def child(self, parent: RunInfo) -> RunInfo:
        """A run of the assistant that ``parent`` started with a tool call."""
        return self.store.create_child_run(
            parent_run_id=parent.id,
            parent_tool_call_id=self.store.start_tool_call(
                turn_id=self.turn(parent.id),
                index=0,
                request=ToolCallRequest(id="c", name="ask_assistant", arguments={"prompt": "x"}),
            ),
            agent="assistant",
            input="x",
            labels={},
            policy={},
        )

    def waiting(self, kind: str = "approval") -> tuple[RunInfo, UUID]:
        """A run that waits for a person, and the tool call it waits on."""
        run = self.claimed()
        turn = self.turn(run.id)
        name = "ask_user" if kind == "question" else "memory_forget_all"
        call = self.store.schedule_tool_call(
            turn_id=turn,
            index=0,
            request=ToolCallRequest(id="c1", name=name, arguments={}),
            requires_approval=kind == "approval",
        )
        question = "What is your name?" if kind == "question" else ""
        self.store.await_input(run_id=run.id, kind=kind, tool_call_id=call, question=question)
        return self.store.get_run(run.id), call

    def call_state(self, run_id: UUID, tool_call_id: UUID) -> ToolCallState:
        (state,) = [c for t in self.turns(run_id) for c in t.tool_calls if c.id == tool_call_id]
        return state

    def types(self, session_id: UUID) -> list[str]:
        return [event["type"] for event in self.events(session_id)]

    def last(self, session_id: UUID, type: str) -> dict[str, Any]:
        return [e for e in self.events(session_id) if e["type"] == type][-1]["data"]


# The two stores


def _memory_harness() -> Harness:
    store = InMemoryRunStore(users={1: "alice", 2: "bob"})

    def lose_worker(run_id: UUID) -> None:
        store._runs[run_id].lease_expires_at = store._clock() - dt.timedelta(seconds=5)

    def age(run_id: UUID, seconds: float) -> None:
        run = store._runs[run_id]
        run.created_at -= dt.timedelta(seconds=seconds)
        run.updated_at -= dt.timedelta(seconds=seconds)

    def price(model: str, since: dt.datetime, price: Price) -> None:
        store._prices = (*store._prices, (model, since, price))

    return Harness(
        kind="memory",
        store=store,
        alice=1,
        bob=2,
        events=store.events,
        turns=store.turns,
        lose_worker=lose_worker,
        age=age,
        price=price,
    )


def _orm_turns(run_id: UUID) -> tuple[TurnState, ...]:
    turns = Turn.objects.filter(run_id=run_id).order_by("index").prefetch_related("tool_calls")
    return tuple(
        TurnState(
            id=turn.id,
            index=turn.index,
            request_messages=tuple(Message.from_dict(m) for m in turn.request_messages),
            ended=turn.ended_at is not None,
            response_text=turn.response_text,
            response_tool_calls=tuple(
                ToolCallRequest.from_dict(c) for c in turn.response_tool_calls
            ),
            tool_calls=tuple(
                ToolCallState(
                    id=call.id,
                    index=call.index,
                    call_id=call.call_id,
                    name=call.name,
                    arguments=call.arguments,
                    status=call.status,
                    result=call.result,
                    error_kind=call.error_kind,
                    error_message=call.error_message,
                    requires_approval=call.requires_approval,
                    decision=call.decision,
                    decision_reason=call.decision_reason,
                    attempt=call.attempt,
                )
                for call in sorted(turn.tool_calls.all(), key=lambda call: call.index)
            ),
            finish_reason=turn.finish_reason,
            reasoning_state=tuple(turn.reasoning_state),
            interruption=turn.interruption,
        )
        for turn in turns
    )


def _orm_harness() -> Harness:
    def events(session_id: UUID) -> list[dict[str, Any]]:
        return [e.as_dict() for e in RunEvent.objects.filter(session_id=session_id).order_by("seq")]

    def lose_worker(run_id: UUID) -> None:
        Run.objects.filter(pk=run_id).update(
            lease_expires_at=timezone.now() - dt.timedelta(seconds=5)
        )

    def age(run_id: UUID, seconds: float) -> None:
        run = Run.objects.get(pk=run_id)
        delta = dt.timedelta(seconds=seconds)
        Run.objects.filter(pk=run_id).update(
            created_at=run.created_at - delta, updated_at=run.updated_at - delta
        )

    def price(model: str, since: dt.datetime, price: Price) -> None:
        profile, _, name = model.partition(":")
        ModelPrice.objects.create(
            profile=profile,
            model=name,
            effective_from=since,
            input_per_million=price.input,
            output_per_million=price.output,
            cached_input_per_million=price.cached_input,
            cache_write_per_million=price.cache_write,
            reasoning_per_million=price.reasoning,
        )

    return Harness(
        kind="orm",
        store=OrmRunStore(),
        alice=UserFactory(username="alice").pk,
        bob=UserFactory(username="bob").pk,
        events=events,
        turns=_orm_turns,
        lose_worker=lose_worker,
        age=age,
        price=price,
    )


@pytest.fixture(
    params=[
        "memory",
        # Committed for real: the ORM store runs outside any test transaction, as the
        # turn loop does, so after-commit callbacks and leases behave as in production.
        pytest.param("orm", marks=pytest.mark.django_db(transaction=True)),
    ]
)
def h(request: pytest.FixtureRequest) -> Harness:
    return _memory_harness() if request.param == "memory" else _orm_harness()


def _ids(events: list[dict[str, Any]]) -> list[int]:
    return [event["seq"] for event in events]


# Sessions


def test_a_new_session_is_active_and_its_log_starts_with_session_created(h):
    session = h.store.create_session(
        owner_id=h.alice, agent="assistant", title="x" * 250, metadata={"user_id": "u-1"}
    )

    assert (session.owner_id, session.agent, session.status) == (h.alice, "assistant", "active")
    assert (session.title, session.metadata, session.ended_at) == (
        "x" * 200,
        {"user_id": "u-1"},
        None,
    )
    assert h.store.get_session(session.id) == session
    (event,) = h.events(session.id)
    assert (event["seq"], event["type"], event["run"]) == (1, E.SESSION_CREATED, None)
    assert event["data"] == {
        "agent": "assistant",
        "title": "x" * 200,
        "metadata": {"user_id": "u-1"},
    }


def test_a_session_for_an_unknown_user_is_refused(h):
    with pytest.raises(NotFound):
        h.store.create_session(owner_id=987654, agent="assistant", title="", metadata={})


def test_reading_an_unknown_session_is_not_found(h):
    with pytest.raises(NotFound):
        h.store.get_session(uuid4())
    with pytest.raises(NotFound):
        h.store.end_session(uuid4())


def test_ending_a_session_stops_its_runs_and_refuses_new_ones(h):
    session = h.session()
    done = h.claimed(session)
    h.store.finish_run(run_id=done.id, status=RunStatus.COMPLETED, output="ok")
    working = h.claimed(session)
    # Queued behind the working one: a session runs one message at a time.
    pending = h.run(session)
    waiting_run, waiting_call = h.waiting()
    waiting_session = h.store.get_session(waiting_run.session_id)
    before = len(h.events(session.id))

    ended = h.store.end_session(session.id, ended_by=h.alice)
    h.store.end_session(waiting_session.id)

    assert (ended.status, ended.id) == ("ended", session.id)
    assert ended.ended_at is not None
    assert h.store.get_run(pending.id).status == RunStatus.CANCELED
    # A run a live worker executes is asked to stop; its loop ends it at its next step.
    assert h.store.get_run(working.id).status == RunStatus.RUNNING
    assert h.store.cancel_requested(working.id) == "session_ended"
    assert h.store.get_run(done.id).status == RunStatus.COMPLETED
    assert h.store.get_run(waiting_run.id).status == RunStatus.CANCELED
    assert h.call_state(waiting_run.id, waiting_call).status == ToolCallStatus.CANCELED
    new = h.events(session.id)[before:]
    assert [e["type"] for e in new] == [E.RUN_CANCELED, E.SESSION_ENDED]
    assert new[0]["run"] == str(pending.id)
    # Alice ended her own session: the runs it stopped say she did.
    assert new[0]["data"] == {
        "reason": "session_ended",
        "stopped_by": {"kind": "user", "user": "alice", "rule": None},
    }
    assert new[1]["run"] is None
    assert new[1]["data"]["runs_canceled"] == 2
    assert dt.datetime.fromisoformat(new[1]["data"]["ended_at"]) == ended.ended_at
    with pytest.raises(SessionEnded):
        h.run(session)


def test_ending_an_ended_session_changes_nothing(h):
    session = h.session()
    first = h.store.end_session(session.id)
    logged = h.events(session.id)

    again = h.store.end_session(session.id)

    assert again == first
    assert h.events(session.id) == logged


# Runs, as callers see them


def test_a_new_run_is_pending_and_announced_with_its_policy_decisions(h):
    session = h.session()
    decision = Decision(rule="free_tier", verdict="tightened", reason="labels tier=free")

    run = h.store.create_run(
        session_id=session.id,
        agent="assistant",
        input="hello",
        labels={"tier": "free"},
        metadata={"via": "api"},
        policy={"max_tool_calls": 3},
        policy_decisions=[decision],
        created_by_id=h.alice,
    )

    assert (run.status, run.agent, run.input, run.output) == (
        RunStatus.PENDING,
        "assistant",
        "hello",
        "",
    )
    assert (run.session_id, run.labels, run.error, run.parent_run_id) == (
        session.id,
        {"tier": "free"},
        None,
        None,
    )
    assert (run.usage, run.started_at, run.ended_at) == (Usage(0, 0), None, None)
    assert h.store.get_run(run.id) == run
    created, decided = h.events(session.id)[1:]
    assert (created["type"], created["run"]) == (E.RUN_CREATED, str(run.id))
    assert created["data"] == {
        "agent": "assistant",
        "input": "hello",
        "labels": {"tier": "free"},
        "parent_run": None,
        # The session's first run: it continues from nothing, and redoes nothing.
        "previous_run": None,
        "retry_of": None,
        "regenerates": None,
        "edit_of": None,
    }
    assert (decided["type"], decided["run"]) == (E.POLICY_DECISION, str(run.id))
    assert decided["data"] == {
        "rule": "free_tier",
        "verdict": "tightened",
        "reason": "labels tier=free",
    }


def test_a_run_in_an_unknown_session_is_not_found(h):
    with pytest.raises(NotFound):
        h.store.create_run(
            session_id=uuid4(), agent="assistant", input="x", labels={}, metadata={}, policy={}
        )
    with pytest.raises(NotFound):
        h.store.get_run(uuid4())


def test_an_idempotency_key_names_one_run_per_session(h):
    session, other = h.session(), h.session()
    first = h.run(session, idempotency_key="key-1", fingerprint="abc")
    logged = h.events(session.id)

    with pytest.raises(DuplicateIdempotencyKey):
        h.run(session, idempotency_key="key-1", fingerprint="abc")

    # Nothing of the refused run was recorded.
    assert h.events(session.id) == logged
    # The same key in another session, and runs without a key, are other runs.
    assert h.run(other, idempotency_key="key-1").id != first.id
    assert h.run(session).id != h.run(session).id


@pytest.mark.parametrize("state", ["pending", "awaiting_input"])
def test_canceling_a_run_nobody_executes_cancels_it_at_once(h, state):
    if state == "pending":
        run, call = h.run(), None
    else:
        run, call = h.waiting()

    canceled = h.store.request_cancel(run.id, "user_requested")

    assert canceled.status == RunStatus.CANCELED
    assert canceled.ended_at is not None
    assert h.store.get_run(run.id).status == RunStatus.CANCELED
    assert h.store.cancel_requested(run.id) == "user_requested"
    # Nobody was named as asking: who stopped it is not known.
    assert h.last(run.session_id, E.RUN_CANCELED) == {
        "reason": "user_requested",
        "stopped_by": None,
    }
    if call is not None:
        # The call it waited on was cut short with it, and the log says so.
        assert h.call_state(run.id, call).status == ToolCallStatus.CANCELED
        stopped = h.last(run.session_id, E.TOOL_CALL_CANCELED)
        assert (stopped["tool_call"], stopped["name"], stopped["reason"]) == (
            str(call),
            "memory_forget_all",
            "the run canceled",
        )
        assert h.types(run.session_id)[-2:] == [E.TOOL_CALL_CANCELED, E.RUN_CANCELED]


def test_canceling_a_running_run_flags_it_for_its_worker(h):
    run = h.claimed()
    logged = h.events(run.session_id)

    flagged = h.store.request_cancel(run.id, "user_requested", by=h.alice)
    h.store.request_cancel(run.id, "changed my mind", by=h.bob)

    assert flagged.status == RunStatus.RUNNING
    # Only the first request counts, and no event is written until the run ends.
    assert h.store.cancel_requested(run.id) == "user_requested"
    assert h.events(run.session_id) == logged
    ended = h.store.finish_run(run_id=run.id, status=RunStatus.CANCELED)
    assert (ended.status, ended.error) == (RunStatus.CANCELED, None)
    assert h.last(run.session_id, E.RUN_CANCELED) == {
        "reason": "user_requested",
        "stopped_by": {"kind": "user", "user": "alice", "rule": None},
    }


def test_canceling_a_run_whose_worker_died_cancels_it_at_once(h):
    run = h.claimed()
    h.lose_worker(run.id)

    assert h.store.request_cancel(run.id, "user_requested").status == RunStatus.CANCELED


def test_canceling_a_finished_run_changes_nothing(h):
    run = h.claimed()
    h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED, output="done")
    logged = h.events(run.session_id)

    again = h.store.request_cancel(run.id, "too late")

    assert (again.status, again.output) == (RunStatus.COMPLETED, "done")
    assert h.events(run.session_id) == logged
    assert h.store.cancel_requested(run.id) is None


def test_cancel_requested_says_why_or_nothing(h):
    quiet, unexplained = h.claimed(), h.claimed()
    h.store.request_cancel(unexplained.id, "")

    assert h.store.cancel_requested(quiet.id) is None
    assert h.store.cancel_requested(unexplained.id) == "cancel requested"
    assert h.store.cancel_requested(uuid4()) == "run deleted"


# Answers from people


def test_an_approval_lets_the_run_continue_without_a_worker(h):
    run, call = h.waiting("approval")

    answered = h.store.respond(
        run.id, tool_call_id=call, decision="approve", reason="", answer=None, decided_by_id=h.alice
    )

    assert answered.status == RunStatus.RUNNING
    state = h.call_state(run.id, call)
    assert (state.status, state.decision, state.attempt) == (
        ToolCallStatus.SCHEDULED,
        "approved",
        0,
    )
    decided, resumed = h.events(run.session_id)[-2:]
    assert (decided["type"], resumed["type"]) == (E.TOOL_CALL_DECIDED, E.RUN_RESUMED)
    assert decided["data"] == {
        "tool_call": str(call),
        "name": "memory_forget_all",
        "decision": "approved",
        "reason": "",
        "decided_by": h.alice,
        "decided_by_name": "alice",
    }
    assert resumed["data"]["answered"] == "approval"
    assert resumed["data"]["waited_seconds"] >= 0
    # No worker holds it: the next worker takes it over without a "worker lost".
    context = h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE)
    assert context is not None
    assert [c.decision for t in context.turns for c in t.tool_calls] == ["approved"]
    assert h.types(run.session_id)[-1] == E.RUN_RESUMED


def test_a_denial_ends_the_call_with_the_reason(h):
    run, call = h.waiting("approval")

    h.store.respond(
        run.id,
        tool_call_id=None,
        decision="deny",
        reason="too risky",
        answer=None,
        decided_by_id=h.bob,
    )

    state = h.call_state(run.id, call)
    assert (state.status, state.decision, state.decision_reason) == (
        ToolCallStatus.DENIED,
        "denied",
        "too risky",
    )
    assert (state.error_kind, state.error_message, state.attempt) == (
        "domain_rejection",
        "Denied: too risky",
        0,
    )
    assert h.types(run.session_id)[-2:] == [E.TOOL_CALL_DECIDED, E.RUN_RESUMED]
    decided = h.last(run.session_id, E.TOOL_CALL_DECIDED)
    assert (decided["decision"], decided["reason"], decided["decided_by_name"]) == (
        "denied",
        "too risky",
        "bob",
    )
    assert h.store.get_run(run.id).status == RunStatus.RUNNING


def test_an_answer_is_the_result_of_the_question(h):
    run, call = h.waiting("question")

    h.store.respond(
        run.id, tool_call_id=call, decision="", reason="", answer="Ada", decided_by_id=None
    )

    state = h.call_state(run.id, call)
    assert (state.status, state.result, state.decision, state.attempt) == (
        ToolCallStatus.SUCCEEDED,
        {"answer": "Ada"},
        "answered",
        1,
    )
    decided, succeeded, resumed = h.events(run.session_id)[-3:]
    assert [decided["type"], succeeded["type"], resumed["type"]] == [
        E.TOOL_CALL_DECIDED,
        E.TOOL_CALL_SUCCEEDED,
        E.RUN_RESUMED,
    ]
    assert decided["data"] == {
        "tool_call": str(call),
        "name": "ask_user",
        "decision": "answered",
        "answer": "Ada",
        "decided_by": None,
        "decided_by_name": None,
    }
    assert set(succeeded["data"]) == {"tool_call", "name", "duration_ms", "result"}
    assert succeeded["data"]["result"] == {"answer": "Ada"}
    assert resumed["data"]["answered"] == "question"


def _choice_question(h: Harness, *, multiple: bool) -> tuple[RunInfo, UUID]:
    """A run that waits on a question offering tea, coffee and water."""
    run = h.claimed()
    call = h.store.schedule_tool_call(
        turn_id=h.turn(run.id), index=0, request=_call_request("ask_user"), requires_approval=False
    )
    h.store.await_input(
        run_id=run.id,
        kind="question",
        tool_call_id=call,
        question="Which?",
        choices=("tea", "coffee", "water"),
        multiple=multiple,
    )
    return h.store.get_run(run.id), call


def test_a_question_with_choices_says_so_while_the_run_waits(h):
    run, call = _choice_question(h, multiple=True)

    assert h.last(run.session_id, E.RUN_AWAITING_INPUT) == {
        "kind": "question",
        "tool_call": str(call),
        "question": "Which?",
        "choices": ["tea", "coffee", "water"],
        "multiple": True,
    }


@pytest.mark.parametrize(
    ("multiple", "answer", "choices", "result"),
    [
        (False, None, ["coffee"], {"answer": "coffee", "chosen": ["coffee"]}),
        (True, None, ["water", "tea"], {"answer": "tea, water", "chosen": ["tea", "water"]}),
        (False, "  Coffee ", None, {"answer": "coffee", "chosen": ["coffee"]}),
        (False, "milk, please", None, {"answer": "milk, please"}),
    ],
    ids=["one choice", "several, in the order offered", "words naming a choice", "own words"],
)
def test_a_choice_answer_is_the_result_of_the_question_and_in_its_decision(
    h, multiple, answer, choices, result
):
    run, call = _choice_question(h, multiple=multiple)

    h.store.respond(
        run.id,
        tool_call_id=call,
        decision="",
        reason="",
        answer=answer,
        choices=choices,
        decided_by_id=h.alice,
    )

    state = h.call_state(run.id, call)
    assert (state.status, state.result, state.decision) == (
        ToolCallStatus.SUCCEEDED,
        result,
        "answered",
    )
    decided = h.last(run.session_id, E.TOOL_CALL_DECIDED)
    assert {key: decided[key] for key in result} == result
    assert decided["decided_by_name"] == "alice"
    assert h.store.get_run(run.id).status == RunStatus.RUNNING


@pytest.mark.parametrize(
    ("multiple", "answer", "choices", "named"),
    [
        (False, None, ["milk"], "'milk' is not one of the choices"),
        (False, None, ["tea", "water"], "exactly one"),
        (True, None, ["tea", "tea"], "'tea' is picked twice"),
        (True, None, [], "at least one"),
        (True, None, ["Tea"], "'Tea' is not one of the choices"),
        (False, "tea", ["tea"], "not both"),
        (False, " ", None, "empty"),
    ],
    ids=["not offered", "two of one", "twice", "none", "not as offered", "both", "blank"],
)
def test_a_choice_answer_the_question_does_not_accept_changes_nothing(
    h, multiple, answer, choices, named
):
    run, call = _choice_question(h, multiple=multiple)
    logged = h.events(run.session_id)

    with pytest.raises(InvalidAnswer, match=named):
        h.store.respond(
            run.id,
            tool_call_id=call,
            decision="",
            reason="",
            answer=answer,
            choices=choices,
            decided_by_id=h.alice,
        )

    assert h.store.get_run(run.id).status == RunStatus.AWAITING_INPUT
    assert h.call_state(run.id, call).decision == ""
    assert h.events(run.session_id) == logged


def test_choices_for_a_question_that_offers_none_are_refused(h):
    run, call = h.waiting("question")

    with pytest.raises(InvalidAnswer, match="offers no choices"):
        h.store.respond(
            run.id,
            tool_call_id=call,
            decision="",
            reason="",
            answer=None,
            choices=["Ada"],
            decided_by_id=None,
        )

    assert h.store.get_run(run.id).status == RunStatus.AWAITING_INPUT


@pytest.mark.parametrize(
    ("kind", "response"),
    [
        ("question", {"decision": "approve", "answer": None}),
        ("approval", {"decision": "maybe", "answer": None}),
        ("approval", {"decision": "approve", "answer": None, "tool_call_id": "other"}),
    ],
    ids=["question without an answer", "unknown decision", "another tool call"],
)
def test_an_answer_that_does_not_fit_what_the_run_waits_for_is_refused(h, kind, response):
    run, call = h.waiting(kind)
    logged = h.events(run.session_id)
    response = dict(response)
    tool_call_id = uuid4() if response.pop("tool_call_id", None) else call

    with pytest.raises(IllegalTransition):
        h.store.respond(
            run.id, tool_call_id=tool_call_id, reason="", decided_by_id=h.alice, **response
        )

    assert h.store.get_run(run.id).status == RunStatus.AWAITING_INPUT
    assert h.call_state(run.id, call).decision == ""
    assert h.events(run.session_id) == logged


@pytest.mark.parametrize("moment", ["answered already", "canceled meanwhile", "never waited"])
def test_an_answer_that_comes_too_late_is_refused(h, moment):
    if moment == "never waited":
        run, call = h.claimed(), None
    else:
        run, call = h.waiting("approval")
    if moment == "answered already":
        h.store.respond(
            run.id,
            tool_call_id=call,
            decision="approve",
            reason="",
            answer=None,
            decided_by_id=None,
        )
    elif moment == "canceled meanwhile":
        h.store.request_cancel(run.id, "user_requested")
    status = h.store.get_run(run.id).status
    logged = h.events(run.session_id)

    with pytest.raises(IllegalTransition):
        h.store.respond(
            run.id, tool_call_id=call, decision="deny", reason="", answer=None, decided_by_id=None
        )

    assert h.store.get_run(run.id).status == status
    assert h.events(run.session_id) == logged


# Claiming a run for execution


def test_claiming_a_pending_run_starts_it_under_a_lease(h):
    session = h.session()
    run = h.run(session, "what is 6*7", labels={"tier": "pro"}, policy={"max_turns": 2})

    context = h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)

    assert isinstance(context, RunContext)
    assert (context.run_id, context.session_id, context.owner_id) == (run.id, session.id, h.alice)
    assert (context.agent, context.input, context.labels) == (
        "assistant",
        "what is 6*7",
        {"tier": "pro"},
    )
    assert (context.policy, context.turns, context.history) == ({"max_turns": 2}, (), ())
    assert (context.lease_owner, context.parent_run_id, context.depth) == ("w1", None, 0)
    assert 0 <= context.elapsed_seconds < 5
    started = h.store.get_run(run.id)
    assert started.status == RunStatus.RUNNING
    assert started.started_at is not None
    assert h.events(session.id)[-1]["type"] == E.RUN_STARTED
    assert h.events(session.id)[-1]["data"] == {"agent": "assistant", "worker": "w1"}


def test_a_run_held_by_a_live_worker_cannot_be_claimed(h):
    run = h.claimed()
    logged = h.events(run.session_id)

    assert h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE) is None
    assert h.events(run.session_id) == logged
    assert h.store.renew_lease(run.id, owner="w1", lease_seconds=LEASE) is True


def test_a_run_whose_worker_died_is_taken_over_with_what_it_recorded(h):
    run = h.claimed()
    turn = h.turn(run.id)
    request = ToolCallRequest(id="c1", name="echo", arguments={"text": "hi"})
    h.store.complete_turn(
        turn_id=turn, reply=ModelReply(tool_calls=(request,), usage=Usage(5, 1)), latency_ms=3
    )
    call = h.store.start_tool_call(turn_id=turn, index=0, request=request)
    h.lose_worker(run.id)

    context = h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE)

    assert context is not None
    assert context.lease_owner == "w2"
    (recorded,) = context.turns
    assert (recorded.id, recorded.index, recorded.ended) == (turn, 0, True)
    assert recorded.request_messages == (Message(role="user", content="hello"),)
    assert recorded.response_tool_calls == (request,)
    (state,) = recorded.tool_calls
    assert (state.id, state.status, state.attempt, state.arguments) == (
        call,
        ToolCallStatus.RUNNING,
        1,
        {"text": "hi"},
    )
    assert h.last(run.session_id, E.RUN_RESUMED) == {
        "reason": "worker_lost",
        "previous_worker": "w1",
        "worker": "w2",
    }
    # The worker that died (or only stalled) holds nothing any more.
    assert h.store.renew_lease(run.id, owner="w1", lease_seconds=LEASE) is False
    assert h.store.renew_lease(run.id, owner="w2", lease_seconds=LEASE) is True


@pytest.mark.parametrize("state", ["completed", "failed", "awaiting_input"])
def test_a_finished_or_waiting_run_cannot_be_claimed(h, state):
    if state == "awaiting_input":
        run, _ = h.waiting()
    else:
        run = h.claimed()
        h.store.finish_run(run_id=run.id, status=state)
    h.lose_worker(run.id)
    logged = h.events(run.session_id)

    assert h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE) is None
    assert h.store.get_run(run.id).status == state
    assert h.events(run.session_id) == logged


def test_claiming_an_unknown_run_is_not_found(h):
    with pytest.raises(NotFound):
        h.store.claim_run(uuid4(), owner="w1", lease_seconds=LEASE)


def _answered(h: Harness, session: SessionInfo, prompt: str, answer: str) -> RunInfo:
    """A run that called echo once and answered, as the loop records one."""
    run = h.claimed(session, prompt)
    turn = h.turn(run.id)
    request = ToolCallRequest(id="c1", name="echo", arguments={"text": prompt})
    h.store.complete_turn(
        turn_id=turn,
        reply=ModelReply(tool_calls=(request,), usage=Usage(5, 7)),
        latency_ms=1,
    )
    call = h.store.start_tool_call(turn_id=turn, index=0, request=request)
    h.store.finish_tool_call(tool_call_id=call, outcome=ToolOutcome(result={"text": prompt}))
    last = h.turn(run.id, index=1)
    h.store.complete_turn(
        turn_id=last, reply=ModelReply(text=answer, usage=Usage(9, 3)), latency_ms=1
    )
    return h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED, output=answer)


def test_a_run_starts_from_the_runs_before_it_on_its_branch_in_full(h):
    session = h.session()
    first = _answered(h, session, "remember my colour is red", "Got it.")
    failed = h.claimed(session, "this one failed")
    h.store.finish_run(run_id=failed.id, status=RunStatus.FAILED)
    second = _answered(h, session, "and my pet is a cat", "Noted.")
    run = h.run(session, "what is my colour?")
    # Created after it: it continues from this run, and is not part of its history.
    later = h.run(session, "a later run")

    context = h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)

    assert (run.previous_run_id, later.previous_run_id) == (second.id, run.id)
    assert [(r.id, r.input, r.status) for r in context.history] == [
        (first.id, "remember my colour is red", RunStatus.COMPLETED),
        (failed.id, "this one failed", RunStatus.FAILED),
        (second.id, "and my pet is a cat", RunStatus.COMPLETED),
    ]
    calling, answering = context.history[0].turns
    assert [c.name for c in calling.response_tool_calls] == ["echo"]
    assert calling.tool_calls[0].result == {"text": "remember my colour is red"}
    assert (answering.response_text, answering.output_tokens) == ("Got it.", 3)
    assert (context.summary, context.history_cut) == (None, False)


def test_a_summary_stands_for_the_branch_up_to_the_run_it_covers(h):
    session = h.session()
    first = _answered(h, session, "one", "1")
    second = _answered(h, session, "two", "2")
    writer = _answered(h, session, "three", "3")
    summary_id = h.store.record_summary(
        run_id=writer.id,
        through_run_id=second.id,
        previous_id=None,
        runs_covered=2,
        text="The user counted to two.",
        model="scripted",
        reply=ModelReply(text="The user counted to two.", usage=Usage(40, 6)),
        latency_ms=2,
    )
    run = h.run(session, "four")

    context = h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)

    assert context.summary is not None
    assert (context.summary.id, context.summary.text, context.summary.runs_covered) == (
        summary_id,
        "The user counted to two.",
        2,
    )
    assert [r.id for r in context.history] == [writer.id]
    event = h.last(session.id, E.HISTORY_SUMMARIZED)
    assert (event["through_run"], event["runs_covered"], event["input_tokens"]) == (
        str(second.id),
        2,
        40,
    )
    # The run that wrote it pays for it.
    assert h.store.get_run(writer.id).usage.input_tokens == 5 + 9 + 40
    assert first.id not in {r.id for r in context.history}


def test_a_redo_continues_from_the_point_before_the_run_it_redoes(h):
    session = h.session()
    first = _answered(h, session, "one", "1")
    second = _answered(h, session, "two", "2")
    edited = h.run(
        session,
        "two, edited",
        branch=Branch(previous_run_id=second.previous_run_id, edit_of_id=second.id),
    )

    context = h.store.claim_run(edited.id, owner="w1", lease_seconds=LEASE)

    assert (edited.previous_run_id, edited.edit_of_id) == (first.id, second.id)
    assert [r.id for r in context.history] == [first.id]
    assert h.last(session.id, E.RUN_CREATED)["edit_of"] == str(second.id)
    # The session goes on from the newest run: the edited one.
    assert h.run(session, "three").previous_run_id == edited.id


def test_a_fork_starts_a_session_whose_history_is_the_branch_up_to_its_run(h):
    session = h.session()
    first = _answered(h, session, "one", "1")
    _answered(h, session, "two", "2")

    fork = h.store.fork_session(source_run_id=first.id, owner_id=h.alice, title="")
    run = h.run(fork, "in the fork")
    context = h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)

    assert (fork.title, fork.agent, fork.owner_id) == ("A chat (fork)", "assistant", h.alice)
    assert run.previous_run_id == first.id
    assert [r.id for r in context.history] == [first.id]


def test_a_finished_tool_calls_result_is_read_back_by_its_owner_only(h):
    session = h.session()
    run = _answered(h, session, "echo me", "done")
    (call,) = [c for t in h.turns(run.id) for c in t.tool_calls]

    assert h.store.tool_result(tool_call_id=call.id, owner_id=h.alice) == ToolOutcome(
        result={"text": "echo me"}
    )
    assert h.store.tool_result(tool_call_id=call.id, owner_id=h.bob) is None
    assert h.store.tool_result(tool_call_id=uuid4(), owner_id=h.alice) is None


def test_a_run_whose_input_matches_nothing_starts_with_its_newest_facts(h):
    session = h.session()
    other = h.session(owner=h.bob, agent="concierge")
    h.store.store_memory(key="colour", value="blue", scope="global")
    h.store.store_memory(key="colour", value="green", scope="agent", agent="assistant")
    h.store.store_memory(key="colour", value="red", scope="user", user_id=h.alice)
    h.store.store_memory(key="pet", value="cat", scope="user", user_id=h.alice)
    h.store.store_memory(key="colour", value="teal", scope="session", session_id=session.id)
    h.store.store_memory(key="tea", value="green", scope="agent", agent="assistant")
    h.store.store_memory(key="motto", value="be kind", scope="global")
    h.store.store_memory(key="pet", value="dog", scope="session", session_id=other.id)

    context = h.store.claim_run(h.run(session).id, owner="w1", lease_seconds=LEASE)
    elsewhere = h.store.claim_run(
        h.store.create_run(
            session_id=other.id, agent="concierge", input="x", labels={}, metadata={}, policy={}
        ).id,
        owner="w1",
        lease_seconds=LEASE,
    )

    # Each key once, as resolution reads it (a more specific scope hides the same
    # key further out), the most recently updated first.
    assert context.memory == (
        ("global", "motto", "be kind"),
        ("agent", "tea", "green"),
        ("session", "colour", "teal"),
        ("user", "pet", "cat"),
    )
    assert elsewhere.memory == (
        ("session", "pet", "dog"),
        ("global", "motto", "be kind"),
        ("global", "colour", "blue"),
    )


def test_renewing_a_lease_keeps_the_run_held(h):
    run = h.claimed()

    assert h.store.renew_lease(run.id, owner="w1", lease_seconds=LEASE) is True
    assert h.store.renew_lease(run.id, owner="w2", lease_seconds=LEASE) is False
    assert h.store.renew_lease(uuid4(), owner="w1", lease_seconds=LEASE) is False
    assert h.store.expired_runs() == []
    h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED)
    assert h.store.renew_lease(run.id, owner="w1", lease_seconds=LEASE) is False


def test_expired_runs_are_the_top_level_runs_no_live_worker_holds(h):
    lost = h.claimed()
    h.lose_worker(lost.id)
    h.age(lost.id, 120)
    h.claimed()  # held by a live worker
    h.run()  # just created: its hand-off to an executor may still be on its way
    forgotten = h.run()
    h.age(forgotten.id, 60)
    released, _ = h.waiting()
    h.store.respond(
        released.id,
        tool_call_id=None,
        decision="approve",
        reason="",
        answer=None,
        decided_by_id=None,
    )
    h.age(released.id, 90)
    just_released, _ = h.waiting()
    h.store.respond(
        just_released.id,
        tool_call_id=None,
        decision="approve",
        reason="",
        answer=None,
        decided_by_id=None,
    )
    finished = h.claimed()
    h.store.finish_run(run_id=finished.id, status=RunStatus.COMPLETED)
    h.lose_worker(finished.id)
    h.age(finished.id, 120)
    parent = h.claimed()
    child = h.child(parent)
    h.age(child.id, 60)

    assert h.store.expired_runs() == [lost.id, released.id, forgotten.id]
    assert h.store.expired_runs(limit=2) == [lost.id, released.id]


# Turns


def test_a_turn_records_what_was_sent_and_what_came_back(h):
    run = h.claimed()

    turn = h.turn(run.id)
    used = Usage(
        input_tokens=7,
        output_tokens=12,
        cached_input_tokens=30,
        cache_write_tokens=4,
        reasoning_tokens=10,
    )
    h.store.complete_turn(
        turn_id=turn,
        reply=ModelReply(
            text="Hello!",
            usage=used,
            model="m-2",
            finish_reason=FinishReason.LENGTH,
            reasoning="Say hello.",
            reasoning_state=({"type": "thinking", "thinking": "Say hello.", "signature": "s"},),
        ),
        latency_ms=12,
        retries=2,
    )
    second = h.turn(run.id, index=1)
    h.store.complete_turn(
        turn_id=second, reply=ModelReply(text="Again.", usage=Usage(3, 1)), latency_ms=5
    )

    first_state, _ = h.turns(run.id)
    assert (first_state.id, first_state.index, first_state.ended) == (turn, 0, True)
    assert (first_state.response_text, first_state.response_tool_calls) == ("Hello!", ())
    assert first_state.finish_reason == FinishReason.LENGTH
    assert first_state.reasoning_state == (
        {"type": "thinking", "thinking": "Say hello.", "signature": "s"},
    )
    # Each kind is kept apart, on the turn's event and summed on the run.
    summed = h.store.get_run(run.id)
    assert summed.usage == used + Usage(3, 1)
    assert (summed.usage.total_tokens, summed.cost) == (57, None)
    started, completed, message, usage = h.events(run.session_id)[3:7]
    assert [started["type"], completed["type"], message["type"], usage["type"]] == [
        E.TURN_STARTED,
        E.TURN_COMPLETED,
        E.MESSAGE_COMPLETED,
        E.USAGE,
    ]
    assert started["data"] == {"turn": str(turn), "index": 0, "model": "scripted"}
    assert completed["data"] == {
        "turn": str(turn),
        "index": 0,
        "tool_calls": 0,
        "latency_ms": 12,
        "finish_reason": "length",
        "truncated": True,
    }
    assert message["data"] == {"turn": str(turn), "role": "assistant", "text": "Hello!"}
    assert usage["data"] == {
        "turn": str(turn),
        "input_tokens": 7,
        "output_tokens": 12,
        "cached_input_tokens": 30,
        "cache_write_tokens": 4,
        "reasoning_tokens": 10,
        "total_tokens": 53,
        "cost": None,
    }


def test_a_turns_cost_is_its_usage_at_the_price_in_force_when_it_was_recorded(h):
    run = h.claimed()
    now = dt.datetime.now(tz=dt.UTC)
    old = Price(input=Decimal("2"), output=Decimal("8"))
    current = Price(
        input=Decimal("3"),
        output=Decimal("15"),
        cached_input=Decimal("0.3"),
        cache_write=Decimal("3.75"),
        reasoning=Decimal("20"),
    )
    h.price("openai:gpt-x", now - dt.timedelta(days=30), old)
    h.price("openai:gpt-x", now - dt.timedelta(days=1), current)
    # A price that takes effect later changes nothing recorded now.
    h.price("openai:gpt-x", now + dt.timedelta(days=1), Price(Decimal(100), Decimal(100)))
    used = Usage(1000, 500, cached_input_tokens=2000, cache_write_tokens=100, reasoning_tokens=200)

    priced = h.turn(run.id, model="openai:gpt-x")
    h.store.complete_turn(turn_id=priced, reply=ModelReply(text="a", usage=used), latency_ms=1)
    unpriced = h.turn(run.id, index=1, model="local:qwen3")
    h.store.complete_turn(
        turn_id=unpriced, reply=ModelReply(text="b", usage=Usage(10, 10)), latency_ms=1
    )

    # 1000 x 3 + 2000 x 0.3 + 100 x 3.75 + 300 x 15 + 200 x 20, per million.
    expected = Decimal("0.012475")
    assert cost_of(used, current) == expected
    costs = [e["data"]["cost"] for e in h.events(run.session_id) if e["type"] == E.USAGE]
    assert costs == ["0.012475", None]
    assert h.store.get_run(run.id).cost == expected
    ended = h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED, output="b")
    assert ended.cost == expected
    summed = h.last(run.session_id, E.RUN_COMPLETED)["usage"]
    assert (summed["cost"], summed["unpriced_turns"]) == ("0.012475", 1)


def test_a_retried_model_call_is_recorded_with_its_error_and_delay(h):
    run = h.claimed()
    turn = h.turn(run.id)

    h.store.model_retry(
        turn_id=turn,
        attempt=1,
        error_kind="rate_limited",
        message="openai:gpt-x: the provider is rate limiting us (HTTP 429)",
        delay_seconds=2.25,
    )

    # In plain words: the provider's own are for operators (the log).
    assert h.last(run.session_id, E.MODEL_RETRY) == {
        "turn": str(turn),
        "attempt": 1,
        "error_kind": "rate_limited",
        "message": ERROR_SENTENCES["rate_limited"],
        "delay_seconds": 2.25,
    }


def test_a_turn_that_only_calls_tools_writes_no_message(h):
    run = h.claimed()
    turn = h.turn(run.id)
    calls = (
        ToolCallRequest(id="a", name="echo", arguments={"text": "1"}),
        ToolCallRequest(id="b", name="clock_now", arguments={}),
    )

    h.store.complete_turn(turn_id=turn, reply=ModelReply(tool_calls=calls), latency_ms=1)

    assert h.types(run.session_id)[-2:] == [E.TURN_COMPLETED, E.USAGE]
    assert h.last(run.session_id, E.TURN_COMPLETED)["tool_calls"] == 2
    (state,) = h.turns(run.id)
    assert (state.response_text, state.response_tool_calls) == ("", calls)


def test_a_reply_and_the_calls_it_asks_for_are_recorded_in_one_step(h):
    run = h.claimed()
    turn = h.turn(run.id)
    asked = (
        ToolCallRequest(id="a", name="echo", arguments={"text": "1"}),
        ToolCallRequest(id="b", name="memory_forget_all", arguments={}),
        ToolCallRequest(id="c", name="echo", arguments={"text": "3"}),
    )
    plans = [
        PlannedCall(0, asked[0], start=True),
        PlannedCall(1, asked[1], start=False, requires_approval=True),
        PlannedCall(2, asked[2], start=False),
    ]

    recorded = h.store.complete_turn(
        turn_id=turn, reply=ModelReply(tool_calls=asked), latency_ms=1, calls=plans
    )

    assert recorded.cancel_reason is None
    states = [h.call_state(run.id, call) for call in recorded.tool_call_ids]
    assert [(s.call_id, s.index, s.status, s.attempt) for s in states] == [
        ("a", 0, ToolCallStatus.RUNNING, 1),
        ("b", 1, ToolCallStatus.SCHEDULED, 0),
        ("c", 2, ToolCallStatus.SCHEDULED, 0),
    ]
    assert h.types(run.session_id)[-7:] == [
        E.TURN_COMPLETED,
        E.USAGE,
        E.TOOL_CALL_SCHEDULED,
        E.TOOL_CALL_STARTED,
        E.TOOL_CALL_SCHEDULED,
        E.TOOL_CALL_APPROVAL_REQUESTED,
        E.TOOL_CALL_SCHEDULED,
    ]
    assert _ids(h.events(run.session_id)) == list(range(1, len(h.events(run.session_id)) + 1))


def test_a_run_asked_to_stop_records_the_reply_and_none_of_its_calls(h):
    run = h.claimed()
    turn = h.turn(run.id)
    h.store.request_cancel(run.id, "user_requested")
    asked = (ToolCallRequest(id="a", name="echo", arguments={"text": "1"}),)
    logged = len(h.events(run.session_id))

    recorded = h.store.complete_turn(
        turn_id=turn,
        reply=ModelReply(tool_calls=asked),
        latency_ms=1,
        calls=[PlannedCall(0, asked[0], start=True)],
    )

    assert recorded == TurnRecorded("user_requested", ())
    (state,) = h.turns(run.id)
    assert (state.ended, state.response_tool_calls, state.tool_calls) == (True, asked, ())
    assert h.types(run.session_id)[logged:] == [E.TURN_COMPLETED, E.USAGE]
    assert _ids(h.events(run.session_id)) == list(range(1, len(h.events(run.session_id)) + 1))


def test_what_a_step_says_of_a_cancel_request_is_what_cancel_requested_says(h):
    run = h.claimed()
    turn = h.turn(run.id)
    call = h.store.start_tool_call(turn_id=turn, index=0, request=_call_request())
    first = h.store.finish_tool_call(tool_call_id=call, outcome=ToolOutcome(result=1))
    h.store.request_cancel(run.id, "user_requested")
    second = h.store.complete_turn(turn_id=turn, reply=ModelReply(text="x"), latency_ms=1)

    assert (first, second.cancel_reason) == (None, "user_requested")
    assert h.store.cancel_requested(run.id) == "user_requested"


def test_the_answer_and_the_runs_end_are_one_step(h):
    run = h.claimed()
    turn = h.turn(run.id)

    ended = h.store.complete_turn_and_run(
        turn_id=turn, reply=ModelReply(text="Done.", usage=Usage(4, 2)), latency_ms=3
    )

    assert (ended.status, ended.output, ended.usage.total_tokens) == (
        RunStatus.COMPLETED,
        "Done.",
        6,
    )
    assert h.store.get_run(run.id) == ended
    assert h.types(run.session_id)[-4:] == [
        E.TURN_COMPLETED,
        E.MESSAGE_COMPLETED,
        E.USAGE,
        E.RUN_COMPLETED,
    ]
    (state,) = h.turns(run.id)
    assert (state.ended, state.response_text) == (True, "Done.")


def test_an_answer_for_a_run_that_is_not_running_records_nothing(h):
    run = h.claimed()
    turn = h.turn(run.id)
    h.store.finish_run(run_id=run.id, status=RunStatus.FAILED)
    logged = h.events(run.session_id)

    with pytest.raises(IllegalTransition):
        h.store.complete_turn_and_run(turn_id=turn, reply=ModelReply(text="late"), latency_ms=1)

    assert h.events(run.session_id) == logged
    (state,) = h.turns(run.id)
    assert state.response_text == ""


def test_a_turn_index_is_used_once_per_run(h):
    run = h.claimed()
    h.turn(run.id, index=0)
    logged = h.events(run.session_id)

    with pytest.raises(IllegalTransition):
        h.turn(run.id, index=0)

    assert h.events(run.session_id) == logged
    assert len(h.turns(run.id)) == 1


# Tool calls


def _call_request(name: str = "echo") -> ToolCallRequest:
    return ToolCallRequest(id="call-1", name=name, arguments={"text": "hi"})


def test_a_scheduled_call_begins_and_succeeds(h):
    run = h.claimed()
    turn = h.turn(run.id)

    call = h.store.schedule_tool_call(
        turn_id=turn, index=0, request=_call_request(), requires_approval=False
    )
    scheduled = h.call_state(run.id, call)
    attempt = h.store.begin_tool_call(tool_call_id=call)
    running = h.call_state(run.id, call)
    h.store.finish_tool_call(tool_call_id=call, outcome=ToolOutcome(result={"echo": "hi"}))

    assert (scheduled.status, scheduled.attempt, scheduled.call_id) == (
        ToolCallStatus.SCHEDULED,
        0,
        "call-1",
    )
    assert (attempt, running.status) == (1, ToolCallStatus.RUNNING)
    done = h.call_state(run.id, call)
    assert (done.status, done.result, done.error_kind, done.attempt) == (
        ToolCallStatus.SUCCEEDED,
        {"echo": "hi"},
        "",
        1,
    )
    events = h.events(run.session_id)[-3:]
    assert [e["type"] for e in events] == [
        E.TOOL_CALL_SCHEDULED,
        E.TOOL_CALL_STARTED,
        E.TOOL_CALL_SUCCEEDED,
    ]
    assert events[0]["data"] == {
        "tool_call": str(call),
        "name": "echo",
        "arguments": {"text": "hi"},
        "requires_approval": False,
    }
    assert events[1]["data"] == {"tool_call": str(call), "name": "echo", "attempt": 1}
    assert events[2]["data"]["result"] == {"echo": "hi"}
    assert set(events[2]["data"]) == {"tool_call", "name", "duration_ms", "result"}
    assert events[2]["data"]["duration_ms"] >= 0


def test_a_call_that_needs_approval_asks_for_it(h):
    run = h.claimed()

    call = h.store.schedule_tool_call(
        turn_id=h.turn(run.id), index=0, request=_call_request(), requires_approval=True
    )

    state = h.call_state(run.id, call)
    assert (state.status, state.requires_approval) == (ToolCallStatus.SCHEDULED, True)
    assert h.types(run.session_id)[-2:] == [E.TOOL_CALL_SCHEDULED, E.TOOL_CALL_APPROVAL_REQUESTED]
    assert h.last(run.session_id, E.TOOL_CALL_APPROVAL_REQUESTED) == {
        "tool_call": str(call),
        "name": "echo",
        "arguments": {"text": "hi"},
    }


def test_a_started_call_is_scheduled_and_running_in_one_step(h):
    run = h.claimed()

    call = h.store.start_tool_call(turn_id=h.turn(run.id), index=0, request=_call_request())

    state = h.call_state(run.id, call)
    assert (state.status, state.attempt, state.requires_approval) == (
        ToolCallStatus.RUNNING,
        1,
        False,
    )
    assert h.types(run.session_id)[-2:] == [E.TOOL_CALL_SCHEDULED, E.TOOL_CALL_STARTED]


def test_an_interrupted_call_begins_again_as_its_next_attempt(h):
    run = h.claimed()
    call = h.store.start_tool_call(turn_id=h.turn(run.id), index=0, request=_call_request())

    assert h.store.begin_tool_call(tool_call_id=call) == 2

    assert h.call_state(run.id, call).attempt == 2
    assert h.last(run.session_id, E.TOOL_CALL_STARTED)["attempt"] == 2


def test_a_failed_call_records_its_error_and_no_result(h):
    run = h.claimed()
    call = h.store.start_tool_call(turn_id=h.turn(run.id), index=0, request=_call_request())

    h.store.finish_tool_call(
        tool_call_id=call,
        outcome=ToolOutcome(result={"ignored": True}, error_kind="timeout", error_message="slow"),
    )

    state = h.call_state(run.id, call)
    assert (state.status, state.result, state.error_kind, state.error_message) == (
        ToolCallStatus.FAILED,
        None,
        "timeout",
        "slow",
    )
    failed = h.last(run.session_id, E.TOOL_CALL_FAILED)
    assert set(failed) == {"tool_call", "name", "duration_ms", "error"}
    assert failed["error"] == {"kind": "timeout", "message": "slow"}


@pytest.mark.parametrize(
    "move",
    [
        "finish a scheduled call",
        "finish a finished call",
        "begin a finished call",
        "begin a denied call",
    ],
)
def test_a_tool_call_moves_only_forward(h, move):
    run = h.claimed()
    turn = h.turn(run.id)
    call = h.store.schedule_tool_call(
        turn_id=turn, index=0, request=_call_request(), requires_approval=False
    )
    if move == "begin a denied call":
        run, call = h.waiting("approval")
        h.store.respond(
            run.id, tool_call_id=call, decision="deny", reason="", answer=None, decided_by_id=None
        )
    elif move != "finish a scheduled call":
        h.store.begin_tool_call(tool_call_id=call)
        h.store.finish_tool_call(tool_call_id=call, outcome=ToolOutcome(result=1))
    before = h.call_state(run.id, call)
    logged = h.events(run.session_id)

    def step() -> object:
        if move.startswith("finish"):
            return h.store.finish_tool_call(tool_call_id=call, outcome=ToolOutcome(result=2))
        return h.store.begin_tool_call(tool_call_id=call)

    with pytest.raises(IllegalTransition):
        step()

    assert h.call_state(run.id, call) == before
    assert h.events(run.session_id) == logged


def test_a_tool_call_index_is_used_once_per_turn(h):
    run = h.claimed()
    turn = h.turn(run.id)
    h.store.start_tool_call(turn_id=turn, index=0, request=_call_request())
    logged = h.events(run.session_id)

    with pytest.raises(IllegalTransition):
        h.store.start_tool_call(turn_id=turn, index=0, request=_call_request())

    assert h.events(run.session_id) == logged
    assert len(h.turns(run.id)[0].tool_calls) == 1


@pytest.mark.parametrize(
    "step",
    [
        "complete_turn",
        "schedule_tool_call",
        "start_tool_call",
        "begin_tool_call",
        "finish_tool_call",
        "start_turn",
        "await_input",
        "finish_run",
        "policy_decision",
        "request_cancel",
        "respond",
        "create_child_run",
    ],
)
def test_a_step_naming_an_unknown_record_is_not_found(h, step):
    missing = uuid4()
    steps: dict[str, Callable[[], object]] = {
        "complete_turn": lambda: h.store.complete_turn(
            turn_id=missing, reply=ModelReply(text="x"), latency_ms=1
        ),
        "schedule_tool_call": lambda: h.store.schedule_tool_call(
            turn_id=missing, index=0, request=_call_request(), requires_approval=False
        ),
        "start_tool_call": lambda: h.store.start_tool_call(
            turn_id=missing, index=0, request=_call_request()
        ),
        "begin_tool_call": lambda: h.store.begin_tool_call(tool_call_id=missing),
        "finish_tool_call": lambda: h.store.finish_tool_call(
            tool_call_id=missing, outcome=ToolOutcome(result=1)
        ),
        "start_turn": lambda: h.store.start_turn(run_id=missing, index=0, model="m", messages=[]),
        "await_input": lambda: h.store.await_input(
            run_id=missing, kind="approval", tool_call_id=uuid4()
        ),
        "finish_run": lambda: h.store.finish_run(run_id=missing, status=RunStatus.COMPLETED),
        "policy_decision": lambda: h.store.policy_decision(
            run_id=missing, rule="r", verdict="stop", reason="x"
        ),
        "request_cancel": lambda: h.store.request_cancel(missing, "x"),
        "respond": lambda: h.store.respond(
            missing,
            tool_call_id=None,
            decision="approve",
            reason="",
            answer=None,
            decided_by_id=None,
        ),
        "create_child_run": lambda: h.store.create_child_run(
            parent_run_id=missing,
            parent_tool_call_id=uuid4(),
            agent="assistant",
            input="x",
            labels={},
            policy={},
        ),
    }

    with pytest.raises(NotFound):
        steps[step]()


# Waiting for input


def test_a_waiting_run_holds_no_lease(h):
    run = h.claimed()
    call = h.store.schedule_tool_call(
        turn_id=h.turn(run.id), index=0, request=_call_request("ask_user"), requires_approval=False
    )

    waiting = h.store.await_input(
        run_id=run.id, kind="question", tool_call_id=call, question="Which city?"
    )

    assert waiting.status == RunStatus.AWAITING_INPUT
    assert h.last(run.session_id, E.RUN_AWAITING_INPUT) == {
        "kind": "question",
        "tool_call": str(call),
        "question": "Which city?",
    }
    assert h.store.renew_lease(run.id, owner="w1", lease_seconds=LEASE) is False
    assert h.store.expired_runs() == []


def test_only_a_running_run_can_wait_for_input(h):
    run = h.run()

    with pytest.raises(IllegalTransition):
        h.store.await_input(run_id=run.id, kind="approval", tool_call_id=uuid4())

    assert h.store.get_run(run.id).status == RunStatus.PENDING


# Ending a run


@pytest.mark.parametrize(
    ("status", "error", "event"),
    [
        (
            RunStatus.COMPLETED,
            None,
            {
                "output": "All done.",
                "usage": {
                    "input_tokens": 4,
                    "output_tokens": 2,
                    "cached_input_tokens": 0,
                    "cache_write_tokens": 0,
                    "reasoning_tokens": 0,
                    "total_tokens": 6,
                    "cost": None,
                    "unpriced_turns": 1,
                },
            },
        ),
        (
            RunStatus.FAILED,
            RunError(kind="rate_limited", message="Slow down.", retryable=True),
            # The event, which the run's owner reads, says it in plain words; the run
            # keeps the provider's (goaai.runtime.public_errors).
            {
                "error": {
                    "kind": "rate_limited",
                    "message": ERROR_SENTENCES["rate_limited"],
                    "retryable": True,
                }
            },
        ),
        (
            RunStatus.TIMED_OUT,
            RunError(kind="timeout", message="Out of time."),
            {"error": {"kind": "timeout", "message": "Out of time.", "retryable": False}},
        ),
        (RunStatus.CANCELED, None, {"reason": "", "stopped_by": None}),
    ],
    ids=["completed", "failed", "timed_out", "canceled"],
)
def test_ending_a_run_records_how_and_cuts_its_open_calls_short(h, status, error, event):
    run = h.claimed()
    turn = h.turn(run.id)
    h.store.complete_turn(turn_id=turn, reply=ModelReply(usage=Usage(4, 2)), latency_ms=1)
    done = h.store.start_tool_call(turn_id=turn, index=0, request=_call_request())
    h.store.finish_tool_call(tool_call_id=done, outcome=ToolOutcome(result="ok"))
    running = h.store.start_tool_call(turn_id=turn, index=1, request=_call_request())
    scheduled = h.store.schedule_tool_call(
        turn_id=turn, index=2, request=_call_request(), requires_approval=False
    )
    output = "All done." if status == RunStatus.COMPLETED else ""

    ended = h.store.finish_run(run_id=run.id, status=status, output=output, error=error)

    assert (ended.status, ended.output, ended.error) == (status, output, error)
    assert ended.ended_at is not None
    assert h.store.get_run(run.id) == ended
    states = {c.id: c.status for t in h.turns(run.id) for c in t.tool_calls}
    assert states == {
        done: ToolCallStatus.SUCCEEDED,
        running: ToolCallStatus.CANCELED,
        scheduled: ToolCallStatus.CANCELED,
    }
    tail = h.events(run.session_id)[-3:]
    assert [e["type"] for e in tail] == [
        E.TOOL_CALL_CANCELED,
        E.TOOL_CALL_CANCELED,
        f"run.{status}",
    ]
    assert {e["data"]["tool_call"] for e in tail[:2]} == {str(running), str(scheduled)}
    for canceled in tail[:2]:
        assert set(canceled["data"]) == {"tool_call", "name", "duration_ms", "reason"}
        assert canceled["data"]["reason"] == f"the run {status}"
    assert tail[2]["data"] == event


def test_a_failure_without_a_reason_is_internal(h):
    run = h.claimed()

    ended = h.store.finish_run(run_id=run.id, status=RunStatus.FAILED)

    assert ended.error == RunError(kind="internal", message="The run failed.")


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
def test_a_run_ends_once(h, status):
    run = h.claimed()
    h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED, output="first")
    logged = h.events(run.session_id)

    with pytest.raises(IllegalTransition):
        h.store.finish_run(run_id=run.id, status=status, output="second")

    assert h.store.get_run(run.id).output == "first"
    assert h.events(run.session_id) == logged


def test_a_run_that_never_started_cannot_complete(h):
    run = h.run()

    with pytest.raises(IllegalTransition):
        h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED, output="x")

    assert h.store.get_run(run.id).status == RunStatus.PENDING


def test_a_policy_decision_is_logged_for_the_run(h):
    run = h.claimed()

    h.store.policy_decision(run_id=run.id, rule="max_turns", verdict="stop", reason="3 turns")

    (event,) = [e for e in h.events(run.session_id) if e["type"] == E.POLICY_DECISION]
    assert (event["run"], event["data"]) == (
        str(run.id),
        {"rule": "max_turns", "verdict": "stop", "reason": "3 turns"},
    )


# Child runs


def _parent_calling_a_child(h: Harness) -> tuple[RunInfo, UUID, RunInfo]:
    """A running parent whose ask_assistant call started a child run."""
    parent = h.claimed(prompt="ask the assistant what is 6*7")
    h.store.store_memory(key="pet", value="cat", scope="session", session_id=parent.session_id)
    turn = h.turn(parent.id)
    call = h.store.start_tool_call(
        turn_id=turn,
        index=0,
        request=ToolCallRequest(id="c", name="ask_assistant", arguments={"prompt": "6*7"}),
    )
    child = h.store.create_child_run(
        parent_run_id=parent.id,
        parent_tool_call_id=call,
        agent="assistant",
        input="what is 6*7",
        labels={"tier": "free"},
        policy={"max_tool_calls": 3},
        policy_decisions=[Decision(rule="free_tier", verdict="tightened", reason="why")],
    )
    return parent, call, child


def test_a_child_run_is_linked_to_the_call_that_started_it(h):
    parent, call, child = _parent_calling_a_child(h)

    assert (child.session_id, child.parent_run_id, child.status) == (
        parent.session_id,
        parent.id,
        RunStatus.PENDING,
    )
    assert (child.agent, child.input, child.labels) == (
        "assistant",
        "what is 6*7",
        {"tier": "free"},
    )
    created, decided, linked = h.events(parent.session_id)[-3:]
    assert (created["type"], created["run"]) == (E.RUN_CREATED, str(child.id))
    assert created["data"]["parent_run"] == str(parent.id)
    assert (decided["type"], decided["run"], decided["data"]["rule"]) == (
        E.POLICY_DECISION,
        str(child.id),
        "free_tier",
    )
    assert (linked["type"], linked["run"]) == (E.RUN_CHILD_LINKED, str(parent.id))
    assert linked["data"] == {"child_run": str(child.id), "parent_tool_call": str(call)}
    context = h.store.claim_run(child.id, owner="w2", lease_seconds=LEASE)
    assert (context.depth, context.parent_run_id, context.history) == (1, parent.id, ())
    assert context.policy == {"max_tool_calls": 3}
    assert context.memory == (("session", "pet", "cat"),)


@pytest.mark.parametrize("outcome", ["completed", "failed"])
def test_a_child_that_ends_settles_the_call_its_parent_waits_on(h, outcome):
    parent, call, child = _parent_calling_a_child(h)
    h.store.claim_run(child.id, owner="w2", lease_seconds=LEASE)
    h.store.await_input(
        run_id=parent.id, kind="delegated", tool_call_id=call, child_run_id=child.id
    )
    if outcome == "completed":
        h.store.finish_run(run_id=child.id, status=RunStatus.COMPLETED, output="42")
    else:
        h.store.finish_run(
            run_id=child.id,
            status=RunStatus.FAILED,
            error=RunError(kind="internal", message="boom"),
        )

    assert h.store.settle_child(child.id) == parent.id

    state = h.call_state(parent.id, call)
    assert h.store.get_run(parent.id).status == RunStatus.RUNNING
    ended, resumed = h.events(parent.session_id)[-2:]
    if outcome == "completed":
        result = {"agent": "assistant", "run": str(child.id), "answer": "42"}
        assert (state.status, state.result) == (ToolCallStatus.SUCCEEDED, result)
        assert (ended["type"], ended["data"]["result"]) == (E.TOOL_CALL_SUCCEEDED, result)
    else:
        message = "The assistant agent did not answer: boom"
        assert (state.status, state.error_kind, state.error_message) == (
            ToolCallStatus.FAILED,
            "domain_rejection",
            message,
        )
        assert ended["type"] == E.TOOL_CALL_FAILED
        assert ended["data"]["error"] == {"kind": "domain_rejection", "message": message}
    assert ended["run"] == str(parent.id)
    assert resumed["data"]["answered"] == "delegated"
    assert resumed["data"]["child_run"] == str(child.id)
    # Settled once: the parent waits for nothing now.
    assert h.store.settle_child(child.id) is None


def test_settling_a_child_nobody_waits_for_changes_nothing(h):
    parent, call, child = _parent_calling_a_child(h)
    h.store.claim_run(child.id, owner="w2", lease_seconds=LEASE)

    # Still running; and, once ended, its parent does not wait for it.
    assert h.store.settle_child(child.id) is None
    h.store.finish_run(run_id=child.id, status=RunStatus.COMPLETED, output="42")
    logged = h.events(parent.session_id)
    assert h.store.settle_child(child.id) is None
    assert h.store.settle_child(parent.id) is None
    assert h.store.settle_child(uuid4()) is None

    assert h.events(parent.session_id) == logged
    assert h.call_state(parent.id, call).status == ToolCallStatus.RUNNING


def test_a_parent_that_fails_stops_the_children_still_open(h):
    parent, call, child = _parent_calling_a_child(h)

    h.store.finish_run(run_id=parent.id, status=RunStatus.FAILED)

    stopped = h.store.get_run(child.id)
    assert stopped.status == RunStatus.CANCELED
    assert h.store.cancel_requested(child.id) == f"its parent run {parent.id} ended failed"
    assert h.call_state(parent.id, call).status == ToolCallStatus.CANCELED
    assert h.types(parent.session_id)[-3:] == [E.RUN_CANCELED, E.TOOL_CALL_CANCELED, E.RUN_FAILED]


def test_a_parent_waiting_for_its_child_is_not_answered_in_its_place(h):
    parent, call, child = _parent_calling_a_child(h)
    h.store.await_input(
        run_id=parent.id, kind="delegated", tool_call_id=call, child_run_id=child.id
    )

    with pytest.raises(IllegalTransition):
        h.store.respond(
            parent.id,
            tool_call_id=call,
            decision="approve",
            reason="",
            answer=None,
            decided_by_id=None,
        )

    assert h.store.get_run(parent.id).status == RunStatus.AWAITING_INPUT


# Memory


def test_storing_memory_creates_then_updates_one_entry(h):
    session = h.session()

    created = h.store.store_memory(
        key=" colour ",
        value="green",
        scope="session",
        session_id=session.id,
        written_by_user=h.alice,
    )
    updated = h.store.store_memory(
        key="colour", value={"shade": "dark"}, scope="session", session_id=session.id
    )

    assert (created.key, created.value, created.scope, created.version) == (
        "colour",
        "green",
        "session",
        1,
    )
    assert (created.session_id, created.user_id, created.agent) == (session.id, None, "")
    assert (updated.id, updated.value, updated.version) == (created.id, {"shade": "dark"}, 2)
    assert h.store.get_memory(key="colour", scope="session", session_id=session.id) == updated
    first, second = [e for e in h.events(session.id) if e["type"] == E.MEMORY_STORED]
    assert first["data"] == {
        "entry": str(created.id),
        "key": "colour",
        "scope": "session",
        "version": 1,
        "action": "created",
        "written_by": {"kind": "user", "user_id": h.alice, "run_id": None, "tool_call_id": None},
    }
    assert (second["data"]["action"], second["data"]["version"]) == ("updated", 2)
    assert second["data"]["written_by"]["kind"] == "system"
    assert first["run"] is None


def test_a_versioned_write_changes_only_the_version_it_names(h):
    session = h.session()

    first = h.store.store_memory(
        key="k", value=1, scope="session", session_id=session.id, expected_version=0
    )
    with pytest.raises(MemoryConflict) as only_create:
        h.store.store_memory(
            key="k", value=2, scope="session", session_id=session.id, expected_version=0
        )
    second = h.store.store_memory(
        key="k", value=3, scope="session", session_id=session.id, expected_version=1
    )
    with pytest.raises(MemoryConflict) as stale:
        h.store.store_memory(
            key="k", value=4, scope="session", session_id=session.id, expected_version=1
        )
    with pytest.raises(MemoryConflict) as missing:
        h.store.store_memory(
            key="new", value=5, scope="session", session_id=session.id, expected_version=3
        )

    assert (first.version, second.version, second.value) == (1, 2, 3)
    assert (only_create.value.current.version, only_create.value.current.value) == (1, 1)
    assert (stale.value.current.version, stale.value.current.value) == (2, 3)
    assert missing.value.current is None
    assert h.store.get_memory(key="k", scope="session", session_id=session.id).value == 3
    assert h.store.get_memory(key="new", scope="session", session_id=session.id) is None
    stored = [e for e in h.events(session.id) if e["type"] == E.MEMORY_STORED]
    assert [e["data"]["version"] for e in stored] == [1, 2]


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        ({"scope": "planet"}, "Unknown memory scope 'planet'"),
        ({"scope": "session"}, "A session-scoped entry needs a session."),
        ({"scope": "user", "user_id": "alice", "agent": "assistant"}, "cannot name a agent"),
        ({"scope": "global", "agent": "assistant"}, "cannot name a agent"),
        ({"scope": "global", "key": "   "}, "A memory key cannot be empty."),
        ({"scope": "global", "key": "k" * 201}, "at most 200 characters"),
    ],
)
def test_a_memory_write_names_exactly_its_scopes_owner(h, owner, message):
    if owner.get("user_id") == "alice":
        owner["user_id"] = h.alice
    arguments = {"key": "k", "value": 1, **owner}

    with pytest.raises(InvalidMemoryScope, match=message):
        h.store.store_memory(**arguments)

    assert h.store.memory_keys(scope="global") == []


def test_resolving_a_key_prefers_the_most_specific_scope(h):
    session = h.session()
    stranger = h.session(owner=h.bob, agent="concierge")
    writes = [
        ("global", {}),
        ("agent", {"agent": "assistant"}),
        ("user", {"user_id": h.alice}),
        ("session", {"session_id": session.id}),
    ]
    seen = []
    for scope, owner in writes:
        h.store.store_memory(key="colour", value=scope, scope=scope, **owner)
        seen.append(h.store.resolve_memory(key="colour", session_id=session.id).scope)
    # Another user's session with another agent sees none of Alice's or the assistant's.
    assert h.store.resolve_memory(key="colour", session_id=stranger.id).value == "global"
    for scope, owner in reversed(writes):
        seen.append(h.store.resolve_memory(key="colour", session_id=session.id).value)
        h.store.delete_memory(key="colour", scope=scope, **owner)

    assert seen == [
        "global",
        "agent",
        "user",
        "session",
        "session",
        "user",
        "agent",
        "global",
    ]
    assert h.store.resolve_memory(key="colour", session_id=session.id) is None
    assert h.store.resolve_memory(key="colour", session_id=stranger.id) is None
    with pytest.raises(NotFound):
        h.store.resolve_memory(key="colour", session_id=uuid4())


def test_memory_keys_are_one_owners_keys_in_order(h):
    session, other = h.session(), h.session()
    for key in ("b", "a", "c"):
        h.store.store_memory(key=key, value=1, scope="session", session_id=session.id)
    h.store.store_memory(key="z", value=1, scope="session", session_id=other.id)
    h.store.store_memory(key="u", value=1, scope="user", user_id=h.alice)

    assert h.store.memory_keys(scope="session", session_id=session.id) == ["a", "b", "c"]
    assert h.store.memory_keys(scope="user", user_id=h.alice) == ["u"]
    assert h.store.memory_keys(scope="user", user_id=h.bob) == []
    assert h.store.memory_keys(scope="global") == []


def test_deleting_memory_removes_the_entry_once(h):
    session = h.session()
    entry = h.store.store_memory(key="k", value=1, scope="session", session_id=session.id)
    h.store.store_memory(key="k", value=2, scope="session", session_id=session.id)

    with pytest.raises(MemoryConflict) as stale:
        h.store.delete_memory(key="k", scope="session", session_id=session.id, expected_version=1)
    deleted = h.store.delete_memory(
        key="k", scope="session", session_id=session.id, expected_version=2
    )
    again = h.store.delete_memory(key="k", scope="session", session_id=session.id)

    assert stale.value.current.version == 2
    assert (deleted, again) == (True, False)
    assert h.store.get_memory(key="k", scope="session", session_id=session.id) is None
    assert h.store.memory_keys(scope="session", session_id=session.id) == []
    assert h.last(session.id, E.MEMORY_DELETED) == {
        "entry": str(entry.id),
        "key": "k",
        "scope": "session",
    }
    assert h.types(session.id).count(E.MEMORY_DELETED) == 1


def test_memory_a_run_writes_for_its_user_is_logged_in_the_runs_session(h):
    run = h.claimed()
    call = h.store.start_tool_call(turn_id=h.turn(run.id), index=0, request=_call_request())

    h.store.store_memory(
        key="name",
        value="Ada",
        scope="user",
        user_id=h.alice,
        written_by_run=run.id,
        written_by_tool_call=call,
    )
    h.store.delete_memory(
        key="name", scope="user", user_id=h.alice, written_by_run=run.id, written_by_tool_call=call
    )
    # A change outside any run and session belongs to no session's log.
    h.store.store_memory(key="name", value="Bea", scope="user", user_id=h.alice)

    stored, deleted = [
        e for e in h.events(run.session_id) if e["type"] in (E.MEMORY_STORED, E.MEMORY_DELETED)
    ]
    assert (stored["run"], deleted["run"]) == (str(run.id), str(run.id))
    assert stored["data"]["written_by"] == {
        "kind": "run",
        "user_id": None,
        "run_id": str(run.id),
        "tool_call_id": str(call),
    }
    assert deleted["data"]["scope"] == "user"
    assert h.store.get_memory(key="name", scope="user", user_id=h.alice).value == "Bea"


# The event log


def test_the_log_numbers_a_sessions_events_from_one_without_gaps(h):
    session = h.session()
    run = h.run(session, policy_decisions=[Decision(rule="r", verdict="tightened", reason="x")])
    h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)
    turn = h.turn(run.id)
    request = ToolCallRequest(id="c1", name="calculator", arguments={"expression": "6*7"})
    h.store.complete_turn(
        turn_id=turn, reply=ModelReply(tool_calls=(request,), usage=Usage(9, 3)), latency_ms=4
    )
    call = h.store.start_tool_call(turn_id=turn, index=0, request=request)
    h.store.store_memory(
        key="answer", value=42, scope="session", session_id=session.id, written_by_run=run.id
    )
    h.store.finish_tool_call(tool_call_id=call, outcome=ToolOutcome(result={"value": 42}))
    second = h.turn(run.id, index=1)
    h.store.complete_turn(
        turn_id=second, reply=ModelReply(text="42", usage=Usage(12, 1)), latency_ms=2
    )
    h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED, output="42")
    h.store.end_session(session.id)
    other = h.session()

    events = h.events(session.id)

    assert _ids(events) == list(range(1, len(events) + 1))
    assert [(e["type"], sorted(e["data"])) for e in events] == [
        (E.SESSION_CREATED, ["agent", "metadata", "title"]),
        (
            E.RUN_CREATED,
            [
                "agent",
                "edit_of",
                "input",
                "labels",
                "parent_run",
                "previous_run",
                "regenerates",
                "retry_of",
            ],
        ),
        (E.POLICY_DECISION, ["reason", "rule", "verdict"]),
        (E.RUN_STARTED, ["agent", "worker"]),
        (E.TURN_STARTED, ["index", "model", "turn"]),
        (E.TURN_COMPLETED, ["finish_reason", "index", "latency_ms", "tool_calls", "turn"]),
        (E.USAGE, USAGE_KEYS),
        (E.TOOL_CALL_SCHEDULED, ["arguments", "name", "requires_approval", "tool_call"]),
        (E.TOOL_CALL_STARTED, ["attempt", "name", "tool_call"]),
        (E.MEMORY_STORED, ["action", "entry", "key", "scope", "version", "written_by"]),
        (E.TOOL_CALL_SUCCEEDED, ["duration_ms", "name", "result", "tool_call"]),
        (E.TURN_STARTED, ["index", "model", "turn"]),
        (E.TURN_COMPLETED, ["finish_reason", "index", "latency_ms", "tool_calls", "turn"]),
        (E.MESSAGE_COMPLETED, ["role", "text", "turn"]),
        (E.USAGE, USAGE_KEYS),
        (E.RUN_COMPLETED, ["output", "usage"]),
        (E.SESSION_ENDED, ["ended_at", "runs_canceled"]),
    ]
    runs = [e["run"] for e in events]
    assert runs == [None] + [str(run.id)] * 15 + [None]
    assert events[-2]["data"] == {
        "output": "42",
        "usage": {
            **Usage(21, 4).as_dict(),
            "cost": None,
            "unpriced_turns": 2,
        },
    }
    assert all(dt.datetime.fromisoformat(e["created_at"]).tzinfo is not None for e in events)
    # Each session counts on its own.
    assert _ids(h.events(other.id)) == [1]


# Housekeeping


def test_after_commit_runs_the_callback_once_nothing_is_pending(h):
    called: list[str] = []

    h.store.after_commit(lambda: called.append("done"))

    assert called == ["done"]


def test_a_worker_job_runs_inside_the_worker_context(h):
    with h.store.worker():
        session = h.session()

    assert h.store.get_session(session.id).status == "active"


def test_streamed_text_is_not_part_of_the_log(h):
    run = h.run()
    context = h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)
    turn = h.turn(run.id)
    logged = h.events(run.session_id)

    h.store.publish_delta(context, turn, "Hel", 0)
    h.store.publish_delta(context, turn, "lo", 3)

    assert h.events(run.session_id) == logged


def test_a_checkpoint_keeps_the_text_of_a_turn_still_open_without_an_event(h):
    run = h.claimed()
    turn = h.turn(run.id)
    logged = h.events(run.session_id)

    h.store.checkpoint_turn(turn_id=turn, text="Once upon")
    h.store.checkpoint_turn(turn_id=turn, text="Once upon a time")

    assert h.events(run.session_id) == logged
    (state,) = h.turns(run.id)
    assert (state.ended, state.response_text) == (False, "Once upon a time")
    assert h.store.streaming_turns(run.session_id) == [
        StreamedText(run.id, turn, "Once upon a time")
    ]


def test_only_open_turns_of_open_runs_with_text_are_streaming(h):
    session = h.session()
    first = h.claimed(session)
    ended_turn = h.turn(first.id)
    h.store.checkpoint_turn(turn_id=ended_turn, text="Hel")
    h.store.complete_turn(turn_id=ended_turn, reply=ModelReply(text="Hello."), latency_ms=3)
    silent = h.turn(first.id, index=1)  # open, nothing streamed yet
    h.store.finish_run(run_id=first.id, status=RunStatus.COMPLETED, output="Hello.")
    second = h.claimed(session)
    open_turn = h.turn(second.id)
    h.store.checkpoint_turn(turn_id=open_turn, text="Once")
    # A checkpoint never changes a turn that ended.
    h.store.checkpoint_turn(turn_id=ended_turn, text="Hel")

    assert h.store.streaming_turns(session.id) == [StreamedText(second.id, open_turn, "Once")]
    assert h.turns(first.id)[0].response_text == "Hello."
    assert h.turns(first.id)[1].id == silent
    assert h.store.streaming_turns(h.session().id) == []
    h.store.finish_run(run_id=second.id, status=RunStatus.FAILED, error=RunError("internal", "x"))
    assert h.store.streaming_turns(session.id) == []


def test_a_retried_model_call_drops_what_the_failed_attempt_checkpointed(h):
    run = h.claimed()
    turn = h.turn(run.id)
    h.store.checkpoint_turn(turn_id=turn, text="Once upon")

    h.store.model_retry(
        turn_id=turn, attempt=1, error_kind="unavailable", message="reset", delay_seconds=1.0
    )

    assert h.turns(run.id)[0].response_text == ""
    assert h.store.streaming_turns(run.session_id) == []


def test_an_interrupted_turn_records_how_it_ended_and_its_estimated_usage(h):
    run = h.claimed()
    turn = h.turn(run.id)
    h.store.checkpoint_turn(turn_id=turn, text="Once upon")

    h.store.complete_turn(
        turn_id=turn,
        reply=ModelReply(text="Once upon a", usage=Usage(120, 3), finish_reason="other"),
        latency_ms=40,
        interruption="canceled",
        usage_estimated=True,
    )

    assert h.store.get_run(run.id).usage == Usage(120, 3)
    (state,) = h.turns(run.id)
    assert (state.ended, state.response_text) == (True, "Once upon a")
    completed, message, usage = h.events(run.session_id)[-3:]
    assert completed["data"]["interruption"] == "canceled"
    assert completed["data"]["usage_estimated"] is True
    assert message["data"]["text"] == "Once upon a"
    assert usage["data"]["estimated"] is True
    assert (usage["data"]["input_tokens"], usage["data"]["output_tokens"]) == (120, 3)
    if h.kind == "orm":
        row = Turn.objects.get(pk=turn)
        assert (row.interruption, row.usage_estimated, row.response_text) == (
            "canceled",
            True,
            "Once upon a",
        )
        assert Run.objects.get(pk=run.id).total_tokens == 123


# The turn loop on each store


def test_the_turn_loop_leaves_the_same_record_on_either_store(h):
    loop = TurnLoop(
        store=h.store,
        agents=AgentRegistry([ASSISTANT]),
        model_factory=lambda model: ScriptedModel(),
        lease_seconds=LEASE,
    )
    session = h.session()
    remember = h.run(session, "remember my favourite colour is green", policy={})
    assert loop.execute(remember.id).status == RunStatus.COMPLETED
    forget = h.run(session, "forget everything", policy={})
    assert loop.execute(forget.id).status == RunStatus.AWAITING_INPUT
    h.store.respond(
        forget.id, tool_call_id=None, decision="approve", reason="", answer=None, decided_by_id=None
    )

    done = loop.execute(forget.id)

    assert (done.status, done.output) == (
        RunStatus.COMPLETED,
        "Done. I've forgotten everything in this conversation: favourite colour.",
    )
    assert h.types(session.id) == [
        E.SESSION_CREATED,
        *[E.RUN_CREATED, E.RUN_STARTED, E.TURN_STARTED, E.TURN_COMPLETED, E.USAGE],
        *[E.TOOL_CALL_SCHEDULED, E.TOOL_CALL_STARTED, E.MEMORY_STORED, E.TOOL_CALL_SUCCEEDED],
        *[E.TURN_STARTED, E.TURN_COMPLETED, E.MESSAGE_COMPLETED, E.USAGE, E.RUN_COMPLETED],
        *[E.RUN_CREATED, E.RUN_STARTED, E.TURN_STARTED, E.TURN_COMPLETED, E.USAGE],
        *[E.TOOL_CALL_SCHEDULED, E.TOOL_CALL_APPROVAL_REQUESTED, E.RUN_AWAITING_INPUT],
        *[E.TOOL_CALL_DECIDED, E.RUN_RESUMED, E.TOOL_CALL_STARTED, E.MEMORY_DELETED],
        *[E.TOOL_CALL_SUCCEEDED, E.TURN_STARTED, E.TURN_COMPLETED, E.MESSAGE_COMPLETED, E.USAGE],
        E.RUN_COMPLETED,
    ]
    assert h.store.memory_keys(scope="session", session_id=session.id) == []
    # The second run was shown the first as the conversation so far.
    first_turn = h.turns(forget.id)[0]
    # After the agent's prompt, what it remembers, apart (the prompt stays cacheable).
    prompt, remembered = first_turn.request_messages[:2]
    assert (prompt.role, prompt.content) == ("system", ASSISTANT.system_prompt)
    assert (remembered.role, remembered.content) == (
        "system",
        "What you remember that applies here:\n- favourite colour: green (session)",
    )
    # The earlier run in full: its call of memory_store, the result, the answer.
    earlier = first_turn.request_messages[2:]
    assert [m.role for m in earlier] == ["user", "assistant", "tool", "assistant", "user"]
    assert earlier[1].tool_calls[0].name == "memory_store"
    assert [earlier[0].content, earlier[3].content, earlier[4].content] == [
        "remember my favourite colour is green",
        "Got it. I'll remember in this conversation that your favourite colour is green.",
        "forget everything",
    ]


# Agent versions


def test_a_run_records_the_version_of_its_agent_and_executes_it(h):
    session = h.session()
    v1 = {**ASSISTANT.as_dict(), "system_prompt": "Version one."}
    v2 = {**ASSISTANT.as_dict(), "system_prompt": "Version two."}

    first = h.run(session, definition=v1)
    again = h.run(session, definition=v1)
    changed = h.run(session, definition=v2)
    back = h.run(session, definition=v1)

    assert [r.agent_version for r in (first, again, changed, back)] == [1, 1, 2, 1]
    assert h.store.get_run(changed.id).agent_version == 2
    for earlier in (first, again):
        h.store.request_cancel(earlier.id, "not this one")
    context = h.store.claim_run(changed.id, owner="w1", lease_seconds=LEASE)
    assert context is not None
    assert context.definition == v2
    h.store.finish_run(run_id=changed.id, status=RunStatus.COMPLETED, output="ok")
    h.store.request_cancel(back.id, "not this one")
    # Without a definition the run executes the agent as it is when it starts.
    plain = h.run(session)
    assert h.store.get_run(plain.id).agent_version is None
    context = h.store.claim_run(plain.id, owner="w1", lease_seconds=LEASE)
    assert context is not None
    assert context.definition is None


# One run at a time in a session


def test_a_message_while_a_run_is_active_waits_behind_it(h):
    session = h.session()
    active = h.claimed(session, "tell me a story")

    queued = h.run(session, "echo hi")
    behind = h.run(session, "echo again", multitask="enqueue")

    assert (queued.status, queued.multitask, queued.queued_behind) == (
        RunStatus.PENDING,
        "enqueue",
        active.id,
    )
    assert (behind.multitask, behind.queued_behind) == ("enqueue", queued.id)
    assert h.store.get_run(behind.id) == behind
    assert h.last(session.id, E.RUN_QUEUED) == {
        "behind": str(queued.id),
        "ahead": 2,
        "multitask": "enqueue",
    }
    # No hand-off starts a run before its turn, and the reaper leaves it alone
    # (however long it has waited).
    for run in (active, queued, behind):
        h.age(run.id, 120)
    assert h.store.claim_run(queued.id, owner="w2", lease_seconds=LEASE) is None
    assert h.store.next_queued_run(session.id) is None
    assert h.store.expired_runs() == []
    assert h.store.get_run(queued.id).status == RunStatus.PENDING

    h.store.finish_run(run_id=active.id, status=RunStatus.COMPLETED, output="Once upon a time.")

    assert h.store.get_run(queued.id).queued_behind is None
    assert h.store.get_run(behind.id).queued_behind == queued.id
    assert h.store.next_queued_run(session.id) == queued.id
    assert h.store.expired_runs() == [queued.id]
    assert h.store.claim_run(behind.id, owner="w2", lease_seconds=LEASE) is None
    assert h.store.claim_run(queued.id, owner="w2", lease_seconds=LEASE) is not None
    # The queue is the session's: a run elsewhere starts at once.
    elsewhere = h.run(h.session(), "echo elsewhere")
    assert (elsewhere.multitask, elsewhere.queued_behind) == ("", None)


def test_a_message_while_no_run_is_active_is_not_queued(h):
    session = h.session()
    done = h.claimed(session)
    h.store.finish_run(run_id=done.id, status=RunStatus.COMPLETED, output="ok")

    run = h.run(session, multitask="reject")

    assert (run.multitask, run.queued_behind) == ("", None)
    assert E.RUN_QUEUED not in h.types(session.id)
    assert h.store.next_queued_run(session.id) == run.id
    assert h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE) is not None


@pytest.mark.parametrize("state", ["pending", "running", "awaiting_input"])
def test_reject_refuses_a_message_while_a_run_is_active_and_records_nothing(h, state):
    if state == "awaiting_input":
        active, _ = h.waiting()
        session = h.store.get_session(active.session_id)
    else:
        session = h.session()
        active = h.run(session) if state == "pending" else h.claimed(session)
    logged = h.events(session.id)

    with pytest.raises(RunActive) as refused:
        h.run(session, "echo hi", multitask="reject", idempotency_key="k-1")

    assert refused.value.active_run_id == active.id
    assert str(active.id) in str(refused.value)
    assert h.events(session.id) == logged
    # A key used already is told as such first: the retry finds its first attempt.
    if h.store.request_cancel(active.id, "make room").status == RunStatus.RUNNING:
        h.store.finish_run(run_id=active.id, status=RunStatus.CANCELED)
    first = h.run(session, "echo hi", idempotency_key="k-1")
    with pytest.raises(DuplicateIdempotencyKey):
        h.run(session, "echo hi", multitask="reject", idempotency_key="k-1")
    assert h.store.get_run(first.id).status == RunStatus.PENDING


def test_interrupt_stops_the_active_run_then_queues_behind_it(h):
    session = h.session()
    working = h.claimed(session, "tell me a story")
    waiting = h.run(session, "echo queued")

    run = h.run(session, "echo now", multitask="interrupt")

    # The queued run had not started: canceled at once. The working one is asked to
    # stop; the new run waits until it has.
    assert h.store.get_run(waiting.id).status == RunStatus.CANCELED
    assert h.store.cancel_requested(working.id) == f"interrupted by a new message (run {run.id})"
    assert (run.multitask, run.queued_behind) == ("interrupt", working.id)
    assert h.last(session.id, E.RUN_QUEUED) == {
        "behind": str(working.id),
        "ahead": 1,
        "multitask": "interrupt",
    }
    assert h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE) is None

    # Its loop stops it, keeping what the model had said.
    stopped = h.store.finish_run(run_id=working.id, status=RunStatus.CANCELED, output="Once upon a")

    assert (stopped.status, stopped.output) == (RunStatus.CANCELED, "Once upon a")
    # Replaced by the next message: who sent it (nobody named here) stopped it.
    assert h.last(session.id, E.RUN_CANCELED) == {
        "reason": f"interrupted by a new message (run {run.id})",
        "stopped_by": {"kind": "superseded", "user": None, "rule": None},
    }
    assert h.store.next_queued_run(session.id) == run.id
    assert h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE) is not None


def test_interrupting_a_run_nobody_executes_lets_the_new_one_start_at_once(h):
    waiting, call = h.waiting("question")
    session = h.store.get_session(waiting.session_id)

    run = h.run(session, "never mind", multitask="interrupt")

    assert h.store.get_run(waiting.id).status == RunStatus.CANCELED
    assert h.call_state(waiting.id, call).status == ToolCallStatus.CANCELED
    assert (run.multitask, run.queued_behind) == ("interrupt", None)
    assert E.RUN_QUEUED not in h.types(session.id)
    assert h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE) is not None


def test_a_queued_run_canceled_before_its_turn_ends_canceled(h):
    session = h.session()
    active = h.claimed(session)
    first = h.run(session, "echo one")
    second = h.run(session, "echo two")

    canceled = h.store.request_cancel(first.id, "changed my mind")

    assert (canceled.status, canceled.started_at, canceled.queued_behind) == (
        RunStatus.CANCELED,
        None,
        None,
    )
    assert h.store.get_run(second.id).queued_behind == active.id
    h.store.finish_run(run_id=active.id, status=RunStatus.COMPLETED, output="ok")
    assert h.store.next_queued_run(session.id) == second.id


def test_ending_a_session_cancels_the_runs_waiting_their_turn(h):
    session = h.session()
    active = h.claimed(session)
    queued = h.run(session, "echo later")

    h.store.end_session(session.id)

    assert h.store.get_run(queued.id).status == RunStatus.CANCELED
    assert h.store.cancel_requested(active.id) == "session_ended"
    assert h.store.next_queued_run(session.id) is None


def test_runs_called_as_tools_are_not_queued(h):
    parent = h.claimed()
    session = h.store.get_session(parent.session_id)
    queued = h.run(session, "echo later")
    child = h.child(parent)

    assert (child.multitask, child.queued_behind) == ("", None)
    assert h.store.claim_run(child.id, owner="w1", lease_seconds=LEASE) is not None
    assert h.store.get_run(queued.id).queued_behind == parent.id


# The caller's own tools (an OpenAI-compatible client's)

WEATHER = {"name": "get_weather", "description": "", "parameters": {"type": "object"}}


def _waiting_for_caller(h: Harness) -> tuple[RunInfo, list[UUID]]:
    """A run that waits for the results of two calls of its caller's tools."""
    run = h.run(client_tools=[WEATHER], instructions="Be brief.")
    assert h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE) is not None
    turn = h.turn(run.id)
    calls = [
        h.store.schedule_tool_call(
            turn_id=turn,
            index=index,
            request=ToolCallRequest(id=f"c{index}", name="get_weather", arguments={}),
            requires_approval=False,
        )
        for index in range(2)
    ]
    h.store.await_input(
        run_id=run.id, kind="client_tool", tool_call_id=calls[0], tool_call_ids=calls
    )
    return run, calls


def test_a_run_keeps_what_its_caller_gave_it(h):
    run = h.run(client_tools=[WEATHER], instructions="Be brief.")

    context = h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)

    assert context is not None
    assert context.client_tools == (WEATHER,)
    assert context.instructions == "Be brief."


def test_the_callers_results_end_every_waited_call_and_resume_the_run(h):
    run, calls = _waiting_for_caller(h)
    assert h.last(run.session_id, E.RUN_AWAITING_INPUT) == {
        "kind": "client_tool",
        "tool_call": str(calls[0]),
        "tool_calls": [str(call) for call in calls],
    }

    answered = h.store.submit_tool_outputs(
        run.id, outputs={calls[0]: {"sky": "sunny"}, calls[1]: "rain"}, submitted_by_id=h.alice
    )

    assert answered.status == RunStatus.RUNNING
    states = [h.call_state(run.id, call) for call in calls]
    assert [(s.status, s.result, s.decision) for s in states] == [
        (ToolCallStatus.SUCCEEDED, {"sky": "sunny"}, "answered"),
        (ToolCallStatus.SUCCEEDED, "rain", "answered"),
    ]
    assert h.last(run.session_id, E.RUN_RESUMED)["answered"] == "client_tool"
    assert h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE) is not None


@pytest.mark.parametrize("which", ["missing", "unknown"])
def test_results_that_leave_a_call_out_or_name_another_change_nothing(h, which):
    run, calls = _waiting_for_caller(h)
    outputs: dict[UUID, Any] = {calls[0]: "x"}
    if which == "unknown":
        outputs[calls[1]], outputs[uuid4()] = "y", "z"
    before = h.types(run.session_id)

    with pytest.raises(InvalidAnswer):
        h.store.submit_tool_outputs(run.id, outputs=outputs, submitted_by_id=h.alice)

    assert h.store.get_run(run.id).status == RunStatus.AWAITING_INPUT
    assert h.types(run.session_id) == before
    assert h.call_state(run.id, calls[0]).status == ToolCallStatus.SCHEDULED


def test_results_for_a_run_that_waits_for_something_else_are_refused(h):
    run, call = h.waiting("approval")

    with pytest.raises(IllegalTransition):
        h.store.submit_tool_outputs(run.id, outputs={call: "x"}, submitted_by_id=h.alice)
