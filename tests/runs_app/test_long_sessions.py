"""A long session on the database: 200 runs with long tool results never send the
model more than the agent's budget, the history summary is recorded and reused, and
a late run still knows what was said in run 3. Reading a run's history costs the same
number of queries however long the session is."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from goaai.runtime import context as budget
from goaai.runtime import rt
from goaai.runtime.agents import ASSISTANT
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.types import Message
from goaai.runtime.vocabulary import EventType, RunStatus
from runs_app import selectors
from runs_app.models import HistorySummary, Run, Turn
from sessions_app.models import RunEvent

pytestmark = pytest.mark.django_db(transaction=True)

CONTEXT_TOKENS = 16_000
FILLER = "a long result line " * 80  # about 1,500 characters through echo


@pytest.fixture
def brief(inline_runtime):
    """The assistant with a small context budget, so that summaries come early."""
    agent = replace(
        ASSISTANT,
        id="brief",
        conversation=ConversationSettings(context_tokens=CONTEXT_TOKENS, tool_result_chars=1_000),
    )
    inline_runtime.agents.register(agent)
    return agent


def test_two_hundred_runs_stay_within_budget_and_remember_run_three(owner, brief):
    session = rt.create_session(owner=owner, agent="brief")
    for number in range(2):
        rt.run("brief", f"echo warming up {number}", session=session.id)
    rt.run("brief", "remember my favourite colour is green", session=session.id)
    for number in range(197):
        rt.run("brief", f"echo {number} {FILLER}", session=session.id)

    late = rt.run("brief", "what is my favourite colour?", session=session.id)

    assert (late.status, late.output) == (RunStatus.COMPLETED, "Your favourite colour is green.")
    limit = budget.input_budget(brief.conversation, brief.model_settings, None)
    for messages in Turn.objects.filter(run__session_id=session.id).values_list(
        "request_messages", flat=True
    ):
        assert budget.messages_tokens(Message.from_dict(m) for m in messages) <= limit
    summaries = list(HistorySummary.objects.filter(session_id=session.id).order_by("created_at"))
    # Written now and then and reused in between, each folding in the one before.
    assert 5 <= len(summaries) <= 201 // 3
    assert all(b.previous_id == a.id for a, b in itertools.pairwise(summaries))
    assert "User said: remember my favourite colour is green" in summaries[-1].text
    # Each is in the log of the run that wrote it, which pays for it.
    events = RunEvent.objects.filter(session_id=session.id, type=EventType.HISTORY_SUMMARIZED)
    assert events.count() == len(summaries)
    writer = Run.objects.get(pk=summaries[-1].run_id)
    assert writer.input_tokens >= summaries[-1].input_tokens


def test_reading_a_runs_history_costs_the_same_however_long_the_session(owner, brief):
    short = rt.create_session(owner=owner, agent="brief")
    long = rt.create_session(owner=owner, agent="brief")
    for number in range(3):
        rt.run("brief", f"echo {number}", session=short.id)
    for number in range(40):
        rt.run("brief", f"echo {number} {FILLER}", session=long.id)

    counts = []
    for session in (short, long):
        newest = Run.objects.filter(session_id=session.id).order_by("-created_at").first()
        with CaptureQueriesContext(connection) as captured:
            history = selectors.branch_history(previous_run_id=newest.pk)
        counts.append(len(captured.captured_queries))
        assert history.runs

    assert counts[0] <= counts[1] <= counts[0] + 1  # the long one also reads its summary
