"""The seed's typical chat, end to end through ``rt``: a user tells the assistant
something, asks for it back in the next message, and ends the conversation.

Everything a person could later audit is checked: each run, turn and tool call
row, the memory entry and who wrote it, and the session's whole event log.
"""

from __future__ import annotations

import itertools
import json

import pytest
from django.db import transaction

from goaai.runtime import SessionEnded, rt
from goaai.runtime.vocabulary import EventType, RunStatus, SessionStatus, ToolCallStatus, WriterKind
from memory_app.models import MemoryEntry, MemoryRevision
from runs_app.models import Run, ToolCall, Turn
from sessions_app.models import RunEvent, Session

REMEMBERED = "Got it. I'll remember in this conversation that your favourite colour is green."
RECALLED = "Your favourite colour is green."
SYSTEM_PROMPT_ROLE = "system"

E = EventType
# One run in which the scripted model calls one tool and then answers.
RUN_WITH_ONE_TOOL_CALL = [
    E.RUN_CREATED,
    E.RUN_STARTED,
    E.TURN_STARTED,
    E.TURN_COMPLETED,
    E.USAGE,
    E.TOOL_CALL_SCHEDULED,
    E.TOOL_CALL_STARTED,
    E.TOOL_CALL_SUCCEEDED,
    E.TURN_STARTED,
    E.TURN_COMPLETED,
    E.MESSAGE_COMPLETED,
    E.USAGE,
    E.RUN_COMPLETED,
]


def _with_memory_stored(events: list[EventType]) -> list[EventType]:
    at = events.index(E.TOOL_CALL_SUCCEEDED)
    return [*events[:at], E.MEMORY_STORED, *events[at:]]


def _check_run_with_one_tool_call(
    run: Run, *, tool: str, arguments: dict, result: dict, answer: str
):
    """The rows one remember/recall run leaves: two turns, one succeeded tool call."""
    assert run.status == RunStatus.COMPLETED
    assert run.output == answer
    assert run.started_at is not None
    assert run.ended_at >= run.started_at
    assert (run.error_kind, run.error_message) == ("", "")
    turns = list(run.turns.order_by("index"))
    assert [t.index for t in turns] == [0, 1]
    first, second = turns
    assert (first.model, first.response_text) == ("scripted", "")
    assert first.response_tool_calls == [{"id": "call_1", "name": tool, "arguments": arguments}]
    assert (second.response_text, second.response_tool_calls) == (answer, [])
    assert all(t.ended_at is not None and t.latency_ms is not None for t in turns)
    assert run.input_tokens == sum(t.input_tokens for t in turns) > 0
    assert run.output_tokens == sum(t.output_tokens for t in turns) > 0
    assert run.total_tokens == run.input_tokens + run.output_tokens

    (call,) = ToolCall.objects.filter(run=run)
    assert (call.turn_id, call.session_id, call.index, call.call_id) == (
        first.id,
        run.session_id,
        0,
        "call_1",
    )
    assert (call.name, call.arguments, call.result) == (tool, arguments, result)
    assert call.status == ToolCallStatus.SUCCEEDED
    assert (call.error_kind, call.error_message, call.attempt) == ("", "", 1)
    assert call.started_at is not None
    assert call.ended_at is not None
    assert call.duration_ms is not None
    # The second turn showed the model the call and its answer.
    assert [m["role"] for m in second.request_messages[-3:]] == ["user", "assistant", "tool"]
    assert second.request_messages[-1]["tool_call_id"] == "call_1"
    return first, call


