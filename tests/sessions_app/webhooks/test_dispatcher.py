"""The background sender: deliveries go out as soon as their run commits, from
another thread, and a slow receiver never holds a run up."""

from __future__ import annotations

import threading
import time

import pytest
from standardwebhooks import Webhook

from goaai.runtime import rt
from goaai.runtime.vocabulary import RunStatus, WebhookDeliveryStatus
from sessions_app.models import WebhookDelivery
from sessions_app.webhooks import delivery, dispatcher, services

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running_dispatcher(settings, monkeypatch):
    # A long poll: what arrives quickly was woken by the commit, not found by a look.
    settings.GOAAI_WEBHOOK_POLL_SECONDS = 60
    # The test writes once the dispatcher's first look is over: on the tests'
    # in-memory SQLite a write that meets the look's claim is refused at once
    # ("database table is locked"), not queued as on a database file.
    looked = threading.Event()
    claim_due = delivery.claim_due

    def claim_and_tell(**kwargs):
        try:
            return claim_due(**kwargs)
        finally:
            looked.set()

    monkeypatch.setattr(delivery, "claim_due", claim_and_tell)
    dispatcher.start()
    assert looked.wait(10)
    yield
    dispatcher.stop()


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_slow_receiver_gets_the_message_without_holding_up_the_run(
    owner, receiver, inline_runtime, running_dispatcher
):
    receiver.delay = 2.0
    endpoint = services.webhook_endpoint_create(
        owner_id=owner.pk, url=receiver.url, events=["run.completed"]
    )
    session = rt.create_session(owner=owner, agent="assistant")

    started = time.monotonic()
    run = rt.run("assistant", "echo hello", session=session.id)
    assert run.status == RunStatus.COMPLETED
    assert time.monotonic() - started < receiver.delay

    _wait_for(
        lambda: WebhookDelivery.objects.filter(
            endpoint=endpoint, status=WebhookDeliveryStatus.SUCCEEDED
        ).exists()
    )
    (received,) = receiver.requests
    assert Webhook(endpoint.secret).verify(received.body, received.headers)["data"]["run"] == str(
        run.id
    )


def test_no_dispatcher_starts_when_polling_is_off(settings):
    settings.GOAAI_WEBHOOK_POLL_SECONDS = 0
    dispatcher.start()
    assert dispatcher._dispatcher is None


def test_a_slow_endpoint_does_not_hold_up_the_others(owner, receiver, settings):
    # Four senders, one slow receiver with four deliveries due: it gets one sender
    # at a time, and another endpoint's delivery goes out meanwhile.
    settings.GOAAI_WEBHOOK_POLL_SECONDS = 60
    settings.GOAAI_WEBHOOK_SENDERS = 4
    settings.GOAAI_WEBHOOK_SENDERS_PER_ENDPOINT = 1
    receiver.delay = 2.0
    slow = services.webhook_endpoint_create(
        owner_id=owner.pk, url=receiver.url, events=["run.completed"]
    )
    for _ in range(4):
        services.webhook_ping(endpoint_id=slow.pk)
    dispatcher.start()
    try:
        _wait_for(lambda: receiver.in_flight == 1)
        receiver.delay = 0.0
        fast = services.webhook_endpoint_create(
            owner_id=owner.pk, url=receiver.url + "/fast", events=["run.completed"]
        )
        services.webhook_ping(endpoint_id=fast.pk)
        dispatcher.wake()
        _wait_for(
            lambda: WebhookDelivery.objects.filter(
                endpoint=fast, status=WebhookDeliveryStatus.SUCCEEDED
            ).exists(),
            timeout=1.5,
        )
        _wait_for(
            lambda: (
                WebhookDelivery.objects.filter(
                    endpoint=slow, status=WebhookDeliveryStatus.SUCCEEDED
                ).count()
                == 4
            )
        )
    finally:
        dispatcher.stop()
    # The fast one arrived alone; the slow endpoint never had two senders.
    assert receiver.most_in_flight == 2
    assert [r.path for r in receiver.requests].count("/hooks/goaai/fast") == 1
