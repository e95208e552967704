"""Runs whose worker died: found at once when the worker was a process of this host
that has ended, told interrupted, and taken up again; agents called as tools taken
up with (or settled after) the run that called them, never left running."""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
from uuid import UUID

import pytest

from goaai.runtime.config import RuntimeConfig
from goaai.runtime.facade import Runtime
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.types import Message, ModelReply, RunInfo, ToolCallRequest
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from goaai.runtime.workers import process_gone, process_identity, worker_name, worker_process
from tests.runtime_core.conftest import ALICE, LEASE_SECONDS, Engine

E = EventType
ASK = ToolCallRequest(id="call_1", name="ask_assistant", arguments={"prompt": "remember my pet"})
on_linux = pytest.mark.skipif(not process_identity(), reason="needs Linux's /proc")


def _ended_process() -> tuple[int, str]:
    """The pid of a process of this host that has ended and been waited for, and
    the start time it had."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with open(f"/proc/{child.pid}/stat") as stat:
            start = stat.read().rsplit(")", 1)[1].split()[19]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return child.pid, start


def _owner(pid: int, start: str, *, host: str | None = None, place: str | None = None) -> str:
    mine = process_identity().split(".", 1)[1]
    return f"{host or socket.gethostname()}:{pid}:1:abcd1234:{start}.{place or mine}"


# Telling a dead worker's process from a live one


def test_a_worker_is_named_after_its_host_process_and_thread():
    name = worker_name()
    process = worker_process(name)

    assert process is not None
    assert (process.host, process.pid) == (socket.gethostname(), os.getpid())
    assert name != worker_name()  # each execution holds its own lease
    assert process_gone(name) is False


@on_linux
def test_a_process_of_this_host_that_ended_is_gone():
    pid, start = _ended_process()

    assert process_gone(_owner(pid, start)) is True


@on_linux
def test_a_pid_used_again_by_another_process_is_not_the_worker():
    # A live process (this one's parent) with another start time than the worker's.
    assert process_gone(_owner(os.getppid(), "1")) is True


@on_linux
def test_a_live_process_is_not_gone_and_what_cannot_be_told_is_left_to_the_lease():
    with open(f"/proc/{os.getppid()}/stat") as stat:
        start = stat.read().rsplit(")", 1)[1].split()[19]
    pid, ended_start = _ended_process()

    assert process_gone(_owner(os.getppid(), start)) is False
    # Another host, another pid namespace (a container), or a name without the
    # process's identity (written before it was recorded, or off Linux): unknown.
    assert process_gone(_owner(pid, ended_start, host="elsewhere")) is False
    assert process_gone(_owner(pid, ended_start, place="4026531111.0badc0de")) is False
    assert process_gone(f"{socket.gethostname()}:{pid}:1:abcd1234") is False
    assert process_gone(f"{socket.gethostname()}:{pid}:1:abcd1234:") is False
    assert process_gone("dead-worker") is False


# The reaper: runs of a process that ended are taken up at once


class Recorder:
    def __init__(self) -> None:
        self.submitted: list[UUID] = []

    def submit(self, run_id: UUID) -> None:
        self.submitted.append(run_id)

    def wait(self, run_id: UUID, timeout: float) -> bool:
        return False


def _runtime(store: InMemoryRunStore) -> tuple[Runtime, Recorder]:
    runtime, recorder = Runtime(), Recorder()
    runtime.configure(config=RuntimeConfig(), store=store, executor=recorder)
    return runtime, recorder


def _held(engine: Engine, owner: str, prompt: str = "hello") -> RunInfo:
    run = engine.create("assistant", prompt)
    assert engine.store.claim_run(run.id, owner=owner, lease_seconds=LEASE_SECONDS)
    return engine.store.get_run(run.id)


@on_linux
def test_runs_of_a_process_that_ended_are_interrupted_and_taken_up_at_once(engine):
    pid, start = _ended_process()
    dead = _owner(pid, start)
    lost = _held(engine, dead)
    alive = _held(engine, worker_name())
    elsewhere = _held(engine, f"elsewhere:{pid}:1:abcd1234:{start}.1.2")
    runtime, recorder = _runtime(engine.store)

    assert runtime.reap() == 1

    # Long before its lease would have expired.
    assert recorder.submitted == [lost.id]
    assert engine.events(lost.id, E.RUN_INTERRUPTED) == [
        {"cause": "process_ended", "reason": "the worker's process ended", "worker": dead}
    ]
    for kept in (alive, elsewhere):
        assert engine.events(kept.id, E.RUN_INTERRUPTED) == []
    # The dead process's lease is no longer its: nothing it wrote could renew it.
    assert engine.store.renew_lease(lost.id, owner=dead, lease_seconds=LEASE_SECONDS) is False
    context = engine.store.claim_run(lost.id, owner="w2", lease_seconds=LEASE_SECONDS)
    assert context is not None
    # Told once: the next look finds nothing more to do.
    recorder.submitted.clear()
    assert runtime.reap() == 0
    assert len(engine.events(lost.id, E.RUN_INTERRUPTED)) == 1


@on_linux
def test_an_interrupted_run_is_asked_again_where_its_worker_left_it(engine):
    pid, start = _ended_process()
    said = "echo Once upon a time there was a cat"
    run = _held(engine, _owner(pid, start), prompt=said)
    sent = [Message(role="user", content=said)]
    lost = engine.store.start_turn(
        run_id=run.id, index=0, model="scripted", messages=[m.as_dict() for m in sent]
    )
    engine.store.checkpoint_turn(turn_id=lost, text="Once upon a")
    runtime, recorder = _runtime(engine.store)
    runtime.reap()

    info = engine.execute(recorder.submitted[0])

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    crashed, *_, answered = engine.store.turns(run.id)
    assert (crashed.interruption, crashed.response_text) == ("crashed", "Once upon a")
    assert answered.response_text == info.output == "Once upon a time there was a cat"
    # The story is told once: the lost text is no message of its own.
    assert [m["turn"] for m in engine.events(run.id, E.MESSAGE_COMPLETED)] == [str(answered.id)]


# Agents called as tools


def _parent_asking(engine: Engine, *, child_owner: str) -> tuple[RunInfo, UUID, RunInfo]:
    """A concierge run whose ask_assistant call started an assistant run, as their
    worker recorded them: the child mid-answer (its turn open)."""
    store = engine.store
    parent = engine.create("concierge", "remember my pet")
    assert store.claim_run(parent.id, owner="dead-worker", lease_seconds=LEASE_SECONDS)
    turn = store.start_turn(
        run_id=parent.id, index=0, model="scripted", messages=[{"role": "user", "content": "x"}]
    )
    store.complete_turn(turn_id=turn, reply=ModelReply(tool_calls=(ASK,)), latency_ms=1)
    call = store.start_tool_call(turn_id=turn, index=0, request=ASK)
    child = store.create_child_run(
        parent_run_id=parent.id,
        parent_tool_call_id=call,
        agent="assistant",
        input="remember my pet is a cat",
        labels={},
        policy={},
    )
    assert store.claim_run(child.id, owner=child_owner, lease_seconds=LEASE_SECONDS)
    store.start_turn(
        run_id=child.id,
        index=0,
        model="scripted",
        messages=[{"role": "user", "content": "remember my pet is a cat"}],
    )
    return parent, call, child


def test_a_running_parent_goes_on_with_the_child_it_had_started(engine):
    parent, call, child = _parent_asking(engine, child_owner="dead-worker")
    engine.clock.advance(LEASE_SECONDS + 1)
    # The parent takes its child up: the child is not handed out on its own.
    assert engine.store.expired_runs() == [parent.id]

    info = engine.execute(parent.id)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    (only,) = engine.store.child_runs(parent.id)
    assert (only.id, only.status) == (child.id, RunStatus.COMPLETED)
    assert info.output == f"The assistant agent says: {only.output}"
    ask = engine.calls(parent.id)[0]
    assert (ask.id, ask.status, ask.attempt) == (call, ToolCallStatus.SUCCEEDED, 2)
    assert [e["cause"] for e in engine.events(child.id, E.RUN_INTERRUPTED)] == ["lease_expired"]
    assert next(t.interruption for t in engine.store.turns(child.id)) == "crashed"
    assert engine.store.expired_runs() == []


def test_a_child_whose_parent_ended_is_settled_not_left_running(engine):
    parent, _, child = _parent_asking(engine, child_owner="child-worker")
    # The parent's worker is gone; the child's lease still runs.
    engine.store._runs[parent.id].lease_expires_at = engine.clock() - dt.timedelta(seconds=5)

    engine.store.request_cancel(parent.id, "stopped by the user", by=ALICE)

    # The parent ended at once; the child, held by a live lease, is asked to stop.
    assert engine.store.get_run(parent.id).status == RunStatus.CANCELED
    assert engine.store.get_run(child.id).status == RunStatus.RUNNING
    # Then its worker dies too: no one would ever see the request.
    engine.clock.advance(LEASE_SECONDS + 1)
    assert engine.store.expired_runs() == [child.id]

    info = engine.execute(child.id)

    assert info is not None
    assert info.status == RunStatus.CANCELED
    assert engine.events(child.id, E.RUN_CANCELED)[0]["stopped_by"] == {
        "kind": "user",
        "user": "alice",
        "rule": None,
    }
    assert engine.store.expired_runs() == []


def test_a_child_a_waiting_parent_waits_for_is_taken_up_on_its_own(engine):
    parent, call, child = _parent_asking(engine, child_owner="child-worker")
    # The parent waits for the child, which a worker of its own executes.
    engine.store._runs[parent.id].lease_expires_at = None
    engine.store.await_input(
        run_id=parent.id, kind="delegated", tool_call_id=call, child_run_id=child.id
    )
    engine.clock.advance(LEASE_SECONDS + 1)
    assert engine.store.expired_runs() == [child.id]

    finished = engine.execute(child.id)
    assert finished is not None
    assert finished.status == RunStatus.COMPLETED
    assert engine.store.settle_child(child.id) == parent.id
    info = engine.execute(parent.id)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    assert info.output == f"The assistant agent says: {finished.output}"
