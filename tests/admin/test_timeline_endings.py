"""The timelines tell every ending: a wait its run's end cut short is over (when,
after how long, and who stopped the run), never "still waiting"; who stopped a run
(its user, an operator, the next message, a policy rule); a worker lost and the run
taken up again."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

import pytest
from django.db.models import F
from django.urls import reverse

from goaai.runtime import rt
from goaai.runtime.policy import LabelRule
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent

pytestmark = pytest.mark.django_db(transaction=True)
EIGHT_MINUTES = dt.timedelta(minutes=8)


def run_url(run_id) -> str:
    return reverse("admin:runs_app_run_timeline", args=[run_id])


def session_url(session_id) -> str:
    return reverse("admin:sessions_app_session_timeline", args=[session_id])


def _waits(html: str) -> str:
    return html.split('id="tl-waits-title"')[1].split("</section>")[0]


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _waiting_for_approval(owner, *, since=EIGHT_MINUTES) -> Run:
    """Alice's run waiting, for ``since``, for her approval of memory_forget_all."""
    session = rt.create_session(owner=owner, agent="assistant")
    waiting = rt.run("assistant", "forget everything", session=session.id)
    assert waiting.status == "awaiting_input"
    # As if the wait had begun that long ago (a real one would slow the suite).
    RunEvent.objects.filter(run_id=waiting.id).update(created_at=F("created_at") - since)
    Run.objects.filter(pk=waiting.id).update(awaiting_since=F("awaiting_since") - since)
    ToolCall.objects.filter(run_id=waiting.id).update(created_at=F("created_at") - since)
    return Run.objects.get(pk=waiting.id)


def test_an_operator_cancel_closes_the_wait_in_the_run_and_session_timelines(
    client, staff, owner, inline_runtime
):
    run = _waiting_for_approval(owner)
    client.force_login(staff)
    before = _text(_waits(client.get(run_url(run.id)).content.decode()))
    assert "still waiting" in before
    assert "so far" in before

    client.post(reverse("admin:runs_app_run_timeline_cancel", args=[run.id]))

    ended = r"Canceled after 8 min \d+ s: Stopped by an operator \(charlie\)"
    for url in (run_url(run.id), session_url(run.session_id)):
        html = client.get(url).content.decode()
        waits = _text(_waits(html))
        assert re.search(ended, waits)
        assert "still waiting" not in waits
        assert "so far" not in waits
        assert "nobody : the run ended first" in waits
        assert 'data-wait-ended="canceled"' in html
        # The tool call's row says its wait ended too, and why.
        assert re.search(f"memory_forget_all · wait ended: {ended}", html)
        assert "requested, never decided: the wait ended at" in html
        assert "requested, not decided yet" not in html
    # The run's banner says who stopped it.
    page = _text(client.get(run_url(run.id)).content.decode())
    assert "Run canceled — Stopped by an operator (charlie)" in page


def test_the_runs_own_user_stopping_it_is_told_as_its_user(client, staff, owner, inline_runtime):
    run = _waiting_for_approval(owner, since=dt.timedelta(seconds=90))

    rt.cancel_run(run.id, reason="stopped by the user", by=owner)

    client.force_login(staff)
    html = client.get(run_url(run.id)).content.decode()
    assert re.search(
        r"Canceled after 1 min 3\d s: Stopped by its user \(alice\)", _text(_waits(html))
    )
    assert "Stopped by its user (alice) · stopped by the user" in _text(html)


def test_a_run_that_failed_while_waiting_ends_its_wait_with_its_error(
    client, staff, owner, inline_runtime
):
    run = _waiting_for_approval(owner, since=dt.timedelta(seconds=5))
    rt.store.finish_run(run_id=run.id, status="failed")

    client.force_login(staff)
    waits = _text(_waits(client.get(run_url(run.id)).content.decode()))
    # Its error says why (in the words its user reads, goaai.runtime.public_errors).
    assert re.search(r"Failed after 5\.\d\d s: \w", waits)
    assert "still waiting" not in waits


def test_a_policy_rule_that_stops_a_run_is_named_in_its_banner(
    client, staff, owner, inline_runtime
):
    rule = LabelRule(name="no_tools", match={"tier": "free"}, max_tool_calls=0)
    rt.configure(config=replace(rt.config, label_rules=(rule,)))
    session = rt.create_session(owner=owner, agent="assistant")
    run = rt.run("assistant", "calculate 2 * (3 + 4)", session=session.id, labels={"tier": "free"})

    client.force_login(staff)
    html = _text(client.get(run_url(run.id)).content.decode())
    assert "Run failed — Stopped by policy (max_tool_calls)" in html


def test_a_run_taken_over_from_a_dead_worker_shows_it_was_interrupted(
    client, staff, owner, inline_runtime
):
    session = rt.create_session(owner=owner, agent="assistant")
    run = rt.store.create_run(
        session_id=session.id, agent="assistant", input="echo hi", labels={}, metadata={}, policy={}
    )
    assert rt.store.claim_run(run.id, owner="dead-worker", lease_seconds=60)
    Run.objects.filter(pk=run.id).update(lease_expires_at=F("lease_expires_at") - EIGHT_MINUTES)

    rt.execute(run.id)

    client.force_login(staff)
    html = client.get(run_url(run.id)).content.decode()
    assert "Interrupted — resuming: its lease expired · worker dead-worker" in html
    assert re.search(r"tl-badge-retried\">run.interrupted", html)
