"""Redo, fork and summary links in the operators' console: the run timeline says
which run a run continues from and which it redoes, which runs redo it, where it was
forked, and which summaries of earlier runs it wrote; the session export keeps all
of it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from goaai.runtime import rt
from goaai.runtime.types import Usage
from runs_app.export import session_document
from runs_app.models import Run
from runs_app.services import history_summary_record

# The runs execute once their transaction commits.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    return client


def timeline(operator, run_id) -> str:
    response = operator.get(reverse("admin:runs_app_run_timeline", args=[run_id]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_retry_and_the_run_it_retries_link_to_each_other(operator, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    first = rt.run("assistant", "echo one", session=session.id)
    stopped = rt.start("assistant", "echo two", session=session.id)
    Run.objects.filter(pk=stopped.run_id).update(status="canceled")
    retry = rt.redo(stopped.run_id, "retry", created_by=owner).wait()

    page = timeline(operator, retry.id)
    original = timeline(operator, stopped.run_id)

    assert "Retry of" in page
    assert reverse("admin:runs_app_run_timeline", args=[stopped.run_id]) in page
    assert reverse("admin:runs_app_run_timeline", args=[first.id]) in page  # continues from
    assert "retried by" in original
    assert reverse("admin:runs_app_run_timeline", args=[retry.id]) in original
    # The log row of its creation says what it redoes.
    assert f"retry of {str(stopped.run_id)[:8]}" in page


def test_a_run_that_summarised_history_shows_the_summary(operator, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    earlier = rt.run("assistant", "echo earlier", session=session.id)
    later = rt.run("assistant", "echo later", session=session.id)
    history_summary_record(
        run_id=later.id,
        through_run_id=earlier.id,
        previous_id=None,
        runs_covered=1,
        text="The user asked to echo a word.",
        model="scripted",
        usage=Usage(120, 9),
        latency_ms=5,
    )

    page = timeline(operator, later.id)

    assert "Earlier conversation summarised: 1 run" in page
    assert "The user asked to echo a word." in page
    assert Run.objects.get(pk=later.id).input_tokens >= 120


def test_a_fork_shows_in_the_timeline_and_the_export(operator, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant", title="Plans")
    one = rt.run("assistant", "echo one", session=session.id)
    fork = rt.fork(one.id, owner=owner)
    in_fork = rt.run("assistant", "echo fork", session=fork.id)

    page = timeline(operator, one.id)
    document = session_document(Run.objects.get(pk=in_fork.id).session)

    assert "Forked into" in page
    assert "Plans (fork)" in page
    assert document["forked_from"] == {"session": session.id, "run": one.id}
    (exported,) = document["runs"]
    assert exported["previous_run"] == one.id
    assert document["history_summaries"] == []
