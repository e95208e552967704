"""Errors the runtime and its storage raise. Each says what went wrong in words a
caller can show; the REST API maps them to 4xx answers."""

from __future__ import annotations

from typing import Any


class GoaaiError(Exception):
    """Base of every error goaai raises on purpose."""

    code = "error"


class NotFound(GoaaiError):
    code = "not_found"


class IllegalTransition(GoaaiError):
    """A run was asked to move to a status its current status does not lead to."""

    code = "illegal_transition"

    def __init__(self, run_id: object, current: str, target: str, *, what: str = "Run") -> None:
        super().__init__(f"{what} {run_id} is {current}; it cannot become {target}.")
        self.run_id = run_id
        self.current = current
        self.target = target


class SessionEnded(GoaaiError):
    """The session has ended and accepts no new runs."""

    code = "session_ended"


class RunActive(GoaaiError):
    """A message came while a run of the session was active, and the session's
    policy (``multitask: reject``) refuses it; ``active_run_id`` names that run."""

    code = "run_active"

    def __init__(self, message: str, *, active_run_id: object) -> None:
        super().__init__(message)
        self.active_run_id = active_run_id


class NotRedoable(GoaaiError):
    """A run cannot be redone that way: a retry of a run that did not fail or
    stop, a regenerated answer of a run that gave none, any redo of a run called as a
    tool or still under way."""

    code = "not_redoable"


class DuplicateIdempotencyKey(GoaaiError):
    """A run with this idempotency key already exists in the session; the caller
    looks up that run instead of starting a second one."""

    code = "idempotency_key_reused"


class UnknownAgent(GoaaiError):
    code = "unknown_agent"


class UnknownTool(GoaaiError):
    code = "unknown_tool"


class MemoryConflict(GoaaiError):
    """A memory write named a version that is not the entry's current one.

    ``current`` is the entry as it is now (``None`` when it does not exist), so the
    writer can show it and retry deliberately; nothing was overwritten.
    """

    code = "version_conflict"

    def __init__(self, message: str, current: Any = None) -> None:
        super().__init__(message)
        self.current = current


class InvalidMemoryScope(GoaaiError):
    code = "invalid_scope"


class InvalidAnswer(GoaaiError):
    """An answer the question a run asks does not accept (a choice it does not
    offer, two where it takes one); ``field`` is the part of the answer that is
    wrong (``answer`` or ``choices``). Nothing was recorded."""

    code = "invalid_answer"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class ModelError(GoaaiError):
    """A model provider failed. A ``retryable`` one is asked again within the
    agent's retry budget, no sooner than ``retry_after`` seconds when the provider
    said so; otherwise the run fails with this kind and message."""

    code = "model_error"

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


class ToolsetUnavailable(GoaaiError):
    """A toolset whose tools cannot be listed now (an MCP server that does not start
    or answer): a run that needs it fails ``unavailable``, and may be tried again."""

    code = "toolset_unavailable"
