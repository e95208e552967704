"""Fixtures for the provider clients: a fake provider server on 127.0.0.1, and an
in-memory store for driving the real turn loop without a database."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import pytest

from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import get_model_client
from goaai.runtime.store import RunStore
from goaai.runtime.types import (
    ModelReply,
    PlannedCall,
    RunContext,
    RunError,
    RunInfo,
    ToolCallRequest,
    ToolOutcome,
    TurnRecorded,
    Usage,
)
from goaai.runtime_settings import runtime_config
from tests.goaai.runtime.models.fake_providers import FakeProviderServer

_PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Keep every request on this machine: a proxy in the environment would carry
    the SDKs' requests to 127.0.0.1 elsewhere."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def fake_server():
    server = FakeProviderServer().start()
    yield server
    server.stop()


class InMemoryRunStore:
    """The part of :class:`RunStore` the turn loop calls for a plain run (no
    approvals, questions, child runs or memory), kept in dictionaries."""

    def __init__(self, *, agent: str, input: str) -> None:
        self.run_id = uuid.uuid4()
        self.session_id = uuid.uuid4()
        self.agent = agent
        self.input = input
        self.turns: dict[uuid.UUID, dict[str, Any]] = {}
        self.tool_calls: dict[uuid.UUID, dict[str, Any]] = {}
        self.decisions: list[tuple[str, str, str]] = []
        # (attempt, error kind, message, delay in seconds) of each retried model call.
        self.retries: list[tuple[int, str, str, float]] = []

    def claim_run(self, run_id: uuid.UUID, *, owner: str, lease_seconds: float) -> RunContext:
        assert run_id == self.run_id
        return RunContext(
            run_id=run_id,
            session_id=self.session_id,
            owner_id=1,
            agent=self.agent,
            input=self.input,
            labels={},
            lease_owner=owner,
        )

    def renew_lease(self, run_id: uuid.UUID, *, owner: str, lease_seconds: float) -> bool:
        return True

    def worker(self) -> AbstractContextManager[None]:
        return nullcontext()

    def cancel_requested(self, run_id: uuid.UUID) -> str | None:
        return None

    def start_turn(
        self, *, run_id: uuid.UUID, index: int, model: str, messages: list[dict[str, Any]]
    ) -> uuid.UUID:
        turn_id = uuid.uuid4()
        self.turns[turn_id] = {"index": index, "model": model, "messages": messages, "reply": None}
        return turn_id

    def complete_turn(
        self,
        *,
        turn_id: uuid.UUID,
        reply: ModelReply,
        latency_ms: int,
        retries: int = 0,
        calls: Sequence[PlannedCall] = (),
    ) -> TurnRecorded:
        self.turns[turn_id]["reply"] = reply
        self.turns[turn_id]["retries"] = retries
        ids = tuple(
            self.schedule_tool_call(
                turn_id=turn_id,
                index=call.position,
                request=call.request,
                requires_approval=call.requires_approval,
            )
            for call in calls
        )
        return TurnRecorded(self.cancel_requested(self.run_id), ids)

    def complete_turn_and_run(
        self, *, turn_id: uuid.UUID, reply: ModelReply, latency_ms: int, retries: int = 0
    ) -> RunInfo:
        self.complete_turn(turn_id=turn_id, reply=reply, latency_ms=latency_ms, retries=retries)
        return self.finish_run(run_id=self.run_id, status="completed", output=reply.text)

    def model_retry(
        self,
        *,
        turn_id: uuid.UUID,
        attempt: int,
        error_kind: str,
        message: str,
        delay_seconds: float,
    ) -> None:
        self.retries.append((attempt, error_kind, message, delay_seconds))

    def schedule_tool_call(
        self, *, turn_id: uuid.UUID, index: int, request: ToolCallRequest, requires_approval: bool
    ) -> uuid.UUID:
        call_id = uuid.uuid4()
        self.tool_calls[call_id] = {"turn_id": turn_id, "request": request, "outcome": None}
        return call_id

    def begin_tool_call(self, *, tool_call_id: uuid.UUID) -> int:
        return 1

    def start_tool_call(
        self, *, turn_id: uuid.UUID, index: int, request: ToolCallRequest
    ) -> uuid.UUID:
        return self.schedule_tool_call(
            turn_id=turn_id, index=index, request=request, requires_approval=False
        )

    def finish_tool_call(self, *, tool_call_id: uuid.UUID, outcome: ToolOutcome) -> str | None:
        self.tool_calls[tool_call_id]["outcome"] = outcome
        return self.cancel_requested(self.run_id)

    def policy_decision(self, *, run_id: uuid.UUID, rule: str, verdict: str, reason: str) -> None:
        self.decisions.append((rule, verdict, reason))

    def finish_run(
        self, *, run_id: uuid.UUID, status: str, output: str = "", error: RunError | None = None
    ) -> RunInfo:
        replies = [turn["reply"] for turn in self.turns.values() if turn["reply"] is not None]
        return RunInfo(
            id=run_id,
            session_id=self.session_id,
            agent=self.agent,
            status=status,
            input=self.input,
            output=output,
            labels={},
            usage=sum((reply.usage for reply in replies), Usage()),
            error=error,
            created_at=dt.datetime.now(tz=dt.UTC),
        )


@dataclass
class LoopResult:
    run: RunInfo | None
    store: InMemoryRunStore
    deltas: list[str]


@pytest.fixture
def run_turn_loop():
    """Execute one run of ``agent`` with the real turn loop and an in-memory store."""

    def run(agent: Agent, input: str) -> LoopResult:
        store = InMemoryRunStore(agent=agent.id, input=input)
        deltas: list[str] = []
        loop = TurnLoop(
            # Structurally a RunStore for everything such a run reaches.
            store=cast(RunStore, store),
            agents=AgentRegistry([agent]),
            # Model profiles (keys and URLs from the environment) as the settings
            # make them when the test runs.
            model_factory=partial(get_model_client, profiles=runtime_config().profiles),
            publish_delta=lambda context, turn_id, text, offset: deltas.append(text),
        )
        return LoopResult(loop.execute(store.run_id), store, deltas)

    return run
