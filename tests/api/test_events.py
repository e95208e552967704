"""GET /api/v1/sessions/{id}/events/?after=N&limit=M: catching up on a session's log."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlparse

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from goaai.runtime import rt
from goaai.runtime.vocabulary import EventType
from sessions_app import eventlog
from tests.factories import RunFactory, SessionFactory


@pytest.fixture(autouse=True)
def _fresh_throttles():
    # Run creation is throttled per user in the cache, which outlives a test.
    cache.clear()


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


def events_url(session_id) -> str:
    return f"/api/v1/sessions/{session_id}/events/"


def append(session, count: int, run=None) -> None:
    for n in range(count):
        eventlog.event_append(
            session_id=session.pk,
            type=EventType.POLICY_DECISION,
            data={"n": n},
            run_id=run.pk if run is not None else None,
        )


def seqs(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [event["seq"] for event in response.json()["results"]]


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlparse(url).query)


@pytest.mark.django_db
def test_events_come_oldest_first_with_their_fields(api, session):
    run = RunFactory(session=session)
    append(session, 3, run=run)

    response = api.get(events_url(session.pk))

    assert seqs(response) == [1, 2, 3]
    first = response.json()["results"][0]
    assert set(first) == {"seq", "type", "run", "data", "created_at"}
    assert (first["type"], first["run"], first["data"]) == (
        "policy.decision",
        str(run.pk),
        {"n": 0},
    )
    assert response.json()["next"] is None
    assert response.json()["previous"] is None


@pytest.mark.django_db
def test_only_events_after_the_given_seq_are_returned(api, session):
    append(session, 5)

    assert seqs(api.get(events_url(session.pk), {"after": 3})) == [4, 5]
    assert seqs(api.get(events_url(session.pk), {"after": 5})) == []
    assert seqs(api.get(events_url(session.pk), {"after": 99})) == []


@pytest.mark.django_db
def test_only_the_sessions_own_events_are_returned(api, owner, session):
    other = SessionFactory(owner=owner)
    append(other, 2)
    append(session, 1)
    append(other, 1)

    assert seqs(api.get(events_url(session.pk))) == [1]
    assert seqs(api.get(events_url(other.pk))) == [1, 2, 3]


@pytest.mark.django_db
def test_a_full_page_links_to_the_events_after_its_last_one(api, session):
    append(session, 5)

    first = api.get(events_url(session.pk), {"limit": 2})
    second = api.get(first.json()["next"])
    third = api.get(second.json()["next"])

    assert seqs(first) == [1, 2]
    assert query(first.json()["next"]) == {"after": ["2"], "limit": ["2"]}
    assert seqs(second) == [3, 4]
    assert seqs(third) == [5]
    # Not full: the client has caught up.
    assert third.json()["next"] is None


@pytest.mark.django_db
def test_a_page_that_is_exactly_full_links_to_an_empty_page(api, session):
    append(session, 4)

    first = api.get(events_url(session.pk), {"limit": 2, "after": 2})
    last = api.get(first.json()["next"])

    assert seqs(first) == [3, 4]
    assert seqs(last) == []
    assert last.json()["next"] is None


@pytest.mark.django_db
def test_the_next_link_picks_up_events_appended_since(api, session):
    append(session, 2)
    first = api.get(events_url(session.pk), {"limit": 2})

    append(session, 1)
    later = api.get(first.json()["next"])

    assert seqs(later) == [3]


@pytest.mark.django_db
def test_the_default_page_holds_100_events(api, session):
    append(session, 101)

    response = api.get(events_url(session.pk))

    assert seqs(response) == list(range(1, 101))
    assert query(response.json()["next"])["after"] == ["100"]


@pytest.mark.django_db
def test_a_limit_of_1000_is_allowed(api, session):
    append(session, 2)

    assert seqs(api.get(events_url(session.pk), {"limit": 1000})) == [1, 2]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("after", "-1"),
        ("after", "abc"),
        ("after", "1.5"),
        ("after", str(2**63)),
        ("limit", "0"),
        ("limit", "-5"),
        ("limit", "1001"),
        ("limit", "ten"),
    ],
)
def test_a_bad_after_or_limit_is_refused(api, session, param, value):
    append(session, 1)

    response = api.get(events_url(session.pk), {param: value})

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert [error["attr"] for error in response.json()["errors"]] == [param]


@pytest.mark.django_db
def test_another_users_session_events_are_a_404(other_api, session):
    eventlog.event_append(
        session_id=session.pk, type=EventType.POLICY_DECISION, data={"secret": "alice's"}
    )

    response = other_api.get(events_url(session.pk))

    assert response.status_code == 404
    assert "alice" not in response.content.decode()


@pytest.mark.django_db
def test_events_of_a_session_that_does_not_exist_are_a_404(api):
    assert api.get(events_url(uuid.uuid4())).status_code == 404


@pytest.mark.django_db
def test_staff_read_any_sessions_events(staff_api, session):
    append(session, 2)

    assert seqs(staff_api.get(events_url(session.pk))) == [1, 2]


@pytest.mark.django_db
def test_reading_events_takes_the_same_number_of_queries_for_0_1_and_many(
    api, session, django_assert_num_queries
):
    run = RunFactory(session=session)
    url = events_url(session.pk)
    api.get(url)  # the token's first use is recorded once; keep it out of the count
    with CaptureQueriesContext(connection) as empty:
        assert seqs(api.get(url)) == []

    append(session, 1, run=run)
    with django_assert_num_queries(len(empty.captured_queries)):
        assert seqs(api.get(url)) == [1]

    append(session, 20, run=run)
    with django_assert_num_queries(len(empty.captured_queries)):
        assert len(seqs(api.get(url))) == 21


@pytest.mark.django_db(transaction=True)
def test_a_completed_run_leaves_an_unbroken_numbered_log_in_order(api, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    created = api.post(
        f"/api/v1/sessions/{session.id}/runs/", {"input": "calculate 2+3"}, format="json"
    )
    run_id = created.json()["id"]

    events = api.get(events_url(session.id), {"limit": 1000}).json()["results"]

    types = [event["type"] for event in events]
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert types[:4] == ["session.created", "run.created", "run.started", "turn.started"]
    assert types[-1] == "run.completed"
    assert all(event["run"] == run_id for event in events[1:])
    # The tool call's life, in order, between the first turn and the answer.
    lifecycle = ["tool_call.scheduled", "tool_call.started", "tool_call.succeeded"]
    positions = [types.index(kind) for kind in lifecycle]
    assert positions == sorted(positions)
    assert types.index("turn.completed") < positions[0]
    assert positions[-1] < types.index("message.completed") < types.index("run.completed")
    assert types.count("turn.started") == types.count("turn.completed") == 2
    # The answer is in the log, as a client following it would show it.
    message = next(event for event in events if event["type"] == "message.completed")
    assert message["data"]["text"] == "2+3 = 5"


@pytest.mark.django_db(transaction=True)
def test_a_client_catching_up_in_small_pages_sees_every_event_once(api, owner, inline_runtime):
    session = rt.create_session(owner=owner, agent="assistant")
    for text in ("echo one", "calculate 1+1"):
        api.post(f"/api/v1/sessions/{session.id}/runs/", {"input": text}, format="json")
    everything = seqs(api.get(events_url(session.id), {"limit": 1000}))

    seen: list[int] = []
    url: str | None = f"{events_url(session.id)}?limit=3"
    while url is not None:
        page = api.get(url)
        seen += seqs(page)
        url = page.json()["next"]

    assert seen == everything == list(range(1, len(everything) + 1))
