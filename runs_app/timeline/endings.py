"""How the timelines tell a run's ending: who or what stopped it, and how a wait for
a person ended when its run did (canceled, failed, timed out) instead of an answer.

The words follow the chat's ("Stopped by an operator (maria)"), seen from the
operator's side: the run's own user is named, not addressed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from goaai.runtime import payloads
from goaai.runtime.vocabulary import RunStatus, StopKind
from runs_app.models import Run
from runs_app.timeline.values import format_duration, one_line

# A run's end, as the first words of a wait it cut short.
_ENDED: dict[str, str] = {
    RunStatus.CANCELED: "Canceled",
    RunStatus.FAILED: "Failed",
    RunStatus.TIMED_OUT: "Timed out",
    RunStatus.COMPLETED: "Ended",
}


def _named(words: str, user: Any) -> str:
    return f"{words} ({user})" if user else words


def stop_words(stopped: Any) -> str:
    """Who stopped a run, from the ``stopped_by`` its end event (or the API) carries:
    "Stopped by its user (alice)", "Stopped by an operator (maria)", "Replaced by
    the next message", "Stopped by policy (max_turns)"; empty when not known."""
    if not isinstance(stopped, Mapping) or not stopped.get("kind"):
        return ""
    kind, user = stopped["kind"], stopped.get("user")
    if kind == StopKind.USER:
        return _named("Stopped by its user", user)
    if kind == StopKind.OPERATOR:
        return _named("Stopped by an operator", user)
    if kind == StopKind.SUPERSEDED:
        return "Replaced by the next message"
    if kind == StopKind.POLICY:
        return _named("Stopped by policy", stopped.get("rule"))
    return ""


def run_stop_words(run: Run) -> str:
    """:func:`stop_words` for a run as recorded (its stopper read with it)."""
    by = run.cancel_requested_by if run.cancel_requested_by_id else None
    stopped = payloads.stopped_by(
        kind=run.cancel_kind,
        user=by.get_username() if by is not None else None,
        rule=run.cancel_reason,
    )
    return stop_words(payloads.told_stop(run.status, stopped))


def end_words(status: str, data: Mapping[str, Any]) -> str:
    """Why a run ended, from its end event's data: who stopped it, else its error
    (or its reason, for a cancel that names nobody)."""
    words = stop_words(data.get("stopped_by"))
    if words:
        return words
    error = data.get("error")
    if isinstance(error, Mapping) and error.get("message"):
        return one_line(str(error["message"]), 80)
    return one_line(str(data.get("reason") or ""), 80)


def wait_ended(status: str, seconds: float, why: str) -> str:
    """A wait its run's end cut short: "Canceled after 8 min 2 s: Stopped by an
    operator (maria)"."""
    ended = _ENDED.get(status, "Ended")
    text = f"{ended} after {format_duration(max(seconds, 0.0))}"
    return f"{text}: {why}" if why else text


# What a tool call cut short with its run says of that end ("the run canceled").
_CALL_ENDS = {f"the run {status.value}": status.value for status in RunStatus}


def run_status_of_call_end(reason: Any) -> str:
    """The status of the run whose end cut a tool call short, from the call's
    ``tool_call.canceled`` reason (empty when it says otherwise)."""
    return _CALL_ENDS.get(str(reason or ""), "")
