"""/api/v1/webhooks/: endpoints, their deliveries with attempts, redelivery."""

from __future__ import annotations

import pytest
from django.utils import timezone

from goaai.runtime.vocabulary import WebhookDeliveryStatus
from sessions_app.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from sessions_app.webhooks import services
from sessions_app.webhooks.delivery import attempt_record
from sessions_app.webhooks.sending import Outcome

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"


@pytest.fixture(autouse=True)
def _loopback_allowed(settings):
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]


def _endpoint(user, url: str = URL) -> WebhookEndpoint:
    return services.webhook_endpoint_create(
        owner_id=user.pk, url=url, events=["run.completed", "memory.changed"]
    )


def _errors(response) -> list[tuple[str | None, str]]:
    return [(e["attr"], e["code"]) for e in response.json()["errors"]]


def test_create_shows_the_secret_once(api, owner):
    response = api.post(
        "/api/v1/webhooks/",
        {"url": URL, "events": ["run.completed"], "description": "CRM"},
        format="json",
    )
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["secret"].startswith("whsec_")
    assert created["events"] == ["run.completed"]
    assert created["active"] is True
    assert created["owner"] == {"id": owner.pk, "username": "alice"}
    shown = api.get(f"/api/v1/webhooks/{created['id']}/").json()
    assert "secret" not in shown
    assert "secret" not in api.get("/api/v1/webhooks/").json()["results"][0]


def test_rotating_the_secret_shows_the_new_one(api, owner):
    endpoint = _endpoint(owner)
    response = api.post(f"/api/v1/webhooks/{endpoint.pk}/rotate-secret/")
    assert response.status_code == 200
    assert response.json()["secret"] != endpoint.secret
    endpoint.refresh_from_db()
    assert response.json()["secret"] == endpoint.secret


