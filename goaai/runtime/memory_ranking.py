"""Which remembered facts a run is told: those most relevant to its message first,
then the most recently updated, within the agent's memory budget.

Both stores choose a run's memory with these rules (the database store ranks with
the database's full-text search, the in-memory store with :func:`bm25_rank`), and
the turn loop writes the chosen facts with :func:`fact_line`. A fact is
``(scope, key, value)``.

Token counts are estimates: a fact costs ``ceil(characters / 4)`` tokens of the line
that carries it (:func:`fact_tokens`), the providers' own rule of thumb for English
text. The budget is ``memory_tokens`` of the agent's conversation settings
(:class:`~goaai.runtime.conversation.ConversationSettings`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from goaai.runtime.conversation import ConversationSettings

Fact = tuple[str, str, Any]

# The shortest line a fact can have ("- k: v (user)" and its newline) costs this many
# tokens: a budget with less left holds no more facts.
MIN_FACT_TOKENS = 4
# A short fact's line ("- favourite colour: green (user)") costs about this many
# tokens: a budget of n tokens tells a run at most n // SHORT_FACT_TOKENS facts, and
# no ranking reads more candidates than that (125 for the default budget).
SHORT_FACT_TOKENS = 8
# At most this many words of a message are looked up (a pasted page is not a query).
MAX_QUERY_TERMS = 32

# Words that say nothing about which fact is meant ("what is my ..."): left out of
# every query, so that a message made only of them matches nothing.
STOPWORDS = frozenset(
    word
    for line in (
        "a about above after again against all also am an and any are as at be because",
        "been before being below between both but by can could did do does doing down",
        "during each few for from further had has have having he her here hers herself",
        "him himself his how i if in into is it its itself just know knew let me more",
        "most my myself no nor not now of off on once only or other our ours ourselves",
        "out over own please recall remember same she should so some such tell than that",
        "the their theirs them themselves then there these they this those through to",
        "too under until up us very was we were what when where which while who whom why",
        "will with would you your yours yourself yourselves",
    )
    for word in line.split()
)

_WORD = re.compile(r"[^\W_]+")


def estimate_tokens(text: str) -> int:
    """About four characters a token, the providers' rule of thumb."""
    return math.ceil(len(text) / 4)


def fact_line(scope: str, key: str, value: Any) -> str:
    """The line of the memory message that tells the model one fact."""
    return f"- {key}: {value} ({scope})"


def fact_tokens(fact: Fact) -> int:
    """What a fact costs in the prompt: its line and the newline after it."""
    return estimate_tokens(fact_line(*fact) + "\n")


def search_terms(text: str) -> tuple[str, ...]:
    """The words of ``text`` a search looks for: lowercased letters and digits, no
    :data:`STOPWORDS`, each once, at most :data:`MAX_QUERY_TERMS`."""
    terms: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if word not in STOPWORDS:
            terms.setdefault(word, None)
    return tuple(terms)[:MAX_QUERY_TERMS]


def fact_text(key: str, value: Any) -> str:
    """The text a fact is found by: its key, then its value's words (strings and
    numbers, and the keys of objects, however nested)."""
    parts = [key]
    _collect_text(value, parts)
    return " ".join(parts)


def _collect_text(value: Any, parts: list[str]) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str | int | float):
        parts.append(str(value))
    elif isinstance(value, Mapping):
        for name, item in value.items():
            parts.append(str(name))
            _collect_text(item, parts)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_text(item, parts)


def memory_budget(definition: Mapping[str, Any] | None) -> int:
    """The memory budget, in tokens, of a run that recorded ``definition`` (its
    agent's :meth:`~goaai.runtime.agents.Agent.as_dict`); the default for a run that
    recorded none."""
    conversation = (definition or {}).get("conversation") or {}
    return ConversationSettings.from_dict(conversation).memory_tokens


def candidate_limit(budget: int) -> int:
    """How many facts a run with ``budget`` tokens is told at most, and so how many
    candidates each ranking reads."""
    return max(1, budget // SHORT_FACT_TOKENS)


def within_budget(facts: Iterable[Fact], budget: int) -> tuple[Fact, ...]:
    """``facts``, in their order, as long as they fit in ``budget`` tokens (and at
    most :func:`candidate_limit` of them): one that does not fit is left out and
    smaller ones after it may still go in."""
    chosen: list[Fact] = []
    left = budget
    most = candidate_limit(budget)
    for fact in facts:
        if len(chosen) == most:
            break
        cost = fact_tokens(fact)
        if cost <= left:
            chosen.append(fact)
            left -= cost
            if left < MIN_FACT_TOKENS:
                break
    return tuple(chosen)


def choose_facts(relevant: Iterable[Fact], recent: Iterable[Fact], budget: int) -> tuple[Fact, ...]:
    """What a run is told: the ``relevant`` facts in their rank order, then the
    ``recent`` ones (most recently updated first) that are not among them, within
    ``budget`` tokens. Each key appears once."""
    seen: set[str] = set()
    ordered: list[Fact] = []
    for fact in (*relevant, *recent):
        if fact[1] not in seen:
            seen.add(fact[1])
            ordered.append(fact)
    return within_budget(ordered, budget)


def fuse(rankings: Sequence[Sequence[str]], k: int = 60) -> list[str]:
    """Reciprocal rank fusion: keys ranked by the sum of ``1 / (k + rank)`` over the
    rankings they appear in (full-text and vector similarity), best first; ties keep
    the order of the first ranking."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    order = {key: index for index, key in enumerate(dict.fromkeys(k for r in rankings for k in r))}
    return sorted(scores, key=lambda key: (-scores[key], order[key]))


def stem(word: str) -> str:
    """A light English stemmer for the in-memory scorer, plurals only ("colours" and
    "colour", "parties" and "party")."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        return word[:-1]
    return word


def bm25_rank(terms: Sequence[str], documents: Sequence[str]) -> list[tuple[int, float]]:
    """The documents that contain any of ``terms`` (as :func:`stem` reduces words),
    as (index, score), best first: Okapi BM25 (k1 = 1.2, b = 0.75) with the
    document frequencies of ``documents`` themselves. The in-memory store's ranking;
    the database's full-text ranking (FTS5's bm25, PostgreSQL's ts_rank) has the
    same shape: matching words, rarer words weighing more, shorter texts preferred."""
    wanted = {stem(term) for term in terms}
    if not wanted or not documents:
        return []
    bags = [[stem(word) for word in _WORD.findall(text.lower())] for text in documents]
    average = sum(len(bag) for bag in bags) / len(bags) or 1.0
    frequency = {term: sum(1 for bag in bags if term in bag) for term in wanted}
    scored: list[tuple[int, float]] = []
    for index, bag in enumerate(bags):
        score = 0.0
        for term in wanted:
            count = bag.count(term)
            if not count:
                continue
            idf = math.log(1 + (len(bags) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * count * 2.2 / (count + 1.2 * (0.25 + 0.75 * len(bag) / average))
        if score > 0:
            scored.append((index, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored
