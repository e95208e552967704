"""Deliveries are queued with the change they announce: one per subscribed endpoint,
for each of the five event types, and nothing for anyone else."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from goaai.runtime import rt
from goaai.runtime.public_errors import ERROR_SENTENCES
from goaai.runtime.vocabulary import MemoryScope, RunStatus
from memory_app.services import memory_delete
from runs_app import services as run_services
from runs_app.sessions import session_end
from sessions_app.models import WebhookDelivery, WebhookEndpoint
from sessions_app.services import session_update
from sessions_app.webhooks import services
from sessions_app.webhooks.outbox import webhook_enqueue
from tests.factories import RunFactory, SessionFactory

pytestmark = pytest.mark.django_db(transaction=True)

ALL = ["run.completed", "run.failed", "run.awaiting_input", "session.ended", "memory.changed"]


@pytest.fixture
def hook(owner, settings):
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    return services.webhook_endpoint_create(
        owner_id=owner.pk, url="http://127.0.0.1:9/hook", events=ALL
    )


def _messages(endpoint) -> list[dict]:
    return [
        d.payload for d in WebhookDelivery.objects.filter(endpoint=endpoint).order_by("created_at")
    ]


def _types(endpoint) -> list[str]:
    return [message["type"] for message in _messages(endpoint)]


def test_a_completed_run_and_an_ended_session(owner, hook, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    run = rt.run("assistant", "echo hi", session=session.id)
    rt.end_session(session.id, by=owner.pk)

    completed, ended = _messages(hook)
    assert completed["type"] == "run.completed"
    assert completed["data"]["run"] == str(run.id)
    assert completed["data"]["status"] == RunStatus.COMPLETED
    assert completed["data"]["agent"] == "assistant"
    assert completed["data"]["usage"]["total_tokens"] >= 0
    assert isinstance(completed["data"]["seq"], int)
    assert completed["timestamp"].startswith(str(run.ended_at.date()))
    assert ended["type"] == "session.ended"
    assert ended["data"]["session"] == str(session.id)
    assert ended["data"]["ended_by"] == owner.pk


def test_a_run_awaiting_input(owner, hook, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    rt.run("assistant", "ask me for my name", session=session.id)
    (message,) = _messages(hook)
    assert message["type"] == "run.awaiting_input"
    assert message["data"]["status"] == "awaiting_input"
    assert message["data"]["kind"] == "question"


@pytest.mark.parametrize(
    ("end", "status"),
    [
        (
            lambda run: run_services.run_fail(run_id=run.pk, kind="internal", message="Boom."),
            "failed",
        ),
        (lambda run: run_services.run_time_out(run_id=run.pk, message="Late."), "timed_out"),
    ],
)
def test_failed_and_timed_out_runs_are_run_failed(owner, hook, end, status):
    run = RunFactory(session=SessionFactory(owner=owner), status=RunStatus.RUNNING)
    end(run)
    (message,) = _messages(hook)
    assert message["type"] == "run.failed"
    assert message["data"]["status"] == status
    # The owner's endpoint gets what the owner reads: an internal error in plain
    # words, goaai's own reason (the time budget) as it is.
    assert message["data"]["error"]["message"] in (ERROR_SENTENCES["internal"], "Late.")


def test_memory_changes_by_a_person_and_by_a_run(owner, hook, inline_runtime):
    entry = rt.store_memory("name", "Alice", scope=MemoryScope.USER, user=owner)
    memory_delete(key="name", scope=MemoryScope.USER, user_id=owner.pk, written_by_user_id=owner.pk)
    session = rt.create_session(owner=owner, agent="assistant")
    rt.run("assistant", "remember my favourite colour is green", session=session.id)

    stored, deleted, *by_run = [m for m in _messages(hook) if m["type"] == "memory.changed"]
    assert stored["data"]["entry"] == str(entry.id)
    assert (stored["data"]["action"], stored["data"]["value"]) == ("created", "Alice")
    assert (deleted["data"]["action"], deleted["data"]["value"]) == ("deleted", None)
    assert deleted["data"]["version"] == 2
    assert by_run[0]["data"]["scope"] == "session"
    assert by_run[0]["data"]["session"] == str(session.id)
    assert by_run[0]["data"]["written_by"]["kind"] == "run"


def test_only_the_subscribed_types_of_the_owner_are_queued(owner, other_user, hook, settings):
    only_memory = services.webhook_endpoint_create(
        owner_id=owner.pk, url="http://127.0.0.1:9/memory", events=["memory.changed"]
    )
    bobs = services.webhook_endpoint_create(
        owner_id=other_user.pk, url="http://127.0.0.1:9/bob", events=ALL
    )
    off = services.webhook_endpoint_create(
        owner_id=owner.pk, url="http://127.0.0.1:9/off", events=ALL
    )
    services.webhook_endpoint_update(endpoint_id=off.pk, active=False)
    run = RunFactory(session=SessionFactory(owner=owner), status=RunStatus.RUNNING)
    run_services.run_complete(run_id=run.pk, output="done")

    assert _types(hook) == ["run.completed"]
    assert _types(only_memory) == []
    assert _types(bobs) == []
    assert _types(off) == []


def test_a_change_that_rolls_back_queues_nothing(owner, hook):
    def failing_change() -> None:
        with transaction.atomic():
            webhook_enqueue(owner_id=owner.pk, type="memory.changed", data={}, at=hook.created_at)
            assert WebhookDelivery.objects.count() == 1
            raise RuntimeError("the change failed")

    with pytest.raises(RuntimeError):
        failing_change()
    assert WebhookDelivery.objects.count() == 0


def test_events_that_are_no_message_cost_no_query(owner, hook):
    session = SessionFactory(owner=owner)
    with CaptureQueriesContext(connection) as renaming:
        session_update(session_id=session.pk, title="renamed")
    with CaptureQueriesContext(connection) as ending:
        session_end(session_id=session.pk)
    table = WebhookEndpoint._meta.db_table
    assert not [q for q in renaming.captured_queries if table in q["sql"]]
    # A message: one lookup of the owner's endpoints, however many events.
    assert len([q for q in ending.captured_queries if table in q["sql"]]) == 1
