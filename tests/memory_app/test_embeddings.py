"""Memory ranked by meaning: an embedding model behind a model profile, vectors kept
with the entries (sqlite-vec on SQLite, pgvector on PostgreSQL), fused with the
full-text ranking.

The embedding model is a real HTTP server on 127.0.0.1 speaking OpenAI's
``/v1/embeddings``, whose vectors are hashed bags of words with a few synonyms
folded together ("puppy" and "hound" are "dog"), so that similarity means
something and is the same on every run; the client is the official SDK."""

from __future__ import annotations

import hashlib
import re
import struct
from typing import Any

import pytest
from django.db import connection

from goaai import sql
from goaai.runtime import rt
from goaai.runtime.config import RuntimeConfig
from goaai.runtime.embeddings import EmbeddingError, OpenAIEmbedder, embedder_for, packed
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.memory_ranking import STOPWORDS
from goaai.runtime.vocabulary import MemoryScope
from memory_app import vectors
from memory_app.models import MemoryEmbedding, MemoryEntry
from memory_app.selectors import memory_context, memory_search
from memory_app.services import memory_delete, memory_store
from runs_app.models import Turn
from tests.factories import SessionFactory
from tests.goaai.runtime.models.fake_providers import (
    FakeProviderServer,
    JsonResponse,
    RecordedRequest,
    Response,
)

EMBEDDINGS_PATH = "/v1/embeddings"
DIMENSIONS = 64
SYNONYMS = {"puppy": "dog", "hound": "dog", "canine": "dog", "dogs": "dog", "automobile": "car"}


def bag_of_words(text: str) -> list[float]:
    """A deterministic vector: each meaningful word (synonyms folded) adds one to the
    dimension its hash names."""
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in STOPWORDS:
            continue
        word = SYNONYMS.get(word, word)
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMENSIONS] += 1.0
    return vector


