"""One active run per session: a message posted while a run of the session is active
(POST /api/v1/sessions/{id}/runs/) is queued behind it, refused, or interrupts it,
as the request's ``multitask`` or the agent's ``conversation.multitask`` says."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from typing import Any
from uuid import UUID

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from goaai.runtime import rt
from goaai.runtime.agents import ASSISTANT, CONCIERGE, AgentRegistry
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.vocabulary import Multitask
from runs_app.models import Run
from runs_app.tasks import CeleryExecutor
from sessions_app.models import RunEvent, Session
from sessions_app.services import api_token_create
from tests.factories import RunFactory
from tests.sqlite_file import run_on_a_sqlite_file

# An agent that takes one message at a time and refuses the others.
STRICT = dataclasses.replace(
    ASSISTANT, id="strict", conversation=ConversationSettings(multitask=Multitask.REJECT)
)


@pytest.fixture(autouse=True)
def _fresh_throttles():
    # Run creation is throttled per user in the cache, which outlives a test.
    cache.clear()


@pytest.fixture
def runtime(inline_runtime):
    """The inline runtime, knowing the strict agent besides the shipped ones."""
    rt.configure(agents=AgentRegistry([ASSISTANT, CONCIERGE, STRICT]))
    return rt


@pytest.fixture
def session(owner, runtime) -> Session:
    return Session.objects.get(pk=rt.create_session(owner=owner, agent="assistant").id)


class Held:
    """An executor that keeps what it is handed until the test runs it, standing in
    for a worker that is busy (or a hand-off still on its way)."""

    def __init__(self) -> None:
        self.submitted: list[Any] = []

    def submit(self, run_id: Any) -> None:
        self.submitted.append(run_id)

    def wait(self, run_id: Any, timeout: float) -> bool:
        return False


def post(api: APIClient, session: Session, text: str, **body: Any) -> Any:
    return api.post(f"/api/v1/sessions/{session.pk}/runs/", {"input": text, **body}, format="json")


def run_of(api: APIClient, run_id: str) -> dict[str, Any]:
    response = api.get(f"/api/v1/runs/{run_id}/")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def waiting(api: APIClient, session: Session) -> str:
    """A run of the session that waits for the user's answer (an active run)."""
    response = post(api, session, "ask me for my name")
    assert response.status_code == 201
    run_id: str = response.json()["id"]
    assert run_of(api, run_id)["status"] == "awaiting_input"
    return run_id


def answer(api: APIClient, run_id: str, text: str = "Ada") -> None:
    response = api.post(f"/api/v1/runs/{run_id}/respond/", {"answer": text}, format="json")
    assert response.status_code == 200, response.json()


def events(session: Session, type: str) -> list[RunEvent]:
    return list(RunEvent.objects.filter(session=session, type=type).order_by("seq"))


def request_text(run: dict[str, Any]) -> str:
    """Everything the run's first turn sent its model, as one text."""
    return "\n".join(str(m.get("content", "")) for m in run["turns"][0]["request_messages"])


# enqueue (the default)


@pytest.mark.django_db(transaction=True)
def test_a_message_sent_while_a_run_is_active_waits_then_sees_its_answer(api, session):
    active = waiting(api, session)

    response = post(api, session, "echo hi")

    assert response.status_code == 201
    queued = response.json()
    assert (queued["status"], queued["multitask"], queued["queued_behind"]) == (
        "pending",
        "enqueue",
        active,
    )
    (event,) = events(session, "run.queued")
    assert (str(event.run_id), event.data) == (
        queued["id"],
        {"behind": active, "ahead": 1, "multitask": "enqueue"},
    )
    listed = api.get(f"/api/v1/sessions/{session.pk}/runs/").json()["results"]
    assert [(r["id"], r["queued_behind"]) for r in listed] == [
        (queued["id"], active),
        (active, None),
    ]
    assert run_of(api, queued["id"])["queued_behind"] == active

    answer(api, active)

    first, second = run_of(api, active), run_of(api, queued["id"])
    assert first["status"] == second["status"] == "completed"
    assert (second["output"], second["queued_behind"], second["multitask"]) == (
        "hi",
        None,
        "enqueue",
    )
    assert second["started_at"] >= first["ended_at"]
    # It started after the first had answered, and its model was shown that exchange.
    seen = request_text(second)
    assert "ask me for my name" in seen
    assert first["output"] in seen


