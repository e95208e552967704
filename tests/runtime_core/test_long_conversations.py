"""Long sessions on the in-memory store: history within a context budget, earlier
runs summarised and the summary reused, tool results bounded, and runs redone or
forked on branches of their own.

What is checked is what the model is sent (every request within budget, the right
earlier runs in it) and what the record keeps (summaries, links, whole results).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from goaai.runtime import context as budget
from goaai.runtime import inmemory_store
from goaai.runtime.agents import ASSISTANT
from goaai.runtime.config import ModelProfile, RuntimeConfig
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.errors import ModelError, NotRedoable
from goaai.runtime.facade import Runtime
from goaai.runtime.models import ModelRequest, ModelSettings
from goaai.runtime.tools import TOOLSETS, tool
from goaai.runtime.types import Branch, ModelReply, RunInfo, Usage
from goaai.runtime.vocabulary import EventType, RunStatus
from tests.runtime_core.conftest import ALICE, BOB, Engine
from tests.runtime_core.test_loop import FakeModel, Harness, call, say

E = EventType


@pytest.fixture
def tester(store: Any) -> Harness:
    return Harness(store)


def _request_tokens(request: ModelRequest) -> int:
    return budget.messages_tokens(request.messages) + budget.tools_tokens(request.tools)


# History: the branch in full, tool calls included


def test_an_earlier_run_reaches_the_model_with_its_tool_calls_and_results(tester):
    first = tester.start("what is 6*7?")

    def calculate(request: ModelRequest, n: int) -> ModelReply:
        return call("calculator", expression="6*7") if n == 0 else say("42.")

    tester.loop(FakeModel(calculate)).execute(first)
    model = FakeModel(lambda request, n: say("You asked about 6*7."))

    tester.loop(model).execute(tester.start("what did I ask?"))

    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[2].tool_calls[0].name == "calculator"
    assert json.loads(sent[3].content)["result"]["value"] == 42
    assert (sent[4].content, sent[5].content) == ("42.", "what did I ask?")


def test_a_failed_run_is_shown_as_failed_and_a_stopped_one_as_stopped(tester):
    failing = tester.start("break")
    tester.loop(FakeModel(lambda request, n: say(""))).execute(failing)  # an empty reply
    tester.store.request_cancel(tester.start("never mind"), "user_requested")
    model = FakeModel(lambda request, n: say("ok"))

    tester.loop(model).execute(tester.start("next"))

    contents = [m.content for m in model.requests[0].messages]
    assert contents[1] == "break"
    assert contents[3] == "never mind"
    assert contents[4] == "[The user stopped this answer before it was given.]"


# Tool results


def test_a_long_tool_result_reaches_the_model_truncated_and_stays_whole_in_the_record(tester):
    long_text = "word " * 2_000  # 10,000 characters
    run_id = tester.start()
    conversation = ConversationSettings(tool_result_chars=1_000)

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("echo", text=long_text) if n == 0 else say("Done.")

    model = FakeModel(script)
    tester.loop(model, conversation=conversation).execute(run_id)

    (recorded,) = tester.calls(run_id)
    assert recorded.result == {"text": long_text}
    shown = model.requests[1].messages[-1].content
    assert len(shown) < 1_200
    marker = re.search(r"truncated: the first 1000 of (\d+) characters", shown)
    assert marker is not None
    assert int(marker.group(1)) == len(json.dumps({"ok": True, "result": {"text": long_text}}))
    assert f'tool_call_id="{recorded.id}" and offset=1000' in shown


def test_read_tool_result_reads_on_from_the_offset_the_marker_names(tester):
    long_text = "abcdefghij" * 500
    run_id = tester.start()
    conversation = ConversationSettings(tool_result_chars=300)
    reads: list[dict[str, Any]] = []

    def script(request: ModelRequest, n: int) -> ModelReply:
        if n == 0:
            return call("echo", text=long_text)
        last = request.messages[-1]
        if n == 1:
            found = re.search(r'tool_call_id="([^"]+)" and offset=(\d+)', last.content)
            assert found is not None
            return call("read_tool_result", tool_call_id=found.group(1), offset=300, length=500)
        reads.append(json.loads(last.content)["result"])
        return say("Read it.")

    tester.loop(FakeModel(script), conversation=conversation).execute(run_id)

    whole = json.dumps({"ok": True, "result": {"text": long_text}})
    assert reads == [
        {"text": whole[300:800], "offset": 300, "total_chars": len(whole), "next_offset": 800}
    ]


def test_read_tool_result_refuses_another_users_call(tester, store):
    run_id = tester.start()
    tester.loop(
        FakeModel(lambda request, n: call("echo", text="secret") if n == 0 else say("ok"))
    ).execute(run_id)
    (secret,) = tester.calls(run_id)

    assert store.tool_result(tool_call_id=secret.id, owner_id=ALICE) is not None
    assert store.tool_result(tool_call_id=secret.id, owner_id=BOB) is None


# The budget, and summaries


def test_a_long_session_stays_within_its_budget_and_reuses_its_summary(tester, store):
    conversation = ConversationSettings(context_tokens=8_000, tool_result_chars=2_000)
    requests: list[ModelRequest] = []
    summaries_asked = 0

    def script(request: ModelRequest, n: int) -> ModelReply:
        nonlocal summaries_asked
        requests.append(request)
        if request.messages[0].content.startswith("You summarise"):
            summaries_asked += 1
            return ModelReply(text=f"Summary number {summaries_asked}.", usage=Usage(900, 20))
        since = budget.messages_tokens(request.messages[-1:])
        if request.messages[-1].role == "user":
            return call("echo", text="x" * 1_500)
        return say(f"Echoed ({since} tokens).")

    model = FakeModel(script)
    for number in range(40):
        tester.loop(model, conversation=conversation).execute(tester.start(f"message {number}"))

    limit = budget.input_budget(conversation, replace(ASSISTANT.model_settings), None)
    assert all(_request_tokens(r) <= limit for r in requests)
    written = store.summaries(tester.session_id)
    # Summaries are written now and then, not at every run, and each folds in the last.
    assert 2 <= len(written) <= 40 // 3
    assert [s["runs_covered"] for s in written] == sorted(s["runs_covered"] for s in written)
    # The latest run was sent the latest summary, and no run before it was summarised.
    last = [r for r in requests if not r.messages[0].content.startswith("You summarise")][-1]
    summary_messages = [m for m in last.messages if m.content.startswith("Summary of the")]
    assert len(summary_messages) == 1
    assert f"Summary number {summaries_asked}." in summary_messages[0].content
    # What a summary cost is the run's: its event says so, and the run's usage adds it.
    summarised_by = written[-1]["run"]
    (event,) = [
        e["data"]
        for e in store.events(tester.session_id)
        if e["type"] == E.HISTORY_SUMMARIZED and e["run"] == str(summarised_by)
    ]
    assert (event["input_tokens"], event["output_tokens"]) == (900, 20)
    assert store.get_run(summarised_by).usage.input_tokens >= 900


def test_when_the_summary_fails_the_run_goes_on_and_says_what_it_left_out(tester, store):
    conversation = ConversationSettings(context_tokens=2_000)

    def script(request: ModelRequest, n: int) -> ModelReply:
        if request.messages[0].content.startswith("You summarise"):
            raise ModelError("invalid_call", "no summaries today", retryable=False)
        return ModelReply(text="y" * 1_200, usage=Usage(20, 300))

    model = FakeModel(script)
    trimmed = []
    for number in range(8):
        info = tester.loop(model, conversation=conversation).execute(
            tester.start(f"message {number}")
        )
        assert info is not None
        assert info.status == RunStatus.COMPLETED
        trimmed += [d for d in tester.decisions(info.id) if d[0] == "context_budget"]

    assert trimmed
    assert "summarising them failed" in trimmed[0][2]
    assert store.summaries(tester.session_id) == []


def test_the_scripted_model_summarises_and_a_late_run_still_knows_run_three(engine: Engine):
    small = replace(ASSISTANT, conversation=ConversationSettings(context_tokens=2_500))
    engine.agents.register(small)
    session = engine.session()
    for number in range(2):
        engine.run("assistant", f"echo warming up {number}", session=session.id)
    engine.run("assistant", "remember my favourite colour is green", session=session.id)
    for number in range(40):
        engine.run("assistant", f"echo {'filler ' * 60}{number}", session=session.id)

    late = engine.run("assistant", "what is my favourite colour?", session=session.id)

    assert late.output == "Your favourite colour is green."
    written = engine.store.summaries(session.id)
    assert written, "the session was never summarised"
    # The scripted summary is deterministic, oldest exchange first, and keeps run 3.
    assert "User said: remember my favourite colour is green" in written[-1]["text"]
    for turn in engine.store.turns(late.id):
        assert budget.messages_tokens(turn.request_messages) <= 2_500


# Redo and fork


def _history_of(engine: Engine, run_id: Any) -> list[str]:
    first = engine.store.turns(run_id)[0]
    return [m.content for m in first.request_messages if m.role == "user"]


def test_a_retry_continues_from_before_the_failed_run_and_is_linked_to_it(engine: Engine):
    session = engine.session()
    engine.run("assistant", "echo one", session=session.id)
    failed = engine.create("assistant", "echo two", session=session.id)
    engine.store.request_cancel(failed.id, "user_requested")

    retry = engine.store.create_run(
        session_id=session.id,
        agent="assistant",
        input="echo two",
        labels={},
        metadata={},
        policy={},
        branch=Branch(previous_run_id=failed.previous_run_id, retry_of_id=failed.id),
    )
    engine.execute(retry.id)
    after = engine.run("assistant", "echo three", session=session.id)

    # The retried message appears once; the run after continues from the retry.
    assert _history_of(engine, retry.id) == ["echo one", "echo two"]
    assert _history_of(engine, after.id) == ["echo one", "echo two", "echo three"]
    created = engine.events(retry.id, E.RUN_CREATED)[0]
    assert created["retry_of"] == str(failed.id)


def test_redo_through_the_facade():
    rt = Runtime()
    rt.configure(config=RuntimeConfig(), executor="inline")
    session = rt.create_session(owner=ALICE, agent="assistant")
    first = rt.run("assistant", "echo alpha", session=session.id)
    second = rt.run("assistant", "echo beta", session=session.id)

    edited = rt.redo(first.id, "edit", input="echo gamma").wait()
    regenerated = rt.redo(second.id, "regenerate").wait()

    def history(run: RunInfo) -> list[str]:
        first_turn = rt.store.turns(run.id)[0]  # type: ignore[attr-defined]
        return [m.content for m in first_turn.request_messages if m.role == "user"]

    assert (edited.edit_of_id, edited.output) == (first.id, "gamma")
    assert history(edited) == ["echo gamma"]
    # Regenerating the older answer continues from before it: on beta's branch.
    assert regenerated.regenerates_id == second.id
    assert history(regenerated) == ["echo alpha", "echo beta"]
    # A message after them continues from the newest run: the regenerated one.
    after = rt.run("assistant", "echo delta", session=session.id)
    assert history(after) == ["echo alpha", "echo beta", "echo delta"]
    with pytest.raises(NotRedoable):
        rt.redo(first.id, "retry")  # it did not fail
    with pytest.raises(NotRedoable):
        rt.redo(first.id, "edit", input="  ")
    with pytest.raises(NotRedoable):
        rt.redo(first.id, "rewind")


def test_a_fork_sees_the_branch_up_to_its_run_and_the_original_goes_on(store, engine: Engine):
    session = engine.session()
    one = engine.run("assistant", "echo one", session=session.id)
    engine.run("assistant", "echo two", session=session.id)

    fork = store.fork_session(source_run_id=one.id, owner_id=ALICE, title="")
    in_fork = engine.run("assistant", "echo fork", session=fork.id)
    in_original = engine.run("assistant", "echo three", session=session.id)

    assert fork.title == "Conversation (fork)"
    assert _history_of(engine, in_fork.id) == ["echo one", "echo fork"]
    assert _history_of(engine, in_original.id) == ["echo one", "echo two", "echo three"]


def test_without_a_budget_of_its_own_an_agent_takes_its_models_window(tester):
    profile = ModelProfile(name="local", kind="openai", context_window=2_000)

    class WindowedModel(FakeModel):
        def __init__(self) -> None:
            super().__init__(lambda request, n: ModelReply(text="z" * 2_000, usage=Usage(10, 500)))
            self.profile = profile

    model = WindowedModel()
    for number in range(6):
        tester.loop(model).execute(tester.start(f"message {number}"))

    limit = budget.input_budget(ConversationSettings(), ModelSettings(), 2_000)
    assert limit == 1_500
    assert all(_request_tokens(r) <= limit for r in model.requests)
    # The window is small: the older runs went, into summaries or out.
    assert len(model.requests[-1].messages) < 2 * 6


def test_a_session_longer_than_the_walk_says_what_it_left_out(tester, monkeypatch):
    monkeypatch.setattr(inmemory_store, "MAX_HISTORY_RUNS", 3)
    model = FakeModel(lambda request, n: say("ok"))
    runs = [tester.start(f"message {number}") for number in range(5)]
    for run_id in runs:
        tester.loop(model).execute(run_id)

    last = model.requests[-1]
    assert [m.content for m in last.messages if m.role == "user"] == [
        "message 1",
        "message 2",
        "message 3",
        "message 4",
    ]
    assert [d[0] for d in tester.decisions(runs[3])] == []  # its walk reached the start
    (decision,) = [d for d in tester.decisions(runs[4]) if d[0] == "context_budget"]
    assert "never summarised" in decision[2]


def test_an_empty_summary_is_not_kept_and_the_summary_asks_for_no_reasoning(tester, store):
    conversation = ConversationSettings(context_tokens=2_000)
    asked: list[ModelRequest] = []

    def script(request: ModelRequest, n: int) -> ModelReply:
        if request.messages[0].content.startswith("You summarise"):
            asked.append(request)
            return ModelReply(text="  ", usage=Usage(800, 0))
        return ModelReply(text="y" * 1_200, usage=Usage(20, 300))

    model = FakeModel(script)
    settings = ModelSettings(reasoning_effort="high", max_output_tokens=400)
    for number in range(6):
        tester.loop(model, conversation=conversation, model_settings=settings).execute(
            tester.start(f"message {number}")
        )

    assert asked
    assert all(r.settings.reasoning_effort is None for r in asked)
    limit = budget.input_budget(conversation, settings, None)
    # The request and the summary it asks for fit the budget together.
    assert all(_request_tokens(r) + r.settings.max_output_tokens <= limit for r in asked)
    assert store.summaries(tester.session_id) == []


@tool(idempotent=True)
def report(part: int) -> dict[str, Any]:
    """A long report."""
    return {"part": part, "text": "w" * 3_000}


def test_a_result_shortened_again_to_fit_keeps_the_way_to_read_it(tester, monkeypatch):
    monkeypatch.setitem(TOOLSETS, "reports", {"report": replace(report, toolset="reports")})
    # Three long results in one run, with a budget that holds them only shortened.
    conversation = ConversationSettings(context_tokens=2_000, tool_result_chars=1_600)

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("report", part=n) if n < 3 else say("Done.")

    model = FakeModel(script)
    run_id = tester.start()
    info = tester.loop(model, conversation=conversation, toolsets=("reports",)).execute(run_id)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    last = model.requests[-1]
    limit = budget.input_budget(conversation, ModelSettings(), None)
    assert _request_tokens(last) <= limit
    ids = {str(c.id) for c in tester.calls(run_id)}
    results = [m.content for m in last.messages if m.role == "tool"]
    assert any(len(r) < 1_000 for r in results)  # shortened below the agent's limit
    for result in results:
        pointer = re.search(r'tool_call_id="([^"]+)"', result)
        assert pointer is not None
        assert pointer.group(1) in ids