@pytest.mark.django_db(transaction=True)
def test_remember_then_recall_then_end_the_session(inline_runtime, owner):
    session = rt.create_session(owner=owner, metadata={"user_id": "user-123"})
    assert (session.owner_id, session.agent, session.status) == (owner.pk, "assistant", "active")
    assert session.metadata == {"user_id": "user-123"}

    # First message: the assistant stores the fact with its memory tool.
    first = rt.run("assistant", "remember my favourite colour is green", session=session.id)

    assert (first.status, first.output) == (RunStatus.COMPLETED, REMEMBERED)
    assert first.error is None
    run1 = Run.objects.get(pk=first.id)
    assert (run1.session_id, run1.agent, run1.input) == (
        session.id,
        "assistant",
        "remember my favourite colour is green",
    )
    assert run1.policy["max_turns"] == 8
    turn1, store_call = _check_run_with_one_tool_call(
        run1,
        tool="memory_store",
        arguments={"key": "favourite colour", "value": "green", "scope": "session"},
        result={"key": "favourite colour", "value": "green", "scope": "session", "version": 1},
        answer=REMEMBERED,
    )
    assert [(m["role"], m["content"]) for m in turn1.request_messages][1:] == [
        ("user", "remember my favourite colour is green")
    ]
    assert turn1.request_messages[0]["role"] == SYSTEM_PROMPT_ROLE

    entry = MemoryEntry.objects.get()
    assert (entry.key, entry.value, entry.scope, entry.session_id, entry.version) == (
        "favourite colour",
        "green",
        "session",
        session.id,
        1,
    )
    assert (entry.written_by_kind, entry.written_by_run_id, entry.written_by_tool_call_id) == (
        WriterKind.RUN,
        run1.id,
        store_call.id,
    )
    revision = MemoryRevision.objects.get()
    assert (revision.actor_run_id, revision.actor_tool_call_id) == (run1.id, store_call.id)
    assert rt.get_memory("favourite colour", session=session.id).value == "green"

    # Second message: the assistant recalls it, and saw the first exchange.
    second = rt.run("assistant", "what is my favourite colour?", session=session.id)

    assert (second.status, second.output) == (RunStatus.COMPLETED, RECALLED)
    run2 = Run.objects.get(pk=second.id)
    turn2, _ = _check_run_with_one_tool_call(
        run2,
        tool="memory_recall",
        arguments={"key": "favourite colour"},
        result={"key": "favourite colour", "found": True, "value": "green", "scope": "session"},
        answer=RECALLED,
    )
    assert [(m["role"], m["content"]) for m in turn2.request_messages[1:]] == [
        # What the agent remembers, after its prompt.
        ("system", "What you remember that applies here:\n- favourite colour: green (session)"),
        # The first exchange in full: the call of memory_store, its result, the answer.
        ("user", "remember my favourite colour is green"),
        ("assistant", ""),
        ("tool", json.dumps({"ok": True, "result": store_call.result})),
        ("assistant", REMEMBERED),
        ("user", "what is my favourite colour?"),
    ]

    # The user ends the conversation; it accepts no more messages.
    ended = rt.end_session(session.id)

    assert ended.status == SessionStatus.ENDED
    assert ended.ended_at is not None
    with pytest.raises(SessionEnded):
        rt.run("assistant", "are you still there?", session=session.id)
    assert Run.objects.filter(session_id=session.id).count() == 2
    assert Turn.objects.filter(run__session_id=session.id).count() == 4
    assert ToolCall.objects.filter(session_id=session.id).count() == 2

    # The whole log, in order, numbered 1..N with no gap.
    events = list(RunEvent.objects.filter(session_id=session.id).order_by("seq"))
    expected = [
        E.SESSION_CREATED,
        *_with_memory_stored(RUN_WITH_ONE_TOOL_CALL),
        *RUN_WITH_ONE_TOOL_CALL,
        E.SESSION_ENDED,
    ]
    assert [e.type for e in events] == expected
    assert [e.seq for e in events] == list(range(1, len(expected) + 1))
    assert Session.objects.get(pk=session.id).last_event_seq == len(expected)
    run_of_event = [e.run_id for e in events]
    assert run_of_event[0] is None
    assert run_of_event[-1] is None
    assert set(run_of_event[1:15]) == {run1.id}
    assert set(run_of_event[15:-1]) == {run2.id}
    by_type = {(e.run_id, e.type): e.data for e in events}
    assert by_type[(run1.id, E.RUN_COMPLETED)] == {
        "output": REMEMBERED,
        "usage": {
            "input_tokens": run1.input_tokens,
            "output_tokens": run1.output_tokens,
            "cached_input_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
            "total_tokens": run1.total_tokens,
            # The scripted model has no price.
            "cost": None,
            "unpriced_turns": 2,
        },
    }
    assert by_type[(run1.id, E.MEMORY_STORED)]["entry"] == str(entry.pk)
    assert by_type[(run2.id, E.TOOL_CALL_SUCCEEDED)]["result"]["value"] == "green"
    assert by_type[(run2.id, E.MESSAGE_COMPLETED)]["text"] == RECALLED
    assert by_type[(None, E.SESSION_ENDED)]["runs_canceled"] == 0


