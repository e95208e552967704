"""The storage the runtime needs, as an interface.

``runs_app.store.OrmRunStore`` implements it with the Django ORM. Every method that
writes commits its change, and the events that describe it, before it returns, so
the turn loop always resumes from what is durably recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol
from uuid import UUID

from goaai.runtime.policy import Decision
from goaai.runtime.types import (
    Branch,
    MemoryRecord,
    ModelReply,
    PlannedCall,
    RunContext,
    RunError,
    RunInfo,
    SessionInfo,
    StreamedText,
    ToolCallRequest,
    ToolOutcome,
    TurnRecorded,
)
from goaai.runtime.vocabulary import Multitask


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
        multitask: str = Multitask.ENQUEUE,
        branch: Branch | None = None,
        client_tools: Sequence[dict[str, Any]] = (),
        instructions: str = "",
        queued: bool = False,
    ) -> RunInfo:
        """A pending run. ``queued``: it goes on a distributed queue as soon as it
        is committed, and is recorded as put there in the same step
        (:attr:`RunInfo.queued_at`; a store that keeps no such record ignores it),
        unless it waits behind another run.

        ``client_tools`` and ``instructions`` are what its caller
        gave it beside its message (see :attr:`RunContext.client_tools`), kept on
        the run and in its context whenever it is executed. ``definition`` is the agent as it is now
        (:meth:`~goaai.runtime.agents.Agent.as_dict`): the run records that version
        of it, numbered per agent, and executes it even if the agent changes. It
        continues the conversation from ``branch`` (by default from the session's
        newest top-level run, or for a fork with none yet, the run it was forked at).

        ``multitask`` says what happens when another top-level run of the session is
        still open (pending, running or awaiting input), decided under the session's
        lock so that two messages at the same moment are still taken one after the
        other: ``enqueue`` records the run as waiting behind the open one
        (``run.queued``; :attr:`RunInfo.queued_behind`), ``interrupt`` asks the open
        runs to stop (a cancel, as :meth:`request_cancel`) and queues the run behind
        them, ``reject`` records nothing and raises
        :class:`~goaai.runtime.errors.RunActive` naming the open run. The run
        records the policy it was given only when a run was open."""
        ...

    def fork_session(self, *, source_run_id: UUID, owner_id: int, title: str) -> SessionInfo:
        """A new session of ``owner_id``'s, of the source's agent, whose history is
        the branch of ``source_run_id`` up to and including it."""
        ...

    def get_run(self, run_id: UUID) -> RunInfo: ...

    def request_cancel(
        self, run_id: UUID, reason: str, *, by: int | None = None, kind: str = ""
    ) -> RunInfo:
        """Ask a run to stop: one that no live worker executes is canceled at once, a
        running one is flagged for its loop to stop at its next step. ``by`` is the
        user who asks, ``kind`` who stops it (a :class:`StopKind` value; by
        default ``user`` when ``by`` owns the run's session, ``operator`` for
        anyone else, nothing when nobody is named), both recorded with the first
        request and told by the run's end event (``stopped_by``). A finished run
        stays as it is."""
        ...

    def respond(
        self,
        run_id: UUID,
        *,
        tool_call_id: UUID | None,
        decision: str,
        reason: str,
        answer: str | None,
        decided_by_id: int | None,
        choices: Sequence[str] | None = None,
    ) -> RunInfo:
        """Record a person's approval, denial or answer (in words, ``answer``, or the
        ``choices`` picked of those the question offers); the run becomes claimable.
        :class:`~goaai.runtime.errors.InvalidAnswer` if the question does not
        accept the answer (nothing is recorded then)."""
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
        waiting for input, held by a live worker, or a top-level run whose session
        has an earlier top-level run still open (it waits for its turn, see
        :meth:`next_queued_run`). The context carries everything
        recorded so far, so the loop continues from the last committed step.

        Taking over from a worker whose lease expired records that the run was
        interrupted (``run.interrupted``, ``lease_expired``) and then resumed."""
        ...

    def renew_lease(self, run_id: UUID, *, owner: str, lease_seconds: float) -> bool:
        """Extend ``owner``'s lease; ``False`` if the run is no longer held by it."""
        ...

    def next_queued_run(self, session_id: UUID) -> UUID | None:
        """The session's run whose turn has come: its oldest open top-level run, if
        that has not started yet (``None`` otherwise). When a run ends, the executor
        is handed this one. A pending top-level run behind an open one is never
        claimed (:meth:`claim_run` refuses it) nor counted by :meth:`expired_runs`."""
        ...

    def expired_runs(self, *, limit: int = 100) -> list[UUID]:
        """Runs that no live worker holds: running with an expired lease, or
        pending for longer than a lease without being claimed (not those waiting
        for an earlier run of their session to end). A run called as a tool is
        among them only while its parent is not running: a running parent takes
        its child up itself (its call of the agent continues the child), while one
        that waits for the child, or has ended, needs the child executed (or
        settled) on its own."""
        ...

    def held_runs(self, *, host: str, limit: int = 100) -> list[tuple[UUID, str]]:
        """Running runs held under a lease by a worker of ``host`` (whose name
        :func:`~goaai.runtime.workers.worker_name` made), as (id, lease owner): those
        whose worker a process of that host can tell dead or alive (not those told
        interrupted already)."""
        ...

    def interrupt_run(self, run_id: UUID, *, owner: str, cause: str) -> RunInfo | None:
        """Record that the worker holding the run as ``owner`` is lost (``cause``:
        ``process_ended`` or ``lease_expired``, see :mod:`goaai.runtime.endings`):
        the ``run.interrupted`` event, and the lease ended, so that the worker
        cannot renew it and the next claim takes the run over at once (recorded as
        ``run.resumed``; the turn it left open is closed by the loop that goes on).
        ``None``, and nothing recorded, if the run is not held by ``owner`` any more
        (it ended, another worker took it, or it was told interrupted already)."""
        ...

    def tool_call_child(self, tool_call_id: UUID) -> RunInfo | None:
        """The run an agent called as a tool became, for the call that started it
        (the first, if there were several); ``None`` if the call started none."""
        ...

    def cancel_requested(self, run_id: UUID) -> str | None:
        """The reason a cancel was asked for, or ``None``."""
        ...

    def start_turn(
        self, *, run_id: UUID, index: int, model: str, messages: list[dict[str, Any]]
    ) -> UUID: ...

    def complete_turn(
        self,
        *,
        turn_id: UUID,
        reply: ModelReply,
        latency_ms: int,
        retries: int = 0,
        interruption: str = "",
        usage_estimated: bool = False,
        calls: Sequence[PlannedCall] = (),
    ) -> TurnRecorded:
        """Record the model's reply: text, tool calls, why it stopped, its reasoning,
        its usage of each kind and its cost (at the price in force now), after
        ``retries`` retried attempts. A reply that did not finish is the text said
        until then, with ``interruption`` saying how it ended
        (:class:`~goaai.runtime.vocabulary.TurnInterruption`) and
        ``usage_estimated`` whether its usage is (in part) an estimate.

        ``calls``, the calls of the reply to record now, are recorded in the same
        step, each as :meth:`start_tool_call` or :meth:`schedule_tool_call` would,
        unless the run was asked to stop (then none is).
        Returns their ids, and what :meth:`cancel_requested` would say as the step
        found the run: the loop's check that follows needs no read of its own."""
        ...

    def complete_turn_and_run(
        self, *, turn_id: UUID, reply: ModelReply, latency_ms: int, retries: int = 0
    ) -> RunInfo:
        """Record the model's reply, which asks for no tool call, as
        :meth:`complete_turn` does, and complete the run with its text, as
        :meth:`finish_run` does, in one step (:class:`IllegalTransition`, and
        nothing recorded, if the run is not running)."""
        ...

    def checkpoint_turn(self, *, turn_id: UUID, text: str) -> None:
        """Keep ``text``, what the model has streamed so far, as the reply of a turn
        still open (nothing happens to one that ended): one write, no event. The
        loop calls it about once a second while a reply streams, so that a
        subscriber joining mid-answer, or a worker taking over a run whose worker
        died, finds what was said."""
        ...

    def streaming_turns(self, session_id: UUID) -> list[StreamedText]:
        """The session's turns still being answered (open, of runs that have not
        ended) that have checkpointed some text, with that text."""
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
        retryable error, and the model is asked again after ``delay_seconds``. The
        text the failed attempt checkpointed is dropped with it (the next attempt
        streams its own)."""
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
        choices: Sequence[str] = (),
        multiple: bool = False,
        child_run_id: UUID | None = None,
        tool_call_ids: Sequence[UUID] = (),
    ) -> RunInfo:
        """Pause the run until a person approves/denies the call or answers the
        question, picking ``choices`` if it offers them (``multiple``: any number;
        else one) (``kind="delegated"``: until the child run the call started ends;
        ``kind="client_tool"``: until the caller sends the results of every call
        of ``tool_call_ids``, calls of its own tools)."""
        ...

    def submit_tool_outputs(
        self, run_id: UUID, *, outputs: Mapping[UUID, Any], submitted_by_id: int | None
    ) -> RunInfo:
        """Record the results the caller sent for the calls of its own tools the run
        waits on (``outputs``: each call's result, by tool call id), all of them at
        once; the run becomes claimable. :class:`~goaai.runtime.errors.InvalidAnswer`
        naming the calls that are missing, or that the run does not wait on
        (nothing is recorded then); :class:`~goaai.runtime.errors.IllegalTransition`
        if the run does not wait for the caller's tools."""
        ...

    def settle_child(self, run_id: UUID) -> UUID | None:
        """A child run ended: if its parent waits for it, its answer (or failure)
        becomes the parent's tool-call result and the parent may continue. Returns
        the parent to hand to the executor, or ``None``."""
        ...

    def finish_tool_call(self, *, tool_call_id: UUID, outcome: ToolOutcome) -> str | None:
        """Record how a running call ended. Returns what :meth:`cancel_requested`
        would say, as the step found the call's run (see :meth:`complete_turn`)."""
        ...

    def finish_run(
        self,
        *,
        run_id: UUID,
        status: str,
        output: str = "",
        error: RunError | None = None,
        rule: str = "",
    ) -> RunInfo:
        """End the run: ``output`` is a completed run's answer, or what a canceled
        run had said when it was stopped (kept as its output). ``rule`` is the
        policy rule that ended it (a time or turn budget), if one did: the run is
        then recorded as stopped by the policy, the rule standing as its reason."""
        ...

    def policy_decision(self, *, run_id: UUID, rule: str, verdict: str, reason: str) -> None: ...

    def record_summary(
        self,
        *,
        run_id: UUID,
        through_run_id: UUID,
        previous_id: UUID | None,
        runs_covered: int,
        text: str,
        model: str,
        reply: ModelReply,
        latency_ms: int,
    ) -> UUID:
        """Record the summary ``run_id``'s model wrote of its branch up to and
        including ``through_run_id`` (folding in ``previous_id``), which later runs
        on the branch reuse; its usage and cost (at the price of ``model`` in force
        now) are added to the run's."""
        ...

    def tool_result(self, *, tool_call_id: UUID, owner_id: int) -> ToolOutcome | None:
        """The recorded outcome of a finished tool call in one of ``owner_id``'s
        sessions; ``None`` if there is none (or it is someone else's)."""
        ...

    def publish_delta(self, context: RunContext, turn_id: UUID, text: str, offset: int) -> None:
        """Stream a piece of model text to live subscribers (never stored itself:
        see :meth:`checkpoint_turn`). ``offset`` is where it begins in the text the
        turn's current attempt has streamed, in characters (code points)."""
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

    def search_memory(
        self, *, session_id: UUID, query: str, limit: int = 5
    ) -> list[tuple[str, str, Any]]:
        """At most ``limit`` live facts the session reads that match ``query``, best
        first, as (scope, key, value): ranked by the words they share with it (and,
        with embeddings configured, by meaning), a more specific scope hiding the same
        key further out, as :meth:`resolve_memory` does. Facts the run starts with
        (``RunContext.memory``) are chosen by the same ranking."""
        ...

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
