"""Reading memory through the API: the list, one entry, resolution for a session,
and an entry's history.

Alice (``api``) reads her sessions' entries, her own user entries and the agent and
global entries every run reads; Bob (``other_api``) must never see Alice's session or
user entries, not even by id; Charlie (``staff_api``) sees everything. Writes are in
``test_memory_writes.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from goaai.runtime import rt
from goaai.runtime.vocabulary import WriterKind
from memory_app import services
from memory_app.models import MemoryEntry
from runs_app.models import Run, ToolCall
from tests.factories import MemoryEntryFactory, RunFactory, SessionFactory, ToolCallFactory

pytestmark = pytest.mark.django_db

MEMORY = "/api/v1/memory/"
RESOLVE = "/api/v1/memory/resolve/"


def detail(entry_id: Any) -> str:
    return f"{MEMORY}{entry_id}/"


def revisions(entry_id: Any) -> str:
    return f"{MEMORY}{entry_id}/revisions/"


def errors(response) -> list[tuple[str, str | None]]:
    """(code, attr) of each error, in the API's one error shape."""
    return [(error["code"], error["attr"]) for error in response.json()["errors"]]


def keys(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {row["key"] for row in response.json()["results"]}


def walk(client, url: str) -> list[dict[str, Any]]:
    """Every row of a cursor-paged list, following ``next`` to the end."""
    rows: list[dict[str, Any]] = []
    pages = 0
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        rows.extend(body["results"])
        url = body["next"]
        pages += 1
        assert pages < 50, "the cursor never ends"
    return rows


def entry_in(scope: str, *, owner, session, **fields) -> MemoryEntry:
    """An entry of ``scope`` belonging to Alice's ``session``, to Alice, to the
    assistant agent, or to everyone."""
    where = {
        "session": {"session": session},
        "user": {"user_scoped": True, "user": owner},
        "agent": {"agent_scoped": True},
        "global": {"global_scoped": True},
    }[scope]
    return MemoryEntryFactory(**where, **fields)


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner, agent="assistant")


@pytest.fixture
def bob_session(other_user):
    return SessionFactory(owner=other_user, agent="assistant")


@pytest.fixture
def everyones_memory(owner, other_user, session, bob_session) -> dict[str, MemoryEntry]:
    """One entry per scope and owner, each under a key naming whose it is."""
    return {
        "alice session": MemoryEntryFactory(key="alice session", session=session, value="tea"),
        "alice user": MemoryEntryFactory(key="alice user", user_scoped=True, user=owner),
        "bob session": MemoryEntryFactory(key="bob session", session=bob_session),
        "bob user": MemoryEntryFactory(key="bob user", user_scoped=True, user=other_user),
        "assistant agent": MemoryEntryFactory(key="assistant agent", agent_scoped=True),
        "global": MemoryEntryFactory(key="global", global_scoped=True),
    }


# --- GET /memory/ -------------------------------------------------------------


