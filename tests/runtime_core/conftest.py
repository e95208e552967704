"""The runtime with no framework under it: the turn loop on the in-memory store.

Nothing here imports Django or the apps, so these tests also run in a pass with
neither (``pytest -p no:django --confcutdir=tests/runtime_core tests/runtime_core``).
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import pytest

from goaai.runtime.agents import ASSISTANT, CONCIERGE, AgentRegistry
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import ModelClient
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.policy import LabelRule, apply_label_rules
from goaai.runtime.tools import TOOLSETS
from goaai.runtime.types import RunContext, RunInfo, SessionInfo, ToolCallState
from tests.runtime_core import engine_agents
from tests.runtime_core.engine_agents import ENGINE_AGENTS, PROBE

ALICE, BOB = 1, 2
LEASE_SECONDS = 60.0
# The rule goaai ships: runs labelled review=required wait for approval of every tool.
REVIEW_REQUIRED = LabelRule(
    name="review_required", match={"review": "required"}, approval_required=frozenset({"*"})
)


class Clock:
    """The store's clock: the real time, plus whatever a test fast-forwards (a lease
    running out without the test waiting for it)."""

    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(tz=dt.UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += dt.timedelta(seconds=seconds)


def model_for(model: str) -> ModelClient:
    """The client for an agent's ``model``: the scripted model, or a class named by
    dotted path (``python:tests.runtime_core.engine_agents.PlanModel``)."""
    if model == "scripted":
        return ScriptedModel()
    module, _, name = model.removeprefix("python:").rpartition(".")
    client: ModelClient = getattr(importlib.import_module(module), name)()
    return client


@dataclass
class Engine:
    """An in-memory store, the agents it runs, and turn loops over both."""

    store: InMemoryRunStore
    clock: Clock
    agents: AgentRegistry
    label_rules: list[LabelRule] = field(default_factory=list)

    def session(self, agent: str = "assistant", owner: int = ALICE) -> SessionInfo:
        return self.store.create_session(owner_id=owner, agent=agent, title="", metadata={})

    def create(
        self,
        agent: str,
        prompt: str,
        *,
        session: UUID | None = None,
        labels: dict[str, str] | None = None,
    ) -> RunInfo:
        """A pending run of ``agent`` under its policy, as its labels tighten it."""
        policy, decisions = apply_label_rules(
            self.agents.get(agent).policy, labels or {}, self.label_rules
        )
        return self.store.create_run(
            session_id=session or self.session(agent).id,
            agent=agent,
            input=prompt,
            labels=labels or {},
            metadata={},
            policy=policy.as_dict(),
            policy_decisions=decisions,
        )

    def loop(
        self, *, publish: Callable[[RunContext, UUID, str, int], None] | None = None
    ) -> TurnLoop:
        return TurnLoop(
            store=self.store,
            agents=self.agents,
            model_factory=model_for,
            publish_delta=publish or self.store.publish_delta,
            lease_seconds=LEASE_SECONDS,
            label_rules=self.label_rules,
        )

    def execute(self, run_id: UUID) -> RunInfo | None:
        return self.loop().execute(run_id)

    def run(
        self,
        agent: str,
        prompt: str,
        *,
        session: UUID | None = None,
        labels: dict[str, str] | None = None,
    ) -> RunInfo:
        """Create a run and execute it until it ends or waits for a person."""
        run = self.create(agent, prompt, session=session, labels=labels)
        info = self.execute(run.id)
        assert info is not None, "the run was not executed"
        return info

    def answer(self, run_id: UUID, **response: Any) -> RunInfo | None:
        """Record a person's answer (``decision``/``reason`` or ``answer``) as Alice,
        then execute the run again, as the runtime does once the answer is in."""
        self.store.respond(
            run_id,
            tool_call_id=response.pop("tool_call_id", None),
            decision=response.pop("decision", ""),
            reason=response.pop("reason", ""),
            answer=response.pop("answer", None),
            decided_by_id=response.pop("decided_by_id", ALICE),
        )
        return self.execute(run_id)

    # What a person reading the record would look at

    def event_types(self, run_id: UUID) -> list[str]:
        run = self.store.get_run(run_id)
        return [e["type"] for e in self.store.events(run.session_id) if e["run"] == str(run_id)]

    def events(self, run_id: UUID, type: str) -> list[dict[str, Any]]:
        run = self.store.get_run(run_id)
        return [
            e["data"]
            for e in self.store.events(run.session_id)
            if e["run"] == str(run_id) and e["type"] == type
        ]

    def calls(self, run_id: UUID) -> list[ToolCallState]:
        return [call for turn in self.store.turns(run_id) for call in turn.tool_calls]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> InMemoryRunStore:
    return InMemoryRunStore(users={ALICE: "alice", BOB: "bob"}, clock=clock)


@pytest.fixture
def engine(
    store: InMemoryRunStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Engine]:
    """The shipped agents and the test agents of ``engine_agents``, whose toolsets
    are registered for this test only."""
    for name, toolset in engine_agents.engine_toolsets().items():
        monkeypatch.setitem(TOOLSETS, name, toolset)
    PROBE.reset()
    yield Engine(store, clock, AgentRegistry([ASSISTANT, CONCIERGE, *ENGINE_AGENTS]))
    # Nothing a test started may stay blocked after it.
    PROBE.release.set()
