"""Which remembered facts a run is told, and the scripted model's memory search, on
the in-memory store with no framework under it. (Both stores choose the same way:
tests/goaai/runtime/test_store_contract_memory.py checks them side by side.)"""

from __future__ import annotations

from dataclasses import replace

from goaai.runtime.agents import ASSISTANT
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import memory_message
from goaai.runtime.memory_ranking import (
    bm25_rank,
    choose_facts,
    fact_line,
    fact_text,
    fact_tokens,
    fuse,
    memory_budget,
    search_terms,
    within_budget,
)
from goaai.runtime.vocabulary import RunStatus
from tests.runtime_core.conftest import ALICE, BOB, Engine


def test_a_query_is_its_meaningful_words_each_once():
    assert search_terms("What is my favourite colour? My FAVOURITE, I said!") == (
        "favourite",
        "colour",
        "said",
    )
    assert search_terms("what do you know about it?") == ()


def test_a_fact_is_found_by_its_key_and_every_word_of_its_value():
    value = {"city": "Paris", "floors": [3, {"note": "lift"}], "ok": True}
    assert fact_text("home", value) == "home city Paris floors 3 note lift ok"


def test_the_budget_counts_each_line_at_four_characters_a_token():
    fact = ("user", "favourite colour", "green")
    line = fact_line(*fact)
    assert line == "- favourite colour: green (user)"
    assert fact_tokens(fact) == 9  # 33 characters and a newline
    big = ("user", "essay", "x" * 400)
    small = ("user", "pet", "cat")

    assert within_budget([fact, big, small], 20) == (fact, small)
    assert within_budget([fact], 8) == ()


def test_relevant_facts_come_first_then_the_newest_each_key_once():
    relevant = [("user", "pet", "dog")]
    recent = [("session", "tea", "green"), ("user", "pet", "dog"), ("user", "car", "red")]

    assert choose_facts(relevant, recent, 1000) == (
        ("user", "pet", "dog"),
        ("session", "tea", "green"),
        ("user", "car", "red"),
    )


def test_fusion_favours_what_both_rankings_put_high():
    assert fuse([["a", "b", "c"], ["b", "d", "a"]]) == ["b", "a", "d", "c"]


def test_bm25_prefers_the_rarer_word_and_the_shorter_text():
    documents = [
        "favourite colour green",
        "favourite food pasta",
        "favourite colours of the sunset over the bay in winter",
        "pet dog",
    ]
    ranked = [index for index, _ in bm25_rank(["favourite", "colour"], documents)]

    assert ranked == [0, 2, 1]
    assert bm25_rank(["dogs"], documents)[0][0] == 3


def test_the_budget_is_the_one_the_run_recorded():
    definition = replace(ASSISTANT, conversation=ConversationSettings(memory_tokens=120)).as_dict()

    assert memory_budget(definition) == 120
    assert memory_budget(None) == ConversationSettings().memory_tokens


def _facts(engine: Engine, count: int, owner: int = ALICE) -> None:
    for n in range(count):
        engine.store.store_memory(
            key=f"fact {n}", value=f"note number {n}", scope="user", user_id=owner
        )


def test_a_run_is_told_the_facts_its_message_is_about_first(engine):
    _facts(engine, 40)
    engine.store.store_memory(key="pet name", value="a dog called Rex", scope="user", user_id=ALICE)
    _facts(engine, 40)
    session = engine.session()

    run = engine.run("assistant", "what is my pet's name?", session=session.id)

    assert run.status == RunStatus.COMPLETED
    first = engine.store.turns(run.id)[0].request_messages
    memory = next(m for m in first if m.content.startswith("What you remember"))
    assert memory.content.splitlines()[1] == "- pet name: a dog called Rex (user)"


def test_a_run_is_told_no_more_than_its_agents_memory_budget(engine):
    small = replace(ASSISTANT, conversation=ConversationSettings(memory_tokens=30))
    _facts(engine, 50)
    session = engine.session()
    run = engine.store.create_run(
        session_id=session.id,
        agent="assistant",
        input="hello",
        labels={},
        metadata={},
        policy={},
        definition=small.as_dict(),
    )

    context = engine.store.claim_run(run.id, owner="w1", lease_seconds=60)

    assert context is not None
    assert 0 < sum(fact_tokens(fact) for fact in context.memory) <= 30
    # Nothing matched "hello": the newest facts.
    assert context.memory[0] == ("user", "fact 49", "note number 49")


def test_the_memory_message_lists_the_chosen_facts_in_their_order():
    message = memory_message([("user", "pet", "dog"), ("global", "motto", "be kind")])

    assert message.content == (
        "What you remember that applies here:\n- pet: dog (user)\n- motto: be kind (global)"
    )


def test_a_search_finds_facts_by_their_words_and_only_those_the_session_reads():
    store = InMemoryRunStore(users={ALICE: "alice", BOB: "bob"})
    session = store.create_session(owner_id=ALICE, agent="assistant", title="", metadata={})
    store.store_memory(key="pet", value="a dog called Rex", scope="user", user_id=ALICE)
    store.store_memory(key="pet", value="a goldfish", scope="session", session_id=session.id)
    store.store_memory(key="walks", value="the dog walks at noon", scope="user", user_id=ALICE)
    store.store_memory(key="dog", value="a poodle", scope="user", user_id=BOB)

    found = store.search_memory(session_id=session.id, query="dogs", limit=5)

    # The session's pet hides the user's, whose dog no longer counts; Bob's is his.
    assert found == [("user", "walks", "the dog walks at noon")]
    assert store.search_memory(session_id=session.id, query="goldfish") == [
        ("session", "pet", "a goldfish")
    ]


def test_what_do_you_know_about_searches_memory(engine):
    engine.store.store_memory(key="pet name", value="a dog called Rex", scope="user", user_id=ALICE)

    run = engine.run("assistant", "what do you know about my dog?")

    assert run.output == "Here is what I remember about your dog: pet name: a dog called Rex."
    assert engine.run("assistant", "what do you know about sailing?").output == (
        "I don't remember anything about sailing."
    )


def test_a_recall_that_finds_no_such_key_searches_for_its_words(engine):
    engine.store.store_memory(key="pet name", value="a dog called Rex", scope="user", user_id=ALICE)

    run = engine.run("assistant", "what is my dog's name?")

    assert [call.name for call in engine.calls(run.id)] == ["memory_recall", "memory_search"]
    assert run.output == (
        "I have nothing under your dog's name exactly, but I remember pet name: a dog called Rex."
    )
    missing = engine.run("assistant", "what is my boat?")
    assert missing.output.startswith("I don't know your boat yet.")