def test_list_shows_alice_her_memory_and_the_shared_entries(api, everyones_memory, session):
    response = api.get(MEMORY)

    assert keys(response) == {"alice session", "alice user", "assistant agent", "global"}
    row = next(r for r in response.json()["results"] if r["key"] == "alice session")
    entry = everyones_memory["alice session"]
    assert row == {
        "id": str(entry.pk),
        "key": "alice session",
        "value": "tea",
        "scope": "session",
        "session": str(session.pk),
        "user": None,
        "agent": "",
        "version": 1,
        "written_by": {"kind": "system", "user": None, "run": None, "tool_call": None},
        "expires_at": None,
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
    assert dt.datetime.fromisoformat(row["created_at"]) == entry.created_at
    assert dt.datetime.fromisoformat(row["updated_at"]) == entry.updated_at


def test_list_never_shows_bob_alices_session_or_user_entries(other_api, everyones_memory):
    assert keys(other_api.get(MEMORY)) == {
        "bob session",
        "bob user",
        "assistant agent",
        "global",
    }


def test_staff_list_every_entry(staff_api, everyones_memory):
    assert keys(staff_api.get(MEMORY)) == set(everyones_memory)


def test_list_needs_authentication(client, everyones_memory):
    response = client.get(MEMORY)

    assert response.status_code == 401
    assert response.json()["type"] == "client_error"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"scope": "session"}, {"alice session"}),
        ({"scope": "user"}, {"alice user"}),
        ({"scope": "agent"}, {"assistant agent"}),
        ({"scope": "global"}, {"global"}),
        ({"agent": "assistant"}, {"assistant agent"}),
        ({"agent": "researcher"}, set()),
        ({"key": "alice user"}, {"alice user"}),
        ({"key": "alice"}, set()),
        # q: text in the key...
        ({"q": "ALICE"}, {"alice session", "alice user"}),
        # ... or in the value.
        ({"q": "tea"}, {"alice session"}),
        ({"scope": "user", "q": "alice"}, {"alice user"}),
    ],
)
def test_list_filters(api, everyones_memory, query, expected):
    assert keys(api.get(MEMORY, query)) == expected


def test_list_filter_by_session(api, everyones_memory, session, owner):
    other_of_alices = SessionFactory(owner=owner)
    MemoryEntryFactory(key="elsewhere", session=other_of_alices)

    assert keys(api.get(MEMORY, {"session": str(session.pk)})) == {"alice session"}
    assert keys(api.get(MEMORY, {"session": str(other_of_alices.pk)})) == {"elsewhere"}


def test_list_filter_by_bobs_session_shows_alice_nothing(api, everyones_memory, bob_session):
    assert keys(api.get(MEMORY, {"session": str(bob_session.pk)})) == set()


def test_list_q_finds_words_inside_structured_values(api, session):
    MemoryEntryFactory(key="diet", session=session, value={"likes": ["porridge", "figs"]})
    MemoryEntryFactory(key="pet", session=session, value={"name": "Rex"})

    assert keys(api.get(MEMORY, {"q": "porridge"})) == {"diet"}
    assert keys(api.get(MEMORY, {"q": "rex"})) == {"pet"}


def test_list_q_finds_text_beyond_ascii_in_values(api, session):
    # A German user searching for their favourite colour "grün": the value is
    # stored as JSON, and must be found by the text the user typed.
    MemoryEntryFactory(key="favourite colour", session=session, value="grün")
    MemoryEntryFactory(key="city", session=session, value="Zürich")

    assert keys(api.get(MEMORY, {"q": "grün"})) == {"favourite colour"}
    assert keys(api.get(MEMORY, {"q": "Zür"})) == {"city"}


@pytest.mark.parametrize(
    ("query", "attr"),
    [
        ({"scope": "planet"}, "scope"),
        ({"session": "not-a-session"}, "session"),
    ],
)
def test_list_bad_filter_is_a_400(api, everyones_memory, query, attr):
    response = api.get(MEMORY, query)

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert [a for _, a in errors(response)] == [attr]


def test_list_pages_by_cursor_newest_first(api, session):
    created = [MemoryEntryFactory(key=f"k{i}", session=session) for i in range(5)]

    first = api.get(MEMORY, {"page_size": 2}).json()
    assert set(first) == {"next", "previous", "results"}
    assert first["previous"] is None
    assert [r["key"] for r in first["results"]] == ["k4", "k3"]

    rows = walk(api, f"{MEMORY}?page_size=2")

    assert [r["id"] for r in rows] == [str(e.pk) for e in reversed(created)]
    second = api.get(first["next"]).json()
    assert [r["key"] for r in second["results"]] == ["k2", "k1"]
    back = api.get(second["previous"]).json()
    assert [r["key"] for r in back["results"]] == ["k4", "k3"]


