"""Crash recovery on the database, through ``rt``: a server that starts after another
of its host crashed takes that one's runs up at once (its process has ended: no
waiting for the lease), tells them interrupted, closes the turn that was streaming
with what it had said and an estimate of its usage, and asks the model again; an
agent called as a tool goes on with the run that called it."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from uuid import UUID

import pytest

from goaai.runtime import rt
from goaai.runtime.types import Message, ModelReply, ToolCallRequest
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from goaai.runtime.workers import process_identity, worker_name
from runs_app.models import Run, ToolCall, Turn
from sessions_app.models import RunEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not process_identity(), reason="needs Linux's /proc"),
]
E = EventType
LEASE = 60.0


def _dead_owner() -> str:
    """A lease owner naming a process of this host that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with open(f"/proc/{child.pid}/stat") as stat:
            start = stat.read().rsplit(")", 1)[1].split()[19]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    place = process_identity().split(".", 1)[1]
    return f"{socket.gethostname()}:{child.pid}:1:abcd1234:{start}.{place}"


def _types(run_id: UUID) -> list[str]:
    return list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
    )


def _held_mid_answer(owner, dead: str, prompt: str, said: str) -> UUID:
    """A run of ``prompt`` whose worker (``dead``) died while the model answered,
    having checkpointed ``said``."""
    session = rt.create_session(owner=owner, agent="assistant")
    run = rt.store.create_run(
        session_id=session.id, agent="assistant", input=prompt, labels={}, metadata={}, policy={}
    )
    assert rt.store.claim_run(run.id, owner=dead, lease_seconds=LEASE) is not None
    turn = rt.store.start_turn(
        run_id=run.id,
        index=0,
        model="scripted",
        messages=[Message(role="user", content=prompt).as_dict()],
    )
    rt.store.checkpoint_turn(turn_id=turn, text=said)
    return run.id


def test_a_run_of_a_process_that_ended_is_taken_up_at_once_and_asked_again(inline_runtime, owner):
    run_id = _held_mid_answer(owner, _dead_owner(), "echo Once upon a time", "Once upon")

    assert rt.reap() == 1

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "Once upon a time")
    types = _types(run_id)
    assert types.index(E.RUN_INTERRUPTED) < types.index(E.TURN_COMPLETED)
    (interrupted,) = RunEvent.objects.filter(run_id=run_id, type=E.RUN_INTERRUPTED)
    assert (interrupted.data["cause"], interrupted.data["reason"]) == (
        "process_ended",
        "the worker's process ended",
    )
    lost, *_, answered = Turn.objects.filter(run_id=run_id).order_by("index")
    assert (lost.interruption, lost.response_text, lost.usage_estimated) == (
        "crashed",
        "Once upon",
        True,
    )
    assert lost.ended_at is not None
    assert lost.input_tokens > 0
    assert lost.output_tokens > 0
    assert answered.response_text == "Once upon a time"
    # The lost text is no message; its usage counts in the run's.
    said = RunEvent.objects.filter(run_id=run_id, type=E.MESSAGE_COMPLETED)
    assert [event.data["turn"] for event in said] == [str(answered.id)]
    turns = Turn.objects.filter(run_id=run_id)
    assert run.output_tokens == sum(turn.output_tokens for turn in turns)


def test_a_run_whose_process_lives_is_left_to_it(inline_runtime, owner):
    run_id = _held_mid_answer(owner, worker_name(), "echo hi", "h")

    assert rt.reap() == 0

    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING
    assert E.RUN_INTERRUPTED not in _types(run_id)


def test_a_parent_and_the_agent_it_called_are_taken_up_together(inline_runtime, owner):
    dead = _dead_owner()
    session = rt.create_session(owner=owner, agent="concierge")
    parent = rt.store.create_run(
        session_id=session.id,
        agent="concierge",
        input="ask the assistant to echo hello",
        labels={},
        metadata={},
        policy={},
    )
    assert rt.store.claim_run(parent.id, owner=dead, lease_seconds=LEASE)
    turn = rt.store.start_turn(
        run_id=parent.id, index=0, model="scripted", messages=[{"role": "user", "content": "x"}]
    )
    ask = ToolCallRequest(id="call_1", name="ask_assistant", arguments={"prompt": "echo hello"})
    rt.store.complete_turn(turn_id=turn, reply=ModelReply(tool_calls=(ask,)), latency_ms=1)
    call = rt.store.start_tool_call(turn_id=turn, index=0, request=ask)
    child = rt.store.create_child_run(
        parent_run_id=parent.id,
        parent_tool_call_id=call,
        agent="assistant",
        input="echo hello",
        labels={},
        policy={},
    )
    assert rt.store.claim_run(child.id, owner=dead, lease_seconds=LEASE)

    # Both are told interrupted; only the parent is handed out, and takes its child up.
    assert rt.reap() == 1

    finished = Run.objects.get(pk=parent.id)
    assert finished.status == RunStatus.COMPLETED
    (only,) = Run.objects.filter(parent_run_id=parent.id)
    assert (only.id, only.status, only.output) == (child.id, RunStatus.COMPLETED, "hello")
    assert finished.output == "The assistant agent says: hello"
    assert ToolCall.objects.get(pk=call).status == ToolCallStatus.SUCCEEDED
    for run_id in (parent.id, child.id):
        assert _types(run_id).count(E.RUN_INTERRUPTED) == 1
    assert rt.store.expired_runs() == []
