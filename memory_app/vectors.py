"""Vectors for memory ranked by meaning: the configured embedder, and vector
similarity in SQLite.

The embedder is the one ``GOAAI_MEMORY_EMBEDDINGS`` names (through the runtime's
config, :func:`goaai.runtime.embeddings.embedder_for`), built once per setting.

On SQLite, similarity is sqlite-vec's ``vec_distance_cosine``. Python's ``sqlite3``
module may be built without ``enable_load_extension`` (this is common for Pythons
built from source, pyenv's among them), so sqlite-vec is registered with SQLite
itself as an automatic extension (``sqlite3_auto_extension``, SQLite's public API,
through ``ctypes``): every connection the process opens afterwards has it. Where
that is not possible (a Python whose SQLite is linked in statically) and the module
can load extensions, each connection loads it; where neither works, each connection
gets ``vec_distance_cosine`` as a Python function of the same name and meaning, so
the same SQL runs, only slower (:func:`vector_search_engine` says which it is).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import glob
import json
import logging
import math
import sqlite3
from typing import Any

import sqlite_vec  # type: ignore[import-untyped]
from django.conf import settings
from django.db.backends.signals import connection_created

from goaai.runtime.embeddings import Embedder, embedder_for, unpacked
from goaai.runtime_settings import runtime_config

logger = logging.getLogger(__name__)

_engine = {"sqlite": "not connected yet"}


def embedder() -> Embedder | None:
    """The embedder memory is ranked with, or ``None`` without
    ``GOAAI_MEMORY_EMBEDDINGS``."""
    if not settings.GOAAI_MEMORY_EMBEDDINGS:
        return None
    profiles = json.dumps(settings.GOAAI_MODEL_PROFILES, sort_keys=True, default=str)
    return _embedder(settings.GOAAI_MEMORY_EMBEDDINGS, profiles)


@functools.lru_cache(maxsize=4)
def _embedder(setting: str, profiles: str) -> Embedder | None:
    # Keyed by the settings it is built from, so that a changed setting (a test's
    # override) builds another; the client keeps its connections between calls.
    return embedder_for(runtime_config())


def register_sqlite_vec() -> bool:
    """Register sqlite-vec as an automatic extension of the SQLite library this
    process's ``sqlite3`` module uses; ``False`` if that cannot be done."""
    library = ctypes.util.find_library("sqlite3")
    candidates = glob.glob(f"{sqlite_vec.loadable_path()}.*")
    if library is None or not candidates:
        return False
    try:
        sqlite = ctypes.CDLL(library)
        vec = ctypes.CDLL(candidates[0])
        sqlite.sqlite3_auto_extension.argtypes = [ctypes.c_void_p]
        entry = ctypes.cast(vec.sqlite3_vec_init, ctypes.c_void_p)
        return bool(sqlite.sqlite3_auto_extension(entry) == 0)
    except (OSError, AttributeError):
        return False


def vector_search_engine() -> str:
    """How the SQLite connections of this process compare vectors:
    ``sqlite-vec <version>``, or ``python`` (the fallback function)."""
    return _engine["sqlite"]


def _cosine_distance(a: bytes | None, b: bytes | None) -> float | None:
    """``vec_distance_cosine`` of two float32 blobs, in Python."""
    if a is None or b is None or len(a) != len(b):
        return None
    x, y = unpacked(a), unpacked(b)
    norms = math.sqrt(sum(v * v for v in x)) * math.sqrt(sum(v * v for v in y))
    return 1.0 - sum(p * q for p, q in zip(x, y, strict=True)) / norms if norms else 1.0


def _sqlite_vec_version(raw: sqlite3.Connection) -> str | None:
    try:
        return str(raw.execute("SELECT vec_version()").fetchone()[0])
    except sqlite3.OperationalError:
        return None


def equip_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Give a new SQLite connection vector similarity (sqlite-vec, else the
    Python function); a connection kept for reuse (goaai.sqlite) keeps it."""
    if connection.vendor != "sqlite":
        return
    raw = connection.connection
    if getattr(raw, "vectors_equipped", False):
        return
    _equip(raw)
    with contextlib.suppress(AttributeError):  # a plain sqlite3 connection takes none
        raw.vectors_equipped = True


def _equip(raw: sqlite3.Connection) -> None:
    version = _sqlite_vec_version(raw)
    if version is None and hasattr(raw, "enable_load_extension"):
        raw.enable_load_extension(True)
        try:
            sqlite_vec.load(raw)
        finally:
            raw.enable_load_extension(False)
        version = _sqlite_vec_version(raw)
    if version is not None:
        _engine["sqlite"] = f"sqlite-vec {version}"
        return
    raw.create_function("vec_distance_cosine", 2, _cosine_distance, deterministic=True)
    if _engine["sqlite"] != "python":
        logger.warning(
            "sqlite-vec could not be loaded into SQLite; memory vectors are compared in Python."
        )
    _engine["sqlite"] = "python"


def install() -> None:
    """Called once when Django starts: sqlite-vec for every SQLite connection."""
    register_sqlite_vec()
    connection_created.connect(equip_connection, dispatch_uid="memory_app.vectors")