def test_list_page_size_is_capped_at_200(api, session):
    MemoryEntry.objects.bulk_create(
        MemoryEntry(
            key=f"k{i}", value=i, scope="session", session=session, written_by_kind="system"
        )
        for i in range(201)
    )

    body = api.get(MEMORY, {"page_size": 1000}).json()

    assert len(body["results"]) == 200
    assert body["next"] is not None
    assert len(api.get(body["next"]).json()["results"]) == 1


@pytest.mark.parametrize("rows", [0, 1, 8])
def test_list_query_count_does_not_grow_with_rows(
    api, owner, session, django_assert_num_queries, rows
):
    # Entries of every scope, written by runs and tool calls and people, so that
    # every field the serializer shows is filled in.
    run = RunFactory(session=session, status="completed")
    call = ToolCallFactory(turn__run=run)
    for i in range(rows):
        entry_in(
            ("session", "user", "agent", "global")[i % 4],
            owner=owner,
            session=session,
            key=f"fact {i}",
            written_by_kind=WriterKind.RUN,
            written_by_run=run,
            written_by_tool_call=call,
            written_by_user=owner,
        )
    api.get(MEMORY)  # the first request of a token notes its use; not measured

    # One query authenticates the token, one reads the page.
    with django_assert_num_queries(2):
        response = api.get(MEMORY)

    assert len(response.json()["results"]) == rows


# --- GET /memory/{id}/ --------------------------------------------------------


@pytest.mark.parametrize("name", ["alice session", "alice user", "assistant agent", "global"])
def test_alice_reads_her_entries_and_the_shared_ones(api, everyones_memory, name):
    entry = everyones_memory[name]

    response = api.get(detail(entry.pk))

    assert response.status_code == 200
    assert (response.json()["id"], response.json()["key"]) == (str(entry.pk), name)


@pytest.mark.parametrize("name", ["alice session", "alice user"])
def test_bob_gets_404_for_alices_entries(other_api, everyones_memory, name):
    response = other_api.get(detail(everyones_memory[name].pk))

    assert response.status_code == 404
    assert response.json()["type"] == "client_error"
    assert "tea" not in response.content.decode()


@pytest.mark.parametrize("name", ["alice session", "alice user", "bob user"])
def test_staff_read_any_entry(staff_api, everyones_memory, name):
    response = staff_api.get(detail(everyones_memory[name].pk))

    assert response.status_code == 200
    assert response.json()["key"] == name


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_unknown_entry_is_a_404(api, bad_id):
    response = api.get(detail(bad_id))

    assert response.status_code == 404
    assert response.json()["type"] == "client_error"


# --- GET /memory/resolve/ -------------------------------------------------------


def _resolve(client, key: str, session_id: Any):
    return client.get(RESOLVE, {"key": key, "session": str(session_id)})


def test_resolve_reads_the_most_specific_scope_first(api, owner, session):
    for scope in ("global", "agent", "user", "session"):
        entry_in(scope, owner=owner, session=session, key="colour", value=f"{scope} green")

    seen = []
    for _ in range(4):
        response = _resolve(api, "colour", session.pk)
        assert response.status_code == 200, response.content
        body = response.json()
        seen.append((body["scope"], body["value"]))
        # With the most specific entry gone, the next scope shows.
        MemoryEntry.objects.get(pk=body["id"]).delete()

    assert seen == [
        ("session", "session green"),
        ("user", "user green"),
        ("agent", "agent green"),
        ("global", "global green"),
    ]
    assert _resolve(api, "colour", session.pk).status_code == 404


def test_resolve_ignores_other_owners_entries(api, other_user, session, bob_session):
    MemoryEntryFactory(key="colour", value="bob's session", session=bob_session)
    MemoryEntryFactory(key="colour", value="bob's", user_scoped=True, user=other_user)
    MemoryEntryFactory(key="colour", value="researcher's", agent_scoped=True, agent="researcher")
    MemoryEntryFactory(key="colour", value="everyone's", global_scoped=True)

    response = _resolve(api, "colour", session.pk)

    assert response.status_code == 200
    assert (response.json()["scope"], response.json()["value"]) == ("global", "everyone's")


