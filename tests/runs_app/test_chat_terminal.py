"""``manage.py chat`` in a real terminal (a pseudo-terminal): the answer streams as
the model writes it, Ctrl-C stops the run and a second Ctrl-C leaves without a
traceback, approvals and questions are asked at the prompt, Ctrl-D leaves.

The command runs as a person runs it, in a process of its own with goaai's
settings, on a SQLite file (the embedded default: runs execute in the command's
own worker threads) that the test reads directly.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goaai.runtime.models.scripted import STORY
from runs_app.models import Run, ToolCall
from tests.pty_terminal import Terminal
from tests.sqlite_file import ROOT, run_on_a_sqlite_file

SETUP = """
import django, json
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
alice = get_user_model().objects.create_user(username="alice", password="wonderland-42")
print("REPORT " + json.dumps({"alice": alice.pk}))
"""


class ChatDatabase:
    """The SQLite file the commands share, read as the test needs it."""

    def __init__(self, folder: Path, alice: int) -> None:
        self.path = folder / "goaai.sqlite3"
        self.alice = alice

    def rows(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        with sqlite3.connect(self.path, timeout=10) as db:
            db.row_factory = sqlite3.Row
            return db.execute(sql, params).fetchall()

    def run(self, input: str) -> sqlite3.Row:
        """The newest run of the message ``input``."""
        found = self.rows(
            f"SELECT * FROM {Run._meta.db_table} WHERE input = ? ORDER BY created_at DESC",  # noqa: S608
            input,
        )
        assert found, f"no run of {input!r}"
        return found[0]

    def tool_call(self, run_id: str, name: str) -> sqlite3.Row:
        (found,) = self.rows(
            f"SELECT * FROM {ToolCall._meta.db_table} WHERE run_id = ? AND name = ?",  # noqa: S608
            run_id,
            name,
        )
        return found


@pytest.fixture(scope="module")
def chat_db(tmp_path_factory: pytest.TempPathFactory) -> ChatDatabase:
    folder = tmp_path_factory.mktemp("terminal-chat")
    report, _ = run_on_a_sqlite_file(SETUP, folder)
    return ChatDatabase(folder, report["alice"])


@pytest.fixture
def terminal(chat_db: ChatDatabase) -> Iterator[Any]:
    """Start ``manage.py chat`` with these arguments in a terminal of its own."""
    started: list[Terminal] = []

    def start(*args: str) -> Terminal:
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
        }
        env.update(
            DJANGO_SETTINGS_MODULE="goaai.settings",
            DATABASE_URL=f"sqlite:///{chat_db.path}",
            GOAAI_REAPER_INTERVAL="0",
            GOAAI_AGENTS="tests.runs_app.chat_agents.PAUSER",
            PYTHONPATH=str(ROOT),
        )
        command = [sys.executable, "manage.py", "chat", "--user", "alice", *args]
        term = Terminal(command, env=env, cwd=ROOT)
        started.append(term)
        term.expect(r"Ctrl-C stops a run, Ctrl-D leaves\.\n")
        term.expect(r"you> ")
        return term

    yield start
    for term in started:
        term.close()


def test_the_answer_streams_as_the_model_writes_it(terminal, chat_db):
    term = terminal()
    term.type("tell me a story\n")
    term.expect(r"assistant> Once upon a time")
    # The run is still at work while its first words are on the screen.
    assert chat_db.run("tell me a story")["status"] == "running"
    first = time.monotonic()
    term.expect(r"the way you like your tea\.\nyou> ")

    # The story came in many reads, spread over the seconds the model took.
    story_reads = [(at, chunk) for at, chunk in term.reads if at >= first]
    assert len(story_reads) >= 10
    assert story_reads[-1][0] - first > 2
    assert f"assistant> {STORY}\n" in term.text
    assert chat_db.run("tell me a story")["status"] == "completed"
    assert "Traceback" not in term.text


def test_ctrl_c_stops_the_run_and_the_prompt_comes_back(terminal, chat_db):
    term = terminal()
    term.type("tell me a story\n")
    term.expect(r"in a town where")
    term.ctrl_c()
    term.expect(r"\nStopped\.\nyou> ")

    run = chat_db.run("tell me a story")
    assert (run["status"], run["cancel_reason"]) == ("canceled", "stopped by the user")
    # Stopped by its own user, the session's owner at the terminal.
    assert (run["cancel_kind"], run["cancel_requested_by_id"]) == ("user", chat_db.alice)
    # The story was cut short, and what was said of it is kept.
    assert "the way you like your tea" not in term.text
    assert run["output"].startswith("Once upon a time, in a town where")

    # The chat goes on; Ctrl-C at the prompt leaves, cleanly.
    term.type("echo still here\n")
    term.expect(r"assistant> still here\nyou> ")
    term.ctrl_c()
    assert term.wait() == 0
    assert "Traceback" not in term.text


def test_a_second_ctrl_c_while_the_run_stops_leaves(terminal, chat_db):
    # The tool takes 10 s; the run stops once it has returned.
    message = 'call pause {"seconds": 10}'
    term = terminal("--agent", "pauser")
    term.type(message + "\n")
    term.expect(r'-> pause\(\{"seconds": 10\}\)\n')
    term.ctrl_c()
    assert chat_db.run(message)["status"] == "running"
    time.sleep(0.5)
    term.ctrl_c()
    term.expect(
        r"stops at its next step; the chat ends once it has \(Ctrl-C again ends it now\)\.\n"
    )

    # The process ends once its worker has stopped the run, after the tool.
    assert term.wait() == 0
    assert "Traceback" not in term.text
    assert "KeyboardInterrupt" not in term.text
    run = chat_db.run(message)
    assert (run["status"], run["cancel_reason"]) == ("canceled", "stopped by the user")


def test_ctrl_c_while_the_chat_waits_to_end_ends_it_at_once(terminal, chat_db):
    message = 'call pause {"seconds": 20}'
    term = terminal("--agent", "pauser")
    term.type(message + "\n")
    term.expect(r"-> pause")
    term.ctrl_c()
    time.sleep(0.5)
    term.ctrl_c()
    term.expect(r"stops at its next step")
    started = time.monotonic()
    term.ctrl_c()

    assert term.wait() == 130  # as a shell reports an end by SIGINT
    assert time.monotonic() - started < 10
    assert "Traceback" not in term.text
    # The stop is recorded: whichever server or worker takes the run up stops it.
    run = chat_db.run(message)
    assert (run["status"], run["cancel_reason"]) == ("running", "stopped by the user")


def test_a_call_that_needs_approval_asks_then_asks_why(terminal, chat_db):
    term = terminal()
    term.type("remember my favourite colour is green\n")
    term.expect(r"you> ")
    term.type("forget everything\n")
    term.expect(r"\? memory_forget_all\(\{\}\) waits for your approval\nApprove\? \[y/N\] ")
    term.type("n\n")
    term.expect(r"Reason \(optional\): ")
    term.type("keep my notes\n")
    term.expect(r"assistant> I couldn't do that: A person denied this call: keep my notes\n")
    term.expect(r"you> ")

    run = chat_db.run("forget everything")
    call = chat_db.tool_call(run["id"], "memory_forget_all")
    assert (call["status"], call["decision"], call["decided_by_id"]) == (
        "denied",
        "denied",
        chat_db.alice,
    )

    # Approved, with the reason left out.
    term.type("forget everything\n")
    term.expect(r"Approve\? \[y/N\] ")
    term.type("y\n")
    term.expect(r"Reason \(optional\): ")
    term.type("\n")
    term.expect(r"assistant> Done\. I've forgotten everything in this conversation")
    term.ctrl_d()
    assert term.wait() == 0


def test_a_question_shows_its_choices_and_takes_their_numbers(terminal, chat_db):
    term = terminal()
    term.type("ask me to choose any of tea, coffee or water\n")
    term.expect(r"\? .+\n    1\. tea\n    2\. coffee\n    3\. water\n")
    term.expect(r"Answer \(numbers separated by commas, or in words\): ")
    term.type("1, 3\n")
    term.expect(r"you> ")

    run = chat_db.run("ask me to choose any of tea, coffee or water")
    call = chat_db.tool_call(run["id"], "ask_user")
    assert json.loads(call["result"]) == {"answer": "tea, water", "chosen": ["tea", "water"]}

    # A question without choices is answered in words; an empty answer is asked again.
    term.type("ask me for my name\n")
    term.expect(r"\? What is your name\?\nAnswer: ")
    term.type("\n")
    term.expect(r"The answer is empty\.\nAnswer: ")
    term.type("Ada\n")
    term.expect(r"assistant> Thanks! Your name is Ada\.\nyou> ")
    term.ctrl_d()
    assert term.wait() == 0


def test_ctrl_c_at_a_question_stops_the_run(terminal, chat_db):
    term = terminal()
    term.type("ask me for my name\n")
    term.expect(r"Answer: ")
    term.ctrl_c()
    term.expect(r"\nStopped\.\nyou> ")
    run = chat_db.run("ask me for my name")
    assert (run["status"], run["cancel_reason"]) == ("canceled", "stopped by the user")

    term.ctrl_d()
    assert term.wait() == 0
    assert "Traceback" not in term.text
