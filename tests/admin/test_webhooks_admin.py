"""Webhooks in the admin: endpoints edited through the services, the delivery log
read-only, with attempts and a Redeliver action."""

from __future__ import annotations

import pytest
from django.utils import timezone

from goaai.runtime.vocabulary import WebhookDeliveryStatus
from sessions_app.models import WebhookDelivery, WebhookEndpoint
from sessions_app.webhooks import services
from sessions_app.webhooks.delivery import attempt_record
from sessions_app.webhooks.sending import Outcome

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"


@pytest.fixture(autouse=True)
def _loopback_allowed(settings):
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]


def test_an_operator_adds_an_endpoint_and_a_private_url_is_refused(client, staff, owner, settings):
    client.force_login(staff)
    form = {
        "owner": owner.pk,
        "url": URL,
        "description": "",
        "events": ["run.completed"],
        "active": "on",
    }
    response = client.post("/admin/sessions_app/webhookendpoint/add/", form)
    assert response.status_code == 302, response.content
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret.startswith("whsec_")
    assert endpoint.owner == owner

    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = []
    refused = client.post(
        "/admin/sessions_app/webhookendpoint/add/", {**form, "url": "http://10.0.0.1/"}
    )
    assert refused.status_code == 200
    assert "not a public address" in refused.content.decode()
    assert WebhookEndpoint.objects.count() == 1


def test_the_delivery_log_shows_attempts_and_redelivers(client, staff, owner):
    endpoint = services.webhook_endpoint_create(
        owner_id=owner.pk, url=URL, events=["run.completed"]
    )
    delivery = services.webhook_ping(endpoint_id=endpoint.pk)
    now = timezone.now()
    for status in (500, 502):
        attempt_record(delivery_id=delivery.pk, started_at=now, outcome=Outcome(status, 7), now=now)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=WebhookDeliveryStatus.GAVE_UP)
    client.force_login(staff)

    page = client.get(f"/admin/sessions_app/webhookdelivery/{delivery.pk}/change/").content.decode()
    assert "502" in page
    assert "500" in page
    assert delivery.message_id in page
    changelist = client.get("/admin/sessions_app/webhookdelivery/")
    assert changelist.status_code == 200
    assert delivery.message_id in changelist.content.decode()

    response = client.post(
        "/admin/sessions_app/webhookdelivery/",
        {"action": "redeliver", "_selected_action": [str(delivery.pk)]},
    )
    assert response.status_code == 302
    delivery.refresh_from_db()
    assert delivery.status == WebhookDeliveryStatus.PENDING
    assert delivery.redelivery_requested


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_the_delivery_changelist_queries_do_not_grow(
    client, staff, owner, rows, django_assert_num_queries
):
    endpoint = services.webhook_endpoint_create(
        owner_id=owner.pk, url=URL, events=["run.completed"]
    )
    for _ in range(rows):
        services.webhook_ping(endpoint_id=endpoint.pk)
    client.force_login(staff)
    client.get("/admin/sessions_app/webhookdelivery/")
    # The login session, the user, their preferences (the page's time zone), and
    # the page's own.
    with django_assert_num_queries(6):
        client.get("/admin/sessions_app/webhookdelivery/")