def test_resolve_skips_expired_entries(api, owner, session):
    past = timezone.now() - dt.timedelta(minutes=5)
    future = timezone.now() + dt.timedelta(days=1)
    MemoryEntryFactory(key="colour", value="old", session=session, expires_at=past)
    entry_in("user", owner=owner, session=session, key="colour", value="gone", expires_at=past)
    agents = MemoryEntryFactory(key="colour", value="agent's", agent_scoped=True, expires_at=future)

    response = _resolve(api, "colour", session.pk)

    assert response.status_code == 200
    assert (response.json()["id"], response.json()["value"]) == (str(agents.pk), "agent's")

    MemoryEntryFactory(key="only expired", session=session, expires_at=past)
    assert _resolve(api, "only expired", session.pk).status_code == 404


def test_resolve_without_an_entry_is_a_404(api, session):
    response = _resolve(api, "colour", session.pk)

    assert response.status_code == 404
    assert response.json()["type"] == "client_error"
    assert errors(response)[0][0] == "not_found"


@pytest.mark.parametrize(
    ("query", "attrs"),
    [
        ({"session": "SESSION"}, ["key"]),
        ({"key": "   ", "session": "SESSION"}, ["key"]),
        ({"key": "k" * 201, "session": "SESSION"}, ["key"]),
        ({"key": "colour"}, ["session"]),
        ({"key": "colour", "session": "not-a-session"}, ["session"]),
        ({}, ["key", "session"]),
    ],
)
def test_resolve_bad_query_is_a_400(api, session, query, attrs):
    query = {k: str(session.pk) if v == "SESSION" else v for k, v in query.items()}

    response = api.get(RESOLVE, query)

    assert response.status_code == 400
    assert response.json()["type"] == "validation_error"
    assert sorted(attr for _, attr in errors(response)) == attrs


def test_resolve_in_bobs_session_is_a_404_for_alice(api, bob_session):
    MemoryEntryFactory(key="colour", value="bob's secret", session=bob_session)

    response = _resolve(api, "colour", bob_session.pk)

    assert response.status_code == 404
    assert "bob's secret" not in response.content.decode()


def test_resolve_in_an_unknown_session_is_a_404(api):
    MemoryEntryFactory(key="colour", global_scoped=True)

    assert _resolve(api, "colour", "00000000-0000-0000-0000-000000000000").status_code == 404


def test_staff_resolve_in_anyones_session(staff_api, session):
    MemoryEntryFactory(key="colour", value="green", session=session)

    response = _resolve(staff_api, "colour", session.pk)

    assert response.status_code == 200
    assert response.json()["value"] == "green"


# --- GET /memory/{id}/revisions/ ------------------------------------------------


def _write(owner, session, value: Any, *, over_version: int) -> MemoryEntry:
    """Alice writes her session's "colour" as the API does (0: creates it)."""
    return services.memory_store(
        key="colour",
        value=value,
        scope="session",
        session_id=session.pk,
        expected_version=over_version,
        written_by_user_id=owner.pk,
    )


def _history(owner, session) -> MemoryEntry:
    """Alice's "colour": created green (version 1), then changed to blue (2)."""
    entry = _write(owner, session, "green", over_version=0)
    _write(owner, session, "blue", over_version=1)
    return entry


def test_revisions_list_every_change_oldest_first(api, owner, session):
    entry = _history(owner, session)
    alice = {"kind": "user", "user": owner.pk, "run": None, "tool_call": None}

    assert api.delete(detail(entry.pk)).status_code == 204
    response = api.get(revisions(entry.pk))

    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(r["version"], r["value"], r["action"], r["actor"]) for r in rows] == [
        (1, "green", "created", alice),
        (2, "blue", "updated", alice),
        (3, None, "deleted", alice),
    ]
    assert {(r["entry"], r["key"], r["scope"]) for r in rows} == {
        (str(entry.pk), "colour", "session")
    }
    assert all(r["created_at"] for r in rows)


