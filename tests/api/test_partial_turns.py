"""A run stopped mid-answer, on the database: its turn keeps the words said, how
it ended and the usage of saying them (estimated, since the provider reported
none), the run's totals count it, and the turn API and the export say so."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest

from goaai.runtime import loop
from goaai.runtime.context import estimated_usage
from goaai.runtime.models import scripted
from goaai.runtime.types import Message, RunContext
from runs_app.models import Run, Turn
from sessions_app.models import RunEvent
from tests.factories import RunFactory, TurnFactory

STOP_AFTER = 8  # pieces


@pytest.fixture
def stopped(inline_runtime, owner, monkeypatch) -> tuple[Run, Turn, list[str]]:
    """A story stopped after :data:`STOP_AFTER` pieces, checkpointed at each one."""
    monkeypatch.setattr(scripted, "STORY_PACE", 0.0)
    monkeypatch.setattr(loop, "CANCEL_CHECK_SECONDS", 0.0)
    monkeypatch.setattr(loop, "CHECKPOINT_SECONDS", 0.0)
    store = inline_runtime.store
    published = store.publish_delta
    said: list[str] = []
    checkpoints: list[str] = []

    def publish(context: RunContext, turn_id: UUID, text: str, offset: int) -> None:
        # A subscriber joining now reads the text up to this piece, already.
        checkpoints.append(Turn.objects.get(pk=turn_id).response_text)
        said.append(text)
        published(context, turn_id, text, offset)
        if len(said) == STOP_AFTER:
            store.request_cancel(context.run_id, "user_requested")

    monkeypatch.setattr(store, "publish_delta", publish)
    session = inline_runtime.create_session(owner=owner)
    handle = inline_runtime.start("assistant", "tell me a story", session=session.id)
    run = Run.objects.get(pk=handle.run_id)
    assert checkpoints == ["".join(said[: n + 1]) for n in range(len(said))]
    return run, run.turns.get(), said


@pytest.mark.django_db(transaction=True)
def test_a_stopped_run_keeps_its_words_and_the_estimated_usage_of_saying_them(stopped):
    run, turn, said = stopped
    text = "".join(said)

    assert (run.status, run.output) == ("canceled", text)
    assert turn.ended_at is not None
    assert (turn.response_text, turn.interruption, turn.usage_estimated) == (
        text,
        "canceled",
        True,
    )
    expected = estimated_usage([Message.from_dict(m) for m in turn.request_messages], text)
    assert turn.output_tokens == expected.output_tokens > 0
    assert turn.input_tokens >= expected.input_tokens > 0  # and the tools it was offered
    # The run's totals count the partial turn.
    assert (run.input_tokens, run.output_tokens) == (turn.input_tokens, turn.output_tokens)
    assert run.total_tokens == turn.input_tokens + turn.output_tokens
    usage = RunEvent.objects.get(run_id=run.pk, type="usage").data
    assert usage["estimated"] is True
    assert usage["output_tokens"] == turn.output_tokens
    completed = RunEvent.objects.get(run_id=run.pk, type="turn.completed").data
    assert (completed["interruption"], completed["usage_estimated"]) == ("canceled", True)


@pytest.mark.django_db(transaction=True)
def test_the_turn_api_and_the_export_say_how_the_turn_ended(stopped, api):
    run, turn, said = stopped

    shown = api.get(f"/api/v1/turns/{turn.pk}/").json()
    detail = api.get(f"/api/v1/runs/{run.pk}/").json()
    export = api.get(f"/api/v1/sessions/{run.session_id}/export/")
    assert export.status_code == 200
    exported = json.loads(b"".join(export.streaming_content))

    for document in (shown, detail["turns"][0], exported["turns"][0]):
        assert document["interruption"] == "canceled"
        assert document["usage_estimated"] is True
        assert document["response"]["text"] == "".join(said)
        assert document["usage"]["output_tokens"] == turn.output_tokens
    assert detail["usage"]["total_tokens"] == turn.input_tokens + turn.output_tokens


@pytest.mark.django_db
def test_a_finished_turn_is_shown_as_finished(api, owner):
    turn = TurnFactory(run=RunFactory(session__owner=owner, status="completed"), index=0)

    shown: dict[str, Any] = api.get(f"/api/v1/turns/{turn.pk}/").json()

    assert (shown["interruption"], shown["usage_estimated"]) == ("", False)
