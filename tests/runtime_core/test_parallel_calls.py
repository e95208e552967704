"""Tool calls a model asks for together: they run at the same time (at most the
agent's ``parallel_tool_calls``), are recorded and reported to the model in the
model's order, each keeps its own approval, and one failing cancels none of the
others. On the in-memory store, with a model that asks for every call at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

import pytest

from goaai.runtime.agents import ASSISTANT, Agent, AgentRegistry
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import ModelRequest
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.policy import Policy
from goaai.runtime.tools import TOOLSETS, Tool, ToolRejected, tool
from goaai.runtime.tools.interaction import ask_user
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, ToolOutcome, Usage
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from tests.runtime_core.conftest import ALICE, LEASE_SECONDS, Clock

E = EventType
# How long each slow tool takes: three in sequence take 1.5 s, together about 0.5 s.
SLOW_SECONDS = 0.5


@dataclass
class Meter:
    """What the tools did: which ran (in the order they started), and how many ran
    at the same time at most."""

    started: list[str] = field(default_factory=list)
    running: int = 0
    most_at_once: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set to a function the ``hold`` tool calls once it has started.
    on_hold: Any = None

    def reset(self) -> None:
        self.started.clear()
        self.running = self.most_at_once = 0
        self.on_hold = None

    def enter(self, label: str) -> None:
        with self.lock:
            self.started.append(label)
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1


METER = Meter()


@tool()
def nap(label: str, seconds: float = SLOW_SECONDS) -> dict[str, Any]:
    """Sleeps a while, then says so."""
    METER.enter(label)
    try:
        time.sleep(seconds)
    finally:
        METER.leave()
    return {"napped": label}


@tool()
def fail(label: str) -> dict[str, Any]:
    """Refuses at once."""
    METER.enter(label)
    METER.leave()
    raise ToolRejected(f"{label} refused")


@tool(requires_approval=True)
def guarded(label: str) -> dict[str, Any]:
    """Needs a person's approval first."""
    METER.enter(label)
    METER.leave()
    return {"guarded": label}


@tool()
def hold(label: str) -> dict[str, Any]:
    """Calls ``METER.on_hold`` once it has started, then takes a moment."""
    METER.enter(label)
    try:
        if METER.on_hold is not None:
            METER.on_hold()
        time.sleep(0.3)
    finally:
        METER.leave()
    return {"held": label}


@tool(timeout_seconds=0.2)
def stuck(label: str) -> dict[str, Any]:
    """Takes longer than its own time limit (and is left to finish on its own)."""
    METER.enter(label)
    METER.leave()
    time.sleep(1.0)
    return {"late": label}


@tool(name="recheck", idempotent=True)
def recheck() -> dict[str, Any]:
    """Looks something up again: idempotent."""
    METER.enter("recheck")
    METER.leave()
    return {"rechecked": True}


def _toolset(*tools: Tool) -> dict[str, Tool]:
    return {t.name: replace(t, toolset="together") for t in tools}


class TogetherModel:
    """Asks for every call of ``plan`` in its first reply, then lists how each went,
    in the order the tool messages reached it."""

    name = "together"

    def __init__(self, plan: list[tuple[str, dict[str, Any]]]) -> None:
        self.plan = plan
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_delta: Any = None) -> ModelReply:
        self.requests.append(request)
        results = [m for m in request.messages if m.role == "tool"]
        if not results:
            calls = tuple(
                ToolCallRequest(id=f"call-{i}", name=name, arguments=arguments)
                for i, (name, arguments) in enumerate(self.plan)
            )
            return ModelReply(tool_calls=calls, usage=Usage(10, 5), model=self.name)
        return ModelReply(text="; ".join(map(_describe, results)), usage=Usage(10, 5))


def _describe(message: Message) -> str:
    outcome = json.loads(message.content)
    return f"{message.tool_call_id} {'ok' if outcome['ok'] else outcome['error']['kind']}"


