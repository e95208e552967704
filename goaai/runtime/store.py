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

from goaai.runtime.policy import Decision
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

    def end_session(self, session_id: UUID, *, ended_by: int | None = None) -> SessionInfo: ...

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
        policy_decisions: list[Decision] | None = None,
        created_by_id: int | None = None,
        idempotency_key: str | None = None,
        fingerprint: str = "",
        definition: dict[str, Any] | None = None,
    ) -> RunInfo:
        """A pending run. ``definition`` is the agent as it is now
        (:meth:`~goaai.runtime.agents.Agent.as_dict`): the run records that version
        of it, numbered per agent, and executes it even if the agent changes."""
        ...

    def get_run(self, run_id: UUID) -> RunInfo: ...

    def request_cancel(self, run_id: UUID, reason: str) -> RunInfo: ...

    def respond(
        self,
        run_id: UUID,
        *,
        tool_call_id: UUID | None,
        decision: str,
        reason: str,
        answer: str | None,
        decided_by_id: int | None,
    ) -> RunInfo:
        """Record a person's approval, denial or answer; the run becomes claimable."""
        ...

    def create_child_run(
        self,
        *,
        parent_run_id: UUID,
        parent_tool_call_id: UUID,
        agent: str,
        input: str,
        labels: dict[str, str],
        policy: dict[str, Any],
        policy_decisions: list[Decision] | None = None,
        definition: dict[str, Any] | None = None,
    ) -> RunInfo:
        """A run of ``agent`` called as a tool, in the parent's session, linked to it,
        under ``policy`` (which ``policy_decisions`` shaped), recording ``definition``
        as :meth:`create_run` does."""
        ...

    # The turn loop
    def claim_run(self, run_id: UUID, *, owner: str, lease_seconds: float) -> RunContext | None:
        """Take a run for execution under a lease held by ``owner``: a pending run
        starts; a running run whose lease expired (its worker died) or that was
        released (an answer arrived) is taken over. ``None`` if the run is finished,
        waiting for input, or held by a live worker. The context carries everything
        recorded so far, so the loop continues from the last committed step."""
        ...

    def renew_lease(self, run_id: UUID, *, owner: str, lease_seconds: float) -> bool:
        """Extend ``owner``'s lease; ``False`` if the run is no longer held by it."""
        ...

    def expired_runs(self, *, limit: int = 100) -> list[UUID]:
        """Top-level runs that no live worker holds: running with an expired lease, or
        pending for longer than a lease without being claimed."""
        ...

    def cancel_requested(self, run_id: UUID) -> str | None:
        """The reason a cancel was asked for, or ``None``."""
        ...

    def start_turn(
        self, *, run_id: UUID, index: int, model: str, messages: list[dict[str, Any]]
    ) -> UUID: ...

    def restart_turn(self, *, turn_id: UUID) -> None:
        """Record that a turn whose reply was lost with its worker is asked again."""
        ...

    def complete_turn(
        self, *, turn_id: UUID, reply: ModelReply, latency_ms: int, retries: int = 0
    ) -> None:
        """Record the model's reply: text, tool calls, why it stopped, its reasoning,
        its usage of each kind and its cost (at the price in force now), after
        ``retries`` retried attempts."""
        ...

    def model_retry(
        self,
        *,
        turn_id: UUID,
        attempt: int,
        error_kind: str,
        message: str,
        delay_seconds: float,
    ) -> None:
        """Record that attempt ``attempt`` of a turn's model call failed with a
        retryable error, and the model is asked again after ``delay_seconds``."""
        ...

    def schedule_tool_call(
        self, *, turn_id: UUID, index: int, request: ToolCallRequest, requires_approval: bool
    ) -> UUID:
        """Record a tool call the model asked for (and, if needed, ask for approval)."""
        ...

    def start_tool_call(self, *, turn_id: UUID, index: int, request: ToolCallRequest) -> UUID:
        """Record a call that needs no approval as scheduled and running, in one step."""
        ...

    def begin_tool_call(self, *, tool_call_id: UUID) -> int:
        """Mark a scheduled (or interrupted) call running; returns its attempt number."""
        ...

    def await_input(
        self,
        *,
        run_id: UUID,
        kind: str,
        tool_call_id: UUID,
        question: str = "",
        child_run_id: UUID | None = None,
    ) -> RunInfo:
        """Pause the run until a person approves/denies the call or answers the
        question (``kind="delegated"``: until the child run the call started ends)."""
        ...

    def settle_child(self, run_id: UUID) -> UUID | None:
        """A child run ended: if its parent waits for it, its answer (or failure)
        becomes the parent's tool-call result and the parent may continue. Returns
        the parent to hand to the executor, or ``None``."""
        ...

    def finish_tool_call(self, *, tool_call_id: UUID, outcome: ToolOutcome) -> None: ...

    def finish_run(
        self, *, run_id: UUID, status: str, output: str = "", error: RunError | None = None
    ) -> RunInfo: ...

    def policy_decision(self, *, run_id: UUID, rule: str, verdict: str, reason: str) -> None: ...

    def publish_delta(self, context: RunContext, turn_id: UUID, text: str) -> None:
        """Stream a piece of model text to live subscribers (never stored)."""
        ...

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

    def memory_keys(
        self,
        *,
        scope: str,
        session_id: UUID | None = None,
        user_id: int | None = None,
        agent: str = "",
    ) -> list[str]: ...

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
