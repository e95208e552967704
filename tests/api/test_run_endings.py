"""Every ending told through the API: a stopped run says who stopped it
(``stopped_by``: its own user, an operator, the next message, a policy rule) in the
run, its ``run.canceled`` event and the session's export."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from goaai.runtime import rt
from goaai.runtime.policy import LabelRule
from runs_app.models import Run
from sessions_app.models import RunEvent
from tests.factories import RunFactory, SessionFactory

pytestmark = pytest.mark.django_db


def cancel_url(run_id) -> str:
    return f"/api/v1/runs/{run_id}/cancel/"


def _canceled_event(run: Run) -> dict:
    return RunEvent.objects.get(run=run, type="run.canceled").data


def test_a_user_stopping_their_own_run_is_told_as_its_user(api, owner, inline_runtime):
    run = RunFactory(session=SessionFactory(owner=owner))

    response = api.post(cancel_url(run.pk), {"reason": "stopped by the user"}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert body["stopped_by"] == {"kind": "user", "user": "alice", "rule": None}
    assert body["cancel_reason"] == "stopped by the user"
    assert _canceled_event(run) == {
        "reason": "stopped by the user",
        "stopped_by": {"kind": "user", "user": "alice", "rule": None},
    }
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["stopped_by"]["kind"] == "user"


def test_staff_stopping_someone_elses_run_is_an_operator_named(
    api, staff_api, owner, inline_runtime
):
    run = RunFactory(session=SessionFactory(owner=owner))

    staff_api.post(cancel_url(run.pk), {"reason": "stuck"}, format="json")

    # The run's own user reads who stopped it, and as what.
    seen = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert seen["stopped_by"] == {"kind": "operator", "user": "charlie", "rule": None}
    assert _canceled_event(run)["stopped_by"] == seen["stopped_by"]


def test_staff_stopping_their_own_run_is_its_user(staff_api, staff, inline_runtime):
    run = RunFactory(session=SessionFactory(owner=staff))

    staff_api.post(cancel_url(run.pk), {}, format="json")

    assert _canceled_event(run)["stopped_by"]["kind"] == "user"


@pytest.mark.django_db(transaction=True)
def test_a_message_that_interrupts_replaces_the_run_it_stops(api, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    waiting = api.post(
        f"/api/v1/sessions/{session.id}/runs/", {"input": "forget everything"}, format="json"
    ).json()
    assert api.get(f"/api/v1/runs/{waiting['id']}/").json()["status"] == "awaiting_input"

    api.post(
        f"/api/v1/sessions/{session.id}/runs/",
        {"input": "echo never mind", "multitask": "interrupt"},
        format="json",
    )

    replaced = api.get(f"/api/v1/runs/{waiting['id']}/").json()
    assert replaced["status"] == "canceled"
    assert replaced["stopped_by"] == {"kind": "superseded", "user": "alice", "rule": None}


@pytest.mark.django_db(transaction=True)
def test_a_run_a_policy_rule_ended_names_the_rule(api, owner, inline_runtime):
    rule = LabelRule(name="no_tools", match={"tier": "free"}, max_tool_calls=0)
    rt.configure(config=replace(rt.config, label_rules=(rule,)))
    session = rt.create_session(owner=owner, agent="assistant")

    created = api.post(
        f"/api/v1/sessions/{session.id}/runs/",
        {"input": "calculate 2 * (3 + 4)", "labels": {"tier": "free"}},
        format="json",
    ).json()

    run = api.get(f"/api/v1/runs/{created['id']}/").json()
    assert run["status"] == "failed"
    assert run["stopped_by"] == {"kind": "policy", "user": None, "rule": "max_tool_calls"}
    failed = RunEvent.objects.get(run_id=created["id"], type="run.failed").data
    assert failed["stopped_by"] == run["stopped_by"]


def test_a_run_nobody_stopped_says_so(api, owner):
    run = RunFactory(session=SessionFactory(owner=owner), status="completed")

    body = api.get(f"/api/v1/runs/{run.pk}/").json()

    assert (body["stopped_by"], body["cancel_reason"]) == (None, "")


def test_the_export_tells_who_stopped_each_run(api, staff_api, owner, inline_runtime):
    session = SessionFactory(owner=owner)
    run = RunFactory(session=session)
    staff_api.post(cancel_url(run.pk), {}, format="json")

    response = api.get(f"/api/v1/sessions/{session.pk}/export/")
    exported = json.loads(b"".join(response.streaming_content))

    (document,) = exported["runs"]
    assert document["stopped_by"] == {"kind": "operator", "user": "charlie", "rule": None}


@pytest.mark.parametrize("count", [0, 1, 3])
def test_listing_stopped_runs_costs_the_same_however_many(
    api, staff, owner, count, django_assert_num_queries
):
    session = SessionFactory(owner=owner)
    RunFactory(session=session)
    for _ in range(count):
        RunFactory(
            session=session, status="canceled", cancel_kind="operator", cancel_requested_by=staff
        )
    # Warm up what every request reads once (the token, the session).
    api.get(f"/api/v1/sessions/{session.pk}/runs/")

    with django_assert_num_queries(_queries_for(api, session)):
        listed = api.get(f"/api/v1/sessions/{session.pk}/runs/").json()["results"]

    assert sum(r["stopped_by"] is not None for r in listed) == count


def _queries_for(api, session) -> int:
    """The queries the list takes with a single run nobody stopped (the baseline)."""
    baseline = SessionFactory(owner=session.owner)
    RunFactory(session=baseline)
    with CaptureQueriesContext(connection) as captured:
        api.get(f"/api/v1/sessions/{baseline.pk}/runs/")
    return len(captured.captured_queries)
