"""What the chat page starts from besides the event log: the suggestions of its
agent for an empty chat, and the viewer's feedback on its answers."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from goaai.runtime.agents import ASSISTANT, CONCIERGE
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.vocabulary import ScoreKind, ScoreSource
from runs_app.agents import agent_save
from runs_app.models import Score
from runs_app.scores import Thumb, feedback_give
from tests.factories import RunFactory, SessionFactory
from tests.web.test_chat_page import _chat_data

pytestmark = pytest.mark.django_db

CHIP = re.compile(r'<button type="button" class="chip" data-suggestion="([^"]*)"')


def chips(response) -> list[str]:
    return CHIP.findall(response.content.decode())


def test_each_built_in_agent_suggests_its_own(alice_client, owner):
    assistant = SessionFactory(owner=owner, agent="assistant")
    concierge = SessionFactory(owner=owner, agent="concierge")

    assert chips(alice_client.get(f"/sessions/{assistant.pk}/")) == list(
        ASSISTANT.conversation.suggestions
    )
    assert chips(alice_client.get(f"/sessions/{concierge.pk}/")) == list(
        CONCIERGE.conversation.suggestions
    )
    assert ASSISTANT.conversation.suggestions != CONCIERGE.conversation.suggestions


def test_an_agent_kept_as_data_suggests_what_its_definition_says(
    alice_client, owner, inline_runtime
):
    agent_save(
        "tutor",
        {"conversation": {"suggestions": ["quiz me on <capitals>", "explain fractions"]}},
        by=None,
    )
    session = SessionFactory(owner=owner, agent="tutor")

    response = alice_client.get(f"/sessions/{session.pk}/")

    # Escaped like any text: a suggestion is never markup.
    assert chips(response) == ["quiz me on &lt;capitals&gt;", "explain fractions"]


def test_an_agent_without_suggestions_offers_none(alice_client, owner, inline_runtime):
    inline_runtime.agents.register(
        replace(ASSISTANT, id="quiet", conversation=ConversationSettings())
    )
    session = SessionFactory(owner=owner, agent="quiet")

    page = alice_client.get(f"/sessions/{session.pk}/").content.decode()

    assert CHIP.findall(page) == []
    assert "Try one of these" not in page


def test_the_page_carries_the_viewers_feedback_by_run(alice_client, owner, staff_client):
    session = SessionFactory(owner=owner)
    liked = RunFactory(session=session, status="completed")
    disliked = RunFactory(session=session, status="completed")
    RunFactory(session=session, status="completed")
    feedback_give(run_id=liked.pk, user_id=owner.pk, thumb=Thumb.UP)
    feedback_give(run_id=disliked.pk, user_id=owner.pk, thumb=Thumb.DOWN, comment="too long")
    other_session_run = RunFactory(session=SessionFactory(owner=owner), status="completed")
    feedback_give(run_id=other_session_run.pk, user_id=owner.pk, thumb=Thumb.UP)

    data = _chat_data(alice_client.get(f"/sessions/{session.pk}/"))

    assert data["feedback"] == {
        str(liked.pk): {"value": "up", "comment": ""},
        str(disliked.pk): {"value": "down", "comment": "too long"},
    }
    # A member of staff reading the chat sees their own feedback (none), not Alice's.
    assert _chat_data(staff_client.get(f"/sessions/{session.pk}/"))["feedback"] == {}
    assert Score.objects.filter(kind=ScoreKind.BOOLEAN, source=ScoreSource.FEEDBACK).count() == 3
