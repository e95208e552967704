"""Sending: signed per Standard Webhooks, retried on the schedule, logged, claimed once."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest
from django.conf import settings
from django.db import OperationalError, connection
from django.db.models import QuerySet
from django.utils import timezone
from standardwebhooks import Webhook, WebhookVerificationError

from goaai.runtime import rt
from goaai.runtime.vocabulary import WebhookDeliveryStatus
from sessions_app.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from sessions_app.webhooks import delivery, services
from sessions_app.webhooks.addresses import AllowList
from sessions_app.webhooks.delivery import SCHEDULE, claim_due, deliver_due
from sessions_app.webhooks.sending import EXCERPT_BYTES, Outcome, send

pytestmark = pytest.mark.django_db(transaction=True)


def _endpoint(owner, url: str, events=("run.completed",)) -> WebhookEndpoint:
    return services.webhook_endpoint_create(owner_id=owner.pk, url=url, events=list(events))


def _verify(endpoint: WebhookEndpoint, received) -> dict:
    return Webhook(endpoint.secret).verify(received.body, received.headers)


def test_a_receiver_that_fails_twice_gets_the_event_on_the_third_attempt(
    owner, receiver, inline_runtime
):
    receiver.script = [500, 503, 200]
    endpoint = _endpoint(owner, receiver.url)
    session = rt.create_session(owner=owner, agent="assistant")
    run = rt.run("assistant", "echo hello", session=session.id)
    (queued,) = WebhookDelivery.objects.filter(endpoint=endpoint)
    start = timezone.now()

    assert deliver_due(now=start) == 1
    queued.refresh_from_db()
    assert queued.status == WebhookDeliveryStatus.FAILED
    assert queued.next_attempt_at == start + dt.timedelta(seconds=SCHEDULE[1])
    # Not due yet: nothing is sent before the backoff has passed.
    assert deliver_due(now=start + dt.timedelta(seconds=4)) == 0

    assert deliver_due(now=start + dt.timedelta(seconds=6)) == 1
    queued.refresh_from_db()
    assert queued.next_attempt_at == start + dt.timedelta(seconds=6 + SCHEDULE[2])
    assert deliver_due(now=start + dt.timedelta(seconds=6 + SCHEDULE[2])) == 1

    queued.refresh_from_db()
    assert queued.status == WebhookDeliveryStatus.SUCCEEDED
    assert queued.attempts == 3
    assert queued.next_attempt_at is None
    assert [a.response_status for a in queued.attempt_log.order_by("number")] == [500, 503, 200]
    assert [a.succeeded for a in queued.attempt_log.order_by("number")] == [False, False, True]
    assert all(a.latency_ms >= 0 and a.response_excerpt for a in queued.attempt_log.all())
    # Three requests, one message: the same webhook-id each time, each one verifies.
    assert len(receiver.requests) == 3
    assert {r.headers["webhook-id"] for r in receiver.requests} == {queued.message_id}
    message = _verify(endpoint, receiver.requests[-1])
    assert message["type"] == "run.completed"
    assert message["data"]["run"] == str(run.id)
    assert message["data"]["session"] == str(session.id)
    assert message["data"]["output"] == run.output
    assert receiver.requests[-1].headers["content-type"] == "application/json"


def test_the_signature_fails_with_another_secret_or_a_changed_body(owner, receiver):
    endpoint = _endpoint(owner, receiver.url)
    services.webhook_ping(endpoint_id=endpoint.pk)
    deliver_due()
    (received,) = receiver.requests
    assert _verify(endpoint, received)["type"] == "webhook.ping"
    rotated = services.webhook_secret_rotate(endpoint_id=endpoint.pk)
    with pytest.raises(WebhookVerificationError):
        Webhook(rotated.secret).verify(received.body, received.headers)
    tampered = json.loads(received.body)
    tampered["data"]["url"] = "https://elsewhere.example/"
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoint.secret).verify(json.dumps(tampered), received.headers)


def test_retries_follow_the_schedule_then_give_up(owner, receiver):
    receiver.script = [500]
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    now = timezone.now()
    waits = []
    for _ in SCHEDULE:
        assert deliver_due(now=now) == 1
        queued.refresh_from_db()
        if queued.next_attempt_at is None:
            break
        waits.append((queued.next_attempt_at - now).total_seconds())
        now = queued.next_attempt_at
    assert waits == [5, 300, 1800, 7200, 18000, 36000, 36000]
    assert sum(waits) / 3600 == pytest.approx(27.6, abs=0.1)  # about a day
    assert queued.status == WebhookDeliveryStatus.GAVE_UP
    assert queued.attempts == len(SCHEDULE) == len(receiver.requests)

    # A manual redelivery is one more attempt, marked as such, with the same id.
    receiver.script = [204]
    services.webhook_delivery_redeliver(delivery_id=queued.pk)
    assert deliver_due() == 1
    queued.refresh_from_db()
    assert queued.status == WebhookDeliveryStatus.SUCCEEDED
    last = queued.attempt_log.order_by("number").last()
    assert last is not None
    assert last.manual
    assert last.number == len(SCHEDULE) + 1
    assert receiver.requests[-1].headers["webhook-id"] == queued.message_id


def test_a_timeout_and_a_redirect_are_failures(owner, receiver, settings):
    settings.GOAAI_WEBHOOK_TIMEOUT_SECONDS = 1
    receiver.delay = 1.5
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    deliver_due()
    attempt = WebhookAttempt.objects.get(delivery=queued)
    assert attempt.response_status is None
    assert "No answer within 1 s" in attempt.error

    receiver.delay = 0
    receiver.script = [302]
    services.webhook_delivery_redeliver(delivery_id=queued.pk)
    deliver_due()
    queued.refresh_from_db()
    # A redirect is not followed: one more request, and it counts as a failure.
    assert queued.status == WebhookDeliveryStatus.FAILED
    assert queued.last_response_status == 302


def test_410_gone_turns_the_endpoint_off(owner, receiver):
    receiver.script = [410]
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    deliver_due()
    endpoint.refresh_from_db()
    queued.refresh_from_db()
    assert not endpoint.active
    assert "410" in endpoint.disabled_reason
    assert queued.status == WebhookDeliveryStatus.GAVE_UP


def test_a_disabled_endpoint_is_not_sent_to(owner, receiver):
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    services.webhook_endpoint_update(endpoint_id=endpoint.pk, active=False)
    deliver_due()
    queued.refresh_from_db()
    assert receiver.requests == []
    assert queued.status == WebhookDeliveryStatus.GAVE_UP
    assert queued.attempt_log.get().error == "The endpoint is disabled."


def test_an_address_refused_at_send_time_is_a_logged_failure(owner, receiver, settings):
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    # The operator narrowed the allow-list after the endpoint was subscribed.
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = []
    deliver_due()
    queued.refresh_from_db()
    assert receiver.requests == []
    assert queued.status == WebhookDeliveryStatus.FAILED
    assert "not a public address" in queued.attempt_log.get().error


def test_a_delivery_is_claimed_by_one_sender_only(owner, receiver):
    endpoint = _endpoint(owner, receiver.url)
    for _ in range(3):
        services.webhook_ping(endpoint_id=endpoint.pk)
    now = timezone.now()
    first = claim_due(now=now, limit=2)
    second = claim_due(now=now, limit=10)
    assert len(first) == 2
    assert len(second) == 1
    assert not set(first) & set(second)
    assert claim_due(now=now, limit=10) == []
    # A sender that died holding a claim: the delivery falls due again after it.
    later = now + dt.timedelta(seconds=delivery.CLAIM_GRACE_SECONDS + 11)
    assert len(claim_due(now=later, limit=10)) == 3


def test_a_delivery_whose_endpoint_was_deleted_meanwhile_is_dropped(owner, receiver):
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    (claimed,) = claim_due(now=timezone.now(), limit=1)
    services.webhook_endpoint_delete(endpoint_id=endpoint.pk)
    assert delivery.attempt(claim=claimed) is None
    assert not WebhookDelivery.objects.filter(pk=queued.pk).exists()


def _send_in_thread(receiver, timeout: float) -> tuple[threading.Thread, list[Outcome]]:
    outcomes: list[Outcome] = []

    def attempt() -> None:
        outcomes.append(
            send(
                url=receiver.url,
                secret="whsec_" + "A" * 32,
                message_id="msg_drip",
                payload={"type": "webhook.ping"},
                allow=AllowList.parse(["127.0.0.0/8"]),
                timeout=timeout,
            )
        )

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    return thread, outcomes


@pytest.mark.parametrize("drip_headers", [False, True], ids=["body", "headers"])
def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_timeout(receiver, drip_headers):
    # Each byte comes well within the timeout, but the attempt as a whole may take
    # no longer than it: a receiver cannot hold a sender for hours.
    receiver.drip_every = 0.05
    receiver.drip_headers = drip_headers
    started = time.monotonic()
    thread, outcomes = _send_in_thread(receiver, timeout=1.0)
    thread.join(timeout=3.0)
    assert not thread.is_alive(), "the attempt outlived its timeout"
    assert time.monotonic() - started < 2.0
    (outcome,) = outcomes
    if drip_headers:
        assert outcome.status is None
        assert "No answer within 1 s" in outcome.error
    else:
        # The answer came (a 200 is a success); only its excerpt was cut short.
        assert outcome.status == 200
        assert outcome.succeeded
        assert outcome.excerpt.startswith("answer")
        assert len(outcome.excerpt) < EXCERPT_BYTES
        assert "within 1 s" in outcome.error


def test_an_attempt_whose_claim_was_taken_over_is_not_recorded(owner, receiver):
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    now = timezone.now()
    (stale,) = claim_due(now=now, limit=1)
    # The first sender seemed dead: its claim expired and another one took over.
    later = now + dt.timedelta(
        seconds=delivery.CLAIM_GRACE_SECONDS + settings.GOAAI_WEBHOOK_TIMEOUT_SECONDS + 1
    )
    (fresh,) = claim_due(now=later, limit=1)
    assert fresh.delivery_id == stale.delivery_id == queued.pk
    assert delivery.attempt(claim=fresh, now=later) is not None
    # The first sender comes back with the outcome of its attempt: it no longer
    # holds the delivery, so it records nothing and schedules nothing.
    assert (
        delivery.attempt_record(
            delivery_id=queued.pk,
            started_at=now,
            outcome=Outcome(500, 9000),
            now=later,
            held_until=stale.held_until,
        )
        is None
    )
    # Nor does it send again with the claim it lost.
    assert delivery.attempt(claim=stale, now=later) is None
    assert len(receiver.requests) == 1
    queued.refresh_from_db()
    assert queued.attempts == 1
    assert queued.attempt_log.count() == 1
    assert queued.status == WebhookDeliveryStatus.SUCCEEDED


def test_one_endpoint_gets_at_most_its_share_of_a_claim(owner, receiver):
    slow = _endpoint(owner, receiver.url)
    fast = _endpoint(owner, receiver.url + "/other")
    for _ in range(4):
        services.webhook_ping(endpoint_id=slow.pk)
    services.webhook_ping(endpoint_id=fast.pk)
    now = timezone.now()
    claimed = claim_due(now=now, limit=4, per_endpoint=1)
    assert sorted(c.endpoint_id for c in claimed) == sorted([slow.pk, fast.pk])
    # The slow endpoint's attempt is still under way in this process: none more.
    assert claim_due(now=now, limit=4, per_endpoint=1, busy={slow.pk: 1}) == []
    assert len(claim_due(now=now, limit=4, per_endpoint=2, busy={slow.pk: 1})) == 1


def test_a_record_the_database_refuses_for_a_moment_is_made_again_not_the_request(
    owner, receiver, monkeypatch
):
    # The receiver has the message when its record fails: the record is retried
    # rather than the claim left to expire and the message sent a second time.
    endpoint = _endpoint(owner, receiver.url)
    queued = services.webhook_ping(endpoint_id=endpoint.pk)
    record = delivery.attempt_record
    refusals = [OperationalError("database is locked")]

    def refused_once(**kwargs):
        if refusals:
            raise refusals.pop()
        return record(**kwargs)

    monkeypatch.setattr(delivery, "attempt_record", refused_once)
    (claimed,) = claim_due(now=timezone.now(), limit=1)
    logged = delivery.attempt(claim=claimed)

    assert logged is not None
    assert logged.succeeded
    assert refusals == []
    queued.refresh_from_db()
    assert queued.status == WebhookDeliveryStatus.SUCCEEDED
    assert queued.attempts == 1
    assert len(receiver.requests) == 1


def test_a_look_the_database_refuses_halfway_claims_nothing(owner, receiver, monkeypatch):
    endpoint = _endpoint(owner, receiver.url)
    for _ in range(3):
        services.webhook_ping(endpoint_id=endpoint.pk)
    update = QuerySet.update
    calls = []
    # PostgreSQL claims in one update; SQLite row by row: the second is refused.
    refused = 1 if connection.features.has_select_for_update_skip_locked else 2

    def refused_second(self, **kwargs):
        calls.append(kwargs)
        if len(calls) == refused:
            raise OperationalError("database is locked")
        return update(self, **kwargs)

    now = timezone.now()
    monkeypatch.setattr(QuerySet, "update", refused_second)
    with pytest.raises(OperationalError):
        claim_due(now=now, limit=3)
    monkeypatch.undo()
    # Nothing was held by the failed look: all three are claimed by the next.
    assert len(claim_due(now=now, limit=3)) == 3
