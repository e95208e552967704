"""GET /api/v1/memory/search/?q=&session=: what a run in the session finds about
something, best first, within the caller's own memory."""

from __future__ import annotations

import pytest

from goaai.runtime.vocabulary import MemoryScope
from memory_app.models import MemoryEntry
from memory_app.services import memory_store
from tests.factories import SessionFactory

SEARCH = "/api/v1/memory/search/"


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


def _fact(user, key: str, value: object) -> None:
    memory_store(key=key, value=value, scope=MemoryScope.USER, user_id=user.pk)


def test_search_finds_the_facts_a_run_would_read_best_first(api, owner, session):
    _fact(owner, "pet name", "a dog called Rex")
    _fact(owner, "walks", "the dogs go out at noon, every day of the week")
    _fact(owner, "car", "a red Fiat")
    memory_store(key="car", value="a dog cage", scope=MemoryScope.SESSION, session_id=session.id)

    response = api.get(SEARCH, {"q": "my dog", "session": str(session.pk)})

    assert response.status_code == 200
    body = response.json()
    assert body["query"] == "my dog"
    # The session's car hides the user's; the long text about walks comes last.
    assert {(r["key"], r["value"], r["scope"]) for r in body["results"]} == {
        ("pet name", "a dog called Rex", "user"),
        ("walks", "the dogs go out at noon, every day of the week", "user"),
        ("car", "a dog cage", "session"),
    }
    assert body["results"][-1]["key"] == "walks"
    assert (
        len(api.get(SEARCH, {"q": "dog", "session": str(session.pk), "limit": 1}).json()["results"])
        == 1
    )


def test_search_never_shows_another_users_facts_or_sessions(api, other_api, owner, other_user):
    _fact(other_user, "pet name", "a cat called Tom")
    bobs = SessionFactory(owner=other_user)
    mine = SessionFactory(owner=owner)

    assert api.get(SEARCH, {"q": "cat", "session": str(mine.pk)}).json()["results"] == []
    assert api.get(SEARCH, {"q": "cat", "session": str(bobs.pk)}).status_code == 404
    assert other_api.get(SEARCH, {"q": "cat", "session": str(bobs.pk)}).json()["results"] == [
        {"key": "pet name", "value": "a cat called Tom", "scope": "user"}
    ]


@pytest.mark.parametrize(
    ("params", "attr"),
    [
        ({"q": ""}, "q"),
        ({"q": "a\x00b"}, "q"),
        ({"q": "x" * 1001}, "q"),
        ({"q": "dog", "session": "nope"}, "session"),
        ({"q": "dog", "limit": "0"}, "limit"),
        ({"q": "dog", "limit": "51"}, "limit"),
        ({"q": "dog", "limit": "-1"}, "limit"),
        # A digit to Python's str.isdigit, not a number to int().
        ({"q": "dog", "limit": "²"}, "limit"),
        ({"q": "dog", "limit": "9" * 40}, "limit"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(api, session, params, attr):
    response = api.get(SEARCH, {"session": str(session.pk), **params})

    assert response.status_code == 400
    assert [e["attr"] for e in response.json()["errors"]] == [attr]


def test_search_costs_the_same_queries_for_any_number_of_facts(
    api, owner, session, django_assert_num_queries
):
    api.get(SEARCH, {"q": "note", "session": str(session.pk)})
    for total in (0, 1, 40):
        MemoryEntry.objects.filter(user=owner).delete()
        for n in range(total):
            _fact(owner, f"note {n}", f"entry {n}")

        # The same few statements whatever the number of facts.
        with django_assert_num_queries(3):
            response = api.get(SEARCH, {"q": "note entry", "session": str(session.pk)})

        assert len(response.json()["results"]) == min(total, 10)