@pytest.mark.django_db(transaction=True)
def test_user_scoped_memory_carries_over_to_the_next_session(inline_runtime, owner):
    first = rt.create_session(owner=owner)
    rt.run("assistant", "always remember my name is Ada", session=first.id)
    rt.end_session(first.id)

    later = rt.create_session(owner=owner)
    answer = rt.run("assistant", "what is my name?", session=later.id)

    assert answer.output == "Your name is Ada."
    entry = MemoryEntry.objects.get()
    assert (entry.scope, entry.user_id, entry.session_id) == ("user", owner.pk, None)


@pytest.mark.django_db(transaction=True)
def test_a_run_canceled_before_it_began_never_executes(inline_runtime, owner):
    session = rt.create_session(owner=owner)

    with transaction.atomic():
        handle = rt.start("assistant", "calculate 6*7", session=session.id)
        canceled = rt.cancel_run(handle.run_id, reason="user_requested")
        assert canceled.status == RunStatus.CANCELED
    # The executor received the run on commit, found it canceled and left it.

    run = Run.objects.get(pk=handle.run_id)
    assert (run.status, run.cancel_reason, run.output) == (RunStatus.CANCELED, "user_requested", "")
    assert run.started_at is None
    assert not run.turns.exists()
    assert list(
        RunEvent.objects.filter(session_id=session.id)
        .order_by("seq")
        .values_list("type", flat=True)
    ) == [E.SESSION_CREATED, E.RUN_CREATED, E.RUN_CANCELED]


# Waiting for a person


@pytest.mark.django_db(transaction=True)
def test_forgetting_everything_waits_for_approval_then_forgets(inline_runtime, owner):
    session = rt.create_session(owner=owner)
    rt.run("assistant", "remember my favourite colour is green", session=session.id)

    waiting = rt.run("assistant", "forget everything", session=session.id)

    assert waiting.status == RunStatus.AWAITING_INPUT
    call = ToolCall.objects.get(run_id=waiting.id)
    assert (call.name, call.status, call.requires_approval) == (
        "memory_forget_all",
        ToolCallStatus.SCHEDULED,
        True,
    )
    assert MemoryEntry.objects.filter(session_id=session.id).exists()

    rt.respond(waiting.id, tool_call=call.id, decision="approve", user=owner)
    done = rt.wait(waiting.id, timeout=30)

    assert (done.status, done.output) == (
        RunStatus.COMPLETED,
        "Done. I've forgotten everything in this conversation: favourite colour.",
    )
    call.refresh_from_db()
    assert (call.status, call.decision, call.decided_by_id) == (
        ToolCallStatus.SUCCEEDED,
        "approved",
        owner.pk,
    )
    assert not MemoryEntry.objects.filter(session_id=session.id).exists()
    types = list(
        RunEvent.objects.filter(run_id=waiting.id).order_by("seq").values_list("type", flat=True)
    )
    assert E.TOOL_CALL_APPROVAL_REQUESTED in types
    assert types.index(E.RUN_AWAITING_INPUT) < types.index(E.TOOL_CALL_DECIDED)
    assert types.index(E.TOOL_CALL_DECIDED) < types.index(E.RUN_RESUMED)
    assert types[-1] == E.RUN_COMPLETED


