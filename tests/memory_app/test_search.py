"""Memory found by what it is about, on the database: full-text ranking (SQLite's
FTS5, PostgreSQL's tsvector), the facts a run is told, and the search tool's reads.

Each test runs in both passes of the suite (SQLite, then PostgreSQL)."""

from __future__ import annotations

import random
from uuid import UUID

import pytest
from django.db import connection

from goaai.runtime import rt
from goaai.runtime.memory_ranking import estimate_tokens, fact_line, fact_tokens
from goaai.runtime.vocabulary import MemoryScope, RunStatus
from memory_app.models import MemoryEntry
from memory_app.selectors import memory_context, memory_search
from memory_app.services import memory_delete, memory_purge_expired, memory_store
from runs_app.models import ToolCall, Turn
from tests.factories import SessionFactory, UserFactory, expired_memory

ADJECTIVES = [
    "favourite",
    "oldest",
    "secret",
    "usual",
    "preferred",
    "childhood",
    "current",
    "dream",
    "lucky",
    "weekend",
    "morning",
    "evening",
    "winter",
    "summer",
    "holiday",
    "office",
    "travel",
    "birthday",
    "quiet",
    "spicy",
    "family",
    "reading",
    "running",
    "garden",
    "music",
]
NOUNS = [
    "colour",
    "book",
    "film",
    "song",
    "city",
    "food",
    "drink",
    "game",
    "sport",
    "car",
    "flower",
    "tree",
    "bird",
    "dessert",
    "cheese",
    "tea",
    "coffee",
    "painting",
    "poem",
    "recipe",
]
VALUES = [
    "green",
    "blue",
    "amber",
    "Lisbon",
    "Kyoto",
    "pasta",
    "ramen",
    "chess",
    "tennis",
    "Fiat",
    "tulip",
    "oak",
    "heron",
    "tiramisu",
    "gouda",
    "sencha",
    "espresso",
    "Monet",
    "Rilke",
    "paella",
]


def _many_facts(user_id: int, count: int) -> list[tuple[str, str]]:
    """``count`` user facts (at most 500), each key a pair of words no other key
    has, written as one batch (the search index follows inserts of any kind)."""
    facts = [
        (f"{adjective} {noun}", f"{VALUES[(a + n) % len(VALUES)]} {a * len(NOUNS) + n}")
        for a, adjective in enumerate(ADJECTIVES)
        for n, noun in enumerate(NOUNS)
    ][:count]
    MemoryEntry.objects.bulk_create(
        MemoryEntry(
            key=key, value=value, scope=MemoryScope.USER, user_id=user_id, written_by_kind="system"
        )
        for key, value in facts
    )
    return facts


def _memory_told(run_id: UUID) -> list[str]:
    """The lines of the memory message of the run's first model request."""
    first = Turn.objects.get(run_id=run_id, index=0).request_messages
    told = [m["content"] for m in first if m["content"].startswith("What you remember")]
    return told[0].splitlines()[1:] if told else []


@pytest.mark.django_db(transaction=True)
def test_asking_about_any_of_500_facts_brings_it_into_the_prompt(inline_runtime, owner):
    facts = _many_facts(owner.pk, 500)
    session = rt.create_session(owner=owner)

    for key, value in random.Random(14).sample(facts, 20):
        info = rt.run("assistant", f"what is my {key}?", session=session.id)

        assert info.status == RunStatus.COMPLETED
        told = _memory_told(info.id)
        assert told[0] == fact_line("user", key, value)
        assert sum(estimate_tokens(line + "\n") for line in told) <= 1000


@pytest.mark.django_db(transaction=True)
def test_each_of_25_facts_is_found_when_asked(inline_runtime, owner):
    facts = _many_facts(owner.pk, 25)
    session = rt.create_session(owner=owner)

    for key, value in facts:
        info = rt.run("assistant", f"what's my {key}?", session=session.id)

        assert info.output == f"Your {key} is {value}."
        assert fact_line("user", key, value) in _memory_told(info.id)


