"""Redoing runs and forking sessions: POST /api/v1/runs/{id}/retry/, regenerate/,
edit/ and fork/.

A redo is a new run, linked to the run it redoes, continuing from the point before
it; the conversation the next run sees is the new branch. The old runs stay."""

from __future__ import annotations

import uuid

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from goaai.runtime import rt
from runs_app.models import Run, SessionFork
from sessions_app.models import RunEvent
from tests.permissions import staff_user

# Runs execute once their transaction commits, as they do in production.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()


def codes(response) -> list[str]:
    return [error["code"] for error in response.json()["errors"]]


def say(api, session_id, text: str) -> dict:
    created = api.post(f"/api/v1/sessions/{session_id}/runs/", {"input": text}, format="json")
    assert created.status_code == 201, created.content
    return api.get(f"/api/v1/runs/{created.json()['id']}/").json()


def seen_by(run_id) -> list[str]:
    """The user messages the run's first model request carried: its history."""
    run = Run.objects.get(pk=run_id)
    first = run.turns.order_by("index").first()
    assert first is not None
    return [m["content"] for m in first.request_messages if m["role"] == "user"]


@pytest.fixture
def chat(owner, inline_runtime):
    return rt.create_session(owner=owner, agent="assistant")


def test_retry_of_a_stopped_run_repeats_its_message_once_and_links_it(api, chat):
    say(api, chat.id, "echo one")
    stopped = rt.start("assistant", "echo two", session=chat.id)
    Run.objects.filter(pk=stopped.run_id).update(status="canceled")  # stopped before it ran

    response = api.post(f"/api/v1/runs/{stopped.run_id}/retry/")

    assert response.status_code == 201, response.content
    retry = response.json()
    assert response["Location"].endswith(f"/api/v1/runs/{retry['id']}/")
    assert (retry["retry_of"], retry["input"]) == (str(stopped.run_id), "echo two")
    assert api.get(f"/api/v1/runs/{retry['id']}/").json()["status"] == "completed"
    assert seen_by(retry["id"]) == ["echo one", "echo two"]
    after = say(api, chat.id, "echo three")
    assert after["previous_run"] == retry["id"]
    assert seen_by(after["id"]) == ["echo one", "echo two", "echo three"]
    # The redone run stays recorded; the log says what the new one redoes.
    assert Run.objects.filter(pk=stopped.run_id).exists()
    created = RunEvent.objects.get(run_id=retry["id"], type="run.created")
    assert created.data["retry_of"] == str(stopped.run_id)


def test_regenerate_answers_the_same_message_again(api, chat):
    first = say(api, chat.id, "echo hello")

    response = api.post(f"/api/v1/runs/{first['id']}/regenerate/")

    assert response.status_code == 201
    again = api.get(f"/api/v1/runs/{response.json()['id']}/").json()
    assert (again["regenerates"], again["output"], again["status"]) == (
        first["id"],
        first["output"],
        "completed",
    )
    assert again["previous_run"] is None
    assert seen_by(again["id"]) == ["echo hello"]


def test_an_edited_message_continues_from_before_it_and_later_runs_leave_the_branch(api, chat):
    one = say(api, chat.id, "remember my favourite colour is red")
    two = say(api, chat.id, "echo two")
    say(api, chat.id, "echo three")

    response = api.post(
        f"/api/v1/runs/{two['id']}/edit/", {"input": "echo two, edited"}, format="json"
    )

    assert response.status_code == 201
    edited = response.json()
    assert (edited["edit_of"], edited["previous_run"]) == (two["id"], one["id"])
    assert seen_by(edited["id"]) == ["remember my favourite colour is red", "echo two, edited"]
    after = say(api, chat.id, "echo four")
    assert seen_by(after["id"]) == [
        "remember my favourite colour is red",
        "echo two, edited",
        "echo four",
    ]
    assert Run.objects.filter(session_id=chat.id).count() == 5


