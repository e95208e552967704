"""Chat with an agent from the terminal, watching its tool calls as they happen."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any, TextIO
from uuid import UUID

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from goaai.runtime import GoaaiError, rt
from goaai.runtime.errors import RunActive
from goaai.runtime.vocabulary import EventType, RunStatus
from runs_app.models import Run, ToolCall
from sessions_app.eventlog import events_after
from sessions_app.models import RunEvent, Session

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Chat with an agent in the terminal. Tool calls are printed as they happen."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", default="assistant", help="the agent to talk to")
        parser.add_argument("--session", help="continue this session instead of starting one")
        parser.add_argument("--user", default="", help="the user the session belongs to")
        parser.add_argument("--message", action="append", default=[], help="send this and exit")

    def handle(self, *args: Any, **options: Any) -> None:
        agent = options["agent"]
        try:
            rt.agents.get(agent)
        except GoaaiError as exc:
            names = ", ".join(a.id for a in rt.agents.all())
            raise CommandError(f"{exc} Agents: {names}.") from exc
        session = self._session(options["session"], options["user"], agent)
        self.stdout.write(f"Session {session.id} with {session.agent}. Ctrl-D to leave.")
        # The user's messages, not the runs agents started for each other.
        earlier = session.runs.filter(parent_run__isnull=True).count()
        if earlier:
            self.stdout.write(f"(continuing after {earlier} earlier runs)")
        messages = options["message"]
        if messages:
            for message in messages:
                self._exchange(session, message)
            return
        while True:
            try:
                line = input("you> ")
            except (EOFError, KeyboardInterrupt):
                self.stdout.write("")
                return
            if line.strip():
                self._exchange(session, line.strip())

    def _session(self, session_id: str | None, username: str, agent: str) -> Session:
        if session_id:
            try:
                return Session.objects.get(pk=UUID(session_id))
            except (ValueError, Session.DoesNotExist) as exc:
                raise CommandError(f"No session {session_id}.") from exc
        users = get_user_model()
        user = (
            users.objects.filter(username=username).first()
            if username
            else users.objects.filter(is_superuser=True).order_by("pk").first()
        )
        if user is None:
            raise CommandError("No such user: pass --user, or create an admin (make run does).")
        info = rt.create_session(owner=user, agent=agent, title="Terminal chat")
        return Session.objects.get(pk=info.id)

    def _exchange(self, session: Session, message: str) -> None:
        after = Session.objects.get(pk=session.pk).last_event_seq
        try:
            handle = rt.start(session.agent, message, session=session.id)
        except RunActive as exc:
            # The agent takes one message at a time and one is at work: the user
            # may send this again once it has ended.
            self.stderr.write(f"Not sent: {exc}")
            return
        except GoaaiError as exc:
            raise CommandError(str(exc)) from exc
        done = threading.Event()

        def wait_for_run() -> None:
            # A thread of its own: it gives its database connection back when done,
            # and always says it is done, even if waiting failed.
            try:
                with rt.store.worker():
                    handle.wait()
            except Exception:
                # The loop below keeps watching the run's record and reports it.
                logger.exception("Waiting for run %s failed", handle.run_id)
            finally:
                done.set()

        threading.Thread(target=wait_for_run, daemon=True).start()
        while True:
            for event in events_after(session_id=session.id, after=after):
                after = event.seq
                self._show(event, self.stdout)
            run = rt.get_run(handle.run_id)
            if run.status == RunStatus.AWAITING_INPUT:
                self._answer(run.id)
                continue
            if RunStatus(run.status).is_terminal and done.is_set():
                for event in events_after(session_id=session.id, after=after):
                    after = event.seq
                    self._show(event, self.stdout)
                return
            time.sleep(0.05)

    def _show(self, event: RunEvent, out: TextIO | Any) -> None:
        data = event.data
        if event.type == EventType.TOOL_CALL_STARTED:
            call = ToolCall.objects.filter(pk=data.get("tool_call")).first()
            arguments = json.dumps(call.arguments) if call else ""
            out.write(self.style.NOTICE(f"  -> {data.get('name')}({arguments})"))
        elif event.type == EventType.TOOL_CALL_SUCCEEDED:
            out.write(
                self.style.SUCCESS(f"  <- {data.get('name')}: {json.dumps(data.get('result'))}")
            )
        elif event.type == EventType.TOOL_CALL_FAILED:
            error = data.get("error") or {}
            out.write(
                self.style.ERROR(
                    f"  <- {data.get('name')} failed ({error.get('kind')}): {error.get('message')}"
                )
            )
        elif event.type == EventType.RUN_QUEUED:
            # Another run of the session (from the web chat, say) is still at work.
            out.write(
                self.style.WARNING(f"  (queued: starts when run {data.get('behind')} has ended)")
            )
        elif event.type == EventType.POLICY_DECISION:
            out.write(self.style.WARNING(f"  policy {data.get('rule')}: {data.get('reason')}"))
        elif event.type == EventType.RUN_COMPLETED:
            out.write(f"{event.run.agent if event.run else 'agent'}> {data.get('output')}")
        elif event.type in (EventType.RUN_FAILED, EventType.RUN_TIMED_OUT):
            error = data.get("error") or {}
            out.write(self.style.ERROR(f"run {event.type.split('.')[1]}: {error.get('message')}"))
        elif event.type == EventType.RUN_CANCELED:
            out.write(self.style.WARNING(f"run canceled: {data.get('reason')}"))

    def _answer(self, run_id: UUID) -> None:
        awaiting = Run.objects.get(pk=run_id).awaiting or {}
        try:
            if awaiting.get("kind") == "question":
                # Typing one of the choices picks it; anything else is an answer of its own.
                choices = awaiting.get("choices") or []
                offered = f" [{' / '.join(choices)}]" if choices else ""
                reply = input(f"{awaiting.get('question')}{offered} > ")
                rt.respond(run_id, answer=reply)
            else:
                call = ToolCall.objects.get(pk=str(awaiting.get("tool_call")))
                prompt = f"Allow {call.name}({json.dumps(call.arguments)})? [y/N] "
                allowed = input(prompt).strip().lower() in ("y", "yes")
                reason = "" if allowed else input("Why not? ")
                rt.respond(run_id, decision="approve" if allowed else "deny", reason=reason)
        except EOFError:
            rt.cancel_run(run_id, reason="the terminal closed")
        except GoaaiError as exc:
            sys.stderr.write(f"{exc}\n")