@pytest.mark.django_db(transaction=True)
def test_a_fact_asked_about_in_other_words_is_found_by_search(inline_runtime, owner):
    _many_facts(owner.pk, 100)
    memory_store(key="pet name", value="a dog called Rex", scope="user", user_id=owner.pk)
    session = rt.create_session(owner=owner)

    info = rt.run("assistant", "what do you know about my dog?", session=session.id)

    assert info.output == "Here is what I remember about your dog: pet name: a dog called Rex."
    assert _memory_told(info.id)[0] == "- pet name: a dog called Rex (user)"


@pytest.fixture
def alice_session(owner):
    return SessionFactory(owner=owner)


def _user_fact(user_id: int, key: str, value: object) -> None:
    memory_store(key=key, value=value, scope=MemoryScope.USER, user_id=user_id)


def test_words_of_the_message_rank_the_facts_it_is_about(alice_session, owner):
    _many_facts(owner.pk, 60)
    _user_fact(owner.pk, "address", {"city": "Paris", "street": "rue Cler"})

    found = memory_search(session_id=alice_session.id, query="Do I live in Paris?")

    assert found[0] == ("user", "address", {"city": "Paris", "street": "rue Cler"})
    # Stemming: "colours" finds "colour"; on SQLite accents are folded as well.
    _user_fact(owner.pk, "dessert", "crème brûlée")
    assert memory_search(session_id=alice_session.id, query="desserts")[0][1] == "dessert"
    if connection.vendor == "sqlite":
        assert memory_search(session_id=alice_session.id, query="creme")[0][1] == "dessert"
    assert memory_search(session_id=alice_session.id, query="colours", limit=1) == [
        ("user", "favourite colour", "green 0")
    ]


def test_a_message_that_matches_nothing_is_told_the_newest_facts(alice_session, owner):
    for n in range(5):
        _user_fact(owner.pk, f"note {n}", f"entry {n}")

    assert memory_search(session_id=alice_session.id, query="what about it?") == []
    assert memory_context(session_id=alice_session.id, query="hello there", budget=1000) == tuple(
        ("user", f"note {n}", f"entry {n}") for n in reversed(range(5))
    )


def test_the_facts_told_fit_the_budget_most_relevant_first(alice_session, owner):
    _many_facts(owner.pk, 200)

    facts = memory_context(
        session_id=alice_session.id, query="my lucky tea and my dream tea", budget=60
    )

    assert sum(fact_tokens(fact) for fact in facts) <= 60
    assert {facts[0][1], facts[1][1]} == {"lucky tea", "dream tea"}
    # Then the facts that share one of its words, before any newer one.
    assert all(key.split()[0] in ("lucky", "dream") or key.endswith("tea") for _, key, _ in facts)


def test_a_deleted_changed_or_expired_fact_never_comes_back(alice_session, owner):
    _user_fact(owner.pk, "pet", "a dog called Rex")
    _user_fact(owner.pk, "boat", "shaped like a dog")
    _user_fact(owner.pk, "car", "a dog-hair covered Fiat")
    expired_memory(alice_session, "walks", "the dog walks at noon")
    memory_delete(key="pet", scope=MemoryScope.USER, user_id=owner.pk)
    _user_fact(owner.pk, "car", "a clean Fiat")

    found = memory_search(session_id=alice_session.id, query="dog")
    told = memory_context(session_id=alice_session.id, query="my dog", budget=1000)

    assert found == [("user", "boat", "shaped like a dog")]
    assert {key for _, key, _ in told} == {"boat", "car"}
    assert ("user", "car", "a clean Fiat") in told
    assert memory_purge_expired() == 1
    assert memory_search(session_id=alice_session.id, query="noon") == []


def test_another_users_facts_never_appear(alice_session, owner, other_user):
    _user_fact(other_user.pk, "favourite colour", "purple")
    bobs_session = SessionFactory(owner=other_user)
    memory_store(
        key="colour notes", value="purple", scope=MemoryScope.SESSION, session_id=bobs_session.id
    )
    _user_fact(owner.pk, "favourite colour", "green")

    assert memory_search(session_id=alice_session.id, query="favourite colour purple") == [
        ("user", "favourite colour", "green")
    ]
    assert memory_context(session_id=alice_session.id, query="purple", budget=1000) == (
        ("user", "favourite colour", "green"),
    )