@pytest.mark.django_db(transaction=True)
def test_a_denied_call_is_never_executed_and_the_user_is_told(inline_runtime, owner):
    session = rt.create_session(owner=owner)
    rt.run("assistant", "remember my favourite colour is green", session=session.id)
    waiting = rt.run("assistant", "forget everything", session=session.id)

    rt.respond(waiting.id, decision="deny", reason="not today", user=owner)
    done = rt.wait(waiting.id, timeout=30)

    assert done.status == RunStatus.COMPLETED
    assert done.output == "I couldn't do that: A person denied this call: not today"
    call = ToolCall.objects.get(run_id=waiting.id)
    assert (call.status, call.attempt, call.decision) == (ToolCallStatus.DENIED, 0, "denied")
    assert MemoryEntry.objects.filter(session_id=session.id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_question_to_the_user_waits_for_the_answer(inline_runtime, owner):
    session = rt.create_session(owner=owner)

    waiting = rt.run("assistant", "ask me for my name", session=session.id)

    assert waiting.status == RunStatus.AWAITING_INPUT
    assert Run.objects.get(pk=waiting.id).awaiting["question"] == "What is your name?"

    rt.respond(waiting.id, answer="Ada", user=owner)
    done = rt.wait(waiting.id, timeout=30)

    assert (done.status, done.output) == (RunStatus.COMPLETED, "Thanks! Your name is Ada.")
    call = ToolCall.objects.get(run_id=waiting.id)
    assert (call.status, call.result, call.decided_by_id) == (
        ToolCallStatus.SUCCEEDED,
        {"answer": "Ada"},
        owner.pk,
    )


# With real worker threads


@pytest.mark.django_db(transaction=True)
def test_a_run_started_on_a_worker_thread_completes(thread_runtime, owner):
    session = rt.create_session(owner=owner)

    handle = rt.start("assistant", "calculate 2 * (3 + 4)", session=session.id)
    result = handle.wait(timeout=30)

    assert (result.status, result.output) == (RunStatus.COMPLETED, "2 * (3 + 4) = 14")
    call = ToolCall.objects.get(run_id=handle.run_id)
    assert (call.name, call.status, call.result) == (
        "calculator",
        ToolCallStatus.SUCCEEDED,
        {"expression": "2 * (3 + 4)", "value": 14},
    )
    seqs = list(
        RunEvent.objects.filter(session_id=session.id).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) == 1 + len(RUN_WITH_ONE_TOOL_CALL)


# SQLite's shared in-memory test database answers concurrent writers with "table is
# locked" at once instead of waiting; the file database goaai runs on waits.
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_several_runs_on_worker_threads_keep_one_contiguous_log(thread_runtime, owner):
    session = rt.create_session(owner=owner)

    handles = [rt.start("assistant", f"calculate {n} * 2", session=session.id) for n in range(1, 4)]
    results = [handle.wait(timeout=30) for handle in handles]

    assert [r.output for r in results] == ["1 * 2 = 2", "2 * 2 = 4", "3 * 2 = 6"]
    # One at a time, in the order they were sent (those sent while one was at work
    # waited behind it: a run.queued event each).
    assert [r.started_at for r in results] == sorted(r.started_at for r in results)
    assert all(a.ended_at <= b.started_at for a, b in itertools.pairwise(results))
    seqs = list(
        RunEvent.objects.filter(session_id=session.id).order_by("seq").values_list("seq", flat=True)
    )
    queued = RunEvent.objects.filter(session_id=session.id, type="run.queued").count()
    assert seqs == list(range(1, 1 + 3 * len(RUN_WITH_ONE_TOOL_CALL) + queued + 1))


@pytest.mark.django_db(transaction=True)
def test_cancel_run_cancels_a_pending_run_at_once(thread_runtime, owner):
    session = rt.create_session(owner=owner)

    with transaction.atomic():
        handle = rt.start("assistant", "echo never", session=session.id)
        handle.cancel(reason="changed my mind")
    result = handle.wait(timeout=30)

    assert result.status == RunStatus.CANCELED
    run = Run.objects.get(pk=handle.run_id)
    assert (run.cancel_reason, run.started_at) == ("changed my mind", None)
    assert not run.turns.exists()