@pytest.mark.django_db(transaction=True)
def test_several_queued_messages_run_in_the_order_they_were_sent(api, session):
    active = waiting(api, session)
    queued = [post(api, session, f"echo {word}").json() for word in ("one", "two", "three")]

    assert [q["queued_behind"] for q in queued] == [active, queued[0]["id"], queued[1]["id"]]
    assert [e.data["ahead"] for e in events(session, "run.queued")] == [1, 2, 3]

    answer(api, active)

    runs = [run_of(api, q["id"]) for q in queued]
    assert [r["output"] for r in runs] == ["one", "two", "three"]
    assert runs[0]["ended_at"] <= runs[1]["started_at"]
    assert runs[1]["ended_at"] <= runs[2]["started_at"]
    assert "echo two" in request_text(runs[2])


@pytest.mark.django_db(transaction=True)
def test_a_queued_message_canceled_before_its_turn_never_starts(api, session):
    active = waiting(api, session)
    first = post(api, session, "echo one").json()
    second = post(api, session, "echo two").json()

    canceled = api.post(f"/api/v1/runs/{first['id']}/cancel/", {}, format="json")

    assert canceled.status_code == 200
    assert (canceled.json()["status"], canceled.json()["started_at"]) == ("canceled", None)
    # The one behind it now waits for the active run itself.
    assert run_of(api, second["id"])["queued_behind"] == active
    answer(api, active)
    assert run_of(api, second["id"])["output"] == "two"
    assert run_of(api, first["id"])["turns"] == []


@pytest.mark.django_db(transaction=True)
def test_stopping_the_active_run_starts_the_queued_one(api, session):
    active = waiting(api, session)
    queued = post(api, session, "echo next").json()

    stopped = api.post(f"/api/v1/runs/{active}/cancel/", {}, format="json")

    assert stopped.json()["status"] == "canceled"
    assert run_of(api, queued["id"])["output"] == "next"


@pytest.mark.django_db(transaction=True)
def test_ending_the_session_cancels_the_queued_messages(api, session):
    active = waiting(api, session)
    queued = post(api, session, "echo later").json()

    assert api.post(f"/api/v1/sessions/{session.pk}/end/").status_code == 200

    assert run_of(api, active)["status"] == "canceled"
    later = run_of(api, queued["id"])
    assert (later["status"], later["started_at"], later["queued_behind"]) == (
        "canceled",
        None,
        None,
    )


@pytest.mark.django_db(transaction=True)
def test_a_queued_run_is_not_started_by_a_stray_hand_off_nor_by_the_reaper(api, session):
    held = Held()
    rt.configure(executor=held)
    active = post(api, session, "echo first").json()
    queued = post(api, session, "echo second").json()
    # Only the first was handed over. Both were sent minutes ago (long past the
    # reaper's grace for a lost hand-off), the second just after the first.
    assert [str(run_id) for run_id in held.submitted] == [active["id"]]
    for run_id, minutes in ((active["id"], 5), (queued["id"], 4)):
        Run.objects.filter(pk=run_id).update(
            created_at=timezone.now() - dt.timedelta(minutes=minutes)
        )

    # Handed over by mistake (a duplicate message, say), it does not start.
    assert rt.execute(queued["id"]) is None
    assert [str(run_id) for run_id in rt.store.expired_runs()] == [active["id"]]
    assert run_of(api, queued["id"])["status"] == "pending"

    # The first one runs; as it ends the second is handed over, and starts.
    assert rt.execute(active["id"]).status == "completed"
    assert [str(run_id) for run_id in held.submitted] == [active["id"], queued["id"]]
    assert rt.execute(queued["id"]).output == "second"


@pytest.mark.django_db
def test_a_queued_run_shows_as_queued_in_the_list_without_more_queries(api, session):
    # Nothing executes outside a committed transaction: each run stays pending.
    url = f"/api/v1/sessions/{session.pk}/runs/"
    api.get(url)  # the token's first use is recorded once; keep it out of the count
    RunFactory(session=session, status="running")
    with CaptureQueriesContext(connection) as one:
        api.get(url)

    for n in range(3):
        post(api, session, f"echo {n}")
    with CaptureQueriesContext(connection) as many:
        listed = api.get(url).json()["results"]

    assert len(many.captured_queries) == len(one.captured_queries)
    assert [r["queued_behind"] is not None for r in listed] == [True, True, True, False]
    assert len(api.get("/api/v1/runs/").json()["results"]) == 4


# reject


@pytest.mark.django_db(transaction=True)
def test_reject_refuses_a_message_while_a_run_is_active_naming_that_run(api, session):
    active = waiting(api, session)

    response = post(api, session, "echo hi", multitask="reject")

    assert response.status_code == 409
    body = response.json()
    assert body["type"] == "client_error"
    assert [(e["code"], e["attr"]) for e in body["errors"]] == [("run_active", None)]
    assert active in body["errors"][0]["detail"]
    assert body["active_run"] == active
    assert Run.objects.filter(session=session).count() == 1
    # Once the active run has ended, the same message goes through.
    answer(api, active)
    again = post(api, session, "echo hi", multitask="reject")
    assert again.status_code == 201
    assert again.json()["multitask"] == ""
    assert run_of(api, again.json()["id"])["output"] == "hi"


