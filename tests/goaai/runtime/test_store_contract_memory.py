"""What every store promises about ranked memory, checked against both (the harness
of test_store_contract.py): the facts a run starts with are those most relevant to
its input, within its agent's memory budget, and a search finds what the session
reads. The database store ranks with the database's full-text search, the in-memory
store with BM25 in Python: the cases here are ones where any sound ranking agrees."""

from __future__ import annotations

from dataclasses import replace

import pytest

from goaai.runtime.agents import ASSISTANT
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.memory_ranking import fact_tokens
from tests.goaai.runtime import test_store_contract as contract
from tests.goaai.runtime.test_store_contract import LEASE, Harness


@pytest.fixture(
    params=["memory", pytest.param("orm", marks=pytest.mark.django_db(transaction=True))]
)
def h(request: pytest.FixtureRequest) -> Harness:
    """Each store, as the contract suite builds it."""
    if request.param == "memory":
        return contract._memory_harness()
    return contract._orm_harness()


def _notes(h: Harness, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        h.store.store_memory(key=f"note {n}", value=f"entry {n}", scope="user", user_id=h.alice)


def _claim(h: Harness, prompt: str, **extra):
    session = extra.pop("session", None) or h.session()
    run = h.run(session, prompt, **extra)
    context = h.store.claim_run(run.id, owner="w1", lease_seconds=LEASE)
    assert context is not None
    return context


def test_a_run_is_told_first_the_facts_its_input_is_about(h):
    _notes(h, 30)
    h.store.store_memory(key="pet name", value="a dog called Rex", scope="user", user_id=h.alice)
    _notes(h, 30, start=30)

    context = _claim(h, "what is my pet's name?")

    assert context.memory[0] == ("user", "pet name", "a dog called Rex")
    # Then the newest of the rest, within the default budget of 1000 tokens.
    assert context.memory[1:4] == tuple(("user", f"note {n}", f"entry {n}") for n in (59, 58, 57))
    assert len(context.memory) == 61


def test_a_run_is_told_no_more_than_its_agents_memory_budget(h):
    _notes(h, 60)
    small = replace(ASSISTANT, conversation=ConversationSettings(memory_tokens=40))

    context = _claim(h, "hello", definition=small.as_dict())

    assert 0 < sum(fact_tokens(fact) for fact in context.memory) <= 40
    assert context.memory[0] == ("user", "note 59", "entry 59")


def test_a_run_with_no_memory_budget_is_told_nothing(h):
    _notes(h, 3)
    none = replace(ASSISTANT, conversation=ConversationSettings(memory_tokens=0))

    assert _claim(h, "note", definition=none.as_dict()).memory == ()


def test_a_run_picked_up_after_its_first_turn_replays_instead_of_being_told_again(h):
    _notes(h, 3)
    run = h.claimed(prompt="note 1")
    h.turn(run.id)
    h.lose_worker(run.id)

    context = h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE)

    assert context is not None
    assert (len(context.turns), context.memory) == (1, ())


def test_a_search_finds_what_the_session_reads_about_it(h):
    session = h.session()
    h.store.store_memory(key="pet", value="a dog called Rex", scope="user", user_id=h.alice)
    h.store.store_memory(key="walks", value="the dog walks at noon", scope="user", user_id=h.alice)
    h.store.store_memory(key="walks", value="at six", scope="session", session_id=session.id)
    h.store.store_memory(key="dog", value="a poodle", scope="user", user_id=h.bob)
    h.store.store_memory(key="guard", value="dogs welcome", scope="agent", agent="assistant")
    h.store.store_memory(key="car", value="a Fiat with a dog", scope="user", user_id=h.alice)
    h.store.delete_memory(key="car", scope="user", user_id=h.alice)

    found = h.store.search_memory(session_id=session.id, query="Tell me about the dog!")

    # The session's "walks" hides the user's (whose dog no longer counts), Bob's
    # dog is his own, the car is forgotten.
    assert set(found) == {("user", "pet", "a dog called Rex"), ("agent", "guard", "dogs welcome")}
    assert h.store.search_memory(session_id=session.id, query="noon six", limit=1) == [
        ("session", "walks", "at six")
    ]
    assert h.store.search_memory(session_id=session.id, query="what is it?") == []


def test_a_search_returns_at_most_its_limit_best_first(h):
    session = h.session()
    _notes(h, 10)
    h.store.store_memory(key="note 3", value="entry 3 of the garden", scope="user", user_id=h.alice)

    found = h.store.search_memory(session_id=session.id, query="garden entry", limit=3)

    assert len(found) == 3
    assert found[0] == ("user", "note 3", "entry 3 of the garden")
