"""Embeddings of remembered facts and of messages, for ranking memory by meaning.

A deployment turns them on by naming an embedding model of one of its model profiles
(``RuntimeConfig.memory_embeddings = "<profile>:<model>"``, from
``GOAAI_MEMORY_EMBEDDINGS``). The profile must speak OpenAI's API: any server with
an OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, Ollama, vLLM, llama.cpp,
text-embeddings-inference ...), called through the official ``openai`` SDK with the
profile's URL, key, timeouts and headers.

Vectors are scaled to unit length, so that a dot product is their cosine
similarity.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Sequence
from typing import Protocol

import httpx2
import openai

from goaai.runtime.config import ModelProfile, RuntimeConfig
from goaai.runtime.errors import GoaaiError
from goaai.runtime.models.base import sdk_options

logger = logging.getLogger(__name__)

# A short hiccup is worth another try; a longer outage degrades ranking to full text
# (the callers log it), it never fails a write or a run.
EMBEDDING_RETRIES = 1


class EmbeddingError(GoaaiError):
    """The embedding endpoint did not answer with one vector per text."""


class Embedder(Protocol):
    """Turns texts into unit vectors. ``name`` (``<profile>:<model>``) is stored
    with each vector: vectors of different models are never compared."""

    name: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class OpenAIEmbedder:
    """An embedding model behind an OpenAI-compatible endpoint (``embeddings.create``)."""

    def __init__(self, profile: ModelProfile, model: str) -> None:
        self.name = f"{profile.name}:{model}"
        self.model = model
        self._options = sdk_options(profile) | {"max_retries": EMBEDDING_RETRIES}
        self._client: openai.OpenAI | None = None

    def _sdk(self) -> openai.OpenAI:
        # Built on first use: a profile without its key fails the embedding (and
        # ranking falls back to full text), not goaai's start.
        if self._client is None:
            try:
                self._client = openai.OpenAI(**self._options)
            except openai.OpenAIError as exc:
                raise EmbeddingError(f"The embedding model {self.name}: {exc}") from exc
        return self._client

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order; :class:`EmbeddingError` if the
        endpoint fails or answers with something else."""
        if not texts:
            return []
        try:
            response = self._sdk().embeddings.create(
                model=self.model, input=list(texts), encoding_format="float"
            )
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise EmbeddingError(f"The embedding model {self.name} failed: {exc}") from exc
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise EmbeddingError(
                f"The embedding model {self.name} answered {len(data)} vectors "
                f"for {len(texts)} texts."
            )
        return [unit(item.embedding) for item in data]


def unit(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays as it is)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm else [float(x) for x in vector]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two unit vectors (their dot product); 0 when their
    lengths differ (vectors of different models)."""
    if len(a) != len(b):
        return 0.0
    return sum(x * y for x, y in zip(a, b, strict=True))


def packed(vector: Sequence[float]) -> bytes:
    """``vector`` as little-endian float32s: how SQLite (and sqlite-vec) keeps it."""
    return struct.pack(f"<{len(vector)}f", *vector)


def unpacked(blob: bytes) -> list[float]:
    """The vector :func:`packed` made."""
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def embedder_for(config: RuntimeConfig) -> OpenAIEmbedder | None:
    """The embedder ``config.memory_embeddings`` names, or ``None`` when it names none."""
    chosen = config.embeddings_model()
    if chosen is None:
        return None
    profile, model = chosen
    return OpenAIEmbedder(profile, model)