@pytest.mark.parametrize(
    ("body", "attr", "code"),
    [
        (
            {"url": "http://127.0.0.2.example.invalid/", "events": ["run.completed"]},
            "url",
            "refused_url",
        ),
        ({"url": "http://10.0.0.1/", "events": ["run.completed"]}, "url", "refused_url"),
        ({"url": "ftp://example.com/", "events": ["run.completed"]}, "url", "refused_url"),
        ({"url": URL, "events": []}, "events", "min_length"),
        ({"url": URL, "events": ["run.exploded"]}, "events.0", "invalid_choice"),
        ({"url": URL, "events": "run.completed"}, "events", "not_a_list"),
        ({"url": URL}, "events", "required"),
        ({"url": 7, "events": ["run.completed"]}, "url", "refused_url"),
        (
            {"url": "http://127.0.0.1/\x00", "events": ["run.completed"]},
            "url",
            "null_characters_not_allowed",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, settings, body, attr, code):
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    response = api.post("/api/v1/webhooks/", body, format="json")
    assert response.status_code == 400, response.content
    assert (attr, code) in _errors(response)
    assert not WebhookEndpoint.objects.exists()


def test_loopback_is_refused_without_the_allow_list(api, settings):
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = []
    response = api.post(
        "/api/v1/webhooks/", {"url": URL, "events": ["run.completed"]}, format="json"
    )
    assert response.status_code == 400
    assert "not a public address" in response.json()["errors"][0]["detail"]


def test_malformed_json_is_a_400(api):
    response = api.generic(
        "POST", "/api/v1/webhooks/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400


def test_at_most_twenty_endpoints(api, owner):
    for n in range(services.MAX_ENDPOINTS_PER_USER):
        _endpoint(owner, f"{URL}/{n}")
    response = api.post(
        "/api/v1/webhooks/", {"url": URL, "events": ["run.completed"]}, format="json"
    )
    assert response.status_code == 400
    assert ("non_field_errors", "too_many") in _errors(response)


def test_update_and_delete(api, owner):
    endpoint = _endpoint(owner)
    response = api.patch(
        f"/api/v1/webhooks/{endpoint.pk}/",
        {"events": ["session.ended"], "active": False, "description": "paused"},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["events"] == ["session.ended"]
    assert response.json()["active"] is False
    assert api.patch(f"/api/v1/webhooks/{endpoint.pk}/", {}, format="json").status_code == 400
    refused = api.patch(
        f"/api/v1/webhooks/{endpoint.pk}/", {"url": "http://10.0.0.1/"}, format="json"
    )
    assert refused.status_code == 400
    assert api.delete(f"/api/v1/webhooks/{endpoint.pk}/").status_code == 204
    assert not WebhookEndpoint.objects.exists()


def test_other_users_endpoints_and_deliveries_are_404(api, other_user):
    bobs = _endpoint(other_user)
    delivery = services.webhook_ping(endpoint_id=bobs.pk)
    assert api.get("/api/v1/webhooks/").json()["results"] == []
    for method, path in [
        ("get", f"/api/v1/webhooks/{bobs.pk}/"),
        ("patch", f"/api/v1/webhooks/{bobs.pk}/"),
        ("delete", f"/api/v1/webhooks/{bobs.pk}/"),
        ("post", f"/api/v1/webhooks/{bobs.pk}/test/"),
        ("post", f"/api/v1/webhooks/{bobs.pk}/rotate-secret/"),
        ("get", f"/api/v1/webhooks/{bobs.pk}/deliveries/"),
        ("get", f"/api/v1/webhooks/deliveries/{delivery.pk}/"),
        ("post", f"/api/v1/webhooks/deliveries/{delivery.pk}/redeliver/"),
    ]:
        response = getattr(api, method)(path, {"active": False}, format="json")
        assert response.status_code == 404, (method, path, response.status_code)
    bobs.refresh_from_db()
    assert bobs.active


@pytest.mark.parametrize("bad", ["not-a-uuid", "00000000-0000-0000-0000-000000000000", "-" * 36])
def test_unknown_ids_are_404(api, bad):
    assert api.get(f"/api/v1/webhooks/{bad}/").status_code == 404
    assert api.post(f"/api/v1/webhooks/deliveries/{bad}/redeliver/").status_code == 404


def test_staff_read_others_endpoints_without_their_secret(staff_api, owner):
    endpoint = _endpoint(owner)
    shown = staff_api.get(f"/api/v1/webhooks/{endpoint.pk}/").json()
    assert shown["url"] == URL
    assert "secret" not in shown


def test_deliveries_list_their_attempts(api, owner):
    endpoint = _endpoint(owner)
    delivery = services.webhook_ping(endpoint_id=endpoint.pk)
    now = timezone.now()
    attempt_record(
        delivery_id=delivery.pk,
        started_at=now,
        outcome=Outcome(500, 12, "", "oops"),
        now=now,
    )
    page = api.get(f"/api/v1/webhooks/{endpoint.pk}/deliveries/").json()
    (shown,) = page["results"]
    assert shown["message_id"] == delivery.message_id
    assert shown["status"] == WebhookDeliveryStatus.FAILED
    assert shown["attempt_count"] == 1
    assert shown["attempts"] == [
        {
            "number": 1,
            "started_at": shown["attempts"][0]["started_at"],
            "response_status": 500,
            "latency_ms": 12,
            "succeeded": False,
            "error": "",
            "response_excerpt": "oops",
            "manual": False,
        }
    ]
    assert shown["payload"]["type"] == "webhook.ping"


def test_redeliver_queues_another_attempt_now(api, owner):
    endpoint = _endpoint(owner)
    delivery = services.webhook_ping(endpoint_id=endpoint.pk)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=WebhookDeliveryStatus.GAVE_UP, next_attempt_at=None
    )
    response = api.post(f"/api/v1/webhooks/deliveries/{delivery.pk}/redeliver/")
    assert response.status_code == 202
    assert response.json()["status"] == WebhookDeliveryStatus.PENDING
    assert response.json()["next_attempt_at"] is not None


def test_test_queues_a_ping(api, owner):
    endpoint = _endpoint(owner)
    response = api.post(f"/api/v1/webhooks/{endpoint.pk}/test/")
    assert response.status_code == 202
    assert response.json()["event_type"] == "webhook.ping"


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_delivery_list_queries_do_not_grow(api, owner, rows, django_assert_num_queries):
    endpoint = _endpoint(owner)
    now = timezone.now()
    for _ in range(rows):
        queued = services.webhook_ping(endpoint_id=endpoint.pk)
        for _ in range(2):
            attempt_record(delivery_id=queued.pk, started_at=now, outcome=Outcome(500, 1), now=now)
    assert WebhookAttempt.objects.count() == 2 * rows
    # The token and its user (authentication), the endpoint, the page of deliveries,
    # their attempts (no query for them when the page is empty).
    with django_assert_num_queries(5 if rows else 4):
        response = api.get(f"/api/v1/webhooks/{endpoint.pk}/deliveries/")
    assert len(response.json()["results"]) == rows


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_endpoint_list_queries_do_not_grow(api, owner, rows, django_assert_num_queries):
    for n in range(rows):
        _endpoint(owner, f"{URL}/{n}")
    # The token and its user (authentication), then one query for the page.
    with django_assert_num_queries(3):
        response = api.get("/api/v1/webhooks/")
    assert len(response.json()["results"]) == rows
