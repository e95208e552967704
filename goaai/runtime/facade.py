"""The runtime API: what the seed's ``rt`` offers, in Python.

>>> from goaai.runtime import rt
>>> session = rt.create_session(owner=user, agent="assistant", metadata={"user_id": "u-1"})
>>> result = rt.run("assistant", "remember my favourite colour is green", session=session.id)
>>> rt.get_memory("favourite colour", session=session.id).value
'green'
>>> rt.end_session(session.id)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from uuid import UUID

from goaai.runtime.agents import Agent, AgentRegistry, AgentSource, default_registry
from goaai.runtime.config import RuntimeConfig
from goaai.runtime.endings import PROCESS_ENDED
from goaai.runtime.errors import NotFound, NotRedoable
from goaai.runtime.executors import (
    Executor,
    InlineExecutor,
    QueueingExecutor,
    Reaper,
    ThreadExecutor,
)
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.limits import LocalLimits, ModelLimits
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import get_model_client
from goaai.runtime.policy import Decision, Policy, apply_label_rules
from goaai.runtime.store import RunStore
from goaai.runtime.types import Branch, MemoryRecord, RunInfo, SessionInfo
from goaai.runtime.vocabulary import REDOABLE_STATUSES, MemoryScope, Multitask, Redo, RunStatus
from goaai.runtime.workers import process_gone, this_host

logger = logging.getLogger(__name__)

# How many of the runs held by this host's workers one round of the reaper checks.
HELD_RUNS_CHECKED = 1000
# A run is "done" for a waiting caller when it ended or when it waits for a person.
_SETTLED = {RunStatus.AWAITING_INPUT.value} | {s.value for s in RunStatus if s.is_terminal}


def _id(value: Any) -> Any:
    """Accept an object with a primary key (a session, a user) or the key itself."""
    return getattr(value, "pk", None) or getattr(value, "id", None) or value


def _multitask(value: str) -> Multitask:
    try:
        return Multitask(value)
    except ValueError:
        known = ", ".join(m.value for m in Multitask)
        raise ValueError(f"Unknown multitask {value!r}: choose {known}.") from None


def _uuid(value: Any) -> UUID:
    raw = _id(value)
    return raw if isinstance(raw, UUID) else UUID(str(raw))


@dataclass(frozen=True)
class RunHandle:
    """A run that was started without waiting."""

    run_id: UUID
    runtime: Runtime
    # The run it waits for, as its creation found it (None: none, or not known).
    queued_behind: UUID | None = None
    # The store's record of the run as its creation left it (RunInfo.record), if
    # it gave one and nothing has executed the run since.
    record: Any = field(default=None, compare=False, repr=False)

    def wait(self, timeout: float | None = None) -> RunInfo:
        return self.runtime.wait(self.run_id, timeout=timeout)

    def cancel(self, reason: str = "") -> RunInfo:
        return self.runtime.cancel_run(self.run_id, reason=reason)


class Runtime:
    """Sessions, runs and memory, as the seed's runtime offers them.

    A deployment installs its parts once (:meth:`install`: where the config comes
    from, the store, executors of its own); each part is built on first use, and
    :meth:`configure` replaces any of them, for tests and scripts, until
    :meth:`reset`.
    """

    def __init__(self) -> None:
        # On its own (a script, a notebook) the runtime keeps everything in memory;
        # goaai's Django project installs the database store when it starts.
        self._config_source: Callable[[], RuntimeConfig] = RuntimeConfig
        self._store_factory: Callable[[], RunStore] = InMemoryRunStore
        self._executor_factories: Mapping[str, Callable[[], Executor]] = {}
        self._limits_factory: Callable[[], ModelLimits] = LocalLimits
        self._agent_source: AgentSource | None = None
        self._config: RuntimeConfig | None = None
        self._store: RunStore | None = None
        self._agents: AgentRegistry | None = None
        self._executor: Executor | None = None
        self._reaper: Reaper | None = None
        self._limits: ModelLimits | None = None
        self._lock = threading.Lock()

    # Configuration

    def install(
        self,
        *,
        config: Callable[[], RuntimeConfig],
        store: Callable[[], RunStore],
        executors: Mapping[str, Callable[[], Executor]] | None = None,
        limits: Callable[[], ModelLimits] | None = None,
        agents: AgentSource | None = None,
    ) -> None:
        """Wire the runtime into a deployment: ``config`` builds its settings (again
        after :meth:`reset`), ``store`` its storage, ``executors`` executors beyond
        ``thread`` and ``inline``, by name, ``limits`` the model profiles' limits
        (this process's by default), ``agents`` the agents it keeps as data."""
        with self._lock:
            self._config_source = config
            self._store_factory = store
            self._executor_factories = dict(executors or {})
            self._limits_factory = limits or LocalLimits
            self._agent_source = agents

    def configure(
        self,
        *,
        config: RuntimeConfig | None = None,
        store: RunStore | None = None,
        agents: AgentRegistry | None = None,
        executor: str | Executor | None = None,
    ) -> None:
        with self._lock:
            if config is not None:
                self._config = config
            if store is not None:
                self._store = store
            if agents is not None:
                self._agents = agents
        if isinstance(executor, str):
            built = self._build_executor(executor)
            with self._lock:
                self._executor = built
        elif executor is not None:
            with self._lock:
                self._executor = executor

    def reset(self) -> None:
        """Forget every built or configured part; they are built again on use."""
        with self._lock:
            if isinstance(self._executor, ThreadExecutor):
                self._executor.shutdown()
            if self._reaper is not None:
                self._reaper.stop()
            self._config = self._store = self._agents = self._executor = self._reaper = None
            self._limits = None

    @property
    def config(self) -> RuntimeConfig:
        config = self._config
        if config is None:
            built = self._config_source()
            with self._lock:
                if self._config is None:
                    self._config = built
                config = self._config
        return config

    @property
    def store(self) -> RunStore:
        store = self._store
        if store is None:
            with self._lock:
                if self._store is None:
                    self._store = self._store_factory()
                store = self._store
        return store

    @property
    def agents(self) -> AgentRegistry:
        agents = self._agents
        if agents is None:
            built = default_registry(
                list(self.config.agents),
                self._agent_source,
                mcp_servers=self.config.mcp_servers,
            )
            with self._lock:
                if self._agents is None:
                    self._agents = built
                agents = self._agents
        return agents

    @property
    def limits(self) -> ModelLimits:
        """The model profiles' limits, one for the process (each run asks it for a
        place before it calls a model)."""
        limits = self._limits
        if limits is None:
            built = self._limits_factory()
            with self._lock:
                if self._limits is None:
                    self._limits = built
                limits = self._limits
        return limits

    @property
    def executor(self) -> Executor:
        executor = self._executor
        if executor is None:
            built = self._build_executor(self.config.executor)
            with self._lock:
                if self._executor is None:
                    self._executor = built
                executor = self._executor
        return executor

    def loop(self) -> TurnLoop:
        config = self.config
        return TurnLoop(
            store=self.store,
            agents=self.agents,
            model_factory=partial(get_model_client, profiles=config.profiles),
            limits=self.limits,
            publish_delta=self.store.publish_delta,
            run_child=self._run_child,
            lease_seconds=config.run_lease_seconds,
            label_rules=config.label_rules,
        )

    def execute(self, run_id: UUID) -> RunInfo | None:
        """Execute one run in this thread (what every executor's worker calls)."""
        with self.store.worker():
            result = self.loop().execute(run_id)
            if result is not None and result.parent_run_id is not None:
                # A child that had to wait for a person ended on its own: its parent,
                # waiting for it, can go on.
                parent = self.store.settle_child(result.id)
                if parent is not None:
                    self._submit_after_commit(parent)
            elif result is not None and RunStatus(result.status).is_terminal:
                self._hand_over(result)
            return result

    def _hand_over(self, ended: RunInfo) -> None:
        """A top-level run ended: once that is committed, the run waiting for its
        turn in its session (if any; known from the end's own step when the store
        says) goes to the executor. A hand-over that does not reach it (a queue that
        is down, a process that dies first) is made up by the reaper, which finds
        the run pending with nothing before it."""
        store, executor = self.store, self.executor

        def hand_over() -> None:
            next_id = (
                ended.next_run_id
                if ended.next_run_known
                else store.next_queued_run(ended.session_id)
            )
            if next_id is None:
                return
            try:
                executor.submit(next_id)
            except Exception:
                logger.warning("Run %s waits for the reaper to start it", next_id, exc_info=True)

        store.after_commit(hand_over)

    def _run_child(self, run_id: UUID) -> RunInfo | None:
        # An agent called as a tool runs in its caller's thread: the caller waits
        # for its answer anyway, and the child's records commit step by step.
        return self.loop().execute(run_id)

    def reap(self) -> int:
        """Hand every run that no live worker holds to the executor again (a run
        whose worker died, or whose hand-off was lost). Returns how many.

        First the runs held by a process of this host that has ended (a server or
        worker that crashed, and this one started after it) are told interrupted
        and taken up at once, without waiting for their leases to expire.

        A unit of work like a run: a connection the database dropped since the
        last round is replaced, not failed on for the life of the process."""
        with self.store.worker():
            taken_up = self._interrupt_ended_workers()
            run_ids = list(dict.fromkeys([*taken_up, *self.store.expired_runs()]))
            for run_id in run_ids:
                self.executor.submit(run_id)
            return len(run_ids)

    def _interrupt_ended_workers(self) -> list[UUID]:
        """Record as interrupted every run whose worker was a process of this host
        that has ended; the ones to hand to the executor now (a run called as a
        tool by a parent that is running is continued by that parent instead)."""
        taken_up = []
        # Every run this host's workers hold (each thread of each process holds one).
        for run_id, owner in self.store.held_runs(host=this_host(), limit=HELD_RUNS_CHECKED):
            if not process_gone(owner):
                continue
            run = self.store.interrupt_run(run_id, owner=owner, cause=PROCESS_ENDED)
            if run is None:
                continue
            logger.warning("Run %s lost its worker %s (its process ended)", run_id, owner)
            if run.parent_run_id is None or not self._parent_running(run.parent_run_id):
                taken_up.append(run.id)
        return taken_up

    def _parent_running(self, parent_id: UUID) -> bool:
        try:
            return self.store.get_run(parent_id).status == RunStatus.RUNNING
        except NotFound:
            return False

    def start_background(self) -> None:
        """Start this process's reaper thread, once (servers and workers call this)."""
        interval = self.config.reaper_interval
        with self._lock:
            if self._reaper is not None or interval <= 0:
                return
            self._reaper = Reaper(self.reap, interval=interval)
        self._reaper.start()

    def _build_executor(self, name: str) -> Executor:
        if name == "inline":
            return InlineExecutor(self.execute)
        if name == "thread":
            return ThreadExecutor(self.execute, threads=self.config.executor_threads)
        factory = self._executor_factories.get(name)
        if factory is not None:
            return factory()
        known = ", ".join(repr(n) for n in ("thread", "inline", *self._executor_factories))
        raise ValueError(f"Unknown executor {name!r}: choose {known}.")

    def policy_for(self, agent: Agent, labels: dict[str, str]) -> tuple[Policy, list[Decision]]:
        """The policy in force for a run of ``agent`` with ``labels``, and the label
        rules (the config's ``label_rules``) that shaped it."""
        return apply_label_rules(agent.policy, labels, list(self.config.label_rules))

    # Sessions

    def create_session(
        self,
        *,
        owner: Any,
        agent: str = "assistant",
        title: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        """Start a conversation of ``owner`` with ``agent``."""
        self.agents.get(agent)
        return self.store.create_session(
            owner_id=int(_id(owner)), agent=agent, title=title, metadata=dict(metadata or {})
        )

    def end_session(self, session: Any, *, by: Any = None) -> SessionInfo:
        """End a session: runs in flight are canceled and no new run is accepted.
        ``by``, the user who ended it, is recorded with the ``session.ended`` event."""
        return self.store.end_session(
            _uuid(session), ended_by=int(_id(by)) if by is not None else None
        )

    # Runs

    def start(
        self,
        agent: str,
        prompt: str,
        *,
        session: Any,
        labels: dict[str, str] | None = None,
        metadata: dict[str, Any] | None = None,
        created_by: Any = None,
        idempotency_key: str | None = None,
        fingerprint: str = "",
        branch: Branch | None = None,
        multitask: str | None = None,
        client_tools: Sequence[Mapping[str, Any]] = (),
        instructions: str = "",
    ) -> RunHandle:
        """Start a run of ``agent`` on ``prompt`` in ``session`` and return at once.

        ``client_tools`` are tools the caller executes itself (``{name,
        description, parameters}``, the last a JSON Schema), offered to the model
        beside the agent's own; a call of one pauses the run (``awaiting_input``,
        kind ``client_tool``) until :meth:`submit_tool_outputs` brings the results.
        ``instructions`` are the caller's own, told to the model after the agent's
        system prompt.

        ``idempotency_key`` is unique per session: a second run with the same key
        is refused by the database (the caller looks up the first one; see the REST
        API), and ``fingerprint`` records what the request said, to tell a replay
        from a conflicting reuse of the key. The run continues the conversation from
        the session's newest run, or from where ``branch`` says (see :meth:`redo`).

        A session runs one message at a time. While another of its runs is active,
        ``multitask`` (by default the agent's ``conversation.multitask``) decides:
        ``enqueue`` starts this run once the active one has ended, ``interrupt``
        stops the active one and then starts this one, ``reject`` raises
        :class:`~goaai.runtime.errors.RunActive` and starts nothing.
        """
        spec = self.agents.get(agent)
        labels = {str(k): str(v) for k, v in (labels or {}).items()}
        policy, decisions = self.policy_for(spec, labels)
        executor = self.executor
        run = self.store.create_run(
            queued=isinstance(executor, QueueingExecutor),
            definition=spec.as_dict(),
            session_id=_uuid(session),
            agent=agent,
            input=prompt,
            labels=labels,
            metadata=dict(metadata or {}),
            policy=policy.as_dict(),
            policy_decisions=decisions,
            created_by_id=int(_id(created_by)) if created_by is not None else None,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            branch=branch,
            multitask=_multitask(multitask or spec.conversation.multitask),
            client_tools=[dict(tool) for tool in client_tools],
            instructions=instructions,
        )
        queued_at = run.queued_at
        record = run.record
        if isinstance(executor, QueueingExecutor) and queued_at is not None:
            # Recorded as queued with the run: only sent once it is committed.
            self.store.after_commit(lambda: executor.send(run.id, queued_at))
        elif run.queued_behind is None:
            # A queued run is handed over when the run before it ends (an inline
            # executor executes it here, and its record is out of date).
            self._submit_after_commit(run.id)
            if isinstance(executor, InlineExecutor):
                record = None
        return RunHandle(
            run_id=run.id, runtime=self, queued_behind=run.queued_behind, record=record
        )

    def redo(
        self, run_id: Any, how: str, *, input: str | None = None, created_by: Any = None
    ) -> RunHandle:
        """Start a run that redoes ``run_id`` from the point before it, leaving it
        recorded: ``how="retry"`` a run that failed, timed out or was stopped (same
        message), ``"regenerate"`` an answer (same message, another answer),
        ``"edit"`` a message (``input``, the new text). The new run is linked to the
        one it redoes, and the conversation goes on from it: later runs see the new
        branch, not the old one. :class:`NotRedoable` if the run cannot be redone so.
        """
        original = self.store.get_run(_uuid(run_id))
        how = _check_redo(original, how, input)
        branch = Branch(
            previous_run_id=original.previous_run_id,
            retry_of_id=original.id if how == Redo.RETRY else None,
            regenerates_id=original.id if how == Redo.REGENERATE else None,
            edit_of_id=original.id if how == Redo.EDIT else None,
        )
        return self.start(
            original.agent,
            input if how == Redo.EDIT and input is not None else original.input,
            session=original.session_id,
            labels=original.labels,
            created_by=created_by,
            branch=branch,
        )

    def fork(self, run_id: Any, *, owner: Any, title: str = "") -> SessionInfo:
        """A new session of ``owner``'s whose history is ``run_id``'s branch up to
        and including that run; the original stays as it is."""
        source = self.store.get_run(_uuid(run_id))
        if source.parent_run_id is not None:
            raise NotRedoable("A run called as a tool is part of its parent's answer.")
        if not RunStatus(source.status).is_terminal:
            raise NotRedoable(f"Run {source.id} is still {source.status}.")
        return self.store.fork_session(
            source_run_id=source.id, owner_id=int(_id(owner)), title=title
        )

    def _submit_after_commit(self, run_id: UUID) -> None:
        executor = self.executor
        self.store.after_commit(lambda: executor.submit(run_id))

    def respond(
        self,
        run_id: Any,
        *,
        tool_call: Any = None,
        decision: str = "",
        reason: str = "",
        answer: str | None = None,
        choices: Sequence[str] | None = None,
        user: Any = None,
    ) -> RunInfo:
        """Answer what a waiting run asks: ``decision="approve"|"deny"`` (with a
        ``reason``) for a tool call that needs approval; for a question, ``answer``
        in words or the ``choices`` picked of those it offers
        (:class:`~goaai.runtime.errors.InvalidAnswer` if it does not accept
        them). The run continues in the background."""
        run = self.store.respond(
            _uuid(run_id),
            tool_call_id=_uuid(tool_call) if tool_call is not None else None,
            decision=decision,
            reason=reason,
            answer=answer,
            choices=choices,
            decided_by_id=int(_id(user)) if user is not None else None,
        )
        self._submit_after_commit(run.id)
        return run

    def submit_tool_outputs(
        self, run_id: Any, outputs: Mapping[Any, Any], *, user: Any = None
    ) -> RunInfo:
        """Give a run waiting for its caller's tools (``awaiting.kind`` is
        ``client_tool``) the result of every call it waits on (``outputs``, by tool
        call id; :class:`~goaai.runtime.errors.InvalidAnswer` naming any missing or
        not waited on). The run continues in the background."""
        run = self.store.submit_tool_outputs(
            _uuid(run_id),
            outputs={_uuid(call): result for call, result in outputs.items()},
            submitted_by_id=int(_id(user)) if user is not None else None,
        )
        self._submit_after_commit(run.id)
        return run

    def run(
        self,
        agent: str,
        prompt: str,
        *,
        session: Any,
        labels: dict[str, str] | None = None,
        metadata: dict[str, Any] | None = None,
        timeout: float | None = None,
        multitask: str | None = None,
    ) -> RunInfo:
        """Run ``agent`` on ``prompt`` in ``session`` and wait until the run ends or
        waits for a person's input (a run queued behind another waits for that one
        too; ``multitask`` as :meth:`start` takes it)."""
        handle = self.start(
            agent, prompt, session=session, labels=labels, metadata=metadata, multitask=multitask
        )
        executor = self.executor
        if isinstance(executor, InlineExecutor):
            # Executed as it started: as its worker left it, without reading it.
            done = executor.executed(handle.run_id)
            if done is not None and done.status in _SETTLED:
                return done
        return handle.wait(timeout=timeout)

    def wait(self, run_id: Any, timeout: float | None = None) -> RunInfo:
        """Wait until a run has ended or awaits input; returns it as it is then."""
        run_uuid = _uuid(run_id)
        limit = self.config.run_wait_seconds if timeout is None else timeout
        deadline = time.monotonic() + limit
        try:
            done = self.executor.wait(run_uuid, timeout=limit)
        except TimeoutError:
            return self.store.get_run(run_uuid)
        if isinstance(done, RunInfo) and done.id == run_uuid and done.status in _SETTLED:
            # As the executor's worker left it: nothing changes a settled run but
            # a person's answer or a cancel, which a read a moment later could
            # miss as well.
            return done
        # Another process may hold the run (or it is paused): watch the record.
        delay = 0.01
        while True:
            run = self.store.get_run(run_uuid)
            if run.status in _SETTLED or time.monotonic() >= deadline:
                return run
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def get_run(self, run_id: Any) -> RunInfo:
        return self.store.get_run(_uuid(run_id))

    def cancel_run(
        self, run_id: Any, reason: str = "", *, by: Any = None, kind: str = ""
    ) -> RunInfo:
        """Ask a run to stop. A pending or waiting run is canceled at once; a running
        one stops at its next step. A message queued behind it starts once it has
        ended.

        ``by`` is the user who asks: the run records it, and that it was stopped by
        its own user or by an operator (someone else); ``kind`` says otherwise
        when the stop is no one's choice of that sort (a
        :class:`~goaai.runtime.vocabulary.StopKind` value)."""
        run = self.store.request_cancel(
            _uuid(run_id), reason, by=int(_id(by)) if by is not None else None, kind=kind
        )
        if run.parent_run_id is None and RunStatus(run.status).is_terminal:
            self._hand_over(run)
        return run

    # Memory

    def store_memory(
        self,
        key: str,
        value: Any,
        *,
        scope: str = MemoryScope.SESSION,
        session: Any = None,
        user: Any = None,
        agent: str = "",
        expected_version: int | None = None,
        written_by: Any = None,
    ) -> MemoryRecord:
        """Create or update a memory entry.

        ``expected_version`` makes the write conditional: ``0`` means "must not exist
        yet", ``n`` means "only if the entry is still at version n";
        :class:`~goaai.runtime.errors.MemoryConflict` otherwise, and nothing changes.
        """
        return self.store.store_memory(
            key=key,
            value=value,
            scope=scope,
            session_id=_uuid(session) if session is not None else None,
            user_id=int(_id(user)) if user is not None else None,
            agent=agent,
            expected_version=expected_version,
            written_by_user=int(_id(written_by)) if written_by is not None else None,
        )

    def get_memory(
        self,
        key: str,
        session: Any = None,
        *,
        scope: str | None = None,
        user: Any = None,
        agent: str = "",
    ) -> MemoryRecord | None:
        """Read a key. With only ``session``, the most specific entry a run in that
        session would see (session, then its user, its agent, global); with
        ``scope``, exactly that scope's entry."""
        if scope is None:
            if session is None:
                raise ValueError("get_memory needs a session, or an explicit scope.")
            # A session's id as such is the common case, on a hot path: no lookups.
            session_id = session if type(session) is UUID else _uuid(session)
            return self.store.resolve_memory(key=key, session_id=session_id)
        return self.store.get_memory(
            key=key,
            scope=scope,
            session_id=_uuid(session) if session is not None else None,
            user_id=int(_id(user)) if user is not None else None,
            agent=agent,
        )

    def delete_memory(
        self,
        key: str,
        *,
        scope: str = MemoryScope.SESSION,
        session: Any = None,
        user: Any = None,
        agent: str = "",
        expected_version: int | None = None,
        written_by: Any = None,
    ) -> bool:
        """Delete an entry; ``False`` if there was none. Its history is kept."""
        return self.store.delete_memory(
            key=key,
            scope=scope,
            session_id=_uuid(session) if session is not None else None,
            user_id=int(_id(user)) if user is not None else None,
            agent=agent,
            expected_version=expected_version,
            written_by_user=int(_id(written_by)) if written_by is not None else None,
        )


def _check_redo(run: RunInfo, how: str, input: str | None) -> Redo:
    """``how`` as a :class:`Redo`, if ``run`` can be redone that way."""
    try:
        way = Redo(how)
    except ValueError:
        raise NotRedoable(f"Redo how? One of {', '.join(r.value for r in Redo)}.") from None
    if run.parent_run_id is not None:
        raise NotRedoable("A run called as a tool is redone with the run that called it.")
    if run.status not in REDOABLE_STATUSES[way]:
        allowed = ", ".join(sorted(REDOABLE_STATUSES[way]))
        raise NotRedoable(f"Run {run.id} is {run.status}: only a {allowed} run can {way.value}.")
    if way == Redo.EDIT and not (input or "").strip():
        raise NotRedoable("An edited message needs its new text.")
    return way
