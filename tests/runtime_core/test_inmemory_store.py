"""What the in-memory store offers beyond the storage protocol (whose contract both
stores share, in ``tests/goaai/runtime/test_store_contract.py``): reading back what
was recorded, streamed text, anonymous users, and many threads at once."""

from __future__ import annotations

import threading

from goaai.runtime.inmemory_store import Delta, InMemoryRunStore
from goaai.runtime.types import ModelReply, RunContext, ToolCallRequest, Usage
from goaai.runtime.vocabulary import EventType, RunStatus

E = EventType


def _running(store: InMemoryRunStore, owner: int = 1) -> RunContext:
    session = store.create_session(owner_id=owner, agent="assistant", title="", metadata={})
    run = store.create_run(
        session_id=session.id, agent="assistant", input="hi", labels={}, metadata={}, policy={}
    )
    context = store.claim_run(run.id, owner="w1", lease_seconds=60)
    assert context is not None
    return context


def test_without_a_user_list_any_id_owns_sessions_and_deciders_go_unnamed():
    store = InMemoryRunStore()
    context = _running(store, owner=4242)
    turn = store.start_turn(run_id=context.run_id, index=0, model="m", messages=[])
    call = store.schedule_tool_call(
        turn_id=turn,
        index=0,
        request=ToolCallRequest(id="c", name="memory_forget_all", arguments={}),
        requires_approval=True,
    )
    store.await_input(run_id=context.run_id, kind="approval", tool_call_id=call)

    store.respond(
        context.run_id,
        tool_call_id=call,
        decision="approve",
        reason="",
        answer=None,
        decided_by_id=4242,
    )

    assert store.get_session(context.session_id).owner_id == 4242
    (decided,) = [e for e in store.events(context.session_id) if e["type"] == E.TOOL_CALL_DECIDED]
    assert (decided["data"]["decided_by"], decided["data"]["decided_by_name"]) == (4242, None)


def test_streamed_text_is_kept_in_order_under_its_run_and_turn():
    store = InMemoryRunStore(users={1: "alice"})
    context = _running(store)
    turn = store.start_turn(run_id=context.run_id, index=0, model="m", messages=[])

    store.publish_delta(context, turn, "Hel", 0)
    store.publish_delta(context, turn, "lo", 3)

    assert store.deltas == [
        Delta(context.session_id, context.run_id, turn, "Hel", 0),
        Delta(context.session_id, context.run_id, turn, "lo", 3),
    ]


def test_what_is_read_back_is_a_copy_that_cannot_change_the_record():
    store = InMemoryRunStore(users={1: "alice"})
    context = _running(store)
    turn = store.start_turn(
        run_id=context.run_id, index=0, model="m", messages=[{"role": "user", "content": "hi"}]
    )
    store.complete_turn(
        turn_id=turn,
        reply=ModelReply(
            tool_calls=(ToolCallRequest(id="c", name="echo", arguments={"text": ["a"]}),),
            usage=Usage(1, 1),
        ),
        latency_ms=1,
    )
    call = store.start_tool_call(
        turn_id=turn,
        index=0,
        request=ToolCallRequest(id="c", name="echo", arguments={"text": ["a"]}),
    )

    store.events(context.session_id)[0]["data"]["agent"] = "changed"
    store.turns(context.run_id)[0].tool_calls[0].arguments["text"].append("b")
    store.get_run(context.run_id).labels["x"] = "y"

    assert store.events(context.session_id)[0]["data"]["agent"] == "assistant"
    (state,) = store.turns(context.run_id)[0].tool_calls
    assert (state.id, state.arguments) == (call, {"text": ["a"]})
    assert store.get_run(context.run_id).labels == {}


def test_child_runs_are_listed_under_their_parent_only():
    store = InMemoryRunStore(users={1: "alice"})
    parent = _running(store)
    other = _running(store)
    turn = store.start_turn(run_id=parent.run_id, index=0, model="m", messages=[])
    call = store.start_tool_call(
        turn_id=turn,
        index=0,
        request=ToolCallRequest(id="c", name="ask_assistant", arguments={"prompt": "x"}),
    )
    children = [
        store.create_child_run(
            parent_run_id=parent.run_id,
            parent_tool_call_id=call,
            agent="assistant",
            input=prompt,
            labels={},
            policy={},
        )
        for prompt in ("first", "second")
    ]

    assert [run.input for run in store.child_runs(parent.run_id)] == ["first", "second"]
    assert [run.id for run in store.child_runs(parent.run_id)] == [c.id for c in children]
    assert store.child_runs(other.run_id) == []


def test_steps_written_by_many_threads_at_once_are_numbered_without_gaps():
    store = InMemoryRunStore(users={1: "alice"})
    context = _running(store)
    start = threading.Barrier(8)

    def write(worker: int) -> None:
        start.wait()
        for index in range(25):
            store.policy_decision(
                run_id=context.run_id, rule=f"w{worker}", verdict="note", reason=str(index)
            )

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    events = store.events(context.session_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    decisions = [e["data"] for e in events if e["type"] == E.POLICY_DECISION]
    assert len(decisions) == 200
    # Each writer's own events kept their order.
    for worker in range(8):
        mine = [d["reason"] for d in decisions if d["rule"] == f"w{worker}"]
        assert mine == [str(index) for index in range(25)]
    assert store.get_run(context.run_id).status == RunStatus.RUNNING