class EmbeddingServer(FakeProviderServer):
    """Answers ``POST /v1/embeddings`` as OpenAI does; ``failing`` makes it a 500."""

    failing = False

    def _record(self, request: RecordedRequest) -> Response | None:
        super()._record(request)
        if request.path != EMBEDDINGS_PATH:
            return None
        if self.failing:
            return JsonResponse(500, {"error": {"message": "the embedding server is down"}})
        texts = request.body["input"]
        return JsonResponse(
            200,
            {
                "object": "list",
                "model": request.body["model"],
                "data": [
                    {"object": "embedding", "index": i, "embedding": bag_of_words(text)}
                    for i, text in enumerate(texts)
                ],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    def inputs(self) -> list[str]:
        return [text for body in self.bodies(EMBEDDINGS_PATH) for text in body["input"]]


@pytest.fixture
def server(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("GOAAI_TEST_EMBEDDINGS_KEY", "local-key")
    running = EmbeddingServer().start()
    yield running
    running.stop()


def _profiles(server: EmbeddingServer) -> dict[str, Any]:
    return {
        "local": {
            "kind": "openai",
            "base_url": server.openai_base_url,
            "api_key_env": "GOAAI_TEST_EMBEDDINGS_KEY",
            "timeout_seconds": 5,
            "connect_timeout_seconds": 2,
        }
    }


@pytest.fixture
def embeddings(server, settings):
    """goaai configured with the local server's embedding model."""
    settings.GOAAI_MODEL_PROFILES = _profiles(server)
    settings.GOAAI_MEMORY_EMBEDDINGS = "local:hash-embed"
    return server


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


def _fact(owner, key: str, value: Any) -> MemoryEntry:
    return memory_store(key=key, value=value, scope=MemoryScope.USER, user_id=owner.pk)


def _vector(entry: MemoryEntry) -> tuple[str, list[float]]:
    embedding = MemoryEmbedding.objects.filter(entry_id=entry.pk).values_list("model", flat=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT vector FROM memory_app_memoryembedding WHERE entry_id = %s",
            [sql._prep(MemoryEmbedding, "entry_id", entry.pk)],
        )
        raw = cursor.fetchone()[0]
    if isinstance(raw, bytes | memoryview):
        floats = list(struct.unpack(f"<{len(bytes(raw)) // 4}f", bytes(raw)))
    else:
        floats = list(raw)
    return embedding.get(), floats


def test_a_fact_is_embedded_by_its_key_and_value_when_it_is_written(embeddings, session, owner):
    entry = _fact(owner, "pet name", {"kind": "dog", "name": "Rex"})

    assert embeddings.inputs() == ["pet name kind dog name Rex"]
    (request,) = [r for r in embeddings.requests if r.path == EMBEDDINGS_PATH]
    assert request.body["model"] == "hash-embed"
    model, vector = _vector(entry)
    assert model == "local:hash-embed"
    assert sum(x * x for x in vector) == pytest.approx(1.0, abs=1e-5)

    memory_store(key="pet name", value="a cat", scope=MemoryScope.USER, user_id=owner.pk)
    assert _vector(entry)[1] != vector
    memory_delete(key="pet name", scope=MemoryScope.USER, user_id=owner.pk)
    assert not MemoryEmbedding.objects.filter(entry_id=entry.pk).exists()


def test_a_message_in_other_words_finds_the_fact_it_means(embeddings, session, owner):
    _fact(owner, "pet name", "a dog called Rex")
    for n in range(30):
        _fact(owner, f"note {n}", f"entry {n}")

    assert memory_search(session_id=session.id, query="my puppy")[0] == (
        "user",
        "pet name",
        "a dog called Rex",
    )
    told = memory_context(session_id=session.id, query="how is the hound?", budget=1000)
    assert told[0] == ("user", "pet name", "a dog called Rex")
    assert embeddings.inputs()[-2:] == ["my puppy", "how is the hound?"]


def test_without_embeddings_the_same_message_finds_nothing(server, session, owner, settings):
    _fact(owner, "pet name", "a dog called Rex")

    assert memory_search(session_id=session.id, query="my puppy") == []
    assert server.inputs() == []


def test_both_rankings_count_words_and_meaning_fused(embeddings, session, owner):
    _fact(owner, "car", "a red automobile")
    _fact(owner, "pet name", "a dog called Rex")
    _fact(owner, "dog walker", "Sam walks the hound on Mondays")

    found = memory_search(session_id=session.id, query="puppy walker", limit=3)

    # Its words find the walker, its meaning finds both dogs: the walker first.
    assert [key for _, key, _ in found] == ["dog walker", "pet name"]


@pytest.mark.django_db(transaction=True)
def test_a_run_asking_in_other_words_is_told_and_finds_the_fact(embeddings, inline_runtime, owner):
    _fact(owner, "pet name", "a dog called Rex")
    for n in range(20):
        _fact(owner, f"note {n}", f"entry {n}")
    chat = rt.create_session(owner=owner)

    info = rt.run("assistant", "what do you know about my puppy?", session=chat.id)

    assert info.output == "Here is what I remember about your puppy: pet name: a dog called Rex."
    first = Turn.objects.get(run_id=info.id, index=0).request_messages
    (told,) = [m["content"] for m in first if m["content"].startswith("What you remember")]
    assert told.splitlines()[1] == "- pet name: a dog called Rex (user)"


def test_an_embedding_server_that_fails_leaves_ranking_to_the_words(
    embeddings, session, owner, caplog
):
    embeddings.failing = True
    entry = _fact(owner, "pet name", "a dog called Rex")

    assert not MemoryEmbedding.objects.filter(entry_id=entry.pk).exists()
    assert memory_search(session_id=session.id, query="dog") == [
        ("user", "pet name", "a dog called Rex")
    ]
    assert memory_search(session_id=session.id, query="puppy") == []
    assert "stored without its embedding" in caplog.text
    assert "full text only" in caplog.text


def test_a_changed_fact_whose_embedding_failed_loses_its_old_vector(embeddings, session, owner):
    entry = _fact(owner, "pet name", "a dog called Rex")
    embeddings.failing = True

    _fact(owner, "pet name", "a cat called Tom")

    assert not MemoryEmbedding.objects.filter(entry_id=entry.pk).exists()


def test_vectors_of_another_model_are_not_compared(embeddings, session, owner, settings):
    _fact(owner, "pet name", "a dog called Rex")
    settings.GOAAI_MEMORY_EMBEDDINGS = "local:another-model"

    assert memory_search(session_id=session.id, query="puppy") == []


def test_both_stores_rank_by_meaning_alike(embeddings, session, owner):
    store = InMemoryRunStore(users={owner.pk: owner.username}, embedder=vectors.embedder())
    in_memory = store.create_session(owner_id=owner.pk, agent="assistant", title="", metadata={})
    facts = [("pet name", "a dog called Rex"), ("car", "a red Fiat"), ("walker", "Sam, Mondays")]
    for key, value in facts:
        _fact(owner, key, value)
        store.store_memory(key=key, value=value, scope="user", user_id=owner.pk)

    for query in ("my puppy", "the automobile", "who walks on mondays"):
        assert store.search_memory(session_id=in_memory.id, query=query, limit=2) == (
            memory_search(session_id=session.id, query=query, limit=2)
        )


def test_an_embeddings_setting_must_name_an_openai_profile():
    config = RuntimeConfig.from_values(profiles={"local": {"kind": "openai"}})
    assert embedder_for(config) is None
    with pytest.raises(ValueError, match="'<profile>:<model>'"):
        RuntimeConfig.from_values(memory_embeddings="local")
    with pytest.raises(ValueError, match="No model profile 'nowhere'"):
        RuntimeConfig.from_values(memory_embeddings="nowhere:model")
    with pytest.raises(ValueError, match="kind 'anthropic'"):
        RuntimeConfig.from_values(memory_embeddings="anthropic:model")


def test_an_answer_with_the_wrong_number_of_vectors_is_an_error(server):
    class Short(EmbeddingServer):
        def _record(self, request: RecordedRequest) -> Response | None:
            FakeProviderServer._record(self, request)
            return JsonResponse(200, {"object": "list", "model": "m", "data": [], "usage": {}})

    short = Short().start()
    try:
        embedder = OpenAIEmbedder(
            RuntimeConfig.from_values(profiles=_profiles(short)).profile("local"), "m"
        )
        with pytest.raises(EmbeddingError, match="0 vectors for 1 texts"):
            embedder.embed(["hello"])
    finally:
        short.stop()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's vector functions")
@pytest.mark.django_db
def test_sqlite_compares_vectors_with_sqlite_vec_and_the_fallback_agrees():
    a, b = packed([1.0, 0.0, 0.0]), packed([0.6, 0.8, 0.0])
    with connection.cursor() as cursor:
        cursor.execute("SELECT vec_distance_cosine(%s, %s)", [a, b])
        distance = cursor.fetchone()[0]

    assert vectors.vector_search_engine().startswith("sqlite-vec")
    assert distance == pytest.approx(0.4, abs=1e-6)
    assert vectors._cosine_distance(a, b) == pytest.approx(distance, abs=1e-6)


@pytest.mark.postgres
def test_postgres_ranks_alike_with_pgvector_and_without(embeddings, session, owner, monkeypatch):
    _fact(owner, "pet name", "a dog called Rex")
    _fact(owner, "car", "a red automobile")
    _fact(owner, "walker", "Sam walks the hound")

    # pgvector where the server has it (this suite's setup installs it where Debian
    # packages it), the arrays' dot product otherwise: the same order.
    with_extension = memory_search(session_id=session.id, query="puppy", limit=3)
    monkeypatch.setattr(sql, "_has_pgvector", lambda database: False)
    from_arrays = memory_search(session_id=session.id, query="puppy", limit=3)

    # The walker's text has fewer other words than the pet's: nearer the "dog".
    assert [key for _, key, _ in from_arrays] == ["walker", "pet name"]
    assert with_extension == from_arrays
