"""Runs: POST/GET /api/v1/sessions/{id}/runs/, GET /api/v1/runs/ and /runs/{id}/."""

from __future__ import annotations

import datetime as dt
import uuid
from unittest import mock

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from goaai.runtime import rt
from runs_app.models import Run
from runs_app.selectors import run_for_idempotency_key
from sessions_app.models import RunEvent, Session
from tests.factories import RunFactory, SessionFactory, ToolCallFactory, TurnFactory

MAX_INPUT = 32_000


@pytest.fixture(autouse=True)
def _fresh_throttles():
    # Run creation is throttled per user in the cache, which outlives a test; user
    # ids repeat between tests, so counts of earlier tests must not spill over.
    cache.clear()


def session_runs_url(session) -> str:
    return f"/api/v1/sessions/{session.pk}/runs/"


def run_url(run) -> str:
    return f"/api/v1/runs/{run.pk}/"


def errors(response) -> list[tuple[str, str | None]]:
    return [(error["code"], error["attr"]) for error in response.json()["errors"]]


def ids(response) -> list[str]:
    return [row["id"] for row in response.json()["results"]]


def run_created(session, minutes_ago: float, **fields) -> Run:
    """A run whose creation time is fixed, so that orderings and ranges are exact."""
    run = RunFactory(session=session, **fields)
    Run.objects.filter(pk=run.pk).update(
        created_at=timezone.now() - dt.timedelta(minutes=minutes_ago)
    )
    run.refresh_from_db()
    return run


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


@pytest.fixture
def bobs_session(other_user):
    return SessionFactory(owner=other_user)


# POST /sessions/{id}/runs/


@pytest.mark.django_db(transaction=True)
def test_a_posted_message_runs_to_the_scripted_answer(api, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")

    response = api.post(
        f"/api/v1/sessions/{session.id}/runs/", {"input": "calculate 2+3"}, format="json"
    )

    assert response.status_code == 201
    body = response.json()
    assert response["Location"].endswith(f"/api/v1/runs/{body['id']}/")
    assert body["session"] == str(session.id)
    assert body["agent"] == "assistant"
    assert body["input"] == "calculate 2+3"
    followed = api.get(response["Location"])
    assert followed.status_code == 200
    assert followed.json()["status"] == "completed"
    assert followed.json()["output"] == "2+3 = 5"
    assert followed.json()["usage"]["total_tokens"] > 0


@pytest.mark.django_db
def test_a_new_run_keeps_its_labels_and_metadata_and_waits_for_an_executor(
    api, session, inline_runtime
):
    response = api.post(
        session_runs_url(session),
        {"input": "echo hi", "labels": {"team": "support"}, "metadata": {"ticket": 42}},
        format="json",
    )

    assert response.status_code == 201
    body = response.json()
    # Outside a committed transaction nothing executes it: it is still pending.
    assert body["status"] == "pending"
    assert body["labels"] == {"team": "support"}
    assert body["metadata"] == {"ticket": 42}
    assert body["parent_run"] is None
    assert Run.objects.get(pk=body["id"]).session_id == session.pk


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_a_blank_message_is_refused(api, session, inline_runtime, text):
    response = api.post(session_runs_url(session), {"input": text}, format="json")

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert [attr for _, attr in errors(response)] == ["input"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_missing_message_is_refused(api, session, inline_runtime):
    response = api.post(session_runs_url(session), {"labels": {}}, format="json")

    assert response.status_code == 400
    assert errors(response) == [("required", "input")]


@pytest.mark.django_db
def test_a_message_of_the_largest_size_is_accepted_and_one_more_character_is_not(
    api, session, inline_runtime
):
    too_long = api.post(session_runs_url(session), {"input": "x" * (MAX_INPUT + 1)}, format="json")
    longest = api.post(session_runs_url(session), {"input": "x" * MAX_INPUT}, format="json")

    assert too_long.status_code == 400
    assert errors(too_long) == [("max_length", "input")]
    assert longest.status_code == 201
    assert Run.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "labels",
    [
        {"tier": 1},
        {"tier": True},
        {"tier": None},
        {"tier": {"nested": "x"}},
        {"tier": ["free"]},
        ["tier", "free"],
        "tier:free",
    ],
    ids=["number", "boolean", "null", "object", "list", "not-an-object", "string"],
)
def test_labels_must_map_strings_to_strings(api, session, inline_runtime, labels):
    response = api.post(
        session_runs_url(session), {"input": "echo hi", "labels": labels}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert all(attr and attr.startswith("labels") for _, attr in errors(response))
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_metadata_must_be_an_object(api, session, inline_runtime):
    response = api.post(
        session_runs_url(session), {"input": "echo hi", "metadata": ["a"]}, format="json"
    )

    assert response.status_code == 400
    assert [attr for _, attr in errors(response)] == ["metadata"]


@pytest.mark.django_db
def test_a_run_cannot_be_started_in_another_users_session(other_api, session, inline_runtime):
    response = other_api.post(session_runs_url(session), {"input": "echo hi"}, format="json")

    assert response.status_code == 404
    assert "echo" not in response.content.decode()
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_run_in_a_session_that_does_not_exist_is_a_404(api, inline_runtime):
    response = api.post(
        f"/api/v1/sessions/{uuid.uuid4()}/runs/", {"input": "echo hi"}, format="json"
    )

    assert response.status_code == 404


@pytest.mark.django_db
def test_a_free_tier_label_tightens_the_runs_policy_and_says_so_in_the_log(
    api, session, inline_runtime
):
    response = api.post(
        session_runs_url(session),
        {"input": "echo hi", "labels": {"tier": "free"}},
        format="json",
    )

    assert response.status_code == 201
    body = response.json()
    assert body["policy"]["max_tool_calls"] == 3
    decisions = RunEvent.objects.filter(run_id=body["id"], type="policy.decision")
    assert [event.data["rule"] for event in decisions] == ["free_tier"]


@pytest.mark.django_db
def test_without_labels_the_agents_own_policy_applies(api, session, inline_runtime):
    response = api.post(session_runs_url(session), {"input": "echo hi"}, format="json")

    assert response.json()["policy"]["max_tool_calls"] > 3
    assert not RunEvent.objects.filter(type="policy.decision").exists()


# Idempotency-Key


@pytest.mark.django_db
def test_the_same_key_and_body_return_the_same_run(api, session, inline_runtime):
    body = {"input": "echo hi", "labels": {"a": "b"}}

    first = api.post(session_runs_url(session), body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post(session_runs_url(session), body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert Run.objects.filter(session=session).count() == 1


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_a_conflict(api, session, inline_runtime):
    first = api.post(
        session_runs_url(session), {"input": "echo hi"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    other = api.post(
        session_runs_url(session), {"input": "echo bye"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )

    assert first.status_code == 201
    assert other.status_code == 409
    assert other.json()["type"] == "client_error"
    assert [code for code, _ in errors(other)] == ["idempotency_key_reused"]
    assert Run.objects.filter(session=session).count() == 1


@pytest.mark.django_db
def test_a_key_is_per_session(api, owner, session, inline_runtime):
    second_session = SessionFactory(owner=owner)
    body = {"input": "echo hi"}

    first = api.post(session_runs_url(session), body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    second = api.post(
        session_runs_url(second_session), body, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] != second.json()["id"]
    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_requests_without_a_key_each_start_a_run(api, session, inline_runtime):
    for _ in range(2):
        assert (
            api.post(session_runs_url(session), {"input": "echo hi"}, format="json").status_code
            == 201
        )

    assert Run.objects.filter(session=session).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key", ["k" * 201, "clé-1", "a\tb", ""], ids=["too-long", "non-ascii", "control", "empty"]
)
def test_an_invalid_key_is_refused(api, session, inline_runtime, key):
    response = api.post(
        session_runs_url(session), {"input": "echo hi"}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )

    assert response.status_code == 400
    assert [attr for _, attr in errors(response)] == ["Idempotency-Key"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_key_of_the_largest_length_is_accepted(api, session, inline_runtime):
    response = api.post(
        session_runs_url(session),
        {"input": "echo hi"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k" * 200,
    )

    assert response.status_code == 201


def _lose_the_race_once():
    """Make the view's look-up miss once, as if the other request had not committed
    yet when it looked: both requests then try to create the run."""
    calls = {"n": 0}

    def lookup(**kwargs):
        calls["n"] += 1
        return None if calls["n"] == 1 else run_for_idempotency_key(**kwargs)

    return mock.patch("runs_app.api.views.run_for_idempotency_key", side_effect=lookup)


def _race(api, session):
    body = {"input": "echo hi"}
    first = api.post(session_runs_url(session), body, format="json", HTTP_IDEMPOTENCY_KEY="race")
    with _lose_the_race_once():
        second = api.post(
            session_runs_url(session), body, format="json", HTTP_IDEMPOTENCY_KEY="race"
        )
    return first, second


@pytest.mark.django_db
def test_a_request_that_loses_the_race_for_a_key_answers_with_the_winners_run(
    api, session, inline_runtime
):
    first, second = _race(api, session)

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json()["id"] == first.json()["id"]
    assert Run.objects.filter(session=session).count() == 1


@pytest.mark.django_db(transaction=True)
def test_losing_the_race_for_a_key_outside_a_test_transaction(api, owner, inline_runtime):
    # As in production: each request in autocommit, so the losing insert fails in a
    # transaction of its own, which must be rolled back before the look-up.
    session = Session.objects.get(pk=rt.create_session(owner=owner, agent="assistant").id)

    first, second = _race(api, session)

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json()["id"] == first.json()["id"]
    assert Run.objects.filter(session=session).count() == 1
    # The losing attempt left no trace in the event log either.
    seqs = list(
        RunEvent.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, len(seqs) + 1))
    assert RunEvent.objects.filter(session_id=session.id, type="run.created").count() == 1


@pytest.mark.django_db
def test_staff_may_start_a_run_in_any_session(staff_api, session, inline_runtime):
    response = staff_api.post(session_runs_url(session), {"input": "echo hi"}, format="json")

    assert response.status_code == 201
    assert response.json()["session"] == str(session.pk)


# GET /sessions/{id}/runs/


@pytest.mark.django_db
def test_a_sessions_runs_are_listed_newest_first(api, session):
    oldest = run_created(session, 30)
    newest = run_created(session, 10)
    middle = run_created(session, 20)
    run_created(SessionFactory(owner=session.owner), 5)  # another session of hers

    response = api.get(session_runs_url(session))

    assert response.status_code == 200
    assert ids(response) == [str(newest.pk), str(middle.pk), str(oldest.pk)]
    assert set(response.json()) >= {"next", "previous", "results"}


@pytest.mark.django_db
def test_another_users_session_runs_are_a_404(other_api, session):
    run_created(session, 1, input="my secret plan")

    response = other_api.get(session_runs_url(session))

    assert response.status_code == 404
    assert "secret" not in response.content.decode()


@pytest.mark.django_db
def test_staff_list_any_sessions_runs(staff_api, session):
    run = run_created(session, 1)

    response = staff_api.get(session_runs_url(session))

    assert ids(response) == [str(run.pk)]


@pytest.mark.django_db
def test_a_sessions_runs_filter_by_status(api, session):
    done = run_created(session, 3, status="completed")
    run_created(session, 2, status="pending")
    failed = run_created(session, 1, status="failed")

    response = api.get(session_runs_url(session), {"status": ["completed", "failed"]})

    assert ids(response) == [str(failed.pk), str(done.pk)]


@pytest.mark.django_db
def test_paging_stays_stable_while_runs_are_added(api, session):
    runs = [run_created(session, minutes) for minutes in (50, 40, 30, 20, 10)]
    expected = [str(run.pk) for run in reversed(runs)]

    first = api.get(session_runs_url(session), {"page_size": 2})
    # A run started while the client pages: newer than everything it has seen.
    RunFactory(session=session)
    second = api.get(first.json()["next"])
    third = api.get(second.json()["next"])

    assert ids(first) + ids(second) + ids(third) == expected
    assert third.json()["next"] is None
    assert first.json()["previous"] is None


@pytest.mark.django_db
def test_page_size_is_capped_at_200(api, session):
    Run.objects.bulk_create(
        [Run(session=session, agent="assistant", input=f"message {n}") for n in range(201)]
    )

    response = api.get(session_runs_url(session), {"page_size": 1000})

    assert response.status_code == 200
    assert len(response.json()["results"]) == 200
    assert response.json()["next"] is not None


# GET /runs/


@pytest.mark.django_db
def test_runs_list_only_the_callers_own(api, other_api, session, bobs_session):
    mine = run_created(session, 2)
    bobs = run_created(bobs_session, 1)

    assert ids(api.get("/api/v1/runs/")) == [str(mine.pk)]
    assert ids(other_api.get("/api/v1/runs/")) == [str(bobs.pk)]


@pytest.mark.django_db
def test_staff_see_every_run(staff_api, session, bobs_session):
    mine = run_created(session, 2)
    bobs = run_created(bobs_session, 1)

    assert ids(staff_api.get("/api/v1/runs/")) == [str(bobs.pk), str(mine.pk)]


@pytest.mark.django_db
def test_runs_filter_by_session(api, owner, session):
    wanted = run_created(session, 2)
    run_created(SessionFactory(owner=owner), 1)

    assert ids(api.get("/api/v1/runs/", {"session": str(session.pk)})) == [str(wanted.pk)]


@pytest.mark.django_db
def test_filtering_by_another_users_session_shows_nothing(other_api, session):
    run_created(session, 1)

    response = other_api.get("/api/v1/runs/", {"session": str(session.pk)})

    assert response.status_code == 200
    assert ids(response) == []


@pytest.mark.django_db
def test_runs_filter_by_several_statuses(api, session):
    completed = run_created(session, 4, status="completed")
    run_created(session, 3, status="running")
    canceled = run_created(session, 2, status="canceled")
    run_created(session, 1, status="pending")

    response = api.get("/api/v1/runs/", {"status": ["completed", "canceled"]})

    assert ids(response) == [str(canceled.pk), str(completed.pk)]


@pytest.mark.django_db
def test_an_unknown_status_is_refused(api, session):
    response = api.get("/api/v1/runs/", {"status": "sleeping"})

    assert response.status_code == 400
    assert [attr for _, attr in errors(response)] == ["status"]


@pytest.mark.django_db
def test_runs_filter_by_agent(api, session):
    concierge = run_created(session, 2, agent="concierge")
    run_created(session, 1, agent="assistant")

    assert ids(api.get("/api/v1/runs/", {"agent": "concierge"})) == [str(concierge.pk)]


@pytest.mark.django_db
def test_runs_filter_by_every_label_given(api, session):
    free_a = run_created(session, 3, labels={"tier": "free", "team": "a"})
    free_b = run_created(session, 2, labels={"tier": "free", "team": "b"})
    run_created(session, 1, labels={"tier": "pro", "team": "a"})

    only_free = api.get("/api/v1/runs/", {"label": "tier:free"})
    free_and_a = api.get("/api/v1/runs/", {"label": ["tier:free", "team:a"]})

    assert ids(only_free) == [str(free_b.pk), str(free_a.pk)]
    assert ids(free_and_a) == [str(free_a.pk)]


@pytest.mark.django_db
def test_a_label_value_may_contain_a_colon(api, session):
    wanted = run_created(session, 2, labels={"source": "https://example.com"})
    run_created(session, 1, labels={"source": "https"})

    response = api.get("/api/v1/runs/", {"label": "source:https://example.com"})

    assert ids(response) == [str(wanted.pk)]


@pytest.mark.django_db
def test_a_label_without_a_colon_is_refused(api, session):
    response = api.get("/api/v1/runs/", {"label": "tier"})

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert [attr for _, attr in errors(response)] == ["label"]


@pytest.mark.django_db
def test_runs_filter_by_text_in_input_or_output(api, session):
    asked = run_created(session, 3, input="Plan a trip to ROME")
    answered = run_created(session, 2, input="where?", output="Rome is lovely")
    run_created(session, 1, input="echo paris", output="paris")

    response = api.get("/api/v1/runs/", {"q": "rome"})

    assert ids(response) == [str(answered.pk), str(asked.pk)]


@pytest.mark.django_db
def test_runs_filter_by_metadata(api, session):
    pro = run_created(session, 3, metadata={"plan": "pro", "tries": 3})
    run_created(session, 2, metadata={"plan": "free", "tries": 1})
    run_created(session, 1)

    assert ids(api.get("/api/v1/runs/", {"metadata.plan": "pro"})) == [str(pro.pk)]
    assert ids(api.get("/api/v1/runs/", {"metadata.tries": "3"})) == [str(pro.pk)]


@pytest.mark.django_db
def test_runs_filter_by_creation_time(api, session):
    old = run_created(session, 120)
    middle = run_created(session, 60)
    recent = run_created(session, 1)
    now = timezone.now()

    after = api.get(
        "/api/v1/runs/", {"created_after": (now - dt.timedelta(minutes=90)).isoformat()}
    )
    before = api.get(
        "/api/v1/runs/", {"created_before": (now - dt.timedelta(minutes=30)).isoformat()}
    )
    between = api.get(
        "/api/v1/runs/",
        {
            "created_after": (now - dt.timedelta(minutes=90)).isoformat(),
            "created_before": (now - dt.timedelta(minutes=30)).isoformat(),
        },
    )

    assert ids(after) == [str(recent.pk), str(middle.pk)]
    assert ids(before) == [str(middle.pk), str(old.pk)]
    assert ids(between) == [str(middle.pk)]


@pytest.mark.django_db
def test_a_malformed_time_is_refused(api, session):
    response = api.get("/api/v1/runs/", {"created_after": "yesterday"})

    assert response.status_code == 400
    assert [attr for _, attr in errors(response)] == ["created_after"]


@pytest.mark.django_db
def test_runs_filter_by_parent_run(api, session):
    parent = run_created(session, 3)
    child = run_created(session, 2, parent_run=parent, agent="assistant")
    run_created(session, 1)

    assert ids(api.get("/api/v1/runs/", {"parent_run": str(parent.pk)})) == [str(child.pk)]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/runs/", "session"])
def test_run_lists_take_the_same_number_of_queries_for_0_1_and_many_runs(
    api, session, django_assert_num_queries, path
):
    url = session_runs_url(session) if path == "session" else path
    api.get(url)  # the token's first use is recorded once; keep it out of the count
    with CaptureQueriesContext(connection) as empty:
        assert api.get(url).json()["results"] == []

    RunFactory(session=session)
    with django_assert_num_queries(len(empty.captured_queries)):
        assert len(api.get(url).json()["results"]) == 1

    RunFactory.create_batch(5, session=session, labels={"a": "b"}, status="completed")
    with django_assert_num_queries(len(empty.captured_queries)):
        assert len(api.get(url).json()["results"]) == 6


# GET /runs/{id}/


@pytest.mark.django_db
def test_a_run_shows_its_turns_in_order_each_with_its_tool_calls_in_order(api, session):
    run = RunFactory(session=session, status="completed")
    # Written out of order on purpose: the order shown is the run's, not the insert's.
    second = TurnFactory(run=run, index=1)
    first = TurnFactory(run=run, index=0)
    call_b = ToolCallFactory(turn=first, index=1, name="echo")
    call_a = ToolCallFactory(turn=first, index=0, name="calculator")

    response = api.get(run_url(run))

    assert response.status_code == 200
    body = response.json()
    assert [turn["id"] for turn in body["turns"]] == [str(first.pk), str(second.pk)]
    assert [call["id"] for call in body["turns"][0]["tool_calls"]] == [
        str(call_a.pk),
        str(call_b.pk),
    ]
    assert body["turns"][1]["tool_calls"] == []
    assert body["turns"][0]["tool_calls"][0]["name"] == "calculator"
    assert body["child_runs"] == []


@pytest.mark.django_db
def test_another_users_run_is_a_404(other_api, session):
    run = RunFactory(session=session, input="my secret plan")

    response = other_api.get(run_url(run))

    assert response.status_code == 404
    assert "secret" not in response.content.decode()


@pytest.mark.django_db
def test_staff_see_any_run(staff_api, session):
    run = RunFactory(session=session)

    response = staff_api.get(run_url(run))

    assert response.status_code == 200
    assert response.json()["id"] == str(run.pk)


@pytest.mark.django_db
def test_a_run_that_does_not_exist_is_a_404(api):
    assert api.get(f"/api/v1/runs/{uuid.uuid4()}/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_concierge_run_shows_the_assistant_run_it_handed_work_to(
    api, other_api, owner, inline_runtime
):
    session = rt.create_session(owner=owner, agent="concierge")

    created = api.post(
        f"/api/v1/sessions/{session.id}/runs/", {"input": "calculate 2+3"}, format="json"
    )
    parent = api.get(f"/api/v1/runs/{created.json()['id']}/").json()

    assert parent["status"] == "completed"
    assert "5" in parent["output"]
    assert len(parent["child_runs"]) == 1
    child_id = parent["child_runs"][0]
    delegating_call = next(
        call
        for turn in parent["turns"]
        for call in turn["tool_calls"]
        if call["name"].startswith("ask_")
    )
    child = api.get(f"/api/v1/runs/{child_id}/").json()
    assert child["agent"] == "assistant"
    assert child["parent_run"] == parent["id"]
    assert child["parent_tool_call"] == delegating_call["id"]
    assert child["status"] == "completed"
    assert ids(api.get("/api/v1/runs/", {"parent_run": parent["id"]})) == [child_id]
    assert other_api.get(f"/api/v1/runs/{child_id}/").status_code == 404


def _run_with(session, turns: int, calls_per_turn: int) -> Run:
    run = RunFactory(session=session, status="completed")
    for index in range(turns):
        turn = TurnFactory(run=run, index=index)
        for call_index in range(calls_per_turn):
            ToolCallFactory(turn=turn, index=call_index)
    return run


@pytest.mark.django_db
def test_a_runs_detail_takes_the_same_number_of_queries_however_many_turns_and_calls(
    api, session, django_assert_num_queries
):
    small = _run_with(session, turns=1, calls_per_turn=1)
    big = _run_with(session, turns=5, calls_per_turn=4)
    api.get(run_url(small))  # the token's first use is recorded once
    with CaptureQueriesContext(connection) as baseline:
        assert len(api.get(run_url(small)).json()["turns"]) == 1

    with django_assert_num_queries(len(baseline.captured_queries)):
        body = api.get(run_url(big)).json()

    assert len(body["turns"]) == 5
    assert sum(len(turn["tool_calls"]) for turn in body["turns"]) == 20


@pytest.mark.django_db
def test_a_runs_detail_takes_the_same_number_of_queries_however_many_child_runs(
    api, session, django_assert_num_queries
):
    one_child = _run_with(session, turns=1, calls_per_turn=1)
    RunFactory(session=session, parent_run=one_child)
    three_children = _run_with(session, turns=1, calls_per_turn=1)
    RunFactory.create_batch(3, session=session, parent_run=three_children)
    api.get(run_url(one_child))  # the token's first use is recorded once
    with CaptureQueriesContext(connection) as baseline:
        assert len(api.get(run_url(one_child)).json()["child_runs"]) == 1

    with django_assert_num_queries(len(baseline.captured_queries)):
        body = api.get(run_url(three_children)).json()

    assert len(body["child_runs"]) == 3