def test_revisions_of_a_live_entry(api, owner, session):
    entry = _history(owner, session)

    rows = api.get(revisions(entry.pk)).json()["results"]

    assert [(r["version"], r["action"]) for r in rows] == [(1, "created"), (2, "updated")]


def test_bob_gets_404_for_the_revisions_of_alices_entry(api, other_api, owner, session):
    entry = _history(owner, session)

    assert other_api.get(revisions(entry.pk)).status_code == 404
    api.delete(detail(entry.pk))
    # Nor once it is deleted.
    response = other_api.get(revisions(entry.pk))
    assert response.status_code == 404
    assert "green" not in response.content.decode()


def test_staff_read_the_revisions_of_anyones_deleted_entry(api, staff_api, owner, session):
    entry = _history(owner, session)
    api.delete(detail(entry.pk))

    rows = staff_api.get(revisions(entry.pk)).json()["results"]

    assert [r["action"] for r in rows] == ["created", "updated", "deleted"]


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_revisions_of_an_unknown_entry_are_a_404(api, bad_id):
    response = api.get(revisions(bad_id))

    assert response.status_code == 404
    assert response.json()["type"] == "client_error"


def test_revisions_are_paged_by_cursor(api, owner, session):
    entry = _history(owner, session)
    for version, value in enumerate(["red", "amber", "violet"], start=2):
        _write(owner, session, value, over_version=version)

    first = api.get(revisions(entry.pk), {"page_size": 2}).json()
    rows = walk(api, f"{revisions(entry.pk)}?page_size=2")

    assert [r["version"] for r in first["results"]] == [1, 2]
    assert first["next"] is not None
    assert [(r["version"], r["value"]) for r in rows] == [
        (1, "green"),
        (2, "blue"),
        (3, "red"),
        (4, "amber"),
        (5, "violet"),
    ]


# --- written by a run -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_entry_written_by_a_run_names_the_run_and_its_tool_call(inline_runtime, api, owner):
    session = rt.create_session(owner=owner)
    rt.run("assistant", "remember my favourite colour is green", session=session.id)
    run = Run.objects.get(session_id=session.id)
    call = ToolCall.objects.get(run=run, name="memory_store")

    response = api.get(MEMORY, {"session": str(session.id)})

    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert (row["key"], row["value"], row["scope"], row["version"]) == (
        "favourite colour",
        "green",
        "session",
        1,
    )
    assert row["written_by"]["kind"] == "run"
    assert (row["written_by"]["run"], row["written_by"]["tool_call"]) == (str(run.pk), str(call.pk))
    (revision,) = api.get(revisions(row["id"])).json()["results"]
    assert revision["actor"]["kind"] == "run"
    assert (revision["actor"]["run"], revision["actor"]["tool_call"]) == (
        str(run.pk),
        str(call.pk),
    )
    resolved = api.get(RESOLVE, {"key": "favourite colour", "session": str(session.id)})
    assert resolved.json()["id"] == row["id"]


@pytest.mark.parametrize("changes", [0, 1, 8])
def test_revisions_query_count_does_not_grow_with_rows(
    api, owner, session, django_assert_num_queries, changes
):
    entry = _history(owner, session)
    for version in range(2, 2 + changes):
        _write(owner, session, f"shade {version}", over_version=version)
    api.get(MEMORY)  # the first request of a token notes its use; not measured

    # One query authenticates the token, one reads the page.
    with django_assert_num_queries(2):
        response = api.get(revisions(entry.pk))

    assert len(response.json()["results"]) == 2 + changes