class Bench:
    """A session of the ``together`` agent, and loops to run it."""

    def __init__(self, store: InMemoryRunStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.session_id = store.create_session(
            owner_id=ALICE, agent="together", title="", metadata={}
        ).id

    def agent(self, parallel: int, policy: Policy | None = None) -> Agent:
        return Agent(
            id="together",
            description="Asks for several tools at once.",
            model="together",
            toolsets=("together",),
            policy=policy or Policy(),
            conversation=ConversationSettings(parallel_tool_calls=parallel),
            delegates=("assistant",),
        )

    def start(self, policy: Policy | None = None) -> UUID:
        return self.store.create_run(
            session_id=self.session_id,
            agent="together",
            input="do these at once",
            labels={},
            metadata={},
            policy=(policy or Policy()).as_dict(),
        ).id

    def loop(self, model: TogetherModel, parallel: int = 4) -> TurnLoop:
        return TurnLoop(
            store=self.store,
            agents=AgentRegistry([self.agent(parallel), ASSISTANT]),
            model_factory=lambda name: model if name == "together" else ScriptedModel(),
            publish_delta=self.store.publish_delta,
            lease_seconds=LEASE_SECONDS,
        )

    def calls(self, run_id: UUID) -> list[tuple[int, str, str, str]]:
        """Each recorded call: its index, the model's id for it, its tool, status."""
        return [
            (call.index, call.call_id, call.name, call.status)
            for turn in self.store.turns(run_id)
            for call in turn.tool_calls
        ]

    def events(self, run_id: UUID, type: str) -> list[dict[str, Any]]:
        return [
            e["data"]
            for e in self.store.events(self.session_id)
            if e["run"] == str(run_id) and e["type"] == type
        ]

    def awaiting(self, run_id: UUID) -> dict[str, Any]:
        """What the run waits for, as its latest ``run.awaiting_input`` says."""
        return self.events(run_id, E.RUN_AWAITING_INPUT)[-1]

    def respond(self, run_id: UUID, **answer: Any) -> None:
        self.store.respond(
            run_id,
            tool_call_id=None,
            decision=answer.get("decision", ""),
            reason="",
            answer=answer.get("answer"),
            decided_by_id=ALICE,
        )


@pytest.fixture
def bench(
    store: InMemoryRunStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Bench]:
    tools = _toolset(nap, fail, guarded, hold, stuck, recheck, ask_user)
    monkeypatch.setitem(TOOLSETS, "together", tools)
    METER.reset()
    return Bench(store, clock)


def _tool_messages(model: TogetherModel, turn: int = 1) -> list[tuple[str | None, str]]:
    return [(m.tool_call_id, m.name) for m in model.requests[turn].messages if m.role == "tool"]


def test_three_slow_tools_asked_together_take_about_the_time_of_one(bench):
    model = TogetherModel([("nap", {"label": x}) for x in "abc"])
    run = bench.start()

    began = time.monotonic()
    info = bench.loop(model).execute(run)
    elapsed = time.monotonic() - began

    print(f"three {SLOW_SECONDS}s tools asked together took {elapsed:.3f}s")
    assert info is not None
    assert info.status == RunStatus.COMPLETED
    # In sequence they take 1.5 s; together about 0.5 s (room left for a busy machine).
    assert SLOW_SECONDS <= elapsed < 2.5 * SLOW_SECONDS
    assert METER.most_at_once == 3
    assert bench.calls(run) == [
        (0, "call-0", "nap", ToolCallStatus.SUCCEEDED),
        (1, "call-1", "nap", ToolCallStatus.SUCCEEDED),
        (2, "call-2", "nap", ToolCallStatus.SUCCEEDED),
    ]
    assert info.output == "call-0 ok; call-1 ok; call-2 ok"


def test_calls_are_reported_in_the_models_order_whatever_order_they_finish_in(bench):
    # The first is the slowest and the last the quickest: they finish in the
    # opposite order to the model's.
    model = TogetherModel(
        [
            # Far enough apart that a thread started late cannot change the order.
            ("nap", {"label": "a", "seconds": 0.9}),
            ("nap", {"label": "b", "seconds": 0.6}),
            ("nap", {"label": "c", "seconds": 0.3}),
        ]
    )
    run = bench.start()

    info = bench.loop(model).execute(run)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    recorded = [e["tool_call"] for e in bench.events(run, E.TOOL_CALL_SCHEDULED)]
    finished = [e["tool_call"] for e in bench.events(run, E.TOOL_CALL_SUCCEEDED)]
    assert finished == list(reversed(recorded))
    assert [index for index, *_ in bench.calls(run)] == [0, 1, 2]
    assert _tool_messages(model) == [("call-0", "nap"), ("call-1", "nap"), ("call-2", "nap")]
    assert info.output == "call-0 ok; call-1 ok; call-2 ok"


def test_an_agent_with_parallel_tool_calls_1_runs_them_one_after_another(bench):
    model = TogetherModel([("nap", {"label": x, "seconds": 0.2}) for x in "abc"])
    run = bench.start()

    began = time.monotonic()
    info = bench.loop(model, parallel=1).execute(run)
    elapsed = time.monotonic() - began

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    assert METER.most_at_once == 1
    assert METER.started == ["a", "b", "c"]
    assert elapsed >= 0.6
    assert [status for *_, status in bench.calls(run)] == [ToolCallStatus.SUCCEEDED] * 3
    assert _tool_messages(model) == [("call-0", "nap"), ("call-1", "nap"), ("call-2", "nap")]


def test_no_more_calls_run_at_once_than_the_agent_allows(bench):
    model = TogetherModel([("nap", {"label": x, "seconds": 0.2}) for x in "abcde"])
    run = bench.start()

    info = bench.loop(model, parallel=2).execute(run)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    assert METER.most_at_once == 2
    # Queued calls begin in the model's order as places free up.
    assert METER.started[:2] in (["a", "b"], ["b", "a"])
    assert sorted(METER.started) == list("abcde")
    assert [index for index, *_ in bench.calls(run)] == [0, 1, 2, 3, 4]


def test_a_failing_call_cancels_none_of_the_others(bench):
    model = TogetherModel(
        [
            ("nap", {"label": "a", "seconds": 0.2}),
            ("fail", {"label": "b"}),
            ("stuck", {"label": "c"}),
            ("nap", {"label": "d", "seconds": 0.2}),
        ]
    )
    run = bench.start()

    info = bench.loop(model).execute(run)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    assert bench.calls(run) == [
        (0, "call-0", "nap", ToolCallStatus.SUCCEEDED),
        (1, "call-1", "fail", ToolCallStatus.FAILED),
        (2, "call-2", "stuck", ToolCallStatus.FAILED),
        (3, "call-3", "nap", ToolCallStatus.SUCCEEDED),
    ]
    # The model hears about each, in its order: a refusal and a time limit among them.
    assert info.output == "call-0 ok; call-1 domain_rejection; call-2 timeout; call-3 ok"


def test_a_call_that_needs_approval_waits_while_the_others_run(bench):
    model = TogetherModel(
        [
            ("nap", {"label": "a", "seconds": 0.1}),
            ("guarded", {"label": "b"}),
            ("nap", {"label": "c", "seconds": 0.1}),
        ]
    )
    run = bench.start()

    paused = bench.loop(model).execute(run)

    # The calls that need nobody ran; the run waits on the one that needs approval.
    assert paused is not None
    assert paused.status == RunStatus.AWAITING_INPUT
    assert bench.awaiting(run)["kind"] == "approval"
    assert bench.calls(run) == [
        (0, "call-0", "nap", ToolCallStatus.SUCCEEDED),
        (1, "call-1", "guarded", ToolCallStatus.SCHEDULED),
        (2, "call-2", "nap", ToolCallStatus.SUCCEEDED),
    ]
    waiting_on = bench.awaiting(run)["tool_call"]
    assert bench.events(run, E.TOOL_CALL_APPROVAL_REQUESTED)[0]["tool_call"] == waiting_on
    assert sorted(METER.started) == ["a", "c"]

    bench.respond(run, decision="approve")
    info = bench.loop(model).execute(run)

    # After the approval only the approved call runs: the others are not run again.
    assert info is not None
    assert info.status == RunStatus.COMPLETED
    assert sorted(METER.started) == ["a", "b", "c"]
    assert [status for *_, status in bench.calls(run)] == [ToolCallStatus.SUCCEEDED] * 3
    assert info.output == "call-0 ok; call-1 ok; call-2 ok"
    assert len(model.requests) == 2


def test_one_at_a_time_no_call_runs_ahead_of_one_waiting_for_approval(bench):
    # In the model's order, as before calls ran together: what follows a call that
    # waits (a memory write after "forget everything", say) waits with it.
    model = TogetherModel(
        [
            ("nap", {"label": "a", "seconds": 0.05}),
            ("guarded", {"label": "b"}),
            ("nap", {"label": "c", "seconds": 0.05}),
        ]
    )
    run = bench.start()

    paused = bench.loop(model, parallel=1).execute(run)

    assert paused is not None
    assert paused.status == RunStatus.AWAITING_INPUT
    assert [status for *_, status in bench.calls(run)] == [
        ToolCallStatus.SUCCEEDED,
        ToolCallStatus.SCHEDULED,
        ToolCallStatus.SCHEDULED,
    ]
    bench.respond(run, decision="approve")
    info = bench.loop(model, parallel=1).execute(run)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    assert METER.started == ["a", "b", "c"]


def test_two_calls_that_need_approval_are_asked_about_in_the_models_order(bench):
    model = TogetherModel(
        [
            ("guarded", {"label": "a"}),
            ("nap", {"label": "b", "seconds": 0}),
            ("guarded", {"label": "c"}),
        ]
    )
    run = bench.start()
    loop = bench.loop(model)

    first = loop.execute(run)
    assert first is not None
    ids = [e["tool_call"] for e in bench.events(run, E.TOOL_CALL_SCHEDULED)]
    assert bench.awaiting(run)["tool_call"] == ids[0]

    bench.respond(run, decision="deny")
    second = loop.execute(run)
    assert second is not None
    assert bench.awaiting(run)["tool_call"] == ids[2]

    bench.respond(run, decision="approve")
    info = loop.execute(run)
    assert info is not None
    assert info.status == RunStatus.COMPLETED
    assert info.output == "call-0 domain_rejection; call-1 ok; call-2 ok"
    assert METER.started == ["b", "c"]


def test_a_question_among_calls_asked_together_waits_for_its_answer(bench):
    model = TogetherModel(
        [
            ("ask_user", {"question": "Tea or coffee?", "choices": ["tea", "coffee"]}),
            ("nap", {"label": "b", "seconds": 0.1}),
        ]
    )
    run = bench.start()

    paused = bench.loop(model).execute(run)

    assert paused is not None
    assert bench.awaiting(run)["question"] == "Tea or coffee?"
    assert bench.awaiting(run)["choices"] == ["tea", "coffee"]
    assert METER.started == ["b"]
    bench.respond(run, answer="Coffee")
    info = bench.loop(model).execute(run)
    assert info is not None
    assert info.output == "call-0 ok; call-1 ok"
    answer = json.loads(next(m for m in model.requests[1].messages if m.role == "tool").content)
    assert answer == {"ok": True, "result": {"answer": "coffee", "chosen": ["coffee"]}}


def test_an_agent_asked_among_calls_runs_after_them_in_the_loops_thread(bench):
    model = TogetherModel(
        [
            ("ask_assistant", {"prompt": "echo from the child"}),
            ("nap", {"label": "a", "seconds": 0.2}),
            ("nap", {"label": "b", "seconds": 0.2}),
        ]
    )
    run = bench.start()

    info = bench.loop(model).execute(run)

    assert info is not None
    assert info.output == "call-0 ok; call-1 ok; call-2 ok"
    # The child run began only once the calls that ran together had ended.
    log = list(bench.store.events(bench.session_id))
    child_created = next(
        n for n, e in enumerate(log) if e["type"] == E.RUN_CREATED and e["run"] != str(run)
    )
    naps_ended = [n for n, e in enumerate(log) if e["type"] == E.TOOL_CALL_SUCCEEDED][:2]
    assert max(naps_ended) < child_created
    result = bench.calls(run)[0]
    assert result[2:] == ("ask_assistant", ToolCallStatus.SUCCEEDED)


def test_calls_over_the_tool_call_cap_are_not_run(bench):
    model = TogetherModel([("nap", {"label": x, "seconds": 0}) for x in "abcd"])
    run = bench.start(Policy(max_tool_calls=2))

    info = bench.loop(model).execute(run)

    assert info is not None
    assert info.status == RunStatus.FAILED
    assert info.error is not None
    assert "2 tool calls" in info.error.message
    assert sorted(METER.started) == ["a", "b"]
    assert [index for index, *_ in bench.calls(run)] == [0, 1]
    assert [e["rule"] for e in bench.events(run, E.POLICY_DECISION)] == ["max_tool_calls"]


def test_consecutive_failures_are_counted_in_the_models_order(bench):
    # The two failures come first in the model's order, though the quick call after
    # them finishes long before the slow one among them: the run stops on the cap.
    model = TogetherModel(
        [("fail", {"label": "a"}), ("stuck", {"label": "b"}), ("nap", {"label": "c", "seconds": 0})]
    )
    run = bench.start(Policy(max_consecutive_tool_failures=2))

    info = bench.loop(model).execute(run)

    assert info is not None
    assert info.status == RunStatus.FAILED
    assert [e["rule"] for e in bench.events(run, E.POLICY_DECISION)] == [
        "max_consecutive_tool_failures"
    ]
    assert info.error is not None
    assert "stuck did not finish" in info.error.message
    # Every call ran to its end: the stop cancels none that had started.
    assert [status for *_, status in bench.calls(run)] == [
        ToolCallStatus.FAILED,
        ToolCallStatus.FAILED,
        ToolCallStatus.SUCCEEDED,
    ]


def test_a_cancel_while_calls_run_lets_them_finish_and_starts_no_more(bench):
    model = TogetherModel(
        [("hold", {"label": "a"}), ("nap", {"label": "b", "seconds": 0.3})]
        + [("nap", {"label": x, "seconds": 0}) for x in "cd"]
    )
    run = bench.start()
    METER.on_hold = lambda: bench.store.request_cancel(run, "user_requested")

    info = bench.loop(model, parallel=2).execute(run)

    assert info is not None
    assert info.status == RunStatus.CANCELED
    # The two running when the cancel came finished; the two queued never began.
    assert sorted(METER.started) == ["a", "b"]
    statuses = [status for *_, status in bench.calls(run)]
    assert statuses[:2] == [ToolCallStatus.SUCCEEDED, ToolCallStatus.SUCCEEDED]
    assert statuses[2:] == [ToolCallStatus.CANCELED, ToolCallStatus.CANCELED]
    assert len(model.requests) == 1


def test_a_run_picked_up_again_executes_no_finished_call_twice(bench, clock):
    # A worker recorded four calls asked together and died with one finished, one
    # queued (never begun), and two running: one whose tool is idempotent, one not.
    model = TogetherModel([])
    run = bench.start()
    assert bench.store.claim_run(run, owner="dead", lease_seconds=LEASE_SECONDS)
    turn = bench.store.start_turn(run_id=run, index=0, model="together", messages=[])
    requests = (
        ToolCallRequest(id="call-0", name="nap", arguments={"label": "a", "seconds": 0}),
        ToolCallRequest(id="call-1", name="nap", arguments={"label": "b", "seconds": 0}),
        ToolCallRequest(id="call-2", name="nap", arguments={"label": "c", "seconds": 0}),
        ToolCallRequest(id="call-3", name="recheck", arguments={}),
    )
    bench.store.complete_turn(
        turn_id=turn, reply=ModelReply(tool_calls=requests, usage=Usage(1, 1)), latency_ms=1
    )
    done = bench.store.start_tool_call(turn_id=turn, index=0, request=requests[0])
    bench.store.finish_tool_call(tool_call_id=done, outcome=ToolOutcome(result={"napped": "a"}))
    bench.store.schedule_tool_call(
        turn_id=turn, index=1, request=requests[1], requires_approval=False
    )
    bench.store.start_tool_call(turn_id=turn, index=2, request=requests[2])
    bench.store.start_tool_call(turn_id=turn, index=3, request=requests[3])
    clock.advance(LEASE_SECONDS + 1)

    info = bench.loop(model).execute(run)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    # The finished call was not run again; the queued one ran; the running one whose
    # tool is not idempotent was not run again but failed; the idempotent one ran.
    assert sorted(METER.started) == ["b", "recheck"]
    assert [status for *_, status in bench.calls(run)] == [
        ToolCallStatus.SUCCEEDED,
        ToolCallStatus.SUCCEEDED,
        ToolCallStatus.FAILED,
        ToolCallStatus.SUCCEEDED,
    ]
    assert info.output == "call-0 ok; call-1 ok; call-2 internal; call-3 ok"
