"""The MCP tools' reads cost the same number of queries however many rows they
show (the tools are called directly here; tests/runs_app/test_mcp_server.py calls
them through /mcp)."""

from __future__ import annotations

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from goaai.runtime import rt
from goaai.runtime.errors import SessionEnded
from runs_app.mcp import tools
from runs_app.mcp.tools import Caller
from sessions_app.eventlog import recording
from sessions_app.models import Session
from sessions_app.services import api_token_create
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def caller(owner) -> Caller:
    token, _ = api_token_create(user_id=owner.pk, name="tests")
    return Caller(user=owner, token=token)


@pytest.mark.parametrize("sessions", [0, 1, 3])
def test_listing_sessions_takes_one_query(caller, owner, django_assert_num_queries, sessions):
    for _ in range(sessions):
        SessionFactory(owner=owner)
    with django_assert_num_queries(1):
        page = tools.sessions_list(caller, limit=2, cursor=None, status=None)
    assert len(page["sessions"]) == min(sessions, 2)
    assert (page["next_cursor"] is not None) == (sessions > 2)


@pytest.mark.parametrize("events", [0, 1, 3])
def test_reading_events_takes_two_queries(caller, owner, django_assert_num_queries, events):
    session = SessionFactory(owner=owner)
    for n in range(events):
        with recording(session.pk) as batch:
            batch.add("session.updated", {"n": n})
    with django_assert_num_queries(2):
        read = tools.session_events(caller, session=session.pk, after=0, limit=100)
    assert [event["data"] for event in read["events"]] == [{"n": n} for n in range(events)]


@pytest.mark.django_db(transaction=True)
def test_a_run_that_fails_to_start_in_a_new_session_leaves_no_session(
    caller, owner, monkeypatch, inline_runtime
):
    def refuse(*args: object, **kwargs: object) -> None:
        raise SessionEnded("The session ended meanwhile.")

    monkeypatch.setattr(rt, "start", refuse)
    with pytest.raises(ToolError, match="ended meanwhile"):
        tools.run_start(
            caller,
            input="echo hi",
            session=None,
            agent="assistant",
            labels=None,
            metadata=None,
            multitask=None,
            idempotency_key=None,
        )
    # The session was made for this run only: it goes with it.
    assert not Session.objects.filter(owner=owner).exists()