def test_fork_starts_a_session_whose_history_is_the_branch_up_to_the_run(api, owner, chat):
    one = say(api, chat.id, "echo one")
    say(api, chat.id, "echo two")

    response = api.post(f"/api/v1/runs/{one['id']}/fork/", {"title": "Another way"}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    forked_id = body["session"]["id"]
    assert body["forked_from"] == {"session": str(chat.id), "run": one["id"]}
    assert (body["session"]["title"], body["session"]["agent"]) == ("Another way", "assistant")
    assert body["session"]["owner"]["id"] == owner.pk
    in_fork = say(api, forked_id, "echo fork")
    assert in_fork["previous_run"] == one["id"]
    assert seen_by(in_fork["id"]) == ["echo one", "echo fork"]
    # The original goes on as it was.
    assert seen_by(say(api, chat.id, "echo three")["id"]) == ["echo one", "echo two", "echo three"]
    link = SessionFork.objects.get(session_id=forked_id)
    assert (link.source_session_id, link.source_run_id, link.created_by_id) == (
        chat.id,
        uuid.UUID(one["id"]),
        owner.pk,
    )


@pytest.mark.parametrize(
    ("how", "body"),
    [("retry", {}), ("regenerate", {}), ("edit", {"input": "x"}), ("fork", {})],
)
def test_someone_elses_run_is_not_found(other_api, api, chat, how, body):
    run = say(api, chat.id, "echo mine")

    response = other_api.post(f"/api/v1/runs/{run['id']}/{how}/", body, format="json")

    assert response.status_code == 404
    assert Run.objects.filter(session_id=chat.id).count() == 1


@pytest.mark.parametrize("how", ["retry", "regenerate", "edit", "fork"])
def test_an_auditor_who_may_read_a_chat_may_not_speak_in_it(api, chat, how):
    run = say(api, chat.id, "echo mine")
    auditor = APIClient()
    auditor.force_login(staff_user("erin", groups=("Auditors",)))

    response = auditor.post(f"/api/v1/runs/{run['id']}/{how}/", {"input": "x"}, format="json")

    assert response.status_code == 403
    assert codes(response) == ["permission_denied"]
    assert Run.objects.count() == 1


def test_staff_may_not_fork_another_users_conversation(staff_api, api, chat):
    run = say(api, chat.id, "echo mine")

    response = staff_api.post(f"/api/v1/runs/{run['id']}/fork/")

    assert response.status_code == 403
    assert codes(response) == ["permission_denied"]
    assert not SessionFork.objects.exists()


def test_a_redo_that_does_not_fit_the_run_is_a_conflict(api, chat):
    done = say(api, chat.id, "echo done")
    waiting = say(api, chat.id, "ask me for my name")
    assert waiting["status"] == "awaiting_input"

    retry_done = api.post(f"/api/v1/runs/{done['id']}/retry/")
    edit_waiting = api.post(f"/api/v1/runs/{waiting['id']}/edit/", {"input": "hi"}, format="json")
    fork_waiting = api.post(f"/api/v1/runs/{waiting['id']}/fork/")

    for response in (retry_done, edit_waiting, fork_waiting):
        assert response.status_code == 409, response.content
        assert codes(response) == ["not_redoable"]
    assert Run.objects.filter(session_id=chat.id).count() == 2


@pytest.mark.parametrize(
    "body",
    [{}, {"input": ""}, {"input": "   "}, {"input": 7}, {"input": ["a"]}, {"input": "x" * 40_000}],
)
def test_an_edit_without_usable_text_is_refused(api, chat, body):
    run = say(api, chat.id, "echo one")

    response = api.post(f"/api/v1/runs/{run['id']}/edit/", body, format="json")

    assert response.status_code == 400
    assert Run.objects.filter(session_id=chat.id).count() == 1


def test_a_redo_in_an_ended_session_is_refused(api, chat):
    run = say(api, chat.id, "echo one")
    rt.end_session(chat.id)

    response = api.post(f"/api/v1/runs/{run['id']}/regenerate/")

    assert response.status_code == 409
    assert codes(response) == ["session_ended"]


def test_an_unknown_run_is_not_found(api):
    assert api.post(f"/api/v1/runs/{uuid.uuid4()}/retry/").status_code == 404
    assert api.post("/api/v1/runs/not-a-uuid/retry/").status_code == 404
