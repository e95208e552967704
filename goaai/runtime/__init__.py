"""The agent runtime: agents, model clients, tools, the turn loop and the ``rt`` facade.

Plain Python with no model imports: it talks to storage through
:class:`goaai.runtime.store.RunStore`.
"""

from goaai.runtime.errors import (
    GoaaiError,
    IllegalTransition,
    MemoryConflict,
    NotFound,
    SessionEnded,
    UnknownAgent,
)
from goaai.runtime.facade import RunHandle, Runtime

rt = Runtime()

__all__ = [
    "GoaaiError",
    "IllegalTransition",
    "MemoryConflict",
    "NotFound",
    "RunHandle",
    "Runtime",
    "SessionEnded",
    "UnknownAgent",
    "rt",
]
