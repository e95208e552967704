"""A session's events and streamed text, printed as a terminal chat shows them.

The answer is printed as the model writes it, on a line of its own that starts with
the agent's name; the turn's ``message.completed`` then ends that line (and brings
whatever did not arrive as it was written). Tool calls, their results and how each
run ended are printed as they happen.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.management.base import OutputWrapper
from django.core.management.color import Style

from goaai.runtime.vocabulary import EventType
from runs_app.models import Run, ToolCall
from runs_app.terminal.feed import Delta

# How a stop is told, by who or what stopped the run (the ``stopped_by`` of its
# ``run.canceled`` event, when the event says).
_STOPPED_BY: dict[str, Callable[[dict[str, Any]], str]] = {
    "user": lambda by: "Stopped by you",
    "operator": lambda by: (
        "Stopped by an operator" + (f" ({by['user']})" if by.get("user") else "")
    ),
    "superseded": lambda by: "Replaced by your next message",
    "policy": lambda by: "Stopped by policy" + (f" ({by['rule']})" if by.get("rule") else ""),
}


def stopped_text(data: dict[str, Any]) -> str:
    """How a run that someone or something else stopped is told."""
    by = data.get("stopped_by") or {}
    told = _STOPPED_BY[str(by.get("kind"))](by) if by.get("kind") in _STOPPED_BY else "Stopped"
    reason = data.get("reason")
    return f"{told}: {reason}" if reason else f"{told}."


@dataclass
class _Line:
    """The answer being streamed: its run, its turn and what was printed of it."""

    run: str
    turn: str
    text: str = ""


class Transcript:
    """Prints what happens in a session; ``stopping`` holds the runs the user
    stopped from this terminal (their end is told as "Stopped.")."""

    def __init__(self, out: OutputWrapper, style: Style, agent: str) -> None:
        self.out = out
        self.style = style
        self.stopping: set[str] = set()
        self._agents: dict[str, str] = {}
        self._default_agent = agent
        self._arguments: dict[str, Any] = {}
        self._line: _Line | None = None
        # The last answer printed for each run, which its run.completed repeats.
        self._answers: dict[str, str] = {}

    # Streamed text

    def delta(self, delta: Delta) -> None:
        line = self._line
        text = delta.text
        if line is not None and (line.run, line.turn) == (delta.run, delta.turn):
            if delta.offset is not None and delta.offset < len(line.text):
                # Part of this piece was printed already.
                text = text[len(line.text) - delta.offset :]
        else:
            self.end_line()
            line = self._line = _Line(run=delta.run, turn=delta.turn)
            self._write(f"{self._agent(delta.run)}> ", ending="")
        if text:
            line.text += text
            self._write(text, ending="")

    def end_line(self) -> None:
        """End the answer being streamed, if any: what comes next is on a line of
        its own."""
        if self._line is not None:
            self._line = None
            self._write("")

    # Events

    def event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        data = event.get("data") or {}
        run = str(event.get("run"))
        if kind == EventType.MESSAGE_COMPLETED:
            self._message(run, str(data.get("turn")), str(data.get("text") or ""))
            return
        if kind in (EventType.RUN_CREATED, EventType.RUN_STARTED) and data.get("agent"):
            self._agents[run] = str(data["agent"])
        if kind == EventType.TOOL_CALL_SCHEDULED:
            self._arguments[str(data.get("tool_call"))] = data.get("arguments")
        told = self._told(kind, run, data)
        if told is not None:
            self.end_line()
            self._write(told[0], style=told[1])

    def _told(
        self, kind: str, run: str, data: dict[str, Any]
    ) -> tuple[str, Callable[[str], str] | None] | None:
        """The line an event is told with, and its style; ``None`` for an event
        the terminal does not tell."""
        name = data.get("name")
        if kind == EventType.TOOL_CALL_STARTED:
            arguments = json.dumps(self._call_arguments(str(data.get("tool_call"))))
            return f"  -> {name}({arguments})", self.style.NOTICE
        if kind == EventType.TOOL_CALL_SUCCEEDED:
            return f"  <- {name}: {json.dumps(data.get('result'))}", self.style.SUCCESS
        if kind == EventType.TOOL_CALL_FAILED:
            error = data.get("error") or {}
            failed = f"  <- {name} failed ({error.get('kind')}): {error.get('message')}"
            return failed, self.style.ERROR
        if kind == EventType.MODEL_RETRY:
            retry = (
                f"  (the model failed, {data.get('error_kind')}: {data.get('message')}; retrying)"
            )
            return retry, self.style.WARNING
        if kind == EventType.RUN_INTERRUPTED:
            return f"  (interrupted: {data.get('reason')}; resuming)", self.style.WARNING
        if kind == EventType.RUN_QUEUED:
            # Another run of the session (from the web chat, say) is still at work.
            queued = f"  (queued: starts when run {data.get('behind')} has ended)"
            return queued, self.style.WARNING
        if kind == EventType.POLICY_DECISION:
            return f"  policy {data.get('rule')}: {data.get('reason')}", self.style.WARNING
        return self._ending(kind, run, data)

    def _ending(
        self, kind: str, run: str, data: dict[str, Any]
    ) -> tuple[str, Callable[[str], str] | None] | None:
        if kind == EventType.RUN_COMPLETED:
            output = str(data.get("output") or "")
            if not output or self._answers.get(run) == output:
                return None
            return f"{self._agent(run)}> {output}", None
        if kind in (EventType.RUN_FAILED, EventType.RUN_TIMED_OUT):
            error = data.get("error") or {}
            return f"run {kind.split('.')[1]}: {error.get('message')}", self.style.ERROR
        if kind == EventType.RUN_CANCELED:
            told = "Stopped." if run in self.stopping else stopped_text(data)
            return told, self.style.WARNING
        return None

    def _message(self, run: str, turn: str, text: str) -> None:
        """A turn's text is complete: end its streamed line with what did not
        arrive, or print it whole."""
        line = self._line
        self._answers[run] = text
        if line is not None and (line.run, line.turn) == (run, turn) and text.startswith(line.text):
            if text != line.text:
                self._write(text[len(line.text) :], ending="")
            self.end_line()
            return
        self.end_line()
        if text:
            self._write(f"{self._agent(run)}> {text}")

    # Helpers

    def _agent(self, run: str) -> str:
        if run not in self._agents:
            found = Run.objects.filter(pk=run).values_list("agent", flat=True).first()
            self._agents[run] = found or self._default_agent
        return self._agents[run]

    def _call_arguments(self, tool_call: str) -> Any:
        if tool_call not in self._arguments:
            found = ToolCall.objects.filter(pk=tool_call).values_list("arguments", flat=True)
            self._arguments[tool_call] = found.first()
        return self._arguments[tool_call]

    def write(self, text: str, style: Callable[[str], str] | None = None) -> None:
        """Print a line of the command's own (a prompt's preamble, a notice)."""
        self.end_line()
        self._write(text, style=style)

    def _write(self, text: str, *, ending: str | None = None, style: Any = None) -> None:
        self.out.write(text, style_func=style, ending=ending)
        self.out.flush()