def test_a_more_specific_scope_hides_the_same_key_even_when_only_the_outer_one_matches(
    alice_session, owner
):
    _user_fact(owner.pk, "pet", "a dog called Rex")
    memory_store(
        key="pet", value="a goldfish", scope=MemoryScope.SESSION, session_id=alice_session.id
    )
    memory_store(key="motto", value="dogs first", scope=MemoryScope.GLOBAL)
    memory_store(key="motto", value="be kind", scope=MemoryScope.AGENT, agent="assistant")

    assert memory_search(session_id=alice_session.id, query="dog") == []
    assert set(memory_search(session_id=alice_session.id, query="goldfish kind")) == {
        ("session", "pet", "a goldfish"),
        ("agent", "motto", "be kind"),
    }


@pytest.mark.parametrize("query", ["what is my morning tea?", "nothing in common"])
def test_building_the_context_costs_the_same_queries_for_any_number_of_facts(
    alice_session, owner, django_assert_num_queries, query
):
    memory_context(session_id=alice_session.id, query=query, budget=1000)
    for total in (1, 50, 300):
        MemoryEntry.objects.filter(user=owner).delete()
        _many_facts(owner.pk, total)

        # One statement: the session's owner is known to the process by now.
        with django_assert_num_queries(1):
            facts = memory_context(session_id=alice_session.id, query=query, budget=1000)

        assert facts


def test_searching_costs_one_query_for_any_number_of_facts(
    alice_session, owner, django_assert_num_queries
):
    memory_search(session_id=alice_session.id, query="tea")
    for total in (0, 1, 300):
        MemoryEntry.objects.filter(user=owner).delete()
        _many_facts(owner.pk, total)

        with django_assert_num_queries(1):
            found = memory_search(session_id=alice_session.id, query="morning tea", limit=5)

        assert len(found) == min(total, 5) or total == 1


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite search index")
def test_the_sqlite_index_holds_one_row_per_entry_whoever_deletes_them(owner):
    def indexed() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM memory_app_memorysearch")
            rows = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM memory_app_memorysearch_fts")
            return rows, cursor.fetchone()[0]

    session = SessionFactory(owner=owner)
    _many_facts(owner.pk, 30)
    memory_store(key="pet", value="cat", scope=MemoryScope.SESSION, session_id=session.id)
    assert indexed() == (31, 31)

    session.delete()
    assert indexed() == (30, 30)
    UserFactory(username="carol")
    owner.delete()
    assert indexed() == (0, 0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        triggers = [row[0] for row in cursor.fetchall()]
    # A migration that rebuilds the entries' table drops its triggers: create them again.
    assert triggers == ["memory_search_delete", "memory_search_insert", "memory_search_update"]


@pytest.mark.django_db(transaction=True)
def test_a_recall_of_a_key_nobody_wrote_searches_before_it_says_so(inline_runtime, owner):
    memory_store(key="shoes", value="size 42, wide", scope=MemoryScope.USER, user_id=owner.pk)
    session = rt.create_session(owner=owner)

    found = rt.run("assistant", "what is my shoe size?", session=session.id)
    missing = rt.run("assistant", "what is my hat colour?", session=session.id)

    assert found.output == (
        "I have nothing under your shoe size exactly, but I remember shoes: size 42, wide."
    )
    assert missing.output == (
        'I don\'t know your hat colour yet. Tell me with "remember my hat colour is ...".'
    )
    calls = ToolCall.objects.filter(run_id=missing.id).order_by("turn__index")
    assert [(c.name, c.result) for c in calls] == [
        ("memory_recall", {"key": "hat colour", "found": False}),
        ("memory_search", {"query": "hat colour", "facts": []}),
    ]
