"""One session's conversation at a terminal: messages sent, runs followed until
they end, what they wait for asked at the prompt, Ctrl-C to stop.

Ctrl-C while a run is at work (or waits for an answer) asks it to stop, as the
chat page's Stop does; once it has, "Stopped." is printed and the prompt comes
back. A second Ctrl-C while it stops, or Ctrl-C or the end of input (Ctrl-D) at
the prompt, leaves.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.core.management.base import CommandError, OutputWrapper
from django.core.management.color import Style

from goaai.runtime import GoaaiError, rt
from goaai.runtime.errors import InvalidAnswer, RunActive
from goaai.runtime.executors import InlineExecutor, ThreadExecutor
from goaai.runtime.questions import Question
from goaai.runtime.vocabulary import RUN_END_EVENT_TYPES, AwaitingKind, EventType, RunStatus
from runs_app.models import Run, ToolCall
from runs_app.terminal.feed import Delta, Follower, LiveFeed, Notice
from runs_app.terminal.interrupts import Interrupts
from runs_app.terminal.transcript import Transcript
from sessions_app.models import Session

# The reason a stop from the terminal gives (the chat page's Stop gives the same).
STOP_REASON = "stopped by the user"
# The reason a run waiting for an answer is stopped with when input ends there.
CLOSED_REASON = "the terminal closed"
# How long the terminal waits for live news before it looks in the database.
QUIET_SECONDS = 0.25
# How long leaving waits for a run it stopped to end (it stops at its next step,
# within half a second while the model writes).
LEAVE_WAIT_SECONDS = 3.0
# A reply that picks choices by their numbers: "2", "1, 3".
_NUMBERS = re.compile(r"^\s*\d+(?:\s*,\s*\d+)*\s*$")


class Leave(Exception):
    """The user leaves the chat: a second Ctrl-C, or the end of input at a prompt."""


def picked(reply: str, question: Question) -> tuple[str | None, list[str] | None]:
    """A reply to ``question`` as an answer in words or as the choices it picks:
    numbers (comma-separated where several may be picked) pick the choices shown
    with them; anything else is an answer in words (which picks a choice it names)."""
    if question.choices and _NUMBERS.match(reply):
        numbers = [int(n) for n in reply.split(",")]
        if all(1 <= n <= len(question.choices) for n in numbers):
            return None, [question.choices[n - 1] for n in numbers]
    return reply.strip(), None


class TerminalChat:
    """The conversation in ``session``, printed to ``out``; ``read`` reads a line
    after a prompt (``input`` when not given)."""

    def __init__(
        self,
        *,
        session: Session,
        out: OutputWrapper,
        err: OutputWrapper,
        style: Style,
        feed: LiveFeed,
        interrupts: Interrupts,
        read: Callable[[str], str] | None = None,
    ) -> None:
        self.session = session
        self.err = err
        self.style = style
        self.feed = feed
        self.interrupts = interrupts
        self.read = read
        self.transcript = Transcript(out, style, session.agent)
        # The run being stopped from here, and whether the chat leaves once it has.
        self._stopping: str | None = None
        self._closing = False
        # A run this process may still be executing when the user left (the
        # process ends once its workers are done).
        self.left_running: str | None = None
        if feed.unavailable:
            self.transcript.write(
                f"(no live updates: {feed.unavailable}; each step shows once it is recorded)",
                style=style.WARNING,
            )

    # The prompt

    def prompt_loop(self) -> None:
        """Read messages at the prompt and send them, until the user leaves."""
        while True:
            try:
                line = self._read("you> ")
            except (EOFError, KeyboardInterrupt):
                self.transcript.write("")
                return
            if line.strip():
                self.send(line.strip())

    def _read(self, prompt: str) -> str:
        """The user's line after ``prompt``. Only the reading is interruptible:
        what the answer then starts (a thread of the executor, say) is not, and
        inherits the main thread's block of SIGINT (see ``interrupts``)."""
        with self.interrupts.prompting():
            return self.read(prompt) if self.read is not None else input(prompt)

    def send(self, message: str) -> bool:
        """Send ``message`` and follow its run until it ends; ``False`` if it was
        stopped (or not sent). :class:`Leave` when the user leaves meanwhile."""
        after = Session.objects.values_list("last_event_seq", flat=True).get(pk=self.session.pk)
        follower = Follower(self.session.id, after, self.feed)
        try:
            handle = rt.start(self.session.agent, message, session=self.session.id)
        except RunActive as exc:
            # The agent takes one message at a time and one is at work: the user
            # may send this again once it has ended.
            self.err.write(f"Not sent: {exc}")
            return False
        except GoaaiError as exc:
            raise CommandError(str(exc)) from exc
        run_id = str(handle.run_id)
        try:
            self._follow(follower, run_id)
        except Leave:
            if self._stopping is not None:  # Ctrl-C again while the run stops
                self._settle(follower, run_id)
            raise
        finally:
            self._stopping = None
        if self._closing:
            raise Leave
        return Run.objects.values_list("status", flat=True).get(pk=run_id) != RunStatus.CANCELED

    # Following a run

    def _follow(self, follower: Follower, run_id: str) -> None:
        while True:
            if self.interrupts.take():
                self._interrupted(run_id)
            with self.interrupts.listening():
                items = follower.next(QUIET_SECONDS)
            for item in items:
                if self._take(item, run_id):
                    return

    def _take(self, item: dict[str, Any] | Delta | Notice, run_id: str) -> bool:
        """Show one item; ``True`` once the run has ended."""
        if isinstance(item, Delta):
            self.transcript.delta(item)
            return False
        if isinstance(item, Notice):
            return self._notice(item)
        self.transcript.event(item)
        if item.get("run") != run_id:
            return False
        if item["type"] == EventType.RUN_AWAITING_INPUT and self._stopping is None:
            self._answer(UUID(run_id))
        return item["type"] in RUN_END_EVENT_TYPES

    def _notice(self, notice: Notice) -> bool:
        if notice.kind == "deleted":
            self.transcript.write("The session was deleted.", style=self.style.ERROR)
            raise Leave
        self.transcript.write(
            f"(live updates lost: {notice.detail}; each step shows once it is recorded)",
            style=self.style.WARNING,
        )
        return False

    def _interrupted(self, run_id: str) -> None:
        """Ctrl-C while the run is followed: the first stops it, the next leaves."""
        if self._stopping is not None:
            raise Leave
        self._stop(run_id, STOP_REASON)

    def _stop(self, run_id: str, reason: str) -> None:
        self._stopping = run_id
        self.transcript.stopping.add(run_id)
        try:
            # Stopped by the person at the terminal, who acts as the session's owner.
            rt.cancel_run(run_id, reason=reason, by=self.session.owner_id)
        except GoaaiError as exc:
            self.err.write(str(exc))

    def _settle(self, follower: Follower, run_id: str) -> None:
        """Before leaving: show the stopped run's end if it comes within a moment
        (Ctrl-C is not read any more), else say that it stops at its next step."""
        deadline = time.monotonic() + LEAVE_WAIT_SECONDS
        while time.monotonic() < deadline:
            self.interrupts.take()
            for item in follower.next(QUIET_SECONDS):
                if isinstance(item, Notice):
                    continue
                if self._take(item, run_id):
                    return
        if not isinstance(rt.executor, ThreadExecutor | InlineExecutor):
            # A worker elsewhere (Celery) executes it, and stops it there.
            self.transcript.write(f"Run {run_id} stops at its next step.")
            return
        self.left_running = run_id
        self.transcript.write(
            f"Run {run_id} stops at its next step; the chat ends once it has "
            "(Ctrl-C again ends it now)."
        )

    # What a run waits for

    def _answer(self, run_id: UUID) -> None:
        """Ask the user what the run waits for and send the answer. Ctrl-C here
        stops the run; the end of input stops it and leaves once it has."""
        target, awaiting = _waited_on(run_id)
        if awaiting is None:
            return  # answered already (in the web chat, say)
        try:
            self._ask(target, awaiting)
        except KeyboardInterrupt:
            self.transcript.write("")  # the prompt's line ends where Ctrl-C was pressed
            self._stop(str(run_id), STOP_REASON)
        except EOFError:
            self.transcript.write("")
            self._closing = True
            self._stop(str(run_id), CLOSED_REASON)
        except GoaaiError as exc:
            self.err.write(str(exc))

    def _ask(self, run_id: UUID, awaiting: dict[str, Any]) -> None:
        kind = awaiting.get("kind")
        if kind == AwaitingKind.QUESTION:
            self._ask_question(run_id, awaiting)
        elif kind == AwaitingKind.APPROVAL:
            self._ask_approval(run_id, awaiting)
        else:
            # Tools its caller runs: only the caller (the /v1/ API) can answer.
            self.transcript.write(f"  (run {run_id} waits for its caller's tools)")

    def _ask_approval(self, run_id: UUID, awaiting: dict[str, Any]) -> None:
        call = awaiting["tool_call"]
        name, arguments = ToolCall.objects.values_list("name", "arguments").get(pk=call)
        self.transcript.write(
            f"  ? {name}({json.dumps(arguments)}) waits for your approval",
            style=self.style.WARNING,
        )
        approved = self._read("Approve? [y/N] ").strip().lower() in ("y", "yes")
        reason = self._read("Reason (optional): ").strip()
        rt.respond(
            run_id,
            tool_call=call,
            decision="approve" if approved else "deny",
            reason=reason,
            user=self.session.owner_id,
        )

    def _ask_question(self, run_id: UUID, awaiting: dict[str, Any]) -> None:
        question = Question.of(awaiting)
        self.transcript.write(f"  ? {question.text}", style=self.style.WARNING)
        for number, choice in enumerate(question.choices, start=1):
            self.transcript.write(f"    {number}. {choice}")
        if not question.choices:
            prompt = "Answer: "
        elif question.multiple:
            prompt = "Answer (numbers separated by commas, or in words): "
        else:
            prompt = "Answer (a number, or in words): "
        while True:
            answer, choices = picked(self._read(prompt), question)
            try:
                rt.respond(
                    run_id,
                    tool_call=awaiting["tool_call"],
                    answer=answer,
                    choices=choices,
                    user=self.session.owner_id,
                )
                return
            except InvalidAnswer as exc:
                self.transcript.write(str(exc), style=self.style.ERROR)


def _waited_on(run_id: UUID) -> tuple[UUID, dict[str, Any] | None]:
    """The run that holds what ``run_id`` waits for (itself, or the run of the agent
    it called, which waits for a person) and what that is; ``None`` if nothing is
    awaited any more."""
    for _ in range(16):  # agents called as tools, at most this deep
        row = Run.objects.values_list("status", "awaiting").filter(pk=run_id).first()
        if row is None or row[0] != RunStatus.AWAITING_INPUT or not row[1]:
            return run_id, None
        awaiting: dict[str, Any] = row[1]
        if awaiting.get("kind") != AwaitingKind.DELEGATED or not awaiting.get("child_run"):
            return run_id, awaiting
        run_id = UUID(str(awaiting["child_run"]))
    return run_id, None
