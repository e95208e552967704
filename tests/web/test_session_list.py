"""The list of one's own sessions: newest first, grouped, searchable, paged."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from goaai.runtime.vocabulary import RunStatus
from runs_app.views import PAGE_SIZE
from sessions_app.models import Session
from sessions_app.services import session_create
from tests.factories import RunFactory, SessionFactory

pytestmark = pytest.mark.django_db


def _session_ids(response) -> list[str]:
    html = response.content.decode()
    return [part.split('"', 1)[0] for part in html.split('data-session-id="')[1:]]


def test_only_own_sessions_are_listed(alice_client: Client, owner, other_user) -> None:
    mine = SessionFactory(owner=owner, title="Mine")
    SessionFactory(owner=other_user, title="Bob's secret")
    response = alice_client.get("/")
    assert response.status_code == 200
    assert _session_ids(response) == [str(mine.pk)]
    assert "Bob&#x27;s secret" not in response.content.decode()


def test_most_recently_active_first_grouped_by_last_activity(alice_client: Client, owner) -> None:
    now = timezone.now()
    old = SessionFactory(owner=owner, title="Old one")
    Session.objects.filter(pk=old.pk).update(last_activity_at=now - dt.timedelta(days=30))
    week = SessionFactory(owner=owner, title="This week")
    Session.objects.filter(pk=week.pk).update(last_activity_at=now - dt.timedelta(days=3))
    new = SessionFactory(owner=owner, title="Fresh")
    # Created first, active last: it leads the list.
    revived = SessionFactory(owner=owner, title="Revived")
    Session.objects.filter(pk=revived.pk).update(
        created_at=now - dt.timedelta(days=60), last_activity_at=now + dt.timedelta(seconds=1)
    )
    html = alice_client.get("/").content.decode()
    assert _session_ids(alice_client.get("/")) == [
        str(revived.pk),
        str(new.pk),
        str(week.pk),
        str(old.pk),
    ]
    assert html.index("Today") < html.index("Previous 7 days") < html.index("Older")


@pytest.mark.django_db(transaction=True)
def test_a_message_makes_its_chat_the_first(alice_client: Client, owner, inline_runtime) -> None:
    first = session_create(owner_id=owner.pk, agent="assistant", title="First")
    second = session_create(owner_id=owner.pk, agent="assistant", title="Second")
    assert _session_ids(alice_client.get("/")) == [str(second.pk), str(first.pk)]
    run = inline_runtime.run("assistant", "calculate 1 + 1", session=first.pk)
    assert run.status == RunStatus.COMPLETED
    assert _session_ids(alice_client.get("/")) == [str(first.pk), str(second.pk)]
    # The sidebar of a chat agrees.
    assert _session_ids(alice_client.get(f"/sessions/{second.pk}/"))[:2] == [
        str(first.pk),
        str(second.pk),
    ]


def test_the_list_shows_when_a_chat_was_last_active(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner)
    moment = timezone.now().replace(hour=9, minute=5, second=0, microsecond=0)
    if moment > timezone.now():
        moment -= dt.timedelta(days=1)
    Session.objects.filter(pk=session.pk).update(
        last_activity_at=moment, created_at=moment - dt.timedelta(days=40)
    )
    html = alice_client.get("/").content.decode()
    assert f'datetime="{moment.isoformat()}"' in html
    assert ">09:05</time>" in html


def test_search_by_title(alice_client: Client, owner) -> None:
    trip = SessionFactory(owner=owner, title="Planning the trip")
    SessionFactory(owner=owner, title="Groceries")
    response = alice_client.get("/", {"q": "TRIP"})
    assert _session_ids(response) == [str(trip.pk)]
    assert 'value="TRIP"' in response.content.decode()


def test_search_without_results_says_so(alice_client: Client, owner) -> None:
    SessionFactory(owner=owner, title="Groceries")
    html = alice_client.get("/", {"q": "<b>zebra</b>"}).content.decode()
    assert "No chat has a title containing" in html
    assert "&lt;b&gt;zebra&lt;/b&gt;" in html
    assert "<b>zebra</b>" not in html


def test_badges_show_session_status_and_latest_run_status(alice_client: Client, owner) -> None:
    session = SessionFactory(owner=owner)
    older = RunFactory(session=session, status=RunStatus.COMPLETED)
    RunFactory(session=session, status=RunStatus.FAILED)
    # A child run (an agent called as a tool) does not decide the badge.
    RunFactory(session=session, status=RunStatus.RUNNING, parent_run=older)
    ended = SessionFactory(owner=owner, status="ended", ended_at=timezone.now())
    html = alice_client.get("/").content.decode()
    assert 'class="badge badge-run badge-failed"' in html
    assert "badge-running" not in html
    assert 'class="badge badge-ended"' in html
    assert str(ended.pk) in html


def test_pages_without_counting(alice_client: Client, owner) -> None:
    sessions = [SessionFactory(owner=owner) for _ in range(PAGE_SIZE + 2)]
    newest_first = [str(s.pk) for s in reversed(sessions)]
    first = alice_client.get("/")
    assert _session_ids(first) == newest_first[:PAGE_SIZE]
    assert 'rel="next" href="?page=2"' in first.content.decode()
    second = alice_client.get("/", {"page": 2})
    assert _session_ids(second) == newest_first[PAGE_SIZE:]
    assert 'rel="prev"' in second.content.decode()
    assert 'rel="next"' not in second.content.decode()
    assert alice_client.get("/", {"page": "nonsense"}).status_code == 200


def test_empty_list_invites_a_first_chat(alice_client: Client) -> None:
    html = alice_client.get("/").content.decode()
    assert "No chats yet" in html
    assert 'href="/sessions/new/"' in html


@pytest.mark.parametrize("count", [0, 1, 5])
def test_query_count_does_not_grow_with_sessions(
    alice_client: Client, owner, count: int, django_assert_num_queries
) -> None:
    for _ in range(count):
        session = SessionFactory(owner=owner)
        RunFactory(session=session, status=RunStatus.COMPLETED)
        RunFactory(session=session, status=RunStatus.RUNNING)
    # The login session, the user, their preferences (the time zone of the page),
    # and the page of sessions with their latest runs.
    with django_assert_num_queries(4):
        response = alice_client.get("/")
    assert response.status_code == 200
    assert len(_session_ids(response)) == count


def test_list_page_loads_its_script_and_data(alice_client: Client) -> None:
    html = alice_client.get("/").content.decode()
    assert '<script type="module" src="/static/sessions_app/js/sessions.js"></script>' in html
    assert '<script id="list-data" type="application/json">' in html
    assert 'role="search"' in html
