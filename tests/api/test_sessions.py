"""/api/v1/sessions/: list, create, retrieve, update, delete, end and export."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from django.utils import timezone

from goaai.runtime.vocabulary import EventType, RunStatus, SessionStatus
from memory_app.models import MemoryEntry
from runs_app.models import Run, ToolCall, Turn
from sessions_app.models import RunEvent, Session
from tests.factories import (
    MemoryEntryFactory,
    RunFactory,
    SessionFactory,
    ToolCallFactory,
    TurnFactory,
)

pytestmark = pytest.mark.django_db

SESSIONS = "/api/v1/sessions/"


def _url(session: Session | uuid.UUID | str, suffix: str = "") -> str:
    pk = session.pk if isinstance(session, Session) else session
    return f"{SESSIONS}{pk}/{suffix}"


def _session_at(owner, *, minutes_ago: float, **fields) -> Session:
    """A session created ``minutes_ago`` and quiet since (``created_at`` is set on
    insert, so moved after, with its last activity)."""
    session = SessionFactory(owner=owner, **fields)
    created = timezone.now() - dt.timedelta(minutes=minutes_ago)
    Session.objects.filter(pk=session.pk).update(created_at=created, last_activity_at=created)
    session.refresh_from_db()
    return session


def _ids(response) -> list[str]:
    return [row["id"] for row in response.json()["results"]]


def _assert_error(response, status: int, code: str | None = None, attr: str | None = None):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] in {"validation_error", "client_error", "server_error"}
    assert body["errors"], body
    if code is not None:
        assert code in {error["code"] for error in body["errors"]}, body
    if attr is not None:
        assert attr in {error["attr"] for error in body["errors"]}, body
    return body


# list


def test_list_shows_the_callers_sessions_newest_first(api, owner, other_user):
    oldest = _session_at(owner, minutes_ago=30)
    newest = _session_at(owner, minutes_ago=1)
    middle = _session_at(owner, minutes_ago=10)
    _session_at(other_user, minutes_ago=5)

    response = api.get(SESSIONS)

    assert response.status_code == 200
    body = response.json()
    assert set(body) >= {"next", "previous", "results"}
    assert _ids(response) == [str(newest.pk), str(middle.pk), str(oldest.pk)]
    first = body["results"][0]
    assert first["owner"] == {"id": owner.pk, "username": "alice"}
    assert set(first) >= {
        "id",
        "agent",
        "title",
        "status",
        "metadata",
        "owner",
        "created_at",
        "updated_at",
        "ended_at",
        "last_activity_at",
    }


def test_list_shows_the_most_recently_active_first(api, owner):
    quiet = _session_at(owner, minutes_ago=1, title="Quiet")
    revived = _session_at(owner, minutes_ago=60, title="Revived")
    # Renaming the old session is activity: its event moves the session's.
    assert api.patch(_url(revived), {"title": "Revived again"}, format="json").status_code == 200

    response = api.get(SESSIONS)

    assert _ids(response) == [str(revived.pk), str(quiet.pk)]
    first = response.json()["results"][0]
    newest = RunEvent.objects.filter(session=revived).order_by("-seq").first()
    assert newest is not None
    assert dt.datetime.fromisoformat(first["last_activity_at"]) == newest.created_at
    assert dt.datetime.fromisoformat(first["created_at"]) < newest.created_at


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        ("created_at", ["old", "middle", "new"]),
        ("-created_at", ["new", "middle", "old"]),
        ("last_activity_at", ["new", "old", "middle"]),
        ("-last_activity_at", ["middle", "old", "new"]),
        # Anything else orders as by default.
        ("title", ["middle", "old", "new"]),
    ],
)
def test_list_orders_by_creation_or_activity_on_request(api, owner, ordering, expected):
    made = {
        "old": _session_at(owner, minutes_ago=30),
        "middle": _session_at(owner, minutes_ago=20),
        "new": _session_at(owner, minutes_ago=10),
    }
    now = timezone.now()
    for name, minutes in (("old", 5), ("middle", 1), ("new", 15)):
        Session.objects.filter(pk=made[name].pk).update(
            last_activity_at=now - dt.timedelta(minutes=minutes)
        )
    names = {str(session.pk): name for name, session in made.items()}

    first = api.get(SESSIONS, {"ordering": ordering, "page_size": 2})
    assert first.status_code == 200
    rest = api.get(first.json()["next"])
    assert [names[i] for i in _ids(first) + _ids(rest)] == expected


def test_list_of_another_user_does_not_include_the_owners_sessions(api, other_api, owner):
    mine = SessionFactory(owner=owner)

    response = other_api.get(SESSIONS)

    assert response.status_code == 200
    assert str(mine.pk) not in _ids(response)
    assert response.json()["results"] == []


def test_staff_list_shows_every_users_sessions(staff_api, owner, other_user):
    alices = SessionFactory(owner=owner)
    bobs = SessionFactory(owner=other_user)

    response = staff_api.get(SESSIONS)

    assert response.status_code == 200
    assert {str(alices.pk), str(bobs.pk)} <= set(_ids(response))


def test_list_filters_by_status(api, owner):
    active = SessionFactory(owner=owner)
    ended = SessionFactory(owner=owner, status=SessionStatus.ENDED, ended_at=timezone.now())

    assert _ids(api.get(SESSIONS, {"status": "ended"})) == [str(ended.pk)]
    assert _ids(api.get(SESSIONS, {"status": "active"})) == [str(active.pk)]


def test_list_filters_by_agent(api, owner):
    SessionFactory(owner=owner, agent="assistant")
    concierge = SessionFactory(owner=owner, agent="concierge")

    assert _ids(api.get(SESSIONS, {"agent": "concierge"})) == [str(concierge.pk)]


def test_list_filters_by_text_in_the_title_ignoring_case(api, owner):
    colours = SessionFactory(owner=owner, title="Favourite Colours")
    SessionFactory(owner=owner, title="Arithmetic")

    assert _ids(api.get(SESSIONS, {"q": "colour"})) == [str(colours.pk)]


def test_list_filters_by_a_metadata_string_value(api, owner):
    match = SessionFactory(owner=owner, metadata={"customer": "acme", "tries": 1})
    SessionFactory(owner=owner, metadata={"customer": "globex"})
    SessionFactory(owner=owner, metadata={})

    assert _ids(api.get(SESSIONS, {"metadata.customer": "acme"})) == [str(match.pk)]


def test_list_filters_by_a_metadata_number_given_as_text(api, owner):
    three = SessionFactory(owner=owner, metadata={"tries": 3})
    text_three = SessionFactory(owner=owner, metadata={"tries": "3"})
    SessionFactory(owner=owner, metadata={"tries": 4})
    SessionFactory(owner=owner, metadata={"other": 3})

    found = set(_ids(api.get(SESSIONS, {"metadata.tries": "3"})))

    assert found == {str(three.pk), str(text_three.pk)}


def test_list_combines_metadata_filters(api, owner):
    both = SessionFactory(owner=owner, metadata={"customer": "acme", "tries": 3})
    SessionFactory(owner=owner, metadata={"customer": "acme", "tries": 2})

    response = api.get(SESSIONS, {"metadata.customer": "acme", "metadata.tries": "3"})

    assert _ids(response) == [str(both.pk)]


def test_list_refuses_a_metadata_key_that_is_not_a_plain_name(api, owner):
    response = api.get(SESSIONS, {"metadata.a'b": "x"})

    _assert_error(response, 400, attr="metadata.a'b")


def test_list_filters_by_creation_time(api, owner):
    old = _session_at(owner, minutes_ago=120)
    recent = _session_at(owner, minutes_ago=5)
    boundary = (timezone.now() - dt.timedelta(minutes=60)).isoformat()

    assert _ids(api.get(SESSIONS, {"created_after": boundary})) == [str(recent.pk)]
    assert _ids(api.get(SESSIONS, {"created_before": boundary})) == [str(old.pk)]


def test_list_refuses_a_malformed_creation_time(api, owner):
    _assert_error(api.get(SESSIONS, {"created_after": "yesterday"}), 400, attr="created_after")


def test_list_refuses_an_unknown_status(api, owner):
    _assert_error(api.get(SESSIONS, {"status": "bogus"}), 400, attr="status")


def test_list_pages_by_cursor(api, owner):
    sessions = [_session_at(owner, minutes_ago=minutes) for minutes in range(5, 0, -1)]
    newest_first = [str(s.pk) for s in reversed(sessions)]

    first = api.get(SESSIONS, {"page_size": 2})
    assert first.status_code == 200
    assert _ids(first) == newest_first[:2]
    assert first.json()["previous"] is None

    second = api.get(first.json()["next"])
    assert _ids(second) == newest_first[2:4]
    third = api.get(second.json()["next"])
    assert _ids(third) == newest_first[4:]
    assert third.json()["next"] is None

    back = api.get(third.json()["previous"])
    assert _ids(back) == newest_first[2:4]


def test_list_paging_is_stable_when_sessions_are_added_between_pages(api, owner):
    sessions = [_session_at(owner, minutes_ago=minutes) for minutes in range(6, 0, -1)]
    newest_first = [str(s.pk) for s in reversed(sessions)]
    first = api.get(SESSIONS, {"page_size": 3})
    assert _ids(first) == newest_first[:3]

    # A client pages on while the owner starts new conversations.
    added = [SessionFactory(owner=owner) for _ in range(2)]
    second = api.get(first.json()["next"])

    assert _ids(second) == newest_first[3:]
    assert second.json()["next"] is None
    back = api.get(second.json()["previous"])
    assert _ids(back) == newest_first[:3]
    assert not {str(s.pk) for s in added} & set(_ids(second) + _ids(back))


def test_list_page_size_is_capped_at_200(api, owner):
    Session.objects.bulk_create(
        [Session(owner=owner, agent="assistant", title=f"s{i}") for i in range(205)]
    )

    response = api.get(SESSIONS, {"page_size": 1000})

    assert response.status_code == 200
    assert len(response.json()["results"]) == 200
    assert response.json()["next"] is not None


@pytest.mark.parametrize("rows", [0, 1, 5])
def test_list_query_count_does_not_grow_with_sessions(api, owner, rows, django_assert_num_queries):
    for _ in range(rows):
        session = SessionFactory(owner=owner, metadata={"k": "v"})
        RunFactory(session=session)
    api.get(SESSIONS)  # the token's first use of the minute is noted with a write

    # The token and its user, the page of sessions with their owners, then what
    # the runs of the page's sessions add up to (in one query, for a page not empty).
    with django_assert_num_queries(2 + (rows > 0)):
        response = api.get(SESSIONS)

    assert len(response.json()["results"]) == rows


# create


def test_create_starts_an_active_session_for_the_caller(api, owner):
    response = api.post(
        SESSIONS,
        {"agent": "assistant", "title": "Colours", "metadata": {"customer": "acme"}},
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["agent"] == "assistant"
    assert body["title"] == "Colours"
    assert body["metadata"] == {"customer": "acme"}
    assert body["status"] == "active"
    assert body["ended_at"] is None
    assert body["owner"]["id"] == owner.pk
    session = Session.objects.get(pk=body["id"])
    assert session.owner == owner
    assert api.get(_url(session)).json() == body


def test_create_records_a_session_created_event(api, owner):
    response = api.post(SESSIONS, {"agent": "assistant", "title": "Hi"}, format="json")

    events = api.get(_url(response.json()["id"], "events/")).json()["results"]
    assert [(e["seq"], e["type"]) for e in events] == [(1, EventType.SESSION_CREATED)]
    assert events[0]["data"]["title"] == "Hi"


def test_create_with_only_an_agent_gives_an_empty_title_and_metadata(api, owner):
    response = api.post(SESSIONS, {"agent": "concierge"}, format="json")

    assert response.status_code == 201
    assert (response.json()["title"], response.json()["metadata"]) == ("", {})


def test_create_with_an_unknown_agent_is_a_400_on_agent(api, owner):
    response = api.post(SESSIONS, {"agent": "nobody"}, format="json")

    _assert_error(response, 400, attr="agent")
    assert not Session.objects.exists()


def test_create_without_an_agent_is_a_400_on_agent(api, owner):
    _assert_error(api.post(SESSIONS, {"title": "x"}, format="json"), 400, attr="agent")


@pytest.mark.parametrize("metadata", [["a", "b"], "text", 3])
def test_create_refuses_metadata_that_is_not_an_object(api, owner, metadata):
    response = api.post(SESSIONS, {"agent": "assistant", "metadata": metadata}, format="json")

    _assert_error(response, 400, attr="metadata")
    assert not Session.objects.exists()


def test_create_refuses_a_title_over_200_characters(api, owner):
    response = api.post(SESSIONS, {"agent": "assistant", "title": "x" * 201}, format="json")

    _assert_error(response, 400, attr="title")


def test_create_accepts_a_title_of_200_characters(api, owner):
    response = api.post(SESSIONS, {"agent": "assistant", "title": "x" * 200}, format="json")

    assert response.status_code == 201
    assert len(response.json()["title"]) == 200


def test_create_as_staff_owns_the_session_as_staff(staff_api, staff):
    response = staff_api.post(SESSIONS, {"agent": "assistant"}, format="json")

    assert response.status_code == 201
    assert response.json()["owner"]["id"] == staff.pk


# retrieve


def test_retrieve_shows_the_owners_session(api, owner):
    session = SessionFactory(owner=owner, title="Mine", metadata={"a": 1})

    response = api.get(_url(session))

    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["title"], body["metadata"]) == (str(session.pk), "Mine", {"a": 1})


def test_retrieve_of_another_users_session_is_a_404_without_its_data(other_api, owner):
    session = SessionFactory(owner=owner, title="Alice's secret")

    response = other_api.get(_url(session))

    _assert_error(response, 404)
    assert b"secret" not in response.content


def test_retrieve_by_staff_shows_any_session(staff_api, owner):
    session = SessionFactory(owner=owner)

    assert staff_api.get(_url(session)).json()["id"] == str(session.pk)


def test_retrieve_of_an_unknown_session_is_a_404(api, owner):
    _assert_error(api.get(_url(uuid.uuid4())), 404)


# update


def test_patch_renames_a_session_and_keeps_its_metadata(api, owner):
    session = SessionFactory(owner=owner, title="Old", metadata={"a": 1})

    response = api.patch(_url(session), {"title": "New"}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["title"], response.json()["metadata"]) == ("New", {"a": 1})
    assert Session.objects.get(pk=session.pk).title == "New"


def test_patch_replaces_metadata(api, owner):
    session = SessionFactory(owner=owner, title="Keep", metadata={"a": 1, "b": 2})

    response = api.patch(_url(session), {"metadata": {"c": 3}}, format="json")

    assert response.status_code == 200
    assert (response.json()["title"], response.json()["metadata"]) == ("Keep", {"c": 3})
    assert api.get(_url(session)).json()["metadata"] == {"c": 3}


def test_patch_records_a_session_updated_event(api, owner):
    session_id = api.post(SESSIONS, {"agent": "assistant"}, format="json").json()["id"]

    api.patch(_url(session_id), {"title": "Renamed"}, format="json")

    events = api.get(_url(session_id, "events/")).json()["results"]
    assert [e["type"] for e in events] == [EventType.SESSION_CREATED, EventType.SESSION_UPDATED]
    assert events[-1]["data"]["title"] == "Renamed"


def test_patch_with_an_empty_body_is_a_400(api, owner):
    session = SessionFactory(owner=owner, title="Same")

    _assert_error(api.patch(_url(session), {}, format="json"), 400)
    assert Session.objects.get(pk=session.pk).title == "Same"


def test_patch_refuses_metadata_that_is_not_an_object(api, owner):
    session = SessionFactory(owner=owner, metadata={"a": 1})

    _assert_error(api.patch(_url(session), {"metadata": [1]}, format="json"), 400, attr="metadata")
    assert Session.objects.get(pk=session.pk).metadata == {"a": 1}


def test_patch_refuses_a_title_over_200_characters(api, owner):
    session = SessionFactory(owner=owner)

    _assert_error(api.patch(_url(session), {"title": "x" * 201}, format="json"), 400, attr="title")


def test_put_is_not_allowed(api, owner):
    session = SessionFactory(owner=owner, title="Same")

    response = api.put(_url(session), {"agent": "assistant", "title": "New"}, format="json")

    _assert_error(response, 405)
    assert Session.objects.get(pk=session.pk).title == "Same"


def test_patch_of_another_users_session_is_a_404_and_changes_nothing(other_api, owner):
    session = SessionFactory(owner=owner, title="Alice's")

    _assert_error(other_api.patch(_url(session), {"title": "Bob's"}, format="json"), 404)
    assert Session.objects.get(pk=session.pk).title == "Alice's"


def test_staff_may_rename_any_session(staff_api, owner):
    session = SessionFactory(owner=owner)

    response = staff_api.patch(_url(session), {"title": "Moderated"}, format="json")

    assert response.status_code == 200
    assert Session.objects.get(pk=session.pk).title == "Moderated"


# delete


def _session_with_history(api, owner) -> Session:
    session_id = api.post(SESSIONS, {"agent": "assistant"}, format="json").json()["id"]
    session = Session.objects.get(pk=session_id)
    call = ToolCallFactory(turn__run__session=session)
    MemoryEntryFactory(session=session)
    RunEvent.objects.create(session=session, run=call.run, seq=2, type=EventType.RUN_CREATED)
    return session


def test_delete_removes_the_session_with_its_runs_and_events(api, owner):
    session = _session_with_history(api, owner)

    response = api.delete(_url(session))

    assert response.status_code == 204
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not Run.objects.filter(session_id=session.pk).exists()
    assert not Turn.objects.filter(run__session_id=session.pk).exists()
    assert not ToolCall.objects.filter(session_id=session.pk).exists()
    assert not RunEvent.objects.filter(session_id=session.pk).exists()
    assert not MemoryEntry.objects.filter(session_id=session.pk).exists()
    _assert_error(api.get(_url(session)), 404)


def test_delete_of_another_users_session_is_a_404_and_deletes_nothing(api, other_api, owner):
    session = _session_with_history(api, owner)

    _assert_error(other_api.delete(_url(session)), 404)

    assert Session.objects.filter(pk=session.pk).exists()
    assert Run.objects.filter(session=session).count() == 1
    assert RunEvent.objects.filter(session=session).count() == 2
    assert api.get(_url(session)).status_code == 200


def test_staff_may_delete_any_session(staff_api, owner):
    session = SessionFactory(owner=owner)

    assert staff_api.delete(_url(session)).status_code == 204
    assert not Session.objects.filter(pk=session.pk).exists()


# end


def test_end_ends_the_session(api, owner):
    session = SessionFactory(owner=owner)

    response = api.post(_url(session, "end/"))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ended"
    assert body["ended_at"] is not None
    session.refresh_from_db()
    assert session.status == SessionStatus.ENDED
    assert session.ended_at is not None


def test_end_is_idempotent(api, owner):
    session = SessionFactory(owner=owner)
    first = api.post(_url(session, "end/")).json()

    second = api.post(_url(session, "end/"))

    assert second.status_code == 200
    assert second.json()["status"] == "ended"
    assert second.json()["ended_at"] == first["ended_at"]
    ended_events = RunEvent.objects.filter(session=session, type=EventType.SESSION_ENDED)
    assert ended_events.count() == 1


def test_end_cancels_runs_in_flight(api, owner):
    session = SessionFactory(owner=owner)
    pending = RunFactory(session=session, status=RunStatus.PENDING)
    done = RunFactory(session=session, status=RunStatus.COMPLETED)

    api.post(_url(session, "end/"))

    assert Run.objects.get(pk=pending.pk).status == RunStatus.CANCELED
    assert Run.objects.get(pk=done.pk).status == RunStatus.COMPLETED


def test_a_run_after_the_end_is_a_409_session_ended(api, owner):
    session = SessionFactory(owner=owner)
    api.post(_url(session, "end/"))

    response = api.post(_url(session, "runs/"), {"input": "echo hi"}, format="json")

    _assert_error(response, 409, code="session_ended")
    assert not Run.objects.filter(session=session).exists()


def test_end_of_another_users_session_is_a_404_and_leaves_it_active(other_api, owner):
    session = SessionFactory(owner=owner)

    _assert_error(other_api.post(_url(session, "end/")), 404)
    assert Session.objects.get(pk=session.pk).status == SessionStatus.ACTIVE


def test_staff_may_end_any_session(staff_api, owner):
    session = SessionFactory(owner=owner)

    assert staff_api.post(_url(session, "end/")).json()["status"] == "ended"


# export


def _document(response) -> dict:
    """The export, read to its end (it is streamed as it is written)."""
    return json.loads(b"".join(response.streaming_content))


def test_export_of_a_session_without_runs_has_every_part(api, owner):
    session_id = api.post(SESSIONS, {"agent": "assistant"}, format="json").json()["id"]

    response = api.get(_url(session_id, "export/"))

    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment")
    assert f"session-{session_id}.json" in response["Content-Disposition"]
    document = _document(response)
    assert {"format", "session", "runs", "turns", "tool_calls", "events", "memory"} <= set(document)
    assert document["format"] == "goaai.session.v1"
    assert document["session"]["id"] == session_id
    assert (document["runs"], document["turns"], document["tool_calls"]) == ([], [], [])
    assert [e["type"] for e in document["events"]] == [EventType.SESSION_CREATED]


@pytest.mark.django_db(transaction=True)
def test_export_matches_what_the_endpoints_show_one_by_one(api, owner, inline_runtime):
    session_id = api.post(SESSIONS, {"agent": "assistant"}, format="json").json()["id"]
    for message in ("remember my favourite colour is green", "calculate 2+3"):
        created = api.post(_url(session_id, "runs/"), {"input": message}, format="json")
        assert created.status_code == 201, created.content
    # Another user's session is not part of it.
    SessionFactory(owner=owner)

    document = _document(api.get(_url(session_id, "export/")))

    assert document["session"] == api.get(_url(session_id)).json()
    assert len(document["runs"]) == 2
    assert {run["status"] for run in document["runs"]} == {"completed"}
    for run in document["runs"]:
        shown = api.get(f"/api/v1/runs/{run['id']}/").json()
        assert {key: shown[key] for key in run} == run
    assert document["turns"]
    for turn in document["turns"]:
        assert api.get(f"/api/v1/turns/{turn['id']}/").json() == turn
    assert {call["name"] for call in document["tool_calls"]} >= {"memory_store", "calculator"}
    for call in document["tool_calls"]:
        assert api.get(f"/api/v1/tool-calls/{call['id']}/").json() == call
    events = api.get(_url(session_id, "events/"), {"limit": 1000}).json()["results"]
    assert document["events"] == events
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len(document["memory"]) == 1
    entry = document["memory"][0]
    assert entry["value"] == "green"
    assert api.get(f"/api/v1/memory/{entry['id']}/").json() == entry


def test_export_of_another_users_session_is_a_404(other_api, owner):
    session = SessionFactory(owner=owner, title="Alice's secret")

    response = other_api.get(_url(session, "export/"))

    _assert_error(response, 404)
    assert b"secret" not in response.content


def test_staff_may_export_any_session(staff_api, owner):
    session = SessionFactory(owner=owner)

    response = staff_api.get(_url(session, "export/"))

    assert response.status_code == 200
    assert _document(response)["session"]["id"] == str(session.pk)


def test_export_leaves_out_memory_of_other_sessions_and_scopes(api, owner):
    session = SessionFactory(owner=owner)
    mine = MemoryEntryFactory(session=session, key="colour", value="green")
    MemoryEntryFactory(session=SessionFactory(owner=owner), key="colour", value="blue")
    MemoryEntryFactory(user_scoped=True, user=owner, key="name", value="Alice")

    document = _document(api.get(_url(session, "export/")))

    assert [entry["id"] for entry in document["memory"]] == [str(mine.pk)]


@pytest.mark.parametrize("runs", [1, 4])
def test_export_query_count_does_not_grow_with_runs(api, owner, runs, django_assert_num_queries):
    session = SessionFactory(owner=owner)
    for _ in range(runs):
        run = RunFactory(session=session, status=RunStatus.COMPLETED)
        for _ in range(2):
            ToolCallFactory(turn=TurnFactory(run=run))
        MemoryEntryFactory(session=session)
    api.get(SESSIONS)  # the token's first use of the minute is noted with a write

    # Token, session, where it was forked from, then one query each for runs, turns,
    # tool calls, events, memory and history summaries (read while the document is
    # written out).
    with django_assert_num_queries(9):
        document = _document(api.get(_url(session, "export/")))

    assert (len(document["runs"]), len(document["turns"])) == (runs, 2 * runs)
    assert len(document["tool_calls"]) == 2 * runs