@pytest.mark.django_db(transaction=True)
def test_an_agent_that_takes_one_message_at_a_time_refuses_by_default(api, owner, runtime):
    session = Session.objects.get(pk=rt.create_session(owner=owner, agent="strict").id)
    active = waiting(api, session)

    refused = post(api, session, "echo hi")
    queued = post(api, session, "echo hi", multitask="enqueue")

    assert (refused.status_code, refused.json()["active_run"]) == (409, active)
    assert queued.status_code == 201
    assert queued.json()["queued_behind"] == active


@pytest.mark.django_db(transaction=True)
def test_a_replay_of_a_key_is_not_refused_as_a_second_message(api, session):
    active = waiting(api, session)
    first = api.post(
        f"/api/v1/sessions/{session.pk}/runs/",
        {"input": "echo hi"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="msg-1",
    )
    replay = api.post(
        f"/api/v1/sessions/{session.pk}/runs/",
        {"input": "echo hi"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="msg-1",
    )
    other = api.post(
        f"/api/v1/sessions/{session.pk}/runs/",
        {"input": "echo hi", "multitask": "reject"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="msg-1",
    )

    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json()["id"] == first.json()["id"]
    assert replay.json()["queued_behind"] == active
    # Another body with the key is the key's conflict, not the active run's.
    assert other.status_code == 409
    assert other.json()["errors"][0]["code"] == "idempotency_key_reused"


# interrupt


@pytest.mark.django_db(transaction=True)
def test_interrupt_stops_a_waiting_run_and_answers_at_once(api, session):
    active = waiting(api, session)

    response = post(api, session, "echo instead", multitask="interrupt")

    assert response.status_code == 201
    new = run_of(api, response.json()["id"])
    stopped = run_of(api, active)
    assert (new["status"], new["output"], new["multitask"]) == (
        "completed",
        "instead",
        "interrupt",
    )
    assert stopped["status"] == "canceled"
    assert Run.objects.get(pk=active).cancel_reason == (
        f"interrupted by a new message (run {new['id']})"
    )
    assert stopped["ended_at"] <= new["started_at"]
    assert events(session, "run.queued") == []


@pytest.mark.django_db(transaction=True)
def test_interrupt_waits_for_a_working_run_to_stop_before_it_starts(api, session):
    held = Held()
    rt.configure(executor=held)
    working = post(api, session, "tell me a story").json()
    # A worker holds it, busy writing the story.
    assert rt.store.claim_run(working["id"], owner="busy-worker", lease_seconds=60) is not None

    response = post(api, session, "echo now", multitask="interrupt")

    new = response.json()
    assert (new["status"], new["multitask"], new["queued_behind"]) == (
        "pending",
        "interrupt",
        working["id"],
    )
    flagged = run_of(api, working["id"])
    assert (flagged["status"], flagged["cancel_requested_at"] is not None) == ("running", True)
    (event,) = events(session, "run.queued")
    assert event.data == {"behind": working["id"], "ahead": 1, "multitask": "interrupt"}
    assert rt.execute(new["id"]) is None  # not before the story has stopped

    # The worker is gone; the story is picked up, sees the cancel and stops, and the
    # new message is handed over as it ends.
    Run.objects.filter(pk=working["id"]).update(lease_expires_at=timezone.now())
    assert rt.execute(working["id"]).status == "canceled"
    assert [str(run_id) for run_id in held.submitted][-1] == new["id"]
    assert rt.execute(new["id"]).output == "now"


# The override, validated


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value", ["later", "", "ENQUEUE", None, 1, ["enqueue"], {"enqueue": True}, "x" * 10_000]
)
def test_an_unknown_multitask_is_refused(api, session, value):
    response = post(api, session, "echo hi", multitask=value)

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert [e["attr"] for e in response.json()["errors"]] == ["multitask"]
    assert not Run.objects.filter(session=session).exists()


@pytest.mark.django_db
def test_a_multitask_with_a_nul_character_is_refused(api, session):
    response = api.generic(
        "POST",
        f"/api/v1/sessions/{session.pk}/runs/",
        '{"input": "echo hi", "multitask": "enqueue\\u0000"}',
        content_type="application/json",
    )

    assert response.status_code == 400
    assert not Run.objects.filter(session=session).exists()


# Two messages at the same moment


def _race(session: Session, bodies: list[dict[str, Any]], token: str) -> list[Any]:
    """POST the bodies at once from threads (each its own connection)."""
    barrier = threading.Barrier(len(bodies))
    responses: list[Any] = [None] * len(bodies)

    def send(index: int) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            barrier.wait(timeout=10)
            responses[index] = post(client, session, **bodies[index])
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return responses


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_two_messages_at_the_same_moment_are_taken_one_after_the_other(owner, session, attempt):
    rt.configure(executor=Held())
    _, token = api_token_create(user_id=owner.pk, name="race")

    refused = _race(session, [{"text": "echo a", "multitask": "reject"}] * 2, token)
    queued = _race(session, [{"text": "echo b"}, {"text": "echo c"}], token)

    # Of two refusing messages one is taken, the other told which run is active.
    assert sorted(r.status_code for r in refused) == [201, 409]
    (taken,) = [r.json() for r in refused if r.status_code == 201]
    (conflict,) = [r.json() for r in refused if r.status_code == 409]
    assert conflict["active_run"] == taken["id"]
    # Two queuing messages both wait, one behind the other, behind the first.
    assert [r.status_code for r in queued] == [201, 201]
    bodies = [r.json() for r in queued]
    (next_one,) = [body for body in bodies if body["queued_behind"] == taken["id"]]
    (last,) = [body for body in bodies if body is not next_one]
    assert last["queued_behind"] == next_one["id"]
    assert len(events(session, "run.queued")) == 2
    seqs = list(RunEvent.objects.filter(session=session).values_list("seq", flat=True))
    assert sorted(seqs) == list(range(1, len(seqs) + 1))


RACE_ON_A_FILE = r"""
import json, threading
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient
from goaai.runtime import rt
from sessions_app.services import api_token_create

call_command("migrate", verbosity=0)
user = get_user_model().objects.create_user("alice")
_, token = api_token_create(user_id=user.pk, name="race")
session = rt.create_session(owner=user, agent="assistant")


class Held:
    # No worker takes the runs: the first one taken stays active.
    def submit(self, run_id):
        pass

    def wait(self, run_id, timeout):
        return False


rt.configure(executor=Held())
results, barrier = {}, threading.Barrier(4)

def send(index, body):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    try:
        barrier.wait(timeout=10)
        response = client.post(f"/api/v1/sessions/{session.id}/runs/", body, format="json")
        results[index] = [response.status_code, response.json()]
    finally:
        connection.close()

bodies = [{"input": f"echo {n}", "multitask": "reject"} for n in range(4)]
threads = [threading.Thread(target=send, args=(i, b)) for i, b in enumerate(bodies)]
for t in threads: t.start()
for t in threads: t.join(60)
print("REPORT " + json.dumps([results.get(i) for i in range(4)]))
"""


def test_messages_at_the_same_moment_on_a_sqlite_file_are_taken_one_at_a_time(tmp_path):
    # The embedded default's database, a SQLite file, with requests on threads: the
    # suite's own database is in memory, so this runs in a child process on a fresh
    # file.
    report, stderr = run_on_a_sqlite_file(
        RACE_ON_A_FILE,
        tmp_path,
        GOAAI_EXECUTOR="thread",
        GOAAI_EXECUTOR_THREADS="1",
        ALLOWED_HOSTS="testserver",
    )
    results = [tuple(result) for result in report]

    assert "locked" not in stderr
    assert sorted(status for status, _ in results) == [201, 409, 409, 409]
    (taken,) = [body for status, body in results if status == 201]
    assert {body["active_run"] for status, body in results if status == 409} == {taken["id"]}


@pytest.mark.django_db(transaction=True)
def test_the_run_timeline_says_what_a_queued_run_waited_for(api, session, staff, client):
    active = waiting(api, session)
    queued = post(api, session, "echo hi").json()
    client.force_login(staff)

    page = client.get(f"/admin/runs_app/run/{queued['id']}/timeline/")

    assert page.status_code == 200
    assert f"waits for run {active[:8]} to end (queued; 1 ahead)" in page.content.decode()


class FakeCelery:
    """A Celery app whose queue is a list: the tasks it was sent, by run id."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send_task(self, name: str, args: list[str]) -> None:
        self.sent.append(args[0])


@pytest.mark.django_db(transaction=True)
def test_on_the_distributed_queue_a_queued_run_is_sent_again_when_its_turn_comes(api, session):
    queue = FakeCelery()
    rt.configure(executor=CeleryExecutor(queue))
    first = post(api, session, "echo first").json()
    second = post(api, session, "echo second").json()
    assert queue.sent == [first["id"]]
    # A stray copy reaches a worker before its turn: refused, and not taken for the
    # copy that must come when its turn does.
    rt.executor.submit(UUID(second["id"]))
    assert rt.execute(UUID(second["id"])) is None

    assert rt.execute(UUID(first["id"])).status == "completed"

    assert queue.sent == [first["id"], second["id"], second["id"]]
    assert rt.execute(UUID(second["id"])).output == "second"
