"""Chat with an agent from the terminal: its answer streams as the model writes it,
its tool calls show as they happen, what it waits for is asked at the prompt, and
Ctrl-C stops it (see :mod:`runs_app.terminal`)."""

from __future__ import annotations

import contextlib
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from goaai.runtime import GoaaiError, rt
from runs_app.terminal.conversation import Leave, TerminalChat
from runs_app.terminal.feed import LiveFeed
from runs_app.terminal.interrupts import Interrupts, end_at_once_on_interrupt
from sessions_app.models import Session


class Command(BaseCommand):
    help = (
        "Chat with an agent in the terminal. Answers stream as they are written, tool "
        "calls are printed as they happen; Ctrl-C stops a run, Ctrl-D leaves."
    )

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
        self.stdout.write(
            f"Session {session.id} with {session.agent}. Ctrl-C stops a run, Ctrl-D leaves."
        )
        # The user's messages, not the runs agents started for each other.
        earlier = session.runs.filter(parent_run__isnull=True).count()
        if earlier:
            self.stdout.write(f"(continuing after {earlier} earlier runs)")
        # Subscribed before the first message is sent: nothing it streams is missed.
        with Interrupts() as interrupts, LiveFeed(session.id) as feed:
            chat = TerminalChat(
                session=session,
                out=self.stdout,
                err=self.stderr,
                style=self.style,
                feed=feed,
                interrupts=interrupts,
            )
            with contextlib.suppress(Leave):
                self._converse(chat, options["message"])
        if chat.left_running is not None:
            # The process ends once its worker threads are done with the run it
            # stopped; another Ctrl-C while it waits ends it now (the run is then
            # taken up, and stopped, by whichever server or worker finds it).
            end_at_once_on_interrupt()

    @staticmethod
    def _converse(chat: TerminalChat, messages: list[str]) -> None:
        if not messages:
            chat.prompt_loop()
            return
        for message in messages:
            if not chat.send(message):
                return  # stopped: the messages after it are not sent

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
