"""The storage the runtime needs, as an interface.

``runs_app.store.OrmRunStore`` implements it with the Django ORM. Every method that
writes commits its change, and the events that describe it, before it returns, so
the turn loop always resumes from what is durably recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol
from uuid import UUID

from goaai.runtime.types import (
    MemoryRecord,
    ModelReply,
    RunContext,
    RunError,
    RunInfo,
    SessionInfo,
    ToolCallRequest,
    ToolOutcome,
)


class RunStore(Protocol):
    # Sessions
    def create_session(
        self, *, owner_id: int, agent: str, title: str, metadata: dict[str, Any]
    ) -> SessionInfo: ...

    def get_session(self, session_id: UUID) -> SessionInfo: ...

    def end_session(self, session_id: UUID) -> SessionInfo: ...

    # Runs, as callers see them
    def create_run(
        self,
        *,
        session_id: UUID,
        agent: str,
        input: str,
        labels: dict[str, str],
        metadata: dict[str, Any],
        policy: dict[str, Any],
    ) -> RunInfo: ...

    def get_run(self, run_id: UUID) -> RunInfo: ...

    def request_cancel(self, run_id: UUID, reason: str) -> RunInfo: ...

    # The turn loop
    def begin_run(self, run_id: UUID) -> RunContext | None:
        """Move a pending run to running and describe it; ``None`` if it must not run."""
        ...

    def cancel_requested(self, run_id: UUID) -> str | None:
        """The reason a cancel was asked for, or ``None``."""
        ...

    def start_turn(
        self, *, run_id: UUID, index: int, model: str, messages: list[dict[str, Any]]
    ) -> UUID: ...

    def complete_turn(self, *, turn_id: UUID, reply: ModelReply, latency_ms: int) -> None: ...

    def start_tool_call(
        self, *, turn_id: UUID, index: int, request: ToolCallRequest, requires_approval: bool
    ) -> UUID:
        """Record a tool call as scheduled and, as it needs no approval, started."""
        ...

    def finish_tool_call(self, *, tool_call_id: UUID, outcome: ToolOutcome) -> None: ...

    def finish_run(
        self, *, run_id: UUID, status: str, output: str = "", error: RunError | None = None
    ) -> RunInfo: ...

    def policy_decision(self, *, run_id: UUID, rule: str, verdict: str, reason: str) -> None: ...

    # Memory
    def store_memory(
        self,
        *,
        key: str,
        value: Any,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
        expected_version: int | None = None,
        written_by_user: int | None = None,
        written_by_run: UUID | None = None,
        written_by_tool_call: UUID | None = None,
    ) -> MemoryRecord: ...

    def resolve_memory(self, *, key: str, session_id: UUID) -> MemoryRecord | None: ...

    def get_memory(
        self,
        *,
        key: str,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
    ) -> MemoryRecord | None: ...

    def delete_memory(
        self,
        *,
        key: str,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
        expected_version: int | None = None,
        written_by_user: int | None = None,
        written_by_run: UUID | None = None,
        written_by_tool_call: UUID | None = None,
    ) -> bool: ...

    # Housekeeping
    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the caller's transaction commits (at once if none)."""
        ...

    def worker(self) -> AbstractContextManager[None]:
        """Wrap one job of a worker thread (connections opened in it are closed after)."""
        ...
