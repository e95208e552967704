"""What a user sees when a real provider fails: the official clients against a local
server that answers as OpenAI does, driven by the real turn loop on goaai's
in-memory store.

A 429 with Retry-After, an overloaded server and a stream cut mid-answer are asked
again and the run completes; a key the provider rejects fails the run at once; a
tool call cut off by the length limit is never executed.
"""

from __future__ import annotations

from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.config import RuntimeConfig
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import CUT_SHORT_NOTE, TurnLoop
from goaai.runtime.models import ModelSettings, get_model_client
from goaai.runtime.types import RunInfo
from goaai.runtime.vocabulary import ErrorKind, EventType, FinishReason, RunStatus
from tests.goaai.runtime.models.fake_providers import (
    OPENAI_PATH,
    FakeProviderServer,
    StreamedCall,
    openai_error,
    openai_sse,
    openai_text,
    openai_text_chunks,
    openai_tool_calls,
)

E = EventType


class Run:
    def __init__(self, server: FakeProviderServer, **settings: object) -> None:
        self.store = InMemoryRunStore(users={1: "alice"})
        self.session_id = self.store.create_session(
            owner_id=1, agent="local-agent", title="", metadata={}
        ).id
        config = RuntimeConfig.from_values(
            profiles={
                "local": {"kind": "openai", "base_url": server.openai_base_url, "api_key_env": "K"}
            },
            environ={"K": "sk-local"},
        )
        agent = Agent(
            id="local-agent",
            description="On a local server.",
            model="local:qwen3",
            toolsets=("text",),
            model_settings=ModelSettings(**settings),  # type: ignore[arg-type]
        )
        self.loop = TurnLoop(
            store=self.store,
            agents=AgentRegistry([agent]),
            model_factory=lambda model: get_model_client(model, config.profiles),
        )

    def execute(self) -> RunInfo:
        run_id = self.store.create_run(
            session_id=self.session_id,
            agent="local-agent",
            input="hello",
            labels={},
            metadata={},
            policy={},
        ).id
        info = self.loop.execute(run_id)
        assert info is not None
        return info

    def events(self, type: str) -> list[dict[str, object]]:
        return [e["data"] for e in self.store.events(self.session_id) if e["type"] == type]


def test_a_429_with_retry_after_then_success_completes_the_run(fake_server):
    fake_server.openai(
        openai_error(
            429,
            "Rate limit reached",
            type="requests",
            code="rate_limit_exceeded",
            headers={"retry-after-ms": "30"},
        ),
        openai_text(["Hello ", "there."]),
    )
    run = Run(fake_server)

    info = run.execute()

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Hello there.")
    (retry,) = run.events(E.MODEL_RETRY)
    assert (retry["attempt"], retry["error_kind"]) == (1, ErrorKind.RATE_LIMITED)
    assert 0.03 <= float(retry["delay_seconds"]) <= 0.04  # type: ignore[arg-type]
    assert len(fake_server.bodies(OPENAI_PATH)) == 2


def test_a_stream_cut_mid_answer_is_asked_again(fake_server):
    chunks = openai_text_chunks(["The answer ", "is 42."])
    fake_server.openai(
        openai_sse(chunks[:2], done=False),
        openai_sse(chunks),
    )
    run = Run(fake_server)

    info = run.execute()

    assert (info.status, info.output) == (RunStatus.COMPLETED, "The answer is 42.")
    assert [r["error_kind"] for r in run.events(E.MODEL_RETRY)] == [ErrorKind.UNAVAILABLE]
    assert [e["text"] for e in run.events(E.MESSAGE_COMPLETED)] == ["The answer is 42."]


def test_an_overloaded_server_until_the_budget_is_spent_fails_the_run(fake_server):
    fake_server.openai(*[openai_error(503, "Overloaded", type="server_error") for _ in range(3)])
    run = Run(fake_server, retry_attempts=3)

    info = run.execute()

    assert (info.status, info.error.kind, info.error.retryable) == (
        RunStatus.FAILED,
        ErrorKind.UNAVAILABLE,
        True,
    )
    assert "HTTP 503" in info.error.message
    assert [r["attempt"] for r in run.events(E.MODEL_RETRY)] == [1, 2]


def test_a_rejected_key_fails_the_run_without_retrying(fake_server):
    fake_server.openai(openai_error(401, "Incorrect API key provided", type="invalid_api_key"))
    run = Run(fake_server)

    info = run.execute()

    assert (info.status, info.error.kind) == (RunStatus.FAILED, ErrorKind.UNAVAILABLE)
    assert run.events(E.MODEL_RETRY) == []
    assert len(fake_server.requests) == 1


def test_a_tool_call_cut_off_by_the_length_limit_is_not_executed(fake_server):
    # What OpenAI sends when max_tokens runs out inside a call's arguments.
    cut = openai_tool_calls([StreamedCall("call_1", "echo", ['{"text": "a very lo'])])
    cut.frames = [
        frame.replace('"finish_reason": "tool_calls"', '"finish_reason": "length"')
        for frame in cut.frames
    ]
    fake_server.openai(cut, openai_text(["Short."]))
    run = Run(fake_server, max_output_tokens=16)

    info = run.execute()

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Short.")
    assert run.events(E.TOOL_CALL_SCHEDULED) == []
    first, second = fake_server.bodies(OPENAI_PATH)
    assert first["max_tokens"] == 16
    assert second["messages"][-1] == {"role": "user", "content": CUT_SHORT_NOTE}
    completed = run.events(E.TURN_COMPLETED)
    assert completed[0]["finish_reason"] == FinishReason.LENGTH
