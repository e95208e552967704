"""What the API's busiest requests cost the database, pinned: statements and
transactions per request, counted on every connection of the process, for the five
operations ``bench/api_throughput.py`` measures against bare DRF views. A request
that reads runs each statement on its own (autocommit, no transaction around
them); starting a run records it in one transaction."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote
from uuid import UUID

import pytest
from django.db import connection
from django.utils import timezone

from goaai.runtime import rt
from goaai.runtime.types import RunInfo
from runs_app import selectors
from runs_app.models import Run
from sessions_app.models import RunEvent
from tests.factories import RunFactory
from tests.statement_tally import tallying

pytestmark = pytest.mark.django_db(transaction=True)

# (statements, transactions) per request, the same on both databases (but one): the token,
# then what each answer reads (a session with its runs' sums; a page of sessions and
# their sums; a run, its turns, tool calls, child runs and the caller's feedback;
# the session and the entry, resolved and read whole in one statement); a start
# reads the token and the session and records the run in one transaction of five
# statements: the session locked and its event numbers taken, its open runs, its
# head and the agent's version in one read, the run and its event (the run's fork
# point, read too here, only for a session with no run yet). PostgreSQL inserts the
# run with its event in one statement; SQLite has no data-modifying WITH. It
# answers with the run as it recorded it, not read back.
COSTS = {
    "session detail": (3, 3),
    "sessions list": (3, 3),
    "run detail": (6, 6),
    "memory resolve": (3, 3),
    "run start": (6, 3),
}


def pinned() -> dict[str, tuple[int, int]]:
    """COSTS on the database the tests run on."""
    if connection.vendor == "sqlite":
        return {**COSTS, "run start": (7, 3)}
    return COSTS


class Submitted:
    """An executor that keeps the runs it is given: the request's own costs, not
    those of executing its run."""

    def __init__(self) -> None:
        self.runs: list[UUID] = []

    def submit(self, run_id: UUID) -> None:
        self.runs.append(run_id)

    def wait(self, run_id: UUID, timeout: float) -> RunInfo | bool:
        return False


@pytest.fixture
def made(owner):
    rt.reset()
    rt.configure(executor="inline")
    session = rt.create_session(owner=owner, agent="assistant", title="Colours").id
    for text in ("remember my favourite colour is green", "calculate 2 * (3 + 4)"):
        run = rt.run("assistant", text, session=session)
        assert run.status == "completed", run
    # Each start in a session of its own: none waits behind another.
    starts = [rt.create_session(owner=owner, title=f"starts {i}").id for i in range(2)]
    executor = Submitted()
    rt.configure(executor=executor)
    yield session, run.id, starts, executor
    rt.reset()


def test_each_request_costs_what_is_pinned(api, made):
    session, run, starts, executor = made
    resolve = f"/api/v1/memory/resolve/?key={quote('favourite colour')}&session={session}"
    requests = {
        "session detail": ("get", [f"/api/v1/sessions/{session}/"] * 2, 200),
        "sessions list": ("get", ["/api/v1/sessions/"] * 2, 200),
        "run detail": ("get", [f"/api/v1/runs/{run}/"] * 2, 200),
        "memory resolve": ("get", [resolve] * 2, 200),
        "run start": ("post", [f"/api/v1/sessions/{s}/runs/" for s in starts], 201),
    }
    costs = {}
    for name, (method, (first, second), expected) in requests.items():
        body = {"input": "echo hi"} if method == "post" else None
        getattr(api, method)(first, body, format="json")  # the first of a kind warms up
        with tallying() as tally:
            response = getattr(api, method)(second, body, format="json")
        assert response.status_code == expected, response.content
        costs[name] = (tally.statements, tally.transactions)
    assert len(executor.runs) == 2
    assert costs == pinned(), connection.vendor


def test_a_stopped_runs_detail_costs_the_same_and_shows_all_it_has(api, owner, made):
    """Who stopped the run, the caller's feedback and the run's child runs come in
    the statements pinned above, not in one more each."""
    _, _, starts, _ = made
    response = api.post(f"/api/v1/sessions/{starts[0]}/runs/", {"input": "hi"}, format="json")
    run = response.json()["id"]
    assert api.post(f"/api/v1/runs/{run}/cancel/", {}, format="json").status_code == 200
    child = RunFactory(session_id=starts[0], parent_run_id=run, status="completed")
    given = {"value": "down", "comment": "stopped too early"}
    assert api.post(f"/api/v1/runs/{run}/feedback/", given, format="json").status_code == 201
    api.get(f"/api/v1/runs/{run}/")
    with tallying() as tally:
        body = api.get(f"/api/v1/runs/{run}/").json()
    assert (tally.statements, tally.transactions) == pinned()["run detail"]
    assert body["status"] == "canceled"
    assert body["stopped_by"] == {"kind": "user", "user": owner.username, "rule": None}
    assert body["feedback"] == given
    assert body["child_runs"] == [str(child.id)]
    assert body["turns"] == []


def test_a_start_queued_behind_an_open_run_costs_no_more(api, made):
    """A message sent while the session's run is open waits behind it: what it
    waits for is known from the start's own read of the open runs, not read again."""
    _, _, starts, _ = made
    url = f"/api/v1/sessions/{starts[0]}/runs/"
    first = api.post(url, {"input": "echo one"}, format="json").json()["id"]
    with tallying() as tally:
        response = api.post(url, {"input": "echo two"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["queued_behind"] == first
    # As a start with nothing open, less the read of the session's fork (it has a
    # run); its second event (it is queued) moves the session's counter once more
    # in the statement that inserts the run and its events. SQLite, with no
    # data-modifying WITH, runs that as a statement of its own, and inserts the two
    # events as two.
    expected = 8 if connection.vendor == "sqlite" else 5
    assert (tally.statements, tally.transactions) == (expected, 3)


def test_a_start_behind_a_long_queue_reads_no_more_than_behind_one_run(api, made):
    """What a start reads under the session's lock is how many runs wait and the
    newest of them, one row: a session with twenty runs waiting costs a message what
    one with a single open run does. (Rows are counted where the driver tells them,
    PostgreSQL; SQLite's counts are equal here by construction.)"""
    _, _, starts, _ = made

    def last_of(session: UUID, waiting: int) -> tuple[int, int, dict[str, object]]:
        url = f"/api/v1/sessions/{session}/runs/"
        sent = [api.post(url, {"input": "echo"}, format="json").json() for _ in range(waiting)]
        with tallying() as tally:
            response = api.post(url, {"input": "echo last"}, format="json")
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["queued_behind"] == sent[-1]["id"]
        return tally.statements, tally.rows, body

    short, long = last_of(starts[0], 1), last_of(starts[1], 20)
    assert short[:2] == long[:2], connection.vendor
    queued = RunEvent.objects.filter(session_id=starts[1], type="run.queued").latest("seq")
    assert (queued.run_id, queued.data["ahead"]) == (UUID(long[2]["id"]), 20)


class Queued(Submitted):
    """An executor with a distributed queue (as Celery's): a new run is recorded
    as put there with its creation, then sent."""

    def send(self, run_id: UUID, queued_at: dt.datetime) -> None:
        self.runs.append(run_id)


def test_a_start_put_on_the_queue_costs_no_more(api, made):
    """Recorded as queued by the statement that inserts it, at the time that gives
    its updated_at: not by an UPDATE after it."""
    _, _, starts, _ = made
    executor = Queued()
    rt.configure(executor=executor)
    first, second = (f"/api/v1/sessions/{session}/runs/" for session in starts)
    api.post(first, {"input": "hi"}, format="json")  # the first of a kind warms up
    with tallying() as tally:
        response = api.post(second, {"input": "hi"}, format="json")
    assert response.status_code == 201, response.content
    assert (tally.statements, tally.transactions) == pinned()["run start"]
    run = Run.objects.get(pk=response.json()["id"])
    assert executor.runs[-1] == run.id
    assert run.queued_at is not None
    assert run.queued_at == run.updated_at == run.created_at
    on_queue = ~selectors.not_on_queue(now=timezone.now(), lease_seconds=60)
    assert Run.objects.filter(on_queue, pk=run.id).exists()


def test_a_starts_answer_is_the_run_as_a_read_of_it_gives(api, made):
    """A start answers with the run as it recorded it: the same body a read of the
    run gives, alone in its session and queued behind another."""
    _, _, starts, _ = made
    url = f"/api/v1/sessions/{starts[0]}/runs/"
    body = {"input": "echo one", "labels": {"tier": "free"}, "metadata": {"ticket": "T-1"}}
    for sent in (body, {"input": "echo two"}):
        answer = api.post(url, sent, format="json")
        assert answer.status_code == 201, answer.content
        created = answer.json()
        read = api.get(f"/api/v1/runs/{created['id']}/").json()
        assert created == {name: read[name] for name in created}
    assert created["queued_behind"] is not None
