"""A failed run through the API: its owner reads the kind and a plain sentence, never
the provider's own words (internal addresses, error numbers); staff read those too,
as ``error.detail``, and the admin shows them."""

from __future__ import annotations

import pytest

from goaai.runtime.public_errors import ERROR_SENTENCES
from goaai.runtime.vocabulary import ErrorKind, EventType, RunStatus
from runs_app import services
from sessions_app.models import RunEvent
from tests.factories import RunFactory, SessionFactory

pytestmark = pytest.mark.django_db

RAW = (
    "openai: cannot reach http://10.0.0.5:8080/v1/chat/completions: "
    "Connection error: [Errno 111] Connection refused"
)
PLAIN = ERROR_SENTENCES[ErrorKind.UNAVAILABLE]


@pytest.fixture
def failed_run(owner):
    run = RunFactory(session=SessionFactory(owner=owner), status=RunStatus.RUNNING)
    services.run_fail(run_id=run.pk, kind=ErrorKind.UNAVAILABLE, message=RAW, retryable=True)
    return run


def test_the_owner_reads_the_kind_and_a_plain_sentence(api, failed_run):
    body = api.get(f"/api/v1/runs/{failed_run.pk}/").json()
    assert body["status"] == "failed"
    assert body["error"] == {"kind": "unavailable", "message": PLAIN, "retryable": True}
    listed = api.get("/api/v1/runs/", {"session": str(failed_run.session_id)}).json()
    assert listed["results"][0]["error"] == body["error"]
    assert "10.0.0.5" not in str(body) + str(listed)


def test_the_owner_reads_no_detail_in_the_events_or_the_export(api, failed_run):
    events = api.get(f"/api/v1/sessions/{failed_run.session_id}/events/").json()["results"]
    (failed,) = [e for e in events if e["type"] == EventType.RUN_FAILED]
    assert failed["data"]["error"] == {"kind": "unavailable", "message": PLAIN, "retryable": True}
    exported = api.get(f"/api/v1/sessions/{failed_run.session_id}/export/")
    text = b"".join(exported.streaming_content) if exported.streaming else exported.content
    for internal in (b"10.0.0.5", b"Errno"):
        assert internal not in text
        assert internal not in str(events).encode()


def test_staff_read_the_detail_as_well(staff_api, failed_run):
    body = staff_api.get(f"/api/v1/runs/{failed_run.pk}/").json()
    assert body["error"] == {
        "kind": "unavailable",
        "message": PLAIN,
        "retryable": True,
        "detail": RAW,
    }


def test_the_run_keeps_the_detail_and_the_timeline_shows_it(client, staff, failed_run):
    failed_run.refresh_from_db()
    assert failed_run.error_message == RAW
    stored = RunEvent.objects.get(run=failed_run, type=EventType.RUN_FAILED)
    assert stored.data["error"]["message"] == PLAIN
    client.force_login(staff)
    html = client.get(f"/admin/runs_app/run/{failed_run.pk}/timeline/").content.decode()
    assert "[Errno 111] Connection refused" in html


def test_goaais_own_reason_is_told_as_it_is(api, owner):
    run = RunFactory(session=SessionFactory(owner=owner), status=RunStatus.RUNNING)
    reason = "The agent did not answer within 10 turns."
    services.run_fail(run_id=run.pk, kind=ErrorKind.DOMAIN_REJECTION, message=reason)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["error"]["message"] == reason
    timed = RunFactory(session=run.session, status=RunStatus.RUNNING)
    services.run_time_out(run_id=timed.pk, message="The run exceeded its time budget of 60s.")
    error = api.get(f"/api/v1/runs/{timed.pk}/").json()["error"]
    assert error == {
        "kind": "timeout",
        "message": "The run exceeded its time budget of 60s.",
        "retryable": False,
    }
