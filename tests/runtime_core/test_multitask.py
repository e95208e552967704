"""One run at a time in a session, through the ``rt`` facade on the in-memory store:
a message sent while a run is active waits for it (and is handed to the executor as
it ends), is refused, or stops it first."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from uuid import UUID

import pytest

from goaai.runtime.agents import ASSISTANT, AgentRegistry
from goaai.runtime.config import RuntimeConfig
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.errors import RunActive
from goaai.runtime.facade import RunHandle, Runtime
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.vocabulary import EventType, Multitask, RunStatus

STRICT = dataclasses.replace(
    ASSISTANT, id="strict", conversation=ConversationSettings(multitask=Multitask.REJECT)
)


def _runtime(executor: str = "inline") -> tuple[Runtime, InMemoryRunStore]:
    store = InMemoryRunStore()
    runtime = Runtime()
    runtime.configure(
        config=RuntimeConfig(run_wait_seconds=30),
        store=store,
        agents=AgentRegistry([ASSISTANT, STRICT]),
        executor=executor,
    )
    return runtime, store


def _types(store: InMemoryRunStore, session_id: UUID, run_id: UUID) -> list[str]:
    return [e["type"] for e in store.events(session_id) if e["run"] == str(run_id)]


def test_a_message_queued_behind_a_waiting_run_starts_when_it_ends_and_sees_it():
    rt, store = _runtime()
    session = rt.create_session(owner=1)
    asking = rt.start("assistant", "ask me for my name", session=session.id)
    assert rt.get_run(asking.run_id).status == RunStatus.AWAITING_INPUT

    queued = rt.start("assistant", "echo hi", session=session.id)
    later = rt.start("assistant", "echo later", session=session.id)

    assert rt.get_run(queued.run_id).queued_behind == asking.run_id
    assert rt.get_run(later.run_id).queued_behind == queued.run_id
    assert rt.get_run(queued.run_id).status == RunStatus.PENDING

    rt.respond(asking.run_id, answer="Ada")

    # The inline executor ran each as the one before it ended, in order.
    done = [rt.get_run(h.run_id) for h in (asking, queued, later)]
    assert [r.status for r in done] == [RunStatus.COMPLETED] * 3
    assert [r.output for r in done[1:]] == ["hi", "later"]
    assert done[0].ended_at <= done[1].started_at
    assert done[1].ended_at <= done[2].started_at
    assert _types(store, session.id, queued.run_id)[:3] == [
        EventType.RUN_CREATED,
        EventType.RUN_QUEUED,
        EventType.RUN_STARTED,
    ]
    seen = " ".join(str(m.content) for m in store.turns(queued.run_id)[0].request_messages)
    assert "ask me for my name" in seen
    assert done[0].output in seen


def test_canceling_the_active_run_hands_the_queued_one_over():
    rt, _ = _runtime()
    session = rt.create_session(owner=1)
    asking = rt.start("assistant", "ask me for my name", session=session.id)
    queued = rt.start("assistant", "echo hi", session=session.id)

    rt.cancel_run(asking.run_id, reason="never mind")

    assert rt.get_run(queued.run_id).output == "hi"


def test_an_agent_that_takes_one_message_at_a_time_refuses_another():
    rt, store = _runtime()
    session = rt.create_session(owner=1, agent="strict")
    asking = rt.start("strict", "ask me for my name", session=session.id)
    logged = store.events(session.id)

    with pytest.raises(RunActive) as refused:
        rt.start("strict", "echo hi", session=session.id)

    assert refused.value.active_run_id == asking.run_id
    assert store.events(session.id) == logged
    # The request may ask for another policy than the agent's.
    queued = rt.start("strict", "echo hi", session=session.id, multitask="enqueue")
    assert rt.get_run(queued.run_id).queued_behind == asking.run_id


def test_interrupting_a_streaming_story_keeps_what_it_said_then_answers(monkeypatch):
    monkeypatch.setattr("goaai.runtime.loop.CANCEL_CHECK_SECONDS", 0.01)
    monkeypatch.setattr("goaai.runtime.models.scripted.STORY_PACE", 0.01)
    rt, store = _runtime(executor="thread")
    session = rt.create_session(owner=1)
    story = rt.start("assistant", "tell me a story", session=session.id)
    deadline = time.monotonic() + 10
    while len([d for d in store.deltas if d.run_id == story.run_id]) < 5:
        assert time.monotonic() < deadline, "the story never streamed"
        time.sleep(0.005)

    now = rt.start("assistant", "echo now", session=session.id, multitask="interrupt")
    answered = now.wait(timeout=20)

    stopped = rt.get_run(story.run_id)
    assert (stopped.status, answered.status, answered.output) == (
        RunStatus.CANCELED,
        RunStatus.COMPLETED,
        "now",
    )
    assert stopped.output.startswith("Once upon a time")
    assert stopped.output == store.turns(story.run_id)[0].response_text
    assert stopped.ended_at <= answered.started_at
    assert answered.multitask == Multitask.INTERRUPT
    rt.reset()


def test_messages_sent_at_once_from_threads_run_one_after_the_other():
    rt, store = _runtime(executor="thread")
    session = rt.create_session(owner=1)
    barrier = threading.Barrier(4)
    handles: list[RunHandle] = []

    def send(n: int) -> None:
        barrier.wait(timeout=10)
        handles.append(rt.start("assistant", f"echo {n}", session=session.id))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    runs = sorted(
        (h.wait(timeout=20) for h in handles),
        key=lambda run: run.started_at,
    )

    assert [run.status for run in runs] == [RunStatus.COMPLETED] * 4
    assert all(a.ended_at <= b.started_at for a, b in itertools.pairwise(runs))
    queued = [e for e in store.events(session.id) if e["type"] == EventType.RUN_QUEUED]
    assert len(queued) == sum(1 for run in runs if run.multitask == Multitask.ENQUEUE)
    rt.reset()


def test_an_unknown_policy_is_refused_before_anything_is_recorded():
    rt, store = _runtime()
    session = rt.create_session(owner=1)
    logged = store.events(session.id)

    with pytest.raises(ValueError, match="Unknown multitask 'later'"):
        rt.start("assistant", "echo hi", session=session.id, multitask="later")

    assert store.events(session.id) == logged
