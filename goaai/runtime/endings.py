"""How a run's ending is told: who or what stopped it, and why a run lost its worker.

Every store records a stop the same way: the kind of stopper
(:class:`~goaai.runtime.vocabulary.StopKind`), the person who asked (if one did)
and, for a policy, the rule that fired. A run's end event carries them as
``stopped_by`` (:func:`goaai.runtime.payloads.stopped_by`).
"""

from __future__ import annotations

from goaai.runtime.vocabulary import StopKind

# Why a run's worker is known to be lost (the ``run.interrupted`` event says so).
PROCESS_ENDED = "process_ended"
LEASE_EXPIRED = "lease_expired"
INTERRUPTION_REASONS = {
    PROCESS_ENDED: "the worker's process ended",
    LEASE_EXPIRED: "its lease expired",
}


def stop_kind(*, kind: str = "", by: int | None, owner_id: int | None) -> str:
    """Who stops a run, as a :class:`StopKind` value: ``kind`` if the caller says
    (a policy, a message that replaces the run), else ``user`` when the person who
    asks (``by``) owns the run's session, ``operator`` when someone else does, and
    ``""`` when nobody is named (a script, the system)."""
    if kind:
        return StopKind(kind).value
    if by is None:
        return ""
    return StopKind.USER.value if by == owner_id else StopKind.OPERATOR.value


def child_stop(*, parent_run: str, status: str, kind: str, rule: str) -> tuple[str, str]:
    """The reason and kind a run called as a tool is stopped with when its parent
    ends unfinished: the parent's stopper stops it too (for a policy, ``rule``
    stands as its reason, as for the parent)."""
    if kind == StopKind.POLICY:
        return rule, kind
    return f"its parent run {parent_run} ended {status}", kind
