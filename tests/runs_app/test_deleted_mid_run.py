"""A session or a run deleted while the run executes: the loop ends quietly.

Deleting a session takes its runs with it; the worker still executing one of them
finds its rows gone at its next step. That is no crash: it logs one line saying the
run is gone, with no traceback, and stops.
"""

from __future__ import annotations

import logging

import pytest

from goaai.runtime import rt
from goaai.runtime.agents import ASSISTANT, CONCIERGE, AgentRegistry
from goaai.runtime.tools import TOOLSETS
from runs_app.models import Run
from sessions_app.models import Session
from sessions_app.services import session_delete
from tests.runtime_core import engine_agents
from tests.runtime_core.engine_agents import ENGINE_AGENTS, PROBE

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def engine(inline_runtime, monkeypatch):
    for name, toolset in engine_agents.engine_toolsets().items():
        monkeypatch.setitem(TOOLSETS, name, toolset)
    PROBE.reset()
    rt.configure(agents=AgentRegistry([ASSISTANT, CONCIERGE, *ENGINE_AGENTS]))
    yield rt
    PROBE.release.set()


def _problems(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_deleting_the_session_while_a_tool_runs_ends_the_run_quietly(engine, owner, caplog):
    session = rt.create_session(owner=owner, agent="blocker")

    def delete_then_release() -> None:
        session_delete(session_id=session.id)
        PROBE.release.set()

    PROBE.on_start = delete_then_release
    caplog.set_level(logging.INFO)

    handle = rt.start("blocker", "go", session=session.id)

    assert PROBE.executed == ["blocking"]
    assert not Session.objects.filter(pk=session.id).exists()
    assert not Run.objects.filter(pk=handle.run_id).exists()
    assert _problems(caplog) == [], [r.getMessage() for r in _problems(caplog)]
    gone = [r for r in caplog.records if str(handle.run_id) in r.getMessage()]
    assert gone, "the loop says that the run is gone"
    assert all(r.levelno in (logging.INFO, logging.WARNING) for r in gone)


def test_deleting_the_run_while_a_tool_runs_ends_it_quietly(engine, owner, caplog):
    session = rt.create_session(owner=owner, agent="blocker")
    started: list = []

    def delete_then_release() -> None:
        Run.objects.filter(session_id=session.id).delete()
        started.append(True)
        PROBE.release.set()

    PROBE.on_start = delete_then_release
    caplog.set_level(logging.INFO)

    handle = rt.start("blocker", "go", session=session.id)

    assert started
    assert Session.objects.filter(pk=session.id).exists()
    assert not Run.objects.filter(pk=handle.run_id).exists()
    assert _problems(caplog) == [], [r.getMessage() for r in _problems(caplog)]
