"""Acting on a run: POST /api/v1/runs/{id}/cancel/ and /api/v1/runs/{id}/respond/."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.core.cache import cache
from django.utils import timezone

from goaai.runtime import rt
from memory_app.models import MemoryEntry
from runs_app.models import Run, ToolCall
from tests.factories import RunFactory, SessionFactory, ToolCallFactory


@pytest.fixture(autouse=True)
def _fresh_throttles():
    # Run creation is throttled per user in the cache, which outlives a test.
    cache.clear()


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


def cancel_url(run_id) -> str:
    return f"/api/v1/runs/{run_id}/cancel/"


def respond_url(run_id) -> str:
    return f"/api/v1/runs/{run_id}/respond/"


def codes(response) -> list[str]:
    return [error["code"] for error in response.json()["errors"]]


def start(api, owner, text: str, *, labels: dict[str, str] | None = None) -> dict:
    """Post a message in a new session of the owner's and return the run as it is
    once the (inline) executor stopped: ended, or waiting for a person."""
    session = rt.create_session(owner=owner, agent="assistant")
    created = api.post(
        f"/api/v1/sessions/{session.id}/runs/",
        {"input": text, "labels": labels or {}},
        format="json",
    )
    assert created.status_code == 201
    return api.get(f"/api/v1/runs/{created.json()['id']}/").json()


def waiting_run(session, kind: str = "approval") -> tuple[Run, ToolCall]:
    """A run that waits for a person, made with factories (it never executes)."""
    run = RunFactory(session=session, status="running")
    call = ToolCallFactory(
        turn__run=run,
        name="memory_forget_all" if kind == "approval" else "ask_user",
        status="scheduled",
        requires_approval=kind == "approval",
        result=None,
    )
    awaiting = {"kind": kind, "tool_call": str(call.pk)}
    if kind == "question":
        awaiting["question"] = "What is your name?"
    Run.objects.filter(pk=run.pk).update(status="awaiting_input", awaiting=awaiting)
    run.refresh_from_db()
    return run, call


# Cancel


@pytest.mark.django_db
def test_a_pending_run_is_canceled_at_once(api, session, inline_runtime):
    run = RunFactory(session=session)

    response = api.post(cancel_url(run.pk), {"reason": "changed my mind"}, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "canceled"
    assert response.json()["ended_at"] is not None
    run.refresh_from_db()
    assert run.status == "canceled"


@pytest.mark.django_db
def test_a_run_started_through_the_api_but_not_yet_executed_can_be_canceled(
    api, session, inline_runtime
):
    # Inside the test's transaction nothing is committed, so no executor picks it up.
    created = api.post(f"/api/v1/sessions/{session.pk}/runs/", {"input": "echo hi"}, format="json")

    response = api.post(cancel_url(created.json()["id"]), {}, format="json")

    assert created.json()["status"] == "pending"
    assert response.status_code == 200
    assert response.json()["status"] == "canceled"


@pytest.mark.django_db
def test_a_running_run_is_flagged_and_stops_at_its_next_step(api, session, inline_runtime):
    # A live lease means a worker is stepping through the run: it sees the flag.
    run = RunFactory(
        session=session,
        status="running",
        lease_owner="worker-1",
        lease_expires_at=timezone.now() + dt.timedelta(minutes=1),
    )

    response = api.post(cancel_url(run.pk), {"reason": "too slow"}, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "running"
    assert response.json()["cancel_requested_at"] is not None


@pytest.mark.django_db
@pytest.mark.parametrize("status", ["completed", "failed", "canceled", "timed_out"])
def test_a_run_that_has_ended_cannot_be_canceled(api, session, inline_runtime, status):
    run = RunFactory(session=session, status=status)

    response = api.post(cancel_url(run.pk), {}, format="json")

    assert response.status_code == 409
    assert response.json()["type"] == "client_error"
    run.refresh_from_db()
    assert run.status == status


@pytest.mark.django_db
def test_another_users_run_cannot_be_canceled(other_api, session, inline_runtime):
    run = RunFactory(session=session)

    response = other_api.post(cancel_url(run.pk), {}, format="json")

    assert response.status_code == 404
    run.refresh_from_db()
    assert run.status == "pending"


@pytest.mark.django_db
def test_staff_may_cancel_any_run(staff_api, session, inline_runtime):
    run = RunFactory(session=session)

    response = staff_api.post(cancel_url(run.pk), {}, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "canceled"


@pytest.mark.django_db
def test_a_cancel_reason_longer_than_200_characters_is_refused(api, session, inline_runtime):
    run = RunFactory(session=session)

    response = api.post(cancel_url(run.pk), {"reason": "x" * 201}, format="json")

    assert response.status_code == 400
    assert [error["attr"] for error in response.json()["errors"]] == ["reason"]
    run.refresh_from_db()
    assert run.status == "pending"


@pytest.mark.django_db
def test_canceling_a_run_that_does_not_exist_is_a_404(api, inline_runtime):
    assert api.post(cancel_url(uuid.uuid4()), {}, format="json").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_run_waiting_for_approval_is_canceled_at_once(api, owner, inline_runtime):
    run = start(api, owner, "forget everything")

    response = api.post(cancel_url(run["id"]), {}, format="json")

    assert run["status"] == "awaiting_input"
    assert response.status_code == 200
    assert response.json()["status"] == "canceled"
    assert response.json()["awaiting"] is None


# Respond: approvals


@pytest.mark.django_db(transaction=True)
def test_an_approved_tool_call_runs_and_the_run_completes(api, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    rt.store_memory("favourite colour", "green", session=session.id)
    created = api.post(
        f"/api/v1/sessions/{session.id}/runs/", {"input": "forget everything"}, format="json"
    )
    waiting = api.get(f"/api/v1/runs/{created.json()['id']}/").json()
    assert waiting["status"] == "awaiting_input"
    assert waiting["awaiting"]["kind"] == "approval"
    call_id = waiting["awaiting"]["tool_call"]

    response = api.post(
        respond_url(waiting["id"]), {"tool_call": call_id, "decision": "approve"}, format="json"
    )

    assert response.status_code == 200
    run = api.get(f"/api/v1/runs/{waiting['id']}/").json()
    assert run["status"] == "completed"
    assert run["awaiting"] is None
    assert "favourite colour" in run["output"]
    call = api.get(f"/api/v1/tool-calls/{call_id}/").json()
    assert call["name"] == "memory_forget_all"
    assert call["requires_approval"] is True
    assert call["decision"] == "approved"
    assert call["decided_by"] == owner.pk
    assert call["decided_at"] is not None
    assert call["status"] == "succeeded"
    assert not MemoryEntry.objects.filter(session_id=session.id).exists()


@pytest.mark.django_db(transaction=True)
def test_a_denied_tool_call_is_not_run_and_the_model_is_told(api, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    rt.store_memory("favourite colour", "green", session=session.id)
    created = api.post(
        f"/api/v1/sessions/{session.id}/runs/", {"input": "forget everything"}, format="json"
    )
    waiting = api.get(f"/api/v1/runs/{created.json()['id']}/").json()
    call_id = waiting["awaiting"]["tool_call"]

    response = api.post(
        respond_url(waiting["id"]),
        {"tool_call": call_id, "decision": "deny", "reason": "keep my colour"},
        format="json",
    )

    assert response.status_code == 200
    run = api.get(f"/api/v1/runs/{waiting['id']}/").json()
    assert run["status"] == "completed"
    assert run["output"].startswith("I couldn't do that")
    call = api.get(f"/api/v1/tool-calls/{call_id}/").json()
    assert call["status"] == "denied"
    assert call["decision"] == "denied"
    assert call["decision_reason"] == "keep my colour"
    assert call["decided_by"] == owner.pk
    # The model's last request carried the refusal as the tool's answer.
    last_turn = run["turns"][-1]
    tool_messages = [m for m in last_turn["request_messages"] if m["role"] == "tool"]
    assert tool_messages
    assert "keep my colour" in tool_messages[-1]["content"]
    assert MemoryEntry.objects.filter(session_id=session.id, key="favourite colour").exists()


@pytest.mark.django_db(transaction=True)
def test_under_a_review_label_every_tool_waits_for_approval(api, owner, inline_runtime):
    waiting = start(api, owner, "echo hi", labels={"review": "required"})
    assert waiting["status"] == "awaiting_input"
    assert waiting["awaiting"]["kind"] == "approval"

    response = api.post(
        respond_url(waiting["id"]),
        {"tool_call": waiting["awaiting"]["tool_call"], "decision": "approve"},
        format="json",
    )

    assert response.status_code == 200
    run = api.get(f"/api/v1/runs/{waiting['id']}/").json()
    assert run["status"] == "completed"
    assert run["output"] == "hi"


@pytest.mark.django_db(transaction=True)
def test_staff_may_decide_for_any_run_and_are_recorded_as_the_decider(
    api, staff_api, owner, staff, inline_runtime
):
    waiting = start(api, owner, "echo hi", labels={"review": "required"})
    call_id = waiting["awaiting"]["tool_call"]

    response = staff_api.post(
        respond_url(waiting["id"]), {"tool_call": call_id, "decision": "approve"}, format="json"
    )

    assert response.status_code == 200
    assert ToolCall.objects.get(pk=call_id).decided_by_id == staff.pk


@pytest.mark.django_db
def test_another_user_cannot_decide_for_a_run(other_api, session, inline_runtime):
    run, call = waiting_run(session)

    response = other_api.post(
        respond_url(run.pk), {"tool_call": str(call.pk), "decision": "approve"}, format="json"
    )

    assert response.status_code == 404
    run.refresh_from_db()
    call.refresh_from_db()
    assert run.status == "awaiting_input"
    assert (call.decision, call.decided_by_id) == ("", None)


@pytest.mark.django_db
def test_a_decision_about_another_tool_call_is_a_conflict(api, session, inline_runtime):
    run, call = waiting_run(session)
    other_call = ToolCallFactory(turn=call.turn, status="succeeded")

    response = api.post(
        respond_url(run.pk), {"tool_call": str(other_call.pk), "decision": "approve"}, format="json"
    )

    assert response.status_code == 409
    assert response.json()["type"] == "client_error"
    run.refresh_from_db()
    call.refresh_from_db()
    assert run.status == "awaiting_input"
    assert call.decision == ""


@pytest.mark.django_db
def test_an_answer_to_a_run_waiting_for_approval_is_a_conflict(api, session, inline_runtime):
    run, _ = waiting_run(session, kind="approval")

    response = api.post(respond_url(run.pk), {"answer": "yes please"}, format="json")

    assert response.status_code == 409
    run.refresh_from_db()
    assert run.status == "awaiting_input"


@pytest.mark.django_db
def test_a_decision_for_a_run_waiting_for_an_answer_is_a_conflict(api, session, inline_runtime):
    run, call = waiting_run(session, kind="question")

    response = api.post(
        respond_url(run.pk), {"tool_call": str(call.pk), "decision": "approve"}, format="json"
    )

    assert response.status_code == 409
    run.refresh_from_db()
    assert run.status == "awaiting_input"


# Respond: questions


@pytest.mark.django_db(transaction=True)
def test_an_answered_question_lets_the_run_complete(api, owner, inline_runtime):
    waiting = start(api, owner, "ask me for my name")
    assert waiting["status"] == "awaiting_input"
    assert waiting["awaiting"]["kind"] == "question"
    assert waiting["awaiting"]["question"] == "What is your name?"

    response = api.post(respond_url(waiting["id"]), {"answer": "Ada"}, format="json")

    assert response.status_code == 200
    run = api.get(f"/api/v1/runs/{waiting['id']}/").json()
    assert run["status"] == "completed"
    assert run["output"] == "Thanks! Your name is Ada."
    call = api.get(f"/api/v1/tool-calls/{waiting['awaiting']['tool_call']}/").json()
    assert call["result"] == {"answer": "Ada"}
    assert call["decided_by"] == owner.pk


@pytest.mark.django_db
def test_an_answer_is_recorded_on_the_question(api, owner, session, inline_runtime):
    run, call = waiting_run(session, kind="question")

    response = api.post(respond_url(run.pk), {"answer": "Ada"}, format="json")

    assert response.status_code == 200
    assert response.json()["awaiting"] is None
    call.refresh_from_db()
    assert (call.status, call.result, call.decided_by_id) == (
        "succeeded",
        {"answer": "Ada"},
        owner.pk,
    )


# Respond: what is refused


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": "why not"},
        {"decision": "approve", "answer": "Ada"},
        {"decision": "deny", "answer": "Ada", "reason": "no"},
    ],
    ids=["empty", "reason-only", "both", "both-with-reason"],
)
def test_a_response_needs_either_a_decision_or_an_answer(api, session, inline_runtime, body):
    run, call = waiting_run(session)
    if "decision" in body:
        body = {**body, "tool_call": str(call.pk)}

    response = api.post(respond_url(run.pk), body, format="json")

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    run.refresh_from_db()
    assert run.status == "awaiting_input"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [{"decision": "maybe"}, {"answer": "x" * 32_001}, {"decision": "approve", "tool_call": "nope"}],
    ids=["unknown-decision", "answer-too-long", "malformed-tool-call"],
)
def test_a_malformed_response_is_refused(api, session, inline_runtime, body):
    run, _ = waiting_run(session)

    response = api.post(respond_url(run.pk), body, format="json")

    assert response.status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize("status", ["pending", "running", "completed", "canceled"])
def test_answering_a_run_that_is_not_waiting_is_a_conflict(api, session, inline_runtime, status):
    run = RunFactory(session=session, status=status)

    response = api.post(respond_url(run.pk), {"answer": "Ada"}, format="json")

    assert response.status_code == 409
    assert response.json()["type"] == "client_error"
    run.refresh_from_db()
    assert run.status == status


@pytest.mark.django_db(transaction=True)
def test_a_second_decision_on_the_same_call_is_a_conflict(api, owner, inline_runtime):
    waiting = start(api, owner, "echo hi", labels={"review": "required"})
    decision = {"tool_call": waiting["awaiting"]["tool_call"], "decision": "approve"}
    assert api.post(respond_url(waiting["id"]), decision, format="json").status_code == 200

    again = api.post(respond_url(waiting["id"]), {**decision, "decision": "deny"}, format="json")

    assert again.status_code == 409
    call = ToolCall.objects.get(pk=decision["tool_call"])
    assert call.decision == "approved"
